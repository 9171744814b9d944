//! What STS and ECR refuse, and what we refuse before any call: each
//! answer explained with its fix, never a token in the message, bounded
//! replies and deadlines.

use super::*;

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
