//! Vault: the pod's service account token logs in to HashiCorp Vault, and a
//! KV secret that only that identity may read holds the registry's username
//! and password. Any registry with static credentials (Docker Hub, GHCR, a
//! private Harbor) becomes reachable per pod.
//!
//! Two calls on the shared HTTP client, from Vault's API documentation
//! (developer.hashicorp.com/vault/api-docs) and its plugins' source:
//!
//! 1. Login, `POST {address}/v1/auth/<mount>/login` with JSON
//!    `{"role": ROLE, "jwt": TOKEN}`, for both the Kubernetes auth method
//!    (api-docs/auth/kubernetes, "Login"; hashicorp/vault-plugin-auth-kubernetes
//!    `path_login.go`: fields `role` and `jwt`) and the JWT auth method
//!    (api-docs/auth/jwt, "JWT login"; vault-plugin-auth-jwt `path_login.go`:
//!    the same fields, the role lowercased). The answer's `auth.client_token`
//!    and `auth.lease_duration` (seconds) are read. Kubernetes auth refuses
//!    an unknown role with 400 `invalid role name "R"` and an identity the
//!    role is not bound to with 403 (`service account name not authorized`,
//!    `namespace not authorized`, `permission denied`); JWT auth with 400
//!    `role "R" could not be found` and 400 claim errors.
//! 2. Read, with `X-Vault-Token`: KV v1 `GET {address}/v1/<mount>/<path>`
//!    (api-docs/secret/kv/kv-v1: `{"data":{...},"lease_duration":N}`, the
//!    lease only advisory, from a `ttl` key or the mount default) or KV v2
//!    `GET {address}/v1/<mount>/data/<path>` (api-docs/secret/kv/kv-v2:
//!    `{"data":{"data":{...},"metadata":{...}}}`, no lease). A policy that
//!    does not grant `read` gives 403 `permission denied`; no secret, 404.
//!
//! 3. Revoke the login token, `POST {address}/v1/auth/token/revoke-self`
//!    (api-docs/auth/token), best effort, unless `--vault-keep-login-token`:
//!    a token left alive until its TTL is one more credential to steal.
//!
//! Vault Enterprise namespaces go in the `X-Vault-Namespace` header of every
//! call (docs/enterprise/namespaces: "providing the relative request path
//! along with the namespace path using the X-Vault-Namespace header"), from
//! `--vault-namespace`.
//!
//! What the tenant may choose, and what not: the Vault address, namespace,
//! auth method and mount, KV mount and version, field names and the secret
//! path's prefix or template all come from the admin's flags. An annotation
//! may only name the role (Vault checks that the role is bound to this
//! service account) and, if the admin set `--vault-secret-prefix`, a secret
//! path under that prefix. Both are checked by anchored patterns
//! ([`path`]) before any network call, so no annotation reaches another
//! Vault path, another host or another scheme. The registry credential is
//! only handed to registries allowed with `--registry`.
//!
//! `cacheDuration`: the login token's lease and the read's lease, whichever
//! ends first (0 means none), capped as everywhere. Vault does not tie
//! either to the service account token's `exp` (both auth methods set the
//! token's TTL from the role, `role.PopulateTokenAuth`), and the secret
//! itself is static, so the token's `exp` does not bound it.

pub mod path;
pub mod wire;

use crate::Input;
use crate::allowlist::{self, Guarded};
use crate::{Context, Credential, Plan, Provider};
use std::sync::Arc;
use wicp_base::deadline::Deadline;
use wicp_base::duration;
use wicp_base::error::{Error, Result, quote};
use wicp_base::flags::{FlagSpec, Flags, Given, Takes, Usage, defaulted};
use wicp_base::secret::Secret;
use wicp_kubelet::request::token::ServiceAccountToken;
use wicp_net::{self as net, http, http::Reply};

/// The role to log in as.
const ROLE_ANNOTATION: &str = "wi-credential-provider.io/vault-role";
/// The secret to read, relative to `--vault-secret-prefix`.
const SECRET_ANNOTATION: &str = "wi-credential-provider.io/vault-secret";
/// trublast/vault-kubernetes-credential-provider's secret annotation: the
/// full API path (`secret/data/registry/app`), read after ours and held to
/// the same prefix. Its code reads a misspelled key (`secres-store`), which
/// its users may have set, so both are read.
const COMPAT_SECRET_ANNOTATIONS: [&str; 2] = [
    "secrets-store.deckhouse.io/registry-credentials",
    "secres-store.deckhouse.io/registry-credentials",
];

/// Without a lease on either the token or the secret, the credential has no
/// expiry of its own; the cache cap (`--max-cache-duration`) applies.
const NO_LEASE_SECS: i64 = 365 * 24 * 3600;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Vault's Kubernetes auth method (TokenReview or the cluster's keys).
    Kubernetes,
    /// Vault's JWT auth method (the issuer's JWKS or OIDC discovery).
    Jwt,
}

