//! What a worker measures of its queries: the counters the main thread
//! reads live, the run's histograms (response, service, send lag, loop
//! lag), the answers by status, one report per second, and the RTT log.
//! Each query event that has a time or a second is recorded here once
//! (counts of connection events, such as queries lost with a connection,
//! are the worker's).

use std::io::Write;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc};

use hdrhistogram::Histogram;

use super::inflight::Outstanding;
use super::proto::Status;
use super::seconds::{ReportTx, SecondReport};
use crate::metrics::Grow;
use crate::metrics::{
    bump, clear_if_used, growing, new_histogram, redis_slot, QueryCounters, StatusCounts,
};

/// A query sent later than this after its intended time counts as late.
const LATE_NS: u64 = 1_000_000;
/// The RTT log is handed to its writer in chunks of this size.
const LOG_CHUNK: usize = 64 * 1024;

/// Microseconds, at least 1 (the histograms' lowest value).
#[inline]
pub fn us(ns: u64) -> u64 {
    (ns / 1000).max(1)
}

/// Where a worker's RTT log lines go.
pub struct RttLog {
    tx: mpsc::Sender<Vec<u8>>,
    buf: Vec<u8>,
    /// Unix time of the run's start, in µs.
    epoch_unix_us: u64,
    proto: &'static str,
}

impl RttLog {
    pub fn new(tx: mpsc::Sender<Vec<u8>>, epoch_unix_us: u64, proto: &'static str) -> RttLog {
        RttLog {
            tx,
            buf: Vec::with_capacity(LOG_CHUNK + 256),
            epoch_unix_us,
            proto,
        }
    }

    /// Appends one line: type,timestamp,connection_id,query_id,
    /// intended_us,sent_us,rtt_us,status (times since the traffic start
    /// `started`; timestamp is the Unix time of the send in µs; rtt from
    /// the send). Written in place: no allocation per line.
    fn line(&mut self, started: u64, conn: u64, o: &Outstanding, done: Option<u64>, status: Label) {
        let b = &mut self.buf;
        let _ = write!(
            b,
            "{},{},{},{},{},{},",
            self.proto,
            self.epoch_unix_us + o.sent / 1000,
            conn,
            o.key,
            o.intended.saturating_sub(started) / 1000,
            o.sent.saturating_sub(started) / 1000,
        );
        if let Some(d) = done {
            let _ = write!(b, "{}", d.saturating_sub(o.sent) / 1000);
        }
        let _ = match status {
            Label::Word(w) => writeln!(b, ",{w}"),
            Label::Code(c) => writeln!(b, ",{c}"),
        };
        if self.buf.len() >= LOG_CHUNK {
            let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(LOG_CHUNK + 256));
            let _ = self.tx.send(chunk);
        }
    }

    fn flush(&mut self) {
        let _ = self.tx.send(std::mem::take(&mut self.buf));
    }
}

/// A query's status in the RTT log.
#[derive(Clone, Copy)]
enum Label {
    Word(&'static str),
    Code(u16),
}

/// A worker's query measurements when it stops.
pub struct Measured {
    pub response_time: Histogram<u64>,
    pub service_time: Histogram<u64>,
    pub send_lag: Histogram<u64>,
    pub loop_lag: Histogram<u64>,
    pub late_time: Histogram<u64>,
    pub statuses: StatusCounts,
}

pub struct Recorder {
    q: Arc<QueryCounters>,
    /// Response times of the current second, at full precision: each
    /// answer is recorded once, here; each second is then added to
    /// `response_time` and, coarser, to its report. (u32 counts: a
    /// second's, half the memory.)
    second_hist: Histogram<u32>,
    response_time: Histogram<u64>,
    /// Service times of the current second, when the run's seconds carry
    /// them (a run's always do: its result and a Prometheus endpoint show
    /// them per second): recorded here instead of in `service_time`, and
    /// added to it and to the report as the second ends, as response times
    /// are.
    second_service: Option<Histogram<u32>>,
    /// Queries sent the instant they were due (closed loop: all of them),
    /// counted and added to `send_lag` at the end instead of one by one.
    on_time: u64,
    service_time: Histogram<u64>,
    send_lag: Histogram<u64>,
    loop_lag: Histogram<u64>,
    /// Response times of answers that came after their query's timeout.
    late_time: Histogram<u64>,
    statuses: StatusCounts,
    /// The current second (since the run's start) and its figures.
    sec: u64,
    sec_report: SecondReport,
    reports: ReportTx,
    log: Option<RttLog>,
    /// In closed loop each query is sent when due: response and service
    /// time are the same, recorded once and copied at the end.
    closed_loop: bool,
    /// When traffic started (ns since the run's start).
    started: u64,
    /// The largest response time kept (µs): larger ones count as it.
    highest: u64,
    /// Which answers are successes (an answer that is not one counts in
    /// its second's `failed_answers`).
    ok: crate::metrics::OkMask,
}

impl Recorder {
    /// `highest`: the largest response time kept, in µs; `qtypes`: the
    /// query types whose RCODEs are counted apart; `service_seconds`:
    /// each second's report carries its service times too.
    pub fn new(
        q: Arc<QueryCounters>,
        highest: u64,
        qtypes: &[u16],
        reports: impl Into<ReportTx>,
        log: Option<RttLog>,
        (closed_loop, service_seconds): (bool, bool),
    ) -> Recorder {
        Recorder {
            q,
            highest,
            second_hist: growing(3),
            response_time: growing(3),
            second_service: service_seconds.then(|| growing(3)),
            on_time: 0,
            service_time: growing(3),
            send_lag: new_histogram(),
            loop_lag: new_histogram(),
            late_time: new_histogram(),
            statuses: StatusCounts {
                by_qtype: qtypes.iter().map(|&q| (q, [0; 16])).collect(),
                ..StatusCounts::default()
            },
            sec: 0,
            sec_report: SecondReport::new(0, service_seconds),
            reports: reports.into(),
            log,
            closed_loop,
            started: 0,
            ok: crate::metrics::OkMask::new(crate::metrics::OkAnswers::default()),
        }
    }

