//! Several server processes on one port (SO_REUSEPORT), each with its own
//! fd limit, seen as one server: one combined stats line, one summary,
//! SIGINT/SIGTERM passed on.
//!
//! - `--processes N`, [`run`]: N children from the start; this parent
//!   checks and reserves the ports and only watches.
//! - `--processes auto` (the default) is the elastic group
//!   ([`super::elastic`]); a child of either is configured by [`member`].

use std::collections::VecDeque;
use std::io::Write;
use std::net::SocketAddr;
use std::time::Instant;

use anyhow::Result;

use super::bind::reserve;
use super::prometheus::Exported;
use super::seconds::{ChildSecond, ListenCounters, Second, StatsOut};
use super::stats::Totals;
use super::summary::{backlog, listening, print_summary, ChildTotals};
use super::ServerConfig;
use crate::child::{ChildLine, Children, Own};
use crate::domain::Processes;
use crate::exposition::Endpoint;
use crate::sys::signals::{Reason, Stop};
use crate::sys::{limits, proc};
use crate::units::human;

/// Fds a server process keeps for itself.
const FD_OVERHEAD: u64 = 64;

/// Runs the server as `n` child processes; the endpoint, when there is
/// one, shows them all.
pub fn run(
    cfg: &ServerConfig,
    n: u64,
    stop: &Stop,
    mut out: StatsOut,
    endpoint: Option<Endpoint>,
) -> Result<()> {
    let fd = limits::raise_nofile()?;
    let (addrs, reserved) = reserve(cfg)?;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get()) as u64;
    let workers = (cores / n).max(1).min(cfg.workers as u64);
    let members = (0..n)
        .map(|_| member(cfg, &addrs, workers, false))
        .collect::<Result<Vec<_>>>()?;
    let mut children = Children::spawn(members, stop, false)?;
    // The banner says the server is up (scripts and tests connect when they
    // read it): every child listens first.
    let mut early = wait_ready(stop, n);

    run_banner(cfg, n, workers, &addrs, endpoint.as_ref(), &fd)?;

    let started = Instant::now();
    let mut listen = ListenCounters::read();
    let exported = match endpoint {
        Some(e) => {
            let x = Exported::new(listen.start());
            for _ in 0..n {
                x.add_reported();
            }
            e.serve(x.registry())?;
            Some(x)
        }
        None => None,
    };
    let mut reserved = Some(reserved);
    let mut seconds: Vec<Vec<Second>> = vec![Vec::new(); n as usize];
    let mut shown = 0usize;
    let mut finals: Vec<Option<ChildTotals>> = vec![None; n as usize];
    let mut alive = n;
    while alive > 0 {
        let next = match early.pop_front() {
            Some(r) => Some(r),
            None => stop.wait_reason(None),
        };
        match next {
            Some(Reason::Signal) => children.signal(libc::SIGTERM),
            Some(Reason::ChildExit(_)) => alive -= 1,
            Some(Reason::ChildLine(i, line)) => match serde_json::from_str::<ChildLine>(&line) {
                Ok(ChildLine::Stats(v)) => {
                    if let Ok(line) = serde_json::from_value::<ChildSecond>(v) {
                        if let Some(x) = &exported {
                            x.report(i, &line);
                        }
                        seconds[i].push(line.sec);
                    }
                    // Every child is up: the ports no longer need holding.
                    if reserved.is_some() && seconds.iter().all(|s| !s.is_empty()) {
                        reserved = None;
                    }
                    while seconds.iter().all(|s| s.len() > shown) {
                        let mut sec = Second::combine(seconds.iter().map(|s| &s[shown]));
                        listen.second(proc::listen_counters(), &mut sec);
                        sec.processes = n;
                        shown += 1;
                        out.emit(&sec);
                    }
                }
                Ok(ChildLine::Totals(v)) => {
                    finals[i] = serde_json::from_value(v).ok();
                    if let (Some(x), Some(t)) = (&exported, &finals[i]) {
                        x.finish(i, t);
                    }
                }
                _ => {}
            },
            _ => {}
        }
    }
    drop(reserved);
    let statuses = children.wait();
    print_spread(n, &finals, &statuses, started, &listen)
}

