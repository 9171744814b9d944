//! What `--version` prints: the version, the git commit the binary was built
//! from (embedded by build.rs, "unknown" outside git) and the providers this
//! build carries, so an admin can tell from a node which build it runs.

use std::sync::LazyLock;

use crate::cli::BINARY;
use crate::config::entry;

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit, or "unknown".
pub const COMMIT: &str = match option_env!("WICP_GIT_COMMIT") {
    Some(commit) => commit,
    None => "unknown",
};

/// The providers built into this binary, found by building the exchangers
/// with default options, exactly as an invocation without flags would.
pub fn providers() -> Vec<&'static str> {
    match entry::route(BINARY, &[], &[]) {
        Ok(routing) => {
            let mut names: Vec<&'static str> = routing
                .exchangers
                .iter()
                .map(|e| e.provider().name())
                .collect();
            names.sort_unstable();
            names
        }
        Err(_) => Vec::new(),
    }
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
pub fn version() -> &'static str {
    VERSION_LINE.as_str()
}
