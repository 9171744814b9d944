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

mod distros;
mod rollback;
mod refusals;
mod doctor;

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

fn yaml_to_json(text: &str) -> Value {
    // The written YAML, read back as JSON values for the assertions.
    let value: yaml_serde::Value = yaml_serde::from_str(text).unwrap();
    serde_json::to_value(&value).unwrap()
}

fn write_health_config(node: &Node, path: &str) {
    let p = node.path(path);
    std::fs::write(
        &p,
        format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: {}\n", node.health.port),
    )
    .unwrap();
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
