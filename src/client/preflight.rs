//! The checks before a client run: what would make the plan impossible
//! (fds, ephemeral ports), what it should know but may run with (TIME_WAIT,
//! ports per source and destination pair), how many processes it needs.
//! Reads the host (limits, sysctls, addresses); connects nowhere.

use std::net::{IpAddr, SocketAddr};

use anyhow::Result;

use super::{usage, FD_OVERHEAD};
use crate::domain::{Processes, Transport};
use crate::scenario::{self, Scenario};
use crate::sys::limits::{self, FdLimit};
use crate::sys::{proc, sources};

/// What the preflight found wrong with a plan: each entry is the reason
/// and the fix.
/// `shortfall`: the source planner's advice for a target off this host (the
/// interface's missing addresses), the fix when the ports run out.
pub(super) fn preflight(sc: &Scenario, fd: &FdLimit, shortfall: Option<&str>) -> Vec<String> {
    let mut problems = Vec::new();
    let per_conn = if sc.embedded_server { 2 } else { 1 };
    let need = sc.connections * per_conn + FD_OVERHEAD + limits::fds_in_use() as u64;
    if need > fd.soft {
        let fit = fd
            .soft
            .saturating_sub(FD_OVERHEAD + limits::fds_in_use() as u64)
            / per_conn;
        let cap = if fd.hard_is_cap {
            format!(
                "the hard limit ({}) is the cap here: this process cannot raise it \
                 (no CAP_SYS_RESOURCE), even as root",
                fd.hard
            )
        } else {
            format!("raise it with `ulimit -n {need}` (hard limit {})", fd.hard)
        };
        let embedded = if sc.embedded_server {
            " (the embedded server holds the other end of each connection in the same process)"
        } else {
            ""
        };
        problems.push(format!(
            "{} connections need about {need} file descriptors{embedded}, but this process may \
             hold {}: {cap}. Run at most -c {fit} per process.",
            sc.connections, fd.soft
        ));
    }
    let ports = sources::ports_per_source();
    let per_target = sc.per_target();
    let family_sources = |t: &SocketAddr| {
        sc.sources
            .iter()
            .filter(|s| s.is_ipv4() == t.is_ipv4())
            .count()
            .max(1) as u64
    };
    if let Some(t) = sc
        .targets
        .iter()
        .find(|t| per_target > ports * family_sources(t))
    {
        let fix = match shortfall {
            Some(s) => format!("{s}; or widen the range"),
            None => "Add source addresses (--source-ip 127.0.0.2/24 on loopback) or widen the \
                     range"
                .to_string(),
        };
        problems.push(format!(
            "{per_target} connections to {t} need {per_target} ephemeral ports, but {} source \
             address(es) give {} ({ports} each, net.ipv4.ip_local_port_range). {fix}: \
             sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\"",
            family_sources(t),
            ports * family_sources(t)
        ));
    }
    problems
}

/// What the plan should know but may run with. `shortfall`: the source
/// planner's advice when the interface has too few addresses (it says
/// what the per-pair warning would, with the `ip addr add` commands).
pub(super) fn warnings(sc: &Scenario, shortfall: Option<String>) -> Vec<String> {
    let mut w = Vec::new();
    if let Some(msg) = time_wait_warning(sc) {
        w.push(msg);
    }
    let churn = sc.reconnect
        && (sc.lifetime_s.is_some()
            || sc
                .traffic
                .as_ref()
                .is_some_and(|t| t.max_queries_per_conn.is_some()));
    if churn && proc::sysctl_u64("net.ipv4.tcp_tw_reuse") == Some(0) {
        w.push(
            "connections will churn and each closed one keeps its port in TIME_WAIT for 60 s, \
             but net.ipv4.tcp_tw_reuse is 0; set it (sysctl -w net.ipv4.tcp_tw_reuse=1) or add \
             source addresses"
                .to_string(),
        );
    }
    if let Some(msg) = shortfall
        .or_else(|| per_pair_warning(sc, sources::fast_per_pair(), sources::ports_per_source()))
    {
        w.push(msg);
    }
    w
}

/// Says when a (source, destination) pair will carry more connections than
/// connect() handles fast, and how many source addresses would fix it.
pub(super) fn per_pair_warning(sc: &Scenario, fast: u64, ports: u64) -> Option<String> {
    if sc.targets.is_empty() || sc.transport == Transport::Udp {
        return None;
    }
    let per_target = sc.per_target();
    let have = sc
        .targets
        .iter()
        .map(|t| {
            sc.sources
                .iter()
                .filter(|s| s.is_ipv4() == t.is_ipv4())
                .count()
                .max(1) as u64
        })
        .min()
        .unwrap_or(1);
    let per_pair = per_target.div_ceil(have);
    if per_pair <= fast {
        return None;
    }
    let needed = per_target.div_ceil(fast);
    let from = if sc.sources.is_empty() {
        "one source address".to_string()
    } else {
        format!("{have} source address(es)")
    };
    Some(format!(
        "{per_target} connections to each destination from {from} put {per_pair} on each \
         (source, destination) pair; {}. The ramp will crawl past that point: give {needed} \
         source addresses (--source-ip, e.g. 127.0.0.0/{} on loopback) or widen the range \
         (sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\")",
        sources::per_pair_reason(fast, ports),
        32 - (needed + 2).next_power_of_two().trailing_zeros()
    ))
}

