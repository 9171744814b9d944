//! OpenShift: `node render openshift` against what the Machine Config
//! Operator accepts and does (openshift/machine-config-operator 7ff337a4,
//! copied into tests/fixtures/openshift/): the MachineConfig and
//! MachineOSConfig against their CRDs, the Ignition config against
//! Ignition's 3.5 schema (coreos/ignition a5d574a8, the spec the MCO
//! parses), the MCO's own rules (file modes, size); then the file applied
//! as the machine-config daemon writes it over the platform file the MCO
//! renders, and checked by check-config with a plugin directory built as
//! the Containerfile builds it. `node install` on an RHCOS root is refused
//! with this route in tests/node.rs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine as _;
use serde_json::Value;

use crate::support;
use crate::support::jsonschema::{Draft, errors, strict};

const BIN_DIR: &str = "/usr/libexec/kubelet-image-credential-provider-plugins";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/openshift").join(name)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn image() -> String {
    format!(
        "registry.example.com/platform/wi-credential-provider@sha256:{}",
        "ab".repeat(32)
    )
}

fn render(extra: &[&str]) -> Output {
    render_with(&[], extra)
}

/// [`render`] with some of the required flags given other values.
fn render_with(overrides: &[(&str, &str)], extra: &[&str]) -> Output {
    let image = image();
    let mut required = vec![
        ("--image", image.as_str()),
        (
            "--push-spec",
            "registry.example.com/os/worker-layered:latest",
        ),
        ("--push-secret", "push-secret"),
    ];
    for (flag, value) in overrides {
        match required.iter_mut().find(|(f, _)| f == flag) {
            Some(slot) => slot.1 = value,
            None => required.push((flag, value)),
        }
    }
    let mut args = vec!["node", "render", "openshift"];
    for (flag, value) in &required {
        args.extend([*flag, *value]);
    }
    args.extend_from_slice(extra);
    Command::new(support::plugin::bin())
        .args(&args)
        .env_clear()
        .output()
        .unwrap()
}

fn passthrough_config() -> String {
    repo()
        .join("node-install/credential-provider.yaml")
        .display()
        .to_string()
}

/// The rendered documents, as JSON values.
fn documents(out: &Output) -> Vec<Value> {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
        .split("\n---\n")
        .skip(1)
        .map(|d| {
            serde_json::to_value(yaml_serde::from_str::<yaml_serde::Value>(d).unwrap()).unwrap()
        })
        .collect()
}

/// A CRD's schema for its v1 version.
fn crd_schema(file: &str) -> Value {
    let crd: yaml_serde::Value =
        yaml_serde::from_slice(&std::fs::read(fixture(file)).unwrap()).unwrap();
    let crd = serde_json::to_value(crd).unwrap();
    let version = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "v1")
        .unwrap()
        .clone();
    version["schema"]["openAPIV3Schema"].clone()
}

/// The inline config the MCO's template for a platform renders.
fn stock(template: &str) -> String {
    let t: yaml_serde::Value =
        yaml_serde::from_slice(&std::fs::read(fixture(template)).unwrap()).unwrap();
    t["contents"]["inline"].as_str().unwrap().to_string()
}

/// What the machine-config daemon writes for an Ignition file: the decoded
/// `data:` source (`DecodeIgnitionFileContents`: inline only).
fn written(file: &Value) -> Vec<u8> {
    let source = file["contents"]["source"].as_str().unwrap();
    let data = source
        .strip_prefix("data:;base64,")
        .expect("an inline base64 data URL");
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap()
}

