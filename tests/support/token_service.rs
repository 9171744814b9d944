//! What the vendor token service fakes (JFrog, Quay, Cloudsmith) share:
//! the trust the vendor is configured with, verification of the service
//! account token as the vendor does it (signature against the cluster
//! issuer's key, issuer, audience, subject, expiry), tokens minted with a
//! per-fake random key, scripted answers for throttling and outages, and
//! recorded violations that fail the test when the fake is dropped.
//!
//! Each vendor's file (`jfrog.rs`, `quay.rs`, `cloudsmith.rs`) holds only
//! its wire format: the request it checks and the bodies it answers.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::Value;

use super::containerd::Containerd;
use super::http_server::{Fake, Ledger, Request, Response};
use super::plugin::{self, Run};
use super::registry::Registry;
use super::token::{self, now};

/// What the vendor side trusts: the cluster's issuer, one subject, and the
/// audience the admin pinned.
#[derive(Clone, Debug)]
pub struct Trust {
    pub issuer: String,
    pub subject: String,
    pub audience: String,
}

impl Trust {
    pub fn service_account(namespace: &str, name: &str, audience: &str) -> Self {
        Trust {
            issuer: token::ISSUER.into(),
            subject: format!("system:serviceaccount:{namespace}:{name}"),
            audience: audience.into(),
        }
    }
}

/// The state every vendor handler works with.
pub struct State {
    pub name: &'static str,
    pub trust: Trust,
    key: Vec<u8>,
    ledger: Arc<Ledger>,
    /// Lifetime of minted tokens, seconds (negative: already expired).
    lifetime: AtomicI64,
}

impl State {
    /// Records a request the real service would refuse.
    pub fn violation(&self, what: impl Into<String>) {
        self.ledger.violations.add(what.into());
    }

    /// The next scripted answer, if any.
    pub fn scripted(&self) -> Option<Response> {
        self.ledger.scripted()
    }

    /// Verifies the service account token as the vendor does.
    pub fn verify_subject_token(&self, jwt: &str) -> Result<Value, String> {
        let claims = token::verify(jwt, &self.trust.audience)?;
        if claims["iss"] != self.trust.issuer.as_str() {
            return Err(format!("issuer {} is not trusted", claims["iss"]));
        }
        if claims["sub"] != self.trust.subject.as_str() {
            return Err(format!("subject {} is not trusted", claims["sub"]));
        }
        Ok(claims)
    }

    pub fn lifetime(&self) -> i64 {
        self.lifetime.load(Ordering::SeqCst)
    }

    /// Mints a token for `subject` (HS256 with this fake's key; the plugin
    /// reads only its `exp`), records it and returns it.
    pub fn mint(&self, subject: &str) -> String {
        let iat = now();
        let claims = serde_json::json!({
            "iss": self.name,
            "aud": self.name,
            "sub": subject,
            "iat": iat,
            "nbf": iat,
            "exp": iat + self.lifetime(),
        });
        let jwt = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(&self.key),
        )
        .expect("sign");
        self.ledger.issue(&jwt);
        jwt
    }

    /// Checks that a JSON body has exactly `keys`, all strings.
    pub fn check_json_keys(&self, req: &Request, keys: &[&str]) -> Option<Value> {
        if req.header("content-type") != Some("application/json") {
            self.violation(format!("content type {:?}", req.header("content-type")));
        }
        let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
            self.violation("body is not JSON");
            return None;
        };
        let Some(object) = body.as_object() else {
            self.violation("body is not a JSON object");
            return None;
        };
        let sent: BTreeSet<&str> = object.keys().map(String::as_str).collect();
        let expected: BTreeSet<&str> = keys.iter().copied().collect();
        if sent != expected {
            self.violation(format!("body fields {sent:?} instead of {expected:?}"));
        }
        if object.values().any(|v| !v.is_string()) {
            self.violation("a body field is not a string");
        }
        Some(body)
    }

    /// Checks the method, the path, no query and no Authorization header
    /// unless `auth` says one is expected.
    pub fn check_line(&self, req: &Request, method: &str, path: &str, auth: bool) {
        if req.method != method {
            self.violation(format!("method {} instead of {method}", req.method));
        }
        if req.path != path {
            self.violation(format!("path {} instead of {path}", req.path));
        }
        if !req.query.is_empty() {
            self.violation(format!("unexpected query {:?}", req.query));
        }
        if !auth && req.header("authorization").is_some() {
            self.violation("an Authorization header the service does not take");
        }
    }
}

