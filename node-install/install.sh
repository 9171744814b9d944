#!/bin/sh
# Installs wi-credential-provider on a node: the binary and its provider-name
# symlinks into the kubelet's credential provider bin dir, and a
# CredentialProviderConfig into place. Then prints the kubelet flags to set.
#
# With --node, it only checks the binary's sha256 and hands over to the
# binary's own `node install`, which finds the kubelet's real set-up (flags,
# systemd unit, distribution), merges into it, validates, writes with a
# backup and can restart the kubelet with a rollback. Arguments after `--`
# go to `node install` (e.g. -- --provider aws --replace NAME).
#
# Idempotent: a second run with the same inputs changes nothing. Verifies the
# binary's sha256 before anything is written. Checks the config with the
# binary's own check-config before putting it in place, because the kubelet
# refuses to start with a bad one. Never restarts the kubelet unless
# --restart-kubelet is given, and then only if something changed.
#
# Used as is by the DaemonSet (node-install/daemonset.yaml, with --root /host)
# and by image bakes (node-install/packer.pkr.hcl, cloud-init.yaml).
#
# POSIX sh on purpose: it runs in busybox images as well as on full hosts.
set -eu

PROG=wi-credential-provider
PROVIDERS="aws azure gcp passthrough vault token-exchange chainguard jfrog quay cloudsmith"

usage() {
  cat <<'EOF'
Usage: install.sh --binary PATH [options]
       install.sh --uninstall [--bin-dir DIR] [--config-path FILE] [--root DIR]

  --binary PATH        the wi-credential-provider binary to install (required)
  --sha256 HEX|FILE    its expected sha256, or a sha256sum file
                       (default: PATH.sha256; without a checksum nothing is installed)
  --config FILE        a CredentialProviderConfig to install
  --bin-dir DIR        the kubelet's --image-credential-provider-bin-dir
                       (default /usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec)
  --config-path FILE   where the config goes
                       (default /etc/kubernetes/credential-provider.yaml)
  --link NAME          another name to symlink to the binary (repeatable), for
                       provider entries not named wi-credential-provider-<provider>
  --root DIR           prefix every path with DIR (a mounted host root, an image
                       being built, a test directory); allowed without root
  --no-check           do not run check-config on the config before installing it
  --restart-kubelet    restart the kubelet if anything changed (systemctl; through
                       nsenter into PID 1 when --root is not /)
  --node               after the checksum check, run the binary's own
                       `node install` (it finds where the kubelet reads its
                       config); arguments after -- are passed to it
  --uninstall          remove the binary, every symlink to it in the bin dir and
                       the config at --config-path (remove the kubelet flags first:
                       the kubelet refuses to start without them)
  -h, --help           this text

Exit status: 0 installed or already up to date; 1 refused or failed; 2 usage.
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

binary=""
sha256=""
config=""
bin_dir=/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec
config_path=/etc/kubernetes/credential-provider.yaml
links=""
root=""
check=1
restart=0
uninstall=0
node=0

need_value() {
  [ "$#" -ge 2 ] || usage_error "$1 needs a value"
}

while [ "$#" -gt 0 ]; do
  case "$1" in
    --binary) need_value "$@"; binary=$2; shift 2 ;;
    --binary=*) binary=${1#*=}; shift ;;
    --sha256) need_value "$@"; sha256=$2; shift 2 ;;
    --sha256=*) sha256=${1#*=}; shift ;;
    --config) need_value "$@"; config=$2; shift 2 ;;
    --config=*) config=${1#*=}; shift ;;
    --bin-dir) need_value "$@"; bin_dir=$2; shift 2 ;;
    --bin-dir=*) bin_dir=${1#*=}; shift ;;
    --config-path) need_value "$@"; config_path=$2; shift 2 ;;
    --config-path=*) config_path=${1#*=}; shift ;;
    --link) need_value "$@"; links="$links $2"; shift 2 ;;
    --link=*) links="$links ${1#*=}"; shift ;;
    --root) need_value "$@"; root=$2; shift 2 ;;
    --root=*) root=${1#*=}; shift ;;
    --no-check) check=0; shift ;;
    --restart-kubelet) restart=1; shift ;;
    --uninstall) uninstall=1; shift ;;
    --node) node=1; shift ;;
    --) shift; break ;;
    -h | --help) usage; exit 0 ;;
    *) usage_error "unknown option $1" ;;
  esac
done

[ -n "$binary" ] || [ "$uninstall" -eq 1 ] || usage_error "--binary is required"
case "$bin_dir" in /*) ;; *) usage_error "--bin-dir must be an absolute path" ;; esac
case "$config_path" in /*) ;; *) usage_error "--config-path must be an absolute path" ;; esac
for name in $links; do
  case "$name" in
    */* | . | .. | "") usage_error "--link $name: a name, not a path" ;;
  esac
done

# Root is required to write into a real node's directories; with --root the
# caller chose the target tree and owns the permissions question.
if [ -z "$root" ] && [ "$(id -u)" -ne 0 ]; then
  die "must run as root to install into the node's directories (or pass --root DIR)"
fi
if [ -n "$root" ]; then
  [ -d "$root" ] || die "--root $root is not a directory"
  root=${root%/}
fi

