//! The binary is built without aws-lc's CPU-jitter entropy source.
//!
//! That source costs about 50 ms of CPU in every process that uses
//! randomness (every cache miss over TLS: the plugin is a new process per
//! image pull); `.cargo/config.toml` sets `AWS_LC_SYS_NO_JITTER_ENTROPY=1`
//! for every build, and the operating system's `getrandom` stays the
//! source (docs/performance.md). The variable is read by aws-lc-sys's build
//! script and is not an officially supported option, so a lost setting, an
//! override in the environment or an aws-lc-sys upgrade that ignores it
//! would bring the cost back without a word. The test binary's build (the
//! debug profile keeps symbols) shows which: the jitter collector's
//! functions are all named `jent_*`.

use std::process::Command;

/// The names in the binary's symbol table, by binutils' `nm` (the linker's
/// package: wherever the binary was linked, `nm` is there).
fn symbols(path: &str) -> Vec<String> {
    let out = Command::new("nm")
        .arg(path)
        .output()
        .expect("run nm (binutils) on the plugin binary");
    assert!(
        out.status.success(),
        "nm {path} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.rsplit(' ').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_binary_has_no_cpu_jitter_entropy_collector() {
    let path = env!("CARGO_BIN_EXE_wi-credential-provider");
    let symbols = symbols(path);
    // The symbol table is there (a stripped binary would pass for nothing):
    // aws-lc's random generator and its OS source are named in it.
    for wanted in ["RAND_bytes", "CRYPTO_sysrand"] {
        assert!(
            symbols.iter().any(|s| s.ends_with(wanted)),
            "{path} has no `{wanted}` symbol: this test needs a build with symbols \
             (the debug profile; the release profile strips them)"
        );
    }
    let jitter: Vec<&String> = symbols.iter().filter(|s| s.contains("jent_")).collect();
    assert!(
        jitter.is_empty(),
        "{path} contains aws-lc's CPU-jitter entropy collector ({} `jent_*` symbols, {:?}...): \
         the build lost AWS_LC_SYS_NO_JITTER_ENTROPY=1 (.cargo/config.toml [env]; an \
         AWS_LC_SYS_NO_JITTER_ENTROPY_<target> variable in the environment overrides it), \
         and every TLS miss pays about 50 ms of CPU again; see docs/performance.md",
        jitter.len(),
        jitter.iter().take(3).collect::<Vec<_>>()
    );
}
