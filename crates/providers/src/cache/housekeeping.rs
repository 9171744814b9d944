//! Cleanup after each miss, bounded so that a crowded directory never
//! makes a pull slow.
//!
//! Per invocation it reads at most [`MAX_EXAMINED`] entries (oldest first,
//! those most likely to be past their refresh time) and removes at most
//! [`MAX_REMOVALS`] files:
//! - entries that can no longer be served (expired, due for refresh,
//!   corrupt, foreign);
//! - the oldest entries beyond `--cache-max-entries`;
//! - lock files without an entry, unused for [`STALE_AFTER`];
//! - temporary files older than [`STALE_AFTER`] (left by a killed writer).
//!
//! Entries and lock files are removed only while holding the key's lock,
//! taken without waiting: a key in use is skipped, never raced. An entry
//! that cannot be removed (say, a directory under an entry's name) is
//! skipped too and reported once; the pass goes on, so one bad name never
//! stops the cap from being enforced.

use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::time::{Duration, SystemTime};

use super::key::Key;
use super::store::{Lookup, Store};
use wicp_base::lock::Acquired;

/// Entries read and checked per invocation.
const MAX_EXAMINED: usize = 64;
/// Files removed per invocation.
const MAX_REMOVALS: usize = 256;
/// Age after which an unused lock file or a temporary file is stale: longer
/// than any invocation can live (the kubelet kills plugins after 60 s).
const STALE_AFTER: Duration = Duration::from_secs(120);

/// What one pass removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub stale_entries: usize,
    pub over_cap: usize,
    pub locks: usize,
    pub temps: usize,
    /// Entries that could not be removed, skipped.
    pub unremovable: usize,
    /// The first of them and why, for the one warning.
    pub first_failure: Option<String>,
}

impl Report {
    pub fn removed(&self) -> usize {
        self.stale_entries + self.over_cap + self.locks + self.temps
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "removed {} stale entries, {} entries over the cap, {} lock files, {} temporary files",
            self.stale_entries, self.over_cap, self.locks, self.temps
        )?;
        if self.unremovable > 0 {
            write!(f, "; skipped {} entries it cannot remove", self.unremovable)?;
        }
        Ok(())
    }
}

/// One pass over `store` at `now`; `keep` (the entry just written) is never
/// removed.
pub fn run(
    store: &Store,
    now: i64,
    max_age: Duration,
    max_entries: usize,
    keep: &Key,
) -> io::Result<Report> {
    let scan = store.scan()?;
    let wall_now = SystemTime::now();
    let mut entries: Vec<(Key, SystemTime)> = scan
        .entries
        .into_iter()
        .filter(|(key, _)| key != keep)
        .collect();
    entries.sort_by_key(|(_, modified)| *modified);
    let mut pass = Pass {
        store,
        report: Report::default(),
        budget: MAX_REMOVALS,
        removed: BTreeSet::new(),
        failed: BTreeSet::new(),
    };
    pass.remove_unservable(&entries, now, max_age);
    pass.remove_over_cap(&entries, max_entries);
    pass.remove_orphan_locks(&scan.locks, &entries, keep, wall_now);
    pass.remove_temporaries(&scan.temps, wall_now);
    Ok(pass.report)
}

/// One pass in progress: what it removed, what it could not, and how many
/// removals it has left.
struct Pass<'s> {
    store: &'s Store,
    report: Report,
    budget: usize,
    removed: BTreeSet<Key>,
    failed: BTreeSet<Key>,
}

