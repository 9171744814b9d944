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

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn the_exe_answers_version_with_every_provider() {
    let _ = WHY;
    let out = on_windows(|| run(&["--version"], &[], b""));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("wi-credential-provider "), "{text}");
    for name in [
        "aws",
        "azure",
        "chainguard",
        "cloudsmith",
        "gcp",
        "jfrog",
        "passthrough",
        "quay",
        "token-exchange",
        "vault",
    ] {
        assert!(text.contains(name), "{name} missing: {text}");
    }
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn passthrough_by_the_exe_name() {
    let token = TokenSpec::new("team", "puller", "harbor.test").mint();
    let args = ["--registry", "harbor.test", "--audience", "harbor.test"];
    let stdin = request("harbor.test/team/app", Some(&token), &[]);
    // The kubelet execs `<bin dir>\wi-credential-provider-passthrough.exe`.
    let out = on_windows(|| {
        run_as(
            "wi-credential-provider-passthrough",
            &args,
            &[],
            stdin.as_bytes(),
        )
    });
    let response = served(
        &out,
        "harbor.test/team/app",
        "harbor.test",
        vec![token.clone()],
        &token,
    );
    assert_eq!(
        response["auth"]["harbor.test"]["username"],
        "serviceaccount"
    );
    // The same name with no provider in it serves nothing by itself.
    let out = on_windows(|| run_as("wi-credential-provider", &args, &[], stdin.as_bytes()));
    let line = out.failure();
    assert!(line.contains("harbor.test"), "{line}");
    // A token for another audience: refused before anything is returned.
    let other = TokenSpec::new("team", "puller", "elsewhere.test").mint();
    let out = on_windows(|| {
        run_as(
            "wi-credential-provider-passthrough",
            &args,
            &[],
            request("harbor.test/team/app", Some(&other), &[]).as_bytes(),
        )
    });
    refused(&out, "team/puller");
    out.assert_no_secrets(&[&other]);
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

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn jfrog() {
    let fake = jfrog::start(
        Trust::service_account("team", "puller", "registry.vendor.test"),
        jfrog::Integration {
            provider_name: "k8s".into(),
            project_key: None,
            mapping: "team".into(),
            username: "k8s-team".into(),
        },
    );
    vendor_case(
        "jfrog",
        &fake,
        "--jfrog-url",
        &["--jfrog-provider-name", "k8s"],
        &[],
        jfrog::error(403, "FORBIDDEN", "no"),
    );
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn quay() {
    let fake = quay::start(
        Trust::service_account("team", "puller", "registry.vendor.test"),
        "acme+puller",
    );
    vendor_case(
        "quay",
        &fake,
        "--quay-url",
        &["--quay-organization", "acme"],
        &[("wi-credential-provider.io/quay-robot", "acme+puller")],
        quay::error(403, "no"),
    );
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn cloudsmith() {
    let fake = cloudsmith::start(
        Trust::service_account("team", "puller", "registry.vendor.test"),
        "acme",
        "puller",
    );
    vendor_case(
        "cloudsmith",
        &fake,
        "--cloudsmith-url",
        &["--cloudsmith-org", "acme"],
        &[("wi-credential-provider.io/cloudsmith-service", "puller")],
        cloudsmith::error(403, "no"),
    );
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn chainguard() {
    const IMAGE: &str = "cgr.dev/example.com/app:latest";
    let cg = FakeChainguard::start();
    let token = TokenSpec::new("team", "puller", chainguard::AUDIENCE).mint();
    let args = cg.flags(&["--provider", "chainguard", "--log-level", "debug"]);
    let annotations = [("wi-credential-provider.io/chainguard-identity", IDENTITY)];
    let out = exec(&args, &[], IMAGE, &token, &annotations);
    served(&out, IMAGE, "cgr.dev", cg.issued(), &token);
    cg.script([chainguard::grpc_error(403, 7, "permission denied")]);
    let out = exec(&args, &[], IMAGE, &token, &annotations);
    refused(&out, "team/puller");
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn vault() {
    const IMAGE: &str = "registry.example.com/team/app";
    let vault = FakeVault::kubernetes_team("vault-kept-password");
    let token = TokenSpec::new("team", "puller", "vault.cluster.test").mint();
    let args = vault.flags(&[
        "--provider",
        "vault",
        "--registry",
        "registry.example.com",
        "--audience",
        "vault.cluster.test",
        "--log-level",
        "debug",
    ]);
    let annotations = [
        ("wi-credential-provider.io/vault-role", "puller"),
        ("wi-credential-provider.io/vault-secret", "team/app"),
    ];
    let out = exec(&args, &[], IMAGE, &token, &annotations);
    served(
        &out,
        IMAGE,
        "registry.example.com",
        vec!["vault-kept-password".into()],
        &token,
    );
    for issued in vault.issued_tokens() {
        assert!(!out.stderr.contains(&issued), "{}", out.stderr);
    }
    // A role Vault does not know.
    let out = exec(
        &args,
        &[],
        IMAGE,
        &token,
        &[
            ("wi-credential-provider.io/vault-role", "nobody"),
            ("wi-credential-provider.io/vault-secret", "team/app"),
        ],
    );
    refused(&out, "team/puller");
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn token_exchange() {
    const IMAGE: &str = "registry.example.com/team/app";
    let sts = FakeSts::start(Expect::puller());
    let args = sts.entry(&["--log-level", "debug"]);
    let token = TokenSpec::new("team", "puller", "sts.cluster.test").mint();
    let out = exec(&args, &[], IMAGE, &token, &[]);
    served(&out, IMAGE, "registry.example.com", sts.issued(), &token);
    // Another service account: the server grants only team/puller.
    let other = TokenSpec::new("team", "intruder", "sts.cluster.test").mint();
    let out = exec(&args, &[], IMAGE, &other, &[]);
    refused(&out, "team/intruder");
    out.assert_no_secrets(&[&other]);
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn aws_against_moto() {
    let moto = Moto::start();
    let token = TokenSpec::new("team", "puller", "sts.amazonaws.com").mint();
    let host = "210987654321.dkr.ecr.eu-west-1.amazonaws.com";
    let image = format!("{host}/team/app");
    let args = strings(&["--provider", "aws", "--log-level", "debug"]);
    let role = [(
        "eks.amazonaws.com/role-arn",
        "arn:aws:iam::210987654321:role/ecr-pull",
    )];
    let out = exec(
        &args,
        &[("AWS_ENDPOINT_URL", &moto.url())],
        &image,
        &token,
        &role,
    );
    // moto's ECR password names the account STS's credentials belong to:
    // STS, then ECR signed with what STS returned.
    let response = served(
        &out,
        &image,
        host,
        vec!["210987654321-auth-token".into()],
        &token,
    );
    assert_eq!(response["auth"][host]["username"], "AWS");
    // STS refuses: one line naming the account and the role.
    let sts = TestServer::start(|_| {
        Response::text(
            403,
            "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>\
             <Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message>\
             </Error><RequestId>r</RequestId></ErrorResponse>",
        )
        .with_header("Content-Type", "text/xml")
    });
    let out = exec(
        &args,
        &[
            ("AWS_ENDPOINT_URL_STS", &sts.url()),
            ("AWS_ENDPOINT_URL_ECR", "http://127.0.0.1:9"),
        ],
        &image,
        &token,
        &role,
    );
    let line = refused(&out, "team/puller");
    assert!(line.contains("AccessDenied"), "{line}");
}

const AZURE_IDENTITY: [(&str, &str); 2] = [
    ("azure.workload.identity/client-id", CLIENT_ID),
    ("azure.workload.identity/tenant-id", TENANT),
];

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn azure() {
    const IMAGE: &str = "contoso.azurecr.io/team/app";
    let entra = FakeEntra::start(App::trusting("team", "puller"));
    let acr = FakeAcr::start("contoso.azurecr.io", &entra);
    let token = TokenSpec::new("team", "puller", azure::AUDIENCE).mint();
    let out = exec(
        &azure::flags(&entra, &acr, AZURE),
        &[],
        IMAGE,
        &token,
        &AZURE_IDENTITY,
    );
    served(&out, IMAGE, "contoso.azurecr.io", acr.minted(), &token);
    for issued in entra.issued() {
        assert!(!out.stderr.contains(&issued), "{}", out.stderr);
    }
    // A service account Entra has no federated credential for.
    let other = TokenSpec::new("team", "other", azure::AUDIENCE).mint();
    let out = exec(
        &azure::flags(&entra, &acr, AZURE),
        &[],
        IMAGE,
        &other,
        &AZURE_IDENTITY,
    );
    let line = refused(&out, "team/other");
    assert!(line.contains("AADSTS"), "{line}");
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn gcp() {
    const IMAGE: &str = "us-docker.pkg.dev/my-project/team/app";
    let sts = GoogleSts::start();
    let token = TokenSpec::new("team", "puller", &format!("{GCP_PROJECT}.svc.id.goog")).mint();
    let args = strings(&[
        "--provider",
        "gcp",
        "--log-level",
        "debug",
        "--gcp-project-id",
        GCP_PROJECT,
        "--gcp-cluster",
        GCP_CLUSTER,
        "--gcp-sts-endpoint",
        &sts.server.url(),
    ]);
    let out = exec(&args, &[], IMAGE, &token, &[]);
    let response = served(&out, IMAGE, "us-docker.pkg.dev", sts.issued(), &token);
    assert_eq!(
        response["auth"]["us-docker.pkg.dev"]["username"],
        "oauth2accesstoken"
    );
    sts.script([Response::json(
        403,
        json!({"error": {"code": 403, "message": "Request is prohibited by organization's policy.", "status": "PERMISSION_DENIED"}}),
    )]);
    let out = exec(&args, &[], IMAGE, &token, &[]);
    refused(&out, "team/puller");
}

/// The cache on Windows: a miss exchanges and stores, a hit answers from
/// the folder without a call, another service account never gets the
/// first one's credential, and the folder the plugin creates is private.
#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn the_cache_hits_misses_and_keeps_service_accounts_apart() {
    use std::os::unix::fs::PermissionsExt;
    const IMAGE: &str = "contoso.azurecr.io/team/app";
    let mut app = App::trusting("team", "puller");
    app.federated.push(azure::FederatedCredential {
        issuer: support::token::ISSUER.into(),
        subject: "system:serviceaccount:team:other".into(),
        audience: azure::AUDIENCE.into(),
    });
    let entra = FakeEntra::start(app);
    let acr = FakeAcr::start("contoso.azurecr.io", &entra);
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("cache");
    let cache = windows::path(&dir);
    let args = azure::flags(&entra, &acr, &[AZURE, &["--cache-dir", &cache]].concat());
    let puller = TokenSpec::new("team", "puller", azure::AUDIENCE).mint();
    let other = TokenSpec::new("team", "other", azure::AUDIENCE).mint();

    let first = exec(&args, &[], IMAGE, &puller, &AZURE_IDENTITY);
    let password = served(
        &first,
        IMAGE,
        "contoso.azurecr.io",
        acr.minted(),
        &puller,
    )["auth"]["contoso.azurecr.io"]["password"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(entra.server.request_count(), 1);
    assert!(dir.is_dir(), "the miss created the cache folder");

    let hit = exec(&args, &[], IMAGE, &puller, &AZURE_IDENTITY);
    served(
        &hit,
        IMAGE,
        "contoso.azurecr.io",
        vec![password.clone()],
        &puller,
    );
    assert_eq!(entra.server.request_count(), 1, "a hit makes no call");

    let theirs = exec(&args, &[], IMAGE, &other, &AZURE_IDENTITY);
    let response = theirs.response_for(IMAGE);
    assert_ne!(
        response["auth"]["contoso.azurecr.io"]["password"],
        password.as_str()
    );
    assert_eq!(entra.server.request_count(), 2, "another account is a miss");

    // The folder and its entries carry the descriptor the plugin asked
    // Windows for: access for SYSTEM, Administrators and the user running
    // the plugin only. Wine 8 keeps no DACL of its own: it turns the
    // descriptor into the Unix mode of the file, and a descriptor that
    // grants others nothing leaves no "other" bits (without it, the folder
    // would get the umask's 0755 and the files 0644).
    let entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    assert_eq!(entries.len(), 2, "{entries:?}");
    for path in std::iter::once(dir.clone()).chain(entries) {
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o007, 0, "{}: mode {mode:o}", path.display());
    }
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn a_cache_folder_everyone_may_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    const IMAGE: &str = "contoso.azurecr.io/team/app";
    let entra = FakeEntra::start(App::trusting("team", "puller"));
    let acr = FakeAcr::start("contoso.azurecr.io", &entra);
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("open");
    std::fs::create_dir(&dir).unwrap();
    // Wine gives a folder with no stored descriptor the DACL its Unix mode
    // means: 0777 is an entry that lets Everyone (S-1-1-0) write.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let token = TokenSpec::new("team", "puller", azure::AUDIENCE).mint();
    let args = azure::flags(
        &entra,
        &acr,
        &[AZURE, &["--cache-dir", &windows::path(&dir)]].concat(),
    );
    let out = exec(&args, &[], IMAGE, &token, &AZURE_IDENTITY);
    let line = out.failure();
    support::assert_says(&line, &["writable by group or others", "S-1-1-0"]);
    assert_eq!(entra.server.request_count(), 0, "refused before any call");
}

#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn a_stdin_that_never_closes_ends_at_the_timeout_with_json_logs() {
    use std::io::Write;
    let mut child = on_windows(|| {
        let (program, first) = windows::wrap(&windows::exe());
        support::plugin::piped(program)
            .args(first)
            .args([
                "--provider",
                "passthrough",
                "--registry",
                "r.test",
                "--timeout",
                "3s",
                "--log-format",
                "json",
            ])
            .spawn()
            .unwrap()
    });
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"{\"kind\":").unwrap();
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    let took = started.elapsed();
    drop(stdin);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(20),
        "{took:?}"
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    let errors: Vec<&Value> = lines.iter().filter(|l| l["level"] == "error").collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0]["message"].as_str().unwrap().contains("stdin"),
        "{stderr}"
    );
}

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

/// AKS Windows, kubelet 1.34 (KEP-4412 on by default): install finds the
/// flags in kubeclusterconfig.json (UTF-16), merges an entry named with
/// its `.exe` that replaces the stock plugin (and its extension-less
/// twin's entry), installs a copy of the binary under that name with a
/// private DACL, is idempotent, `doctor` passes, and `uninstall` puts
/// every byte back.
#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn aks_windows_install_is_idempotent_and_uninstall_restores_every_byte() {
    let health = TestServer::start(|_| Response::text(200, "ok"));
    let port = health.addr().port();
    let node = AksWindows::new("1.34.1", &[format!("--healthz-port={port}")]);
    let before = tree(node.dir.path());

    let dry = node.node("install", &[INSTALL, &["--dry-run"]].concat());
    assert_eq!(dry.code, Some(0), "{}\n{}", report(&dry), dry.stderr);
    assert_eq!(tree(node.dir.path()), before, "a dry run wrote");
    let text = report(&dry);
    support::assert_says(
        &text,
        &[
            "distribution: AKS Windows (AgentBaker)",
            "c:\\k\\credential-provider-config.yaml (from --image-credential-provider-config in Kubernetes.Kubelet.ConfigArgs in c:\\k\\kubeclusterconfig.json)",
            "kubelet version: 1.34 (from Kubernetes.Source.Release",
        ],
    );

    let out = node.node("install", INSTALL);
    assert_eq!(out.code, Some(0), "{}\n{}", report(&out), out.stderr);
    let config = node.config();
    assert!(
        config.contains("name: wi-credential-provider-azure.exe"),
        "{config}"
    );
    assert!(!config.contains("acr-credential-provider"), "{config}");
    support::assert_says(
        &config,
        &["c:\\k\\azure.json", "requireServiceAccount: false"],
    );
    let bin = node.dir.path().join("var/lib/kubelet/credential-provider");
    let copy = std::fs::read(bin.join("wi-credential-provider-azure.exe")).unwrap();
    assert_eq!(copy, std::fs::read(windows::exe()).unwrap());
    assert!(!bin.join("wi-credential-provider").exists());
    // The stock binaries stay: only their entry went.
    assert!(bin.join("acr-credential-provider.exe").exists());

    let again = node.node("install", INSTALL);
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert!(
        report(&again).contains("nothing to change"),
        "{}",
        report(&again)
    );

    let doctor = node.node("doctor", &[]);
    let said = report(&doctor);
    support::assert_says(
        &said,
        &[
            "wi-credential-provider-azure.exe answers",
            &format!("127.0.0.1:{port}/healthz answers ok"),
        ],
    );

    let undo = node.node("uninstall", &[]);
    assert_eq!(undo.code, Some(0), "{}\n{}", report(&undo), undo.stderr);
    assert_eq!(tree(node.dir.path()), before, "uninstall left a difference");
}

/// AKS Windows with kubelet 1.33, whose KEP-4412 gate is off by default
/// (AgentBaker does not turn it on for Windows): install refuses before
/// writing anything and names the gate; with the gate in ConfigArgs it
/// installs. EKS Windows is detected and refused with the route.
#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn a_kubelet_without_the_token_gate_and_eks_windows_are_refused_without_a_write() {
    let node = AksWindows::new("1.33.4", &[]);
    let before = tree(node.dir.path());
    let out = node.node("install", INSTALL);
    assert_eq!(out.code, Some(1), "{}", report(&out));
    let text = report(&out);
    support::assert_says(
        &text,
        &[
            "kubelet 1.33 does not accept tokenAttributes (KubeletServiceAccountTokenForCredentialProviders is off)",
            "[token-attributes.kubelet-gate]",
        ],
    );
    assert_eq!(tree(node.dir.path()), before, "a refused install wrote");

    let gated = AksWindows::new(
        "1.33.4",
        &["--feature-gates=KubeletServiceAccountTokenForCredentialProviders=true".into()],
    );
    let out = gated.node("install", INSTALL);
    assert_eq!(out.code, Some(0), "{}\n{}", report(&out), out.stderr);

    let eks = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(eks.path().join("Program Files/Amazon/EKS")).unwrap();
    let root = windows::path(eks.path());
    let out = on_windows(|| {
        run(
            &["node", "install", "--provider", "aws", "--root", &root],
            &[],
            b"",
        )
    });
    assert_eq!(out.code, Some(1));
    let text = report(&out);
    support::assert_says(
        &text,
        &[
            "distribution: EKS Windows",
            "cannot install on EKS Windows",
            "docs/windows.md#installing-by-hand",
        ],
    );

    // Another provider's executable under our name is not replaced.
    let taken = AksWindows::new("1.34.1", &[]);
    let bin = taken.dir.path().join("var/lib/kubelet/credential-provider");
    std::fs::write(
        bin.join("wi-credential-provider-azure.exe"),
        b"MZ someone else",
    )
    .unwrap();
    let before = tree(taken.dir.path());
    let out = taken.node("install", INSTALL);
    assert_eq!(out.code, Some(1));
    assert!(
        report(&out).contains("was not installed by node install"),
        "{}",
        report(&out)
    );
    assert_eq!(tree(taken.dir.path()), before);
}

/// Round-5 item 2 on Windows: an AKS bin folder whose DACL lets Everyone
/// write (Wine turns mode 0777 into that entry) is refused before
/// anything is written, naming the folder and the DACL; doctor fails the
/// binary for the same folder after a good install.
#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn aks_windows_refuses_a_bin_folder_others_may_write() {
    use std::os::unix::fs::PermissionsExt;
    let node = AksWindows::new("1.34.1", &[]);
    let bin = node.dir.path().join("var/lib/kubelet/credential-provider");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o777)).unwrap();
    let before = tree(node.dir.path());
    let out = node.node("install", INSTALL);
    assert_eq!(out.code, Some(1), "{}", report(&out));
    support::assert_says(
        &out.stderr,
        &[
            "credential-provider has a DACL that lets S-1-1-0 write",
            "nothing was changed",
            "icacls",
        ],
    );
    assert_eq!(tree(node.dir.path()), before, "a refused install wrote");

    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = node.node("install", INSTALL);
    assert_eq!(out.code, Some(0), "{}\n{}", report(&out), out.stderr);
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o777)).unwrap();
    let doctor = node.node("doctor", &[]);
    support::assert_says(&report(&doctor), &["FAIL", "binary", "S-1-1-0 write"]);
}