/// A running fake.
pub struct FakeService {
    pub server: Fake,
    state: Arc<State>,
}

impl FakeService {
    pub fn start(
        name: &'static str,
        trust: Trust,
        handler: impl Fn(&State, &Request) -> Response + Send + Sync + 'static,
    ) -> Self {
        let ledger = Arc::new(Ledger::default());
        let state = Arc::new(State {
            name,
            trust,
            key: super::token::random_key(),
            ledger: Arc::clone(&ledger),
            lifetime: AtomicI64::new(3600),
        });
        let handler_state = Arc::clone(&state);
        let server = Fake::with_ledger(name, ledger, move |req| handler(&handler_state, req));
        FakeService { server, state }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Answers the next requests with `responses` (after checking them).
    pub fn script(&self, responses: impl IntoIterator<Item = Response>) {
        self.server.ledger().script(responses);
    }

    /// The lifetime of the tokens minted from now on (negative: expired).
    pub fn set_lifetime(&self, seconds: i64) {
        self.state.lifetime.store(seconds, Ordering::SeqCst);
    }

    pub fn issued(&self) -> Vec<String> {
        self.server.ledger().issued()
    }

    pub fn request_count(&self) -> usize {
        self.server.request_count()
    }

    /// Verifies a token this fake minted, for `subject`: what the registry
    /// in front of it does.
    pub fn verifier(&self) -> impl Fn(&str, &str) -> bool + Send + Sync + 'static {
        let key = self.state.key.clone();
        let name = self.state.name;
        move |jwt, subject| {
            let mut validation = Validation::new(Algorithm::HS256);
            validation.set_audience(&[name]);
            validation.set_issuer(&[name]);
            jsonwebtoken::decode::<Value>(jwt, &DecodingKey::from_secret(&key), &validation)
                .is_ok_and(|d| d.claims["sub"] == subject)
        }
    }
}

/// Annotation values a tenant might craft to move the token elsewhere:
/// none may pass an identity pattern.
pub const HOSTILE: &[&str] = &[
    "../admin",
    "x@evil.example",
    "evil.example:443",
    "a/b",
    "a?b=c",
    "a#b",
    "a%2fb",
    "a\nb",
    "https://evil.example/",
    "a b",
];

/// Runs the plugin as the kubelet does for `image`, at debug level.
pub fn invoke(args: &[String], image: &str, token: &str, annotations: &[(&str, &str)]) -> Run {
    invoke_at("debug", args, image, token, annotations)
}

/// [`invoke`] with `--log-format json`, for checks on the error's facts.
pub fn invoke_json(args: &[String], image: &str, token: &str, annotations: &[(&str, &str)]) -> Run {
    let mut json = args.to_vec();
    json.extend(["--log-format", "json"].map(String::from));
    invoke(&json, image, token, annotations)
}

/// Runs the plugin as the kubelet does for `image`, at `level`.
pub fn invoke_at(
    level: &str,
    args: &[String],
    image: &str,
    token: &str,
    annotations: &[(&str, &str)],
) -> Run {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend(["--log-level", level]);
    plugin::run(
        &all,
        &[],
        plugin::request(image, Some(token), annotations).as_bytes(),
    )
}

/// Runs the plugin at info level (what nodes run) and at debug level, and
/// checks that neither stderr holds the service account token, its
/// signature or the password it returned. Returns the last response.
pub fn assert_quiet_at_every_level(
    args: &[String],
    image: &str,
    token: &str,
    annotations: &[(&str, &str)],
) -> Value {
    let mut response = Value::Null;
    for level in ["info", "debug"] {
        let out = invoke_at(level, args, image, token, annotations);
        response = out.response_for(image);
        let entry = response["auth"]
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap();
        let password = entry["password"].as_str().unwrap();
        out.assert_no_secrets(&[token, password]);
        if let Some((_, signature)) = token.rsplit_once('.') {
            assert!(!out.stderr.contains(signature), "{level}: {}", out.stderr);
        }
        assert!(
            out.stderr.contains("credentials for"),
            "{level}: {}",
            out.stderr
        );
    }
    response
}