impl wicp_base::flags::Choice for Method {
    const CHOICES: &'static [(&'static str, Self)] =
        &[("kubernetes", Method::Kubernetes), ("jwt", Method::Jwt)];
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Kubernetes => "kubernetes",
            Method::Jwt => "jwt",
        }
    }
}

// The field docs are this provider's --help text, written for a terminal
// (bare URLs, <PLACEHOLDERS>, HOST[:PORT]), not for rustdoc.
/// `--vault-address`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static VAULT_ADDRESS: FlagSpec = FlagSpec {
    long: "vault-address",
    env: "WICP_VAULT_ADDRESS",
    takes: Takes::One,
    value: "URL",
    default: "",
    help: "Vault's address, https://HOST[:PORT] (http:// only if written out); \
        the token goes nowhere else. Its CA: --ca-file.",
};

/// `--vault-auth-mount`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static VAULT_AUTH_MOUNT: FlagSpec = FlagSpec {
    long: "vault-auth-mount",
    env: "WICP_VAULT_AUTH_MOUNT",
    takes: Takes::One,
    value: "MOUNT",
    default: "",
    help: "Where the auth method is mounted (auth/<MOUNT>/login); default: the \
        method's name.",
};

/// `--vault-kv-mount`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static VAULT_KV_MOUNT: FlagSpec = FlagSpec {
    long: "vault-kv-mount",
    env: "WICP_VAULT_KV_MOUNT",
    takes: Takes::One,
    value: "MOUNT",
    default: "secret",
    help: "Where the KV secrets engine is mounted.",
};

/// `--vault-namespace`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static VAULT_NAMESPACE: FlagSpec = FlagSpec {
    long: "vault-namespace",
    env: "WICP_VAULT_NAMESPACE",
    takes: Takes::One,
    value: "NAMESPACE",
    default: "",
    help: "Vault Enterprise namespace (X-Vault-Namespace), e.g. team or a/b.",
};

/// `--vault-password-field`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static VAULT_PASSWORD_FIELD: FlagSpec = FlagSpec {
    long: "vault-password-field",
    env: "WICP_VAULT_PASSWORD_FIELD",
    takes: Takes::One,
    value: "FIELD",
    default: "password",
    help: "Secret field holding the registry password.",
};

/// `--vault-role`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static VAULT_ROLE: FlagSpec = FlagSpec {
    long: "vault-role",
    env: "WICP_VAULT_ROLE",
    takes: Takes::One,
    value: "ROLE",
    default: "",
    help: "Role to log in as when the service account has no \
        wi-credential-provider.io/vault-role annotation.",
};

/// `--vault-secret-path`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static VAULT_SECRET_PATH: FlagSpec = FlagSpec {
    long: "vault-secret-path",
    env: "WICP_VAULT_SECRET_PATH",
    takes: Takes::One,
    value: "TEMPLATE",
    default: "",
    help: "Secret path template over the service account, e.g. \
        registry/{namespace}/{name}; used when the service account has no \
        secret annotation.",
};

/// `--vault-secret-prefix`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static VAULT_SECRET_PREFIX: FlagSpec = FlagSpec {
    long: "vault-secret-prefix",
    env: "WICP_VAULT_SECRET_PREFIX",
    takes: Takes::One,
    value: "PREFIX",
    default: "",
    help: "Lets the wi-credential-provider.io/vault-secret annotation name a \
        secret, only under this prefix (e.g. registry); without it the \
        annotation is refused.",
};

/// `--vault-username-field`: the parser reads it, --help writes it and errors name it by it.
pub(crate) static VAULT_USERNAME_FIELD: FlagSpec = FlagSpec {
    long: "vault-username-field",
    env: "WICP_VAULT_USERNAME_FIELD",
    takes: Takes::One,
    value: "FIELD",
    default: "username",
    help: "Secret field holding the registry username.",
};

#[allow(
    rustdoc::bare_urls,
    rustdoc::invalid_html_tags,
    rustdoc::broken_intra_doc_links
)]
/// `--vault-auth-method`.
pub(crate) static VAULT_AUTH_METHOD: FlagSpec = FlagSpec {
    long: "vault-auth-method",
    env: "WICP_VAULT_AUTH_METHOD",
    takes: Takes::One,
    value: "METHOD",
    default: "kubernetes",
    help: "Auth method that verifies the service account token: `kubernetes` \
        (Vault's Kubernetes auth) or `jwt` (its JWT auth).",
};

/// `--vault-kv-version`.
pub(crate) static VAULT_KV_VERSION: FlagSpec = FlagSpec {
    long: "vault-kv-version",
    env: "WICP_VAULT_KV_VERSION",
    takes: Takes::One,
    value: "VERSION",
    default: "2",
    help: "KV secrets engine version of that mount (1 or 2).",
};

