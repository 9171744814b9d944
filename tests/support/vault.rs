//! A local HashiCorp Vault, faithful to the parts the plugin uses, written
//! from Vault's API documentation and its plugins' source:
//!
//! - `POST /v1/auth/<mount>/login` with JSON `{"role","jwt"}` for the
//!   Kubernetes auth method (vault-plugin-auth-kubernetes `path_login.go`:
//!   400 `invalid role name "R"`; the token's signature checked with the
//!   cluster's key as `pem_keys` or a TokenReview would, expiry and issuer
//!   checked, then 403 `service account name not authorized` /
//!   `namespace not authorized`, or 403 `permission denied` for a token the
//!   cluster did not sign) and for the JWT auth method
//!   (vault-plugin-auth-jwt `path_login.go`: role lowercased, 400
//!   `role "R" could not be found`, 400 claim errors for `bound_audiences`
//!   and `bound_subject`). The answer is Vault's login shape, its
//!   `auth.lease_duration` the role's `token_ttl`.
//! - KV v1 `GET /v1/<mount>/<path>` and KV v2 `GET /v1/<mount>/data/<path>`
//!   with `X-Vault-Token`, checked against the token's policies (exact
//!   paths or a trailing `*`): 403 `permission denied`, 404 `{"errors":[]}`
//!   for a permitted path without a secret, 404 with `data: null` and the
//!   metadata for a deleted KV v2 version. KV v1 answers carry
//!   `lease_duration` from a `ttl` key, else the system default 2764800.
//! - `X-Vault-Namespace`: a fake configured with a namespace holds its roles
//!   and secrets there; a request for another namespace finds no role (400)
//!   or no permission (403).
//!
//! Everything the plugin sends that Vault would not expect (a field beyond
//! `role` and `jwt`, a query string, a body on a read, an `Authorization`
//! header, a token on the login) is recorded in [`FakeVault::violations`]
//! for the test to assert empty. Scripted answers ([`FakeVault::script`])
//! come first: 429 with `Retry-After`, 500, malformed JSON.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Value, json};

use super::http_server::{Request, Response, TestServer};
use super::token::{ISSUER, SIGNER_PUB, now};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Kubernetes,
    Jwt,
}

/// A role of the auth method.
#[derive(Clone, Debug)]
pub struct Role {
    /// `bound_service_account_names` (Kubernetes) or, for JWT,
    /// `bound_subject` built from the single name and namespace.
    pub service_account_names: Vec<String>,
    pub service_account_namespaces: Vec<String>,
    /// Kubernetes `audience` (optional) or JWT `bound_audiences` (one).
    pub audience: Option<String>,
    pub policies: Vec<String>,
    /// `token_ttl` in seconds.
    pub ttl: i64,
}

impl Role {
    pub fn new(namespace: &str, name: &str, policies: &[&str]) -> Self {
        Role {
            service_account_names: vec![name.into()],
            service_account_namespaces: vec![namespace.into()],
            audience: None,
            policies: policies.iter().map(|p| p.to_string()).collect(),
            ttl: 3600,
        }
    }
}

struct Issued {
    policies: Vec<String>,
    /// When the token stops working, to the instant rather than the second
    /// (as in Vault): a 1-second token issued at 0.999 must still read at
    /// 1.001, or a test of short leases fails by the clock.
    expires: std::time::Instant,
    namespace: Option<String>,
    /// Revoked with auth/token/revoke-self.
    revoked: bool,
}

struct State {
    method: Method,
    auth_mount: String,
    namespace: Option<String>,
    kv1_mount: String,
    kv2_mount: String,
    roles: Mutex<BTreeMap<String, Role>>,
    /// Policy name to the API paths it may read (exact, or ending in `*`).
    policies: Mutex<BTreeMap<String, Vec<String>>>,
    kv1: Mutex<BTreeMap<String, Value>>,
    /// Path to (data, deletion time).
    kv2: Mutex<BTreeMap<String, (Value, Option<String>)>>,
    tokens: Mutex<BTreeMap<String, Issued>>,
    script: Mutex<VecDeque<Response>>,
    refuse_revocation: std::sync::atomic::AtomicBool,
    violations: Mutex<Vec<String>>,
    /// Quote what the client sent in error messages, as a careless proxy
    /// or plugin might, to prove the plugin never repeats it.
    echo: std::sync::atomic::AtomicBool,
    serial: AtomicU64,
}

