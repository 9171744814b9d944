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

mod artefacts;
mod image;
mod packages;

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
