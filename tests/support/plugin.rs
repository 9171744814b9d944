//! Runs the built binary exactly as the kubelet does: the request on stdin,
//! the response read from stdout, stderr kept for the error, the exit code
//! checked. The environment is cleared so the developer's own AWS_*, proxy
//! or WICP_* variables never change a test's outcome.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// The binary under test: the Linux build, or the Windows `.exe` inside
/// [`super::windows::on_windows`].
pub fn bin() -> PathBuf {
    if super::windows::active() {
        return super::windows::exe();
    }
    PathBuf::from(env!("CARGO_BIN_EXE_wi-credential-provider"))
}

/// The providers the built binary carries, as `--version` lists them
/// (`(commit X, providers: a, b, c)`): the one list tests compare the
/// hand-written ones (docs, install.sh, config-examples) against.
pub fn carried_providers() -> Vec<String> {
    let out = Command::new(bin()).arg("--version").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let list = text
        .split_once("providers: ")
        .unwrap_or_else(|| panic!("no `providers: ` in --version: {text}"))
        .1;
    let list = list.split(')').next().unwrap();
    list.split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// One finished invocation.
#[derive(Debug)]
pub struct Run {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Run {
    /// Asserts success and returns the response, checking the exact field
    /// set the kubelet's strict decoder accepts.
    pub fn response(&self) -> Value {
        assert_eq!(self.code, Some(0), "plugin failed: {}", self.stderr);
        let text = std::str::from_utf8(&self.stdout).expect("stdout is UTF-8");
        // Exactly one JSON document (a trailing newline is fine).
        let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
        let value = stream
            .next()
            .expect("a JSON document on stdout")
            .expect("valid JSON");
        assert!(
            stream.next().is_none(),
            "more than one document on stdout: {text}"
        );
        let keys: BTreeSet<&str> = value
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            BTreeSet::from([
                "apiVersion",
                "kind",
                "cacheKeyType",
                "cacheDuration",
                "auth"
            ]),
            "response fields: {text}"
        );
        assert_eq!(value["kind"], "CredentialProviderResponse");
        for (_, entry) in value["auth"].as_object().expect("auth map") {
            let keys: BTreeSet<&str> = entry
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            assert_eq!(
                keys,
                BTreeSet::from(["username", "password"]),
                "auth entry: {text}"
            );
        }
        value
    }

    /// Like [`Run::response`], and checks that every `auth` key matches
    /// `image` under the kubelet's rules (the crate's implementation of
    /// `URLsMatch`), as the kubelet's keyring lookup will.
    pub fn response_for(&self, image: &str) -> Value {
        let value = self.response();
        for key in value["auth"].as_object().unwrap().keys() {
            assert!(
                wicp_kubelet::config::matching::matches_auth_key(key, image),
                "auth key {key:?} would never match {image:?} in the kubelet"
            );
        }
        value
    }

    /// Asserts a response keyed for `key` alone (a `--registry` pattern
    /// with a path) that the kubelet caches per image, so it is never
    /// reused for another path of the same host. Returns the response.
    #[allow(dead_code)]
    pub fn assert_path_scoped(&self, image: &str, key: &str) -> Value {
        let response = self.response_for(image);
        assert_eq!(response["cacheKeyType"], "Image", "{response}");
        let keys: Vec<&String> = response["auth"].as_object().unwrap().keys().collect();
        assert_eq!(keys, [key], "{response}");
        response
    }

    /// The response's `cacheDuration` (a Go duration, `"47m12s"`) in
    /// seconds, after asserting success.
    pub fn cache_seconds(&self) -> u64 {
        let response = self.response();
        let text = response["cacheDuration"].as_str().expect("a cacheDuration");
        let (mut total, mut number) = (0, 0);
        for c in text.chars() {
            match c {
                '0'..='9' => number = number * 10 + u64::from(c.to_digit(10).unwrap()),
                'h' => (total, number) = (total + number * 3600, 0),
                'm' => (total, number) = (total + number * 60, 0),
                's' => (total, number) = (total + number, 0),
                _ => panic!("unexpected duration {text}"),
            }
        }
        total
    }

    /// Asserts failure: non-zero exit, nothing on stdout, and one line on
    /// stderr. Returns that line.
    pub fn failure(&self) -> String {
        assert_ne!(
            self.code,
            Some(0),
            "plugin succeeded unexpectedly: {}",
            String::from_utf8_lossy(&self.stdout)
        );
        assert!(
            self.stdout.is_empty(),
            "stdout must be empty on failure: {:?}",
            String::from_utf8_lossy(&self.stdout)
        );
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| l.contains(": error: "))
            .collect();
        assert_eq!(
            lines.len(),
            1,
            "expected exactly one error line, got: {}",
            self.stderr
        );
        lines[0].to_string()
    }
}

