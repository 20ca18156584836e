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

mod blame;
mod config;
mod held_run;
mod held_step;
mod output;
mod overlap;
mod plan;

use blame::*;
use output::*;
use overlap::{NoOverlap, NO_OVERLAP_TRIES};
use plan::{announce, plan, unit, yield_cores, SearchPlan};

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::Value;

use crate::outcome::limit::{Found, LimitFile, Pace, Step, StepResult};
use crate::outcome::RunResult;
use crate::report::check::Check;
use crate::report::json::write_atomic;
use crate::usage::UsageError;
use held_run::HeldRun;

pub use config::{ClientFlags, Find, LimitConfig};

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
    ("--html", true),
    ("-T", true),
    ("--duration", true),
    ("-q", false),
    ("--quiet", false),
];
/// A rate step keeps pace when the answers that came in its judged
/// seconds are at least this share of the queries due in them, less the
/// count's own noise (see [`Pace::kept`]): the few in flight at either
/// end differ, and a busy server's queue comes and goes by tens of ms (a
/// one-thread server at 94% of its core, over 2 s steps: 98.5%); a queue
/// that grows by more than a fiftieth of the step's length does not keep
/// up.
const PACE: f64 = 0.98;

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

/// A step's result as the checks and the blame read it (null: none).
fn result_value(r: &Option<StepResult>) -> Value {
    serde_json::to_value(r).unwrap_or(Value::Null)
}

fn num(v: &Value, path: &str) -> Option<f64> {
    path.split('.').try_fold(v, |x, k| x.get(k))?.as_f64()
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

/// A search's state: its steps so far and the interval they bound.
struct Search<'a> {
    a: &'a LimitConfig,
    plan: SearchPlan,
    exe: PathBuf,
    base: Vec<OsString>,
    dir: PathBuf,
    /// What a fresh step adds to its client's checks (the search's own).
    step_checks: Vec<String>,
    /// What a held step is judged by: the client's default checks, the
    /// search's and the user's.
    checks: Vec<Check>,
    watched: Option<SocketAddr>,
    stop: crate::sys::signals::Stop,
    steps: Vec<Step>,
    lower: Option<f64>,
    upper: Option<f64>,
    client_limited: bool,
    interrupted: bool,
    /// A step could not run (its client exited 2 or 3): the search ends,
    /// its steps so far written, and exits with the step's code.
    error: Option<String>,
    error_code: u8,
    held: Option<HeldRun>,
    /// The held runs' whole results.
    held_runs: Vec<RunResult>,
    /// Checks a held step could not read (keys its seconds do not give):
    /// those are judged on fresh steps only.
    unjudged: BTreeSet<String>,
    baseline: u64,
    /// Steps are `throng cluster` runs.
    cluster: Option<Cluster>,
    /// A rate step is judged by its pace too (not with `--check none`).
    pace_judged: bool,
    /// The last step's backlog did not drain: its held run was ended, and
    /// the next step opens the connections again.
    restarted: bool,
}

/// `throng cluster [FLAGS] -- limit ...`: a search whose steps are cluster
/// runs (every host a share of the step's load, merged exactly).
pub struct Cluster {
    /// cluster's own flags (hosts, ssh options, binary), for every step.
    flags: Vec<OsString>,
}

/// `throng cluster ... -- limit ...`: `a` is the search after `-- limit`
/// (its --json and --html cluster's where it gives none).
pub fn run_cluster(a: &LimitConfig) -> Result<ExitCode> {
    // The words between `cluster` and `--`, less what each step sets.
    let raw: Vec<OsString> = std::env::args_os()
        .skip_while(|x| x != "cluster")
        .skip(1)
        .take_while(|x| x != "--")
        .collect();
    let flags = strip(
        &raw,
        &[
            ("--json", true),
            ("--html", true),
            ("--hgrm", true),
            ("--server-stats", true),
            ("-q", false),
            ("--quiet", false),
        ],
    );
    run_with(a, Some(Cluster { flags }))
}

/// Runs the search.
pub fn run(a: &LimitConfig) -> Result<ExitCode> {
    run_with(a, None)
}

