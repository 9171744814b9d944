//! Quay robot account federation: the service account token for a robot's
//! short-lived registry password.
//!
//! Wire format, from Quay's source (quay/quay `endpoints/oauth/
//! robot_identity_federation.py`, `auth/decorators.py`
//! `process_federated_auth`, `util/security/federated_robot_auth.py`;
//! feature since Quay 3.13):
//!
//! ```text
//! GET {--quay-url}/oauth2/federation/robot/token
//! Authorization: Basic base64("<org>+<robot>:<service account JWT>")
//! → 200 {"token": "<Quay-signed JWT>"}
//! → 401 {"error": "<reason>"}            (e.g. "Invalid robot", "missing auth")
//! ```
//!
//! Red Hat's API reference shows `Authorization: Bearer` for this endpoint;
//! the code parses Basic only, so we follow the code.
//!
//! Quay verifies the token through OIDC discovery at its issuer against the
//! robot's federation entries (issuer and subject). The registry then
//! accepts the robot name as username and the returned token as password.
//! The token's lifetime is `TMP_ROBOT_TOKEN_VALIDITY_LIFETIME_S` (3600 s,
//! `data/model/user.py`); we read its `exp` and fall back to that constant.
//! Quay does not tie it to the service account token's expiry.
//!
//! The robot comes from an annotation, and its organisation must be one the
//! admin allowed with `--quay-organization`: a tenant can only ask for a
//! robot of an organisation the node is meant to pull from, and Quay checks
//! that the robot trusts this service account.

use std::collections::BTreeSet;

use std::sync::Arc;

use crate::Input;
use crate::allowlist::{self, Guarded};
use crate::token_service::{self, Pattern, Service};
use crate::{Context, Credential, Plan, Provider};
use wicp_base::duration;
use wicp_base::error::{Error, Result, quote};
use wicp_base::flags::{FlagSpec, Flags, Given, Takes, Usage};
use wicp_kubelet::request::token::ServiceAccountToken;
use wicp_net as net;

pub const TOKEN_PATH: &str = "/oauth2/federation/robot/token";
pub(crate) const DEFAULT_URL: &str = "https://quay.io";

/// The annotations naming the robot, in order: ours, then
/// sabre1041/quay-credential-provider's. That plugin's other keys
/// (`quay.io/host-override`, `quay.io/plain-http`, ...) move the token to
/// another host or scheme and are never read.
const ROBOT_ANNOTATIONS: [&str; 2] = [
    "wi-credential-provider.io/quay-robot",
    "quay.io/federated-robot-account",
];

/// Quay's temporary robot token lifetime, assumed when the token carries no
/// readable `exp`.
pub(crate) const DEFAULT_LIFETIME_SECS: i64 = 3600;

/// `<org>+<robot>`: an organisation and a robot short name, each as
/// Quay's `validate_username` checks names (`util/validation.py`,
/// `VALID_USERNAME_REGEX`: lowercase letters and digits, separated by
/// single `.`, `_` or `-`); the short name is also 2 to 255 characters
/// ([`ROBOT_SHORT_NAME`]), as Quay's robot creation requires.
static ROBOT: Pattern = Pattern::new(
    "<organisation>+<robot>, e.g. acme+ci-bot, lowercase",
    || {
        regex_lite::Regex::new(r"^([a-z0-9]+(?:[._-][a-z0-9]+)*)\+([a-z0-9]+(?:[._-][a-z0-9]+)*)$")
            .ok()
    },
);

/// The length Quay allows a robot short name (`validate_username`'s
/// `len(username) >= 2 and len(username) <= 255`).
const ROBOT_SHORT_NAME: std::ops::RangeInclusive<usize> = 2..=255;

static ORGANISATION: Pattern = Pattern::new(
    "lowercase letters and digits, separated by single '.', '_' or '-'",
    || regex_lite::Regex::new(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$").ok(),
);

/// `--quay-organization`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static QUAY_ORGANIZATION: FlagSpec = FlagSpec {
    long: "quay-organization",
    env: "WICP_QUAY_ORGANIZATION",
    takes: Takes::List,
    value: "ORG",
    default: "",
    help: "An organisation whose robots service accounts may name (repeatable, \
        or comma-separated). A robot of any other organisation is refused \
        before the token leaves the node.",
};

/// `--quay-url`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static QUAY_URL: FlagSpec = FlagSpec {
    long: "quay-url",
    env: "WICP_QUAY_URL",
    takes: Takes::One,
    value: "URL",
    default: DEFAULT_URL,
    help: "The Quay server's base URL; the federation call goes to its \
        /oauth2/federation/robot/token, and nowhere else.",
};

#[derive(Clone, Debug)]
pub struct Options {
    /// [`QUAY_URL`].
    pub quay_url: String,