impl Run {
    /// Asserts that none of `secrets` reached stderr: whole, or a JWT's
    /// signature alone (the part that makes it usable). A secret shorter
    /// than 8 bytes (an empty token a fake issued) proves nothing and is
    /// skipped.
    pub fn assert_no_secrets(&self, secrets: &[impl AsRef<str>]) {
        for secret in secrets.iter().map(AsRef::as_ref) {
            if secret.len() < 8 {
                continue;
            }
            assert!(
                !self.stderr.contains(secret),
                "a secret reached stderr: {}",
                self.stderr
            );
            if let Some((_, signature)) = secret.rsplit_once('.')
                && signature.len() >= 16
            {
                assert!(
                    !self.stderr.contains(signature),
                    "a token's signature reached stderr: {}",
                    self.stderr
                );
            }
        }
    }

    /// Asserts that a run with `--log-format json` was refused for the
    /// service account annotation `key` (kind and fact, not words);
    /// returns the error line.
    pub fn refused_for_annotation(&self, key: &str) -> Value {
        self.refused("annotation", &[("annotation", key)])
    }

    /// Asserts that a run with `--log-format json` refused `registry` (as
    /// the image names it) as one its provider may not serve; returns the
    /// error line.
    pub fn refused_registry(&self, registry: &str) -> Value {
        self.refused("registry", &[("registry", registry)])
    }

    /// Asserts that a run with `--log-format json` failed with an error of
    /// `kind` recording each of `facts`; returns the error line.
    pub fn refused(&self, kind: &str, facts: &[(&str, &str)]) -> Value {
        let line = self.failure_json();
        assert_eq!(line["kind"], kind, "{line}");
        for (fact, value) in facts {
            assert_eq!(line["facts"][fact], *value, "{fact}: {line}");
        }
        line
    }

    /// Asserts failure, as [`Run::failure`], of a run with `--log-format
    /// json`: returns the one error line as JSON, whose `kind` and `facts`
    /// say what failed without the message's words.
    pub fn failure_json(&self) -> Value {
        assert_ne!(self.code, Some(0), "plugin succeeded unexpectedly");
        assert!(self.stdout.is_empty(), "stdout must be empty on failure");
        let errors: Vec<Value> = self
            .stderr
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect(l))
            .filter(|l| l["level"] == "error")
            .collect();
        assert_eq!(errors.len(), 1, "expected one error line: {}", self.stderr);
        errors.into_iter().next().unwrap()
    }
}

/// For each case (extra flags, the flag at fault, words of its problem),
/// runs the plugin with `base`, the case's flags and `--log-format json` on
/// `stdin`, and checks the refusal by its facts: a config error whose
/// `flag` is the one at fault and whose `problem` holds the words.
pub fn assert_flag_refusals(base: &[&str], stdin: &[u8], cases: &[(&[&str], &str, &str)]) {
    for (flags, flag, problem) in cases {
        let mut args = base.to_vec();
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--log-format", "json"]);
        let line = run(&args, &[], stdin).failure_json();
        assert_eq!(line["kind"], "config", "{flags:?}: {line}");
        assert_eq!(line["facts"]["flag"], *flag, "{flags:?}: {line}");
        let said = line["facts"]["problem"].as_str().unwrap_or_default();
        assert!(said.contains(problem), "{flags:?}: {line}");
    }
}

/// The words of a JSON error line ([`Run::failure_json`]): its message and
/// its fix, for the needles a test still matches on.
pub fn words(line: &Value) -> String {
    format!(
        "{} {}",
        line["message"].as_str().unwrap_or_default(),
        line["fix"].as_str().unwrap_or_default()
    )
}

/// The username and password of `response`'s one auth entry, which must
/// be keyed `key`.
pub fn auth_entry<'a>(response: &'a Value, key: &str) -> (&'a str, &'a str) {
    let auth = response["auth"].as_object().expect("auth map");
    assert_eq!(auth.len(), 1, "exactly one auth entry: {response}");
    let entry = &auth[key];
    (
        entry["username"].as_str().expect("username"),
        entry["password"].as_str().expect("password"),
    )
}

/// `args` then `--log-format json`: a run whose failure is checked by its
/// kind and facts ([`Run::refused`]).
pub fn json_logs(args: &[impl AsRef<str>]) -> Vec<String> {
    let mut all: Vec<String> = args.iter().map(|a| a.as_ref().to_string()).collect();
    all.extend(["--log-format", "json"].map(String::from));
    all
}

/// `base` then `extra`, owned: the arguments of a run whose flags hold a
/// fake's address.
pub fn flags(base: &[&str], extra: &[&str]) -> Vec<String> {
    base.iter().chain(extra).map(|s| s.to_string()).collect()
}

