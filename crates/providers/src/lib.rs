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

#![forbid(unsafe_code)]
// The docs are read with `--document-private-items` (`make lint`): a public
// item may link the private ones it explains.
#![allow(rustdoc::private_intra_doc_links)]
#![warn(unreachable_pub)]

pub mod spiffe;
pub mod cache;
pub mod allowlist;
pub mod fallback;
pub mod mirror;
pub mod oauth;
pub mod route;
pub mod token_service;

use std::collections::BTreeMap;
use std::fmt;
use wicp_base::flags::{FlagSpec, Flags, Given, Usage};

use wicp_base::deadline::Deadline;
use wicp_base::error::{Error, Result};
use wicp_base::secret::Secret;
use wicp_kubelet::request::image::ImageRef;
use wicp_kubelet::request::protocol::CacheKeyType;
use wicp_kubelet::request::token::ServiceAccountToken;
use wicp_net::inputs::Inputs;

/// One identity system, declared once.
///
/// Everything the rest of the program knows about a provider comes from
/// its declaration and from the [`Exchanger`] it builds: the router and
/// `auto`, `--help` and `--version`, `check-config`, `explain` and the
/// cache key all read [`ALL`]. Adding a provider is one module that
/// declares a `PROVIDER`, its `mod` line and its line in [`ALL`] below.
pub struct Provider {
    /// `--provider` value, binary-name suffix (`wi-credential-provider-aws`),
    /// log and cache-key name.
    pub name: &'static str,
    /// One line for `--help` and the docs.
    pub summary: &'static str,
    /// The audience the service account token needs when `--audience` is
    /// not given, in words (the built exchanger's [`Exchanger::audiences`]
    /// is authoritative: some depend on flags).
    pub audience: &'static str,
    /// The registry test `auto` uses, for providers whose registries are
    /// recognisable by host alone (the clouds). `None`: `auto` never picks
    /// this provider, so sending a token to it is always an explicit choice.
    pub auto: Option<fn(&ImageRef) -> bool>,
    /// The registry password is the service account token itself: the
    /// kubelet's `cacheType` must be `Token`, and the credential lives no
    /// longer than the token.
    pub password_is_token: bool,
    /// The service account annotation keys the provider reads with its
    /// default flags, in order of preference. An exchanger whose keys
    /// depend on its flags says so in [`Exchanger::annotation_keys`]; a
    /// test checks that, built with the defaults, it reads only these.
    pub annotations: &'static [&'static str],
    /// The node identity `--fallback node` pulls with, in words; `None`:
    /// the provider has none, and refuses `--fallback node`.
    pub node_identity: Option<&'static str>,
    /// The provider's own flags: how they join the command line and how
    /// they come out of it, typed, when it is parsed ([`own_flags`]).
    pub flags: FlagSet,
}

impl Provider {
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether `auto` would pick this provider for `image`: only a cloud,
    /// and only for a registry it recognises by host.
    pub fn auto_serves(&self, image: &ImageRef) -> bool {
        self.auto.is_some_and(|serves| serves(image))
    }

    /// The provider called `name`.
    pub fn find(name: &str) -> Option<&'static Provider> {
        ALL.iter().copied().find(|p| p.name == name)
    }
}

// The provider modules, declared as plain items so that rustfmt and
// rust-analyzer see them (a `mod` inside a macro call is invisible to
// both), in the order of [`ALL`] (rustfmt.toml keeps it). A module left
// out of [`ALL`] fails the build: its `PROVIDER` is then dead code, and
// `-D warnings` makes that an error.
pub mod aws;
pub mod azure;
pub mod gcp;
pub mod passthrough;
pub mod jfrog;
pub mod quay;
pub mod cloudsmith;
pub mod token_exchange;
pub mod chainguard;
pub mod vault;

/// Every provider this binary carries, in `auto`'s order of preference:
/// the clouds first (their registries are recognisable by host), then the
/// providers `auto` never picks.
pub static ALL: &[&Provider] = &[
    &aws::PROVIDER,
    &azure::PROVIDER,
    &gcp::PROVIDER,
    &passthrough::PROVIDER,
    &jfrog::PROVIDER,
    &quay::PROVIDER,
    &cloudsmith::PROVIDER,
    &token_exchange::PROVIDER,
    &chainguard::PROVIDER,
    &vault::PROVIDER,
];

