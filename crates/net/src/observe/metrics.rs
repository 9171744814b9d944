//! Metrics in the Prometheus text format, for node-exporter's textfile
//! collector.
//!
//! Every invocation is its own process, so the counters live on disk: a
//! small JSON state file, `DIR/.wi_credential_provider.state`, read and
//! rewritten in place under one lock (`DIR/.wi_credential_provider.lock`) by
//! each invocation, which then rewrites `DIR/wi_credential_provider.prom` from
//! it: a new file, exchanged with the old one, so the collector never
//! reads half a file. The state is ours alone (0600); the `.prom` is 0644
//! for the collector's user. A state file that cannot be parsed is reset
//! with a warning: counters restart at zero, which Prometheus' `rate()`
//! reads as a counter reset.
//!
//! Bounded: label values come from fixed sets (providers, outcomes, error
//! kinds, endpoint kinds, status classes) except the registry host, of
//! which [`MAX_REGISTRIES`] are kept (a host unseen for
//! [`REGISTRY_SLOT_AGE`] giving its slot to a new one) and the rest counted
//! as `other`; the state file is refused past [`MAX_STATE_BYTES`].
//! No label ever holds a service account, image, role or token.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Call, Record, files};

/// The file node-exporter reads.
const PROM_FILE: &str = "wi_credential_provider.prom";
/// Our counters.
pub const STATE_FILE: &str = ".wi_credential_provider.state";
const LOCK_FILE: &str = ".wi_credential_provider.lock";

/// Distinct registry hosts kept as label values; the rest are `other`.
const MAX_REGISTRIES: usize = 64;
/// The registry label of hosts beyond [`MAX_REGISTRIES`].
const OTHER_REGISTRY: &str = "other";
/// A registry label not seen for this long gives its slot to a new host,
/// so hosts made up once (an image name under a matched pattern) cannot
/// keep every later registry at `other` for good.
const REGISTRY_SLOT_AGE: i64 = 7 * 24 * 3600;
/// A state file larger than this is not ours (a full one is a few KiB).
pub const MAX_STATE_BYTES: u64 = 1024 * 1024;
/// The state's format; another is reset.
const FORMAT: u32 = 1;

/// Upper bounds of the exchange duration histogram, in seconds: from a
/// fast token endpoint to the 45 s default deadline.
const BUCKETS: [f64; 11] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 45.0];

/// Label values are joined with this in the state's map keys; no label
/// value can hold it ([`label_value`]).
const SEP: char = '\t';

/// The counters, as kept between invocations.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct State {
    pub format: u32,
    /// provider, registry, outcome, kind, identity.
    pub invocations: BTreeMap<String, u64>,
    /// provider.
    pub exchange: BTreeMap<String, Histogram>,
    /// provider, endpoint, status class.
    pub upstream: BTreeMap<String, u64>,
    /// provider: Unix seconds.
    pub last_success: BTreeMap<String, f64>,
    pub last_failure: BTreeMap<String, f64>,
    /// After the last miss that could look at the cache.
    pub cache: Option<CacheGauges>,
    /// registry label: when it was last counted (Unix seconds).
    #[serde(default)]
    pub registry_seen: BTreeMap<String, i64>,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Histogram {
    /// Cumulative counts per [`BUCKETS`] bound.
    pub buckets: Vec<u64>,
    pub count: u64,
    pub sum: f64,
}

#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CacheGauges {
    pub entries: u64,
    pub bytes: u64,
    pub earliest_expiry: Option<i64>,
}

