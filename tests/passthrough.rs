//! The binary as the kubelet runs it, in passthrough mode.

use crate::support;

use support::plugin::{request, run};
use support::token::TokenSpec;

/// Passthrough for `registry` with the token's `audience`, then `extra`.
fn passthrough<'a>(registry: &'a str, audience: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--provider",
        "passthrough",
        "--registry",
        registry,
        "--audience",
        audience,
    ];
    args.extend_from_slice(extra);
    args
}

#[test]
fn passthrough_returns_the_token_for_an_allowed_registry() {
    let token = TokenSpec::new("team", "puller", "harbor.test").mint();
    let run = run(
        &passthrough("harbor.test", "harbor.test", &[]),
        &[],
        request("harbor.test/team/app", Some(&token), &[]).as_bytes(),
    );
    let response = run.response();
    assert_eq!(
        response["apiVersion"],
        "credentialprovider.kubelet.k8s.io/v1"
    );
    assert_eq!(response["cacheKeyType"], "Registry");
    assert_eq!(
        response["auth"]["harbor.test"]["username"],
        "serviceaccount"
    );
    assert_eq!(response["auth"]["harbor.test"]["password"], token.as_str());
    assert!(!run.stderr.contains(&token));
}

/// A real OCI client end to end: Debian's docker-registry behind a token
/// service that trusts the cluster's issuer (it accepts a password only if
/// it is a service account JWT signed by the test cluster's key, for the
/// registry's audience), an image pushed to it, and skopeo pulling that image
/// with exactly the username and password the plugin returned.
#[test]
fn skopeo_pulls_with_the_passthrough_credentials() {
    use support::registry::Registry;

    const AUDIENCE: &str = "registry.cluster.test";
    let registry = Registry::start_with_token_auth(|_username, password| {
        support::token::verify(password, AUDIENCE).is_ok()
    });
    registry.push_test_image("team/app", "v1");
    let host = registry.host().to_string();

    let token = TokenSpec::new("team", "puller", AUDIENCE).mint();
    let out = run(
        &passthrough(&host, AUDIENCE, &[]),
        &[],
        request(&format!("{host}/team/app"), Some(&token), &[]).as_bytes(),
    );
    let response = out.response();
    let (username, password) = support::plugin::auth_entry(&response, host.as_str());
    registry
        .pull("team/app", "v1", username, password)
        .expect("skopeo pulls with the plugin's credentials");
    let accepted = registry.token_requests_accepted();

    // The same pull with a token the cluster did not sign must fail.
    let forged = TokenSpec::new("team", "puller", AUDIENCE).mint_with_wrong_key();
    let out = run(
        &passthrough(&host, AUDIENCE, &[]),
        &[],
        request(&format!("{host}/team/app"), Some(&forged), &[]).as_bytes(),
    );
    let response = out.response();
    let (username, password) = support::plugin::auth_entry(&response, &host);
    let err = registry
        .pull("team/app", "v1", username, password)
        .expect_err("a token signed by another key must not pull");
    assert!(err.contains("unauthorized"), "{err}");
    // And a valid token for another audience too.
    let other = TokenSpec::new("team", "puller", "someone-else").mint();
    let err = registry
        .pull("team/app", "v1", "serviceaccount", &other)
        .expect_err("wrong audience must not pull");
    assert!(err.contains("unauthorized"), "{err}");
    assert_eq!(
        registry.token_requests_accepted(),
        accepted,
        "no refused credential was accepted"
    );
}

