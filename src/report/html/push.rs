//! A push run (`--proto push`) in the report: messages received and lost
//! per second, the jitter and one-way delay p99 per second, their
//! percentile spectra, and the push rows of the summary table. Each chart
//! draws the runs that have push and is None when none has.

use anyhow::Result;
use plotters::prelude::*;

use super::charts::{dot_size, overlay_width, steps, t_max, time_frame, SpectrumPair};
use super::drawn::{Drawn, Second};
use crate::outcome::{PushResult, RunResult};
use crate::report::chart::{
    axis_label, colour, decades, legend_line, plot, plot_dual, Frame, Right, GREEN_, ORANGE,
    PURPLE, RED_,
};
use crate::report::hgrm::no_delay;
use crate::units::human_us;

/// The runs with push seconds.
fn with_push<'a, 'd>(runs: &'a [Drawn<'d>]) -> Vec<&'a Drawn<'d>> {
    runs.iter()
        .filter(|d| d.seconds.iter().any(|s| s.push_received.is_some()))
        .collect()
}

/// A run's points of one per-second figure as steps, each second's value
/// over its second as in the other charts (those above zero when
/// `positive`, for a log axis).
fn series(d: &Drawn, f: fn(&Second) -> Option<f64>, positive: bool) -> Vec<(f64, f64)> {
    steps(
        d.seconds
            .iter()
            .filter_map(|s| f(s).filter(|v| !positive || *v > 0.0).map(|v| (s.t, v))),
    )
}

/// Push messages per second: received on the left axis, lost (sequence
/// gaps, and a connection's silent tail when it ends) on the right.
pub(super) fn push_rates_chart(runs: &[Drawn]) -> Result<Option<String>> {
    let with = with_push(runs);
    if with.is_empty() {
        return Ok(None);
    }
    let tmax = t_max(runs);
    let seconds = || with.iter().flat_map(|d| d.seconds.iter());
    let top = seconds()
        .filter_map(|s| s.push_received)
        .fold(1.0, f64::max)
        * 1.1;
    let lost_top = seconds().filter_map(|s| s.push_lost).fold(5.0, f64::max) * 1.1;
    let one = with.len() == 1;
    let frame = Frame {
        name: "push messages per second",
        caption: "Push messages per second: received, and lost",
        y_desc: "messages/s",
        legend: SeriesLabelPosition::LowerRight,
        ..Frame::default()
    };
    let right = Right {
        y: 0f64..lost_top,
        desc: "lost /s",
        format: &axis_label,
    };
    plot_dual(&frame, 0f64..tmax, 0f64..top, &right, |chart| {
        for (i, d) in with.iter().enumerate() {
            let c = colour(i);
            let (received_c, lost_c) = if one { (GREEN_, RED_) } else { (c, c) };
            let received = series(d, |s| s.push_received, false);
            let w = |base| overlay_width(base, i, with.len());
            let style = received_c.stroke_width(w(3));
            let dots = dot_size(received.len());
            chart
                .draw_series(LineSeries::new(received, style).point_size(dots))?
                .label(d.entry(one, "received"))
                .legend(legend_line(style));
            let style = lost_c.stroke_width(w(2));
            let lost = series(d, |s| s.push_lost, false);
            let dots = dot_size(lost.len());
            chart
                .draw_secondary_series(DashedLineSeries::new(lost.clone(), 3, 3, style))?
                .label(d.entry(one, "lost (right axis)"))
                .legend(legend_line(style));
            if dots > 0 {
                chart.draw_secondary_series(
                    lost.into_iter()
                        .map(|p| Circle::new(p, dots, style.filled())),
                )?;
            }
        }
        Ok(())
    })
    .map(Some)
}

