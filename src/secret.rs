//! A wrapper for values that must never be shown: service account tokens,
//! registry passwords, refresh tokens, cloud access tokens and secret keys.
//!
//! `Secret` has no `Display` and a redacted `Debug`, so a secret cannot reach
//! stderr through a `{}` or `{:?}` by accident. The one way to read it is
//! [`Secret::expose`], which is easy to grep for in review.
//!
//! Every secret is also registered, when it is made, with the process-wide
//! redaction registry below: an upstream that quotes back a token we sent
//! it (Google IAM quoting the bearer, ACR quoting the Entra token, a
//! service quoting the service account token's signature) must not get it
//! onto stderr through its error message. Registering in the constructor
//! means no call site can forget; [`crate::log`] masks every registered
//! secret in every line it writes (see [`known_spans`]).

use std::collections::HashSet;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

use zeroize::Zeroize;

/// A secret string. Cloning is allowed (the cache and the response both need
/// it), printing is not.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        let secret = Secret(value.into());
        register(&secret.0);
        secret
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

/// Secrets shorter than this are not registered: they would mask ordinary
/// words, and nothing we obtain is that short. Between this and [`WINDOW`]
/// bytes a secret is masked only whole (a short registry password from
/// Vault, say).
const MIN_REGISTERED: usize = 8;

/// Any run of this many bytes of a registered secret is masked, so an
/// upstream quoting part of a token (cut, or only a JWT's signature) does
/// not get the part through either.
pub const WINDOW: usize = 16;

/// The registry: for each registered secret, the hash of each of its
/// windows (of [`WINDOW`] bytes, or the whole secret when shorter); the
/// window's width is hashed in. Only hashes are kept, not the secrets: the
/// registry outlives the `Secret` values and must not undo the wiping in
/// `Drop`. Process-wide like the log level: one invocation, one set of
/// secrets.
static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    hashes: HashSet::with_hasher(BuildHasherDefault::new()),
    widths: Vec::new(),
});

/// Window hashes in a hash set keyed by the hashes themselves: registering
/// is on every request's path (the service account token, a cached
/// password: a thousand windows each), so it must cost an insert and no
/// more, and masking a line is one lookup per window of the line.
struct Registry {
    hashes: HashSet<u64, BuildHasherDefault<Prehashed>>,
    /// The window widths in use: [`WINDOW`], and the length of each secret
    /// shorter than that.
    widths: Vec<usize>,
}

/// The set's hasher: its keys are already [`window_hash`] values, so they
/// are their own hash.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed; fold anything else in all the same.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A window's hash: its width, then each 8-byte word (the last one padded
/// with zeros), each step through SplitMix64's finaliser, a bijection on
/// `u64` that spreads every input bit over the output. A token registers a
/// thousand windows on every request, and SipHash (`DefaultHasher`) spent
/// more there than the rest of a cache hit's own code; what the set needs
/// is spread, not resistance to chosen collisions: a collision masks text
/// that was not a secret, and never lets a secret through, since a secret's
/// own windows always hash to what was registered.
fn window_hash(window: &[u8]) -> u64 {
    let mut hash = mix(u64::try_from(window.len()).unwrap_or(u64::MAX));
    for word in window.chunks(8) {
        let word = <[u8; 8]>::try_from(word).unwrap_or_else(|_| {
            let mut padded = [0u8; 8];
            padded
                .iter_mut()
                .zip(word)
                .for_each(|(to, from)| *to = *from);
            padded
        });
        hash = mix(hash ^ u64::from_le_bytes(word));
    }
    hash
}

/// SplitMix64's output function (Steele, Lea and Flood, 2014).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Registers `value` for redaction (see [`known_spans`]).
pub fn register(value: &str) {
    let bytes = value.as_bytes();
    if bytes.len() < MIN_REGISTERED {
        return;
    }
    let width = bytes.len().min(WINDOW);
    let mut registry = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    let windows = bytes.windows(width);
    registry.hashes.reserve(windows.len());
    registry.hashes.extend(windows.map(window_hash));
    if !registry.widths.contains(&width) {
        registry.widths.push(width);
    }
}

