//! What `node doctor` learns from the plugin's own records: the metrics
//! state (`--metrics-dir`) and the audit log (`--audit-log`) that our
//! provider entries turn on, read inside `--root`, bounded. Recent failures
//! are reported by error kind, with the fix the latest one gave.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::checks::{Check, Verdict, check};
use wicp_base::error::Kind;
use wicp_base::platform::Host;
use wicp_kubelet::config::provider_config::Entry;
use wicp_net::inputs::Env;
use wicp_net::observe::{audit, metrics};

/// Failures older than this are history, not news.
pub(super) const RECENT_SECS: i64 = 24 * 3600;

/// The metrics directories and audit logs our `entries` configure, each
/// once, in the order met.
/// `env` is the environment the kubelet starts plugins with.
pub(super) fn configured(entries: &[&Entry], env: &Env) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut dirs = Vec::new();
    let mut logs = Vec::new();
    for (_, options) in super::checks::entry_options(entries, env) {
        let observe = &options.observe;
        if let Some(dir) = &observe.metrics_dir
            && !dirs.contains(dir)
        {
            dirs.push(dir.clone());
        }
        if let Some(log) = &observe.audit_log
            && !logs.contains(log)
        {
            logs.push(log.clone());
        }
    }
    (dirs, logs)
}

/// One check per metrics directory: what the counters say about failures.
pub(super) fn metrics_check(host: &Host, dir: &Path, now: i64) -> Check {
    let name = "metrics";
    let state = match read_state(host, dir) {
        Ok(state) => state,
        Err(unreadable) => return unreadable,
    };
    let (total, by_kind) = failures_by_kind(&state);
    let last_failure = state
        .last_failure
        .iter()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(provider, at)| (provider.clone(), *at));
    let failures: u64 = by_kind.values().sum();
    #[allow(clippy::cast_possible_truncation)]
    let recent = last_failure
        .as_ref()
        .is_some_and(|(_, at)| now - (*at as i64) < RECENT_SECS);
    let kinds = by_kind
        .iter()
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect::<Vec<_>>()
        .join(", ");
    match last_failure {
        Some((provider, at)) if recent => {
            #[allow(clippy::cast_possible_truncation)]
            let at = wicp_base::duration::format_unix(at as i64);
            let worst = by_kind
                .iter()
                .max_by_key(|(_, n)| **n)
                .and_then(|(kind, _)| Kind::ALL.iter().find(|k| k.name() == kind));
            check(
                Verdict::Warn,
                name,
                format!(
                    "{failures} of {total} pulls failed since the counters started ({kinds}); the last failure was {provider}'s at {at}"
                ),
                worst.map(|k| format!("for the {} failures: {}", k.name(), k.usual_fix())),
            )
        }
        _ => check(
            Verdict::Ok,
            name,
            format!(
                "{total} pulls counted in {}, {failures} failed{}, none in the last 24h",
                dir.display(),
                if kinds.is_empty() {
                    String::new()
                } else {
                    format!(" ({kinds})")
                }
            ),
            None,
        ),
    }
}

/// The metrics state in `dir`, or the check saying why it cannot be read.
fn read_state(host: &Host, dir: &Path) -> Result<metrics::State, Check> {
    let path = dir.join(metrics::STATE_FILE);
    let name = "metrics";
    let bytes = match host.read_own(&path, metrics::MAX_STATE_BYTES, false) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return Err(check(
                Verdict::Warn,
                name,
                format!(
                    "{} has no metrics yet: no pull was served since --metrics-dir was set, or the directory is unusable (the plugin's warning in the kubelet log says why)",
                    dir.display()
                ),
                Some(format!(
                    "check that {} exists, is root's, not writable by group or others and on a writable file system",
                    dir.display()
                )),
            ));
        }
        Err(e) => {
            return Err(check(
                Verdict::Warn,
                name,
                format!("cannot read {}: {e}", path.display()),
                None,
            ));
        }
    };
    metrics::parse_state(&bytes).ok_or_else(|| {
        check(
            Verdict::Warn,
            name,
            format!(
                "{} is not a metrics state this version reads; the next pull starts it again",
                path.display()
            ),
            None,
        )
    })
}

/// The pulls counted, and the failures by error kind.
fn failures_by_kind(state: &metrics::State) -> (u64, BTreeMap<String, u64>) {
    let mut total = 0u64;
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    for (key, count) in &state.invocations {
        total += count;
        let mut labels = key.split('\t');
        let (outcome, kind) = (labels.nth(2), labels.next());
        if outcome == Some("error") {
            *by_kind.entry(kind.unwrap_or("").to_string()).or_insert(0) += count;
        }
    }
    (total, by_kind)
}

/// What the audit log says of one error kind's recent failures.
struct Seen {
    count: usize,
    accounts: Vec<String>,
    /// The latest failure's time, message and fix.
    latest: (String, String, Option<String>),
}

