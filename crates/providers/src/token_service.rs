//! What the vendor token services share: JFrog's OIDC token exchange,
//! Quay's robot federation and Cloudsmith's OpenID endpoint.
//!
//! Each takes the service account token at an endpoint the admin configured
//! and answers with a registry password. The three differ in their wire
//! formats (kept in their own modules) but not in what we do around them,
//! which lives here once:
//!
//! - identities come from annotations, ours first and then an established
//!   plugin's key, each checked by an anchored pattern ([`identity`]);
//! - a JSON POST carries no header but `Content-Type` ([`post_json`]);
//! - the vendor's error body is reduced to a code and a message, cleaned by
//!   [`wicp_base::redact`], and the refusal names the service, the HTTP status
//!   and a fix ([`refused`]);
//! - the credential's expiry comes from `expires_in` or the returned JWT's
//!   `exp`, whichever ends first, and a credential already expired is an
//!   error ([`expiry`]).

use std::sync::{Arc, LazyLock};

use regex_lite::Regex;

use crate::Input;
use crate::{Context, Credential, Plan, Provider, oauth};
use wicp_base::deadline::Deadline;
use wicp_base::error::{Error, Fact, Result, quote};
use wicp_base::flags::FlagSpec;
use wicp_base::secret::Secret;
use wicp_net::{
    self as net,
    http::{self, Reply},
};

/// One vendor token service as configured by the admin, for messages.
#[derive(Clone, Debug)]
pub struct Service {
    /// The vendor, as admins know it ("JFrog").
    pub vendor: &'static str,
    /// The flag that sets the endpoint, for fixes.
    pub endpoint_flag: &'static FlagSpec,
    /// The full URL the token is sent to.
    pub url: String,
    /// The lifetime the vendor documents for the credential it issues,
    /// assumed when its answer says none ([`expiry`]).
    pub lifetime_secs: i64,
    /// How the process reaches upstreams (proxies, trust store).
    pub net: Arc<net::Settings>,
}

impl Service {
    /// The `vendor`'s token service at `path` below the base URL the admin
    /// gave with `flag` (`base`, checked by the endpoint rules every
    /// provider follows), issuing credentials that live `lifetime_secs`
    /// unless the answer says otherwise.
    pub fn at(
        vendor: &'static str,
        flag: &'static FlagSpec,
        base: &str,
        path: &str,
        lifetime_secs: i64,
        net: Arc<net::Settings>,
    ) -> Result<Self> {
        let base = http::endpoint_override(flag, base)?;
        Ok(Service {
            vendor,
            endpoint_flag: flag,
            url: format!("{base}{path}"),
            lifetime_secs,
            net,
        })
    }

    /// `the JFrog token exchange at https://...`, naming the call in
    /// transport and deadline errors; the vendor is its `service` fact.
    pub fn call(&self) -> http::Call {
        http::Call::new(
            self.vendor,
            format!("the {} token exchange at {}", self.vendor, self.url),
        )
    }
}

/// Sends `body` as JSON with `POST` within the deadline, with no
/// `Authorization` header: the service account token in the body is the
/// only credential.
pub(crate) fn post_json(
    service: &Service,
    body: &serde_json::Value,
    deadline: &Deadline,
) -> Result<Reply> {
    call(service, deadline, |client| async move {
        send_json(&client, service, body, deadline).await
    })
}

/// Sends a `GET` within the deadline, with `password` (the service
/// account token) as the HTTP Basic password of `username`: Quay's robot
/// federation, whose endpoint reads nothing else.
pub(crate) fn get_basic(
    service: &Service,
    username: &str,
    password: &Secret,
    deadline: &Deadline,
) -> Result<Reply> {
    call(service, deadline, |client| async move {
        http::send(
            &client,
            wicp_net::observe::Endpoint::TokenExchange,
            || {
                client
                    .get(&service.url)
                    .basic_auth(username, Some(password.expose()))
                    .header(reqwest::header::ACCEPT, "application/json")
            },
            &service.call(),
            deadline,
        )
        .await
    })
}

