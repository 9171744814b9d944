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

use std::fmt;
use std::sync::Mutex;

use zeroize::Zeroize;

/// A secret string. Cloning is allowed (the cache and the response both need
/// it), printing is not.
#[derive(Clone)]
pub struct Secret(String);

/// In constant time for values of one length (subtle's `ct_eq`), so that
/// how long a comparison takes says nothing about where two secrets
/// differ. A length difference is not hidden.
impl PartialEq for Secret {
    fn eq(&self, other: &Self) -> bool {
        use subtle::ConstantTimeEq;
        self.0.as_bytes().ct_eq(other.0.as_bytes()).into()
    }
}

impl Eq for Secret {}

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        let secret = Secret(value.into());
        register(&secret.0);
        secret
    }

    /// A secret an admin wrote in a file (a client secret): registered
    /// however short it is. What we obtain from an upstream is never
    /// shorter than `MIN_REGISTERED` bytes; an admin's secret can be,
    /// and it must not reach stderr whole because of that. A short one is
    /// masked wherever its bytes appear, ordinary words included: an odd
    /// log line is the lesser harm.
    pub fn from_admin(value: impl Into<String>) -> Self {
        let secret = Secret(value.into());
        register_at_any_length(&secret.0);
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
/// words, and nothing we obtain is that short (an admin's file can be:
/// [`Secret::from_admin`]). Between this and [`WINDOW`]
/// bytes a secret is masked only whole (a short registry password from
/// Vault, say).
const MIN_REGISTERED: usize = 8;

/// Any run of this many bytes of a registered secret is masked, so an
/// upstream quoting part of a token (cut, or only a JWT's signature) does
/// not get the part through either.
const WINDOW: usize = 16;

/// The registry: for each registered secret, the hash of each of its
/// windows (of [`WINDOW`] bytes, or the whole secret when shorter); the
/// window's width is hashed in. Only hashes are kept, not the secrets: the
/// registry outlives the `Secret` values and must not undo the wiping in
/// `Drop`. Process-wide like the log level: one invocation, one set of
/// secrets.
static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    hashes: WindowSet::new(),
    widths: Vec::new(),
});

struct Registry {
    hashes: WindowSet,
    /// The window widths in use: [`WINDOW`], and the length of each secret
    /// shorter than that.
    widths: Vec<usize>,
}

/// A set of window hashes: open addressing with linear probing in a table
/// kept at most half full. Registering is on every request's path (the
/// service account token, a cached password: a thousand windows each), so
/// an insert must cost a few instructions, and masking a line is one lookup
/// per window of the line; a general hash set spent more on a hit's token
/// than the rest of the hit's own code. The keys are [`each_window`]
/// hashes, already spread, so a key's low bits are its slot. A zero slot is
/// empty, so a hash of 0 is kept as 1 (it then also masks what hashes to 1,
/// as any collision does).
struct WindowSet {
    /// A power of two long, or empty.
    slots: Vec<u64>,
    len: usize,
    /// 64 less the number of bits of a slot's index: a key's slot is its
    /// top bits (see [`WindowSet::slot_of`]).
    shift: u32,
}

