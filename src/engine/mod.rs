//! The client's data plane: one worker thread per core, each a mio loop over
//! its own connections and its share of the queries. This module starts
//! them ([`run`]); the main thread's conductor (`conductor`) then follows
//! the run's phases (ramp, traffic, drain, end), gathers each worker's
//! per-second report for the live view, and merges the workers'
//! histograms at the end. The main thread never touches a connection;
//! workers never wait on it.

mod conn;
mod connections;
mod connector;
mod deadlines;
mod dialer;
mod inflight;
mod io;
mod link;
mod pacer;
mod pacing;
mod proto;
mod push;
mod recorder;
mod seconds;
mod traffic;
pub use push::delay_clock;
mod worker;

// The main thread's side: the conductor and what it holds and reads.
mod conductor;
mod control;
mod crew;
mod target;
pub use crew::{grace, GRACE};

use std::fs::File;
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use hdrhistogram::Histogram;
use mio::{Poll, Waker};
use serde::{Deserialize, Serialize};

use crate::metrics::exported::RunFigures;
use crate::metrics::{
    ConnCounters, ConnTotals, Histograms, PushTotals, QueryCounters, QueryTotals, Shared,
    StatusCounts,
};
use crate::scenario::{End, Scenario};
use crate::sys::signals::Stop;
use conductor::Conductor;
use crew::{rtt_writer, Crew};

/// What one worker measured in one second (since the run's start).
pub struct SecondReport {
    pub idx: u64,
    pub sent: u64,
    pub answered: u64,
    pub timed_out: u64,
    pub errors: u64,
    /// Due queries the worker's loop noticed more than 1 ms late (the
    /// client's own lateness, not a wait for the server).
    pub loop_late: u64,
    /// Response times of the queries answered in this second.
    pub hist: Histogram<u64>,
    /// Their service times (from the send; always kept by a run, which
    /// reports them per second; a test's report may leave them out).
    pub service: Option<Histogram<u64>>,
    /// Workers whose part is in (1 as sent; the main thread adds).
    pub workers: usize,
}

impl SecondReport {
    /// An empty report of second `idx`; with `service`, it keeps service
    /// times too.
    pub fn new(idx: u64, service: bool) -> SecondReport {
        let hist = || Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("valid bounds");
        SecondReport {
            idx,
            sent: 0,
            answered: 0,
            timed_out: 0,
            errors: 0,
            loop_late: 0,
            hist: hist(),
            service: service.then(hist),
            workers: 1,
        }
    }

    fn add(&mut self, o: &SecondReport) {
        self.sent += o.sent;
        self.answered += o.answered;
        self.timed_out += o.timed_out;
        self.errors += o.errors;
        self.loop_late += o.loop_late;
        self.workers += o.workers;
        let _ = self.hist.add(&o.hist);
        if let (Some(a), Some(b)) = (self.service.as_mut(), &o.service) {
            let _ = a.add(b);
        }
    }
}

/// Where a worker sends its seconds' reports, and the reports the main
/// thread is done with, emptied, for the workers' next seconds. A report's
/// histograms (~27 kB each) made anew by every worker every second and
/// freed by the main thread came and went from the worker's malloc arena,
/// its pages with them: the client's memory moved by ~0.1 MB from one
/// second to the next (bench/soak.sh).
#[derive(Clone)]
pub struct ReportTx {
    tx: mpsc::Sender<SecondReport>,
    spare: Arc<Mutex<Vec<SecondReport>>>,
    /// The most kept: two a worker. (After a stall of the main thread the
    /// workers make new ones, and then more come back than are taken: an
    /// unbounded pool would keep them all.)
    keep: usize,
}

impl From<mpsc::Sender<SecondReport>> for ReportTx {
    fn from(tx: mpsc::Sender<SecondReport>) -> ReportTx {
        ReportTx::new(tx, 1)
    }
}

