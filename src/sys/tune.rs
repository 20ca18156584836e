//! `throng tune`: the OS limits that cap connections, read and explained,
//! with the value N connections need and the commands that set it. The
//! checks are plain functions over numbers, so the plan math is tested
//! without touching the host; only [`apply`] writes (sysctls of the caller's
//! network namespace and the host, as root).

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::ExitCode;

use serde::Serialize;

use super::{capacity, limits, proc, sources};
pub use crate::domain::Role;
use crate::usage::UsageError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    NeedsChange,
    CannotTell,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::NeedsChange => "needs change",
            Status::CannotTell => "cannot tell",
        }
    }
}

/// One line of the table.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Check {
    pub setting: String,
    pub current: String,
    pub needed: String,
    pub status: Status,
    pub why: String,
    /// The sysctl value to set, when a change is needed and a sysctl can make it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<String>,
}

/// What `throng tune` reports.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TunePlan {
    pub connections: u64,
    pub role: Role,
    pub checks: Vec<Check>,
    pub apply_now: Vec<String>,
    pub persistent: Vec<String>,
    pub advice: Vec<String>,
    /// Kernel memory per connection (both sockets), measured here.
    pub kernel_bytes_per_connection: Option<u64>,
}

const MIGRATE_WHY: &str = "only with `server --processes N`, where a full process closes its \
     listeners: with 1 the connections queued on them move to a sibling instead of being reset \
     (the default, elastic, steers new connections to its newest process and closes nothing)";

/// Fds a throng process keeps besides its connections.
pub const FD_OVERHEAD: u64 = 64;

/// Processes needed when each may hold `per_process` fds.
pub fn processes_for(conns: u64, per_process: u64) -> u64 {
    conns
        .div_ceil(per_process.saturating_sub(FD_OVERHEAD).max(1))
        .max(1)
}

/// Source addresses needed so that no (source, destination) pair carries
/// more than `per_pair` connections (what connect() handles fast:
/// [`sources::fast_per_pair`]).
pub fn sources_for(conns_per_target: u64, per_pair: u64) -> u64 {
    conns_per_target.div_ceil(per_pair.max(1)).max(1)
}

fn check(
    setting: &str,
    current: impl ToString,
    needed: impl ToString,
    status: Status,
    why: impl Into<String>,
) -> Check {
    Check {
        setting: setting.into(),
        current: current.to_string(),
        needed: needed.to_string(),
        status,
        why: why.into(),
        set: None,
    }
}

/// A numeric sysctl that must be at least `need`.
fn at_least(name: &str, need: u64, why: &str) -> Check {
    match proc::sysctl_u64(name) {
        Some(cur) if cur >= need => check(name, cur, format!(">= {need}"), Status::Ok, why),
        Some(cur) => Check {
            set: Some(need.to_string()),
            ..check(name, cur, format!(">= {need}"), Status::NeedsChange, why)
        },
        None => check(
            name,
            "unreadable",
            format!(">= {need}"),
            Status::CannotTell,
            why,
        ),
    }
}

/// Kernel memory per loopback connection (both sockets), measured by
/// opening `pairs` connections and reading Slab before and after; None
/// when it could not, or Slab grew by less than a TCP end costs.
pub fn measure_kernel_bytes(pairs: usize) -> Option<u64> {
    let slab = || {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| proc::status_kb(&m, "Slab"))
    };
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).ok()?;
    let addr = l.local_addr().ok()?;
    let before = slab()?;
    let mut held = Vec::with_capacity(pairs * 2);
    for _ in 0..pairs {
        let c = TcpStream::connect(addr).ok()?;
        let (s, _) = l.accept().ok()?;
        held.push(c);
        held.push(s);
    }
    let after = slab()?;
    drop(held);
    // Slab is the host's: sockets other processes freed meanwhile take
    // from the difference. A pair measured under 2 kB (a TCP end costs
    // 2-4 kB) is that noise, not a cost: a caller that planned with it
    // would let millions of connections past the memory check.
    let per_pair = after.saturating_sub(before) * 1024 / pairs as u64;
    (per_pair >= 2048).then_some(per_pair)
}

