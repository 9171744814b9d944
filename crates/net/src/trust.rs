//! Which certificate authorities the upstream calls trust, and when that
//! costs anything.
//!
//! The base is the node's trust store, found the way OpenSSL, curl and Go
//! find it: `SSL_CERT_FILE` and/or `SSL_CERT_DIR` when set (they replace the
//! system's store); else the system's bundle file
//! (`/etc/ssl/certs/ca-certificates.crt` on Debian, and the other
//! distributions' names); else, on a node without a bundle file, the
//! system's certificate directory. The directory that holds the bundle holds
//! the same certificates again, one file (and one hash link) each, so it is
//! not walked when the bundle is there. `--ca-file` adds a bundle on top,
//! for the CA of a TLS-inspecting proxy or of a private endpoint, without
//! replacing the public roots the clouds' endpoints need.
//!
//! The result is one [`rustls::ClientConfig`] (aws-lc-rs, the provider the
//! rest of the binary uses), shared by every client of the invocation, the
//! AWS SDK's included ([`crate::Settings::tls`]), whose verifier
//! ([`Layered`]) decides what is loaded, and when (issue 47):
//!
//! - nothing at all until a server presents a certificate: a plain-HTTP
//!   endpoint never loads a trust store;
//! - `--ca-file` is read and checked when the client is built (a bad one is
//!   refused before any connection) and tried first, alone: a private
//!   endpoint it vouches for never costs the node's bundle;
//! - the base store is loaded at the first certificate `--ca-file` does not
//!   vouch for, from the prepared store beside the disk cache when the
//!   bundle has not changed ([`super::anchors`]), else decoded (with a
//!   plain base64 decoder) and prepared for the next miss.
//!
//! `SSL_CERT_FILE` is an admin's choice like `--ca-file`: its place is
//! checked when the client is built (missing, not a regular file, another
//! user's), its content when it is loaded. A problem loading the base
//! store ends the handshake with the plugin's own error, which the HTTP
//! layer reports as it is ([`load_error`]).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::RootCertStore;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, TrustAnchor, UnixTime};

use super::anchors;
use wicp_base::error::{Error, Fact, Result, Setting, quote};
use wicp_base::flags::FlagSpec;

/// `--ca-file`: declared here, with the trust it adds, and read by the
/// command line (`long = CA_FILE.long, env = CA_FILE.env`).
pub static CA_FILE: FlagSpec = FlagSpec {
    long: "ca-file",
    env: "WICP_CA_FILE",
    takes: wicp_base::flags::Takes::One,
    value: "PATH",
    default: "",
    help: "A PEM bundle of extra CA certificates trusted by every upstream call, \
        on top of the node's trust store (SSL_CERT_FILE replaces that store, \
        as in OpenSSL): the CA of a TLS-inspecting proxy or a private endpoint.",
};

/// The standard variable naming a CA bundle that replaces the system's.
pub const SSL_CERT_FILE: &str = "SSL_CERT_FILE";
/// The standard variable naming directories of CA certificates (separated
/// by `:`) that replace the system's.
const SSL_CERT_DIR: &str = "SSL_CERT_DIR";

/// A system bundle is a few hundred kilobytes; more is not a CA bundle.
const MAX_BUNDLE_BYTES: u64 = 4 * 1024 * 1024;

/// The system bundle files, in the order OpenSSL's probes (and
/// rustls-native-certs) try them: Debian/Ubuntu, Fedora/RHEL, openSUSE,
/// RHEL's extracted bundle, old RHEL, Alpine/macOS.
const SYSTEM_BUNDLES: [&str; 6] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/ssl/cert.pem",
];

/// The system certificate directories, read only when no bundle file exists.
const SYSTEM_DIRS: [&str; 2] = ["/etc/ssl/certs", "/etc/pki/tls/certs"];

