//! Which registry hosts are Google's.
//!
//! A Google access token opens every Artifact Registry and Container Registry
//! repository its identity may read, anywhere, so it must only ever be handed
//! to the kubelet for a host Google runs. The hosts are matched by one
//! anchored pattern, written out as code because the crate carries no regex
//! engine:
//!
//! ```text
//! ^( gcr\.io
//!  | (us|eu|asia)\.gcr\.io
//!  | [a-z]+(-[a-z]+[0-9]+)?-docker\.pkg\.dev
//!  | container\.cloud\.google\.com )$
//! ```
//!
//! The Artifact Registry location is a multi-region (`us`, `europe`, `asia`)
//! or a region (`us-central1`, `northamerica-northeast2`). No port is
//! accepted: Google's registries serve on 443 and the kubelet keys a host
//! with a port separately, so `gcr.io:5000` is some other registry.

/// The hosts, as shown in messages and `--help`.
pub(super) const REGISTRIES: &str = "gcr.io, us.gcr.io, eu.gcr.io, asia.gcr.io, \
     <location>-docker.pkg.dev, container.cloud.google.com";

/// The `matchImages` the README recommends: with the kubelet's rules they
/// select exactly the hosts served here (a glob never spans a dot).
pub(super) const MATCH_IMAGES: [&str; 6] = [
    "gcr.io",
    "us.gcr.io",
    "eu.gcr.io",
    "asia.gcr.io",
    "*-docker.pkg.dev",
    "container.cloud.google.com",
];

/// Whether `registry` (`host[:port]` as the image names it) is a Google
/// container registry.
pub fn is_google_registry(registry: &str) -> bool {
    match registry {
        "gcr.io" | "us.gcr.io" | "eu.gcr.io" | "asia.gcr.io" | "container.cloud.google.com" => true,
        _ => registry
            .strip_suffix("-docker.pkg.dev")
            .is_some_and(is_location),
    }
}

/// `[a-z]+(-[a-z]+[0-9]+)?`: `us`, `europe`, `us-central1`, `europe-west12`.
fn is_location(location: &str) -> bool {
    let letters = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_lowercase());
    match location.split_once('-') {
        None => letters(location),
        Some((area, region)) => {
            let split = region
                .find(|c: char| c.is_ascii_digit())
                .unwrap_or(region.len());
            let (name, number) = region.split_at(split);
            letters(area)
                && letters(name)
                && !number.is_empty()
                && number.bytes().all(|c| c.is_ascii_digit())
        }
    }
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
        ] {
            assert!(is_google_registry(host), "{host} should be served");
        }
    }

    #[test]
    fn recommended_match_images_select_the_served_hosts() {
        let selected = |host: &str| {
            MATCH_IMAGES
                .iter()
                .any(|p| crate::kubelet::matching::matches(p, &format!("{host}/p/app")))
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
        for host in ["mirror.gcr.io", "us-python.pkg.dev", "a.us-docker.pkg.dev"] {
            assert!(!selected(host), "{host}");
        }
    }

    #[test]
    fn lookalikes_are_refused() {
        for host in [
            "gcr.io.evil.com",
            "evilgcr.io",
            "evil-gcr.io",
            "mirror.gcr.io",
            "k8s.gcr.io",
            "us.gcr.io.attacker.net",
            ".gcr.io",
            "gcr.io:443",
            "gcr.io:5000",
            "GCR.io",
            "docker.pkg.dev",
            "-docker.pkg.dev",
            "us-docker.pkg.dev.evil.com",
            "us-docker.pkg.dev:5000",
            "evil.us-docker.pkg.dev",
            "us.evil-docker.pkg.dev",
            "us-central1-a-docker.pkg.dev",
            "us-central-docker.pkg.dev",
            "us-1central-docker.pkg.dev",
            "US-docker.pkg.dev",
            "us-python.pkg.dev",
            "us-docker.pkg.devv",
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
