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

use crate::engine::{Outcome, Sample};
use crate::metrics::{Bucket, Latency, Percentiles, ERROR_CAUSES};
use crate::scenario::Scenario;
use crate::sys::{limits, proc, sources};

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
    /// The errnos counted in `failed.other`, by name.
    pub failed_other_errno: BTreeMap<String, u64>,
    pub ramp_s: Option<f64>,
    /// Established per second of ramp.
    pub connect_rate: Option<f64>,
    pub connect_time_us: Percentiles,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Queries {
    pub sent: u64,
    pub answered: u64,
    pub timed_out: u64,
    /// Every cause, zero or not: malformed, unmatched, mismatch, conn_lost,
    /// no_connection.
    pub errors: BTreeMap<String, u64>,
    /// Queries per second asked for, averaged over the traffic (None in
    /// closed loop).
    pub rate_target: Option<f64>,
    pub rate_achieved: f64,
    pub sent_late: u64,
    pub in_flight_at_end: u64,
    pub recycled_connections: u64,
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
    pub duration_s: f64,
    pub per_second: Vec<Sample>,
}

impl RunResult {
    pub fn new(sc: &Scenario, env: Environment, o: &Outcome) -> RunResult {
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
        let ramp_s = o.ramp_time.map(|r| r.as_secs_f64());
        let closed = matches!(
            sc.traffic.as_ref().map(|t| &t.model),
            Some(crate::scenario::Model::ClosedLoop { .. })
        );
        let queries = o.queries.as_ref().map(|q| {
            let t = &q.totals;
            let secs = q.seconds.max(1e-9);
            Queries {
                sent: t.sent,
                answered: t.answered,
                timed_out: t.timed_out,
                errors: ERROR_CAUSES
                    .iter()
                    .zip(t.errors)
                    .map(|(c, n)| (c.to_string(), n))
                    .collect(),
                rate_target: (!closed).then(|| q.target_queries / secs),
                rate_achieved: t.sent as f64 / secs,
                sent_late: t.sent_late,
                in_flight_at_end: q.in_flight,
                recycled_connections: t.recycled,
                bytes_out: t.bytes_out,
                bytes_in: t.bytes_in,
                seconds: q.seconds,
                http_status: q.statuses.http_map(),
                control: q.controls.clone(),
            }
        });
        let latency = o.queries.as_ref().map(|q| LatencyResult {
            response_time_us: Latency::of(&q.response_time),
            service_time_us: Latency::of(&q.service_time),
            send_lag_us: Latency::of(&q.send_lag),
            loop_lag_us: Latency::of(&q.loop_lag),
        });
        let dns = match (&o.queries, sc.traffic.as_ref().map(|t| t.proto)) {
            (Some(q), Some(crate::cli::Proto::Dns)) => Some(Dns {
                rcodes: q.statuses.rcode_map(),
            }),
            _ => None,
        };
        RunResult {
            schema_version: SCHEMA_VERSION,
            interrupted: o.interrupted,
            scenario: sc.clone(),
            environment: env,
            connections: Connections {
                target: sc.connections,
                attempted: t.attempted,
                established: t.established,
                verified: t.verified,
                unverified: t.unverified,
                peak: o.peak,
                closed: t.closed,
                failed,
                failed_other_errno,
                ramp_s,
                connect_rate: ramp_s.map(|r| t.established as f64 / r.max(1e-9)),
                connect_time_us: Percentiles::of(&o.connect_time),
            },
            queries,
            latency,
            dns,
            duration_s: o.elapsed.as_secs_f64(),
            per_second: o.per_second.clone(),
        }
    }
}

/// "ECONNABORTED (103)" style names for the errnos throng reports.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::ENOBUFS => "ENOBUFS",
        libc::ENOMEM => "ENOMEM",
        libc::ECONNABORTED => "ECONNABORTED",
        libc::EPROTO => "EPROTO",
        libc::EINVAL => "EINVAL",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EIO => "EIO",
        _ => "",
    };
    if name.is_empty() {
        format!("errno {errno}")
    } else {
        format!("{name} ({errno})")
    }
}

/// Writes `value` as pretty JSON to `path` atomically: a temporary file in
/// the same directory, then a rename, so a reader never sees half a file.
pub fn write_atomic<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .with_context(|| format!("--json {}: not a file name", path.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.with_context(|| format!("writing --json {}", path.display()))
}
