//! The integration tests, in one binary (ripgrep's `tests/tests.rs`):
//! each file of tests/ is a module of it, and tests/support/ is compiled
//! once for all of them. One binary instead of one per file saves a
//! compile of support/ and a link per file, in `cargo test` and again in
//! clippy. A new file here needs its `mod` line below;
//! `architecture::every_test_file_is_a_module_of_the_one_binary` fails
//! until it has one.
//!
//! Run one file's tests with a filter: `cargo test --test tests spiffe::`.

// Tests and their fakes may panic on what they did not expect: that is how
// a test fails. The crate's own code denies these (Cargo.toml [lints]).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

mod architecture;
mod aws;
mod azure;
mod cache;
mod chainguard;
mod check_config;
mod cloudsmith;
mod config_examples;
mod docs;
mod entropy;
mod explain;
mod faults;
mod gcp;
mod harness;
mod input_bounds;
mod install;
mod jfrog;
mod monitoring;
mod node;
mod node_identity;
mod observability;
mod openshift;
mod passthrough;
mod protocol;
mod quay;
mod redaction;
mod release;
mod spiffe;
mod talos;
mod token_exchange;
mod vault;
mod windows;
