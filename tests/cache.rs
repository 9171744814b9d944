//! The on-disk credential cache, through the built binary as the kubelet
//! runs it, with the azure exchanger against the fake Entra ID and ACR of
//! tests/support/azure.rs: each exchange is one request counted at the fake
//! Entra ID (and one at the fake ACR).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::azure::{
    self, ACR_HOST as REGISTRY, App, CLIENT_ID, FakeAcr, FakeEntra, FederatedCredential, TENANT,
    WI_CLIENT, WI_TENANT,
};
use support::http_server::Response;
use support::plugin::{Run, bin, request, run, words};
use support::token::{self, TokenSpec};

const IMAGE: &str = "contoso.azurecr.io/team/app";
const IDENTITY: &[(&str, &str)] = &[(WI_CLIENT, CLIENT_ID), (WI_TENANT, TENANT)];

/// Fake Entra ID and ACR, and a cache directory that does not exist yet.
struct World {
    entra: FakeEntra,
    acr: FakeAcr,
    _parent: tempfile::TempDir,
    dir: PathBuf,
}

impl World {
    /// Entra trusts these service accounts (namespace, name) for the
    /// default audience.
    fn new(trusted: &[(&str, &str)]) -> Self {
        let mut app = App::trusting(trusted[0].0, trusted[0].1);
        for (namespace, name) in &trusted[1..] {
            app.federated
                .push(federated(namespace, name, azure::AUDIENCE));
        }
        World::with_app(app)
    }

    fn with_app(app: App) -> Self {
        let entra = FakeEntra::start(app);
        let acr = FakeAcr::start(REGISTRY, &entra);
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("cache");
        World {
            entra,
            acr,
            _parent: parent,
            dir,
        }
    }

    /// The kubelet's arguments for this node, debug logging on so the
    /// secret checks cover every line.
    fn args(&self) -> Vec<String> {
        azure::flags(
            &self.entra,
            &self.acr,
            &[
                "--provider",
                "azure",
                "--log-level",
                "debug",
                "--cache-dir",
                arg(&self.dir),
            ],
        )
    }

    /// `extra` is flag and value pairs, replacing the flag's value in
    /// [`World::args`] or added.
    fn pull_with(&self, extra: &[&str], token: &str, annotations: &[(&str, &str)]) -> Run {
        let mut args = self.args();
        for pair in extra.chunks(2) {
            support::plugin::set_flag(&mut args, pair[0], pair[1]);
        }
        let out = run(
            &args,
            &[],
            request(IMAGE, Some(token), annotations).as_bytes(),
        );
        self.assert_no_secrets(&out.stderr, token);
        out
    }

    fn pull(&self, token: &str) -> Run {
        self.pull_with(&[], token, IDENTITY)
    }

    /// Exchanges so far, as counted by the fake Entra ID (each exchange
    /// then goes to one ACR: this one unless a test points elsewhere).
    fn exchanges(&self) -> usize {
        let n = self.entra.server.request_count();
        assert!(
            self.acr.server.request_count() <= n,
            "more ACR than Entra calls"
        );
        n
    }

    fn assert_no_secrets(&self, text: &str, token: &str) {
        let mut secrets = vec![token.to_string()];
        secrets.extend(self.entra.issued());
        secrets.extend(self.acr.minted());
        for secret in secrets.iter().filter(|s| !s.is_empty()) {
            let signature = secret.rsplit_once('.').map_or("", |(_, s)| s);
            assert!(
                !text.contains(secret.as_str())
                    && (signature.len() < 16 || !text.contains(signature)),
                "a secret leaked: {text}"
            );
        }
    }

    fn list(&self) -> String {
        let out = run(&["cache", "list", "--cache-dir", arg(&self.dir)], &[], b"");
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let text = String::from_utf8(out.stdout).unwrap();
        self.assert_no_secrets(&text, "");
        text
    }

    fn entry_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        files
    }
}