impl WindowSet {
    const fn new() -> Self {
        WindowSet {
            slots: Vec::new(),
            len: 0,
            shift: 64,
        }
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Makes room for `more` keys without growing again.
    fn reserve(&mut self, more: usize) {
        if (self.len + more).saturating_mul(2) > self.slots.len() {
            self.grow(self.len + more);
        }
    }

    #[cold]
    fn grow(&mut self, keys: usize) {
        let wanted = keys.saturating_mul(2).next_power_of_two().max(2);
        let old = std::mem::replace(&mut self.slots, vec![0; wanted]);
        self.shift = 64 - wanted.trailing_zeros();
        self.len = 0;
        for key in old.into_iter().filter(|&key| key != 0) {
            self.insert_reserved(key);
        }
    }

    #[cfg(test)]
    fn insert(&mut self, hash: u64) {
        self.reserve(1);
        self.insert_reserved(hash);
    }

    /// Inserts `hash`, room for it having been made ([`WindowSet::reserve`]):
    /// a registering secret reserves for all its windows once.
    fn insert_reserved(&mut self, hash: u64) {
        let key = hash.max(1);
        let mut at = self.slot_of(key);
        let mask = self.slots.len() - 1;
        while let Some(slot) = self.slots.get_mut(at) {
            if *slot == key {
                return;
            }
            if *slot == 0 {
                *slot = key;
                self.len += 1;
                return;
            }
            at = (at + 1) & mask;
        }
    }

    fn contains(&self, hash: u64) -> bool {
        if self.slots.is_empty() {
            return false;
        }
        let key = hash.max(1);
        let mut at = self.slot_of(key);
        let mask = self.slots.len() - 1;
        // The table is never full, so the probe meets an empty slot.
        while let Some(&slot) = self.slots.get(at) {
            if slot == key {
                return true;
            }
            if slot == 0 {
                return false;
            }
            at = (at + 1) & mask;
        }
        false
    }

    /// Where a key's probe starts: its top bits (the table's length is a
    /// power of two). The keys are products with an odd constant
    /// ([`each_window`]), whose top bits depend on every bit of the
    /// window's hash: Fibonacci hashing.
    fn slot_of(&self, key: u64) -> usize {
        usize::try_from(key.checked_shr(self.shift).unwrap_or(0)).unwrap_or(0)
    }
}

/// Calls `each` with the position and hash of every window of `width`
/// bytes of `bytes`.
///
/// The hash is a polynomial one (Rabin and Karp) kept as the window
/// slides, so a window costs a multiply and an add whatever its width,
/// with the width mixed in and spread by one multiply with an odd
/// constant (a bijection: two windows collide exactly when their
/// polynomial hashes do); the set takes a key's top bits for its slot. A
/// token registers a thousand windows on every request, and hashing each
/// window afresh was a tenth of a cache hit; a three-multiply finaliser
/// was still a tenth of what remained (issue 47). What the set needs is
/// spread, not resistance to chosen collisions: a collision masks text
/// that was not a secret, and never lets a secret through, since a
/// secret's own windows always hash to what was registered.
fn each_window(bytes: &[u8], width: usize, mut each: impl FnMut(usize, u64)) {
    if width == 0 || bytes.len() < width {
        return;
    }
    let salt = mix(u64::try_from(width).unwrap_or(u64::MAX));
    // BASE to the power width - 1: the weight of the byte leaving.
    let leaving = (1..width).fold(1u64, |p, _| p.wrapping_mul(BASE));
    let (first, rest) = bytes.split_at(width);
    let mut rolling = first.iter().fold(0u64, |h, &b| {
        h.wrapping_mul(BASE).wrapping_add(u64::from(b))
    });
    each(0, (rolling ^ salt).wrapping_mul(SPREAD));
    for (at, (&out, &entering)) in bytes.iter().zip(rest).enumerate() {
        rolling = rolling
            .wrapping_sub(u64::from(out).wrapping_mul(leaving))
            .wrapping_mul(BASE)
            .wrapping_add(u64::from(entering));
        each(at + 1, (rolling ^ salt).wrapping_mul(SPREAD));
    }
}

/// The rolling hash's multiplier: odd (so multiplying by it loses no
/// bits), the golden ratio's fraction as in Fibonacci hashing.
const BASE: u64 = 0x9e37_79b9_7f4a_7c15;

/// The spreading multiplier of a window's hash: odd, and another than
/// [`BASE`] (SplitMix64's first), so the key is not a power series of one
/// constant.
const SPREAD: u64 = 0xbf58_476d_1ce4_e5b9;

#[cfg(test)]
fn window_hash(window: &[u8]) -> u64 {
    let mut hash = 0;
    each_window(window, window.len(), |_, h| hash = h);
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
    if value.len() >= MIN_REGISTERED {
        register_at_any_length(value);
    }
}

fn register_at_any_length(value: &str) {
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        return;
    }
    let width = bytes.len().min(WINDOW);
    let mut registry = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    registry.hashes.reserve(bytes.len() - width + 1);
    each_window(bytes, width, |_, hash| {
        registry.hashes.insert_reserved(hash)
    });
    if !registry.widths.contains(&width) {
        registry.widths.push(width);
    }
}

