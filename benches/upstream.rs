//! The fakes of the tests (tests/support) as a process of their own, for
//! `make bench` (benches/latency.sh): the same wire formats the integration
//! tests check, listening on 127.0.0.1, each reachable twice: over plain
//! HTTP, and over HTTPS through a TLS front with the certificate of the test
//! CA (tests/fixtures/tls), which the plugin is told to trust with
//! `--ca-file`, as a node with a private CA would. The TLS case is the one
//! production runs.
//!
//! `bench-upstream DIR` writes, for each provider P (aws, azure, gcp):
//!
//! * `DIR/P.json`: a CredentialProviderRequest with a service account token
//!   signed by the test cluster key;
//! * `DIR/P.http` and `DIR/P.https`: the command line for that transport,
//!   one word a line: `NAME=VALUE` environment assignments first (AWS's
//!   endpoint), then the plugin flags pointing at the fakes;
//! * `DIR/P.system`: HTTPS trusting the node's store alone (no
//!   `--ca-file`), as most nodes run: `SSL_CERT_FILE` names
//!   `DIR/system.pem`, the system's bundle with the test CA appended, which
//!   the plugin loads, prepares and checks exactly as it does the system's
//!   own bundle (one path for both in crates/net/src/trust.rs);
//!
//! then prints `ready`, and serves until its stdin closes. It then prints how
//! many requests each fake served; a fake that saw a request the real
//! service would refuse fails the process when it is dropped.
//!
//! moto (AWS) is started only when `WICP_MOTO_SERVER` or the default
//! virtualenv has it; without it the aws files are not written.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::print_stdout,
    clippy::print_stderr
)]

// The parts of tests/support a process can use (plugin.rs runs the test
// binary, which only tests and benches know), as modules at the root, where
// their `super::` finds one another.
#[allow(dead_code)]
#[path = "../tests/support/azure.rs"]
mod azure;
#[allow(dead_code)]
#[path = "../tests/support/google.rs"]
mod google;
#[allow(dead_code)]
#[path = "../tests/support/http_server.rs"]
mod http_server;
#[allow(dead_code)]
#[path = "../tests/support/moto.rs"]
mod moto;
#[allow(dead_code)]
#[path = "../tests/support/net.rs"]
mod net;
#[allow(dead_code)]
#[path = "../tests/support/token.rs"]
mod token;

use std::io::Write;
use std::path::{Path, PathBuf};

use azure::{App, FakeAcr, FakeEntra};
use google::{FakeSts, GCP_CLUSTER, GCP_PROJECT};
use moto::Moto;
use net::{CA_PEM, TlsFront};
use serde_json::json;
use token::TokenSpec;

/// Long enough for any bench run; the plugin refuses expired tokens.
const TOKEN_LIFETIME_SECS: i64 = 6 * 3600;

fn token(audience: &str) -> String {
    let mut spec = TokenSpec::new("bench", "puller", audience);
    spec.expires_in = TOKEN_LIFETIME_SECS;
    spec.mint()
}

/// `url`'s `host:port`, for a TLS front.
fn addr(url: &str) -> std::net::SocketAddr {
    url.trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("a fake's http://127.0.0.1:PORT")
}

/// A CredentialProviderRequest as the kubelet encodes it.
fn request(image: &str, token: Option<&str>, annotations: &[(&str, &str)]) -> String {
    let annotations: serde_json::Map<String, serde_json::Value> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({
        "kind": "CredentialProviderRequest",
        "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
        "image": image,
        "serviceAccountToken": token,
        "serviceAccountAnnotations": annotations,
    })
    .to_string()
}

fn write_lines(path: &Path, words: &[String]) {
    std::fs::write(path, words.join("\n") + "\n").unwrap();
}

fn tls_words(mut words: Vec<String>) -> Vec<String> {
    words.extend(["--ca-file".to_string(), CA_PEM.to_string()]);
    words
}

/// The system's bundle: where Debian keeps it (and the other
/// distributions' names, as the plugin looks for them).
const SYSTEM_BUNDLES: [&str; 3] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// `words` trusting `DIR/system.pem` (the node's store) instead of
/// `--ca-file`: the assignment goes first, with the other assignments.
fn system_words(dir: &Path, words: &[String]) -> Vec<String> {
    let mut out = vec![format!(
        "SSL_CERT_FILE={}",
        dir.join("system.pem").display()
    )];
    out.extend(words.iter().cloned());
    out
}

