//! The curve of a `throng limit` search, read from its `--json`: the
//! search's answer in words, and every step's load against its response
//! time (p50, p99) and the share it got answered, each step marked pass or
//! fail, the limit (the highest pass) and the lowest failure as vertical
//! lines. Two views of it: a text table (`throng report LIMIT.json`) and an
//! HTML page built on the report's chart scaffolding (`--html`).
//!
//! It reads the file as JSON values, not as client results: a held step's
//! `result` holds only some of a result's keys. It never changes the file.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::Value;

use super::chart::{
    axis_label, chart_div, decades, escape, label_style, legend_line, page_foot, page_head, plot,
    plot_dual, time_label, DrawResult, Frame, Plane, Right, BLUE_, GREEN_, HEIGHT, ORANGE, RED_,
};
use super::json::write_bytes_atomic;
use crate::units::human_us;

/// Whether `v` is a `throng limit --json` file: its `limit` and `steps`.
pub fn is_limit(v: &Value) -> bool {
    v.get("limit").is_some_and(Value::is_object) && v.get("steps").is_some_and(Value::is_array)
}

/// What a step's share is of: its queries (ok of due) or, in a search
/// whose steps sent none, its connections (established of the target).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Share {
    Answered,
    Established,
}

impl Share {
    fn name(self) -> &'static str {
        match self {
            Share::Answered => "answered",
            Share::Established => "established",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Share::Answered => "queries ok of those due",
            Share::Established => "connections established of the target",
        }
    }
}

/// One step, as the curve draws it.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Its place in the order the steps ran, from 1.
    pub step: usize,
    pub load: f64,
    pub pass: bool,
    pub held: bool,
    pub client_limited: bool,
    pub exit_code: i64,
    /// False when the step wrote no result (a plan its client refused).
    pub has_result: bool,
    /// Its share (see [`Share`]), in %.
    pub share: Option<f64>,
    /// Response time p50 and p99, µs (None: nothing answered).
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
}

/// A search read for its curve.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    /// The search's answer.
    pub limit: Found,
    pub share: Share,
    /// The steps by load; steps at one load in the order they ran.
    pub points: Vec<Point>,
}

/// A search's answer, as `throng limit --json`'s `limit` holds it.
pub use crate::outcome::limit::Found;

impl Curve {
    /// Whether a step has response times (a search whose steps sent
    /// queries that were answered).
    pub fn timed(&self) -> bool {
        self.points
            .iter()
            .any(|p| p.p50_us.is_some() || p.p99_us.is_some())
    }
}

fn num(v: &Value, path: &str) -> Option<f64> {
    path.split('.').try_fold(v, |x, k| x.get(k))?.as_f64()
}

/// `part` of `whole` in %, when there is a whole.
fn percent(part: Option<f64>, whole: Option<f64>) -> Option<f64> {
    match (part, whole) {
        (Some(p), Some(w)) if w > 0.0 => Some(100.0 * p / w),
        _ => None,
    }
}

