//! Push messages (throng's header, datagrams, numbered lines): no panic;
//! a framed message lies within the bytes and is at least a header long;
//! the header's fields round-trip through the encoder.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::push;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((h, n))) = push::decode(data) {
        assert!(n >= push::HEADER && n <= data.len());
        let mut out = Vec::new();
        push::encode(&h, n - push::HEADER, &mut out);
        assert_eq!(push::decode(&out), Ok(Some((h, n))));
    }
    let _ = push::decode_datagram(data);
    if let Ok(Some((_, n))) = push::decode_line(data) {
        assert!(n <= data.len() && data[n - 1] == b'\n');
    }
});
