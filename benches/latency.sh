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
# The plugin runs with the environment a kubelet gives it, which has no
# WICP_* variable but the entry's. The Makefile's WICP_MOTO_SERVER (for the
# fakes above) and this script's own settings would otherwise reach it, and
# a WICP_* variable that no flag of the chosen provider reads sends the
# serving path to the whole command line (src/options.rs, parse_serving),
# which a hit does not pay in production.
for variable in $(compgen -e); do
  case $variable in WICP_*) unset "$variable" ;; esac
done

# `sh -c "[NAME=VALUE...] exec BIN FLAGS < request"`: every command,
# /bin/true included, pays for the same shell, redirect and exec.
invocation() { # provider transport [extra flags]; runs $use_bin, else $bin
  local provider=$1 transport=$2 assignments=() flags=() word
  shift 2
  while read -r word; do
    if [[ ${#flags[@]} -eq 0 && $word == *=* && $word != -* ]]; then
      assignments+=("$word")
    else
      flags+=("$word")
    fi
  done < "$work/$provider.$transport"
  echo "${assignments[*]} exec ${use_bin:-$bin} ${flags[*]} $* < $work/$provider.json"
}

providers=()
for provider in gcp azure aws; do
  [ -f "$work/$provider.json" ] && providers+=("$provider")
done
cache="$work/cache"
# -N: no shell correction (it is imprecise below 5 ms): the floor row is
# the same `sh -c 'exec ...'` around /bin/true.
command=(hyperfine -N --warmup "$WARMUP" --runs "$RUNS" --export-json "$work/results.json"
  -n floor "sh -c \"exec /bin/true < $work/gcp.json\"")
for provider in "${providers[@]}"; do
  if [ "$provider" != aws ]; then
    # The warm-up runs fill the cache; every measured run is a hit.
    command+=(-n "$provider hit" "sh -c \"$(invocation "$provider" https --cache-dir "$cache/$provider")\"")
    # The same hit with --metrics-dir: one lock, the state read and
    # rewritten, the .prom file written, synced and renamed.
    mkdir -p "$work/metrics-$provider"
    command+=(-n "$provider hit, --metrics-dir" "sh -c \"$(invocation "$provider" https --cache-dir "$cache/$provider-metrics" --metrics-dir "$work/metrics-$provider")\"")
  fi
  command+=(-n "$provider HTTP miss" "sh -c \"$(invocation "$provider" http)\""
    -n "$provider TLS miss" "sh -c \"$(invocation "$provider" https)\"")
  if [ -n "$musl_bin" ]; then
    use_bin=$musl_bin
    if [ "$provider" != aws ]; then
      command+=(-n "$provider hit (musl)" "sh -c \"$(invocation "$provider" https --cache-dir "$cache/$provider-musl")\"")
    fi
    command+=(-n "$provider TLS miss (musl)" "sh -c \"$(invocation "$provider" https)\"")
    use_bin=""
  fi
done
"${command[@]}"

# The hits really are hits, and every invocation answers.
for provider in "${providers[@]}"; do
  [ "$provider" = aws ] && continue
  for dir in "$provider" ${musl_bin:+"$provider-musl"}; do
    use_bin=""
    [ "$dir" = "$provider-musl" ] && use_bin=$musl_bin
    sh -c "$(invocation "$provider" https --cache-dir "$cache/$dir" --log-level debug)" \
      2>"$work/hit.log" >/dev/null
    grep -q "from the on-disk cache" "$work/hit.log" || { cat "$work/hit.log" >&2; exit 1; }
  done
  # The metrics rows wrote their file, without a warning.
  grep -q "^wicp_invocations_total{provider=\"$provider\".*outcome=\"hit\"" "$work/metrics-$provider/wi_credential_provider.prom" \
    || { echo "no metrics written for the $provider hits" >&2; exit 1; }
  use_bin=""
done

python3 - "$work/results.json" "$TLS_MISS_CPU_MS" "${command[@]}" <<'PY'
import datetime, json, platform, re, shlex, subprocess, sys

results = json.load(open(sys.argv[1]))["results"]
bound = float(sys.argv[2])
# Temporary paths shortened, so that the command reads.
command = shlex.join(sys.argv[3:])

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
for r in results:
    rows.append(
        f"| {r['command']} | {ms(cpu(r))} | {ms(r['median'])} | "
        f"{ms(r['median'] - floor['median'])} | {r['median'] / floor['median']:.2f}x | "
        f"{ms(r['min'])} | {len(r['times'])} |"
    )
    if "TLS miss" in r["command"] and cpu(r) * 1000 > bound:
        over.append(f"{r['command']}: {ms(cpu(r))} ms of CPU")
load = open("/proc/loadavg").read().split()[:3]
text = f"""# Benchmarks

Generated by `make bench` (benches/latency.sh) on {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.

## Method

Each row is one whole plugin process as the kubelet runs it (exec, request on
stdin, response on stdout), release build, measured with hyperfine: every
command is started the same way, `sh -c 'exec <command> < request.json'`
(hyperfine 1.15 cannot feed stdin itself), so the floor carries the same
shell and redirect. **CPU** is the mean user + system time of the process
(hyperfine's rusage figures); **wall** is the median elapsed time.

- **floor**: `/bin/true`: the cost of starting any process this way.
- **hit**: the plugin answering from `--cache-dir` (filled by the warm-up runs):
  no network, no TLS client, no async runtime.
- **hit, --metrics-dir**: the same hit with metrics on (docs/observability.md):
  the lock, the state file read and rewritten, the `.prom` file written, synced
  and renamed, on the file system of the bench's temporary directory.
- **HTTP miss**: no cache; the exchange with the provider's local fakes over
  plain HTTP (benches/upstream.rs: the fakes of tests/support on 127.0.0.1;
  gcp: one Google STS call; azure: Entra ID then ACR; aws: moto's STS then ECR).
- **TLS miss**: the same exchange over HTTPS: the fakes behind a TLS front with
  the test CA's certificate, trusted through `--ca-file`, as production runs.
  `make bench` fails if a TLS miss costs more than {bound:g} ms of CPU
  (see docs/performance.md: aws-lc's jitter entropy alone is about 50 ms).
- **(musl)**: the same, run by the static musl build `make release` ships
  (`--target x86_64-unknown-linux-musl`, built by this run); the rows
  without the mark are the glibc build `cargo build --release` makes, which
  loads libc, libm and libgcc_s through the dynamic loader.

| command | CPU (ms) | wall median (ms) | wall above floor (ms) | wall / floor | wall min (ms) | runs |
|---|---|---|---|---|---|---|
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
