//! The shared HTTP client: deadlines, bounded bodies and retries for every
//! hand-written upstream call.
//!
//! Nothing here runs on a cache hit or for passthrough: the runtime and the
//! TLS client (whose trust store load costs a few milliseconds) are built
//! only when an exchange actually goes to the network.
//!
//! Policy, shared by every exchanger:
//! - one deadline for the whole invocation; each attempt gets at most
//!   [`ATTEMPT_TIMEOUT`] of what is left, and connecting at most
//!   [`CONNECT_TIMEOUT`]; running out names the call in flight;
//! - redirects are never followed, so a token is never carried to a host we
//!   did not choose;
//! - bodies are read up to [`MAX_BODY_BYTES`];
//! - connection failures, cut bodies, 429 and 5xx are retried with
//!   full-jitter exponential backoff, honouring `Retry-After` (seconds or
//!   HTTP date), while the deadline allows; a `Retry-After` beyond the
//!   deadline fails at once instead of sleeping into the kubelet's kill;
//!   authentication and authorization failures (4xx) and untrusted
//!   certificates are not retried;
//! - `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (and their
//!   lowercase forms) are honoured: reqwest reads them when the client is
//!   built;
//! - the node's trust store plus `--ca-file` ([`crate::trust`]).

use std::future::Future;
use std::time::Duration;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::trust;

/// Longest an upstream may take to accept a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest one attempt (connect, request, whole reply) may take, so that a
/// server that stalls mid-answer leaves time for another attempt.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);

/// Token endpoints answer with a few kilobytes; more is not a token endpoint.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Attempts per call, the first included.
pub const MAX_ATTEMPTS: u32 = 4;

const BACKOFF_BASE: Duration = Duration::from_millis(250);
const BACKOFF_CAP: Duration = Duration::from_secs(8);

/// Runs `future` to completion on a fresh single-threaded runtime, giving up
/// at the deadline with an error naming `call`.
pub fn block_on<T>(
    deadline: &Deadline,
    call: &str,
    future: impl Future<Output = Result<T>>,
) -> Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::internal(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        match tokio::time::timeout_at(deadline.instant().into(), future).await {
            Ok(result) => result,
            Err(_) => Err(deadline_exceeded(deadline, call)),
        }
    })
}

pub fn deadline_exceeded(deadline: &Deadline, call: &str) -> Error {
    Error::network(format!(
        "the deadline of {} ran out while waiting for {call}",
        crate::duration::format_go(deadline.budget())
    ))
    .fix("check that the node can reach the endpoint (proxy, firewall, VPC endpoint), or raise --timeout (below 60s)")
}

/// Builds the client for one invocation: proxies from the environment, the
/// node's trust store plus `--ca-file`.
pub fn client(deadline: &Deadline) -> Result<reqwest::Client> {
    match proxy_settings(|name| std::env::var(name).ok()) {
        Some(proxies) => crate::debug!("proxy settings: {proxies}"),
        None => crate::debug!("no proxy variables set: connecting directly"),
    }
    let (builder, extra) = builder(deadline)?;
    build(builder, extra.as_ref())
}

/// Builds a client that ignores `HTTPS_PROXY`/`HTTP_PROXY`, for node-local
/// endpoints (the EKS Pod Identity Agent on a link-local address): a proxy
/// cannot reach them, and must not see the token sent to them.
pub fn direct_client(deadline: &Deadline) -> Result<reqwest::Client> {
    crate::debug!("node-local endpoint: connecting directly, whatever the proxy settings");
    let (builder, extra) = builder(deadline)?;
    build(builder.no_proxy(), extra.as_ref())
}

/// The policy every client shares, with the `--ca-file` bundle it trusts.
fn builder(deadline: &Deadline) -> Result<(reqwest::ClientBuilder, Option<trust::CaBundle>)> {
    trust::check_ssl_cert_file(std::env::var_os(trust::SSL_CERT_FILE))?;
    let extra = trust::extra_roots()?;
    let mut builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT.min(deadline.remaining()))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!(
            "wi-credential-provider/",
            env!("CARGO_PKG_VERSION")
        ));
    if let Some(bundle) = &extra {
        builder = builder.tls_certs_merge(bundle.certificates.iter().cloned());
    }
    Ok((builder, extra))
}

fn build(
    builder: reqwest::ClientBuilder,
    extra: Option<&trust::CaBundle>,
) -> Result<reqwest::Client> {
    builder.build().map_err(|e| {
        let detail = describe(&e);
        let error = Error::config(format!("cannot build the HTTP client: {detail}"));
        match extra {
            Some(bundle) => error.fix(format!(
                "check that --ca-file {} holds only CA certificates in PEM",
                crate::error::quote(&bundle.path.display().to_string())
            )),
            None if detail.contains("No CA certificates") => error.fix(
                "the node has no CA bundle: install ca-certificates, set SSL_CERT_FILE, or pass --ca-file",
            ),
            None => error,
        }
    })
}