/// `--vault-keep-login-token`.
pub(crate) static VAULT_KEEP_LOGIN_TOKEN: FlagSpec = FlagSpec {
    long: "vault-keep-login-token",
    env: "WICP_VAULT_KEEP_LOGIN_TOKEN",
    takes: Takes::Switch,
    value: "",
    default: "",
    help: "Leave the Vault login token alive until its TTL instead of revoking \
        it (auth/token/revoke-self) once the secret is read.",
};

#[derive(Clone, Debug)]
pub struct Options {
    /// [`VAULT_ADDRESS`].
    pub vault_address: Option<String>,

    /// [`VAULT_NAMESPACE`].
    pub vault_namespace: Option<String>,

    /// [`VAULT_AUTH_METHOD`].
    pub vault_auth_method: Method,

    /// [`VAULT_AUTH_MOUNT`].
    pub vault_auth_mount: Option<String>,

    /// [`VAULT_ROLE`].
    pub vault_role: Option<String>,

    /// [`VAULT_KV_MOUNT`].
    pub vault_kv_mount: String,

    /// [`VAULT_KV_VERSION`].
    pub vault_kv_version: u8,

    /// [`VAULT_SECRET_PATH`].
    pub vault_secret_path: Option<String>,

    /// [`VAULT_SECRET_PREFIX`].
    pub vault_secret_prefix: Option<String>,

    /// [`VAULT_KEEP_LOGIN_TOKEN`].
    pub vault_keep_login_token: bool,

    /// [`VAULT_USERNAME_FIELD`].
    pub vault_username_field: String,

    /// [`VAULT_PASSWORD_FIELD`].
    pub vault_password_field: String,
}

impl Flags for Options {
    const FLAGS: &'static [&'static FlagSpec] = &[
        &VAULT_ADDRESS,
        &VAULT_NAMESPACE,
        &VAULT_AUTH_METHOD,
        &VAULT_AUTH_MOUNT,
        &VAULT_ROLE,
        &VAULT_KV_MOUNT,
        &VAULT_KV_VERSION,
        &VAULT_SECRET_PATH,
        &VAULT_SECRET_PREFIX,
        &VAULT_KEEP_LOGIN_TOKEN,
        &VAULT_USERNAME_FIELD,
        &VAULT_PASSWORD_FIELD,
    ];
    const HEADING: &'static str = "Vault";

    fn from_flags(given: &Given) -> Result<Self, Usage> {
        Ok(Options {
            vault_address: given.text(&VAULT_ADDRESS)?,
            vault_namespace: given.text(&VAULT_NAMESPACE)?,
            vault_auth_method: defaulted(&VAULT_AUTH_METHOD, given.choice(&VAULT_AUTH_METHOD)?)?,
            vault_auth_mount: given.text(&VAULT_AUTH_MOUNT)?,
            vault_role: given.text(&VAULT_ROLE)?,
            vault_kv_mount: given.text(&VAULT_KV_MOUNT)?.unwrap_or_default(),
            vault_kv_version: defaulted(
                &VAULT_KV_VERSION,
                given.parsed(&VAULT_KV_VERSION, |v| match v {
                    "1" => Ok(1),
                    "2" => Ok(2),
                    _ => Err("the KV version is 1 or 2"),
                })?,
            )?,
            vault_secret_path: given.text(&VAULT_SECRET_PATH)?,
            vault_secret_prefix: given.text(&VAULT_SECRET_PREFIX)?,
            vault_keep_login_token: given.switch(&VAULT_KEEP_LOGIN_TOKEN),
            vault_username_field: given.text(&VAULT_USERNAME_FIELD)?.unwrap_or_default(),
            vault_password_field: given.text(&VAULT_PASSWORD_FIELD)?.unwrap_or_default(),
        })
    }
}

pub static PROVIDER: Provider = allowlist::declare::<Vault>(allowlist::About {
    name: "vault",
    summary: "HashiCorp Vault: log in with the token (Kubernetes or JWT auth), read the registry credentials from KV (--registry only)",
    audience: "the audience the Vault role is bound to (--audience)",
    annotations: &[
        ROLE_ANNOTATION,
        SECRET_ANNOTATION,
        COMPAT_SECRET_ANNOTATIONS[0],
        COMPAT_SECRET_ANNOTATIONS[1],
    ],
});

/// Where the secret path comes from when no annotation names one.
#[derive(Clone, Debug)]
struct Secrets {
    prefix: Option<String>,
    template: Option<path::Template>,
}

pub struct Vault {
    address: String,
    namespace: Option<String>,
    method: Method,
    auth_mount: String,
    default_role: Option<String>,
    kv_mount: String,
    kv_version: u8,
    secrets: Secrets,
    username_field: String,
    password_field: String,
    keep_login_token: bool,
    net: Arc<net::Settings>,
}

impl Guarded for Vault {
    type Options = Options;
    const GUARDS: &'static str = "the registry credentials read from Vault";