impl ReportTx {
    /// For `workers` workers.
    pub fn new(tx: mpsc::Sender<SecondReport>, workers: usize) -> ReportTx {
        ReportTx {
            tx,
            spare: Arc::default(),
            keep: 2 * workers,
        }
    }

    pub fn send(&self, r: SecondReport) {
        let _ = self.tx.send(r);
    }

    /// An empty report of second `idx` (as [`SecondReport::new`]), one
    /// given back if there is one.
    pub fn fresh(&self, idx: u64, service: bool) -> SecondReport {
        let spare = self.spare.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match spare {
            Some(mut r) if r.service.is_some() == service => {
                r.idx = idx;
                r
            }
            _ => SecondReport::new(idx, service),
        }
    }

    /// A report the main thread is done with, for [`ReportTx::fresh`].
    pub fn give_back(&self, mut r: SecondReport) {
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        if spare.len() < self.keep {
            (r.sent, r.answered, r.timed_out, r.errors, r.workers) = (0, 0, 0, 0, 1);
            r.loop_late = 0;
            r.hist.reset();
            if let Some(h) = r.service.as_mut() {
                h.reset();
            }
            spare.push(r);
        }
    }
}

/// One second of a run, as the live view shows it and the JSON keeps it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the start.
    pub t: u64,
    /// Wall-clock second (for aligning runs of several hosts).
    pub unix_s: u64,
    /// Connections open now.
    pub connections: i64,
    pub attempted: u64,
    pub established: u64,
    pub verified: u64,
    pub failed: u64,
    /// Established during this second.
    pub established_per_s: u64,
    /// Query rate asked for in this second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<f64>,
    /// Queries that came due in this second (sent or not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_out: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<u64>,
    /// Due queries the client's loop noticed more than 1 ms late.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loop_late: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_us: Option<u64>,
    /// The second's response times (HdrHistogram V2, base64, not
    /// compressed: see `encode_histogram_plain`):
    /// seconds of several processes or hosts merge into exact percentiles.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::metrics::de_histogram_text"
    )]
    pub hdr: Option<String>,
    /// The second's service times (from the actual send), as above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_p50_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_p99_us: Option<u64>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::metrics::de_histogram_text"
    )]
    pub service_hdr: Option<String>,
    /// The p99 of the connect times of the connections established in
    /// this second (to a quarter-octave bucket's top; of several processes
    /// or hosts, the highest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_p99_us: Option<u64>,
    /// --proto push: messages received and found lost (sequence gaps; a
    /// connection's silent tail when it ends) in this second, and the
    /// jitter's p99 (µs, a quarter-octave bucket's top; of several parts,
    /// the highest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_received: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_lost: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_jitter_p99_us: Option<u64>,
    /// The one-way delay's p99 in this second (as the jitter's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_delay_p99_us: Option<u64>,
}

impl Sample {
    /// The second's response times: its percentiles, and its histogram
    /// when `keep` (for a result, or a parent process's live view).
    pub fn set_latency(&mut self, h: &Histogram<u64>, keep: bool) {
        let has = !h.is_empty();
        self.p50_us = has.then(|| h.value_at_quantile(0.5));
        self.p99_us = has.then(|| h.value_at_quantile(0.99));
        self.hdr = (has && keep).then(|| crate::metrics::encode_histogram_plain(h));
    }

    /// The second's service times, as [`Sample::set_latency`].
    pub fn set_service(&mut self, h: &Histogram<u64>, keep: bool) {
        let has = !h.is_empty();
        self.service_p50_us = has.then(|| h.value_at_quantile(0.5));
        self.service_p99_us = has.then(|| h.value_at_quantile(0.99));
        self.service_hdr = (has && keep).then(|| crate::metrics::encode_histogram_plain(h));
    }

    /// Both of a worker report's histograms.
    pub fn set_times(&mut self, r: &SecondReport, keep: bool) {
        self.loop_late = Some(r.loop_late);
        self.set_latency(&r.hist, keep);
        if let Some(h) = &r.service {
            self.set_service(h, keep);
        }
    }

