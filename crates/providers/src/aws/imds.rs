//! The node's identity on EC2: the instance profile's role credentials from
//! the instance metadata service, IMDSv2 only.
//!
//! Three plain HTTP requests (docs.aws.amazon.com/AWSEC2/latest/UserGuide/
//! instance-metadata-security-credentials.html, .../configuring-instance-metadata-service.html):
//!
//! 1. `PUT /latest/api/token` with `X-aws-ec2-metadata-token-ttl-seconds`
//!    answers the session token as text (and repeats the TTL header);
//! 2. `GET /latest/meta-data/iam/security-credentials/` with
//!    `X-aws-ec2-metadata-token` answers the role name (404: no instance
//!    profile);
//! 3. `GET .../security-credentials/<role>` answers
//!    `{"Code":"Success","AccessKeyId","SecretAccessKey","Token","Expiration",...}`.
//!
//! Never IMDSv1: every GET carries the session token, and a failed PUT is
//! an error, not a reason to try without one.
//!
//! Written on [`wicp_net::metadata`] rather than with the SDK's
//! `ImdsCredentialsProvider`: that client lives in `aws-config`, which this
//! crate leaves out on purpose (Cargo.toml), and its defaults (4 attempts,
//! 1 s connect, up to 30 s per operation, expired credentials extended by
//! 10 to 15 minutes) do not fit a process the kubelet kills at 60 s. Nothing
//! here is signed, so nothing of SigV4 is hand-rolled.

use serde_json::Value;

use super::sdk::AwsCredentials;
use wicp_base::deadline::Deadline;
use wicp_base::duration;
use wicp_base::error::{Error, Result, quote};
use wicp_base::secret::Secret;
use wicp_net::{self as net, http, metadata};

/// The session token's lifetime: it serves this one invocation, which the
/// kubelet ends within a minute.
const TOKEN_TTL_SECONDS: u32 = 60;

pub const TOKEN_PATH: &str = "/latest/api/token";
const CREDENTIALS_PATH: &str = "/latest/meta-data/iam/security-credentials/";
const TTL_HEADER: &str = "x-aws-ec2-metadata-token-ttl-seconds";
const TOKEN_HEADER: &str = "x-aws-ec2-metadata-token";

/// The instance profile's credentials and its role's name.
pub struct NodeCredentials {
    pub role: String,
    pub credentials: AwsCredentials,
}

/// Fetches the instance profile's credentials.
pub async fn fetch(
    service: &metadata::Service,
    net: &net::Settings,
    deadline: &Deadline,
) -> Result<NodeCredentials> {
    let client = metadata::client(service, net)?;
    let token = session_token(&client, service, deadline).await?;
    let mut header = reqwest::header::HeaderValue::from_str(token.expose()).map_err(|_| {
        Error::upstream(format!(
            "{} answered a session token that cannot be sent back in a header",
            service.name
        ))
        .fix("check that the endpoint is EC2's instance metadata service")
    })?;
    header.set_sensitive(true);
    let get = |path: String, what: &'static str| {
        let client = &client;
        let header = header.clone();
        async move {
            let url = service.url(&path);
            metadata::send(
                service,
                what,
                || client.get(&url).header(TOKEN_HEADER, header.clone()),
                metadata::transient,
                deadline,
            )
            .await
        }
    };
    let list = get(CREDENTIALS_PATH.to_string(), "the instance profile's role").await?;
    let role = role_name(service, &list)?;
    let reply = get(
        format!("{CREDENTIALS_PATH}{role}"),
        "the instance profile's credentials",
    )
    .await?;
    let credentials = credentials(service, &role, &reply)?;
    Ok(NodeCredentials { role, credentials })
}

async fn session_token(
    client: &http::Client,
    service: &metadata::Service,
    deadline: &Deadline,
) -> Result<Secret> {
    let url = service.url(TOKEN_PATH);
    let reply = metadata::send(
        service,
        "the IMDSv2 session token",
        || {
            client
                .request(reqwest::Method::PUT, &url)
                .header(TTL_HEADER, TOKEN_TTL_SECONDS.to_string())
        },
        metadata::transient,
        deadline,
    )
    .await?;
    let refused = |why: &str, fix: &str| {
        Error::upstream(format!(
            "{} at {} refused the IMDSv2 session token (HTTP {}, {}): {why}",
            service.name,
            service.base,
            reply.status,
            metadata::said(&reply)
        ))
        .fix(fix.to_string())
        .answered(service.name, reply.status, &reply.body)
    };
    match reply.status {
        200 => {}
        403 => {
            return Err(refused(
                "the instance metadata service is turned off on this instance",
                "turn it on (aws ec2 modify-instance-metadata-options --http-endpoint enabled), or use --fallback none",
            ));
        }
        _ => {
            return Err(refused(
                "IMDSv2 is required and no IMDSv1 request is ever made",
                "check that AWS_EC2_METADATA_SERVICE_ENDPOINT (if set) is an IMDSv2 endpoint",
            ));
        }
    }
    let text = std::str::from_utf8(&reply.body)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty() && t.len() <= 1024 && !t.chars().any(char::is_control))
        .ok_or_else(|| {
            Error::upstream(format!(
                "{} at {} answered the token PUT with something that is not a session token",
                service.name, service.base
            ))
            .fix("check that AWS_EC2_METADATA_SERVICE_ENDPOINT (if set) is EC2's instance metadata service")
            .answered(service.name, reply.status, &reply.body)
        })?;
    Ok(Secret::new(text))
}

