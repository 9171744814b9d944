//! The node's file system as seen from here: `/` on the node itself, or a
//! mounted host root (`--root /host` in a DaemonSet, an image being built,
//! a test directory). Paths are kept as the kubelet sees them (absolute,
//! host-side) and are resolved only through this type.
//!
//! Resolution has chroot semantics, because a tenant or a stale link must
//! never steer a root-owned write outside the node's tree: the walk starts
//! at a descriptor of the root and opens one component at a time with
//! `O_PATH | O_NOFOLLOW`; a symbolic link is read and its target walked
//! again from the root when it is absolute, from the current directory when
//! it is relative; `..` never climbs above the root (it pops the walk's own
//! stack of descriptors, it is never handed to the kernel). That is what
//! `openat2(RESOLVE_IN_ROOT)` does, written as a walk so that it also works
//! on kernels before 5.6 (Ubuntu 20.04's 5.4), and what the kubelet itself
//! sees: on the host, `/usr/bin` in an absolute link is the host's own.
//!
//! Writes never follow a link in the last component: a file is created
//! under an unpredictable name with `O_CREAT | O_EXCL | O_NOFOLLOW`, given
//! its mode with `fchmod` (so the umask plays no part), synced, and renamed
//! over the target in the same directory, whose descriptor came from the
//! walk. Directories are created 0755 the same way.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, RenameFlags, Stat};
use rustix::io::Errno;

use crate::platform::found::{Existing, Identity, Kind, Opened};

/// Most symbolic links one resolution follows (Linux's own limit).
const MAX_LINKS: u32 = 40;

/// The Linux primitives under [`Host`](crate::platform::Host): a descriptor of the root, and
/// every path walked from it.
#[derive(Debug)]
pub(crate) struct Root {
    root: PathBuf,
    dir: OwnedFd,
}

impl Kind {
    fn of(stat: &Stat) -> Kind {
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => Kind::File,
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            _ => Kind::Other,
        }
    }

    fn describe(stat: &Stat) -> &'static str {
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => "a regular file",
            FileType::Directory => "a directory",
            FileType::Symlink => "a symbolic link",
            FileType::Fifo => "a FIFO",
            FileType::Socket => "a socket",
            FileType::CharacterDevice => "a character device",
            FileType::BlockDevice => "a block device",
            FileType::Unknown => "an unknown kind of file",
        }
    }
}

/// The end of a walk: the directory holding the last component, its name,
/// and what is there (none: nothing yet).
struct Walked {
    parent: OwnedFd,
    /// The real path of `parent` below the root, no link in it.
    parent_path: PathBuf,
    name: OsString,
    found: Option<(OwnedFd, Stat)>,
}

fn io(e: Errno) -> std::io::Error {
    std::io::Error::from(e)
}