/// Runs the search, its steps on this host or (`cluster`) on load hosts.
fn run_with(a: &LimitConfig, cluster: Option<Cluster>) -> Result<ExitCode> {
    refuse(a)?;
    let axis = match a.find {
        Find::Connections => "connections",
        Find::Rate => "rate",
    };
    let (ours, checks) = checks(a)?;
    let exe = std::env::current_exe().context("finding the throng executable")?;
    let mut base = base_args(a);
    let embedded = if a.client.targets.is_empty() {
        let e = crate::client::ServerProcess::start(&exe, &a.client.server)?;
        base.insert(0, OsString::from(&e.addr));
        Some(e)
    } else {
        None
    };
    let (target, watched) = target(a, embedded.as_ref());
    let mut plan = plan(a, axis);
    if cluster.is_some() {
        // HeldRun runs are one process of this host.
        plan.hold_up_to = None;
    }
    let one_process = matches!(
        a.client.processes,
        crate::domain::Processes::Auto | crate::domain::Processes::Count(1)
    );
    if embedded.is_none() && watched.is_some() && cluster.is_none() && one_process {
        if let Some(w) = yield_cores(a.client.workers, plan.cores) {
            plan.workers = w as f64;
            plan.left_to_server = Some(w);
        }
    }
    announce(a, &plan, &target, cluster.is_some());
    let mut s = Search {
        a,
        exe,
        base,
        dir: tempdir()?,
        step_checks: ours
            .iter()
            .flat_map(|c| ["--check".to_string(), c.to_string()])
            .collect(),
        checks,
        watched,
        stop: crate::sys::signals::Stop::install()?,
        steps: Vec::new(),
        lower: None,
        upper: None,
        client_limited: false,
        interrupted: false,
        error: None,
        error_code: crate::exit::USAGE,
        held: None,
        held_runs: Vec::new(),
        unjudged: BTreeSet::new(),
        baseline: tcp_inuse().unwrap_or(0),
        pace_judged: a.find == Find::Rate && !a.client.check.iter().any(|c| c.trim() == "none"),
        restarted: false,
        plan,
        cluster,
    };
    s.walk()?;
    s.end_held();
    s.answer()?;
    let _ = std::fs::remove_dir_all(&s.dir);
    drop_embedded(embedded);
    if let Some(e) = &s.error {
        errln!("throng: {e}");
        return Ok(ExitCode::from(s.error_code));
    }
    // A search the client's limit ended measured the client, not the
    // server.
    Ok(if s.interrupted {
        ExitCode::from(crate::exit::INTERRUPTED)
    } else if s.client_limited {
        ExitCode::from(crate::exit::UNMEASURED)
    } else {
        ExitCode::SUCCESS
    })
}

/// A usage error for flags a search cannot take or values it cannot use.
fn refuse(a: &LimitConfig) -> Result<()> {
    if a.client.views.hgrm.is_some() || a.client.views.server_stats.is_some() {
        return Err(usage(
            "throng limit writes --json and --html (its curve); drop --hgrm and \
             --server-stats: they draw one client run (run `throng client` at the load in \
             question with them)",
        ));
    }
    a.client.views.check().map_err(usage)?;
    for t in &a.client.targets {
        crate::client::check_target_form(t)?;
    }
    if a.client.connections == 0 {
        return Err(usage(match a.find {
            Find::Rate => {
                "-c 0 leaves a rate search no connection to send on; give -c 1 or more (the \
                 connections the rate is spread over)"
            }
            Find::Connections => {
                "-c 0: a connections search starts at -c; give 1 or more (e.g. -c 100)"
            }
        }));
    }
    if a.client.segment.is_some() || a.client.child {
        return Err(usage(
            "throng limit runs whole scenarios: drop --segment (to spread a search over hosts, \
             run `throng cluster` per step)",
        ));
    }
    if a.client.control || a.client.pause || a.client.hold {
        return Err(usage(
            "throng limit sets each step's load and length itself: drop --control, --pause and \
             --hold",
        ));
    }
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
    Ok(())
}

