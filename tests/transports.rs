//! Transports end to end: UDP, TCP per query and TLS against `throng
//! server`, a UDP peer that drops every other datagram, a TLS server the
//! client must not trust, recycling with session resumption, and `throng
//! compare`'s table and JSON.

mod common;

use std::net::UdpSocket;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::BIN;
use common::{
    exits, output, sent_balances, server, temp_dir, typed, Client, Parts, RunResult, Server,
};
use serde_json::Value;
use throng::domain::Transport;

/// `throng compare` with the words of `line`, its JSON to `json`: (exit
/// code, stdout, stderr).
fn compare(line: &str, json: &std::path::Path) -> (i32, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.arg("compare").args(line.split_whitespace());
    output(cmd.arg("--json").arg(json))
}

/// What a transport's case checks: its server, the result, the output
/// (the case named first).
type Check = fn(&Server, &RunResult, &str);

/// Each transport to `throng server` in the protocol its mode speaks, the
/// client's flags given `{ca}` as the certificate the server's banner
/// names: the run passes, and each case's books are what its transport
/// makes them.
#[test]
fn each_transport_carries_queries_to_the_reference_server() {
    let cases: [(&str, &[&str], &str, Check); 7] = [
        (
            "udp-dns",
            &["--mode", "dns", "--udp"],
            "--transport udp -c 4 -r 2000 -T 1s",
            udp_dns_is_counted_in_datagrams,
        ),
        // --preallocate over UDP made TCP sockets: every query then failed
        // to send on a socket that was never connected.
        (
            "udp-prealloc",
            &["--mode", "dns", "--udp"],
            "--transport udp --preallocate -c 4 -r 1000 -T 1s",
            |_, r, out| {
                sent_balances(r, 501, out);
                assert_eq!(r.errors(), 0, "{out}");
                assert_eq!(r.connections.established, 4, "{out}");
            },
        ),
        (
            "per-query",
            &["--mode", "dns"],
            "--transport tcp-per-query --concurrency 8 -r 1000 -T 1s",
            tcp_per_query_connects_for_each_query,
        ),
        // Closed loop over tcp-per-query keeps its concurrency.
        (
            "per-query-closed",
            &["--mode", "echo"],
            "--transport tcp-per-query --proto echo --closed-loop --concurrency 4 -T 1s",
            |_, r, out| {
                assert!(r.q().answered > 200, "{out}");
                assert_eq!(r.connections.peak, 4, "{out}");
                assert_eq!(r.errors(), 0, "{out}");
            },
        ),
        // Two server processes share the port; a replacement connection
        // lands on either. Tickets sealed under a key both derive from the
        // private key resume on both (a per-process ticket key resumed
        // about half).
        (
            "tls-processes",
            &["--mode", "pong", "--tls", "--processes", "2"],
            "--transport tls --tls-ca {ca} --proto ping -c 4 -r 2000 --max-queries-per-conn 20 \
             --tls-resume -T 1s",
            |_, r, out| {
                let recycled = r.connections.established - 4;
                assert!(recycled >= 50, "{out}");
                let resumed = r.connections.tls_resumed;
                assert!(
                    resumed * 10 >= recycled * 9,
                    "{resumed} of {recycled}\n{out}"
                );
            },
        ),
        (
            "tls",
            &["--mode", "pong", "--tls"],
            "--transport tls --tls-ca {ca} --proto ping -c 4 --closed-loop \
             --max-queries-per-conn 20 --tls-resume -T 1s",
            tls_recycles_with_resumption,
        ),
        // 256 KiB bodies: more than rustls buffers by default, each way.
        (
            "tls-big",
            &["--mode", "http", "--tls", "--body-size", "256KiB"],
            "--transport tls --tls-insecure --proto http -c 2 --closed-loop --window 4 -T 500ms",
            |_, r, out| {
                let answered = r.q().answered;
                assert!(answered > 10, "{out}");
                assert_eq!(r.q().http_status["200"], answered, "{out}");
                assert_eq!(r.errors(), 0, "{out}");
                assert!(r.q().bytes_in > answered * 256 * 1024, "{out}");
            },
        ),
    ];
    for (name, mode, flags, check) in cases {
        let srv = server(mode);
        let flags = match flags.contains("{ca}") {
            true => flags.replace("{ca}", &server_ca(&srv)),
            false => flags.to_string(),
        };
        let ran = Client::new(name)
            .arg(srv.addr.to_string())
            .flags(&flags)
            .run();
        let out = format!("{name}: {}", ran.out);
        assert_eq!(ran.code, 0, "exit code\n{out}");
        check(&srv, &ran.result(), &out);
    }
}

