//! `node install`, `node uninstall` and `node doctor` run as an admin (or
//! the DaemonSet) runs them, with `--root <copy of a fixture root>` standing
//! in for the node. Fixture roots (tests/fixtures/node/<distribution>/root)
//! hold files exactly as that distribution writes them; each README names
//! the source. The kubelet is replaced by what the commands talk to: a fake
//! `systemctl` on PATH that logs its arguments, a health endpoint on
//! 127.0.0.1 (a free port, written into the copied KubeletConfiguration),
//! and for discovery a real process whose argv[0] is `kubelet`.

use crate::support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/node").join(name)
}

/// The built binary without debug info, as a release has it (the debug
/// build is some 200 MB, which every install would copy).
fn stripped_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let tmp = dir.join(format!("wicp-node-test.{}", std::process::id()));
        std::fs::copy(support::plugin::bin(), &tmp).unwrap();
        assert!(Command::new("strip").arg(&tmp).status().unwrap().success());
        let path = dir.join("wi-credential-provider-node-test");
        std::fs::rename(&tmp, &path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    })
}

/// Every file under `root`: contents (or symlink target) and mode.
pub(crate) fn snapshot(root: &Path) -> BTreeMap<String, (Vec<u8>, u32)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let path = e.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let key = path.strip_prefix(root).unwrap().display().to_string();
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(key, (target.display().to_string().into_bytes(), 0));
            } else if meta.is_dir() {
                // Directories count too (round-4 items 7 and 8): a refused
                // install or a rollback must not leave one it created.
                out.insert(format!("{key}/"), (Vec::new(), meta.mode() & 0o7777));
                todo.push(path);
            } else {
                out.insert(key, (std::fs::read(&path).unwrap(), meta.mode() & 0o7777));
            }
        }
    }
    out
}

pub(crate) fn changed(
    a: &BTreeMap<String, (Vec<u8>, u32)>,
    b: &BTreeMap<String, (Vec<u8>, u32)>,
) -> Vec<String> {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect()
}

