//! `throng client --proto websocket` (and `--proto push --push-over
//! websocket`) against real servers: throng's own (`--mode websocket`,
//! `--mode push --push-over websocket`), Python's `websockets` library
//! (tests/peers/ws_server.py, which counts its messages; Debian's
//! python3-websockets), websocketd (Debian's websocketd) serving a
//! line-echo program and a program that prints a numbered line every
//! 20 ms; and peers in this file that refuse the upgrade or break the
//! protocol. The client's counts must equal what the servers counted. A
//! missing program skips loudly, and fails when CI is set.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{program, server, Client, Ran};
use serde_json::Value;
use wire::ws::{self, Opcode, Role};

/// websocketd serving `program` on a free port of 127.0.0.1 (it cannot
/// bind port 0: a port is found free by binding it and letting it go,
/// then the server is waited for until it accepts).
struct Websocketd {
    child: Child,
    port: u16,
}

impl Websocketd {
    fn start(bin: &PathBuf, program: &[&str]) -> Websocketd {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(bin)
            .arg(format!("--port={port}"))
            .arg("--address=127.0.0.1")
            .arg("--loglevel=error")
            .args(program)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start websocketd");
        // Owned (killed on drop) before it is waited for.
        let d = Websocketd { child, port };
        let until = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < until, "websocketd never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }
}

impl Drop for Websocketd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn n(v: &Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("no {path} in {v:#}"))
}

/// `throng client TARGET FLAGS...` run as `name` (with no target: the
/// embedded server), to its end.
fn ws_client(name: &str, target: Option<&str>, flags: &str) -> Ran {
    Client::new(name).args(target).flags(flags).run()
}

/// [`ws_client`], which must exit 0: the result as written, and the
/// output.
#[track_caller]
fn ws_ok(name: &str, target: Option<&str>, flags: &str) -> (Value, String) {
    let ran = ws_client(name, target, flags);
    ran.exits(0);
    (ran.json, ran.out)
}

/// The queries' sent and answered, checked: all answered, none in error.
fn answered(v: &Value, out: &str) -> u64 {
    let (sent, answered) = (n(v, "/queries/sent"), n(v, "/queries/answered"));
    assert!(answered > 0, "{out}");
    assert_eq!(sent, answered, "{out}");
    assert_eq!(n(v, "/queries/timed_out"), 0, "{out}");
    answered
}

#[test]
fn echo_against_throngs_server_with_the_handshake_timed_and_closed_properly() {
    let srv = server(&["--mode", "websocket"]);
    let target = srv.addr.to_string();
    for model in ["-r 2000", "--closed-loop --window 4"] {
        let flags = format!("--proto ws -c 8 -T 1s --size 200 {model}");
        let ran = ws_client("ws-own", Some(&target), &flags);
        let out = format!("{model}: {}", ran.out);
        assert_eq!(ran.code, 0, "{out}");
        let v = ran.json;
        answered(&v, &out);
        assert_eq!(n(&v, "/connections/verified"), 8, "{out}");
        assert_eq!(n(&v, "/connections/ws_handshake_us/count"), 8, "{out}");
        // Every connection closed by the handshake at the end: the
        // server's answer to our close 1000.
        assert_eq!(n(&v, "/connections/ws_close_codes/1000"), 8, "{out}");
        assert_eq!(n(&v, "/connections/closed"), 8, "{out}");
    }
    // Held without traffic: the close handshake is waited for too.
    let (v, out) = ws_ok("ws-own-held", Some(&target), "--proto ws -c 8 -T 1s");
    assert_eq!(n(&v, "/connections/verified"), 8, "{out}");
    assert_eq!(n(&v, "/connections/ws_close_codes/1000"), 8, "{out}");
    assert_eq!(n(&v, "/connections/closed"), 8, "{out}");
}

#[test]
fn wss_against_throngs_server() {
    let srv = server(&["--mode", "websocket", "--tls"]);
    let target = srv.addr.to_string();
    let flags = "--proto websocket --transport tls --tls-insecure -c 4 -r 500 -T 1s --ws-binary";
    let (v, out) = ws_ok("wss-own", Some(&target), flags);
    answered(&v, &out);
    assert_eq!(n(&v, "/connections/tls_handshake_us/count"), 4, "{out}");
    assert_eq!(n(&v, "/connections/ws_handshake_us/count"), 4, "{out}");
}

