//! Upstream replies, any status and body: the Google STS and IAM
//! Credentials interpreters, the RFC 8693 token-exchange and Chainguard STS
//! interpreters, Google's and Entra/ACR's error readers, and the
//! ACR refresh token's expiry. A cloud endpoint, a proxy or a captive portal
//! can answer anything; the plugin must answer with an error, not a panic.
#![no_main]
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use wicp_base::secret::Secret;
use wicp_net::http::Reply;
use wicp_providers::{chainguard, gcp, token_exchange, vault};

fuzz_target!(|data: &[u8]| {
    let Some((head, body)) = data.split_first_chunk::<2>() else {
        return;
    };
    let status = 100 + u16::from_le_bytes(*head) % 500;
    let reply = Reply {
        status,
        retry_after: None,
        body: body.to_vec(),
    };
    let subject = Secret::new("subject");
    let sts = gcp::sts::Request {
        endpoint: "https://sts.googleapis.com",
        audience: "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/x",
        subject_token: &subject,
        grant_fix: "grant",
        target_fix: "target",
    };
    if let Ok(token) = gcp::sts::interpret(&reply, 1_800_000_000, &sts) {
        assert!(reply.is_success() && !token.token.is_empty());
    }
    let iam = gcp::iam::Request {
        endpoint: "https://iamcredentials.googleapis.com",
        service_account: "sa@p.iam.gserviceaccount.com",
        federated_token: &subject,
        lifetime: Duration::from_secs(3600),
        principal: "principal://x",
    };
    if let Ok(token) = gcp::iam::interpret(&reply, &iam) {
        assert!(reply.is_success() && !token.token.is_empty());
    }
    for username in [
        token_exchange::Username::Fixed("robot".into()),
        token_exchange::Username::Field("username".into()),
    ] {
        let describe = token_exchange::Describe {
            url: "https://sts.example.com/token",
            service_account: "team/puller",
            issuer: "https://oidc.cluster.test",
            subject: "system:serviceaccount:team:puller",
            requested_token_type: Some("urn:ietf:params:oauth:token-type:access_token"),
            username: &username,
        };
        if let Ok(c) = token_exchange::interpret(&reply, 1_800_000_000, &describe) {
            assert!(reply.is_success() && !c.password.is_empty() && !c.username.is_empty());
            assert!(c.expires_at > 1_800_000_000 && !c.username.contains(':'));
        }
    }
    let describe = chainguard::Describe {
        url: "https://issuer.enforce.dev/sts/exchange",
        identity: "0123456789abcdef0123456789abcdef01234567/0123456789abcdef",
        service_account: "team/puller",
        issuer: "https://oidc.cluster.test",
        subject: "system:serviceaccount:team:puller",
    };
    if let Ok(c) = chainguard::interpret(&reply, 1_800_000_000, &describe) {
        assert!(reply.is_success() && !c.password.is_empty());
        assert!(c.expires_at > 1_800_000_000);
    }
    let _ = wicp_providers::oauth::error_body(body);
    if let Ok(login) = vault::wire::read_login(&reply, "login") {
        assert!(!login.client_token.is_empty() && login.lease_duration >= 0);
    }
    for version in [1, 2] {
        if let Ok(secrets) = vault::wire::read_secret(&reply, version, "read") {
            let _ = vault::wire::credentials(&secrets, "username", "password", "read");
        }
    }
    let shown = vault::wire::describe(&reply, &[&subject]);
    // A secret the client holds is never repeated from an error body.
    assert!(!shown.contains("subject"), "{shown}");
    let _ = wicp_base::redact::body_shape(body);
    let text = String::from_utf8_lossy(body);
    let cleaned = wicp_base::redact::clean(&text, 300);
    assert!(cleaned.chars().count() <= 301);
    let _ = wicp_kubelet::request::token::unverified_expiry(&text);
});
