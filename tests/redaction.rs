//! No credential an upstream echoes reaches stderr, at any log level.
//!
//! Each case runs the built binary against local fakes of the provider's
//! upstreams in their documented wire formats, where one upstream quotes a
//! secret back in every error field it has: Google IAM Credentials quoting
//! the federated bearer token, ACR quoting the Entra access token and its
//! signature (in `errors[].message` and in `error_description`), ECR quoting the session
//! token and secret key, and Entra, Google STS and AWS STS quoting only the
//! service account token's signature (longer than the cut applied to
//! upstream messages). At `info` and at `debug`, stderr must hold neither
//! the secret nor any 16-byte run of it.

use crate::support;

use serde_json::json;
use support::azure::{self, ACR_HOST, App, FakeEntra};
use support::google::{FakeSts, GCP_CLUSTER, GCP_PROJECT, GSA};
use support::http_server::{Response, TestServer};
use support::moto::ROLE;
use support::plugin::{Run, request, run};
use support::token::{TokenSpec, now};

const LEVELS: [&str; 2] = ["info", "debug"];
const ECR_IMAGE: &str = "123456789012.dkr.ecr.us-east-1.amazonaws.com/app";
const AWS_SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY";
const AWS_SESSION_TOKEN: &str = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQDw+session/token+Zm9vYmFyYmF6cXV4cXV1eGNvcmdl==";

/// Asserts the run failed and that neither a secret nor any 16-byte run
/// of it reached stderr.
fn assert_never_shown(run: &Run, secrets: &[&str]) {
    let line = run.failure();
    for secret in secrets {
        assert!(secret.len() >= 16, "a test secret is too short: {secret}");
        assert!(
            !run.stderr.contains(secret),
            "a secret reached stderr: {}",
            run.stderr
        );
        let bytes = secret.as_bytes();
        for window in bytes.windows(16) {
            let window = std::str::from_utf8(window).unwrap();
            assert!(
                !run.stderr.contains(window),
                "16 bytes of a secret ({window:?}) reached stderr: {}",
                run.stderr
            );
        }
    }
    // The line still says what happened.
    assert!(line.contains("failed"), "{line}");
}

/// The signature of a JWT: what an upstream quotes when it complains
/// about it.
fn signature(jwt: &str) -> &str {
    let (_, signature) = jwt.rsplit_once('.').unwrap();
    assert!(signature.len() > 300, "RS256 signatures are 342 characters");
    signature
}

fn gcp_run(level: &str, sts: &FakeSts, iam: Option<&TestServer>, token: &str) -> Run {
    let mut args = vec![
        "--provider",
        "gcp",
        "--log-level",
        level,
        "--gcp-project-id",
        GCP_PROJECT,
        "--gcp-cluster",
        GCP_CLUSTER,
    ];
    let sts_url = sts.server.url();
    args.extend(["--gcp-sts-endpoint", &sts_url]);
    let iam_url = iam.map(TestServer::url).unwrap_or_default();
    if iam.is_some() {
        args.extend(["--gcp-iamcredentials-endpoint", &iam_url]);
    }
    run(
        &args,
        &[],
        request(
            "us-docker.pkg.dev/my-project/team/app",
            Some(token),
            &[("iam.gke.io/gcp-service-account", GSA)],
        )
        .as_bytes(),
    )
}

#[test]
fn google_iam_quoting_the_federated_token() {
    for level in LEVELS {
        let sts = FakeSts::start();
        // IAM Credentials' 403 quotes the caller's bearer token.
        let iam = TestServer::start(|req| {
            let bearer = req.bearer().unwrap_or_default();
            Response::json(
                403,
                json!({"error": {
                    "code": 403,
                    "status": "PERMISSION_DENIED",
                    "message": format!("Caller Bearer {bearer} lacks permission 'iam.serviceAccounts.getAccessToken'"),
                    "details": [{"reason": "IAM_PERMISSION_DENIED"}],
                }}),
            )
        });
        let token = TokenSpec::new("team", "puller", &format!("{GCP_PROJECT}.svc.id.goog")).mint();
        let out = gcp_run(level, &sts, Some(&iam), &token);
        let federated = sts.issued();
        assert_eq!(federated.len(), 1, "{}", out.stderr);
        assert_eq!(iam.request_count(), 1);
        assert!(
            out.stderr.contains("PERMISSION_DENIED") && out.stderr.contains("lacks permission"),
            "the refusal is still explained: {}",
            out.stderr
        );
        assert_never_shown(&out, &[&federated[0], &token]);
    }
}

#[test]
fn google_sts_quoting_the_token_signature() {
    for level in LEVELS {
        let sts = FakeSts::start();
        let token = TokenSpec::new("team", "puller", &format!("{GCP_PROJECT}.svc.id.goog")).mint();
        sts.script([Response::json(
            400,
            json!({"error": "invalid_grant", "error_description": format!("Invalid JWT signature: {}", signature(&token))}),
        )]);
        let out = gcp_run(level, &sts, None, &token);
        assert_never_shown(&out, &[signature(&token), &token]);
    }
}

