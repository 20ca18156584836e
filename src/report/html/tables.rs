//! The report's tables: the summary's figures side by side.

use super::drawn::Drawn;
use crate::report::json::RunResult;
use crate::units::{human, human_us};

/// The summary's figures, a row each, a column per run.
pub(super) fn figures(runs: &[Drawn]) -> Vec<(&'static str, Vec<String>)> {
    let each = |f: &dyn Fn(&RunResult) -> String| runs.iter().map(|d| f(d.r)).collect();
    let us = |v: u64| human_us(v);
    let lat = |f: fn(&crate::metrics::Latency) -> u64, service: bool| {
        move |r: &RunResult| {
            r.latency.as_ref().map_or("-".into(), |l| {
                let h = if service {
                    &l.service_time_us
                } else {
                    &l.response_time_us
                };
                if h.count == 0 {
                    "-".into()
                } else {
                    us(f(h))
                }
            })
        }
    };
    let q = |f: fn(&crate::report::json::Queries) -> String| {
        move |r: &RunResult| r.queries.as_ref().map_or("-".into(), f)
    };
    let mut rows: Vec<(&'static str, Vec<String>)> = vec![
        ("duration", each(&|r| format!("{:.1} s", r.duration_s))),
        (
            "connections target",
            each(&|r| r.connections.target.to_string()),
        ),
        (
            "established",
            each(&|r| r.connections.established.to_string()),
        ),
        (
            "failed",
            each(&|r| r.connections.failed.values().sum::<u64>().to_string()),
        ),
        ("peak open", each(&|r| r.connections.peak.to_string())),
        (
            "ramp",
            each(&|r| {
                r.connections
                    .ramp_s
                    .map_or("-".into(), |s| format!("{s:.2} s"))
            }),
        ),
        (
            "connect rate",
            each(&|r| {
                r.connections
                    .connect_rate
                    .map_or("-".into(), |c| format!("{}/s", human(c)))
            }),
        ),
        (
            "connect time p50 / p99 / max",
            each(&|r| {
                let c = &r.connections.connect_time_us;
                format!("{} / {} / {}", us(c.p50), us(c.p99), us(c.max))
            }),
        ),
    ];
    if runs.iter().any(|d| d.r.queries.is_some()) {
        rows.extend([
            ("queries sent", each(&q(|q| q.sent.to_string()))),
            (
                "answered",
                each(&q(|q| {
                    format!(
                        "{} ({:.2}%)",
                        q.answered,
                        100.0 * q.answered as f64 / q.sent.max(1) as f64
                    )
                })),
            ),
            ("timed out", each(&q(|q| q.timed_out.to_string()))),
            (
                "errors",
                each(&q(|q| q.errors.values().sum::<u64>().to_string())),
            ),
            (
                "rate target / sent / answered",
                each(&q(|q| {
                    format!(
                        "{} / {} / {} per s",
                        q.rate_target.map_or("-".into(), human),
                        human(q.rate_sent),
                        human(q.rate_achieved)
                    )
                })),
            ),
            ("response time p50", each(&lat(|l| l.p50, false))),
            ("response time p90", each(&lat(|l| l.p90, false))),
            ("response time p99", each(&lat(|l| l.p99, false))),
            ("response time p99.9", each(&lat(|l| l.p999, false))),
            ("response time p99.99", each(&lat(|l| l.p9999, false))),
            ("response time max", each(&lat(|l| l.max, false))),
            (
                "response time mean",
                each(&lat(|l| l.mean.round() as u64, false)),
            ),
            ("service time p50", each(&lat(|l| l.p50, true))),
            ("service time p99", each(&lat(|l| l.p99, true))),
            ("service time p99.9", each(&lat(|l| l.p999, true))),
            ("service time max", each(&lat(|l| l.max, true))),
        ]);
    }
    rows
}
