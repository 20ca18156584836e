//! The `throng compare --json` file: the target and its runs, each a case
//! (a transport, and for tcp and tls the recycling setting) and the whole
//! client result. Written by `throng compare`, read by `throng report`.

use serde::{Deserialize, Serialize};

use super::RunResult;
use crate::domain::Transport;
use crate::verdict::{Cause, Verdict};

/// One row: a transport, and for tcp and tls the recycling setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Comparison {
    pub target: String,
    pub runs: Vec<Run>,
    /// Passes when every case ran and passed; its causes are the failing
    /// runs' own, each labelled with its case (`udp`, `tcp (recycle 10)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
}

impl Comparison {
    /// The verdict of these runs, `missing` of the cases asked having no
    /// result.
    pub fn judge(runs: &[Run], missing: usize) -> Verdict {
        let mut causes = Vec::new();
        let mut pass = missing == 0 && !runs.is_empty();
        for r in runs {
            if r.passed() {
                continue;
            }
            pass = false;
            let label = r.case.label();
            if let Some(v) = &r.result.verdict {
                causes.extend(v.causes.iter().filter(|c| c.explains()).map(|c| Cause {
                    label: label.clone(),
                    ..c.clone()
                }));
            }
        }
        Verdict::new(pass, causes)
    }
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Run {
    #[serde(flatten)]
    pub case: Case,
    /// The client's exit code (0: its checks passed and no connection
    /// failed; see `throng client --check`).
    pub exit_code: i32,
    pub result: RunResult,
}

impl Run {
    /// Whether it passed the comparison: its verdict passed (its exit code
    /// where a result carries none) and a query was answered.
    pub fn passed(&self) -> bool {
        let answered = self.result.queries.as_ref().is_some_and(|q| q.answered > 0);
        let pass = match &self.result.verdict {
            Some(v) => v.pass,
            None => self.exit_code == 0,
        };
        answered && pass
    }
}
