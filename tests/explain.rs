//! `explain` as an admin runs it when a pull fails: what the kubelet would
//! send and what the plugin would do, with no network call.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

fn explain(dir: &Path, config: &str, sa: &str, image: &str) -> Output {
    let config_path = dir.join("config.yaml");
    let sa_path = dir.join("sa.yaml");
    std::fs::write(&config_path, config).unwrap();
    std::fs::write(&sa_path, sa).unwrap();
    Command::new(support::plugin::bin())
        .env_clear()
        .args([
            "explain",
            "--image",
            image,
            "--service-account",
            &sa_path.display().to_string(),
            "--config",
            &config_path.display().to_string(),
        ])
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const HARBOR: &str = r#"apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: ecr-credential-provider
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    matchImages: ["*.dkr.ecr.*.amazonaws.com"]
    defaultCacheDuration: "12h"
  - name: wi-credential-provider-passthrough
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    matchImages: ["harbor.example.com"]
    defaultCacheDuration: "1h"
    args: ["--registry=harbor.example.com"]
    tokenAttributes:
      serviceAccountTokenAudience: harbor.example.com
      cacheType: Token
      requireServiceAccount: true
      requiredServiceAccountAnnotationKeys: ["harbor.example.com/robot"]
      optionalServiceAccountAnnotationKeys: ["harbor.example.com/team"]
"#;

const SA: &str = r#"apiVersion: v1
kind: ServiceAccount
metadata:
  name: app-puller
  namespace: team
  uid: 6f1c2d3e-0000-4000-8000-000000000001
  annotations:
    harbor.example.com/robot: robot$team
    unrelated.example.com/owner: alice
"#;

#[test]
fn shows_the_request_and_the_plan_without_the_network() {
    let dir = tempfile::tempdir().unwrap();
    let out = explain(dir.path(), HARBOR, SA, "harbor.example.com/team/app:1.0");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for needle in [
        "image: harbor.example.com/team/app (as the kubelet sends it; registry harbor.example.com)",
        "service account: team/app-puller (uid 6f1c2d3e-0000-4000-8000-000000000001), 2 annotations",
        "provider \"ecr-credential-provider\": not run (no matchImages entry matches harbor.example.com/team/app)",
        "provider \"wi-credential-provider-passthrough\" (",
        "matches via \"harbor.example.com\"",
        "token: audience \"harbor.example.com\", cacheType Token",
        "optional annotations absent from the service account: \"harbor.example.com/team\"",
        "annotations not passed (not listed in tokenAttributes): \"unrelated.example.com/owner\"",
        r#""serviceAccountAnnotations":{"harbor.example.com/robot":"robot$team"}"#,
        r#""serviceAccountToken":"<token for team/app-puller, audience harbor.example.com>""#,
        "provider: passthrough (chosen by the entry's name)",
        "auth key: harbor.example.com (cacheKeyType Registry)",
        "username: serviceaccount",
        "on-disk cache: never keeps this credential",
        "network: not contacted",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    // The synthetic token itself is never printed.
    assert!(!stdout.contains("eyJ"), "{stdout}");
}

#[test]
fn a_missing_required_annotation_means_the_plugin_is_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let sa = SA.replace("    harbor.example.com/robot: robot$team\n", "");
    let out = explain(dir.path(), HARBOR, &sa, "harbor.example.com/team/app");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "does NOT run the plugin: the service account lacks the required annotation \"harbor.example.com/robot\""
        ),
        "{stdout}"
    );
}

#[test]
fn an_image_no_entry_matches_is_pulled_without_credentials() {
    let dir = tempfile::tempdir().unwrap();
    // The blog's pattern: the '/*' path is literal and never matches.
    let config = HARBOR.replace(
        r#"matchImages: ["harbor.example.com"]"#,
        r#"matchImages: ["*.example.com/*"]"#,
    );
    let out = explain(dir.path(), &config, SA, "harbor.example.com/team/app");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("no provider entry matches harbor.example.com/team/app: the kubelet pulls it without plugin credentials"),
        "{stdout}"
    );
}

#[test]
fn plugin_refusals_are_the_binarys_own() {
    let dir = tempfile::tempdir().unwrap();
    // --audience differs from the kubelet's: the binary refuses the token.
    let config = HARBOR.replace(
        r#"args: ["--registry=harbor.example.com"]"#,
        r#"args: ["--registry=harbor.example.com", "--audience=harbor"]"#,
    );
    let out = explain(dir.path(), &config, SA, "harbor.example.com/team/app");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("the plugin would fail: the service account token's audience [\"harbor.example.com\"] does not include \"harbor\""),
        "{stdout}"
    );
    // A kubelet-side error is named with check-config's finding.
    assert!(
        stdout.contains("error: providers[1].tokenAttributes.serviceAccountTokenAudience"),
        "{stdout}"
    );
}

