//! Local fakes of the three cloud metadata services `--fallback node`
//! reads, written from their documented wire formats. Each asserts every
//! header and field the plugin sends; a request the real service would
//! refuse is answered as it would answer and recorded, and dropping a fake
//! with recorded violations fails the test.
//!
//! * EC2 IMDSv2 (docs.aws.amazon.com/AWSEC2/latest/UserGuide/configuring-instance-metadata-service.html,
//!   .../instance-metadata-security-credentials.html): `PUT /latest/api/token` with
//!   `X-aws-ec2-metadata-token-ttl-seconds` (1 to 21600) answers the session token and repeats the
//!   TTL header; every GET must carry `X-aws-ec2-metadata-token` (a GET without it is IMDSv1,
//!   which an instance requiring tokens answers 401); `GET /latest/meta-data/iam/security-credentials/`
//!   answers the role name or 404, `.../<role>` the credentials JSON.
//! * Azure IMDS (learn.microsoft.com/entra/identity/managed-identities-azure-resources/how-to-use-vm-token):
//!   `GET /metadata/identity/oauth2/token?api-version=2018-02-01&resource=...&client_id=...` with
//!   `Metadata: true` (else 400 `bad_request_102`); every value of the answer a JSON string.
//! * GCE metadata server (cloud.google.com/compute/docs/access/authenticate-workloads#applications,
//!   google-auth-library-python `compute_engine/_metadata.py`): `GET
//!   /computeMetadata/v1/instance/service-accounts/default/token` with `Metadata-Flavor: Google`
//!   (else 403), answering `{"access_token","expires_in":<int>,"token_type":"Bearer"}` and the
//!   response header `Metadata-Flavor: Google`.
//!
//! Every fake can also be told to misbehave: never answer, answer garbage, answer a huge body.

use std::sync::{Arc, Mutex};

use serde_json::json;

use super::http_server::{Request, Response, TestServer, Violations};

/// How a fake answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behaviour {
    Normal,
    /// Accepts the connection, never answers.
    Silent,
    /// `200` with a body that is not what the service sends.
    Garbage,
    /// `200` with 8 MiB of JSON-looking text.
    Huge,
}

fn misbehave(behaviour: Behaviour) -> Option<Response> {
    match behaviour {
        Behaviour::Normal => None,
        Behaviour::Silent => Some(Response::hang()),
        Behaviour::Garbage => Some(Response::text(200, "<html>captive portal</html>")),
        Behaviour::Huge => Some(Response::text(
            200,
            format!("{{\"access_token\":\"{}\"}}", "A".repeat(8 << 20)),
        )),
    }
}

/// A fake that records violations and can misbehave.
pub struct Fake {
    pub server: TestServer,
    violations: Arc<Violations>,
    behaviour: Arc<Mutex<Behaviour>>,
    name: &'static str,
}

impl Fake {
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// `host:port`, for `GCE_METADATA_HOST`.
    pub fn host(&self) -> String {
        self.server.addr().to_string()
    }

    pub fn behave(&self, behaviour: Behaviour) {
        *self.behaviour.lock().unwrap_or_else(|p| p.into_inner()) = behaviour;
    }

    pub fn requests(&self) -> Vec<Request> {
        self.server.requests()
    }

    fn start(
        name: &'static str,
        handle: impl Fn(&Request, &Violations) -> Response + Send + Sync + 'static,
    ) -> Self {
        let violations = Arc::new(Violations::default());
        let behaviour = Arc::new(Mutex::new(Behaviour::Normal));
        let (v, b) = (Arc::clone(&violations), Arc::clone(&behaviour));
        let server = TestServer::start(move |req| {
            if req.header("x-forwarded-for").is_some() || req.header("via").is_some() {
                v.add(format!("{} {} came through a proxy", req.method, req.path));
            }
            let now = *b.lock().unwrap_or_else(|p| p.into_inner());
            misbehave(now).unwrap_or_else(|| handle(req, &v))
        });
        Fake {
            server,
            violations,
            behaviour,
            name,
        }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.violations.check(self.name);
    }
}

/// The instance profile an IMDS fake serves.
#[derive(Clone, Debug)]
pub struct InstanceProfile {
    pub role: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: String,
    pub expiration: String,
}

