//! Opt-in node identity: `--fallback node`.
//!
//! The stock cloud plugins (ecr-credential-provider, acr-credential-provider,
//! auth-provider-gcp) pull with the node's identity whenever a pod has none
//! of its own. Ours refuse such pods by default (`--fallback none`), which
//! is why the stock plugin had to stay beside ours for system images. With
//! `--fallback node` the aws, azure and gcp exchangers serve those pods with
//! the node's identity instead, so one entry replaces the stock one.
//!
//! The rule, the same for every cloud and decided here only:
//!
//! - a request whose service account **opted in** (carries the provider's
//!   identity annotation; each exchanger says what counts) is served with
//!   that service account's identity only. A refusal fails the pull; it never
//!   falls back, so a denied role cannot be papered over by the node's;
//! - a request without a token (static and mirror pods, under an entry with
//!   `requireServiceAccount: false`) or whose service account did not opt in
//!   gets the node's identity under `node`, and today's error under `none`.
//!
//! A node credential is the same for every pod on the node, so the on-disk
//! cache keeps it once per registry, under a key that names no service
//! account and can never equal a service account's key
//! ([`crate::cache::key`]).

use wicp_base::flags::{FlagSpec, Flags, Given, Takes, Usage};
use wicp_kubelet::request::token::ServiceAccountToken;

/// `--fallback`: what a pod without an identity of its own gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fallback {
    /// Refuse it, naming the annotation to add (the default).
    #[default]
    None,
    /// The node's identity: the instance profile (aws), the kubelet
    /// identity (azure), the node's service account (gcp).
    Node,
}

impl wicp_base::flags::Choice for Fallback {
    const CHOICES: &'static [(&'static str, Self)] =
        &[("none", Fallback::None), ("node", Fallback::Node)];
}

impl Fallback {
    pub fn name(self) -> &'static str {
        match self {
            Fallback::None => "none",
            Fallback::Node => "node",
        }
    }
}

/// `--fallback`.
pub(crate) static FALLBACK: FlagSpec = FlagSpec {
    long: "fallback",
    env: "WICP_FALLBACK",
    takes: Takes::One,
    value: "none|node",
    default: "",
    help: "What a pod whose service account did not opt in (or a static pod, \
        with no token) gets from aws, azure or gcp: `none` refuses it; \
        `node` pulls with the node's identity (instance profile, kubelet \
        identity, node service account), as the stock cloud plugins do. A \
        service account that opted in never falls back. Default: none.",
};

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// [`FALLBACK`].
    fallback: Option<Fallback>,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] = &[&FALLBACK];

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            fallback: given.choice(&FALLBACK)?,
        })
    }
}

impl Options {
    /// `--fallback`, `none` unless given (not a clap default: see
    /// `options::Options`).
    pub fn fallback(&self) -> Fallback {
        self.fallback.unwrap_or(Fallback::None)
    }
}

/// Whose identity a plan pulls with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Whose {
    /// The service account's own (the default, and always for one that
    /// opted in).
    ServiceAccount,
    /// The node's, and why: for logs and `explain`.
    Node { why: String },
}

impl Whose {
    pub fn is_node(&self) -> bool {
        matches!(self, Whose::Node { .. })
    }
}

/// The one rule. `opted_in` is the exchanger's reading of the request's
/// annotations (and token), `opt_in` says in words what would count, for
/// the reason.
pub fn whose(
    fallback: Fallback,
    token: Option<&ServiceAccountToken>,
    opted_in: bool,
    opt_in: &str,
) -> Whose {
    match (fallback, token) {
        (Fallback::None, _) => Whose::ServiceAccount,
        (Fallback::Node, None) => Whose::Node {
            why: "the request carries no service account token (a static or mirror pod, under requireServiceAccount: false), and --fallback is node".into(),
        },
        (Fallback::Node, Some(token)) if !opted_in => Whose::Node {
            why: format!(
                "service account {} did not opt in ({opt_in}), and --fallback is node",
                token.service_account()
            ),
        },
        (Fallback::Node, Some(_)) => Whose::ServiceAccount,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wicp_base::secret::Secret;

    fn token() -> ServiceAccountToken {
        let claims = r#"{"aud":["a"],"exp":4102444800,"iat":1000,"iss":"https://i","sub":"system:serviceaccount:team:api",
            "kubernetes.io":{"namespace":"team","serviceaccount":{"name":"api","uid":"u"}}}"#;
        let jwt = wicp_kubelet::request::token::jwt(r#"{"alg":"RS256"}"#, claims);
        ServiceAccountToken::decode(Secret::new(jwt), 2000).unwrap()
    }

    #[test]
    fn opted_in_never_falls_back_and_none_never_uses_the_node() {
        let t = token();
        assert_eq!(
            whose(Fallback::Node, Some(&t), true, "x"),
            Whose::ServiceAccount
        );
        for opted_in in [true, false] {
            assert_eq!(
                whose(Fallback::None, Some(&t), opted_in, "x"),
                Whose::ServiceAccount
            );
            assert_eq!(
                whose(Fallback::None, None, opted_in, "x"),
                Whose::ServiceAccount
            );
        }
        let Whose::Node { why } = whose(Fallback::Node, Some(&t), false, "annotation k") else {
            panic!("an un-annotated service account gets the node under node");
        };
        assert!(
            why.contains("team/api did not opt in (annotation k)"),
            "{why}"
        );
        assert!(whose(Fallback::Node, None, true, "x").is_node());
    }
}
