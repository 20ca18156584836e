//! What a client run does, as plain data: targets, connections, ramp, how
//! the run ends, source addresses. Built once by [`crate::cli`] from the
//! flags (after names are resolved and sources planned), checked, then
//! handed to the engine (here, or as JSON to a child of `--processes`) and
//! written into the JSON result as "the scenario as run". Its schedules and query files are parsed in `schedule` and
//! `queries`.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::domain::{
    fnv1a, Arrivals, ConnectMode, Proto, RunId, RunIdFrom, Segment, Spread, Transport,
};

mod queries;
mod schedule;

pub use queries::{check_name, parse_query_file, MAX_QTYPES, RAND_LABEL_LEN};
pub use schedule::{area, level_at, parse_phases, Phase};

/// Default --connect-rate.
pub const DEFAULT_CONNECT_RATE: f64 = 10_000.0;

/// How connection attempts are spread over time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Ramp {
    /// Evenly spaced: attempt i at i / per_second.
    Rate { per_second: f64 },
    /// `size` attempts at once every `delay_s`.
    Batch { size: u64, delay_s: f64 },
}

impl Ramp {
    /// When attempt `i` (0-based, over all workers) is due, from the start.
    pub fn due(&self, i: u64) -> Duration {
        let secs = match *self {
            Ramp::Rate { per_second } => i as f64 / per_second,
            Ramp::Batch { size, delay_s } => (i / size) as f64 * delay_s,
        };
        Duration::from_secs_f64(secs)
    }

    /// Connections per second this ramp aims at.
    pub fn rate(&self) -> f64 {
        match *self {
            Ramp::Rate { per_second } => per_second,
            Ramp::Batch { size, delay_s } => size as f64 / delay_s.max(1e-9),
        }
    }
}

/// How the hold phase ends.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum End {
    /// This long after the ramp ends.
    Duration { seconds: f64 },
    /// At SIGINT/SIGTERM.
    Hold,
    /// At Enter on stdin (or its end).
    Pause,
}

impl Query {
    /// Its protocol.
    pub fn proto(&self) -> Proto {
        match self {
            Query::Dns { .. } => Proto::Dns,
            Query::Echo { .. } => Proto::Echo,
            Query::Ping => Proto::Ping,
            Query::Http { .. } => Proto::Http,
            Query::Raw { .. } => Proto::Raw,
            Query::WebSocket { .. } => Proto::Websocket,
            Query::Redis { .. } => Proto::Redis,
        }
    }
}

/// What one query is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Query {
    Dns {
        qtype: u16,
        names: Vec<String>,
        /// Each name's own type, from a query file (empty: all `qtype`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        qtypes: Vec<u16>,
        /// EDNS UDP payload size (None: no OPT record).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        edns: Option<u16>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        dnssec_ok: bool,
    },
    Echo {
        size: usize,
        validate: bool,
    },
    Ping,
    Http {
        request: String,
    },
    Raw {
        message: String,
        first_message: Option<String>,
        marker: Option<String>,
    },
    /// One WebSocket message per query (escaped as --message), answered by
    /// one message; the upgrade is [`Scenario::websocket`].
    #[serde(rename = "websocket")]
    WebSocket {
        message: String,
        binary: bool,
    },
    /// Redis commands (--redis-command, as redis-cli splits them), taken
    /// in turn; each `__rand_int__` a number drawn in 0..`keys`.
    Redis {
        commands: Vec<String>,
        keys: u64,
    },
}

/// The WebSocket opening handshake each connection makes (--proto
/// websocket, or --proto push --push-over websocket).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WsUpgrade {
    /// The request target (--ws-path).
    pub path: String,
    /// More header lines (--ws-header NAME:VALUE).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subprotocol: Option<String>,
}

/// When queries are sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Model {
    /// A total rate (or a schedule of rates) over all connections.
    OpenLoop {
        phases: Vec<Phase>,
        arrivals: Arrivals,
        spread: Spread,
    },
    /// Each connection every `every_s`.
    Interval { every_s: f64 },
    /// Next query when one is answered, after `think_s`.
    ClosedLoop { think_s: f64 },
}

