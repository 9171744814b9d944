//! A real OCI registry (Debian's `docker-registry`, CNCF distribution 2.8) for end-to-end tests,
//! plus `skopeo` to push to it and pull from it.
//!
//! The point is to prove that credentials the plugin hands to the kubelet are accepted by a real
//! registry, not by our own idea of one. Two auth modes mirror the clouds:
//!
//! * token auth ([`Registry::start_with_token_auth`]): the registry answers `401` with a
//!   `Bearer` challenge and the client trades Basic credentials for a JWT at a token service,
//!   like ACR (refresh token as password) and GCR/Artifact Registry do. The token service is an
//!   in-process [`TestServer`], so the test decides which credentials are valid.
//! * htpasswd ([`Registry::start_with_htpasswd`]): plain Basic auth, like ECR.
//!
//! Clients log in to a token service in two ways. skopeo sends `GET realm?service=&scope=` with
//! Basic credentials. containerd first POSTs an OAuth2 password grant to the realm and falls back
//! to that GET only when the POST is answered 400, 401, 404 or 405 (see
//! [`super::containerd`]); [`TokenPost`] makes the token service answer the POST the way the
//! registry it stands for does, and [`Registry::token_calls`] shows which way a login went.
//!
//! The registry listens on `127.0.0.1:0`; its real port is read from its log, so there is no
//! pick-a-free-port race. It runs with an empty environment (distribution lets `REGISTRY_*`
//! variables override its config file) and skopeo runs with a private `HOME`, registries.conf
//! and policy, so nothing from the developer's machine leaks in.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::json;
use sha2::{Digest, Sha256};
use tempfile::TempDir;

use super::http_server::{Request, Response, TestServer};
use super::token::{now, rfc3339};

const TOKEN_KEY_PEM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/registry-token.key"
);
const TOKEN_CERT_PEM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/registry-token.crt"
);
/// How long the registry may take to answer `/v2/` after being spawned.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Global bound for every skopeo run, so a misbehaving server fails a test instead of hanging
/// it.
const SKOPEO_TIMEOUT: &str = "60s";
const INSTALL_HINT: &str =
    "run `bash .ci/run`, or `apt-get install -y docker-registry skopeo apache2-utils`";

/// A running `docker-registry` process. Dropping it kills and reaps the process and removes its
/// storage; in token mode it also stops the token service.
///
/// Keep it in a local of the test, not in a `static`: statics are never dropped, so the registry
/// would outlive the test binary.
pub struct Registry {
    child: Child,
    host: String,
    /// Credentials with pull and push rights (used by [`Registry::push_test_image`]).
    push_user: String,
    push_password: String,
    token: Option<TokenService>,
    /// Holds config, storage, log and skopeo's private home; removed on drop.
    dir: TempDir,
}

impl Registry {
    /// Username of the built-in account with pull+push rights in token mode.
    pub const ADMIN_USER: &'static str = "wicp-admin";
    /// `service` the registry names in its challenge and expects as the token's `aud`.
    pub const SERVICE: &'static str = "wicp-test-registry";
    /// `iss` the registry expects in tokens.
    pub const ISSUER: &'static str = "wicp-test-issuer";

    /// Starts a registry that uses token auth, with an in-process token service that also
    /// answers the OAuth2 POST ([`TokenPost::OAuth2`]).
    ///
    /// The token service (`GET /token`) issues a token for HTTP Basic credentials that are either
    /// [`Registry::ADMIN_USER`] / [`Registry::admin_password`] (pull+push) or accepted by
    /// `accept(username, password)` (pull only); anything else gets `401`.
    pub fn start_with_token_auth(
        accept: impl Fn(&str, &str) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self::start_with_token_service(TokenPost::OAuth2, accept)
    }

