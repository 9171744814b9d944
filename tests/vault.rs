//! The vault provider as the kubelet runs it, against a local fake of
//! Vault (tests/support/vault.rs) that verifies the service account token
//! with the test cluster's key, binds roles to service accounts and checks
//! policies, and against Debian's docker-registry with skopeo end to end.

use crate::support;

use serde_json::json;
use support::http_server::Response;
use support::plugin::{self, REGISTRY, Run, request, run};
use support::token::TokenSpec;
use support::vault::{FakeVault, Method, Role};

const AUDIENCE: &str = "vault.cluster.test";
const ROLE_KEY: &str = "wi-credential-provider.io/vault-role";
const SECRET_KEY: &str = "wi-credential-provider.io/vault-secret";
const PASSWORD: &str = "Sup3r-Secret-Registry-Password";

fn image() -> String {
    format!("{REGISTRY}/team/app:v1")
}

fn token() -> String {
    TokenSpec::new("team", "puller", AUDIENCE).mint()
}

fn kubernetes_vault() -> FakeVault {
    FakeVault::kubernetes_team(PASSWORD)
}

fn args(vault: &FakeVault, extra: &[&str]) -> Vec<String> {
    let ours = [
        "--provider",
        "vault",
        "--registry",
        REGISTRY,
        "--audience",
        AUDIENCE,
    ];
    vault.flags(&[&ours[..], extra].concat())
}

fn invoke(vault: &FakeVault, extra: &[&str], token: &str, annotations: &[(&str, &str)]) -> Run {
    let args = args(vault, extra);
    run(
        &args,
        &[],
        request(&image(), Some(token), annotations).as_bytes(),
    )
}

const TEAM_APP: [(&str, &str); 2] = [(ROLE_KEY, "puller"), (SECRET_KEY, "team/app")];

/// No secret on stderr: the service account token, every client token the
/// fake issued, the registry password.
fn assert_quiet(run: &Run, vault: &FakeVault, token: &str) {
    assert!(
        !run.stderr.contains(token),
        "SA token on stderr: {}",
        run.stderr
    );
    assert!(
        !run.stderr.contains(PASSWORD),
        "password on stderr: {}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("hvs."),
        "client token on stderr: {}",
        run.stderr
    );
    for issued in vault.issued_tokens() {
        assert!(
            !run.stderr.contains(&issued),
            "client token on stderr: {}",
            run.stderr
        );
    }
}

#[test]
fn kubernetes_auth_and_kv2_give_the_registry_credentials() {
    let vault = kubernetes_vault();
    let token = token();
    let out = invoke(&vault, &["--log-level", "debug"], &token, &TEAM_APP);
    let response = out.response_for(&image());
    assert_eq!(response["cacheKeyType"], "Registry");
    assert_eq!(response["auth"][REGISTRY]["username"], "team-robot");
    assert_eq!(response["auth"][REGISTRY]["password"], PASSWORD);
    // Token lease 3600 s, no lease on a KV v2 secret: 80 % of an hour,
    // under the 1h cap.
    let cache = response["cacheDuration"].as_str().unwrap();
    assert!(["47m59s", "48m0s"].contains(&cache), "{cache}");
    assert_quiet(&out, &vault, &token);

    // Exactly the three documented calls, with exactly these fields.
    assert!(vault.violations().is_empty(), "{:?}", vault.violations());
    let requests = vault.requests();
    assert_eq!(requests.len(), 3, "{requests:?}");
    let login = &requests[0];
    assert_eq!(login.method, "POST");
    assert_eq!(login.path, "/v1/auth/kubernetes/login");
    assert_eq!(login.json(), json!({"role": "puller", "jwt": token}));
    assert_eq!(login.header("x-vault-namespace"), None);
    assert_eq!(login.header("x-vault-token"), None);
    let read = &requests[1];
    assert_eq!(read.method, "GET");
    assert_eq!(read.path, "/v1/secret/data/registry/team/app");
    assert!(read.body.is_empty());
    assert_eq!(
        read.header("x-vault-token").map(str::to_string),
        vault.issued_tokens().first().cloned()
    );
    assert_eq!(read.header("x-vault-namespace"), None);
    // Then the login token is revoked: nothing is left alive until its TTL.
    let revoke = &requests[2];
    assert_eq!(revoke.method, "POST");
    assert_eq!(revoke.path, "/v1/auth/token/revoke-self");
    assert!(revoke.body.is_empty());
    assert_eq!(revoke.header("x-vault-token"), read.header("x-vault-token"));
    assert!(vault.live_tokens().is_empty(), "{:?}", vault.live_tokens());
}