/// The query traffic of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Traffic {
    pub proto: Proto,
    pub query: Query,
    pub model: Model,
    /// Most outstanding per connection (None: unlimited).
    pub window: Option<u64>,
    pub messages: Option<u64>,
    /// Queries in all, over every connection: the run ends once they are
    /// done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queries: Option<u64>,
    pub max_queries_per_conn: Option<u64>,
    pub timeout_s: f64,
    pub close_on_timeout: bool,
    pub seed: u64,
    /// After the traffic: seconds to wait for the queries in flight (at
    /// most `timeout_s`; 0 stops at once).
    #[serde(default)]
    pub drain_s: f64,
    /// --slack: queries due within this many seconds of the first go out
    /// together (0: each at its own due time).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub slack_s: f64,
    /// Answers that count as successes beyond the protocol's own:
    /// --ok-rcodes (DNS), --ok-status (HTTP).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ok_rcodes: Vec<u8>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ok_status: Vec<u16>,
}

impl Traffic {
    /// Seconds the traffic lasts by its own schedule, if it has one.
    pub fn schedule_seconds(&self) -> Option<f64> {
        match &self.model {
            Model::OpenLoop { phases, .. }
                if phases.len() > 1 || phases[0].from != phases[0].to =>
            {
                Some(phases.iter().map(|p| p.seconds).sum())
            }
            _ => None,
        }
    }

    /// The rate asked for `t` seconds into the traffic (open loop).
    pub fn rate_at(&self, t: f64, connections: u64) -> f64 {
        match &self.model {
            Model::OpenLoop { phases, .. } => level_at(phases, t),
            Model::Interval { every_s } => connections as f64 / every_s,
            Model::ClosedLoop { .. } => 0.0,
        }
    }
}

/// Turns the escaped form kept in a [`Query`] back into bytes.
pub fn unescaped(s: &str) -> Vec<u8> {
    wire::escape::unescape(s).unwrap_or_else(|_| s.as_bytes().to_vec())
}

/// A client run, validated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Scenario {
    /// Resolved targets; connection i goes to `targets[i % len]`.
    pub targets: Vec<SocketAddr>,
    /// The targets as given (empty with the embedded server).
    pub target_names: Vec<String>,
    pub embedded_server: bool,
    pub connections: u64,
    pub ramp: Ramp,
    pub connect_mode: ConnectMode,
    pub max_inflight_connects: u64,
    pub connect_timeout_s: f64,
    /// Source addresses in use order; empty: the kernel chooses.
    pub sources: Vec<IpAddr>,
    pub end: End,
    pub lifetime_s: Option<f64>,
    pub reconnect: bool,
    /// A connection the server closed with nothing in flight is replaced
    /// (the default when the run sends queries; --no-reconnect: not).
    #[serde(default)]
    pub replace_closed: bool,
    pub preallocate: bool,
    /// --connections-schedule: open connections over time (then
    /// `connections` is its highest level and the run lasts its phases).
    pub connections_schedule: Option<Vec<Phase>>,
    /// Queries over the connections; None: connections only.
    pub traffic: Option<Traffic>,
    /// Commands come on stdin (--control -).
    #[serde(default)]
    pub control: bool,
    /// The slice of the whole this run is (None: all of it).
    #[serde(default)]
    pub segment: Option<Segment>,
    pub workers: usize,
    pub verify: bool,
    /// What verifies a new connection when there is no traffic: one query
    /// of --proto (None: raw without a marker cannot be verified).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<Query>,
    pub max_failures: u64,
    /// How queries travel. With tcp-per-query, `connections` is the
    /// --concurrency: connections open at once at most.
    #[serde(default)]
    pub transport: Transport,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsOptions>,
    /// --proto push: no queries; what the server pushes is measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<PushListen>,
    /// --stop-on: conditions that end the ramp early.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_on: Vec<StopOn>,
    /// WebSocket: every connection upgrades first (None: not WebSocket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub websocket: Option<WsUpgrade>,
}

/// --proto push: how the server's messages are read, and their period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PushListen {
    pub format: crate::domain::PushFormat,
    /// The period the server sends at (--every): what the jitter and the
    /// messages due after the last one count from.
    pub every_s: f64,
    /// --clock-sync: the one-way delay from the wall-clock stamp even when
    /// the server is on another host.
    pub clock_sync: bool,
    /// Messages the server sends together at each period (--burst).
    #[serde(default = "one")]
    pub burst: u64,
}

fn one() -> u64 {
    1
}

impl PushListen {
    /// --every's default: throng server --mode push's.
    pub fn default_every() -> std::time::Duration {
        std::time::Duration::from_millis(20)
    }
}

/// Which send stamp gives the one-way delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayClock {
    /// The server is on this host: CLOCK_MONOTONIC is the same clock.
    Monotonic,
    /// --clock-sync: the wall clocks are trusted to agree.
    Wall,
    None,
}

