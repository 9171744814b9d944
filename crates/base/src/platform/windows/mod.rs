//! The Windows half of [`crate::platform`]: SIDs and DACLs instead of
//! uids and modes, `FILE_FLAG_OPEN_REPARSE_POINT` instead of `O_NOFOLLOW`,
//! `MoveFileExW` (std's rename) with a short retry, and a reading thread
//! for the kubelet's anonymous stdin pipe, which cannot be waited on with
//! a timeout.
//!
//! What "private" means here: a protected DACL (no entries inherited from
//! the parent folder) granting full control to SYSTEM, Administrators and
//! the running user only, set when the file or folder is created, so there
//! is no moment at which another user could open it. What "others may
//! write" means: an allow entry with a write right for any other SID.

pub(super) mod host;
#[allow(unsafe_code)]
mod security;
#[allow(unsafe_code)]
mod service;

use std::fmt;
use std::fs::File;
use std::io;
use std::path::Path;
use std::time::Duration;

use windows_sys::Win32::Storage::FileSystem::{
    CREATE_NEW, FILE_APPEND_DATA, FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_NORMAL,
    FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_BACKUP_SEMANTICS, FILE_FLAG_OPEN_REPARSE_POINT,
    FILE_READ_ATTRIBUTES, FILE_WRITE_ATTRIBUTES, OPEN_ALWAYS, OPEN_EXISTING, READ_CONTROL,
    SYNCHRONIZE,
};

use super::{Access, Create, Facts, Kind, Open, Owner};
use crate::deadline::Deadline;

/// A SID in its string form (`S-1-5-18`).
pub(super) type RawOwner = String;

const GENERIC_READ: u32 = 0x8000_0000;
const GENERIC_WRITE: u32 = 0x4000_0000;

/// Which SIDs a DACL lets in, already said in words by
/// `security::security` (reading the DACL is the costly part).
pub(super) type AccessDetail = String;

pub(super) fn show_access(detail: &str) -> String {
    detail.to_string()
}

pub(super) fn is_administrator(sid: &String) -> bool {
    sid == security::SYSTEM || sid == security::ADMINISTRATORS
}

pub(super) fn show_owner(sid: &String, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match sid.as_str() {
        security::SYSTEM => write!(f, "SYSTEM ({sid})"),
        security::ADMINISTRATORS => write!(f, "Administrators ({sid})"),
        _ => write!(f, "{sid}"),
    }
}

/// The user this process runs as (SYSTEM under the kubelet), from the
/// process token.
pub fn running_owner() -> io::Result<Owner> {
    security::running_sid().map(Owner)
}

/// The marker [`open`] puts in the error when it refuses a link.
#[derive(Debug)]
struct RefusedLink;

impl fmt::Display for RefusedLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("it is a symbolic link or junction, which is not followed")
    }
}

impl std::error::Error for RefusedLink {}

/// Whether `error` is [`open`] refusing a link in the last component.
pub fn is_refused_link(error: &io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.is::<RefusedLink>())
}

/// What the open `file` is and who may use it.
pub fn facts(file: &File) -> io::Result<Facts> {
    let Some(info) = security::handle_info(file)? else {
        return Ok(Facts {
            kind: Kind::Other,
            described: "a pipe or a device",
            owner: Owner(String::new()),
            len: 0,
            links: 1,
            id: (0, 0),
            changed: None,
            access: Access {
                shared: true,
                others_write: true,
                everyone_writes: true,
                executable: false,
                sticky: false,
                detail: "a pipe or a device".into(),
            },
        });
    };
    let (kind, described) = if info.attributes & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
        (Kind::Symlink, "a symbolic link or junction")
    } else if info.attributes & FILE_ATTRIBUTE_DIRECTORY != 0 {
        (Kind::Dir, "a directory")
    } else {
        (Kind::File, "a regular file")
    };
    let security = security::security(file)?;
    Ok(Facts {
        kind,
        described,
        owner: Owner(security.owner),
        len: info.len,
        links: u64::from(info.links),
        id: (u64::from(info.volume), info.index),
        changed: None,
        access: Access {
            shared: security.shared,
            others_write: security.others_write,
            everyone_writes: security.everyone_writes,
            // Windows runs a file by its extension, not a mode bit.
            executable: kind == Kind::File,
            sticky: false,
            detail: security.shown,
        },
    })
}

