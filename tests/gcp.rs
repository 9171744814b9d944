//! The gcp exchanger exec'd as the kubelet runs it, against a local fake of
//! Google STS and IAM Credentials, and end to end through a real registry.
//!
//! No emulator of Google STS or IAM Credentials exists, so `FakeGoogle`
//! implements the documented wire formats and checks what the real services
//! check: STS takes a form POST with exactly the six RFC 8693 fields, no
//! Authorization header, the pool's exact audience string, and a subject token
//! it verifies (signature against the test cluster's key, issuer, expiry,
//! audience); it answers with a federated token whose lifetime is capped by
//! the subject token's, as Google's is. IAM Credentials takes the federated
//! token as bearer and a JSON body, applies an IAM policy (who may impersonate
//! which service account) and answers with `accessToken` and an RFC 3339
//! `expireTime`. Errors use Google's two error shapes. Every test also
//! asserts the recorded requests field by field afterwards.
//!
//! End to end: the registry is 127.0.0.1:PORT, not a Google host, and the
//! plugin rightly refuses to send a Google token anywhere else. So the
//! kubelet asks for `us-docker.pkg.dev/my-project/team/app`, the plugin
//! answers for `us-docker.pkg.dev`, and the test then pulls the same
//! repository from the local registry with exactly the returned username and
//! password, as a kubelet would against Artifact Registry. The registry's
//! token service plays Artifact Registry's IAM check: it accepts only
//! username `oauth2accesstoken` with an unexpired access token the fake
//! minted for a principal or service account granted read access.

use crate::support;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use support::containerd::Containerd;
use support::google::{GCP_CLUSTER, GCP_PROJECT, GCP_SCOPE, GSA, STS_FIELDS};
use support::http_server::{Request, Response, TestServer};
use support::plugin::{self, exec, json_logs, request, run, words};
use support::registry::{Registry, TokenPost};
use support::token::{self, TokenSpec};
use wicp_base::duration::format_unix;

const PROVIDER: &str =
    "projects/123456789012/locations/global/workloadIdentityPools/k8s-pool/providers/prod-cluster";
const IMAGE: &str = "us-docker.pkg.dev/my-project/team/app";
const HOST: &str = "us-docker.pkg.dev";
const ANNOTATION: &str = "iam.gke.io/gcp-service-account";

/// The identity pool the fake STS serves.
#[derive(Clone)]
enum Pool {
    /// A pool provider trusting the test cluster's issuer; `allowed` is its
    /// allowedAudiences (empty: the provider's own name, with `//` or `https://`).
    Federation { allowed: Vec<String> },
    /// GKE's built-in pool for GCP_PROJECT, and the cluster GCP_CLUSTER.
    Gke,
}

impl Pool {
    fn sts_audience(&self) -> String {
        match self {
            Pool::Federation { .. } => format!("//iam.googleapis.com/{PROVIDER}"),
            Pool::Gke => format!(
                "identitynamespace:{GCP_PROJECT}.svc.id.goog:https://container.googleapis.com/v1/{GCP_CLUSTER}"
            ),
        }
    }

    fn token_audiences(&self) -> Vec<String> {
        match self {
            Pool::Federation { allowed } if !allowed.is_empty() => allowed.clone(),
            Pool::Federation { .. } => vec![
                format!("//iam.googleapis.com/{PROVIDER}"),
                format!("https://iam.googleapis.com/{PROVIDER}"),
            ],
            Pool::Gke => vec![format!("{GCP_PROJECT}.svc.id.goog")],
        }
    }

    /// The audience a test mints its token with.
    fn audience(&self) -> String {
        self.token_audiences()[0].clone()
    }

    /// The federated principal for a Kubernetes service account.
    fn principal(&self, namespace: &str, name: &str) -> String {
        match self {
            Pool::Federation { .. } => format!(
                "principal://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/k8s-pool/subject/system:serviceaccount:{namespace}:{name}"
            ),
            Pool::Gke => format!("serviceAccount:{GCP_PROJECT}.svc.id.goog[{namespace}/{name}]"),
        }
    }

    /// The plugin flags that select this pool.
    fn flags(&self) -> Vec<String> {
        match self {
            Pool::Federation { .. } => {
                vec!["--gcp-workload-identity-provider".into(), PROVIDER.into()]
            }
            Pool::Gke => vec![
                "--gcp-project-id".into(),
                GCP_PROJECT.into(),
                "--gcp-cluster".into(),
                GCP_CLUSTER.into(),
            ],
        }
    }
}

#[derive(Default)]
struct State {
    /// Federated tokens issued: token -> (principal, expiry).
    federated: HashMap<String, (String, i64)>,
    /// Service account tokens issued: token -> (email, expiry).
    service_account_tokens: HashMap<String, (String, i64)>,
    /// Who may impersonate which service account (roles/iam.workloadIdentityUser).
    impersonators: HashMap<String, HashSet<String>>,
    /// Principals and service accounts with roles/artifactregistry.reader.
    readers: HashSet<String>,
    /// Canned answers served before the real logic, in order.
    sts_script: VecDeque<Response>,
    iam_script: VecDeque<Response>,
}

