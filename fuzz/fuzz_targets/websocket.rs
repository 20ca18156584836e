//! WebSocket from the wire: frames as a server and as a client would read
//! them, through the reassembly of fragments, and both handshake parsers.
//! No panic; a frame lies within the bytes and within the message cap; a
//! decoded frame encodes back to a frame that decodes the same; a message
//! is never longer than the cap. The first byte picks the side.
#![no_main]
use libfuzzer_sys::fuzz_target;
use wire::ws::{self, Key, Opcode, Reassembler, Role};

fuzz_target!(|data: &[u8]| {
    let Some((&side, bytes)) = data.split_first() else {
        return;
    };
    let role = if side & 1 == 0 { Role::Server } else { Role::Client };
    let mut rest = bytes;
    let mut r = Reassembler::default();
    let mut payload = Vec::new();
    let mut again = Vec::new();
    loop {
        let f = match ws::decode_frame(rest, role) {
            Ok(Some(f)) => f,
            Ok(None) | Err(_) => break,
        };
        assert!(f.end() <= rest.len());
        assert!(f.payload_len as u64 <= ws::MAX_WS_MESSAGE);
        payload.clear();
        payload.extend_from_slice(f.payload(rest));
        if let Some(k) = f.mask {
            ws::apply_mask(&mut payload, k, 0);
        }
        again.clear();
        ws::encode_frame(&mut again, f.fin, f.opcode, &payload, f.mask);
        let g = ws::decode_frame(&again, role).unwrap().unwrap();
        assert_eq!((g.fin, g.opcode, g.mask, g.payload_len), (f.fin, f.opcode, f.mask, f.payload_len));
        if f.opcode == Opcode::Close {
            let _ = ws::close_code(&payload);
        } else if !f.opcode.is_control() {
            match r.push(&f, &payload) {
                Ok(Some((_, m))) => assert!(m.len() as u64 <= ws::MAX_WS_MESSAGE),
                Ok(None) => {}
                Err(_) => break,
            }
        }
        rest = &rest[f.end()..];
    }
    if let Ok(Some(up)) = ws::parse_upgrade(bytes) {
        assert!(up.head_len <= bytes.len());
        let mut resp = Vec::new();
        ws::encode_accept(&up.key, None, &mut resp);
        assert!(matches!(
            ws::parse_response(&resp, &up.key),
            Ok(Some(ws::Response::Upgraded { .. }))
        ));
    }
    let key = Key::parse(b"dGhlIHNhbXBsZSBub25jZQ==").unwrap();
    match ws::parse_response(bytes, &key) {
        Ok(Some(ws::Response::Refused { line, head_len, .. })) => {
            assert!(line.end <= head_len && head_len <= bytes.len());
        }
        Ok(Some(ws::Response::Upgraded { head_len, subprotocol })) => {
            assert!(head_len <= bytes.len());
            assert!(subprotocol.is_none_or(|p| p.end <= head_len));
        }
        _ => {}
    }
});
