//! Support code shared by the integration tests. Each test binary uses a
//! different subset, hence the allow.
#![allow(dead_code)]

pub mod azure;
pub mod chainguard;
pub mod cloudsmith;
pub mod containerd;
pub mod google;
pub mod http_server;
pub mod jfrog;
pub mod metadata;
pub mod moto;
pub mod net;
pub mod plugin;
pub mod quay;
pub mod registry;
pub mod spire;
pub mod sts;
pub mod token;
pub mod token_service;
pub mod vault;
pub mod windows;
pub mod zot;

/// Panics with `hint` unless every tool is on `PATH`: a missing tool fails
/// the `what` tests loudly, never skips them.
pub fn require_tools(what: &str, hint: &str, tools: &[&str]) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|tool| !std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
        .collect();
    assert!(
        missing.is_empty(),
        "{what} tests need {} on PATH; {hint}",
        missing.join(", ")
    );
}

/// Asserts that `text` (an error line, a report, a log) says each of
/// `needles`; a missing one is named, with the whole text.
pub fn assert_says(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} is not in:\n{text}");
    }
}
