//! IAM Service Account Credentials: the federated token in, a Google service
//! account's access token out (`generateAccessToken`).
//!
//! This is the impersonation step, taken when the Kubernetes service account
//! names a Google service account. The federated principal needs
//! `iam.serviceAccounts.getAccessToken` on it (roles/iam.workloadIdentityUser).
//! The `-` in `projects/-/serviceAccounts/...` is required by the API.

use std::time::Duration;

use wicp_base::deadline::Deadline;
use wicp_base::duration::{format_unix, parse_rfc3339};
use wicp_base::error::{Error, Result, quote};
use wicp_base::secret::Secret;
use wicp_net::http::{self, Reply};

use super::{AccessToken, refused};
use crate::oauth;

/// The scope of the impersonated token: what Artifact Registry and GCR need.
pub const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

/// Without an organization policy exception, IAM refuses lifetimes above an
/// hour.
pub(crate) const DEFAULT_MAX_LIFETIME: Duration = Duration::from_secs(3600);

pub struct Request<'a> {
    /// The IAM Credentials base URL (`https://iamcredentials.googleapis.com`).
    pub endpoint: &'a str,
    pub service_account: &'a str,
    pub federated_token: &'a Secret,
    pub lifetime: Duration,
    /// The federated principal, for the fix of a refusal.
    pub principal: &'a str,
}

/// The JSON body of `generateAccessToken`.
pub fn body(lifetime: Duration) -> serde_json::Value {
    serde_json::json!({
        "scope": [SCOPE],
        "lifetime": format!("{}s", lifetime.as_secs()),
    })
}

/// `POST {endpoint}/v1/projects/-/serviceAccounts/{email}:generateAccessToken`.
pub async fn generate_access_token(
    client: &http::Client,
    request: &Request<'_>,
    deadline: &Deadline,
) -> Result<AccessToken> {
    let url = format!(
        "{}/v1/projects/-/serviceAccounts/{}:generateAccessToken",
        request.endpoint, request.service_account
    );
    let call = http::Call::new(
        "Google IAM Credentials",
        format!(
            "IAM Credentials generateAccessToken for {}",
            request.service_account
        ),
    );
    let body = serde_json::to_vec(&body(request.lifetime))
        .map_err(|e| Error::internal(format!("cannot encode the generateAccessToken body: {e}")))?;
    let reply = http::send(
        client,
        wicp_net::observe::Endpoint::Impersonation,
        || {
            client
                .post(&url)
                .bearer_auth(request.federated_token.expose())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
        },
        &call,
        deadline,
    )
    .await?;
    interpret(&reply, request)
}

#[derive(serde::Deserialize)]
struct Wire {
    #[serde(rename = "accessToken")]
    access_token: Option<String>,
    #[serde(rename = "expireTime")]
    expire_time: Option<String>,
}

