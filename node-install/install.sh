#!/bin/sh
# Verifies the wi-credential-provider binary's sha256, then hands over to
# the binary's own `node install` (or, with --uninstall, `node uninstall`).
# That is all it does: there is one installer, in the binary, which finds
# where the kubelet really reads its credential-provider config, resolves
# every path inside --root, validates before writing, records how to undo
# before the first change, writes atomically, and restarts the kubelet with
# one rollback (docs/commands/node.md). A second installer in shell would
# be one more thing that runs as root on every node and can get it wrong.
#
# Used as is by the DaemonSet (node-install/daemonset.yaml, with --root
# /host), cloud-init.yaml and packer.pkr.hcl.
#
# POSIX sh on purpose: it runs in busybox images as well as on full hosts.
set -eu

usage() {
  cat <<'EOF'
Usage: install.sh --binary PATH [--sha256 HEX|FILE] [options] [-- NODE-INSTALL-ARGS...]
       install.sh --uninstall --binary PATH [--sha256 HEX|FILE] [--root DIR] [-- ARGS...]

Checks the binary's sha256, then runs `PATH node install` (or `node
uninstall`) with the options below and everything after `--`.

  --binary PATH        the wi-credential-provider binary to install (required)
  --sha256 HEX|FILE    its expected sha256, or a sha256sum file
                       (default: PATH.sha256; without a checksum nothing runs)
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
sha256=""
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
    --sha256) need_value "$@"; sha256=$2; shift 2 ;;
    --sha256=*) sha256=${1#*=}; shift ;;
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

[ -n "$binary" ] || usage_error "--binary is required"
case "${root:-/}" in /*) ;; *) usage_error "--root must be an absolute path" ;; esac

if [ -z "$root" ] && [ "$(id -u)" -ne 0 ]; then
  die "must run as root to change the node's kubelet set-up (or pass --root DIR)"
fi
[ -f "$binary" ] || die "--binary $binary is not a file"

# The expected checksum: a hex value, a sha256sum file, or PATH.sha256.
if [ -z "$sha256" ] && [ -f "$binary.sha256" ]; then
  sha256=$binary.sha256
fi
[ -n "$sha256" ] || die "no checksum for $binary: pass --sha256 HEX|FILE (release files ship one); nothing was run"
if [ -f "$sha256" ]; then
  expected=$(awk 'NR == 1 { print $1 }' "$sha256")
else
  expected=$sha256
fi
expected=$(printf '%s' "$expected" | tr 'A-F' 'a-f')
case "$expected" in
  *[!0-9a-f]* | "") die "the checksum $expected is not a sha256 in hex" ;;
esac
[ "${#expected}" -eq 64 ] || die "the checksum $expected is not a sha256 in hex"
actual=$(sha256sum "$binary" | awk '{ print $1 }')
if [ "$actual" != "$expected" ]; then
  die "sha256 mismatch for $binary: expected $expected, got $actual; nothing was run"
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
echo "install.sh: sha256 verified; handing over to $binary node $command"
exec "$binary" "$@"
