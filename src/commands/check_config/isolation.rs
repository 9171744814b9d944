//! The traps that undo per-pod identity without a single error, and the
//! kubelet-version facts a config depends on.
//!
//! - **Overlap.** The kubelet asks every provider whose `matchImages` match
//!   an image and the runtime tries every credential until one works
//!   (`externalCredentialProviderKeyring.Lookup`, `kuberuntime_image.go`).
//!   A node-identity provider (no `tokenAttributes`) beside ours means a pod
//!   whose own identity is denied still pulls with the node's, and KEP-2535
//!   then records the image as open to every pod on the node. Decided with
//!   the kubelet's matching rules ([`matching::overlaps`]).
//! - **Image reuse.** Unless the kubelet verifies pulled images
//!   (KEP-2535: gate `KubeletEnsureSecretPulledImages`, on from 1.35,
//!   policy not `NeverVerify`, no allowlist over our registries), an image
//!   one service account pulled can be started by any pod on the node.
//!   An entry of ours with `--fallback node` serves the node's identity
//!   itself, to pods that did not opt in only, so it is the one entry
//!   those registries need: a stock entry beside it is redundant and the
//!   lint says to replace it. Node-identity pulls are open to every pod
//!   on the node unless the kubelet verifies present images.
//! - **Directory configs** exist only from kubelet 1.34.

use super::lint::runs_this_binary;
use std::path::Path;
use wicp_kubelet::config::configuration::{
    DIRECTORY_CONFIG_SINCE, ENSURE_GATE_ON_SINCE, ENSURE_GATE_SINCE, ENSURE_SECRET_PULLED_IMAGES,
    KubeletConfig, SERVICE_ACCOUNT_TOKEN_GATE, SERVICE_ACCOUNT_TOKEN_ON_SINCE,
    SERVICE_ACCOUNT_TOKEN_SINCE, Version,
};
use wicp_kubelet::config::matching;
use wicp_kubelet::config::provider_config::{Entry, Loaded};
use wicp_kubelet::config::{Finding, Rule, Severity};
use wicp_net::inputs::Env;
use wicp_providers::fallback::Fallback;

/// What is known about the kubelet that reads the config.
#[derive(Clone, Debug, Default)]
pub(crate) struct KubeletFacts {
    /// The environment the kubelet starts plugins with, as far as it can be
    /// known here: this process's, read once at start (`Inputs`).
    pub(crate) env: Env,
    pub(crate) config: Option<KubeletConfig>,
    pub(crate) version: Option<Version>,
}

/// The lints of this module over `loaded`.
pub(crate) fn lint(loaded: &Loaded, bin_dir: Option<&Path>, facts: &KubeletFacts) -> Vec<Finding> {
    let mut findings = Vec::new();
    let ours: Vec<&Entry> = loaded
        .entries
        .iter()
        .filter(|e| e.provider.token_attributes.is_some() && runs_this_binary(e, bin_dir))
        .collect();
    for node in loaded
        .entries
        .iter()
        .filter(|e| e.provider.token_attributes.is_none() && !runs_this_binary(e, bin_dir))
    {
        overlap(node, &ours, &facts.env, &mut findings);
    }
    if !ours.is_empty() && (facts.config.is_some() || facts.version.is_some()) {
        image_reuse(loaded, &ours, facts, &mut findings);
    }
    token_attributes_gate(loaded, facts, &mut findings);
    if let Some(version) = facts.version
        && version < DIRECTORY_CONFIG_SINCE
        && loaded.path.is_dir()
    {
        findings.push(
            Finding::new(
                Severity::Error,
                Rule::DirConfigKubeletVersion,
                &loaded.path,
                "",
                format!(
                    "the config is a directory, which kubelet {version} cannot read (directory configs need {DIRECTORY_CONFIG_SINCE}); it exits at start"
                ),
            )
            .fix("point --image-credential-provider-config at one complete file (wi-credential-provider node install does this below 1.34)"),
        );
    }
    findings
}

