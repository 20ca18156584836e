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

use crate::metrics::exported::RunFigures;
use crate::metrics::{ConnCounters, ConnTotals, QueryCounters, Shared};
use crate::outcome::{ControlEvent, Outcome, QueryOutcome, Sample, Wall};
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

    /// Its histograms into the second's sample: their percentiles, and
    /// the histograms themselves when `keep` (as [`Sample::set_latency`]).
    pub fn times_to(&self, s: &mut Sample, keep: bool) {
        s.loop_late = Some(self.loop_late);
        s.set_latency(&self.hist, keep);
        if let Some(h) = &self.service {
            s.set_service(h, keep);
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

/// The wall clock now, Unix seconds.
pub fn unix_now_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
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
