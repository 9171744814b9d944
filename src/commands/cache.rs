//! `cache list` and `cache purge`: what an admin needs after revoking a
//! role, without reading entry files (they hold passwords).
//!
//! Both print to stdout (these are commands for a person, not the kubelet
//! protocol) and never print a username's password or any other secret.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use wicp_base::duration::{self, format_unix};
use wicp_base::error::{Error, Result};
use wicp_base::lock::{Acquired, KeyLock};
use wicp_base::log::{self, Level};
use wicp_providers::cache::store::{Entry, Lookup, OpenError, Store};

/// How long `purge` waits for exchanges in flight: longer than any plugin
/// invocation lives (the kubelet kills plugins after 60 s).
const PURGE_WAIT: Duration = Duration::from_secs(65);

#[derive(clap::Subcommand, Debug, Clone)]
pub(crate) enum Command {
    /// List the cached credentials: key, provider, service account,
    /// registry, creation, expiry and state. Never the secrets.
    List,
    /// Remove cached credentials, for example right after revoking the role
    /// a service account used. Waits for exchanges in flight to finish
    /// first, so none of them writes an entry back afterwards.
    Purge(PurgeArgs),
}

#[derive(clap::Args, Debug, Clone)]
#[command(group(
    clap::ArgGroup::new("selection")
        .required(true)
        .multiple(true)
        .args(["namespace", "service_account", "spiffe_id", "all"])
))]
pub(crate) struct PurgeArgs {
    /// Only entries of service accounts in this namespace.
    #[arg(long, value_name = "NS")]
    pub(crate) namespace: Option<String>,
    /// Only entries of service accounts with this name (in every namespace
    /// unless --namespace is given too).
    #[arg(long = "service-account", value_name = "NAME")]
    pub(crate) service_account: Option<String>,
    /// Only entries exchanged for this SPIFFE ID (`--identity spiffe`):
    /// those are shared by the service accounts the ID selects, so they
    /// name no service account.
    #[arg(
        long = "spiffe-id",
        value_name = "ID",
        conflicts_with_all = ["namespace", "service_account"]
    )]
    pub(crate) spiffe_id: Option<String>,
    /// Every entry, including unreadable ones, with their lock and
    /// temporary files.
    #[arg(long, conflicts_with_all = ["namespace", "service_account", "spiffe_id"])]
    pub(crate) all: bool,
}

/// Runs a `cache` subcommand; exit status 0, 1 on failure, 2 on usage.
pub(crate) fn run(
    options: &wicp_providers::cache::Options,
    max_age: Duration,
    command: &Command,
) -> ExitCode {
    let Some(dir) = &options.cache_dir else {
        log::error(
            &Error::flag(
                &wicp_providers::cache::CACHE_DIR,
                "is not set: the cache commands need the cache directory",
            )
            .fix(
                "pass --cache-dir DIR or set WICP_CACHE_DIR, as the kubelet's provider entry does",
            ),
        );
        return ExitCode::from(2);
    };
    let store = match Store::open(dir, false) {
        Ok(Some(store)) => store,
        Ok(None) => {
            return emit(&format!("no cache at {}: nothing cached\n", dir.display()));
        }
        Err(OpenError::Unsafe(error)) => return fail(&error),
        Err(OpenError::Unavailable(why)) => return fail(&Error::cache(why)),
    };
    let text = match command {
        Command::List => list(&store, duration::unix_now(), max_age),
        Command::Purge(args) => purge(&store, args, PURGE_WAIT).map(|purged| {
            for warning in &purged.warnings {
                log::write(Level::Warn, format_args!("{warning}"));
            }
            purged.report
        }),
    };
    match text {
        Ok(text) => emit(&text),
        Err(error) => fail(&error),
    }
}

fn emit(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&Error::cache(format!("cannot write to stdout: {e}"))),
    }
}

fn fail(error: &Error) -> ExitCode {
    log::error(error);
    ExitCode::FAILURE
}

fn scan_error(store: &Store, e: std::io::Error) -> Error {
    Error::cache(format!(
        "cannot list the cache directory {}: {e}",
        store.dir().display()
    ))
}