/// IAM role names: 1 to 64 of `[A-Za-z0-9+=,.@_-]`. Anything else is not a
/// role name and never becomes part of a path.
fn is_role_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+=,.@_-".contains(c))
}

fn role_name(service: &metadata::Service, reply: &http::Reply) -> Result<String> {
    match reply.status {
        200 => {}
        404 => {
            return Err(Error::upstream(format!(
                "{} at {} lists no instance profile role (HTTP 404): no IAM role is attached to this instance",
                service.name, service.base
            ))
            .fix("attach an instance profile whose role may pull from ECR (AmazonEC2ContainerRegistryReadOnly), or use --fallback none")
            .answered(service.name, reply.status, &reply.body));
        }
        status => return Err(unexpected(service, "the role list", status, reply)),
    }
    let text = String::from_utf8_lossy(&reply.body);
    let name = text.lines().next().unwrap_or("").trim();
    if !is_role_name(name) {
        return Err(Error::upstream(format!(
            "{} at {} answered the role list with {}, which is not an IAM role name",
            service.name,
            service.base,
            quote(name)
        ))
        .fix("check that AWS_EC2_METADATA_SERVICE_ENDPOINT (if set) is EC2's instance metadata service")
        .answered(service.name, reply.status, &reply.body));
    }
    Ok(name.to_string())
}

fn unexpected(service: &metadata::Service, what: &str, status: u16, reply: &http::Reply) -> Error {
    let fix = match status {
        401 => {
            "the session token was refused; check that no proxy or iptables rule rewrites traffic to IMDS"
        }
        _ => {
            "check the instance's metadata options (aws ec2 describe-instances --query 'Reservations[].Instances[].MetadataOptions')"
        }
    };
    Error::upstream(format!(
        "{} at {} answered {what} with HTTP {status} ({})",
        service.name,
        service.base,
        metadata::said(reply)
    ))
    .fix(fix)
    .answered(service.name, reply.status, &reply.body)
}

/// A field of the credentials JSON, matched case-insensitively as the SDK
/// matches it.
fn field<'v>(object: &'v serde_json::Map<String, Value>, names: &[&str]) -> Option<&'v str> {
    object
        .iter()
        .find(|(k, _)| names.iter().any(|n| k.eq_ignore_ascii_case(n)))
        .and_then(|(_, v)| v.as_str())
}

