//! throng against the real servers operators run, from Debian's packages
//! (installed by .ci/run): unbound over UDP, TCP and TLS and `throng
//! compare` against it; nsd with a small zone over TCP; nginx with
//! keep-alive, and with a small keepalive_requests. A missing program fails
//! in CI and skips loudly elsewhere.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    free_port, output, program, temp_dir, typed, wait_listening, Daemon, Parts, RunResult,
};
use common::{Client, BIN};
use serde_json::Value;
use throng::outcome::limit::LimitFile;
use throng::scenario::Query;
use throng::verdict::{Code, Side};

/// Starts `cmd`, its stdin and stdout null and its stderr as given; killed
/// when the test ends.
fn spawn(cmd: &mut Command, stderr: Stdio) -> Daemon {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn();
    Daemon(child.unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}")))
}

/// Starts `cmd` and waits (up to 20 s) for a line containing `ready` on its
/// stderr: the daemon's own "I am serving" message.
fn start(cmd: &mut Command, ready: &str) -> Daemon {
    start_logged(cmd, ready).0
}

/// Lines a daemon wrote on stderr so far.
type Log = Arc<Mutex<Vec<String>>>;

/// [`start`], keeping every line of its stderr for the test to read.
fn start_logged(cmd: &mut Command, ready: &str) -> (Daemon, Log) {
    let mut child = spawn(cmd, Stdio::piped());
    let err = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = mpsc::channel();
    let needle = ready.to_string();
    let log: Log = Arc::default();
    let seen = log.clone();
    std::thread::spawn(move || {
        for line in err.lines().map_while(Result::ok) {
            if line.contains(&needle) {
                let _ = tx.send(Ok(()));
            }
            seen.lock().unwrap().push(line);
        }
        let _ = tx.send(Err(seen.lock().unwrap().join("\n")));
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(Ok(())) => (child, log),
        Ok(Err(log)) => panic!("{cmd:?} exited before '{ready}':\n{log}"),
        Err(_) => panic!("{cmd:?}: no '{ready}' within 20 s"),
    }
}

/// A daemon's directory, removed when the test ends (after the daemon,
/// declared before it, is killed).
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

/// A daemon serving on 127.0.0.1:`port`, with its directory (named
/// `name`).
struct Served {
    _daemon: Daemon,
    name: String,
    port: u16,
    dir: Scratch,
}

impl Served {
    fn new(daemon: Daemon, name: &str, port: u16, dir: PathBuf) -> Served {
        Served {
            _daemon: daemon,
            name: name.to_string(),
            port,
            dir: Scratch(dir),
        }
    }

    fn target(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A client of it with `flags`, run as NAME-client.
    fn client(&self, flags: &str) -> Client {
        Client::new(&format!("{}-client", self.name))
            .arg(self.target())
            .flags(flags)
    }
}

/// [`Served::client`] with `flags` run against `srv` (None: the server is
/// not installed, its skip said), which must exit `code`: the server, its
/// typed result and its output.
#[track_caller]
fn run_against(srv: Option<Served>, flags: &str, code: i32) -> Option<(Served, RunResult, String)> {
    let srv = srv?;
    let (r, out) = srv.client(flags).exits(code);
    Some((srv, r, out))
}

/// [`exits`] for one case of a table: its output headed by the case's
/// name, the exit code's assertion too.
#[track_caller]
fn case_exits(case: &str, c: Client, code: i32) -> (RunResult, String) {
    let ran = c.run();
    let out = format!("{case}: {}", ran.out);
    assert_eq!(ran.code, code, "exit code\n{out}");
    (ran.result(), out)
}

/// `throng SUB TARGET FLAGS...` (flags split at whitespace).
fn throng(sub: &str, target: &str, flags: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg(sub).arg(target).args(flags.split_whitespace());
    cmd
}

/// [`Served::client`] asking the names of `names` (one a line) from a
/// file written in its directory.
fn asking(srv: &Served, names: &str) -> Client {
    let file = srv.dir.join("names");
    std::fs::write(&file, names).unwrap();
    srv.client("--qnames").arg(file.to_str().unwrap())
}

/// Errors and timeouts: zero when the server answered everything.
fn failures(r: &RunResult) -> u64 {
    r.errors() + r.q().timed_out
}

/// More than `more_than` answered, every one with `rcode`, nothing failed
/// or timed out: the number answered.
#[track_caller]
fn all_dns(r: &RunResult, rcode: &str, more_than: u64, out: &str) -> u64 {
    let answered = r.q().answered;
    assert!(answered > more_than, "answered {answered}\n{out}");
    assert_eq!(r.dns().rcodes[rcode], answered, "{rcode}\n{out}");
    assert_eq!(failures(r), 0, "{out}");
    answered
}

/// More than `more_than` answered, every one a 200, nothing failed or
/// timed out: the number answered.
#[track_caller]
fn all_200(r: &RunResult, more_than: u64, out: &str) -> u64 {
    let answered = r.q().answered;
    assert!(answered > more_than, "answered {answered}\n{out}");
    assert_eq!(r.q().http_status["200"], answered, "{out}");
    assert_eq!(failures(r), 0, "{out}");
    answered
}

/// The verdict names `code` on the server's side.
#[track_caller]
fn server_side(r: &RunResult, code: Code, out: &str) -> throng::verdict::Verdict {
    let verdict = r.verdict.clone().expect("a verdict");
    assert_eq!(verdict.side, Side::Server, "{out}");
    assert!(verdict.has(code), "{code:?}: {out}");
    verdict
}

/// A certificate for 127.0.0.1 and localhost, made here: (cert, key) files.
fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let ck =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
    (cert, key)
}

/// unbound, served on its UDP and TCP `port`.
struct Unbound {
    served: Served,
    /// Its stderr: with `log-queries: yes`, a line per query it received.
    log: Log,
    tls_port: u16,
    cert: PathBuf,
}

impl std::ops::Deref for Unbound {
    type Target = Served;
    fn deref(&self) -> &Served {
        &self.served
    }
}

/// unbound on 127.0.0.1, answering www.example.test from local-data (no
/// recursion), on UDP and TCP and on TLS with a certificate made here.
fn unbound(name: &str) -> Option<Unbound> {
    unbound_with(name, "")
}

/// [`unbound`] with more lines for its `server:` section.
fn unbound_with(name: &str, extra: &str) -> Option<Unbound> {
    let bin = program("unbound", "unbound")?;
    let dir = temp_dir(name);
    let (cert, key) = certificate(&dir);
    let (port, tls_port) = (free_port(), free_port());
    let conf = dir.join("unbound.conf");
    std::fs::write(
        &conf,
        format!(
            "server:
  verbosity: 1
  interface: 127.0.0.1@{port}
  interface: 127.0.0.1@{tls_port}
  tls-port: {tls_port}
  tls-service-key: \"{key}\"
  tls-service-pem: \"{cert}\"
  do-ip6: no
  do-daemonize: no
  use-syslog: no
  logfile: \"\"
  username: \"\"
  chroot: \"\"
  directory: \"{dir}\"
  pidfile: \"\"
  num-threads: 1
  incoming-num-tcp: 512
  access-control: 127.0.0.0/8 allow
  local-zone: \"example.test.\" static
  local-data: \"www.example.test. 60 IN A 192.0.2.80\"
{extra}
remote-control:
  control-enable: no
",
            key = key.display(),
            cert = cert.display(),
            dir = dir.display()
        ),
    )
    .unwrap();
    let (daemon, log) = start_logged(
        Command::new(bin).arg("-d").arg("-c").arg(&conf),
        "start of service",
    );
    Some(Unbound {
        served: Served::new(daemon, name, port, dir),
        log,
        tls_port,
        cert,
    })
}

#[test]
fn unbound_answers_over_udp_tcp_and_tls() {
    let Some(u) = unbound("unbound") else {
        return;
    };
    let (plain, tls) = (u.target(), format!("127.0.0.1:{}", u.tls_port));
    for (transport, target) in [("udp", &plain), ("tcp", &plain), ("tls", &tls)] {
        let mut c = Client::new(&format!("unbound-{transport}"))
            .arg(target)
            .flags("--transport")
            .arg(transport)
            .flags("--qname www.example.test -c 4 -r 500 -T 1s");
        if transport == "tls" {
            c = c.flags("--tls-ca").arg(u.cert.to_str().unwrap());
        }
        let (r, out) = case_exits(transport, c, 0);
        all_dns(&r, "NOERROR", 300, &out);
    }
}

/// Regression: a dnsperf query file (`NAME TYPE` lines) was read a name a
/// line, so unbound was asked for the name "www.example.test A" (type A)
/// and every answer was an error. Each line's own name and type now go out:
/// unbound's query log and throng's counts per type say so.
#[test]
fn dnsperf_query_file_sends_each_lines_name_and_type_to_unbound() {
    let Some(u) = unbound_with("unbound-qfile", "  log-queries: yes") else {
        return;
    };
    let file = u.dir.join("queries.txt");
    std::fs::write(
        &file,
        "# dnsperf's data format\n\
         www.example.test A\n\
         www.example.test aaaa\n\
         ; a line of one name takes --qtype\n\
         www.example.test\n",
    )
    .unwrap();
    for (transport, edns) in [("udp", "--edns"), ("tcp", "--dnssec-ok")] {
        let c = Client::new(&format!("unbound-qfile-{transport}"))
            .arg(u.target())
            .flags("--transport")
            .arg(transport)
            .flags("--qnames")
            .arg(file.to_str().unwrap())
            .flags("--qtype TXT")
            .arg(edns)
            .flags("-c 3 -r 300 -T 1s");
        let (r, out) = case_exits(transport, c, 0);
        // All NOERROR: a name with the type glued on is NXDOMAIN here.
        let answered = all_dns(&r, "NOERROR", 200, &out);
        let by_type = &r.dns().rcodes_by_qtype;
        let mut types: Vec<&str> = by_type.keys().map(String::as_str).collect();
        types.sort();
        assert_eq!(types, ["A", "AAAA", "TXT"], "{out}");
        for t in types {
            // Each connection goes round the three lines from the first.
            let got = by_type[t]["NOERROR"];
            assert!(
                got.abs_diff(answered / 3) <= 3,
                "{transport} {t}: {got} of {answered}"
            );
        }
        let query = &r.scenario.traffic.as_ref().unwrap().query;
        let edns = matches!(
            query,
            Query::Dns {
                edns: Some(1232),
                ..
            }
        );
        assert!(edns, "{out}");
    }
    // What unbound received: `info: 127.0.0.1 NAME TYPE IN` per query.
    let log = u.log.lock().unwrap().clone();
    let mut asked = std::collections::BTreeMap::new();
    for line in log.iter().filter(|l| l.contains("info: 127.0.0.1 ")) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (name, qtype) = (fields[fields.len() - 3], fields[fields.len() - 2]);
        assert_eq!(name, "www.example.test.", "{line}");
        *asked.entry(qtype.to_string()).or_insert(0u64) += 1;
    }
    let types: Vec<&String> = asked.keys().collect();
    assert_eq!(types, ["A", "AAAA", "TXT"], "{asked:?}");
}

