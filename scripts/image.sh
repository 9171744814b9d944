#!/usr/bin/env bash
# Builds the node image the installer DaemonSets run: one OCI image index
# over one image per architecture, each one layer holding the static
# release binary (/usr/bin/wi-credential-provider, the entrypoint), its
# license and an empty /tmp (1777: `node install` checks the binary and
# stages the merged config in private temporary directories), and nothing
# else: no base image, no shell (the DaemonSet runs the binary's own
# `node install` and `node wait`). The layer is a tar made by GNU tar with
# fixed owners, order and times. Built with buildah (Debian's), without a
# Docker engine or a registry, in a private storage root, and written as an
# OCI archive with the index's digest beside it.
#
#   scripts/image.sh VERSION OUT.tar ARCH=BINARY [ARCH=BINARY...]
#
# ARCH is amd64 or arm64; each BINARY must be a static Linux executable for
# it, or nothing is written. The image's timestamps are SOURCE_DATE_EPOCH
# (default: the commit's time), so the same binaries give the same digests.
# Writes OUT.tar (tagged VERSION inside) and OUT.tar.digest.
set -euo pipefail
cd "$(dirname "$0")/.."

[ "$#" -ge 3 ] || { echo "usage: scripts/image.sh VERSION OUT.tar ARCH=BINARY [ARCH=BINARY...]" >&2; exit 2; }
version=$1 out=$2
shift 2
for tool in buildah skopeo file tar; do
  command -v "$tool" >/dev/null || { echo "image: needs $tool (apt-get install buildah skopeo file)" >&2; exit 1; }
done

epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
work=$(mktemp -d)
buildah=(buildah --root "$work/root" --runroot "$work/run" --storage-driver vfs)
cleanup() {
  "${buildah[@]}" rm --all >/dev/null 2>&1 || true
  # vfs layers are plain directories; some are read-only copies.
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Checks every binary before building anything.
for pair in "$@"; do
  arch=${pair%%=*} binary=${pair#*=}
  [ -f "$binary" ] || { echo "image: $binary does not exist" >&2; exit 1; }
  description=$(file -b "$binary")
  case "$arch:$description" in
    amd64:*"ELF 64-bit"*"x86-64"*"statically linked"*) ;;
    arm64:*"ELF 64-bit"*"ARM aarch64"*"statically linked"*) ;;
    amd64:* | arm64:*)
      echo "image: $binary is not a static linux/$arch executable: $description" >&2
      exit 1
      ;;
    *) echo "image: unknown architecture $arch (amd64 or arm64)" >&2; exit 2 ;;
  esac
done

"${buildah[@]}" manifest create wicp-index >/dev/null
for pair in "$@"; do
  arch=${pair%%=*} binary=${pair#*=}
  container=$("${buildah[@]}" from scratch)
  tree=$work/tree-$arch
  install -D -m 0755 "$binary" "$tree/usr/bin/wi-credential-provider"
  install -D -m 0644 LICENSE "$tree/usr/share/doc/wi-credential-provider/LICENSE"
  install -d -m 1777 "$tree/tmp"
  chmod 0755 "$tree/usr" "$tree/usr/bin" "$tree/usr/share" "$tree/usr/share/doc" \
    "$tree/usr/share/doc/wi-credential-provider"
  tar --create --file "$work/layer-$arch.tar" --directory "$tree" --sort=name \
    --owner=0 --group=0 --numeric-owner --mtime="@$epoch" --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    tmp usr
  "${buildah[@]}" add "$container" "$work/layer-$arch.tar" / >/dev/null
  "${buildah[@]}" config \
    --os linux --arch "$arch" \
    --entrypoint '["/usr/bin/wi-credential-provider"]' \
    --user 0:0 \
    --label org.opencontainers.image.title=wi-credential-provider \
    --label org.opencontainers.image.description="Kubelet image credential provider: each pod pulls with its own identity (installer image)" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.revision=$revision" \
    --label org.opencontainers.image.licenses=Apache-2.0 \
    "$container"
  "${buildah[@]}" commit --quiet --timestamp "$epoch" --format oci "$container" "wicp-$arch" >/dev/null
  "${buildah[@]}" manifest add wicp-index "containers-storage:localhost/wicp-$arch" >/dev/null
done
mkdir -p "$(dirname "$out")"
rm -f "$out" "$out.digest"
"${buildah[@]}" manifest push --quiet --all --format oci wicp-index "oci-archive:$out:$version"
skopeo inspect --raw "oci-archive:$out" > "$work/index.json"
digest=$(skopeo manifest-digest "$work/index.json")
echo "$digest" > "$out.digest"
echo "image: $out ($digest): $(python3 -c 'import json,sys; print(", ".join(m["platform"]["os"] + "/" + m["platform"]["architecture"] for m in json.load(open(sys.argv[1]))["manifests"]))' "$work/index.json")"
