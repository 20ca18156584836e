//! `throng client` against hostile servers written here: garbage for every
//! protocol, frames that never end, answers to queries never sent, answers
//! twice or out of order, a close or a reset in the middle of a response.
//! Each test asserts what was counted and that the run ended on time: a
//! load tool is pointed at servers that misbehave.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{all_answered, ends, lost_with_its_connection, peer, temp_dir};
use common::{Client, Parts, Ran, RunResult, BIN};
use serde_json::Value;

/// The client's input cap (`engine::proto::INPUT_CAP`, README).
const CAP: u64 = 1024 * 1024;
/// One read of the client's scratch buffer: framed before the cap is
/// checked.
const READ: u64 = 64 * 1024;

/// Two connections, a query every 100 ms on each for a second, each
/// timed out after 300 ms: what most runs here ask of a hostile peer.
const PACED: &str = "-c 2 --interval 100ms -T 1s --timeout 300ms";

/// Runs `throng client ADDR <flags>` as [`Client::run`] does, and gives
/// the client's peak resident memory in bytes too (its `ru_maxrss`, from
/// wait4 on it alone).
fn run_rss(name: &str, addr: SocketAddr, flags: &str) -> (Ran, u64) {
    let dir = temp_dir(name);
    let json = dir.join("r.json");
    let t = Instant::now();
    // Reaped by the wait4 below, which also gives its usage.
    #[allow(clippy::zombie_processes)]
    let child = Command::new(BIN)
        .arg("client")
        .arg(addr.to_string())
        .args(flags.split_whitespace())
        .args(["-q", "--json", json.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("out")).unwrap())
        .stderr(std::fs::File::create(dir.join("err")).unwrap())
        .spawn()
        .expect("start throng client");
    let mut status = 0;
    // SAFETY: plain data filled in by wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, once; `status` and `usage` are ours.
    let rc = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(rc, child.id() as i32, "wait4");
    let secs = t.elapsed().as_secs_f64();
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let (stdout, stderr) = (read("out"), read("err"));
    let json = std::fs::read_to_string(&json)
        .map(|t| common::parse_result(&t))
        .unwrap_or(Value::Null);
    let _ = std::fs::remove_dir_all(&dir);
    let out = format!("{stdout}\n{stderr}");
    let rtt_log = String::new();
    let ran = Ran {
        code,
        out,
        stdout,
        stderr,
        json,
        rtt_log,
        secs,
    };
    (ran, usage.ru_maxrss as u64 * 1024)
}

/// Every query sent (at least `min`) timed out: none was answered, no
/// connection failed. The number sent.
#[track_caller]
fn all_timed_out(r: &RunResult, min: u64, out: &str) -> u64 {
    let q = r.q();
    assert!(q.sent >= min, "sent {} < {min}\n{out}", q.sent);
    assert_eq!(q.answered, 0, "answered\n{out}");
    assert_eq!(q.timed_out, q.sent, "timed out against sent\n{out}");
    assert_eq!(r.failed_total(), 0, "failed connections\n{out}");
    q.sent
}

/// The answer to a DNS query, framed: the query with QR set (NOERROR, the
/// question echoed, no records). `id` replaces its ID when given.
fn dns_answer(query: &[u8], id: Option<u16>) -> Vec<u8> {
    let mut m = query.to_vec();
    m[2] |= 0x80;
    if let Some(id) = id {
        m[..2].copy_from_slice(&id.to_be_bytes());
    }
    common::framed(&m)
}

/// A DNS peer that writes `answer(query)` for each query it reads.
fn dns_peer(answer: fn(&[u8]) -> Vec<u8>) -> SocketAddr {
    peer(move |mut s| {
        while let Some(m) = common::read_dns(&mut s) {
            if s.write_all(&answer(&m)).is_err() {
                return;
            }
        }
    })
}

/// An echo peer that reads 64-byte messages and writes `answer(message)`
/// for each.
fn echo_peer(answer: fn([u8; 64]) -> Vec<u8>) -> SocketAddr {
    peer(move |mut s| {
        let mut msg = [0u8; 64];
        while s.read_exact(&mut msg).is_ok() {
            if s.write_all(&answer(msg)).is_err() {
                return;
            }
        }
    })
}

/// A peer that answers every read with `reply`.
fn replying(reply: &'static [u8]) -> SocketAddr {
    peer(move |mut s| {
        let mut buf = [0u8; 4096];
        while let Ok(1..) = s.read(&mut buf) {
            if s.write_all(reply).is_err() {
                return;
            }
        }
    })
}

