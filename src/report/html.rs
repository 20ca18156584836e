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
//! connect-time p99 per second; the percentile spectrum of response and service time, HdrHistogram style;
//! connections by outcome; the `--check` verdicts.
//!
//! It reads results and never changes one: what was measured is written
//! before this runs, and a failure here loses nothing of it.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use hdrhistogram::Histogram;
use plotters::prelude::*;
use serde::Deserialize;

use super::chart::{
    axis_number, caption_style, chart_div, colour, decades, escape, label_style, legend,
    legend_line, page_foot, page_head, svg, BLUE_, GREEN_, GREY, HEIGHT, ORANGE, PINK, PURPLE,
    RED_, WIDTH,
};
use super::json::{write_bytes_atomic, RunResult};
pub use super::words::label_of;
use super::words::scenario_words;
use crate::metrics::{decode_histogram, Bucket};
use crate::units::{human, human_us};

/// One run of the report, and what its legend entries say.
pub struct Run<'a> {
    pub label: String,
    pub result: &'a RunResult,
}

/// One second of `throng server --stats-json` (the keys the report uses;
/// a line missing one reads it as 0).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ServerSecond {
    pub t: u64,
    pub unix_s: u64,
    pub connections: i64,
    pub accepted_per_s: u64,
    pub listen_overflows: u64,
    pub listen_drops: u64,
    pub errors: u64,
}

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

/// One second of a run, as the charts draw it.
struct Second {
    t: f64,
    open: f64,
    established_per_s: f64,
    target: Option<f64>,
    sent: Option<f64>,
    answered: Option<f64>,
    timed_out: Option<f64>,
    errors: Option<f64>,
    /// Response time percentiles of the second, µs.
    p50: Option<f64>,
    p99: Option<f64>,
    max: Option<f64>,
    /// Service time percentiles of the second, µs (results that carry
    /// them).
    service_p50: Option<f64>,
    service_p99: Option<f64>,
    /// p99 of the connect times of the second's new connections, µs.
    connect_p99: Option<f64>,
}

/// A run read for drawing.
struct Drawn<'a> {
    label: &'a str,
    r: &'a RunResult,
    seconds: Vec<Second>,
    response: Option<Histogram<u64>>,
    service: Option<Histogram<u64>>,
}