#[test]
fn the_login_token_is_kept_only_when_the_admin_says_so() {
    let vault = kubernetes_vault();
    let token = token();
    let out = invoke(&vault, &["--vault-keep-login-token"], &token, &TEAM_APP);
    assert_eq!(out.response()["auth"][REGISTRY]["password"], PASSWORD);
    assert_eq!(vault.requests().len(), 2);
    assert_eq!(vault.live_tokens().len(), 1);

    // A failed read still revokes the token it logged in with.
    let line = failure(
        &vault,
        &[],
        &[(ROLE_KEY, "puller"), (SECRET_KEY, "team/missing")],
    );
    assert!(line.contains("no secret"), "{line}");
    assert_eq!(vault.live_tokens().len(), 1, "only the kept one is alive");

    // Vault refusing the revocation is a warning; the pull goes on.
    let vault = kubernetes_vault();
    vault.refuse_revocation();
    let out = invoke(&vault, &[], &token, &TEAM_APP);
    assert_eq!(out.response()["auth"][REGISTRY]["password"], PASSWORD);
    assert!(
        out.stderr
            .contains("Vault refused to revoke the login token")
            && out.stderr.contains("--vault-keep-login-token"),
        "{}",
        out.stderr
    );
    assert_quiet(&out, &vault, &token);
}

#[test]
fn a_path_scoped_registry_keys_the_answer_with_its_path() {
    let vault = kubernetes_vault();
    let token = token();
    let mut scoped = args(&vault, &[]);
    let at = scoped.iter().position(|a| a == REGISTRY).unwrap();
    scoped[at] = format!("{REGISTRY}/team");
    let out = run(
        &scoped,
        &[],
        request(&image(), Some(&token), &TEAM_APP).as_bytes(),
    );
    out.assert_path_scoped(&image(), "registry.example.com/team");
    let sent = vault.requests().len();
    let other = format!("{REGISTRY}/other/app:v1");
    scoped.extend(["--log-format", "json"].map(String::from));
    run(
        &scoped,
        &[],
        request(&other, Some(&token), &TEAM_APP).as_bytes(),
    )
    .refused_registry(REGISTRY);
    assert_eq!(vault.requests().len(), sent);
}

#[test]
fn jwt_auth_kv1_namespace_template_and_default_role() {
    let vault = FakeVault::start(Method::Jwt, "jwt-cluster", Some("platform/team"));
    let mut role = Role::new("team", "puller", &["registry"]);
    role.audience = Some(AUDIENCE.into());
    vault
        .policy("registry", &["kv/registry/team/puller"])
        .role("puller", role)
        .kv1(
            "registry/team/puller",
            json!({"user": "robot$team", "secret": PASSWORD, "ttl": "10m"}),
        );
    let token = token();
    let out = invoke(
        &vault,
        &[
            "--vault-auth-method",
            "jwt",
            "--vault-auth-mount",
            "jwt-cluster",
            "--vault-namespace",
            "platform/team",
            "--vault-role",
            "Puller",
            "--vault-kv-mount",
            "kv",
            "--vault-kv-version",
            "1",
            "--vault-secret-path",
            "registry/{namespace}/{name}",
            "--vault-username-field",
            "user",
            "--vault-password-field",
            "secret",
        ],
        &token,
        &[],
    );
    let response = out.response_for(&image());
    assert_eq!(response["auth"][REGISTRY]["username"], "robot$team");
    assert_eq!(response["auth"][REGISTRY]["password"], PASSWORD);
    // The secret's 10 minute lease ends before the token's hour.
    let cache = response["cacheDuration"].as_str().unwrap();
    assert!(["7m59s", "8m0s"].contains(&cache), "{cache}");
    assert_quiet(&out, &vault, &token);
    assert!(vault.violations().is_empty(), "{:?}", vault.violations());
    let requests = vault.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[2].path, "/v1/auth/token/revoke-self");
    assert_eq!(requests[0].path, "/v1/auth/jwt-cluster/login");
    assert_eq!(requests[0].json(), json!({"role": "Puller", "jwt": token}));
    assert_eq!(requests[1].path, "/v1/kv/registry/team/puller");
    for r in &requests {
        assert_eq!(r.header("x-vault-namespace"), Some("platform/team"));
    }
}

