//! Which certificate authorities the upstream calls trust.
//!
//! The base is the node's trust store, loaded the way OpenSSL, curl and Go
//! load it: the system bundle, or `SSL_CERT_FILE` / `SSL_CERT_DIR` in its
//! place when set (rustls-native-certs reads them, for reqwest's verifier and
//! for the AWS SDK's alike). `--ca-file` adds a bundle on top, for the CA of
//! a TLS-inspecting proxy or of a private endpoint, without replacing the
//! public roots the clouds' endpoints need.
//!
//! Nothing here runs on a cache hit: the files are read when the first
//! client of an invocation is built.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, Result, quote};

/// The standard variable naming a CA bundle that replaces the system's.
pub const SSL_CERT_FILE: &str = "SSL_CERT_FILE";

/// A system bundle is a few hundred kilobytes; more is not a CA bundle.
const MAX_BUNDLE_BYTES: u64 = 4 * 1024 * 1024;

/// `--ca-file`, set once per process by the command line, like the log
/// level: every exchanger's client reads it, so it is not threaded through
/// each exchanger's options.
static CA_FILE: OnceLock<PathBuf> = OnceLock::new();

/// Records `--ca-file`. Called once, before any exchange.
pub fn set_ca_file(path: Option<PathBuf>) {
    if let Some(path) = path {
        let _ = CA_FILE.set(path);
    }
}

/// The `--ca-file` in effect, if any.
pub fn ca_file() -> Option<&'static Path> {
    CA_FILE.get().map(PathBuf::as_path)
}

/// An extra CA bundle, read and checked.
pub struct CaBundle {
    pub path: PathBuf,
    /// The file as read, for clients that take PEM (the AWS SDK's).
    pub pem: Vec<u8>,
    /// One entry per certificate, for reqwest.
    pub certificates: Vec<reqwest::Certificate>,
}

impl std::fmt::Debug for CaBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaBundle")
            .field("path", &self.path)
            .field("certificates", &self.certificates.len())
            .finish()
    }
}

/// The `--ca-file` bundle, when one is configured.
pub fn extra_roots() -> Result<Option<CaBundle>> {
    ca_file().map(read_bundle).transpose()
}

/// Reads a PEM bundle holding at least one certificate, each usable as a
/// trust anchor.
pub fn read_bundle(path: &Path) -> Result<CaBundle> {
    let shown = quote(&path.display().to_string());
    let fix = "pass a PEM file of CA certificates (-----BEGIN CERTIFICATE-----) readable by the kubelet's user, \
               or unset --ca-file (WICP_CA_FILE)";
    let pem = read_bounded(path)
        .map_err(|e| Error::config(format!("cannot read the --ca-file {shown}: {e}")).fix(fix))?;
    let ders = anchors(&pem)
        .map_err(|why| Error::config(format!("the --ca-file {shown} {why}")).fix(fix))?;
    let certificates = ders
        .iter()
        .map(|der| reqwest::Certificate::from_der(der))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::config(format!("the --ca-file {shown} is not usable: {e}")).fix(fix))?;
    crate::debug!(
        "trusting {} extra CA certificate(s) from {shown}",
        certificates.len()
    );
    Ok(CaBundle {
        path: path.to_path_buf(),
        pem,
        certificates,
    })
}

/// The certificates of a PEM bundle, each checked the way the TLS clients
/// will load it (rustls-pki-types' PEM reader, then a webpki trust anchor).
/// The AWS SDK's client loads extra roots with `expect`: only a bundle that
/// passed here may reach it. Other PEM sections (keys, CRLs) are skipped,
/// as the clients skip them.
fn anchors(pem: &[u8]) -> std::result::Result<Vec<Vec<u8>>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let ders = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| format!("is not a PEM bundle: {e}"))?;
    if ders.is_empty() {
        return Err("holds no PEM certificate".to_string());
    }
    let mut store = rustls::RootCertStore::empty();
    for (n, der) in ders.iter().enumerate() {
        store.add(der.clone()).map_err(|e| {
            format!(
                "holds a certificate (number {}) that cannot be parsed: {e}",
                n.saturating_add(1)
            )
        })?;
    }
    Ok(ders.into_iter().map(|d| d.as_ref().to_vec()).collect())
}

