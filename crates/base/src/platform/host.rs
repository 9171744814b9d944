//! The node's file system as the installer sees it: one [`Host`] for
//! Linux and Windows, over each system's primitives (`unix/host.rs`,
//! `windows/host.rs`). Paths are kept as the kubelet sees them (absolute,
//! host-side: `/etc/kubernetes/...`, `c:\k\...`) and are resolved only
//! through this type, always below its root, so that neither a tenant nor
//! a stale link can steer a root-owned write outside the node's tree.
//!
//! What differs is how a link on the way is met: Linux walks it inside
//! the root (chroot semantics, what the kubelet itself sees), Windows
//! refuses it (nothing the installer touches there is a link). What is the
//! same is written once here: the questions built on the primitives
//! (`exists`, `is_file`), the bounded reads, and atomic writes that never
//! follow a link in the last component.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::found::{Existing, FileData, Identity, Kind};
use super::os::host::Root;

/// The node's file system below one root: `/` (or `C:\`) on the node
/// itself, or a mounted host root (`--root /host` in a DaemonSet, an image
/// being built, a test directory).
#[derive(Debug)]
pub struct Host {
    os: Root,
}

impl Host {
    /// Opens `root` (a directory) as the node's `/` (or system drive).
    pub fn open(root: &Path) -> std::io::Result<Host> {
        Ok(Host {
            os: Root::open(root)?,
        })
    }

    pub fn root(&self) -> &Path {
        self.os.root()
    }

    /// Another handle on the same root.
    pub fn try_clone(&self) -> std::io::Result<Host> {
        Ok(Host {
            os: self.os.try_clone()?,
        })
    }

    /// Whether the root is this machine's own `/` (or `C:\`).
    pub fn is_local(&self) -> bool {
        self.os.is_local()
    }

    /// What `path` names, links followed inside the root on Linux (any
    /// link makes it `None` on Windows). `None`: nothing usable there.
    pub fn kind(&self, path: &Path) -> Option<Kind> {
        self.os.kind(path)
    }

    /// What `path` names itself (a link is a link).
    pub fn kind_no_follow(&self, path: &Path) -> Option<Kind> {
        self.os.kind_no_follow(path)
    }

    pub fn exists(&self, path: &Path) -> bool {
        self.kind(path).is_some()
    }

    pub fn is_file(&self, path: &Path) -> bool {
        self.kind(path) == Some(Kind::File)
    }

    pub fn is_dir(&self, path: &Path) -> bool {
        self.kind(path) == Some(Kind::Dir)
    }

    /// The identity of what `path` names ([`Identity`]).
    pub fn identity(&self, path: &Path) -> Option<Identity> {
        self.os.identity(path)
    }

    /// A path in this process's own view that names the same file as host
    /// path `path` (resolved inside the root), for tools that take a path:
    /// check-config's staged copy, an exec.
    pub fn local(&self, path: &Path) -> std::io::Result<PathBuf> {
        self.os.local(path)
    }

    /// The target of the link `path` (its last component not followed).
    pub fn read_link(&self, path: &Path) -> Option<PathBuf> {
        self.os.read_link(path)
    }

    /// Checks that only root (SYSTEM, Administrators) or the user running
    /// us controls where a write of `path` lands: every existing directory
    /// below the root on the way (and on Linux every link followed). What
    /// does not exist yet would be created by us. Install calls it for
    /// every path it will write before writing anything; the writes check
    /// again as they go.
    pub fn check_place(&self, path: &Path) -> std::io::Result<()> {
        self.os.check_place(path)
    }

    /// Reads regular file `path`, at most `limit` bytes. `Ok(None)`: it
    /// does not exist. A FIFO, device, socket or directory is an error
    /// without being opened for reading, so it can neither block nor be
    /// read for ever.
    pub fn read_file(&self, path: &Path, limit: u64) -> std::io::Result<Option<FileData>> {
        let Some(opened) = self.os.open_file(path)? else {
            return Ok(None);
        };
        if opened.len > limit {
            return Err(too_large(limit));
        }
        let mut bytes = Vec::new();
        opened
            .file
            .take(limit.saturating_add(1))
            .read_to_end(&mut bytes)?;
        if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > limit {
            return Err(too_large(limit));
        }
        Ok(Some(FileData {
            bytes,
            mode: opened.mode,
        }))
    }

