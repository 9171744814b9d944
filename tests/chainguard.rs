//! The binary as the kubelet runs it with `--provider chainguard`, against
//! a local Chainguard STS (tests/support/chainguard.rs).

use crate::support;

use support::chainguard::{AUDIENCE, FakeChainguard, IDENTITY, OTHER_IDENTITY, grpc_error};
use support::http_server::{Response, TestServer};
use support::plugin::{self, Run, exec, json_logs, request, run, words};
use support::token::TokenSpec;

const IMAGE: &str = "cgr.dev/example.com/app:latest";
const OURS: &str = "wi-credential-provider.io/chainguard-identity";
const COOKBOOK: &str = "credentials.chainguard.dev/identity";

fn args(cg: &FakeChainguard, extra: &[&str]) -> Vec<String> {
    let ours = ["--provider", "chainguard", "--log-level", "debug"];
    cg.flags(&[&ours[..], extra].concat())
}

fn token(name: &str) -> String {
    TokenSpec::new("team", name, AUDIENCE).mint()
}

#[test]
fn exchanges_for_the_annotated_identity() {
    let cg = FakeChainguard::start();
    let t = token("puller");
    let out = exec(
        &args(&cg, &[]),
        &request(IMAGE, Some(&t), &[(OURS, IDENTITY)]),
    );
    let response = out.response_for(IMAGE);
    let issued = cg.issued();
    assert_eq!(issued.len(), 1);
    assert_eq!(response["cacheKeyType"], "Registry");
    assert_eq!(response["auth"]["cgr.dev"]["username"], "_token");
    assert_eq!(response["auth"]["cgr.dev"]["password"], issued[0].as_str());
    let d = response["cacheDuration"].as_str().unwrap();
    assert!(d.contains('m') && !d.contains('h'), "{d}");
    let req = &cg.server.requests()[0];
    assert_eq!(req.query_values("identity"), [IDENTITY]);
    assert_eq!(req.bearer().as_deref(), Some(t.as_str()));
    out.assert_no_secrets(&[t, issued[0].clone()]);
}

#[test]
fn a_path_scoped_mirror_keys_the_answer_with_its_path() {
    let cg = FakeChainguard::start();
    let t = token("puller");
    let scoped = args(&cg, &["--registry", "mirror.example.com/cgr"]);
    let image = "mirror.example.com/cgr/app:latest";
    let out = exec(&scoped, &request(image, Some(&t), &[(OURS, IDENTITY)]));
    out.assert_path_scoped(image, "mirror.example.com/cgr");
    // cgr.dev itself stays keyed for the registry it is.
    let out = exec(&scoped, &request(IMAGE, Some(&t), &[(OURS, IDENTITY)]));
    assert_eq!(out.response_for(IMAGE)["cacheKeyType"], "Registry");
    exec(
        &json_logs(&scoped),
        &request(
            "mirror.example.com/other/app",
            Some(&t),
            &[(OURS, IDENTITY)],
        ),
    )
    .refused_registry("mirror.example.com");
    assert_eq!(cg.issued().len(), 2);
}

#[test]
fn identity_order_cookbook_key_and_flag() {
    let cg = FakeChainguard::start();
    let other = token("other");
    // The cookbook plugin's key is read when ours is absent.
    exec(
        &args(&cg, &[]),
        &request(IMAGE, Some(&other), &[(COOKBOOK, OTHER_IDENTITY)]),
    )
    .response();
    // Ours wins over the cookbook's: IDENTITY does not trust team/other.
    let line = exec(
        &args(&cg, &["--log-format", "json"]),
        &request(
            IMAGE,
            Some(&other),
            &[(OURS, IDENTITY), (COOKBOOK, OTHER_IDENTITY)],
        ),
    )
    .refused(
        "upstream",
        &[("service", "Chainguard's STS"), ("status", "403")],
    );
    support::assert_says(
        &words(&line),
        &[
            "HTTP 403 PERMISSION_DENIED",
            "system:serviceaccount:team:other",
        ],
    );
    // The flag is the default.
    exec(
        &args(&cg, &["--chainguard-identity", IDENTITY]),
        &request(IMAGE, Some(&token("puller")), &[]),
    )
    .response();
    // Neither: refused before the network.
    let before = cg.server.request_count();
    exec(
        &args(&cg, &["--log-format", "json"]),
        &request(IMAGE, Some(&token("puller")), &[]),
    )
    .refused_for_annotation(OURS);
    assert_eq!(cg.server.request_count(), before);
    let ids: Vec<Vec<String>> = cg
        .server
        .requests()
        .iter()
        .map(|r| r.query_values("identity"))
        .collect();
    assert_eq!(
        ids,
        [
            vec![OTHER_IDENTITY.to_string()],
            vec![IDENTITY.to_string()],
            vec![IDENTITY.to_string()]
        ]
    );
}

