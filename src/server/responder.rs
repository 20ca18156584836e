//! What the reference server answers, mode by mode, as pure functions from
//! received bytes to reply bytes (built on crates/wire). No socket here: the
//! worker reads into its scratch buffer, calls [`Responder::tcp`], and writes
//! what was appended to its output buffer.

use wire::dns::{Answerer, Outcome, Transport};
use wire::http::{self, Body, ChunkedDecoder};
use wire::line;

use super::websocket::{self, OnMessage, WsNotes, WsSession};
use crate::domain::Mode;

/// Longest pong line kept while waiting for its `\n`.
pub const MAX_LINE: usize = 64 * 1024;

/// What the connection should do after a chunk was processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Keep reading.
    Continue,
    /// Send what was appended, then close (HTTP `Connection: close`, 400).
    CloseAfterReply,
    /// Close now: the input cannot be framed (counted as bad input).
    Abort,
}

/// Per-connection protocol state beyond the partial frame: the rest of an
/// HTTP request body still to be skipped. A few bytes, kept in the
/// connection entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Session {
    body: BodyLeft,
    /// The reply owed once the body has been skipped.
    reply: HttpReply,
    /// --mode websocket, --push-over websocket: the upgrade and the
    /// message under way.
    ws: WsSession,
}

impl Session {
    /// A WebSocket connection past its upgrade.
    pub fn upgraded(&self) -> bool {
        self.ws.upgraded()
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum BodyLeft {
    #[default]
    None,
    Length(u64),
    Chunked(ChunkedDecoder),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum HttpReply {
    #[default]
    KeepAlive,
    KeepAlive10,
    Close,
}

/// The result of processing one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Processed {
    pub action: Action,
    /// Messages answered.
    pub requests: u64,
    /// Malformed messages (answered with an error or not).
    pub bad: u64,
    /// WebSocket: the upgrade, pings, the close, a protocol error.
    pub ws: WsNotes,
}

impl Processed {
    pub(super) fn new(action: Action, requests: u64, bad: u64) -> Self {
        Processed {
            action,
            requests,
            bad,
            ws: WsNotes::default(),
        }
    }
}

/// One prebuilt HTTP reply, with where its head ends (for HEAD requests).
#[derive(Debug, Clone)]
struct Canned {
    bytes: Vec<u8>,
    head_len: usize,
}

impl Canned {
    fn new(status: &str, connection: Option<&str>, body_len: usize) -> Canned {
        let mut head = format!(
            "HTTP/1.1 {status}\r\nServer: throng\r\nContent-Type: text/plain\r\nContent-Length: {body_len}\r\n"
        );
        if let Some(c) = connection {
            head.push_str(&format!("Connection: {c}\r\n"));
        }
        head.push_str("\r\n");
        let head_len = head.len();
        let mut bytes = head.into_bytes();
        bytes.resize(head_len + body_len, b'A');
        Canned { bytes, head_len }
    }

    fn append(&self, head_only: bool, out: &mut Vec<u8>) {
        let end = if head_only {
            self.head_len
        } else {
            self.bytes.len()
        };
        out.extend_from_slice(&self.bytes[..end]);
    }
}

/// Every reply of one server, built once at start.
#[derive(Debug, Clone)]
pub struct Responder {
    mode: Mode,
    answerer: Answerer,
    ok_keep_alive: Canned,
    ok_keep_alive_10: Canned,
    ok_close: Canned,
    bad_request: Canned,
    reply: Vec<u8>,
    on_prefix: Vec<u8>,
    /// --mode push: its TCP clients speak WebSocket (--push-over websocket).
    push_ws: bool,
}

/// Runs `frames` over the bytes of a connection: the partial frame kept from
/// earlier reads followed by the new chunk. Whatever `frames` leaves
/// unconsumed is kept (in `pending`) for the next read; `pending` is freed
/// once it empties, so an idle connection holds no buffer.
fn framed(
    pending: &mut Vec<u8>,
    chunk: &[u8],
    frames: impl FnOnce(&[u8]) -> (usize, Processed),
) -> Processed {
    if pending.is_empty() {
        let (used, p) = frames(chunk);
        if p.action == Action::Continue && used < chunk.len() {
            pending.extend_from_slice(&chunk[used..]);
        }
        p
    } else {
        pending.extend_from_slice(chunk);
        let (used, p) = frames(pending);
        if p.action == Action::Continue && used < pending.len() {
            pending.drain(..used);
        } else {
            *pending = Vec::new();
        }
        p
    }
}

impl Responder {
    pub fn new(
        mode: Mode,
        answerer: Answerer,
        body_size: usize,
        reply: Vec<u8>,
        on_prefix: Vec<u8>,
    ) -> Responder {
        Responder {
            mode,
            answerer,
            ok_keep_alive: Canned::new("200 OK", None, body_size),
            ok_keep_alive_10: Canned::new("200 OK", Some("keep-alive"), body_size),
            ok_close: Canned::new("200 OK", Some("close"), body_size),
            bad_request: Canned::new("400 Bad Request", Some("close"), 0),
            reply,
            on_prefix,
            push_ws: false,
        }
    }

    /// --push-over websocket: push clients upgrade first, and their
    /// messages are read as WebSocket frames.
    pub fn with_websocket_push(mut self, on: bool) -> Responder {
        self.push_ws = on;
        self
    }

    /// Processes one chunk read from a TCP connection, appending replies to
    /// `out`. `pending` holds the partial frame of earlier chunks.
    pub fn tcp(
        &self,
        session: &mut Session,
        pending: &mut Vec<u8>,
        chunk: &[u8],
        out: &mut Vec<u8>,
    ) -> Processed {
        match self.mode {
            Mode::Echo => {
                out.extend_from_slice(chunk);
                Processed::new(Action::Continue, 1, 0)
            }
            Mode::Discard => Processed::new(Action::Continue, 1, 0),
            Mode::Websocket => framed(pending, chunk, |input| {
                ws_frames(session, input, out, OnMessage::Echo)
            }),
            Mode::Push if self.push_ws => framed(pending, chunk, |input| {
                ws_frames(session, input, out, OnMessage::Drop)
            }),
            // What a push client sends is read and dropped; its messages
            // go out on the worker's timer ([`super::push`]).
            Mode::Push => Processed::new(Action::Continue, 0, 0),
            Mode::Fixed => {
                let hit = chunk.starts_with(&self.on_prefix);
                if hit {
                    out.extend_from_slice(&self.reply);
                }
                Processed::new(Action::Continue, hit as u64, 0)
            }
            Mode::Pong => framed(pending, chunk, |input| pong_lines(input, out)),
            Mode::Dns => framed(pending, chunk, |input| self.dns_frames(input, out)),
            Mode::Http => framed(pending, chunk, |input| self.http(session, input, out)),
        }
    }

    fn dns_frames(&self, input: &[u8], out: &mut Vec<u8>) -> (usize, Processed) {
        let mut used = 0;
        let mut answered = 0;
        let mut bad = 0;
        while let Some(frame) = wire::dns::tcp_frame(&input[used..]) {
            let msg = frame.message(&input[used..]);
            let start = out.len();
            out.extend_from_slice(&[0, 0]);
            match self.answerer.respond(msg, Transport::Tcp, out) {
                Ok(outcome) => {
                    let len = (out.len() - start - 2) as u16;
                    out[start..start + 2].copy_from_slice(&len.to_be_bytes());
                    answered += 1;
                    bad += matches!(outcome, Outcome::Rejected(_)) as u64;
                }
                Err(_) => {
                    // Not even a header: this stream cannot be trusted to be
                    // DNS; close just this connection.
                    out.truncate(start);
                    return (used, Processed::new(Action::Abort, answered, bad + 1));
                }
            }
            used += frame.frame_len;
        }
        (used, Processed::new(Action::Continue, answered, bad))
    }

    fn http(&self, s: &mut Session, input: &[u8], out: &mut Vec<u8>) -> (usize, Processed) {
        let mut used = 0;
        let mut answered = 0;
        loop {
            // Finish the body of the current request, then reply.
            let body_done = match &mut s.body {
                BodyLeft::None => false,
                BodyLeft::Length(left) => {
                    let take = (*left).min((input.len() - used) as u64);
                    *left -= take;
                    used += take as usize;
                    *left == 0
                }
                BodyLeft::Chunked(dec) => match dec.feed(&input[used..]) {
                    Ok((n, done)) => {
                        used += n;
                        done
                    }
                    Err(_) => {
                        self.bad_request.append(false, out);
                        return (used, Processed::new(Action::CloseAfterReply, answered, 1));
                    }
                },
            };
            if s.body != BodyLeft::None {
                if !body_done {
                    return (used, Processed::new(Action::Continue, answered, 0));
                }
                s.body = BodyLeft::None;
                answered += 1;
                if self.http_reply(s.reply, false, out) {
                    return (used, Processed::new(Action::CloseAfterReply, answered, 0));
                }
            }
            let head = match http::parse_request_head(&input[used..]) {
                Ok(Some(head)) => head,
                Ok(None) => return (used, Processed::new(Action::Continue, answered, 0)),
                Err(_) => {
                    self.bad_request.append(false, out);
                    return (used, Processed::new(Action::CloseAfterReply, answered, 1));
                }
            };
            used += head.head_len;
            let reply = if head.close {
                HttpReply::Close
            } else if head.keep_alive_1_0 {
                HttpReply::KeepAlive10
            } else {
                HttpReply::KeepAlive
            };
            match head.body {
                Body::Length(0) | Body::UntilClose => {
                    answered += 1;
                    if self.http_reply(reply, head.head_method, out) {
                        return (used, Processed::new(Action::CloseAfterReply, answered, 0));
                    }
                }
                Body::Length(n) => {
                    s.body = BodyLeft::Length(n);
                    s.reply = reply;
                }
                Body::Chunked => {
                    s.body = BodyLeft::Chunked(ChunkedDecoder::default());
                    s.reply = reply;
                }
            }
        }
    }

    /// Appends a 200 reply; true when the connection closes after it.
    fn http_reply(&self, reply: HttpReply, head_only: bool, out: &mut Vec<u8>) -> bool {
        let canned = match reply {
            HttpReply::KeepAlive => &self.ok_keep_alive,
            HttpReply::KeepAlive10 => &self.ok_keep_alive_10,
            HttpReply::Close => &self.ok_close,
        };
        canned.append(head_only, out);
        reply == HttpReply::Close
    }

    /// Answers one UDP datagram into `out` (left empty when there is no
    /// reply). Returns (answered, bad).
    pub fn udp(&self, datagram: &[u8], out: &mut Vec<u8>) -> (u64, u64) {
        match self.mode {
            Mode::Echo => {
                out.extend_from_slice(datagram);
                (1, 0)
            }
            Mode::Pong => {
                let mut n = 0;
                for l in datagram.split_inclusive(|&b| b == b'\n') {
                    line::pong(l, out);
                    n += 1;
                }
                (n, 0)
            }
            Mode::Dns => match self.answerer.respond(datagram, Transport::Udp, out) {
                Ok(Outcome::Answered) => (1, 0),
                Ok(Outcome::Rejected(_)) => (1, 1),
                Ok(Outcome::Ignored) | Err(_) => (0, 1),
            },
            Mode::Discard => (1, 0),
            // Refused at start-up (a reply larger than the request would make
            // the server a reflector).
            Mode::Http | Mode::Fixed => (0, 0),
            // A datagram subscribes (the worker's, before the responder).
            Mode::Push => (0, 0),
            // Refused at start-up (WebSocket runs over TCP).
            Mode::Websocket => (0, 0),
        }
    }
}

/// A WebSocket connection's bytes ([`websocket::serve`]), its notes in
/// the result.
fn ws_frames(
    s: &mut Session,
    input: &[u8],
    out: &mut Vec<u8>,
    on: OnMessage,
) -> (usize, Processed) {
    let (used, mut p, notes) = websocket::serve(&mut s.ws, input, out, on);
    p.ws = notes;
    (used, p)
}

/// Answers every complete line of `input`.
fn pong_lines(input: &[u8], out: &mut Vec<u8>) -> (usize, Processed) {
    let mut used = 0;
    let mut answered = 0;
    let mut bad = 0;
    while let Some(n) = line::find_line(&input[used..]) {
        if !line::pong(&input[used..used + n], out) {
            bad += 1;
        }
        answered += 1;
        used += n;
    }
    if input.len() - used > MAX_LINE {
        out.extend_from_slice(line::ERROR_REPLY);
        return (
            input.len(),
            Processed::new(Action::CloseAfterReply, answered, bad + 1),
        );
    }
    (used, Processed::new(Action::Continue, answered, bad))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn responder(mode: Mode) -> Responder {
        Responder::new(
            mode,
            Answerer {
                a: [192, 0, 2, 1],
                ttl: 60,
            },
            2,
            b"OK\n".to_vec(),
            b"GO".to_vec(),
        )
    }

    /// Feeds `stream` in pieces cut at `cuts`, as reads would deliver it.
    fn feed(r: &Responder, stream: &[u8], cuts: &[usize]) -> (Vec<u8>, Vec<Processed>) {
        let mut session = Session::default();
        let mut pending = Vec::new();
        let mut out = Vec::new();
        let mut results = Vec::new();
        let mut at = 0;
        for &cut in cuts.iter().chain([&stream.len()]) {
            let p = r.tcp(&mut session, &mut pending, &stream[at..cut], &mut out);
            results.push(p);
            at = cut;
            if p.action != Action::Continue {
                break;
            }
        }
        (out, results)
    }

    #[test]
    fn http_pipelined_split_everywhere() {
        let r = responder(Mode::Http);
        let stream = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nPOST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /c HTTP/1.1\r\nConnection: close\r\n\r\n";
        let (whole, _) = feed(&r, stream, &[]);
        let text = String::from_utf8(whole.clone()).unwrap();
        assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 3);
        assert!(text.ends_with("Connection: close\r\n\r\nAA"));
        for cut in 0..stream.len() {
            let (out, results) = feed(&r, stream, &[cut]);
            assert_eq!(out, whole, "cut at {cut}");
            assert_eq!(results.last().unwrap().action, Action::CloseAfterReply);
        }
    }

    #[test]
    fn http_chunked_body() {
        let r = responder(Mode::Http);
        let stream = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n";
        for cut in 0..stream.len() {
            let (out, _) = feed(&r, stream, &[cut]);
            let text = String::from_utf8(out).unwrap();
            assert_eq!(text.matches("200 OK").count(), 2, "cut at {cut}");
        }
    }

    #[test]
    fn http_malformed_gets_400_and_close() {
        let r = responder(Mode::Http);
        let (out, results) = feed(&r, b"BLAH\r\n\r\n", &[]);
        assert!(out.starts_with(b"HTTP/1.1 400 Bad Request"));
        assert_eq!(results[0].action, Action::CloseAfterReply);
        assert_eq!(results[0].bad, 1);
    }

    #[test]
    fn http_head_has_no_body() {
        let r = responder(Mode::Http);
        let (out, _) = feed(&r, b"HEAD / HTTP/1.1\r\n\r\n", &[]);
        assert!(out.ends_with(b"Content-Length: 2\r\n\r\n"));
    }

    #[test]
    fn dns_pipelined_split_everywhere() {
        let r = responder(Mode::Dns);
        let mut stream = Vec::new();
        for id in 0..3 {
            wire::dns::build_tcp_query(id, "example.com", 1, &mut stream).unwrap();
        }
        let (whole, _) = feed(&r, &stream, &[]);
        for cut in 0..stream.len() {
            let (out, res) = feed(&r, &stream, &[cut]);
            assert_eq!(out, whole, "cut at {cut}");
            assert_eq!(res.iter().map(|p| p.requests).sum::<u64>(), 3);
        }
    }

    #[test]
    fn dns_unparseable_frame_aborts() {
        let r = responder(Mode::Dns);
        let (_, res) = feed(&r, &[0, 3, 1, 2, 3], &[]);
        assert_eq!(res[0].action, Action::Abort);
    }

    #[test]
    fn pong_lines_and_overlong_line() {
        let r = responder(Mode::Pong);
        let (out, _) = feed(&r, b"ping 1\nxx\nping", &[3]);
        assert_eq!(out, b"pong 1\nerror\n");
        let long = vec![b'p'; MAX_LINE + 2];
        let (out, res) = feed(&r, &long, &[MAX_LINE / 2]);
        assert_eq!(out, line::ERROR_REPLY);
        assert_eq!(res.last().unwrap().action, Action::CloseAfterReply);
    }

    #[test]
    fn pending_is_freed_when_empty() {
        let r = responder(Mode::Pong);
        let mut session = Session::default();
        let mut pending = Vec::new();
        let mut out = Vec::new();
        r.tcp(&mut session, &mut pending, b"ping 1", &mut out);
        assert_eq!(pending, b"ping 1");
        r.tcp(&mut session, &mut pending, b"\n", &mut out);
        assert!(pending.is_empty());
        assert_eq!(pending.capacity(), 0);
    }

    #[test]
    fn fixed_replies_on_prefix() {
        let r = responder(Mode::Fixed);
        let mut out = Vec::new();
        let mut s = Session::default();
        let mut p = Vec::new();
        r.tcp(&mut s, &mut p, b"GO now", &mut out);
        r.tcp(&mut s, &mut p, b"no", &mut out);
        assert_eq!(out, b"OK\n");
    }

    #[test]
    fn udp_pong_and_dns() {
        let r = responder(Mode::Pong);
        let mut out = Vec::new();
        assert_eq!(r.udp(b"ping 1\nping 2", &mut out), (2, 0));
        assert_eq!(out, b"pong 1\npong 2");
        let r = responder(Mode::Dns);
        let mut q = Vec::new();
        wire::dns::build_query(9, "example.com", 1, &mut q).unwrap();
        out.clear();
        assert_eq!(r.udp(&q, &mut out), (1, 0));
        assert_eq!(wire::dns::response_info(&out).unwrap().id, 9);
    }
}
