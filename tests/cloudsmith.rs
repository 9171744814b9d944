//! The binary as the kubelet runs it with `--provider cloudsmith`, against
//! a faithful fake of Cloudsmith's OpenID Connect endpoint.

use crate::support;

use support::cloudsmith;
use support::http_server::Response;
use support::token::TokenSpec;
use support::token_service::{self as ts, FakeService, Trust, invoke};

const AUDIENCE: &str = "https://api.cloudsmith.io";
const REGISTRY: &str = "docker.cloudsmith.io";
const IMAGE: &str = "docker.cloudsmith.io/acme/repo/app:v1";
const ORG: &str = "acme";
const SERVICE: &str = "puller-x1";
const OURS: &str = "wi-credential-provider.io/cloudsmith-service";
const THEIRS: &str = "cloudsmith.io/service-slug";

fn fake() -> FakeService {
    cloudsmith::start(
        Trust::service_account("team", "app", AUDIENCE),
        ORG,
        SERVICE,
    )
}

fn args(fake: &FakeService, registry: &str, org: &str) -> Vec<String> {
    [
        "--provider",
        "cloudsmith",
        "--registry",
        registry,
        "--audience",
        AUDIENCE,
        "--cloudsmith-url",
        &fake.url(),
        "--cloudsmith-org",
        org,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn token() -> String {
    TokenSpec::new("team", "app", AUDIENCE).mint()
}

#[test]
fn exchanges_for_a_service_account_token() {
    let fake = fake();
    let token = token();
    for key in [OURS, THEIRS] {
        let out = invoke(
            &args(&fake, REGISTRY, ORG),
            IMAGE,
            &token,
            &[(key, SERVICE)],
        );
        ts::assert_exchanged(&out, &fake, IMAGE, REGISTRY, "token", &token);
    }
    // A two-hour token is capped by --max-cache-duration (1h by default).
    fake.set_lifetime(7200);
    let out = invoke(
        &args(&fake, REGISTRY, ORG),
        IMAGE,
        &token,
        &[(OURS, SERVICE)],
    );
    assert_eq!(out.response_for(IMAGE)["cacheDuration"], "1h0m0s");
}

#[test]
fn a_path_scoped_registry_keys_the_answer_with_its_path() {
    let fake = fake();
    let token = token();
    let args = args(&fake, "docker.cloudsmith.io/acme/repo", ORG);
    let out = invoke(&args, IMAGE, &token, &[(OURS, SERVICE)]);
    out.assert_path_scoped(IMAGE, "docker.cloudsmith.io/acme/repo");
    let sent = fake.request_count();
    ts::invoke_json(
        &args,
        "docker.cloudsmith.io/other/repo/app:v1",
        &token,
        &[(OURS, SERVICE)],
    )
    .refused_registry(REGISTRY);
    assert_eq!(fake.request_count(), sent);
}

#[test]
fn no_token_on_stderr_at_info_or_debug() {
    let fake = fake();
    let args = args(&fake, REGISTRY, ORG);
    ts::assert_quiet_at_every_level(&args, IMAGE, &token(), &[(OURS, SERVICE)]);
    assert_eq!(fake.request_count(), 2);
}

#[test]
fn refusals_name_cloudsmith_the_status_and_the_fix() {
    let fake = fake();
    let token = token();
    let json = [
        args(&fake, REGISTRY, ORG),
        vec!["--log-format".into(), "json".into()],
    ]
    .concat();
    let run = || invoke(&json, IMAGE, &token, &[(OURS, SERVICE)]);
    ts::assert_failures(
        &fake,
        run,
        vec![
            (
                vec![cloudsmith::error(
                    401,
                    "OIDC token cannot be authenticated.",
                )],
                "401",
                vec![
                    "Cloudsmith refused the token exchange",
                    "\"OIDC token cannot be authenticated.\"",
                    "organisation acme has an OpenID Connect provider with URL https://oidc.cluster.test",
                ],
            ),
            (
                vec![cloudsmith::error(
                    403,
                    "You do not have permission to perform this action.",
                )],
                "403",
                vec!["service account puller-x1"],
            ),
            (
                vec![
                    cloudsmith::error(
                        429,
                        "Request was throttled. Expected available in 120 seconds.",
                    )
                    .with_header("Retry-After", "120"),
                ],
                "429",
                vec!["asking to retry after 2m0s"],
            ),
            (
                vec![Response::text(500, "Server Error (500)"); 4],
                "500",
                vec![
                    "Cloudsmith failed the token exchange",
                    "throttling or unavailable",
                ],
            ),
            (
                vec![Response::text(201, "{\"token\"")],
                "201",
                vec![
                    "with a body that is not a JSON token response",
                    "--cloudsmith-url",
                ],
            ),
        ],
        &[&token],
    );
    fake.script([cloudsmith::error(429, "throttled").with_header("Retry-After", "1")]);
    let before = fake.request_count();
    invoke(
        &args(&fake, REGISTRY, ORG),
        IMAGE,
        &token,
        &[(OURS, SERVICE)],
    )
    .response_for(IMAGE);
    assert_eq!(fake.request_count(), before + 2);
    // The fake's own refusals: another service, another service account,
    // another organisation.
    let refused = [("service", "Cloudsmith"), ("status", "401")];
    ts::invoke_json(
        &args(&fake, REGISTRY, ORG),
        IMAGE,
        &token,
        &[(OURS, "other")],
    )
    .refused("upstream", &refused);
    let other = TokenSpec::new("team", "intruder", AUDIENCE).mint();
    ts::invoke_json(
        &args(&fake, REGISTRY, ORG),
        IMAGE,
        &other,
        &[(OURS, SERVICE)],
    )
    .refused("upstream", &refused);
}

#[test]
fn an_expired_cloudsmith_token_is_an_error() {
    let fake = fake();
    let token = token();
    let mut json = args(&fake, REGISTRY, ORG);
    json.extend(["--log-format", "json"].map(String::from));
    ts::assert_expired_refused(&fake, "Cloudsmith", &token, || {
        invoke(&json, IMAGE, &token, &[(OURS, SERVICE)])
    });
}

#[test]
fn annotations_never_move_the_token() {
    let fake = fake();
    let token = token();
    for key in [OURS, THEIRS] {
        ts::assert_hostile_refused(&fake, key, |value| {
            ts::invoke_json(&args(&fake, REGISTRY, ORG), IMAGE, &token, &[(key, value)])
        });
    }
    // Cloudsmith's own plugin reads these to change the organisation and
    // the host; here they are ignored even when the kubelet passes them.
    let out = invoke(
        &args(&fake, REGISTRY, ORG),
        IMAGE,
        &token,
        &[
            (OURS, SERVICE),
            ("cloudsmith.io/org-slug", "evil"),
            ("cloudsmith.io/api-host", "evil.example"),
        ],
    );
    out.response_for(IMAGE);
    assert_eq!(fake.request_count(), 1);
    ts::invoke_json(&args(&fake, REGISTRY, ORG), IMAGE, &token, &[]).refused_for_annotation(OURS);
    ts::invoke_json(
        &args(&fake, REGISTRY, ORG),
        "evil.example/acme/app",
        &token,
        &[(OURS, SERVICE)],
    )
    .refused_registry("evil.example");
    assert_eq!(fake.request_count(), 1);
}

#[test]
fn missing_settings_fail_with_the_flag_to_set() {
    let stdin = support::plugin::request(IMAGE, Some(&token()), &[(OURS, SERVICE)]);
    support::plugin::assert_flag_refusals(
        &["--provider", "cloudsmith", "--registry", REGISTRY],
        stdin.as_bytes(),
        &[
            (&[], "--cloudsmith-org", "is not set"),
            (
                &["--cloudsmith-org", "../x"],
                "--cloudsmith-org",
                "not a Cloudsmith organisation slug",
            ),
            (
                &["--cloudsmith-org", "acme", "--cloudsmith-url", "http://u@h"],
                "--cloudsmith-url",
                "holds user information",
            ),
        ],
    );
}

#[test]
fn skopeo_and_containerd_pull_with_the_cloudsmith_credentials() {
    let fake = fake();
    let token = token();
    ts::clients_pull(&fake, "token", SERVICE, |host| {
        let image = format!("{host}/team/app:v1");
        invoke(&args(&fake, host, ORG), &image, &token, &[(OURS, SERVICE)]).response_for(&image)
    });
}
