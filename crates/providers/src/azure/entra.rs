//! The Entra ID token request: the service account token as a federated
//! client assertion, for an access token to the ACR resource.
//!
//! One form POST (the OAuth 2.0 client credentials grant with a JWT client
//! assertion, RFC 7523):
//!
//! ```text
//! POST {authority}/{tenant}/oauth2/v2.0/token
//! grant_type=client_credentials
//! client_id=<application (client) ID>
//! client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer
//! client_assertion=<service account token>
//! scope=https://containerregistry.azure.net/.default
//! ```
//!
//! Entra ID answers `{"token_type":"Bearer","expires_in":..,"access_token":..}`
//! or an OAuth error whose `error_description` starts with an `AADSTS` code.
//! Those codes are precise enough to tell the admin which half of the
//! federation is wrong, so each common one maps to a remedy.

use serde::Deserialize;

use crate::oauth;
use wicp_base::deadline::Deadline;
use wicp_base::error::{Error, Result};
use wicp_base::redact;
use wicp_base::secret::Secret;
use wicp_net::http;

/// The ACR resource, the same in every cloud. Tokens for the ARM audience
/// (`https://management.azure.com`) are refused by registries that disable
/// ARM-audience authentication, which Microsoft recommends.
pub const SCOPE: &str = "https://containerregistry.azure.net/.default";

const GRANT_TYPE: &str = "client_credentials";
const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// What the request needs, all checked before the network.
pub struct TokenRequest<'a> {
    /// `https://login.microsoftonline.com`, without a trailing slash.
    pub authority: &'a str,
    pub tenant: &'a str,
    pub client_id: &'a str,
    pub assertion: &'a Secret,
    /// Who the assertion speaks for, to write a precise remedy.
    pub federation: &'a Federation,
}

/// The federated identity credential the token must match, from its claims.
#[derive(Clone, Debug)]
pub struct Federation {
    pub issuer: String,
    pub subject: String,
    pub audiences: Vec<String>,
}

impl Federation {
    fn audience(&self) -> &str {
        self.audiences.first().map(String::as_str).unwrap_or("")
    }

    /// The az command that creates the matching federated credential.
    fn az_command(&self) -> String {
        format!(
            "az identity federated-credential create --identity-name <identity> --resource-group <group> --name <name> \
             --issuer {} --subject {} --audiences {}",
            self.issuer,
            self.subject,
            self.audience()
        )
    }
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: Option<String>,
}

/// The form of a token request that presents the service account token as
/// a federated client assertion for `client_id`: Entra's, and the AKS
/// identity binding's, which speaks the same protocol.
pub(crate) fn assertion_form<'a>(
    client_id: &'a str,
    assertion: &'a Secret,
) -> [(&'static str, &'a str); 5] {
    [
        ("grant_type", GRANT_TYPE),
        ("client_id", client_id),
        ("client_assertion_type", ASSERTION_TYPE),
        ("client_assertion", assertion.expose()),
        ("scope", SCOPE),
    ]
}

/// The `access_token` of a 2xx token response from `service` (`from` says
/// which call), or the error that it is unusable, with `fix`.
pub fn access_token(
    reply: &http::Reply,
    service: &'static str,
    from: impl std::fmt::Display,
    fix: &str,
) -> Result<Secret> {
    reply
        .json::<TokenResponse>()
        .and_then(|r| r.access_token)
        .filter(|t| !t.is_empty())
        .map(Secret::new)
        .ok_or_else(|| {
            reply
                .unusable(service, from, "a body that is not a token response")
                .fix(fix)
        })
}

#[derive(Deserialize, Default)]
struct ErrorResponse {
    #[serde(flatten)]
    oauth: oauth::ErrorResponse,
    #[serde(default)]
    error_codes: Vec<i64>,
    correlation_id: Option<String>,
}

/// The token endpoint of `authority` for `tenant`.
pub(crate) fn token_url(authority: &str, tenant: &str) -> String {
    format!("{authority}/{tenant}/oauth2/v2.0/token")
}

/// Requests the access token. The returned secret is good for every
/// registry the identity may pull from, so it goes to exactly one place
/// next: the validated registry's exchange endpoint.
pub async fn request_token(
    client: &http::Client,
    request: &TokenRequest<'_>,
    deadline: &Deadline,
) -> Result<Secret> {
    let url = token_url(request.authority, request.tenant);
    let call = http::Call::new(
        "Entra ID",
        format!("the Entra ID token request to {}", request.authority),
    );
    wicp_base::log::debug!(
        "requesting an Entra ID token at {url} for client {} (scope {SCOPE})",
        request.client_id
    );
    let form = assertion_form(request.client_id, request.assertion);
    let endpoint = wicp_net::observe::Endpoint::TokenExchange;
    let reply = http::post_form(client, endpoint, &url, &form, &call, deadline).await?;
    if reply.is_success() {
        return access_token(
            &reply,
            "Entra ID",
            format_args!("Entra ID at {}", request.authority),
            "check that --azure-authority-host (or AZURE_AUTHORITY_HOST) points at Entra ID and that no proxy rewrites the answer",
        );
    }
    Err(explain(request, &reply))
}

