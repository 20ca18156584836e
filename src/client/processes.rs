//! `throng client --processes`: the scenario run as N child processes of
//! this binary, one segment each (each with its own fd limit), seen as one
//! run: one live view, Ctrl-C passed on, one merged result.
//!
//! A child is given its plan, the scenario sliced and where its result
//! goes, as data on its stdin (`--child-plan`): it parses no flag again,
//! resolves no name again, and plans no sources of its own. (The hosts of
//! `throng cluster` are given flags instead: each runs its own binary and
//! plans for its own addresses and cores.)

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::preflight::{check_problems, preflight, warnings};
use super::{run_here, usage, ClientConfig, Here};
use crate::child::{sum_samples, ChildLine, Children, Own, PartsDir, Silence};
use crate::cluster::merge::Slices;
use crate::domain::{ConnectMode, RunId, Segment};
use crate::engine::Live;
use crate::metrics::exported::RunCounters;
use crate::outcome::Environment;
use crate::report::{self, LiveView};
use crate::scenario::{End, Scenario};
use crate::sys::limits::{self, FdLimit};
use crate::sys::signals::{Reason, Stop};
use crate::sys::sources;

/// What a child of --processes runs, the first line of its stdin.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub(super) struct ChildPlan {
    /// The scenario as its result records it: the whole, with the child's
    /// segment and workers, and `Pause` for an end the parent gives.
    whole: Scenario,
    /// Its result file, in the parent's parts directory.
    json: PathBuf,
    /// Its own --rtt-log file (the parent's name and `.K`).
    rtt_log: Option<PathBuf>,
    start_at: Option<f64>,
    force: bool,
    /// The source planner's advice, for the preflight's words.
    shortfall: Option<String>,
    /// The parent serves --metrics: send the figures each second.
    #[serde(default)]
    metrics: bool,
    /// The run's id, the parent's, for every child's result.
    run: RunId,
}

/// What the processes share out, and the run they are of.
pub(super) struct Whole<'a> {
    /// The scenario the processes share out.
    pub whole: &'a Scenario,
    pub run: &'a RunId,
    /// When `whole` is a slice (--segment K/N): the scenario it is a slice
    /// of, and which: the processes' merge is that slice's result.
    pub of: Option<(&'a Scenario, Segment)>,
}

/// Runs the scenario as `n` child processes, one segment each, and merges
/// their results as if one process had done it.
pub(super) fn run_processes(
    a: &ClientConfig,
    w: Whole,
    n: u64,
    fd: &FdLimit,
    stop: &Stop,
    // The source planner's advice and its reasons, for the plan paragraph.
    (shortfall, why): (Option<String>, &str),
    // The figures of --metrics (the sum of the children's).
    exported: Option<Arc<Mutex<RunCounters>>>,
) -> Result<ExitCode> {
    let (whole, run) = (w.whole, w.run);
    print_plan(a, whole, n, fd, (&shortfall, why))?;
    if a.control || a.pause {
        return Err(usage(
            "--control and --pause work with one process; add --processes 1",
        ));
    }
    // A load host of `throng cluster` starts its processes on `go`.
    if a.session && !crate::cluster::host::wait_go(stop)? {
        return Ok(ExitCode::from(130));
    }
    let parts = PartsDir::new()?;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get()) as u64;
    let workers = a.workers.unwrap_or((cores / n).max(1)) as usize;
    // The children hold until the parent says (Enter on their stdin), so
    // that every slice holds its connections at the same time: the whole
    // run's end counts from the last slice's ramp, as in one process.
    let common_end = whole.connections_schedule.is_none()
        && whole
            .traffic
            .as_ref()
            .and_then(|t| t.schedule_seconds())
            .is_none()
        && matches!(whole.end, End::Duration { .. } | End::Hold);
    let plans = ChildPlans {
        a,
        whole,
        run,
        parts: &parts,
        workers,
        common_end,
        shortfall: &shortfall,
        metrics: exported.is_some(),
    };
    let own = (1..=n)
        .map(|k| {
            Own::new(
                vec!["client".into(), "--child-plan".into()],
                &plans.plan_for(k, n),
            )
        })
        .collect::<Result<Vec<Own>>>()?;
    // The parent watches the whole tree's CPU (its children's comes in
    // as they are reaped) and the server, when it is on this host.
    let observer = crate::evidence::Observer::start(super::watched_target(whole));
    let children = Children::spawn(own, stop, common_end)?;
    let mut parent = Parent::new(a, whole, n, children, common_end, exported);
    parent.follow(stop);
    Live::finish(&mut parent.live);
    let mut slices = parent.slices(&parts, observer);
    slices.of = w.of.map(|(s, seg)| (s.clone(), seg));
    if a.child {
        let merged = crate::cluster::merge::merged(&slices, Some(whole), "processes")?;
        return super::child_end(&merged, a.json.as_deref());
    }
    crate::cluster::merge::finish(
        slices,
        Some(whole),
        a.json.as_deref(),
        &a.views,
        "processes",
        whole.max_failures,
        &a.checks,
    )
}

