#!/usr/bin/env bash
# Builds the release binaries: static musl executables for x86_64 and
# aarch64 (many node fleets are arm64), and a Windows x86_64 .exe (for
# Windows node pools, cross-built with Debian's mingw-w64), each with a
# .sha256 file, into dist/ (or $DIST). Run by `make release`.
#
# The C part of the TLS stack (aws-lc-sys) needs a C compiler and musl
# headers for each target, all from Debian:
#   x86_64:  musl-tools (musl-gcc)
#   aarch64: gcc-aarch64-linux-gnu with musl-dev:arm64's headers, through
#            its musl-gcc.specs; rustc links with its own musl crt and libc.
#   windows: mingw-w64 (x86_64-w64-mingw32-gcc); the .exe needs no DLL but
#            those every Windows Server 2019 and later ships.
# Missing packages and Rust targets are installed (apt needs root).
set -euo pipefail
cd "$(dirname "$0")/.."

dist=${DIST:-dist}
target_dir=${CARGO_TARGET_DIR:-target}
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
arm64_specs=/usr/lib/aarch64-linux-musl/musl-gcc.specs

install_tools() {
  local need=()
  dpkg -s musl-tools >/dev/null 2>&1 || need+=(musl-tools)
  dpkg -s gcc-aarch64-linux-gnu >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu)
  dpkg -s musl-dev:arm64 >/dev/null 2>&1 || need+=(musl-dev:arm64)
  command -v file >/dev/null 2>&1 || need+=(file)
  dpkg -s mingw-w64 >/dev/null 2>&1 || need+=(mingw-w64)
  if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "release: missing Debian packages: ${need[*]}; run as root or install them:" >&2
      echo "  dpkg --add-architecture arm64 && apt-get update && apt-get install ${need[*]}" >&2
      exit 1
    fi
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
      dpkg --add-architecture arm64
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  rustup target add x86_64-unknown-linux-musl aarch64-unknown-linux-musl \
    x86_64-pc-windows-gnu >/dev/null
}

# build TARGET ARCH: builds, checks the result is a static executable for
# ARCH, and copies it with its checksum into $dist.
build() {
  local target=$1 arch=$2
  local name="wi-credential-provider-${version}-linux-${arch}"
  echo "release: building ${name} (${target}, commit ${commit})"
  cargo build --release --locked --target "$target"
  local built="${target_dir}/${target}/release/wi-credential-provider"
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
  (cd "$dist" && sha256sum "$name" >"${name}.sha256")
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
  echo "release: building ${name} (${target}, commit ${commit})"
  cargo build --release --locked --target "$target"
  local built="${target_dir}/${target}/release/wi-credential-provider.exe"
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
  (cd "$dist" && sha256sum "$name" >"${name}.sha256")
  echo "release: ${dist}/${name}: ${description}"
}

install_tools

export WICP_GIT_COMMIT="$commit"
export CC_x86_64_unknown_linux_musl=musl-gcc
export CC_aarch64_unknown_linux_musl=aarch64-linux-gnu-gcc
export CFLAGS_aarch64_unknown_linux_musl="-specs=${arm64_specs}"
export AR_aarch64_unknown_linux_musl=aarch64-linux-gnu-ar
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER=aarch64-linux-gnu-gcc

build x86_64-unknown-linux-musl amd64
build aarch64-unknown-linux-musl arm64
build_windows

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

check_version "${dist}/wi-credential-provider-${version}-linux-amd64"
# The amd64 binary allocates with dlmalloc (Cargo.toml), whose source path
# is in the binary (its panic locations) only when it is linked in.
if ! grep -q "dlmalloc-0\.2" "${dist}/wi-credential-provider-${version}-linux-amd64"; then
  echo "release: the amd64 binary does not carry dlmalloc (see Cargo.toml, docs/performance.md)" >&2
  exit 1
fi
# The arm64 one runs here only under user-mode emulation (Debian's
# qemu-user-static), when it is installed.
if command -v qemu-aarch64-static >/dev/null 2>&1; then
  check_version qemu-aarch64-static "${dist}/wi-credential-provider-${version}-linux-arm64"
else
  echo "release: qemu-aarch64-static not installed; the arm64 binary was checked with file(1) only"
fi
ls -l "$dist"
