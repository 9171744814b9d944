# Baking wi-credential-provider into a node image with Packer: upload the
# release's package for the image's family and architecture, with the
# release's SHA256SUMS, its signature, install.sh and your pinned copy of the
# release key, then run install.sh --package: it checks the signature and the
# package's sha256 before anything is written (docs/release.md), installs the
# package with rpm or dpkg, and hands over to the installed
# `wi-credential-provider node install`, which finds the image's kubelet
# set-up (EKS AL2023: its own config file and a NodeConfig drop-in in
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

variable "wicp_package" {
  type    = string
  default = "rpm" # Amazon Linux 2023, RHEL family; deb for Ubuntu, Debian
}

# The release key, pinned from where you trust it (not the download).
variable "wicp_release_key" {
  type    = string
  default = "keys/wi-credential-provider-release.pub"
}

variable "wicp_config" {
  type    = string
  default = "config-examples/aws-web-identity/credential-provider-config.yaml"
}

locals {
  wicp_file = var.wicp_package == "rpm" ? "wi-credential-provider-${var.wicp_version}-1.${var.wicp_arch == "arm64" ? "aarch64" : "x86_64"}.rpm" : "wi-credential-provider_${var.wicp_version}_${var.wicp_arch}.deb"
}

build {
  # sources = ["source.amazon-ebs.node"]

  provisioner "shell" {
    inline = ["mkdir -p /tmp/wicp"]
  }

  provisioner "file" {
    sources = [
      "dist/${local.wicp_file}",
      "dist/SHA256SUMS",
      "dist/SHA256SUMS.sig",
      "dist/install.sh",
    ]
    destination = "/tmp/wicp/"
  }

  provisioner "file" {
    source      = var.wicp_release_key
    destination = "/tmp/wicp/release-key.pub"
  }

  provisioner "file" {
    source      = var.wicp_config
    destination = "/tmp/wicp/credential-provider.yaml"
  }

  provisioner "shell" {
    inline = [
      # On EKS add: --replace ecr-credential-provider=602401143452.dkr.ecr.<region>.amazonaws.com
      "sudo sh /tmp/wicp/install.sh --package /tmp/wicp/${local.wicp_file} --sha256 /tmp/wicp/SHA256SUMS --signature /tmp/wicp/SHA256SUMS.sig --public-key /tmp/wicp/release-key.pub --config /tmp/wicp/credential-provider.yaml -- --proc none",
      "rm -rf /tmp/wicp",
    ]
  }
}
