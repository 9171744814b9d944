//! Cloudsmith OpenID Connect: the service account token for a Cloudsmith
//! service account's short-lived API token, pulled with the username
//! `token`.
//!
//! Wire format, from Cloudsmith's docs ("OpenID Connect",
//! <https://help.cloudsmith.io/docs/openid-connect>, and the API reference
//! "Openid Create", <https://docs.cloudsmith.com/api/openid/create>):
//!
//! ```text
//! POST {--cloudsmith-url}/openid/{--cloudsmith-org}/
//! Content-Type: application/json          (no Authorization header)
//! {"oidc_token": "<service account JWT>", "service_slug": "<annotation>"}
//! → 200 or 201 {"token": "<Cloudsmith JWT>"}
//! → 400/401/422 {"detail": "..."}         (deliberately generic)
//! ```
//!
//! The API reference names the path `/v2/openid/{owner}`; the OIDC guide,
//! Cloudsmith's own CLI and its Kubernetes plugin use `/openid/{org}/`,
//! which is what we call (unverified which of the two is current; both are
//! documented). The pull credential is username `token` and the returned
//! JWT as password, as Cloudsmith's CLI Docker credential helper does.
//!
//! Lifetime: the guide says "around 90 minutes" in one place and "2 hours"
//! in another, and the response has no expiry field, so we read the JWT's
//! `exp`; a token without one is assumed to live an hour, under both.
//!
//! The organisation comes from a flag, the service account slug from an
//! annotation. Cloudsmith's own plugin also lets annotations override the
//! organisation and the API host (`cloudsmith.io/org-slug`,
//! `cloudsmith.io/api-host`): those move the token and are never read.

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

pub const DEFAULT_URL: &str = "https://api.cloudsmith.io";

/// The username Cloudsmith expects with an API token as the password.
pub const USERNAME: &str = "token";

/// The annotations naming the Cloudsmith service account, in order: ours,
/// then cloudsmith-kubernetes-credential-provider's.
const SERVICE_ANNOTATIONS: [&str; 2] = [
    "wi-credential-provider.io/cloudsmith-service",
    "cloudsmith.io/service-slug",
];

/// Assumed when the returned token carries no readable `exp`: below both
/// lifetimes Cloudsmith documents.
pub(crate) const DEFAULT_LIFETIME_SECS: i64 = 3600;

/// A Cloudsmith slug (organisation or service account): letters, digits,
/// `-` and `_`, starting with a letter or digit. It becomes a URL path
/// segment (the organisation) or a JSON string (the service), so nothing
/// else is let through.
static SLUG: Pattern = Pattern::new(
    "a slug: letters, digits, '-' or '_', starting with a letter or digit, at most 128",
    || regex_lite::Regex::new(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$").ok(),
);

/// `--cloudsmith-org`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static CLOUDSMITH_ORG: FlagSpec = FlagSpec {
    long: "cloudsmith-org",
    env: "WICP_CLOUDSMITH_ORG",
    takes: Takes::One,
    value: "SLUG",
    default: "",
    help: "The Cloudsmith organisation (its slug) whose OpenID Connect provider \
        trusts the cluster's service account issuer.",
};

/// `--cloudsmith-url`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static CLOUDSMITH_URL: FlagSpec = FlagSpec {
    long: "cloudsmith-url",
    env: "WICP_CLOUDSMITH_URL",
    takes: Takes::One,
    value: "URL",
    default: DEFAULT_URL,
    help: "The Cloudsmith API base URL; the exchange goes to its /openid/ORG/, \
        and nowhere else.",
};

#[derive(Clone, Debug)]
pub struct Options {
    /// [`CLOUDSMITH_URL`].
    pub cloudsmith_url: String,

    /// [`CLOUDSMITH_ORG`].
    pub cloudsmith_org: Option<String>,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] = &[&CLOUDSMITH_URL, &CLOUDSMITH_ORG];
    const HEADING: &'static str = "Cloudsmith";

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            cloudsmith_url: given.text(&CLOUDSMITH_URL)?.unwrap_or_default(),
            cloudsmith_org: given.text(&CLOUDSMITH_ORG)?,
        })
    }
}

pub static PROVIDER: Provider = allowlist::declare::<Cloudsmith>(allowlist::About {
    name: "cloudsmith",
    summary: "Cloudsmith OpenID Connect: a service account's API token for the --registry hosts",
    audience: "the audience the Cloudsmith OIDC provider's claims require (--audience; Cloudsmith suggests https://api.cloudsmith.io)",
    annotations: &SERVICE_ANNOTATIONS,
});

pub struct Cloudsmith {
    service: Service,
    org: String,
}

impl Guarded for Cloudsmith {
    type Options = Options;
    const GUARDS: &'static str = "the Cloudsmith token";

    fn new(options: &Options, net: Arc<net::Settings>) -> Result<Self> {
        let org = options
            .cloudsmith_org
            .as_deref()
            .map(str::trim)
            .ok_or_else(|| {
                Error::flag(&CLOUDSMITH_ORG, "is not set")
                    .fix("pass --cloudsmith-org (WICP_CLOUDSMITH_ORG) with the organisation's slug")
            })?;
        if !SLUG.matches(org) {
            return Err(Error::flag(
                &CLOUDSMITH_ORG,
                format!(
                    "{} is not a Cloudsmith organisation slug ({})",
                    quote(org),
                    SLUG.form
                ),
            )
            .fix("write the slug as it appears in cloudsmith.io/orgs/<slug>/"));
        }
        Ok(Cloudsmith {
            service: Service::at(
                "Cloudsmith",
                &CLOUDSMITH_URL,
                &options.cloudsmith_url,
                &format!("/openid/{org}/"),
                DEFAULT_LIFETIME_SECS,
                net,
            )?,
            org: org.to_string(),
        })
    }