impl Pass<'_> {
    fn failure(&mut self, key: &Key, e: io::Error) {
        self.failed.insert(key.clone());
        self.report.unremovable += 1;
        if self.report.first_failure.is_none() {
            self.report.first_failure =
                Some(format!("{}: {e}", self.store.entry_path(key).display()));
        }
    }

    /// Entries that can no longer be served, among the oldest
    /// [`MAX_EXAMINED`] (`entries` is oldest first).
    fn remove_unservable(&mut self, entries: &[(Key, SystemTime)], now: i64, max_age: Duration) {
        let servable = |lookup: &Lookup| match lookup {
            Lookup::Found(e) => super::is_fresh(e.created_at, e.expires_at, now, max_age),
            Lookup::Missing => true,
            Lookup::Unusable(_) => false,
        };
        for (key, _) in entries.iter().take(MAX_EXAMINED) {
            if self.budget == 0 {
                break;
            }
            if servable(&self.store.read(key)) {
                continue;
            }
            match remove_entry(self.store, key, |l| !servable(l)) {
                Ok(true) => {
                    self.removed.insert(key.clone());
                    self.report.stale_entries += 1;
                    self.budget -= 1;
                }
                Ok(false) => {}
                Err(e) => self.failure(key, e),
            }
        }
    }

    /// The oldest entries beyond `max_entries`; the entry just written
    /// counts towards the cap too. An entry that cannot be removed (now or
    /// in the stale pass) is skipped and the next one goes instead.
    fn remove_over_cap(&mut self, entries: &[(Key, SystemTime)], max_entries: usize) {
        let live: Vec<&Key> = entries
            .iter()
            .map(|(key, _)| key)
            .filter(|key| !self.removed.contains(*key))
            .collect();
        let mut over = (live.len() + 1).saturating_sub(max_entries);
        for key in live {
            if self.budget == 0 || over == 0 {
                break;
            }
            if self.failed.contains(key) {
                continue;
            }
            match remove_entry(self.store, key, |_| true) {
                Ok(true) => {
                    self.removed.insert(key.clone());
                    self.report.over_cap += 1;
                    self.budget -= 1;
                    over -= 1;
                }
                Ok(false) => {}
                Err(e) => self.failure(key, e),
            }
        }
    }

    /// Lock files without an entry, unused for [`STALE_AFTER`], removed
    /// while held.
    fn remove_orphan_locks(
        &mut self,
        locks: &[(Key, SystemTime)],
        entries: &[(Key, SystemTime)],
        keep: &Key,
        wall_now: SystemTime,
    ) {
        let with_entry: BTreeSet<&Key> = entries
            .iter()
            .map(|(key, _)| key)
            .filter(|key| !self.removed.contains(*key))
            .chain(std::iter::once(keep))
            .collect();
        for (key, modified) in locks {
            if self.budget == 0 {
                break;
            }
            if with_entry.contains(key) || self.removed.contains(key) || !older(*modified, wall_now)
            {
                continue;
            }
            if let Ok(Acquired::Held(lock)) = self.store.try_lock(key)
                && matches!(self.store.read(key), Lookup::Missing)
                && lock.remove_file().is_ok()
            {
                self.report.locks += 1;
                self.budget -= 1;
            }
        }
    }

    /// Temporary files older than [`STALE_AFTER`], left by a killed writer.
    fn remove_temporaries(
        &mut self,
        temps: &[(std::path::PathBuf, SystemTime)],
        wall_now: SystemTime,
    ) {
        for (path, modified) in temps {
            if self.budget == 0 {
                break;
            }
            if older(*modified, wall_now) && std::fs::remove_file(path).is_ok() {
                self.report.temps += 1;
                self.budget -= 1;
            }
        }
    }
}

/// Removes the entry for `key` and its lock file, holding its lock, if
/// `still` holds for what is there once locked. `Ok(false)` when the key
/// is in use or changed its mind.
fn remove_entry(store: &Store, key: &Key, still: impl Fn(&Lookup) -> bool) -> io::Result<bool> {
    let Ok(Acquired::Held(lock)) = store.try_lock(key) else {
        return Ok(false);
    };
    if !still(&store.read(key)) {
        return Ok(false);
    }
    let removed = store.remove(key)?;
    let _ = lock.remove_file();
    Ok(removed)
}