/// Runs one failing invocation and returns its error line, after checking
/// that nothing secret reached stderr.
fn failure(vault: &FakeVault, extra: &[&str], annotations: &[(&str, &str)]) -> String {
    let token = token();
    let mut extra = extra.to_vec();
    extra.extend(["--log-level", "debug"]);
    let out = invoke(vault, &extra, &token, annotations);
    let line = out.failure();
    assert_quiet(&out, vault, &token);
    assert!(
        line.contains("team/puller"),
        "names the service account: {line}"
    );
    line
}

#[test]
fn blank_and_control_character_annotations_never_reach_vault() {
    let vault = kubernetes_vault();
    for (key, value) in [
        (SECRET_KEY, ""),
        (SECRET_KEY, " "),
        (ROLE_KEY, ""),
        (SECRET_KEY, "team/app\r\nX-Vault-Namespace: root"),
        (ROLE_KEY, "puller\u{1b}]0;owned\u{7}"),
    ] {
        let mut annotations = TEAM_APP.to_vec();
        annotations.retain(|(k, _)| *k != key);
        annotations.push((key, value));
        let out = invoke(&vault, &["--log-format", "json"], &token(), &annotations);
        out.refused_for_annotation(key);
        // The text line carries no raw control character either.
        let line = failure(&vault, &[], &annotations);
        assert!(!line.contains('\u{1b}'), "{line:?}");
    }
    assert!(vault.requests().is_empty(), "{:?}", vault.requests());
}

/// As [`failure`], with `--log-format json`: the error line's JSON, after
/// checking that Vault's refusal is recorded with `status` (a fact, not
/// words).
fn refusal(
    vault: &FakeVault,
    extra: &[&str],
    annotations: &[(&str, &str)],
    status: &str,
) -> String {
    let token = token();
    let mut extra = extra.to_vec();
    extra.extend(["--log-format", "json"]);
    let out = invoke(vault, &extra, &token, annotations);
    let line = out.failure_json();
    assert_quiet(&out, vault, &token);
    assert_eq!(line["service_account"], "team/puller", "{line}");
    assert_eq!(line["kind"], "upstream", "{line}");
    assert_eq!(line["facts"]["service"], "Vault", "{line}");
    assert_eq!(line["facts"]["status"], status, "{line}");
    plugin::words(&line)
}

#[test]
fn unknown_role() {
    let vault = kubernetes_vault();
    let line = refusal(
        &vault,
        &[],
        &[(ROLE_KEY, "nope"), (SECRET_KEY, "team/app")],
        "400",
    );
    support::assert_says(
        &line,
        &[
            r#"invalid role name \"nope\""#,
            "vault write auth/kubernetes/role/nope",
        ],
    );

    let jwt = FakeVault::start(Method::Jwt, "jwt", None);
    let line = failure(
        &jwt,
        &["--vault-auth-method", "jwt"],
        &[(ROLE_KEY, "nope"), (SECRET_KEY, "team/app")],
    );
    assert!(line.contains("could not be found"), "{line}");
    assert_eq!(jwt.requests()[0].path, "/v1/auth/jwt/login");
}