/// Builds the plan for `n` connections.
pub fn plan(n: u64, role: Role, kernel_bytes: Option<u64>) -> TunePlan {
    let sides = if role == Role::Both { 2 } else { 1 };
    let (_, hard) = limits::nofile().unwrap_or((0, 0));
    let procs = processes_for(n, hard);
    let per_process_need = n.div_ceil(procs) + FD_OVERHEAD;
    let mut checks = capacity_checks(n, sides, procs, kernel_bytes);
    if role.server() {
        server_checks(n, procs, &mut checks);
    }
    if role.client() {
        client_checks(n, &mut checks);
    }
    kernel_checks(n, sides, &mut checks);
    let (apply_now, persistent) = commands(&checks, per_process_need);
    let advice = vec![
        "conntrack: to keep load traffic out of it, add NOTRACK rules (advice only, not applied): \
         iptables -t raw -A PREROUTING -p tcp --dport PORT -j NOTRACK; \
         iptables -t raw -A OUTPUT -p tcp --sport PORT -j NOTRACK"
            .to_string(),
    ];
    TunePlan {
        connections: n,
        role,
        checks,
        apply_now,
        persistent,
        advice,
        kernel_bytes_per_connection: kernel_bytes,
    }
}

/// The capacity rows (fds, ports, memory) of `n` connections, with
/// `sides` ends on this host, over `procs` processes; RLIMIT_NOFILE first.
fn capacity_checks(n: u64, sides: u64, procs: u64, kernel_bytes: Option<u64>) -> Vec<Check> {
    let mut checks = Vec::new();
    let host = capacity::Host::read(kernel_bytes.map(|b| b / 2));
    let need = capacity::Need {
        connections: n,
        ends_here: sides,
        processes: procs,
        ends_per_process: 1,
    };
    for l in capacity::check(&need, &host) {
        let status = match l.ok {
            Some(true) => Status::Ok,
            Some(false) => Status::NeedsChange,
            None => Status::CannotTell,
        };
        let setting = match l.setting {
            "RLIMIT_NOFILE" => "RLIMIT_NOFILE (soft/hard)",
            other => other,
        };
        checks.push(Check {
            set: l.set.filter(|_| status == Status::NeedsChange),
            ..check(setting, l.current, l.needed, status, l.why)
        });
    }
    checks
}

/// The rows of a host that serves `n` connections over `procs` processes:
/// the accept queues, SYN cookies, request migration.
fn server_checks(n: u64, procs: u64, checks: &mut Vec<Check>) {
    let backlog = if n >= 10_000 { 65_535 } else { 4_096 };
    checks.push(at_least(
        "net.core.somaxconn",
        backlog,
        "caps every listen backlog: a short accept queue turns connect storms into timeouts",
    ));
    checks.push(at_least(
        "net.ipv4.tcp_max_syn_backlog",
        backlog,
        "half-open connections the listener keeps during a storm",
    ));
    let cookies = proc::sysctl_u64("net.ipv4.tcp_syncookies");
    checks.push(check(
        "net.ipv4.tcp_syncookies",
        cookies.map_or("unreadable".into(), |c| c.to_string()),
        "1",
        match cookies {
            Some(1) => Status::Ok,
            Some(_) => Status::NeedsChange,
            None => Status::CannotTell,
        },
        "under a connection storm the server answers with cookies and logs \
         \"Possible SYN flooding\": expected, and better than dropping SYNs",
    ));
    // With `--processes N` a full process closes its listeners; the
    // kernel resets what is queued on them unless it migrates it. The
    // default server needs nothing here: the row only informs.
    if procs > 1 {
        let migrate = proc::sysctl_u64("net.ipv4.tcp_migrate_req");
        let (current, status) = match migrate {
            Some(cur) => (cur.to_string(), Status::Ok),
            None => ("absent (Linux < 5.14)".to_string(), Status::CannotTell),
        };
        let name = "net.ipv4.tcp_migrate_req";
        checks.push(check(
            name,
            current,
            "1 with --processes N",
            status,
            MIGRATE_WHY,
        ));
    }
}

