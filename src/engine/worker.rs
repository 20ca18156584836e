//! One client worker: a mio loop that opens its share of the connections on
//! an absolute schedule, verifies each, holds them, sends its share of the
//! queries and measures every response; every connection attempt ends in
//! exactly one bucket.
//!
//! The worker is the loop, the timer, the run's shared flags and the
//! routing of each event to the part that owns it; the parts each own
//! their state and take the others they act on as arguments:
//! [`Conns`] the connections, their [`Dialer`] (the ramp, levels,
//! reconnect debt and connection deadlines) and their one end;
//! [`Handshake`] the transport ([`ClientTransport`], chosen once) and a connection's way
//! to held (connected, TLS, the probe); [`Io`] the reads (scratch buffer,
//! TLS plaintext, framing); [`Outbox`] the writes (gathered over a loop
//! turn, one flush per connection); [`Workload`] what the connections are
//! for (held, traffic or push, chosen once), with the traffic's own state
//! and decisions ([`TrafficState`]) and the push streams' ([`PushRx`]).
//! Below them, [`Link`](super::transport::link::Link) is a connection's socket,
//! [`Flight`](super::inflight::Flight) its queries in flight,
//! [`Recorder`](super::recorder::Recorder) what is measured. The files
//! import each other one way: connections ← outbox ← traffic ← opening ←
//! io ← worker. An event flows link → codec → in-flight table → recorder
//! → pacing, which says what is due next.
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

use super::conn::{ConnEnd, Flags, Next, State};
use super::connections::{Conns, EndRules};
use super::dialer::Dialer;
use super::handshake::Handshake;
use super::io::Io;
use super::outbox::Outbox;
use super::proto::Codec;
use super::push::PushRx;
use super::transport::ClientTransport;
use super::workload::{default_probe, TrafficSetup, TrafficState, Workload};
use crate::domain::Transport;
use crate::metrics::{
    bump, ConnCounters, Histograms, QueryCounters, Shared, StatusCounts, E_NOT_SENT,
    E_NO_CONNECTION,
};
use crate::scenario::Scenario;
use crate::sys::signals::Reason;
use crate::sys::timer::Timer;

pub const WAKER: Token = Token(usize::MAX);
const TIMER: Token = Token(usize::MAX - 1);

/// How long a loop turn sends due queries before it reads answers and
/// times out queries again (see [`TrafficState::due`]). A worker that keeps up
/// never comes near it: its turns stay short however high its rate,
/// since each sends what came due during the last. One behind its
/// schedule would otherwise make each turn longer than the last, its
/// answers unread and the end of the traffic unseen until the turn ends.
/// Checked once every [`DUE_CHUNK`] queries.
const SENDING_PER_TURN: Duration = Duration::from_millis(50);
const DUE_CHUNK: u32 = 1024;

use super::transport::TlsClient;

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
    /// Where the worker hands its figures back, with its id, before it
    /// closes its connections (see `Worker::finish`).
    pub handed: mpsc::Sender<(usize, Finished)>,
}

/// What a worker hands back when it stops.
#[derive(Default)]
pub struct Finished {
    pub hists: Histograms,
    pub statuses: StatusCounts,
    /// Queries still unanswered when the run ended.
    pub in_flight: u64,
}

