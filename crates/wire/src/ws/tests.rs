use super::*;
use proptest::prelude::*;

const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

#[test]
fn accept_of_the_rfc_example() {
    // RFC 6455 1.3.
    assert_eq!(
        &accept_for(b"dGhlIHNhbXBsZSBub25jZQ=="),
        b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    );
    let key = Key::parse(b"dGhlIHNhbXBsZSBub25jZQ==").unwrap();
    assert_eq!(&key.accept(), b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    assert_eq!(Key::new(*b"the sample nonce"), key);
}

#[test]
fn keys_are_16_bytes_of_base64() {
    assert!(Key::parse(b"dGhlIHNhbXBsZSBub25jZQ").is_none());
    assert!(Key::parse(b"dGhlIHNhbXBsZSBub25jZQ=").is_none());
    assert!(Key::parse(b"dGhlIHNhbXBsZSBub25jZSE=").is_none());
    assert!(Key::parse(b"dGhlIHNhbXBsZSBub25j!Q==").is_none());
    assert!(Key::parse(b"").is_none());
}

#[test]
fn the_rfc_frame_examples() {
    // RFC 6455 5.7.
    let hello = [0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f];
    let f = decode_frame(&hello, Role::Client).unwrap().unwrap();
    assert_eq!((f.fin, f.opcode, f.mask), (true, Opcode::Text, None));
    assert_eq!(f.payload(&hello), b"Hello");
    let mut out = Vec::new();
    encode_frame(&mut out, true, Opcode::Text, b"Hello", None);
    assert_eq!(out, hello);

    let masked = [
        0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
    ];
    let f = decode_frame(&masked, Role::Server).unwrap().unwrap();
    assert_eq!(f.mask, Some(MASK));
    let mut p = f.payload(&masked).to_vec();
    apply_mask(&mut p, MASK, 0);
    assert_eq!(p, b"Hello");
    out.clear();
    encode_frame(&mut out, true, Opcode::Text, b"Hello", Some(MASK));
    assert_eq!(out, masked);

    let first = [0x01, 0x03, 0x48, 0x65, 0x6c];
    let last = [0x80, 0x02, 0x6c, 0x6f];
    let mut r = Reassembler::default();
    let f = decode_frame(&first, Role::Client).unwrap().unwrap();
    assert_eq!(r.push(&f, f.payload(&first)).unwrap(), None);
    let f = decode_frame(&last, Role::Client).unwrap().unwrap();
    assert_eq!(
        r.push(&f, f.payload(&last)).unwrap(),
        Some((Opcode::Text, &b"Hello"[..]))
    );

    let mut big = vec![0x82, 0x7e, 0x01, 0x00];
    big.resize(4 + 256, 7);
    let f = decode_frame(&big, Role::Client).unwrap().unwrap();
    assert_eq!(
        (f.opcode, f.payload_at, f.payload_len),
        (Opcode::Binary, 4, 256)
    );
    out.clear();
    encode_frame(&mut out, true, Opcode::Binary, &[7; 256], None);
    assert_eq!(out, big);

    let huge = [0x82, 0x7f, 0, 0, 0, 0, 0, 1, 0, 0];
    let f = parse_header(&huge, Role::Client).unwrap().unwrap();
    assert_eq!((f.payload_at, f.payload_len), (10, 65536));
    assert_eq!(decode_frame(&huge, Role::Client), Ok(None));
}

#[test]
fn headers_wait_for_their_bytes() {
    let mut out = Vec::new();
    encode_frame(&mut out, true, Opcode::Binary, &[1; 70_000], Some(MASK));
    for n in 0..14 {
        assert_eq!(parse_header(&out[..n], Role::Server), Ok(None), "{n} bytes");
    }
    assert!(parse_header(&out[..14], Role::Server).unwrap().is_some());
    assert_eq!(decode_frame(&out[..out.len() - 1], Role::Server), Ok(None));
    assert!(decode_frame(&out, Role::Server).unwrap().is_some());
}

#[test]
fn broken_frames_are_named() {
    let e = |b: &[u8], role| parse_header(b, role).unwrap_err();
    assert_eq!(
        e(&[0x81, 0x85, 0, 0, 0, 0], Role::Client),
        WsError::MaskedFromServer
    );
    assert_eq!(e(&[0x81, 0x05], Role::Server), WsError::UnmaskedFromClient);
    assert_eq!(e(&[0x83, 0x00], Role::Client), WsError::BadOpcode(3));
    assert_eq!(e(&[0x8b, 0x00], Role::Client), WsError::BadOpcode(0xb));
    assert_eq!(e(&[0xc1, 0x00], Role::Client), WsError::ReservedBits);
    assert_eq!(e(&[0x91, 0x00], Role::Client), WsError::ReservedBits);
    assert_eq!(
        e(&[0x89, 0x7e, 0, 126], Role::Client),
        WsError::ControlTooLong(126)
    );
    assert_eq!(e(&[0x09, 0x00], Role::Client), WsError::FragmentedControl);
    // 64-bit lengths: refused from the header alone, before any sizing.
    assert_eq!(
        e(
            &[0x82, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            Role::Client
        ),
        WsError::TooLong(u64::MAX)
    );
    assert_eq!(
        e(&[0x82, 0x7f, 0, 0, 0, 0, 0, 0x10, 0, 1], Role::Client),
        WsError::TooLong(MAX_WS_MESSAGE + 1)
    );
    assert!(parse_header(&[0x82, 0x7f, 0, 0, 0, 0, 0, 0x10, 0, 0], Role::Client).is_ok());
}

#[test]
fn close_codes() {
    assert_eq!(close_code(&[]), Ok(None));
    assert_eq!(close_code(&[3]), Err(WsError::CloseOneByte));
    assert_eq!(close_code(&[0x03, 0xe8]), Ok(Some(1000)));
    assert_eq!(close_code(&[0x03, 0xe8, b'b', b'y', b'e']), Ok(Some(1000)));
    assert_eq!(close_code(&4999u16.to_be_bytes()), Ok(Some(4999)));
    for bad in [0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, u16::MAX] {
        assert_eq!(
            close_code(&bad.to_be_bytes()),
            Err(WsError::BadCloseCode(bad))
        );
    }
    let mut out = Vec::new();
    encode_close(&mut out, Some(1001), None);
    assert_eq!(out, [0x88, 0x02, 0x03, 0xe9]);
    out.clear();
    encode_close(&mut out, None, Some(MASK));
    assert_eq!(out, [0x88, 0x80, 0x37, 0xfa, 0x21, 0x3d]);
}

#[test]
fn fragments_in_order_or_named() {
    let frame = |fin, opcode| Frame {
        fin,
        opcode,
        mask: None,
        payload_at: 2,
        payload_len: 10,
    };
    let mut f = Fragments::default();
    assert_eq!(
        f.data(&frame(true, Opcode::Continuation)),
        Err(WsError::UnexpectedContinuation)
    );
    assert_eq!(
        f.data(&frame(false, Opcode::Binary)),
        Ok(Piece::First(Opcode::Binary))
    );
    assert!(f.in_message());
    assert_eq!(
        f.data(&frame(true, Opcode::Text)),
        Err(WsError::ExpectedContinuation)
    );
    assert_eq!(
        f.data(&frame(false, Opcode::Continuation)),
        Ok(Piece::Middle)
    );
    assert_eq!(
        f.data(&frame(true, Opcode::Continuation)),
        Ok(Piece::Last(Opcode::Binary))
    );
    assert!(!f.in_message());
    assert_eq!(
        f.data(&frame(true, Opcode::Text)),
        Ok(Piece::Whole(Opcode::Text))
    );
    // The limit holds over the fragments together.
    let mut f = Fragments::default();
    let mut big = frame(false, Opcode::Binary);
    big.payload_len = MAX_WS_MESSAGE as usize;
    f.data(&big).unwrap();
    let mut more = frame(true, Opcode::Continuation);
    more.payload_len = 1;
    assert_eq!(f.data(&more), Err(WsError::TooLong(MAX_WS_MESSAGE + 1)));
}

/// A client's stream: text, a ping, a binary message in three fragments
/// with a pong between them, a 300-byte text, a close.
fn client_stream() -> (Vec<u8>, Vec<(Opcode, Vec<u8>)>) {
    let mut s = Vec::new();
    let masks = [[1, 2, 3, 4], [9, 8, 7, 6], [0xff, 0, 0xff, 0], [5, 5, 5, 5]];
    encode_frame(&mut s, true, Opcode::Text, b"hello", Some(masks[0]));
    encode_frame(&mut s, true, Opcode::Ping, b"p1", Some(masks[1]));
    encode_frame(&mut s, false, Opcode::Binary, &[1, 2, 3], Some(masks[2]));
    encode_frame(&mut s, false, Opcode::Continuation, &[4, 5], Some(masks[3]));
    encode_frame(&mut s, true, Opcode::Pong, b"", Some(masks[0]));
    encode_frame(&mut s, true, Opcode::Continuation, &[6], Some(masks[1]));
    encode_frame(&mut s, true, Opcode::Text, &[b'x'; 300], Some(masks[2]));
    encode_close(&mut s, Some(1000), Some(masks[3]));
    let want = vec![
        (Opcode::Text, b"hello".to_vec()),
        (Opcode::Ping, b"p1".to_vec()),
        (Opcode::Pong, Vec::new()),
        (Opcode::Binary, vec![1, 2, 3, 4, 5, 6]),
        (Opcode::Text, vec![b'x'; 300]),
        (Opcode::Close, vec![0x03, 0xe8]),
    ];
    (s, want)
}

/// Decodes `pending` as a server would: messages and control frames out,
/// consumed bytes drained.
fn drain(pending: &mut Vec<u8>, r: &mut Reassembler, got: &mut Vec<(Opcode, Vec<u8>)>) {
    while let Some(f) = decode_frame(pending, Role::Server).unwrap() {
        let end = f.end();
        let mut payload = f.payload(pending).to_vec();
        apply_mask(&mut payload, f.mask.unwrap(), 0);
        if f.opcode.is_control() {
            got.push((f.opcode, payload));
        } else if let Some((op, m)) = r.push(&f, &payload).unwrap() {
            got.push((op, m.to_vec()));
        }
        pending.drain(..end);
    }
}

#[test]
fn a_stream_of_frames_splits_at_every_point() {
    let (stream, want) = client_stream();
    for split in 0..=stream.len() {
        let mut pending = Vec::new();
        let mut got = Vec::new();
        let mut r = Reassembler::default();
        for part in [&stream[..split], &stream[split..]] {
            pending.extend_from_slice(part);
            drain(&mut pending, &mut r, &mut got);
        }
        assert_eq!(got, want, "split at {split}");
        assert!(pending.is_empty());
    }
}

#[test]
fn masking_in_pieces_equals_masking_whole() {
    let data: Vec<u8> = (0..=255).collect();
    let mut whole = data.clone();
    apply_mask(&mut whole, MASK, 0);
    for cut in 0..data.len() {
        let mut pieces = data.clone();
        let (a, b) = pieces.split_at_mut(cut);
        apply_mask(a, MASK, 0);
        apply_mask(b, MASK, cut);
        assert_eq!(pieces, whole, "cut at {cut}");
    }
}

fn request(key: &Key) -> Vec<u8> {
    let mut out = Vec::new();
    let headers = [("Origin", "http://example.com"), ("X-Trace", "7")];
    let at = encode_request(
        &Request {
            host: "127.0.0.1:4242",
            path: "/chat?room=1",
            subprotocol: Some("chat, superchat"),
            headers: &headers,
        },
        key,
        &mut out,
    );
    assert_eq!(&out[at], key.as_bytes());
    out
}

#[test]
fn the_handshake_round_trips_both_sides() {
    let key = Key::new(*b"0123456789abcdef");
    let req = request(&key);
    // httparse, an independent parser, reads the same request.
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut parsed = httparse::Request::new(&mut headers);
    assert!(parsed.parse(&req).unwrap().is_complete());
    assert_eq!(parsed.method, Some("GET"));
    assert_eq!(parsed.path, Some("/chat?room=1"));
    let value = |name: &str| {
        parsed
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    assert_eq!(value("sec-websocket-key"), Some(key.as_bytes()));
    assert_eq!(value("sec-websocket-version"), Some(&b"13"[..]));
    assert_eq!(value("x-trace"), Some(&b"7"[..]));

    let up = parse_upgrade(&req).unwrap().unwrap();
    assert_eq!((up.head_len, up.key), (req.len(), key));
    assert_eq!(&req[up.subprotocols.unwrap()], b"chat, superchat");
    let mut resp = Vec::new();
    encode_accept(&up.key, Some(b"chat"), &mut resp);
    resp.extend_from_slice(&[0x81, 0x00]);
    let Response::Upgraded {
        head_len,
        subprotocol,
    } = parse_response(&resp, &key).unwrap().unwrap()
    else {
        panic!("not upgraded");
    };
    assert_eq!(&resp[subprotocol.unwrap()], b"chat");
    assert_eq!(&resp[head_len..], [0x81, 0x00]);
    // Every prefix is a wait, on both sides.
    for n in 0..req.len() {
        assert_eq!(parse_upgrade(&req[..n]), Ok(None), "{n}");
    }
    for n in 0..head_len {
        assert_eq!(parse_response(&resp[..n], &key), Ok(None), "{n}");
    }
}

#[test]
fn refusals_and_broken_answers_are_named() {
    let key = Key::new([7; 16]);
    let refused = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 3\r\n\r\nno!";
    match parse_response(refused, &key).unwrap().unwrap() {
        Response::Refused {
            status,
            line,
            head_len,
        } => {
            assert_eq!(status, 403);
            assert_eq!(&refused[line], b"HTTP/1.1 403 Forbidden");
            assert_eq!(head_len, refused.len() - 3);
        }
        r => panic!("{r:?}"),
    }
    let other = Key::new([8; 16]);
    let mut wrong = Vec::new();
    encode_accept(&other, None, &mut wrong);
    assert_eq!(parse_response(&wrong, &key), Err(WsError::BadAccept));
    let no_accept =
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n";
    assert_eq!(parse_response(no_accept, &key), Err(WsError::BadAccept));
    let mut no_upgrade =
        b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nSec-WebSocket-Accept: "
            .to_vec();
    no_upgrade.extend_from_slice(&key.accept());
    no_upgrade.extend_from_slice(b"\r\n\r\n");
    assert_eq!(parse_response(&no_upgrade, &key), Err(WsError::NotUpgrade));
    let mut deflate = Vec::new();
    encode_accept(&key, None, &mut deflate);
    deflate.truncate(deflate.len() - 2);
    deflate.extend_from_slice(b"Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n");
    assert_eq!(
        parse_response(&deflate, &key),
        Err(WsError::UnaskedExtension)
    );
    // An echo server sends the request back: not an HTTP answer.
    assert!(matches!(
        parse_response(&request(&key), &key),
        Err(WsError::Http(_))
    ));
}

#[test]
fn bad_upgrade_requests_are_named() {
    let key = Key::new([1; 16]);
    let good = String::from_utf8(request(&key)).unwrap();
    let without = |line: &str| {
        let s: String = good
            .split_inclusive("\r\n")
            .filter(|l| !l.starts_with(line))
            .collect();
        parse_upgrade(s.as_bytes())
    };
    assert_eq!(without("Host"), Err(WsError::NoHost));
    assert_eq!(without("Upgrade"), Err(WsError::NotUpgrade));
    assert_eq!(without("Connection"), Err(WsError::NotUpgrade));
    assert_eq!(without("Sec-WebSocket-Version"), Err(WsError::WrongVersion));
    assert_eq!(without("Sec-WebSocket-Key"), Err(WsError::BadKey));
    let v8 = good.replace("Version: 13", "Version: 8");
    assert_eq!(parse_upgrade(v8.as_bytes()), Err(WsError::WrongVersion));
    let post = good.replacen("GET", "POST", 1);
    assert_eq!(parse_upgrade(post.as_bytes()), Err(WsError::NotGet));
    let old = good.replacen("HTTP/1.1", "HTTP/1.0", 1);
    assert_eq!(
        parse_upgrade(old.as_bytes()),
        Err(WsError::Http(HttpError::Version))
    );
    let short = good.replace(std::str::from_utf8(key.as_bytes()).unwrap(), "c2hvcnQ=");
    assert_eq!(parse_upgrade(short.as_bytes()), Err(WsError::BadKey));
    // Tokens in lists, any case.
    let listed = good
        .replace("Connection: Upgrade", "Connection: keep-alive, UPGRADE")
        .replace("Upgrade: websocket", "Upgrade: WebSocket");
    assert!(parse_upgrade(listed.as_bytes()).unwrap().is_some());
}

fn opcode() -> impl Strategy<Value = Opcode> {
    prop_oneof![
        Just(Opcode::Text),
        Just(Opcode::Binary),
        Just(Opcode::Ping),
        Just(Opcode::Pong),
        Just(Opcode::Close),
        Just(Opcode::Continuation),
    ]
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        for role in [Role::Client, Role::Server] {
            if let Ok(Some(f)) = parse_header(&bytes, role) {
                prop_assert!(f.payload_len as u64 <= MAX_WS_MESSAGE);
                prop_assert!(f.payload_at <= MAX_HEADER);
            }
            if let Ok(Some(f)) = decode_frame(&bytes, role) {
                prop_assert!(f.end() <= bytes.len());
            }
        }
        let _ = close_code(&bytes);
        let _ = parse_upgrade(&bytes);
        let _ = parse_response(&bytes, &Key::new([0; 16]));
        let mut head = b"GET / HTTP/1.1\r\n".to_vec();
        head.extend_from_slice(&bytes);
        let _ = parse_upgrade(&head);
    }

    #[test]
    fn any_frame_round_trips(
        op in opcode(),
        fin: bool,
        payload in proptest::collection::vec(any::<u8>(), 0..70_000),
        mask: Option<[u8; 4]>,
    ) {
        let fin = fin || op.is_control();
        let payload = if op.is_control() { &payload[..payload.len().min(MAX_CONTROL)] } else { &payload[..] };
        let mut out = Vec::new();
        encode_frame(&mut out, fin, op, payload, mask);
        let role = if mask.is_some() { Role::Server } else { Role::Client };
        let f = decode_frame(&out, role).unwrap().unwrap();
        prop_assert_eq!((f.fin, f.opcode, f.mask, f.end()), (fin, op, mask, out.len()));
        let mut got = f.payload(&out).to_vec();
        if let Some(k) = mask {
            apply_mask(&mut got, k, 0);
        }
        prop_assert_eq!(&got[..], payload);
    }

    #[test]
    fn any_three_way_split_decodes_the_same(a in 0usize..400, b in 0usize..400) {
        let (stream, want) = client_stream();
        let (a, b) = (a.min(stream.len()), b.min(stream.len()));
        let (a, b) = (a.min(b), a.max(b));
        let mut pending = Vec::new();
        let mut got = Vec::new();
        let mut r = Reassembler::default();
        for part in [&stream[..a], &stream[a..b], &stream[b..]] {
            pending.extend_from_slice(part);
            drain(&mut pending, &mut r, &mut got);
        }
        prop_assert_eq!(got, want);
    }
}

#[test]
fn push_messages_carry_their_number_first() {
    let h = crate::push::Header {
        seq: 17,
        mono_ns: 1_000_000_007,
        wall_ns: 0,
    };
    let mut out = Vec::new();
    encode_push(&h, 5, &mut out);
    let f = decode_frame(&out, Role::Client).unwrap().unwrap();
    assert_eq!((f.fin, f.opcode, f.end()), (true, Opcode::Text, out.len()));
    assert_eq!(f.payload(&out), b"17 1000000007 0 ppppp");
    assert_eq!(crate::push::leading_sequence(f.payload(&out)), Ok(17));
    assert_eq!(push_stamps(f.payload(&out)), Ok(h));
    assert!(push_stamps(b"17 tick").is_err());
    let max = crate::push::Header {
        seq: u64::MAX,
        mono_ns: u64::MAX,
        wall_ns: u64::MAX,
    };
    out.clear();
    encode_push(&max, 200, &mut out);
    let f = decode_frame(&out, Role::Client).unwrap().unwrap();
    assert_eq!(push_stamps(f.payload(&out)), Ok(max));
}

#[test]
fn a_message_under_way_costs_8_bytes() {
    assert_eq!(std::mem::size_of::<Fragments>(), 8);
}
