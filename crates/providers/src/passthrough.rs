//! Passthrough: the service account token itself is the registry password.
//!
//! For registries that trust the cluster's OIDC issuer directly (Harbor,
//! Zot, a token server of your own), no exchange is needed: the registry's
//! token endpoint verifies the JWT against the issuer's keys. The token is a
//! bearer credential for whatever audience it names, so it is only ever sent
//! to registries an admin allowed with `--registry`, and never written to the
//! on-disk cache.
//!
//! The kubelet refuses a response whose password equals the token unless the
//! provider entry says `tokenAttributes.cacheType: Token`; with
//! `ServiceAccount` it logs an error and pulls without credentials.
//!
//! When only a path of a host is allowed (`--registry
//! harbor.example.com/team-a`), the answer is keyed with that path and
//! `cacheKeyType: Image`, as for every provider with an allowlist
//! (`serve::prepare`). The kubelet matches a key's path as a literal string
//! prefix, so `team-a` also covers `team-ab`; a pattern ending in `/`
//! (`harbor.example.com/team-a/`) does not.

use std::sync::Arc;
use wicp_base::error::{Error, Result};
use wicp_kubelet::request::protocol::CacheKeyType;

use crate::Input;
use crate::allowlist::{self, Guarded};
use crate::{Context, Credential, Plan, Provider};
use wicp_base::flags::{FlagSpec, Flags, Given, Takes, Usage};
use wicp_kubelet::request::token::ServiceAccountToken;
use wicp_net as net;

/// The username sent with the token when none is configured. Harbor and Zot
/// ignore it on their OIDC token path; it shows up in registry audit logs.
const DEFAULT_USERNAME: &str = "serviceaccount";

/// `--passthrough-username`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static PASSTHROUGH_USERNAME: FlagSpec = FlagSpec {
    long: "passthrough-username",
    env: "WICP_PASSTHROUGH_USERNAME",
    takes: Takes::One,
    value: "NAME",
    default: DEFAULT_USERNAME,
    help: "Username sent with the token (passthrough only).",
};

#[derive(Clone, Debug)]
pub struct Options {
    /// [`PASSTHROUGH_USERNAME`].
    pub passthrough_username: String,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] = &[&PASSTHROUGH_USERNAME];
    const HEADING: &'static str = "Passthrough";

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            passthrough_username: given.text(&PASSTHROUGH_USERNAME)?.unwrap_or_default(),
        })
    }
}

pub static PROVIDER: Provider = Provider {
    password_is_token: true,
    ..allowlist::declare::<Passthrough>(allowlist::About {
        name: "passthrough",
        summary: "the service account token itself, for registries that verify it (--registry only)",
        audience: "whatever the registry trusts (--audience)",
        annotations: &[],
    })
};

pub struct Passthrough {
    username: String,
}

impl Guarded for Passthrough {
    type Options = Options;
    const GUARDS: &'static str = "the service account token";

    /// Sends nothing anywhere: the registry is the only upstream.
    fn new(options: &Options, _net: Arc<net::Settings>) -> Result<Self> {
        if options.passthrough_username.is_empty() {
            return Err(Error::flag(&PASSTHROUGH_USERNAME, "is empty")
                .fix("set a non-empty username; registries log it"));
        }
        Ok(Passthrough {
            username: options.passthrough_username.clone(),
        })
    }

    fn plan<'a>(&'a self, cx: &Context<'a>, token: &'a ServiceAccountToken) -> Result<Plan<'a>> {
        Ok(Plan {
            provider: &PROVIDER,
            auth_key: cx.image.registry().to_string(),
            cache_key_type: CacheKeyType::Registry,
            cacheable: false,
            inputs: vec![
                Input::setting("registry", cx.image.registry().to_string()),
                Input::identity("username", self.username.clone()),
            ],
            identity: crate::fallback::Whose::ServiceAccount,
            every_registry: None,
            exchange: Box::new(move |_deadline| {
                Ok(Credential {
                    username: self.username.clone(),
                    password: token.secret().clone(),
                    expires_at: token.claims().expires_at,
                })
            }),
        })
    }
}
