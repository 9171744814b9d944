//! AKS identity bindings: the service account token goes to the cluster's
//! identity-binding endpoint instead of Entra ID, and that endpoint's
//! access token goes through the usual ACR exchange ([`super::acr`]).
//!
//! Identity bindings lift Entra ID's limit of 20 federated credentials per
//! managed identity: AKS keeps one federated credential
//! (`aks-identity-binding`) on the identity and exchanges tokens for every
//! bound service account itself, behind the API server. The stock
//! `acr-credential-provider` speaks it since cloud-provider-azure #9907
//! (`pkg/credentialprovider/identity_bindings_credentials.go`,
//! `cmd/acr-credential-provider/pkg/config/identity_bindings_config.go`,
//! cherry-picked to 1.34 and 1.35), and AgentBaker turns it on for Linux
//! nodes with service-account image pull. The wire format, as read there:
//!
//! ```text
//! POST https://<ib-sni-name>/         dialled at <ib-apiserver-ip>:443,
//!                                     TLS server name <ib-sni-name>,
//!                                     trusting only the cluster CA, no proxy
//! Content-Type: application/x-www-form-urlencoded
//! grant_type=client_credentials
//! client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer
//! client_assertion=<service account token, audience api://AKSIdentityBinding>
//! client_id=<managed identity's client ID>
//! scope=https://containerregistry.azure.net/.default
//! ```
//!
//! answered `200 {"access_token": "...", "expires_in": <seconds>}`.
//!
//! Where the token goes (the SNI name, the address, the CA) is the admin's
//! alone: flags of the kubelet's config, checked once when the exchanger
//! is built. A service account's annotations name only the identity
//! (`kubernetes.azure.com/acr-client-id`, as upstream); they never move
//! the endpoint.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use crate::oauth;
use wicp_base::deadline::Deadline;
use wicp_base::error::{Error, Result, quote};
use wicp_base::redact;
use wicp_base::secret::Secret;
use wicp_net::http;

use super::identity::{self, CLIENT_ID_KEYS, TENANT_ID_KEYS};
use super::{
    AZURE_IDENTITY_BINDING_ADDRESS, AZURE_IDENTITY_BINDING_CA, AZURE_IDENTITY_BINDING_CLIENT_ID,
    AZURE_IDENTITY_BINDING_SNI,
};
use super::{Options, entra};

/// The audience AgentBaker's identity-binding entries ask the kubelet for.
pub const AUDIENCE: &str = "api://AKSIdentityBinding";

/// The cluster CA on an AKS node, which upstream hard-codes.
pub(crate) const DEFAULT_CA: &str = if wicp_base::platform::WINDOWS {
    r"c:\k\ca.crt"
} else {
    "/etc/kubernetes/certs/ca.crt"
};

const DEFAULT_PORT: u16 = 443;

/// The identity-binding endpoint, checked.
#[derive(Clone, Debug)]
pub struct Binding {
    /// The TLS server name and `Host` (`--ib-sni-name` upstream).
    pub sni: String,
    /// Where to dial: an IP address or the API server's DNS name
    /// (`--ib-apiserver-ip` upstream, which takes either), and its port.
    pub host: String,
    pub port: u16,
    /// The only CA trusted for it.
    pub ca: PathBuf,
    /// The identity for service accounts without a client-id annotation
    /// (`--ib-default-client-id`).
    pub default_client_id: Option<String>,
}