pub struct FakeVault {
    server: TestServer,
    state: Arc<State>,
}

fn error(status: u16, messages: &[&str]) -> Response {
    Response::json(status, json!({ "errors": messages }))
}

impl FakeVault {
    /// A Vault with `method` mounted at `auth_mount`, KV v1 at `kv` and KV
    /// v2 at `secret`, in Enterprise `namespace` if given.
    pub fn start(method: Method, auth_mount: &str, namespace: Option<&str>) -> Self {
        let state = Arc::new(State {
            method,
            auth_mount: auth_mount.into(),
            namespace: namespace.map(str::to_string),
            kv1_mount: "kv".into(),
            kv2_mount: "secret".into(),
            roles: Mutex::default(),
            policies: Mutex::default(),
            kv1: Mutex::default(),
            kv2: Mutex::default(),
            tokens: Mutex::default(),
            script: Mutex::default(),
            refuse_revocation: Default::default(),
            violations: Mutex::default(),
            echo: Default::default(),
            serial: AtomicU64::new(1),
        });
        let handler_state = Arc::clone(&state);
        let server = TestServer::start(move |request| handle(&handler_state, request));
        FakeVault { server, state }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Kubernetes auth at `kubernetes`, role `puller` bound to team/puller
    /// with a policy that reads `secret/data/registry/team/*`, and one KV
    /// v2 secret at `registry/team/app` holding `team-robot` and `password`.
    pub fn kubernetes_team(password: &str) -> Self {
        let vault = FakeVault::start(Method::Kubernetes, "kubernetes", None);
        vault
            .policy("registry-team", &["secret/data/registry/team/*"])
            .role("puller", Role::new("team", "puller", &["registry-team"]))
            .kv2(
                "registry/team/app",
                json!({"username": "team-robot", "password": password}),
            );
        vault
    }

    /// The flags that point the vault provider here, with the secret
    /// prefix `registry`, then `extra` (the test's own: `--provider` among
    /// them).
    pub fn flags(&self, extra: &[&str]) -> Vec<String> {
        let url = self.url();
        let here = ["--vault-address", &url, "--vault-secret-prefix", "registry"];
        super::plugin::flags(&here, extra)
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.server.addr()
    }

    pub fn role(&self, name: &str, role: Role) -> &Self {
        self.state.roles.lock().unwrap().insert(name.into(), role);
        self
    }

    pub fn policy(&self, name: &str, paths: &[&str]) -> &Self {
        self.state
            .policies
            .lock()
            .unwrap()
            .insert(name.into(), paths.iter().map(|p| p.to_string()).collect());
        self
    }

    /// A KV v1 secret at `path` inside the `kv` mount.
    pub fn kv1(&self, path: &str, data: Value) -> &Self {
        self.state.kv1.lock().unwrap().insert(path.into(), data);
        self
    }

    /// A KV v2 secret at `path` inside the `secret` mount.
    pub fn kv2(&self, path: &str, data: Value) -> &Self {
        self.state
            .kv2
            .lock()
            .unwrap()
            .insert(path.into(), (data, None));
        self
    }

    /// Soft-deletes the latest version of a KV v2 secret.
    pub fn delete_kv2(&self, path: &str) -> &Self {
        if let Some(entry) = self.state.kv2.lock().unwrap().get_mut(path) {
            entry.1 = Some("2026-01-02T03:04:05.000000Z".into());
        }
        self
    }

    /// Answers served, in order, before any real handling.
    pub fn script(&self, responses: impl IntoIterator<Item = Response>) {
        self.state.script.lock().unwrap().extend(responses);
    }

    /// Answers revoke-self with 403 `permission denied`, as Vault does
    /// for a token whose policies leave out `default`.
    pub fn refuse_revocation(&self) {
        self.state.refuse_revocation.store(true, Ordering::SeqCst);
    }

    pub fn echo_secrets_in_errors(&self) {
        self.state.echo.store(true, Ordering::SeqCst);
    }

    pub fn requests(&self) -> Vec<Request> {
        self.server.requests()
    }

    pub fn violations(&self) -> Vec<String> {
        self.state.violations.lock().unwrap().clone()
    }

    /// Every client token issued so far.
    pub fn issued_tokens(&self) -> Vec<String> {
        self.state.tokens.lock().unwrap().keys().cloned().collect()
    }

    /// The client tokens issued and not revoked.
    pub fn live_tokens(&self) -> Vec<String> {
        self.state
            .tokens
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, issued)| !issued.revoked)
            .map(|(token, _)| token.clone())
            .collect()
    }
}

