#!/usr/bin/env bash
# `make bench`: what one plugin process costs, in CPU and wall time, measured
# as the kubelet runs it: one whole process per image pull, the request on
# stdin, the response on stdout.
#
#   floor       /bin/true, started the same way: process start-up
#   hit         the plugin answering from --cache-dir (no network, no TLS)
#   HTTP miss   no cache: the exchange with the provider's local fakes over
#               plain HTTP
#   TLS miss    the same exchange over HTTPS, the fakes behind a TLS front
#               with the test CA passed by --ca-file: what production runs
#
# for each provider (aws only when moto is installed, and without a hit row:
# moto's ECR tokens are already expired, and expired credentials are not
# cached). Results go to BENCHMARKS.md with the method, the machine and the
# exact command.
#
# It fails when a TLS miss costs more than TLS_MISS_CPU_MS of CPU (mean,
# user + system): aws-lc's CPU-jitter entropy collection alone costs about
# 50 ms per process, so a build that went back to it cannot pass
# (docs/performance.md).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-200}
WARMUP=${WARMUP:-20}
TLS_MISS_CPU_MS=${TLS_MISS_CPU_MS:-25}

if ! command -v hyperfine >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends hyperfine >/dev/null
fi

# Two invocations, not one: building the example enables the dev-dependencies'
# features, which must not leak into the binary measured. WICP_BENCH_BIN
# measures a binary built elsewhere instead.
if [ -z "${WICP_BENCH_BIN:-}" ]; then
  cargo build --release --locked --bin wi-credential-provider
fi
cargo build --release --locked --example bench-upstream
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
bin=${WICP_BENCH_BIN:-"$target/release/wi-credential-provider"}
upstream="$target/release/examples/bench-upstream"

# The release binaries (scripts/release.sh) are static musl executables:
# no dynamic loader, no shared libraries to map and bind. When the musl
# target and musl-gcc are installed, that build is measured too, in rows
# marked "(musl)". WICP_BENCH_MUSL=0 skips it.
musl_bin=""
if [ -z "${WICP_BENCH_BIN:-}" ] && [ "${WICP_BENCH_MUSL:-1}" != 0 ] \
  && rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl \
  && command -v musl-gcc >/dev/null; then
  CC_x86_64_unknown_linux_musl=musl-gcc \
    cargo build --release --locked --target x86_64-unknown-linux-musl --bin wi-credential-provider
  musl_bin="$target/x86_64-unknown-linux-musl/release/wi-credential-provider"
else
  echo "bench: not measuring the static musl build (needs: rustup target add x86_64-unknown-linux-musl; apt-get install musl-tools)" >&2
fi

