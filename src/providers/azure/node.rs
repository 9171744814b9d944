//! The node's identity on Azure (`--fallback node`): the kubelet identity,
//! a managed identity whose Entra token Azure IMDS hands out, traded at
//! ACR's `/oauth2/exchange` like a service account's. Or, only when the
//! admin asks, the service principal of the node's cloud config.
//!
//! IMDS (learn.microsoft.com/entra/identity/managed-identities-azure-resources/how-to-use-vm-token):
//!
//! ```text
//! GET http://169.254.169.254/metadata/identity/oauth2/token
//!     ?api-version=2018-02-01&resource=https://containerregistry.azure.net[&client_id=<GUID>|&msi_res_id=<ARM ID>]
//! Metadata: true
//! ```
//!
//! answers `{"access_token", "expires_in", "expires_on", "resource",
//! "token_type", ...}` with every value a JSON string. Its errors are
//! `{"error", "error_description"}`; 404, 410 (IMDS updating), 429 and
//! 5xx are worth another attempt, other 4xx are not.
//!
//! Which identity: `--azure-node-client-id`, else the cloud config
//! (`--azure-cloud-config`, on AKS `/etc/kubernetes/azure.json`, the stock
//! entry's argument) `userAssignedIdentityID`, which is a client ID or,
//! when it contains `/subscriptions/`, an ARM resource ID (as
//! cloud-provider-azure reads it); neither: the system-assigned identity.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::acr;
use super::identity::parse_guid;
use crate::deadline::Deadline;
use crate::error::{Error, Result, quote};
use crate::net::{self, http, metadata};
use crate::providers::Credential;
use crate::secret::Secret;

pub(crate) const DEFAULT_IMDS: &str = "http://169.254.169.254";
pub(crate) const TOKEN_PATH: &str = "/metadata/identity/oauth2/token";
const API_VERSION: &str = "2018-02-01";
/// The ACR audience the stock plugin asks for (`AcrAudience`); tokens for
/// it work whatever the registry's `azureADAuthenticationAsArmPolicy`.
pub(crate) const RESOURCE: &str = "https://containerregistry.azure.net";

/// The cloud config's fields this reads (cloud-provider-azure
/// `pkg/azclient/auth_conf.go`); the file holds many more.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct CloudConfig {
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    aad_client_id: Option<String>,
    #[serde(default)]
    aad_client_secret: Option<String>,
    #[serde(default)]
    use_managed_identity_extension: Option<bool>,
    #[serde(default, rename = "userAssignedIdentityID")]
    user_assigned_identity_id: Option<String>,
}

/// Which managed identity IMDS is asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ManagedIdentity {
    SystemAssigned,
    ClientId(String),
    ResourceId(String),
}

impl ManagedIdentity {
    pub(crate) fn describe(&self) -> String {
        match self {
            ManagedIdentity::SystemAssigned => "system-assigned".into(),
            ManagedIdentity::ClientId(id) => format!("client_id {id}"),
            ManagedIdentity::ResourceId(id) => format!("msi_res_id {id}"),
        }
    }

    fn query(&self) -> Option<(&'static str, &str)> {
        match self {
            ManagedIdentity::SystemAssigned => None,
            ManagedIdentity::ClientId(id) => Some(("client_id", id)),
            ManagedIdentity::ResourceId(id) => Some(("msi_res_id", id)),
        }
    }
}

/// The node identity, decided before the network.
pub(crate) enum NodeIdentity {
    Managed {
        identity: ManagedIdentity,
        /// The cloud config's tenant, for ACR's form when the token has no
        /// `tid`.
        tenant: Option<String>,
    },
    /// The cloud config's service principal, returned as the registry
    /// login, as acr-credential-provider does without a managed identity.
    ServicePrincipal { client_id: String, secret: Secret },
}

impl NodeIdentity {
    pub(crate) fn describe(&self) -> String {
        match self {
            NodeIdentity::Managed { identity, .. } => {
                format!("managed identity ({})", identity.describe())
            }
            NodeIdentity::ServicePrincipal { client_id, .. } => {
                format!("service principal {client_id} (from the cloud config)")
            }
        }
    }
}

/// Settings of the node path, from the flags.
#[derive(Clone, Debug, Default)]
pub(crate) struct Settings {
    pub(crate) client_id: Option<String>,
    pub(crate) cloud_config: Option<PathBuf>,
    pub(crate) service_principal: bool,
    pub(crate) imds: Option<String>,
}

