//! A SPIRE agent's admin socket for the `--identity spiffe` tests: the
//! Delegated Identity API served by tests/support/spire_agent.py (real
//! gRPC with grpcio, messages generated from the repository's proto/), in
//! the moto virtualenv that `bash .ci/run` fills (grpcio, grpcio-tools).
//!
//! The agent mints RS256 JWT-SVIDs with tests/fixtures/spire-signer.key
//! under the issuer [`ISSUER`], so a registry or token service in a test
//! can trust them as it would trust a SPIRE OIDC discovery provider
//! ([`verify`]). Its configuration (entries, mode) is a file read on every
//! call: [`SpireAgent::configure`] re-registers between pulls. Every
//! request it got is kept ([`SpireAgent::requests`]). The process is
//! killed on drop.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};
use tempfile::TempDir;

pub const SIGNER_PUB: &str = include_str!("../fixtures/spire-signer.pub");
pub const ISSUER: &str = "https://oidc.spire.test";
pub const TRUST_DOMAIN: &str = "cluster.test";

/// A registration entry: the SPIFFE ID and the selectors
/// (`k8s:ns:team`) that must all be among a request's.
pub fn entry(spiffe_id: &str, selectors: &[&str]) -> Value {
    json!({"spiffe_id": spiffe_id, "selectors": selectors})
}

/// The SPIFFE ID the tests register for a service account.
pub fn id_of(namespace: &str, name: &str) -> String {
    format!("spiffe://{TRUST_DOMAIN}/ns/{namespace}/sa/{name}")
}

pub struct SpireAgent {
    child: Child,
    dir: TempDir,
    socket: PathBuf,
}

impl SpireAgent {
    /// An agent serving `entries` (mode "serve", issuer [`ISSUER`], 5-minute SVIDs).
    pub fn start(entries: Vec<Value>) -> SpireAgent {
        let dir = tempfile::Builder::new()
            .prefix("wicp-spire-")
            .tempdir()
            .expect("tempdir");
        let socket = dir.path().join("admin.sock");
        let agent = SpireAgent {
            child: spawn(dir.path(), &socket),
            dir,
            socket,
        };
        agent.configure(json!({"entries": entries}));
        agent
    }

    /// Replaces the agent's configuration: `entries`, `mode` ("serve",
    /// "not-delegate", "unavailable", "garbage", "huge", "gzip",
    /// "other-audience", "hang"), `issuer` (none:
    /// `null`), `ttl` seconds. Unset keys take the defaults.
    pub fn configure(&self, config: Value) {
        let mut full = json!({
            "entries": [],
            "mode": "serve",
            "issuer": ISSUER,
            "ttl": 300,
            "key": Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spire-signer.key"),
        });
        for (k, v) in config.as_object().expect("an object") {
            full[k] = v.clone();
        }
        let temp = self.dir.path().join("config.json.new");
        fs::write(&temp, full.to_string()).unwrap();
        fs::rename(&temp, self.dir.path().join("config.json")).unwrap();
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn socket_arg(&self) -> String {
        self.socket.display().to_string()
    }

    /// Every FetchJWTSVIDs request so far: `audience`, `selectors`
    /// (`[{type, value}]`), `pid`, `metadata` (header names) and
    /// `metadata_values`.
    pub fn requests(&self) -> Vec<Value> {
        fs::read_to_string(self.dir.path().join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for SpireAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The virtualenv's python, next to moto_server.
fn python() -> PathBuf {
    let moto = super::moto::moto_server();
    moto.parent().expect("a bin directory").join("python3")
}

fn spawn(dir: &Path, socket: &Path) -> Child {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut child = Command::new(python())
        .arg(root.join("tests/support/spire_agent.py"))
        .arg(root.join("proto"))
        .arg(socket)
        .arg(dir)
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the fake SPIRE agent (run `bash .ci/run` for grpcio)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "the fake SPIRE agent did not start");
    child
}

/// Verifies a JWT-SVID as a party federating the SPIRE server's OIDC
/// issuer does: RS256 signature with the SPIRE key, issuer, audience,
/// expiry. Returns its claims.
pub fn verify(token: &str, audience: &str) -> Result<Value, String> {
    super::token::verify_from(token, audience, ISSUER, SIGNER_PUB)
}

/// The selectors a request carried, as `type:value` strings.
pub fn selectors_of(request: &Value) -> Vec<String> {
    request["selectors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{}:{}",
                s["type"].as_str().unwrap(),
                s["value"].as_str().unwrap()
            )
        })
        .collect()
}