    /// [`QUAY_ORGANIZATION`].
    pub quay_organization: Vec<String>,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] = &[&QUAY_URL, &QUAY_ORGANIZATION];
    const HEADING: &'static str = "Quay";

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            quay_url: given.text(&QUAY_URL)?.unwrap_or_default(),
            quay_organization: given.list(&QUAY_ORGANIZATION)?,
        })
    }
}

pub static PROVIDER: Provider = allowlist::declare::<Quay>(allowlist::About {
    name: "quay",
    summary: "Quay robot account federation: a robot's token for the --registry hosts",
    audience: "the audience the robot's federation trusts (--audience)",
    annotations: &ROBOT_ANNOTATIONS,
});

pub struct Quay {
    service: Service,
    organisations: BTreeSet<String>,
}

impl Guarded for Quay {
    type Options = Options;
    const GUARDS: &'static str = "the Quay robot token";

    fn new(options: &Options, net: Arc<net::Settings>) -> Result<Self> {
        let mut organisations = BTreeSet::new();
        for org in &options.quay_organization {
            let org = org.trim();
            if !ORGANISATION.matches(org) {
                return Err(Error::flag(
                    &QUAY_ORGANIZATION,
                    format!(
                        "{} is not a Quay organisation name ({})",
                        quote(org),
                        ORGANISATION.form
                    ),
                )
                .fix("write the organisation as Quay shows it, e.g. acme"));
            }
            organisations.insert(org.to_string());
        }
        if organisations.is_empty() {
            return Err(Error::flag(&QUAY_ORGANIZATION, "is not set, so no robot may be used")
                .fix("pass --quay-organization ORG (WICP_QUAY_ORGANIZATION) for each organisation whose robots service accounts may name"));
        }
        Ok(Quay {
            service: Service::at(
                "Quay",
                &QUAY_URL,
                &options.quay_url,
                TOKEN_PATH,
                DEFAULT_LIFETIME_SECS,
                net,
            )?,
            organisations,
        })
    }

    fn plan<'a>(&'a self, cx: &Context<'a>, token: &'a ServiceAccountToken) -> Result<Plan<'a>> {
        let robot = self.robot(cx)?;
        let identity = [Input::identity("robot", robot.clone())];
        let claims = token.claims();
        let (issuer, subject) = (claims.issuer.clone(), claims.subject.clone());
        Ok(token_service::plan(
            &PROVIDER,
            cx,
            &self.service,
            identity,
            move |deadline| {
                let reply =
                    token_service::get_basic(&self.service, &robot, token.secret(), deadline)?;
                self.interpret(&reply, duration::unix_now(), &robot, &issuer, &subject)
            },
        ))
    }
}

impl Quay {
    /// The robot the service account names, checked against the allowed
    /// organisations.
    fn robot(&self, cx: &Context<'_>) -> Result<String> {
        let (key, robot) = token_service::required_identity(
            cx,
            &ROBOT_ANNOTATIONS,
            &ROBOT,
            "Quay robot account",
            "<organisation>+<robot>",
        )?;
        let (org, short) = robot.split_once('+').unwrap_or_default();
        if !ROBOT_SHORT_NAME.contains(&short.len()) {
            return Err(Error::annotation_key(key, format!(
                "annotation {key} names robot {robot}, whose short name {short} is {} characters; Quay's are 2 to 255",
                short.len()
            ))
            .fix("name the robot as Quay shows it (<organisation>+<robot>)"));
        }
        if !self.organisations.contains(org) {
            return Err(Error::annotation_key(key, format!(
                "annotation {key} names robot {robot} of organisation {org}, which is not allowed (allowed: {})",
                self.organisations.iter().cloned().collect::<Vec<_>>().join(", ")
            ))
            .fix("name a robot of an allowed organisation, or have the admin add --quay-organization for it"));
        }
        Ok(robot)
    }

