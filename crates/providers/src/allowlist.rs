//! The registries an admin allows to receive a credential, for providers
//! that cannot recognise their registries by host: passthrough, and every
//! exchange whose token server sits in front of a registry of the admin's
//! choosing. `--registry` is one flag for all of them: a provider entry
//! runs one provider, and the list is the admin's, never a tenant's.

use std::fmt;
use std::sync::Arc;

use crate::{Context, Exchanger, OwnFlags, Plan, Provider, Shared};
use wicp_base::error::{Error, Result};
use wicp_base::flags::{FlagSpec, Flags, Given, Takes, Usage};
use wicp_kubelet::config::matching;
use wicp_kubelet::request::image::ImageRef;
use wicp_kubelet::request::token::ServiceAccountToken;
use wicp_net as net;
use wicp_net::inputs::Inputs;

/// `--registry`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static REGISTRY: FlagSpec = FlagSpec {
    long: "registry",
    env: "WICP_REGISTRY",
    takes: Takes::List,
    value: "PATTERN",
    default: "",
    help: "A registry allowed to receive the credential, for providers that do \
        not recognise registries by host (passthrough and the token \
        exchanges). Repeatable; read exactly as the kubelet reads a \
        matchImages entry: globs only inside host labels \
        (`*.harbor.example.com`), exact port, literal path prefix, no scheme \
        (refused: in matchImages it never matches). Any other registry is \
        refused.",
};

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// [`REGISTRY`].
    pub registries: Vec<String>,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] = &[&REGISTRY];

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            registries: given.list(&REGISTRY)?,
        })
    }
}

/// The checked `--registry` patterns.
#[derive(Clone, Debug, Default)]
pub struct Allowlist {
    patterns: Vec<String>,
}

impl Allowlist {
    /// Checks every pattern with the kubelet's `matchImages` rules: a
    /// pattern means here exactly what it would mean in `matchImages`.
    pub fn new(options: &Options) -> Result<Self> {
        for pattern in &options.registries {
            if let Some(scheme) = matching::scheme_of(pattern) {
                return Err(Error::flag(
                    &REGISTRY,
                    format!("{pattern:?} has a scheme ({scheme}://), which matchImages does not take: the kubelet would read it as the host {scheme:?} and match nothing"),
                )
                .fix(format!(
                    "write the registry without its scheme: --registry {}",
                    pattern.split_once("://").map_or(pattern.as_str(), |(_, rest)| rest)
                )));
            }
            if !matching::is_valid_pattern(pattern) {
                return Err(Error::flag(&REGISTRY, format!("{pattern:?} is not a valid pattern"))
                    .fix("write a host[:port][/path] with globs only inside host labels, e.g. *.harbor.example.com"));
            }
        }
        Ok(Allowlist {
            patterns: options.registries.clone(),
        })
    }

    /// Whether `image` is on an allowed registry.
    pub fn allows(&self, image: &ImageRef) -> bool {
        let target = image.to_string();
        self.patterns.iter().any(|p| matching::matches(p, &target))
    }

    /// The path of the pattern that allows `image` (`/team-a` for
    /// `harbor.example.com/team-a`): empty when a host-wide pattern allows
    /// it, else the longest allowing path, so a response keyed with it
    /// covers as little as possible. `None` when no pattern allows it.
    pub fn scope(&self, image: &ImageRef) -> Option<&str> {
        let target = image.to_string();
        self.patterns
            .iter()
            .filter(|p| matching::matches(p, &target))
            .map(|p| matching::pattern_path(p))
            .min_by_key(|path| (!path.is_empty(), std::cmp::Reverse(path.len())))
    }

    /// The allowed registries, for messages.
    pub fn describe(&self) -> String {
        if self.patterns.is_empty() {
            "no registry (none allowed with --registry)".to_string()
        } else {
            self.patterns.join(", ")
        }
    }

    /// Why `image` is refused: no registry allowed at all, or not this one.
    /// `what` names what would be sent ("the service account token").
    pub fn refusal(&self, provider: &str, what: &str, image: &ImageRef) -> Error {
        if self.patterns.is_empty() {
            return Error::registry(format!(
                "{provider} has no allowed registries, so {what} goes nowhere"
            ))
            .fix(format!(
                "pass --registry PATTERN (or WICP_REGISTRY) for each registry that should receive {what}"
            ));
        }
        Error::registry(format!(
            "registry {} is not allowed to receive {what} (allowed: {})",
            image.registry(),
            self.patterns.join(", ")
        ))
        .fix("if this registry should receive it, add --registry for it; otherwise route it to another provider")
    }
}

