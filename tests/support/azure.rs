//! Local fakes of the two Azure endpoints the azure exchanger calls, written
//! from their documented wire formats:
//!
//! * Entra ID's token endpoint, `POST /{tenant}/oauth2/v2.0/token`, client
//!   credentials grant with a federated JWT client assertion (RFC 7523, the
//!   Microsoft identity platform's "client assertion" flow). It verifies the
//!   assertion as Entra does: signature against the cluster issuer's key,
//!   then the federated identity credential (issuer, subject, audience) of
//!   the application, and answers with an access token for the ACR resource
//!   or with Entra's error JSON (`error`, `error_description` starting with
//!   `AADSTS<code>:`, `error_codes`, `trace_id`, `correlation_id`, ...).
//! * ACR's `POST /oauth2/exchange` (Azure/acr docs/AAD-OAuth.md), which
//!   verifies the Entra access token and mints a refresh token: a signed JWT
//!   whose `aud` is the login server and whose `exp` is three hours out.
//!
//! Every form field the plugin sends is checked, and any extra field is a
//! violation. A violation is answered the way the real service would
//! (AADSTS900144 / `BAD_REQUEST`) and also recorded; dropping a fake with
//! recorded violations fails the test, so a test cannot pass on a request
//! the real service would have refused.
//!
//! Both fakes sign with HS256 and a per-test random key. Entra and ACR sign
//! with RS256 keys; the plugin never verifies either token, only reads the
//! refresh token's `exp`, so the algorithm is the fakes' private matter.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::{Value, json};

use super::http_server::{Fake, Ledger, Request, Response};
use super::token::{self, now};

pub const AUDIENCE: &str = "api://AzureADTokenExchange";
pub const SCOPE: &str = "https://containerregistry.azure.net/.default";
pub const ACR_RESOURCE: &str = "https://containerregistry.azure.net";
pub const ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
pub const NULL_GUID: &str = "00000000-0000-0000-0000-000000000000";
/// ACR refresh tokens live about three hours.
pub const REFRESH_LIFETIME_SECS: i64 = 3 * 3600;

/// The ACR login server the tests pull from.
pub const ACR_HOST: &str = "contoso.azurecr.io";
/// Azure Workload Identity's annotations naming the identity.
pub const WI_CLIENT: &str = "azure.workload.identity/client-id";
pub const WI_TENANT: &str = "azure.workload.identity/tenant-id";
pub const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
pub const CLIENT_ID: &str = "5b8e2c1a-9f3d-4e7b-a6c2-1d0f8e9a7b3c";
pub const OBJECT_ID: &str = "0c7d3a2b-1e4f-4a5b-8c9d-2e3f4a5b6c7d";

fn guid() -> String {
    let k = super::token::random_key();
    let hex: String = k.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn hs256(claims: &Value, key: &[u8]) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(key),
    )
    .expect("sign")
}

fn verify_hs256(jwt: &str, key: &[u8], audience: &str, issuer: &str) -> Result<Value, String> {
    let mut validation = Validation::new(Algorithm::HS256);
    validation.set_audience(&[audience]);
    validation.set_issuer(&[issuer]);
    jsonwebtoken::decode::<Value>(jwt, &DecodingKey::from_secret(key), &validation)
        .map(|d| d.claims)
        .map_err(|e| e.to_string())
}

/// Checks a form POST: method, path, content type, and exactly these keys.
fn check_form(
    req: &Request,
    path: &str,
    keys: &[&str],
) -> Result<BTreeMap<String, String>, String> {
    if req.method != "POST" {
        return Err(format!("method {} instead of POST", req.method));
    }
    if req.path != path {
        return Err(format!("path {} instead of {path}", req.path));
    }
    if !req.query.is_empty() {
        return Err(format!("unexpected query {:?}", req.query));
    }
    let content_type = req.header("content-type").unwrap_or_default();
    if content_type != "application/x-www-form-urlencoded" {
        return Err(format!("content type {content_type:?}"));
    }
    let pairs = super::http_server::form_urlencoded_pairs(&String::from_utf8_lossy(&req.body));
    let sent: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    let unique: BTreeSet<&str> = sent.iter().copied().collect();
    let expected: BTreeSet<&str> = keys.iter().copied().collect();
    if unique != expected || sent.len() != keys.len() {
        return Err(format!("form fields {sent:?} instead of {keys:?}"));
    }
    Ok(pairs.into_iter().collect())
}

