//! Per-key locks across processes: one upstream exchange per key, however
//! many plugin processes the kubelet starts at once.
//!
//! Each key has its own lock file, `<key>.lock`, locked with
//! `std::fs::File::lock` (`flock(2)` on Linux, `LockFileEx` on Windows): advisory, exclusive, tied to
//! the open file, and released by the kernel when the holder exits or is
//! killed, so a crashed process never leaves a key locked. Different keys
//! use different files and never wait on each other.
//!
//! Lock files may be removed (by housekeeping and `cache purge`), but only
//! by a process that holds the lock. A process that opened the old file and
//! then gets its lock checks that the path still names that same file, and
//! starts over on the new one if not; so two processes never both believe
//! they hold a key.
//!
//! Waiting polls `try_lock` with a short backoff, because the wait must end
//! at a deadline and a blocking `lock()` cannot be interrupted.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use std::fs::TryLockError;

use crate::platform::{self, Open, Owner};

/// First pause between two attempts; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(1);
/// Longest pause: the most a waiter lags behind the holder's release.
const MAX_BACKOFF: Duration = Duration::from_millis(20);

/// A held lock, released when dropped (the file is closed).
#[derive(Debug)]
pub struct KeyLock {
    /// Held only for its lock: closing it releases the lock.
    #[cfg_attr(not(test), allow(dead_code))]
    file: File,
    path: PathBuf,
}

impl KeyLock {
    /// Removes the lock file while holding it. Processes waiting on the old
    /// file notice and move on to a new one.
    pub fn remove_file(&self) -> io::Result<()> {
        std::fs::remove_file(&self.path)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    #[cfg(test)]
    fn file(&self) -> &File {
        &self.file
    }
}

/// How an attempt to lock ended.
#[derive(Debug)]
pub enum Acquired {
    Held(KeyLock),
    /// Someone else still held it when the wait ended.
    Busy,
}

/// Locks `path`, waiting until `until` at the latest. `owner` is who runs
/// the plugin, whom the lock file must belong to. Errors are I/O problems (a
/// read-only directory, a lock file that is not ours): the caller decides to
/// go on without the lock.
pub fn acquire(path: &Path, owner: &Owner, until: Instant) -> io::Result<Acquired> {
    let mut backoff = FIRST_BACKOFF;
    'reopen: loop {
        let file = open(path, owner)?;
        loop {
            match file.try_lock() {
                Ok(()) => {
                    if same_file(path, &file)? {
                        return Ok(Acquired::Held(KeyLock {
                            file,
                            path: path.to_path_buf(),
                        }));
                    }
                    // Removed (or replaced) while we waited: start over on
                    // whatever file the path names now.
                    continue 'reopen;
                }
                Err(TryLockError::WouldBlock) => {
                    let now = Instant::now();
                    if now >= until {
                        return Ok(Acquired::Busy);
                    }
                    std::thread::sleep(backoff.min(until - now));
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(TryLockError::Error(e)) => return Err(e),
            }
        }
    }
}

/// Locks `path` only if nobody holds it now.
pub fn try_acquire(path: &Path, owner: &Owner) -> io::Result<Acquired> {
    acquire(path, owner, Instant::now())
}

/// Opens (creating if needed) a lock file: private, never through a
/// link, and only if it is a regular file that `owner` may trust.
fn open(path: &Path, owner: &Owner) -> io::Result<File> {
    let file = platform::open(path, &Open::read_write())?;
    let facts = platform::facts(&file)?;
    if !facts.is_file() || !facts.owner.trusted_by(owner) {
        return Err(io::Error::other(format!(
            "lock file {} is not a regular file owned by {owner}",
            path.display()
        )));
    }
    Ok(file)
}

/// Whether `path` still names the open `file`.
fn same_file(path: &Path, file: &File) -> io::Result<bool> {
    let held = platform::facts(file)?;
    match platform::facts_at(path) {
        Ok(now) => Ok(now.id == held.id),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn uid(dir: &Path) -> Owner {
        Owner(std::fs::metadata(dir).unwrap().uid())
    }

    /// `k.lock` in `dir`, its owner, and the lock, held.
    fn held(dir: &Path) -> (std::path::PathBuf, Owner, KeyLock) {
        let path = dir.join("k.lock");
        let owner = uid(dir);
        let Acquired::Held(lock) = try_acquire(&path, &owner).unwrap() else {
            panic!("free");
        };
        (path, owner, lock)
    }

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[test]
    fn second_locker_waits_until_the_deadline_then_gets_busy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.lock");
        let Acquired::Held(first) = acquire(&path, &uid(dir.path()), soon(100)).unwrap() else {
            panic!("the first lock must be free");
        };
        let started = Instant::now();
        let second = acquire(&path, &uid(dir.path()), soon(80)).unwrap();
        assert!(matches!(second, Acquired::Busy), "{second:?}");
        assert!(started.elapsed() >= Duration::from_millis(80));
        assert!(matches!(
            try_acquire(&path, &uid(dir.path())).unwrap(),
            Acquired::Busy
        ));
        drop(first);
        assert!(matches!(
            try_acquire(&path, &uid(dir.path())).unwrap(),
            Acquired::Held(_)
        ));
    }

    /// Another thread that waits up to 5 s for the lock at `path`, and
    /// hands what it got to `then`.
    fn wait_in_thread<T: Send + 'static>(
        path: &Path,
        owner: Owner,
        then: impl FnOnce(Acquired) -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = path.to_path_buf();
        std::thread::spawn(move || then(acquire(&path, &owner, soon(5_000)).unwrap()))
    }

