//! Server push: `throng server --mode push` sends each client a numbered,
//! stamped message every period; `throng client --proto push` counts what
//! arrives. Exact counts over TCP, loss through a lossy UDP relay, a slow
//! client the server drops messages for (its memory bounded), a push
//! server throng did not write (Python, lines), and the merge of two
//! segments.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{banner_addr, server, temp_dir, Client, Parts, RunResult, BIN};
use serde_json::Value;
use throng::outcome::PushResult;
use throng::verdict::{Code, Side};

/// `throng client TARGET --proto push <flags>`, run to its end.
fn push_client(name: &str, target: impl ToString, flags: &str) -> Client {
    Client::new(name)
        .arg(target.to_string())
        .args(["--proto", "push"])
        .flags(flags)
}

/// received + lost = expected, and each connection's expected count is
/// its lifetime in periods, within one at each edge.
fn assert_accounted(r: &RunResult, conns: u64, periods: u64, what: &str) {
    let p = r.push();
    let (received, lost, expected) = (p.received, p.lost, p.expected);
    assert_eq!(received + lost, expected, "{what}: {p:?}");
    let (lo, hi) = (conns * (periods - 2), conns * (periods + 2));
    assert!(
        (lo..=hi).contains(&expected),
        "{what}: expected {expected} not in {lo}..={hi}"
    );
}

#[test]
fn tcp_counts_are_exact_and_the_server_kept_its_period() {
    let srv = server(&["--mode", "push", "--every", "10ms", "--size", "64"]);
    let target = banner_addr(&srv, "127.0.0.1");
    let (r, out) = push_client("push-tcp", &target, "--every 10ms -c 20 -T 2s").ok();
    assert_accounted(&r, 20, 200, "tcp");
    assert_eq!(r.push().lost, 0, "{:?}", r.push());
    assert_eq!(r.push().duplicates, 0);
    assert_eq!(r.push().out_of_order, 0);
    assert_eq!(r.connections.verified, 20);
    // Same host: the one-way delay from the monotonic stamp.
    assert_eq!(r.push().delay_clock.as_deref(), Some("monotonic"));
    assert!(r.push().delay_us.as_ref().unwrap().count > 0);
    // The gaps are the period.
    let p50 = r.push().gap_us.p50;
    assert!((9_000..=11_000).contains(&p50), "gap p50 {p50} µs");
    assert!(out.contains("the server kept its period"), "{out}");
    let verdict = r.verdict.as_ref().expect("a verdict");
    assert_eq!(verdict.side, Side::None, "{verdict:?}");
    assert!(!verdict.has(Code::PushPeriod), "{verdict:?}");
    assert!(!out.contains("got no message in all their time"), "{out}");
    assert!(r.per_second[1].push_received.unwrap() > 0);
    assert!(r.per_second[1].push_delay_p99_us.is_some());
    assert_eq!(r.checks[0].expr, "push.received>=99%");
    let (_, summary) = srv.stop();
    assert!(summary.contains("  push         due "), "{summary}");
}

/// Issue 26: a push server killed 1.5 s into a 4 s TCP run was "received
/// 747 of 747 expected (100%) ... the server kept its period", PASS: its
/// closed connections counted nothing after their close.
#[test]
fn tcp_a_server_that_dies_owes_the_periods_to_the_end() {
    let srv = server(&["--mode", "push", "--every", "10ms"]);
    let target = banner_addr(&srv, "127.0.0.1");
    let run = push_client("push-dies", &target, "--every 10ms -c 5 -T 4s")
        // The first second's line: messages are arriving.
        .start("push received");
    common::signal(srv.pid(), libc::SIGKILL);
    let ran = run.wait();
    let (all, summary) = (&ran.out, &ran.stdout);
    let r = ran.exits(1).result();
    // Expected is the whole run's periods, received + lost.
    assert_accounted(&r, 5, 400, "server killed");
    let (received, lost) = (r.push().received, r.push().lost);
    // Killed after the first second, about three before the end: at
    // least a quarter of the run was owed on each connection.
    assert!(received >= 5 * 90, "{all}");
    assert!(lost * 4 >= received + lost, "{:?}", r.push());
    assert_eq!(r.push().connections_with_loss, 5, "{all}");
    assert!(!summary.contains("the server kept its period"), "{all}");
    assert!(summary.contains("did not keep its period"), "{all}");
    assert!(summary.contains("FAIL  push.received>=99%"), "{all}");
}

