//! `throng client` queries end to end: every protocol against `throng
//! server`, out-of-order and corrupting peers written here, rates, windows,
//! closed loop, schedules, timeouts, recycling, coordinated omission, the
//! RTT log.

mod common;

use std::fmt::Display;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::thread;
use std::time::Duration;

use common::{exits, says, sent_balances, server, temp_dir, Client, Parts, RunResult, BIN};
use hickory_proto::op::{Message, MessageType};
use hickory_proto::serialize::binary::{BinDecodable, BinEncodable};
use serde_json::Value;
use throng::scenario::Query;

/// Every query answered or still in flight at the end (at least one
/// sent), none timed out, no error.
#[track_caller]
fn clean(r: &RunResult, out: &str) {
    sent_balances(r, 1, out);
    assert_eq!(r.q().timed_out, 0, "{out}");
    assert_eq!(r.errors(), 0, "{out}");
}

/// The same with `--rtt-log`, exit 0: the result, the output and the log.
#[track_caller]
fn logged(name: &str, target: impl Display, flags: &str) -> (RunResult, String, String) {
    let client = Client::new(name).arg(target.to_string()).rtt_log();
    let ran = client.flags(flags).run();
    (ran.exits(0).result(), ran.out, ran.rtt_log)
}

/// A table's case: `throng client TARGET FLAGS`, which must exit 0; its
/// result, the result as written, and its output after the case's name.
#[track_caller]
fn case(name: &str, target: impl Display, flags: &str) -> (RunResult, Value, String) {
    let ran = Client::new(name).arg(target.to_string()).flags(flags).run();
    let out = format!("{name}: {}", ran.out);
    assert_eq!(ran.code, 0, "exit code\n{out}");
    (ran.result(), ran.json, out)
}

/// What a protocol's case checks beyond [`clean`]: the result, the result
/// as written, the output (the case named first).
type Check = fn(&RunResult, &Value, &str);

/// Each protocol against the `throng server` mode that speaks it: the run
/// passes, every query answered, none lost, no error; and what each
/// protocol's answers carry.
#[test]
fn each_protocol_against_its_server_mode_is_answered_cleanly() {
    let cases: [(&str, &[&str], &str, Check); 5] = [
        (
            "dns_against_dns_mode",
            &["--mode", "dns"],
            "-c 20 -r 2000 -T 1s --qtype AAAA",
            dns_result_is_whole,
        ),
        (
            "echo_with_validation",
            &[],
            "--proto echo --size 300 --validate -c 10 -r 1000 -T 1s",
            |r, _, out| {
                // Every byte came back but those of queries still in
                // flight at the end.
                let (out_b, in_b) = (r.q().bytes_out, r.q().bytes_in);
                let short = r.q().in_flight_at_end * 300;
                assert!(
                    in_b <= out_b && out_b - in_b <= short,
                    "{out_b} {in_b}: {out}"
                );
            },
        ),
        (
            "ping_against_pong_mode",
            &["--mode", "pong"],
            "--proto ping -c 10 -r 1000 -T 1s",
            |_, _, _| {},
        ),
        (
            "http_against_http_mode",
            &["--mode", "http", "--body-size", "100"],
            "--proto http -c 10 -r 1000 -T 1s",
            |r, _, out| all_200(r, out),
        ),
        (
            "raw_with_marker_against_fixed_mode",
            &["--mode", "fixed", "--reply", r"OK\r\n"],
            r"--proto raw -m hello\n --marker \r\n -c 5 --closed-loop -T 1s",
            |r, _, out| assert!(r.q().answered > 100, "{out}"),
        ),
    ];
    for (name, mode, flags, check) in cases {
        let srv = server(mode);
        let (r, v, out) = case(name, srv.addr, flags);
        clean(&r, &out);
        check(&r, &v, &out);
    }
}

/// Every answer an HTTP 200.
#[track_caller]
fn all_200(r: &RunResult, out: &str) {
    let ok = r.q().http_status.get("200").copied();
    assert_eq!(ok, Some(r.q().answered), "{out}");
}

/// A DNS run's result: every answer NOERROR, each connection verified by
/// its first answer, and the documented keys there.
fn dns_result_is_whole(r: &RunResult, v: &Value, out: &str) {
    let noerror = r.dns().rcodes.get("NOERROR").copied();
    assert_eq!(noerror, Some(r.q().answered), "{out}");
    // With traffic, each connection's first answer verifies it (no probe).
    assert_eq!(r.connections.verified, 20, "{out}");
    let l = &v["latency"];
    for key in [
        "p50", "p90", "p99", "p999", "p9999", "max", "mean", "stdev", "hdr",
    ] {
        assert!(!l["response_time_us"][key].is_null(), "{key}: {out}");
        assert!(!l["service_time_us"][key].is_null(), "{key}: {out}");
        assert!(!l["send_lag_us"][key].is_null(), "{key}: {out}");
    }
    for key in [
        "sent",
        "answered",
        "timed_out",
        "rate_target",
        "rate_achieved",
    ] {
        assert!(!v["queries"][key].is_null(), "{key}: {out}");
    }
    let s = &v["per_second"][0];
    let second = "target sent answered timed_out errors p50_us p99_us service_p50_us \
                  service_p99_us service_hdr";
    for key in second.split_whitespace() {
        assert!(!s[key].is_null(), "per_second.{key}: {s}\n{out}");
    }
    // Each second's answers have a response and a service time each.
    let len = |h: &Option<String>| {
        h.as_deref()
            .map_or(0, |h| throng::metrics::decode_histogram(h).unwrap().len())
    };
    for s in &r.per_second {
        assert_eq!(len(&s.service_hdr), len(&s.hdr), "{s:?}\n{out}");
    }
}

