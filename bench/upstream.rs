//! The fake Entra ID and ACR of `tests/support/azure.rs`, as a process of
//! its own for `make bench`: the same wire format the integration tests
//! check, listening on 127.0.0.1.
//!
//! `bench-upstream DIR` writes `DIR/request.json` (a CredentialProviderRequest
//! with a service account token signed by the test cluster key) and
//! `DIR/args` (the plugin flags pointing at the fakes, one per line), prints
//! `ready`, and serves until its stdin closes. It then prints how many
//! exchanges it served and fails if the plugin ever sent a request the real
//! services would refuse.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    clippy::print_stdout,
    clippy::print_stderr
)]

#[allow(dead_code)]
#[path = "../tests/support/azure.rs"]
mod azure;
#[allow(dead_code)]
#[path = "../tests/support/http_server.rs"]
mod http_server;
#[allow(dead_code)]
#[path = "../tests/support/token.rs"]
mod token;

use std::io::Write;
use std::path::PathBuf;

use serde_json::json;

pub const REGISTRY: &str = "bench.azurecr.io";

fn main() {
    let dir = PathBuf::from(std::env::args().nth(1).expect("usage: bench-upstream DIR"));
    let entra = azure::FakeEntra::start(azure::App::trusting("bench", "puller"));
    let acr = azure::FakeAcr::start(REGISTRY, &entra);

    // Long enough for any bench run; the plugin refuses expired tokens.
    let mut spec = token::TokenSpec::new("bench", "puller", azure::AUDIENCE);
    spec.expires_in = 6 * 3600;
    let request = json!({
        "kind": "CredentialProviderRequest",
        "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
        "image": format!("{REGISTRY}/bench/app"),
        "serviceAccountToken": spec.mint(),
        "serviceAccountAnnotations": {
            "azure.workload.identity/client-id": azure::CLIENT_ID,
            "azure.workload.identity/tenant-id": azure::TENANT,
        },
    });
    std::fs::write(dir.join("request.json"), request.to_string()).unwrap();
    let args = [
        "--provider".to_string(),
        "azure".into(),
        "--azure-authority-host".into(),
        entra.url(),
        "--acr-endpoint".into(),
        acr.url(),
    ];
    std::fs::write(dir.join("args"), args.join("\n") + "\n").unwrap();

    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    drop(out);
    std::io::copy(&mut std::io::stdin(), &mut std::io::sink()).unwrap();
    eprintln!(
        "bench-upstream: served {} exchanges ({} Entra ID, {} ACR requests)",
        acr.minted().len(),
        entra.server.request_count(),
        acr.server.request_count()
    );
}
