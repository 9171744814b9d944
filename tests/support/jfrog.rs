//! A fake of JFrog Platform's OIDC token exchange, from JFrog's REST API
//! reference ("OIDC Token Exchange") and jfrog-client-go's
//! `CreateOidcTokenParams` / `OidcTokenResponseData`:
//! `POST /access/api/v1/oidc/token` with a JSON body (`grant_type`,
//! `subject_token_type`, `subject_token`, `provider_name`, optional
//! `project_key` and `identity_mapping_name`) and no Authorization header,
//! answered with `access_token`, `username`, `expires_in` and the rest of
//! an RFC 8693 response, or with Access's error shape
//! `{"errors":[{"code","message"}]}`. The error messages are illustrative.

use serde_json::json;

use super::http_server::{Request, Response};
use super::token_service::{FakeService, State, Trust};

pub const PATH: &str = "/access/api/v1/oidc/token";
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
pub const SUBJECT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:id_token";

/// The integration and identity mapping configured in the fake JFrog.
#[derive(Clone, Debug)]
pub struct Integration {
    pub provider_name: String,
    pub project_key: Option<String>,
    pub mapping: String,
    /// The user the mapping's token spec names.
    pub username: String,
}

pub fn error(status: u16, code: &str, message: &str) -> Response {
    Response::json(
        status,
        json!({"errors": [{"code": code, "message": message}]}),
    )
}

pub fn start(trust: Trust, integration: Integration) -> FakeService {
    FakeService::start("JFrog", trust, move |state, req| {
        handle(state, &integration, req)
    })
}

fn handle(state: &State, integration: &Integration, req: &Request) -> Response {
    state.check_line(req, "POST", PATH, false);
    let mut keys = vec![
        "grant_type",
        "subject_token_type",
        "subject_token",
        "provider_name",
    ];
    if integration.project_key.is_some() {
        keys.push("project_key");
    }
    let Some(body) = state.check_json_keys(req, &keys_with_mapping(req, keys)) else {
        return error(400, "BAD_REQUEST", "Invalid request body");
    };
    if body["grant_type"] != GRANT_TYPE {
        state.violation(format!("grant_type {}", body["grant_type"]));
    }
    if body["subject_token_type"] != SUBJECT_TOKEN_TYPE {
        state.violation(format!("subject_token_type {}", body["subject_token_type"]));
    }
    if body.get("project_key").and_then(|v| v.as_str()) != integration.project_key.as_deref() {
        state.violation(format!("project_key {:?}", body.get("project_key")));
    }
    if let Some(answer) = state.scripted() {
        return answer;
    }
    if body["provider_name"] != integration.provider_name.as_str() {
        return error(404, "NOT_FOUND", "OIDC integration not found");
    }
    if let Some(mapping) = body.get("identity_mapping_name")
        && mapping != integration.mapping.as_str()
    {
        return error(404, "NOT_FOUND", "Identity mapping not found");
    }
    let jwt = body["subject_token"].as_str().unwrap_or_default();
    if let Err(why) = state.verify_subject_token(jwt) {
        return error(
            401,
            "UNAUTHORIZED",
            &format!("Failed to validate the OIDC token: {why}"),
        );
    }
    let access = state.mint(&integration.username);
    Response::json(
        200,
        json!({
            "access_token": access,
            "username": integration.username,
            // JFrog's own clock: a negative lifetime means the token it
            // minted is already expired, the expires_in still positive.
            "expires_in": state.lifetime().abs(),
            "token_type": "Bearer",
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "scope": "applied-permissions/user",
            "refreshable": false,
        }),
    )
}

/// `identity_mapping_name` is optional: expect it exactly when sent.
fn keys_with_mapping<'a>(req: &Request, mut keys: Vec<&'a str>) -> Vec<&'a str> {
    if serde_json::from_slice::<serde_json::Value>(&req.body)
        .is_ok_and(|b| b.get("identity_mapping_name").is_some())
    {
        keys.push("identity_mapping_name");
    }
    keys
}