fn federated(namespace: &str, name: &str, audience: &str) -> FederatedCredential {
    FederatedCredential {
        issuer: token::ISSUER.into(),
        subject: format!("system:serviceaccount:{namespace}:{name}"),
        audience: audience.into(),
    }
}

fn password(out: &Run) -> String {
    let response = out.response();
    assert_eq!(response["auth"][REGISTRY]["username"], azure::NULL_GUID);
    response["auth"][REGISTRY]["password"]
        .as_str()
        .unwrap()
        .to_string()
}

fn arg(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn passthrough_tokens_are_never_cached() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("cache");
    let token = TokenSpec::new("team", "puller", "harbor.test").mint();
    let run = run(
        &[support::plugin::PASSTHROUGH, &["--cache-dir", arg(&dir)]].concat(),
        &[],
        request("harbor.test/team/app", Some(&token), &[]).as_bytes(),
    );
    assert_eq!(
        run.response()["auth"]["harbor.test"]["password"],
        token.as_str()
    );
    assert!(!dir.exists(), "passthrough must not even open the cache");
}

#[test]
fn cache_commands_need_the_directory() {
    for args in [&["cache", "list"][..], &["cache", "purge", "--all"]] {
        let run = run(&[&["--log-format", "json"], args].concat(), &[], b"");
        assert_eq!(run.code, Some(2), "{}", run.stderr);
        let line = run.refused("config", &[("flag", "--cache-dir")]);
        assert!(
            words(&line).contains("pass --cache-dir DIR or set WICP_CACHE_DIR"),
            "{line}"
        );
    }
    // purge must be told what to remove.
    let run = run(&["cache", "purge", "--cache-dir", "/nonexistent"], &[], b"");
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("--namespace"), "{}", run.stderr);
}

#[test]
fn cache_commands_on_a_missing_and_an_empty_directory() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("cache");
    let run_list = || run(&["cache", "list"], &[("WICP_CACHE_DIR", arg(&dir))], b"");
    let missing = run_list();
    assert_eq!(missing.code, Some(0), "{}", missing.stderr);
    assert_eq!(
        String::from_utf8(missing.stdout).unwrap(),
        format!("no cache at {}: nothing cached\n", dir.display())
    );
    assert!(!dir.exists(), "listing must not create the directory");

    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let empty = run_list();
    assert_eq!(empty.code, Some(0), "{}", empty.stderr);
    let text = String::from_utf8(empty.stdout).unwrap();
    assert!(text.starts_with("KEY "), "{text}");
    assert!(
        text.ends_with(&format!("0 entries in {}\n", dir.display())),
        "{text}"
    );
}

#[test]
fn cache_commands_refuse_an_unsafe_directory() {
    let parent = tempfile::tempdir().unwrap();
    let real = parent.path().join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = parent.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();

    // The refusal as a script reads it (`--log-format json`: kind and
    // facts), and as an admin does.
    let purge = [
        "--log-format",
        "json",
        "cache",
        "purge",
        "--all",
        "--cache-dir",
    ];
    let line = run(&[&purge[..], &[arg(&link)]].concat(), &[], b"")
        .refused("cache", &[("flag", "--cache-dir")]);
    assert!(words(&line).contains("is a symbolic link"), "{line}");

    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o777)).unwrap();
    let run = support::plugin::run(&["cache", "list", "--cache-dir", arg(&real)], &[], b"");
    let line = run.failure();
    support::assert_says(
        &line,
        &["writable by group or others (mode 0777)", "chmod 0700"],
    );
}

fn sa_token(namespace: &str, name: &str) -> String {
    TokenSpec::new(namespace, name, azure::AUDIENCE).mint()
}

