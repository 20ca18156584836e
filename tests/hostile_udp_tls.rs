//! `throng client` against hostile peers over UDP and TLS, written here:
//! DNS answers cut short (TC=1), UDP answers from another port than the
//! one asked, a TLS peer that answers the ClientHello with an alert or
//! with bytes that are not TLS, and a TLS session broken in its middle by
//! garbage or a corrupted record. Each test asserts what was counted and
//! that the run ended on time.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;

use common::{all_answered, ends, lost_with_its_connection, peer, Client, Parts, RunResult};

/// Two connections, a query every 100 ms on each for a second, each
/// timed out after 300 ms.
const PACED: &str = "-c 2 --interval 100ms -T 1s --timeout 300ms";

/// `connections.tls_error`: the first TLS error, in words.
fn tls_error(r: &RunResult) -> String {
    let e = r.connections.tls_error.clone();
    e.unwrap_or_else(|| panic!("connections.tls_error: {r:?}"))
}

/// The answer to a DNS query (no TCP length): the query with QR set
/// (NOERROR, the question echoed, no records), and TC when `truncated`.
fn dns_answer(query: &[u8], truncated: bool) -> Vec<u8> {
    let mut m = query.to_vec();
    m[2] |= 0x80;
    if truncated {
        m[2] |= 0x02;
    }
    m
}

/// A UDP peer on 127.0.0.1:0 that receives on one socket and answers each
/// datagram with `answer(datagram, n)` (n counts from 0), sent from
/// `reply` when given (another socket), else from the one that received.
/// Returns the address and the number of datagrams received.
fn udp_peer(
    reply: Option<UdpSocket>,
    answer: impl Fn(&[u8], u64) -> Option<Vec<u8>> + Send + 'static,
) -> (SocketAddr, Arc<AtomicU64>) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sock.local_addr().unwrap();
    let got = Arc::new(AtomicU64::new(0));
    let count = got.clone();
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let i = count.fetch_add(1, Ordering::Relaxed);
            if let Some(a) = answer(&buf[..n], i) {
                let _ = reply.as_ref().unwrap_or(&sock).send_to(&a, from);
            }
        }
    });
    (addr, got)
}

// ---- truncated answers -----------------------------------------------------

/// Over UDP, `cut_every` answer has TC=1 (2: every other one, 1: all):
/// all are answered (the server did answer), and those are counted apart
/// in `queries.truncated`. Two processes: the parent's merge sums them.
/// The summary says `says`, and never `never`.
fn udp_truncated(name: &str, cut_every: u64, says: [&str; 2], never: &str) {
    let cut = Arc::new(AtomicU64::new(0));
    let counted = cut.clone();
    let (addr, got) = udp_peer(None, move |m, i| {
        let truncated = i % cut_every == cut_every - 1;
        if truncated {
            counted.fetch_add(1, Ordering::Relaxed);
        }
        Some(dns_answer(m, truncated))
    });
    let share = format!("queries.truncated>={}%", 80 / cut_every);
    let flags = format!("--transport udp --proto dns --processes 2 --interval 50ms -c 2 -T 1s --timeout 300ms --check queries.answered>=99% --check {share}");
    // Exit 0: every query was answered.
    let (r, out) = ends(name, addr, &flags, 0, 5.0);
    assert!(out.contains(&format!("PASS  {share}")), "{out}");
    let sent = all_answered(&r, 20, &out);
    assert_eq!(got.load(Ordering::Relaxed), sent, "{out}");
    assert_eq!(r.dns().rcodes.get("NOERROR").copied(), Some(sent), "{out}");
    let truncated = cut.load(Ordering::Relaxed);
    assert_eq!(truncated, sent / cut_every, "{out}");
    assert_eq!(r.q().truncated, truncated, "{out}");
    assert_eq!(r.errors(), 0, "{out}");
    assert_eq!(r.q().timed_out, 0, "{out}");
    let line = format!("truncated   {truncated} answers had TC=1 (counted as answered)");
    assert!(out.contains(&line), "{out}");
    for words in says {
        assert!(out.contains(words), "{words}: {out}");
    }
    assert!(!out.contains(never), "{never}: {out}");
}

/// Every answer truncated: the answer may not fit a datagram (or rate
/// limiting truncates all); the summary offers --edns and TCP, and does
/// not claim rate limiting.
#[test]
fn udp_answers_all_truncated_may_not_fit_a_datagram() {
    let says = ["do not fit a UDP datagram", "--transport tcp"];
    let never = "truncates to slow this client down";
    udp_truncated("udp-truncated-all", 1, says, never);
}

/// The same question came whole over UDP half the time and truncated
/// the other half: the answer fits a datagram, so the truncation is the
/// server's rate limiting (nsd's and BIND's "slip"), named as such; a
/// larger --edns is not offered as the fix.
#[test]
fn udp_truncated_answers_of_a_question_that_came_whole_are_rate_limiting() {
    let says = [
        "truncates to slow this client down",
        "--edns changes nothing",
    ];
    udp_truncated("udp-truncated-half", 2, says, "do not fit a UDP datagram");
}

