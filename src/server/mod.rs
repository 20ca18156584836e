//! The reference server: one worker thread per core, each with its own
//! SO_REUSEPORT listener(s) and event loop, answering with the same codecs
//! (crates/wire) the client uses. This module runs one process: its
//! banner, its per-second loop, its summary; the workers do the serving.
//!
//! The parts: `config` (what to serve, plain data) and `certs` (the TLS
//! certificate and its files); `bind` (the sockets) and `running` (the
//! workers started, their counters, their stop); `seconds` (the stats of a
//! second, the loop that takes them, where they go) and `summary`; `multi`
//! (several processes on one port), `elastic` (as many as the connections
//! need) and `handoff` (when a member of a
//! group passes new connections on); `prometheus` (--metrics); `acceptor`
//! (a worker's listeners: accept, shed, pause), `worker` and `responder`
//! (the serving), `websocket` (what a WebSocket connection is answered).

mod acceptor;
mod bind;
mod config;
mod elastic;
mod handoff;
mod multi;
mod prometheus;
mod push;
mod responder;
mod running;
mod seconds;
pub mod stats;
mod summary;
mod websocket;
mod worker;

pub use crate::server_config::{ServerConfig, ServerTls, DEFAULT_PORT};
pub(crate) use handoff::Handoff;
pub use responder::Responder;
pub use running::{start, Running};

use std::io::{self, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;

use crate::child::ChildLine;
use crate::domain::Processes;
use crate::exposition::Endpoint;
use crate::sys::fd_handoff::FdHandoff;
use crate::sys::signals::{Reason, Stop};
use running::start_with;
use seconds::{each_second, ChildSecond, ListenCounters, StatsOut, Wake};
use summary::{listening, print_summary, ChildTotals};

/// Runs the server until SIGINT or SIGTERM, then prints the summary.
pub fn run(cfg: &ServerConfig) -> Result<()> {
    let mut out = StatsOut::open(cfg)?;
    // Signals first, so a SIGTERM that arrives while workers start is kept.
    let signals = if cfg.child {
        Stop::install_child()?
    } else {
        Stop::install()?
    };
    // Bound before the server's own sockets: a busy address stops it
    // before it serves anything.
    let endpoint = match cfg.metrics.filter(|_| !cfg.child) {
        Some(addr) => Some(Endpoint::bind(addr)?),
        None => None,
    };
    if !cfg.child {
        match cfg.processes {
            Processes::Auto => return elastic::run(cfg, &signals, out, endpoint),
            Processes::Count(n) if n > 1 => return multi::run(cfg, n, &signals, out, endpoint),
            Processes::Count(_) => {}
        }
    }
    if cfg.child {
        if cfg.elastic {
            // Listen only when the parent says: the group numbers its
            // sockets in the order they listen, and the parent steers by
            // that number, so members listen one after the other.
            let mut line = String::new();
            if io::stdin().read_line(&mut line)? == 0 {
                return Ok(()); // the parent is gone
            }
        }
        let handoff = Arc::new(if cfg.elastic {
            let channel = cfg.channel.and_then(FdHandoff::inherited);
            Handoff::elastic(signals.sender(), channel)
        } else {
            Handoff::ready()
        });
        let server = start_with(cfg, Some(handoff.clone()))?;
        return run_child(server, &signals);
    }
    let server = start(cfg)?;

    let mut banner = crate::console::stdout();
    writeln!(
        banner,
        "throng server: {} mode, {} worker{}",
        cfg.mode.name(),
        cfg.workers,
        if cfg.workers == 1 { "" } else { "s" }
    )?;
    listening(cfg, &server.addrs, &mut banner)?;
    if let Some(e) = &endpoint {
        writeln!(banner, "{}", e.banner())?;
    }
    for l in &server.limits {
        writeln!(banner, "{l}")?;
    }
    banner.flush()?;
    drop(banner);

    let started = Instant::now();
    let mut listen = ListenCounters::read();
    if let Some(e) = endpoint {
        let exported = prometheus::Exported::new(listen.start());
        exported.add_live(server.probe());
        e.serve(exported.registry())?;
    }
    let last = each_second(&server, &signals, started, |wake| {
        let Wake::Second(mut sec) = wake else {
            return Ok(false);
        };
        listen.second(crate::sys::proc::listen_counters(), &mut sec);
        out.emit(&sec);
        Ok(true)
    })?;

    let peak = server.shared.peak.load(Relaxed);
    let result = server.stop();
    let totals = match &result {
        Ok(t) => t.clone(),
        Err(_) => last,
    };
    print_summary(&totals, peak, started.elapsed(), listen.since_start())?;
    result.map(|_| ())
}

/// A child of --processes: JSON lines on stdout, no banner, no summary.
/// An elastic one also says when it fills up.
fn run_child(server: Running, signals: &Stop) -> Result<()> {
    ChildLine::Ready.print();
    each_second(&server, signals, Instant::now(), |wake| {
        match wake {
            // The parent reads the kernel's listen counters (one netns for all).
            Wake::Second(sec) => {
                // Its counters since it started, for the parent's --metrics.
                let line = ChildSecond {
                    sec: *sec,
                    totals: Some(server.totals()),
                };
                ChildLine::Stats(serde_json::to_value(&line)?).print()
            }
            Wake::Other(Reason::Grow) => ChildLine::Filling.print(),
            Wake::Other(Reason::Full) => ChildLine::Full.print(),
            Wake::Other(Reason::Room) => ChildLine::Room.print(),
            Wake::Other(_) => return Ok(false),
        }
        Ok(true)
    })?;
    let peak = server.shared.peak.load(Relaxed);
    let totals = server.stop()?;
    ChildLine::Totals(serde_json::to_value(ChildTotals { totals, peak })?).print();
    Ok(())
}
