//! `throng merge`: result files written apart (segments, processes,
//! hosts) read, merged into one, summed up and checked.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::report::{self, Views};
use crate::usage::UsageError;

/// `throng merge`: reads results, merges them, prints the summary.
pub fn merge(
    paths: &[PathBuf],
    json: Option<&Path>,
    views: &Views,
    check: &[String],
) -> anyhow::Result<ExitCode> {
    let mut results = Vec::new();
    let mut names = Vec::new();
    for p in paths {
        results.push(crate::outcome::read(p)?);
        names.push(p.display().to_string());
    }
    views.check().map_err(UsageError)?;
    let mut merged = crate::outcome::merge(&results, &names)?;
    let checks = report::check::parse_all(
        check,
        merged.queries.is_some(),
        merged.push.is_some(),
        merged.scenario.verify,
        merged.scenario.connections_schedule.is_some(),
    )
    .map_err(UsageError)?;
    let outcome = merged.outcome()?;
    let mut out = std::io::stdout().lock();
    report::summary(&merged.scenario, &outcome, &mut out)?;
    std::io::Write::write_fmt(
        &mut out,
        format_args!("  merged        {} results\n", results.len()),
    )?;
    super::merge::say_what_is_missing(&merged, &mut out)?;
    report::check::apply(&checks, &mut merged, &mut out)?;
    drop(out);
    if let Some(p) = json {
        report::json::write_atomic(p, &merged)?;
    }
    let code = report::check::exit_code(&merged, merged.scenario.max_failures, false);
    let run = report::html::Run {
        label: report::html::label_of(&merged),
        result: &merged,
    };
    Ok(views.finish(&[run], code))
}
