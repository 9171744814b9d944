//! Which registry hosts are Google's.
//!
//! A Google access token opens every Artifact Registry and Container Registry
//! repository its identity may read, anywhere, so it must only ever be handed
//! to the kubelet for a host Google runs. The hosts are the ones the stock
//! plugin serves (cloud-provider-gcp `pkg/gcpcredential/gcpcredential.go`
//! @246b0a20, `containerRegistryUrls`: `container.cloud.google.com`,
//! `gcr.io`, `*.gcr.io`, `*.pkg.dev`), each `*` one DNS label, as the
//! kubelet's glob is: every name under `gcr.io` and `pkg.dev` is Google's
//! (`mirror.gcr.io`, `marketplace.gcr.io`, `us-central1-docker.pkg.dev`),
//! so the token stays with Google. Written as code because the crate
//! carries no regex engine:
//!
//! ```text
//! ^( gcr\.io
//!  | <label>\.gcr\.io
//!  | <label>\.pkg\.dev
//!  | container\.cloud\.google\.com )$
//! ```
//!
//! A label is lowercase letters, digits and inner hyphens, at most 63. No
//! port is accepted: Google's registries serve on 443 and the kubelet keys a
//! host with a port separately, so `gcr.io:5000` is some other registry.

/// The hosts, as shown in messages and `--help`.
pub(super) const REGISTRIES: &str = "gcr.io, <name>.gcr.io (us, eu, asia, marketplace, mirror...), \
     <name>.pkg.dev (<location>-docker.pkg.dev), container.cloud.google.com";

/// The `matchImages` the README recommends, the stock plugin's own: with
/// the kubelet's rules they select exactly the hosts served here (a glob
/// never spans a dot).
pub(super) const MATCH_IMAGES: [&str; 4] = [
    "container.cloud.google.com",
    "gcr.io",
    "*.gcr.io",
    "*.pkg.dev",
];

/// Whether `registry` (`host[:port]` as the image names it) is a Google
/// container registry.
pub fn is_google_registry(registry: &str) -> bool {
    match registry {
        "gcr.io" | "container.cloud.google.com" => true,
        _ => [".gcr.io", ".pkg.dev"]
            .iter()
            .any(|domain| registry.strip_suffix(domain).is_some_and(is_label)),
    }
}

/// One DNS label as Google names its hosts: lowercase letters, digits and
/// hyphens, not at either end, at most 63.
fn is_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && !label.starts_with('-')
        && !label.ends_with('-')
        && label
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn google_hosts_are_served() {
        for host in [
            "gcr.io",
            "us.gcr.io",
            "eu.gcr.io",
            "asia.gcr.io",
            "container.cloud.google.com",
            "us-docker.pkg.dev",
            "europe-docker.pkg.dev",
            "asia-docker.pkg.dev",
            "us-central1-docker.pkg.dev",
            "europe-west12-docker.pkg.dev",
            "northamerica-northeast2-docker.pkg.dev",
            "me-central2-docker.pkg.dev",
            // Round 5, item 14: every name the stock plugin serves.
            "marketplace.gcr.io",
            "mirror.gcr.io",
            "k8s.gcr.io",
            "us-python.pkg.dev",
        ] {
            assert!(is_google_registry(host), "{host} should be served");
        }
    }

    #[test]
    fn recommended_match_images_select_the_served_hosts() {
        let selected = |host: &str| {
            MATCH_IMAGES
                .iter()
                .any(|p| wicp_kubelet::config::matching::matches(p, &format!("{host}/p/app")))
        };
        for host in [
            "gcr.io",
            "asia.gcr.io",
            "us-docker.pkg.dev",
            "europe-west12-docker.pkg.dev",
            "container.cloud.google.com",
        ] {
            assert!(selected(host) && is_google_registry(host), "{host}");
        }
        for host in ["a.us-docker.pkg.dev", "a.mirror.gcr.io", "gcr.io.evil.com"] {
            assert!(!selected(host), "{host}");
        }
    }

    #[test]
    fn lookalikes_are_refused() {
        for host in [
            "gcr.io.evil.com",
            "evilgcr.io",
            "evil-gcr.io",
            "a.mirror.gcr.io",
            "-a.gcr.io",
            "a-.gcr.io",
            "us.gcr.io.attacker.net",
            ".gcr.io",
            "gcr.io:443",
            "gcr.io:5000",
            "GCR.io",
            "-docker.pkg.dev",
            "us-docker.pkg.dev.evil.com",
            "us-docker.pkg.dev:5000",
            "evil.us-docker.pkg.dev",
            "US-docker.pkg.dev",
            "us_docker.pkg.dev",
            "us-docker.pkg.devv",
            "pkg.dev",
            "container.cloud.google.com.evil.com",
            "evilcontainer.cloud.google.com",
            "docker.io",
            "127.0.0.1:5000",
            "",
        ] {
            assert!(!is_google_registry(host), "{host:?} should be refused");
        }
    }
}
