//! check-config and explain read files an admin points them at; a file
//! nested 100,000 levels deep took check-config 32 s (the YAML parser is
//! quadratic in depth) and a huge one would be read whole. Both are
//! refused before parsing, quickly, with a clear message.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const SA: &str =
    "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: app\n  namespace: team\n";
const CONFIG: &str =
    "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: []\n";

/// Hostile files: deep flow mappings, deep flow sequences, deep block
/// mappings (by indentation), and a file past the size bound.
fn hostile() -> Vec<(&'static str, String, &'static str)> {
    let n = 100_000;
    let mut block = String::new();
    for i in 0..1_000 {
        block.push_str(&" ".repeat(i));
        block.push_str("a:\n");
    }
    vec![
        (
            "flow mappings",
            format!("{}1{}\n", "{a: ".repeat(n), "}".repeat(n)),
            "nested too deeply to parse safely",
        ),
        (
            "flow sequences",
            format!("{}{}\n", "[".repeat(n), "]".repeat(n)),
            "nested too deeply to parse safely",
        ),
        ("block mappings", block, "nested too deeply to parse safely"),
        (
            "a big file",
            format!("# {}\n{CONFIG}", "x".repeat(2 << 20)),
            "larger than 1048576 bytes",
        ),
    ]
}

/// Runs `command`, killing it after 10 s (a quadratic parse of these
/// files takes minutes).
fn timed(command: &mut Command) -> (Output, Duration) {
    use std::process::Stdio;
    let started = Instant::now();
    let mut child = command
        .env_clear()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    (out, started.elapsed())
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn check_config_refuses_deep_and_huge_files_before_parsing() {
    let dir = tempfile::tempdir().unwrap();
    for (what, content, message) in hostile() {
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, content).unwrap();
        let (out, took) = timed(
            Command::new(support::plugin::bin())
                .arg("check-config")
                .arg(&path),
        );
        let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert_ne!(out.status.code(), Some(0), "{what}: {shown}");
        assert!(shown.contains(message), "{what}: {shown}");
        assert!(took < Duration::from_secs(3), "{what}: took {took:?}");
    }
}

#[test]
fn explain_refuses_deep_and_huge_manifests_and_configs_before_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let good_sa = dir.path().join("good-sa.yaml");
    let good_config = dir.path().join("good-config.yaml");
    std::fs::write(&good_sa, SA).unwrap();
    std::fs::write(&good_config, CONFIG).unwrap();
    for (what, content, message) in hostile() {
        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, content).unwrap();
        for (sa, config) in [(&bad, &good_config), (&good_sa, &bad)] {
            let (out, took) = timed(Command::new(support::plugin::bin()).args([
                "explain",
                "--image",
                "registry.example/app",
                "--service-account",
                &arg(sa),
                "--config",
                &arg(config),
            ]));
            let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
            assert_ne!(out.status.code(), Some(0), "{what}: {shown}");
            assert!(shown.contains(message), "{what}: {shown}");
            assert!(took < Duration::from_secs(3), "{what}: took {took:?}");
        }
    }
}

#[test]
fn ordinary_nesting_is_fine() {
    // A kubectl-style manifest with managedFields is about ten levels deep.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    let mut nested = String::from(CONFIG);
    nested.push_str("# nested below\nx:\n");
    for i in 1..40 {
        nested.push_str(&format!("{}k{i}:\n", "  ".repeat(i)));
    }
    nested.push_str(&format!("{}leaf: [[{{a: [1]}}]]\n", "  ".repeat(40)));
    std::fs::write(&path, nested).unwrap();
    let out = Command::new(support::plugin::bin())
        .env_clear()
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    let shown = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!shown.contains("levels deep"), "{shown}");
}

fn arg(path: &Path) -> String {
    path.display().to_string()
}
