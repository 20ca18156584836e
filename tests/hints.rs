//! The summary's hints, each reached with the cause it names and kept away
//! from a run with another cause (issue 26: "the side is named from what
//! was measured"). Tests of hints that need a run another file already
//! makes live beside that run; this file holds the rest.
//!
//! Every reachable hint: its key phrase, the cause it names, the test
//! that reaches it with that cause ("by"), and the test with another cause
//! that asserts it is not printed ("not").
//!
//! ```text
//! hint (refused) "nothing listens": no listener
//!     by client::refused_port_is_counted_and_exits_1
//!     not hints::unreachable_and_prohibited_routes_are_named_apart
//! hint (timed_out), server seen, "did not take the connections": its queue
//!     by client::never_accepting_listener_gives_timeouts_and_unverified
//!     not client::refused_port_is_counted_and_exits_1
//! hint (timed_out), unseen, "SYNs went unanswered. throng cannot see the
//! server": a listener across a veth pair (another host) that never accepts
//!     by hints::a_server_throng_cannot_see_is_named_with_where_to_look
//!     not the same test's resets and late accepts;
//!         client::never_accepting_listener_gives_timeouts_and_unverified (seen)
//! hint (no_free_port) "ephemeral ports ran out": too few ports
//!     by hints::ports_run_out_over_tcp_without_time_wait_words,
//!        transports::tcp_per_query_says_when_time_wait_uses_up_the_ports
//!     not client::refused_port_is_counted_and_exits_1
//! hint (tcp-per-query) "TIME_WAIT": ports held by closed connections
//!     by transports::tcp_per_query_says_when_time_wait_uses_up_the_ports
//!     not hints::ports_run_out_over_tcp_without_time_wait_words
//! hint (out_of_fds) "this process ran out of file descriptors"
//!     by hints::the_clients_own_fd_limit_is_named
//!     not hints::ports_run_out_over_tcp_without_time_wait_words
//! hint (unreachable) "no route to the target": no route
//!     by hints::unreachable_and_prohibited_routes_are_named_apart
//!     not the same test's prohibit route; client::refused_port_...
//! hint (other) "an errno none of the buckets": EACCES (prohibit route)
//!     by hints::unreachable_and_prohibited_routes_are_named_apart
//!     not the same test's missing route
//! hint (closed_by_peer) "closed established connections": FIN mid-query
//!     by hints::closes_and_resets_mid_query_are_named_apart
//!     not the same test's resets; client::reset_at_first_data_is_half_open
//! hint (reset) "reset established connections": RST after an answer
//!     by hints::closes_and_resets_mid_query_are_named_apart
//!     not the same test's closes; client::reset_at_first_data_is_half_open
//! hint (reset) "the client closed these connections": bytes not the protocol
//!     by push (malformed lines: "the client closed these connections")
//!     not hints::closes_and_resets_mid_query_are_named_apart
//! hint (half_open), seen, "reset connections before answering anything"
//!     by client::reset_at_first_data_is_half_open
//!     not hints::closes_and_resets_mid_query_are_named_apart
//! hint (half_open), unseen, "what an accept queue that overflowed looks like":
//! resets at the first data from across a veth pair
//!     by hints::a_server_throng_cannot_see_is_named_with_where_to_look
//!     not the same test's SYNs unanswered; client::reset_at_first_data_is_half_open
//! hint (tls) alert / not TLS / timed out / after the handshake
//!     by hostile_udp_tls::tls_alert_for_the_client_hello_is_a_tls_failure,
//!        tls_garbage_for_the_client_hello_..., tls_peer_that_never_answers_...,
//!        tls_garbage_in_the_middle_of_a_session_ends_it
//!     not each other's (every one asserts the others' words absent)
//! hint (rejected) "rejected the probe sent on them": a 400 to a DNS probe
//!     by interop::nginx_verifies_an_http_probe_and_rejects_a_dns_one
//!     not client::the_ramp_is_establishment_whatever_verification_takes
//! hint (handshake), seen, "server side dropped it": SYNs retransmitted
//!     by client::a_retransmitted_handshake_is_named_as_the_servers_not_the_clients
//!     not client::refused_port_is_counted_and_exits_1
//! hint (handshake), unseen, "throng cannot see the server from here": the same
//! listener across a veth pair
//!     by hints::a_server_throng_cannot_see_is_named_with_where_to_look
//!     not the same test's other runs;
//!         client::a_retransmitted_handshake_is_named_as_the_servers_not_the_clients
//! hint (client) "the connect times are the client's" / "include the
//! client's own work": one source, 14,000 ports nearly all held
//!     by hints::the_clients_own_port_search_is_named_as_the_clients
//!     not the same test's wide range;
//!         client::a_retransmitted_handshake_is_named_as_the_servers_not_the_clients
//! hint (udp) "no answer came back over UDP": answers from another port
//!     by hostile_udp_tls::udp_answers_from_another_port_time_out
//!     not interop::nsd_rate_limiting_is_named_not_datagram_size
//! hint (unverified) "were established but never answered": queue seen
//!     by traffic::connections_never_accepted_fail_and_are_named_from_the_accept_queue
//!     not client::the_ramp_is_establishment_whatever_verification_takes
//! hint (unverified) "no connection got an answer": another protocol
//!     by client::the_ramp_is_establishment_whatever_verification_takes
//!     not traffic::connections_never_accepted_..., hints::a_server_that_answers_...
//! hint (unverified) "it accepted them and did not answer them": server seen
//!     by hints::a_server_that_answers_some_connections_only
//!     not client::the_ramp_is_establishment_whatever_verification_takes
//! hint (unverified) "got no message in all their time": nothing pushed
//!     by hints::a_server_that_pushes_nothing_is_named
//!     not push::tcp_counts_are_exact_and_the_server_kept_its_period
//! hint (nagle) "delayed-ACK timer": a server without TCP_NODELAY
//!     by traffic::a_delayed_ack_tail_with_pipelined_queries_names_nagle
//!     not traffic::a_stopped_server_is_named_as_not_reading (running run),
//!         hints::a_client_sharing_its_core_with_the_server_is_named
//! note "waited for a free tcp-per-query slot": the server's time a query
//!     by traffic::tcp_per_query_slots_are_named_as_the_servers_pace
//!     not the same test's run with slots enough
//! note "waited behind sockets the server did not read": a stopped server
//!     by traffic::a_stopped_server_is_named_as_not_reading
//!     not the same test's running server
//! note "waited for room in their connection's --window": a slow server
//!     by hints::a_full_window_is_named_as_the_servers_pace
//!     not traffic::tcp_per_query_slots_are_named_as_the_servers_pace
//! warning/note "shares ... with the server": client and server on one core
//!     by hints::a_client_sharing_its_core_with_the_server_is_named
//!     not traffic::a_delayed_ack_tail_... ("the client is the bottleneck" absent
//!         in hostile, traffic; shared-core words absent where cores differ)
//! sent rate "the client could not keep up" / lag warning "the client is the
//! bottleneck" / notes "cannot be put on the server alone" (its CPU; "a loop
//! that late reads the answers late"): one client worker on its own core
//! asked for more than it can send. Which of them varies with the load (the
//! client may catch up; lag against the service tail); one always appears
//! and no words of the server's
//!     by hints::a_client_that_cannot_keep_its_schedule_is_named (any one)
//!     not hints::a_full_window_is_named_as_the_servers_pace,
//!         hints::a_client_sharing_its_core_with_the_server_is_named
//! note "well above that: the tail is the server's or the network's": a
//! client late by less than half the service tail, its loop prompt
//!     by hints::a_tail_well_above_the_clients_lateness_is_the_servers
//!        (a busy loop on the client's core), and
//!        report::tests::a_tail_well_above_a_prompt_loop_is_not_the_clients
//!     not hints::a_client_that_cannot_keep_its_schedule_is_named
//! warning/note "more workers will not help": a client late while using
//! under half a core (its threads waited to be run, not for CPU)
//!     by hints::a_late_idle_client_is_not_told_to_add_cores (a busy loop
//!        on its core, a prompt server on another), and
//!        report::tests::a_late_client_is_told_what_would_help
//!     not hints::a_client_that_cannot_keep_its_schedule_is_named
//! note "the embedded server runs in the client's process": late with the
//! server in its own process, neither figure is a server's own
//!     by hints::a_late_idle_client_is_not_told_to_add_cores (no target),
//!        and report::tests::a_late_client_is_told_what_would_help
//!     not hints::a_late_idle_client_is_not_told_to_add_cores (a target)
//! warning "sent rate is below 99%": "is not reading what it is sent"
//!     by hostile::server_that_never_reads_backs_up_and_is_named
//!     not traffic::tcp_per_query_slots_are_named_as_the_servers_pace
//! warning "sent rate": "--window N full (the server answering too slowly)"
//!     by hints::a_full_window_is_named_as_the_servers_pace
//!     not hostile::server_that_never_reads_backs_up_and_is_named (no window)
//! warning "sent rate": "connections failed (see above)"
//!     by hostile_udp_tls::tls_garbage_in_the_middle_of_a_session_ends_it
//!     not traffic::tcp_per_query_slots_are_named_as_the_servers_pace
//! warning "the server answered X%": "did not keep up, or does not answer"
//!     by hostile::server_that_never_reads_backs_up_and_is_named
//!     not interop::nsd_rate_limiting_is_named_not_datagram_size
//! warning "the server answered X%": "response rate limiting dropped them"
//!     by interop::nsd_rate_limiting_is_named_not_datagram_size
//!     not hostile::server_that_never_reads_backs_up_and_is_named
//! push "the server kept its period" / "did not keep its period"
//!     by push::tcp_counts_are_exact_and_the_server_kept_its_period / push.rs:112
//!     not each other
//! truncated: "even over TCP", "truncates to slow this client down",
//! "do not fit a UDP datagram"
//!     by hostile_udp_tls (udp_truncated, TCP TC=1), interop::nsd_rate_limiting_...
//!     not each other (each asserts the others' words absent)
//! server seen "it cannot accept more": its fds
//!     by interop::nginx_out_of_fds_fails_and_is_named_from_its_process
//!     not traffic::connections_never_accepted_fail_and_are_named_from_the_accept_queue
//! ```

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{exits, in_netns, output, says, server, set_sysctl, temp_dir, typed, Parts, BIN};
use common::{Client, RunResult};