    /// The same second of several processes or hosts as one: counts
    /// summed, histograms added, percentiles of the sum. (A sample written
    /// before seconds carried their histogram has percentiles only: those
    /// of two cannot be combined, and the sum has none.) The time fields
    /// are the first part's.
    pub fn merged<'a>(parts: impl IntoIterator<Item = &'a Sample>) -> Sample {
        use crate::metrics::add_opt as add;
        let mut m: Option<Sample> = None;
        let (mut response, mut service) = (HdrSum::default(), HdrSum::default());
        let mut n = 0;
        for o in parts {
            n += 1;
            response.add(o.hdr.as_deref(), o.p50_us.is_some());
            // (A part from before seconds kept service times has response
            // times only: the sum of service times is then unknown.)
            service.add(
                o.service_hdr.as_deref(),
                o.service_p50_us.is_some() || o.p50_us.is_some(),
            );
            let Some(s) = m.as_mut() else {
                m = Some(o.clone());
                continue;
            };
            s.connections += o.connections;
            s.attempted += o.attempted;
            s.established += o.established;
            s.verified += o.verified;
            s.failed += o.failed;
            s.established_per_s += o.established_per_s;
            s.target = add(s.target, o.target);
            s.due = add(s.due, o.due);
            s.sent = add(s.sent, o.sent);
            s.answered = add(s.answered, o.answered);
            s.timed_out = add(s.timed_out, o.timed_out);
            s.errors = add(s.errors, o.errors);
            s.loop_late = add(s.loop_late, o.loop_late);
            s.connect_p99_us = s.connect_p99_us.max(o.connect_p99_us);
            s.push_received = add(s.push_received, o.push_received);
            s.push_lost = add(s.push_lost, o.push_lost);
            s.push_jitter_p99_us = s.push_jitter_p99_us.max(o.push_jitter_p99_us);
            s.push_delay_p99_us = s.push_delay_p99_us.max(o.push_delay_p99_us);
        }
        let mut m = m.unwrap_or_default();
        if n == 1 {
            // One part: its figures as they are.
            return m;
        }
        match response.sum() {
            Some(h) => m.set_latency(&h, true),
            None => (m.p50_us, m.p99_us, m.hdr) = (None, None, None),
        }
        match service.sum() {
            Some(h) => m.set_service(&h, true),
            None => (m.service_p50_us, m.service_p99_us, m.service_hdr) = (None, None, None),
        }
        m
    }
}

/// One second's histograms of several parts, added.
#[derive(Default)]
struct HdrSum {
    hist: Option<Histogram<u64>>,
    /// A part had percentiles but no histogram (or one that did not
    /// decode): the sum is unknown.
    unknown: bool,
}

impl HdrSum {
    fn add(&mut self, hdr: Option<&str>, has_percentiles: bool) {
        match hdr.map(crate::metrics::decode_histogram) {
            Some(Ok(h)) => match self.hist.as_mut() {
                Some(all) => self.unknown |= all.add(&h).is_err(),
                None => self.hist = Some(h),
            },
            Some(Err(_)) => self.unknown = true,
            None => self.unknown |= has_percentiles,
        }
    }

    fn sum(self) -> Option<Histogram<u64>> {
        self.hist.filter(|_| !self.unknown)
    }
}

/// A command received on --control, with when it applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlEvent {
    /// Seconds since the start.
    pub t: f64,
    pub command: String,
    pub applied: bool,
}

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

/// What the query traffic measured.
#[derive(Clone)]
pub struct QueryOutcome {
    pub totals: QueryTotals,
    pub statuses: StatusCounts,
    pub in_flight: u64,
    /// Seconds from the traffic start to the end.
    pub seconds: f64,
    /// Queries the schedule asked for over that time.
    pub target_queries: f64,
    pub controls: Vec<ControlEvent>,
}

