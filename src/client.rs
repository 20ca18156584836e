//! `throng client`: from flags to a finished, reported run. Resolves the
//! targets (or starts the embedded server), plans source addresses, runs the
//! preflight checks and prints the plan, runs the engine, prints the summary
//! and writes the JSON. An impossible plan stops here, before any connect.

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;

use crate::cli::{ClientArgs, Mode};
use crate::report::json::{write_atomic, Environment, RunResult};
use crate::report::{self, LiveView};
use crate::scenario::{self, Scenario};
use crate::server::{self, ServerConfig};
use crate::sys::limits::{self, FdLimit};
use crate::sys::signals::Stop;
use crate::sys::{proc, sources};
use crate::UsageError;

/// Fds a client process needs besides its connections (epoll, wakers,
/// stdio, the embedded server's listener...).
const FD_OVERHEAD: u64 = 64;
/// Most addresses one --source-ip prefix expands to.
const MAX_SOURCES: usize = 65_536;

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

fn embedded_config() -> ServerConfig {
    ServerConfig {
        listen: vec![SocketAddr::from((Ipv4Addr::LOCALHOST, 0))],
        mode: Mode::Echo,
        udp: false,
        workers: 1,
        backlog: 65_535,
        max_pending: 64 * 1024,
        body_size: 2,
        dns_answer: Ipv4Addr::new(192, 0, 2, 1),
        dns_ttl: 60,
        reply: Vec::new(),
        on_prefix: Vec::new(),
        stats: false,
        stats_json: None,
    }
}

/// What the preflight found wrong with a plan: each entry is the reason
/// and the fix.
fn preflight(sc: &Scenario, fd: &FdLimit, shortfall: Option<String>) -> Vec<String> {
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
        problems.push(format!(
            "{per_target} connections to {t} need {per_target} ephemeral ports, but {} source \
             address(es) give {} ({ports} each, net.ipv4.ip_local_port_range). Add source \
             addresses (--source-ip 127.0.0.2/24 on loopback) or widen the range: \
             sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\"",
            family_sources(t),
            ports * family_sources(t)
        ));
    }
    if let Some(s) = shortfall {
        problems.push(s);
    }
    problems
}

fn warnings(sc: &Scenario) -> Vec<String> {
    let mut w = Vec::new();
    if sc.reconnect && proc::sysctl_u64("net.ipv4.tcp_tw_reuse") == Some(0) {
        w.push(
            "connections will churn and each closed one keeps its port in TIME_WAIT for 60 s, \
             but net.ipv4.tcp_tw_reuse is 0; set it (sysctl -w net.ipv4.tcp_tw_reuse=1) or add \
             source addresses"
                .to_string(),
        );
    }
    if sc.sources.is_empty()
        && sc.per_target() > sources::comfortable_per_source()
        && !sc.targets.is_empty()
    {
        w.push(format!(
            "{} connections to one destination from one source address use more than half the \
             port range: connect() slows down sharply past that point",
            sc.per_target()
        ));
    }
    w
}

/// Runs `throng client`.
pub fn run(a: &ClientArgs) -> Result<ExitCode> {
    if let Some(p) = &a.json {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
        if dir.is_some_and(|d| !d.is_dir()) {
            return Err(usage(format!(
                "--json {}: the directory does not exist",
                p.display()
            )));
        }
    }
    let mut sources_given = Vec::new();
    for spec in &a.source_ip {
        sources_given.extend(
            sources::expand(spec, MAX_SOURCES).map_err(|e| usage(format!("--source-ip {e}")))?,
        );
    }
    if a.control.as_deref().is_some_and(|c| c != "-") {
        return Err(usage("--control takes '-' (commands on stdin)"));
    }
    if a.control.is_some() && a.pause {
        return Err(usage("--control and --pause both read stdin; use one"));
    }
    let rtt_log = match &a.rtt_log {
        Some(p) => Some(
            std::fs::File::create(p)
                .map_err(|e| usage(format!("--rtt-log {}: {e}", p.display())))?,
        ),
        None => None,
    };
    let stop = Stop::install()?;
    let fd = limits::raise_nofile()?;
    let started_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let env = Environment::read(started_unix_s);

    let embedded = if a.targets.is_empty() {
        let srv = server::start(&embedded_config())?;
        println!(
            "no target given: started the embedded echo server on {} (the code of `throng server --mode echo`)",
            srv.addrs[0]
        );
        Some(srv)
    } else {
        None
    };
    let targets = match &embedded {
        Some(s) => s.addrs.clone(),
        None => scenario::resolve(&a.targets)?,
    };
    let per_target = a.connections.div_ceil(targets.len() as u64);
    let (chosen, shortfall, why) = if sources_given.is_empty() {
        let p = sources::plan(&targets, per_target, sources::comfortable_per_source());
        (p.sources, p.shortfall, p.why)
    } else {
        (sources_given, None, "--source-ip".into())
    };
    check_source_families(&targets, &chosen)?;
    let sc = Scenario::new(a, targets, embedded.is_some(), chosen)?;
    let problems = preflight(&sc, &fd, shortfall);

    let mut out = io::stdout().lock();
    writeln!(
        out,
        "{}",
        report::plan_paragraph(&sc, sources::ports_per_source())
    )?;
    if !sc.sources.is_empty() {
        writeln!(out, "  sources: {why}")?;
    }
    for w in warnings(&sc) {
        writeln!(out, "  warning: {w}")?;
    }
    out.flush()?;
    drop(out);
    if !problems.is_empty() {
        if a.force {
            for p in &problems {
                eprintln!("throng: --force: running anyway: {p}");
            }
        } else {
            return Err(usage(format!(
                "impossible plan: {} (--force runs it anyway)",
                problems.join(" Also: ")
            )));
        }
    }

    let sc = Arc::new(sc);
    if sc.end == scenario::End::Pause {
        stop.on_enter()?;
    }
    if a.control.is_some() {
        stop.on_control()?;
    }
    let mut live = LiveView::new(a.quiet, sc.connections);
    let outcome = crate::engine::run(sc.clone(), &stop, &mut live, rtt_log)?;
    if let Some(srv) = embedded {
        srv.stop()?;
    }

    let mut out = io::stdout().lock();
    report::summary(&sc, &outcome, &mut out)?;
    out.flush()?;
    if let Some(p) = &a.json {
        write_atomic(p, &RunResult::new(&sc, env, &outcome))?;
    }
    let failed = outcome.totals.failed_total();
    if failed > sc.max_failures {
        eprintln!(
            "throng: {failed} connection(s) failed, more than --max-failures {}",
            sc.max_failures
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Every target needs a source of its own family when sources are given.
fn check_source_families(targets: &[SocketAddr], chosen: &[IpAddr]) -> Result<()> {
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