impl Curve {
    /// Reads a `throng limit --json` value; what does not fit is named.
    pub fn read(v: &Value) -> Result<Curve, String> {
        if !is_limit(v) {
            return Err("not a `throng limit --json` file (no `limit` and `steps`)".into());
        }
        let limit: Found =
            serde_json::from_value(v["limit"].clone()).map_err(|e| format!("limit: {e}"))?;
        let steps = v["steps"].as_array().ok_or("steps is not a list")?;
        let has_queries = |r: &Value| r.get("queries").is_some_and(|q| !q.is_null());
        let share = if steps.iter().any(|s| has_queries(&s["result"])) {
            Share::Answered
        } else {
            Share::Established
        };
        let mut points = steps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let r = &s["result"];
                let share = match share {
                    Share::Answered if has_queries(r) => percent(
                        num(r, "queries.ok").or(num(r, "queries.answered")),
                        num(r, "queries.due")
                            .filter(|d| *d > 0.0)
                            .or(num(r, "queries.sent")),
                    ),
                    Share::Answered => None,
                    Share::Established => percent(
                        num(r, "connections.established"),
                        num(r, "connections.target"),
                    ),
                };
                let time =
                    |q: &str| num(r, &format!("latency.response_time_us.{q}")).filter(|v| *v > 0.0);
                Ok(Point {
                    step: i + 1,
                    load: s["load"]
                        .as_f64()
                        .ok_or(format!("steps[{i}].load is not a number"))?,
                    pass: s["pass"].as_bool().unwrap_or(false),
                    held: s["held"].as_bool().unwrap_or(false),
                    client_limited: s["client_limited"].as_bool().unwrap_or(false),
                    exit_code: s["exit_code"].as_i64().unwrap_or(-1),
                    has_result: r.is_object(),
                    share,
                    p50_us: time("p50"),
                    p99_us: time("p99"),
                })
            })
            .collect::<Result<Vec<Point>, String>>()?;
        points.sort_by(|a, b| a.load.total_cmp(&b.load));
        Ok(Curve {
            limit,
            share,
            points,
        })
    }

    /// A load in the search's unit: "575 connections", "2000/s".
    pub fn unit(&self, x: f64) -> String {
        match self.limit.axis.as_str() {
            "connections" => format!("{x:.0} connections"),
            _ => format!("{x:.0}/s"),
        }
    }

    /// The answer in a few words, as `throng limit` prints it.
    pub fn answer(&self) -> String {
        match (self.limit.lower, self.limit.upper) {
            (Some(l), Some(u)) => format!(
                "between {} (pass) and {} (fail)",
                self.unit(l),
                self.unit(u)
            ),
            (Some(l), None) => format!("none found: {} kept up", self.unit(l)),
            (None, Some(u)) => format!("below {}: the first step failed", self.unit(u)),
            (None, None) => "no step ran to its end".into(),
        }
    }
}

fn verdict(p: &Point) -> &'static str {
    match (p.pass, p.client_limited) {
        (true, _) => "PASS",
        (false, true) => "FAIL (client)",
        (false, false) => "FAIL",
    }
}

fn run_kind(p: &Point) -> &'static str {
    if p.held {
        "held"
    } else {
        "fresh"
    }
}

fn share_text(p: &Point) -> String {
    p.share.map_or("-".into(), |s| format!("{s:.2}%"))
}

fn time_text(us: Option<f64>) -> String {
    us.map_or("-".into(), |v| human_us(v.round() as u64))
}

/// The curve as text: a line a step by load, then the answer.
pub fn text(c: &Curve) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "steps by load ({} search, {} steps)",
        c.limit.axis,
        c.points.len()
    );
    let timed = c.timed();
    let times = |p50: &str, p99: &str| {
        if timed {
            format!("  {p50:>9}  {p99:>9}")
        } else {
            String::new()
        }
    };
    let _ = writeln!(
        t,
        "  {:>18}  {:<13} {:<5}  {:>11}{}  step",
        "load",
        "verdict",
        "run",
        c.share.name(),
        times("p50", "p99")
    );
    for p in &c.points {
        let _ = write!(
            t,
            "  {:>18}  {:<13} {:<5}  {:>11}{}  {}",
            c.unit(p.load),
            verdict(p),
            run_kind(p),
            share_text(p),
            times(&time_text(p.p50_us), &time_text(p.p99_us)),
            p.step
        );
        if !p.has_result {
            let _ = write!(t, "  no result (exit {})", p.exit_code);
        }
        t.push('\n');
    }
    let _ = writeln!(t, "limit         {}", c.answer());
    if c.limit.stable == Some(false) {
        let _ = writeln!(
            t,
            "              unstable: the best pass failed when offered again"
        );
    }
    if c.limit.client_limited {
        let _ = writeln!(
            t,
            "              the load generator, not the server, was the limit at the failure"
        );
    }
    let _ = writeln!(t, "why           {}", c.limit.reason);
    for e in &c.limit.evidence {
        let _ = writeln!(t, "              {e}");
    }
    t
}

/// A point's marker: filled when the step passed, hollow when it failed.
fn marker(x: f64, y: f64, pass: bool, c: RGBColor) -> Circle<(f64, f64), i32> {
    let style = if pass { c.filled() } else { c.stroke_width(2) };
    Circle::new((x, y), 6, style)
}

/// A series of the curve: a step's (load, value, passed), by load.
fn series(points: &[Point], f: fn(&Point) -> Option<f64>) -> Vec<(f64, f64, bool)> {
    points
        .iter()
        .filter_map(|p| f(p).map(|v| (p.load, v, p.pass)))
        .collect()
}

