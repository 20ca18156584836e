//! A running server: its limits worked out, its sockets bound, its workers
//! started; the handle that reads their counters and stops them.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread;

use anyhow::{Context, Result};
use mio::{Poll, Waker};

use super::bind::bind;
use super::seconds::{push_second, unix_now, Second};
use super::stats::{Shared, Totals, WorkerStats};
use super::summary::backlog;
use super::{worker, Handoff, ServerConfig};
use crate::domain::Mode;
use crate::sys::limits;

/// Fds a worker needs besides connections: epoll, waker, reserve.
const FDS_PER_WORKER: u64 = 3;

/// The configuration of a member of an elastic group: its accept queues
/// together hold at most what its fds do (half, when the group's channel
/// could not be made deep). A member hands new connections
/// over at 13/16 of its fds, open or queued (the queues are asked every 32
/// accepts), and then accepts what its queues still hold, passing what its
/// fds cannot hold to a member with room (the group's channel). Shallower
/// queues overflow under a connect storm on the same cores as the load,
/// and each SYN the kernel drops waits a second to be sent again (a
/// million connections on two cores ramp at about 21k/s with a connect
/// p99 past 1 s behind queues of half its fds, at about 34k/s and 137 ms
/// behind queues of all of them; bench/RESULTS.md).
fn elastic_member(cfg: &ServerConfig, fd: &limits::FdLimit, deep: bool) -> ServerConfig {
    let reserved = limits::fds_in_use() as u64 + FDS_PER_WORKER * cfg.workers as u64 + 8;
    // A channel of a few hundred connections (no CAP_NET_ADMIN to deepen
    // it) would shed what deep queues bring: the queues then hold half.
    let room = fd.soft.saturating_sub(reserved) / if deep { 1 } else { 2 };
    let per_listener = (room / cfg.workers.max(1) as u64).max(128);
    let mut c = cfg.clone();
    c.backlog = c.backlog.min(per_listener.min(u32::MAX as u64) as u32);
    c
}

/// The lines of the start-up banner that are about limits.
fn limits_banner(cfg: &ServerConfig, fd: &limits::FdLimit) -> Vec<String> {
    let reserved = limits::fds_in_use() as u64 + FDS_PER_WORKER * cfg.workers as u64;
    let max_conns = fd.soft.saturating_sub(reserved);
    let mut lines = Vec::new();
    let mut l = format!(
        "{}: at most {max_conns} connections in this process",
        fd.describe()
    );
    if fd.hard_is_cap {
        l.push_str(" (hard limit is the cap here; more connections need more server processes)");
    }
    lines.push(l);
    let (effective, clamped) = backlog(cfg.backlog);
    let mut l = format!("listen backlog {effective}");
    if let Some(m) = clamped {
        l.push_str(&format!(
            " (asked {}; the kernel clamps it to net.core.somaxconn = {m}; \
             raise it: sysctl -w net.core.somaxconn={})",
            cfg.backlog, cfg.backlog
        ));
    }
    lines.push(l);
    lines
}

/// A running server's counters, to read from another thread (the metrics
/// endpoint's).
#[derive(Clone)]
pub(crate) struct Probe {
    stats: Vec<Arc<WorkerStats>>,
    shared: Arc<Shared>,
    push: bool,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("workers", &self.stats.len())
            .finish()
    }
}

impl Probe {
    /// Counters summed over workers, now.
    pub(crate) fn totals(&self) -> Totals {
        Totals::sum(self.stats.iter().map(|s| &**s), self.push)
    }

    pub(crate) fn connections(&self) -> i64 {
        self.shared.current.load(Relaxed)
    }

    pub(crate) fn peak(&self) -> i64 {
        self.shared.peak.load(Relaxed)
    }
}

/// A server whose workers are running.
pub struct Running {
    /// Addresses actually bound, one per --listen.
    pub addrs: Vec<SocketAddr>,
    /// Connections this process holds before it hands over to a sibling.
    pub max_open: i64,
    /// Start-up lines about limits (fds, backlog).
    pub limits: Vec<String>,
    /// The parent of an elastic group: each port's SO_REUSEPORT group.
    pub groups: Vec<std::os::fd::OwnedFd>,
    pub shared: Arc<Shared>,
    worker_stats: Vec<Arc<WorkerStats>>,
    /// --mode push: its counters are in the totals.
    push: bool,
    wakers: Vec<Waker>,
    workers: Vec<thread::JoinHandle<io::Result<()>>>,
}

impl Running {
    /// A handle on the counters for another thread.
    pub(crate) fn probe(&self) -> Probe {
        Probe {
            stats: self.worker_stats.clone(),
            shared: self.shared.clone(),
            push: self.push,
        }
    }

    /// Counters summed over workers, now.
    pub fn totals(&self) -> Totals {
        Totals::sum(self.worker_stats.iter().map(|s| &**s), self.push)
    }

