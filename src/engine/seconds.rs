//! The run's per-second figures: each worker's report of a second
//! ([`SecondReport`], sent through [`ReportTx`]) and the samples the main
//! thread makes of them. A sample stays in memory until every
//! worker has reported its second (then it takes their exact figures) or
//! it is [`WAIT`] seconds old, and is then written to an unnamed temporary
//! file: a long run's client does not grow by a sample and its histogram
//! (~2 kB) a second. They are read back at the end for the result. Where
//! no temporary file can be made or written they stay in memory: a full
//! disk costs memory, never a result.

use std::collections::{BTreeMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Seek, Write};
use std::sync::{mpsc, Arc, Mutex};

use hdrhistogram::Histogram;

use crate::metrics::Grow;
use crate::metrics::{clear_if_used, growing};
use crate::outcome::Sample;

/// What one worker measured in one second (since the run's start).
pub struct SecondReport {
    pub idx: u64,
    pub sent: u64,
    pub answered: u64,
    pub timed_out: u64,
    pub errors: u64,
    /// Answers that said failure (not successes of the protocol, nor of
    /// --ok-rcodes, --ok-status).
    pub failed_answers: u64,
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
        let hist = || growing(2);
        SecondReport {
            idx,
            sent: 0,
            answered: 0,
            timed_out: 0,
            errors: 0,
            failed_answers: 0,
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
        s.failed_answers = Some(self.failed_answers);
        s.set_latency(&self.hist, keep);
        if let Some(h) = &self.service {
            s.set_service(h, keep);
        }
    }

    pub(super) fn add(&mut self, o: &SecondReport) {
        self.sent += o.sent;
        self.answered += o.answered;
        self.timed_out += o.timed_out;
        self.errors += o.errors;
        self.failed_answers += o.failed_answers;
        self.loop_late += o.loop_late;
        self.workers += o.workers;
        let _ = self.hist.take_in(&o.hist);
        if let (Some(a), Some(b)) = (self.service.as_mut(), &o.service) {
            let _ = a.take_in(b);
        }
    }
}

/// Where a worker sends its seconds' reports, and the reports the main
/// thread is done with, emptied, for the workers' next seconds. A report's
/// histograms (~27 kB each), made anew by every worker every second and
/// freed by the main thread, would come and go from the worker's malloc
/// arena, its pages with them: the client's memory would move by ~0.1 MB
/// from one second to the next (bench/soak.sh).
#[derive(Clone)]
pub struct ReportTx {
    tx: mpsc::Sender<SecondReport>,
    pub(super) spare: Arc<Mutex<Vec<SecondReport>>>,
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
            (r.loop_late, r.failed_answers) = (0, 0);
            clear_if_used(&mut r.hist);
            if let Some(h) = r.service.as_mut() {
                clear_if_used(h);
            }
            spare.push(r);
        }
    }
}

/// Seconds a sample waits for the workers' reports of its second before it
/// is written as it is (a worker's report comes a moment after its second
/// ends; one stalled longer than this loses its part of that second's
/// figures, not of the run's totals).
const WAIT: u64 = 10;

pub struct Seconds {
    /// Not written yet, in time order; true once final.
    recent: VecDeque<(Sample, bool)>,
    /// Samples written, one JSON line each.
    file: Option<File>,
    /// Samples in `file`.
    written: usize,
    /// Writing to `file` failed: samples are kept from then on.
    failed: bool,
    /// Samples kept in memory instead (no temporary file).
    kept: Vec<Sample>,
    /// The line being written, kept from one to the next.
    line: Vec<u8>,
    /// The seconds whose reports go, kept from one call to the next.
    gone: Vec<u64>,
}

impl Seconds {
    pub fn new() -> Seconds {
        Seconds::with_file(unnamed_file().ok())
    }

    fn with_file(file: Option<File>) -> Seconds {
        Seconds {
            recent: VecDeque::new(),
            file,
            written: 0,
            failed: false,
            kept: Vec::new(),
            line: Vec::new(),
            gone: Vec::new(),
        }
    }

    /// The sample of the second that just ended; `done`: no report will
    /// come for it (a run without traffic).
    pub fn push(&mut self, s: Sample, done: bool) {
        self.recent.push_back((s, done));
    }

    /// Gives the seconds whose report has `workers` parts their exact
    /// figures and lets those reports go (to `done_with`); writes out the
    /// samples that are final or have waited long enough. `now`: the
    /// latest second.
    pub fn settle(
        &mut self,
        reports: &mut BTreeMap<u64, SecondReport>,
        workers: usize,
        now: u64,
        mut done_with: impl FnMut(SecondReport),
    ) {
        let (recent, gone) = (&mut self.recent, &mut self.gone);
        gone.clear();
        for (&idx, r) in reports.iter() {
            let pending = s_is_pending(recent, idx);
            let Some((s, done)) = recent.iter_mut().find(|(s, _)| s.t == idx + 1) else {
                // Its second's sample is not made yet (kept), or already
                // written (let go: too late).
                if !pending {
                    gone.push(idx);
                }
                continue;
            };
            if r.workers < workers {
                continue;
            }
            s.sent = Some(r.sent);
            s.answered = Some(r.answered);
            s.timed_out = Some(r.timed_out);
            s.errors = Some(r.errors);
            r.times_to(s, true);
            *done = true;
            gone.push(idx);
        }
        for idx in gone.drain(..) {
            if let Some(r) = reports.remove(&idx) {
                done_with(r);
            }
        }
        while let Some((s, done)) = self.recent.front() {
            if !*done && s.t + WAIT > now {
                break;
            }
            let (s, _) = self.recent.pop_front().expect("not empty");
            self.write(s);
        }
    }