// ---- garbage ---------------------------------------------------------------

/// Garbage in place of every answer, for a protocol that frames its
/// answers (dns, echo, http): each is `malformed` and ends its connection
/// (nothing after it can be framed), counted as a reset; the query in
/// flight on it is `conn_lost`; --reconnect replaces it. The default check
/// fails the run (exit 1).
fn garbage_ends_each_connection(proto: &str, reply: &'static [u8]) {
    let flags = format!("--proto {proto} --reconnect {PACED}");
    let (r, out) = ends(&format!("garbage-{proto}"), replying(reply), &flags, 1, 5.0);
    let malformed = r.q().errors["malformed"];
    assert!(malformed >= 4, "{out}");
    assert_eq!(r.q().answered, 0, "{out}");
    // One connection ended per garbled answer, in the reset bucket.
    assert_eq!(r.connections.failed["reset"], malformed, "{out}");
    assert_eq!(r.failed_total(), malformed, "{out}");
    // The query each garbled answer came for (one at a time per
    // connection) went with its connection.
    assert_eq!(r.q().errors["conn_lost"], malformed, "{out}");
    assert_eq!(
        r.errors(),
        2 * malformed + r.q().errors["no_connection"],
        "{out}"
    );
    assert_eq!(r.q().errors["oversized"], 0, "{out}");
    assert_eq!(r.q().timed_out, 0, "{out}");
    assert!(out.contains("malformed"), "{out}");
}

#[test]
fn garbage_dns_frames_are_malformed() {
    // A whole frame, too short for a DNS header.
    garbage_ends_each_connection("dns", b"\x00\x04junk");
}

#[test]
fn garbage_echo_is_malformed_without_validate() {
    // Without --validate the echo header (magic, sequence) is still
    // checked: bytes without it are not an echo.
    garbage_ends_each_connection("echo", b"garbage, not an echo of anything");
}

#[test]
fn garbage_http_is_malformed() {
    garbage_ends_each_connection("http", b"SSH-2.0-OpenSSH\r\n\r\n");
}

/// A line that is not a pong answers the oldest ping as a `mismatch` (as a
/// server's `error` line does): answered, counted, the connection kept.
#[test]
fn garbage_ping_lines_are_mismatches() {
    let addr = replying(b"garbage\n");
    let flags = format!("--proto ping {PACED}");
    // Every ping answered, and every answer failed: the run fails.
    let (r, out) = ends("garbage-ping", addr, &flags, 1, 5.0);
    let answered = all_answered(&r, 10, &out);
    assert_eq!(
        r.q().failed_answers.get("mismatch").copied(),
        Some(answered),
        "{out}"
    );
    assert_eq!(r.errors(), 0, "a failed answer is not an error too: {out}");
    assert_eq!(r.failed_total(), 0, "{out}");
}

/// raw with --marker cannot tell garbage from a reply that has not ended:
/// garbage without the marker leaves every query to time out, the
/// connection kept (and its input bounded by the cap, below).
#[test]
fn garbage_raw_without_the_marker_times_out() {
    let addr = replying(b"garbage");
    let flags = format!(r"--proto raw -m hello\n --marker \r\n {PACED}");
    let (r, out) = ends("garbage-raw", addr, &flags, 1, 5.0);
    let sent = all_timed_out(&r, 10, &out);
    assert_eq!(r.errors(), 0, "{out}");
    assert_eq!(r.q().bytes_in, 7 * sent, "{out}");
}

// ---- frames that never end -------------------------------------------------

/// A DNS length prefix of 65,535, then a byte every 100 ms: the frame can
/// never pass 65,537 bytes, under the cap, so nothing is cut; each query
/// times out, the connection is kept, and the run ends on time.
#[test]
fn dns_frame_that_never_ends_times_out() {
    let addr = peer(|mut s| {
        let _ = s.set_nodelay(true);
        if common::read_dns(&mut s).is_none() || s.write_all(&[0xff, 0xff]).is_err() {
            return;
        }
        while s.write_all(b"x").is_ok() {
            thread::sleep(Duration::from_millis(100));
        }
    });
    let flags = "-c 1 --interval 200ms -T 1s --timeout 300ms";
    let (r, out) = ends("dns-endless", addr, flags, 1, 4.0);
    all_timed_out(&r, 3, &out);
    assert_eq!(r.errors(), 0, "{out}");
}