/// The first line of `out` that holds `words`.
#[track_caller]
fn line_with<'a>(out: &'a str, words: &str) -> &'a str {
    out.lines()
        .find(|l| l.contains(words))
        .unwrap_or_else(|| panic!("no line with {words:?}:\n{out}"))
}

/// The line of `out` with `hint` holds each of `words` and none of `not`.
#[track_caller]
fn hint_says(out: &str, hint: &str, words: &[&str], not: &[&str]) {
    let line = line_with(out, hint);
    for w in words {
        assert!(line.contains(w), "no {w:?} in {line:?}:\n{out}");
    }
    for w in not {
        assert!(!line.contains(w), "{w:?} in {line:?}:\n{out}");
    }
}

/// Inside a namespace with only loopback: a target with no route fails
/// unreachable; one behind a `prohibit` route fails with EACCES, which
/// is no bucket of its own (other), listed by its errno.
#[test]
fn unreachable_and_prohibited_routes_are_named_apart() {
    let done = in_netns(|| {
        let (r, out) = exits("unreachable", "10.1.2.3:53", "-c 5 -T 0s --no-verify", 1);
        assert_eq!(r.connections.failed["unreachable"], 5, "{out}");
        says(&out, &["hint (unreachable): no route"], &[]);
        says(
            &out,
            &[],
            &["hint (other)", "hint (refused)", "hint (out_of_fds)"],
        );

        let ip = output(Command::new("ip").args(["route", "add", "prohibit", "10.9.9.9/32"]));
        assert_eq!(ip.0, 0, "{ip:?}");
        let (r, out) = exits("prohibited", "10.9.9.9:53", "-c 5 -T 0s --no-verify", 1);
        assert_eq!(r.connections.failed["other"], 5, "{out}");
        says(
            &out,
            &[
                "errno 13 (Permission denied",
                "hint (other): connect() failed with an errno",
            ],
            &[],
        );
        says(&out, &[], &["hint (unreachable)"]);
    });
    let _ = done;
}