/// Over TCP a TC=1 answer counts the same way; the summary does not
/// speak of datagrams.
#[test]
fn tcp_truncated_answers_are_counted_apart() {
    let addr = peer(|mut s| {
        while let Some(m) = common::read_dns(&mut s) {
            if s.write_all(&common::framed(&dns_answer(&m, true))).is_err() {
                return;
            }
        }
    });
    let (r, out) = ends("tcp-truncated", addr, PACED, 0, 5.0);
    let sent = all_answered(&r, 10, &out);
    assert_eq!(r.q().truncated, sent, "{out}");
    assert_eq!(r.errors(), 0, "{out}");
    assert_eq!(r.failed_total(), 0, "{out}");
    assert!(out.contains("cut them short even over TCP"), "{out}");
    assert!(!out.contains("datagram"), "{out}");
}

// ---- answers from another port ---------------------------------------------

/// The peer receives on one socket and answers from another (another
/// port): the client's UDP sockets are connected, so the kernel drops
/// those answers and every query times out. The summary says what that
/// means, without blaming the client.
#[test]
fn udp_answers_from_another_port_time_out() {
    let other = UdpSocket::bind("127.0.0.1:0").unwrap();
    let (addr, got) = udp_peer(Some(other), |m, _| Some(dns_answer(m, false)));
    let flags = format!("--transport udp --proto dns {PACED}");
    let (r, out) = ends("udp-other-port", addr, &flags, 1, 5.0);
    let q = r.q();
    assert!(q.sent >= 10, "{out}");
    // Every query reached the peer, and it answered each one.
    assert_eq!(got.load(Ordering::Relaxed), q.sent, "{out}");
    assert_eq!(q.answered, 0, "{out}");
    assert_eq!(q.timed_out, q.sent, "{out}");
    assert_eq!(q.in_flight_at_end, 0, "{out}");
    assert_eq!(r.errors(), 0, "{out}");
    assert_eq!(r.failed_total(), 0, "{out}");
    assert!(out.contains("hint (udp): no answer came back"), "{out}");
    assert!(out.contains("from another address or port"), "{out}");
    assert!(!out.contains("of the UDP sockets never got"), "{out}");
}

// ---- TLS: the handshake refused ---------------------------------------------

/// A peer that reads the ClientHello, answers `reply` (not a TLS
/// handshake), then waits for the client to close.
fn tls_refusing(reply: &'static [u8]) -> SocketAddr {
    peer(move |mut s| {
        let mut buf = [0u8; 4096];
        if !matches!(s.read(&mut buf), Ok(1..)) || s.write_all(reply).is_err() {
            return;
        }
        while let Ok(1..) = s.read(&mut buf) {}
    })
}

/// Runs DNS over TLS on 2 connections against a peer that fails the
/// handshake: both fail into the `tls` bucket, nothing is sent, and the
/// run ends at once (every connection failed); the summary gives the
/// error. Returns the output and the error.
fn tls_handshake_fails(name: &str, addr: SocketAddr) -> (String, String) {
    let flags = "--transport tls --tls-insecure -c 2 --interval 100ms -T 3s --timeout 300ms";
    // Under 2 s: it ends at once.
    let (r, out) = ends(name, addr, flags, 1, 2.0);
    assert_eq!(r.connections.established, 2, "{out}");
    assert_eq!(r.connections.failed["tls"], 2, "{out}");
    assert_eq!(r.failed_total(), 2, "{out}");
    let handshakes = r.connections.tls_handshake_us.as_ref().unwrap();
    assert_eq!(handshakes.count, 0, "{out}");
    assert!(out.contains("hint (tls)"), "{out}");
    assert!(!out.contains("panicked"), "{out}");
    let e = tls_error(&r);
    assert!(out.contains(&format!("tls error     {e}")), "{out}");
    (out, e)
}

/// A fatal alert (handshake_failure) for the ClientHello.
#[test]
fn tls_alert_for_the_client_hello_is_a_tls_failure() {
    let addr = tls_refusing(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28]);
    let (out, e) = tls_handshake_fails("tls-alert", addr);
    assert!(e.contains("alert") && e.contains("HandshakeFailure"), "{e}");
    assert!(
        out.contains("hint (tls): the server refused the handshake"),
        "{out}"
    );
    assert!(!out.contains("did not answer the ClientHello"), "{out}");
    assert!(!out.contains("--tls-ca"), "{out}");
}