#[test]
fn echo_against_python_websockets_counts_what_it_counted() {
    let Some(py) = common::python_websockets() else {
        return;
    };
    let srv = common::PyServer::start(&py, &["echo"]);
    let target = format!("127.0.0.1:{}", srv.port);
    let ran = Client::new("ws-py")
        .arg(&target)
        .flags("--proto ws -c 5 -r 500 -T 1s -m")
        .arg("hello \\xe2\\x9c\\x93")
        .flags("--ws-header Origin:http://127.0.0.1")
        .run();
    ran.exits(0);
    let (v, out) = (ran.json, ran.out);
    let got = answered(&v, &out);
    let counts = srv.counts();
    assert_eq!(counts["messages"], got, "{out}");
    assert_eq!(counts["connections"], 5, "{out}");
}

#[test]
fn echo_against_websocketd_serving_a_line_program() {
    let Some(bin) = program("websocketd", "websocketd") else {
        return;
    };
    let dir = common::temp_dir("ws-wsd-lines");
    let file = dir.join("lines");
    let script = format!("exec tee -a {}", file.display());
    let srv = Websocketd::start(&bin, &["sh", "-c", &script]);
    let target = format!("127.0.0.1:{}", srv.port);
    let (v, out) = ws_ok(
        "ws-wsd",
        Some(&target),
        "--proto ws -c 4 -r 200 -T 1s --size 32",
    );
    let got = answered(&v, &out);
    drop(srv);
    let lines = std::fs::read_to_string(&file).unwrap().lines().count() as u64;
    assert_eq!(lines, got, "{out}");
}

/// An upgrade request read from `s` (its head).
fn read_head(s: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut b = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let k = s.read(&mut b).unwrap_or(0);
        if k == 0 {
            break;
        }
        buf.extend_from_slice(&b[..k]);
    }
    buf
}

/// [`ws_client`] against a server that refuses every upgrade: the run
/// fails, each of its `conns` connections rejected at the probe. The
/// result as written, and the output.
#[track_caller]
fn all_refused(name: &str, target: &str, flags: &str, conns: u64) -> (Value, String) {
    let Ran {
        code, out, json: v, ..
    } = ws_client(name, Some(target), flags);
    assert_ne!(code, 0, "{out}");
    assert_eq!(n(&v, "/connections/probe_rejected"), conns, "{out}");
    assert_eq!(n(&v, "/connections/failed/rejected"), conns, "{out}");
    (v, out)
}

#[test]
fn a_refused_upgrade_is_counted_by_its_status_and_first_line() {
    // The first connection gets a 503, the second a line that is not
    // HTTP, the rest a 403.
    static SEEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let addr = common::peer(|mut s| {
        read_head(&mut s);
        let answer: &[u8] = match SEEN.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n",
            1 => b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
            _ => b"HTTP/1.1 403 Forbidden here\r\nContent-Length: 0\r\n\r\n",
        };
        let _ = s.write_all(answer);
    });
    let target = addr.to_string();
    let flags = "--proto ws -c 4 -T 1s --connect-rate 100";
    let (v, out) = all_refused("ws-refused", &target, flags, 4);
    let by = &v["connections"]["ws_refused"];
    assert_eq!(
        by,
        &serde_json::json!({"403": 2, "503": 1, "none": 1}),
        "{out}"
    );
    let reply = v["connections"]["probe_reply"].as_str().unwrap();
    assert!(
        reply.contains("HTTP 503") && reply.contains("Busy"),
        "{reply}"
    );
    assert!(out.contains("refused the WebSocket upgrade"), "{out}");
    assert!(
        out.contains("by HTTP status 403: 2, 503: 1, none: 1"),
        "{out}"
    );
    SEEN.store(2, std::sync::atomic::Ordering::SeqCst);
    // The same for push over WebSocket (its books checked as it is read).
    let flags = "--proto push --push-over ws -c 3 -T 1s";
    let (v, out) = all_refused("ws-refused-push", &target, flags, 3);
    assert_eq!(v["connections"]["ws_refused"]["403"], 3, "{out}");
}