    fn new(options: &Options, net: Arc<net::Settings>) -> Result<Self> {
        let address = options.vault_address.as_deref().ok_or_else(|| {
            Error::flag(&VAULT_ADDRESS, "is not set: the vault provider needs it")
                .fix("pass --vault-address https://vault.example.com:8200 (or WICP_VAULT_ADDRESS)")
        })?;
        let address = http::endpoint_override(&VAULT_ADDRESS, address)?;
        let namespace = options
            .vault_namespace
            .as_deref()
            .filter(|n| !n.trim().is_empty())
            .map(|n| path::mount(&VAULT_NAMESPACE, n))
            .transpose()?;
        let auth_mount = path::mount(
            &VAULT_AUTH_MOUNT,
            options
                .vault_auth_mount
                .as_deref()
                .unwrap_or(options.vault_auth_method.name()),
        )?;
        let default_role = options
            .vault_role
            .as_deref()
            .map(|r| {
                let r = r.trim();
                if path::is_role(r) {
                    Ok(r.to_string())
                } else {
                    Err(Error::flag(
                        &VAULT_ROLE,
                        format!("{} is not a Vault role name", quote(r)),
                    )
                    .fix("use letters, digits and _ at both ends, - and . inside"))
                }
            })
            .transpose()?;
        let secrets = Secrets {
            prefix: options
                .vault_secret_prefix
                .as_deref()
                .map(path::prefix)
                .transpose()?,
            template: options
                .vault_secret_path
                .as_deref()
                .map(path::Template::parse)
                .transpose()?,
        };
        if secrets.prefix.is_none() && secrets.template.is_none() {
            return Err(Error::flag(
                &VAULT_SECRET_PATH,
                "is not set, nor --vault-secret-prefix: the vault provider needs one to know which secret to read",
            )
            .fix("pass --vault-secret-path registry/{namespace}/{name} (one secret per service account), or --vault-secret-prefix registry to let the wi-credential-provider.io/vault-secret annotation name one under it"));
        }
        let field = |flag: &'static FlagSpec, value: &str| -> Result<String> {
            let value = value.trim();
            if value.is_empty() || value.len() > 128 || value.chars().any(char::is_control) {
                return Err(
                    Error::flag(flag, format!("{} is not a field name", quote(value)))
                        .fix("name the secret's field, e.g. username"),
                );
            }
            Ok(value.to_string())
        };
        Ok(Vault {
            net,
            address,
            namespace,
            method: options.vault_auth_method,
            auth_mount,
            default_role,
            kv_mount: path::mount(&VAULT_KV_MOUNT, &options.vault_kv_mount)?,
            kv_version: options.vault_kv_version,
            secrets,
            username_field: field(&VAULT_USERNAME_FIELD, &options.vault_username_field)?,
            password_field: field(&VAULT_PASSWORD_FIELD, &options.vault_password_field)?,
            keep_login_token: options.vault_keep_login_token,
        })
    }

    fn annotation_keys(&self) -> Option<Vec<String>> {
        let mut keys = vec![ROLE_ANNOTATION.to_string()];
        if self.secrets.prefix.is_some() {
            keys.push(SECRET_ANNOTATION.to_string());
            keys.extend(COMPAT_SECRET_ANNOTATIONS.iter().map(|k| k.to_string()));
        }
        Some(keys)
    }

    fn plan<'a>(&'a self, cx: &Context<'a>, token: &'a ServiceAccountToken) -> Result<Plan<'a>> {
        let role = self.role(cx)?;
        let secret = self.secret_path(cx)?;
        let inputs = vec![
            Input::setting("registry", cx.image.registry().to_string()),
            Input::setting("address", self.address.clone()),
            Input::setting(
                "namespace",
                self.namespace.clone().unwrap_or_else(|| "none".into()),
            ),
            Input::setting("auth_method", self.method.name().to_string()),
            Input::setting("auth_mount", self.auth_mount.clone()),
            Input::identity("role", role.clone()),
            Input::setting("kv_mount", self.kv_mount.clone()),
            Input::setting("kv_version", self.kv_version.to_string()),
            Input::identity("secret_path", secret.clone()),
            Input::setting("username_field", self.username_field.clone()),
            Input::setting("password_field", self.password_field.clone()),
        ];
        Ok(Plan::for_registry(
            &PROVIDER,
            cx.image,
            inputs,
            move |deadline| {
                let call = http::Call::new(
                    "Vault",
                    format!("the Vault login and read at {}", self.address),
                );
                let (login, secrets, started) = http::block_on(deadline, &call, async {
                    let client = self.net.client(deadline)?;
                    let started = duration::unix_now();
                    let login = self.login(&client, &role, token.secret(), deadline).await?;
                    wicp_base::log::debug!(
                        "Vault {} login as role {role} succeeded; token lease {}s",
                        self.method.name(),
                        login.lease_duration
                    );
                    let refused = std::cell::Cell::new(None);
                    let secrets = self
                        .read(&client, &secret, &login, &role, &refused, deadline)
                        .await;
                    self.revoke(&client, &login, refused.get(), deadline).await;
                    Ok((login, secrets?, started))
                })?;
                let what = format!("the Vault secret {}", self.api_path(&secret));
                let (username, password) =
                    wire::credentials(&secrets, &self.username_field, &self.password_field, &what)?;
                let expires_at = expiry(started, login.lease_duration, secrets.lease_duration);
                wicp_base::log::debug!(
                    "read {what} (lease {}s): credential valid until {}",
                    secrets.lease_duration,
                    duration::format_unix(expires_at)
                );
                Ok(Credential {
                    username,
                    password,
                    expires_at,
                })
            },
        ))
    }
}

