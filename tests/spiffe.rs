//! `--identity spiffe`: the binary as the kubelet runs it, with a JWT-SVID
//! from a SPIRE agent's Delegated Identity API (the fake of
//! tests/support/spire.rs, real gRPC on a Unix socket) presented in the
//! service account token's place: to Debian's docker-registry through
//! passthrough and skopeo, and as the subject token of an RFC 8693 token
//! exchange. The kubelet's token gives the selectors and goes nowhere.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use support::plugin::{self, IMAGE, REGISTRY, Run, json_logs, request, run};
use support::spire::{self, SpireAgent, entry, id_of};
use support::sts::{AUDIENCE as STS_AUDIENCE, Expect, FakeSts};
use support::token::TokenSpec;

/// The audience of the kubelet's token in SPIFFE mode: only this plugin
/// reads it.
const KUBELET_AUDIENCE: &str = "spire-selectors.wi-credential-provider";
const REGISTRY_AUDIENCE: &str = "registry.cluster.test";

fn kubelet_token(name: &str) -> String {
    TokenSpec::new("team", name, KUBELET_AUDIENCE).mint()
}

/// The four selectors the kubelet's token for team/`name` vouches for.
fn selectors_for(name: &str) -> Vec<String> {
    let spec = TokenSpec::new("team", name, KUBELET_AUDIENCE);
    vec![
        "k8s:ns:team".to_string(),
        format!("k8s:sa:{name}"),
        format!("k8s:pod-name:{}", spec.pod_name),
        format!("k8s:pod-uid:{}", spec.pod_uid),
    ]
}

fn spiffe_args(agent: &SpireAgent, rest: &[&str]) -> Vec<String> {
    socket_args(&agent.socket_arg(), rest)
}

fn socket_args(socket: &str, rest: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--identity".to_string(),
        "spiffe".to_string(),
        "--spire-admin-socket".to_string(),
        socket.to_string(),
    ];
    args.extend(rest.iter().map(|s| s.to_string()));
    args
}

fn exec(args: &[String], image: &str, token: &str, annotations: &[(&str, &str)]) -> Run {
    run(
        args,
        &[],
        request(image, Some(token), annotations).as_bytes(),
    )
}

/// Passthrough to [`REGISTRY`] with the SVID for [`REGISTRY_AUDIENCE`],
/// from the agent at `socket`, and `extra` flags.
fn passthrough_args(socket: &str, extra: &[&str]) -> Vec<String> {
    let mut rest = vec![
        "--provider",
        "passthrough",
        "--registry",
        REGISTRY,
        "--spiffe-audience",
        REGISTRY_AUDIENCE,
    ];
    rest.extend_from_slice(extra);
    socket_args(socket, &rest)
}

fn sts_trusting(subject: &str) -> FakeSts {
    FakeSts::start(Expect {
        token_audience: STS_AUDIENCE.into(),
        fields: Vec::new(),
        client: None,
        subject: subject.into(),
        verify: spire::verify,
    })
}

fn exchange_args(agent: &SpireAgent, sts: &FakeSts, rest: &[&str]) -> Vec<String> {
    exchange_args_with(agent, sts, "--spiffe-audience", rest)
}

/// token-exchange at `sts`, its audience given with `audience_flag`.
fn exchange_args_with(
    agent: &SpireAgent,
    sts: &FakeSts,
    audience_flag: &str,
    rest: &[&str],
) -> Vec<String> {
    let url = sts.url();
    let mut args = spiffe_args(
        agent,
        &[
            "--provider",
            "token-exchange",
            "--registry",
            REGISTRY,
            "--token-exchange-url",
            &url,
            "--token-exchange-username-field",
            "username",
            audience_flag,
            STS_AUDIENCE,
        ],
    );
    args.extend(rest.iter().map(|s| s.to_string()));
    args
}

