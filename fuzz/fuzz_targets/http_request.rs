//! An HTTP request head from the wire: no panic, and a complete head never
//! claims more bytes than it was given.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(h)) = wire::http::parse_request_head(data) {
        assert!(h.head_len <= data.len());
    }
});