impl Vault {
    /// The role: our annotation, else `--vault-role`.
    fn role(&self, cx: &Context<'_>) -> Result<String> {
        // Not trimmed: a value with whitespace or a newline is refused, not
        // repaired.
        if let Some(value) = cx.annotation(ROLE_ANNOTATION) {
            if !path::is_role(value) {
                return Err(Error::annotation_key(ROLE_ANNOTATION, format!(
                    "annotation {ROLE_ANNOTATION} {} is not a Vault role name",
                    quote(value)
                ))
                .fix("name a role of the Vault auth method: letters, digits and _ at both ends, - and . inside"));
            }
            return Ok(value.to_string());
        }
        self.default_role.clone().ok_or_else(|| {
            Error::annotation_key(ROLE_ANNOTATION, format!(
                "no Vault role: the service account has no {ROLE_ANNOTATION} annotation and --vault-role is not set"
            ))
            .fix(format!(
                "annotate the service account with {ROLE_ANNOTATION}: ROLE (and list it in tokenAttributes), or set --vault-role"
            ))
        })
    }

    /// The secret path inside the KV mount: an annotation under the prefix,
    /// else the template.
    fn secret_path(&self, cx: &Context<'_>) -> Result<String> {
        let ours = cx
            .annotation(SECRET_ANNOTATION)
            .map(|v| (SECRET_ANNOTATION, v, false));
        let compat = COMPAT_SECRET_ANNOTATIONS
            .iter()
            .find_map(|k| cx.annotation(k).map(|v| (*k, v, true)));
        if let Some((key, value, full_api_path)) = ours.or(compat) {
            let Some(prefix) = &self.secrets.prefix else {
                return Err(Error::annotation_key(key, format!(
                    "annotation {key} names a Vault secret, but no --vault-secret-prefix allows secrets from annotations"
                ))
                .fix("remove the annotation (the secret comes from --vault-secret-path), or have the admin set --vault-secret-prefix"));
            };
            let rest = if full_api_path {
                // The full API path: <kv mount>/[data/]<prefix>/<rest>.
                let base = format!("{}/{}{prefix}/", self.kv_mount, self.data_segment());
                value.strip_prefix(&base).ok_or_else(|| {
                    Error::annotation_key(key, format!(
                        "annotation {key} {} is not under {base}",
                        quote(value)
                    ))
                    .fix(format!(
                        "name a secret under {base}, or use {SECRET_ANNOTATION} with a path relative to {prefix}/"
                    ))
                })?
            } else {
                value
            };
            return path::under_prefix(key, prefix, rest);
        }
        match &self.secrets.template {
            Some(template) => {
                let sa = cx.token()?.service_account();
                template.render(&sa.namespace, &sa.name)
            }
            None => Err(Error::annotation_key(SECRET_ANNOTATION, format!(
                "no Vault secret: the service account has no {SECRET_ANNOTATION} annotation and --vault-secret-path is not set"
            ))
            .fix(format!(
                "annotate the service account with {SECRET_ANNOTATION}: PATH (relative to {}/, listed in tokenAttributes), or set --vault-secret-path",
                self.secrets.prefix.as_deref().unwrap_or("the prefix")
            ))),
        }
    }

