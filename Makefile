# wi-credential-provider: `make demo` to see it work, `make test` to check it.
CARGO ?= cargo
BIN := target/release/wi-credential-provider
# moto_server for the aws tests: `bash .ci/run` installs it into this venv.
export WICP_MOTO_SERVER ?= $(HOME)/.cache/wicp-venv/bin/moto_server
# kubectl (kubectl kustomize) for the install and monitoring tests, from the same venv.
export WICP_KUBECTL ?= $(HOME)/.cache/wicp-venv/bin/kubectl

.PHONY: all build release demo test test-windows test-release unit lint fmt clean bench fuzz bench-latency bench-footprint

all: build

build:
	$(CARGO) build --release --locked

# A release in dist/: static musl binaries for x86_64 and aarch64 and the
# Windows .exe (cargo auditable, each with a CycloneDX bill of materials),
# the node image (OCI archive, both architectures), .deb and .rpm packages,
# install.sh, SHA256SUMS and its SSH signature (WICP_RELEASE_KEY; a
# throwaway key without it). Installs the tools it needs; docs/release.md.
# Not part of `make test`: it is three full release builds (test-release
# builds a smaller one the same way).
release:
	bash scripts/release.sh

# The release tests (tests/release.rs, ignored by a plain cargo test):
# scripts/release.sh builds one smaller release, x86_64 only, without the
# optimiser and the .exe, into target/test-dist, and every test of
# tests/release.rs takes that one apart.
TEST_DIST := target/test-dist
test-release:
	DIST=$(TEST_DIST) WICP_RELEASE_PROFILE=release-test WICP_RELEASE_ARCHES=amd64 WICP_RELEASE_WINDOWS=0 \
		bash scripts/release.sh
	WICP_TEST_DIST=$(abspath $(TEST_DIST)) $(CARGO) test --locked --test tests release:: -- --ignored

# Runs the plugin as the kubelet would, in passthrough mode, on a sample request.
demo: build
	@echo "== request (stdin) =="
	@python3 scripts/demo-request.py > target/demo-request.json
	@cat target/demo-request.json
	@echo "== response (stdout) =="
	@$(BIN) --provider passthrough --registry harbor.example.com --audience harbor.example.com \
		< target/demo-request.json | python3 -m json.tool

# Every test: unit tests, the binary exec'd as the kubelet does, real registry
# end to end, the Windows build under Wine, the release's artefacts, plus
# formatting and lints.
test: lint
	$(CARGO) test --locked --workspace --all-targets
	$(MAKE) test-windows
	$(MAKE) test-release
	$(MAKE) fuzz

# The Windows .exe exec'd under Wine as a Windows kubelet runs it
# (tests/windows.rs; ignored by a plain cargo test). tests/windows/setup.sh
# cross-builds it with mingw-w64 and makes the tests' own Wine prefix.
test-windows:
	env $$(bash tests/windows/setup.sh) $(CARGO) test --locked --test tests windows:: -- --ignored

unit:
	$(CARGO) test --locked --workspace --lib

lint:
	$(CARGO) fmt --check
	$(CARGO) fmt --check --manifest-path fuzz/Cargo.toml
	$(CARGO) clippy --locked --workspace --all-targets -- -D warnings
	$(CARGO) clippy --locked --workspace --target x86_64-pc-windows-gnu -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --locked --workspace --no-deps --document-private-items

fmt:
	$(CARGO) fmt
	$(CARGO) fmt --manifest-path fuzz/Cargo.toml

# Every benchmark lives in benches/. Not a test: timings depend on the machine.
bench: bench-latency bench-footprint

# CPU and wall time of whole plugin processes (hyperfine, release build):
# /bin/true, a cache hit, a miss over HTTP and a miss over TLS (--ca-file)
# per provider; writes BENCHMARKS.md, and fails if a TLS miss costs more
# than TLS_MISS_CPU_MS of CPU (docs/performance.md).
bench-latency:
	bash benches/latency.sh

# Footprint of the shipped binary: its size, and per provider the peak RSS,
# wall time and upstream calls of one invocation against local fakes.
# Measures a copy of the release binary, so that cargo bench's own build
# of it cannot take its place. Adds its section to BENCHMARKS.md.
bench-footprint:
	@test -x /usr/bin/time || { echo "make bench needs GNU time: apt-get install time" >&2; exit 1; }
	$(CARGO) build --release --locked --bin wi-credential-provider
	@target=$$($(CARGO) metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])'); \
	cp "$$target/release/wi-credential-provider" "$$target/wi-credential-provider.footprint" && \
	WICP_BENCH_BIN="$$target/wi-credential-provider.footprint" $(CARGO) bench --locked --bench footprint

# Builds every cargo-fuzz target once, then runs each on FUZZ_RUNS inputs
# from a seed (FUZZ_SECONDS caps a slow target); a crash fails the run and
# leaves its input in fuzz/artifacts/<target>/. Each run first replays
# fuzz/regressions/<target>/, inputs that once failed, kept in git.
# Panics are what we hunt (the crate forbids unsafe), hence no sanitizer;
# RUSTC_BOOTSTRAP lets cargo-fuzz pass its -Z flags to the stable compiler.
FUZZ_SECONDS ?= 60
# The seed fixes libFuzzer's choices, not the path it takes: another
# compiler, cargo-fuzz or machine speed explores differently, so CI may find
# what a local run did not. A crash found there is real work: fix it (or the
# target's check), and add its input to fuzz/regressions/<target>/.
# Change FUZZ_SEED, FUZZ_RUNS and FUZZ_SECONDS to explore further by hand.
FUZZ_SEED ?= 1
FUZZ_RUNS ?= 1000000
FUZZ = cd fuzz && RUSTC_BOOTSTRAP=1 $(CARGO) fuzz
fuzz:
	@command -v cargo-fuzz >/dev/null || { echo "make fuzz needs cargo-fuzz: cargo install cargo-fuzz --locked" >&2; exit 1; }
	$(FUZZ) build -s none --target-dir target
	@for target in $$($(FUZZ) list); do \
		log=fuzz/target/fuzz-$$target.log; \
		corpus=; [ -d fuzz/regressions/$$target ] && corpus="corpus/$$target regressions/$$target" && mkdir -p fuzz/corpus/$$target; \
		if ! ($(FUZZ) run -s none --target-dir target $$target $$corpus -- \
			-seed=$(FUZZ_SEED) -runs=$(FUZZ_RUNS) -max_total_time=$(FUZZ_SECONDS) -timeout=10 >../$$log 2>&1); then \
			tail -n 40 $$log; echo "fuzz target $$target failed; input in fuzz/artifacts/$$target/" >&2; exit 1; \
		fi; \
		echo "fuzz $$target: $$(grep -E '^Done' $$log)"; \
	done

clean:
	$(CARGO) clean
