//! What a server prints besides its seconds: the start-up banner's lines
//! and the summary at the end (one process or a group's).

use std::io::{self, Write};
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::stats::{PushTotals, Totals};
use super::ServerConfig;
use crate::sys::proc;
use crate::units::{human, human_bytes};

/// The banner's lines for the bound addresses (and the certificate).
pub(super) fn listening(
    cfg: &ServerConfig,
    addrs: &[SocketAddr],
    out: &mut dyn Write,
) -> io::Result<()> {
    let tls = if cfg.tls.is_some() { ", tls" } else { "" };
    for a in addrs {
        writeln!(out, "listening on {a} (tcp{tls})")?;
        if cfg.udp {
            writeln!(out, "listening on {a} (udp)")?;
        }
    }
    if let Some(t) = &cfg.tls {
        writeln!(out, "{}", t.banner())?;
    }
    Ok(())
}

/// The accept queue the kernel gives a listener asked for `asked`: that,
/// clamped to net.core.somaxconn; and somaxconn when it clamps.
pub(super) fn backlog(asked: u32) -> (u64, Option<u64>) {
    let somaxconn = proc::sysctl_u64("net.core.somaxconn");
    let effective = somaxconn.map_or(asked as u64, |m| m.min(asked as u64));
    (effective, somaxconn.filter(|&m| m < asked as u64))
}

/// The final counters of a process of a group (a child's last line).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct ChildTotals {
    pub totals: Totals,
    pub peak: i64,
}

/// --mode push in words: whether the server kept its period.
fn push_summary(p: &PushTotals) -> String {
    let pct = |n: u64| 100.0 * n as f64 / p.due.max(1) as f64;
    let mut s = format!(
        "  push         due {}, sent {} ({:.2}%): on time {}, late {} (up to {:.1} ms)",
        p.due,
        p.sent(),
        pct(p.sent()),
        p.on_time,
        p.late,
        p.late_max_us as f64 / 1000.0
    );
    if p.skipped_full + p.skipped_behind > 0 {
        s += &format!(
            "; skipped {} on full sockets (TCP: clients reading too slowly; UDP: the server's own send buffer), {} a period behind (the server could not keep up)",
            p.skipped_full, p.skipped_behind
        );
    }
    if p.subscribed > 0 {
        s += &format!(
            "; UDP subscriptions {}, expired {}",
            p.subscribed, p.expired
        );
    }
    s
}

/// The summary: counters, errors in words, and hints for what to raise.
pub(super) fn print_summary(
    t: &Totals,
    peak: i64,
    uptime: Duration,
    listen: (u64, u64),
) -> Result<()> {
    let secs = uptime.as_secs_f64().max(1e-9);
    let mut out = crate::console::stdout();
    writeln!(
        out,
        "throng server: stopped after {:.1}s",
        uptime.as_secs_f64()
    )?;
    writeln!(
        out,
        "  connections  accepted {}, closed {}, peak {}",
        t.accepted, t.closed, peak
    )?;
    writeln!(
        out,
        "  requests     {} ({}/s)",
        t.requests,
        human(t.requests as f64 / secs)
    )?;
    writeln!(
        out,
        "  bytes        in {}, out {}",
        human_bytes(t.bytes_in as f64),
        human_bytes(t.bytes_out as f64)
    )?;
    if let Some(p) = &t.push {
        writeln!(out, "{}", push_summary(p))?;
    }
    if let Some(w) = &t.ws {
        let mut line = format!(
            "  websocket    upgrades {}, pings {}, closes {}",
            w.upgrades, w.pings, w.closes
        );
        let errors = w.errors();
        if !errors.is_empty() {
            let named: Vec<String> = errors.iter().map(|(w, n)| format!("{w} {n}")).collect();
            line += &format!(
                "; protocol errors (each closed its connection): {}",
                named.join(", ")
            );
        }
        writeln!(out, "{line}")?;
    }
    let mut errors = Vec::new();
    for (n, what) in [
        (t.bad_input, "malformed input"),
        (t.conn_errors, "connection errors (reset, ...)"),
        (t.accept_no_fds, "refused: out of fds"),
        (t.udp_dropped, "UDP replies dropped"),
    ] {
        if n > 0 {
            errors.push(format!("{what} {n}"));
        }
    }
    for &(errno, n) in &t.accept_errno {
        errors.push(format!(
            "accept: {} {n}",
            io::Error::from_raw_os_error(errno)
        ));
    }
    if errors.is_empty() {
        errors.push("none".into());
    }
    writeln!(out, "  errors       {}", errors.join(", "))?;
    writeln!(
        out,
        "  listen queue overflows +{}, drops +{} (this network namespace, all listeners)",
        listen.0, listen.1
    )?;
    if t.accept_no_fds > 0 {
        writeln!(
            out,
            "  hint: connections were refused because this process ran out of file \
             descriptors; raise the limit (ulimit -n) or run more server processes"
        )?;
    }
    if listen.0 > 0 {
        writeln!(
            out,
            "  hint: the accept queue overflowed; raise --backlog and net.core.somaxconn \
             (sysctl -w net.core.somaxconn=65535)"
        )?;
    }
    out.flush()?;
    Ok(())
}
