//! The binary as the kubelet runs it with `--provider token-exchange`,
//! against a local RFC 8693 token server (tests/support/sts.rs) and, end
//! to end, Debian's docker-registry behind a token service that accepts
//! exactly the exchanged token.

use crate::support;

use support::http_server::{Response, TestServer};
use support::plugin::{self, IMAGE, REGISTRY, exec, json_logs, request, words};
use support::sts::{ACCESS_TOKEN, AUDIENCE, Expect, FakeSts, oauth_error};
use support::token::TokenSpec;

fn expect(fields: &[(&str, &str)], client: Option<(&str, &str)>) -> Expect {
    Expect {
        fields: fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        client: client.map(|(a, b)| (a.to_string(), b.to_string())),
        ..Expect::puller()
    }
}

fn args(sts: &FakeSts, extra: &[&str]) -> Vec<String> {
    let base = ["--provider", "token-exchange", "--registry", REGISTRY];
    let audience = ["--audience", AUDIENCE, "--log-level", "debug"];
    sts.flags(&[&base[..], &audience, extra].concat())
}

fn token() -> String {
    TokenSpec::new("team", "puller", AUDIENCE).mint()
}

#[test]
fn exchanges_with_every_optional_field() {
    let sts = FakeSts::start(expect(
        &[
            ("resource", "https://registry.example.com"),
            ("audience", "registry"),
            ("audience", "mirror"),
            ("scope", "repository:team/app:pull"),
            ("requested_token_type", ACCESS_TOKEN),
        ],
        None,
    ));
    let t = token();
    let out = exec(
        &args(
            &sts,
            &[
                "--token-exchange-resource",
                "https://registry.example.com",
                "--token-exchange-audience",
                "registry",
                "--token-exchange-audience",
                "mirror",
                "--token-exchange-scope",
                "repository:team/app:pull",
                "--token-exchange-requested-token-type",
                ACCESS_TOKEN,
                "--token-exchange-username",
                "robot",
            ],
        ),
        &request(IMAGE, Some(&t), &[]),
    );
    let response = out.response_for(IMAGE);
    let issued = sts.issued();
    assert_eq!(issued.len(), 1);
    assert_eq!(response["cacheKeyType"], "Registry");
    assert_eq!(response["auth"][REGISTRY]["username"], "robot");
    assert_eq!(response["auth"][REGISTRY]["password"], issued[0].as_str());
    // expires_in 900 s, less the margin the core keeps.
    let d = response["cacheDuration"].as_str().unwrap();
    assert!(
        d.ends_with('s') && d.starts_with("1") && d.contains('m'),
        "{d}"
    );
    out.assert_no_secrets(&[t, issued[0].clone()]);
}

#[test]
fn a_path_scoped_registry_keys_the_answer_with_its_path() {
    let sts = FakeSts::start(expect(&[], None));
    let t = token();
    let mut scoped = args(&sts, &["--token-exchange-username", "robot"]);
    let at = scoped.iter().position(|a| a == REGISTRY).unwrap();
    scoped[at] = "registry.example.com/team".to_string();
    let out = exec(&scoped, &request(IMAGE, Some(&t), &[]));
    out.assert_path_scoped(IMAGE, "registry.example.com/team");
    exec(
        &json_logs(&scoped),
        &request("registry.example.com/other/app:v1", Some(&t), &[]),
    )
    .refused_registry(REGISTRY);
    assert_eq!(sts.issued().len(), 1);
}

