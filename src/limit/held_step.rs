//! A step of a held run: its load asked of the run over --control, its
//! seconds read, judged by the checks, its failure put on the right side.

use super::ClientFlags;
use super::*;
use crate::outcome::limit::{HeldStep, Pace, StepResult};
use crate::outcome::Sample;
use crate::sys::signals::Stop;

impl Search<'_> {
    /// A held step at `load`; None when the held run cannot give it (it
    /// would not start, or ended).
    pub(super) fn held_step(&mut self, load: f64) -> Result<Option<Step>> {
        let c = &self.a.client;
        let secs = self.a.step_time.as_secs_f64().ceil().max(1.0) as usize;
        // A second comes every second; this long without one is a stuck run.
        let quiet = Duration::from_secs(3) + c.connect_timeout;
        let (conns, rate) = match self.a.find {
            Find::Connections => (load as u64, c.rate),
            Find::Rate => (self.plan.connections, Some(load)),
        };
        let fresh_run = self.held.is_none();
        if fresh_run && !self.start_held(conns)? {
            return Ok(None);
        }
        let Some(h) = self.held.as_mut() else {
            return Ok(None);
        };
        // What the machine says of the step: over its growth and hold
        // (connections), or its warm-up and judged seconds (rate: the
        // drain, idle, would dilute the server's CPU).
        let observer = crate::evidence::Observer::start_for(Some(h.pid), self.watched);
        // The run's last second before this step (all zero before its first).
        let (before, from) = if fresh_run && self.a.find == Find::Connections {
            (Sample::default(), 0)
        } else {
            match h.last() {
                Some(s) => (s.clone(), h.seconds.len()),
                None => (Sample::default(), 0),
            }
        };
        // (The first step of a run counts its ramp's seconds, already in,
        // with its growth: its judged seconds come after.)
        let mut warm = if fresh_run && self.a.find == Find::Connections {
            h.seconds.len()
        } else {
            0
        };
        let mut restart = false;
        let seen = match self.a.find {
            Find::Connections => {
                if !fresh_run && !h.send(&format!("connections {conns}")) {
                    return Ok(None);
                }
                let Some(grown) = grow(
                    h,
                    c,
                    &self.stop,
                    &mut self.interrupted,
                    conns,
                    &before,
                    quiet,
                ) else {
                    return Ok(None);
                };
                warm += grown;
                if hold(h, secs, quiet, self.interrupted).is_none() {
                    // Ended mid-hold: no verdict on a hold cut short.
                    return Ok(None);
                }
                observer.finish(0)
            }
            Find::Rate => {
                if !h.send(&format!("rate {load}")) {
                    return Ok(None);
                }
                warm = 1;
                if offer(h, &self.stop, &mut self.interrupted, warm + secs, quiet).is_none() {
                    return Ok(None);
                }
                let seen = observer.finish(0);
                match drain(h, c, quiet) {
                    None => return Ok(None),
                    // The next step would start behind this one's backlog:
                    // it starts on a new held run instead.
                    Some(false) => restart = true,
                    Some(true) => {}
                }
                seen
            }
        };
        let seconds = h.seconds.get(from..).unwrap_or_default();
        let judged = match self.a.find {
            Find::Connections => seconds.len().saturating_sub(warm),
            Find::Rate => secs,
        };
        let mut v = held_run::step_of_seconds(
            &before,
            seconds,
            warm,
            judged,
            &held_run::Asked {
                connections: conns,
                rate,
                transport: c.transport,
            },
        );
        let pace = match self.a.find {
            Find::Rate => held_run::pace(held_run::judged_seconds(seconds, warm, judged), PACE),
            Find::Connections => None,
        };
        let answered = v.queries.as_ref().map_or(0, |q| q.answered);
        v.environment.cores = self.plan.cores;
        let mut seen = seen;
        if let Some(cl) = seen.client.as_mut() {
            cl.derive(answered);
            v.duration_s = cl.wall_s;
            v.client = Some(cl.clone());
        }
        v.server_seen = seen.server.clone();
        let step = self.judge_held(load, v, pace)?;
        if restart {
            self.end_held();
            self.restarted = true;
            // (The kernel lets the old connections go before the new ones.)
            settle(self.baseline, Duration::from_secs(10));
        }
        Ok(Some(step))
    }

    /// Starts a held run (a connections step's count, or a rate step's
    /// connections at the least rate) and waits for its ramp; false
    /// when it does not get through it.
    fn start_held(&mut self, conns: u64) -> Result<bool> {
        let c = &self.a.client;
        let json = self
            .dir
            .join(format!("held{}.json", self.held_runs.len() + 1));
        let bound =
            (self.a.step_time + c.timeout + c.connect_timeout + Duration::from_secs(5)) * 64;
        // (The arguments a search takes out, its axis's, given back.)
        let mut args = match self.a.find {
            Find::Connections => vec!["-c".to_string(), format!("{conns}")],
            // (A rate run opens its connections at the least rate: each
            // step sets its own, and what the opening offered while the
            // connections came and settled would queue ahead of it.)
            Find::Rate => vec!["-r".to_string(), "1".to_string()],
        };
        // (HeldRun runs are one process.)
        args.extend(self.plan.workers_args(conns));
        let mut h = HeldRun::start(&self.exe, &self.base, &args, bound, &json)?;
        let connect_rate = c.connect_rate.unwrap_or(10_000.0);
        let ramp = Duration::from_secs_f64(conns as f64 / connect_rate)
            + c.connect_timeout
            + Duration::from_secs(10);
        if !h.ramp(ramp) {
            for l in h.stderr_lines() {
                errln!("throng: held run: {l}");
            }
            return Ok(false);
        }
        // A rate is spread over every connection asked for: a server that
        // did not keep them all has a cap below -c, and failing the first
        // rate for it would put a rate limit where there is none.
        if self.a.find == Find::Rate {
            if let Some(s) = h.settled(Duration::from_secs(5)) {
                let open = s.connections.max(0) as u64;
                let held = Kept::new(open, s.steady, s.established_per_s > 0);
                if s.failed > 0 || open < conns {
                    if !self.steps.is_empty() {
                        // Opened again after a step's backlog: a server
                        // still busy with it may not take them all at
                        // once. The steps go on as fresh runs.
                        return Ok(false);
                    }
                    let failed = s.failed;
                    drop(h);
                    return Err(usage(format!(
                        "{}, so no rate can be searched over {conns}. Search over fewer (-c {}), \
                         or find how many it holds with --find connections",
                        held.describe(conns, failed),
                        held.count()
                    )));
                }
            }
        }
        self.held = Some(h);
        Ok(true)
    }

    /// The held step's verdict: the checks it can read (those whose keys
    /// a step's seconds do not give are judged on fresh steps only), and
    /// whose failure it is.
    fn judge_held(&mut self, load: f64, mut held: HeldStep, pace: Option<Pace>) -> Result<Step> {
        // The checks read its keys as they read a run's.
        let v = serde_json::to_value(&held)?;
        let mut judged_checks = Vec::new();
        let mut verdicts = Vec::new();
        for ch in &self.checks {
            let verdict = ch.evaluate(&v);
            if verdict.reason.as_deref() == Some("not in the result") {
                self.unjudged.insert(ch.expr.clone());
                continue;
            }
            judged_checks.push(ch.clone());
            verdicts.push(verdict);
        }
        let mut summary = crate::report::check::lines(&judged_checks, &verdicts).join("\n");
        let kept_pace = self.judge_pace(pace, &mut summary);
        let pass = !self.interrupted && kept_pace && verdicts.iter().all(|x| x.pass);
        held.checks = verdicts;
        let udp = self.a.client.transport == crate::domain::Transport::Udp;
        let verdict = held_verdict(&held, pass, pace, (self.a.find, udp, self.plan.workers));
        for c in verdict.causes.iter().filter(|c| c.explains()) {
            push_line(&mut summary, &format!("  {}", crate::report::line(c)));
        }
        if let (true, Find::Rate, Some(c)) = (
            self.steps.is_empty(),
            self.a.find,
            verdict.cause(crate::verdict::Code::SlotsFull),
        ) {
            // The first rate failed on connections left queued: the server
            // keeps fewer than -c, and no rate can be searched over them.
            let queued = held.server_seen.as_ref().map_or(0, |s| s.accept_queue_max);
            let conns = self.plan.connections;
            let kept = conns.saturating_sub(queued);
            return Err(usage(format!(
                "the server served about {kept} of the {conns} connections at once and left \
                 the rest in its accept queue (up to {queued}), unserved ({}), so no rate can \
                 be searched over {conns}. Search over fewer (-c {kept}), or find how many it \
                 serves with --find connections",
                c.sentence
            )));
        }
        held.verdict = Some(verdict);
        let result = StepResult::Held(Box::new(held));
        let client_limited = !pass && client_explains(&result, self.a.find);
        Ok(Step {
            load,
            pass,
            exit_code: i32::from(!pass),
            client_limited,
            held: true,
            result: Some(result),
            pace,
            summary,
        })
    }
}

