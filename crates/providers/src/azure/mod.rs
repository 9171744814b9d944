//! Azure: Entra ID workload identity federation, then the ACR exchange.
//!
//! 1. The service account token is the client assertion of the Entra ID
//!    application named by the service account's annotations; Entra ID
//!    checks it against a federated identity credential (issuer, subject
//!    `system:serviceaccount:<ns>:<name>`, audience `api://AzureADTokenExchange`)
//!    and returns an access token for the ACR resource ([`entra`]).
//! 2. The registry's login server trades that for an ACR refresh token
//!    ([`acr`]), which the container runtime uses as a password with the
//!    null-GUID username.
//!
//! Both are single form POSTs on the shared [`wicp_net::http`] client rather
//! than calls through `azure_identity`: that SDK retries for up to 60 s by
//! default (the kubelet kills us at 60 s), insists on an `https://`
//! authority (so no faithful local fake), brings a second async HTTP stack,
//! and has no ACR exchange anyway.
//!
//! With `--fallback node`, a service account without a client-id
//! annotation (or a request without a token) gets the node's identity
//! instead ([`node`]): the kubelet identity from Azure IMDS, through the
//! same ACR exchange.
//!
//! With `--azure-identity-binding-sni`, step 1 goes to the AKS cluster's
//! identity-binding endpoint instead of Entra ID ([`binding`]); step 2 is
//! the same.
//!
//! The registry host decides everything else: it must be an ACR login
//! server ([`host`]), and its suffix picks the cloud and so the Entra ID
//! authority.

pub mod acr;
pub mod binding;
pub mod entra;
pub mod host;
pub mod identity;
pub mod node;

use crate::Input;
use crate::fallback::{self, Fallback, Whose};
use crate::{Context, Exchanger, Plan, Provider};
use std::sync::Arc;
use wicp_base::error::{Error, Result, quote};
use wicp_base::flags::{FlagSpec, Flags, Given, Takes, Usage};
use wicp_kubelet::request::image::ImageRef;
use wicp_net::inputs::Inputs;
use wicp_net::{self as net, http};

/// The audience of Entra ID federated identity credentials.
pub const AUDIENCE: &str = "api://AzureADTokenExchange";

/// The Azure SDKs' own names for the tenant and the authority, read when
/// neither the flag nor its `WICP_` variable is set.
const STANDARD_TENANT_ENV: &str = "AZURE_TENANT_ID";
const STANDARD_AUTHORITY_ENV: &str = "AZURE_AUTHORITY_HOST";

// The group id must differ from the other exchangers' `Options` structs,
// which clap would otherwise all name "Options".
// The field docs are this provider's --help text, written for a terminal
// (bare URLs, <PLACEHOLDERS>, HOST[:PORT]), not for rustdoc.
/// `--acr-endpoint`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static ACR_ENDPOINT: FlagSpec = FlagSpec {
    long: "acr-endpoint",
    env: "WICP_ACR_ENDPOINT",
    takes: Takes::One,
    value: "URL",
    default: "",
    help: "Where to send the ACR token exchange instead of https://<registry> \
        (azure only): a private endpoint or a test server. The refresh token \
        is still requested for the registry in the image.",
};

/// `--azure-authority-host`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static AZURE_AUTHORITY_HOST: FlagSpec = FlagSpec {
    long: "azure-authority-host",
    env: "WICP_AZURE_AUTHORITY_HOST",
    takes: Takes::One,
    value: "URL",
    default: "",
    help: "Entra ID authority, replacing the one of the registry's cloud \
        (login.microsoftonline.com, login.chinacloudapi.cn, \
        login.microsoftonline.us) (azure only). When neither this flag nor \
        WICP_AZURE_AUTHORITY_HOST is set, AZURE_AUTHORITY_HOST is used. \
        http:// only if written so.",
};

/// `--azure-identity-binding-address`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static AZURE_IDENTITY_BINDING_ADDRESS: FlagSpec = FlagSpec {
    long: "azure-identity-binding-address",
    env: "WICP_AZURE_IDENTITY_BINDING_ADDRESS",
    takes: Takes::One,
    value: "HOST[:PORT]",
    default: "",
    help: "Where the identity-binding endpoint is dialled: the API server's IP \
        address or DNS name, HOST[:PORT] (--ib-apiserver-ip; port 443 by \
        default). Never through a proxy (azure only).",
};

