//! What a run measured, in the form the summary prints and a merge adds:
//! the engine returns it, a result file is written from it and read back
//! as it ([`super::RunResult::outcome`]).

use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::Sample;
use crate::metrics::{ConnTotals, Histograms, PushTotals, QueryTotals, StatusCounts};

/// A command received on --control, with when it applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ControlEvent {
    /// Seconds since the start.
    pub t: f64,
    pub command: String,
    pub applied: bool,
}

/// What the query traffic measured.
#[derive(Clone)]
pub struct QueryOutcome {
    pub totals: QueryTotals,
    pub statuses: StatusCounts,
    pub in_flight: u64,
    /// Seconds from the traffic start to the end.
    pub seconds: f64,
    /// Queries the schedule asked for over that time.
    pub target_queries: f64,
    pub controls: Vec<ControlEvent>,
}

/// Everything a run measured.
pub struct Outcome {
    pub totals: ConnTotals,
    /// Connect, connect() call and TLS handshake times (TLS: from the TCP
    /// connection up to the first byte it can carry; empty without TLS);
    /// with traffic, the queries' times too (empty without).
    pub hists: Histograms,
    pub peak: i64,
    pub per_second: Vec<Sample>,
    /// Stopped by a signal before its planned end.
    pub interrupted: bool,
    /// From the start until every connection of the ramp was verified,
    /// found unverified, or failed (with --verify).
    pub verify_time: Option<Duration>,
    /// From the start to the last initial attempt resolved.
    pub ramp_time: Option<Duration>,
    pub elapsed: Duration,
    pub queries: Option<QueryOutcome>,
    /// What had not stopped at the run's deadline (`-T` + `--drain` +
    /// [`crate::engine::GRACE`]) and was left behind, in words.
    pub overrun: Vec<String>,
    /// --proto push: what arrived (its times are in `hists`).
    pub push: Option<PushTotals>,
    /// The client's CPU and what was seen of the server on this host (set
    /// by the caller, which watched the run).
    pub observed: crate::evidence::Observed,
    /// --stop-on ended the ramp early: when and why, in words.
    pub ramp_stopped: Option<String>,
    /// When the run happened on the wall clock (None: read back from a
    /// result written before results said so).
    pub wall: Option<Wall>,
}

/// When a run happened, on the wall clock (Unix seconds): what slices of
/// one run, on many processes or hosts, are aligned by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Wall {
    /// The first connection attempt may go (after --start-at).
    pub start_unix_s: f64,
    /// Everything stopped (after --drain).
    pub end_unix_s: f64,
    /// The traffic's interval: queries were sent from its start to its end
    /// (the drain only waits for answers). Rates are over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_start_unix_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_end_unix_s: Option<f64>,
    /// The hold's interval: from when every attempt of the ramp was
    /// resolved (established and verified, or not) to the run's end,
    /// before its drain. On a whole of many parts, the interval all of them
    /// held together: its start is after its end when they never did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_start_unix_s: Option<f64>,
    /// When every attempt of the ramp was established or failed (before
    /// verification); on a whole, the last part's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub established_unix_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_end_unix_s: Option<f64>,
}

impl Wall {
    /// The same times on a clock `offset_s` behind the one they were read
    /// on (a load host's times on the controller's clock).
    pub fn shifted(&self, offset_s: f64) -> Wall {
        let at = |t: f64| t - offset_s;
        Wall {
            start_unix_s: at(self.start_unix_s),
            end_unix_s: at(self.end_unix_s),
            traffic_start_unix_s: self.traffic_start_unix_s.map(at),
            traffic_end_unix_s: self.traffic_end_unix_s.map(at),
            held_start_unix_s: self.held_start_unix_s.map(at),
            established_unix_s: self.established_unix_s.map(at),
            held_end_unix_s: self.held_end_unix_s.map(at),
        }
    }

    /// From the first start to the last end (the traffic's too); the
    /// hold, what both held together; the last establishment.
    pub fn span(&self, o: &Wall) -> Wall {
        let pick = |a: Option<f64>, b: Option<f64>, f: fn(f64, f64) -> f64| match (a, b) {
            (Some(a), Some(b)) => Some(f(a, b)),
            (a, b) => a.or(b),
        };
        // (What every part held is unknown when one part does not say.)
        let both = |a: Option<f64>, b: Option<f64>, f: fn(f64, f64) -> f64| Some(f(a?, b?));
        Wall {
            start_unix_s: self.start_unix_s.min(o.start_unix_s),
            end_unix_s: self.end_unix_s.max(o.end_unix_s),
            traffic_start_unix_s: pick(self.traffic_start_unix_s, o.traffic_start_unix_s, f64::min),
            traffic_end_unix_s: pick(self.traffic_end_unix_s, o.traffic_end_unix_s, f64::max),
            held_start_unix_s: both(self.held_start_unix_s, o.held_start_unix_s, f64::max),
            held_end_unix_s: both(self.held_end_unix_s, o.held_end_unix_s, f64::min),
            established_unix_s: both(self.established_unix_s, o.established_unix_s, f64::max),
        }
    }

