#!/bin/sh
# Verifies the wi-credential-provider binary's sha256 (and the release's
# signature), then hands over to the binary's own `node install` (or, with
# --uninstall, `node uninstall`). With --package it verifies a .deb or .rpm
# the same way, installs it with dpkg or rpm, and hands over to the binary
# it installed.
# That is all it does: there is one installer, in the binary, which finds
# where the kubelet really reads its credential-provider config, resolves
# every path inside --root, validates before writing, records how to undo
# before the first change, writes atomically, and restarts the kubelet with
# one rollback (docs/commands/node.md). A second installer in shell would
# be one more thing that runs as root on every node and can get it wrong.
#
# Used by packer.pkr.hcl and cloud-init.yaml (--package), and by hand for a
# loose binary; the DaemonSet's image runs `node install` itself.
#
# POSIX sh on purpose: it runs in busybox images as well as on full hosts.
set -eu

usage() {
  cat <<'EOF'
Usage: install.sh --binary PATH [--sha256 HEX|FILE] [options] [-- NODE-INSTALL-ARGS...]
       install.sh --binary PATH --sha256 SHA256SUMS --signature SHA256SUMS.sig \
                  --public-key KEY.pub [options] [-- NODE-INSTALL-ARGS...]
       install.sh --package PKG.deb|PKG.rpm --sha256 SHA256SUMS [--signature
                  SHA256SUMS.sig --public-key KEY.pub] [options] [-- ARGS...]
       install.sh --uninstall --binary PATH [--sha256 HEX|FILE] [--root DIR] [-- ARGS...]

Checks the binary's sha256 (and, with --signature, that the release's
SHA256SUMS is signed by the release key), then runs `PATH node install`
(or `node uninstall`) with the options below and everything after `--`.

  --binary PATH        the wi-credential-provider binary to install
  --package FILE       instead of --binary: the release's .deb or .rpm, checked
                       the same way, installed with dpkg or rpm (into --root),
                       then its /usr/bin/wi-credential-provider runs node install
  --sha256 HEX|FILE    its expected sha256, or a sha256sum file such as the
                       release's SHA256SUMS (the line for the binary's file
                       name is used) (default: PATH.sha256, else SHA256SUMS
                       beside PATH; without a checksum nothing runs)
  --signature FILE     the release's SHA256SUMS.sig: an SSH signature
                       (ssh-keygen -Y, namespace wi-credential-provider-release)
                       over the --sha256 file, checked before anything else
  --public-key FILE    the release key (an SSH public key line) the signature
                       must verify against: pin it from where you trust it,
                       not from the download it checks
  --config FILE        a CredentialProviderConfig whose entries to install
  --root DIR           the node's root (/host in the DaemonSet); default /
  --restart-kubelet    restart the kubelet if anything changed, with one
                       rollback if it does not come back healthy
  --bin-dir DIR        the kubelet's --image-credential-provider-bin-dir, when
                       discovery should not look for it (--kubelet-bin-dir)
  --config-path FILE   the kubelet's --image-credential-provider-config, likewise
                       (--kubelet-credential-config)
  --uninstall          undo what node install recorded on this node
  --node               accepted for compatibility: handing over is all it does
  -h, --help           this text

Exit status: what node install (or uninstall) exits with; 1 when the
checksum is missing or wrong (nothing runs then); 2 for a usage error.
EOF
}

die() {
  echo "install.sh: $*" >&2
  exit 1
}

usage_error() {
  echo "install.sh: $*" >&2
  echo "run install.sh --help for the options" >&2
  exit 2
}

need_value() {
  [ "$#" -ge 2 ] || usage_error "$1 needs a value"
}

binary=""
package=""
sha256=""
signature=""
public_key=""
root=""
uninstall=0
# Options handed over, each word quoted for the eval at the end: for
# both commands, and for install only.
both=""
install_only=""
quote() {
  printf " '%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"
}
add() {
  both="$both$(quote "$1")"
  [ "$#" -lt 2 ] || both="$both$(quote "$2")"
}