    fn write(&mut self, s: Sample) {
        if let Some(f) = self.file.as_mut().filter(|_| !self.failed) {
            self.line.clear();
            serde_json::to_writer(&mut self.line, &s).expect("a sample serializes");
            self.line.push(b'\n');
            match f.write_all(&self.line) {
                Ok(()) => {
                    self.written += 1;
                    return;
                }
                Err(e) => {
                    errln!(
                        "throng: writing the per-second samples to a temporary file failed \
                         ({e}); keeping them in memory"
                    );
                    self.failed = true;
                }
            }
        }
        self.kept.push(s);
    }

    /// Every sample, in time order: those written read back, then the rest
    /// with what `reports` still holds for them. Samples that cannot be
    /// read back are missing from the result, said on stderr; the rest of
    /// the result stands.
    pub fn finish(mut self, reports: &mut BTreeMap<u64, SecondReport>) -> Vec<Sample> {
        self.settle(reports, 0, 0, drop);
        let mut all = Vec::new();
        if let Some(f) = self.file.take() {
            if let Err(e) = read_back(f, &mut all) {
                errln!(
                    "throng: reading the per-second samples back failed ({e}): the first {} \
                     seconds are missing from per_second",
                    self.written
                );
                all.clear();
            }
        }
        all.append(&mut self.kept);
        all.extend(self.recent.into_iter().map(|(s, _)| s));
        all
    }
}

fn read_back(mut f: File, into: &mut Vec<Sample>) -> io::Result<()> {
    f.rewind()?;
    for line in BufReader::new(f).lines() {
        into.push(serde_json::from_str(&line?)?);
    }
    Ok(())
}

/// A report for a second whose sample is still to come (kept), as opposed
/// to one already written (let go: too late to change it).
fn s_is_pending(recent: &VecDeque<(Sample, bool)>, idx: u64) -> bool {
    recent.back().is_none_or(|(s, _)| s.t <= idx)
}

/// A file in the temporary directory, removed from it at once: it lives as
/// long as the handle.
fn unnamed_file() -> io::Result<File> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let path = std::env::temp_dir().join(format!("throng-seconds-{}-{nanos}", std::process::id()));
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: u64) -> Sample {
        Sample {
            t,
            connections: t as i64,
            ..Sample::default()
        }
    }

    fn report(idx: u64, answered: u64, workers: usize) -> SecondReport {
        let mut r = SecondReport::new(idx, false);
        r.answered = answered;
        r.sent = answered;
        r.hist.record(100 * answered).unwrap();
        r.workers = workers;
        r
    }

    /// The same samples come back, with their reports' figures, whether
    /// they were written out or kept.
    fn round_trip(file: Option<File>) {
        let mut sec = Seconds::with_file(file);
        let mut reports = BTreeMap::new();
        for t in 1..=30 {
            sec.push(sample(t), false);
            // Sample t's report (its second is t - 1), whole (2 workers),
            // except sample 6's: one part only, never completed.
            let workers = if t == 6 { 1 } else { 2 };
            reports.insert(t - 1, report(t - 1, t, workers));
            sec.settle(&mut reports, 2, t, drop);
            // Only what waits for its reports stays in memory.
            assert!(sec.recent.len() <= WAIT as usize, "{}", sec.recent.len());
        }
        // Sample 6's incomplete report was let go once the sample was
        // written as it was, after WAIT seconds.
        assert!(reports.is_empty(), "{:?}", reports.keys());
        let all = sec.finish(&mut reports);
        let ts: Vec<u64> = all.iter().map(|s| s.t).collect();
        assert_eq!(ts, (1..=30).collect::<Vec<_>>());
        for s in &all {
            let full = s.t != 6;
            assert_eq!(s.answered, full.then_some(s.t), "second {}", s.t);
            assert_eq!(s.hdr.is_some(), full, "second {}", s.t);
            assert_eq!(s.connections, s.t as i64);
        }
    }

    #[test]
    fn samples_written_out_come_back_whole() {
        let f = unnamed_file().expect("a temporary file");
        round_trip(Some(f));
    }

    #[test]
    fn without_a_file_samples_stay_in_memory() {
        round_trip(None);
    }

    #[test]
    fn a_run_without_traffic_writes_each_second_at_once() {
        let mut sec = Seconds::with_file(unnamed_file().ok());
        let mut none = BTreeMap::new();
        for t in 1..=5 {
            sec.push(sample(t), true);
            sec.settle(&mut none, 2, t, drop);
            assert!(sec.recent.is_empty());
        }
        assert_eq!(sec.finish(&mut none).len(), 5);
    }
}
