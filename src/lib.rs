//! throng: find the limits of TCP servers under a huge number of clients.
//!
//! The module map, top to bottom: a module uses only modules below it (data
//! flows down, never back up; `tests/module_graph.rs` fails on a circle).
//!
//! - [`client`]: `throng client` from flags to report: targets, sources,
//!   preflight, then [`engine`] runs the [`scenario`], here or in child
//!   processes each given its slice. [`compare`]: one workload over each
//!   transport.
//! - [`cluster`]: the scenario sliced over hosts through ssh, and the exact
//!   merge of results.
//! - [`cli`]: flags (clap) and what they convert into, a
//!   [`scenario::Scenario`] or a [`server_config::ServerConfig`]. The
//!   commands above take its `...Args`; nothing below it sees a flag.
//! - [`server`]: the reference server: a mio loop per worker, SO_REUSEPORT
//!   listeners, responders built on the pure codecs of `crates/wire`; one
//!   process or a group on one port.
//! - [`report`]: live view, summary, JSON result, the Prometheus endpoint
//!   (`--metrics`, the server's too); the HTML report and the .hgrm spectra
//!   (`throng report`, `--html`, `--hgrm`); a limit search's curve.
//! - [`child`]: the line protocol between a parent and its child processes.
//! - [`engine`]: the client's data plane: a mio loop per worker.
//! - [`server_config`]: the reference server's configuration, as plain
//!   serde data, and its TLS certificate and key.
//! - [`tls`]: the rustls configurations of both sides.
//! - [`scenario`]: what a client run does, as plain serde data.
//! - [`sys`]: what the OS allows: fd limits, sysctls, kernel counters,
//!   source addresses.
//! - [`metrics`]: counters, statuses and HDR histograms, each with one
//!   merge: of workers, of processes, of hosts' results.
//! - [`domain`] and [`units`]: the words a run is described in (modes,
//!   transports, protocols, segments) and the units people type and read
//!   (10k, 2.5s, 64KiB); they use nothing of throng's.
//! - [`usage`]: the error a mistake in how throng was called raises (exit
//!   code 2), below every module that raises it.
//!
//! [`run`] is the whole program; `main` only maps its result to an exit code
//! with [`exit_code`].

pub mod child;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod compare;
pub mod domain;
pub mod engine;
pub mod evidence;
pub mod exposition;
pub mod limit;
pub mod metrics;
pub mod outcome;
pub mod report;
pub mod scenario;
pub mod server;
pub mod server_config;
pub mod sys;
pub mod tls;
pub mod units;
pub mod usage;

use std::process::ExitCode;

pub use usage::UsageError;

/// Exit codes, in one place: 0 success, 1 failure at run time, 2 bad usage.
pub fn exit_code(err: &anyhow::Error) -> ExitCode {
    if err.downcast_ref::<UsageError>().is_some() {
        ExitCode::from(2)
    } else {
        ExitCode::from(1)
    }
}

/// Runs one command line; the exit code when it ran to its end.
pub fn run(cli: cli::Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        cli::Command::Client(args) => client::run(&args),
        cli::Command::Merge(args) => merge(&args),
        // `throng cluster ... -- limit ...`: a search of cluster runs.
        cli::Command::Cluster(args) if args.client_args.first().is_some_and(|w| w == "limit") => {
            limit::run_cluster(&args)
        }
        cli::Command::Cluster(args) => cluster::ssh::run(&args),
        cli::Command::Tune(args) => tune(&args),
        cli::Command::Compare(args) => compare::run(&args),
        cli::Command::Completions(args) => {
            cli::docs::completions(args.shell, &mut std::io::stdout().lock())?;
            Ok(ExitCode::SUCCESS)
        }
        cli::Command::Man => {
            cli::docs::man(&mut std::io::stdout().lock())?;
            Ok(ExitCode::SUCCESS)
        }
        cli::Command::Report(args) => report_files(&args),
        cli::Command::Limit(args) => limit::run(&args),
        cli::Command::Server(args) => {
            // A child of --processes is given its configuration whole.
            let cfg: server::ServerConfig = if args.child {
                child::read_plan()?
            } else {
                args.config()?
            };
            let ran = server::run(&cfg);
            if let Some(t) = &cfg.tls {
                t.cleanup();
            }
            ran.map(|()| ExitCode::SUCCESS)
        }
    }
}

