//! The query rate the schedule and --control ask for, and the queries it
//! adds up to over a stretch of the traffic: the live view's target, the
//! --metrics target and the result's.

use std::time::{Duration, Instant};

use crate::scenario::{Scenario, Traffic};

/// The rate asked for `t` seconds into the traffic: the last rate set on
/// --control by then, or the schedule's.
fn rate_at(t: &Traffic, connections: u64, changes: &[(f64, f64)], at: f64) -> f64 {
    changes
        .iter()
        .rev()
        .find(|(when, _)| *when <= at)
        .map_or_else(|| t.rate_at(at, connections), |(_, r)| *r)
}

/// The rate asked for during second `tick` (which ends `tick` s after start).
pub(super) fn target_at(
    sc: &Scenario,
    start: Instant,
    ts: Option<Instant>,
    tick: u64,
    changes: &[(f64, f64)],
) -> Option<f64> {
    let t = sc.traffic.as_ref()?;
    let ts = ts?;
    let mid = (start + Duration::from_millis(tick * 1000 - 500)).checked_duration_since(ts)?;
    match t.model {
        crate::scenario::Model::ClosedLoop { .. } => None,
        _ => Some(rate_at(t, sc.connections, changes, mid.as_secs_f64())),
    }
}

/// Queries asked for in the first `seconds` of traffic (open loop and
/// intervals; closed loop has no target).
pub(super) fn target_queries(
    t: &Traffic,
    connections: u64,
    seconds: f64,
    changes: &[(f64, f64)],
) -> f64 {
    target_between(t, connections, changes, 0.0, seconds)
}

/// Queries asked for from `from` to `to` seconds into the traffic, summed
/// in steps of 10 ms at most.
pub(super) fn target_between(
    t: &Traffic,
    connections: u64,
    changes: &[(f64, f64)],
    from: f64,
    to: f64,
) -> f64 {
    let span = to - from;
    if span <= 0.0 {
        return 0.0;
    }
    let steps = (span * 100.0).ceil().max(1.0) as u64;
    let dt = span / steps as f64;
    (0..steps)
        .map(|i| rate_at(t, connections, changes, from + (i as f64 + 0.5) * dt) * dt)
        .sum()
}