impl<'a> Drawn<'a> {
    fn of(run: &'a Run) -> Result<Drawn<'a>> {
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
        Ok(Drawn {
            label: &run.label,
            r,
            seconds,
            response,
            service,
        })
    }

    fn has_answers(&self) -> bool {
        self.response.as_ref().is_some_and(|h| !h.is_empty())
    }
}

/// The end of the longest run, in seconds.
fn t_max(runs: &[Drawn]) -> f64 {
    runs.iter()
        .flat_map(|d| d.seconds.iter().map(|s| s.t))
        .fold(1.0, f64::max)
}

/// Points drawn on a series too short to be seen as a line (a run of a
/// second or two).
fn dot_size(points: usize) -> u32 {
    if points <= 2 {
        4
    } else {
        0
    }
}

/// Queries per second: target, sent and answered on the left axis,
/// timeouts and errors on the right.
fn rates_chart(runs: &[Drawn]) -> Result<String> {
    let with: Vec<&Drawn> = runs
        .iter()
        .filter(|d| d.seconds.iter().any(|s| s.sent.is_some()))
        .collect();
    let tmax = t_max(runs);
    let top = with
        .iter()
        .flat_map(|d| d.seconds.iter())
        .flat_map(|s| [s.target, s.sent, s.answered])
        .flatten()
        .fold(1.0, f64::max)
        * 1.1;
    let bad_top = with
        .iter()
        .flat_map(|d| d.seconds.iter())
        .flat_map(|s| [s.timed_out, s.errors])
        .flatten()
        .fold(5.0, f64::max)
        * 1.1;
    let one = with.len() == 1;
    svg("queries per second", HEIGHT, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption("Queries per second", caption_style())
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(70)
            .right_y_label_area_size(70)
            .build_cartesian_2d(0f64..tmax, 0f64..top)?
            .set_secondary_coord(0f64..tmax, 0f64..bad_top);
        chart
            .configure_mesh()
            .x_desc("seconds since the start")
            .y_desc("queries/s")
            .y_label_formatter(&|v| axis_number(*v))
            .label_style(label_style())
            .draw()?;
        chart
            .configure_secondary_axes()
            .y_desc("timeouts, errors /s")
            .y_label_formatter(&|v| axis_number(*v))
            .label_style(label_style())
            .draw()?;
        for (i, d) in with.iter().enumerate() {
            let series = |f: fn(&Second) -> Option<f64>| -> Vec<(f64, f64)> {
                d.seconds
                    .iter()
                    .filter_map(|s| f(s).map(|v| (s.t, v)))
                    .collect()
            };
            let c = colour(i);
            let (target_c, sent_c, answered_c, timeout_c, error_c) = if one {
                (GREY, BLUE_, GREEN_, ORANGE, RED_)
            } else {
                (c, c, c, c, c)
            };
            let name = |what: &str| {
                if one {
                    what.to_string()
                } else {
                    format!("{} {what}", d.label)
                }
            };
            let target = series(|s| s.target);
            if !target.is_empty() {
                let style = target_c.stroke_width(2);
                chart
                    .draw_series(DashedLineSeries::new(target, 8, 5, style))?
                    .label(name("target"))
                    .legend(legend_line(style));
            }
            let style = sent_c.stroke_width(if one { 2 } else { 1 });
            let sent = chart.draw_series(LineSeries::new(series(|s| s.sent), style))?;
            if one {
                sent.label(name("sent")).legend(legend_line(style));
            }
            let style = answered_c.stroke_width(3);
            let answered = series(|s| s.answered);
            let dots = dot_size(answered.len());
            chart
                .draw_series(LineSeries::new(answered, style).point_size(dots))?
                .label(name("answered"))
                .legend(legend_line(style));
            let style = timeout_c.stroke_width(2);
            let timeouts = chart.draw_secondary_series(DashedLineSeries::new(
                series(|s| s.timed_out),
                3,
                3,
                style,
            ))?;
            if one {
                timeouts
                    .label("timeouts (right axis)")
                    .legend(legend_line(style));
            }
            let style = error_c.stroke_width(2);
            let errors = chart.draw_secondary_series(DashedLineSeries::new(
                series(|s| s.errors),
                1,
                4,
                style,
            ))?;
            if one {
                errors
                    .label("errors (right axis)")
                    .legend(legend_line(style));
            }
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        Ok(())
    })
}

/// Response time per second: p50, p99 and max on a log axis, with service
/// time p50 and p99 per second (or, from a result without them, the whole
/// run's as flat lines).
fn latency_chart(runs: &[Drawn]) -> Result<Option<String>> {
    let with: Vec<&Drawn> = runs
        .iter()
        .filter(|d| d.seconds.iter().any(|s| s.p50.is_some()))
        .collect();
    let service = |d: &Drawn, q: f64| {
        d.service
            .as_ref()
            .filter(|h| !h.is_empty())
            .map(|h| h.value_at_quantile(q) as f64)
    };
    let per_second = |d: &Drawn| d.seconds.iter().any(|s| s.service_p50.is_some());
    let values = with.iter().flat_map(|d| {
        d.seconds
            .iter()
            .flat_map(|s| [s.p50, s.p99, s.max, s.service_p50, s.service_p99])
            .chain([service(d, 0.5), service(d, 0.99)])
            .flatten()
    });
    let caption = if with.iter().all(|d| per_second(d)) {
        "Response and service time per second (log scale)"
    } else {
        "Response time per second (log scale), service time of the whole run"
    };
    let Some(y) = decades(values) else {
        return Ok(None);
    };
    let tmax = t_max(runs);
    let one = with.len() == 1;
    svg("response time per second", HEIGHT, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(caption, caption_style())
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..tmax, y.clone().log_scale())?;
        chart
            .configure_mesh()
            .x_desc("seconds since the start")
            .y_desc("response time")
            .y_labels(12)
            .y_label_formatter(&|v| human_us(v.round() as u64))
            .label_style(label_style())
            .draw()?;
        for (i, d) in with.iter().enumerate() {
            let c = colour(i);
            let (p50_c, p99_c, max_c, service_c) = if one {
                (BLUE_, ORANGE, RED_, PURPLE)
            } else {
                (c, c, c, c)
            };
            let name = |what: &str| {
                if one {
                    what.to_string()
                } else {
                    format!("{} {what}", d.label)
                }
            };
            let series = |f: fn(&Second) -> Option<f64>| -> Vec<(f64, f64)> {
                d.seconds
                    .iter()
                    .filter_map(|s| f(s).filter(|v| *v > 0.0).map(|v| (s.t, v)))
                    .collect()
            };
            let style = p50_c.stroke_width(2);
            let p50 = chart.draw_series(DashedLineSeries::new(series(|s| s.p50), 8, 4, style))?;
            if one {
                p50.label(name("p50")).legend(legend_line(style));
            }
            let style = p99_c.stroke_width(3);
            let p99 = series(|s| s.p99);
            let dots = dot_size(p99.len());
            chart
                .draw_series(LineSeries::new(p99, style).point_size(dots))?
                .label(name("p99"))
                .legend(legend_line(style));
            let style = max_c.stroke_width(1);
            let max = chart.draw_series(LineSeries::new(series(|s| s.max), style))?;
            if one {
                max.label(name("max")).legend(legend_line(style));
            }
            if per_second(d) {
                for (f, what, dash) in [
                    (series(|s| s.service_p50), "service p50", 2),
                    (series(|s| s.service_p99), "service p99", 6),
                ] {
                    let style = service_c.mix(0.8).stroke_width(2);
                    let line = chart.draw_series(DashedLineSeries::new(f, dash, 4, style))?;
                    if one {
                        line.label(what).legend(legend_line(style));
                    }
                }
                continue;
            }
            let end = d.seconds.last().map_or(tmax, |s| s.t);
            for (q, what, dash) in [(0.5, "service p50", 2), (0.99, "service p99", 6)] {
                let Some(v) = service(d, q).filter(|v| *v > 0.0) else {
                    continue;
                };
                let style = service_c.mix(0.8).stroke_width(2);
                let line = chart.draw_series(DashedLineSeries::new(
                    [(0.0, v), (end, v)],
                    dash,
                    4,
                    style,
                ))?;
                if one {
                    line.label(format!("{what} (whole run)"))
                        .legend(legend_line(style));
                }
            }
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        Ok(())
    })
    .map(Some)
}

