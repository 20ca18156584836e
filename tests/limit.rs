//! `throng limit` against servers whose limit is known in advance: a
//! throng server under a low fd limit (connections), a one-thread Python
//! server that spends 1 ms an answer (rate), and the embedded server on
//! this machine's two cores, where the client is the limit and must say so.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{output, temp_dir, BIN};
use throng::outcome::limit::{LimitFile, StepResult};

/// A Python server from `script`, which prints its port first: the
/// process and its address; None without python3 (said loudly, a failure
/// in CI).
fn python_server(script: &str) -> Option<(common::Daemon, String)> {
    let python = common::program("python3", "python3")?;
    Some(python_server_env(&python, script, &[]))
}

/// [`python_server`] with variables set in its environment.
fn python_server_env(
    python: &std::path::Path,
    script: &str,
    env: &[(&str, &std::path::Path)],
) -> (common::Daemon, String) {
    let mut srv = Command::new(python)
        .args(["-c", script])
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut port = String::new();
    BufReader::new(srv.stdout.take().unwrap())
        .read_line(&mut port)
        .unwrap();
    (common::Daemon(srv), format!("127.0.0.1:{}", port.trim()))
}

/// What [`echo_script`]'s server does with a connection that takes it
/// past its cap.
#[derive(Clone, Copy)]
enum PastCap {
    /// Closes the new one (as nginx does past worker_connections).
    CloseNew,
    /// Closes its oldest to take the new one.
    CloseOldest,
}

/// A one-thread Python echo server (selectors) that prints its port
/// first; `cap`: the connections it holds open at most, and what it does
/// past that; `busy`: it spends 1 ms of CPU on each read and writes to
/// `BEST` (a file) the most reads it answered in one second of the
/// monotonic clock: its own count of the rate it serves.
fn echo_script(cap: Option<(usize, PastCap)>, busy: bool) -> String {
    let (cap, oldest) = match cap {
        None => ("None".to_string(), "False"),
        Some((n, PastCap::CloseNew)) => (n.to_string(), "False"),
        Some((n, PastCap::CloseOldest)) => (n.to_string(), "True"),
    };
    let busy = if busy { "True" } else { "False" };
    format!(
        r#"
import collections, os, selectors, socket, time
cap, busy, oldest = {cap}, {busy}, {oldest}
best_file = os.environ.get("BEST")
second, served, best = int(time.monotonic()), 0, 0
sel = selectors.DefaultSelector()
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", 0)); l.listen(4096); l.setblocking(False)
sel.register(l, selectors.EVENT_READ)
print(l.getsockname()[1], flush=True)
held = collections.OrderedDict()
while True:
    for key, _ in sel.select():
        s = key.fileobj
        if s is l:
            try:
                c, _ = l.accept()
            except OSError:
                continue
            if cap is not None and not oldest and len(held) >= cap:
                c.close(); continue
            c.setblocking(False); sel.register(c, selectors.EVENT_READ)
            held[c] = True
            if cap is not None and oldest and len(held) > cap:
                old, _ = held.popitem(last=False); sel.unregister(old); old.close()
            continue
        if s.fileno() < 0:
            continue  # closed above, in this round's events
        try:
            d = s.recv(65536)
        except OSError:
            d = b""
        if not d:
            sel.unregister(s); held.pop(s, None); s.close(); continue
        t = time.perf_counter()
        while busy and time.perf_counter() - t < 0.001:
            pass
        try:
            s.sendall(d)
        except (BlockingIOError, ConnectionError):
            pass
        if best_file:
            now = int(time.monotonic())
            if now != second:
                if served > best:
                    best = served
                    with open(best_file, "w") as f:
                        f.write(str(best))
                second, served = now, 0
            served += 1
"#
    )
}

/// `first` (the target, or none), then `flags` split at spaces.
fn argv<'a>(first: Option<&'a str>, flags: &'a str) -> Vec<&'a str> {
    first.into_iter().chain(flags.split(' ')).collect()
}

/// `throng limit ADDR --find connections -c 100 --step-time 1s
/// --connect-timeout 1s`: a connections search from 100 in 1 s steps.
fn connections_from_100(name: &str, addr: &str) -> (i32, String, LimitFile) {
    let flags = "--find connections -c 100 --step-time 1s --connect-timeout 1s";
    limit(name, &argv(Some(addr), flags))
}

/// `throng limit ADDR --find rate --proto echo -c C -r 100 --step-time
/// 1s`, without --json: (exit code, stdout, stderr).
fn rate_search_from_100(addr: &str, c: &str) -> (i32, String, String) {
    let flags = format!("--find rate --proto echo -c {c} -r 100 --step-time 1s");
    output(
        Command::new(BIN)
            .args(["limit", addr])
            .args(flags.split(' ')),
    )
}

