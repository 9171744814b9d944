//! The Windows build (`wi-credential-provider.exe`), exec'd as a Windows
//! kubelet execs it (request on stdin, one response on stdout, logs on
//! stderr, the exit status), under Wine, against the same loopback fakes
//! as the Linux tests: every provider's happy path and one refusal, the
//! provider from the `.exe` name, the cache (hit, miss, isolation, a
//! directory others can write refused, the private DACL it creates), the
//! stdin deadline, JSON logs, and never a secret on stderr.
//!
//! Wine 8 runs the real Win32 code paths (CreateFileW, GetSecurityInfo,
//! LockFileEx, MoveFileExW, BCryptGenRandom, the certificate chain
//! engine) but does not enforce DACLs against a running process: what is
//! checked here is that the plugin asks Windows for the right descriptor
//! and reads back what Windows reports. `make test-windows` builds the
//! `.exe` and the Wine prefix and runs these (they are ignored in a plain
//! `cargo test`, which has neither).

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::azure::{self, App, CLIENT_ID, FakeAcr, FakeEntra, TENANT};
use support::chainguard::{self, FakeChainguard, IDENTITY};
use support::google::{FakeSts as GoogleSts, GCP_CLUSTER, GCP_PROJECT};
use support::http_server::{Response, TestServer};
use support::moto::Moto;
use support::plugin::{Run, request, run, run_as};
use support::sts::{Expect, FakeSts};
use support::token::TokenSpec;
use support::token_service::{FakeService, Trust};
use support::vault::FakeVault;
use support::windows::{self, on_windows};
use support::{cloudsmith, jfrog, quay};

mod providers;
mod serving;
mod aks_install;

/// The azure provider at debug level (so that the secret checks cover
/// every log line).
const AZURE: &[&str] = &["--provider", "azure", "--log-level", "debug"];

const WHY: &str = "needs the Windows build under Wine: make test-windows";

