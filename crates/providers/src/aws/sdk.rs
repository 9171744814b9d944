//! The AWS API calls, through the official SDK clients: STS
//! AssumeRoleWithWebIdentity, ECR and ECR Public GetAuthorizationToken.
//!
//! Clients are built here, inside the exchange, never on a cache hit. The
//! SDK signs and parses; the network policy is the one every other upstream
//! call has, in one place ([`wicp_net`]):
//! - the requests go out on the invocation's shared HTTP client
//!   ([`wicp_net::sdk_connector`]): one trust store and verifier, the
//!   proxy settings, the per-attempt cap, replies bounded to 1 MiB;
//! - retries are [`http::with_retries`] (same attempts, backoff,
//!   `Retry-After` handling and deadline), with the SDK's own retries and
//!   timeouts turned off so the two cannot stack. The classification is
//!   [`http`]'s (connection failures, stalls, cut bodies, 429 and 5xx are
//!   transient; an untrusted certificate or a 4xx is not), plus AWS's
//!   throttling codes, which AWS sends with HTTP 400 where other services
//!   send 429.
//!
//! Upstream errors are reduced to their code and message, which AWS writes
//! for people; each code users actually hit gets its own remedy.

use std::time::Duration;

use aws_sdk_sts::config::BehaviorVersion;
use aws_sdk_sts::config::retry::RetryConfig;
use aws_sdk_sts::config::timeout::TimeoutConfig;
use aws_sdk_sts::error::{ProvideErrorMetadata, SdkError};

use super::endpoints::{Endpoint, Service};
use super::host::Registry;
use super::identity::RoleArn;
use wicp_base::deadline::Deadline;
use wicp_base::error::{Error, Fact, Result};
use wicp_base::redact;
use wicp_base::secret::Secret;
use wicp_kubelet::request::token::ServiceAccountToken;
use wicp_net::observe::Endpoint as Upstream;
use wicp_net::{self as net, http, sdk_connector};

/// The SDK behaviour we were written and tested against.
fn behavior_version() -> BehaviorVersion {
    BehaviorVersion::v2026_01_12()
}

fn app_name() -> Option<aws_sdk_sts::config::AppName> {
    aws_sdk_sts::config::AppName::new("wi-credential-provider").ok()
}

/// A client of one of the SDK crates (`aws_sdk_sts`, `aws_sdk_ecr`,
/// `aws_sdk_ecrpublic`: different types, the same builder), on the
/// invocation's HTTP client, with the SDK's retries and timeouts off
/// (ours apply), and optionally the credentials that sign its calls.
macro_rules! sdk_client {
    ($sdk:ident, $kind:expr, $net:expr, $deadline:expr, $region:expr, $endpoint:expr $(, $credentials:expr)?) => {{
        let http_client = sdk_connector::http_client($net.client($deadline)?, *$deadline, $kind);
        let mut config = $sdk::Config::builder()
            .behavior_version(behavior_version())
            .http_client(http_client)
            .region($sdk::config::Region::new($region.to_string()))
            .endpoint_url($endpoint.url.clone())
            .timeout_config(TimeoutConfig::disabled())
            .retry_config(RetryConfig::disabled());
        $(config = config.credentials_provider($credentials);)?
        if let Some(name) = app_name() {
            config = config.app_name(name);
        }
        $sdk::Client::from_conf(config.build())
    }};
}

/// `GetAuthorizationToken` with one of the two ECR SDK crates
/// (`aws_sdk_ecr`, `aws_sdk_ecrpublic`): different types, the same call and
/// the same answer once `$data` has picked its authorization data. Gives
/// the token and its expiry, each if the answer had it.
macro_rules! authorization_token {
    ($sdk:ident, $call:expr, $credentials:expr, $net:expr, $deadline:expr, |$output:ident| $data:expr) => {{
        let region = $call.registry.region();
        let client = sdk_client!(
            $sdk,
            Upstream::RegistryToken,
            $net,
            $deadline,
            region,
            $call.endpoint,
            $credentials
        );
        let name = $call.call_name();
        let (outcome, attempts) =
            with_retries(&name, $deadline, || client.get_authorization_token().send()).await?;
        let $output = outcome.map_err(|e| ecr_call_error(&e, $call, $net, attempts, $deadline))?;
        let data = $data;
        (
            data.and_then(|d| d.authorization_token()).map(Secret::new),
            data.and_then(|d| d.expires_at()).map(|t| t.secs()),
        )
    }};
}