/// A path-scoped allowlist: the kubelet must not reuse the token for other
/// paths of the host, so the key carries the allowed path and the kubelet
/// caches per image.
#[test]
fn a_path_scoped_registry_gets_a_path_scoped_key() {
    let token = TokenSpec::new("team", "puller", "harbor.example.com").mint();
    let pull = |registries: &[&str], image: &str| {
        let mut args = vec!["--provider", "passthrough", "--log-format", "json"];
        for r in registries {
            args.extend(["--registry", r]);
        }
        run(&args, &[], request(image, Some(&token), &[]).as_bytes())
    };

    let image = "harbor.example.com/team-a/app:v1";
    let response = pull(&["harbor.example.com/team-a"], image).response_for(image);
    assert_eq!(response["cacheKeyType"], "Image", "{response}");
    let keys: Vec<&String> = response["auth"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["harbor.example.com/team-a"], "{response}");
    // What the kubelet then does with the key: a literal path prefix.
    let key = "harbor.example.com/team-a";
    assert!(!wicp_kubelet::config::matching::matches_auth_key(
        key,
        "harbor.example.com/team-b/app"
    ));
    assert!(wicp_kubelet::config::matching::matches_auth_key(
        key,
        "harbor.example.com/team-ab/app"
    ));

    // The narrowest allowing pattern wins; a trailing slash keeps team-ab out.
    let response = pull(
        &["harbor.example.com/team", "harbor.example.com/team-a/"],
        image,
    )
    .response_for(image);
    let keys: Vec<&String> = response["auth"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["harbor.example.com/team-a/"], "{response}");

    // A host-wide pattern keeps the host-wide key.
    let response =
        pull(&["harbor.example.com", "harbor.example.com/team-a"], image).response_for(image);
    assert_eq!(response["cacheKeyType"], "Registry", "{response}");
    let keys: Vec<&String> = response["auth"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["harbor.example.com"], "{response}");

    // team-b is refused outright.
    pull(
        &["harbor.example.com/team-a"],
        "harbor.example.com/team-b/app",
    )
    .refused_registry("harbor.example.com");
}

/// The same end to end with the client a node really uses: containerd, fed
/// exactly the username and password the plugin printed. containerd logs in
/// with an OAuth2 POST, which this token service grants the way
/// distribution's OAuth2 token spec (Docker Hub) and zot do, so the test
/// also checks that the POST, not the GET fallback, carried the login.
#[test]
fn containerd_pulls_with_the_passthrough_credentials() {
    use support::containerd::Containerd;
    use support::registry::{Registry, TokenPost};

    const AUDIENCE: &str = "registry.cluster.test";
    let registry = Registry::start_with_token_service(TokenPost::OAuth2, |_username, password| {
        support::token::verify(password, AUDIENCE).is_ok()
    });
    let digest = registry.push_test_image("team/app", "v1");
    let host = registry.host().to_string();
    let image = format!("{host}/team/app:v1");
    let args = passthrough(&host, AUDIENCE, &[]);
    let credentials = |token: &str| {
        let response = run(
            &args,
            &[],
            request(&format!("{host}/team/app"), Some(token), &[]).as_bytes(),
        )
        .response();
        let auth = &response["auth"][host.as_str()];
        (
            auth["username"].as_str().unwrap().to_string(),
            auth["password"].as_str().unwrap().to_string(),
        )
    };
    let containerd = Containerd::start();
    let after_push = registry.token_calls().len();

    // A token the cluster did not sign: containerd must not pull with it.
    // Tried first, so nothing is in containerd's store yet.
    let forged = TokenSpec::new("team", "puller", AUDIENCE).mint_with_wrong_key();
    let (username, password) = credentials(&forged);
    let err = containerd
        .pull(&image, &username, &password)
        .expect_err("a token signed by another key must not pull");
    assert!(err.contains("401 Unauthorized"), "{err}");

    let token = TokenSpec::new("team", "puller", AUDIENCE).mint();
    let (username, password) = credentials(&token);
    let before = registry.token_calls().len();
    let pulled = containerd
        .pull(&image, &username, &password)
        .unwrap_or_else(|e| panic!("containerd refused the plugin's credentials:\n{e}"));
    assert_eq!(pulled, digest);
    let calls = registry.token_calls();
    assert!(
        calls[after_push..before].iter().all(|(_, s)| *s == 401),
        "{calls:?}"
    );
    // One login or more (containerd may ask again for the blobs), each by POST.
    let logins = &calls[before..];
    assert!(
        !logins.is_empty() && logins.iter().all(|(m, s)| m == "POST" && *s == 200),
        "containerd logged in with OAuth2 POSTs only: {calls:?}"
    );
}

