//! The workers as the main thread holds them: their counters, their wakers,
//! their threads and the RTT log's writer; how they are stopped and
//! collected by a deadline, and what of them is left behind past it. The
//! main thread reads counters and wakes workers here; it never touches a
//! connection.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use mio::Waker;

use super::seconds::{ReportTx, SecondReport};
use super::worker::Finished;
use crate::metrics::{ConnCounters, ConnTotals, Histograms, QueryCounters, QueryTotals, Shared};
use crate::metrics::{PushTotals, StatusCounts};

/// How long past `-T` and `--drain` a run may take to stop its workers
/// before it ends without them, naming what overran.
pub const GRACE: Duration = Duration::from_secs(5);

/// The least time the --rtt-log writer gets to write the lines the workers
/// left it, even when the workers took the whole grace.
const WRITER_GRACE: Duration = Duration::from_secs(1);

/// What a run of `connections` gets past `-T` and `--drain` to stop:
/// [`GRACE`], and a second more for each 100,000 connections its workers
/// close as they finish (they hand back what they measured first: past
/// the deadline only their closing is left behind).
pub fn grace(connections: u64) -> Duration {
    GRACE + Duration::from_secs(connections / 100_000)
}

/// The started workers, seen from the main thread.
pub(super) struct Workers {
    /// What the main thread tells every worker (ramp stop, traffic start,
    /// drain, stop, --control's levels) and the connections open now.
    pub shared: Arc<Shared>,
    pub counters: Vec<Arc<ConnCounters>>,
    pub qcounters: Vec<Arc<QueryCounters>>,
    pub wakers: Vec<mio::Waker>,
    pub handles: Vec<thread::JoinHandle<io::Result<Finished>>>,
    /// What each worker measured, handed back (with its id) before it
    /// closes its connections.
    pub handed: mpsc::Receiver<(usize, Finished)>,
    /// The workers' reports of their seconds.
    pub reports: mpsc::Receiver<SecondReport>,
    /// Where the main thread gives the reports back, emptied.
    pub back: ReportTx,
    pub writer: Option<RttWriter>,
    /// When the schedule starts (every worker is made).
    pub start: Instant,
    /// The same instant on the wall clock, Unix seconds.
    pub start_unix_s: f64,
}

/// What the workers handed back when they stopped, and what did not stop
/// by the deadline, in words.
pub(super) struct Collected {
    pub hists: Histograms,
    pub statuses: StatusCounts,
    pub in_flight: u64,
    pub overrun: Vec<String>,
}

impl Workers {
    /// The connection counters summed over workers.
    pub fn totals(&self) -> ConnTotals {
        ConnTotals::sum(self.counters.iter().map(|c| &**c))
    }

    /// The query counters summed over workers.
    pub fn qtotals(&self) -> QueryTotals {
        QueryTotals::sum(self.qcounters.iter().map(|c| &**c))
    }

    /// --proto push's counts summed over workers.
    pub fn push_totals(&self) -> PushTotals {
        PushTotals::sum(self.counters.iter().map(|c| &**c))
    }

    /// Connections open now.
    pub fn current(&self) -> i64 {
        self.shared.current.load(Relaxed)
    }

    /// Wakes every worker, to read what `shared` says; the first failure
    /// ends it.
    pub fn wake(&self) -> io::Result<()> {
        for w in &self.wakers {
            w.wake()?;
        }
        Ok(())
    }

    /// Wakes every worker, whatever fails.
    pub fn wake_all(&self) {
        wake_all(&self.wakers);
    }

    pub fn any_finished(&self) -> bool {
        self.handles.iter().any(|h| h.is_finished())
    }

    pub fn all_finished(&self) -> bool {
        self.handles.iter().all(|h| h.is_finished())
    }

    /// Tells the workers to stop, then collects what they and the RTT log's
    /// writer hand back by `deadline`: whatever has not stopped by then is
    /// named and left behind, and the run ends with what it has, whatever
    /// a peer or a file does. `drain` and `connections` are for the
    /// deadline's words.
    pub fn collect(
        &mut self,
        deadline: Instant,
        drain: f64,
        connections: u64,
    ) -> Result<Collected> {
        self.shared.stop.store(true, Relaxed);
        self.wake()?;
        let mut got = Collected {
            hists: Histograms::default(),
            statuses: StatusCounts::default(),
            in_flight: 0,
            overrun: Vec::new(),
        };
        finish_by(deadline, || self.all_finished());
        let mut handed: Vec<Option<Finished>> = (0..self.handles.len()).map(|_| None).collect();
        for (i, h) in std::mem::take(&mut self.handles).into_iter().enumerate() {
            // A worker still closing its connections has handed back what
            // it measured (the process's exit closes the rest); one that
            // ended returns nothing more, or its figures when it could
            // not hand them back.
            let returned = match h.is_finished() {
                true => Some(
                    h.join()
                        .map_err(|_| anyhow::anyhow!("a client worker panicked"))?
                        .context("client worker failed")?,
                ),
                // (Dropping the handle detaches the thread.)
                false => None,
            };
            take_handed(&self.handed, &mut handed);
            let Some(f) = handed[i].take().or(returned) else {
                got.overrun.push(format!(
                    "worker {} had not stopped by the deadline {}: its histograms and in-flight count are missing",
                    i + 1,
                    overrun_text(drain, connections)
                ));
                continue;
            };
            got.hists.merge(&f.hists)?;
            got.statuses.merge(&f.statuses);
            got.in_flight += f.in_flight;
        }
        if let Some(w) = self.writer.take() {
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
                got.overrun.push(format!(
                    "the --rtt-log writer was still writing at the deadline {}: its file or pipe did not take the lines, and the log is cut short",
                    overrun_text(drain, connections)
                ));
            }
        }
        Ok(got)
    }
}

/// The figures handed back so far, each in its worker's place.
fn take_handed(rx: &mpsc::Receiver<(usize, Finished)>, into: &mut [Option<Finished>]) {
    for (i, f) in rx.try_iter() {
        if let Some(slot) = into.get_mut(i) {
            *slot = Some(f);
        }
    }
}

/// Wakes each of `wakers`, whatever fails.
pub(super) fn wake_all(wakers: &[Waker]) {
    for w in wakers {
        let _ = w.wake();
    }
}

/// Where the RTT log goes: a writer thread fed with chunks of lines.
pub(super) struct RttWriter {
    pub tx: mpsc::Sender<Vec<u8>>,
    thread: thread::JoinHandle<io::Result<()>>,
}

pub(super) fn rtt_writer(file: File) -> RttWriter {
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

/// "(-T + --drain D + 5 s)": the deadline in words.
fn overrun_text(drain: f64, connections: u64) -> String {
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
