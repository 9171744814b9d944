//! Local fakes of Google STS and IAM Credentials for GKE Workload Identity,
//! from their documented wire formats, for the fault tests and the bench
//! (tests/gcp.rs keeps its own, fuller fake with both pool kinds and IAM
//! policies).
//!
//! Every request is checked field by field; a request the real service
//! would refuse is answered as it would be and recorded, and dropping a fake
//! with recorded violations fails the test.

#![allow(clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::http_server::{Request, Response, TestServer};
use super::token;

pub const GCP_PROJECT: &str = "my-project";
pub const GCP_CLUSTER: &str = "projects/my-project/locations/us-central1/clusters/prod";
pub const GCP_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// GKE Workload Identity's STS audience for the cluster.
pub fn gke_sts_audience() -> String {
    format!(
        "identitynamespace:{GCP_PROJECT}.svc.id.goog:https://container.googleapis.com/v1/{GCP_CLUSTER}"
    )
}

/// Google STS `POST /v1/token` for GKE Workload Identity: exactly the six
/// RFC 8693 form fields, no Authorization header, the pool's audience, a
/// subject token signed by the test cluster for `<project>.svc.id.goog`.
/// Scripted answers replace the next ones, after the request was checked.
pub struct FakeSts {
    pub server: TestServer,
    state: Arc<Mutex<StsState>>,
}

#[derive(Default)]
struct StsState {
    script: VecDeque<Response>,
    issued: Vec<String>,
    violations: Vec<String>,
}

impl FakeSts {
    pub fn start() -> FakeSts {
        let state = Arc::new(Mutex::new(StsState::default()));
        let handler = Arc::clone(&state);
        let server = TestServer::start(move |req| sts(&handler, req));
        FakeSts { server, state }
    }

    pub fn script(&self, responses: impl IntoIterator<Item = Response>) {
        self.state.lock().unwrap().script.extend(responses);
    }

    pub fn issued(&self) -> Vec<String> {
        self.state.lock().unwrap().issued.clone()
    }
}

impl Drop for FakeSts {
    fn drop(&mut self) {
        let violations = self.state.lock().unwrap().violations.clone();
        if !violations.is_empty() && !std::thread::panicking() {
            panic!("the plugin sent requests Google STS would refuse: {violations:#?}");
        }
    }
}

fn sts(state: &Mutex<StsState>, req: &Request) -> Response {
    let form = req.form();
    let keys: BTreeSet<&str> = form.keys().map(String::as_str).collect();
    let mut problems = Vec::new();
    if req.method != "POST" || req.path != "/v1/token" || !req.query.is_empty() {
        problems.push(format!("{} {}?{}", req.method, req.path, req.query));
    }
    if req.header("authorization").is_some() {
        problems.push("an Authorization header".to_string());
    }
    if req.header("content-type") != Some("application/x-www-form-urlencoded") {
        problems.push(format!("content type {:?}", req.header("content-type")));
    }
    let expected: BTreeSet<&str> = [
        "audience",
        "grant_type",
        "requested_token_type",
        "scope",
        "subject_token",
        "subject_token_type",
    ]
    .into();
    if keys != expected {
        problems.push(format!("fields {keys:?}"));
    } else {
        for (field, value) in [
            (
                "grant_type",
                "urn:ietf:params:oauth:grant-type:token-exchange",
            ),
            (
                "requested_token_type",
                "urn:ietf:params:oauth:token-type:access_token",
            ),
            ("subject_token_type", "urn:ietf:params:oauth:token-type:jwt"),
            ("scope", GCP_SCOPE),
            ("audience", &gke_sts_audience()),
        ] {
            if form[field] != value {
                problems.push(format!("{field}={:?}", form[field]));
            }
        }
        if let Err(e) = token::verify(
            &form["subject_token"],
            &format!("{GCP_PROJECT}.svc.id.goog"),
        ) {
            problems.push(format!("subject token: {e}"));
        }
    }
    let mut state = state.lock().unwrap();
    if !problems.is_empty() {
        state.violations.extend(problems);
        return Response::json(
            400,
            json!({"error": "invalid_request", "error_description": "Invalid request."}),
        );
    }
    if let Some(canned) = state.script.pop_front() {
        return canned;
    }
    let access_token = format!("ya29.d.federated-{}-{}", token::now(), state.issued.len());
    state.issued.push(access_token.clone());
    Response::json(
        200,
        json!({
            "access_token": access_token,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "token_type": "Bearer",
            "expires_in": 3599,
        }),
    )
}

