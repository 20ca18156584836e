//! The `throng compare --json` file: the target and its runs, each a case
//! (a transport, and for tcp and tls the recycling setting) and the whole
//! client result. Written by `throng compare`, read by `throng report`.

use serde::{Deserialize, Serialize};

use super::RunResult;
use crate::domain::Transport;

/// One row: a transport, and for tcp and tls the recycling setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Case {
    pub transport: Transport,
    pub max_queries_per_conn: Option<u64>,
}

impl Case {
    pub fn label(&self) -> String {
        match self.max_queries_per_conn {
            Some(n) => format!("{} (recycle {n})", self.transport.name()),
            None => self.transport.name().to_string(),
        }
    }
}

/// What --json holds.
#[derive(Debug, Serialize, Deserialize)]
pub struct Comparison {
    pub target: String,
    pub runs: Vec<Run>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Run {
    #[serde(flatten)]
    pub case: Case,
    /// The client's exit code (0: its checks passed and no connection
    /// failed; see `throng client --check`).
    pub exit_code: i32,
    pub result: RunResult,
}
