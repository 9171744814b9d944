//! Which certificate authorities the upstream calls trust, loaded once per
//! process and only when a client is built (never on a cache hit).
//!
//! The base is the node's trust store, found the way OpenSSL, curl and Go
//! find it: `SSL_CERT_FILE` and/or `SSL_CERT_DIR` when set (they replace the
//! system's store); else the system's bundle file
//! (`/etc/ssl/certs/ca-certificates.crt` on Debian, and the other
//! distributions' names); else, on a node without a bundle file, the
//! system's certificate directory. The directory that holds the bundle holds
//! the same certificates again, one file (and one hash link) each, so it is
//! not walked when the bundle is there: that walk (a `statx` per entry) and
//! decoding every certificate twice were most of the cost of loading.
//! `--ca-file` adds a bundle on top, for the CA of a TLS-inspecting proxy or
//! of a private endpoint, without replacing the public roots the clouds'
//! endpoints need.
//!
//! The result is one [`rustls::ClientConfig`] (aws-lc-rs, the provider the
//! rest of the binary uses), shared by every client of the invocation,
//! the AWS SDK's included ([`crate::net::Settings::tls`]).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::base::error::{Error, Fact, Result, quote};

/// The standard variable naming a CA bundle that replaces the system's.
pub(crate) const SSL_CERT_FILE: &str = "SSL_CERT_FILE";
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
/// start; nothing is read from disk until [`Sources::client_config`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sources {
    /// `SSL_CERT_FILE`, when set and not empty.
    pub(crate) ssl_cert_file: Option<PathBuf>,
    /// `SSL_CERT_DIR`, when set and not empty.
    pub(crate) ssl_cert_dir: Option<String>,
    /// `--ca-file` (`WICP_CA_FILE`).
    pub(crate) ca_file: Option<PathBuf>,
}

impl Sources {
    pub(crate) fn from_lookup(
        env: impl Fn(&str) -> Option<String>,
        ca_file: Option<PathBuf>,
    ) -> Self {
        let set = |name: &str| env(name).filter(|v| !v.is_empty());
        Sources {
            ssl_cert_file: set(SSL_CERT_FILE).map(PathBuf::from),
            ssl_cert_dir: set(SSL_CERT_DIR),
            ca_file,
        }
    }

    /// Loads the roots (see the module's documentation) and builds the one
    /// TLS configuration every client of the process uses.
    pub(crate) fn client_config(&self) -> Result<Arc<rustls::ClientConfig>> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::internal(format!("cannot set up TLS: {e}")))?;
        if crate::base::platform::HAS_SYSTEM_VERIFIER
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
            let verifier =
                crate::base::platform::system_verifier(extra, provider).map_err(|e| {
                    Error::config(format!("cannot use the Windows certificate store: {e}"))
                        .fix("set SSL_CERT_FILE to a PEM bundle of the CAs to trust instead")
                })?;
            crate::base::log::debug!("trusting the Windows certificate store");
            return Ok(Arc::new(
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(verifier)
                    .with_no_client_auth(),
            ));
        }
        let roots = self.roots_from(&SYSTEM_BUNDLES, &SYSTEM_DIRS)?;
        Ok(Arc::new(
            builder.with_root_certificates(roots).with_no_client_auth(),
        ))
    }

    /// The trust anchors, with the system's locations as given (tests pass
    /// their own).
    fn roots_from(&self, bundles: &[&str], dirs: &[&str]) -> Result<RootCertStore> {
        let mut store = Roots::default();
        let mut looked = Vec::new();
        if self.ssl_cert_file.is_some() || self.ssl_cert_dir.is_some() {
            if let Some(file) = &self.ssl_cert_file {
                add_ssl_cert_file(file, &mut store)?;
                looked.push(format!("SSL_CERT_FILE {}", file.display()));
            }
            if let Some(dirs) = &self.ssl_cert_dir {
                for dir in dirs.split(':').filter(|d| !d.is_empty()) {
                    add_dir(Path::new(dir), &mut store);
                    looked.push(format!("SSL_CERT_DIR {dir}"));
                }
            }
        } else if let Some(bundle) = bundles.iter().map(Path::new).find(|p| p.is_file()) {
            add_lenient(
                bundle,
                &read_bounded(bundle).unwrap_or_default(),
                &mut store,
            );
            looked.push(bundle.display().to_string());
        } else {
            for dir in dirs {
                add_dir(Path::new(dir), &mut store);
                looked.push((*dir).to_string());
            }
        }
        let system = store.len();
        crate::base::log::debug!(
            "trusting {system} CA certificate(s) from {}",
            if looked.is_empty() {
                "nowhere".to_string()
            } else {
                looked.join(", ")
            }
        );
        if let Some(ca_file) = &self.ca_file {
            add_ca_file(ca_file, &mut store)?;
        }
        if store.is_empty() {
            return Err(Error::config(format!(
                "cannot build the HTTP client: no CA certificates found (looked in {})",
                if looked.is_empty() {
                    "no location".to_string()
                } else {
                    looked.join(", ")
                }
            ))
            .fix("the node has no CA bundle: install ca-certificates, set SSL_CERT_FILE, or pass --ca-file"));
        }
        Ok(store.store)
    }
}