impl Binding {
    /// The binding from the options, `None` unless its SNI name is set;
    /// every part checked here, before any request.
    pub(crate) fn from_options(options: &Options) -> Result<Option<Binding>> {
        let Some(sni) = options.azure_identity_binding_sni.as_deref() else {
            let set = [
                (
                    &AZURE_IDENTITY_BINDING_ADDRESS,
                    options.azure_identity_binding_address.is_some(),
                ),
                (
                    &AZURE_IDENTITY_BINDING_CLIENT_ID,
                    options.azure_identity_binding_client_id.is_some(),
                ),
                (
                    &AZURE_IDENTITY_BINDING_CA,
                    options.azure_identity_binding_ca.is_some(),
                ),
            ];
            if let Some((flag, _)) = set.iter().find(|(_, is_set)| *is_set) {
                return Err(Error::flag(
                    *flag,
                    "is set without --azure-identity-binding-sni, which it needs",
                )
                .fix("pass the cluster's identity-binding SNI name (AgentBaker's IDENTITY_BINDINGS_LOCAL_AUTHORITY_SNI), or drop the others"));
            }
            return Ok(None);
        };
        let sni = parse_sni(sni.trim())?;
        let Some(address) = options.azure_identity_binding_address.as_deref() else {
            return Err(Error::flag(&AZURE_IDENTITY_BINDING_SNI, "needs --azure-identity-binding-address")
                .fix("pass the API server's address (AgentBaker passes $API_SERVER_NAME as --ib-apiserver-ip)"));
        };
        let (host, port) = parse_address(address.trim())?;
        let default_client_id = match options.azure_identity_binding_client_id.as_deref() {
            None => None,
            Some(value) => Some(identity::parse_client_id(value.trim()).ok_or_else(|| {
                Error::flag(
                    &AZURE_IDENTITY_BINDING_CLIENT_ID,
                    format!("is {}, not a client ID (a GUID)", quote(value)),
                )
                .fix("set it to the managed identity's client ID (az identity show --query clientId)")
            })?),
        };
        Ok(Some(Binding {
            sni,
            host,
            port,
            ca: options
                .azure_identity_binding_ca
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_CA)),
            default_client_id,
        }))
    }

    /// `https://<sni>/` (with the port when it is not 443).
    pub fn url(&self) -> String {
        if self.port == DEFAULT_PORT {
            format!("https://{}/", self.sni)
        } else {
            format!("https://{}:{}/", self.sni, self.port)
        }
    }

    /// What `explain` and the cache key show.
    pub fn describe(&self) -> String {
        format!(
            "{} dialled at {}:{}, trusting only {}",
            self.url(),
            self.host,
            self.port,
            self.ca.display()
        )
    }

    /// The address to dial: the IP given, or the name resolved now, the
    /// first answer (as upstream), within the deadline.
    pub async fn address(&self, deadline: &Deadline) -> Result<SocketAddr> {
        if let Ok(ip) = self.host.parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, self.port));
        }
        let lookup = tokio::net::lookup_host((self.host.as_str(), self.port));
        let found = tokio::time::timeout(deadline.remaining(), lookup)
            .await
            .map_err(|_| {
                let call = http::Call::new(
                    "the AKS identity binding",
                    "resolving the identity-binding address",
                );
                http::deadline_exceeded(deadline, &call)
            })?
            .map_err(|e| {
                Error::network(format!(
                    "cannot resolve the identity-binding address {}: {e}",
                    self.host
                ))
                .fix("check --azure-identity-binding-address (the API server's name or IP) and the node's DNS")
            })?;
        found.into_iter().next().ok_or_else(|| {
            Error::network(format!(
                "the identity-binding address {} resolves to nothing",
                self.host
            ))
        })
    }

    /// The client ID (annotation, else the default) and the tenant for
    /// the ACR exchange (annotation, else `default_tenant`, else none:
    /// ACR reads it from the access token).
    pub fn identity(
        &self,
        annotations: &std::collections::BTreeMap<String, String>,
        default_tenant: Option<&str>,
    ) -> Result<(String, String)> {
        let client_id = match identity::first(annotations, &CLIENT_ID_KEYS)? {
            Some((value, key)) => identity::parse_client_id(value).ok_or_else(|| {
                Error::annotation_key(key, format!(
                    "annotation {key} is {}, not a client ID (a GUID)",
                    quote(value)
                ))
                .fix("set it to the client ID of the managed identity the service account is bound to")
            })?,
            None => self.default_client_id.clone().ok_or_else(|| {
                Error::annotation_key(identity::AKS_CLIENT_ID, format!(
                    "the service account has no {} annotation naming the managed identity of its identity binding, and no default is configured",
                    identity::AKS_CLIENT_ID
                ))
                .fix(format!(
                    "annotate the service account with {}: <client ID> (and list it in tokenAttributes), or pass --azure-identity-binding-client-id",
                    identity::AKS_CLIENT_ID
                ))
            })?,
        };
        let tenant = match identity::first(annotations, &TENANT_ID_KEYS)? {
            Some((value, key)) => identity::parse_tenant(value).ok_or_else(|| {
                identity::invalid_tenant(&identity::Source::Annotation(key), value)
            })?,
            None => default_tenant.unwrap_or_default().to_string(),
        };
        Ok((client_id, tenant))
    }
}

