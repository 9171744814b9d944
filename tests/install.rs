//! node-install/install.sh, run as an admin or the DaemonSet runs it, with
//! `--root <copy of a fixture node>` standing in for the node. The script
//! only checks the binary's sha256 and hands over to `node install` (or
//! `node uninstall`); what those do is tests/node.rs's subject.

use crate::support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

const BIN_DIR: &str = "usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec";
const CONFIG: &str = "etc/kubernetes/credential-provider.yaml";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn script() -> PathBuf {
    repo().join("node-install/install.sh")
}

fn good_config() -> PathBuf {
    repo().join("node-install/credential-provider.yaml")
}

fn sha256_hex(path: &Path) -> String {
    Sha256::digest(std::fs::read(path).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The built binary without its debug info, as a release has it: the
/// debug build is some 200 MB, which every install would copy and hash.
fn stripped_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let tmp = dir.join(format!("wicp-install-test.{}", std::process::id()));
        std::fs::copy(support::plugin::bin(), &tmp).unwrap();
        let status = Command::new("strip")
            .arg(&tmp)
            .status()
            .expect("strip (binutils) is installed");
        assert!(status.success());
        let path = dir.join("wicp-install-test");
        std::fs::rename(&tmp, &path).unwrap();
        path
    })
}

/// A release-like directory: the binary and its sha256sum file, readable by
/// anyone (the non-root test reads it as nobody).
struct Release {
    _dir: tempfile::TempDir,
    binary: PathBuf,
}

fn release() -> Release {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let binary = dir.path().join("wi-credential-provider-0.0.0-linux-test");
    std::fs::copy(stripped_binary(), &binary).unwrap();
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.path()
            .join("wi-credential-provider-0.0.0-linux-test.sha256"),
        format!(
            "{}  wi-credential-provider-0.0.0-linux-test\n",
            sha256_hex(&binary)
        ),
    )
    .unwrap();
    Release { _dir: dir, binary }
}

/// A copy of the kubeadm fixture node (no credential-provider flags yet).
pub(crate) fn node_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(repo().join("tests/fixtures/node/kubeadm-deb/root/."))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    dir
}

fn install(args: &[&str], path_prefix: Option<&Path>) -> Output {
    let path = std::env::var("PATH").unwrap_or_default();
    let path = match path_prefix {
        Some(dir) => format!("{}:{path}", dir.display()),
        None => path,
    };
    Command::new("sh")
        .arg(script())
        .args(args)
        .env_clear()
        .env("PATH", path)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn install_unprivileged(args: &[String], config: Option<&Path>) -> Output {
    let readable = tempfile::tempdir().unwrap();
    std::fs::set_permissions(readable.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = |from: &Path, name: &str| {
        let to = readable.path().join(name);
        std::fs::copy(from, &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o644)).unwrap();
        to
    };
    let script = copy(&script(), "install.sh");
    let mut args = args.to_vec();
    if let Some(config) = config {
        let config = copy(config, "credential-provider.yaml");
        args.extend(["--config".to_string(), config.display().to_string()]);
    }
    let is_root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
    let mut cmd = if is_root {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "sh",
        ]);
        c
    } else {
        Command::new("sh")
    };
    cmd.arg(&script)
        .args(&args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .expect("setpriv (util-linux) runs the script as nobody")
}

fn standard_args(root: &Path, release: &Release) -> Vec<String> {
    vec![
        "--root".into(),
        root.display().to_string(),
        "--binary".into(),
        release.binary.display().to_string(),
        "--config".into(),
        good_config().display().to_string(),
        "--".into(),
        "--proc".into(),
        "none".into(),
    ]
}

fn run(args: &[String]) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    install(&args, None)
}

