//! The on-disk credential cache: one exchange per service account and
//! registry across pods, plugin processes and kubelet restarts.
//!
//! The kubelet's own cache lives in memory, is lost when the kubelet
//! restarts, misses for every new pod with `cacheType: Token`, and does not
//! merge pulls that start at the same time. With `--cache-dir` every plugin
//! process on the node shares the credentials it exchanged:
//!
//! - [`key`]: which credential an entry holds (every input that shapes it);
//! - [`store`]: the directory and its files (permissions, atomic writes);
//! - [`wicp_base::lock`]: one exchange per key at a time, across processes;
//! - [`housekeeping`]: bounded cleanup on each miss;
//! - `commands::cache` (in the binary): `cache list` and `cache purge`.
//!
//! A hit reads one small file and answers: no network, no TLS client, no
//! async runtime. Passthrough tokens are never cached (the plan says so).
//! A cache that cannot be read or written (read-only or full disk) never
//! fails a pull: the credential is exchanged and returned with a warning.
//! A cache directory others could tamper with is refused with an error,
//! because it would be an admin's mistake that must not go unnoticed.

pub mod housekeeping;
pub mod key;
pub mod store;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::Credential;
use wicp_base::deadline::Deadline;
use wicp_base::duration;
use wicp_base::error::{Error, Result};
use wicp_kubelet::request::token::ServiceAccount;

pub use key::{Key, KeyInputs};
use store::{Entry, Lookup, OpenError, Store};
use wicp_base::flags::{FlagSpec, Flags, Given, Takes, Usage};
use wicp_base::lock::{self, Acquired};

/// An entry is refreshed when this share of its lifetime remains ...
const REFRESH_MARGIN_PERCENT: i64 = 20;
/// ... or this many seconds, whichever is larger.
const MIN_REFRESH_MARGIN_SECS: i64 = 300;
/// Entries read for the earliest expiry after a miss: bounds what a
/// crowded cache costs the metrics (about 10 µs an entry).
const STATS_READ: usize = 256;
/// An entry claiming to be created further in the future than this was
/// written under another clock and is not trusted.
const CLOCK_SKEW_SECS: i64 = 60;

/// `--cache-dir`: the parser reads it, --help writes it and errors name it by it.
pub static CACHE_DIR: FlagSpec = FlagSpec {
    long: "cache-dir",
    env: "WICP_CACHE_DIR",
    takes: Takes::One,
    value: "DIR",
    default: "",
    help: "Keep exchanged credentials in DIR, shared by every plugin process on \
        the node. Off when unset.\n\n One exchange then serves all pods of a \
        service account until the credential is due for refresh. DIR is \
        created private (mode 0700; on Windows a DACL for SYSTEM, \
        Administrators and the plugin's user only) and must be owned by the \
        user running the plugin (on Windows also SYSTEM or Administrators) \
        and writable by nobody else; entries are private files (0600). \
        Passthrough tokens are never cached.",
};

/// `--cache-max-entries`.
pub(crate) static CACHE_MAX_ENTRIES: FlagSpec = FlagSpec {
    long: "cache-max-entries",
    env: "WICP_CACHE_MAX_ENTRIES",
    takes: Takes::One,
    value: "N",
    default: "",
    help: "Most entries kept in --cache-dir; beyond that the oldest are \
        removed. Default: 1000.",
};

#[derive(Clone, Debug)]
// Every flattened `Options` struct needs its own group id.
pub struct Options {
    /// [`CACHE_DIR`].
    pub cache_dir: Option<PathBuf>,

    /// [`CACHE_MAX_ENTRIES`].
    pub cache_max_entries: Option<u32>,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] = &[&CACHE_DIR, &CACHE_MAX_ENTRIES];
    const HEADING: &'static str = "Credential cache";

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            cache_dir: given.path(&CACHE_DIR),
            cache_max_entries: given.parsed(&CACHE_MAX_ENTRIES, |v| match v.parse::<u32>() {
                Ok(0) => Err("at least 1".to_string()),
                Ok(n) => Ok(n),
                Err(e) => Err(e.to_string()),
            })?,
        })
    }
}

/// What the cache needs to know about the credential it stores, besides
/// the key: shown by `cache list` and matched by `cache purge`.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    pub provider: &'a str,
    pub service_account: Option<&'a ServiceAccount>,
    /// The SPIFFE ID presented, under `--identity spiffe`.
    pub spiffe_id: Option<&'a str>,
    pub registry: &'a str,
}