/// An entry with `tokenAttributes` for a kubelet that does not accept
/// them: below 1.33, or `KubeletServiceAccountTokenForCredentialProviders`
/// off (off by default in 1.33; AKS Windows does not turn it on). The
/// kubelet's validation refuses the whole config and the kubelet exits.
fn token_attributes_gate(loaded: &Loaded, facts: &KubeletFacts, findings: &mut Vec<Finding>) {
    let config = facts.config.clone().unwrap_or_default();
    if config.accepts_token_attributes(facts.version) != Some(false) {
        return;
    }
    let shown = facts
        .version
        .map_or("this kubelet".to_string(), |v| format!("kubelet {v}"));
    let fix = match facts.version {
        Some(v) if v < SERVICE_ACCOUNT_TOKEN_SINCE => format!(
            "upgrade the kubelet to {SERVICE_ACCOUNT_TOKEN_ON_SINCE} or later (per-pod identity needs KEP-4412), or use the node's identity without tokenAttributes"
        ),
        _ => format!(
            "turn on the feature gate: --feature-gates={SERVICE_ACCOUNT_TOKEN_GATE}=true (or featureGates in the KubeletConfiguration), or upgrade the kubelet to {SERVICE_ACCOUNT_TOKEN_ON_SINCE}, where it is on by default"
        ),
    };
    for entry in loaded
        .entries
        .iter()
        .filter(|e| e.provider.token_attributes.is_some())
    {
        findings.push(
            entry
                .error(
                    Rule::TokenAttributesKubeletGate,
                    "tokenAttributes",
                    format!(
                        "{shown} does not accept tokenAttributes ({SERVICE_ACCOUNT_TOKEN_GATE} is off): it refuses this config and exits at start"
                    ),
                )
                .fix(fix.clone()),
        );
    }
}

/// Whether a `matchImages` pattern names hosts by a glob rather than one
/// host: a deliberately narrowed node entry names the hosts themselves.
fn has_host_glob(pattern: &str) -> bool {
    let host = pattern
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or("");
    host.contains(['*', '?', '['])
}

/// Whether `entry` (one of ours) serves the node identity itself.
fn falls_back_to_node(entry: &Entry, kubelet_env: &Env) -> bool {
    super::entry::route(
        entry.name(),
        entry.provider.args(),
        &entry.provider.env(),
        kubelet_env,
    )
    .is_ok_and(|r| r.line.options.fallback.fallback() == Fallback::Node)
}

fn overlap(node: &Entry, ours: &[&Entry], kubelet_env: &Env, findings: &mut Vec<Finding>) {
    for (j, node_pattern) in node.provider.match_images().iter().enumerate() {
        let replacing: Vec<String> = ours
            .iter()
            .filter(|entry| {
                entry
                    .provider
                    .match_images()
                    .iter()
                    .any(|p| matching::overlaps(p, node_pattern))
                    && falls_back_to_node(entry, kubelet_env)
            })
            .map(|entry| entry.name().to_string())
            .collect();
        if !replacing.is_empty() {
            let field = format!("matchImages[{j}]");
            findings.push(
                node.warning(
                    Rule::OverlapNodeIdentity,
                    &field,
                    format!(
                        "{node_pattern:?} of this provider (the node's own identity) is redundant: {} serves the node's identity with --fallback node to the pods that did not opt in, \
                         and never to those that did; this entry still hands the node's credentials to a pod whose own identity is denied",
                        replacing.join(", ")
                    ),
                )
                .fix(format!(
                    "remove it: `wi-credential-provider node install --replace {}`",
                    node.name()
                )),
            );
            continue;
        }
        let hits: Vec<String> = ours
            .iter()
            .flat_map(|entry| {
                entry
                    .provider
                    .match_images()
                    .iter()
                    .filter(|p| matching::overlaps(p, node_pattern))
                    .map(move |p| format!("{:?} ({})", p, entry.name()))
            })
            .collect();
        if hits.is_empty() {
            continue;
        }
        let field = format!("matchImages[{j}]");
        let about = format!(
            "{node_pattern:?} of this provider, which runs without tokenAttributes (the node's own identity), matches images that {} also serve{}: \
             the kubelet asks both and the runtime keeps the first credential that works, so a pod whose own identity is denied still pulls with the node's, \
             and the image is then recorded as open to every pod on the node",
            hits.join(", "),
            if hits.len() == 1 { "s" } else { "" }
        );
        let fix = format!(
            "narrow {:?} to the registries the node itself needs (on EKS the system image registries, e.g. 602401143452.dkr.ecr.<region>.amazonaws.com), \
             or remove it: `wi-credential-provider node install --replace {}[=PATTERN,...]`",
            node.name(),
            node.name()
        );
        let finding = if has_host_glob(node_pattern) {
            node.error(Rule::OverlapNodeIdentity, &field, about)
        } else {
            node.warning(
                Rule::OverlapNodeIdentity,
                &field,
                format!("{about}; as it names one registry this may be deliberate, so keep tenant images elsewhere"),
            )
        };
        findings.push(finding.fix(fix));
    }
}