/// The checks a rate search adds to its steps (the client's `--check`
/// words), and what a held step is judged by: the client's default checks,
/// the search's and the user's.
fn checks(a: &LimitConfig) -> Result<(Vec<&'static str>, Vec<Check>)> {
    let has_queries = a.find == Find::Rate
        || a.client.rate.is_some()
        || a.client.closed_loop
        || a.client.interval.is_some()
        || a.client.schedule.is_some()
        || a.client.schedule_file.is_some();
    // A rate step keeps up when every query is answered ok and none timed
    // out, unless the user's checks say otherwise on those keys.
    let theirs = |key: &str| {
        a.client
            .check
            .iter()
            .any(|c| c.trim() == "none" || c.trim_start().starts_with(key))
    };
    let mut ours: Vec<&'static str> = Vec::new();
    if a.find == Find::Rate {
        if !theirs("queries.ok") {
            ours.push("queries.ok>=99.9%");
        }
        if !theirs("queries.timed_out") {
            ours.push("queries.timed_out==0");
        }
    } else {
        // Every attempt of the step established, none failed, and the
        // server closed none it had taken (held means served: a server
        // that rotates connections through fewer slots closes some to take
        // others).
        ours.extend(["connections.failed==0", "connections.established>=100%"]);
        if !theirs("connections.peer_closed") {
            ours.push("connections.peer_closed==0");
        }
    }
    let given: Vec<String> = a
        .client
        .check
        .iter()
        .cloned()
        .chain(ours.iter().map(|c| c.to_string()))
        .collect();
    let verify = a.client.verify;
    let checks = crate::report::check::parse_all(
        &given,
        has_queries,
        a.client.proto == crate::domain::Proto::Push,
        verify,
        false,
    )
    .map_err(usage)?;
    Ok((ours, checks))
}

/// The arguments every step passes on: the user's, less the search's own
/// flags and its axis's.
fn base_args(a: &LimitConfig) -> Vec<OsString> {
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
    strip(&raw, &drop)
}

/// The target in words, and the address whose server is watched (one on
/// this host).
fn target(
    a: &LimitConfig,
    embedded: Option<&crate::client::ServerProcess>,
) -> (String, Option<SocketAddr>) {
    let target = match embedded {
        Some(e) => format!(
            "the embedded echo server on {} (processes of its own)",
            e.addr
        ),
        None => a.client.targets.join(", "),
    };
    let watched = match embedded {
        Some(e) => e.addr.parse().ok(),
        None => a
            .client
            .targets
            .first()
            .and_then(|t| std::net::ToSocketAddrs::to_socket_addrs(t).ok()?.next())
            .filter(crate::client::on_this_host),
    };
    (target, watched)
}

