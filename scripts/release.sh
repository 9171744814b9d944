#!/usr/bin/env bash
# Builds a release into dist/ (or $DIST), run by `make release`
# (docs/release.md lists what it holds and how to verify it):
#   - static musl executables for x86_64 and aarch64 (many node fleets are
#     arm64) and a Windows x86_64 .exe (for Windows node pools, cross-built
#     with Debian's mingw-w64), each built with `cargo auditable` (the crate
#     list is embedded in the binary, for scanners) and with a CycloneDX
#     bill of materials beside it (cargo cyclonedx);
#   - the node image: one OCI archive, an index over linux/amd64 and
#     linux/arm64 (scripts/image.sh, buildah), and its digest;
#   - the Talos system extension: an OCI archive laid out as Talos loads
#     extensions, for the same two architectures (scripts/image.sh
#     --talos-extension), and its digest;
#   - .deb and .rpm packages for both architectures (scripts/package.sh);
#   - node-install/install.sh;
#   - SHA256SUMS over all of it, its SSH signature and the release key's
#     public half (scripts/sign.sh; the key is $WICP_RELEASE_KEY).
#
# The C part of the TLS stack (aws-lc-sys) needs a C compiler and musl
# headers for each target, all from Debian:
#   x86_64:  musl-tools (musl-gcc)
#   aarch64: gcc-aarch64-linux-gnu with musl-dev:arm64's headers, through
#            its musl-gcc.specs; rustc links with its own musl crt and libc.
#   both Linux targets link with lld (Debian's `lld`), which folds identical
#            functions (`--icf=all`, .cargo/config.toml).
#   windows: mingw-w64 (x86_64-w64-mingw32-gcc); the .exe needs no DLL but
#            those every Windows Server 2019 and later ships.
# Missing packages, Rust targets and the two cargo tools (pinned below) are
# installed (apt needs root).
#
# The tests (make test-release) build a smaller release with the same
# script: WICP_RELEASE_PROFILE (a cargo profile; default release),
# WICP_RELEASE_ARCHES (default "amd64 arm64") and WICP_RELEASE_WINDOWS=0.
set -euo pipefail
cd "$(dirname "$0")/.."

dist=${DIST:-dist}
target_dir=${CARGO_TARGET_DIR:-target}
profile=${WICP_RELEASE_PROFILE:-release}
arches=${WICP_RELEASE_ARCHES:-amd64 arm64}
windows=${WICP_RELEASE_WINDOWS:-1}
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
arm64_specs=/usr/lib/aarch64-linux-musl/musl-gcc.specs
# The same sources give the same image and packages: their timestamps are
# the commit's.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
# The cargo tools, pinned: a new release of either is a deliberate change.
auditable_version=0.7.4
cyclonedx_version=0.5.9

case "$profile" in
  dev) profile_dir=debug ;;
  *) profile_dir=$profile ;;
esac

install_tools() {
  local need=() arch
  dpkg -s musl-tools >/dev/null 2>&1 || need+=(musl-tools)
  # The static builds link with lld and fold identical code (.cargo/config.toml).
  dpkg -s lld >/dev/null 2>&1 || need+=(lld)
  for arch in $arches; do
    if [ "$arch" = arm64 ]; then
      dpkg -s gcc-aarch64-linux-gnu >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu)
      dpkg -s musl-dev:arm64 >/dev/null 2>&1 || need+=(musl-dev:arm64)
    fi
  done
  if [ "$windows" = 1 ]; then
    dpkg -s mingw-w64 >/dev/null 2>&1 || need+=(mingw-w64)
  fi
  local pkg
  for pkg in file buildah skopeo rpm openssh-client python3; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
  done
  if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "release: missing Debian packages: ${need[*]}; run as root or install them:" >&2
      echo "  dpkg --add-architecture arm64 && apt-get update && apt-get install ${need[*]}" >&2
      exit 1
    fi
    if [[ " ${need[*]} " == *":arm64 "* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
      dpkg --add-architecture arm64
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  local targets=()
  for arch in $arches; do
    case "$arch" in
      amd64) targets+=(x86_64-unknown-linux-musl) ;;
      arm64) targets+=(aarch64-unknown-linux-musl) ;;
    esac
  done
  if [ "$windows" = 1 ]; then
    targets+=(x86_64-pc-windows-gnu)
  fi
  rustup target add "${targets[@]}" >/dev/null
  cargo_tool cargo-auditable "$auditable_version"
  cargo_tool cargo-cyclonedx "$cyclonedx_version"
}

# cargo_tool CRATE VERSION: installs the pinned version unless it is there.
cargo_tool() {
  local crate=$1 want=$2
  if ! cargo install --list | grep -qx "$crate v$want:"; then
    cargo install --locked --quiet "$crate" --version "$want"
  fi
}