/// Where the trust store comes from, read from the environment once at
/// start; nothing is read from disk until a client is built.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sources {
    /// `SSL_CERT_FILE`, when set and not empty.
    pub ssl_cert_file: Option<PathBuf>,
    /// `SSL_CERT_DIR`, when set and not empty.
    pub ssl_cert_dir: Option<String>,
    /// `--ca-file` (`WICP_CA_FILE`).
    pub ca_file: Option<PathBuf>,
    /// `--cache-dir`, where a bundle's prepared anchors are kept.
    pub prepared: Option<PathBuf>,
}

impl Sources {
    pub fn from_lookup(
        env: impl Fn(&str) -> Option<String>,
        ca_file: Option<PathBuf>,
        prepared: Option<PathBuf>,
    ) -> Self {
        let set = |name: &str| env(name).filter(|v| !v.is_empty());
        Sources {
            ssl_cert_file: set(SSL_CERT_FILE).map(PathBuf::from),
            ssl_cert_dir: set(SSL_CERT_DIR),
            ca_file,
            prepared,
        }
    }

    /// The one TLS configuration every client of the process uses: its
    /// verifier loads the trust store when a certificate needs it.
    pub(crate) fn client_config(&self) -> Result<Arc<rustls::ClientConfig>> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::internal(format!("cannot set up TLS: {e}")))?;
        if wicp_base::platform::HAS_SYSTEM_VERIFIER
            && self.ssl_cert_file.is_none()
            && self.ssl_cert_dir.is_none()
        {
            // Windows: the machine's certificate store through its chain
            // engine (which can fetch a missing root, and applies the
            // store's policy), with --ca-file on top.
            let extra = match &self.ca_file {
                Some(path) => ca_file_certificates(path)?,
                None => Vec::new(),
            };
            let verifier = wicp_base::platform::system_verifier(extra, provider).map_err(|e| {
                Error::config(format!("cannot use the Windows certificate store: {e}"))
                    .fix("set SSL_CERT_FILE to a PEM bundle of the CAs to trust instead")
            })?;
            wicp_base::log::debug!("trusting the Windows certificate store");
            return Ok(Arc::new(
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(verifier)
                    .with_no_client_auth(),
            ));
        }
        let extra = match &self.ca_file {
            Some(path) => Some(verifier_of(ca_file_anchors(path)?, &provider)?),
            None => None,
        };
        if let Some(file) = &self.ssl_cert_file {
            ssl_cert_file_place(file)?;
        }
        let verifier = Layered {
            extra,
            base: OnceLock::new(),
            sources: self.clone(),
            provider,
        };
        Ok(Arc::new(
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(verifier))
                .with_no_client_auth(),
        ))
    }

    /// The base store's anchors (`SSL_CERT_FILE`/`SSL_CERT_DIR`, else the
    /// system's, looked for at `bundles` then `dirs`: tests pass their
    /// own), without `--ca-file`.
    fn base_anchors(&self, bundles: &[&str], dirs: &[&str]) -> Result<Vec<TrustAnchor<'static>>> {
        let mut store = Roots::default();
        let mut looked = Vec::new();
        if self.ssl_cert_file.is_some() || self.ssl_cert_dir.is_some() {
            if let Some(file) = &self.ssl_cert_file {
                store.add_bundle(file, Strictness::Named, self.prepared.as_deref())?;
                looked.push(format!("SSL_CERT_FILE {}", file.display()));
            }
            if let Some(dirs) = &self.ssl_cert_dir {
                for dir in dirs.split(':').filter(|d| !d.is_empty()) {
                    store.add_dir(Path::new(dir));
                    looked.push(format!("SSL_CERT_DIR {dir}"));
                }
            }
        } else if let Some(bundle) = bundles.iter().map(Path::new).find(|p| p.is_file()) {
            store.add_bundle(bundle, Strictness::System, self.prepared.as_deref())?;
            looked.push(bundle.display().to_string());
        } else {
            for dir in dirs {
                store.add_dir(Path::new(dir));
                looked.push((*dir).to_string());
            }
        }
        wicp_base::log::debug!(
            "trusting {} CA certificate(s) from {}",
            store.anchors.len(),
            if looked.is_empty() {
                "nowhere".to_string()
            } else {
                looked.join(", ")
            }
        );
        if store.anchors.is_empty() {
            return Err(Error::config(format!(
                "cannot verify the server's certificate: no CA certificates found (looked in {})",
                if looked.is_empty() {
                    "no location".to_string()
                } else {
                    looked.join(", ")
                }
            ))
            .fix("the node has no CA bundle: install ca-certificates, set SSL_CERT_FILE, or pass --ca-file"));
        }
        Ok(store.anchors)
    }
}

