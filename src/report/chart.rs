//! What the HTML pages share: chart scaffolding on plotters' SVG backend
//! (size, palette, fonts, legends, log axes, and the one frame every chart
//! with axes is drawn through: `Frame`, `plot`, `plot_dual`), the page's
//! style and its head and foot, and HTML escaping. The pages are built on
//! it: the report of runs (`html`) and the curve of a limit search
//! (`curve`). No page's content lives here.

use anyhow::{anyhow, Result};
use plotters::chart::DualCoordChartContext;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::units::{human, human_us};

/// Chart size in pixels (the page scales it down to fit).
pub const WIDTH: u32 = 1100;
pub const HEIGHT: u32 = 380;

/// Tableau's ten colours: a run each, or a series each for one run.
pub const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The `i`th colour of the palette (it wraps).
pub fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

pub const BLUE_: RGBColor = PALETTE[0];
pub const ORANGE: RGBColor = PALETTE[1];
pub const GREEN_: RGBColor = PALETTE[2];
pub const RED_: RGBColor = PALETTE[3];
pub const PURPLE: RGBColor = PALETTE[4];
pub const GREY: RGBColor = PALETTE[7];
pub const PINK: RGBColor = PALETTE[6];

/// What a chart's drawing returns (plotters' errors boxed).
pub type DrawResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Draws one chart into an SVG string.
pub fn svg(
    title: &str,
    height: u32,
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> DrawResult<()>,
) -> Result<String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, height)).into_drawing_area();
        let drawn = root
            .fill(&WHITE)
            .map_err(|e| e.into())
            .and_then(|()| draw(&root))
            .and_then(|()| root.present().map_err(|e| e.into()));
        drawn.map_err(|e| anyhow!("drawing the chart '{title}': {e}"))?;
    }
    Ok(out)
}

/// A log axis range in whole decades around `values` (µs, or any positive
/// figure); `None` when there is none.
pub fn decades(values: impl Iterator<Item = f64>) -> Option<std::ops::Range<f64>> {
    let (lo, hi) = values
        .filter(|v| *v > 0.0 && v.is_finite())
        .fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if hi <= 0.0 {
        return None;
    }
    let lo = 10f64.powf(lo.log10().floor());
    let mut hi = 10f64.powf(hi.log10().ceil());
    if hi <= lo {
        hi = lo * 10.0;
    }
    Some(lo..hi)
}

/// The ticks of a log axis over `r` (whole decades, as `decades` gives):
/// 1–9 of each decade when it spans one, 1, 2 and 5 up to three, the
/// decades alone past that; each once (plotters' own log ticks repeat
/// the top one).
pub fn log_ticks(r: &std::ops::Range<f64>) -> Vec<f64> {
    let spans = (r.end / r.start).log10().round().max(1.0) as i32;
    let steps: &[f64] = match spans {
        1 => &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
        2 | 3 => &[1.0, 2.0, 5.0],
        _ => &[1.0],
    };
    let first = r.start.log10().round() as i32;
    let mut ticks: Vec<f64> = (first..first + spans)
        .flat_map(|e| steps.iter().map(move |m| m * 10f64.powi(e)))
        .collect();
    ticks.push(10f64.powi(first + spans));
    ticks
}

/// A log axis whose ticks are `log_ticks`' (plotters' log coordinate
/// maps; its ticks are replaced).
pub struct LogAxis {
    coord: plotters::coord::combinators::LogCoord<f64>,
    ticks: Vec<f64>,
}

impl LogAxis {
    pub fn new(r: std::ops::Range<f64>) -> LogAxis {
        let ticks = log_ticks(&r);
        LogAxis {
            coord: r.log_scale().into(),
            ticks,
        }
    }
}

impl Ranged for LogAxis {
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.coord.map(value, limit)
    }

    fn key_points<Hint: plotters::coord::ranged1d::KeyPointHint>(&self, _: Hint) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.coord.range()
    }
}

/// An axis number: 12.3k, 250, 0.5.
pub fn axis_number(v: f64) -> String {
    if v.fract() != 0.0 && v.abs() < 10.0 {
        format!("{v:.1}")
    } else {
        human(v)
    }
}

