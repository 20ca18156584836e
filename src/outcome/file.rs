//! The result file of a client run (`--json`, a merge, a slice of
//! --processes or cluster): one type per key, written and read by the same
//! type. Users' scripts read it, so the keys named in the README are a
//! contract: add keys, never rename or remove one without a deprecation
//! path. Histograms are HdrHistogram V2 compressed, base64, so results of
//! several runs merge exactly. A file is not trusted: reading refuses
//! counts no run makes.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Sample;
use crate::metrics::{Latency, Percentiles};
use crate::scenario::Scenario;
use crate::sys::{limits, proc, sources};

/// Bumped when a key changes meaning or goes away.
pub const SCHEMA_VERSION: u32 = 1;

/// What the run was measured on, read at start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Environment {
    pub throng_version: String,
    pub hostname: String,
    pub kernel: String,
    pub cores: usize,
    pub fd_limit_soft: u64,
    pub fd_limit_hard: u64,
    pub ip_local_port_range: [u32; 2],
    pub somaxconn: Option<u64>,
    pub tcp_tw_reuse: Option<u64>,
    pub started_unix_s: u64,
    /// This host's clock offset from NTP time in seconds (positive: ahead),
    /// from chrony when it runs; slices of a run on several hosts start
    /// at a wall-clock instant, so a skewed host shows here.
    #[serde(default)]
    pub clock_offset_s: Option<f64>,
}

impl Environment {
    pub fn read(started_unix_s: u64) -> Environment {
        let (soft, hard) = limits::nofile().unwrap_or((0, 0));
        let (lo, hi) = sources::port_range();
        Environment {
            throng_version: env!("CARGO_PKG_VERSION").into(),
            hostname: proc::sysctl("kernel.hostname").unwrap_or_default(),
            kernel: proc::sysctl("kernel.osrelease").unwrap_or_default(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            fd_limit_soft: soft,
            fd_limit_hard: hard,
            ip_local_port_range: [lo, hi],
            somaxconn: proc::sysctl_u64("net.core.somaxconn"),
            tcp_tw_reuse: proc::sysctl_u64("net.ipv4.tcp_tw_reuse"),
            started_unix_s,
            clock_offset_s: chrony_offset(),
        }
    }
}

/// `chronyc tracking`'s "System time : X seconds fast|slow of NTP time".
fn chrony_offset() -> Option<f64> {
    let out = std::process::Command::new("chronyc")
        .arg("tracking")
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("System time"))?;
    let mut words = line.split(':').nth(1)?.split_whitespace();
    let secs: f64 = words.next()?.parse().ok()?;
    let _ = words.next();
    match words.next()? {
        "fast" => Some(secs),
        "slow" => Some(-secs),
        _ => None,
    }
}

/// One result that went into a merge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Part {
    /// The file or the child process it came from.
    pub from: String,
    pub segment: Option<crate::domain::Segment>,
    pub hostname: String,
    pub started_unix_s: u64,
    pub clock_offset_s: Option<f64>,
    pub interrupted: bool,
    /// The part's own run id and times.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice: Option<SliceOf>,
}

/// Which slice of which run a result is, and when it ran (wall clock,
/// Unix seconds). A merged result is the whole: slice 1/1 of its run,
/// from its first start to its last end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SliceOf {
    /// Shared by the slices of one run.
    pub run_id: String,
    /// How the id was made: `flag` (--run-id), `generated`, `start-at`
    /// (from --start-at and the scenario), `scenario` (the scenario alone).
    pub run_id_from: crate::domain::RunIdFrom,
    /// K of K/N (1/1: the whole run).
    pub index: u64,
    pub count: u64,
    #[serde(flatten)]
    pub wall: super::Wall,
}

impl SliceOf {
    pub fn new(run: &crate::domain::RunId, sc: &Scenario, wall: super::Wall) -> SliceOf {
        let seg = sc
            .segment
            .unwrap_or(crate::domain::Segment { index: 1, count: 1 });
        SliceOf {
            run_id: run.id.clone(),
            run_id_from: run.from,
            index: seg.index,
            count: seg.count,
            wall,
        }
    }