/// IAM Credentials `POST /v1/projects/-/serviceAccounts/EMAIL:generateAccessToken`:
/// the bearer must be a federated token `sts` issued, the body JSON with a
/// non-empty `scope` list and a `lifetime` of at most `3600s`; any service
/// account may be impersonated.
pub struct FakeIam {
    pub server: TestServer,
    state: Arc<Mutex<IamState>>,
}

#[derive(Default)]
struct IamState {
    issued: Vec<String>,
    violations: Vec<String>,
}

impl FakeIam {
    pub fn start(sts: &FakeSts) -> FakeIam {
        let state = Arc::new(Mutex::new(IamState::default()));
        let (handler, federated) = (Arc::clone(&state), Arc::clone(&sts.state));
        let server = TestServer::start(move |req| iam(&handler, &federated, req));
        FakeIam { server, state }
    }

    pub fn issued(&self) -> Vec<String> {
        self.state.lock().unwrap().issued.clone()
    }
}

impl Drop for FakeIam {
    fn drop(&mut self) {
        let violations = self.state.lock().unwrap().violations.clone();
        if !violations.is_empty() && !std::thread::panicking() {
            panic!("the plugin sent requests IAM Credentials would refuse: {violations:#?}");
        }
    }
}

fn iam(state: &Mutex<IamState>, sts: &Mutex<StsState>, req: &Request) -> Response {
    let email = req
        .path
        .strip_prefix("/v1/projects/-/serviceAccounts/")
        .and_then(|rest| rest.strip_suffix(":generateAccessToken"))
        .filter(|email| email.ends_with(".iam.gserviceaccount.com"));
    let body: Option<Value> = serde_json::from_slice(&req.body).ok();
    let mut problems = Vec::new();
    if req.method != "POST" || email.is_none() || !req.query.is_empty() {
        problems.push(format!("{} {}?{}", req.method, req.path, req.query));
    }
    let bearer = req.bearer().unwrap_or_default();
    if !sts.lock().unwrap().issued.contains(&bearer) {
        problems.push("a bearer token STS did not issue".to_string());
    }
    if req.header("content-type") != Some("application/json") {
        problems.push(format!("content type {:?}", req.header("content-type")));
    }
    match &body {
        Some(body) => {
            let keys: BTreeSet<&str> = body
                .as_object()
                .map(|o| o.keys().map(String::as_str).collect())
                .unwrap_or_default();
            if keys != BTreeSet::from(["scope", "lifetime"]) || body["scope"] != json!([GCP_SCOPE])
            {
                problems.push(format!("body {body}"));
            }
            let lifetime = body["lifetime"]
                .as_str()
                .and_then(|l| l.strip_suffix('s'))
                .and_then(|l| l.parse::<i64>().ok());
            if !lifetime.is_some_and(|l| (1..=3600).contains(&l)) {
                problems.push(format!("lifetime {}", body["lifetime"]));
            }
        }
        None => problems.push("a body that is not JSON".to_string()),
    }
    let mut state = state.lock().unwrap();
    if !problems.is_empty() {
        state.violations.extend(problems);
        return Response::json(
            400,
            json!({"error": {"code": 400, "message": "Invalid request.", "status": "INVALID_ARGUMENT"}}),
        );
    }
    let access_token = format!(
        "ya29.c.impersonated-{}-{}",
        token::now(),
        state.issued.len()
    );
    state.issued.push(access_token.clone());
    let expire = wi_credential_provider::internal::duration::format_unix(token::now() + 3600);
    Response::json(
        200,
        json!({"accessToken": access_token, "expireTime": expire}),
    )
}