/// The proxy variables in effect, with any credentials in them hidden, for
/// logs and transport errors: whether a call went through a proxy is the
/// first question when it fails. `None` when no variable is set.
pub fn proxy_settings(env: impl Fn(&str) -> Option<String>) -> Option<String> {
    let mut lines = Vec::new();
    for names in [
        ["HTTPS_PROXY", "https_proxy"],
        ["HTTP_PROXY", "http_proxy"],
        ["ALL_PROXY", "all_proxy"],
        ["NO_PROXY", "no_proxy"],
    ] {
        let found = names
            .iter()
            .find_map(|name| env(name).filter(|v| !v.is_empty()).map(|v| (*name, v)));
        if let Some((name, value)) = found {
            lines.push(format!("{name}={}", hide_userinfo(&value)));
        }
    }
    (!lines.is_empty()).then(|| lines.join(", "))
}

/// `http://user:pass@proxy:3128` as `http://<credentials>@proxy:3128`.
fn hide_userinfo(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((_, host)) => format!("<credentials>@{host}"),
        None => authority.to_string(),
    };
    match scheme {
        Some(scheme) => format!("{scheme}://{authority}{path}"),
        None => format!("{authority}{path}"),
    }
}

/// A finished HTTP exchange.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub retry_after: Option<Duration>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// Sends one request and reads its reply, with the body bounded.
async fn send_once(
    request: reqwest::RequestBuilder,
    deadline: &Deadline,
) -> std::result::Result<Reply, reqwest::Error> {
    let mut response = request
        .timeout(ATTEMPT_TIMEOUT.min(deadline.remaining()))
        .send()
        .await?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, std::time::SystemTime::now()));
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = MAX_BODY_BYTES.saturating_sub(body.len());
        body.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or(&chunk));
        if body.len() >= MAX_BODY_BYTES {
            break;
        }
    }
    Ok(Reply {
        status,
        retry_after,
        body,
    })
}

/// Whether a reply is worth another attempt.
pub fn is_retryable_status(status: u16) -> bool {
    status == 429 || (500..600).contains(&status)
}

/// Whether a transport failure is worth another attempt: the connection
/// failed, stalled or was cut, but not because the server's certificate is
/// untrusted, which no retry changes.
fn is_retryable_error(e: &reqwest::Error) -> bool {
    (e.is_connect() || e.is_timeout() || e.is_request() || e.is_body() || e.is_decode())
        && certificate_error(e).is_none()
}

/// Sends the request `build` makes, retrying transient failures. `call`
/// names the upstream call in messages ("Entra ID token request to
/// login.microsoftonline.com"). Returns the last reply, successful or not:
/// the exchanger interprets provider error bodies.
pub async fn send(
    build: impl Fn() -> reqwest::RequestBuilder,
    call: &str,
    deadline: &Deadline,
) -> Result<Reply> {
    let mut attempt = 0u32;
    loop {
        attempt = attempt.saturating_add(1);
        // The attempt's own timeout ends a moment after the deadline (it is
        // computed later); this one ends exactly at it, so running out is
        // reported here, naming this call.
        let outcome =
            tokio::time::timeout_at(deadline.instant().into(), send_once(build(), deadline))
                .await
                .map_err(|_| deadline_exceeded(deadline, call))?;
        let wait = match &outcome {
            Ok(reply) if is_retryable_status(reply.status) && attempt < MAX_ATTEMPTS => {
                if let Some(asked) = reply.retry_after
                    && asked > deadline.remaining()
                {
                    return Err(retry_after_beyond_deadline(
                        call,
                        reply.status,
                        asked,
                        deadline,
                    ));
                }
                crate::debug!(
                    "{call}: HTTP {} on attempt {attempt}, retrying",
                    reply.status
                );
                backoff(attempt, reply.retry_after)
            }
            Ok(_) => None,
            Err(e) if attempt < MAX_ATTEMPTS && is_retryable_error(e) => {
                crate::debug!("{call}: {} on attempt {attempt}, retrying", describe(e));
                backoff(attempt, None)
            }
            Err(_) => None,
        };
        match wait {
            Some(wait) if wait < deadline.remaining() => tokio::time::sleep(wait).await,
            _ => return outcome.map_err(|e| transport_error(call, attempt, &e, deadline)),
        }
    }
}

