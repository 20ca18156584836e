//! What steers a run from outside its schedule: the commands of --control
//! (rate, connections, stop), applied to what every worker reads, and the
//! conditions of --stop-on that end a ramp early.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use mio::Waker;

use super::workers::wake_all;
use crate::metrics::{ConnTotals, Shared};
use crate::scenario::StopOn;

/// Applies one --control line; false when it is not understood.
pub(super) fn control(line: &str, shared: &Shared, wakers: &[Waker]) -> bool {
    let mut words = line.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("stop"), None, None) => true,
        (Some("connections"), Some(n), None) => match crate::units::parse_count(n) {
            Ok(n) => {
                shared.conn_level.store(n + 1, Relaxed);
                wake_all(wakers);
                true
            }
            Err(_) => false,
        },
        // (`rate 0` pauses the queries: a drain between steps.)
        (Some("rate"), Some(r), None) => match r
            .parse::<f64>()
            .ok()
            .filter(|&x| x == 0.0)
            .map_or_else(|| crate::units::parse_rate(r), Ok)
        {
            Ok(rate) => {
                shared.rate_override.store(rate.to_bits(), Relaxed);
                shared.rate_gen.fetch_add(1, Relaxed);
                wake_all(wakers);
                true
            }
            Err(_) => false,
        },
        _ => false,
    }
}

/// The first --stop-on condition that holds, in words: `stalled`, how
/// long since verification last grew.
pub(super) fn stop_on_holds(conds: &[StopOn], t: &ConnTotals, stalled: Duration) -> Option<String> {
    conds.iter().find_map(|c| match *c {
        StopOn::VerifyStall { seconds } if stalled.as_secs_f64() >= seconds => Some(format!(
            "no connection verified for {:.0} s ({} verified; --stop-on {})",
            stalled.as_secs_f64(),
            t.verified,
            c.describe()
        )),
        StopOn::Failed { pct }
            if t.attempted >= 100
                && t.failed_total() as f64 * 100.0 >= pct * t.attempted as f64 =>
        {
            Some(format!(
                "{} of {} attempts failed (--stop-on {})",
                t.failed_total(),
                t.attempted,
                c.describe()
            ))
        }
        _ => None,
    })
}