/// Runs one SDK call (`send` makes a fresh request each time) under the
/// shared retry policy. Returns the last outcome and the attempts made.
async fn with_retries<O, E, Fut>(
    call: &http::Call,
    deadline: &Deadline,
    send: impl Fn() -> Fut,
) -> Result<(std::result::Result<O, SdkError<E>>, u32)>
where
    Fut: std::future::Future<Output = std::result::Result<O, SdkError<E>>>,
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    http::with_retries(call, deadline, send, |outcome| match outcome {
        Ok(_) => http::Verdict::Final,
        Err(e) => verdict(e),
    })
    .await
}

/// [`http`]'s classification, read from an SDK error.
fn verdict<E>(error: &SdkError<E>) -> http::Verdict
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let status = error.raw_response().map(|r| r.status().as_u16());
    let retry_after = error
        .raw_response()
        .and_then(|r| r.headers().get("retry-after"))
        .and_then(|v| http::parse_retry_after(v, std::time::SystemTime::now()));
    let transient = match error {
        SdkError::ServiceError(service) => {
            status.is_some_and(http::is_retryable_status)
                || service
                    .err()
                    .code()
                    .is_some_and(|code| is_throttling(code, status))
        }
        SdkError::ResponseError(_) => status.is_some_and(http::is_retryable_status),
        SdkError::TimeoutError(_) => true,
        SdkError::DispatchFailure(failure) => {
            (failure.is_io() || failure.is_timeout()) && http::certificate_error(error).is_none()
        }
        _ => false,
    };
    if !transient {
        return http::Verdict::Final;
    }
    http::Verdict::Retry {
        why: match (status, error.code()) {
            (Some(status), Some(code)) => format!("HTTP {status} {code}"),
            (Some(status), None) => format!("HTTP {status}"),
            _ => causes(error),
        },
        status,
        retry_after,
    }
}

/// Temporary AWS credentials: from STS, or from the Pod Identity Agent.
pub struct AwsCredentials {
    pub access_key_id: String,
    pub secret_access_key: Secret,
    pub session_token: Secret,
    /// Unix seconds, when the source said.
    pub expires_at: Option<i64>,
}

impl AwsCredentials {
    /// When they expire, for the log: a timestamp, or "an unknown time"
    /// when the source did not say.
    pub fn expiry(&self) -> String {
        self.expires_at.map_or_else(
            || "an unknown time".to_string(),
            wicp_base::duration::format_unix,
        )
    }
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("secret_access_key", &self.secret_access_key)
            .field("session_token", &self.session_token)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// One AssumeRoleWithWebIdentity call.
pub struct WebIdentity<'a> {
    pub role: &'a RoleArn,
    pub session_name: &'a str,
    pub duration: Duration,
    pub region: &'a str,
    pub endpoint: &'a Endpoint,
    pub token: &'a ServiceAccountToken,
}

impl WebIdentity<'_> {
    pub(crate) fn call_name(&self) -> http::Call {
        http::Call::new(
            Service::Sts.fact(),
            format!("STS AssumeRoleWithWebIdentity at {}", self.endpoint.url),
        )
    }
}