while [ "$#" -gt 0 ]; do
  case "$1" in
    --binary) need_value "$@"; binary=$2; shift 2 ;;
    --binary=*) binary=${1#*=}; shift ;;
    --package) need_value "$@"; package=$2; shift 2 ;;
    --package=*) package=${1#*=}; shift ;;
    --sha256) need_value "$@"; sha256=$2; shift 2 ;;
    --sha256=*) sha256=${1#*=}; shift ;;
    --signature) need_value "$@"; signature=$2; shift 2 ;;
    --signature=*) signature=${1#*=}; shift ;;
    --public-key) need_value "$@"; public_key=$2; shift 2 ;;
    --public-key=*) public_key=${1#*=}; shift ;;
    --root) need_value "$@"; root=$2; shift 2 ;;
    --root=*) root=${1#*=}; shift ;;
    --config) need_value "$@"; install_only="$install_only$(quote --config)$(quote "$2")"; shift 2 ;;
    --config=*) install_only="$install_only$(quote --config)$(quote "${1#*=}")"; shift ;;
    --bin-dir) need_value "$@"; add --kubelet-bin-dir "$2"; shift 2 ;;
    --bin-dir=*) add --kubelet-bin-dir "${1#*=}"; shift ;;
    --config-path) need_value "$@"; add --kubelet-credential-config "$2"; shift 2 ;;
    --config-path=*) add --kubelet-credential-config "${1#*=}"; shift ;;
    --restart-kubelet) add --restart-kubelet; shift ;;
    --uninstall) uninstall=1; shift ;;
    --node) shift ;;
    --link | --link=* | --no-check)
      usage_error "$1 is gone: node install links every entry name of the config, and always validates before writing" ;;
    --) shift; break ;;
    -h | --help) usage; exit 0 ;;
    *) usage_error "unknown option $1" ;;
  esac
done

[ -n "$binary" ] || [ -n "$package" ] || usage_error "--binary (or --package) is required"
[ -z "$binary" ] || [ -z "$package" ] || usage_error "--binary and --package are two ways to install: pass one"
[ -z "$package" ] || [ "$uninstall" -eq 0 ] ||
  usage_error "--uninstall takes --binary (the installed /usr/bin/wi-credential-provider); remove the package afterwards with dpkg or rpm"
case "$package" in
  "" | *.deb | *.rpm) ;;
  *) usage_error "--package $package is neither a .deb nor an .rpm" ;;
