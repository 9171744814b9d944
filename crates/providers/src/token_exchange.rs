//! OAuth 2.0 Token Exchange (RFC 8693) at a token server the admin names,
//! for token servers placed in front of a registry.
//!
//! The wire format is RFC 8693 §2.1 and §2.2 on RFC 6749's token endpoint
//! rules (<https://www.rfc-editor.org/rfc/rfc8693>; §2.1 checked against its
//! text as quoted verbatim in public OAuth server code, §2.2 against
//! implementers' documentation, Janssen, Airlock and Pulumi's schema):
//!
//! - `POST` to the token endpoint, `Content-Type:
//!   application/x-www-form-urlencoded` (RFC 6749 §3.2, §4.5), with
//!   `grant_type=urn:ietf:params:oauth:grant-type:token-exchange`,
//!   `subject_token`, `subject_token_type` (here
//!   `urn:ietf:params:oauth:token-type:jwt` by default: a service account
//!   token is a JWT, RFC 8693 §3 and RFC 7519 §9), and the optional
//!   `resource` and `audience` (each repeatable, §2.1), `scope` and
//!   `requested_token_type`. No actor token: the kubelet acts for nobody.
//! - Client authentication is "at the discretion of the authorization
//!   server" (§2.1), which also warns that without it "a compromised token
//!   \[can\] be leveraged via an STS into other tokens by anyone possessing
//!   \[it\]"; servers that implement the exchange as an OAuth grant (Keycloak,
//!   most commercial authorization servers) want a registered client. We
//!   support the two RFC 6749 forms that need no key material:
//!   `client_secret_basic` (§2.3.1: id and secret form-urlencoded, then
//!   HTTP Basic) when a client ID and a secret file are configured, and a
//!   bare `client_id` form field (§3.2.1, a public client) with an ID
//!   alone. The secret is read from a file at start, never from a flag.
//! - Success (§2.2.1): JSON with `access_token`, `issued_token_type`,
//!   `token_type` and the recommended `expires_in`. Without `expires_in` the
//!   issued token's own JWT `exp` gives its lifetime; with neither, the
//!   exchange is refused rather than cached for a guessed time.
//! - Errors (§2.2.2): RFC 6749 §5.2 JSON, `error` and `error_description`,
//!   plus RFC 8693's `invalid_target`. The code and the cleaned description
//!   are repeated; nothing else from the body is.
//!
//! Only the admin's configuration says where the token goes: this provider
//! reads no service account annotation at all, and its result is only ever
//! returned for registries the admin allowed with `--registry`.

use std::path::PathBuf;

use std::sync::Arc;
use wicp_base::duration::{self, unix_now};
use wicp_base::error::{Error, Result, quote};

use crate::Input;
use crate::allowlist::{self, Guarded};
use crate::oauth::{self, form_urlencode};
use crate::{Context, Credential, Plan, Provider};
use wicp_base::flags::{FlagSpec, Flags, Given, Takes, Usage};
use wicp_base::secret::Secret;
use wicp_kubelet::request::token::ServiceAccountToken;
use wicp_net::{self as net, http, http::Reply};

pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const JWT_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";

/// A username is a registry account name: short, printable, no `:`.
const MAX_USERNAME_CHARS: usize = 256;

// The field docs are this provider's --help text, written for a terminal
// (bare URLs, <PLACEHOLDERS>, HOST[:PORT]), not for rustdoc.
/// `--token-exchange-audience`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static TOKEN_EXCHANGE_AUDIENCE: FlagSpec = FlagSpec {
    long: "token-exchange-audience",
    env: "WICP_TOKEN_EXCHANGE_AUDIENCE",
    takes: Takes::List,
    value: "AUDIENCE",
    default: "",
    help: "`audience` parameter: the logical name of the service the issued \
        token is for. Repeatable (or comma-separated in the variable).",
};

/// `--token-exchange-client-id`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static TOKEN_EXCHANGE_CLIENT_ID: FlagSpec = FlagSpec {
    long: "token-exchange-client-id",
    env: "WICP_TOKEN_EXCHANGE_CLIENT_ID",
    takes: Takes::One,
    value: "ID",
    default: "",
    help: "OAuth client ID, for token servers that want a registered client: \
        sent as HTTP Basic with the secret from \
        --token-exchange-client-secret-file, or alone as the `client_id` \
        form field (a public client).",
};

/// `--token-exchange-client-secret-file`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static TOKEN_EXCHANGE_CLIENT_SECRET_FILE: FlagSpec = FlagSpec {
    long: "token-exchange-client-secret-file",
    env: "WICP_TOKEN_EXCHANGE_CLIENT_SECRET_FILE",
    takes: Takes::One,
    value: "PATH",
    default: "",
    help: "File holding the OAuth client secret (one line; read at start, never \
        logged).",
};

/// `--token-exchange-requested-token-type`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static TOKEN_EXCHANGE_REQUESTED_TOKEN_TYPE: FlagSpec = FlagSpec {
    long: "token-exchange-requested-token-type",
    env: "WICP_TOKEN_EXCHANGE_REQUESTED_TOKEN_TYPE",
    takes: Takes::One,
    value: "URI",
    default: "",
    help: "`requested_token_type` parameter; the answer's `issued_token_type` \
        must then match it.",
};

