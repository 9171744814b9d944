//! EKS Pod Identity: the node's Pod Identity Agent trades a service account
//! token (audience `pods.eks.amazonaws.com`) for the temporary credentials
//! of the role associated with that service account in EKS.
//!
//! The agent normally serves pods, which read their own projected token; we
//! can present the kubelet's token instead because it is pod-bound and
//! minted for the pulling pod's service account, so the association that
//! applies is exactly that pod's. The request is `GET /v1/credentials` with
//! the raw token in the `Authorization` header; the answer is the container
//! credentials JSON the AWS SDKs read (`AccessKeyId`, `SecretAccessKey`,
//! `Token`, `AccountId`, `Expiration`). The agent reports failures as plain
//! text, `[request id]: (ErrorCode): message, fault: client`, with the
//! status code EKS Auth gave.

use serde::Deserialize;

use super::endpoints::{DEFAULT_AGENT, Endpoint};
use super::sdk::AwsCredentials;
use wicp_base::deadline::Deadline;
use wicp_base::error::{Error, Result, quote};
use wicp_base::redact;
use wicp_base::secret::Secret;
use wicp_kubelet::request::token::ServiceAccountToken;
use wicp_net::{self as net, http};

/// How much of the agent's error message is repeated.
const MAX_MESSAGE_CHARS: usize = 300;

/// The agent's stable name, the `service` fact of its errors.
pub(crate) const AGENT: &str = "EKS Pod Identity Agent";

/// The audience the agent (and EKS Auth behind it) accepts.
pub const AUDIENCE: &str = "pods.eks.amazonaws.com";

const AGENT_FIX: &str = "install the Amazon EKS Pod Identity Agent add-on (DaemonSet eks-pod-identity-agent in kube-system) \
     and check it runs on this node; the kubelet reaches it on the host network at 169.254.170.23:80 \
     (or set AWS_CONTAINER_CREDENTIALS_FULL_URI)";

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct WireCredentials {
    access_key_id: String,
    secret_access_key: String,
    token: String,
    #[serde(default)]
    account_id: Option<String>,
    #[serde(default)]
    expiration: Option<String>,
}

/// Credentials from the agent, and the account they belong to.
pub struct AgentCredentials {
    pub credentials: AwsCredentials,
    pub account: Option<String>,
}

/// Asks the agent for the credentials of the pod's association.
pub async fn fetch(
    agent: &Endpoint,
    token: &ServiceAccountToken,
    net: &net::Settings,
    deadline: &Deadline,
) -> Result<AgentCredentials> {
    let call = http::Call::new(AGENT, format!("EKS Pod Identity Agent at {}", agent.url));
    let client = net.direct_client(deadline)?;
    let mut authorization = reqwest::header::HeaderValue::from_str(token.secret().expose())
        .map_err(|_| {
            Error::token("the service account token cannot be sent in an HTTP header")
                .fix("the kubelet must pass a projected service account token (a JWT)")
        })?;
    authorization.set_sensitive(true);
    let reply = http::send(
        &client,
        wicp_net::observe::Endpoint::PodIdentityAgent,
        || {
            client
                .get(&agent.url)
                .header(reqwest::header::AUTHORIZATION, authorization.clone())
                .header(reqwest::header::ACCEPT, "application/json")
        },
        &call,
        deadline,
    )
    .await
    .map_err(|e| e.fix(AGENT_FIX))?;
    if !reply.is_success() {
        return Err(refusal(&call, reply.status, &reply.body, token));
    }
    let wire: WireCredentials = reply.json().ok_or_else(|| {
        reply.unusable(
            AGENT,
            &call,
            "a body that is not container credentials JSON (AccessKeyId, SecretAccessKey, Token, Expiration)",
        )
        .fix("check that AWS_CONTAINER_CREDENTIALS_FULL_URI (if set) points at the EKS Pod Identity Agent's /v1/credentials")
    })?;
    if wire.access_key_id.is_empty() || wire.secret_access_key.is_empty() || wire.token.is_empty() {
        return Err(
            Error::upstream(format!("{call} answered with empty credentials")).fix(
                "check the agent's logs: kubectl -n kube-system logs ds/eks-pod-identity-agent",
            ),
        );
    }
    let expires_at = match wire.expiration.as_deref() {
        None | Some("") => None,
        Some(text) => Some(parse_time(text).ok_or_else(|| {
            Error::upstream(format!(
                "{call} answered with an Expiration that is not an RFC 3339 time: {}",
                quote(text)
            ))
            .fix("check that the endpoint is the EKS Pod Identity Agent")
        })?),
    };
    Ok(AgentCredentials {
        credentials: AwsCredentials {
            access_key_id: wire.access_key_id,
            secret_access_key: Secret::new(wire.secret_access_key),
            session_token: Secret::new(wire.token),
            expires_at,
        },
        account: wire.account_id.filter(|a| !a.is_empty()),
    })
}

