//! The node's file system as the installer sees it on Windows: the
//! system drive (`C:\`) on the node itself, or a test directory standing in
//! for it. Paths are kept as the kubelet sees them (`c:\k\...`, or
//! `/etc/...` for what is shared with Linux) and resolved only through
//! this type, below its root.
//!
//! Windows links (symbolic links and junctions) are **refused** anywhere
//! in a path, never followed: on a node, nothing the installer touches
//! (`c:\k`, `c:\var\lib\kubelet`) is a link, and refusing is the simple
//! way to be sure a write stays inside the root. Writes go to an
//! unpredictable name beside the target (`CREATE_NEW`), are flushed, and
//! renamed over it; a private mode (no group or other bits) gets the
//! private DACL, any other the folder's inherited one (the Windows
//! equivalent of the 0644 and 0755 the Linux installer writes).

use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use super::super::{Create, Open};
use crate::platform::found::{Existing, Identity, Kind, Opened};

/// The Windows primitives under [`Host`](crate::platform::Host): the root folder, every path
/// checked component by component below it.
#[derive(Debug)]
pub(crate) struct Root {
    root: PathBuf,
}

fn refused(path: &Path) -> std::io::Error {
    std::io::Error::other(format!(
        "{} is a symbolic link or junction, which node install does not follow on Windows",
        path.display()
    ))
}

fn kind_of(meta: &std::fs::Metadata) -> Kind {
    let kind = meta.file_type();
    if kind.is_symlink() {
        Kind::Symlink
    } else if kind.is_dir() {
        Kind::Dir
    } else if kind.is_file() {
        Kind::File
    } else {
        Kind::Other
    }
}

impl Root {
    /// Opens `root` (a folder) as the node's system drive.
    pub(crate) fn open(root: &Path) -> std::io::Result<Root> {
        let meta = std::fs::symlink_metadata(root)?;
        if !meta.is_dir() {
            return Err(std::io::Error::other(format!(
                "{} is not a folder",
                root.display()
            )));
        }
        Ok(Root {
            root: root.to_path_buf(),
        })
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn try_clone(&self) -> std::io::Result<Root> {
        Ok(Root {
            root: self.root.clone(),
        })
    }

    /// Whether the root is this machine's own system drive.
    pub(crate) fn is_local(&self) -> bool {
        let shown = self.root.to_string_lossy().to_ascii_lowercase();
        shown == "c:\\" || shown == "c:/" || shown == "\\" || shown == "/"
    }

    /// The names below the root `path` stands for: drive and root dropped,
    /// `..` never above the root.
    fn below_root(path: &Path) -> Vec<OsString> {
        let mut names: Vec<OsString> = Vec::new();
        for component in path.components() {
            match component {
                Component::Normal(n) => names.push(n.to_os_string()),
                Component::ParentDir => {
                    names.pop();
                }
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
        names
    }

    /// The local path of `path`, checking every component on the way:
    /// a link anywhere is refused, and so is a link in the last component
    /// unless `last_may_be_link` (to report it, or replace it).
    fn walk(&self, path: &Path, last_may_be_link: bool) -> std::io::Result<PathBuf> {
        self.walk_as(path, last_may_be_link, false)
    }

    /// [`Root::walk`] for a write: with `trusted`, every folder passed
    /// through below the root must be owned by SYSTEM, Administrators or
    /// us, with a DACL that lets no other account write it ([`untrusted`]).
    fn walk_as(
        &self,
        path: &Path,
        last_may_be_link: bool,
        trusted: bool,
    ) -> std::io::Result<PathBuf> {
        let names = Self::below_root(path);
        let mut here = self.root.clone();
        let count = names.len();
        for (n, name) in names.into_iter().enumerate() {
            here.push(name);
            match std::fs::symlink_metadata(&here) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    if n + 1 == count && last_may_be_link {
                        return Ok(here);
                    }
                    return Err(refused(path));
                }
                Ok(meta) if n + 1 < count && !meta.is_dir() => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::NotADirectory,
                        format!("{} is not a folder", here.display()),
                    ));
                }
                Ok(_) if trusted && n + 1 < count => untrusted(&here)?,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    // The rest does not exist yet. (Joining an empty rest
                    // would add a trailing `\`, which CreateFileW refuses.)
                    let rest = path_rest(path, n + 1);
                    if rest.as_os_str().is_empty() {
                        return Ok(here);
                    }
                    return Ok(here.join(rest));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(here)
    }

    fn kind_at(&self, path: &Path, link_ok: bool) -> Option<Kind> {
        let local = self.walk(path, link_ok).ok()?;
        std::fs::symlink_metadata(local).ok().map(|m| kind_of(&m))
    }

