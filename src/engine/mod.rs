//! The client's data plane: one worker thread per core, each a mio loop over
//! its own connections and its share of the queries; this module starts
//! them, follows the run's phases (ramp, traffic, end) from the main
//! thread, gathers each worker's per-second report for the live view, and
//! merges the workers' histograms at the end. The main thread never touches
//! a connection; workers never wait on it.

mod conn;
mod connections;
mod connector;
mod deadlines;
mod dialer;
mod inflight;
mod io;
mod link;
mod mode;
mod net;
mod pacer;
mod pacing;
mod proto;
mod push;
mod recorder;
mod seconds;
mod spares;
mod traffic;
pub use push::delay_clock;
mod worker;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use mio::{Poll, Waker};
use serde::{Deserialize, Serialize};

use crate::metrics::exported::RunFigures;
use crate::metrics::{
    ConnCounters, ConnTotals, ConnectBuckets, Histograms, PushTotals, QueryCounters, QueryTotals,
    Shared, StatusCounts,
};
use crate::scenario::{End, Scenario};
use crate::sys::signals::{Reason, Stop};
use seconds::Seconds;

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

/// Where the RTT log goes: a writer thread fed with chunks of lines.
struct RttWriter {
    tx: mpsc::Sender<Vec<u8>>,
    thread: thread::JoinHandle<std::io::Result<()>>,
}

