//! What a live client run shows a Prometheus scraper (`throng client
//! --metrics`): its counters so far and its latencies in fixed buckets,
//! as plain data. The engine's main thread fills it once a second and as
//! each worker's second comes in; a child of --processes sends it whole to
//! its parent, which adds up its children's. Encoding it is the report's
//! business ([`crate::report::prometheus`]).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::{ConnTotals, QueryTotals, BUCKETS, ERROR_CAUSES};

/// Upper bounds of the latency buckets, in µs: 10 µs to 10 s (1, 2.5, 5
/// per decade), then +Inf. Loopback and LAN answers take 10 to 100 µs:
/// the buckets below 50 µs tell them apart.
pub const LATENCY_BOUNDS_US: [u64; 19] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// A latency histogram in Prometheus' shape: a count per bucket of
/// [`LATENCY_BOUNDS_US`] (not cumulative; the last one above them all),
/// with the count and sum of every value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatencyBuckets {
    pub counts: [u64; LATENCY_BOUNDS_US.len() + 1],
    pub count: u64,
    pub sum_us: u64,
}

impl Default for LatencyBuckets {
    fn default() -> Self {
        LatencyBuckets {
            counts: [0; LATENCY_BOUNDS_US.len() + 1],
            count: 0,
            sum_us: 0,
        }
    }
}

impl LatencyBuckets {
    /// Adds every value of an HDR histogram (µs). A value goes to the
    /// bucket its HDR bucket starts in, and counts in the sum at that
    /// bucket's middle: exact where the HDR buckets are a µs wide (below
    /// 256 µs at 2 significant digits), within their width (under 1%)
    /// above.
    pub fn add_hdr(&mut self, h: &Histogram<u64>) {
        for v in h.iter_recorded() {
            let value = h.lowest_equivalent(v.value_iterated_to());
            let n = v.count_at_value();
            let i = LATENCY_BOUNDS_US.partition_point(|&b| b < value);
            self.counts[i] += n;
            self.count += n;
            self.sum_us = self
                .sum_us
                .saturating_add(h.median_equivalent(value).saturating_mul(n));
        }
    }

    pub fn merge(&mut self, o: &LatencyBuckets) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.count += o.count;
        self.sum_us = self.sum_us.saturating_add(o.sum_us);
    }
}

/// A client run's figures so far, as exported: counters since the start,
/// the open connections now, and the latency buckets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunCounters {
    /// Queries the schedule asked for so far (a rate over time: not whole).
    pub target_queries: f64,
    pub sent: u64,
    pub answered: u64,
    pub timed_out: u64,
    /// By cause, in the order of [`ERROR_CAUSES`].
    pub errors: [u64; ERROR_CAUSES.len()],
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub attempted: u64,
    /// Established.
    pub opened: u64,
    /// Ended without a failure: closed by the client (end of the run,
    /// --lifetime, recycling), or by the server after answering all it was
    /// sent.
    pub closed: u64,
    /// By bucket, in the order of [`super::Bucket::ALL`].
    pub failed: [u64; BUCKETS],
    /// Open now.
    pub connections: i64,
    pub response_time: LatencyBuckets,
    pub service_time: LatencyBuckets,
}

impl RunCounters {
    /// Takes the counters as they are now (kept from going back: a query
    /// that crossed the server's close is taken back from `sent`).
    pub fn set_counters(&mut self, c: &ConnTotals, q: &QueryTotals, open: i64) {
        self.sent = self.sent.max(q.sent);
        self.answered = q.answered;
        self.timed_out = q.timed_out;
        self.errors = q.errors;
        self.bytes_sent = q.bytes_out;
        self.bytes_received = q.bytes_in;
        self.attempted = c.attempted;
        self.opened = c.established;
        self.closed = c.closed + c.peer_closed;
        self.failed = c.failed;
        self.connections = open;
    }

    /// One second of one worker's latencies: response times, and service
    /// times when it kept them apart.
    pub fn add_second(&mut self, response: &Histogram<u64>, service: Option<&Histogram<u64>>) {
        self.response_time.add_hdr(response);
        if let Some(s) = service {
            self.service_time.add_hdr(s);
        }
    }

    /// Adds another process's figures: everything summed.
    pub fn merge(&mut self, o: &RunCounters) {
        self.target_queries += o.target_queries;
        self.sent += o.sent;
        self.answered += o.answered;
        self.timed_out += o.timed_out;
        for (a, b) in self.errors.iter_mut().zip(&o.errors) {
            *a += b;
        }
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.attempted += o.attempted;
        self.opened += o.opened;
        self.closed += o.closed;
        for (a, b) in self.failed.iter_mut().zip(&o.failed) {
            *a += b;
        }
        self.connections += o.connections;
        self.response_time.merge(&o.response_time);
        self.service_time.merge(&o.service_time);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values: &[u64]) -> Histogram<u64> {
        let mut h = Histogram::new_with_bounds(1, 3_600_000_000, 2).unwrap();
        for &v in values {
            h.record(v).unwrap();
        }
        h
    }

    #[test]
    fn values_fall_in_the_bucket_of_their_upper_bound() {
        let mut b = LatencyBuckets::default();
        // 1 and 10 µs are in the first bucket (le 10 µs), 11 and 25 in the
        // second, 50 in le 50 µs, 51 in le 100 µs; 1 ms in le 1 ms; above
        // 10 s in the last.
        b.add_hdr(&hist(&[1, 10, 11, 25, 50, 51, 1_000, 1_001, 20_000_000]));
        assert_eq!(b.counts[..4], [2, 2, 1, 1]);
        assert_eq!(b.counts[6], 2, "1 ms and 1.001 ms share an HDR bucket");
        assert_eq!(b.counts[LATENCY_BOUNDS_US.len()], 1);
        assert_eq!(b.count, 9);
        assert_eq!(b.counts.iter().sum::<u64>(), 9);
        // Exact below 256 µs; within the HDR bucket's width above.
        let small = {
            let mut s = LatencyBuckets::default();
            s.add_hdr(&hist(&[1, 50, 51]));
            s.sum_us
        };
        assert_eq!(small, 102);
        let expected = 1 + 10 + 11 + 25 + 50 + 51 + 1_000 + 1_001 + 20_000_000;
        let err = b.sum_us.abs_diff(expected) as f64 / expected as f64;
        assert!(err < 0.01, "{} vs {expected}", b.sum_us);
    }

    #[test]
    fn figures_merge_by_summing() {
        let mut a = RunCounters {
            target_queries: 1.5,
            sent: 10,
            connections: 3,
            ..RunCounters::default()
        };
        a.errors[2] = 1;
        a.add_second(&hist(&[100]), Some(&hist(&[90])));
        let mut b = a.clone();
        b.failed[0] = 4;
        a.merge(&b);
        assert_eq!((a.target_queries, a.sent, a.connections), (3.0, 20, 6));
        assert_eq!((a.errors[2], a.failed[0]), (2, 4));
        assert_eq!(a.response_time.count, 2);
        assert_eq!(a.service_time.sum_us, 180);
    }

    #[test]
    fn sent_never_goes_back() {
        let mut f = RunCounters::default();
        let mut q = QueryTotals {
            sent: 10,
            ..QueryTotals::default()
        };
        f.set_counters(&ConnTotals::default(), &q, 1);
        q.sent = 9;
        f.set_counters(&ConnTotals::default(), &q, 1);
        assert_eq!(f.sent, 10);
    }
}