/// A chart's title.
pub fn caption_style() -> TextStyle<'static> {
    ("sans-serif", 24).into_font().color(&BLACK)
}

/// Axis labels and legend entries.
pub fn label_style() -> TextStyle<'static> {
    ("sans-serif", 17).into_font().color(&BLACK)
}

/// A chart's legend, boxed on a light background, where `at` says.
pub fn legend<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    at: SeriesLabelPosition,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(label_style())
        .draw()?;
    Ok(())
}

/// A legend entry's line in `style`.
pub fn legend_line(style: ShapeStyle) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], style)
}

/// Text for HTML: `<`, `>`, `&` and quotes escaped.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The page's style: readable, printable, no web font.
pub const STYLE: &str = "body{font-family:sans-serif;margin:24px auto;max-width:1160px;color:#222;\
background:#fff;padding:0 12px}h1{font-size:26px;margin:0 0 4px}h2{font-size:19px;margin:28px 0 8px;\
border-bottom:1px solid #ccc}table{border-collapse:collapse;margin:6px 0 12px}td,th{border:1px solid #ddd;\
padding:3px 9px;text-align:left;vertical-align:top}th{background:#f3f3f3}td.n{text-align:right;\
font-variant-numeric:tabular-nums}.pass{color:#1a7f37;font-weight:bold}.fail{color:#c62828;\
font-weight:bold}.chart svg{max-width:100%;height:auto;display:block}.note{color:#555;font-size:14px}\
pre{background:#f7f7f7;padding:10px;white-space:pre-wrap;font-size:13px}.swatch{display:inline-block;\
width:12px;height:12px;margin-right:6px;vertical-align:middle}";

/// A page's start, to its `<h1>` (the title, escaped).
pub fn page_head(title: &str) -> String {
    let title = escape(title);
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n\
         <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{title}</h1>\n"
    )
}

/// A page's end: who wrote it, and that it fetches nothing.
pub fn page_foot() -> String {
    format!(
        "<p class=\"note\">Written by throng {}. This page fetches nothing: its charts are inline SVG.</p>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// A chart in the page: its SVG in a `div` of id `id`, and the note below
/// it (none when empty).
pub fn chart_div(p: &mut String, id: &str, svg: &str, note: &str) {
    use std::fmt::Write as _;
    let _ = writeln!(p, "<div class=\"chart\" id=\"{id}\">\n{svg}</div>");
    if !note.is_empty() {
        let _ = writeln!(p, "<p class=\"note\">{}</p>", escape(note));
    }
}

/// A chart's frame: its title, its axes' words and numbers, where its
/// legend goes. Every chart with axes is drawn through it (`plot`,
/// `plot_dual`): the same margins, label areas, fonts and legend box.
pub struct Frame<'f> {
    /// Names the chart in an error.
    pub name: &'f str,
    pub height: u32,
    pub caption: &'f str,
    pub x_desc: &'f str,
    /// The x axis's count of labels and their numbers (plotters' own when
    /// None).
    pub x_labels: Option<usize>,
    pub x_format: Option<&'f dyn Fn(&f64) -> String>,
    pub y_desc: &'f str,
    /// Width of the left axis's labels, pixels.
    pub y_area: u32,
    pub y_labels: Option<usize>,
    pub y_format: &'f dyn Fn(&f64) -> String,
    pub margin_right: Option<u32>,
    pub legend: SeriesLabelPosition,
}

/// The right axis of a chart with two: its range, words and numbers.
pub struct Right<'f> {
    pub y: std::ops::Range<f64>,
    pub desc: &'f str,
    pub format: &'f dyn Fn(&f64) -> String,
}

/// An axis number as plotters' formatters take it.
pub fn axis_label(v: &f64) -> String {
    axis_number(*v)
}

/// A time axis's number, µs: 85 µs, 1.2 ms.
pub fn time_label(v: &f64) -> String {
    human_us(v.round() as u64)
}

/// A chart over the seconds of a run: linear axes, the left one's numbers
/// as `axis_number` writes them, the legend at the upper right.
impl Default for Frame<'_> {
    fn default() -> Self {
        Frame {
            name: "",
            height: HEIGHT,
            caption: "",
            x_desc: "seconds since the start",
            x_labels: None,
            x_format: None,
            y_desc: "",
            y_area: 70,
            y_labels: None,
            y_format: &axis_label,
            margin_right: None,
            legend: SeriesLabelPosition::UpperRight,
        }
    }
}