/// A health endpoint that answers like the kubelet's `/healthz` while
/// `healthy`, and 500 otherwise. Stopped on drop.
struct Health {
    port: u16,
    healthy: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Health {
    fn start(healthy: bool) -> Health {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let h = Arc::new(AtomicBool::new(healthy));
        let stop = Arc::new(AtomicBool::new(false));
        let (h2, stop2) = (h.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                // Read the request up to its blank line.
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let reply = if h2.load(Ordering::SeqCst) {
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
                } else {
                    "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 34\r\n\r\n[-]ping failed: reason withheld\r\n\r"
                };
                let _ = conn.write_all(reply.as_bytes());
            }
        });
        Health {
            port,
            healthy: h,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Health {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A copy of a fixture root, a fake systemctl, and a health endpoint.
struct Node {
    dir: tempfile::TempDir,
    health: Health,
}

impl Node {
    fn new(name: &str, healthy: bool) -> Node {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = dir.path().join("root");
        let status = Command::new("cp")
            .args(["-a"])
            .arg(fixture(name).join("root"))
            .arg(&root)
            .status()
            .unwrap();
        assert!(status.success());
        let health = Health::start(healthy);
        let node = Node { dir, health };
        node.set_health_port();
        std::fs::create_dir(node.dir.path().join("tmp")).unwrap();
        let fake = node.dir.path().join("fakebin");
        std::fs::create_dir(&fake).unwrap();
        let log = node.dir.path().join("systemctl.log");
        std::fs::write(
            fake.join("systemctl"),
            format!("#!/bin/sh\necho \"$*\" >> {}\n", log.display()),
        )
        .unwrap();
        std::fs::set_permissions(
            fake.join("systemctl"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        node
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// Clears `cmd`'s environment but for PATH (our fake systemctl first)
    /// and TMPDIR: the node's own, so that what a killed run leaves in its
    /// temporary directory goes when the node does.
    fn environment<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        let path = format!(
            "{}:{}",
            self.dir.path().join("fakebin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        cmd.env_clear()
            .env("PATH", path)
            .env("TMPDIR", self.dir.path().join("tmp"))
    }

    fn path(&self, p: &str) -> PathBuf {
        self.root().join(p.trim_start_matches('/'))
    }

    /// Points the copied KubeletConfiguration's healthzPort at our endpoint.
    fn set_health_port(&self) {
        let port = self.health.port;
        for p in [
            "etc/kubernetes/kubelet/config.json",
            "var/lib/kubelet/config.yaml",
            "etc/default/kubeletconfig.json",
            "home/kubernetes/kubelet-config.yaml",
        ] {
            let path = self.path(p);
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let new = if p.ends_with(".json") {
                let mut v: Value = serde_json::from_str(&text).unwrap();
                v["healthzPort"] = port.into();
                serde_json::to_string_pretty(&v).unwrap()
            } else if text.contains("healthzPort:") {
                text.replace("healthzPort: 10248", &format!("healthzPort: {port}"))
            } else {
                format!("{text}healthzPort: {port}\n")
            };
            std::fs::write(&path, new).unwrap();
        }
    }

    fn systemctl_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("systemctl.log")).unwrap_or_default()
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(support::plugin::bin());
        self.environment(&mut cmd).arg("node").args(args);
        let sub = args[0];
        cmd.arg("--root").arg(self.root());
        if !args.contains(&"--proc") {
            cmd.args(["--proc", "none"]);
        }
        if sub == "install" && !args.contains(&"--binary") {
            cmd.arg("--binary").arg(stripped_binary());
        }
        cmd.output().unwrap()
    }

    fn snapshot(&self) -> BTreeMap<String, (Vec<u8>, u32)> {
        snapshot(&self.root())
    }
}

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub(crate) fn show(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    )
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", show(out)))
}

/// install, install again (nothing changes), doctor clean, uninstall
/// (every original file byte-identical, every added file gone).
fn full_cycle(node: &Node, install: &[&str]) -> Value {
    full_cycle_with(node, install, &[])
}

/// [`full_cycle`] with `common` arguments for every command.
fn full_cycle_with(node: &Node, install: &[&str], common: &[&str]) -> Value {
    let original = node.snapshot();
    let mut args = vec!["install"];
    args.extend_from_slice(install);
    args.extend_from_slice(common);
    args.extend(["--output", "json"]);
    let first = node.run(&args);
    assert_eq!(first.status.code(), Some(0), "{}", show(&first));
    let report = json(&first);
    assert_eq!(report["changed"], true, "{report:#}");
    let after_first = node.snapshot();
    assert!(!changed(&original, &after_first).is_empty());

    let second = node.run(&args);
    assert_eq!(second.status.code(), Some(0), "{}", show(&second));
    assert_eq!(json(&second)["changed"], false, "{}", show(&second));
    assert!(
        changed(&after_first, &node.snapshot()).is_empty(),
        "second install changed files"
    );
    let again_text = node.run(&args[..args.len() - 2]);
    assert!(
        text(&again_text.stdout).contains("nothing to change"),
        "{}",
        show(&again_text)
    );

    let mut doctor_args = vec!["doctor"];
    doctor_args.extend_from_slice(common);
    let doctor = node.run(&doctor_args);
    assert_eq!(doctor.status.code(), Some(0), "doctor: {}", show(&doctor));
    assert!(!text(&doctor.stdout).contains("FAIL"), "{}", show(&doctor));

    let mut un_args = vec!["uninstall"];
    un_args.extend_from_slice(common);
    let un = node.run(&un_args);
    assert_eq!(un.status.code(), Some(0), "{}", show(&un));
    let diff = changed(&original, &node.snapshot());
    assert!(
        diff.is_empty(),
        "not restored byte-identically: {diff:?}\n{}",
        show(&un)
    );
    report
}

#[test]
fn kubeadm_full_cycle_adds_the_flags_to_kubelet_extra_args() {
    let node = Node::new("kubeadm-deb", true);
    let original = node.snapshot();
    let out = node.run(&["install", "--provider", "aws"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = text(&out.stdout);
    support::assert_says(
        &stdout,
        &[
            "distribution: kubeadm",
            "request-serviceaccounts-token-audience",
            "\"sts.amazonaws.com\"",
        ],
    );
    let env = std::fs::read_to_string(node.path("/etc/default/kubelet")).unwrap();
    assert_eq!(
        env,
        "KUBELET_EXTRA_ARGS=--image-credential-provider-config=/etc/kubernetes/credential-provider.yaml \
         --image-credential-provider-bin-dir=/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec\n"
    );
    let bin = node.path("/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec");
    assert_eq!(
        std::fs::read_link(bin.join("wi-credential-provider-aws")).unwrap(),
        Path::new("wi-credential-provider")
    );
    assert_eq!(
        std::fs::read(bin.join("wi-credential-provider")).unwrap(),
        std::fs::read(stripped_binary()).unwrap()
    );
    let config =
        std::fs::read_to_string(node.path("/etc/kubernetes/credential-provider.yaml")).unwrap();
    assert!(
        config.contains("name: wi-credential-provider-aws"),
        "{config}"
    );
    // The installed config passes the binary's own check-config.
    let check = Command::new(support::plugin::bin())
        .args(["check-config"])
        .arg(node.path("/etc/kubernetes/credential-provider.yaml"))
        .arg("--bin-dir")
        .arg(&bin)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", show(&check));
    // Back to the start, then the whole cycle.
    assert_eq!(node.run(&["uninstall"]).status.code(), Some(0));
    assert!(changed(&original, &node.snapshot()).is_empty());
    full_cycle(&node, &["--provider", "aws"]);
}

#[test]
fn eks_refuses_to_leave_the_node_role_entry_beside_ours() {
    let node = Node::new("eks-al2023", true);
    let original = node.snapshot();
    let out = node.run(&["install", "--provider", "aws"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stdout = text(&out.stdout);
    support::assert_says(
        &stdout,
        &[
            "overlap.node-identity",
            "ecr-credential-provider",
            "--replace",
        ],
    );
    assert!(
        text(&out.stderr).contains("nothing was written"),
        "{}",
        show(&out)
    );
    // Round-4 item 7: not even the state directory the lock lives in.
    assert!(!original.contains_key("var/lib/wi-credential-provider/"));
    assert!(!node.path("/var/lib/wi-credential-provider").exists());
    assert!(changed(&original, &node.snapshot()).is_empty());
}

#[test]
fn eks_replace_narrows_the_stock_entry_into_our_own_file() {
    let node = Node::new("eks-al2023", true);
    let nodeadm_config =
        std::fs::read(node.path("/etc/eks/image-credential-provider/config.json")).unwrap();
    let install = [
        "--provider",
        "aws",
        "--replace",
        "ecr-credential-provider=602401143452.dkr.ecr.us-west-2.amazonaws.com",
    ];
    let mut args = vec!["install"];
    args.extend(install);
    let out = node.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    // nodeadm's file is left alone: it would be rewritten at boot anyway.
    assert_eq!(
        std::fs::read(node.path("/etc/eks/image-credential-provider/config.json")).unwrap(),
        nodeadm_config
    );
    // Our own complete file, JSON like nodeadm's, the ECR entry narrowed.
    let own: Value = serde_json::from_slice(
        &std::fs::read(node.path("/etc/eks/wi-credential-provider/config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(own["providers"][0]["name"], "ecr-credential-provider");
    assert_eq!(
        own["providers"][0]["matchImages"],
        serde_json::json!(["602401143452.dkr.ecr.us-west-2.amazonaws.com"])
    );
    assert_eq!(own["providers"][0]["defaultCacheDuration"], "12h");
    assert_eq!(own["providers"][1]["name"], "wi-credential-provider-aws");
    // The flag: appended last in nodeadm's environment file now, and in a
    // NodeConfig drop-in so nodeadm writes it again at every boot.
    let env = std::fs::read_to_string(node.path("/etc/eks/kubelet/environment")).unwrap();
    assert!(
        env.ends_with(
            " --image-credential-provider-config=/etc/eks/wi-credential-provider/config.json"
        ),
        "{env}"
    );
    assert!(!env.ends_with('\n'));
    let drop_in =
        std::fs::read_to_string(node.path("/etc/eks/nodeadm.d/90-wi-credential-provider.yaml"))
            .unwrap();
    assert!(drop_in.contains("kind: NodeConfig"), "{drop_in}");
    assert!(drop_in.contains(
        "- --image-credential-provider-config=/etc/eks/wi-credential-provider/config.json"
    ));
    // The binary sits in nodeadm's (single) bin dir, beside the ECR plugin.
    assert!(
        node.path("/etc/eks/image-credential-provider/wi-credential-provider-aws")
            .is_symlink()
    );
    assert_eq!(node.run(&["uninstall"]).status.code(), Some(0));
    full_cycle(&node, &install);
}

#[test]
fn eks_directory_config_from_kubelet_1_34() {
    let node = Node::new("eks-al2023", true);
    let kubelet = node.path("/usr/bin/kubelet");
    std::fs::create_dir_all(kubelet.parent().unwrap()).unwrap();
    std::fs::write(
        &kubelet,
        "#!/bin/sh\necho 'Kubernetes v1.34.2-eks-113cf36'\n",
    )
    .unwrap();
    std::fs::set_permissions(&kubelet, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config =
        repo().join("config-examples/passthrough-harbor-zot/credential-provider-config.yaml");
    let config = config.to_str().unwrap();
    let report = full_cycle(&node, &["--config", config]);
    assert_eq!(
        report["discovery"]["kubelet_version"]["value"], "1.34",
        "{report:#}"
    );
    assert_eq!(report["plan"]["config"]["mode"], "directory", "{report:#}");
    assert_eq!(
        report["plan"]["config"]["path"],
        "/etc/eks/image-credential-provider/wi-credential-provider.json"
    );
}

#[test]
fn restart_only_when_changed_and_healthy() {
    let node = Node::new("kubeadm-deb", true);
    let out = node.run(&["install", "--provider", "aws", "--restart-kubelet"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("healthy at http://127.0.0.1:"),
        "{}",
        show(&out)
    );
    assert_eq!(node.systemctl_log(), "restart kubelet.service\n");
    let again = node.run(&["install", "--provider", "aws", "--restart-kubelet"]);
    assert_eq!(again.status.code(), Some(0), "{}", show(&again));
    assert!(text(&again.stdout).contains("nothing changed; the kubelet was left running"));
    assert_eq!(node.systemctl_log(), "restart kubelet.service\n");
}

#[test]
fn an_unhealthy_kubelet_rolls_everything_back() {
    let node = Node::new("kubeadm-deb", false);
    let original = node.snapshot();
    let out = node.run(&[
        "install",
        "--provider",
        "aws",
        "--restart-kubelet",
        "--health-timeout",
        "3s",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stdout = text(&out.stdout);
    support::assert_says(&stdout, &["did not come back healthy", "rolled back"]);
    assert!(
        text(&out.stderr).contains("previous files were restored"),
        "{}",
        show(&out)
    );
    assert_eq!(
        node.systemctl_log(),
        "restart kubelet.service\nrestart kubelet.service\n"
    );
    // Every file is back byte for byte; what the install added is gone,
    // but for the memo of the failed change.
    let diff = changed(&original, &node.snapshot());
    // The memo keeps its directory; every other directory the install
    // made is gone too (round-4 item 8: the bin dir's whole chain).
    assert!(!original.contains_key("usr/libexec/kubernetes/"));
    assert!(!node.path("/usr/libexec/kubernetes").exists());
    assert_eq!(
        diff,
        [
            "var/lib/wi-credential-provider/",
            "var/lib/wi-credential-provider/node-install.failed"
        ],
        "not rolled back"
    );
    // The DaemonSet's init container retries: the same change is refused
    // without touching the kubelet again, with what to do.
    let again = node.run(&[
        "install",
        "--provider",
        "aws",
        "--restart-kubelet",
        "--health-timeout",
        "3s",
    ]);
    assert_eq!(again.status.code(), Some(1), "{}", show(&again));
    assert!(
        text(&again.stdout).contains("not restarting the kubelet with it again"),
        "{}",
        show(&again)
    );
    assert!(text(&again.stdout).contains("--retry"), "{}", show(&again));
    assert_eq!(
        node.systemctl_log(),
        "restart kubelet.service\nrestart kubelet.service\n",
        "a retry restarted the kubelet again"
    );
    // The memo and its directory.
    assert_eq!(changed(&original, &node.snapshot()).len(), 2);
    // Once the kubelet is healthy, --retry tries the change once more.
    node.health.healthy.store(true, Ordering::SeqCst);
    let retry = node.run(&[
        "install",
        "--provider",
        "aws",
        "--restart-kubelet",
        "--retry",
    ]);
    assert_eq!(retry.status.code(), Some(0), "{}", show(&retry));
    assert!(
        !node
            .path("/var/lib/wi-credential-provider/node-install.failed")
            .exists()
    );
}

#[test]
fn an_invalid_merge_is_refused_and_nothing_is_written() {
    let node = Node::new("kubeadm-deb", true);
    let original = node.snapshot();
    let bad = node.dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n\
         - name: wi-credential-provider-aws\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n\
         \x20 matchImages: [\"*.dkr.ecr.*.amazonaws.com\"]\n  defaultCacheDuration: 1h\n\
         \x20 tokenAttributes: {serviceAccountTokenAudience: sts.amazonaws.com, requireServiceAccount: true}\n",
    )
    .unwrap();
    let out = node.run(&["install", "--config", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("cacheType is required"),
        "{}",
        show(&out)
    );
    assert!(
        text(&out.stdout).contains("[kubelet.cache-type]"),
        "{}",
        show(&out)
    );
    assert!(changed(&original, &node.snapshot()).is_empty());
}

#[test]
fn a_read_only_node_gets_a_clear_error_and_no_half_written_file() {
    let node = Node::new("kubeadm-deb", true);
    let original = node.snapshot();
    // The binary, from a directory anyone can read: the checkout may sit
    // below a directory only its owner can enter (a clone into `mktemp
    // -d`), and then nobody could not reach it, and the install's check
    // would stop at the unreachable binary before any write is tried.
    let readable = tempfile::tempdir().unwrap();
    std::fs::set_permissions(readable.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let binary = readable.path().join("wi-credential-provider");
    std::fs::copy(stripped_binary(), &binary).unwrap();
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let is_root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    let mut cmd = if is_root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        c.arg(&binary);
        c
    } else {
        // Not root: make the tree read-only instead.
        Command::new("chmod")
            .args(["-R", "a-w"])
            .arg(node.root())
            .status()
            .unwrap();
        Command::new(support::plugin::bin())
    };
    let out = cmd
        .env_clear()
        .args([
            "node",
            "install",
            "--provider",
            "aws",
            "--proc",
            "none",
            "--root",
        ])
        .arg(node.root())
        .arg("--binary")
        .arg(&binary)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("Permission denied"), "{}", show(&out));
    assert!(stderr.contains("fix:"), "{stderr}");
    assert!(changed(&original, &node.snapshot()).is_empty());
    if !is_root {
        Command::new("chmod")
            .args(["-R", "u+w"])
            .arg(node.root())
            .status()
            .unwrap();
    }
}

#[test]
fn doctor_reports_the_overlap_and_the_nodeadm_rewrite() {
    let node = Node::new("eks-al2023", true);
    // The trap as people set it up: our entry appended to nodeadm's file.
    let path = node.path("/etc/eks/image-credential-provider/config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let ours: Value = serde_json::json!({
        "name": "wi-credential-provider-aws",
        "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
        "matchImages": ["*.dkr.ecr.*.amazonaws.com"],
        "defaultCacheDuration": "1h",
        "tokenAttributes": {"serviceAccountTokenAudience": "sts.amazonaws.com", "cacheType": "ServiceAccount", "requireServiceAccount": true,
            "optionalServiceAccountAnnotationKeys": ["eks.amazonaws.com/ecr-role-arn", "eks.amazonaws.com/role-arn"]}
    });
    config["providers"].as_array_mut().unwrap().push(ours);
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let out = node.run(&["doctor", "--output", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let r = json(&out);
    let failed: Vec<&str> = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == "fail")
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert!(
        failed.contains(&"check-config overlap.node-identity"),
        "{failed:?}"
    );
    assert!(failed.contains(&"rewritten-at-boot"), "{failed:?}");
    assert!(failed.contains(&"binary"), "{failed:?}");
    assert_eq!(r["ok"], false);
}

/// An `--identity spiffe` entry pulls through the SPIRE agent's admin
/// socket: doctor fails while nothing is there, or a file is, and passes
/// once a socket is (it connects to none).
#[test]
fn doctor_checks_the_spire_admin_socket_of_spiffe_entries() {
    let node = Node::new("kubeadm-deb", true);
    let config = repo().join("config-examples/spiffe-zot/credential-provider-config.yaml");
    let install = node.run(&["install", "--config", config.to_str().unwrap()]);
    assert_eq!(install.status.code(), Some(0), "{}", show(&install));
    let spire = |node: &Node| {
        let out = node.run(&["doctor", "--output", "json"]);
        let r = json(&out);
        let found: Vec<Value> = r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["check"] == "spire.socket")
            .cloned()
            .collect();
        assert_eq!(found.len(), 1, "{r:#}");
        found[0].clone()
    };
    let socket = node.path("/run/spire/admin/admin.sock");
    let missing = spire(&node);
    assert_eq!(missing["verdict"], "fail", "{missing:#}");
    assert!(
        missing["message"]
            .to_string()
            .contains("/run/spire/admin/admin.sock"),
        "{missing:#}"
    );
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    std::fs::write(&socket, "not a socket").unwrap();
    assert_eq!(spire(&node)["verdict"], "fail");
    std::fs::remove_file(&socket).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let there = spire(&node);
    assert_eq!(there["verdict"], "ok", "{there:#}");
}

#[test]
fn doctor_reports_an_unhealthy_kubelet() {
    let node = Node::new("kubeadm-deb", false);
    let install = node.run(&["install", "--provider", "aws"]);
    assert_eq!(install.status.code(), Some(0), "{}", show(&install));
    let out = node.run(&["doctor"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stdout = text(&out.stdout);
    support::assert_says(
        &stdout,
        &["ok   discovery", "FAIL health: http://127.0.0.1:", "500"],
    );
}

#[test]
fn nothing_found_changes_nothing_and_says_what_to_add_where() {
    let node = Node::new("kubeadm-deb", true);
    // A bare root: no unit, no distribution marker, no kubelet process.
    std::fs::remove_dir_all(node.path("/usr/lib/systemd")).unwrap();
    let original = node.snapshot();
    let out = node.run(&["install", "--provider", "aws"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    support::assert_says(
        &stderr,
        &[
            "found no kubelet credential-provider set-up",
            "KUBELET_EXTRA_ARGS in /etc/default/kubelet",
            "nothing was changed",
        ],
    );
    assert!(changed(&original, &node.snapshot()).is_empty());
    let doctor = node.run(&["doctor"]);
    assert_eq!(doctor.status.code(), Some(1));
    assert!(
        text(&doctor.stdout).contains("FAIL discovery"),
        "{}",
        show(&doctor)
    );
}

#[test]
fn dry_run_writes_nothing() {
    let node = Node::new("eks-al2023", true);
    let original = node.snapshot();
    let out = node.run(&[
        "install",
        "--provider",
        "aws",
        "--replace",
        "ecr-credential-provider",
        "--dry-run",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = text(&out.stdout);
    support::assert_says(
        &stdout,
        &[
            "would: removed ecr-credential-provider (--replace)",
            "would: write /etc/eks/nodeadm.d/90-wi-credential-provider.yaml",
        ],
    );
    assert!(changed(&original, &node.snapshot()).is_empty());
}

#[test]
fn aks_merges_into_agentbakers_yaml_and_narrows_the_node_entry() {
    let node = Node::new("aks", true);
    // AgentBaker writes its flags file 0600; git keeps only 0644 or 0755,
    // so the fixture gets its real mode here.
    std::fs::set_permissions(
        node.path("/etc/default/kubelet"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let install = [
        "--provider",
        "azure",
        "--replace",
        "acr-credential-provider=contosoregistry.azurecr.io",
    ];
    let report = full_cycle(&node, &install);
    assert_eq!(report["plan"]["config"]["mode"], "file", "{report:#}");
    assert_eq!(
        report["plan"]["config"]["path"],
        "/var/lib/kubelet/credential-provider-config.yaml"
    );
    assert!(
        report["discovery"]["credential_config"]["source"]
            .as_str()
            .unwrap()
            .contains("systemd unit kubelet.service")
    );
    // Installed again to look at the result: YAML, AgentBaker's entry kept
    // in place with its args, narrowed; ours after it.
    let mut args = vec!["install"];
    args.extend(install);
    assert_eq!(node.run(&args).status.code(), Some(0));
    let text =
        std::fs::read_to_string(node.path("/var/lib/kubelet/credential-provider-config.yaml"))
            .unwrap();
    let doc: Value = serde_json::to_value(yaml_to_json(&text)).unwrap();
    assert_eq!(doc["providers"][0]["name"], "acr-credential-provider");
    assert_eq!(
        doc["providers"][0]["args"],
        serde_json::json!(["/etc/kubernetes/azure.json"])
    );
    assert_eq!(
        doc["providers"][0]["matchImages"],
        serde_json::json!(["contosoregistry.azurecr.io"])
    );
    assert_eq!(doc["providers"][1]["name"], "wi-credential-provider-azure");
    // AgentBaker's mode on the flags file is kept.
    assert_eq!(
        std::fs::metadata(node.path("/etc/default/kubelet"))
            .unwrap()
            .mode()
            & 0o777,
        0o600
    );
}

fn yaml_to_json(text: &str) -> Value {
    // The written YAML, read back as JSON values for the assertions.
    let value: yaml_serde::Value = yaml_serde::from_str(text).unwrap();
    serde_json::to_value(&value).unwrap()
}

#[test]
fn gke_cos_merges_into_cri_auth_config_and_warns_about_the_tmpfs() {
    let node = Node::new("gke-cos", true);
    let install = [
        "--provider",
        "gcp",
        "--replace",
        "auth-provider-gcp=gke.gcr.io",
    ];
    full_cycle(&node, &install);
    let mut args = vec!["install"];
    args.extend(install);
    assert_eq!(node.run(&args).status.code(), Some(0));
    assert!(
        node.path("/home/kubernetes/bin/wi-credential-provider-gcp")
            .is_symlink()
    );
    let doctor = node.run(&["doctor"]);
    let stdout = text(&doctor.stdout);
    support::assert_says(&stdout, &["WARN rewritten-at-boot", "tmpfs"]);
}

fn write_health_config(node: &Node, path: &str) {
    let p = node.path(path);
    std::fs::write(
        &p,
        format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: {}\n", node.health.port),
    )
    .unwrap();
}

#[test]
fn k3s_uses_its_built_in_paths() {
    let node = Node::new("k3s", true);
    write_health_config(&node, "/etc/rancher/k3s/kubelet-health.yaml");
    let common = ["--kubelet-config", "/etc/rancher/k3s/kubelet-health.yaml"];
    let report = full_cycle_with(&node, &["--provider", "aws", "--restart-kubelet"], &common);
    assert_eq!(
        report["plan"]["config"]["path"],
        "/var/lib/rancher/credentialprovider/config.yaml"
    );
    assert_eq!(
        report["plan"]["bin_dir"],
        "/var/lib/rancher/credentialprovider/bin"
    );
    assert_eq!(node.systemctl_log(), "restart k3s.service\n");
}

#[test]
fn k3s_refuses_a_config_directory_it_would_ignore() {
    let node = Node::new("k3s", true);
    std::fs::create_dir_all(node.path("/var/lib/rancher/credentialprovider/config.yaml")).unwrap();
    let original = node.snapshot();
    let out = node.run(&["install", "--provider", "aws"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("is a directory"),
        "{}",
        show(&out)
    );
    assert!(changed(&original, &node.snapshot()).is_empty());
}

#[test]
fn rke2_uses_the_same_built_in_paths() {
    let node = Node::new("rke2", true);
    write_health_config(&node, "/etc/rancher/rke2/kubelet-health.yaml");
    let common = ["--kubelet-config", "/etc/rancher/rke2/kubelet-health.yaml"];
    let report = full_cycle_with(&node, &["--provider", "gcp", "--restart-kubelet"], &common);
    assert_eq!(report["discovery"]["distro"], "rke2");
    assert_eq!(node.systemctl_log(), "restart rke2-server.service\n");
}

/// `node install` on a node system it cannot change: exit 1, the route
/// on stderr (`says`), nothing written, and doctor fails the distribution.
fn refused_with_nothing_written(fixture: &str, says: &[&str]) {
    let node = Node::new(fixture, true);
    let original = node.snapshot();
    let out = node.run(&["install", "--provider", "aws"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    support::assert_says(&text(&out.stderr), says);
    assert!(changed(&original, &node.snapshot()).is_empty());
    let doctor = node.run(&["doctor"]);
    assert_eq!(doctor.status.code(), Some(1));
    assert!(
        text(&doctor.stdout).contains("FAIL distribution"),
        "{}",
        show(&doctor)
    );
}

#[test]
fn bottlerocket_is_refused_with_the_supported_route() {
    refused_with_nothing_written(
        "bottlerocket",
        &["cannot install on Bottlerocket", "custom variant"],
    );
}

#[test]
fn talos_is_refused_with_the_extension_and_the_render_command() {
    refused_with_nothing_written(
        "talos",
        &[
            "cannot install on Talos",
            "talos-extension",
            "node render talos --talos-version",
        ],
    );
}

#[test]
fn microshift_is_refused_with_the_keys_it_will_read() {
    refused_with_nothing_written(
        "microshift",
        &[
            "cannot install on MicroShift",
            "kubelet.imageCredentialProviderConfigPath",
            "/etc/microshift/config.d/",
        ],
    );
}

#[test]
fn openshift_is_refused_with_the_render_command() {
    refused_with_nothing_written(
        "openshift",
        &["cannot install on OpenShift", "node render openshift"],
    );
}

/// Merge golden files: tests/fixtures/node/merge/<case>/{before,ours.yaml,after}.
/// WICP_UPDATE_GOLDEN=1 rewrites `after` (then review the diff).
#[test]
fn merge_golden_files() {
    use wicp_kubelet::config::merge::{self, Format, Replace};
    let dir = repo().join("tests/fixtures/node/merge");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(cases.len() >= 3, "{cases:?}");
    for case in cases {
        let files: Vec<PathBuf> = std::fs::read_dir(&case)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        let find = |stem: &str| {
            files
                .iter()
                .find(|p| p.file_stem().unwrap() == stem)
                .cloned()
        };
        let before = find("before").unwrap();
        let after = case.join(format!(
            "after.{}",
            before.extension().unwrap().to_str().unwrap()
        ));
        let ours_doc =
            merge::parse(&std::fs::read(case.join("ours.yaml")).unwrap(), &case).unwrap();
        let ours = merge::providers(&ours_doc);
        let replace: Vec<Replace> = std::fs::read_to_string(case.join("replace"))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| l.parse().unwrap())
            .collect();
        let merged = merge::merge(
            Some(&std::fs::read(&before).unwrap()),
            &before,
            Format::of(&before),
            &ours,
            &replace,
        )
        .unwrap();
        let bytes = merged.bytes.expect("the merge changes something");
        if std::env::var_os("WICP_UPDATE_GOLDEN").is_some() {
            std::fs::write(&after, &bytes).unwrap();
        }
        assert_eq!(
            text(&bytes),
            std::fs::read_to_string(&after).unwrap(),
            "{}",
            case.display()
        );
        // Merging again into the result changes nothing, byte for byte.
        let again =
            merge::merge(Some(&bytes), &after, Format::of(&after), &ours, &replace).unwrap();
        assert!(
            again.bytes.is_none(),
            "{}: second merge changed the file",
            case.display()
        );
    }
}

#[test]
fn install_sh_checks_the_checksum_then_hands_over() {
    let node = Node::new("kubeadm-deb", true);
    let release = node.dir.path().join("release");
    std::fs::create_dir(&release).unwrap();
    let binary = release.join("wi-credential-provider-0.0.0-linux-test");
    std::fs::copy(stripped_binary(), &binary).unwrap();
    let sum = Command::new("sha256sum").arg(&binary).output().unwrap();
    let hex = text(&sum.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let script = repo().join("node-install/install.sh");
    let run = |sha: &str| {
        Command::new("busybox")
            .arg("sh")
            .arg(&script)
            .args(["--node", "--sha256", sha, "--binary"])
            .arg(&binary)
            .arg("--root")
            .arg(node.root())
            .args(["--", "--provider", "aws", "--proc", "none"])
            .env_clear()
            .env(
                "PATH",
                format!(
                    "{}:/usr/bin:/bin",
                    node.dir.path().join("fakebin").display()
                ),
            )
            .output()
            .unwrap()
    };
    let original = node.snapshot();
    let bad = run(&"0".repeat(64));
    assert_eq!(bad.status.code(), Some(1), "{}", show(&bad));
    assert!(
        text(&bad.stderr).contains("sha256 mismatch"),
        "{}",
        show(&bad)
    );
    assert!(changed(&original, &node.snapshot()).is_empty());
    let out = run(&hex);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(text(&out.stdout).contains("handing over"), "{}", show(&out));
    assert!(
        node.path("/etc/kubernetes/credential-provider.yaml")
            .is_file()
    );
    assert!(
        std::fs::read_to_string(node.path("/etc/default/kubelet"))
            .unwrap()
            .contains("--image-credential-provider-config=")
    );
}

#[test]
fn a_failed_second_install_rolls_back_to_the_first() {
    let node = Node::new("kubeadm-deb", true);
    let first = node.run(&["install", "--provider", "aws"]);
    assert_eq!(first.status.code(), Some(0), "{}", show(&first));
    let installed = node.snapshot();
    node.health.healthy.store(false, Ordering::SeqCst);
    let out = node.run(&[
        "install",
        "--provider",
        "aws",
        "--provider",
        "azure",
        "--restart-kubelet",
        "--health-timeout",
        "2s",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let diff: Vec<String> = changed(&installed, &node.snapshot())
        .into_iter()
        .filter(|p| p != "var/lib/wi-credential-provider/node-install.failed")
        .collect();
    assert!(
        diff.is_empty(),
        "not back to the first install: {diff:?}\n{}",
        show(&out)
    );
    // And uninstall still takes the node back to the start.
    node.health.healthy.store(true, Ordering::SeqCst);
    let un = node.run(&["uninstall"]);
    assert_eq!(un.status.code(), Some(0), "{}", show(&un));
    let original = snapshot(&fixture("kubeadm-deb").join("root"));
    let diff: Vec<String> = changed(&original, &node.snapshot())
        .into_iter()
        .filter(|p| p != "var/lib/kubelet/config.yaml") // its health port was set by the test
        .collect();
    assert!(diff.is_empty(), "{diff:?}");
}

// ---------------------------------------------------------------------
// The installer as the DaemonSet really runs it, and on a hostile node.
// ---------------------------------------------------------------------

/// Runs `node ARGS` the way the DaemonSet does, in namespaces made here:
/// a PID namespace whose PID 1 stands for the host's init (in this test's
/// network namespace, where the health endpoint listens), a fake kubelet
/// started from the node root's own `/usr/bin/kubelet` (a copy of dash,
/// root-owned) and named by a fake systemctl as the unit's MainPID, and
/// the installer in a network and mount namespace of its own with the
/// node root bind-mounted at `host/`, as a pod with hostPID sees it.
/// With `hostile`, a tenant's process named `kubelet` runs first (a lower
/// PID) in its own mount and PID namespace, pointing at a tenant's paths.
fn daemonset_run(node: &Node, hostile: bool, kubelet_args: &[&str], args: &[&str]) -> Output {
    daemonset_run_as(node, hostile, true, kubelet_args, args)
}

/// [`daemonset_run`]; without `systemd`, `systemctl show` fails.
fn daemonset_run_as(
    node: &Node,
    hostile: bool,
    systemd: bool,
    kubelet_args: &[&str],
    args: &[&str],
) -> Output {
    let dir = node.dir.path();
    let root = node.root();
    std::fs::create_dir_all(root.join("usr/bin")).unwrap();
    std::fs::copy("/bin/dash", root.join("usr/bin/kubelet")).unwrap();
    std::fs::set_permissions(
        root.join("usr/bin/kubelet"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("host")).unwrap();
    std::fs::create_dir_all(dir.join("tenant")).unwrap();
    std::fs::copy("/bin/dash", dir.join("tenant/kubelet")).unwrap();
    // systemctl: `show` answers from the fake kubelet's pid file, the rest
    // is logged as before.
    let log = dir.join("systemctl.log");
    std::fs::write(
        dir.join("fakebin/systemctl"),
        format!(
            "#!/bin/sh\nif [ \"$1\" = show ]; then {answer}; fi\necho \"$*\" >> {log}\n",
            answer = if systemd {
                format!(
                    "pid=$(cat {d}/kubelet.pid); echo MainPID=$pid; echo ControlGroup=$(sed -n 's/^0:://p' /proc/$pid/cgroup); exit 0",
                    d = dir.display()
                )
            } else {
                "exit 1".to_string()
            },
            log = log.display()
        ),
    )
    .unwrap();
    let quote = |w: &str| format!("'{}'", w.replace('\'', "'\\''"));
    let kubelet: Vec<String> = kubelet_args.iter().map(|a| quote(a)).collect();
    let mut install: Vec<String> = vec![
        quote(support::plugin::bin().to_str().unwrap()),
        "node".into(),
    ];
    install.extend(args.iter().map(|a| quote(a)));
    install.extend([
        "--root".into(),
        quote(dir.join("host").to_str().unwrap()),
        "--proc".into(),
        "/proc".into(),
    ]);
    if args[0] == "install" {
        install.extend([
            "--binary".into(),
            quote(stripped_binary().to_str().unwrap()),
        ]);
    }
    let hostile_line = if hostile {
        format!(
            "unshare --mount --pid --fork --mount-proc {t}/kubelet -c 'while :; do sleep 1; done' --image-credential-provider-config=/tenant/config.yaml --image-credential-provider-bin-dir=/tenant/bin &\nsleep 0.2\n",
            t = dir.join("tenant").display()
        )
    } else {
        String::new()
    };
    let script = format!(
        "set -e\ncd {d}\n{hostile_line}{root}/usr/bin/kubelet -c 'while :; do sleep 1; done' {kubelet} &\necho $! > {d}/kubelet.pid\nsleep 0.2\nset +e\nunshare --net --mount sh -c 'ip link set lo up; mount --bind {root} {d}/host && exec \"$@\"' sh {install} > {d}/out 2> {d}/err\necho $? > {d}/rc\n",
        d = dir.display(),
        root = root.display(),
        kubelet = kubelet.join(" "),
        install = install.join(" "),
    );
    std::fs::write(dir.join("host-init.sh"), script).unwrap();
    let path = format!(
        "{}:{}",
        dir.join("fakebin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let status = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "sh"])
        .arg(dir.join("host-init.sh"))
        .env_clear()
        .env("PATH", path)
        .status()
        .unwrap();
    assert!(status.success(), "the namespace harness failed");
    let rc: i32 = std::fs::read_to_string(dir.join("rc"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    Output {
        status: std::process::ExitStatus::from_raw(rc << 8),
        stdout: std::fs::read(dir.join("out")).unwrap(),
        stderr: std::fs::read(dir.join("err")).unwrap(),
    }
}

const REAL_KUBELET: [&str; 4] = [
    "--config=/var/lib/kubelet/config.yaml",
    "--image-credential-provider-config=/etc/kubernetes/from-proc.yaml",
    "--image-credential-provider-bin-dir",
    "/opt/from-proc/bin",
];

#[test]
fn from_the_daemonsets_namespaces_the_real_kubelet_is_restarted_once_and_found_healthy() {
    let node = Node::new("kubeadm-deb", true);
    let out = daemonset_run(
        &node,
        true,
        &REAL_KUBELET,
        &[
            "install",
            "--provider",
            "azure",
            "--restart-kubelet",
            "--health-timeout",
            "10s",
            "--output",
            "json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let r = json(&out);
    assert_eq!(r["discovery"]["flags_from"]["kind"], "process", "{r:#}");
    assert!(
        r["discovery"]["credential_config"]["source"]
            .as_str()
            .unwrap()
            .contains("main process of kubelet.service"),
        "{r:#}"
    );
    assert!(
        r["restart"].as_str().unwrap().contains("healthy at"),
        "{r:#}"
    );
    // The real kubelet's paths, never the tenant's.
    assert!(node.path("/etc/kubernetes/from-proc.yaml").is_file());
    assert!(
        node.path("/opt/from-proc/bin/wi-credential-provider-azure")
            .is_symlink()
    );
    assert!(!node.path("/tenant").exists());
    assert!(!node.dir.path().join("tenant/config.yaml").exists());
    let ignored = r["discovery"]["ignored_processes"].to_string();
    assert!(
        ignored.contains("not kubelet.service's main process"),
        "{r:#}"
    );
    assert_eq!(node.systemctl_log(), "restart kubelet.service\n");
}

#[test]
fn from_the_daemonsets_namespaces_an_unhealthy_kubelet_is_rolled_back_once_and_not_again() {
    let node = Node::new("kubeadm-deb", false);
    let original = node.snapshot();
    let args = [
        "install",
        "--provider",
        "azure",
        "--restart-kubelet",
        "--health-timeout",
        "3s",
    ];
    let out = daemonset_run(&node, false, &REAL_KUBELET, &args);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(text(&out.stdout).contains("rolled back"), "{}", show(&out));
    assert_eq!(
        node.systemctl_log(),
        "restart kubelet.service\nrestart kubelet.service\n"
    );
    let again = daemonset_run(&node, false, &REAL_KUBELET, &args);
    assert_eq!(again.status.code(), Some(1), "{}", show(&again));
    assert_eq!(
        node.systemctl_log(),
        "restart kubelet.service\nrestart kubelet.service\n",
        "the retry restarted the kubelet: {}",
        show(&again)
    );
    let diff: Vec<String> = changed(&original, &node.snapshot())
        .into_iter()
        // The test's own kubelet, put in usr/bin/ after the snapshot.
        .filter(|p| !p.starts_with("usr/bin/"))
        .collect();
    assert_eq!(
        diff,
        [
            "var/lib/wi-credential-provider/",
            "var/lib/wi-credential-provider/node-install.failed"
        ]
    );
    node.health.healthy.store(true, Ordering::SeqCst);
}

#[test]
fn without_systemd_a_tenants_kubelet_is_never_trusted() {
    // systemctl answers nothing: only processes in PID 1's mount namespace,
    // outside pod cgroups, running a root-owned file of the node count.
    let node = Node::new("kubeadm-deb", true);
    let out = daemonset_run_as(
        &node,
        true,
        false,
        &REAL_KUBELET,
        &["doctor", "--output", "json"],
    );
    let r = json(&out);
    let ignored = r["discovery"]["ignored_processes"].to_string();
    assert!(ignored.contains("another mount namespace"), "{r:#}");
    assert_eq!(
        r["discovery"]["credential_config"]["value"], "/etc/kubernetes/from-proc.yaml",
        "{r:#}"
    );
}

/// `node ARGS` under strace, killed with SIGKILL at the `n`th call that
/// changes the file system (rename, link, unlink, mkdir, fsync).
fn run_killed_at(node: &Node, args: &[&str], n: u32) -> Output {
    let mut cmd = Command::new("strace");
    node.environment(&mut cmd)
        .args(["-o", "/dev/null", "-e"])
        .arg(format!(
            "inject=rename,renameat,renameat2,symlinkat,unlinkat,mkdirat,fsync:signal=KILL:when={n}"
        ))
        .arg(support::plugin::bin())
        .arg("node")
        .args(args)
        .arg("--root")
        .arg(node.root())
        .args(["--proc", "none"]);
    if args[0] == "install" {
        cmd.arg("--binary").arg(stripped_binary());
    }
    cmd.output().unwrap()
}

/// A failed uninstall says why on stderr, not only in its report on
/// stdout: the DaemonSet's log, and a script's `2>`, read stderr.
#[test]
fn a_failed_uninstall_says_why_on_stderr() {
    let node = Node::new("kubeadm-deb", true);
    let manifest = node.path("/var/lib/wi-credential-provider/node-install.json");
    std::fs::create_dir_all(manifest.parent().unwrap()).unwrap();
    std::fs::write(&manifest, "{ not json").unwrap();
    std::fs::set_permissions(&manifest, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = node.run(&["uninstall"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("node uninstall: "))
        .unwrap_or_else(|| panic!("no error line on stderr: {}", show(&out)));
    assert!(line.contains("node-install.json"), "{line}");
    assert!(text(&out.stdout).contains("error: "), "{}", show(&out));
    // In JSON, the line a script reads: the error's kind and its fix.
    let mut cmd = Command::new(support::plugin::bin());
    let out = node
        .environment(&mut cmd)
        .args([
            "--log-format",
            "json",
            "node",
            "uninstall",
            "--proc",
            "none",
        ])
        .arg("--root")
        .arg(node.root())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    let errors: Vec<Value> = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["level"] == "error")
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    let line = &errors[0];
    assert!(line["kind"].is_string(), "{line}");
    assert!(line["fix"].is_string(), "{line}");
    assert!(
        line["message"]
            .as_str()
            .unwrap()
            .starts_with("node uninstall: "),
        "{line}"
    );
}

#[test]
fn a_sigkill_at_every_step_leaves_a_node_that_uninstall_restores_and_a_rerun_completes() {
    assert!(
        Path::new("/usr/bin/strace").is_file(),
        "strace is installed (.ci/run installs it)"
    );
    let install = ["install", "--provider", "aws", "--provider", "gcp"];
    let mut n = 1;
    loop {
        let node = Node::new("kubeadm-deb", true);
        let original = node.snapshot();
        let out = run_killed_at(&node, &install, n);
        if out.status.code() == Some(0) {
            assert!(n > 5, "the install made only {n} changes");
            break;
        }
        assert_eq!(out.status.code(), None, "killed at {n}: {}", show(&out));
        // Uninstall takes the node back, byte for byte.
        let un = node.run(&["uninstall"]);
        assert_eq!(
            un.status.code(),
            Some(0),
            "after a kill at {n}: {}",
            show(&un)
        );
        let diff = changed(&original, &node.snapshot());
        assert!(
            diff.is_empty(),
            "after a kill at {n}, uninstall left {diff:?}\n{}",
            show(&un)
        );
        // Killed again at the same point, a re-run completes it.
        let _ = run_killed_at(&node, &install, n);
        let again = node.run(&install);
        assert_eq!(
            again.status.code(),
            Some(0),
            "re-run after a kill at {n}: {}",
            show(&again)
        );
        let doctor = node.run(&["doctor"]);
        assert!(
            !text(&doctor.stdout).contains("FAIL check-config"),
            "{}",
            show(&doctor)
        );
        let un = node.run(&["uninstall"]);
        assert_eq!(un.status.code(), Some(0), "{}", show(&un));
        let diff = changed(&original, &node.snapshot());
        assert!(
            diff.is_empty(),
            "after a kill at {n} and a re-run, uninstall left {diff:?}"
        );
        n += 1;
        assert!(n < 80, "the install never finished under strace");
    }
}

#[test]
fn concurrent_installs_lose_no_record() {
    let node = Node::new("kubeadm-deb", true);
    let original = node.snapshot();
    let node = Arc::new(node);
    let handles: Vec<_> = [
        vec!["install", "--provider", "aws"],
        vec!["install", "--provider", "azure"],
        vec!["install", "--provider", "gcp"],
        vec!["install", "--provider", "aws", "--provider", "gcp"],
        vec!["install", "--provider", "azure", "--provider", "gcp"],
    ]
    .into_iter()
    .map(|args| {
        let node = node.clone();
        std::thread::spawn(move || node.run(&args))
    })
    .collect();
    for h in handles {
        let out = h.join().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    }
    let config =
        std::fs::read_to_string(node.path("/etc/kubernetes/credential-provider.yaml")).unwrap();
    for p in ["aws", "azure", "gcp"] {
        assert!(
            config.contains(&format!("wi-credential-provider-{p}")),
            "{config}"
        );
    }
    let un = node.run(&["uninstall"]);
    assert_eq!(un.status.code(), Some(0), "{}", show(&un));
    let diff = changed(&original, &node.snapshot());
    assert!(diff.is_empty(), "{diff:?}\n{}", show(&un));
}

#[test]
fn a_fifo_a_device_or_a_deep_file_as_config_is_refused_at_once() {
    let node = Node::new("kubeadm-deb", true);
    let config = node.path("/etc/kubernetes/credential-provider.yaml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    // The kubelet's config: a FIFO (a read would block for ever).
    assert!(
        Command::new("mkfifo")
            .arg(&config)
            .status()
            .unwrap()
            .success()
    );
    set_kubelet_flags(
        &node,
        "/etc/kubernetes/credential-provider.yaml",
        "/opt/bin",
    );
    let started = std::time::Instant::now();
    let out = node.run(&["install", "--provider", "aws"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(text(&out.stdout).contains("FIFO"), "{}", show(&out));
    // A device node (as /dev/zero is) and a 100,000-deep document.
    std::fs::remove_file(&config).unwrap();
    assert!(
        Command::new("mknod")
            .arg(&config)
            .args(["c", "1", "5"])
            .status()
            .unwrap()
            .success()
    );
    let out = node.run(&["install", "--provider", "aws"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    std::fs::remove_file(&config).unwrap();
    std::fs::write(
        &config,
        format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000)),
    )
    .unwrap();
    let out = node.run(&["install", "--provider", "aws"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("nested too deeply"),
        "{}",
        show(&out)
    );
    // --config /dev/zero: the admin's file, read with the same bounds.
    let out = node.run(&["install", "--config", "/dev/zero"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("character device"),
        "{}",
        show(&out)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[test]
fn planted_links_an_absolute_link_and_umask_000_cannot_steer_a_write() {
    let node = Node::new("kubeadm-deb", true);
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    // /etc/kubernetes is an absolute link: on the host it means the host's
    // /srv/kube, never the installer's own.
    std::fs::create_dir_all(node.path("/srv/kube")).unwrap();
    std::os::unix::fs::symlink("/srv/kube", node.path("/etc/kubernetes")).unwrap();
    std::fs::write(
        node.path("/srv/kube/credential-provider.yaml"),
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: []\n",
    )
    .unwrap();
    // A link planted where the backup goes, pointing outside the root.
    std::os::unix::fs::symlink(
        &victim,
        node.path("/srv/kube/credential-provider.yaml.wi-credential-provider.bak"),
    )
    .unwrap();
    set_kubelet_flags(
        &node,
        "/etc/kubernetes/credential-provider.yaml",
        "/opt/new/bin",
    );
    let path = format!(
        "{}:{}",
        node.dir.path().join("fakebin").display(),
        std::env::var("PATH").unwrap()
    );
    let out = Command::new("sh")
        .args(["-c", "umask 000; exec \"$@\"", "sh"])
        .arg(support::plugin::bin())
        .args([
            "node",
            "install",
            "--provider",
            "aws",
            "--proc",
            "none",
            "--root",
        ])
        .arg(node.root())
        .arg("--binary")
        .arg(stripped_binary())
        .env_clear()
        .env("PATH", path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert!(
        std::fs::read_to_string(node.path("/srv/kube/credential-provider.yaml"))
            .unwrap()
            .contains("wi-credential-provider-aws")
    );
    let mode = |p: &str| std::fs::symlink_metadata(node.path(p)).unwrap().mode() & 0o7777;
    assert_eq!(mode("/opt"), 0o755);
    assert_eq!(mode("/opt/new/bin"), 0o755);
    assert_eq!(mode("/opt/new/bin/wi-credential-provider"), 0o755);
    assert_eq!(
        mode("/srv/kube/credential-provider.yaml.wi-credential-provider.bak"),
        0o600
    );
    assert_eq!(
        mode("/var/lib/wi-credential-provider/node-install.json"),
        0o600
    );
    let un = node.run(&["uninstall"]);
    assert_eq!(un.status.code(), Some(0), "{}", show(&un));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
}

#[test]
fn a_symlinked_config_is_restored_as_the_link() {
    let node = Node::new("kubeadm-deb", true);
    std::fs::create_dir_all(node.path("/usr/share/kube")).unwrap();
    std::fs::write(
        node.path("/usr/share/kube/creds.yaml"),
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders: []\n",
    )
    .unwrap();
    std::fs::create_dir_all(node.path("/etc/kubernetes")).unwrap();
    std::os::unix::fs::symlink(
        "/usr/share/kube/creds.yaml",
        node.path("/etc/kubernetes/credential-provider.yaml"),
    )
    .unwrap();
    set_kubelet_flags(
        &node,
        "/etc/kubernetes/credential-provider.yaml",
        "/opt/bin",
    );
    full_cycle(&node, &["--provider", "gcp"]);
    assert_eq!(
        std::fs::read_link(node.path("/etc/kubernetes/credential-provider.yaml")).unwrap(),
        Path::new("/usr/share/kube/creds.yaml")
    );
}

#[test]
fn k3s_paths_from_its_config_yaml_and_drop_ins() {
    let node = Node::new("k3s", true);
    std::fs::create_dir_all(node.path("/etc/rancher/k3s/config.yaml.d")).unwrap();
    std::fs::write(
        node.path("/etc/rancher/k3s/config.yaml"),
        "image-credential-provider-config: /etc/rancher/creds/config.yaml\n",
    )
    .unwrap();
    std::fs::write(
        node.path("/etc/rancher/k3s/config.yaml.d/50-bin.yaml"),
        "image-credential-provider-bin-dir: /opt/k3s-creds/bin\n",
    )
    .unwrap();
    write_health_config(&node, "/etc/rancher/k3s/kubelet-health.yaml");
    let common = ["--kubelet-config", "/etc/rancher/k3s/kubelet-health.yaml"];
    let report = full_cycle_with(&node, &["--provider", "aws"], &common);
    assert_eq!(
        report["plan"]["bin_dir"], "/opt/k3s-creds/bin",
        "{report:#}"
    );
    assert_eq!(
        report["plan"]["config"]["path"], "/etc/rancher/creds/config.yaml",
        "{report:#}"
    );
}

#[test]
fn a_merge_key_the_kubelet_accepts_is_accepted() {
    let node = Node::new("kubeadm-deb", true);
    std::fs::create_dir_all(node.path("/etc/kubernetes")).unwrap();
    set_kubelet_flags(
        &node,
        "/etc/kubernetes/credential-provider.yaml",
        "/opt/bin",
    );
    let text_with_merge = "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - <<: {defaultCacheDuration: 1h, apiVersion: credentialprovider.kubelet.k8s.io/v1}\n    name: other\n    matchImages: [\"other.example.com\"]\n";
    std::fs::write(
        node.path("/etc/kubernetes/credential-provider.yaml"),
        text_with_merge,
    )
    .unwrap();
    std::fs::create_dir_all(node.path("/opt/bin")).unwrap();
    std::fs::copy("/bin/true", node.path("/opt/bin/other")).unwrap();
    let out = node.run(&["install", "--provider", "gcp"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    // The other entry keeps what the merge key gave it.
    let doctor = node.run(&["doctor"]);
    assert!(
        !text(&doctor.stdout).contains("FAIL check-config"),
        "{}",
        show(&doctor)
    );
}

#[test]
fn a_failed_restart_restores_every_file() {
    let node = Node::new("kubeadm-deb", true);
    let original = node.snapshot();
    // k3s-style: the unit fails to start (Type=notify agent dying).
    std::fs::write(node.dir.path().join("fakebin/systemctl"), "#!/bin/sh\necho \"$*\" >> /dev/null\n[ \"$1\" = restart ] && { echo 'Job for kubelet.service failed' >&2; exit 1; }\nexit 0\n").unwrap();
    let out = node.run(&[
        "install",
        "--provider",
        "aws",
        "--restart-kubelet",
        "--health-timeout",
        "2s",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(text(&out.stdout).contains("rolled back"), "{}", show(&out));
    let diff: Vec<String> = changed(&original, &node.snapshot())
        .into_iter()
        // The memo of the failed change, and the directory that holds it.
        .filter(|p| !p.starts_with("var/lib/wi-credential-provider/"))
        .collect();
    assert!(diff.is_empty(), "{diff:?}");
}

#[test]
fn gke_cos_uninstall_after_a_reboot_rebuilt_etc() {
    let node = Node::new("gke-cos", true);
    let original = node.snapshot();
    let out = node.run(&[
        "install",
        "--provider",
        "gcp",
        "--replace",
        "auth-provider-gcp=gke.gcr.io",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    // The reboot: configure-helper.sh writes /etc again from scratch, and
    // our backup on the tmpfs is gone.
    let config = "etc/srv/kubernetes/cri_auth_config.yaml";
    std::fs::write(node.root().join(config), &original[config].0).unwrap();
    std::fs::remove_file(
        node.root()
            .join(format!("{config}.wi-credential-provider.bak")),
    )
    .unwrap();
    let un = node.run(&["uninstall"]);
    assert_eq!(un.status.code(), Some(0), "{}", show(&un));
    let diff = changed(&original, &node.snapshot());
    assert!(diff.is_empty(), "{diff:?}\n{}", show(&un));
}

#[test]
fn doctor_says_a_restart_is_pending_when_the_unit_names_another_file() {
    let node = Node::new("kubeadm-deb", true);
    set_kubelet_flags(&node, "/etc/kubernetes/new.yaml", "/opt/from-proc/bin");
    let out = daemonset_run(&node, false, &REAL_KUBELET, &["doctor"]);
    assert!(
        text(&out.stdout).contains("restart-pending"),
        "{}",
        show(&out)
    );
    assert!(
        text(&out.stdout).contains("/etc/kubernetes/new.yaml"),
        "{}",
        show(&out)
    );
}

/// Gives the kubeadm node's kubelet the two credential-provider flags in
/// KUBELET_EXTRA_ARGS, as an admin would.
fn set_kubelet_flags(node: &Node, config: &str, bin_dir: &str) {
    std::fs::write(
        node.path("/etc/default/kubelet"),
        format!(
            "KUBELET_EXTRA_ARGS=--image-credential-provider-config={config} --image-credential-provider-bin-dir={bin_dir}\n"
        ),
    )
    .unwrap();
}

/// An AKS node with service-account image pull on (AgentBaker's
/// `writeCredentialProviderConfig` with `SERVICE_ACCOUNT_IMAGE_PULL_ENABLED`:
/// the stock entry's audience `api://AKSIdentityBinding` and its `--ib-*`
/// args): replacing the stock entry, our azure entry takes the same
/// identity-binding endpoint with our flags and audience, check-config
/// accepts it, and a second run changes nothing.
#[test]
fn aks_with_identity_bindings_keeps_the_binding_when_replacing_the_stock_entry() {
    let node = Node::new("aks", true);
    let config = node.path("/var/lib/kubelet/credential-provider-config.yaml");
    let stock = std::fs::read_to_string(&config).unwrap().replace(
        "    args:\n      - /etc/kubernetes/azure.json\n",
        "    args:\n      - /etc/kubernetes/azure.json\n      - --ib-sni-name=a4kq3s6v0ndc8i2u1m7t5p9r0e3b6h8j2f4l1o7g5c9k3q8s0u2e.ests.aks\n      - --ib-default-client-id=5b8e2c1a-9f3d-4e7b-a6c2-1d0f8e9a7b3c\n      - --ib-apiserver-ip=contoso-dns-4f1c2d.hcp.eastus.azmk8s.io\n    tokenAttributes:\n      serviceAccountTokenAudience: api://AKSIdentityBinding\n      requireServiceAccount: false\n      cacheType: ServiceAccount\n      optionalServiceAccountAnnotationKeys:\n        - kubernetes.azure.com/acr-client-id\n",
    );
    assert!(
        stock.contains("--ib-sni-name"),
        "the fixture changed: {stock}"
    );
    std::fs::write(&config, stock).unwrap();
    let install = [
        "install",
        "--provider",
        "azure",
        "--fallback",
        "node",
        "--replace",
        "acr-credential-provider",
    ];
    let out = node.run(&install);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("acr-credential-provider uses AKS identity bindings"),
        "{}",
        show(&out)
    );
    let written = std::fs::read_to_string(&config).unwrap();
    let doc = yaml_to_json(&written);
    assert_eq!(doc["providers"].as_array().unwrap().len(), 1, "{written}");
    let ours = &doc["providers"][0];
    assert_eq!(ours["name"], "wi-credential-provider-azure");
    let args: Vec<&str> = ours["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for want in [
        "--azure-identity-binding-sni=a4kq3s6v0ndc8i2u1m7t5p9r0e3b6h8j2f4l1o7g5c9k3q8s0u2e.ests.aks",
        "--azure-identity-binding-client-id=5b8e2c1a-9f3d-4e7b-a6c2-1d0f8e9a7b3c",
        "--azure-identity-binding-address=contoso-dns-4f1c2d.hcp.eastus.azmk8s.io",
        "--fallback",
    ] {
        assert!(args.contains(&want), "{want} not in {args:?}");
    }
    assert_eq!(
        ours["tokenAttributes"]["serviceAccountTokenAudience"],
        "api://AKSIdentityBinding"
    );
    let again = node.run(&install);
    assert_eq!(again.status.code(), Some(0), "{}", show(&again));
    assert!(
        text(&again.stdout).contains("nothing to change"),
        "{}",
        show(&again)
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), written);
}

/// Round-5 item 2: an existing directory on the way to what install
/// writes must be root's and writable by root alone, up the whole path
/// inside --root: a bin dir another uid owns, a root-owned one others may
/// write (0777, or 0775 for its group), one under a parent another uid
/// owns, and an `/etc/kubernetes` another uid owns are each refused before
/// anything is written, naming the directory and its owner or mode; the
/// same from the DaemonSet's own namespaces. Doctor fails the binary when
/// its directory is another user's, not only the file.
#[test]
fn install_refuses_directories_another_user_controls_and_doctor_fails_them() {
    use std::os::unix::fs::chown;
    const BIN: &str = "/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec";
    let cases: [(&str, &str, Option<u32>, u32, &str); 5] = [
        (BIN, BIN, Some(4242), 0o755, "is owned by uid 4242"),
        (BIN, BIN, None, 0o777, "mode 0777) may be written"),
        (BIN, BIN, None, 0o775, "mode 0775) may be written"),
        (
            BIN,
            "/usr/libexec/kubernetes",
            Some(4242),
            0o755,
            "/usr/libexec/kubernetes (a directory) is owned by uid 4242",
        ),
        (
            "/etc/kubernetes",
            "/etc/kubernetes",
            Some(4242),
            0o755,
            "/etc/kubernetes (a directory) is owned by uid 4242",
        ),
    ];
    for (made, hostile, owner, mode, says) in cases {
        let node = Node::new("kubeadm-deb", true);
        std::fs::create_dir_all(node.path(made)).unwrap();
        std::fs::set_permissions(node.path(hostile), std::fs::Permissions::from_mode(mode))
            .unwrap();
        if let Some(uid) = owner {
            chown(node.path(hostile), Some(uid), Some(uid)).unwrap();
        }
        let before = node.snapshot();
        let out = node.run(&["install", "--provider", "aws"]);
        assert_eq!(out.status.code(), Some(1), "{hostile}: {}", show(&out));
        let said = text(&out.stderr);
        support::assert_says(&said, &[says, "nothing was changed", "chmod go-w"]);
        assert!(
            changed(&before, &node.snapshot()).is_empty(),
            "{hostile}: something was written"
        );
    }

    // From the DaemonSet's namespaces, with the real kubelet's paths.
    let node = Node::new("kubeadm-deb", true);
    std::fs::create_dir_all(node.path("/opt/from-proc/bin")).unwrap();
    chown(node.path("/opt/from-proc/bin"), Some(4242), Some(4242)).unwrap();
    let before = node.snapshot();
    let out = daemonset_run(
        &node,
        false,
        &REAL_KUBELET,
        &["install", "--provider", "aws"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    support::assert_says(
        &text(&out.stderr),
        &["/opt/from-proc/bin (a directory) is owned by uid 4242"],
    );
    // The harness itself adds the kubelet's executable.
    let written: Vec<String> = changed(&before, &node.snapshot())
        .into_iter()
        .filter(|p| !p.starts_with("usr/bin"))
        .collect();
    assert!(written.is_empty(), "{written:?}");

    // Doctor: a good install, then the bin dir handed to another user.
    let node = Node::new("kubeadm-deb", true);
    let out = node.run(&["install", "--provider", "aws"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    chown(node.path(BIN), Some(4242), Some(4242)).unwrap();
    let doctor = node.run(&["doctor"]);
    assert_ne!(doctor.status.code(), Some(0), "{}", show(&doctor));
    support::assert_says(
        &text(&doctor.stdout),
        &["FAIL", "binary", "is owned by uid 4242", "chmod go-w"],
    );
}

/// Round-5 item 4: on an AKS custom-cloud node, AgentBaker's stock entry
/// also matches `*<registry suffix>` (`Config-CredentialProvider`; the
/// Linux CSE likewise). Removing it with `--replace` would leave that
/// cloud's registry matched by nothing: install refuses before writing,
/// naming the pattern and the `--replace NAME=PATTERNS` that keeps the
/// stock plugin for it; with that, install succeeds and the stock entry
/// keeps exactly the pattern ours does not cover.
#[test]
fn replacing_the_stock_entry_never_drops_a_pattern_ours_does_not_cover() {
    let node = Node::new("aks", true);
    let config = node.path("/var/lib/kubelet/credential-provider-config.yaml");
    let stock = std::fs::read_to_string(&config).unwrap().replace(
        "      - \"*.*.geo.azurecr.us\"\n",
        "      - \"*.*.geo.azurecr.us\"\n      - \"*.azurecr.microsoft.scloud\"\n",
    );
    std::fs::write(&config, &stock).unwrap();
    let before = node.snapshot();
    let mut install = vec![
        "install",
        "--provider",
        "azure",
        "--fallback",
        "node",
        "--replace",
        "acr-credential-provider",
    ];
    let out = node.run(&install);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    support::assert_says(
        &text(&out.stderr),
        &[
            "would take *.azurecr.microsoft.scloud from acr-credential-provider",
            "nothing was changed",
            "--replace acr-credential-provider=*.azurecr.microsoft.scloud",
        ],
    );
    assert!(changed(&before, &node.snapshot()).is_empty());

    install[6] = "acr-credential-provider=*.azurecr.microsoft.scloud";
    let out = node.run(&install);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let doc = yaml_to_json(&std::fs::read_to_string(&config).unwrap());
    let stock = doc["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "acr-credential-provider")
        .unwrap();
    assert_eq!(
        stock["matchImages"],
        serde_json::json!(["*.azurecr.microsoft.scloud"])
    );
}

/// Round-5 item 5: doctor reads every host a mirror's `hosts.toml` offers
/// the credential to, not only `server`: a `[host]` listed before the
/// mirror, and a `server` that is a third host, are each named in a
/// warning; the file the docs recommend passes.
#[test]
fn doctor_names_every_host_a_mirror_credential_reaches() {
    let node = Node::new("kubeadm-deb", true);
    let config =
        repo().join("config-examples/aws-pull-through-cache/credential-provider-config.yaml");
    let out = node.run(&["install", "--config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let installed =
        std::fs::read_to_string(node.path("/etc/kubernetes/credential-provider.yaml")).unwrap();
    let rule = installed
        .lines()
        .find_map(|l| {
            l.trim()
                .trim_start_matches("- ")
                .strip_prefix("--registry-mirror=")
        })
        .or_else(|| {
            let lines: Vec<&str> = installed.lines().collect();
            lines
                .iter()
                .position(|l| l.trim() == "- --registry-mirror")
                .map(|i| lines[i + 1].trim().trim_start_matches("- "))
        })
        .unwrap_or_else(|| panic!("no --registry-mirror in {installed}"))
        .trim_matches('"')
        .to_string();
    let (source, target) = rule.split_once('=').unwrap();
    let mirror = format!("https://{}", target.split('/').next().unwrap());
    let hosts = node.path(&format!("/etc/containerd/certs.d/{source}/hosts.toml"));
    std::fs::create_dir_all(hosts.parent().unwrap()).unwrap();
    let doctor_says = |toml: &str| {
        std::fs::write(&hosts, toml).unwrap();
        text(&node.run(&["doctor"]).stdout)
    };
    let good = doctor_says(&format!(
        "server = \"{mirror}\"\n[host.\"{mirror}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
    ));
    assert!(!good.contains("cache.example.net"), "{good}");
    let listed = doctor_says(&format!(
        "server = \"{mirror}\"\n[host.\"https://cache.example.net\"]\n  capabilities = [\"pull\"]\n[host.\"{mirror}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
    ));
    support::assert_says(
        &listed,
        &[
            "WARN",
            "[host.\"https://cache.example.net\"]",
            "offers it the credential",
        ],
    );
    let third = doctor_says("server = \"https://third.example.org\"\n");
    support::assert_says(
        &third,
        &[
            "WARN",
            "server = \"https://third.example.org\"",
            "neither the mirror",
        ],
    );
}
