//! Registry host parsing of each exchanger, on arbitrary text: the check
//! that decides whether a cloud token may be handed out for a host.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wi_credential_provider::exchange::{azure, gcp};

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
    // No host is claimed by two clouds.
    assert!(!(acr.is_some() && google), "{registry:?}");
});
