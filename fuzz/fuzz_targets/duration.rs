//! Kubelet-style durations, and the cacheDuration rule on any numbers.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::time::Duration;
use wicp_base::duration;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = duration::parse(text);
    }
    if data.len() >= 24 {
        let n = |i: usize| i64::from_le_bytes(data[i..i + 8].try_into().unwrap());
        let (now, expires, max) = (n(0), n(8), n(16).unsigned_abs() % (366 * 24 * 3600));
        let d = duration::cache_duration(now, expires, Duration::from_secs(max));
        // --max-cache-duration is parsed with a one-year bound.
        assert!(d.as_secs() <= max);
        let text = duration::format_go(d);
        assert_eq!(duration::parse(&text).unwrap().as_secs(), d.as_secs());
    }
});