/// `throng compare` against unbound's UDP, TCP and TLS ports with `flags`;
/// it must exit 0: its output, and its result file (each run's result
/// read by its schema).
fn compare(u: &Unbound, flags: &str) -> (String, Value) {
    let json = u.dir.join("compare.json");
    let (code, out, err) = output(
        throng("compare", &u.target(), "--tls-port")
            .arg(u.tls_port.to_string())
            .arg("--tls-ca")
            .arg(&u.cert)
            .args(["--qname", "www.example.test"])
            .args(flags.split_whitespace())
            .arg("--json")
            .arg(&json),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    (out, common::read_compare(&json))
}

/// Each run of a compare file, its transport named, with its typed
/// result; every one answered whole (no errors, no timeouts).
fn compared(v: &Value, out: &str) -> Vec<(String, RunResult)> {
    let runs = v["runs"].as_array().unwrap();
    let mut each = Vec::new();
    for r in runs {
        let (name, res) = (r["transport"].to_string(), typed(&r["result"]));
        assert_eq!(failures(&res), 0, "{name}: {out}");
        each.push((name, res));
    }
    each
}

#[test]
fn compare_runs_clean_against_unbound() {
    let Some(u) = unbound("unbound-compare") else {
        return;
    };
    let (out, v) = compare(&u, "-r 300 -T 1s --warmup 200ms -c 4");
    assert_eq!(v["runs"].as_array().unwrap().len(), 4, "{out}");
    for (name, res) in compared(&v, &out) {
        assert!(res.q().answered > 200, "{name}: {out}");
    }
    for r in v["runs"].as_array().unwrap() {
        assert_eq!(r["exit_code"], 0, "{out}");
    }
}

/// `compare --queries N` without a rate: N queries one after another per
/// transport, every one answered by unbound.
#[test]
fn compare_one_after_another_against_unbound() {
    let Some(u) = unbound("unbound-compare-seq") else {
        return;
    };
    let (out, v) = compare(&u, "--queries 200 --warmup 0");
    let header = out.lines().find(|l| l.starts_with("transport")).unwrap();
    assert!(
        header.contains(" queries/s ") && header.contains(" mean "),
        "{out}"
    );
    assert_eq!(out.matches(" 200/200 ").count(), 4, "{out}");
    for (name, res) in compared(&v, &out) {
        assert_eq!(res.q().answered, 200, "{name}: {out}");
        assert_eq!(res.dns().rcodes["NOERROR"], 200, "{name}: {out}");
    }
}

/// nsd on 127.0.0.1 serving example.test (www: an A record), with more
/// lines for its `server:` section.
fn nsd_with(name: &str, extra: &str) -> Option<Served> {
    let bin = program("nsd", "nsd")?;
    let dir = temp_dir(name);
    let port = free_port();
    std::fs::write(
        dir.join("example.test.zone"),
        "$ORIGIN example.test.\n$TTL 60\n\
         @ IN SOA ns1 hostmaster 1 3600 600 86400 60\n\
         @ IN NS ns1\nns1 IN A 192.0.2.53\nwww IN A 192.0.2.80\n",
    )
    .unwrap();
    let conf = dir.join("nsd.conf");
    std::fs::write(
        &conf,
        format!(
            "server:
  ip-address: 127.0.0.1@{port}
  port: {port}
  do-ip6: no
  username: \"\"
  chroot: \"\"
  zonesdir: \"{d}\"
  database: \"\"
  pidfile: \"{d}/nsd.pid\"
  xfrdfile: \"{d}/xfrd.state\"
  zonelistfile: \"{d}/zone.list\"
  server-count: 1
  tcp-count: 256
  verbosity: 2
{extra}
remote-control:
  control-enable: no
zone:
  name: example.test
  zonefile: example.test.zone
",
            d = dir.display()
        ),
    )
    .unwrap();
    let nsd = start(
        Command::new(bin).arg("-d").arg("-c").arg(&conf),
        "nsd started",
    );
    Some(Served::new(nsd, name, port, dir))
}

#[test]
fn nsd_answers_its_zone_and_nxdomain_outside_it() {
    let Some(nsd) = nsd_with("nsd", "") else {
        return;
    };
    let names = "www.example.test\nnope.example.test\n";
    let c = asking(&nsd, names).flags("-c 2 -r 400 -T 1s");
    let (r, out) = c.exits(0);
    let answered = r.q().answered;
    let ok = r.dns().rcodes["NOERROR"];
    let nx = r.dns().rcodes["NXDOMAIN"];
    assert!(answered > 300, "{out}");
    assert_eq!(ok + nx, answered, "{out}");
    // Each connection alternates the two names.
    assert!(ok.abs_diff(nx) <= 2, "NOERROR {ok} NXDOMAIN {nx}\n{out}");
    assert_eq!(failures(&r), 0, "{out}");
}

/// nsd's response rate limiting (rrl-ratelimit 50/s, slip 2) under 500
/// UDP queries/s of one name: it drops some answers and truncates others
/// (TC=1) while answering the rest whole. The summary names its rate
/// limiting, not datagram size: a larger --edns would change nothing.
#[test]
fn nsd_rate_limiting_is_named_not_datagram_size() {
    let nsd = nsd_with("nsd-rrl", "  rrl-ratelimit: 50\n  rrl-slip: 2");
    let flags = "--transport udp --qname www.example.test -c 50 -r 500 -T 2s --timeout 300ms";
    let Some((_nsd, r, out)) = run_against(nsd, flags, 1) else {
        return;
    };
    assert!(r.q().truncated > 0, "{out}");
    assert!(r.q().timed_out > 0, "{out}");
    assert!(out.contains("truncates to slow this client down"), "{out}");
    assert!(out.contains("response rate limiting dropped them"), "{out}");
    assert!(!out.contains("do not fit a UDP datagram"), "{out}");
    assert!(!out.contains("a full accept queue"), "{out}");
    assert!(
        !out.contains("did not keep up, or does not answer"),
        "{out}"
    );
    assert!(!out.contains("hint (udp)"), "{out}");
}

/// `throng limit TARGET FLAGS... --json DIR/limit.json`: its exit code, its
/// output and the file, read by its type.
fn limit_search(dir: &Path, target: &str, flags: &str) -> (i32, String, LimitFile) {
    let json = dir.join("limit.json");
    let (code, out, err) = output(throng("limit", target, flags).arg("--json").arg(&json));
    let out = format!("{out}\n{err}");
    assert!(json.exists(), "no limit file: {out}");
    (code, out, common::read_limit(&json))
}

/// nginx on 127.0.0.1 with keep-alive, `keepalive_requests` as given.
fn nginx(name: &str, keepalive_requests: u32) -> Option<Served> {
    nginx_with(
        name,
        &format!("keepalive_requests {keepalive_requests};"),
        "",
        None,
    )
}

/// nginx on 127.0.0.1: `http`, more lines for its http section (its
/// defaults otherwise, keepalive_requests 1000 among them); `listen`, more
/// options for its listen line (`backlog=N`); `nofile`, its fd limit.
fn nginx_with(name: &str, http: &str, listen: &str, nofile: Option<u32>) -> Option<Served> {
    let bin = program("nginx", "nginx-light")?;
    let dir = temp_dir(name);
    let port = free_port();
    let conf = dir.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  {http}
  keepalive_timeout 60s;
  server {{
    listen 127.0.0.1:{port} {listen};
    location / {{ return 200 \"ok\\n\"; }}
    location /busy {{ return 503; }}
  }}
}}
",
            d = dir.display()
        ),
    )
    .unwrap();
    // (`exec`: the shell's pid becomes nginx's, which the test kills.)
    let limit = nofile.map_or(String::new(), |n| format!("ulimit -n {n} && "));
    let line = format!(
        "{limit}exec {} -p {} -c {}",
        bin.display(),
        dir.display(),
        conf.display()
    );
    let d = spawn(Command::new("sh").arg("-c").arg(line), Stdio::null());
    wait_listening(port);
    Some(Served::new(d, name, port, dir))
}