/// skopeo pulls from a registry that trusts only the SPIRE issuer, with
/// the SVID the plugin returned; the agent was asked for exactly the
/// token's selectors and the registry's audience, and the kubelet's token
/// reached neither the agent nor the registry nor stderr.
#[test]
fn skopeo_pulls_with_the_svid_and_the_kubelet_token_goes_nowhere() {
    use support::registry::Registry;

    let agent = SpireAgent::start(vec![entry(
        &id_of("team", "puller"),
        &["k8s:ns:team", "k8s:sa:puller"],
    )]);
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let record = Arc::clone(&seen);
    let registry = Registry::start_with_token_auth(move |_username, password| {
        record.lock().unwrap().push(password.to_string());
        spire::verify(password, REGISTRY_AUDIENCE)
            .is_ok_and(|claims| claims["sub"] == id_of("team", "puller").as_str())
    });
    registry.push_test_image("team/app", "v1");
    let host = registry.host().to_string();
    let token = kubelet_token("puller");

    let args = spiffe_args(
        &agent,
        &[
            "--provider",
            "passthrough",
            "--registry",
            &host,
            "--spiffe-audience",
            REGISTRY_AUDIENCE,
            "--log-level",
            "debug",
        ],
    );
    let out = exec(&args, &format!("{host}/team/app"), &token, &[]);
    let response = out.response();
    let auth = &response["auth"][host.as_str()];
    let password = auth["password"].as_str().unwrap();
    assert_ne!(password, token);
    let claims = spire::verify(password, REGISTRY_AUDIENCE).unwrap();
    assert_eq!(claims["sub"], id_of("team", "puller").as_str());
    registry
        .pull(
            "team/app",
            "v1",
            auth["username"].as_str().unwrap(),
            password,
        )
        .expect("skopeo pulls with the SVID");

    let requests = agent.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(spire::selectors_of(&requests[0]), selectors_for("puller"));
    assert_eq!(requests[0]["audience"], json!([REGISTRY_AUDIENCE]));
    assert_eq!(requests[0]["pid"], 0);
    let sent = requests[0].to_string();
    assert!(!sent.contains(&token), "the agent got the kubelet's token");
    assert!(
        seen.lock().unwrap().iter().all(|p| p != &token),
        "the registry got the kubelet's token"
    );
    assert!(!out.stderr.contains(&token) && !out.stderr.contains(password));
    assert!(
        out.stderr
            .contains(&format!("team/puller as {}", id_of("team", "puller"))),
        "{}",
        out.stderr
    );
}

/// The SVID is the token exchange's subject token; the service the
/// exchange trusts only the SPIRE issuer and one SPIFFE ID, and the
/// credential's cacheDuration is bounded by the SVID's lifetime (two
/// minutes here, against the exchanged token's fifteen).
#[test]
fn the_svid_is_the_subject_token_and_bounds_cache_duration() {
    let agent = SpireAgent::start(vec![entry(
        &id_of("team", "puller"),
        &["k8s:ns:team", "k8s:sa:puller"],
    )]);
    agent.configure(json!({
        "entries": [entry(&id_of("team", "puller"), &["k8s:ns:team", "k8s:sa:puller"])],
        "ttl": 120,
    }));
    let sts = sts_trusting(&id_of("team", "puller"));
    let token = kubelet_token("puller");
    let out = exec(&exchange_args(&agent, &sts, &[]), IMAGE, &token, &[]);
    let response = out.response_for(IMAGE);
    assert_eq!(
        response["auth"][REGISTRY]["password"],
        sts.issued()[0].as_str()
    );
    let seconds: u64 = response["cacheDuration"]
        .as_str()
        .unwrap()
        .trim_end_matches('s')
        .split('m')
        .fold(0, |total, part| {
            total * 60 + part.parse::<u64>().unwrap_or(0)
        });
    assert!(
        (1..=120).contains(&seconds),
        "cacheDuration {} is not bounded by the SVID",
        response["cacheDuration"]
    );
    assert_eq!(agent.requests()[0]["audience"], json!([STS_AUDIENCE]));
}

/// Without --spiffe-audience, --audience names the SVID's audience.
#[test]
fn audience_names_the_svids_audience_without_spiffe_audience() {
    let agent = SpireAgent::start(vec![entry(&id_of("team", "puller"), &["k8s:sa:puller"])]);
    let sts = sts_trusting(&id_of("team", "puller"));
    let args = exchange_args_with(&agent, &sts, "--audience", &[]);
    exec(&args, IMAGE, &kubelet_token("puller"), &[]).response_for(IMAGE);
    assert_eq!(agent.requests()[0]["audience"], json!([STS_AUDIENCE]));
}