/// Where a credential came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Cache,
    Exchange,
}

/// What became of a freshly exchanged credential in the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Written: the next pull is a hit.
    Written,
    /// The entry could not be written (a warning said why).
    WriteFailed,
    /// Not written: the credential expires within its refresh margin (or
    /// --max-cache-duration is 0s), so it could never be served.
    TooShortLived,
    /// Not written: the entry would be larger than a read accepts.
    TooLarge,
    /// Served from the cache, or no cache.
    NotApplicable,
}

/// A credential to answer with, and when it was minted.
#[derive(Debug)]
pub struct Served {
    pub credential: Credential,
    /// Unix seconds.
    pub created_at: i64,
    pub origin: Origin,
    pub stored: Stored,
}

/// An open cache.
#[derive(Debug)]
pub struct Cache {
    store: Store,
    max_entries: usize,
    max_age: Duration,
}

impl Cache {
    /// Opens the cache `options` configure, or `None` when it is off or the
    /// file system does not allow it (with a warning). `max_age` is
    /// `--max-cache-duration`: no entry is served longer than that after it
    /// was created.
    pub fn open(options: &Options, max_age: Duration) -> Result<Option<Cache>> {
        let Some(dir) = &options.cache_dir else {
            return Ok(None);
        };
        match Store::open(dir, true) {
            Ok(Some(store)) => Ok(Some(Cache {
                store,
                max_entries: usize::try_from(options.cache_max_entries.unwrap_or(1000))
                    .unwrap_or(usize::MAX),
                max_age,
            })),
            Ok(None) => Ok(None),
            Err(OpenError::Unsafe(error)) => Err(error),
            Err(OpenError::Unavailable(why)) => {
                wicp_base::log::warning!("{why}; pulling without the credential cache");
                Ok(None)
            }
        }
    }

    /// How many entries the cache holds, their size, and the earliest
    /// expiry among the [`STATS_READ`] oldest (those written first expire
    /// first, all else equal), for the metrics after a miss. `None` when
    /// the directory cannot be listed.
    pub fn stats(&self) -> Option<wicp_net::observe::CacheStats> {
        let mut scan = self.store.scan().ok()?;
        let mut stats = wicp_net::observe::CacheStats::default();
        for (key, _) in &scan.entries {
            if let Ok(meta) = std::fs::symlink_metadata(self.store.entry_path(key)) {
                stats.entries += 1;
                stats.bytes += meta.len();
            }
        }
        scan.entries.sort_by_key(|(_, modified)| *modified);
        for (key, _) in scan.entries.iter().take(STATS_READ) {
            if let store::Lookup::Found(entry) = self.store.read(key) {
                stats.earliest_expiry = Some(
                    stats
                        .earliest_expiry
                        .map_or(entry.expires_at, |e| e.min(entry.expires_at)),
                );
            }
        }
        Some(stats)
    }

    /// Serves the credential for `key` from the cache, or runs `exchange`
    /// and caches its result.
    ///
    /// Concurrent misses for the same key, in any process, share one
    /// exchange: the first takes the key's lock and exchanges, the others
    /// wait. A waiter keeps waiting as long as the holder is alive (the
    /// kernel releases a dead holder's lock at once), looks at the entry
    /// every `ENTRY_POLL` while it waits, and never calls the upstream
    /// while a holder is at work: a slow upstream is not helped by more
    /// calls, and the holder's entry is what the waiter wants. If the holder
    /// is still at work when the waiter's deadline comes, the waiter fails
    /// with a message saying so. Only when the lock cannot be used at all
    /// (an I/O error) does a process exchange without it, after one more
    /// look at the entry.
    pub fn serve(
        &self,
        key: &Key,
        subject: Subject<'_>,
        deadline: &Deadline,
        exchange: impl FnOnce(&Deadline) -> Result<Credential>,
    ) -> Result<Served> {
        if let Some(entry) = self.fresh(key, subject, true) {
            return Ok(hit(entry));
        }
        let lock = match self.wait_for_lock(key, subject, deadline) {
            Waited::Served(entry) => return Ok(hit(entry)),
            Waited::Held(lock) => {
                // Whoever held the lock before us may have just written it.
                if let Some(entry) = self.fresh(key, subject, false) {
                    return Ok(hit(entry));
                }
                Some(lock)
            }
            Waited::Unlockable(e) => {
                wicp_base::log::warning!(
                    "cannot lock cache key {key} in {}: {e}; exchanging without it",
                    self.store.dir().display()
                );
                if let Some(entry) = self.fresh(key, subject, false) {
                    return Ok(hit(entry));
                }
                None
            }
            Waited::HolderStillBusy => {
                return Err(Error::cache(format!(
                    "another plugin process has been exchanging the credential for cache key {key} for the whole deadline of {}s and has not finished",
                    deadline.budget().as_secs()
                ))
                .fix("the upstream is slow or not answering: see the other process's error in the kubelet log; the next pull retries"));
            }
        };
        let credential = exchange(deadline)?;
        let created_at = duration::unix_now();
        let entry = Entry {
            key: key.clone(),
            provider: subject.provider.to_string(),
            service_account: subject.service_account.cloned(),
            spiffe_id: subject.spiffe_id.map(str::to_string),
            registry: subject.registry.to_string(),
            username: credential.username.clone(),
            password: credential.password.clone(),
            created_at,
            expires_at: credential.expires_at,
        };
        let stored = self.store_entry(&entry, created_at);
        drop(lock);
        self.housekeeping(created_at, key);
        Ok(Served {
            credential,
            created_at,
            origin: Origin::Exchange,
            stored,
        })
    }

