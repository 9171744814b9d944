//! What `node install` changes on a node, recorded so that `node uninstall`
//! (or a rollback) can put every file back byte for byte, even after a
//! SIGKILL at any point.
//!
//! The record is an intent log: the manifest names every file a run is
//! about to change, with what was there before (a file's sha256 and mode, a
//! link's target, or nothing) and where its backup goes, and it is written
//! and synced *before* the first change. The backup of a file is then
//! written 0600 beside it (`NAME.wi-credential-provider.bak`: the `.bak`
//! suffix keeps it out of a kubelet config directory, which reads only
//! `*.json|yaml|yml`), never over an existing one, and only then is the
//! file replaced. So at any instant a file is either what it was (its
//! sha256 is the original's) or what some run wrote (a sha256 the manifest
//! lists), and the backup, when it exists, holds the original.
//!
//! Every run holds an exclusive lock on `node-install.lock` beside the
//! manifest, so concurrent installs (a DaemonSet rollout racing an admin)
//! cannot lose each other's records.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use wicp_base::error::{Error, Result};
use wicp_base::platform::{Host, Kind as FileKind};

const BACKUP_SUFFIX: &str = ".wi-credential-provider.bak";
pub(crate) const MANIFEST: &str = "/var/lib/wi-credential-provider/node-install.json";
pub(crate) const LOCK: &str = "/var/lib/wi-credential-provider/node-install.lock";

/// How long a run waits for another to release the lock.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(60);

/// Largest file the installer reads or backs up: configs and environment
/// files are kilobytes, our binary some 10 MB.
pub(crate) const MAX_FILE: u64 = 256 << 20;

/// How many earlier writes a record remembers.
const WRITTEN_HISTORY: usize = 16;

pub(crate) fn sha256(bytes: &[u8]) -> String {
    wicp_base::hex::encode(&Sha256::digest(bytes))
}

pub(crate) fn backup_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(BACKUP_SUFFIX);
    PathBuf::from(s)
}

pub(crate) fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    let fix = if e.kind() == std::io::ErrorKind::PermissionDenied
        || e.kind() == std::io::ErrorKind::ReadOnlyFilesystem
    {
        "run as root on the node, or from a privileged pod with the host root mounted read-write (--root /host)"
    } else {
        "check the path and the free space"
    };
    Error::config(format!("cannot {what} {}: {e}", path.display())).fix(fix)
}

/// What a path held at some moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub(crate) enum State {
    Absent,
    File { sha256: String, mode: u32 },
    Symlink { target: PathBuf },
}

/// A path's state with the bytes, read once and used for validation,
/// the backup and the rollback alike.
#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    pub(crate) state: State,
    pub(crate) bytes: Option<Vec<u8>>,
}

impl Snapshot {
    /// Reads what `path` holds now, without following a link in its last
    /// component. A FIFO, device or directory there is an error.
    pub(crate) fn take(host: &Host, path: &Path) -> Result<Snapshot> {
        match host.kind_no_follow(path) {
            None => Ok(Snapshot {
                state: State::Absent,
                bytes: None,
            }),
            Some(FileKind::Symlink) => {
                let target = host.read_link(path).unwrap_or_default();
                Ok(Snapshot {
                    state: State::Symlink { target },
                    bytes: None,
                })
            }
            Some(FileKind::File) => {
                let data = host
                    .read_file(path, MAX_FILE)
                    .map_err(|e| io_error("read", path, e))?
                    .ok_or_else(|| {
                        Error::config(format!("{} vanished while being read", path.display()))
                    })?;
                Ok(Snapshot {
                    state: State::File {
                        sha256: sha256(&data.bytes),
                        mode: data.mode,
                    },
                    bytes: Some(data.bytes),
                })
            }
            Some(FileKind::Dir) => Err(Error::config(format!(
                "{} is a directory where a file is expected",
                path.display()
            ))),
            Some(FileKind::Other) => Err(Error::config(format!(
                "{} is a FIFO, socket or device where a file is expected; not touched",
                path.display()
            ))),
        }
    }