/// `--azure-identity-binding-ca`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static AZURE_IDENTITY_BINDING_CA: FlagSpec = FlagSpec {
    long: "azure-identity-binding-ca",
    env: "WICP_AZURE_IDENTITY_BINDING_CA",
    takes: Takes::One,
    value: "PATH",
    default: "",
    help: "The only CA trusted for the identity-binding endpoint, default the \
        cluster CA /etc/kubernetes/certs/ca.crt (c:\\k\\ca.crt on Windows) \
        (azure only).",
};

/// `--azure-identity-binding-client-id`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static AZURE_IDENTITY_BINDING_CLIENT_ID: FlagSpec = FlagSpec {
    long: "azure-identity-binding-client-id",
    env: "WICP_AZURE_IDENTITY_BINDING_CLIENT_ID",
    takes: Takes::One,
    value: "GUID",
    default: "",
    help: "The managed identity for service accounts without a \
        kubernetes.azure.com/acr-client-id annotation, with identity \
        bindings (--ib-default-client-id) (azure only).",
};

/// `--azure-identity-binding-sni`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static AZURE_IDENTITY_BINDING_SNI: FlagSpec = FlagSpec {
    long: "azure-identity-binding-sni",
    env: "WICP_AZURE_IDENTITY_BINDING_SNI",
    takes: Takes::One,
    value: "NAME",
    default: "",
    help: "AKS identity bindings: the TLS server name of the cluster's \
        identity-binding endpoint (the stock plugin's --ib-sni-name). The \
        service account token (audience api://AKSIdentityBinding) then goes \
        there instead of to Entra ID (azure only).",
};

/// `--azure-imds-endpoint`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static AZURE_IMDS_ENDPOINT: FlagSpec = FlagSpec {
    long: "azure-imds-endpoint",
    env: "WICP_AZURE_IMDS_ENDPOINT",
    takes: Takes::One,
    value: "URL",
    default: "",
    help: "Azure IMDS, replacing http://169.254.169.254 (azure --fallback node \
        only): a test server.",
};

/// `--azure-node-service-principal`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static AZURE_NODE_SERVICE_PRINCIPAL: FlagSpec = FlagSpec {
    long: "azure-node-service-principal",
    env: "WICP_AZURE_NODE_SERVICE_PRINCIPAL",
    takes: Takes::Switch,
    value: "",
    default: "",
    help: "For --fallback node on a node without a managed identity: return the \
        cloud config's aadClientId and aadClientSecret as the registry \
        login, as acr-credential-provider does (azure only).",
};

/// `--azure-tenant-id`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static AZURE_TENANT_ID: FlagSpec = FlagSpec {
    long: "azure-tenant-id",
    env: "WICP_AZURE_TENANT_ID",
    takes: Takes::One,
    value: "TENANT",
    default: "",
    help: "Entra ID tenant (GUID or domain) for service accounts without a \
        tenant annotation (azure only). When neither this flag nor \
        WICP_AZURE_TENANT_ID is set, AZURE_TENANT_ID is used.",
};

#[allow(
    rustdoc::bare_urls,
    rustdoc::invalid_html_tags,
    rustdoc::broken_intra_doc_links
)]
/// `--azure-node-client-id`.
pub(crate) static AZURE_NODE_CLIENT_ID: FlagSpec = FlagSpec {
    long: "azure-node-client-id",
    env: "WICP_AZURE_NODE_CLIENT_ID",
    takes: Takes::One,
    value: "GUID",
    default: "",
    help: "The kubelet identity's client ID, for --fallback node (azure only); \
        without it, the cloud config's userAssignedIdentityID.",
};