fn violation(state: &State, what: String) {
    state.violations.lock().unwrap().push(what);
}

fn handle(state: &State, request: &Request) -> Response {
    if request.header("authorization").is_some() {
        violation(state, format!("Authorization header on {}", request.path));
    }
    if !request.query.is_empty() {
        violation(
            state,
            format!("query string on {}: {}", request.path, request.query),
        );
    }
    if let Some(scripted) = state.script.lock().unwrap().pop_front() {
        return scripted;
    }
    let namespace = request.header("x-vault-namespace").map(str::to_string);
    if request.path == "/v1/auth/token/revoke-self" {
        return handle_revoke_self(state, request, namespace);
    }
    let login = format!("/v1/auth/{}/login", state.auth_mount);
    if request.path == login {
        if request.method != "POST" {
            violation(state, format!("{} on the login path", request.method));
            return error(405, &["unsupported operation"]);
        }
        return handle_login(state, request, namespace);
    }
    let kv2 = format!("/v1/{}/data/", state.kv2_mount);
    let kv1 = format!("/v1/{}/", state.kv1_mount);
    let (version, api_path, path) = if let Some(p) = request.path.strip_prefix(&kv2) {
        (
            2,
            request.path.trim_start_matches("/v1/").to_string(),
            p.to_string(),
        )
    } else if let Some(p) = request.path.strip_prefix(&kv1) {
        (
            1,
            request.path.trim_start_matches("/v1/").to_string(),
            p.to_string(),
        )
    } else if request
        .path
        .starts_with(&format!("/v1/{}/", state.kv2_mount))
    {
        // A KV v2 mount read without data/ (the client thinks it is v1).
        return Response::json(
            404,
            json!({"errors": [], "warnings": ["Invalid path for a versioned K/V secrets engine. See the API docs for the appropriate API endpoints to use. If using the Vault CLI, use 'vault kv get' for this operation."]}),
        );
    } else {
        violation(
            state,
            format!("unexpected request {} {}", request.method, request.path),
        );
        return error(
            404,
            &[&format!(
                "no handler for route \"{}\". route entry not found.",
                request.path.trim_start_matches("/v1/")
            )],
        );
    };
    if request.method != "GET" {
        violation(state, format!("{} on {}", request.method, request.path));
    }
    if !request.body.is_empty() {
        violation(state, format!("body on the read of {}", request.path));
    }
    let Some(token) = request.header("x-vault-token") else {
        violation(state, format!("no X-Vault-Token on {}", request.path));
        return error(403, &["permission denied"]);
    };
    let echo = |base: &str| {
        if state.echo.load(Ordering::SeqCst) {
            format!("{base} for token {token}")
        } else {
            base.to_string()
        }
    };
    let allowed = {
        let tokens = state.tokens.lock().unwrap();
        let Some(issued) = tokens.get(token) else {
            return error(403, &[&echo("permission denied")]);
        };
        if issued.expires <= std::time::Instant::now()
            || issued.namespace != namespace
            || issued.revoked
        {
            return error(403, &[&echo("permission denied")]);
        }
        let policies = state.policies.lock().unwrap();
        issued.policies.iter().any(|p| {
            policies.get(p).is_some_and(|paths| {
                paths.iter().any(|allowed| match allowed.strip_suffix('*') {
                    Some(prefix) => api_path.starts_with(prefix),
                    None => *allowed == api_path,
                })
            })
        })
    };
    if !allowed {
        return error(403, &[&echo("permission denied")]);
    }
    let request_id = format!("req-{}", state.serial.fetch_add(1, Ordering::SeqCst));
    if version == 1 {
        let Some(data) = state.kv1.lock().unwrap().get(&path).cloned() else {
            return Response::json(404, json!({ "errors": [] }));
        };
        let lease = data
            .get("ttl")
            .and_then(Value::as_str)
            .map(parse_ttl)
            .unwrap_or(2_764_800);
        return Response::json(
            200,
            json!({
                "request_id": request_id, "lease_id": "", "renewable": false,
                "lease_duration": lease, "data": data, "wrap_info": null,
                "warnings": null, "auth": null,
            }),
        );
    }
    let Some((data, deleted)) = state.kv2.lock().unwrap().get(&path).cloned() else {
        return Response::json(404, json!({ "errors": [] }));
    };
    let metadata = json!({
        "created_time": "2026-01-01T00:00:00.000000Z", "custom_metadata": null,
        "deletion_time": deleted.clone().unwrap_or_default(), "destroyed": false, "version": 1,
    });
    if deleted.is_some() {
        return Response::json(
            404,
            json!({ "data": { "data": null, "metadata": metadata } }),
        );
    }
    Response::json(
        200,
        json!({
            "request_id": request_id, "lease_id": "", "renewable": false, "lease_duration": 0,
            "data": { "data": data, "metadata": metadata },
            "wrap_info": null, "warnings": null, "auth": null,
        }),
    )
}

