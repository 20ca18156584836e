//! An HTTP response from the wire: the head, then a chunked body fed in
//! pieces split where the input says. No panic; the decoder consumes at
//! most what it is given, and all of it until the body ends; the
//! resumable scan over the same bytes as they grow ends where the decoder
//! ends, or fails where it fails.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::http::{parse_response_head, ChunkedDecoder, ChunkedScan};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let _ = parse_response_head(rest, first & 1 == 1);
    // The first byte also picks the size of the pieces fed to the decoder.
    let piece = usize::from(first >> 1).max(1);
    let mut d = ChunkedDecoder::default();
    let mut s = ChunkedScan::default();
    let mut at = 0;
    while at < rest.len() {
        let end = (at + piece).min(rest.len());
        let scanned = s.scan(&rest[..end]);
        match d.feed(&rest[at..end]) {
            Ok((used, done)) => {
                assert!(used <= end - at);
                if done {
                    assert_eq!(scanned, Ok(Some(at + used)));
                    break;
                }
                // Not done: it took every byte it was given.
                assert_eq!(used, end - at);
                assert_eq!(scanned, Ok(None));
                at = end;
            }
            Err(e) => {
                assert_eq!(scanned, Err(e));
                break;
            }
        }
    }
});
