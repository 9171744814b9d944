//! A local RFC 8693 token server (OAuth 2.0 Token Exchange), written from
//! RFC 8693 §2.1-2.2 and RFC 6749 §2.3.1, §5.2: a form POST to the token
//! endpoint, a JWT subject token verified as a server trusting the test
//! cluster's issuer would verify it, optional client authentication by
//! HTTP Basic with form-urlencoded ID and secret, and the RFC's success and
//! error bodies.
//!
//! Every request is checked field by field against what the server was
//! configured to expect (and no other field); a request the server would
//! refuse is answered with `invalid_request` and recorded, and dropping the
//! fake with recorded violations fails the test. Scripted answers replace
//! the next ones, after the request was checked.

use serde_json::json;

use super::http_server::{Fake, Ledger, Request, Response, form_urlencoded_pairs};
use super::token;

/// The audience the cluster's token service expects on a service account
/// token.
pub const AUDIENCE: &str = "sts.cluster.test";
pub const PATH: &str = "/oauth2/token";
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
pub const JWT: &str = "urn:ietf:params:oauth:token-type:jwt";
pub const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";

/// A token-exchange entry for [`super::plugin::REGISTRY`] taking tokens
/// for [`AUDIENCE`] and asking `url` as the robot `robot`, then `extra`:
/// the flags most token-exchange tests start from.
pub fn token_exchange(url: &str, extra: &[&str]) -> Vec<String> {
    let entry = [
        "--provider",
        "token-exchange",
        "--registry",
        super::plugin::REGISTRY,
    ];
    let robot = ["--audience", AUDIENCE, "--token-exchange-username", "robot"];
    let url = ["--token-exchange-url", url];
    super::plugin::flags(&[&entry[..], &robot, &url].concat(), extra)
}

/// What the server expects, as an admin would have configured it.
#[derive(Clone)]
pub struct Expect {
    /// The service account token's audience the server trusts.
    pub token_audience: String,
    /// The form fields besides grant_type, subject_token and
    /// subject_token_type, in order.
    pub fields: Vec<(String, String)>,
    /// Basic client credentials, if the client must authenticate.
    pub client: Option<(String, String)>,
    /// Only this subject is granted a token.
    pub subject: String,
    /// Verifies the subject token for an audience as the server trusts its
    /// issuer: `token::verify` for the cluster's, `spire::verify` for a
    /// SPIRE server's.
    pub verify: fn(&str, &str) -> Result<serde_json::Value, String>,
}

impl Expect {
    /// The cluster's tokens for [`AUDIENCE`], granted to team/puller
    /// alone, with no further fields and no client credentials.
    pub fn puller() -> Expect {
        Expect {
            token_audience: AUDIENCE.into(),
            fields: Vec::new(),
            client: None,
            subject: super::token::SUBJECT.into(),
            verify: super::token::verify,
        }
    }
}

pub struct FakeSts {
    pub server: Fake,
}

impl FakeSts {
    pub fn start(expect: Expect) -> FakeSts {
        let server = Fake::start("token server", move |ledger, req| {
            handle(&expect, ledger, req)
        });
        FakeSts { server }
    }

    pub fn url(&self) -> String {
        format!("{}{PATH}", self.server.url())
    }

    /// [`token_exchange`] with this server's URL.
    pub fn entry(&self, extra: &[&str]) -> Vec<String> {
        token_exchange(&self.url(), extra)
    }

    /// The flag that points the token-exchange provider here, then
    /// `extra` (the test's own: `--provider` among them).
    pub fn flags(&self, extra: &[&str]) -> Vec<String> {
        super::plugin::flags(&["--token-exchange-url", &self.url()], extra)
    }

    pub fn script(&self, responses: impl IntoIterator<Item = Response>) {
        self.server.ledger().script(responses);
    }

    /// Every access token issued so far.
    pub fn issued(&self) -> Vec<String> {
        self.server.ledger().issued()
    }
}

/// RFC 6749 §5.2.
pub fn oauth_error(status: u16, code: &str, description: &str) -> Response {
    Response::json(
        status,
        json!({"error": code, "error_description": description}),
    )
}

/// RFC 6749 Appendix B.
fn form_decode(text: &str) -> String {
    form_urlencoded_pairs(&format!("x={text}"))
        .pop()
        .map(|(_, v)| v)
        .unwrap_or_default()
}

fn handle(expect: &Expect, ledger: &Ledger, req: &Request) -> Response {
    let mut problems = Vec::new();
    if req.method != "POST" || req.path != PATH || !req.query.is_empty() {
        problems.push(format!("{} {}?{}", req.method, req.path, req.query));
    }
    if req.header("content-type") != Some("application/x-www-form-urlencoded") {
        problems.push(format!("content type {:?}", req.header("content-type")));
    }
    if req.header("accept") != Some("application/json") {
        problems.push(format!("accept {:?}", req.header("accept")));
    }
    let pairs = form_urlencoded_pairs(&String::from_utf8_lossy(&req.body));
    let mut expected = vec![
        ("grant_type".to_string(), GRANT_TYPE.to_string()),
        ("subject_token".to_string(), String::new()),
        ("subject_token_type".to_string(), JWT.to_string()),
    ];
    expected.extend(expect.fields.iter().cloned());
    let names: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    let wanted: Vec<&str> = expected.iter().map(|(k, _)| k.as_str()).collect();
    if names != wanted {
        problems.push(format!("fields {names:?}, expected {wanted:?}"));
    } else {
        for ((name, got), (_, want)) in pairs.iter().zip(&expected) {
            if name != "subject_token" && got != want {
                problems.push(format!("{name}={got:?}"));
            }
        }
    }
    let basic = req.basic_auth();
    match (&expect.client, &basic) {
        (None, None) => {}
        (None, Some(_)) => problems.push("an Authorization header".to_string()),
        // RFC 6749 §5.2: a client that did not authenticate gets 401 invalid_client.
        (Some(_), None) => {
            return Response::json(401, json!({"error": "invalid_client", "error_description": "Client authentication failed."}))
                .with_header("WWW-Authenticate", "Basic realm=\"sts\"");
        }
        (Some((id, secret)), Some((u, p))) => {
            if form_decode(u) != *id || form_decode(p) != *secret {
                return Response::json(401, json!({"error": "invalid_client", "error_description": "Client authentication failed."}))
                    .with_header("WWW-Authenticate", "Basic realm=\"sts\"");
            }
        }
    }
    let refusal = || {
        oauth_error(
            400,
            "invalid_request",
            "The request is missing a required parameter.",
        )
    };
    if let Some(refused) = ledger.refused(problems, refusal) {
        return refused;
    }
    let subject_token = &pairs[1].1;
    let claims = match (expect.verify)(subject_token, &expect.token_audience) {
        Ok(claims) => claims,
        Err(e) => {
            return oauth_error(
                400,
                "invalid_grant",
                &format!("subject_token is invalid: {e}"),
            );
        }
    };
    if claims["sub"] != expect.subject.as_str() {
        return oauth_error(
            400,
            "invalid_grant",
            "the subject is not allowed to exchange tokens",
        );
    }
    ledger.scripted_or_issue(|n| {
        let access_token = format!("sts-at-{}-{n}", token::now());
        let answer = json!({
            "access_token": access_token,
            "issued_token_type": ACCESS_TOKEN,
            "token_type": "Bearer",
            "expires_in": 900,
            "username": "svc-from-sts",
        });
        let response = Response::json(200, answer).with_header("Cache-Control", "no-store");
        (access_token, response)
    })
}
