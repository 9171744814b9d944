# Baking wi-credential-provider into a node image with Packer: upload the
# release binary, its checksum, install.sh and the config, then run the same
# install.sh the DaemonSet runs. Merge these provisioners into your node
# image's build block (amazon-ebs, azure-arm, googlecompute, ...).
#
# The kubelet flags still have to be set where your image starts the kubelet;
# install.sh prints them. The last provisioner shows the kubeadm convention
# (/etc/default/kubelet). On EKS AL2023 images set them in nodeadm's
# NodeConfig (spec.kubelet.flags) instead.

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
      "sudo sh /tmp/wicp/install.sh --binary /tmp/wicp/wi-credential-provider-${var.wicp_version}-linux-${var.wicp_arch} --config /tmp/wicp/credential-provider.yaml",
      "rm -rf /tmp/wicp",
    ]
  }

  provisioner "shell" {
    inline = [
      "echo 'KUBELET_EXTRA_ARGS=--image-credential-provider-config=/etc/kubernetes/credential-provider.yaml --image-credential-provider-bin-dir=/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec' | sudo tee -a /etc/default/kubelet",
    ]
  }
}
