//! --mode websocket and --push-over websocket: what the server answers on a
//! WebSocket connection, as a pure function from received bytes to reply
//! bytes (on `wire::ws`), like the other modes in [`super::responder`].
//!
//! The upgrade request is answered with the `101` (or a 400 or 426 and a
//! close). Then each data frame goes back as it came, as a server's frame
//! of the same type and place in its message (so a fragmented message is
//! echoed fragment by fragment, and nothing is kept between frames but the
//! partial frame the worker holds anyway); a ping gets its pong; a close
//! gets the close with the same code, then the connection ends. A client's
//! protocol error (an unmasked frame, a reserved opcode or RSV bit, a
//! control frame over 125 bytes or fragmented, a close with a bad code, a
//! message over `MAX_WS_MESSAGE`) is answered with a close (1002, or 1009
//! for the size) and ends that connection only, counted by its name.

use wire::ws::{self, Fragments, Opcode, Piece, Role, WsError};

use super::responder::{Action, Processed};

/// A WebSocket connection's state: a few bytes in the connection entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WsSession {
    /// The `101` was sent: frames follow.
    open: bool,
    /// The data message under way.
    frags: Fragments,
}

impl WsSession {
    pub fn upgraded(&self) -> bool {
        self.open
    }
}

/// What happened on a connection besides its messages, for the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WsNotes {
    /// The upgrade was accepted in this chunk.
    pub upgraded: bool,
    pub pings: u64,
    /// The client closed (its close frame answered).
    pub closed: bool,
    /// Why the connection ends: its upgrade refused, or a protocol error.
    pub error: Option<WsError>,
}

/// What a data message does on this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMessage {
    /// --mode websocket: sent back as the same type.
    Echo,
    /// --push-over websocket: read and dropped.
    Drop,
}

/// Serves the bytes of a WebSocket connection: returns how many it used,
/// what to do, and the notes for the counters. Replies go to `out`.
pub fn serve(
    s: &mut WsSession,
    input: &[u8],
    out: &mut Vec<u8>,
    on: OnMessage,
) -> (usize, Processed, WsNotes) {
    let mut notes = WsNotes::default();
    let mut used = 0;
    if !s.open {
        match ws::parse_upgrade(input) {
            Ok(None) => return (0, Processed::new(Action::Continue, 0, 0), notes),
            Ok(Some(up)) => {
                ws::encode_accept(&up.key, None, out);
                s.open = true;
                notes.upgraded = true;
                used = up.head_len;
            }
            Err(e) => {
                out.extend_from_slice(if e == WsError::WrongVersion {
                    ws::UPGRADE_REQUIRED
                } else {
                    ws::BAD_REQUEST
                });
                notes.error = Some(e);
                return (
                    input.len(),
                    Processed::new(Action::CloseAfterReply, 0, 1),
                    notes,
                );
            }
        }
    }
    let mut messages = 0;
    loop {
        let f = match ws::decode_frame(&input[used..], Role::Server) {
            Ok(Some(f)) => f,
            Ok(None) => return (used, Processed::new(Action::Continue, messages, 0), notes),
            Err(e) => return fail(input.len(), e, out, messages, notes),
        };
        let frame = &input[used..used + f.end()];
        let mask = f.mask.unwrap_or_default();
        used += f.end();
        match f.opcode {
            Opcode::Ping => {
                notes.pings += 1;
                reply(out, true, Opcode::Pong, f.payload(frame), mask);
            }
            Opcode::Pong => {}
            Opcode::Close => {
                let mut p = [0u8; ws::MAX_CONTROL];
                let p = &mut p[..f.payload_len];
                p.copy_from_slice(f.payload(frame));
                ws::apply_mask(p, mask, 0);
                return match ws::close_code(p) {
                    Ok(code) => {
                        ws::encode_close(out, code, None);
                        notes.closed = true;
                        (
                            input.len(),
                            Processed::new(Action::CloseAfterReply, messages, 0),
                            notes,
                        )
                    }
                    Err(e) => fail(input.len(), e, out, messages, notes),
                };
            }
            Opcode::Text | Opcode::Binary | Opcode::Continuation => {
                let piece = match s.frags.data(&f) {
                    Ok(p) => p,
                    Err(e) => return fail(input.len(), e, out, messages, notes),
                };
                if matches!(piece, Piece::Whole(_) | Piece::Last(_)) {
                    messages += 1;
                }
                if on == OnMessage::Echo {
                    reply(out, f.fin, f.opcode, f.payload(frame), mask);
                }
            }
        }
    }
}

/// Appends a server frame carrying a client's masked payload, unmasked.
fn reply(out: &mut Vec<u8>, fin: bool, opcode: Opcode, masked: &[u8], mask: [u8; 4]) {
    ws::encode_header(out, fin, opcode, masked.len(), None);
    let at = out.len();
    out.extend_from_slice(masked);
    ws::apply_mask(&mut out[at..], mask, 0);
}