#[test]
fn role_not_bound_to_this_service_account() {
    let vault = kubernetes_vault();
    vault.role(
        "other",
        Role::new("team", "someone-else", &["registry-team"]),
    );
    let line = refusal(
        &vault,
        &[],
        &[(ROLE_KEY, "other"), (SECRET_KEY, "team/app")],
        "403",
    );
    support::assert_says(
        &line,
        &[
            "service account name not authorized",
            "bound_service_account_names",
        ],
    );
    vault.role(
        "elsewhere",
        Role::new("other-ns", "puller", &["registry-team"]),
    );
    let line = failure(
        &vault,
        &[],
        &[(ROLE_KEY, "elsewhere"), (SECRET_KEY, "team/app")],
    );
    assert!(line.contains("namespace not authorized"), "{line}");
}

#[test]
fn a_token_the_cluster_did_not_sign_is_refused_by_vault() {
    let vault = kubernetes_vault();
    let forged = TokenSpec::new("team", "puller", AUDIENCE).mint_with_wrong_key();
    let out = invoke(&vault, &["--log-format", "json"], &forged, &TEAM_APP);
    out.refused("upstream", &[("service", "Vault"), ("status", "403")]);
    out.assert_no_secrets(&[&forged]);
}

#[test]
fn jwt_role_without_bound_audiences() {
    let vault = FakeVault::start(Method::Jwt, "jwt", None);
    vault.role("puller", Role::new("team", "puller", &["p"]));
    let line = refusal(&vault, &["--vault-auth-method", "jwt"], &TEAM_APP, "400");
    support::assert_says(
        &line,
        &["no audiences bound to the role", "bound_audiences"],
    );
}

#[test]
fn policy_does_not_grant_the_path() {
    let vault = kubernetes_vault();
    vault.kv2(
        "registry/other/app",
        json!({"username": "u", "password": PASSWORD}),
    );
    let line = refusal(
        &vault,
        &[],
        &[(ROLE_KEY, "puller"), (SECRET_KEY, "other/app")],
        "403",
    );
    support::assert_says(
        &line,
        &[
            "permission denied",
            r#"path "secret/data/registry/other/app""#,
            "puller",
        ],
    );
}

#[test]
fn missing_secret_and_missing_field() {
    let vault = kubernetes_vault();
    let line = refusal(
        &vault,
        &[],
        &[(ROLE_KEY, "puller"), (SECRET_KEY, "team/none")],
        "404",
    );
    assert!(
        line.contains("no secret at secret/data/registry/team/none"),
        "{line}"
    );

    vault.kv2(
        "registry/team/half",
        json!({"login": "u", "password": PASSWORD}),
    );
    let line = failure(
        &vault,
        &[],
        &[(ROLE_KEY, "puller"), (SECRET_KEY, "team/half")],
    );
    support::assert_says(
        &line,
        &[
            r#"no field "username""#,
            "login, password",
            "--vault-username-field",
        ],
    );
}

#[test]
fn deleted_kv2_secret() {
    let vault = kubernetes_vault();
    vault.delete_kv2("registry/team/app");
    let line = refusal(&vault, &[], &TEAM_APP, "404");
    support::assert_says(
        &line,
        &["deleted at 2026-01-02T03:04:05", "vault kv undelete"],
    );
}

#[test]
fn kv_version_mismatch() {
    // A KV v2 mount read as v1 (no data/ segment): Vault answers 404.
    let vault = kubernetes_vault();
    let line = refusal(&vault, &["--vault-kv-version", "1"], &TEAM_APP, "404");
    support::assert_says(
        &line,
        &[
            "no secret at secret/registry/team/app",
            "--vault-kv-version",
        ],
    );
    assert!(vault.violations().is_empty(), "{:?}", vault.violations());
}

#[test]
fn throttling_is_retried_after_retry_after() {
    let vault = kubernetes_vault();
    vault.script([Response::json(
        429,
        json!({"errors": ["request path \"auth/kubernetes/login\": rate limit quota exceeded"]}),
    )
    .with_header("Retry-After", "1")]);
    let token = token();
    let out = invoke(&vault, &[], &token, &TEAM_APP);
    let response = out.response();
    assert_eq!(response["auth"][REGISTRY]["password"], PASSWORD);
    assert_eq!(vault.requests().len(), 4);
    assert_quiet(&out, &vault, &token);
}

