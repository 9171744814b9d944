//! Chainguard: the service account token for a `cgr.dev` registry token,
//! through Chainguard's STS at `issuer.enforce.dev`, as an assumable
//! identity that trusts the cluster's issuer.
//!
//! The wire format, as Chainguard documents and implements it:
//!
//! - `GET https://issuer.enforce.dev/sts/exchange?aud=cgr.dev&identity=<id>`
//!   with `Authorization: Bearer <service account token>`, answered with
//!   JSON whose `token` is the registry token (chainguard-dev/edu, the
//!   assumable-identities and Kubernetes guides, `curl -H "Authorization:
//!   Bearer $TOKEN" ".../sts/exchange?aud=...&identity=$IDENTITY" | jq -r
//!   .token`). The `Exchange` RPC is bound to both GET and POST
//!   `/sts/exchange` (`oidc.platform.proto`); its fields are `aud`,
//!   `identity`, `scope`, `cap`. We use the documented GET: no body, and
//!   nothing secret in the query.
//! - The answer is the protojson form of `RawToken` (`token`,
//!   `refreshToken`, and in newer releases `expiry`, an RFC 3339 string);
//!   the refresh token is ignored. The token is a JWT valid "for up to an
//!   hour": its `exp` gives `cacheDuration`, or `expiry` if that is sooner.
//! - Errors are grpc-gateway's `{"code": <gRPC code>, "message": "...",
//!   "details": []}`; the code's name and the cleaned message are repeated.
//! - Identity IDs are UIDPs (chainguard-dev/sdk `uidp/uid.go`): a 40-hex
//!   root UID, then one 16-hex SUID per level, `/`-separated; an identity
//!   sits at least one level below its organisation.
//! - The registry takes the token as the password of the username
//!   `_token` (chainguard-dev/edu, "authenticating with a pull token" and
//!   the Renovate and chainctl automation guides).
//!
//! The identity may come from a service account annotation (ours, then the
//! Chainguard cookbook kubelet plugin's `credentials.chainguard.dev/identity`)
//! or from `--chainguard-identity`; it only names *which* identity to
//! assume, and Chainguard checks that the identity trusts this token's
//! issuer and subject. The STS URL, the registry audience and the registries
//! that receive the token come only from flags.

use std::sync::Arc;
use wicp_base::duration::{self, unix_now};
use wicp_base::error::{Error, Result, quote};

use crate::Input;
use crate::allowlist::{self, Allowlist};
use crate::oauth::{self, form_urlencode};
use crate::{Context, Credential, Exchanger, Plan, Provider};
use wicp_base::flags::{FlagSpec, Flags, Given, Takes, Usage};
use wicp_kubelet::request::image::ImageRef;
use wicp_net::inputs::Inputs;
use wicp_net::{self as net, http, http::Reply};

/// Our annotation: the assumable identity's ID.
const IDENTITY_ANNOTATION: &str = "wi-credential-provider.io/chainguard-identity";
/// The same, as the Chainguard cookbook's kubelet plugin names it.
const COOKBOOK_IDENTITY_ANNOTATION: &str = "credentials.chainguard.dev/identity";

const DEFAULT_ISSUER: &str = "https://issuer.enforce.dev";
pub const REGISTRY: &str = "cgr.dev";
/// The username cgr.dev expects with a token as the password.
pub const USERNAME: &str = "_token";
/// The service account token audiences Chainguard's guides use for the
/// exchange (with and without the scheme).
const TOKEN_AUDIENCES: [&str; 2] = ["issuer.enforce.dev", "https://issuer.enforce.dev"];

/// An identity is at most a few groups deep; this bounds the pattern.
const MAX_IDENTITY_LEVELS: usize = 16;

/// `--chainguard-identity`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static CHAINGUARD_IDENTITY: FlagSpec = FlagSpec {
    long: "chainguard-identity",
    env: "WICP_CHAINGUARD_IDENTITY",
    takes: Takes::One,
    value: "ID",
    default: "",
    help: "The assumable identity used when the service account names none (an \
        identity ID such as 0123...cdef/0123456789abcdef).",
};

/// `--chainguard-issuer-url`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static CHAINGUARD_ISSUER_URL: FlagSpec = FlagSpec {
    long: "chainguard-issuer-url",
    env: "WICP_CHAINGUARD_ISSUER_URL",
    takes: Takes::One,
    value: "URL",
    default: DEFAULT_ISSUER,
    help: "Chainguard's STS; /sts/exchange is appended.",
};

