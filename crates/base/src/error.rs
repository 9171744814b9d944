//! The one error type of the plugin.
//!
//! Every failure ends as a single line on stderr, which the kubelet copies
//! into its own log (`error execing credential provider plugin ...: exit
//! status 1: <stderr>`). So an error carries two parts written for the person
//! reading that log: what failed, and what to do about it. Messages are built
//! from values we checked ourselves or from sanitised upstream error codes,
//! never from secrets.

use std::fmt;

use crate::flags::FlagSpec;

/// Declares the kinds once: each kind's variant, its stable name (which is
/// also the name of its constructor, `Error::upstream`), and its usual fix.
/// [`Kind::ALL`], [`Kind::name`], [`Kind::usual_fix`] and the constructors
/// are all made from that one list, so none can miss a kind.
macro_rules! kinds {
    ($( $(#[$meta:meta])* $variant:ident => $name:ident, $fix:literal; )+) => {
        /// What kind of thing failed: whose move it is to fix it. Tests and
        /// callers match on this, never on the message's words.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Kind {
            $( $(#[$meta])* $variant, )+
        }

        impl Kind {
            /// Every kind, for tables and tests that must cover them all.
            pub const ALL: [Kind; [$(stringify!($name)),+].len()] = [$(Kind::$variant),+];

            /// The kind's stable name: a metric label value, a JSON log
            /// field, an audit record's `error_kind`. Renaming one breaks
            /// dashboards.
            pub fn name(self) -> &'static str {
                match self {
                    $(Kind::$variant => stringify!($name),)+
                }
            }

            /// What usually fixes failures of this kind, for `node doctor`,
            /// which sees counts and kinds rather than each failure's own fix.
            pub fn usual_fix(self) -> &'static str {
                match self {
                    $(Kind::$variant => $fix,)+
                }
            }
        }

        impl Error {
            $(
                #[doc = concat!("An error of kind [`Kind::", stringify!($variant), "`] saying what failed.")]
                pub fn $name(what: impl Into<String>) -> Self {
                    Self::with_kind(Kind::$variant, what)
                }
            )+
        }
    };
}

kinds! {
    /// The kubelet's request: stdin, its JSON, the image reference.
    Request => request,
        "the kubelet sent a request the plugin cannot read: check the kubelet version and the provider entry's apiVersion";
    /// The service account token: missing, malformed, expired, or minted
    /// for another audience.
    Token => token,
        "set tokenAttributes in the provider entry and check serviceAccountTokenAudience against --audience";
    /// A service account annotation: missing, empty or malformed.
    Annotation => annotation,
        "fix the service account's annotation named in the error (the audit log has the service account)";
    /// The image's registry is not one this provider may serve.
    Registry => registry,
        "narrow the entry's matchImages to the registries the provider serves, or widen --registry";
    /// The admin's configuration: flags, environment, files given to a
    /// command.
    Config => config,
        "run `wi-credential-provider check-config` on the kubelet's credential-provider config";
    /// An identity service or registry answered, and refused or answered
    /// something unusable.
    Upstream => upstream,
        "the identity service or registry refused: check the trust (role, federated credential, binding) named in the audit log's error";
    /// A call could not be made or finished: connection, TLS, proxy,
    /// time-out, the deadline.
    Network => network,
        "check that the node reaches the endpoint (DNS, firewall, proxy, --ca-file)";
    /// The on-disk credential cache.
    Cache => cache,
        "check --cache-dir: owned by the plugin's user, mode 0700, on a writable file system";
    /// A bug in the plugin.
    Internal => internal,
        "report it as a bug, with the audit log's line";
}

/// What an admin sets that an error may be about: one of our flags, or an
/// environment variable read on its own (`SSL_CERT_FILE`, `HTTPS_PROXY`,
/// `AWS_ENDPOINT_URL_STS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Flag(&'static FlagSpec),
    Variable(&'static str),
}

impl From<&'static FlagSpec> for Setting {
    fn from(flag: &'static FlagSpec) -> Self {
        Setting::Flag(flag)
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Setting::Flag(flag) => flag.fmt(f),
            Setting::Variable(name) => f.write_str(name),
        }
    }
}

