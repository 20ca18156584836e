//! --proto websocket (RFC 6455, client side): the opening handshake that
//! makes a connection a WebSocket one ([`Upgrader`]: a fresh key per
//! connection, the `101` and its `Sec-WebSocket-Accept` checked), then one
//! masked message per query (a fresh mask per frame from the traffic's
//! RNG, written straight into the output buffer), each answered by one
//! message from the server, matched in order (as echo servers answer).
//! A message's fragments answer nothing until its last; pings, pongs and
//! closes are [`Event`]s for the engine to act on; bytes that break the
//! protocol are a named error cause each. permessage-deflate is never
//! offered. Built on `wire::ws`.

use std::ops::Range;

use rand::{Rng, RngCore, SeedableRng};
use rand_pcg::Pcg64Mcg;
use wire::ws::{self as codec, Opcode, Role, WsError};

use super::{Frame, Resume, Status};
use crate::metrics::{
    E_WS_CLOSE_STATUS, E_WS_CONTROL_SIZE, E_WS_FRAGMENTS, E_WS_MASKED, E_WS_OPCODE,
    E_WS_RESERVED_BITS, E_WS_TOO_LONG,
};
use crate::scenario::WsUpgrade;

/// Its --proto value, and its name in the per-query log.
pub const NAME: &str = "websocket";
/// Its word in sentences ("a WebSocket reply").
pub const WORD: &str = "WebSocket";

/// The queries in a few words, for a report's table.
pub fn describe(message: &str, binary: bool) -> String {
    let len = crate::scenario::unescaped(message).len();
    let kind = if binary { "binary" } else { "text" };
    format!("WebSocket, {kind}, {len} bytes")
}

/// A frame of the server's that answers no query: what the engine does
/// with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A fragment before a message's last, or a pong: read, nothing to do.
    Skip,
    /// A ping: its payload (at this offset in the frame) goes back in a pong.
    Ping { payload_at: u8 },
    /// A close, with its code (None: no status, RFC 6455's 1005).
    Close(Option<u16>),
}

/// The error cause (`queries.errors.<cause>`) of a protocol error.
pub fn cause(e: WsError) -> usize {
    match e {
        WsError::MaskedFromServer | WsError::UnmaskedFromClient => E_WS_MASKED,
        WsError::BadOpcode(_) => E_WS_OPCODE,
        WsError::ControlTooLong(_) | WsError::FragmentedControl => E_WS_CONTROL_SIZE,
        WsError::CloseOneByte | WsError::BadCloseCode(_) => E_WS_CLOSE_STATUS,
        WsError::TooLong(_) => E_WS_TOO_LONG,
        WsError::ReservedBits => E_WS_RESERVED_BITS,
        _ => E_WS_FRAGMENTS,
    }
}

/// The frame at the front of a server's bytes: a data frame that ends a
/// message (`Response`, in order), an [`Event`], or not whole yet.
/// `resume` says whether a fragmented message is under way (a frame of a
/// new message then, or a continuation outside one, is `ws_fragments`).
#[inline]
pub fn decode(buf: &[u8], resume: &mut Resume) -> Frame {
    let f = match codec::decode_frame(buf, Role::Client) {
        Ok(Some(f)) => f,
        Ok(None) => return Frame::Incomplete,
        Err(e) => return Frame::Broken(cause(e)),
    };
    let len = f.end();
    let ev = match f.opcode {
        Opcode::Text | Opcode::Binary | Opcode::Continuation => {
            let first = f.opcode != Opcode::Continuation;
            if first == resume.in_ws_message() {
                return Frame::Broken(E_WS_FRAGMENTS);
            }
            resume.set_ws_message(!f.fin);
            if f.fin {
                return Frame::Response {
                    len,
                    key: None,
                    status: Status::Ok,
                    close: false,
                };
            }
            Event::Skip
        }
        Opcode::Pong => Event::Skip,
        // (A control frame's header is at most 2 bytes before its ≤125.)
        Opcode::Ping => Event::Ping {
            payload_at: f.payload_at as u8,
        },
        Opcode::Close => match codec::close_code(f.payload(buf)) {
            Ok(code) => Event::Close(code),
            Err(e) => return Frame::Broken(cause(e)),
        },
    };
    Frame::Ws { len, ev }
}

/// The most bytes one incomplete frame may take: the longest message a
/// reader accepts, and its header.
pub const INPUT_CAP: usize = codec::MAX_WS_MESSAGE as usize + codec::MAX_HEADER;

