#!/usr/bin/env bash
# Builds the .deb and .rpm packages for image bakes (Debian and Ubuntu
# use deb; Amazon Linux 2023 and the RHEL family use rpm), one per
# architecture, with each distribution's own packager: Debian's dpkg-deb,
# and rpmbuild from Debian's rpm package (RPM 4.18). No package-building
# crate is compiled and no packaging format is written by hand: the control
# file and the spec below are what those tools read.
#
#   scripts/package.sh VERSION OUTDIR ARCH=BINARY [ARCH=BINARY...]
#
# A package installs the binary and its documents only:
#   /usr/bin/wi-credential-provider                  0755 root:root
#   /usr/share/doc/wi-credential-provider/            README.md, CHANGELOG.md,
#                                                     node.md, release.md
#   /usr/share/doc/wi-credential-provider/copyright   (deb) the license
#   /usr/share/licenses/wi-credential-provider/LICENSE (rpm) the license
# It never touches the kubelet's configuration: its post-install message
# names the `node install` command that does (docs/commands/node.md), and
# removing it removes exactly those files. Timestamps are
# SOURCE_DATE_EPOCH (default: the commit's time).
set -euo pipefail
cd "$(dirname "$0")/.."

[ "$#" -ge 3 ] || { echo "usage: scripts/package.sh VERSION OUTDIR ARCH=BINARY [ARCH=BINARY...]" >&2; exit 2; }
version=$1 out=$2
shift 2
for tool in dpkg-deb rpmbuild file; do
  command -v "$tool" >/dev/null || { echo "package: needs $tool (apt-get install dpkg-dev rpm file)" >&2; exit 1; }
done
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

summary="Kubelet image credential provider: each pod pulls images with its own identity"
read -r -d '' description <<'EOF' || true
The kubelet runs it for each image pull with the pod's service account
token (KEP-4412) and it returns registry credentials for that identity
(AWS, Azure, Google Cloud, Vault, JFrog, Quay, Cloudsmith, Chainguard,
RFC 8693 token servers, or the token itself).
EOF
# Plain text for the maintainer scripts' echo: no quote, backquote or
# dollar sign, which their shell would read.
message="wi-credential-provider is installed in /usr/bin; the kubelet does not use it yet. To add it to this node's kubelet configuration, run: wi-credential-provider node install --provider aws (or azure, gcp; or --config FILE). See /usr/share/doc/wi-credential-provider/node.md"

# stage DIR BINARY: the files every package carries, under DIR.
stage() {
  local root=$1 binary=$2 docs=$1/usr/share/doc/wi-credential-provider
  install -D -m 0755 "$binary" "$root/usr/bin/wi-credential-provider"
  install -D -m 0644 README.md "$docs/README.md"
  install -D -m 0644 CHANGELOG.md "$docs/CHANGELOG.md"
  install -D -m 0644 docs/commands/node.md "$docs/node.md"
  install -D -m 0644 docs/release.md "$docs/release.md"
}

for pair in "$@"; do
  arch=${pair%%=*} binary=${pair#*=}
  description_of=$(file -b "$binary")
  case "$arch:$description_of" in
    amd64:*"ELF 64-bit"*"x86-64"*"statically linked"*) rpm_arch=x86_64 ;;
    arm64:*"ELF 64-bit"*"ARM aarch64"*"statically linked"*) rpm_arch=aarch64 ;;
    amd64:* | arm64:*)
      echo "package: $binary is not a static linux/$arch executable: $description_of" >&2
      exit 1
      ;;
    *) echo "package: unknown architecture $arch (amd64 or arm64)" >&2; exit 2 ;;
  esac

  # The .deb.
  root=$work/deb-$arch
  stage "$root" "$binary"
  { echo "Copyright: the wi-credential-provider authors"; echo "License: Apache-2.0"; echo; cat LICENSE; } \
    > "$root/usr/share/doc/wi-credential-provider/copyright"
  chmod 0644 "$root/usr/share/doc/wi-credential-provider/copyright"
  mkdir -p "$root/DEBIAN"
  {
    echo "Package: wi-credential-provider"
    echo "Version: $version"
    echo "Architecture: $arch"
    echo "Maintainer: wi-credential-provider maintainers <maintainers@wi-credential-provider.invalid>"
    echo "Section: admin"
    echo "Priority: optional"
    echo "Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)"
    echo "Description: $summary"
    while IFS= read -r line; do echo " $line"; done <<<"$description"
  } > "$root/DEBIAN/control"
  # shellcheck disable=SC2016 # $1 is the maintainer script's, not ours
  printf '#!/bin/sh\nset -e\nif [ "$1" = configure ]; then\n  echo "%s"\nfi\nexit 0\n' "$message" > "$root/DEBIAN/postinst"
  chmod 0755 "$root/DEBIAN/postinst"
  deb="$out/wi-credential-provider_${version}_${arch}.deb"
  dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
  echo "package: $deb"

  # The .rpm: the staged files, as they are (no build, no strip).
  rpmroot=$work/rpm-$arch
  stage "$rpmroot/stage" "$binary"
  install -D -m 0644 LICENSE "$rpmroot/stage/usr/share/licenses/wi-credential-provider/LICENSE"
  cat > "$rpmroot/wi-credential-provider.spec" <<EOF
%global debug_package %{nil}
%global __strip /bin/true
%global __os_install_post %{nil}
%global _build_id_links none
%define _rpmfilename %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm
Name: wi-credential-provider
Version: $version
Release: 1
Summary: $summary
License: Apache-2.0
URL: https://github.com/wi-credential-provider/wi-credential-provider
AutoReqProv: no

%description
$description

%install
cp -a $rpmroot/stage/. %{buildroot}/

%files
%attr(0755,root,root) /usr/bin/wi-credential-provider
%dir /usr/share/doc/wi-credential-provider
%doc /usr/share/doc/wi-credential-provider/README.md
%doc /usr/share/doc/wi-credential-provider/CHANGELOG.md
%doc /usr/share/doc/wi-credential-provider/node.md
%doc /usr/share/doc/wi-credential-provider/release.md
%dir /usr/share/licenses/wi-credential-provider
%license /usr/share/licenses/wi-credential-provider/LICENSE

# Lua, rpm's own interpreter: no /bin/sh for the package to require.
%post -p <lua>
print("$message")
EOF
  rpmbuild --quiet -bb --target "$rpm_arch-linux" \
    --define "_topdir $rpmroot/top" \
    --define "_rpmdir $out" \
    --define "use_source_date_epoch_as_buildtime 1" \
    --define "clamp_mtime_to_source_date_epoch 1" \
    "$rpmroot/wi-credential-provider.spec" >/dev/null
  echo "package: $out/wi-credential-provider-${version}-1.${rpm_arch}.rpm"
done
