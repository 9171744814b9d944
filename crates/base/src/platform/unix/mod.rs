//! The Linux (and other Unix) half of [`crate::platform`]: mode bits and
//! uids, `O_NOFOLLOW`, `O_NONBLOCK`, `renameat2`, `epoll` and `setns`,
//! through std and the safe wrappers of `rustix` and `mio`.

pub(super) mod host;

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::{Access, Create, Facts, Kind, Open, Owner};
use crate::deadline::Deadline;

/// A uid.
pub(super) type RawOwner = u32;

/// The mode bits, for [`super::Access::shown`].
pub(super) type AccessDetail = u32;

pub(super) fn show_access(mode: &u32) -> String {
    format!("mode {mode:04o}")
}

pub(super) fn is_administrator(uid: &u32) -> bool {
    *uid == 0
}

pub(super) fn show_owner(uid: &u32, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(f, "uid {uid}")
}

/// The effective user ID, through rustix's safe `geteuid(2)`: no file to
/// read, unlike `/proc/self/status`.
pub fn running_owner() -> io::Result<Owner> {
    Ok(Owner(rustix::process::geteuid().as_raw()))
}

fn kind_of(kind: &std::fs::FileType) -> (Kind, &'static str) {
    if kind.is_file() {
        (Kind::File, "a regular file")
    } else if kind.is_dir() {
        (Kind::Dir, "a directory")
    } else if kind.is_symlink() {
        (Kind::Symlink, "a symbolic link")
    } else if kind.is_fifo() {
        (Kind::Other, "a FIFO")
    } else if kind.is_char_device() {
        (Kind::Other, "a character device")
    } else if kind.is_block_device() {
        (Kind::Other, "a block device")
    } else if kind.is_socket() {
        (Kind::Other, "a socket")
    } else {
        (Kind::Other, "not a regular file")
    }
}

fn facts_of(meta: &std::fs::Metadata) -> Facts {
    let (kind, described) = kind_of(&meta.file_type());
    let mode = meta.mode() & 0o7777;
    Facts {
        kind,
        described,
        owner: Owner(meta.uid()),
        len: meta.len(),
        links: meta.nlink(),
        id: (meta.dev(), meta.ino()),
        changed: Some((
            meta.mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(meta.mtime_nsec()),
            meta.ctime()
                .saturating_mul(1_000_000_000)
                .saturating_add(meta.ctime_nsec()),
        )),
        access: Access {
            shared: mode & 0o077 != 0,
            others_write: mode & 0o022 != 0,
            everyone_writes: mode & 0o002 != 0,
            executable: mode & 0o111 != 0,
            sticky: mode & 0o1000 != 0,
            detail: mode,
        },
    }
}

/// What the open `file` is (`fstat`: the file itself, not a path that
/// could have changed since it was opened).
pub fn facts(file: &File) -> io::Result<Facts> {
    Ok(facts_of(&file.metadata()?))
}

/// What `path` names itself: a link is a link (`lstat`).
pub fn facts_at(path: &Path) -> io::Result<Facts> {
    Ok(facts_of(&std::fs::symlink_metadata(path)?))
}

/// What `path` leads to, links followed (`stat`).
pub fn facts_followed(path: &Path) -> io::Result<Facts> {
    Ok(facts_of(&std::fs::metadata(path)?))
}

/// Opens `path` as `how` says, with `O_NONBLOCK | O_NOCTTY | O_CLOEXEC`
/// (a FIFO does not wait for a writer, a terminal is never adopted), plus
/// `O_NOFOLLOW` unless `how.follow`.
pub fn open(path: &Path, how: &Open) -> io::Result<File> {
    let mut flags = libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    if !how.follow {
        flags |= libc::O_NOFOLLOW;
    }
    let mut options = std::fs::OpenOptions::new();
    options
        .read(how.read)
        .write(how.write && !how.append)
        .append(how.append)
        .mode(how.mode)
        .custom_flags(flags);
    match how.create {
        Create::Never => {}
        Create::IfMissing => {
            options.create(true);
        }
        Create::New => {
            options.create_new(true);
        }
    }
    if how.write && !how.append && how.create == Create::IfMissing {
        options.truncate(false);
    }
    options.open(path)
}

