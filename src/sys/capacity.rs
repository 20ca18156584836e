//! Can this host hold N connections? One check, shared by the client's
//! preflight, the server's plan and `throng tune`: file descriptors (this
//! process's RLIMIT_NOFILE, fs.nr_open, the host's fs.file-max) and kernel
//! memory (N times the per-socket cost measured on this host, against 80% of
//! MemAvailable). The check is a plain function over numbers read once, so
//! its math is tested without the host it runs on.

use super::{limits, proc, tune};

/// The share of MemAvailable a plan may take for its sockets: past it the
/// host starts to reclaim and swap (or kill) before the ramp ends.
pub const MEMORY_SHARE: f64 = 0.8;

/// Kernel memory per connection end (socket, file, inode, epoll entry) when
/// it could not be measured: a little above what this project measured on
/// loopback (bench/RESULTS.md, `throng tune`).
pub const FALLBACK_BYTES_PER_END: u64 = 5 * 1024;

/// What the host offers, read once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// RLIMIT_NOFILE of this process (after raising it), soft and hard.
    pub fd_soft: u64,
    pub fd_hard: u64,
    /// This process may raise its hard limit (CAP_SYS_RESOURCE).
    pub can_raise: bool,
    pub nr_open: Option<u64>,
    pub file_max: Option<u64>,
    /// File handles allocated host-wide now (fs.file-nr, first field).
    pub files_open: u64,
    /// MemAvailable, bytes.
    pub mem_available: Option<u64>,
    /// Kernel memory per connection end, measured here (None: not measured).
    pub bytes_per_end: Option<u64>,
}

impl Host {
    /// Reads the host; `bytes_per_end` when the caller measured it.
    pub fn read(bytes_per_end: Option<u64>) -> Host {
        let (fd_soft, fd_hard) = limits::nofile().unwrap_or((0, 0));
        let files_open = proc::sysctl("fs.file-nr")
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        Host {
            fd_soft,
            fd_hard,
            can_raise: proc::has_capability(proc::CAP_SYS_RESOURCE),
            nr_open: proc::sysctl_u64("fs.nr_open"),
            file_max: proc::sysctl_u64("fs.file-max"),
            files_open,
            mem_available: mem_available(),
            bytes_per_end,
        }
    }

    /// The kernel cost of one connection end used for planning.
    pub fn per_end(&self) -> u64 {
        self.bytes_per_end.unwrap_or(FALLBACK_BYTES_PER_END)
    }

    /// The most connection ends the host's memory allows under the share.
    pub fn ends_for_memory(&self) -> Option<u64> {
        self.mem_available
            .map(|m| (m as f64 * MEMORY_SHARE) as u64 / self.per_end().max(1))
    }
}

/// MemAvailable in bytes.
pub fn mem_available() -> Option<u64> {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| proc::status_kb(&m, "MemAvailable"))
        .map(|kb| kb * 1024)
}

/// Measures the kernel cost of a connection end, but only when the plan is
/// big enough for it to matter (`ends` at the upper bound would take more
/// than a tenth of the memory available): measuring opens 2,000 loopback
/// connections.
pub fn measure_if_needed(ends: u64) -> Option<u64> {
    let avail = mem_available()?;
    let upper = ends.saturating_mul(4 * FALLBACK_BYTES_PER_END);
    if upper < avail / 10 {
        return None;
    }
    tune::measure_kernel_bytes(2000).map(|both| both / 2)
}

/// What a plan asks of the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// Connections of the plan.
    pub connections: u64,
    /// Ends of each connection on this host: 2 when the peer runs here too.
    pub ends_here: u64,
    /// Processes the connections are spread over on this host.
    pub processes: u64,
    /// Ends of each connection held in one process (2 with the embedded
    /// server).
    pub ends_per_process: u64,
}

/// One limit, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    pub setting: &'static str,
    pub current: String,
    pub needed: String,
    /// None: could not be read.
    pub ok: Option<bool>,
    pub why: String,
    /// What to do when it is not ok.
    pub fix: String,
    /// A sysctl value that fixes it, when one does.
    pub set: Option<String>,
}