    /// Like [`Registry::start_with_token_auth`], with the token service answering
    /// `POST /token` as `post` says.
    pub fn start_with_token_service(
        post: TokenPost,
        accept: impl Fn(&str, &str) -> bool + Send + Sync + 'static,
    ) -> Self {
        super::require_tools("registry", INSTALL_HINT, &["docker-registry", "skopeo"]);
        let dir = tempdir();
        let admin_password = random_secret();
        let token = TokenService::start(admin_password.clone(), post, accept);
        let auth = json!({
            "token": {
                "realm": format!("{}/token", token.server.url()),
                "service": Self::SERVICE,
                "issuer": Self::ISSUER,
                "rootcertbundle": TOKEN_CERT_PEM,
            }
        });
        Self::spawn(
            dir,
            &auth,
            Self::ADMIN_USER.to_owned(),
            admin_password,
            Some(token),
        )
    }

    /// Starts a registry that uses token auth with a token service the test runs itself at
    /// `realm` (a fake of a registry's own token endpoint, such as Zot's). That service signs
    /// tokens with [`Registry::sign_token`]; `push_user`/`push_password` are the credentials it
    /// grants push to, for [`Registry::push_test_image`].
    pub fn start_with_token_realm(realm: &str, push_user: &str, push_password: &str) -> Self {
        super::require_tools("registry", INSTALL_HINT, &["docker-registry", "skopeo"]);
        let dir = tempdir();
        let auth = json!({
            "token": {
                "realm": realm,
                "service": Self::SERVICE,
                "issuer": Self::ISSUER,
                "rootcertbundle": TOKEN_CERT_PEM,
            }
        });
        Self::spawn(
            dir,
            &auth,
            push_user.to_owned(),
            push_password.to_owned(),
            None,
        )
    }

    /// A registry token as this registry accepts them, granting each requested
    /// `repository:NAME:ACTIONS` scope the actions also in `granted`.
    pub fn sign_token(subject: &str, scopes: &[String], granted: &[&str]) -> String {
        let key_pem = fs::read(TOKEN_KEY_PEM).expect("read registry-token.key fixture");
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(&key_pem).expect("parse token key");
        let cert_pem = fs::read_to_string(TOKEN_CERT_PEM).expect("read registry-token.crt");
        issue_token(&key, &pem_body(&cert_pem), subject, scopes, granted)
    }

