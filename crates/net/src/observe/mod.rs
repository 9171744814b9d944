//! What one invocation did, for the people who watch a fleet rather than
//! one node's stderr: Prometheus metrics for node-exporter's textfile
//! collector ([`metrics`]) and an audit trail of which identity pulled
//! what ([`audit`]).
//!
//! `serve` (in the binary) fills one [`Record`] as it understands the request and
//! hands it to [`finish`] once, after the response is on stdout. Upstream
//! calls are counted where they are made ([`upstream`]): each invocation is
//! its own process, so a process-wide tally is exactly one invocation's,
//! the way the log level is process-wide, and no provider has to carry a
//! counter through its calls.
//!
//! Nothing here can fail a pull: a metrics directory or audit log that is
//! missing, full, read-only, a symbolic link, not root's or writable by group or others costs
//! one warning, and the kubelet gets its credential.

pub mod audit;
mod files;
pub mod metrics;

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use wicp_base::flags::{FlagSpec, Flags, Given, Takes, Usage};

use wicp_base::error::Kind;
use wicp_kubelet::request::token::ServiceAccount;

/// Longest the metrics or audit lock is waited for: far longer than any
/// holder keeps it (a few hundred microseconds), far shorter than a pull.
pub const LOCK_WAIT: Duration = Duration::from_secs(1);

/// `--metrics-dir`.
pub(crate) static METRICS_DIR: FlagSpec = FlagSpec {
    long: "metrics-dir",
    env: "WICP_METRICS_DIR",
    takes: Takes::One,
    value: "DIR",
    default: "",
    help: "Keep Prometheus metrics in DIR/wi_credential_provider.prom for \
        node-exporter's textfile collector (--collector.textfile.directory). \
        Off when unset.\n\n Each invocation updates counters kept in \
        DIR/.wi_credential_provider.state under a lock and rewrites the \
        .prom file atomically. Labels are the provider, the registry host, \
        the outcome and the error kind, never a service account, image or \
        token. A missing, read-only, full, symlinked or world-writable DIR \
        costs a warning, never a pull.",
};

/// `--audit-log`.
pub(crate) static AUDIT_LOG: FlagSpec = FlagSpec {
    long: "audit-log",
    env: "WICP_AUDIT_LOG",
    takes: Takes::One,
    value: "FILE",
    default: "",
    help: "Append one JSON line per invocation to FILE: which service account \
        pulled from which registry with which identity, and the outcome. Off \
        when unset.\n\n The file is created with mode 0600 and never holds a \
        token, password or secret. When it would grow past \
        --audit-log-max-bytes it is renamed to FILE.1 (replacing the \
        previous one) and a new FILE is started. A file that cannot be \
        written costs a warning, never a pull.",
};

/// `--audit-log-max-bytes`.
pub(crate) static AUDIT_LOG_MAX_BYTES: FlagSpec = FlagSpec {
    long: "audit-log-max-bytes",
    env: "WICP_AUDIT_LOG_MAX_BYTES",
    takes: Takes::One,
    value: "BYTES",
    default: "",
    help: "Size at which --audit-log is rotated to FILE.1, in bytes; at most \
        twice this is kept. Default: 10485760 (10 MiB).",
};

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// [`METRICS_DIR`].
    pub metrics_dir: Option<PathBuf>,

    /// [`AUDIT_LOG`].
    pub audit_log: Option<PathBuf>,

    /// [`AUDIT_LOG_MAX_BYTES`].
    pub audit_log_max_bytes: Option<u64>,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] = &[&METRICS_DIR, &AUDIT_LOG, &AUDIT_LOG_MAX_BYTES];
    const HEADING: &'static str = "Observability";

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            metrics_dir: given.path(&METRICS_DIR),
            audit_log: given.path(&AUDIT_LOG),
            audit_log_max_bytes: given.parsed(&AUDIT_LOG_MAX_BYTES, |v| {
                match v.parse::<u64>() {
                    Ok(n) if n >= 4096 => Ok(n),
                    Ok(_) => Err("at least 4096 bytes".to_string()),
                    Err(e) => Err(e.to_string()),
                }
            })?,
        })
    }
}