/// tcp-per-query leaves a port in TIME_WAIT per query for 60 s: says so
/// when the planned rate would use up the port range that way.
pub(super) fn time_wait_warning(sc: &Scenario) -> Option<String> {
    let t = sc.traffic.as_ref()?;
    if sc.transport != Transport::TcpPerQuery {
        return None;
    }
    let peak = match &t.model {
        scenario::Model::OpenLoop { phases, .. } => {
            phases.iter().map(|p| p.from.max(p.to)).fold(0.0, f64::max)
        }
        _ => return None,
    };
    let reuse = proc::sysctl_u64("net.ipv4.tcp_tw_reuse").unwrap_or(0);
    let loopback = sc.targets.iter().all(|a| a.ip().is_loopback());
    if reuse == 1 || (reuse == 2 && loopback) {
        return None;
    }
    let ports = sources::ports_per_source() * sc.sources.len().max(1) as u64;
    let in_time_wait = peak * 60.0;
    (in_time_wait > ports as f64).then(|| {
        format!(
            "tcp-per-query at {peak:.0} queries/s leaves ~{in_time_wait:.0} ports in TIME_WAIT \
             (60 s each) but only {ports} are available: connects will fail with \
             no_free_port; set net.ipv4.tcp_tw_reuse=1 (sysctl -w) or add source addresses \
             (--source-ip)"
        )
    })
}

/// Processes the plan needs: one unless the fd limit says more.
pub(super) fn processes_needed(processes: Processes, sc: &Scenario, fd: &FdLimit) -> u64 {
    match processes {
        Processes::Count(n) => n,
        Processes::Auto => {
            // The same math as `throng tune`.
            let per_conn = if sc.embedded_server { 2 } else { 1 };
            crate::sys::tune::processes_for(sc.connections * per_conn, fd.soft.saturating_sub(64))
        }
    }
}

pub(super) fn check_problems(force: bool, problems: Vec<String>) -> Result<()> {
    if problems.is_empty() {
        return Ok(());
    }
    if force {
        for p in &problems {
            errln!("throng: --force: running anyway: {p}");
        }
        return Ok(());
    }
    Err(usage(format!(
        "impossible plan: {} (--force runs it anyway)",
        problems.join(" Also: ")
    )))
}

/// The target's address is one of this host's (loopback or an interface's):
/// both ends of its connections take this host's memory and fds.
pub fn on_this_host(t: &SocketAddr) -> bool {
    t.ip().is_loopback()
        || t.ip().is_unspecified()
        || sources::host_addresses().iter().any(|(_, a)| *a == t.ip())
}

/// Every target needs a source of its own family when sources are given.
pub(super) fn check_source_families(targets: &[SocketAddr], chosen: &[IpAddr]) -> Result<()> {
    if chosen.is_empty() {
        return Ok(());
    }
    for t in targets {
        if !chosen.iter().any(|s| s.is_ipv4() == t.is_ipv4()) {
            return Err(usage(format!(
                "target {t} is {} but no --source-ip is; give one of its family",
                if t.is_ipv4() { "IPv4" } else { "IPv6" }
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn scenario(args: &[&str], sources: Vec<IpAddr>) -> Scenario {
        let mut argv = vec!["throng", "client"];
        argv.extend_from_slice(args);
        let crate::cli::Command::Client(a) = crate::cli::Cli::parse_from(argv).command else {
            panic!("not a client command")
        };
        let targets = super::super::resolve(&a.targets).unwrap();
        a.scenario(targets, false, sources).unwrap()
    }

    #[test]
    fn too_few_given_sources_warn_with_the_number_needed() {
        let two = vec!["127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap()];
        let sc = scenario(&["127.0.0.1:4242", "-c", "30000"], two);
        let w = per_pair_warning(&sc, 7_058, 28_232).expect("a warning");
        assert!(w.contains("15000 on each"), "{w}");
        assert!(w.contains("give 5 source addresses"), "{w}");
        // Five are enough.
        let five = (2..=6).map(|i| IpAddr::from([127, 0, 0, i])).collect();
        let sc = scenario(&["127.0.0.1:4242", "-c", "30000"], five);
        assert_eq!(per_pair_warning(&sc, 7_058, 28_232), None);
    }

    #[test]
    fn one_source_warns_past_the_knee_only() {
        let sc = scenario(&["127.0.0.1:4242", "-c", "7000"], Vec::new());
        assert_eq!(per_pair_warning(&sc, 7_058, 28_232), None);
        let sc = scenario(&["127.0.0.1:4242", "-c", "8000"], Vec::new());
        let w = per_pair_warning(&sc, 7_058, 28_232).expect("a warning");
        assert!(w.contains("from one source address"), "{w}");
        // Two destinations: each pair carries half.
        let sc = scenario(
            &["127.0.0.1:4242", "127.0.0.1:4243", "-c", "8000"],
            Vec::new(),
        );
        assert_eq!(per_pair_warning(&sc, 7_058, 28_232), None);
    }
}