impl Settings {
    pub(crate) fn imds(&self) -> metadata::Service {
        let (base, source) = match &self.imds {
            Some(base) => (base.clone(), "--azure-imds-endpoint"),
            None => (DEFAULT_IMDS.to_string(), "default"),
        };
        metadata::Service {
            name: "Azure IMDS",
            base,
            source,
            absent_fix: "--fallback node needs an Azure VM with a managed identity (on AKS, the kubelet identity); \
                 or use --fallback none and annotate every pod's service account",
            silent_fix: "check that nothing on the node (a firewall, a pod-identity NMI rule) holds traffic to 169.254.169.254:80",
        }
    }

    /// Decides the node identity: reads the cloud config if one is named.
    pub(crate) fn resolve(&self) -> Result<NodeIdentity> {
        let config = match &self.cloud_config {
            Some(path) => read_cloud_config(path)?,
            None => CloudConfig::default(),
        };
        let tenant = config.tenant_id.clone().filter(|t| !t.trim().is_empty());
        if let Some(id) = &self.client_id {
            let id = parse_guid(id.trim()).ok_or_else(|| {
                Error::config(format!(
                    "--azure-node-client-id {} is not a client ID (a GUID)",
                    quote(id)
                ))
                .fix("pass the kubelet identity's client ID: az aks show --query identityProfile.kubeletidentity.clientId")
            })?;
            return Ok(NodeIdentity::Managed {
                identity: ManagedIdentity::ClientId(id),
                tenant,
            });
        }
        let path = self
            .cloud_config
            .as_deref()
            .map_or_else(|| "the cloud config".into(), |p| p.display().to_string());
        if config.use_managed_identity_extension != Some(true) {
            if !self.service_principal {
                return Err(Error::config(format!(
                    "{path} does not set useManagedIdentityExtension: true, so the node has no managed identity to fall back to"
                ))
                .fix("pass --azure-node-client-id (the kubelet identity), or --azure-node-service-principal to use the cloud config's aadClientId and aadClientSecret"));
            }
            let (Some(client_id), Some(secret)) = (
                config.aad_client_id.filter(|v| !v.trim().is_empty()),
                config.aad_client_secret.filter(|v| !v.is_empty()),
            ) else {
                return Err(Error::config(format!(
                    "--azure-node-service-principal is set, but {path} has no aadClientId and aadClientSecret"
                ))
                .fix("name the node's cloud config with --azure-cloud-config (AKS: /etc/kubernetes/azure.json)"));
            };
            return Ok(NodeIdentity::ServicePrincipal {
                client_id: client_id.trim().to_string(),
                secret: Secret::from_admin(secret),
            });
        }
        let identity = match config
            .user_assigned_identity_id
            .as_deref()
            .map(str::trim)
            .filter(|v| !v.is_empty())
        {
            None => ManagedIdentity::SystemAssigned,
            Some(id) if id.to_ascii_uppercase().contains("/SUBSCRIPTIONS/") => {
                if !is_identity_resource_id(id) {
                    return Err(Error::config(format!(
                        "{path} userAssignedIdentityID {} is not a user-assigned identity's resource ID",
                        quote(id)
                    ))
                    .fix("write it as /subscriptions/SUB/resourceGroups/RG/providers/Microsoft.ManagedIdentity/userAssignedIdentities/NAME, or as the client ID"));
                }
                ManagedIdentity::ResourceId(id.to_string())
            }
            Some(id) => ManagedIdentity::ClientId(parse_guid(id).ok_or_else(|| {
                Error::config(format!(
                    "{path} userAssignedIdentityID {} is neither a client ID (a GUID) nor a resource ID",
                    quote(id)
                ))
                .fix("check the node's cloud config, or pass --azure-node-client-id")
            })?),
        };
        Ok(NodeIdentity::Managed { identity, tenant })
    }
}

/// `/subscriptions/S/resourceGroups/RG/providers/Microsoft.ManagedIdentity/userAssignedIdentities/N`,
/// matched whole (case-insensitive, as ARM is), each segment free of
/// anything that could change the query it goes into.
fn is_identity_resource_id(id: &str) -> bool {
    let parts: Vec<&str> = id.split('/').collect();
    let segment_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 128
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.()".contains(c))
    };
    match parts.as_slice() {
        [
            "",
            subscriptions,
            sub,
            groups,
            group,
            providers,
            namespace,
            kind,
            name,
        ] => {
            subscriptions.eq_ignore_ascii_case("subscriptions")
                && groups.eq_ignore_ascii_case("resourceGroups")
                && providers.eq_ignore_ascii_case("providers")
                && namespace.eq_ignore_ascii_case("Microsoft.ManagedIdentity")
                && kind.eq_ignore_ascii_case("userAssignedIdentities")
                && [sub, group, name].iter().all(|s| segment_ok(s))
        }
        _ => false,
    }
}

