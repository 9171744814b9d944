//! Cloud metadata services: where a node's own identity comes from.
//!
//! EC2's IMDS, Azure's IMDS and the GCE metadata server all answer on a
//! link-local address, in milliseconds or not at all. So every call to one
//! follows a policy of its own, stricter than [`crate::http`]'s:
//!
//! - never through a proxy, whatever `HTTP_PROXY` says: a proxy cannot reach
//!   a link-local address, and must not see the node's credentials (Azure:
//!   IMDS "isn't intended to be used behind a proxy");
//! - [`CONNECT_TIMEOUT`] to connect, [`ATTEMPT_TIMEOUT`] per attempt and
//!   [`BUDGET`] per call, so a node without a metadata service fails in a
//!   second or two rather than eating the kubelet's minute;
//! - bodies read up to [`MAX_BODY_BYTES`] (a token answer is a few KiB);
//! - redirects never followed;
//! - a refused connection is not retried (nothing listens: this is not a
//!   cloud VM); a connection that opens but never answers is reported as
//!   such, because on EC2 that is the signature of a hop limit too low for
//!   the caller's network namespace.
//!
//! Only plain `http://` endpoints get a TLS configuration with no trusted
//! roots, so a node-identity answer loads no trust store; an `https://`
//! override (rare, but the SDKs accept one) uses the process's store.

use std::sync::Arc;
use std::time::Duration;

use crate::http::{self, Reply, Verdict};
use wicp_base::deadline::Deadline;
use wicp_base::error::{Error, Fact, Result, Setting};

/// Link-local services accept a connection at once or not at all.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// One request and its whole reply.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);

/// Every attempt of one call together.
const BUDGET: Duration = Duration::from_secs(5);

/// A token answer is a few KiB; anything this large is not a metadata service.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// One metadata service, as messages name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    /// "the EC2 instance metadata service (IMDSv2)".
    pub name: &'static str,
    /// Scheme, host and port, no trailing slash.
    pub base: String,
    /// What set `base`: a flag or a variable; `None` for the default.
    pub source: Option<Setting>,
    /// What to do when nothing listens at `base`.
    pub absent_fix: &'static str,
    /// What to do when a connection opens but no answer comes.
    pub silent_fix: &'static str,
}

/// `the EC2 instance metadata service (IMDSv2) at http://169.254.169.254`,
/// naming it in messages.
impl std::fmt::Display for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}", self.name, self.base)
    }
}