/// `--token-exchange-resource`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static TOKEN_EXCHANGE_RESOURCE: FlagSpec = FlagSpec {
    long: "token-exchange-resource",
    env: "WICP_TOKEN_EXCHANGE_RESOURCE",
    takes: Takes::List,
    value: "URI",
    default: "",
    help: "`resource` parameter: the absolute URI of the service the issued \
        token is for. Repeatable (or comma-separated in the variable).",
};

/// `--token-exchange-scope`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static TOKEN_EXCHANGE_SCOPE: FlagSpec = FlagSpec {
    long: "token-exchange-scope",
    env: "WICP_TOKEN_EXCHANGE_SCOPE",
    takes: Takes::One,
    value: "SCOPE",
    default: "",
    help: "`scope` parameter (space-separated scopes, as RFC 6749 writes them).",
};

/// `--token-exchange-subject-token-type`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static TOKEN_EXCHANGE_SUBJECT_TOKEN_TYPE: FlagSpec = FlagSpec {
    long: "token-exchange-subject-token-type",
    env: "WICP_TOKEN_EXCHANGE_SUBJECT_TOKEN_TYPE",
    takes: Takes::One,
    value: "URI",
    default: JWT_TOKEN_TYPE,
    help: "`subject_token_type` sent with the service account token.",
};

/// `--token-exchange-url`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static TOKEN_EXCHANGE_URL: FlagSpec = FlagSpec {
    long: "token-exchange-url",
    env: "WICP_TOKEN_EXCHANGE_URL",
    takes: Takes::One,
    value: "URL",
    default: "",
    help: "The token server's token endpoint, as a full URL \
        (https://sts.example.com/oauth2/token). Only this flag says where \
        the service account token is sent.",
};

/// `--token-exchange-username`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static TOKEN_EXCHANGE_USERNAME: FlagSpec = FlagSpec {
    long: "token-exchange-username",
    env: "WICP_TOKEN_EXCHANGE_USERNAME",
    takes: Takes::One,
    value: "NAME",
    default: "",
    help: "The registry username returned with the issued token (one of this \
        and --token-exchange-username-field is required).",
};

/// `--token-exchange-username-field`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static TOKEN_EXCHANGE_USERNAME_FIELD: FlagSpec = FlagSpec {
    long: "token-exchange-username-field",
    env: "WICP_TOKEN_EXCHANGE_USERNAME_FIELD",
    takes: Takes::One,
    value: "FIELD",
    default: "",
    help: "A top-level string field of the token server's answer that holds the \
        registry username (instead of a fixed --token-exchange-username).",
};

#[allow(
    rustdoc::bare_urls,
    rustdoc::invalid_html_tags,
    rustdoc::broken_intra_doc_links
)]
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// [`TOKEN_EXCHANGE_URL`].
    pub token_exchange_url: Option<String>,

    /// [`TOKEN_EXCHANGE_SUBJECT_TOKEN_TYPE`].
    pub token_exchange_subject_token_type: String,

    /// [`TOKEN_EXCHANGE_AUDIENCE`].
    pub token_exchange_audience: Vec<String>,

    /// [`TOKEN_EXCHANGE_RESOURCE`].
    pub token_exchange_resource: Vec<String>,

    /// [`TOKEN_EXCHANGE_SCOPE`].
    pub token_exchange_scope: Option<String>,

    /// [`TOKEN_EXCHANGE_REQUESTED_TOKEN_TYPE`].
    pub token_exchange_requested_token_type: Option<String>,

    /// [`TOKEN_EXCHANGE_USERNAME`].
    pub token_exchange_username: Option<String>,

    /// [`TOKEN_EXCHANGE_USERNAME_FIELD`].
    pub token_exchange_username_field: Option<String>,

    /// [`TOKEN_EXCHANGE_CLIENT_ID`].
    pub token_exchange_client_id: Option<String>,

    /// [`TOKEN_EXCHANGE_CLIENT_SECRET_FILE`].
    pub token_exchange_client_secret_file: Option<PathBuf>,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] = &[
        &TOKEN_EXCHANGE_URL,
        &TOKEN_EXCHANGE_SUBJECT_TOKEN_TYPE,
        &TOKEN_EXCHANGE_AUDIENCE,
        &TOKEN_EXCHANGE_RESOURCE,
        &TOKEN_EXCHANGE_SCOPE,
        &TOKEN_EXCHANGE_REQUESTED_TOKEN_TYPE,
        &TOKEN_EXCHANGE_USERNAME,
        &TOKEN_EXCHANGE_USERNAME_FIELD,
        &TOKEN_EXCHANGE_CLIENT_ID,
        &TOKEN_EXCHANGE_CLIENT_SECRET_FILE,
    ];
    const HEADING: &'static str = "Token exchange (RFC 8693)";

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            token_exchange_url: given.text(&TOKEN_EXCHANGE_URL)?,
            token_exchange_subject_token_type: given
                .text(&TOKEN_EXCHANGE_SUBJECT_TOKEN_TYPE)?
                .unwrap_or_default(),
            token_exchange_audience: given.list(&TOKEN_EXCHANGE_AUDIENCE)?,
            token_exchange_resource: given.list(&TOKEN_EXCHANGE_RESOURCE)?,
            token_exchange_scope: given.text(&TOKEN_EXCHANGE_SCOPE)?,
            token_exchange_requested_token_type: given
                .text(&TOKEN_EXCHANGE_REQUESTED_TOKEN_TYPE)?,
            token_exchange_username: given.text(&TOKEN_EXCHANGE_USERNAME)?,
            token_exchange_username_field: given.text(&TOKEN_EXCHANGE_USERNAME_FIELD)?,
            token_exchange_client_id: given.text(&TOKEN_EXCHANGE_CLIENT_ID)?,
            token_exchange_client_secret_file: given.path(&TOKEN_EXCHANGE_CLIENT_SECRET_FILE),
        })
    }
}