    /// Counts as failed the answers that `ok` does not call successes.
    pub fn with_ok(mut self, ok: crate::metrics::OkMask) -> Recorder {
        self.ok = ok;
        self
    }

    /// TrafficState starts at `started`; the current second is `now_ns`'s.
    pub fn start(&mut self, started: u64, now_ns: u64) {
        self.started = started;
        self.sec = now_ns / 1_000_000_000;
        self.sec_report = SecondReport::new(self.sec, self.second_service.is_some());
        clear_if_used(&mut self.second_hist);
        if let Some(h) = self.second_service.as_mut() {
            clear_if_used(h);
        }
    }

    /// When the current second ends (ns since the run's start).
    pub fn second_ends(&self) -> u64 {
        (self.sec + 1) * 1_000_000_000
    }

    /// Sends one report per second that has ended by `now_ns`; true when a
    /// second ended.
    pub fn roll(&mut self, now_ns: u64) -> bool {
        let sec = now_ns / 1_000_000_000;
        let rolled = self.sec < sec;
        while self.sec < sec {
            let next = self
                .reports
                .fresh(self.sec + 1, self.second_service.is_some());
            let mut done = std::mem::replace(&mut self.sec_report, next);
            self.fold_second(&mut done);
            self.reports.send(done);
            self.sec += 1;
        }
        rolled
    }

    /// Ends a second: its answers go into the run's histograms and, at the
    /// report's precision, into its report (the buckets nest, so this is
    /// what recording there directly would give). In closed loop the
    /// report's service times are its response times.
    fn fold_second(&mut self, report: &mut SecondReport) {
        if let Some(h) = self.second_service.as_mut() {
            if !h.is_empty() {
                for v in h.iter_recorded() {
                    let (value, n) = (v.value_iterated_to(), u64::from(v.count_at_value()));
                    self.service_time.put_n(value, n);
                    if let Some(r) = report.service.as_mut() {
                        r.put_n(value, n);
                    }
                }
                clear_if_used(h);
            }
        }
        if self.second_hist.is_empty() {
            return;
        }
        for v in self.second_hist.iter_recorded() {
            let (value, n) = (v.value_iterated_to(), u64::from(v.count_at_value()));
            // Same bounds and precision: the same bucket, exactly.
            self.response_time.put_n(value, n);
            report.hist.put_n(value, n);
            if self.closed_loop {
                if let Some(r) = report.service.as_mut() {
                    r.put_n(value, n);
                }
            }
        }
        self.second_hist.reset();
    }

    /// How late the loop noticed a due query.
    #[inline]
    pub fn loop_lag(&mut self, late_ns: u64) {
        self.loop_lag.put(us(late_ns));
        if late_ns > LATE_NS {
            self.sec_report.loop_late += 1;
        }
    }

    /// A query went out `lag_ns` after it was due; `pipelined`: behind
    /// others still in flight on its connection.
    #[inline]
    pub fn sent(&mut self, lag_ns: u64, pipelined: bool) {
        if lag_ns == 0 {
            self.on_time += 1;
        } else {
            self.send_lag.put(us(lag_ns));
            if lag_ns > LATE_NS {
                bump(&self.q.sent_late, 1);
            }
        }
        if pipelined {
            bump(&self.q.pipelined, 1);
        }
        self.sec_report.sent += 1;
        bump(&self.q.sent, 1);
    }