struct FakeGoogle {
    pool: Pool,
    state: Arc<Mutex<State>>,
    sts: TestServer,
    iam: TestServer,
}

static SERIAL: AtomicU64 = AtomicU64::new(1);

fn mint(prefix: &str) -> String {
    let n = SERIAL.fetch_add(1, Ordering::SeqCst);
    format!(
        "{prefix}{n}-{}-{}",
        std::process::id(),
        token::now().wrapping_mul(2654435761)
    )
}

fn oauth_error(code: &str, description: &str) -> Response {
    Response::json(
        400,
        json!({"error": code, "error_description": description}),
    )
}

fn google_error(status: u16, code: &str, message: &str) -> Response {
    Response::json(
        status,
        json!({"error": {"code": status, "message": message, "status": code}}),
    )
}

impl FakeGoogle {
    fn start(pool: Pool) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let sts = {
            let (state, pool) = (Arc::clone(&state), pool.clone());
            TestServer::start(move |req| sts_handler(&pool, &state, req))
        };
        let iam = {
            let state = Arc::clone(&state);
            TestServer::start(move |req| iam_handler(&state, req))
        };
        FakeGoogle {
            pool,
            state,
            sts,
            iam,
        }
    }

    /// `--provider gcp`, the pool's flags and both endpoints pointed here.
    fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--provider".to_string(),
            "gcp".into(),
            "--gcp-sts-endpoint".into(),
            self.sts.url(),
            "--gcp-iamcredentials-endpoint".into(),
            self.iam.url(),
        ];
        args.extend(self.pool.flags());
        args
    }

    fn allow_impersonation(&self, email: &str, principal: &str) {
        let mut state = self.state.lock().unwrap();
        state
            .impersonators
            .entry(email.to_string())
            .or_default()
            .insert(principal.to_string());
    }

    fn grant_registry_read(&self, who: &str) {
        self.state.lock().unwrap().readers.insert(who.to_string());
    }

    fn script_sts(&self, response: Response) {
        self.state.lock().unwrap().sts_script.push_back(response);
    }

    fn script_iam(&self, response: Response) {
        self.state.lock().unwrap().iam_script.push_back(response);
    }

    /// Artifact Registry's check, for the registry's token service.
    fn registry_check(&self) -> impl Fn(&str, &str) -> bool + Send + Sync + 'static {
        let state = Arc::clone(&self.state);
        move |username, password| {
            let state = state.lock().unwrap();
            let who = state
                .federated
                .get(password)
                .or_else(|| state.service_account_tokens.get(password));
            username == "oauth2accesstoken"
                && who.is_some_and(|(who, exp)| *exp > token::now() && state.readers.contains(who))
        }
    }

    fn federated_tokens(&self) -> Vec<String> {
        self.state
            .lock()
            .unwrap()
            .federated
            .keys()
            .cloned()
            .collect()
    }

    fn issued_secrets(&self) -> Vec<String> {
        let state = self.state.lock().unwrap();
        state
            .federated
            .keys()
            .chain(state.service_account_tokens.keys())
            .cloned()
            .collect()
    }
}

