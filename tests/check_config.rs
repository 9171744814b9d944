//! `check-config` run as an admin runs it, over a failing and a passing
//! fixture for every rule (tests/fixtures/check-config/<rule>/).
//!
//! A fixture is a `fail*` or `pass*` file (or directory, read as a config
//! directory). A failing fixture must produce a finding of its rule; a
//! passing one must produce no finding at all. When the rule's directory has
//! a `bin/`, it is passed as `--bin-dir`.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use wicp_kubelet::config::Rule;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/check-config")
}

struct Outcome {
    code: Option<i32>,
    report: Value,
    stdout: String,
}

/// Runs check-config twice, for the JSON report and the text lines.
fn check_config(path: &Path, extra: &[&str]) -> Outcome {
    let run = |format: &str| {
        Command::new(support::plugin::bin())
            .env_clear()
            .arg("check-config")
            .arg(path)
            .args(extra)
            .args(["--output", format])
            .output()
            .unwrap()
    };
    let json = run("json");
    let text = run("text");
    assert_eq!(json.status.code(), text.status.code());
    let stdout = String::from_utf8(json.stdout).unwrap();
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{}: not JSON ({e}): {stdout}", path.display()));
    Outcome {
        code: json.status.code(),
        report,
        stdout: String::from_utf8(text.stdout).unwrap(),
    }
}

fn cases(rule: Rule, prefix: &str) -> Vec<PathBuf> {
    let dir = fixtures().join(rule.as_str());
    let mut list: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect();
    list.sort();
    list
}

