//! Redis replies from the wire, and the command lines users type: no
//! panic; a reply framed is framed the same with more bytes after it, and
//! every shorter prefix of it is incomplete (or already broken); a
//! command split and built is one whole array of its words.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::resp::{build_command, frame, split_command, Kind};

fuzz_target!(|data: &[u8]| {
    if let Ok(Some(r)) = frame(data) {
        assert!(r.len <= data.len());
        let mut more = data[..r.len].to_vec();
        more.extend_from_slice(b"+next\r\n");
        assert_eq!(frame(&more), Ok(Some(r)));
        for cut in [0, r.len / 2, r.len - 1] {
            assert!(!matches!(frame(&data[..cut]), Ok(Some(_))), "cut {cut}");
        }
    }
    if let Ok(line) = std::str::from_utf8(data) {
        if let Ok(words) = split_command(line) {
            let mut out = Vec::new();
            build_command(&words, &mut out);
            let r = frame(&out).expect("a command is RESP").expect("whole");
            assert_eq!((r.len, r.kind), (out.len(), Kind::Array));
        }
    }
});