impl DelayClock {
    /// The clock for a run's targets: the monotonic one when every target
    /// is on this host (loopback) and no --clock-sync asks for the wall.
    pub fn new(sc: &Scenario, p: &PushListen) -> DelayClock {
        use crate::domain::PushFormat;
        let loopback = sc.targets.iter().all(|t| t.ip().is_loopback());
        match (p.format, loopback, p.clock_sync) {
            (PushFormat::Line, _, _) => DelayClock::None,
            (PushFormat::Throng, _, true) => DelayClock::Wall,
            (PushFormat::Throng, true, false) => DelayClock::Monotonic,
            (PushFormat::Throng, false, false) => DelayClock::None,
        }
    }

    /// Its name in the result (None: no delay measured).
    pub fn name(self) -> Option<&'static str> {
        match self {
            DelayClock::Monotonic => Some("monotonic"),
            DelayClock::Wall => Some("wall"),
            DelayClock::None => None,
        }
    }
}

/// The client's TLS settings (--transport tls).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TlsOptions {
    /// PEM file of trusted certificates (None: the system's bundle).
    pub ca: Option<std::path::PathBuf>,
    pub insecure: bool,
    pub sni: Option<String>,
    pub alpn: Vec<String>,
    pub resume: bool,
}

/// The largest UDP payload.
pub const MAX_DATAGRAM: u64 = 65_507;

/// Bytes of the echo header: magic, sequence number, send timestamp (the
/// smallest echo query).
pub const ECHO_HEADER: usize = 20;

/// A condition that stops a ramp (--stop-on): the connections not yet
/// attempted are not, and the run goes on with what it has.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StopOn {
    /// No connection verified for this long while attempts went on.
    VerifyStall { seconds: f64 },
    /// Failed attempts reached this share (%) of those made (after 100).
    Failed { pct: f64 },
}

impl StopOn {
    /// `verify-stall=5s` or `failed=10%`.
    pub fn parse(s: &str) -> Result<StopOn, String> {
        let bad = || {
            format!(
                "--stop-on '{s}': give verify-stall=DURATION (no new verification for that \
                 long) or failed=PERCENT (failed attempts' share), e.g. --stop-on \
                 verify-stall=5s --stop-on failed=10%"
            )
        };
        let (k, v) = s.split_once('=').ok_or_else(bad)?;
        match k.trim() {
            "verify-stall" => {
                let d = crate::units::parse_duration(v.trim()).map_err(|_| bad())?;
                if d.is_zero() {
                    return Err(bad());
                }
                Ok(StopOn::VerifyStall {
                    seconds: d.as_secs_f64(),
                })
            }
            "failed" => {
                let pct: f64 = v
                    .trim()
                    .strip_suffix('%')
                    .and_then(|p| p.parse().ok())
                    .filter(|p: &f64| *p > 0.0 && *p <= 100.0)
                    .ok_or_else(bad)?;
                Ok(StopOn::Failed { pct })
            }
            _ => Err(bad()),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            StopOn::VerifyStall { seconds } => format!("verify-stall={seconds}s"),
            StopOn::Failed { pct } => format!("failed={pct}%"),
        }
    }
}

/// How long a WebSocket run without traffic (held, or push) of
/// `connections` (this process's) waits at its end, at most, for the
/// servers' answers to its close frames: a second per 5,000, at least 1 s,
/// at most 10 s (100,000 held over six processes on two cores take about
/// 2 s; it ends as soon as every close is answered).
pub fn ws_close_wait_s(connections: u64) -> f64 {
    (connections as f64 / 5000.0).clamp(1.0, 10.0)
}