/// A fact about a failure besides the words of its message: which flag,
/// which upstream and what it answered, as typed values. The message says
/// the same in words; a test, or a query over the JSON log (its `facts`
/// object, where each is written as a string under [`Fact::name`]),
/// matches these instead, so the wording stays free to improve. The names
/// are part of the JSON log: renaming one breaks queries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fact {
    /// The setting an admin got wrong: our flag (written as on the
    /// command line, `--gcp-sts-endpoint`) or an environment variable
    /// (`HTTPS_PROXY`, `SSL_CERT_FILE`). The JSON log's `flag`.
    Flag(Setting),
    /// What is wrong with the flag's value, in words.
    Problem(String),
    /// The upstream that answered, by a stable name (`Google STS`,
    /// `Entra ID`).
    Service(&'static str),
    /// The service account annotation at fault, by key
    /// (`eks.amazonaws.com/role-arn`): the one that is malformed, or the
    /// first of those that would name the identity when none is set.
    Annotation(String),
    /// The service account token's claim at fault (`aud`, `exp`, `sub`,
    /// `kubernetes.io.namespace`).
    Claim(String),
    /// The registry refused on an error of [`Kind::Registry`], as the
    /// image names it (with a port when it has one; for a mirrored image,
    /// the mirror's).
    Registry(String),
    /// The HTTP status it answered with.
    Status(u16),
    /// What its body looked like: size and kind, never its text
    /// ([`crate::redact::body_shape`]).
    BodyShape(String),
}