/// `--azure-cloud-config`.
pub(crate) static AZURE_CLOUD_CONFIG: FlagSpec = FlagSpec {
    long: "azure-cloud-config",
    env: "WICP_AZURE_CLOUD_CONFIG",
    takes: Takes::One,
    value: "PATH",
    default: "",
    help: "The node's cloud config, read for --fallback node (azure only): on \
        AKS /etc/kubernetes/azure.json, the argument of the stock \
        acr-credential-provider entry.",
};

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// [`AZURE_TENANT_ID`].
    pub azure_tenant_id: Option<String>,

    /// [`AZURE_AUTHORITY_HOST`].
    pub azure_authority_host: Option<String>,

    /// [`ACR_ENDPOINT`].
    pub acr_endpoint: Option<String>,

    /// [`AZURE_NODE_CLIENT_ID`].
    pub azure_node_client_id: Option<String>,

    /// [`AZURE_CLOUD_CONFIG`].
    pub azure_cloud_config: Option<std::path::PathBuf>,

    /// [`AZURE_NODE_SERVICE_PRINCIPAL`].
    pub azure_node_service_principal: bool,

    /// [`AZURE_IMDS_ENDPOINT`].
    pub azure_imds_endpoint: Option<String>,

    /// [`AZURE_IDENTITY_BINDING_SNI`].
    pub azure_identity_binding_sni: Option<String>,

    /// [`AZURE_IDENTITY_BINDING_ADDRESS`].
    pub azure_identity_binding_address: Option<String>,

    /// [`AZURE_IDENTITY_BINDING_CA`].
    pub azure_identity_binding_ca: Option<std::path::PathBuf>,

    /// [`AZURE_IDENTITY_BINDING_CLIENT_ID`].
    pub azure_identity_binding_client_id: Option<String>,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] = &[
        &AZURE_TENANT_ID,
        &AZURE_AUTHORITY_HOST,
        &ACR_ENDPOINT,
        &AZURE_NODE_CLIENT_ID,
        &AZURE_CLOUD_CONFIG,
        &AZURE_NODE_SERVICE_PRINCIPAL,
        &AZURE_IMDS_ENDPOINT,
        &AZURE_IDENTITY_BINDING_SNI,
        &AZURE_IDENTITY_BINDING_ADDRESS,
        &AZURE_IDENTITY_BINDING_CA,
        &AZURE_IDENTITY_BINDING_CLIENT_ID,
    ];
    const HEADING: &'static str = "Azure";

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            azure_tenant_id: given.text(&AZURE_TENANT_ID)?,
            azure_authority_host: given.text(&AZURE_AUTHORITY_HOST)?,
            acr_endpoint: given.text(&ACR_ENDPOINT)?,
            azure_node_client_id: given.text(&AZURE_NODE_CLIENT_ID)?,
            azure_cloud_config: given.path(&AZURE_CLOUD_CONFIG),
            azure_node_service_principal: given.switch(&AZURE_NODE_SERVICE_PRINCIPAL),
            azure_imds_endpoint: given.text(&AZURE_IMDS_ENDPOINT)?,
            azure_identity_binding_sni: given.text(&AZURE_IDENTITY_BINDING_SNI)?,
            azure_identity_binding_address: given.text(&AZURE_IDENTITY_BINDING_ADDRESS)?,
            azure_identity_binding_ca: given.path(&AZURE_IDENTITY_BINDING_CA),
            azure_identity_binding_client_id: given.text(&AZURE_IDENTITY_BINDING_CLIENT_ID)?,
        })
    }
}

impl Options {
    /// Fills what the flags left unset from the Azure SDKs' standard
    /// variables, looked up with `env`. Empty standard variables count as
    /// unset (shells and manifests leave them so); an empty flag does not.
    fn with_standard_env(mut self, env: impl Fn(&str) -> Option<String>) -> Self {
        let standard = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if self.azure_tenant_id.is_none() {
            self.azure_tenant_id = standard(STANDARD_TENANT_ENV);
        }
        if self.azure_authority_host.is_none() {
            self.azure_authority_host = standard(STANDARD_AUTHORITY_ENV);
        }
        self
    }
}

/// The options, checked.
#[derive(Clone, Debug)]
struct Settings {
    default_tenant: Option<String>,
    authority: Option<String>,
    acr_endpoint: Option<String>,
    node: node::Settings,
    binding: Option<binding::Binding>,
}

impl Settings {
    fn new(options: &Options) -> Result<Self> {
        let default_tenant = match options.azure_tenant_id.as_deref() {
            None => None,
            Some(value) => Some(
                identity::parse_tenant(value.trim())
                    .ok_or_else(|| identity::invalid_tenant(&identity::Source::Default, value))?,
            ),
        };
        let authority = match options.azure_authority_host.as_deref() {
            None => None,
            Some(value) => {
                let value = value.trim();
                let url = if value.contains("://") {
                    value.to_string()
                } else {
                    format!("https://{value}")
                };
                Some(http::endpoint_override(&AZURE_AUTHORITY_HOST, &url).map_err(|e| {
                    e.fix("write the Entra ID authority as https://login.microsoftonline.com (or a bare host name)")
                })?)
            }
        };
        let acr_endpoint = options
            .acr_endpoint
            .as_deref()
            .map(|value| http::endpoint_override(&ACR_ENDPOINT, value))
            .transpose()?;
        let imds = options
            .azure_imds_endpoint
            .as_deref()
            .map(|value| http::endpoint_override(&AZURE_IMDS_ENDPOINT, value))
            .transpose()?;
        Ok(Settings {
            default_tenant,
            authority,
            acr_endpoint,
            binding: binding::Binding::from_options(options)?,
            node: node::Settings {
                client_id: options.azure_node_client_id.clone(),
                cloud_config: options.azure_cloud_config.clone(),
                service_principal: options.azure_node_service_principal,
                imds,
            },
        })
    }
}