    /// Starts a registry with Basic auth for exactly one bcrypt htpasswd account, which also has
    /// push rights.
    pub fn start_with_htpasswd(user: &str, password: &str) -> Self {
        super::require_tools(
            "registry",
            INSTALL_HINT,
            &["docker-registry", "skopeo", "htpasswd"],
        );
        let dir = tempdir();
        // distribution accepts only bcrypt entries, hence `-B`.
        let output = Command::new("htpasswd")
            .args(["-Bbn", user, password])
            .output()
            .expect("run htpasswd");
        assert!(
            output.status.success(),
            "htpasswd failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let htpasswd = dir.path().join("htpasswd");
        fs::write(&htpasswd, &output.stdout).expect("write htpasswd file");
        let auth = json!({ "htpasswd": { "realm": "wicp-test-realm", "path": htpasswd } });
        Self::spawn(dir, &auth, user.to_owned(), password.to_owned(), None)
    }

    /// `127.0.0.1:PORT`: the registry host as it appears in image references and auth keys.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Password of [`Registry::ADMIN_USER`] in token mode; the htpasswd password otherwise.
    pub fn admin_password(&self) -> &str {
        &self.push_password
    }

    /// URL of the token service's realm (`http://127.0.0.1:PORT/token`), in token mode.
    pub fn token_realm(&self) -> Option<String> {
        self.token
            .as_ref()
            .map(|t| format!("{}/token", t.server.url()))
    }

    /// Token requests that were granted a token (admin or accepted credentials).
    pub fn token_requests_accepted(&self) -> usize {
        self.token
            .as_ref()
            .map_or(0, |t| t.counters.accepted.load(Ordering::SeqCst))
    }

    /// Token requests answered with `401`.
    pub fn token_requests_refused(&self) -> usize {
        self.token
            .as_ref()
            .map_or(0, |t| t.counters.refused.load(Ordering::SeqCst))
    }

    /// Every request the token service answered, in order: method and status, e.g.
    /// `("POST", 400)` then `("GET", 200)` for containerd logging in to ACR.
    pub fn token_calls(&self) -> Vec<(String, u16)> {
        self.token.as_ref().map_or_else(Vec::new, |t| {
            t.calls.lock().unwrap_or_else(|e| e.into_inner()).clone()
        })
    }

    /// Builds a one-layer image and pushes it as `HOST/repo:tag` with the push credentials.
    /// Returns the digest (`sha256:...`) of the manifest as the registry stores it, which is
    /// what a client that pulls the tag gets (skopeo compresses the layer on the way, so it is
    /// not the local layout's).
    ///
    /// # Panics
    /// With skopeo's stderr if the push fails.
    pub fn push_test_image(&self, repo: &str, tag: &str) -> String {
        let layout = tempfile::Builder::new()
            .prefix("oci-layout-")
            .tempdir_in(self.dir.path())
            .expect("create OCI layout dir");
        write_oci_layout(layout.path(), repo, tag);
        let source = format!("oci:{}:{tag}", layout.path().display());
        self.copy_in(
            &[],
            &source,
            &layout.path().join("pushed-digest"),
            repo,
            tag,
        )
    }

    /// `skopeo copy` of `source` to `HOST/repo:tag` with the push
    /// credentials (`extra` flags first); the digest the registry stores.
    fn copy_in(
        &self,
        extra: &[&str],
        source: &str,
        digestfile: &Path,
        repo: &str,
        tag: &str,
    ) -> String {
        let creds = format!("{}:{}", self.push_user, self.push_password);
        let dest = format!("docker://{}/{repo}:{tag}", self.host);
        let mut args = vec!["copy"];
        args.extend_from_slice(extra);
        args.extend([
            "--dest-tls-verify=false",
            "--dest-creds",
            &creds,
            "--digestfile",
            digestfile.to_str().expect("UTF-8 temp path"),
            source,
            &dest,
        ]);
        self.skopeo(&args)
            .unwrap_or_else(|stderr| panic!("skopeo copy to {dest} failed:\n{stderr}"));
        fs::read_to_string(digestfile)
            .expect("read skopeo's digest file")
            .trim()
            .to_owned()
    }

    /// Pushes an OCI archive (every image of its index) as `HOST/repo:tag`,
    /// as docs/release.md tells a user to (`skopeo copy --all
    /// --preserve-digests`); returns the digest the registry stores.
    pub fn push_oci_archive(&self, archive: &Path, repo: &str, tag: &str) -> String {
        let source = format!("oci-archive:{}", archive.display());
        let digestfile = self.dir.path().join("pushed-archive-digest");
        self.copy_in(
            &["--all", "--preserve-digests"],
            &source,
            &digestfile,
            repo,
            tag,
        )
    }

    /// Fetches the manifest and config of `HOST/repo:tag` with `skopeo inspect --creds`.
    /// `Err` carries skopeo's stderr, e.g. one containing `unauthorized`.
    ///
    /// skopeo splits `--creds` at the first `:`, so `username` must not contain one.
    pub fn pull(
        &self,
        repo: &str,
        tag: &str,
        username: &str,
        password: &str,
    ) -> Result<(), String> {
        let creds = format!("{username}:{password}");
        self.skopeo(&[
            "inspect",
            "--tls-verify=false",
            "--creds",
            &creds,
            &format!("docker://{}/{repo}:{tag}", self.host),
        ])
    }

    /// Like [`Registry::pull`], but with credentials from a docker `config.json`, e.g.
    /// `{"auths":{"127.0.0.1:PORT":{"auth":"<base64 user:pass>"}}}` (the shape the kubelet
    /// builds from the plugin's response).
    pub fn pull_with_authfile(
        &self,
        repo: &str,
        tag: &str,
        authfile_json: &str,
    ) -> Result<(), String> {
        let mut authfile = tempfile::Builder::new()
            .prefix("auth-")
            .suffix(".json")
            .tempfile_in(self.dir.path())
            .expect("create authfile");
        authfile
            .write_all(authfile_json.as_bytes())
            .expect("write authfile");
        let authfile_path = authfile
            .path()
            .to_str()
            .expect("UTF-8 temp path")
            .to_owned();
        self.skopeo(&[
            "inspect",
            "--tls-verify=false",
            "--authfile",
            &authfile_path,
            &format!("docker://{}/{repo}:{tag}", self.host),
        ])
    }

    /// Writes the config, spawns the registry, learns its port and waits until it serves.
    fn spawn(
        dir: TempDir,
        auth: &serde_json::Value,
        push_user: String,
        push_password: String,
        token: Option<TokenService>,
    ) -> Self {
        let root = dir.path();
        // JSON is YAML, so serde_json writes the config and takes care of quoting.
        let config = json!({
            "version": "0.1",
            "log": { "level": "info", "formatter": "text", "accesslog": { "disabled": true } },
            "storage": {
                "filesystem": { "rootdirectory": root.join("storage") },
                "delete": { "enabled": true },
                "maintenance": { "uploadpurging": { "enabled": false } },
            },
            // Port 0: the kernel picks a free port, which the registry logs.
            "http": { "addr": "127.0.0.1:0", "secret": random_secret() },
            "auth": auth,
        });
        let config_path = root.join("config.yml");
        fs::write(&config_path, config.to_string()).expect("write registry config");
        let log_path = root.join("registry.log");
        let log = fs::File::create(&log_path).expect("create registry log");
        let mut child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config_path)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run docker-registry ({e}); {INSTALL_HINT}"));
        let host = match wait_until_serving(&mut child, &log_path) {
            Ok(host) => host,
            Err(why) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "docker-registry did not come up: {why}\n--- registry log ---\n{}",
                    fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
        };
        Self {
            child,
            host,
            push_user,
            push_password,
            token,
            dir,
        }
    }

