//! The global deadline: a run ends by -T + --drain + 5 s whatever a peer, a
//! file or one of its own processes does, with its results written and
//! what overran named (exit code 3).

mod common;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{server, temp_dir, Parts, BIN};
use common::{Client, Ran};

/// --rtt-log into a pipe nobody reads: the writer blocks for ever once the
/// pipe is full. The run still ends at its deadline, writes its result and
/// names the cut log.
#[test]
fn an_rtt_log_nobody_reads_does_not_hold_the_run() {
    let srv = server(&["--mode", "echo"]);
    let dir = temp_dir("deadline-fifo");
    let fifo = dir.join("rtt.fifo");
    let json = dir.join("r.json");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    // Held open for reading (so the client's open does not wait), never read.
    let _held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    let t = Instant::now();
    let out = Command::new(BIN)
        .args([
            "client",
            &srv.addr.to_string(),
            "--proto",
            "echo",
            "-c",
            "50",
            "-r",
            "5k",
            "-T",
            "2s",
            "--drain",
            "1s",
            "-q",
            "--rtt-log",
            fifo.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = t.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    // -T 2 s + --drain 1 s + 5 s grace (+ ramp, start and the writer's
    // last second).
    assert!(took < Duration::from_secs(13), "{took:?}\n{err}");
    assert_eq!(out.status.code(), Some(3), "{err}");
    let r = common::outcome(&json);
    assert!(!r.overrun.is_empty(), "no overrun: {r:?}");
    let overrun = &r.overrun;
    assert!(
        overrun.iter().any(|s| s.contains("--rtt-log writer")),
        "{overrun:?}"
    );
    assert!(err.contains("overran"), "{err}");
    assert!(r.q().answered > 0, "{:?}", r.q());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("OVERRUN"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
    let (status, _) = srv.stop();
    assert!(status.success());
}

/// The pids of `pid`'s children.
fn children_of(pid: u32) -> Vec<i32> {
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
    let dir = temp_dir("deadline-frozen");
    let json = dir.join("r.json");
    let t = Instant::now();
    let mut child = common::Daemon(
        Command::new(BIN)
            .args([
                "client",
                &srv.addr.to_string(),
                "--proto",
                "echo",
                "-c",
                "40",
                "-r",
                "400",
                "-T",
                "4s",
                "--drain",
                "1s",
                "--processes",
                "2",
                "--json",
                json.to_str().unwrap(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    // The first second shown: both processes are running.
    common::wait_for_line(&mut err, "open");
    let kids = children_of(child.id());
    assert_eq!(kids.len(), 2, "{kids:?}");
    // Killed on a failed assertion too (stopped, it would stay).
    let _frozen = common::KillOnDrop(kids[1]);
    common::signal(kids[1], libc::SIGSTOP);
    let mut rest = String::new();
    for l in err.lines() {
        rest.push_str(&l.unwrap());
        rest.push('\n');
    }
    let status = child.wait().unwrap();
    let took = t.elapsed();
    // Killed at --drain 1 s + 5 s + 10 s of silence; the run ends then.
    assert!(
        took > Duration::from_secs(14) && took < Duration::from_secs(30),
        "{took:?}\n{rest}"
    );
    assert_eq!(status.code(), Some(3), "{rest}");
    // It is gone, not left stopped.
    assert!(
        !std::path::Path::new(&format!("/proc/{}", kids[1])).exists()
            || std::fs::read_to_string(format!("/proc/{}/stat", kids[1]))
                .is_ok_and(|s| s.contains(") Z")),
        "process {} still there",
        kids[1]
    );
    let r = common::outcome(&json);
    assert!(r.partial, "{:?}", r.missing);
    let missing = format!("{:?}", r.missing);
    assert!(missing.contains("fell silent"), "{missing}");
    assert!(r.q().answered > 0, "{:?}", r.q());
    let _ = std::fs::remove_dir_all(&dir);
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
    let a = srv.addr.to_string();
    let Ran {
        code, out, json: v, ..
    } = Client::new("deadline-behind")
        .arg(&a)
        .flags("--proto echo -c 500 -r 50M --workers 1 --processes 1 -T 3s --timeout 500ms")
        .run();
    assert_eq!(code, 1, "{out}");
    assert!(
        v["overrun"].as_array().is_none_or(|o| o.is_empty()),
        "{out}"
    );
    let q = &v["queries"];
    let behind = q["errors"]["behind_schedule"].as_u64().unwrap();
    assert!(behind > q["sent"].as_u64().unwrap(), "{out}");
    assert!(out.contains("the client could not keep up"), "{out}");
    assert!(out.contains("never sent (behind_schedule)"), "{out}");
    assert!(!out.contains("the server answered"), "{out}");
    assert!(out.contains("FAIL  queries.ok"), "{out}");
}
