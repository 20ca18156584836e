//! One client worker: a mio loop that opens its share of the connections on
//! an absolute schedule, verifies each, holds them, sends its share of the
//! queries and measures every response; every connection attempt ends in
//! exactly one bucket.
//!
//! The worker is the loop and the glue; its parts each own one concern:
//! [`Net`] the transport (TCP, TLS or UDP, chosen once);
//! [`Mode`] what the connections are for (held, traffic or push, chosen
//! once), with the traffic's own state ([`Traffic`]) and the push
//! streams' ([`PushRx`]); [`Conns`] the connections, their
//! [`Dialer`] (the ramp, levels, reconnect debt and connection
//! deadlines) and their one end; [`Link`](super::link::Link) a
//! connection's socket; [`Flight`](super::inflight::Flight) a connection's
//! queries in flight; [`Recorder`](super::recorder::Recorder) what is
//! measured. The worker's own methods are split by room: a connection's
//! way to held (`opening.rs`), bytes to frames and back (`io.rs`), and
//! queries (`traffic.rs`); those files import the worker, never each
//! other, and the worker imports none of them. An event flows link → codec →
//! in-flight table → recorder → pacing, which says what is due next.
//!
//! Worker `w` of `W` owns connection attempts w, w+W, w+2W, ..., and runs
//! its own arrival process for 1/W of the query rate, so the workers
//! together follow the scenario without talking to each other. Query
//! timeouts keep one entry per connection with queries in flight (see
//! `deadlines`): an answer then costs nothing there.
//!
//! Times inside the worker are u64 nanoseconds since the run's start.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Token};
use slab::Slab;

use super::conn::{End, Flags, State};
use super::connections::{Conns, EndRules};
use super::dialer::Dialer;
use super::mode::{default_probe, Mode, Traffic, TrafficSetup};
use super::net::Net;
use super::proto::Codec;
use super::push::PushRx;
use super::spares::Spares;
use crate::domain::Transport;
use crate::metrics::{
    bump, ConnCounters, Histograms, QueryCounters, Shared, StatusCounts, E_NOT_SENT,
    E_NO_CONNECTION,
};
use crate::scenario::{Model, Scenario};
use crate::sys::signals::Reason;
use crate::sys::timer::Timer;

pub const WAKER: Token = Token(usize::MAX);
const TIMER: Token = Token(usize::MAX - 1);

use super::net::TlsClient;

/// What a worker gets at start.
pub struct Setup {
    pub id: usize,
    pub scenario: Arc<Scenario>,
    pub poll: Poll,
    pub counters: Arc<ConnCounters>,
    pub queries: Arc<QueryCounters>,
    pub shared: Arc<Shared>,
    pub start: Instant,
    pub notify: mpsc::Sender<Reason>,
    pub reports: super::seconds::ReportTx,
    pub rtt_log: Option<(mpsc::Sender<Vec<u8>>, u64)>,
    /// Targets as given, for HTTP Host headers.
    pub hosts: Vec<String>,
    pub tls: Option<Arc<TlsClient>>,
    /// Each second's report carries its service times (--metrics).
    pub service_seconds: bool,
}

/// What a worker hands back when it stops.
pub struct Finished {
    pub hists: Histograms,
    pub statuses: StatusCounts,
    /// Queries still unanswered when the run ended.
    pub in_flight: u64,
}

