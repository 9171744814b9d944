//! moto, the AWS emulator, as a real STS and ECR for the aws exchanger's
//! tests.
//!
//! `bash .ci/run` installs `moto[server]` from PyPI into a virtualenv and the
//! Makefile points `WICP_MOTO_SERVER` at its `moto_server`. We look there,
//! then in the default virtualenv, then on `PATH`; a missing moto fails the
//! test with the command that installs it, it never skips.
//!
//! The server is spawned directly (not through a shell), so the child's PID
//! is the server itself and `Drop` stops exactly it. It binds a free port on
//! 127.0.0.1, chosen just before the start; a lost race is retried on
//! another port.
//!
//! What moto does that the tests rely on (moto 5.2): STS
//! AssumeRoleWithWebIdentity accepts any token and issues credentials whose
//! access key it remembers as belonging to the role's account; ECR
//! GetAuthorizationToken returns base64 of `AWS:<account>-auth-token` for
//! the caller's account (123456789012 for keys it does not know) with
//! `expiresAt` 2015-01-01T00:00:00Z.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The role the tests' service accounts assume, and EKS's annotation for it.
pub const ROLE: &str = "arn:aws:iam::123456789012:role/pull";
pub const ROLE_ANNOTATION: &str = "eks.amazonaws.com/role-arn";

const INSTALL_HINT: &str = "run `bash .ci/run` (it installs moto[server] from PyPI into \
     ~/.cache/wicp-venv and sets WICP_MOTO_SERVER), or point WICP_MOTO_SERVER at a moto_server";

const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Where `moto_server` is, or a panic saying how to install it.
pub fn moto_server() -> PathBuf {
    let mut tried = Vec::new();
    if let Some(path) = std::env::var_os("WICP_MOTO_SERVER") {
        let path = PathBuf::from(path);
        if path.is_file() {
            return path;
        }
        tried.push(format!("WICP_MOTO_SERVER={}", path.display()));
    }
    if let Some(home) = std::env::var_os("HOME") {
        let path = Path::new(&home).join(".cache/wicp-venv/bin/moto_server");
        if path.is_file() {
            return path;
        }
        tried.push(path.display().to_string());
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join("moto_server"))
        .find(|p| p.is_file());
    if let Some(path) = on_path {
        return path;
    }
    tried.push("moto_server on PATH".into());
    panic!(
        "the aws tests need moto_server and found none (tried {}); {INSTALL_HINT}",
        tried.join(", ")
    );
}

/// A running moto server, stopped on drop.
pub struct Moto {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: TempDir,
}

impl Moto {
    pub fn start() -> Self {
        let program = moto_server();
        let dir = tempfile::Builder::new()
            .prefix("wicp-moto-")
            .tempdir()
            .expect("create moto tempdir");
        let mut last_log = String::new();
        for attempt in 0..3 {
            let port = free_port();
            let log = dir.path().join(format!("moto-{attempt}.log"));
            let file = fs::File::create(&log).expect("create moto log");
            let mut child = Command::new(&program)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .env("PYTHONUNBUFFERED", "1")
                .stdin(Stdio::null())
                .stdout(file.try_clone().expect("clone log handle"))
                .stderr(file)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("cannot run {} ({e}); {INSTALL_HINT}", program.display())
                });
            let deadline = Instant::now() + STARTUP_TIMEOUT;
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    // Most likely someone took the port between our probe and
                    // moto's bind: try another one.
                    last_log = fs::read_to_string(&log).unwrap_or_default();
                    break;
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Moto {
                        child,
                        port,
                        log,
                        _dir: dir,
                    };
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "moto_server did not listen on 127.0.0.1:{port} within {STARTUP_TIMEOUT:?}:\n{}",
                        fs::read_to_string(&log).unwrap_or_default()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("moto_server exited three times at start-up:\n{last_log}");
    }

    /// `http://127.0.0.1:PORT`: one endpoint for every emulated service.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// moto's request log, for assertion messages.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Calls STS AssumeRoleWithWebIdentity (unsigned, query protocol) the
    /// way any SDK would, and returns (AccessKeyId, SecretAccessKey,
    /// SessionToken): a test's stand-in for credentials EKS would issue.
    pub fn assume_role(&self, role_arn: &str) -> (String, String, String) {
        let body = format!(
            "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn={}&RoleSessionName=test&WebIdentityToken=x",
            super::http_server::percent_encode(role_arn)
        );
        let (status, text) = post(self.port, "application/x-www-form-urlencoded", &body);
        assert_eq!(status, 200, "moto AssumeRoleWithWebIdentity: {text}");
        (
            xml_text(&text, "AccessKeyId"),
            xml_text(&text, "SecretAccessKey"),
            xml_text(&text, "SessionToken"),
        )
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("probe a free port")
        .port()
}

/// One HTTP/1.1 POST on a fresh connection; returns status and body.
fn post(port: u16, content_type: &str, body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to moto");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("set read timeout");
    write!(
        stream,
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read moto's answer");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The text of the first `<tag>` element.
pub fn xml_text(xml: &str, tag: &str) -> String {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    xml.split_once(&open)
        .and_then(|(_, rest)| rest.split_once(&close))
        .map(|(text, _)| text.to_string())
        .unwrap_or_else(|| panic!("no <{tag}> in {xml}"))
}
