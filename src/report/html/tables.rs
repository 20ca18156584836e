//! The report's tables and text: the scenario in words, the summary's
//! figures side by side, the `--check` verdicts, the summary as printed.

use std::fmt::Write as _;

use super::drawn::Drawn;
use crate::outcome::RunResult;
use crate::report::chart::{colour, escape};
use crate::report::describe::scenario_rows;
use crate::units::{human, human_us};

/// The summary's figures, a row each, a column per run: the connections',
/// the queries' when a run has queries, the push rows when one has push.
pub(super) fn summary_rows(runs: &[Drawn]) -> Vec<(&'static str, Vec<String>)> {
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
    let q = |f: fn(&crate::outcome::Queries) -> String| {
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
    rows.extend(super::push::push_rows(runs));
    rows
}

/// The scenario in words, a table per run.
pub(super) fn scenario_tables(p: &mut String, drawn: &[Drawn]) {
    let _ = writeln!(p, "<h2>Scenario</h2>");
    for (i, d) in drawn.iter().enumerate() {
        if drawn.len() > 1 {
            let c = colour(i);
            let _ = writeln!(
                p,
                "<h3><span class=\"swatch\" style=\"background:rgb({},{},{})\"></span>{}</h3>",
                c.0,
                c.1,
                c.2,
                escape(d.label)
            );
        }
        let _ = writeln!(p, "<table class=\"scenario\">");
        for (k, v) in scenario_rows(d.r) {
            let _ = writeln!(p, "<tr><th>{}</th><td>{}</td></tr>", k, escape(&v));
        }
        let _ = writeln!(p, "</table>");
    }
}

/// The summary's figures side by side, a column per run.
pub(super) fn summary_table(p: &mut String, drawn: &[Drawn]) {
    let _ = write!(
        p,
        "<h2>Summary</h2>\n<table class=\"summary\">\n<tr><th></th>"
    );
    for d in drawn {
        let _ = write!(p, "<th>{}</th>", escape(d.label));
    }
    let _ = writeln!(p, "</tr>");
    for (k, vals) in summary_rows(drawn) {
        let _ = write!(p, "<tr><th>{k}</th>");
        for v in vals {
            let _ = write!(p, "<td class=\"n\">{}</td>", escape(&v));
        }
        let _ = writeln!(p, "</tr>");
    }
    let _ = writeln!(p, "</table>");
}

/// The `--check` verdicts, when there are any.
pub(super) fn checks_table(p: &mut String, drawn: &[Drawn]) {
    if drawn.iter().any(|d| !d.r.checks.is_empty()) {
        let _ = writeln!(
            p,
            "<h2>Checks</h2>\n<table class=\"checks\">\n<tr>{}<th>verdict</th><th>check</th><th>measured</th></tr>",
            if drawn.len() > 1 { "<th>run</th>" } else { "" }
        );
        for d in drawn {
            for v in &d.r.checks {
                let measured = crate::report::check::parse(&v.expr)
                    .map(|c| c.show(v))
                    .unwrap_or_else(|_| v.value.map_or("-".into(), |m| format!("{m}")));
                let _ = writeln!(
                    p,
                    "<tr>{}<td class=\"{}\">{}</td><td>{}</td><td>{}</td></tr>",
                    if drawn.len() > 1 {
                        format!("<td>{}</td>", escape(d.label))
                    } else {
                        String::new()
                    },
                    if v.pass { "pass" } else { "fail" },
                    if v.pass { "PASS" } else { "FAIL" },
                    escape(&v.expr),
                    escape(&measured)
                );
            }
        }
        let _ = writeln!(p, "</table>");
    }
}

/// The summary as printed, for the whole story: a `details` per run.
pub(super) fn printed_summaries(p: &mut String, drawn: &[Drawn]) {
    let several = drawn.len() > 1;
    let _ = writeln!(p, "<h2>Summary as printed</h2>");
    for d in drawn {
        let mut text = Vec::new();
        match d.r.outcome() {
            Ok(o) => {
                let v = d.r.verdict.clone().unwrap_or_else(|| {
                    crate::report::judge(&d.r.scenario, &o, d.r, d.r.scenario.max_failures)
                });
                let _ = crate::report::summary(&d.r.scenario, &o, &v, &mut text);
                for l in crate::report::check::lines(
                    &d.r.checks
                        .iter()
                        .filter_map(|v| crate::report::check::parse(&v.expr).ok())
                        .collect::<Vec<_>>(),
                    &d.r.checks,
                ) {
                    text.extend_from_slice(l.as_bytes());
                    text.push(b'\n');
                }
            }
            Err(e) => text.extend_from_slice(format!("cannot read the result: {e:#}").as_bytes()),
        }
        let _ = writeln!(
            p,
            "<details{}><summary>{}</summary>\n<pre>{}</pre>\n</details>",
            if several { "" } else { " open" },
            escape(d.label),
            escape(&String::from_utf8_lossy(&text))
        );
    }
}