/// A server's echo of the client's frames on `s` after the upgrade; the
/// first connection, after `good` answers, sends `bad` instead.
fn echo_then(mut s: TcpStream, good: usize, bad: Option<&[u8]>) {
    let head = read_head(&mut s);
    let up = ws::parse_upgrade(&head).unwrap().unwrap();
    let mut out = Vec::new();
    ws::encode_accept(&up.key, None, &mut out);
    s.write_all(&out).unwrap();
    let mut buf = head[up.head_len..].to_vec();
    let mut answers = 0;
    let mut b = [0u8; 4096];
    loop {
        while let Ok(Some(f)) = ws::decode_frame(&buf, Role::Server) {
            let mut payload = f.payload(&buf).to_vec();
            ws::apply_mask(&mut payload, f.mask.unwrap(), 0);
            out.clear();
            match (bad, f.opcode) {
                (_, Opcode::Close) => {
                    ws::encode_close(&mut out, Some(1000), None);
                    let _ = s.write_all(&out);
                    return;
                }
                (Some(bad), _) if answers == good => {
                    let _ = s.write_all(bad);
                    // (Held open: the client is the one that ends it.)
                    let _ = s.read(&mut b);
                    return;
                }
                _ => ws::encode_frame(&mut out, true, f.opcode, &payload, None),
            }
            answers += 1;
            if s.write_all(&out).is_err() {
                return;
            }
            buf.drain(..f.end());
        }
        match s.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(k) => buf.extend_from_slice(&b[..k]),
        }
    }
}

#[test]
fn protocol_errors_are_named_and_end_only_their_connection() {
    let mut long = vec![0x82, 127];
    long.extend_from_slice(&(1u64 << 40).to_be_bytes());
    let cases: [(&str, Vec<u8>); 4] = [
        ("ws_masked", vec![0x81, 0x82, 1, 2, 3, 4, 5, 6]),
        ("ws_opcode", vec![0x83, 0]),
        ("ws_control_size", vec![0x89, 126, 0, 126]),
        ("ws_too_long", long),
    ];
    for (cause, bad) in cases {
        static BAD: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());
        static SEEN: AtomicUsize = AtomicUsize::new(0);
        *BAD.lock().unwrap() = bad;
        SEEN.store(0, Ordering::SeqCst);
        let addr = common::peer(|s| {
            if SEEN.fetch_add(1, Ordering::SeqCst) == 0 {
                let bad = BAD.lock().unwrap().clone();
                echo_then(s, 3, Some(&bad));
            } else {
                echo_then(s, 0, None);
            }
        });
        let flags = "--proto ws -c 3 -w 1 --closed-loop -T 1s --max-failures 1";
        let ran = ws_client("ws-hostile", Some(&addr.to_string()), flags);
        let out = format!("{cause}: {}", ran.out);
        assert_eq!(ran.code, 0, "{out}");
        let v = ran.json;
        assert_eq!(n(&v, &format!("/queries/errors/{cause}")), 1, "{out}");
        assert_eq!(n(&v, "/connections/failed_established"), 1, "{out}");
        // The other two went on to the end, and closed properly.
        assert_eq!(n(&v, "/connections/ws_close_codes/1000"), 2, "{out}");
        assert!(n(&v, "/queries/answered") > 100, "{out}");
    }
}

/// The push figures of a result, checked clean: none malformed, out of
/// order or twice.
fn push_received(v: &Value, out: &str) -> u64 {
    for k in ["malformed", "out_of_order", "duplicates"] {
        assert_eq!(n(v, &format!("/push/{k}")), 0, "{k}: {out}");
    }
    n(v, "/push/received")
}

#[test]
fn push_over_websocket_from_throngs_server() {
    let srv = server(&["--mode", "push", "--push-over", "websocket"]);
    let target = srv.addr.to_string();
    let flags = "--proto push --push-over websocket -c 10 -T 1s";
    let (v, out) = ws_ok("ws-push-own", Some(&target), flags);
    // 10 connections, one message each 20 ms, for about 1 s.
    let got = push_received(&v, &out);
    assert!((400..=600).contains(&got), "{got}: {out}");
    assert_eq!(n(&v, "/push/lost"), 0, "{out}");
    assert_eq!(n(&v, "/connections/verified"), 10, "{out}");
    assert_eq!(n(&v, "/connections/ws_handshake_us/count"), 10, "{out}");
    assert!(v.pointer("/push/delay_us").is_some(), "{out}");
}

#[test]
fn push_over_websocket_from_python_websockets_counts_what_it_sent() {
    let Some(py) = common::python_websockets() else {
        return;
    };
    let srv = common::PyServer::start(&py, &["push", "0.02"]);
    let target = format!("127.0.0.1:{}", srv.port);
    let flags = "--proto push --push-over ws --push-format line -c 5 -T 1s";
    let (v, out) = ws_ok("ws-push-py", Some(&target), flags);
    let got = push_received(&v, &out);
    let counts = srv.counts();
    assert_eq!(counts["connections"], 5, "{out}");
    // The server counts a message when it is written; the client closes
    // at the end of its run: the messages then on their way (one per
    // connection at most) are the only difference.
    let sent = counts["messages"];
    assert!(
        got <= sent && sent - got <= 5,
        "sent {sent}, received {got}: {out}"
    );
    assert!(got >= 200, "{out}");
}

