//! GCP: GKE Workload Identity or Workload Identity Federation, optionally
//! impersonating a Google service account, for Artifact Registry and
//! Container Registry.
//!
//! The exchange is two documented REST calls, written on the shared HTTP
//! client rather than through an SDK (`gcp_auth` has no token exchange, and
//! `google-cloud-auth` hides the expiry we need for `cacheDuration`):
//!
//! 1. STS (`sts.googleapis.com/v1/token`) trades the pod's service account
//!    token for a federated access token, in the pool the flags name.
//! 2. If the Kubernetes service account carries
//!    `iam.gke.io/gcp-service-account`, IAM Credentials `generateAccessToken`
//!    trades the federated token for that Google service account's token.
//!    Without the annotation the federated token is the credential, and the
//!    registry's IAM policy grants the federated principal directly.
//!
//! With `--fallback node`, only service accounts that opted in use their
//! own identity: those with `iam.gke.io/gcp-service-account`, or with
//! `iam.gke.io/enable-wi-image-pull: "true"` (GKE's own opt-in for its
//! service-account image-pull mode, cloud-provider-gcp #1202). Every other
//! pod, and a request without a token, gets the node's service account
//! from the metadata server ([`node`]).
//!
//! Unlike GKE's own plugin, a configured exchange that fails is a failed
//! invocation with Google's error code and a fix, never an empty answer that
//! sends the kubelet into an anonymous pull.

// Public for the fuzz targets (fuzz/), which feed them arbitrary replies.
pub mod iam;
mod identity;
pub mod node;
mod registry;
pub mod sts;

use std::time::Duration;

use crate::Input;
use crate::fallback::{self, Fallback, Whose};
use crate::oauth;
use crate::{Context, Credential, Exchanger, Plan, Provider};
use std::sync::Arc;
use wicp_base::duration;
use wicp_base::error::{Error, Result};
use wicp_base::flags::{FlagSpec, Flags, Given, Takes, Usage, defaulted};
use wicp_base::secret::Secret;
use wicp_kubelet::request::image::ImageRef;
use wicp_net::inputs::Inputs;
use wicp_net::{self as net, http};

pub use identity::{Mode, SERVICE_ACCOUNT_ANNOTATION};
pub use registry::is_google_registry;

/// The username Artifact Registry and Container Registry expect with an
/// OAuth access token as the password.
pub const USERNAME: &str = "oauth2accesstoken";

const DEFAULT_STS_ENDPOINT: &str = "https://sts.googleapis.com";
const DEFAULT_IAMCREDENTIALS_ENDPOINT: &str = "https://iamcredentials.googleapis.com";

/// One Google access token opens every GCR and Artifact Registry host the
/// identity may read, so the on-disk cache keeps one credential for all of
/// them rather than one per host.
const REGISTRY_KEY: &str = "gcp";

/// Where Google announces outages, for the fix of a refusal that outlasted
/// every retry.
const STATUS_PAGE: &str = "https://status.cloud.google.com";

/// GKE's opt-in annotation for its service-account image-pull mode; only
/// the exact value `true` opts in, as in auth-provider-gcp.
pub const ENABLE_IMAGE_PULL_ANNOTATION: &str = "iam.gke.io/enable-wi-image-pull";

// Named group: clap names a flattened struct's group after the struct, and
// every exchanger's struct is called `Options`.
// The field docs are this provider's --help text, written for a terminal
// (bare URLs, <PLACEHOLDERS>, HOST[:PORT]), not for rustdoc.
/// `--gcp-cluster`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static GCP_CLUSTER: FlagSpec = FlagSpec {
    long: "gcp-cluster",
    env: "WICP_GCP_CLUSTER",
    takes: Takes::One,
    value: "RESOURCE",
    default: "",
    help: "GKE Workload Identity: the cluster, as \
        projects/PROJECT/locations/LOCATION/clusters/NAME (with \
        --gcp-project-id).",
};