/// A peer that answers the first request of each connection with `head`,
/// then `filler` as fast as the client reads, forever.
fn endless(head: &'static [u8], filler: &'static [u8]) -> SocketAddr {
    peer(move |mut s| {
        let mut buf = [0u8; 4096];
        if !matches!(s.read(&mut buf), Ok(1..)) || s.write_all(head).is_err() {
            return;
        }
        while s.write_all(filler).is_ok() {}
    })
}

/// Runs `proto` (its flags) against a reply that never ends and must be
/// kept whole to be framed (an HTTP head, a ping line): each connection is
/// cut as `oversized` once it passes the protocol's limit (64 KiB),
/// replaced, and the run ends on time. The client never read more than the
/// cap and a read on any connection.
fn endless_reply_is_cut(name: &str, addr: SocketAddr, proto: &str) {
    let flags = format!("{proto} -c 2 --reconnect --interval 200ms -T 1s --timeout 300ms");
    let (r, out) = ends(name, addr, &flags, 1, 5.0);
    let cut = r.q().errors["oversized"];
    assert!(cut >= 2, "{out}");
    assert_eq!(r.q().answered, 0, "{out}");
    assert_eq!(r.connections.failed["reset"], cut, "{out}");
    // Every query went with its connection: one cut, or one still filling
    // when the run closed it (a slow filler may not reach the cap within
    // --drain, and queries pile up on it).
    let sent = r.q().sent;
    assert_eq!(r.q().errors["conn_lost"], sent, "{out}");
    assert!(cut <= sent, "{out}");
    assert_eq!(r.q().errors["malformed"], 0, "{out}");
    // Each connection (those cut, and the two open at the end) read at
    // most the cap and one read more.
    let bytes_in = r.q().bytes_in;
    assert!(bytes_in <= (cut + 2) * (CAP + READ), "{bytes_in}: {out}");
}

#[test]
fn http_head_that_never_ends_is_oversized() {
    let addr = endless(
        b"HTTP/1.1 200 OK\r\n",
        b"X-Filler: aaaaaaaaaaaaaaaaaaaaaaaa\r\n",
    );
    endless_reply_is_cut("http-head", addr, "--proto http");
}

/// Runs `proto` (its flags) against a reply that never ends but is well
/// formed so far (an HTTP body, a raw reply whose marker has not come),
/// sent as fast as the client reads: the client reads it all, keeping only
/// the head and a read per connection (the body is dropped as it comes),
/// so it reads far past the cap without cutting anything. Each query
/// times out, no connection is lost, the run ends on time, and the
/// client's peak memory is that of the same run against `answers` (a peer
/// that answers) plus less than a cap and a read per connection.
fn endless_reply_streams(name: &str, addr: SocketAddr, answers: SocketAddr, proto: &str) {
    let flags = format!("{proto} -c 2 --interval 200ms -T 1s --timeout 300ms");
    let (ran, normal) = run_rss(&format!("{name}-answered"), answers, &flags);
    let r = ran.exits(0).result();
    assert_eq!(r.q().timed_out, 0, "{}", ran.out);
    let (ran, rss) = run_rss(name, addr, &flags);
    let (r, out) = (ran.exits(1).result(), &ran.out);
    assert!(ran.secs < 5.0, "{} s: {out}", ran.secs);
    let sent = r.q().sent;
    assert!(sent >= 6, "{out}");
    // Every query timed out, but one the busy loop (reading the stream as
    // fast as it comes) sent a little late at the traffic's end: its
    // deadline is past the drain's, and it is counted in flight then.
    let in_flight = r.q().in_flight_at_end;
    assert!(in_flight <= 2, "{out}");
    assert_eq!(r.q().timed_out + in_flight, sent, "{out}");
    assert_eq!(r.q().answered, 0, "{out}");
    assert_eq!(r.errors(), 0, "{out}");
    assert_eq!(r.failed_total(), 0, "{out}");
    let bytes_in = r.q().bytes_in;
    assert!(
        bytes_in > 2 * 8 * CAP,
        "read on past the cap: {bytes_in}: {out}"
    );
    assert!(
        rss < normal + 2 * (CAP + READ),
        "peak RSS {rss} B, answered {normal} B: {out}"
    );
}

