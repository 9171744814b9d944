//! EKS Pod Identity: the agent's credentials signing the ECR call, and
//! each way the agent can fail or be misaddressed.

use super::*;

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