    /// The sha256 of a file's bytes, `None` for a link or nothing.
    pub(crate) fn sha(&self) -> Option<&str> {
        match &self.state {
            State::File { sha256, .. } => Some(sha256),
            _ => None,
        }
    }

    /// Puts exactly this state back at `path`.
    pub(crate) fn restore(&self, host: &Host, path: &Path) -> Result<()> {
        match (&self.state, &self.bytes) {
            (State::Absent, _) => host
                .remove(path)
                .map(|_| ())
                .map_err(|e| io_error("remove", path, e)),
            (State::Symlink { target }, _) => host
                .symlink(path, target, wicp_base::platform::Existing::Replace)
                .map(|_| ())
                .map_err(|e| io_error("restore the link", path, e)),
            (State::File { mode, .. }, Some(bytes)) => host
                .write(path, bytes, *mode)
                .map_err(|e| io_error("restore", path, e)),
            (State::File { .. }, None) => Err(Error::config(format!(
                "no bytes kept for {}",
                path.display()
            ))),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Kind {
    /// A CredentialProviderConfig file; `entries` are ours.
    Config,
    /// An environment file whose variable got our flags appended.
    Environment,
    /// A file that is ours alone (a NodeConfig drop-in, our binary).
    Own,
}

/// One file changed by install.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The host path.
    pub(crate) path: PathBuf,
    pub(crate) kind: Kind,
    /// What was there before the first install. Absent in manifests of
    /// earlier versions, which kept only the backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) original: Option<State>,
    /// Where the original bytes are kept (a host path), for a file.
    pub(crate) backup: Option<PathBuf>,
    /// sha256 of what install last wrote (or is about to write).
    pub(crate) written: String,
    /// sha256 of what earlier installs wrote: a file may still hold one
    /// after a run was killed before its write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) also_written: Vec<String>,
    /// Our provider names (config files).
    #[serde(default)]
    pub(crate) entries: Vec<String>,
    /// The text appended (environment files).
    #[serde(default)]
    pub(crate) appended: String,
}

impl Record {
    /// Whether `sha` is something an install wrote.
    pub(crate) fn ours(&self, sha: &str) -> bool {
        self.written == sha || self.also_written.iter().any(|w| w == sha)
    }

    /// Whether `now` is what was there before the first install.
    pub(crate) fn is_original(&self, now: &State) -> bool {
        self.original.as_ref() == Some(now)
    }

    /// Records that `sha` is about to be written.
    pub(crate) fn will_write(&mut self, sha: String) {
        if self.written != sha {
            let old = std::mem::replace(&mut self.written, sha);
            if !self.also_written.contains(&old) {
                self.also_written.push(old);
            }
            if self.also_written.len() > WRITTEN_HISTORY {
                self.also_written.remove(0);
            }
        }
    }
}

/// What `node install` put on the node.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Manifest {
    pub(crate) files: Vec<Record>,
    /// Our provider-name symlinks (host paths).
    pub(crate) binaries: Vec<PathBuf>,
    /// The directories installs created (host paths, outermost first):
    /// removed again, when empty, by a rollback and by uninstall.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) directories: Vec<PathBuf>,
}

impl Manifest {
    pub(crate) fn read(host: &Host) -> Result<Option<Manifest>> {
        let path = Path::new(MANIFEST);
        match host.read_bytes(path, MAX_FILE) {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                Error::config(format!(
                    "{MANIFEST} is not a manifest written by node install: {e}"
                ))
                .fix("restore the node's files by hand from the *.wi-credential-provider.bak backups, then remove the manifest")
            }),
            Ok(None) => Ok(None),
            Err(e) => Err(io_error("read", path, e)),
        }
    }

    /// Writes the manifest atomically and synced (0600).
    pub(crate) fn write(&self, host: &Host) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::config(format!("cannot encode the manifest: {e}")))?;
        host.write(Path::new(MANIFEST), &bytes, 0o600)
            .map_err(|e| io_error("write", Path::new(MANIFEST), e))
    }

    pub(crate) fn remove(host: &Host) -> Result<()> {
        host.remove(Path::new(MANIFEST))
            .map(|_| ())
            .map_err(|e| io_error("remove", Path::new(MANIFEST), e))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.files.is_empty() && self.binaries.is_empty()
    }

    pub(crate) fn record(&self, path: &Path) -> Option<&Record> {
        self.files.iter().find(|r| r.path == path)
    }

    pub(crate) fn record_mut(&mut self, path: &Path) -> Option<&mut Record> {
        self.files.iter_mut().find(|r| r.path == path)
    }
}