    fn data_segment(&self) -> &'static str {
        if self.kv_version == 2 { "data/" } else { "" }
    }

    fn login_url(&self) -> String {
        format!("{}/v1/auth/{}/login", self.address, self.auth_mount)
    }

    /// The API path of a secret (`secret/data/registry/app`), as in policies.
    fn api_path(&self, secret: &str) -> String {
        format!("{}/{}{secret}", self.kv_mount, self.data_segment())
    }

    fn with_namespace(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.namespace {
            Some(ns) => request.header("X-Vault-Namespace", ns),
            None => request,
        }
    }

    async fn login(
        &self,
        client: &http::Client,
        role: &str,
        token: &Secret,
        deadline: &Deadline,
    ) -> Result<wire::Login> {
        let url = self.login_url();
        let call = http::Call::new(
            "Vault",
            format!("the Vault {} login at {url}", self.method.name()),
        );
        // Serialised once; the body holds the token, so it never reaches a log.
        let body = serde_json::json!({ "role": role, "jwt": token.expose() }).to_string();
        let reply = http::send(
            client,
            wicp_net::observe::Endpoint::TokenExchange,
            || {
                self.with_namespace(
                    client
                        .post(&url)
                        .header(reqwest::header::CONTENT_TYPE, "application/json")
                        .body(body.clone()),
                )
            },
            &call,
            deadline,
        )
        .await?;
        if !reply.is_success() {
            return Err(self.login_refused(&reply, role, token));
        }
        wire::read_login(&reply, &call.what)
    }

    fn login_refused(&self, reply: &Reply, role: &str, token: &Secret) -> Error {
        let mount = &self.auth_mount;
        let what = format!(
            "Vault {} the login as role {} at auth/{mount}: {}",
            wicp_base::redact::verb(reply.status),
            quote(role),
            wire::describe(reply, &[token])
        );
        let fix = if wire::mentions(reply, "invalid role name")
            || wire::mentions(reply, "could not be found")
        {
            format!(
                "no role {} in auth/{mount}{}: create it (vault write auth/{mount}/role/{role} ...) or fix {ROLE_ANNOTATION} / --vault-role",
                quote(role),
                self.namespace
                    .as_deref()
                    .map(|n| format!(" of namespace {n}"))
                    .unwrap_or_default()
            )
        } else if reply.status == 403
            || wire::mentions(reply, "claim")
            || wire::mentions(reply, "audience")
        {
            match self.method {
                Method::Kubernetes => format!(
                    "the role {role} does not accept this service account: check its bound_service_account_names and \
                     bound_service_account_namespaces, its audience (the token's is tokenAttributes.serviceAccountTokenAudience), \
                     and that auth/{mount}/config can verify the cluster's tokens (token_reviewer_jwt or pem_keys, issuer)"
                ),
                Method::Jwt => format!(
                    "the role {role} does not accept this token: check auth/{mount}/config (jwks_url, oidc_discovery_url or \
                     jwt_validation_pubkeys for the cluster's issuer) and the role's bound_audiences (the token's audience), \
                     bound_subject (system:serviceaccount:NAMESPACE:NAME) and bound_claims"
                ),
            }
        } else if reply.status == 404 {
            format!(
                "no auth method is mounted at auth/{mount}: check --vault-auth-mount and --vault-auth-method"
            )
        } else if http::is_retryable_status(reply.status) {
            UNAVAILABLE_FIX.to_string()
        } else {
            "check --vault-address, --vault-auth-method and --vault-auth-mount".to_string()
        };
        Error::upstream(what)
            .fix(fix)
            .answered("Vault", reply.status, &reply.body)
    }

    async fn read(
        &self,
        client: &http::Client,
        secret: &str,
        login: &wire::Login,
        role: &str,
        refused: &std::cell::Cell<Option<u16>>,
        deadline: &Deadline,
    ) -> Result<wire::Secrets> {
        let api_path = self.api_path(secret);
        let url = format!("{}/v1/{api_path}", self.address);
        let call = http::Call::new("Vault", format!("the Vault read of {api_path}"));
        let reply = http::send(
            client,
            wicp_net::observe::Endpoint::SecretRead,
            || {
                self.with_namespace(
                    client
                        .get(&url)
                        .header("X-Vault-Token", login.client_token.expose()),
                )
            },
            &call,
            deadline,
        )
        .await?;
        if reply.is_success() {
            return wire::read_secret(&reply, self.kv_version, &call.what);
        }
        refused.set(Some(reply.status));
        let shown = wire::describe(&reply, &[&login.client_token]);
        let what = format!(
            "Vault {} the read of {api_path}: {shown}",
            wicp_base::redact::verb(reply.status)
        );
        let fix = match reply.status {
            403 => format!(
                "the policies of role {role} do not grant read on {api_path}: add path \"{api_path}\" {{ capabilities = [\"read\"] }} to one of them"
            ),
            404 => {
                // KV v2 answers a deleted latest version with 404 and its metadata.
                let body: Option<serde_json::Value> = reply.json();
                if let Some(data) = body
                    .as_ref()
                    .and_then(|b| b.get("data"))
                    .filter(|d| d.is_object())
                {
                    return Err(wire::deleted(&reply, &call.what, Some(data)));
                }
                format!(
                    "no secret at {api_path}: write it (vault kv put -mount={} {secret} {}=... {}=...), or check --vault-kv-mount and --vault-kv-version",
                    self.kv_mount, self.username_field, self.password_field
                )
            }
            s if http::is_retryable_status(s) => UNAVAILABLE_FIX.to_string(),
            _ => "check --vault-kv-mount and --vault-kv-version".to_string(),
        };
        Err(Error::upstream(what)
            .fix(fix)
            .answered("Vault", reply.status, &reply.body))
    }
}

