//! A fake of Zot's OIDC workload-identity token endpoint (`/zot/auth/token`,
//! Zot v2.1.19 and later), written from Zot's source (project-zot/zot, the
//! bearer OIDC token exchange handler: `normalizeTokenExchangeRequest`,
//! `bearerOwnsClaims`, `newOIDCBearerTokenResponse`) as summarised in
//! registries.md §1.2:
//!
//! - GET and POST `/zot/auth/token`; more than one `Authorization` header is
//!   refused with 401.
//! - Candidate tokens, trimmed and deduplicated, in order: the password of a
//!   Basic `Authorization` header (the username is ignored), then, for an
//!   `application/x-www-form-urlencoded` body, the fields `password`,
//!   `id_token`, `access_token`, `refresh_token`, `token`.
//! - A candidate belongs to a configured OIDC provider when its unverified
//!   `iss` equals the provider's issuer and its `aud` intersects the
//!   provider's audiences; an owned candidate is then verified (signature,
//!   expiry, audience). Owned but invalid: 401 with
//!   `WWW-Authenticate: Basic realm="<realm>"`. Owned by nobody: 401.
//! - Success: 200, `Cache-Control: no-store`, `Pragma: no-cache`,
//!   `{"token", "access_token", "expires_in": exp - now, "issued_at": iat as
//!   RFC 3339}`.
//!
//! One deliberate difference: Zot answers with the service account JWT
//! itself and verifies it again on `/v2/`. Here `/v2/` is Debian's
//! docker-registry, which accepts only tokens signed by its token
//! certificate, so the fake answers the same body shape with a registry
//! token (`Registry::sign_token`) for the verified subject. What the plugin
//! controls, the credential the client presents to the token endpoint, is
//! checked exactly as Zot checks it.

use std::sync::{Arc, Mutex};

use base64::Engine as _;
use serde_json::{Value, json};

use super::http_server::{Request, Response, TestServer, form_urlencoded_pairs};
use super::registry::Registry;
use super::token;

pub const PATH: &str = "/zot/auth/token";

pub struct FakeZot {
    pub server: TestServer,
    seen: Arc<Mutex<Seen>>,
}

/// What the endpoint decided, for assertions.
#[derive(Default, Clone, Debug)]
pub struct Seen {
    /// Subjects of service account tokens accepted.
    pub accepted: Vec<String>,
    /// The method and the candidate's source (`basic` or `form`) of each
    /// accepted request, in order.
    pub logins: Vec<(String, &'static str)>,
    /// Reasons for refusals.
    pub refused: Vec<String>,
}

impl FakeZot {
    /// `issuer`/`audiences`: the one `http.auth.bearer.oidc[]` entry.
    /// `admin`: a local (htpasswd) account with push rights.
    pub fn start(issuer: &str, audiences: &[&str], admin: (&str, &str)) -> FakeZot {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let handler_seen = Arc::clone(&seen);
        let issuer = issuer.to_string();
        let audiences: Vec<String> = audiences.iter().map(|a| a.to_string()).collect();
        let admin = (admin.0.to_string(), admin.1.to_string());
        let realm: Arc<Mutex<String>> = Arc::default();
        let realm_in = Arc::clone(&realm);
        let server = TestServer::start(move |req| {
            let realm = realm_in.lock().unwrap().clone();
            handle(req, &issuer, &audiences, &admin, &realm, &handler_seen)
        });
        *realm.lock().unwrap() = format!("{}{PATH}", server.url());
        FakeZot { server, seen }
    }

    pub fn realm(&self) -> String {
        format!("{}{PATH}", self.server.url())
    }

    pub fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }
}

