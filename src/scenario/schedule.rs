//! Schedules: a level (open connections, or queries per second) over
//! time as phases `30s@10k,20s@10k..50k`, and the level a schedule asks for
//! at an instant.

use serde::{Deserialize, Serialize};

use crate::units::{parse_count, parse_duration};

/// One phase of a schedule: over `seconds`, go linearly from `from` to `to`
/// (equal for a plateau).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Phase {
    pub seconds: f64,
    pub from: f64,
    pub to: f64,
}

/// Parses `30s@10k,20s@10k..50k` (the same syntax for connection counts
/// and query rates).
pub fn parse_phases(spec: &str) -> Result<Vec<Phase>, String> {
    let example = "e.g. 30s@10k,60s@10k..100k,30s@20k";
    let mut phases = Vec::new();
    for part in spec.split([',', ' ']).filter(|p| !p.is_empty()) {
        let (dur, level) = part.split_once('@').ok_or_else(|| {
            format!("phase '{part}' needs DURATION@N or DURATION@A..B; {example}")
        })?;
        let d = parse_duration(dur).map_err(|e| format!("phase '{part}': {e}"))?;
        let count = |s: &str| {
            parse_count(s)
                .map(|n| n as f64)
                .map_err(|e| format!("phase '{part}': {e}"))
        };
        let (from, to) = match level.split_once("..") {
            Some((a, b)) => (count(a)?, count(b)?),
            None => (count(level)?, count(level)?),
        };
        if d.is_zero() {
            return Err(format!("phase '{part}' lasts 0 s; {example}"));
        }
        phases.push(Phase {
            seconds: d.as_secs_f64(),
            from,
            to,
        });
    }
    if phases.is_empty() {
        return Err(format!("an empty schedule; {example}"));
    }
    Ok(phases)
}

/// The level a schedule asks for `t` seconds after its start (the last
/// phase's end level after it).
pub fn level_at(phases: &[Phase], t: f64) -> f64 {
    let mut start = 0.0;
    for p in phases {
        if t < start + p.seconds {
            return p.from + (p.to - p.from) * (t - start) / p.seconds;
        }
        start += p.seconds;
    }
    phases.last().map_or(0.0, |p| p.to)
}

/// The level integrated from `a` to `b` seconds after the schedule's start
/// (for a rate, the queries it asks for then): exact, the phases being
/// linear.
pub fn area(phases: &[Phase], a: f64, b: f64) -> f64 {
    if b <= a {
        return 0.0;
    }
    let mut sum = 0.0;
    let mut start = 0.0;
    for p in phases {
        let (lo, hi) = (a.max(start), b.min(start + p.seconds));
        if lo < hi {
            sum += (level_at_in(p, start, lo) + level_at_in(p, start, hi)) / 2.0 * (hi - lo);
        }
        start += p.seconds;
    }
    let last = phases.last().map_or(0.0, |p| p.to);
    sum + last * (b - a.max(start)).max(0.0)
}

/// Phase `p` (starting at `start`)'s level at `t` within it or at its end.
fn level_at_in(p: &Phase, start: f64, t: f64) -> f64 {
    p.from + (p.to - p.from) * ((t - start) / p.seconds).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_area_is_the_queries_asked_for() {
        let p = parse_phases("10s@100,10s@100..300").unwrap();
        assert_eq!(area(&p, 0.0, 10.0), 1000.0);
        assert_eq!(area(&p, 10.0, 20.0), 2000.0);
        assert_eq!(area(&p, 5.0, 15.0), 500.0 + 750.0);
        // After the last phase, its end level.
        assert_eq!(area(&p, 20.0, 22.0), 600.0);
        assert_eq!(area(&p, 3.0, 3.0), 0.0);
    }

    #[test]
    fn phases_parse_and_interpolate() {
        let p = parse_phases("30s@10k,60s@10k..100k,30s@20k").unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p[1].to, 100_000.0);
        assert_eq!(level_at(&p, 0.0), 10_000.0);
        assert_eq!(level_at(&p, 60.0), 55_000.0);
        assert_eq!(level_at(&p, 100.0), 20_000.0);
        assert_eq!(level_at(&p, 1000.0), 20_000.0);
        assert!(parse_phases("30s").unwrap_err().contains("DURATION@N"));
        assert!(parse_phases("0s@5").is_err());
        assert!(parse_phases("").is_err());
    }
}