    /// `n` queries counted as sent never reached the server's work (they
    /// crossed its announced close).
    pub fn unsent(&mut self, n: u64) {
        self.q.sent.store(self.q.sent.load(Relaxed) - n, Relaxed);
        self.sec_report.sent = self.sec_report.sent.saturating_sub(n);
    }

    /// An error of kind `e` (an index of `QueryCounters::errors`), in the
    /// run's counts and this second's.
    #[inline]
    pub fn error(&mut self, e: usize) {
        self.errors(e, 1);
    }

    /// `n` queries ended in error `e`.
    pub fn errors(&mut self, e: usize, n: u64) {
        bump(&self.q.errors[e], n);
        self.sec_report.errors += n;
    }

    /// Query `o` of connection `conn` was answered at `now` with `status`.
    #[inline]
    pub fn answered(&mut self, conn: u64, o: &Outstanding, now: u64, status: Status) {
        let most = self.highest;
        self.second_hist
            .put(us(now.saturating_sub(o.intended)).min(most));
        if !self.closed_loop {
            let service = us(now.saturating_sub(o.sent)).min(most);
            match self.second_service.as_mut() {
                Some(h) => h.put(service),
                None => self.service_time.put(service),
            }
        }
        self.sec_report.answered += 1;
        bump(&self.q.answered, 1);
        let s = &mut self.statuses;
        let label = match status {
            Status::Ok => {
                s.ok += 1;
                Label::Word("ok")
            }
            Status::Rcode {
                rcode: r,
                truncated,
            } => {
                if truncated {
                    bump(&self.q.truncated, 1);
                }
                s.rcodes[usize::from(r & 15)] += 1;
                if self.ok.rcode_failed(r) {
                    self.sec_report.failed_answers += 1;
                }
                if let Some((_, row)) = s.by_qtype.get_mut(usize::from(o.qtype_slot)) {
                    row[usize::from(r & 15)] += 1;
                }
                Label::Word(wire::dns::rcode_name(r))
            }
            Status::Echoed => {
                s.echoed += 1;
                Label::Word("echoed")
            }
            Status::Http(code) => {
                s.http[usize::from(code).min(599)] += 1;
                if self.ok.status_failed(code) {
                    self.sec_report.failed_answers += 1;
                }
                Label::Code(code)
            }
            Status::Mismatch => {
                // An answer that failed: counted answered, once (not an
                // error besides).
                s.mismatch += 1;
                self.sec_report.failed_answers += 1;
                Label::Word("mismatch")
            }
            Status::Redis(kind) => {
                s.redis[redis_slot(kind)] += 1;
                match kind {
                    wire::resp::Kind::Error(w) => {
                        self.sec_report.failed_answers += 1;
                        Label::Word(wire::resp::ERROR_WORDS[usize::from(w)])
                    }
                    k => Label::Word(k.name()),
                }
            }
        };
        if let Some(log) = self.log.as_mut() {
            log.line(self.started, conn, o, Some(now), label);
        }
    }

    /// An answer came at `now` for query `o`, which had timed out: counted
    /// apart, its response time in a histogram of its own.
    pub fn answered_late(&mut self, o: &Outstanding, now: u64) {
        bump(&self.q.answered_late, 1);
        // Not capped at `highest` (twice the timeout): a late answer is
        // late by any amount.
        self.late_time.put(us(now.saturating_sub(o.intended)));
    }

    /// Query `o` of connection `conn` timed out.
    pub fn timed_out(&mut self, conn: u64, o: &Outstanding) {
        bump(&self.q.timed_out, 1);
        self.sec_report.timed_out += 1;
        if let Some(log) = self.log.as_mut() {
            log.line(self.started, conn, o, None, Label::Word("timeout"));
        }
    }