#[test]
fn the_info_line_says_whether_the_credential_was_cached() {
    let world = World::new(&[("team", "puller")]);
    let first = world.pull(&sa_token("team", "puller"));
    assert!(
        first.stderr.contains(", exchanged and cached"),
        "{}",
        first.stderr
    );

    // The entry's name is taken by a directory: the write fails.
    let entry = world.entry_files().pop().unwrap();
    std::fs::remove_file(&entry).unwrap();
    std::fs::create_dir(&entry).unwrap();
    let out = world.pull(&sa_token("team", "puller"));
    out.response();
    assert!(
        out.stderr
            .contains(", exchanged, not cached (the cache entry could not be written)"),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("exchanged and cached"),
        "{}",
        out.stderr
    );
    std::fs::remove_dir(&entry).unwrap();

    // Too close to --max-cache-duration to be served again: not written.
    let out = world.pull_with(
        &["--max-cache-duration", "0s"],
        &sa_token("team", "puller"),
        IDENTITY,
    );
    out.response();
    assert!(
        out.stderr.contains(", exchanged, not cached (too close to its expiry or --max-cache-duration to be served again)"),
        "{}",
        out.stderr
    );
    assert!(world.entry_files().is_empty());
}

#[test]
fn one_exchange_then_hits_across_processes_and_pods() {
    let world = World::new(&[("team", "puller")]);
    let first = world.pull(&sa_token("team", "puller"));
    let exchanged = password(&first);
    assert!(
        first.stderr.contains("exchanged and cached"),
        "{}",
        first.stderr
    );
    assert_eq!(world.exchanges(), 1);
    // Another pod of the same service account: its own token, same identity.
    let mut other_pod = TokenSpec::new("team", "puller", azure::AUDIENCE);
    other_pod.pod_name = "puller-5c4b3-zyxwv".into();
    other_pod.pod_uid = "pod-other-0000".into();
    for token in [sa_token("team", "puller"), other_pod.mint()] {
        let hit = world.pull(&token);
        assert_eq!(password(&hit), exchanged);
        assert!(
            hit.stderr.contains("from the on-disk cache"),
            "{}",
            hit.stderr
        );
    }
    assert_eq!(world.exchanges(), 1);

    // The directory and the entry are private.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&world.dir), 0o700);
    let files = world.entry_files();
    assert_eq!(files.len(), 1);
    assert_eq!(mode(&files[0]), 0o600);
    let entry: Value = serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap();
    assert_eq!(entry["password"], exchanged.as_str());
    assert_eq!(entry["serviceAccount"]["name"], "puller");
    assert_eq!(entry["registry"], REGISTRY);

    let list = world.list();
    assert!(list.contains("team/puller"), "{list}");
    assert!(list.contains(REGISTRY), "{list}");
    assert!(list.contains("1 entries in"), "{list}");
}