/// Trades the service account token for temporary credentials of the role.
/// The call is unsigned: no node credentials are read or needed.
pub async fn assume_role_with_web_identity(
    call: &WebIdentity<'_>,
    net: &net::Settings,
    deadline: &Deadline,
) -> Result<AwsCredentials> {
    let name = call.call_name();
    let client = sdk_client!(
        aws_sdk_sts,
        Upstream::TokenExchange,
        net,
        deadline,
        call.region,
        call.endpoint
    );
    let duration = i32::try_from(call.duration.as_secs()).unwrap_or(i32::MAX);
    let (outcome, attempts) = with_retries(&name, deadline, || {
        client
            .assume_role_with_web_identity()
            .role_arn(call.role.as_str())
            .role_session_name(call.session_name)
            .web_identity_token(call.token.secret().expose())
            .duration_seconds(duration)
            .send()
    })
    .await?;
    let output = outcome.map_err(|e| {
        let tried = tried(net, attempts);
        call_error(
            classify(&e),
            &name,
            Service::Sts.env_var(),
            deadline,
            &tried,
            |code, message, status| sts_error(code, message, status, call, &tried),
        )
    })?;
    let credentials = output.credentials().ok_or_else(|| {
        Error::upstream(format!("{} answered without credentials", call.call_name()))
            .fix("check that the endpoint is AWS STS (AWS_ENDPOINT_URL_STS / AWS_ENDPOINT_URL)")
            .with(Fact::Service(Service::Sts.fact()))
    })?;
    Ok(AwsCredentials {
        access_key_id: credentials.access_key_id().to_string(),
        secret_access_key: Secret::new(credentials.secret_access_key()),
        session_token: Secret::new(credentials.session_token()),
        expires_at: Some(credentials.expiration().secs()),
    })
}

/// Who the ECR call runs as, for messages.
pub struct EcrCall<'a> {
    pub registry: &'a Registry,
    pub endpoint: &'a Endpoint,
    /// "role arn:aws:iam::...:role/x" or "the Pod Identity association's role".
    pub principal: String,
}

impl EcrCall<'_> {
    pub fn service(&self) -> Service {
        match self.registry {
            Registry::Private(_) => Service::Ecr,
            Registry::Public => Service::EcrPublic,
        }
    }

    pub fn call_name(&self) -> http::Call {
        http::Call::new(
            self.service().fact(),
            format!(
                "{} GetAuthorizationToken at {}",
                self.service().name(),
                self.endpoint.url
            ),
        )
    }
}

/// A registry login: the decoded ECR authorization token.
pub struct Login {
    pub username: String,
    pub password: Secret,
    /// Unix seconds, when ECR said.
    pub expires_at: Option<i64>,
}

/// Asks ECR (or ECR Public) for a registry login with `credentials`.
pub async fn get_authorization_token(
    call: &EcrCall<'_>,
    credentials: &AwsCredentials,
    net: &net::Settings,
    deadline: &Deadline,
) -> Result<Login> {
    // No expiry is passed to the SDK: we track it ourselves, and the SDK
    // would refuse credentials a skewed clock says have expired.
    let sdk_credentials = aws_sdk_ecr::config::Credentials::new(
        credentials.access_key_id.clone(),
        credentials.secret_access_key.expose(),
        Some(credentials.session_token.expose().to_string()),
        None,
        "wi-credential-provider",
    );
    let (token, expires_at) = match call.registry {
        Registry::Private(_) => authorization_token!(
            aws_sdk_ecr,
            call,
            sdk_credentials,
            net,
            deadline,
            |output| { output.authorization_data().first() }
        ),
        Registry::Public => authorization_token!(
            aws_sdk_ecrpublic,
            call,
            sdk_credentials,
            net,
            deadline,
            |output| { output.authorization_data() }
        ),
    };
    let unusable = |what: String| {
        Error::upstream(format!("{} {what}", call.call_name()))
            .fix(format!(
                "check that the endpoint is AWS {} ({} / AWS_ENDPOINT_URL)",
                call.service().name(),
                call.service().env_var()
            ))
            .with(Fact::Service(call.service().fact()))
    };
    let token = token.ok_or_else(|| unusable("answered without an authorization token".into()))?;
    let (username, password) = decode_authorization_token(&token)
        .map_err(|why| unusable(format!("returned an authorization token that {why}")))?;
    Ok(Login {
        username,
        password,
        expires_at,
    })
}

/// Decodes an ECR authorization token: base64 of `user:password`, split on
/// the first colon (the password may contain more). Errors never include
/// the token.
fn decode_authorization_token(
    token: &Secret,
) -> std::result::Result<(String, Secret), &'static str> {
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token.expose().trim())
        .map_err(|_| "is not base64")?;
    let text = Secret::new(String::from_utf8(decoded).map_err(|_| "is not UTF-8 text")?);
    let (user, password) = text
        .expose()
        .split_once(':')
        .ok_or("has no user:password separator")?;
    if user.is_empty() || password.is_empty() {
        return Err("has an empty user name or password");
    }
    Ok((user.to_string(), Secret::new(password)))
}