/// The line through a series' steps.
fn line(at: &[(f64, f64, bool)]) -> Vec<(f64, f64)> {
    at.iter().map(|&(x, y, _)| (x, y)).collect()
}

/// The share axis's top: room above 100% for the verticals' labels.
const SHARE_TOP: f64 = 110.0;

/// A vertical dashed line at a load, labelled at its top: the limit (its
/// label on its left) or the lowest failure (on its right).
struct Vertical {
    at: f64,
    label: String,
    colour: RGBColor,
    left: bool,
}

/// Draws the verticals from `lo` to `hi` (the y axis's range) and the
/// pass/fail key (legend entries only).
fn verticals_and_key<'a, Y: Ranged<ValueType = f64>>(
    chart: &mut Plane<'a, RangedCoordf64, Y>,
    verticals: &[Vertical],
    lo: f64,
    hi: f64,
) -> DrawResult<()> {
    for v in verticals {
        let style = v.colour.stroke_width(2);
        chart.draw_series(DashedLineSeries::new(
            [(v.at, lo), (v.at, hi)],
            10,
            6,
            style,
        ))?;
        let (dx, pos) = if v.left {
            (-6, Pos::new(HPos::Right, VPos::Top))
        } else {
            (6, Pos::new(HPos::Left, VPos::Top))
        };
        let font = label_style().color(&v.colour).pos(pos);
        chart.draw_series(std::iter::once(
            EmptyElement::at((v.at, hi)) + Text::new(v.label.clone(), (dx, 4), font),
        ))?;
    }
    for (pass, name) in [
        (true, "step passed (filled)"),
        (false, "step failed (hollow)"),
    ] {
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
            .label(name)
            .legend(move |(x, y)| marker_px(x, y, pass));
    }
    Ok(())
}

/// The curve's chart: load on x; response time p50, p99 (log scale) on the
/// left axis and the share on the right; or, with no answer to time, the
/// share alone on the left. The limit and the lowest failure as vertical
/// dashed lines.
fn curve_chart(c: &Curve) -> Result<String> {
    let top = c
        .points
        .iter()
        .map(|p| p.load)
        .chain(c.limit.value)
        .chain(c.limit.upper)
        .fold(1.0, f64::max)
        * 1.08;
    // Log response times, with room at the top for the verticals' labels.
    let times = decades(c.points.iter().flat_map(|p| [p.p50_us, p.p99_us]).flatten())
        .map(|y| y.start..y.end * 3.0);
    let verticals: Vec<Vertical> = c
        .limit
        .value
        .map(|v| Vertical {
            at: v,
            label: format!("limit: {} (the highest pass)", c.unit(v)),
            colour: BLACK,
            left: true,
        })
        .into_iter()
        .chain(c.limit.upper.map(|u| Vertical {
            at: u,
            label: format!("the lowest failure: {}", c.unit(u)),
            colour: RED_,
            left: false,
        }))
        .collect();
    let share_axis = format!("{} %", c.share.name());
    let caption = format!("The {} curve", c.limit.axis);
    let x_desc = match c.limit.axis.as_str() {
        "connections" => "connections",
        _ => "queries/s offered",
    };
    let percent = |v: &f64| {
        if *v <= 100.0 {
            format!("{v:.0}%")
        } else {
            String::new()
        }
    };
    let frame = Frame {
        name: "the limit's curve",
        height: HEIGHT + 80,
        caption: &caption,
        x_desc,
        x_format: Some(&axis_label),
        y_area: 80,
        ..Frame::default()
    };
    let Some(y) = times else {
        let frame = Frame {
            y_desc: &share_axis,
            y_format: &percent,
            legend: SeriesLabelPosition::LowerLeft,
            ..frame
        };
        return plot(&frame, 0f64..top, 0f64..SHARE_TOP, |chart| {
            verticals_and_key(chart, &verticals, 0.0, SHARE_TOP)?;
            let at = series(&c.points, |p| p.share);
            let style = GREEN_.stroke_width(2);
            chart
                .draw_series(LineSeries::new(line(&at), style))?
                .label(&share_axis)
                .legend(legend_line(style));
            chart.draw_series(at.iter().map(|&(x, y, pass)| marker(x, y, pass, GREEN_)))?;
            Ok(())
        });
    };
    let (lo, hi) = (y.start, y.end);
    let frame = Frame {
        y_desc: "response time",
        y_labels: Some(12),
        y_format: &time_label,
        legend: SeriesLabelPosition::MiddleLeft,
        ..frame
    };
    let right = Right {
        y: 0f64..SHARE_TOP,
        desc: &share_axis,
        format: &percent,
    };
    plot_dual(&frame, 0f64..top, y.log_scale(), &right, |chart| {
        verticals_and_key(chart, &verticals, lo, hi)?;
        for (name, f, colour) in [
            (
                "response time p50",
                (|p: &Point| p.p50_us) as fn(&Point) -> _,
                BLUE_,
            ),
            ("response time p99", |p: &Point| p.p99_us, ORANGE),
        ] {
            let at = series(&c.points, f);
            let style = colour.stroke_width(2);
            chart
                .draw_series(LineSeries::new(line(&at), style))?
                .label(name)
                .legend(legend_line(style));
            chart.draw_series(at.iter().map(|&(x, y, pass)| marker(x, y, pass, colour)))?;
        }
        let at = series(&c.points, |p| p.share);
        let style = GREEN_.stroke_width(2);
        chart
            .draw_secondary_series(DashedLineSeries::new(line(&at), 6, 4, style))?
            .label(format!("{share_axis} (right axis)"))
            .legend(legend_line(style));
        chart.draw_secondary_series(at.iter().map(|&(x, y, pass)| marker(x, y, pass, GREEN_)))?;
        Ok(())
    })
}

