//! Fleet observability, with the real consumers: the binary exec'd as the
//! kubelet runs it with `--metrics-dir`, `--audit-log` and
//! `--log-format json`; Debian's `prometheus-node-exporter` scraping the
//! metrics directory with its textfile collector; Debian's `promtool`
//! linting the file; a strict JSON parser reading every stderr line.
//! Upstreams are the local RFC 8693 token server (tests/support/sts.rs).

use crate::support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use base64::Engine as _;
use serde_json::Value;
use support::node_exporter::{NodeExporter, series};
use support::plugin::{IMAGE, REGISTRY, Run, exec, request, run};
use support::sts::{AUDIENCE, Expect, FakeSts, oauth_error};
use support::token::TokenSpec;

const PROM: &str = "wi_credential_provider.prom";
const PROMTOOL: &str = "/usr/bin/promtool";

fn sts() -> FakeSts {
    FakeSts::start(Expect::puller())
}

fn token() -> String {
    TokenSpec::new("team", "puller", AUDIENCE).mint()
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

/// A token-exchange entry, observed by `observe` (flags).
fn exchange(sts: &FakeSts, cache: &Path, observe: &[String], image: &str) -> Run {
    exchange_with_token(sts, cache, observe, image, &token())
}

fn exchange_with_token(
    sts: &FakeSts,
    cache: &Path,
    observe: &[String],
    image: &str,
    token: &str,
) -> Run {
    let cache = cache.display().to_string();
    let mut args = sts.entry(&["--cache-dir", &cache]);
    args.extend(observe.iter().cloned());
    exec(&args, &request(image, Some(token), &[]))
}

/// A passthrough entry for harbor.example.com.
fn passthrough(observe: &[String], image: &str) -> Run {
    let mut args = strings(&[
        "--provider",
        "passthrough",
        "--registry",
        "harbor.example.com",
        "--audience",
        AUDIENCE,
    ]);
    args.extend(observe.iter().cloned());
    exec(&args, &request(image, Some(&token()), &[]))
}

fn metrics_flags(dir: &Path) -> Vec<String> {
    vec!["--metrics-dir".into(), dir.display().to_string()]
}

fn get(series: &BTreeMap<String, f64>, key: &str) -> f64 {
    *series.get(key).unwrap_or_else(|| {
        panic!(
            "no series {key} in {:#?}",
            series.keys().collect::<Vec<_>>()
        )
    })
}

fn promtool(file: &Path) -> std::process::Output {
    Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(file).unwrap())
        .output()
        .unwrap_or_else(|e| panic!("{PROMTOOL}: {e} (bash .ci/run installs it)"))
}