/// Checks a plan against the host: RLIMIT_NOFILE, fs.nr_open, fs.file-max
/// and kernel memory, in that order.
pub fn check(need: &Need, host: &Host) -> Vec<Limit> {
    let mut out = Vec::new();
    let per_process = need
        .connections
        .div_ceil(need.processes.max(1))
        .saturating_mul(need.ends_per_process)
        + tune::FD_OVERHEAD;
    // The soft limit can always be raised to the hard one (throng does);
    // past the hard one only with CAP_SYS_RESOURCE, up to fs.nr_open.
    let fd_ok = host.fd_hard >= per_process
        || (host.can_raise && host.nr_open.is_none_or(|m| m >= per_process));
    let why = if need.processes > 1 {
        format!(
            "each connection end is an fd; {} connections are spread over {} processes \
             (throng --processes auto does it)",
            need.connections, need.processes
        )
    } else {
        "each connection end is an fd of the process that holds it".to_string()
    };
    out.push(Limit {
        setting: "RLIMIT_NOFILE",
        current: format!("{}/{}", host.fd_soft, host.fd_hard),
        needed: format!(">= {per_process} per process"),
        ok: Some(fd_ok),
        why,
        fix: if host.can_raise {
            format!("ulimit -n {per_process}")
        } else {
            "more processes (--processes auto), or fewer connections per process".into()
        },
        set: None,
    });
    out.push(match host.nr_open {
        Some(max) => Limit {
            setting: "fs.nr_open",
            current: max.to_string(),
            needed: format!(">= {per_process}"),
            ok: Some(max >= per_process || !host.can_raise),
            why: "the most fds any one process may be allowed".into(),
            fix: format!("sysctl -w fs.nr_open={per_process}"),
            set: (max < per_process).then(|| per_process.to_string()),
        },
        None => unreadable("fs.nr_open"),
    });
    let ends = need.connections.saturating_mul(need.ends_here);
    let files = ends + host.files_open + 65_536;
    out.push(match host.file_max {
        Some(max) => Limit {
            setting: "fs.file-max",
            current: max.to_string(),
            needed: format!(">= {files}"),
            ok: Some(max >= files),
            why: format!(
                "fds of all processes on the host together: {ends} connection ends here, {} \
                 open already",
                host.files_open
            ),
            fix: format!("sysctl -w fs.file-max={files}, or fewer connections (-c)"),
            set: (max < files).then(|| files.to_string()),
        },
        None => unreadable("fs.file-max"),
    });
    let per_end = host.per_end();
    let bytes = ends.saturating_mul(per_end);
    let measured = if host.bytes_per_end.is_some() {
        "measured here"
    } else {
        "planning figure"
    };
    out.push(match host.mem_available {
        Some(avail) => {
            let allowed = (avail as f64 * MEMORY_SHARE) as u64;
            Limit {
                setting: "kernel memory",
                current: format!("{} MB available", avail >> 20),
                needed: format!(
                    "{} MB ({ends} ends x {per_end} B, {measured}; at most {:.0}% of available)",
                    bytes >> 20,
                    MEMORY_SHARE * 100.0
                ),
                ok: Some(bytes <= allowed),
                why: format!(
                    "sockets live in kernel memory; past {:.0}% of what is available the host \
                     reclaims, swaps or kills before the ramp ends",
                    MEMORY_SHARE * 100.0
                ),
                fix: format!(
                    "-c {} at most on this host{}",
                    allowed / per_end.max(1) / need.ends_here.max(1),
                    if need.ends_here > 1 {
                        " (both ends are on this host: put the server on another one)"
                    } else {
                        ""
                    }
                ),
                set: None,
            }
        }
        None => unreadable("kernel memory"),
    });
    out
}