#[test]
fn nginx_keep_alive_at_a_fixed_rate() {
    let flags = "--proto http -c 10 -r 500 -T 1s";
    let Some((_nginx, r, out)) = run_against(nginx("nginx", 1000), flags, 0) else {
        return;
    };
    all_200(&r, 300, &out);
    assert_eq!(r.connections.established, 10, "{out}");
}

#[test]
fn nginx_closing_after_keepalive_requests_is_a_peer_close_not_a_failure() {
    let flags = "--proto http -c 10 --reconnect -r 400 -T 1s";
    let Some((_nginx, r, out)) = run_against(nginx("nginx-closes", 5), flags, 0) else {
        return;
    };
    let answered = all_200(&r, 250, &out);
    let peer_closed = r.connections.peer_closed;
    // Five requests a connection: every closed one answered five, the ten
    // open at the end fewer.
    assert!(peer_closed * 5 <= answered, "{out}");
    assert!(peer_closed * 5 + 10 * 4 >= answered, "{out}");
    assert_eq!(r.failed_total(), 0, "{out}");
}

/// A rate search over more connections than nginx's worker_connections
/// (1024, one worker): at its cap nginx closes its oldest idle keep-alive
/// connections for the new ones. The client's replacements of connections
/// closed before their first answer back off, so nginx keeps about a
/// thousand (or, where they still rotate, holds about a thousand at
/// once, none staying). The search stops before its first rate (exit 2)
/// and names that count as the -c to search over, not a count of the
/// connections that stayed, nor a rate limit.
#[test]
fn a_rate_search_over_more_connections_than_nginx_holds_names_what_it_holds() {
    let Some(ngx) = nginx("nginx-held", 1000) else {
        return;
    };
    let flags = "--find rate --proto http -c 1200 --step-time 1s";
    let (code, out, err) = output(&mut throng("limit", &ngx.target(), flags));
    assert_eq!(code, 2, "{out}{err}");
    let held = common::count_after(&err, "the server kept ")
        .or_else(|| common::count_after(&err, "the server held about "))
        .unwrap_or_else(|| panic!("no count held: {out}{err}"));
    // (1024 less its listening socket, less those closing at the moment.)
    assert!((800..=1023).contains(&held), "{out}{err}");
    assert!(err.contains(&format!("-c {held}")), "{out}{err}");
    assert!(!out.contains("\nlimit "), "{out}{err}");
}

