//! The main thread of a run: it follows the run's phases (ramp, traffic,
//! drain, end) from the events it waits on, one method per event (a
//! worker's ramp done, a tick, a --control line, Enter, a signal, the
//! drain, the end), makes each second's sample for the live view, and
//! makes the outcome at the end. It never touches a connection: it tells
//! the workers through `Shared` and their wakers.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;

use super::control::{control, stop_on_holds};
use super::seconds::SecondReport;
use super::seconds::Seconds;
use super::target_rate::{target_at, target_between, target_queries};
use super::workers::{grace, Workers};
use crate::metrics::exported::RunCounters;
use crate::metrics::{ConnTotals, ConnectBuckets, PushTotals, QueryTotals};
use crate::outcome::{ControlEvent, Outcome, QueryOutcome, Sample, Wall};
use crate::scenario::{End, Scenario};
use crate::sys::signals::{Reason, Stop};

/// Receives the live view's updates.
pub trait Live {
    /// Once a second.
    fn second(&mut self, s: &Sample, target: u64);
    /// When the ramp is over (all initial attempts resolved): `after`, the
    /// ramp's time (establishment's); `since_start`, the time since the
    /// run's start, when the traffic starts.
    fn ramp_done(
        &mut self,
        after: Duration,
        since_start: Duration,
        totals: &ConnTotals,
        hold: &End,
    );
    /// A line worth showing as it happens (--control commands).
    fn note(&mut self, line: &str);
    /// Before the summary.
    fn finish(&mut self);
}

/// What the main loop does after an event.
enum Next {
    /// Takes in the reports, makes the second if it is due, and waits on.
    Go,
    /// Waits on at once.
    Wait,
    /// The traffic is over: on to the drain.
    End,
}

/// The run as the main thread follows it.
pub(super) struct Conductor<'a> {
    sc: Arc<Scenario>,
    stop: &'a Stop,
    live: &'a mut dyn Live,
    /// The figures of --metrics.
    exported: Option<&'a Mutex<RunCounters>>,
    workers: Workers,
    /// The workers' reports of each second, added as they come.
    reports: BTreeMap<u64, SecondReport>,
    per_second: Seconds,
    /// The second that ends next (seconds since the start).
    tick: u64,
    /// The counters at the last second, for the next one's differences.
    last: Last,
    /// Workers whose ramp is done, established, or whose --queries are done.
    ramp_workers: usize,
    established_workers: usize,
    queries_done_workers: usize,
    /// When every worker's ramp was established.
    established_at: Option<Duration>,
    verify_time: Option<Duration>,
    ramp_time: Option<Duration>,
    traffic_start: Option<Instant>,
    /// When every attempt of the ramp was resolved: the hold's start.
    held_from: Option<Instant>,
    /// When the traffic ends (None: at a signal, Enter or `stop`).
    end_at: Option<Instant>,
    enter_seen: bool,
    interrupted: bool,
    controls: Vec<ControlEvent>,
    /// Rates set on --control: (seconds into the traffic, rate).
    rate_changes: Vec<(f64, f64)>,
    /// Seconds of traffic whose target is in `exported` already.
    targeted_s: f64,
    /// --stop-on: verification's last growth, and whether it stopped the
    /// ramp (when and why, in words).
    verified_growth: (u64, Instant),
    ramp_stopped: Option<String>,
}

/// The counters at the last second.
struct Last {
    established: u64,
    connects: ConnectBuckets,
    push: PushTotals,
    jitter: ConnectBuckets,
    delay: ConnectBuckets,
    q: QueryTotals,
}