async fn send_json(
    client: &http::Client,
    service: &Service,
    body: &serde_json::Value,
    deadline: &Deadline,
) -> Result<Reply> {
    let bytes = serde_json::to_vec(body)
        .map_err(|e| Error::internal(format!("cannot encode the request body: {e}")))?;
    http::send(
        client,
        wicp_net::observe::Endpoint::TokenExchange,
        || {
            client
                .post(&service.url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header(reqwest::header::ACCEPT, "application/json")
                .body(bytes.clone())
        },
        &service.call(),
        deadline,
    )
    .await
}

/// The parts of a vendor error body we repeat: an identifier-like code and
/// a message, never the rest of the body.
#[derive(Debug, Default, PartialEq, Eq)]
struct VendorError {
    pub code: Option<String>,
    pub message: Option<String>,
}

/// Reads the error shapes these services use:
/// - JFrog Access: `{"errors":[{"code":"UNAUTHORIZED","message":"..."}]}`;
/// - OAuth (RFC 6749 §5.2): `{"error":"invalid_grant","error_description":"..."}`;
/// - Quay: `{"error":"<reason in words>"}`;
/// - Cloudsmith (Django REST framework): `{"detail":"...","code":"..."}`.
fn vendor_error(body: &[u8]) -> Option<VendorError> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let text = |v: Option<&serde_json::Value>| {
        v.and_then(serde_json::Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let found = if let Some(first) = value
        .get("errors")
        .and_then(serde_json::Value::as_array)
        .and_then(|a| a.first())
    {
        VendorError {
            code: text(first.get("code")).or_else(|| {
                first
                    .get("status")
                    .and_then(serde_json::Value::as_u64)
                    .map(|s| s.to_string())
            }),
            message: text(first.get("message")),
        }
    } else if let Some(error) = text(value.get("error")) {
        // An OAuth code is an identifier; Quay puts a sentence here.
        if oauth::is_code(&error) {
            VendorError {
                code: Some(error),
                message: text(value.get("error_description")),
            }
        } else {
            VendorError {
                code: None,
                message: Some(error),
            }
        }
    } else if let Some(detail) = text(value.get("detail")) {
        VendorError {
            code: text(value.get("code")),
            message: Some(detail),
        }
    } else {
        return None;
    };
    let code = found.code.filter(|c| oauth::is_code(c));
    (code.is_some() || found.message.is_some()).then_some(VendorError {
        code,
        message: found.message,
    })
}

/// `HTTP 401 UNAUTHORIZED: "message"`, or the body's shape when it is not a
/// vendor error.
pub fn describe(reply: &Reply) -> String {
    match vendor_error(&reply.body) {
        Some(VendorError { code, message }) => {
            oauth::summary(reply.status, code.as_deref(), message.as_deref())
        }
        None => format!(
            "HTTP {} ({})",
            reply.status,
            wicp_base::redact::body_shape(&reply.body)
        ),
    }
}

/// The error for a reply that is not a success. `fix` is the vendor's
/// advice for a refusal of this request (401, 403, 404, 400); throttling
/// and outages get the same advice everywhere.
pub fn refused(service: &Service, reply: &Reply, fix: impl FnOnce(u16) -> String) -> Error {
    let fix = if http::is_retryable_status(reply.status) {
        http::retries_spent(service.vendor, "the service's status")
    } else {
        fix(reply.status)
    };
    Error::upstream(format!(
        "{} {} the token exchange at {}: {}",
        service.vendor,
        wicp_base::redact::verb(reply.status),
        service.url,
        describe(reply)
    ))
    .fix(fix)
    .answered(service.vendor, reply.status, &reply.body)
}

/// The error for a success whose body is not what the service documents.
pub fn malformed(service: &Service, reply: &Reply, why: &str) -> Error {
    reply.unusable(service.vendor, service.call(), why).fix(format!(
        "check that {} points at {}'s own endpoint; a proxy or captive portal may be answering instead",
        service.endpoint_flag, service.vendor
    ))
}

/// The plan of an exchange with a token service for `cx`: keyed by the
/// registry, its inputs the registry, the service's URL and then
/// `identity` (what names the identity and shapes the token), its network
/// step `exchange`.
pub fn plan<'a>(
    provider: &'static Provider,
    cx: &Context<'a>,
    service: &Service,
    identity: impl IntoIterator<Item = Input>,
    exchange: impl FnOnce(&Deadline) -> Result<Credential> + 'a,
) -> Plan<'a> {
    let mut inputs = vec![
        Input::setting("registry", cx.image.registry().to_string()),
        Input::setting("token_url", service.url.clone()),
    ];
    inputs.extend(identity);
    Plan::for_registry(provider, cx.image, inputs, exchange)
}

/// Runs one exchange on the shared HTTP client within the deadline:
/// `send` gets the client and returns the reply.
pub fn call<F>(
    service: &Service,
    deadline: &Deadline,
    send: impl FnOnce(http::Client) -> F,
) -> Result<Reply>
where
    F: std::future::Future<Output = Result<Reply>>,
{
    http::block_on(deadline, service.call(), async {
        let client = service.net.client(deadline)?;
        send(client).await
    })
}