/// A mask for one client frame, fresh from `rng`.
#[inline]
pub fn mask(rng: &mut Pcg64Mcg) -> [u8; 4] {
    rng.next_u32().to_ne_bytes()
}

/// Queries: one message, sent as one masked frame.
pub struct Ws {
    payload: Vec<u8>,
    opcode: Opcode,
}

impl Ws {
    pub fn new(message: &str, binary: bool) -> Ws {
        Ws {
            payload: crate::scenario::unescaped(message),
            opcode: if binary { Opcode::Binary } else { Opcode::Text },
        }
    }

    /// Appends message `n`, masked with a fresh mask; answers come in
    /// order, so its key is `n`.
    #[inline]
    pub fn encode(&self, n: u64, rng: &mut Pcg64Mcg, out: &mut Vec<u8>) -> u64 {
        codec::encode_frame(out, true, self.opcode, &self.payload, Some(mask(rng)));
        n
    }
}

/// The opening handshake of every connection: its request for each
/// target, made once, with a fresh key put in per connection. A
/// connection's key is drawn from the run's salt and its attempt number,
/// so it is made again to check the answer, and not kept.
pub struct Upgrader {
    /// Per target: the request, and where its key lies.
    requests: Vec<(Vec<u8>, Range<usize>)>,
    salt: u64,
}

impl Upgrader {
    /// `hosts`: each target's `Host` header (as given, or its address).
    pub fn new(u: &WsUpgrade, hosts: &[String]) -> Upgrader {
        let headers: Vec<(&str, &str)> = u
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let placeholder = codec::Key::new([0; 16]);
        let requests = hosts
            .iter()
            .map(|host| {
                let req = codec::Request {
                    host,
                    path: &u.path,
                    subprotocol: u.subprotocol.as_deref(),
                    headers: &headers,
                };
                let mut out = Vec::new();
                let at = codec::encode_request(&req, &placeholder, &mut out);
                (out, at)
            })
            .collect();
        Upgrader {
            requests,
            salt: rand::rng().random(),
        }
    }