/// The verifier of every client: `--ca-file`'s anchors first, alone; then
/// the base store, loaded once, at the first certificate that needs it.
#[derive(Debug)]
struct Layered {
    /// `--ca-file`, checked when the client was built.
    extra: Option<Arc<WebPkiServerVerifier>>,
    /// The base store's verifier, or why it could not be loaded.
    base: OnceLock<std::result::Result<Arc<WebPkiServerVerifier>, Error>>,
    sources: Sources,
    provider: Arc<CryptoProvider>,
}

impl Layered {
    fn base(&self) -> std::result::Result<&Arc<WebPkiServerVerifier>, &Error> {
        self.base
            .get_or_init(|| {
                let anchors = self.sources.base_anchors(&SYSTEM_BUNDLES, &SYSTEM_DIRS)?;
                verifier_of(anchors, &self.provider)
            })
            .as_ref()
    }
}

impl ServerCertVerifier for Layered {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let first = match &self.extra {
            Some(extra) => {
                match extra.verify_server_cert(
                    end_entity,
                    intermediates,
                    server_name,
                    ocsp_response,
                    now,
                ) {
                    Ok(verified) => return Ok(verified),
                    Err(e) => Some(e),
                }
            }
            None => None,
        };
        let base = self.base().map_err(|e| {
            rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(
                Arc::new(LoadError(e.clone())),
            )))
        })?;
        base.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            .map_err(|e| match first {
                // --ca-file's CA signed it, and something else is wrong
                // (a name, a date): that is the error to report.
                Some(f) if !is_unknown_issuer(&f) => f,
                _ => e,
            })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn is_unknown_issuer(e: &rustls::Error) -> bool {
    matches!(
        e,
        rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)
    )
}

/// The plugin's own error for a base store that could not be loaded,
/// carried through the TLS handshake ([`load_error`] takes it out).
#[derive(Debug)]
struct LoadError(Error);

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for LoadError {}

/// The trust store's own error behind a failed handshake (the base store
/// could not be loaded: an unreadable `SSL_CERT_FILE`, no CA at all), to
/// be reported as it is rather than as an untrusted certificate.
pub(crate) fn load_error(error: &rustls::Error) -> Option<Error> {
    match error {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) => {
            let inner: &(dyn std::error::Error + 'static) = &*other.0;
            inner.downcast_ref::<LoadError>().map(|e| e.0.clone())
        }
        _ => None,
    }
}

fn verifier_of(
    anchors: Vec<TrustAnchor<'static>>,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>> {
    let roots = RootCertStore { roots: anchors };
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider))
        .build()
        .map_err(|e| Error::internal(format!("cannot set up certificate verification: {e}")))
}

/// How a bundle's certificates are taken.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Strictness {
    /// The system's own: what parses is taken, the rest skipped, as
    /// OpenSSL does with its store.
    System,
    /// `SSL_CERT_FILE`: every certificate must parse, and the file must
    /// be one no other user could change.
    Named,
}

/// Trust anchors being collected from the base store's files.
#[derive(Default)]
struct Roots {
    anchors: Vec<TrustAnchor<'static>>,
    /// The anchors held, for the directories' case only: a hash link, or
    /// the bundle inside a directory also listed, holds the same
    /// certificates again. One bundle alone is taken as it is, without
    /// this copy of every anchor.
    seen: HashSet<TrustAnchor<'static>>,
    /// The files read, by device and inode.
    files: HashSet<(u64, u64)>,
}