/// The rows of a host that opens `n` connections: its ports, TIME_WAIT.
fn client_checks(n: u64, checks: &mut Vec<Check>) {
    let (lo, hi) = sources::port_range();
    let ports = u64::from(hi - lo + 1);
    let srcs = sources_for(n, sources::fast_per_pair());
    let wide = ports >= 60_000;
    checks.push(Check {
        set: (!wide).then(|| "1024 65535".to_string()),
        ..check(
            "net.ipv4.ip_local_port_range",
            format!("{lo} {hi} ({ports} ports)"),
            "1024 65535",
            if wide {
                Status::Ok
            } else {
                Status::NeedsChange
            },
            format!(
                "{n} connections to one destination need {srcs} source address(es) at this \
                 range ({}); on loopback throng adds 127.0.0.x itself",
                sources::per_pair_basis()
            ),
        )
    });
    let reuse = proc::sysctl_u64("net.ipv4.tcp_tw_reuse");
    checks.push(check(
        "net.ipv4.tcp_tw_reuse",
        reuse.map_or("unreadable".into(), |r| r.to_string()),
        "1 (2 suffices on loopback)",
        match reuse {
            Some(1 | 2) => Status::Ok,
            Some(_) => Status::NeedsChange,
            None => Status::CannotTell,
        },
        "closed connections hold their port in TIME_WAIT for 60 s; reuse lets churn go on",
    ));
}

/// The rows of either side: conntrack, socket buffer memory.
fn kernel_checks(n: u64, sides: u64, checks: &mut Vec<Check>) {
    match proc::sysctl_u64("net.netfilter.nf_conntrack_max") {
        Some(cur) => {
            let need = n * sides + 65_536;
            checks.push(Check {
                set: (cur < need).then(|| need.to_string()),
                ..check(
                    "net.netfilter.nf_conntrack_max",
                    cur,
                    format!(">= {need}"),
                    if cur >= need {
                        Status::Ok
                    } else {
                        Status::NeedsChange
                    },
                    "conntrack is loaded and tracks every connection; a full table drops new ones",
                )
            });
        }
        None => checks.push(check(
            "net.netfilter.nf_conntrack_max",
            "not loaded",
            "-",
            Status::Ok,
            "conntrack is not loaded: nothing tracks connections",
        )),
    }
    if let Some(mem) = proc::sysctl("net.ipv4.tcp_mem") {
        checks.push(check(
            "net.ipv4.tcp_mem (pages)",
            mem.split_whitespace().collect::<Vec<_>>().join(" "),
            "max above what traffic buffers need",
            Status::Ok,
            "caps memory for socket buffers, which idle connections do not hold",
        ));
    }
}

/// The commands that make the changes the checks ask for: at once, and
/// across reboots.
fn commands(checks: &[Check], per_process_need: u64) -> (Vec<String>, Vec<String>) {
    let changes: Vec<&Check> = checks.iter().filter(|c| c.set.is_some()).collect();
    let mut apply_now: Vec<String> = changes
        .iter()
        .map(|c| {
            format!(
                "sysctl -w {}=\"{}\"",
                c.setting,
                c.set.as_deref().unwrap_or("")
            )
        })
        .collect();
    let mut persistent: Vec<String> = changes
        .iter()
        .map(|c| {
            format!(
                "echo '{} = {}' >> /etc/sysctl.d/90-throng.conf",
                c.setting,
                c.set.as_deref().unwrap_or("")
            )
        })
        .collect();
    if checks[0].status == Status::NeedsChange {
        apply_now.push(format!(
            "ulimit -n {per_process_need}   # in the shell that starts throng"
        ));
        persistent.push(format!(
            "echo '* - nofile {per_process_need}' >> /etc/security/limits.conf   # or LimitNOFILE={per_process_need} in a systemd unit"
        ));
    }
    (apply_now, persistent)
}

