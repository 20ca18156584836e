//! `--metrics ADDR` of a client run: its figures for Prometheus, through
//! [`client_registry`]'s collector, which reads what the run's main loop
//! keeps up to date, served by [`crate::exposition::Endpoint`] (the
//! server's own figures are `server::prometheus`'s).
//!
//! It must not hold a lock a worker or the main loop waits on for longer
//! than a copy of the figures.

use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::exposition::{bytes_counter, counter, counters_by, gauge};
use crate::metrics::exported::{LatencyBuckets, RunCounters, LATENCY_BOUNDS_US};
use crate::metrics::{Bucket, ERROR_CAUSES};

/// A latency histogram in seconds (`name` without the unit).
fn seconds_histogram(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    b: &LatencyBuckets,
) -> std::fmt::Result {
    let unit = Unit::Seconds;
    let mut m = enc.encode_descriptor(name, help, Some(&unit), MetricType::Histogram)?;
    let buckets: Vec<(f64, u64)> = LATENCY_BOUNDS_US
        .iter()
        .map(|&us| us as f64 / 1e6)
        .chain([f64::INFINITY])
        .zip(b.counts)
        .collect();
    m.encode_histogram::<NoLabelSet>(b.sum_us as f64 / 1e6, b.count, &buckets, None)
}

/// What `throng client --metrics` shows: the figures the run keeps in
/// `figures`, read at each scrape.
#[derive(Debug)]
struct ClientCollector(Arc<Mutex<RunCounters>>);

impl Collector for ClientCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let f = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let e = &mut enc;
        counter(
            e,
            "throng_client_target_queries",
            "Queries the schedule asked for so far (open loop and --interval; 0 in closed loop).",
            f.target_queries,
        )?;
        counter(e, "throng_client_queries_sent", "Queries sent.", f.sent)?;
        counter(
            e,
            "throng_client_queries_answered",
            "Queries answered (any status).",
            f.answered,
        )?;
        counter(
            e,
            "throng_client_queries_timed_out",
            "Queries not answered within --timeout.",
            f.timed_out,
        )?;
        counters_by(
            e,
            "throng_client_query_errors",
            "Queries ended in error, by cause (as queries.errors.<cause> in the JSON result).",
            "cause",
            ERROR_CAUSES
                .iter()
                .zip(f.errors)
                .map(|(c, n)| (c.to_string(), n)),
        )?;
        bytes_counter(
            e,
            "throng_client_sent",
            "Bytes of queries written.",
            f.bytes_sent,
        )?;
        bytes_counter(
            e,
            "throng_client_received",
            "Bytes of answers read.",
            f.bytes_received,
        )?;
        counter(
            e,
            "throng_client_connections_attempted",
            "Connection attempts started.",
            f.attempted,
        )?;
        counter(
            e,
            "throng_client_connections_opened",
            "Connections established.",
            f.opened,
        )?;
        counters_by(
            e,
            "throng_client_connections_failed",
            "Connections that failed, by cause (as connections.failed.<cause> in the JSON result).",
            "cause",
            Bucket::ALL
                .iter()
                .zip(f.failed)
                .map(|(b, n)| (b.key().to_string(), n)),
        )?;
        counter(
            e,
            "throng_client_connections_closed",
            "Connections that ended without a failure (closed by the client, or by the server \
             after answering everything sent on them).",
            f.closed,
        )?;
        gauge(
            e,
            "throng_client_connections",
            "Connections open now.",
            f.connections,
        )?;
        seconds_histogram(
            e,
            "throng_client_response_time",
            "Response time: from each query's intended send time to its answer (coordinated \
             omission corrected).",
            &f.response_time,
        )?;
        seconds_histogram(
            e,
            "throng_client_service_time",
            "Service time: from each query's actual send to its answer.",
            &f.service_time,
        )
    }
}

/// The registry a client run's endpoint serves: `figures`, as the run
/// keeps them.
pub fn client_registry(figures: Arc<Mutex<RunCounters>>) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(ClientCollector(figures)));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::to_text_format;

    fn encoded(r: &Registry) -> String {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, r).unwrap();
        s
    }

    #[test]
    fn a_client_run_has_every_family_from_the_start() {
        let figures = Arc::new(Mutex::new(RunCounters::default()));
        let r = client_registry(figures.clone());
        let text = to_text_format(&encoded(&r));
        for family in [
            "# TYPE throng_client_target_queries_total counter",
            "# TYPE throng_client_queries_sent_total counter",
            "# TYPE throng_client_queries_answered_total counter",
            "# TYPE throng_client_queries_timed_out_total counter",
            "# TYPE throng_client_query_errors_total counter",
            "# TYPE throng_client_connections_opened_total counter",
            "# TYPE throng_client_connections_failed_total counter",
            "# TYPE throng_client_connections_closed_total counter",
            "# TYPE throng_client_connections gauge",
            "# TYPE throng_client_response_time_seconds histogram",
            "# TYPE throng_client_service_time_seconds histogram",
        ] {
            assert!(text.contains(family), "{family} missing:\n{text}");
        }
        assert!(text.contains("throng_client_query_errors_total{cause=\"not_sent\"} 0\n"));
        assert!(text.contains("throng_client_connections_failed_total{cause=\"half_open\"} 0\n"));
        let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 2).unwrap();
        h.record_n(40, 3).unwrap();
        h.record(20).unwrap();
        h.record(3_000).unwrap();
        figures.lock().unwrap().add_second(&h, None);
        let text = to_text_format(&encoded(&r));
        let bucket = |le: &str, n: u64| {
            let line = format!("throng_client_response_time_seconds_bucket{{le=\"{le}\"}} {n}\n");
            assert!(text.contains(&line), "{line}missing in:\n{text}");
        };
        // Below 50 µs: loopback answers.
        bucket("0.00001", 0);
        bucket("0.000025", 1);
        bucket("0.00005", 4);
        bucket("+Inf", 5);
        for family in [
            "# TYPE throng_client_sent_bytes_total counter",
            "# TYPE throng_client_received_bytes_total counter",
        ] {
            assert!(text.contains(family), "{family} missing:\n{text}");
        }
        assert!(text.contains("throng_client_response_time_seconds_count 5\n"));
    }
}