    /// Reads Quay's answer, seen at `now`.
    pub fn interpret(
        &self,
        reply: &wicp_net::http::Reply,
        now: i64,
        robot: &str,
        issuer: &str,
        subject: &str,
    ) -> Result<Credential> {
        token_service::issued(
            &self.service,
            reply,
            now,
            "token",
            robot.to_string(),
            |status| {
                match status {
                    401 | 403 => format!(
                        "Quay did not accept the token for robot {robot}: check that the robot exists and that its federation \
                         (Robot accounts > Set robot federation) has issuer {issuer} and subject {subject}, and that Quay can \
                         reach the issuer's discovery document"
                    ),
                    404 => "Quay has no robot federation endpoint there: check --quay-url and that Quay is 3.13 or later".to_string(),
                    _ => format!("check the robot name {robot} and --quay-url"),
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Pull;
    use wicp_net::http::reply;

    fn quay() -> Quay {
        Quay::new(
            &Options {
                quay_url: DEFAULT_URL.into(),
                quay_organization: vec!["acme".into(), "acme-labs".into()],
            },
            Arc::default(),
        )
        .unwrap()
    }

    fn robot(annotations: &[(&str, &str)]) -> Result<String> {
        quay().robot(&Pull::new("quay.io/acme/app", annotations).context(None))
    }

    #[test]
    fn robots_are_anchored_and_allowed() {
        let [ours, theirs] = ROBOT_ANNOTATIONS;
        assert_eq!(robot(&[(ours, "acme+puller")]).unwrap(), "acme+puller");
        assert_eq!(
            robot(&[(theirs, "acme-labs+ci_bot")]).unwrap(),
            "acme-labs+ci_bot"
        );
        // Names Quay's validate_username accepts (VALID_USERNAME_REGEX).
        for valid in [
            "acme+ci-bot",
            "acme+build.bot",
            "acme+2fa-puller",
            "acme+1bot",
        ] {
            assert_eq!(robot(&[(ours, valid)]).unwrap(), valid);
        }
        let long = format!("acme+{}", "a".repeat(255));
        assert_eq!(robot(&[(ours, &long)]).unwrap(), long);
        for length in [1, 256] {
            let name = format!("acme+{}", "a".repeat(length));
            let e = robot(&[(ours, &name)]).unwrap_err().to_string();
            assert!(e.contains("2 to 255"), "{e}");
        }
        // Ours first.
        assert_eq!(
            robot(&[(ours, "acme+a1"), (theirs, "acme+b2")]).unwrap(),
            "acme+a1"
        );
        // A malformed value of ours is an error, not a reason to use theirs.
        assert!(robot(&[(ours, "acme"), (theirs, "acme+b2")]).is_err());
        for bad in [
            "acme+",
            "+puller",
            "Acme+puller",
            "acme+puller+x",
            "acme+puller\n",
            "acme+pull er",
            "acme+../x",
            "acme+x@evil.example",
            "acme+x:y",
            "acme+x/y",
            "acme+x?y",
            "acme+x#y",
            "acme+x%2fy",
            "acme+ci--bot",
            "acme+-bot",
            "acme+bot.",
        ] {
            let e = robot(&[(ours, bad)]).unwrap_err().to_string();
            assert!(e.contains("not a Quay robot account"), "{bad:?}: {e}");
        }
        assert_eq!(
            robot(&[(ours, "a/b")]).unwrap_err().kind(),
            wicp_base::error::Kind::Annotation
        );
        assert_eq!(
            robot(&[(ours, "other+puller")]).unwrap_err().kind(),
            wicp_base::error::Kind::Annotation
        );
        let e = robot(&[(ours, "other+puller")]).unwrap_err().to_string();
        assert!(
            e.contains("organisation other, which is not allowed (allowed: acme, acme-labs)"),
            "{e}"
        );
        let e = robot(&[]).unwrap_err().to_string();
        assert!(e.contains("no wi-credential-provider.io/quay-robot"), "{e}");
    }

    #[test]
    fn organisations_are_required_and_checked() {
        let options = |orgs: &[&str]| Options {
            quay_url: DEFAULT_URL.into(),
            quay_organization: orgs.iter().map(|o| o.to_string()).collect(),
        };
        let flag = |orgs: &[&str]| {
            let e = Quay::new(&options(orgs), Arc::default()).err().unwrap();
            e.flagged()
        };
        for refused in [&[][..], &["Acme"], &["acme/x"]] {
            assert_eq!(flag(refused), Some((&QUAY_ORGANIZATION).into()));
        }
        assert!(Quay::new(&options(&["acme", "b.c"]), Arc::default()).is_ok());
    }

    #[test]
    fn reads_the_answer() {
        let jwt = wicp_kubelet::request::token::jwt(
            r#"{"alg":"RS256"}"#,
            r#"{"exp":4600,"sub":"acme+puller"}"#,
        );
        let q = quay();
        let c = q
            .interpret(
                &reply(200, &format!(r#"{{"token":"{jwt}"}}"#)),
                1000,
                "acme+puller",
                "i",
                "s",
            )
            .unwrap();
        assert_eq!((c.username.as_str(), c.expires_at), ("acme+puller", 4600));
        let e = q
            .interpret(
                &reply(401, r#"{"error":"Invalid robot"}"#),
                0,
                "acme+puller",
                "https://oidc.cluster.test",
                "system:serviceaccount:a:b",
            )
            .unwrap_err();
        assert_eq!(
            e.what(),
            "Quay refused the token exchange at https://quay.io/oauth2/federation/robot/token: HTTP 401: \"Invalid robot\""
        );
        assert!(
            e.remedy()
                .unwrap()
                .contains("subject system:serviceaccount:a:b"),
            "{e}"
        );
        for body in ["{}", r#"{"token":""}"#, "nope"] {
            assert!(
                q.interpret(&reply(200, body), 0, "acme+puller", "i", "s")
                    .is_err(),
                "{body}"
            );
        }
    }
}