# sbom TARGET NAME: the CycloneDX bill of materials of the crates built for
# TARGET (normal dependencies only: what is in the binary), as NAME.cdx.json.
sbom() {
  local target=$1 name=$2
  cargo cyclonedx --quiet --format json --spec-version 1.5 --target "$target" \
    --no-build-deps --override-filename "wicp-sbom-$target"
  mv "wicp-sbom-$target.json" "${dist}/${name}.cdx.json"
  # cargo cyclonedx writes one per workspace member; the binary's (above)
  # already lists the layer crates and everything they pull in.
  rm -f crates/*/"wicp-sbom-$target.json"
}

# build TARGET ARCH: builds, checks the result is a static executable for
# ARCH, and copies it with its bill of materials into $dist.
build() {
  local target=$1 arch=$2
  local name="wi-credential-provider-${version}-linux-${arch}"
  echo "release: building ${name} (${target}, commit ${commit}, profile ${profile})"
  cargo auditable build --profile "$profile" --locked --target "$target"
  local built="${target_dir}/${target}/${profile_dir}/wi-credential-provider"
  local description
  description=$(file -b "$built")
  case "$description" in
    *"statically linked"* | *"static-pie linked"*) ;;
    *)
      echo "release: ${built} is not statically linked: ${description}" >&2
      exit 1
      ;;
  esac
  mkdir -p "$dist"
  cp "$built" "${dist}/${name}"
  sbom "$target" "$name"
  echo "release: ${dist}/${name}: ${description}"
}

# The DLLs the Windows build may import: the system's own (Windows Server
# 2019 and later); a mingw runtime DLL would be missing on a node.
windows_dlls="advapi32.dll api-ms-win-core-synch-l1-2-0.dll bcrypt.dll bcryptprimitives.dll crypt32.dll kernel32.dll msvcrt.dll ntdll.dll ws2_32.dll"

# build_windows: the .exe for Windows node pools, checked to be a console
# PE32+ for x86-64 that imports only system DLLs.
build_windows() {
  local target=x86_64-pc-windows-gnu
  local name="wi-credential-provider-${version}-windows-amd64.exe"
  echo "release: building ${name} (${target}, commit ${commit}, profile ${profile})"
  cargo auditable build --profile "$profile" --locked --target "$target"
  local built="${target_dir}/${target}/${profile_dir}/wi-credential-provider.exe"
  local description
  description=$(file -b "$built")
  case "$description" in
    "PE32+ executable (console) x86-64"*) ;;
    *)
      echo "release: ${built} is not a console PE32+ for x86-64: ${description}" >&2
      exit 1
      ;;
  esac
  local dll
  for dll in $(x86_64-w64-mingw32-objdump -p "$built" | sed -n 's/^\s*DLL Name: //p' | tr '[:upper:]' '[:lower:]' | sort -u); do
    case " ${windows_dlls} " in
      *" ${dll} "*) ;;
      *)
        echo "release: ${built} imports ${dll}, which a Windows node does not have" >&2
        exit 1
        ;;
    esac
  done
  mkdir -p "$dist"
  cp "$built" "${dist}/${name}"
  sbom "$target" "$name"
  echo "release: ${dist}/${name}: ${description}"
}

install_tools

# A release is one directory built at once: nothing of an earlier one may
# end up under this one's signature.
rm -rf "$dist"
mkdir -p "$dist"

export WICP_GIT_COMMIT="$commit"
export CC_x86_64_unknown_linux_musl=musl-gcc
export CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc
export CFLAGS_aarch64_unknown_linux_musl="-specs=${arm64_specs}"
export AR_aarch64_unknown_linux_musl=aarch64-linux-gnu-ar
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc

linux=()
for arch in $arches; do
  case "$arch" in
    amd64) build x86_64-unknown-linux-musl amd64 ;;
    arm64) build aarch64-unknown-linux-musl arm64 ;;
    *) echo "release: unknown architecture $arch in WICP_RELEASE_ARCHES (amd64, arm64)" >&2; exit 2 ;;
  esac
  linux+=("$arch=${dist}/wi-credential-provider-${version}-linux-${arch}")
done
if [ "$windows" = 1 ]; then
  build_windows
fi

# check_version BINARY [EMULATOR]: the binary must report this build.
check_version() {
  local reported
  reported=$("$@" --version)
  case "$reported" in
    *" ${version} (commit ${commit},"*) echo "release: $reported" ;;
    *)
      echo "release: $* reports \"$reported\", not version ${version} and commit ${commit}" >&2
      exit 1
      ;;
  esac
}

for arch in $arches; do
  binary="${dist}/wi-credential-provider-${version}-linux-${arch}"
  if [ "$arch" = amd64 ]; then
    check_version "$binary"
    # The amd64 binary allocates with dlmalloc (Cargo.toml), whose source
    # path is in the binary (its panic locations) only when it is linked in.
    if ! grep -q "dlmalloc-0\.2" "$binary"; then
      echo "release: the amd64 binary does not carry dlmalloc (see Cargo.toml, docs/performance.md)" >&2
      exit 1
    fi
  # The arm64 one runs here only under user-mode emulation (Debian's
  # qemu-user-static), when it is installed.
  elif command -v qemu-aarch64-static >/dev/null 2>&1; then
    check_version qemu-aarch64-static "$binary"
  else
    echo "release: qemu-aarch64-static not installed; the arm64 binary was checked with file(1) only"
  fi
done

bash scripts/image.sh "$version" "${dist}/wi-credential-provider-${version}-image.oci.tar" "${linux[@]}"
bash scripts/image.sh --talos-extension "$version" \
  "${dist}/wi-credential-provider-${version}-talos-extension.oci.tar" "${linux[@]}"
bash scripts/package.sh "$version" "$dist" "${linux[@]}"
install -m 0755 node-install/install.sh "${dist}/install.sh"
bash scripts/sign.sh "$dist"
ls -l "$dist"
echo "release: the DaemonSet's image: skopeo copy --all --preserve-digests oci-archive:${dist}/wi-credential-provider-${version}-image.oci.tar docker://REGISTRY/wi-credential-provider:${version}, then digest: $(cat "${dist}/wi-credential-provider-${version}-image.oci.tar.digest") in node-install/kustomization.yaml"
