//! Every scenario in config-examples/ is complete and correct: its kubelet
//! config passes `check-config` without a finding, its RBAC grants the nodes
//! exactly the audiences the config uses, and each image of each pod passes
//! `explain` with the pod's service account. The node-install config is held
//! to the same standard.

use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use serde::Deserialize;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn examples() -> PathBuf {
    repo().join("config-examples")
}

fn documents(path: &Path) -> Vec<yaml_serde::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    yaml_serde::Deserializer::from_str(&text)
        .map(|d| yaml_serde::Value::deserialize(d).unwrap())
        .collect()
}

fn of_kind<T: serde::de::DeserializeOwned>(docs: &[yaml_serde::Value], kind: &str) -> Vec<T> {
    docs.iter()
        .filter(|d| d.get("kind").and_then(|k| k.as_str()) == Some(kind))
        .map(|d| yaml_serde::from_value(d.clone()).unwrap())
        .collect()
}

fn wicp(args: &[&str]) -> Output {
    Command::new(support::plugin::bin())
        .args(args)
        .env_clear()
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The audiences a kubelet config asks tokens for.
fn configured_audiences(config: &Path) -> BTreeSet<String> {
    let docs = documents(config);
    docs[0]["providers"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|p| p.get("tokenAttributes"))
        .map(|t| {
            t["serviceAccountTokenAudience"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// `None` when check-config finds nothing, else what it found.
fn check_config_problems(config: &Path) -> Option<String> {
    let out = wicp(&[
        "check-config",
        &config.display().to_string(),
        "--output",
        "json",
    ]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let clean = out.status.success() && report["findings"].as_array().unwrap().is_empty();
    (!clean).then(|| {
        format!(
            "{}: {}",
            config.display(),
            serde_json::to_string_pretty(&report["findings"]).unwrap()
        )
    })
}

fn assert_clean(config: &Path) {
    if let Some(problems) = check_config_problems(config) {
        panic!("{problems}");
    }
}

/// The scenarios: every directory under config-examples/.
fn scenarios() -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(examples())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    found
}

#[test]
fn every_scenario_is_complete() {
    let scenarios = scenarios();
    assert!(scenarios.len() >= 10, "{scenarios:?}");
    for scenario in &scenarios {
        for file in [
            "credential-provider-config.yaml",
            "rbac.yaml",
            "workload.yaml",
            "README.md",
        ] {
            assert!(
                examples().join(scenario).join(file).is_file(),
                "{scenario}/{file}"
            );
        }
    }
}

/// The scenarios config-examples/README.md's table names: the first
/// cell of each row of the table headed `| scenario |`.
fn scenario_rows(readme: &str) -> Vec<String> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in readme.lines() {
        if line.starts_with("| scenario |") {
            in_table = true;
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
        }
        if in_table && !line.starts_with("|---") {
            let cell = line.split('|').nth(1).unwrap_or_default().trim();
            rows.push(cell.trim_matches('`').to_string());
        }
    }
    rows
}

/// Rows and directories, both ways: a scenario added without its row, or
/// a row left behind by a removed scenario, is caught here.
fn table_drift(rows: &[String], scenarios: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    for scenario in scenarios {
        if !rows.contains(scenario) {
            problems.push(format!(
                "config-examples/{scenario} has no row in config-examples/README.md"
            ));
        }
    }
    for row in rows {
        if !scenarios.contains(row) {
            problems.push(format!(
                "config-examples/README.md names {row}, which is no directory"
            ));
        }
    }
    problems
}

#[test]
fn the_readme_table_names_every_scenario_and_no_other() {
    let readme = std::fs::read_to_string(examples().join("README.md")).unwrap();
    let rows = scenario_rows(&readme);
    let problems = table_drift(&rows, &scenarios());
    assert!(problems.is_empty(), "{problems:#?}");
    // The check itself: a removed row and a stale one are both reported.
    let fewer: Vec<String> = rows.iter().skip(1).cloned().collect();
    let mut stale = rows.clone();
    stale.push("gone".into());
    assert_eq!(table_drift(&fewer, &scenarios()).len(), 1);
    assert_eq!(table_drift(&stale, &scenarios()).len(), 1);
}

/// The provider names a scenario's kubelet config runs the plugin as.
fn configured_providers(scenario: &str) -> BTreeSet<String> {
    let config = examples()
        .join(scenario)
        .join("credential-provider-config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("- name: wi-credential-provider-"))
        .map(str::to_string)
        .collect()
}

/// Every provider the binary carries has a scenario of its own, and is in
/// `multi-provider`, the config a fleet starts from.
#[test]
fn every_provider_has_a_scenario() {
    let scenarios = scenarios();
    let all = configured_providers("multi-provider");
    for provider in support::plugin::carried_providers() {
        assert!(
            scenarios
                .iter()
                .filter(|s| s.as_str() != "multi-provider")
                .any(|s| configured_providers(s).contains(&provider)),
            "no config-examples/<scenario>/ runs wi-credential-provider-{provider}"
        );
        assert!(
            all.contains(&provider),
            "config-examples/multi-provider does not run wi-credential-provider-{provider}"
        );
    }
}

#[test]
fn every_example_config_passes_check_config() {
    let problems: Vec<String> = scenarios()
        .iter()
        .filter_map(|scenario| {
            check_config_problems(
                &examples()
                    .join(scenario)
                    .join("credential-provider-config.yaml"),
            )
        })
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn rbac_grants_the_nodes_exactly_the_configured_audiences() {
    for scenario in &scenarios() {
        let dir = examples().join(scenario);
        let wanted = configured_audiences(&dir.join("credential-provider-config.yaml"));
        let docs = documents(&dir.join("rbac.yaml"));
        let roles: Vec<ClusterRole> = of_kind(&docs, "ClusterRole");
        let bindings: Vec<ClusterRoleBinding> = of_kind(&docs, "ClusterRoleBinding");
        assert_eq!(roles.len(), 1, "{scenario}");
        assert_eq!(bindings.len(), 1, "{scenario}");
        let role = &roles[0];
        let mut granted = BTreeSet::new();
        for rule in role.rules.as_ref().unwrap() {
            assert_eq!(
                rule.verbs,
                ["request-serviceaccounts-token-audience"],
                "{scenario}"
            );
            assert_eq!(
                rule.api_groups.as_deref(),
                Some(&[String::new()][..]),
                "{scenario}"
            );
            granted.extend(rule.resources.clone().unwrap());
        }
        assert_eq!(granted, wanted, "{scenario}");
        let binding = &bindings[0];
        assert_eq!(binding.role_ref.kind, "ClusterRole");
        assert_eq!(Some(&binding.role_ref.name), role.metadata.name.as_ref());
        let subjects = binding.subjects.as_ref().unwrap();
        assert!(
            subjects
                .iter()
                .any(|s| s.kind == "Group" && s.name == "system:nodes"),
            "{scenario}"
        );
    }
}

#[test]
fn every_example_pod_image_passes_explain() {
    let mut failures = Vec::new();
    for scenario in &scenarios() {
        let dir = examples().join(scenario);
        let docs = documents(&dir.join("workload.yaml"));
        let pods: Vec<Pod> = of_kind(&docs, "Pod");
        assert!(!pods.is_empty(), "{scenario}");
        for pod in pods {
            let namespace = pod.metadata.namespace.clone().unwrap();
            let spec = pod.spec.unwrap();
            let sa_name = spec.service_account_name.clone().unwrap();
            let sa_doc = docs
                .iter()
                .find(|d| {
                    d.get("kind").and_then(|k| k.as_str()) == Some("ServiceAccount")
                        && d["metadata"]["name"].as_str() == Some(sa_name.as_str())
                        && d["metadata"]["namespace"].as_str() == Some(namespace.as_str())
                })
                .unwrap_or_else(|| panic!("{scenario}: no ServiceAccount {namespace}/{sa_name}"));
            let _: ServiceAccount = yaml_serde::from_value(sa_doc.clone()).unwrap();
            let tmp = tempfile::tempdir().unwrap();
            let sa_file = tmp.path().join("sa.yaml");
            std::fs::write(&sa_file, yaml_serde::to_string(sa_doc).unwrap()).unwrap();
            for container in &spec.containers {
                let image = container.image.clone().unwrap();
                let out = wicp(&[
                    "explain",
                    "--image",
                    &image,
                    "--service-account",
                    &sa_file.display().to_string(),
                    "--config",
                    &dir.join("credential-provider-config.yaml")
                        .display()
                        .to_string(),
                ]);
                let stdout = text(&out.stdout);
                if !out.status.success() {
                    failures.push(format!(
                        "{scenario}: {image}:\n{stdout}{}",
                        text(&out.stderr)
                    ));
                    continue;
                }
                support::assert_says(&stdout, &["    auth key: ", "network: not contacted"]);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The Windows installer: a HostProcess pod (hostProcess needs
/// hostNetwork) as SYSTEM on Windows nodes only, whose init container runs
/// the image's .exe against the system drive with the restart and its
/// rollback, and replaces the stock ACR entry.
#[test]
fn the_windows_node_install_daemonset_is_a_host_process_pod() {
    let docs = documents(&repo().join("node-install/windows/daemonset.yaml"));
    let sets: Vec<DaemonSet> = of_kind(&docs, "DaemonSet");
    assert_eq!(sets.len(), 1);
    let spec = sets[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(spec.host_network, Some(true));
    let os = spec.node_selector.as_ref().unwrap();
    assert_eq!(
        os.get("kubernetes.io/os").map(String::as_str),
        Some("windows")
    );
    let windows = spec
        .security_context
        .as_ref()
        .unwrap()
        .windows_options
        .as_ref()
        .unwrap();
    assert_eq!(windows.host_process, Some(true));
    assert_eq!(
        windows.run_as_user_name.as_deref(),
        Some("NT AUTHORITY\\SYSTEM")
    );
    let init = &spec.init_containers.as_ref().unwrap()[0];
    let command = init.command.as_ref().unwrap().join(" ");
    for part in [
        "%CONTAINER_SANDBOX_MOUNT_POINT%\\wi-credential-provider.exe node install",
        "--root C:\\",
        "--provider azure",
        "--replace acr-credential-provider",
        "--restart-kubelet",
    ] {
        assert!(command.contains(part), "{part} not in {command}");
    }
    let main = spec.containers[0].command.as_ref().unwrap().join(" ");
    assert!(
        main.ends_with("%CONTAINER_SANDBOX_MOUNT_POINT%\\wi-credential-provider.exe node wait"),
        "{main}"
    );
    let kustomization = &documents(&repo().join("node-install/windows/kustomization.yaml"))[0];
    assert_eq!(
        kustomization["resources"][0].as_str(),
        Some("daemonset.yaml")
    );
}

#[test]
fn the_node_install_config_and_daemonset_are_sound() {
    assert_clean(&repo().join("node-install/credential-provider.yaml"));

    let docs = documents(&repo().join("node-install/daemonset.yaml"));
    let sets: Vec<DaemonSet> = of_kind(&docs, "DaemonSet");
    assert_eq!(sets.len(), 1);
    let spec = sets[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    // Runs on every node, whatever its taints.
    let tolerations = spec.tolerations.as_ref().unwrap();
    assert!(
        tolerations
            .iter()
            .any(|t| t.operator.as_deref() == Some("Exists")
                && t.key.is_none()
                && t.effect.is_none())
    );
    // The init container runs the image's binary (the image has nothing
    // else: no shell) into the mounted host root, with the config from the
    // ConfigMap, privileged; then the pod only waits, unprivileged.
    let init = &spec.init_containers.as_ref().unwrap()[0];
    let command = init.command.as_ref().unwrap().join(" ");
    assert!(
        command.starts_with(
            "/usr/bin/wi-credential-provider node install --root=/host --config=/config/credential-provider.yaml"
        ),
        "{command}"
    );
    assert_eq!(
        init.security_context.as_ref().unwrap().privileged,
        Some(true)
    );
    let mounts: BTreeSet<String> = init
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| m.mount_path.clone())
        .collect();
    // `node install` needs the whole host
    // root (the kubelet's paths are found at run time) and the host's /proc
    // (hostPID) to identify the kubelet and probe its health from PID 1's
    // network namespace; the pod itself stays off the host network.
    assert!(command.contains("--restart-kubelet"), "{command}");
    assert_ne!(spec.host_network, Some(true));
    assert!(mounts.contains("/host"));
    assert!(mounts.contains("/config"));
    assert_eq!(spec.host_pid, Some(true));
    let main = &spec.containers[0];
    assert_eq!(
        main.command.as_ref().unwrap().join(" "),
        "/usr/bin/wi-credential-provider node wait"
    );
    assert_eq!(main.image, init.image);
    let security = main.security_context.as_ref().unwrap();
    assert_eq!(security.privileged, None);
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(security.run_as_non_root, Some(true));

    // The kustomization names the DaemonSet and generates its ConfigMap
    // from the checked config.
    let kustomization = &documents(&repo().join("node-install/kustomization.yaml"))[0];
    assert_eq!(
        kustomization["resources"][0].as_str(),
        Some("daemonset.yaml")
    );
    assert_eq!(
        kustomization["configMapGenerator"][0]["files"][0].as_str(),
        Some("credential-provider.yaml")
    );
    let volumes = spec.volumes.as_ref().unwrap();
    assert!(
        volumes
            .iter()
            .any(|v| v.config_map.as_ref().is_some_and(|c| c.name
                == kustomization["configMapGenerator"][0]["name"]
                    .as_str()
                    .unwrap()))
    );
}

#[test]
fn the_cloud_init_example_config_passes_check_config() {
    let docs = documents(&repo().join("node-install/cloud-init.yaml"));
    let files = docs[0]["write_files"].as_sequence().unwrap();
    let config = files
        .iter()
        .find(|f| f["path"].as_str() == Some("/run/wicp/credential-provider.yaml"))
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("credential-provider.yaml");
    std::fs::write(&path, config["content"].as_str().unwrap()).unwrap();
    assert_clean(&path);
}