#[test]
fn isolation_every_identity_input_is_its_own_entry() {
    const OTHER_AUDIENCE: &str = "api://custom-federation";
    let mut app = App::trusting("team", "puller");
    app.federated
        .push(federated("team", "other", azure::AUDIENCE));
    app.federated
        .push(federated("team", "puller", OTHER_AUDIENCE));
    let world = World::with_app(app);
    let second_acr = FakeAcr::start(REGISTRY, &world.entra);
    let second_endpoint = second_acr.url();

    let recreated = {
        let mut spec = TokenSpec::new("team", "puller", azure::AUDIENCE);
        spec.uid = "recreated-uid-1111-2222-333333333333".into();
        spec
    };
    let other_audience = TokenSpec::new("team", "puller", OTHER_AUDIENCE);
    let edited: &[(&str, &str)] = &[
        (WI_CLIENT, CLIENT_ID),
        (WI_TENANT, TENANT),
        (
            "azure.workload.identity/service-account-token-expiration",
            "3600",
        ),
    ];
    // (what, flags, token spec, annotations)
    type Variant<'a> = (&'a str, Vec<&'a str>, TokenSpec, &'a [(&'a str, &'a str)]);
    let variants: Vec<Variant<'_>> = vec![
        (
            "base",
            vec![],
            TokenSpec::new("team", "puller", azure::AUDIENCE),
            IDENTITY,
        ),
        (
            "another service account, identical annotations",
            vec![],
            TokenSpec::new("team", "other", azure::AUDIENCE),
            IDENTITY,
        ),
        (
            "recreated service account (new UID)",
            vec![],
            recreated,
            IDENTITY,
        ),
        (
            "one annotation changed",
            vec![],
            TokenSpec::new("team", "puller", azure::AUDIENCE),
            edited,
        ),
        (
            "another audience",
            vec!["--audience", OTHER_AUDIENCE],
            other_audience,
            IDENTITY,
        ),
        (
            "another endpoint",
            vec!["--acr-endpoint", &second_endpoint],
            TokenSpec::new("team", "puller", azure::AUDIENCE),
            IDENTITY,
        ),
    ];
    let mut passwords = BTreeMap::new();
    for (i, (what, flags, spec, annotations)) in variants.iter().enumerate() {
        let out = world.pull_with(flags, &spec.mint(), annotations);
        let pw = password(&out);
        assert!(
            out.stderr.contains("exchanged and cached"),
            "{what}: {}",
            out.stderr
        );
        assert_eq!(world.exchanges(), i + 1, "{what} must be its own exchange");
        assert!(
            passwords.insert(pw, *what).is_none(),
            "{what} was served another identity's credential"
        );
    }
    assert_eq!(world.entry_files().len(), variants.len());
    // Each variant now hits its own entry, and only its own.
    for (what, flags, spec, annotations) in &variants {
        let out = world.pull_with(flags, &spec.mint(), annotations);
        assert_eq!(passwords[&password(&out)], *what);
        assert!(
            out.stderr.contains("from the on-disk cache"),
            "{what}: {}",
            out.stderr
        );
    }
    assert_eq!(world.exchanges(), variants.len());
    assert_eq!(second_acr.server.request_count(), 1);
    assert_eq!(world.acr.server.request_count(), variants.len() - 1);
    drop(second_acr);

    // Purging one service account drops its entry, and only its entry.
    let out = run(
        &[
            "cache",
            "purge",
            "--cache-dir",
            arg(&world.dir),
            "--namespace",
            "team",
            "--service-account",
            "other",
        ],
        &[],
        b"",
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let text = String::from_utf8(out.stdout).unwrap();
    support::assert_says(
        &text,
        &["service account team/other", "purged 1 cached credential "],
    );
    assert_eq!(world.entry_files().len(), variants.len() - 1);
    world.pull(&sa_token("team", "other")).response();
    assert_eq!(world.exchanges(), variants.len() + 1);
}

#[test]
fn cache_duration_is_computed_when_served() {
    let world = World::new(&[("team", "puller")]);
    world.pull(&sa_token("team", "puller")).response();
    let file = world.entry_files().remove(0);
    let rewrite = |created_ago: i64, expires_in: i64| {
        let mut entry: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        let now = token::now();
        entry["createdAt"] = (now - created_ago).into();
        entry["expiresAt"] = (now + expires_in).into();
        // Rewritten the way the plugin writes: the file keeps its mode.
        std::fs::write(&file, entry.to_string()).unwrap();
    };
    let served = |world: &World| {
        let out = world.pull(&sa_token("team", "puller"));
        let duration = out.cache_seconds();
        (out.stderr.contains("from the on-disk cache"), duration)
    };
    // 30 minutes after the exchange, 2 h left: only the 30 minutes left of
    // --max-cache-duration (1h).
    rewrite(1800, 7200);
    let (hit, secs) = served(&world);
    assert!(hit);
    assert!((1795..=1800).contains(&secs), "{secs}");
    // 10 minutes left of a 40-minute credential: 80 % of what remains.
    rewrite(1800, 600);
    let (hit, secs) = served(&world);
    assert!(hit);
    assert!((475..=480).contains(&secs), "{secs}");
    // Inside its refresh margin (5 minutes): exchanged again.
    rewrite(1800, 200);
    let (hit, _) = served(&world);
    assert!(!hit);
    assert_eq!(world.exchanges(), 2);
    // With --max-cache-duration 20m the 25-minute-old entry is not served.
    rewrite(1500, 7200);
    let out = world.pull_with(
        &["--max-cache-duration", "20m"],
        &sa_token("team", "puller"),
        IDENTITY,
    );
    assert_eq!(out.response()["cacheDuration"], "20m0s");
    assert!(
        out.stderr.contains("exchanged and cached"),
        "{}",
        out.stderr
    );
    assert_eq!(world.exchanges(), 3);
}

