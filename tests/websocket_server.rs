//! `throng server --mode websocket` and `--mode push --push-over websocket`
//! driven by an independent peer: Python's `websockets` library
//! (tests/peers/ws_client.py; Debian's python3-websockets). Without it the
//! tests skip loudly, and fail when CI is set (.ci/run installs it).

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{run, server, Server};

/// Runs the peer in `mode` against `srv` (bounded: 60 s at most); its
/// stdout, after checking it exited 0.
fn peer(py: &PathBuf, srv: &Server, args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/ws_client.py");
    let port = srv.addr.port().to_string();
    let out = Command::new("timeout")
        .arg("60")
        .arg(py)
        .arg(script)
        .arg(args[0])
        .arg(&port)
        .args(&args[1..])
        .output()
        .expect("run the python peer");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "peer {args:?} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A python3 with `websockets`, and `throng server ARGS` started; None
/// where there is no such python3 (the skip said, a failure in CI).
fn python_and_server(args: &[&str]) -> Option<(PathBuf, Server)> {
    let py = common::python_websockets()?;
    Some((py, server(args)))
}

/// The summary's line that starts with `what`.
fn line<'a>(summary: &'a str, what: &str) -> &'a str {
    summary
        .lines()
        .map(str::trim_start)
        .find(|l| l.starts_with(what))
        .unwrap_or_else(|| panic!("no {what} line in:\n{summary}"))
}

#[test]
fn echoes_text_binary_and_fragments_answers_pings_and_closes() {
    let Some((py, srv)) = python_and_server(&["--mode", "websocket"]) else {
        return;
    };
    let out = peer(&py, &srv, &["echo"]);
    for fact in [
        "text echoed",
        "binary echoed 76800",
        "fragmented echoed",
        "pong received",
        "closed 4001",
    ] {
        assert!(out.contains(fact), "{fact} missing from:\n{out}");
    }
    let (status, summary) = srv.stop();
    assert!(status.success());
    // Three messages, each counted as the other modes count queries.
    assert!(
        line(&summary, "requests").starts_with("requests     3 "),
        "{summary}"
    );
    assert_eq!(
        line(&summary, "websocket"),
        "websocket    upgrades 1, pings 1, closes 1"
    );
    assert!(line(&summary, "errors").ends_with("none"), "{summary}");
}

#[test]
fn serves_wss_with_tls() {
    let Some((py, srv)) = python_and_server(&["--mode", "websocket", "--tls"]) else {
        return;
    };
    let ca = srv
        .banner
        .iter()
        .find_map(|l| l.split("--tls-ca ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("no certificate in {:?}", srv.banner))
        .to_string();
    let out = peer(&py, &srv, &["echo", &ca]);
    assert!(
        out.contains("fragmented echoed") && out.contains("closed 4001"),
        "{out}"
    );
    let (_, summary) = srv.stop();
    assert!(line(&summary, "errors").ends_with("none"), "{summary}");
}

#[test]
fn a_protocol_error_closes_only_its_connection() {
    let Some((py, srv)) = python_and_server(&["--mode", "websocket"]) else {
        return;
    };
    let out = peer(&py, &srv, &["violate"]);
    assert!(out.contains("closed with 1002"), "{out}");
    assert!(out.contains("the other connection still echoes"), "{out}");
    let out = peer(&py, &srv, &["refuse"]);
    assert!(out.contains("refused with 400"), "{out}");
    let (_, summary) = srv.stop();
    let ws = line(&summary, "websocket");
    assert!(
        ws.ends_with(
            "protocol errors (each closed its connection): upgrade refused 1, unmasked frame 1"
        ),
        "{ws}"
    );
    assert!(
        line(&summary, "errors").contains("malformed input 2"),
        "{summary}"
    );
}

#[test]
fn push_over_websocket_numbers_every_message_in_order() {
    let push = [
        "--mode",
        "push",
        "--push-over",
        "websocket",
        "--every",
        "10ms",
    ];
    let Some((py, srv)) = python_and_server(&push) else {
        return;
    };
    let out = peer(&py, &srv, &["push", "50"]);
    let seqs: Vec<u64> = out
        .trim()
        .strip_prefix("received ")
        .unwrap_or_else(|| panic!("{out}"))
        .split(' ')
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(seqs, (0..50).collect::<Vec<u64>>());
    let (_, summary) = srv.stop();
    assert!(
        line(&summary, "websocket").starts_with("websocket    upgrades 1"),
        "{summary}"
    );
    assert!(
        line(&summary, "push").contains("skipped").eq(&false),
        "{summary}"
    );
}

#[test]
fn websocket_flags_that_do_not_fit_are_usage_errors() {
    let (code, _, err) = run(&["server", "--push-over", "websocket"]);
    assert_eq!(code, 2);
    assert!(err.contains("add --mode push"), "{err}");
    let (code, _, err) = run(&["server", "--mode", "ws", "--udp"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--udp does not work with --mode websocket"),
        "{err}"
    );
    let (code, _, err) = run(&[
        "server",
        "--mode",
        "push",
        "--push-over",
        "websocket",
        "--udp",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("drop --udp"), "{err}");
}
