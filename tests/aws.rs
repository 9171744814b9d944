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

#[test]
fn web_identity_full_path_against_moto() {
    let moto = Moto::start();
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let host = "210987654321.dkr.ecr.eu-west-1.amazonaws.com";
    let run = plugin(
        &[],
        &[("AWS_ENDPOINT_URL", &moto.url())],
        &format!("{host}/team/app"),
        &token,
        &[(ROLE_ANNOTATION, "arn:aws:iam::210987654321:role/ecr-pull")],
    );
    let response = run.response();
    assert_eq!(response["cacheKeyType"], "Registry");
    let (user, password) = auth_entry(&response, host);
    assert_eq!(user, "AWS");
    // moto issues `<account>-auth-token` for the caller's account, and knows
    // the caller only through the access key STS gave out: this password
    // proves the STS credentials were what ECR saw.
    assert_eq!(password, "210987654321-auth-token");
    // moto's expiresAt is 2015: handed out, not cached, with a warning.
    assert_eq!(response["cacheDuration"], "0s");
    support::assert_says(
        &run.stderr,
        &[
            "expiresAt 2015-01-01T00:00:00Z is already past",
            "session name\", \"team.puller\"",
        ],
    );
    run.assert_no_secrets(&[&token, password]);
    let log = moto.log();
    assert_eq!(
        log.matches("POST / HTTP/1.1\" 200").count(),
        2,
        "one STS and one ECR call: {log}"
    );
}