/// Spawns the plugin without feeding stdin yet, so many can start at once.
fn spawn(args: &[String]) -> Child {
    support::plugin::piped(bin()).args(args).spawn().unwrap()
}

fn finish(child: Child) -> Run {
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Starts one plugin process per token at once (all spawned, then all
/// stdins written) and returns their runs in order.
fn stampede(world: &World, tokens: &[String]) -> Vec<Run> {
    let mut args = world.args();
    // info level: 64 processes of debug output is noise.
    support::plugin::set_flag(&mut args, "--log-level", "info");
    let mut children: Vec<Child> = tokens.iter().map(|_| spawn(&args)).collect();
    for (child, token) in children.iter_mut().zip(tokens) {
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(request(IMAGE, Some(token), IDENTITY).as_bytes())
            .unwrap();
    }
    children.into_iter().map(finish).collect()
}

#[test]
fn sixty_four_processes_for_one_key_make_one_exchange() {
    let world = World::new(&[("team", "puller")]);
    let tokens: Vec<String> = (0..64)
        .map(|i| {
            let mut spec = TokenSpec::new("team", "puller", azure::AUDIENCE);
            spec.pod_name = format!("puller-{i}");
            spec.pod_uid = format!("pod-uid-{i}");
            spec.mint()
        })
        .collect();
    let runs = stampede(&world, &tokens);
    assert_eq!(world.exchanges(), 1, "exactly one exchange upstream");
    assert_eq!(world.acr.server.request_count(), 1);
    let minted = world.acr.minted();
    for (out, token) in runs.iter().zip(&tokens) {
        assert_eq!(password(out), minted[0]);
        world.assert_no_secrets(&out.stderr, token);
    }
    assert_eq!(world.entry_files().len(), 1);
}

#[test]
fn sixty_four_processes_for_eight_keys_make_eight_exchanges() {
    let accounts: Vec<(String, String)> = (0..8)
        .map(|i| (format!("team-{i}"), format!("puller-{i}")))
        .collect();
    let trusted: Vec<(&str, &str)> = accounts
        .iter()
        .map(|(ns, name)| (ns.as_str(), name.as_str()))
        .collect();
    let world = World::new(&trusted);
    // Interleaved: 0,1,...,7,0,1,... so every key's processes start together.
    let owners: Vec<usize> = (0..64).map(|i| i % 8).collect();
    let tokens: Vec<String> = owners
        .iter()
        .map(|&k| sa_token(&accounts[k].0, &accounts[k].1))
        .collect();
    let runs = stampede(&world, &tokens);
    assert_eq!(world.exchanges(), 8, "one exchange per key");
    assert_eq!(world.acr.server.request_count(), 8);
    let mut by_key: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for (out, &k) in runs.iter().zip(&owners) {
        by_key.entry(k).or_default().insert(password(out));
    }
    let all: BTreeSet<String> = by_key
        .values()
        .map(|set| {
            assert_eq!(set.len(), 1, "one credential per key");
            set.iter().next().unwrap().clone()
        })
        .collect();
    assert_eq!(all.len(), 8, "no key got another key's credential");
    assert_eq!(all, world.acr.minted().into_iter().collect());
    assert_eq!(world.entry_files().len(), 8);
}

// ---- Faults ----

#[test]
fn a_process_killed_while_holding_the_lock_does_not_block_the_next() {
    let world = World::new(&[("team", "puller")]);
    // The first exchange never gets an answer: its process holds the lock.
    world.entra.script([Response::hang()]);
    let mut stuck = spawn(&world.args());
    stuck
        .stdin
        .take()
        .unwrap()
        .write_all(request(IMAGE, Some(&sa_token("team", "puller")), IDENTITY).as_bytes())
        .unwrap();
    wait_for("the first exchange to reach Entra", || {
        world.entra.server.request_count() == 1
    });
    let mut waiter = spawn(&world.args());
    waiter
        .stdin
        .take()
        .unwrap()
        .write_all(request(IMAGE, Some(&sa_token("team", "puller")), IDENTITY).as_bytes())
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        waiter.try_wait().unwrap().is_none(),
        "the second process must wait for the lock"
    );
    assert_eq!(world.entra.server.request_count(), 1);
    let killed_at = Instant::now();
    stuck.kill().unwrap();
    stuck.wait().unwrap();
    let out = finish(waiter);
    assert!(
        killed_at.elapsed() < Duration::from_secs(5),
        "the kernel releases a dead holder's lock at once"
    );
    assert_eq!(password(&out), world.acr.minted()[0]);
    assert!(
        out.stderr.contains("exchanged and cached"),
        "{}",
        out.stderr
    );
    assert_eq!(world.exchanges(), 2);
    // And the entry it wrote serves the next pull.
    world.pull(&sa_token("team", "puller")).response();
    assert_eq!(world.exchanges(), 2);
}

/// Each of the two upstream calls of an exchange takes this long.
const SLOW_CALL: Duration = Duration::from_millis(5_500);

/// A world whose Entra ID and ACR each take [`SLOW_CALL`] to answer, and
/// the plugin's arguments for it with `--timeout 20s`: one exchange takes
/// 11 s, more than half the deadline.
fn slow_world() -> (World, Vec<String>) {
    let world = World::new(&[("team", "puller")]);
    world.entra.delay(SLOW_CALL);
    world.acr.delay(SLOW_CALL);
    let mut args = world.args();
    support::plugin::set_flag(&mut args, "--log-level", "info");
    args.extend(["--timeout".to_string(), "20s".to_string()]);
    (world, args)
}

fn pod_token(i: usize) -> String {
    let mut spec = TokenSpec::new("team", "puller", azure::AUDIENCE);
    spec.pod_name = format!("puller-{i}");
    spec.pod_uid = format!("pod-uid-{i}");
    spec.mint()
}

fn start(args: &[String], token: &str) -> Child {
    let mut child = spawn(args);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request(IMAGE, Some(token), IDENTITY).as_bytes())
        .unwrap();
    child
}

