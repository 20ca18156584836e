//! `throng server` end to end: the built binary on 127.0.0.1 port 0, real
//! sockets, replies checked by independent parsers (hickory-proto, httparse).

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::Duration;

use common::{run, server, server_with, BIN};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RData;
use hickory_proto::serialize::binary::BinDecodable;

const TIMEOUT: Duration = Duration::from_secs(10);

fn connect(addr: std::net::SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s
}

fn udp(addr: std::net::SocketAddr) -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.connect(addr).unwrap();
    s
}

fn read_exact(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0; n];
    s.read_exact(&mut buf).unwrap();
    buf
}

fn read_to_eof(s: &mut TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    buf
}

/// Reads one length-prefixed DNS message.
fn read_dns(s: &mut TcpStream) -> Message {
    let len = read_exact(s, 2);
    let len = u16::from_be_bytes([len[0], len[1]]) as usize;
    Message::from_bytes(&read_exact(s, len)).unwrap()
}

fn dns_query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut q = Vec::new();
    wire::dns::build_query(id, name, qtype, &mut q).unwrap();
    q
}

fn framed(q: &[u8]) -> Vec<u8> {
    let mut f = (q.len() as u16).to_be_bytes().to_vec();
    f.extend_from_slice(q);
    f
}

#[test]
fn echo_over_tcp_and_udp() {
    let srv = server(&["--udp"]);
    let mut c = connect(srv.addr);
    c.write_all(b"hello, throng").unwrap();
    assert_eq!(read_exact(&mut c, 13), b"hello, throng");
    let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    let mut c2 = c.try_clone().unwrap();
    let writer = std::thread::spawn(move || c2.write_all(&big).map(|_| big));
    let got = read_exact(&mut c, 200_000);
    assert_eq!(got, writer.join().unwrap().unwrap());

    let u = udp(srv.addr);
    u.send(b"datagram").unwrap();
    let mut buf = [0; 64];
    let n = u.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"datagram");
    drop(c);
    let (status, summary) = srv.stop();
    assert!(status.success());
    assert!(summary.contains("accepted 1, closed 1"), "{summary}");
}

#[test]
fn pong_over_tcp_and_udp() {
    let srv = server(&["--mode", "pong", "--udp"]);
    let mut c = connect(srv.addr);
    c.write_all(b"ping 1\nping 2 1700000000.123\r\nhello\npi")
        .unwrap();
    c.write_all(b"ng 3\n").unwrap();
    let want = b"pong 1\npong 2 1700000000.123\r\nerror\npong 3\n";
    assert_eq!(read_exact(&mut c, want.len()), want);

    let u = udp(srv.addr);
    u.send(b"ping 42\n").unwrap();
    let mut buf = [0; 64];
    let n = u.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"pong 42\n");
    assert!(srv.stop().0.success());
}

/// Status, lower-cased headers, body.
type Response = (u16, Vec<(String, String)>, Vec<u8>);

fn http_responses(bytes: &[u8]) -> Vec<Response> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut r = httparse::Response::new(&mut headers);
        let httparse::Status::Complete(n) = r.parse(rest).unwrap() else {
            panic!("incomplete response: {:?}", String::from_utf8_lossy(rest));
        };
        let hs: Vec<(String, String)> = r
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).into_owned(),
                )
            })
            .collect();
        let len: usize = hs
            .iter()
            .find(|(k, _)| k == "content-length")
            .map(|(_, v)| v.parse().unwrap())
            .unwrap();
        out.push((r.code.unwrap(), hs, rest[n..n + len].to_vec()));
        rest = &rest[n + len..];
    }
    out
}

#[test]
fn http_pipelined_keep_alive_then_close() {
    let srv = server(&["--mode", "http", "--body-size", "5"]);
    let mut c = connect(srv.addr);
    let reqs = "GET / HTTP/1.1\r\nHost: a\r\n\r\n\
                POST /form HTTP/1.1\r\nHost: a\r\nContent-Length: 11\r\n\r\nhello=world\
                GET /last HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    // Byte by byte for the first request, then the rest at once.
    for b in reqs.as_bytes()[..10].iter() {
        c.write_all(&[*b]).unwrap();
    }
    c.write_all(&reqs.as_bytes()[10..]).unwrap();
    let all = read_to_eof(&mut c);
    let rs = http_responses(&all);
    assert_eq!(rs.len(), 3);
    for (code, _, body) in &rs {
        assert_eq!(*code, 200);
        assert_eq!(body, b"AAAAA");
    }
    assert!(rs[2]
        .1
        .iter()
        .any(|(k, v)| k == "connection" && v == "close"));
    assert!(srv.stop().0.success());
}