/// What went wrong with an SDK call, reduced to what messages need.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// AWS answered with an error code.
    Service {
        code: String,
        message: String,
        status: Option<u16>,
    },
    /// An attempt ran out of time.
    Timeout,
    /// The reply was larger than any AWS reply we read.
    TooLarge(String),
    /// No connection (DNS, refused, TLS, proxy).
    Unreachable(String),
    /// The server's certificate is not trusted (no CA vouches for it), or
    /// the trust store could not be loaded.
    Untrusted(http::Untrusted),
    /// An answer that is not the service's protocol.
    Garbled { status: Option<u16>, detail: String },
    /// The request could not be built (a bug or a bad input).
    Other(String),
}

fn classify<E>(error: &SdkError<E>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let status = error.raw_response().map(|r| r.status().as_u16());
    match error {
        SdkError::ServiceError(service) => {
            let e = service.err();
            match e.code() {
                Some(code) => Failure::Service {
                    code: code.to_string(),
                    message: e.message().unwrap_or_default().to_string(),
                    status,
                },
                // An answer the SDK could not read an error code from is
                // not an AWS service speaking.
                None => Failure::Garbled {
                    status,
                    detail: causes(error),
                },
            }
        }
        SdkError::TimeoutError(_) => Failure::Timeout,
        SdkError::DispatchFailure(failure) => {
            if let Some(untrusted) = http::certificate_error(error) {
                Failure::Untrusted(untrusted)
            } else if let Some(large) = too_large(error) {
                Failure::TooLarge(large.to_string())
            } else if failure.is_timeout() {
                Failure::Timeout
            } else {
                Failure::Unreachable(causes(error))
            }
        }
        SdkError::ResponseError(_) => Failure::Garbled {
            status,
            detail: causes(error),
        },
        _ => Failure::Other(causes(error)),
    }
}

/// The causes of an error, outermost first, without the SDK's own
/// top-level label ("dispatch failure") and without repeats.
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = error.source();
    while let Some(e) = next {
        let text = e.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    if parts.is_empty() {
        parts.push(error.to_string());
    }
    parts.join(": ").replace(['\n', '\r'], " ")
}

/// The body bound of [`sdk_connector`], if that is what ended the call.
fn too_large<'e>(
    error: &'e (dyn std::error::Error + 'static),
) -> Option<&'e sdk_connector::BodyTooLarge> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(large) = e.downcast_ref::<sdk_connector::BodyTooLarge>() {
            return Some(large);
        }
        next = e.source();
    }
    None
}

/// How a failed call went, for its message.
struct Tried {
    pub attempts: u32,
    /// The proxy settings (credentials hidden), when any are set.
    pub proxies: Option<String>,
}

fn tried(net: &net::Settings, attempts: u32) -> Tried {
    Tried {
        attempts,
        proxies: net.proxies().describe(),
    }
}

fn is_throttling(code: &str, status: Option<u16>) -> bool {
    matches!(
        code,
        "Throttling" | "ThrottlingException" | "TooManyRequestsException" | "RequestLimitExceeded"
    ) || status == Some(429)
}

