//! The file handling metrics and audit share: a directory is used only when
//! it is really a directory that not everyone can write; our own files are
//! opened without following links and only when they are regular files we
//! own; a file others read (the `.prom`) is replaced whole by a rename.
//!
//! Every failure is a clause for one warning ("it is a symbolic link"),
//! never an error: observability never fails a pull.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::lock::{self, Acquired, KeyLock};

/// Checks that `dir` may hold our files: it exists, is a directory and not
/// a symbolic link to one, and is not writable by everyone (anyone could
/// then plant the files we read back).
pub(super) fn check_dir(dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => "the directory does not exist".to_string(),
        _ => format!("cannot inspect the directory: {e}"),
    })?;
    if meta.file_type().is_symlink() {
        return Err("the directory is a symbolic link, which is not followed".into());
    }
    if !meta.is_dir() {
        return Err("it is not a directory".into());
    }
    if meta.mode() & 0o002 != 0 {
        return Err(format!(
            "the directory is writable by everyone (mode {:04o})",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Takes the lock file `path` (created 0600, ours, never through a link),
/// waiting at most [`super::LOCK_WAIT`].
pub(super) fn lock(path: &Path, uid: u32) -> Result<KeyLock, String> {
    match lock::acquire(path, uid, Instant::now() + super::LOCK_WAIT) {
        Ok(Acquired::Held(held)) => Ok(held),
        Ok(Acquired::Busy) => Err(format!(
            "{} stayed locked for {}s",
            path.display(),
            super::LOCK_WAIT.as_secs()
        )),
        Err(e) => Err(format!("cannot lock {}: {e}", path.display())),
    }
}

/// Opens our own file at `path` with `options` plus `O_NOFOLLOW` and
/// `O_NONBLOCK`; refuses anything but a regular file owned by `uid` with
/// no group or other write bit. `Ok(None)`: there is no such file.
pub(super) fn open_own(
    path: &Path,
    options: &mut OpenOptions,
    uid: u32,
) -> io::Result<Option<File>> {
    let file = match options
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(io::Error::other(format!(
                "{} is a symbolic link",
                path.display()
            )));
        }
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(io::Error::other(format!(
            "{} is not a regular file owned by uid {uid} and writable only by it",
            path.display()
        )));
    }
    Ok(Some(file))
}

/// Opens (creating it 0600) our state file at `path` for reading and
/// rewriting in place.
pub(super) fn open_state(path: &Path, uid: u32) -> io::Result<File> {
    open_own(
        path,
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600),
        uid,
    )?
    .ok_or_else(|| io::Error::other("it vanished while being opened"))
}

/// Reads `file` from its start, at most `max` bytes.
pub(super) fn read_to_end(file: &mut File, max: u64) -> io::Result<Vec<u8>> {
    crate::file::read_at_most(file, max)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("it is larger than {max} bytes"),
        )
    })
}

/// Writes `bytes` over `file` from its start and cuts it to their length.
pub(super) fn overwrite(file: &mut File, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(bytes, 0)?;
    file.set_len(u64::try_from(bytes.len()).unwrap_or(u64::MAX))
}

