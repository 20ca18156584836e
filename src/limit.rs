//! `throng limit`: a search for where a server stops keeping up. Every
//! step is an ordinary `throng client` run (a process of its own, the
//! user's client flags with the step's load), judged by that run's verdict
//! (its default checks, the user's --check, its failed connections), so a
//! step means what a client run means. Steps grow geometrically until one
//! fails, then the search bisects between the last pass and the first fail
//! until the interval is within --precision. A failing step the client
//! explains (its own lag or CPU, a plan it cannot hold) is not the
//! server's: when the lowest failure is such a step, the load generator is
//! the limit found, not the server. The failing
//! step's evidence (the server's process, its fds, its CPU, the kernel's
//! queue counters, read by the client's observer) names the likely cause.
//!
//! It starts processes and reads their results; it measures nothing itself.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use serde_json::Value;

use crate::cli::{Find, LimitArgs};
use crate::report::json::write_atomic;
use crate::UsageError;

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// Flags of `throng limit` itself, and the client flags each step sets:
/// removed from the arguments passed on to the steps (`true`: takes a
/// value).
const OWN_FLAGS: &[(&str, bool)] = &[
    ("--find", true),
    ("--max", true),
    ("--step-time", true),
    ("--precision", true),
    ("--json", true),
    ("-T", true),
    ("--duration", true),
    ("-q", false),
    ("--quiet", false),
];
/// Set by a connections search.
const CONNECTION_FLAGS: &[(&str, bool)] = &[("-c", true), ("--connections", true)];
/// Set by a rate search.
const RATE_FLAGS: &[(&str, bool)] = &[("-r", true), ("--rate", true)];

/// The arguments after `limit` with `drop`'s flags (and their values)
/// taken out: what every step passes to `throng client`.
fn strip(args: &[OsString], drop: &[(&str, bool)]) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        if a == "--" {
            out.extend_from_slice(&args[i..]);
            break;
        }
        let hit = drop.iter().find_map(|&(f, takes)| {
            if a == f {
                Some(if takes { 2 } else { 1 })
            } else if takes && a.starts_with(&format!("{f}=")) {
                Some(1)
            } else if takes && f.len() == 2 && !f.starts_with("--") && a.starts_with(f) {
                // `-c500`
                Some(1)
            } else {
                None
            }
        });
        match hit {
            Some(n) => i += n,
            None => {
                out.push(args[i].clone());
                i += 1;
            }
        }
    }
    out
}

/// One step: a client run at `load`.
#[derive(Debug, Serialize)]
pub struct Step {
    pub load: f64,
    pub pass: bool,
    pub exit_code: i32,
    /// The failing step's load generator explained the failure.
    pub client_limited: bool,
    /// The run's result, in `throng client --json`'s schema (null when the
    /// run wrote none: a plan it refused).
    pub result: Value,
    #[serde(skip)]
    pub summary: String,
}

/// The answer, as --json's `limit` holds it.
#[derive(Debug, Serialize)]
pub struct Found {
    pub axis: &'static str,
    /// The highest load that passed (None: not even the first).
    pub value: Option<f64>,
    pub lower: Option<f64>,
    pub upper: Option<f64>,
    /// The best pass passed again when run once more (rate searches).
    pub stable: Option<bool>,
    /// The load generator, not the server, was the limit at `upper`.
    pub client_limited: bool,
    pub reason: String,
    pub evidence: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Output<'a> {
    limit: &'a Found,
    steps: &'a [Step],
}

fn num(v: &Value, path: &str) -> Option<f64> {
    path.split('.').try_fold(v, |x, k| x.get(k))?.as_f64()
}

