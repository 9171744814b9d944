//! Fault injection, process level: the binary exec'd as the kubelet runs
//! it, against each exchanger's upstreams on loopback, with the network
//! misbehaving in every way we promise to survive: refused connections,
//! servers that accept and never answer (the run must end at `--timeout`,
//! measured), transient 5xx, 429 with `Retry-After` in both forms or beyond
//! the deadline, refusals that must not be retried, cut and malformed
//! bodies, a TLS server whose CA only `--ca-file` (or `SSL_CERT_FILE`)
//! vouches for, and a proxy (used for `HTTPS_PROXY`/`HTTP_PROXY`, bypassed
//! for `NO_PROXY`).
//!
//! Every run logs at debug level and every run is checked for secrets on
//! stderr: the service account token and every token the fakes issued.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::print_stderr
)]

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::azure::{self, ACR_HOST, App, FakeAcr, FakeEntra};
use support::google::{FakeSts, GCP_CLUSTER, GCP_PROJECT};
use support::http_server::{Response, TestServer};
use support::moto::{Moto, ROLE};
use support::net::{CA_PEM, Proxy, Raw, RawServer, Relay, Target, TlsFront, closed_port};
use support::plugin::{REGISTRY as VAULT_REGISTRY, Run, request, run, words};
use support::token::{self, TokenSpec};
use support::token_service::{FakeService, Trust};
use support::vault::FakeVault;
use support::{cloudsmith, jfrog, quay};

/// One exchanger, its fakes, and the knobs the faults turn: the first
/// upstream call's endpoint flag and its scripted answers.
struct Case {
    name: &'static str,
    image: String,
    token: String,
    annotations: Vec<(&'static str, &'static str)>,
    fakes: Fakes,
}

enum Fakes {
    Azure(FakeEntra, FakeAcr),
    Gcp(FakeSts),
    Vault(FakeVault),
    /// A vendor token service in front of a registry (jfrog, quay,
    /// cloudsmith): one call, to the endpoint its flag names.
    Vendor(FakeService, Vendor),
}

#[derive(Clone, Copy)]
enum Vendor {
    Jfrog,
    Quay,
    Cloudsmith,
}

impl Vendor {
    const AUDIENCE: &'static str = "registry.vendor.test";

    fn flag(self) -> &'static str {
        match self {
            Vendor::Jfrog => "--jfrog-url",
            Vendor::Quay => "--quay-url",
            Vendor::Cloudsmith => "--cloudsmith-url",
        }
    }

    fn vendor(self) -> &'static str {
        match self {
            Vendor::Jfrog => "JFrog",
            Vendor::Quay => "Quay",
            Vendor::Cloudsmith => "Cloudsmith",
        }
    }

    /// The flags besides the endpoint.
    fn args(self) -> Vec<String> {
        let mut args = vec![
            "--registry",
            "registry.vendor.test",
            "--audience",
            Self::AUDIENCE,
        ];
        args.extend(match self {
            Vendor::Jfrog => ["--jfrog-provider-name", "k8s"],
            Vendor::Quay => ["--quay-organization", "acme"],
            Vendor::Cloudsmith => ["--cloudsmith-org", "acme"],
        });
        args.into_iter().map(str::to_string).collect()
    }

    fn refusal(self, status: u16, code: &str, message: &str) -> Response {
        match self {
            Vendor::Jfrog => jfrog::error(status, code, message),
            Vendor::Quay => quay::error(status, message),
            Vendor::Cloudsmith => cloudsmith::error(status, message),
        }
    }
}

impl Case {
    fn azure() -> Case {
        let entra = FakeEntra::start(App::trusting("team", "puller"));
        let acr = FakeAcr::start(ACR_HOST, &entra);
        Case {
            name: "azure",
            image: format!("{ACR_HOST}/team/app"),
            token: TokenSpec::new("team", "puller", azure::AUDIENCE).mint(),
            annotations: vec![
                ("azure.workload.identity/client-id", azure::CLIENT_ID),
                ("azure.workload.identity/tenant-id", azure::TENANT),
            ],
            fakes: Fakes::Azure(entra, acr),
        }
    }

    fn gcp() -> Case {
        Case {
            name: "gcp",
            image: "us-docker.pkg.dev/my-project/team/app".to_string(),
            token: TokenSpec::new("team", "puller", &format!("{GCP_PROJECT}.svc.id.goog")).mint(),
            annotations: vec![],
            fakes: Fakes::Gcp(FakeSts::start()),
        }
    }

    fn vendor(vendor: Vendor) -> Case {
        let trust = Trust::service_account("team", "puller", Vendor::AUDIENCE);
        let (name, fake, annotations) = match vendor {
            Vendor::Jfrog => (
                "jfrog",
                jfrog::start(
                    trust,
                    jfrog::Integration {
                        provider_name: "k8s".into(),
                        project_key: None,
                        mapping: "team".into(),
                        username: "k8s-team".into(),
                    },
                ),
                vec![],
            ),
            Vendor::Quay => (
                "quay",
                quay::start(trust, "acme+puller"),
                vec![("wi-credential-provider.io/quay-robot", "acme+puller")],
            ),
            Vendor::Cloudsmith => (
                "cloudsmith",
                cloudsmith::start(trust, "acme", "puller"),
                vec![("wi-credential-provider.io/cloudsmith-service", "puller")],
            ),
        };
        Case {
            name,
            image: "registry.vendor.test/team/app".to_string(),
            token: TokenSpec::new("team", "puller", Vendor::AUDIENCE).mint(),
            annotations,
            fakes: Fakes::Vendor(fake, vendor),
        }
    }

    fn vault() -> Case {
        let vault = FakeVault::kubernetes_team("vault-stored-registry-password");
        Case {
            name: "vault",
            image: format!("{VAULT_REGISTRY}/team/app"),
            token: TokenSpec::new("team", "puller", "vault.cluster.test").mint(),
            annotations: vec![
                ("wi-credential-provider.io/vault-role", "puller"),
                ("wi-credential-provider.io/vault-secret", "team/app"),
            ],
            fakes: Fakes::Vault(vault),
        }
    }

    fn all() -> [Case; 6] {
        [
            Case::azure(),
            Case::gcp(),
            Case::vault(),
            Case::vendor(Vendor::Jfrog),
            Case::vendor(Vendor::Quay),
            Case::vendor(Vendor::Cloudsmith),
        ]
    }

    fn calls_to_first(&self) -> usize {
        match self.fakes {
            // Login, read, revoke-self.
            Fakes::Vault(_) => 3,
            _ => 1,
        }
    }

