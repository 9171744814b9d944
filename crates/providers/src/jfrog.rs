//! JFrog Platform OIDC token exchange: the service account token for a JFrog
//! access token, pulled with the username JFrog returns.
//!
//! Wire format, from JFrog's REST API reference "OIDC Token Exchange"
//! (<https://jfrog.com/help/r/jfrog-rest-apis/oidc-token-exchange>, since
//! Artifactory Cloud 7.73.1 / Self-Hosted 7.77.3) and the client JFrog's own
//! tools use (jfrog/jfrog-client-go `access/services` `CreateOidcTokenParams`
//! and `auth.OidcTokenResponseData`):
//!
//! ```text
//! POST {--jfrog-url}/access/api/v1/oidc/token
//! Content-Type: application/json          (no Authorization header)
//! {"grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
//!  "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
//!  "subject_token": "<service account JWT>",
//!  "provider_name": "<--jfrog-provider-name>",
//!  "project_key": "<--jfrog-project-key>",             (optional)
//!  "identity_mapping_name": "<annotation>"}            (optional)
//! → 200 {"access_token", "username", "expires_in", "token_type",
//!        "issued_token_type", "scope", ...}
//! → 4xx {"errors": [{"code": "...", "message": "..."}]}
//! ```
//!
//! The pull credential is the response's `username` and `access_token`, as
//! jfrog/jfrog-credentials-provider returns them. Its lifetime is the
//! identity mapping's `expires_in`, whose documented default is only 60
//! seconds: the plugin warns when JFrog hands out a credential that short,
//! and `explain` says where the lifetime comes from.
//!
//! JFrog does not tie the access token to the service account token's
//! expiry, so neither do we; the cache still never keeps it beyond its own
//! `expires_in` (or the access token's `exp`, if earlier).

use std::sync::Arc;

use crate::Input;
use crate::allowlist::{self, Guarded};
use crate::oauth;
use crate::token_service::{self, Pattern, Service};
use crate::{Context, Credential, Plan, Provider};
use wicp_base::duration;
use wicp_base::error::{Error, Result};
use wicp_base::flags::{FlagSpec, Flags, Given, Takes, Usage};
use wicp_base::secret::Secret;
use wicp_kubelet::request::token::ServiceAccountToken;
use wicp_net as net;

pub const TOKEN_PATH: &str = "/access/api/v1/oidc/token";
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// What JFrog documents for `subject_token_type`; a Kubernetes service
/// account token is an OIDC ID token in all but name.
pub const SUBJECT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:id_token";

/// Our annotation naming a JFrog identity mapping. No established plugin
/// has one (jfrog-credentials-provider's `JFrogExchange` is a switch, not
/// an identity).
const IDENTITY_MAPPING_ANNOTATION: &str = "wi-credential-provider.io/jfrog-identity-mapping";

/// The identity mapping's default token lifetime per JFrog's docs: the
/// assumed lifetime when JFrog gives none.
pub(crate) const DEFAULT_LIFETIME_SECS: i64 = 60;

/// Below this the kubelet asks again for nearly every pull.
const SHORT_LIFETIME_SECS: i64 = 300;

/// JFrog names (integrations, identity mappings, project keys) are plain
/// identifiers; anything else is refused before it reaches a body.
static MAPPING: Pattern = Pattern::new(
    "letters, digits, '.', '_' or '-', starting with a letter or digit, at most 128",
    || regex_lite::Regex::new(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$").ok(),
);

// The field docs are this provider's --help text, written for a terminal
// (bare URLs, <PLACEHOLDERS>, HOST[:PORT]), not for rustdoc.
/// `--jfrog-project-key`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static JFROG_PROJECT_KEY: FlagSpec = FlagSpec {
    long: "jfrog-project-key",
    env: "WICP_JFROG_PROJECT_KEY",
    takes: Takes::One,
    value: "KEY",
    default: "",
    help: "A JFrog project key, when the integration and its identity mappings \
        belong to a project (`project_key` in the exchange).",
};

/// `--jfrog-provider-name`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static JFROG_PROVIDER_NAME: FlagSpec = FlagSpec {
    long: "jfrog-provider-name",
    env: "WICP_JFROG_PROVIDER_NAME",
    takes: Takes::One,
    value: "NAME",
    default: "",
    help: "The name of the OIDC integration configured in JFrog for the \
        cluster's service account issuer (`provider_name` in the exchange).",
};

