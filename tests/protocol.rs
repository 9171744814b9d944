//! The kubelet contract, tested by exec'ing the built binary exactly as the
//! kubelet does: request on stdin, response on stdout, one line on stderr on
//! failure, exit status.

use crate::support;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::json;
use support::plugin::{self, PASSTHROUGH, request, run, run_as};
use support::token::{self, TokenSpec};

const REGISTRY: &str = "harbor.test";

fn token() -> String {
    TokenSpec::new("team", "puller", REGISTRY).mint()
}

fn unsigned_jwt(claims: &serde_json::Value) -> String {
    format!(
        "{}.{}.c2ln",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"RS256"}"#),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    )
}

/// Every bad input: non-zero exit, empty stdout, one specific error line,
/// and the token's bytes nowhere on stderr.
#[test]
fn bad_inputs_get_one_precise_error() {
    let good = token();
    let spec = TokenSpec::new("team", "puller", REGISTRY);
    let mut expired = spec.clone();
    expired.expires_in = -30;
    let expired = expired.mint();
    let mut no_k8s = spec.claims();
    no_k8s.as_object_mut().unwrap().remove("kubernetes.io");
    let no_k8s = token::sign(&no_k8s, token::SIGNER_KEY);
    let wrong_aud = TokenSpec::new("team", "puller", "sts.amazonaws.com").mint();
    let mut bad_claims = good.split('.').map(str::to_string).collect::<Vec<_>>();
    bad_claims[1] = URL_SAFE_NO_PAD.encode("{not json");
    let bad_claims = bad_claims.join(".");
    let two_segments = good.rsplit_once('.').unwrap().0.to_string();
    let bad_base64 = format!("***.{}", good.split_once('.').unwrap().1);
    let big = format!(
        r#"{{"kind":"CredentialProviderRequest","pad":"{}"}}"#,
        "x".repeat(2 * 1024 * 1024)
    );

    // (case, stdin, kind, facts): the refusal by kind and facts, not words.
    type Case<'a> = (&'a str, String, &'a str, &'a [(&'a str, &'a str)]);
    let cases: Vec<Case> = vec![
        ("empty stdin", String::new(), "request", &[]),
        ("not JSON", "hello".into(), "request", &[]),
        ("broken JSON", "{\"kind\":".into(), "request", &[]),
        ("JSON array", "[]".into(), "request", &[]),
        ("2 MiB input", big, "request", &[]),
        (
            "wrong kind",
            json!({"kind":"Pod","apiVersion":"credentialprovider.kubelet.k8s.io/v1","image":"harbor.test/a"}).to_string(),
            "request",
            &[],
        ),
        (
            "unknown apiVersion",
            json!({"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v2","image":"harbor.test/a"}).to_string(),
            "request",
            &[],
        ),
        (
            "missing image",
            json!({"kind":"CredentialProviderRequest","apiVersion":"credentialprovider.kubelet.k8s.io/v1"}).to_string(),
            "request",
            &[],
        ),
        ("malformed image", request("harbor.test/UPPER/case", Some(&good), &[]), "request", &[]),
        ("no token", request("harbor.test/a", None, &[]), "token", &[]),
        ("token with 2 segments", request("harbor.test/a", Some(&two_segments), &[]), "token", &[]),
        ("bad base64", request("harbor.test/a", Some(&bad_base64), &[]), "token", &[]),
        ("bad JSON claims", request("harbor.test/a", Some(&bad_claims), &[]), "token", &[]),
        ("expired token", request("harbor.test/a", Some(&expired), &[]), "token", &[("claim", "exp")]),
        ("wrong audience", request("harbor.test/a", Some(&wrong_aud), &[]), "token", &[("claim", "aud")]),
        ("missing kubernetes.io claim", request("harbor.test/a", Some(&no_k8s), &[]), "token", &[("claim", "kubernetes.io")]),
        ("passthrough to a non-allowed registry", request("evil.test/a", Some(&good), &[]), "registry", &[("registry", "evil.test")]),
    ];
    let secrets = [&good, &expired, &wrong_aud, &no_k8s];
    let json = [PASSTHROUGH, &["--log-format", "json"]].concat();
    for (name, stdin, kind, facts) in cases {
        let out = run(&json, &[], stdin.as_bytes());
        let line = out.failure_json();
        assert_eq!(line["kind"], kind, "{name}: {line}");
        for (fact, value) in facts {
            assert_eq!(line["facts"][fact], *value, "{name}: {line}");
        }
        assert!(
            line["fix"].as_str().is_some_and(|f| !f.is_empty()),
            "{name}: no remedy in {line}"
        );
        out.assert_no_secrets(&secrets);
        // The text line the kubelet logs says the same with its remedy.
        let text = run(PASSTHROUGH, &[], stdin.as_bytes());
        assert!(
            text.failure().contains("; fix: "),
            "{name}: no remedy in {}",
            text.stderr
        );
        text.assert_no_secrets(&secrets);
    }
}