impl Settings {
    /// Where the ACR exchange goes: `--acr-endpoint`, else the login
    /// server itself.
    fn acr_endpoint_for(&self, server: &host::LoginServer) -> String {
        self.acr_endpoint
            .clone()
            .unwrap_or_else(|| format!("https://{}", server.host))
    }
}

pub static PROVIDER: Provider = Provider {
    name: "azure",
    summary: "Entra ID workload identity federation, then ACR's token exchange",
    audience: AUDIENCE,
    auto: Some(|image| host::parse(image.registry()).is_some()),
    password_is_token: false,
    annotations: &[
        identity::AKS_CLIENT_ID,
        identity::WI_CLIENT_ID,
        identity::AKS_TENANT_ID,
        identity::WI_TENANT_ID,
    ],
    node_identity: Some(
        "the kubelet identity (a managed identity from Azure IMDS), or a service principal from azure.json if asked",
    ),
    flags: crate::own_flags::<Options>(),
};

impl crate::OwnFlags for Options {
    fn build(&self, shared: &crate::Shared<'_>, inputs: &Inputs) -> Result<Box<dyn Exchanger>> {
        let options = self
            .clone()
            .with_standard_env(|name| inputs.env.get(name).map(str::to_string));
        Ok(Box::new(
            Azure::new(&options, Arc::clone(&inputs.net))?.with_fallback(shared.fallback),
        ))
    }
}

pub struct Azure {
    /// The checked options. Only a request routed to Azure builds this
    /// exchanger, so a bad Azure setting (an odd AZURE_TENANT_ID in the
    /// kubelet's environment) fails Azure pulls only.
    settings: Settings,
    fallback: Fallback,
    net: Arc<net::Settings>,
}

impl Azure {
    /// Checks the options, the standard variables already applied
    /// ([`Options::with_standard_env`]); no I/O.
    pub fn new(options: &Options, net: Arc<net::Settings>) -> Result<Self> {
        Ok(Azure {
            settings: Settings::new(options)?,
            fallback: Fallback::None,
            net,
        })
    }

    /// What pods without an identity of their own get (`--fallback`).
    pub(crate) fn with_fallback(mut self, fallback: Fallback) -> Self {
        self.fallback = fallback;
        self
    }

    /// A service account opted in with a client-id annotation (or, with
    /// identity bindings and a default identity, by having a token).
    fn whose(&self, cx: &Context<'_>) -> Whose {
        let default_binding = self
            .settings
            .binding
            .as_ref()
            .is_some_and(|b| b.default_client_id.is_some());
        let opted_in = default_binding
            || identity::CLIENT_ID_KEYS
                .iter()
                .any(|key| cx.annotation(key).is_some());
        let opt_in = format!("no {} annotation", identity::CLIENT_ID_KEYS.join(" or "));
        fallback::whose(self.fallback, cx.token, opted_in, &opt_in)
    }

    fn node_plan<'a>(
        &'a self,
        cx: &Context<'a>,
        server: host::LoginServer,
        endpoint: String,
        why: String,
    ) -> Result<Plan<'a>> {
        let node = self.settings.node.resolve_for(server.cloud)?;
        let imds = self.settings.node.imds();
        let inputs = vec![
            Input::identity("node identity", node.describe()),
            Input::setting("cloud", server.cloud.name().to_string()),
            Input::setting("registry", server.host.clone()),
            Input::setting("acr_endpoint", endpoint.clone()),
            Input::setting("instance metadata", imds.describe()),
            Input::setting("resource", node::RESOURCE.to_string()),
        ];
        let cacheable = node.worth_caching();
        let plan = Plan::for_node(&PROVIDER, cx.image, why, inputs, move |deadline| {
            let exchange = acr::ExchangeRequest {
                endpoint: &endpoint,
                service: &server.host,
                tenant: "",
                client_id: "the node's managed identity",
            };
            node::login(&node, &imds, &exchange, &self.net, deadline)
        });
        Ok(Plan { cacheable, ..plan })
    }
}

