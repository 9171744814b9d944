//! The ACR exchange: an Entra ID access token for an ACR refresh token.
//!
//! ```text
//! POST https://<registry>/oauth2/exchange
//! grant_type=access_token
//! service=<registry host>
//! tenant=<tenant>
//! access_token=<Entra ID access token>
//! ```
//!
//! ACR answers `{"refresh_token":"<JWT>"}`. Docker, containerd and CRI-O log
//! in with the username `00000000-0000-0000-0000-000000000000` (the null GUID
//! tells ACR the password is a refresh token) and trade it at
//! `/oauth2/token` for short, repository-scoped access tokens on each pull.
//!
//! We post to the validated login server itself (or the admin's
//! `--acr-endpoint`), not to the realm of a `/v2/` challenge: a challenge
//! could name any host, and the Entra token must not follow it.

use serde::Deserialize;

use crate::oauth;
use wicp_base::deadline::Deadline;
use wicp_base::error::{Error, Result};
use wicp_base::redact;
use wicp_base::secret::Secret;
use wicp_net::http;

/// The username that marks the password as an ACR refresh token.
pub const USERNAME: &str = "00000000-0000-0000-0000-000000000000";

pub const GRANT_TYPE: &str = "access_token";

/// What the exchange needs, all checked before the network.
#[derive(Clone, Copy)]
pub struct ExchangeRequest<'a> {
    /// `https://<registry>` or the `--acr-endpoint` override, no trailing slash.
    pub endpoint: &'a str,
    /// The login server the refresh token is for.
    pub service: &'a str,
    pub tenant: &'a str,
    pub client_id: &'a str,
}

/// An ACR refresh token and its expiry (Unix seconds), read from its `exp`.
pub struct RefreshToken {
    pub token: Secret,
    pub expires_at: i64,
}

impl RefreshToken {
    /// The registry login: the null-GUID username marks the password as a
    /// refresh token.
    pub(crate) fn into_credential(self) -> crate::Credential {
        crate::Credential {
            username: USERNAME.to_string(),
            password: self.token,
            expires_at: self.expires_at,
        }
    }
}

#[derive(Deserialize)]
struct ExchangeResponse {
    refresh_token: Option<String>,
}

/// ACR's errors come in the registry API's shape, `{"errors":[{code,
/// message}]}`, or in OAuth's, `{error, error_description}`.
#[derive(Deserialize, Default)]
struct ErrorResponse {
    #[serde(default)]
    errors: Vec<RegistryError>,
    #[serde(flatten)]
    oauth: oauth::ErrorResponse,
}

#[derive(Deserialize)]
struct RegistryError {
    code: Option<String>,
    message: Option<String>,
}

fn exchange_url(endpoint: &str) -> String {
    format!("{endpoint}/oauth2/exchange")
}

/// Trades `access_token` for a refresh token for `request.service`.
pub async fn exchange(
    client: &http::Client,
    request: &ExchangeRequest<'_>,
    access_token: &Secret,
    deadline: &Deadline,
) -> Result<RefreshToken> {
    let url = exchange_url(request.endpoint);
    let call = http::Call::new(
        "ACR",
        format!("the ACR token exchange at {}", request.endpoint),
    );
    wicp_base::log::debug!(
        "exchanging the Entra ID token at {url} for service {}",
        request.service
    );
    let form = [
        ("grant_type", GRANT_TYPE),
        ("service", request.service),
        ("tenant", request.tenant),
        ("access_token", access_token.expose()),
    ];
    let endpoint = wicp_net::observe::Endpoint::RegistryToken;
    let reply = http::post_form(client, endpoint, &url, &form, &call, deadline).await?;
    if !reply.is_success() {
        return Err(explain(request, &reply));
    }
    let token = reply
        .json::<ExchangeResponse>()
        .and_then(|r| r.refresh_token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            reply
                .unusable("ACR", format_args!("ACR at {}", request.endpoint), "no refresh token")
                .fix("check that the endpoint is an ACR login server (--acr-endpoint) and that no proxy rewrites the answer")
        })?;
    let token = Secret::new(token);
    // ACR verifies its own token; its `exp` only says how long to cache it.
    let expires_at = wicp_kubelet::request::token::unverified_expiry(token.expose()).ok_or_else(|| {
        Error::upstream(format!(
            "ACR at {} returned a refresh token that is not a JWT with an exp claim",
            request.endpoint
        ))
        .fix("check that the endpoint is an ACR login server (--acr-endpoint); ACR refresh tokens are JWTs")
    })?;
    Ok(RefreshToken { token, expires_at })
}

