//! `throng limit --json`'s file: the search's answer ([`Found`]), its
//! steps (each a client run's result, or a held step's figures) and the
//! held runs' whole results. Written by limit, read by report (the curve)
//! and the tests. A step's result and a held run's are written with their
//! keys sorted at every level (through a `serde_json::Value`); the rest in
//! the order of the fields here.

use serde::{Deserialize, Serialize, Serializer};

use super::{CheckOutcome, RunResult, Verdict};
use crate::domain::Transport;
use crate::evidence::{ClientCpu, ServerSeen};

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LimitFile {
    pub limit: Found,
    pub steps: Vec<Step>,
    /// The whole results of the held runs.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "sorted"
    )]
    pub held_runs: Vec<RunResult>,
}

/// `value` with the keys of its objects sorted.
fn sorted<T: Serialize, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(value)
        .map_err(serde::ser::Error::custom)?
        .serialize(s)
}

/// A search's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Found {
    /// "connections" or "rate".
    pub axis: String,
    /// The highest load that passed (None: not even the first).
    pub value: Option<f64>,
    pub lower: Option<f64>,
    pub upper: Option<f64>,
    /// The best pass passed again when run once more (rate searches).
    pub stable: Option<bool>,
    /// The load generator, not the server, was the limit at `upper`.
    #[serde(default)]
    pub client_limited: bool,
    /// The failing step's cause, by its verdict's code (None: nothing
    /// seen names one, no step failed, or the client was the limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<crate::verdict::Code>,
    /// Whose side the failing step's verdict put the limit on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side: Option<crate::verdict::Side>,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub evidence: Vec<String>,
}

/// One step: a client run at `load`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Step {
    pub load: f64,
    pub pass: bool,
    pub exit_code: i32,
    /// The failing step's load generator explained the failure.
    pub client_limited: bool,
    /// A step of a held run (connections kept open from the step before):
    /// `result` holds its figures, not a whole run's result; the held
    /// run's is in `held_runs`.
    pub held: bool,
    /// The step's result (null when the run wrote none: a plan it
    /// refused).
    #[serde(serialize_with = "sorted")]
    pub result: Option<StepResult>,
    /// A rate step's pace (None: a connections step, or one too short
    /// to have a judged second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pace: Option<Pace>,
    /// What the step's client printed (not in the file).
    #[serde(skip)]
    pub summary: String,
}

/// A rate step's pace: over its judged seconds (those offered whole at
/// the step's rate, after the first), the answers that came in them
/// against the queries that came due in them. A server that keeps up
/// answers as fast as queries come, so the two differ by the few in
/// flight; one that answers from a growing queue falls behind here even
/// when every answer comes before the drain ends.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Pace {
    pub seconds: u64,
    pub due: u64,
    pub answered: u64,
    /// The step kept pace: `answered` fell short of `due` by at most the
    /// share the search allows, or by the count's own noise where that
    /// is more (twice its square root: the queries in flight at the
    /// window's two ends differ by about that much at low rates).
    pub kept: bool,
}

impl Pace {
    /// The pace of `answered` of `due` over `seconds`, kept when at least
    /// `share` of them were answered (less the noise).
    pub fn new(seconds: u64, due: u64, answered: u64, share: f64) -> Pace {
        let short = due.saturating_sub(answered) as f64;
        let allowed = ((1.0 - share) * due as f64).max(2.0 * (due as f64).sqrt());
        Pace {
            seconds,
            due,
            answered,
            kept: short <= allowed,
        }
    }

    /// The share of the judged seconds' due queries answered in them.
    pub fn share(&self) -> f64 {
        self.answered as f64 / self.due.max(1) as f64
    }

    /// Queries due in the judged seconds not answered in them.
    pub fn short(&self) -> u64 {
        self.due.saturating_sub(self.answered)
    }
}

/// A step's result: a held step's figures, or a fresh run's whole result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum StepResult {
    Held(Box<HeldStep>),
    Run(Box<RunResult>),
}

impl StepResult {
    /// The step's verdict (None: a result written before results carried
    /// one).
    pub fn verdict(&self) -> Option<&Verdict> {
        match self {
            StepResult::Held(h) => h.verdict.as_ref(),
            StepResult::Run(r) => r.verdict.as_ref(),
        }
    }

    pub fn server_seen(&self) -> Option<&ServerSeen> {
        match self {
            StepResult::Held(h) => h.server_seen.as_ref(),
            StepResult::Run(r) => r.server_seen.as_ref(),
        }
    }

    pub fn client(&self) -> Option<&ClientCpu> {
        match self {
            StepResult::Held(h) => h.client.as_ref(),
            StepResult::Run(r) => r.client.as_ref(),
        }
    }

    pub fn duration_s(&self) -> f64 {
        match self {
            StepResult::Held(h) => h.duration_s,
            StepResult::Run(r) => r.duration_s,
        }
    }

    /// This host's cores, as the step saw them.
    pub fn cores(&self) -> f64 {
        match self {
            StepResult::Held(h) => h.environment.cores,
            StepResult::Run(r) => r.environment.cores as f64,
        }
    }

    /// Connections the server closed with nothing in flight.
    pub fn peer_closed(&self) -> u64 {
        match self {
            StepResult::Held(h) => h.connections.peer_closed,
            StepResult::Run(r) => r.connections.peer_closed,
        }
    }

