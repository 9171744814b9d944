//! The network layer: the process's proxy and trust settings, read once at
//! start into one [`Settings`] value that is passed down to where clients
//! are built, and the HTTP policy every upstream call shares ([`http`]).
//!
//! No global state: the environment is read through the lookup given to
//! [`Settings::from_lookup`], `--ca-file` is passed in, and the trust store
//! is loaded into a cell inside the value, at the first client built (never
//! on a cache hit), once however many clients follow.

#![forbid(unsafe_code)]
// The docs are read with `--document-private-items` (`make lint`): a public
// item may link the private ones it explains.
#![allow(rustdoc::private_intra_doc_links)]
#![warn(unreachable_pub)]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use wicp_base::deadline::Deadline;
use wicp_base::error::Result;

pub mod observe;
pub mod inputs;
pub mod anchors;
pub mod http;
pub mod metadata;
pub mod proxy;
pub mod sdk_connector;
pub mod trust;

/// How this process reaches upstreams.
#[derive(Debug, Default)]
pub struct Settings {
    proxies: proxy::Proxies,
    trust: trust::Sources,
    /// The TLS configuration (trust store and verifier), built at most once.
    tls: OnceLock<Result<Arc<rustls::ClientConfig>>>,
}

impl Settings {
    /// Reads the proxy and trust variables through `env` (the process's
    /// environment in production, anything in tests) and takes `--ca-file`
    /// and `--cache-dir` (where a bundle's prepared anchors are kept).
    /// No file is read here.
    pub fn from_lookup(
        env: impl Fn(&str) -> Option<String>,
        ca_file: Option<PathBuf>,
        cache_dir: Option<PathBuf>,
    ) -> Self {
        Settings {
            proxies: proxy::Proxies::from_lookup(&env),
            trust: trust::Sources::from_lookup(&env, ca_file, cache_dir),
            tls: OnceLock::new(),
        }
    }

    pub fn proxies(&self) -> &proxy::Proxies {
        &self.proxies
    }

    /// The one TLS configuration of the process, loaded at the first call.
    pub fn tls(&self) -> Result<Arc<rustls::ClientConfig>> {
        self.tls.get_or_init(|| self.trust.client_config()).clone()
    }

    /// Whether the trust store has been loaded (for tests of laziness).
    #[cfg(test)]
    fn tls_loaded(&self) -> bool {
        self.tls.get().is_some()
    }

    /// A client for upstream calls: through the proxy settings.
    pub fn client(&self, deadline: &Deadline) -> Result<http::Client> {
        match self.proxies.describe() {
            Some(proxies) => wicp_base::log::debug!("proxy settings: {proxies}"),
            None => wicp_base::log::debug!("no proxy variables set: connecting directly"),
        }
        let builder = self.proxies.apply(http::builder(deadline))?;
        http::Client::build(builder, self.tls()?, self.proxies.describe())
    }

    /// A client for one endpoint the admin pinned: `host` (the TLS server
    /// name and `Host`) is dialled at `address` whatever DNS says, never
    /// through a proxy, HTTPS only, and trusting only the CAs in `ca`
    /// ([`trust::only`]). AKS's identity-binding endpoint is reached so:
    /// the API server's address with the binding's SNI name.
    pub fn pinned_client(
        &self,
        deadline: &Deadline,
        host: &str,
        address: std::net::SocketAddr,
        ca: &std::path::Path,
        ca_option: &'static wicp_base::flags::FlagSpec,
    ) -> Result<http::Client> {
        wicp_base::log::debug!(
            "pinned endpoint {host} at {address}: directly, trusting only {}",
            ca.display()
        );
        let builder = http::builder(deadline)
            .no_proxy()
            .https_only(true)
            .resolve(host, address);
        http::Client::build(builder, trust::only(ca, ca_option)?, None)
    }

    /// A client that ignores the proxy settings, for node-local endpoints
    /// (the EKS Pod Identity Agent on a link-local address): a proxy cannot
    /// reach them, and must not see the token sent to them.
    pub fn direct_client(&self, deadline: &Deadline) -> Result<http::Client> {
        wicp_base::log::debug!(
            "node-local endpoint: connecting directly, whatever the proxy settings"
        );
        http::Client::build(http::builder(deadline).no_proxy(), self.tls()?, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA_PEM: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/tls/ca.pem"
    );

    #[test]
    fn the_trust_store_is_loaded_once_and_only_for_a_client() {
        let env = |name: &str| (name == trust::SSL_CERT_FILE).then(|| CA_PEM.to_string());
        let net = Settings::from_lookup(env, Some(PathBuf::from(CA_PEM)), None);
        assert!(!net.tls_loaded(), "building the settings reads no file");
        let deadline = Deadline::after(std::time::Duration::from_secs(5));
        let _proxied = net.client(&deadline).unwrap();
        assert!(net.tls_loaded());
        let first = net.tls().unwrap();
        let _direct = net.direct_client(&deadline).unwrap();
        assert!(
            Arc::ptr_eq(&first, &net.tls().unwrap()),
            "one configuration"
        );
        // An error is kept too: the same message for every client.
        let bad = Settings::from_lookup(|_| None, Some(PathBuf::from("/nonexistent/ca.pem")), None);
        let e = bad.client(&deadline).unwrap_err();
        assert!(e.what().contains("cannot read the --ca-file"), "{e}");
        assert_eq!(bad.direct_client(&deadline).unwrap_err(), e);
    }
}
