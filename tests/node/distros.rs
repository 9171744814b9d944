//! Each distribution's layout, end to end: where its kubelet keeps the
//! credential-provider config, how its stock entry is merged or narrowed,
//! and the systems `node install` refuses with the route that works there.

use super::*;

#[test]
fn kubeadm_full_cycle_adds_the_flags_to_kubelet_extra_args() {
    let node = Node::new("kubeadm-deb", true);
    let original = node.snapshot();
    let out = node.run(&["install", "--provider", "aws"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = text(&out.stdout);
    support::assert_says(
        &stdout,
        &[
            "distribution: kubeadm",
            "request-serviceaccounts-token-audience",
            "\"sts.amazonaws.com\"",
        ],
    );
    let env = std::fs::read_to_string(node.path("/etc/default/kubelet")).unwrap();
    assert_eq!(
        env,
        "KUBELET_EXTRA_ARGS=--image-credential-provider-config=/etc/kubernetes/credential-provider.yaml \
         --image-credential-provider-bin-dir=/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec\n"
    );
    let bin = node.path("/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec");
    assert_eq!(
        std::fs::read_link(bin.join("wi-credential-provider-aws")).unwrap(),
        Path::new("wi-credential-provider")
    );
    assert_eq!(
        std::fs::read(bin.join("wi-credential-provider")).unwrap(),
        std::fs::read(stripped_binary()).unwrap()
    );
    let config =
        std::fs::read_to_string(node.path("/etc/kubernetes/credential-provider.yaml")).unwrap();
    assert!(
        config.contains("name: wi-credential-provider-aws"),
        "{config}"
    );
    // The installed config passes the binary's own check-config.
    let check = Command::new(support::plugin::bin())
        .args(["check-config"])
        .arg(node.path("/etc/kubernetes/credential-provider.yaml"))
        .arg("--bin-dir")
        .arg(&bin)
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", show(&check));
    // Back to the start, then the whole cycle.
    assert_eq!(node.run(&["uninstall"]).status.code(), Some(0));
    assert!(changed(&original, &node.snapshot()).is_empty());
    full_cycle(&node, &["--provider", "aws"]);
}

#[test]
fn eks_refuses_to_leave_the_node_role_entry_beside_ours() {
    let node = Node::new("eks-al2023", true);
    let original = node.snapshot();
    let out = node.run(&["install", "--provider", "aws"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stdout = text(&out.stdout);
    support::assert_says(
        &stdout,
        &[
            "overlap.node-identity",
            "ecr-credential-provider",
            "--replace",
        ],
    );
    assert!(
        text(&out.stderr).contains("nothing was written"),
        "{}",
        show(&out)
    );
    // Round-4 item 7: not even the state directory the lock lives in.
    assert!(!original.contains_key("var/lib/wi-credential-provider/"));
    assert!(!node.path("/var/lib/wi-credential-provider").exists());
    assert!(changed(&original, &node.snapshot()).is_empty());
}

#[test]
fn eks_replace_narrows_the_stock_entry_into_our_own_file() {
    let node = Node::new("eks-al2023", true);
    let nodeadm_config =
        std::fs::read(node.path("/etc/eks/image-credential-provider/config.json")).unwrap();
    let install = [
        "--provider",
        "aws",
        "--replace",
        "ecr-credential-provider=602401143452.dkr.ecr.us-west-2.amazonaws.com",
    ];
    let mut args = vec!["install"];
    args.extend(install);
    let out = node.run(&args);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    // nodeadm's file is left alone: it would be rewritten at boot anyway.
    assert_eq!(
        std::fs::read(node.path("/etc/eks/image-credential-provider/config.json")).unwrap(),
        nodeadm_config
    );
    // Our own complete file, JSON like nodeadm's, the ECR entry narrowed.
    let own: Value = serde_json::from_slice(
        &std::fs::read(node.path("/etc/eks/wi-credential-provider/config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(own["providers"][0]["name"], "ecr-credential-provider");
    assert_eq!(
        own["providers"][0]["matchImages"],
        serde_json::json!(["602401143452.dkr.ecr.us-west-2.amazonaws.com"])
    );
    assert_eq!(own["providers"][0]["defaultCacheDuration"], "12h");
    assert_eq!(own["providers"][1]["name"], "wi-credential-provider-aws");
    // The flag: appended last in nodeadm's environment file now, and in a
    // NodeConfig drop-in so nodeadm writes it again at every boot.
    let env = std::fs::read_to_string(node.path("/etc/eks/kubelet/environment")).unwrap();
    assert!(
        env.ends_with(
            " --image-credential-provider-config=/etc/eks/wi-credential-provider/config.json"
        ),
        "{env}"
    );
    assert!(!env.ends_with('\n'));
    let drop_in =
        std::fs::read_to_string(node.path("/etc/eks/nodeadm.d/90-wi-credential-provider.yaml"))
            .unwrap();
    assert!(drop_in.contains("kind: NodeConfig"), "{drop_in}");
    assert!(drop_in.contains(
        "- --image-credential-provider-config=/etc/eks/wi-credential-provider/config.json"
    ));
    // The binary sits in nodeadm's (single) bin dir, beside the ECR plugin.
    assert!(
        node.path("/etc/eks/image-credential-provider/wi-credential-provider-aws")
            .is_symlink()
    );
    assert_eq!(node.run(&["uninstall"]).status.code(), Some(0));
    full_cycle(&node, &install);
}

#[test]
fn eks_directory_config_from_kubelet_1_34() {
    let node = Node::new("eks-al2023", true);
    let kubelet = node.path("/usr/bin/kubelet");
    std::fs::create_dir_all(kubelet.parent().unwrap()).unwrap();
    std::fs::write(
        &kubelet,
        "#!/bin/sh\necho 'Kubernetes v1.34.2-eks-113cf36'\n",
    )
    .unwrap();
    std::fs::set_permissions(&kubelet, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config =
        repo().join("config-examples/passthrough-harbor-zot/credential-provider-config.yaml");
    let config = config.to_str().unwrap();
    let report = full_cycle(&node, &["--config", config]);
    assert_eq!(
        report["discovery"]["kubelet_version"]["value"], "1.34",
        "{report:#}"
    );
    assert_eq!(report["plan"]["config"]["mode"], "directory", "{report:#}");
    assert_eq!(
        report["plan"]["config"]["path"],
        "/etc/eks/image-credential-provider/wi-credential-provider.json"
    );
}

#[test]
fn aks_merges_into_agentbakers_yaml_and_narrows_the_node_entry() {
    let node = Node::new("aks", true);
    // AgentBaker writes its flags file 0600; git keeps only 0644 or 0755,
    // so the fixture gets its real mode here.
    std::fs::set_permissions(
        node.path("/etc/default/kubelet"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let install = [
        "--provider",
        "azure",
        "--replace",
        "acr-credential-provider=contosoregistry.azurecr.io",
    ];
    let report = full_cycle(&node, &install);
    assert_eq!(report["plan"]["config"]["mode"], "file", "{report:#}");
    assert_eq!(
        report["plan"]["config"]["path"],
        "/var/lib/kubelet/credential-provider-config.yaml"
    );
    assert!(
        report["discovery"]["credential_config"]["source"]
            .as_str()
            .unwrap()
            .contains("systemd unit kubelet.service")
    );
    // Installed again to look at the result: YAML, AgentBaker's entry kept
    // in place with its args, narrowed; ours after it.
    let mut args = vec!["install"];
    args.extend(install);
    assert_eq!(node.run(&args).status.code(), Some(0));
    let text =
        std::fs::read_to_string(node.path("/var/lib/kubelet/credential-provider-config.yaml"))
            .unwrap();
    let doc: Value = serde_json::to_value(yaml_to_json(&text)).unwrap();
    assert_eq!(doc["providers"][0]["name"], "acr-credential-provider");
    assert_eq!(
        doc["providers"][0]["args"],
        serde_json::json!(["/etc/kubernetes/azure.json"])
    );
    assert_eq!(
        doc["providers"][0]["matchImages"],
        serde_json::json!(["contosoregistry.azurecr.io"])
    );
    assert_eq!(doc["providers"][1]["name"], "wi-credential-provider-azure");
    // AgentBaker's mode on the flags file is kept.
    assert_eq!(
        std::fs::metadata(node.path("/etc/default/kubelet"))
            .unwrap()
            .mode()
            & 0o777,
        0o600
    );
}

#[test]
fn gke_cos_merges_into_cri_auth_config_and_warns_about_the_tmpfs() {
    let node = Node::new("gke-cos", true);
    let install = [
        "--provider",
        "gcp",
        "--replace",
        "auth-provider-gcp=gke.gcr.io",
    ];
    full_cycle(&node, &install);
    let mut args = vec!["install"];
    args.extend(install);
    assert_eq!(node.run(&args).status.code(), Some(0));
    assert!(
        node.path("/home/kubernetes/bin/wi-credential-provider-gcp")
            .is_symlink()
    );
    let doctor = node.run(&["doctor"]);
    let stdout = text(&doctor.stdout);
    support::assert_says(&stdout, &["WARN rewritten-at-boot", "tmpfs"]);
}

#[test]
fn k3s_uses_its_built_in_paths() {
    let node = Node::new("k3s", true);
    write_health_config(&node, "/etc/rancher/k3s/kubelet-health.yaml");
    let common = ["--kubelet-config", "/etc/rancher/k3s/kubelet-health.yaml"];
    let report = full_cycle_with(&node, &["--provider", "aws", "--restart-kubelet"], &common);
    assert_eq!(
        report["plan"]["config"]["path"],
        "/var/lib/rancher/credentialprovider/config.yaml"
    );
    assert_eq!(
        report["plan"]["bin_dir"],
        "/var/lib/rancher/credentialprovider/bin"
    );
    assert_eq!(node.systemctl_log(), "restart k3s.service\n");
}

#[test]
fn k3s_refuses_a_config_directory_it_would_ignore() {
    let node = Node::new("k3s", true);
    std::fs::create_dir_all(node.path("/var/lib/rancher/credentialprovider/config.yaml")).unwrap();
    let original = node.snapshot();
    let out = node.run(&["install", "--provider", "aws"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("is a directory"),
        "{}",
        show(&out)
    );
    assert!(changed(&original, &node.snapshot()).is_empty());
}

#[test]
fn rke2_uses_the_same_built_in_paths() {
    let node = Node::new("rke2", true);
    write_health_config(&node, "/etc/rancher/rke2/kubelet-health.yaml");
    let common = ["--kubelet-config", "/etc/rancher/rke2/kubelet-health.yaml"];
    let report = full_cycle_with(&node, &["--provider", "gcp", "--restart-kubelet"], &common);
    assert_eq!(report["discovery"]["distro"], "rke2");
    assert_eq!(node.systemctl_log(), "restart rke2-server.service\n");
}

#[test]
fn bottlerocket_is_refused_with_the_supported_route() {
    refused_with_nothing_written(
        "bottlerocket",
        &["cannot install on Bottlerocket", "custom variant"],
    );
}

#[test]
fn talos_is_refused_with_the_extension_and_the_render_command() {
    refused_with_nothing_written(
        "talos",
        &[
            "cannot install on Talos",
            "talos-extension",
            "node render talos --talos-version",
        ],
    );
}

#[test]
fn microshift_is_refused_with_the_keys_it_will_read() {
    refused_with_nothing_written(
        "microshift",
        &[
            "cannot install on MicroShift",
            "kubelet.imageCredentialProviderConfigPath",
            "/etc/microshift/config.d/",
        ],
    );
}

#[test]
fn openshift_is_refused_with_the_render_command() {
    refused_with_nothing_written(
        "openshift",
        &["cannot install on OpenShift", "node render openshift"],
    );
}

#[test]
fn k3s_paths_from_its_config_yaml_and_drop_ins() {
    let node = Node::new("k3s", true);
    std::fs::create_dir_all(node.path("/etc/rancher/k3s/config.yaml.d")).unwrap();
    std::fs::write(
        node.path("/etc/rancher/k3s/config.yaml"),
        "image-credential-provider-config: /etc/rancher/creds/config.yaml\n",
    )
    .unwrap();
    std::fs::write(
        node.path("/etc/rancher/k3s/config.yaml.d/50-bin.yaml"),
        "image-credential-provider-bin-dir: /opt/k3s-creds/bin\n",
    )
    .unwrap();
    write_health_config(&node, "/etc/rancher/k3s/kubelet-health.yaml");
    let common = ["--kubelet-config", "/etc/rancher/k3s/kubelet-health.yaml"];
    let report = full_cycle_with(&node, &["--provider", "aws"], &common);
    assert_eq!(
        report["plan"]["bin_dir"], "/opt/k3s-creds/bin",
        "{report:#}"
    );
    assert_eq!(
        report["plan"]["config"]["path"], "/etc/rancher/creds/config.yaml",
        "{report:#}"
    );
}

#[test]
fn gke_cos_uninstall_after_a_reboot_rebuilt_etc() {
    let node = Node::new("gke-cos", true);
    let original = node.snapshot();
    let out = node.run(&[
        "install",
        "--provider",
        "gcp",
        "--replace",
        "auth-provider-gcp=gke.gcr.io",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    // The reboot: configure-helper.sh writes /etc again from scratch, and
    // our backup on the tmpfs is gone.
    let config = "etc/srv/kubernetes/cri_auth_config.yaml";
    std::fs::write(node.root().join(config), &original[config].0).unwrap();
    std::fs::remove_file(
        node.root()
            .join(format!("{config}.wi-credential-provider.bak")),
    )
    .unwrap();
    let un = node.run(&["uninstall"]);
    assert_eq!(un.status.code(), Some(0), "{}", show(&un));
    let diff = changed(&original, &node.snapshot());
    assert!(diff.is_empty(), "{diff:?}\n{}", show(&un));
}

/// An AKS node with service-account image pull on (AgentBaker's
/// `writeCredentialProviderConfig` with `SERVICE_ACCOUNT_IMAGE_PULL_ENABLED`:
/// the stock entry's audience `api://AKSIdentityBinding` and its `--ib-*`
/// args): replacing the stock entry, our azure entry takes the same
/// identity-binding endpoint with our flags and audience, check-config
/// accepts it, and a second run changes nothing.
#[test]
fn aks_with_identity_bindings_keeps_the_binding_when_replacing_the_stock_entry() {
    let node = Node::new("aks", true);
    let config = node.path("/var/lib/kubelet/credential-provider-config.yaml");
    let stock = std::fs::read_to_string(&config).unwrap().replace(
        "    args:\n      - /etc/kubernetes/azure.json\n",
        "    args:\n      - /etc/kubernetes/azure.json\n      - --ib-sni-name=a4kq3s6v0ndc8i2u1m7t5p9r0e3b6h8j2f4l1o7g5c9k3q8s0u2e.ests.aks\n      - --ib-default-client-id=5b8e2c1a-9f3d-4e7b-a6c2-1d0f8e9a7b3c\n      - --ib-apiserver-ip=contoso-dns-4f1c2d.hcp.eastus.azmk8s.io\n    tokenAttributes:\n      serviceAccountTokenAudience: api://AKSIdentityBinding\n      requireServiceAccount: false\n      cacheType: ServiceAccount\n      optionalServiceAccountAnnotationKeys:\n        - kubernetes.azure.com/acr-client-id\n",
    );
    assert!(
        stock.contains("--ib-sni-name"),
        "the fixture changed: {stock}"
    );
    std::fs::write(&config, stock).unwrap();
    let install = [
        "install",
        "--provider",
        "azure",
        "--fallback",
        "node",
        "--replace",
        "acr-credential-provider",
    ];
    let out = node.run(&install);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("acr-credential-provider uses AKS identity bindings"),
        "{}",
        show(&out)
    );
    let written = std::fs::read_to_string(&config).unwrap();
    let doc = yaml_to_json(&written);
    assert_eq!(doc["providers"].as_array().unwrap().len(), 1, "{written}");
    let ours = &doc["providers"][0];
    assert_eq!(ours["name"], "wi-credential-provider-azure");
    let args: Vec<&str> = ours["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for want in [
        "--azure-identity-binding-sni=a4kq3s6v0ndc8i2u1m7t5p9r0e3b6h8j2f4l1o7g5c9k3q8s0u2e.ests.aks",
        "--azure-identity-binding-client-id=5b8e2c1a-9f3d-4e7b-a6c2-1d0f8e9a7b3c",
        "--azure-identity-binding-address=contoso-dns-4f1c2d.hcp.eastus.azmk8s.io",
        "--fallback",
    ] {
        assert!(args.contains(&want), "{want} not in {args:?}");
    }
    assert_eq!(
        ours["tokenAttributes"]["serviceAccountTokenAudience"],
        "api://AKSIdentityBinding"
    );
    let again = node.run(&install);
    assert_eq!(again.status.code(), Some(0), "{}", show(&again));
    assert!(
        text(&again.stdout).contains("nothing to change"),
        "{}",
        show(&again)
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), written);
}

/// Round-5 item 4: on an AKS custom-cloud node, AgentBaker's stock entry
/// also matches `*<registry suffix>` (`Config-CredentialProvider`; the
/// Linux CSE likewise). Removing it with `--replace` would leave that
/// cloud's registry matched by nothing: install refuses before writing,
/// naming the pattern and the `--replace NAME=PATTERNS` that keeps the
/// stock plugin for it; with that, install succeeds and the stock entry
/// keeps exactly the pattern ours does not cover.
#[test]
fn replacing_the_stock_entry_never_drops_a_pattern_ours_does_not_cover() {
    let node = Node::new("aks", true);
    let config = node.path("/var/lib/kubelet/credential-provider-config.yaml");
    let stock = std::fs::read_to_string(&config).unwrap().replace(
        "      - \"*.*.geo.azurecr.us\"\n",
        "      - \"*.*.geo.azurecr.us\"\n      - \"*.azurecr.microsoft.scloud\"\n",
    );
    std::fs::write(&config, &stock).unwrap();
    let before = node.snapshot();
    let mut install = vec![
        "install",
        "--provider",
        "azure",
        "--fallback",
        "node",
        "--replace",
        "acr-credential-provider",
    ];
    let out = node.run(&install);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    support::assert_says(
        &text(&out.stderr),
        &[
            "would take *.azurecr.microsoft.scloud from acr-credential-provider",
            "nothing was changed",
            "--replace acr-credential-provider=*.azurecr.microsoft.scloud",
        ],
    );
    assert!(changed(&before, &node.snapshot()).is_empty());

    install[6] = "acr-credential-provider=*.azurecr.microsoft.scloud";
    let out = node.run(&install);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let doc = yaml_to_json(&std::fs::read_to_string(&config).unwrap());
    let stock = doc["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "acr-credential-provider")
        .unwrap();
    assert_eq!(
        stock["matchImages"],
        serde_json::json!(["*.azurecr.microsoft.scloud"])
    );
}