#[test]
fn hostile_annotations_and_registries_are_refused_before_any_call() {
    let cg = FakeChainguard::start();
    let elsewhere = TestServer::start(|_| Response::text(200, "{}"));
    let t = token("puller");
    let evil = elsewhere.url();
    for value in [
        format!("{IDENTITY}&aud=evil.example.com"),
        format!("{IDENTITY}?x=1"),
        format!("{IDENTITY}#x"),
        format!("{evil}/sts/exchange"),
        "../../../evil".to_string(),
        format!("{IDENTITY}/../.."),
        format!("{IDENTITY}\n"),
        format!("{IDENTITY}\r\nX-Injected: 1"),
        String::new(),
    ] {
        for key in [OURS, COOKBOOK] {
            // Blank, or a control character, is refused by the one rule for
            // every annotation; anything else not an identity ID by
            // chainguard's pattern. Either way, the annotation's fault,
            // before the STS hears of it.
            let json = args(&cg, &["--log-format", "json"]);
            let out = exec(&json, &request(IMAGE, Some(&t), &[(key, &value)]));
            out.refused_for_annotation(key);
            assert!(!out.stderr.contains(&t));
        }
    }
    // Look-alike registries get nothing either.
    for image in [
        "cgr.dev.evil.net/app",
        "evil.net/cgr.dev/app",
        "cgr.dev:8443/app",
    ] {
        exec(
            &args(&cg, &["--log-format", "json"]),
            &request(image, Some(&t), &[(OURS, IDENTITY)]),
        )
        .refused_registry(image.split_once('/').unwrap().0);
    }
    assert_eq!(elsewhere.request_count(), 0);
    // Nothing reached the STS.
    assert_eq!(cg.server.request_count(), 0);
}

#[test]
fn refusals_and_faults_name_the_code_and_a_fix() {
    let cg = FakeChainguard::start();
    let a = args(&cg, &[]);
    let t = token("puller");
    let req = request(IMAGE, Some(&t), &[(OURS, IDENTITY)]);
    // Chainguard's refusal, with `status` as a fact; its words.
    let json = [a.clone(), vec!["--log-format".into(), "json".into()]].concat();
    let refused = |run: Run, status: &str| -> (Run, String) {
        let line = run.failure_json();
        assert_eq!(line["kind"], "upstream", "{line}");
        assert_eq!(line["facts"]["service"], "Chainguard's STS", "{line}");
        assert_eq!(line["facts"]["status"], status, "{line}");
        (run, plugin::words(&line))
    };
    // Unknown identity.
    let unknown = "0123456789abcdef0123456789abcdef01234567/0000000000000000";
    let (_, line) = refused(
        exec(&json, &request(IMAGE, Some(&t), &[(OURS, unknown)])),
        "404",
    );
    support::assert_says(
        &line,
        &[
            "NOT_FOUND: \"identity not found\"",
            "chainctl iam identities list",
        ],
    );
    // A token with the wrong audience: Chainguard's 401.
    let wrong_aud = TokenSpec::new("team", "puller", "cgr.dev").mint();
    let (out, line) = refused(
        exec(
            &[json.clone(), vec!["--audience".into(), "cgr.dev".into()]].concat(),
            &request(IMAGE, Some(&wrong_aud), &[(OURS, IDENTITY)]),
        ),
        "401",
    );
    assert!(
        line.contains("UNAUTHENTICATED: \"unable to verify token: InvalidAudience\""),
        "{line}"
    );
    out.assert_no_secrets(&[wrong_aud]);
    // 429 with Retry-After, then success.
    let before = cg.server.request_count();
    cg.script([grpc_error(429, 8, "rate limited").with_header("Retry-After", "1")]);
    exec(&a, &req).response();
    assert_eq!(cg.server.request_count() - before, 2);
    // 500 on every attempt.
    let before = cg.server.request_count();
    cg.script((0..4).map(|_| grpc_error(500, 13, "internal error")));
    let (_, line) = refused(exec(&json, &req), "500");
    support::assert_says(
        &line,
        &[
            "failed the exchange for identity",
            "INTERNAL",
            "throttling or unavailable",
        ],
    );
    assert_eq!(cg.server.request_count() - before, 4);
    // Malformed JSON, no token, an expired token.
    cg.script([Response::text(200, "{\"token\":")]);
    let (_, line) = refused(exec(&json, &req), "200");
    assert!(line.contains("not a JSON token response"), "{line}");
    cg.script([Response::json(
        200,
        serde_json::json!({"refreshToken": "r"}),
    )]);
    let (_, line) = refused(exec(&json, &req), "200");
    assert!(line.contains("no token"), "{line}");
    let expired = support::token::sign(
        &serde_json::json!({"exp": support::token::now() - 5}),
        support::token::WRONG_KEY,
    );
    cg.script([Response::json(200, serde_json::json!({"token": expired}))]);
    let (out, line) = refused(exec(&json, &req), "200");
    assert!(line.contains("expired already"), "{line}");
    out.assert_no_secrets(&[expired, t]);
}

#[test]
fn auto_never_routes_to_chainguard() {
    let cg = FakeChainguard::start();
    let t = token("puller");
    let out = run(
        &json_logs(&["--provider", "auto", "--chainguard-issuer-url", &cg.url()]),
        &[],
        request(IMAGE, Some(&t), &[(OURS, IDENTITY)]).as_bytes(),
    );
    out.refused_registry("cgr.dev");
    assert_eq!(cg.server.request_count(), 0);
}