/// Connect time p99 per second (log scale), a line per run: how long the
/// second's new connections took to be established, over the ramp and
/// any churn. None when no result has it.
fn connect_chart(runs: &[Drawn]) -> Result<Option<String>> {
    let with: Vec<&Drawn> = runs
        .iter()
        .filter(|d| d.seconds.iter().any(|s| s.connect_p99.is_some()))
        .collect();
    let values = with
        .iter()
        .flat_map(|d| d.seconds.iter().filter_map(|s| s.connect_p99));
    let Some(y) = decades(values) else {
        return Ok(None);
    };
    let tmax = t_max(runs);
    svg("connect time per second", HEIGHT, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption("Connect time p99 per second (log scale)", caption_style())
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..tmax, y.clone().log_scale())?;
        chart
            .configure_mesh()
            .x_desc("seconds since the start")
            .y_desc("connect time p99")
            .y_labels(12)
            .y_label_formatter(&|v| human_us(v.round() as u64))
            .label_style(label_style())
            .draw()?;
        for (i, d) in with.iter().enumerate() {
            let style = colour(i).stroke_width(2);
            let points: Vec<(f64, f64)> = d
                .seconds
                .iter()
                .filter_map(|s| s.connect_p99.filter(|v| *v > 0.0).map(|v| (s.t, v)))
                .collect();
            let dots = dot_size(points.len());
            chart
                .draw_series(LineSeries::new(points, style).point_size(dots.max(2)))?
                .label(if with.len() == 1 {
                    "connect p99".to_string()
                } else {
                    format!("{} connect p99", d.label)
                })
                .legend(legend_line(style));
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        Ok(())
    })
    .map(Some)
}

/// Server seconds placed on a run's time axis (by wall-clock second).
fn server_on_run<'s>(d: &Drawn, server: &'s [ServerSecond]) -> Vec<(f64, &'s ServerSecond)> {
    let Some(first) = d.r.per_second.first() else {
        return Vec::new();
    };
    let tmax = d.seconds.last().map_or(0.0, |s| s.t) + 1.0;
    server
        .iter()
        .map(|s| (first.t as f64 + s.unix_s as f64 - first.unix_s as f64, s))
        .filter(|(t, _)| *t >= 0.0 && *t <= tmax)
        .collect()
}