/// `--gcp-iamcredentials-endpoint`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static GCP_IAMCREDENTIALS_ENDPOINT: FlagSpec = FlagSpec {
    long: "gcp-iamcredentials-endpoint",
    env: "WICP_GCP_IAMCREDENTIALS_ENDPOINT",
    takes: Takes::One,
    value: "URL",
    default: DEFAULT_IAMCREDENTIALS_ENDPOINT,
    help: "Base URL of IAM Credentials; \
        /v1/projects/-/serviceAccounts/EMAIL:generateAccessToken is \
        appended.",
};

/// `--gcp-project-id`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static GCP_PROJECT_ID: FlagSpec = FlagSpec {
    long: "gcp-project-id",
    env: "WICP_GCP_PROJECT_ID",
    takes: Takes::One,
    value: "PROJECT_ID",
    default: "",
    help: "GKE Workload Identity: the project whose pool PROJECT_ID.svc.id.goog \
        trusts the cluster (with --gcp-cluster). The token's audience is \
        PROJECT_ID.svc.id.goog.",
};

/// `--gcp-sts-endpoint`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static GCP_STS_ENDPOINT: FlagSpec = FlagSpec {
    long: "gcp-sts-endpoint",
    env: "WICP_GCP_STS_ENDPOINT",
    takes: Takes::One,
    value: "URL",
    default: DEFAULT_STS_ENDPOINT,
    help: "Base URL of Google STS (a restricted or Private Service Connect \
        endpoint); /v1/token is appended.",
};

/// `--gcp-workload-identity-provider`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static GCP_WORKLOAD_IDENTITY_PROVIDER: FlagSpec = FlagSpec {
    long: "gcp-workload-identity-provider",
    env: "WICP_GCP_WORKLOAD_IDENTITY_PROVIDER",
    takes: Takes::One,
    value: "RESOURCE",
    default: "",
    help: "Workload Identity Federation: the pool provider that trusts the \
        cluster's service account issuer, as \
        projects/NUMBER/locations/global/workloadIdentityPools/POOL/providers/PROVIDER. \
        The token's audience is its //iam.googleapis.com/ or \
        https://iam.googleapis.com/ name unless --audience says otherwise.",
};

#[allow(
    rustdoc::bare_urls,
    rustdoc::invalid_html_tags,
    rustdoc::broken_intra_doc_links
)]
/// `--gcp-token-lifetime`.
pub(crate) static GCP_TOKEN_LIFETIME: FlagSpec = FlagSpec {
    long: "gcp-token-lifetime",
    env: "WICP_GCP_TOKEN_LIFETIME",
    takes: Takes::One,
    value: "DURATION",
    default: "1h",
    help: "Lifetime asked of IAM Credentials for an impersonated service \
        account's token (whole seconds, 1m to 12h; above 1h needs an \
        organization policy exception).",
};

#[derive(Clone, Debug)]
pub struct Options {
    /// [`GCP_WORKLOAD_IDENTITY_PROVIDER`].
    pub gcp_workload_identity_provider: Option<String>,

    /// [`GCP_PROJECT_ID`].
    pub gcp_project_id: Option<String>,

    /// [`GCP_CLUSTER`].
    pub gcp_cluster: Option<String>,

    /// [`GCP_TOKEN_LIFETIME`].
    pub gcp_token_lifetime: Duration,

    /// [`GCP_STS_ENDPOINT`].
    pub gcp_sts_endpoint: String,

    /// [`GCP_IAMCREDENTIALS_ENDPOINT`].
    pub gcp_iamcredentials_endpoint: String,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] = &[
        &GCP_WORKLOAD_IDENTITY_PROVIDER,
        &GCP_PROJECT_ID,
        &GCP_CLUSTER,
        &GCP_TOKEN_LIFETIME,
        &GCP_STS_ENDPOINT,
        &GCP_IAMCREDENTIALS_ENDPOINT,
    ];
    const HEADING: &'static str = "GCP";

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            gcp_workload_identity_provider: given.text(&GCP_WORKLOAD_IDENTITY_PROVIDER)?,
            gcp_project_id: given.text(&GCP_PROJECT_ID)?,
            gcp_cluster: given.text(&GCP_CLUSTER)?,
            gcp_token_lifetime: defaulted(
                &GCP_TOKEN_LIFETIME,
                given.parsed(&GCP_TOKEN_LIFETIME, parse_lifetime)?,
            )?,
            gcp_sts_endpoint: given.text(&GCP_STS_ENDPOINT)?.unwrap_or_default(),
            gcp_iamcredentials_endpoint: given
                .text(&GCP_IAMCREDENTIALS_ENDPOINT)?
                .unwrap_or_default(),
        })
    }
}