impl<'a> Conductor<'a> {
    pub fn new(
        sc: Arc<Scenario>,
        stop: &'a Stop,
        live: &'a mut dyn Live,
        exported: Option<&'a Mutex<RunCounters>>,
        workers: Workers,
    ) -> Conductor<'a> {
        let last = Last {
            established: 0,
            connects: ConnectBuckets::read(&workers.counters),
            push: PushTotals::default(),
            jitter: crate::metrics::push_buckets(&workers.counters, false),
            delay: crate::metrics::push_buckets(&workers.counters, true),
            q: QueryTotals::default(),
        };
        Conductor {
            sc,
            stop,
            live,
            exported,
            reports: BTreeMap::new(),
            per_second: Seconds::new(),
            tick: 1,
            last,
            ramp_workers: 0,
            established_workers: 0,
            queries_done_workers: 0,
            established_at: None,
            verify_time: None,
            ramp_time: None,
            traffic_start: None,
            held_from: None,
            end_at: None,
            enter_seen: false,
            interrupted: false,
            controls: Vec::new(),
            rate_changes: Vec::new(),
            targeted_s: 0.0,
            verified_growth: (0, workers.start),
            ramp_stopped: None,
            workers,
        }
    }

    /// Runs the run to its end (or a signal) and returns what it measured.
    pub fn run(mut self) -> Result<Outcome> {
        self.conduct()?;
        let end = self.drain()?;
        self.finish(end)
    }

    /// Follows the ramp and the traffic, event by event, to the traffic's
    /// end.
    fn conduct(&mut self) -> Result<()> {
        loop {
            let next_tick = self.workers.start + Duration::from_secs(self.tick);
            let wake = self.end_at.map_or(next_tick, |e| e.min(next_tick));
            let next = match self.stop.wait_reason(Some(wake)) {
                Some(Reason::Signal) => self.on_signal(),
                Some(Reason::Enter) => self.on_enter(),
                Some(Reason::Control(line)) => self.on_control(&line),
                Some(
                    Reason::ChildLine(..)
                    | Reason::ChildExit(_)
                    | Reason::Grow
                    | Reason::Full
                    | Reason::Room,
                ) => Next::Go,
                Some(Reason::RampEstablished) => self.on_ramp_established(),
                Some(Reason::QueriesDone) => self.on_queries_done(),
                Some(Reason::RampDone) => self.on_ramp_done(),
                None => Next::Go,
            };
            match next {
                Next::Go => {}
                Next::Wait => continue,
                Next::End => break,
            }
            while let Ok(r) = self.workers.reports.try_recv() {
                self.take_report(r);
            }
            let now = Instant::now();
            if now >= next_tick {
                self.on_second(now)?;
            }
            if self.end_at.is_some_and(|e| now >= e) || self.workers.any_finished() {
                break;
            }
        }
        Ok(())
    }

    /// A signal: the traffic ends.
    fn on_signal(&mut self) -> Next {
        // --hold ends with a signal by design.
        self.interrupted = self.sc.end != End::Hold || self.ramp_time.is_none();
        Next::End
    }

    /// Enter on stdin: a --pause run ends (once its ramp is done, or as
    /// soon as it is).
    fn on_enter(&mut self) -> Next {
        self.enter_seen = true;
        if self.ramp_time.is_some() && self.sc.end == End::Pause {
            return Next::End;
        }
        Next::Go
    }

    /// A --control line: applied, shown, and kept for the result.
    fn on_control(&mut self, line: &str) -> Next {
        let t = self.workers.start.elapsed().as_secs_f64();
        let applied = control(line, &self.workers.shared, &self.workers.wakers);
        if applied && line.starts_with("rate") {
            if let Some(ts) = self.traffic_start {
                let rate = f64::from_bits(self.workers.shared.rate_override.load(Relaxed));
                self.rate_changes.push((ts.elapsed().as_secs_f64(), rate));
            }
        }
        self.live.note(&format!(
            "{t:>7.2}s  control: {line}{}",
            if applied {
                ""
            } else {
                " (not understood: rate R (0 pauses) | connections N | stop)"
            }
        ));
        self.controls.push(ControlEvent {
            t,
            command: line.to_string(),
            applied,
        });
        if applied && line.trim() == "stop" {
            return Next::End;
        }
        Next::Go
    }

    /// A worker's ramp attempts are all established or failed.
    fn on_ramp_established(&mut self) -> Next {
        self.established_workers += 1;
        if self.established_workers == self.sc.workers {
            self.established_at = Some(self.workers.start.elapsed());
        }
        Next::Go
    }

    /// A worker has sent its share of --queries, none in flight any more.
    fn on_queries_done(&mut self) -> Next {
        self.queries_done_workers += 1;
        if self.queries_done_workers == self.sc.workers {
            // Every share of --queries is done: nothing is left to
            // measure, and waiting would only lengthen the run's time.
            return Next::End;
        }
        Next::Go
    }

    /// A worker has resolved every attempt of its ramp; the last one's
    /// starts the traffic.
    fn on_ramp_done(&mut self) -> Next {
        self.ramp_workers += 1;
        if self.ramp_workers != self.sc.workers {
            return Next::Go;
        }
        let now = Instant::now();
        let start = self.workers.start;
        if let Some(total) = self.sc.schedule_seconds() {
            // No ramp of fixed attempts: the schedule runs its course.
            self.held_from = Some(now);
            self.end_at = Some(start + Duration::from_secs_f64(total));
            self.start_traffic(now);
            return Next::Wait;
        }
        // The ramp's figure is establishment's; verification
        // (probes answered or timed out) has its own.
        let ramp = self.established_at.unwrap_or(now - start);
        self.ramp_time = Some(ramp);
        self.verify_time = self.sc.verify.then_some(now - start);
        let t = self.workers.totals();
        self.live.ramp_done(ramp, now - start, &t, &self.sc.end);
        let per_query = self.sc.transport == crate::domain::Transport::TcpPerQuery;
        if !per_query && !self.sc.reconnect && self.workers.current() == 0 && t.failed_total() > 0 {
            // Nothing to hold and nothing will be: say so now
            // rather than wait out the duration.
            self.live.note("every connection failed: the run ends here");
            return Next::End;
        }
        self.held_from = Some(now);
        self.start_traffic(now);
        self.end_at = match self.sc.end {
            End::Duration { seconds } => Some(now + Duration::from_secs_f64(seconds)),
            End::Pause if self.enter_seen => Some(now),
            End::Pause | End::Hold => None,
        };
        Next::Go
    }

    /// Lets the workers start their traffic from `now`.
    fn start_traffic(&mut self, now: Instant) {
        if self.sc.traffic.is_none() || self.traffic_start.is_some() {
            return;
        }
        self.traffic_start = Some(now);
        let ns = now.duration_since(self.workers.start).as_nanos() as u64;
        self.workers.shared.traffic_at.store(ns + 1, Relaxed);
        self.workers.wake_all();
    }

    /// A second is over: its sample to the live view and the series, its
    /// figures to --metrics, and --stop-on's conditions checked.
    fn on_second(&mut self, now: Instant) -> Result<()> {
        let t = self.workers.totals();
        let q = self.workers.qtotals();
        let mut s = self.connection_sample(&t);
        if self.sc.traffic.is_some() && self.traffic_start.is_some() {
            self.add_query_sample(&mut s, &q);
        }
        self.export(Instant::now(), &t, &q, s.connections);
        self.check_stop_on(&t, now)?;
        self.last.established = t.established;
        self.last.q = q;
        self.live.second(&s, self.sc.connections);
        self.per_second.push(s, self.sc.traffic.is_none());
        // Seconds every worker has reported take their exact figures
        // now, and their histograms go: kept to the end, they would grow
        // the client by a histogram (~30 kB) a second.
        let back = &self.workers.back;
        self.per_second.settle(
            &mut self.reports,
            self.workers.handles.len(),
            self.tick,
            |r| back.give_back(r),
        );
        crate::sys::release_free_memory();
        self.tick += 1;
        Ok(())
    }

    /// The second's sample with its connections' figures (and --proto
    /// push's).
    fn connection_sample(&mut self, t: &ConnTotals) -> Sample {
        let last = &mut self.last;
        let counters = &self.workers.counters;
        let mut s = Sample {
            t: self.tick,
            unix_s: unix_now(),
            connections: self.workers.current(),
            attempted: t.attempted,
            established: t.established,
            verified: t.verified,
            failed: t.failed_total(),
            established_per_s: t.established - last.established,
            // (tcp-per-query's connections live for a query: none is kept.)
            steady: (self.sc.transport != crate::domain::Transport::TcpPerQuery)
                .then(|| counters.iter().map(|c| c.steady.load(Relaxed)).sum()),
            ..Sample::default()
        };
        let connects = ConnectBuckets::read(counters);
        s.connect_p99_us = connects.p99_since(&last.connects);
        last.connects = connects;
        if self.sc.push.is_some() {
            let p = self.workers.push_totals();
            let jitter = crate::metrics::push_buckets(counters, false);
            let delay = crate::metrics::push_buckets(counters, true);
            s.push_delay_p99_us = delay.p99_since(&last.delay);
            last.delay = delay;
            s.push_received = Some(p.received - last.push.received);
            s.push_lost = Some(p.lost.saturating_sub(last.push.lost));
            s.push_duplicates = Some(p.duplicates.saturating_sub(last.push.duplicates));
            s.push_out_of_order = Some(p.out_of_order.saturating_sub(last.push.out_of_order));
            s.push_jitter_p99_us = jitter.p99_since(&last.jitter);
            (last.push, last.jitter) = (p, jitter);
        }
        s
    }

    /// The second's query figures: counters now; latency of the last
    /// second every worker has reported.
    fn add_query_sample(&mut self, s: &mut Sample, q: &QueryTotals) {
        // The workers send the second just ended as they notice it,
        // a moment after this tick: wait for them (briefly), so that
        // every second with answers shows its latency.
        let tick = self.tick;
        let wait_until = Instant::now() + Duration::from_millis(100);
        while self.reports.get(&(tick - 1)).map_or(0, |r| r.workers) < self.workers.handles.len() {
            let left = wait_until.saturating_duration_since(Instant::now());
            match self.workers.reports.recv_timeout(left) {
                Ok(r) => self.take_report(r),
                Err(_) => break,
            }
        }
        let last = &self.last.q;
        s.due = Some(q.due.saturating_sub(last.due));
        s.sent = Some(q.sent - last.sent);
        s.answered = Some(q.answered - last.answered);
        s.timed_out = Some(q.timed_out - last.timed_out);
        s.errors = Some(q.errors_total() - last.errors_total());
        if let Some(r) = self.reports.get(&(tick - 1)) {
            // (A child's seconds go to its parent's live view,
            // histogram and all; here the result's are made at the
            // end.)
            r.times_to(s, self.stop.is_child());
        }
        s.target = target_at(
            &self.sc,
            self.workers.start,
            self.traffic_start,
            tick,
            &self.rate_changes,
        );
    }

    /// --stop-on: ends the ramp when one of its conditions holds (only
    /// while attempts of the ramp are left to drop).
    fn check_stop_on(&mut self, t: &ConnTotals, now: Instant) -> Result<()> {
        let sc = &self.sc;
        let ramp_left = sc.connections_schedule.is_none() && t.attempted < sc.connections;
        if self.ramp_time.is_some()
            || self.ramp_stopped.is_some()
            || sc.stop_on.is_empty()
            || !ramp_left
        {
            return Ok(());
        }
        if t.verified > self.verified_growth.0 {
            self.verified_growth = (t.verified, now);
        }
        if let Some(why) = stop_on_holds(&sc.stop_on, t, now - self.verified_growth.1) {
            self.workers.shared.ramp_stop.store(true, Relaxed);
            self.workers.wake()?;
            let words = format!(
                "at {:.1} s after {} attempts: {why}",
                (now - self.workers.start).as_secs_f64(),
                t.attempted
            );
            self.live.note(&format!("ramp stopped {words}"));
            self.ramp_stopped = Some(words);
        }
        Ok(())
    }

    /// Takes in one worker's report of a second; each is counted once in
    /// `exported`'s latencies as it arrives.
    fn take_report(&mut self, r: SecondReport) {
        if let Some(e) = self.exported {
            e.lock()
                .unwrap_or_else(|p| p.into_inner())
                .add_second(&r.hist, r.service.as_ref());
        }
        match self.reports.get_mut(&r.idx) {
            Some(agg) => {
                agg.add(&r);
                self.workers.back.give_back(r);
            }
            None => {
                self.reports.insert(r.idx, r);
            }
        }
    }

    /// The traffic is over (or a first Ctrl-C came): stop sending, and wait
    /// up to --drain for the queries in flight, so that each ends answered,
    /// timed out or errored. A second Ctrl-C ends the process at once.
    /// Returns when the traffic ended.
    fn drain(&mut self) -> Result<Instant> {
        let end = Instant::now();
        let drain = self.drain_s();
        // (WebSocket without traffic: its close handshake.)
        let started = self.traffic_start.is_some() || self.sc.traffic.is_none();
        if started && drain > 0.0 {
            self.wait_in_flight(end, drain)?;
        }
        Ok(end)
    }

    /// Tells the workers to drain, and waits for them until `drain`
    /// seconds after `end` (and a little more), or a signal.
    fn wait_in_flight(&mut self, end: Instant, drain: f64) -> Result<()> {
        self.workers.shared.drain.store(true, Relaxed);
        self.workers.wake()?;
        let wait = crate::units::human_us((drain * 1e6) as u64);
        self.live.note(&if self.sc.traffic.is_some() {
            format!("traffic over: waiting up to {wait} for the queries in flight (--drain)")
        } else {
            format!("closing: waiting up to {wait} for the servers' answers to the WebSocket close")
        });
        // The workers end by themselves; this bound only guards against one
        // that does not.
        let limit = end + Duration::from_secs_f64(drain) + Duration::from_secs(2);
        while !self.workers.all_finished() && Instant::now() < limit {
            let wait = (Instant::now() + Duration::from_millis(20)).min(limit);
            if let Some(Reason::Signal) = self.stop.wait_reason(Some(wait)) {
                self.interrupted = true;
                // A child of --processes gets a Ctrl-C twice (the
                // terminal's and its parent's): it drains on; its parent
                // ends it if need be.
                if !self.stop.is_child() {
                    break;
                }
            }
        }
        Ok(())
    }

    fn drain_s(&self) -> f64 {
        self.sc.drain_s()
    }

    /// Stops the workers, collects what they measured by the run's
    /// deadline, and makes the outcome; `end`, when the traffic ended.
    fn finish(mut self, end: Instant) -> Result<Outcome> {
        let drain = self.drain_s();
        let connections = self.sc.connections;
        // Past this, whatever has not stopped is named and left behind.
        let deadline = end + Duration::from_secs_f64(drain) + grace(connections);
        let got = self.workers.collect(deadline, drain, connections)?;
        while let Ok(r) = self.workers.reports.try_recv() {
            self.take_report(r);
        }
        let (t, q) = (self.workers.totals(), self.workers.qtotals());
        self.export(end, &t, &q, self.workers.current());
        // The exact per-second figures of the rest, now that every report is
        // in.
        let per_second = self.per_second.finish(&mut self.reports);
        self.live.finish();
        let sc = &self.sc;
        let (start, traffic_start) = (self.workers.start, self.traffic_start);
        let queries = sc.traffic.as_ref().zip(traffic_start).map(|(t, ts)| {
            let seconds = end.saturating_duration_since(ts).as_secs_f64();
            QueryOutcome {
                totals: self.workers.qtotals(),
                statuses: got.statuses,
                in_flight: got.in_flight,
                seconds,
                target_queries: target_queries(t, sc.connections, seconds, &self.rate_changes),
                controls: self.controls,
            }
        });
        let elapsed = start.elapsed();
        let start_unix_s = self.workers.start_unix_s;
        let at = |i: Instant| start_unix_s + i.saturating_duration_since(start).as_secs_f64();
        let traffic_start = traffic_start.filter(|_| sc.traffic.is_some());
        let wall = Wall {
            start_unix_s,
            end_unix_s: start_unix_s + elapsed.as_secs_f64(),
            traffic_start_unix_s: traffic_start.map(at),
            traffic_end_unix_s: traffic_start.map(|_| at(end)),
            held_start_unix_s: self.held_from.map(at),
            held_end_unix_s: self.held_from.map(|h| at(end.max(h))),
            established_unix_s: self
                .held_from
                .map(|h| at(self.established_at.map_or(h, |e| start + e))),
        };
        let mut totals = self.workers.totals();
        totals.judge_sources(&sc.sources);
        Ok(Outcome {
            totals,
            hists: got.hists,
            peak: self.workers.shared.peak.load(Relaxed),
            per_second,
            interrupted: self.interrupted,
            ramp_time: self.ramp_time,
            verify_time: self.verify_time,
            elapsed,
            wall: Some(wall),
            queries,
            overrun: got.overrun,
            push: sc.push.is_some().then(|| self.workers.push_totals()),
            observed: Default::default(),
            ramp_stopped: self.ramp_stopped,
        })
    }

    /// The figures of --metrics as they are at `at`: the counters, and the
    /// target of the traffic's seconds since the last export.
    fn export(&mut self, at: Instant, t: &ConnTotals, q: &QueryTotals, open: i64) {
        let Some(e) = self.exported else {
            return;
        };
        let upto = self
            .traffic_start
            .map_or(0.0, |ts| at.saturating_duration_since(ts).as_secs_f64());
        let mut f = e.lock().unwrap_or_else(|p| p.into_inner());
        f.set_counters(t, q, open);
        if let Some(traffic) = &self.sc.traffic {
            f.target_queries += target_between(
                traffic,
                self.sc.connections,
                &self.rate_changes,
                self.targeted_s,
                upto,
            );
            self.targeted_s = upto;
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