fn read_cloud_config(path: &Path) -> Result<CloudConfig> {
    let fix = "name the node's cloud config with --azure-cloud-config (AKS: /etc/kubernetes/azure.json), or pass --azure-node-client-id";
    let bytes = crate::yaml::read(path).map_err(|e| {
        Error::config(format!(
            "cannot read the cloud config {}: {e}",
            path.display()
        ))
        .fix(fix)
    })?;
    // Registered before anything could quote it.
    let config: CloudConfig = yaml_serde::from_slice(&bytes).map_err(|e| {
        Error::config(format!(
            "the cloud config {} is not the JSON (or YAML) cloud-provider-azure reads: {}",
            path.display(),
            crate::redact::clean(&e.to_string(), 200)
        ))
        .fix(fix)
    })?;
    if let Some(secret) = &config.aad_client_secret {
        crate::secret::register(secret);
    }
    Ok(config)
}

#[derive(Deserialize)]
struct TokenReply {
    access_token: Option<String>,
}

#[derive(Deserialize, Default)]
struct ErrorReply {
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    error_description: Option<String>,
}

/// Azure IMDS's documented transient statuses.
fn transient(status: u16) -> bool {
    matches!(status, 404 | 410 | 429) || (500..600).contains(&status)
}

/// Asks IMDS for an ACR-audience token of `identity`.
async fn managed_identity_token(
    service: &metadata::Service,
    identity: &ManagedIdentity,
    net: &net::Settings,
    deadline: &Deadline,
) -> Result<Secret> {
    let client = metadata::client(service, net)?;
    let mut query = vec![("api-version", API_VERSION), ("resource", RESOURCE)];
    query.extend(identity.query());
    let url = url::Url::parse_with_params(&service.url(TOKEN_PATH), &query)
        .map_err(|e| {
            Error::config(format!("Azure IMDS URL {} is not valid: {e}", service.base))
                .fix("check --azure-imds-endpoint")
        })?
        .to_string();
    let reply = metadata::send(
        service,
        &format!("the {} managed identity's token", identity.describe()),
        || client.get(&url).header("Metadata", "true"),
        transient,
        deadline,
    )
    .await?;
    // The token is registered before any message could carry it.
    let token = reply
        .json::<TokenReply>()
        .and_then(|r| r.access_token)
        .filter(|t| !t.is_empty())
        .map(Secret::new);
    if !reply.is_success() {
        let e = reply.json::<ErrorReply>().unwrap_or_default();
        let code = e.error.unwrap_or_default();
        let fix = match (reply.status, code.as_str()) {
            (400, "invalid_request") | (400, "invalid_resource") | (400, "") => {
                "check that the identity is assigned to this VM or scale set (az vmss identity show), and the client ID (--azure-node-client-id, userAssignedIdentityID)"
            }
            (_, "unauthorized_client") => "assign a managed identity to this VM or scale set",
            _ => "check the node's managed identities (az vmss identity show)",
        };
        return Err(Error::upstream(format!(
            "{} at {} refused the {} managed identity's token: HTTP {} {}{}",
            service.name,
            service.base,
            identity.describe(),
            reply.status,
            code,
            e.error_description
                .map(|d| format!(": {}", crate::redact::clean(&d, 200)))
                .unwrap_or_default()
        ))
        .fix(fix));
    }
    token.ok_or_else(|| {
        reply
            .unusable(service, "no access_token")
            .fix("check that --azure-imds-endpoint (if set) is Azure IMDS")
    })
}