/// Whether `error` is [`open`] refusing a link in the last component
/// (`ELOOP` from `O_NOFOLLOW`).
pub fn is_refused_link(error: &io::Error) -> bool {
    error.raw_os_error() == Some(libc::ELOOP)
}

/// Renames `from` over `to` (`rename(2)`, atomic in one file system).
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::rename(from, to)
}

/// Puts `temp` at `path` atomically. The two are exchanged
/// (`renameat2(RENAME_EXCHANGE)`) and the old file, now at `temp`, removed:
/// a plain rename over an existing file makes ext4 write the new file's
/// data out first (its `auto_da_alloc` heuristic), which cost every
/// invocation 0.2 ms of wall time. A file system without the exchange, or
/// no file at `path` yet, gets the plain rename.
pub fn swap_into_place(temp: &Path, path: &Path) -> io::Result<()> {
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

/// Writes all of `bytes` at `offset` (`pwrite(2)`), leaving the file
/// position alone.
pub fn write_at(file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(bytes, offset)
}

/// Creates `dir` and its missing parents, mode 0700 (the umask can only
/// take bits away).
pub fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Creates `dir` (0700); its parent must exist, and nothing may be there.
pub(super) fn create_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new().mode(0o700).create(dir)
}

/// Sets `mode` on an open file, whatever the umask took from it.
pub fn set_mode(file: &File, mode: u32) -> io::Result<()> {
    file.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// The identity of what `path` names, links followed: two names of one
/// file (a hash link in a certificate directory) have the same.
pub fn id_of(path: &Path) -> io::Result<super::FileId> {
    let meta = std::fs::metadata(path)?;
    Ok((meta.dev(), meta.ino()))
}

/// Makes `link` a symbolic link to `target`.
pub fn symlink(target: &Path, link: &Path) -> io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

/// Sets 0700 on a file [`super::write_executable`] wrote (the umask may
/// have taken the execute bit of its 0700).
pub(super) fn make_executable(file: &File) -> io::Result<()> {
    file.set_permissions(std::fs::Permissions::from_mode(0o700))
}

/// Fills `buf` from the kernel's random source (`getrandom(2)`).
pub(super) fn random_bytes(buf: &mut [u8]) -> bool {
    let wanted = buf.len();
    rustix::rand::getrandom(buf, rustix::rand::GetRandomFlags::empty())
        .is_ok_and(|filled| filled == wanted)
}

/// Linux has no verifier of the system's own: it trusts the CA bundle
/// files `wicp_net::trust` reads.
pub const HAS_SYSTEM_VERIFIER: bool = false;

/// Never called on Linux ([`HAS_SYSTEM_VERIFIER`] is false).
pub fn system_verifier(
    _extra: Vec<rustls::pki_types::CertificateDer<'static>>,
    _provider: std::sync::Arc<rustls::crypto::CryptoProvider>,
) -> Result<std::sync::Arc<dyn rustls::client::danger::ServerCertVerifier>, String> {
    Err("Linux trusts CA bundle files".into())
}

/// What stdin is, which decides how it can be read by a deadline.
#[derive(Debug)]
pub enum Stdin {
    /// A regular file: it has an end and never waits for a writer.
    File(File),
    /// A pipe: read non-blocking, waiting in `epoll` ([`read_pipe`]).
    Pipe(OwnedFd),
    /// Anything else (a terminal, a socket, a device).
    Other(File),
}

/// Our stdin (a duplicate of descriptor 0), sorted by kind.
pub fn stdin() -> io::Result<Stdin> {
    let fd = io::stdin().as_fd().try_clone_to_owned()?;
    classify(fd)
}

fn classify(fd: OwnedFd) -> io::Result<Stdin> {
    let file = File::from(fd);
    let kind = file.metadata()?.file_type();
    Ok(if kind.is_file() {
        Stdin::File(file)
    } else if kind.is_fifo() {
        Stdin::Pipe(OwnedFd::from(file))
    } else {
        Stdin::Other(file)
    })
}

/// Reads a pipe to its end, at most `cap` bytes into `bytes`, without
/// blocking: `Ok(false)` when the deadline passed first. `mio` registers
/// edge-triggered, so every wake-up reads until the pipe is empty
/// (`WouldBlock`) before waiting again. The pipe is put back in blocking
/// mode afterwards: its open file description may be shared.
pub fn read_pipe(
    fd: OwnedFd,
    bytes: &mut Vec<u8>,
    cap: u64,
    deadline: &Deadline,
) -> io::Result<bool> {
    use mio::{Events, Interest, Poll, Token};

    let mut pipe = mio::unix::pipe::Receiver::from(fd);
    pipe.set_nonblocking(true)?;
    let result = (|| {
        let mut poll = Poll::new()?;
        poll.registry()
            .register(&mut pipe, Token(0), Interest::READABLE)?;
        let mut events = Events::with_capacity(1);
        loop {
            // Drain what is there now. `read_to_end` keeps what it read
            // when the pipe runs dry (`WouldBlock`), and grows the buffer
            // with the input instead of zeroing a large one up front.
            let room = cap.saturating_sub(u64::try_from(bytes.len()).unwrap_or(u64::MAX));
            match (&pipe).take(room).read_to_end(bytes) {
                Ok(_) => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let remaining = deadline.remaining();
            if remaining.is_zero() {
                return Ok(false);
            }
            match poll.poll(&mut events, Some(remaining)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    })();
    let _ = pipe.set_nonblocking(false);
    result
}

/// Runs `f` where the kubelet listens: on a thread in PID 1's network
/// namespace when ours is another one (a DaemonSet pod without host
/// networking). `proc` is the host's `/proc`.
pub fn enter_host_network<T: Send>(proc: &Path, f: impl FnOnce() -> T + Send) -> Result<T, String> {
    let theirs = std::fs::read_link(proc.join("1/ns/net"));
    let ours = std::fs::read_link("/proc/thread-self/ns/net")
        .or_else(|_| std::fs::read_link("/proc/self/ns/net"));
    match (theirs, ours) {
        (Ok(a), Ok(b)) if a != b => {
            let ns = File::open(proc.join("1/ns/net"))
                .map_err(|e| format!("cannot open PID 1's network namespace: {e}"))?;
            std::thread::scope(|s| {
                s.spawn(move || {
                    rustix::thread::move_into_link_name_space(
                        ns.as_fd(),
                        Some(rustix::thread::LinkNameSpaceType::Network),
                    )
                    .map_err(|e| format!("cannot enter PID 1's network namespace: {e}"))?;
                    Ok(f())
                })
                .join()
                .unwrap_or_else(|_| Err("the probe thread failed".into()))
            })
        }
        // Same namespace, or no way to tell (no hostPID): probe from here.
        _ => Ok(f()),
    }
}

/// The namespaces of PID 1 that `nsenter --target 1 --mount --uts --ipc
/// --net --pid` enters, in the order it enters them (the mount namespace
/// last: entering it moves this process's root and working directory).
const HOST_NAMESPACES: [(&str, rustix::thread::LinkNameSpaceType); 5] = [
    (
        "ipc",
        rustix::thread::LinkNameSpaceType::InterProcessCommunication,
    ),
    (
        "uts",
        rustix::thread::LinkNameSpaceType::HostNameAndNISDomainName,
    ),
    ("net", rustix::thread::LinkNameSpaceType::Network),
    ("pid", rustix::thread::LinkNameSpaceType::ProcessID),
    ("mnt", rustix::thread::LinkNameSpaceType::Mount),
];

/// Runs `program` with `args` in PID 1's namespaces (`proc` is the host's
/// `/proc`), as `nsenter --target 1 --mount --uts --ipc --net --pid` does,
/// and returns its exit status; its output is this process's. For the
/// kubelet's `systemctl` from a DaemonSet pod whose image holds nothing but
/// this binary. This process enters the namespaces itself, so it must have
/// one thread (a mount namespace is refused to a thread that shares its
/// filesystem context), which `node host-exec`, run as its own process,
/// has; `program` then runs as a child, the first process this one starts
/// in PID 1's PID namespace, and is found on PATH in PID 1's mounts.
pub fn run_in_host_namespaces(
    proc: &Path,
    program: &std::ffi::OsStr,
    args: &[std::ffi::OsString],
) -> Result<std::process::ExitStatus, String> {
    let mut opened = Vec::with_capacity(HOST_NAMESPACES.len());
    for (name, kind) in HOST_NAMESPACES {
        let file = File::open(proc.join("1/ns").join(name))
            .map_err(|e| format!("cannot open PID 1's {name} namespace: {e}"))?;
        opened.push((name, kind, file));
    }
    for (name, kind, file) in &opened {
        rustix::thread::move_into_link_name_space(file.as_fd(), Some(*kind))
            .map_err(|e| format!("cannot enter PID 1's {name} namespace: {e}"))?;
    }
    std::process::Command::new(program)
        .args(args)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(program).display()))
}

/// Connects to a node agent's local endpoint at `path`: a Unix socket
/// (the SPIRE agent's `admin_socket_path`), for the async gRPC client.
///
/// The answer names identities, so who could have put the socket there
/// matters as much as what it says: the path must be one only root or the
/// plugin's user could have made ([`check_socket_path`]), and the process
/// at the other end must run as one of them (`SO_PEERCRED`, which the
/// kernel fills in at `connect` and no one can forge). The second check
/// also closes the window between the first and the connect.
pub async fn connect_local(path: &Path) -> Result<tokio::net::UnixStream, super::EndpointRefusal> {
    use super::EndpointRefusal;
    let running = running_owner().map_err(EndpointRefusal::Io)?;
    check_socket_path(path, &running).map_err(EndpointRefusal::Untrusted)?;
    let stream = tokio::net::UnixStream::connect(path)
        .await
        .map_err(EndpointRefusal::Io)?;
    let peer = Owner(stream.peer_cred().map_err(EndpointRefusal::Io)?.uid());
    if !peer.is_admin_or(&running) {
        return Err(EndpointRefusal::Untrusted(format!(
            "the process serving {} runs as {peer}, neither root nor the plugin's user ({running})",
            path.display()
        )));
    }
    Ok(stream)
}

/// Most symbolic links one path may pass through (Linux's own limit).
const MAX_LINKS: u32 = 40;

/// Checks that only root or `running` could have made `path` what it is:
/// every directory on the way owned by one of them and writable by no one
/// else (unless sticky, as `/tmp` is: there only an entry's owner may
/// replace it, and the entry is checked in turn), every symbolic link on
/// the way owned by one of them (its target walked the same way), and the
/// last component a socket owned by one of them. A missing component is
/// left to `connect` to report. The clause says which component failed
/// and why.
fn check_socket_path(path: &Path, running: &Owner) -> Result<(), String> {
    use std::collections::VecDeque;
    use std::ffi::OsString;
    use std::path::{Component, PathBuf};

    fn names(path: &Path) -> VecDeque<OsString> {
        path.components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                Component::ParentDir => Some(OsString::from("..")),
                _ => None,
            })
            .collect()
    }
    let owner_refused = |at: &Path, facts: &Facts| {
        format!(
            "{} ({}) is owned by {}, neither root nor the plugin's user ({running}): that user could replace it",
            at.display(),
            facts.described,
            facts.owner
        )
    };
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| format!("cannot resolve {}: {e}", path.display()))?
            .join(path)
    };
    let mut todo = names(&absolute);
    let mut here = PathBuf::from("/");
    let mut links = 0;
    let mut facts = facts_at(&here).map_err(|e| format!("cannot inspect /: {e}"))?;
    loop {
        // `here` is a directory we are about to look into.
        if !facts.owner.is_admin_or(running) {
            return Err(owner_refused(&here, &facts));
        }
        if facts.access.others_write && !facts.access.sticky {
            return Err(format!(
                "the directory {} may be written by other users ({}): any of them could put a socket of their own there",
                here.display(),
                facts.access.shown()
            ));
        }
        let Some(name) = todo.pop_front() else {
            return Err(format!("{} is a directory, not a socket", here.display()));
        };
        if name == ".." {
            here.pop();
            facts =
                facts_at(&here).map_err(|e| format!("cannot inspect {}: {e}", here.display()))?;
            continue;
        }
        let next = here.join(&name);
        facts = match facts_at(&next) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("cannot inspect {}: {e}", next.display())),
        };
        match facts.kind {
            Kind::Symlink => {
                if !facts.owner.is_admin_or(running) {
                    return Err(owner_refused(&next, &facts));
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(format!(
                        "{} passes through more than {MAX_LINKS} symbolic links",
                        path.display()
                    ));
                }
                let target = std::fs::read_link(&next)
                    .map_err(|e| format!("cannot read the link {}: {e}", next.display()))?;
                if target.is_absolute() {
                    here = PathBuf::from("/");
                }
                let mut rest = names(&target);
                rest.extend(todo);
                todo = rest;
                facts = facts_at(&here)
                    .map_err(|e| format!("cannot inspect {}: {e}", here.display()))?;
            }
            Kind::Dir => here = next,
            _ if !todo.is_empty() => {
                return Err(format!(
                    "{} is {}, not a directory",
                    next.display(),
                    facts.described
                ));
            }
            _ => {
                let is_socket =
                    std::fs::symlink_metadata(&next).is_ok_and(|m| m.file_type().is_socket());
                if !is_socket {
                    return Err(format!(
                        "{} is {}, not a socket",
                        next.display(),
                        facts.described
                    ));
                }
                if !facts.owner.is_admin_or(running) {
                    return Err(owner_refused(&next, &facts));
                }
                return Ok(());
            }
        }
    }
}

