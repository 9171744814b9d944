//! `node doctor`: what it reports about a node's set-up.

use super::*;

#[test]
fn doctor_reports_the_overlap_and_the_nodeadm_rewrite() {
    let node = Node::new("eks-al2023", true);
    // The trap as people set it up: our entry appended to nodeadm's file.
    let path = node.path("/etc/eks/image-credential-provider/config.json");
    let mut config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let ours: Value = serde_json::json!({
        "name": "wi-credential-provider-aws",
        "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
        "matchImages": ["*.dkr.ecr.*.amazonaws.com"],
        "defaultCacheDuration": "1h",
        "tokenAttributes": {"serviceAccountTokenAudience": "sts.amazonaws.com", "cacheType": "ServiceAccount", "requireServiceAccount": true,
            "optionalServiceAccountAnnotationKeys": ["eks.amazonaws.com/ecr-role-arn", "eks.amazonaws.com/role-arn"]}
    });
    config["providers"].as_array_mut().unwrap().push(ours);
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    let out = node.run(&["doctor", "--output", "json"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let r = json(&out);
    let failed: Vec<&str> = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["verdict"] == "fail")
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert!(
        failed.contains(&"check-config overlap.node-identity"),
        "{failed:?}"
    );
    assert!(failed.contains(&"rewritten-at-boot"), "{failed:?}");
    assert!(failed.contains(&"binary"), "{failed:?}");
    assert_eq!(r["ok"], false);
}

/// An `--identity spiffe` entry pulls through the SPIRE agent's admin
/// socket: doctor fails while nothing is there, or a file is, and passes
/// once a socket is (it connects to none).
#[test]
fn doctor_checks_the_spire_admin_socket_of_spiffe_entries() {
    let node = Node::new("kubeadm-deb", true);
    let config = repo().join("config-examples/spiffe-zot/credential-provider-config.yaml");
    let install = node.run(&["install", "--config", config.to_str().unwrap()]);
    assert_eq!(install.status.code(), Some(0), "{}", show(&install));
    let spire = |node: &Node| {
        let out = node.run(&["doctor", "--output", "json"]);
        let r = json(&out);
        let found: Vec<Value> = r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["check"] == "spire.socket")
            .cloned()
            .collect();
        assert_eq!(found.len(), 1, "{r:#}");
        found[0].clone()
    };
    let socket = node.path("/run/spire/admin/admin.sock");
    let missing = spire(&node);
    assert_eq!(missing["verdict"], "fail", "{missing:#}");
    assert!(
        missing["message"]
            .to_string()
            .contains("/run/spire/admin/admin.sock"),
        "{missing:#}"
    );
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    std::fs::write(&socket, "not a socket").unwrap();
    assert_eq!(spire(&node)["verdict"], "fail");
    std::fs::remove_file(&socket).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let there = spire(&node);
    assert_eq!(there["verdict"], "ok", "{there:#}");
}

#[test]
fn doctor_reports_an_unhealthy_kubelet() {
    let node = Node::new("kubeadm-deb", false);
    let install = node.run(&["install", "--provider", "aws"]);
    assert_eq!(install.status.code(), Some(0), "{}", show(&install));
    let out = node.run(&["doctor"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stdout = text(&out.stdout);
    support::assert_says(
        &stdout,
        &["ok   discovery", "FAIL health: http://127.0.0.1:", "500"],
    );
}

#[test]
fn doctor_says_a_restart_is_pending_when_the_unit_names_another_file() {
    let node = Node::new("kubeadm-deb", true);
    set_kubelet_flags(&node, "/etc/kubernetes/new.yaml", "/opt/from-proc/bin");
    let out = daemonset_run(&node, false, &REAL_KUBELET, &["doctor"]);
    assert!(
        text(&out.stdout).contains("restart-pending"),
        "{}",
        show(&out)
    );
    assert!(
        text(&out.stdout).contains("/etc/kubernetes/new.yaml"),
        "{}",
        show(&out)
    );
}

/// Round-5 item 5: doctor reads every host a mirror's `hosts.toml` offers
/// the credential to, not only `server`: a `[host]` listed before the
/// mirror, and a `server` that is a third host, are each named in a
/// warning; the file the docs recommend passes.
#[test]
fn doctor_names_every_host_a_mirror_credential_reaches() {
    let node = Node::new("kubeadm-deb", true);
    let config =
        repo().join("config-examples/aws-pull-through-cache/credential-provider-config.yaml");
    let out = node.run(&["install", "--config", config.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let installed =
        std::fs::read_to_string(node.path("/etc/kubernetes/credential-provider.yaml")).unwrap();
    let rule = installed
        .lines()
        .find_map(|l| {
            l.trim()
                .trim_start_matches("- ")
                .strip_prefix("--registry-mirror=")
        })
        .or_else(|| {
            let lines: Vec<&str> = installed.lines().collect();
            lines
                .iter()
                .position(|l| l.trim() == "- --registry-mirror")
                .map(|i| lines[i + 1].trim().trim_start_matches("- "))
        })
        .unwrap_or_else(|| panic!("no --registry-mirror in {installed}"))
        .trim_matches('"')
        .to_string();
    let (source, target) = rule.split_once('=').unwrap();
    let mirror = format!("https://{}", target.split('/').next().unwrap());
    let hosts = node.path(&format!("/etc/containerd/certs.d/{source}/hosts.toml"));
    std::fs::create_dir_all(hosts.parent().unwrap()).unwrap();
    let doctor_says = |toml: &str| {
        std::fs::write(&hosts, toml).unwrap();
        text(&node.run(&["doctor"]).stdout)
    };
    let good = doctor_says(&format!(
        "server = \"{mirror}\"\n[host.\"{mirror}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
    ));
    assert!(!good.contains("cache.example.net"), "{good}");
    let listed = doctor_says(&format!(
        "server = \"{mirror}\"\n[host.\"https://cache.example.net\"]\n  capabilities = [\"pull\"]\n[host.\"{mirror}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
    ));
    support::assert_says(
        &listed,
        &[
            "WARN",
            "[host.\"https://cache.example.net\"]",
            "offers it the credential",
        ],
    );
    let third = doctor_says("server = \"https://third.example.org\"\n");
    support::assert_says(
        &third,
        &[
            "WARN",
            "server = \"https://third.example.org\"",
            "neither the mirror",
        ],
    );
}