/// `throng merge`: reads results, merges them, prints the summary.
fn merge(a: &cli::MergeArgs) -> anyhow::Result<ExitCode> {
    let mut results = Vec::new();
    let mut names = Vec::new();
    for p in &a.results {
        results.push(cluster::merge::read(p)?);
        names.push(p.display().to_string());
    }
    let views = a.views.views();
    views.check().map_err(UsageError)?;
    let mut merged = cluster::merge::merge(&results, &names)?;
    let checks = report::check::parse_all(
        &a.check,
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
    cluster::merge::say_what_is_missing(&merged, &mut out)?;
    report::check::apply(&checks, &mut merged, &mut out)?;
    drop(out);
    if let Some(p) = &a.json {
        report::json::write_atomic(p, &merged)?;
    }
    let code = report::check::exit_code(&merged, merged.scenario.max_failures, false);
    let run = report::html::Run {
        label: report::html::label_of(&merged),
        result: &merged,
    };
    Ok(views.finish(&[run], code))
}

/// `throng report`: the HTML report and the .hgrm spectra of results
/// already written (a `throng compare --json` file gives each of its runs),
/// or the curve of a `throng limit --json` file (alone).
fn report_files(a: &cli::ReportArgs) -> anyhow::Result<ExitCode> {
    let views = a.views.views();
    let mut texts = Vec::with_capacity(a.results.len());
    for p in &a.results {
        texts.push(
            std::fs::read_to_string(p).map_err(|e| UsageError(format!("{}: {e}", p.display())))?,
        );
    }
    let limits: Vec<(&std::path::PathBuf, serde_json::Value)> = a
        .results
        .iter()
        .zip(&texts)
        .filter_map(|(p, t)| Some((p, serde_json::from_str(t).ok()?)))
        .filter(|(_, v)| report::curve::is_limit(v))
        .collect();
    if let Some((p, v)) = limits.first() {
        if a.results.len() > 1 {
            return Err(UsageError(format!(
                "{}: a `throng limit --json` file is reported alone (its steps are one \
                 search, not runs to overlay): run `throng report {} [--html FILE]`, and the \
                 other files in a `throng report` of their own",
                p.display(),
                p.display()
            ))
            .into());
        }
        return report_limit(p, v, &views);
    }
    if views.html.is_none() && views.hgrm.is_none() {
        return Err(UsageError(
            "nothing to write: give --html FILE (the report) or --hgrm PREFIX (the spectra), or both"
                .into(),
        )
        .into());
    }
    views.check().map_err(UsageError)?;
    let mut runs: Vec<(String, report::json::RunResult)> = Vec::new();
    for (p, text) in a.results.iter().zip(&texts) {
        let stem = p.file_stem().map_or_else(
            || p.display().to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        match report::json::parse(text) {
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
                    let r = report::json::parse(&run["result"].to_string()).map_err(|e| {
                        UsageError(format!("{}: runs[{i}].result: {e}", p.display()))
                    })?;
                    let case: compare::Case = serde_json::from_value(run.clone())
                        .map_err(|e| UsageError(format!("{}: runs[{i}]: {e}", p.display())))?;
                    let label = if a.results.len() > 1 {
                        format!("{stem} {}", case.label())
                    } else {
                        case.label()
                    };
                    runs.push((label, r));
                }
            }
        }
    }
    let runs: Vec<report::html::Run> = runs
        .iter()
        .map(|(label, r)| report::html::Run {
            label: label.clone(),
            result: r,
        })
        .collect();
    Ok(if views.write(&runs) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `throng report LIMIT.json`: the search's steps by load and its answer,
/// as text, or with `--html` as a page with the curve.
fn report_limit(
    path: &std::path::Path,
    v: &serde_json::Value,
    views: &report::Views,
) -> anyhow::Result<ExitCode> {
    if views.hgrm.is_some() || views.server_stats.is_some() {
        return Err(UsageError(format!(
            "{}: a `throng limit --json` file draws a curve, not spectra or a server's \
             seconds: drop --hgrm and --server-stats (or give them a step's client result)",
            path.display()
        ))
        .into());
    }
    views.check().map_err(UsageError)?;
    let curve = report::curve::Curve::read(v)
        .map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    let Some(html) = &views.html else {
        print!("{}", report::curve::text(&curve));
        return Ok(ExitCode::SUCCESS);
    };
    match report::curve::write_limit_html(html, v) {
        Ok(()) => {
            println!("  report        {}", html.display());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("throng: the HTML report was not written: {e:#}");
            Ok(ExitCode::from(1))
        }
    }
}

/// `throng tune`: the limits table, the commands, and --apply.
fn tune(a: &cli::TuneArgs) -> anyhow::Result<ExitCode> {
    // SAFETY: geteuid has no arguments and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if a.apply && !root {
        return Err(UsageError(
            "--apply changes kernel settings and needs root: run it with sudo, or apply the \
             commands it prints yourself"
                .into(),
        )
        .into());
    }
    let per = sys::tune::measure_kernel_bytes(2000);
    let plan = sys::tune::plan(a.connections, a.role, per);
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &plan)?;
        std::io::Write::write_all(&mut out, b"\n")?;
    } else {
        sys::tune::print(&plan, &mut out)?;
    }
    if a.apply {
        let done = sys::tune::apply(&plan);
        if done.is_empty() {
            std::io::Write::write_all(&mut out, b"applied: nothing needed changing\n")?;
        }
        for d in done {
            std::io::Write::write_fmt(&mut out, format_args!("applied: {d}\n"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
