//! One second of a run as a result keeps it (`per_second`), the line a
//! child process prints to its parent, and their merge over processes or
//! hosts: counts summed, histograms added.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::metrics::Grow;

/// One second of a run, as the live view shows it and the JSON keeps it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Of `connections`, those open for a second or more (not counting
    /// the short lives of connections a server closes as they come).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady: Option<u64>,
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
    /// Answers that said failure in this second (an error status, a DNS
    /// SERVFAIL or REFUSED, a mismatch: not successes by --ok-rcodes and
    /// --ok-status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_answers: Option<u64>,
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
    /// --proto push: messages received twice, and received after a later
    /// one of their connection, in this second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_duplicates: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_out_of_order: Option<u64>,
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
            s.steady = add(s.steady, o.steady);
            s.target = add(s.target, o.target);
            s.due = add(s.due, o.due);
            s.sent = add(s.sent, o.sent);
            s.answered = add(s.answered, o.answered);
            s.timed_out = add(s.timed_out, o.timed_out);
            s.errors = add(s.errors, o.errors);
            s.failed_answers = add(s.failed_answers, o.failed_answers);
            s.loop_late = add(s.loop_late, o.loop_late);
            s.connect_p99_us = s.connect_p99_us.max(o.connect_p99_us);
            s.push_received = add(s.push_received, o.push_received);
            s.push_lost = add(s.push_lost, o.push_lost);
            s.push_duplicates = add(s.push_duplicates, o.push_duplicates);
            s.push_out_of_order = add(s.push_out_of_order, o.push_out_of_order);
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
                Some(all) => self.unknown |= all.take_in(&h).is_err(),
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
