//! A wrapper for values that must never be shown: service account tokens,
//! registry passwords, refresh tokens, cloud access tokens and secret keys.
//!
//! `Secret` has no `Display` and a redacted `Debug`, so a secret cannot reach
//! stderr through a `{}` or `{:?}` by accident. The one way to read it is
//! [`Secret::expose`], which is easy to grep for in review.

use std::fmt;

use zeroize::Zeroize;

/// A secret string. Cloning is allowed (the cache and the response both need
/// it), printing is not.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// Reads the secret. Every call site is a place where a secret leaves the
    /// process (an HTTP body, the response on stdout) or is compared.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret(<redacted, {} bytes>)", self.0.len())
    }
}

impl Drop for Secret {
    /// Wipes the bytes before the allocation is released, so a core dump of
    /// a later phase of the process does not carry the token around.
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("hunter2-super-secret");
        let shown = format!("{s:?} {:?}", Some(&s));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("redacted"));
    }
}