/// Turns a refusal into a message with the AADSTS code and its remedy.
fn explain(request: &TokenRequest<'_>, reply: &http::Reply) -> Error {
    let parsed = reply.json::<ErrorResponse>().unwrap_or_default();
    let description = parsed.oauth.error_description.as_deref().unwrap_or("");
    let code = aadsts_code(description).or_else(|| parsed.error_codes.first().copied());
    let mut detail = vec![format!("HTTP {}", reply.status)];
    if let Some(error) = parsed.oauth.error.as_deref() {
        detail.push(redact::clean(error, 40));
    }
    match code {
        Some(code) => detail.push(format!(
            "AADSTS{code}: {}",
            redact::clean(strip_code(description), 300)
        )),
        None if !description.is_empty() => detail.push(redact::clean(description, 300)),
        None if parsed.oauth.error.is_none() => detail.push(redact::body_shape(&reply.body)),
        None => {}
    }
    if let Some(id) = parsed
        .correlation_id
        .as_deref()
        .and_then(super::identity::parse_guid)
    {
        detail.push(format!("correlation ID {id}"));
    }
    let what = format!(
        "Entra ID {} to issue a token for client {} in tenant {} at {} ({})",
        redact::verb(reply.status),
        request.client_id,
        request.tenant,
        request.authority,
        detail.join(", ")
    );
    Error::upstream(what)
        .fix(remedy(request, reply.status, code))
        .answered("Entra ID", reply.status, &reply.body)
}

/// The remedy for an AADSTS code, or for the status when there is none.
fn remedy(request: &TokenRequest<'_>, status: u16, code: Option<i64>) -> String {
    let fed = request.federation;
    let fic = |which: &str| {
        format!(
            "the identity {} has no federated identity credential matching this token's {which}: \
             add one with issuer {}, subject {} and audience {} ({})",
            request.client_id,
            fed.issuer,
            fed.subject,
            fed.audience(),
            fed.az_command()
        )
    };
    match code {
        Some(70021 | 700213) => fic("issuer, subject and audience"),
        Some(700211) => fic("issuer"),
        Some(700212) => fic("audience"),
        Some(700016) => format!(
            "no application with client ID {} exists in tenant {}: check the client-id annotation \
             (the identity's client ID, not its object or principal ID) and the tenant",
            request.client_id, request.tenant
        ),
        Some(90002 | 900023) => format!(
            "tenant {} is not known to {}: check the tenant-id annotation or --azure-tenant-id, \
             and that the authority matches the tenant's cloud",
            request.tenant, request.authority
        ),
        Some(7000112) => format!(
            "the application {} is disabled in tenant {}: enable it (Enterprise applications, Properties, Enabled for users to sign in)",
            request.client_id, request.tenant
        ),
        Some(700024) => {
            "the service account token is outside its validity period for Entra ID: check the node's clock (NTP)"
                .to_string()
        }
        Some(50027 | 700027) => format!(
            "Entra ID could not validate the service account token against the issuer {}: \
             its OIDC discovery document and keys (JWKS) must be reachable from the internet, and the federated credential's issuer must equal it exactly",
            fed.issuer
        ),
        Some(500011) => format!(
            "the Azure Container Registry service is not available to tenant {} at {}: \
             check the tenant and that the authority belongs to the registry's cloud",
            request.tenant, request.authority
        ),
        Some(53003) => format!(
            "a Conditional Access policy for workload identities blocks {}: exclude it or allow this cluster's network",
            request.client_id
        ),
        Some(code) => format!(
            "look the code up at https://login.microsoftonline.com/error?code={code}; \
             the federated identity credential must match issuer {}, subject {} and audience {}",
            fed.issuer,
            fed.subject,
            fed.audience()
        ),
        None if status == 429 => {
            "Entra ID is throttling this node: let the kubelet's cache absorb pulls (raise --max-cache-duration) and retry later"
                .to_string()
        }
        None if status >= 500 => {
            "Entra ID failed on its side; the kubelet retries on the next pull".to_string()
        }
        None => format!(
            "check that {} is an Entra ID authority (--azure-authority-host, AZURE_AUTHORITY_HOST) reachable without a rewriting proxy",
            request.authority
        ),
    }
}