/// A mix of hits, misses and failures across two providers, scraped by
/// node-exporter: every count is exact, the file passes promtool, and
/// no label holds a service account, image or token.
#[test]
fn node_exporter_scrapes_exact_counts_after_a_mix() {
    let sts = sts();
    let root = tempfile::tempdir().unwrap();
    let metrics = root.path().join("textfile");
    std::fs::create_dir(&metrics).unwrap();
    let cache = root.path().join("cache");
    let observe = metrics_flags(&metrics);

    // token-exchange: one miss, three hits, then one refusal on another
    // registry path (a new cache key, the server says no).
    exchange(&sts, &cache, &observe, IMAGE).response();
    for _ in 0..3 {
        exchange(&sts, &cache, &observe, IMAGE).response();
    }
    sts.script([oauth_error(400, "invalid_grant", "subject not allowed")]);
    let refused = exchange(&sts, &root.path().join("cache2"), &observe, IMAGE);
    assert_eq!(refused.code, Some(1), "{}", refused.stderr);
    // passthrough: two misses (never cached), one registry refusal.
    passthrough(&observe, "harbor.example.com/team/app").response();
    passthrough(&observe, "harbor.example.com/team/app").response();
    let refused = passthrough(&observe, "quay.io/team/app");
    assert_eq!(refused.code, Some(1), "{}", refused.stderr);

    let file = metrics.join(PROM);
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o644
    );
    let lint = promtool(&file);
    assert!(
        lint.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );

    let exporter = NodeExporter::start(&metrics);
    let s = exporter.scrape();
    let inv = |provider: &str, registry: &str, rest: &str| {
        get(
            &s,
            &format!(
                "wicp_invocations_total{{{rest},provider=\"{provider}\",registry=\"{registry}\"}}"
            ),
        )
    };
    assert_eq!(get(&s, "node_textfile_scrape_error"), 0.0);
    assert_eq!(
        inv(
            "token-exchange",
            REGISTRY,
            "identity=\"service_account\",outcome=\"miss\""
        ),
        1.0
    );
    assert_eq!(
        inv(
            "token-exchange",
            REGISTRY,
            "identity=\"service_account\",outcome=\"hit\""
        ),
        3.0
    );
    assert_eq!(
        inv(
            "token-exchange",
            REGISTRY,
            "kind=\"upstream\",outcome=\"error\""
        ),
        1.0
    );
    assert_eq!(
        inv(
            "passthrough",
            "harbor.example.com",
            "identity=\"service_account\",outcome=\"miss\""
        ),
        2.0
    );
    assert_eq!(
        inv(
            "passthrough",
            "quay.io",
            "kind=\"registry\",outcome=\"error\""
        ),
        1.0
    );
    let up = |status: &str| {
        get(
            &s,
            &format!(
                "wicp_upstream_requests_total{{endpoint=\"token_exchange\",provider=\"token-exchange\",status=\"{status}\"}}"
            ),
        )
    };
    assert_eq!(up("2xx"), 1.0);
    assert_eq!(up("4xx"), 1.0);
    // The miss and the refusal each ran an exchange; hits ran none.
    assert_eq!(
        get(
            &s,
            "wicp_exchange_duration_seconds_count{provider=\"token-exchange\"}"
        ),
        2.0
    );
    assert_eq!(
        get(
            &s,
            "wicp_exchange_duration_seconds_bucket{le=\"+Inf\",provider=\"token-exchange\"}"
        ),
        2.0
    );
    // Passthrough's exchange is the token itself: counted, near zero.
    assert_eq!(
        get(
            &s,
            "wicp_exchange_duration_seconds_count{provider=\"passthrough\"}"
        ),
        2.0
    );
    // The cache gauges, as the last successful miss with a cache left
    // them (a failed exchange changes no cache): one entry.
    assert_eq!(get(&s, "wicp_cache_entries"), 1.0);
    let now = support::token::now() as f64;
    for provider in ["token-exchange", "passthrough"] {
        let ok = get(
            &s,
            &format!("wicp_last_success_timestamp_seconds{{provider=\"{provider}\"}}"),
        );
        let failed = get(
            &s,
            &format!("wicp_last_failure_timestamp_seconds{{provider=\"{provider}\"}}"),
        );
        assert!(
            (now - ok).abs() < 120.0 && (now - failed).abs() < 120.0,
            "{ok} {failed}"
        );
    }
    assert_eq!(get(&s, "wicp_build_info{version=\"0.1.0\"}"), 1.0);
    // Bounded labels only.
    let text = std::fs::read_to_string(&file).unwrap();
    for word in ["team", "puller", "app:v1", &token()[..20]] {
        assert!(!text.contains(word), "{word} in the metrics:\n{text}");
    }
}

/// With a cache holding an entry after a miss, the gauges say so.
#[test]
fn cache_gauges_follow_the_last_miss() {
    let sts = sts();
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("cache");
    let observe = metrics_flags(root.path());
    exchange(&sts, &cache, &observe, IMAGE).response();
    let text = std::fs::read_to_string(root.path().join(PROM)).unwrap();
    let s = series(&text);
    assert_eq!(get(&s, "wicp_cache_entries"), 1.0);
    let bytes: u64 = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert_eq!(get(&s, "wicp_cache_bytes"), bytes as f64);
    let expiry = get(&s, "wicp_cache_earliest_expiry_timestamp_seconds");
    let now = support::token::now() as f64;
    assert!(expiry > now && expiry < now + 7200.0, "{expiry}");
}

/// 64 invocations at once lose no count, and the file is whole after.
#[test]
fn sixty_four_concurrent_invocations_lose_no_count() {
    let root = tempfile::tempdir().unwrap();
    let observe = metrics_flags(root.path());
    let threads: Vec<_> = (0..64)
        .map(|_| {
            let observe = observe.clone();
            std::thread::spawn(move || passthrough(&observe, "harbor.example.com/team/app"))
        })
        .collect();
    for t in threads {
        let run = t.join().unwrap();
        run.response();
        assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    }
    let text = std::fs::read_to_string(root.path().join(PROM)).unwrap();
    let s = series(&text);
    assert_eq!(
        get(
            &s,
            "wicp_invocations_total{identity=\"service_account\",outcome=\"miss\",provider=\"passthrough\",registry=\"harbor.example.com\"}"
        ),
        64.0
    );
    assert_eq!(
        get(
            &s,
            "wicp_exchange_duration_seconds_count{provider=\"passthrough\"}"
        ),
        64.0
    );
    // No temporary file left behind.
    let names: Vec<String> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
}