/// A DNS name: no scheme (upstream refuses `http(s)://` too), no port, no
/// path, not an IP address (it is the TLS server name).
fn parse_sni(value: &str) -> Result<String> {
    let bad = |why: &str| {
        Error::flag(
            &AZURE_IDENTITY_BINDING_SNI,
            format!("{} {why}", quote(value)),
        )
        .fix("pass the bare host name the endpoint's certificate is for (AgentBaker's IDENTITY_BINDINGS_LOCAL_AUTHORITY_SNI)")
    };
    if value.contains("://") {
        return Err(bad("has a scheme"));
    }
    if value.parse::<IpAddr>().is_ok() {
        return Err(bad("is an IP address, not a TLS server name"));
    }
    match rustls::pki_types::ServerName::try_from(value) {
        Ok(rustls::pki_types::ServerName::DnsName(_)) => Ok(value.to_ascii_lowercase()),
        _ => Err(bad("is not a DNS name")),
    }
}

/// `HOST`, `HOST:PORT`, `[IPv6]:PORT` or a bare IPv6 address.
fn parse_address(value: &str) -> Result<(String, u16)> {
    let bad = || {
        Error::flag(
            &AZURE_IDENTITY_BINDING_ADDRESS,
            format!("{} is not HOST[:PORT]", quote(value)),
        )
        .fix("pass the API server's IP address or DNS name, with :PORT only if it is not 443")
    };
    if let Ok(ip) = value.parse::<IpAddr>() {
        return Ok((ip.to_string(), DEFAULT_PORT));
    }
    if let Ok(addr) = value.parse::<SocketAddr>() {
        return Ok((addr.ip().to_string(), addr.port()));
    }
    let (host, port) = match value.rsplit_once(':') {
        Some((host, port)) => (host, port.parse::<u16>().map_err(|_| bad())?),
        None => (value, DEFAULT_PORT),
    };
    match rustls::pki_types::ServerName::try_from(host) {
        Ok(rustls::pki_types::ServerName::DnsName(_)) if port != 0 => {
            Ok((host.to_ascii_lowercase(), port))
        }
        _ => Err(bad()),
    }
}

/// Asks the binding endpoint for an ACR access token of `client_id`.
pub async fn request_token(
    client: &http::Client,
    binding: &Binding,
    client_id: &str,
    assertion: &Secret,
    deadline: &Deadline,
) -> Result<Secret> {
    let url = binding.url();
    let call = http::Call::new(
        "the AKS identity binding",
        format!("the AKS identity-binding token request to {}", binding.sni),
    );
    wicp_base::log::debug!(
        "requesting an ACR access token for client {client_id} from the identity binding at {} ({}:{})",
        binding.sni,
        binding.host,
        binding.port
    );
    let form = entra::assertion_form(client_id, assertion);
    let endpoint = wicp_net::observe::Endpoint::TokenExchange;
    let reply = http::post_form(client, endpoint, &url, &form, &call, deadline).await?;
    if reply.is_success() {
        return entra::access_token(
            &reply,
            "the AKS identity binding",
            format_args!("the identity binding at {}", binding.sni),
            "check that --azure-identity-binding-sni names the cluster's identity-binding endpoint",
        );
    }
    Err(explain(binding, client_id, &reply))
}