impl PartialEq for Provider {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Provider {}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// A provider's own flags, read when the command line is parsed (its
/// options struct, [`Flags`]): what builds the provider's [`Exchanger`]. So a
/// provider's flags are typed values before any request is read, and a
/// bad value is a usage error of the command line, never of a request.
pub trait OwnFlags: fmt::Debug + Send + Sync {
    /// Builds the exchanger from these flags, the settings every provider
    /// shares and the process inputs. Only the provider a request is
    /// routed to is built, so a provider's configuration errors surface on
    /// its own requests only.
    fn build(&self, shared: &Shared<'_>, inputs: &Inputs) -> Result<Box<dyn Exchanger>>;
}

/// A provider's flags as the command line declares them
/// ([`FlagSet::flags`], under [`FlagSet::heading`] in `--help`) and how
/// they are read into the provider's [`OwnFlags`] ([`FlagSet::read`]):
/// all from one type, [`own_flags`].
pub struct FlagSet {
    pub flags: &'static [&'static FlagSpec],
    pub heading: &'static str,
    pub read: fn(&Given) -> std::result::Result<Box<dyn OwnFlags>, Usage>,
}

/// The [`FlagSet`] of the options struct `O`.
pub const fn own_flags<O>() -> FlagSet
where
    O: OwnFlags + Flags + 'static,
{
    FlagSet {
        flags: O::FLAGS,
        heading: O::HEADING,
        read: read_own::<O>,
    }
}

fn read_own<O>(given: &Given) -> std::result::Result<Box<dyn OwnFlags>, Usage>
where
    O: OwnFlags + Flags + 'static,
{
    Ok(Box::new(O::from_flags(given)?))
}

/// The settings every provider shares, already parsed with the command
/// line (`options::CommandLine`), that a provider is built with besides
/// its [`OwnFlags`].
pub struct Shared<'a> {
    /// The provider being built.
    pub provider: &'static Provider,
    /// `--registry`: the allowlist of the providers whose registries are
    /// the admin's choice.
    pub registries: &'a allowlist::Options,
    /// `--fallback`: what the clouds give a pod without an identity.
    pub fallback: fallback::Fallback,
}

/// Owned copies of a provider's fixed names (annotation keys, audiences),
/// as [`Exchanger`] returns them.
pub fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|name| name.to_string()).collect()
}

/// Annotations as the kubelet passes them, for the tests of exchangers.
#[cfg(any(test, feature = "test-support"))]
pub fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One pull as an exchanger's tests ask for it: the image and the service
/// account's annotations, owned, lent as a [`Context`].
#[cfg(test)]
pub(crate) struct Pull {
    pub image: ImageRef,
    annotations: BTreeMap<String, String>,
}

#[cfg(test)]
impl Pull {
    pub(crate) fn new(image: &str, annotations: &[(&str, &str)]) -> Self {
        Pull {
            image: ImageRef::parse(image).unwrap_or_else(|e| panic!("{image}: {e}")),
            annotations: self::annotations(annotations),
        }
    }