/// The byte ranges of `text` covered by a window of a registered secret,
/// merged and widened to character boundaries, in order.
///
/// A secret leaves the process in more forms than one: raw in a header,
/// percent-encoded in a form body (`pa%24%24w0rd` for `pa$$w0rd`),
/// JSON-escaped in a JSON body, base64 inside `Authorization: Basic`. An
/// upstream quoting its request back quotes that form, so the text is
/// also read through each decoding (`views`) and a window found in a
/// decoded view masks the text it was decoded from. Decoding here, when a
/// line is written, rather than registering every encoding of every
/// secret keeps the cost off a cache hit, which registers a token and
/// writes one line.
fn known_spans(text: &str) -> Vec<std::ops::Range<usize>> {
    let registry = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    if registry.hashes.is_empty() {
        return Vec::new();
    }
    let mut spans: Vec<std::ops::Range<usize>> = Vec::new();
    registry.find(text.as_bytes(), |found| spans.push(found));
    let narrowest = registry.widths.iter().copied().min().unwrap_or(WINDOW);
    for view in views(text, narrowest) {
        registry.find(&view.bytes, |found| {
            let from = view.origin.get(found.start).map(|o| o.start);
            let to = view.origin.get(found.end.saturating_sub(1)).map(|o| o.end);
            if let (Some(from), Some(to)) = (from, to) {
                spans.push(from..to);
            }
        });
    }
    drop(registry);
    spans.sort_by_key(|r| r.start);
    let mut merged: Vec<std::ops::Range<usize>> = Vec::new();
    for mut span in spans {
        span.end = span.end.min(text.len());
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

impl Registry {
    /// Calls `found` with each byte range of `bytes` a registered window
    /// covers.
    fn find(&self, bytes: &[u8], mut found: impl FnMut(std::ops::Range<usize>)) {
        for &width in &self.widths {
            each_window(bytes, width, |at, hash| {
                if self.hashes.contains(hash) {
                    found(at..at + width);
                }
            });
        }
    }
}

/// Text decoded one way, with where each decoded byte came from.
struct View {
    bytes: Vec<u8>,
    /// For each byte of `bytes`, the range of the text it was decoded from.
    origin: Vec<std::ops::Range<usize>>,
}

impl View {
    /// Room for `len` decoded bytes: a decoding is never longer than its
    /// text.
    fn with_capacity(len: usize) -> Self {
        View {
            bytes: Vec::with_capacity(len),
            origin: Vec::with_capacity(len),
        }
    }

    fn push(&mut self, byte: u8, from: std::ops::Range<usize>) {
        self.bytes.push(byte);
        self.origin.push(from);
    }
}

/// The decodings of `text` a secret may have been quoted back in: percent
/// (and form) encoding, JSON string escapes, and each run of base64 or
/// base64url at each of its four alignments. Each is built only when the
/// text holds what it decodes (`%` or `+`, `\`, a run long enough to
/// hold a registered window).
fn views(text: &str, narrowest: usize) -> Vec<View> {
    let bytes = text.as_bytes();
    let mut views = Vec::new();
    if bytes.iter().any(|&b| b == b'%' || b == b'+') {
        views.push(percent_decoded(bytes));
    }
    if bytes.contains(&b'\\') {
        views.push(json_unescaped(text));
    }
    let mut decoded = Vec::new();
    base64_decoded(bytes, narrowest, &mut decoded);
    // RFC 6749 §2.3.1: a client secret in a Basic header is form-encoded
    // before it is base64-encoded.
    for view in decoded {
        if view.bytes.iter().any(|&b| b == b'%' || b == b'+') {
            let inner = percent_decoded(&view.bytes);
            views.push(View {
                origin: inner
                    .origin
                    .iter()
                    .map(|r| {
                        let from = view.origin.get(r.start).map_or(0, |o| o.start);
                        let to = view
                            .origin
                            .get(r.end.saturating_sub(1))
                            .map_or(from, |o| o.end);
                        from..to
                    })
                    .collect(),
                bytes: inner.bytes,
            });
        }
        views.push(view);
    }
    views
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `application/x-www-form-urlencoded` and RFC 3986 percent-encoding read
/// back: `%XX` is a byte, `+` a space.
fn percent_decoded(bytes: &[u8]) -> View {
    let mut view = View::with_capacity(bytes.len());
    let mut at = 0;
    while let Some(&b) = bytes.get(at) {
        let escaped = (b == b'%')
            .then(|| Some(hex(*bytes.get(at + 1)?)? << 4 | hex(*bytes.get(at + 2)?)?))
            .flatten();
        match (escaped, b) {
            (Some(byte), _) => {
                view.push(byte, at..at + 3);
                at += 3;
            }
            (None, b'+') => {
                view.push(b' ', at..at + 1);
                at += 1;
            }
            (None, b) => {
                view.push(b, at..at + 1);
                at += 1;
            }
        }
    }
    view
}

/// JSON string escapes read back (RFC 8259 §7), `\uXXXX` surrogate pairs
/// included; anything else is kept as it is.
fn json_unescaped(text: &str) -> View {
    let bytes = text.as_bytes();
    let mut view = View::with_capacity(bytes.len());
    let unit = |at: usize| -> Option<u32> {
        if bytes.get(at) != Some(&b'\\') || bytes.get(at + 1) != Some(&b'u') {
            return None;
        }
        let digits = text.get(at + 2..at + 6)?;
        u32::from_str_radix(digits, 16).ok()
    };
    let mut at = 0;
    while let Some(&b) = bytes.get(at) {
        let simple = match (b, bytes.get(at + 1)) {
            (b'\\', Some(b'"')) => Some(b'"'),
            (b'\\', Some(b'\\')) => Some(b'\\'),
            (b'\\', Some(b'/')) => Some(b'/'),
            (b'\\', Some(b'b')) => Some(0x08),
            (b'\\', Some(b'f')) => Some(0x0c),
            (b'\\', Some(b'n')) => Some(b'\n'),
            (b'\\', Some(b'r')) => Some(b'\r'),
            (b'\\', Some(b't')) => Some(b'\t'),
            _ => None,
        };
        if let Some(byte) = simple {
            view.push(byte, at..at + 2);
            at += 2;
            continue;
        }
        if let Some(first) = unit(at) {
            let (c, used) = match (first, unit(at + 6)) {
                (0xd800..=0xdbff, Some(low @ 0xdc00..=0xdfff)) => (
                    char::from_u32(0x10000 + ((first - 0xd800) << 10) + (low - 0xdc00)),
                    12,
                ),
                _ => (char::from_u32(first), 6),
            };
            if let Some(c) = c {
                let mut buf = [0u8; 4];
                for &byte in c.encode_utf8(&mut buf).as_bytes() {
                    view.push(byte, at..at + used);
                }
                at += used;
                continue;
            }
        }
        view.push(b, at..at + 1);
        at += 1;
    }
    view
}

/// The value of a base64 or base64url character.
fn sextet(b: u8) -> Option<u8> {
    match b {
        b'A'..=b'Z' => Some(b - b'A'),
        b'a'..=b'z' => Some(b - b'a' + 26),
        b'0'..=b'9' => Some(b - b'0' + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    }
}

/// Each run of base64 characters that can hold the narrowest registered
/// window, decoded from each of its first four characters, so that the
/// encoding of `user:secret` in a Basic header, or a base64 text cut at
/// any point, decodes to the secret's own bytes at one of them.
/// Each run of base64 characters long enough to hold a window of
/// `narrowest` bytes (the narrowest registered: four characters carry
/// three bytes, so eleven hold eight and 22 hold 16), decoded at each of
/// its four alignments. A shorter run cannot hold any registered window,
/// so decoding it (a word as long as `credentials`) would only cost.
fn base64_decoded(bytes: &[u8], narrowest: usize, views: &mut Vec<View>) {
    let shortest_run = (narrowest * 4).div_ceil(3);
    let mut at = 0;
    while at < bytes.len() {
        let start = at;
        while bytes.get(at).and_then(|&b| sextet(b)).is_some() {
            at += 1;
        }
        if at - start >= shortest_run {
            for shift in 0..4 {
                views.push(base64_run(bytes, start + shift, at));
            }
        }
        at = at.max(start + 1);
    }
}

fn base64_run(bytes: &[u8], start: usize, end: usize) -> View {
    let mut view = View::with_capacity(end.saturating_sub(start) * 3 / 4);
    let mut group = start;
    while group < end {
        let (bits, chars) = bytes
            .get(group..end.min(group + 4))
            .unwrap_or_default()
            .iter()
            .filter_map(|&b| sextet(b))
            .fold((0u32, 0usize), |(bits, n), c| {
                (bits << 6 | u32::from(c), n + 1)
            });
        let bits = bits << (6 * (4 - chars));
        let to = group + chars;
        for &byte in bits
            .to_be_bytes()
            .iter()
            .skip(1)
            .take(chars.saturating_sub(1))
        {
            view.push(byte, group..to);
        }
        group += 4;
    }
    view
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
    use std::collections::HashSet;

    #[test]
    fn secrets_compare_by_value() {
        assert_eq!(
            Secret::from_admin("same-value"),
            Secret::from_admin("same-value")
        );
        assert_ne!(
            Secret::from_admin("same-value"),
            Secret::from_admin("same-valuf")
        );
        assert_ne!(Secret::from_admin("same"), Secret::from_admin("same-value"));
        assert_eq!(Secret::from_admin(""), Secret::from_admin(""));
    }

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
    fn every_encoding_a_secret_leaves_in_is_masked() {
        use base64::Engine as _;
        let secret = "pa$$w0rd!\"2024\\x+y/é";
        let _s = Secret::new(secret);
        let form: String = url_form(secret);
        assert!(
            form.starts_with("pa%24%24w0rd%21%222024%5Cx%2By%2F"),
            "{form}"
        );
        let json = serde_json::to_string(secret).unwrap();
        let json = json.trim_matches('"');
        assert_ne!(json, secret);
        let ascii_json = "pa$$w0rd!\\\"2024\\\\x+y\\/\\u00e9";
        for (user, engine) in [
            ("robot", &base64::engine::general_purpose::STANDARD),
            ("ab", &base64::engine::general_purpose::STANDARD),
            ("a", &base64::engine::general_purpose::URL_SAFE_NO_PAD),
        ] {
            let basic = engine.encode(format!("{user}:{secret}"));
            let form_basic = engine.encode(format!("{user}:{form}"));
            let line = format!("Basic {form_basic} is wrong");
            assert_eq!(mask_known(&line).matches("<redacted>").count(), 1, "{line}");
            assert!(mask_known(&line).len() < 40, "{}", mask_known(&line));
            let line = format!("upstream said: Authorization: Basic {basic} is wrong");
            let masked = mask_known(&line);
            // The username's groups may stay; nothing after them does.
            assert!(masked.ends_with("<redacted> is wrong"), "{masked}");
            let shown = masked
                .trim_start_matches("upstream said: Authorization: Basic ")
                .trim_end_matches("<redacted> is wrong");
            assert!(basic.starts_with(shown) && shown.len() <= 8, "{masked}");
        }
        for quoted in [secret, &form, json, ascii_json] {
            let line = format!("invalid_client: client_secret={quoted}&x=1 refused");
            let masked = mask_known(&line);
            assert!(
                !masked.contains("w0rd") && masked.contains("<redacted>"),
                "{quoted}: {masked}"
            );
            assert!(masked.ends_with("&x=1 refused"), "{masked}");
        }
        // Ordinary encoded text stays as it was.
        for plain in ["a%20b+c", "say \\\"hi\\\"", "aGVsbG8gd29ybGQgaGVsbG8="] {
            assert_eq!(mask_known(plain), plain);
        }
    }

    fn url_form(s: &str) -> String {
        s.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                    (b as char).to_string()
                }
                b' ' => "+".to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    }

    #[test]
    fn an_admins_short_secret_is_masked() {
        let _s = Secret::from_admin("s3cr3t!");
        assert_eq!(
            mask_known("secret s3cr3t! refused"),
            "secret <redacted> refused"
        );
        assert_eq!(
            mask_known("secret s3cr3t%21 refused"),
            "secret <redacted> refused"
        );
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
    fn window_hashes_roll_and_tell_widths_apart() {
        // A zero byte counts, and the width is part of the hash.
        assert_ne!(window_hash(b"abcdefgh"), window_hash(b"abcdefgh\0"));
        assert_ne!(window_hash(b"abcdefgh"), window_hash(b"\0abcdefgh"));
        // Every window of a text of distinct windows hashes apart, and the
        // rolling hash of each is the hash of the window on its own.
        let text: Vec<u8> = (0..=255u8).chain(0..=255u8).collect();
        let mut hashes = HashSet::new();
        let mut seen = 0;
        each_window(&text, WINDOW, |at, hash| {
            let window = text.get(at..at + WINDOW).unwrap();
            assert_eq!(hash, window_hash(window), "window at {at}");
            hashes.insert(hash);
            seen += 1;
        });
        assert_eq!(seen, text.len() - WINDOW + 1);
        assert_eq!(hashes.len(), 256);
    }

    #[test]
    fn the_window_set_holds_what_was_inserted_and_nothing_else() {
        let mut set = WindowSet::new();
        assert!(!set.contains(7));
        // Keys that share their low bits probe on; the table grows.
        let keys: Vec<u64> = (0..5000u64).map(|k| k << 20).collect();
        for &key in &keys {
            set.insert(key);
        }
        set.insert(keys.first().copied().unwrap());
        assert_eq!(set.len, keys.len());
        assert!(set.slots.len() >= 2 * keys.len());
        assert!(keys.iter().all(|&key| set.contains(key)));
        assert!(!set.contains(3 << 20 | 1));
        assert!(!set.contains(5000 << 20));
    }

    #[test]
    fn debug_never_shows_the_value() {
        let s = Secret::new("hunter2-super-secret");
        let shown = format!("{s:?} {:?}", Some(&s));
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("redacted"));
    }
}