/// A client secret file is one line; anything this large is not one.
const MAX_CLIENT_SECRET_FILE_BYTES: u64 = 4096;

pub static PROVIDER: Provider = allowlist::declare::<TokenExchange>(allowlist::About {
    name: "token-exchange",
    summary: "OAuth 2.0 Token Exchange (RFC 8693) at the admin's token server (--registry only)",
    audience: "whatever the token server trusts (--audience)",
    annotations: &[],
});

/// Where the registry username comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Username {
    Fixed(String),
    Field(String),
}

/// How the client authenticates to the token server.
enum Client {
    None,
    Public(String),
    Basic { id: String, secret: Secret },
}

pub struct TokenExchange {
    /// Proxy and trust settings, for the client built on a cache miss.
    net: Arc<net::Settings>,
    url: String,
    subject_token_type: String,
    audiences: Vec<String>,
    resources: Vec<String>,
    scope: Option<String>,
    requested_token_type: Option<String>,
    username: Username,
    client: Client,
}

impl Guarded for TokenExchange {
    type Options = Options;
    const GUARDS: &'static str = "the exchanged token";

    fn new(options: &Options, net: Arc<net::Settings>) -> Result<Self> {
        let subject_token_type = token_type(
            &TOKEN_EXCHANGE_SUBJECT_TOKEN_TYPE,
            &options.token_exchange_subject_token_type,
        )?;
        let requested_token_type = options
            .token_exchange_requested_token_type
            .as_deref()
            .map(|t| token_type(&TOKEN_EXCHANGE_REQUESTED_TOKEN_TYPE, t))
            .transpose()?;
        let scope = options
            .token_exchange_scope
            .as_ref()
            .map(|s| plain(&TOKEN_EXCHANGE_SCOPE, std::slice::from_ref(s)))
            .transpose()?
            .and_then(|mut v| v.pop());
        Ok(TokenExchange {
            net,
            url: endpoint(options)?,
            subject_token_type,
            audiences: plain(&TOKEN_EXCHANGE_AUDIENCE, &options.token_exchange_audience)?,
            resources: resources(&options.token_exchange_resource)?,
            scope,
            requested_token_type,
            username: username(options)?,
            client: client(options)?,
        })
    }

    fn plan<'a>(&'a self, cx: &Context<'a>, token: &'a ServiceAccountToken) -> Result<Plan<'a>> {
        let inputs = vec![
            Input::setting("registry", cx.image.registry().to_string()),
            Input::identity("url", self.url.clone()),
            Input::setting("subject_token_type", self.subject_token_type.clone()),
            Input::identity("audience", self.audiences.join(" ")),
            Input::setting("resource", self.resources.join(" ")),
            Input::setting("scope", self.scope.clone().unwrap_or_default()),
            Input::setting(
                "requested_token_type",
                self.requested_token_type.clone().unwrap_or_default(),
            ),
            Input::setting(
                "username",
                match &self.username {
                    Username::Fixed(name) => name.clone(),
                    Username::Field(field) => format!("field {field}"),
                },
            ),
            Input::identity("client", self.client_input()),
        ];
        Ok(Plan::for_registry(
            &PROVIDER,
            cx.image,
            inputs,
            move |deadline| {
                let call = http::Call::new(
                    "the token server",
                    format!("the token exchange at {}", self.url),
                );
                let service_account = token.service_account().to_string();
                let claims = token.claims();
                let reply = http::block_on(deadline, &call, async {
                    let client = self.net.client(deadline)?;
                    let form = self.form(token.secret());
                    http::send(
                        &client,
                        wicp_net::observe::Endpoint::TokenExchange,
                        || {
                            let request = client
                                .post(&self.url)
                                .header(reqwest::header::ACCEPT, "application/json")
                                .form(&form);
                            match &self.client {
                                Client::Basic { id, secret } => request.basic_auth(
                                    form_urlencode(id),
                                    Some(form_urlencode(secret.expose())),
                                ),
                                _ => request,
                            }
                        },
                        &call,
                        deadline,
                    )
                    .await
                })?;
                let issued = interpret(
                    &reply,
                    unix_now(),
                    &Describe {
                        url: &self.url,
                        service_account: &service_account,
                        issuer: &claims.issuer,
                        subject: &claims.subject,
                        requested_token_type: self.requested_token_type.as_deref(),
                        username: &self.username,
                    },
                )?;
                wicp_base::log::debug!(
                    "the token server at {} issued a token for {service_account} that expires at {}",
                    self.url,
                    duration::format_unix(issued.expires_at)
                );
                Ok(issued)
            },
        ))
    }
}

