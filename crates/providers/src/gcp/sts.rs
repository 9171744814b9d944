//! Google Security Token Service: the service account token in, a federated
//! Google access token out (RFC 8693 token exchange).
//!
//! The request is form-encoded, as Google's own auth libraries send it (STS
//! also accepts JSON), and carries no `Authorization` header: STS documents
//! that one "can cause the request to fail". The federated token lives at
//! most an hour and never longer than the subject token it was exchanged
//! for.

use wicp_base::deadline::Deadline;
use wicp_base::duration::unix_now;
use wicp_base::error::Result;
use wicp_base::secret::Secret;
use wicp_net::http::{self, Reply};

use super::{AccessToken, refused};
use crate::oauth;

pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
pub(crate) const REQUESTED_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
pub const SUBJECT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// What the caller needs to explain a refusal.
pub struct Request<'a> {
    /// The STS base URL (`https://sts.googleapis.com`).
    pub endpoint: &'a str,
    pub audience: &'a str,
    pub subject_token: &'a Secret,
    /// Fixes for `invalid_grant` and `invalid_target`, which depend on the mode.
    pub grant_fix: &'a str,
    pub target_fix: &'a str,
}

/// `POST {endpoint}/v1/token`.
pub async fn exchange(
    client: &http::Client,
    request: &Request<'_>,
    deadline: &Deadline,
) -> Result<AccessToken> {
    let url = format!("{}/v1/token", request.endpoint);
    let call = http::Call::new(
        "Google STS",
        format!("the Google STS token exchange at {url}"),
    );
    let form = [
        ("grant_type", GRANT_TYPE),
        ("audience", request.audience),
        ("scope", SCOPE),
        ("requested_token_type", REQUESTED_TOKEN_TYPE),
        ("subject_token_type", SUBJECT_TOKEN_TYPE),
        ("subject_token", request.subject_token.expose()),
    ];
    let endpoint = wicp_net::observe::Endpoint::TokenExchange;
    let reply = http::post_form(client, endpoint, &url, &form, &call, deadline).await?;
    interpret(&reply, unix_now(), request)
}

#[derive(serde::Deserialize)]
struct Wire {
    access_token: Option<String>,
    expires_in: Option<serde_json::Value>,
}

