//! A query file in dnsperf's format, and query names as `--qname` takes
//! them: no panic; every name the file reader keeps passes the name check
//! and, with its `{rand}` labels filled, encodes as the question the
//! engine sends (the engine would otherwise ask for the root).
#![no_main]
use libfuzzer_sys::fuzz_target;
use throng::scenario::{check_name, parse_query_file, RAND_LABEL_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for line in text.lines() {
        let _ = check_name(line);
    }
    let Ok((names, qtypes)) = parse_query_file(text, wire::dns::rtype::A) else {
        return;
    };
    assert_eq!(names.len(), qtypes.len());
    let filled = "q".repeat(RAND_LABEL_LEN);
    let mut out = Vec::new();
    for (name, &t) in names.iter().zip(&qtypes) {
        assert!(
            !name.is_empty() && !name.contains(char::is_whitespace),
            "{name:?}"
        );
        assert!(check_name(name).is_ok(), "{name:?}");
        out.clear();
        let question = name.replace("{rand}", &filled);
        assert!(
            wire::dns::encode_question(&question, t, &mut out).is_ok(),
            "{name:?} {t}"
        );
    }
});
