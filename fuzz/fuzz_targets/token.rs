//! Service account token claims decoding on arbitrary text.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(claims) = wicp_kubelet::request::token::decode_claims(text) {
        assert!(!claims.audiences.is_empty());
        assert!(!claims.service_account.uid.is_empty());
    }
});
