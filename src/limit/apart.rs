//! Whether a step's parts (the processes of `--processes`, the hosts of
//! `throng cluster`) held their connections at the same time. A merged
//! result adds the parts' connections as if they were open at once; when
//! one part's were up only as another's closed, the server never held
//! the sum, and a pass says nothing of it.

use std::time::Duration;

use crate::outcome::limit::StepResult;

/// Runs of a step whose parts started apart, before the step is the
/// client's.
pub const APART_TRIES: u32 = 3;

/// A step whose parts held their connections together for less than half
/// its time.
#[derive(Debug, Clone, PartialEq)]
pub struct Apart {
    parts: usize,
    /// Seconds all parts held together (negative: the gap between them).
    together_s: f64,
    /// The step's time.
    step_s: f64,
    /// The latest part's start after the first's: the load generator's
    /// own skew.
    skew_s: f64,
}

impl Apart {
    /// The step's parts held apart, or None (they held together for at
    /// least half the step, it has one part, or its result does not say).
    pub fn of(result: &Option<StepResult>, step_time: Duration) -> Option<Apart> {
        let Some(StepResult::Run(r)) = result else {
            return None;
        };
        let together_s = r.slice.as_ref()?.wall.held_together_s()?;
        let step_s = step_time.as_secs_f64();
        let starts: Vec<f64> = r
            .parts
            .iter()
            .filter_map(|p| Some(p.slice.as_ref()?.wall.start_unix_s))
            .collect();
        let skew_s = match starts.iter().copied().reduce(f64::max) {
            Some(last) => last - starts.iter().copied().fold(last, f64::min),
            None => 0.0,
        };
        (r.parts.len() > 1 && together_s < step_s / 2.0).then_some(Apart {
            parts: r.parts.len(),
            together_s,
            step_s,
            skew_s,
        })
    }

    /// The parts started apart by at least half of what they missed of
    /// holding together: the load generator's doing, not the server's.
    pub fn started_apart(&self) -> bool {
        2.0 * self.skew_s >= self.step_s - self.together_s
    }

    /// In words, with the figures.
    pub fn words(&self) -> String {
        let started = if self.started_apart() {
            "the load generator started them apart"
        } else {
            "some were taken by the server only as others closed"
        };
        format!(
            "its {} parts held their connections together for {} of its {} (their starts {} \
             apart): {started}",
            self.parts,
            secs(self.together_s.max(0.0)),
            secs(self.step_s),
            secs(self.skew_s),
        )
    }

    /// The verdict's line, as the client's checks print theirs.
    pub fn check_line(&self) -> String {
        format!(
            "  check         FAIL  parts held their connections together >= half the step  \
             (measured {})",
            self.words()
        )
    }
}

fn secs(s: f64) -> String {
    crate::units::human_us((s * 1e6) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::timed;

    /// Two parts that started at 1000 and at `b_start`, the second's
    /// hold from `b_held` (each 2 s), as a step of 2 s.
    fn step(b_start: f64, b_held: f64) -> Option<Apart> {
        let mut b = timed(2, 2, "r", b_held, 2.0);
        b.slice.as_mut().unwrap().wall.start_unix_s = b_start;
        let parts = [timed(1, 2, "r", 1000.0, 2.0), b];
        let names = ["a".to_string(), "b".to_string()];
        let r = crate::outcome::merge(&parts, &names).unwrap();
        Apart::of(&Some(StepResult::Run(Box::new(r))), Duration::from_secs(2))
    }

    #[test]
    fn parts_that_held_together_for_half_the_step_are_a_measurement() {
        assert_eq!(step(999.5, 1000.5), None);
        assert_eq!(step(999.5, 1001.0), None);
        // One part alone is always together.
        let one = timed(1, 1, "r", 1000.0, 0.5);
        let one = Some(StepResult::Run(Box::new(one)));
        assert_eq!(Apart::of(&one, Duration::from_secs(2)), None);
    }

    #[test]
    fn parts_that_started_apart_are_the_clients() {
        // (timed() starts each part 0.5 s before its hold.)
        let a = step(1001.0, 1001.5).unwrap();
        assert!(a.started_apart(), "{a:?}");
        let w = a.words();
        assert!(w.contains("its 2 parts held their connections together for 500.0 ms of its 2.00 s (their starts 1.50 s apart): the load generator"), "{w}");
    }

    #[test]
    fn parts_that_started_together_but_held_apart_are_the_servers() {
        // Started together; the second's connections were taken 1.8 s late.
        let a = step(999.5, 1001.8).unwrap();
        assert!(!a.started_apart(), "{a:?}");
        let line = a.check_line();
        assert!(line.contains("FAIL  parts held their connections together >= half the step"));
        assert!(line.contains("together for 200.0 ms of its 2.00 s (their starts 0 µs apart): some were taken by the server only as others closed"), "{line}");
        let never = step(999.5, 1003.0).unwrap();
        assert!(never.words().contains("together for 0 µs"), "{never:?}");
    }
}