#[test]
fn failure_line_names_provider_service_account_and_registry() {
    let line = run(
        PASSTHROUGH,
        &[],
        request("evil.test/a", Some(&token()), &[]).as_bytes(),
    )
    .failure();
    assert!(line.starts_with("wi-credential-provider: error: provider passthrough, service account team/puller, registry evil.test failed: "), "{line}");
}

#[test]
fn response_echoes_each_api_version_and_pins_the_bytes_shape() {
    let t = token();
    for version in ["v1", "v1beta1", "v1alpha1"] {
        let mut req: serde_json::Value =
            serde_json::from_str(&request("harbor.test/team/app", Some(&t), &[])).unwrap();
        req["apiVersion"] = json!(format!("credentialprovider.kubelet.k8s.io/{version}"));
        let out = run(PASSTHROUGH, &[], req.to_string().as_bytes());
        let response = out.response();
        assert_eq!(
            response["apiVersion"],
            format!("credentialprovider.kubelet.k8s.io/{version}")
        );
        // The exact bytes: field order, compact, trailing newline.
        let text = String::from_utf8(out.stdout.clone()).unwrap();
        let duration = response["cacheDuration"].as_str().unwrap();
        assert_eq!(
            text,
            format!(
                "{{\"apiVersion\":\"credentialprovider.kubelet.k8s.io/{version}\",\"kind\":\"CredentialProviderResponse\",\
                 \"cacheKeyType\":\"Registry\",\"cacheDuration\":\"{duration}\",\
                 \"auth\":{{\"harbor.test\":{{\"username\":\"serviceaccount\",\"password\":\"{t}\"}}}}}}\n"
            )
        );
    }
}

