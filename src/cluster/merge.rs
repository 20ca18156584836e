//! The end of a run made of slices (child processes or hosts): their
//! results merged ([`crate::outcome::merge`]), the summary printed with
//! what is missing, the merged result written and judged.

use std::path::Path;

use anyhow::Result;

use crate::outcome::RunResult;

/// The lines of a merge's summary that say what it misses (`PARTIAL:`)
/// and what it could not check (`note:`).
pub fn say_what_is_missing(m: &RunResult, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    for w in &m.missing {
        writeln!(out, "  PARTIAL: {w}")?;
    }
    for n in &m.notes {
        writeln!(out, "  note: {n}")?;
    }
    Ok(())
}

/// What came back from the slices of one run (child processes or hosts).
pub struct Slices {
    pub results: Vec<RunResult>,
    /// Where each result came from.
    pub names: Vec<String>,
    /// The slices that gave no result, each with why.
    pub missing: Vec<String>,
    pub interrupted: bool,
    /// The run ended as planned, whatever the slices say (--hold ended by
    /// Ctrl-C: the children, run with --pause, saw the terminal's signal).
    pub ended_as_planned: bool,
    /// What the parent of the slices watched (--processes: the whole
    /// process tree's CPU, the server on this host): it replaces what the
    /// slices say of it.
    pub observed: Option<crate::evidence::Observed>,
    /// The slices share out a slice of a bigger run (a load host's share
    /// in several processes): that scenario and segment, which their merge
    /// is the result of.
    pub of: Option<(crate::scenario::Scenario, crate::domain::Segment)>,
}

/// The end of a sliced run: merges what arrived (marked partial when some
/// slice is missing), writes --json, prints the summary with one line per
/// missing slice, then the report and spectra of `views`. Exit code 1
/// for a partial merge or more failed connections than `max_failures`
/// (or a report that could not be written).
pub fn finish(
    s: Slices,
    scenario: Option<&crate::scenario::Scenario>,
    json: Option<&Path>,
    views: &crate::report::Views,
    label: &str,
    max_failures: u64,
    checks: &[crate::report::check::Check],
) -> Result<std::process::ExitCode> {
    use std::io::Write;
    let mut merged = merged(&s, scenario, label)?;
    let outcome = merged.outcome()?;
    let sc = merged.scenario.clone();
    crate::report::conclude(&sc, &outcome, checks, &mut merged, max_failures)?;
    let verdict = merged.verdict.clone().expect("concluded");
    let mut out = crate::console::stdout();
    crate::report::summary(&merged.scenario, &outcome, &verdict, &mut out)?;
    writeln!(
        out,
        "  {label:<13} {}, merged: {} result(s)",
        s.results.len() + s.missing.len(),
        s.results.len()
    )?;
    say_what_is_missing(&merged, &mut out)?;
    crate::report::check::print(checks, &merged, &mut out)?;
    out.flush()?;
    drop(out);
    if let Some(p) = json {
        crate::report::json::write_atomic(p, &merged)?;
    }
    let code = crate::report::check::exit_code(&merged, max_failures, merged.interrupted);
    let run = crate::report::html::Run {
        label: crate::report::html::label_of(&merged),
        result: &merged,
    };
    Ok(views.finish(&[run], code))
}

/// The merge of what the slices gave (see [`finish`]), marked partial when
/// some slice is missing; with `s.of`, the result of that slice.
pub fn merged(
    s: &Slices,
    scenario: Option<&crate::scenario::Scenario>,
    label: &str,
) -> Result<RunResult> {
    if s.results.is_empty() {
        anyhow::bail!("no {label} produced a result: {}", s.missing.join("; "));
    }
    let mut merged = crate::outcome::merge(&s.results, &s.names)?;
    if let Some(sc) = scenario {
        merged.scenario = sc.clone();
    }
    merged.interrupted |= s.interrupted;
    if s.ended_as_planned && !s.interrupted {
        merged.interrupted = false;
    }
    // The launcher's reasons for what is missing first (they say why),
    // then what the merge itself found missing.
    let found = std::mem::take(&mut merged.missing);
    merged.missing = s.missing.clone();
    merged
        .missing
        .extend(found.into_iter().filter(|m| !s.missing.contains(m)));
    merged.partial |= !s.missing.is_empty();
    if let Some(mut seen) = s.observed.clone() {
        let answered = merged.queries.as_ref().map_or(0, |q| q.answered);
        if let Some(c) = seen.client.as_mut() {
            c.derive(answered);
        }
        merged.client = seen.client;
        merged.server_seen = seen.server;
    }
    if let Some((whole, seg)) = &s.of {
        merged.scenario = whole.clone();
        merged.scenario.segment = Some(*seg);
        if let Some(sl) = merged.slice.as_mut() {
            (sl.index, sl.count) = (seg.index, seg.count);
        }
    }
    Ok(merged)
}
