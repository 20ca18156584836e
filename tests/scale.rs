//! Scale out on one host: segments and their merge, many client and server
//! processes from one command each, a child that dies.

mod common;

use std::process::Command;

use common::{output, server, temp_dir, BIN};
use serde_json::Value;

fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn conns(v: &Value, key: &str) -> u64 {
    v["connections"][key].as_u64().unwrap()
}

/// Server processes that are children of `pid` now.
fn children_of(pid: i32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[test]
fn forty_five_thousand_connections_one_command_each_side() {
    // Both sides need several processes: 20,000 fds per process here. The
    // server runs with its default --processes (auto: elastic).
    let srv = server(&["--processes", "auto", "--workers", "1"]);
    assert!(
        srv.banner[0].contains("1 process x 1 worker;"),
        "server banner: {:?}",
        srv.banner
    );
    // Idle, the default costs one process.
    assert!(children_of(srv.pid()).is_empty());
    let dir = temp_dir("45k");
    let json = dir.join("r.json");
    let (code, out, err) = output(
        Command::new(BIN)
            .args([
                "client",
                &srv.addr.to_string(),
                "-c",
                "45k",
                "-T",
                "1s",
                "-q",
            ])
            .args(["--connect-rate", "15k", "--json", json.to_str().unwrap()]),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("in 3 processes"), "{out}");
    let v = read_json(&json);
    assert_eq!(conns(&v, "established"), 45_000, "{out}");
    assert_eq!(conns(&v, "verified"), 45_000, "{out}");
    assert_eq!(v["partial"], false);
    assert_eq!(v["parts"].as_array().unwrap().len(), 3);
    // Grown to three processes as the connections came: every connection
    // accepted, none refused or reset in a hand-over.
    assert_eq!(children_of(srv.pid()).len(), 2);
    let (status, summary) = srv.stop();
    assert!(status.success());
    assert!(
        summary.contains("accepted 45000, closed 45000"),
        "{summary}"
    );
    assert!(summary.contains("errors       none"), "{summary}");
    assert!(summary.contains("processes    3 (up to"), "{summary}");
    assert!(!summary.contains("hand-over"), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn segments_merge_into_the_whole_and_other_scenarios_are_refused() {
    let srv = server(&[]);
    let dir = temp_dir("segments");
    let target = srv.addr.to_string();
    let part = |k: &str, c: &str| {
        let path = dir.join(format!("seg-{}-{c}.json", k.replace('/', "of")));
        let (code, out, err) = output(Command::new(BIN).args([
            "client",
            &target,
            "-c",
            c,
            "-r",
            "1000",
            "-T",
            "1s",
            "-q",
            "--segment",
            k,
            "--json",
            path.to_str().unwrap(),
        ]));
        assert_eq!(code, 0, "{out}\n{err}");
        path
    };
    let a = part("1/2", "1001");
    let b = part("2/2", "1001");
    let va = read_json(&a);
    let vb = read_json(&b);
    assert_eq!(conns(&va, "target") + conns(&vb, "target"), 1001);
    assert_eq!(va["scenario"]["segment"]["index"], 1);
    let merged = dir.join("merged.json");
    let (code, out, err) = output(Command::new(BIN).args([
        "merge",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--json",
        merged.to_str().unwrap(),
    ]));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("established   1001"), "{out}");
    let m = read_json(&merged);
    assert_eq!(conns(&m, "established"), 1001);
    let sent = va["queries"]["sent"].as_u64().unwrap() + vb["queries"]["sent"].as_u64().unwrap();
    assert_eq!(m["queries"]["sent"].as_u64(), Some(sent));
    // Histogram counts add up exactly.
    let count = |v: &Value| v["latency"]["response_time_us"]["count"].as_u64().unwrap();
    assert_eq!(count(&m), count(&va) + count(&vb));
    assert_eq!(
        m["connections"]["connect_time_us"]["count"].as_u64(),
        Some(1001)
    );
    // A result of another scenario is refused, naming the difference.
    let other = part("2/2", "2000");
    let (code, _, err) =
        output(Command::new(BIN).args(["merge", a.to_str().unwrap(), other.to_str().unwrap()]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("scenario.connections (1001 vs 2000)"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
    drop(srv);
}

#[test]
fn start_at_in_the_past_is_refused() {
    let (code, _, err) = common::run(&["client", "127.0.0.1:9", "--start-at", "1700000000"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("in the past"), "{err}");
}

#[test]
fn a_child_that_dies_leaves_a_partial_merge() {
    let srv = server(&[]);
    let dir = temp_dir("partial");
    let json = dir.join("r.json");
    let (mut child, mut err) = common::spawn_piped(
        Command::new(BIN)
            .args([
                "client",
                &srv.addr.to_string(),
                "-c",
                "1000",
                "-T",
                "30s",
                "--processes",
                "2",
            ])
            .args(["--json", json.to_str().unwrap()]),
    );
    common::wait_for_line(&mut err, "ramp done");
    let pid = child.id();
    let kids = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    let victim: i32 = kids.split_whitespace().next().unwrap().parse().unwrap();
    common::signal(victim, libc::SIGKILL);
    common::signal(pid as i32, libc::SIGINT);
    let status = child.wait().unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    // Interrupted (the SIGINT) takes the exit code; the merge is partial.
    assert_eq!(status.code(), Some(130), "{out}");
    assert!(out.contains("PARTIAL"), "{out}");
    let v = read_json(&json);
    assert_eq!(v["partial"], true);
    assert!(
        v["missing"][0].as_str().unwrap().contains("signal 9"),
        "{v}"
    );
    assert_eq!(conns(&v, "established"), 500, "the survivor's half is kept");
    let _ = std::fs::remove_dir_all(&dir);
    drop(srv);
}

#[test]
fn a_full_server_process_leaves_new_connections_to_its_siblings() {
    // In a private namespace with tcp_migrate_req = 1, as `throng tune`
    // asks for several server processes: a connection queued on a listener
    // in the instant its process closes it then moves to the sibling; with
    // 0 the kernel resets it, and a loaded machine makes that instant long.
    common::in_netns(|| {
        common::set_sysctl("net.ipv4.tcp_migrate_req", "1");
        // 100 fds per process: each child holds about 80 connections; 160
        // connections fit only if a full child stops taking them.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "ulimit -n 100 && exec \"$0\" \"$@\"", BIN, "server"]);
        let srv = common::server_with(&mut cmd, &["--processes", "2", "--workers", "1"]);
        let (code, out, err) = output(Command::new(BIN).args([
            "client",
            &srv.addr.to_string(),
            "-c",
            "160",
            "--connect-rate",
            "1k",
            "-T",
            "1s",
            "--processes",
            "1",
        ]));
        assert_eq!(code, 0, "{out}\n{err}");
        assert!(out.contains("established   160 (verified 160"), "{out}");
        let (status, summary) = srv.stop();
        assert!(status.success());
        assert!(summary.contains("accepted 160"), "{summary}");
        assert!(summary.contains("errors       none"), "{summary}");
        let per: Vec<u64> = summary
            .lines()
            .find_map(|l| l.trim().strip_prefix("per process"))
            .unwrap()
            .split(',')
            .map(|n| n.trim().parse().unwrap())
            .collect();
        assert!(per.iter().all(|&n| n <= 90), "{per:?}");
    });
}

/// Churn against the default (elastic) server: connections that live 1 s
/// and are replaced. A member that filled and emptied is steered to again,
/// so a steady 1,200 connections keep a steady group (the one taking new
/// connections and one waiting ahead, at most one more) instead of a new
/// process for each lifetime.
#[test]
fn elastic_server_under_churn_reuses_its_processes() {
    // 1,024 fds a process: each takes ~800 connections before it hands
    // over, so 1,200 need two.
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "ulimit -n 1024 && exec \"$0\" \"$@\"", BIN, "server"]);
    let srv = common::server_with(
        &mut cmd,
        &[
            "--processes",
            "auto",
            "--workers",
            "1",
            "--max-connections",
            "4000",
        ],
    );
    let (code, out, err) = output(Command::new(BIN).args([
        "client",
        &srv.addr.to_string(),
        "-c",
        "1200",
        "--lifetime",
        "1s",
        "--reconnect",
        "--connect-rate",
        "5k",
        "-T",
        "10s",
        "-q",
    ]));
    assert_eq!(code, 0, "{out}\n{err}");
    let kids = children_of(srv.pid()).len();
    let (status, summary) = srv.stop();
    assert!(status.success());
    assert!(out.contains("failed        0"), "{out}");
    // ~10,000 connections over 10 s, ~800 a process: without reuse, a
    // process for each.
    assert!(kids <= 3, "{kids} server children\n{summary}");
    assert!(summary.contains("overflows +0, drops +0"), "{summary}");
}