/// What a provider whose registries are the admin's choice brings of its
/// own; the `--registry` allowlist, and everything the rest of the
/// program asks an [`Exchanger`] about it, is [`Allowlisted`]'s, once for
/// all of them (passthrough, the vendor token services, token-exchange,
/// Vault).
pub trait Guarded: Sized + 'static {
    /// Its own flags.
    type Options: Flags + fmt::Debug + Send + Sync;
    /// What the allowlist guards, for refusals ("the Quay robot token").
    const GUARDS: &'static str;

    /// Checks its flags; `net` is how it reaches its upstream.
    fn new(options: &Self::Options, net: Arc<net::Settings>) -> Result<Self>;

    /// The annotation keys it reads when its flags change them
    /// ([`Exchanger::annotation_keys`]); `None`, the default: the keys its
    /// [`Provider`] declares.
    fn annotation_keys(&self) -> Option<Vec<String>> {
        None
    }

    /// [`Exchanger::plan`] for an allowed registry, with the service
    /// account token, which every such provider needs.
    fn plan<'a>(&'a self, cx: &Context<'a>, token: &'a ServiceAccountToken) -> Result<Plan<'a>>;
}

/// What a [`Guarded`] provider declares of itself ([`Provider`]'s fields
/// of the same names); the rest of its declaration is the same for all of
/// them ([`declare`]).
pub struct About {
    pub name: &'static str,
    pub summary: &'static str,
    pub audience: &'static str,
    pub annotations: &'static [&'static str],
}

/// The declaration of a provider behind `--registry`: `auto` never picks
/// it (a token goes to a registry of the admin's choosing only when the
/// admin chose this provider), it has no node identity, its flags are its
/// `Options`, and [`Behind`] builds it. Its password is not the token
/// itself unless it says so (passthrough).
pub const fn declare<G>(about: About) -> Provider
where
    G: Guarded,
    G::Options: Flags,
{
    Provider {
        name: about.name,
        summary: about.summary,
        audience: about.audience,
        auto: None,
        password_is_token: false,
        annotations: about.annotations,
        node_identity: None,
        flags: crate::own_flags::<Behind<G>>(),
    }
}

/// The flags of a [`Guarded`] provider, as the command line reads them:
/// its own `Options`, which build it behind its `--registry` allowlist.
pub(crate) struct Behind<G: Guarded>(G::Options);

impl<G: Guarded> fmt::Debug for Behind<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<G: Guarded> Flags for Behind<G> {
    const FLAGS: &'static [&'static FlagSpec] = G::Options::FLAGS;
    const HEADING: &'static str = G::Options::HEADING;

    fn from_flags(given: &Given) -> std::result::Result<Self, Usage> {
        G::Options::from_flags(given).map(Behind)
    }
}

impl<G: Guarded> OwnFlags for Behind<G> {
    /// Checks the allowlist, then the provider's own flags, with the
    /// process's network settings (proxies, `--ca-file`).
    fn build(&self, shared: &Shared<'_>, inputs: &Inputs) -> Result<Box<dyn Exchanger>> {
        Ok(Box::new(Allowlisted::<G>::new(
            shared.provider,
            shared.registries,
            &self.0,
            Arc::clone(&inputs.net),
        )?))
    }
}

/// A [`Guarded`] provider behind its `--registry` allowlist.
pub struct Allowlisted<G> {
    /// Its declaration, which names it as its `build`.
    provider: &'static Provider,
    allowlist: Allowlist,
    pub own: G,
}

impl<G: Guarded> Allowlisted<G> {
    /// Checks the allowlist, then the provider's own flags.
    pub fn new(
        provider: &'static Provider,
        registries: &Options,
        options: &G::Options,
        net: Arc<net::Settings>,
    ) -> Result<Self> {
        let allowlist = Allowlist::new(registries)?;
        Ok(Allowlisted {
            provider,
            allowlist,
            own: G::new(options, net)?,
        })
    }
}

impl<G: Guarded> Exchanger for Allowlisted<G> {
    fn provider(&self) -> &'static Provider {
        self.provider
    }

    fn annotation_keys(&self) -> Vec<String> {
        self.own
            .annotation_keys()
            .unwrap_or_else(|| crate::names(self.provider.annotations))
    }

    fn allowlist(&self) -> Option<(&Allowlist, &'static str)> {
        Some((&self.allowlist, G::GUARDS))
    }

    fn plan<'a>(&'a self, cx: &Context<'a>) -> Result<Plan<'a>> {
        self.own.plan(cx, cx.token()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowlist(patterns: &[&str]) -> Result<Allowlist> {
        Allowlist::new(&Options {
            registries: patterns.iter().map(|p| p.to_string()).collect(),
        })
    }

    #[test]
    fn allows_by_the_kubelets_rules_only() {
        let a = allowlist(&["*.harbor.example.com", "zot.example.com:5000/team"]).unwrap();
        let ok = |s: &str| a.allows(&ImageRef::parse(s).unwrap());
        assert!(ok("eu.harbor.example.com/app"));
        assert!(!ok("harbor.example.com/app"));
        assert!(!ok("a.b.harbor.example.com/app"));
        assert!(ok("zot.example.com:5000/team/app"));
        assert!(!ok("zot.example.com/team/app"));
        assert!(!ok("zot.example.com:5000/other/app"));
        assert_eq!(
            allowlist(&["[bad"]).unwrap_err().kind(),
            wicp_base::error::Kind::Config
        );
        let none = allowlist(&[]).unwrap();
        let image = ImageRef::parse("zot.example.com/a").unwrap();
        assert!(!none.allows(&image));
        assert!(
            none.refusal("vault", "the credential", &image)
                .to_string()
                .contains("no allowed registries")
        );
    }
}
