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
use crate::metrics::{Bucket, Percentiles};
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

/// The whole result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub schema_version: u32,
    pub interrupted: bool,
    pub scenario: Scenario,
    pub environment: Environment,
    pub connections: Connections,
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