/// Zot (v2.1.19+) set up as docs/providers/passthrough.md shows: the bearer
/// realm is Zot's `/zot/auth/token`, which verifies the service account
/// token against the cluster's issuer for its configured audiences. A fake
/// of that endpoint (tests/support/zot.rs, from Zot's source) sits in front
/// of Debian's docker-registry, and skopeo pulls with exactly the
/// credentials the plugin returned; tokens Zot would refuse do not pull.
#[test]
fn skopeo_pulls_through_zots_token_endpoint_with_the_passthrough_credentials() {
    use support::registry::Registry;
    use support::zot::FakeZot;

    const AUDIENCE: &str = "zot.cluster.test";
    let zot = FakeZot::start(
        support::token::ISSUER,
        &[AUDIENCE, "https://zot.cluster.test"],
        ("zot-admin", "admin-password"),
    );
    let registry = Registry::start_with_token_realm(&zot.realm(), "zot-admin", "admin-password");
    let digest = registry.push_test_image("team/app", "v1");
    let host = registry.host().to_string();
    let args = passthrough(&host, AUDIENCE, &["--passthrough-username", "zot"]);

    let token = TokenSpec::new("team", "puller", AUDIENCE).mint();
    let out = run(
        &args,
        &[],
        request(&format!("{host}/team/app"), Some(&token), &[]).as_bytes(),
    );
    let response = out.response();
    let auth = &response["auth"][host.as_str()];
    assert_eq!(auth["username"], "zot");
    assert_eq!(auth["password"], token.as_str());
    registry
        .pull("team/app", "v1", "zot", auth["password"].as_str().unwrap())
        .expect("skopeo pulls through Zot's token endpoint");
    let accepted = zot.seen().accepted;
    assert!(!accepted.is_empty());
    assert!(
        accepted
            .iter()
            .all(|s| s == "system:serviceaccount:team:puller"),
        "{accepted:?}"
    );

    // containerd, as on a node: its OAuth2 POST carries the token as the
    // form's `password`, which Zot reads.
    let containerd = support::containerd::Containerd::start();
    let image = format!("{host}/team/app:v1");
    let pulled = containerd
        .pull(&image, "zot", auth["password"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("containerd refused the plugin's credentials:\n{e}"));
    assert_eq!(pulled, digest);
    let logins = zot.seen().logins;
    assert!(
        logins.iter().any(|(m, s)| m == "POST" && *s == "form"),
        "containerd logged in by POST with the form's password: {logins:?}"
    );
    let accepted = zot.seen().accepted;

    // Signed by another key: owned by the provider (issuer and audience
    // match), then refused by verification.
    let forged = TokenSpec::new("team", "puller", AUDIENCE).mint_with_wrong_key();
    assert!(registry.pull("team/app", "v1", "zot", &forged).is_err());
    // An audience Zot is not configured for: owned by nobody.
    let other = TokenSpec::new("team", "puller", "harbor.cluster.test").mint();
    assert!(registry.pull("team/app", "v1", "zot", &other).is_err());
    // Expired.
    let mut spec = TokenSpec::new("team", "puller", AUDIENCE);
    spec.expires_in = -120;
    assert!(
        registry
            .pull("team/app", "v1", "zot", &spec.mint())
            .is_err()
    );
    let seen = zot.seen();
    assert_eq!(seen.accepted.len(), accepted.len(), "{seen:?}");
    assert!(
        seen.refused
            .iter()
            .any(|r| r.contains("failed verification")),
        "{seen:?}"
    );
    assert!(
        seen.refused.iter().any(|r| r.contains("belongs to")),
        "{seen:?}"
    );
}

/// Round-4 item 1: `--registry` reads a pattern as the kubelet reads a
/// `matchImages` entry, where a scheme makes it match nothing; so a pattern
/// with one is refused at start, with the pattern to write instead.
#[test]
fn a_registry_pattern_with_a_scheme_is_refused() {
    let token = TokenSpec::new("team", "puller", "harbor.test").mint();
    let out = run(
        &passthrough(
            "https://harbor.test",
            "harbor.test",
            &["--log-format", "json"],
        ),
        &[],
        request("harbor.test/team/app", Some(&token), &[]).as_bytes(),
    );
    let line = out.refused("config", &[("flag", "--registry")]);
    support::assert_says(
        &support::plugin::words(&line),
        &["has a scheme (https://)", "--registry harbor.test"],
    );
    out.assert_no_secrets(&[&token]);
}

/// Registry mirrors end to end with containerd (docs/mirrors.md). The pod
/// names an image on SOURCE; `--registry-mirror SOURCE=TARGET` makes the
/// plugin do the exchange for TARGET (here passthrough to a registry that
/// takes the service account token) and key the answer by SOURCE, the only
/// key the kubelet looks up. containerd, configured by a `hosts.toml` for
/// SOURCE whose `server` is the mirror (as the docs say), pulls from the
/// mirror with that credential, and SOURCE (a tripwire that challenges
/// every request and records it) is never contacted. Then the trap the
/// docs and `node doctor` warn about: the same `hosts.toml` without
/// `server`. containerd appends SOURCE as the last host, so when the
/// mirror lacks an image it falls back to SOURCE and hands it the
/// credential (containerd `core/remotes/docker/config/hosts.go`).
#[test]
fn a_mirror_rule_keys_the_credential_by_the_source_and_containerd_pulls_from_the_mirror() {
    use base64::Engine;
    use support::containerd::Containerd;
    use support::http_server::{Response, TestServer};
    use support::registry::{Registry, TokenPost};

    const AUDIENCE: &str = "mirror.cluster.test";
    let mirror = Registry::start_with_token_service(TokenPost::OAuth2, |_username, password| {
        support::token::verify(password, AUDIENCE).is_ok()
    });
    let digest = mirror.push_test_image("team/app", "v1");
    let upstream = TestServer::start(|_req| {
        Response::text(401, "").with_header("WWW-Authenticate", "Basic realm=\"upstream\"")
    });
    let source = upstream.addr().to_string();
    let target = mirror.host().to_string();
    let rule = format!("{source}={target}");
    let args = passthrough(&target, AUDIENCE, &["--registry-mirror", &rule]);
    let token = TokenSpec::new("team", "puller", AUDIENCE).mint();
    let out = run(
        &args,
        &[],
        request(&format!("{source}/team/app"), Some(&token), &[]).as_bytes(),
    );
    let response = out.response();
    let auth = response["auth"].as_object().unwrap();
    assert_eq!(auth.keys().collect::<Vec<_>>(), [&source], "{response}");
    let username = auth[&source]["username"].as_str().unwrap().to_string();
    let password = auth[&source]["password"].as_str().unwrap().to_string();
    assert_eq!(password, token);
    assert!(
        out.stderr.contains(&format!("on {source}")),
        "{}",
        out.stderr
    );

    let hosts = tempfile::tempdir().unwrap();
    let dir = hosts.path().join(&source);
    std::fs::create_dir_all(&dir).unwrap();
    let mirror_host =
        format!("[host.\"http://{target}\"]\n  capabilities = [\"pull\", \"resolve\"]\n");
    std::fs::write(
        dir.join("hosts.toml"),
        format!("server = \"http://{target}\"\n\n{mirror_host}"),
    )
    .unwrap();
    let containerd = Containerd::start();
    let pulled = containerd
        .pull_via_hosts(
            &format!("{source}/team/app:v1"),
            &username,
            &password,
            hosts.path(),
        )
        .unwrap_or_else(|e| panic!("containerd did not pull through the mirror:\n{e}"));
    assert_eq!(pulled, digest);
    assert_eq!(upstream.request_count(), 0, "the upstream was contacted");

    // Without `server`: the upstream is the last host, and is offered the
    // credential when the mirror does not have the image.
    std::fs::write(dir.join("hosts.toml"), mirror_host).unwrap();
    let err = containerd
        .pull_via_hosts(
            &format!("{source}/team/other:v1"),
            &username,
            &password,
            hosts.path(),
        )
        .expect_err("the mirror has no team/other");
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
    );
    let offered = upstream
        .requests()
        .iter()
        .filter(|r| r.header("authorization") == Some(basic.as_str()))
        .count();
    assert!(
        offered > 0,
        "containerd did not offer the upstream the credential: {err}"
    );
}

