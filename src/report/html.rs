//! The report a person looks at: one HTML file that needs nothing else
//! (inline SVG charts drawn by plotters, inline CSS, no script, no font
//! file, nothing fetched when it is opened) of one run, or of several
//! overlaid with a legend entry each (a comparison of transports, runs
//! given to `throng report`).
//!
//! What it shows: the scenario in words and the summary's figures; per
//! second, the rates (target, sent, answered) with timeouts and errors;
//! p50, p99 and max response time per second with service time p50, p99;
//! open connections and the connect rate over the ramp (with a server's
//! `--stats-json`: its accepts, listen overflows and drops) and the
//! connect-time p99 per second; the percentile spectrum of response and
//! service time, HdrHistogram style; connections by outcome; the `--check`
//! verdicts; of a push run (`--proto push`), the messages received and
//! lost per second, the jitter and one-way delay p99 per second and their
//! spectra, and its figures.
//!
//! Its rooms: `drawn` (a run read for drawing), `charts` (the SVG charts,
//! each through the one chart helper of `report::chart`), `push` (a push
//! run's charts and figures), `tables` (the tables and the summary as
//! printed); the scenario's words come from
//! `report::describe`. This file reads a server's `--stats-json` and puts the
//! page together.
//!
//! It reads results and never changes one: what was measured is written
//! before this runs, and a failure here loses nothing of it.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{anyhow, Context, Result};

mod charts;
mod drawn;
mod push;
mod tables;

use charts::{
    connect_chart, latency_chart, outcomes_chart, ramp_chart, rates_chart, spectrum_chart,
    RESPONSE_SPECTRA,
};
use drawn::Drawn;
use push::{push_rates_chart, push_times_chart, PUSH_SPECTRA};
use tables::{checks_table, printed_summaries, scenario_tables, summary_table};

use super::chart::{chart_div, page_foot, page_head};
pub use super::describe::label_of;
use super::json::write_bytes_atomic;
use crate::outcome::RunResult;

/// One run of the report, and what its legend entries say.
pub struct Run<'a> {
    pub label: String,
    pub result: &'a RunResult,
}

/// One second of `throng server --stats-json`: the type the server writes.
pub use crate::outcome::server_second::ServerSecond;

/// Reads a `throng server --stats-json` file: one JSON object per line.
pub fn read_server_stats(path: &Path) -> Result<Vec<ServerSecond>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("--server-stats {}", path.display()))?;
    parse_server_stats(&text).map_err(|e| anyhow!("--server-stats {}: {e}", path.display()))
}

/// The seconds of a `--stats-json` text; a line that is not one is named.
pub fn parse_server_stats(text: &str) -> Result<Vec<ServerSecond>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| {
                format!(
                    "line {}: not a `throng server --stats-json` second: {e}",
                    i + 1
                )
            })
        })
        .collect()
}

/// Writes the report of `runs` to `path` (atomically: a reader never sees
/// half a page).
pub fn write(path: &Path, runs: &[Run], server: Option<&[ServerSecond]>) -> Result<()> {
    let page = render(runs, server)?;
    write_bytes_atomic(path, page.as_bytes(), "--html")
}

/// The whole page.
pub fn render(runs: &[Run], server: Option<&[ServerSecond]>) -> Result<String> {
    let drawn: Vec<Drawn> = runs.iter().map(Drawn::new).collect::<Result<_>>()?;
    anyhow::ensure!(!drawn.is_empty(), "a report needs a result");
    let mut p = String::new();
    let title = if drawn.len() == 1 {
        format!("throng report: {}", drawn[0].label)
    } else {
        format!("throng report: {} runs", drawn.len())
    };
    p.push_str(&page_head(&title));
    scenario_tables(&mut p, &drawn);
    summary_table(&mut p, &drawn);
    checks_table(&mut p, &drawn);
    charts_section(&mut p, &drawn, server)?;
    printed_summaries(&mut p, &drawn);
    p.push_str(&page_foot());
    Ok(p)
}