#[test]
fn push_over_websocket_from_websocketd_numbered_lines() {
    let Some(bin) = program("websocketd", "websocketd") else {
        return;
    };
    let numbers = "i=0; while :; do echo $i; i=$((i+1)); sleep 0.02; done";
    let srv = Websocketd::start(&bin, &["sh", "-c", numbers]);
    let target = format!("127.0.0.1:{}", srv.port);
    // A shell's sleep does not keep a period (what it owes by the period
    // counts as lost): the checks are on what must hold whatever its pace
    // (each number once, in order).
    let checks = "--check none --check push.duplicates==0 --check push.out_of_order==0";
    let flags =
        format!("--proto push --push-over websocket --push-format line -c 4 -T 1s {checks}");
    let (v, out) = ws_ok("ws-push-wsd", Some(&target), &flags);
    // A shell's sleep keeps the period loosely: about 4 x 50 messages.
    let got = push_received(&v, &out);
    assert!(got >= 100, "{got}: {out}");
    assert_eq!(n(&v, "/connections/verified"), 4, "{out}");
}

#[test]
fn pings_are_answered_and_a_servers_close_is_counted_by_code_and_answered() {
    static PONGS: AtomicUsize = AtomicUsize::new(0);
    static CLOSES_ANSWERED: AtomicUsize = AtomicUsize::new(0);
    let addr = common::peer(|mut s| {
        let head = read_head(&mut s);
        let up = ws::parse_upgrade(&head).unwrap().unwrap();
        let mut out = Vec::new();
        ws::encode_accept(&up.key, None, &mut out);
        ws::encode_frame(&mut out, true, Opcode::Ping, b"are you there", None);
        s.write_all(&out).unwrap();
        let mut s2 = s.try_clone().unwrap();
        let mut buf = Vec::new();
        let mut b = [0u8; 1024];
        let mut frame = || loop {
            if let Ok(Some(f)) = ws::decode_frame(&buf, Role::Server) {
                let mut p = f.payload(&buf).to_vec();
                ws::apply_mask(&mut p, f.mask.unwrap(), 0);
                buf.drain(..f.end());
                return (f.opcode, p);
            }
            let k = s.read(&mut b).unwrap();
            assert!(k > 0, "closed before its answer");
            buf.extend_from_slice(&b[..k]);
        };
        let (op, p) = frame();
        if op == Opcode::Pong && p == b"are you there" {
            PONGS.fetch_add(1, Ordering::SeqCst);
        }
        let mut close = Vec::new();
        ws::encode_close(&mut close, Some(4001), None);
        s2.write_all(&close).unwrap();
        let (op, p) = frame();
        if op == Opcode::Close && ws::close_code(&p) == Ok(Some(4001)) {
            CLOSES_ANSWERED.fetch_add(1, Ordering::SeqCst);
        }
    });
    let flags = "--proto ws -c 3 -T 1s --no-reconnect";
    let Ran {
        code, out, json: v, ..
    } = ws_client("ws-ping", Some(&addr.to_string()), flags);
    // (A held run's default check says the server closed them.)
    assert!(out.contains("FAIL  connections.peer_closed==0"), "{out}");
    assert_eq!(code, 1, "{out}");
    assert_eq!(n(&v, "/connections/ws_pings"), 3, "{out}");
    assert_eq!(n(&v, "/connections/ws_close_codes/4xxx"), 3, "{out}");
    assert_eq!(n(&v, "/connections/peer_closed"), 3, "{out}");
    assert_eq!(PONGS.load(Ordering::SeqCst), 3);
    assert_eq!(CLOSES_ANSWERED.load(Ordering::SeqCst), 3);
}

#[test]
fn with_no_target_the_embedded_server_speaks_websocket() {
    let (v, out) = ws_ok("ws-embedded", None, "--proto ws -c 2 -r 50 -T 1s");
    answered(&v, &out);
    assert_eq!(n(&v, "/connections/ws_handshake_us/count"), 2, "{out}");
    let (v, out) = ws_ok(
        "ws-embedded-push",
        None,
        "--proto push --push-over ws -c 2 -T 1s",
    );
    assert!(push_received(&v, &out) >= 80, "{out}");
}
