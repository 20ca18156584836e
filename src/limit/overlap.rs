//! Whether a step's parts (the processes of `--processes`, the hosts of
//! `throng cluster`) held their connections at the same time. A merged
//! result adds the parts' connections as if they were open at once; when
//! one part's were up only as another's closed, the server never held
//! the sum, and a pass says nothing of it.

use crate::outcome::limit::StepResult;

/// Runs of a step whose parts started apart, before the step is the
/// client's.
pub const NO_OVERLAP_TRIES: u32 = 3;

/// A step whose parts held their connections together for less than half
/// the shortest part's hold.
#[derive(Debug, Clone, PartialEq)]
pub struct NoOverlap {
    parts: usize,
    /// Seconds all parts held together (negative: the gap between them).
    together_s: f64,
    /// The shortest part's own hold.
    shortest_s: f64,
    /// The last part's connections were all established this long before
    /// the first part's hold ended (negative: after it).
    established_before_s: f64,
}

impl NoOverlap {
    /// The step's parts held apart, or None (they held together for at
    /// least half the shortest part's hold, it has one part, or a part
    /// does not say).
    pub fn from_step(result: &Option<StepResult>) -> Option<NoOverlap> {
        let Some(StepResult::Run(r)) = result else {
            return None;
        };
        let whole = r.slice.as_ref()?.wall;
        let together_s = whole.held_together_s()?;
        let shortest_s = r
            .parts
            .iter()
            .map(|p| p.slice.as_ref().and_then(|s| s.wall.held_together_s()))
            .collect::<Option<Vec<f64>>>()?
            .into_iter()
            .reduce(f64::min)?;
        let established_before_s = whole.held_end_unix_s? - whole.established_unix_s?;
        (r.parts.len() > 1 && together_s < shortest_s / 2.0).then_some(NoOverlap {
            parts: r.parts.len(),
            together_s,
            shortest_s,
            established_before_s,
        })
    }

    /// The last part could not even establish its connections while the
    /// others held theirs: the load generator's doing. (When it could,
    /// and only their answers came late, the server took them only as the
    /// others closed.)
    pub fn started_apart(&self) -> bool {
        self.established_before_s <= 0.0
    }

    /// In words, with the figures.
    pub fn describe(&self) -> String {
        let why = if self.started_apart() {
            format!(
                "the last part's connections were established only {} after another part's \
                 hold ended: the load generator did not open them together",
                secs(-self.established_before_s)
            )
        } else {
            "every part's connections were established while the others held, but some were \
             answered only as others closed (a server at its cap that queues the rest)"
                .to_string()
        };
        format!(
            "its {} parts held their connections together for {} of the shortest part's hold \
             of {}: {why}",
            self.parts,
            secs(self.together_s.max(0.0)),
            secs(self.shortest_s),
        )
    }

    /// The verdict's line, as the client's checks print theirs.
    pub fn check_line(&self) -> String {
        format!(
            "  check         FAIL  parts held their connections together >= half a part's hold  \
             (measured {})",
            self.describe()
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

    /// Two parts of 2 s holds, the first from 1000, the second from
    /// `b_held`, its connections established at `b_established`.
    fn step(b_held: f64, b_established: f64) -> Option<NoOverlap> {
        let mut b = timed(2, 2, "r", b_held, 2.0);
        b.slice.as_mut().unwrap().wall.established_unix_s = Some(b_established);
        let parts = [timed(1, 2, "r", 1000.0, 2.0), b];
        let names = ["a".to_string(), "b".to_string()];
        let r = crate::outcome::merge(&parts, &names).unwrap();
        NoOverlap::from_step(&Some(StepResult::Run(Box::new(r))))
    }

    #[test]
    fn parts_that_held_together_for_half_a_hold_are_a_measurement() {
        assert_eq!(step(1000.5, 1000.5), None);
        assert_eq!(step(1001.0, 1001.0), None);
        // One part alone is always together.
        let one = timed(1, 1, "r", 1000.0, 0.5);
        assert_eq!(
            NoOverlap::from_step(&Some(StepResult::Run(Box::new(one)))),
            None
        );
    }

    #[test]
    fn a_part_that_opened_its_connections_late_is_the_clients() {
        let a = step(1002.5, 1002.3).unwrap();
        assert!(a.started_apart(), "{a:?}");
        let w = a.describe();
        assert!(w.contains("its 2 parts held their connections together for 0 µs of the shortest part's hold of 2.00 s: the last part's connections were established only 300.0 ms after another part's hold ended"), "{w}");
    }

    #[test]
    fn a_part_whose_connections_were_answered_late_is_the_servers() {
        // Established at once; answered only as the first part closed.
        let a = step(1001.8, 1000.1).unwrap();
        assert!(!a.started_apart(), "{a:?}");
        let line = a.check_line();
        assert!(line.contains("FAIL  parts held their connections together >= half a part's hold"));
        assert!(line.contains("together for 200.0 ms of the shortest part's hold of 2.00 s: every part's connections were established while the others held, but some were answered only as others closed"), "{line}");
    }

    #[test]
    fn a_part_that_does_not_say_leaves_it_unjudged() {
        let mut b = timed(2, 2, "r", 1003.0, 2.0);
        b.slice.as_mut().unwrap().wall.held_start_unix_s = None;
        let parts = [timed(1, 2, "r", 1000.0, 2.0), b];
        let names = ["a".to_string(), "b".to_string()];
        let r = crate::outcome::merge(&parts, &names).unwrap();
        assert_eq!(r.slice.as_ref().unwrap().wall.held_together_s(), None);
        assert_eq!(
            NoOverlap::from_step(&Some(StepResult::Run(Box::new(r)))),
            None
        );
    }
}