/// The plan's paragraph for `n` processes (each checks its own share; the
/// ports are the whole's), and its problems refused unless --force.
fn print_plan(
    a: &ClientConfig,
    whole: &Scenario,
    n: u64,
    fd: &FdLimit,
    (shortfall, why): (&Option<String>, &str),
) -> Result<()> {
    let mut problems = preflight(
        &whole.slice(Segment { index: 1, count: n }),
        fd,
        shortfall.as_deref(),
    );
    problems.retain(|p| !p.contains("file descriptors"));
    let mut lines = vec![report::plan_paragraph(whole, sources::ports_per_source())];
    if a.processes == crate::domain::Processes::Auto {
        lines.push(format!(
            "  in {n} processes: {} connections need more fds than one process may hold ({}{})",
            whole.connections,
            fd.soft,
            if fd.hard_is_cap {
                ", the hard limit here"
            } else {
                ""
            }
        ));
    } else {
        lines.push(format!("  in {n} processes (--processes {n})"));
    }
    if !whole.sources.is_empty() {
        lines.push(format!("  sources: {why}"));
    }
    for w in warnings(whole, shortfall.clone()) {
        lines.push(format!("  warning: {w}"));
    }
    if a.session {
        crate::cluster::host::report(crate::child::HostReport::here(n, lines, problems.clone()));
    } else {
        let mut out = crate::console::stdout();
        for l in &lines {
            writeln!(out, "{l}")?;
        }
        out.flush()?;
    }
    check_problems(a.force, problems)
}

/// What every child's plan has in common.
struct ChildPlans<'a> {
    a: &'a ClientConfig,
    whole: &'a Scenario,
    run: &'a RunId,
    parts: &'a PartsDir,
    /// Worker threads a child (--workers, or the cores shared out).
    workers: usize,
    common_end: bool,
    shortfall: &'a Option<String>,
    metrics: bool,
}

impl ChildPlans<'_> {
    /// The plan of child `k` of `n`.
    fn plan_for(&self, k: u64, n: u64) -> ChildPlan {
        let (a, whole) = (self.a, self.whole);
        let mut recorded = whole.clone();
        recorded.segment = Some(Segment { index: k, count: n });
        recorded.workers = match whole.connect_mode {
            // One connection at a time: one loop is all it can use.
            ConnectMode::Sync => 1,
            ConnectMode::Async => self.workers,
        }
        .min(whole.connections as usize)
        .max(1);
        if self.common_end {
            recorded.end = End::Pause;
        }
        ChildPlan {
            whole: recorded,
            json: self.parts.0.join(format!("part-{k}.json")),
            rtt_log: a.rtt_log.as_ref().map(|p| {
                let mut name = p.as_os_str().to_owned();
                name.push(format!(".{k}"));
                PathBuf::from(name)
            }),
            start_at: a.start_at,
            force: a.force,
            shortfall: self.shortfall.clone(),
            metrics: self.metrics,
            run: self.run.clone(),
        }
    }
}