#[test]
fn four_processes_behind_a_slow_upstream_all_get_the_one_exchange() {
    let (world, args) = slow_world();
    let started = Instant::now();
    let tokens: Vec<String> = (0..4).map(pod_token).collect();
    let children: Vec<Child> = tokens.iter().map(|t| start(&args, t)).collect();
    let runs: Vec<Run> = children.into_iter().map(finish).collect();
    let took = started.elapsed();
    let ok = runs.iter().filter(|r| r.code == Some(0)).count();
    assert_eq!(
        ok,
        4,
        "every pull succeeds: {:#?}",
        runs.iter().map(|r| &r.stderr).collect::<Vec<_>>()
    );
    assert_eq!(world.exchanges(), 1, "one exchange upstream");
    assert_eq!(world.acr.server.request_count(), 1);
    let minted = world.acr.minted();
    for (out, token) in runs.iter().zip(&tokens) {
        assert_eq!(password(out), minted[0]);
        world.assert_no_secrets(&out.stderr, token);
    }
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn a_holder_killed_mid_exchange_does_not_fail_the_waiters() {
    let (world, args) = slow_world();
    let mut holder = start(&args, &pod_token(0));
    wait_for("the holder's exchange to reach Entra", || {
        world.entra.server.request_count() == 1
    });
    let started = Instant::now();
    let waiters: Vec<Child> = (1..4).map(|i| start(&args, &pod_token(i))).collect();
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(
        world.entra.server.request_count(),
        1,
        "no waiter calls the upstream while the holder is alive"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    let runs: Vec<Run> = waiters.into_iter().map(finish).collect();
    let took = started.elapsed();
    for out in &runs {
        out.response();
    }
    let passwords: BTreeSet<String> = runs.iter().map(password).collect();
    assert_eq!(passwords.len(), 1, "the waiters share one credential");
    assert_eq!(
        world.exchanges(),
        2,
        "the killed holder's call, then one exchange for all waiters"
    );
    assert!(
        took < Duration::from_secs(20),
        "within the deadline: {took:?}"
    );
}

fn wait_for(what: &str, done: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn temp_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|x| x == "tmp"))
                .collect()
        })
        .unwrap_or_default()
}