#[test]
fn a_response_the_kubelet_would_discard_is_not_a_success() {
    let dir = tempfile::tempdir().unwrap();
    let config = HARBOR.replace("cacheType: Token", "cacheType: ServiceAccount");
    let out = explain(dir.path(), &config, SA, "harbor.example.com/team/app");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    support::assert_says(
        &stdout,
        &[
            "set cacheType: Token",
            "the plugin would answer, but the error above keeps the credential from being used",
        ],
    );
}

#[test]
fn a_config_the_kubelet_refuses_is_reported_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let config = HARBOR.replace("      cacheType: Token\n", "");
    let out = explain(dir.path(), &config, SA, "harbor.example.com/team/app");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    support::assert_says(
        &stdout,
        &[
            "the kubelet would refuse to start with this config",
            "cacheType is required",
        ],
    );
}

#[test]
fn service_account_manifests_are_read_with_their_gaps_labelled() {
    let dir = tempfile::tempdir().unwrap();
    // A List (kubectl get -o yaml), without namespace and uid.
    let list = r#"apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: ServiceAccount
    metadata:
      name: app-puller
      annotations: {harbor.example.com/robot: x}
"#;
    let out = explain(dir.path(), HARBOR, list, "harbor.example.com/team/app");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    support::assert_says(
        &stdout,
        &[
            "assumed: namespace \"default\"",
            "assumed: uid 00000000-0000-0000-0000-000000000000",
        ],
    );

    for (manifest, needle) in [
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
            "has no ServiceAccount",
        ),
        (
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: b}\n",
            "has 2 ServiceAccounts",
        ),
        (
            "apiVersion: v2\nkind: ServiceAccount\nmetadata: {name: a}\n",
            "not a valid ServiceAccount",
        ),
    ] {
        let out = explain(dir.path(), HARBOR, manifest, "harbor.example.com/team/app");
        assert_eq!(out.status.code(), Some(1));
        assert!(text(&out.stdout).contains(needle), "{}", text(&out.stdout));
    }
}

/// The cache key explain prints is the one the binary files its credential
/// under: a real pull through the fake Entra ID and ACR fills the cache,
/// and explain, given the same entry, the manifest of the same service
/// account and the cluster's issuer, names that very entry.
#[test]
fn the_printed_cache_key_is_the_one_the_binary_uses() {
    use support::azure::{App, CLIENT_ID, FakeAcr, FakeEntra, TENANT};
    use support::token::{ISSUER, TokenSpec};

    let entra = FakeEntra::start(App::trusting("team", "app-puller"));
    let acr = FakeAcr::start("contoso.azurecr.io", &entra);
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let args = [
        "--provider=azure".to_string(),
        format!("--azure-authority-host={}", entra.url()),
        format!("--acr-endpoint={}", acr.url()),
        format!("--cache-dir={}", cache.display()),
    ];
    let annotations = [
        ("azure.workload.identity/client-id", CLIENT_ID),
        ("azure.workload.identity/tenant-id", TENANT),
    ];
    let spec = TokenSpec::new("team", "app-puller", support::azure::AUDIENCE);
    let token = spec.mint();
    let pull = support::plugin::run(
        &args,
        &[],
        support::plugin::request("contoso.azurecr.io/team/app", Some(&token), &annotations)
            .as_bytes(),
    );
    pull.response();
    let entries: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");

    let config = format!(
        r#"apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: wi-credential-provider-azure
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    matchImages: ["*.azurecr.io"]
    defaultCacheDuration: "1h"
    args: {args:?}
    tokenAttributes:
      serviceAccountTokenAudience: api://AzureADTokenExchange
      cacheType: ServiceAccount
      requireServiceAccount: true
      optionalServiceAccountAnnotationKeys:
        - azure.workload.identity/client-id
        - azure.workload.identity/tenant-id
        - kubernetes.azure.com/acr-client-id
        - kubernetes.azure.com/acr-tenant-id
"#
    );
    let sa = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: app-puller\n  namespace: team\n  uid: {}\n  annotations:\n    azure.workload.identity/client-id: {CLIENT_ID}\n    azure.workload.identity/tenant-id: {TENANT}\n",
        spec.uid
    );
    std::fs::write(dir.path().join("config.yaml"), config).unwrap();
    std::fs::write(dir.path().join("sa.yaml"), sa).unwrap();
    let run_explain = |issuer: &str| {
        let out = Command::new(support::plugin::bin())
            .env_clear()
            .args(["explain", "--image", "contoso.azurecr.io/team/app:1.0"])
            .arg("--service-account")
            .arg(dir.path().join("sa.yaml"))
            .arg("--config")
            .arg(dir.path().join("config.yaml"))
            .args(["--issuer", issuer])
            .output()
            .unwrap();
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}");
        let line = stdout
            .lines()
            .find(|l| l.contains("on-disk cache: "))
            .unwrap_or_else(|| panic!("{stdout}"))
            .to_string();
        line.split("key ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_else(|| panic!("{line}"))
            .to_string()
    };
    assert_eq!(format!("{}.json", run_explain(ISSUER)), entries[0]);
    // Another issuer is another key: the issuer is part of the identity.
    assert_ne!(
        format!("{}.json", run_explain("https://other.example")),
        entries[0]
    );
    // explain made no request: the fakes saw the one pull only.
    assert_eq!(entra.server.request_count(), 1);
}

