//! `throng server --processes N`: N children of this process share each
//! port through SO_REUSEPORT, each with its own fd limit; this parent checks
//! and reserves the ports, prints one combined stats line and one summary,
//! and passes SIGINT/SIGTERM on.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Instant;

use anyhow::Result;
use socket2::{Protocol, SockAddr, Socket, Type};

use super::stats::{human, Totals};
use super::{ChildTotals, Second, ServerConfig, DEFAULT_PORT};
use crate::cli::Processes;
use crate::cluster::processes::{child_args, ChildLine, Children};
use crate::sys::signals::{Reason, Stop};
use crate::sys::{limits, proc};

/// Kernel memory one held connection costs (both socket buffers idle, the
/// socket, the file): a planning figure.
const KERNEL_BYTES_PER_CONN: u64 = 10 * 1024;
/// Fds a server process keeps for itself.
const FD_OVERHEAD: u64 = 64;

/// Connections to plan for: --max-connections, lowered to what the
/// memory available allows.
fn planned_connections(cfg: &ServerConfig) -> u64 {
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| proc::status_kb(&m, "MemAvailable"))
        .map(|kb| kb * 1024 / KERNEL_BYTES_PER_CONN);
    mem.map_or(cfg.max_connections, |m| cfg.max_connections.min(m))
}

/// How many processes the server runs in.
pub fn processes_needed(cfg: &ServerConfig) -> Result<u64> {
    Ok(match cfg.processes {
        Processes::Count(n) => n,
        Processes::Auto => {
            // The same math as `throng tune`.
            let fd = limits::raise_nofile()?;
            crate::sys::tune::processes_for(planned_connections(cfg), fd.soft)
        }
    })
}

/// Checks each address is free and holds its port (a bound, not listening
/// socket: it takes no connections) so that port 0 resolves once for all
/// children.
fn reserve(cfg: &ServerConfig) -> Result<(Vec<SocketAddr>, Vec<Socket>)> {
    let wanted = if cfg.listen.is_empty() {
        vec![SocketAddr::from((Ipv6Addr::UNSPECIFIED, DEFAULT_PORT))]
    } else {
        cfg.listen.clone()
    };
    let mut addrs = Vec::new();
    let mut held = Vec::new();
    for mut addr in wanted {
        let one = |addr: SocketAddr| -> Result<(SocketAddr, Socket)> {
            super::check_port_free(addr, false).map_err(|e| super::bind_error(addr, e, false))?;
            if cfg.udp {
                super::check_port_free(addr, true).map_err(|e| super::bind_error(addr, e, true))?;
            }
            let s = super::new_socket(addr, Type::STREAM, Protocol::TCP)?;
            s.set_reuse_port(true)?;
            s.bind(&SockAddr::from(addr))
                .map_err(|e| super::bind_error(addr, e, false))?;
            let actual = s.local_addr()?.as_socket().unwrap_or(addr);
            Ok((actual, s))
        };
        let got = match one(addr) {
            Err(e) if cfg.listen.is_empty() && super::ipv6_unavailable(&e) => {
                addr = SocketAddr::from((Ipv4Addr::UNSPECIFIED, DEFAULT_PORT));
                one(addr)?
            }
            other => other?,
        };
        addrs.push(got.0);
        held.push(got.1);
    }
    Ok((addrs, held))
}