    /// The stats of second `t`: gauges now, rates since `last` (listen
    /// counters are left to the caller).
    pub(super) fn second(&self, t: u64, totals: &Totals, last: &Totals) -> Second {
        Second {
            t,
            unix_s: unix_now(),
            connections: self.shared.current.load(Relaxed),
            peak_connections: self.shared.peak.load(Relaxed),
            accepted_per_s: totals.accepted - last.accepted,
            closed_per_s: totals.closed - last.closed,
            requests_per_s: totals.requests - last.requests,
            bytes_in_per_s: totals.bytes_in - last.bytes_in,
            bytes_out_per_s: totals.bytes_out - last.bytes_out,
            errors: totals.errors() - last.errors(),
            listen_overflows: 0,
            listen_drops: 0,
            processes: 0,
            push: totals.push.as_ref().map(|p| {
                let last = last.push.clone().unwrap_or_default();
                let late_max_us = self
                    .worker_stats
                    .iter()
                    .map(|w| w.push.late_max_us_second.swap(0, Relaxed))
                    .max()
                    .unwrap_or(0);
                let subscribers = self
                    .worker_stats
                    .iter()
                    .map(|w| w.push.subscribers.load(Relaxed) as i64)
                    .sum();
                push_second(&p.since(&last), late_max_us, subscribers)
            }),
        }
    }

    /// True when a worker stopped on its own (an error).
    pub fn worker_exited(&self) -> bool {
        self.workers.iter().any(|w| w.is_finished())
    }

    /// Stops the workers, closes every connection, returns the totals.
    pub fn stop(self) -> Result<Totals> {
        self.shared.stop.store(true, Relaxed);
        for w in &self.wakers {
            w.wake()?;
        }
        let mut failure = None;
        for w in self.workers {
            match w.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failure = Some(anyhow::Error::new(e).context("worker failed")),
                Err(_) => failure = Some(anyhow::anyhow!("a worker thread panicked")),
            }
        }
        let totals = Totals::sum(self.worker_stats.iter().map(|s| &**s), self.push);
        match failure {
            Some(e) => Err(e),
            None => Ok(totals),
        }
    }
}

/// Raises the fd limit, binds every socket, starts the workers.
pub fn start(cfg: &ServerConfig) -> Result<Running> {
    let handoff = cfg.child.then(|| Arc::new(Handoff::ready()));
    start_with(cfg, handoff)
}

/// [`start`] as a member of a group of processes: `handoff` says how it
/// hands new connections to its siblings when full.
pub(crate) fn start_with(cfg: &ServerConfig, handoff: Option<Arc<Handoff>>) -> Result<Running> {
    let fd = limits::raise_nofile().context("reading RLIMIT_NOFILE")?;
    let elastic_backlog;
    let cfg = match handoff.as_ref().filter(|h| h.is_elastic()) {
        Some(h) => {
            let deep = h.channel_in().is_some_and(|p| p.holds_thousands());
            elastic_backlog = elastic_member(cfg, &fd, deep);
            &elastic_backlog
        }
        None => cfg,
    };
    let bound = bind(cfg)?;
    // A handle on each port's SO_REUSEPORT group (a second fd of the first
    // worker's listener, not a socket of its own): the parent of an
    // elastic group steers new connections through it.
    let mut groups = Vec::new();
    if handoff.is_some() && !cfg.child {
        if let Some((tcp, _)) = bound.per_worker.first() {
            for l in tcp {
                groups.push(std::os::fd::AsFd::as_fd(l).try_clone_to_owned()?);
            }
        }
    }
    let shared = Arc::new(Shared::default());
    let responder = Arc::new(cfg.responder());
    let tls = match &cfg.tls {
        Some(t) => Some(crate::tls::server_config(
            &t.cert_pem,
            &t.key_pem,
            &t.cert_file.display().to_string(),
        )?),
        None => None,
    };
    let limits = limits_banner(cfg, &fd);
    // One of several processes on a port closes its listeners when full so
    // its siblings get the new connections; alone, a server keeps
    // accepting and sheds what it cannot hold (counted refusals).
    let max_open = if handoff.is_some() {
        fd.soft
            .saturating_sub(limits::fds_in_use() as u64 + FDS_PER_WORKER * cfg.workers as u64 + 8)
            as i64
    } else {
        i64::MAX
    };
    if let Some(h) = &handoff {
        h.arm(max_open, cfg.workers);
    }
    let mut workers = Vec::new();
    let mut wakers = Vec::new();
    let mut worker_stats = Vec::new();
    for (i, (listeners, udp)) in bound.per_worker.into_iter().enumerate() {
        let poll = Poll::new()?;
        wakers.push(Waker::new(poll.registry(), worker::WAKER)?);
        let stats = Arc::new(WorkerStats::default());
        worker_stats.push(stats.clone());
        let w = worker::Worker::new(worker::Setup {
            poll,
            listeners,
            udp,
            responder: responder.clone(),
            stats,
            shared: shared.clone(),
            max_pending: cfg.max_pending,
            listen: bound.addrs.clone(),
            backlog: cfg.backlog,
            max_open,
            handoff: handoff.clone(),
            tls: tls.clone(),
            push: (cfg.mode == Mode::Push).then(|| cfg.push.clone()),
        })?;
        workers.push(
            thread::Builder::new()
                .name(format!("server-{i}"))
                .spawn(move || w.run())?,
        );
    }
    Ok(Running {
        addrs: bound.addrs,
        max_open,
        limits,
        groups,
        shared,
        worker_stats,
        push: cfg.mode == Mode::Push,
        wakers,
        workers,
    })
}