/// The number in a leading `AADSTS<digits>`, if any.
fn aadsts_code(description: &str) -> Option<i64> {
    let rest = description.trim_start().strip_prefix("AADSTS")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The description without its `AADSTS<digits>: ` prefix, which the message
/// shows separately.
fn strip_code(description: &str) -> &str {
    let trimmed = description.trim_start();
    match trimmed.strip_prefix("AADSTS") {
        Some(rest) => rest
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .trim_start_matches(':')
            .trim_start(),
        None => trimmed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn federation() -> Federation {
        Federation {
            issuer: "https://oidc.example".into(),
            subject: "system:serviceaccount:team:puller".into(),
            audiences: vec!["api://AzureADTokenExchange".into()],
        }
    }

    fn explain_body(status: u16, body: &str) -> Error {
        let fed = federation();
        let secret = Secret::new("assertion");
        let request = TokenRequest {
            authority: "https://login.microsoftonline.com",
            tenant: "72f988bf-86f1-41af-91ab-2d7cd011db47",
            client_id: "11111111-2222-3333-4444-555555555555",
            assertion: &secret,
            federation: &fed,
        };
        explain(&request, &http::reply(status, body))
    }

    #[test]
    fn codes_are_read_from_the_description_or_the_list() {
        assert_eq!(aadsts_code("AADSTS700213: No matching"), Some(700213));
        assert_eq!(aadsts_code("no code"), None);
        assert_eq!(
            strip_code("AADSTS90002: Tenant 'x' not found."),
            "Tenant 'x' not found."
        );
        let e = explain_body(
            400,
            r#"{"error":"invalid_request","error_description":"Tenant not found","error_codes":[90002]}"#,
        );
        assert!(e.what().contains("AADSTS90002: Tenant not found"), "{e}");
    }

    #[test]
    fn federation_mismatch_names_the_credential_to_create() {
        let e = explain_body(
            400,
            r#"{"error":"invalid_client","error_description":"AADSTS700213: No matching federated identity record found for presented assertion subject 'system:serviceaccount:team:puller'. Check your federated identity credential Subject, Audience and Issuer against the presented assertion. Trace ID: 0b0a6f1e-0000-0000-0000-000000000000 Correlation ID: 3c9e0c5b-1111-2222-3333-444444444444 Timestamp: 2026-01-01 00:00:00Z","error_codes":[700213],"correlation_id":"3c9e0c5b-1111-2222-3333-444444444444"}"#,
        );
        let text = e.to_string();
        assert!(
            text.contains(
                "HTTP 400, invalid_client, AADSTS700213: No matching federated identity record"
            ),
            "{text}"
        );
        assert!(!text.contains("Trace ID"), "{text}");
        assert!(
            text.contains("correlation ID 3c9e0c5b-1111-2222-3333-444444444444"),
            "{text}"
        );
        assert!(
            text.contains("--subject system:serviceaccount:team:puller"),
            "{text}"
        );
        assert!(text.contains("--issuer https://oidc.example"), "{text}");
        assert!(
            text.contains("--audiences api://AzureADTokenExchange"),
            "{text}"
        );
    }

    #[test]
    fn each_common_code_has_its_remedy() {
        for (code, expect) in [
            (70021, "no federated identity credential"),
            (700211, "matching this token's issuer"),
            (700212, "matching this token's audience"),
            (700016, "no application with client ID"),
            (90002, "is not known to"),
            (7000112, "is disabled"),
            (700024, "node's clock"),
            (50027, "JWKS"),
            (123456, "error?code=123456"),
        ] {
            let body = format!(
                r#"{{"error":"invalid_client","error_description":"AADSTS{code}: message.","error_codes":[{code}]}}"#
            );
            let e = explain_body(400, &body);
            assert!(
                e.remedy().unwrap_or_default().contains(expect),
                "{code}: {e}"
            );
        }
    }

    #[test]
    fn bodies_without_an_oauth_error_are_not_echoed() {
        let e = explain_body(
            502,
            "<html>upstream secret eyJhbGciOiJSUzI1NiJ9.e30.sig</html>",
        );
        let text = e.to_string();
        assert!(!text.contains("eyJ"), "{text}");
        assert!(!text.contains("upstream secret"), "{text}");
        assert!(text.contains("HTTP 502"), "{text}");
        let e = explain_body(429, "");
        assert!(e.remedy().unwrap_or_default().contains("throttling"), "{e}");
    }
}
