//! A local Chainguard STS (`issuer.enforce.dev`), from Chainguard's
//! documented exchange (chainguard-dev/edu: `GET /sts/exchange?aud=...&identity=...`
//! with the OIDC token as Bearer, answer `{"token": ...}`) and the SDK's
//! protojson answer (`token`, `refreshToken`, `expiry`) and grpc-gateway
//! error bodies (`{"code": <gRPC code>, "message", "details"}`).
//!
//! It knows assumable identities, each trusting one issuer and subject as
//! `chainctl iam identities create --identity-issuer --subject` does, and
//! verifies the service account token as Chainguard would for an identity
//! given the cluster's keys: signature, expiry, issuer, subject, audience.
//! It asserts the method, path, the exact query and the headers; violations
//! fail the test when the fake is dropped.

use std::collections::BTreeMap;

use serde_json::json;

use super::http_server::{Fake, Ledger, Request, Response};
use super::token;

pub const AUDIENCE: &str = "issuer.enforce.dev";
pub const IDENTITY: &str = "0123456789abcdef0123456789abcdef01234567/89abcdef01234567";
pub const OTHER_IDENTITY: &str = "0123456789abcdef0123456789abcdef01234567/fedcba9876543210";

pub struct FakeChainguard {
    pub server: Fake,
}

/// identity ID -> the subject it trusts.
fn identities() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([
        (IDENTITY, "system:serviceaccount:team:puller"),
        (OTHER_IDENTITY, "system:serviceaccount:team:other"),
    ])
}

/// A grpc-gateway error body.
pub fn grpc_error(status: u16, code: u32, message: &str) -> Response {
    Response::json(
        status,
        json!({"code": code, "message": message, "details": []}),
    )
}

impl FakeChainguard {
    /// Starts with IDENTITY trusting team/puller and OTHER_IDENTITY trusting team/other.
    pub fn start() -> FakeChainguard {
        FakeChainguard {
            server: Fake::start("Chainguard STS", handle),
        }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The flag that points the chainguard provider here, then `extra`
    /// (the test's own: `--provider` among them).
    pub fn flags(&self, extra: &[&str]) -> Vec<String> {
        super::plugin::flags(&["--chainguard-issuer-url", &self.url()], extra)
    }

    pub fn script(&self, responses: impl IntoIterator<Item = Response>) {
        self.server.ledger().script(responses);
    }

    pub fn issued(&self) -> Vec<String> {
        self.server.ledger().issued()
    }
}

fn handle(ledger: &Ledger, req: &Request) -> Response {
    let mut problems = Vec::new();
    if req.method != "GET" || req.path != "/sts/exchange" || !req.body.is_empty() {
        problems.push(format!(
            "{} {} with a {}-byte body",
            req.method,
            req.path,
            req.body.len()
        ));
    }
    let query = req.query_pairs();
    let names: Vec<&str> = query.iter().map(|(k, _)| k.as_str()).collect();
    if names != ["aud", "identity"] {
        problems.push(format!("query fields {names:?}"));
    } else if query[0].1 != "cgr.dev" {
        problems.push(format!("aud={:?}", query[0].1));
    }
    if req.header("accept") != Some("application/json") {
        problems.push(format!("accept {:?}", req.header("accept")));
    }
    let bearer = req.bearer();
    if bearer.is_none() {
        problems.push("no Bearer token".to_string());
    }
    if let Some(refused) = ledger.refused(problems, || grpc_error(400, 3, "invalid request")) {
        return refused;
    }
    let identity = &query[1].1;
    let Some(subject) = identities().get(identity.as_str()).copied() else {
        return grpc_error(404, 5, "identity not found");
    };
    let claims = match token::verify(&bearer.unwrap_or_default(), AUDIENCE) {
        Ok(claims) => claims,
        Err(e) => return grpc_error(401, 16, &format!("unable to verify token: {e}")),
    };
    if claims["sub"] != subject {
        return grpc_error(403, 7, "the token's subject does not match the identity");
    }
    ledger.scripted_or_issue(|n| {
        let now = token::now();
        let registry_token = token::sign(
            &json!({"iss": "https://issuer.enforce.dev", "sub": identity, "aud": "cgr.dev", "iat": now, "exp": now + 3600, "n": n}),
            token::WRONG_KEY,
        );
        let answer = json!({"token": registry_token, "refreshToken": format!("refresh-{now}")});
        (registry_token, Response::json(200, answer))
    })
}