/// The verification probe speaks the run's protocol: nginx answers an HTTP
/// probe; a DNS probe (the default protocol) gets its `400` and a close,
/// which is named as the server rejecting the probe, not as a failure to
/// accept.
#[test]
fn nginx_verifies_an_http_probe_and_rejects_a_dns_one() {
    let Some(ngx) = nginx("nginx-probe", 1000) else {
        return;
    };
    let probe = |name: &str, flags: &str| Client::new(name).arg(ngx.target()).flags(flags);
    let (r, out) = probe("nginx-probe-http", "--proto http -c 50 -T 0s").exits(0);
    assert_eq!(r.connections.verified, 50, "{out}");
    assert_eq!(r.failed_total(), 0, "{out}");
    let (r, out) = probe("nginx-probe-dns", "-c 50 -T 0s").exits(1);
    assert_eq!(r.connections.probe_rejected, 50, "{out}");
    assert_eq!(r.connections.failed["rejected"], 50, "{out}");
    assert_eq!(r.connections.failed["closed_by_peer"], 0, "{out}");
    let reply = r.connections.probe_reply.as_deref().unwrap();
    assert!(reply.contains("400 Bad Request"), "{out}");
    assert!(out.contains("the server rejected the probe"), "{out}");
    assert!(out.contains("hint (rejected)"), "{out}");
    assert!(
        !out.lines()
            .any(|l| l.contains("hint (") && l.contains("accept queue")),
        "{out}"
    );
}

