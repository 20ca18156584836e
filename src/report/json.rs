//! The machine-readable result of a client run. Users' scripts read it, so
//! the keys named in the README are a contract: add keys, never rename or
//! remove one without a deprecation path. Histograms are HdrHistogram V2
//! compressed, base64, so results of several runs merge exactly.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::{Outcome, Sample};
use crate::metrics::{Bucket, Latency, Percentiles, ERROR_CAUSES, WAIT_CAUSES};
use crate::scenario::Scenario;
use crate::sys::{errno_name, limits, proc, sources};

/// Bumped when a key changes meaning or goes away.
pub const SCHEMA_VERSION: u32 = 1;

/// What the run was measured on, read at start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    pub wall: crate::engine::Wall,
}

impl SliceOf {
    pub fn new(run: &crate::domain::RunId, sc: &Scenario, wall: crate::engine::Wall) -> SliceOf {
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// --stop-on ended the ramp early: when and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp_stopped: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Queries {
    /// Queries that came due, sent or not, counted where the schedule or
    /// a window made them: the books hold it to sent + the errors of
    /// queries never sent (not_sent, no_connection, connect). What the
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
    /// (`REFUSED`), `http_<code>`, `mismatch`.
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
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub control: Vec<crate::engine::ControlEvent>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyResult {
    /// From each query's intended send time (coordinated omission corrected).
    pub response_time_us: Latency,
    /// From each query's actual send time.
    pub service_time_us: Latency,
    /// Actual minus intended send time.
    pub send_lag_us: Latency,
    /// How late the client's own loop noticed due queries.
    pub loop_lag_us: Latency,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dns {
    pub rcodes: BTreeMap<String, u64>,
    /// The same counts per query type: `<TYPE>.<RCODE>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rcodes_by_qtype: BTreeMap<String, BTreeMap<String, u64>>,
}

/// --proto push: what the server pushed and how it arrived.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    pub checks: Vec<crate::report::check::Verdict>,
    /// The client's own CPU over the run (its process tree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<crate::evidence::ClientCpu>,
    /// What was seen of the server when it ran on this host: its process,
    /// fds against its limit, its accept queue, the kernel's counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_seen: Option<crate::evidence::ServerSeen>,
}

impl RunResult {
    /// `sc`: the scenario as recorded (the whole, with its segment);
    /// `ran`: the part this process ran.
    pub fn new(sc: &Scenario, ran: &Scenario, env: Environment, o: &Outcome) -> RunResult {
        let t = &o.totals;
        let failed = Bucket::ALL
            .iter()
            .map(|b| (b.key().to_string(), t.failed[*b as usize]))
            .collect();
        let failed_other_errno = t
            .other_errno
            .iter()
            .map(|(e, n)| (errno_name(*e), *n))
            .collect();
        let failed_other_by_errno = t.other_errno.clone();
        let ramp_s = o.ramp_time.map(|r| r.as_secs_f64());
        let closed = matches!(
            sc.traffic.as_ref().map(|t| &t.model),
            Some(crate::scenario::Model::ClosedLoop { .. })
        );
        let queries = o.queries.as_ref().map(|q| {
            let t = &q.totals;
            let secs = q.seconds.max(1e-9);
            let ok_answers = ok_answers(ran);
            Queries {
                due: t.due,
                sent: t.sent,
                answered: t.answered,
                ok: Some(q.statuses.successes(ok_answers)),
                failed_answers: q.statuses.failures(ok_answers),
                timed_out: t.timed_out,
                errors: ERROR_CAUSES
                    .iter()
                    .zip(t.errors)
                    .map(|(c, n)| (c.to_string(), n))
                    .collect(),
                rate_target: (!closed).then(|| q.target_queries / secs),
                rate_achieved: t.answered as f64 / secs,
                rate_sent: t.sent as f64 / secs,
                sent_late: t.sent_late,
                in_flight_at_end: q.in_flight,
                recycled_connections: t.recycled,
                pipelined: t.pipelined,
                truncated: t.truncated,
                waited: WAIT_CAUSES
                    .iter()
                    .zip(t.waited)
                    .map(|(c, n)| (c.to_string(), n))
                    .collect(),
                bytes_out: t.bytes_out,
                bytes_in: t.bytes_in,
                seconds: q.seconds,
                http_status: q.statuses.http_map(),
                control: q.controls.clone(),
            }
        });
        let latency = o.queries.as_ref().map(|_| LatencyResult {
            response_time_us: Latency::of(&o.hists.response_time),
            service_time_us: Latency::of(&o.hists.service_time),
            send_lag_us: Latency::of(&o.hists.send_lag),
            loop_lag_us: Latency::of(&o.hists.loop_lag),
        });
        let dns = match (&o.queries, sc.traffic.as_ref().map(|t| t.proto)) {
            (Some(q), Some(crate::domain::Proto::Dns)) => Some(Dns {
                rcodes: q.statuses.rcode_map(),
                rcodes_by_qtype: q.statuses.rcodes_by_qtype_map(),
            }),
            _ => None,
        };
        RunResult {
            schema_version: SCHEMA_VERSION,
            interrupted: o.interrupted,
            scenario: sc.clone(),
            environment: env,
            connections: Connections {
                target: ran.connections,
                attempted: t.attempted,
                established: t.established,
                verified: t.verified,
                unverified: t.unverified,
                failed_established: t.failed_established,
                unresolved: t.unresolved,
                replaced: t.established.saturating_sub(t.established_initial),
                idle: t.idle,
                peak: o.peak,
                closed: t.closed,
                failed,
                failed_other_errno,
                failed_other_by_errno,
                ramp_s,
                verify_s: o.verify_time.map(|d| d.as_secs_f64()),
                connect_rate: ramp_s.map(|r| ran.ramp_established(t) as f64 / r.max(1e-9)),
                connect_time_us: Percentiles::of(&o.hists.connect_time),
                connect_syscall_us: (!o.hists.connect_syscall.is_empty())
                    .then(|| Percentiles::of(&o.hists.connect_syscall)),
                peer_closed: t.peer_closed,
                tls_handshake_us: (sc.transport == crate::domain::Transport::Tls)
                    .then(|| Percentiles::of(&o.hists.tls_handshake)),
                tls_resumed: t.tls_resumed,
                tls_error: t.tls_error.clone(),
                probe_rejected: t.probe_rejected,
                probe_reply: t.probe_reply.clone(),
                ramp_stopped: o.ramp_stopped.clone(),
            },
            queries,
            latency,
            dns,
            push: o.push.as_ref().zip(sc.push.as_ref()).map(|(p, listen)| {
                let clock = crate::engine::delay_clock(sc, listen);
                PushResult {
                    received: p.received,
                    lost: p.lost,
                    out_of_order: p.out_of_order,
                    duplicates: p.duplicates,
                    expected: p.expected,
                    malformed: p.malformed,
                    connections_with_loss: p.connections_with_loss,
                    every_us: (listen.every_s * 1e6).round() as u64,
                    gap_us: Latency::of(&o.hists.push_gap),
                    jitter_us: Latency::of(&o.hists.push_jitter),
                    delay_us: clock.map(|_| Latency::of(&o.hists.push_delay)),
                    delay_clock: clock.map(str::to_string),
                    client_busy_pct: 100.0 * p.busy(),
                    client_busy_ns: p.busy_ns,
                    client_worker_ns: p.worker_ns,
                    stamps_ahead: p.stamps_ahead,
                }
            }),
            duration_s: o.elapsed.as_secs_f64(),
            per_second: o.per_second.clone(),
            slice: None,
            parts: Vec::new(),
            partial: false,
            missing: Vec::new(),
            notes: Vec::new(),
            overrun: o.overrun.clone(),
            checks: Vec::new(),
            client: o.observed.client.clone(),
            server_seen: o.observed.server.clone(),
        }
    }
}

/// The errnos of `failed_other_errno`'s names ([`errno_name`]'s "EIO (5)"
/// or "errno 97"), for results written before `failed_other_by_errno`; a
/// name without a number counts as errno 0.
fn errno_numbers(names: &BTreeMap<String, u64>) -> BTreeMap<i32, u64> {
    let mut by_errno = BTreeMap::new();
    for (name, n) in names {
        let errno = name
            .rsplit(['(', ' '])
            .next()
            .and_then(|e| e.trim_end_matches(')').parse().ok())
            .unwrap_or(0);
        *by_errno.entry(errno).or_default() += n;
    }
    by_errno
}

/// Writes `value` as pretty JSON to `path` atomically: a temporary file in
/// the same directory, then a rename, so a reader never sees half a file.
pub fn write_atomic<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    write_bytes_atomic(path, &bytes, "--json")
}

/// Writes `bytes` to `path` atomically (a temporary file beside it, then a
/// rename); `flag` names the file in an error ("--json", "--html").
pub fn write_bytes_atomic(path: &Path, bytes: &[u8], flag: &str) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .with_context(|| format!("{flag} {}: not a file name", path.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.with_context(|| format!("writing {flag} {}", path.display()))
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

/// A time read back from a result: a file may hold any number, and
/// `Duration::from_secs_f64` panics on a negative or huge one.
fn duration(key: &str, secs: f64) -> anyhow::Result<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(secs)
        .map_err(|_| anyhow::anyhow!("{key} is {secs}: not a time in seconds"))
}

use crate::metrics::rcode_of;

/// The scenario's widening of what counts as a successful answer.
fn ok_answers(sc: &Scenario) -> crate::metrics::OkAnswers<'_> {
    sc.traffic
        .as_ref()
        .map(|t| crate::metrics::OkAnswers {
            rcodes: &t.ok_rcodes,
            status: &t.ok_status,
        })
        .unwrap_or_default()
}

impl RunResult {
    /// What the result measured, in the form the summary prints (for
    /// `throng merge` and the parent of --processes).
    pub fn outcome(&self) -> anyhow::Result<crate::engine::Outcome> {
        use crate::metrics::{decode_histogram, ConnTotals, QueryTotals, StatusCounts};
        let hdr = |s: &str, key: &str| decode_histogram(s).with_context(|| format!("{key}.hdr"));
        let c = &self.connections;
        let mut totals = ConnTotals {
            attempted: c.attempted,
            established: c.established,
            verified: c.verified,
            unverified: c.unverified,
            failed_established: c.failed_established,
            unresolved: c.unresolved,
            idle: c.idle,
            established_initial: c.established.saturating_sub(c.replaced),
            closed: c.closed,
            peer_closed: c.peer_closed,
            tls_resumed: c.tls_resumed,
            tls_error: c.tls_error.clone(),
            probe_rejected: c.probe_rejected,
            probe_reply: c.probe_reply.clone(),
            ..ConnTotals::default()
        };
        for b in Bucket::ALL {
            totals.failed[b as usize] = c.failed.get(b.key()).copied().unwrap_or(0);
        }
        if c.failed_other_by_errno.is_empty() {
            totals.other_errno = errno_numbers(&c.failed_other_errno);
        } else {
            totals.other_errno.clone_from(&c.failed_other_by_errno);
        }
        let mut hists = crate::metrics::Histograms {
            connect_time: hdr(&c.connect_time_us.hdr, "connections.connect_time_us")?,
            ..crate::metrics::Histograms::default()
        };
        if let Some(p) = &c.connect_syscall_us {
            hists.connect_syscall = hdr(&p.hdr, "connections.connect_syscall_us")?;
        }
        if let Some(p) = &self.push {
            hists.push_gap = hdr(&p.gap_us.hdr, "push.gap_us")?;
            hists.push_jitter = hdr(&p.jitter_us.hdr, "push.jitter_us")?;
            if let Some(d) = &p.delay_us {
                hists.push_delay = hdr(&d.hdr, "push.delay_us")?;
            }
        }
        if let Some(p) = &c.tls_handshake_us {
            hists.tls_handshake = hdr(&p.hdr, "connections.tls_handshake_us")?;
        }
        let queries = match (&self.queries, &self.latency) {
            (Some(q), Some(l)) => {
                let mut qt = QueryTotals {
                    sent: q.sent,
                    answered: q.answered,
                    timed_out: q.timed_out,
                    bytes_out: q.bytes_out,
                    bytes_in: q.bytes_in,
                    sent_late: q.sent_late,
                    recycled: q.recycled_connections,
                    pipelined: q.pipelined,
                    truncated: q.truncated,
                    ..QueryTotals::default()
                };
                for (i, cause) in ERROR_CAUSES.iter().enumerate() {
                    qt.errors[i] = q.errors.get(*cause).copied().unwrap_or(0);
                }
                // (Results written before the counter: sent and the
                // unsent causes, as it was computed then.)
                qt.due = if q.due > 0 || q.sent == 0 {
                    q.due
                } else {
                    q.sent
                        + ["not_sent", "no_connection", "connect"]
                            .iter()
                            .map(|c| q.errors.get(*c).copied().unwrap_or(0))
                            .sum::<u64>()
                };
                for (i, cause) in WAIT_CAUSES.iter().enumerate() {
                    qt.waited[i] = q.waited.get(*cause).copied().unwrap_or(0);
                }
                let mut statuses = StatusCounts::default();
                if let Some(d) = &self.dns {
                    for (name, n) in &d.rcodes {
                        match rcode_of(name) {
                            Some(code) => statuses.rcodes[code] += n,
                            None if name == "echoed" => statuses.echoed += n,
                            None => {}
                        }
                    }
                    for (qtype, rcodes) in &d.rcodes_by_qtype {
                        let Some(t) = wire::dns::rtype_from_name(qtype) else {
                            continue;
                        };
                        let mut row = [0; 16];
                        for (name, n) in rcodes {
                            if let Some(code) = rcode_of(name) {
                                row[code] += n;
                            }
                        }
                        statuses.merge(&StatusCounts {
                            by_qtype: vec![(t, row)],
                            ..StatusCounts::default()
                        });
                    }
                }
                for (code, n) in &q.http_status {
                    if let Ok(code) = code.parse::<usize>() {
                        statuses.http[code.min(599)] += n;
                    }
                }
                // The plain successes and mismatches (echo, ping) have no
                // map of their own: what the counts above do not explain.
                // (A result without `ok` counted every answer a success.)
                let ok_answers = ok_answers(&self.scenario);
                statuses.mismatch = q.failed_answers.get("mismatch").copied().unwrap_or(0);
                let ok = q.ok.unwrap_or(q.answered.saturating_sub(statuses.mismatch));
                statuses.ok = ok.saturating_sub(statuses.successes(ok_answers));
                hists.response_time = hdr(&l.response_time_us.hdr, "latency.response_time_us")?;
                hists.service_time = hdr(&l.service_time_us.hdr, "latency.service_time_us")?;
                hists.send_lag = hdr(&l.send_lag_us.hdr, "latency.send_lag_us")?;
                hists.loop_lag = hdr(&l.loop_lag_us.hdr, "latency.loop_lag_us")?;
                Some(crate::engine::QueryOutcome {
                    totals: qt,
                    statuses,
                    in_flight: q.in_flight_at_end,
                    seconds: q.seconds,
                    target_queries: q.rate_target.unwrap_or(0.0) * q.seconds,
                    controls: q.control.clone(),
                })
            }
            _ => None,
        };
        Ok(crate::engine::Outcome {
            totals,
            hists,
            peak: c.peak,
            per_second: self.per_second.clone(),
            interrupted: self.interrupted,
            ramp_time: c
                .ramp_s
                .map(|s| duration("connections.ramp_s", s))
                .transpose()?,
            verify_time: c
                .verify_s
                .map(|s| duration("connections.verify_s", s))
                .transpose()?,
            elapsed: duration("duration_s", self.duration_s)?,
            queries,
            overrun: self.overrun.clone(),
            observed: crate::evidence::Observed {
                client: self.client.clone(),
                server: self.server_seen.clone(),
            },
            ramp_stopped: c.ramp_stopped.clone(),
            wall: self.slice.as_ref().map(|s| s.wall),
            push: self.push.as_ref().map(|p| crate::metrics::PushTotals {
                received: p.received,
                lost: p.lost,
                out_of_order: p.out_of_order,
                duplicates: p.duplicates,
                malformed: p.malformed,
                expected: p.expected,
                connections_with_loss: p.connections_with_loss,
                busy_ns: p.client_busy_ns,
                worker_ns: p.client_worker_ns,
                stamps_ahead: p.stamps_ahead,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::merge::tests::{outcome, slice};

    #[test]
    fn errnos_round_trip_by_number() {
        let mut o = outcome(1, 2.0);
        // 200 has no name (errno_name: "errno 200"); 0 is what an
        // unparseable name would give.
        o.totals.other_errno = BTreeMap::from([(libc::EIO, 2), (200, 3), (0, 1)]);
        let r = slice(1, &o);
        assert_eq!(r.connections.failed_other_by_errno, o.totals.other_errno);
        assert_eq!(
            r.outcome().unwrap().totals.other_errno,
            o.totals.other_errno
        );
        // Through the file too.
        let back: RunResult = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(
            back.outcome().unwrap().totals.other_errno,
            o.totals.other_errno
        );
    }

    #[test]
    fn errno_numbers_are_read_before_names() {
        let mut r = slice(1, &outcome(1, 2.0));
        r.connections.failed_other_errno = BTreeMap::from([("a name that says nothing".into(), 4)]);
        r.connections.failed_other_by_errno = BTreeMap::from([(libc::ENOBUFS, 4)]);
        assert_eq!(
            r.outcome().unwrap().totals.other_errno,
            BTreeMap::from([(libc::ENOBUFS, 4)])
        );
    }

    #[test]
    fn results_without_errno_numbers_have_their_names_parsed() {
        let r = slice(1, &outcome(1, 2.0));
        let mut v = serde_json::to_value(&r).unwrap();
        let c = v["connections"].as_object_mut().unwrap();
        assert!(c.remove("failed_other_by_errno").is_some());
        c["failed_other_errno"] = serde_json::json!({
            "EPERM (1)": 1, "errno 97": 2, "ECONNABORTED (103)": 3, "unknown": 4
        });
        let old: RunResult = serde_json::from_value(v).unwrap();
        assert!(old.connections.failed_other_by_errno.is_empty());
        assert_eq!(
            old.outcome().unwrap().totals.other_errno,
            BTreeMap::from([(libc::EPERM, 1), (97, 2), (libc::ECONNABORTED, 3), (0, 4)])
        );
    }

    #[test]
    fn a_run_without_other_errnos_writes_no_numbers() {
        let mut o = outcome(1, 2.0);
        o.totals.other_errno.clear();
        let v = serde_json::to_value(slice(1, &o)).unwrap();
        assert!(v["connections"].get("failed_other_by_errno").is_none());
        assert_eq!(
            v["connections"]["failed_other_errno"],
            serde_json::json!({})
        );
    }

    #[test]
    fn a_result_read_back_as_a_measurement_gives_the_same_result() {
        let r = slice(2, &outcome(3, 2.5));
        let again = RunResult::new(
            &r.scenario,
            &r.scenario.clone(),
            r.environment.clone(),
            &r.outcome().unwrap(),
        );
        let mut want = r.clone();
        // `target` is the part's share; new() takes it from the scenario it
        // ran, and the ramp's rate counts at most that many.
        want.connections.target = again.connections.target;
        want.connections.connect_rate = again.connections.connect_rate;
        assert_eq!(again, want);
    }
}