fn exec(
    args: &[String],
    env: &[(&str, &str)],
    image: &str,
    token: &str,
    annotations: &[(&str, &str)],
) -> Run {
    on_windows(|| support::plugin::pull(args, env, image, token, annotations))
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// The one error line, with the service account it names.
fn refused(out: &Run, service_account: &str) -> String {
    let line = out.failure();
    assert!(line.contains(service_account), "{line}");
    line
}

/// Checks a success: the password the kubelet gets is the one `issued`
/// (by the fake, or stored in it) under `registry`, and neither it nor the
/// token reached stderr.
fn served(out: &Run, image: &str, registry: &str, issued: Vec<String>, token: &str) -> Value {
    let response = out.response_for(image);
    let expected = issued
        .last()
        .unwrap_or_else(|| panic!("the fake issued nothing: {}", out.stderr))
        .as_str();
    assert_eq!(
        response["auth"][registry]["password"], expected,
        "{response}"
    );
    out.assert_no_secrets(&[token, expected]);
    response
}

fn vendor_args(name: &str, url_flag: &str, url: &str, extra: &[&str]) -> Vec<String> {
    let mut args = strings(&[
        "--provider",
        name,
        "--registry",
        "registry.vendor.test",
        "--audience",
        "registry.vendor.test",
        "--log-level",
        "debug",
        url_flag,
        url,
    ]);
    args.extend(strings(extra));
    args
}

/// A vendor token service (JFrog, Quay, Cloudsmith): the token it issues
/// is the password; then a 403 is one error line naming the account.
fn vendor_case(
    name: &str,
    fake: &FakeService,
    url_flag: &str,
    extra: &[&str],
    annotations: &[(&str, &str)],
    forbidden: Response,
) {
    const IMAGE: &str = "registry.vendor.test/team/app";
    let token = TokenSpec::new("team", "puller", "registry.vendor.test").mint();
    let args = vendor_args(name, url_flag, &fake.url(), extra);
    let out = exec(&args, &[], IMAGE, &token, annotations);
    let issued = fake.issued();
    served(&out, IMAGE, "registry.vendor.test", issued, &token);
    fake.script([forbidden]);
    let out = exec(&args, &[], IMAGE, &token, annotations);
    refused(&out, "team/puller");
    out.assert_no_secrets(&[&token]);
}

const AZURE_IDENTITY: [(&str, &str); 2] = [
    ("azure.workload.identity/client-id", CLIENT_ID),
    ("azure.workload.identity/tenant-id", TENANT),
];

/// AgentBaker's credential-provider config for AKS Windows, byte for byte
/// as `Config-CredentialProvider` writes it (Azure/AgentBaker @06836ee
/// `staging/cse/windows/configfunc.ps1`: a here-string with the script's
/// CRLF line ends, `Out-File -encoding ASCII`, which adds a last CRLF).
const AKS_CONFIG: &str = "apiVersion: kubelet.config.k8s.io/v1\r\nkind: CredentialProviderConfig\r\nproviders:\r\n  - name: acr-credential-provider\r\n    matchImages:\r\n      - \"*.azurecr.io\"\r\n      - \"*.azurecr.cn\"\r\n      - \"*.azurecr.de\"\r\n      - \"*.azurecr.us\"\r\n      - \"*.*.geo.azurecr.io\"\r\n      - \"*.*.geo.azurecr.cn\"\r\n      - \"*.*.geo.azurecr.de\"\r\n      - \"*.*.geo.azurecr.us\"\r\n    defaultCacheDuration: \"10m\"\r\n    apiVersion: credentialprovider.kubelet.k8s.io/v1\r\n    args:\r\n      - c:\\k\\azure.json\r\n\r\n";

/// An AKS Windows node's disk as AgentBaker leaves it, under a temporary
/// directory: `c:\k\kubeclusterconfig.json` (`Write-KubeClusterConfig`:
/// `Out-File` without an encoding, so UTF-16LE with its mark, and
/// `ConfigArgs` as the sorted `--name=value` list, some values the two
/// characters `""`), `c:\k\kubeletstart.ps1`, the config above, `azure.json`
/// and the stock plugin installed twice (`Install-CredentialProvider`:
/// `acr-credential-provider.exe` and its extension-less twin).
struct AksWindows {
    dir: tempfile::TempDir,
}

impl AksWindows {
    fn new(release: &str, extra_args: &[String]) -> AksWindows {
        AksWindows::with(release, extra_args, AKS_CONFIG, false)
    }

    /// [`AksWindows::new`] with `config` as the credential-provider
    /// config, and (`quoted`) its flag's value in double quotes in
    /// `ConfigArgs`, as a template may write it.
    fn with(release: &str, extra_args: &[String], config: &str, quoted: bool) -> AksWindows {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let k = root.join("k");
        let bin = root.join("var/lib/kubelet/credential-provider");
        std::fs::create_dir_all(&k).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        let mut args = vec![
            "--azure-container-registry-config=c:\\k\\azure.json".to_string(),
            "--cloud-config=c:\\k\\azure.json".into(),
            "--enforce-node-allocatable=\"\"".into(),
            "--eviction-hard=\"\"".into(),
            "--image-credential-provider-bin-dir=c:\\var\\lib\\kubelet\\credential-provider".into(),
            "--image-credential-provider-config=c:\\k\\credential-provider-config.yaml".into(),
            "--kubeconfig=c:\\k\\config".into(),
            "--resolv-conf=\"\"".into(),
        ];
        args.extend(extra_args.iter().cloned());
        if quoted {
            for arg in &mut args {
                if let Some(value) = arg.strip_prefix("--image-credential-provider-config=") {
                    *arg = format!("--image-credential-provider-config=\"{value}\"");
                }
            }
        }
        args.sort();
        let json = json!({
            "Cri": {"Name": "containerd", "Images": {"Pause": "mcr.microsoft.com/oss/v2/kubernetes/pause:3.10.2"}},
            "Cni": {"Name": "azure", "Plugin": {"Name": "bridge"}},
            "Kubernetes": {
                "Source": {"Release": release},
                "ControlPlane": {"IpAddress": "10.0.0.1", "Username": "azureuser", "MasterSubnet": ""},
                "Kubelet": {"NodeLabels": "kubernetes.azure.com/role=agent", "ConfigArgs": args},
            },
            "Install": {"Destination": "c:\\k"},
        });
        let text = serde_json::to_string_pretty(&json)
            .unwrap()
            .replace('\n', "\r\n");
        let mut utf16 = vec![0xFF, 0xFE];
        for unit in format!("{text}\r\n").encode_utf16() {
            utf16.extend_from_slice(&unit.to_le_bytes());
        }
        std::fs::write(k.join("kubeclusterconfig.json"), utf16).unwrap();
        std::fs::write(
            k.join("kubeletstart.ps1"),
            "$Global:ClusterConfiguration = ConvertFrom-Json ((Get-Content \"c:\\k\\kubeclusterconfig.json\" -ErrorAction Stop) | out-string)\r\n",
        )
        .unwrap();
        std::fs::write(k.join("credential-provider-config.yaml"), config).unwrap();
        std::fs::write(
            k.join("azure.json"),
            format!("{{\"cloud\":\"AzurePublicCloud\",\"tenantId\":\"{TENANT}\",\"userAssignedIdentityID\":\"{CLIENT_ID}\",\"useManagedIdentityExtension\":true}}\r\n"),
        )
        .unwrap();
        for name in ["acr-credential-provider.exe", "acr-credential-provider"] {
            std::fs::write(bin.join(name), b"MZ stock acr-credential-provider").unwrap();
        }
        AksWindows { dir }
    }

    fn root(&self) -> String {
        windows::path(self.dir.path())
    }

    fn node(&self, command: &str, extra: &[&str]) -> Run {
        let root = self.root();
        let mut args = vec!["node", command, "--root", root.as_str()];
        args.extend_from_slice(extra);
        on_windows(|| run(&args, &[], b""))
    }

    fn config(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("k/credential-provider-config.yaml")).unwrap()
    }
}