/// `--jfrog-url`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static JFROG_URL: FlagSpec = FlagSpec {
    long: "jfrog-url",
    env: "WICP_JFROG_URL",
    takes: Takes::One,
    value: "URL",
    default: "",
    help: "The JFrog Platform base URL (https://example.jfrog.io); the token \
        exchange is sent to its /access/api/v1/oidc/token, and nowhere else.",
};

#[allow(
    rustdoc::bare_urls,
    rustdoc::invalid_html_tags,
    rustdoc::broken_intra_doc_links
)]
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// [`JFROG_URL`].
    pub jfrog_url: Option<String>,

    /// [`JFROG_PROVIDER_NAME`].
    pub jfrog_provider_name: Option<String>,

    /// [`JFROG_PROJECT_KEY`].
    pub jfrog_project_key: Option<String>,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] =
        &[&JFROG_URL, &JFROG_PROVIDER_NAME, &JFROG_PROJECT_KEY];
    const HEADING: &'static str = "JFrog";

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            jfrog_url: given.text(&JFROG_URL)?,
            jfrog_provider_name: given.text(&JFROG_PROVIDER_NAME)?,
            jfrog_project_key: given.text(&JFROG_PROJECT_KEY)?,
        })
    }
}

pub static PROVIDER: Provider = allowlist::declare::<Jfrog>(allowlist::About {
    name: "jfrog",
    summary: "JFrog Platform OIDC token exchange: a JFrog access token for the --registry hosts",
    audience: "the audience you pin in the JFrog OIDC integration (--audience; JFrog itself treats it as informational)",
    annotations: &[IDENTITY_MAPPING_ANNOTATION],
});

struct Jfrog {
    service: Service,
    provider_name: String,
    project_key: Option<String>,
}

impl Guarded for Jfrog {
    type Options = Options;
    const GUARDS: &'static str = "the JFrog access token";

    fn new(options: &Options, net: Arc<net::Settings>) -> Result<Self> {
        let url = options.jfrog_url.as_deref().ok_or_else(|| {
            Error::flag(&JFROG_URL, "is not set").fix(
                "pass --jfrog-url (WICP_JFROG_URL) with the JFrog Platform base URL, e.g. https://example.jfrog.io",
            )
        })?;
        let provider_name = options
            .jfrog_provider_name
            .as_deref()
            .map(str::trim)
            .ok_or_else(|| {
                Error::flag(&JFROG_PROVIDER_NAME, "is not set").fix(
                    "pass --jfrog-provider-name (WICP_JFROG_PROVIDER_NAME) with the name of the OIDC integration in JFrog",
                )
            })?;
        check_name(&JFROG_PROVIDER_NAME, provider_name)?;
        let project_key = options.jfrog_project_key.as_deref().map(str::trim);
        if let Some(key) = project_key {
            check_name(&JFROG_PROJECT_KEY, key)?;
        }
        Ok(Jfrog {
            service: Service::at(
                "JFrog",
                &JFROG_URL,
                url,
                TOKEN_PATH,
                DEFAULT_LIFETIME_SECS,
                net,
            )?,
            provider_name: provider_name.to_string(),
            project_key: project_key.map(str::to_string),
        })
    }

    fn plan<'a>(&'a self, cx: &Context<'a>, token: &'a ServiceAccountToken) -> Result<Plan<'a>> {
        let mapping = token_service::identity(
            cx,
            &[IDENTITY_MAPPING_ANNOTATION],
            &MAPPING,
            "JFrog identity mapping name",
        )?
        .map(|(_, name)| name);
        let identity = [
            Input::identity("provider_name", self.provider_name.clone()),
            Input::setting(
                "project_key",
                self.project_key.clone().unwrap_or_else(|| "none".into()),
            ),
            Input::setting(
                "identity_mapping",
                mapping
                    .clone()
                    .unwrap_or_else(|| "none (JFrog picks the first matching by priority)".into()),
            ),
            Input::setting(
                "lifetime",
                "the identity mapping's expires_in (JFrog's default is 60s)",
            ),
        ];
        let claims = token.claims();
        let (issuer, subject) = (claims.issuer.clone(), claims.subject.clone());
        Ok(token_service::plan(
            &PROVIDER,
            cx,
            &self.service,
            identity,
            move |deadline| {
                let body = self.body(token.secret(), mapping.as_deref());
                let reply = token_service::post_json(&self.service, &body, deadline)?;
                let now = duration::unix_now();
                let credential =
                    self.interpret(&reply, now, &issuer, &subject, mapping.as_deref())?;
                let lifetime = credential.expires_at.saturating_sub(now);
                if lifetime < SHORT_LIFETIME_SECS {
                    wicp_base::log::warning!(
                        "JFrog issued an access token for {} that lives only {lifetime}s (the identity mapping's expires_in; \
                         JFrog's default is {DEFAULT_LIFETIME_SECS}s), so the kubelet asks again almost every pull: \
                         raise the mapping's token expiry",
                        credential.username
                    );
                }
                Ok(credential)
            },
        ))
    }
}