fn explain(request: &ExchangeRequest<'_>, reply: &http::Reply) -> Error {
    let parsed = reply.json::<ErrorResponse>().unwrap_or_default();
    let mut detail = vec![format!("HTTP {}", reply.status)];
    let mut said = false;
    for e in parsed.errors.iter().take(2) {
        let text = [e.code.as_deref(), e.message.as_deref()]
            .into_iter()
            .flatten()
            .map(|t| redact::clean(t, 200))
            .collect::<Vec<_>>()
            .join(": ");
        if !text.is_empty() {
            detail.push(text);
            said = true;
        }
    }
    for text in [
        parsed.oauth.error.as_deref(),
        parsed.oauth.error_description.as_deref(),
    ]
    .into_iter()
    .flatten()
    {
        detail.push(redact::clean(text, 200));
        said = true;
    }
    if !said {
        detail.push(redact::body_shape(&reply.body));
    }
    let what = format!(
        "ACR at {} {} to exchange the Entra ID token for a refresh token for {} ({})",
        request.endpoint,
        redact::verb(reply.status),
        request.service,
        detail.join(", ")
    );
    let fix = match reply.status {
        400 | 401 => format!(
            "give the identity {} the AcrPull role on the registry {} (Container Registry Repository Reader if its role \
             assignments are attribute-based, which ignores AcrPull; assignments take a few minutes to apply), \
             and check that the registry belongs to tenant {} and allows Microsoft Entra authentication",
            request.client_id, request.service, request.tenant
        ),
        403 => format!(
            "the registry {} refuses this node: check its network rules (public network access, firewall, private endpoint)",
            request.service
        ),
        404 => format!(
            "{} has no /oauth2/exchange: check that the registry exists and that --acr-endpoint, if set, points at its login server",
            request.endpoint
        ),
        429 => "ACR is throttling token exchanges: let the kubelet's cache absorb pulls (raise --max-cache-duration) and retry later".to_string(),
        s if s >= 500 => "ACR failed on its side; the kubelet retries on the next pull".to_string(),
        _ => format!(
            "check that {} is the registry's login server and that no proxy rewrites the answer",
            request.endpoint
        ),
    };
    Error::upstream(what)
        .fix(fix)
        .answered("ACR", reply.status, &reply.body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn explain_body(status: u16, body: &str) -> Error {
        let request = ExchangeRequest {
            endpoint: "https://contoso.azurecr.io",
            service: "contoso.azurecr.io",
            tenant: "72f988bf-86f1-41af-91ab-2d7cd011db47",
            client_id: "11111111-2222-3333-4444-555555555555",
        };
        explain(&request, &http::reply(status, body))
    }

    #[test]
    fn errors_in_either_shape_are_reported_with_a_remedy() {
        let e = explain_body(
            401,
            r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required, visit https://aka.ms/acr/authorization for more information."}]}"#,
        );
        assert!(
            e.what()
                .contains("HTTP 401, UNAUTHORIZED: authentication required"),
            "{e}"
        );
        assert!(e.remedy().unwrap_or_default().contains("AcrPull"), "{e}");
        let e = explain_body(
            400,
            r#"{"error":"invalid_request","error_description":"bad tenant"}"#,
        );
        assert!(
            e.what().contains("HTTP 400, invalid_request, bad tenant"),
            "{e}"
        );
        let e = explain_body(403, "<html>denied</html>");
        assert!(e.what().contains("HTML or XML"), "{e}");
        assert!(!e.what().contains("denied"), "{e}");
        assert!(
            e.remedy().unwrap_or_default().contains("network rules"),
            "{e}"
        );
        let e = explain_body(404, "");
        assert!(
            e.remedy().unwrap_or_default().contains("/oauth2/exchange"),
            "{e}"
        );
    }
}