impl Scenario {
    /// How long the end of the run waits: for the queries in flight
    /// (--drain), or, WebSocket without traffic, for the close handshake.
    pub fn drain_s(&self) -> f64 {
        match (&self.traffic, &self.websocket) {
            (Some(t), _) => t.drain_s,
            (None, Some(_)) => ws_close_wait_s(self.connections),
            (None, None) => 0.0,
        }
    }

    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.connect_timeout_s)
    }

    pub fn lifetime(&self) -> Option<Duration> {
        self.lifetime_s.map(Duration::from_secs_f64)
    }

    /// Of `established` over the run, those the ramp made (the ramp's
    /// connect rate): it made at most the target, and replacements after
    /// it (--lifetime, reconnects, --max-queries-per-conn) are not the
    /// ramp's.
    pub fn ramp_established(&self, t: &crate::metrics::ConnTotals) -> u64 {
        t.established_initial.min(self.connections)
    }

    /// Connections to the busiest target.
    pub fn per_target(&self) -> u64 {
        self.connections.div_ceil(self.targets.len() as u64)
    }

    /// The part of this (whole) scenario that segment `seg` runs: its share
    /// of connections, connect rate and query rate, its own source
    /// addresses and seed. The slices of 1..=N add up to the whole.
    pub fn slice(&self, seg: Segment) -> Scenario {
        let (k, n) = (seg.index - 1, seg.count);
        let share = |total: u64| total / n + u64::from(k < total % n);
        let part = |x: f64| x / n as f64;
        let mut s = self.clone();
        s.segment = Some(seg);
        s.connections = share(self.connections).max(1);
        s.ramp = match self.ramp {
            Ramp::Rate { per_second } => Ramp::Rate {
                per_second: part(per_second),
            },
            Ramp::Batch { size, delay_s } => Ramp::Batch {
                size: share(size).max(1),
                delay_s,
            },
        };
        s.max_inflight_connects = self.max_inflight_connects.div_ceil(n).max(1);
        s.connections_schedule = self.connections_schedule.as_ref().map(|ph| {
            ph.iter()
                .map(|p| Phase {
                    seconds: p.seconds,
                    from: part(p.from),
                    to: part(p.to),
                })
                .collect()
        });
        if !self.sources.is_empty() {
            let m = self.sources.len() as u64;
            s.sources = if m >= n {
                // Sources k, k+N, k+2N, ...: every slice its own.
                self.sources
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i as u64 % n == k)
                    .map(|(_, a)| *a)
                    .collect()
            } else {
                // Fewer sources than slices: share them round-robin (the
                // plan kept each source under half the port range in total).
                vec![self.sources[(k % m) as usize]]
            };
        }
        if let Some(t) = s.traffic.as_mut() {
            t.seed = t.seed.wrapping_add(k);
            t.queries = t.queries.map(share);
            if let Model::OpenLoop { phases, .. } = &mut t.model {
                for p in phases {
                    p.from = part(p.from);
                    p.to = part(p.to);
                }
            }
        }
        s.workers = s.workers.min(s.connections as usize).max(1);
        s
    }

    /// What must be equal for two results to be slices of one run: the
    /// scenario without its segment, workers and planned sources (hosts
    /// differ in cores and addresses). A JSON value, so a difference can be
    /// named by its path.
    pub fn identity(&self) -> serde_json::Value {
        let mut s = self.clone();
        s.segment = None;
        s.workers = 0;
        s.sources = Vec::new();
        s.target_names = Vec::new();
        serde_json::to_value(s).unwrap_or_default()
    }

    /// The run id of a slice of this (whole) scenario started by hand
    /// (`--segment` without `--run-id`): from `--start-at` and the
    /// scenario when the slices agreed an instant, else from the scenario
    /// alone. Every slice of one command line computes the same.
    pub fn derived_run_id(&self, start_at: Option<f64>) -> RunId {
        let digest = fnv1a(self.identity().to_string().as_bytes());
        match start_at {
            Some(at) => RunId {
                id: format!("at-{at:.6}-{digest:016x}"),
                from: RunIdFrom::StartAt,
            },
            None => RunId {
                id: format!("scenario-{digest:016x}"),
                from: RunIdFrom::Scenario,
            },
        }
    }

    /// Total seconds of --connections-schedule.
    pub fn schedule_seconds(&self) -> Option<f64> {
        self.connections_schedule
            .as_ref()
            .map(|p| p.iter().map(|p| p.seconds).sum())
    }

    /// The time the ramp should take, from the schedule.
    pub fn ramp_time(&self) -> Duration {
        self.ramp.due(self.connections.saturating_sub(1))
    }
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_ramp_is_even() {
        let r = Ramp::Rate { per_second: 2000.0 };
        assert_eq!(r.due(0), Duration::ZERO);
        assert_eq!(r.due(1000), Duration::from_millis(500));
    }

    #[test]
    fn batch_ramp_steps() {
        let r = Ramp::Batch {
            size: 100,
            delay_s: 0.5,
        };
        assert_eq!(r.due(99), Duration::ZERO);
        assert_eq!(r.due(100), Duration::from_millis(500));
        assert_eq!(r.rate(), 200.0);
    }
}