/// The node's registry login for `server` (an ACR login server).
pub(crate) fn login(
    node: &NodeIdentity,
    service: &metadata::Service,
    exchange: &acr::ExchangeRequest<'_>,
    net: &net::Settings,
    deadline: &Deadline,
) -> Result<Credential> {
    match node {
        NodeIdentity::ServicePrincipal { client_id, secret } => Ok(Credential {
            username: client_id.clone(),
            password: secret.clone(),
            // A client secret does not say when it expires; ask again
            // within the hour, as acr-credential-provider's 60 minutes.
            expires_at: crate::duration::unix_now().saturating_add(3600),
        }),
        NodeIdentity::Managed { identity, tenant } => http::block_on(
            deadline,
            "the node's managed identity token and ACR exchange",
            async {
                let access = managed_identity_token(service, identity, net, deadline).await?;
                let tid = crate::token::unverified_claim(access.expose(), "tid")
                    .and_then(|v| v.as_str().map(str::to_string))
                    .or_else(|| tenant.clone())
                    .ok_or_else(|| {
                        Error::upstream(format!(
                            "{} issued a token without a tenant (tid), and the cloud config names none",
                            service.name
                        ))
                        .fix("name the node's cloud config with --azure-cloud-config (it holds tenantId)")
                    })?;
                let request = acr::ExchangeRequest {
                    tenant: &tid,
                    ..*exchange
                };
                let client = net.client(deadline)?;
                let refresh = acr::exchange(&client, &request, &access, deadline).await?;
                Ok(refresh.into_credential())
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(config: &str, service_principal: bool) -> (tempfile::TempDir, Settings) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("azure.json");
        std::fs::write(&path, config).unwrap();
        let s = Settings {
            cloud_config: Some(path),
            service_principal,
            ..Settings::default()
        };
        (dir, s)
    }

    #[test]
    fn the_cloud_config_names_the_kubelet_identity_as_aks_writes_it() {
        let (_d, s) = settings(
            r#"{"cloud":"AzurePublicCloud","tenantId":"72f988bf-86f1-41af-91ab-2d7cd011db47","aadClientId":"msi","aadClientSecret":"msi",
                "useManagedIdentityExtension":true,"userAssignedIdentityID":"11111111-2222-3333-4444-555555555555"}"#,
            false,
        );
        let NodeIdentity::Managed { identity, tenant } = s.resolve().unwrap() else {
            panic!("a managed identity");
        };
        assert_eq!(
            identity,
            ManagedIdentity::ClientId("11111111-2222-3333-4444-555555555555".into())
        );
        assert_eq!(
            tenant.as_deref(),
            Some("72f988bf-86f1-41af-91ab-2d7cd011db47")
        );
        let rid = "/subscriptions/0000/resourceGroups/MC_rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/aks-agentpool";
        let (_d, s) = settings(
            &format!(r#"{{"useManagedIdentityExtension":true,"userAssignedIdentityID":"{rid}"}}"#),
            false,
        );
        assert!(matches!(
            s.resolve().unwrap(),
            NodeIdentity::Managed { identity: ManagedIdentity::ResourceId(ref r), .. } if r == rid
        ));
        let (_d, s) = settings(r#"{"useManagedIdentityExtension":true}"#, false);
        assert!(matches!(
            s.resolve().unwrap(),
            NodeIdentity::Managed {
                identity: ManagedIdentity::SystemAssigned,
                ..
            }
        ));
        for bad in [
            "/subscriptions/0000/resourceGroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/x&resource=evil",
            "not-a-guid",
        ] {
            let (_d, s) = settings(
                &format!(
                    r#"{{"useManagedIdentityExtension":true,"userAssignedIdentityID":"{bad}"}}"#
                ),
                false,
            );
            assert!(s.resolve().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_service_principal_only_when_asked() {
        let config = r#"{"useManagedIdentityExtension":false,"aadClientId":"sp-app","aadClientSecret":"sp-secret-value-123"}"#;
        let (_d, s) = settings(config, false);
        let e = s.resolve().err().unwrap().to_string();
        assert!(e.contains("--azure-node-service-principal"), "{e}");
        let (_d, s) = settings(config, true);
        let NodeIdentity::ServicePrincipal { client_id, secret } = s.resolve().unwrap() else {
            panic!("the service principal");
        };
        assert_eq!(client_id, "sp-app");
        assert_eq!(secret.expose(), "sp-secret-value-123");
        assert!(!crate::redact::redact("x sp-secret-value-123 y").contains("sp-secret-value-123"));
    }

    #[test]
    fn the_flag_wins_and_is_checked() {
        let s = Settings {
            client_id: Some("AAAAAAAA-2222-3333-4444-555555555555".into()),
            ..Settings::default()
        };
        assert!(matches!(
            s.resolve().unwrap(),
            NodeIdentity::Managed { identity: ManagedIdentity::ClientId(ref c), .. } if c == "aaaaaaaa-2222-3333-4444-555555555555"
        ));
        let s = Settings {
            client_id: Some("kubelet".into()),
            ..Settings::default()
        };
        assert!(s.resolve().is_err());
        assert!(transient(410) && transient(404) && transient(503) && !transient(400));
    }
}