/// Round-5 items 4 and 7 on AKS Windows: a config flag whose value
/// AgentBaker's template wrote in double quotes is read as the kubelet
/// receives it (unquoted) and install succeeds; a custom cloud's
/// `*<registry suffix>` in the stock entry is never dropped by
/// `--replace` without a word: install refuses, writing nothing, and names
/// the `--replace NAME=PATTERN` that keeps it.
#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn aks_windows_quoted_flags_and_a_custom_clouds_pattern() {
    let quoted = AksWindows::with("1.34.1", &[], AKS_CONFIG, true);
    let out = quoted.node("install", INSTALL);
    assert_eq!(out.code, Some(0), "{}\n{}", report(&out), out.stderr);
    assert!(quoted.config().contains("wi-credential-provider-azure.exe"));

    let custom = AKS_CONFIG.replace(
        "      - \"*.*.geo.azurecr.us\"\r\n",
        "      - \"*.*.geo.azurecr.us\"\r\n      - \"*.azurecr.microsoft.scloud\"\r\n",
    );
    let node = AksWindows::with("1.34.1", &[], &custom, false);
    let before = tree(node.dir.path());
    let out = node.node("install", INSTALL);
    assert_eq!(out.code, Some(1), "{}", report(&out));
    support::assert_says(
        &out.stderr,
        &[
            "*.azurecr.microsoft.scloud",
            "--replace acr-credential-provider=*.azurecr.microsoft.scloud",
        ],
    );
    assert_eq!(tree(node.dir.path()), before, "a refused install wrote");
}