/// One federated identity credential on the application.
#[derive(Clone, Debug)]
pub struct FederatedCredential {
    pub issuer: String,
    pub subject: String,
    pub audience: String,
}

/// The application registration (or user-assigned managed identity) the
/// fake Entra knows.
#[derive(Clone, Debug)]
pub struct App {
    pub tenant: String,
    pub client_id: String,
    pub object_id: String,
    pub enabled: bool,
    pub federated: Vec<FederatedCredential>,
}

impl App {
    /// An enabled app trusting `system:serviceaccount:<ns>:<name>` from the
    /// test cluster's issuer for the default audience.
    pub fn trusting(namespace: &str, name: &str) -> Self {
        App {
            tenant: TENANT.into(),
            client_id: CLIENT_ID.into(),
            object_id: OBJECT_ID.into(),
            enabled: true,
            federated: vec![FederatedCredential {
                issuer: token::ISSUER.into(),
                subject: format!("system:serviceaccount:{namespace}:{name}"),
                audience: AUDIENCE.into(),
            }],
        }
    }
}

struct EntraState {
    app: App,
    key: Vec<u8>,
    ledger: Arc<Ledger>,
    /// How long each answer takes (a slow upstream).
    delay: Mutex<std::time::Duration>,
}

/// The flags that point the azure provider at `entra` and `acr`, then
/// `extra` (the test's own: `--provider` among them).
pub fn flags(entra: &FakeEntra, acr: &FakeAcr, extra: &[&str]) -> Vec<String> {
    // Built here, not with plugin::flags: benches/upstream.rs compiles
    // this file without the plugin module.
    let (entra, acr) = (entra.url(), acr.url());
    let here = ["--azure-authority-host", &entra, "--acr-endpoint", &acr];
    here.iter().chain(extra).map(|s| s.to_string()).collect()
}

/// The fake Entra ID token endpoint.
pub struct FakeEntra {
    pub server: Fake,
    state: Arc<EntraState>,
}

impl FakeEntra {
    pub fn start(app: App) -> Self {
        let ledger = Arc::new(Ledger::default());
        let state = Arc::new(EntraState {
            app,
            key: super::token::random_key(),
            ledger: Arc::clone(&ledger),
            delay: Mutex::new(std::time::Duration::ZERO),
        });
        let handler_state = Arc::clone(&state);
        let server = Fake::with_ledger("Entra ID", ledger, move |req| {
            entra_handle(&handler_state, req)
        });
        FakeEntra { server, state }
    }

    /// The authority URL (what `--azure-authority-host` takes).
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Answers the next requests with `responses`, in order.
    pub fn script(&self, responses: impl IntoIterator<Item = Response>) {
        self.server.ledger().script(responses);
    }

    /// Makes every later answer take `delay`.
    pub fn delay(&self, delay: std::time::Duration) {
        *self.state.delay.lock().unwrap_or_else(|p| p.into_inner()) = delay;
    }

    /// The access tokens issued so far.
    pub fn issued(&self) -> Vec<String> {
        self.server.ledger().issued()
    }

