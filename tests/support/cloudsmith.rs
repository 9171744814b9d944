//! A fake of Cloudsmith's OpenID Connect endpoint, from Cloudsmith's docs
//! (help.cloudsmith.io "OpenID Connect", docs.cloudsmith.com "Openid
//! Create"): `POST /openid/<org>/` with the JSON body
//! `{"oidc_token", "service_slug"}` and no Authorization header, answered
//! `201 {"token": "<JWT>"}`, or with `{"detail": "..."}`: 401 "OIDC token
//! cannot be authenticated.", 422 for missing parameters, 404 for an
//! unknown organisation.

use serde_json::json;

use super::http_server::{Request, Response};
use super::token_service::{FakeService, State, Trust};

pub fn error(status: u16, detail: &str) -> Response {
    Response::json(status, json!({ "detail": detail }))
}

/// A Cloudsmith organisation `org` whose OIDC provider trusts `trust` for
/// the service account `service`.
pub fn start(trust: Trust, org: &'static str, service: &'static str) -> FakeService {
    FakeService::start("Cloudsmith", trust, move |state, req| {
        handle(state, org, service, req)
    })
}

fn handle(state: &State, org: &str, service: &str, req: &Request) -> Response {
    let path = format!("/openid/{org}/");
    state.check_line(req, "POST", &path, false);
    let Some(body) = state.check_json_keys(req, &["oidc_token", "service_slug"]) else {
        return error(422, "Missing or invalid parameters.");
    };
    if let Some(answer) = state.scripted() {
        return answer;
    }
    if req.path != path {
        return error(404, "Not found.");
    }
    let jwt = body["oidc_token"].as_str().unwrap_or_default();
    if body["service_slug"] != service || state.verify_subject_token(jwt).is_err() {
        return error(401, "OIDC token cannot be authenticated.");
    }
    Response::json(201, json!({ "token": state.mint(service) }))
}