/// Round-5 item 6: the Windows kubelet finds `NAME.exe` for an entry
/// `NAME` (exec.LookPath tries PATHEXT), so check-config does too, and a
/// name in any case picks its provider, as Windows finds the file in any
/// case.
#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn windows_names_are_found_as_the_kubelet_finds_them() {
    let token = TokenSpec::new("team", "puller", "harbor.test").mint();
    let args = ["--registry", "harbor.test", "--audience", "harbor.test"];
    let stdin = request("harbor.test/team/app", Some(&token), &[]);
    let out = on_windows(|| {
        run_as(
            "WI-CREDENTIAL-PROVIDER-PASSTHROUGH",
            &args,
            &[],
            stdin.as_bytes(),
        )
    });
    served(
        &out,
        "harbor.test/team/app",
        "harbor.test",
        vec![token.clone()],
        &token,
    );

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - name: wi-credential-provider-passthrough\n    apiVersion: credentialprovider.kubelet.k8s.io/v1\n    matchImages: [\"harbor.test\"]\n    defaultCacheDuration: \"0s\"\n    args: [\"--registry\", \"harbor.test\"]\n    tokenAttributes:\n      serviceAccountTokenAudience: harbor.test\n      cacheType: Token\n      requireServiceAccount: true\n",
    )
    .unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let check = || {
        let (config, bin) = (windows::path(&config), windows::path(&bin));
        let out = on_windows(|| run(&["check-config", &config, "--bin-dir", &bin], &[], b""));
        format!("{}{}", report(&out), out.stderr)
    };
    assert!(check().contains("executable is missing"), "{}", check());
    std::fs::copy(
        windows::exe(),
        bin.join("wi-credential-provider-passthrough.exe"),
    )
    .unwrap();
    let said = check();
    assert!(
        !said.contains("executable is missing") && said.contains("0 errors"),
        "{said}"
    );
}