impl Search<'_> {
    fn round(&self, x: f64) -> f64 {
        x.round().max(1.0)
    }

    /// Steps until the interval is within --precision (or --max passed, or
    /// the first step failed at 1).
    fn walk(&mut self) -> Result<()> {
        let mut load = self.round(self.plan.start);
        let mut held = self.plan.hold_up_to.is_some();
        // The rate whose failure is being offered again.
        let mut again: Option<f64> = None;
        loop {
            if let Some(m) = self.a.max {
                load = load.min(m);
            }
            if held && self.a.find == Find::Connections {
                // HeldRun steps grow; narrowing, and growth past one
                // process's reach, are fresh runs.
                let grows = self.lower.is_none_or(|l| load > l) && self.upper.is_none();
                let reach = self.plan.hold_up_to.is_some_and(|cap| load <= cap as f64);
                if !(grows && reach) {
                    self.end_held();
                    held = false;
                    settle(self.baseline, Duration::from_secs(10));
                }
            }
            let step = match held.then(|| self.held_step(load)).transpose()? {
                Some(Some(step)) => step,
                Some(None) => {
                    // A Ctrl-C ends the held run too: stop, not a fresh step.
                    if self.stop.wait_until(Instant::now()) {
                        self.interrupted = true;
                        return Ok(());
                    }
                    // The held run could not go on: fresh runs from here.
                    self.end_held();
                    held = false;
                    settle(self.baseline, Duration::from_secs(10));
                    continue;
                }
                None => self.fresh(load, false)?,
            };
            let k = self.steps.len() + 1;
            let line = step_line(k, &step, &|x| unit(self.a.find, x));
            match again == Some(load) {
                true => outln!("{line}  (again)"),
                false => outln!("{line}"),
            }
            if std::mem::take(&mut self.restarted) {
                outln!(
                    "              (its queries were still queued when its drain ended: the \
                     next step opens its connections again)"
                );
            }
            let (pass, limited, narrow) = (step.pass, step.client_limited, narrow(&step));
            self.steps.push(step);
            if self.error.is_some() {
                return Ok(());
            }
            if self.interrupted || self.stop.wait_until(Instant::now()) {
                self.interrupted = true;
                return Ok(());
            }
            // A rate that failed narrowly is offered once more before it
            // bounds the search: a burst of loss (a server's socket
            // overflowing once in a second) would otherwise halve the limit
            // found. Its second run decides.
            if !pass && !limited && narrow && self.a.find == Find::Rate && again != Some(load) {
                again = Some(load);
                continue;
            }
            if pass {
                self.lower = Some(load);
                if self.a.max.is_some_and(|m| load >= m) {
                    break;
                }
            } else {
                // The lowest failure bounds the search; whose it was is
                // said (a client's failure says nothing of the server
                // above it).
                self.upper = Some(load);
                self.client_limited = limited;
            }
            let next = match (self.lower, self.upper) {
                (Some(l), None) => self.round(l * 2.0),
                (None, Some(u)) if u <= 1.0 => break,
                (None, Some(u)) => self.round(u / 2.0),
                (Some(l), Some(u)) => {
                    let mid = self.round((l + u) / 2.0);
                    // (Whole loads: between neighbours there is no step left.)
                    if (u - l) / l <= self.a.precision || mid <= l || mid >= u {
                        break;
                    }
                    mid
                }
                (None, None) => unreachable!("a step passed or failed"),
            };
            load = next;
            if !held && self.a.find == Find::Connections {
                settle(self.baseline, Duration::from_secs(10));
            }
        }
        // A rate that passed is offered once more: a limit that does not
        // repeat is reported as unstable.
        // It is a fresh run (its verdict reads every answer, as a held
        // step's does), and one that fails bounds a search that found no
        // failure: "none found" is never said of a rate that failed.
        if let (Find::Rate, Some(l), false, None) =
            (self.a.find, self.lower, self.client_limited, &self.error)
        {
            self.end_held();
            let step = self.fresh(l, true)?;
            outln!(
                "{}  (the best pass, again)",
                step_line(self.steps.len() + 1, &step, &|x| unit(self.a.find, x))
            );
            if !step.pass && self.upper.is_none() {
                self.upper = Some(l);
                self.client_limited = step.client_limited;
            }
            self.steps.push(step);
        }
        Ok(())
    }

    /// A step as a `throng client` run of its own. A step whose parts
    /// (processes, hosts) did not hold their connections together passed
    /// on connections never open at once: when a part could not even open
    /// its connections while the others held, it is run again, and after
    /// [`NO_OVERLAP_TRIES`] runs it fails as the client's; when they were open
    /// but some were answered only as others closed, it fails.
    fn fresh(&mut self, load: f64, confirm: bool) -> Result<Step> {
        let mut tries = 1;
        loop {
            let mut step = self.fresh_once(load, confirm)?;
            let no_overlap = step
                .pass
                .then(|| NoOverlap::from_step(&step.result))
                .flatten();
            let Some(no_overlap) = no_overlap.filter(|_| !self.interrupted) else {
                return Ok(step);
            };
            step.pass = false;
            if !no_overlap.started_apart() {
                push_line(&mut step.summary, &no_overlap.check_line());
                return Ok(step);
            }
            if tries < NO_OVERLAP_TRIES {
                outln!(
                    "              ({}: the step runs again)",
                    no_overlap.describe()
                );
                tries += 1;
                settle(self.baseline, Duration::from_secs(10));
                continue;
            }
            // (A confirmation's failure is the search's instability, as
            // fresh_once judges it.)
            step.client_limited = !confirm;
            let why = format!(
                "hint (client) {}, {tries} times over",
                no_overlap.describe()
            );
            push_line(&mut step.summary, &why);
            return Ok(step);
        }
    }

    fn fresh_once(&mut self, load: f64, confirm: bool) -> Result<Step> {
        let json = self.dir.join(format!("step{}.json", self.steps.len() + 1));
        // (A run again of a step must not read the run before's result.)
        let _ = std::fs::remove_file(&json);
        let mut cmd = Command::new(&self.exe);
        match &self.cluster {
            Some(c) => cmd
                .arg("cluster")
                .args(&c.flags)
                .arg("-q")
                .arg("--json")
                .arg(&json)
                .arg("--")
                .args(&self.base),
            None => cmd
                .arg("client")
                .args(&self.base)
                .arg("-q")
                .arg("--json")
                .arg(&json),
        };
        match self.a.find {
            Find::Connections => cmd
                .args(["-c", &format!("{load:.0}")])
                .args(&self.step_checks)
                .args(self.plan.workers_args(load as u64)),
            Find::Rate => cmd
                .args(["-r", &format!("{load}")])
                .args(&self.step_checks)
                .args(self.plan.workers_args(self.plan.connections)),
        };
        let out = cmd
            .arg("-T")
            .arg(format!("{}ms", self.a.step_time.as_millis()))
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .context("running a step")?;
        let code = out.status.code().unwrap_or(-1);
        if code == 130 {
            self.interrupted = true;
        }
        let summary = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let result: Option<RunResult> = std::fs::read_to_string(&json)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        let pace = match self.a.find {
            Find::Rate => result
                .as_ref()
                .and_then(|r| held_run::pace(held_run::offered_seconds(&r.per_second), PACE)),
            Find::Connections => None,
        };
        let mut summary = summary;
        let kept_pace = self.judge_pace(pace, &mut summary);
        if code == 2 || code == 3 {
            // The step's client refused its plan or its flags (2), or could
            // not measure it (3): an error of the search, with its code,
            // not a load the server failed.
            let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
            self.error = Some(format!(
                "the step at {} could not run (its client exited {code}): {why}",
                unit(self.a.find, load)
            ));
            self.error_code = code as u8;
        }
        let pass = code == 0 && kept_pace;
        let udp = self.a.client.transport == crate::domain::Transport::Udp;
        let mut result = result.map(|r| StepResult::Run(Box::new(r)));
        if let (false, Some(StepResult::Run(r))) = (pass, result.as_mut()) {
            // The pace's failure and the client's own drops are the
            // search's judgement: the step's verdict says them too.
            let dropped = client_dropped(&StepResult::Run(r.clone()), udp);
            if let Some(v) = r.verdict.as_mut() {
                let causes = std::mem::take(&mut v.causes);
                let mut all: Vec<_> = dropped.into_iter().collect();
                if let Some(c) = all.first() {
                    push_line(&mut summary, &format!("  {}", crate::report::line(c)));
                }
                all.extend(causes);
                *v = crate::verdict::Verdict::new(false, all);
            }
        }
        let client_limited = !pass
            && !confirm
            && code != 2
            && code != 3
            && result
                .as_ref()
                .is_some_and(|r| client_explains(r, self.a.find));
        Ok(Step {
            load,
            pass,
            exit_code: code,
            client_limited,
            held: false,
            result,
            pace,
            summary,
        })
    }

    /// Whether a rate step's answers kept pace with its queries (true
    /// when it has no judged second, or the user's `--check none` drops
    /// the search's own checks); the verdict's line added to `summary`.
    fn judge_pace(&self, pace: Option<Pace>, summary: &mut String) -> bool {
        let Some(p) = pace.filter(|_| self.pace_judged) else {
            return true;
        };
        push_line(summary, &pace_line(&p));
        p.kept
    }

    /// Ends the held run, keeping its whole result.
    fn end_held(&mut self) {
        if let Some(h) = self.held.take() {
            let most = self.a.client.timeout + Duration::from_secs(10);
            if let Some(r) = h.finish(most) {
                self.held_runs.push(*r);
            }
        }
    }
}