/// A connections step's growth to `conns`: until every one is open, or
/// attempts stop resolving, or the time the growth takes at the connect
/// rate has passed twice over (a server that closes what it takes keeps
/// them resolving); then verification, at most --connect-timeout. The
/// seconds it took; None when the run ended.
fn grow(
    h: &mut HeldRun,
    c: &ClientFlags,
    stop: &Stop,
    interrupted: &mut bool,
    conns: u64,
    before: &Sample,
    quiet: Duration,
) -> Option<usize> {
    let adding = conns.saturating_sub(before.connections.max(0) as u64) as f64;
    let growth = Duration::from_secs_f64(adding / c.connect_rate.unwrap_or(10_000.0));
    let deadline = Instant::now() + growth * 2 + c.connect_timeout * 2 + Duration::from_secs(2);
    let mut last_progress = (before.established + before.failed, Instant::now());
    let mut verified_since: Option<Instant> = None;
    let mut took = 0;
    loop {
        let x = h.next_second(quiet)?;
        took += 1;
        let resolved = x.established + x.failed;
        if resolved > last_progress.0 {
            last_progress = (resolved, Instant::now());
        }
        let open = x.connections.max(0) as u64 >= conns;
        let stalled = last_progress.1.elapsed() > c.connect_timeout + Duration::from_secs(1)
            || Instant::now() >= deadline;
        if open || stalled {
            let pending = x.established.saturating_sub(x.verified)
                > before.established.saturating_sub(before.verified);
            let since = *verified_since.get_or_insert_with(Instant::now);
            if !verify_on(c) || !pending || since.elapsed() >= c.connect_timeout {
                break;
            }
        }
        if stop.wait_until(Instant::now()) {
            *interrupted = true;
            break;
        }
    }
    Some(took)
}