/// The plugin directory the Containerfile builds: the binary copied from
/// the image (here: the one under test) and its RUN line's links, run by
/// sh in a scratch root with the paths moved under it.
fn layered_bin_dir(containerfile: &str, root: &Path) -> PathBuf {
    let lines: Vec<&str> = containerfile.lines().collect();
    assert_eq!(lines[0], "FROM configs AS final");
    let copy: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(copy[0], "COPY");
    assert_eq!(copy[1], format!("--from={}", image()));
    assert_eq!(
        copy[2], "/usr/bin/wi-credential-provider",
        "the node image's path"
    );
    let bin = root.join(BIN_DIR.trim_start_matches('/'));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(
        support::plugin::bin(),
        root.join(copy[3].trim_start_matches('/')),
    )
    .unwrap();
    let run = containerfile
        .split("\nRUN ")
        .nth(1)
        .unwrap()
        .replace(BIN_DIR, &bin.display().to_string())
        .replace("ostree container commit", "true");
    let out = Command::new("sh").args(["-ec", &run]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    bin
}

fn check_config(config: &Path, bin_dir: &Path) -> Output {
    Command::new(support::plugin::bin())
        .args(["check-config", "--bin-dir"])
        .arg(bin_dir)
        .arg(config)
        .env_clear()
        .output()
        .unwrap()
}

#[test]
fn on_aws_azure_and_gcp_the_platform_file_keeps_its_entry_and_gains_ours() {
    let ignition_schema = strict(
        &serde_json::from_slice::<Value>(
            &std::fs::read(fixture("ignition-3.5.schema.json")).unwrap(),
        )
        .unwrap(),
    );
    let mc_schema = strict(&crd_schema("machineconfigs.crd.yaml"));
    let mosc_schema = strict(&crd_schema("machineosconfigs.crd.yaml"));
    let push_rule = {
        // The CRD's CEL rule for renderedImagePushSpec, its first regex.
        let crd = std::fs::read_to_string(fixture("machineosconfigs.crd.yaml")).unwrap();
        let at = crd.find("rule: self.matches('").unwrap() + "rule: self.matches('".len();
        let end = crd[at..].find("')").unwrap();
        crd[at..at + end].replace("\\\\", "\\")
    };
    for (platform, template, stock_name) in [
        (
            "aws",
            "etc-kubernetes-credential-providers-ecr-credential-provider.yaml",
            "ecr-credential-provider",
        ),
        (
            "azure",
            "etc-kubernetes-credential-providers-acr-credential-provider.yaml",
            "acr-credential-provider",
        ),
        (
            "gcp",
            "etc-kubernetes-credential-providers-gcr-credential-provider.yaml",
            "gcr-credential-provider",
        ),
    ] {
        let out = render(&[
            "--platform",
            platform,
            "--pool",
            "worker",
            "--config",
            &passthrough_config(),
        ]);
        let docs = documents(&out);
        assert_eq!(docs.len(), 2, "{}", text(&out.stdout));
        let (mc, mosc) = (&docs[0], &docs[1]);

        // As the API server and the MCO would take them.
        assert_eq!(errors(&mc_schema, mc, Draft::Draft4), "", "{mc:#}");
        assert_eq!(errors(&mosc_schema, mosc, Draft::Draft4), "", "{mosc:#}");
        assert_eq!(mc["metadata"]["name"], "99-worker-wi-credential-provider");
        assert_eq!(
            mc["metadata"]["labels"]["machineconfiguration.openshift.io/role"],
            "worker"
        );
        let ignition = &mc["spec"]["config"];
        assert_eq!(ignition["ignition"]["version"], "3.5.0");
        assert_eq!(
            errors(&ignition_schema, ignition, Draft::Draft4),
            "",
            "{ignition:#}"
        );
        assert!(serde_json::to_vec(mc).unwrap().len() < 1_572_864);
        // The checks are real: a field Ignition or the CRD does not know fails.
        let mut wrong = ignition.clone();
        wrong["storage"]["files"][0]["overwrites"] = Value::Bool(true);
        assert!(errors(&ignition_schema, &wrong, Draft::Draft4).contains("overwrites"));
        let mut wrong = mosc.clone();
        wrong["spec"]["containerFiles"] = Value::Array(Vec::new());
        assert!(errors(&mosc_schema, &wrong, Draft::Draft4).contains("containerFiles"));
        let files = ignition["storage"]["files"].as_array().unwrap();
        assert_eq!(files.len(), 1, "no drop-in where the unit has the flags");
        let file = &files[0];
        assert!(file["mode"].as_u64().unwrap() <= 0o777);
        assert_eq!(file["mode"], 0o644);
        let path = file["path"].as_str().unwrap();
        let target = Path::new(template).file_name().unwrap().to_str().unwrap();
        assert_eq!(
            path,
            format!(
                "/etc/kubernetes/credential-providers/{}",
                target.trim_start_matches("etc-kubernetes-credential-providers-")
            )
        );
        let rule = Command::new("python3")
            .args([
                "-c",
                "import re,sys; sys.exit(0 if re.search(sys.argv[1], sys.argv[2]) else 1)",
            ])
            .arg(&push_rule)
            .arg(mosc["spec"]["renderedImagePushSpec"].as_str().unwrap())
            .status()
            .unwrap();
        assert!(rule.success(), "the CRD's push-spec rule");

        // The node: the MCO's rendered platform file, then ours over it as
        // the daemon writes it.
        let node = tempfile::tempdir().unwrap();
        let on_node = node.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(on_node.parent().unwrap()).unwrap();
        std::fs::write(&on_node, stock(template)).unwrap();
        let before: yaml_serde::Value =
            yaml_serde::from_slice(&std::fs::read(&on_node).unwrap()).unwrap();
        std::fs::write(&on_node, written(file)).unwrap();
        let after: yaml_serde::Value =
            yaml_serde::from_slice(&std::fs::read(&on_node).unwrap()).unwrap();
        assert_eq!(after["providers"][0]["name"], stock_name);
        assert_eq!(
            after["providers"][0], before["providers"][0],
            "the stock entry, unchanged"
        );
        assert_eq!(
            after["providers"][1]["name"],
            "wi-credential-provider-passthrough"
        );

        // The pool's image: the plugin directory as the Containerfile
        // builds it, with the platform's own plugin beside ours.
        let containerfile = mosc["spec"]["containerFile"][0]["content"]
            .as_str()
            .unwrap();
        assert!(containerfile.len() <= 4096);
        let bin = layered_bin_dir(containerfile, node.path());
        // The platform's plugin (its checks are the platform's).
        std::fs::write(bin.join(stock_name), "#!/bin/sh\nexit 1\n").unwrap();
        std::fs::set_permissions(
            bin.join(stock_name),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let checked = check_config(&on_node, &bin);
        assert_eq!(
            checked.status.code(),
            Some(0),
            "{}{}",
            text(&checked.stdout),
            text(&checked.stderr)
        );
    }
}

#[test]
fn elsewhere_our_own_file_and_the_drop_in_the_on_prem_unit_reads() {
    let docs = documents(&render(&[
        "--platform",
        "other",
        "--pool",
        "infra",
        "--config",
        &passthrough_config(),
    ]));
    let mc = &docs[0];
    assert_eq!(mc["metadata"]["name"], "99-infra-wi-credential-provider");
    assert_eq!(docs[1]["spec"]["machineConfigPool"]["name"], "infra");
    let files = mc["spec"]["config"]["storage"]["files"].as_array().unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        [
            "/etc/kubernetes/credential-providers/wi-credential-provider.yaml",
            "/etc/systemd/system/kubelet.service.d/41-wi-credential-provider.conf",
        ]
    );
    let drop_in = text(&written(&files[1]));
    assert!(
        drop_in.contains(&format!(
            "Environment=\"KUBELET_CRIO_IMAGE_CREDENTIAL_PROVIDER_FLAGS=--image-credential-provider-bin-dir={BIN_DIR} --image-credential-provider-config=/etc/kubernetes/credential-providers/wi-credential-provider.yaml\""
        )),
        "{drop_in}"
    );
    // systemd reads it as a drop-in of the kubelet's unit.
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("kubelet.service");
    std::fs::write(
        &unit,
        "[Unit]\nDescription=Kubernetes Kubelet\n[Service]\nExecStart=/bin/true $KUBELET_CRIO_IMAGE_CREDENTIAL_PROVIDER_FLAGS\n",
    )
    .unwrap();
    let dropins = dir.path().join("kubelet.service.d");
    std::fs::create_dir(&dropins).unwrap();
    std::fs::write(dropins.join("41-wi-credential-provider.conf"), &drop_in).unwrap();
    let verify = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .unwrap();
    assert!(
        !text(&verify.stderr).contains("41-wi-credential-provider"),
        "{}",
        text(&verify.stderr)
    );
    let config = text(&written(&files[0]));
    let doc: yaml_serde::Value = yaml_serde::from_str(&config).unwrap();
    assert_eq!(doc["providers"].as_sequence().unwrap().len(), 1, "{config}");
}

#[test]
fn overlaps_unpinned_images_and_bad_names_are_refused_with_nothing_printed() {
    // The stock ECR entry serves what ours does with the node's identity.
    let out = render(&["--platform", "aws", "--provider", "aws"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    support::assert_says(
        &text(&out.stderr),
        &["ecr-credential-provider", "and 3 more", "--replace"],
    );
    // ... and is accepted with it replaced.
    let docs = documents(&render(&[
        "--platform",
        "aws",
        "--provider",
        "aws",
        "--replace",
        "ecr-credential-provider",
    ]));
    let config = text(&written(&docs[0]["spec"]["config"]["storage"]["files"][0]));
    assert!(!config.contains("ecr-credential-provider\n"), "{config}");

    for (flag, value, says) in [
        (
            "--image",
            "registry.example.com/platform/wi-credential-provider:0.1.0",
            "not an image pinned by digest",
        ),
        (
            "--image",
            "registry.example.com/x@sha256:00\nRUN curl evil.example.com",
            "not an image pinned by digest",
        ),
        (
            "--push-spec",
            "registry.example.com/os/worker",
            "not where On-Cluster Layering can push",
        ),
        ("--pool", "Worker", "not a MachineConfigPool name"),
        ("--push-secret", "Push_Secret", "not a secret name"),
    ] {
        let config = passthrough_config();
        let out = render_with(
            &[(flag, value)],
            &["--platform", "gcp", "--config", &config],
        );
        assert_eq!(
            out.status.code(),
            Some(1),
            "{flag} {value:?}: {}",
            text(&out.stderr)
        );
        assert!(out.stdout.is_empty());
        support::assert_says(&text(&out.stderr), &[says]);
    }
}
