//! Reading a file an admin names (a kubelet config, a CA bundle, a client
//! secret, a cloud config) without letting the file decide how long that
//! takes: regular files only, bounded.
//!
//! The file is opened without blocking ([`platform::open`]: `O_NONBLOCK`
//! on Linux), so a FIFO put where a bundle was expected does not wait for
//! a writer, then checked on the open file (not a `stat` of the path,
//! which could change between the two), so a FIFO, a device such as
//! `/dev/zero` or a directory is refused before a byte is read, and a
//! regular file is read to at most `max` bytes.

use std::io::{self, Read};
use std::path::Path;

use crate::platform;

/// Why a file was not read.
#[derive(Debug)]
pub enum Refused {
    /// Opening or reading failed, or the path is not a regular file: why,
    /// as a clause ("it is a FIFO, not a regular file").
    Unreadable(String),
    /// Larger than the bound.
    TooLarge,
}

/// The bytes of the regular file at `path`, at most `max` of them.
pub fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>, Refused> {
    let (file, _) = open_regular(path, max)?;
    read_at_most(file, max)
        .map_err(unreadable)?
        .ok_or(Refused::TooLarge)
}

fn unreadable(e: std::io::Error) -> Refused {
    Refused::Unreadable(e.to_string())
}

/// Opens `path` without blocking and checks, on the open file, that it is
/// a regular file of at most `max` bytes.
fn open_regular(path: &Path, max: u64) -> Result<(std::fs::File, platform::Facts), Refused> {
    let file = platform::open(path, &platform::Open::read()).map_err(unreadable)?;
    let facts = platform::facts(&file).map_err(unreadable)?;
    if !facts.is_file() {
        return Err(Refused::Unreadable(format!(
            "it is {}, not a regular file",
            facts.described
        )));
    }
    if facts.len > max {
        return Err(Refused::TooLarge);
    }
    Ok((file, facts))
}

/// The bytes of a file holding a secret the admin gave (azure.json's
/// `aadClientSecret`, `--token-exchange-client-secret-file`), read as
/// [`read_regular`] reads, and checked by the rule the cache's files follow:
/// refused when another user could change it (owned by neither root nor
/// the plugin's user, or writable by a group or other users), because
/// whoever can change it chooses the identity every pull of the node uses.
/// Readable by others is a warning, not a refusal: the secret has already
/// leaked to them, and refusing would stop every pull on a node whose
/// layout a stock component chose. Returns the bytes and that warning.
pub fn read_secret(path: &Path, max: u64) -> Result<(Vec<u8>, Option<String>), Refused> {
    let (file, facts) = open_trusted(path, max, "the secret")?;
    let warning = facts.access.shared.then(|| {
        format!(
            "{} holds a secret and other users may read it ({}); make it readable by its owner only",
            path.display(),
            facts.access.shown()
        )
    });
    let bytes = read_at_most(file, max)
        .map_err(unreadable)?
        .ok_or(Refused::TooLarge)?;
    Ok((bytes, warning))
}

/// The bytes of a file the admin names as a trust anchor (`--ca-file`,
/// `SSL_CERT_FILE`, `--azure-identity-binding-ca`), read as
/// [`read_regular`] reads, and refused by the rule of [`read_secret`] when
/// another user could change it: whoever can write a CA file chooses whom
/// the plugin sends tokens to. Others may read it (certificates are
/// public).
pub fn read_trusted(path: &Path, max: u64) -> Result<Vec<u8>, Refused> {
    let (file, _) = open_trusted(path, max, "which certificate authorities are trusted")?;
    read_at_most(file, max)
        .map_err(unreadable)?
        .ok_or(Refused::TooLarge)
}

/// Checks `path` as [`read_trusted`] would, without opening it (a `stat`):
/// there, a regular file of at most `max` bytes, and no other user's to
/// change. [`read_trusted`] checks the file it opens again.
pub fn check_trusted(path: &Path, max: u64) -> Result<(), Refused> {
    let facts = platform::facts_followed(path).map_err(unreadable)?;
    if !facts.is_file() {
        return Err(Refused::Unreadable(format!(
            "it is {}, not a regular file",
            facts.described
        )));
    }
    if facts.len > max {
        return Err(Refused::TooLarge);
    }
    trusted_owner(&facts, "which certificate authorities are trusted")
}