#[test]
fn with_fallback_node_it_says_whose_identity_a_pull_uses_and_why() {
    let config = std::fs::read_to_string(
        "tests/fixtures/check-config/overlap.node-identity/pass-fallback-node.yaml",
    )
    .unwrap();
    let image = "210987654321.dkr.ecr.eu-west-1.amazonaws.com/team/app:1.0";
    let plain = r#"apiVersion: v1
kind: ServiceAccount
metadata:
  name: web
  namespace: team
  uid: 6f1c2d3e-0000-4000-8000-000000000002
"#;
    let dir = tempfile::tempdir().unwrap();
    let out = explain(dir.path(), &config, plain, image);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for needle in [
        "identity: the node's, the instance profile's role, from IMDSv2 (because service account team/web did not opt in",
        "every pod on the node that did not opt in shares it",
        "identity: node",
        "instance metadata: http://169.254.169.254",
    ] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    let annotated = format!(
        "{plain}  annotations:\n    eks.amazonaws.com/role-arn: arn:aws:iam::210987654321:role/web-pull\n"
    );
    let out = explain(dir.path(), &config, &annotated, image);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    support::assert_says(
        &stdout,
        &[
            "identity: service account team/web's own (--fallback node; it opted in, so a refusal fails the pull and never falls back to the node)",
            "role arn: arn:aws:iam::210987654321:role/web-pull",
        ],
    );
}

/// Under `--identity spiffe`, explain names the selectors and the SVID's
/// audience it would ask the agent for, and contacts nothing.
#[test]
fn spiffe_mode_shows_the_selectors_and_the_svid_audience() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("config-examples/spiffe-zot");
    let out = Command::new(support::plugin::bin())
        .env_clear()
        .args([
            "explain",
            "--image",
            "zot.example.com/team/app:1.4.2",
            "--service-account",
        ])
        .arg(root.join("workload.yaml"))
        .arg("--config")
        .arg(root.join("credential-provider-config.yaml"))
        .output()
        .unwrap();
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{shown}{}", text(&out.stderr));
    for line in [
        "identity source: spiffe: a JWT-SVID from the SPIRE agent at /run/spire/admin/admin.sock",
        "SPIRE selectors: k8s:ns:team, k8s:sa:app-puller, and the pulling pod's k8s:pod-name and k8s:pod-uid",
        "SVID audience: \"zot.example.com\"",
        "jwt_issuer",
        "identity: the SPIFFE ID SPIRE registered",
        "network: not contacted",
    ] {
        assert!(shown.contains(line), "{line:?} missing from:\n{shown}");
    }
}

/// Round-5 item 12: a tenant's annotation value with a bidirectional
/// override (U+202E) or a line separator (U+2028) is printed escaped, as
/// the JSON logs write it, on every line explain prints: it cannot
/// reorder or split what the admin reads.
#[test]
fn hidden_characters_of_a_tenants_annotation_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let sa = SA.replace(
        "harbor.example.com/robot: robot$team",
        "harbor.example.com/robot: \"robot\\u202e$team\\u2028forged: line\"",
    );
    let out = explain(dir.path(), HARBOR, &sa, "harbor.example.com/team/app:1.0");
    let stdout = text(&out.stdout);
    assert!(
        !stdout.contains('\u{202e}') && !stdout.contains('\u{2028}'),
        "{stdout:?}"
    );
    support::assert_says(&stdout, &["robot\\u{202e}$team\\u{2028}forged: line"]);
}