/// `--chainguard-registry-audience`.
pub(crate) static CHAINGUARD_REGISTRY_AUDIENCE: FlagSpec = FlagSpec {
    long: "chainguard-registry-audience",
    env: "WICP_CHAINGUARD_REGISTRY_AUDIENCE",
    takes: Takes::One,
    value: "AUDIENCE",
    default: REGISTRY,
    help: "The `aud` asked of the STS: the registry the token is for.",
};

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// [`CHAINGUARD_ISSUER_URL`].
    pub chainguard_issuer_url: String,

    /// [`CHAINGUARD_REGISTRY_AUDIENCE`].
    pub chainguard_registry_audience: String,

    /// [`CHAINGUARD_IDENTITY`].
    pub chainguard_identity: Option<String>,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] = &[
        &CHAINGUARD_ISSUER_URL,
        &CHAINGUARD_REGISTRY_AUDIENCE,
        &CHAINGUARD_IDENTITY,
    ];
    const HEADING: &'static str = "Chainguard";

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            chainguard_issuer_url: given.text(&CHAINGUARD_ISSUER_URL)?.unwrap_or_default(),
            chainguard_registry_audience: given
                .text(&CHAINGUARD_REGISTRY_AUDIENCE)?
                .unwrap_or_default(),
            chainguard_identity: given.text(&CHAINGUARD_IDENTITY)?,
        })
    }
}

pub static PROVIDER: Provider = Provider {
    name: "chainguard",
    summary: "Chainguard STS (issuer.enforce.dev): an assumable identity's cgr.dev token",
    audience: "issuer.enforce.dev or https://issuer.enforce.dev (--audience to change)",
    auto: None,
    password_is_token: false,
    annotations: &[IDENTITY_ANNOTATION, COOKBOOK_IDENTITY_ANNOTATION],
    node_identity: None,
    flags: crate::own_flags::<Options>(),
};

impl crate::OwnFlags for Options {
    fn build(&self, shared: &crate::Shared<'_>, inputs: &Inputs) -> Result<Box<dyn Exchanger>> {
        Ok(Box::new(Chainguard::new(
            shared.registries,
            self,
            Arc::clone(&inputs.net),
        )?))
    }
}

pub struct Chainguard {
    /// Proxy and trust settings, for the client built on a cache miss.
    net: Arc<net::Settings>,
    allowlist: Allowlist,
    issuer: String,
    audience: String,
    identity: Option<String>,
}

/// Whether `id` is a Chainguard identity ID: a UIDP below an organisation.
pub fn is_identity_id(id: &str) -> bool {
    let mut parts = id.split('/');
    let hex = |s: &str, n: usize| {
        s.len() == n && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
    };
    let root_ok = parts.next().is_some_and(|root| hex(root, 40));
    let rest: Vec<&str> = parts.collect();
    root_ok
        && !rest.is_empty()
        && rest.len() <= MAX_IDENTITY_LEVELS
        && rest.iter().all(|s| hex(s, 16))
}

impl Chainguard {
    pub fn new(
        registries: &allowlist::Options,
        options: &Options,
        net: Arc<net::Settings>,
    ) -> Result<Self> {
        let issuer =
            http::endpoint_override(&CHAINGUARD_ISSUER_URL, &options.chainguard_issuer_url)?;
        let audience = options.chainguard_registry_audience.trim();
        if audience.is_empty()
            || audience
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(Error::config(format!(
                "--chainguard-registry-audience {} is not an audience",
                quote(audience)
            ))
            .fix("leave it at cgr.dev, or the registry host Chainguard issues tokens for"));
        }
        let identity = options
            .chainguard_identity
            .as_deref()
            .map(|id| {
                let id = id.trim();
                if is_identity_id(id) {
                    Ok(id.to_string())
                } else {
                    Err(Error::flag(&CHAINGUARD_IDENTITY, format!("{} is not a Chainguard identity ID", quote(id)))
                        .fix("copy the ID chainctl iam identities create printed (40 hex digits, then /16 hex digits per level)"))
                }
            })
            .transpose()?;
        Ok(Chainguard {
            net,
            allowlist: Allowlist::new(registries)?,
            issuer,
            audience: audience.to_string(),
            identity,
        })
    }

    /// The identity to assume and where it came from.
    fn identity(&self, cx: &Context<'_>) -> Result<(String, IdentitySource)> {
        for key in [IDENTITY_ANNOTATION, COOKBOOK_IDENTITY_ANNOTATION] {
            if let Some(raw) = cx.annotations.get(key) {
                let id = raw.trim();
                if !is_identity_id(id) {
                    return Err(Error::annotation_key(key, format!(
                        "service account annotation {key} is {}, not a Chainguard identity ID",
                        quote(&wicp_base::redact::clean(raw, 100))
                    ))
                    .fix("set it to the assumable identity's ID as chainctl iam identities list shows it (40 hex digits, then /16 hex digits per level)"));
                }
                return Ok((id.to_string(), IdentitySource::Annotation(key)));
            }
        }
        match &self.identity {
            Some(id) => Ok((id.clone(), IdentitySource::Flag)),
            None => Err(Error::annotation_key(IDENTITY_ANNOTATION, format!("no Chainguard identity to assume: the service account has no identity annotation and {CHAINGUARD_IDENTITY} is not set"))
                .fix(format!("annotate the service account with {IDENTITY_ANNOTATION}: <identity ID> (and list the key in tokenAttributes.optionalServiceAccountAnnotationKeys), or set {CHAINGUARD_IDENTITY}"))),
        }
    }
}