work=$(mktemp -d)
cleanup() {
  # Closing the fakes' stdin stops them; they check every request they saw.
  if [ -n "${UPSTREAM_PID:-}" ]; then
    [ -n "${UPSTREAM[1]:-}" ] && eval "exec ${UPSTREAM[1]}>&-"
    wait "$UPSTREAM_PID" || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

coproc UPSTREAM { "$upstream" "$work"; }
read -r ready <&"${UPSTREAM[0]}"
[ "$ready" = ready ] || { echo "bench-upstream did not start" >&2; exit 1; }

# The plugin runs in the environment the kubelet gives a plugin: none of
# its own, only the entry's `env` (issue 47: a shell's SSL_CERT_FILE or
# SSL_CERT_DIR reaching the plugin made a miss open ~150 files). Every row
# is run by hyperfine under `env -i`, and its command sets only the
# provider's own variables (the fakes' endpoints, SSL_CERT_FILE for the
# system-store rows) before `exec`.
clean=(env -i)

# parts PROVIDER TRANSPORT: the row's variable assignments and flags, from
# the file bench-upstream wrote (assignments first, one word a line).
parts() {
  local assignments=() flags=() word
  while read -r word; do
    if [[ ${#flags[@]} -eq 0 && $word == *=* && $word != -* ]]; then
      assignments+=("$word")
    else
      flags+=("$word")
    fi
  done < "$work/$1.$2"
  ASSIGN="${assignments[*]}"
  FLAGS="${flags[*]}"
}

names=() shells=() grinds=() prepares=()
# row NAME BINARY PROVIDER TRANSPORT PREPARE [EXTRA FLAGS...]: one measured
# command, `sh -c "[NAME=VALUE...] exec BINARY FLAGS < request"`, and the
# same under callgrind for its instruction count.
row() {
  local name=$1 binary=$2 provider=$3 transport=$4 prepare=$5
  shift 5
  parts "$provider" "$transport"
  names+=("$name")
  shells+=("/bin/sh -c \"$ASSIGN exec $binary $FLAGS $* < $work/$provider.json\"")
  grinds+=("$ASSIGN exec valgrind --tool=callgrind --callgrind-out-file=/dev/null $binary $FLAGS $* < $work/$provider.json")
  prepares+=("$prepare")
}

providers=()
for provider in gcp azure aws; do
  [ -f "$work/$provider.json" ] && providers+=("$provider")
done
cache="$work/cache"
names+=(floor)
shells+=("/bin/sh -c \"exec /bin/true < $work/gcp.json\"")
grinds+=("exec valgrind --tool=callgrind --callgrind-out-file=/dev/null /bin/true < $work/gcp.json")
prepares+=(/bin/true)
for provider in "${providers[@]}"; do
  for build in glibc musl; do
    binary=$bin mark=""
    if [ "$build" = musl ]; then
      [ -n "$musl_bin" ] || continue
      binary=$musl_bin mark=" (musl)"
    fi
    if [ "$provider" != aws ]; then
      # The warm-up runs fill the cache; every measured run is a hit.
      row "$provider hit$mark" "$binary" "$provider" https /bin/true --cache-dir "$cache/$provider-$build"
      if [ "$build" = glibc ]; then
        # The same hit with --metrics-dir: one lock, the state read and
        # rewritten, the .prom file written, synced and renamed.
        mkdir -p "$work/metrics-$provider"
        row "$provider hit, --metrics-dir" "$binary" "$provider" https /bin/true \
          --cache-dir "$cache/$provider-metrics" --metrics-dir "$work/metrics-$provider"
      fi
    fi
    row "$provider HTTP miss$mark" "$binary" "$provider" http /bin/true
    row "$provider TLS miss, --ca-file$mark" "$binary" "$provider" https /bin/true
    row "$provider TLS miss, system store$mark" "$binary" "$provider" system /bin/true
    # A miss with --cache-dir: the credential is removed before each run,
    # the bundle's prepared anchors are kept (the warm-up made them).
    prepared="$cache/$provider-prepared-$build"
    row "$provider TLS miss, system store prepared$mark" "$binary" "$provider" system \
      "/bin/sh -c 'rm -f $prepared/*.json'" --cache-dir "$prepared"
  done
done

command=(hyperfine -N --warmup "$WARMUP" --runs "$RUNS" --export-json "$work/results.json")
for i in "${!names[@]}"; do
  command+=(--prepare "${prepares[$i]}" -n "${names[$i]}" "${shells[$i]}")
done
"${clean[@]}" "$(command -v hyperfine)" "${command[@]:1}"

# Instructions (callgrind, the same command in the same environment):
# what a row costs, whatever else the machine is doing.
: > "$work/instructions"
for i in "${!names[@]}"; do
  case ${names[$i]} in
    *"prepared"*) rm -f "$cache"/*-prepared-*/*.json ;;
  esac
  count=$("${clean[@]}" /bin/sh -c "${grinds[$i]}" 2>&1 >/dev/null | sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
  printf '%s\t%s\n' "${names[$i]}" "${count:-?}" >> "$work/instructions"
done

# The hits really are hits, the prepared rows read the prepared store, and
# every invocation answers.
for i in "${!names[@]}"; do
  case ${names[$i]} in
    *" hit"*) want="from the on-disk cache" ;;
    *"prepared"*) want="from the prepared store" ; rm -f "$cache"/*-prepared-*/*.json ;;
    *) continue ;;
  esac
  shell=${shells[$i]#/bin/sh -c \"}
  shell=${shell%\"}
  "${clean[@]}" /bin/sh -c "${shell/ < / --log-level debug < }" 2>"$work/check.log" >/dev/null
  grep -q "$want" "$work/check.log" || { echo "${names[$i]}: no \"$want\"" >&2; cat "$work/check.log" >&2; exit 1; }
done
for provider in "${providers[@]}"; do
  [ "$provider" = aws ] && continue
  grep -q "^wicp_invocations_total{provider=\"$provider\".*outcome=\"hit\"" "$work/metrics-$provider/wi_credential_provider.prom" \
    || { echo "no metrics written for the $provider hits" >&2; exit 1; }
done

python3 - "$work/results.json" "$TLS_MISS_CPU_MS" "$work/instructions" "${clean[@]}" "${command[@]}" <<'PY'
import datetime, json, platform, re, shlex, subprocess, sys

results = json.load(open(sys.argv[1]))["results"]
bound = float(sys.argv[2])
instructions = dict(line.rstrip("\n").split("\t") for line in open(sys.argv[3]))
# Temporary paths shortened, so that the command reads.
command = shlex.join(sys.argv[4:])

def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"

def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()

ms = lambda s: f"{s * 1000:.2f}"
cpu = lambda r: r["user"] + r["system"]
floor = next(r for r in results if r["command"] == "floor")
rows, over = [], []
def millions(name):
    n = instructions.get(name, "?")
    return f"{int(n) / 1e6:.2f} M" if n.isdigit() else n
for r in results:
    rows.append(
        f"| {r['command']} | {millions(r['command'])} | {ms(cpu(r))} | {cpu(r) / cpu(floor):.2f}x | "
        f"{ms(r['median'])} | {ms(r['median'] - floor['median'])} | {ms(r['min'])} | {len(r['times'])} |"
    )
    if "TLS miss" in r["command"] and cpu(r) * 1000 > bound:
        over.append(f"{r['command']}: {ms(cpu(r))} ms of CPU")
load = open("/proc/loadavg").read().split()[:3]
text = f"""# Benchmarks

Generated by `make bench` (benches/latency.sh) on {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.

## Method

Each row is one whole plugin process as the kubelet runs it (exec, request on
stdin, response on stdout), release build, in the environment the kubelet
gives a plugin: hyperfine runs under `env -i`, and each command sets only the
row's own variables (the fakes' endpoints; `SSL_CERT_FILE` for the
system-store rows) before `exec`. Every command is started the same way,
`sh -c 'exec <command> < request.json'` (hyperfine 1.15 cannot feed stdin
itself), so the floor carries the same shell and redirect.

- **instructions**: what callgrind counts for the process (the same command,
  the same environment, run once after the timed runs): repeatable whatever
  else the machine is doing, and the figure issue 47 sets its bounds in.
- **CPU**: the mean user + system time of the process (hyperfine's rusage
  figures), and its ratio to the floor's; **wall**: the median elapsed time.

- **floor**: `/bin/true`: the cost of starting any process this way.
- **hit**: the plugin answering from `--cache-dir` (filled by the warm-up runs):
  no network, no TLS client, no async runtime.
- **hit, --metrics-dir**: the same hit with metrics on (docs/observability.md):
  the lock, the state file read and rewritten, the `.prom` file written, synced
  and renamed, on the file system of the bench's temporary directory.
- **HTTP miss**: no cache; the exchange with the provider's local fakes over
  plain HTTP (benches/upstream.rs: the fakes of tests/support on 127.0.0.1;
  gcp: one Google STS call; azure: Entra ID then ACR; aws: moto's STS then ECR).
  No trust store is loaded.
- **TLS miss, --ca-file**: the same exchange over HTTPS: the fakes behind a TLS
  front with the test CA's certificate, trusted through `--ca-file`, which is
  tried first and alone (the node's bundle is never read).
- **TLS miss, system store**: the same, trusting the node's store only, as
  most nodes run: `SSL_CERT_FILE` names the system's bundle with the test CA
  appended, which takes the system bundle's own path (loaded at the first
  certificate, decoded). **prepared**: with `--cache-dir`, whose credential is
  removed before each run while the bundle's prepared anchors stay: the
  bundle is not decoded. `make bench` fails if a TLS miss costs more than
  {bound:g} ms of CPU (see docs/performance.md: aws-lc's jitter entropy alone
  is about 50 ms).
- **(musl)**: the same, run by the static musl build `make release` ships
  (`--target x86_64-unknown-linux-musl`, built by this run); the rows
  without the mark are the glibc build `cargo build --release` makes, which
  loads libc, libm and libgcc_s through the dynamic loader.

| command | instructions | CPU (ms) | CPU / floor | wall median (ms) | wall above floor (ms) | wall min (ms) | runs |
|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

## Machine

- CPU: {cpu_model()} (`/proc/cpuinfo` model name), `nproc` = {run('nproc')}
- Kernel: {platform.release()}; load average when the run ended: {' '.join(load)}
  (the machine was shared with other builds, so expect noise in the tails)
- {run('rustc', '--version')}; {run('hyperfine', '--version')}

## Command

```
make bench
```

which ran (temporary paths as they were):

```
{command}
```
"""
# Keep the Footprint section `make bench-footprint` writes (it replaces
# only its own), so either bench can run alone.
try:
    old = open("BENCHMARKS.md").read()
except FileNotFoundError:
    old = ""
at = old.find("\n## Footprint\n")
open("BENCHMARKS.md", "w").write(text + (old[at:] if at >= 0 else ""))
print(text)
if over:
    sys.exit("TLS misses over the bound of %g ms of CPU (jitter entropy back? see docs/performance.md):\n  %s"
             % (bound, "\n  ".join(over)))
PY