/// Opens `path` only to look at it (folders too: backup semantics).
fn open_to_inspect(path: &Path, follow: bool) -> io::Result<File> {
    let mut flags = FILE_FLAG_BACKUP_SEMANTICS;
    if !follow {
        flags |= FILE_FLAG_OPEN_REPARSE_POINT;
    }
    security::create_file(
        path,
        READ_CONTROL | FILE_READ_ATTRIBUTES | SYNCHRONIZE,
        OPEN_EXISTING,
        flags,
        None,
    )
}

/// What `path` names itself: a link or junction is a link.
pub fn facts_at(path: &Path) -> io::Result<Facts> {
    facts(&open_to_inspect(path, false)?)
}

/// What `path` leads to, links followed.
pub fn facts_followed(path: &Path) -> io::Result<Facts> {
    facts(&open_to_inspect(path, true)?)
}

/// The identity of what `path` names, links followed.
pub fn id_of(path: &Path) -> io::Result<super::FileId> {
    Ok(facts_followed(path)?.id)
}

/// Opens `path` as `how` says, with `CreateFileW`: a file it creates
/// with a mode that has no group or other bits gets the private DACL
/// (else the folder's inherited one); without `how.follow` a link is
/// opened itself and refused ([`is_refused_link`]). Pipes and devices
/// open, and [`facts`] says what they are.
pub fn open(path: &Path, how: &Open) -> io::Result<File> {
    let mut access = READ_CONTROL | FILE_READ_ATTRIBUTES | SYNCHRONIZE;
    if how.read {
        access |= GENERIC_READ;
    }
    if how.append {
        // Append only: no FILE_WRITE_DATA, so every write goes to the end.
        access |= FILE_APPEND_DATA | FILE_WRITE_ATTRIBUTES;
    } else if how.write {
        access |= GENERIC_WRITE;
    }
    let disposition = match how.create {
        Create::Never => OPEN_EXISTING,
        Create::IfMissing => OPEN_ALWAYS,
        Create::New => CREATE_NEW,
    };
    let mut flags = FILE_ATTRIBUTE_NORMAL;
    if !how.follow {
        flags |= FILE_FLAG_OPEN_REPARSE_POINT;
    }
    let descriptor = if how.create != Create::Never && how.mode & 0o077 == 0 {
        Some(security::Descriptor::private()?)
    } else {
        None
    };
    let file = security::create_file(path, access, disposition, flags, descriptor.as_ref())?;
    if !how.follow
        && security::handle_info(&file)?
            .is_some_and(|i| i.attributes & FILE_ATTRIBUTE_REPARSE_POINT != 0)
    {
        return Err(io::Error::other(RefusedLink));
    }
    Ok(file)
}

/// Renames `from` over `to` (`MoveFileExW` with `MOVEFILE_REPLACE_EXISTING`
/// inside std), retried for up to half a second: Windows refuses the
/// rename while another process has the target open without delete
/// sharing (an antivirus scan, a reader of another program).
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    let mut tries = 0;
    loop {
        match std::fs::rename(from, to) {
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied && tries < 25 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            done => return done,
        }
    }
}

/// Puts `temp` at `path` atomically: a rename ([`rename`]); Windows has
/// no ext4 write-back to avoid.
pub fn swap_into_place(temp: &Path, path: &Path) -> io::Result<()> {
    rename(temp, path)
}