fn components(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

fn random_suffix() -> String {
    crate::platform::random_hex(8)
}

impl Root {
    /// Opens `root` (a directory) as the node's `/`.
    pub(crate) fn open(root: &Path) -> std::io::Result<Root> {
        let dir = rustix::fs::open(
            root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io)?;
        Ok(Root {
            root: root.to_path_buf(),
            dir,
        })
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Another handle on the same root.
    pub(crate) fn try_clone(&self) -> std::io::Result<Root> {
        Ok(Root {
            root: self.root.clone(),
            dir: self.dir.try_clone()?,
        })
    }

    /// Whether the root is this machine's own `/`.
    pub(crate) fn is_local(&self) -> bool {
        self.root == Path::new("/")
    }

    /// Walks `path` inside the root. With `follow_last`, a link in the last
    /// component is followed too.
    fn walk(&self, path: &Path, follow_last: bool) -> std::io::Result<Walked> {
        self.walk_as(path, follow_last, false)
    }

    /// [`Root::walk`] for a write: with `trusted`, every directory passed
    /// through below the root must be root's (or ours) and writable by no
    /// one else, and every link followed must be root's (or ours):
    /// otherwise another user could swap what is written there, or where
    /// it goes ([`untrusted`]).
    fn walk_as(&self, path: &Path, follow_last: bool, trusted: bool) -> std::io::Result<Walked> {
        let root = self.dir.try_clone()?;
        let mut dirs: Vec<(OwnedFd, OsString)> = vec![(root, OsString::new())];
        let mut todo = components(path);
        let mut links = 0;
        let here = |dirs: &[(OwnedFd, OsString)]| -> PathBuf {
            let mut p = PathBuf::from("/");
            for (_, name) in dirs.iter().skip(1) {
                p.push(name);
            }
            p
        };
        while let Some(name) = todo.pop_front() {
            let last = todo.is_empty();
            if name == ".." {
                if dirs.len() > 1 {
                    dirs.pop();
                }
                if last {
                    break;
                }
                continue;
            }
            let Some((top, _)) = dirs.last() else {
                return Err(std::io::Error::other("empty walk"));
            };
            let opened = rustix::fs::openat(
                top,
                name.as_os_str(),
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            );
            let fd = match opened {
                Ok(fd) => fd,
                Err(Errno::NOENT) if last => {
                    return Ok(Walked {
                        parent: top.try_clone()?,
                        parent_path: here(&dirs),
                        name,
                        found: None,
                    });
                }
                Err(e) => return Err(io(e)),
            };
            let stat = rustix::fs::fstat(&fd).map_err(io)?;
            let kind = Kind::of(&stat);
            let passed =
                kind == Kind::Symlink && (!last || follow_last) || kind == Kind::Dir && !last;
            if trusted && passed {
                untrusted(&here(&dirs).join(&name), &stat)?;
            }
            if kind == Kind::Symlink && (!last || follow_last) {
                links += 1;
                if links > MAX_LINKS {
                    return Err(io(Errno::LOOP));
                }
                let target = rustix::fs::readlinkat(&fd, "", Vec::new()).map_err(io)?;
                let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
                if target.is_absolute() {
                    dirs.truncate(1);
                }
                let mut next = components(&target);
                next.extend(todo);
                todo = next;
                if todo.is_empty() {
                    break;
                }
                continue;
            }
            if last {
                return Ok(Walked {
                    parent: top.try_clone()?,
                    parent_path: here(&dirs),
                    name,
                    found: Some((fd, stat)),
                });
            }
            if kind != Kind::Dir {
                return Err(io(Errno::NOTDIR));
            }
            dirs.push((fd, name));
        }
        // The path names a directory on the stack (the root, or after `..`).
        let path = here(&dirs);
        let (top, _) = dirs
            .pop()
            .ok_or_else(|| std::io::Error::other("empty walk"))?;
        let stat = rustix::fs::fstat(&top).map_err(io)?;
        let parent = match dirs.last() {
            Some((fd, _)) => fd.try_clone()?,
            None => top.try_clone()?,
        };
        Ok(Walked {
            parent,
            parent_path: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            name: path
                .file_name()
                .map(OsStr::to_os_string)
                .unwrap_or_default(),
            found: Some((top, stat)),
        })
    }

    /// What `path` names, following links. `None`: nothing there.
    pub(crate) fn kind(&self, path: &Path) -> Option<Kind> {
        let w = self.walk(path, true).ok()?;
        w.found.map(|(_, s)| Kind::of(&s))
    }

    /// What `path` names itself (a link is a link).
    pub(crate) fn kind_no_follow(&self, path: &Path) -> Option<Kind> {
        let w = self.walk(path, false).ok()?;
        w.found.map(|(_, s)| Kind::of(&s))
    }

    /// Device and inode of what `path` names, following links.
    pub(crate) fn identity(&self, path: &Path) -> Option<Identity> {
        let w = self.walk(path, true).ok()?;
        w.found.map(|(_, s)| (s.st_dev, s.st_ino))
    }

    /// The real host path `path` resolves to (no link left in it).
    pub(crate) fn resolve(&self, path: &Path) -> std::io::Result<PathBuf> {
        let w = self.walk(path, true)?;
        Ok(w.parent_path.join(w.name))
    }

    /// A path in this process's own mount namespace that names the same
    /// file as host path `path` (links resolved inside the root), for tools
    /// that take a path: check-config's staged copy, an exec.
    pub(crate) fn local(&self, path: &Path) -> std::io::Result<PathBuf> {
        let real = self.resolve(path)?;
        Ok(self
            .root
            .join(real.strip_prefix("/").unwrap_or(real.as_path())))
    }

    /// The target of the link `path` (its last component not followed).
    pub(crate) fn read_link(&self, path: &Path) -> Option<PathBuf> {
        let w = self.walk(path, false).ok()?;
        let (fd, stat) = w.found?;
        if Kind::of(&stat) != Kind::Symlink {
            return None;
        }
        let target = rustix::fs::readlinkat(&fd, "", Vec::new()).ok()?;
        Some(PathBuf::from(OsStr::from_bytes(target.as_bytes())))
    }

    /// Checks that only root (or the user running us) controls where a
    /// write of `path` lands: every existing directory below the root on
    /// the way to it, and every link followed there ([`untrusted`]). What
    /// does not exist yet would be created root's, 0755. Install calls it
    /// for every path it will write before writing anything; the writes
    /// check again as they go.
    pub(crate) fn check_place(&self, path: &Path) -> std::io::Result<()> {
        match self.walk_as(path, false, true) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
            Ok(_) => Ok(()),
        }
    }

    /// Regular file `path` opened for reading (links followed inside the
    /// root). `Ok(None)`: it does not exist. A FIFO, device, socket or
    /// directory is an error without being opened for reading, so it can
    /// neither block nor be read for ever.
    pub(crate) fn open_file(&self, path: &Path) -> std::io::Result<Option<Opened>> {
        Ok(self.open_regular(path)?.map(|(file, stat)| Opened {
            file,
            len: u64::try_from(stat.st_size).unwrap_or(u64::MAX),
            mode: stat.st_mode & 0o7777,
        }))
    }

    /// Opens regular file `path` for reading (links followed inside the
    /// root), checking that what was opened is what was looked at.
    fn open_regular(
        &self,
        path: &Path,
    ) -> std::io::Result<Option<(std::fs::File, rustix::fs::Stat)>> {
        let w = match self.walk(path, true) {
            Ok(w) => w,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some((_, stat)) = w.found else {
            return Ok(None);
        };
        if Kind::of(&stat) != Kind::File {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("it is {}, not a regular file", Kind::describe(&stat)),
            ));
        }
        let fd = rustix::fs::openat(
            &w.parent,
            w.name.as_os_str(),
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io)?;
        let opened = rustix::fs::fstat(&fd).map_err(io)?;
        if (opened.st_dev, opened.st_ino) != (stat.st_dev, stat.st_ino) {
            return Err(std::io::Error::other(
                "it was replaced while being read; run again",
            ));
        }
        Ok(Some((std::fs::File::from(fd), opened)))
    }

    /// Regular file `path` opened for reading, only if it is a file the
    /// plugin itself would have written there: root's or ours, writable by
    /// nobody else, one hard link. What a tenant could have planted or
    /// edited is refused, not read.
    pub(crate) fn open_own(&self, path: &Path) -> std::io::Result<Option<Opened>> {
        let Some((file, opened)) = self.open_regular(path)? else {
            return Ok(None);
        };
        let me = rustix::process::geteuid().as_raw();
        if !(opened.st_uid == 0 || opened.st_uid == me)
            || opened.st_mode & 0o022 != 0
            || opened.st_nlink != 1
        {
            return Err(std::io::Error::other(format!(
                "it is not a file the plugin writes (uid {}, mode {:04o}, {} links; the plugin's are root's, writable only by it, one link): not read",
                opened.st_uid,
                opened.st_mode & 0o7777,
                opened.st_nlink
            )));
        }
        Ok(Some(Opened {
            file,
            len: u64::try_from(opened.st_size).unwrap_or(0),
            mode: opened.st_mode & 0o7777,
        }))
    }

    /// The entries of directory `path` (links followed inside the root),
    /// each with what it is itself (a link is a link), sorted by name.
    pub(crate) fn read_dir(&self, path: &Path) -> std::io::Result<Vec<(OsString, Kind)>> {
        let w = self.walk(path, true)?;
        let Some((fd, stat)) = w.found else {
            return Err(io(Errno::NOENT));
        };
        if Kind::of(&stat) != Kind::Dir {
            return Err(io(Errno::NOTDIR));
        }
        let dir = rustix::fs::openat(
            &fd,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(io)?;
        let mut out = Vec::new();
        let mut entries = rustix::fs::Dir::new(dir).map_err(io)?;
        while let Some(entry) = entries.read() {
            let entry = entry.map_err(io)?;
            let name = OsStr::from_bytes(entry.file_name().to_bytes()).to_os_string();
            if name == "." || name == ".." {
                continue;
            }
            let kind = rustix::fs::statat(&fd, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
                .map(|s| Kind::of(&s))
                .unwrap_or(Kind::Other);
            out.push((name, kind));
        }
        out.sort();
        Ok(out)
    }

    /// Creates directory `path` and its missing parents, each 0755
    /// whatever the umask; existing ones are left as they are.
    pub(crate) fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        let mut done = PathBuf::from("/");
        for name in components(path) {
            done.push(&name);
            let w = self.walk_as(&done, true, true)?;
            match w.found {
                Some((_, stat)) if Kind::of(&stat) == Kind::Dir => continue,
                Some((_, stat)) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::AlreadyExists,
                        format!(
                            "{} is {}, not a directory",
                            done.display(),
                            Kind::describe(&stat)
                        ),
                    ));
                }
                None => {
                    match rustix::fs::mkdirat(
                        &w.parent,
                        w.name.as_os_str(),
                        Mode::from_raw_mode(0o700),
                    ) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(io(e)),
                    }
                    let dir = rustix::fs::openat(
                        &w.parent,
                        w.name.as_os_str(),
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(io)?;
                    rustix::fs::fchmod(&dir, Mode::from_raw_mode(0o755)).map_err(io)?;
                }
            }
        }
        Ok(())
    }

    /// The directory that will hold `path` (created 0755 if missing) and
    /// the last component's name.
    fn parent_of(&self, path: &Path) -> std::io::Result<(OwnedFd, OsString)> {
        let parent = path.parent().unwrap_or(Path::new("/"));
        self.create_dir_all(parent)?;
        let w = self.walk_as(path, false, true)?;
        if w.name.is_empty() || w.name == ".." {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a file name",
            ));
        }
        Ok((w.parent, w.name))
    }

    /// A new file under an unpredictable name in `dir`, filled and synced
    /// with `mode`. Returns its name.
    fn temp_file(
        dir: &OwnedFd,
        name: &OsStr,
        bytes: &[u8],
        mode: u32,
    ) -> std::io::Result<OsString> {
        let mut tmp = OsString::from(".");
        tmp.push(name);
        tmp.push(format!(".wicp-{}", random_suffix()));
        let fd = rustix::fs::openat(
            dir,
            tmp.as_os_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(io)?;
        let result = (|| {
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(io)?;
            let mut file = std::fs::File::from(fd);
            file.write_all(bytes)?;
            file.sync_all()
        })();
        if let Err(e) = result {
            let _ = rustix::fs::unlinkat(dir, tmp.as_os_str(), AtFlags::empty());
            return Err(e);
        }
        Ok(tmp)
    }

    fn sync_dir(dir: &OwnedFd) {
        if let Ok(d) = rustix::fs::openat(
            dir,
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            let _ = rustix::fs::fsync(&d);
        }
    }

    pub(crate) fn put(
        &self,
        path: &Path,
        bytes: &[u8],
        mode: u32,
        existing: Existing,
    ) -> std::io::Result<bool> {
        let (dir, name) = self.parent_of(path)?;
        let tmp = Self::temp_file(&dir, &name, bytes, mode)?;
        Self::rename_into(&dir, &tmp, &name, existing)
    }

    /// Renames `tmp` to `name` in `dir` (only if nothing is there, with
    /// [`Existing::Keep`]: `Ok(false)` then), syncs the directory, and removes `tmp`
    /// when the rename fails.
    fn rename_into(
        dir: &OwnedFd,
        tmp: &OsStr,
        name: &OsStr,
        existing: Existing,
    ) -> std::io::Result<bool> {
        let flags = if existing == Existing::Replace {
            RenameFlags::empty()
        } else {
            RenameFlags::NOREPLACE
        };
        match rustix::fs::renameat_with(dir, tmp, dir, name, flags) {
            Ok(()) => {
                Self::sync_dir(dir);
                Ok(true)
            }
            Err(e) => {
                let _ = rustix::fs::unlinkat(dir, tmp, AtFlags::empty());
                if e == Errno::EXIST && existing == Existing::Keep {
                    Ok(false)
                } else {
                    Err(io(e))
                }
            }
        }
    }

    /// Makes `path` a symbolic link to `target`, atomically (replacing
    /// what is there, or only if nothing is: `existing`).
    pub(crate) fn symlink(
        &self,
        path: &Path,
        target: &Path,
        existing: Existing,
    ) -> std::io::Result<bool> {
        let (dir, name) = self.parent_of(path)?;
        let mut tmp = OsString::from(".");
        tmp.push(&name);
        tmp.push(format!(".wicp-{}", random_suffix()));
        rustix::fs::symlinkat(target, &dir, tmp.as_os_str()).map_err(io)?;
        Self::rename_into(&dir, &tmp, &name, existing)
    }

    /// Removes file or link `path` (never what a link points to).
    /// `Ok(false)`: nothing was there.
    pub(crate) fn remove(&self, path: &Path) -> std::io::Result<bool> {
        let w = match self.walk(path, false) {
            Ok(w) => w,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        if w.found.is_none() {
            return Ok(false);
        }
        rustix::fs::unlinkat(&w.parent, w.name.as_os_str(), AtFlags::empty()).map_err(io)?;
        Self::sync_dir(&w.parent);
        Ok(true)
    }

    /// Removes directory `path` if it is empty (never through a link in its
    /// last component). `Ok(false)`: it is not there, or not empty.
    pub(crate) fn remove_dir(&self, path: &Path) -> std::io::Result<bool> {
        let w = match self.walk(path, false) {
            Ok(w) => w,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        match &w.found {
            Some((_, stat)) if Kind::of(stat) == Kind::Dir => {}
            _ => return Ok(false),
        }
        match rustix::fs::unlinkat(&w.parent, w.name.as_os_str(), AtFlags::REMOVEDIR) {
            Ok(()) => {
                Self::sync_dir(&w.parent);
                Ok(true)
            }
            Err(Errno::NOTEMPTY | Errno::EXIST | Errno::NOENT) => Ok(false),
            Err(e) => Err(io(e)),
        }
    }

    /// Takes an exclusive lock on `path` (created 0600), waiting at most
    /// `wait`. The lock lasts as long as the returned descriptor.
    pub(crate) fn lock(&self, path: &Path, wait: Duration) -> std::io::Result<std::fs::File> {
        let (dir, name) = self.parent_of(path)?;
        let fd = rustix::fs::openat(
            &dir,
            name.as_os_str(),
            OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(io)?;
        let stat = rustix::fs::fstat(&fd).map_err(io)?;
        if Kind::of(&stat) != Kind::File {
            return Err(std::io::Error::other(format!(
                "the lock file is {}",
                Kind::describe(&stat)
            )));
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o600)).map_err(io)?;
        let deadline = Instant::now() + wait;
        loop {
            match rustix::fs::flock(fd.as_fd(), FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {
                    // The holder before us may have removed the file as it
                    // let go: then this lock is on a file no one else sees.
                    let held = rustix::fs::fstat(&fd).map_err(io)?;
                    let now = self
                        .walk(path, false)?
                        .found
                        .map(|(_, s)| (s.st_dev, s.st_ino));
                    if now == Some((held.st_dev, held.st_ino)) {
                        return Ok(std::fs::File::from(fd));
                    }
                    return self.lock(path, deadline.saturating_duration_since(Instant::now()));
                }
                Err(Errno::WOULDBLOCK) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(Errno::WOULDBLOCK) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::WouldBlock,
                        format!(
                            "another node install or uninstall held it for {}s",
                            wait.as_secs()
                        ),
                    ));
                }
                Err(e) => return Err(io(e)),
            }
        }
    }
}

