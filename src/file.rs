//! Reading a file an admin names (a kubelet config, a CA bundle, a client
//! secret, a cloud config) without letting the file decide how long that
//! takes: regular files only, bounded.
//!
//! The file is opened with `O_NONBLOCK`, so a FIFO put where a bundle was
//! expected does not wait for a writer, then checked with `fstat` on the
//! open descriptor (not a `stat` of the path, which could change between
//! the two), so a FIFO, a device such as `/dev/zero` or a directory is
//! refused before a byte is read, and a regular file is read to at most
//! `max` bytes.

use std::io::{self, Read};
use std::path::Path;

/// Why a file was not read.
#[derive(Debug)]
pub(crate) enum Refused {
    /// Opening or reading failed, or the path is not a regular file: why,
    /// as a clause ("it is a FIFO, not a regular file").
    Unreadable(String),
    /// Larger than the bound.
    TooLarge,
}

/// The bytes of the regular file at `path`, at most `max` of them.
pub(crate) fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>, Refused> {
    use std::os::unix::fs::OpenOptionsExt;
    let unreadable = |e: std::io::Error| Refused::Unreadable(e.to_string());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(unreadable)?;
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err(Refused::Unreadable(format!(
            "it is {}, not a regular file",
            describe(&meta.file_type())
        )));
    }
    if meta.len() > max {
        return Err(Refused::TooLarge);
    }
    read_at_most(file, max)
        .map_err(unreadable)?
        .ok_or(Refused::TooLarge)
}

/// Everything `reader` holds, unless that is more than `max` bytes
/// (`Ok(None)`): at most `max` + 1 bytes are read to tell.
pub(crate) fn read_at_most(reader: impl Read, max: u64) -> io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    reader.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok((u64::try_from(bytes.len()).unwrap_or(u64::MAX) <= max).then_some(bytes))
}

/// The effective user ID, which owns every file the plugin keeps (cache,
/// locks, metrics state, audit log). `geteuid(2)` through rustix's safe
/// wrapper: no file to read, unlike `/proc/self/status`.
pub(crate) fn running_uid() -> io::Result<u32> {
    Ok(rustix::process::geteuid().as_raw())
}

/// Makes a FIFO at `path`, for the tests of every reader that must refuse
/// one without blocking.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

fn describe(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_dir() {
        "a directory"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn refuses_a_fifo_a_device_and_a_directory_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        mkfifo(&fifo);
        let started = Instant::now();
        for (path, what) in [
            (fifo.as_path(), "a FIFO"),
            (Path::new("/dev/zero"), "a character device"),
            (dir.path(), "a directory"),
        ] {
            match read_regular(path, 1024) {
                Err(Refused::Unreadable(why)) => assert!(why.contains(what), "{why}"),
                other => panic!("{path:?}: {other:?}"),
            }
        }
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn reads_a_regular_file_up_to_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"12345").unwrap();
        assert_eq!(read_regular(&path, 5).unwrap(), b"12345");
        assert!(matches!(read_regular(&path, 4), Err(Refused::TooLarge)));
        assert!(matches!(
            read_regular(&dir.path().join("missing"), 4),
            Err(Refused::Unreadable(_))
        ));
    }
}