    /// Mints what Entra issues to a managed identity through Azure IMDS:
    /// an ACR-audience access token of `client_id` in this tenant, which
    /// the fake ACR accepts like any other this fake issued.
    pub fn managed_identity_minter(&self) -> impl Fn(&str) -> String + Send + Sync + 'static {
        let state = Arc::clone(&self.state);
        move |client_id| {
            let iat = now();
            let access = hs256(
                &json!({
                    "aud": ACR_RESOURCE,
                    "iss": format!("https://sts.windows.net/{}/", state.app.tenant),
                    "iat": iat, "nbf": iat, "exp": iat + 86399,
                    "appid": client_id,
                    "oid": OBJECT_ID,
                    "sub": OBJECT_ID,
                    "tid": state.app.tenant,
                    "idtyp": "app",
                    "xms_mirid": "/subscriptions/0000/resourcegroups/MC_rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/aks-agentpool",
                    "ver": "1.0",
                }),
                &state.key,
            );
            state.ledger.issue(&access);
            access
        }
    }

    /// Verifies an access token this fake issued: what ACR does.
    pub fn verifier(&self) -> impl Fn(&str) -> Result<Value, String> + Send + Sync + 'static {
        let key = self.state.key.clone();
        let tenant = self.state.app.tenant.clone();
        move |jwt| {
            verify_hs256(
                jwt,
                &key,
                ACR_RESOURCE,
                &format!("https://sts.windows.net/{tenant}/"),
            )
        }
    }
}

/// Entra's error JSON, with the description format it uses.
pub fn entra_error(status: u16, error: &str, code: u32, message: &str) -> Response {
    let trace = guid();
    let correlation = guid();
    let timestamp = "2026-09-01 12:00:00Z";
    Response::json(
        status,
        json!({
            "error": error,
            "error_description": format!(
                "AADSTS{code}: {message} Trace ID: {trace} Correlation ID: {correlation} Timestamp: {timestamp}"
            ),
            "error_codes": [code],
            "timestamp": timestamp,
            "trace_id": trace,
            "correlation_id": correlation,
            "error_uri": format!("https://login.microsoftonline.com/error?code={code}"),
        }),
    )
}

fn entra_handle(state: &EntraState, req: &Request) -> Response {
    std::thread::sleep(*state.delay.lock().unwrap_or_else(|p| p.into_inner()));
    let app = &state.app;
    // The tenant is the first path segment.
    let tenant = req
        .path
        .strip_prefix('/')
        .and_then(|p| p.strip_suffix("/oauth2/v2.0/token"))
        .unwrap_or_default()
        .to_string();
    let form = match check_form(
        req,
        &format!("/{tenant}/oauth2/v2.0/token"),
        &[
            "grant_type",
            "client_id",
            "client_assertion_type",
            "client_assertion",
            "scope",
        ],
    ) {
        Ok(form) => form,
        Err(why) => {
            state.ledger.violations.add(why.clone());
            return entra_error(
                400,
                "invalid_request",
                900144,
                &format!("The request body must contain the expected parameters: {why}."),
            );
        }
    };
    for (field, want) in [
        ("grant_type", "client_credentials"),
        ("client_assertion_type", ASSERTION_TYPE),
        ("scope", SCOPE),
    ] {
        if form[field] != want {
            state
                .ledger
                .violations
                .add(format!("{field}={:?}, expected {want:?}", form[field]));
            return entra_error(400, "invalid_request", 900144, &format!("Invalid {field}."));
        }
    }
    if let Some(scripted) = state.ledger.scripted() {
        return scripted;
    }
    if tenant != app.tenant {
        return entra_error(
            400,
            "invalid_request",
            90002,
            &format!(
                "Tenant '{tenant}' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud."
            ),
        );
    }
    if form["client_id"] != app.client_id {
        return entra_error(
            400,
            "unauthorized_client",
            700016,
            &format!(
                "Application with identifier '{}' was not found in the directory 'Contoso'.",
                form["client_id"]
            ),
        );
    }
    if !app.enabled {
        return entra_error(
            400,
            "unauthorized_client",
            7000112,
            &format!("Application '{}'(test-app) is disabled.", app.client_id),
        );
    }
    // The assertion: signed by the cluster's issuer (Entra fetches its JWKS),
    // then matched against the federated credentials.
    let assertion = &form["client_assertion"];
    let claims = match decode_unverified(assertion) {
        Some(c) => c,
        None => {
            return entra_error(
                400,
                "invalid_client",
                50027,
                "JWT token is invalid or malformed.",
            );
        }
    };
    let issuer = claims["iss"].as_str().unwrap_or_default().to_string();
    let subject = claims["sub"].as_str().unwrap_or_default().to_string();
    let audiences = super::token::audiences(&claims);
    if !app.federated.iter().any(|f| f.issuer == issuer) {
        return entra_error(
            400,
            "invalid_client",
            700211,
            &format!(
                "No matching federated identity record found for presented assertion issuer '{issuer}'."
            ),
        );
    }
    if !app
        .federated
        .iter()
        .any(|f| f.issuer == issuer && f.subject == subject)
    {
        return entra_error(
            400,
            "invalid_client",
            700213,
            &format!(
                "No matching federated identity record found for presented assertion subject '{subject}'. Check your federated identity credential Subject, Audience and Issuer against the presented assertion. https://learn.microsoft.com/entra/workload-id/workload-identity-federation"
            ),
        );
    }
    let Some(fic) = app
        .federated
        .iter()
        .find(|f| f.issuer == issuer && f.subject == subject && audiences.contains(&f.audience))
    else {
        return entra_error(
            400,
            "invalid_client",
            700212,
            &format!(
                "No matching federated identity record found for presented assertion audience '{}'.",
                audiences.join(",")
            ),
        );
    };
    if let Err(why) = token::verify(assertion, &fic.audience) {
        return entra_error(
            401,
            "invalid_client",
            700027,
            &format!("Client assertion failed signature validation ({why})."),
        );
    }
    let iat = now();
    let access = hs256(
        &json!({
            "aud": ACR_RESOURCE,
            "iss": format!("https://sts.windows.net/{}/", app.tenant),
            "iat": iat, "nbf": iat, "exp": iat + 3599,
            "appid": app.client_id,
            "oid": app.object_id,
            "sub": app.object_id,
            "tid": app.tenant,
            "idtyp": "app",
            "ver": "1.0",
        }),
        &state.key,
    );
    state.ledger.issue(&access);
    Response::json(
        200,
        json!({
            "token_type": "Bearer",
            "expires_in": 3599,
            "ext_expires_in": 3599,
            "access_token": access,
        }),
    )
}