    /// The flag that points the first upstream call somewhere.
    fn first_flag(&self) -> &'static str {
        match self.fakes {
            Fakes::Azure(..) => "--azure-authority-host",
            Fakes::Gcp(_) => "--gcp-sts-endpoint",
            Fakes::Vendor(_, vendor) => vendor.flag(),
            Fakes::Vault(_) => "--vault-address",
        }
    }

    /// Where the first call goes normally.
    fn first_url(&self) -> String {
        match &self.fakes {
            Fakes::Azure(entra, _) => entra.url(),
            Fakes::Gcp(sts) => sts.server.url(),
            Fakes::Vendor(fake, _) => fake.url(),
            Fakes::Vault(vault) => vault.url(),
        }
    }

    fn first_addr(&self) -> std::net::SocketAddr {
        match &self.fakes {
            Fakes::Azure(entra, _) => entra.server.addr(),
            Fakes::Gcp(sts) => sts.server.addr(),
            Fakes::Vendor(fake, _) => fake.server.addr(),
            Fakes::Vault(vault) => vault.addr(),
        }
    }

    /// The first call's upstream, by the stable name its errors record as
    /// the `service` fact.
    fn first_service(&self) -> &'static str {
        match self.fakes {
            Fakes::Azure(..) => "Entra ID",
            Fakes::Gcp(_) => "Google STS",
            Fakes::Vendor(_, vendor) => vendor.vendor(),
            Fakes::Vault(_) => "Vault",
        }
    }

    fn first_requests(&self) -> usize {
        match &self.fakes {
            Fakes::Azure(entra, _) => entra.server.request_count(),
            Fakes::Gcp(sts) => sts.server.request_count(),
            Fakes::Vendor(fake, _) => fake.request_count(),
            Fakes::Vault(vault) => vault
                .requests()
                .iter()
                .filter(|r| r.path.ends_with("/login"))
                .count(),
        }
    }

    /// Scripts the first call's next answers.
    fn script(&self, responses: Vec<Response>) {
        match &self.fakes {
            Fakes::Azure(entra, _) => entra.script(responses),
            Fakes::Gcp(sts) => sts.script(responses),
            Fakes::Vendor(fake, _) => fake.script(responses),
            Fakes::Vault(vault) => vault.script(responses),
        }
    }

    /// A refusal in the provider's own error shape.
    fn forbidden(&self) -> Response {
        match self.fakes {
            Fakes::Azure(..) => azure::entra_error(
                403,
                "unauthorized_client",
                53003,
                "Access has been blocked by Conditional Access policies.",
            ),
            Fakes::Gcp(_) => Response::json(
                403,
                json!({"error": {"code": 403, "message": "Request is prohibited by organization's policy.", "status": "PERMISSION_DENIED"}}),
            ),
            Fakes::Vendor(_, vendor) => vendor.refusal(
                403,
                "FORBIDDEN",
                "You do not have permission to perform this action.",
            ),
            Fakes::Vault(_) => Response::json(403, json!({"errors": ["permission denied"]})),
        }
    }

    /// Throttling in the provider's own error shape.
    fn throttled(&self, retry_after: &str) -> Response {
        let response = match self.fakes {
            Fakes::Azure(..) => azure::entra_error(
                429,
                "temporarily_unavailable",
                50196,
                "The server temporarily blocked requests.",
            ),
            Fakes::Gcp(_) => Response::json(
                429,
                json!({"error": {"code": 429, "message": "Quota exceeded.", "status": "RESOURCE_EXHAUSTED"}}),
            ),
            Fakes::Vendor(_, vendor) => {
                vendor.refusal(429, "TOO_MANY_REQUESTS", "Request was throttled.")
            }
            Fakes::Vault(_) => Response::json(
                429,
                json!({"errors": ["request path \"auth/kubernetes/login\": rate limit quota exceeded"]}),
            ),
        };
        response.with_header("Retry-After", retry_after)
    }

    /// A successful answer's body that is not a token response.
    fn malformed(&self) -> Response {
        Response::text(200, "{\"access_token\": ").with_header("Content-Type", "application/json")
    }

    /// The flags for the exchanger, with the first call sent to `first`,
    /// logging JSON at debug level (so that a failure is checked by its
    /// kind and facts).
    fn args(&self, first: &str, extra: &[&str]) -> Vec<String> {
        let mut args = support::plugin::flags(
            &["--provider", self.name, "--log-level", "debug"],
            &["--log-format", "json"],
        );
        match &self.fakes {
            Fakes::Azure(_, acr) => {
                if !extra.contains(&"--acr-endpoint") {
                    args.extend(["--acr-endpoint".to_string(), acr.url()]);
                }
            }
            Fakes::Gcp(_) => args.extend(
                [
                    "--gcp-project-id",
                    GCP_PROJECT,
                    "--gcp-cluster",
                    GCP_CLUSTER,
                ]
                .map(str::to_string),
            ),
            Fakes::Vendor(_, vendor) => args.extend(vendor.args()),
            Fakes::Vault(_) => args.extend(
                [
                    "--registry",
                    VAULT_REGISTRY,
                    "--vault-secret-prefix",
                    "registry",
                ]
                .map(str::to_string),
            ),
        }
        args.extend([self.first_flag().to_string(), first.to_string()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    /// Runs the plugin with the first call sent to `first`.
    fn run(&self, first: &str, extra: &[&str], env: &[(&str, &str)]) -> Run {
        let args = self.args(first, extra);
        let out = run(
            &args,
            env,
            request(&self.image, Some(&self.token), &self.annotations).as_bytes(),
        );
        self.assert_no_secrets(&out);
        out
    }

    /// Runs the plugin against its fakes.
    fn run_normal(&self, extra: &[&str], env: &[(&str, &str)]) -> Run {
        self.run(&self.first_url(), extra, env)
    }

    fn secrets(&self) -> Vec<String> {
        let mut secrets = vec![self.token.clone()];
        match &self.fakes {
            Fakes::Azure(entra, acr) => {
                secrets.extend(entra.issued());
                secrets.extend(acr.minted());
            }
            Fakes::Gcp(sts) => secrets.extend(sts.issued()),
            Fakes::Vendor(fake, _) => secrets.extend(fake.issued()),
            Fakes::Vault(vault) => secrets.extend(vault.issued_tokens()),
        }
        secrets
    }

    fn assert_no_secrets(&self, out: &Run) {
        let mut secrets = self.secrets();
        if out.code == Some(0) {
            let response = out.response();
            let registry = self.image.split('/').next().unwrap();
            secrets.push(
                response["auth"][registry]["password"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
        for secret in secrets {
            assert!(
                !out.stderr.contains(&secret),
                "{}: a secret reached stderr: {}",
                self.name,
                out.stderr
            );
            let signature = secret.rsplit('.').next().unwrap_or_default();
            assert!(
                signature.len() < 16 || !out.stderr.contains(signature),
                "{}: a token signature reached stderr: {}",
                self.name,
                out.stderr
            );
        }
        // Debug logging is on in every run: the secrets were not merely
        // hidden by a quiet level.
        assert!(out.stderr.contains(r#""level":"debug""#), "{}", out.stderr);
    }

    /// The failure line, checked to name the provider, the service account
    /// and the registry.
    fn failure(&self, out: &Run) -> Value {
        let line = out.failure_json();
        // Shown with --nocapture, to read the messages as an admin would.
        eprintln!("{}", words(&line));
        let registry = self.image.split('/').next().unwrap();
        assert_eq!(line["provider"], self.name, "{line}");
        assert_eq!(line["service_account"], "team/puller", "{line}");
        assert_eq!(line["registry"], registry, "{line}");
        line
    }

    /// The failure of a call to the first upstream: of `kind`, recording
    /// that upstream as its `service`; returns the line.
    fn failed_at_first(&self, out: &Run, kind: &str) -> Value {
        let line = self.failure(out);
        assert_eq!(line["kind"], kind, "{line}");
        assert_eq!(line["facts"]["service"], self.first_service(), "{line}");
        line
    }
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) for Unix seconds.
/// The providers that are not in [`Case::all`], and why. A provider the
/// binary carries that is in neither fails
/// `every_provider_meets_the_faults_or_says_why_not`, so a new one is added
/// to the matrix (or here, with its reason) when it is added to the binary.
const NOT_IN_THE_MATRIX: &[(&str, &str)] = &[
    (
        "aws",
        "the SDK's own stack: the aws_* tests at the end of this file, against moto",
    ),
    (
        "passthrough",
        "no upstream: the token itself is the registry password",
    ),
    (
        "token-exchange",
        "not yet: tests/token_exchange.rs covers its refusals, 5xx and 429 only",
    ),
    (
        "chainguard",
        "not yet: tests/chainguard.rs covers its refusals and 5xx only",
    ),
];

#[test]
fn every_provider_meets_the_faults_or_says_why_not() {
    let carried = support::plugin::carried_providers();
    let mut covered: Vec<&str> = Case::all().iter().map(|c| c.name).collect();
    covered.extend(NOT_IN_THE_MATRIX.iter().map(|(name, _)| *name));
    for name in &carried {
        assert!(
            covered.contains(&name.as_str()),
            "{name} is neither in Case::all nor in NOT_IN_THE_MATRIX"
        );
    }
    for name in covered {
        assert!(
            carried.iter().any(|c| c == name),
            "{name} is not a provider"
        );
    }
}

fn http_date(unix: i64) -> String {
    let rfc3339 = wicp_base::duration::format_unix(unix);
    let (date, time) = rfc3339.trim_end_matches('Z').split_once('T').unwrap();
    let mut ymd = date.split('-');
    let (year, month, day) = (
        ymd.next().unwrap(),
        ymd.next().unwrap().parse::<usize>().unwrap(),
        ymd.next().unwrap(),
    );
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]
        [unix.div_euclid(86_400).rem_euclid(7) as usize];
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ][month - 1];
    format!("{weekday}, {day} {month} {year} {time} GMT")
}

#[test]
fn http_dates_are_written_as_senders_must() {
    assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
}

#[test]
fn a_refused_connection_is_retried_then_named() {
    for case in Case::all() {
        let url = format!("http://127.0.0.1:{}", closed_port());
        let started = Instant::now();
        let out = case.run(&url, &[], &[]);
        let line = case.failed_at_first(&out, "network");
        support::assert_says(
            &words(&line),
            &[
                "after 4 attempt(s)",
                "Connection refused",
                "check that the node can reach the endpoint (DNS, firewall; set HTTPS_PROXY",
            ],
        );
        // Four attempts with full-jitter backoff (at most 0.5 + 1 + 2 s).
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(out.stderr.matches("retrying").count(), 3, "{}", out.stderr);
    }
}

/// Runs `case` against a server that accepts and never answers, with
/// `--timeout 3s`, and checks the run ends at the deadline waiting for
/// `service` (the `service` fact), and says so. Returns the run, so
/// callers can check what else it printed.
fn assert_ends_at_the_deadline(case: &Case, first: &str, service: &str) -> Run {
    let started = Instant::now();
    let out = case.run(first, &["--timeout", "3s"], &[]);
    let elapsed = started.elapsed();
    let line = case.failure(&out);
    assert_eq!(line["kind"], "network", "{line}");
    assert_eq!(line["facts"]["service"], service, "{line}");
    support::assert_says(
        &words(&line),
        &["the deadline of 3s ran out", "raise --timeout"],
    );
    assert!(
        elapsed >= Duration::from_secs(3) && elapsed < Duration::from_secs(6),
        "{}: ended after {elapsed:?}",
        case.name
    );
    out
}

#[test]
fn a_server_that_never_answers_ends_at_the_deadline() {
    for case in Case::all() {
        let silent = TestServer::start(|_| Response::hang());
        assert_ends_at_the_deadline(&case, &silent.url(), case.first_service());
        assert_eq!(silent.request_count(), 1, "one attempt fills the deadline");
    }
    // The second call of an exchange stalls: the message names that one.
    let case = Case::azure();
    let Fakes::Azure(entra, acr) = &case.fakes else {
        unreachable!()
    };
    acr.script([Response::hang()]);
    assert_ends_at_the_deadline(&case, &entra.url(), "ACR");
}

#[test]
fn a_reply_that_stalls_mid_body_ends_at_the_deadline() {
    for case in Case::all() {
        let stall = RawServer::start(vec![Raw::SendThenStall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{\"access_token\":\"ya29.partial"
                .to_vec(),
        )]);
        let stalled = assert_ends_at_the_deadline(&case, &stall.url(), case.first_service());
        // The stalled run itself (at debug level) must not print the bytes it did receive:
        // a cut body can hold the start of a token.
        assert!(
            !stalled.stderr.contains("ya29.partial") && !stalled.stderr.contains("access_token"),
            "{}: the partial body reached stderr:\n{}",
            case.name,
            stalled.stderr
        );
    }
}

#[test]
fn a_server_error_is_retried_and_the_exchange_succeeds() {
    for case in Case::all() {
        case.script(vec![Response::text(500, "<html>internal error</html>")]);
        let out = case.run_normal(&[], &[]);
        out.response();
        assert_eq!(case.first_requests(), 2, "{}", case.name);
        assert!(
            out.stderr.contains("HTTP 500 on attempt 1, retrying"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn retry_after_in_seconds_is_honoured() {
    for case in Case::all() {
        case.script(vec![case.throttled("2")]);
        let started = Instant::now();
        case.run_normal(&[], &[]).response();
        assert!(
            started.elapsed() >= Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(case.first_requests(), 2);
    }
}

#[test]
fn retry_after_as_an_http_date_is_honoured() {
    for case in Case::all() {
        // Three seconds ahead, to the second: a wait of two to three seconds.
        case.script(vec![case.throttled(&http_date(token::now() + 3))]);
        let started = Instant::now();
        case.run_normal(&[], &[]).response();
        assert!(
            started.elapsed() >= Duration::from_millis(1500),
            "{}: {:?}",
            case.name,
            started.elapsed()
        );
        assert_eq!(case.first_requests(), 2);
        // A date in the past, or one in an obsolete format: retried at once
        // or after the usual backoff, never an error.
        case.script(vec![
            case.throttled(&http_date(token::now() - 3600)),
            case.throttled("Sunday, 06-Nov-94 08:49:37 GMT"),
        ]);
        case.run_normal(&[], &[]).response();
        assert_eq!(case.first_requests(), 5);
    }
}

#[test]
fn retry_after_beyond_the_deadline_fails_at_once() {
    for case in Case::all() {
        case.script(vec![case.throttled("120")]);
        let started = Instant::now();
        let out = case.run_normal(&["--timeout", "10s"], &[]);
        let line = case.failed_at_first(&out, "upstream");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "slept toward the deadline: {:?}",
            started.elapsed()
        );
        assert_eq!(line["facts"]["status"], "429", "{line}");
        support::assert_says(
            &words(&line),
            &["asking to retry after 2m0s", "left of the 10s deadline"],
        );
        assert_eq!(case.first_requests(), 1);
    }
}

#[test]
fn an_absurd_retry_after_is_shown_clamped() {
    for case in Case::all() {
        case.script(vec![case.throttled("99999999999999999999")]);
        let out = case.run_normal(&["--timeout", "10s"], &[]);
        let line = case.failed_at_first(&out, "upstream");
        assert_eq!(line["facts"]["status"], "429", "{line}");
        assert!(
            words(&line).contains("asking to retry after more than 24h0m0s, beyond the "),
            "{line}"
        );
        assert_eq!(case.first_requests(), 1);
    }
}

#[test]
fn a_refusal_is_not_retried() {
    for case in Case::all() {
        case.script(vec![case.forbidden()]);
        let out = case.run_normal(&[], &[]);
        let line = case.failed_at_first(&out, "upstream");
        assert_eq!(line["facts"]["status"], "403", "{line}");
        assert_eq!(case.first_requests(), 1, "{line}");
        assert!(!out.stderr.contains("retrying"), "{}", out.stderr);
    }
}

#[test]
fn a_cut_body_is_retried_then_reported() {
    let cut = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n{\"access_token\":\"ya29.cut-secret".to_vec();
    for case in Case::all() {
        // Cut once, then the real answer through a relay to the fake.
        let server = RawServer::start(vec![Raw::Send(cut.clone())]);
        let out = case.run(&server.url(), &[], &[]);
        let line = case.failed_at_first(&out, "network");
        support::assert_says(&words(&line), &["failed after 4 attempt(s)", "body"]);
        assert_eq!(server.request_count(), 4);
        assert!(!out.stderr.contains("ya29.cut-secret"), "{}", out.stderr);
        // Every attempt carried the same, complete request.
        let forms = server.forms();
        assert!(forms.windows(2).all(|w| w[0] == w[1]));
    }
}

#[test]
fn malformed_and_non_http_answers_are_refused_without_echoing_them() {
    for case in Case::all() {
        case.script(vec![case.malformed()]);
        let line = case.failed_at_first(&case.run_normal(&[], &[]), "upstream");
        assert_eq!(line["facts"]["status"], "200", "{line}");
        assert!(line["facts"]["body_shape"].is_string(), "{line}");
        assert_eq!(case.first_requests(), 1);

        let garbage = RawServer::start(vec![Raw::Send(
            b"SSH-2.0-OpenSSH_9.2 ya29.not-http-secret\r\n".to_vec(),
        )]);
        let out = case.run(&garbage.url(), &[], &[]);
        case.failed_at_first(&out, "network");
        assert!(
            !out.stderr.contains("ya29.not-http-secret"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn tls_with_an_unknown_ca_fails_unless_the_ca_is_trusted() {
    for case in Case::all() {
        let front = TlsFront::start(case.first_addr());
        let out = case.run(&front.url(), &[], &[]);
        let line = case.failed_at_first(&out, "network");
        support::assert_says(
            &words(&line),
            &["certificate is not trusted", "UnknownIssuer", "--ca-file"],
        );
        // Not retried, and nothing (the token least of all) was sent.
        assert_eq!(front.connections(), 1, "{line}");
        assert_eq!(front.requests(), 0);
        assert_eq!(case.first_requests(), 0);

        // --ca-file, or its variable, adds the CA.
        case.run(&front.url(), &["--ca-file", CA_PEM], &[])
            .response();
        case.run(&front.url(), &[], &[("WICP_CA_FILE", CA_PEM)])
            .response();
        // SSL_CERT_FILE replaces the node's trust store.
        case.run(&front.url(), &[], &[("SSL_CERT_FILE", CA_PEM)])
            .response();
        assert_eq!(front.requests(), 3 * case.calls_to_first());
        assert_eq!(case.first_requests(), 3);
    }
}

#[test]
fn a_bad_ca_file_or_ssl_cert_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let missing = dir.path().join("missing.pem");
    for case in Case::all() {
        let front = TlsFront::start(case.first_addr());
        let refused = |extra: &[&str], env: &[(&str, &str)], flag: &str| {
            let line = case.failure(&case.run(&front.url(), extra, env));
            assert_eq!(line["kind"], "config", "{line}");
            assert_eq!(line["facts"]["flag"], flag, "{line}");
            words(&line)
        };
        let missing = missing.to_str().unwrap();
        refused(&["--ca-file", missing], &[], "--ca-file");
        let said = refused(&["--ca-file", empty.to_str().unwrap()], &[], "--ca-file");
        assert!(said.contains("holds no PEM certificate"), "{said}");
        let said = refused(&[], &[("SSL_CERT_FILE", missing)], "SSL_CERT_FILE");
        assert!(
            said.contains("to add a CA to the system's, use --ca-file"),
            "{said}"
        );
        assert_eq!(front.connections(), 0, "checked before connecting");
    }
}

/// Round-5 item 9: a CA file another user could change (owned by another
/// uid, or writable by its group or others) is refused before any
/// connection, as `--ca-file` and as `SSL_CERT_FILE`: whoever can write it
/// chooses whom the tokens go to. Readable by others is fine.
#[test]
fn a_ca_file_another_user_could_change_is_refused() {
    use std::os::unix::fs::{PermissionsExt, chown};
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::copy(CA_PEM, &ca).unwrap();
    let ca_arg = ca.to_str().unwrap();
    let case = &Case::all()[0];
    let front = TlsFront::start(case.first_addr());
    let refused = |extra: &[&str], env: &[(&str, &str)], flag: &str, problem: &str| {
        let line = case.failure(&case.run(&front.url(), extra, env));
        assert_eq!(line["kind"], "config", "{line}");
        assert_eq!(line["facts"]["flag"], flag, "{line}");
        assert!(words(&line).contains(problem), "{problem}: {line}");
    };
    for mode in [0o666, 0o664, 0o646] {
        std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(mode)).unwrap();
        refused(
            &["--ca-file", ca_arg],
            &[],
            "--ca-file",
            "other users may write it",
        );
        refused(
            &[],
            &[("SSL_CERT_FILE", ca_arg)],
            "SSL_CERT_FILE",
            "other users may write it",
        );
    }
    std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o644)).unwrap();
    chown(&ca, Some(4242), None).unwrap();
    refused(
        &["--ca-file", ca_arg],
        &[],
        "--ca-file",
        "owned by uid 4242",
    );
    assert_eq!(front.connections(), 0, "checked before connecting");
    chown(&ca, Some(0), None).unwrap();
    let ok = case.run(&front.url(), &["--ca-file", ca_arg], &[]);
    assert_eq!(ok.code, Some(0), "{}", ok.stderr);
}

/// Runs the plugin under strace, recording the file system calls that
/// loading a trust store makes; returns the run and the trace.
fn traced(args: &[String], stdin: &[u8]) -> (Run, String) {
    let mut full = vec![support::plugin::bin().display().to_string()];
    full.extend(args.iter().cloned());
    traced_program(&full, stdin)
}

/// [`traced`] for a whole command line (`env X=Y plugin ...`).
fn traced_program(command: &[String], stdin: &[u8]) -> (Run, String) {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace");
    let mut child = support::plugin::piped("strace")
        .args([
            "-f",
            "-qq",
            "-e",
            "trace=openat,open,statx,newfstatat,stat,lstat,getdents64",
            "-o",
        ])
        .arg(&trace)
        .args(command)
        .spawn()
        .expect("strace is needed for this test (apt-get install strace)");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    let run = Run {
        code: out.status.code(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    (run, std::fs::read_to_string(&trace).unwrap())
}

/// Issues 13 and 47: what a miss reads of the trust store, by strace.
///
/// - `--ca-file` that vouches for the server is read once and tried alone:
///   the system's bundle is never opened;
/// - trusting the base store (`SSL_CERT_FILE` here, which takes the same
///   path as the system's bundle): the first miss reads the bundle once
///   and prepares its anchors in `--cache-dir`; the next miss reads the
///   prepared store and never opens the bundle;
/// - the system's bundle is read once and the directory that holds the
///   same certificates is never walked;
/// - a plain-HTTP miss opens no CA file at all, and a hit none either.
#[test]
fn what_a_miss_reads_of_the_trust_store() {
    let bundle = "/etc/ssl/certs/ca-certificates.crt";
    if !std::path::Path::new(bundle).is_file() {
        eprintln!("skipped: no system bundle at {bundle}");
        return;
    }
    let case = Case::gcp();
    let front = TlsFront::start(case.first_addr());
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().to_str().unwrap().to_string();
    let opened = |trace: &str, path: &str| {
        trace
            .lines()
            .filter(|l| l.contains("open") && l.contains(&format!("\"{path}\"")))
            .count()
    };
    let stdin_for = |name: &str| {
        let audience = format!("{GCP_PROJECT}.svc.id.goog");
        let token = TokenSpec::new("team", name, &audience).mint();
        request(&case.image, Some(&token), &case.annotations)
    };

    // --ca-file alone.
    let args = case.args(
        &front.url(),
        &["--ca-file", CA_PEM, "--cache-dir", &cache_dir],
    );
    let (miss, trace) = traced(&args, stdin_for("one").as_bytes());
    miss.response();
    assert_eq!(opened(&trace, CA_PEM), 1, "{trace}");
    assert_eq!(opened(&trace, bundle), 0, "{trace}");
    let (hit, trace) = traced(&args, stdin_for("one").as_bytes());
    hit.response();
    assert!(
        !trace.contains("/etc/ssl") && !trace.contains(CA_PEM),
        "{trace}"
    );

    // The base store, prepared.
    let files = tempfile::tempdir().unwrap();
    let base = files.path().join("base.pem");
    let mut pem = std::fs::read(bundle).unwrap();
    pem.extend(std::fs::read(CA_PEM).unwrap());
    std::fs::write(&base, pem).unwrap();
    let base = base.to_str().unwrap().to_string();
    let args = case.args(&front.url(), &["--cache-dir", &cache_dir]);
    let env = format!("SSL_CERT_FILE={base}");
    let with_env = |name: &str| {
        let mut full = vec![
            "env".to_string(),
            env.clone(),
            support::plugin::bin().display().to_string(),
        ];
        full.extend(args.iter().cloned());
        traced_program(&full, stdin_for(name).as_bytes())
    };
    let (first, trace) = with_env("two");
    first.response();
    assert_eq!(opened(&trace, &base), 1, "{trace}");
    assert!(trace.contains("trust-anchors"), "{trace}");
    let (next, trace) = with_env("three");
    next.response();
    assert_eq!(opened(&trace, &base), 0, "read the bundle again:\n{trace}");
    assert!(
        opened(&trace, &format!("{cache_dir}/trust-anchors")) == 1,
        "{trace}"
    );

    // The system's bundle: read once, its directory never walked (the
    // server is not one of its CAs', so the pull is refused).
    let args = case.args(&front.url(), &[]);
    let (refused, trace) = traced(&args, stdin_for("four").as_bytes());
    let line = refused.failure_json();
    assert!(words(&line).contains("not trusted"), "{line}");
    assert_eq!(opened(&trace, bundle), 1, "{trace}");
    for dir in ["/etc/ssl/certs", "/usr/lib/ssl/certs", "/etc/pki/tls/certs"] {
        assert!(
            !trace.contains(&format!("\"{dir}\"")),
            "{dir} was opened:\n{trace}"
        );
    }
    let in_certs_dir = trace
        .lines()
        .filter(|l| l.contains("\"/etc/ssl/certs/") && !l.contains(bundle))
        .count();
    assert_eq!(in_certs_dir, 0, "{trace}");

    // Plain HTTP: no trust store at all.
    let args = case.args(&case.first_url(), &[]);
    let (plain, trace) = traced(&args, stdin_for("five").as_bytes());
    plain.response();
    for what in ["/etc/ssl", "/etc/pki", ".pem\"", ".crt\"", "trust-anchors"] {
        assert!(
            !trace.contains(what),
            "a plain-HTTP miss opened {what}:\n{trace}"
        );
    }
}

/// The exchange with every upstream call behind a TLS front with the test
/// CA; returns the fronts' addresses in call order.
fn tls_fronts(case: &Case) -> (Vec<TlsFront>, Vec<String>) {
    match &case.fakes {
        Fakes::Azure(entra, acr) => {
            let fronts = vec![
                TlsFront::start(entra.server.addr()),
                TlsFront::start(acr.server.addr()),
            ];
            let args = vec![
                "--ca-file".to_string(),
                CA_PEM.to_string(),
                "--acr-endpoint".to_string(),
                fronts[1].url(),
            ];
            (fronts, args)
        }
        Fakes::Gcp(sts) => (
            vec![TlsFront::start(sts.server.addr())],
            vec!["--ca-file".to_string(), CA_PEM.to_string()],
        ),
        Fakes::Vendor(fake, _) => (
            vec![TlsFront::start(fake.server.addr())],
            vec!["--ca-file".to_string(), CA_PEM.to_string()],
        ),
        Fakes::Vault(vault) => (
            vec![TlsFront::start(vault.addr())],
            vec!["--ca-file".to_string(), CA_PEM.to_string()],
        ),
    }
}

#[test]
fn https_proxy_carries_every_call_and_no_proxy_bypasses_it() {
    for case in Case::all() {
        let (fronts, extra) = tls_fronts(&case);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        // One tunnel per call: the fakes close each connection after answering.
        let tunnels: Vec<Target> = fronts
            .iter()
            .flat_map(|f| {
                std::iter::repeat_n(Target::Tunnel(f.addr().to_string()), case.calls_to_first())
            })
            .collect();

        let proxy = Proxy::start();
        let out = case.run(&fronts[0].url(), &extra, &[("HTTPS_PROXY", &proxy.url())]);
        out.response();
        assert_eq!(proxy.targets(), tunnels, "{}", case.name);
        assert!(
            out.stderr.contains(&format!("HTTPS_PROXY={}", proxy.url())),
            "{}",
            out.stderr
        );

        // Lowercase, as many distributions write it.
        let proxy = Proxy::start();
        case.run(&fronts[0].url(), &extra, &[("https_proxy", &proxy.url())])
            .response();
        assert_eq!(proxy.targets(), tunnels);

        // NO_PROXY names the endpoints' host: straight there.
        let proxy = Proxy::start();
        case.run(
            &fronts[0].url(),
            &extra,
            &[
                ("HTTPS_PROXY", &proxy.url()),
                ("NO_PROXY", "localhost,127.0.0.1"),
            ],
        )
        .response();
        assert_eq!(proxy.targets(), vec![], "{}", case.name);

        // HTTP_PROXY does not apply to https:// calls.
        let proxy = Proxy::start();
        case.run(&fronts[0].url(), &extra, &[("HTTP_PROXY", &proxy.url())])
            .response();
        assert_eq!(proxy.targets(), vec![]);
    }
}

#[test]
fn http_proxy_carries_plain_http_calls() {
    for case in Case::all() {
        let proxy = Proxy::start();
        case.run_normal(&[], &[("HTTP_PROXY", &proxy.url())])
            .response();
        let targets = proxy.targets();
        assert!(!targets.is_empty());
        match &targets[0] {
            Target::Forward(url) => assert!(url.starts_with(&case.first_url()), "{url}"),
            other => panic!("{other:?}"),
        }
        // HTTPS_PROXY does not apply to http:// calls.
        let proxy = Proxy::start();
        case.run_normal(&[], &[("HTTPS_PROXY", &proxy.url())])
            .response();
        assert_eq!(proxy.targets(), vec![]);
    }
}

/// `NO_PROXY` as the kubelet (Go's httpproxy) reads it: `*` and a CIDR
/// cover IP literals, so the token never reaches the proxy.
#[test]
fn no_proxy_star_and_cidrs_cover_ip_literals() {
    for case in Case::all() {
        for no_proxy in ["*", "10.0.0.0/8, 127.0.0.0/8", "127.0.0.1"] {
            let proxy = Proxy::start();
            let url = proxy.url();
            case.run_normal(
                &[],
                &[
                    ("HTTP_PROXY", &url),
                    ("HTTPS_PROXY", &url),
                    ("NO_PROXY", no_proxy),
                ],
            )
            .response();
            assert_eq!(proxy.targets(), vec![], "{} NO_PROXY={no_proxy}", case.name);
        }
        // A CIDR that does not hold the address leaves the call on the proxy.
        let proxy = Proxy::start();
        let url = proxy.url();
        case.run_normal(&[], &[("HTTP_PROXY", &url), ("NO_PROXY", "10.0.0.0/8")])
            .response();
        assert!(!proxy.targets().is_empty(), "{}", case.name);
    }
}

#[test]
fn proxy_credentials_are_used_and_never_logged() {
    const PASSWORD: &str = "pr0xy-Pa55word-never-logged";
    for case in Case::all() {
        let (fronts, extra) = tls_fronts(&case);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let proxy = Proxy::start_with_credentials("node", PASSWORD);
        let url = format!("http://node:{PASSWORD}@127.0.0.1:{}", proxy.port());
        let out = case.run(&fronts[0].url(), &extra, &[("HTTPS_PROXY", &url)]);
        out.response();
        assert!(proxy.authorizations().iter().all(Option::is_some));
        assert!(!out.stderr.contains(PASSWORD), "{}", out.stderr);
        assert!(
            out.stderr.contains(&format!(
                "HTTPS_PROXY=http://<credentials>@127.0.0.1:{}",
                proxy.port()
            )),
            "{}",
            out.stderr
        );

        // Wrong credentials: the proxy's 407 is reported, the password is not.
        let wrong = format!("http://node:wrong-{PASSWORD}@127.0.0.1:{}", proxy.port());
        let out = case.run(&fronts[0].url(), &extra, &[("HTTPS_PROXY", &wrong)]);
        let line = case.failed_at_first(&out, "network");
        support::assert_says(
            &words(&line),
            &[
                "proxy authorization required",
                "credentials go in the proxy URL",
            ],
        );
        assert!(!out.stderr.contains(PASSWORD), "{}", out.stderr);
    }
}

#[test]
fn an_unreachable_proxy_is_reported() {
    for case in Case::all() {
        let (fronts, extra) = tls_fronts(&case);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        let proxy = format!("http://127.0.0.1:{}", closed_port());
        let out = case.run(&fronts[0].url(), &extra, &[("HTTPS_PROXY", &proxy)]);
        let line = case.failed_at_first(&out, "network");
        support::assert_says(
            &words(&line),
            &[
                &format!("(proxy settings: HTTPS_PROXY={proxy})"),
                "check that the proxy is reachable",
            ],
        );
        assert_eq!(fronts[0].connections(), 0);
    }
}

/// Proxy values reqwest would skip silently (connecting directly while the
/// error messages claim the proxy settings), each with what the refusal
/// says about it.
const UNUSABLE_PROXIES: [(&str, &str, &str); 4] = [
    ("HTTPS_PROXY", "http://u:pa ss@127.0.0.1:3128", "a space"),
    ("https_proxy", "ftp://127.0.0.1:21", "scheme ftp://"),
    ("HTTP_PROXY", "http://127.0.0.1:3128/a path", "a space"),
    ("ALL_PROXY", "http://u:pa/ss@127.0.0.1:3128", "invalid port"),
];

/// Issue 15 item 5: an unusable proxy setting is an error naming the
/// variable (never its password), before any connection.
#[test]
fn an_unusable_proxy_setting_is_refused_not_bypassed() {
    for case in Case::all() {
        for (var, value, why) in UNUSABLE_PROXIES {
            let out = case.run_normal(&[], &[(var, value)]);
            let line = case.failure(&out);
            assert_eq!(line["kind"], "config", "{line}");
            assert_eq!(line["facts"]["flag"], var, "{line}");
            let problem = line["facts"]["problem"].as_str().unwrap();
            assert!(problem.contains(why), "{line}");
            assert!(
                !out.stderr.contains("pa ss") && !out.stderr.contains("pa/ss"),
                "{}",
                out.stderr
            );
            assert_eq!(
                case.first_requests(),
                0,
                "{var}={value}: connected directly"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// aws: the same faults through the AWS SDK's client (built by us with the
// proxy variables and --ca-file), against moto, the AWS emulator, with a
// relay in front of its STS to script faults and keep what STS answered.

const ECR_HOST: &str = "123456789012.dkr.ecr.us-west-2.amazonaws.com";

struct Aws {
    moto: Moto,
    sts: Relay,
    token: String,
}

/// The text between `open` and `close`, if any.
fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let (_, rest) = text.split_once(open)?;
    Some(rest.split_once(close)?.0)
}

impl Aws {
    fn start() -> Aws {
        let moto = Moto::start();
        let backend = moto.url().trim_start_matches("http://").parse().unwrap();
        Aws {
            sts: Relay::start(backend),
            moto,
            token: TokenSpec::new("team", "puller", "sts.amazonaws.com").mint(),
        }
    }

    fn moto_addr(&self) -> std::net::SocketAddr {
        self.moto
            .url()
            .trim_start_matches("http://")
            .parse()
            .unwrap()
    }

    /// Runs the plugin with STS at `sts` and ECR at `ecr`, logging JSON.
    fn run(&self, sts: &str, ecr: &str, extra: &[&str], env: &[(&str, &str)]) -> Run {
        let mut args = vec![
            "--provider",
            "aws",
            "--log-level",
            "debug",
            "--log-format",
            "json",
        ];
        args.extend_from_slice(extra);
        let mut vars = vec![("AWS_ENDPOINT_URL_STS", sts), ("AWS_ENDPOINT_URL_ECR", ecr)];
        vars.extend_from_slice(env);
        let out = run(
            &args,
            &vars,
            request(
                &format!("{ECR_HOST}/team/app"),
                Some(&self.token),
                &[("eks.amazonaws.com/role-arn", ROLE)],
            )
            .as_bytes(),
        );
        let mut secrets = vec![self.token.clone()];
        for answer in self.sts.answers() {
            for tag in ["SecretAccessKey", "SessionToken"] {
                if let Some(secret) = between(&answer, &format!("<{tag}>"), &format!("</{tag}>")) {
                    secrets.push(secret.to_string());
                }
            }
        }
        if out.code == Some(0) {
            let response = out.response();
            secrets.push(
                response["auth"][ECR_HOST]["password"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
        for secret in secrets {
            assert!(
                !out.stderr.contains(&secret),
                "a secret reached stderr: {}",
                out.stderr
            );
        }
        assert!(out.stderr.contains(r#""level":"debug""#), "{}", out.stderr);
        out
    }

    fn run_normal(&self, extra: &[&str], env: &[(&str, &str)]) -> Run {
        self.run(&self.sts.server.url(), &self.moto.url(), extra, env)
    }

    /// The failure line, checked to name the provider, the service account
    /// and the registry, and to be of `kind`.
    fn failure(&self, out: &Run, kind: &str) -> Value {
        let line = out.failure_json();
        eprintln!("{}", words(&line));
        assert_eq!(line["provider"], "aws", "{line}");
        assert_eq!(line["service_account"], "team/puller", "{line}");
        assert_eq!(line["registry"], ECR_HOST, "{line}");
        assert_eq!(line["kind"], kind, "{line}");
        line
    }
}

/// moto's answer for the role's account.
fn assert_ecr_login(out: &Run) {
    let response = out.response();
    assert_eq!(response["auth"][ECR_HOST]["username"], "AWS");
    assert_eq!(
        response["auth"][ECR_HOST]["password"],
        "123456789012-auth-token"
    );
}

fn sts_error(status: u16, code: &str, message: &str) -> Response {
    Response::text(
        status,
        format!(
            r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error><RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId></ErrorResponse>"#
        ),
    )
    .with_header("Content-Type", "text/xml")
}

#[test]
fn aws_tls_with_an_unknown_ca_fails_unless_the_ca_is_trusted() {
    let aws = Aws::start();
    let sts = TlsFront::start(aws.sts.server.addr());
    let ecr = TlsFront::start(aws.moto_addr());
    let out = aws.run(&sts.url(), &ecr.url(), &[], &[]);
    let line = aws.failure(&out, "network");
    assert_eq!(line["facts"]["service"], "AWS STS", "{line}");
    support::assert_says(
        &words(&line),
        &[
            "the server's TLS certificate is not trusted (invalid peer certificate: UnknownIssuer)",
            "--ca-file",
        ],
    );
    assert_eq!(sts.requests(), 0, "nothing was sent");
    assert_eq!(aws.sts.server.request_count(), 0);

    for (extra, env) in [
        (&["--ca-file", CA_PEM][..], &[][..]),
        (&[][..], &[("WICP_CA_FILE", CA_PEM)][..]),
        (&[][..], &[("SSL_CERT_FILE", CA_PEM)][..]),
    ] {
        assert_ecr_login(&aws.run(&sts.url(), &ecr.url(), extra, env));
    }
    assert_eq!(sts.requests(), 3);
    assert_eq!(ecr.requests(), 3);

    // A CERTIFICATE block that is no certificate: the SDK loads extra roots
    // with `expect`, so this must be refused before it gets there.
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(
        &junk,
        "-----BEGIN CERTIFICATE-----\nAAAAAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let out = aws.run(
        &sts.url(),
        &ecr.url(),
        &["--ca-file", junk.to_str().unwrap()],
        &[],
    );
    let line = aws.failure(&out, "config");
    assert_eq!(line["facts"]["flag"], "--ca-file", "{line}");
    assert!(
        words(&line).contains("holds a certificate (number 1) that cannot be parsed"),
        "{line}"
    );
    assert_eq!(out.code, Some(1), "an error, not an abort");
}

#[test]
fn aws_https_proxy_carries_sts_and_ecr_and_no_proxy_bypasses_it() {
    const PASSWORD: &str = "aws-pr0xy-Pa55word-never-logged";
    let aws = Aws::start();
    let sts = TlsFront::start(aws.sts.server.addr());
    let ecr = TlsFront::start(aws.moto_addr());
    let ca = ["--ca-file", CA_PEM];
    let tunnels = vec![
        Target::Tunnel(sts.addr().to_string()),
        Target::Tunnel(ecr.addr().to_string()),
    ];

    let proxy = Proxy::start();
    assert_ecr_login(&aws.run(
        &sts.url(),
        &ecr.url(),
        &ca,
        &[("HTTPS_PROXY", &proxy.url())],
    ));
    assert_eq!(proxy.targets(), tunnels);

    let proxy = Proxy::start();
    assert_ecr_login(&aws.run(
        &sts.url(),
        &ecr.url(),
        &ca,
        &[("HTTPS_PROXY", &proxy.url()), ("NO_PROXY", "127.0.0.1")],
    ));
    assert_eq!(proxy.targets(), vec![]);

    let proxy = Proxy::start_with_credentials("node", PASSWORD);
    let url = format!("http://node:{PASSWORD}@127.0.0.1:{}", proxy.port());
    let out = aws.run(&sts.url(), &ecr.url(), &ca, &[("https_proxy", &url)]);
    assert_ecr_login(&out);
    assert_eq!(proxy.targets(), tunnels);
    assert!(proxy.authorizations().iter().all(Option::is_some));
    assert!(!out.stderr.contains(PASSWORD), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("https_proxy=http://<credentials>@127.0.0.1:"),
        "{}",
        out.stderr
    );
}

#[test]
fn aws_refused_failing_refusing_and_cut_answers() {
    let aws = Aws::start();
    // Refused.
    let refused = format!("http://127.0.0.1:{}", closed_port());
    let line = aws.failure(&aws.run(&refused, &aws.moto.url(), &[], &[]), "network");
    assert_eq!(line["facts"]["service"], "AWS STS", "{line}");
    assert!(words(&line).contains("Connection refused"), "{line}");

    // 500, then moto's answer.
    aws.sts
        .script([Response::text(500, "<html>internal error</html>")]);
    assert_ecr_login(&aws.run_normal(&[], &[]));
    assert_eq!(aws.sts.server.request_count(), 2);

    // AccessDenied: final.
    aws.sts.script([sts_error(
        403,
        "AccessDenied",
        "Not authorized to perform sts:AssumeRoleWithWebIdentity",
    )]);
    let line = aws.failure(&aws.run_normal(&[], &[]), "upstream");
    assert_eq!(line["facts"]["service"], "AWS STS", "{line}");
    assert_eq!(line["facts"]["status"], "403", "{line}");
    assert!(words(&line).contains("AccessDenied"), "{line}");
    assert_eq!(aws.sts.server.request_count(), 3, "not retried");

    // A cut answer.
    let cut = RawServer::start(vec![Raw::Send(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: 900\r\n\r\n<AssumeRoleWithWebIdentityResponse><SecretAccessKey>cut-secret-key-value"
            .to_vec(),
    )]);
    let out = aws.run(&cut.url(), &aws.moto.url(), &[], &[]);
    let line = aws.failure(&out, "network");
    assert_eq!(line["facts"]["service"], "AWS STS", "{line}");
    assert!(
        !out.stderr.contains("cut-secret-key-value"),
        "{}",
        out.stderr
    );
}

/// Issue 15 item 5, through the AWS SDK: the same refusal as for the
/// hand-written calls, before STS sees anything.
#[test]
fn aws_an_unusable_proxy_setting_is_refused_not_bypassed() {
    let aws = Aws::start();
    for (var, value, why) in UNUSABLE_PROXIES {
        let out = aws.run_normal(&[], &[(var, value)]);
        let line = aws.failure(&out, "config");
        assert_eq!(line["facts"]["flag"], var, "{line}");
        assert!(
            line["facts"]["problem"].as_str().unwrap().contains(why),
            "{line}"
        );
        assert!(
            !out.stderr.contains("pa ss") && !out.stderr.contains("pa/ss"),
            "{}",
            out.stderr
        );
    }
    assert_eq!(aws.sts.server.request_count(), 0, "connected directly");
}