pub fn interpret(reply: &Reply, request: &Request<'_>) -> Result<AccessToken> {
    let sa = request.service_account;
    if !reply.is_success() {
        let upstream = oauth::error_body(&reply.body);
        let grant = format!(
            "gcloud iam service-accounts add-iam-policy-binding {sa} --role roles/iam.workloadIdentityUser --member '{}'",
            request.principal
        );
        let fix = match upstream.as_ref().map(|u| u.code.as_str()) {
            Some("PERMISSION_DENIED") => format!(
                "let the pod's federated identity impersonate {sa} ({grant}), and check that {sa} exists"
            ),
            Some("NOT_FOUND") => format!(
                "the Google service account {sa} does not exist; fix annotation iam.gke.io/gcp-service-account, or create it"
            ),
            Some("UNAUTHENTICATED") => {
                "IAM did not accept the federated token; check that the STS and IAM Credentials endpoints belong to the same Google environment".to_string()
            }
            Some("INVALID_ARGUMENT") | Some("FAILED_PRECONDITION")
                if request.lifetime > DEFAULT_MAX_LIFETIME =>
            {
                format!(
                    "--gcp-token-lifetime {}s is above 1h, which needs the organization policy constraints/iam.allowServiceAccountCredentialLifetimeExtension to list {sa}; lower it or add the exception",
                    request.lifetime.as_secs()
                )
            }
            _ if http::is_retryable_status(reply.status) => {
                http::retries_spent("IAM Credentials", super::STATUS_PAGE)
            }
            _ => "check --gcp-iamcredentials-endpoint and the node's proxy settings".to_string(),
        };
        let what = format!("IAM Credentials refused to impersonate {sa}");
        return Err(refused("Google IAM Credentials", &what, reply, fix));
    }
    let malformed = |why: String| {
        reply
            .unusable(
                "Google IAM Credentials",
                format_args!("IAM Credentials, asked to impersonate {sa},"),
                &why,
            )
            .fix("check that --gcp-iamcredentials-endpoint points at IAM Credentials; a proxy or captive portal may be answering instead")
    };
    let wire: Wire = reply
        .json()
        .ok_or_else(|| malformed("a body that is not a JSON token response".into()))?;
    let token = wire
        .access_token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| malformed("no accessToken".into()))?;
    let expire_time = wire
        .expire_time
        .ok_or_else(|| malformed("no expireTime".into()))?;
    let expires_at = parse_rfc3339(&expire_time).ok_or_else(|| {
        malformed(format!(
            "an expireTime {} that is not an RFC 3339 timestamp",
            quote(&expire_time)
        ))
    })?;
    wicp_base::log::debug!(
        "IAM Credentials issued a token for {sa} that expires at {}",
        format_unix(expires_at)
    );
    Ok(AccessToken {
        token: Secret::new(token),
        expires_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wicp_net::http::reply;

    fn request(token: &Secret, lifetime: u64) -> Request<'_> {
        Request {
            endpoint: "https://iamcredentials.googleapis.com",
            service_account: "puller@my-project.iam.gserviceaccount.com",
            federated_token: token,
            lifetime: Duration::from_secs(lifetime),
            principal: "serviceAccount:my-project.svc.id.goog[team/api]",
        }
    }

    #[test]
    fn body_is_the_documented_json() {
        assert_eq!(
            body(Duration::from_secs(3600)),
            serde_json::json!({"scope": ["https://www.googleapis.com/auth/cloud-platform"], "lifetime": "3600s"})
        );
    }

    #[test]
    fn reads_a_token() {
        let t = Secret::new("fed");
        let token = interpret(
            &reply(
                200,
                r#"{"accessToken":"ya29.sa","expireTime":"2023-11-15T19:43:33Z"}"#,
            ),
            &request(&t, 3600),
        )
        .unwrap();
        assert_eq!(token.token.expose(), "ya29.sa");
        assert_eq!(token.expires_at, 1_700_077_413);
    }

    #[test]
    fn refuses_a_broken_success() {
        let t = Secret::new("fed");
        for (body, needle) in [
            ("[]", "not a JSON token response"),
            (r#"{"expireTime":"2023-11-15T19:43:33Z"}"#, "no accessToken"),
            (r#"{"accessToken":"ya29.sa"}"#, "no expireTime"),
            (
                r#"{"accessToken":"ya29.sa","expireTime":"tomorrow"}"#,
                "expireTime \"tomorrow\" that is not an RFC 3339",
            ),
            (
                r#"{"accessToken":"ya29.sa","expireTime":1700077413}"#,
                "not a JSON token response",
            ),
        ] {
            let read = interpret(&reply(200, body), &request(&t, 3600));
            http::assert_refused(read, needle, "ya29.sa");
        }
    }

    #[test]
    fn explains_refusals() {
        let t = Secret::new("fed");
        let denied = r#"{"error":{"code":403,"message":"Permission 'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist).","status":"PERMISSION_DENIED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"IAM_PERMISSION_DENIED","domain":"iam.googleapis.com","metadata":{"permission":"iam.serviceAccounts.getAccessToken"}}]}}"#;
        let e = interpret(&reply(403, denied), &request(&t, 3600)).unwrap_err();
        assert_eq!(e.kind(), wicp_base::error::Kind::Upstream);
        assert_eq!(e.service(), Some("Google IAM Credentials"));
        assert_eq!(e.status(), Some(403));
        assert_eq!(
            e.what(),
            "IAM Credentials refused to impersonate puller@my-project.iam.gserviceaccount.com: HTTP 403 PERMISSION_DENIED: \"Permission 'iam.serviceAccounts.getAccessToken' denied on resource (or it may not exist).\""
        );
        assert!(
            e.remedy().unwrap().contains("gcloud iam service-accounts add-iam-policy-binding puller@my-project.iam.gserviceaccount.com --role roles/iam.workloadIdentityUser --member 'serviceAccount:my-project.svc.id.goog[team/api]'"),
            "{e}"
        );
        let invalid = r#"{"error":{"code":400,"message":"Lifetime must be ...","status":"INVALID_ARGUMENT"}}"#;
        let e = interpret(&reply(400, invalid), &request(&t, 7200)).unwrap_err();
        assert!(
            e.remedy()
                .unwrap()
                .contains("allowServiceAccountCredentialLifetimeExtension"),
            "{e}"
        );
        let e = interpret(
            &reply(
                404,
                r#"{"error":{"code":404,"message":"Not found","status":"NOT_FOUND"}}"#,
            ),
            &request(&t, 3600),
        )
        .unwrap_err();
        assert!(e.remedy().unwrap().contains("does not exist"), "{e}");
        let e = interpret(&reply(503, "busy"), &request(&t, 3600)).unwrap_err();
        assert!(
            e.what()
                .contains("HTTP 503 with a body that is not a Google error (4 bytes)"),
            "{e}"
        );
        assert!(
            e.remedy().unwrap().contains("throttling or unavailable"),
            "{e}"
        );
    }
}
