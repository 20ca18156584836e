//! What `throng client` runs, as plain data: the whole scenario, its
//! checks and the run's options. [`crate::cli`] builds it from the flags
//! (after the checks a flag alone decides, the targets resolved); nothing
//! here is a flag.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::domain::{Processes, Segment, Transport};
use crate::report::check::Check;
use crate::report::Views;
use crate::scenario::Scenario;

/// What the client command does.
pub enum ClientCommand {
    /// A child of --processes: its plan is the first line on stdin.
    ChildPlan,
    /// A run as configured.
    Run(Box<ClientConfig>),
}

/// A client run.
pub struct ClientConfig {
    /// The whole scenario (a segment runs its slice of it). Its targets
    /// are the resolved ones, or 127.0.0.1:0 with no target (the embedded
    /// server's address replaces it once that server listens).
    pub whole: Scenario,
    /// The checks of its result.
    pub checks: Vec<Check>,
    /// The files made at the end.
    pub views: Views,
    /// --source-ip's addresses (none: the planner chooses).
    pub sources_given: Vec<IpAddr>,
    /// No target was given: the embedded server is the target.
    pub no_target: bool,
    /// The embedded server a run of several processes starts apart.
    pub server: ServerKind,
    /// --segment: the slice this process runs.
    pub segment: Option<Segment>,
    /// Per-second JSON lines on stdout (a child of `throng cluster` or
    /// `throng limit`).
    pub child: bool,
    /// A load host of `throng cluster`: its report, then `go` awaited on
    /// stdin.
    pub session: bool,
    /// --json: the result's file.
    pub json: Option<PathBuf>,
    /// --force: run a plan the preflight refuses.
    pub force: bool,
    /// --control: commands on stdin.
    pub control: bool,
    /// --pause: wait for Enter after the ramp.
    pub pause: bool,
    /// --start-at: when to start (Unix seconds).
    pub start_at: Option<f64>,
    /// --start-barrier: the directory the slices meet in.
    pub start_barrier: Option<PathBuf>,
    /// --rtt-log: the per-query CSV file.
    pub rtt_log: Option<PathBuf>,
    /// --quiet: no live view.
    pub quiet: bool,
    /// --processes.
    pub processes: Processes,
    /// --workers, as given.
    pub workers: Option<u64>,
    /// --run-id.
    pub run_id: Option<String>,
    /// --metrics: where to serve the live figures.
    pub metrics: Option<SocketAddr>,
}

/// The embedded server started in processes of its own (`throng server`):
/// echo, or push at a period; over UDP or TCP.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerKind {
    /// --proto push's --every (None: echo).
    pub push_every: Option<Duration>,
    pub transport: Transport,
}