impl Azure {
    /// With identity bindings: the token to the cluster's binding
    /// endpoint (pinned address, SNI, cluster CA, no proxy), its access
    /// token through the ACR exchange.
    fn binding_plan<'a>(
        &'a self,
        cx: &Context<'a>,
        server: host::LoginServer,
        endpoint: String,
        binding: &'a binding::Binding,
    ) -> Result<Plan<'a>> {
        let (client_id, tenant) =
            binding.identity(cx.annotations, self.settings.default_tenant.as_deref())?;
        let token = cx.token()?;
        let inputs = vec![
            Input::identity("client_id", client_id.clone()),
            Input::identity("tenant_id", tenant.clone()),
            Input::setting("identity_binding", binding.describe()),
            Input::setting("cloud", server.cloud.name().to_string()),
            Input::setting("registry", server.host.clone()),
            Input::setting("acr_endpoint", endpoint.clone()),
            Input::setting("scope", entra::SCOPE.to_string()),
        ];
        Ok(Plan::for_registry(
            &PROVIDER,
            cx.image,
            inputs,
            move |deadline| {
                let acr_request = acr::ExchangeRequest {
                    endpoint: &endpoint,
                    service: &server.host,
                    tenant: &tenant,
                    client_id: &client_id,
                };
                let assertion = token.secret();
                binding_then_acr(
                    &self.net,
                    binding,
                    &client_id,
                    assertion,
                    &acr_request,
                    deadline,
                )
            },
        ))
    }
}

/// The exchange with identity bindings, in order: the service account
/// token to the cluster's binding endpoint (its pinned address and SNI,
/// the cluster CA only, no proxy) for an Entra ID access token of ACR's
/// scope, then ACR's `/oauth2/exchange` for the registry's refresh token.
fn binding_then_acr(
    net: &net::Settings,
    binding: &binding::Binding,
    client_id: &str,
    token: &wicp_base::secret::Secret,
    acr_request: &acr::ExchangeRequest<'_>,
    deadline: &wicp_base::deadline::Deadline,
) -> Result<crate::Credential> {
    let acr_client = net.client(deadline)?;
    http::block_on(
        deadline,
        "the identity-binding token request and ACR exchange",
        async {
            let address = binding.address(deadline).await?;
            let client = net.pinned_client(
                deadline,
                &binding.sni,
                address,
                &binding.ca,
                &AZURE_IDENTITY_BINDING_CA,
            )?;
            let access =
                binding::request_token(&client, binding, client_id, token, deadline).await?;
            let refresh = acr::exchange(&acr_client, acr_request, &access, deadline).await?;
            Ok(refresh.into_credential())
        },
    )
}

/// The exchange of workload identity, in order: the service account
/// token as a federated client assertion to Entra ID for an access token
/// of ACR's scope, then ACR's `/oauth2/exchange` for the registry's
/// refresh token, the password.
fn entra_then_acr(
    net: &net::Settings,
    entra_request: &entra::TokenRequest<'_>,
    acr_request: &acr::ExchangeRequest<'_>,
    deadline: &wicp_base::deadline::Deadline,
) -> Result<crate::Credential> {
    let client = net.client(deadline)?;
    http::block_on(
        deadline,
        "the Entra ID token request and ACR exchange",
        async {
            let access = entra::request_token(&client, entra_request, deadline).await?;
            let refresh = acr::exchange(&client, acr_request, &access, deadline).await?;
            Ok(refresh.into_credential())
        },
    )
}