    /// The worker stops: the last second is reported, the log handed over.
    pub fn finish(mut self) -> Measured {
        let mut last = std::mem::replace(&mut self.sec_report, SecondReport::new(0, false));
        self.fold_second(&mut last);
        self.reports.send(last);
        let _ = self.send_lag.record_n(0, self.on_time);
        if let Some(log) = self.log.as_mut() {
            log.flush();
        }
        Measured {
            service_time: if self.closed_loop {
                self.response_time.clone()
            } else {
                self.service_time
            },
            response_time: self.response_time,
            send_lag: self.send_lag,
            loop_lag: self.loop_lag,
            late_time: self.late_time,
            statuses: self.statuses,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(key: u64, intended: u64, sent: u64) -> Outstanding {
        Outstanding {
            key,
            intended,
            sent,
            timed_out: false,
            qtype_slot: 0,
        }
    }

    fn recorder(closed_loop: bool, log: bool) -> (Recorder, mpsc::Receiver<SecondReport>) {
        let (tx, rx) = mpsc::channel();
        let log = log.then(|| {
            let (ltx, lrx) = mpsc::channel();
            std::mem::forget(lrx);
            RttLog::new(ltx, 1_000_000, "dns")
        });
        let q = Arc::new(QueryCounters::default());
        (
            Recorder::new(q, 10_000_000, &[1, 28], tx, log, (closed_loop, false)),
            rx,
        )
    }

    /// Reports given back come out again emptied, with their new second:
    /// a worker's seconds allocate nothing once the first are back.
    #[test]
    fn reports_given_back_are_used_again_empty() {
        let (tx, rx) = mpsc::channel();
        let back = ReportTx::from(tx);
        let q = Arc::new(QueryCounters::default());
        let mut r = Recorder::new(q, 10_000_000, &[1], back.clone(), None, (false, true));
        r.start(0, 0);
        r.sent(0, false);
        r.answered(1, &o(0, 0, 0), 500_000_000, Status::Ok);
        r.roll(1_000_000_000);
        let first = rx.try_recv().unwrap();
        assert_eq!((first.idx, first.answered, first.hist.len()), (0, 1, 1));
        back.give_back(first);
        // Second 1 was made before the give-back; second 2 is the first.
        r.roll(3_000_000_000);
        let secs: Vec<SecondReport> = rx.try_iter().collect();
        assert_eq!(secs.iter().map(|s| s.idx).collect::<Vec<_>>(), [1, 2]);
        for s in &secs {
            assert_eq!((s.sent, s.answered, s.hist.len(), s.workers), (0, 0, 0, 1));
            assert!(s.service.as_ref().is_some_and(|h| h.is_empty()));
        }
        assert_eq!(r.sec_report.idx, 3);
        assert!(back.spare.lock().unwrap().is_empty(), "second 2 took it");
        // One of another shape (no service times) is not used.
        let mut other = SecondReport::new(9, false);
        other.answered = 5;
        back.give_back(other);
        let fresh = back.fresh(4, true);
        assert!(fresh.service.is_some() && fresh.answered == 0);
        // Two a worker are kept, no more.
        for i in 0..5 {
            back.give_back(SecondReport::new(i, true));
        }
        assert_eq!(back.spare.lock().unwrap().len(), 2);
    }

    #[test]
    fn each_second_is_reported_once_with_its_answers() {
        let (mut r, rx) = recorder(false, false);
        r.start(500_000_000, 500_000_000);
        r.sent(0, false);
        r.answered(1, &o(0, 0, 0), 900_000_000, Status::Ok);
        r.roll(999_999_999);
        assert!(rx.try_recv().is_err(), "the second has not ended");
        r.roll(3_100_000_000);
        let secs: Vec<SecondReport> = rx.try_iter().collect();
        assert_eq!(secs.iter().map(|s| s.idx).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!((secs[0].sent, secs[0].answered), (1, 1));
        assert_eq!(secs[0].hist.len(), 1);
        assert_eq!(secs[1].answered + secs[2].answered, 0);
        assert_eq!(r.second_ends(), 4_000_000_000);
        r.answered(
            1,
            &o(1, 3_000_000_000, 3_050_000_000),
            3_200_000_000,
            Status::Ok,
        );
        let m = r.finish();
        let last = rx.try_recv().expect("the last second");
        assert_eq!((last.idx, last.answered), (3, 1));
        // Response time from the intended time, service from the send.
        assert_eq!(m.response_time.len(), 2);
        assert_eq!(m.service_time.len(), 2);
        assert!(m.response_time.equivalent(m.response_time.max(), 900_000));
        assert!(m.service_time.equivalent(m.service_time.max(), 900_000));
        assert!(m.service_time.equivalent(m.service_time.min(), 150_000));
        assert!(m.response_time.equivalent(m.response_time.min(), 200_000));
    }

    /// With --metrics each second's report carries its service times, and
    /// the run's histogram still gets every one of them.
    #[test]
    fn service_times_go_with_their_second_when_asked() {
        let (tx, rx) = mpsc::channel();
        let q = Arc::new(QueryCounters::default());
        let mut r = Recorder::new(q, 10_000_000, &[1], tx, None, (false, true));
        r.start(0, 0);
        r.answered(1, &o(0, 0, 100_000_000), 300_000_000, Status::Ok);
        r.roll(1_000_000_000);
        r.answered(
            1,
            &o(1, 1_000_000_000, 1_000_000_000),
            1_050_000_000,
            Status::Ok,
        );
        let m = r.finish();
        let secs: Vec<SecondReport> = rx.try_iter().collect();
        let service = |s: &SecondReport| s.service.as_ref().expect("kept").max();
        assert!(secs[0].hist.equivalent(secs[0].hist.max(), 300_000));
        assert!(secs[0]
            .service
            .as_ref()
            .unwrap()
            .equivalent(service(&secs[0]), 200_000));
        assert!(secs[1]
            .service
            .as_ref()
            .unwrap()
            .equivalent(service(&secs[1]), 50_000));
        assert_eq!(m.service_time.len(), 2);
        assert!(m.service_time.equivalent(m.service_time.max(), 200_000));

        // Closed loop: a second's service times are its response times.
        let (tx, rx) = mpsc::channel();
        let q = Arc::new(QueryCounters::default());
        let mut r = Recorder::new(q, 10_000_000, &[1], tx, None, (true, true));
        r.start(0, 0);
        r.answered(1, &o(0, 0, 0), 2_000_000, Status::Ok);
        let m = r.finish();
        let last = rx.try_recv().unwrap();
        assert_eq!(last.service.as_ref().unwrap().len(), 1);
        assert_eq!(m.service_time, m.response_time);
    }

    #[test]
    fn closed_loop_service_time_is_the_response_time() {
        let (mut r, _rx) = recorder(true, false);
        r.start(0, 0);
        r.sent(0, true);
        r.answered(1, &o(0, 0, 0), 2_000_000, Status::Echoed);
        let m = r.finish();
        assert_eq!(m.service_time, m.response_time);
        assert_eq!(m.statuses.echoed, 1);
        // On time: a zero in the send lag, added at the end.
        assert_eq!((m.send_lag.len(), m.send_lag.max()), (1, 0));
    }

    #[test]
    fn statuses_are_counted_by_kind_and_query_type() {
        let (mut r, _rx) = recorder(false, false);
        let mut aaaa = o(0, 0, 0);
        aaaa.qtype_slot = 1;
        let nxdomain = Status::Rcode {
            rcode: 3,
            truncated: false,
        };
        r.answered(1, &aaaa, 1000, nxdomain);
        let cut = Status::Rcode {
            rcode: 0,
            truncated: true,
        };
        r.answered(1, &o(3, 0, 0), 1000, cut);
        r.answered(1, &o(1, 0, 0), 1000, Status::Http(503));
        r.answered(1, &o(2, 0, 0), 1000, Status::Mismatch);
        // A mismatch is an answer that failed, not an error besides
        // (counted as both, answered + errors would exceed sent).
        assert_eq!(r.q.errors.iter().map(|e| e.load(Relaxed)).sum::<u64>(), 0);
        assert_eq!(r.sec_report.errors, 0);
        assert_eq!(r.q.answered.load(Relaxed), 4);
        let r_truncated = r.q.truncated.load(Relaxed);
        let m = r.finish();
        assert_eq!((m.statuses.rcodes[3], m.statuses.rcodes[0]), (1, 1));
        assert_eq!(r_truncated, 1, "a truncated answer is counted apart");
        assert_eq!(
            m.statuses.by_qtype[1],
            (28, {
                let mut row = [0; 16];
                row[3] = 1;
                row
            })
        );
        assert_eq!(m.statuses.http[503], 1);
        assert_eq!(m.statuses.mismatch, 1);
    }

    #[test]
    fn rtt_log_lines_are_written_in_place() {
        let (mut r, _rx) = recorder(false, true);
        r.start(1_000_000, 1_000_000);
        r.answered(7, &o(3, 2_000_000, 3_000_000), 8_000_000, Status::Http(200));
        r.timed_out(7, &o(4, 2_000_000, 3_500_000));
        let noerror = Status::Rcode {
            rcode: 0,
            truncated: false,
        };
        r.answered(8, &o(5, 1_000_000, 1_000_000), 1_500_000, noerror);
        let log = String::from_utf8(r.log.as_ref().expect("log").buf.clone()).expect("utf-8");
        assert_eq!(
            log,
            "dns,1003000,7,3,1000,2000,5000,200\n\
             dns,1003500,7,4,1000,2500,,timeout\n\
             dns,1001000,8,5,0,0,500,NOERROR\n"
        );
    }
}