/// strace holds the plugin inside rename(2), after the temporary file is
/// written, so it can be killed mid-write for real: no hook in the binary.
#[test]
fn a_process_killed_while_writing_leaves_no_entry_and_no_harm() {
    let world = World::new(&[("team", "puller"), ("team", "other")]);
    let mut args = vec![
        "-f".to_string(),
        "-o".into(),
        "/dev/null".into(),
        "-e".into(),
        "trace=rename,renameat,renameat2".into(),
        "-e".into(),
        "inject=rename,renameat,renameat2:delay_enter=60000000".into(),
        bin().to_str().unwrap().into(),
    ];
    args.extend(world.args());
    let mut traced = support::plugin::piped("strace")
        .args(&args)
        .process_group(0)
        .spawn()
        .expect("strace is needed for this test (apt-get install strace)");
    traced
        .stdin
        .take()
        .unwrap()
        .write_all(request(IMAGE, Some(&sa_token("team", "puller")), IDENTITY).as_bytes())
        .unwrap();
    wait_for("the entry's temporary file to be written", || {
        temp_files(&world.dir)
            .first()
            .and_then(|p| std::fs::read(p).ok())
            .is_some_and(|bytes| serde_json::from_slice::<Value>(&bytes).is_ok())
    });
    assert!(world.entry_files().is_empty(), "renamed too early");
    // Kill strace and the plugin it runs, by their process group.
    let group = traced.id().to_string();
    let status = Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .status()
        .unwrap();
    assert!(status.success());
    traced.wait().unwrap();
    assert_eq!(world.exchanges(), 1);

    // What the killed writer left is a temporary file, never an entry.
    let leftovers = temp_files(&world.dir);
    assert_eq!(leftovers.len(), 1);
    assert!(world.entry_files().is_empty());
    // The next pull misses, exchanges and writes a whole entry.
    let out = world.pull(&sa_token("team", "puller"));
    assert_eq!(password(&out), world.acr.minted()[1]);
    assert_eq!(world.exchanges(), 2);
    assert_eq!(world.entry_files().len(), 1);
    world.pull(&sa_token("team", "puller")).response();
    assert_eq!(world.exchanges(), 2);
    // Once stale, housekeeping on a later miss removes the leftover.
    let old = std::time::SystemTime::now() - Duration::from_secs(600);
    std::fs::File::options()
        .write(true)
        .open(&leftovers[0])
        .unwrap()
        .set_modified(old)
        .unwrap();
    world.pull(&sa_token("team", "other")).response();
    assert!(temp_files(&world.dir).is_empty());
}

#[test]
fn a_truncated_or_future_format_entry_is_a_miss_and_is_rewritten() {
    let world = World::new(&[("team", "puller")]);
    world.pull(&sa_token("team", "puller")).response();
    let file = world.entry_files().remove(0);
    let whole = std::fs::read(&file).unwrap();
    let future = String::from_utf8(whole.clone())
        .unwrap()
        .replace("\"format\":1", "\"format\":2");
    for (i, (broken, why)) in [
        (whole[..whole.len() / 2].to_vec(), "truncated"),
        (future.into_bytes(), "format 2"),
    ]
    .into_iter()
    .enumerate()
    {
        std::fs::write(&file, &broken).unwrap();
        let out = world.pull(&sa_token("team", "puller"));
        let pw = password(&out);
        assert!(
            out.stderr.contains("warning: ignoring cache entry"),
            "{}",
            out.stderr
        );
        assert!(out.stderr.contains(why), "{}", out.stderr);
        assert!(out.stderr.contains("it will be replaced"), "{}", out.stderr);
        assert_eq!(world.exchanges(), i + 2);
        let rewritten: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(rewritten["password"], pw.as_str());
        assert_eq!(rewritten["format"], 1);
    }
    world.pull(&sa_token("team", "puller")).response();
    assert_eq!(world.exchanges(), 3);
}