impl TokenExchange {
    /// The form fields, in a fixed order, without the subject token.
    fn form<'a>(&'a self, subject_token: &'a Secret) -> Vec<(&'static str, &'a str)> {
        let mut form = vec![
            ("grant_type", GRANT_TYPE),
            ("subject_token", subject_token.expose()),
            ("subject_token_type", self.subject_token_type.as_str()),
        ];
        form.extend(self.resources.iter().map(|r| ("resource", r.as_str())));
        form.extend(self.audiences.iter().map(|a| ("audience", a.as_str())));
        if let Some(scope) = &self.scope {
            form.push(("scope", scope));
        }
        if let Some(t) = &self.requested_token_type {
            form.push(("requested_token_type", t));
        }
        if let Client::Public(id) = &self.client {
            form.push(("client_id", id));
        }
        form
    }

    fn client_input(&self) -> String {
        match &self.client {
            Client::None => "none".to_string(),
            Client::Public(id) => format!("public {id}"),
            Client::Basic { id, .. } => format!("basic {id}"),
        }
    }
}

/// Why a username is unusable, if it is: the kubelet and every client send
/// it as HTTP Basic, where a `:` would end it.
fn check_username(name: &str) -> std::result::Result<String, &'static str> {
    if name.is_empty() {
        return Err("is empty");
    }
    if name.chars().count() > MAX_USERNAME_CHARS {
        return Err("is too long");
    }
    if name.chars().any(|c| c == ':' || c.is_control()) {
        return Err("contains a ':' or a control character");
    }
    Ok(name.to_string())
}

/// The token endpoint: `--token-exchange-url`, an https URL (or a
/// loopback http one) without user information.
fn endpoint(options: &Options) -> Result<String> {
    let url = options.token_exchange_url.as_deref().ok_or_else(|| {
        Error::config("the token-exchange provider has no token server (--token-exchange-url is not set)")
            .fix("pass --token-exchange-url https://HOST/PATH (or WICP_TOKEN_EXCHANGE_URL) with the token server's token endpoint")
    })?;
    let url = http::endpoint_override(&TOKEN_EXCHANGE_URL, url)?;
    if url.contains('@') {
        return Err(Error::flag(
            &TOKEN_EXCHANGE_URL,
            format!("{} carries user information", quote(&url)),
        )
        .fix("remove the user:password@ part; client credentials go in --token-exchange-client-id and --token-exchange-client-secret-file"));
    }
    Ok(url)
}

/// A token type URI flag's value, trimmed.
fn token_type(flag: &'static FlagSpec, value: &str) -> Result<String> {
    let v = value.trim();
    if v.is_empty() || !v.contains(':') || v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(
            Error::flag(flag, format!("{} is not a token type URI", quote(value)))
                .fix("write a token type URI such as urn:ietf:params:oauth:token-type:jwt"),
        );
    }
    Ok(v.to_string())
}

/// The values of a free-text flag, trimmed: each non-empty and without
/// control characters.
fn plain(flag: &'static FlagSpec, values: &[String]) -> Result<Vec<String>> {
    values
        .iter()
        .map(|v| {
            let v = v.trim();
            if v.is_empty() || v.chars().any(char::is_control) {
                Err(Error::flag(
                    flag,
                    format!("{} is empty or has control characters", quote(v)),
                )
                .fix(format!("give {flag} a non-empty value or leave it out")))
            } else {
                Ok(v.to_string())
            }
        })
        .collect()
}

/// `--token-exchange-resource`: absolute URIs without a fragment.
fn resources(values: &[String]) -> Result<Vec<String>> {
    let resources = plain(&TOKEN_EXCHANGE_RESOURCE, values)?;
    for r in &resources {
        // RFC 8693 §2.1: "an absolute URI ... MUST NOT include a fragment".
        if !r.contains("://") || r.contains('#') {
            return Err(Error::flag(
                &TOKEN_EXCHANGE_RESOURCE,
                format!("{} is not an absolute URI without a fragment", quote(r)),
            )
            .fix("write the resource as https://host/path (RFC 8693 §2.1), or use --token-exchange-audience for a logical name"));
        }
    }
    Ok(resources)
}

/// Where the registry username comes from: exactly one of
/// `--token-exchange-username` and `--token-exchange-username-field`.
fn username(options: &Options) -> Result<Username> {
    Ok(
        match (
            options.token_exchange_username.as_deref(),
            options.token_exchange_username_field.as_deref(),
        ) {
            (Some(_), Some(_)) => {
                return Err(Error::config(
                    "--token-exchange-username and --token-exchange-username-field are both set",
                )
                .fix("keep one: a fixed username, or the answer's field that holds it"));
            }
            (None, None) => {
                return Err(Error::config("the token-exchange provider has no registry username")
                .fix("pass --token-exchange-username NAME (what the registry expects with the issued token), or --token-exchange-username-field FIELD to read it from the token server's answer"));
            }
            (Some(name), None) => Username::Fixed(check_username(name).map_err(|why| {
                Error::flag(&TOKEN_EXCHANGE_USERNAME, format!("{} {why}", quote(name)))
                    .fix("write the registry account name the issued token belongs to")
            })?),
            (None, Some(field)) => {
                let ok = !field.is_empty()
                    && field.len() <= 64
                    && field
                        .bytes()
                        .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b'.');
                if !ok {
                    return Err(Error::flag(
                        &TOKEN_EXCHANGE_USERNAME_FIELD,
                        format!("{} is not a field name", quote(field)),
                    )
                    .fix("name a top-level field of the answer, such as username"));
                }
                Username::Field(field.to_string())
            }
        },
    )
}