/// Where the identity a pull assumes came from: one of the service
/// account's annotations, or `--chainguard-identity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdentitySource {
    Annotation(&'static str),
    Flag,
}

/// The annotation key, or `--chainguard-identity`: the plan's
/// `identity_source`.
impl std::fmt::Display for IdentitySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdentitySource::Annotation(key) => f.write_str(key),
            IdentitySource::Flag => CHAINGUARD_IDENTITY.fmt(f),
        }
    }
}

impl Exchanger for Chainguard {
    fn provider(&self) -> &'static Provider {
        &PROVIDER
    }

    fn audiences(&self) -> Vec<String> {
        crate::names(&TOKEN_AUDIENCES)
    }

    /// The mirrors the admin allowed besides cgr.dev; a path-scoped one
    /// narrows the answer's key like any allowlist (`serve::prepare`).
    fn allowlist(&self) -> Option<(&Allowlist, &'static str)> {
        Some((&self.allowlist, "the Chainguard token"))
    }

    /// cgr.dev exactly, and the hosts the admin allowed with `--registry`
    /// (a mirror or pull-through cache in front of cgr.dev).
    fn serves(&self, image: &ImageRef) -> bool {
        image.registry() == REGISTRY || self.allowlist.allows(image)
    }

    fn registries(&self) -> String {
        if self.allowlist.describe().starts_with("no registry") {
            REGISTRY.to_string()
        } else {
            format!("{REGISTRY}, {}", self.allowlist.describe())
        }
    }

    fn refusal(&self, image: &ImageRef) -> Error {
        Error::registry(format!(
            "registry {} is not served by the chainguard provider, which sends a Chainguard token only to {}",
            quote(image.registry()),
            self.registries()
        ))
        .fix("narrow this provider's matchImages to cgr.dev, or add --registry for a host that forwards to cgr.dev")
    }

    fn plan<'a>(&'a self, cx: &Context<'a>) -> Result<Plan<'a>> {
        let (identity, source) = self.identity(cx)?;
        let token = cx.token()?;
        let inputs = vec![
            Input::setting("registry", cx.image.registry().to_string()),
            Input::setting("issuer_url", self.issuer.clone()),
            Input::setting("registry_audience", self.audience.clone()),
            Input::identity("identity", identity.clone()),
            Input::setting("identity_source", source.to_string()),
        ];
        Ok(Plan::for_registry(
            &PROVIDER,
            cx.image,
            inputs,
            move |deadline| {
                let url = format!("{}/sts/exchange", self.issuer);
                let call = http::Call::new(
                    "Chainguard's STS",
                    format!("the Chainguard token exchange at {url}"),
                );
                // The query (application/x-www-form-urlencoded, as grpc-gateway reads it).
                let query_url = format!(
                    "{url}?aud={}&identity={}",
                    form_urlencode(&self.audience),
                    form_urlencode(&identity)
                );
                let reply = http::block_on(deadline, &call, async {
                    let client = self.net.client(deadline)?;
                    http::send(
                        &client,
                        wicp_net::observe::Endpoint::TokenExchange,
                        || {
                            client
                                .get(&query_url)
                                .header(reqwest::header::ACCEPT, "application/json")
                                .bearer_auth(token.secret().expose())
                        },
                        &call,
                        deadline,
                    )
                    .await
                })?;
                let service_account = token.service_account().to_string();
                let claims = token.claims();
                let credential = interpret(
                    &reply,
                    unix_now(),
                    &Describe {
                        url: &url,
                        identity: &identity,
                        service_account: &service_account,
                        issuer: &claims.issuer,
                        subject: &claims.subject,
                    },
                )?;
                wicp_base::log::debug!(
                    "Chainguard issued a token for identity {identity} ({service_account}) that expires at {}",
                    duration::format_unix(credential.expires_at)
                );
                Ok(credential)
            },
        ))
    }
}

