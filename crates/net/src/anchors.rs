//! CA bundles as trust anchors, cheaply: a PEM reader that decodes with a
//! plain base64 decoder, and a prepared store that keeps a bundle's
//! parsed anchors beside the disk cache so that a miss does not decode the
//! node's bundle at all.
//!
//! Why not rustls-pki-types' PEM reader: it decodes base64 in constant
//! time, which protects private keys and costs about 40 instructions a
//! byte; a CA bundle is public, and decoding the system's (some 220 KB)
//! that way was most of a miss's CPU (issue 47: 5.7 M of 10.4 M
//! instructions). The base64 crate's general-purpose engine, already in
//! the tree, decodes the same bytes for a fraction of that.
//!
//! The prepared store is one file, `trust-anchors` in `--cache-dir`, private
//! to the plugin's user as the cache's own files are (0600, owned by it,
//! one link, in the cache's checked directory; refused and rebuilt
//! otherwise). It holds each anchor's subject, public key and name
//! constraints (the DER webpki verifies with), keyed by the bundle's path
//! and identity: device, inode, size, and its modification and change
//! times in nanoseconds. The change time (`ctime`) cannot be set by any
//! caller: writing the bundle, renaming another file over it or changing
//! its mode all move it, so a changed bundle never matches a stale store.
//! That is why the key carries no hash of the bundle's content: hashing
//! 220 KB on every miss would cost more than the decoding it saves, and
//! the change time says the same thing for free. Whoever could forge it
//! is root, who owns the node's trust anyway.

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;
use rustls::pki_types::{CertificateDer, Der, TrustAnchor};

use wicp_base::platform::{self, Facts, Open};

/// The prepared store's file name in the cache directory. Not a cache
/// entry (`<key>.json`), so the cache's own scans never touch it.
pub(crate) const PREPARED: &str = "trust-anchors";

const MAGIC: &[u8] = b"wicp trust anchors v1\n";

/// A prepared store larger than this is not ours.
const MAX_PREPARED_BYTES: u64 = 8 * 1024 * 1024;

/// More anchors than any system bundle holds (Debian's has about 150).
const MAX_ANCHORS: u32 = 20_000;

/// A field of an anchor (a subject, a public key) longer than this is
/// not one.
const MAX_FIELD: u32 = 64 * 1024;

/// The DER of every `CERTIFICATE` block of `pem`, in order. Other blocks
/// (keys, CRLs) and text between blocks are skipped, as OpenSSL does.
/// Errors say what is wrong, as a clause for "the --ca-file X ...".
///
/// The markers are found with `memchr`'s `memmem` (in the tree through
/// serde_json), each block's lines are copied whole into one buffer
/// without their line ends, and that is decoded at once: byte-by-byte
/// searching and filtering cost more than the decoding itself (issue 47).
pub fn certificates(pem: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    const BEGIN: &[u8] = b"-----BEGIN CERTIFICATE-----";
    const END: &[u8] = b"-----END CERTIFICATE-----";
    let begin = memchr::memmem::Finder::new(BEGIN);
    let end = memchr::memmem::Finder::new(END);
    let mut out = Vec::new();
    let mut rest = pem;
    let mut text = Vec::with_capacity(4096);
    while let Some(at) = begin.find(rest) {
        let body = rest.get(at + BEGIN.len()..).unwrap_or_default();
        let Some(stop) = end.find(body) else {
            return Err(
                "is not a PEM bundle: a CERTIFICATE block has no END CERTIFICATE line".into(),
            );
        };
        text.clear();
        let block = body.get(..stop).unwrap_or_default();
        let mut from = 0;
        for at in memchr::memchr_iter(b'\n', block).chain(std::iter::once(block.len())) {
            text.extend_from_slice(block.get(from..at).unwrap_or_default().trim_ascii());
            from = at + 1;
        }
        let der = base64::engine::general_purpose::STANDARD
            .decode(&text)
            .map_err(|e| format!("is not a PEM bundle: certificate {}: {e}", out.len() + 1))?;
        out.push(der);
        rest = body.get(stop + END.len()..).unwrap_or_default();
    }
    Ok(out)
}

/// Parses each of `ders` as a trust anchor (webpki's own parse). Lenient
/// for the system's files, as OpenSSL is with its own store: what does
/// not parse is skipped, and counted. Returns the anchors and how many
/// were skipped.
pub fn lenient(ders: &[Vec<u8>]) -> (Vec<TrustAnchor<'static>>, usize) {
    let mut anchors = Vec::with_capacity(ders.len());
    let mut skipped = 0;
    for der in ders {
        match webpki_anchor(der) {
            Some(anchor) => anchors.push(anchor),
            None => skipped += 1,
        }
    }
    (anchors, skipped)
}