/// The rule of [`open_trusted`] on `facts`.
fn trusted_owner(facts: &platform::Facts, what: &str) -> Result<(), Refused> {
    let running = platform::running_owner().map_err(unreadable)?;
    if !facts.owner.is_admin_or(&running) {
        return Err(Refused::Unreadable(format!(
            "it is owned by {}, neither root nor the plugin's user ({running}): that user could change {what}",
            facts.owner
        )));
    }
    if facts.access.others_write {
        return Err(Refused::Unreadable(format!(
            "other users may write it ({}): they could change {what}",
            facts.access.shown()
        )));
    }
    Ok(())
}

/// Opens `path` as [`open_regular`] does, and refuses it when another
/// user could change it: owned by neither root (SYSTEM, Administrators)
/// nor the plugin's user, or writable by a group or other users. `what`
/// says what that user would then choose.
fn open_trusted(
    path: &Path,
    max: u64,
    what: &str,
) -> Result<(std::fs::File, platform::Facts), Refused> {
    let (file, facts) = open_regular(path, max)?;
    trusted_owner(&facts, what)?;
    Ok((file, facts))
}

/// Why a directory may not hold the plugin's own files (the cache, the
/// metrics state, the audit log): whoever can change it can plant files we
/// read back, swap the ones we write, or erase evidence. One rule for the
/// three, as SECURITY.md states it.
#[derive(Debug, PartialEq, Eq)]
pub enum UnsafeDir {
    /// A symbolic link (or junction): whoever can change the link can
    /// redirect us.
    Link,
    NotADirectory,
    /// Owned by neither the user running the plugin nor the machine's
    /// administrator (root; SYSTEM or Administrators).
    Owner(platform::Owner),
    /// A group or another user may write it: the permissions, shown.
    Writable(String),
}

/// Checks `dir` (what [`platform::facts_at`] says of it) against the rule
/// of [`UnsafeDir`] for a plugin run by `running`.
pub fn check_own_dir(dir: &platform::Facts, running: &platform::Owner) -> Result<(), UnsafeDir> {
    if dir.is_link() {
        return Err(UnsafeDir::Link);
    }
    if !dir.is_dir() {
        return Err(UnsafeDir::NotADirectory);
    }
    if dir.owner != *running && !dir.owner.is_administrator() {
        return Err(UnsafeDir::Owner(dir.owner.clone()));
    }
    if dir.access.others_write {
        return Err(UnsafeDir::Writable(dir.access.shown()));
    }
    Ok(())
}

/// Everything `reader` holds, unless that is more than `max` bytes
/// (`Ok(None)`): at most `max` + 1 bytes are read to tell.
pub fn read_at_most(reader: impl Read, max: u64) -> io::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    reader.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok((u64::try_from(bytes.len()).unwrap_or(u64::MAX) <= max).then_some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn refuses_a_fifo_a_device_and_a_directory_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        crate::platform::test_support::mkfifo(&fifo);
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

    /// Round-4 item 15: a secret file (azure.json, the token-exchange
    /// client secret) follows the cache's rule: refused when another user
    /// could change it, a warning when others may read it, silent at 0600.
    #[test]
    fn a_secret_file_another_user_could_change_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, b"s3cret").unwrap();
        let mode =
            |m: u32| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(m)).unwrap();
        mode(0o600);
        assert_eq!(read_secret(&path, 100).unwrap(), (b"s3cret".to_vec(), None));
        mode(0o644);
        let (_, warning) = read_secret(&path, 100).unwrap();
        assert!(
            warning
                .unwrap()
                .contains("other users may read it (mode 0644)")
        );
        for m in [0o620, 0o602, 0o666] {
            mode(m);
            match read_secret(&path, 100) {
                Err(Refused::Unreadable(why)) => {
                    assert!(why.contains("other users may write it"), "{why}")
                }
                other => panic!("mode {m:o}: {other:?}"),
            }
        }
        mode(0o600);
        assert_eq!(
            platform::running_owner().unwrap().0,
            0,
            "this test chowns and must run as root"
        );
        std::os::unix::fs::chown(&path, Some(4242), None).unwrap();
        match read_secret(&path, 100) {
            Err(Refused::Unreadable(why)) => assert!(why.contains("owned by uid 4242"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