/// `--restart-kubelet` on AKS Windows restarts the `Kubelet` service
/// through Wine's Service Control Manager (a stand-in service,
/// tests/windows/kubelet-service.c, that records each start) and waits
/// for /healthz; when the kubelet does not come back healthy, install
/// restores every byte, restarts it once more, and remembers the change.
#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn aks_windows_restart_through_the_service_manager_and_one_rollback() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let healthy = Arc::new(AtomicBool::new(true));
    let answer = healthy.clone();
    let health = TestServer::start(move |_| {
        if answer.load(Ordering::SeqCst) {
            Response::text(200, "ok")
        } else {
            Response::text(500, "[-]ping failed")
        }
    });
    let port = health.addr().port();
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("starts.log");
    let service = KubeletService::create(&log);
    let starts = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
    };

    let node = AksWindows::new("1.34.1", &[format!("--healthz-port={port}")]);
    let before = tree(node.dir.path());
    let restart = [INSTALL, &["--restart-kubelet", "--health-timeout", "20s"]].concat();
    let out = node.node("install", &restart);
    assert_eq!(out.code, Some(0), "{}\n{}", report(&out), out.stderr);
    assert!(
        report(&out).contains(&format!(
            "restarted the Windows service Kubelet; healthy at http://127.0.0.1:{port}/healthz"
        )),
        "{}",
        report(&out)
    );
    assert_eq!(starts(), 1);
    let undo = node.node("uninstall", &[]);
    assert_eq!(undo.code, Some(0), "{}", report(&undo));
    assert_eq!(tree(node.dir.path()), before);

    healthy.store(false, Ordering::SeqCst);
    let broken = AksWindows::new("1.34.1", &[format!("--healthz-port={port}")]);
    let before = tree(broken.dir.path());
    let out = broken.node("install", &restart);
    assert_eq!(out.code, Some(1), "{}", report(&out));
    let text = report(&out);
    support::assert_says(
        &text,
        &[
            "did not come back healthy",
            "restored c:\\k\\credential-provider-config.yaml",
            r"C:\k\kubelet.err.log",
        ],
    );
    // Started for the install, then once more after the rollback.
    assert_eq!(starts(), 3);
    let mut after = tree(broken.dir.path());
    let memo = broken
        .dir
        .path()
        .join("var/lib/wi-credential-provider/node-install.failed");
    after.retain(|(p, _)| p != &memo && p != memo.parent().unwrap());
    assert_eq!(after, before, "the rollback left a difference");
    // The same change is not tried again.
    let out = broken.node("install", &restart);
    assert_eq!(out.code, Some(1));
    assert!(
        report(&out).contains("will not restart")
            || report(&out).contains("not restarting the kubelet with it again"),
        "{}",
        report(&out)
    );
    assert_eq!(starts(), 3);
    drop(service);
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