/// Windows services do not exist here: a Linux kubelet is a systemd
/// unit, restarted with `systemctl` (`commands::node::restart`).
pub fn restart_service(name: &str, _timeout: std::time::Duration) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{name} is a Windows service, and this is not Windows"),
    ))
}

/// Helpers for the tests of the crates above (a FIFO to refuse, a pipe
/// sorted as stdin is): built for this crate's own tests and, through the
/// `test-support` feature, for the others' (their dev-dependency on this
/// crate turns it on; a release build never does).
#[cfg(any(test, feature = "test-support"))]
#[allow(clippy::unwrap_used, clippy::panic)]
pub mod test_support {
    use super::*;

    /// Makes a FIFO at `path`, for the tests of every reader that must
    /// refuse one without blocking.
    pub fn mkfifo(path: &Path) {
        let status = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success(), "mkfifo {}", path.display());
    }

    /// `fd` as [`stdin`] sorts it, for the tests of `wicp_kubelet::request::stdin`.
    pub fn stdin_of(fd: OwnedFd) -> Stdin {
        classify(fd).unwrap()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    #[test]
    fn open_refuses_a_link_unless_asked_to_follow() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = open(&link, &Open::read().no_follow()).unwrap_err();
        assert!(is_refused_link(&err), "{err}");
        assert!(open(&link, &Open::read()).is_ok());
        let facts = facts_at(&link).unwrap();
        assert!(facts.is_link());
    }

    #[test]
    fn facts_read_the_mode_and_the_links() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = open(&path, &Open::create_new(0o600)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o620)).unwrap();
        std::fs::hard_link(&path, dir.path().join("g")).unwrap();
        let facts = facts(&file).unwrap();
        assert!(facts.is_file());
        assert_eq!(facts.links, 2);
        assert!(facts.access.shared && facts.access.others_write);
        assert!(!facts.access.everyone_writes && !facts.access.executable);
        assert_eq!(facts.access.shown(), "mode 0620");
    }
}
