//! The azure exchanger, exec'd as the kubelet runs it, against local fakes
//! of Entra ID and ACR (tests/support/azure.rs) and, end to end, a real
//! registry pulled from with skopeo.

use crate::support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::azure::{
    self, ACR_HOST as REGISTRY, ACR_ISSUER, App, CLIENT_ID, FakeAcr, FakeEntra,
    FakeIdentityBinding, NULL_GUID, TENANT, WI_CLIENT, WI_TENANT, acr_error,
};
use support::http_server::{Response, TestServer};
use support::plugin::{self, json_logs, pull as exec, request, run, words};
use support::token::TokenSpec;

mod exchange;
mod refusals;
mod identity_bindings;

const AKS_CLIENT: &str = "kubernetes.azure.com/acr-client-id";
const AKS_TENANT: &str = "kubernetes.azure.com/acr-tenant-id";

/// Fake Entra trusting team/puller, and a fake ACR for `login_server`.
fn fakes(login_server: &str) -> (FakeEntra, FakeAcr) {
    let entra = FakeEntra::start(App::trusting("team", "puller"));
    let acr = FakeAcr::start(login_server, &entra);
    (entra, acr)
}

fn sa_token() -> String {
    TokenSpec::new("team", "puller", azure::AUDIENCE).mint()
}

/// The flags that point the plugin at the fakes, debug logging on so the
/// secret checks cover every log line.
fn flags(entra: &FakeEntra, acr: &FakeAcr) -> Vec<String> {
    azure::flags(entra, acr, &["--provider", "azure", "--log-level", "debug"])
}

const IDENTITY: &[(&str, &str)] = &[(WI_CLIENT, CLIENT_ID), (WI_TENANT, TENANT)];

fn all_secrets(token: &str, entra: &FakeEntra, acr: &FakeAcr) -> Vec<String> {
    let mut secrets = vec![token.to_string()];
    secrets.extend(entra.issued());
    secrets.extend(acr.minted());
    secrets
}

fn parse_go_duration(text: &str) -> Duration {
    let mut total = 0u64;
    let mut number = String::new();
    for c in text.chars() {
        match c {
            '0'..='9' => number.push(c),
            'h' | 'm' | 's' => {
                let n: u64 = number.parse().unwrap();
                number.clear();
                total += n * match c {
                    'h' => 3600,
                    'm' => 60,
                    _ => 1,
                };
            }
            _ => panic!("unexpected duration {text}"),
        }
    }
    Duration::from_secs(total)
}

/// The identity-binding flags for `binding`, trusting only the test
/// cluster CA.
fn binding_flags(entra: &FakeEntra, acr: &FakeAcr, binding: &FakeIdentityBinding) -> Vec<String> {
    let mut args = flags(entra, acr);
    args.extend(
        [
            "--azure-identity-binding-sni",
            azure::BINDING_SNI,
            "--azure-identity-binding-address",
            &binding.address(),
            "--azure-identity-binding-ca",
            support::net::CLUSTER_CA_PEM,
        ]
        .map(str::to_string),
    );
    args
}