/// `1h`, `10m`, `30s` or plain seconds, as a KV v1 `ttl` key holds them.
fn parse_ttl(text: &str) -> i64 {
    let (digits, unit) = text.split_at(text.trim_end_matches(char::is_alphabetic).len());
    let n: i64 = digits.parse().expect("ttl");
    n * match unit {
        "h" => 3600,
        "m" => 60,
        _ => 1,
    }
}

/// `POST /v1/auth/token/revoke-self` (api-docs/auth/token, "Revoke a
/// token (self)"): no parameters, the token in `X-Vault-Token`, 204 with
/// no body; a token Vault does not know (or already revoked) gets 403
/// `permission denied`.
fn handle_revoke_self(state: &State, request: &Request, namespace: Option<String>) -> Response {
    if request.method != "POST" {
        violation(state, format!("{} on revoke-self", request.method));
    }
    if !request.body.is_empty() {
        violation(state, "a body on revoke-self".to_string());
    }
    let Some(token) = request.header("x-vault-token") else {
        violation(state, "no X-Vault-Token on revoke-self".to_string());
        return error(403, &["permission denied"]);
    };
    if state.refuse_revocation.load(Ordering::SeqCst) {
        return error(403, &["permission denied"]);
    }
    let mut tokens = state.tokens.lock().unwrap();
    match tokens.get_mut(token) {
        Some(issued) if !issued.revoked && issued.namespace == namespace => {
            issued.revoked = true;
            Response::text(204, "")
        }
        _ => error(403, &["permission denied"]),
    }
}

