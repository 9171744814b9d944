//! Talos: `node render talos` against the machine-configuration schemas
//! Talos publishes (siderolabs/talos `pkg/machinery/config/schemas/
//! config.schema.json`, copied into tests/fixtures/talos/ at v1.11.0,
//! v1.12.0, v1.13.0 and v1.14.0-rc.1), checked by python-jsonschema (draft
//! 2020-12, as the schemas declare); and `node install` on a Talos root
//! refused with that route and nothing written. The extension image
//! itself is checked in tests/release.rs, against the rules Talos loads
//! extensions by.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn render(args: &[&str]) -> Output {
    Command::new(support::plugin::bin())
        .args(["node", "render"])
        .args(args)
        .env_clear()
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The errors python-jsonschema finds in `patch` (YAML, one or more
/// documents) against `schema`'s `$defs/<def>`, or its top-level `oneOf`
/// when `def` is empty; one line per error, empty when valid.
fn schema_errors(schema: &Path, def: &str, patch: &str) -> String {
    let mut schema: serde_json::Value =
        serde_json::from_slice(&std::fs::read(schema).unwrap()).unwrap();
    if !def.is_empty() {
        schema = serde_json::json!({
            "$schema": schema["$schema"],
            "$defs": schema["$defs"],
            "$ref": format!("#/$defs/{def}"),
        });
    }
    let docs = documents(patch);
    assert!(!docs.is_empty(), "no document in {patch}");
    docs.iter()
        .map(|doc| {
            let instance: serde_json::Value = serde_json::to_value(doc).unwrap();
            support::jsonschema::errors(&schema, &instance, support::jsonschema::Draft::Draft202012)
        })
        .collect()
}

fn schema(version: &str) -> PathBuf {
    repo().join(format!("tests/fixtures/talos/config.schema.{version}.json"))
}

/// The YAML documents of a rendered patch.
fn documents(patch: &str) -> Vec<yaml_serde::Value> {
    patch
        .split("\n---\n")
        .flat_map(|d| d.strip_prefix("---\n").or(Some(d)))
        .map(|d| yaml_serde::from_str(d).unwrap())
        .filter(|v: &yaml_serde::Value| !v.is_null())
        .collect()
}

#[test]
fn talos_before_v1_14_gets_the_machine_kubelet_field_and_the_schema_accepts_it() {
    for (talos, schema_version) in [
        ("v1.11", "v1.11.0"),
        ("1.12.3", "v1.12.0"),
        ("v1.13.4", "v1.13.0"),
    ] {
        let out = render(&["talos", "--talos-version", talos, "--provider", "aws"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let patch = text(&out.stdout);
        let docs = documents(&patch);
        assert_eq!(docs.len(), 1, "{patch}");
        let providers = &docs[0]["machine"]["kubelet"]["credentialProviderConfig"]["providers"];
        assert_eq!(
            providers[0]["name"], "wi-credential-provider-aws",
            "{patch}"
        );
        assert_eq!(
            schema_errors(&schema(schema_version), "v1alpha1.Config", &patch),
            "",
            "{patch}"
        );
    }
    // The validation is real: a misspelt field is refused by the schema.
    let wrong = "machine:\n  kubelet:\n    credentialProvidersConfig: {}\n";
    assert!(
        schema_errors(&schema("v1.13.0"), "v1alpha1.Config", wrong)
            .contains("credentialProvidersConfig"),
    );
}

#[test]
fn talos_v1_14_gets_the_kube_credential_provider_config_document() {
    let out = render(&[
        "talos",
        "--talos-version",
        "1.14",
        "--config",
        repo()
            .join("node-install/credential-provider.yaml")
            .to_str()
            .unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let patch = text(&out.stdout);
    let docs = documents(&patch);
    assert_eq!(docs.len(), 1, "{patch}");
    assert_eq!(docs[0]["kind"], "KubeCredentialProviderConfig");
    assert_eq!(docs[0]["apiVersion"], "v1alpha1");
    assert_eq!(
        docs[0]["configuration"]["providers"][0]["name"],
        "wi-credential-provider-passthrough"
    );
    // Against the whole schema: the document must be one of its kinds.
    assert_eq!(
        schema_errors(&schema("v1.14.0-rc.1"), "", &patch),
        "",
        "{patch}"
    );
    // The older schema has no such kind: the check can fail.
    assert!(!schema_errors(&schema("v1.13.0"), "", &patch).is_empty());
    // The v1.14 schema dropped the deprecated field, which Talos still
    // reads; --machine-kubelet renders it for configs that keep
    // .machine.kubelet (the document is refused beside them).
    let out = render(&[
        "talos",
        "--talos-version",
        "1.14",
        "--machine-kubelet",
        "--provider",
        "gcp",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let patch = text(&out.stdout);
    assert!(
        documents(&patch)[0]["machine"]["kubelet"]["credentialProviderConfig"].is_mapping(),
        "{patch}"
    );
}

/// `node render talos --config` of one provider entry (YAML lines under
/// `- `): refused, nothing printed, stderr saying `says`.
fn refused_entry(entry: &str, says: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!("apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - {}\n", entry.replace('\n', "\n    ")),
    )
    .unwrap();
    let out = render(&[
        "talos",
        "--talos-version",
        "1.13",
        "--config",
        config.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    support::assert_says(&text(&out.stderr), says);
}

#[test]
fn entries_the_extension_cannot_run_or_the_kubelet_would_refuse_are_refused() {
    refused_entry(
        "name: ecr-credential-provider\napiVersion: credentialprovider.kubelet.k8s.io/v1\nmatchImages: [\"*.dkr.ecr.*.amazonaws.com\"]\ndefaultCacheDuration: 1h",
        &[
            "\"ecr-credential-provider\" names no binary in the Talos extension",
            "wi-credential-provider-aws",
        ],
    );
    refused_entry(
        "name: wi-credential-provider-passthrough\napiVersion: credentialprovider.kubelet.k8s.io/v1\nmatchImages: [\"harbor.example.com\"]\ndefaultCacheDuration: 1h\ntokenAttributes:\n  cacheType: Token\n  requireServiceAccount: true",
        &[
            "error(s) the kubelet would trip on",
            "serviceAccountTokenAudience",
        ],
    );
}

#[test]
fn rbac_is_rendered_for_the_entries_audiences() {
    let out = render(&["rbac", "--provider", "aws"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let manifest = text(&out.stdout);
    let docs = documents(&manifest);
    assert_eq!(docs[0]["kind"], "ClusterRole");
    assert_eq!(docs[0]["rules"][0]["resources"][0], "sts.amazonaws.com");
    assert_eq!(
        docs[0]["rules"][0]["verbs"][0],
        "request-serviceaccounts-token-audience"
    );
    assert_eq!(docs[1]["subjects"][0]["name"], "system:nodes");
}