/// Prints the plan as a table followed by the commands.
pub fn print(p: &TunePlan, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let role = match p.role {
        Role::Client => "client",
        Role::Server => "server",
        Role::Both => "client and server on this host",
    };
    writeln!(out, "throng tune: {} connections, {role}", p.connections)?;
    let w0 = p.checks.iter().map(|c| c.setting.len()).max().unwrap_or(0);
    let w1 = p.checks.iter().map(|c| c.current.len()).max().unwrap_or(0);
    let w2 = p.checks.iter().map(|c| c.needed.len()).max().unwrap_or(0);
    writeln!(
        out,
        "  {:<w0$}  {:<w1$}  {:<w2$}  {:<12}  why",
        "setting", "current", "needed", "status"
    )?;
    for c in &p.checks {
        writeln!(
            out,
            "  {:<w0$}  {:<w1$}  {:<w2$}  {:<12}  {}",
            c.setting,
            c.current,
            c.needed,
            c.status.label(),
            c.why
        )?;
    }
    if p.apply_now.is_empty() {
        writeln!(out, "nothing to change")?;
    } else {
        writeln!(out, "apply now (or: throng tune --apply):")?;
        for c in &p.apply_now {
            writeln!(out, "  {c}")?;
        }
        writeln!(out, "make it persistent:")?;
        for c in &p.persistent {
            writeln!(out, "  {c}")?;
        }
    }
    for a in &p.advice {
        writeln!(out, "advice: {a}")?;
    }
    Ok(())
}

/// Writes the sysctls the plan lists. Returns one line per setting:
/// "name: old -> new", or why it could not be set (some, like
/// nf_conntrack_max, are read-only outside the host's first network
/// namespace); the others are still applied.
pub fn apply(p: &TunePlan) -> Vec<String> {
    let mut done = Vec::new();
    for c in &p.checks {
        let Some(value) = &c.set else { continue };
        let path = format!("/proc/sys/{}", c.setting.replace('.', "/"));
        let old = proc::sysctl(&c.setting).unwrap_or_default();
        match std::fs::write(&path, value) {
            Ok(()) => {
                let new = proc::sysctl(&c.setting).unwrap_or_default();
                let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
                done.push(format!(
                    "{}: {} -> {}",
                    c.setting,
                    squash(&old),
                    squash(&new)
                ));
            }
            Err(e) => done.push(format!("{}: not changed ({e})", c.setting)),
        }
    }
    done
}