impl Roots {
    /// Adds a bundle file: its prepared anchors when `prepared` holds
    /// them for this very file, else its certificates decoded, which are
    /// then prepared for the next miss. Whether the prepared ones were
    /// used.
    fn add_bundle(
        &mut self,
        path: &Path,
        strictness: Strictness,
        prepared: Option<&Path>,
    ) -> Result<bool> {
        let named = strictness == Strictness::Named;
        let facts = wicp_base::platform::facts_followed(path).ok();
        if let Some(facts) = &facts {
            self.files.insert(facts.id);
        }
        let store = prepared
            .zip(facts.as_ref())
            .and_then(|(dir, facts)| anchors::Prepared::for_bundle(dir, path, facts, named));
        if let Some(kept) = store.as_ref().and_then(anchors::Prepared::read) {
            wicp_base::log::debug!(
                "trust anchors of {} from the prepared store in {}",
                path.display(),
                store.as_ref().map_or(Path::new(""), |s| s.dir).display()
            );
            self.anchors.extend(kept);
            return Ok(true);
        }
        let shown = quote(&path.display().to_string());
        let decoded = if named {
            let refused = |what: String| {
                Error::config(what)
                    .fix("point SSL_CERT_FILE at a PEM bundle of CA certificates (it replaces the system's trust store) or unset it; \
                          to add a CA to the system's, use --ca-file")
                    .with(Fact::Flag(Setting::Variable(SSL_CERT_FILE)))
            };
            let pem = read_trusted(path)
                .map_err(|e| refused(format!("cannot read SSL_CERT_FILE {shown}: {e}")))?;
            anchors::certificates(&pem)
                .and_then(|ders| anchors::strict(&ders))
                .map_err(|why| refused(format!("SSL_CERT_FILE {shown} {why}")))?
        } else {
            let pem = read_bounded(path).unwrap_or_default();
            let ders = anchors::certificates(&pem).unwrap_or_default();
            let (parsed, skipped) = anchors::lenient(&ders);
            if skipped > 0 {
                wicp_base::log::debug!(
                    "skipped {skipped} unusable certificate(s) in {}",
                    path.display()
                );
            }
            parsed
        };
        if let Some(store) = &store {
            store.write(&decoded);
        }
        self.anchors.extend(decoded);
        Ok(false)
    }

    /// Adds the certificates of every file in a directory (OpenSSL's
    /// hashed layout holds links to the same files), each once.
    fn add_dir(&mut self, dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if let Ok(id) = wicp_base::platform::id_of(&path)
                && !self.files.insert(id)
            {
                continue;
            }
            let Ok(pem) = read_bounded(&path) else {
                continue;
            };
            let ders = anchors::certificates(&pem).unwrap_or_default();
            let (parsed, skipped) = anchors::lenient(&ders);
            if skipped > 0 {
                wicp_base::log::debug!(
                    "skipped {skipped} unusable certificate(s) in {}",
                    path.display()
                );
            }
            if self.seen.len() < self.anchors.len() {
                self.seen.extend(self.anchors.iter().cloned());
            }
            for anchor in parsed {
                if self.seen.insert(anchor.clone()) {
                    self.anchors.push(anchor);
                }
            }
        }
    }
}

/// Checks where `SSL_CERT_FILE` is, when the client is built: there, a
/// regular file, and no other user's to change. Its content is read when
/// the base store is loaded.
fn ssl_cert_file_place(path: &Path) -> Result<()> {
    let shown = quote(&path.display().to_string());
    wicp_base::file::check_trusted(path, MAX_BUNDLE_BYTES)
        .map_err(|refused| {
            let why = match refused {
                wicp_base::file::Refused::Unreadable(why) => why,
                wicp_base::file::Refused::TooLarge => format!(
                    "the file is larger than {} MiB, not a CA bundle",
                    MAX_BUNDLE_BYTES / 1024 / 1024
                ),
            };
            Error::config(format!("cannot read SSL_CERT_FILE {shown}: {why}"))
                .fix("point SSL_CERT_FILE at a PEM bundle of CA certificates (it replaces the system's trust store) or unset it; \
                      to add a CA to the system's, use --ca-file")
                .with(Fact::Flag(Setting::Variable(SSL_CERT_FILE)))
        })
}