/// Google STS `POST /v1/token`, as documented for token exchange.
fn sts_handler(pool: &Pool, state: &Mutex<State>, req: &Request) -> Response {
    if req.method != "POST" || req.path != "/v1/token" {
        return google_error(404, "NOT_FOUND", "The requested URL was not found.");
    }
    if let Some(canned) = state.lock().unwrap().sts_script.pop_front() {
        return canned;
    }
    if req.header("authorization").is_some() {
        return google_error(
            401,
            "UNAUTHENTICATED",
            "Request had invalid authentication credentials.",
        );
    }
    if req.header("content-type") != Some("application/x-www-form-urlencoded") {
        return oauth_error("invalid_request", "Unsupported content type.");
    }
    let form = req.form();
    let keys: BTreeSet<&str> = form.keys().map(String::as_str).collect();
    let expected: BTreeSet<&str> = STS_FIELDS.into();
    if keys != expected {
        return oauth_error("invalid_request", &format!("Unexpected fields: {keys:?}"));
    }
    if form["grant_type"] != "urn:ietf:params:oauth:grant-type:token-exchange" {
        return oauth_error("unsupported_grant_type", "Unsupported grant type.");
    }
    if form["requested_token_type"] != "urn:ietf:params:oauth:token-type:access_token"
        || form["subject_token_type"] != "urn:ietf:params:oauth:token-type:jwt"
    {
        return oauth_error("invalid_request", "Invalid value for token type.");
    }
    if form["scope"] != GCP_SCOPE {
        return oauth_error("invalid_scope", "Invalid scope.");
    }
    if form["audience"] != pool.sts_audience() {
        return oauth_error(
            "invalid_target",
            "The target service indicated by the \"audience\" parameters is invalid. This might either be because the pool or provider is disabled or deleted or because it doesn't exist.",
        );
    }
    let subject = &form["subject_token"];
    let claims = match pool
        .token_audiences()
        .iter()
        .map(|aud| token::verify(subject, aud))
        .find(Result::is_ok)
    {
        Some(Ok(claims)) => claims,
        _ => {
            // Which check failed, with the wording of Google's refusals.
            let any = token::verify(subject, "none").err().unwrap_or_default();
            let description = if any.contains("InvalidSignature") {
                "Invalid JWT signature.".to_string()
            } else if any.contains("ExpiredSignature") {
                "The ID Token is expired.".to_string()
            } else {
                format!(
                    "The audience in ID Token does not match the expected audience {}.",
                    pool.token_audiences().join(", ")
                )
            };
            return oauth_error("invalid_grant", &description);
        }
    };
    let sub = claims["sub"].as_str().unwrap();
    let (namespace, name) = sub
        .strip_prefix("system:serviceaccount:")
        .and_then(|s| s.split_once(':'))
        .unwrap();
    let now = token::now();
    // Federated tokens never outlive the subject token.
    let expires_in = (claims["exp"].as_i64().unwrap() - now).min(3600);
    let access_token = mint("ya29.d.federated-");
    state.lock().unwrap().federated.insert(
        access_token.clone(),
        (pool.principal(namespace, name), now + expires_in),
    );
    Response::json(
        200,
        json!({
            "access_token": access_token,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "token_type": "Bearer",
            "expires_in": expires_in,
        }),
    )
}

/// IAM Credentials `POST /v1/projects/-/serviceAccounts/EMAIL:generateAccessToken`.
fn iam_handler(state: &Mutex<State>, req: &Request) -> Response {
    let email = req
        .path
        .strip_prefix("/v1/projects/-/serviceAccounts/")
        .and_then(|rest| rest.strip_suffix(":generateAccessToken"));
    let (Some(email), "POST") = (email, req.method.as_str()) else {
        return google_error(404, "NOT_FOUND", "The requested URL was not found.");
    };
    let mut state = state.lock().unwrap();
    if let Some(canned) = state.iam_script.pop_front() {
        return canned;
    }
    let now = token::now();
    let principal = match req.bearer().and_then(|t| state.federated.get(&t).cloned()) {
        Some((principal, exp)) if exp > now => principal,
        _ => {
            return google_error(
                401,
                "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token.",
            );
        }
    };
    if req.header("content-type") != Some("application/json") {
        return google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.");
    }
    let body: Value = match serde_json::from_slice(&req.body) {
        Ok(v) => v,
        Err(_) => {
            return google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received.");
        }
    };
    let scopes_ok = body["scope"]
        .as_array()
        .is_some_and(|s| !s.is_empty() && s.iter().all(Value::is_string));
    let lifetime = body["lifetime"]
        .as_str()
        .and_then(|l| l.strip_suffix('s'))
        .and_then(|l| l.parse::<i64>().ok());
    let Some(lifetime) = lifetime.filter(|_| scopes_ok) else {
        return google_error(
            400,
            "INVALID_ARGUMENT",
            "Invalid value at 'scope' or 'lifetime'.",
        );
    };
    if lifetime > 3600 {
        return google_error(
            400,
            "INVALID_ARGUMENT",
            "The lifetime exceeds the maximum allowed lifetime of 1 hour.",
        );
    }
    let allowed = state
        .impersonators
        .get(email)
        .is_some_and(|who| who.contains(&principal));
    if !allowed {
        return Response::json(
            403,
            json!({"error": {
                "code": 403,
                "message": "Permission 'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist).",
                "status": "PERMISSION_DENIED",
                "details": [{
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "IAM_PERMISSION_DENIED",
                    "domain": "iam.googleapis.com",
                    "metadata": {"permission": "iam.serviceAccounts.getAccessToken"},
                }],
            }}),
        );
    }
    let access_token = mint("ya29.c.serviceaccount-");
    state
        .service_account_tokens
        .insert(access_token.clone(), (email.to_string(), now + lifetime));
    Response::json(
        200,
        json!({"accessToken": access_token, "expireTime": format_unix(now + lifetime)}),
    )
}

