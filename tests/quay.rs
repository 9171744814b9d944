//! The binary as the kubelet runs it with `--provider quay`, against a
//! faithful fake of Quay's robot account federation.

use crate::support;

use support::http_server::Response;
use support::plugin;
use support::quay;
use support::token::TokenSpec;
use support::token_service::{self as ts, FakeService, Trust, invoke};

const AUDIENCE: &str = "quay.example.com";
const REGISTRY: &str = "quay.example.com";
const IMAGE: &str = "quay.example.com/acme/app:v1";
const ROBOT: &str = "acme+puller";
const OURS: &str = "wi-credential-provider.io/quay-robot";
const THEIRS: &str = "quay.io/federated-robot-account";

fn fake() -> FakeService {
    quay::start(Trust::service_account("team", "app", AUDIENCE), ROBOT)
}

fn args(fake: &FakeService, registry: &str) -> Vec<String> {
    [
        "--provider",
        "quay",
        "--registry",
        registry,
        "--audience",
        AUDIENCE,
        "--quay-url",
        &fake.url(),
        "--quay-organization",
        "acme,acme-labs",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn token() -> String {
    TokenSpec::new("team", "app", AUDIENCE).mint()
}

#[test]
fn exchanges_for_the_robots_token() {
    let fake = fake();
    let token = token();
    for key in [OURS, THEIRS] {
        let out = invoke(&args(&fake, REGISTRY), IMAGE, &token, &[(key, ROBOT)]);
        ts::assert_exchanged(&out, &fake, IMAGE, REGISTRY, ROBOT, &token);
    }
    // Ours wins over theirs.
    let out = invoke(
        &args(&fake, REGISTRY),
        IMAGE,
        &token,
        &[(OURS, ROBOT), (THEIRS, "acme+other")],
    );
    assert_eq!(out.response_for(IMAGE)["auth"][REGISTRY]["username"], ROBOT);
}

#[test]
fn a_path_scoped_registry_keys_the_answer_with_its_path() {
    let fake = fake();
    let token = token();
    let args = args(&fake, "quay.example.com/acme");
    let out = invoke(&args, IMAGE, &token, &[(OURS, ROBOT)]);
    out.assert_path_scoped(IMAGE, "quay.example.com/acme");
    // Another path of the same host is not the admin's: nothing is sent.
    let sent = fake.request_count();
    ts::invoke_json(
        &args,
        "quay.example.com/other/app:v1",
        &token,
        &[(OURS, ROBOT)],
    )
    .refused_registry(REGISTRY);
    assert_eq!(fake.request_count(), sent);
}

#[test]
fn no_token_on_stderr_at_info_or_debug() {
    let fake = fake();
    let args = args(&fake, REGISTRY);
    ts::assert_quiet_at_every_level(&args, IMAGE, &token(), &[(OURS, ROBOT)]);
    assert_eq!(fake.request_count(), 2);
}

#[test]
fn refusals_name_quay_the_status_and_the_fix() {
    let fake = fake();
    let token = token();
    let json = [
        args(&fake, REGISTRY),
        vec!["--log-format".into(), "json".into()],
    ]
    .concat();
    let run = || invoke(&json, IMAGE, &token, &[(OURS, ROBOT)]);
    ts::assert_failures(
        &fake,
        run,
        vec![
            (
                vec![quay::error(401, "Invalid robot")],
                "401",
                vec![
                    "Quay refused the token exchange",
                    "\"Invalid robot\"",
                    "subject system:serviceaccount:team:app",
                ],
            ),
            (
                vec![quay::error(403, "Robot federation is not enabled")],
                "403",
                vec!["Robot federation is not enabled"],
            ),
            (
                vec![Response::text(429, "Too Many Requests").with_header("Retry-After", "120")],
                "429",
                vec!["asking to retry after 2m0s"],
            ),
            (
                vec![Response::text(500, "<html>Internal Server Error</html>"); 4],
                "500",
                vec![
                    "Quay failed the token exchange",
                    "throttling or unavailable",
                ],
            ),
            (
                vec![Response::json(200, serde_json::json!({"robot": ROBOT}))],
                "200",
                vec!["with no token", "--quay-url"],
            ),
            (
                vec![Response::text(200, "{\"token\":")],
                "200",
                vec!["with a body that is not a JSON token response"],
            ),
        ],
        &[&token],
    );
    fake.script([Response::text(429, "slow down").with_header("Retry-After", "1")]);
    let before = fake.request_count();
    invoke(&args(&fake, REGISTRY), IMAGE, &token, &[(OURS, ROBOT)]).response_for(IMAGE);
    assert_eq!(fake.request_count(), before + 2);
    // The fake's own refusals: a robot without this federation, another
    // service account.
    let refused = [("service", "Quay"), ("status", "401")];
    let line = ts::invoke_json(
        &args(&fake, REGISTRY),
        IMAGE,
        &token,
        &[(OURS, "acme+other")],
    )
    .refused("upstream", &refused);
    assert!(plugin::words(&line).contains("\"Invalid robot\""), "{line}");
    let other = TokenSpec::new("team", "intruder", AUDIENCE).mint();
    let line = ts::invoke_json(&args(&fake, REGISTRY), IMAGE, &other, &[(OURS, ROBOT)])
        .refused("upstream", &refused);
    assert!(
        plugin::words(&line).contains("Invalid federated token: subject"),
        "{line}"
    );
}

#[test]
fn an_expired_robot_token_is_an_error() {
    let fake = fake();
    let token = token();
    let mut json = args(&fake, REGISTRY);
    json.extend(["--log-format", "json"].map(String::from));
    ts::assert_expired_refused(&fake, "Quay", &token, || {
        invoke(&json, IMAGE, &token, &[(OURS, ROBOT)])
    });
}

#[test]
fn annotations_never_move_the_token() {
    let fake = fake();
    let token = token();
    for key in [OURS, THEIRS] {
        ts::assert_hostile_refused(&fake, key, |value| {
            ts::invoke_json(
                &args(&fake, REGISTRY),
                IMAGE,
                &token,
                &[(key, &format!("acme+{value}"))],
            )
        });
        ts::assert_hostile_refused(&fake, key, |value| {
            ts::invoke_json(&args(&fake, REGISTRY), IMAGE, &token, &[(key, value)])
        });
    }
    // A robot of an organisation the admin did not allow.
    let line = ts::invoke_json(
        &args(&fake, REGISTRY),
        IMAGE,
        &token,
        &[(OURS, "evil+puller")],
    )
    .refused_for_annotation(OURS);
    assert!(
        plugin::words(&line).contains("organisation evil, which is not allowed"),
        "{line}"
    );
    // No robot at all: the annotation to set is ours.
    ts::invoke_json(&args(&fake, REGISTRY), IMAGE, &token, &[]).refused_for_annotation(OURS);
    // Another registry.
    ts::invoke_json(
        &args(&fake, REGISTRY),
        "quay.io/acme/app",
        &token,
        &[(OURS, ROBOT)],
    )
    .refused_registry("quay.io");
    assert_eq!(fake.request_count(), 0);
}

#[test]
fn missing_settings_fail_with_the_flag_to_set() {
    let stdin = support::plugin::request(IMAGE, Some(&token()), &[(OURS, ROBOT)]);
    support::plugin::assert_flag_refusals(
        &["--provider", "quay", "--registry", REGISTRY],
        stdin.as_bytes(),
        &[
            (&[], "--quay-organization", "is not set"),
            (
                &["--quay-organization", "Acme"],
                "--quay-organization",
                "not a Quay organisation name",
            ),
            (
                &["--quay-organization", "acme", "--quay-url", "quay.io"],
                "--quay-url",
                "not an http(s) URL",
            ),
        ],
    );
}

#[test]
fn skopeo_and_containerd_pull_with_the_robot_credentials() {
    let fake = fake();
    let token = token();
    ts::clients_pull(&fake, ROBOT, ROBOT, |host| {
        let image = format!("{host}/team/app:v1");
        invoke(&args(&fake, host), &image, &token, &[(OURS, ROBOT)]).response_for(&image)
    });
}