fn decode_unverified(jwt: &str) -> Option<Value> {
    use base64::Engine as _;
    let payload = jwt.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The refresh token issuer ACR writes.
pub const ACR_ISSUER: &str = "Azure Container Registry";

/// Checks a JWT and returns its claims.
type Verifier = Box<dyn Fn(&str) -> Result<Value, String> + Send + Sync>;

struct AcrState {
    login_server: String,
    key: Vec<u8>,
    verify_access: Verifier,
    ledger: Arc<Ledger>,
    /// How long each answer takes (a slow upstream).
    delay: Mutex<std::time::Duration>,
}

/// The fake ACR login server (only `/oauth2/exchange`).
pub struct FakeAcr {
    pub server: Fake,
    state: Arc<AcrState>,
}

impl FakeAcr {
    /// A login server `login_server` that trusts `entra`'s access tokens.
    pub fn start(login_server: &str, entra: &FakeEntra) -> Self {
        let ledger = Arc::new(Ledger::default());
        let state = Arc::new(AcrState {
            login_server: login_server.into(),
            key: super::token::random_key(),
            verify_access: Box::new(entra.verifier()),
            ledger: Arc::clone(&ledger),
            delay: Mutex::new(std::time::Duration::ZERO),
        });
        let handler_state = Arc::clone(&state);
        let server = Fake::with_ledger("ACR", ledger, move |req| acr_handle(&handler_state, req));
        FakeAcr { server, state }
    }

    /// What `--acr-endpoint` takes.
    pub fn url(&self) -> String {
        self.server.url()
    }

    pub fn script(&self, responses: impl IntoIterator<Item = Response>) {
        self.server.ledger().script(responses);
    }

    /// Makes every later answer take `delay`.
    pub fn delay(&self, delay: std::time::Duration) {
        *self.state.delay.lock().unwrap_or_else(|p| p.into_inner()) = delay;
    }

    /// The refresh tokens minted so far.
    pub fn minted(&self) -> Vec<String> {
        self.server.ledger().issued()
    }

    /// Verifies a refresh token as ACR's `/oauth2/token` does before
    /// granting repository access tokens: signature, issuer, audience = the
    /// login server, expiry. For a registry's token service.
    pub fn refresh_verifier(
        &self,
    ) -> impl Fn(&str) -> Result<Value, String> + Send + Sync + 'static {
        let key = self.state.key.clone();
        let service = self.state.login_server.clone();
        move |jwt| verify_hs256(jwt, &key, &service, ACR_ISSUER)
    }
}