    /// Runs skopeo in a hermetic environment. `Err` is its stderr.
    fn skopeo(&self, args: &[&str]) -> Result<(), String> {
        let root = self.dir.path();
        let home = root.join("skopeo-home");
        let runtime = home.join("run");
        let registries_d = home.join("registries.d");
        let tmp = home.join("tmp");
        for d in [&runtime, &registries_d, &tmp] {
            fs::create_dir_all(d).expect("create skopeo dirs");
        }
        // An explicit policy: skopeo refuses to run without one, and /etc/containers may be
        // missing or stricter on other machines.
        let policy = home.join("policy.json");
        fs::write(
            &policy,
            r#"{"default":[{"type":"insecureAcceptAnything"}]}"#,
        )
        .expect("write policy.json");
        // Empty registries.conf: no mirrors, aliases or blocks from the host.
        let registries_conf = home.join("registries.conf");
        fs::write(&registries_conf, "").expect("write registries.conf");

        let output = Command::new("skopeo")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("XDG_RUNTIME_DIR", &runtime)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("CONTAINERS_REGISTRIES_CONF", &registries_conf)
            .env("TMPDIR", &tmp)
            .arg("--policy")
            .arg(&policy)
            .arg("--registries.d")
            .arg(&registries_d)
            .args(["--command-timeout", SKOPEO_TIMEOUT])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run skopeo ({e}); {INSTALL_HINT}"));
        if output.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How the token service answers containerd's `POST` to the realm (an OAuth2 password grant:
/// `grant_type=password`, `username`, `password`, `client_id`, `service`, `scope`).
#[derive(Clone, Copy, Debug)]
pub enum TokenPost {
    /// Grants it like a GET with the same credentials, answering `access_token`,
    /// `scope`, `expires_in` and `issued_at`: distribution's OAuth2 token spec
    /// (docs/spec/auth/oauth.md, which Docker Hub's auth.docker.io implements), and zot's
    /// `/zot/auth/token`, which takes GET and POST and reads the form's `password`
    /// (/work/shared/reference/registries.md §1.2). Used for passthrough.
    OAuth2,
    /// Refuses it with this status before looking at the credentials, as registries without
    /// the POST endpoint do; containerd then logs in with the GET. containerd's
    /// remotes/docker/authorizer.go (`doBearerAuth`) records the statuses: "As of January
    /// 2022, ACR is known to return 400" (ACR's /oauth2/token takes `grant_type=refresh_token`
    /// in a POST, not the password grant containerd sends with the null-GUID username), and
    /// "As of September 2017, GCR is known to return 404".
    Refuse(u16),
}

/// The registry's token service and what it has seen.
struct TokenService {
    server: TestServer,
    counters: Arc<TokenCounters>,
    calls: Arc<std::sync::Mutex<Vec<(String, u16)>>>,
}

#[derive(Default)]
struct TokenCounters {
    accepted: AtomicUsize,
    refused: AtomicUsize,
}

impl TokenService {
    fn start(
        admin_password: String,
        post: TokenPost,
        accept: impl Fn(&str, &str) -> bool + Send + Sync + 'static,
    ) -> Self {
        let key_pem = fs::read(TOKEN_KEY_PEM).expect("read registry-token.key fixture");
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(&key_pem).expect("parse token key");
        let cert_pem = fs::read_to_string(TOKEN_CERT_PEM).expect("read registry-token.crt");
        let cert_der_b64 = pem_body(&cert_pem);
        let counters = Arc::new(TokenCounters::default());
        let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&counters);
        let log = Arc::clone(&calls);
        // Issues a token for acceptable credentials, with the body `answer` shapes; 401 else.
        let grant = move |creds: &Option<(String, String)>,
                          scopes: &[String],
                          answer: fn(&str, &str) -> serde_json::Value| {
            let granted: &[&str] = match creds {
                Some((u, p)) if u == Registry::ADMIN_USER && *p == admin_password => {
                    &["pull", "push"]
                }
                Some((u, p)) if accept(u, p) => &["pull"],
                _ => {
                    seen.refused.fetch_add(1, Ordering::SeqCst);
                    return Response::json(
                        401,
                        json!({"errors": [{"code": "UNAUTHORIZED", "message": "invalid credentials"}]}),
                    )
                    .with_header("WWW-Authenticate", "Basic realm=\"wicp-test-token\"");
                }
            };
            let subject = creds.as_ref().map(|(u, _)| u.as_str()).unwrap_or_default();
            let token = issue_token(&key, &cert_der_b64, subject, scopes, granted);
            seen.accepted.fetch_add(1, Ordering::SeqCst);
            Response::json(200, answer(&token, &scopes.join(" ")))
        };
        let server = TestServer::start(move |req: &Request| {
            let response = match (req.method.as_str(), post) {
                ("POST", TokenPost::Refuse(status)) => Response::json(
                    status,
                    json!({"errors": [{"code": "UNSUPPORTED", "message": "use GET with Basic credentials"}]}),
                ),
                ("POST", TokenPost::OAuth2) => match oauth2_password_grant(req) {
                    Err(why) => Response::json(
                        400,
                        json!({"error": "invalid_request", "error_description": why}),
                    ),
                    Ok((creds, scopes)) => grant(&creds, &scopes, |token, scope| {
                        // The OAuth2 answer: no `token` field (distribution's oauth.md).
                        json!({
                            "access_token": token,
                            "scope": scope,
                            "expires_in": TOKEN_LIFETIME_SECS,
                            "issued_at": rfc3339(now()),
                        })
                    }),
                },
                _ => grant(&req.basic_auth(), &req.query_values("scope"), |token, _| {
                    json!({
                        "token": token,
                        "access_token": token,
                        "expires_in": TOKEN_LIFETIME_SECS,
                        "issued_at": rfc3339(now()),
                    })
                }),
            };
            log.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((req.method.clone(), response.status));
            response
        });
        Self {
            server,
            counters,
            calls,
        }
    }
}

/// Checks an OAuth2 password grant as containerd sends it (remotes/docker/auth/fetch.go,
/// `FetchTokenWithOAuth`): a form with `grant_type=password`, `username`, `password`,
/// `client_id` (containerd's is `containerd-client`), our `service`, and the `scope`s
/// space-separated. Returns the credentials and scopes, or what is wrong.
/// The credentials and scopes of a token request.
type Grant = (Option<(String, String)>, Vec<String>);

fn oauth2_password_grant(req: &Request) -> Result<Grant, String> {
    let content_type = req.header("content-type").unwrap_or_default();
    if !content_type.starts_with("application/x-www-form-urlencoded") {
        return Err(format!("content type {content_type:?} is not a form"));
    }
    let form = req.form();
    let field = |name: &str| form.get(name).map(String::as_str).unwrap_or_default();
    if field("grant_type") != "password" {
        return Err(format!("unsupported grant_type {:?}", field("grant_type")));
    }
    if field("client_id").is_empty() {
        return Err("client_id is required".to_owned());
    }
    if field("service") != Registry::SERVICE {
        return Err(format!("unknown service {:?}", field("service")));
    }
    let scopes: Vec<String> = field("scope").split(' ').map(str::to_owned).collect();
    if field("scope").is_empty() {
        return Err("scope is required".to_owned());
    }
    Ok((
        Some((field("username").to_owned(), field("password").to_owned())),
        scopes,
    ))
}

const TOKEN_LIFETIME_SECS: i64 = 300;

/// Signs a registry token (distribution's JWT profile) granting each requested
/// `repository:NAME:ACTIONS` scope the requested actions that are also in `granted`.
fn issue_token(
    key: &jsonwebtoken::EncodingKey,
    cert_der_b64: &str,
    subject: &str,
    scopes: &[String],
    granted: &[&str],
) -> String {
    let access: Vec<serde_json::Value> = scopes
        .iter()
        .flat_map(|s| s.split_whitespace())
        .filter_map(|scope| {
            // The name sits between the first and the last `:`.
            let (kind, rest) = scope.split_once(':')?;
            let (name, actions) = rest.rsplit_once(':')?;
            let actions: Vec<&str> = actions.split(',').filter(|a| granted.contains(a)).collect();
            (kind == "repository").then(|| json!({"type": kind, "name": name, "actions": actions}))
        })
        .collect();
    let now = now();
    let claims = json!({
        "iss": Registry::ISSUER,
        "sub": subject,
        // distribution 2.8 wants a single string here, not an array.
        "aud": Registry::SERVICE,
        "exp": now + TOKEN_LIFETIME_SECS,
        // Allow for clock skew between the token service and the registry (same host, but
        // second rounding).
        "nbf": now - 10,
        "iat": now,
        "jti": random_secret(),
        "access": access,
    });
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::RS256);
    // The registry checks this certificate against `rootcertbundle`, then the signature with it.
    header.x5c = Some(vec![cert_der_b64.to_owned()]);
    jsonwebtoken::encode(&header, &claims, key).expect("sign registry token")
}