/// How the plugin authenticates to the token server, if at all.
fn client(options: &Options) -> Result<Client> {
    Ok(
        match (
            options.token_exchange_client_id.as_deref().map(str::trim),
            options.token_exchange_client_secret_file.as_deref(),
        ) {
            (None, None) => Client::None,
            (None, Some(_)) => {
                return Err(Error::flag(
                    &TOKEN_EXCHANGE_CLIENT_SECRET_FILE,
                    "is set without --token-exchange-client-id",
                )
                .fix("pass the client ID the secret belongs to with --token-exchange-client-id"));
            }
            (Some(""), _) => {
                return Err(Error::flag(&TOKEN_EXCHANGE_CLIENT_ID, "is empty")
                .fix("pass the OAuth client ID registered at the token server, or leave the flag out"));
            }
            (Some(id), None) => Client::Public(id.to_string()),
            (Some(id), Some(path)) => {
                let shown = path.display();
                let (bytes, warning) = wicp_base::file::read_secret(path, MAX_CLIENT_SECRET_FILE_BYTES)
                .map_err(|refused| {
                    let why = match refused {
                        wicp_base::file::Refused::Unreadable(why) => why,
                        wicp_base::file::Refused::TooLarge => format!(
                            "it is larger than {MAX_CLIENT_SECRET_FILE_BYTES} bytes, not a client secret"
                        ),
                    };
                    Error::config(format!(
                        "cannot read --token-exchange-client-secret-file {shown}: {why}"
                    ))
                    .fix("point it at a regular file holding only the client secret, owned by root and readable by it only (chmod 0600)")
                })?;
                if let Some(warning) = warning {
                    wicp_base::log::warning!("{warning}");
                }
                let text = String::from_utf8(bytes).map_err(|_| {
                    Error::flag(
                        &TOKEN_EXCHANGE_CLIENT_SECRET_FILE,
                        format!("{shown} is not UTF-8 text"),
                    )
                    .fix("write only the client secret in the file")
                })?;
                let secret = text.trim_end_matches(['\r', '\n']);
                if secret.is_empty() || secret.contains(['\r', '\n']) {
                    return Err(Error::flag(
                        &TOKEN_EXCHANGE_CLIENT_SECRET_FILE,
                        format!("{} is empty or holds more than one line", path.display()),
                    )
                    .fix("write only the client secret in the file"));
                }
                Client::Basic {
                    id: id.to_string(),
                    secret: Secret::from_admin(secret),
                }
            }
        },
    )
}

/// Whether an `invalid_request` description is about the subject token
/// (its issuer, subject, audience, expiry or signature) rather than about
/// the request's shape (a missing or unknown parameter): RFC 8693 §2.2.2
/// gives both the same code, and they call for different fixes.
fn about_the_subject_token(description: Option<&str>) -> bool {
    let Some(text) = description.map(str::to_ascii_lowercase) else {
        return false;
    };
    let token = [
        "subject_token",
        "subject token",
        "jwt",
        "issuer",
        "audience",
        "expired",
        "signature",
        "not trusted",
        "untrusted",
        "invalid token",
        "token is invalid",
    ];
    // "Missing parameter: subject_token" is about the request's shape.
    let missing = ["missing", "required", "must be present"]
        .iter()
        .any(|w| text.contains(w));
    !missing && token.iter().any(|w| text.contains(w))
}

/// What `interpret` needs to read and explain an answer (public for the
/// fuzz targets).
pub struct Describe<'a> {
    pub url: &'a str,
    pub service_account: &'a str,
    pub issuer: &'a str,
    pub subject: &'a str,
    pub requested_token_type: Option<&'a str>,
    pub username: &'a Username,
}

/// The error for a refusal: what the token server said, and the fix its
/// OAuth error code (RFC 6749 §5.2, RFC 8693 §2.2.2) points to.
fn refusal(reply: &Reply, d: &Describe<'_>) -> Error {
    let url = d.url;
    let upstream = oauth::error_body(&reply.body);
    let code = upstream.as_ref().map(|u| u.code.as_str());
    let description = upstream.as_ref().and_then(|u| u.description.as_deref());
    let fix = refusal_fix(code, description, reply.status, d);
    let what = match &upstream {
        Some(u) => u.summary(reply.status),
        None => format!(
            "HTTP {} with {}",
            reply.status,
            wicp_base::redact::body_shape(&reply.body)
        ),
    };
    Error::upstream(format!(
        "the token server at {url} {} the token exchange for {}: {what}",
        wicp_base::redact::verb(reply.status),
        d.service_account
    ))
    .fix(fix)
    .answered("the token server", reply.status, &reply.body)
}