/// A protocol error: the close that names it, then the end.
fn fail(
    used: usize,
    e: WsError,
    out: &mut Vec<u8>,
    messages: u64,
    mut notes: WsNotes,
) -> (usize, Processed, WsNotes) {
    ws::encode_close(out, Some(e.close_code()), None);
    notes.error = Some(e);
    (
        used,
        Processed::new(Action::CloseAfterReply, messages, 1),
        notes,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MASK: [u8; 4] = [1, 2, 3, 4];

    fn upgrade() -> Vec<u8> {
        let mut out = Vec::new();
        ws::encode_request(
            &ws::Request {
                host: "h",
                path: "/",
                subprotocol: None,
                headers: &[],
            },
            &ws::Key::new([3; 16]),
            &mut out,
        );
        out
    }

    /// Feeds `stream` cut at `cut`, keeping what is unused as the worker
    /// does; returns the output and the last result.
    fn feed(stream: &[u8], cut: usize, on: OnMessage) -> (Vec<u8>, Processed, WsNotes) {
        let mut s = WsSession::default();
        let mut pending = Vec::new();
        let mut out = Vec::new();
        let mut last = Processed::new(Action::Continue, 0, 0);
        let mut notes = WsNotes::default();
        let mut total = 0;
        for part in [&stream[..cut], &stream[cut..]] {
            pending.extend_from_slice(part);
            let (used, p, n) = serve(&mut s, &pending, &mut out, on);
            pending.drain(..used);
            total += p.requests;
            last = Processed {
                requests: total,
                ..p
            };
            notes.upgraded |= n.upgraded;
            notes.pings += n.pings;
            notes.closed |= n.closed;
            notes.error = notes.error.or(n.error);
            if p.action != Action::Continue {
                break;
            }
        }
        (out, last, notes)
    }

    /// The frames a client reads from `out` after the 101: (fin, opcode,
    /// payload).
    fn frames(out: &[u8]) -> Vec<(bool, Opcode, Vec<u8>)> {
        let head = match ws::parse_response(out, &ws::Key::new([3; 16]))
            .unwrap()
            .unwrap()
        {
            ws::Response::Upgraded { head_len, .. } => head_len,
            r => panic!("{r:?}"),
        };
        let mut at = head;
        let mut got = Vec::new();
        while let Some(f) = ws::decode_frame(&out[at..], Role::Client).unwrap() {
            got.push((f.fin, f.opcode, f.payload(&out[at..]).to_vec()));
            at += f.end();
        }
        assert_eq!(at, out.len());
        got
    }

    #[test]
    fn echoes_every_frame_as_it_came_at_every_split() {
        let mut stream = upgrade();
        ws::encode_frame(&mut stream, true, Opcode::Text, b"hello", Some(MASK));
        ws::encode_frame(&mut stream, false, Opcode::Binary, &[1, 2], Some(MASK));
        ws::encode_frame(&mut stream, true, Opcode::Ping, b"p", Some([9; 4]));
        ws::encode_frame(&mut stream, true, Opcode::Continuation, &[3], Some(MASK));
        ws::encode_close(&mut stream, Some(4000), Some(MASK));
        let want = vec![
            (true, Opcode::Text, b"hello".to_vec()),
            (false, Opcode::Binary, vec![1, 2]),
            (true, Opcode::Pong, b"p".to_vec()),
            (true, Opcode::Continuation, vec![3]),
            (true, Opcode::Close, 4000u16.to_be_bytes().to_vec()),
        ];
        for cut in 0..=stream.len() {
            let (out, p, n) = feed(&stream, cut, OnMessage::Echo);
            assert_eq!(frames(&out), want, "cut at {cut}");
            assert_eq!(
                (p.action, p.requests, p.bad),
                (Action::CloseAfterReply, 2, 0)
            );
            assert!(n.closed && n.error.is_none());
        }
    }

    #[test]
    fn push_connections_drop_messages_and_answer_pings() {
        let mut stream = upgrade();
        ws::encode_frame(&mut stream, true, Opcode::Text, b"hi", Some(MASK));
        ws::encode_frame(&mut stream, true, Opcode::Ping, b"", Some(MASK));
        let (out, p, n) = feed(&stream, stream.len(), OnMessage::Drop);
        assert_eq!(frames(&out), vec![(true, Opcode::Pong, Vec::new())]);
        assert_eq!((p.action, n.pings), (Action::Continue, 1));
    }

    #[test]
    fn protocol_errors_close_with_their_code() {
        let cases: [(&[u8], WsError, u16); 5] = [
            (&[0x81, 0x02, b'h', b'i'], WsError::UnmaskedFromClient, 1002),
            (&[0x83, 0x80, 0, 0, 0, 0], WsError::BadOpcode(3), 1002),
            (&[0x88, 0x81, 0, 0, 0, 0, 7], WsError::CloseOneByte, 1002),
            (
                &[0x82, 0xff, 0, 0, 0, 1, 0, 0, 0, 0],
                WsError::TooLong(1 << 32),
                1009,
            ),
            (
                &[0x00, 0x80, 0, 0, 0, 0],
                WsError::UnexpectedContinuation,
                1002,
            ),
        ];
        for (frame, err, code) in cases {
            let mut stream = upgrade();
            stream.extend_from_slice(frame);
            let (out, p, n) = feed(&stream, stream.len(), OnMessage::Echo);
            assert_eq!(n.error, Some(err));
            assert_eq!((p.action, p.bad), (Action::CloseAfterReply, 1));
            assert_eq!(
                frames(&out),
                vec![(true, Opcode::Close, code.to_be_bytes().to_vec())]
            );
        }
    }

    #[test]
    fn a_bad_upgrade_gets_400_or_426() {
        let (out, p, n) = feed(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n", 0, OnMessage::Echo);
        assert_eq!(out, ws::BAD_REQUEST);
        assert_eq!(
            (p.action, n.error),
            (Action::CloseAfterReply, Some(WsError::NotUpgrade))
        );
        let v8 = String::from_utf8(upgrade()).unwrap().replace(": 13", ": 8");
        let (out, _, n) = feed(v8.as_bytes(), 0, OnMessage::Echo);
        assert_eq!(out, ws::UPGRADE_REQUIRED);
        assert_eq!(n.error, Some(WsError::WrongVersion));
    }
}
