//! --proto redis against redis-server (Debian's, stock but for its port
//! and no persistence): every reply counted by type equals the server's
//! own `INFO commandstats`, error replies are failed answers by their
//! first word, pipelining goes through --window, and a connection past
//! `maxclients` is a refusal named by Redis's own words. A missing
//! program fails in CI and skips loudly elsewhere.

mod common;

use std::path::Path;
use std::process::Command;

use common::{all_answered, Client};
use common::{output, redis_server, Parts, BIN};

/// `field=` of `cmdstat_<command>` in redis-cli's `INFO commandstats`.
fn cmdstat(cli: &Path, port: u16, command: &str, field: &str) -> u64 {
    let (_, out, _) =
        output(Command::new(cli).args(["-p", &port.to_string(), "info", "commandstats"]));
    let Some(line) = out
        .lines()
        .find(|l| l.starts_with(&format!("cmdstat_{command}:")))
    else {
        return 0;
    };
    line.split([':', ','])
        .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {line}"))
}

fn redis_cli(cli: &Path, port: u16, args: &[&str]) -> String {
    let (code, out, err) = output(Command::new(cli).arg("-p").arg(port.to_string()).args(args));
    assert_eq!(code, 0, "redis-cli {args:?}: {err}");
    out
}

/// `throng client --proto redis` of the redis-server on `port`, run as
/// `name`.
fn redis_client(name: &str, port: u16) -> Client {
    Client::new(name)
        .arg(format!("127.0.0.1:{port}"))
        .flags("--proto redis")
}

#[test]
fn every_reply_type_counted_as_redis_counts_its_commands() {
    let Some((_d, cli, port)) = redis_server(&[]) else {
        return;
    };
    redis_cli(&cli, port, &["SET", "str", "value"]);
    // One command per reply type (`|` between them), a WRONGTYPE error
    // among them; four connections, eight queries in flight on each.
    let commands = concat!(
        "GET str|LPUSH str x|INCR counter:__rand_int__|",
        "GET absent:__rand_int__|PING|MGET str absent"
    );
    let ran = redis_client("redis-types", port)
        .args(commands.split('|').flat_map(|c| ["--redis-command", c]))
        .flags("--redis-keys 50 -c 4 --window 8 --closed-loop -T 1s")
        .run();
    let (r, out) = (ran.result(), &ran.out);
    let q = r.q();
    let replies = |k: &str| q.redis_replies.get(k).copied().unwrap_or(0);
    let stat = |c: &str| cmdstat(&cli, port, c, "calls");
    all_answered(&r, 1001, out);
    assert_eq!(q.timed_out + r.errors(), 0, "{out}");
    assert_eq!(replies("integer"), stat("incr"), "{out}");
    assert_eq!(replies("simple_string"), stat("ping"), "{out}");
    assert_eq!(replies("array"), stat("mget"), "{out}");
    assert_eq!(
        replies("bulk_string") + replies("nil"),
        stat("get"),
        "{out}"
    );
    let wrongtype = q.failed_answers["redis_WRONGTYPE"];
    assert_eq!(wrongtype, stat("lpush"), "{out}");
    assert_eq!(
        wrongtype,
        cmdstat(&cli, port, "lpush", "failed_calls"),
        "{out}"
    );
    assert_eq!(replies("error"), wrongtype, "{out}");
    assert_eq!(q.ok, Some(q.answered - wrongtype), "{out}");
    assert!(replies("bulk_string") > 0 && replies("nil") > 0, "{out}");
    assert!(q.pipelined > 0, "{out}");
    // The keys drawn stay in 0..50, in twelve digits as redis-benchmark
    // writes them.
    let keys = redis_cli(&cli, port, &["--scan", "--pattern", "counter:*"]);
    assert!(keys.lines().count() <= 50, "{keys}");
    assert!(
        keys.lines()
            .all(|k| k.len() == "counter:".len() + 12 && k.starts_with("counter:0000000000")),
        "{keys}"
    );
    // A sixth of the answers said failure: the server's answers judged.
    ran.exits(1);
    let verdict = r.verdict.expect("a verdict");
    assert!(verdict.has(throng::verdict::Code::ErrorAnswers), "{out}");
    assert!(out.contains("redis_WRONGTYPE"), "{out}");
}

#[test]
fn a_redis_past_maxclients_refuses_in_its_own_words() {
    let Some((_d, cli, port)) = redis_server(&["--bind", "127.0.0.1", "--maxclients", "100"])
    else {
        return;
    };
    let ran = redis_client("redis-maxclients", port)
        .flags("-c 200 -r 500 -T 2s")
        .run();
    let (r, out) = (ran.exits(1).result(), ran.out);
    let (_, stats, _) = output(Command::new(&cli).args(["-p", &port.to_string(), "info", "stats"]));
    let refused: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("rejected_connections:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("rejected_connections");
    assert_eq!(r.connections.failed["rejected"], refused, "{out}");
    assert!(refused >= 90, "{out}");
    let reply = r.connections.probe_reply.clone().unwrap_or_default();
    assert!(
        reply.contains("max number of clients reached"),
        "{reply}: {out}"
    );
    // A refusal is no answer: no reply of the refused is counted.
    let q = r.q();
    assert!(!q.failed_answers.contains_key("redis_ERR"), "{out}");
    let verdict = r.verdict.expect("a verdict");
    assert_eq!(verdict.side, throng::verdict::Side::Server, "{out}");
    assert!(verdict.has(throng::verdict::Code::Refused), "{out}");
}

#[test]
fn redis_flags_that_cannot_work_are_refused_before_any_load() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--proto", "redis", "-r", "10"],
            "needs a Redis server's address",
        ),
        (
            &[
                "127.0.0.1:1",
                "--proto",
                "redis",
                "--redis-command",
                "SET k \"open",
            ],
            "unbalanced quotes",
        ),
        (
            &[
                "127.0.0.1:1",
                "--proto",
                "redis",
                "--transport",
                "udp",
                "-r",
                "10",
            ],
            "Redis has no UDP",
        ),
        (
            &["127.0.0.1:1", "--redis-command", "PING", "-r", "10"],
            "--redis-command is for --proto redis",
        ),
    ];
    for (args, said) in cases {
        let (code, out, err) = output(Command::new(BIN).arg("client").args(args).arg("-q"));
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(said), "{args:?}: {err}");
    }
}