/// ACR's registry-API error shape.
pub fn acr_error(status: u16, code: &str, message: &str) -> Response {
    Response::json(
        status,
        json!({"errors": [{"code": code, "message": message, "detail": null}]}),
    )
}

fn acr_handle(state: &AcrState, req: &Request) -> Response {
    std::thread::sleep(*state.delay.lock().unwrap_or_else(|p| p.into_inner()));
    let form = match check_form(
        req,
        "/oauth2/exchange",
        &["grant_type", "service", "tenant", "access_token"],
    ) {
        Ok(form) => form,
        Err(why) => {
            state.ledger.violations.add(why.clone());
            return acr_error(400, "BAD_REQUEST", &why);
        }
    };
    if form["grant_type"] != "access_token" {
        state
            .ledger
            .violations
            .add(format!("grant_type={:?}", form["grant_type"]));
        return acr_error(400, "BAD_REQUEST", "unsupported grant_type");
    }
    if form["service"] != state.login_server {
        state.ledger.violations.add(format!(
            "service={:?}, expected {:?}",
            form["service"], state.login_server
        ));
        return acr_error(400, "BAD_REQUEST", "service does not match the registry");
    }
    if let Some(scripted) = state.ledger.scripted() {
        return scripted;
    }
    let claims = match (state.verify_access)(&form["access_token"]) {
        Ok(claims) => claims,
        Err(_) => {
            return acr_error(
                401,
                "UNAUTHORIZED",
                "authentication required, visit https://aka.ms/acr/authorization for more information.",
            );
        }
    };
    // An empty tenant lets ACR take it from the access token (needed only
    // "when using a grant type that doesn't allow the ACR RP to extract
    // the tenant from the JWT", msi-acrpull #69); a given one must match.
    if !form["tenant"].is_empty() && claims["tid"] != form["tenant"].as_str() {
        return acr_error(
            401,
            "UNAUTHORIZED",
            "the access token's tenant does not match the tenant parameter",
        );
    }
    let iat = now();
    let refresh = hs256(
        &json!({
            "jti": guid(),
            "sub": claims["oid"],
            "nbf": iat, "iat": iat, "exp": iat + REFRESH_LIFETIME_SECS,
            "iss": ACR_ISSUER,
            "aud": state.login_server,
            "version": "1.0",
            "rid": guid().replace('-', ""),
            "grant_type": "refresh_token",
            "appid": claims["appid"],
            "tenant": claims["tid"],
            "permissions": {"actions": ["read"], "notActions": []},
            "roles": [],
        }),
        &state.key,
    );
    state.ledger.issue(&refresh);
    Response::json(200, json!({"refresh_token": refresh}))
}

/// The audience of identity-binding service account tokens.
pub const BINDING_AUDIENCE: &str = "api://AKSIdentityBinding";
/// The SNI name the test cluster CA's certificate is for.
pub const BINDING_SNI: &str = "ib.cluster.test";

struct BindingState {
    /// (namespace, service account, client ID) allowed to use an identity:
    /// the cluster's `use-managed-identity` RBAC.
    bound: Vec<(String, String, String)>,
    mint: Box<dyn Fn(&str) -> String + Send + Sync>,
    /// The TLS front's port, for the `Host` header check.
    port: std::sync::OnceLock<u16>,
    ledger: Arc<Ledger>,
}