/// The error for a call that never got a reply.
fn transport_error(call: &str, attempt: u32, e: &reqwest::Error, deadline: &Deadline) -> Error {
    if let Some(detail) = certificate_error(e) {
        return untrusted_certificate(call, &detail);
    }
    if e.is_timeout() && deadline.expired() {
        return deadline_exceeded(deadline, call);
    }
    let proxies = proxy_settings(|name| std::env::var(name).ok());
    let error = Error::network(format!(
        "{call} failed after {attempt} attempt(s): {}{}",
        describe(e),
        proxies
            .as_deref()
            .map(|p| format!(" (proxy settings: {p})"))
            .unwrap_or_default()
    ));
    match proxies {
        Some(_) => error.fix(
            "check that the proxy is reachable from the node and accepts it (credentials go in the proxy URL), \
             or list the endpoint's host in NO_PROXY; then DNS and firewall",
        ),
        None => error.fix(
            "check that the node can reach the endpoint (DNS, firewall; set HTTPS_PROXY if it must go through a proxy)",
        ),
    }
}

/// The error for a server whose certificate no trusted CA vouches for.
pub fn untrusted_certificate(call: &str, detail: &str) -> Error {
    Error::network(format!(
        "{call} failed: the server's TLS certificate is not trusted ({detail})"
    ))
    .fix(
        "if the endpoint or a TLS-inspecting proxy uses a private CA, pass its CA certificate with --ca-file \
         (WICP_CA_FILE); check also the node's clock and that the URL names the host the certificate is for",
    )
}

fn retry_after_beyond_deadline(
    call: &str,
    status: u16,
    asked: Duration,
    deadline: &Deadline,
) -> Error {
    Error::upstream(format!(
        "{call} answered HTTP {status} asking to retry after {}, beyond the {} left of the {} deadline",
        crate::duration::format_go(asked),
        crate::duration::format_go(deadline.remaining()),
        crate::duration::format_go(deadline.budget()),
    ))
    .fix("the service is throttling or unavailable; the kubelet asks again on the next pull (a longer --timeout, up to 59s, lets the plugin wait)")
}