/// Open connections (left axis) and connections established per second
/// (right axis), the end of the ramp marked; with a server's stats, its
/// accepts, listen queue overflows and drops per second on the right axis.
fn ramp_chart(runs: &[Drawn], server: Option<&[ServerSecond]>) -> Result<String> {
    let tmax = t_max(runs);
    let srv: Vec<(f64, &ServerSecond)> = match (server, runs.first()) {
        (Some(s), Some(d)) => server_on_run(d, s),
        _ => Vec::new(),
    };
    let top = runs
        .iter()
        .flat_map(|d| d.seconds.iter().map(|s| s.open))
        .chain([runs
            .iter()
            .map(|d| d.r.connections.peak as f64)
            .fold(0.0, f64::max)])
        .fold(1.0, f64::max)
        * 1.1;
    let rate_top = runs
        .iter()
        .flat_map(|d| d.seconds.iter().map(|s| s.established_per_s))
        .chain(srv.iter().flat_map(|(_, s)| {
            [
                s.accepted_per_s as f64,
                s.listen_overflows as f64,
                s.listen_drops as f64,
            ]
        }))
        .fold(1.0, f64::max)
        * 1.1;
    let one = runs.len() == 1;
    let title = if srv.is_empty() {
        "Connections: open, and established per second"
    } else {
        "Connections: open, established per second; the server's accepts and listen queue"
    };
    svg("connections", HEIGHT, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, caption_style())
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(70)
            .right_y_label_area_size(70)
            .build_cartesian_2d(0f64..tmax, 0f64..top)?
            .set_secondary_coord(0f64..tmax, 0f64..rate_top);
        chart
            .configure_mesh()
            .x_desc("seconds since the start")
            .y_desc("open connections")
            .y_label_formatter(&|v| axis_number(*v))
            .label_style(label_style())
            .draw()?;
        chart
            .configure_secondary_axes()
            .y_desc("per second")
            .y_label_formatter(&|v| axis_number(*v))
            .label_style(label_style())
            .draw()?;
        for (i, d) in runs.iter().enumerate() {
            let c = colour(i);
            let (open_c, rate_c) = if one { (BLUE_, GREEN_) } else { (c, c) };
            let name = |what: &str| {
                if one {
                    what.to_string()
                } else {
                    format!("{} {what}", d.label)
                }
            };
            let open: Vec<(f64, f64)> = d.seconds.iter().map(|s| (s.t, s.open)).collect();
            let style = open_c.stroke_width(3);
            let dots = dot_size(open.len());
            chart
                .draw_series(LineSeries::new(open, style).point_size(dots))?
                .label(name("open"))
                .legend(legend_line(style));
            let style = rate_c.stroke_width(2);
            let rate = chart.draw_secondary_series(DashedLineSeries::new(
                d.seconds.iter().map(|s| (s.t, s.established_per_s)),
                6,
                3,
                style,
            ))?;
            if one {
                rate.label("established/s (right axis)")
                    .legend(legend_line(style));
            }
            if let Some(ramp) = d.r.connections.ramp_s.filter(|r| *r > 0.0 && one) {
                let style = GREY.stroke_width(1);
                chart.draw_series(DashedLineSeries::new(
                    [(ramp, 0.0), (ramp, top)],
                    4,
                    4,
                    style,
                ))?;
                chart.draw_series(std::iter::once(Text::new(
                    format!("ramp done ({ramp:.2} s)"),
                    (ramp, top * 0.97),
                    label_style().color(&GREY),
                )))?;
            }
        }
        if !srv.is_empty() {
            let points = |f: fn(&ServerSecond) -> u64| -> Vec<(f64, f64)> {
                srv.iter().map(|(t, s)| (*t, f(s) as f64)).collect()
            };
            for (what, f, c, dash) in [
                (
                    "server accepted/s",
                    (|s: &ServerSecond| s.accepted_per_s) as fn(&ServerSecond) -> u64,
                    GREY,
                    (10u32, 4u32),
                ),
                ("ListenOverflows/s", |s| s.listen_overflows, RED_, (3, 3)),
                ("ListenDrops/s", |s| s.listen_drops, PINK, (1, 4)),
            ] {
                let style = c.stroke_width(2);
                chart
                    .draw_secondary_series(DashedLineSeries::new(points(f), dash.0, dash.1, style))?
                    .label(format!("{what} (right axis)"))
                    .legend(legend_line(style));
            }
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        Ok(())
    })
}