impl Vault {
    /// Revokes the login token once the secret is read (or could not be):
    /// `POST {address}/v1/auth/token/revoke-self` with the token
    /// (api-docs/auth/token, "Revoke a token (self)": 204, no body; Vault's
    /// `default` policy grants it). Best effort: one attempt, at most
    /// [`REVOKE_TIMEOUT`] and never past the deadline; a failure is a
    /// warning, since the pull already has what it needs and the token
    /// expires with its lease anyway. Left alone with
    /// `--vault-keep-login-token`. `read_refused` is the status Vault
    /// refused the read with, if it did: a 403 there and on the revoke
    /// means Vault no longer takes the token at all (expired, or revoked
    /// already), not that a policy lacks revoke-self, and there is nothing
    /// left to revoke.
    async fn revoke(
        &self,
        client: &http::Client,
        login: &wire::Login,
        read_refused: Option<u16>,
        deadline: &Deadline,
    ) {
        if self.keep_login_token {
            return;
        }
        let url = format!("{}/v1/auth/token/revoke-self", self.address);
        let request = self.with_namespace(
            client
                .post(&url)
                .header("X-Vault-Token", login.client_token.expose()),
        );
        let timeout = REVOKE_TIMEOUT.min(deadline.remaining());
        match http::send_bounded(
            wicp_net::observe::Endpoint::TokenRevoke,
            request,
            timeout,
            4096,
        )
        .await
        {
            Ok(reply) if reply.is_success() => {
                wicp_base::log::debug!("revoked the Vault login token (auth/token/revoke-self)");
            }
            Ok(reply) if reply.status == 403 && read_refused == Some(403) => {
                wicp_base::log::debug!(
                    "Vault refused the login token for the revoke as it did for the read (403): it no longer takes the token (expired or already revoked), so there is nothing to revoke"
                )
            }
            Ok(reply) => wicp_base::log::warning!(
                "Vault refused to revoke the login token (auth/token/revoke-self): {}; it stays valid until its lease ends ({}s); a role whose token_policies leave out Vault's default policy must grant update on auth/token/revoke-self, or pass --vault-keep-login-token",
                wire::describe(&reply, &[&login.client_token]),
                login.lease_duration
            ),
            Err(e) => wicp_base::log::warning!(
                "could not revoke the Vault login token (auth/token/revoke-self): {}; it stays valid until its lease ends ({}s)",
                http::describe(&e),
                login.lease_duration
            ),
        }
    }
}

/// The fix for a refusal still worth retrying after the last attempt.
const UNAVAILABLE_FIX: &str = "Vault was rate limiting, sealed or unavailable through every retry; the kubelet retries the pull";

