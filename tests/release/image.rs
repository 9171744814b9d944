//! The node image and the Talos extension: as the DaemonSet, containerd
//! and Talos run them, and as the docs push them.

use super::*;

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