note() {
  echo "install.sh: $*"
}

if [ "$uninstall" -eq 1 ]; then
  bin="$root$bin_dir"
  if [ -d "$bin" ]; then
    for path in "$bin"/* "$bin"/.[!.]*; do
      if [ -L "$path" ] && [ "$(readlink "$path")" = "$PROG" ]; then
        rm -f "$path"
        note "removed $path"
      fi
    done
    if [ -e "$bin/$PROG" ]; then
      rm -f "$bin/$PROG"
      note "removed $bin/$PROG"
    fi
  fi
  if [ -e "$root$config_path" ]; then
    rm -f "$root$config_path"
    note "removed $root$config_path"
  fi
  note "uninstalled; the kubelet must no longer be started with --image-credential-provider-config/--image-credential-provider-bin-dir pointing here"
  exit 0
fi

[ -f "$binary" ] || die "--binary $binary is not a file"

# The expected checksum: a hex value, a sha256sum file, or PATH.sha256.
if [ -z "$sha256" ] && [ -f "$binary.sha256" ]; then
  sha256=$binary.sha256
fi
[ -n "$sha256" ] || die "no checksum for $binary: pass --sha256 HEX|FILE (release files ship one)"
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
  die "sha256 mismatch for $binary: expected $expected, got $actual; nothing was installed"
fi

if [ "$node" -eq 1 ]; then
  # The binary does the rest: discovery, merge, check-config, atomic writes
  # with backups, restart and rollback.
  set -- node install --root "${root:-/}" --binary "$binary" "$@"
  [ -z "$config" ] || set -- "$@" --config "$config"
  [ "$restart" -eq 0 ] || set -- "$@" --restart-kubelet
  note "sha256 verified; handing over to $binary $*"
  exec "$binary" "$@"
fi

changed=0

# install_file SRC DEST MODE: copies SRC to DEST unless it is already there,
# through a temporary file in the same directory and a rename, so the kubelet
# never executes or reads a half-written file.
install_file() {
  src=$1 dest=$2 mode=$3
  if [ -f "$dest" ] && [ ! -L "$dest" ] && cmp -s "$src" "$dest"; then
    current=$(stat -c %a "$dest")
    if [ "$current" = "$mode" ]; then
      note "unchanged $dest"
      return 0
    fi
    chmod "$mode" "$dest"
    note "mode fixed $dest"
    changed=1
    return 0
  fi
  tmp="$dest.tmp.$$"
  cp "$src" "$tmp"
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$dest"
  note "installed $dest"
  changed=1
}

# link NAME: makes $bin/NAME a symlink to the binary, replacing anything else.
link() {
  dest="$bin/$1"
  if [ -L "$dest" ] && [ "$(readlink "$dest")" = "$PROG" ]; then
    note "unchanged $dest -> $PROG"
    return 0
  fi
  if [ -d "$dest" ] && [ ! -L "$dest" ]; then
    die "$dest is a directory; remove it first"
  fi
  tmp="$bin/.$1.tmp.$$"
  ln -s "$PROG" "$tmp"
  mv -f "$tmp" "$dest"
  note "linked $dest -> $PROG"
  changed=1
}

bin="$root$bin_dir"
mkdir -p "$bin"
install_file "$binary" "$bin/$PROG" 755
for provider in $PROVIDERS; do
  link "$PROG-$provider"
done
for name in $links; do
  link "$name"
done

if [ -n "$config" ]; then
  [ -f "$config" ] || die "--config $config is not a file"
  if [ "$check" -eq 1 ]; then
    # The installed binary checks the config against the bin dir it will be
    # used with. A binary for another architecture (an arm64 image built on
    # amd64) cannot run here: say so and go on.
    set +e
    report=$("$bin/$PROG" check-config "$config" --bin-dir "$bin" 2>&1)
    status=$?
    set -e
    case "$status" in
      0) ;;
      1)
        echo "$report" >&2
        die "$config has errors the kubelet would trip on; it was not installed (--no-check to force)"
        ;;
      126 | 127) note "cannot run $bin/$PROG here (another architecture?); config not checked" ;;
      *)
        echo "$report" >&2
        die "check-config failed on $config (exit $status); it was not installed"
        ;;
    esac
  fi
  mkdir -p "$(dirname "$root$config_path")"
  install_file "$config" "$root$config_path" 644
fi

if [ "$restart" -eq 1 ]; then
  if [ "$changed" -eq 0 ]; then
    note "nothing changed; the kubelet is left running"
  elif [ -z "$root" ] || [ "$root" = "/" ]; then
    systemctl restart kubelet
    note "restarted the kubelet"
  else
    # From a privileged pod with hostPID: enter the host's namespaces.
    nsenter --target 1 --mount --uts --ipc --net --pid -- systemctl restart kubelet
    note "restarted the kubelet on the host"
  fi
elif [ "$changed" -eq 1 ]; then
  note "the kubelet reads its credential provider config only at start: restart it to use this one"
fi

if [ "$changed" -eq 0 ]; then
  note "everything was already up to date"
fi
cat <<EOF
Set these kubelet flags (command-line flags, not KubeletConfiguration fields):
  --image-credential-provider-config=$config_path
  --image-credential-provider-bin-dir=$bin_dir
EOF
