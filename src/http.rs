//! The shared HTTP client: deadlines, bounded bodies and retries for every
//! hand-written upstream call.
//!
//! Nothing here runs on a cache hit or for passthrough: the runtime and the
//! TLS client (whose trust store load costs a few milliseconds) are built
//! only when an exchange actually goes to the network.
//!
//! Policy, shared by every exchanger:
//! - one deadline for the whole invocation; each request gets what is left,
//!   and connecting gets at most [`CONNECT_TIMEOUT`] of it;
//! - redirects are never followed, so a token is never carried to a host we
//!   did not choose;
//! - bodies are read up to [`MAX_BODY_BYTES`];
//! - connection failures, 429 and 5xx are retried with full-jitter
//!   exponential backoff, honouring `Retry-After`, while the deadline allows;
//!   authentication and authorization failures (4xx) are not retried;
//! - `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` are honoured (reqwest reads
//!   them from the environment).

use std::future::Future;
use std::time::Duration;

use crate::deadline::Deadline;
use crate::error::{Error, Result};

/// Longest an upstream may take to accept a connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

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
        .map_err(|e| Error::new(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        match tokio::time::timeout_at(deadline.instant().into(), future).await {
            Ok(result) => result,
            Err(_) => Err(deadline_exceeded(deadline, call)),
        }
    })
}

pub fn deadline_exceeded(deadline: &Deadline, call: &str) -> Error {
    Error::new(format!(
        "the deadline of {} ran out while waiting for {call}",
        crate::duration::format_go(deadline.budget())
    ))
    .fix("check that the node can reach the endpoint (proxy, firewall, VPC endpoint), or raise --timeout (below 60s)")
}

/// Builds the client for one invocation.
pub fn client(deadline: &Deadline) -> Result<reqwest::Client> {
    build(builder(deadline))
}

/// Builds a client that ignores `HTTPS_PROXY`/`HTTP_PROXY`, for node-local
/// endpoints (the EKS Pod Identity Agent on a link-local address): a proxy
/// cannot reach them, and must not see the token sent to them.
pub fn direct_client(deadline: &Deadline) -> Result<reqwest::Client> {
    build(builder(deadline).no_proxy())
}

fn builder(deadline: &Deadline) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT.min(deadline.remaining()))
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!(
            "wi-credential-provider/",
            env!("CARGO_PKG_VERSION")
        ))
}

fn build(builder: reqwest::ClientBuilder) -> Result<reqwest::Client> {
    builder
        .build()
        .map_err(|e| Error::new(format!("cannot build the HTTP client: {e}")))
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
    let mut response = request.timeout(deadline.remaining()).send().await?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
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
        attempt += 1;
        let outcome = send_once(build(), deadline).await;
        let wait = match &outcome {
            Ok(reply) if is_retryable_status(reply.status) && attempt < MAX_ATTEMPTS => {
                crate::debug!(
                    "{call}: HTTP {} on attempt {attempt}, retrying",
                    reply.status
                );
                backoff(attempt, reply.retry_after)
            }
            Ok(_) => None,
            Err(e)
                if attempt < MAX_ATTEMPTS
                    && (e.is_connect() || e.is_timeout() || e.is_request()) =>
            {
                crate::debug!("{call}: {} on attempt {attempt}, retrying", describe(e));
                backoff(attempt, None)
            }
            Err(_) => None,
        };
        match wait {
            Some(wait) if wait < deadline.remaining() => tokio::time::sleep(wait).await,
            _ => {
                return outcome.map_err(|e| {
                    if e.is_timeout() || deadline.expired() {
                        deadline_exceeded(deadline, call)
                    } else {
                        Error::new(format!("{call} failed after {attempt} attempt(s): {}", describe(&e)))
                            .fix("check that the node can reach the endpoint (DNS, proxy via HTTPS_PROXY/NO_PROXY, firewall)")
                    }
                });
            }
        }
    }
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
        return Err(Error::new(format!(
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