/// The exclusive lock every install and uninstall holds. When it is let
/// go and no manifest is left (nothing installed, or all undone), the
/// lock file goes too, so that a node without our installation holds no
/// file of ours.
pub(crate) struct Lock {
    host: Host,
    /// The locked file, closed in `drop` after its name is removed (on
    /// Windows the name goes only when the last handle closes, and the
    /// folder holding it cannot be removed before).
    fd: Option<std::fs::File>,
    /// The directories taking the lock created (our state directory on a
    /// node that never had it), outermost first.
    created: Vec<PathBuf>,
    /// Directories to remove with the lock file when nothing of ours is
    /// left: those it created, and (uninstall) those installs recorded.
    remove_when_done: std::cell::RefCell<Vec<PathBuf>>,
}

impl Lock {
    /// The directories taking the lock created, for the manifest.
    pub(crate) fn created(&self) -> &[PathBuf] {
        &self.created
    }

    /// Also remove `dirs` (when empty) once the lock goes and no manifest
    /// is left.
    pub(crate) fn remove_when_done(&self, dirs: &[PathBuf]) {
        self.remove_when_done
            .borrow_mut()
            .extend(dirs.iter().cloned());
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if self.host.exists(Path::new(MANIFEST)) {
            return;
        }
        let _ = self.host.remove(Path::new(LOCK));
        drop(self.fd.take());
        // A refused or undone install leaves no directory of ours behind:
        // those taking the lock created, and our state directory (named
        // after us, so ours) when nothing is left in it (the failure memo,
        // when kept, keeps it), even if a killed run had created it.
        let mut dirs = self.created.clone();
        if let Some(ours) = Path::new(LOCK).parent() {
            dirs.push(ours.to_path_buf());
        }
        dirs.extend(self.remove_when_done.borrow().iter().cloned());
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        dirs.dedup();
        for dir in dirs {
            let _ = self.host.remove_dir(&dir);
        }
    }
}

pub(crate) fn lock(host: &Host) -> Result<Lock> {
    let created = wicp_base::platform::missing_dirs(host, Path::new(LOCK));
    let fd = host.lock(Path::new(LOCK), LOCK_WAIT).map_err(|e| {
        Error::config(format!("cannot lock {LOCK}: {e}"))
            .fix("wait for the other node install or uninstall to finish, then run again")
    })?;
    let host = host
        .try_clone()
        .map_err(|e| Error::config(format!("cannot lock {LOCK}: {e}")))?;
    Ok(Lock {
        host,
        fd: Some(fd),
        created,
        remove_when_done: std::cell::RefCell::new(Vec::new()),
    })
}

/// Removes what a killed run may have left: temporary files of ours
/// (`.NAME.wicp-<hex>`) beside `path`.
pub(crate) fn sweep_temporaries(host: &Host, path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!(".{}.wicp-", name.to_string_lossy());
    let Ok(entries) = host.read_dir(dir) else {
        return;
    };
    for (entry, kind) in entries {
        let entry = entry.to_string_lossy();
        let is_ours = entry
            .strip_prefix(&prefix)
            .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_hexdigit()));
        if is_ours && matches!(kind, FileKind::File | FileKind::Symlink) {
            let _ = host.remove(&dir.join(&*entry));
        }
    }
}