/// The `--ca-file` bundle's anchors: at least one certificate, each usable
/// as a trust anchor.
fn ca_file_anchors(path: &Path) -> Result<Vec<TrustAnchor<'static>>> {
    let (anchors, _) = read_ca_file(path)?;
    Ok(anchors)
}

/// Reads and checks the `--ca-file` bundle: its anchors, and its
/// certificates (for a verifier that takes certificates).
fn read_ca_file(path: &Path) -> Result<(Vec<TrustAnchor<'static>>, Vec<Vec<u8>>)> {
    let shown = quote(&path.display().to_string());
    let refused = |what: String| {
        Error::config(what)
            .fix("pass a PEM file of CA certificates (-----BEGIN CERTIFICATE-----) readable by the kubelet's user, \
                  or unset --ca-file (WICP_CA_FILE)")
            .with(Fact::Flag(Setting::Flag(&CA_FILE)))
    };
    let pem = read_trusted(path)
        .map_err(|e| refused(format!("cannot read the --ca-file {shown}: {e}")))?;
    let ders = anchors::certificates(&pem)
        .map_err(|why| refused(format!("the --ca-file {shown} {why}")))?;
    let anchors =
        anchors::strict(&ders).map_err(|why| refused(format!("the --ca-file {shown} {why}")))?;
    wicp_base::log::debug!(
        "trusting {} extra CA certificate(s) from {shown}",
        anchors.len()
    );
    Ok((anchors, ders))
}

/// The certificates of the `--ca-file` bundle, read and checked once as
/// [`ca_file_anchors`] does, for a verifier that takes certificates rather
/// than trust anchors (the Windows store's).
fn ca_file_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let (_, ders) = read_ca_file(path)?;
    Ok(ders.into_iter().map(CertificateDer::from).collect())
}

/// A TLS configuration trusting the CAs of `path` and nothing else (no
/// system store, no `--ca-file`, no `SSL_CERT_FILE`): for an endpoint
/// whose only legitimate issuer the admin names, such as an AKS cluster's
/// CA for its identity-binding endpoint. `what` names the option in
/// messages.
pub fn only(path: &Path, what: &'static FlagSpec) -> Result<Arc<rustls::ClientConfig>> {
    let shown = quote(&path.display().to_string());
    let fix = format!(
        "point {what} at the PEM file of the cluster's CA (on AKS /etc/kubernetes/certs/ca.crt)"
    );
    let refused = |message: String| {
        Error::config(message)
            .fix(fix.clone())
            .with(Fact::Flag(Setting::Flag(what)))
    };
    let pem =
        read_trusted(path).map_err(|e| refused(format!("cannot read the {what} {shown}: {e}")))?;
    let anchors = anchors::certificates(&pem)
        .and_then(|ders| anchors::strict(&ders))
        .map_err(|why| refused(format!("the {what} {shown} {why}")))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::internal(format!("cannot set up TLS: {e}")))?
        .with_root_certificates(RootCertStore { roots: anchors })
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A CA file the admin names (`--ca-file`, `SSL_CERT_FILE`, a CA option):
/// bounded and regular as [`read_bounded`], and refused when another user
/// could change it ([`wicp_base::file::read_trusted`]): the trust anchor
/// for where a token goes would then be anyone's.
fn read_trusted(path: &Path) -> std::result::Result<Vec<u8>, String> {
    wicp_base::file::read_trusted(path, MAX_BUNDLE_BYTES).map_err(|refused| match refused {
        wicp_base::file::Refused::Unreadable(why) => why,
        wicp_base::file::Refused::TooLarge => format!(
            "the file is larger than {} MiB, not a CA bundle",
            MAX_BUNDLE_BYTES / 1024 / 1024
        ),
    })
}

