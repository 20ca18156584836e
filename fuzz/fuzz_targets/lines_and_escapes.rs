//! Line framing (ping/pong) and the escapes users type for raw messages:
//! no panic; escaping then unescaping gives the bytes back.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::{escape, line};

fuzz_target!(|data: &[u8]| {
    if let Some(n) = line::find_line(data) {
        assert!(n <= data.len());
    }
    let mut out = Vec::new();
    let _ = line::pong(data, &mut out);
    let _ = line::parse_pong(data);
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = escape::unescape(s);
    }
    let e = escape::escape(data);
    assert_eq!(escape::unescape(&e).unwrap(), data);
});