/// Everything a run measured.
pub struct Outcome {
    pub totals: ConnTotals,
    /// Connect, connect() call and TLS handshake times (TLS: from the TCP
    /// connection up to the first byte it can carry; empty without TLS);
    /// with traffic, the queries' times too (empty without).
    pub hists: Histograms,
    pub peak: i64,
    pub per_second: Vec<Sample>,
    /// Stopped by a signal before its planned end.
    pub interrupted: bool,
    /// From the start until every connection of the ramp was verified,
    /// found unverified, or failed (with --verify).
    pub verify_time: Option<Duration>,
    /// From the start to the last initial attempt resolved.
    pub ramp_time: Option<Duration>,
    pub elapsed: Duration,
    pub queries: Option<QueryOutcome>,
    /// What had not stopped at the run's deadline (`-T` + `--drain` +
    /// [`GRACE`]) and was left behind, in words.
    pub overrun: Vec<String>,
    /// --proto push: what arrived (its times are in `hists`).
    pub push: Option<PushTotals>,
    /// The client's CPU and what was seen of the server on this host (set
    /// by the caller, which watched the run).
    pub observed: crate::evidence::Observed,
    /// --stop-on ended the ramp early: when and why, in words.
    pub ramp_stopped: Option<String>,
    /// When the run happened on the wall clock (None: read back from a
    /// result written before results said so).
    pub wall: Option<Wall>,
}

/// When a run happened, on the wall clock (Unix seconds): what slices of
/// one run, on many processes or hosts, are aligned by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Wall {
    /// The first connection attempt may go (after --start-at).
    pub start_unix_s: f64,
    /// Everything stopped (after --drain).
    pub end_unix_s: f64,
    /// The traffic's interval: queries were sent from its start to its end
    /// (the drain only waits for answers). Rates are over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_start_unix_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_end_unix_s: Option<f64>,
}

impl Wall {
    /// From the first start to the last end (the traffic's too).
    pub fn hull(&self, o: &Wall) -> Wall {
        let pick = |a: Option<f64>, b: Option<f64>, f: fn(f64, f64) -> f64| match (a, b) {
            (Some(a), Some(b)) => Some(f(a, b)),
            (a, b) => a.or(b),
        };
        Wall {
            start_unix_s: self.start_unix_s.min(o.start_unix_s),
            end_unix_s: self.end_unix_s.max(o.end_unix_s),
            traffic_start_unix_s: pick(self.traffic_start_unix_s, o.traffic_start_unix_s, f64::min),
            traffic_end_unix_s: pick(self.traffic_end_unix_s, o.traffic_end_unix_s, f64::max),
        }
    }

    /// The traffic's interval, when it had one.
    pub fn traffic(&self) -> Option<(f64, f64)> {
        self.traffic_start_unix_s.zip(self.traffic_end_unix_s)
    }
}

/// The wall clock now, Unix seconds.
pub fn unix_now_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl QueryOutcome {
    /// Adds another part's traffic (a process's, a host's): counters
    /// added (its histograms are the outcome's), the longest traffic's seconds, the control
    /// commands of both in order.
    pub fn merge(&mut self, o: &QueryOutcome) {
        self.totals.merge(&o.totals);
        self.statuses.merge(&o.statuses);
        self.in_flight += o.in_flight;
        self.seconds = self.seconds.max(o.seconds);
        self.target_queries += o.target_queries;
        self.controls.extend(o.controls.iter().cloned());
    }
}