/// The byte ranges of `text` covered by a window of a registered secret,
/// merged and widened to character boundaries, in order.
pub fn known_spans(text: &str) -> Vec<std::ops::Range<usize>> {
    let registry = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    if registry.hashes.is_empty() {
        return Vec::new();
    }
    let bytes = text.as_bytes();
    let mut spans: Vec<std::ops::Range<usize>> = Vec::new();
    for &width in &registry.widths {
        for (at, window) in bytes.windows(width).enumerate() {
            if registry.hashes.contains(&window_hash(window)) {
                spans.push(at..at + width);
            }
        }
    }
    drop(registry);
    spans.sort_by_key(|r| r.start);
    let mut merged: Vec<std::ops::Range<usize>> = Vec::new();
    for mut span in spans {
        while !text.is_char_boundary(span.start) {
            span.start -= 1;
        }
        while !text.is_char_boundary(span.end) {
            span.end += 1;
        }
        match merged.last_mut() {
            Some(last) if span.start <= last.end => last.end = last.end.max(span.end),
            _ => merged.push(span),
        }
    }
    merged
}

/// `text` with every run of a registered secret replaced by `<redacted>`.
pub fn mask_known(text: &str) -> String {
    let spans = known_spans(text);
    if spans.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for span in spans {
        out.push_str(text.get(from..span.start).unwrap_or_default());
        out.push_str("<redacted>");
        from = span.end;
    }
    out.push_str(text.get(from..).unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_made_secret_is_masked_whole_and_in_parts() {
        let token = "Zm9vYmFyYmF6cXV4-registered-secret-9f8e7d6c5b4a3921";
        let _s = Secret::new(token);
        assert_eq!(
            mask_known(&format!("bearer {token} is invalid")),
            "bearer <redacted> is invalid"
        );
        // Any 16-byte run of it, wherever it starts, and two runs.
        let part = &token[7..30];
        assert_eq!(mask_known(&format!("x {part} y")), "x <redacted> y");
        let tail = &token[token.len() - 16..];
        assert_eq!(
            mask_known(&format!("{tail}, {part}")),
            "<redacted>, <redacted>"
        );
        // Fifteen bytes are not enough to tell it from ordinary text.
        let short = &token[3..18];
        assert_eq!(mask_known(short), short);
        assert_eq!(mask_known("ordinary words"), "ordinary words");
    }

    #[test]
    fn short_secrets_are_masked_whole_only() {
        let _s = Secret::new("pw-4Kq9zX1");
        assert_eq!(mask_known("password pw-4Kq9zX1."), "password <redacted>.");
        assert_eq!(mask_known("pw-4Kq9z"), "pw-4Kq9z");
        // Too short to register at all.
        let _t = Secret::new("AWS");
        assert_eq!(mask_known("user AWS"), "user AWS");
    }

    #[test]
    fn multibyte_text_around_a_secret_stays_valid() {
        let _s = Secret::new("é-secret-value-with-an-accent-ü");
        assert_eq!(
            mask_known("« é-secret-value-with-an-accent-ü »"),
            "« <redacted> »"
        );
    }

    #[test]
    fn window_hashes_tell_padding_and_width_apart() {
        // The zero padding of the last word is not confused with zero bytes.
        assert_ne!(window_hash(b"abcdefgh"), window_hash(b"abcdefgh\0"));
        assert_ne!(window_hash(b""), window_hash(b"\0"));
        // Every window of a text of distinct windows hashes apart.
        let text: Vec<u8> = (0..=255u8).collect();
        let hashes: HashSet<u64> = text.windows(WINDOW).map(window_hash).collect();
        assert_eq!(hashes.len(), 256 - WINDOW + 1);
    }

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("hunter2-super-secret");
        let shown = format!("{s:?} {:?}", Some(&s));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("redacted"));
    }
}
