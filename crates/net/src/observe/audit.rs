//! The audit trail: one JSON line per invocation saying which service
//! account (and pod) pulled from which registry with which identity, and
//! how it ended.
//!
//! The file is ours alone (0600, never through a link, only a regular file
//! we own). Lines are appended under a lock (`FILE.lock`) with one write
//! each; when the next line would take the file past its cap, the file is
//! renamed to `FILE.1` (replacing the previous one) and a new one started,
//! so at most twice the cap is kept. Lines are masked like every log line
//! ([`wicp_base::log::json_line`]): no token, password or secret reaches it.
//! No fsync: a line is evidence, not a credential, and a pull must not wait
//! for the disk.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::{Record, files};

/// The largest tail `node doctor` reads back.
pub const MAX_READ_BYTES: u64 = 1024 * 1024;

/// The record of one invocation, as one JSON object.
pub fn line(record: &Record, now: i64) -> Value {
    let mut fields = Map::new();
    fields.insert("time".into(), json!(wicp_base::duration::format_unix(now)));
    fields.insert("provider".into(), json!(record.provider_label()));
    let mut put = |name: &str, value: Option<Value>| {
        if let Some(value) = value {
            fields.insert(name.to_string(), value);
        }
    };
    put("registry", record.registry.clone().map(Value::from));
    put("image", record.image.clone().map(Value::from));
    put(
        "service_account",
        record
            .service_account
            .as_ref()
            .map(|sa| json!(sa.to_string())),
    );
    put(
        "service_account_uid",
        record.service_account.as_ref().map(|sa| json!(sa.uid)),
    );
    put("pod", record.pod.clone().map(Value::from));
    put("identity", record.identity.map(|i| json!(i.name())));
    if !record.principal.is_empty() {
        let principal: Map<String, Value> = record
            .principal
            .iter()
            .map(|(name, value)| (name.to_string(), json!(value)))
            .collect();
        put("principal", Some(Value::Object(principal)));
    }
    let outcome = record.outcome.map_or("error", super::Outcome::name);
    put("outcome", Some(json!(outcome)));
    if let Some(super::Outcome::Error(kind)) = record.outcome {
        put("error_kind", Some(json!(kind.name())));
    }
    put("cache", record.cache.map(Value::from));
    put(
        "duration_seconds",
        Some(json!(
            (record.started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0
        )),
    );
    if let Some((what, fix)) = &record.error {
        put("error", Some(json!(what)));
        put("fix", fix.clone().map(Value::from));
    }
    if !record.error_facts.is_empty() {
        let facts: Map<String, Value> = record
            .error_facts
            .iter()
            .map(|(name, value)| (name.to_string(), json!(value)))
            .collect();
        put("error_facts", Some(Value::Object(facts)));
    }
    Value::Object(fields)
}

/// Appends the record of `record` to `path`, rotating at `max_bytes`. The
/// error is a clause for one warning.
pub fn append(path: &Path, max_bytes: u64, record: &Record, now: i64) -> Result<(), String> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    files::check_dir(dir).map_err(|why| format!("{}: {why}", dir.display()))?;
    let owner = wicp_base::platform::running_owner()
        .map_err(|e| format!("cannot tell which user runs the plugin: {e}"))?;
    let mut text = wicp_base::log::json_line(line(record, now));
    text.push('\n');
    let _lock = files::lock(&with_suffix(path, ".lock"), &owner)?;
    let open = || {
        files::open_own(path, &wicp_base::platform::Open::append(), &owner)
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "the file vanished".to_string())
    };
    let mut file = open()?;
    let size = file.metadata().map_err(|e| e.to_string())?.len();
    let len = u64::try_from(text.len()).unwrap_or(u64::MAX);
    if size > 0 && size.saturating_add(len) > max_bytes {
        wicp_base::platform::rename(path, &with_suffix(path, ".1"))
            .map_err(|e| format!("cannot rotate it: {e}"))?;
        file = open()?;
    }
    file.write_all(text.as_bytes())
        .map_err(|e| format!("cannot write it: {e}"))
}

/// `path` with `suffix` added to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// The records in the text of an audit log (a tail of it: a first line
/// cut in the middle is skipped with every other line that is not one).
pub fn parse(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::{Identity, Outcome};
    use std::os::unix::fs::PermissionsExt;
    use std::time::Instant;

    fn record() -> Record {
        let mut r = Record::new(Instant::now());
        r.provider = Some("aws");
        r.registry = Some("1.dkr.ecr.us-east-1.amazonaws.com".into());
        r.service_account = Some(wicp_kubelet::request::token::ServiceAccount {
            namespace: "team".into(),
            name: "api".into(),
            uid: "u-1".into(),
        });
        r.identity = Some(Identity::ServiceAccount);
        r.principal = vec![("role arn", "arn:aws:iam::1:role/pull".into())];
        r.outcome = Some(Outcome::Miss);
        r
    }

    #[test]
    fn appends_0600_lines_and_rotates_at_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        append(&path, 4096, &record(), 1_700_000_000).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let lines = parse(&std::fs::read_to_string(&path).unwrap());
        assert_eq!(lines.len(), 1);
        let l = &lines[0];
        assert_eq!(l["service_account"], "team/api");
        assert_eq!(l["principal"]["role arn"], "arn:aws:iam::1:role/pull");
        assert_eq!(l["outcome"], "miss");
        assert_eq!(l["time"], "2023-11-14T22:13:20Z");
        let one = std::fs::metadata(&path).unwrap().len();
        let per_file = 4096 / one;
        for _ in 0..per_file {
            append(&path, 4096, &record(), 1_700_000_000).unwrap();
        }
        let rotated = with_suffix(&path, ".1");
        assert_eq!(
            std::fs::read_to_string(&rotated).unwrap().lines().count(),
            usize::try_from(per_file).unwrap()
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
        assert!(std::fs::metadata(&path).unwrap().len() <= 4096);
    }

    #[test]
    fn failures_carry_kind_message_and_fix() {
        let mut r = record();
        r.failed(
            &wicp_base::error::Error::upstream("STS refused")
                .fix("trust the issuer")
                .answered("AWS STS", 403, b"<Error/>"),
        );
        let l = line(&r, 0);
        assert_eq!(l["outcome"], "error");
        assert_eq!(l["error_kind"], "upstream");
        assert_eq!(l["error"], "STS refused");
        assert_eq!(l["fix"], "trust the issuer");
        assert_eq!(l["error_facts"]["service"], "AWS STS");
        assert_eq!(l["error_facts"]["status"], "403");
        assert_eq!(l["error_facts"]["body_shape"], "8 bytes, HTML or XML");
        assert!(line(&record(), 0).get("error_facts").is_none());
    }

    #[test]
    fn never_through_a_link_or_into_someone_elses_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"").unwrap();
        let path = dir.path().join("audit.log");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let err = append(&path, 4096, &record(), 0).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read(&target).unwrap(), b"");
    }
}
