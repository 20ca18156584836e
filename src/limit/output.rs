//! A step in a line, the table of them, and the search's answer.

use super::*;

/// One line a step: its load, verdict and the figures the checks read.
pub(super) fn step_line(k: usize, s: &Step, unit: &dyn Fn(f64) -> String) -> String {
    let v = &result_value(&s.result);
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
        // (A rate step's answers per second are those of its judged
        // seconds: the drain's late ones make no rate.)
        let answered = s.pace.map_or(n("queries.rate_achieved"), |p| {
            p.answered as f64 / p.seconds.max(1) as f64
        });
        f.push_str(&format!(
            "  answered {:.0}/s ok {:.0} of {:.0} due, timed out {:.0}  p50 {} p99 {}",
            answered,
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

impl Search<'_> {
    /// The answer: printed (the table, the limit, why), and written to
    /// --json and --html when asked.
    pub(super) fn answer(&self) -> Result<()> {
        let (s, a) = (self, self.a);
        let unit = |x: f64| unit(a.find, x);
        if !s.unjudged.is_empty() {
            println!(
                "note          not read on held steps (their seconds do not give these keys), \
                 judged on fresh steps only: {}",
                s.unjudged.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        let found = s.found();
        print_table(&s.steps, &unit);
        match (found.lower, found.upper) {
            (Some(l), Some(u)) => println!(
                "limit         between {} (pass) and {} (fail)",
                unit(l),
                unit(u)
            ),
            (Some(l), None) => println!("limit         none found: {} kept up", unit(l)),
            (None, Some(_)) if found.cause == Some(crate::verdict::Code::IdleTimeout) => println!(
                "limit         none for idle connections: the server closes them (see why)"
            ),
            (None, Some(u)) => println!("limit         below {}: the first step failed", unit(u)),
            (None, None) => println!("limit         no step ran to its end"),
        }
        if found.stable == Some(false) {
            // Both figures: the pass, and the same load offered again.
            println!("              unstable: the best pass failed when offered again:");
            let at = |s: &&Step| Some(s.load) == found.value;
            let pass = s.steps.iter().position(|x| at(&x) && x.pass);
            let again = s.steps.len().checked_sub(1);
            for k in [pass, again].into_iter().flatten() {
                println!("              {}", step_line(k + 1, &s.steps[k], &unit));
            }
        }
        println!("why           {}", found.reason);
        for f in &found.evidence {
            println!("              {f}");
        }
        let _ = std::io::stdout().flush();
        if a.client.json.is_none() && a.client.views.html.is_none() {
            return Ok(());
        }
        let file = LimitFile {
            limit: found,
            steps: s.steps.clone(),
            held_runs: s.held_runs.clone(),
        };
        if let Some(p) = &a.client.json {
            write_atomic(p, &file)?;
        }
        if let Some(p) = &a.client.views.html {
            let v = serde_json::to_value(&file)?;
            crate::report::curve::write_limit_html(p, &v)?;
            println!("report        {}", p.display());
        }
        Ok(())
    }
}