/// What `interpret` needs to read and explain an answer (public for the
/// fuzz targets).
pub struct Describe<'a> {
    pub url: &'a str,
    pub identity: &'a str,
    pub service_account: &'a str,
    pub issuer: &'a str,
    pub subject: &'a str,
}

/// gRPC status code names (google.golang.org/grpc/codes).
fn grpc_code(code: i64) -> Option<&'static str> {
    Some(match code {
        1 => "CANCELLED",
        2 => "UNKNOWN",
        3 => "INVALID_ARGUMENT",
        4 => "DEADLINE_EXCEEDED",
        5 => "NOT_FOUND",
        6 => "ALREADY_EXISTS",
        7 => "PERMISSION_DENIED",
        8 => "RESOURCE_EXHAUSTED",
        9 => "FAILED_PRECONDITION",
        10 => "ABORTED",
        11 => "OUT_OF_RANGE",
        12 => "UNIMPLEMENTED",
        13 => "INTERNAL",
        14 => "UNAVAILABLE",
        15 => "DATA_LOSS",
        16 => "UNAUTHENTICATED",
        _ => return None,
    })
}

/// The error for a refusal by Chainguard's STS: what it said (its gRPC
/// status code and message), and the fix that code points to.
fn refusal(reply: &Reply, d: &Describe<'_>) -> Error {
    let body: Option<serde_json::Value> = reply.json();
    let code = body
        .as_ref()
        .and_then(|b| b.get("code"))
        .and_then(serde_json::Value::as_i64)
        .and_then(grpc_code);
    let message = body
        .as_ref()
        .and_then(|b| b.get("message"))
        .and_then(serde_json::Value::as_str)
        .filter(|m| !m.is_empty());
    let what = match code {
        Some(code) => oauth::summary(reply.status, Some(code), message),
        None => format!(
            "HTTP {} with {}",
            reply.status,
            wicp_base::redact::body_shape(&reply.body)
        ),
    };
    let fix = match code {
        Some("UNAUTHENTICATED" | "PERMISSION_DENIED") => format!(
            "check that identity {} trusts this token: its issuer must be the cluster's ({}) with keys Chainguard can \
             fetch or was given (--issuer-keys expire), its subject {} (or a pattern matching it), its audience the \
             token's (tokenAttributes.serviceAccountTokenAudience, --audience), and that it has the registry.pull role",
            d.identity, d.issuer, d.subject
        ),
        Some("NOT_FOUND" | "INVALID_ARGUMENT") => format!(
            "check the identity ID {} (chainctl iam identities list) and --chainguard-registry-audience",
            d.identity
        ),
        _ if http::is_retryable_status(reply.status) => {
            http::retries_spent("Chainguard's STS", "Chainguard's service status")
        }
        _ => "check --chainguard-issuer-url and the node's proxy settings: the answer is not Chainguard's".to_string(),
    };
    Error::upstream(format!(
        "Chainguard's STS at {} {} the exchange for identity {} ({}): {what}",
        d.url,
        wicp_base::redact::verb(reply.status),
        d.identity,
        d.service_account
    ))
    .fix(fix)
    .answered("Chainguard's STS", reply.status, &reply.body)
}