fn handle_login(state: &State, request: &Request, namespace: Option<String>) -> Response {
    if request.header("x-vault-token").is_some() {
        violation(state, "X-Vault-Token on the login".into());
    }
    if !request
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/json"))
    {
        violation(
            state,
            format!("login content type {:?}", request.header("content-type")),
        );
    }
    let body: Value = match serde_json::from_slice(&request.body) {
        Ok(v) => v,
        Err(_) => return error(400, &["failed to parse JSON input: invalid character"]),
    };
    let Some(fields) = body.as_object() else {
        return error(400, &["failed to parse JSON input"]);
    };
    for key in fields.keys() {
        if key != "role" && key != "jwt" {
            violation(state, format!("unexpected login field {key:?}"));
        }
    }
    let role_name = fields.get("role").and_then(Value::as_str).unwrap_or("");
    let jwt = fields.get("jwt").and_then(Value::as_str).unwrap_or("");
    if role_name.is_empty() {
        return error(400, &["missing role"]);
    }
    // JWT auth lowercases the role (framework.TypeLowerCaseString).
    let role_name = match state.method {
        Method::Jwt => role_name.to_lowercase(),
        Method::Kubernetes => role_name.to_string(),
    };
    let role = if namespace == state.namespace {
        state.roles.lock().unwrap().get(&role_name).cloned()
    } else {
        None
    };
    let Some(role) = role else {
        return match state.method {
            Method::Kubernetes => error(400, &[&format!("invalid role name \"{role_name}\"")]),
            Method::Jwt => error(400, &[&format!("role \"{role_name}\" could not be found")]),
        };
    };
    if jwt.is_empty() {
        return error(400, &["missing jwt"]);
    }
    // Signature, expiry and issuer, as pem_keys / a TokenReview would.
    let mut validation = Validation::new(Algorithm::RS256);
    validation.set_issuer(&[ISSUER]);
    validation.validate_aud = false;
    let key = DecodingKey::from_rsa_pem(SIGNER_PUB.as_bytes()).expect("public key");
    let claims = match jsonwebtoken::decode::<Value>(jwt, &key, &validation) {
        Ok(data) => data.claims,
        Err(e) => {
            return match state.method {
                Method::Kubernetes => error(403, &["permission denied"]),
                Method::Jwt => error(400, &[&format!("error verifying token: {e}")]),
            };
        }
    };
    let namespace_claim = claims["kubernetes.io"]["namespace"].as_str().unwrap_or("");
    let name_claim = claims["kubernetes.io"]["serviceaccount"]["name"]
        .as_str()
        .unwrap_or("");
    let audiences = super::token::audiences(&claims);
    match state.method {
        Method::Kubernetes => {
            if let Some(aud) = &role.audience
                && !audiences.contains(aud)
            {
                return error(
                    403,
                    &[
                        "invalid audience (aud) claim: audience claim does not match any expected audience",
                    ],
                );
            }
            if !role
                .service_account_names
                .iter()
                .any(|n| n == "*" || n == name_claim)
            {
                return error(403, &["service account name not authorized"]);
            }
            if !role
                .service_account_namespaces
                .iter()
                .any(|n| n == "*" || n == namespace_claim)
            {
                return error(403, &["namespace not authorized"]);
            }
        }
        Method::Jwt => {
            let Some(aud) = &role.audience else {
                return error(
                    400,
                    &["audience claim found in JWT but no audiences bound to the role"],
                );
            };
            if !audiences.contains(aud) {
                return error(
                    400,
                    &["error validating claims: aud claim does not match any bound audience"],
                );
            }
            let subject = claims["sub"].as_str().unwrap_or("");
            let allowed = role.service_account_namespaces.iter().any(|ns| {
                role.service_account_names
                    .iter()
                    .any(|n| subject == format!("system:serviceaccount:{ns}:{n}"))
            });
            if !allowed {
                return error(
                    400,
                    &["error validating claims: sub claim does not match bound subject"],
                );
            }
        }
    }
    let serial = state.serial.fetch_add(1, Ordering::SeqCst);
    let token = format!("hvs.CAESIFakeVaultClientToken{serial:08}x{}", now());
    state.tokens.lock().unwrap().insert(
        token.clone(),
        Issued {
            policies: role.policies.clone(),
            expires: std::time::Instant::now()
                + std::time::Duration::from_secs(u64::try_from(role.ttl).unwrap_or(0)),
            namespace: namespace.clone(),
            revoked: false,
        },
    );
    let mut policies = vec!["default".to_string()];
    policies.extend(role.policies.iter().cloned());
    Response::json(
        200,
        json!({
            "request_id": format!("req-{serial}"), "lease_id": "", "renewable": false,
            "lease_duration": 0, "data": null, "wrap_info": null, "warnings": null,
            "auth": {
                "client_token": token,
                "accessor": format!("accessor-{serial}"),
                "policies": policies,
                "token_policies": policies,
                "metadata": {
                    "role": role_name,
                    "service_account_name": name_claim,
                    "service_account_namespace": namespace_claim,
                },
                "lease_duration": role.ttl,
                "renewable": true,
                "entity_id": format!("entity-{serial}"),
                "token_type": "service",
                "orphan": true,
            },
        }),
    )
}