/// Parses every one of `ders` as a trust anchor, all or nothing: for the
/// files an admin names. The error says which one did not parse.
pub fn strict(ders: &[Vec<u8>]) -> Result<Vec<TrustAnchor<'static>>, String> {
    if ders.is_empty() {
        return Err("holds no PEM certificate".to_string());
    }
    ders.iter()
        .enumerate()
        .map(|(n, der)| {
            webpki_anchor(der).ok_or_else(|| {
                format!(
                    "holds a certificate (number {}) that cannot be parsed as a CA certificate",
                    n + 1
                )
            })
        })
        .collect()
}

fn webpki_anchor(der: &[u8]) -> Option<TrustAnchor<'static>> {
    let mut store = rustls::RootCertStore::empty();
    store.add(CertificateDer::from(der)).ok()?;
    store.roots.pop()
}

/// Where a bundle's prepared anchors may be kept, and what the bundle is.
pub struct Prepared<'a> {
    /// The cache directory.
    pub dir: &'a Path,
    /// What identifies the bundle's content: its path, identity and
    /// change stamps, and how it was parsed.
    key: String,
}

impl<'a> Prepared<'a> {
    /// The prepared store for `bundle` (what `stat` said of it, `facts`)
    /// parsed `strictly` or not, in `dir`; `None` where the system gives
    /// no change stamp (Windows).
    pub(crate) fn for_bundle(
        dir: &'a Path,
        bundle: &Path,
        facts: &Facts,
        strictly: bool,
    ) -> Option<Prepared<'a>> {
        let (mtime, ctime) = facts.changed?;
        let key = format!(
            "{}\n{} {} {} {mtime} {ctime} {}\n",
            bundle.display(),
            facts.id.0,
            facts.id.1,
            facts.len,
            if strictly { "strict" } else { "lenient" }
        );
        Some(Prepared { dir, key })
    }

    fn path(&self) -> PathBuf {
        self.dir.join(PREPARED)
    }

    /// The anchors kept for this bundle, when the store is one the plugin
    /// wrote (private, its user's, one link, in a directory only it and
    /// the administrator control) for exactly this bundle. Anything else
    /// is `None`: the caller decodes the bundle and writes the store anew.
    pub fn read(&self) -> Option<Vec<TrustAnchor<'static>>> {
        let running = platform::running_owner().ok()?;
        let dir = platform::facts_at(self.dir).ok()?;
        wicp_base::file::check_own_dir(&dir, &running).ok()?;
        let file = platform::open(&self.path(), &Open::read().no_follow()).ok()?;
        let facts = platform::facts(&file).ok()?;
        if !facts.is_file()
            || !facts.owner.is_admin_or(&running)
            || facts.access.shared
            || facts.links != 1
            || facts.len > MAX_PREPARED_BYTES
        {
            wicp_base::log::debug!(
                "not using the prepared trust store {}: it is not a private file of the plugin's user",
                self.path().display()
            );
            return None;
        }
        let bytes = wicp_base::file::read_at_most(file, MAX_PREPARED_BYTES).ok()??;
        decode(&bytes, &self.key)
    }

    /// Keeps `anchors` for this bundle, atomically (a private temporary
    /// file renamed over the store); best effort: a store that cannot be
    /// written costs the next miss a decode, nothing else.
    pub fn write(&self, anchors: &[TrustAnchor<'_>]) {
        let temp = self.dir.join(format!(
            ".{PREPARED}.{}.{}.tmp",
            std::process::id(),
            platform::random_hex(4)
        ));
        let written = (|| {
            let mut file = platform::open(&temp, &Open::create_new(0o600))?;
            platform::set_mode(&file, 0o600)?;
            file.write_all(&encode(anchors, &self.key))?;
            drop(file);
            platform::rename(&temp, &self.path())
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            wicp_base::log::debug!(
                "cannot keep the prepared trust store in {}: {e}",
                self.dir.display()
            );
        }
    }
}

fn put(out: &mut Vec<u8>, field: Option<&[u8]>) {
    match field {
        Some(bytes) => {
            out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        None => out.extend_from_slice(&u32::MAX.to_le_bytes()),
    }
}

/// The store's bytes: the magic, the key, the count, then each anchor's
/// subject, public key and name constraints (`u32::MAX` for none), each
/// a little-endian length and its bytes.
fn encode(anchors: &[TrustAnchor<'_>], key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 * 1024);
    out.extend_from_slice(MAGIC);
    put(&mut out, Some(key.as_bytes()));
    out.extend_from_slice(
        &u32::try_from(anchors.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    for anchor in anchors {
        put(&mut out, Some(anchor.subject.as_ref()));
        put(&mut out, Some(anchor.subject_public_key_info.as_ref()));
        put(
            &mut out,
            anchor.name_constraints.as_ref().map(|n| n.as_ref()),
        );
    }
    out
}

/// Reads what [`encode`] wrote for `key`; `None` for anything else (another
/// bundle, another version, a cut or corrupt file).
fn decode(bytes: &[u8], key: &str) -> Option<Vec<TrustAnchor<'static>>> {
    let mut reader = Reader(bytes.strip_prefix(MAGIC)?);
    if reader.field(4096)?? != key.as_bytes() {
        return None;
    }
    let count = reader.count()?;
    if count > MAX_ANCHORS {
        return None;
    }
    let mut anchors = Vec::with_capacity(usize::try_from(count).ok()?);
    for _ in 0..count {
        let subject = reader.field(MAX_FIELD)??;
        let spki = reader.field(MAX_FIELD)??;
        let constraints = reader.field(MAX_FIELD)?;
        anchors.push(TrustAnchor {
            subject: Der::from(subject.to_vec()),
            subject_public_key_info: Der::from(spki.to_vec()),
            name_constraints: constraints.map(|c| Der::from(c.to_vec())),
        });
    }
    reader.0.is_empty().then_some(anchors)
}

/// The rest of a prepared store, read front to back.
struct Reader<'b>(&'b [u8]);

impl<'b> Reader<'b> {
    fn count(&mut self) -> Option<u32> {
        let (n, rest) = self.0.split_first_chunk::<4>()?;
        self.0 = rest;
        Some(u32::from_le_bytes(*n))
    }

    /// A field of at most `max` bytes; `Some(None)` for an absent one.
    fn field(&mut self, max: u32) -> Option<Option<&'b [u8]>> {
        let len = self.count()?;
        if len == u32::MAX {
            return Some(None);
        }
        if len > max {
            return None;
        }
        let (field, rest) = self.0.split_at_checked(usize::try_from(len).ok()?)?;
        self.0 = rest;
        Some(Some(field))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA_PEM: &str = include_str!("../../../tests/fixtures/tls/ca.pem");
    const OTHER_PEM: &str = include_str!("../../../tests/fixtures/tls/server.pem");

    /// The fast reader decodes what rustls-pki-types' reader does, for
    /// line ends of either kind, text and other blocks between
    /// certificates.
    #[test]
    fn reads_what_the_reference_reader_reads() {
        use rustls::pki_types::pem::PemObject;
        let key = include_str!("../../../tests/fixtures/tls/server.key");
        let bundle = format!("# a comment\n{CA_PEM}\n{key}{OTHER_PEM}trailing text\n");
        for text in [bundle.clone(), bundle.replace('\n', "\r\n")] {
            let ours = certificates(text.as_bytes()).unwrap();
            let theirs: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(text.as_bytes())
                .map(|c| c.unwrap().to_vec())
                .collect();
            assert_eq!(ours, theirs);
            assert_eq!(ours.len(), 2);
        }
        assert!(certificates(b"no certificate here").unwrap().is_empty());
        let cut = &CA_PEM[..CA_PEM.len() / 2];
        assert!(certificates(cut.as_bytes()).unwrap_err().contains("no END"));
    }

    /// A prepared store reads back exactly what was written, for its key
    /// only.
    #[test]
    fn the_store_format_round_trips_for_its_key_only() {
        let ders = certificates(format!("{CA_PEM}{OTHER_PEM}").as_bytes()).unwrap();
        let (anchors, skipped) = lenient(&ders);
        assert_eq!((anchors.len(), skipped), (2, 0));
        let bytes = encode(&anchors, "key one");
        assert_eq!(decode(&bytes, "key one"), Some(anchors));
        assert_eq!(decode(&bytes, "key two"), None);
        assert_eq!(decode(&bytes[..bytes.len() - 1], "key one"), None);
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(&longer, "key one"), None);
    }
}