/// Sets `flag` to `value` in `args`: replaces the value after it, or adds
/// both.
pub fn set_flag(args: &mut Vec<String>, flag: &str, value: &str) {
    match args.iter().position(|a| a == flag) {
        Some(i) => args[i + 1] = value.to_string(),
        None => args.extend([flag.to_string(), value.to_string()]),
    }
}

/// Passthrough for `harbor.test` with the audience `harbor.test`: the
/// simplest configuration that works, for tests of the plugin itself
/// rather than of a provider.
/// The registry of the tests whose upstream is the cluster's own token
/// service (token exchange, Vault, SPIFFE): a host no provider claims.
pub const REGISTRY: &str = "registry.example.com";
/// An image on [`REGISTRY`].
pub const IMAGE: &str = "registry.example.com/team/app:v1";

pub const PASSTHROUGH: &[&str] = &[
    "--provider",
    "passthrough",
    "--registry",
    "harbor.test",
    "--audience",
    "harbor.test",
];

/// A CredentialProviderRequest as the kubelet encodes it.
pub fn request(image: &str, token: Option<&str>, annotations: &[(&str, &str)]) -> String {
    let mut r = json!({
        "kind": "CredentialProviderRequest",
        "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
        "image": image,
    });
    if let Some(token) = token {
        r["serviceAccountToken"] = json!(token);
    }
    if !annotations.is_empty() {
        let map: serde_json::Map<String, Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        r["serviceAccountAnnotations"] = Value::Object(map);
    }
    r.to_string()
}

/// Runs the binary with `args` (`&str`s or `String`s), only `env` set (plus PATH), `stdin` piped.
pub fn run(args: &[impl AsRef<OsStr>], env: &[(&str, &str)], stdin: &[u8]) -> Run {
    run_program(&bin(), args, env, stdin)
}

/// Runs the binary as the kubelet does for `image`: a request with
/// `token` and `annotations` on stdin, `env` (plus PATH) its environment.
pub fn pull(
    args: &[impl AsRef<OsStr>],
    env: &[(&str, &str)],
    image: &str,
    token: &str,
    annotations: &[(&str, &str)],
) -> Run {
    run(
        args,
        env,
        request(image, Some(token), annotations).as_bytes(),
    )
}

/// `program` to be spawned as the kubelet spawns the plugin: an empty
/// environment but PATH (and Wine's, under Wine), stdin, stdout and stderr
/// piped. For a test that must hold the child (feed stdin slowly, start
/// many at once, wrap it in strace).
pub fn piped(program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new(program);
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(super::windows::env())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// [`run`] with no environment and `stdin` as text: the common case.
pub fn exec(args: &[impl AsRef<OsStr>], stdin: &str) -> Run {
    run(args, &[], stdin.as_bytes())
}

/// Runs the binary under another name (a symlink, as admins install it for
/// several provider entries; a copy named `NAME.exe` on Windows, as the
/// Windows installer writes it).
pub fn run_as(name: &str, args: &[impl AsRef<OsStr>], env: &[(&str, &str)], stdin: &[u8]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    if super::windows::active() {
        let copy = dir.path().join(format!("{name}.exe"));
        std::fs::copy(bin(), &copy).unwrap();
        return run_program(&copy, args, env, stdin);
    }
    let link = dir.path().join(name);
    std::os::unix::fs::symlink(bin(), &link).unwrap();
    run_program(&link, args, env, stdin)
}

/// Runs `program` (the binary, or a wrapper that execs it: `unshare`,
/// `strace`) as [`run`] runs the binary.
///
/// Under Wine, a run that ended by a Unix signal was ended by Wine, not by
/// the program: a Windows process ends with an exit code even when it
/// crashes (an NTSTATUS such as 0xC0000005), and a panic exits 101. Wine
/// has died so on a loaded machine (once in CI, after the plugin had
/// written its success line), so such a run is made once more.
pub fn run_program(
    program: &Path,
    args: &[impl AsRef<OsStr>],
    env: &[(&str, &str)],
    stdin: &[u8],
) -> Run {
    let run = run_once(program, args, env, stdin);
    if super::windows::active() && run.code.is_none() {
        return run_once(program, args, env, stdin);
    }
    run
}

fn run_once(program: &Path, args: &[impl AsRef<OsStr>], env: &[(&str, &str)], stdin: &[u8]) -> Run {
    let (program, first) = super::windows::wrap(program);
    let mut child = piped(program)
        .args(first)
        .args(args)
        .envs(env.iter().copied())
        .spawn()
        .expect("spawn the plugin");
    {
        let mut input = child.stdin.take().unwrap();
        // The plugin may exit before reading everything (oversized input):
        // a broken pipe here is part of the test, not a failure.
        let _ = input.write_all(stdin);
    }
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code(),
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
