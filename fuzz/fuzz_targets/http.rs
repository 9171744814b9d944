//! Header and setting text the HTTP layer reads: Retry-After (seconds or
//! HTTP date), endpoint overrides, proxy variables for the logs.
#![no_main]
use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use wicp_net::{http, proxy};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let _ = http::parse_retry_after(text, now);
    if let Some(at) = http::parse_http_date(text) {
        // A date we accept is one we could have written.
        assert!(
            text.ends_with(" GMT") && text.len() == 29,
            "{text:?} -> {at}"
        );
    }
    if let Ok(url) = http::endpoint_override(wicp_base::error::Setting::Variable("X"), text) {
        assert!(url.starts_with("https://") || url.starts_with("http://"));
        assert!(!url.ends_with('/'));
        // The host the client connects to is known, and nothing hides it.
        assert!(http::endpoint_host(&url).is_some(), "{url:?}");
        assert!(!url.contains('\\'), "{url:?}");
    }
    if let Some(described) = proxy::Proxies::from_lookup(|_| Some(text.to_string())).describe() {
        // Every variable reads the same text here, so the description is
        // that text, hidden, after each name. Checked whole, then the hidden
        // value on its own: the joined lines can spell out a "password"
        // (`z, HTTP_PROXY=:`) that no single value shows.
        let shown = proxy::hide_credentials(text);
        let expected = ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY"]
            .map(|name| format!("{name}={shown}"))
            .join(", ");
        assert_eq!(described, expected);
        // Whatever the URL, the password in it is not shown. Each piece
        // around our own placeholder is checked, not the pieces joined: the
        // fuzzer likes to write the placeholder into the scheme, and the
        // join would spell out text the value never shows.
        if let Some((userinfo, _)) = text.split_once("://").and_then(|(_, rest)| {
            let authority = rest.split(['/', '?', '#']).next()?;
            authority.rsplit_once('@')
        }) && userinfo.contains(':')
            && userinfo.len() >= 8
            && text.matches(userinfo).count() == 1
        {
            assert!(
                shown
                    .split("<credentials>@")
                    .all(|piece| !piece.contains(userinfo)),
                "{text:?} -> {shown:?}"
            );
        }
    }
});
