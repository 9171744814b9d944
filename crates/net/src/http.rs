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
//!   lowercase forms) are honoured ([`crate::proxy`]);
//! - the node's trust store plus `--ca-file` ([`crate::trust`]), one
//!   TLS configuration per process.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::observe::Endpoint;
use wicp_base::deadline::Deadline;
use wicp_base::error::{Error, Fact, Result, Setting};

/// Longest an upstream may take to accept a connection.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest one attempt (connect, request, whole reply) may take, so that a
/// server that stalls mid-answer leaves time for another attempt.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(20);

/// Token endpoints answer with a few kilobytes; more is not a token endpoint.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Attempts per call, the first included.
const MAX_ATTEMPTS: u32 = 4;

const BACKOFF_BASE: Duration = Duration::from_millis(250);
const BACKOFF_CAP: Duration = Duration::from_secs(8);

/// An upstream call as its errors name it: `service`, the upstream's
/// stable name, recorded as the `service` fact (`Google STS`, `Entra ID`),
/// and `what`, the call in words for the message ("the Google STS token
/// exchange at https://…"). Every error of the call (a refusal, the
/// deadline, a transport failure, an untrusted certificate) records the
/// same service, so a query or a test never parses the words.
#[derive(Debug, Clone)]
pub struct Call {
    pub service: &'static str,
    pub what: String,
}

impl Call {
    pub fn new(service: &'static str, what: impl Into<String>) -> Self {
        Call {
            service,
            what: what.into(),
        }
    }
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

/// Runs `future` to completion on a fresh single-threaded runtime, giving up
/// at the deadline with an error naming `exchange` (a [`Call`], or an
/// exchange of several calls in words). The calls inside run out at the
/// same instant and report first, with their service; this is the
/// fallback for time spent between them.
pub fn block_on<T>(
    deadline: &Deadline,
    exchange: impl std::fmt::Display,
    future: impl Future<Output = Result<T>>,
) -> Result<T> {
    block_on_or(deadline, || ran_out(deadline, exchange), future)
}

/// [`block_on`] for a call whose deadline error is its own (`late`): a
/// local agent, where a firewall or proxy is not the likely cause.
pub fn block_on_or<T>(
    deadline: &Deadline,
    late: impl FnOnce() -> Error,
    future: impl Future<Output = Result<T>>,
) -> Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::internal(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        match tokio::time::timeout_at(deadline.instant().into(), future).await {
            Ok(result) => result,
            Err(_) => Err(late()),
        }
    })
}

pub fn deadline_exceeded(deadline: &Deadline, call: &Call) -> Error {
    ran_out(deadline, call).with(Fact::Service(call.service))
}

fn ran_out(deadline: &Deadline, waiting_for: impl std::fmt::Display) -> Error {
    Error::network(format!(
        "the deadline of {} ran out while waiting for {waiting_for}",
        wicp_base::duration::format_go(deadline.budget())
    ))
    .fix("check that the node can reach the endpoint (proxy, firewall, VPC endpoint), or raise --timeout (below 60s)")
}

/// The policy every client shares; proxies and TLS are added by
/// [`crate::Settings`].
pub fn builder(deadline: &Deadline) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT.min(deadline.remaining()))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!(
            "wi-credential-provider/",
            env!("CARGO_PKG_VERSION")
        ))
}

/// An HTTP client of one invocation, with the proxy settings it was built
/// with, for its transport errors.
#[derive(Clone, Debug)]
pub struct Client {
    inner: reqwest::Client,
    /// The proxy settings (credentials hidden), `None` when connecting
    /// directly.
    proxies: Option<String>,
}

impl Client {
    /// Builds on the process's one TLS configuration.
    pub fn build(
        builder: reqwest::ClientBuilder,
        tls: Arc<rustls::ClientConfig>,
        proxies: Option<String>,
    ) -> Result<Client> {
        let inner = builder
            .tls_backend_preconfigured(rustls::ClientConfig::clone(&tls))
            .build()
            .map_err(|e| {
                Error::config(format!("cannot build the HTTP client: {}", describe(&e)))
            })?;
        Ok(Client { inner, proxies })
    }

    pub fn get(&self, url: &str) -> reqwest::RequestBuilder {
        self.inner.get(url)
    }

    pub fn post(&self, url: &str) -> reqwest::RequestBuilder {
        self.inner.post(url)
    }