/// The pass/fail key's marker in the legend (pixels, grey).
fn marker_px(x: i32, y: i32, pass: bool) -> Circle<(i32, i32), i32> {
    let grey = RGBColor(90, 90, 90);
    let style = if pass {
        grey.filled()
    } else {
        grey.stroke_width(2)
    };
    Circle::new((x + 12, y), 6, style)
}

/// The limit page: the answer, the curve, the steps by load.
pub fn render(c: &Curve) -> Result<String> {
    let timed = c.timed();
    let mut p = page_head(&format!("throng limit: the {} curve", c.limit.axis));
    let _ = writeln!(p, "<h2>Answer</h2>\n<table class=\"answer\">");
    let row = |p: &mut String, k: &str, v: &str| {
        let _ = writeln!(p, "<tr><th>{k}</th><td>{}</td></tr>", escape(v));
    };
    row(&mut p, "searched", &c.limit.axis);
    row(&mut p, "limit", &c.answer());
    if let Some(s) = c.limit.stable {
        row(
            &mut p,
            "stable",
            if s {
                "yes: the best pass passed again"
            } else {
                "no: the best pass failed when offered again"
            },
        );
    }
    if c.limit.client_limited {
        row(
            &mut p,
            "load generator",
            "the client, not the server, was the limit at the failure: give it more \
             (--processes, cores, --source-ip, throng cluster)",
        );
    }
    row(&mut p, "why", &c.limit.reason);
    if !c.limit.evidence.is_empty() {
        let _ = write!(p, "<tr><th>evidence</th><td>");
        for (i, e) in c.limit.evidence.iter().enumerate() {
            let _ = write!(p, "{}{}", if i > 0 { "<br/>" } else { "" }, escape(e));
        }
        let _ = writeln!(p, "</td></tr>");
    }
    let _ = writeln!(p, "</table>\n<h2>Curve</h2>");
    chart_div(
        &mut p,
        "curve",
        &curve_chart(c)?,
        &format!(
            "Each step at its load, in load order (a load run twice shows both runs): \
             filled points passed, hollow ones failed. {}{} % is {}. The dashed verticals: \
             the limit (black, the highest pass) and the lowest failure (red).",
            if timed {
                "Response time (log scale) counts from when each query was due; "
            } else {
                ""
            },
            c.share.name(),
            c.share.label()
        ),
    );
    let _ = writeln!(
        p,
        "<h2>Steps by load</h2>\n<table class=\"steps\">\n<tr><th>load</th><th>verdict</th>\
         <th>run</th><th>{}</th>{}<th>exit code</th><th>step</th></tr>",
        c.share.name(),
        if timed {
            "<th>p50</th><th>p99</th>"
        } else {
            ""
        }
    );
    for s in &c.points {
        let times = if timed {
            format!(
                "<td class=\"n\">{}</td><td class=\"n\">{}</td>",
                escape(&time_text(s.p50_us)),
                escape(&time_text(s.p99_us))
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            p,
            "<tr><td class=\"n\">{}</td><td class=\"{}\">{}</td><td>{}</td><td class=\"n\">{}</td>\
             {times}<td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            escape(&c.unit(s.load)),
            if s.pass { "pass" } else { "fail" },
            verdict(s),
            run_kind(s),
            escape(&share_text(s)),
            s.exit_code,
            s.step
        );
    }
    let _ = writeln!(
        p,
        "</table>\n<p class=\"note\">Step: the order the search ran them (doubling, then \
         bisection{}). Held: a step of connections kept open from the step before; fresh: a \
         `throng client` run of its own.</p>",
        if c.limit.axis == "rate" {
            ", then the best pass once more"
        } else {
            ""
        }
    );
    p.push_str(&page_foot());
    Ok(p)
}

/// Writes the page of a `throng limit --json` value to `path`
/// (atomically).
pub fn write_limit_html(path: &Path, v: &Value) -> Result<()> {
    let c = Curve::read(v).map_err(|e| anyhow::anyhow!("{e}"))?;
    write_bytes_atomic(path, render(&c)?.as_bytes(), "--html")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A rate search as `throng limit --json` writes one: 1000 and 2000
    /// pass, 4000 fails, 3000 fails, 2500 passes (held), the best pass
    /// (2500) again, and a step with no result.
    fn rate_search() -> Value {
        let whole = |ok: u64, due: u64, p50: u64, p99: u64| {
            json!({
                "connections": {"target": 50, "established": 50, "verified": 50,
                                "failed": {}, "peak": 50},
                "queries": {"due": due, "sent": due, "answered": ok, "ok": ok, "errors": {},
                            "timed_out": due - ok, "rate_target": 1.0, "rate_achieved": 1.0},
                "latency": {"response_time_us": {"count": ok, "p50": p50, "p90": p99,
                            "p99": p99, "p999": p99, "max": p99, "mean": p50}},
                "duration_s": 10.0,
            })
        };
        let step = |load: f64, pass: bool, held: bool, result: Value| {
            json!({"load": load, "pass": pass, "exit_code": if pass {0} else {1},
                   "client_limited": false, "held": held, "result": result})
        };
        json!({
            "limit": {"axis": "rate", "value": 2500.0, "lower": 2500.0, "upper": 3000.0,
                      "stable": true, "client_limited": false,
                      "reason": "throng (pid 7) used 99% of a core: CPU-bound on one thread",
                      "evidence": ["throng (pid 7): 60 fds of its 1024 at most"]},
            "steps": [
                step(1000.0, true, false, whole(10000, 10000, 80, 300)),
                step(2000.0, true, false, whole(20000, 20000, 90, 400)),
                step(4000.0, false, false, whole(30000, 40000, 50_000, 900_000)),
                step(3000.0, false, false, whole(29000, 30000, 2_000, 40_000)),
                step(2500.0, true, true, whole(25000, 25000, 120, 700)),
                step(2500.0, true, false, whole(25000, 25000, 110, 650)),
                step(5000.0, false, false, Value::Null),
            ],
        })
    }

    #[test]
    fn a_limit_file_is_told_from_a_result() {
        assert!(is_limit(&rate_search()));
        assert!(!is_limit(&json!({"connections": {}, "queries": {}})));
        assert!(!is_limit(&json!({"limit": 3, "steps": []})));
    }

    #[test]
    fn steps_are_read_by_load_a_repeated_load_in_run_order() {
        let c = Curve::read(&rate_search()).unwrap();
        let order: Vec<(f64, usize)> = c.points.iter().map(|p| (p.load, p.step)).collect();
        assert_eq!(
            order,
            [
                (1000.0, 1),
                (2000.0, 2),
                (2500.0, 5),
                (2500.0, 6),
                (3000.0, 4),
                (4000.0, 3),
                (5000.0, 7)
            ]
        );
        assert_eq!(c.share, Share::Answered);
        let at4k = &c.points[5];
        assert_eq!(at4k.share, Some(75.0));
        assert_eq!(
            (at4k.p50_us, at4k.p99_us),
            (Some(50_000.0), Some(900_000.0))
        );
        assert!(!c.points[6].has_result && c.points[6].share.is_none());
    }

    #[test]
    fn the_text_table_is_by_load_with_the_limit_line() {
        let t = text(&Curve::read(&rate_search()).unwrap());
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("steps by load (rate search, 7 steps)"));
        let steps: Vec<&str> = lines[2..9].to_vec();
        let loads: Vec<&str> = steps
            .iter()
            .map(|l| l.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(
            loads,
            ["1000/s", "2000/s", "2500/s", "2500/s", "3000/s", "4000/s", "5000/s"]
        );
        assert!(steps[2].contains("PASS") && steps[2].contains("held"));
        assert!(steps[3].contains("fresh") && steps[3].trim_end().ends_with(" 6"));
        assert!(
            steps[5].contains("FAIL") && steps[5].contains("75.00%"),
            "{}",
            steps[5]
        );
        assert!(steps[5].contains("50.0 ms") && steps[5].contains("900.0 ms"));
        assert!(steps[6].contains("no result (exit 1)"), "{}", steps[6]);
        assert_eq!(
            lines[9],
            "limit         between 2500/s (pass) and 3000/s (fail)"
        );
        assert!(lines[10].starts_with("why           throng (pid 7) used 99%"));
        assert!(lines[11].contains("60 fds of its 1024"));
    }

    /// Circles in `svg`: (filled, hollow).
    fn circles(svg: &str) -> (usize, usize) {
        let all = svg.matches("<circle").count();
        let hollow = svg
            .split("<circle")
            .skip(1)
            .filter(|c| c[..c.find('>').unwrap()].contains("fill=\"none\""))
            .count();
        (all - hollow, hollow)
    }

    #[test]
    fn the_page_draws_each_step_and_marks_the_limit() {
        let c = Curve::read(&rate_search()).unwrap();
        let page = render(&c).unwrap();
        assert!(page.contains("between 2500/s (pass) and 3000/s (fail)"));
        assert!(page.contains("CPU-bound on one thread"));
        assert!(page.contains("60 fds of its 1024"));
        assert!(page.contains("limit: 2500/s (the highest pass)"), "{page}");
        assert!(page.contains("the lowest failure: 3000/s"));
        assert!(!page.contains("<script") && !page.contains(" href="));
        // Six steps with a result, three series (p50, p99, answered): 4
        // passes and 2 failures each, and the key's two.
        let chart = &page[page.find("id=\"curve\"").unwrap()..];
        let chart = &chart[..chart.find("</svg>").unwrap()];
        assert_eq!(circles(chart), (4 * 3 + 1, 2 * 3 + 1));
        // The steps' table by load: 4000 after 3000.
        let (a, b) = (
            page.find(">3000/s<").unwrap(),
            page.find(">4000/s<").unwrap(),
        );
        assert!(a < b);
    }

    #[test]
    fn a_connections_search_without_queries_draws_the_established_share() {
        let v = json!({
            "limit": {"axis": "connections", "value": 500.0, "lower": 500.0,
                      "upper": 600.0, "stable": null, "client_limited": false,
                      "reason": "its fd limit", "evidence": []},
            "steps": [
                {"load": 500.0, "pass": true, "exit_code": 0, "client_limited": false,
                 "held": true, "result": {"connections": {"target": 500, "established": 500}}},
                {"load": 600.0, "pass": false, "exit_code": 1, "client_limited": false,
                 "held": true, "result": {"connections": {"target": 600, "established": 450}}},
            ],
        });
        let c = Curve::read(&v).unwrap();
        assert_eq!(c.share, Share::Established);
        assert_eq!(c.points[1].share, Some(75.0));
        let page = render(&c).unwrap();
        assert!(page.contains("limit: 500 connections (the highest pass)"));
        let chart = &page[page.find("id=\"curve\"").unwrap()..];
        assert_eq!(circles(&chart[..chart.find("</svg>").unwrap()]), (2, 2));
        let t = text(&c);
        assert!(
            t.contains("limit         between 500 connections (pass) and 600 connections (fail)")
        );
        assert!(!t.contains("p50") && !page.contains("<th>p50</th>"), "{t}");
    }
}