/// A faithful fake of AKS's identity-binding endpoint, from
/// cloud-provider-azure #9907 (`identity_bindings_credentials.go`): TLS
/// with a certificate for [`BINDING_SNI`] from a CA of its own
/// (tests/fixtures/tls/cluster-ca.pem), `POST /`, exactly
/// `Content-Type: application/x-www-form-urlencoded`, exactly the five
/// form fields with their constant values, the assertion a service
/// account token for [`BINDING_AUDIENCE`] whose account is bound to the
/// client ID; it answers `{"access_token", "expires_in"}` with an access
/// token `entra`'s fake ACR accepts for that identity. Anything else is a
/// violation, checked on drop.
pub struct FakeIdentityBinding {
    pub server: Fake,
    pub front: super::net::TlsFront,
    state: Arc<BindingState>,
}

impl FakeIdentityBinding {
    pub fn start(entra: &FakeEntra, bound: &[(&str, &str, &str)]) -> Self {
        let ledger = Arc::new(Ledger::default());
        let state = Arc::new(BindingState {
            bound: bound
                .iter()
                .map(|(ns, sa, id)| (ns.to_string(), sa.to_string(), id.to_string()))
                .collect(),
            mint: Box::new(entra.managed_identity_minter()),
            port: std::sync::OnceLock::new(),
            ledger: Arc::clone(&ledger),
        });
        let handler_state = Arc::clone(&state);
        let server = Fake::with_ledger("identity binding", ledger, move |req| {
            binding_handle(&handler_state, req)
        });
        let front = super::net::TlsFront::start_with(
            server.addr(),
            super::net::BINDING_PEM,
            super::net::BINDING_KEY,
        );
        let _ = state.port.set(front.addr().port());
        FakeIdentityBinding {
            server,
            front,
            state,
        }
    }

    /// What `--azure-identity-binding-address` takes: `127.0.0.1:PORT`.
    pub fn address(&self) -> String {
        self.front.addr().to_string()
    }

    pub fn script(&self, responses: impl IntoIterator<Item = Response>) {
        self.server.ledger().script(responses);
    }

    /// The access tokens issued so far.
    pub fn issued(&self) -> Vec<String> {
        self.server.ledger().issued()
    }
}

fn binding_handle(state: &BindingState, req: &Request) -> Response {
    let port = state.port.get().copied().unwrap_or_default();
    let host = req.header("host").unwrap_or_default();
    if host != format!("{BINDING_SNI}:{port}") {
        state.ledger.violations.add(format!("Host {host:?}"));
    }
    let form = match check_form(
        req,
        "/",
        &[
            "grant_type",
            "client_assertion_type",
            "client_assertion",
            "client_id",
            "scope",
        ],
    ) {
        Ok(form) => form,
        Err(why) => {
            state.ledger.violations.add(why.clone());
            return Response::json(
                400,
                json!({"error": "invalid_request", "error_description": why}),
            );
        }
    };
    for (key, want) in [
        ("grant_type", "client_credentials"),
        ("client_assertion_type", ASSERTION_TYPE),
        ("scope", SCOPE),
    ] {
        if form[key] != want {
            state
                .ledger
                .violations
                .add(format!("{key}={:?}", form[key]));
        }
    }
    if let Some(scripted) = state.ledger.scripted() {
        return scripted;
    }
    let claims = match token::verify(&form["client_assertion"], BINDING_AUDIENCE) {
        Ok(claims) => claims,
        Err(why) => {
            return Response::json(
                401,
                json!({"error": "invalid_client", "error_description": format!("assertion rejected: {why}")}),
            );
        }
    };
    let k8s = &claims["kubernetes.io"];
    let (ns, sa) = (
        k8s["namespace"].as_str().unwrap_or_default(),
        k8s["serviceaccount"]["name"].as_str().unwrap_or_default(),
    );
    let client_id = &form["client_id"];
    if !state
        .bound
        .iter()
        .any(|(n, s, id)| n == ns && s == sa && id == client_id)
    {
        return Response::json(
            403,
            json!({"error": "unauthorized_client", "error_description": format!("service account {ns}/{sa} may not use managed identity {client_id}")}),
        );
    }
    let access = (state.mint)(client_id);
    state.ledger.issue(&access);
    Response::json(200, json!({"access_token": access, "expires_in": 3600}))
}
