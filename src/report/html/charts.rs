//! The report's charts, each an SVG string: rates, response time,
//! connect time, connections over the ramp, the percentile spectrum and
//! connections by outcome.

use anyhow::Result;
use hdrhistogram::Histogram;
use plotters::prelude::*;

use super::drawn::{Drawn, Second};
use super::ServerSecond;
use crate::metrics::Bucket;
use crate::outcome::RunResult;
use crate::report::chart::{
    axis_label, caption_style, colour, decades, label_style, legend_line, plot, plot_dual, svg,
    time_label, Frame, Right, BLUE_, GREEN_, GREY, HEIGHT, ORANGE, PINK, PURPLE, RED_, WIDTH,
};

/// The frame of a chart of times per second: a log axis of µs on the
/// left, a dozen labels.
pub(super) fn time_frame() -> Frame<'static> {
    Frame {
        y_area: 80,
        y_labels: Some(12),
        y_format: &time_label,
        ..Frame::default()
    }
}

/// A per-second series as steps: each second's value held over its
/// second (from t − 1 to t, t the second's end), so the first second
/// starts at 0 and a change inside a second is a jump, not a diagonal.
pub(super) fn steps(points: impl IntoIterator<Item = (f64, f64)>) -> Vec<(f64, f64)> {
    points
        .into_iter()
        .flat_map(|(t, v)| [((t - 1.0).max(0.0), v), (t, v)])
        .collect()
}

/// A log axis over `y` with ticks each once.
pub(super) fn log_axis(y: std::ops::Range<f64>) -> crate::report::chart::LogAxis {
    crate::report::chart::LogAxis::new(y)
}

/// The end of the longest run, in seconds.
pub(super) fn t_max(runs: &[Drawn]) -> f64 {
    runs.iter()
        .flat_map(|d| d.seconds.iter().map(|s| s.t))
        .fold(1.0, f64::max)
}

/// A line's width in an overlay of `runs` runs: each run's line 2 px
/// wider than the next run's (up to 6 px), so that where a later run
/// draws the same values (two runs at one rate, the same connections) the
/// earlier run still shows either side of it. One run: `base`.
pub(super) fn overlay_width(base: u32, i: usize, runs: usize) -> u32 {
    base + 2 * (runs - 1 - i).min(3) as u32
}

/// Points drawn on a series too short to be seen as a line (a run of a
/// second or two).
pub(super) fn dot_size(points: usize) -> u32 {
    if points <= 2 {
        4
    } else {
        0
    }
}