#[test]
fn http_malformed_request_gets_400_and_close() {
    let srv = server(&["--mode", "http"]);
    let mut c = connect(srv.addr);
    c.write_all(b"NOT HTTP AT ALL\r\n\r\n").unwrap();
    let rs = http_responses(&read_to_eof(&mut c));
    assert_eq!(rs.len(), 1);
    assert_eq!(rs[0].0, 400);
    let (_, summary) = srv.stop();
    assert!(summary.contains("malformed input 1"), "{summary}");
}

#[test]
fn dns_pipelined_over_tcp_and_udp() {
    let srv = server(&[
        "--mode",
        "dns",
        "--udp",
        "--dns-answer",
        "198.51.100.7",
        "--dns-ttl",
        "5m",
    ]);
    let mut c = connect(srv.addr);
    let mut batch = Vec::new();
    for id in 0..50u16 {
        let qtype = if id % 2 == 0 { 1 } else { 28 };
        batch.extend(framed(&dns_query(id, "www.example.com", qtype)));
    }
    c.write_all(&batch).unwrap();
    for id in 0..50u16 {
        let m = read_dns(&mut c);
        assert_eq!(m.id, id, "answered in order");
        assert_eq!(m.response_code, ResponseCode::NoError);
        assert_eq!(m.queries[0].name().to_ascii(), "www.example.com.");
        if id % 2 == 0 {
            assert_eq!(m.answers.len(), 1);
            assert_eq!(m.answers[0].ttl, 300);
            match &m.answers[0].data {
                RData::A(a) => assert_eq!(a.0.octets(), [198, 51, 100, 7]),
                other => panic!("not an A record: {other:?}"),
            }
        } else {
            assert!(m.answers.is_empty());
        }
    }
    // A response sent as a query: FORMERR over TCP.
    let mut resp = dns_query(77, "example.com", 1);
    resp[2] |= 0x80;
    c.write_all(&framed(&resp)).unwrap();
    let m = read_dns(&mut c);
    assert_eq!((m.id, m.response_code), (77, ResponseCode::FormErr));

    let u = udp(srv.addr);
    u.send(&dns_query(4242, "udp.example", 1)).unwrap();
    let mut buf = [0; 512];
    let n = u.recv(&mut buf).unwrap();
    let m = Message::from_bytes(&buf[..n]).unwrap();
    assert_eq!(m.id, 4242);
    assert_eq!(m.answers.len(), 1);
    assert!(srv.stop().0.success());
}

#[test]
fn dns_bad_frame_closes_only_its_connection() {
    let srv = server(&["--mode", "dns"]);
    let mut good = connect(srv.addr);
    let mut bad = connect(srv.addr);
    good.write_all(&framed(&dns_query(1, "example.com", 1)))
        .unwrap();
    assert_eq!(read_dns(&mut good).id, 1);
    // A 5-byte frame cannot hold a DNS header.
    bad.write_all(&[0, 5, 1, 2, 3, 4, 5]).unwrap();
    assert_eq!(read_to_eof(&mut bad), b"");
    good.write_all(&framed(&dns_query(2, "example.com", 1)))
        .unwrap();
    assert_eq!(read_dns(&mut good).id, 2);
    // A question that does not parse gets FORMERR, and the connection stays.
    let mut q = dns_query(3, "example.com", 1);
    q[12] = 0xc0;
    good.write_all(&framed(&q)).unwrap();
    assert_eq!(read_dns(&mut good).response_code, ResponseCode::FormErr);
    let (status, summary) = srv.stop();
    assert!(status.success());
    assert!(summary.contains("malformed input 2"), "{summary}");
}

#[test]
fn discard_reads_and_drops() {
    let srv = server(&["--mode", "discard"]);
    let mut c = connect(srv.addr);
    c.write_all(&[7u8; 12345]).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    // The server closes after our FIN without having sent a byte.
    assert_eq!(read_to_eof(&mut c), b"");
    let (_, summary) = srv.stop();
    assert!(summary.contains("in 12.3 kB, out 0 B"), "{summary}");
}

#[test]
fn fixed_reply_on_prefix() {
    let srv = server(&["--mode", "fixed", "--reply", r"HELLO\r\n\x21", "--on", "GO"]);
    let mut c = connect(srv.addr);
    c.write_all(b"GO 1").unwrap();
    assert_eq!(read_exact(&mut c, 8), b"HELLO\r\n!");
    c.write_all(b"not this one").unwrap();
    c.write_all(b"").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_to_eof(&mut c), b"");
    assert!(srv.stop().0.success());
}