/// The failing step's cause from what the machine said about the server,
/// in one sentence, with the figures it rests on; None when nothing seen
/// explains it.
fn evidence(v: &Value) -> (Option<String>, Vec<String>) {
    let mut figures = Vec::new();
    let Some(s) = v.get("server_seen").filter(|s| !s.is_null()) else {
        return (None, figures);
    };
    let name = s["name"].as_str().unwrap_or("the server");
    let pid = s["pid"].as_i64().unwrap_or(0);
    let (fds, limit) = (
        num(s, "fds_max").unwrap_or(0.0),
        num(s, "fd_limit").unwrap_or(0.0),
    );
    let cpu = num(s, "cpu_s").unwrap_or(0.0);
    let wall = num(v, "duration_s").unwrap_or(0.0).max(1e-3);
    let cores = num(v, "environment.cores").unwrap_or(1.0).max(1.0);
    let overflows = num(s, "listen_overflows").unwrap_or(0.0);
    let udp_drops = num(s, "udp_rcvbuf_errors").unwrap_or(0.0);
    let pct = 100.0 * cpu / wall;
    figures.push(format!(
        "{name} (pid {pid}): {fds:.0} fds of its {limit:.0} at most, CPU {pct:.0}% of a core \
         ({cores:.0} cores here), accept queue up to {:.0}, ListenOverflows +{overflows:.0}, \
         ListenDrops +{:.0}, UDP RcvbufErrors +{udp_drops:.0}",
        num(s, "accept_queue_max").unwrap_or(0.0),
        num(s, "listen_drops").unwrap_or(0.0)
    ));
    let cause = if limit > 0.0 && fds + 2.0 >= limit {
        Some(format!(
            "{name} (pid {pid}) held {fds:.0} fds of its {limit:.0}: its fd limit"
        ))
    } else if overflows > 0.0 {
        Some(format!(
            "ListenOverflows +{overflows:.0}: the accept queue overflowed, {name} accepts too slowly"
        ))
    } else if udp_drops > 0.0 {
        Some(format!(
            "the kernel dropped {udp_drops:.0} datagrams at a full receive buffer \
             (UdpRcvbufErrors): {name} reads too slowly"
        ))
    } else if pct >= 90.0 * cores {
        Some(format!(
            "{name} used {pct:.0}% CPU of {cores:.0} cores: CPU-bound"
        ))
    } else if pct >= 90.0 {
        Some(format!(
            "{name} used {pct:.0}% of a core (of {cores:.0}): CPU-bound on one thread"
        ))
    } else {
        None
    };
    (cause, figures)
}

/// Whether the client, not the server, explains a failing step: its own
/// plan refused (exit 2), or its summary put the lateness on itself or on
/// the cores it shares with the server (the client's own judgement, the
/// same words its hints use).
fn client_explains(code: i32, summary: &str) -> bool {
    code == 2
        || summary.contains("the client is the bottleneck")
        || summary.contains("the client could not keep up")
        || summary.contains("hint (client)")
        || (summary.contains("shares its") && summary.contains("each delays the other"))
}

/// The lines of a step's summary that say why it failed.
fn why_lines(summary: &str) -> Vec<String> {
    summary
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            t.starts_with("hint")
                || t.starts_with("warning")
                || t.starts_with("check         FAIL")
                || t.starts_with("throng:")
        })
        .map(|l| l.trim().to_string())
        .collect()
}

