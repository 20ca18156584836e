//! A held run: one `throng client` process that keeps its connections
//! open while the search changes its load over `--control` (`connections
//! N`, `rate R`, `rate 0` to drain), and says each second what it did
//! (`--child`'s JSON lines). A step of the search is a stretch of its
//! seconds, judged on the figures [`figures`] makes of them, in `throng
//! client --json`'s keys.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::child::ChildLine;
use crate::metrics::Latency;
use crate::outcome::limit::{
    FailedAny, HeldConnections, HeldEnvironment, HeldLatency, HeldQueries, HeldScenario, HeldStep,
    Pace, StepLatency,
};
use crate::outcome::{RunResult, Sample};

/// A `throng client --child --control -` process of the search's.
pub struct HeldRun {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    pub pid: i32,
    /// Every second it has reported, in order.
    pub seconds: Vec<Sample>,
    /// Its first ramp is done.
    pub ramped: bool,
    result: Option<Box<RunResult>>,
    /// Its stdout closed: it ended.
    ended: bool,
    /// What it said on stderr (a refused plan's words).
    stderr: mpsc::Receiver<String>,
}

impl HeldRun {
    /// Starts `throng client <base> <load> --child --control - -T bound
    /// --json json`. It ends with this process (SIGTERM when it dies) and
    /// by itself after `bound`.
    pub fn start(
        exe: &Path,
        base: &[OsString],
        load: &[String],
        bound: Duration,
        json: &Path,
    ) -> Result<HeldRun> {
        let mut cmd = Command::new(exe);
        cmd.arg("client")
            .args(base)
            .args(load)
            .arg("-T")
            .arg(format!("{}s", bound.as_secs().max(1)))
            .args(["--child", "--control", "-", "--json"])
            .arg(json)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: prctl in the child between fork and exec, async-signal
        // safe; it asks for SIGTERM when this process ends.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let mut child = cmd.spawn().context("starting a held client run")?;
        let out = child.stdout.take().context("the held run's stdout")?;
        let err = child.stderr.take().context("the held run's stderr")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let (etx, stderr) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                if etx.send(l).is_err() {
                    break;
                }
            }
        });
        Ok(HeldRun {
            pid: child.id() as i32,
            stdin: child.stdin.take(),
            child,
            lines,
            seconds: Vec::new(),
            ramped: false,
            result: None,
            ended: false,
            stderr,
        })
    }

    /// Takes one line if one comes before `until`; false when none came
    /// (or the run has ended).
    fn take(&mut self, until: Instant) -> bool {
        if self.ended {
            return false;
        }
        let wait = until.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(wait) {
            Ok(l) => {
                match serde_json::from_str::<ChildLine>(&l) {
                    Ok(ChildLine::Sample(s)) => self.seconds.push(*s),
                    Ok(ChildLine::RampDone { .. }) => self.ramped = true,
                    Ok(ChildLine::Result(r)) => self.result = serde_json::from_value(*r).ok(),
                    _ => {}
                }
                true
            }
            Err(mpsc::RecvTimeoutError::Timeout) => false,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                self.ended = true;
                false
            }
        }
    }

    /// Waits (at most `most`) for its next second; None when none came:
    /// the run ended, or is stuck.
    pub fn next_second(&mut self, most: Duration) -> Option<&Sample> {
        let until = Instant::now() + most;
        let had = self.seconds.len();
        while self.seconds.len() == had {
            if !self.take(until) {
                return None;
            }
        }
        self.seconds.last()
    }

    /// Waits (at most `most`) for its first ramp to be done.
    pub fn ramp(&mut self, most: Duration) -> bool {
        let until = Instant::now() + most;
        while !self.ramped {
            if !self.take(until) {
                return false;
            }
        }
        true
    }

    /// After the ramp, the first second whose connections are as the one
    /// before it (closes of connections the server took at the ramp's
    /// end, and their replacements, show over the next seconds; those
    /// that stay count as steady a second after they came); the last one
    /// there is when none comes within `most`.
    pub fn settled(&mut self, most: Duration) -> Option<&Sample> {
        let until = Instant::now() + most;
        let state = |s: &Sample| (s.connections, s.steady, s.established, s.failed);
        let mut seen = self.seconds.last().map(state);
        loop {
            let n = self.seconds.len();
            while self.seconds.len() == n && self.take(until) {}
            let now = self.seconds.last().map(state);
            if self.seconds.len() == n || now == seen {
                break;
            }
            seen = now;
        }
        self.seconds.last()
    }

    /// Sends a --control command; false when the run has gone.
    pub fn send(&mut self, cmd: &str) -> bool {
        let Some(w) = self.stdin.as_mut() else {
            return false;
        };
        writeln!(w, "{cmd}").and_then(|_| w.flush()).is_ok()
    }

    pub fn last(&self) -> Option<&Sample> {
        self.seconds.last()
    }

    /// What it said on stderr so far.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr.try_iter().collect()
    }

    /// Ends it (`stop`), and its whole result (None when it wrote none
    /// within `most`).
    pub fn finish(mut self, most: Duration) -> Option<Box<RunResult>> {
        self.send("stop");
        drop(self.stdin.take());
        let until = Instant::now() + most;
        while self.result.is_none() && (self.take(until) || Instant::now() < until) {
            if self.ended {
                break;
            }
        }
        self.end();
        self.result.take()
    }

    fn end(&mut self) {
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            // SAFETY: a signal to our own child, by its pid.
            unsafe { libc::kill(self.pid, libc::SIGTERM) };
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for HeldRun {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.end();
        }
    }
}