/// The charts, each with its note.
fn charts_section(p: &mut String, drawn: &[Drawn], server: Option<&[ServerSecond]>) -> Result<()> {
    let _ = writeln!(p, "<h2>Charts</h2>");
    let several = drawn.len() > 1;
    if drawn.iter().any(|d| d.r.queries.is_some()) {
        chart_div(
            p,
            "rates",
            &rates_chart(drawn)?,
            if several {
                "A colour per run: answered (thick), sent (thin), target (dashed); timeouts \
                 (short dashes) and errors (dots) on the right axis."
            } else {
                "Per second: the rate asked for, queries sent and answered; timeouts and \
                 errors on the right axis."
            },
        );
        match latency_chart(drawn)? {
            Some(svg) => chart_div(
                p,
                "latency",
                &svg,
                if several {
                    "A colour per run: p99 (solid), p50 (dashed), max (thin); service time p50 \
                     and p99 in short dashes (flat: the whole run's, from a result written \
                     before seconds kept service times). Response time counts from when each \
                     query was due, service time from when it was sent."
                } else {
                    "Response time counts from when each query was due (coordinated omission \
                     corrected), service time from when it was sent (flat lines: the whole \
                     run's, from a result written before seconds kept service times)."
                },
            ),
            None => {
                let _ = writeln!(
                    p,
                    "<p class=\"note\">No query was answered: no latency to draw.</p>"
                );
            }
        }
    } else if !drawn.iter().any(|d| d.has_push()) {
        let _ = writeln!(
            p,
            "<p class=\"note\">No queries in {}: connections only.</p>",
            if several { "these runs" } else { "this run" }
        );
    }
    push_charts(p, drawn)?;
    let server_note = match server {
        Some(s) if !s.is_empty() => format!(
            "The server's seconds ({} of them, from --server-stats) are placed by wall-clock second on {}'s time.",
            s.len(),
            drawn[0].label
        ),
        Some(_) => "The --server-stats file holds no second.".into(),
        None => String::new(),
    };
    chart_div(p, "ramp", &ramp_chart(drawn, server)?, &server_note);
    if let Some(svg) = connect_chart(drawn)? {
        chart_div(
            p,
            "connect",
            &svg,
            "From connect() to established, for the connections established in each second \
             (the top of a quarter-octave bucket: within a quarter above the true p99; of \
             several processes or hosts merged, the slowest one's).",
        );
    }
    if let Some(svg) = spectrum_chart(drawn, &RESPONSE_SPECTRA)? {
        chart_div(
            p,
            "spectrum",
            &svg,
            "HdrHistogram's percentile distribution: the time under which each share of the \
             queries was answered, from p0 to p99.999 (`--hgrm` writes the same as text).",
        );
    }
    chart_div(p, "outcomes", &outcomes_chart(drawn)?, "");
    Ok(())
}