/// The client under `ulimit -n 128` asked for 200 connections (--force
/// past the preflight that says so): it runs out of its own fds, and the
/// hint says so; the server had plenty.
#[test]
fn the_clients_own_fd_limit_is_named() {
    let srv = server(&[]);
    let dir = temp_dir("client-fds");
    let json = dir.join("r.json");
    let (code, out, err) = output(Command::new("sh").args([
        "-c",
        "ulimit -n 128 && exec \"$0\" client \"$1\" -c 200 -T 0s --processes 1 --force -q \
         --json \"$2\"",
        BIN,
        &srv.addr.to_string(),
        json.to_str().unwrap(),
    ]));
    let v = common::read_result(&json);
    assert_eq!(code, 1, "{out}\n{err}");
    let r = typed(&v);
    assert!(r.connections.failed["out_of_fds"] > 0, "{out}");
    says(
        &out,
        &["hint (out_of_fds): this process ran out of file descriptors"],
        &[],
    );
    says(&out, &[], &["hint (no_free_port)", "cannot accept more"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// 100 ports and one source address over plain TCP (--force past the
/// preflight): the ports run out, named as such, and not as TIME_WAIT
/// (no connection was closed) nor as the client's fds.
#[test]
fn ports_run_out_over_tcp_without_time_wait_words() {
    let done = in_netns(|| {
        set_sysctl("net.ipv4.ip_local_port_range", "40000 40099");
        let srv = server(&[]);
        let (r, out) = exits(
            "tcp-no-port",
            srv.addr,
            "-c 150 --source-ip 127.0.0.1 --force -T 0s",
            1,
        );
        assert!(r.connections.failed["no_free_port"] >= 50, "{out}");
        says(&out, &["hint (no_free_port): ephemeral ports ran out"], &[]);
        says(
            &out,
            &[],
            &["hint (tcp-per-query)", "TIME_WAIT", "hint (out_of_fds)"],
        );
        drop(srv);
    });
    let _ = done;
}

/// A peer that echoes the first read (the probe) and then, at the next
/// read, closes (`reset`: with SO_LINGER 0, a reset; else a FIN).
fn answers_once_then_ends(reset: bool) -> SocketAddr {
    let serve = move |mut s: std::net::TcpStream| {
        let mut buf = [0u8; 4096];
        match s.read(&mut buf) {
            Ok(n) if n > 0 => {
                if s.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
            _ => return,
        }
        if let Ok(1..) = s.read(&mut buf) {
            if reset {
                let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
            }
        }
    };
    common::peer(serve)
}

/// Queries in flight when the server ends their connection: a FIN is the
/// server closing (closed_by_peer), a reset after an answer is a reset;
/// neither is a half-open connection, nor the other.
#[test]
fn closes_and_resets_mid_query_are_named_apart() {
    // (run, the peer resets, the bucket, its hint, words of the others)
    for (name, reset, bucket, hint, others) in [
        (
            "closes-mid-query",
            false,
            "closed_by_peer",
            "hint (closed_by_peer): the server closed established connections",
            &["hint (reset)", "hint (half_open)"][..],
        ),
        (
            "resets-mid-query",
            true,
            "reset",
            "hint (reset): the server reset established connections",
            &[
                "the client closed these connections",
                "hint (closed_by_peer)",
                "hint (half_open)",
            ],
        ),
    ] {
        let addr = answers_once_then_ends(reset);
        let (r, out) = exits(
            name,
            addr,
            "--proto echo -c 4 -r 40 -T 1s --timeout 500ms",
            1,
        );
        assert!(r.connections.failed[bucket] > 0, "{name}: {out}");
        says(&out, &[hint], &[]);
        says(&out, &[], others);
    }
}

/// An echo server that answers every other connection it takes (of any
/// ten in a row, five) and reads the rest without a word.
fn every_other_answered() -> SocketAddr {
    static ACCEPTED: AtomicU64 = AtomicU64::new(0);
    common::peer(|mut s| {
        let answer = ACCEPTED.fetch_add(1, Ordering::Relaxed).is_multiple_of(2);
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = s.read(&mut buf) {
            if answer && s.write_all(&buf[..n]).is_err() {
                return;
            }
        }
    })
}

/// `--proto echo -c 10 <flags>` against [`every_other_answered`], five of
/// the ten never answered: the run must fail (exit 1).
#[track_caller]
fn ten_to_every_other_answered(name: &str, flags: &str) -> (RunResult, String) {
    let flags = format!("--proto echo -c 10 {flags}");
    exits(name, every_other_answered(), &flags, 1)
}

/// A peer that echoes on every other connection it accepts and holds the
/// rest unanswered: the unanswered ones are named as the server's (it was
/// seen, and showed no accept queue that overflowed or fds that ran out).
#[test]
fn a_server_that_answers_some_connections_only() {
    let (r, out) = ten_to_every_other_answered("some-answered", "--connect-timeout 500ms -T 0s");
    assert_eq!(r.connections.verified, 5, "{out}");
    assert_eq!(r.connections.unverified, 5, "{out}");
    hint_says(
        &out,
        "hint (unverified)",
        &[
            "5 connection(s) never got an answer",
            "it accepted them and did not answer them",
        ],
        &["full accept queue"],
    );
    says(&out, &[], &["no connection got an answer"]);
}

/// --proto push against an echo server: connections accepted, nothing
/// pushed; named as a server that pushed nothing, not an accept queue.
#[test]
fn a_server_that_pushes_nothing_is_named() {
    let srv = server(&[]);
    let (_, out) = exits(
        "push-nothing",
        srv.addr,
        "--proto push --every 50ms -c 4 -T 1s",
        1,
    );
    says(&out, &["got no message in all their time"], &[]);
    says(
        &out,
        &[],
        &["a full accept queue", "no connection got an answer"],
    );
}

/// `throng client [TARGET] <flags> -q --json F` (the flags split at
/// spaces) run under `taskset -c <core>` (and `nice -n <niceness>` when
/// given); (exit code, output, the result).
fn pinned_client(
    name: &str,
    core: &str,
    nice: Option<&str>,
    target: Option<&str>,
    flags: &str,
) -> (i32, String, serde_json::Value) {
    let dir = temp_dir(name);
    let json = dir.join("r.json");
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", core]);
    if let Some(n) = nice {
        cmd.args(["nice", "-n", n]);
    }
    cmd.args([BIN, "client"])
        .args(target)
        .args(flags.split(' '))
        .args(["-q", "--json", json.to_str().unwrap()]);
    let (code, out, err) = output(&mut cmd);
    let v = common::read_result(&json);
    let _ = std::fs::remove_dir_all(&dir);
    (code, format!("{out}\n{err}"), v)
}

/// 400k echoes a second asked of one client worker sharing one core
/// with the server: the client's lateness is named with the core they
/// share, not as the client alone, and the service time's tail (the
/// client's late reads) not as the server's Nagle.
#[test]
fn a_client_sharing_its_core_with_the_server_is_named() {
    let flags = "--proto echo -c 8 -r 400k --workers 1 -T 1s --check none";
    let (out, r) = pinned_to_server_on_core_1("one-core", "1", flags);
    let cpu = r.client.unwrap();
    assert!(cpu.shares_cores_with_server, "{out}");
    // How late the client was varies with the machine's other load: a
    // warning, a note, or "sent on time"; each names the core shared.
    let said = out.lines().find(|l| {
        (l.contains("    warning: the client") || l.contains("    note: the client"))
            && l.contains("share")
            && l.contains("with the server")
    });
    assert!(said.is_some(), "{out}");
    says(
        &out,
        &[],
        &[
            "the client is the bottleneck",
            "is well above that",
            "hint (nagle)",
        ],
    );
}

/// `throng server --workers 1` on core 1 (the clients here run on core 0
/// unless they share it).
fn server_on_core_1() -> common::Server {
    common::server_with(
        Command::new("taskset").args(["-c", "1", BIN, "server"]),
        &["--workers", "1"],
    )
}

/// [`pinned_client`] on `core` against a [`server_on_core_1`] of its own;
/// the run must exit 0: its output and its result.
#[track_caller]
fn pinned_to_server_on_core_1(name: &str, core: &str, flags: &str) -> (String, RunResult) {
    let srv = server_on_core_1();
    let (code, out, v) = pinned_client(name, core, None, Some(&srv.addr.to_string()), flags);
    assert_eq!(code, 0, "{out}");
    drop(srv);
    (out, typed(&v))
}

/// An echo server that takes `delay` over each read it answers.
fn slow_echo(delay: Duration) -> SocketAddr {
    common::peer(move |mut s| {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = s.read(&mut buf) {
            // The delay is the server's pace under test.
            std::thread::sleep(delay);
            if s.write_all(&buf[..n]).is_err() {
                return;
            }
        }
    })
}

/// 2 connections, --window 1, 50 ms an answer: 40/s carried of 200/s
/// asked. The queries wait for room in their window, named as the
/// server's pace (and the ones given up after --timeout as its window
/// full), never as the client's.
#[test]
fn a_full_window_is_named_as_the_servers_pace() {
    let addr = slow_echo(Duration::from_millis(50));
    let (r, out) = exits(
        "window-full",
        addr,
        "--proto echo -c 2 --window 1 -r 200 -T 2s --timeout 500ms",
        1,
    );
    assert!(r.q().waited["window"] > 100, "{out}");
    says(
        &out,
        &[
            "waited for room in their connection's --window 1",
            "--window 1 full (the server answering too slowly)",
        ],
        &[],
    );
    says(
        &out,
        &[],
        &[
            "the client is the bottleneck",
            "could not keep up",
            "the server is not reading",
        ],
    );
}

/// One source address toward one server and 14,000 ports (--force past
/// the preflight), 13,650 connections: each connect() of the ramp's
/// second half searches a range nearly full, inside the call, and the
/// workers spend most of the ramp there. The connect times are named as
/// the client's (as its port search when connect()'s p99 passes 1 ms, or
/// as its workers busy connecting: which, varies with the run); with the
/// range wide, the same run names nothing of the kind.
#[test]
fn the_clients_own_port_search_is_named_as_the_clients() {
    let done = in_netns(|| {
        let srv = server(&[]);
        let run = |name: &str, range: &str| {
            set_sysctl("net.ipv4.ip_local_port_range", range);
            let (r, out) = Client::new(name)
                .arg(srv.addr.to_string())
                .flags("-c 13650 --source-ip 127.0.0.1 --force --no-verify -T 0s")
                .ok();
            assert_eq!(r.connections.established, 13650, "{out}");
            out
        };
        let out = run("port-search", "40000 53999");
        let line = line_with(&out, "hint (client)");
        assert!(
            line.contains("the connect times are the client's, not the server's")
                || line.contains("the connect times include the client's own work"),
            "{out}"
        );
        assert!(line.contains("its connect() calls took"), "{out}");
        says(&out, &[], &["hint (handshake)", "hint (no_free_port)"]);

        let out = run("port-search-wide", "10000 60999");
        says(&out, &[], &["hint (client)", "its connect() calls took"]);
        drop(srv);
    });
    let _ = done;
}

/// One client worker pinned to core 0 asked for a million echoes a second,
/// the server alone on core 1: the client cannot send at that rate, and
/// says it is its own lateness, never the server's pace. Regression: its
/// loop ran 140 ms late, and the service time's tail (its own late reads)
/// was named as the server's or the network's.
#[test]
fn a_client_that_cannot_keep_its_schedule_is_named() {
    let flags = "--proto echo -c 2000 -r 1M --workers 1 --processes 1 -T 2s --check none";
    let (out, r) = pinned_to_server_on_core_1("client-late", "0", flags);
    let cpu = r.client.unwrap();
    assert!(!cpu.shares_cores_with_server, "{out}");
    // Whether it fell short of the rate (it may catch up), how late it
    // was against the service time's tail, and how busy, vary with the
    // machine's load: one of the client's words, a warning or a note that
    // does not clear it.
    assert!(
        out.contains("the client could not keep up")
            || out.contains("warning: the client is the bottleneck")
            || out.contains("cannot be put on the server alone"),
        "{out}"
    );
    says(
        &out,
        &[],
        &[
            "the server was not reading",
            "the server is not reading",
            "the server answered slower",
            "the server answering too slowly",
            "waited for the server",
            "the tail is the server's",
            "CPU-bound",
            "with the server",
        ],
    );
}

fn ip(args: &str) {
    let (code, out, err) = output(Command::new("ip").args(args.split(' ')));
    assert_eq!(code, 0, "ip {args}: {out}{err}");
}

/// Runs `near` in a network namespace of its own, 198.18.0.1 on a veth
/// pair whose other end, 198.18.0.2, is in another namespace: there `far`
/// runs first and makes what the client meets. The far side is another
/// host as throng sees it: its sockets are not in the client's
/// /proc/net/tcp, so no server is seen.
fn across_veth<S: Send + 'static, T: Send + 'static>(
    far: impl FnOnce() -> S + Send + 'static,
    near: impl FnOnce(S) -> T + Send + 'static,
) -> Option<T> {
    in_netns(move || {
        // SAFETY: gettid() only returns this thread's id.
        let tid = unsafe { libc::gettid() };
        let here = format!("/proc/{}/task/{tid}/ns/net", std::process::id());
        let made = std::thread::spawn(move || {
            // SAFETY: unshare affects only this thread's namespaces.
            let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
            ip("link set lo up");
            ip("link add far type veth peer name near");
            ip(&format!("link set near netns {here}"));
            ip("addr add 198.18.0.2/24 dev far");
            ip("link set far up");
            far()
        })
        .join()
        .unwrap();
        ip("addr add 198.18.0.1/24 dev near");
        ip("link set near up");
        near(made)
    })
}

/// A listener on 198.18.0.2 with a backlog of 1; with `accept_after`, a
/// thread accepts (and holds) its connections from then on.
fn far_listener(accept_after: Option<Duration>) -> (socket2::Socket, SocketAddr) {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::from(([198, 18, 0, 2], 0)).into())
        .unwrap();
    sock.listen(1).unwrap();
    let addr = sock.local_addr().unwrap().as_socket().unwrap();
    if let Some(after) = accept_after {
        let l: std::net::TcpListener = sock.try_clone().unwrap().into();
        std::thread::spawn(move || {
            // The delay is the condition under test: SYNs arriving
            // meanwhile find the queue full and are dropped.
            std::thread::sleep(after);
            let mut held = Vec::new();
            for s in l.incoming() {
                let Ok(s) = s else { return };
                held.push(s);
            }
        });
    }
    (sock, addr)
}

/// A peer on 198.18.0.2 that resets every connection at its first data.
fn far_resetter() -> SocketAddr {
    let l = std::net::TcpListener::bind("198.18.0.2:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf);
                let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
            });
        }
    });
    addr
}