/// A connections step's hold: `secs` seconds read (none once
/// interrupted); None when the run ended.
fn hold(h: &mut HeldRun, secs: usize, quiet: Duration, interrupted: bool) -> Option<()> {
    for _ in 0..secs {
        if interrupted {
            break;
        }
        h.next_second(quiet)?;
    }
    Some(())
}

/// A rate step's offered seconds (its warm-up and judged ones), `n` of
/// them or until interrupted; None when the run ended.
fn offer(
    h: &mut HeldRun,
    stop: &Stop,
    interrupted: &mut bool,
    n: usize,
    quiet: Duration,
) -> Option<()> {
    for _ in 0..n {
        h.next_second(quiet)?;
        if stop.wait_until(Instant::now()) {
            *interrupted = true;
            break;
        }
    }
    Some(())
}

/// A rate step's drain: rate 0 until a second with nothing sent, answered
/// or timed out (at most --timeout and 2 s). Whether it got there (a
/// client whose queries queued behind a slow server still sends and reads
/// them after that); None when the run ended.
fn drain(h: &mut HeldRun, c: &ClientFlags, quiet: Duration) -> Option<bool> {
    h.send("rate 0");
    let most = c.timeout.as_secs_f64().ceil() as usize + 2;
    for _ in 0..most {
        let x = h.next_second(quiet)?;
        if x.sent == Some(0) && x.answered == Some(0) && x.timed_out == Some(0) {
            return Some(true);
        }
    }
    Some(false)
}

/// How many of a held run's connections the server kept, from the
/// client's count open, its steady count (open a second or more) and
/// whether connections were still being replaced (churn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kept {
    /// It kept these: without churn, those open; with it, the steady ones
    /// (the others it took and closed as the client replaced them, each
    /// open for a moment, so the count open at any instant says more
    /// than it keeps).
    Steady(u64),
    /// It held about this many at once, but kept fewer than half of them
    /// a second (`steady`): at its cap it closes connections for new ones
    /// (nginx at worker_connections closes its oldest idle ones).
    Rotating { open: u64, steady: u64 },
}

impl Kept {
    fn new(open: u64, steady: Option<u64>, churn: bool) -> Kept {
        match steady {
            // (Without churn every open connection stays: a steady count
            // a moment behind its last ones says nothing more.)
            Some(st) if churn && st * 2 < open => Kept::Rotating { open, steady: st },
            Some(st) if churn => Kept::Steady(st.min(open)),
            _ => Kept::Steady(open),
        }
    }

    fn count(self) -> u64 {
        match self {
            Kept::Steady(n) | Kept::Rotating { open: n, .. } => n,
        }
    }

    fn describe(self, conns: u64, failed: u64) -> String {
        let failed = format!("{failed} failed before any rate was offered");
        match self {
            Kept::Steady(n) => format!(
                "the server kept {n} of the {conns} connections the rate is spread over \
                 ({failed}): it has a cap of its own below -c"
            ),
            Kept::Rotating { open, steady } => format!(
                "the server held about {open} connections at once of the {conns} the rate is \
                 spread over ({failed}), and kept {steady} of them a second or more: at a cap \
                 of its own below -c it closes connections for new ones (nginx at \
                 worker_connections closes its oldest idle ones)"
            ),
        }
    }
}

#[cfg(test)]
mod kept_tests {
    use super::Kept;

    #[test]
    fn the_count_kept_is_the_steady_one_unless_few_stay() {
        // 20 kept, the rest closed as they come: 27 open at the moment.
        assert_eq!(Kept::new(27, Some(20), true), Kept::Steady(20));
        // Every connection closed for a newer one, 1,444 open at once.
        let rotating = Kept::new(1444, Some(0), true);
        assert_eq!(
            rotating,
            Kept::Rotating {
                open: 1444,
                steady: 0
            }
        );
        assert_eq!(rotating.count(), 1444);
        assert!(rotating
            .describe(2000, 0)
            .contains("held about 1444 connections at once of the 2000"));
        // Some lived a second in the rotation: still the count at once.
        assert_eq!(Kept::new(1444, Some(300), true).count(), 1444);
        // No churn: the steady count may trail the last ones opened.
        assert_eq!(Kept::new(30, Some(25), false), Kept::Steady(30));
        // A part that does not count steady ones.
        assert_eq!(Kept::new(30, None, true), Kept::Steady(30));
        assert_eq!(Kept::new(0, Some(0), true), Kept::Steady(0));
    }
}