    /// Connection `seq`'s key: 16 bytes of its own.
    pub fn key(&self, seq: u64) -> codec::Key {
        let mut rng = Pcg64Mcg::seed_from_u64(self.salt ^ seq.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut raw = [0u8; 16];
        rng.fill_bytes(&mut raw);
        codec::Key::new(raw)
    }

    /// Appends connection `seq`'s request (to target `target`).
    pub fn request(&self, target: usize, seq: u64, out: &mut Vec<u8>) {
        let (req, at) = &self.requests[target % self.requests.len()];
        let start = out.len();
        out.extend_from_slice(req);
        out[start + at.start..start + at.end].copy_from_slice(self.key(seq).as_bytes());
    }

    /// The server's answer to connection `seq`'s request, at the front of
    /// `buf`.
    pub fn response(&self, buf: &[u8], seq: u64) -> Result<Option<codec::Response>, WsError> {
        codec::parse_response(buf, &self.key(seq))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;
    use super::*;

    fn upgrade() -> WsUpgrade {
        WsUpgrade {
            path: "/chat".into(),
            headers: vec![("Origin".into(), "http://x".into())],
            subprotocol: Some("v1".into()),
        }
    }

    #[test]
    fn each_connection_gets_its_own_key_and_its_accept_is_checked() {
        let u = Upgrader::new(&upgrade(), &["h:1".into()]);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        u.request(0, 1, &mut a);
        u.request(0, 2, &mut b);
        assert_ne!(a, b);
        let up = codec::parse_upgrade(&a).unwrap().unwrap();
        assert_eq!(up.key, u.key(1));
        let text = String::from_utf8(a.clone()).unwrap();
        assert!(
            text.starts_with("GET /chat HTTP/1.1\r\nHost: h:1\r\n"),
            "{text}"
        );
        assert!(text.contains("Origin: http://x\r\n") && text.contains("Protocol: v1\r\n"));
        let mut ok = Vec::new();
        codec::encode_accept(&up.key, None, &mut ok);
        assert!(matches!(
            u.response(&ok, 1),
            Ok(Some(codec::Response::Upgraded { .. }))
        ));
        assert_eq!(u.response(&ok, 2), Err(WsError::BadAccept));
        let refused = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n";
        assert!(matches!(
            u.response(refused, 1),
            Ok(Some(codec::Response::Refused { status: 403, .. }))
        ));
    }

    #[test]
    fn messages_are_masked_afresh_and_answers_framed() {
        let c = Codec::Ws(Ws::new("hello", false));
        let mut rng = rng();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        c.encode(0, 0, 0, &mut rng, &mut a);
        c.encode(1, 0, 0, &mut rng, &mut b);
        let fa = codec::decode_frame(&a, Role::Server).unwrap().unwrap();
        let fb = codec::decode_frame(&b, Role::Server).unwrap().unwrap();
        assert_ne!(fa.mask, fb.mask);
        let mut p = fa.payload(&a).to_vec();
        codec::apply_mask(&mut p, fa.mask.unwrap(), 0);
        assert_eq!(p, b"hello");
        // The server's answers: a whole message, fragments, control frames.
        let mut s = Vec::new();
        codec::encode_frame(&mut s, false, Opcode::Text, b"he", None);
        codec::encode_frame(&mut s, true, Opcode::Ping, b"p", None);
        codec::encode_frame(&mut s, true, Opcode::Continuation, b"llo", None);
        codec::encode_frame(&mut s, true, Opcode::Binary, b"x", None);
        codec::encode_close(&mut s, Some(1001), None);
        let (frames, left) = frames_in_reads(&c, &s, s.len());
        assert_eq!(frames.len(), 2, "{frames:?}");
        assert_eq!(left, 0);
        same_frames_at_every_read_size(&c, &s, 2);
        assert_eq!(
            fresh(&c, &s[..4]),
            Frame::Ws {
                len: 4,
                ev: Event::Skip
            }
        );
        assert_eq!(
            fresh(&c, &s[4..]),
            Frame::Ws {
                len: 3,
                ev: Event::Ping { payload_at: 2 }
            }
        );
        let close_at = s.len() - 4;
        assert_eq!(
            fresh(&c, &s[close_at..]),
            Frame::Ws {
                len: 4,
                ev: Event::Close(Some(1001))
            }
        );
    }

    #[test]
    fn protocol_errors_are_named() {
        let c = Codec::Ws(Ws::new("x", true));
        let mut masked = Vec::new();
        codec::encode_frame(&mut masked, true, Opcode::Text, b"hi", Some([1, 2, 3, 4]));
        assert_eq!(fresh(&c, &masked), Frame::Broken(E_WS_MASKED));
        assert_eq!(fresh(&c, &[0x83, 0]), Frame::Broken(E_WS_OPCODE));
        assert_eq!(
            fresh(&c, &[0x89, 126, 0, 200]),
            Frame::Broken(E_WS_CONTROL_SIZE)
        );
        assert_eq!(fresh(&c, &[0x88, 1, 3]), Frame::Broken(E_WS_CLOSE_STATUS));
        assert_eq!(
            fresh(&c, &[0x88, 2, 0x03, 0xed]),
            Frame::Broken(E_WS_CLOSE_STATUS)
        );
        let mut long = vec![0x82, 127];
        long.extend_from_slice(&(u64::MAX / 2).to_be_bytes());
        assert_eq!(fresh(&c, &long), Frame::Broken(E_WS_TOO_LONG));
        assert_eq!(fresh(&c, &[0xc1, 0]), Frame::Broken(E_WS_RESERVED_BITS));
        // A continuation outside a message; a new message inside one.
        assert_eq!(fresh(&c, &[0x80, 0]), Frame::Broken(E_WS_FRAGMENTS));
        let mut r = Resume::default();
        assert!(matches!(c.decode(&[0x01, 0], &mut r), Frame::Ws { .. }));
        assert_eq!(c.decode(&[0x81, 0], &mut r), Frame::Broken(E_WS_FRAGMENTS));
    }

    #[test]
    fn close_codes_are_kept_by_number_and_read_back_for_a_merge() {
        use crate::metrics::{ws_close_map, ws_close_slot, ws_close_slots, WS_CLOSE_SLOTS};
        let mut slots = [0u64; WS_CLOSE_SLOTS];
        for c in [Some(1000), Some(1000), None, Some(3001), Some(4999)] {
            slots[ws_close_slot(c)] += 1;
        }
        let map = ws_close_map(&slots);
        let want: std::collections::BTreeMap<String, u64> =
            [("1000", 2), ("1005", 1), ("3xxx", 1), ("4xxx", 1)]
                .into_iter()
                .map(|(k, n)| (k.to_string(), n))
                .collect();
        assert_eq!(map, want);
        assert_eq!(ws_close_slots(&map), slots);
    }
}