/// The latency p50 wrk prints (`50%  238.00us`), in µs.
fn wrk_p50_us(out: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("50%"))
        .unwrap_or_else(|| panic!("no p50 in wrk's output:\n{out}"));
    let v = line.split_whitespace().nth(1).unwrap();
    let (num, mult) = if let Some(n) = v.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1e3)
    } else {
        (v.strip_suffix('s').unwrap(), 1e6)
    };
    num.parse::<f64>().unwrap() * mult
}

/// nginx closes a keep-alive connection after 1,000 requests (its
/// default): a closed loop stopped within a second and passed, and with
/// replacements stacked the closed connections' queries onto the others
/// (response time 6x Little's law). Now each is replaced, the mean
/// response time is connections / rate, and p50 is wrk's.
#[test]
fn nginx_closed_loop_keeps_its_concurrency_across_keepalive_closes() {
    let Some(ngx) = nginx_with("nginx-closed", "", "", None) else {
        return;
    };
    let target = ngx.target();
    let conns = 16;
    let c = ngx.client(&format!("--proto http --closed-loop -c {conns} -T 3s"));
    let (r, out) = c.exits(0);
    let answered = r.q().answered;
    // 16 connections of 1,000 requests each would be 16,000: replaced,
    // they go on.
    assert!(answered > 3 * 16_000, "{out}");
    assert!(r.connections.peer_closed >= answered / 1000 - 16, "{out}");
    assert_eq!(failures(&r), 0, "{out}");
    // Little's law: the mean response time is connections / rate.
    let rate = r.q().rate_achieved;
    let mean = r.lat().response_time_us.mean;
    let little = conns as f64 / rate * 1e6;
    assert!(
        (mean - little).abs() <= 0.15 * little,
        "mean {mean} µs, Little's law {little} µs\n{out}"
    );
    // The client's CPU is in the result.
    let cpu = r.client.as_ref().unwrap();
    assert!(cpu.cpu_pct > 0.0, "{out}");
    assert!(cpu.cpu_us_per_answer > 0.0, "{out}");
    assert!(out.contains("client cpu"), "{out}");
    // Beside wrk on the same nginx, in the same run: p50 within 1.5x. (A
    // debug build's own cost is in its figures: the comparison is made
    // with the release build, as users run it; bench/nginx-closed-loop.sh
    // records it.)
    if let Some(wrk) = program("wrk", "wrk").filter(|_| !cfg!(debug_assertions)) {
        let url = format!("http://{target}/");
        let (wcode, wout, werr) = output(
            Command::new(wrk)
                .args(["-t2", "-c", &conns.to_string(), "-d3s", "--latency"])
                .arg(url),
        );
        assert_eq!(wcode, 0, "{wout}{werr}");
        let ours = r.lat().response_time_us.p50 as f64;
        let theirs = wrk_p50_us(&wout);
        assert!(
            ours <= 1.5 * theirs.max(50.0),
            "throng p50 {ours} µs, wrk's {theirs} µs\n{out}\n{wout}"
        );
    }
    // --no-reconnect: the concurrency falls with each close, said in the
    // summary.
    let ran = Client::new("nginx-closed-noreconnect")
        .arg(&target)
        .flags("--proto http --closed-loop -c 4 -T 2s --no-reconnect")
        .run();
    let (r, out) = (ran.result(), ran.out);
    assert_eq!(r.q().answered, 4000, "{out}");
    assert_eq!(r.connections.peer_closed, 4, "{out}");
    assert!(
        out.contains("not replaced (--no-reconnect): 0 of 4 open"),
        "{out}"
    );
}

/// An open loop at a fixed rate over connections nginx closes: the
/// queries go to the replacements; without them (--no-reconnect) the
/// queries that had no connection fail the default check (it passed on
/// the queries sent, 12,800 of 20,000 asked).
#[test]
fn nginx_open_loop_keeps_its_rate_across_keepalive_closes() {
    let Some(ngx) = nginx("nginx-open", 100) else {
        return;
    };
    let c = ngx.client("--proto http -c 4 -r 1000 -T 2s");
    let (r, out) = c.clone().exits(0);
    let due = r.q().due;
    assert!(due >= 1900, "{out}");
    assert!(r.q().answered * 100 >= due * 99, "{out}");
    assert!(r.connections.peer_closed >= 15, "{out}");
    let (r, out) = c.flags("--no-reconnect").exits(1);
    // 4 connections of 100 requests: the rest had no connection.
    assert_eq!(r.q().answered, 400, "{out}");
    assert!(r.q().errors["no_connection"] >= 1400, "{out}");
    assert!(out.contains("FAIL  queries.ok>=99%"), "{out}");
}