fn rtt_writer(file: File) -> RttWriter {
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let thread = thread::spawn(move || {
        let mut w = BufWriter::with_capacity(1 << 20, file);
        w.write_all(b"type,timestamp,connection_id,query_id,intended_us,sent_us,rtt_us,status\n")?;
        for chunk in rx {
            w.write_all(&chunk)?;
        }
        w.flush()
    });
    RttWriter { tx, thread }
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
        Some(o) => Some(Arc::new(net::TlsClient {
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

    let totals = |counters: &[Arc<ConnCounters>]| ConnTotals::sum(counters.iter().map(|c| &**c));
    let qtotals = |q: &[Arc<QueryCounters>]| QueryTotals::sum(q.iter().map(|c| &**c));
    let mut reports: BTreeMap<u64, SecondReport> = BTreeMap::new();
    let mut per_second = Seconds::new();
    let mut tick = 1u64;
    let mut ramp_workers = 0;
    let mut established_workers = 0;
    let mut established_at: Option<Duration> = None;
    let mut verify_time = None;
    let mut queries_done_workers = 0;
    let mut ramp_time = None;
    let mut traffic_start: Option<Instant> = None;
    let mut end_at: Option<Instant> = None;
    let mut enter_seen = false;
    let mut interrupted = false;
    let mut last_established = 0;
    let mut last_connects = ConnectBuckets::read(&counters);
    let mut last_push = PushTotals::default();
    let mut last_jitter = crate::metrics::push_buckets(&counters, false);
    let mut last_delay = crate::metrics::push_buckets(&counters, true);
    let mut last_q = QueryTotals::default();
    let mut controls = Vec::new();
    // Rates set on --control: (seconds into the traffic, rate).
    let mut rate_changes: Vec<(f64, f64)> = Vec::new();
    // Seconds of traffic whose target is in `exported` already.
    let mut targeted_s = 0.0;
    // --stop-on: verification's last growth, and whether it stopped the ramp.
    let mut verified_growth = (0u64, start);
    let mut ramp_stopped = None;
    loop {
        let next_tick = start + Duration::from_secs(tick);
        let wake = end_at.map_or(next_tick, |e| e.min(next_tick));
        match stop.wait_reason(Some(wake)) {
            Some(Reason::Signal) => {
                // --hold ends with a signal by design.
                interrupted = sc.end != End::Hold || ramp_time.is_none();
                break;
            }
            Some(Reason::Enter) => {
                enter_seen = true;
                if ramp_time.is_some() && sc.end == End::Pause {
                    break;
                }
            }
            Some(Reason::Control(line)) => {
                let t = start.elapsed().as_secs_f64();
                let applied = control(&line, &shared, &wakers);
                if applied && line.starts_with("rate") {
                    if let Some(ts) = traffic_start {
                        let rate = f64::from_bits(shared.rate_override.load(Relaxed));
                        rate_changes.push((ts.elapsed().as_secs_f64(), rate));
                    }
                }
                live.note(&format!(
                    "{t:>7.2}s  control: {line}{}",
                    if applied {
                        ""
                    } else {
                        " (not understood: rate R (0 pauses) | connections N | stop)"
                    }
                ));
                controls.push(ControlEvent {
                    t,
                    command: line.clone(),
                    applied,
                });
                if applied && line.trim() == "stop" {
                    break;
                }
            }
            Some(
                Reason::ChildLine(..)
                | Reason::ChildExit(_)
                | Reason::Grow
                | Reason::Full
                | Reason::Room,
            ) => {}
            Some(Reason::RampEstablished) => {
                established_workers += 1;
                if established_workers == sc.workers {
                    established_at = Some(start.elapsed());
                }
            }
            Some(Reason::QueriesDone) => {
                queries_done_workers += 1;
                if queries_done_workers == sc.workers {
                    // Every share of --queries is done: nothing is left to
                    // measure, and waiting would only lengthen the run's time.
                    break;
                }
            }
            Some(Reason::RampDone) => {
                ramp_workers += 1;
                if ramp_workers == sc.workers {
                    let now = Instant::now();
                    if let Some(total) = sc.schedule_seconds() {
                        // No ramp of fixed attempts: the schedule runs its course.
                        end_at = Some(start + Duration::from_secs_f64(total));
                        start_traffic(&sc, &shared, &wakers, start, now, &mut traffic_start);
                        continue;
                    }
                    // The ramp's figure is establishment's; verification
                    // (probes answered or timed out) has its own.
                    let ramp = established_at.unwrap_or(now - start);
                    ramp_time = Some(ramp);
                    verify_time = sc.verify.then_some(now - start);
                    let t = totals(&counters);
                    live.ramp_done(ramp, now - start, &t, &sc.end);
                    let per_query = sc.transport == crate::domain::Transport::TcpPerQuery;
                    if !per_query
                        && !sc.reconnect
                        && shared.current.load(Relaxed) == 0
                        && t.failed_total() > 0
                    {
                        // Nothing to hold and nothing will be: say so now
                        // rather than wait out the duration.
                        live.note("every connection failed: the run ends here");
                        break;
                    }
                    start_traffic(&sc, &shared, &wakers, start, now, &mut traffic_start);
                    end_at = match sc.end {
                        End::Duration { seconds } => Some(now + Duration::from_secs_f64(seconds)),
                        End::Pause if enter_seen => Some(now),
                        End::Pause | End::Hold => None,
                    };
                }
            }
            None => {}
        }
        while let Ok(r) = rep_rx.try_recv() {
            merge_report(&mut reports, r, exported, &back);
        }
        let now = Instant::now();
        if now >= next_tick {
            let t = totals(&counters);
            let q = qtotals(&qcounters);
            let mut s = Sample {
                t: tick,
                unix_s: unix_now(),
                connections: shared.current.load(Relaxed),
                attempted: t.attempted,
                established: t.established,
                verified: t.verified,
                failed: t.failed_total(),
                established_per_s: t.established - last_established,
                ..Sample::default()
            };
            let connects = ConnectBuckets::read(&counters);
            s.connect_p99_us = connects.p99_since(&last_connects);
            last_connects = connects;
            if sc.push.is_some() {
                let p = PushTotals::sum(counters.iter().map(|c| &**c));
                let jitter = crate::metrics::push_buckets(&counters, false);
                let delay = crate::metrics::push_buckets(&counters, true);
                s.push_delay_p99_us = delay.p99_since(&last_delay);
                last_delay = delay;
                s.push_received = Some(p.received - last_push.received);
                s.push_lost = Some(p.lost.saturating_sub(last_push.lost));
                s.push_jitter_p99_us = jitter.p99_since(&last_jitter);
                (last_push, last_jitter) = (p, jitter);
            }
            if sc.traffic.is_some() && traffic_start.is_some() {
                // The workers send the second just ended as they notice it,
                // a moment after this tick: wait for them (briefly), so that
                // every second with answers shows its latency.
                let wait_until = Instant::now() + Duration::from_millis(100);
                while reports.get(&(tick - 1)).map_or(0, |r| r.workers) < handles.len() {
                    match rep_rx.recv_timeout(wait_until.saturating_duration_since(Instant::now()))
                    {
                        Ok(r) => merge_report(&mut reports, r, exported, &back),
                        Err(_) => break,
                    }
                }
                // Live figures: counters now; latency of the last second
                // every worker has reported.
                s.due = Some(q.due.saturating_sub(last_q.due));
                s.sent = Some(q.sent - last_q.sent);
                s.answered = Some(q.answered - last_q.answered);
                s.timed_out = Some(q.timed_out - last_q.timed_out);
                s.errors = Some(q.errors_total() - last_q.errors_total());
                if let Some(r) = reports.get(&(tick - 1)) {
                    // (A child's seconds go to its parent's live view,
                    // histogram and all; here the result's are made at the
                    // end.)
                    s.set_times(r, stop.is_child());
                }
                s.target = target_at(&sc, start, traffic_start, tick, &rate_changes);
            }
            if let Some(e) = exported {
                let upto = traffic_start.map_or(0.0, |ts| ts.elapsed().as_secs_f64());
                let mut f = e.lock().unwrap_or_else(|p| p.into_inner());
                f.set_counters(&t, &q, s.connections);
                if let Some(traffic) = &sc.traffic {
                    f.target_queries +=
                        target_between(traffic, sc.connections, &rate_changes, targeted_s, upto);
                    targeted_s = upto;
                }
            }
            // (Only while attempts of the ramp are left to drop.)
            let ramp_left = sc.connections_schedule.is_none() && t.attempted < sc.connections;
            if ramp_time.is_none() && ramp_stopped.is_none() && !sc.stop_on.is_empty() && ramp_left
            {
                if t.verified > verified_growth.0 {
                    verified_growth = (t.verified, now);
                }
                if let Some(why) = stop_on_holds(&sc.stop_on, &t, now - verified_growth.1) {
                    shared.ramp_stop.store(true, Relaxed);
                    for w in &wakers {
                        w.wake()?;
                    }
                    let words = format!(
                        "at {:.1} s after {} attempts: {why}",
                        (now - start).as_secs_f64(),
                        t.attempted
                    );
                    live.note(&format!("ramp stopped {words}"));
                    ramp_stopped = Some(words);
                }
            }
            last_established = t.established;
            last_q = q;
            live.second(&s, sc.connections);
            per_second.push(s, sc.traffic.is_none());
            // Seconds every worker has reported take their exact figures
            // now, and their histograms go: kept to the end, they grew the
            // client by a histogram (~30 kB) a second.
            per_second.settle(&mut reports, handles.len(), tick, |r| back.give_back(r));
            crate::sys::release_free_memory();
            tick += 1;
        }
        if end_at.is_some_and(|e| now >= e) || handles.iter().any(|h| h.is_finished()) {
            break;
        }
    }

    // The traffic is over (or a first Ctrl-C came): stop sending, and wait
    // up to --drain for the queries in flight, so that each ends answered,
    // timed out or errored. A second Ctrl-C ends the process at once.
    let end = Instant::now();
    let drain = sc.traffic.as_ref().map_or(0.0, |t| t.drain_s);
    if traffic_start.is_some() && drain > 0.0 {
        shared.drain.store(true, Relaxed);
        for w in &wakers {
            w.wake()?;
        }
        live.note(&format!(
            "traffic over: waiting up to {} for the queries in flight (--drain)",
            crate::units::human_us((drain * 1e6) as u64)
        ));
        // The workers end by themselves; this bound only guards against one
        // that does not.
        let limit = end + Duration::from_secs_f64(drain) + Duration::from_secs(2);
        while !handles.iter().all(|h| h.is_finished()) && Instant::now() < limit {
            let wait = (Instant::now() + Duration::from_millis(20)).min(limit);
            if let Some(Reason::Signal) = stop.wait_reason(Some(wait)) {
                interrupted = true;
                // A child of --processes gets a Ctrl-C twice (the
                // terminal's and its parent's): it drains on; its parent
                // ends it if need be.
                if !stop.is_child() {
                    break;
                }
            }
        }
    }
    shared.stop.store(true, Relaxed);
    for w in &wakers {
        w.wake()?;
    }
    // Past this, whatever has not stopped is named and left behind: the
    // run ends with what it has, whatever a peer or a file does.
    let deadline = end + Duration::from_secs_f64(drain) + grace(sc.connections);
    let mut overrun = Vec::new();
    let mut hists = crate::metrics::Histograms::default();
    let mut statuses = StatusCounts::default();
    let mut in_flight = 0;
    finish_by(deadline, || handles.iter().all(|h| h.is_finished()));
    for (i, h) in handles.into_iter().enumerate() {
        if !h.is_finished() {
            // Dropping the handle detaches the thread; the process's exit
            // ends it.
            overrun.push(format!(
                "worker {} had not stopped by the deadline {}: its histograms and in-flight count are missing",
                i + 1,
                overrun_words(drain, sc.connections)
            ));
            continue;
        }
        let f = h
            .join()
            .map_err(|_| anyhow::anyhow!("a client worker panicked"))?
            .context("client worker failed")?;
        hists.merge(&f.hists)?;
        statuses.merge(&f.statuses);
        in_flight += f.in_flight;
    }
    if let Some(w) = writer {
        drop(w.tx);
        finish_by(deadline.max(Instant::now() + WRITER_GRACE), || {
            w.thread.is_finished()
        });
        if w.thread.is_finished() {
            w.thread
                .join()
                .map_err(|_| anyhow::anyhow!("the RTT log writer panicked"))?
                .context("writing --rtt-log")?;
        } else {
            overrun.push(format!(
                "the --rtt-log writer was still writing at the deadline {}: its file or pipe did not take the lines, and the log is cut short",
                overrun_words(drain, sc.connections)
            ));
        }
    }
    while let Ok(r) = rep_rx.try_recv() {
        merge_report(&mut reports, r, exported, &back);
    }
    if let Some(e) = exported {
        let upto = traffic_start.map_or(0.0, |ts| end.saturating_duration_since(ts).as_secs_f64());
        let mut f = e.lock().unwrap_or_else(|p| p.into_inner());
        f.set_counters(
            &totals(&counters),
            &qtotals(&qcounters),
            shared.current.load(Relaxed),
        );
        if let Some(traffic) = &sc.traffic {
            f.target_queries +=
                target_between(traffic, sc.connections, &rate_changes, targeted_s, upto);
        }
    }
    // The exact per-second figures of the rest, now that every report is
    // in.
    let per_second = per_second.finish(&mut reports);
    live.finish();
    let queries = sc.traffic.as_ref().zip(traffic_start).map(|(t, ts)| {
        let seconds = end.saturating_duration_since(ts).as_secs_f64();
        QueryOutcome {
            totals: qtotals(&qcounters),
            statuses,
            in_flight,
            seconds,
            target_queries: target_queries(t, sc.connections, seconds, &rate_changes),
            controls,
        }
    });
    let elapsed = start.elapsed();
    let at = |i: Instant| start_unix_s + i.saturating_duration_since(start).as_secs_f64();
    let wall = Wall {
        start_unix_s,
        end_unix_s: start_unix_s + elapsed.as_secs_f64(),
        traffic_start_unix_s: traffic_start.filter(|_| sc.traffic.is_some()).map(at),
        traffic_end_unix_s: traffic_start
            .filter(|_| sc.traffic.is_some())
            .map(|_| at(end)),
    };
    Ok(Outcome {
        totals: totals(&counters),
        hists,
        peak: shared.peak.load(Relaxed),
        per_second,
        interrupted,
        ramp_time,
        verify_time,
        elapsed,
        wall: Some(wall),
        queries,
        overrun,
        push: sc
            .push
            .is_some()
            .then(|| PushTotals::sum(counters.iter().map(|c| &**c))),
        observed: Default::default(),
        ramp_stopped,
    })
}

/// The first --stop-on condition that holds, in words: `stalled`, how
/// long since verification last grew.
fn stop_on_holds(
    conds: &[crate::scenario::StopOn],
    t: &ConnTotals,
    stalled: Duration,
) -> Option<String> {
    use crate::scenario::StopOn;
    conds.iter().find_map(|c| match *c {
        StopOn::VerifyStall { seconds } if stalled.as_secs_f64() >= seconds => Some(format!(
            "no connection verified for {:.0} s ({} verified; --stop-on {})",
            stalled.as_secs_f64(),
            t.verified,
            c.words()
        )),
        StopOn::Failed { pct }
            if t.attempted >= 100
                && t.failed_total() as f64 * 100.0 >= pct * t.attempted as f64 =>
        {
            Some(format!(
                "{} of {} attempts failed (--stop-on {})",
                t.failed_total(),
                t.attempted,
                c.words()
            ))
        }
        _ => None,
    })
}

/// How long past `-T` and `--drain` a run may take to stop its workers
/// before it ends without them, naming what overran.
pub const GRACE: Duration = Duration::from_secs(5);

/// The least time the --rtt-log writer gets to write the lines the workers
/// left it, even when the workers took the whole grace.
const WRITER_GRACE: Duration = Duration::from_secs(1);

/// What a run of `connections` gets past `-T` and `--drain` to stop:
/// [`GRACE`], and a second more for each 100,000 connections its workers
/// close as they finish.
pub fn grace(connections: u64) -> Duration {
    GRACE + Duration::from_secs(connections / 100_000)
}

/// "(-T + --drain D + 5 s)": the deadline in words.
fn overrun_words(drain: f64, connections: u64) -> String {
    format!(
        "(-T + --drain {} + {} s)",
        crate::units::human_us((drain * 1e6) as u64),
        grace(connections).as_secs()
    )
}

/// Waits until `done()` or `deadline`, whichever is first. (A thread's end
/// has no readiness signal to wait on; 5 ms is far below the deadline's
/// grain.)
fn finish_by(deadline: Instant, mut done: impl FnMut() -> bool) {
    while !done() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
}

/// Takes in one worker's report of a second; each is counted once in
/// `exported`'s latencies as it arrives.
fn merge_report(
    reports: &mut BTreeMap<u64, SecondReport>,
    r: SecondReport,
    exported: Option<&Mutex<RunFigures>>,
    back: &ReportTx,
) {
    if let Some(e) = exported {
        e.lock()
            .unwrap_or_else(|p| p.into_inner())
            .add_second(&r.hist, r.service.as_ref());
    }
    match reports.get_mut(&r.idx) {
        Some(agg) => {
            agg.add(&r);
            back.give_back(r);
        }
        None => {
            reports.insert(r.idx, r);
        }
    }
}

/// Lets the workers start their traffic from `now`.
fn start_traffic(
    sc: &Scenario,
    shared: &Shared,
    wakers: &[Waker],
    start: Instant,
    now: Instant,
    traffic_start: &mut Option<Instant>,
) {
    if sc.traffic.is_none() || traffic_start.is_some() {
        return;
    }
    *traffic_start = Some(now);
    let ns = now.duration_since(start).as_nanos() as u64;
    shared.traffic_at.store(ns + 1, Relaxed);
    for w in wakers {
        let _ = w.wake();
    }
}

/// The rate asked for `t` seconds into the traffic: the last rate set on
/// --control by then, or the schedule's.
fn rate_at(t: &crate::scenario::Traffic, connections: u64, changes: &[(f64, f64)], at: f64) -> f64 {
    changes
        .iter()
        .rev()
        .find(|(when, _)| *when <= at)
        .map_or_else(|| t.rate_at(at, connections), |(_, r)| *r)
}

/// The rate asked for during second `tick` (which ends `tick` s after start).
fn target_at(
    sc: &Scenario,
    start: Instant,
    ts: Option<Instant>,
    tick: u64,
    changes: &[(f64, f64)],
) -> Option<f64> {
    let t = sc.traffic.as_ref()?;
    let ts = ts?;
    let mid = (start + Duration::from_millis(tick * 1000 - 500)).checked_duration_since(ts)?;
    match t.model {
        crate::scenario::Model::ClosedLoop { .. } => None,
        _ => Some(rate_at(t, sc.connections, changes, mid.as_secs_f64())),
    }
}

/// Queries asked for in the first `seconds` of traffic (open loop and
/// intervals; closed loop has no target).
fn target_queries(
    t: &crate::scenario::Traffic,
    connections: u64,
    seconds: f64,
    changes: &[(f64, f64)],
) -> f64 {
    target_between(t, connections, changes, 0.0, seconds)
}

/// Queries asked for from `from` to `to` seconds into the traffic, summed
/// in steps of 10 ms at most.
fn target_between(
    t: &crate::scenario::Traffic,
    connections: u64,
    changes: &[(f64, f64)],
    from: f64,
    to: f64,
) -> f64 {
    let span = to - from;
    if span <= 0.0 {
        return 0.0;
    }
    let steps = (span * 100.0).ceil().max(1.0) as u64;
    let dt = span / steps as f64;
    (0..steps)
        .map(|i| rate_at(t, connections, changes, from + (i as f64 + 0.5) * dt) * dt)
        .sum()
}

/// Applies one --control line; false when it is not understood.
fn control(line: &str, shared: &Shared, wakers: &[Waker]) -> bool {
    let mut words = line.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("stop"), None, None) => true,
        (Some("connections"), Some(n), None) => match crate::units::parse_count(n) {
            Ok(n) => {
                shared.conn_level.store(n + 1, Relaxed);
                for w in wakers {
                    let _ = w.wake();
                }
                true
            }
            Err(_) => false,
        },
        // (`rate 0` pauses the queries: a drain between steps.)
        (Some("rate"), Some(r), None) => match r
            .parse::<f64>()
            .ok()
            .filter(|&x| x == 0.0)
            .map_or_else(|| crate::units::parse_rate(r), Ok)
        {
            Ok(rate) => {
                shared.rate_override.store(rate.to_bits(), Relaxed);
                shared.rate_gen.fetch_add(1, Relaxed);
                for w in wakers {
                    let _ = w.wake();
                }
                true
            }
            Err(_) => false,
        },
        _ => false,
    }
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
