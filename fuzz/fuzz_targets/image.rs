//! Image references and the kubelet's glob matching, on arbitrary text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wicp_kubelet::config::matching;
use wicp_kubelet::request::image::ImageRef;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(image) = ImageRef::parse(text) {
        let normalized = image.to_string();
        // A parsed reference re-parses to itself, and its own registry
        // host, as an auth key, matches it under the kubelet's rules.
        let again = ImageRef::parse(&normalized).expect("normalized reference parses");
        assert_eq!(again, image);
        // (The kubelet's SplitHostPort cannot split a bracketed IPv6 host
        // without a port, so such a key never matches there either.)
        if !(image.registry().starts_with('[') && image.hostname() == image.registry()) {
            assert!(
                matching::matches(image.registry(), &normalized),
                "{normalized}"
            );
        }
    }
    // Split the input into a pattern and a target.
    if let Some((pattern, target)) = text.split_once('\n') {
        let _ = matching::matches(pattern, target);
        let _ = matching::is_valid_pattern(pattern);
    }
});