#[test]
fn client_authentication_and_username_from_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("secret");
    std::fs::write(&secret_file, "s3cr:et value\n").unwrap();
    let sts = FakeSts::start(expect(&[], Some(("kubelet client", "s3cr:et value"))));
    let t = token();
    let base = args(
        &sts,
        &[
            "--token-exchange-username-field",
            "username",
            "--token-exchange-client-id",
            "kubelet client",
        ],
    );
    let mut with_secret = base.clone();
    with_secret.extend([
        "--token-exchange-client-secret-file".to_string(),
        secret_file.display().to_string(),
    ]);
    let out = exec(&with_secret, &request(IMAGE, Some(&t), &[]));
    let response = out.response();
    assert_eq!(response["auth"][REGISTRY]["username"], "svc-from-sts");
    out.assert_no_secrets(&[t.clone(), "s3cr:et value".into(), sts.issued()[0].clone()]);

    // The wrong secret: the server's 401 invalid_client, with the fix.
    std::fs::write(&secret_file, "wrong").unwrap();
    let invalid_client = [("service", "the token server"), ("status", "401")];
    let line = exec(&json_logs(&with_secret), &request(IMAGE, Some(&t), &[]))
        .refused("upstream", &invalid_client);
    support::assert_says(
        &words(&line),
        &[
            "HTTP 401 invalid_client: \"Client authentication failed.\"",
            "--token-exchange-client-secret-file",
        ],
    );
    // No client authentication at all, as a public client: refused too.
    let out = exec(&json_logs(&base), &request(IMAGE, Some(&t), &[]));
    let line = out.refused("upstream", &invalid_client);
    assert!(words(&line).contains("invalid_client"), "{line}");
    assert!(!out.stderr.contains("wrong"), "{line}");
}

#[test]
fn refusals_and_faults_name_the_code_and_a_fix() {
    let sts = FakeSts::start(expect(&[], None));
    let a = args(&sts, &["--token-exchange-username", "robot"]);
    let t = token();
    let req = request(IMAGE, Some(&t), &[]);
    // The server's refusal, with `status` as a fact; its words.
    let json = [a.clone(), vec!["--log-format".into(), "json".into()]].concat();
    let refused_run = |request: &str, status: &str| -> (plugin::Run, String) {
        let out = exec(&json, request);
        let line = out.refused(
            "upstream",
            &[("service", "the token server"), ("status", status)],
        );
        (out, words(&line))
    };
    let refused = |request: &str, status: &str| refused_run(request, status).1;

    // A token the server does not trust (another subject).
    let other = TokenSpec::new("team", "other", AUDIENCE).mint();
    let line = refused(&request(IMAGE, Some(&other), &[]), "400");
    assert!(
        line.contains("refused the token exchange for team/other: ")
            && line.contains("invalid_grant"),
        "{line}"
    );
    assert!(line.contains("https://oidc.cluster.test"), "{line}");
    // Signed by another key: the server's description is repeated, without the token.
    let forged = TokenSpec::new("team", "puller", AUDIENCE).mint_with_wrong_key();
    let (out, line) = refused_run(&request(IMAGE, Some(&forged), &[]), "400");
    assert!(
        line.contains("invalid_grant: \"subject_token is invalid: InvalidSignature\""),
        "{line}"
    );
    out.assert_no_secrets(&[forged]);

    // RFC 8693 §2.2.2: a server may refuse the subject token with
    // invalid_request; that is a refusal of the token, not a wrong URL.
    sts.script([oauth_error(
        400,
        "invalid_request",
        "subject_token: audience not accepted",
    )]);
    let line = refused(&req, "400");
    support::assert_says(
        &line,
        &["invalid_request", "refused the service account token"],
    );
    assert!(!line.contains("is its token endpoint"), "{line}");
    sts.script([oauth_error(
        400,
        "invalid_request",
        "Missing required parameter: subject_token_type",
    )]);
    let line = refused(&req, "400");
    assert!(line.contains("is its token endpoint"), "{line}");

    // 429 with Retry-After: retried, then success.
    let before = sts.server.request_count();
    sts.script([
        oauth_error(429, "slow_down", "Too many requests.").with_header("Retry-After", "1")
    ]);
    let out = exec(&a, &req);
    out.response();
    assert_eq!(sts.server.request_count() - before, 2);
    // 429 asking for longer than the kubelet waits: reported at once.
    let before = sts.server.request_count();
    sts.script([
        oauth_error(429, "slow_down", "Too many requests.").with_header("Retry-After", "3600")
    ]);
    let line = refused(&req, "429");
    assert!(line.contains("asking to retry after"), "{line}");
    assert_eq!(sts.server.request_count() - before, 1);
    // 500 on every attempt.
    let before = sts.server.request_count();
    sts.script((0..4).map(|_| Response::text(500, "<html>upstream connect error</html>")));
    let line = refused(&req, "500");
    support::assert_says(
        &line,
        &[
            "failed the token exchange for team/puller: ",
            "throttling or unavailable",
        ],
    );
    assert_eq!(sts.server.request_count() - before, 4);
    // Malformed JSON and a token already expired.
    sts.script([Response::text(200, "{\"access_token\": ")]);
    let line = refused(&req, "200");
    assert!(line.contains("not a JSON token response"), "{line}");
    let expired = support::token::sign(
        &serde_json::json!({"sub": "robot", "exp": support::token::now() - 60}),
        support::token::WRONG_KEY,
    );
    sts.script([Response::json(200, serde_json::json!({"access_token": expired, "issued_token_type": ACCESS_TOKEN, "token_type": "Bearer"}))]);
    let (out, line) = refused_run(&req, "200");
    assert!(line.contains("expired already"), "{line}");
    out.assert_no_secrets(&[expired, t]);
}