/// The pulls recorded in the last 24 hours before `now`, and their
/// failures by error kind.
fn recent_failures(records: &[serde_json::Value], now: i64) -> (usize, BTreeMap<String, Seen>) {
    let mut by_kind: BTreeMap<String, Seen> = BTreeMap::new();
    let mut recent = 0usize;
    for r in records {
        let at = r["time"]
            .as_str()
            .and_then(wicp_base::duration::parse_rfc3339)
            .unwrap_or(0);
        if now - at >= RECENT_SECS {
            continue;
        }
        recent += 1;
        if r["outcome"] != "error" {
            continue;
        }
        let kind = r["error_kind"].as_str().unwrap_or("unknown").to_string();
        let text = |f: &str| r[f].as_str().map(str::to_string);
        let seen = by_kind.entry(kind).or_insert_with(|| Seen {
            count: 0,
            accounts: Vec::new(),
            latest: (String::new(), String::new(), None),
        });
        seen.count += 1;
        let account = text("service_account").unwrap_or_else(|| "no service account".into());
        if !seen.accounts.contains(&account) {
            seen.accounts.push(account);
        }
        seen.latest = (
            text("time").unwrap_or_default(),
            text("error").unwrap_or_default(),
            text("fix"),
        );
    }
    (recent, by_kind)
}