/// One SPIFFE identity for every pod of `team`
/// (`spiffe://cluster.test/ns/team`), which the token server trusts, and
/// a disk cache: what the cache tests share.
struct Shared {
    _cache: tempfile::TempDir,
    cache_dir: String,
    agent: SpireAgent,
    sts: FakeSts,
    args: Vec<String>,
}

impl Shared {
    const ID: &str = "spiffe://cluster.test/ns/team";

    fn start() -> Shared {
        let cache = tempfile::tempdir().unwrap();
        let cache_dir = cache.path().display().to_string();
        let agent = SpireAgent::start(vec![entry(Shared::ID, &["k8s:ns:team"])]);
        let sts = sts_trusting(Shared::ID);
        let args = exchange_args(&agent, &sts, &["--cache-dir", &cache_dir]);
        Shared {
            _cache: cache,
            cache_dir,
            agent,
            sts,
            args,
        }
    }
}

/// Pods of one SPIFFE identity share a cached credential; the SVID is
/// fetched on every pull, so a re-registration takes effect at once: the
/// other identity's pull exchanges anew (and is refused here), it is
/// never served the first identity's credential.
#[test]
fn one_identity_shares_the_cache_and_another_never_does() {
    let Shared {
        _cache,
        agent,
        sts,
        args,
        ..
    } = Shared::start();

    let first = exec(&args, IMAGE, &kubelet_token("puller"), &[]).response_for(IMAGE);
    let second = exec(&args, IMAGE, &kubelet_token("builder"), &[]).response_for(IMAGE);
    assert_eq!(sts.issued().len(), 1, "one exchange for one identity");
    assert_eq!(first["auth"], second["auth"]);
    assert_eq!(
        agent.requests().len(),
        2,
        "an SVID is fetched on every pull"
    );

    agent.configure(
        json!({"entries": [entry("spiffe://cluster.test/ns/team/sa/builder", &["k8s:ns:team"])]}),
    );
    let refused = [("service", "the token server"), ("status", "400")];
    let line = exec(&json_logs(&args), IMAGE, &kubelet_token("builder"), &[])
        .refused("upstream", &refused);
    assert_eq!(line["service_account"], "team/builder", "{line}");
    assert!(plugin::words(&line).contains("invalid_grant"), "{line}");
    assert_eq!(sts.issued().len(), 1);
}

/// A credential shared by a SPIFFE identity is no one service account's:
/// `cache list` shows its SPIFFE ID, a purge by service account leaves it,
/// and `cache purge --spiffe-id` removes it, so the next pull exchanges
/// anew (what an admin does after revoking the identity's trust).
#[test]
fn a_spiffe_entry_is_listed_and_purged_by_its_id() {
    let Shared {
        _cache,
        cache_dir,
        agent: _agent,
        sts,
        args,
    } = Shared::start();
    exec(&args, IMAGE, &kubelet_token("puller"), &[]).response_for(IMAGE);

    let cache_command = |words: &[&str]| {
        let mut argv = vec!["cache"];
        argv.extend_from_slice(words);
        argv.extend(["--cache-dir", &cache_dir]);
        let out = run(&argv, &[], b"");
        assert_eq!(out.code, Some(0), "{words:?}: {}", out.stderr);
        String::from_utf8(out.stdout).unwrap()
    };
    let listed = cache_command(&["list"]);
    assert!(listed.contains(Shared::ID), "{listed}");
    assert!(listed.contains("1 entries"), "{listed}");
    let by_account = cache_command(&[
        "purge",
        "--namespace",
        "team",
        "--service-account",
        "puller",
    ]);
    assert!(!by_account.contains(Shared::ID), "{by_account}");
    assert!(cache_command(&["list"]).contains(Shared::ID));
    let by_id = cache_command(&["purge", "--spiffe-id", Shared::ID]);
    assert!(
        by_id.contains(&format!("SPIFFE ID {}", Shared::ID)),
        "{by_id}"
    );
    assert!(cache_command(&["list"]).contains("0 entries"));

    exec(&args, IMAGE, &kubelet_token("puller"), &[]).response_for(IMAGE);
    assert_eq!(
        sts.issued().len(),
        2,
        "the purge made the next pull exchange"
    );
}