#[test]
fn role_annotations_are_read_in_order_and_the_flag_replaces_them() {
    let moto = Moto::start();
    let env = [("AWS_ENDPOINT_URL", moto.url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let host = "111111111111.dkr.ecr.us-east-2.amazonaws.com";
    let image = format!("{host}/app");
    let both = [
        (ROLE_ANNOTATION, "arn:aws:iam::222222222222:role/app"),
        (ECR_ROLE_ANNOTATION, "arn:aws:iam::333333333333:role/pull"),
        (
            "example.com/pull-role",
            "arn:aws:iam::444444444444:role/custom",
        ),
    ];
    // ecr-role-arn first.
    let r = plugin(&[], &env, &image, &token, &both).response();
    assert_eq!(auth_entry(&r, host).1, "333333333333-auth-token");
    // Then role-arn (the IRSA key), which upstream never reads.
    let r = plugin(&[], &env, &image, &token, &both[..1]).response();
    assert_eq!(auth_entry(&r, host).1, "222222222222-auth-token");
    // A custom list replaces both defaults.
    let r = plugin(
        &["--aws-role-arn-annotation", "example.com/pull-role"],
        &env,
        &image,
        &token,
        &both,
    )
    .response();
    assert_eq!(auth_entry(&r, host).1, "444444444444-auth-token");
    let run = plugin(
        &[
            "--aws-role-arn-annotation",
            "example.com/pull-role",
            "--log-format",
            "json",
        ],
        &env,
        &image,
        &token,
        &both[..2],
    );
    run.refused_for_annotation("example.com/pull-role");
}

#[test]
fn ecr_login_pulls_from_a_real_registry_with_exactly_the_returned_credentials() {
    let moto = Moto::start();
    // The registry accepts exactly what moto issues for account 210987654321.
    let registry = Registry::start_with_htpasswd("AWS", "210987654321-auth-token");
    let digest = registry.push_test_image("team/app", "1.0");

    let host = "210987654321.dkr.ecr.eu-west-1.amazonaws.com";
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let run = plugin(
        &[],
        &[("AWS_ENDPOINT_URL", &moto.url())],
        &format!("{host}/team/app"),
        &token,
        &[(
            ECR_ROLE_ANNOTATION,
            "arn:aws:iam::210987654321:role/ecr-pull",
        )],
    );
    let response = run.response();
    let (user, password) = auth_entry(&response, host);
    registry
        .pull("team/app", "1.0", user, password)
        .unwrap_or_else(|e| panic!("the registry refused the plugin's credentials: {e}"));
    // As the kubelet hands them over: a docker config keyed by registry.
    let authfile =
        json!({"auths": {registry.host(): {"auth": b64(&format!("{user}:{password}"))}}});
    registry
        .pull_with_authfile("team/app", "1.0", &authfile.to_string())
        .unwrap();
    // A wrong password is refused: the pull above proves something.
    let refused = registry
        .pull("team/app", "1.0", user, "210987654321-auth-tokem")
        .unwrap_err();
    assert!(
        refused.contains("unauthorized") || refused.contains("invalid username/password"),
        "{refused}"
    );
    // And containerd, the runtime on the node, which sends Basic credentials straight to a
    // registry that challenges with Basic, as ECR does. The wrong password first, while
    // containerd's store is empty.
    let containerd = Containerd::start();
    let image = format!("{}/team/app:1.0", registry.host());
    containerd.assert_pulls_only_with(&image, user, (password, "210987654321-auth-tokem"), &digest);

    // A role in another account gets another password, which this registry
    // (standing in for account 210987654321's) refuses.
    let other = plugin(
        &[],
        &[("AWS_ENDPOINT_URL", &moto.url())],
        &format!("{host}/team/app"),
        &token,
        &[(
            ECR_ROLE_ANNOTATION,
            "arn:aws:iam::123456789013:role/ecr-pull",
        )],
    )
    .response();
    let (user, password) = auth_entry(&other, host);
    assert_eq!(password, "123456789013-auth-token");
    assert!(registry.pull("team/app", "1.0", user, password).is_err());
}

#[test]
fn proxy_variables_are_honoured_for_sts_and_ecr() {
    let moto = Moto::start();
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let host = "123456789012.dkr.ecr.us-west-2.amazonaws.com";
    let annotations = [(ROLE_ANNOTATION, "arn:aws:iam::123456789012:role/pull")];
    // The endpoint's name does not resolve: only the proxy (moto, which
    // serves absolute-form requests) can answer.
    let via_proxy = plugin(
        &[],
        &[
            ("AWS_ENDPOINT_URL", "http://aws-api.invalid"),
            ("HTTP_PROXY", &moto.url()),
        ],
        &format!("{host}/app"),
        &token,
        &annotations,
    );
    assert_eq!(
        auth_entry(&via_proxy.response(), host).1,
        "123456789012-auth-token"
    );
    assert_eq!(
        moto.log()
            .matches("POST http://aws-api.invalid/ HTTP/1.1\" 200")
            .count(),
        2,
        "{}",
        moto.log()
    );
    // NO_PROXY exempts the endpoint: a dead proxy does not matter.
    let direct = plugin(
        &[],
        &[
            ("AWS_ENDPOINT_URL", &moto.url()),
            ("HTTP_PROXY", "http://127.0.0.1:9"),
            ("NO_PROXY", "127.0.0.1"),
        ],
        &format!("{host}/app"),
        &token,
        &annotations,
    );
    direct.response();
    // Without NO_PROXY the dead proxy is used, and the failure says where.
    let dead = plugin(
        &["--timeout", "10s", "--log-format", "json"],
        &[
            ("AWS_ENDPOINT_URL", &moto.url()),
            ("HTTP_PROXY", "http://127.0.0.1:9"),
        ],
        &format!("{host}/app"),
        &token,
        &annotations,
    );
    let line = dead.refused("network", &[("service", "AWS STS")]);
    assert!(words(&line).contains("HTTPS_PROXY/NO_PROXY"), "{line}");
}

// ---------------------------------------------------------------------------
// Fake STS: every field of the request, and each refusal users hit.

#[test]
fn sts_request_carries_role_session_token_and_duration() {
    let moto = Moto::start();
    let role = "arn:aws:iam::123456789012:role/team/ecr-pull";
    // Like STS, the session lasts what DurationSeconds asked for.
    let sts = TestServer::start(move |req| {
        let seconds: i64 = req.form()["DurationSeconds"].parse().unwrap();
        sts_success(
            STS_AKID,
            STS_SECRET,
            STS_SESSION_TOKEN,
            now() + seconds,
            role,
            "team.puller",
        )
    });
    let ecr = TestServer::start(move |_req| {
        ecr_token(
            "password-from-ecr",
            "https://123456789012.dkr.ecr.us-east-1.amazonaws.com",
        )
    });
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let host = "123456789012.dkr.ecr.us-east-1.amazonaws.com";
    let run = plugin(
        &["--aws-session-duration", "20m"],
        &[
            ("AWS_ENDPOINT_URL_STS", &sts.url()),
            ("AWS_ENDPOINT_URL_ECR", &ecr.url()),
            ("AWS_ENDPOINT_URL", &moto.url()),
        ],
        &format!("{host}/team/app"),
        &token,
        &[(ECR_ROLE_ANNOTATION, role)],
    );
    let response = run.response();
    assert_eq!(auth_entry(&response, host), ("AWS", "password-from-ecr"));
    // The STS session (20 minutes, from the flag) ends before the ECR
    // token (12 hours): 80 % of 20 minutes is 16.
    let cache = response["cacheDuration"].as_str().unwrap();
    assert!(["16m0s", "15m59s"].contains(&cache), "{cache}");
    let requests = sts.requests();
    assert_eq!(requests.len(), 1);
    assert_sts_request(&requests[0], role, "team.puller", &token, "1200");
    let ecr_requests = ecr.requests();
    assert_eq!(ecr_requests.len(), 1);
    assert_signed_ecr_request(
        &ecr_requests[0],
        "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken",
        "ecr",
        "us-east-1",
        STS_AKID,
        STS_SESSION_TOKEN,
    );
    assert_eq!(
        moto.log().matches("POST").count(),
        0,
        "the specific overrides win over AWS_ENDPOINT_URL"
    );
    run.assert_no_secrets(&[&token, "password-from-ecr", STS_SECRET, STS_SESSION_TOKEN]);
}

#[test]
fn long_service_account_names_become_a_cut_session_name_with_a_hash() {
    let role = "arn:aws:iam::123456789012:role/pull";
    let sts = sts_issuing(role);
    let ecr = TestServer::start(|_req| json_error(400, "AccessDeniedException", "stop here"));
    let name = "a-very-long-service-account-name-for-the-batch-ingestion-pipeline";
    let token = TokenSpec::new("data-platform-production", name, STS_AUDIENCE).mint();
    let run = through(
        &["--log-format", "json"],
        &sts,
        "AWS_ENDPOINT_URL_ECR",
        &ecr,
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
        &token,
        role,
    );
    run.refused("upstream", &[("service", "ECR"), ("status", "400")]);
    let session = sts.requests()[0].form()["RoleSessionName"].clone();
    assert_eq!(session.len(), 64, "{session}");
    assert!(
        session.starts_with("data-platform-production.a-very-long-service-account-na-"),
        "{session}"
    );
    let (_, hash) = session.rsplit_once('-').unwrap();
    assert_eq!(hash.len(), 8);
}

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

#[test]
fn sts_access_denied_explains_the_trust_policy() {
    let (line, count, _) = sts_refusal(sts_error(
        403,
        "AccessDenied",
        "Not authorized to perform sts:AssumeRoleWithWebIdentity",
    ));
    assert_eq!(count, 1, "AccessDenied is not retried");
    support::assert_says(
        &line,
        &[
            "STS refused to let service account team/puller assume role arn:aws:iam::123456789012:role/pull",
            "AccessDenied: \"Not authorized to perform sts:AssumeRoleWithWebIdentity\"",
        ],
    );
    let issuer = ISSUER.strip_prefix("https://").unwrap();
    support::assert_says(
        &line,
        &[
            &format!("federated principal arn:aws:iam::123456789012:oidc-provider/{issuer}"),
            &format!("{issuer}:sub = system:serviceaccount:team:puller"),
            &format!("{issuer}:aud = sts.amazonaws.com"),
        ],
    );
}

#[test]
fn sts_invalid_identity_token_explains_the_oidc_provider() {
    let (line, count, _) = sts_refusal(sts_error(
        400,
        "InvalidIdentityToken",
        &format!("No OpenIDConnect provider found in your account for {ISSUER}"),
    ));
    assert_eq!(count, 1);
    support::assert_says(
        &line,
        &[
            "the token's issuer is not trusted by IAM",
            &format!("register the cluster's issuer {ISSUER} as an IAM OIDC identity provider"),
            "client ID sts.amazonaws.com",
        ],
    );
}

#[test]
fn sts_expired_token_points_at_the_clock() {
    let (line, _, _) = sts_refusal(sts_error(
        400,
        "ExpiredTokenException",
        "Token expired: current date/time 1700000000 must be before the expiration date/time 1699990000",
    ));
    support::assert_says(
        &line,
        &["the token has expired", "check the node's clock (NTP)"],
    );
}

#[test]
fn sts_throttling_is_retried_within_bounds_then_explained() {
    let started = Instant::now();
    let (line, count, _) = sts_refusal(sts_error(400, "Throttling", "Rate exceeded"));
    // The attempts of every other upstream call (crates/net/src/http.rs), then
    // give up.
    assert_eq!(count, 4, "four attempts, then give up");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    support::assert_says(
        &line,
        &[
            "STS throttled AssumeRoleWithWebIdentity",
            "after 4 attempt(s)",
            "cacheType: ServiceAccount",
        ],
    );
}

#[test]
fn sts_session_longer_than_the_role_allows_names_the_flag() {
    let (line, _, _) = sts_refusal(sts_error(
        400,
        "ValidationError",
        "The requested DurationSeconds exceeds the MaxSessionDuration set for this role.",
    ));
    assert!(
        line.contains("lower --aws-session-duration (now 3600s)"),
        "{line}"
    );
}

#[test]
fn sts_messages_never_repeat_a_token() {
    let echoed = TokenSpec::new("other", "sa", STS_AUDIENCE).mint();
    let (line, _, stderr) = sts_refusal(sts_error(
        400,
        "InvalidIdentityToken",
        &format!("Couldn't retrieve verification key for token {echoed}"),
    ));
    assert!(line.contains("for token <token>"), "{line}");
    assert!(!stderr.contains(&echoed), "{stderr}");
}

#[test]
fn sts_that_never_answers_hits_the_deadline() {
    let sts = TestServer::start(|_req| Response::hang());
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let started = Instant::now();
    let run = plugin(
        &["--timeout", "3s", "--log-format", "json"],
        &[("AWS_ENDPOINT_URL_STS", &sts.url())],
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
        &token,
        &[(ROLE_ANNOTATION, "arn:aws:iam::123456789012:role/pull")],
    );
    let line = run.refused("network", &[("service", "AWS STS")]);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(8),
        "{took:?}"
    );
    assert!(
        words(&line).contains("the deadline of 3s ran out"),
        "{line}"
    );
}

// ---------------------------------------------------------------------------
// ECR refusals and ECR Public.

#[test]
fn ecr_access_denied_names_the_role_and_the_permissions() {
    let role = "arn:aws:iam::123456789012:role/pull";
    let sts = sts_issuing(role);
    let ecr = TestServer::start(|_req| {
        json_error(
            400,
            "AccessDeniedException",
            "User: arn:aws:sts::123456789012:assumed-role/pull/team.puller is not authorized to perform: ecr:GetAuthorizationToken on resource: * because no identity-based policy allows the ecr:GetAuthorizationToken action",
        )
    });
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let run = through(
        &["--log-format", "json"],
        &sts,
        "AWS_ENDPOINT_URL_ECR",
        &ecr,
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
        &token,
        role,
    );
    let line = run.refused("upstream", &[("service", "ECR"), ("status", "400")]);
    assert_eq!(ecr.request_count(), 1, "AccessDenied is not retried");
    support::assert_says(
        &words(&line),
        &[
            &format!(
                "ECR GetAuthorizationToken at {} was denied for role {role}",
                ecr.url()
            ),
            "allow ecr:GetAuthorizationToken (Resource \"*\") for role",
            "AmazonEC2ContainerRegistryReadOnly",
        ],
    );
    run.assert_no_secrets(&[&token, STS_SECRET, STS_SESSION_TOKEN]);
}

#[test]
fn ecr_public_uses_ecr_public_in_us_east_1() {
    let role = "arn:aws:iam::123456789012:role/pull";
    let sts = sts_issuing(role);
    let public = TestServer::start(|_req| {
        ecr_answer(
            200,
            json!({"authorizationData": {
                "authorizationToken": b64("AWS:public-password"),
                "expiresAt": now() + 12 * 3600,
            }}),
        )
    });
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    for host in ["public.ecr.aws", "ecr-public.aws.com"] {
        let run = through(
            &[],
            &sts,
            "AWS_ENDPOINT_URL_ECR_PUBLIC",
            &public,
            &format!("{host}/team/app"),
            &token,
            role,
        );
        let response = run.response();
        assert_eq!(auth_entry(&response, host), ("AWS", "public-password"));
        support::assert_says(
            &run.stderr,
            &["\"registry\", \"ecr-public\"", "\"region\", \"us-east-1\""],
        );
    }
    for req in public.requests() {
        assert_signed_ecr_request(
            &req,
            "SpencerFrontendService.GetAuthorizationToken",
            "ecr-public",
            "us-east-1",
            STS_AKID,
            STS_SESSION_TOKEN,
        );
    }
    assert_eq!(public.request_count(), 2);
}

#[test]
fn ecr_public_access_denied_names_the_bearer_token_permission() {
    let role = "arn:aws:iam::123456789012:role/pull";
    let sts = sts_issuing(role);
    let public = TestServer::start(|_req| {
        json_error(
            400,
            "AccessDeniedException",
            "not authorized to perform: sts:GetServiceBearerToken",
        )
    });
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let line = through(
        &["--log-format", "json"],
        &sts,
        "AWS_ENDPOINT_URL_ECR_PUBLIC",
        &public,
        "public.ecr.aws/team/app",
        &token,
        role,
    )
    .refused("upstream", &[("service", "ECR Public"), ("status", "400")]);
    assert!(
        words(&line).contains("ecr-public:GetAuthorizationToken and sts:GetServiceBearerToken"),
        "{line}"
    );
}

#[test]
fn ecr_answering_garbage_is_an_error_not_a_credential() {
    let role = "arn:aws:iam::123456789012:role/pull";
    let sts = sts_issuing(role);
    let ecr = TestServer::start(|_req| {
        ecr_answer(
            200,
            json!({"authorizationData": [{"authorizationToken": b64("no-separator-here"), "expiresAt": now() + 3600}]}),
        )
    });
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let run = through(
        &["--log-format", "json"],
        &sts,
        "AWS_ENDPOINT_URL_ECR",
        &ecr,
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
        &token,
        role,
    );
    let line = run.refused("upstream", &[("service", "ECR")]);
    assert!(
        words(&line)
            .contains("returned an authorization token that has no user:password separator"),
        "{line}"
    );
    assert!(!run.stderr.contains("no-separator-here"), "{line}");

    // A captive portal where ECR should be.
    let portal = TestServer::start(|_req| {
        Response::text(200, "<html><body>Please log in</body></html>")
            .with_header("Content-Type", "text/html")
    });
    let line = through(
        &["--log-format", "json"],
        &sts,
        "AWS_ENDPOINT_URL_ECR",
        &portal,
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
        &token,
        role,
    )
    .refused("upstream", &[("service", "ECR"), ("status", "200")]);
    assert!(
        words(&line).contains("with something that is not an AWS response"),
        "{line}"
    );
}

// ---------------------------------------------------------------------------
// Offline refusals: nothing is sent anywhere.

/// A server that fails the test if anything reaches it.
fn tripwire() -> TestServer {
    TestServer::start(|req| panic!("no request expected, got {} {}", req.method, req.path))
}

#[test]
fn an_override_in_another_region_than_the_registry_is_refused_before_any_call() {
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let wire = tripwire();
    let line = plugin(
        &["--log-format", "json"],
        &[
            ("AWS_ENDPOINT_URL_STS", &wire.url()),
            (
                "AWS_ENDPOINT_URL_ECR",
                "https://api.ecr.us-west-2.amazonaws.com",
            ),
        ],
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
        &token,
        &[(ROLE_ANNOTATION, "arn:aws:iam::123456789012:role/pull")],
    )
    .refused("config", &[("flag", "AWS_ENDPOINT_URL_ECR")]);
    support::assert_says(
        &words(&line),
        &[
            "an endpoint in region us-west-2, but the registry is in region us-east-1",
            "point AWS_ENDPOINT_URL_ECR at an endpoint in us-east-1",
        ],
    );
    assert_eq!(wire.request_count(), 0);
}

#[test]
fn missing_empty_and_malformed_role_annotations_are_refused_before_any_call() {
    let wire = tripwire();
    let env = [("AWS_ENDPOINT_URL", wire.url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/app";

    let json = ["--log-format", "json"];
    // Missing: the first key that would name the role, and how to pass it.
    let line = plugin(&json, &env, image, &token, &[]).refused_for_annotation(ECR_ROLE_ANNOTATION);
    assert!(
        plugin::words(&line).contains("tokenAttributes.optionalServiceAccountAnnotationKeys"),
        "{line}"
    );
    for (annotations, key) in [
        // Empty: refused by the check every provider's annotations get,
        // before the role is read.
        ([(ECR_ROLE_ANNOTATION, "")], ECR_ROLE_ANNOTATION),
        // Not a role.
        (
            [(ROLE_ANNOTATION, "arn:aws:iam::123456789012:user/alice")],
            ROLE_ANNOTATION,
        ),
        // A role of another partition than the registry's.
        (
            [(ROLE_ANNOTATION, "arn:aws-cn:iam::123456789012:role/pull")],
            ROLE_ANNOTATION,
        ),
    ] {
        let line = plugin(&json, &env, image, &token, &annotations).refused_for_annotation(key);
        assert_eq!(line["service_account"], "team/puller", "{line}");
    }
    assert_eq!(wire.request_count(), 0);
}

#[test]
fn ecr_hosts_with_a_port_are_refused_before_any_call() {
    let wire = tripwire();
    let env = [("AWS_ENDPOINT_URL", wire.url())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let role = [(ROLE_ANNOTATION, "arn:aws:iam::123456789012:role/pull")];
    for registry in [
        "123456789012.dkr.ecr.us-east-1.amazonaws.com:5000",
        "123456789012.dkr.ecr.us-east-1.amazonaws.com:443",
        "public.ecr.aws:8443",
    ] {
        let image = format!("{registry}/team/app");
        plugin(&["--log-format", "json"], &env, &image, &token, &role).refused_registry(registry);
        // Nor does auto routing send it to aws.
        run(
            &["--provider", "auto", "--log-format", "json"],
            &env,
            request(&image, Some(&token), &role).as_bytes(),
        )
        .refused_registry(registry);
    }
    assert_eq!(wire.request_count(), 0);
}

#[test]
fn lookalike_hosts_are_not_ecr() {
    let wire = tripwire();
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    for image in [
        "123456789012.dkr.ecr.us-east-1.amazonaws.com.evil.io/app",
        "12345678901.dkr.ecr.us-east-1.amazonaws.com/app",
        "123456789012.dkr.ecr.amazonaws.com/app",
        "public.ecr.aws.evil.io/app",
    ] {
        plugin(
            &["--log-format", "json"],
            &[("AWS_ENDPOINT_URL", &wire.url())],
            image,
            &token,
            &[(ROLE_ANNOTATION, "arn:aws:iam::123456789012:role/pull")],
        )
        .refused_registry(image.split_once('/').unwrap().0);
    }
    assert_eq!(wire.request_count(), 0);
}

#[test]
fn the_token_audience_must_match_the_credential_source() {
    let wire = tripwire();
    let sts_token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let line = plugin(
        &[
            "--aws-credential-source",
            "pod-identity",
            "--log-format",
            "json",
        ],
        &[(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            &format!("{}/v1/credentials", wire.url()),
        )],
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
        &sts_token,
        &[],
    )
    .refused("token", &[("claim", "aud")]);
    assert!(
        plugin::words(&line).contains("\"pods.eks.amazonaws.com\""),
        "{line}"
    );
    let pod_token = TokenSpec::new("team", "puller", POD_IDENTITY_AUDIENCE).mint();
    let line = plugin(
        &["--log-format", "json"],
        &[("AWS_ENDPOINT_URL", &wire.url())],
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
        &pod_token,
        &[(ROLE_ANNOTATION, "arn:aws:iam::123456789012:role/pull")],
    )
    .refused("token", &[("claim", "aud")]);
    assert!(
        plugin::words(&line).contains("\"sts.amazonaws.com\""),
        "{line}"
    );
    assert_eq!(wire.request_count(), 0);
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

#[test]
fn pod_identity_full_path_with_moto() {
    let moto = Moto::start();
    // What EKS Auth would hand the agent: credentials of a role in account
    // 345678901234, issued by moto so that moto's ECR knows whose they are.
    let (akid, secret, session) = moto.assume_role("arn:aws:iam::345678901234:role/eks-pull");
    let token = TokenSpec::new("team", "puller", POD_IDENTITY_AUDIENCE).mint();
    let expires = now() + 6 * 3600;
    let fake_agent = agent(
        token.clone(),
        json!({
            "AccessKeyId": akid,
            "SecretAccessKey": secret,
            "Token": session,
            "AccountId": "345678901234",
            "Expiration": rfc3339(expires),
        }),
    );
    let host = "345678901234.dkr.ecr.ap-southeast-2.amazonaws.com";
    let run = plugin(
        &["--aws-credential-source", "pod-identity"],
        &[
            // The agent is node-local: a proxy must neither be needed nor
            // see the token. NO_PROXY exempts moto (127.0.0.1) but not the
            // agent (localhost), so only ignoring the proxy reaches it.
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                &format!("http://localhost:{}/v1/credentials", fake_agent.port()),
            ),
            ("AWS_ENDPOINT_URL_ECR", &moto.url()),
            ("HTTP_PROXY", "http://127.0.0.1:9"),
            ("NO_PROXY", "127.0.0.1"),
        ],
        &format!("{host}/team/app"),
        &token,
        &[],
    );
    let response = run.response();
    assert_eq!(
        auth_entry(&response, host),
        ("AWS", "345678901234-auth-token")
    );
    assert_eq!(response["cacheDuration"], "0s");
    assert_eq!(fake_agent.request_count(), 1);
    assert!(
        run.stderr
            .contains("\"credential source\", \"pod-identity\""),
        "{}",
        run.stderr
    );
    run.assert_no_secrets(&[&token, &secret, &session]);
}

#[test]
fn pod_identity_credentials_sign_the_ecr_call() {
    let token = TokenSpec::new("team", "puller", POD_IDENTITY_AUDIENCE).mint();
    let fake_agent = agent(
        token.clone(),
        json!({
            "AccessKeyId": "ASIAPODIDENTITY00001",
            "SecretAccessKey": "pod/identity/secret/key/0123456789",
            "Token": "IQoJb3JpZ2luX2VjEPODIDENTITYSESSIONTOKEN",
            "AccountId": "123456789012",
            "Expiration": rfc3339(now() + 1800),
        }),
    );
    let ecr = TestServer::start(|_req| {
        ecr_answer(
            200,
            json!({"authorizationData": [{"authorizationToken": b64("AWS:from-pod-identity"), "expiresAt": now() + 12 * 3600}]}),
        )
    });
    let host = "123456789012.dkr.ecr.eu-central-1.amazonaws.com";
    let run = plugin(
        &["--aws-credential-source", "pod-identity"],
        &[
            (
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                &format!("{}/v1/credentials", fake_agent.url()),
            ),
            ("AWS_ENDPOINT_URL_ECR", &ecr.url()),
        ],
        &format!("{host}/app"),
        &token,
        &[],
    );
    let response = run.response();
    assert_eq!(auth_entry(&response, host), ("AWS", "from-pod-identity"));
    // The agent's credentials expire first (30 minutes): 80 % is 24 minutes.
    let cache = response["cacheDuration"].as_str().unwrap();
    assert!(["24m0s", "23m59s"].contains(&cache), "{cache}");
    assert_signed_ecr_request(
        &ecr.requests()[0],
        "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken",
        "ecr",
        "eu-central-1",
        "ASIAPODIDENTITY00001",
        "IQoJb3JpZ2luX2VjEPODIDENTITYSESSIONTOKEN",
    );
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

#[test]
fn pod_identity_agent_401_asks_for_the_right_audience() {
    let (line, count) = agent_refusal(Response::text(401, "Access Denied. invalid token"));
    assert_eq!(count, 1, "refusals are not retried");
    support::assert_says(
        &line,
        &[
            "answered HTTP 401 for service account team/puller (the service account token was refused)",
            "serviceAccountTokenAudience: pods.eks.amazonaws.com",
        ],
    );
}

#[test]
fn pod_identity_agent_called_on_another_address_says_which_to_use() {
    let (line, _) = agent_refusal(Response::text(
        403,
        "Access Denied. Called agent through invalid address, please use either [169.254.170.23 fd00:ec2::23] address not 10.0.0.5",
    ));
    support::assert_says(
        &line,
        &[
            "called on an address the agent does not serve",
            "unset AWS_CONTAINER_CREDENTIALS_FULL_URI",
        ],
    );
}

#[test]
fn pod_identity_agent_500_is_retried_then_explained() {
    let (line, count) = agent_refusal(Response::text(
        500,
        "[req-1]: (InternalServerException): try again, fault: server",
    ));
    assert_eq!(count, 4, "retried with backoff while the deadline allows");
    support::assert_says(
        &line,
        &[
            "answered HTTP 500",
            "InternalServerException",
            "kubectl -n kube-system logs ds/eks-pod-identity-agent",
        ],
    );
}

#[test]
fn pod_identity_agent_bad_json_is_an_error() {
    let (line, _) = agent_refusal(Response::json(
        200,
        json!({"AccessKeyId": "ASIA", "Oops": true}),
    ));
    assert!(
        line.contains("with a body that is not container credentials JSON"),
        "{line}"
    );
    let (line, _) = agent_refusal(Response::text(200, "<html>captive portal</html>"));
    assert!(line.contains("not container credentials JSON"), "{line}");
}

#[test]
fn pod_identity_association_missing_says_how_to_create_it() {
    let (line, _) = agent_refusal(Response::text(
        400,
        "[a1b2c3]: (ResourceNotFoundException): No Pod Identity Association found for the given service account, fault: client",
    ));
    support::assert_says(
        &line,
        &[
            "(no Pod Identity association)",
            "aws eks create-pod-identity-association --cluster-name <cluster> --namespace team --service-account puller",
        ],
    );
}

#[test]
fn pod_identity_agent_unreachable_says_to_install_it() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let token = TokenSpec::new("team", "puller", POD_IDENTITY_AUDIENCE).mint();
    let run = plugin(
        &[
            "--aws-credential-source",
            "pod-identity",
            "--timeout",
            "10s",
            "--log-format",
            "json",
        ],
        &[(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            &format!("http://127.0.0.1:{closed}/v1/credentials"),
        )],
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
        &token,
        &[],
    );
    let line = run.refused("network", &[("service", "EKS Pod Identity Agent")]);
    support::assert_says(
        &words(&line),
        &[
            &format!("http://127.0.0.1:{closed}/v1/credentials"),
            "install the Amazon EKS Pod Identity Agent add-on",
        ],
    );
}

#[test]
fn pod_identity_refuses_plain_http_to_other_hosts() {
    let token = TokenSpec::new("team", "puller", POD_IDENTITY_AUDIENCE).mint();
    let line = plugin(
        &[
            "--aws-credential-source",
            "pod-identity",
            "--log-format",
            "json",
        ],
        &[(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            "http://10.1.2.3/v1/credentials",
        )],
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
        &token,
        &[],
    )
    .refused("config", &[("flag", "AWS_CONTAINER_CREDENTIALS_FULL_URI")]);
    assert!(
        words(&line).contains("plain HTTP to a host that is not the node's Pod Identity Agent"),
        "{line}"
    );
}

/// Issue 15 item 4: a backslash before `@` made the loopback check read the
/// host after it while the client connected to the host before it, sending
/// the token in clear there. Refused now before any connection: the "other
/// host" here is a listener on 127.0.0.1 that must see no connection.
#[test]
fn pod_identity_refuses_a_url_whose_host_is_hidden_behind_a_backslash_or_user_info() {
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = other.local_addr().unwrap().port();
    let token = TokenSpec::new("team", "puller", POD_IDENTITY_AUDIENCE).mint();
    for uri in [
        format!("http://127.0.0.1:{port}\\@localhost/v1/credentials"),
        format!("http://198.51.100.7:{port}\\@127.0.0.1/v1/credentials"),
        format!("http://agent:secret@127.0.0.1:{port}/v1/credentials"),
    ] {
        let run = plugin(
            &[
                "--aws-credential-source",
                "pod-identity",
                "--timeout",
                "5s",
                "--log-format",
                "json",
            ],
            &[("AWS_CONTAINER_CREDENTIALS_FULL_URI", &uri)],
            "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
            &token,
            &[],
        );
        let line = run.refused("config", &[("flag", "AWS_CONTAINER_CREDENTIALS_FULL_URI")]);
        let problem = line["facts"]["problem"].as_str().unwrap();
        assert!(problem.contains("is not an http(s) URL"), "{uri}: {line}");
        assert!(!run.stderr.contains("secret"), "{}", run.stderr);
        assert!(!run.stderr.contains(&token));
    }
    other.set_nonblocking(true).unwrap();
    assert!(
        matches!(other.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "a connection reached the other host"
    );
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

/// Issue 15 item 3: an AWS reply is read up to the 1 MiB bound every other
/// upstream call has, whatever the server streams: a clear error, no retry,
/// and the process's peak memory (measured by /usr/bin/time) stays far
/// below the body.
#[test]
fn an_endless_sts_reply_is_cut_at_the_bound_with_bounded_memory() {
    let sts = EndlessBody::start();
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let out = std::process::Command::new("/usr/bin/time")
        .arg("-v")
        .arg(support::plugin::bin())
        .args([
            "--provider",
            "aws",
            "--log-level",
            "debug",
            "--timeout",
            "30s",
            "--log-format",
            "json",
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("AWS_ENDPOINT_URL_STS", sts.url())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            let stdin = request(
                "123456789012.dkr.ecr.us-east-1.amazonaws.com/app",
                Some(&token),
                &[(ROLE_ANNOTATION, "arn:aws:iam::123456789012:role/pull")],
            );
            child.stdin.take().unwrap().write_all(stdin.as_bytes())?;
            child.wait_with_output()
        })
        .expect("/usr/bin/time runs the plugin (apt-get install time)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // time's own report comes after the plugin's lines.
    let peak_kib: u64 = stderr
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .expect("time -v reports the peak RSS")
        .parse()
        .unwrap();
    let run = Run {
        code: out.status.code(),
        stdout: out.stdout.clone(),
        stderr: stderr
            .lines()
            .filter(|l| l.starts_with('{'))
            .collect::<Vec<_>>()
            .join("\n"),
    };
    let written = sts.written.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        written < EndlessBody::SIZE / 16,
        "the plugin read on: {written} bytes"
    );
    assert!(!out.status.success(), "{stderr}");
    let line = run.refused("upstream", &[("service", "AWS STS")]);
    assert!(
        words(&line).contains("the reply body is larger than 1024 KiB"),
        "{line}"
    );
    assert_eq!(
        sts.connections.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "a reply too large is not retried"
    );
    assert!(
        peak_kib < 64 * 1024,
        "peak RSS {peak_kib} KiB for a 2 GiB body"
    );
    assert!(!stderr.contains(&token));
}

/// An ECR pull-through cache as a registry mirror: the kubelet asks about
/// `docker.io/library/nginx`; with `--registry-mirror
/// docker.io=<account>.dkr.ecr.<region>.amazonaws.com/docker-hub` the
/// exchange is for the cache's registry and region (STS, then a signed
/// ECR GetAuthorizationToken in us-west-2), the answer keyed `docker.io`
/// only; and `auto` routes by the target too.
#[test]
fn an_ecr_pull_through_cache_serves_docker_io_keyed_by_docker_io() {
    let role = "arn:aws:iam::123456789012:role/pull";
    let sts = sts_issuing(role);
    let ecr = TestServer::start(|_req| {
        ecr_token(
            "cache-password",
            "https://123456789012.dkr.ecr.us-west-2.amazonaws.com",
        )
    });
    let token = TokenSpec::new("team", "puller", STS_AUDIENCE).mint();
    let mirror = "docker.io=123456789012.dkr.ecr.us-west-2.amazonaws.com/docker-hub";
    let env = [
        ("AWS_ENDPOINT_URL_STS", sts.url()),
        ("AWS_ENDPOINT_URL_ECR", ecr.url()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let out = plugin(
        &["--registry-mirror", mirror],
        &env,
        "docker.io/library/nginx",
        &token,
        &[(ECR_ROLE_ANNOTATION, role)],
    );
    let response = out.response();
    let auth = response["auth"].as_object().unwrap();
    assert_eq!(auth.keys().collect::<Vec<_>>(), ["docker.io"], "{response}");
    assert_eq!(
        auth_entry(&response, "docker.io"),
        ("AWS", "cache-password")
    );
    assert!(
        out.stderr
            .contains(&format!("\"registry_mirror\", \"{mirror}\"")),
        "{}",
        out.stderr
    );
    for req in ecr.requests() {
        assert_signed_ecr_request(
            &req,
            "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken",
            "ecr",
            "us-west-2",
            STS_AKID,
            STS_SESSION_TOKEN,
        );
    }
    assert_eq!(ecr.request_count(), 1);

    // `auto` (no --provider) routes the mirrored image by its target.
    let args = ["--registry-mirror", mirror, "--log-level", "debug"];
    let auto = run(
        &args,
        &env,
        request(
            "docker.io/library/nginx",
            Some(&token),
            &[(ECR_ROLE_ANNOTATION, role)],
        )
        .as_bytes(),
    );
    assert_eq!(
        auth_entry(&auto.response(), "docker.io"),
        ("AWS", "cache-password")
    );

    // A mirror whose target is not ECR is refused before any call.
    let calls = sts.request_count();
    let refused = plugin(
        &[
            "--registry-mirror",
            "docker.io=quay.io/mirror",
            "--log-format",
            "json",
        ],
        &env,
        "docker.io/library/nginx",
        &token,
        &[(ECR_ROLE_ANNOTATION, role)],
    );
    refused.refused_registry("quay.io");
    assert_eq!(sts.request_count(), calls);
}