/// UDP to the DNS server: every query answered or in flight, each
/// NOERROR, a socket a connection, payload bytes only.
fn udp_dns_is_counted_in_datagrams(_: &Server, r: &RunResult, out: &str) {
    let sent = sent_balances(r, 1501, out);
    assert_eq!(r.dns().rcodes["NOERROR"], r.q().answered, "{out}");
    assert_eq!(r.errors(), 0, "{out}");
    assert_eq!(r.connections.established, 4, "{out}");
    assert_eq!(r.scenario.transport, Transport::Udp, "{out}");
    // Payload bytes only: 29-byte queries for example.com A.
    assert_eq!(r.q().bytes_out, sent * 29, "{out}");
}

/// tcp-per-query opens a connection per query and counts the connect.
fn tcp_per_query_connects_for_each_query(srv: &Server, r: &RunResult, out: &str) {
    let sent = sent_balances(r, 801, out);
    // One connection per query sent (the last ones may still be
    // connecting when the run ends), each closed (at the end, or after its
    // answer).
    let established = r.connections.established;
    assert!(established >= sent && established <= sent + 8, "{out}");
    assert_eq!(r.connections.closed, established, "{out}");
    assert!(r.connections.peak <= 8, "{out}");
    // Service time includes the connect: each query's is its connect plus
    // its round trip, so every quantile is at least the connect's.
    let connect = r.connections.connect_time_us.p50;
    let service = r.lat().service_time_us.p50;
    assert!(
        service >= connect,
        "service {service} < connect {connect}\n{out}"
    );
    let text = Client::new("per-query-text")
        .arg(srv.addr.to_string())
        .flags("--transport tcp-per-query -r 200 -T 1s")
        .run()
        .out;
    assert!(text.contains("connect share"), "{text}");
}

/// TLS against the reference server (its banner names its certificate's
/// digest), its connections recycled and their sessions resumed.
fn tls_recycles_with_resumption(srv: &Server, r: &RunResult, out: &str) {
    assert!(
        srv.banner.iter().any(|l| l.contains("SHA-256 ")),
        "{:?}",
        srv.banner
    );
    let answered = r.q().answered;
    assert!(answered > 100, "{out}");
    assert_eq!(r.errors(), 0, "{out}");
    let recycled = r.q().recycled_connections;
    assert!(recycled >= 4, "{out}");
    let established = r.connections.established;
    // Every recycled connection is replaced, and every replacement is
    // either still open at the end or recycled in turn.
    assert!(
        established >= recycled && established <= recycled + 8,
        "{out}"
    );
    assert!(r.connections.tls_resumed > 0, "{out}");
    assert!(
        r.connections.tls_handshake_us.as_ref().unwrap().p50 > 0,
        "{out}"
    );
    // All verified by their handshake, but those still shaking hands at
    // the end.
    let verified = r.connections.verified;
    assert!(
        verified <= established && verified + 4 >= established,
        "{out}"
    );
}

