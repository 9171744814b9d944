//! node-install/install.sh, run as an admin or the DaemonSet runs it, with
//! `--root <tempdir>` standing in for the node.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

const BIN_DIR: &str = "usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec";
const CONFIG: &str = "etc/kubernetes/credential-provider.yaml";
/// One `wi-credential-provider-<name>` link per provider the binary carries.
fn links() -> Vec<String> {
    support::plugin::carried_providers()
        .iter()
        .map(|p| format!("wi-credential-provider-{p}"))
        .collect()
}

/// The names install.sh links, from its `PROVIDERS="..."` line.
fn script_providers() -> Vec<String> {
    let text = std::fs::read_to_string(script()).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("PROVIDERS=\""))
        .expect("install.sh has a PROVIDERS=\"...\" line");
    let mut names: Vec<String> = line
        .trim_end_matches('"')
        .split_whitespace()
        .map(String::from)
        .collect();
    names.sort();
    names
}

/// install.sh is POSIX sh that may install a binary for another
/// architecture, so it cannot ask the binary; its list is checked here
/// against the binary's own instead.
#[test]
fn install_sh_links_every_provider_the_binary_carries() {
    let mut carried = support::plugin::carried_providers();
    carried.sort();
    assert_eq!(script_providers(), carried);
}

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

/// A node root any user may write, as a mounted host root would be to root.
fn node_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
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

fn standard_args<'a>(root: &'a Path, release: &'a Release) -> Vec<String> {
    vec![
        "--root".into(),
        root.display().to_string(),
        "--binary".into(),
        release.binary.display().to_string(),
        "--config".into(),
        good_config().display().to_string(),
    ]
}

fn run(args: &[String]) -> Output {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    install(&args, None)
}

/// Every path under `root` with its inode, mtime and link target: what a
/// second run must leave untouched.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (u64, i64, i64, Option<PathBuf>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                stack.push(path.clone());
            }
            let target = std::fs::read_link(&path).ok();
            out.insert(path, (meta.ino(), meta.mtime(), meta.mtime_nsec(), target));
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
fn installs_the_binary_its_links_and_the_config_and_prints_the_flags() {
    let release = release();
    let node = node_root();
    let mut args = standard_args(node.path(), &release);
    args.extend(["--link".into(), "wi-credential-provider-zot".into()]);
    let out = run(&args);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));

    let bin = node.path().join(BIN_DIR);
    let installed = bin.join("wi-credential-provider");
    assert_eq!(sha256_hex(&installed), sha256_hex(&release.binary));
    assert_eq!(
        std::fs::metadata(&installed).unwrap().permissions().mode() & 0o777,
        0o755
    );
    for name in links()
        .iter()
        .map(String::as_str)
        .chain(["wi-credential-provider-zot"])
    {
        assert_eq!(
            std::fs::read_link(bin.join(name)).unwrap(),
            Path::new("wi-credential-provider"),
            "{name}"
        );
    }
    let config = node.path().join(CONFIG);
    assert_eq!(
        std::fs::read(&config).unwrap(),
        std::fs::read(good_config()).unwrap()
    );
    assert_eq!(
        std::fs::metadata(&config).unwrap().permissions().mode() & 0o777,
        0o644
    );
    // The flags name the paths as the kubelet sees them, without the root.
    assert!(
        stdout.contains(
            "  --image-credential-provider-config=/etc/kubernetes/credential-provider.yaml\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "  --image-credential-provider-bin-dir=/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec\n"
        ),
        "{stdout}"
    );
    // The installed links run the binary.
    let version = Command::new(bin.join("wi-credential-provider-passthrough"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(text(&version.stdout).starts_with("wi-credential-provider "));
}

#[test]
fn a_second_run_changes_nothing() {
    let release = release();
    let node = node_root();
    let args = standard_args(node.path(), &release);
    assert!(run(&args).status.success());
    let before = snapshot(node.path());
    let again = run(&args);
    let stdout = text(&again.stdout);
    assert!(again.status.success(), "{stdout}{}", text(&again.stderr));
    assert_eq!(snapshot(node.path()), before);
    assert!(
        stdout.contains("everything was already up to date"),
        "{stdout}"
    );
    assert!(!stdout.contains("installed "), "{stdout}");
    assert!(!stdout.contains("linked "), "{stdout}");
    assert!(stdout.contains("--image-credential-provider-config="));
}

#[test]
fn a_checksum_mismatch_is_refused_before_anything_is_written() {
    let release = release();
    let node = node_root();
    let mut args = standard_args(node.path(), &release);
    args.extend(["--sha256".into(), "0".repeat(64)]);
    let out = run(&args);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("sha256 mismatch"), "{stderr}");
    assert!(stderr.contains(&sha256_hex(&release.binary)), "{stderr}");
    assert!(snapshot(node.path()).is_empty());

    // A tampered binary next to its original checksum file, too.
    let mut bytes = std::fs::read(&release.binary).unwrap();
    bytes.push(0);
    std::fs::write(&release.binary, bytes).unwrap();
    let out = run(&standard_args(node.path(), &release));
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("sha256 mismatch"));
    assert!(snapshot(node.path()).is_empty());
}

#[test]
fn without_a_checksum_nothing_is_installed() {
    let release = release();
    std::fs::remove_file(format!("{}.sha256", release.binary.display())).unwrap();
    let node = node_root();
    let out = run(&standard_args(node.path(), &release));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no checksum"),
        "{}",
        text(&out.stderr)
    );
    assert!(snapshot(node.path()).is_empty());
}