const INSTALL: &[&str] = &[
    "--provider",
    "azure",
    "--fallback",
    "node",
    "--replace",
    "acr-credential-provider",
];

fn report(out: &Run) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The stand-in `Kubelet` service, registered in the tests' Wine prefix
/// and removed on drop.
struct KubeletService;

impl KubeletService {
    fn sc(args: &[&str]) -> std::process::Output {
        let (program, mut full) = windows::wrap(Path::new("sc"));
        full.extend(args.iter().map(std::ffi::OsString::from));
        std::process::Command::new(program)
            .args(full)
            .envs(windows::env())
            .output()
            .unwrap()
    }

    fn create(log: &Path) -> KubeletService {
        on_windows(|| {
            let _ = Self::sc(&["stop", "Kubelet"]);
            let _ = Self::sc(&["delete", "Kubelet"]);
            let exe = std::env::var_os("WICP_KUBELET_SERVICE_EXE")
                .expect("WICP_KUBELET_SERVICE_EXE: run with make test-windows");
            let bin_path = format!("{} {}", windows::path(Path::new(&exe)), windows::path(log));
            let out = Self::sc(&["create", "Kubelet", "binPath=", &bin_path]);
            assert!(out.status.success(), "sc create: {out:?}");
            // Wine's sc.exe says nothing when the service manager drops
            // the service: make sure it is there.
            let query = Self::sc(&["query", "Kubelet"]);
            assert!(
                String::from_utf8_lossy(&query.stdout).contains("SERVICE_NAME: Kubelet"),
                "sc create left no Kubelet service: {query:?}"
            );
        });
        KubeletService
    }
}

impl Drop for KubeletService {
    fn drop(&mut self) {
        on_windows(|| {
            let _ = Self::sc(&["stop", "Kubelet"]);
            let _ = Self::sc(&["delete", "Kubelet"]);
        });
    }
}

/// Every path under `dir` with the sha256 of its bytes (a folder: none).
fn tree(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    use sha2::Digest;
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.push((path.clone(), String::new()));
            out.extend(tree(&path));
        } else {
            let bytes = std::fs::read(&path).unwrap();
            let digest = sha2::Sha256::digest(&bytes);
            out.push((
                path.clone(),
                digest.iter().map(|b| format!("{b:02x}")).collect(),
            ));
        }
    }
    out.sort();
    out
}
