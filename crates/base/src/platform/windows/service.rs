//! Restarting a Windows service through the Service Control Manager: how
//! `node install` restarts the kubelet on a Windows node (AKS runs it as
//! the NSSM service `Kubelet`, EKS and kube-up as `kubelet`; service names
//! are case-insensitive).
//!
//! The SCM API, not `Restart-Service` or `sc.exe`: nothing is executed
//! (the installer never runs a program it found on the node), the wait
//! for each state is ours and bounded, and the errors are Win32 codes
//! instead of a console's words. Stopping NSSM's service stops the
//! kubelet it wraps; starting it runs `kubeletstart.ps1`, which rereads
//! `kubeclusterconfig.json` and the credential-provider config.
//!
//! Besides `security.rs`, the only `unsafe` code in the crate: each block
//! calls one documented advapi32 function on a handle this module opened
//! and closes through a guard ([`Handle`]) on every path.

use std::ffi::OsStr;
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::time::{Duration, Instant};

use windows_sys::Win32::Foundation::{
    ERROR_SERVICE_ALREADY_RUNNING, ERROR_SERVICE_NOT_ACTIVE, GetLastError,
};
use windows_sys::Win32::System::Services::{
    CloseServiceHandle, ControlService, OpenSCManagerW, OpenServiceW, QueryServiceStatus,
    SC_HANDLE, SC_MANAGER_CONNECT, SERVICE_CONTROL_STOP, SERVICE_QUERY_STATUS, SERVICE_RUNNING,
    SERVICE_START, SERVICE_STATUS, SERVICE_STOP, SERVICE_STOPPED, StartServiceW,
};

/// An SCM handle, closed on drop.
struct Handle(SC_HANDLE);

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from OpenSCManagerW/OpenServiceW, is not
        // null (checked on open) and is closed exactly once, here.
        unsafe { CloseServiceHandle(self.0) };
    }
}

fn wide(text: &str) -> Vec<u16> {
    OsStr::new(text).encode_wide().chain(Some(0)).collect()
}

fn last_error(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn open(name: &str) -> io::Result<Handle> {
    // SAFETY: null machine and database names mean the local SCM's
    // active database; the result is checked for null before use.
    let manager = unsafe { OpenSCManagerW(std::ptr::null(), std::ptr::null(), SC_MANAGER_CONNECT) };
    if manager.is_null() {
        return Err(last_error("cannot connect to the Service Control Manager"));
    }
    let manager = Handle(manager);
    let name = wide(name);
    // SAFETY: `manager` is open and `name` is a NUL-terminated UTF-16
    // string that outlives the call.
    let service = unsafe {
        OpenServiceW(
            manager.0,
            name.as_ptr(),
            SERVICE_STOP | SERVICE_START | SERVICE_QUERY_STATUS,
        )
    };
    if service.is_null() {
        return Err(last_error("cannot open the service"));
    }
    Ok(Handle(service))
}

/// A status for a call to fill.
fn no_status() -> SERVICE_STATUS {
    SERVICE_STATUS {
        dwServiceType: 0,
        dwCurrentState: 0,
        dwControlsAccepted: 0,
        dwWin32ExitCode: 0,
        dwServiceSpecificExitCode: 0,
        dwCheckPoint: 0,
        dwWaitHint: 0,
    }
}

fn state(service: &Handle) -> io::Result<u32> {
    let mut status = no_status();
    // SAFETY: `service` is open with SERVICE_QUERY_STATUS and `status` is
    // a local the call fills.
    if unsafe { QueryServiceStatus(service.0, &mut status) } == 0 {
        return Err(last_error("cannot query the service"));
    }
    Ok(status.dwCurrentState)
}

/// Polls until the service is in `wanted`, or `deadline`.
fn wait_for(service: &Handle, wanted: u32, deadline: Instant, what: &str) -> io::Result<()> {
    loop {
        let now = state(service)?;
        if now == wanted {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the service did not {what} in time (its state is {now})"),
            ));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Stops the service `name` (when running), waits until it has stopped,
/// starts it and waits until it runs, all within `timeout`.
pub(super) fn restart(name: &str, timeout: Duration) -> io::Result<()> {
    let deadline = Instant::now() + timeout;
    let service = open(name)?;
    let mut status = no_status();
    // SAFETY: `service` is open with SERVICE_STOP; `status` is a local.
    if unsafe { ControlService(service.0, SERVICE_CONTROL_STOP, &mut status) } == 0 {
        // SAFETY: reads this thread's last error, set by the call above.
        let code = unsafe { GetLastError() };
        if code != ERROR_SERVICE_NOT_ACTIVE {
            return Err(last_error("cannot stop the service"));
        }
    }
    wait_for(&service, SERVICE_STOPPED, deadline, "stop")?;
    // SAFETY: `service` is open with SERVICE_START; no arguments.
    if unsafe { StartServiceW(service.0, 0, std::ptr::null()) } == 0 {
        // SAFETY: as above.
        let code = unsafe { GetLastError() };
        if code != ERROR_SERVICE_ALREADY_RUNNING {
            return Err(last_error("cannot start the service"));
        }
    }
    wait_for(&service, SERVICE_RUNNING, deadline, "start")
}
