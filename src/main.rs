//! The binary: the allocator, and [`wi_credential_provider::run`], which
//! does everything else.

#![forbid(unsafe_code)]

use std::process::ExitCode;

/// x86_64 Linux builds allocate with dlmalloc: a hit's allocations share
/// a few pages instead of one set per size class (see Cargo.toml).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() -> ExitCode {
    wi_credential_provider::run()
}