#[test]
fn udp_through_a_relay_that_drops_every_tenth_counts_ten_percent_lost() {
    let srv = server(&["--mode", "push", "--udp", "--every", "10ms"]);
    let upstream: SocketAddr = banner_addr(&srv, "127.0.0.1").parse().unwrap();
    let dropped = Arc::new(AtomicU64::new(0));
    let relay = lossy_relay(upstream, 10, dropped.clone());
    let checks = "--check none --check push.lost>=9% --check push.lost<=11%";
    let (r, out) = push_client(
        "push-udp",
        relay,
        "--transport udp --every 10ms -c 10 -T 3s",
    )
    .flags(checks)
    .ok();
    assert_accounted(&r, 10, 300, "udp");
    // The client's count is the relay's, give or take what was on its way
    // when the run ended.
    let lost = r.push().lost;
    let gone = dropped.load(Relaxed);
    assert!(
        lost.abs_diff(gone) <= 10,
        "client lost {lost}, relay dropped {gone}"
    );
    assert_eq!(r.push().connections_with_loss, 10);
    assert!(out.contains("did not keep its period"), "{out}");
    // The client said bye: the server holds no subscriber.
    let (_, summary) = srv.stop();
    assert!(
        summary.contains("UDP subscriptions 10, expired 0"),
        "{summary}"
    );
}

/// A UDP relay on 127.0.0.1:0 to `upstream`: one upstream socket per
/// client; every `nth` datagram from the server to a client is dropped
/// (counted in `dropped`).
fn lossy_relay(upstream: SocketAddr, nth: u64, dropped: Arc<AtomicU64>) -> SocketAddr {
    let front = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = front.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut ups: HashMap<SocketAddr, UdpSocket> = HashMap::new();
        let mut buf = [0u8; 2048];
        loop {
            let Ok((len, from)) = front.recv_from(&mut buf) else {
                return;
            };
            let up = ups.entry(from).or_insert_with(|| {
                let up = UdpSocket::bind("127.0.0.1:0").unwrap();
                up.connect(upstream).unwrap();
                let back = up.try_clone().unwrap();
                let front = front.try_clone().unwrap();
                let dropped = dropped.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 2048];
                    let mut i = 0u64;
                    while let Ok(len) = back.recv(&mut buf) {
                        i += 1;
                        if i.is_multiple_of(nth) {
                            dropped.fetch_add(1, Relaxed);
                            continue;
                        }
                        let _ = front.send_to(&buf[..len], from);
                    }
                });
                up
            });
            let _ = up.send(&buf[..len]);
        }
    });
    addr
}