#[test]
fn two_thousand_connections_echo_at_once() {
    common::raise_fd_limit();
    let srv = server(&[]);
    let mut conns: Vec<TcpStream> = (0..2000).map(|_| connect(srv.addr)).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        c.write_all(format!("conn {i:05}").as_bytes()).unwrap();
    }
    for (i, c) in conns.iter_mut().enumerate() {
        assert_eq!(read_exact(c, 10), format!("conn {i:05}").as_bytes());
    }
    drop(conns);
    let (status, summary) = srv.stop();
    assert!(status.success());
    assert!(summary.contains("accepted 2000"), "{summary}");
    assert!(summary.contains("peak 2000"), "{summary}");
}

/// Waits up to `ms` for the socket to become writable.
fn writable_within(s: &TcpStream, ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: poll on one pollfd we own.
    unsafe { libc::poll(&mut pfd, 1, ms) == 1 }
}

#[test]
fn client_that_never_reads_cannot_grow_server_memory() {
    let srv = server(&["--max-pending", "64KiB"]);
    let rss_before = srv.rss_kb();
    let hog = connect(srv.addr);
    hog.set_nonblocking(true).unwrap();
    let chunk = vec![b'x'; 64 * 1024];
    let mut sent = 0usize;
    let limit = 256 << 20;
    // Push until the pipe stays full (kernel buffers on both sides plus the
    // server's --max-pending), or 256 MiB if the server buffered without bound.
    while sent < limit {
        match (&hog).write(&chunk) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if !writable_within(&hog, 500) {
                    break;
                }
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(sent < limit, "the server kept reading: {sent} bytes taken");
    let rss_after = srv.rss_kb();
    let growth = rss_after.saturating_sub(rss_before);
    assert!(
        growth < 4 * 1024,
        "server RSS grew by {growth} kB while holding a {sent}-byte backlog"
    );
    // Other clients are still served.
    let mut other = connect(srv.addr);
    other.write_all(b"still here").unwrap();
    assert_eq!(read_exact(&mut other, 10), b"still here");
    drop(hog);
    assert!(srv.stop().0.success());
}

#[test]
fn busy_port_is_a_clear_error_with_exit_2() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (code, _, err) = run(&["server", "--listen", &format!("127.0.0.1:{port}")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("already in use"), "{err}");
    assert!(
        err.contains(&format!("ss -ltnp 'sport = :{port}'")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "one clear line: {err}");
}

#[test]
fn second_server_on_same_port_is_refused() {
    // SO_REUSEPORT would let it join silently and split the traffic.
    let first = server(&[]);
    let (code, _, err) = run(&["server", "--listen", &first.addr.to_string()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("already in use"), "{err}");
    assert!(first.stop().0.success());
}

#[test]
fn usage_errors_exit_2_with_a_hint() {
    // Each case: the server's flags (split at spaces), a word of the hint.
    for (flags, needle) in [
        ("--mode gopher", "gopher"),
        ("--reply x", "--mode fixed"),
        ("--mode fixed", "--reply"),
        ("--backlog 10x", "--backlog"),
        ("--max-pending lots", "64KiB"),
        ("--dns-ttl soon", "2.5s"),
        ("--listen nowhere", "127.0.0.1:4242"),
        ("--mode http --udp", "--udp"),
        (r"--mode fixed --reply \q", "escape"),
    ] {
        let args: Vec<&str> = std::iter::once("server").chain(flags.split(' ')).collect();
        let (code, _, err) = run(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn help_explains_every_option_with_defaults() {
    let (code, out, _) = run(&["server", "--help"]);
    assert_eq!(code, 0);
    for needle in [
        "--listen",
        "[::]:4242",
        "[default: echo]",
        "[default: 65535]",
        "[default: 64KiB]",
        "[default: 192.0.2.1]",
        "[default: 60s]",
        "--stats-json",
        "all cores",
    ] {
        assert!(out.contains(needle), "missing {needle}:\n{out}");
    }
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("server") && out.contains("10k"), "{out}");
}

#[test]
fn sigterm_prints_summary_and_exits_0() {
    let srv = server(&[]);
    assert!(srv
        .banner
        .iter()
        .any(|l| l.contains("connections in this process")));
    assert!(srv.banner.iter().any(|l| l.starts_with("listen backlog")));
    let mut c = connect(srv.addr);
    c.write_all(b"abc").unwrap();
    read_exact(&mut c, 3);
    let (status, summary) = srv.stop();
    assert_eq!(status.code(), Some(0));
    for needle in [
        "stopped after",
        "accepted 1",
        "peak 1",
        "requests",
        "errors       none",
    ] {
        assert!(summary.contains(needle), "missing {needle}: {summary}");
    }
}

#[test]
fn stats_lines_and_json() {
    let dir = std::env::temp_dir().join(format!("throng-stats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("stats.jsonl");
    let mut srv = server(&["--stats", "--stats-json", json.to_str().unwrap()]);
    let mut c = connect(srv.addr);
    c.write_all(b"x").unwrap();
    read_exact(&mut c, 1);
    // The first stats line is printed after one second (JSON written first).
    let mut line = String::new();
    use std::io::BufRead;
    srv.stderr.as_mut().unwrap().read_line(&mut line).unwrap();
    assert!(line.contains("conns 1 (peak 1)"), "{line}");
    assert!(line.contains("listen overflows"), "{line}");
    let text = std::fs::read_to_string(&json).unwrap();
    for l in text.lines() {
        common::conforms("server-stats", &serde_json::from_str(l).unwrap());
    }
    let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(v["connections"], 1);
    assert!(v["unix_s"].as_u64().unwrap() > 1_600_000_000);
    assert!(v.get("listen_overflows").is_some());
    assert!(srv.stop().0.success());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn out_of_fds_refuses_without_spinning_and_recovers() {
    // A hard limit of 64 fds the server cannot raise (CAP_SYS_RESOURCE
    // dropped, root or not).
    let srv = common::server_with_nofile(64, &["--workers", "1"]);
    let max: u64 = srv
        .banner
        .iter()
        .find_map(|l| l.split("at most ").nth(1))
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(
        max <= 64,
        "the server raised its fd limit to {max}: the EMFILE path is not exercised"
    );
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..(max + 20) {
        let mut c = connect(srv.addr);
        c.write_all(b"?").unwrap();
        let mut b = [0u8; 1];
        match c.read(&mut b) {
            Ok(1) => held.push(c),
            Ok(_) => refused += 1,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => refused += 1,
            Err(e) => panic!("connection {i}: {e}"),
        }
    }
    assert!(refused >= 10, "refused {refused}, held {}", held.len());
    // Not spinning: little CPU over a quiet half second (a measurement
    // window: there is no event to wait for).
    let cpu0 = srv.cpu_ticks();
    std::thread::sleep(Duration::from_millis(500));
    let cpu = srv.cpu_ticks() - cpu0;
    assert!(cpu < 20, "server burned {cpu} ticks while idle out of fds");
    // Existing connections are still served.
    held[0].write_all(b"!").unwrap();
    assert_eq!(read_exact(&mut held[0], 1), b"!");
    // Free some fds: new connections are accepted again (the server may see
    // our SYN before our FINs, so a few attempts may still be shed).
    held.truncate(held.len() - 5);
    let accepted_again = (0..50).any(|_| {
        let mut c = connect(srv.addr);
        c.write_all(b"back").unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).is_ok() && &b == b"back"
    });
    assert!(
        accepted_again,
        "no connection accepted after fds were freed"
    );
    let (status, summary) = srv.stop();
    assert!(status.success());
    assert!(summary.contains("refused: out of fds"), "{summary}");
}

#[test]
fn privileged_port_without_root_exits_2() {
    let Some(setpriv) = common::which("setpriv") else {
        common::skip("setpriv is not installed", "apt-get install util-linux");
        return;
    };
    let (code, _, err) = common::output(
        Command::new(setpriv)
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
            .args(["server", "--listen", "127.0.0.1:80"]),
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("privileged"), "{err}");
}

#[test]
fn unspecified_ipv6_listener_is_dual_stack() {
    let mut cmd = Command::new(BIN);
    cmd.arg("server");
    // server_with adds --listen 127.0.0.1:0 first; this one is the second.
    let srv = server_with(&mut cmd, &["--listen", "[::]:0"]);
    let v6_port = srv
        .banner
        .iter()
        .filter_map(|l| l.strip_prefix("listening on [::]:"))
        .find_map(|l| l.split(' ').next()?.parse::<u16>().ok())
        .expect("a [::] listener in the banner");
    for addr in [format!("127.0.0.1:{v6_port}"), format!("[::1]:{v6_port}")] {
        let Ok(mut c) = TcpStream::connect(&addr) else {
            assert!(addr.starts_with('['), "IPv4 through [::] failed");
            common::skip(
                &format!("no IPv6 loopback here for {addr}"),
                "sysctl net.ipv6.conf.lo.disable_ipv6=0",
            );
            continue;
        };
        c.write_all(b"both").unwrap();
        assert_eq!(read_exact(&mut c, 4), b"both");
    }
    assert!(srv.stop().0.success());
}