    pub fn run(&self) -> crate::domain::RunId {
        crate::domain::RunId {
            id: self.run_id.clone(),
            from: self.run_id_from,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Connections {
    pub target: u64,
    pub attempted: u64,
    pub established: u64,
    pub verified: u64,
    pub unverified: u64,
    pub peak: i64,
    pub closed: u64,
    /// Every bucket, zero or not: refused, timed_out, no_free_port,
    /// out_of_fds, unreachable, other, closed_by_peer, reset, half_open.
    pub failed: BTreeMap<String, u64>,
    /// Of `failed`, those that were established first (reset, closed
    /// before an answer, TLS refused): attempted = established + (failed
    /// - failed_established) + unresolved.
    #[serde(default)]
    pub failed_established: u64,
    /// Attempts still connecting when the run ended (neither established
    /// nor failed).
    #[serde(default)]
    pub unresolved: u64,
    /// Established connections nothing was asked on (no probe, no query,
    /// or a run that verifies nothing), e.g. a replacement opened in the
    /// run's last moments: established = verified + unverified + idle.
    #[serde(default)]
    pub idle: u64,
    /// The errnos counted in `failed.other`, by name.
    pub failed_other_errno: BTreeMap<String, u64>,
    /// The same counts by errno number: what a merge reads back (results
    /// written before this key have the names only, which it parses).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed_other_by_errno: BTreeMap<i32, u64>,
    pub ramp_s: Option<f64>,
    /// Seconds from the start until every connection of the ramp was
    /// verified, found unverified, or failed: verification's own figure
    /// (the ramp's is establishment's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_s: Option<f64>,
    /// The ramp's own connections established per second of ramp
    /// (replacements made after it are `replaced`).
    pub connect_rate: Option<f64>,
    /// Connections established after the ramp's: replacements of those
    /// that ended (--reconnect, --lifetime, --max-queries-per-conn, a
    /// server's close), and a schedule's later rises.
    #[serde(default)]
    pub replaced: u64,
    pub connect_time_us: Percentiles,
    /// Time inside the connect() calls: the client's own kernel searching
    /// for a free port (TCP transports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_syscall_us: Option<Percentiles>,
    /// Closed by the server after answering everything sent on them (an
    /// HTTP keep-alive limit, say): counted, not failures.
    #[serde(default)]
    pub peer_closed: u64,
    /// Of `peer_closed`, those that had carried no query, with their ages
    /// at the close (ms: their sum, and the sum of their squares).
    #[serde(default)]
    pub idle_closed: u64,
    /// Connections sent queries that never got a byte back.
    #[serde(default)]
    pub silent: u64,
    #[serde(default)]
    pub idle_closed_ms: u64,
    #[serde(default)]
    pub idle_closed_ms_sq: u64,
    /// --transport tls: handshake time, resumed handshakes, the first error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_handshake_us: Option<Percentiles>,
    #[serde(default)]
    pub tls_resumed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_error: Option<String>,
    /// Verification probes the server answered with a refusal, and the
    /// first refusal in words.
    #[serde(default)]
    pub probe_rejected: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_reply: Option<String>,
    /// Source addresses from which the server refused every connection it
    /// answered (an access rule when others were served).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources_refused: Vec<String>,
    /// WebSocket: the opening handshake's time (request sent to 101 read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ws_handshake_us: Option<Percentiles>,
    /// WebSocket: close frames received, by code ("1000", "1001", ...;
    /// "1005": a close without a code).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ws_close_codes: BTreeMap<String, u64>,
    /// WebSocket: pings from the server, each answered with a pong.
    #[serde(default)]
    pub ws_pings: u64,
    /// WebSocket: upgrades refused, by the server's HTTP status ("403",
    /// "4xx", "101": switching protocols with wrong headers, "none": no
    /// HTTP answer); each is in `probe_rejected` too.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ws_refused: BTreeMap<String, u64>,
    /// --stop-on ended the ramp early: when and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_stopped: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Queries {
    /// Queries that came due, sent or not, counted where the schedule or
    /// a window made them: the books hold it to sent + the errors of
    /// queries never sent (not_sent, no_connection, connect,
    /// behind_schedule). What the
    /// default check's `answered` is a share of.
    #[serde(default)]
    pub due: u64,
    pub sent: u64,
    pub answered: u64,
    /// Answers that were successes (DNS NOERROR and NXDOMAIN, HTTP 2xx and
    /// 3xx, an echo that validates, a pong with its number, and what
    /// --ok-rcodes/--ok-status add); the default check is on these. None
    /// in results written before the key: all answers were counted so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<u64>,
    /// Answers that were failures, by what they said: an RCODE's name
    /// (`REFUSED`), `http_<code>`, `mismatch`, `redis_<error word>`
    /// (`redis_WRONGTYPE`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed_answers: BTreeMap<String, u64>,
    pub timed_out: u64,
    /// Every cause, zero or not: malformed, unmatched, mismatch, conn_lost,
    /// no_connection, connect, oversized.
    pub errors: BTreeMap<String, u64>,
    /// Queries per second asked for, averaged over the traffic (None in
    /// closed loop).
    pub rate_target: Option<f64>,
    /// Answered queries per second (the sent rate is `rate_sent`).
    pub rate_achieved: f64,
    /// Sent queries per second.
    #[serde(default)]
    pub rate_sent: f64,
    pub sent_late: u64,
    pub in_flight_at_end: u64,
    pub recycled_connections: u64,
    /// Queries sent while another was in flight on their connection.
    #[serde(default)]
    pub pipelined: u64,
    /// DNS answers with the TC bit set (answered too: the server did
    /// answer, but the answer did not fit in a datagram).
    #[serde(default)]
    pub truncated: u64,
    /// Answers that came after their query timed out (a subset of
    /// `timed_out`).
    #[serde(default)]
    pub answered_late: u64,
    /// Queries that waited to be sent, by what for: `window` (room in
    /// their connection's window), `socket` (a send buffer the server was
    /// not reading), `slot` (a free tcp-per-query slot).
    #[serde(default)]
    pub waited: BTreeMap<String, u64>,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub seconds: f64,
    /// HTTP status codes, when the protocol is HTTP.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub http_status: BTreeMap<String, u64>,
    /// Redis replies by type (simple_string, integer, bulk_string, nil,
    /// array, error), when the protocol is Redis; the errors by their
    /// first word are in `failed_answers` (`redis_ERR`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub redis_replies: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub control: Vec<super::ControlEvent>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatencyResult {
    /// From each query's intended send time (coordinated omission corrected).
    pub response_time_us: Latency,
    /// From each query's actual send time.
    pub service_time_us: Latency,
    /// Actual minus intended send time.
    pub send_lag_us: Latency,
    /// How late the client's own loop noticed due queries.
    pub loop_lag_us: Latency,
    /// From each query's intended send time, of the answers that came
    /// after their query's timeout (`queries.answered_late`); absent when
    /// none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_response_time_us: Option<Latency>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Dns {
    pub rcodes: BTreeMap<String, u64>,
    /// The same counts per query type: `<TYPE>.<RCODE>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rcodes_by_qtype: BTreeMap<String, BTreeMap<String, u64>>,
}

/// --proto push: what the server pushed and how it arrived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PushResult {
    /// Messages that arrived (each sequence number once).
    pub received: u64,
    /// Sequence numbers that never arrived, and the periods at each
    /// connection's end that brought nothing.
    pub lost: u64,
    pub out_of_order: u64,
    pub duplicates: u64,
    /// received + lost.
    pub expected: u64,
    /// Bytes that were not push messages (the connection ended).
    pub malformed: u64,
    /// Connections with at least one message lost.
    pub connections_with_loss: u64,
    /// The period expected (--every), µs.
    pub every_us: u64,
    /// Time between consecutive arrivals on a connection.
    pub gap_us: Latency,
    /// That gap minus the period times the sequence numbers it spans
    /// (absolute).
    pub jitter_us: Latency,
    /// One-way delay from the server's send stamp: with `delay_clock`
    /// "monotonic" (server on this host) or "wall" (--clock-sync); absent
    /// when neither applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_us: Option<Latency>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_clock: Option<String>,
    /// The share of their time the client's workers were busy (reading,
    /// not waiting): near 100%, arrivals were read late and the times
    /// include the client's own delay.
    #[serde(default)]
    pub client_busy_pct: f64,
    /// Its parts, to merge: busy and whole worker time (ns).
    #[serde(default)]
    pub client_busy_ns: u64,
    #[serde(default)]
    pub client_worker_ns: u64,
    /// Send stamps ahead of this host's clock: no delay was taken from
    /// them (the server is not on this host, or the clocks disagree).
    #[serde(default)]
    pub stamps_ahead: u64,
}

/// The whole result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunResult {
    pub schema_version: u32,
    pub interrupted: bool,
    pub scenario: Scenario,
    pub environment: Environment,
    pub connections: Connections,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queries: Option<Queries>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Dns>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<PushResult>,
    pub duration_s: f64,
    pub per_second: Vec<Sample>,
    /// Which slice of which run this is, and when it ran (absent in
    /// results written before results said so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice: Option<SliceOf>,
    /// For a merge: the results it was made of.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<Part>,
    /// A merge that misses some slices (a process or host failed); `missing`
    /// says which and why.
    #[serde(default)]
    pub partial: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// What a merge could not check or had to assume, in words (results
    /// that do not say which run they are of or when they ran).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// What had not stopped by the run's deadline (`-T` + `--drain` + 5 s)
    /// and was left behind, in words; the rest of the result is whole.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrun: Vec<String>,
    /// `--check` outcomes, in the order given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckOutcome>,
    /// The run's verdict: pass, whose side, the causes with their figures
    /// (absent in results written before results carried one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<super::Verdict>,
    /// The client's own CPU over the run (its process tree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<crate::evidence::ClientCpu>,
    /// What was seen of the server when it ran on this host: its process,
    /// fds against its limit, its accept queue, the kernel's counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_seen: Option<crate::evidence::ServerSeen>,
}

impl RunResult {
    /// Its wall-clock times moved onto a clock `offset_s` behind the one
    /// it ran on: a load host's result on the controller's clock, so that
    /// hosts whose clocks differ merge by when they really ran (their
    /// slices' intervals and their seconds' `unix_s`, its parts' too).
    pub fn on_clock(&mut self, offset_s: f64) {
        let whole = offset_s.round() as i64;
        let sec = |t: u64| t.saturating_add_signed(-whole);
        if let Some(s) = &mut self.slice {
            s.wall = s.wall.shifted(offset_s);
        }
        for p in &mut self.parts {
            p.started_unix_s = sec(p.started_unix_s);
            if let Some(s) = &mut p.slice {
                s.wall = s.wall.shifted(offset_s);
            }
        }
        for s in &mut self.per_second {
            s.unix_s = sec(s.unix_s);
        }
        self.environment.started_unix_s = sec(self.environment.started_unix_s);
    }
}

/// A check's outcome, as the JSON's `checks` list holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CheckOutcome {
    pub expr: String,
    /// What was measured, in the check's terms (a percentage for `%`
    /// checks, µs for `_us` keys); None when the result lacks the key.
    pub value: Option<f64>,
    pub pass: bool,
    /// Why there is no value: "no samples" (a percentile of an empty
    /// histogram, a share of zero), or "not in the result".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Reads one result file.
pub fn read(path: &Path) -> Result<RunResult> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| crate::usage::UsageError(format!("{}: {e}", path.display())))?;
    parse(&text).map_err(|e| {
        crate::usage::UsageError(format!(
            "{}: not a throng client result: {e}",
            path.display()
        ))
        .into()
    })
}

