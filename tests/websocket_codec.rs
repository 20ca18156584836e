//! The client half of `wire::ws` (the handshake request, the `101` and its
//! accept key, masked frames out, a server's frames in, reassembly, close
//! codes, push numbers) against an independent server: Python's
//! `websockets` library (tests/peers/ws_server.py; Debian's
//! python3-websockets), over a plain socket. Without it the tests skip
//! loudly, and fail when CI is set (.ci/run installs it).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use std::time::Duration;

use wire::ws::{self, Key, Opcode, Reassembler, Response, Role};

/// A client connection: the socket and the bytes read but not used yet.
struct Client {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    /// Sends the handshake (its version line replaced by `version`) and
    /// reads the answer.
    /// With a refusal, its status line too.
    fn handshake(port: u16, key: &Key, version: &str) -> (Client, Response, String) {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let host = format!("127.0.0.1:{port}");
        let mut req = Vec::new();
        ws::encode_request(
            &ws::Request {
                host: &host,
                path: "/",
                subprotocol: None,
                headers: &[("Origin", "http://127.0.0.1")],
            },
            key,
            &mut req,
        );
        let req = String::from_utf8(req)
            .unwrap()
            .replace("Version: 13", &format!("Version: {version}"));
        let mut c = Client { s, buf: Vec::new() };
        c.s.write_all(req.as_bytes()).unwrap();
        loop {
            if let Some(r) = ws::parse_response(&c.buf, key).unwrap() {
                let (used, line) = match &r {
                    Response::Upgraded { head_len, .. } => (*head_len, String::new()),
                    Response::Refused { head_len, line, .. } => (
                        *head_len,
                        String::from_utf8_lossy(&c.buf[line.clone()]).into_owned(),
                    ),
                };
                c.buf.drain(..used);
                return (c, r, line);
            }
            c.fill();
        }
    }

    fn fill(&mut self) {
        let mut chunk = [0u8; 4096];
        let n = self.s.read(&mut chunk).unwrap();
        assert!(n > 0, "the server closed");
        self.buf.extend_from_slice(&chunk[..n]);
    }

    /// The next server frame: (fin, opcode, payload).
    fn frame(&mut self) -> (bool, Opcode, Vec<u8>) {
        loop {
            if let Some(f) = ws::decode_frame(&self.buf, Role::Client).unwrap() {
                let got = (f.fin, f.opcode, f.payload(&self.buf).to_vec());
                self.buf.drain(..f.end());
                return got;
            }
            self.fill();
        }
    }

    /// The next whole message (control frames returned as they come).
    fn message(&mut self, r: &mut Reassembler) -> (Opcode, Vec<u8>) {
        loop {
            let (fin, op, payload) = self.frame();
            if op.is_control() {
                return (op, payload);
            }
            let f = ws::Frame {
                fin,
                opcode: op,
                mask: None,
                payload_at: 0,
                payload_len: payload.len(),
            };
            if let Some((op, m)) = r.push(&f, &payload).unwrap() {
                return (op, m.to_vec());
            }
        }
    }

    fn send(&mut self, fin: bool, op: Opcode, payload: &[u8], mask: [u8; 4]) {
        let mut out = Vec::new();
        ws::encode_frame(&mut out, fin, op, payload, Some(mask));
        self.s.write_all(&out).unwrap();
    }
}

#[test]
fn the_client_half_talks_to_python_websockets() {
    let Some(py) = common::python_websockets() else {
        return;
    };
    let srv = common::PyServer::start(&py, &["echo"]);
    let key = Key::new(*b"throng-ws-test-1");
    let (mut c, r, _) = Client::handshake(srv.port, &key, "13");
    assert!(
        matches!(
            r,
            Response::Upgraded {
                subprotocol: None,
                ..
            }
        ),
        "{r:?}"
    );
    let mut r = Reassembler::default();
    c.send(true, Opcode::Text, b"hello", [1, 2, 3, 4]);
    assert_eq!(c.message(&mut r), (Opcode::Text, b"hello".to_vec()));
    let big: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    c.send(true, Opcode::Binary, &big, [0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(c.message(&mut r), (Opcode::Binary, big));
    c.send(false, Opcode::Text, b"frag", [9, 9, 9, 9]);
    c.send(true, Opcode::Ping, b"ping!", [7, 7, 7, 7]);
    c.send(true, Opcode::Continuation, b"ments", [5, 6, 7, 8]);
    assert_eq!(c.message(&mut r), (Opcode::Pong, b"ping!".to_vec()));
    assert_eq!(c.message(&mut r), (Opcode::Text, b"fragments".to_vec()));
    let mut close = Vec::new();
    ws::encode_close(&mut close, Some(4321), Some([1, 1, 2, 2]));
    c.s.write_all(&close).unwrap();
    let (_, op, payload) = c.frame();
    assert_eq!(
        (op, ws::close_code(&payload)),
        (Opcode::Close, Ok(Some(4321)))
    );
    // The server waits for the client to close the TCP connection.
    drop(c);
    let counts = srv.counts_text();
    assert!(counts.contains("messages 3"), "{counts}");
    assert!(counts.contains("connections 1"), "{counts}");
}

#[test]
fn a_refused_upgrade_is_named_by_status_and_first_line() {
    let Some(py) = common::python_websockets() else {
        return;
    };
    let srv = common::PyServer::start(&py, &["echo"]);
    let key = Key::new([42; 16]);
    let (c, r, line) = Client::handshake(srv.port, &key, "8");
    drop(c);
    // websockets answers another version with 400 (RFC 6455 suggests
    // 426): a refusal either way, named by its status line.
    match r {
        Response::Refused { status, .. } => {
            assert!((400..500).contains(&status), "{status}");
            assert!(line.starts_with(&format!("HTTP/1.1 {status} ")), "{line}");
        }
        r => panic!("{r:?}"),
    }
}

#[test]
fn pushed_messages_carry_their_number_first() {
    let Some(py) = common::python_websockets() else {
        return;
    };
    let srv = common::PyServer::start(&py, &["push", "0.01"]);
    let key = Key::new([9; 16]);
    let (mut c, r, _) = Client::handshake(srv.port, &key, "13");
    assert!(matches!(r, Response::Upgraded { .. }), "{r:?}");
    let mut r = Reassembler::default();
    let seqs: Vec<u64> = (0..20)
        .map(|_| {
            let (op, m) = c.message(&mut r);
            assert_eq!(op, Opcode::Text);
            wire::push::leading_sequence(&m).unwrap()
        })
        .collect();
    assert_eq!(seqs, (0..20).collect::<Vec<u64>>());
    let mut close = Vec::new();
    ws::encode_close(&mut close, Some(1000), Some([3; 4]));
    c.s.write_all(&close).unwrap();
    let (op, _) = c.message(&mut r);
    assert_eq!(op, Opcode::Close);
    drop(c);
    let counts = srv.counts_text();
    assert!(counts.contains("connections 1"), "{counts}");
}