/// Round-5 item 8: two `--registry-mirror` rules for one SOURCE (by flag
/// or through the variable's list) are a usage error naming both, never a
/// second rule silently unused.
#[test]
fn two_mirror_rules_for_one_source_are_refused_naming_both() {
    let token = support::token::TokenSpec::new("team", "puller", "harbor.test").mint();
    let stdin = support::plugin::request("docker.io/library/nginx:1", Some(&token), &[]);
    let mut args: Vec<&str> = support::plugin::PASSTHROUGH.to_vec();
    args.extend([
        "--registry-mirror",
        "docker.io=harbor.test/hub",
        "--registry-mirror",
        "DOCKER.IO=harbor.test/other",
    ]);
    let out = support::plugin::run(&args, &[], stdin.as_bytes());
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stdout.is_empty());
    support::assert_says(
        &out.stderr,
        &[
            "--registry-mirror docker.io=harbor.test/hub",
            "--registry-mirror DOCKER.IO=harbor.test/other",
            "keep one",
        ],
    );
    let out = support::plugin::run(
        support::plugin::PASSTHROUGH,
        &[(
            "WICP_REGISTRY_MIRROR",
            "docker.io=harbor.test/a,docker.io=harbor.test/b",
        )],
        stdin.as_bytes(),
    );
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    support::assert_says(&out.stderr, &["harbor.test/a", "harbor.test/b"]);
}