/// `throng tune --measure`: this host's connect() curve measured, shown
/// and kept for later plans (or printed as JSON).
pub fn run_measure(json: bool) -> anyhow::Result<ExitCode> {
    use crate::sys::connect_curve;
    use std::io::Write;
    let mut out = crate::console::stdout();
    let (lo, hi) = sources::port_range();
    let ports = u64::from(hi - lo + 1);
    let before = sources::fast_per_pair();
    if !json {
        writeln!(
            out,
            "measuring connect() from 127.0.0.1 to a listener of its own, {} at a time, against \
             the connections the pair holds (port range {lo}-{hi}, {ports} ports)",
            connect_curve::bucket(ports)
        )?;
        writeln!(
            out,
            "  {:>11}  {:>9}  {:>10}  {:>9}",
            "connections", "connect/s", "median", "p99"
        )?;
    }
    let curve = connect_curve::measure(|p| {
        if !json {
            let _ = writeln!(
                out,
                "  {:>11}  {:>9.0}  {:>8.1}us  {:>7.0}us",
                p.connections, p.per_second, p.median_us, p.p99_us
            );
        }
    })?;
    let path = connect_curve::store(&curve)?;
    if json {
        serde_json::to_writer_pretty(&mut out, &curve)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let share = |n: u64| 100.0 * n as f64 / ports as f64;
    match curve.knee {
        Some(k) => writeln!(
            out,
            "knee: connect() slows past {k} connections of one (source, destination) pair \
             ({:.1}% of the range)",
            share(k)
        )?,
        None => writeln!(
            out,
            "no knee: connect() stayed fast up to {} connections of one pair ({:.1}% of the \
             range; stopped by {})",
            curve.measured_up_to,
            share(curve.measured_up_to),
            curve.stopped_by.as_deref().unwrap_or("the end")
        )?,
    }
    writeln!(
        out,
        "plans now keep each pair under {} connections (before: {before}); kept in {} for this \
         kernel and port range",
        curve.fast_per_pair(),
        path.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `throng tune`: the limits table (or its JSON), the commands, and with
/// `apply` the changes made.
pub fn run(connections: u64, role: Role, json: bool, apply_it: bool) -> anyhow::Result<ExitCode> {
    // SAFETY: geteuid has no arguments and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if apply_it && !root {
        return Err(UsageError(
            "--apply changes kernel settings and needs root: run it with sudo, or apply the \
             commands it prints yourself"
                .into(),
        )
        .into());
    }
    let per = measure_kernel_bytes(2000);
    let plan = plan(connections, role, per);
    let mut out = crate::console::stdout();
    if json {
        serde_json::to_writer_pretty(&mut out, &plan)?;
        std::io::Write::write_all(&mut out, b"\n")?;
    } else {
        print(&plan, &mut out)?;
    }
    if apply_it {
        let done = apply(&plan);
        if done.is_empty() {
            std::io::Write::write_all(&mut out, b"applied: nothing needed changing\n")?;
        }
        for d in done {
            std::io::Write::write_fmt(&mut out, format_args!("applied: {d}\n"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_math() {
        // 20,000 fds per process, 64 kept back.
        assert_eq!(processes_for(1_000_000, 20_000), 51);
        assert_eq!(processes_for(19_000, 20_000), 1);
        assert_eq!(processes_for(0, 20_000), 1);
        // A quarter of 28,232 ports per source (the measured knee).
        let quarter = sources::fast_per_pair_of;
        assert_eq!(sources_for(1_000_000, quarter(28_232)), 142);
        assert_eq!(sources_for(7_058, quarter(28_232)), 1);
        assert_eq!(sources_for(7_059, quarter(28_232)), 2);
        assert_eq!(sources_for(100_000, quarter(64_512)), 7);
    }

    #[test]
    fn plan_has_every_line_and_commands_for_changes() {
        let p = plan(1_000_000, Role::Both, Some(9_000));
        let names: Vec<&str> = p.checks.iter().map(|c| c.setting.as_str()).collect();
        for n in [
            "RLIMIT_NOFILE (soft/hard)",
            "fs.nr_open",
            "fs.file-max",
            "net.core.somaxconn",
            "net.ipv4.tcp_max_syn_backlog",
            "net.ipv4.tcp_syncookies",
            "net.ipv4.ip_local_port_range",
            "net.ipv4.tcp_tw_reuse",
            "net.netfilter.nf_conntrack_max",
            "kernel memory",
        ] {
            assert!(names.contains(&n), "{n} missing: {names:?}");
        }
        for c in p.checks.iter().filter(|c| c.set.is_some()) {
            assert!(p.apply_now.iter().any(|a| a.contains(&c.setting)));
            assert!(p.persistent.iter().any(|a| a.contains(&c.setting)));
        }
        // 9,000 B per connection x 1M: about 8.6 GB.
        let mem = p
            .checks
            .iter()
            .find(|c| c.setting == "kernel memory")
            .unwrap();
        assert!(mem.needed.starts_with("8583 MB"), "{}", mem.needed);
    }

    #[test]
    fn measures_kernel_memory() {
        let per = measure_kernel_bytes(500);
        // Slab is shared by the whole machine: only check the order of size.
        if let Some(b) = per {
            assert!(b > 500 && b < 200_000, "{b} bytes per connection");
        }
    }
}