/// A corrupt state file is reset with one warning; the pull succeeds and
/// counting starts again.
#[test]
fn a_corrupt_state_is_reset_with_a_warning() {
    let root = tempfile::tempdir().unwrap();
    let observe = metrics_flags(root.path());
    passthrough(&observe, "harbor.example.com/team/app").response();
    let state = root.path().join(".wi_credential_provider.state");
    std::fs::write(&state, b"{\"format\":1,\"invocations\":{\"truncated").unwrap();
    let run = passthrough(&observe, "harbor.example.com/team/app");
    run.response();
    let warnings: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", run.stderr);
    assert!(
        warnings[0].contains("counting again from zero"),
        "{}",
        run.stderr
    );
    let s = series(&std::fs::read_to_string(root.path().join(PROM)).unwrap());
    assert_eq!(
        get(
            &s,
            "wicp_invocations_total{identity=\"service_account\",outcome=\"miss\",provider=\"passthrough\",registry=\"harbor.example.com\"}"
        ),
        1.0
    );
}

/// Runs the binary inside a new mount namespace after `setup` (shell
/// commands run there first): read-only and full file systems for root,
/// whom permission bits do not stop.
fn in_mount_namespace(setup: &str, args: &[String], stdin: &str) -> Run {
    let mut script = String::from("set -e\n");
    script.push_str(setup);
    script.push_str("\nexec \"$0\" \"$@\"\n");
    let bin = support::plugin::bin().display().to_string();
    let mut wrapped = vec![
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        &bin,
    ];
    wrapped.extend(args.iter().map(String::as_str));
    support::plugin::run_program(Path::new("unshare"), &wrapped, &[], stdin.as_bytes())
}

/// Every unusable metrics directory and audit log: the pull succeeds,
/// with exactly one warning for each, and nothing is written.
#[test]
fn an_unusable_directory_costs_a_warning_never_a_pull() {
    let root = tempfile::tempdir().unwrap();
    let real = root.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = root.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let open = root.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let ro = root.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let full = root.path().join("full");
    std::fs::create_dir(&full).unwrap();
    let stdin = request("harbor.example.com/team/app", Some(&token()), &[]);
    let base = strings(&[
        "--provider",
        "passthrough",
        "--registry",
        "harbor.example.com",
        "--audience",
        AUDIENCE,
    ]);
    let cases: Vec<(&str, PathBuf, String, &str)> = vec![
        (
            "missing",
            root.path().join("missing"),
            String::new(),
            "does not exist",
        ),
        ("symlink", link.clone(), String::new(), "symbolic link"),
        (
            "world-writable",
            open.clone(),
            String::new(),
            "writable by group or others",
        ),
        (
            "read-only",
            ro.clone(),
            format!(
                "mount -t tmpfs -o ro,mode=0755,size=1m tmpfs {}",
                ro.display()
            ),
            "Read-only file system",
        ),
        (
            "full",
            full.clone(),
            format!(
                "mount -t tmpfs -o mode=0755,size=64k tmpfs {dir}\ndd if=/dev/zero of={dir}/filler bs=4k 2>/dev/null || true",
                dir = full.display()
            ),
            "No space left on device",
        ),
    ];
    for (what, dir, setup, why) in cases {
        let mut args = base.clone();
        args.extend([
            "--metrics-dir".to_string(),
            dir.display().to_string(),
            "--audit-log".to_string(),
            dir.join("audit.log").display().to_string(),
        ]);
        let run = if setup.is_empty() {
            exec(&args, &stdin)
        } else {
            in_mount_namespace(&setup, &args, &stdin)
        };
        assert_eq!(run.code, Some(0), "{what}: {}", run.stderr);
        run.response();
        let warnings: Vec<&str> = run
            .stderr
            .lines()
            .filter(|l| l.contains(": warning: "))
            .collect();
        assert_eq!(warnings.len(), 2, "{what}: {}", run.stderr);
        assert!(
            warnings[0].contains("metrics not updated") && warnings[0].contains(why),
            "{what}: {}",
            run.stderr
        );
        assert!(
            warnings[1].contains("audit record not written") && warnings[1].contains(why),
            "{what}: {}",
            run.stderr
        );
        assert!(!dir.join(PROM).exists(), "{what}");
        assert!(
            !real.join(PROM).exists(),
            "{what}: written through the link"
        );
    }
}