/// Reads STS's answer, seen at `now`.
pub fn interpret(reply: &Reply, now: i64, request: &Request<'_>) -> Result<AccessToken> {
    let audience = wicp_base::error::quote(request.audience);
    if !reply.is_success() {
        let upstream = oauth::error_body(&reply.body);
        let fix = match upstream.as_ref().map(|u| u.code.as_str()) {
            Some("invalid_grant") => request.grant_fix.to_string(),
            Some("invalid_target") => request.target_fix.to_string(),
            Some("invalid_request" | "unsupported_grant_type" | "invalid_scope") => {
                "STS did not understand the request: if --gcp-sts-endpoint is set, point it at Google STS (https://sts.googleapis.com or its private endpoint)".to_string()
            }
            _ if http::is_retryable_status(reply.status) => {
                http::retries_spent("Google STS", super::STATUS_PAGE)
            }
            _ => "check --gcp-sts-endpoint and the node's proxy settings; the exchange was refused before the token was examined".to_string(),
        };
        let what = format!("Google STS refused the token exchange for audience {audience}");
        return Err(refused("Google STS", &what, reply, fix));
    }
    let malformed = |why: &str| {
        reply
            .unusable("Google STS", format_args!("Google STS, asked for audience {audience},"), why)
            .fix("check that --gcp-sts-endpoint points at Google STS; a proxy or captive portal may be answering instead")
    };
    let wire: Wire = reply
        .json()
        .ok_or_else(|| malformed("a body that is not a JSON token response"))?;
    let token = wire
        .access_token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| malformed("no access_token"))?;
    // A token without a lifetime is refused, as golang/oauth2 does ("got
    // invalid expiry from security token service").
    let expires_in = oauth::expires_in(wire.expires_in.as_ref())
        .filter(|&s| s > 0)
        .ok_or_else(|| malformed("no positive expires_in"))?;
    Ok(AccessToken {
        token: Secret::new(token),
        expires_at: now.saturating_add(expires_in),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wicp_net::http::reply;

    fn request(token: &Secret) -> Request<'_> {
        Request {
            endpoint: "https://sts.googleapis.com",
            audience: "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/p/providers/x",
            subject_token: token,
            grant_fix: "GRANT FIX",
            target_fix: "TARGET FIX",
        }
    }

    #[test]
    fn reads_a_token() {
        let t = Secret::new("subject");
        for body in [
            r#"{"access_token":"ya29.fed","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":3599}"#,
            r#"{"access_token":"ya29.fed","expires_in":"3599"}"#,
        ] {
            let token = interpret(&reply(200, body), 1000, &request(&t)).unwrap();
            assert_eq!(token.token.expose(), "ya29.fed");
            assert_eq!(token.expires_at, 4599);
        }
    }

    #[test]
    fn refuses_a_broken_success() {
        let t = Secret::new("subject");
        for (body, needle) in [
            ("<html>portal</html>", "not a JSON token response"),
            (r#"{"expires_in":3600}"#, "no access_token"),
            (
                r#"{"access_token":"","expires_in":3600}"#,
                "no access_token",
            ),
            (r#"{"access_token":"ya29.fed"}"#, "no positive expires_in"),
            (
                r#"{"access_token":"ya29.fed","expires_in":0}"#,
                "no positive expires_in",
            ),
            (
                r#"{"access_token":"ya29.fed","expires_in":-5}"#,
                "no positive expires_in",
            ),
            (
                r#"{"access_token":"ya29.fed","expires_in":"soon"}"#,
                "no positive expires_in",
            ),
        ] {
            let read = interpret(&reply(200, body), 0, &request(&t));
            http::assert_refused(read, needle, "ya29.fed");
        }
    }

    #[test]
    fn explains_refusals() {
        let t = Secret::new("subject");
        let cases = [
            (
                400,
                r#"{"error":"invalid_grant","error_description":"The audience in ID Token [x] does not match the expected audience."}"#,
                "HTTP 400 invalid_grant: \"The audience in ID Token [x] does not match the expected audience.\"",
                "GRANT FIX",
            ),
            (
                400,
                r#"{"error":"invalid_target","error_description":"The target service indicated by the \"audience\" parameters is invalid."}"#,
                "HTTP 400 invalid_target",
                "TARGET FIX",
            ),
            (
                400,
                r#"{"error":"invalid_request","error_description":"Invalid value for \"subject_token_type\""}"#,
                "HTTP 400 invalid_request",
                "--gcp-sts-endpoint",
            ),
            (
                403,
                r#"{"error":{"code":403,"message":"Request is prohibited by organization's policy.","status":"PERMISSION_DENIED"}}"#,
                "HTTP 403 PERMISSION_DENIED: \"Request is prohibited by organization's policy.\"",
                "proxy",
            ),
            (
                429,
                r#"{"error":{"code":429,"message":"Quota exceeded","status":"RESOURCE_EXHAUSTED"}}"#,
                "HTTP 429 RESOURCE_EXHAUSTED",
                "throttling or unavailable",
            ),
            (
                500,
                "upstream connect error",
                "HTTP 500 with a body that is not a Google error (22 bytes)",
                "throttling",
            ),
        ];
        for (status, body, what, fix) in cases {
            let e = interpret(&reply(status, body), 0, &request(&t)).unwrap_err();
            assert!(e.what().starts_with("Google STS refused the token exchange for audience \"//iam.googleapis.com/projects/1/"), "{e}");
            assert!(e.what().contains(what), "{body}: {e}");
            assert!(e.remedy().unwrap().contains(fix), "{body}: {e}");
            assert_eq!(e.kind(), wicp_base::error::Kind::Upstream);
            assert_eq!(e.service(), Some("Google STS"));
            assert_eq!(e.status(), Some(status));
            assert!(e.body_shape().is_some(), "{e}");
        }
    }
}
