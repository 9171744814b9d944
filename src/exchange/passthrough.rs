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
//! harbor.example.com/team-a`), the answer must not let the kubelet reuse
//! the token for the rest of the host: its key carries that path
//! (`harbor.example.com/team-a`) and `cacheKeyType: Image`. The kubelet
//! matches a key's path as a literal string prefix, so `team-a` also covers
//! `team-ab`; a pattern ending in `/` (`harbor.example.com/team-a/`) does
//! not.

use crate::error::{Error, Result};
use crate::exchange::{Context, Credential, Exchanger, Plan, Provider};
use crate::image::ImageRef;
use crate::matching;
use crate::protocol::CacheKeyType;

/// The username sent with the token when none is configured. Harbor and Zot
/// ignore it on their OIDC token path; it shows up in registry audit logs.
pub const DEFAULT_USERNAME: &str = "serviceaccount";

#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Passthrough")]
#[group(id = "passthrough_options")]
pub struct Options {
    /// A registry allowed to receive the service account token as a password
    /// (passthrough only). Repeatable; uses the kubelet's matchImages rules:
    /// globs only inside host labels (`*.harbor.example.com`), exact port,
    /// literal path prefix. Any other registry is refused.
    #[arg(
        long = "registry",
        value_name = "PATTERN",
        env = "WICP_REGISTRY",
        value_delimiter = ','
    )]
    pub registries: Vec<String>,

    /// Username sent with the token (passthrough only).
    #[arg(long, value_name = "NAME", env = "WICP_PASSTHROUGH_USERNAME", default_value = DEFAULT_USERNAME)]
    pub passthrough_username: String,
}

pub struct Passthrough {
    registries: Vec<String>,
    username: String,
}

impl Passthrough {
    pub fn new(options: &Options) -> Result<Self> {
        for pattern in &options.registries {
            if !matching::is_valid_pattern(pattern) {
                return Err(Error::new(format!("--registry {pattern:?} is not a valid pattern"))
                    .fix("write a host[:port][/path] with globs only inside host labels, e.g. *.harbor.example.com"));
            }
        }
        if options.passthrough_username.is_empty() {
            return Err(Error::new("--passthrough-username is empty")
                .fix("set a non-empty username; registries log it"));
        }
        Ok(Passthrough {
            registries: options.registries.clone(),
            username: options.passthrough_username.clone(),
        })
    }
}

impl Passthrough {
    /// The path of the pattern that allows `image`: empty when a host-wide
    /// pattern allows it, else the longest allowing path (the narrowest
    /// key). `None` when no pattern allows it.
    fn allowing_path(&self, image: &ImageRef) -> Option<&str> {
        let target = image.to_string();
        self.registries
            .iter()
            .filter(|p| matching::matches(p, &target))
            .map(|p| matching::pattern_path(p))
            .min_by_key(|path| (!path.is_empty(), std::cmp::Reverse(path.len())))
    }
}

impl Exchanger for Passthrough {
    fn provider(&self) -> Provider {
        Provider::Passthrough
    }

    /// Whatever audience the registry trusts: the core checks `--audience`
    /// when it is given.
    fn audiences(&self) -> Vec<String> {
        Vec::new()
    }

    fn serves(&self, image: &ImageRef) -> bool {
        self.allowing_path(image).is_some()
    }

    fn registries(&self) -> String {
        if self.registries.is_empty() {
            "no registry (none allowed with --registry)".to_string()
        } else {
            self.registries.join(", ")
        }
    }

    fn plan<'a>(&'a self, cx: &Context<'a>) -> Result<Plan<'a>> {
        if self.registries.is_empty() {
            return Err(Error::new("passthrough has no allowed registries, so the token goes nowhere")
                .fix("pass --registry PATTERN (or WICP_REGISTRY) for each registry that trusts the cluster's OIDC issuer"));
        }
        if !self.serves(cx.image) {
            return Err(Error::new(format!(
                "registry {} is not allowed to receive the service account token (allowed: {})",
                cx.image.registry(),
                self.registries.join(", ")
            ))
            .fix("if this registry trusts the cluster's OIDC issuer, add --registry for it; otherwise route it to another provider"));
        }
        let token = cx.token()?;
        let path = self.allowing_path(cx.image).unwrap_or_default();
        let cache_key_type = if path.is_empty() {
            CacheKeyType::Registry
        } else {
            CacheKeyType::Image
        };
        Ok(Plan {
            provider: Provider::Passthrough,
            auth_key: format!("{}{path}", cx.image.registry()),
            cache_key_type,
            cacheable: false,
            inputs: vec![
                ("registry", cx.image.registry().to_string()),
                ("username", self.username.clone()),
            ],
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