#[test]
fn cache_duration_is_bounded_by_the_token_and_the_flag() {
    // A one-hour token: 80% of what remains is about 48m, capped at 1h by default.
    let out = run(
        PASSTHROUGH,
        &[],
        request("harbor.test/a", Some(&token()), &[]).as_bytes(),
    );
    let d = out.response()["cacheDuration"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(d.starts_with("47m") || d.starts_with("48m"), "{d}");
    // --max-cache-duration caps it.
    let mut args = PASSTHROUGH.to_vec();
    args.extend(["--max-cache-duration", "10m"]);
    let out = run(
        &args,
        &[],
        request("harbor.test/a", Some(&token()), &[]).as_bytes(),
    );
    assert_eq!(out.response()["cacheDuration"], "10m0s");
    // A token with under a minute left: use once, do not cache.
    let mut spec = TokenSpec::new("team", "puller", REGISTRY);
    spec.expires_in = 30;
    let out = run(
        PASSTHROUGH,
        &[],
        request("harbor.test/a", Some(&spec.mint()), &[]).as_bytes(),
    );
    assert_eq!(out.response()["cacheDuration"], "0s");
    assert!(out.stderr.contains("too soon to cache"), "{}", out.stderr);
}

#[test]
fn image_forms_resolve_to_the_registry_host() {
    let t = token();
    for (image, key) in [
        ("harbor.test/team/app", "harbor.test"),
        ("harbor.test/team/app:1.2", "harbor.test"),
        (
            "harbor.test/team/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "harbor.test",
        ),
        ("harbor.test:8443/team/app", "harbor.test:8443"),
    ] {
        let out = run(
            &[
                "--provider",
                "passthrough",
                "--registry",
                "harbor.test",
                "--registry",
                "harbor.test:8443",
                "--audience",
                REGISTRY,
            ],
            &[],
            request(image, Some(&t), &[]).as_bytes(),
        );
        // The kubelet looks the key up for the normalized repository.
        let response = out.response_for(&format!("{key}/team/app"));
        let keys: Vec<&String> = response["auth"].as_object().unwrap().keys().collect();
        assert_eq!(keys, [key], "{image}");
    }
    // Docker Hub short names normalize to docker.io.
    let hub = TokenSpec::new("team", "puller", "docker.io").mint();
    let out = run(
        &["--provider", "passthrough", "--registry", "docker.io"],
        &[],
        request("nginx", Some(&hub), &[]).as_bytes(),
    );
    assert!(
        out.response_for("docker.io/library/nginx")["auth"]
            .get("docker.io")
            .is_some()
    );
}

#[test]
fn registry_patterns_follow_kubelet_rules() {
    let t = TokenSpec::new("team", "puller", "any").mint();
    let allowed = |pattern: &str, image: &str| {
        let out = run(
            &["--provider", "passthrough", "--registry", pattern],
            &[],
            request(image, Some(&t), &[]).as_bytes(),
        );
        out.code == Some(0)
    };
    assert!(allowed("*.harbor.test", "eu.harbor.test/a"));
    assert!(
        !allowed("*.harbor.test", "harbor.test/a"),
        "a glob does not match zero labels"
    );
    assert!(
        !allowed("*.harbor.test", "a.b.harbor.test/a"),
        "a glob never spans a dot"
    );
    assert!(
        !allowed("harbor.test", "harbor.test:5000/a"),
        "ports compare exactly"
    );
    assert!(allowed("harbor.test/team", "harbor.test/team/app"));
    assert!(!allowed("harbor.test/team", "harbor.test/other/app"));
    assert!(
        !allowed("harbor.test/*", "harbor.test/app"),
        "path is a literal prefix"
    );
    assert!(!allowed("harbor.test", "harbor.test.evil.io/a"));
}

#[test]
fn flags_have_environment_variables_and_the_flag_wins() {
    let t = token();
    let req = request("harbor.test/a", Some(&t), &[]);
    let env = [
        ("WICP_PROVIDER", "passthrough"),
        ("WICP_REGISTRY", "other.test,harbor.test"),
        ("WICP_AUDIENCE", REGISTRY),
        ("WICP_PASSTHROUGH_USERNAME", "robot"),
        ("WICP_MAX_CACHE_DURATION", "5m"),
    ];
    let response = run(&[] as &[&str], &env, req.as_bytes()).response();
    assert_eq!(response["auth"]["harbor.test"]["username"], "robot");
    assert_eq!(response["cacheDuration"], "5m0s");
    // The flag wins over the variable.
    let response = run(
        &[
            "--passthrough-username",
            "flagged",
            "--max-cache-duration",
            "2m",
        ],
        &env,
        req.as_bytes(),
    )
    .response();
    assert_eq!(response["auth"]["harbor.test"]["username"], "flagged");
    assert_eq!(response["cacheDuration"], "2m0s");
    // A wrong audience in the environment is caught like a wrong flag.
    let line = run(
        &["--log-format", "json"],
        &[
            ("WICP_AUDIENCE", "other"),
            ("WICP_PROVIDER", "passthrough"),
            ("WICP_REGISTRY", "harbor.test"),
        ],
        req.as_bytes(),
    )
    .refused("token", &[("claim", "aud")]);
    assert!(plugin::words(&line).contains("\"other\""), "{line}");
}

/// The serving path parses only the chosen provider's flags; another
/// provider's flag or variable is still accepted, or refused, exactly as
/// the whole command line does.
#[test]
fn another_providers_flags_and_variables_are_read_as_ever() {
    let t = token();
    let req = request("harbor.test/a", Some(&t), &[]);
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        PASSTHROUGH.iter().chain(extra).copied().collect()
    };
    let served = [
        (with(&["--vault-kv-version", "1"]), vec![]),
        (with(&[]), vec![("WICP_VAULT_KV_VERSION", "1")]),
    ];
    for (args, env) in &served {
        let out = run(args, env, req.as_bytes());
        assert_eq!(
            out.response()["auth"]["harbor.test"]["password"],
            t.as_str(),
            "{args:?} {env:?}"
        );
    }
    let refused = [
        (with(&["--vault-kv-version", "7"]), vec![]),
        (with(&[]), vec![("WICP_VAULT_KV_VERSION", "7")]),
    ];
    for (args, env) in &refused {
        let out = run(args, env, req.as_bytes());
        assert_eq!(out.code, Some(2), "{args:?} {env:?}: {}", out.stderr);
        assert!(out.stdout.is_empty());
        assert!(
            out.stderr
                .contains("invalid value '7' for '--vault-kv-version"),
            "{}",
            out.stderr
        );
    }
}

#[test]
fn the_program_name_selects_the_provider() {
    let t = token();
    let req = request("harbor.test/a", Some(&t), &[]);
    let out = run_as(
        "wi-credential-provider-passthrough",
        &["--registry", "harbor.test"],
        &[],
        req.as_bytes(),
    );
    assert_eq!(
        out.response()["auth"]["harbor.test"]["password"],
        t.as_str()
    );
    // An explicit --provider wins over the name.
    run_as(
        "wi-credential-provider-passthrough",
        &[
            "--provider",
            "auto",
            "--registry",
            "harbor.test",
            "--log-format",
            "json",
        ],
        &[],
        req.as_bytes(),
    )
    .refused_registry("harbor.test");
}

