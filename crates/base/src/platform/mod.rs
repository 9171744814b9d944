//! Everything that differs between a Linux and a Windows node, in one
//! place: the rest of the crate says neither `cfg(unix)` nor
//! `cfg(windows)` (tests/architecture.rs checks it).
//!
//! What the plugin needs from the operating system is small, and the same
//! questions on both:
//!
//! - **who runs us** ([`running_owner`]): the owner every file we keep
//!   (cache, locks, metrics state, audit log) must have;
//! - **what a file is and who may touch it** ([`facts`], [`facts_at`]):
//!   its kind (a link is never followed), owner, link count, identity, and
//!   whether anyone but its owner (and the machine's administrators) may
//!   read or write it. On Linux that is the mode bits; on Windows the
//!   owner SID and the DACL's allow entries;
//! - **opening without surprises** ([`open`]): never through a link when
//!   asked, never blocking on a FIFO or device, and a file we create is
//!   private from its first byte (mode 0600; on Windows a protected DACL
//!   for SYSTEM, Administrators and us);
//! - **putting a file in place atomically** ([`rename`],
//!   [`swap_into_place`]), **locks** (std's `File::lock`: `flock(2)` or
//!   `LockFileEx`), **unpredictable names** ([`random_hex`]), **stdin
//!   with a deadline** ([`stdin`], [`read_pipe`]), and the node's file
//!   system seen from the installer ([`Host`]), and **a node agent's local
//!   endpoint** ([`connect_local`]: a Unix socket, or a named pipe).
//!
//! The Windows half is the only code in the crate that calls the
//! operating system through `unsafe` (the Win32 security API has no safe
//! binding in std or in a maintained crate); it sits in
//! `platform/windows/`, behind the same safe functions as the Linux half.

use std::fmt;
use std::io;
use std::path::Path;

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as os;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as os;

mod found;
mod host;

pub use found::{Existing, FileData, Kind};
pub use host::Host;
#[cfg(all(unix, any(test, feature = "test-support")))]
pub use host::test_root;
pub use os::{
    HAS_SYSTEM_VERIFIER, Stdin, connect_local, create_private_dir_all, enter_host_network, facts,
    facts_at, facts_followed, id_of, is_refused_link, open, read_pipe, rename, restart_service,
    run_in_host_namespaces, running_owner, set_mode, stdin, swap_into_place, symlink,
    system_verifier, write_at,
};

/// Helpers for the tests of what uses this module (a FIFO to refuse).
#[cfg(all(unix, any(test, feature = "test-support")))]
pub use os::test_support;

/// Whether this build is for Windows: for defaults (paths) and messages,
/// never for a decision that belongs in this module.
pub const WINDOWS: bool = cfg!(windows);

/// Who owns a file, or runs this process: a uid on Linux, a SID on
/// Windows (`S-1-5-18` is SYSTEM).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner(pub os::RawOwner);

impl Owner {
    /// The machine's administrator: root, or SYSTEM and the Administrators
    /// group (either may own what SYSTEM creates on Windows).
    pub fn is_administrator(&self) -> bool {
        os::is_administrator(&self.0)
    }

    /// Whether a file owned by `self` may be trusted by a process run by
    /// `running`: the same user, or (Windows) the administrators, who own
    /// what SYSTEM creates.
    pub fn trusted_by(&self, running: &Owner) -> bool {
        self == running || (crate::platform::WINDOWS && self.is_administrator())
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        os::show_owner(&self.0, f)
    }
}

/// A file's identity on its volume (device and inode; volume serial and
/// file index): two paths with the same one name the same file.
pub(crate) type FileId = (u64, u64);

/// What the plugin checks about a file before trusting it.
#[derive(Clone, Debug)]
pub struct Facts {
    pub kind: Kind,
    /// "a FIFO", "a directory": for messages.
    pub described: &'static str,
    pub owner: Owner,
    pub len: u64,
    /// Hard links: more than one means another name can reach the data.
    pub links: u64,
    pub id: FileId,
    pub access: Access,
    /// When its content or inode last changed, as `(mtime, ctime)` in
    /// nanoseconds (Linux): what a prepared copy of a file is keyed by,
    /// with `id` and `len`. `ctime` cannot be set by any caller: a write,
    /// a rename over it, a `chmod` all move it. `None` where the system
    /// has no such stamp the plugin reads (Windows).
    pub changed: Option<(i64, i64)>,
}

/// Who besides the owner may use a file, as far as the plugin cares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// Anyone but the owner (and, on Windows, SYSTEM and Administrators)
    /// may read or write it.
    pub shared: bool,
    /// A group or another user may write it (Linux: mode & 0o022).
    pub others_write: bool,
    /// Every user may write it (Linux: mode & 0o002; Windows: Everyone,
    /// Users or Authenticated Users).
    pub everyone_writes: bool,
    /// It may be run (Linux: an execute bit; Windows: always).
    pub executable: bool,
    /// A directory whose entries only their owner (or the directory's)
    /// may rename or remove (Linux: the sticky bit, as on `/tmp`;
    /// Windows: never).
    pub sticky: bool,
    /// What [`Access::shown`] shows: the mode (Linux), or the SIDs a DACL
    /// lets in (Windows). Kept raw: a cache hit checks two files and shows
    /// neither, so the text is made only for a message.
    pub detail: os::AccessDetail,
}

impl Access {
    /// How it is shown in a message: `mode 0644`, or the SIDs a DACL lets
    /// in.
    pub fn shown(&self) -> String {
        os::show_access(&self.detail)
    }
}

impl Facts {
    pub fn is_file(&self) -> bool {
        self.kind == Kind::File
    }

    pub fn is_dir(&self) -> bool {
        self.kind == Kind::Dir
    }