#[test]
fn retry_after_beyond_the_deadline_fails_at_once() {
    let vault = kubernetes_vault();
    vault.script([
        Response::json(429, json!({"errors": ["rate limit quota exceeded"]}))
            .with_header("Retry-After", "120"),
    ]);
    let started = std::time::Instant::now();
    let line = refusal(&vault, &[], &TEAM_APP, "429");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    support::assert_says(&line, &["429", "retry after 2m0s"]);
    assert_eq!(vault.requests().len(), 1);
}

#[test]
fn server_errors_and_sealed_vault() {
    let vault = kubernetes_vault();
    let sealed = || Response::json(503, json!({"errors": ["Vault is sealed"]}));
    vault.script([sealed(), sealed(), sealed(), sealed()]);
    let line = refusal(&vault, &[], &TEAM_APP, "503");
    support::assert_says(
        &line,
        &["HTTP 503", "Vault is sealed", "through every retry"],
    );
    assert_eq!(vault.requests().len(), 4);

    // A 500 once, then the real answer.
    let vault = kubernetes_vault();
    vault.script([Response::json(500, json!({"errors": ["internal error"]}))]);
    let out = invoke(&vault, &[], &token(), &TEAM_APP);
    assert_eq!(out.response()["auth"][REGISTRY]["password"], PASSWORD);
}

#[test]
fn malformed_answers() {
    let vault = kubernetes_vault();
    vault.script([Response::text(
        200,
        "<html>Welcome to the load balancer</html>",
    )]);
    let line = refusal(&vault, &[], &TEAM_APP, "200");
    support::assert_says(&line, &["not JSON", "--vault-address"]);
    assert!(!line.contains("Welcome"), "{line}");

    let vault = kubernetes_vault();
    vault.script([Response::json(200, json!({"auth": {"lease_duration": 60}}))]);
    let line = refusal(&vault, &[], &TEAM_APP, "200");
    assert!(line.contains("no auth.client_token"), "{line}");
}

#[test]
fn a_lease_that_is_over_before_it_can_be_cached() {
    let vault = kubernetes_vault();
    let mut role = Role::new("team", "puller", &["registry-team"]);
    role.ttl = 1;
    vault.role("puller", role);
    let token = token();
    let out = invoke(&vault, &[], &token, &TEAM_APP);
    let response = out.response();
    assert_eq!(response["cacheDuration"], "0s");
    assert!(out.stderr.contains("too soon to cache"), "{}", out.stderr);
    assert_quiet(&out, &vault, &token);
}

#[test]
fn vault_errors_that_quote_secrets_are_scrubbed() {
    let vault = kubernetes_vault();
    vault.echo_secrets_in_errors();
    vault.policy("registry-team", &[]);
    let line = refusal(&vault, &[], &TEAM_APP, "403");
    assert!(
        line.contains("permission denied for token <redacted>"),
        "{line}"
    );
}