/// Checks `SSL_CERT_FILE` when set: the TLS stack treats an unreadable one
/// as an empty trust store, which would surface as every server being
/// untrusted, or as no CA being found at all, far from the cause.
pub fn check_ssl_cert_file(value: Option<std::ffi::OsString>) -> Result<()> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(());
    };
    let path = PathBuf::from(value);
    let shown = quote(&path.display().to_string());
    let fix = "point SSL_CERT_FILE at a PEM bundle of CA certificates (it replaces the system's trust store) or unset it; \
               to add a CA to the system's, use --ca-file";
    let pem = read_bounded(&path)
        .map_err(|e| Error::config(format!("cannot read SSL_CERT_FILE {shown}: {e}")).fix(fix))?;
    anchors(&pem)
        .map(|_| ())
        .map_err(|why| Error::config(format!("SSL_CERT_FILE {shown} {why}")).fix(fix))
}

fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut pem = Vec::new();
    file.take(MAX_BUNDLE_BYTES + 1).read_to_end(&mut pem)?;
    if u64::try_from(pem.len()).unwrap_or(u64::MAX) > MAX_BUNDLE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB, not a CA bundle",
            MAX_BUNDLE_BYTES / 1024 / 1024
        )));
    }
    Ok(pem)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real CA certificate (the test CA of tests/fixtures/tls).
    const CA_PEM: &str = include_str!("../tests/fixtures/tls/ca.pem");

    fn write(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    #[test]
    fn reads_a_bundle_and_refuses_anything_else() {
        let dir = tempfile::tempdir().unwrap();
        let two = format!("# comment\n{CA_PEM}\n{CA_PEM}");
        let bundle = read_bundle(&write(dir.path(), "ok.pem", two.as_bytes())).unwrap();
        assert_eq!(bundle.certificates.len(), 2);
        assert_eq!(bundle.pem, two.as_bytes());

        let key = include_str!("../tests/fixtures/tls/server.key");
        let with_key = format!("{key}{CA_PEM}");
        assert_eq!(
            read_bundle(&write(dir.path(), "key.pem", with_key.as_bytes()))
                .unwrap()
                .certificates
                .len(),
            1
        );
        // Valid base64 in a CERTIFICATE block, but no certificate.
        let junk = "-----BEGIN CERTIFICATE-----\nAAAAAAAA\n-----END CERTIFICATE-----\n";
        let cases: [(&str, &[u8], &str); 5] = [
            (
                "junk.pem",
                junk.as_bytes(),
                "(number 1) that cannot be parsed",
            ),
            ("empty.pem", b"", "holds no PEM certificate"),
            (
                "text.pem",
                b"not a certificate\n",
                "holds no PEM certificate",
            ),
            (
                "broken.pem",
                b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
                "is not a PEM bundle",
            ),
            (
                "cut.pem",
                b"-----BEGIN CERTIFICATE-----\nMIIB\n",
                "is not a PEM bundle",
            ),
        ];
        for (name, content, expect) in cases {
            let e = read_bundle(&write(dir.path(), name, content)).unwrap_err();
            assert_eq!(e.kind(), crate::error::Kind::Config, "{name}: {e}");
            assert!(e.what().contains(expect), "{name}: {e}");
            assert!(e.what().contains(name), "{e}");
            assert!(e.remedy().unwrap().contains("--ca-file"), "{e}");
        }
        let e = read_bundle(&dir.path().join("missing.pem")).unwrap_err();
        assert!(e.what().contains("cannot read the --ca-file"), "{e}");
        let e = read_bundle(dir.path()).unwrap_err();
        assert!(e.what().contains("not a regular file"), "{e}");
    }

    #[test]
    fn ssl_cert_file_is_checked_only_when_set() {
        let dir = tempfile::tempdir().unwrap();
        assert!(check_ssl_cert_file(None).is_ok());
        assert!(check_ssl_cert_file(Some("".into())).is_ok());
        let ok = write(dir.path(), "ca.pem", CA_PEM.as_bytes());
        assert!(check_ssl_cert_file(Some(ok.into())).is_ok());
        let e = check_ssl_cert_file(Some(dir.path().join("nope.pem").into())).unwrap_err();
        assert!(e.what().starts_with("cannot read SSL_CERT_FILE"), "{e}");
        assert!(e.remedy().unwrap().contains("--ca-file"), "{e}");
        let empty = write(dir.path(), "empty.pem", b"");
        let e = check_ssl_cert_file(Some(empty.into())).unwrap_err();
        assert!(e.what().contains("holds no PEM certificate"), "{e}");
    }
}