impl Outcome {
    /// Adds another part of the same run (a process's, a host's): counters
    /// and histograms added; the parts hold their connections at the same
    /// time, so their peaks add; the ramp, verification and run take the
    /// longest part's time. The per-second series is left as it is: the
    /// caller aligns every part's seconds on the wall clock at once
    /// ([`Sample::merged`]).
    pub fn merge(&mut self, o: &Outcome) -> Result<()> {
        self.totals.merge(&o.totals);
        self.hists
            .merge(&o.hists)
            .map_err(|e| anyhow::anyhow!("adding histograms: {e:?}"))?;
        self.peak += o.peak;
        self.interrupted |= o.interrupted;
        self.verify_time = self.verify_time.max(o.verify_time);
        self.ramp_time = self.ramp_time.max(o.ramp_time);
        self.elapsed = self.elapsed.max(o.elapsed);
        // (A part that does not say when it ran leaves the whole unknown.)
        self.wall = self.wall.zip(o.wall).map(|(a, b)| a.hull(&b));
        self.overrun.extend(o.overrun.iter().cloned());
        let answered = |q: &Option<QueryOutcome>| q.as_ref().map_or(0, |q| q.totals.answered);
        let all = answered(&self.queries) + answered(&o.queries);
        self.observed.merge(&o.observed, all);
        if self.ramp_stopped.is_none() {
            self.ramp_stopped.clone_from(&o.ramp_stopped);
        }
        match (self.queries.as_mut(), &o.queries) {
            (Some(q), Some(oq)) => q.merge(oq),
            (None, Some(oq)) => self.queries = Some(oq.clone()),
            (_, None) => {}
        }
        if let Some(p) = &o.push {
            self.push.get_or_insert_with(PushTotals::default).merge(p);
        }
        Ok(())
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Runs the scenario to its end (or a signal) and returns what it measured.
/// `exported`: the figures a Prometheus endpoint shows (`--metrics`),
/// brought up to date once a second and as each worker's second comes in.
pub fn run(
    sc: Arc<Scenario>,
    stop: &Stop,
    live: &mut dyn Live,
    rtt_log: Option<File>,
    exported: Option<&Mutex<RunFigures>>,
) -> Result<Outcome> {
    let crew = start_workers(&sc, stop, rtt_log)?;
    Conductor::new(sc, stop, live, exported, crew).run()
}

/// Makes the workers, each on its thread, and starts them together once
/// every one is made.
fn start_workers(sc: &Arc<Scenario>, stop: &Stop, rtt_log: Option<File>) -> Result<Crew> {
    let shared = Arc::new(Shared::default());
    let mut counters = Vec::new();
    let mut qcounters = Vec::new();
    let mut wakers = Vec::new();
    let mut handles = Vec::new();
    let (rep_tx, rep_rx) = mpsc::channel();
    let rep_tx = ReportTx::new(rep_tx, sc.workers);
    let start = Instant::now();
    let epoch_unix_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let writer = rtt_log.map(rtt_writer);
    let hosts: Vec<String> = if sc.target_names.is_empty() {
        sc.targets.iter().map(ToString::to_string).collect()
    } else {
        sc.target_names.clone()
    };
    let tls = match &sc.tls {
        Some(o) => Some(Arc::new(worker::TlsClient {
            config: crate::tls::client_config(o)?,
            names: sc
                .targets
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    crate::tls::server_name(o, sc.target_names.get(i).map(String::as_str), *a)
                })
                .collect::<Result<_>>()?,
        })),
        None => None,
    };
    // Each worker is made on its own thread: what it allocates, and every
    // buffer and queue it grows later, then lives in that thread's malloc
    // arena. Made here, they stayed in the main thread's (a realloc keeps a
    // block's arena), and the churn of a long run fragmented it: the
    // client's memory crept for minutes (bench/soak.sh).
    let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
    let mut go = Vec::new();
    for id in 0..sc.workers {
        let poll = Poll::new()?;
        wakers.push(Waker::new(poll.registry(), worker::WAKER)?);
        let c = Arc::new(ConnCounters::default());
        counters.push(c.clone());
        let q = Arc::new(QueryCounters::default());
        qcounters.push(q.clone());
        let setup = worker::Setup {
            id,
            scenario: sc.clone(),
            poll,
            counters: c,
            queries: q,
            shared: shared.clone(),
            start,
            notify: stop.sender(),
            reports: rep_tx.clone(),
            rtt_log: writer.as_ref().map(|w| (w.tx.clone(), epoch_unix_us)),
            hosts: hosts.clone(),
            tls: tls.clone(),
            service_seconds: true,
        };
        let (go_tx, go_rx) = mpsc::channel::<Instant>();
        go.push(go_tx);
        let ready = ready_tx.clone();
        let preallocate = sc.preallocate;
        handles.push(
            thread::Builder::new()
                .name(format!("client-{id}"))
                .spawn(move || {
                    let made = worker::Worker::new(setup)
                        .map_err(anyhow::Error::new)
                        .and_then(|mut w| {
                            if preallocate {
                                w.preallocate().map_err(|errno| {
                                    anyhow::Error::new(std::io::Error::from_raw_os_error(errno))
                                        .context("--preallocate: creating and binding the sockets")
                                })?;
                            }
                            Ok(w)
                        });
                    let mut w = match made {
                        Ok(w) => {
                            let _ = ready.send(Ok(()));
                            w
                        }
                        Err(e) => {
                            let _ = ready.send(Err(e));
                            return Err(std::io::Error::other("not made"));
                        }
                    };
                    // (Not held while it waits: a worker that panicked
                    // while made leaves the main thread a closed channel.)
                    drop(ready);
                    // No start: another worker could not be made.
                    let start = go_rx
                        .recv()
                        .map_err(|_| std::io::Error::other("not started"))?;
                    w.set_start(start);
                    w.run()
                })?,
        );
    }
    // (The main thread gives the workers' reports back through it.)
    let back = rep_tx.clone();
    drop((rep_tx, ready_tx));
    for _ in 0..sc.workers {
        ready_rx
            .recv()
            .map_err(|_| anyhow::anyhow!("a client worker ended while it was made"))??;
    }
    // With --preallocate the sockets took time to make: the schedule starts now.
    let start = Instant::now();
    let start_unix_s = unix_now_f64();
    for g in go {
        let _ = g.send(start);
    }
    Ok(Crew {
        shared,
        counters,
        qcounters,
        wakers,
        handles,
        reports: rep_rx,
        back,
        writer,
        start,
        start_unix_s,
    })
}