fn run_fixture(rule: Rule, path: &Path) -> Outcome {
    let bin = fixtures().join(rule.as_str()).join("bin");
    let bin = bin.to_string_lossy().into_owned();
    let mut args: Vec<String> = Vec::new();
    if Path::new(&bin).is_dir() {
        args.extend(["--bin-dir".to_string(), bin]);
    }
    // Extra arguments for one case, one per line, in args/<case name>
    // ({dir} is the rule's directory): a KubeletConfiguration, a version.
    let dir = fixtures().join(rule.as_str());
    let extra = dir.join("args").join(path.file_name().unwrap());
    if let Ok(text) = std::fs::read_to_string(&extra) {
        args.extend(
            text.lines()
                .filter(|l| !l.is_empty())
                .map(|l| l.replace("{dir}", &dir.to_string_lossy())),
        );
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    check_config(path, &args)
}

#[test]
fn every_rule_has_a_failing_and_a_passing_fixture() {
    let mut missing = Vec::new();
    for rule in Rule::ALL {
        if cases(*rule, "fail").is_empty() {
            missing.push(format!("{rule}: no fail fixture"));
        }
        if cases(*rule, "pass").is_empty() {
            missing.push(format!("{rule}: no pass fixture"));
        }
    }
    assert!(missing.is_empty(), "{missing:#?}");
}

/// Failing fixtures whose finding of their own rule is a warning, with the exit
/// code check-config must give for them: 0 when warnings are all it finds, 1
/// when the fixture also has an error. Every other failing fixture must give
/// an error of its rule and exit 1. Written down here rather than read from
/// the report under test, so an error downgraded to a warning, or an exit
/// code that ignores the errors, fails the test.
const WARNING_FIXTURES: &[(&str, i32)] = &[
    ("annotations.not-listed/fail-aws-one.yaml", 0),
    ("auto.with-token/fail.yaml", 0),
    ("env.unknown/fail.yaml", 0),
    ("kubelet.multiple-documents/fail.yaml", 0),
    ("name.unknown-suffix/fail.yaml", 1),
    // A node entry narrowed to one registry: deliberate, so a warning.
    ("overlap.node-identity/fail-narrowed.yaml", 0),
    // Ours already serves the node identity: the stock entry is redundant.
    ("overlap.node-identity/fail-replaced.yaml", 0),
    ("image-reuse/fail.yaml", 0),
    ("image-reuse/fail-allowlist.yaml", 0),
    // A source the kubelet never asks about: the rule does nothing.
    ("registry-mirror/fail-source.yaml", 0),
    // Round 5, item 10: per-pod SPIRE entries shared by a service
    // account's pods; not an error, and not passthrough.cache-type.
    ("spiffe/fail-cache-type.yaml", 0),
    ("spiffe/fail-cache-type-aws.yaml", 0),
];

#[test]
fn warning_fixture_table_names_existing_fixtures() {
    for (name, _) in WARNING_FIXTURES {
        assert!(fixtures().join(name).exists(), "{name} does not exist");
    }
}

#[test]
fn failing_fixtures_report_their_rule() {
    let mut wrong = Vec::new();
    for rule in Rule::ALL {
        for path in cases(*rule, "fail") {
            let out = run_fixture(*rule, &path);
            let findings = out.report["findings"].as_array().unwrap();
            let hits: Vec<&Value> = findings
                .iter()
                .filter(|f| f["rule"] == rule.as_str())
                .collect();
            let relative = path.strip_prefix(fixtures()).unwrap().to_string_lossy();
            let (severity, expected_code) = WARNING_FIXTURES
                .iter()
                .find(|(name, _)| *name == relative)
                .map_or(("error", 1), |(_, code)| ("warning", *code));
            // The summary counts must agree with the findings they summarise.
            let count = |severity: &str| {
                findings
                    .iter()
                    .filter(|f| f["severity"] == severity)
                    .count() as u64
            };
            let counts_agree = out.report["errors"].as_u64() == Some(count("error"))
                && out.report["warnings"].as_u64() == Some(count("warning"));
            if hits.is_empty()
                || hits.iter().any(|hit| hit["severity"] != severity)
                || out.code != Some(expected_code)
                || !counts_agree
            {
                wrong.push(format!(
                    "{}: expected a {rule} {severity} (exit {expected_code}) and summary \
                     counts that match the findings, got exit {:?}:\n{}",
                    path.display(),
                    out.code,
                    out.stdout
                ));
                continue;
            }
            // Every finding names its file and field, and its provider when
            // there is one; the text line carries all three.
            for hit in hits {
                let file = hit["file"].as_str().unwrap();
                assert!(file.starts_with(&*fixtures().to_string_lossy()), "{hit}");
                let line = out
                    .stdout
                    .lines()
                    .find(|l| l.contains(hit["message"].as_str().unwrap()))
                    .unwrap_or_else(|| panic!("no text line for {hit}:\n{}", out.stdout));
                assert!(line.starts_with(file), "{line}");
                assert!(line.contains(hit["field"].as_str().unwrap()), "{line}");
                if let Some(provider) = hit["provider"].as_str() {
                    assert!(line.contains(&format!("provider {provider:?}")), "{line}");
                }
                assert!(
                    line.contains(&format!(": {}: ", hit["severity"].as_str().unwrap())),
                    "{line}"
                );
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[test]
fn passing_fixtures_are_clean() {
    let mut wrong = Vec::new();
    for rule in Rule::ALL {
        for path in cases(*rule, "pass") {
            let out = run_fixture(*rule, &path);
            if out.code != Some(0) || !out.report["findings"].as_array().unwrap().is_empty() {
                wrong.push(format!(
                    "{}: expected no finding, got exit {:?}:\n{}",
                    path.display(),
                    out.code,
                    out.stdout
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[test]
fn report_shape_and_summary() {
    let path = fixtures().join("passthrough.cache-type/fail.yaml");
    let out = check_config(&path, &[]);
    assert_eq!(out.code, Some(1));
    let r = &out.report;
    assert_eq!(r["errors"], 1);
    assert_eq!(r["warnings"], 0);
    assert_eq!(
        r["providers"],
        serde_json::json!(["wi-credential-provider-passthrough"])
    );
    assert_eq!(r["files"].as_array().unwrap().len(), 1);
    let f = &r["findings"][0];
    assert_eq!(f["severity"], "error");
    assert_eq!(f["rule"], "passthrough.cache-type");
    assert_eq!(f["provider"], "wi-credential-provider-passthrough");
    assert_eq!(f["field"], "providers[0].tokenAttributes.cacheType");
    assert_eq!(f["fix"], "set cacheType: Token");
    assert!(
        out.stdout
            .ends_with(": 1 provider in 1 file, 1 error, 0 warnings\n"),
        "{}",
        out.stdout
    );
}

#[test]
fn usage_errors_exit_2() {
    let out = Command::new(support::plugin::bin())
        .args(["check-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(support::plugin::bin())
        .args(["check-config", "x.yaml", "--output", "xml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Round-4 item 1: one reading of `matchImages`, the kubelet's. A stock
/// node-identity entry written with a scheme never runs, so it overlaps
/// nothing of ours; check-config reports the scheme (naming the entry and
/// the fix), and no overlap.
#[test]
fn a_node_entry_with_a_scheme_is_reported_for_its_scheme_not_as_an_overlap() {
    let path = fixtures().join("overlap.node-identity/scheme-node-entry.yaml");
    let out = check_config(&path, &[]);
    let rules: Vec<&str> = out.report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap())
        .collect();
    assert_eq!(rules, ["match-images.scheme"], "{}", out.stdout);
    let finding = &out.report["findings"][0];
    assert_eq!(finding["provider"], "ecr-credential-provider");
    assert_eq!(finding["field"], "providers[0].matchImages[0]");
    assert_eq!(
        finding["fix"],
        "write it without the scheme: \"*.dkr.ecr.*.amazonaws.com\""
    );
    assert_eq!(out.code, Some(1));
}