impl Service {
    /// `base` and where it came from, for plans and `explain`.
    pub fn describe(&self) -> String {
        match self.source {
            None => self.base.clone(),
            Some(source) => format!("{} (from {source})", self.base),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// A client for metadata services: direct, short connect timeout, no
/// redirects. `net` provides the trust store for an `https://` base only.
pub fn client(service: &Service, net: &crate::Settings) -> Result<http::Client> {
    let builder = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(CONNECT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!(
            "wi-credential-provider/",
            env!("CARGO_PKG_VERSION")
        ));
    let tls = if service.base.starts_with("https://") {
        net.tls()?
    } else {
        no_roots()?
    };
    http::Client::build(builder, tls, None)
}

/// A TLS configuration that trusts nothing: plain HTTP needs none, and
/// building it reads no file.
fn no_roots() -> Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::internal(format!("cannot set up TLS: {e}")))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Sends the request `build` makes to `service`, under the metadata
/// policy and within `deadline`. `what` names the call ("the IMDSv2
/// session token"). `retry` says which statuses are worth another attempt
/// (each service documents its own). Returns the last reply, successful
/// or not; a call that never got one is explained here.
pub async fn send(
    service: &Service,
    what: &str,
    build: impl Fn() -> reqwest::RequestBuilder,
    retry: fn(u16) -> bool,
    deadline: &Deadline,
) -> Result<Reply> {
    let call = http::Call::new(
        service.name,
        format!("{what} from {} at {}", service.name, service.base),
    );
    let call = &call;
    // When the invocation's --timeout, not the metadata budget, bounds this
    // call, its running out is the deadline's doing, not a silent service
    // (whose usual cause, a hop limit, would be the wrong fix).
    let deadline_bound = deadline.remaining() < BUDGET;
    if deadline.expired() {
        return Err(ran_out(deadline, call));
    }
    let budget = Deadline::after(BUDGET.min(deadline.remaining()));
    let attempt_timeout = ATTEMPT_TIMEOUT.min(budget.remaining());
    let outcome = http::with_retries(
        call,
        &budget,
        || {
            http::send_bounded(
                crate::observe::Endpoint::Metadata,
                build(),
                attempt_timeout,
                MAX_BODY_BYTES,
            )
        },
        |outcome| match outcome {
            Ok(reply) if retry(reply.status) => Verdict::Retry {
                why: format!("HTTP {}", reply.status),
                status: Some(reply.status),
                retry_after: None,
            },
            // A refused or unroutable connection means no service: no
            // retry changes that.
            Err(e) if e.is_connect() && !e.is_timeout() => Verdict::Final,
            Err(e) if http::is_retryable_error(e) => Verdict::Retry {
                why: http::describe(e),
                status: None,
                retry_after: None,
            },
            _ => Verdict::Final,
        },
    )
    .await;
    let out_of_time = deadline_bound && deadline.expired();
    let failure = match outcome {
        Ok((Ok(reply), _)) => {
            answered(&call.what);
            return Ok(reply);
        }
        Ok((Err(e), _)) if out_of_time && e.is_timeout() => ran_out(deadline, call),
        Ok((Err(e), attempts)) => unanswered(service, call, &e, attempts),
        Err(_) if out_of_time => ran_out(deadline, call),
        Err(_) => silent(service, call, budget.budget()),
    };
    Err(failure.with(Fact::Service(service.name)))
}

/// The metadata calls of this invocation that got an answer, for
/// [`ran_out`] to name. One process serves one request, so the process
/// holds the list.
static ANSWERED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn answered(call: &str) {
    if let Ok(mut list) = ANSWERED.lock() {
        list.push(call.to_string());
    }
}

/// The invocation's deadline ran out before `call` got an answer (or
/// before it could start): said as such, with the calls that did answer,
/// so nobody goes looking for a silent metadata service.
fn ran_out(deadline: &Deadline, call: &http::Call) -> Error {
    let before = ANSWERED.lock().map(|list| list.clone()).unwrap_or_default();
    let answered = if before.is_empty() {
        String::new()
    } else {
        format!("; these answered before it: {}", before.join(", "))
    };
    Error::network(format!(
        "the deadline of {} (--timeout) ran out before {call} answered{answered}",
        wicp_base::duration::format_go(deadline.budget())
    ))
    .fix("raise --timeout (below 60s): the metadata service was answering, but the invocation's time was spent")
}

/// Statuses worth another attempt at any metadata service: it is updating
/// or overloaded.
pub fn transient(status: u16) -> bool {
    http::is_retryable_status(status)
}

fn unanswered(service: &Service, call: &http::Call, e: &reqwest::Error, attempts: u32) -> Error {
    let detail = http::describe(e);
    if e.is_connect() && !e.is_timeout() {
        return Error::network(format!(
            "{call} failed: nothing answers there ({detail}); this node has no metadata service"
        ))
        .fix(service.absent_fix);
    }
    if e.is_connect() {
        return Error::network(format!(
            "{call} failed: no connection within {} ({detail}); this node has no metadata service, or a firewall drops the traffic",
            wicp_base::duration::format_go(CONNECT_TIMEOUT)
        ))
        .fix(service.absent_fix);
    }
    if e.is_timeout() {
        return silent(service, call, ATTEMPT_TIMEOUT.saturating_mul(attempts));
    }
    Error::network(format!(
        "{call} failed after {attempts} attempt(s): {detail}"
    ))
    .fix(service.absent_fix)
}

fn silent(service: &Service, call: &http::Call, waited: Duration) -> Error {
    Error::network(format!(
        "{call} failed: the connection opened but no answer came within {}",
        wicp_base::duration::format_go(waited)
    ))
    .fix(service.silent_fix)
}

/// The start of a metadata service's error body, for messages: at most a
/// line, redacted.
pub fn said(reply: &Reply) -> String {
    let text = String::from_utf8_lossy(&reply.body);
    let line = wicp_base::redact::clean(text.lines().next().unwrap_or(""), 200);
    if line.is_empty() {
        wicp_base::redact::body_shape(&reply.body)
    } else {
        wicp_base::error::quote(&line)
    }
}