/// Trust anchors being collected, each certificate parsed once however
/// many files hold it (a bundle, the directory it sits in, and that
/// directory's hash links all hold the same certificates).
struct Roots {
    store: RootCertStore,
    seen: HashSet<Vec<u8>>,
    /// The files read, by device and inode: a hash link, or the bundle
    /// inside a directory also listed, is not read twice.
    files: HashSet<(u64, u64)>,
}

impl Default for Roots {
    fn default() -> Self {
        Roots {
            store: RootCertStore::empty(),
            seen: HashSet::new(),
            files: HashSet::new(),
        }
    }
}

impl Roots {
    fn len(&self) -> usize {
        self.store.len()
    }

    fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// Whether the file at `path` has not been read yet, remembering it.
    fn first_read(&mut self, path: &Path) -> bool {
        match crate::base::platform::id_of(path) {
            Ok(id) => self.files.insert(id),
            Err(_) => true,
        }
    }

    /// Whether `der` is new, remembering it.
    fn first_sight(&mut self, der: &CertificateDer<'_>) -> bool {
        self.seen.insert(der.as_ref().to_vec())
    }
}

/// Adds the `--ca-file` bundle: at least one certificate, each usable as a
/// trust anchor. Returns how many.
fn add_ca_file(path: &Path, store: &mut Roots) -> Result<usize> {
    let (added, _) = read_ca_file(path, store)?;
    Ok(added)
}

/// Reads the `--ca-file` bundle once into `store`: how many anchors it
/// added, and the PEM text (for a verifier that takes certificates).
fn read_ca_file(path: &Path, store: &mut Roots) -> Result<(usize, Vec<u8>)> {
    let shown = quote(&path.display().to_string());
    let refused = |what: String| {
        Error::config(what)
            .fix("pass a PEM file of CA certificates (-----BEGIN CERTIFICATE-----) readable by the kubelet's user, \
                  or unset --ca-file (WICP_CA_FILE)")
            .with(Fact::Flag, "--ca-file")
    };
    let pem = read_trusted(path)
        .map_err(|e| refused(format!("cannot read the --ca-file {shown}: {e}")))?;
    let added =
        add_anchors(&pem, store).map_err(|why| refused(format!("the --ca-file {shown} {why}")))?;
    crate::base::log::debug!("trusting {added} extra CA certificate(s) from {shown}");
    Ok((added, pem))
}

/// The certificates of the `--ca-file` bundle, read and checked once as
/// [`add_ca_file`] does, for a verifier that takes certificates rather than
/// trust anchors (the Windows store's).
fn ca_file_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let (_, pem) = read_ca_file(path, &mut Roots::default())?;
    Ok(CertificateDer::pem_slice_iter(&pem)
        .filter_map(std::result::Result::ok)
        .collect())
}

/// A TLS configuration trusting the CAs of `path` and nothing else (no
/// system store, no `--ca-file`, no `SSL_CERT_FILE`): for an endpoint
/// whose only legitimate issuer the admin names, such as an AKS cluster's
/// CA for its identity-binding endpoint. `what` names the option in
/// messages.
pub(crate) fn only(path: &Path, what: &str) -> Result<Arc<rustls::ClientConfig>> {
    let shown = quote(&path.display().to_string());
    let fix = format!(
        "point {what} at the PEM file of the cluster's CA (on AKS /etc/kubernetes/certs/ca.crt)"
    );
    let pem = read_trusted(path).map_err(|e| {
        Error::config(format!("cannot read the {what} {shown}: {e}"))
            .fix(fix.clone())
            .with(Fact::Flag, what)
    })?;
    let mut roots = Roots::default();
    add_anchors(&pem, &mut roots).map_err(|why| {
        Error::config(format!("the {what} {shown} {why}"))
            .fix(fix)
            .with(Fact::Flag, what)
    })?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::internal(format!("cannot set up TLS: {e}")))?
        .with_root_certificates(roots.store)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// Adds `SSL_CERT_FILE`, checked as strictly as `--ca-file`: a TLS stack
