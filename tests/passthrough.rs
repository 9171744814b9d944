//! The binary as the kubelet runs it, in passthrough mode.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use support::plugin::{request, run};
use support::token::TokenSpec;

#[test]
fn passthrough_returns_the_token_for_an_allowed_registry() {
    let token = TokenSpec::new("team", "puller", "harbor.test").mint();
    let run = run(
        &[
            "--provider",
            "passthrough",
            "--registry",
            "harbor.test",
            "--audience",
            "harbor.test",
        ],
        &[],
        request("harbor.test/team/app", Some(&token), &[]).as_bytes(),
    );
    let response = run.response();
    assert_eq!(
        response["apiVersion"],
        "credentialprovider.kubelet.k8s.io/v1"
    );
    assert_eq!(response["cacheKeyType"], "Registry");
    assert_eq!(
        response["auth"]["harbor.test"]["username"],
        "serviceaccount"
    );
    assert_eq!(response["auth"]["harbor.test"]["password"], token.as_str());
    assert!(!run.stderr.contains(&token));
}