pub struct Worker {
    /// Precise wake-ups (epoll's own timeout is in whole milliseconds).
    timer: Timer,
    armed: Option<Instant>,
    pub(super) id: u64,
    pub(super) nworkers: u64,
    pub(super) sc: Arc<Scenario>,
    pub(super) poll: Poll,
    /// The connections, their dialer and their one way out.
    pub(super) conns: Conns,
    pub(super) counters: Arc<ConnCounters>,
    pub(super) q: Arc<QueryCounters>,
    pub(super) shared: Arc<Shared>,
    pub(super) start: Instant,
    notify: mpsc::Sender<Reason>,
    /// TCP, TLS or UDP: decided once.
    pub(super) net: Net,
    /// Plaintext out of TLS sessions.
    pub(super) plain: Vec<u8>,
    /// While a read's bytes are processed: when it returned (ns).
    pub(super) read_at: Option<u64>,
    /// The codec probes are built with when there is no traffic.
    pub(super) probe_codec: Codec,
    /// Holding, traffic or push: decided at start.
    pub(super) mode: Mode,
    pub(super) scratch: Vec<u8>,
    pub(super) out: Vec<u8>,
    /// Output buffers given back by connections that went idle, lent to
    /// the next one that queues a message.
    pub(super) spare: Spares,
    /// Connections with bytes to write at the end of this loop turn.
    pub(super) dirty: Vec<usize>,
    /// Connections whose read stopped at its budget with bytes left: read
    /// again next turn (their readiness will not be reported again).
    pub(super) unread: Vec<usize>,
    /// The traffic has ended: no new query is due (what was due and waits
    /// for its connection's window still leaves); the worker reads until
    /// nothing is in flight or this instant passes (--drain).
    pub(super) draining: Option<Instant>,
    /// When the drain last looked for queries in flight.
    drain_looked: Option<Instant>,
    /// Closed loop: every connection always has queries in flight, so it
    /// keeps its output buffer between writes, and its table of queries
    /// in flight when a window's answers empty it.
    pub(super) busy: bool,
}

impl Worker {
    pub fn new(s: Setup) -> io::Result<Worker> {
        let w = s.scenario.workers as u64;
        let id = s.id as u64;
        let n = s.scenario.connections;
        let share = n / w + u64::from(id < n % w);
        let transport = s.scenario.transport;
        let per_query = transport == Transport::TcpPerQuery;
        let initial_total = if s.scenario.connections_schedule.is_some() || per_query {
            // The schedule decides, or each query opens its own: there
            // is no ramp of fixed attempts.
            0
        } else {
            share
        };
        let net = Net::new(&s.scenario, s.tls);
        let mode = match (&s.scenario.traffic, &s.scenario.push) {
            (Some(t), _) => Mode::Traffic(Traffic::new(TrafficSetup {
                traffic: t,
                hosts: &s.hosts,
                queries: s.queries.clone(),
                reports: s.reports.clone(),
                rtt_log: s.rtt_log.clone(),
                service_seconds: s.service_seconds,
                id,
                workers: w,
                per_query: per_query.then_some(share.max(1)),
                datagrams: net.is_udp(),
                hold: s.scenario.end == crate::scenario::End::Hold,
            })),
            (None, Some(p)) => Mode::Push(PushRx::new(&s.scenario, p)),
            (None, None) => Mode::Hold,
        };
        let timer = Timer::new()?;
        s.poll.registry().register(
            &mut mio::unix::SourceFd(&timer.as_raw_fd()),
            TIMER,
            Interest::READABLE,
        )?;
        let model = s.scenario.traffic.as_ref().map(|t| &t.model);
        Ok(Worker {
            timer,
            armed: None,
            id,
            nworkers: w,
            poll: s.poll,
            conns: Conns::new(
                // Sized once: a slab that doubles as it fills keeps up to
                // half its entries empty, memory every held connection
                // would pay for.
                Slab::with_capacity(initial_total as usize),
                Dialer::new(
                    &s.scenario,
                    id,
                    w,
                    initial_total,
                    s.start,
                    s.notify.clone(),
                    s.counters.clone(),
                ),
                EndRules::new(&s.scenario, &net, &mode),
                s.counters.clone(),
                s.shared.clone(),
                s.start,
            ),
            counters: s.counters,
            q: s.queries,
            shared: s.shared,
            start: s.start,
            notify: s.notify,
            plain: Vec::new(),
            read_at: None,
            probe_codec: Codec::new(
                s.scenario.probe.as_ref().unwrap_or(&default_probe()),
                &s.hosts,
                net.is_udp(),
            ),
            mode,
            scratch: vec![0; net.scratch_len()],
            net,
            out: Vec::with_capacity(4096),
            spare: Default::default(),
            dirty: Vec::new(),
            unread: Vec::new(),
            busy: matches!(model, Some(Model::ClosedLoop { .. })),
            draining: None,
            drain_looked: None,
            sc: s.scenario,
        })
    }