/// A server on another host (across a veth pair): a retransmitted
/// handshake, SYNs never answered, and resets before any answer are each
/// named with where to look on the server, not with a cause throng did
/// not see; each run's words are absent from the others'.
#[test]
fn a_server_throng_cannot_see_is_named_with_where_to_look() {
    let done = across_veth(
        || {
            let (never, resets) = (far_listener(None), far_resetter());
            // Made last, just before its run: its delay counts from here.
            (
                never,
                resets,
                far_listener(Some(Duration::from_millis(1500))),
            )
        },
        |(never, resets, late)| {
            // A run to the far side, its exit code `code`: its result,
            // which sees no server, and its output.
            let run = |name: &str, addr: SocketAddr, flags: &str, code: i32| {
                let ran = Client::new(name).arg(addr.to_string()).flags(flags).run();
                let r = ran.exits(code).result();
                assert!(r.server_seen.is_none(), "{}", ran.out);
                (r, ran.out)
            };

            let (r, out) = run(
                "far-late-accept",
                late.1,
                "-c 20 --no-verify --connect-timeout 10s -T 0s",
                0,
            );
            assert_eq!(r.connections.established, 20, "{out}");
            hint_says(
                &out,
                "hint (handshake)",
                &[
                    "The server side dropped it",
                    "throng cannot see the server from here",
                ],
                &["had fds to spare"],
            );
            says(
                &out,
                &[],
                &["hint (client)", "hint (timed_out)", "hint (half_open)"],
            );

            let (r, out) = run(
                "far-never-accepts",
                never.1,
                "-c 40 --no-verify --connect-timeout 1s -T 0s",
                1,
            );
            assert!(r.connections.failed["timed_out"] > 0, "{out}");
            says(
                &out,
                &[
                    "hint (timed_out): SYNs went unanswered. throng cannot see the server \
                   from here",
                ],
                &[],
            );
            says(
                &out,
                &[],
                &[
                    "did not take the connections",
                    "had fds to spare",
                    "hint (half_open)",
                    "hint (handshake)",
                    "hint (refused)",
                ],
            );

            let (r, out) = run("far-resets", resets, "-c 30 -T 1s", 1);
            assert_eq!(r.connections.failed["half_open"], 30, "{out}");
            says(
                &out,
                &[
                    "hint (half_open): connect() succeeded but the server reset the \
                   connection before answering anything: on the wire that is what an \
                   accept queue that overflowed looks like. throng cannot see the server",
                ],
                &[],
            );
            says(
                &out,
                &[],
                &[
                    "reset connections before answering anything, though",
                    "hint (timed_out)",
                    "hint (reset)",
                    "hint (closed_by_peer)",
                ],
            );
            drop(never.0);
            drop(late.0);
        },
    );
    let _ = done;
}