/// The highest percentile the spectrum shows: 99.999%.
const SPECTRUM_TOP: f64 = 1e5;

/// Points of a histogram's percentile spectrum: x = 1/(1-q), y the value
/// (µs), from p0 to p99.999 (the last point the value there).
fn spectrum_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = h
        .iter_quantiles(super::hgrm::TICKS_PER_HALF_DISTANCE)
        .map(|v| (v.quantile_iterated_to(), v.value_iterated_to() as f64))
        .filter(|(q, _)| *q < 1.0)
        .map(|(q, v)| (1.0 / (1.0 - q), v.max(1.0)))
        .filter(|(x, _)| *x < SPECTRUM_TOP)
        .collect();
    let top = 1.0 - 1.0 / SPECTRUM_TOP;
    points.push((SPECTRUM_TOP, (h.value_at_quantile(top) as f64).max(1.0)));
    points
}

/// One curve of the spectrum: the run's number and the run, response
/// (true) or service time, its points.
type Curve<'a, 'd> = (usize, &'a Drawn<'d>, bool, Vec<(f64, f64)>);

/// The percentile spectrum of response (solid) and service (dashed) time,
/// HdrHistogram style: percentiles on a log axis of 1/(1-q).
fn spectrum_chart(runs: &[Drawn]) -> Result<Option<String>> {
    let with: Vec<&Drawn> = runs.iter().filter(|d| d.has_answers()).collect();
    let curves: Vec<Curve> = with
        .iter()
        .enumerate()
        .flat_map(|(i, d)| {
            [(d.response.as_ref(), true), (d.service.as_ref(), false)]
                .into_iter()
                .filter_map(move |(h, response)| {
                    h.filter(|h| !h.is_empty())
                        .map(|h| (i, *d, response, spectrum_points(h)))
                })
        })
        .collect();
    let Some(y) = decades(curves.iter().flat_map(|c| c.3.iter().map(|p| p.1))) else {
        return Ok(None);
    };
    let one = with.len() == 1;
    svg("percentile spectrum", HEIGHT + 40, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                "Percentile spectrum: response time (solid) and service time (dashed)",
                caption_style(),
            )
            .margin(12)
            .margin_right(30)
            .x_label_area_size(42)
            .y_label_area_size(80)
            .build_cartesian_2d((1f64..SPECTRUM_TOP).log_scale(), y.clone().log_scale())?;
        chart
            .configure_mesh()
            .x_desc("percentile")
            .y_desc("time")
            .x_labels(6)
            .x_label_formatter(&|x| percentile_label(*x))
            .y_labels(12)
            .y_label_formatter(&|v| human_us(v.round() as u64))
            .label_style(label_style())
            .draw()?;
        for (i, d, response, points) in curves {
            let c = if one {
                if response {
                    BLUE_
                } else {
                    PURPLE
                }
            } else {
                colour(i)
            };
            let what = if response { "response" } else { "service" };
            let name = if one {
                format!("{what} time")
            } else {
                format!("{} {what}", d.label)
            };
            if response {
                let style = c.stroke_width(3);
                chart
                    .draw_series(LineSeries::new(points, style))?
                    .label(name)
                    .legend(legend_line(style));
            } else {
                let style = c.stroke_width(2);
                chart
                    .draw_series(DashedLineSeries::new(points, 8, 5, style))?
                    .label(name)
                    .legend(legend_line(style));
            }
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        Ok(())
    })
    .map(Some)
}

/// "99.9%" for x = 1000 = 1/(1-0.999); decades only.
fn percentile_label(x: f64) -> String {
    let decade = x.log10();
    if (decade - decade.round()).abs() > 1e-6 {
        return String::new();
    }
    match decade.round() as i32 {
        0 => "0%".into(),
        1 => "90%".into(),
        n => format!("99.{}%", "9".repeat(n as usize - 2)).replace(".%", "%"),
    }
}

