//! The aws exchanger, run as the kubelet runs it, against moto (a real STS
//! and ECR emulator), a real registry, and fake servers speaking the
//! documented wire formats where moto cannot produce the answer (STS and
//! ECR refusals, ECR Public, the EKS Pod Identity Agent).
//!
//! How an ECR host reaches local servers: the request's image is always a
//! genuine ECR host (`<account>.dkr.ecr.<region>.amazonaws.com/...`), which
//! the plugin parses for account, region and partition. Only the API
//! endpoints are redirected, with the SDK's standard `AWS_ENDPOINT_URL*`
//! variables, to moto or a fake server on 127.0.0.1. The registry itself is
//! never contacted by the plugin (it only returns credentials); the
//! end-to-end test takes the credentials returned under the ECR host and
//! pulls from a local docker-registry at 127.0.0.1:PORT with exactly those.

use crate::support;

use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use support::containerd::Containerd;
use support::http_server::{Request, Response, TestServer};
use support::moto::{Moto, ROLE_ANNOTATION};
use support::plugin::{self, Run, auth_entry, request, run, words};
use support::registry::Registry;
use support::token::{ISSUER, TokenSpec, now, rfc3339};

mod web_identity;
mod refusals;
mod pod_identity;

const ECR_ROLE_ANNOTATION: &str = "eks.amazonaws.com/ecr-role-arn";
const STS_AUDIENCE: &str = "sts.amazonaws.com";
const POD_IDENTITY_AUDIENCE: &str = "pods.eks.amazonaws.com";

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Runs the plugin for aws with debug logging (so the secret checks cover
/// every log line).
fn plugin(
    args: &[&str],
    env: &[(&str, &str)],
    image: &str,
    token: &str,
    annotations: &[(&str, &str)],
) -> Run {
    let mut all = vec!["--provider", "aws", "--log-level", "debug"];
    all.extend_from_slice(args);
    run(
        &all,
        env,
        request(image, Some(token), annotations).as_bytes(),
    )
}

// ---------------------------------------------------------------------------
// Fake STS and ECR, in the documented wire formats.

/// A successful AssumeRoleWithWebIdentity answer (query protocol, XML).
fn sts_success(
    akid: &str,
    secret: &str,
    session_token: &str,
    expires_at: i64,
    role: &str,
    session: &str,
) -> Response {
    let expiration = rfc3339(expires_at);
    let (_, role_name) = role.rsplit_once('/').unwrap();
    let account = role.split(':').nth(4).unwrap();
    let body = format!(
        r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:team:puller</SubjectFromWebIdentityToken>
    <Audience>sts.amazonaws.com</Audience>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::{account}:assumed-role/{role_name}/{session}</Arn>
      <AssumedRoleId>AROAEXAMPLEROLEID0001:{session}</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>{session_token}</SessionToken>
      <SecretAccessKey>{secret}</SecretAccessKey>
      <Expiration>{expiration}</Expiration>
      <AccessKeyId>{akid}</AccessKeyId>
    </Credentials>
    <Provider>oidc.cluster.test</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata>
    <RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE</RequestId>
  </ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"#
    );
    Response::text(200, body).with_header("Content-Type", "text/xml")
}

/// A fake STS that issues hour-long credentials for `role` to the
/// session the request names, as STS does, whatever else it is asked.
fn sts_issuing(role: &'static str) -> TestServer {
    TestServer::start(move |req| {
        let session = req
            .form()
            .get("RoleSessionName")
            .cloned()
            .unwrap_or_default();
        sts_success(
            STS_AKID,
            STS_SECRET,
            STS_SESSION_TOKEN,
            now() + 3600,
            role,
            &session,
        )
    })
}

/// An ECR (or ECR Public) answer in the AWS JSON 1.1 protocol.
fn ecr_answer(status: u16, body: Value) -> Response {
    Response::json(status, body).with_header("Content-Type", "application/x-amz-json-1.1")
}

/// ECR's GetAuthorizationToken answer: `AWS:password`, valid 12 hours.
fn ecr_token(password: &str, proxy_endpoint: &str) -> Response {
    ecr_answer(
        200,
        json!({"authorizationData": [{
            "authorizationToken": b64(&format!("AWS:{password}")),
            "expiresAt": now() + 12 * 3600,
            "proxyEndpoint": proxy_endpoint,
        }]}),
    )
}

/// Runs the plugin for `image` with the STS and one ECR endpoint (`ecr_var`
/// names which) pointed at fakes, `role` in the role annotation.
fn through(
    args: &[&str],
    sts: &TestServer,
    ecr_var: &str,
    ecr: &TestServer,
    image: &str,
    token: &str,
    role: &str,
) -> Run {
    plugin(
        args,
        &[("AWS_ENDPOINT_URL_STS", &sts.url()), (ecr_var, &ecr.url())],
        image,
        token,
        &[(ROLE_ANNOTATION, role)],
    )
}

/// An STS error answer: `<ErrorResponse><Error><Type/><Code/><Message/></Error>...`.
fn sts_error(status: u16, code: &str, message: &str) -> Response {
    let body = format!(
        r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error>
    <Type>Sender</Type>
    <Code>{code}</Code>
    <Message>{message}</Message>
  </Error>
  <RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId>
</ErrorResponse>"#
    );
    Response::text(status, body).with_header("Content-Type", "text/xml")
}

/// A JSON 1.1 error answer, as ECR and ECR Public send them.
fn json_error(status: u16, code: &str, message: &str) -> Response {
    ecr_answer(status, json!({"__type": code, "message": message}))
}

/// Asserts `req` is exactly the unsigned AssumeRoleWithWebIdentity call.
fn assert_sts_request(req: &Request, role: &str, session: &str, token: &str, duration: &str) {
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/");
    assert!(
        req.header("content-type")
            .unwrap()
            .starts_with("application/x-www-form-urlencoded"),
        "{:?}",
        req.headers
    );
    assert_eq!(
        req.header("authorization"),
        None,
        "AssumeRoleWithWebIdentity is unsigned"
    );
    assert_eq!(req.header("x-amz-security-token"), None);
    let form = req.form();
    let expected: std::collections::BTreeMap<String, String> = [
        ("Action", "AssumeRoleWithWebIdentity"),
        ("Version", "2011-06-15"),
        ("RoleArn", role),
        ("RoleSessionName", session),
        ("WebIdentityToken", token),
        ("DurationSeconds", duration),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(form, expected, "the STS form, every field");
}

/// Asserts `req` is GetAuthorizationToken signed with (`akid`, session
/// token) for `service` in `region`.
fn assert_signed_ecr_request(
    req: &Request,
    target: &str,
    service: &str,
    region: &str,
    akid: &str,
    session_token: &str,
) {
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/");
    assert_eq!(req.header("x-amz-target"), Some(target));
    assert_eq!(
        req.header("content-type"),
        Some("application/x-amz-json-1.1")
    );
    assert_eq!(
        req.json(),
        json!({}),
        "no registryIds: one token serves every registry the role may read"
    );
    assert_eq!(req.header("x-amz-security-token"), Some(session_token));
    let authorization = req.header("authorization").expect("SigV4 signature");
    let scope = authorization
        .strip_prefix("AWS4-HMAC-SHA256 Credential=")
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("not a SigV4 header: {authorization}"));
    let parts: Vec<&str> = scope.split('/').collect();
    assert_eq!(parts.len(), 5, "{scope}");
    assert_eq!(parts[0], akid);
    assert_eq!(&parts[2..], [region, service, "aws4_request"], "{scope}");
    assert!(authorization.contains("Signature="));
}

const STS_AKID: &str = "ASIAFAKESTSKEY000001";
const STS_SECRET: &str = "fake/sts/secret+key/0123456789abcdefABCDEF";
const STS_SESSION_TOKEN: &str = "FwoGZXIvYXdzEFAKE//////////sessiontoken0123456789abcdef";

// ---------------------------------------------------------------------------
// moto: the full path.

// ---------------------------------------------------------------------------
// Fake STS: every field of the request, and each refusal users hit.

/// Runs the plugin against a fake STS answering `answer`, checks the
/// refusal's facts (AWS STS, the answer's status); returns the error's
/// words, the number of STS requests and stderr.
fn sts_refusal(answer: Response) -> (String, usize, String) {
    let status = answer.status.to_string();
    let sts = TestServer::start(move |_req| answer.clone());
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let run = plugin(
        &["--log-format", "json"],
        &[
            ("AWS_ENDPOINT_URL_STS", &sts.url()),
            ("AWS_ENDPOINT_URL_ECR", "http://127.0.0.1:9"),
        ],
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
        &token,
        &[(ROLE_ANNOTATION, "arn:aws:iam::123456789012:role/pull")],
    );
    let line = run.refused("upstream", &[("service", "AWS STS"), ("status", &status)]);
    run.assert_no_secrets(&[&token]);
    (words(&line), sts.request_count(), run.stderr)
}

// ---------------------------------------------------------------------------
// ECR refusals and ECR Public.

// ---------------------------------------------------------------------------
// Offline refusals: nothing is sent anywhere.

/// A server that fails the test if anything reaches it.
fn tripwire() -> TestServer {
    TestServer::start(|req| panic!("no request expected, got {} {}", req.method, req.path))
}

// ---------------------------------------------------------------------------
// EKS Pod Identity: a fake agent in front of credentials moto issued.

/// A fake Pod Identity Agent: `GET /v1/credentials` with exactly `token` in
/// `Authorization` gets `credentials`; anything else a 401 like the agent's
/// own refusals.
fn agent(token: String, credentials: Value) -> TestServer {
    TestServer::start(move |req| {
        assert_eq!(req.method, "GET");
        assert_eq!(req.path, "/v1/credentials");
        assert_eq!(req.body.len(), 0);
        if req.header("authorization") != Some(token.as_str()) {
            return Response::text(
                401,
                "Access Denied. The service account token is missing or invalid",
            );
        }
        Response::json(200, credentials.clone())
    })
}

/// Runs pod-identity against an agent answering `answer`, checks the
/// refusal's facts (the agent, the answer's status); returns the error's
/// words and the agent's request count.
fn agent_refusal(answer: Response) -> (String, usize) {
    let status = answer.status.to_string();
    let token = TokenSpec::new("team", "puller", POD_IDENTITY_AUDIENCE).mint();
    let expected = token.clone();
    let fake_agent = TestServer::start(move |req| {
        assert_eq!(req.header("authorization"), Some(expected.as_str()));
        answer.clone()
    });
    let run = plugin(
        &[
            "--aws-credential-source",
            "pod-identity",
            "--log-format",
            "json",
        ],
        &[
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                &format!("{}/v1/credentials", fake_agent.url()),
            ),
            ("AWS_ENDPOINT_URL_ECR", "http://127.0.0.1:9"),
        ],
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
        &token,
        &[],
    );
    let service = ("service", "EKS Pod Identity Agent");
    let line = run.refused("upstream", &[service, ("status", &status)]);
    run.assert_no_secrets(&[&token]);
    (words(&line), fake_agent.request_count())
}

