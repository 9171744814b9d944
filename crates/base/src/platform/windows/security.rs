//! The Win32 calls behind the Windows half of the platform layer: file
//! handles opened with `CreateFileW` (which takes a security descriptor
//! and the flag that keeps a link unfollowed, neither of which std's
//! `OpenOptions` can pass), who owns a file and what its DACL allows
//! (`GetSecurityInfo`), who runs us (the process token), and random bytes.
//!
//! This is the only `unsafe` code in the crate. Each block calls one
//! documented Win32 function with pointers to locals or to buffers the
//! same function (or `LocalAlloc` behind it) handed back, and every
//! buffer Windows allocates is freed by a guard ([`Local`]) on every path.
//! The bindings are `windows-sys` (the Rust for Windows project's raw
//! bindings, maintained by Microsoft, already in the tree through mio and
//! rustls-platform-verifier): std offers no security API, and the ACL
//! crates (`windows-acl` 0.3) are unmaintained.

use std::ffi::{OsStr, c_void};
use std::fs::File;
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::io::{AsRawHandle, FromRawHandle, RawHandle};
use std::path::Path;
use std::sync::OnceLock;

use windows_sys::Win32::Foundation::{
    CloseHandle, ERROR_SUCCESS, HANDLE, INVALID_HANDLE_VALUE, LocalFree,
};
use windows_sys::Win32::Security::Authorization::{
    ConvertSidToStringSidW, ConvertStringSecurityDescriptorToSecurityDescriptorW, GetSecurityInfo,
    SDDL_REVISION_1, SE_FILE_OBJECT, SE_KERNEL_OBJECT,
};
use windows_sys::Win32::Security::Cryptography::{
    BCRYPT_USE_SYSTEM_PREFERRED_RNG, BCryptGenRandom,
};
use windows_sys::Win32::Security::{
    ACCESS_ALLOWED_ACE, ACE_HEADER, ACL, DACL_SECURITY_INFORMATION, GetAce, GetTokenInformation,
    INHERIT_ONLY_ACE, OWNER_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR, PSID, SECURITY_ATTRIBUTES,
    TOKEN_QUERY, TOKEN_USER, TokenUser,
};
use windows_sys::Win32::Storage::FileSystem::{
    BY_HANDLE_FILE_INFORMATION, CreateDirectoryW, CreateFileW, FILE_SHARE_DELETE, FILE_SHARE_READ,
    FILE_SHARE_WRITE, FILE_TYPE_DISK, GetFileInformationByHandle, GetFileType,
};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

/// SYSTEM, the account the kubelet (and so the plugin) runs as.
pub(super) const SYSTEM: &str = "S-1-5-18";
/// BUILTIN\Administrators: owns what SYSTEM creates on many systems.
pub(super) const ADMINISTRATORS: &str = "S-1-5-32-544";
/// NT SERVICE\TrustedInstaller, which owns the system's own folders.
const TRUSTED_INSTALLER: &str = "S-1-5-80-956008885-3418522649-1831038044-1850803249-2720431978";
/// Groups that hold every user of the machine: Everyone, Authenticated
/// Users, BUILTIN\Users, INTERACTIVE.
const EVERYONE: [&str; 4] = ["S-1-1-0", "S-1-5-11", "S-1-5-32-545", "S-1-5-4"];

/// Access bits that change a file or a folder's contents, or who may use
/// it: write/append data (add file/subfolder), write extended attributes
/// and attributes, delete child, delete, change the DACL or owner, and
/// the generic write and all.
const WRITE_BITS: u32 =
    0x2 | 0x4 | 0x10 | 0x40 | 0x100 | 0x1_0000 | 0x4_0000 | 0x8_0000 | 0x4000_0000 | 0x1000_0000;
/// Access bits that read a file's data (list a folder): read data, the
/// generic read and all.
const READ_BITS: u32 = 0x1 | 0x8000_0000 | 0x1000_0000;

/// Frees what Windows allocated with `LocalAlloc` for us.
struct Local(*mut c_void);

impl Drop for Local {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the pointer came from a Win32 call documented to
            // return LocalAlloc'd memory the caller frees with LocalFree,
            // and it is freed once, here.
            unsafe { LocalFree(self.0) };
        }
    }
}

/// A handle we opened and must close.
struct Owned(HANDLE);

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: the handle was opened by us and is closed once, here.
        unsafe { CloseHandle(self.0) };
    }
}

fn wide(text: &OsStr) -> Vec<u16> {
    text.encode_wide().chain(std::iter::once(0)).collect()
}

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