/// The fix for a refusal with OAuth error `code` (and `description`) and
/// HTTP `status`.
fn refusal_fix(
    code: Option<&str>,
    description: Option<&str>,
    status: u16,
    d: &Describe<'_>,
) -> String {
    match code {
        Some("invalid_grant") => format!(
            "the token server did not accept the service account token: check that it trusts the cluster's issuer ({}) \
             and this subject ({}), and that the token's audience (tokenAttributes.serviceAccountTokenAudience, --audience) \
             is one it accepts",
            d.issuer, d.subject
        ),
        Some("invalid_client" | "unauthorized_client") => {
            "the token server wants a client it knows: check --token-exchange-client-id and the secret in \
             --token-exchange-client-secret-file, and that the client may use the token-exchange grant"
                .to_string()
        }
        Some("invalid_target") => {
            "the token server will not issue a token for the requested target: check --token-exchange-audience \
             and --token-exchange-resource against what it allows"
                .to_string()
        }
        Some("invalid_scope") => {
            "the token server refused the scope: check --token-exchange-scope".to_string()
        }
        // RFC 8693 §2.2.2: invalid_request also when the subject token
        // "is invalid for any reason, or unacceptable based on policy".
        Some("invalid_request")
            if about_the_subject_token(description) =>
        {
            format!(
                "the token server refused the service account token (RFC 8693 invalid_request about the subject token): \
                 check that it trusts the cluster's issuer ({}) and this subject ({}), that the token's audience \
                 (tokenAttributes.serviceAccountTokenAudience, --audience) is one it accepts, and that the token has not expired",
                d.issuer, d.subject
            )
        }
        Some("invalid_request") => {
            "the token server found the request malformed: check that --token-exchange-url is its token endpoint \
             and that token exchange (RFC 8693) is enabled there"
                .to_string()
        }
        Some("unsupported_grant_type") => {
            "the server does not do RFC 8693 token exchange at this URL: check that --token-exchange-url is its token \
             endpoint and that the token-exchange grant is enabled for this client"
                .to_string()
        }
        Some("unsupported_token_type") => {
            "the token server does not take this subject token type: check --token-exchange-subject-token-type \
             (and --token-exchange-requested-token-type)"
                .to_string()
        }
        _ if http::is_retryable_status(status) => {
            http::retries_spent("the token server", "the token server")
        }
        _ if status == 401 => {
            "the token server wants client authentication: set --token-exchange-client-id (and \
             --token-exchange-client-secret-file)"
                .to_string()
        }
        _ => "check --token-exchange-url and the node's proxy settings: the answer is not an OAuth error"
            .to_string(),
    }
}