/// How long revoking the login token may take.
const REVOKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// When the credential stops being trustworthy: the earlier end of the two
/// leases, counted from before the login (0 is no lease).
pub fn expiry(started: i64, token_lease: i64, secret_lease: i64) -> i64 {
    let lease = [token_lease, secret_lease]
        .into_iter()
        .filter(|&l| l > 0)
        .min()
        .unwrap_or(NO_LEASE_SECS);
    started.saturating_add(lease)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Pull;
    use crate::{Exchanger, allowlist::Allowlisted};
    use std::collections::BTreeMap;
    use wicp_kubelet::request::image::ImageRef;

    fn options() -> Options {
        Options {
            vault_address: Some("https://vault.example.com:8200".into()),
            vault_namespace: None,
            vault_auth_method: Method::Kubernetes,
            vault_auth_mount: None,
            vault_role: None,
            vault_kv_mount: "secret".into(),
            vault_kv_version: 2,
            vault_secret_path: None,
            vault_secret_prefix: Some("registry".into()),
            vault_username_field: "username".into(),
            vault_password_field: "password".into(),
            vault_keep_login_token: false,
        }
    }

    fn registries() -> allowlist::Options {
        allowlist::Options {
            registries: vec!["registry.example.com".into()],
        }
    }

    #[test]
    fn flags_are_checked() {
        assert!(Vault::new(&options(), Arc::default()).is_ok());
        let bad = |f: fn(&mut Options)| {
            let mut o = options();
            f(&mut o);
            Vault::new(&o, Arc::default())
                .err()
                .is_some_and(|e| e.kind() == wicp_base::error::Kind::Config)
        };
        assert!(bad(|o| o.vault_address = None));
        assert!(bad(|o| o.vault_address = Some("vault:8200".into())));
        assert!(bad(|o| o.vault_address = Some("https://v?x".into())));
        assert!(bad(|o| o.vault_namespace = Some("a/../b".into())));
        assert!(bad(|o| o.vault_auth_mount = Some("../sys".into())));
        assert!(bad(|o| o.vault_role = Some("a/b".into())));
        assert!(bad(|o| o.vault_kv_mount = "".into()));
        assert!(bad(|o| o.vault_secret_prefix = Some("../".into())));
        assert!(bad(|o| o.vault_secret_path = Some("x/{pod}".into())));
        assert!(bad(|o| o.vault_secret_prefix = None));
        assert!(bad(|o| o.vault_username_field = " ".into()));
        let v = Vault::new(&options(), Arc::default()).unwrap();
        assert_eq!(
            v.login_url(),
            "https://vault.example.com:8200/v1/auth/kubernetes/login"
        );
        assert_eq!(v.api_path("registry/app"), "secret/data/registry/app");
        let mut o = options();
        o.vault_auth_method = Method::Jwt;
        o.vault_kv_version = 1;
        o.vault_kv_mount = "/kv/".into();
        let v = Vault::new(&o, Arc::default()).unwrap();
        assert_eq!(
            v.login_url(),
            "https://vault.example.com:8200/v1/auth/jwt/login"
        );
        assert_eq!(v.api_path("registry/app"), "kv/registry/app");
    }

    #[test]
    fn expiry_is_the_earlier_lease() {
        assert_eq!(expiry(1000, 3600, 0), 4600);
        assert_eq!(expiry(1000, 3600, 600), 1600);
        assert_eq!(expiry(1000, 0, 600), 1600);
        assert_eq!(expiry(1000, 0, 0), 1000 + NO_LEASE_SECS);
    }

    fn plan_error(options: &Options, annotations: &[(&str, &str)]) -> Option<String> {
        let vault = Vault::new(options, Arc::default()).unwrap();
        let pull = Pull::new("registry.example.com/team/app", annotations);
        let cx = pull.context(None);
        // Without a token the plan stops after the annotations are read
        // (role and annotated secret need none); the token is checked first
        // only for a template.
        match vault.role(&cx).and_then(|_| vault.secret_path(&cx)) {
            Ok(_) => None,
            Err(e) => {
                assert_eq!(e.kind(), wicp_base::error::Kind::Annotation, "{e}");
                Some(e.to_string())
            }
        }
    }

    #[test]
    fn annotations_are_checked() {
        let o = options();
        assert_eq!(
            plan_error(
                &o,
                &[(ROLE_ANNOTATION, "puller"), (SECRET_ANNOTATION, "team/app")]
            ),
            None
        );
        for role in [
            "a/b", "../x", "x?y", "x#y", "%2e%2e", "a\nb", "-x", "puller\n", " puller",
        ] {
            let e = plan_error(
                &o,
                &[(ROLE_ANNOTATION, role), (SECRET_ANNOTATION, "team/app")],
            );
            assert!(e.is_some_and(|e| e.contains(ROLE_ANNOTATION)), "{role:?}");
        }
        for secret in [
            "../x",
            "/etc",
            "a/../../sys",
            "a?b",
            "a#b",
            "%2e%2e/x",
            "a\nb",
            "a//b",
        ] {
            let e = plan_error(&o, &[(ROLE_ANNOTATION, "r"), (SECRET_ANNOTATION, secret)]);
            assert!(
                e.is_some_and(|e| e.contains(SECRET_ANNOTATION)),
                "{secret:?}"
            );
        }
        // No role anywhere.
        assert!(
            plan_error(&o, &[(SECRET_ANNOTATION, "a")])
                .unwrap()
                .contains("--vault-role")
        );
        // An annotation without a prefix allowing it.
        let mut t = options();
        t.vault_secret_prefix = None;
        t.vault_secret_path = Some("registry/{namespace}/{name}".into());
        assert!(
            plan_error(&t, &[(ROLE_ANNOTATION, "r"), (SECRET_ANNOTATION, "a")])
                .unwrap()
                .contains("--vault-secret-prefix")
        );
        // The compatibility key: a full API path under the prefix only.
        let k = COMPAT_SECRET_ANNOTATIONS[0];
        assert_eq!(
            plan_error(
                &o,
                &[(ROLE_ANNOTATION, "r"), (k, "secret/data/registry/app")]
            ),
            None
        );
        for bad in [
            "secret/data/other/app",
            "secret/data/registry/../x",
            "registry/app",
            "secret/data/registry/",
        ] {
            assert!(
                plan_error(&o, &[(ROLE_ANNOTATION, "r"), (k, bad)]).is_some(),
                "{bad}"
            );
        }
        // Ours wins over the compatibility key.
        let v = Vault::new(&o, Arc::default()).unwrap();
        let annotations: BTreeMap<String, String> = [
            (SECRET_ANNOTATION.to_string(), "ours".to_string()),
            (k.to_string(), "secret/data/registry/theirs".to_string()),
        ]
        .into();
        let image = ImageRef::parse("registry.example.com/a").unwrap();
        let cx = Context {
            image: &image,
            annotations: &annotations,
            token: None,
        };
        assert_eq!(v.secret_path(&cx).unwrap(), "registry/ours");
    }

    #[test]
    fn only_allowed_registries() {
        let v = Allowlisted::<Vault>::new(&PROVIDER, &registries(), &options(), Arc::default())
            .unwrap();
        assert!(v.serves(&ImageRef::parse("registry.example.com/a").unwrap()));
        assert!(!v.serves(&ImageRef::parse("registry.example.com.evil.net/a").unwrap()));
        assert!(!v.serves(&ImageRef::parse("docker.io/library/a").unwrap()));
    }
}