fn image_reuse(
    loaded: &Loaded,
    ours: &[&Entry],
    facts: &KubeletFacts,
    findings: &mut Vec<Finding>,
) {
    let config = facts.config.clone().unwrap_or_default();
    let version = facts.version;
    let file = config
        .files
        .first()
        .cloned()
        .unwrap_or_else(|| loaded.path.clone());
    let seen = format!(
        "kubelet {}, {ENSURE_SECRET_PULLED_IMAGES} {}, imagePullCredentialsVerificationPolicy {}",
        version.map_or("version unknown".to_string(), |v| v.to_string()),
        match config.ensure_secret_pulled_images {
            Some(true) => "on".to_string(),
            Some(false) => "off".to_string(),
            None => "not set (default)".to_string(),
        },
        config
            .image_pull_credentials_verification_policy
            .as_deref()
            .unwrap_or("not set (NeverVerifyPreloadedImages)")
    );
    let node_identity: Vec<&str> = ours
        .iter()
        .filter(|e| falls_back_to_node(e, &facts.env))
        .map(|e| e.name())
        .collect();
    let shared = if node_identity.is_empty() {
        "an image pulled with one service account's identity can then be started by a pod of any other service account on this node".to_string()
    } else {
        format!(
            "an image pulled with one service account's identity can then be started by a pod of any other service account on this node, \
             and an image pulled with the node's identity ({} with --fallback node) by every pod on it",
            node_identity.join(", ")
        )
    };
    let reason = unverified(&config, version);
    if let Some((field, why, fix)) = reason {
        findings.push(
            Finding::new(
                Severity::Warning,
                Rule::ImageReuse,
                &file,
                field,
                format!("{seen}: {why}, so {shared}"),
            )
            .fix(fix),
        );
        return;
    }
    if config.image_pull_credentials_verification_policy.as_deref()
        == Some("NeverVerifyAllowlistedImages")
    {
        let (seen, shared) = (seen.as_str(), shared.as_str());
        findings.extend(allowlisted(&config, ours, &file, seen, shared));
    }
}

/// Why the kubelet would not verify present images, as (field, why, fix);
/// `None` when it does.
fn unverified(
    config: &KubeletConfig,
    version: Option<Version>,
) -> Option<(&'static str, String, String)> {
    match config.verifies_present_images(version) {
        Some(true) => None,
        Some(false) if config.image_pull_credentials_verification_policy.as_deref() == Some("NeverVerify") => Some((
            "imagePullCredentialsVerificationPolicy",
            "the policy NeverVerify turns verification off".to_string(),
            "set imagePullCredentialsVerificationPolicy: NeverVerifyPreloadedImages (or AlwaysVerify)".to_string(),
        )),
        Some(false) if version.is_some_and(|v| v < ENSURE_GATE_SINCE) => Some((
            "",
            format!("kubelets older than {ENSURE_GATE_SINCE} never verify"),
            format!("upgrade the kubelet to {ENSURE_GATE_ON_SINCE} or later"),
        )),
        Some(false) => Some((
            "featureGates",
            format!("{ENSURE_SECRET_PULLED_IMAGES} is off"),
            format!("set featureGates.{ENSURE_SECRET_PULLED_IMAGES}: true (on by default from {ENSURE_GATE_ON_SINCE})"),
        )),
        None => Some((
            "featureGates",
            format!("{ENSURE_SECRET_PULLED_IMAGES} is not set and the kubelet version is unknown (it is on by default only from {ENSURE_GATE_ON_SINCE})"),
            format!("set featureGates.{ENSURE_SECRET_PULLED_IMAGES}: true, or pass --kubelet-version"),
        )),
    }
}

/// The `preloadedImagesVerificationAllowlist` items that cover images our
/// entries serve per pod: the kubelet skips verification for them.
fn allowlisted(
    config: &KubeletConfig,
    ours: &[&Entry],
    file: &Path,
    seen: &str,
    shared: &str,
) -> Vec<Finding> {
    let mut found = Vec::new();
    for (i, item) in config
        .preloaded_images_verification_allowlist
        .iter()
        .enumerate()
    {
        let prefix = item.trim_end_matches("/*");
        let covered: Vec<String> = ours
            .iter()
            .flat_map(|e| e.provider.match_images().iter().map(move |p| (e, p)))
            .filter(|(_, p)| matching::overlaps(p, prefix))
            .map(|(e, p)| format!("{p:?} ({})", e.name()))
            .collect();
        if !covered.is_empty() {
            found.push(
                Finding::new(
                    Severity::Warning,
                    Rule::ImageReuse,
                    file,
                    format!("preloadedImagesVerificationAllowlist[{i}]"),
                    format!(
                        "{seen}: the allowlist entry {item:?} covers images served per pod by {}; the kubelet skips verification for them, so {shared}",
                        covered.join(", ")
                    ),
                )
                .fix("keep the allowlist to images baked into the node image, outside the registries served per pod"),
            );
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_globs() {
        assert!(has_host_glob("*.dkr.ecr.*.amazonaws.com"));
        assert!(!has_host_glob(
            "602401143452.dkr.ecr.us-west-2.amazonaws.com"
        ));
        assert!(!has_host_glob("reg.io/team*"));
    }
}