/// A peer that answers request number `i` on a connection (each ended by
/// `end`) with `reply(i)`, written in pieces of `piece` bytes with a pause
/// between: the client reads each reply in many reads, split anywhere.
fn dribbling_server(end: &'static [u8], reply: fn(usize) -> Vec<u8>, piece: usize) -> SocketAddr {
    common::peer(move |mut s| {
        let _ = s.set_nodelay(true);
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let mut i = 0;
        loop {
            while let Some(at) = got.windows(end.len()).position(|w| w == end) {
                got.drain(..at + end.len());
                i += 1;
                for p in reply(i).chunks(piece) {
                    if s.write_all(p).is_err() {
                        return;
                    }
                    thread::sleep(Duration::from_micros(100));
                }
            }
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
}

/// A chunked HTTP reply with a trailer: long and short in turn.
fn chunked_reply(i: usize) -> Vec<u8> {
    let mut r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..[40, 1][i % 2] {
        r.extend_from_slice(b"3e8;x=1\r\n");
        r.resize(r.len() + 1000, b'c');
        r.extend_from_slice(b"\r\n");
    }
    r.extend_from_slice(b"0\r\nX-Trailer: y\r\n\r\n");
    r
}

/// Near misses of the marker `\r\n.\r\n` all along, the marker at the
/// end; long and short replies in turn.
fn marker_reply(i: usize) -> Vec<u8> {
    let mut r = b"\r\n.x".repeat([500, 1][i % 2]);
    r.extend_from_slice(b"\r\n.\r\n");
    r
}

/// Replies dribbled in pieces (a chunked HTTP body; a raw reply and its
/// marker): each is read whole however it is split, every query answered.
#[test]
fn replies_split_over_many_reads_are_whole() {
    type Peer = fn() -> SocketAddr;
    type Then = fn(&RunResult, &str);
    let cases: [(&str, Peer, &str, Then); 2] = [
        (
            "http-chunked-reads",
            || dribbling_server(b"\r\n\r\n", chunked_reply, 701),
            "--proto http -c 2 --closed-loop -T 1s",
            all_200,
        ),
        (
            "raw-marker-reads",
            || dribbling_server(b"hello\n", marker_reply, 97),
            r"--proto raw -m hello\n --marker \r\n.\r\n -c 2 --closed-loop -T 1s",
            |_, _| {},
        ),
    ];
    for (name, peer, flags, check) in cases {
        let (r, _, out) = case(name, peer(), flags);
        clean(&r, &out);
        assert!(r.q().answered > 10, "{out}");
        check(&r, &out);
    }
}

/// Reads length-prefixed DNS queries, checks each with hickory-proto, and
/// answers every `BATCH` of them in reverse order.
fn reversing_dns_server() -> SocketAddr {
    const BATCH: usize = 8;
    common::peer(|mut s| {
        let mut held = Vec::new();
        let mut first = true;
        loop {
            let mut len = [0u8; 2];
            if s.read_exact(&mut len).is_err() {
                return;
            }
            let mut msg = vec![0; u16::from_be_bytes(len) as usize];
            if s.read_exact(&mut msg).is_err() {
                return;
            }
            let m = Message::from_bytes(&msg).expect("throng's query parses");
            assert_eq!(m.message_type, MessageType::Query);
            assert_eq!(m.queries.len(), 1);
            held.push(m.into_response().to_bytes().unwrap());
            // The probe comes alone; queries come in batches.
            if held.len() == BATCH || std::mem::take(&mut first) {
                for r in held.drain(..).rev() {
                    let mut f = (r.len() as u16).to_be_bytes().to_vec();
                    f.extend(r);
                    if s.write_all(&f).is_err() {
                        return;
                    }
                }
            }
        }
    })
}

#[test]
fn dns_out_of_order_responses_are_matched() {
    // The server answers only whole batches: the part of a batch sent
    // before the end is never answered, so do not wait it out (--drain).
    let flags = "-c 4 --closed-loop --window 8 -T 1s --qname {rand}.example.org --drain 200ms";
    let (r, out) = exits("reverse", reversing_dns_server(), flags, 0);
    assert!(r.q().answered > 1000, "{out}");
    assert_eq!(r.errors(), 0, "{out}");
    assert_eq!(r.q().timed_out, 0, "{out}");
    assert_eq!(r.dns().rcodes.get("NOERROR").copied(), Some(r.q().answered));
}

#[test]
fn validate_catches_a_corrupting_echo_server() {
    // Echoes 64-byte messages, but flips the last byte of each (the probe
    // included).
    let corrupting = common::peer(|mut s| {
        let mut msg = [0u8; 64];
        while s.read_exact(&mut msg).is_ok() {
            msg[63] ^= 0xff;
            if s.write_all(&msg).is_err() {
                return;
            }
        }
    });
    // Every reply corrupt: answered, each a failed answer (once: it was
    // also an error, answered + errors > sent), and the run fails.
    let flags = "--proto echo --validate -c 2 -r 200 -T 1s";
    let (r, out) = exits("corrupt", corrupting, flags, 1);
    let mismatches = r.q().failed_answers.get("mismatch").copied().unwrap();
    assert!(mismatches > 100, "{out}");
    assert_eq!(mismatches, r.q().answered, "every reply was corrupt: {out}");
    assert_eq!(r.q().errors["mismatch"], 0, "{out}");
    assert_eq!(r.q().ok, Some(0), "{out}");
    assert_eq!(
        r.connections.verified, 2,
        "a reply, even corrupt, verifies: {out}"
    );
    says(&out, &["FAIL  queries.ok>=99%", "mismatch"], &[]);
}

/// An HTTP server that waits for two requests on each connection, answers
/// the first with `Connection: close` and closes: the second crossed that
/// answer on the wire, as a request sent just before a keep-alive limit's
/// close does.
fn closing_after_one_http_server() -> SocketAddr {
    common::peer(|mut s| {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while got.windows(4).filter(|w| w == b"\r\n\r\n").count() < 2 {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let _ =
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n");
    })
}

#[test]
fn a_query_that_crossed_the_servers_close_is_sent_again() {
    let addr = closing_after_one_http_server();
    // The last query of each connection waits for a second request that
    // never comes: no need to wait out its timeout (--drain); and those two
    // of ~200 are about 1%, so the default check is no verdict here (the
    // counts below are).
    let flags = "--proto http -c 2 --reconnect -r 200 -T 1s --drain 300ms --check none";
    let (r, out) = exits("crossed-close", addr, flags, 0);
    let answered = r.q().answered;
    assert!(answered > 50, "{out}");
    // Every connection answered one query and closed as it said it would:
    // none failed, no query was lost with its connection; each query the
    // server left was sent again and counted once. (At the end a couple
    // per connection may still wait for its replacement: due, never sent.)
    let peer_closed = r.connections.peer_closed;
    assert!(
        peer_closed + 2 >= answered && peer_closed <= answered,
        "{out}"
    );
    let errs = &r.q().errors;
    assert_eq!(errs.get("conn_lost").copied().unwrap_or(0), 0, "{out}");
    let unsent = errs.get("no_connection").copied().unwrap_or(0);
    assert!(unsent * 10 <= answered && r.errors() == unsent, "{out}");
    assert!(r.connections.failed.values().all(|&n| n == 0));
    assert_eq!(
        r.q().sent,
        answered + r.q().timed_out + r.q().in_flight_at_end,
        "{out}"
    );
}

/// (connection, sent_us, rtt_us) of every answered query in an RTT log.
fn log_rows(log: &str) -> Vec<(u64, u64, u64)> {
    log.lines()
        .skip(1)
        .filter(|l| !l.ends_with(",timeout"))
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[2].parse().unwrap(),
                f[5].parse().unwrap(),
                f[6].parse().unwrap(),
            )
        })
        .collect()
}

/// Largest number of queries of one connection in flight at once, from
/// the log (sent_us and rtt_us in whole microseconds).
fn max_in_flight(rows: &[(u64, u64, u64)]) -> usize {
    let mut events: Vec<(u64, u64, i32)> = Vec::new();
    for &(c, sent, rtt) in rows {
        events.push((c, sent * 2 + 1, 1));
        events.push((c, (sent + rtt) * 2, -1));
    }
    events.sort();
    let mut best = 0;
    let mut cur = 0i32;
    let mut conn = u64::MAX;
    for (c, _, d) in events {
        if c != conn {
            conn = c;
            cur = 0;
        }
        cur += d;
        best = best.max(cur);
    }
    best as usize
}

#[test]
fn closed_loop_window_1_and_8() {
    let srv = server(&["--mode", "dns"]);
    let (r, out, log) = logged("closed1", srv.addr, "-c 4 --closed-loop -T 1s");
    clean(&r, &out);
    assert!(max_in_flight(&log_rows(&log)) <= 1, "window 1 exceeded");
    assert!(r.q().rate_target.is_none());
    let (r, out, log) = logged("closed8", srv.addr, "-c 4 --closed-loop --window 8 -T 1s");
    clean(&r, &out);
    let peak = max_in_flight(&log_rows(&log));
    // The window is filled at once: 8 sent before any answer is read.
    assert_eq!(peak, 8, "window 8: peak {peak} in flight");
}

#[test]
fn rate_within_10_percent_at_5k_over_100_connections() {
    let srv = server(&[]);
    let (r, out) = exits("rate5k", srv.addr, "-c 100 -r 5k -T 2s", 0);
    let achieved = r.q().rate_achieved;
    assert!((4500.0..=5500.0).contains(&achieved), "{achieved}/s\n{out}");
    clean(&r, &out);
}

#[test]
fn schedule_ramp_reaches_its_end_rate() {
    let srv = server(&[]);
    let flags = "-c 20 --schedule 2s@1000..3000 --arrivals constant";
    let (r, _) = exits("ramp", srv.addr, flags, 0);
    let seconds = &r.per_second;
    let last = seconds
        .iter()
        .rev()
        .find(|s| s.target.is_some_and(|t| t > 2000.0))
        .unwrap_or_else(|| panic!("no second near the end rate: {seconds:?}"));
    let target = last.target.unwrap();
    let sent = last.sent.unwrap() as f64;
    assert!(target >= 2400.0, "{last:?}");
    assert!((sent - target).abs() / target < 0.15, "{last:?}");
    let total = r.q().sent as f64;
    assert!((total - 4000.0).abs() < 400.0, "{total}");
}

#[test]
fn schedule_errors_are_clear() {
    for (spec, needle) in [
        ("30s", "DURATION@N"),
        ("10x@5", "duration"),
        ("5s@lots", "count"),
        ("", "empty"),
    ] {
        let (code, _, err) = common::run(&["client", "--schedule", spec]);
        assert_eq!(code, 2, "{spec}: {err}");
        assert!(
            err.contains("--schedule") && err.contains(needle),
            "{spec}: {err}"
        );
    }
}

/// Stops the server `pid` for `d` (a stall is what these tests are about).
fn stall(pid: i32, d: Duration) {
    common::signal(pid, libc::SIGSTOP);
    thread::sleep(d);
    common::signal(pid, libc::SIGCONT);
}

#[test]
fn coordinated_omission_is_corrected() {
    let srv = server(&[]);
    let flags = "-c 10 -r 1000 --arrivals constant --window 1 -T 5s";
    let run = common::start("co", srv.addr, flags, "ramp done");
    // The stall is the subject of the test: the server stops for 1 s in
    // the middle of the 5 s of traffic.
    thread::sleep(Duration::from_secs(2));
    stall(srv.pid(), Duration::from_secs(1));
    let r = run.wait().exits(0).result();
    let response_p99 = r.lat().response_time_us.p99;
    let service_p99 = r.lat().service_time_us.p99;
    assert!(
        response_p99 >= 500_000,
        "response p99 {response_p99} µs misses the stall"
    );
    assert!(service_p99 < 100_000, "service p99 {service_p99} µs");
}

/// A server that stalls twice under 3,000 connections of one worker: the
/// first stall (shorter than --timeout) leaves a deadline on nearly every
/// connection, answered when it ends, and the worker's deadline list,
/// emptied, is made again smaller at the next second; in the second
/// (longer than --timeout) the queries time out through that new list.
/// Every query is accounted for: a deadline that lost its connection
/// (or the reverse) leaves queries in flight or crashes the client.
#[test]
fn deadlines_hold_through_stalls_that_fill_and_empty_them() {
    common::raise_fd_limit();
    let srv = server(&[]);
    let flags = "-c 3000 -r 30000 --workers 1 --processes 1 --arrivals constant \
                 -T 6s --timeout 500ms";
    let mut run = common::start("stalls", srv.addr, flags, "ramp done");
    run.wait_for_line("answered");
    // The stalls are the subject of the test.
    stall(srv.pid(), Duration::from_millis(250));
    // Two seconds end: the answers came back and the list was looked at.
    run.wait_for_line("answered");
    run.wait_for_line("answered");
    stall(srv.pid(), Duration::from_millis(1200));
    let ran = run.wait();
    let (r, rest) = (ran.result(), &ran.out);
    let (sent, answered, timed_out) = (r.q().sent, r.q().answered, r.q().timed_out);
    assert_eq!(r.q().in_flight_at_end, 0, "{rest}");
    assert_eq!(r.errors(), 0, "{rest}");
    assert_eq!(sent, answered + timed_out, "{rest}");
    // The second stall: 30,000/s for 0.7 s past the timeout, at least.
    assert!(timed_out >= 10_000, "{timed_out} timed out: {rest}");
    assert!(answered >= sent / 2, "{answered} of {sent}: {rest}");
    // Timeouts fail the default check: a verdict, not a crash.
    assert_eq!(ran.code, 1, "{rest}");
}

#[test]
fn timeouts_and_close_on_timeout() {
    let srv = server(&["--mode", "discard"]);
    let target = srv.addr;
    // The server answers nothing: the default check (answered >= 99%) fails.
    let flags = "-c 5 -r 100 -T 1s --timeout 200ms --no-verify";
    let (r, out) = exits("timeouts", target, flags, 1);
    assert!(out.contains("FAIL  queries.ok>=99%"), "{out}");
    assert_eq!(r.q().answered, 0);
    // The drain waits out the timeout of the last ones: every query sent
    // timed out, none is left in flight.
    let sent = r.q().sent;
    assert!(sent > 50, "{out}");
    assert_eq!(r.q().timed_out, sent, "{out}");
    assert_eq!(r.q().in_flight_at_end, 0, "{out}");
    // Verification by the first query: a server that never answers leaves
    // its connections established but unverified, not failed.
    let flags = "-c 5 -r 100 -T 500ms --timeout 200ms --check none";
    let (r, out) = exits("unverified", target, flags, 0);
    assert_eq!(r.connections.established, 5, "{out}");
    assert_eq!(r.connections.verified, 0, "{out}");
    assert_eq!(r.connections.unverified, 5, "{out}");
    let flags = "-c 5 --interval 100ms -T 1s --timeout 150ms --no-verify --close-on-timeout \
                 --reconnect --check none --check connections.attempted>5";
    let (r, out) = exits("close-on-timeout", target, flags, 0);
    let attempted = r.connections.attempted;
    assert!(attempted > 5, "connections were not replaced: {out}");
    assert!(r.q().timed_out >= 5, "{out}");
}

/// An echo server that answers the first message late (after 400 ms),
/// then nothing more.
fn late_once_echo_server() -> SocketAddr {
    common::peer(|mut s| {
        let mut msg = [0u8; 64];
        if s.read_exact(&mut msg).is_err() {
            return;
        }
        thread::sleep(Duration::from_millis(400));
        if s.write_all(&msg).is_err() {
            return;
        }
        while s.read_exact(&mut msg).is_ok() {}
    })
}

/// A late answer to a query that timed out is absorbed, and the query in
/// flight behind it keeps its deadline (it once lost it: that query, and
/// the closed loop behind it, then waited to the end of the run).
#[test]
fn a_late_answer_leaves_the_next_querys_deadline() {
    let addr = late_once_echo_server();
    let flags = "--proto echo -c 1 --closed-loop --window 1 --timeout 200ms -T 1200ms \
                 --no-verify --check none";
    let (r, out) = exits("late", addr, flags, 0);
    assert_eq!(r.q().answered, 0, "the late answer is not counted: {out}");
    let sent = r.q().sent;
    assert!(
        sent >= 4,
        "the closed loop went on after each timeout: {out}"
    );
    assert_eq!(r.q().timed_out, sent, "{out}");
    assert_eq!(r.q().in_flight_at_end, 0, "{out}");
}

#[test]
fn max_queries_per_conn_recycles_exactly() {
    let srv = server(&["--mode", "dns"]);
    let flags = "-c 10 --closed-loop --max-queries-per-conn 20 -T 1s";
    let (r, out) = exits("recycle", srv.addr, flags, 0);
    let recycled = r.q().recycled_connections;
    let answered = r.q().answered;
    assert!(recycled > 10, "{out}");
    // Every recycled connection answered exactly 20; the ten still open
    // at the end fewer than 20 each.
    assert!(
        answered >= 20 * recycled && answered < 20 * (recycled + 10),
        "{answered} {recycled}"
    );
    let attempted = r.connections.attempted;
    assert!(
        attempted >= 10 + recycled - 2 && attempted <= 10 + recycled,
        "{attempted} {recycled}"
    );
    let (status, summary) = srv.stop();
    assert!(status.success());
    assert!(
        summary.contains(&format!("accepted {attempted}")),
        "{summary}"
    );
}

#[test]
fn rtt_log_has_a_line_per_query() {
    let srv = server(&[]);
    let (r, _, log) = logged("rttlog", srv.addr, "-c 5 -r 500 -T 1s");
    let mut lines = log.lines();
    assert_eq!(
        lines.next(),
        Some("type,timestamp,connection_id,query_id,intended_us,sent_us,rtt_us,status")
    );
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len() as u64, r.q().answered + r.q().timed_out);
    assert!(rows
        .iter()
        .all(|r| r.starts_with("dns,") && r.split(',').count() == 8));
}