/// Runs install.sh as an unprivileged user: as nobody through setpriv when
/// the tests run as root, directly otherwise. The script, and `config` when
/// given (passed as `--config`), are copied first to a directory anyone can
/// read: the checkout may sit below a directory only its owner can enter (a
/// clone into `mktemp -d`), where nobody could not even open the script,
/// and the test is about the installer's own check.
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

    let node = node_root();
    let out = install_unprivileged(
        &[
            "--root".into(),
            node.path().display().to_string(),
            "--binary".into(),
            release.binary.display().to_string(),
        ],
        Some(&good_config()),
    );
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        node.path()
            .join(BIN_DIR)
            .join("wi-credential-provider")
            .is_file()
    );
}

#[test]
fn a_config_the_kubelet_would_trip_on_is_not_installed() {
    let release = release();
    let node = node_root();
    let bad = repo().join("tests/fixtures/check-config/passthrough.cache-type/fail.yaml");
    let out = install(
        &[
            "--root",
            &node.path().display().to_string(),
            "--binary",
            &release.binary.display().to_string(),
            "--config",
            &bad.display().to_string(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("set cacheType: Token"), "{stderr}");
    assert!(stderr.contains("it was not installed"), "{stderr}");
    assert!(!node.path().join(CONFIG).exists());

    // A provider name with no link in the bin dir fails the same way,
    // until --link provides it.
    let zot = tempfile::tempdir().unwrap();
    let config = zot.path().join("zot.yaml");
    std::fs::write(
        &config,
        std::fs::read_to_string(good_config())
            .unwrap()
            .replace(
                "name: wi-credential-provider-passthrough",
                "name: wi-credential-provider-zot",
            )
            .replace("args:\n", "args:\n      - --provider=passthrough\n"),
    )
    .unwrap();
    let mut args = standard_args(node.path(), &release);
    args[5] = config.display().to_string();
    let out = run(&args);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("wi-credential-provider-zot does not exist"));
    args.extend(["--link".into(), "wi-credential-provider-zot".into()]);
    let out = run(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn a_wrong_link_is_replaced() {
    let release = release();
    let node = node_root();
    let bin = node.path().join(BIN_DIR);
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink("/usr/bin/true", bin.join("wi-credential-provider-aws")).unwrap();
    let out = run(&standard_args(node.path(), &release));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_link(bin.join("wi-credential-provider-aws")).unwrap(),
        Path::new("wi-credential-provider")
    );
}

/// Fake systemctl and nsenter that record how they were called.
fn recorders() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.log");
    for name in ["systemctl", "nsenter"] {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!("#!/bin/sh\necho \"{name} $*\" >> '{}'\n", log.display()),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (dir, log)
}

#[test]
fn the_kubelet_is_restarted_only_when_asked_and_something_changed() {
    let release = release();
    let (fakes, log) = recorders();
    let node = node_root();
    let args = standard_args(node.path(), &release);
    let args_ref: Vec<&str> = args.iter().map(String::as_str).collect();

    let out = install(&args_ref, Some(fakes.path()));
    assert!(out.status.success());
    assert!(!log.exists(), "restarted without being asked");
    assert!(text(&out.stdout).contains("restart it to use this one"));

    let fresh = node_root();
    let mut with_restart = standard_args(fresh.path(), &release);
    with_restart.push("--restart-kubelet".into());
    let with_restart: Vec<&str> = with_restart.iter().map(String::as_str).collect();
    let out = install(&with_restart, Some(fakes.path()));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "nsenter --target 1 --mount --uts --ipc --net --pid -- systemctl restart kubelet\n"
    );

    // Nothing changed on the second run: no restart.
    let out = install(&with_restart, Some(fakes.path()));
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("the kubelet is left running"));
    assert_eq!(std::fs::read_to_string(&log).unwrap().lines().count(), 1);
}

#[test]
fn uninstall_removes_what_install_put_there_and_nothing_else() {
    let release = release();
    let node = node_root();
    let mut args = standard_args(node.path(), &release);
    args.extend(["--link".into(), "wi-credential-provider-zot".into()]);
    assert!(run(&args).status.success());
    let bin = node.path().join(BIN_DIR);
    std::fs::write(bin.join("ecr-credential-provider"), "another plugin").unwrap();

    let out = run(&[
        "--uninstall".into(),
        "--root".into(),
        node.path().display().to_string(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let left: Vec<String> = std::fs::read_dir(&bin)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["ecr-credential-provider"]);
    assert!(!node.path().join(CONFIG).exists());
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        vec![],
        vec!["--bogus"],
        vec!["--binary"],
        vec!["--binary", "x", "--bin-dir", "relative/dir"],
        vec!["--binary", "x", "--link", "a/b"],
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

/// The DaemonSet's image is busybox: install.sh must work with busybox's sh
/// and applets alone (stat, cmp, sha256sum, readlink, awk ...), nothing
/// from the host's coreutils.
#[test]
fn works_with_busybox_alone_as_in_the_daemonset_image() {
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
    let args = standard_args(node.path(), &release);
    let run_busybox = || {
        Command::new(bin.path().join("sh"))
            .arg(script())
            .args(&args)
            .env_clear()
            .env("PATH", bin.path())
            .output()
            .unwrap()
    };
    let first = run_busybox();
    assert!(
        first.status.success(),
        "{}{}",
        text(&first.stdout),
        text(&first.stderr)
    );
    for name in links() {
        assert_eq!(
            std::fs::read_link(node.path().join(BIN_DIR).join(&name)).unwrap(),
            Path::new("wi-credential-provider")
        );
    }
    let before = snapshot(node.path());
    let second = run_busybox();
    assert!(second.status.success());
    assert!(text(&second.stdout).contains("everything was already up to date"));
    assert_eq!(snapshot(node.path()), before);
}