/// Checks a successful exchange through `fake`: one `Registry`-keyed
/// credential for `registry`, the `username` given and the token the fake
/// issued last as password, cached for 80 % of the fake's hour (a second
/// may pass on the way), and neither token on stderr. Returns the password.
pub fn assert_exchanged(
    out: &Run,
    fake: &FakeService,
    image: &str,
    registry: &str,
    username: &str,
    token: &str,
) -> String {
    let response = out.response_for(image);
    assert_eq!(response["cacheKeyType"], "Registry");
    let auth = &response["auth"][registry];
    assert_eq!(auth["username"], username, "{response}");
    let password = auth["password"].as_str().unwrap().to_string();
    assert_eq!(Some(&password), fake.issued().last());
    assert!(
        ["48m0s", "47m59s"].contains(&response["cacheDuration"].as_str().unwrap()),
        "{response}"
    );
    out.assert_no_secrets(&[token, &password]);
    password
}

/// For each case, scripts the fake's answers, runs `run` (which passes
/// `--log-format json`), and checks the one error line: an upstream
/// failure recorded with the HTTP `status` the case names (a fact, not
/// words), its message and fix holding every needle, and no secret.
pub fn assert_failures(
    fake: &FakeService,
    run: impl Fn() -> Run,
    cases: Vec<(Vec<Response>, &str, Vec<&str>)>,
    secrets: &[&str],
) {
    for (responses, status, needles) in cases {
        fake.script(responses);
        let out = run();
        let line = out.failure_json();
        assert_eq!(line["kind"], "upstream", "{line}");
        assert_eq!(line["facts"]["status"], status, "{line}");
        assert!(line["facts"]["service"].is_string(), "{line}");
        let words = plugin::words(&line);
        for needle in &needles {
            assert!(words.contains(needle), "{needles:?}: {line}");
        }
        let issued = fake.issued();
        let mut all: Vec<&str> = secrets.to_vec();
        all.extend(issued.iter().map(String::as_str));
        out.assert_no_secrets(&all);
    }
}

/// `fake` issues a credential that has already expired: `run` (which
/// passes `--log-format json`) fails with an upstream error naming
/// `vendor` and the clock, and neither token reaches stderr.
pub fn assert_expired_refused(
    fake: &FakeService,
    vendor: &str,
    token: &str,
    run: impl Fn() -> Run,
) {
    fake.set_lifetime(-30);
    let out = run();
    let line = out.failure_json();
    assert_eq!(line["kind"], "upstream", "{line}");
    assert_eq!(line["facts"]["service"], vendor, "{line}");
    let words = plugin::words(&line);
    assert!(words.contains("expired at"), "{line}");
    assert!(words.contains("clock"), "{line}");
    out.assert_no_secrets(&[token, &fake.issued()[0]]);
}

/// Every hostile value of `key` is refused, as that annotation's fault,
/// before any request reaches the fake (or anywhere: the fake is the only
/// endpoint configured). `run` passes `--log-format json` ([`invoke_json`]).
pub fn assert_hostile_refused(fake: &FakeService, key: &str, run: impl Fn(&str) -> Run) {
    let before = fake.request_count();
    for value in HOSTILE {
        run(value).refused_for_annotation(key);
        assert_eq!(
            fake.request_count(),
            before,
            "{value:?} reached the network"
        );
    }
}

/// End to end: Debian's docker-registry behind a token service that
/// accepts exactly `username` with a token the fake minted for `subject`,
/// an image pushed to it, and both skopeo and containerd (`ctr images pull`,
/// the runtime a node uses) pulling with the credentials the plugin returns
/// for it. `run` gets the registry host and returns the plugin's response.
/// A wrong password and another username must fail with each client.
pub fn clients_pull(
    fake: &FakeService,
    username: &'static str,
    subject: &'static str,
    run: impl Fn(&str) -> Value,
) {
    let verify = fake.verifier();
    let registry = Registry::start_with_token_auth(move |user, password| {
        user == username && verify(password, subject)
    });
    let digest = registry.push_test_image("team/app", "v1");
    let host = registry.host().to_string();
    let image = format!("{host}/team/app:v1");
    let response = run(&host);
    let (user, password) = super::plugin::auth_entry(&response, host.as_str());
    assert_eq!(user, username);

    let containerd = Containerd::start();
    // Refused first, so nothing is in containerd's store yet.
    containerd.assert_pulls_only_with(&image, user, (password, &format!("{password}x")), &digest);

    registry
        .pull("team/app", "v1", user, password)
        .expect("skopeo pulls with the plugin's credentials");
    let accepted = registry.token_requests_accepted();
    let err = registry
        .pull("team/app", "v1", "someone-else", password)
        .expect_err("another username must not pull");
    assert!(err.contains("unauthorized"), "{err}");
    assert_eq!(registry.token_requests_accepted(), accepted);
}