/// IAM refuses lifetimes above 12 hours outright; below a minute the kubelet
/// could never cache the credential.
fn parse_lifetime(text: &str) -> std::result::Result<Duration, String> {
    let d = duration::parse(text).map_err(|e| e.to_string())?;
    if d.subsec_nanos() != 0 || d < Duration::from_secs(60) || d > Duration::from_secs(12 * 3600) {
        return Err(
            "the token lifetime must be whole seconds from 1m to 12h (IAM's limits)".into(),
        );
    }
    Ok(d)
}

pub static PROVIDER: Provider = Provider {
    name: "gcp",
    summary: "Google STS (GKE Workload Identity or Workload Identity Federation), optional impersonation",
    audience: "PROJECT_ID.svc.id.goog (GKE) or the pool provider's name (federation)",
    auto: Some(|image| is_google_registry(image.registry())),
    password_is_token: false,
    annotations: &[SERVICE_ACCOUNT_ANNOTATION, ENABLE_IMAGE_PULL_ANNOTATION],
    node_identity: Some("the node's Google service account, from the GCE metadata server"),
    flags: crate::own_flags::<Options>(),
};

impl crate::OwnFlags for Options {
    fn build(&self, shared: &crate::Shared<'_>, inputs: &Inputs) -> Result<Box<dyn Exchanger>> {
        Ok(Box::new(
            Gcp::new(self, Arc::clone(&inputs.net))?.with_fallback(
                shared.fallback,
                inputs.env.get(node::HOST_ENV).map(str::to_string),
            ),
        ))
    }
}

pub struct Gcp {
    /// `None` when no GCP flag is set: the exchanger then only refuses.
    mode: Option<Mode>,
    token_lifetime: Duration,
    sts_endpoint: String,
    iam_endpoint: String,
    fallback: Fallback,
    /// `GCE_METADATA_HOST`, for the node path.
    metadata_host: Option<String>,
    net: Arc<net::Settings>,
}

impl Gcp {
    /// Checks the flags. Setting a malformed or conflicting GCP flag is an
    /// error whatever the provider; setting none is not, until a request is
    /// routed here.
    pub fn new(options: &Options, net: Arc<net::Settings>) -> Result<Self> {
        Ok(Gcp {
            net,
            mode: Mode::from_flags(
                options.gcp_workload_identity_provider.as_deref(),
                options.gcp_project_id.as_deref(),
                options.gcp_cluster.as_deref(),
            )?,
            token_lifetime: options.gcp_token_lifetime,
            sts_endpoint: http::endpoint_override(&GCP_STS_ENDPOINT, &options.gcp_sts_endpoint)?,
            iam_endpoint: http::endpoint_override(
                &GCP_IAMCREDENTIALS_ENDPOINT,
                &options.gcp_iamcredentials_endpoint,
            )?,
            fallback: Fallback::None,
            metadata_host: None,
        })
    }

    /// What pods without an identity of their own get (`--fallback`), and
    /// `GCE_METADATA_HOST`.
    pub(crate) fn with_fallback(
        mut self,
        fallback: Fallback,
        metadata_host: Option<String>,
    ) -> Self {
        self.fallback = fallback;
        self.metadata_host = metadata_host;
        self
    }

    fn whose(&self, cx: &Context<'_>) -> Whose {
        let opted_in = cx.annotation(SERVICE_ACCOUNT_ANNOTATION).is_some()
            || cx.annotation(ENABLE_IMAGE_PULL_ANNOTATION) == Some("true");
        let opt_in = format!(
            "no {SERVICE_ACCOUNT_ANNOTATION} annotation and no {ENABLE_IMAGE_PULL_ANNOTATION}: \"true\""
        );
        fallback::whose(self.fallback, cx.token, opted_in, &opt_in)
    }