/// The error for a failed `call`: AWS's own refusal (its code, message
/// and HTTP status) as `refused` explains it for this call, everything
/// else (time, transport, trust, garbled answers; `var` names the endpoint
/// variable) the same way for every call.
fn call_error(
    failure: Failure,
    call: &http::Call,
    var: &str,
    deadline: &Deadline,
    tried: &Tried,
    refused: impl FnOnce(&str, &str, Option<u16>) -> Error,
) -> Error {
    let attempts = tried.attempts;
    let error = match failure {
        Failure::Timeout if deadline.remaining() < Duration::from_secs(1) => {
            http::deadline_exceeded(deadline, call)
        }
        Failure::Timeout => Error::network(format!(
            "{call} did not answer within {}s per attempt, {attempts} attempt(s)",
            http::ATTEMPT_TIMEOUT.as_secs()
        ))
        .fix(format!(
            "check that the node can reach the endpoint (proxy via HTTPS_PROXY/NO_PROXY, firewall, VPC endpoint; {var})"
        )),
        Failure::Untrusted(untrusted) => http::untrusted_certificate(call, untrusted),
        Failure::Unreachable(detail) => Error::network(format!(
            "cannot reach {call} after {attempts} attempt(s): {detail}{}",
            tried
                .proxies
                .as_deref()
                .map(|p| format!(" (proxy settings: {p})"))
                .unwrap_or_default()
        ))
        .fix(format!(
            "check DNS and routing from the node to the endpoint (HTTPS_PROXY/NO_PROXY, firewall, VPC endpoint), or set {var}"
        )),
        Failure::TooLarge(detail) => Error::upstream(format!("{call} failed: {detail}")).fix(format!(
            "check that {var} (or AWS_ENDPOINT_URL) points at the AWS service, and that no proxy rewrites the answer"
        )),
        Failure::Garbled { status, detail } => {
            let error = Error::upstream(format!(
                "{call} answered{} with something that is not an AWS response: {}",
                status.map(|s| format!(" HTTP {s}")).unwrap_or_default(),
                redact::clean(&detail, MAX_MESSAGE_CHARS)
            ))
            .fix(format!(
                "check that {var} (or AWS_ENDPOINT_URL) points at the AWS service, and that no proxy rewrites the answer"
            ));
            with_status(error, status)
        }
        Failure::Other(detail) => Error::internal(format!("{call} failed: {detail}"))
            .fix("report this with the message; it is not an upstream refusal"),
        Failure::Service {
            code,
            message,
            status,
        } => with_status(refused(&code, &message, status), status),
    };
    error.with(Fact::Service(call.service))
}

fn with_status(error: Error, status: Option<u16>) -> Error {
    match status {
        Some(status) => error.with(Fact::Status(status)),
        None => error,
    }
}

/// How much of an AWS error message is repeated.
const MAX_MESSAGE_CHARS: usize = 300;

/// An AWS error message, cleaned for the log line: AWS writes these for
/// people (`Not authorized to perform sts:AssumeRoleWithWebIdentity`), but
/// whatever answers at an overridden endpoint could echo anything.
fn cleaned(message: &str) -> String {
    format!("{:?}", redact::clean(message, MAX_MESSAGE_CHARS))
}

/// What AWS said, for the log line: the code and its cleaned message
/// (`AccessDenied: "Not authorized ..."`), or the code alone.
fn said(code: &str, message: &str) -> String {
    if message.is_empty() {
        code.to_string()
    } else {
        format!("{code}: {}", cleaned(message))
    }
}

/// The issuer URL without scheme, as IAM names OIDC providers.
fn provider_id(issuer: &str) -> &str {
    issuer.strip_prefix("https://").unwrap_or(issuer)
}

