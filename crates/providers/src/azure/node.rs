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
use crate::Credential;
use wicp_base::deadline::Deadline;
use wicp_base::error::{Error, Result, quote};
use wicp_base::secret::Secret;
use wicp_net::{self as net, http, metadata};

pub const DEFAULT_IMDS: &str = "http://169.254.169.254";
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
    /// cloud-provider-azure's cloud name (`AzurePublicCloud`,
    /// `AzureChinaCloud`, `AzureUSGovernmentCloud`, `AzureGermanCloud`);
    /// empty means the public cloud, as there.
    #[serde(default)]
    cloud: Option<String>,
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
pub enum ManagedIdentity {
    SystemAssigned,
    ClientId(String),
    ResourceId(String),
}

impl ManagedIdentity {
    pub fn describe(&self) -> String {
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
pub enum NodeIdentity {
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
    /// Whether the node's login needs a network call, which the disk
    /// cache saves. A service principal's login is its client ID and secret
    /// themselves: caching them would only write one more copy of the
    /// secret to disk, and serve the old one after `aadClientSecret` is
    /// rotated.
    pub(crate) fn worth_caching(&self) -> bool {
        matches!(self, NodeIdentity::Managed { .. })
    }

    pub fn describe(&self) -> String {
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
pub struct Settings {
    pub client_id: Option<String>,
    pub cloud_config: Option<PathBuf>,
    pub service_principal: bool,
    pub imds: Option<String>,
}

impl Settings {
    pub fn imds(&self) -> metadata::Service {
        let (base, source) = match &self.imds {
            Some(base) => (base.clone(), Some((&super::AZURE_IMDS_ENDPOINT).into())),
            None => (DEFAULT_IMDS.to_string(), None),
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

    /// Refuses a registry outside the node's cloud (`cloud`, from the
    /// cloud config).
    fn same_cloud(&self, cloud: Option<&str>, registry_cloud: super::host::Cloud) -> Result<()> {
        let node_cloud = node_cloud(cloud, self.cloud_config.as_deref())?;
        if node_cloud == registry_cloud {
            return Ok(());
        }
        Err(Error::registry(format!(
            "the registry is in the {} cloud, but the node is in the {} cloud ({}): its identity is not sent to another cloud's registry",
            registry_cloud.name(),
            node_cloud.name(),
            self.cloud_config.as_deref().map_or_else(
                || "no --azure-cloud-config, so the public cloud".to_string(),
                |p| format!("cloud in {}", p.display())
            )
        ))
        .fix("pull this registry with a service account annotated with a client ID of its own cloud, or narrow this entry's matchImages to the node's cloud"))
    }

    /// Decides the node identity: reads the cloud config if one is named.
    #[cfg(test)]
    pub fn resolve(&self) -> Result<NodeIdentity> {
        self.resolve_for(super::host::Cloud::Public)
    }

    /// Decides the node identity for a registry in `registry_cloud`: reads
    /// the cloud config if one is named, and refuses when the node is in
    /// another cloud. The node's token is its own cloud's; posting it to
    /// another cloud's login server sends a credential where it means
    /// nothing (and the service-account path refuses the same).
    pub(crate) fn resolve_for(&self, registry_cloud: super::host::Cloud) -> Result<NodeIdentity> {
        let config = match &self.cloud_config {
            Some(path) => read_cloud_config(path)?,
            None => CloudConfig::default(),
        };
        self.same_cloud(config.cloud.as_deref(), registry_cloud)?;
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

/// Reads the cloud config with the one bounded reader ([`wicp_base::yaml`]):
/// at most 1 MiB, and its depth checked before the parser sees it, which
/// bounds the parse to milliseconds (a 200 KB file nested 100,000 deep
/// took 20 s before), far inside any `--timeout`.
fn read_cloud_config(path: &Path) -> Result<CloudConfig> {
    let fix = "name the node's cloud config with --azure-cloud-config (AKS: /etc/kubernetes/azure.json, on Windows c:\\k\\azure.json), or pass --azure-node-client-id";
    let shown = path.display();
    // It holds aadClientSecret: the secret-file rule ([`wicp_base::file::read_secret`]),
    // within the one bounded reader's size.
    let (bytes, warning) =
        wicp_base::file::read_secret(path, wicp_base::yaml::MAX_BYTES).map_err(|refused| {
            let why = match refused {
                wicp_base::file::Refused::Unreadable(why) => why,
                wicp_base::file::Refused::TooLarge => format!(
                    "it is larger than {} bytes, not a cloud config",
                    wicp_base::yaml::MAX_BYTES
                ),
            };
            Error::config(format!("cannot read the cloud config {shown}: {why}")).fix(fix)
        })?;
    if let Some(warning) = warning {
        wicp_base::log::warning!("{warning}");
    }
    let bad = |problem: String| {
        Error::config(format!(
            "the cloud config {shown} is not the JSON (or YAML) cloud-provider-azure reads: {problem}"
        ))
        .fix(fix)
    };
    let text = std::str::from_utf8(&bytes).map_err(|_| bad("it is not UTF-8".into()))?;
    // The one bounded reader's depth check first: a deeply nested file
    // would otherwise take the parser seconds, on every node-identity pull.
    wicp_base::yaml::check_depth(text).map_err(bad)?;
    // The parser's own message can quote a value, and the client secret is
    // not registered for masking until the file is parsed: say only what
    // kind of problem, and where.
    let config: CloudConfig = yaml_serde::from_str(text).map_err(|e| {
        let place = e
            .location()
            .map(|at| format!(" at line {}, column {}", at.line(), at.column()))
            .unwrap_or_default();
        bad(format!("{}{place}", problem_kind(&e.to_string())))
    })?;
    if let Some(secret) = &config.aad_client_secret {
        wicp_base::secret::register(secret);
    }
    Ok(config)
}

/// The node's cloud from the cloud config's `cloud` (cloud-provider-azure's
/// names, any case); none or empty is the public cloud, as in
/// cloud-provider-azure.
fn node_cloud(name: Option<&str>, path: Option<&Path>) -> Result<super::host::Cloud> {
    use super::host::Cloud;
    let name = name.map(str::trim).unwrap_or_default();
    let cloud = match name.to_ascii_lowercase().as_str() {
        "" | "azurepubliccloud" => Cloud::Public,
        "azurechinacloud" => Cloud::China,
        "azureusgovernmentcloud" => Cloud::UsGovernment,
        "azuregermancloud" => Cloud::Germany,
        _ => {
            return Err(Error::config(format!(
                "the cloud config {} names the cloud {}, which has no ACR login servers this plugin knows",
                path.map_or_else(String::new, |p| p.display().to_string()),
                quote(name)
            ))
            .fix("use --fallback none on this cloud, and annotate service accounts with their own identity"));
        }
    };
    Ok(cloud)
}

/// What kind of problem a YAML parser's message describes, without the
/// message itself (which can quote the file's values).
fn problem_kind(message: &str) -> &'static str {
    const KINDS: [(&str, &str); 6] = [
        ("invalid type", "a field has the wrong type"),
        ("invalid value", "a field has a value it cannot take"),
        ("unknown variant", "a field has a value it cannot take"),
        ("duplicate", "a key is set twice"),
        ("recursion limit", "it is nested too deeply"),
        ("missing field", "a field is missing"),
    ];
    KINDS
        .iter()
        .find(|(start, _)| message.contains(start))
        .map_or("it is not valid YAML or JSON", |(_, kind)| kind)
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
                .map(|d| format!(": {}", wicp_base::redact::clean(&d, 200)))
                .unwrap_or_default()
        ))
        .fix(fix));
    }
    token.ok_or_else(|| {
        reply
            .unusable(service.name, service, "no access_token")
            .fix("check that --azure-imds-endpoint (if set) is Azure IMDS")
    })
}

/// The node's registry login for `server` (an ACR login server).
pub fn login(
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
            expires_at: wicp_base::duration::unix_now().saturating_add(3600),
        }),
        NodeIdentity::Managed { identity, tenant } => http::block_on(
            deadline,
            "the node's managed identity token and ACR exchange",
            async {
                let access = managed_identity_token(service, identity, net, deadline).await?;
                let tid = wicp_kubelet::request::token::unverified_claim(access.expose(), "tid")
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
        assert!(
            !wicp_base::redact::redact("x sp-secret-value-123 y").contains("sp-secret-value-123")
        );
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

    /// Round-4 item 13: a service principal's login is its secret itself,
    /// so it is never written to the disk cache, where a rotated
    /// `aadClientSecret` would keep the old one coming back.
    #[test]
    fn a_service_principal_login_is_not_cached() {
        let config = r#"{"useManagedIdentityExtension":false,"aadClientId":"sp-app","aadClientSecret":"sp-secret-value-123"}"#;
        let (_d, s) = settings(config, true);
        assert!(!s.resolve().unwrap().worth_caching());
        let s = Settings {
            client_id: Some("aaaaaaaa-2222-3333-4444-555555555555".into()),
            ..Settings::default()
        };
        assert!(s.resolve().unwrap().worth_caching());
    }

    /// Round-4 item 12: the cloud config goes through the one bounded
    /// reader's depth check, so a deeply nested file is refused at once
    /// instead of parsing for seconds on every node-identity pull.
    #[test]
    fn a_deeply_nested_cloud_config_is_refused_at_once() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let block: String = (0..300)
            .map(|n| format!("{}a{n}:\n", " ".repeat(n)))
            .collect();
        for text in [deep, block] {
            let (_d, s) = settings(&text, true);
            let started = std::time::Instant::now();
            let e = s.resolve().err().unwrap().to_string();
            assert!(
                started.elapsed() < std::time::Duration::from_secs(1),
                "{:?}",
                started.elapsed()
            );
            assert!(e.contains("nested too deeply"), "{e}");
        }
    }

    /// Round-4 item 14: a parse error says what kind of problem and where,
    /// never the value (the secret is not registered for masking until the
    /// file is parsed).
    #[test]
    fn a_parse_error_never_quotes_the_file() {
        for config in [
            r#"{"aadClientSecret":"leaky-secret-value-9","useManagedIdentityExtension":"leaky-secret-value-9"}"#,
            "{\"aadClientSecret\": \"leaky-secret-value-9\",\n  \"aadClientId\": [\"leaky-secret-value-9\"]}",
            "{\"aadClientSecret\": leaky-secret-value-9 ]",
        ] {
            let (_d, s) = settings(config, true);
            let e = s.resolve().err().unwrap().to_string();
            assert!(!e.contains("leaky-secret-value-9"), "{e}");
            assert!(e.contains("line") && e.contains("column"), "{e}");
        }
        let (_d, s) = settings(r#"{"useManagedIdentityExtension":"yes please"}"#, true);
        let e = s.resolve().err().unwrap().to_string();
        assert!(e.contains("a field has the wrong type at line 1"), "{e}");
    }

    /// Round-4 item 3: the node's identity goes only to a registry of the
    /// node's own cloud (the cloud config's `cloud`, the public cloud when
    /// none is named), as the service-account path's cloud rules say.
    #[test]
    fn the_node_identity_stays_in_the_nodes_cloud() {
        use crate::azure::host::Cloud;
        let managed = r#""useManagedIdentityExtension":true,"userAssignedIdentityID":"11111111-2222-3333-4444-555555555555""#;
        let (_d, public) = settings(
            &format!(r#"{{"cloud":"AzurePublicCloud",{managed}}}"#),
            false,
        );
        assert!(public.resolve_for(Cloud::Public).is_ok());
        for other in [Cloud::China, Cloud::Germany, Cloud::UsGovernment] {
            let e = public.resolve_for(other).err().unwrap().to_string();
            assert!(e.contains("the node is in the AzurePublic cloud"), "{e}");
        }
        let (_d, china) = settings(
            &format!(r#"{{"cloud":"azurechinacloud",{managed}}}"#),
            false,
        );
        assert!(china.resolve_for(Cloud::China).is_ok());
        assert!(china.resolve_for(Cloud::Public).is_err());
        let flag_only = Settings {
            client_id: Some("aaaaaaaa-2222-3333-4444-555555555555".into()),
            ..Settings::default()
        };
        assert!(flag_only.resolve_for(Cloud::Public).is_ok());
        let e = flag_only
            .resolve_for(Cloud::China)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("no --azure-cloud-config, so the public cloud"),
            "{e}"
        );
        let (_d, stack) = settings(
            &format!(r#"{{"cloud":"AzureStackCloud",{managed}}}"#),
            false,
        );
        let e = stack.resolve_for(Cloud::Public).err().unwrap().to_string();
        assert!(e.contains("AzureStackCloud"), "{e}");
    }
}