/// A rate step that failed narrowly: answered ok at least [`NARROW`] of
/// its due queries, and (when its pace is judged) at least that share of
/// them in their seconds. A server past its limit answers far fewer.
pub(super) const NARROW: f64 = 0.95;

fn narrow(s: &Step) -> bool {
    let v = result_value(&s.result);
    let ok = match (num(&v, "queries.ok"), num(&v, "queries.due")) {
        (Some(ok), Some(due)) if due > 0.0 => ok / due >= NARROW,
        _ => false,
    };
    ok && s.pace.is_none_or(|p| p.share() >= NARROW)
}

/// `line` on a line of its own at the end of `summary`.
fn push_line(summary: &mut String, line: &str) {
    if !summary.is_empty() && !summary.ends_with('\n') {
        summary.push('\n');
    }
    summary.push_str(line);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_rate_that_failed_narrowly_is_offered_again() {
        // (The fixture's run: 90 of its 100 due queries answered ok.)
        let mut r = crate::fixtures::timed(1, 1, "r", 1000.0, 2.0);
        let step = |r: &RunResult, pace: Option<Pace>| Step {
            load: 100.0,
            pass: false,
            exit_code: 1,
            client_limited: false,
            held: false,
            result: Some(StepResult::Run(Box::new(r.clone()))),
            pace,
            summary: String::new(),
        };
        assert!(
            !narrow(&step(&r, None)),
            "90% answered is no narrow failure"
        );
        let q = r.queries.as_mut().unwrap();
        q.due = (q.ok.unwrap() as f64 / 0.96) as u64;
        assert!(narrow(&step(&r, None)));
        assert!(narrow(&step(&r, Some(Pace::new(2, 1000, 960, PACE)))));
        assert!(!narrow(&step(&r, Some(Pace::new(2, 1000, 940, PACE)))));
        let mut none = step(&r, None);
        none.result = None;
        assert!(!narrow(&none));
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

    /// `over` laid over `base`, object by object.
    fn merge_json(base: &mut Value, over: Value) {
        match (base, over) {
            (Value::Object(b), Value::Object(o)) => {
                for (k, v) in o {
                    merge_json(b.entry(k).or_insert(Value::Null), v);
                }
            }
            (_, Value::Null) => {}
            (b, o) => *b = o,
        }
    }

    /// A held step of 100 connections over 2 s on 2 cores, with `over`'s
    /// keys.
    fn step_of(over: Value) -> StepResult {
        let mut v = serde_json::json!({
            "held": true, "duration_s": 2.0,
            "connections": {"target": 100, "attempted": 100, "established": 100,
                            "verified": 100, "failed": {"any": 0}, "peak": 100,
                            "peer_closed": 0},
            "environment": {"cores": 2.0}, "scenario": {"transport": "tcp"}
        });
        merge_json(&mut v, over);
        StepResult::Held(Box::new(serde_json::from_value(v).unwrap()))
    }

    /// A 2 s step on 2 cores whose server `name` held `fds` of `limit`
    /// and used `cpu_s`.
    fn seen(name: &str, fds: u64, limit: u64, cpu_s: f64) -> Value {
        serde_json::json!({
            "server_seen": {"pid": 7, "name": name, "fds_max": fds, "fd_limit": limit,
                            "cpu_s": cpu_s, "accept_queue_max": 0, "listen_overflows": 0,
                            "listen_drops": 0}
        })
    }

    fn words(r: &StepResult, find: Find) -> Option<String> {
        evidence(r, find).0.map(|(_, w)| w)
    }

    fn code(r: &StepResult, find: Find) -> Option<crate::verdict::Code> {
        evidence(r, find).0.map(|(c, _)| c)
    }

    #[test]
    fn fd_limit_is_named_before_cpu() {
        let r = step_of(seen("nginx", 599, 600, 4.0));
        let (cause, figures) = evidence(&r, Find::Connections);
        assert_eq!(
            cause.unwrap(),
            (
                crate::verdict::Code::FdLimit,
                "nginx (pid 7) held 599 fds of its 600: its fd limit".to_string()
            )
        );
        assert_eq!(figures.len(), 1);
    }

    #[test]
    fn a_full_conntrack_table_and_tcp_memory_pressure_are_named() {
        let mut v = seen("nginx", 100, 1024, 0.1);
        v["server_seen"]["tcp_memory_pressures"] = 2.into();
        let r = step_of(v.clone());
        assert!(words(&r, Find::Connections)
            .unwrap()
            .contains("net.ipv4.tcp_mem"));
        assert_eq!(
            code(&r, Find::Connections),
            Some(crate::verdict::Code::TcpMemory)
        );
        v["server_seen"]["conntrack_drops"] = 40.into();
        let (cause, figures) = evidence(&step_of(v), Find::Connections);
        assert!(cause.unwrap().1.contains("nf_conntrack_max"));
        assert!(figures[0].contains("conntrack drops +40"), "{figures:?}");
    }

    /// A held step whose `due` queries were answered `ok`, `late` of them
    /// noticed late by the client's loop, with these response and service
    /// p99s (µs).
    fn late(due: u64, ok: u64, late: u64, times: Option<(u64, u64)>) -> HeldStepBox {
        let lat = |p99: u64| {
            serde_json::json!({"count": 1, "p50": 1, "p90": 1, "p99": p99,
            "p999": p99, "p9999": p99, "max": p99, "mean": 1.0, "stdev": 0.0})
        };
        let mut v = serde_json::json!({"queries": {"due": due, "sent": due, "answered": ok,
            "ok": ok, "errors": 0, "timed_out": 0, "loop_late": late, "rate_target": 1.0,
            "rate_sent": 1.0, "rate_achieved": 1.0}});
        if let Some((r, s)) = times {
            v["latency"] =
                serde_json::json!({"response_time_us": lat(r), "service_time_us": lat(s)});
        }
        match step_of(v) {
            StepResult::Held(h) => h,
            StepResult::Run(_) => unreachable!(),
        }
    }
    type HeldStepBox = Box<crate::outcome::limit::HeldStep>;

    #[test]
    fn a_late_loop_explains_a_failure_only_of_its_size() {
        // A server that left most unanswered: not the client's.
        assert!(late_cause(&late(6000, 1700, 270, None), None).is_none());
        // Timeouts of a few, many late: the client's.
        assert!(late_cause(&late(200_000, 199_900, 15_000, None), None).is_some());
        // A latency check failed, all answered: the client's when late
        // and its delay is the tail.
        assert!(late_cause(&late(1000, 1000, 20, None), None).is_some());
        assert!(late_cause(&late(1000, 1000, 20, Some((9_000, 2_000))), None).is_some());
        assert!(late_cause(&late(1000, 1000, 5, None), None).is_none());
        // All answered, but behind their pace by far more than were late:
        // not the client's.
        let pace = |answered| Some(Pace::new(30, 60_000, answered, 0.98));
        let step = late(100_000, 100_000, 2_000, None);
        assert!(late_cause(&step, pace(45_000)).is_none());
        assert!(late_cause(&step, pace(58_000)).is_some());
    }

    /// A one-thread server taking 1 ms an answer, searched for the rate it
    /// keeps at p99 < 50 ms: a step with p99 57 ms (service p99 56 ms) is
    /// the server's, though the client's loop was more than 1 ms late on
    /// 1.6% of the queries. A service tail as long as the response's is
    /// the server's.
    #[test]
    fn a_few_late_queries_do_not_explain_a_long_service_tail() {
        let step = late(10_000, 10_000, 160, Some((57_000, 56_000)));
        assert!(late_cause(&step, None).is_none());
        let v = held_verdict(&step, false, None, (Find::Rate, false, 1.0));
        assert_eq!(v.side, crate::verdict::Side::Server);
        assert!(!v.client_limited());
    }

    #[test]
    fn closes_under_the_fd_limit_are_a_cap_of_the_servers_own() {
        let mut v = seen("nginx", 720, 20000, 0.02);
        v["connections"] = serde_json::json!({"peer_closed": 32});
        let r = step_of(v);
        let cause = words(&r, Find::Connections).unwrap();
        assert!(cause.contains("closed 32 connection(s)"), "{cause}");
        assert!(cause.contains("worker_connections"), "{cause}");
        assert_eq!(
            code(&r, Find::Connections),
            Some(crate::verdict::Code::ClosedByServer)
        );
    }

    /// Connections the server closed (nginx with worker_connections 256
    /// closes them at about 240) put a connections step on the server,
    /// even when the client's summary names slow connect() calls too.
    #[test]
    fn connections_the_server_closed_are_the_servers_even_unseen() {
        assert!(!server_explains(&step_of(Value::Null), Find::Connections));
        let closed = step_of(serde_json::json!({"connections": {"peer_closed": 29}}));
        assert!(server_explains(&closed, Find::Connections));
        // Connections it took and then closed, reset or refused: causes
        // on its side in the step's verdict, even when the client's
        // connect() was slow as well.
        use crate::verdict::{Cause, Code, Verdict};
        for code in [
            Code::ClosedByServer,
            Code::HalfOpen,
            Code::Reset,
            Code::Refused,
        ] {
            let mut r = step_of(Value::Null);
            if let StepResult::Held(h) = &mut r {
                h.verdict = Some(Verdict::new(
                    false,
                    vec![
                        Cause::new(code, "x", "the server's"),
                        Cause::new(Code::Ports, "client", "slow connect()"),
                    ],
                ));
            }
            assert!(server_explains(&r, Find::Connections), "{code:?}");
            assert!(!client_explains(&r, Find::Connections), "{code:?}");
        }
        let mut r = step_of(Value::Null);
        if let StepResult::Held(h) = &mut r {
            h.verdict = Some(Verdict::new(
                false,
                vec![Cause::new(Code::Ports, "no_free_port", "ports ran out")],
            ));
        }
        assert!(!server_explains(&r, Find::Connections));
        assert!(client_explains(&r, Find::Connections));
    }

    /// nginx recycles a connection after 1,000 requests
    /// (keepalive_requests): closes during a rate step are no connection
    /// cap, since the search's opening found that the server keeps every
    /// connection, and passing steps see such closes too.
    #[test]
    fn closes_during_a_rate_step_are_no_cap() {
        let mut v = seen("nginx", 110, 20000, 1.0);
        v["connections"] = serde_json::json!({"peer_closed": 1279});
        assert!(evidence(&step_of(v.clone()), Find::Connections).0.is_some());
        assert_eq!(evidence(&step_of(v.clone()), Find::Rate).0, None);
        assert!(!server_explains(&step_of(v.clone()), Find::Rate));
        // Its CPU still speaks.
        v["server_seen"]["threads"] = 1.into();
        v["server_seen"]["cpu_s"] = 1.95.into();
        let r = step_of(v);
        assert!(words(&r, Find::Rate).unwrap().contains("CPU-bound"));
        assert_eq!(code(&r, Find::Rate), Some(crate::verdict::Code::ServerCpu));
    }

    #[test]
    fn a_busy_single_thread_is_named_cpu_bound() {
        let mut v = seen("python3", 20, 1024, 1.9);
        v["server_seen"]["threads"] = 1.into();
        assert!(words(&step_of(v.clone()), Find::Connections)
            .unwrap()
            .contains("CPU-bound on one thread"));
        // Three threads on two cores at 95% of one: room left.
        v["server_seen"]["threads"] = 3.into();
        assert_eq!(evidence(&step_of(v.clone()), Find::Connections).0, None);
        v["server_seen"]["cpu_s"] = 3.7.into();
        assert!(words(&step_of(v), Find::Connections)
            .unwrap()
            .contains("3 thread(s) on 2 cores can: CPU-bound"));
    }

    /// A held step whose seconds counted answers that said failure (503s
    /// of nginx's limit_req) fails its checks on `queries.ok`, and its
    /// verdict names error_answers on the server's side.
    #[test]
    fn a_held_step_judges_what_its_answers_said() {
        let mut h = late(10_000, 500, 0, None);
        h.queries.as_mut().unwrap().answered = 10_000;
        h.queries.as_mut().unwrap().failed_answers = Some(9_500);
        let v = held_verdict(&h, false, None, (Find::Rate, false, 1.0));
        assert_eq!(v.side, crate::verdict::Side::Server);
        assert!(v.has(crate::verdict::Code::ErrorAnswers));
        let ok = crate::report::check::parse("queries.ok>=99.9%").unwrap();
        assert!(!ok.evaluate(&serde_json::to_value(&*h).unwrap()).pass);
    }
}