/// Writes an OCI image layout with one uncompressed layer holding `/hello.txt`, tagged `tag`.
/// Returns the manifest digest.
fn write_oci_layout(dir: &Path, repo: &str, tag: &str) -> String {
    let blobs = dir.join("blobs").join("sha256");
    fs::create_dir_all(&blobs).expect("create blobs dir");
    let write_blob = |bytes: &[u8]| -> (String, usize) {
        let hex: String = Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        fs::write(blobs.join(&hex), bytes).expect("write blob");
        (format!("sha256:{hex}"), bytes.len())
    };

    let content = format!("hello from wicp test image {repo}:{tag}\n");
    let (layer_digest, layer_size) =
        write_blob(&tar_with_one_file("hello.txt", content.as_bytes()));
    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {},
        // Uncompressed layer, so its diff_id is its digest.
        "rootfs": { "type": "layers", "diff_ids": [layer_digest] },
    });
    let (config_digest, config_size) = write_blob(config.to_string().as_bytes());
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": layer_digest,
            "size": layer_size,
        }],
    });
    let (manifest_digest, manifest_size) = write_blob(manifest.to_string().as_bytes());
    let index = json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest_size,
            "annotations": { "org.opencontainers.image.ref.name": tag },
        }],
    });
    fs::write(dir.join("index.json"), index.to_string()).expect("write index.json");
    fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)
        .expect("write oci-layout");
    manifest_digest
}