    /// [`Host::read_file`]'s bytes; `Ok(None)` when missing.
    pub fn read_bytes(&self, path: &Path, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
        Ok(self.read_file(path, limit)?.map(|d| d.bytes))
    }

    /// The bytes of `path` (its last `limit` with `tail`, else at most
    /// `limit`), only if it is a file the plugin itself would have written
    /// there: root's (SYSTEM's, Administrators') or ours, writable by
    /// nobody else, one hard link. What a tenant could have planted or
    /// edited is refused, not read.
    pub fn read_own(
        &self,
        path: &Path,
        limit: u64,
        tail: bool,
    ) -> std::io::Result<Option<Vec<u8>>> {
        let Some(mut opened) = self.os.open_own(path)? else {
            return Ok(None);
        };
        if tail {
            opened
                .file
                .seek(SeekFrom::Start(opened.len.saturating_sub(limit)))?;
        } else if opened.len > limit {
            return Err(too_large(limit));
        }
        let mut bytes = Vec::new();
        opened.file.take(limit).read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }

    /// The entries of directory `path`, each with what it is itself (a
    /// link is a link), sorted by name.
    pub fn read_dir(&self, path: &Path) -> std::io::Result<Vec<(OsString, Kind)>> {
        self.os.read_dir(path)
    }

    /// Creates directory `path` and its missing parents (0755 whatever
    /// the umask on Linux, the inherited DACL on Windows); existing ones
    /// are left as they are.
    pub fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        self.os.create_dir_all(path)
    }

    /// Writes `bytes` to `path` atomically with `mode`, replacing what is
    /// there (a link is replaced, never followed).
    pub fn write(&self, path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
        self.os
            .put(path, bytes, mode, Existing::Replace)
            .map(|_| ())
    }

    /// Writes `bytes` to `path` only if nothing is there: `Ok(false)`
    /// when something is. Never overwrites.
    pub fn write_new(&self, path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<bool> {
        self.os.put(path, bytes, mode, Existing::Keep)
    }

    /// Makes `path` a symbolic link to `target`, atomically (replacing
    /// what is there, or only if nothing is: `existing`).
    pub fn symlink(&self, path: &Path, target: &Path, existing: Existing) -> std::io::Result<bool> {
        self.os.symlink(path, target, existing)
    }

    /// Removes file or link `path`. `Ok(false)`: nothing was there.
    pub fn remove(&self, path: &Path) -> std::io::Result<bool> {
        self.os.remove(path)
    }

    /// Removes directory `path` if it is empty. `Ok(false)`: it is not
    /// there, or not empty.
    pub fn remove_dir(&self, path: &Path) -> std::io::Result<bool> {
        self.os.remove_dir(path)
    }

    /// Takes an exclusive lock on `path` (created private), waiting at
    /// most `wait`.
    pub fn lock(&self, path: &Path, wait: Duration) -> std::io::Result<File> {
        self.os.lock(path, wait)
    }
}

fn too_large(limit: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("it is larger than {limit} bytes"),
    )
}

/// A node root in a temporary directory with `files` written under it
/// (absolute paths, as on the node), and a [`Host`] over it: for the tests
/// of what reads a node.
#[cfg(all(unix, any(test, feature = "test-support")))]
#[allow(clippy::panic)]
pub fn test_root(files: &[(&str, &[u8])]) -> (tempfile::TempDir, Host) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir: {e}"));
    for (path, bytes) in files {
        let path = dir.path().join(path.trim_start_matches('/'));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{}: {e}", parent.display()));
        }
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let host = Host::open(dir.path()).unwrap_or_else(|e| panic!("open the root: {e}"));
    (dir, host)
}
