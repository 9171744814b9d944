# Baking wi-credential-provider into a node image with Packer: upload the
# release binary, its checksum, install.sh and the entries to add, then run
# install.sh --node as the DaemonSet does: after the checksum check it hands
# over to `wi-credential-provider node install`, which finds the image's
# kubelet set-up (EKS AL2023: its own config file and a NodeConfig drop-in in
# /etc/eks/nodeadm.d/ that nodeadm applies at every boot; kubeadm: the two
# flags in /etc/default/kubelet) and merges the entries in. --proc none: no
# kubelet runs while the image is built. Merge these provisioners into your
# node image's build block (amazon-ebs, azure-arm, googlecompute, ...).

variable "wicp_version" {
  type    = string
  default = "0.1.0"
}

variable "wicp_arch" {
  type    = string
  default = "amd64" # arm64 for Graviton, Ampere, Axion ...
}

variable "wicp_config" {
  type    = string
  default = "config-examples/aws-web-identity/credential-provider-config.yaml"
}

build {
  # sources = ["source.amazon-ebs.node"]

  provisioner "shell" {
    inline = ["mkdir -p /tmp/wicp"]
  }

  provisioner "file" {
    sources = [
      "dist/wi-credential-provider-${var.wicp_version}-linux-${var.wicp_arch}",
      "dist/wi-credential-provider-${var.wicp_version}-linux-${var.wicp_arch}.sha256",
      "node-install/install.sh",
    ]
    destination = "/tmp/wicp/"
  }

  provisioner "file" {
    source      = var.wicp_config
    destination = "/tmp/wicp/credential-provider.yaml"
  }

  provisioner "shell" {
    inline = [
      # On EKS add: --replace ecr-credential-provider=602401143452.dkr.ecr.<region>.amazonaws.com
      "sudo sh /tmp/wicp/install.sh --node --binary /tmp/wicp/wi-credential-provider-${var.wicp_version}-linux-${var.wicp_arch} --config /tmp/wicp/credential-provider.yaml -- --proc none",
      "rm -rf /tmp/wicp",
    ]
  }
}
