//! A release as `make release` builds it (scripts/release.sh), taken apart
//! and used the way a fleet uses one: the signature and sums checked as
//! docs/release.md says and by install.sh, with each part tampered with in
//! turn; the node image imported into a real containerd and the
//! DaemonSet's own commands run from it with its mounts onto a node root;
//! the DaemonSet rendered by the real `kubectl kustomize`; the .deb and the
//! .rpm installed and removed with dpkg and rpm in a throwaway root; the
//! crate list the binary carries and its bill of materials.
//!
//! `make test-release` builds one release (x86_64 only, the release-test
//! profile, no .exe) into target/test-dist and runs the ignored tests here
//! with WICP_TEST_DIST naming it; every test reads that one build. The
//! Windows image's file, which needs no build, is checked by a plain test.

use crate::install::node_root;
use crate::node::{changed, show, snapshot, text};
use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use sha2::{Digest, Sha256};
use support::containerd::Containerd;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const NAMESPACE: &str = "wi-credential-provider-release";
const IMAGE_NAME: &str = "registry.example.com/platform/wi-credential-provider";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The release `make test-release` built.
fn dist() -> PathBuf {
    let dir = std::env::var_os("WICP_TEST_DIST")
        .map(PathBuf::from)
        .expect("WICP_TEST_DIST names the release to test: run `make test-release`");
    assert!(
        dir.join("SHA256SUMS").is_file(),
        "{} holds no release: run `make test-release`",
        dir.display()
    );
    dir
}

fn artefact(name: &str) -> PathBuf {
    let path = dist().join(name);
    assert!(path.is_file(), "the release has no {name}");
    path
}

fn binary_name() -> String {
    format!("wi-credential-provider-{VERSION}-linux-amd64")
}

fn image_archive() -> PathBuf {
    artefact(&format!("wi-credential-provider-{VERSION}-image.oci.tar"))
}

fn image_digest() -> String {
    std::fs::read_to_string(artefact(&format!(
        "wi-credential-provider-{VERSION}-image.oci.tar.digest"
    )))
    .unwrap()
    .trim()
    .to_string()
}

fn sha256(path: &Path) -> String {
    Sha256::digest(std::fs::read(path).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn run(program: &str, args: &[&str], dir: Option<&Path>) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args);
    if let Some(dir) = dir {
        cmd.current_dir(dir);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("{program}: {e} (bash .ci/run installs it)"))
}

fn assert_ok(out: &Output, what: &str) {
    assert!(out.status.success(), "{what}: {}", show(out));
}

/// A refusal: exit 1 and one line on stderr that says `says`.
fn assert_refused(out: &Output, says: &str) {
    assert_eq!(out.status.code(), Some(1), "{}", show(out));
    let stderr = text(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "{}", show(out));
    assert!(stderr.contains(says), "not {says:?}: {}", show(out));
}

/// The allowed-signers line docs/release.md has a user write for the key.
fn allowed_signers(public_key: &Path, dir: &Path) -> PathBuf {
    let key = std::fs::read_to_string(public_key).unwrap();
    let mut words = key.split_whitespace();
    let (kind, body) = (words.next().unwrap(), words.next().unwrap());
    let path = dir.join("allowed_signers");
    std::fs::write(
        &path,
        format!("{NAMESPACE} namespaces=\"{NAMESPACE}\" {kind} {body}\n"),
    )
    .unwrap();
    path
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn every_artefact_is_summed_under_a_signature_a_user_can_check() {
    let dist = dist();
    let files: BTreeSet<String> = std::fs::read_dir(&dist)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for name in [
        binary_name(),
        format!("{}.cdx.json", binary_name()),
        format!("wi-credential-provider-{VERSION}-image.oci.tar"),
        format!("wi-credential-provider-{VERSION}-image.oci.tar.digest"),
        format!("wi-credential-provider-{VERSION}-talos-extension.oci.tar"),
        format!("wi-credential-provider-{VERSION}-talos-extension.oci.tar.digest"),
        format!("wi-credential-provider_{VERSION}_amd64.deb"),
        format!("wi-credential-provider-{VERSION}-1.x86_64.rpm"),
        "install.sh".to_string(),
        format!("{NAMESPACE}.pub"),
        "SHA256SUMS".to_string(),
        "SHA256SUMS.sig".to_string(),
    ] {
        assert!(files.contains(&name), "no {name} in {files:?}");
    }
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    let summed: BTreeSet<String> = sums
        .lines()
        .map(|l| {
            l.split_whitespace()
                .nth(1)
                .unwrap()
                .trim_start_matches('*')
                .to_string()
        })
        .collect();
    let expected: BTreeSet<String> = files
        .iter()
        .filter(|f| !f.starts_with("SHA256SUMS"))
        .cloned()
        .collect();
    assert_eq!(summed, expected, "SHA256SUMS must cover every other file");

    // As docs/release.md has a user check it.
    let work = tempfile::tempdir().unwrap();
    let signers = allowed_signers(&dist.join(format!("{NAMESPACE}.pub")), work.path());
    let verify = Command::new("ssh-keygen")
        .args(["-Y", "verify", "-f"])
        .arg(&signers)
        .args(["-I", NAMESPACE, "-n", NAMESPACE, "-s"])
        .arg(dist.join("SHA256SUMS.sig"))
        .stdin(std::fs::File::open(dist.join("SHA256SUMS")).unwrap())
        .output()
        .unwrap();
    assert_ok(&verify, "ssh-keygen -Y verify");
    assert!(
        text(&verify.stdout).contains("Good \"wi-credential-provider-release\" signature"),
        "{}",
        show(&verify)
    );
    assert_ok(
        &run("sha256sum", &["--strict", "-c", "SHA256SUMS"], Some(&dist)),
        "sha256sum -c",
    );
}

/// A user's download: the binary, SHA256SUMS, its signature and install.sh.
fn download() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        binary_name().as_str(),
        "SHA256SUMS",
        "SHA256SUMS.sig",
        "install.sh",
    ] {
        std::fs::copy(artefact(name), dir.path().join(name)).unwrap();
    }
    dir
}