/// nginx out of fds (accept4: EMFILE) with a backlog that holds the rest:
/// every connection established, most never accepted. That passed; now
/// the run fails, and the hint names the cause from the server's process
/// (its fds against its limit), not a full queue to raise.
#[test]
fn nginx_out_of_fds_fails_and_is_named_from_its_process() {
    let nginx = nginx_with("nginx-fds", "", "backlog=2048", Some(100));
    let Some((_nginx, r, out)) = run_against(nginx, "--proto http -c 400 -T 2s", 1) else {
        return;
    };
    assert_eq!(r.connections.established, 400, "{out}");
    // Where verification stopped growing while establishment went on.
    assert!(out.contains("verified      stopped at "), "{out}");
    assert!(out.contains("while established went on to 400"), "{out}");
    assert!(r.connections.unverified >= 250, "{out}");
    let seen = r.server_seen.as_ref().unwrap();
    assert_eq!(seen.name, "nginx", "{out}");
    assert_eq!(seen.fd_limit, 100, "{out}");
    assert!(
        out.contains("fds of its 100: it cannot accept more"),
        "{out}"
    );
    assert!(!out.contains("raise its listen backlog"), "{out}");
    assert!(!out.contains("did not take the connections"), "{out}");
    assert!(out.contains("FAIL  connections.unverified==0"), "{out}");
}

/// unbound closes idle TCP connections after its tcp-idle-timeout: a close
/// with nothing in flight counted as a failure on connections that had not
/// carried a query yet, and as a peer close on the others. Now all are
/// peer closes, and the run passes.
#[test]
fn unbound_idle_closes_are_one_thing() {
    let Some(u) = unbound_with("unbound-idle", "  tcp-idle-timeout: 300") else {
        return;
    };
    let ran = u.client("--qname www.example.test -c 50 -r 20 -T 2s").run();
    let (r, out) = (ran.result(), &ran.out);
    assert!(r.connections.peer_closed >= 50, "{out}");
    // A query sent just as unbound's timer closed its connection crosses
    // the close (a reset, or the close read with that query in flight, as
    // the two sides' timing has it): a failure of its own kind, rare, and
    // the only one this run may see. Every other close is a peer close.
    let failed = r.failed_total();
    assert_eq!(failed, r.q().errors["conn_lost"], "{out}");
    assert!(failed <= 2, "{out}");
    assert!(ran.code == 0 || failed > 0, "{out}");
}

/// unbound refusing this client (access-control refuse): every answer was
/// REFUSED and the run passed its answered check. An answer that refuses
/// is not a success: the run fails and says what the server said.
#[test]
fn unbound_refusing_every_query_fails_and_says_why() {
    let Some(u) = unbound_with("unbound-refuse", "  access-control: 127.0.0.1/32 refuse") else {
        return;
    };
    let c = u.client("--qname www.example.test -c 4 -r 200 -T 1s");
    let (r, out) = c.clone().exits(1);
    let answered = r.q().answered;
    assert!(answered >= 150, "{out}");
    assert_eq!(r.q().failed_answers["REFUSED"], answered, "{out}");
    assert_eq!(r.q().ok, Some(0), "{out}");
    assert!(out.contains("FAIL  queries.ok>=99%"), "{out}");
    assert!(out.contains("the server refuses this client"), "{out}");
    // A server meant to refuse: --ok-rcodes says so.
    c.flags("--ok-rcodes REFUSED").exits(0);
}

/// nginx answering 503: every response a 503 passed. A 5xx is an answer
/// that failed; --ok-status widens what succeeds.
#[test]
fn nginx_503_answers_fail_the_run() {
    let Some(ngx) = nginx("nginx-503", 1000) else {
        return;
    };
    let request = format!("GET /busy HTTP/1.1\\r\\nHost: {}\\r\\n\\r\\n", ngx.target());
    let c = ngx
        .client("--proto http --http-request")
        .arg(request)
        .flags("-c 4 -r 200 -T 1s");
    let (r, out) = c.clone().exits(1);
    let answered = r.q().answered;
    assert!(answered >= 150, "{out}");
    assert_eq!(r.q().http_status["503"], answered, "{out}");
    assert_eq!(r.q().failed_answers["http_503"], answered, "{out}");
    assert!(out.contains("FAIL  queries.ok>=99%"), "{out}");
    c.flags("--ok-status 503").exits(0);
}

/// nginx rate-limiting every client together (`limit_req`, 500 r/s with
/// a burst of 50, 503 past it): a rate search finds its rate within 30%,
/// and names the cause from what the answers said (error_answers, on the
/// server's side), on held steps as on fresh ones. (A held step counted
/// answers, not what they said: every step passed, "none found".)
#[test]
fn a_rate_search_finds_nginxs_limit_req_and_names_its_503s() {
    // limit_req runs after the rewrite phase, where `return` answers: the
    // limited server serves a file instead, on a port of its own.
    let port = free_port();
    let root = Scratch(temp_dir("nginx-limit-req-root"));
    std::fs::write(root.join("index.html"), "ok\n").unwrap();
    let Some(ngx) = nginx_with(
        "nginx-limit-req",
        &format!(
            "limit_req_zone $binary_remote_addr zone=all:1m rate=500r/s;
  server {{
    listen 127.0.0.1:{port};
    location / {{ root {}; limit_req zone=all burst=50 nodelay; }}
  }}",
            root.display()
        ),
        "",
        None,
    ) else {
        return;
    };
    wait_listening(port);
    let (code, out, v) = limit_search(
        &ngx.dir,
        &format!("127.0.0.1:{port}"),
        "--find rate --proto http -c 20 -r 200 --step-time 1s --precision 10%",
    );
    assert_eq!(code, 0, "{out}");
    let l = &v.limit;
    let value = l.value.unwrap_or_else(|| panic!("no rate passed: {out}"));
    assert!((350.0..=650.0).contains(&value), "found {value}/s: {out}");
    assert!(l.upper.is_some(), "{out}");
    assert!(!l.client_limited, "{out}");
    assert_eq!(l.cause, Some(Code::ErrorAnswers), "{out}");
    assert_eq!(l.side, Some(Side::Server), "{out}");
    // Every failing step's verdict says so, held or fresh.
    for s in v.steps.iter().filter(|s| !s.pass) {
        let verdict = s.result.as_ref().and_then(|r| r.verdict()).unwrap();
        assert!(
            verdict.has(Code::ErrorAnswers),
            "step at {}: {verdict:?}: {out}",
            s.load
        );
    }
}

