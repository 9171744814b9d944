# wi-credential-provider: `make demo` to see it work, `make test` to check it.
CARGO ?= cargo
BIN := target/release/wi-credential-provider
# moto_server for the aws tests: `bash .ci/run` installs it into this venv.
export WICP_MOTO_SERVER ?= $(HOME)/.cache/wicp-venv/bin/moto_server

.PHONY: all build release demo test unit lint fmt clean bench

all: build

build:
	$(CARGO) build --release --locked

# Static musl binaries for x86_64 and aarch64, with .sha256 files, in dist/.
# Installs the Rust targets and Debian cross tools it needs. Not part of
# `make test`: it is two full release builds.
release:
	bash scripts/release.sh

# Runs the plugin as the kubelet would, in passthrough mode, on a sample request.
demo: build
	@echo "== request (stdin) =="
	@python3 scripts/demo-request.py > target/demo-request.json
	@cat target/demo-request.json
	@echo "== response (stdout) =="
	@$(BIN) --provider passthrough --registry harbor.example.com --audience harbor.example.com \
		< target/demo-request.json | python3 -m json.tool

# Every test: unit tests, the binary exec'd as the kubelet does, real registry
# end to end, plus formatting and lints.
test: lint
	$(CARGO) test --locked --all-targets

unit:
	$(CARGO) test --locked --lib

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

fmt:
	$(CARGO) fmt

# Cost of a cache hit and a miss as whole processes (hyperfine, release
# build); writes BENCHMARKS.md. Not a test: timings depend on the machine.
bench:
	bash bench/cache.sh

clean:
	$(CARGO) clean