    fn node_plan<'a>(&'a self, cx: &Context<'a>, why: String) -> Result<Plan<'a>> {
        let service = node::service(self.metadata_host.as_deref())?;
        let inputs = vec![
            Input::identity("instance metadata", service.describe()),
            Input::setting("registry_key", REGISTRY_KEY.to_string()),
        ];
        let plan = Plan::for_node(&PROVIDER, cx.image, why, inputs, move |deadline| {
            node::login(&service, &self.net, deadline)
        });
        // The node's access token opens gcr.io, pkg.dev and every other
        // Google registry alike: one cache entry, one metadata call, for
        // all of them (docs/node-identity.md).
        Ok(Plan {
            every_registry: Some("every Google registry"),
            ..plan
        })
    }
}

impl Exchanger for Gcp {
    fn provider(&self) -> &'static Provider {
        &PROVIDER
    }

    fn audiences(&self) -> Vec<String> {
        self.mode
            .as_ref()
            .map(Mode::token_audiences)
            .unwrap_or_default()
    }

    fn annotation_keys(&self) -> Vec<String> {
        match self.fallback {
            Fallback::None => crate::names(&[SERVICE_ACCOUNT_ANNOTATION]),
            Fallback::Node => {
                crate::names(&[SERVICE_ACCOUNT_ANNOTATION, ENABLE_IMAGE_PULL_ANNOTATION])
            }
        }
    }

    fn requires_token(&self) -> bool {
        self.fallback == Fallback::None
    }

    fn serves(&self, image: &ImageRef) -> bool {
        is_google_registry(image.registry())
    }

    fn registries(&self) -> String {
        registry::REGISTRIES.to_string()
    }

    fn plan<'a>(&'a self, cx: &Context<'a>) -> Result<Plan<'a>> {
        let registry = cx.image.registry();
        if !self.serves(cx.image) {
            return Err(Error::registry(format!(
                "registry {} is not a Google registry ({}); a Google access token is only sent to those",
                wicp_base::error::quote(registry),
                registry::REGISTRIES
            ))
            .fix(format!(
                "narrow this provider's matchImages to {}",
                registry::MATCH_IMAGES.join(", ")
            )));
        }
        if let Whose::Node { why } = self.whose(cx) {
            return self.node_plan(cx, why);
        }
        let mode = self.mode.as_ref().ok_or_else(Mode::not_configured)?;
        let token = cx.token()?;
        let service_account = cx
            .annotation(SERVICE_ACCOUNT_ANNOTATION)
            .map(|v| identity::parse_service_account(v.trim()))
            .transpose()?;
        let sts_audience = mode.sts_audience();
        let inputs = vec![
            Input::setting("mode", mode.name().to_string()),
            Input::identity("sts_audience", sts_audience.clone()),
            Input::identity(
                "service_account",
                service_account.clone().unwrap_or_else(|| "none".into()),
            ),
            Input::setting(
                "token_lifetime",
                format!("{}s", self.token_lifetime.as_secs()),
            ),
            Input::setting("sts_endpoint", self.sts_endpoint.clone()),
            Input::setting("iamcredentials_endpoint", self.iam_endpoint.clone()),
            Input::setting("registry_key", REGISTRY_KEY.to_string()),
        ];
        let claims = token.claims();
        let (grant_fix, target_fix) = fixes(mode, &claims.issuer, &claims.subject);
        let principal = mode.principal(token.service_account());
        Ok(Plan::for_registry(
            &PROVIDER,
            cx.image,
            inputs,
            move |deadline| {
                let sts_request = sts::Request {
                    endpoint: &self.sts_endpoint,
                    audience: &sts_audience,
                    subject_token: token.secret(),
                    grant_fix: &grant_fix,
                    target_fix: &target_fix,
                };
                let impersonated = service_account.as_deref();
                let access = self.sts_then_iam(&sts_request, impersonated, &principal, deadline)?;
                Ok(Credential {
                    username: USERNAME.to_string(),
                    password: access.token,
                    // A federated token dies with its subject token; an
                    // impersonated one is not handed out for longer than
                    // the token that justified it either.
                    expires_at: access.expires_at.min(token.claims().expires_at),
                })
            },
        ))
    }
}