    /// The context of this pull, with `token` when the test has one.
    pub(crate) fn context<'a>(&'a self, token: Option<&'a ServiceAccountToken>) -> Context<'a> {
        Context {
            image: &self.image,
            annotations: &self.annotations,
            token,
        }
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
            Error::internal(
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

/// One input of a [`Plan`]: a name and a value that change the credential,
/// typed by what they say. The cache key hashes every one (name and value,
/// whichever variant), `explain` prints them, and the audit log records
/// the identities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Says whose identity pulls: a role ARN, a client ID and tenant, a
    /// robot, a Vault role, the node's metadata service.
    Identity(&'static str, String),
    /// Changes the credential without naming who: an endpoint, a scope, a
    /// lifetime, a mode, a mirror rule.
    Setting(&'static str, String),
}

impl Input {
    pub fn identity(name: &'static str, value: impl Into<String>) -> Input {
        Input::Identity(name, value.into())
    }

    pub fn setting(name: &'static str, value: impl Into<String>) -> Input {
        Input::Setting(name, value.into())
    }

    pub fn name(&self) -> &'static str {
        match self {
            Input::Identity(name, _) | Input::Setting(name, _) => name,
        }
    }

    pub fn value(&self) -> &str {
        match self {
            Input::Identity(_, value) | Input::Setting(_, value) => value,
        }
    }

    pub fn is_identity(&self) -> bool {
        matches!(self, Input::Identity(..))
    }
}

/// The network step of a plan.
pub type Exchange<'a> = Box<dyn FnOnce(&Deadline) -> Result<Credential> + 'a>;

/// Everything decided before the network: where the credential goes, how
/// widely it may be cached, and the inputs that shape it.
pub struct Plan<'a> {
    pub provider: &'static Provider,
    /// The key of the response's `auth` map: the registry host, which the
    /// kubelet matches against the image with its own rules.
    pub auth_key: String,
    pub cache_key_type: CacheKeyType,
    /// Whether the on-disk cache may keep the credential. Never for the
    /// passthrough token.
    pub cacheable: bool,
    /// Every input besides the service account that changes the credential
    /// (identity, registry scope, endpoints, lifetimes), in order. None of
    /// them is secret. The [`Input::Identity`] ones are the principal
    /// ([`Plan::principal`]).
    pub inputs: Vec<Input>,
    /// Whose identity the credential is: the service account's, or the
    /// node's under `--fallback node`. A node credential is cached once for
    /// every pod ([`crate::cache::key`]).
    pub identity: fallback::Whose,
    /// For a credential that opens every registry the provider serves
    /// alike (GCP's node token), the one name the disk cache keeps it
    /// under instead of the registry host, so that one entry (and one call
    /// to the upstream) serves them all. `None`: one entry per registry.
    pub every_registry: Option<&'static str>,
    pub exchange: Exchange<'a>,
}

impl<'a> Plan<'a> {
    /// The plan of every exchanger but passthrough: the credential opens
    /// the image's registry as a whole (its host is the `auth` key, and the
    /// kubelet caches it per registry), and the on-disk cache may keep it.
    pub(crate) fn for_registry(
        provider: &'static Provider,
        image: &ImageRef,
        inputs: Vec<Input>,
        exchange: impl FnOnce(&Deadline) -> Result<Credential> + 'a,
    ) -> Self {
        Plan {
            provider,
            auth_key: image.registry().to_string(),
            cache_key_type: CacheKeyType::Registry,
            cacheable: true,
            inputs,
            identity: fallback::Whose::ServiceAccount,
            every_registry: None,
            exchange: Box::new(exchange),
        }
    }

    /// What the disk cache keys and checks the credential by: the registry
    /// host ([`Plan::auth_key`]), or the one name of
    /// [`Plan::every_registry`].
    pub fn cached_as(&self) -> &str {
        self.every_registry.unwrap_or(&self.auth_key)
    }

    /// Who pulls: the plan's [`Input::Identity`] inputs, in order (a role
    /// ARN, a client ID, a robot, the node's metadata service), which the
    /// audit log records. Every plan of every provider has one (a test in
    /// `serve` plans with each).
    pub fn principal(&self) -> impl Iterator<Item = &Input> {
        self.inputs.iter().filter(|i| i.is_identity())
    }

    /// The plan of a node-identity credential (`--fallback node`): like
    /// [`Plan::for_registry`], keyed for every pod of the node alike.
    pub(crate) fn for_node(
        provider: &'static Provider,
        image: &ImageRef,
        why: String,
        mut inputs: Vec<Input>,
        exchange: impl FnOnce(&Deadline) -> Result<Credential> + 'a,
    ) -> Self {
        inputs.insert(0, Input::setting("identity", "node"));
        Plan {
            identity: fallback::Whose::Node { why },
            ..Plan::for_registry(provider, image, inputs, exchange)
        }
    }
}

impl fmt::Debug for Plan<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("provider", &self.provider)
            .field("auth_key", &self.auth_key)
            .field("cache_key_type", &self.cache_key_type)
            .field("cacheable", &self.cacheable)
            .field("inputs", &self.inputs)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// One identity system.
pub trait Exchanger {
    fn provider(&self) -> &'static Provider;

    /// The audiences the token may carry for this exchanger, any one of
    /// which is enough; empty (the default) means the exchanger does not
    /// care: the upstream checks whatever it was configured to, and the
    /// core checks `--audience` when it is given (the provider's
    /// [`Provider::audience`] says so in words).
    fn audiences(&self) -> Vec<String> {
        Vec::new()
    }

    /// The service account annotation keys the exchanger reads, in the
    /// order it prefers them. The kubelet passes only keys listed in the
    /// provider entry's `tokenAttributes`, so `check-config` compares the two.
    fn annotation_keys(&self) -> Vec<String> {
        names(self.provider().annotations)
    }

    /// Whether a pull needs one of [`Exchanger::annotation_keys`] to name
    /// its identity. False where a default identity stands in for a
    /// service account without them (an identity binding's
    /// `--azure-identity-binding-client-id`): an entry listing none of
    /// the keys then works, every pod pulling with the default.
    fn needs_annotations(&self) -> bool {
        true
    }

    /// Whether the exchanger needs the kubelet's service account token.
    fn requires_token(&self) -> bool {
        true
    }

    /// For providers whose registries are the admin's choice: the
    /// `--registry` allowlist, and what it guards ("the service account
    /// token"). Giving it is all such a provider does for [`serves`],
    /// [`registries`] and [`refusal`].
    ///
    /// [`serves`]: Exchanger::serves
    /// [`registries`]: Exchanger::registries
    /// [`refusal`]: Exchanger::refusal
    fn allowlist(&self) -> Option<(&allowlist::Allowlist, &'static str)> {
        None
    }

    /// Whether `image` is on a registry this exchanger serves. Checked
    /// before every plan (`serve::prepare`, in the binary), so no credential or
    /// token leaves for any other.
    fn serves(&self, image: &ImageRef) -> bool {
        self.allowlist()
            .is_some_and(|(allowed, _)| allowed.allows(image))
    }

    /// The registries this exchanger serves, for error messages.
    fn registries(&self) -> String {
        self.allowlist()
            .map_or_else(String::new, |(allowed, _)| allowed.describe())
    }

    /// Why `image`, which [`Exchanger::serves`] refused, gets no
    /// credential from this exchanger, and what to change.
    fn refusal(&self, image: &ImageRef) -> Error {
        let provider = self.provider();
        if let Some((allowed, what)) = self.allowlist() {
            return allowed.refusal(provider.name, what, image);
        }
        Error::registry(format!(
            "registry {} is not served by the {provider} exchanger, which serves {}",
            image.registry(),
            self.registries()
        ))
        .fix("narrow this provider's matchImages in the kubelet's CredentialProviderConfig to those registries, or pick another provider")
    }

    /// Checks the request and decides everything but the network calls.
    fn plan<'a>(&'a self, cx: &Context<'a>) -> Result<Plan<'a>>;
}

/// The code blocks of docs/adding-a-provider.md, compiled here (build.rs
/// copies them) and run: the sample a newcomer copies declares and plans
/// as today's providers do (round 5: it had drifted from `Provider`).
#[cfg(test)]
#[allow(dead_code, clippy::unwrap_used, clippy::panic)]
mod adding_a_provider_samples {
    include!(concat!(env!("OUT_DIR"), "/adding_a_provider.rs"));

    use super::Pull;
    use crate::allowlist::Guarded;

    #[test]
    fn the_samples_declare_build_and_plan() {
        let cloud = &sample_0::PROVIDER;
        let image =
            wicp_kubelet::request::image::ImageRef::parse("team.cr.example.com/app:1").unwrap();
        assert!(cloud.auto_serves(&image));
        let robot = &sample_1::PROVIDER;
        assert_eq!((cloud.name, robot.name), ("example", "example-robot"));
        // Not in `providers::ALL`, so the command line does not carry it:
        // built directly, as `CommandLine::build` would.
        let inputs = wicp_net::inputs::Inputs::default();
        let registries = crate::allowlist::Options::default();
        let shared = super::Shared {
            provider: cloud,
            registries: &registries,
            fallback: super::fallback::Fallback::None,
        };
        let options = sample_0::Options::default();
        let exchanger = super::OwnFlags::build(&options, &shared, &inputs).unwrap();
        let pull = Pull::new(
            "team.cr.example.com/app:1",
            &[("example.com/identity", "ci-bot")],
        );
        let token = wicp_kubelet::request::token::token_for("sts.example.com");
        let plan = exchanger.plan(&pull.context(Some(&token))).unwrap();
        assert_eq!(plan.auth_key, "team.cr.example.com");
        assert_eq!(plan.inputs[0], super::Input::identity("identity", "ci-bot"));
        assert!(exchanger.serves(&pull.image));
        let bad = sample_0::Options {
            example_sts_url: Some("http://sts.example.com".into()),
        };
        assert!(super::OwnFlags::build(&bad, &shared, &inputs).is_err());

        let unset = sample_1::ExampleRobot::new(&sample_1::Options::default(), Default::default());
        let e = unset.err().unwrap();
        assert_eq!(
            e.flagged().map(|f| f.to_string()).as_deref(),
            Some("--example-robot-url")
        );
        let set = sample_1::Options {
            example_robot_url: Some("https://robots.example.com".into()),
        };
        let robot = sample_1::ExampleRobot::new(&set, Default::default()).unwrap();
        let pull = Pull::new("team.cr.example.com/app:1", &[("example.com/robot", "ci")]);
        let plan = robot.plan(&pull.context(Some(&token)), &token).unwrap();
        assert_eq!(plan.inputs[0], super::Input::identity("robot", "ci"));
    }
}