/// Every file under `root` with its bytes or link target.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path.clone());
            } else if meta.file_type().is_symlink() {
                out.insert(
                    path.clone(),
                    std::fs::read_link(&path)
                        .unwrap()
                        .display()
                        .to_string()
                        .into_bytes(),
                );
            } else {
                out.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

#[test]
fn install_script_is_shellcheck_clean() {
    let out = Command::new("shellcheck")
        .arg(script())
        .arg(repo().join("scripts/release.sh"))
        .output()
        .expect("shellcheck is installed (Debian package shellcheck; .ci/run installs it)");
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn it_checks_the_checksum_then_node_install_does_the_rest_and_uninstall_undoes_it() {
    let release = release();
    let node = node_root();
    let before = snapshot(node.path());
    let out = run(&standard_args(node.path(), &release));
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("sha256 verified; handing over"),
        "{}",
        text(&out.stdout)
    );
    assert!(node.path().join(CONFIG).is_file());
    assert!(
        node.path()
            .join(BIN_DIR)
            .join("wi-credential-provider")
            .is_file()
    );
    assert!(
        std::fs::read_to_string(node.path().join("etc/default/kubelet"))
            .unwrap()
            .contains(
                "--image-credential-provider-config=/etc/kubernetes/credential-provider.yaml"
            )
    );
    let un = install(
        &[
            "--uninstall",
            "--root",
            node.path().to_str().unwrap(),
            "--binary",
            release.binary.to_str().unwrap(),
        ],
        None,
    );
    assert!(
        un.status.success(),
        "{}{}",
        text(&un.stdout),
        text(&un.stderr)
    );
    assert_eq!(snapshot(node.path()), before);
}

#[test]
fn a_checksum_mismatch_or_none_runs_nothing() {
    let release = release();
    let node = node_root();
    let before = snapshot(node.path());
    let mut args = standard_args(node.path(), &release);
    args.splice(0..0, ["--sha256".to_string(), "0".repeat(64)]);
    let out = run(&args);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("sha256 mismatch"),
        "{}",
        text(&out.stderr)
    );
    std::fs::remove_file(format!("{}.sha256", release.binary.display())).unwrap();
    let out = run(&standard_args(node.path(), &release));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no checksum"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(snapshot(node.path()), before);
}

#[test]
fn the_old_path_options_reach_node_install_and_the_removed_ones_are_refused() {
    let release = release();
    let node = node_root();
    let mut args = standard_args(node.path(), &release);
    args.splice(
        0..0,
        [
            "--bin-dir".to_string(),
            "/opt/creds/bin".into(),
            "--config-path".into(),
            "/etc/creds.yaml".into(),
        ],
    );
    let out = run(&args);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(node.path().join("etc/creds.yaml").is_file());
    assert!(
        node.path()
            .join("opt/creds/bin/wi-credential-provider")
            .is_file()
    );
    for removed in ["--link", "--no-check"] {
        let out = install(&["--binary", "x", removed, "y"], None);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{removed}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains("is gone"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn non_root_is_refused_unless_a_root_prefix_is_given() {
    let release = release();
    let out = install_unprivileged(
        &["--binary".into(), release.binary.display().to_string()],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("must run as root"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        vec![],
        vec!["--bogus"],
        vec!["--binary"],
        vec!["--binary", "x", "--root", "relative/dir"],
        vec!["--binary", "x", "--package", "y.deb"],
        vec!["--package", "y.tar.gz"],
        vec!["--package", "y.rpm", "--uninstall"],
    ] {
        let out = install(&args, None);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let help = install(&["--help"], None);
    assert!(help.status.success());
    assert!(text(&help.stdout).contains("--restart-kubelet"));
}

/// install.sh is for hosts that install a loose binary (an image bake, an
/// air-gapped node), some of them minimal: it must work with busybox's sh
/// and applets alone, nothing from coreutils.
#[test]
fn works_with_busybox_alone_as_on_a_minimal_host() {
    let busybox = Path::new("/usr/bin/busybox");
    assert!(
        busybox.is_file(),
        "busybox is installed (Debian package busybox; .ci/run installs it)"
    );
    let applets = Command::new(busybox).arg("--list").output().unwrap();
    let bin = tempfile::tempdir().unwrap();
    for applet in text(&applets.stdout).lines() {
        std::os::unix::fs::symlink(busybox, bin.path().join(applet)).unwrap();
    }
    let release = release();
    let node = node_root();
    let out = Command::new(bin.path().join("sh"))
        .arg(script())
        .args(standard_args(node.path(), &release))
        .env_clear()
        .env("PATH", bin.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(node.path().join(CONFIG).is_file());
}
