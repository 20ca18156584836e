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
    for p in &expand(paths)? {
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
    let sc = merged.scenario.clone();
    report::conclude(&sc, &outcome, &checks, &mut merged, sc.max_failures)?;
    let verdict = merged.verdict.clone().expect("concluded");
    let mut out = crate::console::stdout();
    report::summary(&merged.scenario, &outcome, &verdict, &mut out)?;
    std::io::Write::write_fmt(
        &mut out,
        format_args!("  merged        {} results\n", results.len()),
    )?;
    super::merge::say_what_is_missing(&merged, &mut out)?;
    report::check::print(&checks, &merged, &mut out)?;
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

/// The result files named: a directory stands for its `*.json` files, in
/// name order (where `--json DIR` of each slice puts them).
fn expand(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if !p.is_dir() {
            out.push(p.clone());
            continue;
        }
        let mut found: Vec<PathBuf> = std::fs::read_dir(p)
            .map_err(|e| UsageError(format!("{}: {e}", p.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.extension().is_some_and(|x| x == "json") && f.is_file())
            .collect();
        if found.is_empty() {
            return Err(UsageError(format!(
                "{}: a directory without a result (*.json) in it",
                p.display()
            ))
            .into());
        }
        found.sort();
        out.extend(found);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_stands_for_its_results() {
        let d = std::env::temp_dir().join(format!("throng-expand-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        for f in ["segment-2-of-2.json", "segment-1-of-2.json", "notes.txt"] {
            std::fs::write(d.join(f), "{}").unwrap();
        }
        let got = expand(&[d.clone(), PathBuf::from("x.json")]).unwrap();
        assert_eq!(
            got,
            vec![
                d.join("segment-1-of-2.json"),
                d.join("segment-2-of-2.json"),
                PathBuf::from("x.json")
            ]
        );
        std::fs::remove_file(d.join("segment-1-of-2.json")).unwrap();
        std::fs::remove_file(d.join("segment-2-of-2.json")).unwrap();
        assert!(expand(std::slice::from_ref(&d))
            .unwrap_err()
            .to_string()
            .contains("without a result"));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
