//! The Windows build run the way a Windows kubelet runs it, under Wine:
//! `make test-windows` (part of `make test`) cross-builds the `.exe` (dev
//! profile),
//! makes a Wine prefix of the tests' own with the one shim Wine 8 needs
//! (tests/windows/setup.sh), and passes both here through
//! `WICP_WINDOWS_EXE` and `WINEPREFIX`.
//!
//! Inside [`on_windows`], [`super::plugin::run`] and everything built on
//! it (the provider helpers of the other support modules) exec the `.exe`
//! under Wine instead of the Linux binary, with the same stdin, stdout,
//! stderr and exit status the kubelet's `os/exec` would see.

use std::cell::Cell;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
}

/// The Windows `.exe` under test.
pub fn exe() -> PathBuf {
    PathBuf::from(std::env::var_os("WICP_WINDOWS_EXE").expect(
        "WICP_WINDOWS_EXE names the Windows build: run these tests with `make test-windows`",
    ))
}

fn wine() -> PathBuf {
    std::env::var_os("WICP_WINE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/wine/wine64"))
}

/// Runs `f` with every plugin run of this thread going to the `.exe`.
pub fn on_windows<T>(f: impl FnOnce() -> T) -> T {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            ACTIVE.with(|a| a.set(false));
        }
    }
    ACTIVE.with(|a| a.set(true));
    let _reset = Reset;
    f()
}

pub fn active() -> bool {
    ACTIVE.with(Cell::get)
}

/// What to exec for `program`: Wine and the program, inside
/// [`on_windows`]; else the program itself.
pub fn wrap(program: &Path) -> (PathBuf, Vec<OsString>) {
    if active() {
        (wine(), vec![program.as_os_str().to_os_string()])
    } else {
        (program.to_path_buf(), Vec::new())
    }
}

/// The variables Wine itself needs (its prefix, quiet), inside
/// [`on_windows`].
pub fn env() -> Vec<(OsString, OsString)> {
    if !active() {
        return Vec::new();
    }
    let mut vars = vec![(OsString::from("WINEDEBUG"), OsString::from("-all"))];
    for name in ["WINEPREFIX", "HOME"] {
        if let Some(value) = std::env::var_os(name) {
            vars.push((OsString::from(name), value));
        }
    }
    vars
}

/// A Linux path as the Windows program names it: `Z:\tmp\x` (Wine maps
/// drive Z: to `/`).
pub fn path(p: &Path) -> String {
    format!("Z:{}", p.display()).replace('/', "\\")
}
