//! The global deadline: a run ends by -T + --drain + 5 s whatever a peer, a
//! file or one of its own processes does, with its results written and
//! what overran named (exit code 3).

mod common;

use std::process::Command;

use common::{server, temp_dir, Client, Parts, Server};

/// `throng client --proto echo <flags>` against `srv`, an echo server.
fn echo(srv: &Server, name: &str, flags: &str) -> Client {
    let c = Client::new(name).arg(srv.addr.to_string());
    c.flags("--proto echo").flags(flags)
}

/// --rtt-log into a pipe nobody reads: the writer blocks for ever once the
/// pipe is full. The run still ends at its deadline, writes its result and
/// names the cut log.
#[test]
fn an_rtt_log_nobody_reads_does_not_hold_the_run() {
    let srv = server(&["--mode", "echo"]);
    let dir = temp_dir("deadline-fifo-pipe");
    let fifo = dir.join("rtt.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    // Held open for reading (so the client's open does not wait), never read.
    let _held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    let flags = "-c 50 -r 5k -T 2s --drain 1s --rtt-log";
    let ran = echo(&srv, "deadline-fifo", flags)
        .arg(fifo.to_str().unwrap())
        .run();
    let err = &ran.stderr;
    // -T 2 s + --drain 1 s + 5 s grace (+ ramp, start and the writer's
    // last second).
    assert!(ran.secs < 13.0, "{} s\n{err}", ran.secs);
    let r = ran.exits(3).result();
    let overrun = &r.overrun;
    assert!(!overrun.is_empty(), "no overrun: {r:?}");
    assert!(
        overrun.iter().any(|s| s.contains("--rtt-log writer")),
        "{overrun:?}"
    );
    assert!(err.contains("overran"), "{err}");
    assert!(r.q().answered > 0, "{:?}", r.q());
    assert!(ran.stdout.contains("OVERRUN"), "{}", ran.stdout);
    let _ = std::fs::remove_dir_all(&dir);
    let (status, _) = srv.stop();
    assert!(status.success());
}

/// The pids of `pid`'s children.
fn children_of(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// One of two --processes frozen (SIGSTOP) mid-run: the parent hears
/// nothing from it, kills it once it has been silent past --drain + 15 s,
/// and writes the other's share as a partial result naming the lost one.
#[test]
fn a_frozen_process_is_killed_and_named_missing() {
    let srv = server(&["--mode", "echo"]);
    let flags = "-c 40 -r 400 -T 4s --drain 1s --processes 2";
    // The first second shown: both processes are running.
    let running = echo(&srv, "deadline-frozen", flags).start("open");
    let kids = children_of(running.pid());
    assert_eq!(kids.len(), 2, "{kids:?}");
    // Killed on a failed assertion too (stopped, it would stay).
    let _frozen = common::KillOnDrop(kids[1]);
    common::signal(kids[1], libc::SIGSTOP);
    let ran = running.wait();
    // Killed at --drain 1 s + 5 s + 10 s of silence; the run ends then.
    assert!(
        ran.secs > 14.0 && ran.secs < 30.0,
        "{} s\n{}",
        ran.secs,
        ran.stderr
    );
    let r = ran.exits(3).result();
    // It is gone, not left stopped.
    assert!(
        !std::path::Path::new(&format!("/proc/{}", kids[1])).exists()
            || std::fs::read_to_string(format!("/proc/{}/stat", kids[1]))
                .is_ok_and(|s| s.contains(") Z")),
        "process {} still there",
        kids[1]
    );
    assert!(r.partial, "{:?}", r.missing);
    let missing = format!("{:?}", r.missing);
    assert!(missing.contains("fell silent"), "{missing}");
    assert!(r.q().answered > 0, "{:?}", r.q());
    let (status, _) = srv.stop();
    assert!(status.success());
}

/// One worker asked for far more than it can send: each loop turn sends
/// for a bounded time, then reads and times out, so the run stops on time
/// with every worker's figures (no overrun). What it never sent is counted
/// (`behind_schedule`, in the books), the check of answers against due
/// fails, and the words name the client, never the server. Regression:
/// each turn sent all that came due during the last, the turns grew
/// without bound, the queries in flight reached millions, timing them out
/// walked the table each time, and the worker missed the deadline.
#[test]
fn a_client_asked_past_what_it_can_send_stops_on_time() {
    let srv = server(&["--mode", "echo"]);
    let flags = "-c 500 -r 50M --workers 1 --processes 1 -T 3s --timeout 500ms";
    let ran = echo(&srv, "deadline-behind", flags).run();
    let (r, out) = (ran.exits(1).result(), &ran.out);
    assert!(r.overrun.is_empty(), "{out}");
    let q = r.q();
    assert!(q.errors["behind_schedule"] > q.sent, "{out}");
    assert!(out.contains("the client could not keep up"), "{out}");
    assert!(out.contains("never sent (behind_schedule)"), "{out}");
    assert!(!out.contains("the server answered"), "{out}");
    assert!(out.contains("FAIL  queries.ok"), "{out}");
}