/// The largest count a result may hold: 2^53, the last integer every JSON
/// reader keeps exact. Counts up to it sum without overflow over the
/// files of any merge short of 2,048 of them, each at the limit.
pub const MAX_COUNT: u64 = 1 << 53;

/// A result from the text of its file (what [`read`] reads; the fuzz
/// target `merge_result` feeds it any text). The file is not trusted: a
/// count past [`MAX_COUNT`] in what it measured is refused here rather
/// than overflowing a sum in the merge or the summary.
pub fn parse(text: &str) -> Result<RunResult, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    for key in [
        "connections",
        "queries",
        "latency",
        "dns",
        "per_second",
        "duration_s",
    ] {
        if let Some(m) = v.get(key) {
            too_large(m, key)?;
        }
    }
    serde_json::from_value(v).map_err(|e| e.to_string())
}

/// The first integer in `v` out of ±[`MAX_COUNT`], named by its path.
fn too_large(v: &Value, path: &str) -> Result<(), String> {
    match v {
        Value::Number(n) => {
            let fits = n
                .as_u64()
                .map(|u| u <= MAX_COUNT)
                .or(n.as_i64().map(|i| i.unsigned_abs() <= MAX_COUNT));
            match fits {
                Some(false) => Err(format!(
                    "{path} is {n}, more than a run counts (at most 2^53)"
                )),
                _ => Ok(()),
            }
        }
        Value::Array(a) => a
            .iter()
            .enumerate()
            .try_for_each(|(i, x)| too_large(x, &format!("{path}[{i}]"))),
        Value::Object(o) => o
            .iter()
            .try_for_each(|(k, x)| too_large(x, &format!("{path}.{k}"))),
        _ => Ok(()),
    }
}