#[test]
fn interval_sends_every_period_per_connection() {
    let srv = server(&["--mode", "pong"]);
    let flags = "--proto ping -c 20 --interval 200ms -T 1s";
    let (r, out) = exits("interval", srv.addr, flags, 0);
    clean(&r, &out);
    let sent = r.q().sent;
    assert!((90..=110).contains(&sent), "{sent}\n{out}");
}

#[test]
fn control_changes_the_rate_while_running() {
    let srv = server(&[]);
    let dir = temp_dir("control");
    let json = dir.join("r.json");
    let (mut child, mut err) = common::spawn_piped(
        Command::new(BIN)
            .arg("client")
            .arg(srv.addr.to_string())
            .args("-c 10 -r 100 -T 3s --control -".split(' '))
            .arg("--json")
            .arg(&json),
    );
    common::wait_for_line(&mut err, "ramp done");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"rate 2000\n").unwrap();
    common::wait_for_line(&mut err, "control: rate 2000");
    stdin.write_all(b"connections 4\n").unwrap();
    common::wait_for_line(&mut err, "control: connections 4");
    // The live view shows the count falling to 4 within a second or two.
    common::wait_for_line(&mut err, "open 4 ");
    stdin.write_all(b"bogus\n").unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("not understood"), "{rest}");
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let r = common::outcome(&json);
    let events = &r.q().control;
    assert_eq!(events[0].command, "rate 2000");
    assert!(events[0].applied);
    assert_eq!(events[1].command, "connections 4");
    assert!(!events[2].applied);
    // ~3 s at 2000/s after the change, not 300 at 100/s.
    assert!(r.q().sent > 3000, "{}", r.q().sent);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn poisson_rtt_log_passes_kolmogorov_smirnov() {
    let srv = server(&[]);
    let (_, _, log) = logged("ks", srv.addr, "-c 20 -r 10k -T 2s");
    let mut intended: Vec<f64> = log
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(4).unwrap().parse::<f64>().unwrap())
        .collect();
    intended.sort_by(f64::total_cmp);
    let mut gaps: Vec<f64> = intended.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort_by(f64::total_cmp);
    let n = gaps.len() as f64;
    assert!(n > 15_000.0, "{n}");
    let rate = 1.0 / (gaps.iter().sum::<f64>() / n);
    // Times are logged in whole µs, so gaps come in whole µs too: compare
    // the empirical CDF at each distinct gap with the exponential law
    // rounded the same way.
    let mut d: f64 = 0.0;
    let mut i = 0;
    while i < gaps.len() {
        let v = gaps[i];
        while i < gaps.len() && gaps[i] == v {
            i += 1;
        }
        let cdf = 1.0 - (-rate * (v + 0.5)).exp();
        d = d.max((i as f64 / n - cdf).abs());
    }
    assert!(
        (9_000.0..11_000.0).contains(&(rate * 1e6)),
        "rate {}",
        rate * 1e6
    );
    assert!(d < 1.63 / n.sqrt() + 0.005, "D = {d}");
    let _ = TcpStream::connect(srv.addr);
}