/// Mounts a tmpfs for the test and unmounts it when dropped. Needs root
/// (CAP_SYS_ADMIN), as the tests run here.
struct Mount(PathBuf);

impl Mount {
    fn tmpfs(at: &Path) -> Self {
        std::fs::create_dir_all(at).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "mode=0700,size=1m", "tmpfs", arg(at)])
            .status()
            .unwrap();
        assert!(status.success(), "mounting a tmpfs needs root");
        Mount(at.to_path_buf())
    }

    fn read_only(&self) {
        let status = Command::new("mount")
            .args(["-o", "remount,ro", arg(&self.0)])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").args(["-l", arg(&self.0)]).status();
    }
}

#[test]
fn a_read_only_cache_never_fails_a_pull() {
    let world = World::new(&[("team", "puller"), ("team", "other")]);
    let mount = Mount::tmpfs(&world.dir);
    // Filled while writable, then read-only.
    world.pull(&sa_token("team", "puller")).response();
    mount.read_only();

    // A hit needs no write at all.
    let hit = world.pull(&sa_token("team", "puller"));
    assert!(
        hit.stderr.contains("from the on-disk cache"),
        "{}",
        hit.stderr
    );
    assert_eq!(world.exchanges(), 1);
    // A miss exchanges, answers, and says it could not cache.
    for n in [2, 3] {
        let out = world.pull(&sa_token("team", "other"));
        assert_eq!(password(&out), world.acr.minted()[n - 1]);
        support::assert_says(
            &out.stderr,
            &[
                "Read-only file system",
                "the credential is returned but not cached",
            ],
        );
        assert_eq!(world.exchanges(), n);
    }

    // A cache directory that cannot even be created.
    let below = world.dir.join("sub");
    let out = world.pull_with(
        &["--cache-dir", arg(&below)],
        &sa_token("team", "other"),
        IDENTITY,
    );
    out.response();
    assert!(
        out.stderr.contains("pulling without the credential cache"),
        "{}",
        out.stderr
    );
    assert_eq!(world.exchanges(), 4);
    drop(mount);
}

#[test]
fn an_unsafe_cache_directory_is_refused_before_any_exchange() {
    let world = World::new(&[("team", "puller")]);
    let parent = world.dir.parent().unwrap().to_path_buf();
    let real = parent.join("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = parent.join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();

    let token = sa_token("team", "puller");
    let refused = |dir: &Path, needle: &str| {
        let extra = ["--cache-dir", arg(dir), "--log-format", "json"];
        let out = world.pull_with(&extra, &token, IDENTITY);
        let line = out.refused("cache", &[("flag", "--cache-dir")]);
        assert_eq!(line["service_account"], "team/puller", "{line}");
        assert!(line["fix"].is_string(), "{line}");
        assert!(support::plugin::words(&line).contains(needle), "{line}");
    };
    refused(&link, "is a symbolic link");
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o770)).unwrap();
    refused(&real, "writable by group or others (mode 0770)");
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Another user's directory, for real (the tests run as root).
    std::os::unix::fs::chown(&real, Some(4242), Some(4242)).unwrap();
    refused(&real, "is owned by uid 4242");
    assert_eq!(world.exchanges(), 0, "no token went anywhere");
    assert!(std::fs::read_dir(&real).unwrap().next().is_none());
}