#[test]
fn hostile_annotations_never_reach_the_network() {
    let vault = kubernetes_vault();
    let token = token();
    let roles = [
        "../../sys/seal",
        "/puller",
        "puller/../x",
        "puller?x=1",
        "puller#x",
        "%2e%2e",
        "puller\n",
        "pul ler",
        "a/b",
        "https://evil.example.com/",
    ];
    let secrets = [
        "../../sys/raw/core",
        "/etc/passwd",
        "team/../../other",
        "team/./app",
        "team//app",
        "team/app?version=1",
        "team/app#frag",
        "%2e%2e/%2e%2e/sys",
        "team/app\n",
        "team/app/",
        "team\\app",
        "@evil.example.com/x",
        "http://evil.example.com/v1/x",
    ];
    for role in roles {
        let out = invoke(
            &vault,
            &["--log-format", "json"],
            &token,
            &[(ROLE_KEY, role), (SECRET_KEY, "team/app")],
        );
        out.refused_for_annotation(ROLE_KEY);
    }
    for secret in secrets {
        let out = invoke(
            &vault,
            &["--log-format", "json"],
            &token,
            &[(ROLE_KEY, "puller"), (SECRET_KEY, secret)],
        );
        out.refused_for_annotation(SECRET_KEY);
    }
    // The compatibility key, held to the same prefix.
    for compat in [
        "secrets-store.deckhouse.io/registry-credentials",
        "secres-store.deckhouse.io/registry-credentials",
    ] {
        for value in [
            "secret/data/other/app",
            "secret/data/registry/../../sys",
            "/secret/data/registry/x",
        ] {
            let out = invoke(
                &vault,
                &["--log-format", "json"],
                &token,
                &[(ROLE_KEY, "puller"), (compat, value)],
            );
            out.refused_for_annotation(compat);
        }
    }
    // An annotated secret without an admin prefix is refused too.
    let args: Vec<String> = [
        "--provider",
        "vault",
        "--registry",
        REGISTRY,
        "--vault-address",
        &vault.url(),
        "--vault-secret-path",
        "registry/{namespace}/{name}",
        "--vault-role",
        "puller",
        "--log-format",
        "json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = run(
        &args,
        &[],
        request(&image(), Some(&token), &[(SECRET_KEY, "team/app")]).as_bytes(),
    );
    let line = out.refused_for_annotation(SECRET_KEY);
    assert!(
        plugin::words(&line).contains("--vault-secret-prefix"),
        "{line}"
    );
    // Not one request reached Vault.
    assert!(vault.requests().is_empty(), "{:?}", vault.requests());

    // A registry not allowed gets nothing, and Vault is not asked.
    let out = run(
        &args,
        &[],
        request("registry.example.com.evil.net/team/app", Some(&token), &[]).as_bytes(),
    );
    out.refused_registry("registry.example.com.evil.net");
    assert!(vault.requests().is_empty());

    // The compatibility key's valid form works and reads under the prefix.
    let out = invoke(
        &vault,
        &[],
        &token,
        &[
            (ROLE_KEY, "puller"),
            (
                "secrets-store.deckhouse.io/registry-credentials",
                "secret/data/registry/team/app",
            ),
        ],
    );
    assert_eq!(out.response()["auth"][REGISTRY]["password"], PASSWORD);
    assert_eq!(
        vault.requests()[1].path,
        "/v1/secret/data/registry/team/app"
    );
}

/// Vault behind TLS with a private CA: trusted only with --ca-file; without
/// it the handshake fails and the token is never sent.
#[test]
fn https_vault_with_a_private_ca() {
    use support::net::{CA_PEM, TlsFront, closed_port};

    let vault = kubernetes_vault();
    let front = TlsFront::start(vault.addr());
    let token = token();
    let args_for = |address: &str, ca: bool| {
        let mut args = vec![
            "--provider".to_string(),
            "vault".into(),
            "--registry".into(),
            REGISTRY.into(),
            "--vault-address".into(),
            address.to_string(),
            "--vault-secret-prefix".into(),
            "registry".into(),
            "--log-format".into(),
            "json".into(),
        ];
        if ca {
            args.extend(["--ca-file".to_string(), CA_PEM.to_string()]);
        }
        args
    };
    let req = request(&image(), Some(&token), &TEAM_APP);
    let untrusted = args_for(&front.url(), false);
    let out = run(&untrusted, &[], req.as_bytes());
    let line = out.refused("network", &[("service", "Vault")]);
    support::assert_says(&plugin::words(&line), &["not trusted", "--ca-file"]);
    assert!(
        vault.requests().is_empty(),
        "the token never left over an untrusted connection"
    );

    let trusted = args_for(&front.url(), true);
    let out = run(&trusted, &[], req.as_bytes());
    assert_eq!(out.response()["auth"][REGISTRY]["password"], PASSWORD);
    assert_eq!(vault.requests().len(), 3);
    assert_quiet(&out, &vault, &token);

    // Through an HTTPS proxy: every tunnel goes to the configured Vault.
    let proxy = support::net::Proxy::start();
    let out = run(&trusted, &[("HTTPS_PROXY", &proxy.url())], req.as_bytes());
    assert_eq!(out.response()["auth"][REGISTRY]["password"], PASSWORD);
    let targets = proxy.targets();
    assert!(!targets.is_empty());
    for target in targets {
        assert_eq!(
            target,
            support::net::Target::Tunnel(front.addr().to_string())
        );
    }
    assert_eq!(vault.requests().len(), 6);

    // Nothing listening: a transport error naming the login call.
    let refused = args_for(&format!("http://127.0.0.1:{}", closed_port()), false);
    let out = run(&refused, &[], req.as_bytes());
    let line = out.refused("network", &[("service", "Vault")]);
    assert!(
        plugin::words(&line).contains("Vault kubernetes login"),
        "{line}"
    );
}

