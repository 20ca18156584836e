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
//! hint (tls) alert / not TLS / timed out / after the handshake
//!     by hostile_udp_tls::tls_alert_for_the_client_hello_is_a_tls_failure,
//!        tls_garbage_for_the_client_hello_..., tls_peer_that_never_answers_...,
//!        tls_garbage_in_the_middle_of_a_session_ends_it
//!     not each other's (every one asserts the others' words absent)
//! hint (rejected) "rejected the probe sent on them": a 400 to a DNS probe
//!     by interop::nginx_verifies_an_http_probe_and_rejects_a_dns_one
//!     not client::the_ramp_is_establishment_whatever_verification_takes
//! hint (handshake) "server side dropped it": SYNs retransmitted
//!     by client::a_retransmitted_handshake_is_named_as_the_servers_not_the_clients
//!     not client::refused_port_is_counted_and_exits_1
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

use common::{client, in_netns, n, output, server, set_sysctl, temp_dir, BIN};

fn failed(v: &serde_json::Value, bucket: &str) -> u64 {
    n(v, &["connections", "failed", bucket])
}

/// Inside a namespace with only loopback: a target with no route fails
/// unreachable; one behind a `prohibit` route fails with EACCES, which
/// is no bucket of its own (other), listed by its errno.
#[test]
fn unreachable_and_prohibited_routes_are_named_apart() {
    let done = in_netns(|| {
        let (code, out, v, _) = client(
            "unreachable",
            &["10.1.2.3:53", "-c", "5", "-T", "0s", "--no-verify"],
            false,
        );
        assert_eq!(code, 1, "{out}");
        assert_eq!(failed(&v, "unreachable"), 5, "{out}");
        assert!(out.contains("hint (unreachable): no route"), "{out}");
        for other in ["hint (other)", "hint (refused)", "hint (out_of_fds)"] {
            assert!(!out.contains(other), "{out}");
        }

        let ip = output(Command::new("ip").args(["route", "add", "prohibit", "10.9.9.9/32"]));
        assert_eq!(ip.0, 0, "{ip:?}");
        let (code, out, v, _) = client(
            "prohibited",
            &["10.9.9.9:53", "-c", "5", "-T", "0s", "--no-verify"],
            false,
        );
        assert_eq!(code, 1, "{out}");
        assert_eq!(failed(&v, "other"), 5, "{out}");
        assert!(out.contains("errno 13 (Permission denied"), "{out}");
        assert!(
            out.contains("hint (other): connect() failed with an errno"),
            "{out}"
        );
        assert!(!out.contains("hint (unreachable)"), "{out}");
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
    assert!(failed(&v, "out_of_fds") > 0, "{out}");
    assert!(
        out.contains("hint (out_of_fds): this process ran out of file descriptors"),
        "{out}"
    );
    assert!(!out.contains("hint (no_free_port)"), "{out}");
    assert!(!out.contains("cannot accept more"), "{out}");
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
        let (code, out, v, _) = client(
            "tcp-no-port",
            &[
                &srv.addr.to_string(),
                "-c",
                "150",
                "--source-ip",
                "127.0.0.1",
                "--force",
                "-T",
                "0s",
            ],
            false,
        );
        assert_eq!(code, 1, "{out}");
        assert!(failed(&v, "no_free_port") >= 50, "{out}");
        assert!(
            out.contains("hint (no_free_port): ephemeral ports ran out"),
            "{out}"
        );
        assert!(!out.contains("hint (tcp-per-query)"), "{out}");
        assert!(!out.contains("TIME_WAIT"), "{out}");
        assert!(!out.contains("hint (out_of_fds)"), "{out}");
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
    let run = |name: &str, reset: bool| {
        let addr = answers_once_then_ends(reset);
        let (code, out, v, _) = client(
            name,
            &[
                &addr.to_string(),
                "--proto",
                "echo",
                "-c",
                "4",
                "-r",
                "40",
                "-T",
                "1s",
                "--timeout",
                "500ms",
            ],
            false,
        );
        assert_eq!(code, 1, "{out}");
        (out, v)
    };
    let (out, v) = run("closes-mid-query", false);
    assert!(failed(&v, "closed_by_peer") > 0, "{out}");
    assert!(
        out.contains("hint (closed_by_peer): the server closed established connections"),
        "{out}"
    );
    assert!(!out.contains("hint (reset)"), "{out}");
    assert!(!out.contains("hint (half_open)"), "{out}");

    let (out, v) = run("resets-mid-query", true);
    assert!(failed(&v, "reset") > 0, "{out}");
    assert!(
        out.contains("hint (reset): the server reset established connections"),
        "{out}"
    );
    assert!(
        !out.contains("the client closed these connections"),
        "{out}"
    );
    assert!(!out.contains("hint (closed_by_peer)"), "{out}");
    assert!(!out.contains("hint (half_open)"), "{out}");
}

/// A peer that echoes on every other connection it accepts and holds the
/// rest unanswered: the unanswered ones are named as the server's (it was
/// seen, and showed no accept queue that overflowed or fds that ran out).
#[test]
fn a_server_that_answers_some_connections_only() {
    static ACCEPTED: AtomicU64 = AtomicU64::new(0);
    let addr = common::peer(|mut s| {
        let answer = ACCEPTED.fetch_add(1, Ordering::Relaxed).is_multiple_of(2);
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = s.read(&mut buf) {
            if answer && s.write_all(&buf[..n]).is_err() {
                return;
            }
        }
    });
    let (code, out, v, _) = client(
        "some-answered",
        &[
            &addr.to_string(),
            "--proto",
            "echo",
            "-c",
            "10",
            "--connect-timeout",
            "500ms",
            "-T",
            "0s",
        ],
        false,
    );
    assert_eq!(code, 1, "{out}");
    assert_eq!(n(&v, &["connections", "verified"]), 5, "{out}");
    assert_eq!(n(&v, &["connections", "unverified"]), 5, "{out}");
    let line = out
        .lines()
        .find(|l| l.contains("hint (unverified)"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains("5 connection(s) never got an answer"),
        "{out}"
    );
    assert!(
        line.contains("it accepted them and did not answer them"),
        "{out}"
    );
    assert!(!line.contains("full accept queue"), "{out}");
    assert!(!out.contains("no connection got an answer"), "{out}");
}

/// --proto push against an echo server: connections accepted, nothing
/// pushed; named as a server that pushed nothing, not an accept queue.
#[test]
fn a_server_that_pushes_nothing_is_named() {
    let srv = server(&[]);
    let (code, out, _, _) = client(
        "push-nothing",
        &[
            &srv.addr.to_string(),
            "--proto",
            "push",
            "--every",
            "50ms",
            "-c",
            "4",
            "-T",
            "1s",
        ],
        false,
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("got no message in all their time"), "{out}");
    assert!(!out.contains("a full accept queue"), "{out}");
    assert!(!out.contains("no connection got an answer"), "{out}");
}

/// 400k echoes a second asked of one client worker sharing one core
/// with the server: the client's lateness is named with the core they
/// share, not as the client alone, and the service time's tail (the
/// client's late reads) not as the server's Nagle.
#[test]
fn a_client_sharing_its_core_with_the_server_is_named() {
    let srv = common::server_with(
        Command::new("taskset").args(["-c", "1", BIN, "server"]),
        &["--workers", "1"],
    );
    let a = srv.addr.to_string();
    let run = |name: &str, core: &str| {
        let dir = temp_dir(name);
        let json = dir.join("r.json");
        let (code, out, err) = output(
            Command::new("taskset")
                .args(["-c", core, BIN, "client"])
                .args([
                    &a,
                    "--proto",
                    "echo",
                    "-c",
                    "8",
                    "-r",
                    "400k",
                    "--workers",
                    "1",
                    "-T",
                    "1s",
                    "--check",
                    "none",
                    "-q",
                    "--json",
                    json.to_str().unwrap(),
                ]),
        );
        let v = common::read_result(&json);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(code, 0, "{out}\n{err}");
        (out, v)
    };
    let (out, v) = run("one-core", "1");
    assert_eq!(v["client"]["shares_cores_with_server"], true, "{out}");
    // How late the client was varies with the machine's other load: a
    // warning, a note, or "sent on time"; each names the core shared.
    let said = out.lines().find(|l| {
        (l.contains("    warning: the client") || l.contains("    note: the client"))
            && l.contains("share")
            && l.contains("with the server")
    });
    assert!(said.is_some(), "{out}");
    assert!(!out.contains("the client is the bottleneck"), "{out}");
    assert!(!out.contains("is well above that"), "{out}");
    assert!(!out.contains("hint (nagle)"), "{out}");
    drop(srv);
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
    let (code, out, v, _) = client(
        "window-full",
        &[
            &addr.to_string(),
            "--proto",
            "echo",
            "-c",
            "2",
            "--window",
            "1",
            "-r",
            "200",
            "-T",
            "2s",
            "--timeout",
            "500ms",
        ],
        false,
    );
    assert_eq!(code, 1, "{out}");
    assert!(n(&v, &["queries", "waited", "window"]) > 100, "{out}");
    assert!(
        out.contains("waited for room in their connection's --window 1"),
        "{out}"
    );
    assert!(
        out.contains("--window 1 full (the server answering too slowly)"),
        "{out}"
    );
    assert!(!out.contains("the client is the bottleneck"), "{out}");
    assert!(!out.contains("could not keep up"), "{out}");
    assert!(!out.contains("the server is not reading"), "{out}");
}