    /// Creates and binds every socket this worker will connect (--preallocate).
    pub fn preallocate(&mut self) -> Result<(), i32> {
        for j in 0..self.conns.dial.initial_total {
            let (target, source) = self
                .conns
                .dial
                .endpoints(&self.sc, self.conns.dial.ramp_seq(j));
            let made = self.net.prepare(target, source)?;
            self.conns.dial.prealloc.push_back(made);
        }
        Ok(())
    }

    /// The instant the schedule counts from.
    pub fn set_start(&mut self, start: Instant) {
        self.start = start;
        self.conns.set_start(start);
    }

    /// Tells the main thread.
    pub(super) fn say(&self, r: Reason) {
        let _ = self.notify.send(r);
    }

    pub(super) fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.start).as_nanos() as u64
    }

    fn at(&self, ns: u64) -> Instant {
        self.start + Duration::from_nanos(ns)
    }

    pub fn run(mut self) -> io::Result<Finished> {
        let mut events = Events::with_capacity(1024);
        self.conns.dial.begin();
        let mut turn_start = Instant::now();
        loop {
            let now = Instant::now();
            if self.draining.is_none() && self.shared.drain.load(Relaxed) {
                let drain = self.sc.traffic.as_ref().map_or(0.0, |t| t.drain_s);
                self.draining = Some(now + Duration::from_secs_f64(drain));
            }
            if self.shared.ramp_stop.load(Relaxed) {
                self.conns.dial.stop_ramp();
            }
            if let Some(until) = self.draining {
                if self.drained(now, until) {
                    break;
                }
            } else {
                self.follow_level(now);
            }
            // (Reconnects go on while draining: a query that crossed the
            // server's close is sent again on the next connection.)
            self.start_due(now);
            self.expire(now);
            self.conns.dial.shrink();
            self.traffic_due(now);
            self.push_keepalive(now);
            self.pq_fill();
            self.flush_dirty();
            let wakeup = match self.draining {
                // Draining: look again at least every 10 ms.
                Some(until) => Some(
                    self.next_wakeup()
                        .unwrap_or(until)
                        .min(until)
                        .min(now + Duration::from_millis(10)),
                ),
                None => self.next_wakeup(),
            };
            self.check_quota_done();
            let timeout = match wakeup {
                // Connections left unread: look at the events, then read on.
                _ if !self.unread.is_empty() => Some(Duration::ZERO),
                None => None,
                Some(at) => {
                    let wait = at.saturating_duration_since(Instant::now());
                    if wait.is_zero() {
                        Some(Duration::ZERO)
                    } else {
                        if self.armed != Some(at) {
                            self.timer.arm(wait)?;
                            self.armed = Some(at);
                        }
                        None
                    }
                }
            };
            let polled = self.mode.is_push().then(Instant::now);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            if let Some(before) = polled {
                // --proto push: the turn's time outside epoll_wait.
                let woke = Instant::now();
                let c = &self.counters.push;
                bump(
                    &c.busy_ns,
                    before.saturating_duration_since(turn_start).as_nanos() as u64,
                );
                bump(
                    &c.worker_ns,
                    woke.saturating_duration_since(turn_start).as_nanos() as u64,
                );
                turn_start = woke;
            }
            if self.shared.stop.load(Relaxed) {
                break;
            }
            for ev in events.iter() {
                if ev.token() == WAKER {
                    continue;
                }
                if ev.token() == TIMER {
                    self.timer.clear();
                    self.armed = None;
                    continue;
                }
                let key = ev.token().0;
                let Some(conn) = self.conns.slab.get(key) else {
                    continue;
                };
                match conn.state {
                    State::Connecting => {
                        if ev.is_writable() || ev.is_error() || ev.is_write_closed() {
                            self.on_connected(key);
                        }
                        // A server that speaks first (a push, a banner) may
                        // have sent already: this event is the only edge
                        // those bytes make.
                        let up = self
                            .conns
                            .slab
                            .get(key)
                            .is_some_and(|c| c.state != State::Connecting);
                        if up && (ev.is_readable() || ev.is_read_closed()) {
                            self.on_readable(key, ev.is_read_closed());
                        }
                    }
                    State::Handshaking | State::Probing | State::Held => {
                        if ev.is_writable() && conn.has(Flags::BLOCKED) {
                            self.on_writable(key);
                        }
                        if self.conns.slab.contains(key)
                            && (ev.is_readable() || ev.is_read_closed() || ev.is_error())
                        {
                            self.on_readable(key, ev.is_read_closed() || ev.is_error());
                        }
                    }
                }
            }
            self.read_on();
            self.pq_fill();
            self.flush_dirty();
        }
        self.finish()
    }

    /// Draining until `until`: true when the worker is done, because
    /// nothing is in flight or waiting to be sent and no query that crossed
    /// a server's close waits to be sent again, or because time is up. (A
    /// walk over the connections: at most every 10 ms.)
    fn drained(&mut self, now: Instant, until: Instant) -> bool {
        if now >= until {
            // What came due by now times out first (a query sent just
            // before the end has its deadline at `until`).
            self.expire(now);
            return true;
        }
        let recent = self
            .drain_looked
            .is_some_and(|t| now.duration_since(t) < Duration::from_millis(10));
        if recent {
            return false;
        }
        self.drain_looked = Some(now);
        let orphans = self.mode.traffic().is_some_and(|t| !t.orphans.is_empty());
        let waiting = (self.sc.reconnect || self.sc.replace_closed) && orphans;
        !waiting && self.conns.slab.iter().all(|(_, c)| c.flight.idle())
    }

    fn finish(mut self) -> io::Result<Finished> {
        if let Some(bye) = self.mode.push().and_then(PushRx::farewell) {
            // UDP subscribers leave (the server stops at once instead of
            // after its --udp-idle).
            self.push_say(bye, true);
        }
        if let Some(p) = self.mode.push_mut() {
            // Every stream's tail is counted.
            let end_ns = crate::sys::timer::monotonic_ns();
            for (key, _) in self
                .conns
                .slab
                .iter()
                .filter(|(_, c)| c.state != State::Connecting)
            {
                p.close(key, end_ns, false, &self.counters);
            }
            p.end(end_ns, &self.counters);
        }
        // Due, never sent: no connection came for them (tcp-per-query's
        // waited for a free slot to the end).
        let waiting = self.mode.traffic().map_or(0, |t| {
            t.orphans.len() + t.per_query.as_ref().map_or(0, |pq| pq.wait.len())
        });
        bump(&self.q.errors[E_NO_CONNECTION], waiting as u64);
        // The end of the run: close everything we hold, cleanly (FIN).
        let mut held = 0;
        let mut in_flight = 0;
        // (Taken out first: each is then counted by the worker's one
        // end-of-connection bookkeeping.)
        let ended: Vec<_> = self.conns.slab.drain().collect();
        for c in ended {
            // Due, never sent: the connection's socket or window stayed
            // full to the end.
            bump(&self.q.errors[E_NOT_SENT], c.flight.waiting.len() as u64);
            // (One no query was sent on yet, a replacement opened in the
            // last moments of a churning run, is idle: it says nothing.)
            self.conns.count_verification_at_end(&c, false);
            if c.state != State::Connecting {
                held += 1;
                in_flight += c.live();
                self.shared.closed();
            } else {
                bump(&self.counters.unresolved, 1);
            }
        }
        bump(&self.counters.closed, held);
        let d = self.conns.dial;
        let t = match self.mode {
            Mode::Traffic(t) => t,
            mode => {
                let mut hists = Histograms {
                    connect_time: d.connect_time,
                    connect_syscall: d.connect_syscall,
                    tls_handshake: d.tls_handshake,
                    ..Histograms::default()
                };
                if let Mode::Push(p) = mode {
                    (hists.push_gap, hists.push_jitter, hists.push_delay) =
                        (p.gap, p.jitter, p.delay);
                }
                return Ok(Finished {
                    hists,
                    statuses: StatusCounts::default(),
                    in_flight: 0,
                });
            }
        };
        let m = t.rec.finish();
        Ok(Finished {
            hists: Histograms {
                connect_time: d.connect_time,
                connect_syscall: d.connect_syscall,
                tls_handshake: d.tls_handshake,
                response_time: m.response_time,
                service_time: m.service_time,
                send_lag: m.send_lag,
                loop_lag: m.loop_lag,
                ..Histograms::default()
            },
            statuses: m.statuses,
            in_flight,
        })
    }

    /// The earliest instant something is due.
    fn next_wakeup(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut consider = |i: Instant| t = Some(t.map_or(i, |t| t.min(i)));
        self.conns.dial.wakeup(self.start, &self.sc, &mut consider);
        if let Some(at) = self.mode.push().and_then(PushRx::wakeup) {
            consider(at);
        }
        if self.sc.connections_schedule.is_some() || self.shared.conn_level.load(Relaxed) > 0 {
            // The level moves: look again every 10 ms.
            consider(Instant::now() + Duration::from_millis(10));
        }
        if let Some(tr) = self.mode.traffic() {
            let started = tr.wakeup(|at| consider(self.at(at)));
            if !started && self.shared.traffic_at.load(Relaxed) > 0 {
                consider(Instant::now());
            }
        }
        t
    }

    /// Connect timeouts, probe timeouts, lifetimes, query timeouts.
    fn expire(&mut self, now: Instant) {
        while let Some(key) = self.conns.dial.connect_expired(now, &self.conns.slab) {
            self.end(key, End::ConnectTimedOut);
        }
        while let Some((key, state)) = self.conns.dial.probe_expired(now, &self.conns.slab) {
            if state == State::Handshaking {
                let secs = self.sc.connect_timeout_s;
                self.counters
                    .tls_failed(|| format!("{} {secs}s", crate::metrics::TLS_TIMED_OUT));
                self.end(key, End::TlsFailed);
            } else {
                // Established but unverified: kept, not failed.
                bump(&self.counters.unverified, 1);
                let initial = self.conns.slab[key].initial();
                self.held(key);
                self.conns.dial.resolved(initial);
            }
        }
        while let Some(key) = self.conns.dial.life_expired(now, &self.conns.slab) {
            self.lifetime_over(key);
        }
        self.expire_queries(self.ns(now));
    }

    /// UDP push: says again the subscriptions that have had no message
    /// yet (every second) and all of them (every
    /// [`KEEPALIVE`](super::push::KEEPALIVE)).
    fn push_keepalive(&mut self, now: Instant) {
        if let Some(all) = self.mode.push_mut().and_then(|p| p.keepalive(now)) {
            self.push_say(super::push::SUBSCRIBE, all);
        }
    }

    /// UDP push: the held connections send `what`: all of them, or (not
    /// `all`) those that have had no message yet.
    fn push_say(&mut self, what: &[u8], all: bool) {
        let Some(p) = self.mode.push() else {
            return;
        };
        let keys: Vec<usize> = self
            .conns
            .slab
            .iter()
            .filter(|&(k, c)| c.state == State::Held && (all || p.waiting(k)))
            .map(|(k, _)| k)
            .collect();
        for key in keys {
            self.write(key, what);
        }
        self.flush_dirty();
    }
}