/// Echoes 64-byte messages, one write per message, with Nagle's algorithm
/// on (no TCP_NODELAY) and a read every 5 ms, so that queries pipelined on
/// a connection arrive together: the second answer waits for the ACK of
/// the first, which the client delays (~40 ms).
fn nagle_echo_server() -> SocketAddr {
    common::peer(|mut s| {
        let mut buf = [0u8; 4096];
        let mut got = Vec::new();
        loop {
            // The pause is the condition under test: it lets pipelined
            // queries arrive in one read.
            thread::sleep(Duration::from_millis(5));
            match s.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            while got.len() >= 64 {
                let m: Vec<u8> = got.drain(..64).collect();
                if s.write_all(&m).is_err() {
                    return;
                }
            }
        }
    })
}

#[test]
fn a_delayed_ack_tail_with_pipelined_queries_names_nagle() {
    // Regression: unbound (no TCP_NODELAY) showed a service-time tail of
    // 23-32 ms under random spread and the summary blamed the client.
    let addr = nagle_echo_server();
    let ran = Client::new("nagle")
        .arg(addr.to_string())
        .flags("--proto echo --size 64 -c 4 -r 200 -T 3s --check none")
        .run();
    let (r, out) = (ran.result(), &ran.out);
    assert!(r.q().pipelined > 0, "{out}");
    let said = ["hint (nagle)", "TCP_NODELAY"];
    says(out, &said, &["the client is the bottleneck"]);
}