impl Jfrog {
    fn body(&self, token: &Secret, mapping: Option<&str>) -> serde_json::Value {
        let mut body = serde_json::Map::new();
        let mut put = |name: &str, value: &str| {
            body.insert(name.to_string(), value.into());
        };
        put("grant_type", GRANT_TYPE);
        put("subject_token_type", SUBJECT_TOKEN_TYPE);
        put("subject_token", token.expose());
        put("provider_name", &self.provider_name);
        if let Some(key) = &self.project_key {
            put("project_key", key);
        }
        if let Some(mapping) = mapping {
            put("identity_mapping_name", mapping);
        }
        serde_json::Value::Object(body)
    }
}

fn check_name(flag: &'static FlagSpec, value: &str) -> Result<()> {
    if MAPPING.matches(value) {
        return Ok(());
    }
    Err(Error::flag(
        flag,
        format!(
            "{} is not a JFrog name ({})",
            wicp_base::error::quote(value),
            MAPPING.form
        ),
    )
    .fix(format!("set {flag} to the name as JFrog shows it")))
}

impl Jfrog {
    /// Reads JFrog's answer, seen at `now`.
    pub(crate) fn interpret(
        &self,
        reply: &wicp_net::http::Reply,
        now: i64,
        issuer: &str,
        subject: &str,
        mapping: Option<&str>,
    ) -> Result<Credential> {
        let (value, password) = token_service::read_token(
            &self.service,
            reply,
            "access_token",
            |status| {
                match status {
                    401 | 403 => format!(
                        "JFrog did not accept the token: check that the OIDC integration {:?} has the cluster's issuer ({issuer}) \
                         as its provider URL, with keys JFrog can fetch, and that {} has claims matching {subject}",
                        self.provider_name,
                        match mapping {
                            Some(m) => format!("the identity mapping {m:?}"),
                            None => "one of its identity mappings".to_string(),
                        }
                    ),
                    404 => "JFrog has no OIDC token endpoint there: check that --jfrog-url is the platform's base URL \
                            (Artifactory 7.73.1 cloud or 7.77.3 self-hosted and later)"
                        .to_string(),
                    _ => format!(
                        "check --jfrog-provider-name {:?}, --jfrog-project-key and the identity mapping name against the integration in JFrog",
                        self.provider_name
                    ),
                }
            },
        )?;
        let username = token_service::field(&value, "username")
            .filter(|u| !u.contains(['\n', '\r', ':']))
            .ok_or_else(|| token_service::malformed(&self.service, reply, "no usable username"))?;
        token_service::credential(
            &self.service,
            now,
            username,
            password,
            oauth::expires_in(value.get("expires_in")).filter(|&s| s > 0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wicp_net::http::reply;

    fn jfrog(project: Option<&str>) -> Jfrog {
        Jfrog::new(
            &Options {
                jfrog_url: Some("https://example.jfrog.io/".into()),
                jfrog_provider_name: Some("k8s-prod".into()),
                jfrog_project_key: project.map(str::to_string),
            },
            Arc::default(),
        )
        .unwrap()
    }

    #[test]
    fn flags_are_checked() {
        let ok = Options {
            jfrog_url: Some("https://example.jfrog.io".into()),
            jfrog_provider_name: Some("k8s".into()),
            jfrog_project_key: None,
        };
        assert!(Jfrog::new(&ok, Arc::default()).is_ok());
        for (options, flag, problem) in [
            (
                Options {
                    jfrog_url: None,
                    ..ok.clone()
                },
                &JFROG_URL,
                "is not set",
            ),
            (
                Options {
                    jfrog_url: Some("example.jfrog.io".into()),
                    ..ok.clone()
                },
                &JFROG_URL,
                "is not an http(s) URL",
            ),
            (
                Options {
                    jfrog_provider_name: None,
                    ..ok.clone()
                },
                &JFROG_PROVIDER_NAME,
                "is not set",
            ),
            (
                Options {
                    jfrog_provider_name: Some("a b".into()),
                    ..ok.clone()
                },
                &JFROG_PROVIDER_NAME,
                "is not a JFrog name",
            ),
            (
                Options {
                    jfrog_project_key: Some("../x".into()),
                    ..ok.clone()
                },
                &JFROG_PROJECT_KEY,
                "is not a JFrog name",
            ),
        ] {
            let e = Jfrog::new(&options, Arc::default()).err().unwrap();
            assert_eq!(e.kind(), wicp_base::error::Kind::Config, "{e}");
            assert_eq!(e.flagged(), Some(flag.into()), "{e}");
            assert!(e.problem().is_some_and(|p| p.contains(problem)), "{e}");
        }
    }

    #[test]
    fn the_body_has_the_documented_fields_only() {
        let t = Secret::new("sa.jwt.sig");
        let body = jfrog(None).body(&t, None);
        assert_eq!(
            body,
            serde_json::json!({
                "grant_type": GRANT_TYPE,
                "subject_token_type": SUBJECT_TOKEN_TYPE,
                "subject_token": "sa.jwt.sig",
                "provider_name": "k8s-prod",
            })
        );
        let body = jfrog(Some("proj")).body(&t, Some("team-a"));
        assert_eq!(body["project_key"], "proj");
        assert_eq!(body["identity_mapping_name"], "team-a");
        assert_eq!(
            jfrog(None).service.url,
            "https://example.jfrog.io/access/api/v1/oidc/token"
        );
    }

    /// JFrog's answer `body` with HTTP 200, read at `now`.
    fn success(body: &str, now: i64) -> Result<Credential> {
        jfrog(None).interpret(&reply(200, body), now, "iss", "sub", None)
    }

    #[test]
    fn reads_the_answer() {
        let c = success(
            r#"{"access_token":"opaque","username":"k8s-team","expires_in":3600,"token_type":"Bearer","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","scope":"applied-permissions/groups:readers"}"#,
            1000,
        )
        .unwrap();
        assert_eq!(
            (c.username.as_str(), c.password.expose(), c.expires_at),
            ("k8s-team", "opaque", 4600)
        );
        for (body, needle) in [
            ("<html>", "not a JSON token response"),
            (r#"{"username":"u","expires_in":60}"#, "no access_token"),
            (
                r#"{"access_token":"t","expires_in":60}"#,
                "no usable username",
            ),
            (
                r#"{"access_token":"t","username":"a:b","expires_in":60}"#,
                "no usable username",
            ),
        ] {
            wicp_net::http::assert_refused(success(body, 0), needle, "opaque");
        }
        // No expires_in and an opaque token: JFrog's documented default.
        let c = success(r#"{"access_token":"t","username":"u"}"#, 1000).unwrap();
        assert_eq!(c.expires_at, 1060);
    }

    #[test]
    fn explains_refusals() {
        let j = jfrog(None);
        let e = j
            .interpret(
                &reply(
                    401,
                    r#"{"errors":[{"code":"UNAUTHORIZED","message":"Failed to validate the OIDC token"}]}"#,
                ),
                0,
                "https://oidc.cluster.test",
                "system:serviceaccount:team:app",
                Some("team-a"),
            )
            .unwrap_err();
        assert_eq!(
            e.what(),
            "JFrog refused the token exchange at https://example.jfrog.io/access/api/v1/oidc/token: HTTP 401 UNAUTHORIZED: \"Failed to validate the OIDC token\""
        );
        let fix = e.remedy().unwrap();
        assert!(
            fix.contains("\"k8s-prod\"") && fix.contains("\"team-a\""),
            "{fix}"
        );
        assert!(fix.contains("system:serviceaccount:team:app"), "{fix}");
        let e = j.interpret(&reply(404, ""), 0, "i", "s", None).unwrap_err();
        assert!(e.remedy().unwrap().contains("base URL"), "{e}");
    }
}
