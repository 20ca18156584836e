//! The client's data plane: one worker thread per core, each a mio loop over
//! its own connections; this module starts them, follows the run's phases
//! (ramp, hold, end) from the main thread, samples counters once a second
//! for the live view, and merges the workers' histograms at the end.
//! The main thread never touches a connection; workers never wait on it.

mod connector;
mod worker;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use mio::{Poll, Waker};
use serde::{Deserialize, Serialize};

use crate::metrics::{new_histogram, ConnCounters, ConnTotals, Shared};
use crate::scenario::{End, Scenario};
use crate::sys::signals::{Reason, Stop};

/// One second of a run, as the live view shows it and the JSON keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
}

/// Receives the live view's updates.
pub trait Live {
    /// Once a second.
    fn second(&mut self, s: &Sample, target: u64);
    /// When the ramp is over (all initial attempts resolved).
    fn ramp_done(&mut self, after: Duration, totals: &ConnTotals, hold: &End);
    /// Before the summary.
    fn finish(&mut self);
}

/// Everything a run measured.
pub struct Outcome {
    pub totals: ConnTotals,
    pub connect_time: Histogram<u64>,
    pub peak: i64,
    pub per_second: Vec<Sample>,
    /// Stopped by a signal before its planned end.
    pub interrupted: bool,
    /// From the start to the last initial attempt resolved.
    pub ramp_time: Option<Duration>,
    pub elapsed: Duration,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Runs the scenario to its end (or a signal) and returns what it measured.
pub fn run(sc: Arc<Scenario>, stop: &Stop, live: &mut dyn Live) -> Result<Outcome> {
    let shared = Arc::new(Shared::default());
    let mut counters = Vec::new();
    let mut wakers = Vec::new();
    let mut workers = Vec::new();
    let mut handles = Vec::new();
    let start = Instant::now();
    for id in 0..sc.workers {
        let poll = Poll::new()?;
        wakers.push(Waker::new(poll.registry(), worker::WAKER)?);
        let c = Arc::new(ConnCounters::default());
        counters.push(c.clone());
        let mut w = worker::Worker::new(worker::Setup {
            id,
            scenario: sc.clone(),
            poll,
            counters: c,
            shared: shared.clone(),
            start,
            notify: stop.sender(),
        });
        if sc.preallocate {
            w.preallocate().map_err(|errno| {
                anyhow::Error::new(std::io::Error::from_raw_os_error(errno))
                    .context("--preallocate: creating and binding the sockets")
            })?;
        }
        workers.push(w);
    }
    // With --preallocate the sockets took time to make: the schedule starts now.
    let start = Instant::now();
    for (id, mut w) in workers.into_iter().enumerate() {
        w.set_start(start);
        handles.push(
            thread::Builder::new()
                .name(format!("client-{id}"))
                .spawn(move || w.run())?,
        );
    }

    let totals = |counters: &[Arc<ConnCounters>]| ConnTotals::sum(counters.iter().map(|c| &**c));
    let mut per_second = Vec::new();
    let mut tick = 1u64;
    let mut ramp_workers = 0;
    let mut ramp_time = None;
    let mut end_at: Option<Instant> = None;
    let mut enter_seen = false;
    let mut interrupted = false;
    let mut last_established = 0;
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
            Some(Reason::RampDone) => {
                ramp_workers += 1;
                if ramp_workers == sc.workers {
                    let now = Instant::now();
                    if let Some(total) = sc.schedule_seconds() {
                        // No ramp of fixed attempts: the schedule runs its course.
                        end_at = Some(start + Duration::from_secs_f64(total));
                        continue;
                    }
                    ramp_time = Some(now - start);
                    live.ramp_done(now - start, &totals(&counters), &sc.end);
                    end_at = match sc.end {
                        End::Duration { seconds } => Some(now + Duration::from_secs_f64(seconds)),
                        End::Pause if enter_seen => Some(now),
                        End::Pause | End::Hold => None,
                    };
                }
            }
            None => {}
        }
        let now = Instant::now();
        if now >= next_tick {
            let t = totals(&counters);
            let s = Sample {
                t: tick,
                unix_s: unix_now(),
                connections: shared.current.load(Relaxed),
                attempted: t.attempted,
                established: t.established,
                verified: t.verified,
                failed: t.failed_total(),
                established_per_s: t.established - last_established,
            };
            last_established = t.established;
            live.second(&s, sc.connections);
            per_second.push(s);
            tick += 1;
        }
        if end_at.is_some_and(|e| now >= e) || handles.iter().any(|h| h.is_finished()) {
            break;
        }
    }

    shared.stop.store(true, Relaxed);
    for w in &wakers {
        w.wake()?;
    }
    let mut connect_time = new_histogram();
    for h in handles {
        let finished = h
            .join()
            .map_err(|_| anyhow::anyhow!("a client worker panicked"))?
            .context("client worker failed")?;
        connect_time.add(&finished.connect_time)?;
    }
    live.finish();
    Ok(Outcome {
        totals: totals(&counters),
        connect_time,
        peak: shared.peak.load(Relaxed),
        per_second,
        interrupted,
        ramp_time,
        elapsed: start.elapsed(),
    })
}