fn unreadable(setting: &'static str) -> Limit {
    Limit {
        setting,
        current: "unreadable".into(),
        needed: "-".into(),
        ok: None,
        why: "could not be read".into(),
        fix: String::new(),
        set: None,
    }
}

/// The limits a plan breaks, each as one sentence with the numbers and the
/// fixes (for the client's refusal).
pub fn refusals(need: &Need, host: &Host) -> Vec<String> {
    check(need, host)
        .into_iter()
        // RLIMIT_NOFILE per process is the caller's business (it may
        // split the plan over processes first).
        .filter(|l| l.ok == Some(false) && l.setting != "RLIMIT_NOFILE")
        .map(|l| {
            format!(
                "{} connections ({} ends on this host) need {} {} but it is {}: {}. Fix: {}; \
                 or spread the connections over more load hosts (throng cluster)",
                need.connections,
                need.connections.saturating_mul(need.ends_here),
                l.setting,
                l.needed,
                l.current,
                l.why,
                l.fix
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Host {
        Host {
            fd_soft: 20_000,
            fd_hard: 20_000,
            can_raise: false,
            nr_open: Some(1 << 20),
            file_max: Some(2_470_000),
            files_open: 3_000,
            mem_available: Some(23 << 30),
            bytes_per_end: Some(4_500),
        }
    }

    fn need(connections: u64, ends_here: u64, processes: u64) -> Need {
        Need {
            connections,
            ends_here,
            processes,
            ends_per_process: 1,
        }
    }

    fn find<'a>(l: &'a [Limit], name: &str) -> &'a Limit {
        l.iter().find(|l| l.setting == name).unwrap()
    }

    #[test]
    fn a_million_on_one_host_fits() {
        let l = check(&need(1_000_000, 2, 51), &host());
        assert!(l.iter().all(|l| l.ok == Some(true)), "{l:?}");
        assert!(refusals(&need(1_000_000, 2, 51), &host()).is_empty());
    }

    #[test]
    fn three_million_on_one_host_is_refused_for_files_and_memory() {
        let l = check(&need(3_000_000, 2, 151), &host());
        assert_eq!(find(&l, "fs.file-max").ok, Some(false));
        assert_eq!(find(&l, "kernel memory").ok, Some(false));
        let r = refusals(&need(3_000_000, 2, 151), &host());
        assert_eq!(r.len(), 2);
        assert!(
            r[1].contains("memory") && r[1].contains("throng cluster"),
            "{}",
            r[1]
        );
    }

    #[test]
    fn memory_refuses_past_eighty_percent() {
        let mut h = host();
        h.mem_available = Some(10_000 * 4_500);
        h.file_max = Some(u64::MAX);
        // 8,000 ends: 80% exactly.
        assert_eq!(
            find(&check(&need(4_000, 2, 1), &h), "kernel memory").ok,
            Some(true)
        );
        assert_eq!(
            find(&check(&need(4_001, 2, 1), &h), "kernel memory").ok,
            Some(false)
        );
        // One end here: twice as many connections fit.
        assert_eq!(
            find(&check(&need(8_000, 1, 1), &h), "kernel memory").ok,
            Some(true)
        );
    }

    #[test]
    fn fds_per_process_follow_the_processes() {
        let l = check(&need(100_000, 1, 1), &host());
        assert_eq!(find(&l, "RLIMIT_NOFILE").ok, Some(false));
        let l = check(&need(100_000, 1, 6), &host());
        assert_eq!(find(&l, "RLIMIT_NOFILE").ok, Some(true));
        // The per-process limit is not a refusal: the caller splits.
        assert!(refusals(&need(100_000, 1, 1), &host()).is_empty());
    }

    #[test]
    fn unmeasured_cost_uses_the_planning_figure() {
        let mut h = host();
        h.bytes_per_end = None;
        assert_eq!(h.per_end(), FALLBACK_BYTES_PER_END);
        let l = check(&need(1_000, 1, 1), &h);
        assert!(find(&l, "kernel memory").needed.contains("planning figure"));
    }
}