/// A ustar archive with one regular file (mode 0644, mtime 0, so the bytes are reproducible).
fn tar_with_one_file(name: &str, content: &[u8]) -> Vec<u8> {
    fn octal(field: &mut [u8], value: usize) {
        // NUL-terminated, zero-padded octal, as ustar expects.
        let digits = format!("{value:0width$o}", width = field.len() - 1);
        field[..digits.len()].copy_from_slice(digits.as_bytes());
    }
    assert!(name.len() < 100, "tar member name too long");
    let mut header = [0u8; 512];
    header[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut header[100..108], 0o644);
    octal(&mut header[108..116], 0); // uid
    octal(&mut header[116..124], 0); // gid
    octal(&mut header[124..136], content.len());
    octal(&mut header[136..148], 0); // mtime
    header[156] = b'0'; // regular file
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    // The checksum is computed with its own field set to spaces.
    header[148..156].fill(b' ');
    let sum: usize = header.iter().map(|&b| usize::from(b)).sum();
    header[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());

    let mut tar = header.to_vec();
    tar.extend_from_slice(content);
    tar.resize(tar.len().next_multiple_of(512), 0);
    // End of archive: two zero blocks.
    tar.resize(tar.len() + 1024, 0);
    tar
}

/// Waits for the "listening on" log line, then for `/v2/` to answer 200 or 401.
fn wait_until_serving(child: &mut Child, log_path: &Path) -> Result<String, String> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let mut host = None;
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!("it exited with {status}"));
        }
        if host.is_none() {
            host = fs::read_to_string(log_path)
                .unwrap_or_default()
                .split("listening on ")
                .nth(1)
                .and_then(|rest| rest.split(['"', ' ', '\n']).next())
                .filter(|addr| addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"))
                .map(str::to_owned);
        }
        if let Some(host) = &host
            && matches!(v2_status(host), Some(200 | 401))
        {
            return Ok(host.clone());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no answer from /v2/ within {STARTUP_TIMEOUT:?} (address from log: {host:?})"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Status code of `GET /v2/`, or `None` if the registry is not answering yet.
fn v2_status(host: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(host).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET /v2/ HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(head.get(9..12)?).ok()?.parse().ok()
}

/// The base64 body of a PEM block (DER, still base64-encoded), as `x5c` wants it.
fn pem_body(pem: &str) -> String {
    let body: String = pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .map(str::trim)
        .collect();
    // Round-trip to catch a corrupt fixture here rather than as an opaque registry 401.
    let der = BASE64.decode(&body).expect("PEM body is base64");
    BASE64.encode(der)
}

fn tempdir() -> TempDir {
    tempfile::Builder::new()
        .prefix("wicp-registry-")
        .tempdir()
        .expect("create registry tempdir")
}

/// 128 bits from std's randomly keyed `SipHash`, mixed with the time: unguessable enough for test
/// passwords and token ids without a `rand` dependency.
fn random_secret() -> String {
    use std::hash::{BuildHasher, Hasher};
    let word = || {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos(),
        );
        h.finish()
    };
    format!("{:016x}{:016x}", word(), word())
}