    pub fn is_link(&self) -> bool {
        self.kind == Kind::Symlink
    }
}

/// How [`open`] opens a file. Every open is non-blocking for FIFOs and
/// devices on Linux (`O_NONBLOCK | O_NOCTTY | O_CLOEXEC`) and refuses a
/// device or pipe on Windows.
#[derive(Clone, Copy, Debug)]
pub struct Open {
    pub write: bool,
    pub read: bool,
    pub append: bool,
    pub create: Create,
    /// Follow a link in the last component (`false`: refuse it, see
    /// [`is_refused_link`]).
    pub follow: bool,
    /// The mode a created file gets (Linux; the umask still applies unless
    /// the caller sets it again). On Windows a mode without group or other
    /// bits means the private DACL; any other, the folder's inherited one.
    pub mode: u32,
}

/// Why a node agent's local endpoint was not used ([`connect_local`]).
#[derive(Debug)]
pub enum EndpointRefusal {
    /// Connecting failed: nothing there, refused, no permission.
    Io(io::Error),
    /// Someone other than the machine's administrator or the plugin's own
    /// user could have bound, replaced or redirected it, or serves it:
    /// what and who, as a clause.
    Untrusted(String),
}

impl Owner {
    /// Whether what this user owns may be trusted by a plugin run by
    /// `running`: the machine's administrator's (root; SYSTEM or
    /// Administrators) or `running`'s own. No one else's.
    pub fn is_admin_or(&self, running: &Owner) -> bool {
        self == running || self.is_administrator()
    }
}

/// Whether [`open`] creates the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Create {
    Never,
    IfMissing,
    /// Only if nothing is there (`O_EXCL`, `CREATE_NEW`).
    New,
}

impl Open {
    /// Read an existing file.
    pub const fn read() -> Open {
        Open {
            write: false,
            read: true,
            append: false,
            create: Create::Never,
            follow: true,
            mode: 0o600,
        }
    }

    /// Create a new file (nothing may be there) for writing, with `mode`.
    pub const fn create_new(mode: u32) -> Open {
        Open {
            write: true,
            read: false,
            append: false,
            create: Create::New,
            follow: false,
            mode,
        }
    }

    /// Read and write, creating the file (0600) when missing.
    pub const fn read_write() -> Open {
        Open {
            write: true,
            read: true,
            append: false,
            create: Create::IfMissing,
            follow: false,
            mode: 0o600,
        }
    }

    /// Append, creating the file (0600) when missing.
    pub const fn append() -> Open {
        Open {
            write: true,
            read: false,
            append: true,
            create: Create::IfMissing,
            follow: false,
            mode: 0o600,
        }
    }

    /// Never through a link in the last component.
    pub const fn no_follow(mut self) -> Open {
        self.follow = false;
        self
    }
}

/// A private temporary directory (only we may use it) with an
/// unpredictable name under the system's temporary directory.
pub fn private_temp_dir(prefix: &str) -> io::Result<std::path::PathBuf> {
    let dir =
        std::env::temp_dir().join(format!("{prefix}.{}.{}", std::process::id(), random_hex(8)));
    os::create_private_dir(&dir)?;
    Ok(dir)
}

/// Writes `bytes` to a new private executable file `path` (0700).
pub fn write_executable(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut file = open(path, &Open::create_new(0o700))?;
    file.write_all(bytes)?;
    os::make_executable(&file)
}

/// The directories above `path` on `host` that do not exist yet, outermost
/// first: what writing `path` would create.
pub fn missing_dirs(host: &Host, path: &Path) -> Vec<std::path::PathBuf> {
    let mut missing = Vec::new();
    let mut dir = path.parent();
    while let Some(d) = dir.filter(|d| d.parent().is_some()) {
        if host.kind(d).is_some() {
            break;
        }
        missing.push(d.to_path_buf());
        dir = d.parent();
    }
    missing.reverse();
    missing
}

/// `2 * bytes` hex digits from the system's random source, for names no
/// one can guess ahead. The source does not fail once the system is up; if
/// it ever did, the clock and PID stand in, and creating the file
/// exclusively still refuses a name that exists.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    if !os::random_bytes(&mut buf) {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        return format!("{nanos:x}{:x}", std::process::id());
    }
    crate::hex::encode(&buf)
}

/// Whether file names match in any case here (Windows: `NAME.EXE` is
/// `name.exe`), so a name the binary is run as is compared that way too.
pub const NAMES_IGNORE_CASE: bool = cfg!(windows);

/// The file the kubelet runs for provider `name` in bin dir `dir`, found
/// as it finds it (`exec.LookPath(filepath.Join(binDir, name))`): the name
/// itself on Linux; on Windows, Go's rules for PATHEXT (the default
/// `.com;.exe;.bat;.cmd` of the kubelet's service): a name with an
/// extension is tried as it is first, then each extension appended, and
/// the first regular file wins. `None` when nothing is found; the caller
/// reports `dir/name`.
pub fn find_executable(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    let plain = dir.join(name);
    let is_file = |p: &Path| std::fs::metadata(p).is_ok_and(|m| !m.is_dir());
    if !WINDOWS {
        return is_file(&plain).then_some(plain);
    }
    let has_extension = name.rfind('.') > name.rfind([':', '\\', '/']);
    if has_extension && is_file(&plain) {
        return Some(plain);
    }
    [".com", ".exe", ".bat", ".cmd"]
        .iter()
        .map(|ext| dir.join(format!("{name}{ext}")))
        .find(|p| is_file(p))
}

/// The file name of executable `name` here: `name.exe` on Windows.
pub fn executable_name(name: &str) -> String {
    format!("{name}{}", std::env::consts::EXE_SUFFIX)
}