#[test]
fn udp_losses_are_timeouts_counted_exactly() {
    // Echoes every other datagram, drops the rest.
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = sock.local_addr().unwrap();
    let answered = Arc::new(AtomicU64::new(0));
    let dropped = Arc::new(AtomicU64::new(0));
    let (a, d) = (answered.clone(), dropped.clone());
    thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut i = 0u64;
        while let Ok((len, from)) = sock.recv_from(&mut buf) {
            i += 1;
            if i.is_multiple_of(2) {
                d.fetch_add(1, Ordering::SeqCst);
            } else {
                sock.send_to(&buf[..len], from).unwrap();
                a.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    // A lossy peer: the counts are the point, not a verdict (--check none).
    let flags = "--transport udp --proto echo -c 1 -r 400 --arrivals constant -T 2s \
                 --timeout 300ms --check none";
    let (r, out) = exits("udp-loss", addr, flags, 0);
    let sent = r.q().sent;
    let got = r.q().answered;
    let timed_out = r.q().timed_out;
    let in_flight = r.q().in_flight_at_end;
    assert_eq!(got + timed_out + in_flight, sent, "{out}");
    // The peer has seen every datagram (it may lag the client's end).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while answered.load(Ordering::SeqCst) + dropped.load(Ordering::SeqCst) < sent {
        assert!(
            std::time::Instant::now() < deadline,
            "the peer lost datagrams"
        );
        thread::yield_now();
    }
    let (a, d) = (
        answered.load(Ordering::SeqCst),
        dropped.load(Ordering::SeqCst),
    );
    assert_eq!(a + d, sent);
    // Each answer arrived or was still on its way at the end; each dropped
    // one timed out or had not yet reached its timeout.
    assert!(
        got <= a && timed_out <= d,
        "{got}/{a} {timed_out}/{d}\n{out}"
    );
    assert_eq!((a - got) + (d - timed_out), in_flight, "{out}");
    assert!(a.abs_diff(d) <= 1, "every other one: {a} vs {d}");
    assert!(r.q().timed_out > 300, "{out}");
}

#[test]
fn transport_flags_are_checked() {
    for (args, needle) in [
        (
            vec!["--transport", "udp", "--proto", "http", "-r", "10"],
            "byte stream",
        ),
        (vec!["--transport", "tcp-per-query"], "give a rate"),
        (
            vec!["--transport", "tcp-per-query", "--interval", "1s"],
            "--interval",
        ),
        (vec!["--tls-insecure", "-r", "10"], "--transport tls"),
        (vec!["--alpn", "dot", "-r", "10"], "--transport tls"),
        (
            vec!["--transport", "tls", "--tls-ca", "/nonexistent.pem"],
            "no such file",
        ),
        (
            vec!["--transport", "tls", "--tls-ca", "/dev/null"],
            "not a regular file",
        ),
    ] {
        let mut all = vec!["client", "127.0.0.1:9"];
        all.extend(args);
        let (code, _, err) = common::run(&all);
        assert_eq!(code, 2, "{all:?}: {err}");
        assert!(err.contains(needle), "{all:?}: {err}");
    }
}

/// The certificate file a `throng server --tls` banner names.
fn server_ca(srv: &Server) -> String {
    srv.banner
        .iter()
        .find_map(|l| l.split("--tls-ca ").nth(1))
        .map(|r| r.split(' ').next().unwrap().to_string())
        .unwrap_or_else(|| panic!("no --tls-ca in {:?}", srv.banner))
}

#[test]
fn tls_with_the_wrong_ca_fails_at_once_with_the_reason() {
    let srv = server(&["--mode", "echo", "--tls"]);
    // A certificate of another server: not the one that signed this one.
    let other = server(&["--mode", "echo", "--tls"]);
    let wrong = server_ca(&other);
    let started = std::time::Instant::now();
    let flags = format!("--transport tls --tls-ca {wrong} -c 3 -r 100 -T 30s");
    let (r, out) = exits("tls-wrong-ca", srv.addr, &flags, 1);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "it waited: {out}"
    );
    assert_eq!(r.connections.failed["tls"], 3, "{out}");
    assert!(out.contains("invalid peer certificate"), "{out}");
    assert!(out.contains("--tls-insecure"), "the fix is named: {out}");
    // And with --tls-insecure the same server is fine.
    let ran = Client::new("tls-insecure")
        .arg(srv.addr.to_string())
        .flags("--transport tls --tls-insecure -c 3 -T 200ms")
        .run();
    ran.exits(0);
}