    /// What `path` names. A link anywhere makes it unusable: `None`.
    pub(crate) fn kind(&self, path: &Path) -> Option<Kind> {
        self.kind_at(path, false)
    }

    /// What `path` names itself (a link is a link).
    pub(crate) fn kind_no_follow(&self, path: &Path) -> Option<Kind> {
        self.kind_at(path, true)
    }

    /// Volume and file index of what `path` names.
    pub(crate) fn identity(&self, path: &Path) -> Option<Identity> {
        let local = self.walk(path, false).ok()?;
        super::id_of(&local).ok()
    }

    /// The path in this process's view that names host path `path`.
    pub(crate) fn local(&self, path: &Path) -> std::io::Result<PathBuf> {
        self.walk(path, false)
    }

    /// The target of the link `path`.
    pub(crate) fn read_link(&self, path: &Path) -> Option<PathBuf> {
        let local = self.walk(path, true).ok()?;
        std::fs::read_link(local).ok()
    }

    /// Checks that only SYSTEM, Administrators (or the account running
    /// us) control where a write of `path` lands: every existing folder
    /// below the root on the way ([`untrusted`]). What does not exist yet
    /// would be created with the folder's inherited DACL.
    pub(crate) fn check_place(&self, path: &Path) -> std::io::Result<()> {
        match self.walk_as(path, true, true) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
            Ok(_) => Ok(()),
        }
    }

    /// Opens regular file `path` for reading, never through a link.
    fn open_regular(&self, path: &Path) -> std::io::Result<Option<(File, super::super::Facts)>> {
        let local = match self.walk(path, false) {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let file = match super::open(&local, &Open::read().no_follow()) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if super::is_refused_link(&e) => return Err(refused(path)),
            Err(e) => return Err(e),
        };
        let facts = super::facts(&file)?;
        if !facts.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("it is {}, not a regular file", facts.described),
            ));
        }
        Ok(Some((file, facts)))
    }

    /// Regular file `path` opened for reading, never through a link.
    /// `Ok(None)`: it does not exist. Its mode is 0600 for a private file,
    /// 0644 for any other: the mode a Linux install would record, so that
    /// a restore writes the same DACL kind.
    pub(crate) fn open_file(&self, path: &Path) -> std::io::Result<Option<Opened>> {
        Ok(self.open_regular(path)?.map(|(file, facts)| Opened {
            file,
            len: facts.len,
            mode: if facts.access.shared { 0o644 } else { 0o600 },
        }))
    }

    /// Regular file `path` opened for reading, only if it is a file the
    /// plugin itself would have written: SYSTEM's, Administrators' or
    /// ours, writable by nobody else, one hard link.
    pub(crate) fn open_own(&self, path: &Path) -> std::io::Result<Option<Opened>> {
        let Some((file, facts)) = self.open_regular(path)? else {
            return Ok(None);
        };
        let me = super::running_owner()?;
        if !(facts.owner == me || facts.owner.is_administrator())
            || facts.access.others_write
            || facts.links != 1
        {
            return Err(std::io::Error::other(format!(
                "it is not a file the plugin writes ({}, {}, {} links): not read",
                facts.owner,
                facts.access.shown(),
                facts.links
            )));
        }
        Ok(Some(Opened {
            file,
            len: facts.len,
            mode: if facts.access.shared { 0o644 } else { 0o600 },
        }))
    }

    /// The entries of folder `path`, each with what it is itself, sorted.
    pub(crate) fn read_dir(&self, path: &Path) -> std::io::Result<Vec<(OsString, Kind)>> {
        let local = self.walk(path, false)?;
        let mut out = Vec::new();
        for entry in std::fs::read_dir(local)? {
            let entry = entry?;
            let kind = std::fs::symlink_metadata(entry.path())
                .map(|m| kind_of(&m))
                .unwrap_or(Kind::Other);
            out.push((entry.file_name(), kind));
        }
        out.sort();
        Ok(out)
    }

    /// Creates folder `path` and its missing parents (inherited DACLs).
    pub(crate) fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        let mut done = PathBuf::new();
        for name in Self::below_root(path) {
            done.push(&name);
            let local = self.walk_as(&done, false, true)?;
            match std::fs::symlink_metadata(&local) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::AlreadyExists,
                        format!("{} is not a folder", done.display()),
                    ));
                }
                Err(_) => match std::fs::create_dir(&local) {
                    Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
                    _ => {}
                },
            }
        }
        Ok(())
    }

    /// The local path of `path`'s folder (created if missing) and of the
    /// file itself (which may be a link, to be replaced).
    fn place(&self, path: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
        let names = Self::below_root(path);
        if names.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a file name",
            ));
        }
        if let Some(parent) = path.parent() {
            self.create_dir_all(parent)?;
        }
        let local = self.walk_as(path, true, true)?;
        let dir = local
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| self.root.clone());
        Ok((dir, local))
    }

    fn temp_file(dir: &Path, target: &Path, bytes: &[u8], mode: u32) -> std::io::Result<PathBuf> {
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{name}.wicp-{}", crate::platform::random_hex(8)));
        let result = (|| {
            let mut file = super::open(&tmp, &Open::create_new(mode))?;
            file.write_all(bytes)?;
            file.sync_all()
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(tmp)
    }

    pub(crate) fn put(
        &self,
        path: &Path,
        bytes: &[u8],
        mode: u32,
        existing: Existing,
    ) -> std::io::Result<bool> {
        let (dir, local) = self.place(path)?;
        if existing == Existing::Keep && std::fs::symlink_metadata(&local).is_ok() {
            return Ok(false);
        }
        let tmp = Self::temp_file(&dir, &local, bytes, mode)?;
        let moved = if existing == Existing::Replace {
            super::rename(&tmp, &local)
        } else {
            // A hard link fails if the name exists: "only if nothing is
            // there" without a window.
            std::fs::hard_link(&tmp, &local).and_then(|()| std::fs::remove_file(&tmp))
        };
        match moved {
            Ok(()) => Ok(true),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                if existing == Existing::Keep && e.kind() == std::io::ErrorKind::AlreadyExists {
                    Ok(false)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Makes `path` a symbolic link to `target` (SYSTEM holds the
    /// privilege to create one).
    pub(crate) fn symlink(
        &self,
        path: &Path,
        target: &Path,
        existing: Existing,
    ) -> std::io::Result<bool> {
        let (dir, local) = self.place(path)?;
        if std::fs::symlink_metadata(&local).is_ok() {
            if existing == Existing::Keep {
                return Ok(false);
            }
            let tmp = dir.join(format!(".wicp-link-{}", crate::platform::random_hex(8)));
            std::os::windows::fs::symlink_file(target, &tmp)?;
            return super::rename(&tmp, &local).map(|()| true);
        }
        std::os::windows::fs::symlink_file(target, &local).map(|()| true)
    }

    /// Removes file or link `path`. `Ok(false)`: nothing was there.
    pub(crate) fn remove(&self, path: &Path) -> std::io::Result<bool> {
        let local = match self.walk(path, true) {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        match std::fs::remove_file(&local) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes folder `path` if it is empty. `Ok(false)`: it is not there,
    /// or not empty.
    pub(crate) fn remove_dir(&self, path: &Path) -> std::io::Result<bool> {
        let local = match self.walk(path, false) {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        if !std::fs::symlink_metadata(&local).is_ok_and(|m| m.is_dir()) {
            return Ok(false);
        }
        match std::fs::remove_dir(&local) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Takes an exclusive lock on `path` (created private), waiting at
    /// most `wait` (`LockFileEx` through std).
    pub(crate) fn lock(&self, path: &Path, wait: Duration) -> std::io::Result<File> {
        let (_, local) = self.place(path)?;
        let file = super::open(
            &local,
            &Open {
                create: Create::IfMissing,
                ..Open::read_write()
            },
        )
        .map_err(|e| {
            if super::is_refused_link(&e) {
                refused(path)
            } else {
                e
            }
        })?;
        let deadline = Instant::now() + wait;
        loop {
            match file.try_lock() {
                Ok(()) => {
                    let held = super::facts(&file)?.id;
                    if super::id_of(&local).ok() == Some(held) {
                        return Ok(file);
                    }
                    return self.lock(path, deadline.saturating_duration_since(Instant::now()));
                }
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::WouldBlock,
                        format!(
                            "another node install or uninstall held it for {}s",
                            wait.as_secs()
                        ),
                    ));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(e),
            }
        }
    }
}

/// Why the folder at `local` may not be passed through on the way to a
/// write: another account owns it, or its DACL lets another account
/// write it. `PermissionDenied`, with the folder, the owner or the DACL.
fn untrusted(local: &Path) -> std::io::Result<()> {
    let facts = super::facts_at(local)?;
    let running = super::running_owner()?;
    let why = if !facts.owner.is_admin_or(&running) {
        format!(
            "{} is owned by {}, neither SYSTEM nor Administrators: that account could swap what is written in it",
            local.display(),
            facts.owner
        )
    } else if facts.access.others_write {
        format!(
            "{} has {}: those accounts could swap what is written in it",
            local.display(),
            facts.access.shown()
        )
    } else {
        return Ok(());
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        why,
    ))
}

/// The components of `path` from the `skip`th one below the root on.
fn path_rest(path: &Path, skip: usize) -> PathBuf {
    Root::below_root(path).into_iter().skip(skip).collect()
}