    pub fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        self.inner.request(method, url)
    }

    /// The proxy settings this client uses, for messages.
    pub fn proxies(&self) -> Option<&str> {
        self.proxies.as_deref()
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

    /// The error for an answer from `service` (its stable name, the
    /// `service` fact: `Google STS`) that is not what it documents: `from`
    /// says which call in words (with its address or what was asked), `why`
    /// what the answer has or lacks. The body is described by its size and
    /// kind, never its text, which may quote a token back.
    pub fn unusable(
        &self,
        service: &'static str,
        from: impl std::fmt::Display,
        why: &str,
    ) -> Error {
        Error::upstream(format!(
            "{from} answered HTTP {} with {why} ({})",
            self.status,
            wicp_base::redact::body_shape(&self.body)
        ))
        .answered(service, self.status, &self.body)
    }

    /// The credential a token service's success carries in the non-empty
    /// string field `name` of its JSON object, with the object for the
    /// other fields. `Err` says, for the caller's error, what the body
    /// lacked: never any of its text.
    pub fn token_field(
        &self,
        name: &str,
    ) -> std::result::Result<(serde_json::Value, wicp_base::secret::Secret), String> {
        let body = self
            .json::<serde_json::Value>()
            .filter(serde_json::Value::is_object)
            .ok_or("a body that is not a JSON token response")?;
        let token = body
            .get(name)
            .and_then(serde_json::Value::as_str)
            .filter(|t| !t.is_empty())
            .map(wicp_base::secret::Secret::new)
            .ok_or_else(|| format!("no {name}"))?;
        Ok((body, token))
    }
}

/// For the tests of the code that reads replies: `read` refused the
/// reply with an error that says `needle` and never shows `secret`, the
/// credential the reply carried. Returns the error's text.
#[cfg(any(test, feature = "test-support"))]
#[allow(clippy::expect_used)]
pub fn assert_refused<T: std::fmt::Debug>(read: Result<T>, needle: &str, secret: &str) -> String {
    let e = read.expect_err(needle).to_string();
    assert!(e.contains(needle), "{needle}: {e}");
    assert!(!e.contains(secret), "{e}");
    e
}

/// A reply with `status` and `body` and no `Retry-After`, as an upstream
/// would send it, for the tests of the code that reads replies.
#[cfg(any(test, feature = "test-support"))]
pub fn reply(status: u16, body: &str) -> Reply {
    Reply {
        status,
        retry_after: None,
        body: body.as_bytes().to_vec(),
    }
}

/// Sends one request and reads its reply, with the body bounded.
async fn send_once(
    endpoint: Endpoint,
    request: reqwest::RequestBuilder,
    deadline: &Deadline,
) -> std::result::Result<Reply, reqwest::Error> {
    send_bounded(endpoint, request, attempt_timeout(deadline), MAX_BODY_BYTES).await
}

/// Sends one request within `timeout` and reads at most `limit` bytes of
/// its reply's body. Every attempt of every hand-written upstream call
/// goes through here and is counted for the metrics as `endpoint`.
pub async fn send_bounded(
    endpoint: Endpoint,
    request: reqwest::RequestBuilder,
    timeout: Duration,
    limit: usize,
) -> std::result::Result<Reply, reqwest::Error> {
    let reply = read_bounded(request, timeout, limit).await;
    crate::observe::upstream(endpoint, reply.as_ref().ok().map(|r| r.status));
    reply
}

async fn read_bounded(
    request: reqwest::RequestBuilder,
    timeout: Duration,
    limit: usize,
) -> std::result::Result<Reply, reqwest::Error> {
    let mut response = request.timeout(timeout).send().await?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, std::time::SystemTime::now()));
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = limit.saturating_sub(body.len());
        body.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or(&chunk));
        if body.len() >= limit {
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

/// The fix for a refusal that was still worth another attempt
/// ([`is_retryable_status`]) after the last one: the same advice for every
/// upstream, with where to look (`check`) if it lasts.
pub fn retries_spent(upstream: &str, check: &str) -> String {
    format!(
        "{upstream} was throttling or unavailable through every retry; the kubelet retries the pull, check {check} if it persists"
    )
}

/// Whether a transport failure is worth another attempt: the connection
/// failed, stalled or was cut, but not because the server's certificate is
/// untrusted, which no retry changes.
pub(crate) fn is_retryable_error(e: &reqwest::Error) -> bool {
    (e.is_connect() || e.is_timeout() || e.is_request() || e.is_body() || e.is_decode())
        && certificate_error(e).is_none()
}

/// What one attempt's outcome calls for.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Done, successful or not: no retry changes it.
    Final,
    /// Transient: another attempt may succeed.
    Retry {
        /// For the debug line ("HTTP 503", "connection refused").
        why: String,
        /// The HTTP status, when there was a reply.
        status: Option<u16>,
        /// The server's `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
    },
}