/// A client made late by a busy loop sharing its one core (the client
/// niced, so it waits for the loop's turns: a few ms of send lag) against a server that takes 50 ms an answer: its lateness is
/// far under the service time's tail, so the tail is named the server's,
/// not the client's. Without the busy loop the tail is the server's all
/// the same, late or not.
#[test]
fn a_tail_well_above_the_clients_lateness_is_the_servers() {
    let addr = slow_echo(Duration::from_millis(50));
    let a = addr.to_string();
    let run = |name: &str| {
        let (code, out, v) = client_at_400(name, Some(&a));
        assert_eq!(code, 0, "{out}");
        (out, v)
    };
    // A busy loop on the client's core: the client waits for its turn.
    let (late, v) = beside_a_busy_loop(|| run("tail-late"));
    let r = typed(&v);
    assert!(r.lat().send_lag_us.p99 > 1000, "{late}");
    assert!(late.contains("is well above that"), "{late}");
    assert_tail_is_the_servers(&v, &late);
    let codes = v["verdict"]["causes"].to_string();
    assert!(codes.contains("\"server_latency\""), "{codes}");
    // Without the busy loop, the same holds whatever this VM's own stalls
    // did to the client's schedule (a core taken for 1-2 ms every 512 ms
    // makes a few of 800 queries late with nothing on the core): a 50 ms
    // tail is never the client's. That an on-time client says nothing of
    // lateness is a pure function of the figures, asserted exactly by
    // report::tests::a_late_client_is_told_what_would_help.
    let (on_time, v) = run("tail-on-time");
    assert_tail_is_the_servers(&v, &on_time);
}