/// Annotations, which tenants write, cannot add or change selectors, nor
/// move the socket or the audience.
#[test]
fn hostile_annotations_change_no_selector() {
    let agent = SpireAgent::start(vec![entry(&id_of("team", "puller"), &["k8s:sa:puller"])]);
    let args = passthrough_args(&agent.socket_arg(), &[]);
    let hostile = [
        ("spiffe.io/selector", "k8s:ns:kube-system"),
        ("k8s:sa", "admin"),
        (
            "wi-credential-provider/spire-admin-socket",
            "/tmp/evil.sock",
        ),
        ("wi-credential-provider/spiffe-audience", "evil.example.com"),
        (
            "spiffe.io/spiffe-id",
            "spiffe://cluster.test/ns/kube-system/sa/admin",
        ),
    ];
    exec(&args, IMAGE, &kubelet_token("puller"), &hostile).response_for(IMAGE);
    let requests = agent.requests();
    assert_eq!(spire::selectors_of(&requests[0]), selectors_for("puller"));
    assert_eq!(requests[0]["audience"], json!([REGISTRY_AUDIENCE]));
}

/// One failed pull: one error naming the service account and the SPIRE
/// agent (facts), with the words of its fix, and never the kubelet's
/// token. Returns the error's words.
fn assert_fails(agent: &SpireAgent, extra: &[&str], words: &[&str]) -> String {
    assert_fails_at(&agent.socket_arg(), extra, words)
}

fn assert_fails_at(socket: &str, extra: &[&str], words: &[&str]) -> String {
    let token = kubelet_token("puller");
    let out = exec(
        &json_logs(&passthrough_args(socket, extra)),
        IMAGE,
        &token,
        &[],
    );
    let line = out.failure_json();
    assert_eq!(line["service_account"], "team/puller", "{line}");
    assert_eq!(line["facts"]["service"], "the SPIRE agent", "{line}");
    let said = plugin::words(&line);
    support::assert_says(&said, words);
    out.assert_no_secrets(&[&token]);
    said
}

#[test]
fn every_refusal_of_the_agent_is_one_clear_line() {
    let puller = id_of("team", "puller");
    let agent = SpireAgent::start(vec![]);
    assert_fails(&agent, &[], &["no identity issued", "register"]);

    agent.configure(
        json!({"entries": [entry(&puller, &["k8s:sa:puller"])], "mode": "not-delegate"}),
    );
    assert_fails(
        &agent,
        &[],
        &["authorized delegate", "authorized_delegates"],
    );

    agent
        .configure(json!({"entries": [entry(&puller, &["k8s:sa:puller"])], "mode": "unavailable"}));
    assert_fails(&agent, &[], &["Unavailable", "agent's log"]);

    agent.configure(json!({"entries": [
        entry(&puller, &["k8s:sa:puller"]),
        entry("spiffe://cluster.test/ns/team", &["k8s:ns:team"]),
    ]}));
    assert_fails(
        &agent,
        &[],
        &[
            "2 JWT-SVIDs",
            &puller,
            "spiffe://cluster.test/ns/team",
            "exactly one",
        ],
    );

    agent.configure(json!({"entries": [entry(&puller, &["k8s:sa:puller"])], "mode": "garbage"}));
    assert_fails(&agent, &[], &["not a FetchJWTSVIDsResponse"]);
}

#[test]
fn a_hung_agent_ends_at_the_deadline() {
    let agent = SpireAgent::start(vec![]);
    agent.configure(json!({"mode": "hang"}));
    let started = Instant::now();
    assert_fails(
        &agent,
        &["--timeout", "3s"],
        &["did not answer", "deadline of 3s", "agent's log"],
    );
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn a_missing_or_foreign_socket_is_named_with_its_fix() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.sock").display().to_string();
    let line = assert_fails_at(&missing, &[], &["admin_socket_path"]);
    assert!(line.contains(&missing), "{line}");

    // A socket that answers, but not in HTTP/2.
    let foreign = dir.path().join("foreign.sock");
    let listener = std::os::unix::net::UnixListener::bind(&foreign).unwrap();
    let serving = std::thread::spawn(move || {
        use std::io::{Read, Write};
        if let Ok((mut stream, _)) = listener.accept() {
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
            let mut sink = [0u8; 1024];
            let _ = stream.read(&mut sink);
        }
    });
    let foreign = foreign.display().to_string();
    assert_fails_at(&foreign, &[], &["gRPC"]);
    serving.join().unwrap();
}