/// Waits until each of the `n` children listens, or until a signal or a
/// child's end: returns what else came meanwhile, in order.
fn wait_ready(stop: &Stop, n: u64) -> VecDeque<Reason> {
    let mut early = VecDeque::new();
    let mut ready = 0;
    while ready < n {
        match stop.wait_reason(None) {
            Some(Reason::ChildLine(_, line))
                if matches!(
                    serde_json::from_str::<ChildLine>(&line),
                    Ok(ChildLine::Ready)
                ) =>
            {
                ready += 1;
            }
            Some(r @ (Reason::Signal | Reason::ChildExit(_))) => {
                early.push_back(r);
                break;
            }
            Some(r) => early.push_back(r),
            None => break,
        }
    }
    early
}

/// The banner of --processes N: the server is up.
fn run_banner(
    cfg: &ServerConfig,
    n: u64,
    workers: u64,
    addrs: &[SocketAddr],
    endpoint: Option<&Endpoint>,
    fd: &limits::FdLimit,
) -> Result<()> {
    let capacity = fd.soft.saturating_sub(FD_OVERHEAD);
    let mut banner = crate::console::stdout();
    writeln!(
        banner,
        "throng server: {} mode, {n} processes x {workers} worker{} sharing each port (SO_REUSEPORT)",
        cfg.mode.name(),
        if workers == 1 { "" } else { "s" }
    )?;
    listening(cfg, addrs, &mut banner)?;
    if let Some(e) = endpoint {
        writeln!(banner, "{}", e.banner())?;
    }
    writeln!(
        banner,
        "{}: {n} processes hold at most {} connections",
        fd.describe(),
        capacity * n,
    )?;
    let (effective, _) = backlog(cfg.backlog);
    writeln!(banner, "listen backlog {effective} per process")?;
    if proc::sysctl_u64("net.ipv4.tcp_migrate_req") == Some(0) {
        writeln!(
            banner,
            "a full process closes its listeners so its siblings take new connections; a \
             connection that reaches its queue in that instant is reset (the client sees \
             half_open) unless the kernel moves it to a sibling: sysctl -w \
             net.ipv4.tcp_migrate_req=1"
        )?;
    }
    banner.flush()?;
    Ok(())
}

/// The summary of --processes N: the processes' counters summed, and how
/// the kernel spread the connections over them.
fn print_spread(
    n: u64,
    finals: &[Option<ChildTotals>],
    statuses: &[std::result::Result<i32, String>],
    started: Instant,
    listen: &ListenCounters,
) -> Result<()> {
    let mut total = Totals::default();
    let mut peak = 0;
    let mut spread = Vec::new();
    for (i, f) in finals.iter().enumerate() {
        match (f, &statuses[i]) {
            (Some(t), _) => {
                total.merge(&t.totals);
                peak += t.peak;
                spread.push(format!("{}", t.totals.accepted));
            }
            (None, Ok(code)) => spread.push(format!("died (exit {code})")),
            (None, Err(why)) => spread.push(format!("died ({why})")),
        }
    }
    print_summary(&total, peak, started.elapsed(), listen.since_start())?;
    let accepted: Vec<u64> = finals.iter().flatten().map(|f| f.totals.accepted).collect();
    let (lo, hi) = (
        accepted.iter().min().copied().unwrap_or(0),
        accepted.iter().max().copied().unwrap_or(0),
    );
    outln!(
        "  spread       {n} processes accepted {} each (min {lo}, max {hi}); peak is the sum of the processes' peaks",
        human(total.accepted as f64 / n as f64)
    );
    outln!("  per process  {}", spread.join(", "));
    Ok(())
}

/// A child process of the group: this configuration on the bound
/// addresses, with `workers` workers, and the certificate every process
/// shares; the per-second stats are the parent's to show.
pub(super) fn member(
    cfg: &ServerConfig,
    addrs: &[SocketAddr],
    workers: u64,
    elastic: bool,
) -> Result<Own> {
    let mut m = cfg.clone();
    m.listen = addrs.to_vec();
    m.workers = workers as usize;
    m.processes = Processes::Count(1);
    m.child = true;
    m.elastic = elastic;
    m.stats = false;
    m.stats_json = None;
    m.metrics = None;
    if let Some(t) = m.tls.as_mut() {
        // Made (or read) here: this process removes its files, not a child.
        t.self_signed = false;
    }
    Own::new(vec!["server".into(), "--child".into()], &m)
}