    #[test]
    fn a_waiter_gets_the_lock_soon_after_release() {
        let dir = tempfile::tempdir().unwrap();
        let (path, owner, first) = held(dir.path());
        let started = Instant::now();
        let waiter = wait_in_thread(&path, owner.clone(), move |got| {
            (matches!(got, Acquired::Held(_)), started.elapsed())
        });
        std::thread::sleep(Duration::from_millis(100));
        drop(first);
        let (held, waited) = waiter.join().unwrap();
        assert!(held);
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
        assert!(waited < Duration::from_millis(1_000), "{waited:?}");
    }

    #[test]
    fn different_keys_never_wait_on_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let owner = uid(dir.path());
        let Acquired::Held(_a) = try_acquire(&dir.path().join("a.lock"), &owner).unwrap() else {
            panic!("free");
        };
        assert!(matches!(
            try_acquire(&dir.path().join("b.lock"), &owner).unwrap(),
            Acquired::Held(_)
        ));
    }

    #[test]
    fn a_removed_lock_file_is_not_shared_by_two_holders() {
        let dir = tempfile::tempdir().unwrap();
        let (path, owner, first) = held(dir.path());
        // A waiter opens the current file, then blocks on it.
        let waiter = wait_in_thread(&path, owner.clone(), |got| match got {
            Acquired::Held(lock) => lock.file().metadata().unwrap().ino(),
            Acquired::Busy => panic!("the waiter must get a lock"),
        });
        std::thread::sleep(Duration::from_millis(50));
        // The holder removes the file; a newcomer creates and locks a new one.
        first.remove_file().unwrap();
        let old_ino = first.file().metadata().unwrap().ino();
        let Acquired::Held(newcomer) = try_acquire(&path, &owner).unwrap() else {
            panic!("the new file is free");
        };
        let new_ino = newcomer.file().metadata().unwrap().ino();
        assert_ne!(old_ino, new_ino);
        drop(first);
        // The waiter now gets the old file's lock, sees it is gone, and
        // must wait for the newcomer instead of holding the key too.
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished(), "the waiter holds a removed lock");
        drop(newcomer);
        assert_eq!(waiter.join().unwrap(), new_ino);
    }

    #[test]
    fn refuses_a_symlink_and_a_foreign_owner() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"").unwrap();
        let link = dir.path().join("k.lock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let owner = uid(dir.path());
        let err = try_acquire(&link, &owner).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");

        let other = dir.path().join("o.lock");
        std::fs::write(&other, b"").unwrap();
        let err = try_acquire(&other, &Owner(owner.0.wrapping_add(1))).unwrap_err();
        assert!(
            err.to_string().contains("not a regular file owned by"),
            "{err}"
        );
    }
}