/// The certificate problem behind a failed connection, if that is what it
/// was (for reqwest's errors and the AWS SDK's alike). rustls reports it inside I/O errors (nested: hyper-rustls wraps
/// tokio-rustls's), whose `source` skips the wrapped error, so those are
/// unwrapped by hand.
pub fn certificate_error(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(e);
    while let Some(current) = next {
        let mut inner: Option<&(dyn std::error::Error + 'static)> = Some(current);
        while let Some(error) = inner {
            if let Some(
                tls @ (rustls::Error::InvalidCertificate(_)
                | rustls::Error::NoCertificatesPresented),
            ) = error.downcast_ref::<rustls::Error>()
            {
                return Some(tls.to_string());
            }
            inner = error
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .map(|e| e as &(dyn std::error::Error + 'static));
        }
        next = current.source();
    }
    None
}

/// A transport error in one line, with its cause chain.
fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Full-jitter exponential backoff, or the server's `Retry-After` when it
/// asked for a wait.
fn backoff(attempt: u32, retry_after: Option<Duration>) -> Option<Duration> {
    if let Some(wait) = retry_after {
        return Some(wait);
    }
    let ceiling = BACKOFF_BASE
        .saturating_mul(1u32 << attempt.min(16))
        .min(BACKOFF_CAP);
    Some(ceiling.mul_f64(jitter()))
}

/// A `Retry-After` value (RFC 9110 section 10.2.3): delay seconds or an
/// HTTP date, seen at `now`. A date in the past means no wait; anything
/// unreadable is ignored and the backoff applies.
pub fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // More digits than a u64 holds is still "a very long time".
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = parse_http_date(value)?;
    let now = now
        .duration_since(std::time::UNIX_EPOCH)
        .ok()
        .and_then(|d| i64::try_from(d.as_secs()).ok())?;
    Some(Duration::from_secs(
        u64::try_from(at.saturating_sub(now)).unwrap_or(0),
    ))
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the HTTP date form
/// senders must use, to Unix seconds. The obsolete RFC 850 and asctime
/// forms are not read: a `Retry-After` in them just falls back to backoff.
pub fn parse_http_date(value: &str) -> Option<i64> {
    let mut parts = value.split(' ');
    let weekday = parts.next()?;
    let (day, month, year, time, zone) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if parts.next().is_some()
        || zone != "GMT"
        || !["Mon,", "Tue,", "Wed,", "Thu,", "Fri,", "Sat,", "Sun,"].contains(&weekday)
        || day.len() != 2
        || year.len() != 4
        || time.len() != 8
    {
        return None;
    }
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| *m == month)
    .and_then(|i| u8::try_from(i + 1).ok())?;
    let mut hms = time.split(':');
    let (h, m, s) = (hms.next()?, hms.next()?, hms.next()?);
    let rfc3339 = format!("{year}-{month:02}-{day}T{h}:{m}:{s}Z");
    crate::duration::parse_rfc3339(&rfc3339)
}

/// A number in [0, 1) that differs between processes and calls; it spreads
/// retries of many nodes, it does not need to be unpredictable.
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Checks an endpoint override: `https://` always, `http://` only because an
/// admin wrote it explicitly (tests, a local agent). Returns it without a
/// trailing slash.
pub fn endpoint_override(flag: &str, value: &str) -> Result<String> {
    let trimmed = value.trim().trim_end_matches('/');
    let ok = trimmed
        .strip_prefix("https://")
        .or_else(|| trimmed.strip_prefix("http://"))
        .is_some_and(|rest| !rest.is_empty() && !rest.contains(['?', '#', ' ']));
    if !ok {
        return Err(Error::config(format!(
            "{flag} {} is not an http(s) URL",
            crate::error::quote(value)
        ))
        .fix("write it as https://host[:port][/path]"));
    }
    Ok(trimmed.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_and_honours_retry_after() {
        for attempt in 1..10 {
            let wait = backoff(attempt, None).unwrap();
            assert!(wait <= BACKOFF_CAP, "{wait:?}");
        }
        assert_eq!(
            backoff(1, Some(Duration::from_secs(3))),
            Some(Duration::from_secs(3))
        );
        let j = jitter();
        assert!((0.0..1.0).contains(&j));
    }

    #[test]
    fn retry_after_in_both_forms() {
        use std::time::UNIX_EPOCH;
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        let p = |v: &str| parse_retry_after(v, now);
        assert_eq!(p("120"), Some(Duration::from_secs(120)));
        assert_eq!(p(" 0 "), Some(Duration::ZERO));
        assert_eq!(
            p("99999999999999999999999"),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(
            p("Sun, 06 Nov 1994 08:50:07 GMT"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            p("Mon, 07 Nov 1994 08:49:37 GMT"),
            Some(Duration::from_secs(86_400))
        );
        // In the past: no wait.
        assert_eq!(p("Sat, 05 Nov 1994 08:49:37 GMT"), Some(Duration::ZERO));
        for ignored in [
            "",
            "-1",
            "1.5",
            "soon",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 31 Feb 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 GMT extra",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Xyz, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 8:4:37:1 GMT",
        ] {
            assert_eq!(p(ignored), None, "{ignored:?}");
        }
        // Before the epoch, the clock is wrong: ignore the date.
        assert_eq!(
            parse_retry_after(
                "Sun, 06 Nov 1994 08:49:37 GMT",
                UNIX_EPOCH - Duration::from_secs(1)
            ),
            None
        );
    }

    #[test]
    fn proxy_settings_hide_credentials() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(proxy_settings(env(&[])), None);
        assert_eq!(proxy_settings(env(&[("HTTPS_PROXY", "")])), None);
        assert_eq!(
            proxy_settings(env(&[
                ("https_proxy", "http://user:p%40ss@proxy.corp:3128/"),
                ("NO_PROXY", "169.254.169.254,.internal"),
                ("http_proxy", "proxy.corp:3128"),
            ]))
            .unwrap(),
            "https_proxy=http://<credentials>@proxy.corp:3128/, http_proxy=proxy.corp:3128, NO_PROXY=169.254.169.254,.internal"
        );
        // The uppercase form wins, as in reqwest.
        assert_eq!(
            proxy_settings(env(&[
                ("HTTPS_PROXY", "http://a:3128"),
                ("https_proxy", "http://b:3128")
            ]))
            .unwrap(),
            "HTTPS_PROXY=http://a:3128"
        );
        assert_eq!(hide_userinfo("u:p@h:1"), "<credentials>@h:1");
        assert_eq!(hide_userinfo("http://h/p@x"), "http://h/p@x");
        assert_eq!(
            hide_userinfo("socks5://u:p@a@h"),
            "socks5://<credentials>@h"
        );
    }

    #[test]
    fn retryable_statuses() {
        assert!(is_retryable_status(429));
        assert!(is_retryable_status(503));
        for s in [200, 400, 401, 403, 404] {
            assert!(!is_retryable_status(s));
        }
    }

    #[test]
    fn endpoint_overrides() {
        assert_eq!(
            endpoint_override("--x", "https://a.io/").unwrap(),
            "https://a.io"
        );
        assert_eq!(
            endpoint_override("--x", "http://127.0.0.1:5/p").unwrap(),
            "http://127.0.0.1:5/p"
        );
        for bad in ["a.io", "ftp://a", "https://", "https://a?b"] {
            assert!(endpoint_override("--x", bad).is_err(), "{bad}");
        }
    }
}
