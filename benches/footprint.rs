//! `make bench`, footprint: the release binary's size, and for each
//! provider the peak resident memory (`/usr/bin/time -v`), the wall time
//! and the number of upstream calls of one invocation, on a cache miss and
//! on a hit, measured against the local fakes the tests use (tests/support)
//! and moto, as the kubelet runs it.
//!
//! The binary measured is `$WICP_BENCH_BIN` (the Makefile passes a copy of
//! the release build, the one that ships), else the one cargo built for
//! this bench. The table replaces the Footprint section of BENCHMARKS.md.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::print_stdout,
    clippy::print_stderr
)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::azure::{self, App, FakeAcr, FakeEntra};
use support::google::{FakeIam, FakeSts, GCP_CLUSTER, GCP_PROJECT};
use support::moto::Moto;
use support::net::Relay;
use support::plugin::request;
use support::token::TokenSpec;

/// Runs per scenario; the median is reported.
const RUNS: usize = 7;

fn binary() -> PathBuf {
    std::env::var_os("WICP_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_wi-credential-provider")))
}

/// One invocation under `/usr/bin/time -v`: peak RSS in KiB and wall time.
fn measure(args: &[String], env: &[(&str, &str)], stdin: &str) -> (u64, Duration) {
    let started = Instant::now();
    let mut child = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(binary())
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run /usr/bin/time (apt-get install time)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let elapsed = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the plugin failed: {stderr}");
    let response: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a response");
    assert_eq!(response["kind"], "CredentialProviderResponse");
    let rss = stderr
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|v| v.trim().parse().ok())
        .expect("GNU time's maximum resident set size");
    (rss, elapsed)
}

struct Row {
    scenario: String,
    calls: usize,
    rss_kib: u64,
    wall: Duration,
}

/// One warm-up and RUNS measured invocations, `prepare` before each;
/// `calls` counts the upstream requests so far, which must be the same for
/// every run.
fn bench(
    scenario: String,
    args: &[String],
    env: &[(&str, &str)],
    stdin: &str,
    calls: &dyn Fn() -> usize,
    prepare: &dyn Fn(),
) -> Row {
    let mut rss = Vec::new();
    let mut wall = Vec::new();
    let mut per_run = None;
    for run in 0..=RUNS {
        prepare();
        let before = calls();
        let (kib, elapsed) = measure(args, env, stdin);
        if run == 0 {
            continue;
        }
        let made = calls() - before;
        assert!(per_run.is_none_or(|n| n == made), "{scenario}: calls vary");
        per_run = Some(made);
        rss.push(kib);
        wall.push(elapsed);
    }
    rss.sort_unstable();
    wall.sort_unstable();
    Row {
        scenario,
        calls: per_run.unwrap_or(0),
        rss_kib: rss[RUNS / 2],
        wall: wall[RUNS / 2],
    }
}

/// A provider's invocation, measured without a cache, then with
/// `--cache-dir` on a miss (the entry removed before each run) and on a hit.
struct Provider<'a> {
    name: &'static str,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    stdin: String,
    calls: &'a dyn Fn() -> usize,
    /// Whether a hit can be measured (moto's ECR answers are already expired,
    /// and expired credentials are not cached).
    cacheable: bool,
}