fn unverified_claims(jwt: &str) -> Option<Value> {
    let payload = jwt.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

fn handle(
    req: &Request,
    issuer: &str,
    audiences: &[String],
    admin: &(String, String),
    realm: &str,
    seen: &Mutex<Seen>,
) -> Response {
    let unauthorized = |why: String| {
        seen.lock().unwrap().refused.push(why);
        Response::json(
            401,
            json!({"errors": [{"code": "UNAUTHORIZED", "message": "authentication failed"}]}),
        )
        .with_header("WWW-Authenticate", format!("Basic realm=\"{realm}\""))
    };
    if req.path != PATH || !(req.method == "GET" || req.method == "POST") {
        return Response::text(404, "404 page not found");
    }
    let authorizations = req
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        .count();
    if authorizations > 1 {
        return unauthorized("more than one Authorization header".into());
    }
    // Zot ignores `scope` for OIDC tokens (its answer is the token itself);
    // the registry token the fake signs instead needs it, from the query
    // (GET) or the OAuth2 form (containerd's POST).
    let mut scopes = req.query_values("scope");
    scopes.extend(
        form_urlencoded_pairs(&String::from_utf8_lossy(&req.body))
            .into_iter()
            .filter(|(k, _)| k == "scope")
            .map(|(_, v)| v),
    );
    let basic = req.basic_auth();
    // A local account (Zot's htpasswd), for pushing the test image.
    if let Some((u, p)) = &basic
        && (u, p) == (&admin.0, &admin.1)
    {
        let token = Registry::sign_token(u, &scopes, &["pull", "push"]);
        return Response::json(
            200,
            json!({"token": token, "access_token": token, "expires_in": 300}),
        );
    }
    let mut candidates: Vec<(String, &'static str)> = Vec::new();
    if let Some((_, password)) = basic {
        candidates.push((password, "basic"));
    }
    // The media type, parameters ignored: containerd sends
    // `application/x-www-form-urlencoded; charset=utf-8`, which Zot reads.
    let form_encoded = req
        .header("content-type")
        .and_then(|t| t.split(';').next())
        .is_some_and(|t| {
            t.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    if form_encoded {
        let form = form_urlencoded_pairs(&String::from_utf8_lossy(&req.body));
        for field in [
            "password",
            "id_token",
            "access_token",
            "refresh_token",
            "token",
        ] {
            candidates.extend(
                form.iter()
                    .filter(|(k, _)| k == field)
                    .map(|(_, v)| (v.clone(), "form")),
            );
        }
    }
    let mut unique: Vec<(String, &'static str)> = Vec::new();
    for (c, source) in candidates {
        let c = c.trim().to_string();
        if !c.is_empty() && !unique.iter().any(|(u, _)| *u == c) {
            unique.push((c, source));
        }
    }
    for (candidate, source) in unique {
        let Some(claims) = unverified_claims(&candidate) else {
            continue;
        };
        let owned_audience = token::audiences(&claims)
            .into_iter()
            .find(|a| audiences.contains(a));
        if claims["iss"] != issuer {
            continue;
        }
        let Some(audience) = owned_audience else {
            continue;
        };
        return match token::verify(&candidate, &audience) {
            Ok(verified) => {
                let subject = verified["sub"].as_str().unwrap_or_default().to_string();
                {
                    let mut seen = seen.lock().unwrap();
                    seen.accepted.push(subject.clone());
                    seen.logins.push((req.method.clone(), source));
                }
                let now = token::now();
                let registry_token = Registry::sign_token(&subject, &scopes, &["pull"]);
                Response::json(
                    200,
                    json!({
                        "token": registry_token,
                        "access_token": registry_token,
                        "expires_in": (verified["exp"].as_i64().unwrap_or(now) - now).max(0),
                        "issued_at": token::rfc3339(verified["iat"].as_i64().unwrap_or(now)),
                    }),
                )
                .with_header("Cache-Control", "no-store")
                .with_header("Pragma", "no-cache")
            }
            Err(e) => unauthorized(format!("owned token failed verification: {e}")),
        };
    }
    unauthorized("no candidate token belongs to a configured OIDC provider".into())
}