/// The one STS request, checked field by field and header by header.
fn assert_sts_request(req: &Request, audience: &str, subject_token: &str) {
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/v1/token");
    assert_eq!(req.query, "");
    assert_eq!(
        req.header("content-type"),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(
        req.header("authorization"),
        None,
        "STS must get no Authorization header"
    );
    let form = req.form();
    let expected: std::collections::BTreeMap<String, String> = [
        ("audience", audience),
        (
            "grant_type",
            "urn:ietf:params:oauth:grant-type:token-exchange",
        ),
        (
            "requested_token_type",
            "urn:ietf:params:oauth:token-type:access_token",
        ),
        ("scope", GCP_SCOPE),
        ("subject_token", subject_token),
        ("subject_token_type", "urn:ietf:params:oauth:token-type:jwt"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(form, expected);
}

/// The one generateAccessToken request.
fn assert_iam_request(req: &Request, email: &str, federated: &str, lifetime: &str) {
    assert_eq!(req.method, "POST");
    assert_eq!(
        req.path,
        format!("/v1/projects/-/serviceAccounts/{email}:generateAccessToken")
    );
    assert_eq!(req.query, "");
    assert_eq!(req.header("content-type"), Some("application/json"));
    assert_eq!(req.bearer().as_deref(), Some(federated));
    assert_eq!(
        req.json(),
        json!({"scope": [GCP_SCOPE], "lifetime": lifetime}),
        "generateAccessToken body"
    );
}

/// The whole path for one pool, with or without impersonation: plugin,
/// fake Google, real registry, skopeo and containerd.
fn end_to_end(pool: Pool, impersonate: bool) {
    let google = FakeGoogle::start(pool.clone());
    let principal = pool.principal("team", "puller");
    if impersonate {
        google.allow_impersonation(GSA, &principal);
        google.grant_registry_read(GSA);
    } else {
        google.grant_registry_read(&principal);
    }
    // Artifact Registry's token service has no OAuth2 POST: containerd's POST gets 404
    // (TokenPost::Refuse) and it logs in with the GET.
    let registry =
        Registry::start_with_token_service(TokenPost::Refuse(404), google.registry_check());
    let digest = registry.push_test_image("my-project/team/app", "v1");

    let sa_token = TokenSpec::new("team", "puller", &pool.audience()).mint();
    let annotations: &[(&str, &str)] = if impersonate {
        &[(ANNOTATION, GSA)]
    } else {
        &[]
    };
    let mut args = google.args();
    args.extend(["--log-level".into(), "debug".into()]);
    let out = exec(&args, &request(IMAGE, Some(&sa_token), annotations));
    let response = out.response();
    assert_eq!(response["cacheKeyType"], "Registry");
    let auth = response["auth"].as_object().unwrap();
    assert_eq!(auth.keys().collect::<Vec<_>>(), [HOST]);
    let username = auth[HOST]["username"].as_str().unwrap();
    let password = auth[HOST]["password"].as_str().unwrap();
    assert_eq!(username, "oauth2accesstoken");

    // The wire, exactly.
    let sts = google.sts.requests();
    assert_eq!(sts.len(), 1);
    assert_sts_request(&sts[0], &pool.sts_audience(), &sa_token);
    let federated = google.federated_tokens();
    assert_eq!(federated.len(), 1);
    let iam = google.iam.requests();
    if impersonate {
        assert_eq!(iam.len(), 1);
        assert_iam_request(&iam[0], GSA, &federated[0], "3600s");
        assert!(password.starts_with("ya29.c.serviceaccount-"), "{password}");
    } else {
        assert!(iam.is_empty(), "no impersonation without the annotation");
        assert_eq!(password, federated[0]);
    }

    // The plan names every input, and no secret reaches stderr.
    let plan = out
        .stderr
        .lines()
        .find(|l| l.contains("plan: Plan"))
        .unwrap_or_else(|| panic!("no plan in debug log: {}", out.stderr));
    for needle in [
        format!(
            "(\"sts_audience\", \"{}\")",
            pool.sts_audience().replace('"', "\\\"")
        ),
        format!(
            "(\"service_account\", \"{}\")",
            if impersonate { GSA } else { "none" }
        ),
        "(\"token_lifetime\", \"3600s\")".to_string(),
        format!("(\"sts_endpoint\", \"{}\")", google.sts.url()),
        format!("(\"iamcredentials_endpoint\", \"{}\")", google.iam.url()),
        "(\"registry_key\", \"gcp\")".to_string(),
    ] {
        assert!(plan.contains(&needle), "{needle} missing from {plan}");
    }
    for secret in google.issued_secrets().iter().chain([&sa_token]) {
        assert!(
            !out.stderr.contains(secret.as_str()),
            "secret on stderr: {}",
            out.stderr
        );
    }

    // A real client pulls with exactly what the kubelet would use.
    registry
        .pull("my-project/team/app", "v1", username, password)
        .expect("skopeo pulls with the plugin's credentials");
    if impersonate {
        // Only the service account may read: the federated token alone may not.
        let err = registry
            .pull(
                "my-project/team/app",
                "v1",
                "oauth2accesstoken",
                &federated[0],
            )
            .expect_err("the federated principal has no registry access");
        assert!(err.contains("unauthorized"), "{err}");
    }
    let err = registry
        .pull("my-project/team/app", "v1", "_token", password)
        .expect_err("the registry insists on oauth2accesstoken");
    assert!(err.contains("unauthorized"), "{err}");

    // containerd, the runtime on the node: the service account token in place of the access
    // token first (while its store is empty), then exactly the plugin's credentials.
    let containerd = Containerd::start();
    let image = format!("{}/my-project/team/app:v1", registry.host());
    let err = containerd
        .pull(&image, username, &sa_token)
        .expect_err("the service account token is not a Google access token");
    assert!(err.contains("401 Unauthorized"), "{err}");
    let before = registry.token_calls().len();
    let pulled = containerd
        .pull(&image, username, password)
        .unwrap_or_else(|e| panic!("containerd refused the plugin's credentials:\n{e}"));
    assert_eq!(pulled, digest);
    let calls = registry.token_calls();
    let logins = &calls[before..];
    assert!(
        !logins.is_empty()
            && logins
                .chunks(2)
                .all(|pair| pair == [("POST".to_string(), 404), ("GET".to_string(), 200)]),
        "each login: POST refused 404, then GET granted: {calls:?}"
    );
}

#[test]
fn federation_direct_access_pulls_end_to_end() {
    end_to_end(Pool::Federation { allowed: vec![] }, false);
}

#[test]
fn federation_with_impersonation_pulls_end_to_end() {
    end_to_end(Pool::Federation { allowed: vec![] }, true);
}

#[test]
fn gke_direct_access_pulls_end_to_end() {
    end_to_end(Pool::Gke, false);
}

#[test]
fn gke_with_impersonation_pulls_end_to_end() {
    end_to_end(Pool::Gke, true);
}

#[test]
fn federation_accepts_both_audience_forms_and_a_configured_one() {
    let google = FakeGoogle::start(Pool::Federation { allowed: vec![] });
    for aud in [
        format!("//iam.googleapis.com/{PROVIDER}"),
        format!("https://iam.googleapis.com/{PROVIDER}"),
    ] {
        let t = TokenSpec::new("team", "puller", &aud).mint();
        exec(&google.args(), &request(IMAGE, Some(&t), &[])).response();
    }
    // A provider with allowedAudiences: --audience names the one requested.
    let custom = "https://cluster.example/gcp";
    let google = FakeGoogle::start(Pool::Federation {
        allowed: vec![custom.into()],
    });
    let t = TokenSpec::new("team", "puller", custom).mint();
    let mut args = google.args();
    args.extend(["--audience".into(), custom.into()]);
    exec(&args, &request(IMAGE, Some(&t), &[])).response();
    assert_sts_request(
        &google.sts.requests()[0],
        &format!("//iam.googleapis.com/{PROVIDER}"),
        &t,
    );
    // Without --audience the same token is refused before any network call.
    let mut json = google.args();
    json.extend(["--log-format", "json"].map(String::from));
    let line = exec(&json, &request(IMAGE, Some(&t), &[])).refused("token", &[("claim", "aud")]);
    assert!(
        plugin::words(&line).contains(&format!("//iam.googleapis.com/{PROVIDER}")),
        "{line}"
    );
    assert_eq!(google.sts.request_count(), 1);
}

#[test]
fn gke_token_audience_is_the_pool() {
    let google = FakeGoogle::start(Pool::Gke);
    let t = TokenSpec::new("team", "puller", "sts.googleapis.com").mint();
    let line = exec(&json_logs(&google.args()), &request(IMAGE, Some(&t), &[]))
        .refused("token", &[("claim", "aud")]);
    assert!(
        words(&line).contains("serviceAccountTokenAudience: my-project.svc.id.goog"),
        "{line}"
    );
    assert_eq!(google.sts.request_count(), 0);
}

#[test]
fn cache_duration_follows_the_earliest_expiry() {
    // Direct access: the federated token dies with a 10-minute subject token.
    let google = FakeGoogle::start(Pool::Gke);
    let mut spec = TokenSpec::new("team", "puller", &Pool::Gke.audience());
    spec.expires_in = 600;
    let out = exec(&google.args(), &request(IMAGE, Some(&spec.mint()), &[]));
    let d = out.cache_seconds();
    assert!((470..=480).contains(&d), "{d}");

    // Impersonation: an hour-long service account token, but a 30-minute
    // subject token bounds it.
    google.allow_impersonation(GSA, &Pool::Gke.principal("team", "puller"));
    spec.expires_in = 1800;
    let out = exec(
        &google.args(),
        &request(IMAGE, Some(&spec.mint()), &[(ANNOTATION, GSA)]),
    );
    let d = out.cache_seconds();
    assert!((1430..=1440).contains(&d), "{d}");

    // And the other way round: a 2-hour subject token, a 20-minute lifetime.
    spec.expires_in = 7200;
    let mut args = google.args();
    args.extend(["--gcp-token-lifetime".into(), "20m".into()]);
    let out = exec(
        &args,
        &request(IMAGE, Some(&spec.mint()), &[(ANNOTATION, GSA)]),
    );
    let d = out.cache_seconds();
    assert!((950..=960).contains(&d), "{d}");
    let iam = google.iam.requests();
    assert_eq!(iam.last().unwrap().json()["lifetime"], "1200s");
}

#[test]
fn sts_refusals_fail_with_the_code_and_a_fix() {
    let google = FakeGoogle::start(Pool::Federation { allowed: vec![] });
    let aud = Pool::Federation { allowed: vec![] }.audience();
    let json = |mut args: Vec<String>| {
        args.extend(["--log-format".to_string(), "json".to_string()]);
        args
    };
    // Who refused and how, as facts; the code and the fix, as words.
    let refused = |line: &Value, status: &str| {
        assert_eq!(line["kind"], "upstream", "{line}");
        assert_eq!(line["facts"]["service"], "Google STS", "{line}");
        assert_eq!(line["facts"]["status"], status, "{line}");
        (
            line["message"].as_str().unwrap_or_default().to_string(),
            line["fix"].as_str().unwrap_or_default().to_string(),
        )
    };

    // A token the provider cannot verify.
    let forged = TokenSpec::new("team", "puller", &aud).mint_with_wrong_key();
    let out = exec(&json(google.args()), &request(IMAGE, Some(&forged), &[]));
    let line = out.failure_json();
    let (message, fix) = refused(&line, "400");
    assert_eq!(line["service_account"], "team/puller", "{line}");
    assert_eq!(line["registry"], "us-docker.pkg.dev", "{line}");
    assert!(
        message.contains("invalid_grant: \"Invalid JWT signature.\""),
        "{line}"
    );
    assert!(
        fix.starts_with("the pool provider did not accept the token"),
        "{line}"
    );
    assert!(fix.contains("https://oidc.cluster.test"), "{line}");
    assert!(!out.stderr.contains(&forged));
    assert_eq!(google.sts.request_count(), 1, "a refusal is not retried");

    // A provider that does not exist: invalid_target.
    let other =
        "projects/123456789012/locations/global/workloadIdentityPools/k8s-pool/providers/gone";
    let mut args = google.args();
    let at = args.iter().position(|a| a == PROVIDER).unwrap();
    args[at] = other.into();
    let t = TokenSpec::new("team", "puller", &format!("//iam.googleapis.com/{other}")).mint();
    let line = exec(&json(args), &request(IMAGE, Some(&t), &[])).failure_json();
    let (message, fix) = refused(&line, "400");
    assert!(message.contains("invalid_target"), "{line}");
    assert!(
        fix.starts_with("no enabled pool provider has this name"),
        "{line}"
    );
}

#[test]
fn transient_failures_are_retried_then_reported() {
    let google = FakeGoogle::start(Pool::Gke);
    let t = TokenSpec::new("team", "puller", &Pool::Gke.audience()).mint();
    let req = request(IMAGE, Some(&t), &[]);

    // 429 with Retry-After, then success.
    google.script_sts(
        google_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded.").with_header("Retry-After", "0"),
    );
    exec(&google.args(), &req).response();
    assert_eq!(google.sts.request_count(), 2);

    // 500 on every attempt: reported after the retries, with the status.
    for _ in 0..4 {
        google.script_sts(google_error(500, "INTERNAL", "Internal error encountered."));
    }
    let mut json = google.args();
    json.extend(["--log-format".to_string(), "json".to_string()]);
    let refusal = exec(&json, &req).failure_json();
    assert_eq!(refusal["facts"]["service"], "Google STS", "{refusal}");
    assert_eq!(refusal["facts"]["status"], "500", "{refusal}");
    let line = plugin::words(&refusal);
    support::assert_says(
        &line,
        &[
            "INTERNAL: \"Internal error encountered.\"",
            "throttling or unavailable",
        ],
    );
    assert_eq!(google.sts.request_count(), 6);
}

#[test]
fn broken_successes_are_refused() {
    let google = FakeGoogle::start(Pool::Gke);
    let t = TokenSpec::new("team", "puller", &Pool::Gke.audience()).mint();
    let req = request(IMAGE, Some(&t), &[]);
    let cases = [
        (
            Response::text(200, "{\"access_token\": \"ya29.cut"),
            "with a body that is not a JSON token response",
        ),
        (
            Response::json(
                200,
                json!({"access_token": "ya29.zero", "token_type": "Bearer", "expires_in": 0}),
            ),
            "with no positive expires_in",
        ),
        (
            Response::json(200, json!({"token_type": "Bearer", "expires_in": 3600})),
            "with no access_token",
        ),
    ];
    for (canned, needle) in cases {
        google.script_sts(canned);
        let out = exec(&json_logs(&google.args()), &req);
        let line = out.refused("upstream", &[("service", "Google STS"), ("status", "200")]);
        assert!(words(&line).contains(needle), "{line}");
        assert!(!out.stderr.contains("ya29."), "{}", out.stderr);
    }

    // The same from IAM Credentials.
    google.allow_impersonation(GSA, &Pool::Gke.principal("team", "puller"));
    let req = request(IMAGE, Some(&t), &[(ANNOTATION, GSA)]);
    google.script_iam(Response::json(
        200,
        json!({"accessToken": "ya29.c.x", "expireTime": "in an hour"}),
    ));
    let iam = [("service", "Google IAM Credentials"), ("status", "200")];
    let line = exec(&json_logs(&google.args()), &req).refused("upstream", &iam);
    assert!(
        words(&line).contains("an expireTime \"in an hour\" that is not an RFC 3339 timestamp"),
        "{line}"
    );
    google.script_iam(Response::text(200, "<html>proxy login</html>"));
    let line = exec(&json_logs(&google.args()), &req).refused("upstream", &iam);
    assert!(
        words(&line).contains("a body that is not a JSON token response"),
        "{line}"
    );
}

#[test]
fn impersonation_refusals_name_the_binding_to_add() {
    let pool = Pool::Federation { allowed: vec![] };
    let google = FakeGoogle::start(pool.clone());
    let t = TokenSpec::new("team", "puller", &pool.audience()).mint();
    let mut json = google.args();
    json.extend(["--log-format".to_string(), "json".to_string()]);
    let out = exec(&json, &request(IMAGE, Some(&t), &[(ANNOTATION, GSA)]));
    let refusal = out.failure_json();
    assert_eq!(refusal["kind"], "upstream", "{refusal}");
    assert_eq!(
        refusal["facts"]["service"], "Google IAM Credentials",
        "{refusal}"
    );
    assert_eq!(refusal["facts"]["status"], "403", "{refusal}");
    let line = plugin::words(&refusal);
    support::assert_says(
        &line,
        &[
            &format!("IAM Credentials refused to impersonate {GSA}"),
            "PERMISSION_DENIED: \"Permission 'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist).\"",
        ],
    );
    // The fix names the exact member the fake's policy needs.
    let member = pool.principal("team", "puller");
    assert!(refusal["fix"].as_str().unwrap_or_default().contains(&format!(
        "gcloud iam service-accounts add-iam-policy-binding {GSA} --role roles/iam.workloadIdentityUser --member '{member}'"
    )), "{line}");
    assert_eq!(google.iam.request_count(), 1, "403 is not retried");
    for secret in google.issued_secrets() {
        assert!(!out.stderr.contains(&secret), "{}", out.stderr);
    }
    // Following the fix works.
    google.allow_impersonation(GSA, &member);
    exec(
        &google.args(),
        &request(IMAGE, Some(&t), &[(ANNOTATION, GSA)]),
    )
    .response();

    // Above an hour, the default organization policy refuses the lifetime.
    let mut args = json.clone();
    args.extend(["--gcp-token-lifetime".into(), "2h".into()]);
    let refusal = exec(&args, &request(IMAGE, Some(&t), &[(ANNOTATION, GSA)])).failure_json();
    assert_eq!(refusal["facts"]["status"], "400", "{refusal}");
    let line = plugin::words(&refusal);
    support::assert_says(
        &line,
        &[
            "INVALID_ARGUMENT",
            "allowServiceAccountCredentialLifetimeExtension",
        ],
    );
}

#[test]
fn a_hanging_endpoint_meets_the_deadline() {
    let google = FakeGoogle::start(Pool::Gke);
    google.script_sts(Response::hang());
    let t = TokenSpec::new("team", "puller", &Pool::Gke.audience()).mint();
    let args = json_logs(&[google.args(), plugin::flags(&["--timeout", "2s"], &[])].concat());
    let started = std::time::Instant::now();
    let line = exec(&args, &request(IMAGE, Some(&t), &[]))
        .refused("network", &[("service", "Google STS")]);
    assert!(
        words(&line).contains("the deadline of 2s ran out"),
        "{line}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn registry_hosts_and_lookalikes() {
    let google = FakeGoogle::start(Pool::Gke);
    let t = TokenSpec::new("team", "puller", &Pool::Gke.audience()).mint();
    for host in [
        "gcr.io",
        "us.gcr.io",
        "eu.gcr.io",
        "asia.gcr.io",
        "europe-west1-docker.pkg.dev",
        "container.cloud.google.com",
        // Round 5, item 14: every host auth-provider-gcp serves
        // (`*.gcr.io`, `*.pkg.dev`).
        "marketplace.gcr.io",
        "mirror.gcr.io",
    ] {
        let out = exec(
            &google.args(),
            &request(&format!("{host}/p/app:1"), Some(&t), &[]),
        );
        let response = out.response();
        assert_eq!(
            response["auth"]
                .as_object()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            [host]
        );
    }
    let before = google.sts.request_count();
    for host in [
        "gcr.io.evil.com",
        "evilgcr.io",
        "a.mirror.gcr.io",
        "us-docker.pkg.dev.evil.com",
        "evil-docker.pkg.dev.attacker.io",
        "gcr.io:5000",
        "127.0.0.1:5000",
    ] {
        let mut args = google.args();
        args.extend(["--log-format", "json"].map(String::from));
        exec(&args, &request(&format!("{host}/p/app"), Some(&t), &[])).refused_registry(host);
    }
    assert_eq!(
        google.sts.request_count(),
        before,
        "no token sent for a lookalike"
    );

    // `auto` routes Google hosts to gcp.
    let mut args = google.args();
    args[1] = "auto".into();
    exec(&args, &request(IMAGE, Some(&t), &[])).response();
}

#[test]
fn configuration_errors_name_the_flags() {
    let t = TokenSpec::new("team", "puller", &Pool::Gke.audience()).mint();
    let req = request(IMAGE, Some(&t), &[]);
    let config = |args: &[String], flag: &str| {
        words(&exec(&json_logs(args), &req).refused("config", &[("flag", flag)]))
    };
    let none = config(
        &plugin::flags(&["--provider", "gcp"], &[]),
        "--gcp-workload-identity-provider",
    );
    assert!(none.contains("--gcp-cluster"), "{none}");

    let both: Vec<String> = [
        "--provider",
        "gcp",
        "--gcp-workload-identity-provider",
        PROVIDER,
        "--gcp-project-id",
        GCP_PROJECT,
        "--gcp-cluster",
        GCP_CLUSTER,
    ]
    .map(String::from)
    .into();
    let line = config(&both, "--gcp-workload-identity-provider");
    assert!(line.contains("are both set"), "{line}");

    let half: Vec<String> = ["--provider", "gcp", "--gcp-project-id", GCP_PROJECT]
        .map(String::from)
        .into();
    config(&half, "--gcp-project-id");

    let prefixed: Vec<String> = [
        "--provider",
        "gcp",
        "--gcp-workload-identity-provider",
        &format!("//iam.googleapis.com/{PROVIDER}"),
    ]
    .map(String::from)
    .into();
    let line = config(&prefixed, "--gcp-workload-identity-provider");
    assert!(
        line.contains("the flag takes the resource name alone"),
        "{line}"
    );

    // The same through the environment, as the kubelet's `env` sets it.
    run(
        &["--provider", "gcp", "--log-format", "json"],
        &[("WICP_GCP_CLUSTER", "prod")],
        req.as_bytes(),
    )
    .refused("config", &[("flag", "--gcp-cluster")]);

    // An unusable lifetime is a usage error.
    let out = run(
        &["--provider", "gcp", "--gcp-token-lifetime", "13h"],
        &[],
        req.as_bytes(),
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}

#[test]
fn a_malformed_annotation_fails_before_the_network() {
    let google = FakeGoogle::start(Pool::Gke);
    let t = TokenSpec::new("team", "puller", &Pool::Gke.audience()).mint();
    for bad in [
        "puller",
        "puller@gmail.com",
        "a@b.iam.gserviceaccount.com/../../x",
    ] {
        let mut json = google.args();
        json.extend(["--log-format", "json"].map(String::from));
        let line = exec(&json, &request(IMAGE, Some(&t), &[(ANNOTATION, bad)]))
            .refused_for_annotation(ANNOTATION);
        assert!(
            line["fix"]
                .as_str()
                .unwrap()
                .starts_with("set iam.gke.io/gcp-service-account to"),
            "{line}"
        );
    }
    assert_eq!(google.sts.request_count(), 0);
    assert_eq!(google.iam.request_count(), 0);
}

/// An Artifact Registry remote repository as a registry mirror: the
/// kubelet asks about `docker.io/library/nginx`; with `--registry-mirror
/// docker.io=us-docker.pkg.dev/my-project/dockerhub-remote` the Google
/// exchange runs as for any Artifact Registry image and the access token
/// is keyed `docker.io` only.
#[test]
fn an_artifact_registry_remote_repository_serves_docker_io_keyed_by_docker_io() {
    let google = FakeGoogle::start(Pool::Federation { allowed: vec![] });
    let t = TokenSpec::new(
        "team",
        "puller",
        &format!("//iam.googleapis.com/{PROVIDER}"),
    )
    .mint();
    let mut args = google.args();
    args.extend([
        "--registry-mirror".into(),
        "docker.io=us-docker.pkg.dev/my-project/dockerhub-remote".into(),
    ]);
    let response = exec(&args, &request("docker.io/library/nginx", Some(&t), &[])).response();
    let auth = response["auth"].as_object().unwrap();
    assert_eq!(auth.keys().collect::<Vec<_>>(), ["docker.io"], "{response}");
    assert_eq!(auth["docker.io"]["username"], "oauth2accesstoken");
    assert_eq!(google.sts.request_count(), 1);
}