/// The parent following its children's run: their lines and their end,
/// the live view, the run's common end, and the silent ones killed.
struct Parent<'a> {
    whole: &'a Scenario,
    n: u64,
    common_end: bool,
    // (Dropped in this order: the live view, then the children.)
    live: LiveView,
    children: Children,
    exported: Option<Arc<Mutex<RunCounters>>>,
    /// Each child's latest second.
    latest: Vec<Option<crate::outcome::Sample>>,
    /// Each child's latest --metrics figures.
    figures: Vec<RunCounters>,
    /// Children whose ramp is done.
    ramps: u64,
    /// Each child's ramp: when its line came, and how long after its start.
    ramped: Vec<Option<(Instant, Duration)>>,
    exited: Vec<bool>,
    end_decided: bool,
    /// The children's established and failed connections when their ramps
    /// were done.
    ramp_counts: (u64, u64),
    /// The last second shown.
    shown: u64,
    alive: u64,
    interrupted: bool,
    /// When the parent tells the children to end (Enter).
    end_at: Option<Instant>,
    silence: Silence,
    /// Why each child killed for its silence has no result.
    killed: Vec<Option<String>>,
}

impl<'a> Parent<'a> {
    fn new(
        a: &ClientConfig,
        whole: &'a Scenario,
        n: u64,
        children: Children,
        common_end: bool,
        exported: Option<Arc<Mutex<RunCounters>>>,
    ) -> Parent<'a> {
        let live = match a.child {
            true => LiveView::Child(None),
            false => LiveView::new(a.quiet, whole.connections),
        };
        let drain = whole.traffic.as_ref().map_or(0.0, |t| t.drain_s);
        let share = whole.connections.div_ceil(n);
        Parent {
            whole,
            n,
            common_end,
            children,
            live,
            exported,
            latest: vec![None; n as usize],
            figures: vec![RunCounters::default(); n as usize],
            ramps: 0,
            ramped: vec![None; n as usize],
            exited: vec![false; n as usize],
            end_decided: false,
            ramp_counts: (0, 0),
            shown: 0,
            alive: n,
            interrupted: false,
            end_at: None,
            silence: Silence::new(n as usize, Silence::limit(drain, share)),
            killed: vec![None; n as usize],
        }
    }

    /// Follows the children until every one has ended.
    fn follow(&mut self, stop: &Stop) {
        while self.alive > 0 {
            let wake = match (self.end_at, self.silence.next()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let reason = stop.wait_reason(wake);
            self.kill_silent();
            if let Some(Reason::ChildLine(i, line)) = &reason {
                if line.starts_with("{\"sample\"") {
                    self.silence.heard(*i);
                }
            }
            if reason.is_none() && self.end_at.is_some_and(|e| Instant::now() >= e) {
                self.end_at = None;
                self.children.enter_all();
                continue;
            }
            match reason {
                Some(Reason::Signal) if self.common_end && self.whole.end == End::Hold => {
                    // --hold ends with a signal by design: a normal end.
                    self.children.enter_all();
                }
                Some(Reason::Signal) => {
                    self.interrupted = true;
                    self.children.signal(libc::SIGINT);
                }
                Some(Reason::ChildExit(i)) => {
                    self.alive -= 1;
                    self.exited[i] = true;
                    self.silence.gone(i);
                }
                Some(Reason::ChildLine(i, line)) => self.on_line(i, &line),
                _ => {}
            }
            self.decide_end();
        }
    }

    /// Kills the children silent for too long.
    fn kill_silent(&mut self) {
        for (i, secs) in self.silence.overdue() {
            self.children.kill(i);
            self.killed[i] = Some(format!(
                "{} fell silent for {secs:.0} s (frozen, or stuck past its deadline) and was \
                 killed: its share is missing",
                self.children.names[i]
            ));
        }
    }

    /// A line of child `i`.
    fn on_line(&mut self, i: usize, line: &str) {
        match serde_json::from_str::<ChildLine>(line) {
            Ok(ChildLine::Sample(s)) => self.on_sample(i, *s),
            Ok(ChildLine::Metrics(f)) => {
                if let Some(e) = &self.exported {
                    self.figures[i] = *f;
                    let mut sum = RunCounters::default();
                    for f in &self.figures {
                        sum.merge(f);
                    }
                    *e.lock().unwrap_or_else(|p| p.into_inner()) = sum;
                }
            }
            Ok(ChildLine::RampDone {
                seconds,
                established,
                failed,
                since_start_s,
            }) => self.on_ramp_done(i, seconds, (established, failed), since_start_s),
            _ => {}
        }
    }

    /// A second of child `i`: one line of the live view per second once
    /// every live child reported it.
    fn on_sample(&mut self, i: usize, s: crate::outcome::Sample) {
        let t = s.t;
        self.latest[i] = Some(s);
        let latest = &self.latest;
        if t > self.shown && latest.iter().all(|x| x.as_ref().is_some_and(|x| x.t >= t)) {
            self.shown = t;
            self.live
                .second(&sum_samples(latest, t), self.whole.connections);
            crate::sys::release_free_memory();
        }
    }

    /// Child `i`'s ramp is done (`seconds`, and `since_start_s` after its
    /// start), with its (established, failed) connections; the last one's
    /// goes to the live view.
    fn on_ramp_done(&mut self, i: usize, seconds: f64, counts: (u64, u64), since_start_s: f64) {
        self.ramps += 1;
        self.ramped[i] = Some((
            Instant::now(),
            Duration::try_from_secs_f64(since_start_s).unwrap_or_default(),
        ));
        self.ramp_counts.0 += counts.0;
        self.ramp_counts.1 += counts.1;
        if self.ramps == self.n {
            let totals = crate::metrics::ConnTotals {
                established: self.ramp_counts.0,
                failed: std::array::from_fn(|i| if i == 0 { self.ramp_counts.1 } else { 0 }),
                ..Default::default()
            };
            let after = Duration::from_secs_f64(seconds);
            self.live.ramp_done(after, after, &totals, &self.whole.end);
        }
    }

    /// Once every child that lives has ramped, the run's end is known.
    fn decide_end(&mut self) {
        let all_in = (0..self.n as usize).all(|i| self.ramped[i].is_some() || self.exited[i]);
        if let (false, true, End::Duration { seconds }) =
            (self.end_decided, self.common_end, self.whole.end)
        {
            let heard: Vec<(Instant, Duration)> = self.ramped.iter().flatten().copied().collect();
            if all_in && !heard.is_empty() {
                self.end_decided = true;
                self.end_at = slices_end(&heard, Duration::from_secs_f64(seconds));
            }
        }
    }

    /// Waits for the children's end, and takes their results from `parts`
    /// (each missing one with why) and what `observer` saw.
    fn slices(&mut self, parts: &PartsDir, observer: crate::evidence::Observer) -> Slices {
        let statuses = self.children.wait();
        let mut results = Vec::new();
        let mut names = Vec::new();
        let mut missing = Vec::new();
        for (k, status) in statuses.iter().enumerate() {
            let path = parts.0.join(format!("part-{}.json", k + 1));
            let name = self.children.names[k].clone();
            match (status, crate::outcome::read(&path)) {
                (_, Ok(r)) => {
                    results.push(r);
                    names.push(name);
                }
                (_, Err(_)) if self.killed[k].is_some() => missing.extend(self.killed[k].take()),
                (Ok(code), Err(_)) => {
                    missing.push(format!("{name} exited with code {code} and no result"))
                }
                (Err(why), Err(_)) => missing.push(format!("{name} {why}")),
            }
        }
        Slices {
            results,
            names,
            missing,
            interrupted: self.interrupted,
            ended_as_planned: self.common_end && self.whole.end == End::Hold,
            observed: Some(observer.finish(0)),
            of: None,
        }
    }
}

