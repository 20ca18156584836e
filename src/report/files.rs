//! `throng report`: the files made to be looked at, from results already
//! written: the HTML report and the .hgrm spectra of client results (a
//! `throng compare --json` file gives each of its runs), or the curve of a
//! `throng limit --json` file.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use super::{curve, html, Views};
use crate::outcome::compared::Case;
use crate::usage::UsageError;

/// `throng report`: the HTML report and the .hgrm spectra of results
/// already written (a `throng compare --json` file gives each of its runs),
/// or the curve of a `throng limit --json` file (alone).
pub fn run(results: &[PathBuf], views: &Views) -> anyhow::Result<ExitCode> {
    let mut texts = Vec::with_capacity(results.len());
    for p in results {
        texts.push(
            std::fs::read_to_string(p).map_err(|e| UsageError(format!("{}: {e}", p.display())))?,
        );
    }
    let limits: Vec<(&PathBuf, serde_json::Value)> = results
        .iter()
        .zip(&texts)
        .filter_map(|(p, t)| Some((p, serde_json::from_str(t).ok()?)))
        .filter(|(_, v)| curve::is_limit(v))
        .collect();
    if let Some((p, v)) = limits.first() {
        if results.len() > 1 {
            return Err(UsageError(format!(
                "{}: a `throng limit --json` file is reported alone (its steps are one \
                 search, not runs to overlay): run `throng report {} [--html FILE]`, and the \
                 other files in a `throng report` of their own",
                p.display(),
                p.display()
            ))
            .into());
        }
        return limit(p, v, views);
    }
    if views.html.is_none() && views.hgrm.is_none() && views.server_stats.is_none() {
        // No file asked for: each result's summary, as its run printed it.
        return summaries(results, &texts);
    }
    views.check().map_err(UsageError)?;
    let mut runs: Vec<(String, crate::outcome::RunResult)> = Vec::new();
    for (p, text) in results.iter().zip(&texts) {
        let stem = p.file_stem().map_or_else(
            || p.display().to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        match crate::outcome::parse(text) {
            Ok(r) => runs.push((stem, r)),
            Err(e) => {
                // A comparison: its runs, each by its transport.
                let compared = serde_json::from_str::<serde_json::Value>(text)
                    .ok()
                    .and_then(|v| v.get("runs").and_then(|r| r.as_array()).cloned());
                let Some(compared) = compared else {
                    return Err(UsageError(format!(
                        "{}: not a throng result (nor a throng compare --json file): {e}",
                        p.display()
                    ))
                    .into());
                };
                for (i, run) in compared.iter().enumerate() {
                    let r = crate::outcome::parse(&run["result"].to_string()).map_err(|e| {
                        UsageError(format!("{}: runs[{i}].result: {e}", p.display()))
                    })?;
                    let case: Case = serde_json::from_value(run.clone())
                        .map_err(|e| UsageError(format!("{}: runs[{i}]: {e}", p.display())))?;
                    let label = if results.len() > 1 {
                        format!("{stem} {}", case.label())
                    } else {
                        case.label()
                    };
                    runs.push((label, r));
                }
            }
        }
    }
    let runs: Vec<html::Run> = runs
        .iter()
        .map(|(label, r)| html::Run {
            label: label.clone(),
            result: r,
        })
        .collect();
    Ok(if views.write(&runs) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::exit::UNMEASURED)
    })
}

/// `throng report LIMIT.json`: the search's steps by load and its answer,
/// as text, or with `--html` as a page with the curve.
fn limit(path: &std::path::Path, v: &serde_json::Value, views: &Views) -> anyhow::Result<ExitCode> {
    if views.hgrm.is_some() || views.server_stats.is_some() {
        return Err(UsageError(format!(
            "{}: a `throng limit --json` file draws a curve, not spectra or a server's \
             seconds: drop --hgrm and --server-stats (or give them a step's client result)",
            path.display()
        ))
        .into());
    }
    views.check().map_err(UsageError)?;
    let curve =
        curve::Curve::read(v).map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    let Some(html) = &views.html else {
        out!("{}", curve::text(&curve));
        return Ok(ExitCode::SUCCESS);
    };
    match curve::write_limit_html(html, v) {
        Ok(()) => {
            outln!("  report        {}", html.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            errln!("throng: the HTML report was not written: {e:#}");
            Ok(ExitCode::from(crate::exit::UNMEASURED))
        }
    }
}

/// `throng report RESULT.json ...` with no output flag: each result's
/// summary, its checks and its verdict, as the run printed them (a result
/// written before verdicts were is judged now, by its checks). Several
/// are printed one after another, each under its file's name.
fn summaries(results: &[PathBuf], texts: &[String]) -> anyhow::Result<ExitCode> {
    let mut out = crate::console::stdout();
    for (p, text) in results.iter().zip(texts) {
        let mut r = crate::outcome::parse(text)
            .map_err(|e| UsageError(format!("{}: not a throng result: {e}", p.display())))?;
        if results.len() > 1 {
            writeln!(out, "{}", p.display())?;
        }
        let exprs: Vec<&str> = r.checks.iter().map(|c| c.expr.as_str()).collect();
        let checks = exprs
            .iter()
            .map(|e| super::check::parse(e))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| UsageError(format!("{}: {e}", p.display())))?;
        let outcome = r.outcome()?;
        let sc = r.scenario.clone();
        if r.verdict.is_none() {
            super::conclude(&sc, &outcome, &checks, &mut r, sc.max_failures)?;
        }
        let verdict = r.verdict.clone().expect("concluded");
        super::summary(&sc, &outcome, &verdict, &mut out)?;
        super::check::print(&checks, &r, &mut out)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