/// The verdict of a run whose tail is the server's: no cause on the
/// client's side, and none of the client's words.
fn assert_tail_is_the_servers(v: &serde_json::Value, out: &str) {
    let causes = v["verdict"]["causes"].as_array().unwrap();
    for c in causes {
        assert_ne!(c["side"], "client", "{c}\n{out}");
    }
    says(
        out,
        &[],
        &["the client is the bottleneck", "give the client more cores"],
    );
}

/// A client made late by a busy loop on its core (niced, so it waits for
/// the loop's turns) at 400 echoes a second, against a server on another
/// core that answers at once: late against the service time, but using
/// almost no CPU. Its lateness is named as its own, and more cores or
/// workers are not what it is told to get (the README's first run was,
/// at 31% of 2 cores). With no target, the embedded server shares the
/// client's process and core: neither figure is a server's own.
#[test]
fn a_late_idle_client_is_not_told_to_add_cores() {
    let srv = server_on_core_1();
    let a = srv.addr.to_string();
    let ((code, out, v), (e_code, embedded, e_v)) = beside_a_busy_loop(|| {
        (
            client_at_400("idle-late", Some(&a)),
            // The same with no target: the embedded server, in the
            // client's process on the same core, answers.
            client_at_400("idle-late-embedded", None),
        )
    });
    assert_eq!(code, 0, "{out}");
    let r = typed(&v);
    let cpu = r.client.clone().unwrap();
    assert!(!cpu.shares_cores_with_server, "{out}");
    assert!(cpu.cpu_s < 0.5 * cpu.wall_s, "{out}");
    assert!(r.lat().send_lag_us.p99 > 1000, "{out}");
    says(
        &out,
        &["the client sent", "more workers will not help"],
        &[],
    );
    says(
        &out,
        &[],
        &[
            "the client is the bottleneck",
            "more cores",
            "embedded server",
        ],
    );
    assert_eq!(e_code, 0, "{embedded}");
    assert!(typed(&e_v).lat().send_lag_us.p99 > 1000, "{embedded}");
    says(
        &embedded,
        &["the embedded server runs in the client's process"],
        &[],
    );
    says(
        &embedded,
        &[],
        &["the client is the bottleneck", "more cores"],
    );
}

