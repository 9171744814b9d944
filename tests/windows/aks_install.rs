//! `node install` on an AKS Windows node: idempotent, restored byte for
//! byte, refusals without a write, and one rollback through the Service
//! Control Manager.

use super::*;

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