impl Exchanger for Azure {
    fn provider(&self) -> &'static Provider {
        &PROVIDER
    }

    fn audiences(&self) -> Vec<String> {
        match self.settings.binding {
            Some(_) => vec![binding::AUDIENCE.to_string()],
            None => vec![AUDIENCE.to_string()],
        }
    }

    fn needs_annotations(&self) -> bool {
        self.settings
            .binding
            .as_ref()
            .is_none_or(|b| b.default_client_id.is_none())
    }

    fn requires_token(&self) -> bool {
        self.fallback == Fallback::None
    }

    fn serves(&self, image: &ImageRef) -> bool {
        host::parse(image.registry()).is_some()
    }

    fn registries(&self) -> String {
        format!("ACR login servers ({})", host::PATTERN)
    }

    fn plan<'a>(&'a self, cx: &Context<'a>) -> Result<Plan<'a>> {
        let settings = &self.settings;
        let server = host::parse(cx.image.registry()).ok_or_else(|| {
            Error::registry(format!(
                "registry {} is not an ACR login server ({})",
                quote(cx.image.registry()),
                host::PATTERN
            ))
            .fix("the azure exchanger only sends Entra ID tokens to ACR; narrow this provider's matchImages to *.azurecr.io (and the other clouds' suffixes)")
        })?;
        if let Whose::Node { why } = self.whose(cx) {
            let endpoint = settings.acr_endpoint_for(&server);
            return self.node_plan(cx, server, endpoint, why);
        }
        if let Some(binding) = &settings.binding {
            let endpoint = settings.acr_endpoint_for(&server);
            return self.binding_plan(cx, server, endpoint, binding);
        }
        let identity = identity::resolve(cx.annotations, settings.default_tenant.as_deref())?;
        let authority = match (&settings.authority, server.cloud.authority_host()) {
            (Some(authority), _) => authority.clone(),
            (None, Some(authority)) => authority.to_string(),
            (None, None) => {
                return Err(Error::registry(format!(
                    "registry {} is in the {} cloud, which has no Entra ID authority since it closed",
                    server.host, server.cloud
                ))
                .fix("pass --azure-authority-host (or AZURE_AUTHORITY_HOST) naming the authority that serves this registry"));
            }
        };
        let endpoint = settings.acr_endpoint_for(&server);
        let token = cx.token()?;
        let claims = token.claims();
        let federation = entra::Federation {
            issuer: claims.issuer.clone(),
            subject: claims.subject.clone(),
            audiences: claims.audiences.clone(),
        };
        let inputs = vec![
            Input::identity("client_id", identity.client_id.clone()),
            Input::identity("tenant_id", identity.tenant.clone()),
            Input::setting("authority", authority.clone()),
            Input::setting("cloud", server.cloud.name().to_string()),
            Input::setting("registry", server.host.clone()),
            Input::setting("acr_endpoint", endpoint.clone()),
            Input::setting("scope", entra::SCOPE.to_string()),
        ];
        Ok(Plan::for_registry(
            &PROVIDER,
            cx.image,
            inputs,
            move |deadline| {
                let entra_request = entra::TokenRequest {
                    authority: &authority,
                    tenant: &identity.tenant,
                    client_id: &identity.client_id,
                    assertion: token.secret(),
                    federation: &federation,
                };
                let acr_request = acr::ExchangeRequest {
                    endpoint: &endpoint,
                    service: &server.host,
                    tenant: &identity.tenant,
                    client_id: &identity.client_id,
                };
                entra_then_acr(&self.net, &entra_request, &acr_request, deadline)
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Pull;
    use wicp_base::secret::Secret;
    use wicp_kubelet::request::protocol::CacheKeyType;
    use wicp_kubelet::request::token::ServiceAccountToken;

    const CLIENT: &str = "11111111-2222-3333-4444-555555555555";
    const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";

    fn token() -> ServiceAccountToken {
        let now = wicp_base::duration::unix_now();
        let claims = serde_json::json!({
            "iss": "https://oidc.example", "sub": "system:serviceaccount:team:puller",
            "aud": [AUDIENCE], "exp": now + 3600, "iat": now,
            "kubernetes.io": {"namespace": "team", "serviceaccount": {"name": "puller", "uid": "u"}},
        });
        let raw = wicp_kubelet::request::token::jwt(r#"{"alg":"RS256"}"#, &claims.to_string());
        ServiceAccountToken::decode(Secret::new(raw), now).unwrap()
    }

    fn azure(options: Options) -> Azure {
        Azure::new(&options, Arc::default()).unwrap()
    }

    fn plan_inputs(azure: &Azure, image: &str, annotations: &[(&str, &str)]) -> Result<Vec<Input>> {
        let pull = Pull::new(image, annotations);
        let token = token();
        let plan = azure.plan(&pull.context(Some(&token)))?;
        assert_eq!(plan.auth_key, pull.image.registry());
        assert_eq!(plan.cache_key_type, CacheKeyType::Registry);
        Ok(plan.inputs)
    }

    fn input<'a>(inputs: &'a [Input], name: &str) -> &'a str {
        inputs
            .iter()
            .find(|i| i.name() == name)
            .map(Input::value)
            .unwrap()
    }

    #[test]
    fn the_cloud_follows_the_registry_and_inputs_name_everything() {
        let a = azure(Options::default());
        let ids = [
            (identity::WI_CLIENT_ID, CLIENT),
            (identity::WI_TENANT_ID, TENANT),
        ];
        for (image, cloud, authority) in [
            (
                "contoso.azurecr.io/app",
                "AzurePublic",
                "https://login.microsoftonline.com",
            ),
            (
                "contoso.azurecr.cn/app",
                "AzureChina",
                "https://login.chinacloudapi.cn",
            ),
            (
                "contoso.azurecr.us/app",
                "AzureUSGovernment",
                "https://login.microsoftonline.us",
            ),
            (
                "contoso.eastus.geo.azurecr.io/app",
                "AzurePublic",
                "https://login.microsoftonline.com",
            ),
        ] {
            let inputs = plan_inputs(&a, image, &ids).unwrap();
            let names: Vec<&str> = inputs.iter().map(Input::name).collect();
            assert_eq!(
                names,
                [
                    "client_id",
                    "tenant_id",
                    "authority",
                    "cloud",
                    "registry",
                    "acr_endpoint",
                    "scope"
                ]
            );
            assert_eq!(input(&inputs, "cloud"), cloud);
            assert_eq!(input(&inputs, "authority"), authority);
            let registry = image.split('/').next().unwrap();
            assert_eq!(input(&inputs, "registry"), registry);
            assert_eq!(
                input(&inputs, "acr_endpoint"),
                format!("https://{registry}")
            );
            assert_eq!(
                input(&inputs, "scope"),
                "https://containerregistry.azure.net/.default"
            );
        }
        let e = plan_inputs(&a, "contoso.azurecr.de/app", &ids).unwrap_err();
        assert!(e.to_string().contains("--azure-authority-host"), "{e}");
        let e = plan_inputs(&a, "contoso.azurecr.io.evil.net/app", &ids).unwrap_err();
        assert!(e.what().contains("not an ACR login server"), "{e}");
    }

    #[test]
    fn overrides_replace_authority_endpoint_and_tenant() {
        let a = azure(Options {
            azure_tenant_id: Some("contoso.onmicrosoft.com".into()),
            azure_authority_host: Some("login.example.test/".into()),
            acr_endpoint: Some("http://127.0.0.1:8080/".into()),
            ..Options::default()
        });
        let inputs = plan_inputs(
            &a,
            "contoso.azurecr.de/app",
            &[(identity::AKS_CLIENT_ID, CLIENT)],
        )
        .unwrap();
        assert_eq!(input(&inputs, "authority"), "https://login.example.test");
        assert_eq!(input(&inputs, "acr_endpoint"), "http://127.0.0.1:8080");
        assert_eq!(input(&inputs, "tenant_id"), "contoso.onmicrosoft.com");
        assert_eq!(input(&inputs, "registry"), "contoso.azurecr.de");
    }

    #[test]
    fn bad_settings_refuse_to_build() {
        for options in [
            Options {
                azure_tenant_id: Some("common".into()),
                ..Options::default()
            },
            Options {
                azure_tenant_id: Some(String::new()),
                ..Options::default()
            },
            Options {
                azure_authority_host: Some("ftp://login".into()),
                ..Options::default()
            },
            Options {
                acr_endpoint: Some("contoso.azurecr.io".into()),
                ..Options::default()
            },
        ] {
            let e = Azure::new(&options, Arc::default()).err().unwrap();
            assert!(!e.to_string().is_empty(), "{options:?}");
        }
    }

    #[test]
    fn standard_variables_fill_only_what_flags_left_unset() {
        let env = |name: &str| match name {
            STANDARD_TENANT_ENV => Some("std-tenant.example".to_string()),
            STANDARD_AUTHORITY_ENV => Some(String::new()),
            _ => None,
        };
        let o = Options::default().with_standard_env(env);
        assert_eq!(o.azure_tenant_id.as_deref(), Some("std-tenant.example"));
        assert_eq!(o.azure_authority_host, None);
        let o = Options {
            azure_tenant_id: Some("flag.example".into()),
            ..Options::default()
        }
        .with_standard_env(env);
        assert_eq!(o.azure_tenant_id.as_deref(), Some("flag.example"));
    }
}