#[test]
fn auto_never_routes_to_passthrough() {
    let line = run(
        &["--registry", "harbor.test", "--log-format", "json"],
        &[],
        request("harbor.test/a", Some(&token()), &[]).as_bytes(),
    )
    .refused_registry("harbor.test");
    // The fix names the explicit choice that would serve it.
    assert!(
        line["fix"]
            .as_str()
            .unwrap()
            .contains("--provider passthrough"),
        "{line}"
    );
}

#[test]
fn passthrough_without_registries_refuses() {
    run(
        &["--provider", "passthrough", "--log-format", "json"],
        &[],
        request("harbor.test/a", Some(&token()), &[]).as_bytes(),
    )
    .refused_registry("harbor.test");
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["--provider", "nope"][..],
        &["--timeout", "90s"],
        &["--max-cache-duration", "1d"],
        &["--registry", "[bad"],
    ] {
        let out = run(
            args,
            &[],
            request("harbor.test/a", Some(&token()), &[]).as_bytes(),
        );
        assert!(out.stdout.is_empty());
        if args[0] == "--registry" {
            // A bad pattern is found when the exchanger is built: a plain failure.
            assert_eq!(out.code, Some(1), "{args:?}: {}", out.stderr);
        } else {
            assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        }
    }
}

#[test]
fn help_and_version() {
    let out = run(&["--help"], &[], b"");
    assert_eq!(out.code, Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "--provider",
        "--audience",
        "--max-cache-duration",
        "--timeout",
        "--log-level",
        "--registry",
        "--passthrough-username",
        "WICP_PROVIDER",
        "WICP_REGISTRY",
        // The commands: the serving path parses without them (main.rs
        // `parse`), help must not.
        "check-config",
        "explain",
        "cache",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}");
    }
    let out = run(&["--version"], &[], b"");
    assert_eq!(out.code, Some(0));
    let version = String::from_utf8(out.stdout).unwrap();
    assert!(version.starts_with("wi-credential-provider "), "{version}");
    assert!(
        version.contains("(commit ") && version.contains("providers: "),
        "--version is the full version line: {version}"
    );
    // A word that is no command is refused as the full command line refuses
    // it, with usage status 2.
    let out = run(&["--provider", "passthrough", "chek-config"], &[], b"");
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("unrecognized subcommand 'chek-config'"),
        "{}",
        out.stderr
    );
    // `help` alone is --help; a cache command's help names the cache's
    // flags, which the command line reads after the command too.
    let out = run(&["help"], &[], b"");
    assert_eq!(out.code, Some(0));
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains("--registry-mirror")
    );
    let out = run(&["cache", "list", "--help"], &[], b"");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help.contains("--cache-dir <DIR>") && help.contains("WICP_CACHE_DIR"),
        "{help}"
    );
}

/// The one parser's mistakes: usage status 2, clap's wording, the usage
/// line, nothing on stdout; and one JSON line when JSON was asked for, by
/// the flag or by its variable, even on a line it refuses.
#[test]
fn usage_errors_are_one_line_of_the_format_asked() {
    for (args, says) in [
        (&["--nope"][..], "error: unexpected argument '--nope' found"),
        (
            &["--timeout"],
            "error: a value is required for '--timeout <DURATION>'",
        ),
        (
            &["--timeout=1s", "--timeout=2s"],
            "cannot be used multiple times",
        ),
        (&["--vault-keep-login-token=yes"], "which takes none"),
        (&["-x"], "error: unexpected argument '-x' found"),
    ] {
        let out = run(args, &[], b"");
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty());
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
        assert!(
            out.stderr
                .contains("Usage: wi-credential-provider [OPTIONS] [COMMAND]")
        );
    }
    for (args, env) in [
        (&["--log-format", "json", "--nope"][..], &[][..]),
        (&["--nope"], &[("WICP_LOG_FORMAT", "json")]),
    ] {
        let out = run(args, env, b"");
        assert_eq!(out.code, Some(2));
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{}", out.stderr);
        let line: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(line["level"], "error");
        assert!(
            line["message"]
                .as_str()
                .unwrap()
                .contains("unexpected argument '--nope'")
        );
    }
}