/// The flags mean something only together: SPIFFE mode needs the socket,
/// and a SPIFFE setting without it is refused rather than ignored.
#[test]
fn spiffe_settings_without_spiffe_mode_are_refused() {
    let token = kubelet_token("puller");
    let passthrough = ["--provider", "passthrough", "--registry", REGISTRY];
    let out = run(
        &json_logs(&[&passthrough[..], &["--identity", "spiffe"]].concat()),
        &[],
        request(IMAGE, Some(&token), &[]).as_bytes(),
    );
    out.refused("config", &[("flag", "--spire-admin-socket")]);
    let out = run(
        &json_logs(&[&passthrough[..], &["--audience", KUBELET_AUDIENCE]].concat()),
        &[("WICP_SPIRE_ADMIN_SOCKET", "/run/spire/admin.sock")],
        request(IMAGE, Some(&token), &[]).as_bytes(),
    );
    let line = out.refused("config", &[("flag", "--spire-admin-socket")]);
    assert!(plugin::words(&line).contains("--identity spiffe"), "{line}");
}

/// An SVID without `iss` (the SPIRE server has no jwt_issuer) is still
/// presented, with a warning saying what federation needs.
#[test]
fn an_svid_without_an_issuer_is_warned_about() {
    let agent = SpireAgent::start(vec![]);
    agent.configure(
        json!({"entries": [entry(&id_of("team", "puller"), &["k8s:sa:puller"])], "issuer": null}),
    );
    let args = passthrough_args(&agent.socket_arg(), &[]);
    let out = exec(&args, IMAGE, &kubelet_token("puller"), &[]);
    out.response_for(IMAGE);
    assert!(out.stderr.contains("jwt_issuer"), "{}", out.stderr);
}

/// Round-5 item 1: a socket another user could have bound, or one served
/// by another user's process, is never asked: the plugin refuses before
/// connecting (or before sending a byte), names the path and the owner,
/// and serves nothing, not even the credential a legitimate pull of the
/// same identity left in the cache. Tested as the attack: the agent's
/// directory, a link on the way and the socket itself owned by another
/// uid, a directory others may write; a sticky one (as `/tmp`) is fine.
#[test]
fn a_socket_another_user_could_have_bound_is_refused_and_nothing_is_served() {
    use std::os::unix::fs::{PermissionsExt, chown, lchown};
    let shared = Shared::start();
    let token = kubelet_token("puller");
    exec(&shared.args, IMAGE, &token, &[]).response_for(IMAGE);
    let asked = shared.agent.requests().len();
    let socket = shared.agent.socket().to_path_buf();
    let dir = socket.parent().unwrap().to_path_buf();
    let mode = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    let refused_at = |args: &[String], problem: &str| {
        let out = exec(&json_logs(args), IMAGE, &token, &[]);
        let line = out.refused("config", &[("flag", "--spire-admin-socket")]);
        let said = line["facts"]["problem"].as_str().unwrap_or_default();
        assert!(said.contains(problem), "{problem:?}: {line}");
        out.assert_no_secrets(&[&token]);
    };

    chown(&dir, Some(4242), None).unwrap();
    refused_at(&shared.args, "is owned by uid 4242");
    chown(&dir, Some(0), None).unwrap();
    mode(&dir, 0o777);
    refused_at(&shared.args, "may be written by other users (mode 0777)");
    mode(&dir, 0o1777);
    exec(&shared.args, IMAGE, &token, &[]).response_for(IMAGE);
    mode(&dir, 0o700);

    chown(&socket, Some(4242), None).unwrap();
    refused_at(&shared.args, "is owned by uid 4242");
    chown(&socket, Some(0), None).unwrap();

    // A link on the way: trusted only when root made it.
    let links = tempfile::tempdir().unwrap();
    let link = links.path().join("admin.sock");
    std::os::unix::fs::symlink(&socket, &link).unwrap();
    let through_link = |args: &[String]| {
        let mut args = args.to_vec();
        plugin::set_flag(
            &mut args,
            "--spire-admin-socket",
            &link.display().to_string(),
        );
        args
    };
    lchown(&link, Some(4242), None).unwrap();
    refused_at(
        &through_link(&shared.args),
        "(a symbolic link) is owned by uid 4242",
    );
    lchown(&link, Some(0), None).unwrap();
    exec(&through_link(&shared.args), IMAGE, &token, &[]).response_for(IMAGE);

    assert_eq!(
        shared.agent.requests().len(),
        asked + 2,
        "only the two trusted pulls reached the agent"
    );
    assert_eq!(shared.sts.issued().len(), 1, "the cache served those two");
}