    /// Writes `entry`, exchanged at `now`, unless it is too close to its
    /// expiry to be served again; what happened, for the log and metrics.
    fn store_entry(&self, entry: &Entry, now: i64) -> Stored {
        let key = &entry.key;
        if is_fresh(entry.created_at, entry.expires_at, now, self.max_age) {
            match self.store.write(entry) {
                Ok(()) => {
                    wicp_base::log::debug!("cached the credential under key {key}");
                    Stored::Written
                }
                Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
                    wicp_base::log::warning!(
                        "not caching the credential for {}: {e}; every pull exchanges again until the upstream issues a smaller one",
                        entry.registry
                    );
                    Stored::TooLarge
                }
                Err(e) => {
                    wicp_base::log::warning!(
                        "cannot write the cache entry {}: {e}; the credential is returned but not cached",
                        self.store.entry_path(key).display()
                    );
                    Stored::WriteFailed
                }
            }
        } else {
            wicp_base::log::debug!(
                "not caching the credential: it expires at {}, within its refresh margin",
                duration::format_unix(entry.expires_at)
            );
            Stored::TooShortLived
        }
    }

    /// One housekeeping pass after a miss at `now`, keeping `key`.
    fn housekeeping(&self, now: i64, key: &Key) {
        match housekeeping::run(&self.store, now, self.max_age, self.max_entries, key) {
            Ok(report) => {
                if let Some(first) = &report.first_failure {
                    wicp_base::log::warning!(
                        "cache housekeeping skipped {} entries it cannot remove (first: {first}); remove them by hand",
                        report.unremovable
                    );
                }
                if report.removed() > 0 {
                    wicp_base::log::debug!("cache housekeeping: {report}");
                }
            }
            Err(e) => wicp_base::log::debug!("cache housekeeping stopped: {e}"),
        }
    }

    /// Waits for the key's lock until the deadline, looking at the entry
    /// every [`ENTRY_POLL`] meanwhile.
    fn wait_for_lock(&self, key: &Key, subject: Subject<'_>, deadline: &Deadline) -> Waited {
        let mut waited = false;
        loop {
            let until = (Instant::now() + ENTRY_POLL).min(deadline.instant());
            match self.store.lock(key, until) {
                Ok(Acquired::Held(lock)) => return Waited::Held(lock),
                Err(e) => return Waited::Unlockable(e),
                Ok(Acquired::Busy) => {}
            }
            if !waited {
                wicp_base::log::debug!(
                    "another plugin process is exchanging the credential for cache key {key}; waiting for it"
                );
                waited = true;
            }
            if let Some(entry) = self.fresh(key, subject, false) {
                return Waited::Served(entry);
            }
            if deadline.expired() {
                return Waited::HolderStillBusy;
            }
        }
    }

    /// The entry for `key` if it may be served now.
    fn fresh(&self, key: &Key, subject: Subject<'_>, warn: bool) -> Option<Entry> {
        let now = duration::unix_now();
        let why = match self.store.read(key) {
            Lookup::Missing => return None,
            // The key covers all three, so this only catches a file that was
            // put under another key's name.
            Lookup::Found(entry)
                if entry.provider != subject.provider
                    || entry.registry != subject.registry
                    || entry.service_account.as_ref() != subject.service_account =>
            {
                "it was written for another service account, provider or registry".to_string()
            }
            Lookup::Found(entry) => {
                if is_fresh(entry.created_at, entry.expires_at, now, self.max_age) {
                    wicp_base::log::debug!("cache hit for key {key}");
                    return Some(entry);
                }
                wicp_base::log::debug!(
                    "cache entry {key} is due for refresh (created {}, expires {})",
                    duration::format_unix(entry.created_at),
                    duration::format_unix(entry.expires_at)
                );
                return None;
            }
            Lookup::Unusable(why) => why,
        };
        if warn {
            wicp_base::log::warning!(
                "ignoring cache entry {}: {why}; it will be replaced",
                self.store.entry_path(key).display()
            );
        }
        None
    }
}