/// A refusal: the status, the OAuth error and description when the body
/// has them (cleaned and bounded, as Entra's), else the body's shape; and
/// what to check.
fn explain(binding: &Binding, client_id: &str, reply: &http::Reply) -> Error {
    let parsed = reply.json::<oauth::ErrorResponse>().unwrap_or_default();
    let mut detail = vec![format!("HTTP {}", reply.status)];
    if let Some(error) = parsed.error.as_deref() {
        detail.push(redact::clean(error, 40));
    }
    match parsed.error_description.as_deref() {
        Some(description) if !description.is_empty() => {
            detail.push(redact::clean(description, 300));
        }
        _ if parsed.error.is_none() => detail.push(redact::body_shape(&reply.body)),
        _ => {}
    }
    let fix = match reply.status {
        400 | 401 | 403 => format!(
            "check that managed identity {client_id} has an identity binding to this cluster, and that the service account may use it: \
             a ClusterRole with verb use-managed-identity on resource {client_id} (apiGroup cid.wi.aks.azure.com) bound to it; \
             the entry's serviceAccountTokenAudience must be {AUDIENCE}"
        ),
        404 | 421 => format!(
            "--azure-identity-binding-sni {} is not this cluster's identity-binding SNI name (AgentBaker's IDENTITY_BINDINGS_LOCAL_AUTHORITY_SNI)",
            binding.sni
        ),
        _ => "the identity-binding endpoint is part of the cluster's API server: check the cluster's health and try again".to_string(),
    };
    Error::upstream(format!(
        "the AKS identity binding at {} {} to issue a token for client {client_id} ({})",
        binding.sni,
        redact::verb(reply.status),
        detail.join(", ")
    ))
    .fix(fix)
    .answered("the AKS identity binding", reply.status, &reply.body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(sni: Option<&str>, address: Option<&str>) -> Options {
        Options {
            azure_identity_binding_sni: sni.map(str::to_string),
            azure_identity_binding_address: address.map(str::to_string),
            ..Options::default()
        }
    }

    #[test]
    fn the_endpoint_is_checked_once_from_flags_only() {
        let b = Binding::from_options(&options(Some("IB.cluster.test"), Some("10.0.0.1")))
            .unwrap()
            .unwrap();
        assert_eq!(b.url(), "https://ib.cluster.test/");
        assert_eq!((b.host.as_str(), b.port), ("10.0.0.1", 443));
        assert_eq!(b.ca, PathBuf::from(DEFAULT_CA));
        let b = Binding::from_options(&options(
            Some("ib.cluster.test"),
            Some("api.hcp.eastus.azmk8s.io:8443"),
        ))
        .unwrap()
        .unwrap();
        assert_eq!(b.url(), "https://ib.cluster.test:8443/");
        assert_eq!(b.host, "api.hcp.eastus.azmk8s.io");
        let b = Binding::from_options(&options(Some("ib.test"), Some("[::1]:9443")))
            .unwrap()
            .unwrap();
        assert_eq!((b.host.as_str(), b.port), ("::1", 9443));
        assert!(
            Binding::from_options(&options(None, None))
                .unwrap()
                .is_none()
        );
        for (sni, address) in [
            (Some("https://ib.cluster.test"), Some("10.0.0.1")),
            (Some("10.0.0.1"), Some("10.0.0.1")),
            (Some("ib.cluster.test/path"), Some("10.0.0.1")),
            (Some("ib.cluster.test"), None),
            (Some("ib.cluster.test"), Some("10.0.0.1:http")),
            (Some("ib.cluster.test"), Some("bad host:443")),
            (None, Some("10.0.0.1")),
        ] {
            assert!(
                Binding::from_options(&options(sni, address)).is_err(),
                "{sni:?} {address:?}"
            );
        }
    }

    #[test]
    fn the_identity_comes_from_the_annotation_else_the_default() {
        let mut o = options(Some("ib.cluster.test"), Some("10.0.0.1"));
        o.azure_identity_binding_client_id = Some("5B8E2C1A-9F3D-4E7B-A6C2-1D0F8E9A7B3C".into());
        let b = Binding::from_options(&o).unwrap().unwrap();
        let none = std::collections::BTreeMap::new();
        let (client, tenant) = b.identity(&none, None).unwrap();
        assert_eq!(client, "5b8e2c1a-9f3d-4e7b-a6c2-1d0f8e9a7b3c");
        assert_eq!(tenant, "");
        let annotated: std::collections::BTreeMap<String, String> = [(
            identity::AKS_CLIENT_ID.to_string(),
            "11111111-2222-3333-4444-555555555555".to_string(),
        )]
        .into();
        let (client, tenant) = b
            .identity(&annotated, Some("contoso.onmicrosoft.com"))
            .unwrap();
        assert_eq!(client, "11111111-2222-3333-4444-555555555555");
        assert_eq!(tenant, "contoso.onmicrosoft.com");
        let bare = Binding::from_options(&options(Some("ib.cluster.test"), Some("10.0.0.1")))
            .unwrap()
            .unwrap();
        let e = bare.identity(&none, None).unwrap_err();
        assert!(
            e.to_string().contains("--azure-identity-binding-client-id"),
            "{e}"
        );
    }
}