/// The retry policy of every upstream call, the AWS SDK's included: at most
/// [`MAX_ATTEMPTS`] attempts while the deadline allows, full-jitter
/// exponential backoff or the server's `Retry-After`, and a `Retry-After`
/// beyond the deadline failing at once. `attempt` makes one attempt (with
/// its own per-attempt cap, [`attempt_timeout`]); `verdict` classifies its
/// outcome. Returns the last outcome and the number of attempts made.
pub async fn with_retries<T, F, Fut>(
    call: &Call,
    deadline: &Deadline,
    mut attempt: F,
    verdict: impl Fn(&T) -> Verdict,
) -> Result<(T, u32)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let mut attempts = 0u32;
    loop {
        attempts = attempts.saturating_add(1);
        // The attempt's own timeout ends a moment after the deadline (it is
        // computed later); this one ends exactly at it, so running out is
        // reported here, naming this call.
        let outcome = tokio::time::timeout_at(deadline.instant().into(), attempt())
            .await
            .map_err(|_| deadline_exceeded(deadline, call))?;
        let wait = match verdict(&outcome) {
            Verdict::Retry {
                why,
                status,
                retry_after,
            } if attempts < MAX_ATTEMPTS => {
                if let Some(asked) = retry_after
                    && asked > deadline.remaining()
                {
                    return Err(retry_after_beyond_deadline(call, status, asked, deadline));
                }
                wicp_base::log::debug!("{call}: {why} on attempt {attempts}, retrying");
                backoff(attempts, retry_after)
            }
            _ => None,
        };
        match wait {
            Some(wait) if wait < deadline.remaining() => tokio::time::sleep(wait).await,
            _ => return Ok((outcome, attempts)),
        }
    }
}

/// The cap on one attempt (connect, request, whole reply), so that a server
/// that stalls mid-answer leaves time for another attempt.
pub(crate) fn attempt_timeout(deadline: &Deadline) -> Duration {
    ATTEMPT_TIMEOUT.min(deadline.remaining())
}

/// POSTs `form` (`application/x-www-form-urlencoded`) to `url` through
/// [`send`]: an OAuth 2.0 token request (RFC 6749 §4; RFC 8693 §2.1), the
/// shape every token endpoint the clouds run takes.
pub async fn post_form(
    client: &Client,
    endpoint: Endpoint,
    url: &str,
    form: &[(&str, &str)],
    call: &Call,
    deadline: &Deadline,
) -> Result<Reply> {
    send(
        client,
        endpoint,
        || client.post(url).form(form),
        call,
        deadline,
    )
    .await
}

/// Sends the request `build` makes on `client`, retrying transient
/// failures. `call` names the upstream call in messages ("Entra ID token
/// request to login.microsoftonline.com"); `endpoint` is what kind of
/// call it is, for the metrics. Returns the last reply,
/// successful or not: the exchanger interprets provider error bodies.
pub async fn send(
    client: &Client,
    endpoint: Endpoint,
    build: impl Fn() -> reqwest::RequestBuilder,
    call: &Call,
    deadline: &Deadline,
) -> Result<Reply> {
    let (outcome, attempts) = with_retries(
        call,
        deadline,
        || send_once(endpoint, build(), deadline),
        |outcome| match outcome {
            Ok(reply) if is_retryable_status(reply.status) => Verdict::Retry {
                why: format!("HTTP {}", reply.status),
                status: Some(reply.status),
                retry_after: reply.retry_after,
            },
            Err(e) if is_retryable_error(e) => Verdict::Retry {
                why: describe(e),
                status: None,
                retry_after: None,
            },
            _ => Verdict::Final,
        },
    )
    .await?;
    let reply =
        outcome.map_err(|e| transport_error(call, attempts, &e, deadline, client.proxies()))?;
    wicp_base::log::debug!(
        "{call} answered HTTP {} ({} bytes)",
        reply.status,
        reply.body.len()
    );
    Ok(reply)
}

