//! The live view: a line a second while a client run runs (or a
//! progress bar on a terminal), or JSON lines for a parent process.

use super::*;

/// The live view: a progress bar on a terminal, one plain line per second
/// otherwise, nothing when quiet.
pub enum LiveView {
    Bar(ProgressBar),
    Lines,
    Quiet,
    /// A child of --processes: JSON lines on stdout for the parent; with
    /// the figures of a parent's --metrics endpoint, they follow each
    /// second.
    Child(Option<std::sync::Arc<std::sync::Mutex<RunCounters>>>),
}

impl LiveView {
    pub fn new(quiet: bool, target: u64) -> LiveView {
        if quiet {
            return LiveView::Quiet;
        }
        if !io::stderr().is_terminal() {
            return LiveView::Lines;
        }
        let bar = ProgressBar::with_draw_target(Some(target), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} established  {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        LiveView::Bar(bar)
    }
}

impl Live for LiveView {
    fn second(&mut self, s: &Sample, target: u64) {
        let push = s.push_received.map(|got| {
            // (Duplicates and out of order only when there are some.)
            let odd = [
                ("twice", s.push_duplicates),
                ("out of order", s.push_out_of_order),
            ]
            .iter()
            .filter_map(|(w, n)| n.filter(|&n| n > 0).map(|n| format!("  {w} {n}")))
            .collect::<String>();
            format!(
                "  push received {got}/s  lost {}{odd}  jitter p99 {}",
                s.push_lost.unwrap_or(0),
                s.push_jitter_p99_us.map_or("-".into(), human_us)
            )
        });
        let traffic = s.sent.map(|sent| {
            let lat = match (s.p50_us, s.p99_us) {
                (Some(a), Some(b)) => format!("  p50 {}  p99 {}", human_us(a), human_us(b)),
                _ => String::new(),
            };
            format!(
                "  target {}/s  sent {sent}  answered {}  timeouts {}  errors {}{lat}",
                s.target.map_or("-".into(), |t| format!("{t:.0}")),
                s.answered.unwrap_or(0),
                s.timed_out.unwrap_or(0),
                s.errors.unwrap_or(0),
            )
        });
        match self {
            LiveView::Bar(bar) => match traffic {
                Some(line) => bar.println(format!("{:>4}s  open {}{line}", s.t, s.connections)),
                None => {
                    bar.set_position(s.established.min(target));
                    bar.set_message(format!(
                        "{}/s  open {}  failed {}",
                        s.established_per_s, s.connections, s.failed
                    ));
                }
            },
            LiveView::Lines => errln!(
                "{:>4}s  open {}  established {} (+{}/s)  verified {}  failed {}{}",
                s.t,
                s.connections,
                s.established,
                s.established_per_s,
                s.verified,
                s.failed,
                traffic.or(push).unwrap_or_default()
            ),
            LiveView::Quiet => {}
            LiveView::Child(figures) => {
                crate::child::ChildLine::print_sample(s);
                if let Some(f) = figures {
                    let f = f.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    crate::child::ChildLine::Metrics(Box::new(f)).print();
                }
            }
        }
    }

    fn note(&mut self, line: &str) {
        match self {
            LiveView::Bar(bar) => bar.println(line),
            LiveView::Lines => errln!("{line}"),
            LiveView::Quiet | LiveView::Child(_) => {}
        }
    }

    fn ramp_done(&mut self, after: Duration, since_start: Duration, t: &ConnTotals, end: &End) {
        let hold = match end {
            End::Duration { seconds } => format!("holding for {seconds}s"),
            End::Hold => "holding until Ctrl-C".to_string(),
            End::Pause => "holding; press Enter to close".to_string(),
        };
        let line = format!(
            "ramp done in {:.2}s: {} established, {} failed; {hold}",
            after.as_secs_f64(),
            t.established,
            t.failed_total()
        );
        match self {
            LiveView::Bar(bar) => {
                bar.set_position(t.established);
                bar.println(line);
            }
            LiveView::Lines => errln!("{line}"),
            // --pause must say it waits even when quiet.
            LiveView::Quiet if *end == End::Pause => errln!("{line}"),
            LiveView::Quiet => {}
            LiveView::Child(_) => crate::child::ChildLine::RampDone {
                seconds: after.as_secs_f64(),
                established: t.established,
                failed: t.failed_total(),
                since_start_s: since_start.as_secs_f64(),
            }
            .print(),
        }
    }

    fn finish(&mut self) {
        if let LiveView::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}
