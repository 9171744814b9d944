//! Registry host parsing of each exchanger (aws, azure, gcp), on arbitrary text: the check
//! that decides whether a cloud token may be handed out for a host.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wicp_providers::{aws, azure, chainguard, gcp};

fuzz_target!(|data: &[u8]| {
    let Ok(registry) = std::str::from_utf8(data) else {
        return;
    };
    let acr = azure::host::parse(registry);
    let google = gcp::is_google_registry(registry);
    if let Some(server) = &acr {
        // The host is the input, lowercased, with nothing added or lost.
        assert_eq!(server.host, registry.to_ascii_lowercase());
        assert!(!server.host.contains([':', '/', '@', ' ']), "{registry:?}");
        let suffix = server.host.rsplit('.').nth(1);
        assert_eq!(suffix, Some("azurecr"), "{registry:?}");
        // Parsing is idempotent.
        assert_eq!(azure::host::parse(&server.host).as_ref(), Some(server));
    }
    if google {
        assert!(!registry.contains([':', '/', '@', ' ']), "{registry:?}");
        assert!(
            registry.ends_with("gcr.io")
                || registry.ends_with("-docker.pkg.dev")
                || registry == "container.cloud.google.com",
            "{registry:?}"
        );
    }
    let ecr = aws::host::parse(registry);
    if let Some(parsed) = &ecr {
        assert!(!registry.contains([':', '/', '@', ' ']), "{registry:?}");
        // The region the host names belongs to its partition.
        assert!(
            parsed.partition().has_region(parsed.region()),
            "{registry:?}"
        );
        assert_eq!(aws::host::parse(registry).as_ref(), Some(parsed));
    }
    // Chainguard's identity IDs: lowercase hex segments only, so one never
    // carries a host, a scheme, a query or a path step.
    if chainguard::is_identity_id(registry) {
        assert!(
            registry
                .bytes()
                .all(|c| c == b'/' || c.is_ascii_digit() || (b'a'..=b'f').contains(&c)),
            "{registry:?}"
        );
        assert!(
            !registry.contains("//") && !registry.ends_with('/'),
            "{registry:?}"
        );
    }
    // No host is claimed by two clouds.
    let claimed = [acr.is_some(), google, ecr.is_some()];
    assert!(claimed.iter().filter(|c| **c).count() <= 1, "{registry:?}");
});
