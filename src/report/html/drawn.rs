//! A run read for drawing: its seconds as the charts draw them and its
//! whole-run histograms (response and service time; a push run's jitter
//! and one-way delay) decoded once.

use anyhow::Result;
use hdrhistogram::Histogram;

use super::Run;
use crate::metrics::decode_histogram;
use crate::outcome::RunResult;

/// One second of a run, as the charts draw it.
pub(super) struct Second {
    pub(super) t: f64,
    pub(super) open: f64,
    pub(super) established_per_s: f64,
    pub(super) target: Option<f64>,
    pub(super) sent: Option<f64>,
    pub(super) answered: Option<f64>,
    pub(super) timed_out: Option<f64>,
    pub(super) errors: Option<f64>,
    /// Response time percentiles of the second, µs.
    pub(super) p50: Option<f64>,
    pub(super) p99: Option<f64>,
    pub(super) max: Option<f64>,
    /// Service time percentiles of the second, µs (results that carry
    /// them).
    pub(super) service_p50: Option<f64>,
    pub(super) service_p99: Option<f64>,
    /// p99 of the connect times of the second's new connections, µs.
    pub(super) connect_p99: Option<f64>,
    /// --proto push: messages received and found lost in the second, and
    /// its jitter and one-way delay p99 (µs).
    pub(super) push_received: Option<f64>,
    pub(super) push_lost: Option<f64>,
    pub(super) push_jitter_p99: Option<f64>,
    pub(super) push_delay_p99: Option<f64>,
}

/// A run read for drawing.
pub(super) struct Drawn<'a> {
    pub(super) label: &'a str,
    pub(super) r: &'a RunResult,
    pub(super) seconds: Vec<Second>,
    pub(super) response: Option<Histogram<u64>>,
    pub(super) service: Option<Histogram<u64>>,
    /// --proto push: the jitter and one-way delay of the whole run.
    pub(super) push_jitter: Option<Histogram<u64>>,
    pub(super) push_delay: Option<Histogram<u64>>,
}

impl<'a> Drawn<'a> {
    pub(super) fn new(run: &'a Run) -> Result<Drawn<'a>> {
        let r = run.result;
        let seconds = r
            .per_second
            .iter()
            .map(|s| {
                // The second's histogram when the result has it (max too);
                // else the percentiles it wrote.
                let h = s.hdr.as_deref().and_then(|h| decode_histogram(h).ok());
                let at = |q: f64| h.as_ref().map(|h| h.value_at_quantile(q) as f64);
                let sh = s
                    .service_hdr
                    .as_deref()
                    .and_then(|h| decode_histogram(h).ok());
                let service_at = |q: f64| sh.as_ref().map(|h| h.value_at_quantile(q) as f64);
                Second {
                    t: s.t as f64,
                    open: s.connections as f64,
                    established_per_s: s.established_per_s as f64,
                    target: s.target,
                    sent: s.sent.map(|n| n as f64),
                    answered: s.answered.map(|n| n as f64),
                    timed_out: s.timed_out.map(|n| n as f64),
                    errors: s.errors.map(|n| n as f64),
                    p50: at(0.5).or(s.p50_us.map(|v| v as f64)),
                    p99: at(0.99).or(s.p99_us.map(|v| v as f64)),
                    max: h.as_ref().map(|h| h.max() as f64),
                    service_p50: service_at(0.5).or(s.service_p50_us.map(|v| v as f64)),
                    service_p99: service_at(0.99).or(s.service_p99_us.map(|v| v as f64)),
                    connect_p99: s.connect_p99_us.map(|v| v as f64),
                    push_received: s.push_received.map(|n| n as f64),
                    push_lost: s.push_lost.map(|n| n as f64),
                    push_jitter_p99: s.push_jitter_p99_us.map(|v| v as f64),
                    push_delay_p99: s.push_delay_p99_us.map(|v| v as f64),
                }
            })
            .collect();
        let (response, service) = match &r.latency {
            Some(l) => (
                Some(decode_histogram(&l.response_time_us.hdr)?),
                Some(decode_histogram(&l.service_time_us.hdr)?),
            ),
            None => (None, None),
        };
        let push = |hdr: Option<&String>| hdr.map(|h| decode_histogram(h)).transpose();
        let (push_jitter, push_delay) = match &r.push {
            Some(p) => (
                push(Some(&p.jitter_us.hdr))?,
                push(p.delay_us.as_ref().map(|d| &d.hdr))?,
            ),
            None => (None, None),
        };
        Ok(Drawn {
            label: &run.label,
            r,
            seconds,
            response,
            service,
            push_jitter,
            push_delay,
        })
    }

    /// A legend entry: `what`, or among several runs the run's label
    /// and `what`.
    pub(super) fn entry(&self, one: bool, what: &str) -> String {
        if one {
            what.to_string()
        } else {
            format!("{} {what}", self.label)
        }
    }

    pub(super) fn has_answers(&self) -> bool {
        self.response.as_ref().is_some_and(|h| !h.is_empty())
    }

    /// A push run (`--proto push`): what its charts and rows are drawn for.
    pub(super) fn has_push(&self) -> bool {
        self.r.push.is_some()
    }
}