impl Options {
    /// Whether anything is recorded at all: when not, serving does none
    /// of the work below.
    pub fn enabled(&self) -> bool {
        self.metrics_dir.is_some() || self.audit_log.is_some()
    }
}

/// The kinds of upstream endpoint, for the `endpoint` label: a small fixed
/// set, whatever hosts an admin points the providers at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Endpoint {
    /// An identity exchange: AWS STS, Entra ID, Google STS, JFrog, Quay,
    /// Cloudsmith, Chainguard, an RFC 8693 server, a Vault login.
    TokenExchange,
    /// Google service account impersonation (IAM Credentials).
    Impersonation,
    /// A registry's own credential: ECR GetAuthorizationToken, ACR
    /// `/oauth2/exchange`.
    RegistryToken,
    /// A Vault KV read.
    SecretRead,
    /// A Vault token revocation.
    TokenRevoke,
    /// A cloud instance metadata service (node identity).
    Metadata,
    /// The EKS Pod Identity agent.
    PodIdentityAgent,
}

impl Endpoint {
    /// Every endpoint kind, for the tests that check their names.
    #[cfg(test)]
    pub const ALL: [Endpoint; 7] = [
        Endpoint::TokenExchange,
        Endpoint::Impersonation,
        Endpoint::RegistryToken,
        Endpoint::SecretRead,
        Endpoint::TokenRevoke,
        Endpoint::Metadata,
        Endpoint::PodIdentityAgent,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::TokenExchange => "token_exchange",
            Endpoint::Impersonation => "impersonation",
            Endpoint::RegistryToken => "registry_token",
            Endpoint::SecretRead => "secret_read",
            Endpoint::TokenRevoke => "token_revoke",
            Endpoint::Metadata => "metadata",
            Endpoint::PodIdentityAgent => "pod_identity_agent",
        }
    }
}

/// One upstream attempt: where, and the HTTP status (`None`: no reply, the
/// connection failed or timed out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Call {
    pub endpoint: Endpoint,
    pub status: Option<u16>,
}

impl Call {
    /// The `status` label: the status class, or `error` without a reply.
    pub(crate) fn status_class(&self) -> &'static str {
        match self.status {
            Some(100..=199) => "1xx",
            Some(200..=299) => "2xx",
            Some(300..=399) => "3xx",
            Some(400..=499) => "4xx",
            Some(500..=599) => "5xx",
            Some(_) => "other",
            None => "error",
        }
    }
}

/// This process's upstream attempts. Bounded: an invocation makes a
/// handful (four attempts per call at most), so the cap only guards
/// against a bug.
static CALLS: Mutex<Vec<Call>> = Mutex::new(Vec::new());
const MAX_CALLS: usize = 256;

/// Counts one upstream attempt; every HTTP client of the plugin calls it
/// once per attempt, successful or not.
pub fn upstream(endpoint: Endpoint, status: Option<u16>) {
    let mut calls = CALLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if calls.len() < MAX_CALLS {
        calls.push(Call { endpoint, status });
    }
}

/// The upstream attempts this process made so far.
pub fn calls() -> Vec<Call> {
    CALLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// The status of the last upstream reply, for the log line.
pub fn last_status() -> Option<u16> {
    calls().iter().rev().find_map(|c| c.status)
}

/// How an invocation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Served from the on-disk cache.
    Hit,
    /// Exchanged upstream (with or without a cache).
    Miss,
    /// No credential.
    Error(Kind),
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Hit => "hit",
            Outcome::Miss => "miss",
            Outcome::Error(_) => "error",
        }
    }
}

/// Whose identity a credential carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identity {
    /// The pod's service account's own.
    ServiceAccount,
    /// The node's (`--fallback node`).
    Node,
}

impl Identity {
    pub fn name(self) -> &'static str {
        match self {
            Identity::ServiceAccount => "service_account",
            Identity::Node => "node",
        }
    }
}

/// What the on-disk cache held after a miss, for the cache gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    pub entries: u64,
    pub bytes: u64,
    /// Unix seconds; `None` without a readable entry.
    pub earliest_expiry: Option<i64>,
}