    /// Queries due and answered ok (None: no queries).
    pub fn due_ok(&self) -> Option<(u64, u64)> {
        match self {
            StepResult::Held(h) => h.queries.as_ref().map(|q| (q.due, q.ok)),
            StepResult::Run(r) => r
                .queries
                .as_ref()
                .map(|q| (q.due, q.ok.unwrap_or(q.answered))),
        }
    }
}

/// A held step's figures, in `throng client --json`'s keys (so the same
/// --check expressions read them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HeldStep {
    /// Always true: what tells it from a run's result.
    pub held: bool,
    /// The seconds judged (with queries: warm-up and judged).
    pub duration_s: f64,
    pub connections: HeldConnections,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queries: Option<HeldQueries>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<HeldLatency>,
    pub environment: HeldEnvironment,
    pub scenario: HeldScenario,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientCpu>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_seen: Option<ServerSeen>,
    /// The verdicts of the checks a held step can read.
    #[serde(default)]
    pub checks: Vec<CheckOutcome>,
    /// The step's verdict, as a run's: pass, whose side, the causes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
}

/// A held step's connections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HeldConnections {
    /// What the step asked for.
    pub target: u64,
    pub attempted: u64,
    /// Open at the step's end.
    pub established: u64,
    pub verified: u64,
    /// Open and not verified (None on a step with an offered rate: its
    /// queries go to connections at random, and one no query went to is
    /// idle, not unverified, which its seconds cannot tell apart; fresh
    /// steps count them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unverified: Option<u64>,
    pub failed: FailedAny,
    /// The most open in one of its seconds.
    pub peak: i64,
    /// Open ones that ended during the step.
    pub peer_closed: u64,
}

/// Failed connections, not by cause (the seconds count them together).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FailedAny {
    pub any: u64,
}

/// A held step's queries: counts over all its seconds (its drain's too),
/// rates over its judged ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HeldQueries {
    pub due: u64,
    pub sent: u64,
    pub answered: u64,
    /// Answered with a success (neither an error nor an answer that said
    /// failure).
    pub ok: u64,
    pub errors: u64,
    /// Answers that said failure (HTTP 5xx/4xx, DNS SERVFAIL/REFUSED, a
    /// mismatch), by its seconds (None: seconds that did not count them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_answers: Option<u64>,
    pub timed_out: u64,
    pub loop_late: u64,
    pub rate_target: f64,
    pub rate_sent: f64,
    pub rate_achieved: f64,
}

/// A held step's times, after its warm-up (null: a second's histogram
/// was missing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HeldLatency {
    pub response_time_us: Option<StepLatency>,
    pub service_time_us: Option<StepLatency>,
}

/// Percentiles of a held step's seconds added (the histogram itself is
/// in the held run's result).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StepLatency {
    pub count: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub p9999: u64,
    pub max: u64,
    pub mean: f64,
    pub stdev: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HeldEnvironment {
    /// This host's cores.
    pub cores: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HeldScenario {
    pub transport: Transport,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held() -> HeldStep {
        HeldStep {
            held: true,
            duration_s: 2.0,
            connections: HeldConnections {
                target: 200,
                attempted: 100,
                established: 195,
                verified: 192,
                unverified: Some(3),
                failed: FailedAny { any: 2 },
                peak: 195,
                peer_closed: 5,
            },
            queries: None,
            latency: None,
            environment: HeldEnvironment { cores: 2.0 },
            scenario: HeldScenario {
                transport: Transport::Tcp,
            },
            client: None,
            server_seen: None,
            checks: Vec::new(),
            verdict: None,
        }
    }

    /// A held step's figures are written with their keys sorted, nothing
    /// absent written as null, and read back as a held step.
    #[test]
    fn a_held_step_is_written_sorted_and_read_back() {
        let step = Step {
            load: 200.0,
            pass: false,
            exit_code: 1,
            client_limited: false,
            held: true,
            result: Some(StepResult::Held(Box::new(held()))),
            pace: None,
            summary: "not written".into(),
        };
        let text = serde_json::to_string(&step).unwrap();
        assert_eq!(
            text,
            "{\"load\":200.0,\"pass\":false,\"exit_code\":1,\"client_limited\":false,\
             \"held\":true,\"result\":{\"checks\":[],\"connections\":{\"attempted\":100,\
             \"established\":195,\"failed\":{\"any\":2},\"peak\":195,\"peer_closed\":5,\
             \"target\":200,\"unverified\":3,\"verified\":192},\"duration_s\":2.0,\
             \"environment\":{\"cores\":2.0},\"held\":true,\"scenario\":{\"transport\":\"tcp\"}}}"
        );
        let back: Step = serde_json::from_str(&text).unwrap();
        assert_eq!(back.result, step.result);
        assert_eq!(back.summary, "");
    }

    #[test]
    fn a_step_without_a_result_is_null() {
        let v = serde_json::json!({"load": 1.0, "pass": false, "exit_code": 2,
                                   "client_limited": true, "held": false, "result": null});
        let s: Step = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(s.result, None);
        assert_eq!(serde_json::to_value(&s).unwrap(), v);
    }
}