/// unbound's own count of the queries it received (its statistics line,
/// logged every second, cumulative), the latest logged; 0 before the first.
fn unbound_queries(log: &Log) -> u64 {
    log.lock()
        .unwrap()
        .iter()
        .rev()
        .find_map(|l| {
            l.split("server stats for thread 0: ")
                .nth(1)?
                .split(" queries,")
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Waits (30 s at most) until unbound's logged count reaches `n`.
fn unbound_counted(log: &Log, n: u64) -> u64 {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let got = unbound_queries(log);
        if got >= n || Instant::now() > until {
            return got;
        }
        // unbound logs its statistics once a second: nothing to wait on.
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// resperf (dnsperf's package) and throng over UDP on the same unbound, at
/// a rate it takes with room to spare: each tool's count of what it sent
/// is what unbound counted, and each was answered whole. (How the two
/// tools' maxima compare is a speed figure: bench/limit-resperf.sh.)
#[test]
fn resperf_and_throng_count_what_unbound_counts() {
    let Some(resperf) = program("resperf", "dnsperf") else {
        return;
    };
    let Some(u) = unbound_with(
        "resperf-counts",
        "  statistics-interval: 1\n  statistics-cumulative: yes",
    ) else {
        return;
    };
    let data = u.dir.join("q.txt");
    std::fs::write(&data, "www.example.test A\n").unwrap();
    // A 2 s ramp to 1,000 qps, then 1 s at it, on 4 sockets.
    let (code, out, err) = output(
        Command::new(&resperf)
            .args(["-s", "127.0.0.1", "-p", &u.port.to_string(), "-d"])
            .arg(&data)
            .args("-R -C 4 -m 1000 -r 2 -c 1 -t 2 -P".split(' '))
            .arg(u.dir.join("resperf.gnuplot")),
    );
    assert_eq!(code, 0, "{out}{err}");
    let field = |name: &str| -> u64 {
        out.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no '{name}' from resperf: {out}"))
    };
    let (sent, completed) = (field("Queries sent:"), field("Queries completed:"));
    assert!(sent > 1000, "{out}");
    assert_eq!(completed, sent, "resperf lost queries: {out}");
    assert_eq!(
        unbound_counted(&u.log, sent),
        sent,
        "resperf's count: {out}"
    );
    // throng at the same rate, after it.
    let c = asking(&u, "www.example.test\n").flags("--transport udp -c 4 -r 1000 -T 2s");
    let (r, out) = c.exits(0);
    let ours = r.q().sent;
    assert!(ours > 1500, "{out}");
    assert_eq!(r.q().answered, ours, "{out}");
    assert_eq!(
        unbound_counted(&u.log, sent + ours),
        sent + ours,
        "throng's count after resperf's {sent}: {out}"
    );
}

/// A server with a connection cap that accepts past it, writes an error
/// and closes: redis-server with `maxclients`, memcached with `-c`, each
/// listening on `port` already. Those connections are refused
/// (failed.rejected, exactly the server's own rejected_connections), the
/// error's words are shown, the verdict is `refused` on the server's side,
/// and the client does not storm the full server with replacements (they
/// back off: attempts stay under twice the connections asked; without
/// backoff, 75,439 in 3 s).
fn refused_past_a_cap(
    name: &str,
    port: u16,
    cap: u64,
    (message, marker): (&str, &str),
    said: &str,
    stats: &dyn Fn() -> u64,
) {
    let asked = 2 * cap;
    let c = Client::new(name)
        .arg(format!("127.0.0.1:{port}"))
        .flags(&format!(
            "--proto raw --message {message} --marker {marker}"
        ))
        .flags(&format!("-c {asked} -r 500 -T 2s"));
    let (r, out) = c.exits(1);
    let rejected = r.connections.failed["rejected"];
    assert_eq!(rejected, stats(), "{out}");
    // Past the cap, less what the server keeps of it for itself (its
    // own fds: up to a fifth of it).
    assert!(
        rejected * 10 >= (asked - cap) * 9 && rejected <= asked - cap + cap / 5,
        "{out}"
    );
    assert!(r.connections.attempted < 2 * asked, "a storm: {out}");
    let reply = r.connections.probe_reply.clone().unwrap_or_default();
    assert!(reply.contains(said), "{reply}: {out}");
    assert!(out.contains(said), "{out}");
    server_side(&r, Code::Refused, &out);
}

/// The number right after `words` in a server's stats text.
fn digits_after(text: &str, words: &str) -> u64 {
    let rest = text
        .split(words)
        .nth(1)
        .unwrap_or_else(|| panic!("no {words} in {text}"));
    let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
    n.parse().unwrap()
}

/// redis-server's own count of the connections it refused (`INFO stats`).
fn redis_rejected(cli: &Path, port: u16) -> u64 {
    let (_, info, _) = output(Command::new(cli).args(["-p", &port.to_string(), "info", "stats"]));
    digits_after(&info, "rejected_connections:")
}

/// redis-server on 127.0.0.1 with `maxclients` as given (as
/// [`common::redis_server`]).
fn redis_capped(maxclients: u32) -> Option<(Daemon, PathBuf, u16)> {
    let max = maxclients.to_string();
    common::redis_server(&["--bind", "127.0.0.1", "--maxclients", &max])
}

#[test]
fn redis_past_maxclients_refuses_and_is_not_stormed() {
    let Some((_d, cli, port)) = redis_capped(300) else {
        return;
    };
    refused_past_a_cap(
        "redis-maxclients",
        port,
        300,
        ("PING\\r\\n", "+PONG"),
        "-ERR max number of clients reached",
        &|| redis_rejected(&cli, port),
    );
}

/// redis-server as shipped (protected mode on, no password) takes
/// connections from 127.0.0.1 and refuses those from 127.0.0.2, the
/// second source throng adds past one source's ports: cause
/// `source_refused` with the address, not a cap (it was `refused`, "a cap
/// of its own", and a connections search reported the one source's
/// reach as the server's limit).
#[test]
fn redis_protected_mode_refuses_a_source_not_at_a_cap() {
    let Some((_d, cli, port)) = common::redis_server(&[]) else {
        return;
    };
    let c = Client::new("redis-protected")
        .arg(format!("127.0.0.1:{port}"))
        .flags("--proto raw --message PING\\r\\n --marker +PONG -c 40")
        .flags("--source-ip 127.0.0.1 --source-ip 127.0.0.2 -T 1s");
    let (r, out) = c.exits(1);
    assert_eq!(r.connections.sources_refused, ["127.0.0.2"], "{out}");
    assert_eq!(r.connections.failed["rejected"], 20, "{out}");
    // Redis counts them as its rejections, too.
    assert_eq!(redis_rejected(&cli, port), 20, "{out}");
    let verdict = server_side(&r, Code::SourceRefused, &out);
    assert!(!verdict.has(Code::Refused), "{out}");
}

/// A connections search on redis-server with maxclients 300 finds it
/// within 10%, cause refused on the server's side, and the server sees no
/// storm over the whole search (its rejected_connections under 2,000: a
/// held step replaced every refusal at once, 188,042 of them).
#[test]
fn a_connections_search_finds_redis_maxclients_and_names_the_refusal() {
    let Some((_d, cli, port)) = redis_capped(300) else {
        return;
    };
    let dir = Scratch(temp_dir("redis-limit"));
    let (code, out, v) = limit_search(
        &dir,
        &format!("127.0.0.1:{port}"),
        "--find connections --proto raw --message PING\\r\\n --marker +PONG -c 100 --step-time 1s",
    );
    assert_eq!(code, 0, "{out}");
    let lower = v.limit.lower.unwrap_or_else(|| panic!("{out}"));
    assert!((270.0..=300.0).contains(&lower), "{out}");
    assert_eq!(v.limit.cause, Some(Code::Refused), "{out}");
    assert_eq!(v.limit.side, Some(Side::Server), "{out}");
    let rejected = redis_rejected(&cli, port);
    assert!(rejected < 2_000, "{rejected} refused: a storm: {out}");
}

#[test]
fn memcached_past_its_connection_limit_refuses_and_is_not_stormed() {
    let Some(memcached) = program("memcached", "memcached") else {
        return;
    };
    let port = free_port();
    let _d = spawn(
        Command::new(&memcached)
            .args(["-l", "127.0.0.1", "-p", &port.to_string()])
            .args("-U 0 -c 200 -u root".split(' ')),
        Stdio::null(),
    );
    wait_listening(port);
    let stats = || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        std::io::Write::write_all(&mut s, b"stats\r\n").unwrap();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        while r.read_line(&mut line).unwrap_or(0) > 0 && !line.ends_with("END\r\n") {}
        digits_after(&line, "STAT rejected_connections ")
    };
    refused_past_a_cap(
        "memcached-limit",
        port,
        200,
        ("version\\r\\n", "VERSION"),
        "ERROR Too many open connections",
        &stats,
    );
}

/// unbound at its stock TCP setting (incoming-num-tcp 10, one thread):
/// a connections search over TCP with queries every 100 ms finds its 10
/// slots (it rotates more through them, closing some while the rest wait
/// in its accept queue: those are queued, not held), on the server's
/// side. It found 19, every step above 10 passing with a response p99
/// of 2 s.
#[test]
fn a_connections_search_finds_unbounds_stock_tcp_slots() {
    let Some(u) = unbound_with("unbound-tcp-slots", "  incoming-num-tcp: 10") else {
        return;
    };
    let (code, out, v) = limit_search(
        &u.dir,
        &u.target(),
        "--find connections --transport tcp --proto dns --qname www.example.test \
         -c 5 --interval 100ms --step-time 2s",
    );
    assert_eq!(code, 0, "{out}");
    let lower = v.limit.lower.unwrap_or_else(|| panic!("{out}"));
    assert!((9.0..=10.0).contains(&lower), "{out}");
    assert_eq!(v.limit.side, Some(Side::Server), "{out}");
    assert!(
        matches!(v.limit.cause, Some(Code::ClosedByServer | Code::SlotsFull)),
        "{:?}: {out}",
        v.limit.cause
    );
}