/// `S-1-5-18` for a SID pointer Windows gave us.
fn sid_text(sid: PSID) -> io::Result<String> {
    let mut text: *mut u16 = std::ptr::null_mut();
    // SAFETY: `sid` points into a security descriptor or token buffer that
    // outlives this call; `text` receives a LocalAlloc'd string.
    if unsafe { ConvertSidToStringSidW(sid, &mut text) } == 0 {
        return Err(last_error());
    }
    let _free = Local(text.cast());
    let mut len = 0usize;
    // SAFETY: the string is NUL-terminated (the function's contract); we
    // read up to the NUL only.
    unsafe {
        while *text.add(len) != 0 {
            len += 1;
        }
        Ok(String::from_utf16_lossy(std::slice::from_raw_parts(
            text, len,
        )))
    }
}

/// The SID of the user this process runs as, read once.
pub(super) fn running_sid() -> io::Result<String> {
    static SID: OnceLock<Result<String, String>> = OnceLock::new();
    SID.get_or_init(|| read_running_sid().map_err(|e| e.to_string()))
        .clone()
        .map_err(io::Error::other)
}

fn read_running_sid() -> io::Result<String> {
    let mut token: HANDLE = std::ptr::null_mut();
    // SAFETY: GetCurrentProcess returns a pseudo-handle; `token` receives
    // a handle we close through `Owned`.
    if unsafe { OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &mut token) } == 0 {
        return Err(last_error());
    }
    let token = Owned(token);
    let mut needed = 0u32;
    // SAFETY: a size query: no buffer, `needed` receives the size.
    unsafe { GetTokenInformation(token.0, TokenUser, std::ptr::null_mut(), 0, &mut needed) };
    if needed == 0 {
        return Err(last_error());
    }
    // u64 words keep the buffer aligned for TOKEN_USER.
    let mut buffer = vec![0u64; usize::try_from(needed).unwrap_or(0).div_ceil(8)];
    // SAFETY: the buffer holds at least `needed` bytes, as asked.
    if unsafe {
        GetTokenInformation(
            token.0,
            TokenUser,
            buffer.as_mut_ptr().cast(),
            needed,
            &mut needed,
        )
    } == 0
    {
        return Err(last_error());
    }
    // SAFETY: on success the buffer starts with a TOKEN_USER whose SID
    // points inside the same buffer, alive until the end of this function.
    let user = unsafe { &*(buffer.as_ptr().cast::<TOKEN_USER>()) };
    sid_text(user.User.Sid)
}

/// A security descriptor built from SDDL, freed when dropped.
pub(super) struct Descriptor(Local);

impl Descriptor {
    /// Full control for SYSTEM, Administrators and the running user only,
    /// inherited by what is created inside (`OICI`), and protected (`P`)
    /// from the parent folder's inheritable entries: the Windows form of
    /// mode 0700/0600.
    pub(super) fn private() -> io::Result<Descriptor> {
        let me = running_sid()?;
        let sddl = format!("D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;FA;;;{me})");
        let text = wide(OsStr::new(&sddl));
        let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
        // SAFETY: `text` is a NUL-terminated UTF-16 string; `sd` receives a
        // LocalAlloc'd descriptor freed by `Local`.
        if unsafe {
            ConvertStringSecurityDescriptorToSecurityDescriptorW(
                text.as_ptr(),
                SDDL_REVISION_1,
                &mut sd,
                std::ptr::null_mut(),
            )
        } == 0
        {
            return Err(last_error());
        }
        Ok(Descriptor(Local(sd)))
    }

    fn attributes(&self) -> SECURITY_ATTRIBUTES {
        SECURITY_ATTRIBUTES {
            nLength: u32::try_from(std::mem::size_of::<SECURITY_ATTRIBUTES>()).unwrap_or(0),
            lpSecurityDescriptor: self.0.0,
            bInheritHandle: 0,
        }
    }
}

/// Opens or creates `path` with `CreateFileW`: `access` rights,
/// `disposition` (`OPEN_EXISTING`, `OPEN_ALWAYS`, `CREATE_NEW`), `flags`
/// (`FILE_FLAG_OPEN_REPARSE_POINT` keeps a link unfollowed), and, for a
/// file it creates, `descriptor` (else the folder's inherited DACL).
/// Every handle shares read, write and delete, as std's do, so that a
/// reader never stops a writer's rename.
pub(super) fn create_file(
    path: &Path,
    access: u32,
    disposition: u32,
    flags: u32,
    descriptor: Option<&Descriptor>,
) -> io::Result<File> {
    let name = wide(path.as_os_str());
    let attributes = descriptor.map(Descriptor::attributes);
    let attributes_ptr = attributes
        .as_ref()
        .map_or(std::ptr::null(), |a| a as *const SECURITY_ATTRIBUTES);
    // SAFETY: `name` is NUL-terminated; `attributes` (and the descriptor
    // it points to) outlive the call; a valid handle is owned by the File.
    let handle = unsafe {
        CreateFileW(
            name.as_ptr(),
            access,
            FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
            attributes_ptr,
            disposition,
            flags,
            std::ptr::null_mut(),
        )
    };
    if handle == INVALID_HANDLE_VALUE {
        return Err(last_error());
    }
    // SAFETY: a handle CreateFileW just returned, owned by nothing else.
    Ok(unsafe { File::from_raw_handle(handle as RawHandle) })
}

