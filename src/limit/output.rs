//! A step in a line, and the table of them.

use super::*;

/// One line a step: its load, verdict and the figures the checks read.
pub(super) fn step_line(k: usize, s: &Step, unit: &dyn Fn(f64) -> String) -> String {
    let v = &s.result;
    let verdict = match (s.pass, s.client_limited) {
        (true, _) => "PASS",
        (false, true) => "FAIL (client)",
        (false, false) => "FAIL",
    };
    let how = if s.held { "held " } else { "fresh" };
    let mut f = format!("step {k:<3} {:>18}  {verdict:<13} {how}", unit(s.load));
    if v.is_null() {
        f.push_str(&format!("  no result (exit {})", s.exit_code));
        return f;
    }
    let n = |p: &str| num(v, p).unwrap_or(0.0);
    let failed: f64 = v["connections"]["failed"]
        .as_object()
        .map_or(0.0, |m| m.values().filter_map(Value::as_f64).sum());
    f.push_str(&format!(
        "  established {:.0} verified {:.0} failed {failed:.0}",
        n("connections.established"),
        n("connections.verified")
    ));
    if v.get("queries").is_some_and(|q| !q.is_null()) {
        f.push_str(&format!(
            "  answered {:.0}/s ok {:.0} of {:.0} due, timed out {:.0}  p50 {} p99 {}",
            n("queries.rate_achieved"),
            n("queries.ok"),
            n("queries.due"),
            n("queries.timed_out"),
            crate::units::human_us(n("latency.response_time_us.p50") as u64),
            crate::units::human_us(n("latency.response_time_us.p99") as u64),
        ));
    }
    f
}

pub(super) fn print_table(steps: &[Step], unit: &dyn Fn(f64) -> String) {
    println!("steps");
    for (k, s) in steps.iter().enumerate() {
        println!("  {}", step_line(k + 1, s, unit));
    }
}
