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
    outln!("steps");
    for (k, s) in steps.iter().enumerate() {
        outln!("  {}", step_line(k + 1, s, unit));
    }
}

impl Search<'_> {
    /// The answer: printed (the table, the limit, why), and written to
    /// --json and --html when asked.
    pub(super) fn answer(&self) -> Result<()> {
        let (s, a) = (self, self.a);
        let unit = |x: f64| unit(a.find, x);
        if !s.unjudged.is_empty() {
            outln!(
                "note          not read on held steps (their seconds do not give these keys), \
                 judged on fresh steps only: {}",
                s.unjudged.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        let found = s.found();
        print_table(&s.steps, &unit);
        match (found.lower, found.upper) {
            (Some(l), Some(u)) => outln!(
                "limit         between {} (pass) and {} (fail)",
                unit(l),
                unit(u)
            ),
            (Some(l), None) => outln!("limit         none found: {} kept up", unit(l)),
            (None, Some(_)) if found.cause == Some(crate::verdict::Code::IdleTimeout) => {
                outln!("limit         none for idle connections: the server closes them (see why)")
            }
            (None, Some(u)) => outln!("limit         below {}: the first step failed", unit(u)),
            (None, None) => outln!("limit         no step ran to its end"),
        }
        if found.stable == Some(false) {
            // Both figures: the pass, and the same load offered again.
            outln!("              unstable: the best pass failed when offered again:");
            let at = |s: &&Step| Some(s.load) == found.value;
            let pass = s.steps.iter().position(|x| at(&x) && x.pass);
            let again = s.steps.len().checked_sub(1);
            for k in [pass, again].into_iter().flatten() {
                outln!("              {}", step_line(k + 1, &s.steps[k], &unit));
            }
        }
        outln!("why           {}", found.reason);
        for f in &found.evidence {
            outln!("              {f}");
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
            outln!("report        {}", p.display());
        }
        Ok(())
    }
}

impl Search<'_> {
    /// The answer, from the steps.
    pub(super) fn found(&self) -> Found {
        let failing = self
            .upper
            .and_then(|u| self.steps.iter().rev().find(|s| s.load == u && !s.pass));
        let result = failing.and_then(|s| s.result.as_ref());
        let (seen, mut figures) = result.map_or((None, Vec::new()), |r| evidence(r, self.a.find));
        if let Some(r) = result {
            let mut lines = why_lines(r);
            // The search's own check: the answers' pace.
            if let Some(p) = failing
                .and_then(|s| s.pace)
                .filter(|p| !p.kept && self.pace_judged)
            {
                lines.insert(0, pace_line(&p).trim().to_string());
            }
            figures.extend(lines);
        }
        // The cause: what the server's process showed; else the first of
        // the verdict's on the server's side.
        let verdict = result.and_then(|r| r.verdict());
        // A server that closes idle connections at one age has no count
        // of them to find: said from any failing step that measured it
        // (a step of one connection closes too few to tell).
        let idle = self
            .steps
            .iter()
            .filter(|s| !s.pass)
            .filter_map(|s| {
                s.result
                    .as_ref()?
                    .verdict()?
                    .cause(crate::verdict::Code::IdleTimeout)
            })
            .next();
        let (cause, side) = match (idle, &seen, verdict) {
            (Some(c), _, _) => (
                Some((c.code, c.sentence.clone())),
                Some(crate::verdict::Side::Server),
            ),
            (None, Some((code, words)), _) => (
                Some((*code, words.clone())),
                Some(crate::verdict::Side::Server),
            ),
            (None, None, Some(v)) => (
                v.server_cause().map(|c| (c.code, c.sentence.clone())),
                Some(v.side),
            ),
            (None, None, None) => (None, None),
        };

        let unit = |x: f64| unit(self.a.find, x);
        // The confirmation: the last step, at the best pass, after it.
        let stable = match (self.a.find, self.lower, self.steps.split_last()) {
            (Find::Rate, Some(l), Some((last, before)))
                if !self.interrupted
                    && !self.client_limited
                    && last.load == l
                    && before.iter().any(|s| s.load == l && s.pass) =>
            {
                Some(last.pass)
            }
            _ => None,
        };
        let reason = if let Some(e) = &self.error {
            format!("{e}; the steps so far are kept")
        } else if self.interrupted {
            "interrupted: the steps so far are kept".to_string()
        } else if self.client_limited {
            format!(
                "the load generator, not the server, was the limit at {}: its own lateness or \
                 CPU explains the failure (see below); give it more (--processes, cores, \
                 --source-ip, more hosts with `throng cluster`) and search again",
                unit(self.upper.unwrap_or(0.0))
            )
        } else if self.upper.is_none() {
            match self.a.max {
                Some(m) => format!("no limit below {}: every step kept up", unit(m)),
                None => "no step failed".to_string(),
            }
        } else {
            match &cause {
                Some((_, c)) => c.clone(),
                None => "nothing the client could see on this host explains it: see the failing \
                         step's checks"
                    .to_string(),
            }
        };
        Found {
            axis: self.plan.axis.to_string(),
            value: self.lower,
            lower: self.lower,
            upper: self.upper,
            stable,
            client_limited: self.client_limited,
            cause: if self.client_limited {
                None
            } else {
                cause.map(|(c, _)| c)
            },
            side: match (self.client_limited, self.upper) {
                (true, _) => Some(crate::verdict::Side::Client),
                (false, Some(_)) => side,
                (false, None) => None,
            },
            reason,
            evidence: figures,
        }
    }
}

/// The pace's verdict as a check's line.
pub(super) fn pace_line(p: &Pace) -> String {
    format!(
        "  check         {}  answered in the judged seconds >= {}% of due then  (measured \
         {:.1}%: {} answered of {} due over {} s, {}/s)",
        if p.kept { "PASS" } else { "FAIL" },
        PACE * 100.0,
        p.share() * 100.0,
        p.answered,
        p.due,
        p.seconds,
        crate::units::human(p.answered as f64 / p.seconds.max(1) as f64),
    )
}