/// Reads a reply that should carry the credential in the string field
/// `name`: a refusal (with `fix` for the vendor's 4xx), a body that is not
/// JSON, or one without the field is an error. Returns the body, for the
/// other fields, and the credential.
pub(crate) fn read_token(
    service: &Service,
    reply: &Reply,
    name: &str,
    fix: impl FnOnce(u16) -> String,
) -> Result<(serde_json::Value, Secret)> {
    if !reply.is_success() {
        return Err(refused(service, reply, fix));
    }
    reply
        .token_field(name)
        .map_err(|why| malformed(service, reply, &why))
}

/// A non-empty string field of a success body.
pub fn field(value: &serde_json::Value, name: &str) -> Option<String> {
    value
        .get(name)
        .and_then(serde_json::Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The credential of a success that carries it in the string field
/// `name` and says nothing else: pulled as `username`, until the issued
/// token's own `exp` or the vendor's documented lifetime. A refusal gets
/// `fix` for the vendor's 4xx, as in [`read_token`].
pub fn issued(
    service: &Service,
    reply: &Reply,
    now: i64,
    name: &str,
    username: String,
    fix: impl FnOnce(u16) -> String,
) -> Result<Credential> {
    let (_, password) = read_token(service, reply, name, fix)?;
    credential(service, now, username, password, None)
}

/// The registry credential a service returned: `username` with the
/// `password` it issued, until [`expiry`] says.
pub fn credential(
    service: &Service,
    now: i64,
    username: String,
    password: Secret,
    expires_in: Option<i64>,
) -> Result<Credential> {
    let expires_at = expiry(service, now, expires_in, &password)?;
    Ok(Credential {
        username,
        password,
        expires_at,
    })
}

/// When a returned credential stops working, seen at `now`: the earlier of
/// `expires_in` and the token's own `exp` (read without verifying: the
/// service verifies its own token, we only need to know how long to cache
/// it). With neither, the service's documented lifetime.
/// A credential already expired is an error: the clocks disagree, or the
/// service is misconfigured, and a pull with it would fail anyway.
pub fn expiry(service: &Service, now: i64, expires_in: Option<i64>, token: &Secret) -> Result<i64> {
    let fallback_secs = service.lifetime_secs;
    let by_field = expires_in.map(|s| now.saturating_add(s));
    let by_claim = wicp_kubelet::request::token::unverified_expiry(token.expose());
    let expires_at = match (by_field, by_claim) {
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => {
            wicp_base::log::debug!(
                "{} gave no expiry for the credential; assuming its documented lifetime of {fallback_secs}s",
                service.vendor
            );
            now.saturating_add(fallback_secs)
        }
    };
    if expires_at <= now {
        return Err(Error::upstream(format!(
            "{} returned a credential that expired at {}, before it was used",
            service.call(),
            wicp_base::duration::format_unix(expires_at)
        ))
        .with(Fact::Service(service.vendor))
        .fix(format!(
            "check the node's clock (NTP) and the token lifetime configured in {}",
            service.vendor
        )));
    }
    Ok(expires_at)
}

/// An anchored pattern for one kind of identity.
pub struct Pattern {
    regex: LazyLock<Option<Regex>>,
    /// The form in words, for messages.
    pub form: &'static str,
}

impl Pattern {
    pub const fn new(form: &'static str, build: fn() -> Option<Regex>) -> Self {
        Pattern {
            regex: LazyLock::new(build),
            form,
        }
    }

    /// Whether the whole of `value` has the form (the regexes are written
    /// with `^...$`).
    pub fn matches(&self, value: &str) -> bool {
        self.regex.as_ref().is_some_and(|re| re.is_match(value))
    }
}

/// The identity the service account names: the first of `keys` (ours,
/// then an established plugin's) with a non-empty value, which must have
/// the pattern's form. A malformed value is an error naming its key, never
/// a reason to try the next key. `None` when no key is set.
pub fn identity(
    cx: &Context<'_>,
    keys: &[&'static str],
    pattern: &Pattern,
    what: &str,
) -> Result<Option<(&'static str, String)>> {
    for key in keys {
        let Some(value) = cx.annotation(key) else {
            continue;
        };
        // Not trimmed: a value with a stray newline or space is refused as
        // written, so what is checked is exactly what would be sent.
        if !pattern.matches(value) {
            return Err(Error::annotation_key(
                key,
                format!(
                    "annotation {key} is {}, not a {what} ({})",
                    quote(value),
                    pattern.form
                ),
            )
            .fix(format!(
                "set {key} to the {what}; an annotation names an identity, never a host or a path"
            )));
        }
        return Ok(Some((key, value.to_string())));
    }
    Ok(None)
}

/// The identity the service account must name ([`identity`]), or the
/// error that says which annotation to set: `value` is what to write in
/// it, for the fix.
pub fn required_identity(
    cx: &Context<'_>,
    keys: &[&'static str],
    pattern: &Pattern,
    what: &str,
    value: &str,
) -> Result<(&'static str, String)> {
    identity(cx, keys, pattern, what)?.ok_or_else(|| {
        let (first, others) = keys.split_first().map_or(("", &[][..]), |(f, o)| (*f, o));
        let others: String = others.iter().map(|k| format!(" (or {k})")).collect();
        Error::annotation_key(first, format!(
            "the service account has no {first}{others} annotation naming the {what}"
        ))
        .fix(format!(
            "annotate the service account with {first}: {value}, and list the key in the provider entry's \
             tokenAttributes.optionalServiceAccountAnnotationKeys"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wicp_net::http::reply;

    static ACME_URL: FlagSpec = FlagSpec {
        long: "acme-url",
        env: "WICP_ACME_URL",
        takes: wicp_base::flags::Takes::One,
        value: "VALUE",
        default: "",
        help: "",
    };

    fn service() -> Service {
        Service {
            vendor: "Acme",
            endpoint_flag: &ACME_URL,
            url: "https://acme.example/token".into(),
            lifetime_secs: 3600,
            net: Arc::default(),
        }
    }

    #[test]
    fn vendor_errors_in_every_shape() {
        let e = |b: &str| vendor_error(b.as_bytes());
        assert_eq!(
            e(r#"{"errors":[{"code":"UNAUTHORIZED","message":"Bad credentials"}]}"#),
            Some(VendorError {
                code: Some("UNAUTHORIZED".into()),
                message: Some("Bad credentials".into())
            })
        );
        assert_eq!(
            e(r#"{"errors":[{"status":403,"message":"Forbidden"}]}"#),
            Some(VendorError {
                code: Some("403".into()),
                message: Some("Forbidden".into())
            })
        );
        assert_eq!(
            e(r#"{"error":"invalid_grant","error_description":"expired"}"#),
            Some(VendorError {
                code: Some("invalid_grant".into()),
                message: Some("expired".into())
            })
        );
        assert_eq!(
            e(r#"{"error":"Invalid robot"}"#),
            Some(VendorError {
                code: None,
                message: Some("Invalid robot".into())
            })
        );
        assert_eq!(
            e(r#"{"detail":"OIDC token cannot be authenticated.","code":"permission_denied"}"#),
            Some(VendorError {
                code: Some("permission_denied".into()),
                message: Some("OIDC token cannot be authenticated.".into())
            })
        );
        for none in ["<html>", "{}", r#"{"error":""}"#, r#"{"errors":[]}"#, "[1]"] {
            assert_eq!(e(none), None, "{none}");
        }
    }

    #[test]
    fn refusals_name_vendor_status_code_and_fix() {
        let r = refused(
            &service(),
            &reply(
                401,
                r#"{"error":"bad token eyJhbGciOiJSUzI1NiJ9.eyJ4IjoxfQ.c2ln"}"#,
            ),
            |_| "FIX".into(),
        );
        assert_eq!(
            r.what(),
            "Acme refused the token exchange at https://acme.example/token: HTTP 401: \"bad token <token>\""
        );
        assert_eq!(r.remedy(), Some("FIX"));
        assert_eq!(r.kind(), wicp_base::error::Kind::Upstream);
        assert_eq!(
            malformed(&service(), &reply(200, "x"), "no token").kind(),
            wicp_base::error::Kind::Upstream
        );

        let r = refused(&service(), &reply(503, "<html>down</html>"), |_| {
            "FIX".into()
        });
        assert!(
            r.what().ends_with("HTTP 503 (17 bytes, HTML or XML)"),
            "{r}"
        );
        assert!(r.remedy().unwrap().contains("throttling"), "{r}");
    }

    #[test]
    fn expiry_is_the_earlier_and_never_past() {
        let jwt = |exp: i64| {
            Secret::new(wicp_kubelet::request::token::jwt(
                "{}",
                &format!("{{\"exp\":{exp}}}"),
            ))
        };
        let s = service();
        assert_eq!(expiry(&s, 1000, Some(60), &jwt(5000)).unwrap(), 1060);
        assert_eq!(expiry(&s, 1000, Some(9000), &jwt(5000)).unwrap(), 5000);
        assert_eq!(expiry(&s, 1000, None, &jwt(5000)).unwrap(), 5000);
        assert_eq!(
            expiry(&s, 1000, None, &Secret::new("opaque")).unwrap(),
            4600
        );
        let e = expiry(&s, 1000, Some(60), &jwt(999)).unwrap_err();
        assert!(e.what().contains("expired at 1970-01-01T00:16:39Z"), "{e}");
    }
}
