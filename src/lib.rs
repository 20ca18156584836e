//! throng: find the limits of TCP servers under a huge number of clients.
//!
//! The module map, top to bottom: a module uses only modules below it (data
//! flows down, never back up; `tests/module_graph.rs` fails on a circle).
//!
//! - [`cli`]: flags (clap) and what they convert into: a
//!   [`scenario::Scenario`], a [`server_config::ServerConfig`], a
//!   [`cluster::ssh::ClusterConfig`], a [`compare::CompareConfig`].
//!   [`limit`] and [`client`] take its `LimitArgs` and `ClientArgs`; below
//!   it nothing sees a flag.
//! - [`limit`]: `throng limit`, a search of client (or cluster) runs, each
//!   judged by its verdict, and why the failing one failed.
//! - [`client`]: `throng client` from flags to report: targets, sources,
//!   preflight, then [`engine`] runs the [`scenario`], here or in child
//!   processes each given its slice.
//! - [`compare`]: one workload over each transport.
//! - [`cluster`]: the scenario sliced over hosts through ssh, the exact
//!   merge of results, and `throng merge`.
//! - [`server`]: the reference server: a mio loop per worker, SO_REUSEPORT
//!   listeners, responders built on the pure codecs of `crates/wire`; one
//!   process or a group on one port.
//! - [`report`]: live view, summary, JSON result, the Prometheus endpoint
//!   (`--metrics`, the server's too); the HTML report and the .hgrm spectra
//!   (`throng report`, `--html`, `--hgrm`); a limit search's curve; the
//!   `throng compare --json` file's types.
//! - [`child`]: the line protocol between a parent and its child processes.
//! - [`engine`]: the client's data plane: a mio loop per worker.
//! - [`outcome`]: the result file's types (one type per format) and their
//!   merge: what engine measured, report and cluster write, read and merge.
//! - [`server_config`]: the reference server's configuration, as plain
//!   serde data, and its TLS certificate and key.
//! - [`evidence`]: what this host shows of the client and of a server on
//!   it (/proc, the kernel's counters), for the verdict's causes.
//! - [`tls`]: the rustls configurations of both sides.
//! - [`exposition`]: the HTTP endpoint `--metrics` is served on.
//! - [`scenario`]: what a client run does, as plain serde data.
//! - [`sys`]: what the OS allows: fd limits, sysctls, kernel counters,
//!   source addresses, the fd hand-off between processes; `throng tune`.
//! - [`metrics`]: counters, statuses and HDR histograms, each with one
//!   merge: of workers, of processes, of hosts' results.
//! - [`domain`] and [`units`]: the words a run is described in (modes,
//!   transports, protocols, segments) and the units people type and read
//!   (10k, 2.5s, 64KiB); they use nothing of throng's.
//! - [`verdict`]: a run's verdict as a value (pass, whose side, causes by
//!   code with their figures), below everything that names or reads one.
//! - [`usage`]: the error a mistake in how throng was called raises (exit
//!   code 2), below every module that raises it.
//! - [`console`]: stdout and stderr, where a closed pipe ends the printing
//!   and not the run (`outln!`, `errln!`), and stdout given to data by
//!   `--json -`; below everything that prints.
//!
//! [`run`] is the whole program, a dispatch to each command's module;
//! `main` only maps its result to an exit code with [`exit_code`].

#[macro_use]
pub mod console;
pub mod child;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod compare;
pub mod domain;
pub mod engine;
pub mod evidence;
pub mod exposition;
#[cfg(test)]
mod fixtures;
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
pub mod verdict;

use std::process::ExitCode;

pub use usage::UsageError;

/// This build: its version and commit. Hosts of one `cluster` run must
/// all run it.
pub const BUILD: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("THRONG_COMMIT"), ")");

/// `throng --version`: the version, the commit and the build date.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("THRONG_COMMIT"),
    ", built ",
    env!("THRONG_BUILD_DATE"),
    ")"
);

/// The exit codes (README, docs/result.md): 0 pass; 1 a check failed
/// (the server's, or its SLO); 2 usage, or a plan refused; 3 the run could
/// not be measured or its results not written; 130 interrupted.
pub mod exit {
    pub const PASS: u8 = 0;
    pub const FAILED: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const UNMEASURED: u8 = 3;
    pub const INTERRUPTED: u8 = 130;
}

/// The exit code of an error: 2 for bad usage, else 3 (it could not be
/// measured, or not written).
pub fn exit_code(err: &anyhow::Error) -> ExitCode {
    if err.downcast_ref::<UsageError>().is_some() {
        ExitCode::from(exit::USAGE)
    } else {
        ExitCode::from(exit::UNMEASURED)
    }
}

/// Runs one command line; the exit code when it ran to its end.
pub fn run(cli: cli::Cli) -> anyhow::Result<ExitCode> {
    let json = match &cli.command {
        cli::Command::Client(a) if !a.child => a.json.as_deref(),
        cli::Command::Limit(a) => a.client.json.as_deref(),
        cli::Command::Merge(a) => a.json.as_deref(),
        cli::Command::Compare(a) => a.json.as_deref(),
        cli::Command::Cluster(a) => a.json.as_deref(),
        _ => None,
    };
    if json.is_some_and(report::json::is_stdout) {
        // `--json -`: the result on stdout, the words for people on stderr.
        console::stdout_for_data();
    }
    match cli.command {
        cli::Command::Client(args) => client::run(args.config()?),
        cli::Command::Merge(args) => cluster::files::merge(
            &args.results,
            args.json.as_deref(),
            &args.views.views(),
            &args.check,
        ),
        // `throng cluster ... -- limit ...`: a search of cluster runs.
        cli::Command::Cluster(args) if args.client_args.first().is_some_and(|w| w == "limit") => {
            limit::run_cluster(&args.limit_config()?)
        }
        cli::Command::Cluster(args) => cluster::ssh::run(&args.config()?),
        cli::Command::Tune(args) if args.measure => sys::tune::run_measure(args.json),
        cli::Command::Tune(args) => {
            sys::tune::run(args.connections, args.role, args.json, args.apply)
        }
        cli::Command::Compare(args) => compare::run(&args.config()),
        cli::Command::Completions(args) => {
            cli::docs::completions(args.shell, &mut crate::console::stdout())?;
            Ok(ExitCode::SUCCESS)
        }
        cli::Command::Man => {
            cli::docs::man(&mut crate::console::stdout())?;
            Ok(ExitCode::SUCCESS)
        }
        cli::Command::Report(args) => report::files::run(&args.results, &args.views.views()),
        cli::Command::Limit(args) => limit::run(&args.config()?),
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
