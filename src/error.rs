//! The one error type of the plugin.
//!
//! Every failure ends as a single line on stderr, which the kubelet copies
//! into its own log (`error execing credential provider plugin ...: exit
//! status 1: <stderr>`). So an error carries two parts written for the person
//! reading that log: what failed, and what to do about it. Messages are built
//! from values we checked ourselves or from sanitised upstream error codes,
//! never from secrets.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    what: String,
    fix: Option<String>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error saying what failed.
    pub fn new(what: impl Into<String>) -> Self {
        Error {
            what: what.into(),
            fix: None,
        }
    }

    /// Adds the remedy: one sentence telling the admin what to change.
    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    /// Puts context in front of the message, keeping the remedy.
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.what = format!("{context}: {}", self.what);
        self
    }

    pub fn what(&self) -> &str {
        &self.what
    }

    pub fn remedy(&self) -> Option<&str> {
        self.fix.as_deref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)?;
        if let Some(fix) = &self.fix {
            write!(f, "; fix: {fix}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// Quotes a value we received from outside for an error message: escaped
/// (no control characters reach the kubelet's log) and cut to a length that
/// keeps the message one readable line.
pub fn quote(value: &str) -> String {
    const MAX: usize = 120;
    let mut shown: String = value.chars().take(MAX).collect();
    if value.chars().count() > MAX {
        shown.push('…');
    }
    format!("{shown:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_joins_what_and_fix() {
        let e = Error::new("registry \"x\" is not allowed")
            .fix("add --registry x")
            .context("passthrough");
        assert_eq!(
            e.to_string(),
            "passthrough: registry \"x\" is not allowed; fix: add --registry x"
        );
    }

    #[test]
    fn quote_escapes_and_cuts() {
        assert_eq!(quote("a\nb"), "\"a\\nb\"");
        let long = "x".repeat(500);
        assert!(quote(&long).chars().count() < 130);
    }
}