#[test]
fn http_chunked_body_that_never_ends_times_out() {
    let mut chunk = b"1000\r\n".to_vec();
    chunk.resize(chunk.len() + 4096, b'c');
    chunk.extend_from_slice(b"\r\n");
    let addr = endless(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        Box::leak(chunk.into_boxed_slice()),
    );
    let ok = replying(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    endless_reply_streams("http-chunked", addr, ok, "--proto http");
}

#[test]
fn http_content_length_never_filled_times_out() {
    let addr = endless(
        b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\n\r\n",
        &[b'z'; 4096],
    );
    let ok = replying(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    endless_reply_streams("http-length", addr, ok, "--proto http");
}

#[test]
fn raw_reply_without_its_marker_times_out() {
    let filler = b"no marker here, ever. ".repeat(200);
    let addr = endless(b"", Box::leak(filler.into_boxed_slice()));
    let ok = replying(b"ok\r\n.\r\n");
    let proto = r"--proto raw -m hello\n --marker \r\n.\r\n";
    endless_reply_streams("raw-endless", addr, ok, proto);
}

/// An HTTP body the client reads to its end however long it is: 64 MiB
/// answers its query (the cap is for what is kept, not what is read).
#[test]
fn http_body_far_past_the_cap_is_answered() {
    const BODY: usize = 64 << 20;
    let addr = peer(|mut s| {
        let mut buf = [0u8; 4096];
        while let Ok(1..) = s.read(&mut buf) {
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {BODY}\r\n\r\n");
            if s.write_all(head.as_bytes()).is_err() {
                return;
            }
            let chunk = [b'b'; 64 * 1024];
            for _ in 0..BODY / chunk.len() {
                if s.write_all(&chunk).is_err() {
                    return;
                }
            }
        }
    });
    let (r, out) = Client::new("http-huge")
        .arg(addr.to_string())
        .flags("--proto http -c 1 --queries 3 --closed-loop -T 20s")
        .ok();
    assert_eq!(r.q().answered, 3, "{out}");
    assert_eq!(r.errors(), 0, "{out}");
    assert!(r.q().bytes_in > 3 * BODY as u64, "{out}");
}

#[test]
fn ping_line_that_never_ends_is_oversized() {
    let addr = endless(b"pong ", b"1111111111111111");
    endless_reply_is_cut("ping-endless", addr, "--proto ping");
}

// ---- a flood on every connection -----------------------------------------

/// A peer on one thread that accepts every connection and, once it holds
/// `n`, writes `filler` to each as fast as it takes it (none when empty),
/// until the returned flag is set. Fair: a few writes per connection in
/// turn, so that one fast reader does not keep it from the others.
fn flooding(filler: &'static [u8], n: usize) -> (SocketAddr, Arc<AtomicBool>) {
    use mio::net::TcpListener;
    use mio::{Events, Interest, Poll, Token};
    let mut l = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let done = stop.clone();
    thread::spawn(move || {
        let mut poll = Poll::new().unwrap();
        poll.registry()
            .register(&mut l, Token(0), Interest::READABLE)
            .unwrap();
        let mut conns = Vec::new();
        // Connections the kernel takes bytes from, each once.
        let mut ready = std::collections::VecDeque::new();
        let mut queued: Vec<bool> = Vec::new();
        let mut events = Events::with_capacity(1024);
        while !done.load(Relaxed) {
            let wait = if ready.is_empty() { 50 } else { 0 };
            poll.poll(&mut events, Some(Duration::from_millis(wait)))
                .unwrap();
            for ev in &events {
                if ev.token() == Token(0) {
                    while let Ok((mut c, _)) = l.accept() {
                        let t = Token(conns.len() + 1);
                        poll.registry()
                            .register(&mut c, t, Interest::WRITABLE)
                            .unwrap();
                        conns.push(Some(c));
                        queued.push(false);
                    }
                    if conns.len() == n && !filler.is_empty() {
                        // All in: the flood begins.
                        ready.extend(0..n);
                        queued.fill(true);
                    }
                } else if conns.len() >= n {
                    let i = ev.token().0 - 1;
                    if !filler.is_empty() && !queued[i] {
                        queued[i] = true;
                        ready.push_back(i);
                    }
                }
            }
            for _ in 0..ready.len() {
                let i = ready.pop_front().unwrap();
                let Some(c) = conns[i].as_mut() else { continue };
                let mut more = true;
                for _ in 0..4 {
                    match c.write(filler) {
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            more = false;
                            break;
                        }
                        Err(_) => {
                            conns[i] = None;
                            more = false;
                            break;
                        }
                    }
                }
                if more {
                    ready.push_back(i);
                } else {
                    queued[i] = false;
                }
            }
        }
    });
    (addr, stop)
}

/// 10,000 connections each flooded at full speed with a reply that never
/// ends (raw, its --marker never comes): the client reads it all and
/// keeps only the marker's length of it, so its memory is that of the
/// same run against a peer that sends nothing, plus less than 4 KiB a
/// connection (a read's buffer is not kept); every query times out, no
/// connection is lost, and the run ends on time.
#[test]
fn a_flood_on_ten_thousand_connections_is_read_within_bounds() {
    common::raise_fd_limit();
    const N: u64 = 10_000;
    let flags =
        r"--proto raw -m hello\n --marker \r\n.\r\n -c 10000 --interval 1s -T 3s --timeout 500ms";
    let (silent, stop) = flooding(b"", N as usize);
    let (ran, quiet) = run_rss("flood-silent", silent, flags);
    stop.store(true, Relaxed);
    let r = ran.exits(1).result();
    assert_eq!(r.q().bytes_in, 0, "{}", ran.out);
    let filler: &'static [u8] = Box::leak(b"flood ".repeat(2000).into_boxed_slice());
    let (flood, stop) = flooding(filler, N as usize);
    let (ran, rss) = run_rss("flood", flood, flags);
    stop.store(true, Relaxed);
    let (r, out) = (ran.exits(1).result(), &ran.out);
    // The ramp (~1 s at the default 10,000/s), -T, --drain (--timeout).
    assert!(ran.secs < 2.0 + 3.0 + 0.5 + 3.0, "{} s: {out}", ran.secs);
    all_timed_out(&r, 1, out);
    assert_eq!(r.errors(), 0, "{out}");
    assert_eq!(r.connections.established, N, "{out}");
    let bytes_in = r.q().bytes_in;
    assert!(bytes_in > 100 * CAP, "it read: {bytes_in}: {out}");
    assert!(
        rss < quiet + N * 4096,
        "peak RSS {rss} B, silent {quiet} B: {out}"
    );
}

// ---- a server that never reads ------------------------------------------

/// A server that accepts and never reads: the client's writes fill the
/// kernel's buffers, then its queries wait behind the full sockets; those
/// that waited --timeout are given up as `not_sent` (and the rest at the
/// end), so the client holds at most the rate times --timeout of them.
/// Every query due is counted once (sent or not_sent), the summary blames
/// the server, memory stays that of a run against a server that answers,
/// and the run ends on time.
#[test]
fn server_that_never_reads_backs_up_and_is_named() {
    // Holds each connection, unread, for longer than the run lasts.
    let addr = peer(|s| {
        thread::sleep(Duration::from_secs(8));
        drop(s);
    });
    let flags = "--proto echo --size 1024 -c 4 -r 20k -T 2s --timeout 500ms";
    let srv = common::server(&[]);
    let (ran, answering) = run_rss("noread-answered", srv.addr, flags);
    let due = ran.exits(0).result().q().sent;
    drop(srv);
    let (ran, rss) = run_rss("noread", addr, flags);
    let (r, out) = (ran.exits(1).result(), &ran.out);
    // -T, then --drain (--timeout) at most, and the close.
    assert!(ran.secs < 2.0 + 0.5 + 2.0, "{} s: {out}", ran.secs);
    let (sent, not_sent) = (r.q().sent, r.q().errors["not_sent"]);
    assert!(not_sent > 0, "{out}");
    assert_eq!(r.q().answered, 0, "{out}");
    assert_eq!(r.q().timed_out, sent, "{out}");
    assert_eq!(r.errors(), not_sent, "{out}");
    // Every query due counted once: as many as the run that was answered
    // sent, within 2%.
    let all = sent + not_sent;
    assert!(
        all.abs_diff(due) * 50 <= due,
        "{sent} + {not_sent} vs {due}: {out}"
    );
    assert!(
        out.contains("could not be sent within --timeout")
            && out.contains("the server is not reading"),
        "{out}"
    );
    assert!(!out.contains("client could not keep up"), "{out}");
    assert!(!out.contains("client is the bottleneck"), "{out}");
    assert!(out.contains("did not keep up, or does not answer"), "{out}");
    assert!(
        !out.contains("response rate limiting dropped them"),
        "{out}"
    );
    assert!(
        rss < answering + 4 * CAP,
        "peak RSS {rss} B, answered {answering} B: {out}"
    );
}

// ---- answers to queries never sent -----------------------------------------

/// Answers every DNS query with an ID it was not sent: each answer is
/// `unmatched`, each query times out; nothing is answered twice.
#[test]
fn dns_answers_with_wrong_ids_are_unmatched() {
    let addr = dns_peer(|m| dns_answer(m, Some(u16::from_be_bytes([m[0], m[1]]) ^ 0x8000)));
    let (r, out) = ends("dns-wrong-id", addr, PACED, 1, 5.0);
    let sent = all_timed_out(&r, 10, &out);
    assert_eq!(r.q().errors["unmatched"], sent, "{out}");
    assert_eq!(r.errors(), sent, "{out}");
}

/// Answers each HTTP request, then 50 ms later sends a response to no
/// request (the next is 200 ms away): `unmatched`, the connection kept.
#[test]
fn http_response_with_no_request_is_unmatched() {
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    let addr = peer(|mut s| {
        let mut buf = [0u8; 4096];
        while let Ok(1..) = s.read(&mut buf) {
            if s.write_all(OK).is_err() {
                return;
            }
            thread::sleep(Duration::from_millis(50));
            if s.write_all(OK).is_err() {
                return;
            }
        }
    });
    let flags = "--proto http -c 2 --interval 200ms -T 1s --timeout 300ms";
    let (r, out) = ends("http-unasked", addr, flags, 0, 5.0);
    let answered = all_answered(&r, 6, &out);
    assert_eq!(r.q().http_status.get("200").copied(), Some(answered));
    // The last query's extra response may come after the connection
    // closed.
    let unmatched = r.q().errors["unmatched"];
    assert!(unmatched + 2 >= answered && unmatched <= answered, "{out}");
    assert_eq!(r.errors(), unmatched, "{out}");
    assert_eq!(r.failed_total(), 0, "{out}");
}

// ---- twice, out of order ---------------------------------------------------

/// Answers every query twice: the first answer counts, the second is
/// `unmatched`, never a second answer (in RCODEs either). Or echoes each
/// message, then the same message with a sequence number never sent:
/// `unmatched`, never an answer.
#[test]
fn answers_twice_count_once() {
    let dns = dns_peer(|m| [dns_answer(m, None), dns_answer(m, None)].concat());
    let echo = echo_peer(|m| [m, m].concat());
    let extra = echo_peer(|m| {
        let mut extra = m;
        extra[4] ^= 0x80;
        [m, extra].concat()
    });
    // Each case: its name, peer and flags, the fewest answers it must get,
    // and whether it is DNS (its RCODEs counted).
    let echo_flags = "--proto echo --size 64 -c 2";
    let cases = [
        (
            "dns-twice",
            dns,
            "-c 2 -r 200 -T 1s --timeout 300ms",
            100,
            true,
        ),
        (
            "echo-twice",
            echo,
            &format!("{echo_flags} -r 200 -T 1s"),
            100,
            false,
        ),
        (
            "echo-extra",
            extra,
            &format!("{echo_flags} --interval 100ms -T 1s"),
            10,
            false,
        ),
    ];
    for (name, addr, flags, min, dns) in cases {
        let ran = Client::new(name).arg(addr.to_string()).flags(flags).run();
        let out = format!("{name}: {}", ran.out);
        assert_eq!(ran.code, 0, "exit code\n{out}");
        let r = ran.result();
        let answered = all_answered(&r, min, &out);
        assert_eq!(r.q().errors["unmatched"], answered, "{out}");
        assert_eq!(r.errors(), answered, "{out}");
        if dns {
            let noerror = r.dns().rcodes.get("NOERROR").copied();
            assert_eq!(noerror, Some(answered), "{out}");
        }
    }
}

/// Holds DNS queries in fours and answers each four in reverse: every
/// answer is matched by its ID, none is unmatched or lost.
#[test]
fn dns_answers_reordered_are_all_matched() {
    let addr = peer(|mut s| {
        let mut held = Vec::new();
        while let Some(m) = common::read_dns(&mut s) {
            held.push(dns_answer(&m, None));
            if held.len() == 4 {
                let out: Vec<u8> = held.drain(..).rev().flatten().collect();
                if s.write_all(&out).is_err() {
                    return;
                }
            }
        }
    });
    let (r, out) = Client::new("dns-reorder")
        .arg(addr.to_string())
        .flags("-c 2 --closed-loop --window 4 -T 1s")
        // A four cut short at the end is never answered.
        .flags("--drain 200ms")
        .ok();
    let answered = r.q().answered;
    assert!(answered >= 100, "{out}");
    assert_eq!(answered % 4, 0, "whole fours: {out}");
    assert_eq!(r.errors(), 0, "{out}");
    assert_eq!(r.q().timed_out, 0, "{out}");
    assert_eq!(r.dns().rcodes.get("NOERROR").copied(), Some(answered));
}

// ---- a close or a reset mid-response ---------------------------------------

/// A DNS peer that answers the first query of each connection, then sends
/// half of the second's answer and closes: with `reset`, by RST
/// (SO_LINGER 0).
fn half_answer_then_close(reset: bool) -> SocketAddr {
    let serve = move |mut s: TcpStream| {
        let _ = s.set_nodelay(true);
        let Some(m) = common::read_dns(&mut s) else {
            return;
        };
        if s.write_all(&dns_answer(&m, None)).is_err() {
            return;
        }
        let Some(m) = common::read_dns(&mut s) else {
            return;
        };
        let a = dns_answer(&m, None);
        if s.write_all(&a[..a.len() / 2]).is_err() {
            return;
        }
        if reset {
            reset_on_drop(&s);
        }
    };
    peer(serve)
}

/// Makes `s`'s close a reset (SO_LINGER 0), after a pause for the bytes
/// written to go first (a reset discards unsent bytes).
fn reset_on_drop(s: &TcpStream) {
    thread::sleep(Duration::from_millis(20));
    let fd = std::os::fd::AsRawFd::as_raw_fd(s);
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket this thread owns, with a linger
    // struct of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0);
}

/// Each of the 2 connections: one answer, then half of one and the
/// `bucket`'s end: the connection in its bucket, the query `conn_lost`.
fn half_answer_counted(name: &str, reset: bool, bucket: &str) {
    let (r, out) = ends(name, half_answer_then_close(reset), PACED, 1, 5.0);
    // The rest found no connection left.
    lost_with_its_connection(&r, 2, bucket, &out);
}

#[test]
fn close_after_half_an_answer_is_closed_by_peer() {
    half_answer_counted("half-close", false, "closed_by_peer");
}

#[test]
fn reset_in_the_middle_of_an_answer_is_reset() {
    half_answer_counted("half-reset", true, "reset");
}

// ---- a server that closes after every answer -------------------------------

/// A server that reads one HTTP request on each connection, answers it with
/// `reply` and closes, lingering (RFC 9112 9.6): what the client sent
/// meanwhile is read, so its close is a FIN, not a reset.
fn one_answer_then_close(reply: &'static [u8]) -> SocketAddr {
    peer(move |mut s| {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        if s.write_all(reply).is_err() {
            return;
        }
        let _ = s.shutdown(std::net::Shutdown::Write);
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        while let Ok(1..) = s.read(&mut buf) {}
    })
}

/// Every query answered, judged ok, the server's closes clean and replaced.
fn answered_and_closed_cleanly(name: &str, reply: &'static [u8]) {
    let addr = one_answer_then_close(reply);
    let (r, out) = ends(name, addr, "--proto http -c 5 -r 100 -T 2s", 0, 10.0);
    let answered = all_answered(&r, 150, &out);
    assert_eq!(r.q().ok, Some(answered), "{out}");
    assert_eq!(r.q().http_status.get("200").copied(), Some(answered));
    assert_eq!(r.q().errors["malformed"], 0, "{out}");
    assert_eq!(r.q().errors["conn_lost"], 0, "{out}");
    // At the end a query may still wait for a replacement connection.
    assert!(r.errors() <= 5, "{out}");
    assert_eq!(r.failed_total(), 0, "{out}");
    // Each connection answered once and closed, the server's right.
    let peer_closed = r.connections.peer_closed;
    assert!(
        peer_closed + 5 >= answered && peer_closed <= answered,
        "{out}"
    );
}

/// Issue 26: a body that ends with the connection (HTTP/1.0, no
/// Content-Length: RFC 9112 6.3) was malformed, the close a lost
/// connection: 0% answered.
#[test]
fn http_1_0_body_ended_by_the_close_is_an_answer() {
    answered_and_closed_cleanly("http-1-0", b"HTTP/1.0 200 OK\r\n\r\nhello");
}

/// The same close after a response that says so and has a length.
#[test]
fn http_connection_close_with_a_length_is_an_answer() {
    answered_and_closed_cleanly(
        "http-conn-close",
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
    );
}

/// A body that ends with the connection, ended by a reset: it may be cut
/// (RFC 9112 8), so its query is lost with the connection. The server had
/// said it closes: the reset is its close, not a failure.
#[test]
fn http_body_without_a_length_cut_by_a_reset_is_conn_lost() {
    let addr = peer(|mut s| {
        let mut buf = [0u8; 4096];
        if !matches!(s.read(&mut buf), Ok(1..)) {
            return;
        }
        if s.write_all(b"HTTP/1.0 200 OK\r\n\r\nhel").is_ok() {
            reset_on_drop(&s);
        }
    });
    let flags = format!("--proto http {PACED}");
    let (r, out) = ends("http-1-0-reset", addr, &flags, 1, 5.0);
    let lost = r.q().errors["conn_lost"];
    assert!(lost >= 10, "{out}");
    assert_eq!(r.q().answered, 0, "{out}");
    assert_eq!(r.q().errors["malformed"], 0, "{out}");
    assert_eq!(r.failed_total(), 0, "{out}");
    assert_eq!(r.connections.peer_closed, lost, "{out}");
}

// ---- the books balance whatever the server does ------------------------------

/// An echo server that misbehaves at random, chunk by chunk, from `seed`:
/// echoes, drops, corrupts, stalls, closes cleanly or resets.
fn chaos_server(seed: u64) -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    thread::spawn(move || {
        for (n, s) in l.incoming().enumerate() {
            let Ok(mut s) = s else { return };
            let mut x = seed ^ (n as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let mut roll = || {
                    // xorshift64*: the test's own reproducible dice.
                    x ^= x >> 12;
                    x ^= x << 25;
                    x ^= x >> 27;
                    (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) % 100
                };
                loop {
                    let n = match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    match roll() {
                        0..=59 => {}
                        60..=69 => continue,
                        70..=77 => buf[..n].iter_mut().for_each(|b| *b ^= 0x55),
                        78..=89 => thread::sleep(Duration::from_millis(50 + roll() * 3)),
                        90..=94 => return,
                        _ => {
                            let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
                            return;
                        }
                    }
                    if s.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 8,
        max_shrink_iters: 8,
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Randomized runs against a server that misbehaves at random: every
    /// result's books balance (run's `parse_result` checks them), the run
    /// ends on time, and whatever the server did is counted somewhere.
    #[test]
    fn the_books_balance_against_a_server_that_misbehaves_at_random(
        seed in proptest::prelude::any::<u64>(),
        per_query in proptest::prelude::any::<bool>(),
        closed in proptest::prelude::any::<bool>(),
        conns in 1u64..40,
        rate in 50u64..1500,
        window in 1u64..4,
        reconnect in 0u8..3,
        validate in proptest::prelude::any::<bool>(),
        recycle in proptest::option::of(2u64..20),
        processes in 1u8..3,
    ) {
        let addr = chaos_server(seed);
        let (conns, rate, window) = (conns.to_string(), rate.to_string(), window.to_string());
        let mut args = vec!["--proto", "echo", "-T", "1s", "--timeout", "300ms", "--drain", "500ms"];
        if per_query {
            args.extend(["--transport", "tcp-per-query", "--concurrency", &conns]);
        } else {
            args.extend(["-c", &conns, "--window", &window]);
        }
        if closed {
            args.push("--closed-loop");
        } else {
            args.extend(["-r", &rate]);
        }
        match reconnect {
            0 => args.push("--reconnect"),
            1 => args.push("--no-reconnect"),
            _ => {}
        }
        if validate {
            args.push("--validate");
        }
        if processes == 2 {
            // Two slices merged by the parent: the merge's books too.
            args.extend(["--processes", "2"]);
        }
        let recycle = recycle.map(|n| n.to_string());
        if let (Some(n), false) = (&recycle, per_query) {
            args.extend(["--max-queries-per-conn", n]);
        }
        let ran = Client::new("books-chaos").arg(addr.to_string()).args(&args).run();
        let Ran { code, out, json: v, secs, .. } = ran;
        proptest::prop_assert!(code == 0 || code == 1, "exit {code}: {args:?}\n{out}");
        proptest::prop_assert!(!v.is_null(), "no result: {args:?}\n{out}");
        let r = common::typed(&v);
        // -T 1s, --drain 0.5s, the close; a loaded machine's slack.
        proptest::prop_assert!(secs < 15.0, "{secs} s: {args:?}\n{out}");
        proptest::prop_assert!(r.q().due > 0, "{args:?}\n{out}");
    }
}