fn azure_run(level: &str, entra: &FakeEntra, acr_url: &str, token: &str) -> Run {
    let entra_url = entra.url();
    run(
        &[
            "--provider",
            "azure",
            "--log-level",
            level,
            "--azure-authority-host",
            &entra_url,
            "--acr-endpoint",
            acr_url,
        ],
        &[],
        request(
            &format!("{ACR_HOST}/team/app"),
            Some(token),
            &[
                ("azure.workload.identity/client-id", azure::CLIENT_ID),
                ("azure.workload.identity/tenant-id", azure::TENANT),
            ],
        )
        .as_bytes(),
    )
}

/// The last dot-separated part of a token (a JWT's signature).
fn tail(token: &str) -> &str {
    token.rsplit('.').next().unwrap_or(token)
}

#[test]
fn acr_quoting_the_entra_access_token() {
    // Both error shapes ACR uses: the registry API's `errors` list and
    // the OAuth `error_description`.
    type Shape = fn(&str) -> serde_json::Value;
    let shapes: [Shape; 2] = [
        |access| json!({"errors": [{"code": "UNAUTHORIZED", "message": format!("access token {access} is invalid (signature {})", tail(access)), "detail": null}]}),
        |access| json!({"error": "invalid_grant", "error_description": format!("access token {access} is invalid (signature {})", tail(access))}),
    ];
    for shape in shapes {
        for level in LEVELS {
            let entra = FakeEntra::start(App::trusting("team", "puller"));
            let acr = TestServer::start(move |req| {
                let form = req.form();
                Response::json(401, shape(form.get("access_token").map_or("", |t| t)))
            });
            let token = TokenSpec::new("team", "puller", azure::AUDIENCE).mint();
            let out = azure_run(level, &entra, &acr.url(), &token);
            let issued = entra.issued();
            assert_eq!(issued.len(), 1, "{}", out.stderr);
            assert_eq!(acr.request_count(), 1);
            assert!(out.stderr.contains("is invalid"), "{}", out.stderr);
            assert_never_shown(&out, &[&issued[0], tail(&issued[0]), &token]);
        }
    }
}

#[test]
fn entra_quoting_the_token_signature() {
    for level in LEVELS {
        let entra = FakeEntra::start(App::trusting("team", "puller"));
        let token = TokenSpec::new("team", "puller", azure::AUDIENCE).mint();
        entra.script([azure::entra_error(
            401,
            "invalid_client",
            700027,
            &format!(
                "Client assertion failed signature validation. Signature: {}",
                signature(&token)
            ),
        )]);
        let out = azure_run(level, &entra, "http://127.0.0.1:9", &token);
        assert_never_shown(&out, &[signature(&token), &token]);
    }
}

/// AssumeRoleWithWebIdentity's answer with the session's credentials.
fn sts_success(expires_at: i64) -> Response {
    let expiration = wicp_base::duration::format_unix(expires_at);
    Response::text(
        200,
        format!(
            r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Credentials>
      <SessionToken>{AWS_SESSION_TOKEN}</SessionToken>
      <SecretAccessKey>{AWS_SECRET}</SecretAccessKey>
      <Expiration>{expiration}</Expiration>
      <AccessKeyId>ASIAEXAMPLEKEYID0001</AccessKeyId>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>ad4156e9-bce1-11e2-82e6-6b6efexample</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"#
        ),
    )
    .with_header("Content-Type", "text/xml")
}

fn aws_run(level: &str, sts: &TestServer, ecr_url: &str, token: &str) -> Run {
    run(
        &["--provider", "aws", "--log-level", level],
        &[
            ("AWS_ENDPOINT_URL_STS", &sts.url()),
            ("AWS_ENDPOINT_URL_ECR", ecr_url),
        ],
        request(
            ECR_IMAGE,
            Some(token),
            &[("eks.amazonaws.com/role-arn", ROLE)],
        )
        .as_bytes(),
    )
}

#[test]
fn ecr_quoting_the_session_token_and_secret_key() {
    for level in LEVELS {
        let sts = TestServer::start(|_req| sts_success(now() + 3600));
        // ECR's JSON 1.1 error, quoting the session token it was sent
        // (X-Amz-Security-Token) and the secret key.
        let ecr = TestServer::start(|req| {
            let session = req.header("x-amz-security-token").unwrap_or_default();
            Response::json(
                400,
                json!({"__type": "AccessDeniedException", "message": format!(
                    "User with session token {session} and key {AWS_SECRET} is not authorized to perform: ecr:GetAuthorizationToken"
                )}),
            )
            .with_header("Content-Type", "application/x-amz-json-1.1")
        });
        let token = TokenSpec::new("team", "puller", "sts.amazonaws.com").mint();
        let out = aws_run(level, &sts, &ecr.url(), &token);
        assert_eq!(ecr.request_count(), 1, "{}", out.stderr);
        assert!(
            out.stderr.contains("AccessDeniedException")
                && out.stderr.contains("ecr:GetAuthorizationToken"),
            "{}",
            out.stderr
        );
        assert_never_shown(&out, &[AWS_SESSION_TOKEN, AWS_SECRET, &token]);
    }
}