#[test]
fn configuration_errors_name_the_flag() {
    let token = token();
    let req = request(&image(), Some(&token), &TEAM_APP);
    for (extra, flag) in [
        (vec![], "--vault-address"),
        (
            vec!["--vault-address", "vault.example.com:8200"],
            "--vault-address",
        ),
        (
            vec!["--vault-address", "https://v.example.com"],
            "--vault-secret-path",
        ),
        (
            vec![
                "--vault-address",
                "https://v.example.com",
                "--vault-secret-prefix",
                "a/../b",
            ],
            "--vault-secret-prefix",
        ),
        (
            vec![
                "--vault-address",
                "https://v.example.com",
                "--vault-secret-path",
                "x/{pod}",
            ],
            "--vault-secret-path",
        ),
    ] {
        let mut args = vec!["--provider", "vault", "--registry", REGISTRY];
        args.extend(extra);
        args.extend(["--log-format", "json"]);
        let out = run(&args, &[], req.as_bytes());
        out.refused("config", &[("flag", flag)]);
    }
}

#[test]
fn the_cache_key_covers_the_secret_path() {
    let vault = kubernetes_vault();
    vault.kv2(
        "registry/team/other",
        json!({"username": "other-robot", "password": PASSWORD}),
    );
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let cache = cache.to_str().unwrap();
    let token = token();
    let first = invoke(&vault, &["--cache-dir", cache], &token, &TEAM_APP);
    assert_eq!(first.response()["auth"][REGISTRY]["username"], "team-robot");
    let again = invoke(&vault, &["--cache-dir", cache], &token, &TEAM_APP);
    assert_eq!(again.response()["auth"][REGISTRY]["username"], "team-robot");
    assert_eq!(vault.requests().len(), 3, "the second run is a cache hit");
    let other = invoke(
        &vault,
        &["--cache-dir", cache],
        &token,
        &[(ROLE_KEY, "puller"), (SECRET_KEY, "team/other")],
    );
    assert_eq!(
        other.response()["auth"][REGISTRY]["username"],
        "other-robot"
    );
    assert_eq!(vault.requests().len(), 6);
    assert!(
        !std::fs::read_dir(dir.path().join("cache"))
            .unwrap()
            .flatten()
            .any(|e| std::fs::read(e.path())
                .is_ok_and(|b| String::from_utf8_lossy(&b).contains("hvs.")))
    );
}

#[test]
fn a_credential_larger_than_a_cache_entry_is_not_cached() {
    let vault = kubernetes_vault();
    let huge = "p".repeat(70 * 1024);
    vault.kv2(
        "registry/team/app",
        json!({"username": "team-robot", "password": huge}),
    );
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let cache = cache.to_str().unwrap();
    let token = token();
    let mut per_pull = Vec::new();
    for _ in 0..3 {
        let before = vault.requests().len();
        let out = invoke(&vault, &["--cache-dir", cache], &token, &TEAM_APP);
        assert_eq!(out.response()["auth"][REGISTRY]["password"], huge.as_str());
        assert!(
            out.stderr
                .contains("not caching the credential for registry.example.com")
                && out.stderr.contains("more than the 65536 a read accepts"),
            "{}",
            out.stderr
        );
        assert!(
            !out.stderr.contains("ignoring cache entry"),
            "{}",
            out.stderr
        );
        per_pull.push(vault.requests().len() - before);
    }
    // Each pull exchanged (nothing to hit), and no entry was left behind.
    assert!(
        per_pull.iter().all(|n| *n == per_pull[0] && *n >= 2),
        "{per_pull:?}"
    );
    let entries: Vec<_> = std::fs::read_dir(cache)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .collect();
    assert!(entries.is_empty(), "{entries:?}");
}