/// What a step asked of the held run: its connections, and its rate when
/// it offers one.
pub struct Asked {
    pub connections: u64,
    pub rate: Option<f64>,
    /// The run's transport, as the figures record it.
    pub transport: crate::domain::Transport,
}

/// The figures of a held step in `throng client --json`'s keys (so the
/// same --check expressions read them): `before`, the run's last second
/// before the step; `step`, the step's seconds from its change of load to
/// its end (drain included); `judged`, how many of them at the start
/// after the warm-up make its measured stretch (the rest drain).
pub fn step_of_seconds(
    before: &Sample,
    step: &[Sample],
    warm: usize,
    judged: usize,
    asked: &Asked,
) -> HeldStep {
    let end = step.last().unwrap_or(before);
    let ended = (before.connections.max(0) as u64 + end.established)
        .saturating_sub(before.established)
        .saturating_sub(end.connections.max(0) as u64);
    let open = end.connections.max(0) as u64;
    // The open ones verified: those held before the step (verified then)
    // and those verified during it; the rest of the open ones are not.
    // (Replacements that came and went leave no mark here: their closes
    // and failures do.)
    let verified =
        open.min((before.connections.max(0) as u64 + end.verified).saturating_sub(before.verified));
    // (Under an offered rate, open ones no query went to are idle, not
    // unverified: the seconds do not tell them apart.)
    let unverified = asked.rate.is_none().then_some(open - verified);
    let peak = step.iter().map(|s| s.connections).max().unwrap_or(0).max(0);
    let mut v = HeldStep {
        held: true,
        duration_s: judged as f64,
        connections: HeldConnections {
            target: asked.connections,
            attempted: end.attempted.saturating_sub(before.attempted),
            established: open,
            verified,
            unverified,
            failed: FailedAny {
                any: end.failed.saturating_sub(before.failed),
            },
            peak,
            peer_closed: ended,
        },
        queries: None,
        latency: None,
        environment: HeldEnvironment { cores: 0.0 },
        scenario: HeldScenario {
            transport: asked.transport,
        },
        client: None,
        server_seen: None,
        checks: Vec::new(),
        verdict: None,
    };
    if let Some(rate) = asked.rate {
        // Every query of the step came due, went out and was answered (or
        // timed out) between its change of load and the end of its drain:
        // counted over all its seconds. Its rates are its judged seconds'
        // (answers of the drain, late, do not make a rate), its times the
        // steady state's, after the warm-up.
        let measured = step.get(warm..).unwrap_or_default();
        let window = judged_seconds(step, warm, judged);
        let sum = |f: fn(&Sample) -> Option<u64>| step.iter().filter_map(f).sum::<u64>();
        let sent = sum(|s| s.sent);
        let answered = sum(|s| s.answered);
        let errors = sum(|s| s.errors);
        // (None: seconds of a client from before they counted them.)
        let failed_answers = step
            .iter()
            .any(|s| s.failed_answers.is_some())
            .then(|| sum(|s| s.failed_answers));
        // (A client from before seconds carried their due queries: the
        // rate asked for.)
        let due = match step.iter().all(|s| s.due.is_some()) {
            true => sum(|s| s.due),
            false => step.iter().filter_map(|s| s.target).sum::<f64>().round() as u64,
        };
        let secs = ((warm + judged) as f64).max(1.0);
        let per = (window.len() as f64).max(1.0);
        let in_window = |f: fn(&Sample) -> Option<u64>| window.iter().filter_map(f).sum::<u64>();
        v.duration_s = secs;
        v.queries = Some(HeldQueries {
            due,
            sent,
            answered,
            ok: answered.saturating_sub(errors + failed_answers.unwrap_or(0)),
            errors,
            failed_answers,
            timed_out: sum(|s| s.timed_out),
            loop_late: sum(|s| s.loop_late),
            rate_target: rate,
            rate_sent: in_window(|s| s.sent) as f64 / per,
            rate_achieved: in_window(|s| s.answered) as f64 / per,
        });
        v.latency = Some(HeldLatency {
            response_time_us: hist_of(measured, |s| s.hdr.as_deref()),
            service_time_us: hist_of(measured, |s| s.service_hdr.as_deref()),
        });
    }
    v
}

