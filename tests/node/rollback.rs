//! Restarting the kubelet and rolling back exactly once: an unhealthy
//! kubelet, a failed second install, a SIGKILL at every step, concurrent
//! installs, and the DaemonSet's own namespaces.

use super::*;

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