impl Gcp {
    /// The exchange, in order: the service account token to Google STS for
    /// a federated access token (`sts_request`), then, when the service
    /// account is annotated with a Google service account (`impersonated`),
    /// IAM Credentials `generateAccessToken` for that account's token.
    /// `principal` names the federated identity in messages.
    fn sts_then_iam(
        &self,
        sts_request: &sts::Request<'_>,
        impersonated: Option<&str>,
        principal: &str,
        deadline: &wicp_base::deadline::Deadline,
    ) -> Result<AccessToken> {
        let call = match impersonated {
            Some(_) => "the Google token exchange (STS, then IAM Credentials)",
            None => "the Google STS token exchange",
        };
        http::block_on(deadline, call, async {
            let client = self.net.client(deadline)?;
            let federated = sts::exchange(&client, sts_request, deadline).await?;
            wicp_base::log::debug!(
                "Google STS issued a federated token for {} that expires at {}",
                principal,
                duration::format_unix(federated.expires_at)
            );
            let Some(email) = impersonated else {
                return Ok(federated);
            };
            let iam_request = iam::Request {
                endpoint: &self.iam_endpoint,
                service_account: email,
                federated_token: &federated.token,
                lifetime: self.token_lifetime,
                principal,
            };
            iam::generate_access_token(&client, &iam_request, deadline).await
        })
    }
}

/// The fixes for STS's two refusals, which depend on the pool.
fn fixes(mode: &Mode, issuer: &str, subject: &str) -> (String, String) {
    match mode {
        Mode::Federation { .. } => (
            format!(
                "the pool provider did not accept the token: check that its issuer is the cluster's ({issuer}) with the cluster's \
                 current signing keys, that its attribute condition admits {subject}, and that its allowed audiences (if any) \
                 include the token's audience (tokenAttributes.serviceAccountTokenAudience, --audience)"
            ),
            "no enabled pool provider has this name: check the project number, pool ID and provider ID in \
             --gcp-workload-identity-provider, and that neither the pool nor the provider is disabled or deleted"
                .to_string(),
        ),
        Mode::Gke { project, cluster } => (
            format!(
                "GKE Workload Identity did not accept the token: check that Workload Identity (pool {project}.svc.id.goog) \
                 is enabled on {cluster} and that the token comes from that cluster (issuer {issuer})"
            ),
            format!(
                "check --gcp-project-id and --gcp-cluster: {project} must own the pool {project}.svc.id.goog and {cluster} \
                 must exist with Workload Identity enabled"
            ),
        ),
    }
}

/// A Google access token and when it stops working (Unix seconds).
#[derive(Debug)]
pub struct AccessToken {
    pub token: Secret,
    pub expires_at: i64,
}

/// The error for a Google API's refusal of `what` ("IAM Credentials
/// refused to impersonate ..."): the code and description of its RFC 6749
/// or Google API error body, or the body's size when it is neither.
fn refused(service: &'static str, what: &str, reply: &http::Reply, fix: String) -> Error {
    let said = match oauth::error_body(&reply.body) {
        Some(error) => error.summary(reply.status),
        None => format!(
            "HTTP {} with a body that is not a Google error ({} bytes)",
            reply.status,
            reply.body.len()
        ),
    };
    Error::upstream(format!("{what}: {said}"))
        .fix(fix)
        .answered(service, reply.status, &reply.body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lifetimes() {
        assert_eq!(parse_lifetime("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_lifetime("3600s").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_lifetime("12h").unwrap(), Duration::from_secs(43200));
        assert_eq!(parse_lifetime("1m").unwrap(), Duration::from_secs(60));
        for bad in ["59s", "12h1s", "1500ms", "90.5s", "0", "1d", ""] {
            assert!(parse_lifetime(bad).is_err(), "{bad}");
        }
    }
}