/// Creates folder `path` with `descriptor` (or the parent's inherited
/// DACL).
pub(super) fn create_directory(path: &Path, descriptor: Option<&Descriptor>) -> io::Result<()> {
    let name = wide(path.as_os_str());
    let attributes = descriptor.map(Descriptor::attributes);
    let attributes_ptr = attributes
        .as_ref()
        .map_or(std::ptr::null(), |a| a as *const SECURITY_ATTRIBUTES);
    // SAFETY: as in `create_file`.
    if unsafe { CreateDirectoryW(name.as_ptr(), attributes_ptr) } == 0 {
        return Err(last_error());
    }
    Ok(())
}

/// What `GetFileInformationByHandle` says of an open file; `None` for a
/// handle that is not a file on a disk (a pipe, a console, a device).
pub(super) struct HandleInfo {
    pub(super) attributes: u32,
    pub(super) volume: u32,
    pub(super) index: u64,
    pub(super) links: u32,
    pub(super) len: u64,
}

pub(super) fn handle_info(file: &File) -> io::Result<Option<HandleInfo>> {
    let handle = file.as_raw_handle() as HANDLE;
    // SAFETY: a handle owned by `file`, alive for the call.
    if unsafe { GetFileType(handle) } != FILE_TYPE_DISK {
        return Ok(None);
    }
    let mut info: BY_HANDLE_FILE_INFORMATION = BY_HANDLE_FILE_INFORMATION::default();
    // SAFETY: `info` is a local of the type the function fills.
    if unsafe { GetFileInformationByHandle(handle, &mut info) } == 0 {
        return Err(last_error());
    }
    Ok(Some(HandleInfo {
        attributes: info.dwFileAttributes,
        volume: info.dwVolumeSerialNumber,
        index: (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow),
        links: info.nNumberOfLinks,
        len: (u64::from(info.nFileSizeHigh) << 32) | u64::from(info.nFileSizeLow),
    }))
}

/// One allow entry of a DACL that applies to the object itself.
struct Allowed {
    sid: String,
    mask: u32,
}

/// Who owns an open file and who besides its owner may read or write it.
pub(super) struct Security {
    pub(super) owner: String,
    pub(super) shared: bool,
    pub(super) others_write: bool,
    pub(super) everyone_writes: bool,
    pub(super) shown: String,
}

/// Reads the owner and DACL of `file` (its handle needs `READ_CONTROL`,
/// which every handle of ours has) and weighs the allow entries: SYSTEM,
/// Administrators, TrustedInstaller, the owner and the running user are
/// trusted; any other SID allowed to read or write makes the file shared.
/// Deny entries only take rights away, so they are not needed to find who
/// may be let in. No DACL at all lets everyone do everything.
pub(super) fn security(file: &File) -> io::Result<Security> {
    let handle = file.as_raw_handle() as HANDLE;
    let mut owner: PSID = std::ptr::null_mut();
    let mut dacl: *mut ACL = std::ptr::null_mut();
    let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: out-pointers to locals; `owner` and `dacl` point into `sd`,
    // which is LocalAlloc'd and freed by `_free` after their last use.
    let status = unsafe {
        GetSecurityInfo(
            handle,
            SE_FILE_OBJECT,
            OWNER_SECURITY_INFORMATION | DACL_SECURITY_INFORMATION,
            &mut owner,
            std::ptr::null_mut(),
            &mut dacl,
            std::ptr::null_mut(),
            &mut sd,
        )
    };
    if status != ERROR_SUCCESS {
        return Err(io::Error::from_raw_os_error(
            i32::try_from(status).unwrap_or(i32::MAX),
        ));
    }
    let _free = Local(sd);
    let owner = if owner.is_null() {
        String::new()
    } else {
        sid_text(owner)?
    };
    if dacl.is_null() {
        return Ok(Security {
            owner,
            shared: true,
            others_write: true,
            everyone_writes: true,
            shown: "no DACL (everyone has full access)".into(),
        });
    }
    // SAFETY: a non-null DACL pointer into `sd`, alive until `_free`.
    let allowed = unsafe { allowed_entries(dacl)? };
    Ok(weigh(owner, &allowed))
}