/// The audit trail: one line per invocation, 0600, who pulled what with
/// which identity, and never the token, in any encoding.
#[test]
fn the_audit_log_says_who_pulled_what_with_which_identity() {
    let sts = sts();
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("audit.log");
    let observe = vec!["--audit-log".into(), log.display().to_string()];
    let cache = root.path().join("cache");
    exchange(&sts, &cache, &observe, IMAGE).response();
    exchange(&sts, &cache, &observe, IMAGE).response();
    sts.script([oauth_error(400, "invalid_grant", "subject not allowed")]);
    let refused = exchange(&sts, &root.path().join("c2"), &observe, IMAGE);
    assert_eq!(refused.code, Some(1));
    assert_eq!(
        std::fs::metadata(&log).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 3, "{text}");
    for l in &lines {
        assert_eq!(l["provider"], "token-exchange");
        assert_eq!(l["registry"], REGISTRY);
        assert_eq!(l["image"], IMAGE);
        assert_eq!(l["service_account"], "team/puller");
        assert_eq!(l["pod"], "puller-7d9f8-abcde");
        assert_eq!(l["identity"], "service_account");
        assert_eq!(l["principal"]["url"], sts.url());
        assert_eq!(l["principal"]["audience"], "");
        assert_eq!(l["principal"]["client"], "none");
    }
    assert_eq!(
        lines
            .iter()
            .map(|l| l["outcome"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["miss", "hit", "error"]
    );
    assert_eq!(lines[0]["cache"], "exchanged and cached");
    assert_eq!(lines[1]["cache"], "from the on-disk cache");
    assert_eq!(lines[2]["error_kind"], "upstream");
    assert!(lines[2]["fix"].as_str().unwrap().len() > 10, "{}", lines[2]);
    assert_eq!(lines[2]["error_facts"]["service"], "the token server");
    assert!(
        lines[2]["error_facts"]["status"].is_string(),
        "{}",
        lines[2]
    );
    assert!(lines[0].get("error_facts").is_none());
    let t = token();
    let issued = sts.issued();
    for secret in std::iter::once(&t).chain(issued.iter()) {
        for shown in [
            secret.clone(),
            base64::engine::general_purpose::STANDARD.encode(secret),
            secret[..secret.len().min(24)].to_string(),
        ] {
            assert!(!text.contains(&shown), "the audit log holds a secret");
        }
    }
}

/// Every line the binary writes to stderr in JSON format is one strict
/// JSON object with the stable fields: successes, debug lines, warnings,
/// every kind of failure, and usage errors.
#[test]
fn every_stderr_line_is_json_with_log_format_json() {
    let sts = sts();
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("cache");
    let json = strings(&["--log-format", "json", "--log-level", "debug"]);
    let mut runs: Vec<(&str, Run)> = Vec::new();
    runs.push(("miss", exchange(&sts, &cache, &json, IMAGE)));
    runs.push(("hit", exchange(&sts, &cache, &json, IMAGE)));
    sts.script([oauth_error(400, "invalid_grant", "subject not allowed")]);
    runs.push((
        "upstream",
        exchange(&sts, &root.path().join("c2"), &json, IMAGE),
    ));
    let mut warn = json.clone();
    warn.extend(metrics_flags(&root.path().join("missing")));
    runs.push(("warning", passthrough(&warn, "harbor.example.com/team/app")));
    runs.push(("registry", passthrough(&json, "quay.io/team/app")));
    let base = strings(&[
        "--provider",
        "passthrough",
        "--registry",
        "harbor.example.com",
        "--log-format",
        "json",
    ]);
    runs.push(("request", exec(&base, "{not json")));
    runs.push((
        "token",
        exec(&base, &request("harbor.example.com/team/app", None, &[])),
    ));
    runs.push((
        "usage",
        exec(&strings(&["--log-format", "json", "--timeout", "0s"]), ""),
    ));
    runs.push((
        "unknown flag",
        exec(&strings(&["--log-format=json", "--no-such-flag"]), ""),
    ));
    let env_json = {
        let args: Vec<&str> = vec!["--no-such-flag"];
        run(&args, &[("WICP_LOG_FORMAT", "json")], b"")
    };
    runs.push(("usage from env", env_json));
    let mut levels = BTreeMap::new();
    for (what, run) in &runs {
        assert!(!run.stderr.is_empty(), "{what}: nothing on stderr");
        for line in run.stderr.lines() {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {line}"));
            let o = v.as_object().unwrap_or_else(|| panic!("{what}: {line}"));
            for field in ["time", "level", "message"] {
                assert!(o[field].is_string(), "{what}: no {field}: {line}");
            }
            let level = o["level"].as_str().unwrap().to_string();
            *levels.entry(level).or_insert(0) += 1;
            for key in o.keys() {
                assert!(
                    [
                        "time",
                        "level",
                        "message",
                        "provider",
                        "registry",
                        "service_account",
                        "outcome",
                        "kind",
                        "cache",
                        "duration_seconds",
                        "upstream_status",
                        "fix",
                        "facts",
                    ]
                    .contains(&key.as_str()),
                    "{what}: unknown field {key}: {line}"
                );
            }
        }
    }
    for level in ["debug", "info", "warning", "error"] {
        assert!(levels.contains_key(level), "no {level} line: {levels:?}");
    }
    // The final lines carry the structured fields.
    let last = |what: &str| -> Value {
        let run = &runs.iter().find(|(w, _)| *w == what).unwrap().1;
        serde_json::from_str(run.stderr.lines().last().unwrap()).unwrap()
    };
    let miss = last("miss");
    assert_eq!(miss["level"], "info");
    assert_eq!(miss["outcome"], "miss");
    assert_eq!(miss["provider"], "token-exchange");
    assert_eq!(miss["registry"], REGISTRY);
    assert_eq!(miss["service_account"], "team/puller");
    assert_eq!(miss["upstream_status"], 200);
    assert!(miss["duration_seconds"].is_number());
    assert_eq!(last("hit")["outcome"], "hit");
    assert_eq!(last("hit")["cache"], "from the on-disk cache");
    let upstream = last("upstream");
    assert_eq!(upstream["level"], "error");
    assert_eq!(upstream["kind"], "upstream");
    assert_eq!(upstream["upstream_status"], 400);
    assert!(upstream["fix"].is_string());
    assert!(!upstream["message"].as_str().unwrap().contains("; fix:"));
    // Who refused and how, as facts rather than words.
    assert_eq!(upstream["facts"]["service"], "the token server");
    assert_eq!(upstream["facts"]["status"], "400");
    assert!(
        upstream["facts"]["body_shape"]
            .as_str()
            .is_some_and(|shape| shape.ends_with("bytes, JSON without the expected fields")),
        "{upstream}"
    );
    assert!(last("request").get("facts").is_none());
    assert_eq!(last("request")["kind"], "request");
    assert_eq!(last("token")["kind"], "token");
    assert_eq!(last("registry")["kind"], "registry");
    assert_eq!(
        runs.iter().find(|(w, _)| *w == "usage").unwrap().1.code,
        Some(2)
    );
}

/// A token server quoting the subject token back in its error: in JSON
/// format the line is still masked, raw and base64 alike, and still JSON.
#[test]
fn a_secret_echoed_by_an_upstream_is_masked_in_json() {
    let sts = sts();
    let root = tempfile::tempdir().unwrap();
    let t = token();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&t);
    sts.script([oauth_error(
        400,
        "invalid_request",
        &format!("bad subject_token {t} (base64 {b64}) \"quoted\\\" {t}\""),
    )]);
    let audit_log = root.path().join("audit.log").display().to_string();
    let observe = strings(&[
        "--log-format",
        "json",
        "--log-level",
        "debug",
        "--audit-log",
        &audit_log,
    ]);
    let run = exchange_with_token(&sts, &root.path().join("c"), &observe, IMAGE, &t);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let audit = std::fs::read_to_string(root.path().join("audit.log")).unwrap();
    for text in [&run.stderr, &audit] {
        for line in text.lines() {
            serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        }
        for shown in [
            t.as_str(),
            &t[..30],
            b64.as_str(),
            &b64[..30],
            &t[t.len() - 30..],
        ] {
            assert!(
                !text.contains(shown),
                "a secret reached the output:\n{text}"
            );
        }
    }
}