/// Waits (at most `most`) until this namespace's TCP sockets in use are
/// back near `baseline`: a fresh step starts once the last one's are gone.
fn settle(baseline: u64, most: Duration) {
    let until = Instant::now() + most;
    while Instant::now() < until {
        if tcp_inuse().is_none_or(|n| n <= baseline + 64) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `TCP: inuse N` of /proc/net/sockstat.
fn tcp_inuse() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/net/sockstat").ok()?;
    let line = s.lines().find(|l| l.starts_with("TCP:"))?;
    let mut w = line.split_whitespace();
    w.find(|&x| x == "inuse")?;
    w.next()?.parse().ok()
}

/// Runs the search.
pub fn run(a: &LimitArgs) -> Result<ExitCode> {
    if a.client.views.html.is_some() || a.client.views.hgrm.is_some() {
        return Err(usage(
            "throng limit writes --json only; draw a step with `throng report` on its result \
             (each step in --json's steps[] is a client result)",
        ));
    }
    if a.client.segment.is_some() || a.client.child || a.client.child_plan {
        return Err(usage(
            "throng limit runs whole scenarios: drop --segment (to spread a search over hosts, \
             run `throng cluster` per step)",
        ));
    }
    let axis = match a.find {
        Find::Connections => "connections",
        Find::Rate => "rate",
    };
    if a.find == Find::Rate && a.client.rate.is_none() && a.client.closed_loop {
        return Err(usage(
            "--find rate offers rates: drop --closed-loop (its rate is the server's)",
        ));
    }
    if !(a.precision > 0.0 && a.precision < 1.0) {
        return Err(usage(
            "--precision is a share between 0 and 1, e.g. 5% or 0.05",
        ));
    }
    let exe = std::env::current_exe().context("finding the throng executable")?;
    // The arguments after `limit`, as the user gave them.
    let raw: Vec<OsString> = std::env::args_os()
        .skip_while(|x| x != "limit")
        .skip(1)
        .collect();
    let mut drop: Vec<(&str, bool)> = OWN_FLAGS.to_vec();
    drop.extend_from_slice(match a.find {
        Find::Connections => CONNECTION_FLAGS,
        Find::Rate => RATE_FLAGS,
    });
    let mut base = strip(&raw, &drop);
    let embedded = if a.client.targets.is_empty() {
        let e = crate::client::ServerProcess::start(&exe, &a.client)?;
        base.insert(0, OsString::from(&e.addr));
        Some(e)
    } else {
        None
    };
    let target = match &embedded {
        Some(e) => format!(
            "the embedded echo server on {} (processes of its own)",
            e.addr
        ),
        None => a.client.targets.join(", "),
    };
    // The first load: -c / -r as given, else 1,000.
    let start = match a.find {
        Find::Connections => a.client.connections as f64,
        Find::Rate => a.client.rate.unwrap_or(1000.0),
    };
    let unit = |x: f64| match a.find {
        Find::Connections => format!("{:.0} connections", x),
        Find::Rate => format!("{:.0}/s", x),
    };
    let round = |x: f64| match a.find {
        Find::Connections => x.round().max(1.0),
        Find::Rate => x.round().max(1.0),
    };
    let keeping_up = match a.find {
        Find::Connections => {
            "every attempt established and verified, none failed (the client's \
                              default checks)"
        }
        Find::Rate => {
            "the client's default checks hold and, unless --check says otherwise on \
                       those keys, every query is answered ok and none timed out \
                       (queries.ok>=99.9%, queries.timed_out==0)"
        }
    };
    let given = if a.client.check.is_empty() {
        String::new()
    } else {
        format!(" and {}", a.client.check.join(", "))
    };
    let max = a
        .max
        .map_or("no bound".to_string(), |m| format!("at most {}", unit(m)));
    println!(
        "Searching the {axis} {target} keeps up with, from {}, doubling until a step fails, \
         then halving the interval until it is within {:.1}%; {max}. Each step is a `throng \
         client` run of {} s{}; it keeps up when {keeping_up}{given}.",
        unit(start),
        a.precision * 100.0,
        a.step_time.as_secs_f64(),
        if a.find == Find::Rate {
            format!(" over {} connections", a.client.connections)
        } else {
            String::new()
        }
    );
    // A rate step keeps up when every query is answered ok and none timed
    // out, unless the user's checks say otherwise on those keys.
    let theirs = |key: &str| {
        a.client
            .check
            .iter()
            .any(|c| c.trim() == "none" || c.trim_start().starts_with(key))
    };
    let mut rate_checks: Vec<&str> = Vec::new();
    if !theirs("queries.ok") {
        rate_checks.extend(["--check", "queries.ok>=99.9%"]);
    }
    if !theirs("queries.timed_out") {
        rate_checks.extend(["--check", "queries.timed_out==0"]);
    }
    let step_command = |load: f64, json: &Path| {
        let mut cmd = Command::new(&exe);
        cmd.arg("client").args(&base);
        match a.find {
            Find::Connections => cmd.args(["-c", &format!("{load:.0}")]),
            Find::Rate => cmd.args(["-r", &format!("{load}")]).args(&rate_checks),
        };
        cmd.arg("-T")
            .arg(format!("{}ms", a.step_time.as_millis()))
            .arg("-q")
            .arg("--json")
            .arg(json);
        cmd
    };
    let stop = crate::sys::signals::Stop::install()?;
    let dir = tempdir()?;
    let baseline = tcp_inuse().unwrap_or(0);
    let mut steps: Vec<Step> = Vec::new();
    let (mut lower, mut upper): (Option<f64>, Option<f64>) = (None, None);
    let mut load = round(start);
    let mut interrupted = false;
    let mut client_limited = false;
    loop {
        if let Some(m) = a.max {
            load = load.min(m);
        }
        let k = steps.len() + 1;
        let json = dir.join(format!("step{k}.json"));
        let out = step_command(load, &json)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .context("running a step")?;
        let code = out.status.code().unwrap_or(-1);
        let summary = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let result = std::fs::read_to_string(&json)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
        let pass = code == 0;
        let step = Step {
            load,
            pass,
            exit_code: code,
            client_limited: !pass && client_explains(code, &summary),
            result,
            summary,
        };
        println!("{}", step_line(k, &step, &unit));
        let limited = step.client_limited;
        steps.push(step);
        if code == 130 || stop.wait_until(Instant::now()) {
            interrupted = true;
            break;
        }
        if pass {
            lower = Some(load);
            if a.max.is_some_and(|m| load >= m) {
                break;
            }
        } else {
            // The lowest failure bounds the search; whose it was is said
            // (a client's failure says nothing of the server above it).
            upper = Some(load);
            client_limited = limited;
        }
        let next = match (lower, upper) {
            (Some(l), None) => round(l * 2.0),
            (None, Some(u)) if u <= 1.0 => break,
            (None, Some(u)) => round(u / 2.0),
            (Some(l), Some(u)) => {
                if (u - l) / l <= a.precision || round((l + u) / 2.0) <= l {
                    break;
                }
                round((l + u) / 2.0)
            }
            (None, None) => unreachable!("a step passed or failed"),
        };
        load = next;
        if a.find == Find::Connections {
            settle(baseline, Duration::from_secs(10));
        }
    }
    // A rate that passed is run once more: a limit that does not repeat
    // is reported as unstable.
    let mut stable = None;
    if let (Find::Rate, Some(l), false, false) = (a.find, lower, interrupted, client_limited) {
        let again = steps.iter().position(|s| s.load == l && s.pass);
        if again.is_some() {
            let json = dir.join("confirm.json");
            let out = step_command(l, &json)
                .stdin(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .context("running the confirming step")?;
            let code = out.status.code().unwrap_or(-1);
            let step = Step {
                load: l,
                pass: code == 0,
                exit_code: code,
                client_limited: false,
                result: std::fs::read_to_string(&json)
                    .ok()
                    .and_then(|t| serde_json::from_str(&t).ok())
                    .unwrap_or(Value::Null),
                summary: String::from_utf8_lossy(&out.stdout).into_owned(),
            };
            println!(
                "{}  (the best pass, again)",
                step_line(steps.len() + 1, &step, &unit)
            );
            stable = Some(step.pass);
            steps.push(step);
        }
    }
    let failing = upper.and_then(|u| steps.iter().rev().find(|s| s.load == u && !s.pass));
    let (cause, mut figures) = failing.map_or((None, Vec::new()), |s| evidence(&s.result));
    if let Some(s) = failing {
        figures.extend(why_lines(&s.summary));
    }
    let reason = if interrupted {
        "interrupted: the steps so far are kept".to_string()
    } else if client_limited {
        format!(
            "the load generator, not the server, was the limit at {}: its own lateness or \
             CPU explains the failure (see below); give it more (--processes, cores, \
             --source-ip, more hosts with `throng cluster`) and search again",
            unit(upper.unwrap_or(load))
        )
    } else if upper.is_none() {
        match a.max {
            Some(m) => format!("no limit below {}: every step kept up", unit(m)),
            None => "no step failed".to_string(),
        }
    } else {
        match cause {
            Some(c) => c,
            None => "nothing the client could see on this host explains it: see the failing \
                     step's checks"
                .to_string(),
        }
    };
    let found = Found {
        axis,
        value: lower,
        lower,
        upper,
        stable,
        client_limited,
        reason,
        evidence: figures,
    };
    print_table(&steps, &unit);
    match (lower, upper) {
        (Some(l), Some(u)) => println!(
            "limit         between {} (pass) and {} (fail)",
            unit(l),
            unit(u)
        ),
        (Some(l), None) => println!("limit         none found: {} kept up", unit(l)),
        (None, Some(u)) => println!("limit         below {}: the first step failed", unit(u)),
        (None, None) => println!("limit         no step ran to its end"),
    }
    if stable == Some(false) {
        println!("              unstable: the best pass failed when run again");
    }
    println!("why           {}", found.reason);
    for f in &found.evidence {
        println!("              {f}");
    }
    let _ = std::io::stdout().flush();
    if let Some(p) = &a.client.json {
        write_atomic(
            p,
            &Output {
                limit: &found,
                steps: &steps,
            },
        )?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    drop_embedded(embedded);
    Ok(if interrupted {
        ExitCode::from(130)
    } else if client_limited {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn drop_embedded(e: Option<crate::client::ServerProcess>) {
    drop(e);
}

/// A private directory for the steps' results.
fn tempdir() -> Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("throng-limit-{}", std::process::id()));
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}

/// One line a step: its load, verdict and the figures the checks read.
fn step_line(k: usize, s: &Step, unit: &dyn Fn(f64) -> String) -> String {
    let v = &s.result;
    let verdict = match (s.pass, s.client_limited) {
        (true, _) => "PASS",
        (false, true) => "FAIL (client)",
        (false, false) => "FAIL",
    };
    let mut f = format!("step {k:<3} {:>18}  {verdict:<13}", unit(s.load));
    if v.is_null() {
        f.push_str(&format!("  no result (exit {})", s.exit_code));
        return f;
    }
    let n = |p: &str| num(v, p).unwrap_or(0.0);
    let failed: f64 = v["connections"]["failed"]
        .as_object()
        .map_or(0.0, |m| m.values().filter_map(Value::as_f64).sum());
    f.push_str(&format!(
        "  established {:.0} verified {:.0} failed {failed:.0}",
        n("connections.established"),
        n("connections.verified")
    ));
    if v.get("queries").is_some_and(|q| !q.is_null()) {
        f.push_str(&format!(
            "  answered {:.0}/s ok {:.0} of {:.0} due, timed out {:.0}  p50 {} p99 {}",
            n("queries.rate_achieved"),
            n("queries.ok"),
            n("queries.due"),
            n("queries.timed_out"),
            crate::units::human_us(n("latency.response_time_us.p50") as u64),
            crate::units::human_us(n("latency.response_time_us.p99") as u64),
        ));
    }
    f
}

fn print_table(steps: &[Step], unit: &dyn Fn(f64) -> String) {
    println!("steps");
    for (k, s) in steps.iter().enumerate() {
        println!("  {}", step_line(k + 1, s, unit));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn strip_takes_out_flags_and_their_values_in_every_form() {
        let got = strip(
            &os(&[
                "127.0.0.1:53",
                "--find",
                "rate",
                "-c500",
                "-r",
                "1k",
                "--max=5k",
                "-q",
                "--proto",
                "dns",
                "--json",
                "x.json",
                "-T",
                "2s",
            ]),
            &[OWN_FLAGS, RATE_FLAGS].concat(),
        );
        assert_eq!(got, os(&["127.0.0.1:53", "-c500", "--proto", "dns"]));
        let got = strip(
            &os(&["-c500", "--connections=9", "--check", "x"]),
            CONNECTION_FLAGS,
        );
        assert_eq!(got, os(&["--check", "x"]));
    }

    /// A 2 s step on 2 cores whose server `name` held `fds` of `limit`
    /// and used `cpu_s`.
    fn seen(name: &str, fds: u64, limit: u64, cpu_s: f64) -> Value {
        serde_json::json!({
            "duration_s": 2.0, "environment": {"cores": 2},
            "server_seen": {"pid": 7, "name": name, "fds_max": fds, "fd_limit": limit,
                            "cpu_s": cpu_s, "accept_queue_max": 0, "listen_overflows": 0,
                            "listen_drops": 0}
        })
    }

    #[test]
    fn fd_limit_is_named_before_cpu() {
        let (cause, figures) = evidence(&seen("nginx", 599, 600, 4.0));
        assert_eq!(
            cause.unwrap(),
            "nginx (pid 7) held 599 fds of its 600: its fd limit"
        );
        assert_eq!(figures.len(), 1);
    }

    #[test]
    fn a_busy_single_thread_is_named_cpu_bound() {
        let v = seen("python3", 20, 1024, 1.9);
        assert!(evidence(&v).0.unwrap().contains("CPU-bound on one thread"));
    }

    #[test]
    fn the_clients_own_words_make_it_the_limit() {
        assert!(client_explains(
            1,
            "warning: the client is the bottleneck: it sent late"
        ));
        assert!(client_explains(2, "throng: the plan needs more fds"));
        assert!(!client_explains(1, "hint (refused): the target refused"));
    }
}