/// Writes all of `bytes` at `offset`.
pub fn write_at(file: &File, mut bytes: &[u8], mut offset: u64) -> io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !bytes.is_empty() {
        let written = file.seek_write(bytes, offset)?;
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        bytes = bytes.get(written..).unwrap_or_default();
        offset = offset.saturating_add(u64::try_from(written).unwrap_or(u64::MAX));
    }
    Ok(())
}

/// Nothing to do: a file's DACL was chosen when [`open`] created it.
pub fn set_mode(_file: &File, _mode: u32) -> io::Result<()> {
    Ok(())
}

/// Creates folder `dir` with the private DACL, its missing parents with
/// their inherited one.
pub fn create_private_dir_all(dir: &Path) -> io::Result<()> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match create_private_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        done => done,
    }
}

/// Creates folder `dir` with the private DACL; nothing may be there.
pub(super) fn create_private_dir(dir: &Path) -> io::Result<()> {
    security::create_directory(dir, Some(&security::Descriptor::private()?))
}

/// Nothing to do: Windows runs a file by its extension.
pub(super) fn make_executable(_file: &File) -> io::Result<()> {
    Ok(())
}

/// Makes `link` stand for `target`: on Windows a copy. The one caller
/// stages a bin dir for check-config, which needs each name to exist and
/// be what the node's is; a Windows link needs a privilege SYSTEM has but
/// an administrator's shell may not, and resolves a `\\?\` target
/// differently across Windows versions (and Wine), so a copy is the one
/// answer that is the same everywhere.
pub fn symlink(target: &Path, link: &Path) -> io::Result<()> {
    std::fs::copy(target, link).map(|_| ())
}

/// Fills `buf` from the system's preferred random generator
/// (`BCryptGenRandom`).
pub(super) fn random_bytes(buf: &mut [u8]) -> bool {
    security::random(buf)
}

/// The Windows certificate store as a TLS verifier
/// (`rustls-platform-verifier`: `CertGetCertificateChain` and
/// `CertVerifyCertificateChainPolicy`), and `extra` (`--ca-file`) on top:
/// a server either vouches for is trusted. There is no CA bundle file on
/// Windows to read instead.
///
/// The extra roots are checked by rustls' own verifier rather than handed
/// to the chain engine as an exclusive root store
/// (`Verifier::new_with_extra_roots`): that needs a chain-engine option
/// Wine does not implement, and this way the store's answer is the same
/// whether or not a `--ca-file` is given.
pub fn system_verifier(
    extra: Vec<rustls::pki_types::CertificateDer<'static>>,
    provider: std::sync::Arc<rustls::crypto::CryptoProvider>,
) -> Result<std::sync::Arc<dyn rustls::client::danger::ServerCertVerifier>, String> {
    let store = rustls_platform_verifier::Verifier::new(std::sync::Arc::clone(&provider))
        .map_err(|e| e.to_string())?;
    if extra.is_empty() {
        return Ok(std::sync::Arc::new(store));
    }
    let mut roots = rustls::RootCertStore::empty();
    for der in extra {
        roots.add(der).map_err(|e| e.to_string())?;
    }
    let bundle = rustls::client::WebPkiServerVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        provider,
    )
    .build()
    .map_err(|e| e.to_string())?;
    Ok(std::sync::Arc::new(StoreOrBundle { store, bundle }))
}

/// Trusts a server the Windows store or the `--ca-file` bundle vouches for.
#[derive(Debug)]
struct StoreOrBundle {
    store: rustls_platform_verifier::Verifier,
    bundle: std::sync::Arc<rustls::client::WebPkiServerVerifier>,
}

impl rustls::client::danger::ServerCertVerifier for StoreOrBundle {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        intermediates: &[rustls::pki_types::CertificateDer<'_>],
        server_name: &rustls::pki_types::ServerName<'_>,
        ocsp_response: &[u8],
        now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        self.store
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            .or_else(|by_store| {
                self.bundle
                    .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
                    .map_err(|_| by_store)
            })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.bundle.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        self.bundle.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.bundle.supported_verify_schemes()
    }
}