/// The jitter and one-way delay p99 of each second (log scale).
pub(super) fn push_times_chart(runs: &[Drawn]) -> Result<Option<String>> {
    let with = with_push(runs);
    let values = with.iter().flat_map(|d| {
        d.seconds
            .iter()
            .flat_map(|s| [s.push_jitter_p99, s.push_delay_p99])
            .flatten()
    });
    let Some(y) = decades(values) else {
        return Ok(None);
    };
    let one = with.len() == 1;
    let frame = Frame {
        name: "push times per second",
        caption: "Push jitter and one-way delay p99 per second (log scale)",
        y_desc: "p99",
        ..time_frame()
    };
    plot(
        &frame,
        0f64..t_max(runs),
        super::charts::log_axis(y),
        |chart| {
            for (i, d) in with.iter().enumerate() {
                let c = colour(i);
                let (jitter_c, delay_c) = if one { (ORANGE, PURPLE) } else { (c, c) };
                let jitter = series(d, |s| s.push_jitter_p99, true);
                let w = |base| overlay_width(base, i, with.len());
                let style = jitter_c.stroke_width(w(3));
                let dots = dot_size(jitter.len());
                chart
                    .draw_series(LineSeries::new(jitter, style).point_size(dots))?
                    .label(d.entry(one, "jitter p99"))
                    .legend(legend_line(style));
                let delay = series(d, |s| s.push_delay_p99, true);
                if delay.is_empty() {
                    continue;
                }
                let style = delay_c.stroke_width(w(2));
                let dots = dot_size(delay.len());
                chart
                    .draw_series(DashedLineSeries::new(delay.clone(), 8, 4, style))?
                    .label(d.entry(one, "delay p99"))
                    .legend(legend_line(style));
                if dots > 0 {
                    chart.draw_series(
                        delay
                            .into_iter()
                            .map(|p| Circle::new(p, dots, style.filled())),
                    )?;
                }
            }
            Ok(())
        },
    )
    .map(Some)
}

/// The jitter (solid) and one-way delay (dashed) spectra, as the
/// queries' response and service time.
pub(super) const PUSH_SPECTRA: SpectrumPair = SpectrumPair {
    name: "push percentile spectrum",
    caption: "Push percentile spectrum: jitter (solid) and one-way delay (dashed)",
    has: |d| d.has_push(),
    pick: |d| [d.push_jitter.as_ref(), d.push_delay.as_ref()],
    alone: ["jitter", "one-way delay"],
    beside: ["jitter", "one-way delay"],
};

/// The push rows of the summary's figures, a column per run ("-" for a
/// run without push); none when no run has push.
pub(super) fn push_rows(runs: &[Drawn]) -> Vec<(&'static str, Vec<String>)> {
    if !runs.iter().any(|d| d.has_push()) {
        return Vec::new();
    }
    let each = |f: &dyn Fn(&PushResult, &RunResult) -> String| {
        runs.iter()
            .map(|d| d.r.push.as_ref().map_or("-".into(), |p| f(p, d.r)))
            .collect::<Vec<_>>()
    };
    let share = |n: u64, of: u64| 100.0 * n as f64 / of.max(1) as f64;
    let times = |l: &crate::metrics::Latency| {
        if l.count == 0 {
            "-".into()
        } else {
            format!(
                "{} / {} / {} / {}",
                human_us(l.p50),
                human_us(l.p99),
                human_us(l.p999),
                human_us(l.max)
            )
        }
    };
    vec![
        (
            "push period",
            each(&|p, r| {
                let burst = r.scenario.push.as_ref().map_or(1, |l| l.burst);
                if burst > 1 {
                    format!("{} messages every {}", burst, human_us(p.every_us))
                } else {
                    format!("one every {}", human_us(p.every_us))
                }
            }),
        ),
        (
            "push received",
            each(&|p, _| {
                format!(
                    "{} of {} expected ({:.2}%)",
                    p.received,
                    p.expected,
                    share(p.received, p.expected)
                )
            }),
        ),
        (
            "push lost",
            each(&|p, _| {
                format!(
                    "{} ({:.2}%) on {} connection(s)",
                    p.lost,
                    share(p.lost, p.expected),
                    p.connections_with_loss
                )
            }),
        ),
        (
            "push out of order / duplicates / malformed",
            each(&|p, _| format!("{} / {} / {}", p.out_of_order, p.duplicates, p.malformed)),
        ),
        (
            "push jitter p50 / p99 / p99.9 / max",
            each(&|p, _| times(&p.jitter_us)),
        ),
        (
            "push delay p50 / p99 / p99.9 / max",
            each(&|p, r| match (&p.delay_us, &p.delay_clock) {
                (Some(l), Some(clock)) if l.count > 0 => format!("{} ({clock} clock)", times(l)),
                _ if p.received == 0 => "-".into(),
                _ => format!("- (not measured: {})", no_delay(r, p)),
            }),
        ),
        (
            "push gap p50 / p99 / p99.9 / max",
            each(&|p, _| times(&p.gap_us)),
        ),
        (
            "client workers busy",
            each(&|p, _| format!("{:.1}%", p.client_busy_pct)),
        ),
    ]
}
