//! The client's data plane: one worker thread per core, each a mio loop over
//! its own connections and its share of the queries. This module starts
//! them ([`run`]); the main thread's conductor (`conductor`) then follows
//! the run's phases (ramp, traffic, drain, end), gathers each worker's
//! per-second report for the live view, and merges the workers'
//! histograms at the end. The main thread never touches a connection;
//! workers never wait on it.

mod buffer_pool;
mod conn;
mod connections;
mod deadlines;
mod dialer;
mod handshake;
mod inflight;
mod io;
mod outbox;
mod pacer;
mod pacing;
pub(crate) mod proto;
mod push;
mod recorder;
mod seconds;
mod traffic;
mod transport;
mod worker;
mod workload;

// The main thread's side: the conductor and what it holds and reads.
mod conductor;
mod control;
mod target_rate;
mod workers;
pub use conductor::Live;
pub use dialer::STEADY_AFTER;
pub use workers::{grace, GRACE};

use std::fs::File;
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use mio::{Poll, Waker};

use crate::metrics::exported::RunCounters;
use crate::metrics::{ConnCounters, QueryCounters, Shared};
use crate::outcome::Outcome;
use crate::scenario::Scenario;
use crate::sys::signals::Stop;
use conductor::Conductor;
use seconds::ReportTx;
use workers::{rtt_writer, Workers};

/// The wall clock now, Unix seconds.
pub fn unix_now_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Runs the scenario to its end (or a signal) and returns what it measured.
/// `exported`: the figures a Prometheus endpoint shows (`--metrics`),
/// brought up to date once a second and as each worker's second comes in.
pub fn run(
    sc: Arc<Scenario>,
    stop: &Stop,
    live: &mut dyn Live,
    rtt_log: Option<File>,
    exported: Option<&Mutex<RunCounters>>,
) -> Result<Outcome> {
    let workers = start_workers(&sc, stop, rtt_log)?;
    Conductor::new(sc, stop, live, exported, workers).run()
}

/// Makes the workers, each on its thread, and starts them together once
/// every one is made.
fn start_workers(sc: &Arc<Scenario>, stop: &Stop, rtt_log: Option<File>) -> Result<Workers> {
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
        Some(o) => Some(Arc::new(transport::TlsClient {
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
    // Each worker is made (and its sockets preallocated) on its own
    // thread, says whether it could be, and starts when every worker was:
    // one that could not be made starts none (its error is the run's).
    let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
    let (handed_tx, handed) = mpsc::channel::<(usize, worker::Finished)>();
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
            handed: handed_tx.clone(),
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
    Ok(Workers {
        shared,
        counters,
        qcounters,
        wakers,
        handles,
        handed,
        reports: rep_rx,
        back,
        writer,
        start,
        start_unix_s,
    })
}