/// End to end: Debian's docker-registry with htpasswd holding the
/// credentials stored in the fake Vault, and skopeo pulling with exactly
/// what the plugin returned.
#[test]
fn skopeo_pulls_with_the_credentials_from_vault() {
    use support::registry::Registry;

    const USER: &str = "team-robot";
    let registry = Registry::start_with_htpasswd(USER, PASSWORD);
    registry.push_test_image("team/app", "v1");
    let host = registry.host().to_string();

    let vault = kubernetes_vault();
    let token = token();
    let args: Vec<String> = [
        "--provider",
        "vault",
        "--registry",
        &host,
        "--audience",
        AUDIENCE,
        "--vault-address",
        &vault.url(),
        "--vault-secret-prefix",
        "registry",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let image = format!("{host}/team/app:v1");
    let out = run(
        &args,
        &[],
        request(&image, Some(&token), &TEAM_APP).as_bytes(),
    );
    let response = out.response_for(&image);
    let (username, password) = support::plugin::auth_entry(&response, host.as_str());
    registry
        .pull("team/app", "v1", username, password)
        .expect("skopeo pulls with the credentials the plugin read from Vault");
    assert!(registry.pull("team/app", "v1", username, "wrong").is_err());
    assert_quiet(&out, &vault, &token);
}

/// The same with the client a node really uses: containerd, fed exactly the
/// username and password the plugin printed, logging in to an htpasswd
/// registry with Basic credentials.
#[test]
fn containerd_pulls_with_the_credentials_from_vault() {
    use support::containerd::Containerd;
    use support::registry::Registry;

    const USER: &str = "team-robot";
    let registry = Registry::start_with_htpasswd(USER, PASSWORD);
    let digest = registry.push_test_image("team/app", "v1");
    let host = registry.host().to_string();

    let vault = kubernetes_vault();
    let token = token();
    let url = vault.url();
    let args = [
        "--provider",
        "vault",
        "--registry",
        &host,
        "--vault-address",
        &url,
        "--vault-secret-prefix",
        "registry",
    ];
    let image = format!("{host}/team/app:v1");
    let out = run(
        &args,
        &[],
        request(&image, Some(&token), &TEAM_APP).as_bytes(),
    );
    let response = out.response_for(&image);
    let (username, password) = support::plugin::auth_entry(&response, host.as_str());
    let containerd = Containerd::start();
    containerd.assert_pulls_only_with(&image, username, (password, "not-the-password"), &digest);
    assert_quiet(&out, &vault, &token);
}

/// Round-4 item 10: when Vault refuses the token for the read (403) and
/// then for the revoke too, it no longer takes the token at all (expired,
/// revoked): no warning that the role's policies must grant revoke-self,
/// which would send the admin after the wrong fix.
#[test]
fn a_token_vault_refused_for_the_read_gets_no_revoke_self_advice() {
    let vault = kubernetes_vault();
    vault.refuse_revocation();
    let token = token();
    let out = invoke(
        &vault,
        &["--log-level", "debug", "--log-format", "json"],
        &token,
        &[(ROLE_KEY, "puller"), (SECRET_KEY, "other-team/app")],
    );
    out.refused("upstream", &[("service", "Vault"), ("status", "403")]);
    assert!(
        !out.stderr
            .contains("revoke-self, or pass --vault-keep-login-token"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("it no longer takes the token"),
        "{}",
        out.stderr
    );
    assert_quiet(&out, &vault, &token);
}
