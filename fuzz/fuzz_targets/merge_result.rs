//! A result file as `throng merge` reads it: any text that parses as a
//! result gives back what it measured, merges with another result (or
//! itself), and the merge gives back what it measured. Errors are fine (a
//! histogram that does not decode, scenarios that differ); a panic is not.
#![no_main]
use libfuzzer_sys::fuzz_target;
use throng::outcome::{merge, parse};

fuzz_target!(|data: &[u8]| {
    // `read` takes a file's text, so only UTF-8 gets this far.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // Two files, split at the first NUL; without one, a file and itself.
    let (a, b) = text.split_once('\0').unwrap_or((text, text));
    let (Ok(a), Ok(b)) = (parse(a), parse(b)) else {
        return;
    };
    let _ = a.outcome();
    let _ = b.outcome();
    let names = ["a.json".to_string(), "b.json".to_string()];
    for results in [vec![a.clone()], vec![a, b]] {
        if let Ok(m) = merge(&results, &names) {
            let _ = m.outcome();
        }
    }
});
