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
# With --talos-extension, the same binaries become a Talos system extension
# instead (siderolabs/talos pkg/machinery/extensions: load.go wants exactly
# /manifest.yaml and /rootfs at the top, validate.go only files under
# allowed paths such as /usr/local and nothing world-writable): the binary
# in /rootfs/usr/local/lib/kubelet/credentialproviders (Talos's
# KubeletCredentialProviderBinDir) with a link per provider beside it, the
# license under /rootfs/usr/local/share/doc. The provider names come from a
# binary that runs here (`--version` lists them).
#
#   scripts/image.sh [--talos-extension] VERSION OUT.tar ARCH=BINARY [ARCH=BINARY...]
#
# ARCH is amd64 or arm64; each BINARY must be a static Linux executable for
# it, or nothing is written. The image's timestamps are SOURCE_DATE_EPOCH
# (default: the commit's time), so the same binaries give the same digests.
# Writes OUT.tar (tagged VERSION inside) and OUT.tar.digest.
set -euo pipefail
cd "$(dirname "$0")/.."

kind=node
if [ "${1:-}" = --talos-extension ]; then
  kind=talos
  shift
fi
[ "$#" -ge 3 ] || { echo "usage: scripts/image.sh [--talos-extension] VERSION OUT.tar ARCH=BINARY [ARCH=BINARY...]" >&2; exit 2; }
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

# The provider names the Talos extension links, from the first binary that
# runs on this machine: "wi-credential-provider 0.1.0 (commit c, providers: aws, gcp)".
providers=
if [ "$kind" = talos ]; then
  for pair in "$@"; do
    line=$("${pair#*=}" --version 2>/dev/null) || continue
    providers=$(printf '%s\n' "$line" | sed -n 's/.*providers: \([a-z0-9, -]*\))$/\1/p' | tr -d ' ' | tr ',' ' ')
    break
  done
  [ -n "$providers" ] || { echo "image: no binary given runs here to list its providers (build one for this machine's architecture too)" >&2; exit 1; }
fi

# The layer's top-level entries.
if [ "$kind" = talos ]; then top=(manifest.yaml rootfs); else top=(tmp usr); fi

# tree ARCH BINARY DIR: the layer's files.
tree() {
  local arch=$1 binary=$2 dir=$3
  case $kind in
    node)
      install -D -m 0755 "$binary" "$dir/usr/bin/wi-credential-provider"
      install -D -m 0644 LICENSE "$dir/usr/share/doc/wi-credential-provider/LICENSE"
      install -d -m 1777 "$dir/tmp"
      ;;
    talos)
      local bin=$dir/rootfs/usr/local/lib/kubelet/credentialproviders
      install -D -m 0755 "$binary" "$bin/wi-credential-provider"
      for provider in $providers; do
        ln -s wi-credential-provider "$bin/wi-credential-provider-$provider"
      done
      install -D -m 0644 LICENSE "$dir/rootfs/usr/local/share/doc/wi-credential-provider/LICENSE"
      # The manifest Talos reads (pkg/machinery/extensions/metadata.go);
      # v1.11 is the first Talos whose Kubernetes (1.34) passes service
      # account tokens to plugins by default.
      cat > "$dir/manifest.yaml" <<MANIFEST
version: v1alpha1
metadata:
  name: wi-credential-provider
  version: "$version"
  author: wi-credential-provider
  description: |
    Kubelet image credential provider: each pod pulls images with its own identity
    (service account tokens, KEP-4412). Puts wi-credential-provider and a link per
    provider in /usr/local/lib/kubelet/credentialproviders.
  compatibility:
    talos:
      version: ">= v1.11.0"
MANIFEST
      chmod 0644 "$dir/manifest.yaml"
      ;;
  esac
  find "$dir" -mindepth 1 -type d -exec chmod 0755 {} +
  [ "$kind" = talos ] || chmod 1777 "$dir/tmp"
}

"${buildah[@]}" manifest create wicp-index >/dev/null
for pair in "$@"; do
  arch=${pair%%=*} binary=${pair#*=}
  container=$("${buildah[@]}" from scratch)
  tree=$work/tree-$arch
  tree "$arch" "$binary" "$tree"
  tar --create --file "$work/layer-$arch.tar" --directory "$tree" --sort=name \
    --owner=0 --group=0 --numeric-owner --mtime="@$epoch" --format=posix \
    --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    "${top[@]}"
  "${buildah[@]}" add "$container" "$work/layer-$arch.tar" / >/dev/null
  if [ "$kind" = node ]; then
    config=(--entrypoint '["/usr/bin/wi-credential-provider"]' --user 0:0
      --label org.opencontainers.image.title=wi-credential-provider
      --label "org.opencontainers.image.description=Kubelet image credential provider: each pod pulls with its own identity (installer image)")
  else
    config=(--label org.opencontainers.image.title=wi-credential-provider-talos-extension
      --label "org.opencontainers.image.description=Kubelet image credential provider: each pod pulls with its own identity (Talos system extension)")
  fi
  "${buildah[@]}" config \
    --os linux --arch "$arch" \
    "${config[@]}" \
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