/// install.sh with the release's signature, checked against `key`.
fn signed_install(download: &Path, key: &Path, node: &Path) -> Output {
    Command::new("sh")
        .arg(download.join("install.sh"))
        .arg("--binary")
        .arg(download.join(binary_name()))
        .arg("--sha256")
        .arg(download.join("SHA256SUMS"))
        .arg("--signature")
        .arg(download.join("SHA256SUMS.sig"))
        .arg("--public-key")
        .arg(key)
        .arg("--root")
        .arg(node)
        .arg("--config")
        .arg(repo().join("node-install/credential-provider.yaml"))
        .args(["--", "--proc", "none"])
        .output()
        .unwrap()
}

fn flip_byte(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x01;
    std::fs::write(path, bytes).unwrap();
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn install_sh_installs_only_what_the_release_key_signed() {
    let key = artefact(&format!("{NAMESPACE}.pub"));
    // The release as it is: installed.
    let good = download();
    let node = node_root();
    let out = signed_install(good.path(), &key, node.path());
    assert_ok(&out, "install.sh with the release's signature");
    assert!(
        text(&out.stdout).contains("signature and sha256 verified"),
        "{}",
        show(&out)
    );
    assert_eq!(
        sha256(&node.path().join(
            "usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec/wi-credential-provider"
        )),
        sha256(&artefact(&binary_name()))
    );

    let other_key = tempfile::tempdir().unwrap();
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(other_key.path().join("other"))
        .status()
        .unwrap();
    assert!(status.success());

    type Tamper = fn(&Path);
    let cases: [(&str, Tamper, bool, &str); 4] = [
        (
            "a changed binary",
            |d| flip_byte(&d.join(binary_name()), 4096),
            false,
            "sha256 mismatch",
        ),
        (
            "a changed binary with SHA256SUMS changed to match it",
            |d| {
                flip_byte(&d.join(binary_name()), 4096);
                let sums = std::fs::read_to_string(d.join("SHA256SUMS")).unwrap();
                let line = sums.lines().find(|l| l.ends_with(&binary_name())).unwrap();
                let forged = format!("{}  {}", sha256(&d.join(binary_name())), binary_name());
                std::fs::write(d.join("SHA256SUMS"), sums.replace(line, &forged)).unwrap();
            },
            false,
            "does not verify",
        ),
        (
            "a changed signature",
            |d| {
                let sig = std::fs::read_to_string(d.join("SHA256SUMS.sig")).unwrap();
                let mut lines: Vec<String> = sig.lines().map(String::from).collect();
                // The base64 body's third line: inside the signature blob.
                let line = &mut lines[3];
                let flipped: String = line
                    .chars()
                    .enumerate()
                    .map(|(i, c)| {
                        if i == 10 {
                            if c == 'A' { 'B' } else { 'A' }
                        } else {
                            c
                        }
                    })
                    .collect();
                *line = flipped;
                std::fs::write(d.join("SHA256SUMS.sig"), lines.join("\n") + "\n").unwrap();
            },
            false,
            "does not verify",
        ),
        ("another key", |_| {}, true, "does not verify"),
    ];
    for (what, tamper, other, says) in cases {
        let download = download();
        tamper(download.path());
        let node = node_root();
        let before = snapshot(node.path());
        let key = if other {
            other_key.path().join("other.pub")
        } else {
            key.clone()
        };
        let out = signed_install(download.path(), &key, node.path());
        assert_refused(&out, says);
        assert!(
            text(&out.stderr).contains("nothing was run"),
            "{what}: {}",
            show(&out)
        );
        assert!(
            changed(&before, &snapshot(node.path())).is_empty(),
            "{what}: the node changed"
        );
    }
}

/// `kubectl kustomize` of node-install/ (or of a copy changed by `edit`):
/// the DaemonSet.
fn rendered_daemonset(edit: impl FnOnce(&Path)) -> yaml_serde::Value {
    let copy = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(repo().join("node-install/."))
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(status.success());
    edit(copy.path());
    support::kubectl_kustomize(copy.path())
        .into_iter()
        .find(|d| d["kind"].as_str() == Some("DaemonSet"))
        .expect("a DaemonSet")
}

fn strings(v: &yaml_serde::Value) -> Vec<String> {
    v.as_sequence()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// The image's one layer, unpacked by skopeo and listed by tar: path ->
/// (mode, uid, gid), and its config.
fn image_contents() -> (BTreeMap<String, (String, String)>, Value, tempfile::TempDir) {
    archive_contents(&image_archive())
}

/// [`image_contents`] of any one-layer OCI archive of the release.
fn archive_contents(
    archive: &Path,
) -> (BTreeMap<String, (String, String)>, Value, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        "skopeo",
        &[
            "copy",
            "--quiet",
            &format!("oci-archive:{}", archive.display()),
            &format!("dir:{}", dir.path().display()),
        ],
        None,
    );
    assert_ok(&out, "skopeo copy to dir:");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("manifest.json")).unwrap()).unwrap();
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "one layer: {manifest:#}");
    let blob = |digest: &Value| {
        dir.path()
            .join(digest.as_str().unwrap().trim_start_matches("sha256:"))
    };
    let config: Value =
        serde_json::from_slice(&std::fs::read(blob(&manifest["config"]["digest"])).unwrap())
            .unwrap();
    let listing = run(
        "tar",
        &[
            "--list",
            "--verbose",
            "--numeric-owner",
            "--file",
            blob(&layers[0]["digest"]).to_str().unwrap(),
        ],
        None,
    );
    assert_ok(&listing, "tar --list");
    let mut entries = BTreeMap::new();
    for line in text(&listing.stdout).lines() {
        // -rwxr-xr-x 0/0 11567544 2026-11-28 05:00 usr/bin/wi-credential-provider
        let cols: Vec<&str> = line.split_whitespace().collect();
        entries.insert(
            cols[5].trim_end_matches('/').to_string(),
            (cols[0].to_string(), cols[1].to_string()),
        );
    }
    // The layer, unpacked, for the binary's bytes.
    let unpacked = dir.path().join("rootfs");
    std::fs::create_dir(&unpacked).unwrap();
    assert_ok(
        &run(
            "tar",
            &[
                "--extract",
                "--file",
                blob(&layers[0]["digest"]).to_str().unwrap(),
                "--directory",
                unpacked.to_str().unwrap(),
            ],
            None,
        ),
        "tar --extract",
    );
    (entries, config, dir)
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn the_kustomization_runs_the_image_release_builds_as_it_is_built() {
    let (entries, config, unpacked) = image_contents();
    // Only the binary, its license and /tmp, owned by root.
    let paths: BTreeSet<&str> = entries.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        BTreeSet::from([
            "tmp",
            "usr",
            "usr/bin",
            "usr/bin/wi-credential-provider",
            "usr/share",
            "usr/share/doc",
            "usr/share/doc/wi-credential-provider",
            "usr/share/doc/wi-credential-provider/LICENSE",
        ])
    );
    assert!(
        entries.values().all(|(_, owner)| owner == "0/0"),
        "{entries:?}"
    );
    assert_eq!(entries["usr/bin/wi-credential-provider"].0, "-rwxr-xr-x");
    assert_eq!(entries["tmp"].0, "drwxrwxrwt");
    assert_eq!(
        sha256(
            &unpacked
                .path()
                .join("rootfs/usr/bin/wi-credential-provider")
        ),
        sha256(&artefact(&binary_name())),
        "the image's binary is the release's"
    );
    let entrypoint = config["config"]["Entrypoint"].clone();
    assert_eq!(
        entrypoint,
        serde_json::json!(["/usr/bin/wi-credential-provider"])
    );
    assert_eq!(config["architecture"], "amd64");
    assert_eq!(config["os"], "linux");

    // The DaemonSet as kubectl renders it runs that binary.
    let ds = rendered_daemonset(|_| {});
    let spec = &ds["spec"]["template"]["spec"];
    let init = &spec["initContainers"][0];
    let main = &spec["containers"][0];
    for container in [init, main] {
        assert_eq!(
            container["image"].as_str(),
            Some(format!("{IMAGE_NAME}:{VERSION}").as_str()),
            "the image tag is the release's version"
        );
        let command = strings(&container["command"]);
        assert_eq!(command[0], "/usr/bin/wi-credential-provider");
        assert!(paths.contains(command[0].trim_start_matches('/')));
    }
    assert_eq!(strings(&main["command"])[1..], ["node", "wait"]);
    assert_eq!(init["securityContext"]["privileged"].as_bool(), Some(true));
    assert_eq!(init["securityContext"]["runAsUser"].as_i64(), Some(0));
    // The main container runs as nobody: the binary must be executable by others.
    assert_eq!(main["securityContext"]["runAsUser"].as_i64(), Some(65534));
    assert_eq!(
        main["securityContext"]["readOnlyRootFilesystem"].as_bool(),
        Some(true)
    );
    let mounts: BTreeSet<String> = init["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        mounts,
        BTreeSet::from(["/host".to_string(), "/config".to_string()])
    );
    let command = strings(&init["command"]).join(" ");
    assert!(command.contains("--root=/host"), "{command}");
    assert!(
        command.contains("--config=/config/credential-provider.yaml"),
        "{command}"
    );

    // With the release's digest where kustomization.yaml says it goes, the
    // DaemonSet pins the index.
    let digest = image_digest();
    let pinned = rendered_daemonset(|dir| {
        let path = dir.join("kustomization.yaml");
        let k = std::fs::read_to_string(&path).unwrap();
        let placeholder = "    # digest: sha256:<the release's .digest file>";
        assert!(
            k.contains(placeholder),
            "kustomization.yaml shows where the digest goes"
        );
        std::fs::write(
            &path,
            k.replace(placeholder, &format!("    digest: {digest}")),
        )
        .unwrap();
    });
    for containers in ["initContainers", "containers"] {
        assert_eq!(
            pinned["spec"]["template"]["spec"][containers][0]["image"].as_str(),
            Some(format!("{IMAGE_NAME}:{VERSION}@{digest}").as_str())
        );
    }
}