/// The rows of the outcomes chart: what happened to the connections.
fn outcome_rows(runs: &[Drawn]) -> Vec<(String, Vec<u64>)> {
    let each = |f: &dyn Fn(&RunResult) -> u64| runs.iter().map(|d| f(d.r)).collect::<Vec<_>>();
    let mut rows = vec![
        ("attempted".to_string(), each(&|r| r.connections.attempted)),
        ("established".into(), each(&|r| r.connections.established)),
    ];
    if runs.iter().any(|d| d.r.scenario.verify) {
        rows.push(("verified".into(), each(&|r| r.connections.verified)));
        rows.push(("unverified".into(), each(&|r| r.connections.unverified)));
    }
    for b in Bucket::ALL {
        let counts = each(&|r| r.connections.failed.get(b.key()).copied().unwrap_or(0));
        if counts.iter().any(|n| *n > 0) {
            rows.push((format!("failed: {}", b.key()), counts));
        }
    }
    let peer = each(&|r| r.connections.peer_closed);
    if peer.iter().any(|n| *n > 0) {
        rows.push(("closed by the peer after answering".into(), peer));
    }
    let failed = each(&|r| r.connections.failed.values().sum());
    if failed.iter().all(|n| *n == 0) {
        rows.push(("failed".into(), failed));
    }
    rows
}

/// Connections by outcome: a bar per run for each bucket, its count
/// written beside it.
fn outcomes_chart(runs: &[Drawn]) -> Result<String> {
    let rows = outcome_rows(runs);
    let n = runs.len().max(1) as i32;
    let bar = if n == 1 { 22 } else { 16 };
    let row_h = bar * n + 14;
    let top = 56;
    let height = (top + row_h * rows.len() as i32 + 20) as u32;
    let max = rows
        .iter()
        .flat_map(|(_, c)| c.iter().copied())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let (x0, x1) = (300, WIDTH as i32 - 140);
    svg("connections by outcome", height, |root| {
        root.draw(&Text::new(
            "Connections by outcome",
            (WIDTH as i32 / 2, 12),
            caption_style().pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Top,
            )),
        ))?;
        if n > 1 {
            let mut x = x0;
            for (i, d) in runs.iter().enumerate() {
                root.draw(&Rectangle::new([(x, 40), (x + 14, 52)], colour(i).filled()))?;
                root.draw(&Text::new(d.label.to_string(), (x + 20, 40), label_style()))?;
                x += 30 + (d.label.len() as i32 * 8).max(60);
            }
        }
        for (row, (name, counts)) in rows.iter().enumerate() {
            let y = top + row as i32 * row_h;
            root.draw(&Text::new(
                name.clone(),
                (16, y + row_h / 2 - 8),
                label_style(),
            ))?;
            for (i, &count) in counts.iter().enumerate() {
                let yb = y + 7 + i as i32 * bar;
                let w = ((x1 - x0) as f64 * count as f64 / max).round() as i32;
                let c = if n == 1 {
                    if name.starts_with("failed:") {
                        RED_
                    } else {
                        BLUE_
                    }
                } else {
                    colour(i)
                };
                root.draw(&Rectangle::new(
                    [(x0, yb), (x0 + w.max(1), yb + bar - 3)],
                    c.filled(),
                ))?;
                root.draw(&Text::new(
                    count.to_string(),
                    (x0 + w.max(1) + 8, yb + 2),
                    label_style(),
                ))?;
            }
            root.draw(&PathElement::new(
                vec![(x0, y + row_h), (x1, y + row_h)],
                GREY.mix(0.3).stroke_width(1),
            ))?;
        }
        root.draw(&PathElement::new(
            vec![(x0, top), (x0, top + row_h * rows.len() as i32)],
            BLACK.stroke_width(1),
        ))?;
        Ok(())
    })
}