#[test]
fn other_registries_and_annotations_never_move_the_token() {
    let sts = FakeSts::start(expect(&[], None));
    let elsewhere = TestServer::start(|_| Response::text(200, "{}"));
    let a = args(&sts, &["--token-exchange-username", "robot"]);
    let t = token();
    // A registry that was not allowed: refused before any network call.
    for image in [
        "registry.example.com.evil.net/app",
        "evil.net/registry.example.com/app",
        "registry.example.com:8443/app",
    ] {
        let mut json = a.clone();
        json.extend(["--log-format", "json"].map(String::from));
        let registry = image.split_once('/').unwrap().0;
        exec(&json, &request(image, Some(&t), &[])).refused_registry(registry);
    }
    assert_eq!(sts.server.request_count(), 0);
    // Annotations that look like settings change nothing: the token goes
    // to the configured server only.
    let hostile = elsewhere.url();
    let annotations = [
        ("token-exchange/url", hostile.as_str()),
        (
            "wi-credential-provider.io/token-exchange-url",
            hostile.as_str(),
        ),
        ("wi-credential-provider.io/registry", "evil.net"),
    ];
    exec(&a, &request(IMAGE, Some(&t), &annotations)).response();
    assert_eq!(sts.server.request_count(), 1);
    assert_eq!(elsewhere.request_count(), 0);
}

#[test]
fn skopeo_and_containerd_pull_with_the_exchanged_token() {
    use std::sync::{Arc, Mutex};
    use support::registry::Registry;

    let sts = FakeSts::start(expect(&[("audience", "registry")], None));
    let issued: Arc<Mutex<Vec<String>>> = Arc::default();
    let accepted = Arc::clone(&issued);
    // The registry's token service accepts exactly the tokens the STS issued, as `robot`.
    let registry = Registry::start_with_token_auth(move |username, password| {
        username == "robot" && accepted.lock().unwrap().iter().any(|t| t == password)
    });
    let digest = registry.push_test_image("team/app", "v1");
    let host = registry.host().to_string();
    let a: Vec<String> = [
        "--provider",
        "token-exchange",
        "--registry",
        &host,
        "--audience",
        AUDIENCE,
        "--token-exchange-url",
        &sts.url(),
        "--token-exchange-audience",
        "registry",
        "--token-exchange-username",
        "robot",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let image = format!("{host}/team/app:v1");
    let response = exec(&a, &request(&image, Some(&token()), &[])).response_for(&image);
    *issued.lock().unwrap() = sts.issued();
    let (username, password) = plugin::auth_entry(&response, &host);
    registry
        .pull("team/app", "v1", username, password)
        .expect("skopeo pulls with the exchanged token");
    // containerd, as on a node (its OAuth2 POST login).
    let containerd = support::containerd::Containerd::start();
    let pulled = containerd
        .pull(&image, username, password)
        .unwrap_or_else(|e| panic!("containerd refused the exchanged token:\n{e}"));
    assert_eq!(pulled, digest);
    // The service account token itself is not a registry password here.
    assert!(registry.pull("team/app", "v1", "robot", &token()).is_err());
}
