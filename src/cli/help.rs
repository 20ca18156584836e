//! What throng says about its flags to a person: `-h` cut to the common
//! case, the EXAMPLES of `--help` and the manual page, and the words for
//! a flag brought from another tool.

use super::Cli;

/// The flags of the common case, in the order `-h` shows them: the only
/// ones it shows (`--help` has every flag, by topic).
const COMMON: [&str; 9] = [
    "find",
    "targets",
    "connections",
    "rate",
    "duration",
    "proto",
    "closed_loop",
    "json",
    "check",
];

/// Real commands, each run by a test (tests/surface.rs): the `EXAMPLES`
/// of `--help` and of the manual page. (command, what it does)
pub const EXAMPLES: [(&str, &str); 8] = [
    (
        "throng client",
        "The first run: 1000 connections to an embedded echo server for 10 s, every answer \
         timed.",
    ),
    (
        "throng client 127.0.0.1:8080 --proto http --closed-loop -c 100 -T 30s",
        "nginx in a closed loop, as `wrk -c 100 -d 30s` loads it: compare the answers/s.",
    ),
    (
        "throng client 127.0.0.1:53 --proto dns --transport tcp -c 500 -r 20k -T 30s",
        "A resolver at 20,000 queries/s over 500 TCP connections, latency from each \
         query's intended send.",
    ),
    (
        "throng client 127.0.0.1:9000 --proto echo -c 1m --interval 30s -T 5m",
        "A million connections, each querying every 30 s (source addresses and processes \
         are added as the ports and fds need).",
    ),
    (
        "throng limit 127.0.0.1:6379 --find connections --proto raw --message 'PING\\r\\n' \
         --marker +PONG",
        "How many connections Redis holds, and why not more.",
    ),
    (
        "throng limit 127.0.0.1:53 --find rate --check 'latency.response_time_us.p99<5ms'",
        "The highest rate a resolver answers with p99 under 5 ms.",
    ),
    (
        "throng report run.json --html run.html",
        "The report of a run's --json result: charts of every second, nothing fetched when \
         opened (with no --html: its summary again).",
    ),
    (
        "throng cluster --hosts hosts.txt -- client 198.18.0.1:53 -c 200k -r 50k",
        "One scenario sliced over the load hosts in hosts.txt (OpenSSH), merged exactly.",
    ),
];

/// The EXAMPLES section as `--help` shows it.
pub fn examples_text() -> String {
    let mut t = String::from("Examples:\n");
    for (cmd, what) in EXAMPLES {
        t.push_str(&format!("  {cmd}\n      {what}\n"));
    }
    t
}

/// The command line's definition: the derived one, its `-h` cut to the
/// common case (`--help` keeps every flag), examples after `--help`, and
/// help wrapped to the terminal (at most 100 columns).
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let short = "Every flag, by topic: --help (and examples); the manual: throng man";
    let focus = |c: clap::Command| {
        c.mut_args(|a| {
            let at = COMMON.iter().position(|k| a.get_id() == *k);
            match at {
                Some(i) => a.display_order(i).help_heading(None),
                None => a.hide_short_help(true),
            }
        })
        .after_help(short)
        .after_long_help(examples_text())
    };
    Cli::command()
        .max_term_width(100)
        .mut_subcommand("client", focus)
        .mut_subcommand("limit", focus)
}

/// What throng says for a flag users bring from wrk, oha, vegeta, k6,
/// dnsperf or ab, which throng does not take (None: not one of those).
pub fn peer_flag(flag: &str) -> Option<&'static str> {
    Some(match flag.split('=').next().unwrap_or(flag) {
        "-d" | "-z" => {
            "throng says -T DURATION (--duration) for how long the load holds (wrk's -d, oha's -z)"
        }
        "-H" | "--header" => {
            "throng takes the whole HTTP request: --proto http --http-request 'GET / \
             HTTP/1.1\\r\\nHost: h\\r\\nX-Header: v\\r\\n\\r\\n' (wrk's and oha's -H)"
        }
        "-Q" => "throng says -r RATE (--rate) for the queries a second (dnsperf's -Q, oha's -q)",
        "-t" | "--threads" => "throng says -w N (--workers) for its threads (wrk's -t)",
        "-n" => "throng says --queries N for the queries in all (oha's and ab's -n)",
        "-l" => "throng says -T DURATION (--duration) for how long the load holds (dnsperf's -l)",
        "-s" => {
            "throng has no server address flag: give the target as HOST:PORT (dnsperf's -s, \
             -p)"
        }
        "-p" => "throng takes the port in the target: HOST:PORT (dnsperf's -p)",
        "--latency" => "throng always reports the latency's percentiles (wrk's --latency)",
        _ => return None,
    })
}
