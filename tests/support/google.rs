//! Local fakes of Google STS and IAM Credentials for GKE Workload Identity,
//! from their documented wire formats, for the fault tests and the bench
//! (tests/gcp.rs keeps its own, fuller fake with both pool kinds and IAM
//! policies).
//!
//! Every request is checked field by field; a request the real service
//! would refuse is answered as it would be and recorded, and dropping a fake
//! with recorded violations fails the test.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::http_server::{Fake, Ledger, Request, Response};
use super::token;

/// Every form field of a token exchange with Google STS, and no other.
pub const STS_FIELDS: [&str; 6] = [
    "audience",
    "grant_type",
    "requested_token_type",
    "scope",
    "subject_token",
    "subject_token_type",
];

/// The Google service account the tests impersonate.
pub const GSA: &str = "puller@my-project.iam.gserviceaccount.com";
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
    pub server: Fake,
}

impl FakeSts {
    pub fn start() -> FakeSts {
        FakeSts {
            server: Fake::start("Google STS", sts),
        }
    }

    pub fn script(&self, responses: impl IntoIterator<Item = Response>) {
        self.server.ledger().script(responses);
    }

    pub fn issued(&self) -> Vec<String> {
        self.server.ledger().issued()
    }
}

fn sts(ledger: &Ledger, req: &Request) -> Response {
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
    let expected: BTreeSet<&str> = STS_FIELDS.into();
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
    let refusal = || {
        Response::json(
            400,
            json!({"error": "invalid_request", "error_description": "Invalid request."}),
        )
    };
    ledger.answer(problems, refusal, |n| {
        let access_token = format!("ya29.d.federated-{}-{n}", token::now());
        let answer = json!({
            "access_token": access_token,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "token_type": "Bearer",
            "expires_in": 3599,
        });
        (access_token, Response::json(200, answer))
    })
}

/// IAM Credentials `POST /v1/projects/-/serviceAccounts/EMAIL:generateAccessToken`:
/// the bearer must be a federated token `sts` issued, the body JSON with a
/// non-empty `scope` list and a `lifetime` of at most `3600s`; any service
/// account may be impersonated.
pub struct FakeIam {
    pub server: Fake,
}

impl FakeIam {
    pub fn start(sts: &FakeSts) -> FakeIam {
        let federated = Arc::clone(sts.server.ledger());
        let server = Fake::start("IAM Credentials", move |ledger, req| {
            iam(ledger, &federated, req)
        });
        FakeIam { server }
    }

    pub fn issued(&self) -> Vec<String> {
        self.server.ledger().issued()
    }
}

fn iam(ledger: &Ledger, sts: &Ledger, req: &Request) -> Response {
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
    if !sts.has_issued(&bearer) {
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
    let refusal = || {
        Response::json(
            400,
            json!({"error": {"code": 400, "message": "Invalid request.", "status": "INVALID_ARGUMENT"}}),
        )
    };
    ledger.answer(problems, refusal, |n| {
        let access_token = format!("ya29.c.impersonated-{}-{n}", token::now());
        let expire = wicp_base::duration::format_unix(token::now() + 3600);
        let answer = json!({"accessToken": access_token, "expireTime": expire});
        (access_token, Response::json(200, answer))
    })
}