/// The instant a run of slices ends, `hold` after its traffic starts: the
/// run starts with its earliest slice (a slice's start: when its ramp was
/// heard done, less the time its ramp took from its start), and its ramp
/// is the longest slice's. A slice that started late does not move the
/// end: it ends with the others, its traffic shorter.
fn slices_end(ramps: &[(Instant, Duration)], hold: Duration) -> Option<Instant> {
    let start = ramps
        .iter()
        .map(|&(heard, since)| heard.checked_sub(since).unwrap_or(heard))
        .min()?;
    let ramp = ramps.iter().map(|r| r.1).max()?;
    Some(start + ramp + hold)
}

/// A child of --processes: runs the slice its plan says, then prints its
/// result as its last line (and writes it to the parts directory); the
/// parent merges and gives the verdict.
pub(super) fn run_child(plan: ChildPlan) -> Result<ExitCode> {
    let stop = Stop::install_child()?;
    ChildLine::Pid(std::process::id()).print();
    let fd = limits::raise_nofile()?;
    let env = Environment::read(super::unix_now());
    let seg = plan
        .whole
        .segment
        .context("a child's plan without its segment")?;
    let ran = plan.whole.slice(seg);
    check_problems(plan.force, preflight(&ran, &fd, plan.shortfall.as_deref()))?;
    let here = Here {
        run: plan.run,
        rtt_log: plan.rtt_log,
        start_at: plan.start_at,
        control: false,
        child: true,
        session: false,
        quiet: true,
        exported: plan
            .metrics
            .then(|| Arc::new(Mutex::new(RunCounters::default()))),
    };
    match run_here(&plan.whole, ran, here, &stop, env)? {
        Some((_, _, result)) => super::child_end(&result, Some(&plan.json)),
        None => Ok(ExitCode::from(130)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child runs the very scenario its parent planned: the plan's JSON
    /// gives back every float to the bit (serde_json's float_roundtrip;
    /// without it these two come back one bit off).
    #[test]
    fn a_plan_round_trips_exactly() {
        let a = crate::cli::client_args(
            &[
                "127.0.0.1:1",
                "-c",
                "10003",
                "-r",
                "3.6522202648366253",
                "--connect-rate",
                "0.9468793297991501",
            ]
            .map(String::from),
        )
        .unwrap();
        let whole = a
            .scenario(vec!["127.0.0.1:1".parse().unwrap()], false, Vec::new())
            .unwrap();
        for k in 1..=3 {
            let mut recorded = whole.clone();
            recorded.segment = Some(Segment { index: k, count: 3 });
            recorded.end = End::Pause;
            let plan = ChildPlan {
                whole: recorded,
                json: PathBuf::from("/tmp/part.json"),
                rtt_log: None,
                start_at: Some(1_700_000_000.123_456_7),
                force: false,
                shortfall: None,
                metrics: false,
                run: RunId::generated(),
            };
            let own = Own::new(Vec::new(), &plan).unwrap();
            let back: ChildPlan = serde_json::from_str(&own.plan).unwrap();
            assert_eq!(back.whole, plan.whole);
            assert_eq!(back.start_at, plan.start_at);
            assert_eq!(back.run, plan.run);
        }
    }

    /// A child that starts late does not move the run's end by its
    /// lateness: an end counted from the last ramp would have the others
    /// send past -T.
    #[test]
    fn a_late_slice_ends_with_the_others() {
        let t0 = Instant::now();
        let s = |ms: u64| Duration::from_millis(ms);
        // Both ramps take 0.1 s; the second child started 1 s late.
        let on_time = (t0 + s(100), s(100));
        let late = (t0 + s(1100), s(100));
        let end = slices_end(&[on_time, late], s(3000)).unwrap();
        assert_eq!(end, t0 + s(3100));
        // In either order.
        assert_eq!(slices_end(&[late, on_time], s(3000)), Some(end));
        // The late one's traffic is shorter; the other's is -T.
        assert_eq!(end - late.0, s(2000));
        assert_eq!(end - on_time.0, s(3000));
    }

    /// A slice whose ramp took longer (not a late start) holds the end
    /// back: every slice holds its connections for -T together.
    #[test]
    fn a_slow_ramp_holds_the_end_back() {
        let t0 = Instant::now();
        let s = |ms: u64| Duration::from_millis(ms);
        let quick = (t0 + s(100), s(100));
        let slow = (t0 + s(900), s(900));
        let end = slices_end(&[quick, slow], s(2000)).unwrap();
        assert_eq!(end, t0 + s(2900));
        assert_eq!(slices_end(&[], s(2000)), None);
    }
}
