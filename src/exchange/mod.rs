//! Exchangers turn a service account identity into registry credentials.
//!
//! Each exchanger owns everything specific to its cloud: the audience it
//! presents the token to, the annotations it reads, the registry hosts it
//! serves and the errors it explains. The rest of the program sees only the
//! [`Exchanger`] trait and the [`Plan`] it returns.
//!
//! Planning and exchanging are separate steps on purpose. [`Exchanger::plan`]
//! does every check that needs no network (registry host, annotations,
//! identity, endpoints) and names every input that shapes the credential;
//! the cache keys on those inputs, `explain` prints them, and only a miss
//! runs [`Plan::exchange`], which does the network calls.

pub mod aws;
pub mod azure;
pub mod gcp;
pub mod passthrough;

use std::collections::BTreeMap;
use std::fmt;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::image::ImageRef;
use crate::protocol::CacheKeyType;
use crate::secret::Secret;
use crate::token::ServiceAccountToken;

/// The exchangers this binary knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Provider {
    Aws,
    Azure,
    Gcp,
    Passthrough,
}

impl Provider {
    pub fn name(self) -> &'static str {
        match self {
            Provider::Aws => "aws",
            Provider::Azure => "azure",
            Provider::Gcp => "gcp",
            Provider::Passthrough => "passthrough",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        [
            Provider::Aws,
            Provider::Azure,
            Provider::Gcp,
            Provider::Passthrough,
        ]
        .into_iter()
        .find(|p| p.name() == name)
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Registry credentials and when they stop working.
pub struct Credential {
    pub username: String,
    pub password: Secret,
    /// Unix seconds.
    pub expires_at: i64,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("password", &self.password)
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// What an exchanger is asked to serve.
pub struct Context<'a> {
    pub image: &'a ImageRef,
    /// The annotations the kubelet passed (only those the provider entry
    /// lists in `tokenAttributes`).
    pub annotations: &'a BTreeMap<String, String>,
    /// Present whenever the exchanger requires a token: the caller checks.
    pub token: Option<&'a ServiceAccountToken>,
}

impl<'a> Context<'a> {
    /// The token, for exchangers that require one. The caller refuses a
    /// request without a token before planning, so this only fails if an
    /// exchanger forgot to say it needs one.
    pub fn token(&self) -> Result<&'a ServiceAccountToken> {
        self.token.ok_or_else(|| {
            Error::new(
                "internal error: the exchanger needs a service account token but none was checked",
            )
        })
    }

    /// A non-empty annotation, or `None`. An empty value counts as absent:
    /// `eks.amazonaws.com/role-arn: ""` is a mistake, not a choice.
    pub fn annotation(&self, key: &str) -> Option<&'a str> {
        self.annotations
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.trim().is_empty())
    }
}

/// The network step of a plan.
pub type Exchange<'a> = Box<dyn FnOnce(&Deadline) -> Result<Credential> + 'a>;

/// Everything decided before the network: where the credential goes, how
/// widely it may be cached, and the inputs that shape it.
pub struct Plan<'a> {
    pub provider: Provider,
    /// The key of the response's `auth` map: the registry host, which the
    /// kubelet matches against the image with its own rules.
    pub auth_key: String,
    pub cache_key_type: CacheKeyType,
    /// Whether the on-disk cache may keep the credential. Never for the
    /// passthrough token.
    pub cacheable: bool,
    /// Every input besides the service account that changes the credential
    /// (identity, registry scope, endpoints, lifetimes), as ordered name and
    /// value pairs. None of them is secret.
    pub inputs: Vec<(&'static str, String)>,
    pub exchange: Exchange<'a>,
}

impl fmt::Debug for Plan<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("provider", &self.provider)
            .field("auth_key", &self.auth_key)
            .field("cache_key_type", &self.cache_key_type)
            .field("cacheable", &self.cacheable)
            .field("inputs", &self.inputs)
            .finish_non_exhaustive()
    }
}

/// One identity system.
pub trait Exchanger {
    fn provider(&self) -> Provider;