pub struct Worker {
    id: usize,
    /// Where [`Worker::finish`] hands the figures back.
    handed: mpsc::Sender<(usize, Finished)>,
    /// Precise wake-ups (epoll's own timeout is in whole milliseconds).
    timer: Timer,
    armed: Option<Instant>,
    sc: Arc<Scenario>,
    poll: Poll,
    /// The connections, their dialer and their one way out.
    conns: Conns,
    /// Holding, traffic or push: decided at start.
    mode: Workload,
    /// The transport and a connection's way to held.
    open: Handshake,
    /// Bytes in.
    io: Io,
    /// Bytes out.
    out: Outbox,
    counters: Arc<ConnCounters>,
    q: Arc<QueryCounters>,
    shared: Arc<Shared>,
    notify: mpsc::Sender<Reason>,
    /// The run is draining (the traffic has ended; [`TrafficState`] is told so
    /// once, when this is set): the worker reads until nothing is in
    /// flight or this instant passes (--drain).
    drain_until: Option<Instant>,
    /// When the drain last looked for queries in flight.
    drain_looked: Option<Instant>,
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
        let net = ClientTransport::new(&s.scenario, s.tls);
        let mode = match (&s.scenario.traffic, &s.scenario.push) {
            (Some(t), _) => Workload::Traffic(TrafficState::new(TrafficSetup {
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
            (None, Some(p)) => Workload::Push(PushRx::new(&s.scenario, p)),
            (None, None) => Workload::Hold,
        };
        let timer = Timer::new()?;
        s.poll.registry().register(
            &mut mio::unix::SourceFd(&timer.as_raw_fd()),
            TIMER,
            Interest::READABLE,
        )?;
        let probe = Codec::new(
            s.scenario.probe.as_ref().unwrap_or(&default_probe()),
            &s.hosts,
            net.is_udp(),
        );
        Ok(Worker {
            id: s.id,
            handed: s.handed,
            timer,
            armed: None,
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
            mode,
            io: Io::new(&net, s.queries.clone()),
            out: Outbox::new(s.queries.clone()),
            open: Handshake::new(net, probe, s.scenario.clone(), &s.hosts, (id, w)),
            counters: s.counters,
            q: s.queries,
            shared: s.shared,
            notify: s.notify,
            drain_until: None,
            drain_looked: None,
            sc: s.scenario,
        })
    }

    /// Creates and binds every socket this worker will connect (--preallocate).
    pub fn preallocate(&mut self) -> Result<(), i32> {
        for j in 0..self.conns.dial.ramp_attempts() {
            let (target, source) = self.conns.dial.endpoints(self.conns.dial.ramp_seq(j));
            let made = self.open.net.prepare(target, source)?;
            self.conns.dial.preallocated(made);
        }
        Ok(())
    }

    /// The instant the schedule counts from.
    pub fn set_start(&mut self, start: Instant) {
        self.conns.set_start(start);
    }

    /// Tells the main thread.
    fn say(&self, r: Reason) {
        let _ = self.notify.send(r);
    }

    pub fn run(mut self) -> io::Result<Finished> {
        let mut events = Events::with_capacity(1024);
        self.conns.dial.begin();
        let mut turn_start = Instant::now();
        loop {
            let now = Instant::now();
            if self.drain_until.is_none() && self.shared.drain.load(Relaxed) {
                let drain = self.sc.drain_s();
                self.drain_until = Some(now + Duration::from_secs_f64(drain));
                self.end_traffic(now);
            }
            if self.shared.ramp_stop.load(Relaxed) {
                self.conns.dial.stop_ramp();
            }
            if let Some(until) = self.drain_until {
                if self.drained(now, until) && !self.ws_goodbye(now, until) {
                    break;
                }
            } else {
                let registry = self.poll.registry();
                let (conns, mode, out) = (&mut self.conns, &mut self.mode, &mut self.out);
                self.open.follow_level(now, conns, mode, out, registry);
            }
            // (Reconnects go on while draining: a query that crossed the
            // server's close is sent again on the next connection.)
            let registry = self.poll.registry();
            let (conns, mode, out) = (&mut self.conns, &mut self.mode, &mut self.out);
            self.open.start_due(now, conns, mode, out, registry);
            self.expire(now);
            self.conns.dial.shrink();
            self.traffic_due(now);
            self.push_keepalive(now);
            self.pq_fill();
            self.out.flush_dirty(&mut self.conns, &mut self.mode);
            let wakeup = match self.drain_until {
                // Draining: look again at least every 10 ms.
                Some(until) => Some(
                    self.next_wakeup()
                        .unwrap_or(until)
                        .min(until)
                        .min(now + Duration::from_millis(10)),
                ),
                None => self.next_wakeup(),
            };
            if let Some(t) = self.mode.traffic_mut() {
                if t.quota_done(&self.conns) {
                    self.say(Reason::QueriesDone);
                }
            }
            let timeout = match wakeup {
                // Connections left unread: look at the events, then read on.
                _ if self.io.unread() => Some(Duration::ZERO),
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
                    // (Not read: arming it again resets its expiry count,
                    // and each expiry is a new edge for epoll; a read per
                    // wake-up is a syscall per paced query.)
                    self.armed = None;
                    continue;
                }
                let key = ev.token().0;
                let Some(conn) = self.conns.get(key) else {
                    continue;
                };
                let (state, blocked) = (conn.state, conn.has(Flags::BLOCKED));
                let (conns, mode, out) = (&mut self.conns, &mut self.mode, &mut self.out);
                match state {
                    State::Connecting => {
                        if ev.is_writable() || ev.is_error() || ev.is_write_closed() {
                            self.open.on_connected(key, conns, mode, out);
                        }
                        // A server that speaks first (a push, a banner) may
                        // have sent already: this event is the only edge
                        // those bytes make.
                        let up = conns.get(key).is_some_and(|c| c.state != State::Connecting);
                        if up && (ev.is_readable() || ev.is_read_closed()) {
                            let closing = ev.is_read_closed();
                            self.io
                                .on_readable(key, closing, conns, mode, out, &self.open);
                        }
                    }
                    State::Handshaking | State::Probing | State::Upgrading | State::Held => {
                        let next = if ev.is_writable() && blocked {
                            self.io.on_writable(key, conns, mode, out)
                        } else {
                            Next::Open
                        };
                        if next.is_open()
                            && (ev.is_readable() || ev.is_read_closed() || ev.is_error())
                        {
                            let closing = ev.is_read_closed() || ev.is_error();
                            self.io
                                .on_readable(key, closing, conns, mode, out, &self.open);
                        }
                    }
                }
            }
            let (conns, mode, out) = (&mut self.conns, &mut self.mode, &mut self.out);
            self.io.read_on(conns, mode, out, &self.open);
            self.pq_fill();
            self.out.flush_dirty(&mut self.conns, &mut self.mode);
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
        let orphans = self.mode.traffic().is_some_and(TrafficState::has_orphans);
        let waiting = (self.sc.reconnect || self.sc.replace_closed) && orphans;
        !waiting && self.conns.iter().all(|(_, c)| c.flight.idle())
    }

    /// WebSocket, the traffic drained: the close handshake, waited for
    /// until `until`. True while it goes on.
    fn ws_goodbye(&mut self, now: Instant, until: Instant) -> bool {
        if self.open.ws.is_none() {
            return false;
        }
        let (conns, mode, out) = (&mut self.conns, &mut self.mode, &mut self.out);
        let started = self.io.goodbye(conns, mode, out);
        now < until && (started || !self.io.goodbye_done(conns))
    }

    fn finish(mut self) -> io::Result<Finished> {
        // (--drain 0, or a stop before the traffic's end: no drain counted
        // them.)
        let now_ns = self.conns.ns(Instant::now());
        self.count_behind(now_ns);
        if self.open.ws.is_some() {
            // (A run stopped without its drain, a second Ctrl-C: the close
            // goes out with the FIN.)
            let (conns, mode, out) = (&mut self.conns, &mut self.mode, &mut self.out);
            self.io.goodbye(conns, mode, out);
        }
        if let Some(bye) = self.mode.push().and_then(PushRx::farewell) {
            // UDP subscribers leave (the server stops at once instead of
            // after its --udp-idle).
            self.push_say(bye, true);
        }
        if self.mode.is_push() {
            // What came before the end and waits in the sockets is read
            // first: a worker that runs late at the end (a loaded host)
            // would otherwise count those messages lost.
            for key in self.conns.held_keys() {
                if self.conns.contains(key) {
                    let (conns, mode, out) = (&mut self.conns, &mut self.mode, &mut self.out);
                    self.io
                        .on_readable(key, false, conns, mode, out, &self.open);
                }
            }
        }
        if let Some(p) = self.mode.push_mut() {
            // Every stream's tail is counted.
            let end_ns = crate::sys::timer::monotonic_ns();
            for (key, _) in self
                .conns
                .iter()
                .filter(|(_, c)| c.state != State::Connecting)
            {
                p.close(key, end_ns, false, &self.counters);
            }
            p.end(end_ns, &self.counters);
        }
        // Due, never sent: no connection came for them (tcp-per-query's
        // waited for a free slot to the end).
        let waiting = self.mode.traffic().map_or(0, TrafficState::never_connected);
        bump(&self.q.errors[E_NO_CONNECTION], waiting as u64);
        // The end of the run: close everything we hold, cleanly (FIN).
        let mut held = 0;
        let mut in_flight = 0;
        // (Taken out first: each is then counted by the worker's one
        // end-of-connection bookkeeping.)
        let ended = self.conns.take_all();
        for c in &ended {
            // Due, never sent: the connection's socket or window stayed
            // full to the end.
            bump(&self.q.errors[E_NOT_SENT], c.flight.waiting.len() as u64);
            // (One no query was sent on yet, a replacement opened in the
            // last moments of a churning run, is idle: it says nothing.)
            self.conns.count_verification_at_end(c, false);
            if c.state != State::Connecting {
                held += 1;
                in_flight += c.live();
                self.shared.closed();
            } else {
                bump(&self.counters.unresolved, 1);
            }
        }
        bump(&self.counters.closed, held);
        self.conns.dial.all_ended();
        let d = self.conns.dial.into_times();
        let (handed, id) = (self.handed, self.id);
        let figures = match self.mode {
            Workload::Traffic(t) => {
                let m = t.finish();
                Finished {
                    hists: Histograms {
                        connect_time: d.connect_time,
                        connect_syscall: d.connect_syscall,
                        tls_handshake: d.tls_handshake,
                        ws_handshake: d.ws_handshake,
                        response_time: m.response_time,
                        service_time: m.service_time,
                        send_lag: m.send_lag,
                        loop_lag: m.loop_lag,
                        late_time: m.late_time,
                        ..Histograms::default()
                    },
                    statuses: m.statuses,
                    in_flight,
                }
            }
            mode => {
                let mut hists = Histograms {
                    connect_time: d.connect_time,
                    connect_syscall: d.connect_syscall,
                    tls_handshake: d.tls_handshake,
                    ws_handshake: d.ws_handshake,
                    ..Histograms::default()
                };
                if let Workload::Push(p) = mode {
                    (hists.push_gap, hists.push_jitter, hists.push_delay) =
                        (p.gap, p.jitter, p.delay);
                }
                Finished {
                    hists,
                    statuses: StatusCounts::default(),
                    in_flight: 0,
                }
            }
        };
        // Handed back before the connections close: closing is not
        // measured, and its time is the whole host's (a million
        // connections closing together on two cores can take longer than
        // the grace). A worker past its stop deadline then leaves only its
        // closing behind, not its statuses and histograms (see
        // `Workers::collect`).
        let rest = match handed.send((id, figures)) {
            Ok(()) => Finished::default(),
            Err(mpsc::SendError((_, figures))) => figures,
        };
        drop(ended);
        Ok(rest)
    }

    /// The earliest instant something is due.
    fn next_wakeup(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut consider = |i: Instant| t = Some(t.map_or(i, |t| t.min(i)));
        let start = self.conns.start;
        self.conns.dial.wakeup(start, &self.sc, &mut consider);
        if let Some(at) = self.mode.push().and_then(PushRx::wakeup) {
            consider(at);
        }
        if self.sc.connections_schedule.is_some() || self.shared.conn_level.load(Relaxed) > 0 {
            // The level moves: look again every 10 ms.
            consider(Instant::now() + Duration::from_millis(10));
        }
        if let Some(tr) = self.mode.traffic() {
            let started = tr.wakeup(|at| consider(start + Duration::from_nanos(at)));
            if !started && self.shared.traffic_at.load(Relaxed) > 0 {
                consider(Instant::now());
            }
        }
        t
    }

    /// Connect timeouts, probe timeouts, lifetimes, query timeouts.
    fn expire(&mut self, now: Instant) {
        let (conns, mode, out) = (&mut self.conns, &mut self.mode, &mut self.out);
        while let Some(key) = conns.connect_expired(now) {
            conns.end(key, ConnEnd::ConnectTimedOut, mode.as_mut());
        }
        while let Some((key, state)) = conns.probe_expired(now) {
            if state == State::Upgrading {
                let secs = self.sc.connect_timeout_s;
                let what = format!("no answer to the WebSocket upgrade within {secs}s");
                self.open.ws_refused(key, None, what, conns, mode);
            } else if state == State::Handshaking {
                let secs = self.sc.connect_timeout_s;
                conns
                    .counters
                    .tls_failed(|| format!("{} {secs}s", crate::metrics::TLS_TIMED_OUT));
                conns.end(key, ConnEnd::TlsFailed, mode.as_mut());
            } else {
                // Established but unverified: kept, not failed.
                bump(&conns.counters.unverified, 1);
                let initial = conns[key].initial();
                self.open.held(key, conns, mode, out);
                conns.dial.resolved(initial);
            }
        }
        conns.age(now);
        while let Some(key) = conns.life_expired(now) {
            let why = match mode.traffic_mut() {
                Some(t) => t.lifetime_over(key, conns),
                None => Some(ConnEnd::Lifetime),
            };
            if let Some(why) = why {
                conns.end(key, why, mode.as_mut());
            }
        }
        if let Some(t) = mode.traffic_mut() {
            t.expire_queries(conns.ns(now), conns, out);
        }
    }

    /// Sends every query that is due; tcp-per-query's get their
    /// connections opened.
    fn traffic_due(&mut self, now: Instant) {
        let now_ns = self.conns.ns(now);
        let (conns, out) = (&mut self.conns, &mut self.out);
        let Some(t) = self.mode.traffic_mut() else {
            return;
        };
        let Some(started) = t.turn(now_ns, &self.shared, conns, out) else {
            return;
        };
        // (The clock is read once a chunk: the cap is coarse, its cost
        // nothing.)
        loop {
            let mut budget = DUE_CHUNK;
            while let Some(intended) = t.due(now_ns, started, conns, out, &mut budget) {
                self.open
                    .per_query(intended, conns, t, self.poll.registry());
            }
            if budget > 0 || now.elapsed() >= SENDING_PER_TURN {
                break;
            }
        }
        t.turn_end(now_ns, started, &self.shared);
    }

    /// The traffic is over (seen at `now`): one last turn sends what was
    /// due by then; what a worker behind its schedule still had not sent
    /// is counted (`behind_schedule`); from now on answers only.
    fn end_traffic(&mut self, now: Instant) {
        let now_ns = self.conns.ns(now);
        if let Some(t) = self.mode.traffic_mut() {
            t.last_turn(now_ns);
        }
        self.traffic_due(now);
        self.count_behind(now_ns);
        if let Some(t) = self.mode.traffic_mut() {
            t.drain();
        }
    }

    /// The queries due by `now_ns` that this worker, behind its schedule,
    /// never sent are counted (`behind_schedule`): at the end of the
    /// traffic, or at the stop of a run without a drain.
    fn count_behind(&mut self, now_ns: u64) {
        let conns = &self.conns;
        if let Some(t) = self.mode.traffic_mut().filter(|t| !t.is_draining()) {
            t.end_schedule(now_ns, |key, seq| {
                conns.get(key).is_some_and(|c| c.seq == seq)
            });
        }
    }

    /// tcp-per-query: opens connections for waiting queries while slots
    /// are free.
    #[inline]
    fn pq_fill(&mut self) {
        if let Some(t) = self.mode.traffic_mut() {
            self.open.pq_fill(&mut self.conns, t, self.poll.registry());
        }
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
            .iter()
            .filter(|&(k, c)| c.state == State::Held && (all || p.waiting(k)))
            .map(|(k, _)| k)
            .collect();
        for key in keys {
            self.out.write(&mut self.conns, key, what);
        }
        self.out.flush_dirty(&mut self.conns, &mut self.mode);
    }
}