esac
case "${root:-/}" in /*) ;; *) usage_error "--root must be an absolute path" ;; esac

if [ -z "$root" ] && [ "$(id -u)" -ne 0 ]; then
  die "must run as root to change the node's kubelet set-up (or pass --root DIR)"
fi
# What the checksum and signature are checked for: the binary, or the package.
if [ -n "$package" ]; then
  checked=$package
  [ -f "$package" ] || die "--package $package is not a file"
else
  checked=$binary
  [ -f "$binary" ] || die "--binary $binary is not a file"
fi

# The expected checksum: a hex value, a sha256sum file (one line, or the
# release's SHA256SUMS, read for the binary's file name), PATH.sha256, or
# SHA256SUMS beside PATH.
if [ -z "$sha256" ] && [ -f "$checked.sha256" ]; then
  sha256=$checked.sha256
fi
if [ -z "$sha256" ] && [ -f "$(dirname "$checked")/SHA256SUMS" ]; then
  sha256=$(dirname "$checked")/SHA256SUMS
fi
[ -n "$sha256" ] || die "no checksum for $checked: pass --sha256 HEX|FILE (release files ship one); nothing was run"

# The signature first: SHA256SUMS is only worth reading once the release
# key vouches for it.
if [ -n "$signature" ] || [ -n "$public_key" ]; then
  [ -n "$signature" ] || die "--public-key needs --signature (the release's SHA256SUMS.sig); nothing was run"
  [ -n "$public_key" ] || die "--signature needs --public-key (the release key, pinned from where you trust it); nothing was run"
  [ -f "$sha256" ] || die "--signature signs a file: pass --sha256 SHA256SUMS; nothing was run"
  [ -f "$signature" ] || die "the signature $signature is not a file; nothing was run"
  [ -f "$public_key" ] || die "the public key $public_key is not a file; nothing was run"
  command -v ssh-keygen >/dev/null 2>&1 ||
    die "ssh-keygen (OpenSSH 8.1 or later) is needed to check the signature: install openssh-client; nothing was run"
  signers=$(mktemp)
  trap 'rm -f "$signers"' EXIT
  key=$(awk 'NF >= 2 && $1 !~ /^#/ { print $1, $2; exit }' "$public_key")
  [ -n "$key" ] || die "$public_key holds no SSH public key; nothing was run"
  printf 'wi-credential-provider-release namespaces="wi-credential-provider-release" %s\n' "$key" > "$signers"
  if ! ssh-keygen -Y verify -f "$signers" -I wi-credential-provider-release \
    -n wi-credential-provider-release -s "$signature" < "$sha256" >/dev/null 2>&1; then
    die "the signature $signature does not verify $sha256 with the key in $public_key: the release is not the one that key signed (or was changed); nothing was run"
  fi
  verified="signature and sha256"
else
  verified="sha256"
fi

if [ -f "$sha256" ]; then
  name=$(basename "$checked")
  lines=$(grep -c . "$sha256" || true)
  if [ "$lines" -gt 1 ] || [ -n "$signature" ]; then
    # A SHA256SUMS: the line for this file name ("HEX  NAME" or "HEX *NAME").
    expected=$(awk -v name="$name" '{ file = $2; sub(/^\*/, "", file) } file == name { print $1; exit }' "$sha256")
    [ -n "$expected" ] || die "$sha256 has no line for $name; nothing was run"
  else
    expected=$(awk 'NR == 1 { print $1 }' "$sha256")
  fi
else
  expected=$sha256
fi
expected=$(printf '%s' "$expected" | tr 'A-F' 'a-f')
case "$expected" in
  *[!0-9a-f]* | "") die "the checksum $expected is not a sha256 in hex" ;;
esac
[ "${#expected}" -eq 64 ] || die "the checksum $expected is not a sha256 in hex"
actual=$(sha256sum "$checked" | awk '{ print $1 }')
if [ "$actual" != "$expected" ]; then
  die "sha256 mismatch for $checked: expected $expected, got $actual; nothing was run"
fi

# A package: installed by the distribution's own tool, which refuses a
# damaged one; then its binary is the one that runs.
if [ -n "$package" ]; then
  case "$package" in
    *.deb)
      command -v dpkg >/dev/null 2>&1 || die "dpkg is needed for $package (an .rpm suits this node?); nothing was run"
      echo "install.sh: $verified verified; installing $package with dpkg"
      dpkg ${root:+"--root=$root"} --install "$package" || die "dpkg could not install $package; the node's kubelet set-up was not changed"
      ;;
    *.rpm)
      command -v rpm >/dev/null 2>&1 || die "rpm is needed for $package (a .deb suits this node?); nothing was run"
      echo "install.sh: $verified verified; installing $package with rpm"
      rpm ${root:+--root "$root"} --upgrade --replacepkgs "$package" || die "rpm could not install $package; the node's kubelet set-up was not changed"
      ;;
  esac
  binary=${root%/}/usr/bin/wi-credential-provider
  [ -x "$binary" ] || die "$package did not install $binary"
fi

if [ "$uninstall" -eq 1 ]; then
  command=uninstall
  eval "set -- $both \"\$@\""
  set -- node uninstall --root "${root:-/}" "$@"
else
  command=install
  eval "set -- $both $install_only \"\$@\""
  set -- node install --root "${root:-/}" --binary "$binary" "$@"
fi
echo "install.sh: $verified verified; handing over to $binary node $command"
exec "$binary" "$@"