/// One check per error kind that failed in the audit log's last 24 hours
/// (of its last [`audit::MAX_READ_BYTES`]), with the latest failure's own
/// message and fix; one `ok` check when none did.
pub(super) fn audit_checks(host: &Host, log: &Path, now: i64) -> Vec<Check> {
    let name = "audit";
    let bytes = match host.read_own(log, audit::MAX_READ_BYTES, true) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return vec![check(
                Verdict::Warn,
                name,
                format!(
                    "{} does not exist yet: no pull was recorded since --audit-log was set",
                    log.display()
                ),
                None,
            )];
        }
        Err(e) => {
            return vec![check(
                Verdict::Warn,
                name,
                format!("cannot read {}: {e}", log.display()),
                None,
            )];
        }
    };
    let records = audit::parse(&String::from_utf8_lossy(&bytes));
    let (recent, by_kind) = recent_failures(&records, now);
    if by_kind.is_empty() {
        return vec![check(
            Verdict::Ok,
            name,
            format!(
                "{recent} pulls recorded in {} in the last 24h, none failed",
                log.display()
            ),
            None,
        )];
    }
    by_kind
        .into_iter()
        .map(|(kind, seen)| {
            let (at, error, fix) = seen.latest;
            check(
                Verdict::Warn,
                name,
                format!(
                    "{} {kind} failures in the last 24h ({} service accounts: {}); latest at {at}: {error}",
                    seen.count,
                    seen.accounts.len(),
                    seen.accounts.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
                ),
                fix.or_else(|| {
                    Kind::ALL
                        .iter()
                        .find(|k| k.name() == kind)
                        .map(|k| k.usual_fix().to_string())
                }),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use wicp_net::observe::{Identity, Outcome, Record};

    const NOW: i64 = 1_800_000_000;

    fn record(outcome: Outcome, account: &str) -> Record {
        let mut r = Record::new(Instant::now());
        r.provider = Some("vault");
        r.registry = Some("r.example".into());
        r.identity = Some(Identity::ServiceAccount);
        r.service_account = Some(wicp_kubelet::request::token::ServiceAccount {
            namespace: "team".into(),
            name: account.into(),
            uid: "u".into(),
        });
        r.outcome = Some(outcome);
        if let Outcome::Error(_) = outcome {
            r.error = Some((
                "Vault refused the login".into(),
                Some("bind the role to the service account".into()),
            ));
        }
        r
    }

    /// The entries' flags and env name the files, and doctor reads them
    /// inside the root: counts by kind with the fix, and the audit log's
    /// latest failure per kind with its own fix.
    #[test]
    fn doctor_reports_recent_failures_by_kind_with_the_fix() {
        let root = tempfile::tempdir().unwrap();
        let config = root.path().join("config.yaml");
        std::fs::write(
            &config,
            r#"apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: wi-credential-provider-passthrough
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    matchImages: ["harbor.example.com"]
    defaultCacheDuration: "0s"
    args: ["--registry", "harbor.example.com", "--metrics-dir", "/var/lib/wicp-metrics"]
    env:
      - name: WICP_AUDIT_LOG
        value: /var/log/wicp/audit.log
"#,
        )
        .unwrap();
        let loaded = wicp_kubelet::config::provider_config::load(&config);
        let entries: Vec<&Entry> = loaded.entries.iter().collect();
        let (dirs, logs) = configured(&entries, &Env::default());
        assert_eq!(dirs, [PathBuf::from("/var/lib/wicp-metrics")]);
        assert_eq!(logs, [PathBuf::from("/var/log/wicp/audit.log")]);

        let host = Host::open(root.path()).unwrap();
        // Nothing recorded yet.
        assert_eq!(metrics_check(&host, &dirs[0], NOW).verdict, Verdict::Warn);
        assert_eq!(audit_checks(&host, &logs[0], NOW)[0].verdict, Verdict::Warn);

        let metrics_dir = root.path().join("var/lib/wicp-metrics");
        let log_dir = root.path().join("var/log/wicp");
        std::fs::create_dir_all(&metrics_dir).unwrap();
        std::fs::create_dir_all(&log_dir).unwrap();
        let log = log_dir.join("audit.log");
        for (outcome, account, at) in [
            (Outcome::Error(Kind::Annotation), "c", NOW - 2 * RECENT_SECS),
            (Outcome::Miss, "a", NOW - 100),
            (Outcome::Error(Kind::Upstream), "a", NOW - 90),
            (Outcome::Error(Kind::Upstream), "b", NOW - 80),
        ] {
            let r = record(outcome, account);
            wicp_net::observe::metrics::update(&metrics_dir, &r, &[], at).unwrap();
            audit::append(&log, 1 << 20, &r, at).unwrap();
        }
        let m = metrics_check(&host, &dirs[0], NOW);
        assert_eq!(m.verdict, Verdict::Warn, "{m:?}");
        assert!(m.message.contains("3 of 4 pulls failed"), "{m:?}");
        assert!(m.message.contains("1 annotation, 2 upstream"), "{m:?}");
        assert_eq!(
            m.fix.as_deref(),
            Some(format!("for the upstream failures: {}", Kind::Upstream.usual_fix()).as_str())
        );
        let a = audit_checks(&host, &logs[0], NOW);
        assert_eq!(a.len(), 1, "the annotation failure is old: {a:?}");
        assert!(
            a[0].message.starts_with(
                "2 upstream failures in the last 24h (2 service accounts: team/a, team/b)"
            ),
            "{a:?}"
        );
        assert!(a[0].message.contains("Vault refused the login"), "{a:?}");
        assert_eq!(
            a[0].fix.as_deref(),
            Some("bind the role to the service account")
        );

        // A day later, nothing is news.
        let later = NOW + 2 * RECENT_SECS;
        assert_eq!(metrics_check(&host, &dirs[0], later).verdict, Verdict::Ok);
        assert_eq!(audit_checks(&host, &logs[0], later)[0].verdict, Verdict::Ok);
    }

    /// Round-4 item 6: doctor reads only an audit log (and metrics state)
    /// the plugin itself would have written, and escapes every control
    /// character it quotes, in text and JSON.
    #[test]
    fn doctor_reads_only_our_files_and_escapes_what_it_quotes() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let host = Host::open(root.path()).unwrap();
        let dir = root.path().join("var/log/wicp");
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("audit.log");
        let at = wicp_base::duration::format_unix(NOW - 10);
        let line = format!(
            "{{\"time\":\"{at}\",\"outcome\":\"error\",\"error_kind\":\"upstream\",\"service_account\":\"team/a\",\"error\":\"boom\\u001b[2J\\u0007 gone\",\"fix\":\"run \\u001b]0;x\\u0007this\"}}\n"
        );
        std::fs::write(&log, &line).unwrap();
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o600)).unwrap();
        let shown = Path::new("/var/log/wicp/audit.log");
        let checks = audit_checks(&host, shown, NOW);
        assert_eq!(checks.len(), 1, "{checks:?}");
        let text = format!(
            "{} {}",
            checks[0].message,
            checks[0].fix.clone().unwrap_or_default()
        );
        assert!(!text.contains(['\u{1b}', '\u{7}']), "{text:?}");
        assert!(text.contains("boom\\u{1b}[2J\\u{7} gone"), "{text:?}");
        let json = serde_json::to_string(&checks[0]).unwrap();
        assert!(!json.contains("\\u001b"), "{json}");

        // Another user's file, a group-writable one, or one with a second
        // name: not read at all.
        for spoil in [0, 1, 2] {
            std::fs::write(&log, &line).unwrap();
            std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o600)).unwrap();
            let extra = dir.join("second-name");
            let _ = std::fs::remove_file(&extra);
            match spoil {
                0 => std::os::unix::fs::chown(&log, Some(4242), None).unwrap(),
                1 => {
                    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o620)).unwrap()
                }
                _ => std::fs::hard_link(&log, &extra).unwrap(),
            }
            let checks = audit_checks(&host, shown, NOW);
            assert_eq!(checks.len(), 1, "{checks:?}");
            assert!(
                checks[0].message.contains("not a file the plugin writes"),
                "{checks:?}"
            );
            assert!(!checks[0].message.contains("boom"), "{checks:?}");
        }
    }
}