/// Reads the token server's answer, seen at `now`.
pub fn interpret(reply: &Reply, now: i64, d: &Describe<'_>) -> Result<Credential> {
    let url = d.url;
    if !reply.is_success() {
        return Err(refusal(reply, d));
    }
    let malformed = |why: String| {
        let from = format!(
            "the token server at {url}, asked for {},",
            d.service_account
        );
        reply.unusable("the token server", from, &why).fix("check that --token-exchange-url is the token endpoint; a proxy or another service may be answering instead")
    };
    let (body, access_token) = reply.token_field("access_token").map_err(malformed)?;
    let issued_type = body
        .get("issued_token_type")
        .and_then(serde_json::Value::as_str);
    if let (Some(wanted), Some(issued)) = (d.requested_token_type, issued_type)
        && wanted != issued
    {
        return Err(malformed(format!(
            "a token of type {} instead of the requested {}",
            quote(&wicp_base::redact::clean(issued, 100)),
            quote(wanted)
        )));
    }
    let expires_at = match oauth::expires_in(body.get("expires_in")) {
        Some(s) if s > 0 => now.saturating_add(s),
        Some(_) => return Err(malformed("an expires_in that is not positive".to_string())),
        None => wicp_kubelet::request::token::unverified_expiry(access_token.expose()).ok_or_else(|| {
            malformed("no expires_in and an access_token that is not a JWT with an exp claim, so its lifetime is unknown".to_string())
        })?,
    };
    if expires_at <= now {
        return Err(malformed(format!(
            "a token that expired already (at {})",
            duration::format_unix(expires_at)
        )));
    }
    let username = match d.username {
        Username::Fixed(name) => name.clone(),
        Username::Field(field) => {
            let value = body
                .get(field)
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| malformed(format!("no string field {field:?} for the username")))?;
            check_username(value)
                .map_err(|why| malformed(format!("a username in {field:?} that {why}")))?
        }
    };
    Ok(Credential {
        username,
        password: access_token,
        expires_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Exchanger, allowlist::Allowlisted};
    use wicp_kubelet::request::image::ImageRef;
    use wicp_net::http::reply;

    fn options(url: &str) -> Options {
        Options {
            token_exchange_url: Some(url.into()),
            token_exchange_subject_token_type: JWT_TOKEN_TYPE.into(),
            token_exchange_username: Some("robot".into()),
            ..Options::default()
        }
    }

    fn registries() -> allowlist::Options {
        allowlist::Options {
            registries: vec!["registry.example.com".into()],
        }
    }

    fn describe(username: &Username) -> Describe<'_> {
        Describe {
            url: "https://sts.example.com/token",
            service_account: "team/puller",
            issuer: "https://oidc.cluster.test",
            subject: "system:serviceaccount:team:puller",
            requested_token_type: Some("urn:ietf:params:oauth:token-type:access_token"),
            username,
        }
    }

    fn jwt_with_exp(exp: i64) -> String {
        wicp_kubelet::request::token::jwt(
            r#"{"alg":"RS256"}"#,
            &format!(r#"{{"exp":{exp},"sub":"x"}}"#),
        )
    }

    #[test]
    fn flags_are_checked() {
        assert!(
            TokenExchange::new(&options("https://sts.example.com/token"), Arc::default()).is_ok()
        );
        let err = |o: Options| {
            TokenExchange::new(&o, Arc::default())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(
            err(Options {
                token_exchange_url: None,
                ..options("x")
            })
            .contains("--token-exchange-url is not set")
        );
        assert!(err(options("ftp://sts.example.com")).contains("not an http(s) URL"));
        // The flag and its problem, as facts.
        let facts = |o: Options| {
            let e = TokenExchange::new(&o, Arc::default()).err().unwrap();
            assert_eq!(e.kind(), wicp_base::error::Kind::Config, "{e}");
            (e.flagged(), e.problem().map(str::to_string))
        };
        let (flag, problem) = facts(Options {
            token_exchange_username: None,
            token_exchange_username_field: Some("user name".into()),
            ..options("https://a")
        });
        assert_eq!(flag, Some((&TOKEN_EXCHANGE_USERNAME_FIELD).into()));
        assert_eq!(
            problem.as_deref(),
            Some("\"user name\" is not a field name")
        );
        let (flag, _) = facts(Options {
            token_exchange_resource: vec!["registry".into()],
            ..options("https://a")
        });
        assert_eq!(flag, Some((&TOKEN_EXCHANGE_RESOURCE).into()));
        assert!(err(options("https://u:p@sts.example.com/token")).contains("user information"));
        assert!(
            err(Options {
                token_exchange_username: None,
                ..options("https://a")
            })
            .contains("no registry username")
        );
        assert!(
            err(Options {
                token_exchange_username_field: Some("username".into()),
                ..options("https://a")
            })
            .contains("both set")
        );
        assert!(
            err(Options {
                token_exchange_username: Some("a:b".into()),
                ..options("https://a")
            })
            .contains("':'")
        );
        assert!(
            err(Options {
                token_exchange_username: None,
                token_exchange_username_field: Some("user name".into()),
                ..options("https://a")
            })
            .contains("not a field name")
        );
        assert!(
            err(Options {
                token_exchange_subject_token_type: "jwt".into(),
                ..options("https://a")
            })
            .contains("not a token type URI")
        );
        assert!(
            err(Options {
                token_exchange_resource: vec!["registry".into()],
                ..options("https://a")
            })
            .contains("absolute URI")
        );
        assert!(
            err(Options {
                token_exchange_client_secret_file: Some("/nonexistent".into()),
                ..options("https://a")
            })
            .contains("without --token-exchange-client-id")
        );
        assert!(
            err(Options {
                token_exchange_client_id: Some("c".into()),
                token_exchange_client_secret_file: Some("/nonexistent/secret".into()),
                ..options("https://a")
            })
            .contains("cannot read")
        );
    }

    #[test]
    fn form_has_the_rfc_8693_fields_in_order() {
        let mut o = options("https://sts.example.com/token");
        o.token_exchange_audience = vec!["registry".into(), "other".into()];
        o.token_exchange_resource = vec!["https://registry.example.com".into()];
        o.token_exchange_scope = Some("repository:pull".into());
        o.token_exchange_requested_token_type =
            Some("urn:ietf:params:oauth:token-type:access_token".into());
        o.token_exchange_client_id = Some("kubelet".into());
        let x = TokenExchange::new(&o, Arc::default()).unwrap();
        let secret = Secret::new("SUBJECT");
        assert_eq!(
            x.form(&secret),
            vec![
                ("grant_type", GRANT_TYPE),
                ("subject_token", "SUBJECT"),
                ("subject_token_type", JWT_TOKEN_TYPE),
                ("resource", "https://registry.example.com"),
                ("audience", "registry"),
                ("audience", "other"),
                ("scope", "repository:pull"),
                (
                    "requested_token_type",
                    "urn:ietf:params:oauth:token-type:access_token"
                ),
                ("client_id", "kubelet"),
            ]
        );
    }

    #[test]
    fn reads_a_token_and_its_lifetime() {
        let fixed = Username::Fixed("robot".into());
        let c = interpret(
            &reply(200, r#"{"access_token":"opaque","issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":600}"#),
            1000,
            &describe(&fixed),
        )
        .unwrap();
        assert_eq!(
            (c.username.as_str(), c.password.expose(), c.expires_at),
            ("robot", "opaque", 1600)
        );
        // No expires_in: the JWT's exp.
        let jwt = jwt_with_exp(5000);
        let c = interpret(
            &reply(
                200,
                &format!(r#"{{"access_token":"{jwt}","token_type":"N_A"}}"#),
            ),
            1000,
            &describe(&fixed),
        )
        .unwrap();
        assert_eq!(c.expires_at, 5000);
        // Username from a field.
        let field = Username::Field("username".into());
        let c = interpret(
            &reply(
                200,
                r#"{"access_token":"t","expires_in":"60","username":"svc-team"}"#,
            ),
            0,
            &describe(&field),
        )
        .unwrap();
        assert_eq!((c.username.as_str(), c.expires_at), ("svc-team", 60));
    }

    #[test]
    fn refuses_a_broken_success() {
        let fixed = Username::Fixed("robot".into());
        let field = Username::Field("username".into());
        let past = jwt_with_exp(10);
        for (body, username, needle) in [
            ("<html>portal</html>", &fixed, "not a JSON token response"),
            (r#"{"expires_in":60}"#, &fixed, "no access_token"),
            (
                r#"{"access_token":"","expires_in":60}"#,
                &fixed,
                "no access_token",
            ),
            (
                r#"{"access_token":"opaque"}"#,
                &fixed,
                "lifetime is unknown",
            ),
            (
                r#"{"access_token":"opaque","expires_in":0}"#,
                &fixed,
                "not positive",
            ),
            (
                &format!(r#"{{"access_token":"{past}"}}"#),
                &fixed,
                "expired already",
            ),
            (
                r#"{"access_token":"opaque","expires_in":60,"issued_token_type":"urn:ietf:params:oauth:token-type:id_token"}"#,
                &fixed,
                "instead of the requested",
            ),
            (
                r#"{"access_token":"opaque","expires_in":60}"#,
                &field,
                "no string field",
            ),
            (
                r#"{"access_token":"opaque","expires_in":60,"username":"a:b"}"#,
                &field,
                "':'",
            ),
        ] {
            let read = interpret(&reply(200, body), 1000, &describe(username));
            http::assert_refused(read, needle, "opaque");
        }
    }

    #[test]
    fn explains_refusals() {
        let fixed = Username::Fixed("robot".into());
        for (status, body, what, fix) in [
            (
                400,
                r#"{"error":"invalid_grant","error_description":"subject eyJhbGciOiJSUzI1NiJ9.eyJ4IjoxfQ.c2ln rejected"}"#,
                "refused the token exchange for team/puller: HTTP 400 invalid_grant: \"subject <token> rejected\"",
                "issuer (https://oidc.cluster.test)",
            ),
            (
                401,
                r#"{"error":"invalid_client"}"#,
                "HTTP 401 invalid_client",
                "--token-exchange-client-id",
            ),
            (
                400,
                r#"{"error":"invalid_target"}"#,
                "HTTP 400 invalid_target",
                "--token-exchange-audience",
            ),
            (
                400,
                r#"{"error":"unsupported_grant_type"}"#,
                "HTTP 400 unsupported_grant_type",
                "token-exchange grant is enabled",
            ),
            // RFC 8693 §2.2.2: invalid_request about the subject token is a
            // refusal of the token, not a wrong endpoint.
            (
                400,
                r#"{"error":"invalid_request","error_description":"subject_token: issuer is not trusted"}"#,
                "HTTP 400 invalid_request",
                "refused the service account token",
            ),
            (
                400,
                r#"{"error":"invalid_request","error_description":"The subject token has expired"}"#,
                "HTTP 400 invalid_request",
                "has not expired",
            ),
            (
                400,
                r#"{"error":"invalid_request","error_description":"Missing parameter: subject_token"}"#,
                "HTTP 400 invalid_request",
                "found the request malformed",
            ),
            (
                400,
                r#"{"error":"invalid_request"}"#,
                "HTTP 400 invalid_request",
                "is its token endpoint",
            ),
            (
                400,
                r#"{"error":"unsupported_token_type"}"#,
                "HTTP 400 unsupported_token_type",
                "--token-exchange-subject-token-type",
            ),
            (429, "", "HTTP 429 with empty body", "throttling"),
            (
                500,
                "<html>oops</html>",
                "failed the token exchange",
                "throttling",
            ),
            (403, "forbidden", "HTTP 403 with", "--token-exchange-url"),
        ] {
            let e = interpret(&reply(status, body), 0, &describe(&fixed)).unwrap_err();
            assert!(
                e.what()
                    .starts_with("the token server at https://sts.example.com/token "),
                "{e}"
            );
            assert!(e.what().contains(what), "{body}: {e}");
            assert!(e.remedy().unwrap().contains(fix), "{body}: {e}");
        }
    }

    #[test]
    fn serves_only_allowed_registries() {
        let x = Allowlisted::<TokenExchange>::new(
            &PROVIDER,
            &registries(),
            &options("https://a"),
            Arc::default(),
        )
        .unwrap();
        let image = |s: &str| ImageRef::parse(s).unwrap();
        assert!(x.serves(&image("registry.example.com/app")));
        assert!(!x.serves(&image("registry.example.com.evil.net/app")));
        assert!(!x.serves(&image("registry.example.com:444/app")));
        let none = Allowlisted::<TokenExchange>::new(
            &PROVIDER,
            &allowlist::Options::default(),
            &options("https://a"),
            Arc::default(),
        )
        .unwrap();
        assert!(!none.serves(&image("registry.example.com/app")));
    }
}