/// The owner SID of the kernel object behind `handle` (a named pipe):
/// its security descriptor's owner, which is its creator's. The handle
/// needs `READ_CONTROL`, which a pipe opened for reading has.
pub(super) fn object_owner(handle: RawHandle) -> io::Result<String> {
    let mut owner: PSID = std::ptr::null_mut();
    let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
    // SAFETY: out-pointers to locals; `owner` points into `sd`, which is
    // LocalAlloc'd and freed by `_free` after its last use.
    let status = unsafe {
        GetSecurityInfo(
            handle as HANDLE,
            SE_KERNEL_OBJECT,
            OWNER_SECURITY_INFORMATION,
            &mut owner,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut sd,
        )
    };
    if status != ERROR_SUCCESS {
        return Err(io::Error::from_raw_os_error(
            i32::try_from(status).unwrap_or(i32::MAX),
        ));
    }
    let _free = Local(sd);
    if owner.is_null() {
        return Err(io::Error::other("the pipe has no owner"));
    }
    sid_text(owner)
}

/// The allow entries of `dacl` that apply to the object itself.
///
/// # Safety
/// `dacl` points to a valid ACL that outlives the call.
unsafe fn allowed_entries(dacl: *mut ACL) -> io::Result<Vec<Allowed>> {
    // SAFETY: the caller's promise.
    let count = unsafe { (*dacl).AceCount };
    let mut allowed = Vec::new();
    for index in 0..u32::from(count) {
        let mut ace: *mut c_void = std::ptr::null_mut();
        // SAFETY: `index` is below the ACL's AceCount; `ace` receives a
        // pointer into the ACL.
        if unsafe { GetAce(dacl, index, &mut ace) } == 0 || ace.is_null() {
            continue;
        }
        // SAFETY: every ACE starts with an ACE_HEADER.
        let header = unsafe { &*(ace.cast::<ACE_HEADER>()) };
        if u32::from(header.AceType) != 0 || u32::from(header.AceFlags) & INHERIT_ONLY_ACE != 0 {
            // Not ACCESS_ALLOWED_ACE_TYPE, or only for what is created
            // inside: it grants nothing on this object.
            continue;
        }
        // SAFETY: an allow ACE is an ACCESS_ALLOWED_ACE; its SID starts at
        // SidStart and lies within AceSize.
        let allow = unsafe { &*(ace.cast::<ACCESS_ALLOWED_ACE>()) };
        let sid_ptr = std::ptr::addr_of!(allow.SidStart)
            .cast_mut()
            .cast::<c_void>();
        allowed.push(Allowed {
            sid: sid_text(sid_ptr)?,
            mask: allow.Mask,
        });
    }
    Ok(allowed)
}

/// Who besides `owner` the allow entries let read or write: SYSTEM,
/// Administrators, TrustedInstaller, the owner and the running user are
/// trusted; any other SID allowed to read or write makes the file shared.
fn weigh(owner: String, allowed: &[Allowed]) -> Security {
    let me = running_sid().unwrap_or_default();
    let trusted = |sid: &str| {
        sid == SYSTEM
            || sid == ADMINISTRATORS
            || sid == TRUSTED_INSTALLER
            || sid == owner
            || sid == me
    };
    let mut shared = false;
    let mut others_write = false;
    let mut everyone_writes = false;
    let mut let_in = Vec::new();
    for entry in allowed {
        if trusted(&entry.sid) {
            continue;
        }
        let writes = entry.mask & WRITE_BITS != 0;
        let reads = entry.mask & READ_BITS != 0;
        if writes || reads {
            shared = true;
            let_in.push(format!(
                "{} {}",
                entry.sid,
                if writes { "write" } else { "read" }
            ));
        }
        if writes {
            others_write = true;
            everyone_writes |= EVERYONE.contains(&entry.sid.as_str());
        }
    }
    let shown = if let_in.is_empty() {
        format!("a DACL for its owner {owner} and the administrators only")
    } else {
        format!("a DACL that lets {}", let_in.join(", "))
    };
    Security {
        owner,
        shared,
        others_write,
        everyone_writes,
        shown,
    }
}

/// Fills `buf` from the system's preferred random generator.
pub(super) fn random(buf: &mut [u8]) -> bool {
    let Ok(len) = u32::try_from(buf.len()) else {
        return false;
    };
    // SAFETY: `buf` is valid for `len` bytes of writes.
    let status = unsafe {
        BCryptGenRandom(
            std::ptr::null_mut(),
            buf.as_mut_ptr(),
            len,
            BCRYPT_USE_SYSTEM_PREFERRED_RNG,
        )
    };
    status == 0
}