/// The volumes of the rendered DaemonSet's init container as ctr mounts:
/// the host root onto `node`, the ConfigMap (node-install's
/// credential-provider.yaml) from `config`.
fn ctr_mounts(
    init: &yaml_serde::Value,
    spec: &yaml_serde::Value,
    node: &Path,
    config: &Path,
) -> Vec<String> {
    let volumes = spec["volumes"].as_sequence().unwrap();
    let mut out = Vec::new();
    for mount in init["volumeMounts"].as_sequence().unwrap() {
        let name = mount["name"].as_str().unwrap();
        let volume = volumes
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .unwrap();
        let source = if volume["hostPath"]["path"].as_str() == Some("/") {
            node
        } else if volume["configMap"].is_mapping() {
            config
        } else {
            panic!("a volume the test does not stand in for: {volume:?}")
        };
        let mode = if mount["readOnly"].as_bool() == Some(true) {
            "ro"
        } else {
            "rw"
        };
        out.push("--mount".to_string());
        out.push(format!(
            "type=bind,src={},dst={},options=rbind:{mode}",
            source.display(),
            mount["mountPath"].as_str().unwrap()
        ));
    }
    out
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn the_image_installs_a_node_in_containerd_as_node_install_does_and_uninstalls_it() {
    let containerd = Containerd::start_runner();
    let (reference, digest, platforms) = containerd.import(&image_archive(), IMAGE_NAME);
    assert_eq!(reference, format!("{IMAGE_NAME}:{VERSION}"));
    assert_eq!(
        digest,
        image_digest(),
        "containerd stores the index the release names"
    );
    assert_eq!(platforms, "linux/amd64");

    let ds = rendered_daemonset(|_| {});
    let spec = &ds["spec"]["template"]["spec"];
    let init = &spec["initContainers"][0];
    // The init container's command, as rendered, but for the kubelet
    // restart (no kubelet runs here) and with `--proc none` (nor any
    // process to identify it by).
    let mut command: Vec<String> = strings(&init["command"])
        .into_iter()
        .filter(|a| a != "--restart-kubelet")
        .collect();
    command.extend(["--proc".into(), "none".into()]);

    let config = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo().join("node-install/credential-provider.yaml"),
        config.path().join("credential-provider.yaml"),
    )
    .unwrap();
    let node = node_root();
    let original = snapshot(node.path());
    let ctr_run = |id: &str, extra: &[String], args: &[String]| {
        let mut all: Vec<String> = vec![
            "run".into(),
            "--rm".into(),
            "--snapshotter".into(),
            "native".into(),
        ];
        all.extend(extra.iter().cloned());
        all.push(reference.clone());
        all.push(id.into());
        all.extend(args.iter().cloned());
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        containerd.ctr(&refs)
    };
    let mut privileged = vec!["--privileged".to_string()];
    privileged.extend(ctr_mounts(init, spec, node.path(), config.path()));
    let out = ctr_run("wicp-install", &privileged, &command);
    assert_ok(&out, "the init container");
    assert!(
        text(&out.stdout).contains("added wi-credential-provider-passthrough"),
        "{}",
        show(&out)
    );

    // The same install straight from the release binary, on another copy.
    let direct = node_root();
    let out = Command::new(artefact(&binary_name()))
        .args(["node", "install", "--root"])
        .arg(direct.path())
        .arg("--config")
        .arg(config.path().join("credential-provider.yaml"))
        .args(["--proc", "none"])
        .output()
        .unwrap();
    assert_ok(&out, "node install from the release binary");
    let installed = snapshot(node.path());
    assert!(!changed(&original, &installed).is_empty());
    let differ = changed(&installed, &snapshot(direct.path()));
    assert!(
        differ.is_empty(),
        "the image's install and node install differ: {differ:?}"
    );

    // The main container: on a read-only root, it waits (ctr 1.6 cannot
    // set the user; the uid is checked below, outside containerd).
    let out = containerd.ctr(&[
        "run",
        "--detach",
        "--snapshotter",
        "native",
        "--read-only",
        &reference,
        "wicp-wait",
        "/usr/bin/wi-credential-provider",
        "node",
        "wait",
    ]);
    assert_ok(&out, "ctr run node wait");
    std::thread::sleep(std::time::Duration::from_millis(700));
    let tasks = text(&containerd.ctr(&["task", "ls"]).stdout);
    let running = tasks
        .lines()
        .any(|l| l.starts_with("wicp-wait") && l.contains("RUNNING"));
    let _ = containerd.ctr(&["task", "kill", "--signal", "SIGKILL", "wicp-wait"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let _ = containerd.ctr(&["task", "delete", "--force", "wicp-wait"]);
    let _ = containerd.ctr(&["container", "delete", "wicp-wait"]);
    assert!(running, "node wait did not stay up: {tasks}");
    // As the DaemonSet's runAsUser, nobody, it waits too.
    let mut nobody = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(artefact(&binary_name()))
        .args(["node", "wait"])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let waited = nobody.try_wait().unwrap();
    let _ = nobody.kill();
    let _ = nobody.wait();
    assert_eq!(waited, None, "node wait as nobody exited");

    // Uninstall from the image puts the node back as it was.
    let mut uninstall = vec!["--privileged".to_string()];
    uninstall.extend(ctr_mounts(init, spec, node.path(), config.path()));
    let out = ctr_run(
        "wicp-uninstall",
        &uninstall,
        &[
            "/usr/bin/wi-credential-provider",
            "node",
            "uninstall",
            "--root=/host",
            "--proc",
            "none",
        ]
        .map(String::from),
    );
    assert_ok(&out, "node uninstall from the image");
    let left = changed(&original, &snapshot(node.path()));
    assert!(left.is_empty(), "uninstall left: {left:?}");
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn the_image_pushed_as_docs_say_keeps_its_digest() {
    let registry = support::registry::Registry::start_with_htpasswd("pusher", "push-secret");
    let pushed =
        registry.push_oci_archive(&image_archive(), "platform/wi-credential-provider", VERSION);
    assert_eq!(
        pushed,
        image_digest(),
        "the digest to pin is the one the registry serves"
    );
    let docs = std::fs::read_to_string(repo().join("docs/release.md")).unwrap();
    assert!(
        docs.contains("skopeo copy --all --preserve-digests"),
        "docs/release.md shows the push this test makes"
    );
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn image_and_packages_refuse_a_binary_for_another_architecture() {
    let out_dir = tempfile::tempdir().unwrap();
    let binary = artefact(&binary_name());
    let archive = out_dir.path().join("image.tar");
    let wrong = format!("arm64={}", binary.display());
    let dynamic = "amd64=/bin/true".to_string();
    for pair in [&wrong, &dynamic] {
        let out = run(
            "bash",
            &["scripts/image.sh", VERSION, archive.to_str().unwrap(), pair],
            Some(&repo()),
        );
        assert_refused(&out, "is not a static linux/");
        assert!(!archive.exists(), "an image was written for {pair}");
        let out = run(
            "bash",
            &[
                "scripts/package.sh",
                VERSION,
                out_dir.path().to_str().unwrap(),
                pair,
            ],
            Some(&repo()),
        );
        assert_refused(&out, "is not a static linux/");
        assert_eq!(
            std::fs::read_dir(out_dir.path()).unwrap().count(),
            0,
            "a package was written for {pair}"
        );
    }
}

/// `node_root()` ready for a package manager: dpkg's database, rpm's, the
/// directories every distribution has that the packages put files in, and
/// a /bin/sh (dash and the C library it needs, copied from this machine)
/// for the maintainer scripts rpm runs chrooted there.
fn package_root() -> tempfile::TempDir {
    let node = node_root();
    let root = node.path();
    for dir in [
        "var/lib/dpkg/info",
        "var/lib/dpkg/updates",
        "var/lib/rpm",
        "bin",
    ] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    // Other packages' files: dpkg removes a directory that only ours used.
    for file in [
        "usr/bin/other",
        "usr/share/doc/other/copyright",
        "usr/share/licenses/other/LICENSE",
    ] {
        std::fs::create_dir_all(root.join(file).parent().unwrap()).unwrap();
        std::fs::write(root.join(file), "another package's file\n").unwrap();
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    let ldd = run("ldd", &["/bin/dash"], None);
    let mut files = vec![PathBuf::from("/bin/dash")];
    for line in text(&ldd.stdout).lines() {
        let path = line
            .split_whitespace()
            .find(|w| w.starts_with('/'))
            .map(PathBuf::from);
        files.extend(path);
    }
    for file in files {
        let to = root.join(file.strip_prefix("/").unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&file, &to).unwrap();
    }
    std::fs::rename(root.join("bin/dash"), root.join("bin/sh")).unwrap();
    node
}

/// What a package manager keeps for itself (its database; rpm's
/// /var/tmp for scriptlets) does not count as left behind.
fn outside_databases(diff: Vec<String>) -> Vec<String> {
    diff.into_iter()
        .filter(|p| {
            !["var/lib/dpkg", "var/lib/rpm", "var/tmp/"]
                .iter()
                .any(|own| p.starts_with(own))
        })
        .collect()
}

/// The package's files, `node install` run from the installed binary,
/// `node uninstall`, then the package removed: nothing of either left.
fn install_use_remove(root: &Path, install: &[&str], remove: &[&str], manager: &str) {
    let before = snapshot(root);
    let out = run(manager, install, None);
    assert_ok(&out, &format!("{manager} install"));
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        said.contains("wi-credential-provider node install"),
        "the post-install message names node install: {said}"
    );
    let installed = root.join("usr/bin/wi-credential-provider");
    let meta = std::fs::metadata(&installed).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
    assert_eq!(sha256(&installed), sha256(&artefact(&binary_name())));
    for doc in ["README.md", "CHANGELOG.md", "node.md", "release.md"] {
        assert!(
            root.join("usr/share/doc/wi-credential-provider")
                .join(doc)
                .is_file(),
            "{doc}"
        );
    }
    // The package alone changes no kubelet configuration.
    let added = outside_databases(changed(&before, &snapshot(root)));
    assert!(
        added
            .iter()
            .all(|p| p.starts_with("usr/bin/wi-credential-provider")
                || p.starts_with("usr/share/doc/wi-credential-provider")
                || p.starts_with("usr/share/licenses/wi-credential-provider")),
        "{manager} installed more than its files: {added:?}"
    );

    let node_install = Command::new(&installed)
        .args(["node", "install", "--root"])
        .arg(root)
        .arg("--config")
        .arg(repo().join("node-install/credential-provider.yaml"))
        .args(["--proc", "none"])
        .output()
        .unwrap();
    assert_ok(&node_install, "node install from the installed path");
    assert_eq!(
        sha256(&root.join(
            "usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec/wi-credential-provider"
        )),
        sha256(&installed)
    );
    let node_uninstall = Command::new(&installed)
        .args(["node", "uninstall", "--root"])
        .arg(root)
        .args(["--proc", "none"])
        .output()
        .unwrap();
    assert_ok(&node_uninstall, "node uninstall");

    assert_ok(&run(manager, remove, None), &format!("{manager} remove"));
    let left = outside_databases(changed(&before, &snapshot(root)));
    assert!(left.is_empty(), "{manager}: removal left {left:?}");
}

/// The first half of `package`: what a cut download is.
fn truncated(package: &Path, dir: &Path) -> PathBuf {
    let bytes = std::fs::read(package).unwrap();
    let cut = dir.join(package.file_name().unwrap());
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    cut
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn the_deb_installs_its_files_only_and_removes_them_all() {
    let deb = artefact(&format!("wi-credential-provider_{VERSION}_amd64.deb"));
    let node = package_root();
    let root = node.path().to_str().unwrap();
    let root_flag = format!("--root={root}");
    install_use_remove(
        node.path(),
        &[
            &root_flag,
            "--force-script-chrootless",
            "--install",
            deb.to_str().unwrap(),
        ],
        &[
            &root_flag,
            "--force-script-chrootless",
            "--purge",
            "wi-credential-provider",
        ],
        "dpkg",
    );
    let cut_dir = tempfile::tempdir().unwrap();
    let cut = truncated(&deb, cut_dir.path());
    let before = snapshot(node.path());
    let out = run(
        "dpkg",
        &[
            &root_flag,
            "--force-script-chrootless",
            "--install",
            cut.to_str().unwrap(),
        ],
        None,
    );
    assert!(
        !out.status.success(),
        "dpkg installed a cut package: {}",
        show(&out)
    );
    assert!(text(&out.stderr).contains("error"), "{}", show(&out));
    assert!(!node.path().join("usr/bin/wi-credential-provider").exists());
    assert!(outside_databases(changed(&before, &snapshot(node.path()))).is_empty());
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn the_rpm_installs_its_files_only_and_removes_them_all() {
    let rpm = artefact(&format!("wi-credential-provider-{VERSION}-1.x86_64.rpm"));
    let node = package_root();
    let root = node.path().to_str().unwrap();
    let db = ["--root", root, "--dbpath", "/var/lib/rpm"];
    assert_ok(
        &run("rpm", &[&db[..], &["--initdb"]].concat(), None),
        "rpm --initdb",
    );
    // An empty database provides nothing: the package requires nothing
    // (a static binary, and a Lua scriptlet rather than a /bin/sh one).
    install_use_remove(
        node.path(),
        &[&db[..], &["--install", rpm.to_str().unwrap()]].concat(),
        &[&db[..], &["--erase", "wi-credential-provider"]].concat(),
        "rpm",
    );
    let cut_dir = tempfile::tempdir().unwrap();
    let cut = truncated(&rpm, cut_dir.path());
    let before = snapshot(node.path());
    let out = run(
        "rpm",
        &[&db[..], &["--install", cut.to_str().unwrap()]].concat(),
        None,
    );
    assert!(
        !out.status.success(),
        "rpm installed a cut package: {}",
        show(&out)
    );
    assert!(!node.path().join("usr/bin/wi-credential-provider").exists());
    assert!(outside_databases(changed(&before, &snapshot(node.path()))).is_empty());
}

/// The crate list `cargo auditable` put in the binary's `.dep-v0`
/// section (zlib-compressed JSON): (name, version) of each package, with
/// the root's name.
fn embedded_crates(binary: &Path) -> (String, BTreeSet<(String, String)>) {
    let dir = tempfile::tempdir().unwrap();
    let section = dir.path().join("dep-v0");
    let out = run(
        "objcopy",
        &[
            "--dump-section",
            &format!(".dep-v0={}", section.display()),
            binary.to_str().unwrap(),
            dir.path().join("copy").to_str().unwrap(),
        ],
        None,
    );
    assert_ok(
        &out,
        "objcopy --dump-section .dep-v0 (no section: not built by cargo auditable)",
    );
    let json = run(
        "python3",
        &[
            "-c",
            "import sys, zlib; sys.stdout.buffer.write(zlib.decompress(open(sys.argv[1], 'rb').read()))",
            section.to_str().unwrap(),
        ],
        None,
    );
    assert_ok(&json, "zlib");
    let list: Value = serde_json::from_slice(&json.stdout).unwrap();
    let packages = list["packages"].as_array().unwrap();
    let root = packages
        .iter()
        .find(|p| p["root"] == true)
        .map(|p| {
            format!(
                "{} {}",
                p["name"].as_str().unwrap(),
                p["version"].as_str().unwrap()
            )
        })
        .unwrap();
    let crates = packages
        .iter()
        .filter(|p| p["root"] != true && p["kind"] != "build")
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["version"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (root, crates)
}

/// The version Cargo.lock pins for `name` (one version only).
fn locked(name: &str) -> String {
    let lock = std::fs::read_to_string(repo().join("Cargo.lock")).unwrap();
    let versions: Vec<&str> = lock
        .split("[[package]]")
        .filter(|p| p.contains(&format!("\nname = \"{name}\"\n")))
        .filter_map(|p| p.split("\nversion = \"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(versions.len(), 1, "{name}: {versions:?}");
    versions[0].to_string()
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn the_binary_lists_its_crates_and_the_bill_of_materials_agrees() {
    let (root, crates) = embedded_crates(&artefact(&binary_name()));
    assert_eq!(root, format!("wi-credential-provider {VERSION}"));
    for name in ["rustls", "aws-lc-rs", "clap", "serde_json"] {
        assert!(
            crates.contains(&(name.to_string(), locked(name))),
            "{name} {} is not in the embedded list",
            locked(name)
        );
    }
    let bom: Value = serde_json::from_slice(
        &std::fs::read(artefact(&format!("{}.cdx.json", binary_name()))).unwrap(),
    )
    .unwrap();
    assert_eq!(bom["bomFormat"], "CycloneDX");
    assert_eq!(bom["specVersion"], "1.5");
    assert_eq!(
        bom["metadata"]["component"]["name"],
        "wi-credential-provider"
    );
    assert_eq!(bom["metadata"]["component"]["version"], VERSION);
    let listed: BTreeSet<(String, String)> = bom["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["version"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let missing: Vec<_> = crates.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "compiled into the binary but not in its bill of materials: {missing:?}"
    );
}

/// The Windows image cannot be built here (its base comes from
/// mcr.microsoft.com): its Containerfile is checked against the Windows
/// DaemonSet, release.sh's file name and the documented build command.
#[test]
fn the_windows_image_file_matches_the_windows_daemonset() {
    let file = std::fs::read_to_string(repo().join("node-install/windows/Containerfile")).unwrap();
    let instructions: Vec<&str> = file
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    let from = instructions
        .iter()
        .find(|l| l.starts_with("FROM "))
        .unwrap();
    assert!(
        from.contains(
            "mcr.microsoft.com/oss/kubernetes/windows-host-process-containers-base-image:"
        ),
        "{from}"
    );
    let copy: Vec<&str> = instructions
        .iter()
        .find(|l| l.starts_with("COPY "))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        copy[1],
        "dist/wi-credential-provider-${VERSION}-windows-amd64.exe"
    );
    let release = std::fs::read_to_string(repo().join("scripts/release.sh")).unwrap();
    assert!(
        release.contains("name=\"wi-credential-provider-${version}-windows-amd64.exe\""),
        "release.sh names the .exe as the Containerfile copies it"
    );
    let inside = copy[2].trim_start_matches('/');

    let rendered = support::kubectl_kustomize(&repo().join("node-install/windows"));
    let ds = rendered
        .iter()
        .find(|d| d["kind"].as_str() == Some("DaemonSet"))
        .unwrap();
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(
        spec["securityContext"]["windowsOptions"]["hostProcess"].as_bool(),
        Some(true)
    );
    for containers in ["initContainers", "containers"] {
        let container = &spec[containers][0];
        assert_eq!(
            container["image"].as_str(),
            Some(
                format!("registry.example.com/platform/wi-credential-provider-windows:{VERSION}")
                    .as_str()
            )
        );
        let command = strings(&container["command"]).join(" ");
        assert!(
            command.contains(&format!("%CONTAINER_SANDBOX_MOUNT_POINT%\\{inside}")),
            "{containers} runs what the image holds: {command}"
        );
    }
    // The one build command, the same where it is documented.
    let command = |text: &str| -> String {
        let start = text
            .find("docker buildx build --platform windows/amd64")
            .expect("the build command");
        text[start..]
            .lines()
            .map(|l| {
                l.trim_start_matches('#')
                    .trim()
                    .trim_end_matches('\\')
                    .trim()
            })
            .take_while(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
            .split(" .")
            .next()
            .unwrap()
            .to_string()
    };
    let docs = std::fs::read_to_string(repo().join("docs/release.md")).unwrap();
    assert_eq!(command(&file), command(&docs));
}

/// A download directory with what the image-bake examples fetch: the
/// release's packages, SHA256SUMS, its signature and install.sh, and the
/// release key as the user pinned it (`release-key.pub`).
fn bake_download() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        format!("wi-credential-provider_{VERSION}_amd64.deb"),
        format!("wi-credential-provider-{VERSION}-1.x86_64.rpm"),
        "SHA256SUMS".into(),
        "SHA256SUMS.sig".into(),
        "install.sh".into(),
    ] {
        std::fs::copy(artefact(&name), dir.path().join(&name)).unwrap();
    }
    std::fs::copy(
        artefact(&format!("{NAMESPACE}.pub")),
        dir.path().join("release-key.pub"),
    )
    .unwrap();
    std::fs::copy(
        repo().join("node-install/credential-provider.yaml"),
        dir.path().join("credential-provider.yaml"),
    )
    .unwrap();
    dir
}

/// packer.pkr.hcl's install line for `file`, run from `dir` onto `node`:
/// the node's root given with --root (the test's stand-in for the image
/// being baked), and no sudo (the test is root).
fn packer_install(dir: &Path, file: &str, node: &Path) -> Output {
    let hcl = std::fs::read_to_string(repo().join("node-install/packer.pkr.hcl")).unwrap();
    let line = hcl
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("\"sudo sh /tmp/wicp/install.sh --package"))
        .expect("packer.pkr.hcl runs install.sh --package");
    let command = line
        .trim_start_matches("\"sudo ")
        .trim_end_matches("\",")
        .replace("${local.wicp_file}", file)
        .replace("/tmp/wicp/", &format!("{}/", dir.display()))
        .replace(" -- ", &format!(" --root {} -- ", node.display()));
    Command::new("sh").args(["-c", &command]).output().unwrap()
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn the_packer_example_verifies_installs_the_package_and_runs_node_install() {
    for file in [
        format!("wi-credential-provider-{VERSION}-1.x86_64.rpm"),
        format!("wi-credential-provider_{VERSION}_amd64.deb"),
    ] {
        let dir = bake_download();
        let node = package_root();
        let out = packer_install(dir.path(), &file, node.path());
        assert_ok(&out, &file);
        let said = text(&out.stdout);
        assert!(
            said.contains("signature and sha256 verified; installing"),
            "{said}"
        );
        assert!(
            said.contains("added wi-credential-provider-passthrough"),
            "{said}"
        );
        assert_eq!(
            sha256(&node.path().join("usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec/wi-credential-provider")),
            sha256(&artefact(&binary_name()))
        );

        // The same package, one byte changed: nothing installed.
        let dir = bake_download();
        flip_byte(&dir.path().join(&file), 2048);
        let node = package_root();
        let before = snapshot(node.path());
        let out = packer_install(dir.path(), &file, node.path());
        assert_refused(&out, "sha256 mismatch");
        assert!(
            changed(&before, &snapshot(node.path())).is_empty(),
            "{file}"
        );
    }
}

/// cloud-init.yaml's first-boot script, run in `dir` (its /run/wicp) with
/// its write_files there, the release key replaced by the release's, and a
/// curl that copies from `release` (the release as hosted); install.sh gets
/// the node's root and `--proc none` (no kubelet runs here).
fn cloud_init_run(dir: &Path, release: &Path, node: &Path) -> Output {
    let text = std::fs::read_to_string(repo().join("node-install/cloud-init.yaml")).unwrap();
    let doc: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
    for file in doc["write_files"].as_sequence().unwrap() {
        let path = file["path"].as_str().unwrap();
        let name = path.strip_prefix("/run/wicp/").unwrap();
        if name != "release-key.pub" {
            std::fs::write(dir.join(name), file["content"].as_str().unwrap()).unwrap();
        }
    }
    std::fs::copy(release.join("release-key.pub"), dir.join("release-key.pub")).unwrap();
    let command = &doc["runcmd"][0];
    assert_eq!(strings(command)[..2], ["sh", "-euc"]);
    let script = command[2]
        .as_str()
        .unwrap()
        .replace("/run/wicp", &dir.display().to_string())
        .replace(
            "--config credential-provider.yaml",
            &format!(
                "--config credential-provider.yaml --root {} -- --proc none",
                node.display()
            ),
        );
    let bin = dir.join("fake-bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(
        bin.join("curl"),
        format!(
            "#!/bin/sh\n# curl -fsSLo FILE URL, from the release directory\ncp \"{}/$(basename \"$3\")\" \"$2\"\n",
            release.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(bin.join("curl"), std::fs::Permissions::from_mode(0o755)).unwrap();
    Command::new("sh")
        .args(["-euc", &script])
        .env(
            "PATH",
            format!("{}:{}", bin.display(), std::env::var("PATH").unwrap()),
        )
        .output()
        .unwrap()
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn the_cloud_init_example_verifies_installs_the_package_and_runs_node_install() {
    let release = bake_download();
    let dir = tempfile::tempdir().unwrap();
    let node = package_root();
    let out = cloud_init_run(dir.path(), release.path(), node.path());
    assert_ok(&out, "cloud-init's script");
    let said = text(&out.stdout);
    assert!(said.contains("install.sh: OK"), "{said}");
    assert!(
        said.contains("signature and sha256 verified; installing"),
        "{said}"
    );
    assert!(node.path().join("usr/bin/wi-credential-provider").is_file());
    assert!(
        node.path()
            .join("etc/kubernetes/credential-provider.yaml")
            .is_file()
    );

    // A changed install.sh is caught before it runs.
    let release = bake_download();
    let script = release.path().join("install.sh");
    let mut changed_script = std::fs::read_to_string(&script).unwrap();
    changed_script.push_str("# changed\n");
    std::fs::write(&script, changed_script).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let node = package_root();
    let before = snapshot(node.path());
    let out = cloud_init_run(dir.path(), release.path(), node.path());
    assert!(!out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("install.sh: FAILED"),
        "{}",
        show(&out)
    );
    assert!(changed(&before, &snapshot(node.path())).is_empty());
}

/// The rules Talos loads a system extension by (siderolabs/talos
/// `pkg/machinery/extensions/load.go` and `validate.go`, v1.13.0): the top
/// holds `manifest.yaml` and `rootfs` only; the manifest is `v1alpha1`
/// with a name and a version constraint; under `rootfs` nothing is
/// world-writable, nothing is special, and every file or link lies under
/// an allowed path (for us, `/usr/local`).
fn talos_refuses(
    entries: &BTreeMap<String, (String, String)>,
    manifest: &yaml_serde::Value,
) -> Vec<String> {
    const ALLOWED: [&str; 1] = ["/usr/local"];
    let mut why = Vec::new();
    for (path, (mode, _)) in entries {
        let top = path.split('/').next().unwrap();
        if top != "manifest.yaml" && top != "rootfs" {
            why.push(format!("unexpected file {top:?}"));
        }
        let Some(inside) = path.strip_prefix("rootfs") else {
            continue;
        };
        let kind = mode.chars().next().unwrap();
        // Links are listed lrwxrwxrwx; Talos reads the type bits only.
        if kind != 'l' && mode.chars().nth(8) == Some('w') {
            why.push(format!("world-writeable files are not allowed: {inside:?}"));
        }
        if !matches!(kind, '-' | 'd' | 'l') {
            why.push(format!("special files are not allowed: {inside:?}"));
        }
        if kind != 'd'
            && !ALLOWED
                .iter()
                .any(|a| inside == *a || inside.starts_with(&format!("{a}/")))
        {
            why.push(format!("path {inside:?} is not allowed in extensions"));
        }
    }
    if manifest["version"] != "v1alpha1" {
        why.push(format!(
            "unsupported manifest version: {:?}",
            manifest["version"]
        ));
    }
    if manifest["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .is_empty()
    {
        why.push("the manifest names no extension".into());
    }
    why
}

#[test]
#[ignore = "needs the release make test-release builds"]
fn the_talos_extension_loads_as_talos_loads_extensions_and_its_plugins_run_from_it() {
    let archive = artefact(&format!(
        "wi-credential-provider-{VERSION}-talos-extension.oci.tar"
    ));
    let (entries, config, unpacked) = archive_contents(&archive);
    let root = unpacked.path().join("rootfs");
    let manifest: yaml_serde::Value =
        yaml_serde::from_slice(&std::fs::read(root.join("manifest.yaml")).unwrap()).unwrap();
    assert_eq!(talos_refuses(&entries, &manifest), Vec::<String>::new());
    // The checker refuses what Talos refuses.
    let mut bad = entries.clone();
    bad.insert("tmp".into(), ("drwxrwxrwt".into(), "0/0".into()));
    bad.insert(
        "rootfs/etc/kubernetes/x".into(),
        ("-rw-r--r--".into(), "0/0".into()),
    );
    let refused = talos_refuses(&bad, &manifest);
    assert!(
        refused
            .iter()
            .any(|w| w.contains("unexpected file \"tmp\"")),
        "{refused:?}"
    );
    assert!(
        refused.iter().any(|w| w.contains("/etc/kubernetes/x")),
        "{refused:?}"
    );
    assert_eq!(manifest["metadata"]["name"], "wi-credential-provider");
    assert_eq!(manifest["metadata"]["version"], VERSION);
    assert_eq!(
        manifest["metadata"]["compatibility"]["talos"]["version"],
        ">= v1.11.0"
    );
    assert!(
        entries.values().all(|(_, owner)| owner == "0/0"),
        "{entries:?}"
    );
    assert_eq!(config["architecture"], "amd64");

    // The binary is the release's, with a link per provider it carries.
    let bin_dir = root.join("rootfs/usr/local/lib/kubelet/credentialproviders");
    assert_eq!(
        sha256(&bin_dir.join("wi-credential-provider")),
        sha256(&artefact(&binary_name()))
    );
    let version = run(
        bin_dir.join("wi-credential-provider").to_str().unwrap(),
        &["--version"],
        None,
    );
    assert_ok(&version, "--version");
    let line = text(&version.stdout);
    let providers = line
        .split("providers: ")
        .nth(1)
        .unwrap()
        .trim()
        .trim_end_matches(')');
    for provider in providers.split(", ") {
        let link = bin_dir.join(format!("wi-credential-provider-{provider}"));
        assert_eq!(
            std::fs::read_link(&link).unwrap(),
            Path::new("wi-credential-provider"),
            "{}",
            link.display()
        );
    }

    // What `node render talos` puts in the machine config, checked as the
    // kubelet would read it with the extension's directory as its bin dir,
    // and a plugin run through its link as the kubelet runs it.
    let rendered = run(
        bin_dir.join("wi-credential-provider").to_str().unwrap(),
        &[
            "node",
            "render",
            "talos",
            "--talos-version",
            "v1.14",
            "--config",
            repo()
                .join("node-install/credential-provider.yaml")
                .to_str()
                .unwrap(),
        ],
        None,
    );
    assert_ok(&rendered, "node render talos");
    let doc: yaml_serde::Value = text(&rendered.stdout)
        .split("\n---\n")
        .last()
        .map(|d| yaml_serde::from_str(d).unwrap())
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let kubelet_config = work.path().join("kubelet-credentialproviderconfig.yaml");
    std::fs::write(
        &kubelet_config,
        yaml_serde::to_string(&doc["configuration"]).unwrap(),
    )
    .unwrap();
    assert_ok(
        &run(
            bin_dir.join("wi-credential-provider").to_str().unwrap(),
            &[
                "check-config",
                "--bin-dir",
                bin_dir.to_str().unwrap(),
                kubelet_config.to_str().unwrap(),
            ],
            None,
        ),
        "check-config of the rendered config with the extension's bin dir",
    );
    let entry = &doc["configuration"]["providers"][0];
    let token = crate::support::token::TokenSpec::new("team", "app", "harbor.example.com").mint();
    let args: Vec<&str> = entry["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let out = crate::support::plugin::run_program(
        &bin_dir.join(entry["name"].as_str().unwrap()),
        &args,
        &[],
        crate::support::plugin::request("harbor.example.com/team/app:1", Some(&token), &[])
            .as_bytes(),
    );
    // The passthrough entry answers with the pod's own token.
    let response = out.response();
    assert_eq!(
        response["auth"]["harbor.example.com"]["password"], token,
        "{response:#}"
    );
}