/// A held rate step's judged seconds: after its warm-up, before its drain.
pub fn judged_seconds(step: &[Sample], warm: usize, judged: usize) -> &[Sample] {
    let from = warm.min(step.len());
    &step[from..(warm + judged).min(step.len())]
}

/// A fresh run's judged seconds: those that offered its rate, less the
/// first (the ramp's end, answers not yet flowing) and the last (the
/// traffic's end, and the drain's answers).
pub fn offered_seconds(per_second: &[Sample]) -> &[Sample] {
    let offered = |s: &Sample| s.target.is_some_and(|t| t > 0.0);
    match (
        per_second.iter().position(offered),
        per_second.iter().rposition(offered),
    ) {
        (Some(a), Some(b)) if b > a + 1 => &per_second[a + 1..b],
        _ => &[],
    }
}

/// The pace of `seconds`, kept at `share` (None without a query due in
/// them).
pub fn pace(seconds: &[Sample], share: f64) -> Option<Pace> {
    let sum = |f: fn(&Sample) -> Option<u64>| seconds.iter().filter_map(f).sum::<u64>();
    let due = sum(|s| s.due.or(s.sent));
    (due > 0).then(|| Pace::new(seconds.len() as u64, due, sum(|s| s.answered), share))
}

/// The seconds' histograms added, as a result's latency object; None when
/// a second's histogram is missing (its percentiles cannot be added).
fn hist_of(seconds: &[Sample], of: fn(&Sample) -> Option<&str>) -> Option<StepLatency> {
    let mut all: Option<hdrhistogram::Histogram<u64>> = None;
    for s in seconds {
        let Some(text) = of(s) else { continue };
        let Ok(h) = crate::metrics::decode_histogram(text) else {
            return None;
        };
        match all.as_mut() {
            Some(a) => {
                if crate::metrics::Grow::take_in(a, &h).is_err() {
                    return None;
                }
            }
            None => all = Some(h),
        }
    }
    let h = all.unwrap_or_else(|| {
        hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("valid bounds")
    });
    // (The step's histogram is not kept: the held run's result has the
    // whole run's.)
    let l = Latency::from_histogram(&h);
    Some(StepLatency {
        count: l.count,
        p50: l.p50,
        p90: l.p90,
        p99: l.p99,
        p999: l.p999,
        p9999: l.p9999,
        max: l.max,
        mean: l.mean,
        stdev: l.stdev,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(t: u64, conns: i64, established: u64, verified: u64, failed: u64) -> Sample {
        Sample {
            t,
            connections: conns,
            attempted: established + failed,
            established,
            verified,
            failed,
            ..Sample::default()
        }
    }

    #[test]
    fn a_held_step_counts_what_it_added_and_what_it_lost() {
        let before = second(3, 100, 100, 100, 0);
        // Grew to 200, two failed, then the server closed five old ones.
        let step = [second(4, 190, 190, 190, 2), second(5, 195, 200, 192, 2)];
        let v = serde_json::to_value(step_of_seconds(
            &before,
            &step,
            0,
            2,
            &Asked {
                connections: 200,
                rate: None,
                transport: crate::domain::Transport::Tcp,
            },
        ))
        .unwrap();
        let c = &v["connections"];
        assert_eq!(c["established"], 195);
        assert_eq!(c["unverified"], 3);
        assert_eq!(c["verified"], 192);
        assert_eq!(c["failed"]["any"], 2);
        assert_eq!(c["peer_closed"], 5);
        assert_eq!(c["peak"], 195);
        assert!(v.get("queries").is_none());
    }

    #[test]
    fn a_rate_step_judges_its_window_and_counts_its_drain() {
        let s = |t, target: Option<f64>, sent, answered, timed_out| Sample {
            t,
            connections: 10,
            established: 10,
            verified: 10,
            target,
            due: Some(sent),
            sent: Some(sent),
            answered: Some(answered),
            timed_out: Some(timed_out),
            errors: Some(0),
            ..Sample::default()
        };
        let before = s(1, None, 0, 0, 0);
        // A warm-up second, two judged, one drain second at rate 0.
        let step = [
            s(2, Some(1000.0), 1000, 990, 0),
            s(3, Some(1000.0), 1000, 1000, 0),
            s(4, Some(1000.0), 1000, 990, 0),
            s(5, Some(0.0), 0, 15, 5),
        ];
        let v = serde_json::to_value(step_of_seconds(
            &before,
            &step,
            1,
            2,
            &Asked {
                connections: 10,
                rate: Some(1000.0),
                transport: crate::domain::Transport::Tcp,
            },
        ))
        .unwrap();
        let q = &v["queries"];
        assert_eq!(q["due"], 3000);
        assert_eq!(q["sent"], 3000);
        assert_eq!(q["answered"], 2995);
        assert_eq!(q["ok"], 2995);
        assert_eq!(q["timed_out"], 5);
        // Rates over the judged seconds: the drain's late answers make none.
        assert_eq!(q["rate_sent"], 1000.0);
        assert_eq!(q["rate_achieved"], 995.0);
        // Its queries went to connections at random: an idle one is not
        // told from an unverified one, so the key is left out.
        assert!(v["connections"].get("unverified").is_none());
        assert_eq!(v["latency"]["response_time_us"]["count"], 0);
        // The checks read these keys as they read a run's.
        let ok = crate::report::check::parse("queries.ok>=99.9%").unwrap();
        assert!(!ok.evaluate(&v).pass);
        let none_lost = crate::report::check::parse("queries.timed_out==0").unwrap();
        assert!(!none_lost.evaluate(&v).pass);
        let ok = crate::report::check::parse("queries.ok>=99%").unwrap();
        assert!(ok.evaluate(&v).pass);
    }

    fn paced(t: u64, target: f64, due: u64, answered: u64) -> Sample {
        Sample {
            t,
            target: Some(target),
            due: Some(due),
            sent: Some(due),
            answered: Some(answered),
            ..Sample::default()
        }
    }

    #[test]
    fn a_server_answering_from_a_growing_queue_loses_pace_though_all_come() {
        // 1000/s offered, 600/s answered: the queue grows by 400 a second,
        // and the drain's last second brings every late answer.
        let step = [
            paced(1, 1000.0, 1000, 600),
            paced(2, 1000.0, 1000, 600),
            paced(3, 1000.0, 1000, 600),
            paced(4, 0.0, 0, 1200),
        ];
        let p = pace(judged_seconds(&step, 1, 2), 0.98).unwrap();
        assert_eq!((p.seconds, p.due, p.answered), (2, 2000, 1200));
        assert!((p.share() - 0.6).abs() < 1e-9);
        assert!(!p.kept);
        // One that keeps up: what it answers in a second is what came due,
        // less or more the few in flight at the edges.
        let kept = [
            paced(1, 1000.0, 1000, 990),
            paced(2, 1000.0, 1000, 1003),
            paced(3, 1000.0, 1000, 998),
            paced(4, 0.0, 0, 9),
        ];
        let p = pace(judged_seconds(&kept, 1, 2), 0.98).unwrap();
        assert!(p.kept && p.share() >= 0.98);
        // A step cut short has fewer judged seconds than asked.
        assert_eq!(judged_seconds(&kept, 1, 9).len(), 3);
        assert!(pace(judged_seconds(&kept, 5, 2), 0.98).is_none());
    }

    #[test]
    fn a_few_queries_short_at_a_low_rate_is_the_counts_noise() {
        // 40 due, 36 answered: 10% short, within 2 x sqrt(40) = 12.6.
        assert!(Pace::new(2, 40, 36, 0.98).kept);
        assert!(!Pace::new(2, 40, 20, 0.98).kept);
        // A million due: 2% is the bound (2,000 of noise is less).
        assert!(Pace::new(10, 1_000_000, 980_000, 0.98).kept);
        assert!(!Pace::new(10, 1_000_000, 979_000, 0.98).kept);
    }

    #[test]
    fn a_fresh_runs_judged_seconds_leave_out_its_first_and_last() {
        let mut ramp = paced(1, 0.0, 0, 0);
        ramp.target = None;
        let run = [
            ramp,
            paced(2, 500.0, 300, 290),
            paced(3, 500.0, 500, 500),
            paced(4, 500.0, 500, 498),
            paced(5, 500.0, 200, 212),
        ];
        let w = offered_seconds(&run);
        assert_eq!(w.iter().map(|s| s.t).collect::<Vec<_>>(), [3, 4]);
        assert!(offered_seconds(&run[..3]).is_empty());
    }
}