/// Why the directory or link at `path` (what `stat` says of it) may not
/// be passed through on the way to a write: another user owns it, or may
/// write it (a group or others; sticky or not, as no installed path needs
/// one). `PermissionDenied`, with the path, the owner or mode, and the
/// fix.
fn untrusted(path: &Path, stat: &Stat) -> std::io::Result<()> {
    let me = rustix::process::geteuid().as_raw();
    let mode = stat.st_mode & 0o7777;
    let kind = Kind::describe(stat);
    let why = if stat.st_uid != 0 && stat.st_uid != me {
        format!(
            "{} ({kind}) is owned by uid {}, not root: that user could swap what is written below it",
            path.display(),
            stat.st_uid
        )
    } else if Kind::of(stat) == Kind::Dir && mode & 0o022 != 0 {
        format!(
            "{} ({kind}, mode {mode:04o}) may be written by its group or other users: they could swap what is written in it",
            path.display()
        )
    } else {
        return Ok(());
    };
    Err(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        why,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::Host;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn host() -> (tempfile::TempDir, Host) {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::open(dir.path()).unwrap();
        (dir, host)
    }

    #[test]
    fn absolute_links_resolve_inside_the_root() {
        let (dir, host) = host();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("real/kubernetes")).unwrap();
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        // An absolute link: on the host it means the host's /real.
        std::os::unix::fs::symlink("/real/kubernetes", dir.path().join("etc/kubernetes")).unwrap();
        // A link that tries to climb out.
        std::os::unix::fs::symlink("../../../../..", dir.path().join("up")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        host.write(Path::new("/etc/kubernetes/c.yaml"), b"x", 0o644)
            .unwrap();
        assert_eq!(
            std::fs::read(dir.path().join("real/kubernetes/c.yaml")).unwrap(),
            b"x"
        );
        assert_eq!(
            host.local(Path::new("/up/etc/kubernetes/c.yaml")).unwrap(),
            dir.path().join("real/kubernetes/c.yaml")
        );
        // Inside the root, the link's target is the root's own copy of
        // that path: the write lands there or fails, never outside.
        std::fs::create_dir_all(dir.path().join(outside.path().strip_prefix("/").unwrap()))
            .unwrap();
        host.write(Path::new("/out/escaped"), b"y", 0o644).unwrap();
        assert!(!outside.path().join("escaped").exists());
        assert!(
            dir.path()
                .join(outside.path().strip_prefix("/").unwrap())
                .join("escaped")
                .exists()
        );
    }

    #[test]
    fn writes_replace_a_planted_link_and_ignore_the_umask() {
        let (dir, host) = host();
        let victim = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(victim.path(), b"keep").unwrap();
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        std::os::unix::fs::symlink(victim.path(), dir.path().join("etc/config.yaml")).unwrap();
        let old = rustix::process::umask(Mode::empty());
        let result = host.write(Path::new("/etc/config.yaml"), b"new", 0o644);
        let made = host.create_dir_all(Path::new("/a/b/c"));
        rustix::process::umask(old);
        result.unwrap();
        made.unwrap();
        assert_eq!(std::fs::read(victim.path()).unwrap(), b"keep");
        let meta = std::fs::symlink_metadata(dir.path().join("etc/config.yaml")).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.permissions().mode() & 0o7777, 0o644);
        for d in ["a", "a/b", "a/b/c"] {
            let m = std::fs::metadata(dir.path().join(d)).unwrap();
            assert_eq!(m.mode() & 0o7777, 0o755, "{d}");
        }
    }

    #[test]
    fn fifos_and_devices_are_refused_without_blocking() {
        let (dir, host) = host();
        let fifo = dir.path().join("fifo");
        crate::platform::test_support::mkfifo(&fifo);
        let err = host.read_file(Path::new("/fifo"), 1024).unwrap_err();
        assert!(err.to_string().contains("a FIFO"), "{err}");
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero")).unwrap();
        // Inside the root, /dev/zero does not exist.
        assert!(host.read_file(Path::new("/zero"), 1024).unwrap().is_none());
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; 2048]).unwrap();
        let err = host.read_file(Path::new("/big"), 1024).unwrap_err();
        assert!(err.to_string().contains("larger than 1024"), "{err}");
    }

    #[test]
    fn write_new_never_overwrites() {
        let (dir, host) = host();
        assert!(
            host.write_new(Path::new("/x.bak"), b"first", 0o600)
                .unwrap()
        );
        assert!(
            !host
                .write_new(Path::new("/x.bak"), b"second", 0o600)
                .unwrap()
        );
        assert_eq!(std::fs::read(dir.path().join("x.bak")).unwrap(), b"first");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left");
    }
}