/// Reads the role's credentials JSON.
pub fn credentials(
    service: &metadata::Service,
    role: &str,
    reply: &http::Reply,
) -> Result<AwsCredentials> {
    if reply.status != 200 {
        return Err(unexpected(
            service,
            &format!("the credentials of role {role}"),
            reply.status,
            reply,
        ));
    }
    let garbage = || {
        reply
            .unusable(
                service.name,
                format_args!("{service}, asked for the credentials of role {role},"),
                "a body that is not the credentials JSON",
            )
            .fix("check that AWS_EC2_METADATA_SERVICE_ENDPOINT (if set) is EC2's instance metadata service")
    };
    let value: Value = serde_json::from_slice(&reply.body).map_err(|_| garbage())?;
    let object = value.as_object().ok_or_else(garbage)?;
    // The secrets are registered for redaction before anything else is
    // looked at, so no message below can carry them.
    let secret_key = field(object, &["SecretAccessKey"]).map(Secret::new);
    let session = field(object, &["Token", "SessionToken"]).map(Secret::new);
    let code = field(object, &["Code"]).unwrap_or("Success");
    if code != "Success" {
        let message = field(object, &["Message"]).unwrap_or("");
        let fix = if code == "AssumeRoleUnauthorizedAccess" {
            format!(
                "EC2 cannot assume role {role}: give the role a trust policy that allows ec2.amazonaws.com (sts:AssumeRole)"
            )
        } else {
            format!("check the instance profile of this instance and its role {role}")
        };
        return Err(Error::upstream(format!(
            "{} at {} could not provide the credentials of role {role}: {code}{}",
            service.name,
            service.base,
            if message.is_empty() {
                String::new()
            } else {
                format!(": {}", wicp_base::redact::clean(message, 200))
            }
        ))
        .fix(fix));
    }
    let (Some(access_key_id), Some(secret_access_key), Some(session_token)) =
        (field(object, &["AccessKeyId"]), secret_key, session)
    else {
        return Err(garbage());
    };
    if access_key_id.is_empty()
        || secret_access_key.expose().is_empty()
        || session_token.expose().is_empty()
    {
        return Err(garbage());
    }
    let expires_at = match field(object, &["Expiration", "ExpiresAt"]) {
        Some(text) => Some(duration::parse_rfc3339(text).ok_or_else(|| {
            Error::upstream(format!(
                "{} at {} answered an Expiration that is not an RFC 3339 time: {}",
                service.name,
                service.base,
                quote(text)
            ))
            .fix("check that AWS_EC2_METADATA_SERVICE_ENDPOINT (if set) is EC2's instance metadata service")
        })?),
        None => return Err(garbage()),
    };
    Ok(AwsCredentials {
        access_key_id: access_key_id.to_string(),
        secret_access_key,
        session_token,
        expires_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> metadata::Service {
        let env = super::super::endpoints::Environment::default();
        super::super::endpoints::imds(&env).unwrap()
    }

    #[test]
    fn credentials_json_as_ec2_documents_it() {
        let body = r#"{"Code":"Success","LastUpdated":"2012-04-26T16:39:16Z","Type":"AWS-HMAC",
            "AccessKeyId":"ASIAEXAMPLE","SecretAccessKey":"node-secret-key-1","Token":"node-session-token-1",
            "Expiration":"2037-05-17T15:09:54Z"}"#;
        let c = credentials(&service(), "node-role", &http::reply(200, body)).unwrap();
        assert_eq!(c.access_key_id, "ASIAEXAMPLE");
        assert_eq!(c.secret_access_key.expose(), "node-secret-key-1");
        assert_eq!(
            c.expires_at,
            duration::parse_rfc3339("2037-05-17T15:09:54Z")
        );
        // Keys in another case, and ExpiresAt, as the SDK accepts them.
        let body = r#"{"accesskeyid":"A","secretaccesskey":"S","token":"T","ExpiresAt":"2037-05-17T15:09:54Z"}"#;
        assert!(credentials(&service(), "r", &http::reply(200, body)).is_ok());
    }

    #[test]
    fn refusals_and_garbage_are_explained_without_secrets() {
        let body = r#"{"Code":"AssumeRoleUnauthorizedAccess","Message":"EC2 cannot assume the role node-role.","LastUpdated":"2012-04-26T16:39:16Z"}"#;
        let e = credentials(&service(), "node-role", &http::reply(200, body))
            .unwrap_err()
            .to_string();
        assert!(e.contains("AssumeRoleUnauthorizedAccess"), "{e}");
        assert!(e.contains("ec2.amazonaws.com"), "{e}");
        for garbage in [
            "not json",
            "[]",
            r#"{"AccessKeyId":"A","SecretAccessKey":"S"}"#,
            r#"{"AccessKeyId":"A","SecretAccessKey":"S","Token":"T"}"#,
        ] {
            let e = credentials(&service(), "r", &http::reply(200, garbage))
                .unwrap_err()
                .to_string();
            assert!(e.contains("not the credentials JSON"), "{garbage}: {e}");
        }
        let body = r#"{"AccessKeyId":"A","SecretAccessKey":"very-secret-value-9","Token":"T","Expiration":"soon very-secret-value-9"}"#;
        let e = credentials(&service(), "r", &http::reply(200, body))
            .unwrap_err()
            .to_string();
        let shown = wicp_base::redact::redact(&e);
        assert!(!shown.contains("very-secret-value-9"), "{shown}");
    }

    #[test]
    fn role_names_are_checked_before_they_become_a_path() {
        assert!(is_role_name("eks-node-role_1+=,.@-"));
        for bad in [
            "",
            "../../latest/api/token",
            "a/b",
            "role name",
            &"r".repeat(65),
        ] {
            assert!(!is_role_name(bad), "{bad}");
        }
        let e = role_name(&service(), &http::reply(404, "Not Found"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no IAM role is attached"), "{e}");
        assert_eq!(
            role_name(&service(), &http::reply(200, "node-role\n")).unwrap(),
            "node-role"
        );
    }
}