#[test]
fn logs_stay_on_stderr_and_never_carry_the_token() {
    let t = token();
    for level in ["error", "warn", "info", "debug"] {
        let mut args = PASSTHROUGH.to_vec();
        args.extend(["--log-level", level]);
        let out = run(
            &args,
            &[],
            request("harbor.test/a", Some(&t), &[("example.com/key", "value")]).as_bytes(),
        );
        out.response();
        assert!(!out.stderr.contains(&t), "{level}: token on stderr");
        assert!(
            !out.stderr.contains(t.rsplit('.').next().unwrap()),
            "{level}: signature on stderr"
        );
        let lines = out.stderr.lines().count();
        match level {
            "error" | "warn" => assert_eq!(lines, 0, "{level}: {}", out.stderr),
            "info" => assert_eq!(lines, 1, "{level}: {}", out.stderr),
            _ => assert!(lines >= 2, "{level}: {}", out.stderr),
        }
    }
}

#[test]
fn unsigned_and_alg_none_tokens_are_refused() {
    let claims = TokenSpec::new("team", "puller", REGISTRY).claims();
    let none = format!(
        "{}.{}.sig",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let json = [PASSTHROUGH, &["--log-format", "json"]].concat();
    let line = run(
        &json,
        &[],
        request("harbor.test/a", Some(&none), &[]).as_bytes(),
    )
    .refused("token", &[]);
    assert!(
        line["message"].as_str().unwrap().contains("not signed"),
        "{line}"
    );
    // A token whose sub disagrees with its kubernetes.io claim is not a
    // service account token.
    let mut claims = claims;
    claims["sub"] = json!("system:serviceaccount:kube-system:admin");
    run(
        &json,
        &[],
        request("harbor.test/a", Some(&unsigned_jwt(&claims)), &[]).as_bytes(),
    )
    .refused("token", &[("claim", "sub")]);
}

#[test]
fn a_stdin_that_never_closes_ends_at_the_deadline() {
    use std::io::Write;
    use std::time::{Duration, Instant};

    let mut child = support::plugin::piped(support::plugin::bin())
        .args([
            "--provider",
            "passthrough",
            "--registry",
            "registry.example",
            "--timeout",
            "2s",
        ])
        .spawn()
        .unwrap();
    // Half a request, and the writer keeps stdin open.
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"{\"kind\":\"CredentialProviderRequest\",")
        .unwrap();
    stdin.flush().unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > Duration::from_secs(15) {
            child.kill().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let status = status.unwrap_or_else(|| panic!("still reading stdin after 15s: {stderr}"));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        stderr.contains("no complete request arrived on stdin within the deadline of 2s"),
        "{stderr}"
    );
}

/// The same request, served from each kind of stdin: the kubelet's pipe
/// (every other test here), a file (`plugin < request.json`) and a socket,
/// which is read on a thread. Each gives the same response.
#[test]
fn a_request_is_served_from_a_file_and_a_socket_as_from_a_pipe() {
    use std::io::Write;
    use std::process::{Command, Stdio};

    let token = token();
    let body = request("harbor.test/team/app:1", Some(&token), &[]);
    let served = |stdin: Stdio| {
        let out = Command::new(support::plugin::bin())
            .args(PASSTHROUGH)
            .env_clear()
            .stdin(stdin)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let piped = run(PASSTHROUGH, &[], body.as_bytes()).response();

    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(body.as_bytes()).unwrap();
    let from_file = served(Stdio::from(std::fs::File::open(file.path()).unwrap()));

    let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    ours.write_all(body.as_bytes()).unwrap();
    ours.shutdown(std::net::Shutdown::Write).unwrap();
    let from_socket = served(Stdio::from(std::os::fd::OwnedFd::from(theirs)));

    assert_eq!(piped["auth"]["harbor.test"]["password"], token.as_str());
    // The same response but for cacheDuration, which counts down from the
    // token's expiry: runs a second apart (a loaded machine) differ by it.
    let seconds = |response: &serde_json::Value| {
        let text = response["cacheDuration"].as_str().unwrap();
        let (minutes, rest) = text.split_once('m').unwrap();
        let secs: i64 = rest.trim_end_matches('s').parse().unwrap();
        minutes.parse::<i64>().unwrap() * 60 + secs
    };
    let without_duration = |response: &serde_json::Value| {
        let mut r = response.clone();
        r.as_object_mut().unwrap().remove("cacheDuration");
        r
    };
    for other in [&from_file, &from_socket] {
        assert_eq!(without_duration(other), without_duration(&piped));
        assert!(
            (seconds(other) - seconds(&piped)).abs() <= 2,
            "{other} {piped}"
        );
    }
}