    fn plan<'a>(&'a self, cx: &Context<'a>, token: &'a ServiceAccountToken) -> Result<Plan<'a>> {
        let slug = self.service_slug(cx)?;
        let identity = [
            Input::identity("organisation", self.org.clone()),
            Input::identity("service_slug", slug.clone()),
        ];
        let issuer = token.claims().issuer.clone();
        Ok(token_service::plan(
            &PROVIDER,
            cx,
            &self.service,
            identity,
            move |deadline| {
                let body = serde_json::json!({
                    "oidc_token": token.secret().expose(),
                    "service_slug": slug,
                });
                let reply = token_service::post_json(&self.service, &body, deadline)?;
                self.interpret(&reply, duration::unix_now(), &slug, &issuer)
            },
        ))
    }
}

impl Cloudsmith {
    fn service_slug(&self, cx: &Context<'_>) -> Result<String> {
        let value = format!("<service account slug> of organisation {}", self.org);
        let what = "Cloudsmith service account slug";
        token_service::required_identity(cx, &SERVICE_ANNOTATIONS, &SLUG, what, &value)
            .map(|(_, slug)| slug)
    }

    /// Reads Cloudsmith's answer, seen at `now`.
    pub fn interpret(
        &self,
        reply: &wicp_net::http::Reply,
        now: i64,
        slug: &str,
        issuer: &str,
    ) -> Result<Credential> {
        token_service::issued(
            &self.service,
            reply,
            now,
            "token",
            USERNAME.to_string(),
            |status| {
                match status {
                    401 | 403 => format!(
                        "Cloudsmith did not accept the token (its message is deliberately generic): check that organisation {} \
                         has an OpenID Connect provider with URL {issuer}, that its required claims match this token, and \
                         that service account {slug} is one of that provider's service accounts",
                        self.org
                    ),
                    404 => "Cloudsmith has no OpenID endpoint for this organisation: check --cloudsmith-org and --cloudsmith-url, \
                            and that OpenID Connect is enabled for the organisation".to_string(),
                    _ => format!("check the service account slug {slug} and --cloudsmith-org {}", self.org),
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

    fn cloudsmith() -> Cloudsmith {
        Cloudsmith::new(
            &Options {
                cloudsmith_url: DEFAULT_URL.into(),
                cloudsmith_org: Some("acme".into()),
            },
            Arc::default(),
        )
        .unwrap()
    }

    fn slug(annotations: &[(&str, &str)]) -> Result<String> {
        let pull = Pull::new("docker.cloudsmith.io/acme/repo/app", annotations);
        cloudsmith().service_slug(&pull.context(None))
    }

    #[test]
    fn the_url_comes_from_flags_only() {
        assert_eq!(
            cloudsmith().service.url,
            "https://api.cloudsmith.io/openid/acme/"
        );
        for org in ["", "../x", "a/b", "a?b", "a b", "-a"] {
            let options = Options {
                cloudsmith_url: DEFAULT_URL.into(),
                cloudsmith_org: Some(org.into()),
            };
            assert!(
                Cloudsmith::new(&options, Arc::default()).is_err(),
                "{org:?}"
            );
        }
        let options = Options {
            cloudsmith_url: DEFAULT_URL.into(),
            cloudsmith_org: None,
        };
        let e = Cloudsmith::new(&options, Arc::default()).err().unwrap();
        assert_eq!(e.kind(), wicp_base::error::Kind::Config);
        assert_eq!(e.flagged(), Some((&CLOUDSMITH_ORG).into()));
        assert_eq!(e.problem(), Some("is not set"));
    }

    #[test]
    fn slugs_are_anchored() {
        let [ours, theirs] = SERVICE_ANNOTATIONS;
        assert_eq!(slug(&[(ours, "puller-x1")]).unwrap(), "puller-x1");
        assert_eq!(slug(&[(theirs, "ci_bot")]).unwrap(), "ci_bot");
        assert_eq!(slug(&[(ours, "a"), (theirs, "b")]).unwrap(), "a");
        assert!(slug(&[(ours, "a/b"), (theirs, "b")]).is_err());
        for bad in [
            "../x", "a@b", "a:b", "a/b", "a?b", "a#b", "a%2fb", "a\nb", "-a",
        ] {
            let e = slug(&[(ours, bad)]).unwrap_err().to_string();
            assert!(
                e.contains("not a Cloudsmith service account slug"),
                "{bad:?}: {e}"
            );
        }
        assert!(
            slug(&[])
                .unwrap_err()
                .to_string()
                .contains("no wi-credential-provider.io/cloudsmith-service")
        );
    }

    #[test]
    fn reads_the_answer() {
        let jwt = wicp_kubelet::request::token::jwt(r#"{"alg":"HS256"}"#, r#"{"exp":6400}"#);
        let c = cloudsmith()
            .interpret(
                &reply(201, &format!(r#"{{"token":"{jwt}"}}"#)),
                1000,
                "s",
                "i",
            )
            .unwrap();
        assert_eq!((c.username.as_str(), c.expires_at), ("token", 6400));
        let e = cloudsmith()
            .interpret(
                &reply(401, r#"{"detail":"OIDC token cannot be authenticated."}"#),
                0,
                "puller",
                "https://oidc.cluster.test",
            )
            .unwrap_err();
        assert_eq!(
            e.what(),
            "Cloudsmith refused the token exchange at https://api.cloudsmith.io/openid/acme/: HTTP 401: \"OIDC token cannot be authenticated.\""
        );
        assert!(
            e.remedy().unwrap().contains("service account puller"),
            "{e}"
        );
    }
}
