//! The web-identity path that works: STS against moto, the request STS
//! receives, a real registry pull with the returned credentials, proxies,
//! ECR Public and pull-through caches.

use super::*;

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
