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

mod retries;
mod trust;
mod proxies;

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

/// Proxy values reqwest would skip silently (connecting directly while the
/// error messages claim the proxy settings), each with what the refusal
/// says about it.
const UNUSABLE_PROXIES: [(&str, &str, &str); 4] = [
    ("HTTPS_PROXY", "http://u:pa ss@127.0.0.1:3128", "a space"),
    ("https_proxy", "ftp://127.0.0.1:21", "scheme ftp://"),
    ("HTTP_PROXY", "http://127.0.0.1:3128/a path", "a space"),
    ("ALL_PROXY", "http://u:pa/ss@127.0.0.1:3128", "invalid port"),
];

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