/// Queries per second: target, sent and answered on the left axis,
/// timeouts and errors on the right.
pub(super) fn rates_chart(runs: &[Drawn]) -> Result<String> {
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
    let frame = Frame {
        name: "queries per second",
        caption: "Queries per second",
        y_desc: "queries/s",
        legend: SeriesLabelPosition::LowerRight,
        ..Frame::default()
    };
    let right = Right {
        y: 0f64..bad_top,
        desc: "timeouts, errors /s",
        format: &axis_label,
    };
    plot_dual(&frame, 0f64..tmax, 0f64..top, &right, |chart| {
        for (i, d) in with.iter().enumerate() {
            let series = |f: fn(&Second) -> Option<f64>| -> Vec<(f64, f64)> {
                steps(d.seconds.iter().filter_map(|s| f(s).map(|v| (s.t, v))))
            };
            let c = colour(i);
            let (target_c, sent_c, answered_c, timeout_c, error_c) = if one {
                (GREY, BLUE_, GREEN_, ORANGE, RED_)
            } else {
                (c, c, c, c, c)
            };
            let name = |what: &str| d.entry(one, what);
            let w = |base| overlay_width(base, i, with.len());
            let target = series(|s| s.target);
            if !target.is_empty() {
                let style = target_c.stroke_width(w(2));
                chart
                    .draw_series(DashedLineSeries::new(target, 8, 5, style))?
                    .label(name("target"))
                    .legend(legend_line(style));
            }
            let style = sent_c.stroke_width(if one { 2 } else { w(1) });
            let sent = chart.draw_series(LineSeries::new(series(|s| s.sent), style))?;
            if one {
                sent.label(name("sent")).legend(legend_line(style));
            }
            let style = answered_c.stroke_width(w(3));
            let answered = series(|s| s.answered);
            let dots = dot_size(answered.len());
            chart
                .draw_series(LineSeries::new(answered, style).point_size(dots))?
                .label(name("answered"))
                .legend(legend_line(style));
            let style = timeout_c.stroke_width(w(2));
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
            let style = error_c.stroke_width(w(2));
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
        Ok(())
    })
}

/// Response time per second: p50, p99 and max on a log axis, with service
/// time p50 and p99 per second (or, from a result without them, the whole
/// run's as flat lines).
pub(super) fn latency_chart(runs: &[Drawn]) -> Result<Option<String>> {
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
    let frame = Frame {
        name: "response time per second",
        caption,
        y_desc: "response time",
        ..time_frame()
    };
    plot(&frame, 0f64..tmax, log_axis(y), |chart| {
        for (i, d) in with.iter().enumerate() {
            let c = colour(i);
            let (p50_c, p99_c, max_c, service_c) = if one {
                (BLUE_, ORANGE, RED_, PURPLE)
            } else {
                (c, c, c, c)
            };
            let name = |what: &str| d.entry(one, what);
            let series = |f: fn(&Second) -> Option<f64>| -> Vec<(f64, f64)> {
                steps(
                    d.seconds
                        .iter()
                        .filter_map(|s| f(s).filter(|v| *v > 0.0).map(|v| (s.t, v))),
                )
            };
            let w = |base| overlay_width(base, i, with.len());
            let style = p50_c.stroke_width(w(2));
            let p50 = chart.draw_series(DashedLineSeries::new(series(|s| s.p50), 8, 4, style))?;
            if one {
                p50.label(name("p50")).legend(legend_line(style));
            }
            let style = p99_c.stroke_width(w(3));
            let p99 = series(|s| s.p99);
            let dots = dot_size(p99.len());
            chart
                .draw_series(LineSeries::new(p99, style).point_size(dots))?
                .label(name("p99"))
                .legend(legend_line(style));
            let style = max_c.stroke_width(w(1));
            let max = chart.draw_series(LineSeries::new(series(|s| s.max), style))?;
            if one {
                max.label(name("max")).legend(legend_line(style));
            }
            if per_second(d) {
                for (f, what, dash) in [
                    (series(|s| s.service_p50), "service p50", 2),
                    (series(|s| s.service_p99), "service p99", 6),
                ] {
                    let style = service_c.mix(0.8).stroke_width(w(2));
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
                let style = service_c.mix(0.8).stroke_width(w(2));
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
        Ok(())
    })
    .map(Some)
}

/// Connect time p99 per second (log scale), a line per run: how long the
/// second's new connections took to be established, over the ramp and
/// any churn. None when no result has it.
pub(super) fn connect_chart(runs: &[Drawn]) -> Result<Option<String>> {
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
    let frame = Frame {
        name: "connect time per second",
        caption: "Connect time p99 per second (log scale)",
        y_desc: "connect time p99",
        ..time_frame()
    };
    plot(&frame, 0f64..tmax, log_axis(y), |chart| {
        for (i, d) in with.iter().enumerate() {
            let style = colour(i).stroke_width(overlay_width(2, i, with.len()));
            let points = steps(
                d.seconds
                    .iter()
                    .filter_map(|s| s.connect_p99.filter(|v| *v > 0.0).map(|v| (s.t, v))),
            );
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
pub(super) fn ramp_chart(runs: &[Drawn], server: Option<&[ServerSecond]>) -> Result<String> {
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
    let frame = Frame {
        name: "connections",
        caption: title,
        y_desc: "open connections",
        legend: SeriesLabelPosition::LowerRight,
        ..Frame::default()
    };
    let right = Right {
        y: 0f64..rate_top,
        desc: "per second",
        format: &axis_label,
    };
    plot_dual(&frame, 0f64..tmax, 0f64..top, &right, |chart| {
        for (i, d) in runs.iter().enumerate() {
            let c = colour(i);
            let (open_c, rate_c) = if one { (BLUE_, GREEN_) } else { (c, c) };
            let name = |what: &str| d.entry(one, what);
            let open = steps(d.seconds.iter().map(|s| (s.t, s.open)));
            let w = |base| overlay_width(base, i, runs.len());
            let style = open_c.stroke_width(w(3));
            let dots = dot_size(open.len());
            chart
                .draw_series(LineSeries::new(open, style).point_size(dots))?
                .label(name("open"))
                .legend(legend_line(style));
            let style = rate_c.stroke_width(w(2));
            let rate = chart.draw_secondary_series(DashedLineSeries::new(
                steps(d.seconds.iter().map(|s| (s.t, s.established_per_s))),
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
                steps(srv.iter().map(|(t, s)| (*t, f(s) as f64)))
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
        Ok(())
    })
}

/// The highest percentile the spectrum shows: 99.999%.
pub(super) const SPECTRUM_TOP: f64 = 1e5;

/// Points of a histogram's percentile spectrum: x = 1/(1-q), y the value
/// (µs), from p0 to p99.999 (the last point the value there).
pub(super) fn spectrum_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = h
        .iter_quantiles(crate::report::hgrm::TICKS_PER_HALF_DISTANCE)
        .map(|v| (v.quantile_iterated_to(), v.value_iterated_to() as f64))
        .filter(|(q, _)| *q < 1.0)
        .map(|(q, v)| (1.0 / (1.0 - q), v.max(1.0)))
        .filter(|(x, _)| *x < SPECTRUM_TOP)
        .collect();
    let top = 1.0 - 1.0 / SPECTRUM_TOP;
    points.push((SPECTRUM_TOP, (h.value_at_quantile(top) as f64).max(1.0)));
    points
}

/// Two percentile spectra drawn together for each run, the first solid
/// and the second dashed, HdrHistogram style: percentiles on a log axis of
/// 1/(1-q). Response and service time; push jitter and one-way delay.
pub(super) struct SpectrumPair {
    pub name: &'static str,
    pub caption: &'static str,
    /// The runs drawn.
    pub has: fn(&Drawn) -> bool,
    /// A run's two histograms: the solid curve's, the dashed one's.
    pub pick: for<'a> fn(&'a Drawn) -> [Option<&'a Histogram<u64>>; 2],
    /// The curves' names with one run ...
    pub alone: [&'static str; 2],
    /// ... and after each run's label with several.
    pub beside: [&'static str; 2],
}

/// The response (solid) and service (dashed) time spectra.
pub(super) const RESPONSE_SPECTRA: SpectrumPair = SpectrumPair {
    name: "percentile spectrum",
    caption: "Percentile spectrum: response time (solid) and service time (dashed)",
    has: |d| d.has_answers(),
    pick: |d| [d.response.as_ref(), d.service.as_ref()],
    alone: ["response time", "service time"],
    beside: ["response", "service"],
};

/// One curve of a spectrum: the run's number and the run, which of the
/// pair (0: solid, 1: dashed), its points.
type Curve<'a, 'd> = (usize, &'a Drawn<'d>, usize, Vec<(f64, f64)>);

/// The spectra of a [`SpectrumPair`], or None when no run has them.
pub(super) fn spectrum_chart(runs: &[Drawn], pair: &SpectrumPair) -> Result<Option<String>> {
    let with: Vec<&Drawn> = runs.iter().filter(|d| (pair.has)(d)).collect();
    let curves: Vec<Curve> = with
        .iter()
        .enumerate()
        .flat_map(|(i, d)| {
            (pair.pick)(d)
                .into_iter()
                .enumerate()
                .filter_map(move |(which, h)| {
                    h.filter(|h| !h.is_empty())
                        .map(|h| (i, *d, which, spectrum_points(h)))
                })
        })
        .collect();
    let Some(y) = decades(curves.iter().flat_map(|c| c.3.iter().map(|p| p.1))) else {
        return Ok(None);
    };
    let one = with.len() == 1;
    let frame = Frame {
        name: pair.name,
        height: HEIGHT + 40,
        caption: pair.caption,
        x_desc: "percentile",
        x_labels: Some(6),
        x_format: Some(&|x| percentile_label(*x)),
        y_desc: "time",
        margin_right: Some(30),
        legend: SeriesLabelPosition::UpperLeft,
        ..time_frame()
    };
    let x = (1f64..SPECTRUM_TOP).log_scale();
    plot(&frame, x, log_axis(y), |chart| {
        for (i, d, which, points) in curves {
            let c = match (one, which) {
                (true, 0) => BLUE_,
                (true, _) => PURPLE,
                (false, _) => colour(i),
            };
            let name = if one {
                pair.alone[which].to_string()
            } else {
                d.entry(false, pair.beside[which])
            };
            let w = |base| overlay_width(base, i, with.len());
            if which == 0 {
                let style = c.stroke_width(w(3));
                chart
                    .draw_series(LineSeries::new(points, style))?
                    .label(name)
                    .legend(legend_line(style));
            } else {
                let style = c.stroke_width(w(2));
                chart
                    .draw_series(DashedLineSeries::new(points, 8, 5, style))?
                    .label(name)
                    .legend(legend_line(style));
            }
        }
        Ok(())
    })
    .map(Some)
}

/// "99.9%" for x = 1000 = 1/(1-0.999); decades only.
pub(super) fn percentile_label(x: f64) -> String {
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
pub(super) fn outcomes_chart(runs: &[Drawn]) -> Result<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Each second's value over its own second: the first from 0, a
    /// change as a jump at the second's end.
    #[test]
    fn per_second_series_are_steps_from_zero() {
        assert_eq!(
            steps([(1.0, 200.0), (2.0, 200.0), (3.0, 50.0)]),
            [
                (0.0, 200.0),
                (1.0, 200.0),
                (1.0, 200.0),
                (2.0, 200.0),
                (2.0, 50.0),
                (3.0, 50.0)
            ]
        );
    }

    #[test]
    fn percentile_labels_at_decades() {
        assert_eq!(percentile_label(1.0), "0%");
        assert_eq!(percentile_label(10.0), "90%");
        assert_eq!(percentile_label(100.0), "99%");
        assert_eq!(percentile_label(1000.0), "99.9%");
        assert_eq!(percentile_label(1e5), "99.999%");
        assert_eq!(percentile_label(20.0), "");
    }
}
