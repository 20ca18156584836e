//! A DNS message or TCP stream from the wire: every reader takes any bytes
//! without panicking, and what it says is consistent.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::dns;

fuzz_target!(|data: &[u8]| {
    let _ = dns::Header::parse(data);
    let _ = dns::response_info(data);
    let _ = dns::parse_question(data);
    if let Some(id) = dns::message_id(data) {
        assert!(data.len() >= 2);
        assert_eq!(id, u16::from_be_bytes([data[0], data[1]]));
    }
    // A TCP stream: frames found one after another never run past the end.
    let mut rest = data;
    while let Some(f) = dns::tcp_frame(rest) {
        let m = f.message(rest);
        assert!(m.len() + 2 <= rest.len());
        let _ = dns::response_info(m);
        rest = &rest[m.len() + 2..];
    }
});