#[test]
fn tls_without_ca_roots_is_bad_usage_before_any_connection() {
    // The system's store comes through rustls-native-certs, which reads
    // SSL_CERT_FILE and SSL_CERT_DIR: a missing file is named with its fix,
    // where every handshake used to fail one by one.
    let accepted = Arc::new(AtomicU64::new(0));
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let count = accepted.clone();
    thread::spawn(move || {
        for s in l.incoming().flatten() {
            count.fetch_add(1, Ordering::SeqCst);
            drop(s);
        }
    });
    for (file, dir, needle) in [
        (
            "/nonexistent",
            None,
            "SSL_CERT_FILE=/nonexistent: cannot read",
        ),
        // Named even when SSL_CERT_DIR would give roots: the file was meant.
        (
            "/nonexistent",
            Some("/etc/ssl/certs"),
            "SSL_CERT_FILE=/nonexistent: cannot read",
        ),
        (
            "/dev/null",
            None,
            "no trusted CA certificate for TLS in SSL_CERT_FILE=/dev/null",
        ),
    ] {
        let mut cmd = Command::new(BIN);
        cmd.arg("client")
            .arg(addr.to_string())
            .args("--transport tls -c 2 -T 1s".split(' '))
            .env("SSL_CERT_FILE", file)
            .env_remove("SSL_CERT_DIR");
        if let Some(d) = dir {
            cmd.env("SSL_CERT_DIR", d);
        }
        let (code, out, err) = output(&mut cmd);
        assert_eq!(code, 2, "{file} {dir:?}: {out}\n{err}");
        assert!(err.contains(needle), "{file} {dir:?}: {err}");
        assert!(err.contains("--tls-ca FILE"), "the fix is named: {err}");
        assert!(out.is_empty(), "nothing planned or run: {out}");
    }
    thread::sleep(Duration::from_millis(100));
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "a connection was made");
}