/// A label value as the state and the exposition keep it: printable ASCII
/// without quotes, backslashes or the separator. Registry hosts are
/// checked already; this only guarantees it.
fn label_value(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl State {
    /// Adds `record` (and this process's upstream `calls`) at `now`.
    pub fn add(&mut self, record: &Record, calls: &[Call], now: i64) {
        self.format = FORMAT;
        let provider = record.provider_label();
        let registry = self.registry_label(record.registry.as_deref().unwrap_or(""), now);
        if !registry.is_empty() && registry != OTHER_REGISTRY {
            self.registry_seen.insert(registry.clone(), now);
        }
        let outcome = record
            .outcome
            .unwrap_or(super::Outcome::Error(wicp_base::error::Kind::Internal));
        let kind = match outcome {
            super::Outcome::Error(kind) => kind.name(),
            _ => "",
        };
        let identity = match outcome {
            super::Outcome::Error(_) => "",
            _ => record.identity.map_or("", super::Identity::name),
        };
        let key = [provider, &registry, outcome.name(), kind, identity].join(&SEP.to_string());
        *self.invocations.entry(key).or_insert(0) += 1;

        if let Some(took) = record.exchange {
            let seconds = took.as_secs_f64();
            let h = self
                .exchange
                .entry(provider.to_string())
                .or_insert_with(|| Histogram {
                    buckets: vec![0; BUCKETS.len()],
                    ..Histogram::default()
                });
            h.buckets.resize(BUCKETS.len(), 0);
            for (bound, count) in BUCKETS.iter().zip(h.buckets.iter_mut()) {
                if seconds <= *bound {
                    *count += 1;
                }
            }
            h.count += 1;
            h.sum += seconds;
        }
        for call in calls {
            let key = [provider, call.endpoint.name(), call.status_class()].join(&SEP.to_string());
            *self.upstream.entry(key).or_insert(0) += 1;
        }
        #[allow(clippy::cast_precision_loss)]
        let at = now as f64;
        match outcome {
            super::Outcome::Error(_) => self.last_failure.insert(provider.to_string(), at),
            _ => self.last_success.insert(provider.to_string(), at),
        };
        if let Some(stats) = record.cache_stats {
            self.cache = Some(CacheGauges {
                entries: stats.entries,
                bytes: stats.bytes,
                earliest_expiry: stats.earliest_expiry,
            });
        }
    }

    /// `registry` as a label value: kept while fewer than
    /// [`MAX_REGISTRIES`] hosts are, or when the least recently seen of
    /// them has not been seen for [`REGISTRY_SLOT_AGE`] (its series are
    /// dropped and it gives up its slot); else [`OTHER_REGISTRY`].
    fn registry_label(&mut self, registry: &str, now: i64) -> String {
        let value = label_value(registry);
        let known = |r: &str| {
            self.invocations
                .keys()
                .any(|k| k.split(SEP).nth(1) == Some(r))
        };
        if value.is_empty() || known(&value) {
            return value;
        }
        let mut hosts: Vec<&str> = self
            .invocations
            .keys()
            .filter_map(|k| k.split(SEP).nth(1))
            .filter(|r| !r.is_empty() && *r != OTHER_REGISTRY)
            .collect();
        hosts.sort_unstable();
        hosts.dedup();
        if hosts.len() < MAX_REGISTRIES {
            return value;
        }
        // A state from before registry_seen has no times: its hosts count
        // as seen now, and age from here.
        let stalest = hosts
            .iter()
            .map(|h| {
                (
                    self.registry_seen.get(*h).copied().unwrap_or(now),
                    h.to_string(),
                )
            })
            .min();
        match stalest {
            Some((seen, host)) if now.saturating_sub(seen) >= REGISTRY_SLOT_AGE => {
                let gone = |k: &String| k.split(SEP).nth(1) == Some(host.as_str());
                self.invocations.retain(|k, _| !gone(k));
                self.registry_seen.remove(&host);
                value
            }
            _ => OTHER_REGISTRY.to_string(),
        }
    }

    /// The state in the Prometheus text exposition format (0.0.4), one
    /// family after another, each with its HELP and TYPE, no timestamps
    /// (node-exporter refuses files with them).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        family(
            &mut out,
            "wicp_build_info",
            "gauge",
            "The plugin's version; always 1.",
        );
        let _ = writeln!(
            out,
            "wicp_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        family(
            &mut out,
            "wicp_invocations_total",
            "counter",
            "Kubelet requests served, by provider, registry host, outcome (hit: from the on-disk cache, miss: exchanged, error), error kind and whose identity (service_account, or node under --fallback node).",
        );
        for (key, value) in &self.invocations {
            let labels = labels(
                key,
                &["provider", "registry", "outcome", "kind", "identity"],
            );
            let _ = writeln!(out, "wicp_invocations_total{labels} {value}");
        }
        render_exchange(&mut out, &self.exchange);
        family(
            &mut out,
            "wicp_upstream_requests_total",
            "counter",
            "HTTP attempts to identity services, registries and metadata services, by provider, endpoint kind and status class (error: no reply).",
        );
        for (key, value) in &self.upstream {
            let labels = labels(key, &["provider", "endpoint", "status"]);
            let _ = writeln!(out, "wicp_upstream_requests_total{labels} {value}");
        }
        for (name, help, map) in [
            (
                "wicp_last_success_timestamp_seconds",
                "When a request was last served, by provider (Unix time).",
                &self.last_success,
            ),
            (
                "wicp_last_failure_timestamp_seconds",
                "When a request last failed, by provider (Unix time).",
                &self.last_failure,
            ),
        ] {
            family(&mut out, name, "gauge", help);
            for (provider, at) in map {
                let _ = writeln!(
                    out,
                    "{name}{{provider=\"{}\"}} {}",
                    label_value(provider),
                    float(*at)
                );
            }
        }
        if let Some(cache) = &self.cache {
            render_cache(&mut out, cache);
        }
        out
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// `{a="x",b="y"}` from a state key, leaving out empty values (which
/// Prometheus reads as no label anyway).
fn labels(key: &str, names: &[&str]) -> String {
    let pairs: Vec<String> = names
        .iter()
        .zip(key.split(SEP))
        .filter(|(_, value)| !value.is_empty())
        .map(|(name, value)| format!("{name}=\"{}\"", label_value(value)))
        .collect();
    format!("{{{}}}", pairs.join(","))
}

/// A float as the text format writes it.
fn float(value: f64) -> String {
    if value.is_finite() {
        format!("{value}")
    } else {
        "0".to_string()
    }
}

/// Parses a state file: `None` when it is not one of ours (corrupt, another
/// format), for a reset. `node doctor` reads it too, without the lock: a
/// state caught mid-write does not parse, and doctor says so.
pub fn parse_state(bytes: &[u8]) -> Option<State> {
    let state: State = serde_json::from_slice(bytes).ok()?;
    let buckets_ok = state
        .exchange
        .values()
        .all(|h| h.buckets.len() == BUCKETS.len());
    (state.format == FORMAT && buckets_ok).then_some(state)
}

/// Adds `record` to the counters in `dir` and rewrites the `.prom` file.
/// The error is a clause for one warning.
pub fn update(dir: &Path, record: &Record, calls: &[Call], now: i64) -> Result<(), String> {
    files::check_dir(dir)?;
    let owner = wicp_base::platform::running_owner()
        .map_err(|e| format!("cannot tell which user runs the plugin: {e}"))?;
    let _lock = files::lock(&dir.join(LOCK_FILE), &owner)?;
    let state_path = dir.join(STATE_FILE);
    let mut file = match files::open_state(&state_path, &owner) {
        Ok(file) => file,
        Err(e) => {
            wicp_base::log::warning!(
                "cannot use the metrics state ({e}); counting again from zero"
            );
            std::fs::remove_file(&state_path)
                .and_then(|()| files::open_state(&state_path, &owner))
                .map_err(|e| format!("cannot replace {}: {e}", state_path.display()))?
        }
    };
    let mut state = match files::read_to_end(&mut file, MAX_STATE_BYTES) {
        Ok(bytes) if bytes.is_empty() => State::default(),
        Ok(bytes) => parse_state(&bytes).unwrap_or_else(|| {
            wicp_base::log::warning!(
                "the metrics state {} is corrupt or of another version; counting again from zero",
                state_path.display()
            );
            State::default()
        }),
        Err(e) => {
            wicp_base::log::warning!(
                "cannot read the metrics state ({e}); counting again from zero"
            );
            State::default()
        }
    };
    state.add(record, calls, now);
    let bytes = serde_json::to_vec(&state).map_err(|e| format!("cannot encode the state: {e}"))?;
    // Rewritten in place under the lock, without a rename or an fsync: on
    // ext4 a rename over a file with unwritten data forces it to disk
    // (auto_da_alloc), which cost a hit 0.3 ms. A crash mid-write leaves a
    // file that does not parse, which the next invocation resets like a
    // corrupt one.
    files::overwrite(&mut file, &bytes)
        .map_err(|e| format!("cannot write {}: {e}", state_path.display()))?;
    drop(file);
    let prom = dir.join(PROM_FILE);
    files::replace(&prom, state.render().as_bytes(), 0o644)
        .map_err(|e| format!("cannot write {}: {e}", prom.display()))
}

/// The `wicp_exchange_duration_seconds` histogram family.
fn render_exchange(out: &mut String, exchange: &BTreeMap<String, Histogram>) {
    family(
        out,
        "wicp_exchange_duration_seconds",
        "histogram",
        "Time the upstream exchange of a miss took, successful or not, by provider.",
    );
    for (provider, h) in exchange {
        let provider = label_value(provider);
        for (bound, count) in BUCKETS.iter().zip(&h.buckets) {
            let _ = writeln!(
                out,
                "wicp_exchange_duration_seconds_bucket{{provider=\"{provider}\",le=\"{bound}\"}} {count}"
            );
        }
        let _ = writeln!(
            out,
            "wicp_exchange_duration_seconds_bucket{{provider=\"{provider}\",le=\"+Inf\"}} {}",
            h.count
        );
        let _ = writeln!(
            out,
            "wicp_exchange_duration_seconds_sum{{provider=\"{provider}\"}} {}",
            float(h.sum)
        );
        let _ = writeln!(
            out,
            "wicp_exchange_duration_seconds_count{{provider=\"{provider}\"}} {}",
            h.count
        );
    }
}

/// The cache gauges, as of the last miss.
fn render_cache(out: &mut String, cache: &CacheGauges) {
    family(
        out,
        "wicp_cache_entries",
        "gauge",
        "Credentials in the on-disk cache after the last miss.",
    );
    let _ = writeln!(out, "wicp_cache_entries {}", cache.entries);
    family(
        out,
        "wicp_cache_bytes",
        "gauge",
        "Size of the on-disk cache's entries after the last miss.",
    );
    let _ = writeln!(out, "wicp_cache_bytes {}", cache.bytes);
    if let Some(at) = cache.earliest_expiry {
        family(
            out,
            "wicp_cache_earliest_expiry_timestamp_seconds",
            "gauge",
            "When the first cached credential expires, as of the last miss (Unix time).",
        );
        let _ = writeln!(out, "wicp_cache_earliest_expiry_timestamp_seconds {at}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::{CacheStats, Endpoint, Identity, Outcome};
    use std::time::{Duration, Instant};
    use wicp_base::error::Kind;

    fn record(provider: &'static str, registry: &str, outcome: Outcome) -> Record {
        let mut r = Record::new(Instant::now());
        r.provider = Some(provider);
        r.registry = Some(registry.to_string());
        r.outcome = Some(outcome);
        r.identity = Some(Identity::ServiceAccount);
        r
    }

    #[test]
    fn counts_render_as_prometheus_reads_them() {
        let mut state = State::default();
        let mut miss = record("aws", "1.dkr.ecr.us-east-1.amazonaws.com", Outcome::Miss);
        miss.exchange = Some(Duration::from_millis(300));
        miss.cache_stats = Some(CacheStats {
            entries: 2,
            bytes: 900,
            earliest_expiry: Some(1_800_000_000),
        });
        let calls = [
            Call {
                endpoint: Endpoint::TokenExchange,
                status: Some(200),
            },
            Call {
                endpoint: Endpoint::RegistryToken,
                status: Some(503),
            },
            Call {
                endpoint: Endpoint::RegistryToken,
                status: None,
            },
        ];
        state.add(&miss, &calls, 1_700_000_000);
        state.add(
            &record("aws", "1.dkr.ecr.us-east-1.amazonaws.com", Outcome::Hit),
            &[],
            1_700_000_001,
        );
        state.add(
            &record("vault", "r.example", Outcome::Error(Kind::Upstream)),
            &[],
            1_700_000_002,
        );
        let text = state.render();
        for line in [
            "wicp_invocations_total{provider=\"aws\",registry=\"1.dkr.ecr.us-east-1.amazonaws.com\",outcome=\"hit\",identity=\"service_account\"} 1",
            "wicp_invocations_total{provider=\"aws\",registry=\"1.dkr.ecr.us-east-1.amazonaws.com\",outcome=\"miss\",identity=\"service_account\"} 1",
            "wicp_invocations_total{provider=\"vault\",registry=\"r.example\",outcome=\"error\",kind=\"upstream\"} 1",
            "wicp_exchange_duration_seconds_bucket{provider=\"aws\",le=\"0.25\"} 0",
            "wicp_exchange_duration_seconds_bucket{provider=\"aws\",le=\"0.5\"} 1",
            "wicp_exchange_duration_seconds_bucket{provider=\"aws\",le=\"+Inf\"} 1",
            "wicp_exchange_duration_seconds_count{provider=\"aws\"} 1",
            "wicp_upstream_requests_total{provider=\"aws\",endpoint=\"registry_token\",status=\"5xx\"} 1",
            "wicp_upstream_requests_total{provider=\"aws\",endpoint=\"registry_token\",status=\"error\"} 1",
            "wicp_upstream_requests_total{provider=\"aws\",endpoint=\"token_exchange\",status=\"2xx\"} 1",
            "wicp_last_success_timestamp_seconds{provider=\"aws\"} 1700000001",
            "wicp_last_failure_timestamp_seconds{provider=\"vault\"} 1700000002",
            "wicp_cache_entries 2",
            "wicp_cache_bytes 900",
            "wicp_cache_earliest_expiry_timestamp_seconds 1800000000",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
        }
        // The state survives its own encoding.
        let bytes = serde_json::to_vec(&state).unwrap();
        assert_eq!(parse_state(&bytes).unwrap(), state);
    }

    #[test]
    fn registries_beyond_the_cap_are_other() {
        let mut state = State::default();
        for i in 0..MAX_REGISTRIES + 5 {
            state.add(
                &record("quay", &format!("r{i}.example"), Outcome::Hit),
                &[],
                1,
            );
        }
        let text = state.render();
        let series = text
            .lines()
            .filter(|l| l.starts_with("wicp_invocations_total{"))
            .count();
        assert_eq!(series, MAX_REGISTRIES + 1, "{text}");
        assert!(
            text.contains("registry=\"other\",outcome=\"hit\",identity=\"service_account\"} 5")
        );
        // Round-4 item 11: a slot not used for a week goes to a new host.
        let mut aged = State::default();
        for i in 0..MAX_REGISTRIES {
            aged.add(
                &record("quay", &format!("r{i}.example"), Outcome::Hit),
                &[],
                1,
            );
        }
        for i in 1..MAX_REGISTRIES {
            aged.add(
                &record("quay", &format!("r{i}.example"), Outcome::Hit),
                &[],
                2,
            );
        }
        let day = 24 * 3600;
        aged.add(&record("quay", "early.example", Outcome::Hit), &[], 6 * day);
        assert!(
            aged.render().contains("registry=\"other\""),
            "a week has not passed"
        );
        aged.add(&record("quay", "late.example", Outcome::Hit), &[], 8 * day);
        let text = aged.render();
        assert!(text.contains("registry=\"late.example\""), "{text}");
        assert!(
            !text.contains("registry=\"r0.example\""),
            "the stale host's series go"
        );
        assert!(text.contains("registry=\"r1.example\""), "{text}");
        // A host already counted keeps its own label.
        state.add(&record("quay", "r0.example", Outcome::Hit), &[], 1);
        assert!(
            state.render().contains(
                "registry=\"r0.example\",outcome=\"hit\",identity=\"service_account\"} 2"
            )
        );
    }

    #[test]
    fn corrupt_or_foreign_state_is_not_read() {
        assert!(parse_state(b"").is_none());
        assert!(parse_state(b"{\"format\":1").is_none());
        assert!(parse_state(b"{\"format\":2,\"invocations\":{},\"exchange\":{},\"upstream\":{},\"last_success\":{},\"last_failure\":{},\"cache\":null}").is_none());
        assert!(parse_state(b"{\"format\":1,\"invocations\":{},\"exchange\":{\"aws\":{\"buckets\":[1],\"count\":1,\"sum\":1}},\"upstream\":{},\"last_success\":{},\"last_failure\":{},\"cache\":null}").is_none());
        assert!(parse_state(b"[]").is_none());
    }

    #[test]
    fn hostile_label_values_cannot_break_the_format() {
        assert_eq!(label_value("a\"b\\c\nd\te"), "a_b_c_d_e");
        let mut state = State::default();
        state.add(&record("aws", "x\"}\n# evil 1", Outcome::Hit), &[], 1);
        let text = state.render();
        assert!(!text.contains("# evil"), "{text}");
        assert!(text.contains("registry=\"x_}_#_evil_1\""), "{text}");
    }
}