/// How often a waiter looks at the entry while another process holds the
/// key's lock (it also looks as soon as it gets the lock).
const ENTRY_POLL: Duration = Duration::from_millis(250);

/// How waiting for a key's lock ended.
enum Waited {
    Held(lock::KeyLock),
    /// The holder wrote the entry (it may still hold the lock).
    Served(Entry),
    /// The lock cannot be used (read-only directory, foreign lock file).
    Unlockable(std::io::Error),
    /// The deadline came while another process still held the lock.
    HolderStillBusy,
}

fn hit(entry: Entry) -> Served {
    Served {
        credential: Credential {
            username: entry.username,
            password: entry.password,
            expires_at: entry.expires_at,
        },
        created_at: entry.created_at,
        origin: Origin::Cache,
        stored: Stored::NotApplicable,
    }
}

/// How long before expiry an entry stops being served: 20 % of its
/// lifetime or 5 minutes, whichever is larger.
fn refresh_margin(created_at: i64, expires_at: i64) -> i64 {
    let lifetime = expires_at.saturating_sub(created_at).max(0);
    (lifetime.saturating_mul(REFRESH_MARGIN_PERCENT) / 100).max(MIN_REFRESH_MARGIN_SECS)
}

/// When an entry stops being served: its refresh margin before expiry, or
/// `max_age` after creation, whichever comes first.
pub fn refresh_at(created_at: i64, expires_at: i64, max_age: Duration) -> i64 {
    let max_age = i64::try_from(max_age.as_secs()).unwrap_or(i64::MAX);
    expires_at
        .saturating_sub(refresh_margin(created_at, expires_at))
        .min(created_at.saturating_add(max_age))
}

/// Whether an entry may be served at `now`.
pub fn is_fresh(created_at: i64, expires_at: i64, now: i64, max_age: Duration) -> bool {
    created_at <= now.saturating_add(CLOCK_SKEW_SECS)
        && now < refresh_at(created_at, expires_at, max_age)
}