/// Explains an STS refusal with the trust-policy facts the admin needs.
fn sts_error(
    code: &str,
    message: &str,
    status: Option<u16>,
    call: &WebIdentity<'_>,
    tried: &Tried,
) -> Error {
    let claims = call.token.claims();
    let sa = &claims.service_account;
    let issuer = provider_id(&claims.issuer);
    let audiences = claims.audiences.join(", ");
    let role = call.role;
    let provider_arn = format!(
        "arn:{}:iam::{}:oidc-provider/{issuer}",
        role.partition(),
        role.account()
    );
    let said = said(code, message);
    let what = |summary: &str| {
        Error::upstream(format!(
            "STS refused to let service account {sa} assume role {role} ({summary}); STS said {said}"
        ))
    };
    match code {
        "AccessDenied" => what("the role's trust policy does not allow this token").fix(format!(
            "the trust policy of {role} must allow sts:AssumeRoleWithWebIdentity for the federated principal {provider_arn} \
             with the conditions {issuer}:sub = system:serviceaccount:{}:{} and {issuer}:aud = {audiences} (the token's audience)",
            sa.namespace, sa.name
        )),
        "InvalidIdentityToken" => what("the token's issuer is not trusted by IAM").fix(format!(
            "register the cluster's issuer {} as an IAM OIDC identity provider ({provider_arn}) with client ID {audiences}; \
             if it is registered, its /.well-known/openid-configuration and JWKS must be reachable by STS over public HTTPS",
            claims.issuer
        )),
        "ExpiredToken" | "ExpiredTokenException" => what("the token has expired").fix(
            "check the node's clock (NTP): the kubelet mints a fresh token for each pull, so STS seeing it expired means the node's time is off",
        ),
        "IDPRejectedClaim" => what("the identity provider rejected a claim").fix(format!(
            "check the OIDC provider {provider_arn}: its client IDs must include {audiences}"
        )),
        "IDPCommunicationError" => what("STS could not fetch the issuer's keys").fix(format!(
            "the issuer {}'s /.well-known/openid-configuration and JWKS must be reachable by STS over public HTTPS; retry once they are",
            claims.issuer
        )),
        "RegionDisabledException" => what(&format!("STS is not activated in region {}", call.region)).fix(format!(
            "activate STS for {} in the IAM account settings, or set AWS_ENDPOINT_URL_STS to the STS endpoint of an active region",
            call.region
        )),
        "ValidationError" if message.contains("DurationSeconds") || message.contains("MaxSessionDuration") => {
            what("the requested session is longer than the role allows").fix(format!(
                "lower --aws-session-duration (now {}s), or raise the role's maximum session duration",
                call.duration.as_secs()
            ))
        }
        c if is_throttling(c, status) => Error::upstream(format!(
            "STS throttled AssumeRoleWithWebIdentity for service account {sa} after {} attempt(s); STS said {said}",
            tried.attempts
        ))
        .fix("let the kubelet cache credentials longer (tokenAttributes.cacheType: ServiceAccount, a larger --max-cache-duration), or ask AWS to raise the STS request quota"),
        _ => what("see the code").fix(format!(
            "look up STS error {code} for AssumeRoleWithWebIdentity; the role is {role}, the session {}",
            call.session_name
        )),
    }
}

/// The error for a failed `GetAuthorizationToken` (ECR or ECR Public).
fn ecr_call_error<E>(
    error: &SdkError<E>,
    call: &EcrCall<'_>,
    net: &net::Settings,
    attempts: u32,
    deadline: &Deadline,
) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let tried = tried(net, attempts);
    let var = call.service().env_var();
    call_error(
        classify(error),
        &call.call_name(),
        var,
        deadline,
        &tried,
        |code, message, status| ecr_error(code, message, status, call, &tried),
    )
}