/// A CA file, regular and bounded ([`wicp_base::file::read_regular`]): a FIFO
/// as `SSL_CERT_FILE`, `--ca-file` or inside `SSL_CERT_DIR` is refused at
/// once instead of blocking the pull past its deadline.
fn read_bounded(path: &Path) -> std::result::Result<Vec<u8>, String> {
    wicp_base::file::read_regular(path, MAX_BUNDLE_BYTES).map_err(|refused| match refused {
        wicp_base::file::Refused::Unreadable(why) => why,
        wicp_base::file::Refused::TooLarge => format!(
            "the file is larger than {} MiB, not a CA bundle",
            MAX_BUNDLE_BYTES / 1024 / 1024
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real CA certificate (the test CA of tests/fixtures/tls).
    const CA_PEM: &str = include_str!("../../../tests/fixtures/tls/ca.pem");

    fn write(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    fn ca_file(path: &Path) -> Result<usize> {
        ca_file_anchors(path).map(|a| a.len())
    }

    #[test]
    fn a_fifo_anywhere_in_the_trust_sources_never_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("bundle.pem");
        wicp_base::platform::test_support::mkfifo(&fifo);
        write(dir.path(), "ca.pem", CA_PEM.as_bytes());
        let started = std::time::Instant::now();
        let err = ca_file(&fifo).unwrap_err().to_string();
        assert!(err.contains("a FIFO, not a regular file"), "{err}");
        let env = [("SSL_CERT_FILE", fifo.display().to_string())];
        let err = sources(&env, None)
            .base_anchors(&[], &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("SSL_CERT_FILE") && err.contains("FIFO"),
            "{err}"
        );
        // In SSL_CERT_DIR the FIFO is skipped and the real bundle is read.
        let env = [("SSL_CERT_DIR", dir.path().display().to_string())];
        assert_eq!(sources(&env, None).base_anchors(&[], &[]).unwrap().len(), 1);
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }

    #[test]
    fn reads_a_bundle_and_refuses_anything_else() {
        let dir = tempfile::tempdir().unwrap();
        let two = format!("# comment\n{CA_PEM}\n{CA_PEM}");
        assert_eq!(
            ca_file(&write(dir.path(), "ok.pem", two.as_bytes())).unwrap(),
            2
        );

        let key = include_str!("../../../tests/fixtures/tls/server.key");
        let with_key = format!("{key}{CA_PEM}");
        assert_eq!(
            ca_file(&write(dir.path(), "key.pem", with_key.as_bytes())).unwrap(),
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
            let e = ca_file(&write(dir.path(), name, content)).unwrap_err();
            assert_eq!(e.kind(), wicp_base::error::Kind::Config, "{name}: {e}");
            assert!(e.what().contains(expect), "{name}: {e}");
            assert!(e.what().contains(name), "{e}");
            assert!(e.remedy().unwrap().contains("--ca-file"), "{e}");
        }
        let e = ca_file(&dir.path().join("missing.pem")).unwrap_err();
        assert!(e.what().contains("cannot read the --ca-file"), "{e}");
        let e = ca_file(dir.path()).unwrap_err();
        assert!(e.what().contains("not a regular file"), "{e}");
    }

    fn sources(env: &[(&str, String)], ca: Option<PathBuf>) -> Sources {
        Sources::from_lookup(
            |name| env.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone()),
            ca,
            None,
        )
    }

    #[test]
    fn ssl_cert_file_is_checked_only_when_set() {
        let dir = tempfile::tempdir().unwrap();
        let none: [&str; 0] = [];
        let ok = write(dir.path(), "ca.pem", CA_PEM.as_bytes());
        let empty = String::new();
        // Empty is unset: the system's bundle (here, the test's) is used.
        let s = sources(&[(SSL_CERT_FILE, empty)], None);
        assert_eq!(s.ssl_cert_file, None);
        let system = ok.display().to_string();
        assert_eq!(s.base_anchors(&[&system], &none).unwrap().len(), 1);
        let s = sources(&[(SSL_CERT_FILE, system.clone())], None);
        assert_eq!(s.base_anchors(&none, &none).unwrap().len(), 1);
        let missing = dir.path().join("nope.pem").display().to_string();
        let e = sources(&[(SSL_CERT_FILE, missing)], None)
            .base_anchors(&[&system], &none)
            .unwrap_err();
        assert!(e.what().starts_with("cannot read SSL_CERT_FILE"), "{e}");
        assert!(e.remedy().unwrap().contains("--ca-file"), "{e}");
        let empty = write(dir.path(), "empty.pem", b"").display().to_string();
        let e = sources(&[(SSL_CERT_FILE, empty)], None)
            .base_anchors(&[&system], &none)
            .unwrap_err();
        assert!(e.what().contains("holds no PEM certificate"), "{e}");
    }

    /// Another certificate (the test server's), parsable as an anchor.
    const OTHER_PEM: &str = include_str!("../../../tests/fixtures/tls/server.pem");

    /// A directory as OpenSSL's layout has it: each certificate, plus a
    /// second name for one of them (the hash link), plus a file that is
    /// not a certificate.
    fn cert_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "ca.pem", CA_PEM.as_bytes());
        write(dir.path(), "a1b2c3d4.0", CA_PEM.as_bytes());
        write(dir.path(), "server.pem", OTHER_PEM.as_bytes());
        write(dir.path(), "README", b"not a certificate");
        dir
    }

    #[test]
    fn the_bundle_file_is_read_and_its_directory_is_not() {
        let files = tempfile::tempdir().unwrap();
        let bundle = write(files.path(), "bundle.crt", CA_PEM.as_bytes())
            .display()
            .to_string();
        let dir = cert_dir();
        let dir_name = dir.path().display().to_string();
        let missing = files.path().join("none.crt").display().to_string();
        let system = Sources::default();
        // The first bundle that exists wins; the directory is not walked.
        let roots = system
            .base_anchors(&[&missing, &bundle], &[&dir_name])
            .unwrap();
        assert_eq!(roots.len(), 1);
        // No bundle: the directory, each certificate once.
        let roots = system.base_anchors(&[&missing], &[&dir_name]).unwrap();
        assert_eq!(roots.len(), 2);
        // SSL_CERT_DIR replaces the system's store, and may list several.
        let other = cert_dir();
        let both = format!("{dir_name}:{}", other.path().display());
        let s = sources(&[(SSL_CERT_DIR, both)], None);
        assert_eq!(s.base_anchors(&[&bundle], &[]).unwrap().len(), 2);
        // SSL_CERT_FILE and SSL_CERT_DIR together: both, without repeats.
        let s = sources(
            &[
                (SSL_CERT_DIR, dir_name.clone()),
                (SSL_CERT_FILE, bundle.clone()),
            ],
            None,
        );
        assert_eq!(s.base_anchors(&[], &[]).unwrap().len(), 2);
        // Nothing at all: a clear error.
        let e = system.base_anchors(&[&missing], &[&missing]).unwrap_err();
        assert!(e.what().contains("no CA certificates found"), "{e}");
        assert!(
            e.remedy().unwrap().contains("install ca-certificates"),
            "{e}"
        );
    }

    #[test]
    fn one_client_configuration_from_the_sources() {
        let files = tempfile::tempdir().unwrap();
        let bundle = write(files.path(), "bundle.crt", CA_PEM.as_bytes());
        let s = sources(&[(SSL_CERT_FILE, bundle.display().to_string())], None);
        assert!(s.client_config().is_ok());
    }

    /// Loads `bundle` as the system's, with the prepared store in `cache`:
    /// the anchors, and whether they came from the prepared store.
    fn load(bundle: &Path, cache: &Path) -> (Vec<TrustAnchor<'static>>, bool) {
        let mut roots = Roots::default();
        let prepared = roots
            .add_bundle(bundle, Strictness::System, Some(cache))
            .unwrap();
        (roots.anchors, prepared)
    }

    fn private_dir() -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    /// Issue 47: a bundle's anchors are prepared at the first load and
    /// read back from the store after; the same anchors either way.
    #[test]
    fn the_prepared_store_serves_the_next_load() {
        let files = tempfile::tempdir().unwrap();
        let cache = private_dir();
        let bundle = write(
            files.path(),
            "bundle.crt",
            format!("{CA_PEM}{OTHER_PEM}").as_bytes(),
        );
        let (decoded, from_store) = load(&bundle, cache.path());
        assert!(!from_store);
        assert_eq!(decoded.len(), 2);
        let store = cache.path().join(anchors::PREPARED);
        let meta = std::fs::metadata(&store).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let (kept, from_store) = load(&bundle, cache.path());
        assert!(from_store);
        assert_eq!(kept, decoded);
        // Without a cache directory nothing is kept or read.
        let mut roots = Roots::default();
        assert!(!roots.add_bundle(&bundle, Strictness::System, None).unwrap());
    }

    /// Issue 47: a changed bundle is never trusted from stale data, even
    /// when its size and modification time are put back as they were:
    /// its change time moved, and the store is rebuilt.
    #[test]
    fn a_changed_bundle_is_never_served_from_a_stale_store() {
        let files = tempfile::tempdir().unwrap();
        let cache = private_dir();
        let pad = |pem: &str, len: usize| format!("{pem}{}\n", "#".repeat(len - pem.len() - 1));
        let len = CA_PEM.len().max(OTHER_PEM.len()) + 16;
        let bundle = write(files.path(), "bundle.crt", pad(CA_PEM, len).as_bytes());
        let modified = std::fs::metadata(&bundle).unwrap().modified().unwrap();
        let (first, _) = load(&bundle, cache.path());
        assert_eq!(load(&bundle, cache.path()), (first.clone(), true));
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&bundle, pad(OTHER_PEM, len)).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&bundle)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        assert_eq!(std::fs::metadata(&bundle).unwrap().len() as usize, len);
        let (second, from_store) = load(&bundle, cache.path());
        assert!(!from_store, "a changed bundle was served from the store");
        assert_ne!(second, first);
        assert_eq!(second.len(), 1);
    }

    /// Issue 47: a prepared store is a trust store: one another user could
    /// have written (shared mode, another owner, a link, a second hard
    /// link), one for another bundle, and a cut or corrupt one are never
    /// read; the next load rebuilds it, private again.
    #[test]
    fn a_prepared_store_that_is_not_the_plugins_own_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let files = tempfile::tempdir().unwrap();
        let cache = private_dir();
        let bundle = write(files.path(), "bundle.crt", CA_PEM.as_bytes());
        let store = cache.path().join(anchors::PREPARED);
        let (good, _) = load(&bundle, cache.path());
        let fresh = |what: &str, tamper: &dyn Fn()| {
            load(&bundle, cache.path());
            tamper();
            let (anchors, from_store) = load(&bundle, cache.path());
            assert!(!from_store, "{what}: a tampered store was read");
            assert_eq!(anchors, good, "{what}");
            let meta = std::fs::symlink_metadata(&store).unwrap();
            assert!(
                meta.is_file() && meta.permissions().mode() & 0o777 == 0o600,
                "{what}"
            );
        };
        fresh("shared", &|| {
            std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o644)).unwrap()
        });
        fresh("another owner", &|| {
            std::os::unix::fs::chown(&store, Some(4242), None).unwrap()
        });
        fresh("a hard link", &|| {
            let _ = std::fs::remove_file(files.path().join("second"));
            std::fs::hard_link(&store, files.path().join("second")).unwrap()
        });
        fresh("a symbolic link", &|| {
            let other = files.path().join("other-store");
            std::fs::copy(&store, &other).unwrap();
            std::fs::remove_file(&store).unwrap();
            std::os::unix::fs::symlink(&other, &store).unwrap();
        });
        fresh("cut", &|| {
            let bytes = std::fs::read(&store).unwrap();
            std::fs::write(&store, &bytes[..bytes.len() / 2]).unwrap()
        });
        fresh("another bundle's", &|| {
            let other = write(files.path(), "other.crt", OTHER_PEM.as_bytes());
            load(&other, cache.path());
        });
        // In a directory another user may write, nothing is read.
        load(&bundle, cache.path());
        std::fs::set_permissions(cache.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(!load(&bundle, cache.path()).1);
    }
}