/// that treated an unreadable one as an empty trust store would report
/// every server as untrusted, far from the cause.
fn add_ssl_cert_file(path: &Path, store: &mut Roots) -> Result<usize> {
    store.first_read(path);
    let shown = quote(&path.display().to_string());
    let refused = |what: String| {
        Error::config(what)
            .fix("point SSL_CERT_FILE at a PEM bundle of CA certificates (it replaces the system's trust store) or unset it; \
                  to add a CA to the system's, use --ca-file")
            .with(Fact::Flag, "SSL_CERT_FILE")
    };
    let pem = read_trusted(path)
        .map_err(|e| refused(format!("cannot read SSL_CERT_FILE {shown}: {e}")))?;
    add_anchors(&pem, store).map_err(|why| refused(format!("SSL_CERT_FILE {shown} {why}")))
}

/// The certificates of a PEM bundle, each checked as a webpki trust anchor,
/// all or nothing. Other PEM sections (keys, CRLs) are skipped.
fn add_anchors(pem: &[u8], store: &mut Roots) -> std::result::Result<usize, String> {
    let ders = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| format!("is not a PEM bundle: {e}"))?;
    if ders.is_empty() {
        return Err("holds no PEM certificate".to_string());
    }
    let mut checked = RootCertStore::empty();
    for (n, der) in ders.iter().enumerate() {
        checked.add(der.clone()).map_err(|e| {
            format!(
                "holds a certificate (number {}) that cannot be parsed: {e}",
                n.saturating_add(1)
            )
        })?;
    }
    let added = checked.len();
    for (der, anchor) in ders.iter().zip(checked.roots) {
        if store.first_sight(der) {
            store.store.roots.push(anchor);
        }
    }
    Ok(added)
}

/// Adds what parses from a system file, skipping the rest, as OpenSSL does
/// with the system's own store: one odd certificate a distribution ships
/// must not leave the node without any.
fn add_lenient(path: &Path, pem: &[u8], store: &mut Roots) {
    let ders: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .filter_map(std::result::Result::ok)
        .filter(|der| store.first_sight(der))
        .collect();
    let (_, skipped) = store.store.add_parsable_certificates(ders);
    if skipped > 0 {
        crate::base::log::debug!(
            "skipped {skipped} unusable certificate(s) in {}",
            path.display()
        );
    }
}

/// Adds the certificates of every file in a directory (OpenSSL's hashed
/// layout holds links to the same files: duplicates are harmless).
fn add_dir(dir: &Path, store: &mut Roots) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !store.first_read(&path) {
            continue;
        }
        if let Ok(pem) = read_bounded(&path) {
            add_lenient(&path, &pem, store);
        }
    }
}

/// A CA file the admin names (`--ca-file`, `SSL_CERT_FILE`, a CA option):
/// bounded and regular as [`read_bounded`], and refused when another user
/// could change it ([`crate::base::file::read_trusted`]): the trust anchor
/// for where a token goes would then be anyone's.
fn read_trusted(path: &Path) -> std::result::Result<Vec<u8>, String> {
    crate::base::file::read_trusted(path, MAX_BUNDLE_BYTES).map_err(|refused| match refused {
        crate::base::file::Refused::Unreadable(why) => why,
        crate::base::file::Refused::TooLarge => format!(
            "the file is larger than {} MiB, not a CA bundle",
            MAX_BUNDLE_BYTES / 1024 / 1024
        ),
    })
}