fn parse_time(text: &str) -> Option<i64> {
    wicp_base::duration::parse_rfc3339(text)
}

/// The error code and message in an agent error body, e.g.
/// `[abc-123]: (ResourceNotFoundException): No association found, fault: client`.
fn error_code(body: &str) -> Option<(String, String)> {
    let line = body.lines().next()?.trim();
    let start = line.find('(')?;
    let rest = line.get(start + 1..)?;
    let end = rest.find(')')?;
    let code = rest.get(..end)?;
    if code.is_empty() || !code.chars().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let message = rest.get(end + 1..)?.trim_start_matches(':').trim();
    let message = message
        .rsplit_once(", fault:")
        .map_or(message, |(m, _)| m)
        .trim();
    Some((code.to_string(), message.to_string()))
}

/// Explains a non-2xx answer from the agent.
fn refusal(call: &http::Call, status: u16, body: &[u8], token: &ServiceAccountToken) -> Error {
    let text = String::from_utf8_lossy(body);
    let sa = token.service_account();
    // The agent's message names the failure; anything else (a proxy's
    // page, a half-written answer) is described by its shape only.
    let (code, said) = match error_code(&text) {
        Some((code, message)) => (
            code.clone(),
            format!("{code}: {:?}", redact::clean(&message, MAX_MESSAGE_CHARS)),
        ),
        None => (
            String::new(),
            format!("a body of {}", redact::body_shape(body)),
        ),
    };
    let what = |summary: &str| {
        Error::upstream(format!(
            "{call} answered HTTP {status} for service account {sa} ({summary}); it said {said}"
        ))
        .answered(AGENT, status, body)
    };
    match (code.as_str(), status) {
        // The agent checks the Host it was called by and refuses others.
        (_, 403) if text.contains("invalid address") => what("called on an address the agent does not serve").fix(format!(
            "call the agent on its own address: unset AWS_CONTAINER_CREDENTIALS_FULL_URI for {DEFAULT_AGENT}, or use http://[fd00:ec2::23]/v1/credentials"
        )),
        ("ResourceNotFoundException", _) | (_, 404) => what("no Pod Identity association").fix(format!(
            "associate an IAM role with the service account: aws eks create-pod-identity-association --cluster-name <cluster> \
             --namespace {} --service-account {} --role-arn <role>",
            sa.namespace, sa.name
        )),
        ("AccessDeniedException", _) => what("EKS could not assume the associated role").fix(
            "the associated role's trust policy must allow the service principal pods.eks.amazonaws.com the actions sts:AssumeRole and sts:TagSession",
        ),
        ("InvalidTokenException" | "ExpiredTokenException", _) | (_, 401 | 403) => {
            what("the service account token was refused").fix(format!(
                "set tokenAttributes.serviceAccountTokenAudience: {AUDIENCE} for this provider entry, and check the node's clock"
            ))
        }
        (_, 429) => what("throttled").fix(
            "let the kubelet cache credentials longer (tokenAttributes.cacheType: ServiceAccount, a larger --max-cache-duration)",
        ),
        (_, 400) => what("the request was refused").fix(format!(
            "set tokenAttributes.serviceAccountTokenAudience: {AUDIENCE} for this provider entry; if it is set, check the agent's logs \
             (kubectl -n kube-system logs ds/eks-pod-identity-agent)"
        )),
        _ => what("the agent failed").fix(
            "check the agent's logs (kubectl -n kube-system logs ds/eks-pod-identity-agent) and that the node can reach EKS Auth",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_error_bodies() {
        assert_eq!(
            error_code(
                "[a1b2-c3]: (ResourceNotFoundException): No Pod Identity Association found for the service account, fault: client\n"
            ),
            Some((
                "ResourceNotFoundException".into(),
                "No Pod Identity Association found for the service account".into()
            ))
        );
        assert_eq!(
            error_code("(AccessDeniedException): denied"),
            Some(("AccessDeniedException".into(), "denied".into()))
        );
        assert_eq!(
            error_code("Access Denied. Called agent through invalid address"),
            None
        );
        assert_eq!(error_code("(not a code): x"), None);
        assert_eq!(error_code(""), None);
    }

    #[test]
    fn expiration_times() {
        assert_eq!(parse_time("2015-01-01T00:00:00Z"), Some(1_420_070_400));
        assert_eq!(
            parse_time("2015-01-01T00:00:00.123456789Z"),
            Some(1_420_070_400)
        );
        assert_eq!(parse_time("2015-01-01T01:00:00+01:00"), Some(1_420_070_400));
        assert_eq!(parse_time("tomorrow"), None);
    }
}
