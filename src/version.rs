//! What `--version` prints: the version, the git commit the binary was built
//! from (embedded by build.rs, "unknown" outside git) and the providers this
//! build carries, so an admin can tell from a node which build it runs.

use std::sync::LazyLock;

use wicp_providers as providers;

/// The crate version.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit, or "unknown".
const COMMIT: &str = match option_env!("WICP_GIT_COMMIT") {
    Some(commit) => commit,
    None => "unknown",
};

/// The providers built into this binary, sorted by name.
pub(crate) fn providers() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = providers::ALL.iter().map(|p| p.name).collect();
    names.sort_unstable();
    names
}

static VERSION_LINE: LazyLock<String> = LazyLock::new(|| {
    let providers = providers();
    let providers = if providers.is_empty() {
        "unknown".to_string()
    } else {
        providers.join(", ")
    };
    format!("{VERSION} (commit {COMMIT}, providers: {providers})")
});

/// `0.1.0 (commit 5d9f861abcde, providers: aws, azure, gcp, passthrough)`.
pub(crate) fn line() -> &'static str {
    VERSION_LINE.as_str()
}

/// The names this binary runs under in a plugin directory it installs
/// whole (the Talos extension, an OpenShift layered image): its own, and
/// one per provider it carries, since the kubelet runs a plugin by its
/// entry's name and the name picks the provider.
pub(crate) fn plugin_names() -> Vec<String> {
    let binary = crate::options::BINARY;
    std::iter::once(binary.to_string())
        .chain(providers().into_iter().map(|p| format!("{binary}-{p}")))
        .collect()
}