/// EC2 IMDSv2. `profile` `None`: no role attached (404).
pub fn imds(profile: Option<InstanceProfile>) -> Fake {
    let issued: Arc<Mutex<Vec<String>>> = Arc::default();
    Fake::start("EC2 IMDSv2", move |req, v| {
        if req.method == "PUT" && req.path == "/latest/api/token" {
            let ttl = req.header("x-aws-ec2-metadata-token-ttl-seconds");
            let ttl_ok = ttl
                .and_then(|t| t.parse::<u32>().ok())
                .is_some_and(|t| (1..=21600).contains(&t));
            if !ttl_ok {
                v.add(format!("token PUT with TTL header {ttl:?}"));
                return Response::text(400, "Bad Request");
            }
            if req.header("x-aws-ec2-metadata-token").is_some() || !req.body.is_empty() {
                v.add("token PUT carrying a token or a body".into());
            }
            let token = format!("AQAEAimds-session-{}", issued.lock().unwrap().len());
            issued.lock().unwrap().push(token.clone());
            return Response::text(200, token)
                .with_header("X-aws-ec2-metadata-token-ttl-seconds", ttl.unwrap_or(""));
        }
        if req.method != "GET" {
            v.add(format!("{} {}", req.method, req.path));
            return Response::text(405, "Method Not Allowed");
        }
        let Some(token) = req.header("x-aws-ec2-metadata-token") else {
            v.add(format!("IMDSv1 GET {} (no session token)", req.path));
            return Response::text(401, "Unauthorized");
        };
        if !issued.lock().unwrap().iter().any(|t| t == token) {
            v.add(format!("GET {} with a token IMDS never issued", req.path));
            return Response::text(401, "Unauthorized");
        }
        let base = "/latest/meta-data/iam/security-credentials/";
        let Some(rest) = req.path.strip_prefix(base) else {
            v.add(format!("GET {}", req.path));
            return Response::text(404, "Not Found");
        };
        let Some(profile) = &profile else {
            return Response::text(404, "Not Found");
        };
        if rest.is_empty() {
            return Response::text(200, profile.role.clone());
        }
        if rest != profile.role {
            v.add(format!("GET credentials of role {rest:?}"));
            return Response::text(404, "Not Found");
        }
        Response::json(
            200,
            json!({
                "Code": "Success",
                "LastUpdated": "2026-11-25T00:00:00Z",
                "Type": "AWS-HMAC",
                "AccessKeyId": profile.access_key_id,
                "SecretAccessKey": profile.secret_access_key,
                "Token": profile.session_token,
                "Expiration": profile.expiration,
            }),
        )
        .with_header("Content-Type", "text/plain")
    })
}

/// Azure IMDS with one user-assigned identity, `client_id`; `mint` makes
/// its Entra token (the fake Entra's minter, so the fake ACR accepts it).
pub fn azure_imds(client_id: &str, mint: impl Fn(&str) -> String + Send + Sync + 'static) -> Fake {
    let client_id = client_id.to_string();
    Fake::start("Azure IMDS", move |req, v| {
        if req.method != "GET" || req.path != "/metadata/identity/oauth2/token" {
            v.add(format!("{} {}", req.method, req.path));
            return Response::json(404, json!({"error": "not_found"}));
        }
        if req.header("metadata") != Some("true") {
            v.add("no Metadata: true header".into());
            return Response::json(
                400,
                json!({"error": "invalid_request", "error_description": "Required metadata header not specified"}),
            );
        }
        let pairs = req.query_pairs();
        let names: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
        let value = |k: &str| req.query_values(k).first().cloned();
        for name in &names {
            if !["api-version", "resource", "client_id"].contains(name) {
                v.add(format!("query parameter {name}"));
            }
        }
        if value("api-version").as_deref() != Some("2018-02-01") {
            v.add(format!("api-version {:?}", value("api-version")));
            return Response::json(400, json!({"error": "invalid_request"}));
        }
        if value("resource").as_deref() != Some("https://containerregistry.azure.net") {
            v.add(format!("resource {:?}", value("resource")));
            return Response::json(400, json!({"error": "invalid_resource"}));
        }
        if value("client_id").as_deref() != Some(client_id.as_str()) {
            return Response::json(
                400,
                json!({"error": "invalid_request", "error_description": "Identity not found"}),
            );
        }
        let now = super::token::now();
        Response::json(
            200,
            json!({
                "access_token": mint(&client_id),
                "refresh_token": "",
                "expires_in": "86399",
                "expires_on": (now + 86399).to_string(),
                "not_before": now.to_string(),
                "resource": "https://containerregistry.azure.net",
                "token_type": "Bearer",
            }),
        )
    })
}

/// The GCE metadata server, issuing `token` for the node's default service
/// account.
pub fn gce(token: &str) -> Fake {
    let token = token.to_string();
    Fake::start("GCE metadata server", move |req, v| {
        if req.header("metadata-flavor") != Some("Google") {
            v.add(format!(
                "{} {} without Metadata-Flavor: Google",
                req.method, req.path
            ));
            return Response::text(403, "Missing required header \"Metadata-Flavor\"");
        }
        if req.method != "GET"
            || req.path != "/computeMetadata/v1/instance/service-accounts/default/token"
            || !req.query.is_empty()
        {
            v.add(format!("{} {}?{}", req.method, req.path, req.query));
            return Response::text(404, "Not Found");
        }
        Response::json(
            200,
            json!({"access_token": token, "expires_in": 3599, "token_type": "Bearer"}),
        )
        .with_header("Metadata-Flavor", "Google")
    })
}

/// A `127.0.0.1` port where nothing listens (bound, then closed).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}