#[test]
fn compare_prints_one_table_and_writes_every_run() {
    let dir = temp_dir("compare");
    let json = dir.join("cmp.json");
    let (code, out, err) = compare(
        "-r 300 -T 1s --warmup 0 -c 3 --max-queries-per-conn none,10",
        &json,
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let rows = table_rows(&out, "p99.9", 6);
    let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "udp",
            "tcp-per-query",
            "tcp",
            "tcp (recycle 10)",
            "tls",
            "tls (recycle 10)"
        ],
        "{out}"
    );
    for (name, cols) in &rows {
        // errors is the second-to-last column
        assert_eq!(cols[cols.len() - 2], "0", "errors in {name}\n{out}");
    }
    let v: Value = common::read_compare(&json);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 6);
    assert_eq!(runs[1]["transport"], "tcp-per-query");
    assert_eq!(runs[3]["max_queries_per_conn"], 10);
    for r in runs {
        assert!(typed(&r["result"]).q().answered > 200, "{r}");
        assert_eq!(r["exit_code"], 0);
    }
    assert_eq!(v["verdict"]["pass"], true, "{}", v["verdict"]);
    assert_eq!(v["verdict"]["side"], "none", "{}", v["verdict"]);
    // A run in which nothing is answered fails the comparison, and its
    // verdict carries the run's causes under the case's label.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nobody = closed.local_addr().unwrap().to_string();
    drop(closed);
    let line = format!("{nobody} --transports udp -r 50 -T 300ms --warmup 0 --timeout 100ms");
    let (code, _, err) = compare(&line, &json);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("udp: no query was answered"), "{err}");
    let v: Value = common::read_compare(&json);
    let verdict = &v["verdict"];
    assert_eq!(verdict["pass"], false, "{verdict}");
    assert_ne!(verdict["side"], "none", "{verdict}");
    let causes = verdict["causes"].as_array().unwrap();
    assert!(!causes.is_empty(), "{verdict}");
    assert!(causes.iter().all(|c| c["label"] == "udp"), "{verdict}");
    let _ = std::fs::remove_dir_all(&dir);
    let (code, _, err) = common::run(&["compare", "--queries", "10", "--window", "4"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--window does not apply"), "{err}");
}

/// A Ctrl-C at the terminal reaches compare and the client it runs: the
/// comparison stops, keeps what was measured and exits 130 (interrupted),
/// not 3 (unmeasured).
#[test]
fn an_interrupted_compare_exits_130_with_what_it_measured() {
    use std::os::unix::process::CommandExt;
    let dir = temp_dir("compare-int");
    let json = dir.join("cmp.json");
    let peer = UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = peer.local_addr().unwrap().to_string();
    let child = common::Daemon(
        Command::new(BIN)
            .args(["compare", &target, "--transports", "udp,tcp"])
            .args("-r 50 -T 30s --warmup 0 --timeout 100ms --json".split(' '))
            .arg(&json)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap(),
    );
    // The first query is the client at work, its signal handlers installed.
    let mut buf = [0u8; 512];
    peer.recv_from(&mut buf).unwrap();
    common::signal(-(child.id() as i32), libc::SIGINT);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    let v: Value = common::read_compare(&json);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "the udp run only: {v}");
    assert_eq!(runs[0]["exit_code"], 130, "{v}");
    assert!(typed(&runs[0]["result"]).q().sent > 0, "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The rows of a compare table: (transport, columns), after its header
/// (the first line that starts with `transport` and holds `header`).
fn table_rows(out: &str, header: &str, rows: usize) -> Vec<(String, Vec<String>)> {
    let header = out
        .lines()
        .position(|l| l.starts_with("transport") && l.contains(header))
        .unwrap_or_else(|| panic!("no table header:\n{out}"));
    out.lines()
        .skip(header + 1)
        .take(rows)
        .map(|r| {
            let name = r.split("  ").next().unwrap().trim().to_string();
            let cols = r[name.len()..]
                .split_whitespace()
                .map(String::from)
                .collect();
            (name, cols)
        })
        .collect()
}

/// The benchmark throng grew from: N queries one after another per
/// transport, queries/s and mean time per query. It was a usage error
/// ("--queries needs --rate").
#[test]
fn compare_queries_without_rate_runs_them_one_after_another() {
    let dir = temp_dir("compare-seq");
    let json = dir.join("cmp.json");
    let (code, out, err) = compare("--queries 300 --warmup 0", &json);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("300 queries one after another"), "{out}");
    let header = out.lines().find(|l| l.starts_with("transport")).unwrap();
    let cols: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        cols,
        [
            "transport",
            "queries",
            "queries/s",
            "mean",
            "p50",
            "p99",
            "p99.9",
            "errors",
            "connections"
        ],
        "{out}"
    );
    let rows = table_rows(&out, "", 4);
    let names: Vec<&str> = rows.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["udp", "tcp-per-query", "tcp", "tls"], "{out}");
    for (name, cols) in &rows {
        assert_eq!(cols[0], "300/300", "{name}: {out}");
        let qps: f64 = cols[1].parse().unwrap_or_else(|_| panic!("{name}: {out}"));
        assert!(qps > 0.0, "{name}: {out}");
        // mean: a number and its unit.
        assert!(
            cols[2].parse::<f64>().is_ok() && ["µs", "ms", "s"].contains(&cols[3].as_str()),
            "{out}"
        );
    }
    let v: Value = common::read_compare(&json);
    for r in v["runs"].as_array().unwrap() {
        let res = typed(&r["result"]);
        let t = r["transport"].as_str().unwrap();
        assert_eq!(res.q().sent, 300, "{t}");
        assert_eq!(res.q().answered, 300, "{t}");
        assert_eq!(res.q().timed_out, 0, "{t}");
        // One client: one connection, or one per query, one at a time.
        let want = if t == "tcp-per-query" { 300 } else { 1 };
        assert_eq!(res.connections.established, want, "{t}");
        assert_eq!(res.connections.peak, 1, "{t}");
        let window = res.scenario.traffic.as_ref().unwrap().window;
        assert_eq!(window, Some(1), "{t}");
        assert_eq!(r["exit_code"], 0, "{t}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tcp_per_query_says_when_time_wait_uses_up_the_ports() {
    // A private namespace with 100 ports and no TIME_WAIT reuse: throng
    // plans 4 loopback sources (a quarter of the range per pair), so 400
    // ports; 800 queries need 800 ports for 60 s each.
    let done = common::in_netns(|| {
        common::set_sysctl("net.ipv4.ip_local_port_range", "40000 40099");
        common::set_sysctl("net.ipv4.tcp_tw_reuse", "0");
        let srv = server(&["--mode", "echo"]);
        // Half the queries found no port: they were due and never
        // answered, which fails the default check (it passed when the
        // check counted only the queries sent).
        let flags = "--transport tcp-per-query --proto echo -r 400 --arrivals constant -T 2s \
                     --max-failures 1000";
        let (r, out) = exits("per-query-tw", srv.addr, flags, 1);
        assert!(out.contains("FAIL  queries.ok>=99%"), "{out}");
        assert!(out.contains("TIME_WAIT"), "warned before: {out}");
        let no_port = r.connections.failed["no_free_port"];
        assert!(no_port > 200, "{out}");
        assert_eq!(r.q().errors["connect"], no_port, "{out}");
        assert!(out.contains("tcp_tw_reuse=1"), "the fix is named: {out}");
        assert!(out.contains("hint (no_free_port)"), "{out}");
        assert!(
            out.contains("hint (tcp-per-query): each closed connection"),
            "{out}"
        );
        assert!(r.q().answered >= 90, "{out}");
    });
    let _ = done;
}
