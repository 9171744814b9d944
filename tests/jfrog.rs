//! The binary as the kubelet runs it with `--provider jfrog`, against a
//! faithful fake of JFrog's OIDC token exchange.

use crate::support;

use support::http_server::Response;
use support::jfrog::{self, Integration};
use support::plugin;
use support::token::TokenSpec;
use support::token_service::{self as ts, FakeService, Trust, invoke};

const AUDIENCE: &str = "jfrog.example";
const REGISTRY: &str = "example.jfrog.io";
const IMAGE: &str = "example.jfrog.io/docker-local/app:v1";
const MAPPING_KEY: &str = "wi-credential-provider.io/jfrog-identity-mapping";

fn integration(project: Option<&str>) -> Integration {
    Integration {
        provider_name: "k8s-prod".into(),
        project_key: project.map(str::to_string),
        mapping: "team-a".into(),
        username: "k8s-team-a".into(),
    }
}

fn fake(project: Option<&str>) -> FakeService {
    jfrog::start(
        Trust::service_account("team", "app", AUDIENCE),
        integration(project),
    )
}

fn args(fake: &FakeService, registry: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--provider",
        "jfrog",
        "--registry",
        registry,
        "--audience",
        AUDIENCE,
        "--jfrog-url",
        &fake.url(),
        "--jfrog-provider-name",
        "k8s-prod",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn token() -> String {
    TokenSpec::new("team", "app", AUDIENCE).mint()
}

#[test]
fn exchanges_for_the_username_jfrog_returns() {
    let fake = fake(Some("proj"));
    let token = token();
    for annotations in [vec![], vec![(MAPPING_KEY, "team-a")]] {
        let out = invoke(
            &args(&fake, REGISTRY, &["--jfrog-project-key", "proj"]),
            IMAGE,
            &token,
            &annotations,
        );
        ts::assert_exchanged(&out, &fake, IMAGE, REGISTRY, "k8s-team-a", &token);
        assert!(!out.stderr.contains("lives only"), "{}", out.stderr);
    }
    assert_eq!(fake.request_count(), 2);
}

#[test]
fn a_short_jfrog_lifetime_is_surfaced() {
    let fake = fake(None);
    fake.set_lifetime(60);
    let out = invoke(&args(&fake, REGISTRY, &[]), IMAGE, &token(), &[]);
    let response = out.response_for(IMAGE);
    assert_eq!(response["cacheDuration"], "48s");
    assert!(
        out.stderr.contains("lives only 60s")
            && out.stderr.contains("raise the mapping's token expiry"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_path_scoped_registry_keys_the_answer_with_its_path() {
    let fake = fake(None);
    let token = token();
    let args = args(&fake, "example.jfrog.io/docker-local", &[]);
    let out = invoke(&args, IMAGE, &token, &[]);
    out.assert_path_scoped(IMAGE, "example.jfrog.io/docker-local");
    let sent = fake.request_count();
    ts::invoke_json(&args, "example.jfrog.io/other/app:v1", &token, &[]).refused_registry(REGISTRY);
    assert_eq!(fake.request_count(), sent);
}

#[test]
fn control_characters_from_jfrog_never_reach_stderr_raw() {
    // JFrog's answer is refused outright with CR or LF in the username
    // (`no usable username`); every other hidden character arrives.
    let hostile = "k8s\u{1b}[2J\u{7}\u{0}\u{85}\u{2028}\u{202e}evil\u{b}\u{c}forged";
    let fake = jfrog::start(
        Trust::service_account("team", "app", AUDIENCE),
        Integration {
            username: hostile.into(),
            ..integration(None)
        },
    );
    fake.set_lifetime(60);
    let out = invoke(&args(&fake, REGISTRY, &[]), IMAGE, &token(), &[]);
    out.response_for(IMAGE);
    assert!(out.stderr.contains("lives only 60s"), "{}", out.stderr);
    for c in [
        '\u{1b}', '\u{7}', '\u{0}', '\u{85}', '\u{2028}', '\u{202e}', '\u{b}', '\u{c}',
    ] {
        assert!(
            !out.stderr.contains(c),
            "U+{:04X} on stderr: {:?}",
            u32::from(c),
            out.stderr
        );
    }
    assert!(out.stderr.contains("k8s\\u{1b}[2J"), "{:?}", out.stderr);
    // Every line is one of ours: nothing split or forged a line.
    for line in out.stderr.lines() {
        assert!(line.starts_with("wi-credential-provider: "), "{line:?}");
    }
}

#[test]
fn no_token_on_stderr_at_info_or_debug() {
    let fake = fake(None);
    let args = args(&fake, REGISTRY, &[]);
    ts::assert_quiet_at_every_level(&args, IMAGE, &token(), &[]);
    assert_eq!(fake.request_count(), 2);
}

#[test]
fn refusals_name_jfrog_the_status_and_the_fix() {
    let fake = fake(None);
    let token = token();
    let json = [
        args(&fake, REGISTRY, &[]),
        vec!["--log-format".into(), "json".into()],
    ]
    .concat();
    let run = || invoke(&json, IMAGE, &token, &[]);
    ts::assert_failures(
        &fake,
        run,
        vec![
            (
                vec![jfrog::error(
                    401,
                    "UNAUTHORIZED",
                    "Failed to validate the OIDC token",
                )],
                "401",
                vec![
                    "JFrog refused the token exchange",
                    "UNAUTHORIZED",
                    "\"k8s-prod\"",
                    "system:serviceaccount:team:app",
                ],
            ),
            (
                vec![jfrog::error(
                    403,
                    "FORBIDDEN",
                    "No identity mapping matched the token claims",
                )],
                "403",
                vec!["FORBIDDEN", "No identity mapping matched"],
            ),
            (
                vec![
                    jfrog::error(429, "TOO_MANY_REQUESTS", "Rate limit exceeded")
                        .with_header("Retry-After", "120"),
                ],
                "429",
                vec!["asking to retry after 2m0s"],
            ),
            (
                vec![jfrog::error(500, "INTERNAL_ERROR", "x"); 4],
                "500",
                vec![
                    "JFrog failed the token exchange",
                    "INTERNAL_ERROR",
                    "throttling or unavailable",
                ],
            ),
            (
                vec![Response::text(200, "{\"access_token\":")],
                "200",
                vec![
                    "with a body that is not a JSON token response",
                    "--jfrog-url",
                ],
            ),
        ],
        &[&token],
    );
    // Throttled once, then served: the Retry-After is honoured.
    fake.script([
        jfrog::error(429, "TOO_MANY_REQUESTS", "slow down").with_header("Retry-After", "1")
    ]);
    let before = fake.request_count();
    invoke(&args(&fake, REGISTRY, &[]), IMAGE, &token, &[]).response_for(IMAGE);
    assert_eq!(fake.request_count(), before + 2);
    // The real refusals of the fake, not scripted ones.
    let line = ts::invoke_json(
        &args(&fake, REGISTRY, &[]),
        IMAGE,
        &token,
        &[(MAPPING_KEY, "team-b")],
    )
    .refused("upstream", &[("service", "JFrog"), ("status", "404")]);
    assert!(
        plugin::words(&line).contains("NOT_FOUND: \"Identity mapping not found\""),
        "{line}"
    );
    let other = TokenSpec::new("team", "intruder", AUDIENCE).mint();
    let line = ts::invoke_json(&args(&fake, REGISTRY, &[]), IMAGE, &other, &[])
        .refused("upstream", &[("service", "JFrog"), ("status", "401")]);
    assert!(
        plugin::words(&line).contains("system:serviceaccount:team:intruder"),
        "{line}"
    );
}

#[test]
fn an_expired_jfrog_token_is_an_error() {
    let fake = fake(None);
    let token = token();
    let mut json = args(&fake, REGISTRY, &[]);
    json.extend(["--log-format", "json"].map(String::from));
    ts::assert_expired_refused(&fake, "JFrog", &token, || invoke(&json, IMAGE, &token, &[]));
}

#[test]
fn annotations_never_move_the_token() {
    let fake = fake(None);
    let token = token();
    ts::assert_hostile_refused(&fake, MAPPING_KEY, |value| {
        ts::invoke_json(
            &args(&fake, REGISTRY, &[]),
            IMAGE,
            &token,
            &[(MAPPING_KEY, value)],
        )
    });
    // A registry the admin did not allow gets nothing, whatever it is.
    ts::invoke_json(&args(&fake, REGISTRY, &[]), "evil.example/app", &token, &[])
        .refused_registry("evil.example");
    // auto never routes here.
    let out = support::plugin::run(
        &[
            "--jfrog-url",
            &fake.url(),
            "--jfrog-provider-name",
            "k8s-prod",
            "--registry",
            REGISTRY,
            "--log-format",
            "json",
        ],
        &[],
        support::plugin::request(IMAGE, Some(&token), &[]).as_bytes(),
    );
    out.refused_registry(REGISTRY);
    assert_eq!(fake.request_count(), 0);
}

#[test]
fn missing_settings_fail_with_the_flag_to_set() {
    let stdin = support::plugin::request(IMAGE, Some(&token()), &[]);
    support::plugin::assert_flag_refusals(
        &["--provider", "jfrog", "--registry", REGISTRY],
        stdin.as_bytes(),
        &[
            (&["--jfrog-provider-name", "x"], "--jfrog-url", "is not set"),
            (
                &["--jfrog-url", "https://example.jfrog.io"],
                "--jfrog-provider-name",
                "is not set",
            ),
            (
                &[
                    "--jfrog-url",
                    "https://u:p@example.jfrog.io",
                    "--jfrog-provider-name",
                    "x",
                ],
                "--jfrog-url",
                "holds user information",
            ),
        ],
    );
}

#[test]
fn skopeo_and_containerd_pull_with_the_jfrog_credentials() {
    let fake = fake(None);
    let token = token();
    ts::clients_pull(&fake, "k8s-team-a", "k8s-team-a", |host| {
        invoke(
            &args(&fake, host, &[]),
            &format!("{host}/team/app:v1"),
            &token,
            &[],
        )
        .response_for(&format!("{host}/team/app:v1"))
    });
}