pub fn interpret(reply: &Reply, now: i64, d: &Describe<'_>) -> Result<Credential> {
    if !reply.is_success() {
        return Err(refusal(reply, d));
    }
    let malformed = |why: String| {
        let from = format!(
            "Chainguard's STS at {}, asked for identity {},",
            d.url, d.identity
        );
        reply.unusable("Chainguard's STS", from, &why).fix("check that --chainguard-issuer-url is Chainguard's STS (https://issuer.enforce.dev); a proxy may be answering instead")
    };
    let (body, token) = reply.token_field("token").map_err(malformed)?;
    let from_jwt = wicp_kubelet::request::token::unverified_expiry(token.expose());
    let from_expiry = body
        .get("expiry")
        .and_then(serde_json::Value::as_str)
        .and_then(duration::parse_rfc3339);
    let expires_at = match (from_jwt, from_expiry) {
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => {
            return Err(malformed(
                "a token that is not a JWT with an exp and no expiry, so its lifetime is unknown"
                    .to_string(),
            ));
        }
    };
    if expires_at <= now {
        return Err(malformed(format!(
            "a token that expired already (at {})",
            duration::format_unix(expires_at)
        )));
    }
    Ok(Credential {
        username: USERNAME.to_string(),
        password: token,
        expires_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Pull;
    use wicp_net::http::reply;

    const ID: &str = "0123456789abcdef0123456789abcdef01234567/0123456789abcdef";

    fn chainguard(identity: Option<&str>) -> Chainguard {
        Chainguard::new(
            &allowlist::Options::default(),
            &Options {
                chainguard_issuer_url: DEFAULT_ISSUER.into(),
                chainguard_registry_audience: REGISTRY.into(),
                chainguard_identity: identity.map(str::to_string),
            },
            Arc::default(),
        )
        .unwrap()
    }

    fn describe() -> Describe<'static> {
        Describe {
            url: "https://issuer.enforce.dev/sts/exchange",
            identity: ID,
            service_account: "team/puller",
            issuer: "https://oidc.cluster.test",
            subject: "system:serviceaccount:team:puller",
        }
    }

    fn jwt_with_exp(exp: i64) -> String {
        wicp_kubelet::request::token::jwt(
            r#"{"alg":"ES256"}"#,
            &format!(r#"{{"exp":{exp},"aud":"cgr.dev"}}"#),
        )
    }

    #[test]
    fn identity_ids_are_uidps_below_an_organisation() {
        assert!(is_identity_id(ID));
        assert!(is_identity_id(&format!("{ID}/fedcba9876543210")));
        for bad in [
            "",
            "0123456789abcdef0123456789abcdef01234567",
            "0123456789abcdef0123456789abcdef01234567/",
            "0123456789ABCDEF0123456789abcdef01234567/0123456789abcdef",
            "0123456789abcdef0123456789abcdef01234567/0123456789abcde",
            "0123456789abcdef0123456789abcdef01234567/0123456789abcdef/",
            " 0123456789abcdef0123456789abcdef01234567/0123456789abcdef",
            "0123456789abcdef0123456789abcdef01234567/0123456789abcdef?aud=x",
            "0123456789abcdef0123456789abcdef01234567/0123456789abcdef&identity=x",
            "../../evil.example.com/0123456789abcdef",
            "https://evil.example.com/0123456789abcdef",
        ] {
            assert!(!is_identity_id(bad), "{bad}");
        }
    }

    #[test]
    fn identity_comes_from_annotations_in_order_then_the_flag() {
        let image = ImageRef::parse("cgr.dev/org/app").unwrap();
        let other = format!("{ID}/1111111111111111");
        let pick = |c: &Chainguard, pairs: &[(&str, &str)]| {
            let pull = Pull::new(&image.to_string(), pairs);
            c.identity(&pull.context(None)).map_err(|e| e.to_string())
        };
        assert_eq!(
            pick(
                &chainguard(None),
                &[
                    (IDENTITY_ANNOTATION, ID),
                    (COOKBOOK_IDENTITY_ANNOTATION, &other)
                ]
            )
            .unwrap(),
            (
                ID.to_string(),
                IdentitySource::Annotation(IDENTITY_ANNOTATION)
            )
        );
        assert_eq!(
            pick(
                &chainguard(Some(ID)),
                &[(COOKBOOK_IDENTITY_ANNOTATION, &other)]
            )
            .unwrap()
            .0,
            other
        );
        assert_eq!(
            pick(&chainguard(Some(ID)), &[]).unwrap().1,
            IdentitySource::Flag
        );
        assert_eq!(IdentitySource::Flag.to_string(), "--chainguard-identity");
        assert!(
            pick(&chainguard(None), &[])
                .unwrap_err()
                .contains("no Chainguard identity")
        );
        // A malformed annotation is an error, never a fallback to the flag.
        assert!(
            pick(
                &chainguard(Some(ID)),
                &[(IDENTITY_ANNOTATION, "evil.example.com")]
            )
            .unwrap_err()
            .contains("not a Chainguard identity ID")
        );
    }

    #[test]
    fn serves_cgr_dev_and_allowed_hosts_only() {
        let image = |s: &str| ImageRef::parse(s).unwrap();
        let c = chainguard(None);
        assert!(c.serves(&image("cgr.dev/org/app")));
        for bad in [
            "cgr.dev.evil.net/org/app",
            "evil.cgr.dev/app",
            "cgr.dev:444/org/app",
            "docker.io/cgr.dev/app",
        ] {
            assert!(!c.serves(&image(bad)), "{bad}");
        }
        let mirrored = Chainguard::new(
            &allowlist::Options {
                registries: vec!["mirror.example.com".into()],
            },
            &Options {
                chainguard_issuer_url: DEFAULT_ISSUER.into(),
                chainguard_registry_audience: REGISTRY.into(),
                chainguard_identity: None,
            },
            Arc::default(),
        )
        .unwrap();
        assert!(mirrored.serves(&image("mirror.example.com/org/app")));
        assert_eq!(mirrored.registries(), "cgr.dev, mirror.example.com");
    }

    #[test]
    fn flags_are_checked() {
        let bad = |o: Options| {
            Chainguard::new(&allowlist::Options::default(), &o, Arc::default())
                .err()
                .unwrap()
                .to_string()
        };
        let base = || Options {
            chainguard_issuer_url: DEFAULT_ISSUER.into(),
            chainguard_registry_audience: REGISTRY.into(),
            chainguard_identity: None,
        };
        assert!(
            bad(Options {
                chainguard_issuer_url: "issuer.enforce.dev".into(),
                ..base()
            })
            .contains("not an http(s) URL")
        );
        assert!(
            bad(Options {
                chainguard_registry_audience: " ".into(),
                ..base()
            })
            .contains("not an audience")
        );
        assert!(
            bad(Options {
                chainguard_identity: Some("x".into()),
                ..base()
            })
            .contains("not a Chainguard identity ID")
        );
    }

    #[test]
    fn reads_the_token_and_its_expiry() {
        let jwt = jwt_with_exp(4600);
        let c = interpret(
            &reply(200, &format!(r#"{{"token":"{jwt}","refreshToken":"r"}}"#)),
            1000,
            &describe(),
        )
        .unwrap();
        assert_eq!(
            (c.username.as_str(), c.password.expose(), c.expires_at),
            (USERNAME, jwt.as_str(), 4600)
        );
        // The sooner of exp and expiry.
        let c = interpret(
            &reply(
                200,
                &format!(r#"{{"token":"{jwt}","expiry":"1970-01-01T01:00:00Z"}}"#),
            ),
            1000,
            &describe(),
        )
        .unwrap();
        assert_eq!(c.expires_at, 3600);
        let c = interpret(
            &reply(200, r#"{"token":"opaque","expiry":"1970-01-01T01:00:00Z"}"#),
            1000,
            &describe(),
        )
        .unwrap();
        assert_eq!(c.expires_at, 3600);
    }

    #[test]
    fn refuses_broken_answers() {
        let past = jwt_with_exp(10);
        for (status, body, needle, fix) in [
            (
                200,
                "<html/>".to_string(),
                "not a JSON token response (7 bytes, HTML or XML)",
                "--chainguard-issuer-url",
            ),
            (
                200,
                r#"{"refreshToken":"r"}"#.to_string(),
                "no token",
                "--chainguard-issuer-url",
            ),
            (
                200,
                r#"{"token":"opaque"}"#.to_string(),
                "lifetime is unknown",
                "--chainguard-issuer-url",
            ),
            (
                200,
                format!(r#"{{"token":"{past}"}}"#),
                "expired already",
                "--chainguard-issuer-url",
            ),
            (
                401,
                r#"{"code":16,"message":"unable to verify token","details":[]}"#.to_string(),
                "HTTP 401 UNAUTHENTICATED: \"unable to verify token\"",
                "registry.pull",
            ),
            (
                403,
                r#"{"code":7,"message":"permission denied","details":[]}"#.to_string(),
                "HTTP 403 PERMISSION_DENIED",
                "trusts this token",
            ),
            (
                404,
                r#"{"code":5,"message":"identity not found"}"#.to_string(),
                "NOT_FOUND",
                "chainctl iam identities list",
            ),
            (
                429,
                r#"{"code":8,"message":"slow down"}"#.to_string(),
                "RESOURCE_EXHAUSTED",
                "throttling",
            ),
            (
                502,
                "<html>bad gateway</html>".to_string(),
                "HTTP 502 with",
                "throttling",
            ),
        ] {
            let e = interpret(&reply(status, &body), 1000, &describe()).unwrap_err();
            assert!(e.what().contains(needle), "{body}: {e}");
            assert!(e.remedy().unwrap().contains(fix), "{body}: {e}");
            assert!(!e.to_string().contains("opaque"));
        }
    }
}
