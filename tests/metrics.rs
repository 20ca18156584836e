//! `--metrics ADDR`: the server's and the client's Prometheus endpoints,
//! scraped over real sockets on 127.0.0.1. Every scrape passes Debian's
//! `promtool check metrics`; the server's counters after a known run are
//! its own summary's and --stats-json's; a client is scraped while it runs;
//! a real Prometheus scrapes a server and says it is up. promtool and
//! prometheus (Debian's `prometheus` package, installed by .ci/run) missing
//! fail in CI and skip loudly elsewhere.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, program, run, server, temp_dir, Client, Daemon, Parts, RunResult};
use common::{Server, BIN};
use throng::verdict::{Code, Side};

/// One HTTP/1.0 request (so that no answer comes chunked): (status, head,
/// body).
fn http(addr: &str, method: &str, path: &str, accept: Option<&str>) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n{accept}\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_string(), body.to_string())
}

/// The metrics text at `addr` (200, the text format).
fn scrape(addr: &str) -> String {
    let (status, head, body) = http(addr, "GET", "/metrics", None);
    assert_eq!(status, 200, "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    body
}

/// A sample's value by its series (name and labels as written).
fn value(text: &str, series: &str) -> f64 {
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
        .parse()
        .unwrap()
}

fn count(text: &str, series: &str) -> u64 {
    let v = value(text, series);
    assert_eq!(v.fract(), 0.0, "{series} {v}");
    v as u64
}

/// Scrapes until `ready` holds (the figures a run leaves behind reach the
/// endpoint within a second or two); the last scrape.
fn scrape_until(addr: &str, what: &str, ready: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = scrape(addr);
        if ready(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "never {what}:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `promtool check metrics` on a scrape: it must pass (no lint either).
/// False when promtool is missing (skipped loudly; a failure in CI).
fn promtool_passes(text: &str) -> bool {
    let Some(promtool) = program("promtool", "prometheus") else {
        return false;
    };
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// The endpoint a server's banner names.
fn metrics_addr(lines: &[String]) -> String {
    lines
        .iter()
        .find_map(|l| l.strip_prefix("metrics on http://"))
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no 'metrics on' line: {lines:?}"))
        .to_string()
}

/// `throng server <flags> --metrics 127.0.0.1:0` (the flags split at
/// spaces): the server, and its endpoint as its banner names it.
fn metrics_server(flags: &str) -> (Server, String) {
    let mut args: Vec<&str> = flags.split_whitespace().collect();
    args.extend(["--metrics", "127.0.0.1:0"]);
    let srv = server(&args);
    let m = metrics_addr(&srv.banner);
    (srv, m)
}

/// The number after `word` on the summary line that starts with `line`.
fn summary_number(summary: &str, line: &str, word: &str) -> u64 {
    let l = summary
        .lines()
        .find(|l| l.trim_start().starts_with(line))
        .unwrap_or_else(|| panic!("no '{line}' line in:\n{summary}"));
    let after = &l[l.find(word).unwrap_or_else(|| panic!("no '{word}' in {l}")) + word.len()..];
    after
        .trim_start_matches([' ', '+'])
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("no number after '{word}' in {l}"))
}

/// 300 DNS queries over 10 connections, closed loop: the server answers
/// each as one request.
fn known_run(name: &str, srv: &Server) -> RunResult {
    let (r, out) = Client::new(&format!("{name}-client"))
        .arg(srv.addr.to_string())
        .flags("--proto dns -c 10 --closed-loop --queries 300")
        .ok();
    assert_eq!(r.q().answered, 300, "{out}");
    r
}

#[test]
fn server_counters_after_a_known_run_are_its_summary() {
    let dir = temp_dir("metrics-server");
    let stats = dir.join("stats.jsonl");
    let (srv, m) = metrics_server(&format!("--mode dns --stats-json {}", stats.display()));

    // Before any connection: every family, at zero, and a valid text.
    let idle = scrape(&m);
    assert_eq!(count(&idle, "throng_server_processes"), 1);
    assert_eq!(count(&idle, "throng_server_accepted_total"), 0);
    assert_eq!(
        count(&idle, "throng_server_errors_total{kind=\"malformed\"}"),
        0
    );
    assert!(
        !idle.contains("process=\""),
        "one process: no per-process series\n{idle}"
    );
    promtool_passes(&idle);

    // Only GET /metrics; OpenMetrics when the scraper asks for it.
    assert_eq!(http(&m, "GET", "/", None).0, 404);
    assert_eq!(http(&m, "GET", "/metricsx", None).0, 404);
    let (status, head, _) = http(&m, "POST", "/metrics", None);
    assert_eq!(status, 405);
    assert!(head.contains("Allow: GET"), "{head}");
    let (status, head, om) = http(
        &m,
        "GET",
        "/metrics?x=1",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert_eq!(status, 200);
    assert!(
        head.contains("Content-Type: application/openmetrics-text"),
        "{head}"
    );
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(
        om.contains("# TYPE throng_server_accepted counter\n"),
        "{om}"
    );

    let result = known_run("metrics-server", &srv);
    // The server sees the client's closes a moment after the client ends.
    let text = scrape_until(&m, "every connection closed", |t| {
        count(t, "throng_server_closed_total") == 10 && count(t, "throng_server_connections") == 0
    });
    promtool_passes(&text);
    assert_eq!(count(&text, "throng_server_accepted_total"), 10);
    assert_eq!(count(&text, "throng_server_requests_total"), 300);
    assert_eq!(
        count(&text, "throng_server_requests_total"),
        result.q().sent,
        "one request per query sent"
    );
    assert_eq!(count(&text, "throng_server_connections_peak"), 10);
    let bytes_in = count(&text, "throng_server_received_bytes_total");
    let bytes_out = count(&text, "throng_server_sent_bytes_total");
    // What the client wrote and read, byte for byte.
    assert_eq!(bytes_in, result.q().bytes_out);
    assert_eq!(bytes_out, result.q().bytes_in);
    assert!(bytes_out > bytes_in, "answers are longer than questions");

    // --stats-json's seconds, once one is written after the run, add up to
    // the same counters.
    let deadline = Instant::now() + Duration::from_secs(10);
    let sum = |key: &str| -> u64 {
        std::fs::read_to_string(&stats)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let v = serde_json::from_str::<serde_json::Value>(l).unwrap();
                common::conforms("server-stats", &v);
                v[key].as_u64().unwrap()
            })
            .sum()
    };
    while sum("closed_per_s") < 10 {
        assert!(Instant::now() < deadline, "no stats second with the closes");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(sum("accepted_per_s"), 10);
    assert_eq!(sum("requests_per_s"), 300);
    assert_eq!(sum("bytes_in_per_s"), bytes_in);
    assert_eq!(sum("bytes_out_per_s"), bytes_out);
    assert_eq!(sum("errors"), 0);

    let (status, summary) = srv.stop();
    assert!(status.success(), "{summary}");
    assert_eq!(summary_number(&summary, "connections", "accepted"), 10);
    assert_eq!(summary_number(&summary, "connections", "closed"), 10);
    assert_eq!(summary_number(&summary, "connections", "peak"), 10);
    assert_eq!(summary_number(&summary, "requests", "requests"), 300);
    assert!(summary.contains("errors       none"), "{summary}");
    for kind in ["malformed", "connection", "out_of_fds", "udp_dropped"] {
        assert_eq!(
            count(
                &text,
                &format!("throng_server_errors_total{{kind=\"{kind}\"}}")
            ),
            0
        );
    }
    assert_eq!(
        count(&text, "throng_server_listen_overflows_total"),
        summary_number(&summary, "listen queue", "overflows")
    );
    assert_eq!(
        count(&text, "throng_server_listen_drops_total"),
        summary_number(&summary, "listen queue", "drops")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_server_of_several_processes_shows_each_and_all() {
    let (srv, m) = metrics_server("--mode dns --processes 2 --workers 1");
    let idle = scrape(&m);
    assert_eq!(count(&idle, "throng_server_processes"), 2);
    assert_eq!(
        count(&idle, "throng_server_process_connections{process=\"2\"}"),
        0
    );
    promtool_passes(&idle);

    known_run("metrics-processes", &srv);
    // Children say their counters once a second.
    let text = scrape_until(&m, "every connection closed in the children's lines", |t| {
        count(t, "throng_server_closed_total") == 10
            && count(t, "throng_server_requests_total") == 300
    });
    promtool_passes(&text);
    let per = |name: &str| -> u64 {
        (1..=2)
            .map(|p| count(&text, &format!("{name}{{process=\"{p}\"}}")))
            .sum()
    };
    assert_eq!(per("throng_server_process_accepted_total"), 10);
    assert_eq!(per("throng_server_process_requests_total"), 300);
    assert_eq!(
        per("throng_server_process_received_bytes_total"),
        count(&text, "throng_server_received_bytes_total")
    );
    assert_eq!(per("throng_server_process_connections"), 0);

    let (status, summary) = srv.stop();
    assert!(status.success(), "{summary}");
    assert_eq!(
        summary_number(&summary, "connections", "accepted"),
        count(&text, "throng_server_accepted_total")
    );
    assert_eq!(summary_number(&summary, "requests", "requests"), 300);
}

/// The elastic server (the default, --processes auto) serves its endpoint
/// from its first process: its own counters live, each process it adds
/// from that one's lines, each with its own series.
#[test]
fn an_elastic_server_grows_and_its_endpoint_follows() {
    // 400 fds per process: 700 connections need three processes.
    let srv = common::elastic_server(400, "2000", &["--metrics", "127.0.0.1:0"]);
    let m = metrics_addr(&srv.banner);
    Client::new("metrics-elastic")
        .arg(srv.addr.to_string())
        .flags("-c 700 --connect-rate 2k -T 1s --processes 1")
        .ok();
    let text = scrape_until(&m, "every process's closes", |t| {
        count(t, "throng_server_closed_total") == 700
    });
    promtool_passes(&text);
    let processes = count(&text, "throng_server_processes");
    assert!(processes >= 3, "{text}");
    let per = |name: &str| -> u64 {
        (1..=processes)
            .map(|p| count(&text, &format!("{name}{{process=\"{p}\"}}")))
            .sum()
    };
    assert_eq!(per("throng_server_process_accepted_total"), 700);
    assert_eq!(per("throng_server_process_closed_total"), 700);
    assert_eq!(count(&text, "throng_server_accepted_total"), 700);
    let (status, summary) = srv.stop();
    assert!(status.success(), "{summary}");
    assert_eq!(summary_number(&summary, "connections", "accepted"), 700);
    assert_eq!(
        summary_number(&summary, "connections", "peak"),
        count(&text, "throng_server_connections_peak")
    );
    assert_eq!(
        summary_number(&summary, "requests", "requests"),
        count(&text, "throng_server_requests_total")
    );
}

/// `throng client TARGET <flags> -q --metrics 127.0.0.1:0` (the flags
/// split at spaces), a child with piped stdout; its stdout lines up to the
/// one that names the endpoint, and the endpoint.
fn client_with_metrics(
    target: &str,
    flags: &str,
) -> (common::Daemon, BufReader<std::process::ChildStdout>, String) {
    let mut child = common::Daemon(
        Command::new(BIN)
            .args(["client", target])
            .args(flags.split_whitespace())
            .args(["-q", "--metrics", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn throng client"),
    );
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the client ended before naming its endpoint: {lines:?}"
        );
        let done = line.starts_with("metrics on http://");
        lines.push(line.trim_end().to_string());
        if done {
            break;
        }
    }
    let addr = metrics_addr(&lines);
    (child, out, addr)
}

/// The figures a live client shows hold together: histograms' counts are
/// the answers they timed, buckets grow, nothing goes past what was sent.
fn check_client_scrape(text: &str) {
    let sent = count(text, "throng_client_queries_sent_total");
    let answered = count(text, "throng_client_queries_answered_total");
    assert!(answered <= sent, "{text}");
    // Bytes in Prometheus' naming: the unit, then _total.
    assert!(count(text, "throng_client_sent_bytes_total") > 0, "{text}");
    assert!(
        count(text, "throng_client_received_bytes_total") > 0,
        "{text}"
    );
    for h in [
        "throng_client_response_time_seconds",
        "throng_client_service_time_seconds",
    ] {
        let n = count(text, &format!("{h}_count"));
        assert!(n > 0 && n <= sent, "{h}: {n} of {sent}\n{text}");
        assert_eq!(count(text, &format!("{h}_bucket{{le=\"+Inf\"}}")), n);
        let buckets: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{h}_bucket{{")))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(buckets.len(), 20, "10 µs .. 10 s and +Inf");
        assert!(
            text.contains(&format!("{h}_bucket{{le=\"0.000025\"}}")),
            "a bucket below 50 µs"
        );
        assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
        assert!(value(text, &format!("{h}_sum")) > 0.0);
    }
    let target = value(text, "throng_client_target_queries_total");
    assert!(target > 0.0, "{text}");
    assert_eq!(
        count(
            text,
            "throng_client_query_errors_total{cause=\"malformed\"}"
        ),
        0
    );
    assert_eq!(
        count(
            text,
            "throng_client_connections_failed_total{cause=\"refused\"}"
        ),
        0
    );
    promtool_passes(text);
}

#[test]
fn a_client_is_scraped_while_it_runs() {
    let srv = server(&["--mode", "dns"]);
    let dir = temp_dir("metrics-client");
    let json = dir.join("r.json");
    let flags = format!("--proto dns -c 10 -r 1000 -T 3 --json {}", json.display());
    let (mut child, _out, m) = client_with_metrics(&srv.addr.to_string(), &flags);
    let text = scrape_until(&m, "a second of answers timed", |t| {
        count(t, "throng_client_response_time_seconds_count") > 0
    });
    assert_eq!(count(&text, "throng_client_connections"), 10);
    assert_eq!(count(&text, "throng_client_connections_opened_total"), 10);
    assert_eq!(
        count(&text, "throng_client_connections_attempted_total"),
        10
    );
    check_client_scrape(&text);
    let sent_then = count(&text, "throng_client_queries_sent_total");
    let status = child.wait().unwrap();
    assert!(status.success());
    let r = common::outcome(&json);
    assert!(sent_then <= r.q().sent);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_client_of_several_processes_shows_their_sum() {
    let srv = server(&["--mode", "dns"]);
    let flags = "--proto dns --processes 2 -c 10 -r 1000 -T 3";
    let (mut child, _out, m) = client_with_metrics(&srv.addr.to_string(), flags);
    // Each child holds 5: the parent's figures are their sum.
    let text = scrape_until(&m, "both children's connections and answers", |t| {
        count(t, "throng_client_connections") == 10
            && count(t, "throng_client_response_time_seconds_count") > 0
    });
    assert_eq!(count(&text, "throng_client_connections_opened_total"), 10);
    check_client_scrape(&text);
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_busy_address_is_a_usage_error_naming_it() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let (code, _, err) = run(&[
        "server",
        "--listen",
        "127.0.0.1:0",
        "--processes",
        "1",
        "--metrics",
        &addr,
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("--metrics {addr}")), "{err}");
    assert!(err.contains("give another port"), "{err}");
    let (code, out, err) = run(&["client", "-c", "1", "-T", "0s", "--metrics", &addr]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains(&format!("--metrics {addr}")), "{err}");
    // A port alone is refused: the address is always said.
    let (code, _, err) = run(&["server", "--metrics", "9464"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("127.0.0.1:9464"), "{err}");
}

/// Waits until the server's process has `n` threads answering scrapes
/// (`metrics-scrape`, in /proc): the sign that it holds what was sent.
fn scrape_threads(srv: &Server, n: usize) {
    let task = format!("/proc/{}/task", srv.child.id());
    let count = || {
        std::fs::read_dir(&task)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|t| {
                        std::fs::read_to_string(t.path().join("comm"))
                            .is_ok_and(|c| c.trim() == "metrics-scrape")
                    })
                    .count()
            })
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while count() != n {
        assert!(
            Instant::now() < deadline,
            "{} scrape threads, not {n}",
            count()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Scrapers that send their request a byte at a time hold only their own
/// connections: another scrape is answered meanwhile, one past the 16 at
/// once is told 503 at once, and each slow one is cut at the request's
/// deadline (5 s from its accept). One such scraper blocked every other
/// scrape for as long as it kept sending.
#[test]
fn slow_scrapers_block_no_other_and_are_cut_at_the_deadline() {
    let (srv, m) = metrics_server("");
    let opened = Instant::now();
    let first = TcpStream::connect(&m).unwrap();
    // A byte every 300 ms to each slow connection, until each is closed.
    let drip = |conns: Vec<TcpStream>| {
        std::thread::spawn(move || {
            let mut open: Vec<TcpStream> = conns.iter().map(|c| c.try_clone().unwrap()).collect();
            let request = b"GET /metrics HTTP/1.0\r\nX-Slow: ";
            for i in 0.. {
                let byte = request.get(i).copied().unwrap_or(b'x');
                open.retain_mut(|c| c.write_all(&[byte]).is_ok());
                if open.is_empty() || i > 100 {
                    return;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        })
    };
    let dripping = drip(vec![first.try_clone().unwrap()]);
    scrape_threads(&srv, 1);

    let t = Instant::now();
    let text = scrape(&m);
    assert!(text.contains("throng_server_accepted_total"), "{text}");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "a scrape beside a slow one took {:?}",
        t.elapsed()
    );

    // 15 more: 16 under way (the kernel may queue connections out of the
    // order they were made: wait until the server's threads hold all 16),
    // then the next is refused at once.
    scrape_threads(&srv, 1);
    let more: Vec<TcpStream> = (0..15).map(|_| TcpStream::connect(&m).unwrap()).collect();
    let dripping_more = drip(more.iter().map(|c| c.try_clone().unwrap()).collect());
    scrape_threads(&srv, 16);
    let t = Instant::now();
    let (status, head, _) = http(&m, "GET", "/metrics", None);
    assert_eq!(status, 503, "{head}");
    assert!(head.contains("Retry-After"), "{head}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());

    // Each slow one is closed at its deadline, with no answer.
    for mut c in std::iter::once(first).chain(more) {
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got); // EOF, or a reset: closed either way
        assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
    }
    let held = opened.elapsed();
    assert!(
        held >= Duration::from_millis(4500) && held < Duration::from_secs(10),
        "the slow scrapers were closed after {held:?}, not at the 5 s deadline"
    );
    dripping.join().unwrap();
    dripping_more.join().unwrap();
    // Their threads are gone: scrapes are answered again.
    promtool_passes(&scrape(&m));
    let (status, summary) = srv.stop();
    assert!(status.success(), "{summary}");
}

/// A port free on 127.0.0.1 right now (Prometheus takes no port 0).
#[test]
fn prometheus_scrapes_a_server_and_finds_it_up() {
    let Some(prometheus) = program("prometheus", "prometheus") else {
        return;
    };
    let (_srv, m) = metrics_server("");
    let dir = temp_dir("metrics-prometheus");
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: throng\n    static_configs:\n      - targets: ['{m}']\n"
        ),
    )
    .unwrap();
    let web = format!("127.0.0.1:{}", free_port());
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let _daemon = Daemon(
        Command::new(prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus"),
    );
    // Ready within 30 s; else a failure under CI (which installed it),
    // skipped loudly elsewhere.
    let start = Instant::now();
    loop {
        if TcpStream::connect(&web).is_ok() && http(&web, "GET", "/-/ready", None).0 == 200 {
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
            common::skip(
                &format!("prometheus did not start within 30 s:\n{log}"),
                "apt-get install --no-install-recommends prometheus",
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Scraped every second: up, and the server's own figures stored.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _, up) = http(&web, "GET", "/api/v1/query?query=up", None);
        let (_, _, procs) = http(
            &web,
            "GET",
            "/api/v1/query?query=throng_server_processes",
            None,
        );
        let is_up = status == 200
            && up.contains("\"job\":\"throng\"")
            && up.contains(&format!("\"instance\":\"{m}\""))
            && up.contains("\"1\"]");
        if is_up && procs.contains("\"1\"]") {
            break;
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
            panic!("prometheus never found the server up: {up}\n{procs}\n{log}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(_daemon);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_push_server_exports_its_messages_by_outcome() {
    let (srv, m) = metrics_server("--mode push --every 10ms");
    let ran = Client::new("metrics-push")
        .arg(srv.addr.to_string())
        .flags("--proto push --every 10ms -c 10 -T 1s")
        .run();
    // (A server held off its core for more than a period skips what it
    // missed: the client's check then fails on the server's side. What is
    // tested here is that the server's counters hold what it did.)
    if ran.code != 0 {
        ran.exits(1);
        let v = ran.verdict();
        assert!(
            v.side == Side::Server && v.has(Code::PushPeriod),
            "{v:?}\n{}",
            ran.out
        );
    }
    let received = ran.result().push().received;
    // What the server counts as sent is at least what arrived.
    let text = scrape_until(&m, "counted the pushes", |t| {
        t.lines()
            .find_map(|l| l.strip_prefix("throng_server_push_messages_total{outcome=\"on_time\"} "))
            .and_then(|n| n.parse::<f64>().ok())
            .is_some_and(|n| n > 0.0)
    });
    let sent = value(
        &text,
        "throng_server_push_messages_total{outcome=\"on_time\"}",
    ) + value(&text, "throng_server_push_messages_total{outcome=\"late\"}");
    assert!(sent >= received as f64, "sent {sent}, received {received}");
    assert!(value(&text, "throng_server_push_due_total") >= sent);
    promtool_passes(&text);
}