/// A server that answers every request with a 2 GiB body, streamed for as
/// long as the client reads; it counts connections and bytes written.
struct EndlessBody {
    addr: std::net::SocketAddr,
    stopping: std::sync::Arc<std::sync::atomic::AtomicBool>,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    written: std::sync::Arc<std::sync::atomic::AtomicU64>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl EndlessBody {
    const SIZE: u64 = 2 * 1024 * 1024 * 1024;

    fn start() -> EndlessBody {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stopping = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let written = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (stop, count, total) = (stopping.clone(), connections.clone(), written.clone());
        let accept = std::thread::spawn(move || {
            let mut workers = Vec::new();
            for stream in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let (stop, total) = (stop.clone(), total.clone());
                workers.push(std::thread::spawn(move || {
                    let mut head = [0u8; 16 * 1024];
                    let _ = stream.read(&mut head);
                    let header = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: {}\r\n\r\n",
                        Self::SIZE
                    );
                    if stream.write_all(header.as_bytes()).is_err() {
                        return;
                    }
                    let chunk = vec![b'x'; 64 * 1024];
                    let mut sent = 0u64;
                    while sent < Self::SIZE && !stop.load(Ordering::SeqCst) {
                        if stream.write_all(&chunk).is_err() {
                            break;
                        }
                        sent += chunk.len() as u64;
                        total.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                    }
                }));
            }
            for worker in workers {
                let _ = worker.join();
            }
        });
        EndlessBody {
            addr,
            stopping,
            connections,
            written,
            accept: Some(accept),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for EndlessBody {
    fn drop(&mut self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(self.addr);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}