    /// The audiences the token may carry for this exchanger, any one of
    /// which is enough; empty means the exchanger does not care.
    fn audiences(&self) -> Vec<String>;

    /// The service account annotation keys the exchanger reads, in the
    /// order it prefers them. The kubelet passes only keys listed in the
    /// provider entry's `tokenAttributes`, so `check-config` compares the two.
    fn annotation_keys(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether the exchanger needs the kubelet's service account token.
    fn requires_token(&self) -> bool {
        true
    }

    /// Whether `image` is on a registry this exchanger serves. `auto`
    /// routing asks every cloud exchanger in turn.
    fn serves(&self, image: &ImageRef) -> bool;

    /// The registries this exchanger serves, for error messages.
    fn registries(&self) -> String;

    /// Checks the request and decides everything but the network calls.
    fn plan<'a>(&'a self, cx: &Context<'a>) -> Result<Plan<'a>>;
}

/// Checks the service account token against what `exchanger` needs before
/// anything is planned: present when it is required, and minted for one of
/// the audiences it will be presented to (`audience_override` is
/// `--audience`). Returns those audiences, which also key the cache.
pub fn admit_token(
    exchanger: &dyn Exchanger,
    audience_override: Option<&str>,
    token: Option<&ServiceAccountToken>,
    api_version: &str,
) -> Result<Vec<String>> {
    let audiences = match audience_override {
        Some(audience) => vec![audience.to_string()],
        None => exchanger.audiences(),
    };
    match token {
        Some(token) => token.require_audience(&audiences, exchanger.provider().name())?,
        None if exchanger.requires_token() => {
            return Err(Error::new("the request carries no service account token").fix(format!(
                "give this provider entry tokenAttributes (serviceAccountTokenAudience, cacheType, requireServiceAccount) \
                 and apiVersion credentialprovider.kubelet.k8s.io/v1 in the kubelet's CredentialProviderConfig; \
                 the request used {api_version}"
            )));
        }
        None => {}
    }
    Ok(audiences)
}

/// Picks the exchanger for `image`: the one named, or under `auto` the
/// cloud exchanger whose registry pattern matches. `auto` never picks
/// passthrough: sending the token to a host is always an explicit choice.
pub fn route<'e>(
    choice: Option<Provider>,
    image: &ImageRef,
    exchangers: &'e [Box<dyn Exchanger>],
) -> Result<&'e dyn Exchanger> {
    match choice {
        Some(provider) => {
            let exchanger = exchangers
                .iter()
                .find(|e| e.provider() == provider)
                .ok_or_else(|| {
                    Error::new(format!(
                        "the {provider} exchanger is not available in this build"
                    ))
                    .fix("run `wi-credential-provider --version` to see the providers it has")
                })?;
            if provider != Provider::Passthrough && !exchanger.serves(image) {
                return Err(Error::new(format!(
                    "registry {} is not served by the {provider} exchanger, which serves {}",
                    image.registry(),
                    exchanger.registries()
                ))
                .fix("narrow this provider's matchImages in the kubelet's CredentialProviderConfig to those registries, or pick another provider"));
            }
            Ok(exchanger.as_ref())
        }
        None => {
            let clouds = || {
                exchangers
                    .iter()
                    .filter(|e| e.provider() != Provider::Passthrough)
            };
            clouds()
                .find(|e| e.serves(image))
                .map(|e| e.as_ref())
                .ok_or_else(|| {
                    let served = clouds()
                        .map(|e| format!("{} ({})", e.provider(), e.registries()))
                        .collect::<Vec<_>>();
                    let served = if served.is_empty() {
                        "no cloud exchanger is built in".to_string()
                    } else {
                        format!("known registries: {}", served.join("; "))
                    };
                    Error::new(format!(
                        "registry {} is not a cloud registry this plugin recognises ({served})",
                        image.registry()
                    ))
                    .fix("for a registry that trusts the cluster's OIDC issuer use --provider passthrough --registry <host>; otherwise remove it from matchImages")
                })
        }
    }
}