#[test]
fn aws_sts_quoting_the_token_signature() {
    for level in LEVELS {
        let token = TokenSpec::new("team", "puller", "sts.amazonaws.com").mint();
        let message = format!("Invalid token signature {}", signature(&token));
        let sts = TestServer::start(move |_req| {
            Response::text(
                400,
                format!(
                    r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error><Type>Sender</Type><Code>InvalidIdentityToken</Code><Message>{message}</Message></Error>
  <RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId>
</ErrorResponse>"#
                ),
            )
            .with_header("Content-Type", "text/xml")
        });
        let out = aws_run(level, &sts, "http://127.0.0.1:9", &token);
        assert!(
            out.stderr.contains("InvalidIdentityToken"),
            "{}",
            out.stderr
        );
        assert_never_shown(&out, &[signature(&token), &token]);
    }
}

/// The encodings a secret leaves the process in, as an upstream quoting its
/// request back would show them: raw, form-encoded (RFC 6749 Appendix B),
/// JSON-escaped, and base64 inside a Basic header (of the form-encoded
/// pair, RFC 6749 §2.3.1, and of the raw pair).
fn every_encoding(user: &str, secret: &str) -> Vec<String> {
    use base64::Engine as _;
    let form = |s: &str| -> String {
        s.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                    (b as char).to_string()
                }
                b' ' => "+".to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    let b64 = |s: String| base64::engine::general_purpose::STANDARD.encode(s);
    let json = serde_json::to_string(secret).unwrap();
    vec![
        secret.to_string(),
        form(secret),
        json.trim_matches('"').to_string(),
        b64(format!("{}:{}", form(user), form(secret))),
        b64(format!("{user}:{secret}")),
    ]
}

/// Asserts the run failed and that no encoding of `secret`, nor any
/// 8-byte run of one, reached stderr.
fn assert_no_encoding_shown(run: &Run, encodings: &[String]) {
    let line = run.failure();
    for shown in encodings {
        let bytes = shown.as_bytes();
        for window in bytes.windows(8.min(bytes.len())) {
            let window = std::str::from_utf8(window).unwrap();
            if window.starts_with("a3ViZWxl") || window.starts_with("YWNtZSty") {
                // The base64 of the username's first bytes, not secret.
                continue;
            }
            assert!(
                !run.stderr.contains(window),
                "{window:?} of {shown:?} reached stderr: {}",
                run.stderr
            );
        }
    }
    assert!(line.contains("failed"), "{line}");
}

#[test]
fn a_token_server_quoting_the_client_secret_in_every_encoding() {
    // Long and short (an admin's file can hold a 7-byte secret).
    for secret in ["pa$$w0rd!2024\"\\x", "s3cr3t!"] {
        let encodings = every_encoding("kubelet", secret);
        let quoted = encodings.join(" | ");
        for level in LEVELS {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("secret");
            std::fs::write(&file, format!("{secret}\n")).unwrap();
            let description = format!("client authentication failed: {quoted}");
            let sts = TestServer::start(move |_req| {
                Response::json(
                    401,
                    json!({"error": "invalid_client", "error_description": description}),
                )
            });
            let token = TokenSpec::new("team", "puller", "sts.cluster.test").mint();
            let url = format!("{}/token", sts.url());
            let client = ["--token-exchange-client-id", "kubelet"];
            let secret = [
                "--token-exchange-client-secret-file",
                file.to_str().unwrap(),
            ];
            let level = ["--log-level", level];
            let args = support::sts::token_exchange(&url, &[client, secret, level].concat());
            let out = run(
                &args,
                &[],
                request("registry.example.com/team/app", Some(&token), &[]).as_bytes(),
            );
            assert_eq!(sts.request_count(), 1, "{}", out.stderr);
            assert!(out.stderr.contains("invalid_client"), "{}", out.stderr);
            assert_no_encoding_shown(&out, &encodings);
            assert_never_shown(&out, &[&token]);
        }
    }
}

#[test]
fn quay_quoting_the_basic_header_that_carries_the_token() {
    for level in LEVELS {
        let token = TokenSpec::new("team", "app", "quay.example.com").mint();
        let encodings = every_encoding("acme+puller", &token);
        let quoted = encodings.join(" | ");
        let quay = TestServer::start(move |_req| {
            Response::json(
                401,
                json!({"error": format!("Invalid credentials {quoted}")}),
            )
        });
        let url = quay.url();
        let args = [
            "--provider",
            "quay",
            "--registry",
            "quay.example.com",
            "--audience",
            "quay.example.com",
            "--quay-url",
            &url,
            "--quay-organization",
            "acme",
            "--log-level",
            level,
        ];
        let out = run(
            &args,
            &[],
            request(
                "quay.example.com/acme/app",
                Some(&token),
                &[("wi-credential-provider.io/quay-robot", "acme+puller")],
            )
            .as_bytes(),
        );
        assert_eq!(quay.request_count(), 1, "{}", out.stderr);
        assert!(out.stderr.contains("Invalid credentials"), "{}", out.stderr);
        assert_no_encoding_shown(&out, &encodings);
    }
}