/// The summary's figures, a row each, a column per run.
fn figures(runs: &[Drawn]) -> Vec<(&'static str, Vec<String>)> {
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
    let q = |f: fn(&super::json::Queries) -> String| {
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

/// The whole page.
pub fn render(runs: &[Run], server: Option<&[ServerSecond]>) -> Result<String> {
    let drawn: Vec<Drawn> = runs.iter().map(Drawn::of).collect::<Result<_>>()?;
    anyhow::ensure!(!drawn.is_empty(), "a report needs a result");
    let mut p = String::new();
    let title = if drawn.len() == 1 {
        format!("throng report: {}", drawn[0].label)
    } else {
        format!("throng report: {} runs", drawn.len())
    };
    p.push_str(&page_head(&title));
    // The scenario, a table per run.
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
        for (k, v) in scenario_words(d.r) {
            let _ = writeln!(p, "<tr><th>{}</th><td>{}</td></tr>", k, escape(&v));
        }
        let _ = writeln!(p, "</table>");
    }
    // The summary's figures side by side.
    let _ = write!(
        p,
        "<h2>Summary</h2>\n<table class=\"summary\">\n<tr><th></th>"
    );
    for d in &drawn {
        let _ = write!(p, "<th>{}</th>", escape(d.label));
    }
    let _ = writeln!(p, "</tr>");
    for (k, vals) in figures(&drawn) {
        let _ = write!(p, "<tr><th>{k}</th>");
        for v in vals {
            let _ = write!(p, "<td class=\"n\">{}</td>", escape(&v));
        }
        let _ = writeln!(p, "</tr>");
    }
    let _ = writeln!(p, "</table>");
    // The checks, when there are any.
    if drawn.iter().any(|d| !d.r.checks.is_empty()) {
        let _ = writeln!(
            p,
            "<h2>Checks</h2>\n<table class=\"checks\">\n<tr>{}<th>verdict</th><th>check</th><th>measured</th></tr>",
            if drawn.len() > 1 { "<th>run</th>" } else { "" }
        );
        for d in &drawn {
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
    // The charts.
    let _ = writeln!(p, "<h2>Charts</h2>");
    let several = drawn.len() > 1;
    if drawn.iter().any(|d| d.r.queries.is_some()) {
        chart_div(
            &mut p,
            "rates",
            &rates_chart(&drawn)?,
            if several {
                "A colour per run: answered (thick), sent (thin), target (dashed); timeouts \
                 (short dashes) and errors (dots) on the right axis."
            } else {
                "Per second: the rate asked for, queries sent and answered; timeouts and \
                 errors on the right axis."
            },
        );
        match latency_chart(&drawn)? {
            Some(svg) => chart_div(
                &mut p,
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
    } else {
        let _ = writeln!(
            p,
            "<p class=\"note\">No queries in {}: connections only.</p>",
            if several { "these runs" } else { "this run" }
        );
    }
    let server_note = match server {
        Some(s) if !s.is_empty() => format!(
            "The server's seconds ({} of them, from --server-stats) are placed by wall-clock second on {}'s time.",
            s.len(),
            drawn[0].label
        ),
        Some(_) => "The --server-stats file holds no second.".into(),
        None => String::new(),
    };
    chart_div(&mut p, "ramp", &ramp_chart(&drawn, server)?, &server_note);
    if let Some(svg) = connect_chart(&drawn)? {
        chart_div(
            &mut p,
            "connect",
            &svg,
            "From connect() to established, for the connections established in each second \
             (the top of a quarter-octave bucket: within a quarter above the true p99; of \
             several processes or hosts merged, the slowest one's).",
        );
    }
    if let Some(svg) = spectrum_chart(&drawn)? {
        chart_div(
            &mut p,
            "spectrum",
            &svg,
            "HdrHistogram's percentile distribution: the time under which each share of the \
             queries was answered, from p0 to p99.999 (`--hgrm` writes the same as text).",
        );
    }
    chart_div(&mut p, "outcomes", &outcomes_chart(&drawn)?, "");
    // The summary as printed, for the whole story.
    let _ = writeln!(p, "<h2>Summary as printed</h2>");
    for d in &drawn {
        let mut text = Vec::new();
        match d.r.outcome() {
            Ok(o) => {
                let _ = super::summary(&d.r.scenario, &o, &mut text);
                for l in super::check::lines(
                    &d.r.checks
                        .iter()
                        .filter_map(|v| super::check::parse(&v.expr).ok())
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
    p.push_str(&page_foot());
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::merge::tests::{outcome, slice};

    #[test]
    fn percentile_labels_at_decades() {
        assert_eq!(percentile_label(1.0), "0%");
        assert_eq!(percentile_label(10.0), "90%");
        assert_eq!(percentile_label(100.0), "99%");
        assert_eq!(percentile_label(1000.0), "99.9%");
        assert_eq!(percentile_label(1e5), "99.999%");
        assert_eq!(percentile_label(20.0), "");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape("<a href='x'>&"), "&lt;a href=&#39;x&#39;&gt;&amp;");
    }

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
                let mut s = crate::engine::Sample {
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
}