/// Runs `throng limit <args> --json F`: (exit code, output, the file read
/// by its type), every step's result passed through the books.
fn limit(name: &str, args: &[&str]) -> (i32, String, LimitFile) {
    limit_on(None, name, args)
}

/// [`limit`], its process tree on `core` when given.
fn limit_on(core: Option<usize>, name: &str, args: &[&str]) -> (i32, String, LimitFile) {
    let dir = temp_dir(name);
    let json = dir.join("limit.json");
    let mut cmd = match core {
        Some(c) => {
            let mut cmd = Command::new("taskset");
            cmd.args(["-c", &c.to_string(), BIN]);
            cmd
        }
        None => Command::new(BIN),
    };
    let (code, out, err) = output(
        cmd.arg("limit")
            .args(args)
            .args(["--json", json.to_str().unwrap()]),
    );
    let out = format!("{out}\n{err}");
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{e}: {out}"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    common::conforms("limit", &v);
    // A fresh step's result is a whole run's, and so is a held run's; a
    // held step holds figures of some of its seconds.
    for s in v["steps"].as_array().into_iter().flatten() {
        if !s["result"].is_null() && s["held"] != true {
            common::parse_result(&s["result"].to_string());
        }
    }
    for r in v["held_runs"].as_array().into_iter().flatten() {
        common::parse_result(&r.to_string());
    }
    let file: LimitFile =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not a limit file: {e}: {out}"));
    for s in &file.steps {
        let held = matches!(s.result, Some(StepResult::Held(_)));
        assert!(s.result.is_none() || held == s.held, "{out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    (code, out, file)
}

/// `throng server` in one process under `prlimit --nofile=600`: it holds
/// what its fds allow (600 less those it had open before the first
/// connection), and the search finds that within 5%, naming its fd limit.
#[test]
fn a_servers_fd_limit_is_found_and_named() {
    let Some(prlimit) = common::which("prlimit") else {
        panic!("prlimit (util-linux) is needed");
    };
    let mut srv = Command::new(prlimit)
        .args([
            "--nofile=600",
            BIN,
            "server",
            "--listen",
            "127.0.0.1:0",
            "--processes",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(srv.stdout.take().unwrap()).lines();
    let srv = common::Daemon(srv);
    let addr = loop {
        let l = lines.next().expect("the server's banner").unwrap();
        if let Some(rest) = l.strip_prefix("listening on ") {
            break rest.split(' ').next().unwrap().to_string();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    let open = std::fs::read_dir(format!("/proc/{}/fd", srv.0.id()))
        .unwrap()
        .count() as f64;
    let allowed = 600.0 - open;
    let (code, out, v) = connections_from_100("limit-fds", &addr);
    drop(srv);
    assert_eq!(code, 0, "{out}");
    let l = &v.limit;
    let value = l.value.unwrap();
    assert!(
        (value - allowed).abs() <= 0.05 * allowed,
        "found {value}, its fds allow {allowed}: {out}"
    );
    assert!(l.upper.unwrap() > value, "{out}");
    assert!(l.reason.contains("its fd limit"), "{out}");
    assert!(!l.client_limited, "{out}");
    assert!(out.contains("limit         between "), "{out}");
    let steps = &v.steps;
    assert!(steps.len() >= 5, "{out}");
    // Grown held, narrowed fresh.
    assert!(steps[0].held, "{out}");
    assert!(!steps.last().unwrap().held, "{out}");
}

/// A Python server that holds at most 300 connections and closes its
/// oldest to take each new one past that: the held step that grows past
/// 300 fails on the closes (its older connections dropped, none refused),
/// and the search finds 300 within 5%.
#[test]
fn a_server_that_drops_old_connections_for_new_ones_fails_a_held_step() {
    let Some((srv, addr)) = python_server(&echo_script(Some((300, PastCap::CloseOldest)), false))
    else {
        return;
    };
    let (code, out, v) = connections_from_100("limit-drops", &addr);
    drop(srv);
    assert_eq!(code, 0, "{out}");
    let value = v.limit.value.unwrap();
    assert!((285.0..=300.0).contains(&value), "found {value}: {out}");
    let grown = v
        .steps
        .iter()
        .find(|s| s.load == 400.0)
        .expect("a step at 400");
    assert!(grown.held, "{out}");
    assert!(!grown.pass, "{out}");
    let Some(StepResult::Held(h)) = &grown.result else {
        panic!("a held step's figures: {out}")
    };
    assert!(h.connections.peer_closed > 0, "{out}");
    assert_eq!(h.connections.failed.any, 0, "{out}");
}

/// `throng limit --find rate` over 10 connections, one query in flight
/// each (--window 1), from 250/s in 2 s steps to 10%, against a
/// one-thread Python echo server that spends 1 ms of CPU on each read
/// (at most 1,000 answers a second, fewer as its own work per read takes
/// more of this machine's core); `extra`, more flags. The limit found is
/// asserted within 15% of the rate the server says it served at its best
/// (its own count, which throng does not see), the result returned.
fn python_rate_search(name: &str, extra: &[&str]) -> Option<(String, LimitFile)> {
    // (Two at once would share the pinned cores.)
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let python = common::program("python3", "python3")?;
    let script = echo_script(None, true);
    // (Not `name`'s directory: the search's run removes that.)
    let dir = common::temp_dir(&format!("{name}-server"));
    let best = dir.join("best");
    let (srv, addr) = python_server_env(&python, &script, &[("BEST", &best)]);
    // The server on core 0 and the search on core 1, where there are two:
    // each has a core of its own, whatever else the machine runs, so that
    // the server's rate is its own and the client is not late for want of
    // one.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pin = (cores >= 2).then_some(1);
    if pin.is_some() {
        let pinned = Command::new("taskset")
            .args(["-a", "-p", "-c", "0", &srv.0.id().to_string()])
            .stdout(Stdio::null())
            .status()
            .expect("taskset (util-linux)");
        assert!(pinned.success());
    }
    let mut args = argv(
        Some(&addr),
        "--find rate --proto echo -c 10 --window 1 -r 250 --step-time 2s --precision 10%",
    );
    args.extend(extra);
    let (code, out, v) = limit_on(pin, name, &args);
    drop(srv);
    assert_eq!(code, 0, "{out}");
    let served: f64 = std::fs::read_to_string(&best)
        .expect("the server's count of its best second")
        .parse()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        served <= 1001.0,
        "a server of 1 ms a read served {served}/s"
    );
    let value = v.limit.value.unwrap();
    assert!(
        (0.85 * served..=1.15 * served).contains(&value),
        "found {value}/s, the server served {served}/s at its best: {out}"
    );
    Some((out, v))
}

/// The one-thread server's rate is found within 15%, and its CPU named.
#[test]
fn a_one_thread_servers_rate_is_found_and_named_cpu() {
    let Some((out, v)) = python_rate_search("limit-rate", &["--timeout", "500ms"]) else {
        return;
    };
    let reason = &v.limit.reason;
    assert!(reason.contains("CPU-bound"), "{out}");
    assert!(reason.contains("python3"), "{out}");
    assert!(v.limit.stable.is_some(), "{out}");
}

/// The same server with the client's default timeout: above the rate it
/// serves the queries queue (behind each connection's one in flight), and
/// every answer still comes, seconds late, before the step's drain ends.
/// A step whose answers fall behind its queries does not keep up: the
/// search finds the rate it serves, not one its queue can hide for a
/// step.
#[test]
fn a_server_answering_late_from_its_queue_does_not_keep_up() {
    let Some((out, v)) = python_rate_search("limit-pace", &[]) else {
        return;
    };
    // The failing step says its answers fell behind.
    assert!(
        out.contains("FAIL  answered in the judged seconds"),
        "{out}"
    );
    let upper = v.limit.upper.unwrap();
    let failed = v.steps.iter().find(|s| s.load == upper && !s.pass).unwrap();
    let pace = failed.pace.unwrap();
    assert!(!pace.kept && pace.share() < 0.98, "{pace:?}: {out}");
}

/// A rate search over more connections than the server keeps (it closes
/// any past 20 open, as nginx does past worker_connections) stops before
/// its first rate with a usage error naming the count it kept, instead of
/// failing that rate and searching a rate limit that is not there.
#[test]
fn a_rate_search_over_more_connections_than_the_server_keeps_says_so() {
    let Some((srv, addr)) = python_server(&echo_script(Some((20, PastCap::CloseNew)), false))
    else {
        return;
    };
    let (code, out, err) = rate_search_from_100(&addr, "40");
    drop(srv);
    assert_eq!(code, 2, "{out}{err}");
    // (Its count is of the connections open a second or more: the
    // server's 20, not those it takes and closes as the client replaces
    // them, however many of them are open at the moment.)
    let kept = common::count_after(&err, "the server kept ")
        .unwrap_or_else(|| panic!("no count kept: {out}{err}"));
    // (21: a replacement the server was a second late to close.)
    assert!((20..=21).contains(&kept), "{out}{err}");
    assert!(err.contains("of the 40 connections"), "{out}{err}");
    assert!(err.contains(&format!("-c {kept}")), "{out}{err}");
    assert!(!out.contains("\nlimit "), "{out}{err}");
    // The target shares this host: the steps leave it a core.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cores >= 2 {
        let said = format!("runs at most {} worker", cores - 1);
        assert!(out.contains(&said), "{out}");
    }
}

/// Against the embedded server on this machine's two cores, one client
/// worker falls behind long before the server does: the search ends with
/// the client as the limit (exit 3) and never blames the server.
#[test]
fn the_client_as_the_limit_is_never_blamed_on_the_server() {
    let flags = "--find rate -r 50k --workers 1 --processes 1 --step-time 1s --timeout 500ms";
    let (code, out, v) = limit("limit-client", &argv(None, flags));
    assert_eq!(code, 3, "{out}");
    let l = &v.limit;
    assert!(l.client_limited, "{out}");
    assert!(l.reason.contains("the load generator"), "{out}");
    assert!(out.contains("FAIL (client)"), "{out}");
    assert!(!out.contains("CPU-bound"), "{out}");
}

/// A Python echo server, a thread a connection, that prints its port
/// first; `idle`: it closes a connection that many seconds after its last
/// bytes (an idle timeout); `slots`: it serves that many at once and
/// leaves the rest in its accept queue.
fn threaded_echo(idle: Option<f64>, slots: Option<usize>) -> String {
    let idle = idle.map_or("None".to_string(), |t| t.to_string());
    let slots = slots.map_or("None".to_string(), |n| n.to_string());
    format!(
        r#"
import socket, threading
idle, slots = {idle}, {slots}
sem = threading.Semaphore(slots) if slots else None
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", 0)); l.listen(4096)
print(l.getsockname()[1], flush=True)
def serve(s):
    s.settimeout(idle)
    try:
        while True:
            d = s.recv(4096)
            if not d: break
            s.sendall(d)
    except (socket.timeout, OSError):
        pass
    s.close()
    if sem: sem.release()
while True:
    if sem: sem.acquire()
    s, _ = l.accept()
    threading.Thread(target=serve, args=(s,), daemon=True).start()
"#
    )
}

/// `throng limit ADDR --find connections --proto echo -c C --step-time 1s`.
fn connections_search(name: &str, addr: &str, c: &str) -> (i32, String, LimitFile) {
    let flags = format!("--find connections --proto echo -c {c} --step-time 1s");
    limit(name, &argv(Some(addr), &flags))
}

/// A Python echo server that closes each connection 200 ms after its last
/// bytes (an idle timeout): it keeps no idle connection, so a connections
/// search finds no count; it names the idle timeout and its length from
/// the client's own timings (the search said "limit below 1 connection",
/// put on "a connection cap").
#[test]
fn a_server_that_closes_idle_connections_is_named_an_idle_timeout() {
    let Some((srv, addr)) = python_server(&threaded_echo(Some(0.2), None)) else {
        return;
    };
    let (code, out, v) = connections_search("limit-idle", &addr, "40");
    drop(srv);
    assert_eq!(code, 0, "{out}");
    let l = &v.limit;
    assert_eq!(l.cause, Some(throng::verdict::Code::IdleTimeout), "{out}");
    assert_eq!(l.side, Some(throng::verdict::Side::Server), "{out}");
    assert!(out.contains("none for idle connections"), "{out}");
    let idle = v
        .steps
        .iter()
        .filter_map(|s| {
            s.result
                .as_ref()?
                .verdict()?
                .cause(throng::verdict::Code::IdleTimeout)
        })
        .next()
        .unwrap();
    let t = idle.figures["idle_timeout_ms"];
    assert!((180.0..=400.0).contains(&t), "{t} ms: {out}");
}

/// A Python echo server with 30 slots: it serves 30 connections at once
/// and leaves the rest in its accept queue (the kernel completes their
/// handshakes). A connections search finds 30 (within 10%), cause
/// slots_full, the queue in its figures; a rate search over 50
/// connections stops before its first rate, naming about 30 as the -c to
/// search over (it searched rates down to 1/s and put the failure on the
/// client).
#[test]
fn a_server_with_a_fixed_number_of_slots_is_found_at_them() {
    let Some((srv, addr)) = python_server(&threaded_echo(None, Some(30))) else {
        return;
    };
    let (code, out, v) = connections_search("limit-slots", &addr, "10");
    assert_eq!(code, 0, "{out}");
    let l = &v.limit;
    let lower = l.lower.unwrap_or_else(|| panic!("{out}"));
    assert!((27.0..=30.0).contains(&lower), "{out}");
    assert_eq!(l.cause, Some(throng::verdict::Code::SlotsFull), "{out}");
    let (code, out, err) = rate_search_from_100(&addr, "50");
    drop(srv);
    assert_eq!(code, 2, "{out}{err}");
    let kept = err
        .split("Search over fewer (-c ")
        .nth(1)
        .and_then(|r| r.split(')').next()?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{out}{err}"));
    assert!((30..=33).contains(&kept), "{out}{err}");
}