fn measure_provider(p: &Provider<'_>, rows: &mut Vec<Row>) {
    let env: Vec<(&str, &str)> = p.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().join("cache");
    let mut cached = p.args.clone();
    cached.extend(["--cache-dir".to_string(), dir.display().to_string()]);
    let empty = || {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                if entry.path().extension().is_some_and(|e| e == "json") {
                    std::fs::remove_file(entry.path()).unwrap();
                }
            }
        }
    };
    rows.push(bench(
        format!("{}: miss, --cache-dir", p.name),
        &cached,
        &env,
        &p.stdin,
        p.calls,
        &empty,
    ));
    if p.cacheable {
        let hit = bench(
            format!("{}: hit, --cache-dir", p.name),
            &cached,
            &env,
            &p.stdin,
            p.calls,
            &|| {},
        );
        assert_eq!(hit.calls, 0, "a hit makes no upstream call");
        rows.push(hit);
    }
    rows.push(bench(
        format!("{}: no cache", p.name),
        &p.args,
        &env,
        &p.stdin,
        p.calls,
        &|| {},
    ));
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn main() {
    // `cargo bench` passes --bench. `cargo test --all-targets` (make test)
    // builds and runs this too, without it: compiled, not measured.
    if !std::env::args().any(|a| a == "--bench") {
        eprintln!("footprint: measured by `make bench`, not by `cargo test`");
        return;
    }
    let mut rows = Vec::new();

    // moto, the AWS emulator, behind a relay that counts the calls.
    let moto = Moto::start();
    let relay = Relay::start(moto.url().trim_start_matches("http://").parse().unwrap());
    let token = TokenSpec::new("team", "puller", "sts.amazonaws.com").mint();
    measure_provider(
        &Provider {
            name: "aws web identity (STS, ECR)",
            args: strings(&["--provider", "aws"]),
            env: vec![("AWS_ENDPOINT_URL", relay.server.url())],
            stdin: request(
                "123456789012.dkr.ecr.us-west-2.amazonaws.com/team/app",
                Some(&token),
                &[(
                    "eks.amazonaws.com/role-arn",
                    "arn:aws:iam::123456789012:role/pull",
                )],
            ),
            calls: &|| relay.server.request_count(),
            cacheable: false,
        },
        &mut rows,
    );

    let entra = FakeEntra::start(App::trusting("team", "puller"));
    let acr = FakeAcr::start("contoso.azurecr.io", &entra);
    let token = TokenSpec::new("team", "puller", azure::AUDIENCE).mint();
    measure_provider(
        &Provider {
            name: "azure (Entra ID, ACR)",
            args: strings(&[
                "--provider",
                "azure",
                "--azure-authority-host",
                &entra.url(),
                "--acr-endpoint",
                &acr.url(),
            ]),
            env: vec![],
            stdin: request(
                "contoso.azurecr.io/team/app",
                Some(&token),
                &[
                    ("azure.workload.identity/client-id", azure::CLIENT_ID),
                    ("azure.workload.identity/tenant-id", azure::TENANT),
                ],
            ),
            calls: &|| entra.server.request_count() + acr.server.request_count(),
            cacheable: true,
        },
        &mut rows,
    );

    let sts = FakeSts::start();
    let iam = FakeIam::start(&sts);
    let gcp_args = strings(&[
        "--provider",
        "gcp",
        "--gcp-project-id",
        GCP_PROJECT,
        "--gcp-cluster",
        GCP_CLUSTER,
        "--gcp-sts-endpoint",
        &sts.server.url(),
        "--gcp-iamcredentials-endpoint",
        &iam.server.url(),
    ]);
    let token = TokenSpec::new("team", "puller", &format!("{GCP_PROJECT}.svc.id.goog")).mint();
    let gcp_calls = || sts.server.request_count() + iam.server.request_count();
    measure_provider(
        &Provider {
            name: "gcp (STS)",
            args: gcp_args.clone(),
            env: vec![],
            stdin: request("us-docker.pkg.dev/my-project/team/app", Some(&token), &[]),
            calls: &gcp_calls,
            cacheable: true,
        },
        &mut rows,
    );
    measure_provider(
        &Provider {
            name: "gcp impersonating (STS, IAM Credentials)",
            args: gcp_args,
            env: vec![],
            stdin: request(
                "us-docker.pkg.dev/my-project/team/app",
                Some(&token),
                &[(
                    "iam.gke.io/gcp-service-account",
                    "puller@my-project.iam.gserviceaccount.com",
                )],
            ),
            calls: &gcp_calls,
            cacheable: true,
        },
        &mut rows,
    );

    let token = TokenSpec::new("team", "puller", "harbor.example.com").mint();
    rows.push(bench(
        "passthrough (no network, never cached)".to_string(),
        &strings(&[
            "--provider",
            "passthrough",
            "--registry",
            "harbor.example.com",
        ]),
        &[],
        &request("harbor.example.com/team/app", Some(&token), &[]),
        &|| 0,
        &|| {},
    ));

    let size = std::fs::metadata(binary()).expect("the binary").len();
    let mut table = format!(
        "Binary: {size} bytes ({:.1} MiB), release profile (LTO, one codegen unit, stripped).\n\n\
         | invocation | upstream calls | peak RSS | wall time |\n|---|---|---|---|\n",
        size as f64 / 1024.0 / 1024.0
    );
    for row in rows {
        table.push_str(&format!(
            "| {} | {} | {:.1} MiB | {} ms |\n",
            row.scenario,
            row.calls,
            row.rss_kib as f64 / 1024.0,
            row.wall.as_millis()
        ));
    }
    let section = format!(
        "## Footprint\n\n\
         Generated by `make bench` (benches/footprint.rs). For each provider, one\n\
         invocation as the kubelet runs it, against the fakes of the tests on\n\
         127.0.0.1 (Entra ID and ACR, Google STS and IAM Credentials) and moto for\n\
         AWS: peak resident memory (GNU time's maximum RSS), wall time (median of\n\
         {RUNS} after one warm-up, including GNU time's own start) and upstream calls.\n\
         A miss with `--cache-dir` has its entry removed before each run; a hit is\n\
         served from the entry. moto's ECR tokens are already expired, so they are\n\
         handed out uncached and AWS has no hit row.\n\n{table}\n\
         Load average when the run ended: {}.\n",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split(' ')
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("{section}");
    write_section(&section);
}

/// Replaces the Footprint section of BENCHMARKS.md (up to the next `## `
/// heading), or appends it.
fn write_section(section: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("BENCHMARKS.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|_| "# Benchmarks\n".to_string());
    let text = match text.find("\n## Footprint\n") {
        Some(start) => {
            let after = start + 1;
            let end = text[after + 3..]
                .find("\n## ")
                .map_or(text.len(), |i| after + 3 + i + 1);
            format!("{}{}{}", &text[..after], section, &text[end..])
        }
        None => format!(
            "{}\n{section}",
            text.trim_end_matches('\n').to_string() + "\n"
        ),
    };
    std::fs::write(&path, text).expect("write BENCHMARKS.md");
}