    /// Seconds every part held its connections together (negative: the
    /// gap between them), when the parts say.
    pub fn held_together_s(&self) -> Option<f64> {
        self.held_start_unix_s
            .zip(self.held_end_unix_s)
            .map(|(a, b)| b - a)
    }

    /// The traffic's interval, when it had one.
    pub fn traffic(&self) -> Option<(f64, f64)> {
        self.traffic_start_unix_s.zip(self.traffic_end_unix_s)
    }
}

impl QueryOutcome {
    /// Adds another part's traffic (a process's, a host's): counters
    /// added (its histograms are the outcome's), the longest traffic's seconds, the control
    /// commands of both in order.
    pub fn merge(&mut self, o: &QueryOutcome) {
        self.totals.merge(&o.totals);
        self.statuses.merge(&o.statuses);
        self.in_flight += o.in_flight;
        self.seconds = self.seconds.max(o.seconds);
        self.target_queries += o.target_queries;
        self.controls.extend(o.controls.iter().cloned());
    }
}

impl Outcome {
    /// Adds another part of the same run (a process's, a host's): counters
    /// and histograms added; the parts hold their connections at the same
    /// time, so their peaks add; the ramp, verification and run take the
    /// longest part's time. The per-second series is left as it is: the
    /// caller aligns every part's seconds on the wall clock at once
    /// ([`Sample::merged`]).
    pub fn merge(&mut self, o: &Outcome) -> Result<()> {
        self.totals.merge(&o.totals);
        self.hists.merge(&o.hists)?;
        self.peak += o.peak;
        self.interrupted |= o.interrupted;
        self.verify_time = self.verify_time.max(o.verify_time);
        self.ramp_time = self.ramp_time.max(o.ramp_time);
        self.elapsed = self.elapsed.max(o.elapsed);
        // (A part that does not say when it ran leaves the whole unknown.)
        self.wall = self.wall.zip(o.wall).map(|(a, b)| a.span(&b));
        self.overrun.extend(o.overrun.iter().cloned());
        let answered = |q: &Option<QueryOutcome>| q.as_ref().map_or(0, |q| q.totals.answered);
        let all = answered(&self.queries) + answered(&o.queries);
        self.observed.merge(&o.observed, all);
        if self.ramp_stopped.is_none() {
            self.ramp_stopped.clone_from(&o.ramp_stopped);
        }
        match (self.queries.as_mut(), &o.queries) {
            (Some(q), Some(oq)) => q.merge(oq),
            (None, Some(oq)) => self.queries = Some(oq.clone()),
            (_, None) => {}
        }
        if let Some(p) = &o.push {
            self.push.get_or_insert_with(PushTotals::default).merge(p);
        }
        Ok(())
    }
}
#[cfg(test)]
mod tests {
    use crate::fixtures::outcome;
    use std::time::Duration;

    #[test]
    fn outcomes_merge_counts_peaks_and_longest_times() {
        let mut a = outcome(1, 2.0);
        let b = outcome(2, 3.0);
        a.verify_time = None;
        a.merge(&b).unwrap();
        assert_eq!(a.totals.established, 27);
        assert_eq!(a.peak, 27);
        assert_eq!(a.hists.connect_time.len(), 4);
        assert_eq!(a.elapsed, Duration::from_secs(3));
        assert_eq!(a.ramp_time, Some(Duration::from_secs_f64(0.75)));
        // A part without the figure leaves the other's.
        assert_eq!(a.verify_time, Some(Duration::from_secs_f64(1.5)));
        let q = a.queries.as_ref().unwrap();
        assert_eq!((q.totals.sent, q.in_flight, q.seconds), (300, 3, 3.0));
        assert_eq!(q.target_queries, 300.0);
        assert_eq!(a.hists.response_time.len(), 4);
        assert_eq!(q.statuses.rcodes[0], 270);
        assert_eq!(q.controls.len(), 2);
    }

    #[test]
    fn a_part_without_traffic_adds_none_and_takes_the_others() {
        let mut quiet = outcome(1, 2.0);
        quiet.queries = None;
        let mut a = outcome(2, 3.0);
        a.merge(&quiet).unwrap();
        assert_eq!(a.queries.as_ref().unwrap().totals.sent, 200);
        quiet.merge(&outcome(2, 3.0)).unwrap();
        assert_eq!(quiet.queries.as_ref().unwrap().totals.sent, 200);
    }
}