/// Runs the server as `n` child processes.
pub fn run(cfg: &ServerConfig, n: u64, stop: &Stop, mut stats_json: Option<File>) -> Result<()> {
    let fd = limits::raise_nofile()?;
    let (addrs, reserved) = reserve(cfg)?;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get()) as u64;
    let workers = (cores / n).max(1).min(cfg.workers as u64);
    let raw: Vec<OsString> = std::env::args_os().skip(2).collect();
    let base = child_args(&raw, false);
    let lists: Vec<Vec<OsString>> = (0..n)
        .map(|_| {
            let mut args: Vec<OsString> = vec!["server".into()];
            args.extend(base.iter().cloned());
            for a in &addrs {
                args.push("--listen".into());
                args.push(a.to_string().into());
            }
            if let Some(t) = cfg.tls.as_ref().filter(|t| t.self_signed) {
                // One certificate for all: the one made (or read) here.
                for (flag, path) in [("--cert", &t.cert_file), ("--key", &t.key_file)] {
                    args.push(flag.into());
                    args.push(path.into());
                }
            }
            for extra in ["--processes", "1", "--child", "--workers"] {
                args.push(extra.into());
            }
            args.push(workers.to_string().into());
            args
        })
        .collect();
    let mut children = Children::spawn(lists, stop, false)?;

    let capacity = fd.soft.saturating_sub(FD_OVERHEAD);
    let mut out = io::stdout().lock();
    writeln!(
        out,
        "throng server: {} mode, {n} processes x {workers} worker{} sharing each port (SO_REUSEPORT)",
        cfg.mode.name(),
        if workers == 1 { "" } else { "s" }
    )?;
    super::listening(cfg, &addrs, &mut out)?;
    writeln!(
        out,
        "{}: {n} processes hold at most {} connections (planned for {}; --max-connections {})",
        fd.describe(),
        capacity * n,
        planned_connections(cfg),
        cfg.max_connections
    )?;
    let somaxconn = proc::sysctl_u64("net.core.somaxconn");
    let effective = somaxconn.map_or(cfg.backlog as u64, |m| m.min(cfg.backlog as u64));
    writeln!(out, "listen backlog {effective} per process")?;
    if proc::sysctl_u64("net.ipv4.tcp_migrate_req") == Some(0) {
        writeln!(
            out,
            "a full process closes its listeners so its siblings take new connections; a \
             connection that reaches its queue in that instant is reset (the client sees \
             half_open) unless the kernel moves it to a sibling: sysctl -w \
             net.ipv4.tcp_migrate_req=1"
        )?;
    }
    out.flush()?;
    drop(out);

    let started = Instant::now();
    let show = cfg.stats || io::stderr().is_terminal();
    let listen0 = proc::listen_counters().unwrap_or_default();
    let mut reserved = Some(reserved);
    let mut seconds: Vec<Vec<Second>> = vec![Vec::new(); n as usize];
    let mut shown = 0usize;
    let mut finals: Vec<Option<ChildTotals>> = vec![None; n as usize];
    let mut alive = n;
    let mut last_listen = listen0;
    while alive > 0 {
        match stop.wait_reason(None) {
            Some(Reason::Signal) => children.signal(libc::SIGTERM),
            Some(Reason::ChildExit(_)) => alive -= 1,
            Some(Reason::ChildLine(i, line)) => match serde_json::from_str::<ChildLine>(&line) {
                Ok(ChildLine::Stats(v)) => {
                    if let Ok(sec) = serde_json::from_value::<Second>(v) {
                        seconds[i].push(sec);
                    }
                    // Every child is up: the ports no longer need holding.
                    if reserved.is_some() && seconds.iter().all(|s| !s.is_empty()) {
                        reserved = None;
                    }
                    while seconds.iter().all(|s| s.len() > shown) {
                        let listen = proc::listen_counters().unwrap_or(last_listen);
                        let sec = combine(seconds.iter().map(|s| &s[shown]), listen, last_listen);
                        last_listen = listen;
                        shown += 1;
                        if let Some(f) = stats_json.as_mut() {
                            if let Err(e) = super::write_json_line(f, &sec) {
                                eprintln!("throng: {e:#}; no more --stats-json lines");
                                stats_json = None;
                            }
                        }
                        if show {
                            eprintln!("{}", sec.line());
                        }
                    }
                }
                Ok(ChildLine::Totals(v)) => finals[i] = serde_json::from_value(v).ok(),
                _ => {}
            },
            _ => {}
        }
    }
    drop(reserved);
    let statuses = children.wait();
    let mut total = Totals::default();
    let mut peak = 0;
    let mut spread = Vec::new();
    for (i, f) in finals.iter().enumerate() {
        match (f, &statuses[i]) {
            (Some(t), _) => {
                total.add(&t.totals);
                peak += t.peak;
                spread.push(format!("{}", t.totals.accepted));
            }
            (None, Ok(code)) => spread.push(format!("died (exit {code})")),
            (None, Err(why)) => spread.push(format!("died ({why})")),
        }
    }
    let listen = proc::listen_counters().unwrap_or(listen0);
    super::print_summary(
        &total,
        peak,
        started.elapsed(),
        (listen.0 - listen0.0, listen.1 - listen0.1),
    )?;
    let accepted: Vec<u64> = finals.iter().flatten().map(|f| f.totals.accepted).collect();
    let (lo, hi) = (
        accepted.iter().min().copied().unwrap_or(0),
        accepted.iter().max().copied().unwrap_or(0),
    );
    println!(
        "  spread       {n} processes accepted {} each (min {lo}, max {hi}); peak is the sum of the processes' peaks",
        human(total.accepted as f64 / n as f64)
    );
    println!("  per process  {}", spread.join(", "));
    Ok(())
}

/// One combined second from every child's.
fn combine<'a>(
    parts: impl Iterator<Item = &'a Second>,
    listen: (u64, u64),
    last: (u64, u64),
) -> Second {
    let mut s = Second::default();
    for p in parts {
        s.t = s.t.max(p.t);
        s.unix_s = s.unix_s.max(p.unix_s);
        s.connections += p.connections;
        s.peak_connections += p.peak_connections;
        s.accepted_per_s += p.accepted_per_s;
        s.closed_per_s += p.closed_per_s;
        s.requests_per_s += p.requests_per_s;
        s.bytes_in_per_s += p.bytes_in_per_s;
        s.bytes_out_per_s += p.bytes_out_per_s;
        s.errors += p.errors;
    }
    s.listen_overflows = listen.0.saturating_sub(last.0);
    s.listen_drops = listen.1.saturating_sub(last.1);
    s
}