/// Round-5 item 1: the process at the other end must be root's or the
/// plugin's user's (`SO_PEERCRED`), even where the path looks right: a
/// socket bound by uid 4242 and then handed to root is refused before a
/// byte is sent.
#[test]
fn a_socket_served_by_another_users_process_is_refused() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::fs::{PermissionsExt, chown};
    use std::process::{Command, Stdio};
    support::require_tools("the peer test", "apt-get install util-linux", &["setpriv"]);
    let dir = tempfile::tempdir().unwrap();
    chown(dir.path(), Some(4242), Some(4242)).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = dir.path().join("admin.sock");
    let mut server = Command::new("setpriv")
        .args([
            "--reuid",
            "4242",
            "--regid",
            "4242",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
        ])
        .arg(
            "import socket, sys, time\n\
             s = socket.socket(socket.AF_UNIX)\n\
             s.bind(sys.argv[1]); s.listen()\n\
             print('ready', flush=True)\n\
             c, _ = s.accept(); print(len(c.recv(1024)), flush=True)\n",
        )
        .arg(&socket)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    chown(dir.path(), Some(0), Some(0)).unwrap();
    chown(&socket, Some(0), Some(0)).unwrap();

    let token = kubelet_token("puller");
    let args = json_logs(&passthrough_args(&socket.display().to_string(), &[]));
    let out = exec(&args, IMAGE, &token, &[]);
    let line = out.refused("config", &[("flag", "--spire-admin-socket")]);
    let said = line["facts"]["problem"].as_str().unwrap_or_default();
    assert!(said.contains("runs as uid 4242"), "{line}");
    assert_eq!(
        lines.next().unwrap().unwrap(),
        "0",
        "the impostor got no byte"
    );
    server.wait().unwrap();
}

/// Round-5 item 11: what an agent (or an impostor) can answer wrongly is
/// named for what it is: an SVID for an audience nobody asked for is the
/// agent's doing (not the kubelet token's), a 64 MiB answer is too large
/// (not a refusal), a compressed answer is compressed (not the Workload
/// API socket), and 300 matching SVIDs make one short line with a count.
#[test]
fn what_the_agent_answers_wrongly_is_named_for_what_it_is() {
    let puller = id_of("team", "puller");
    let agent = SpireAgent::start(vec![entry(&puller, &["k8s:sa:puller"])]);

    agent.configure(
        json!({"entries": [entry(&puller, &["k8s:sa:puller"])], "mode": "other-audience"}),
    );
    let line = exec(
        &json_logs(&passthrough_args(&agent.socket_arg(), &[])),
        IMAGE,
        &kubelet_token("puller"),
        &[],
    )
    .refused(
        "upstream",
        &[("claim", "aud"), ("service", "the SPIRE agent")],
    );
    let said = plugin::words(&line);
    support::assert_says(
        &said,
        &["JWT-SVID", "someone-else.example.com", "asked for"],
    );
    assert!(!said.contains("tokenAttributes"), "{said}");

    agent.configure(json!({"entries": [entry(&puller, &["k8s:sa:puller"])], "mode": "huge"}));
    let said = assert_fails(&agent, &[], &["more than 256 KiB"]);
    assert!(!said.contains("refused"), "{said}");

    agent.configure(json!({"entries": [entry(&puller, &["k8s:sa:puller"])], "mode": "gzip"}));
    let said = assert_fails(&agent, &[], &["compressed"]);
    assert!(!said.contains("Workload API"), "{said}");

    let many: Vec<_> = (0..300)
        .map(|n| entry(&format!("spiffe://cluster.test/n/{n}"), &["k8s:ns:team"]))
        .collect();
    agent.configure(json!({ "entries": many }));
    let token = kubelet_token("puller");
    let out = exec(
        &json_logs(&passthrough_args(&agent.socket_arg(), &[])),
        IMAGE,
        &token,
        &[],
    );
    let line = out.failure_json();
    let said = plugin::words(&line);
    support::assert_says(&said, &["300 JWT-SVIDs", "and 295 more", "exactly one"]);
    let longest = out.stderr.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 2048, "a {longest}-byte line: {}", out.stderr);
}
