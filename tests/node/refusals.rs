//! What `node install` refuses, and that it writes nothing when it does:
//! invalid merges, read-only nodes, FIFOs and devices, planted links,
//! directories another user controls, an untrusted kubelet; dry runs and the
//! merge's golden files.

use super::*;

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