/// Echoes at 400/s over 20 connections for 2 s from one client worker,
/// niced on core 0, to `target` (None: the embedded server).
fn client_at_400(name: &str, target: Option<&str>) -> (i32, String, serde_json::Value) {
    let flags = "--proto echo -c 20 -r 400 --workers 1 --processes 1 -T 2s --check none";
    pinned_client(name, "0", Some("10"), target, flags)
}

/// `f`, run with a busy loop on core 0 (killed after it, or when `f`
/// panics: the guard's drop).
fn beside_a_busy_loop<T>(f: impl FnOnce() -> T) -> T {
    let _hog = common::Daemon(
        Command::new("taskset")
            .args(["-c", "0", "sh", "-c", "while :; do :; done"])
            .spawn()
            .unwrap(),
    );
    f()
}

/// An echo server that answers each read 300 ms later: with --timeout
/// 100ms every query times out, and every answer that still comes is
/// counted answered late (a subset of the timed out), not lost; the
/// verdict fails on the server's side.
#[test]
fn answers_after_their_timeout_are_counted_late() {
    let addr = common::peer(|mut s| {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = s.read(&mut buf) {
            std::thread::sleep(std::time::Duration::from_millis(300));
            if s.write_all(&buf[..n]).is_err() {
                return;
            }
        }
    });
    let (r, out) = exits(
        "answered-late",
        addr,
        "--proto echo -c 2 -r 10 --timeout 100ms --no-verify -T 2s",
        1,
    );
    let q = r.q();
    assert!(q.timed_out >= 15, "{out}");
    assert_eq!(q.answered, 0, "{out}");
    // Each answer came 300-600 ms after its query: all but those of the
    // run's last half second arrived, late.
    assert!(q.answered_late * 10 >= q.timed_out * 7, "{out}");
    assert!(q.answered_late <= q.timed_out, "{out}");
    assert!(out.contains("answered late"), "{out}");
    // Their latencies are in a histogram of their own: one per late
    // answer, none under the server's 300 ms.
    let late = r.latency.as_ref().expect("latency");
    let late = late
        .late_response_time_us
        .as_ref()
        .expect("late answers' times");
    assert_eq!(late.count, q.answered_late, "{out}");
    assert!(late.p50 >= 300_000, "{late:?}");
    assert_eq!(
        r.latency.as_ref().unwrap().response_time_us.count,
        0,
        "{out}"
    );
    let verdict = r.verdict.as_ref().expect("a verdict");
    assert!(!verdict.pass, "{out}");
    assert_eq!(verdict.side, throng::verdict::Side::Server, "{out}");
    assert!(
        verdict.has(throng::verdict::Code::NotKeepingUp),
        "{verdict:?}"
    );
}

/// A closed loop over 10 connections, 5 of which the server takes and
/// never answers, with --no-verify: the run fails on connections.silent
/// (a default check), and names them; it passed with the throughput of
/// five.
#[test]
fn connections_never_answered_fail_the_run_without_verification() {
    let flags = "--closed-loop --no-verify -T 1s";
    let (r, out) = ten_to_every_other_answered("silent-closed-loop", flags);
    assert_eq!(r.connections.silent, 5, "{out}");
    says(&out, &["FAIL  connections.silent==0"], &[]);
    let verdict = r.verdict.expect("a verdict");
    assert_eq!(verdict.side, throng::verdict::Side::Server, "{out}");
    assert!(
        verdict
            .causes
            .iter()
            .any(|c| c.code == throng::verdict::Code::Unanswered && c.label == "silent"),
        "{out}"
    );
}