/// The table `cache list` prints.
pub(crate) fn list(store: &Store, now: i64, max_age: Duration) -> Result<String> {
    let scan = store.scan().map_err(|e| scan_error(store, e))?;
    let mut rows = vec![
        [
            "KEY", "PROVIDER", "IDENTITY", "UID", "REGISTRY", "CREATED", "EXPIRES", "STATE",
        ]
        .map(String::from),
    ];
    for (key, _) in &scan.entries {
        rows.push(match store.read(key) {
            Lookup::Found(entry) => row(&entry, now, max_age),
            Lookup::Unusable(why) => [
                key.to_string(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                format!("unusable: {why}"),
            ],
            // Removed between the scan and the read.
            Lookup::Missing => continue,
        });
    }
    let mut widths = [0usize; 8];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out.push_str(&format!(
        "{} entries in {}\n",
        rows.len().saturating_sub(1),
        store.dir().display()
    ));
    Ok(out)
}

fn row(entry: &Entry, now: i64, max_age: Duration) -> [String; 8] {
    // The service account, else the SPIFFE ID its credential is shared
    // by, else nobody's (a node credential).
    let (sa, uid) = match (&entry.service_account, &entry.spiffe_id) {
        (Some(sa), _) => (sa.to_string(), sa.uid.clone()),
        (None, Some(id)) => (id.clone(), "-".into()),
        (None, None) => ("-".into(), "-".into()),
    };
    let state = if entry.expires_at <= now {
        "expired".to_string()
    } else if wicp_providers::cache::is_fresh(entry.created_at, entry.expires_at, now, max_age) {
        format!(
            "served until {}",
            format_unix(wicp_providers::cache::refresh_at(
                entry.created_at,
                entry.expires_at,
                max_age
            ))
        )
    } else {
        "due for refresh".to_string()
    };
    [
        entry.key.to_string(),
        entry.provider.clone(),
        sa,
        uid,
        entry.registry.clone(),
        format_unix(entry.created_at),
        format_unix(entry.expires_at),
        state,
    ]
}

/// What `purge` did: the report for stdout, and warnings for stderr.
#[derive(Debug, Default)]
pub(crate) struct Purged {
    pub(crate) report: String,
    pub(crate) warnings: Vec<String>,
}

/// Removes the selected entries, after waiting (at most `wait`) for every
/// exchange in flight, and says what it removed.
pub(crate) fn purge(store: &Store, args: &PurgeArgs, wait: Duration) -> Result<Purged> {
    let until = Instant::now() + wait;
    let scan = store.scan().map_err(|e| scan_error(store, e))?;
    let mut out = String::new();
    let mut warnings = Vec::new();
    // Hold every lock that exists now: an exchange in flight finishes and
    // writes its entry before we look, so we remove it too.
    let mut held: Vec<KeyLock> = Vec::new();
    for (key, _) in &scan.locks {
        match store.lock(key, until) {
            Ok(Acquired::Held(lock)) => held.push(lock),
            Ok(Acquired::Busy) => warnings.push(format!(
                "an exchange for cache key {key} was still running after {}; purging without waiting for it",
                duration::format_go(wait)
            )),
            Err(e) => warnings.push(format!("cannot lock cache key {key}: {e}")),
        }
    }
    // Entries written by those exchanges appeared after the first scan.
    let scan = store.scan().map_err(|e| scan_error(store, e))?;
    let mut removed = 0usize;
    for (key, _) in &scan.entries {
        let description = match store.read(key) {
            Lookup::Found(entry) if selected(&entry, args) => describe(&entry),
            Lookup::Unusable(why) if args.all => format!("{key} (unusable: {why})"),
            _ => continue,
        };
        // Keys first seen in the second scan are locked now, waiting at most
        // what is left.
        let extra = if held.iter().any(|l| l.path() == store.lock_path(key)) {
            None
        } else {
            match store.lock(key, until) {
                Ok(Acquired::Held(lock)) => Some(lock),
                _ => None,
            }
        };
        match store.remove(key) {
            Ok(true) => {
                removed += 1;
                out.push_str(&format!("removed {description}\n"));
            }
            Ok(false) => {}
            Err(e) => {
                return Err(Error::cache(format!(
                    "cannot remove {}: {e}",
                    store.entry_path(key).display()
                ))
                .context(format!("removed {removed} entries so far")));
            }
        }
        if let Some(lock) = extra
            && args.all
        {
            let _ = lock.remove_file();
        }
    }
    if args.all {
        for lock in &held {
            let _ = lock.remove_file();
        }
        for (path, _) in &scan.temps {
            let _ = std::fs::remove_file(path);
        }
    }
    drop(held);
    out.push_str(&format!(
        "purged {removed} cached credential{} from {}\n",
        if removed == 1 { "" } else { "s" },
        store.dir().display()
    ));
    Ok(Purged {
        report: out,
        warnings,
    })
}

fn selected(entry: &Entry, args: &PurgeArgs) -> bool {
    if args.all {
        return true;
    }
    if let Some(id) = &args.spiffe_id {
        return entry.spiffe_id.as_ref() == Some(id);
    }
    let Some(sa) = &entry.service_account else {
        return false;
    };
    args.namespace.as_ref().is_none_or(|ns| *ns == sa.namespace)
        && args
            .service_account
            .as_ref()
            .is_none_or(|name| *name == sa.name)
}

fn describe(entry: &Entry) -> String {
    let sa = match (&entry.service_account, &entry.spiffe_id) {
        (Some(sa), _) => format!("service account {sa}"),
        (None, Some(id)) => format!("SPIFFE ID {id}"),
        (None, None) => "no service account".to_string(),
    };
    format!(
        "{} ({}, {sa}, registry {})",
        entry.key, entry.provider, entry.registry
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use wicp_kubelet::request::token::ServiceAccount;
    use wicp_providers::cache::key::Key;
    use wicp_providers::cache::store::test_support::{entry, key, store};

    const HOUR: Duration = Duration::from_secs(3600);

    fn private(path: &std::path::Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    fn keys_in(text: &str) -> Vec<Key> {
        text.split(|c: char| c.is_whitespace() || c == '(')
            .filter_map(Key::parse)
            .collect()
    }

    fn put(store: &Store, c: char, ns: &str, name: &str) -> Key {
        let k = key(c);
        let mut e = entry(&k);
        e.service_account = Some(ServiceAccount {
            namespace: ns.into(),
            name: name.into(),
            uid: format!("{ns}-{name}-uid"),
        });
        e.created_at = 100_000;
        e.expires_at = 103_600;
        store.write(&e).unwrap();
        k
    }

    fn args(ns: Option<&str>, sa: Option<&str>, all: bool) -> PurgeArgs {
        PurgeArgs {
            namespace: ns.map(String::from),
            service_account: sa.map(String::from),
            spiffe_id: None,
            all,
        }
    }

    #[test]
    fn list_shows_who_and_where_but_never_the_secret() {
        let (_parent, store) = store();
        let a = put(&store, 'a', "team-a", "puller");
        let b = put(&store, 'b', "team-b", "builder");
        let broken = key('c');
        std::fs::write(
            store.entry_path(&broken),
            b"{\"format\":1,\"password\":\"s3cr3t",
        )
        .unwrap();
        private(&store.entry_path(&broken));
        let text = list(&store, 100_060, HOUR).unwrap();
        assert!(!text.contains("s3cr3t"), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert!(lines[0].starts_with("KEY"), "{text}");
        assert!(lines[1].starts_with(a.as_str()), "{text}");
        assert!(lines[1].contains("team-a/puller"), "{text}");
        assert!(lines[1].contains("team-a-puller-uid"), "{text}");
        assert!(lines[1].contains("123456789012.dkr.ecr.eu-west-1.amazonaws.com"));
        assert!(lines[1].contains("1970-01-02T03:46:40Z"), "{text}");
        // 100000 + 2880: the refresh margin of a one-hour credential.
        assert!(
            lines[1].contains("served until 1970-01-02T04:34:40Z"),
            "{text}"
        );
        assert!(lines[2].starts_with(b.as_str()), "{text}");
        assert!(lines[3].starts_with(broken.as_str()), "{text}");
        assert!(
            lines[3].contains("unusable: it is not a JSON entry (truncated)"),
            "{text}"
        );
        assert!(lines[4].starts_with("3 entries in "), "{text}");

        let later = list(&store, 103_000, HOUR).unwrap();
        assert!(
            later.lines().nth(1).unwrap().ends_with("due for refresh"),
            "{later}"
        );
        let expired = list(&store, 200_000, HOUR).unwrap();
        assert!(
            expired.lines().nth(1).unwrap().ends_with("expired"),
            "{expired}"
        );
    }

    /// An entry exchanged for a SPIFFE ID names no service account: it is
    /// listed and purged by its ID, and a purge by service account leaves
    /// it alone.
    #[test]
    fn spiffe_entries_are_listed_and_purged_by_their_id() {
        let (_parent, store) = store();
        let by_sa = put(&store, 'a', "team", "puller");
        let shared = key('b');
        let mut e = entry(&shared);
        e.service_account = None;
        e.spiffe_id = Some("spiffe://cluster.test/ns/team".into());
        e.created_at = 100_000;
        e.expires_at = 103_600;
        store.write(&e).unwrap();

        let text = list(&store, 100_060, HOUR).unwrap();
        let row = text
            .lines()
            .find(|l| l.starts_with(shared.as_str()))
            .unwrap();
        assert!(row.contains("spiffe://cluster.test/ns/team"), "{text}");

        let by_name = purge(&store, &args(Some("team"), Some("puller"), false), HOUR).unwrap();
        assert_eq!(keys_in(&by_name.report), vec![by_sa]);
        let mut by_id = args(None, None, false);
        by_id.spiffe_id = Some("spiffe://cluster.test/ns/other".into());
        assert!(keys_in(&purge(&store, &by_id, HOUR).unwrap().report).is_empty());
        by_id.spiffe_id = Some("spiffe://cluster.test/ns/team".into());
        let purged = purge(&store, &by_id, HOUR).unwrap();
        assert_eq!(keys_in(&purged.report), vec![shared.clone()]);
        assert!(
            purged
                .report
                .contains("SPIFFE ID spiffe://cluster.test/ns/team"),
            "{}",
            purged.report
        );
        assert!(matches!(store.read(&shared), Lookup::Missing));
    }

    #[test]
    fn purge_by_namespace_by_name_and_both() {
        let (_parent, store) = store();
        let a = put(&store, 'a', "team-a", "puller");
        let b = put(&store, 'b', "team-a", "builder");
        let c = put(&store, 'c', "team-b", "puller");
        let d = put(&store, 'd', "team-b", "builder");

        let text = purge(&store, &args(Some("team-a"), Some("puller"), false), HOUR)
            .unwrap()
            .report;
        assert_eq!(keys_in(&text), vec![a.clone()], "{text}");
        assert!(text.contains("service account team-a/puller"), "{text}");
        assert!(text.ends_with(&format!(
            "purged 1 cached credential from {}\n",
            store.dir().display()
        )));

        let text = purge(&store, &args(None, Some("builder"), false), HOUR)
            .unwrap()
            .report;
        assert_eq!(keys_in(&text), vec![b.clone(), d.clone()], "{text}");

        let text = purge(&store, &args(Some("team-a"), None, false), HOUR)
            .unwrap()
            .report;
        assert!(keys_in(&text).is_empty(), "{text}");
        assert!(text.contains("purged 0 cached credentials"), "{text}");

        for k in [&a, &b, &d] {
            assert!(matches!(store.read(k), Lookup::Missing));
        }
        assert!(matches!(store.read(&c), Lookup::Found(_)));
    }

    #[test]
    fn purge_all_removes_everything_of_ours_and_nothing_else() {
        let (_parent, store) = store();
        let a = put(&store, 'a', "team-a", "puller");
        drop(store.try_lock(&a).unwrap());
        let broken = key('b');
        std::fs::write(store.entry_path(&broken), b"garbage").unwrap();
        let temp = store.dir().join(format!(".{}.1.2.tmp", key('c')));
        std::fs::write(&temp, b"{").unwrap();
        let foreign = store.dir().join("README");
        std::fs::write(&foreign, b"not ours").unwrap();

        let text = purge(&store, &args(None, None, true), HOUR).unwrap().report;
        assert!(text.contains("purged 2 cached credentials"), "{text}");
        let scan = store.scan().unwrap();
        assert!(scan.entries.is_empty() && scan.locks.is_empty() && scan.temps.is_empty());
        assert!(foreign.exists());
    }

    #[test]
    fn purge_waits_for_an_exchange_in_flight_and_removes_its_entry() {
        let (_parent, store) = store();
        let k = key('a');
        let Acquired::Held(lock) = store.try_lock(&k).unwrap() else {
            panic!("free");
        };
        let dir = store.dir().to_path_buf();
        let writer = std::thread::spawn(move || {
            // The exchange finishes after purge started, then writes.
            std::thread::sleep(Duration::from_millis(300));
            let store = Store::open(&dir, false).unwrap().unwrap();
            let mut e = entry(&k);
            e.created_at = 100_000;
            e.expires_at = 103_600;
            store.write(&e).unwrap();
            drop(lock);
        });
        let started = Instant::now();
        let purged = purge(&store, &args(Some("team-a"), None, false), HOUR).unwrap();
        assert!(purged.warnings.is_empty(), "{purged:?}");
        let text = purged.report;
        writer.join().unwrap();
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(text.contains("purged 1 cached credential "), "{text}");
        assert!(matches!(store.read(&key('a')), Lookup::Missing));
    }

    #[test]
    fn purge_gives_up_waiting_with_a_warning() {
        let (_parent, store) = store();
        let a = put(&store, 'a', "team-a", "puller");
        let Acquired::Held(_stuck) = store.try_lock(&a).unwrap() else {
            panic!("free");
        };
        let purged = purge(
            &store,
            &args(Some("team-a"), None, false),
            Duration::from_millis(100),
        )
        .unwrap();
        assert_eq!(
            purged.warnings,
            vec![format!(
                "an exchange for cache key {a} was still running after 0s; purging without waiting for it"
            )]
        );
        // The entry is removed anyway: revocation wins over a stuck process.
        assert!(
            purged.report.contains("purged 1 cached credential "),
            "{purged:?}"
        );
    }
}