/// Everything one invocation learned, filled in by `serve` (in the binary) as it
/// goes; what is unknown when it fails stays `None`.
#[derive(Debug)]
pub struct Record {
    pub started: Instant,
    /// The provider the command line chose (`--provider` or the binary's
    /// name), or `auto`: the label until a provider is routed to.
    pub chosen: &'static str,
    /// The provider the request was routed to.
    pub provider: Option<&'static str>,
    /// The image's registry host.
    pub registry: Option<String>,
    pub image: Option<String>,
    pub service_account: Option<ServiceAccount>,
    /// The pod the token is bound to.
    pub pod: Option<String>,
    pub identity: Option<Identity>,
    /// The plan's inputs that name the identity used (a role ARN, a client
    /// ID, a robot, a Vault path), as the provider declares them.
    pub principal: Vec<(&'static str, String)>,
    /// What the cache did, in words ("from the on-disk cache").
    pub cache: Option<&'static str>,
    /// How long the upstream exchange took, when one ran.
    pub exchange: Option<Duration>,
    pub cache_stats: Option<CacheStats>,
    /// `None` until the invocation ends.
    pub outcome: Option<Outcome>,
    /// What failed and the fix, already redacted.
    pub error: Option<(String, Option<String>)>,
    /// The failure's facts ([`wicp_base::error::Fact`]), by name, redacted.
    pub error_facts: Vec<(&'static str, String)>,
}

impl Record {
    pub fn new(started: Instant) -> Self {
        Record {
            started,
            chosen: "",
            provider: None,
            registry: None,
            image: None,
            service_account: None,
            pod: None,
            identity: None,
            principal: Vec::new(),
            cache: None,
            exchange: None,
            cache_stats: None,
            outcome: None,
            error: None,
            error_facts: Vec::new(),
        }
    }

    /// Notes how the invocation failed: the kind, and the message and fix
    /// masked as a log line would be.
    pub fn failed(&mut self, error: &wicp_base::error::Error) {
        self.outcome = Some(Outcome::Error(error.kind()));
        self.error = Some((
            wicp_base::redact::redact(error.what()),
            error.remedy().map(wicp_base::redact::redact),
        ));
        self.error_facts = error
            .facts()
            .iter()
            .map(|fact| (fact.name(), wicp_base::redact::redact(&fact.value())))
            .collect();
    }

    /// The `provider` label: the provider routed to, else the one chosen
    /// (`auto` when `auto` failed before picking one).
    pub(crate) fn provider_label(&self) -> &'static str {
        self.provider.unwrap_or(self.chosen)
    }
}

/// Records the finished invocation in the metrics and the audit log that
/// `options` turn on. Never fails: each problem is one warning.
pub fn finish(options: &Options, record: &Record, now: i64) {
    if let Some(dir) = &options.metrics_dir
        && let Err(why) = metrics::update(dir, record, &calls(), now)
    {
        wicp_base::log::warning!("metrics not updated in {}: {why}", dir.display());
    }
    if let Some(file) = &options.audit_log
        && let Err(why) = audit::append(
            file,
            options.audit_log_max_bytes.unwrap_or(10 * 1024 * 1024),
            record,
            now,
        )
    {
        wicp_base::log::warning!("audit record not written to {}: {why}", file.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classes() {
        let class = |status| {
            Call {
                endpoint: Endpoint::Metadata,
                status,
            }
            .status_class()
        };
        assert_eq!(class(Some(200)), "2xx");
        assert_eq!(class(Some(204)), "2xx");
        assert_eq!(class(Some(302)), "3xx");
        assert_eq!(class(Some(403)), "4xx");
        assert_eq!(class(Some(429)), "4xx");
        assert_eq!(class(Some(503)), "5xx");
        assert_eq!(class(Some(600)), "other");
        assert_eq!(class(None), "error");
    }

    #[test]
    fn label_values_are_prometheus_safe_and_distinct() {
        let names: Vec<&str> = Endpoint::ALL
            .iter()
            .map(|e| e.name())
            .chain(Kind::ALL.iter().map(|k| k.name()))
            .collect();
        for name in &names {
            assert!(
                name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{name}"
            );
        }
        let mut sorted = Endpoint::ALL.map(Endpoint::name).to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), Endpoint::ALL.len());
    }
}