/// The `cacheDuration` for the kubelet: 80 % of the remaining lifetime,
/// at most `max`, and never beyond `max` after the credential was created.
/// The last bound makes `--max-cache-duration` the whole revocation window
/// of a node: the disk cache stops serving a credential `max` after it was
/// minted, and the kubelet is told to forget it by then too. For a fresh
/// exchange (`created_at == now`) this is the plain rule.
pub fn kubelet_cache_duration(
    now: i64,
    created_at: i64,
    expires_at: i64,
    max: Duration,
) -> Duration {
    let by_expiry = duration::cache_duration(now, expires_at, max);
    let max_secs = i64::try_from(max.as_secs()).unwrap_or(i64::MAX);
    let age_left = created_at.saturating_add(max_secs).saturating_sub(now);
    let age_left = Duration::from_secs(u64::try_from(age_left).unwrap_or(0));
    by_expiry.min(age_left)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use wicp_base::secret::Secret;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn refresh_margin_is_a_fifth_or_five_minutes() {
        assert_eq!(refresh_margin(0, 3600), 720);
        assert_eq!(refresh_margin(0, 12 * 3600), 8640);
        assert_eq!(refresh_margin(0, 900), 300);
        assert_eq!(refresh_margin(100, 50), 300);
    }

    #[test]
    fn freshness() {
        // A one-hour token is served for 48 minutes.
        assert!(is_fresh(0, 3600, 0, HOUR));
        assert!(is_fresh(0, 3600, 2879, HOUR));
        assert!(!is_fresh(0, 3600, 2880, HOUR));
        // A twelve-hour ECR token is served for --max-cache-duration only.
        assert!(is_fresh(0, 12 * 3600, 3599, HOUR));
        assert!(!is_fresh(0, 12 * 3600, 3600, HOUR));
        assert!(is_fresh(0, 12 * 3600, 7199, 2 * HOUR));
        // Too short to be worth caching.
        assert!(!is_fresh(0, 300, 0, HOUR));
        // --max-cache-duration 0s turns serving off.
        assert!(!is_fresh(0, 3600, 0, Duration::ZERO));
        // Created in the future: another clock wrote it.
        assert!(is_fresh(1_050, 4_600, 1_000, HOUR));
        assert!(!is_fresh(2_000, 5_600, 1_000, HOUR));
    }

    #[test]
    fn kubelet_duration_from_a_hit() {
        // A fresh exchange: the plain rule (80 % of 1h).
        assert_eq!(kubelet_cache_duration(0, 0, 3600, HOUR).as_secs(), 2880);
        // Served 40 minutes later: 80 % of the 20 minutes left.
        assert_eq!(kubelet_cache_duration(2400, 0, 3600, HOUR).as_secs(), 960);
        // A 12h credential served 50 minutes after creation: only the 10
        // minutes left of --max-cache-duration.
        assert_eq!(
            kubelet_cache_duration(3000, 0, 12 * 3600, HOUR).as_secs(),
            600
        );
        assert_eq!(
            kubelet_cache_duration(3600, 0, 12 * 3600, HOUR),
            Duration::ZERO
        );
    }

    /// A cache the test's threads share.
    fn shared_cache() -> (tempfile::TempDir, std::sync::Arc<Cache>) {
        let (dir, cache) = cache(HOUR);
        (dir, std::sync::Arc::new(cache))
    }

    fn cache(max_age: Duration) -> (tempfile::TempDir, Cache) {
        let parent = tempfile::tempdir().unwrap();
        let options = Options {
            cache_dir: Some(parent.path().join("cache")),
            cache_max_entries: Some(10),
        };
        let cache = Cache::open(&options, max_age).unwrap().unwrap();
        (parent, cache)
    }

    fn subject() -> Subject<'static> {
        Subject {
            provider: "aws",
            service_account: None,
            spiffe_id: None,
            registry: "reg.example",
        }
    }

    fn credential(password: &str, lifetime: i64) -> Credential {
        Credential {
            username: "AWS".into(),
            password: Secret::new(password),
            expires_at: duration::unix_now() + lifetime,
        }
    }

    #[test]
    fn a_miss_exchanges_once_then_hits() {
        let (_dir, cache) = cache(HOUR);
        let key = store::test_support::key('a');
        let deadline = Deadline::after(Duration::from_secs(10));
        let calls = Cell::new(0);
        let exchange = |_: &Deadline| {
            calls.set(calls.get() + 1);
            Ok(credential("first", 3600))
        };
        let first = cache.serve(&key, subject(), &deadline, exchange).unwrap();
        assert_eq!(first.origin, Origin::Exchange);
        let second = cache.serve(&key, subject(), &deadline, exchange).unwrap();
        assert_eq!(second.origin, Origin::Cache);
        assert_eq!(second.credential.password.expose(), "first");
        assert_eq!(second.created_at, first.created_at);
        assert_eq!(calls.get(), 1);
    }

    #[test]
    fn failed_exchanges_and_short_lived_credentials_are_not_cached() {
        let (_dir, cache) = cache(HOUR);
        let key = store::test_support::key('b');
        let deadline = Deadline::after(Duration::from_secs(10));
        let err = cache
            .serve(&key, subject(), &deadline, |_| {
                Err(wicp_base::error::Error::upstream("upstream said no"))
            })
            .unwrap_err();
        assert_eq!(err.what(), "upstream said no");
        assert!(matches!(cache.store.read(&key), Lookup::Missing));

        let served = cache
            .serve(&key, subject(), &deadline, |_| Ok(credential("short", 200)))
            .unwrap();
        assert_eq!(served.origin, Origin::Exchange);
        assert!(matches!(cache.store.read(&key), Lookup::Missing));
    }

    #[test]
    fn a_corrupt_entry_is_a_miss_and_is_rewritten() {
        let (_dir, cache) = cache(HOUR);
        let key = store::test_support::key('c');
        std::fs::write(cache.store.entry_path(&key), b"{\"format\":1,\"key\"").unwrap();
        let deadline = Deadline::after(Duration::from_secs(10));
        let served = cache
            .serve(&key, subject(), &deadline, |_| {
                Ok(credential("fresh", 3600))
            })
            .unwrap();
        assert_eq!(served.origin, Origin::Exchange);
        let Lookup::Found(entry) = cache.store.read(&key) else {
            panic!("the corrupt entry must have been rewritten");
        };
        assert_eq!(entry.password.expose(), "fresh");
    }

    #[test]
    fn an_entry_for_another_registry_or_service_account_is_not_served() {
        let (_dir, cache) = cache(HOUR);
        let key = store::test_support::key('d');
        let deadline = Deadline::after(Duration::from_secs(10));
        cache
            .serve(&key, subject(), &deadline, |_| Ok(credential("one", 3600)))
            .unwrap();
        let other = Subject {
            registry: "other.example",
            ..subject()
        };
        let served = cache
            .serve(&key, other, &deadline, |_| Ok(credential("two", 3600)))
            .unwrap();
        assert_eq!(served.origin, Origin::Exchange);

        let sa = ServiceAccount {
            namespace: "team".into(),
            name: "intruder".into(),
            uid: "u".into(),
        };
        let another_account = Subject {
            service_account: Some(&sa),
            ..other
        };
        let served = cache
            .serve(&key, another_account, &deadline, |_| {
                Ok(credential("three", 3600))
            })
            .unwrap();
        assert_eq!(served.origin, Origin::Exchange);
        assert_eq!(served.credential.password.expose(), "three");
    }

    #[test]
    fn a_waiter_never_exchanges_while_the_holder_is_alive() {
        let (_dir, cache) = cache(HOUR);
        let key = store::test_support::key('b');
        let Ok(Acquired::Held(holder)) = cache.store.try_lock(&key) else {
            panic!("the lock is free");
        };
        let deadline = Deadline::after(Duration::from_millis(600));
        let started = Instant::now();
        let err = cache
            .serve(&key, subject(), &deadline, |_| {
                panic!("no exchange while a holder is alive")
            })
            .unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(600));
        assert!(
            err.what()
                .contains("another plugin process has been exchanging"),
            "{err}"
        );
        drop(holder);
    }

    #[test]
    fn a_waiter_takes_the_entry_the_holder_wrote_while_still_holding() {
        let (_dir, cache) = shared_cache();
        let key = store::test_support::key('a');
        let Ok(Acquired::Held(holder)) = cache.store.try_lock(&key) else {
            panic!("the lock is free");
        };
        let waiter = {
            let (cache, key) = (cache.clone(), key.clone());
            std::thread::spawn(move || {
                let deadline = Deadline::after(Duration::from_secs(10));
                let served = cache
                    .serve(&key, subject(), &deadline, |_| {
                        panic!("no exchange while a holder is alive")
                    })
                    .unwrap();
                (
                    served.origin,
                    served.credential.password.expose().to_string(),
                )
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        let credential = credential("from-the-holder", 3600);
        cache
            .store
            .write(&Entry {
                key: key.clone(),
                provider: "aws".into(),
                service_account: None,
                spiffe_id: None,
                registry: "reg.example".into(),
                username: credential.username,
                password: credential.password,
                created_at: duration::unix_now(),
                expires_at: credential.expires_at,
            })
            .unwrap();
        let (origin, password) = waiter.join().unwrap();
        assert_eq!(origin, Origin::Cache);
        assert_eq!(password, "from-the-holder");
        drop(holder);
    }

    #[test]
    fn waiters_in_other_threads_share_one_exchange() {
        let (_dir, cache) = shared_cache();
        let key = store::test_support::key('e');
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (cache, key, calls) = (cache.clone(), key.clone(), calls.clone());
                std::thread::spawn(move || {
                    let deadline = Deadline::after(Duration::from_secs(10));
                    cache
                        .serve(&key, subject(), &deadline, |_| {
                            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(200));
                            Ok(credential("shared", 3600))
                        })
                        .unwrap()
                        .credential
                        .password
                        .expose()
                        .to_string()
                })
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().unwrap(), "shared");
        }
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
