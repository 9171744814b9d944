//! The kubelet's request on stdin, through the function `serve` hands what
//! it read: any bytes get a request or an error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = wicp_kubelet::request::protocol::request_from_bytes(data) {
        // Whatever parsed must be usable downstream without panicking.
        let _ = wicp_kubelet::request::image::ImageRef::parse(&request.image);
    }
});