/// Explains an ECR refusal.
fn ecr_error(
    code: &str,
    message: &str,
    status: Option<u16>,
    call: &EcrCall<'_>,
    tried: &Tried,
) -> Error {
    let name = call.call_name();
    let said = said(code, message);
    let principal = &call.principal;
    let public = matches!(call.registry, Registry::Public);
    match code {
        "AccessDeniedException" | "AccessDenied" => {
            let fix = if public {
                format!(
                    "allow ecr-public:GetAuthorizationToken and sts:GetServiceBearerToken for {principal} \
                     (the managed policy AmazonElasticContainerRegistryPublicReadOnly has both)"
                )
            } else {
                format!(
                    "allow ecr:GetAuthorizationToken (Resource \"*\") for {principal}, plus ecr:BatchGetImage and \
                     ecr:GetDownloadUrlForLayer on the repositories (the managed policy AmazonEC2ContainerRegistryReadOnly has them)"
                )
            };
            Error::upstream(format!(
                "{name} was denied for {principal}; {} said {said}",
                call.service().name()
            ))
            .fix(fix)
        }
        "UnrecognizedClientException" | "InvalidClientTokenId" | "InvalidSignatureException"
        | "ExpiredTokenException" | "SignatureDoesNotMatch" => Error::upstream(format!(
            "{name} did not accept the temporary credentials of {principal}; {} said {said}",
            call.service().name()
        ))
        .fix("check the node's clock (NTP), and that the credentials come from the registry's partition (AWS_ENDPOINT_URL_STS must not point at another partition)"),
        c if is_throttling(c, status) => Error::upstream(format!(
            "{} throttled GetAuthorizationToken after {} attempt(s); it said {said}",
            call.service().name(),
            tried.attempts
        ))
        .fix("let the kubelet cache credentials longer (tokenAttributes.cacheType: ServiceAccount, a larger --max-cache-duration); GetAuthorizationToken allows about 20 calls per second per account and region"),
        _ => Error::upstream(format!(
            "{name} failed for {principal}; {} said {said}",
            call.service().name()
        ))
        .fix(format!("look up {} error {code} for GetAuthorizationToken", call.service().name())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn encode(text: &str) -> Secret {
        Secret::new(base64::engine::general_purpose::STANDARD.encode(text))
    }

    #[test]
    fn an_aws_refusal_records_the_call_and_status() {
        let deadline = Deadline::after(Duration::from_secs(10));
        let tried = Tried {
            attempts: 1,
            proxies: None,
        };
        let refusal = |status| Failure::Service {
            code: "AccessDenied".into(),
            message: "Not authorized".into(),
            status,
        };
        let explain = |code: &str, _: &str, _: Option<u16>| Error::upstream(code.to_string());
        let sts = http::Call::new(
            "AWS STS",
            "STS AssumeRoleWithWebIdentity at https://sts.test",
        );
        let e = call_error(
            refusal(Some(403)),
            &sts,
            "AWS_ENDPOINT_URL_STS",
            &deadline,
            &tried,
            explain,
        );
        assert_eq!(e.kind(), wicp_base::error::Kind::Upstream);
        assert_eq!(e.service(), Some("AWS STS"));
        assert_eq!(e.status(), Some(403));
        let e = call_error(refusal(None), &sts, "X", &deadline, &tried, explain);
        assert_eq!(e.status(), None);
        let unreachable = Failure::Unreachable("connection refused".into());
        let e = call_error(unreachable, &sts, "X", &deadline, &tried, explain);
        assert_eq!(e.kind(), wicp_base::error::Kind::Network);
        assert_eq!(e.service(), Some("AWS STS"), "a transport failure too");
    }

    #[test]
    fn authorization_tokens_split_on_the_first_colon() {
        let (user, password) = decode_authorization_token(&encode("AWS:abc:def==")).unwrap();
        assert_eq!(user, "AWS");
        assert_eq!(password.expose(), "abc:def==");
        let (user, password) =
            decode_authorization_token(&encode("AWS:123456789012-auth-token")).unwrap();
        assert_eq!(user, "AWS");
        assert_eq!(password.expose(), "123456789012-auth-token");
    }

    #[test]
    fn malformed_authorization_tokens_say_why_without_the_token() {
        for (token, why) in [
            (Secret::new("!!!not base64!!!"), "is not base64"),
            (encode("AWS-no-separator"), "has no user:password separator"),
            (encode(":password"), "has an empty user name or password"),
            (encode("AWS:"), "has an empty user name or password"),
            (
                Secret::new(
                    base64::engine::general_purpose::STANDARD.encode([0xff, 0xfe, b':', b'x']),
                ),
                "is not UTF-8 text",
            ),
        ] {
            assert_eq!(decode_authorization_token(&token).err(), Some(why));
        }
    }

    #[test]
    fn throttling_codes() {
        for code in [
            "Throttling",
            "ThrottlingException",
            "TooManyRequestsException",
        ] {
            assert!(is_throttling(code, Some(400)));
        }
        assert!(is_throttling("Whatever", Some(429)));
        assert!(!is_throttling("AccessDenied", Some(403)));
    }

    #[test]
    fn credentials_debug_hides_secrets() {
        let c = AwsCredentials {
            access_key_id: "ASIAEXAMPLEKEYID".into(),
            secret_access_key: Secret::new("very-secret-key-material"),
            session_token: Secret::new("very-secret-session-token"),
            expires_at: Some(1),
        };
        let shown = format!("{c:?}");
        assert!(!shown.contains("very-secret"), "{shown}");
        assert!(!shown.contains("ASIAEXAMPLEKEYID"), "{shown}");
    }
}