/// Makes sure the backup of a record holds the original when the file
/// still does: a run killed after the manifest but before the backup left
/// none.
pub(crate) fn ensure_backup(host: &Host, record: &Record, now: &Snapshot) -> Result<()> {
    let (Some(backup), Some(bytes)) = (&record.backup, &now.bytes) else {
        return Ok(());
    };
    if !record.is_original(&now.state) {
        return Ok(());
    }
    if host
        .write_new(backup, bytes, 0o600)
        .map_err(|e| io_error("back up", backup, e))?
    {
        return Ok(());
    }
    // Something is there already: keep it if it is the original, and
    // replace it if not (no run ever changed the file, so that backup is
    // not one a restore relies on).
    let held = host.read_bytes(backup, MAX_FILE).ok().flatten();
    if held.as_deref().map(sha256).as_deref() != now.sha() {
        host.write(backup, bytes, 0o600)
            .map_err(|e| io_error("back up", backup, e))?;
    }
    Ok(())
}

/// Puts the original of `record` back. `Ok(false)` when it cannot be had
/// (no backup, or one that does not hold the original).
pub(crate) fn restore_original(host: &Host, record: &Record) -> Result<bool> {
    let Some(original) = &record.original else {
        // A manifest of an earlier version: the backup holds the bytes
        // and the mode.
        return match &record.backup {
            Some(b) => match host.read_file(b, MAX_FILE) {
                Ok(Some(data)) => {
                    host.write(&record.path, &data.bytes, data.mode)
                        .map_err(|e| io_error("restore", &record.path, e))?;
                    let _ = host.remove(b);
                    Ok(true)
                }
                _ => Ok(false),
            },
            None => host
                .remove(&record.path)
                .map(|_| true)
                .map_err(|e| io_error("remove", &record.path, e)),
        };
    };
    let snapshot = match original {
        State::File { sha256: want, .. } => {
            let Some(b) = &record.backup else {
                return Ok(false);
            };
            match host.read_bytes(b, MAX_FILE) {
                Ok(Some(bytes)) if sha256(&bytes) == *want => Snapshot {
                    state: original.clone(),
                    bytes: Some(bytes),
                },
                _ => return Ok(false),
            }
        }
        other => Snapshot {
            state: other.clone(),
            bytes: None,
        },
    };
    snapshot.restore(host, &record.path)?;
    if let Some(b) = &record.backup {
        let _ = host.remove(b);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_a_link_and_nothing_come_back_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::open(dir.path()).unwrap();
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        std::fs::write(dir.path().join("etc/a.yaml"), b"a").unwrap();
        std::os::unix::fs::symlink("/usr/share/b.yaml", dir.path().join("etc/b.yaml")).unwrap();
        let mut records = Vec::new();
        for (p, kind) in [
            ("/etc/a.yaml", Kind::Config),
            ("/etc/b.yaml", Kind::Config),
            ("/etc/c.yaml", Kind::Own),
        ] {
            let path = Path::new(p);
            let now = Snapshot::take(&host, path).unwrap();
            let record = Record {
                path: path.to_path_buf(),
                kind,
                original: Some(now.state.clone()),
                backup: now.bytes.as_ref().map(|_| backup_path(path)),
                written: sha256(b"new"),
                also_written: Vec::new(),
                entries: Vec::new(),
                appended: String::new(),
            };
            ensure_backup(&host, &record, &now).unwrap();
            host.write(path, b"new", 0o644).unwrap();
            records.push(record);
        }
        for r in &records {
            assert!(restore_original(&host, r).unwrap(), "{}", r.path.display());
        }
        assert_eq!(std::fs::read(dir.path().join("etc/a.yaml")).unwrap(), b"a");
        assert_eq!(
            std::fs::read_link(dir.path().join("etc/b.yaml")).unwrap(),
            Path::new("/usr/share/b.yaml")
        );
        let left: Vec<_> = std::fs::read_dir(dir.path().join("etc")).unwrap().collect();
        assert_eq!(left.len(), 2, "{left:?}");
    }
}