impl Fact {
    /// The fact's name in the JSON log's `facts` object.
    pub fn name(&self) -> &'static str {
        match self {
            Fact::Flag(_) => "flag",
            Fact::Problem(_) => "problem",
            Fact::Service(_) => "service",
            Fact::Annotation(_) => "annotation",
            Fact::Claim(_) => "claim",
            Fact::Registry(_) => "registry",
            Fact::Status(_) => "status",
            Fact::BodyShape(_) => "body_shape",
        }
    }

    /// The fact's value as the JSON log writes it: a string (`"403"`,
    /// `"--ca-file"`).
    pub fn value(&self) -> std::borrow::Cow<'_, str> {
        use std::borrow::Cow;
        match self {
            Fact::Flag(setting) => Cow::Owned(setting.to_string()),
            Fact::Service(service) => Cow::Borrowed(service),
            Fact::Status(status) => Cow::Owned(status.to_string()),
            Fact::Problem(text)
            | Fact::Annotation(text)
            | Fact::Claim(text)
            | Fact::Registry(text)
            | Fact::BodyShape(text) => Cow::Borrowed(text),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: Kind,
    what: String,
    fix: Option<String>,
    facts: Vec<Fact>,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` saying what failed.
    pub(crate) fn with_kind(kind: Kind, what: impl Into<String>) -> Self {
        Error {
            kind,
            what: what.into(),
            fix: None,
            facts: Vec::new(),
        }
    }

    /// Records `fact` (replacing an earlier fact of its name). Its value
    /// must hold no secret: it is logged as it is, like the message.
    pub fn with(mut self, fact: Fact) -> Self {
        match self.facts.iter_mut().find(|f| f.name() == fact.name()) {
            Some(old) => *old = fact,
            None => self.facts.push(fact),
        }
        self
    }

    /// A setting an admin got wrong: a [`Kind::Config`] error saying
    /// "`flag` `problem`" (`--jfrog-url is not set`), with both as facts.
    pub fn flag(flag: impl Into<Setting>, problem: impl Into<String>) -> Self {
        let (flag, problem) = (flag.into(), problem.into());
        Error::config(format!("{flag} {problem}"))
            .with(Fact::Flag(flag))
            .with(Fact::Problem(problem))
    }

    /// A service account annotation set wrongly, or missing: a
    /// [`Kind::Annotation`] error with the annotation's `key` as a fact.
    pub fn annotation_key(key: &str, what: impl Into<String>) -> Self {
        Error::annotation(what).with(Fact::Annotation(key.to_string()))
    }

    /// Records `registry` as the one refused, when this is an error of
    /// [`Kind::Registry`] that does not name one yet. Routing and planning
    /// call it for every error they return, so each provider's refusal
    /// carries the fact without saying so itself.
    pub fn refusing(self, registry: &str) -> Self {
        if self.kind == Kind::Registry && self.refused_registry().is_none() {
            self.with(Fact::Registry(registry.to_string()))
        } else {
            self
        }
    }

    /// The facts of an upstream's answer: who answered (`service`, in
    /// words), its status, and the shape of its body (never its text).
    pub fn answered(self, service: &'static str, status: u16, body: &[u8]) -> Self {
        self.with(Fact::Service(service))
            .with(Fact::Status(status))
            .with(Fact::BodyShape(crate::redact::body_shape(body)))
    }

    /// Every fact recorded, in the order they were.
    pub fn facts(&self) -> &[Fact] {
        &self.facts
    }

    /// The setting at fault, when the error records one.
    pub fn flagged(&self) -> Option<Setting> {
        self.facts.iter().find_map(|f| match f {
            Fact::Flag(setting) => Some(*setting),
            _ => None,
        })
    }

    /// The upstream's HTTP status, when the error records one.
    pub fn status(&self) -> Option<u16> {
        self.facts.iter().find_map(|f| match f {
            Fact::Status(status) => Some(*status),
            _ => None,
        })
    }

    /// The upstream that answered, when the error records one.
    pub fn service(&self) -> Option<&'static str> {
        self.facts.iter().find_map(|f| match f {
            Fact::Service(service) => Some(*service),
            _ => None,
        })
    }

    /// The registry refused, when the error records one.
    pub fn refused_registry(&self) -> Option<&str> {
        self.text(|f| match f {
            Fact::Registry(text) => Some(text),
            _ => None,
        })
    }

    /// What is wrong with the flag or variable the error names
    /// (`is not set`), when it records one.
    pub fn problem(&self) -> Option<&str> {
        self.text(|f| match f {
            Fact::Problem(text) => Some(text),
            _ => None,
        })
    }

    /// The service account annotation the error is about.
    pub fn about_annotation(&self) -> Option<&str> {
        self.text(|f| match f {
            Fact::Annotation(text) => Some(text),
            _ => None,
        })
    }

    /// The shape of an upstream body that could not be read.
    pub fn body_shape(&self) -> Option<&str> {
        self.text(|f| match f {
            Fact::BodyShape(text) => Some(text),
            _ => None,
        })
    }

    /// The first fact whose text `pick` takes.
    fn text(&self, pick: fn(&Fact) -> Option<&String>) -> Option<&str> {
        self.facts.iter().find_map(pick).map(String::as_str)
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Adds the remedy: one sentence telling the admin what to change.
    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    /// Puts context in front of the message, keeping the remedy.
    pub fn context(mut self, context: impl fmt::Display) -> Self {
        self.what = format!("{context}: {}", self.what);
        self
    }

    pub fn what(&self) -> &str {
        &self.what
    }

    pub fn remedy(&self) -> Option<&str> {
        self.fix.as_deref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)?;
        if let Some(fix) = &self.fix {
            write!(f, "; fix: {fix}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// Quotes a value we received from outside for an error message: escaped
/// (no control characters reach the kubelet's log) and cut to a length that
/// keeps the message one readable line.
pub fn quote(value: &str) -> String {
    const MAX: usize = 120;
    let mut shown: String = value.chars().take(MAX).collect();
    if value.chars().count() > MAX {
        shown.push('…');
    }
    format!("{shown:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_joins_what_and_fix() {
        let e = Error::registry("registry \"x\" is not allowed")
            .fix("add --registry x")
            .context("passthrough");
        assert_eq!(
            e.to_string(),
            "passthrough: registry \"x\" is not allowed; fix: add --registry x"
        );
        assert_eq!(e.kind(), Kind::Registry);
    }

    #[test]
    fn facts_are_kept_apart_from_the_words() {
        const AT: FlagSpec = FlagSpec {
            long: "x-endpoint",
            env: "WICP_X_ENDPOINT",
            takes: crate::flags::Takes::One,
            value: "URL",
            default: "",
            help: "",
        };
        let e = Error::upstream("Google STS refused")
            .answered("Google STS", 403, b"{\"error\":\"x\"}")
            .with(Fact::Status(401))
            .context("gcp");
        assert_eq!(e.service(), Some("Google STS"));
        assert_eq!(e.status(), Some(401), "a later value replaces");
        assert_eq!(
            e.body_shape(),
            Some("13 bytes, JSON without the expected fields")
        );
        assert_eq!(e.flagged(), None);
        assert_eq!(e.facts().len(), 3);
        assert_eq!(
            e.to_string(),
            "gcp: Google STS refused",
            "facts are not rendered"
        );
        let values: Vec<(&str, String)> = e
            .facts()
            .iter()
            .map(|f| (f.name(), f.value().into_owned()))
            .collect();
        assert_eq!(
            values[1],
            ("status", "401".to_string()),
            "JSON writes strings"
        );

        static SPEC: FlagSpec = AT;
        let flag = Error::flag(&SPEC, "is not set");
        assert_eq!(flag.to_string(), "--x-endpoint is not set");
        assert_eq!(flag.flagged(), Some(Setting::Flag(&SPEC)));
        assert_eq!(flag.problem(), Some("is not set"));
        assert_eq!(flag.facts()[0].value(), "--x-endpoint");
        let variable = Error::flag(Setting::Variable("HTTPS_PROXY"), "is not a URL");
        assert_eq!(variable.facts()[0].name(), "flag");
        assert_eq!(variable.facts()[0].value(), "HTTPS_PROXY");
    }

    #[test]
    fn only_a_registry_refusal_records_the_registry() {
        let refused = Error::registry("not served").refusing("a.test:5000");
        assert_eq!(refused.refused_registry(), Some("a.test:5000"));
        let kept = refused.refusing("b.test");
        assert_eq!(
            kept.refused_registry(),
            Some("a.test:5000"),
            "the first stays"
        );
        let other = Error::token("expired").refusing("a.test");
        assert_eq!(other.refused_registry(), None);
    }

    #[test]
    fn quote_escapes_and_cuts() {
        assert_eq!(quote("a\nb"), "\"a\\nb\"");
        let long = "x".repeat(500);
        assert!(quote(&long).chars().count() < 130);
    }
}