/// Replaces `path` with `bytes`: a new file beside it (`O_EXCL`, `mode`),
/// put in place atomically ([`swap_into_place`]). A reader (node-exporter's
/// collector) sees the old file or the new one, never part of one; the
/// temporary name ends in `.tmp`, which the collector never reads. The
/// caller holds the directory's lock, so a temporary file already there was
/// left by a writer that was killed: it is removed first.
///
/// No fsync: the rename, not the sync, is what keeps a reader from a half
/// file; a sync only orders the data against a power loss, after which the
/// worst is an empty `.prom` (read as no metrics) until the next pull. It
/// cost each pull 0.25 ms of wall time on ext4 (docs/observability.md).
pub(super) fn replace(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let temp = temp_name(path);
    match std::fs::remove_file(&temp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)?;
        // The umask may have taken bits `mode` asked for (0644 for the
        // collector's user to read).
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        swap_into_place(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// Puts `temp` at `path` atomically. The two are exchanged
/// (`renameat2(RENAME_EXCHANGE)`) and the old file, now at `temp`, removed:
/// a plain rename over an existing file makes ext4 write the new file's
/// data out first (its `auto_da_alloc` heuristic), which cost every
/// invocation 0.2 ms of wall time. A file system without the exchange, or
/// no file at `path` yet, gets the plain rename.
fn swap_into_place(temp: &Path, path: &Path) -> io::Result<()> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    use rustix::io::Errno;
    match renameat_with(CWD, temp, CWD, path, RenameFlags::EXCHANGE) {
        Ok(()) => std::fs::remove_file(temp),
        Err(Errno::NOENT | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
            std::fs::rename(temp, path)
        }
        Err(e) => Err(e.into()),
    }
}

/// `.<name>.tmp` beside `path`: one name, since writers take turns under
/// the lock, so a killed writer leaves at most one file, which the next
/// one replaces.
fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_missing_symlinked_and_world_writable_directories() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("d");
        assert!(check_dir(&dir).unwrap_err().contains("does not exist"));
        std::fs::create_dir(&dir).unwrap();
        check_dir(&dir).unwrap();
        let link = root.path().join("l");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(check_dir(&link).unwrap_err().contains("symbolic link"));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(check_dir(&dir).unwrap_err().contains("everyone"));
        let file = root.path().join("f");
        std::fs::write(&file, b"").unwrap();
        assert!(check_dir(&file).unwrap_err().contains("not a directory"));
    }

    /// Our own file at `path`, read as the state is.
    fn read_own(path: &Path, uid: u32, max: u64) -> io::Result<Option<Vec<u8>>> {
        let Some(mut file) = open_own(path, OpenOptions::new().read(true), uid)? else {
            return Ok(None);
        };
        read_to_end(&mut file, max).map(Some)
    }

    #[test]
    fn a_state_is_rewritten_in_place_shorter_or_longer() {
        let dir = tempfile::tempdir().unwrap();
        let uid = crate::file::running_uid().unwrap();
        let path = dir.path().join("s");
        let mut f = open_state(&path, uid).unwrap();
        assert!(read_to_end(&mut f, 10).unwrap().is_empty());
        overwrite(&mut f, b"longer text").unwrap();
        drop(f);
        let mut f = open_state(&path, uid).unwrap();
        assert_eq!(read_to_end(&mut f, 100).unwrap(), b"longer text");
        overwrite(&mut f, b"short").unwrap();
        drop(f);
        assert_eq!(std::fs::read(&path).unwrap(), b"short");
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let mut f = open_state(&path, uid).unwrap();
        assert!(read_to_end(&mut f, 3).is_err());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(open_state(&link, uid).is_err());
    }

    #[test]
    fn own_files_only_and_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let uid = crate::file::running_uid().unwrap();
        let path = dir.path().join("x.prom");
        assert!(read_own(&path, uid, 10).unwrap().is_none());
        replace(&path, b"one", 0o644).unwrap();
        assert_eq!(read_own(&path, uid, 10).unwrap().unwrap(), b"one");
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o644
        );
        // A killed writer's leftover is replaced, not an error.
        std::fs::write(dir.path().join(".x.prom.tmp"), b"half").unwrap();
        replace(&path, b"two!", 0o600).unwrap();
        assert_eq!(read_own(&path, uid, 10).unwrap().unwrap(), b"two!");
        assert!(read_own(&path, uid, 3).is_err());
        // Nothing left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(read_own(&link, uid, 10).is_err());
        assert!(read_own(&path, uid.wrapping_add(1), 10).is_err());
        let fifo = dir.path().join("fifo");
        crate::file::mkfifo(&fifo);
        assert!(read_own(&fifo, uid, 10).is_err());
    }
}