fn older(modified: SystemTime, now: SystemTime) -> bool {
    now.duration_since(modified)
        .is_ok_and(|age| age >= STALE_AFTER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::store::test_support::{entry, key, store};
    use std::time::Duration;

    const HOUR: Duration = Duration::from_secs(3600);

    fn age(path: &std::path::Path, secs: u64) {
        let when = SystemTime::now() - Duration::from_secs(secs);
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(when)
            .unwrap();
    }

    fn write(store: &Store, c: char, created_at: i64, expires_at: i64) -> Key {
        let k = key(c);
        let mut e = entry(&k);
        e.created_at = created_at;
        e.expires_at = expires_at;
        store.write(&e).unwrap();
        k
    }

    #[test]
    fn removes_what_can_no_longer_be_served_and_keeps_the_rest() {
        let (_parent, store) = store();
        let now = 100_000;
        let fresh = write(&store, 'a', now - 60, now + 3000);
        let expired = write(&store, 'b', now - 7200, now - 3600);
        let due = write(&store, 'c', now - 3000, now + 600);
        let corrupt = key('d');
        std::fs::write(store.entry_path(&corrupt), b"{").unwrap();
        let keep = write(&store, 'e', now, now + 3600);

        let report = run(&store, now, HOUR, 100, &keep).unwrap();
        assert_eq!(report.stale_entries, 3, "{report}");
        for k in [&expired, &due, &corrupt] {
            assert!(matches!(store.read(k), Lookup::Missing), "{k}");
            assert!(!store.lock_path(k).exists(), "{k}");
        }
        assert!(matches!(store.read(&fresh), Lookup::Found(_)));
        assert!(matches!(store.read(&keep), Lookup::Found(_)));
    }

    #[test]
    fn a_locked_entry_is_left_alone() {
        let (_parent, store) = store();
        let now = 100_000;
        let expired = write(&store, 'a', now - 7200, now - 3600);
        let Acquired::Held(_lock) = store.try_lock(&expired).unwrap() else {
            panic!("free");
        };
        let report = run(&store, now, HOUR, 100, &key('f')).unwrap();
        assert_eq!(report.removed(), 0);
        assert!(matches!(store.read(&expired), Lookup::Found(_)));
    }

    /// Four fresh entries, '1' to '4', last written 100, 90, 80 and 70
    /// seconds ago: oldest first.
    fn four_aged(store: &Store, now: i64) -> Vec<Key> {
        ['1', '2', '3', '4']
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let k = write(store, c, now, now + 3600);
                age(&store.entry_path(&k), 100 - 10 * i as u64);
                k
            })
            .collect()
    }

    #[test]
    fn the_cap_removes_the_oldest_entries() {
        let (_parent, store) = store();
        let now = wicp_base::duration::unix_now();
        let keys = four_aged(&store, now);
        let keep = write(&store, '5', now, now + 3600);
        // Cap 3: the two oldest go, the two newest and `keep` stay.
        let report = run(&store, now, HOUR, 3, &keep).unwrap();
        assert_eq!(report.over_cap, 2, "{report}");
        assert!(matches!(store.read(&keys[0]), Lookup::Missing));
        assert!(matches!(store.read(&keys[1]), Lookup::Missing));
        assert!(matches!(store.read(&keys[2]), Lookup::Found(_)));
        assert!(matches!(store.read(&keys[3]), Lookup::Found(_)));
        assert!(matches!(store.read(&keep), Lookup::Found(_)));
    }

    #[test]
    fn an_entry_that_cannot_be_removed_is_skipped_and_the_cap_still_holds() {
        let (_parent, store) = store();
        let now = wicp_base::duration::unix_now();
        // The oldest "entry" is a directory: neither stale removal nor the
        // cap can remove it.
        let stuck = key('0');
        std::fs::create_dir(store.entry_path(&stuck)).unwrap();
        std::fs::write(store.entry_path(&stuck).join("x"), b"x").unwrap();
        let when = SystemTime::now() - Duration::from_secs(1000);
        std::fs::File::open(store.entry_path(&stuck))
            .unwrap()
            .set_modified(when)
            .unwrap_or(());
        let keys = four_aged(&store, now);
        let keep = write(&store, '5', now, now + 3600);
        // Cap 3 with six names: the directory is skipped, and three real
        // entries go so that the cap holds for what can be removed.
        let report = run(&store, now, HOUR, 3, &keep).unwrap();
        assert_eq!(report.unremovable, 1, "{report}");
        assert!(
            report
                .first_failure
                .as_deref()
                .unwrap_or("")
                .contains(&stuck.to_string())
        );
        assert_eq!(report.over_cap, 3, "{report}");
        for k in &keys[..3] {
            assert!(matches!(store.read(k), Lookup::Missing), "{k}");
        }
        assert!(matches!(store.read(&keys[3]), Lookup::Found(_)));
        assert!(matches!(store.read(&keep), Lookup::Found(_)));
        assert!(store.entry_path(&stuck).is_dir());
    }

    #[test]
    fn stale_lock_and_temporary_files_go_fresh_ones_stay() {
        let (_parent, store) = store();
        let now = wicp_base::duration::unix_now();
        let keep = write(&store, 'a', now, now + 3600);
        let orphan_old = key('b');
        let orphan_new = key('c');
        let busy_old = key('d');
        for k in [&orphan_old, &orphan_new, &busy_old] {
            drop(store.try_lock(k).unwrap());
        }
        age(&store.lock_path(&orphan_old), 600);
        age(&store.lock_path(&busy_old), 600);
        let Acquired::Held(_busy) = store.try_lock(&busy_old).unwrap() else {
            panic!("free");
        };
        // keep's own lock file stays even when old.
        drop(store.try_lock(&keep).unwrap());
        age(&store.lock_path(&keep), 600);

        let old_temp = store.dir().join(format!(".{}.1.2.tmp", key('e')));
        let new_temp = store.dir().join(format!(".{}.1.3.tmp", key('e')));
        std::fs::write(&old_temp, b"{\"fo").unwrap();
        std::fs::write(&new_temp, b"{\"fo").unwrap();
        age(&old_temp, 600);

        let report = run(&store, now, HOUR, 100, &keep).unwrap();
        assert_eq!((report.locks, report.temps), (1, 1), "{report}");
        assert!(!store.lock_path(&orphan_old).exists());
        assert!(store.lock_path(&orphan_new).exists());
        assert!(store.lock_path(&busy_old).exists());
        assert!(store.lock_path(&keep).exists());
        assert!(!old_temp.exists());
        assert!(new_temp.exists());
    }

    #[test]
    fn work_per_pass_is_bounded() {
        let (_parent, store) = store();
        let now = 100_000;
        // More expired entries than one pass examines.
        for i in 0..(MAX_EXAMINED + 10) {
            let k = Key::parse(&format!("{i:064x}")).unwrap();
            let mut e = entry(&k);
            e.created_at = now - 7200;
            e.expires_at = now - 3600;
            store.write(&e).unwrap();
        }
        let keep = key('f');
        let first = run(&store, now, HOUR, 1000, &keep).unwrap();
        assert_eq!(first.stale_entries, MAX_EXAMINED);
        let second = run(&store, now, HOUR, 1000, &keep).unwrap();
        assert_eq!(second.stale_entries, 10);
        assert!(store.scan().unwrap().entries.is_empty());
    }
}
