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

mod pulls;
mod refusals;

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