#[test]
fn a_client_that_never_reads_loses_messages_not_server_memory() {
    let dir = temp_dir("push-slow");
    let stats = dir.join("stats.jsonl");
    let srv = server(&[
        "--mode",
        "push",
        "--every",
        "1ms",
        "--size",
        "16KiB",
        "--stats-json",
        stats.to_str().unwrap(),
    ]);
    let target = banner_addr(&srv, "127.0.0.1");
    // Let the server settle, then take its memory before the slow clients.
    let before = srv.rss_kb();
    let slow: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(&target).unwrap())
        .collect();
    // 20 clients x 16 KiB x 1000/s = 320 MB/s offered, read by nobody.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut skipped = 0;
    while skipped < 1000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        skipped = std::fs::read_to_string(&stats)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|s| s["push"]["skipped_full"].as_u64().unwrap_or(0))
            .sum();
    }
    assert!(
        skipped >= 1000,
        "the server dropped {skipped} messages for full sockets"
    );
    // Each connection holds at most one message's rest beyond what the
    // kernel's buffers took.
    let grown = srv.rss_kb().saturating_sub(before);
    assert!(
        grown < 8 * 1024,
        "the server grew {grown} kB for 20 clients that never read"
    );
    drop(slow);
    let (_, summary) = srv.stop();
    assert!(
        summary.contains("on full sockets (TCP: clients reading too slowly"),
        "{summary}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A push server throng did not write: Python's asyncio, sending
/// `<seq> tick\n` every PERIOD seconds (its argument) to each client from 0.
const LINE_SERVER: &str = r#"
import asyncio, sys
PERIOD = float(sys.argv[1])
async def serve(reader, writer):
    seq = 0
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        while True:
            writer.write(b"%d tick\n" % seq)
            await writer.drain()
            seq += 1
            await asyncio.sleep(max(0, start + seq * PERIOD - loop.time()))
    except (ConnectionError, asyncio.CancelledError):
        pass
async def main():
    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await srv.serve_forever()
asyncio.run(main())
"#;

/// A peer that writes `bytes` on each connection, then holds it `secs`
/// seconds (the client's run ends first).
fn writes_then_holds(bytes: &'static [u8], secs: u64) -> SocketAddr {
    common::peer(move |mut s| {
        let _ = s.write_all(bytes);
        // The hold is the condition: the connection stays open, silent.
        std::thread::sleep(Duration::from_secs(secs));
    })
}

/// Starts [`LINE_SERVER`] at `period`; its process and address.
fn line_server(period: &str) -> (common::Daemon, String) {
    let mut py = common::Daemon(
        Command::new("python3")
            .args(["-c", LINE_SERVER, period])
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .expect("python3"),
    );
    let mut port = String::new();
    BufReader::new(py.0.stdout.take().unwrap())
        .read_line(&mut port)
        .unwrap();
    (py, format!("127.0.0.1:{}", port.trim()))
}

#[test]
fn reads_numbered_lines_from_a_push_server_it_did_not_write() {
    let (py, target) = line_server("0.01");
    let (r, out) = push_client(
        "push-line",
        &target,
        "--push-format line --every 10ms -c 10 -T 2s",
    )
    .ok();
    drop(py);
    assert_accounted(&r, 10, 200, "line");
    assert_eq!(r.push().lost, 0, "{:?}", r.push());
    // No stamps in a line: no delay.
    assert!(r.push().delay_us.is_none());
    assert!(out.contains("push          received"), "{out}");
}

/// A server that sends every 20 ms when its clients were promised 10 ms
/// skips no number: the connections' time says half is missing.
#[test]
fn a_server_slower_than_its_period_loses_what_it_never_sent() {
    let (py, target) = line_server("0.02");
    let checks = "--check none --check push.lost>=45% --check push.lost<=55%";
    let (r, out) = push_client(
        "push-slow-server",
        &target,
        "--push-format line --every 10ms -c 10 -T 2s",
    )
    .flags(checks)
    .ok();
    drop(py);
    assert_accounted(&r, 10, 200, "slow server");
    assert!(out.contains("did not keep its period"), "{out}");
    // The judgement is the verdict's: the server's side, with its share.
    let verdict = r.verdict.as_ref().expect("a verdict");
    let cause = verdict
        .cause(Code::PushPeriod)
        .unwrap_or_else(|| panic!("no push_period cause: {verdict:?}"));
    assert_eq!(cause.side, Side::Server, "{cause:?}");
    let share = cause.figures["received_share"];
    assert!((0.45..=0.55).contains(&share), "{cause:?}");
}

#[test]
fn bytes_that_are_not_push_messages_are_malformed() {
    let addr = writes_then_holds(b"HTTP/1.1 200 OK\r\n\r\n", 3);
    let ran = push_client("push-garbage", addr, "-c 3 -T 1s --max-failures 10").run();
    let (r, out, code) = (ran.result(), &ran.out, ran.code);
    assert_eq!(r.push().malformed, 3, "{out}");
    assert_eq!(r.push().received, 0);
    // The client closed them: the hint says whose bytes were wrong, not
    // that the server reset them.
    assert!(out.contains("the client closed these connections"), "{out}");
    assert_ne!(code, 0, "nothing arrived: the default check fails");
}

#[test]
fn two_segments_merge_into_the_sums_of_their_counts() {
    let srv = server(&["--mode", "push", "--every", "10ms"]);
    let target = banner_addr(&srv, "127.0.0.1");
    let dir = temp_dir("push-merge");
    let part = |k: u32| {
        let json = dir.join(format!("{k}.json"));
        let child = common::Daemon(
            Command::new(BIN)
                .args(["client", &target, "--proto", "push", "--every", "10ms"])
                .args(["-c", "20", "-T", "2s", "-q", "--segment", &format!("{k}/2")])
                .args(["--json", json.to_str().unwrap()])
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        );
        (child, json)
    };
    let parts = [part(1), part(2)];
    let mut files = Vec::new();
    for (mut child, json) in parts {
        assert!(child.wait().unwrap().success());
        files.push(json);
    }
    let (a, b) = (common::outcome(&files[0]), common::outcome(&files[1]));
    let merged = dir.join("m.json");
    let status = Command::new(BIN)
        .args([
            "merge",
            files[0].to_str().unwrap(),
            files[1].to_str().unwrap(),
        ])
        .args(["--json", merged.to_str().unwrap()])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let m = common::outcome(&merged);
    type Count = fn(&PushResult) -> u64;
    let counts: [(&str, Count); 5] = [
        ("received", |p| p.received),
        ("lost", |p| p.lost),
        ("expected", |p| p.expected),
        ("out_of_order", |p| p.out_of_order),
        ("duplicates", |p| p.duplicates),
    ];
    for (key, count) in counts {
        assert_eq!(
            count(m.push()),
            count(a.push()) + count(b.push()),
            "push.{key}"
        );
    }
    let histograms: [(&str, Count); 3] = [
        ("gap_us", |p| p.gap_us.count),
        ("jitter_us", |p| p.jitter_us.count),
        ("delay_us", |p| p.delay_us.as_ref().unwrap().count),
    ];
    for (h, count) in histograms {
        assert_eq!(
            count(m.push()),
            count(a.push()) + count(b.push()),
            "push.{h}.count"
        );
    }
    assert_accounted(&m, 20, 200, "merged");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn push_flags_elsewhere_are_refused_with_the_fix() {
    let (code, _, err) = common::run(&["client", "--every", "10ms", "-c", "1", "-T", "1s"]);
    assert_eq!(code, 2);
    assert!(err.contains("add --proto push"), "{err}");
    let (code, _, err) = common::run(&["client", "--proto", "push", "-r", "10", "-T", "1s"]);
    assert_eq!(code, 2);
    assert!(err.contains("--proto push sends no queries"), "{err}");
    let (code, _, err) = common::run(&["server", "--burst", "3"]);
    assert_eq!(code, 2);
    assert!(err.contains("add --mode push"), "{err}");
}

/// Regression: a server that sends the moment it accepts can have its
/// bytes in the same epoll event as the connect's completion; the client
/// handled only the completion, and the bytes' one edge was lost (some
/// connections never read their first message).
#[test]
fn a_server_that_speaks_first_is_read_on_every_connection() {
    let addr = writes_then_holds(b"0 hello\n", 3);
    let flags = "--push-format line --every 10s -c 50 -T 1s";
    let (r, out) = push_client("push-first", addr, flags).ok();
    assert_eq!(r.push().received, 50, "{out}");
    assert_eq!(r.connections.verified, 50);
}

#[test]
fn udp_messages_larger_than_two_kib_arrive_whole() {
    let srv = server(&[
        "--mode", "push", "--udp", "--every", "10ms", "--size", "4000",
    ]);
    let target = banner_addr(&srv, "127.0.0.1");
    let flags = "--transport udp --every 10ms -c 5 -T 1s";
    let (r, _) = push_client("push-udp-large", &target, flags).ok();
    assert_eq!(r.push().malformed, 0, "{:?}", r.push());
    assert_accounted(&r, 5, 100, "udp 4 KB");
}

#[test]
fn a_burst_is_due_together() {
    let srv = server(&["--mode", "push", "--every", "10ms", "--burst", "3"]);
    let target = banner_addr(&srv, "127.0.0.1");
    let flags = "--every 10ms --burst 3 -c 5 -T 2s";
    let (r, _) = push_client("push-burst", &target, flags).ok();
    assert_eq!(r.push().lost, 0, "{:?}", r.push());
    // Three a period, and the two after the first of each burst are not
    // a period late.
    let expected = r.push().expected;
    assert!(
        (5 * 3 * 198..=5 * 3 * 202).contains(&expected),
        "expected {expected}"
    );
    let p90 = r.push().jitter_us.p90;
    assert!(p90 < 5_000, "jitter p90 {p90} µs");
}

#[test]
fn a_client_stalled_across_its_end_counts_what_waited_in_its_sockets() {
    // The client is stopped from 0.3 s into its run to past its -T (its
    // epoll_wait then returns EINTR, and the end is seen before the next
    // poll): the server's messages of those seconds wait in the client's
    // sockets (some 40 KB each, under the default receive buffer). They
    // came before the end, so none is lost.
    let srv = server(&["--mode", "push", "--every", "10ms", "--burst", "3"]);
    let target = banner_addr(&srv, "127.0.0.1");
    let run = push_client("push-stalled", &target, "--every 10ms --burst 3 -c 5 -T 1s")
        .start("ramp done");
    std::thread::sleep(Duration::from_millis(300));
    run.signal(libc::SIGSTOP);
    // (No readiness signal for a stopped process's clock: the stop must
    // outlast the run's -T.)
    std::thread::sleep(Duration::from_millis(2500));
    run.signal(libc::SIGCONT);
    let ran = run.wait();
    let r = ran.exits(0).result();
    let p = r.push();
    assert_eq!(p.lost, 0, "{}", ran.json["push"]);
    assert_eq!(p.received, p.expected, "{}", ran.json["push"]);
    assert!(p.received >= 5 * 3 * 100, "{}", ran.json["push"]);
    drop(srv);
}

#[test]
fn numbers_no_period_explains_and_stamps_from_the_future_are_not_believed() {
    // Lines 0, 1, a number near 2^64, 2: the wild one is malformed, the
    // rest arrive in order with nothing lost.
    let addr = writes_then_holds(b"0 a\n1 b\n18446744073709551614 c\n2 d\n", 2);
    let flags = "--push-format line --every 10s -c 1 -T 1s";
    let ran = push_client("push-wild", addr, flags).run();
    let (r, out) = (ran.result(), ran.out);
    assert_eq!(r.push().malformed, 1, "{out}");
    assert_eq!(r.push().received, 3);
    assert_eq!(r.push().lost, 0);
    // A throng header stamped far ahead of this host's monotonic clock:
    // not this host's clock (a forwarded port): no delay.
    let addr = common::peer(|mut s| {
        let mut m = Vec::new();
        for seq in 0u64..2 {
            m.extend_from_slice(b"THRP");
            m.extend_from_slice(&40u32.to_be_bytes());
            m.extend_from_slice(&seq.to_be_bytes());
            m.extend_from_slice(&(u64::MAX / 2).to_be_bytes());
            m.extend_from_slice(&0u64.to_be_bytes());
            m.extend_from_slice(&[b'p'; 8]);
        }
        let _ = s.write_all(&m);
        std::thread::sleep(Duration::from_secs(2));
    });
    let ran = push_client("push-ahead", addr, "--every 10s -c 1 -T 1s").run();
    let (r, out) = (ran.result(), ran.out);
    assert_eq!(r.push().stamps_ahead, 2, "{out}");
    assert!(out.contains("delay       not measured"), "{out}");
}

/// A server that numbers its lines wrong: one twice, two swapped. The
/// whole counts them, and so do the seconds (`per_second[].push_duplicates`,
/// `push_out_of_order`), adding up to the whole.
#[test]
fn duplicates_and_disorder_are_counted_in_their_second() {
    let addr = common::peer(|mut s| {
        let _ = s.write_all(b"0\n1\n1\n3\n2\n4\n");
        // Held until the client closes.
        let mut sink = [0u8; 64];
        while matches!(std::io::Read::read(&mut s, &mut sink), Ok(n) if n > 0) {}
    });
    let ran = push_client("push-disorder", addr, "--push-format line -c 1 -T 2s").run();
    let (v, out) = (&ran.json, &ran.out);
    let p = &v["push"];
    assert_eq!(p["duplicates"], 1, "{out}");
    assert!(p["out_of_order"].as_u64().unwrap() >= 1, "{out}");
    for (k, whole) in [
        ("push_duplicates", "duplicates"),
        ("push_out_of_order", "out_of_order"),
        ("push_received", "received"),
    ] {
        let per: u64 = v["per_second"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s[k].as_u64())
            .sum();
        assert_eq!(per, p[whole].as_u64().unwrap(), "{k}: {out}");
    }
}