#[cfg(test)]
mod tests {
    use crate::cluster::merge::tests::outcome;
    use std::time::Duration;

    #[test]
    fn outcomes_merge_counts_peaks_and_longest_times() {
        let mut a = outcome(1, 2.0);
        let b = outcome(2, 3.0);
        a.verify_time = None;
        a.merge(&b).unwrap();
        assert_eq!(a.totals.established, 27);
        assert_eq!(a.peak, 27);
        assert_eq!(a.hists.connect_time.len(), 4);
        assert_eq!(a.elapsed, Duration::from_secs(3));
        assert_eq!(a.ramp_time, Some(Duration::from_secs_f64(0.75)));
        // A part without the figure leaves the other's.
        assert_eq!(a.verify_time, Some(Duration::from_secs_f64(1.5)));
        let q = a.queries.as_ref().unwrap();
        assert_eq!((q.totals.sent, q.in_flight, q.seconds), (300, 3, 3.0));
        assert_eq!(q.target_queries, 300.0);
        assert_eq!(a.hists.response_time.len(), 4);
        assert_eq!(q.statuses.rcodes[0], 270);
        assert_eq!(q.controls.len(), 2);
    }

    #[test]
    fn a_part_without_traffic_adds_none_and_takes_the_others() {
        let mut quiet = outcome(1, 2.0);
        quiet.queries = None;
        let mut a = outcome(2, 3.0);
        a.merge(&quiet).unwrap();
        assert_eq!(a.queries.as_ref().unwrap().totals.sent, 200);
        quiet.merge(&outcome(2, 3.0)).unwrap();
        assert_eq!(quiet.queries.as_ref().unwrap().totals.sent, 200);
    }
}
