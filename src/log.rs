//! Logging to stderr, and only to stderr: stdout belongs to the kubelet
//! protocol. The kubelet shows our stderr only when we fail, so on success we
//! write at most one `info` line, and `debug` is for an admin running the
//! binary by hand.
//!
//! Every line goes through [`crate::redact::redact`] here, the one place
//! stderr is written: whatever a message quotes (an upstream's error text,
//! a value from the request), no registered secret and no token shape
//! reaches the kubelet's log, and no control character from a value
//! (an upstream's username, an annotation) reaches it unescaped.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Level {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
}

static LEVEL: AtomicU8 = AtomicU8::new(Level::Info as u8);

pub fn set_level(level: Level) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

pub fn enabled(level: Level) -> bool {
    level as u8 <= LEVEL.load(Ordering::Relaxed)
}

/// Writes one line. A closed or full stderr must not turn a successful pull
/// into a failure, so write errors are ignored.
pub fn write(level: Level, args: std::fmt::Arguments<'_>) {
    if !enabled(level) {
        return;
    }
    let tag = match level {
        Level::Error => "error",
        Level::Warn => "warning",
        Level::Info => "info",
        Level::Debug => "debug",
    };
    // One write(2) per line, so lines of concurrent plugin processes
    // sharing a stderr never interleave mid-line.
    let text = crate::redact::redact(&args.to_string());
    let text = crate::redact::escape_hidden(&text);
    let line = format!("wi-credential-provider: {tag}: {text}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Sends panic messages through [`write`] too, so a panic quoting a value
/// is redacted like every other line.
pub fn redact_panics() {
    std::panic::set_hook(Box::new(|info| {
        write(
            Level::Error,
            format_args!("internal error (please report it): {info}"),
        );
    }));
}

#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Warn, format_args!($($arg)*)) };
}

#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Info, format_args!($($arg)*)) };
}

#[macro_export]
macro_rules! debug {
    ($($arg:tt)*) => { $crate::log::write($crate::log::Level::Debug, format_args!($($arg)*)) };
}