#[test]
fn query_file_rcodes_by_type_merge_exactly() {
    let srv = server(&["--mode", "dns", "--udp"]);
    let dir = temp_dir("qfile-merge");
    let file = dir.join("queries.txt");
    std::fs::write(&file, "a.example A\nb.example AAAA\nc.example MX\n").unwrap();
    // Slice `k` of the run, its result to a file of its own (for the merge).
    let part = |k: &str| {
        let path = dir.join(format!("{}.json", k.replace('/', "of")));
        let (code, out, err) = common::output(
            Command::new(BIN)
                .arg("client")
                .arg(srv.addr.to_string())
                .args("--transport udp --dnssec-ok -c 4 -r 400 -T 1s -q".split(' '))
                .arg("--qnames")
                .arg(&file)
                .args(["--segment", k, "--json"])
                .arg(&path),
        );
        assert_eq!(code, 0, "{out}\n{err}");
        let r = common::outcome(&path);
        clean(&r, &out);
        (path, r)
    };
    let (a, ra) = part("1/2");
    let (b, rb) = part("2/2");
    let count = |r: &RunResult, t: &str| {
        r.dns()
            .rcodes_by_qtype
            .get(t)
            .and_then(|m| m.get("NOERROR"))
            .copied()
    };
    for r in [&ra, &rb] {
        let per_type: u64 = ["A", "AAAA", "MX"]
            .iter()
            .map(|t| count(r, t).unwrap())
            .sum();
        assert_eq!(
            Some(per_type),
            r.dns().rcodes.get("NOERROR").copied(),
            "{:?}",
            r.dns()
        );
        let query = &r.scenario.traffic.as_ref().unwrap().query;
        assert!(matches!(
            query,
            Query::Dns {
                dnssec_ok: true,
                ..
            }
        ));
    }
    let merged = dir.join("merged.json");
    let (code, out, err) = common::output(
        Command::new(BIN)
            .arg("merge")
            .args([&a, &b])
            .arg("--json")
            .arg(&merged),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let m = common::outcome(&merged);
    for t in ["A", "AAAA", "MX"] {
        assert_eq!(
            count(&m, t),
            Some(count(&ra, t).unwrap() + count(&rb, t).unwrap()),
            "{t}"
        );
    }
    // The summary of the merge lists them too, a line per type.
    assert!(out.contains("      AAAA      NOERROR"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn malformed_query_file_line_is_usage_naming_the_line() {
    let dir = temp_dir("qfile-bad");
    let file = dir.join("queries.txt");
    for (text, line, what) in [
        (
            "ok.example A\n# c\nbad.example AAAX\n",
            "line 3",
            "'AAAX' is not a record type",
        ),
        ("ok.example\nwww.example.com A IN\n", "line 2", "3 fields"),
        ("a..example MX\n", "line 1", "empty label"),
    ] {
        std::fs::write(&file, text).unwrap();
        let qnames = file.to_str().unwrap();
        let (code, _, err) =
            common::run(&["client", "127.0.0.1:9", "--qnames", qnames, "-r", "10"]);
        assert_eq!(code, 2, "{err}");
        let want = format!("--qnames {} {line}: ", file.display());
        assert!(err.contains(&want) && err.contains(what), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn queries_ends_the_run_after_that_many_over_all_workers() {
    let srv = server(&["--mode", "dns"]);
    let flags = "-c 4 -w 2 -r 2000 --queries 301 -T 30s";
    let (r, out) = exits("queries-total", srv.addr, flags, 0);
    assert_eq!(r.q().sent, 301, "{out}");
    assert_eq!(r.q().answered, 301, "{out}");
    clean(&r, &out);
    // Ended by its last answer (about 0.15 s of traffic), not by -T.
    assert!(r.duration_s < 10.0, "{out}");
    assert_eq!(r.scenario.traffic.as_ref().unwrap().queries, Some(301));
}

/// A discard server answers nothing: a user's latency check replaced the
/// default answered check, and a percentile of no samples read as 0, so
/// `p99<5ms` passed on 0 answers. The user's check adds to the defaults,
/// and a check of nothing fails with "no samples".
#[test]
fn a_check_with_nothing_measured_fails_beside_the_defaults() {
    let srv = server(&["--mode", "discard"]);
    let flags = "--proto echo -c 4 -r 200 -T 1s --timeout 200ms \
                 --check latency.response_time_us.p99<5ms";
    let (r, out) = exits("no-samples", srv.addr, flags, 1);
    assert_eq!(r.q().answered, 0, "{out}");
    let checks = &r.checks;
    let exprs: Vec<&str> = checks.iter().map(|c| c.expr.as_str()).collect();
    assert_eq!(
        exprs,
        [
            "queries.ok>=99%",
            "connections.silent==0",
            "connections.unverified==0",
            "latency.response_time_us.p99<5ms"
        ],
        "{out}"
    );
    assert!(checks.iter().all(|c| !c.pass), "{out}");
    assert_eq!(checks[3].reason.as_deref(), Some("no samples"), "{out}");
    assert!(
        out.contains("FAIL  latency.response_time_us.p99<5ms  (measured no samples)"),
        "{out}"
    );
    // `--check none` drops the defaults: only the user's is left.
    let ran = Client::new("no-samples-none")
        .arg(srv.addr.to_string())
        .flags("--proto echo -c 2 -r 50 -T 500ms --timeout 200ms")
        .flags("--check none --check queries.sent>=1")
        .run();
    assert_eq!(ran.result().checks.len(), 1, "{}", ran.out);
}

/// A listener that never calls accept(): every connection is established
/// by the kernel and none answered. That passed with a hint; it fails now,
/// and the hint names what the server's process and its accept queue
/// showed.
#[test]
fn connections_never_accepted_fail_and_are_named_from_the_accept_queue() {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    sock.listen(1024).unwrap();
    let addr = sock.local_addr().unwrap().as_socket().unwrap();
    let (r, out) = exits("never-accepted", addr, "-c 300 -T 500ms", 1);
    let c = &r.connections;
    assert_eq!((c.established, c.unverified), (300, 300), "{out}");
    says(
        &out,
        &[
            "FAIL  connections.unverified==0",
            "did not take the connections the kernel completed for it",
            "hint (unverified): 300 connection(s) were established but never answered",
        ],
        &["no connection got an answer", "it cannot accept more"],
    );
    assert!(r.server_seen.unwrap().accept_queue_max >= 300, "{out}");
    // --stop-on ends the ramp once nothing verifies: 2,000 asked at 500/s
    // would take 4 s.
    let flags = "-c 2000 --connect-rate 500 --connect-timeout 500ms \
                 --stop-on verify-stall=1s -T 0s";
    let (r, out) = exits("never-accepted-stop", addr, flags, 1);
    let attempted = r.connections.attempted;
    assert!(attempted < 1500, "{out}");
    let stopped = r.connections.ramp_stopped.as_deref().unwrap();
    assert!(stopped.contains("no connection verified"), "{out}");
    drop(sock);
}

// ---- what late queries waited for ------------------------------------------

/// An echo server that takes `delay` over each read it answers, one
/// thread a connection.
fn slow_echo_server(delay: Duration) -> SocketAddr {
    common::peer(move |mut s| {
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                return;
            }
            thread::sleep(delay);
            if s.write_all(&buf[..n]).is_err() {
                return;
            }
        }
    })
}

/// tcp-per-query with 2 slots at 50 ms an answer carries about 40/s
/// (Little's law); asked 200/s, queries wait for a slot. The summary names
/// that wait as the server's pace with its ceiling, not the client; a slot
/// is waited for at most --timeout (then `not_sent`), so no response time
/// runs far past it. With slots enough, the same run names no slot.
#[test]
fn tcp_per_query_slots_are_named_as_the_servers_pace() {
    let addr = slow_echo_server(Duration::from_millis(50));
    let base = "--proto echo --transport tcp-per-query -r 200";
    // About a fifth of the queries can be sent: the run fails.
    let flags = format!("{base} --concurrency 2 -T 2s --timeout 1s");
    let (r, out) = exits("pq-slots", addr, &flags, 1);
    assert!(r.q().waited.get("slot").copied().unwrap() > 100, "{out}");
    assert!(r.q().errors.get("not_sent").copied().unwrap() > 0, "{out}");
    says(
        &out,
        &[
            "waited for a free tcp-per-query slot (--concurrency 2)",
            "Little's law",
        ],
        &[
            "the client is the bottleneck",
            "could not keep up",
            "waited for room",
            "is not reading what it is sent",
            "connections failed (see above)",
        ],
    );
    // Waited at most --timeout, then answered in about 50 ms.
    let max = r.lat().response_time_us.max;
    assert!(max < 1_500_000, "response max {max} µs: {out}");

    let flags = format!("{base} --concurrency 50 -T 1s");
    let (r, out) = exits("pq-slots-enough", addr, &flags, 0);
    assert_eq!(r.q().errors.get("not_sent").copied(), Some(0), "{out}");
    assert!(!out.contains("free tcp-per-query slot"), "{out}");
}

/// A server stopped for 1.5 s under 32 KiB echoes: the client's sockets
/// fill and due queries wait behind them; once it runs again they are
/// sent and answered. The summary names the server that was not reading,
/// not the client (whose loop kept its time); a run against the same
/// server running throughout names no such wait.
#[test]
fn a_stopped_server_is_named_as_not_reading() {
    let srv = server(&[]);
    let flags = "--proto echo --size 32KiB -c 4 -r 2000 --timeout 4s";
    let (r, out) = exits("running", srv.addr, &format!("{flags} -T 2s"), 0);
    assert_eq!(r.q().waited.get("socket").copied(), Some(0), "{out}");
    // No wait behind the sockets; pipelined answers without a delayed-ACK
    // tail.
    says(&out, &[], &["did not read", "hint (nagle)"]);

    // Traffic under way: its first second's line.
    let run = common::start("stopped", srv.addr, &format!("{flags} -T 4s"), "answered");
    // The stall is the subject of the test.
    stall(srv.pid(), Duration::from_millis(1500));
    let ran = run.wait();
    let r = ran.exits(0).result();
    let out = &ran.stdout;
    assert!(r.q().waited.get("socket").copied().unwrap() > 0, "{out}");
    says(
        out,
        &["waited behind sockets the server did not read"],
        &["the client is the bottleneck"],
    );
}

/// --slack holds a due query until the first due has waited the slack; its
/// response time still counts from its due time. At 20 queries/s each
/// query is alone in its batch and waits the whole 20 ms: response time and
/// send lag are at least the slack, service time (from the send) is not.
/// Ignoring the slack, or counting from the send, fails here.
#[test]
fn slack_holds_queries_and_their_response_time_counts_from_the_due_time() {
    let srv = server(&["--mode", "dns", "--udp"]);
    let run = |name: &str, extra: &str| {
        let flags = format!("--transport udp --proto dns -c 2 {extra}");
        let (r, out) = exits(name, srv.addr, &flags, 0);
        clean(&r, &out);
        (r, out)
    };
    let (r, out) = run("slack-alone", "-r 20 -T 1s --slack 20ms");
    assert!(r.q().sent >= 18, "{out}");
    let l = r.lat();
    assert!(l.response_time_us.p50 >= 20_000, "{out}");
    assert!(l.send_lag_us.p50 >= 20_000, "{out}");
    // And not much more: a slack held ten times too long (200 ms) fails
    // here; 100 ms leaves a loaded machine 80 ms of its own lateness at
    // the median.
    assert!(l.send_lag_us.p50 < 100_000, "{out}");
    assert!(l.response_time_us.p50 < 100_000, "{out}");
    // Each query's response time is its service time plus at least the
    // slack, so their medians are as far apart (a bucket's rounding less).
    assert!(
        l.response_time_us.p50 >= l.service_time_us.p50 + 19_000,
        "{out}"
    );
    // The end of the traffic: what the slack holds then goes, every due
    // query sent and answered (none counted behind_schedule).
    let (r, out) = run("slack-end", "-r 200 -T 1s --slack 100ms");
    assert_eq!(r.q().sent, r.q().due, "{out}");
    // Many per batch: the same queries go as without slack.
    let q = "-r 2000 --queries 600 -T 5s";
    let (exact, out_exact) = run("slack-none", q);
    let (held, out_held) = run("slack-many", &format!("{q} --slack 20ms"));
    assert_eq!(exact.q().sent, 600, "{out_exact}");
    assert_eq!(held.q().sent, 600, "{out_held}");
    // Each waits from its due time to the batch's (the first's + 20 ms):
    // about 10 ms at the median.
    assert!(held.lat().response_time_us.p50 >= 5_000, "{out_held}");
    // No one waits past the batch's send by more than the slack and a
    // loaded machine's lateness.
    assert!(held.lat().send_lag_us.p50 < 100_000, "{out_held}");
}