/// Bytes that are not TLS records for the ClientHello.
#[test]
fn tls_garbage_for_the_client_hello_is_a_tls_failure() {
    let addr = tls_refusing(b"SSH-2.0-OpenSSH_9.6\r\n");
    let (out, e) = tls_handshake_fails("tls-garbage", addr);
    assert!(e.contains("not TLS"), "{e}");
    assert!(
        out.contains("hint (tls): the server did not answer the ClientHello with TLS"),
        "{out}"
    );
    assert!(!out.contains("refused the handshake"), "{out}");
    assert!(!out.contains("broke after their handshake"), "{out}");
}

// ---- TLS: a session broken in its middle -------------------------------------

/// A self-signed server configuration, made once.
fn server_config() -> Arc<rustls::ServerConfig> {
    static CONFIG: OnceLock<Arc<rustls::ServerConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let c = throng::tls::self_signed().unwrap();
            throng::tls::server_config(c.cert_pem.as_bytes(), c.key_pem.as_bytes(), "test").unwrap()
        })
        .clone()
}

/// A DNS-over-TLS peer that completes the handshake, answers the first
/// query of each connection, and puts `broken(answer)` on the wire in
/// place of the second's record (the connection's TLS session sealed it
/// first), then waits for the client to close.
fn tls_broken_midway(broken: fn(Vec<u8>) -> Vec<u8>) -> SocketAddr {
    server_config();
    peer(move |s| {
        let conn = rustls::ServerConnection::new(server_config()).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, s);
        let Some(m) = common::read_dns(&mut tls) else {
            return;
        };
        if tls
            .write_all(&common::framed(&dns_answer(&m, false)))
            .is_err()
        {
            return;
        }
        let Some(m) = common::read_dns(&mut tls) else {
            return;
        };
        let _ = tls
            .conn
            .writer()
            .write_all(&common::framed(&dns_answer(&m, false)));
        let mut record = Vec::new();
        while tls.conn.wants_write() {
            tls.conn.write_tls(&mut record).unwrap();
        }
        let sock: &mut TcpStream = &mut tls.sock;
        if sock.write_all(&broken(record)).is_err() {
            return;
        }
        let mut buf = [0u8; 4096];
        while let Ok(1..) = sock.read(&mut buf) {}
    })
}

/// Each of the 2 connections: one answer, then the broken bytes: the
/// connection fails into the `tls` bucket with `words` in its error, and
/// the query in flight on it is `conn_lost`; the rest find no connection.
fn tls_broken_session_counted(name: &str, broken: fn(Vec<u8>) -> Vec<u8>, words: &str) {
    let flags = format!("--transport tls --tls-insecure {PACED}");
    let (r, out) = ends(name, tls_broken_midway(broken), &flags, 1, 5.0);
    // Both connections made their handshake, had one answer, and failed
    // into `tls` with the query after it.
    let handshakes = r.connections.tls_handshake_us.as_ref().unwrap();
    assert_eq!(handshakes.count, 2, "{out}");
    lost_with_its_connection(&r, 2, "tls", &out);
    let e = tls_error(&r);
    assert!(e.starts_with("after the handshake: "), "{e}");
    assert!(e.contains(words), "{e}");
    assert!(
        out.contains("hint (tls): TLS sessions broke after"),
        "{out}"
    );
    // Fewer queries went out than asked because the connections were gone,
    // not because the client fell behind.
    assert!(out.contains("connections failed (see above)"), "{out}");
    assert!(!out.contains("could not keep up"), "{out}");
    assert!(!out.contains("panicked"), "{out}");
}

/// Bytes that are not a TLS record in place of an answer's record.
#[test]
fn tls_garbage_in_the_middle_of_a_session_ends_it() {
    tls_broken_session_counted(
        "tls-garbage-midway",
        |_| b"garbage, not a TLS record".to_vec(),
        "not TLS",
    );
}

/// An answer's record with its last byte flipped: it fails its check.
#[test]
fn tls_corrupted_record_ends_the_session() {
    tls_broken_session_counted(
        "tls-corrupted",
        |mut r| {
            *r.last_mut().unwrap() ^= 0xff;
            r
        },
        "decrypt",
    );
}

/// A peer that accepts, reads the ClientHello and says nothing: the
/// handshake times out, and the hint says the server did not answer it,
/// not that the client should trust a certificate (none came).
#[test]
fn tls_peer_that_never_answers_the_client_hello_times_out_the_handshake() {
    let addr = tls_refusing(b"");
    let ran = Client::new("tls-silent")
        .arg(addr.to_string())
        .flags("--transport tls --tls-insecure -c 2 --connect-timeout 500ms -T 1s")
        .run();
    let (r, out) = (ran.exits(1).result(), &ran.out);
    assert_eq!(r.connections.failed["tls"], 2, "{out}");
    assert!(
        tls_error(&r).contains("did not finish within --connect-timeout"),
        "{out}"
    );
    assert!(
        out.contains("hint (tls): the server accepted the connections but did not answer"),
        "{out}"
    );
    assert!(!out.contains("--tls-ca"), "{out}");
    assert!(!out.contains("with TLS (the first error"), "{out}");
}