/// A push run's charts (`--proto push`), each with its note; nothing for
/// runs without push.
fn push_charts(p: &mut String, drawn: &[Drawn]) -> Result<()> {
    if let Some(svg) = push_rates_chart(drawn)? {
        chart_div(
            p,
            "push-rates",
            &svg,
            "Per second: the messages received (each sequence number once) and those found \
             lost (numbers skipped; at a connection's end, the periods since its last \
             message) on the right axis.",
        );
    }
    if let Some(svg) = push_times_chart(drawn)? {
        chart_div(
            p,
            "push-times",
            &svg,
            "Jitter: the gap between two arrivals on a connection minus the period times the \
             numbers it spans. One-way delay: from the server's send stamp to the client's \
             read. Each second's p99 is the top of a quarter-octave bucket (of several \
             processes or hosts merged, the highest).",
        );
    }
    if let Some(svg) = spectrum_chart(drawn, &PUSH_SPECTRA)? {
        chart_div(
            p,
            "push-spectrum",
            &svg,
            "HdrHistogram's percentile distribution of the whole run's jitter and one-way \
             delay, from p0 to p99.999 (`--hgrm` writes the same as text, with the gap \
             between arrivals).",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{outcome, slice};

    #[test]
    fn server_stats_lines_are_read_and_a_bad_one_named() {
        let s = parse_server_stats(
            "{\"t\":1,\"unix_s\":100,\"accepted_per_s\":5,\"listen_overflows\":2}\n\n{\"t\":2}\n",
        )
        .unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].accepted_per_s, s[0].listen_overflows), (5, 2));
        assert_eq!(s[1].t, 2);
        let e = parse_server_stats("{\"t\":1}\nnot json\n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn a_page_has_every_chart_and_the_scenario() {
        let mut r = slice(1, &outcome(2, 3.0));
        r.per_second = (1..=3)
            .map(|t| {
                let mut s = crate::outcome::Sample {
                    t,
                    unix_s: 1_700_000_000 + t,
                    connections: 9,
                    established_per_s: if t == 1 { 9 } else { 0 },
                    target: Some(100.0),
                    sent: Some(100),
                    answered: Some(90),
                    timed_out: Some(1),
                    errors: Some(0),
                    ..Default::default()
                };
                let mut h = crate::metrics::new_histogram();
                h.record(100 * t).unwrap();
                s.set_latency(&h, true);
                s
            })
            .collect();
        let page = render(
            &[Run {
                label: "a <run>".into(),
                result: &r,
            }],
            None,
        )
        .unwrap();
        for id in ["rates", "latency", "ramp", "spectrum", "outcomes"] {
            assert!(page.contains(&format!("id=\"{id}\"")), "{id}");
        }
        assert!(page.contains("a &lt;run&gt;"));
        assert!(!page.contains("<script"));
        assert!(
            page.contains("<th>protocol</th><td>DNS, example.com</td>"),
            "{page}"
        );
    }

    #[test]
    fn a_run_without_queries_draws_connections_only() {
        let mut o = outcome(1, 2.0);
        o.queries = None;
        let r = slice(1, &o);
        let page = render(
            &[Run {
                label: "conns".into(),
                result: &r,
            }],
            None,
        )
        .unwrap();
        assert!(page.contains("id=\"ramp\"") && page.contains("id=\"outcomes\""));
        assert!(!page.contains("id=\"rates\"") && !page.contains("id=\"spectrum\""));
        assert!(page.contains("connections only"));
    }

    #[test]
    fn a_push_run_draws_its_messages_times_and_spectrum() {
        let r = crate::fixtures::push_result(true);
        let page = render(
            &[Run {
                label: "push".into(),
                result: &r,
            }],
            None,
        )
        .unwrap();
        for id in [
            "push-rates",
            "push-times",
            "push-spectrum",
            "ramp",
            "outcomes",
        ] {
            assert!(page.contains(&format!("id=\"{id}\"")), "{id}");
        }
        assert!(!page.contains("id=\"rates\"") && !page.contains("connections only"));
        for row in [
            "<tr><th>push received</th><td class=\"n\">390 of 400 expected (97.50%)</td></tr>",
            "<tr><th>push lost</th><td class=\"n\">10 (2.50%) on 1 connection(s)</td></tr>",
            "<th>protocol</th><td>push: a message every 10.0 ms on each connection",
        ] {
            assert!(page.contains(row), "no {row}");
        }
        assert!(page.contains("(monotonic clock)"));
    }

    #[test]
    fn a_push_run_without_delay_says_why_and_draws_the_jitter() {
        let r = crate::fixtures::push_result(false);
        let page = render(
            &[Run {
                label: "push".into(),
                result: &r,
            }],
            None,
        )
        .unwrap();
        assert!(page.contains("id=\"push-spectrum\""));
        assert!(page.contains(">\njitter\n</text>") && !page.contains(">\none-way delay\n</text>"));
        assert!(page.contains("- (not measured: the server is not on this host and --clock-sync"));
    }

    #[test]
    fn a_query_run_beside_a_push_run_keeps_its_rows_and_the_push_ones_say_none() {
        let q = slice(1, &outcome(2, 3.0));
        let p = crate::fixtures::push_result(true);
        let runs = [
            Run {
                label: "dns".into(),
                result: &q,
            },
            Run {
                label: "push".into(),
                result: &p,
            },
        ];
        let page = render(&runs, None).unwrap();
        assert!(page.contains("id=\"rates\"") && page.contains("id=\"push-rates\""));
        assert!(page.contains(
            "<tr><th>push received</th><td class=\"n\">-</td><td class=\"n\">390 of 400"
        ));
        // The query run's page is the page without the push run's parts.
        let alone = render(&runs[..1], None).unwrap();
        assert!(!alone.contains("push"), "a query run's page speaks of push");
    }
}