/// A CA file, regular and bounded ([`crate::base::file::read_regular`]): a FIFO
/// as `SSL_CERT_FILE`, `--ca-file` or inside `SSL_CERT_DIR` is refused at
/// once instead of blocking the pull past its deadline.
fn read_bounded(path: &Path) -> std::result::Result<Vec<u8>, String> {
    crate::base::file::read_regular(path, MAX_BUNDLE_BYTES).map_err(|refused| match refused {
        crate::base::file::Refused::Unreadable(why) => why,
        crate::base::file::Refused::TooLarge => format!(
            "the file is larger than {} MiB, not a CA bundle",
            MAX_BUNDLE_BYTES / 1024 / 1024
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real CA certificate (the test CA of tests/fixtures/tls).
    const CA_PEM: &str = include_str!("../../tests/fixtures/tls/ca.pem");

    fn write(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    fn ca_file(path: &Path) -> Result<usize> {
        add_ca_file(path, &mut Roots::default())
    }

    #[test]
    fn a_fifo_anywhere_in_the_trust_sources_never_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("bundle.pem");
        crate::base::platform::tests::mkfifo(&fifo);
        write(dir.path(), "ca.pem", CA_PEM.as_bytes());
        let started = std::time::Instant::now();
        let err = ca_file(&fifo).unwrap_err().to_string();
        assert!(err.contains("a FIFO, not a regular file"), "{err}");
        let env = [("SSL_CERT_FILE", fifo.display().to_string())];
        let err = sources(&env, None).client_config().unwrap_err().to_string();
        assert!(
            err.contains("SSL_CERT_FILE") && err.contains("FIFO"),
            "{err}"
        );
        // In SSL_CERT_DIR the FIFO is skipped and the real bundle is read.
        let env = [("SSL_CERT_DIR", dir.path().display().to_string())];
        sources(&env, None).client_config().unwrap();
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

        let key = include_str!("../../tests/fixtures/tls/server.key");
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
            assert_eq!(e.kind(), crate::base::error::Kind::Config, "{name}: {e}");
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
        assert_eq!(s.roots_from(&[&system], &none).unwrap().len(), 1);
        let s = sources(&[(SSL_CERT_FILE, system.clone())], None);
        assert_eq!(s.roots_from(&none, &none).unwrap().len(), 1);
        let missing = dir.path().join("nope.pem").display().to_string();
        let e = sources(&[(SSL_CERT_FILE, missing)], None)
            .roots_from(&[&system], &none)
            .unwrap_err();
        assert!(e.what().starts_with("cannot read SSL_CERT_FILE"), "{e}");
        assert!(e.remedy().unwrap().contains("--ca-file"), "{e}");
        let empty = write(dir.path(), "empty.pem", b"").display().to_string();
        let e = sources(&[(SSL_CERT_FILE, empty)], None)
            .roots_from(&[&system], &none)
            .unwrap_err();
        assert!(e.what().contains("holds no PEM certificate"), "{e}");
    }

    /// Another certificate (the test server's), parsable as an anchor.
    const OTHER_PEM: &str = include_str!("../../tests/fixtures/tls/server.pem");

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
            .roots_from(&[&missing, &bundle], &[&dir_name])
            .unwrap();
        assert_eq!(roots.len(), 1);
        // No bundle: the directory, each certificate once.
        let roots = system.roots_from(&[&missing], &[&dir_name]).unwrap();
        assert_eq!(roots.len(), 2);
        // SSL_CERT_DIR replaces the system's store, and may list several.
        let other = cert_dir();
        let both = format!("{dir_name}:{}", other.path().display());
        let s = sources(&[(SSL_CERT_DIR, both)], None);
        assert_eq!(s.roots_from(&[&bundle], &[]).unwrap().len(), 2);
        // SSL_CERT_FILE and SSL_CERT_DIR together: both, without repeats.
        let s = sources(
            &[
                (SSL_CERT_DIR, dir_name.clone()),
                (SSL_CERT_FILE, bundle.clone()),
            ],
            None,
        );
        assert_eq!(s.roots_from(&[], &[]).unwrap().len(), 2);
        // --ca-file adds to whichever base.
        let extra = write(files.path(), "extra.pem", OTHER_PEM.as_bytes());
        let s = sources(&[], Some(extra.clone()));
        assert_eq!(s.roots_from(&[&bundle], &[&dir_name]).unwrap().len(), 2);
        // Nothing at all: a clear error, and --ca-file alone is enough.
        let e = system.roots_from(&[&missing], &[&missing]).unwrap_err();
        assert!(e.what().contains("no CA certificates found"), "{e}");
        assert!(
            e.remedy().unwrap().contains("install ca-certificates"),
            "{e}"
        );
        assert_eq!(s.roots_from(&[&missing], &[]).unwrap().len(), 1);
    }

    #[test]
    fn one_client_configuration_from_the_sources() {
        let files = tempfile::tempdir().unwrap();
        let bundle = write(files.path(), "bundle.crt", CA_PEM.as_bytes());
        let s = sources(&[(SSL_CERT_FILE, bundle.display().to_string())], None);
        assert!(s.client_config().is_ok());
    }
}
