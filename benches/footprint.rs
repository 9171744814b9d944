//! `make bench`, footprint: the release binary's size, and for each
//! provider the peak resident memory (`/usr/bin/time -v`), the wall time
//! and the number of upstream calls of one invocation, measured against the
//! local fakes the tests use (tests/support), as the kubelet runs it.
//!
//! The binary measured is `$WICP_BENCH_BIN` (the Makefile passes the one
//! `make build` produced, the one that ships), else the one cargo built for
//! this bench. Prints a Markdown table for BENCHMARKS.md.
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
    scenario: &'static str,
    calls: usize,
    rss_kib: u64,
    wall: Duration,
}

/// Runs `scenario` RUNS times; `calls` counts the upstream requests so far.
fn bench(
    scenario: &'static str,
    args: &[String],
    env: &[(&str, &str)],
    stdin: &str,
    calls: impl Fn() -> usize,
) -> Row {
    let mut rss = Vec::new();
    let mut wall = Vec::new();
    let mut per_run = None;
    for _ in 0..RUNS {
        let before = calls();
        let (kib, elapsed) = measure(args, env, stdin);
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
    rows.push(bench(
        "aws miss, web identity (STS, ECR)",
        &strings(&["--provider", "aws"]),
        &[("AWS_ENDPOINT_URL", relay.server.url().as_str())],
        &request(
            "123456789012.dkr.ecr.us-west-2.amazonaws.com/team/app",
            Some(&token),
            &[(
                "eks.amazonaws.com/role-arn",
                "arn:aws:iam::123456789012:role/pull",
            )],
        ),
        || relay.server.request_count(),
    ));

    let entra = FakeEntra::start(App::trusting("team", "puller"));
    let acr = FakeAcr::start("contoso.azurecr.io", &entra);
    let token = TokenSpec::new("team", "puller", azure::AUDIENCE).mint();
    rows.push(bench(
        "azure miss (Entra ID, ACR)",
        &strings(&[
            "--provider",
            "azure",
            "--azure-authority-host",
            &entra.url(),
            "--acr-endpoint",
            &acr.url(),
        ]),
        &[],
        &request(
            "contoso.azurecr.io/team/app",
            Some(&token),
            &[
                ("azure.workload.identity/client-id", azure::CLIENT_ID),
                ("azure.workload.identity/tenant-id", azure::TENANT),
            ],
        ),
        || entra.server.request_count() + acr.server.request_count(),
    ));

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
    rows.push(bench(
        "gcp miss (STS)",
        &gcp_args,
        &[],
        &request("us-docker.pkg.dev/my-project/team/app", Some(&token), &[]),
        gcp_calls,
    ));
    rows.push(bench(
        "gcp miss, impersonating (STS, IAM Credentials)",
        &gcp_args,
        &[],
        &request(
            "us-docker.pkg.dev/my-project/team/app",
            Some(&token),
            &[(
                "iam.gke.io/gcp-service-account",
                "puller@my-project.iam.gserviceaccount.com",
            )],
        ),
        gcp_calls,
    ));

    let token = TokenSpec::new("team", "puller", "harbor.example.com").mint();
    rows.push(bench(
        "passthrough (no network)",
        &strings(&[
            "--provider",
            "passthrough",
            "--registry",
            "harbor.example.com",
        ]),
        &[],
        &request("harbor.example.com/team/app", Some(&token), &[]),
        || 0,
    ));

    let size = std::fs::metadata(binary()).expect("the binary").len();
    println!(
        "Binary: {} ({} bytes, {:.1} MiB)",
        binary().display(),
        size,
        size as f64 / 1024.0 / 1024.0
    );
    println!();
    println!("| invocation | upstream calls | peak RSS | wall time (median of {RUNS}) |");
    println!("|---|---|---|---|");
    for row in rows {
        println!(
            "| {} | {} | {:.1} MiB | {} ms |",
            row.scenario,
            row.calls,
            row.rss_kib as f64 / 1024.0,
            row.wall.as_millis()
        );
    }
}