fn main() {
    let dir = PathBuf::from(std::env::args().nth(1).expect("usage: bench-upstream DIR"));
    let mut system = SYSTEM_BUNDLES
        .iter()
        .find_map(|path| std::fs::read(path).ok())
        .unwrap_or_default();
    system.extend(std::fs::read(CA_PEM).unwrap());
    std::fs::write(dir.join("system.pem"), system).unwrap();

    // Google STS alone: one exchange per miss (no impersonation).
    let sts = FakeSts::start();
    let sts_tls = TlsFront::start(sts.server.addr());
    let gcp = |endpoint: String| -> Vec<String> {
        [
            "--provider",
            "gcp",
            "--gcp-project-id",
            GCP_PROJECT,
            "--gcp-cluster",
            GCP_CLUSTER,
            "--gcp-sts-endpoint",
            &endpoint,
        ]
        .map(String::from)
        .to_vec()
    };
    std::fs::write(
        dir.join("gcp.json"),
        request(
            "us-docker.pkg.dev/my-project/team/app",
            Some(&token(&format!("{GCP_PROJECT}.svc.id.goog"))),
            &[],
        ),
    )
    .unwrap();
    write_lines(&dir.join("gcp.http"), &gcp(sts.server.url()));
    write_lines(&dir.join("gcp.https"), &tls_words(gcp(sts_tls.url())));
    write_lines(
        &dir.join("gcp.system"),
        &system_words(&dir, &gcp(sts_tls.url())),
    );

    // Entra ID, then ACR: two exchanges per miss.
    let entra = FakeEntra::start(App::trusting("bench", "puller"));
    let acr = FakeAcr::start("bench.azurecr.io", &entra);
    let entra_tls = TlsFront::start(addr(&entra.url()));
    let acr_tls = TlsFront::start(addr(&acr.url()));
    let azure = |authority: String, acr: String| -> Vec<String> {
        [
            "--provider",
            "azure",
            "--azure-authority-host",
            &authority,
            "--acr-endpoint",
            &acr,
        ]
        .map(String::from)
        .to_vec()
    };
    std::fs::write(
        dir.join("azure.json"),
        request(
            "bench.azurecr.io/bench/app",
            Some(&token(azure::AUDIENCE)),
            &[
                ("azure.workload.identity/client-id", azure::CLIENT_ID),
                ("azure.workload.identity/tenant-id", azure::TENANT),
            ],
        ),
    )
    .unwrap();
    write_lines(&dir.join("azure.http"), &azure(entra.url(), acr.url()));
    write_lines(
        &dir.join("azure.https"),
        &tls_words(azure(entra_tls.url(), acr_tls.url())),
    );
    write_lines(
        &dir.join("azure.system"),
        &system_words(&dir, &azure(entra_tls.url(), acr_tls.url())),
    );

    // moto's STS, then ECR, through the SDK: two calls per miss.
    // moto_server() panics with install instructions when moto is missing;
    // here that only leaves AWS out, quietly.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let have_moto = std::panic::catch_unwind(moto::moto_server).is_ok();
    std::panic::set_hook(hook);
    let aws = have_moto.then(|| {
        let moto = Moto::start();
        let front = TlsFront::start(addr(&moto.url()));
        let aws = |endpoint: String| -> Vec<String> {
            vec![
                format!("AWS_ENDPOINT_URL={endpoint}"),
                "--provider".into(),
                "aws".into(),
            ]
        };
        std::fs::write(
            dir.join("aws.json"),
            request(
                "123456789012.dkr.ecr.us-west-2.amazonaws.com/bench/app",
                Some(&token("sts.amazonaws.com")),
                &[(
                    "eks.amazonaws.com/role-arn",
                    "arn:aws:iam::123456789012:role/pull",
                )],
            ),
        )
        .unwrap();
        write_lines(&dir.join("aws.http"), &aws(moto.url()));
        write_lines(&dir.join("aws.https"), &tls_words(aws(front.url())));
        write_lines(
            &dir.join("aws.system"),
            &system_words(&dir, &aws(front.url())),
        );
        (moto, front)
    });

    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    drop(out);
    std::io::copy(&mut std::io::stdin(), &mut std::io::sink()).unwrap();
    eprintln!(
        "bench-upstream: gcp: {} STS requests ({} over TLS); azure: {} Entra ID and {} ACR requests ({} and {} over TLS){}",
        sts.server.request_count(),
        sts_tls.requests(),
        entra.server.request_count(),
        acr.server.request_count(),
        entra_tls.requests(),
        acr_tls.requests(),
        aws.as_ref()
            .map(|(_, front)| format!("; aws: {} requests over TLS", front.requests()))
            .unwrap_or_default(),
    );
}