/// The error for a call that never got a reply.
fn transport_error(
    call: &Call,
    attempt: u32,
    e: &reqwest::Error,
    deadline: &Deadline,
    proxies: Option<&str>,
) -> Error {
    if let Some(untrusted) = certificate_error(e) {
        return untrusted_certificate(call, untrusted);
    }
    if e.is_timeout() && deadline.expired() {
        return deadline_exceeded(deadline, call);
    }
    let error = Error::network(format!(
        "{call} failed after {attempt} attempt(s): {}{}",
        describe(e),
        proxies
            .map(|p| format!(" (proxy settings: {p})"))
            .unwrap_or_default()
    ))
    .with(Fact::Service(call.service));
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

/// Why a server's certificate was not verified.
#[derive(Debug, PartialEq, Eq)]
pub enum Untrusted {
    /// No trusted CA vouches for it, or it is wrong (rustls's words).
    Certificate(String),
    /// The trust store itself could not be loaded (an unreadable
    /// `SSL_CERT_FILE`, no CA on the node): the store's own error.
    Store(Error),
}

/// The error for a server whose certificate was not verified.
pub fn untrusted_certificate(call: &Call, untrusted: Untrusted) -> Error {
    let detail = match untrusted {
        Untrusted::Store(error) => return error.with(Fact::Service(call.service)),
        Untrusted::Certificate(detail) => detail,
    };
    Error::network(format!(
        "{call} failed: the server's TLS certificate is not trusted ({detail})"
    ))
    .fix(
        "if the endpoint or a TLS-inspecting proxy uses a private CA, pass its CA certificate with --ca-file \
         (WICP_CA_FILE); check also the node's clock and that the URL names the host the certificate is for",
    )
    .with(Fact::Service(call.service))
}

fn retry_after_beyond_deadline(
    call: &Call,
    status: Option<u16>,
    asked: Duration,
    deadline: &Deadline,
) -> Error {
    let asked = if asked >= MAX_RETRY_AFTER {
        format!(
            "more than {}",
            wicp_base::duration::format_go(MAX_RETRY_AFTER)
        )
    } else {
        wicp_base::duration::format_go(asked)
    };
    let error = Error::upstream(format!(
        "{call} answered{} asking to retry after {asked}, beyond the {} left of the {} deadline",
        status.map(|s| format!(" HTTP {s}")).unwrap_or_default(),
        wicp_base::duration::format_go(deadline.remaining()),
        wicp_base::duration::format_go(deadline.budget()),
    ))
    .fix("the service is throttling or unavailable; the kubelet asks again on the next pull (a longer --timeout, up to 59s, lets the plugin wait)")
    .with(Fact::Service(call.service));
    match status {
        Some(status) => error.with(Fact::Status(status)),
        None => error,
    }
}

/// The certificate problem behind a failed connection, if that is what it
/// was (for reqwest's errors and the AWS SDK's alike). rustls reports it inside I/O errors (nested: hyper-rustls wraps
/// tokio-rustls's), whose `source` skips the wrapped error, so those are
/// unwrapped by hand.
pub fn certificate_error(e: &(dyn std::error::Error + 'static)) -> Option<Untrusted> {
    let mut next = Some(e);
    while let Some(current) = next {
        let mut inner: Option<&(dyn std::error::Error + 'static)> = Some(current);
        while let Some(error) = inner {
            if let Some(
                tls @ (rustls::Error::InvalidCertificate(_)
                | rustls::Error::NoCertificatesPresented),
            ) = error.downcast_ref::<rustls::Error>()
            {
                return Some(match crate::trust::load_error(tls) {
                    Some(store) => Untrusted::Store(store),
                    None => Untrusted::Certificate(tls.to_string()),
                });
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
pub fn describe(e: &reqwest::Error) -> String {
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

/// The longest `Retry-After` we take literally: anything longer is only
/// "longer than any deadline", and printing it as is would give
/// `5124095576030431h0m15s`.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// A `Retry-After` value (RFC 9110 section 10.2.3): delay seconds or an
/// HTTP date, seen at `now`, at most [`MAX_RETRY_AFTER`]. A date in the
/// past means no wait; anything unreadable is ignored and the backoff
/// applies.
pub fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    parse_retry_after_unclamped(value, now).map(|d| d.min(MAX_RETRY_AFTER))
}

fn parse_retry_after_unclamped(value: &str, now: std::time::SystemTime) -> Option<Duration> {
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
    wicp_base::duration::parse_rfc3339(&rfc3339)
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
///
/// It is parsed with the `url` crate, the parser reqwest itself uses, so
/// the host checked here ([`endpoint_host`]) is the host the client
/// connects to. A `\` (which that parser reads as `/`, where a hand-written
/// split would not) and user information (`user@`) are refused: neither
/// has a use in an endpoint, and both have been used to make one host look
/// like another.
pub fn endpoint_override(flag: impl Into<Setting>, value: &str) -> Result<String> {
    let flag = flag.into();
    let trimmed = value.trim().trim_end_matches('/');
    let refuse = |why: &str| {
        Error::flag(
            flag,
            format!(
                "{} is not an http(s) URL{why}",
                wicp_base::error::quote(&super::proxy::hide_credentials(value))
            ),
        )
        .fix("write it as https://host[:port][/path]")
    };
    if trimmed.contains(['\\', '?', '#', ' ']) || trimmed.chars().any(char::is_control) {
        return Err(refuse(
            ": it holds a backslash, a query, a fragment, a space or a control character",
        ));
    }
    let url = url::Url::parse(trimmed).map_err(|e| refuse(&format!(" ({e})")))?;
    if !matches!(url.scheme(), "http" | "https")
        || !trimmed.starts_with(&format!("{}://", url.scheme()))
        || url.host_str().is_none_or(str::is_empty)
    {
        return Err(refuse(""));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refuse(
            ": it holds user information (user@), which an endpoint never needs",
        ));
    }
    Ok(trimmed.to_string())
}

/// The host a checked endpoint URL connects to (IPv6 without brackets).
pub fn endpoint_host(url: &str) -> Option<String> {
    match url::Url::parse(url).ok()?.host()? {
        url::Host::Ipv6(ip) => Some(ip.to_string()),
        url::Host::Ipv4(ip) => Some(ip.to_string()),
        url::Host::Domain(name) => Some(name.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unusable_answer_records_the_stable_service_name_not_the_call() {
        let e = reply(200, "<html>portal</html>").unusable(
            "ACR",
            "ACR at https://contoso.azurecr.io",
            "no refresh token",
        );
        assert_eq!(e.service(), Some("ACR"));
        assert_eq!(e.status(), Some(200));
        assert!(
            e.what().starts_with(
                "ACR at https://contoso.azurecr.io answered HTTP 200 with no refresh token"
            ),
            "{e}"
        );
        assert!(!e.what().contains("portal"), "{e}");
    }

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
        assert_eq!(p("99999999999999999999999"), Some(MAX_RETRY_AFTER));
        assert_eq!(p("86401"), Some(MAX_RETRY_AFTER));
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
    fn retryable_statuses() {
        assert!(is_retryable_status(429));
        assert!(is_retryable_status(503));
        for s in [200, 400, 401, 403, 404] {
            assert!(!is_retryable_status(s));
        }
    }

    #[test]
    fn endpoint_overrides() {
        use wicp_base::flags::FlagSpec;
        static X: FlagSpec = FlagSpec {
            long: "x",
            env: "WICP_X",
            takes: wicp_base::flags::Takes::One,
            value: "URL",
            default: "",
            help: "",
        };
        assert_eq!(
            endpoint_override(&X, "https://a.io/").unwrap(),
            "https://a.io"
        );
        assert_eq!(
            endpoint_override(&X, "http://127.0.0.1:5/p").unwrap(),
            "http://127.0.0.1:5/p"
        );
        for bad in [
            "a.io",
            "ftp://a",
            "https://",
            "https://a?b",
            "http://198.51.100.7:80\\@127.0.0.1/v1/credentials",
            "http://user@127.0.0.1/",
            "https://u:p@sts.amazonaws.com",
            "https:sts.amazonaws.com",
            "http://a b",
        ] {
            let refused = endpoint_override(&X, bad).unwrap_err();
            assert_eq!(refused.kind(), wicp_base::error::Kind::Config, "{bad}");
            assert_eq!(refused.flagged(), Some(Setting::Flag(&X)), "{bad}");
            assert!(
                refused
                    .problem()
                    .is_some_and(|p| p.contains("is not an http(s) URL")),
                "{bad}"
            );
        }
        assert_eq!(
            endpoint_host("http://[fd00:ec2::23]/v1").as_deref(),
            Some("fd00:ec2::23")
        );
        assert_eq!(endpoint_host("https://A.b:1/x").as_deref(), Some("a.b"));
        // What reqwest would connect to, which a split on '@' gets wrong.
        assert_eq!(
            endpoint_host("http://198.51.100.7:80\\@127.0.0.1/").as_deref(),
            Some("198.51.100.7")
        );
    }
}