/// TLS on Windows: the certificate store's chain engine with `--ca-file`
/// on top vouches for a server whose CA only that file names; without it
/// the same server is refused; `SSL_CERT_FILE` replaces the store.
#[test]
#[ignore = "needs the Windows build under Wine: make test-windows"]
fn tls_trusts_the_store_plus_the_ca_file_or_ssl_cert_file() {
    use support::net::{CA_PEM, TlsFront};
    const IMAGE: &str = "us-docker.pkg.dev/my-project/team/app";
    let sts = GoogleSts::start();
    let front = TlsFront::start(sts.server.addr());
    let token = TokenSpec::new("team", "puller", &format!("{GCP_PROJECT}.svc.id.goog")).mint();
    let args = |extra: &[&str]| {
        let mut args = strings(&[
            "--provider",
            "gcp",
            "--gcp-project-id",
            GCP_PROJECT,
            "--gcp-cluster",
            GCP_CLUSTER,
            "--gcp-sts-endpoint",
            &front.url(),
        ]);
        args.extend(strings(extra));
        args
    };
    let ca = windows::path(Path::new(CA_PEM));
    let out = exec(&args(&["--ca-file", &ca]), &[], IMAGE, &token, &[]);
    served(&out, IMAGE, "us-docker.pkg.dev", sts.issued(), &token);
    assert_eq!(front.requests(), 1, "{}", out.stderr);

    let out = exec(&args(&[]), &[], IMAGE, &token, &[]);
    let line = refused(&out, "team/puller");
    assert_eq!(
        front.requests(),
        1,
        "no request goes over an untrusted connection"
    );
    assert!(line.to_lowercase().contains("certificate"), "{line}");

    let out = exec(&args(&[]), &[("SSL_CERT_FILE", &ca)], IMAGE, &token, &[]);
    served(&out, IMAGE, "us-docker.pkg.dev", sts.issued(), &token);
}