/// Windows trusts its certificate store ([`system_verifier`]).
pub const HAS_SYSTEM_VERIFIER: bool = true;

/// A value that cannot exist: Windows has no [`Stdin::Pipe`].
#[derive(Debug)]
pub enum NoPipe {}

/// What stdin is, which decides how it can be read by a deadline.
#[derive(Debug)]
pub enum Stdin {
    /// A file on a disk: it has an end and never waits for a writer.
    File(File),
    /// Never on Windows: an anonymous pipe cannot be waited on with a
    /// timeout, so it is [`Stdin::Other`]. The variant keeps the match in
    /// `wicp_kubelet::request::stdin` the same on both systems.
    #[allow(dead_code)]
    Pipe(NoPipe),
    /// A pipe (the kubelet's), a console, a device: read on a thread.
    Other(File),
}

/// Our stdin (a duplicate of its handle), sorted by kind.
pub fn stdin() -> io::Result<Stdin> {
    use std::os::windows::io::AsHandle;
    let handle = io::stdin().as_handle().try_clone_to_owned()?;
    let file = File::from(handle);
    Ok(match security::handle_info(&file) {
        Ok(Some(info)) if info.attributes & FILE_ATTRIBUTE_DIRECTORY == 0 => Stdin::File(file),
        _ => Stdin::Other(file),
    })
}

/// Never called on Windows (there is no [`Stdin::Pipe`]).
pub fn read_pipe(
    pipe: NoPipe,
    _bytes: &mut Vec<u8>,
    _cap: u64,
    _deadline: &Deadline,
) -> io::Result<bool> {
    match pipe {}
}

/// Runs `f` where the kubelet listens: a HostProcess pod shares the
/// node's network, so that is here.
pub fn enter_host_network<T: Send>(
    _proc: &Path,
    f: impl FnOnce() -> T + Send,
) -> Result<T, String> {
    Ok(f())
}

/// PID 1's namespaces are Linux's: a HostProcess pod runs on the host
/// already, and nothing calls this on Windows.
pub fn run_in_host_namespaces(
    _proc: &Path,
    program: &std::ffi::OsStr,
    _args: &[std::ffi::OsString],
) -> Result<std::process::ExitStatus, String> {
    Err(format!(
        "cannot run {} in PID 1's namespaces: Windows has none",
        Path::new(program).display()
    ))
}

/// Connects to a node agent's local endpoint at `path`: a named pipe
/// (`\\.\pipe\<name>`, the SPIRE agent's
/// `experimental.admin_named_pipe_name`), for the async gRPC client.
///
/// A pipe's name belongs to whoever created it first, so the pipe's owner
/// (its security descriptor's, which is its creator's) must be SYSTEM,
/// Administrators or the plugin's own user: a pipe another user's process
/// made under that name is refused before anything is sent.
pub async fn connect_local(
    path: &Path,
) -> Result<tokio::net::windows::named_pipe::NamedPipeClient, super::EndpointRefusal> {
    use super::EndpointRefusal;
    use std::os::windows::io::AsRawHandle;
    let client = tokio::net::windows::named_pipe::ClientOptions::new()
        .open(path)
        .map_err(EndpointRefusal::Io)?;
    let owner = Owner(security::object_owner(client.as_raw_handle()).map_err(EndpointRefusal::Io)?);
    let running = running_owner().map_err(EndpointRefusal::Io)?;
    if !owner.is_admin_or(&running) {
        return Err(EndpointRefusal::Untrusted(format!(
            "the named pipe {} was created by {owner}, neither SYSTEM, Administrators nor the plugin's user ({running}): another user's process serves it",
            path.display()
        )));
    }
    Ok(client)
}

/// Restarts the Windows service `name` (stop, then start) through the
/// Service Control Manager, each state awaited within `timeout`.
pub fn restart_service(name: &str, timeout: Duration) -> io::Result<()> {
    service::restart(name, timeout)
}
