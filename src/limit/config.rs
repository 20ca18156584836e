//! What `throng limit` searches, as plain data: the search's own settings
//! and the client flags it reads. [`crate::cli`] builds it from the flags;
//! the steps are given the user's words themselves (read from the command
//! line), less those each step sets.

use std::path::PathBuf;
use std::time::Duration;

use crate::client::ServerKind;
use crate::domain::{Processes, Proto, Segment, Transport};
use crate::report::Views;

/// What a search looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Find {
    /// The most connections the server holds (established, verified,
    /// none failed).
    Connections,
    /// The highest query rate it answers over -c connections.
    Rate,
}

/// A search.
#[derive(Debug, Clone)]
pub struct LimitConfig {
    pub find: Find,
    /// --max: the highest load to try.
    pub max: Option<f64>,
    /// --step-time: how long each step holds its load after its ramp.
    pub step_time: Duration,
    /// --precision: the share the interval narrows to.
    pub precision: f64,
    /// The client flags given with the search.
    pub client: ClientFlags,
}

/// The client flags a search reads (to refuse, to plan held steps, to
/// judge them), by the names of `throng client`'s flags.
#[derive(Debug, Clone)]
pub struct ClientFlags {
    pub targets: Vec<String>,
    pub connections: u64,
    pub rate: Option<f64>,
    pub connect_rate: Option<f64>,
    pub connect_timeout: Duration,
    pub timeout: Duration,
    pub workers: Option<u64>,
    /// How many --source-ip were given.
    pub source_ips: usize,
    pub processes: Processes,
    pub transport: Transport,
    pub proto: Proto,
    /// The embedded server with no target.
    pub server: ServerKind,
    pub connections_schedule: Option<String>,
    pub lifetime: Option<Duration>,
    pub max_queries_per_conn: Option<u64>,
    pub messages: Option<u64>,
    pub schedule: Option<String>,
    pub schedule_file: Option<PathBuf>,
    pub interval: Option<Duration>,
    pub queries: Option<u64>,
    pub closed_loop: bool,
    pub check: Vec<String>,
    /// --verify and not --no-verify.
    pub verify: bool,
    pub views: Views,
    pub json: Option<PathBuf>,
    pub segment: Option<Segment>,
    /// --child or --child-plan (internal flags).
    pub child: bool,
    /// --control given.
    pub control: bool,
    pub pause: bool,
    pub hold: bool,
}
