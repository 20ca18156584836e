//! An HTTP response from the wire: the head, then a chunked body fed in
//! pieces split where the input says. No panic; the decoder consumes at
//! most what it is given, and all of it until the body ends; the
//! resumable scan over the same bytes, its caller keeping only what it
//! has not forgotten (as the client does), ends where the decoder ends,
//! or fails where it fails (or refuses a chunk of 4 GiB or more, which
//! the decoder reads on).
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::http::{parse_response_head, ChunkedDecoder, ChunkedScan, HttpError};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let _ = parse_response_head(rest, first & 1 == 1);
    // The first byte also picks the size of the pieces fed to the decoder.
    let piece = usize::from(first >> 1).max(1);
    let mut d = ChunkedDecoder::default();
    let mut s = ChunkedScan::default();
    // What the scan's caller keeps, and how many bytes it forgot before it.
    let mut kept = Vec::new();
    let mut gone = 0;
    let mut at = 0;
    while at < rest.len() {
        let end = (at + piece).min(rest.len());
        kept.extend_from_slice(&rest[at..end]);
        let scanned = s.scan(&kept);
        if scanned == Err(HttpError::ChunkTooLarge) {
            break;
        }
        match d.feed(&rest[at..end]) {
            Ok((used, done)) => {
                assert!(used <= end - at);
                if done {
                    assert_eq!(scanned.map(|n| n.map(|n| gone + n)), Ok(Some(at + used)));
                    break;
                }
                // Not done: it took every byte it was given.
                assert_eq!(used, end - at);
                assert_eq!(scanned, Ok(None));
                let n = s.forget(kept.len());
                kept.drain(..n);
                gone += n;
                at = end;
            }
            Err(e) => {
                assert_eq!(scanned, Err(e));
                break;
            }
        }
    }
});