/// A chart of one y axis, a `Cartesian2d` of x and y.
pub type Plane<'a, X, Y> = ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>;

/// A chart of two y axes, the right one linear.
pub type DualPlane<'a, X, Y> = DualCoordChartContext<
    'a,
    SVGBackend<'a>,
    Cartesian2d<X, Y>,
    Cartesian2d<RangedCoordf64, RangedCoordf64>,
>;

impl Frame<'_> {
    fn builder<'a, 'b>(
        &self,
        root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    ) -> ChartBuilder<'a, 'static, SVGBackend<'b>> {
        let mut b = ChartBuilder::on(root);
        b.caption(self.caption, caption_style()).margin(12);
        if let Some(r) = self.margin_right {
            b.margin_right(r);
        }
        b.x_label_area_size(42).y_label_area_size(self.y_area);
        b
    }

    fn mesh<X, Y>(&self, chart: &mut Plane<X, Y>) -> DrawResult<()>
    where
        X: Ranged<ValueType = f64> + ValueFormatter<f64>,
        Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(self.x_desc).y_desc(self.y_desc);
        if let Some(n) = self.x_labels {
            mesh.x_labels(n);
        }
        if let Some(f) = self.x_format {
            mesh.x_label_formatter(f);
        }
        if let Some(n) = self.y_labels {
            mesh.y_labels(n);
        }
        mesh.y_label_formatter(self.y_format)
            .label_style(label_style())
            .draw()?;
        Ok(())
    }
}

/// Draws a chart of one y axis into an SVG string: the frame, then what
/// `draw` puts on it, then the legend.
pub fn plot<X, Y>(
    f: &Frame,
    x: X,
    y: Y,
    draw: impl FnOnce(&mut Plane<X::CoordDescType, Y::CoordDescType>) -> DrawResult<()>,
) -> Result<String>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    svg(f.name, f.height, |root| {
        let mut chart = f.builder(root).build_cartesian_2d(x, y)?;
        f.mesh(&mut chart)?;
        draw(&mut chart)?;
        legend(&mut chart, f.legend.clone())?;
        Ok(())
    })
}

/// Draws a chart of two y axes (the right one `right`, over the same x)
/// into an SVG string: the frame and both axes, then what `draw` puts on
/// it, then the legend.
pub fn plot_dual<Y>(
    f: &Frame,
    x: std::ops::Range<f64>,
    y: Y,
    right: &Right,
    draw: impl FnOnce(&mut DualPlane<RangedCoordf64, Y::CoordDescType>) -> DrawResult<()>,
) -> Result<String>
where
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    svg(f.name, f.height, |root| {
        let mut chart = f
            .builder(root)
            .right_y_label_area_size(70)
            .build_cartesian_2d(x.clone(), y)?
            .set_secondary_coord(x, right.y.clone());
        f.mesh(&mut chart)?;
        chart
            .configure_secondary_axes()
            .y_desc(right.desc)
            .y_label_formatter(right.format)
            .label_style(label_style())
            .draw()?;
        draw(&mut chart)?;
        legend(&mut chart, f.legend.clone())?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_are_each_once_and_span_the_range() {
        let one = log_ticks(&(1000.0..10_000.0));
        assert_eq!(one.len(), 10);
        assert_eq!((one[0], one[9]), (1000.0, 10_000.0));
        let three = log_ticks(&(10.0..10_000.0));
        assert_eq!(
            three,
            [10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, 10_000.0]
        );
        assert_eq!(
            log_ticks(&(1.0..1e6)),
            [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]
        );
        for r in [1.0..10.0, 10.0..1e4, 1.0..1e6] {
            let labels: Vec<String> = log_ticks(&r).iter().map(time_label).collect();
            let mut unique = labels.clone();
            unique.dedup();
            assert_eq!(labels, unique, "{r:?}");
        }
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape("<a href='x'>&"), "&lt;a href=&#39;x&#39;&gt;&amp;");
    }
}
