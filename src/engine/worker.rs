//! One client worker: a mio loop that opens its share of the connections on
//! an absolute schedule, verifies each, holds them, sends its share of the
//! queries and measures every response; every connection attempt ends in
//! exactly one bucket.
//!
//! Worker `w` of `W` owns connection attempts w, w+W, w+2W, ... Attempt i
//! is due at `start + ramp.due(i)`, so the workers together follow the
//! scenario's ramp without talking to each other; likewise each runs its own
//! arrival process for 1/W of the query rate. Timeouts (connect, probe,
//! query, lifetime) and intervals are constant per run, so each kind is a
//! FIFO of deadlines in start order: O(1) per event, no timer wheel. Entries
//! of connections that moved on are skipped lazily (they carry the attempt
//! number). Query timeouts keep one entry per connection with queries in
//! flight instead (see `deadlines`): an answer then costs nothing there.
//!
//! Times inside the worker are u64 nanoseconds since the run's start.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::{TcpStream, UdpSocket};
use mio::{Events, Interest, Poll, Token};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;
use slab::Slab;
use socket2::Socket;

use super::deadlines::{Deadlines, Entry};
use super::pacer::Pacer;
use super::proto::{Codec, Frame, Status};
use super::{connector, SecondReport};
use crate::domain::{Spread, Transport};
use crate::metrics::{
    bump, new_histogram, Bucket, ConnCounters, QueryCounters, Shared, StatusCounts, E_CONNECT,
    E_CONN_LOST, E_MALFORMED, E_MISMATCH, E_NO_CONNECTION, E_UNMATCHED,
};
use crate::scenario::{Model, Query, Scenario};
use crate::sys::signals::Reason;
use crate::sys::timer::Timer;

pub const WAKER: Token = Token(usize::MAX);
/// Connection attempts one loop turn starts at most (see `start_due`).
const CONNECTS_PER_TURN: u32 = 64;
const TIMER: Token = Token(usize::MAX - 1);
const NOT_ACTIVE: u32 = u32::MAX;
/// A query sent later than this after its intended time counts as late.
const LATE_NS: u64 = 1_000_000;
/// The RTT log is handed to its writer in chunks of this size.
const LOG_CHUNK: usize = 64 * 1024;
/// tcp-per-query, closed loop: a think-queue entry that starts a query on
/// a new connection.
const NEW_CONNECTION: usize = usize::MAX;
/// Datagrams per sendmmsg/recvmmsg call.
const BATCH: usize = 32;

/// The client's TLS settings, shared by the workers.
pub struct TlsClient {
    pub config: Arc<rustls::ClientConfig>,
    /// The server name of each target.
    pub names: Vec<rustls::pki_types::ServerName<'static>>,
}

/// A connection's socket.
enum Sock {
    Tcp(TcpStream),
    /// Connected: a "connection" of --transport udp.
    Udp(UdpSocket),
}

impl Sock {
    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Sock::Tcp(s) => s,
            Sock::Udp(s) => s,
        }
    }

    fn take_error(&self) -> io::Result<Option<io::Error>> {
        match self {
            Sock::Tcp(s) => s.take_error(),
            Sock::Udp(s) => s.take_error(),
        }
    }

    fn peer_addr(&self) -> io::Result<std::net::SocketAddr> {
        match self {
            Sock::Tcp(s) => s.peer_addr(),
            Sock::Udp(s) => s.peer_addr(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Connecting,
    /// TCP established; the TLS handshake is under way.
    Handshaking,
    /// Established; the probe was sent, its answer not seen yet.
    Probing,
    /// Established (and verified, or not verifiable in time).
    Held,
}

/// A query waiting for its response.
#[derive(Debug, Clone, Copy)]
struct Outstanding {
    key: u64,
    intended: u64,
    sent: u64,
    timed_out: bool,
    /// DNS: the slot of the query's type, where its RCODE is counted
    /// (fits in the padding: the entry stays 32 bytes).
    qtype_slot: u8,
}

/// One connection. Idle, it holds no buffer: the deques and vectors
/// allocate only while queries, partial frames or unsent bytes exist.
struct Conn {
    stream: Sock,
    /// --transport tls: the session (boxed: several KiB).
    tls: Option<Box<rustls::ClientConnection>>,
    /// The server said it closes after its last response (HTTP
    /// `Connection: close`): no more queries on this one.
    peer_closing: bool,
    state: State,
    /// The attempt number (unique in the run).
    seq: u64,
    /// Connect start, then the instant it was established.
    since: Instant,
    /// Some bytes came back from the server.
    got_data: bool,
    /// One of the ramp's attempts (not a replacement).
    initial: bool,
    /// The server answered its probe with a refusal: a close that follows
    /// is that refusal's, not a failure of the server's accept.
    rejected: bool,
    /// With traffic and --verify: still waiting for the first answer,
    /// which verifies the connection (no separate probe).
    unproven: bool,
    target: u32,
    active_pos: u32,
    /// Queries encoded on this connection (their numbers).
    queries: u64,
    /// Queries answered or timed out.
    done: u64,
    /// Timed-out queries still in `outstanding` (a late answer is absorbed).
    ghosts: u32,
    pending_in: Vec<u8>,
    /// Bytes to write: queries encoded this loop turn (written together at
    /// its end, one syscall for many queries), or what the socket did not
    /// take.
    pending_out: Vec<u8>,
    /// In the worker's list of connections to flush.
    dirty: bool,
    /// The socket refused bytes: wait for it to become writable.
    blocked: bool,
    outstanding: VecDeque<Outstanding>,
    /// Its entry in the worker's deadlines (or NO_DEADLINE): set whenever
    /// a query is in flight, at or before the oldest one's deadline. (A
    /// plain u32: an Option would add 8 bytes to every connection.)
    deadline: u32,
    /// Intended times of due queries not sent yet (window full or socket
    /// busy): they keep their place and their intended time.
    waiting: VecDeque<u64>,
}

/// `Conn::deadline` when it has none.
const NO_DEADLINE: u32 = u32::MAX;

impl Conn {
    /// Takes its deadline entry's id, leaving none.
    fn take_deadline(&mut self) -> Option<u32> {
        let id = std::mem::replace(&mut self.deadline, NO_DEADLINE);
        (id != NO_DEADLINE).then_some(id)
    }

    fn live(&self) -> u64 {
        self.outstanding.len() as u64 - u64::from(self.ghosts)
    }
}

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
    pub reports: mpsc::Sender<SecondReport>,
    pub rtt_log: Option<(mpsc::Sender<Vec<u8>>, u64)>,
    /// Targets as given, for HTTP Host headers.
    pub hosts: Vec<String>,
    pub tls: Option<Arc<TlsClient>>,
}

/// What a worker hands back when it stops.
pub struct Finished {
    pub connect_time: Histogram<u64>,
    /// Time inside connect() itself (the kernel's port search).
    pub connect_syscall: Histogram<u64>,
    pub tls_handshake: Histogram<u64>,
    pub response_time: Histogram<u64>,
    pub service_time: Histogram<u64>,
    pub send_lag: Histogram<u64>,
    /// How late the loop itself noticed due queries.
    pub loop_lag: Histogram<u64>,
    pub statuses: StatusCounts,
    /// Queries still unanswered when the run ended.
    pub in_flight: u64,
}

/// The query side of a worker, present when the scenario has traffic.
struct Traffic {
    codec: Codec,
    window: u64,
    /// Queries a connection sends at most: the lower of --messages and
    /// --max-queries-per-conn (worked out once, not per query).
    cap: Option<u64>,
    timeout_ns: u64,
    /// When traffic started (ns), once it has.
    started: Option<u64>,
    pacer: Option<Pacer>,
    spread: Spread,
    rr: usize,
    rng: Pcg64Mcg,
    active: Vec<usize>,
    interval_q: VecDeque<(usize, u64, u64)>,
    think_q: VecDeque<(usize, u64, u64)>,
    deadlines: Deadlines,
    /// Response times of the current second, at full precision: each
    /// answer is recorded once, here; each second is then added to
    /// `response_time` and, coarser, to its report.
    second_hist: Histogram<u32>,
    response_time: Histogram<u64>,
    /// Queries sent the instant they were due (closed loop: all of them),
    /// counted and added to `send_lag` at the end instead of one by one.
    on_time: u64,
    service_time: Histogram<u64>,
    send_lag: Histogram<u64>,
    loop_lag: Histogram<u64>,
    statuses: StatusCounts,
    /// The current second (since the run's start) and its figures.
    sec: u64,
    sec_report: SecondReport,
    reports: mpsc::Sender<SecondReport>,
    log: Option<RttLog>,
    /// The --control rate generation applied.
    rate_gen: u64,
    closed_loop: bool,
    /// This worker's part of --queries not sent yet (None: no such limit).
    quota: Option<u64>,
    /// It said it has done its part of --queries.
    quota_done: bool,
}

impl Traffic {
    /// Ends a second: its answers go into the run's histogram and, at the
    /// report's precision, into its report (the buckets nest, so this is
    /// what recording there directly would give).
    fn fold_second(&mut self, report: &mut SecondReport) {
        if self.second_hist.is_empty() {
            return;
        }
        for v in self.second_hist.iter_recorded() {
            let (value, n) = (v.value_iterated_to(), u64::from(v.count_at_value()));
            // Same bounds and precision: the same bucket, exactly.
            self.response_time.saturating_record_n(value, n);
            report.hist.saturating_record_n(value, n);
        }
        self.second_hist.reset();
    }
}

struct RttLog {
    tx: mpsc::Sender<Vec<u8>>,
    buf: Vec<u8>,
    /// Unix time of the run's start, in µs.
    epoch_unix_us: u64,
    proto: &'static str,
}

pub struct Worker {
    /// Precise wake-ups (epoll's own timeout is in whole milliseconds).
    timer: Timer,
    armed: Option<Instant>,
    id: u64,
    nworkers: u64,
    sc: Arc<Scenario>,
    poll: Poll,
    conns: Slab<Conn>,
    counters: Arc<ConnCounters>,
    q: Arc<QueryCounters>,
    shared: Arc<Shared>,
    start: Instant,
    notify: mpsc::Sender<Reason>,
    connect_time: Histogram<u64>,
    connect_syscall: Histogram<u64>,
    tls_handshake: Histogram<u64>,
    transport: Transport,
    tls: Option<Arc<TlsClient>>,
    /// Plaintext out of TLS sessions.
    plain: Vec<u8>,
    /// tcp-per-query: intended times of queries waiting for a free
    /// connection slot, and how many connections this worker may have open.
    pq_wait: VecDeque<u64>,
    pq_share: u64,
    /// While a read's bytes are processed: when it returned (ns).
    read_at: Option<u64>,
    /// Intended times of queries that came due while no connection could
    /// take them but one was on its way (recycling, reconnects): the next
    /// connection ready takes them.
    orphans: VecDeque<u64>,
    /// UDP: bytes per datagram slot in a recvmmsg batch.
    udp_slot: usize,
    /// The codec probes are built with when there is no traffic.
    probe_codec: Codec,
    traffic: Option<Traffic>,
    next: u64,
    initial_total: u64,
    reconnects_owed: u64,
    reconnects_made: u64,
    inflight: u64,
    max_inflight: u64,
    ramp_left: u64,
    /// Attempts of the ramp not yet established or failed.
    est_left: u64,
    connect_q: VecDeque<(usize, u64, Instant)>,
    probe_q: VecDeque<(usize, u64, Instant)>,
    life_q: VecDeque<(usize, u64, Instant)>,
    open_q: VecDeque<(usize, u64)>,
    sched_made: u64,
    tokens: f64,
    refilled: Instant,
    prealloc: VecDeque<Socket>,
    scratch: Vec<u8>,
    out: Vec<u8>,
    /// Connections with bytes to write at the end of this loop turn.
    dirty: Vec<usize>,
    /// Queries are sparse per connection (--interval, or none): free a
    /// connection's query queue whenever it empties.
    sparse: bool,
    /// The traffic has ended: no new query is due (what was due and waits
    /// for its connection's window still leaves); the worker reads until
    /// nothing is in flight or this instant passes (--drain).
    draining: Option<Instant>,
    /// When the drain last looked for queries in flight.
    drain_looked: Option<Instant>,
    /// Closed loop: every connection always has queries in flight, so it
    /// keeps its output buffer between writes.
    busy: bool,
}

fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn us(ns: u64) -> u64 {
    (ns / 1000).max(1)
}

impl Worker {
    pub fn new(s: Setup) -> io::Result<Worker> {
        let w = s.scenario.workers as u64;
        let id = s.id as u64;
        let n = s.scenario.connections;
        let share = n / w + u64::from(id < n % w);
        let transport = s.scenario.transport;
        let initial_total =
            if s.scenario.connections_schedule.is_some() || transport == Transport::TcpPerQuery {
                // The schedule decides, or each query opens its own: there
                // is no ramp of fixed attempts.
                0
            } else {
                share
            };
        let udp_slot = match s.scenario.traffic.as_ref().map(|t| &t.query) {
            Some(Query::Echo { size, .. }) => (*size).max(2048),
            Some(Query::Raw { message, .. }) => (message.len() * 2).max(2048),
            _ => 2048,
        };
        let max_inflight = s.scenario.max_inflight_connects.div_ceil(w).max(1);
        s.counters.ramp_left.store(initial_total, Relaxed);
        let traffic = s.scenario.traffic.as_ref().map(|t| {
            let pacer = match &t.model {
                Model::OpenLoop {
                    phases, arrivals, ..
                } => Some(Pacer::new(
                    phases.clone(),
                    1.0 / w as f64,
                    *arrivals,
                    t.seed.wrapping_add(id.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                )),
                _ => None,
            };
            let spread = match &t.model {
                Model::OpenLoop { spread, .. } => *spread,
                _ => Spread::RoundRobin,
            };
            let highest = ((t.timeout_s * 2e6) as u64).max(1000);
            let hist = || Histogram::new_with_bounds(1, highest, 3).expect("valid bounds");
            let codec = Codec::new(&t.query, &s.hosts);
            // --queries is split like the pacer's rate: evenly over workers.
            let quota = t.queries.map(|q| q / w + u64::from(id < q % w));
            let statuses = StatusCounts {
                by_qtype: codec.qtypes().iter().map(|&q| (q, [0; 16])).collect(),
                ..StatusCounts::default()
            };
            Traffic {
                codec,
                window: t.window.unwrap_or(u64::MAX),
                cap: [t.messages, t.max_queries_per_conn]
                    .into_iter()
                    .flatten()
                    .min(),
                timeout_ns: (t.timeout_s * 1e9) as u64,
                started: None,
                pacer,
                spread,
                rr: 0,
                rng: Pcg64Mcg::seed_from_u64(t.seed ^ (id + 1)),
                active: Vec::new(),
                interval_q: VecDeque::new(),
                think_q: VecDeque::new(),
                deadlines: Deadlines::default(),
                // (u32 counts: a second's, half the memory.)
                second_hist: Histogram::new_with_bounds(1, highest, 3).expect("valid bounds"),
                on_time: 0,
                response_time: hist(),
                service_time: hist(),
                send_lag: new_histogram(),
                loop_lag: new_histogram(),
                statuses,
                sec: 0,
                sec_report: SecondReport::new(0),
                reports: s.reports.clone(),
                log: s.rtt_log.as_ref().map(|(tx, epoch)| RttLog {
                    tx: tx.clone(),
                    buf: Vec::with_capacity(LOG_CHUNK + 256),
                    epoch_unix_us: *epoch,
                    proto: proto_name(&t.query),
                }),
                rate_gen: 0,
                closed_loop: matches!(t.model, Model::ClosedLoop { .. }),
                quota,
                quota_done: false,
            }
        });
        let timer = Timer::new()?;
        s.poll.registry().register(
            &mut mio::unix::SourceFd(&timer.as_raw_fd()),
            TIMER,
            Interest::READABLE,
        )?;
        Ok(Worker {
            timer,
            armed: None,
            id,
            nworkers: w,
            poll: s.poll,
            // Sized once: a slab that doubles as it fills keeps up to half
            // its entries empty, memory every held connection would pay for.
            conns: Slab::with_capacity(initial_total as usize),
            counters: s.counters,
            q: s.queries,
            shared: s.shared,
            start: s.start,
            notify: s.notify,
            connect_time: new_histogram(),
            connect_syscall: new_histogram(),
            tls_handshake: new_histogram(),
            transport,
            tls: s.tls,
            plain: Vec::new(),
            pq_wait: VecDeque::new(),
            orphans: VecDeque::new(),
            read_at: None,
            pq_share: share.max(1),
            udp_slot,
            probe_codec: Codec::new(
                s.scenario.probe.as_ref().unwrap_or(&Query::Dns {
                    qtype: wire::dns::rtype::A,
                    names: vec!["throng.probe".into()],
                    qtypes: Vec::new(),
                    edns: None,
                    dnssec_ok: false,
                }),
                &s.hosts,
            ),
            traffic,
            next: 0,
            initial_total,
            reconnects_owed: 0,
            reconnects_made: 0,
            inflight: 0,
            max_inflight,
            ramp_left: initial_total,
            est_left: initial_total,
            connect_q: VecDeque::new(),
            probe_q: VecDeque::new(),
            life_q: VecDeque::new(),
            open_q: VecDeque::new(),
            sched_made: 0,
            tokens: 1.0,
            refilled: s.start,
            prealloc: VecDeque::new(),
            scratch: vec![0; 64 * 1024],
            out: Vec::with_capacity(4096),
            dirty: Vec::new(),
            busy: matches!(
                s.scenario.traffic.as_ref().map(|t| &t.model),
                Some(Model::ClosedLoop { .. })
            ),
            sparse: !matches!(
                s.scenario.traffic.as_ref().map(|t| &t.model),
                Some(Model::OpenLoop { .. } | Model::ClosedLoop { .. })
            ),
            draining: None,
            drain_looked: None,
            sc: s.scenario,
        })
    }

    /// Creates and binds every socket this worker will connect (--preallocate).
    pub fn preallocate(&mut self) -> Result<(), i32> {
        for j in 0..self.initial_total {
            let (target, source) = self.sc.endpoints(j * self.nworkers + self.id);
            self.prealloc.push_back(connector::prepare(target, source)?);
        }
        Ok(())
    }

    /// The instant the schedule counts from.
    pub fn set_start(&mut self, start: Instant) {
        self.start = start;
        self.refilled = start;
    }

    fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.start).as_nanos() as u64
    }

    fn at(&self, ns: u64) -> Instant {
        self.start + Duration::from_nanos(ns)
    }

    pub fn run(mut self) -> io::Result<Finished> {
        let mut events = Events::with_capacity(1024);
        if self.ramp_left == 0 {
            let _ = self.notify.send(Reason::RampEstablished);
            let _ = self.notify.send(Reason::RampDone);
        }
        loop {
            let now = Instant::now();
            if self.draining.is_none() && self.shared.drain.load(Relaxed) {
                let drain = self.sc.traffic.as_ref().map_or(0.0, |t| t.drain_s);
                self.draining = Some(now + Duration::from_secs_f64(drain));
            }
            if let Some(until) = self.draining {
                // Done when nothing is in flight or waiting to be sent and
                // no query that crossed a server's close waits to be sent
                // again. (A walk over the connections: at most every 10 ms.)
                if now >= until {
                    // What came due by now times out first (a query sent
                    // just before the end has its deadline at `until`).
                    self.expire(now);
                    break;
                }
                let recent = self
                    .drain_looked
                    .is_some_and(|t| now.duration_since(t) < Duration::from_millis(10));
                if !recent {
                    self.drain_looked = Some(now);
                    let waiting = self.sc.reconnect && !self.orphans.is_empty();
                    let busy = || {
                        self.conns
                            .iter()
                            .any(|(_, c)| c.live() > 0 || !c.waiting.is_empty())
                    };
                    if !waiting && !busy() {
                        break;
                    }
                }
            } else {
                self.follow_level(now);
            }
            // (Reconnects go on while draining: a query that crossed the
            // server's close is sent again on the next connection.)
            self.start_due(now);
            self.expire(now);
            self.shrink_queues();
            self.traffic_due(now);
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
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
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
                let Some(conn) = self.conns.get(key) else {
                    continue;
                };
                match conn.state {
                    State::Connecting => {
                        if ev.is_writable() || ev.is_error() || ev.is_write_closed() {
                            self.on_connected(key);
                        }
                    }
                    State::Handshaking | State::Probing | State::Held => {
                        if ev.is_writable() && conn.blocked {
                            self.on_writable(key);
                        }
                        if self.conns.contains(key)
                            && (ev.is_readable() || ev.is_read_closed() || ev.is_error())
                        {
                            self.on_readable(key, ev.is_read_closed() || ev.is_error());
                        }
                    }
                }
            }
            self.pq_fill();
            self.flush_dirty();
        }
        self.finish()
    }

    fn finish(mut self) -> io::Result<Finished> {
        // Due, never sent: no connection came for them.
        bump(&self.q.errors[E_NO_CONNECTION], self.orphans.len() as u64);
        // The end of the run: close everything we hold, cleanly (FIN).
        let mut held = 0;
        let mut in_flight = 0;
        for c in self.conns.drain() {
            if c.unproven {
                // Established, never answered: not verified.
                bump(&self.counters.unverified, 1);
            }
            if c.state != State::Connecting {
                held += 1;
                in_flight += c.live();
                self.shared.closed();
            }
        }
        bump(&self.counters.closed, held);
        match self.traffic.take() {
            Some(mut t) => {
                let mut last = std::mem::replace(&mut t.sec_report, SecondReport::new(0));
                t.fold_second(&mut last);
                let _ = t.reports.send(last);
                let _ = t.send_lag.record_n(0, t.on_time);
                if let Some(log) = t.log.as_mut() {
                    let _ = log.tx.send(std::mem::take(&mut log.buf));
                }
                let response_time = t.response_time;
                Ok(Finished {
                    connect_time: self.connect_time,
                    connect_syscall: self.connect_syscall,
                    tls_handshake: self.tls_handshake,
                    service_time: if t.closed_loop {
                        response_time.clone()
                    } else {
                        t.service_time
                    },
                    response_time,
                    send_lag: t.send_lag,
                    loop_lag: t.loop_lag,
                    statuses: t.statuses,
                    in_flight,
                })
            }
            None => Ok(Finished {
                connect_time: self.connect_time,
                connect_syscall: self.connect_syscall,
                tls_handshake: self.tls_handshake,
                response_time: new_histogram(),
                service_time: new_histogram(),
                send_lag: new_histogram(),
                loop_lag: new_histogram(),
                statuses: StatusCounts::default(),
                in_flight: 0,
            }),
        }
    }

    // ---- connections -------------------------------------------------

    /// The number of open connections asked for now: by
    /// --connections-schedule, or by `connections N` on --control once the
    /// ramp is done.
    fn level(&self, now: Instant) -> Option<u64> {
        let asked = self.shared.conn_level.load(Relaxed);
        if asked > 0 && self.ramp_left == 0 {
            return Some(asked - 1);
        }
        let phases = self.sc.connections_schedule.as_ref()?;
        let t = now.saturating_duration_since(self.start).as_secs_f64();
        Some(crate::scenario::level_at(phases, t).round() as u64)
    }

    /// Opens connections (paced by the ramp's rate) while this worker holds
    /// fewer than its share of the level asked for, and closes its oldest
    /// while it holds more.
    fn follow_level(&mut self, now: Instant) {
        self.prune_open_q();
        let Some(total) = self.level(now) else {
            return;
        };
        let mine = total / self.nworkers + u64::from(self.id < total % self.nworkers);
        let rate = self.sc.ramp.rate() / self.nworkers as f64;
        let burst = (rate * 0.01).max(1.0);
        let dt = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + dt * rate).min(burst);
        self.refilled = now;
        let open = |w: &Worker| w.conns.len() as u64 + w.reconnects_owed;
        while open(self) < mine && self.tokens >= 1.0 && self.inflight < self.max_inflight {
            self.tokens -= 1.0;
            let seq = self.sc.connections + self.sched_made * self.nworkers + self.id;
            self.sched_made += 1;
            self.attempt(seq, false);
        }
        while open(self) > mine {
            if self.reconnects_owed > 0 {
                self.reconnects_owed -= 1;
                continue;
            }
            let Some((key, seq)) = self.open_q.pop_front() else {
                break;
            };
            if self.conns.get(key).is_some_and(|c| c.seq == seq) {
                self.close(key);
            }
        }
    }

    /// Starts the attempts that are due, within the in-flight cap, at most
    /// [`CONNECTS_PER_TURN`] per loop turn: an attempt's connect time ends
    /// when the loop sees it established, so a turn that started a thousand
    /// connects would add their whole cost to each of them. What is left is
    /// still due, and the next turn polls without waiting.
    fn start_due(&mut self, now: Instant) {
        let mut started = 0;
        while self.inflight < self.max_inflight && started < CONNECTS_PER_TURN {
            started += 1;
            if self.next < self.initial_total {
                let seq = self.next * self.nworkers + self.id;
                if self.start + self.sc.ramp.due(seq) > now {
                    break;
                }
                self.next += 1;
                self.attempt(seq, true);
            } else if self.reconnects_owed > 0 {
                self.reconnects_owed -= 1;
                let seq = self.sc.connections + self.reconnects_made * self.nworkers + self.id;
                self.reconnects_made += 1;
                self.attempt(seq, false);
            } else {
                break;
            }
        }
    }

    /// Starts connection attempt `seq`; its slab key once it is under way.
    fn attempt(&mut self, seq: u64, initial: bool) -> Option<usize> {
        bump(&self.counters.attempted, 1);
        let (target, source) = self.sc.endpoints(seq);
        let udp = self.transport == Transport::Udp;
        let sock = match self.prealloc.pop_front() {
            Some(s) if initial => Ok(s),
            _ if udp => connector::udp(target, source),
            _ => connector::prepare(target, source),
        };
        // Connect time counts from just before connect(), not from when
        // the attempt was due (the schedule's lag is the ramp's business).
        let now = Instant::now();
        let started = if udp {
            sock
        } else {
            let r = sock.and_then(|s| connector::start(&s, target).map(|()| s));
            // The kernel's port search happens inside this call: its time
            // tells the client's slowness from the server's.
            let took = now.elapsed().as_micros() as u64;
            self.connect_syscall.saturating_record(took.max(1));
            r
        };
        let sock = match started {
            Ok(s) => s,
            Err(errno) => {
                self.counters
                    .fail_errno(Bucket::of_connect_errno(errno), errno);
                self.settled(initial);
                self.resolved(initial);
                return None;
            }
        };
        let mut stream = if udp {
            Sock::Udp(UdpSocket::from_std(std::net::UdpSocket::from(sock)))
        } else {
            Sock::Tcp(TcpStream::from_std(std::net::TcpStream::from(sock)))
        };
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        if let Err(e) = self.poll.registry().register(
            stream.source(),
            Token(key),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            let errno = errno_of(&e);
            self.counters
                .fail_errno(Bucket::of_connect_errno(errno), errno);
            self.settled(initial);
            self.resolved(initial);
            return None;
        }
        entry.insert(Conn {
            stream,
            tls: None,
            peer_closing: false,
            state: State::Connecting,
            seq,
            since: now,
            got_data: false,
            rejected: false,
            initial,
            unproven: false,
            target: (seq % self.sc.targets.len() as u64) as u32,
            active_pos: NOT_ACTIVE,
            queries: 0,
            done: 0,
            ghosts: 0,
            pending_in: Vec::new(),
            pending_out: Vec::new(),
            dirty: false,
            blocked: false,
            outstanding: VecDeque::new(),
            deadline: NO_DEADLINE,
            waiting: VecDeque::new(),
        });
        self.inflight += 1;
        if udp {
            // Nothing to wait for: "connected" is only the peer address.
            self.on_connected(key);
            return self.conns.contains(key).then_some(key);
        }
        self.connect_q
            .push_back((key, seq, now + self.sc.connect_timeout()));
        Some(key)
    }

    /// An attempt of the ramp is established or failed: the ramp's own
    /// figure ends with the last (verification, which may take longer, has
    /// its own: [`Worker::resolved`]).
    fn settled(&mut self, initial: bool) {
        if !initial {
            return;
        }
        self.est_left -= 1;
        if self.est_left == 0 {
            let _ = self.notify.send(Reason::RampEstablished);
        }
    }

    /// An initial attempt ended: failed, or established (and, with the
    /// probe, verified or not in time). The ramp is one step closer to done.
    fn resolved(&mut self, initial: bool) {
        if !initial {
            return;
        }
        self.ramp_left -= 1;
        self.counters.ramp_left.store(self.ramp_left, Relaxed);
        if self.ramp_left == 0 {
            let _ = self.notify.send(Reason::RampDone);
        }
    }

    fn on_connected(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        let result = match conn.stream.take_error() {
            Ok(Some(e)) | Err(e) => Err(errno_of(&e)),
            Ok(None) => match conn.stream.peer_addr() {
                Ok(_) => Ok(()),
                // Not connected yet: a spurious wake-up; wait for the next.
                Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => return,
                Err(e) => Err(errno_of(&e)),
            },
        };
        let initial = conn.initial;
        self.inflight -= 1;
        let errno = match result {
            Err(errno) => errno,
            Ok(()) => {
                self.established(key);
                return;
            }
        };
        self.counters
            .fail_errno(Bucket::of_connect_errno(errno), errno);
        self.conns.remove(key);
        self.settled(initial);
        self.resolved(initial);
        self.pq_lost(0);
    }

    fn established(&mut self, key: usize) {
        let initial = self.conns[key].initial;
        self.settled(initial);
        let now = Instant::now();
        let conn = &mut self.conns[key];
        let us = now.duration_since(conn.since).as_micros() as u64;
        self.connect_time.saturating_record(us.max(1));
        bump(&self.counters.established, 1);
        self.shared.opened();
        if self.transport != Transport::TcpPerQuery {
            // (tcp-per-query keeps the connect start: its query counts
            // from there, connect included.)
            conn.since = now;
        }
        if self.sc.connections_schedule.is_some() || self.sc.control {
            self.open_q.push_back((key, conn.seq));
        }
        if let Some(life) = self.sc.lifetime() {
            self.life_q.push_back((key, conn.seq, now + life));
        }
        if let Some(tls) = self.tls.clone() {
            self.start_tls(key, &tls, now);
            return;
        }
        self.ready(key, false);
    }

    /// TCP is up: start the TLS handshake (its ClientHello goes out at the
    /// end of this loop turn; --connect-timeout bounds it).
    fn start_tls(&mut self, key: usize, tls: &TlsClient, now: Instant) {
        let conn = &mut self.conns[key];
        let name = tls.names[conn.target as usize % tls.names.len()].clone();
        match rustls::ClientConnection::new(tls.config.clone(), name) {
            Ok(mut c) => {
                // Queries are bounded by --window and sealed every turn; a
                // limit here would drop them silently.
                c.set_buffer_limit(None);
                conn.tls = Some(Box::new(c));
            }
            Err(e) => return self.tls_failed(key, &e),
        }
        conn.state = State::Handshaking;
        self.probe_q
            .push_back((key, conn.seq, now + self.sc.connect_timeout()));
        self.mark_dirty(key);
    }

    /// The TLS handshake is done: the server accepted, and it is verified.
    fn tls_ready(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        let took = conn.since.elapsed().as_micros() as u64;
        self.tls_handshake.saturating_record(took.max(1));
        let resumed = conn.tls.as_ref().and_then(|t| t.handshake_kind())
            == Some(rustls::HandshakeKind::Resumed);
        if resumed {
            bump(&self.counters.tls_resumed, 1);
        }
        conn.since = Instant::now();
        self.ready(key, true);
    }

    /// A TLS error ends the connection; the first one's words are kept.
    fn tls_failed(&mut self, key: usize, e: &dyn std::fmt::Display) {
        self.counters.tls_failed(|| e.to_string());
        let c = &self.conns[key];
        let pending = matches!(c.state, State::Handshaking | State::Probing);
        let initial = c.initial;
        self.drop_conn(key);
        if pending {
            self.resolved(initial);
        }
        if self.sc.reconnect {
            self.reconnects_owed += 1;
        }
    }

    /// The connection can carry queries: send the first message, then
    /// verify it (a probe, or the first query's answer) unless that is done.
    fn ready(&mut self, key: usize, verified: bool) {
        let now = Instant::now();
        let conn = &mut self.conns[key];
        let codec = self
            .traffic
            .as_ref()
            .map_or(&self.probe_codec, |t| &t.codec);
        self.out.clear();
        if let Some(first) = codec.first_message() {
            self.out.extend_from_slice(first);
        }
        let first_query_verifies = self.sc.verify && self.traffic.is_some() && !verified;
        // UDP has no acceptance to verify; without traffic nothing is sent
        // (nor without a probe: raw with no marker).
        let probe = self.sc.verify
            && !verified
            && self.transport != Transport::Udp
            && self.sc.probe.is_some();
        if verified {
            bump(&self.counters.verified, 1);
        } else if first_query_verifies {
            // The run's own first query on this connection will verify it:
            // no separate probe, so the ramp costs one round trip less.
            conn.unproven = true;
        } else if probe {
            // The probe: one query of the run's protocol (a DNS query when
            // there is no traffic, which echo and DNS servers both answer).
            let mut rng = Pcg64Mcg::seed_from_u64(conn.seq);
            codec.encode(u64::MAX, conn.target as usize, 0, &mut rng, &mut self.out);
            conn.state = State::Probing;
            self.probe_q
                .push_back((key, conn.seq, now + self.sc.connect_timeout()));
        }
        let out = std::mem::take(&mut self.out);
        self.write(key, &out);
        self.out = out;
        if self.conns[key].state != State::Probing {
            let initial = self.conns[key].initial;
            self.held(key);
            self.resolved(initial);
        }
    }

    /// Drops the oldest-first entries of connections already gone, so that
    /// churn cannot grow the list without bound.
    fn prune_open_q(&mut self) {
        if self.open_q.len() > 2 * self.conns.len() + 1024 {
            let conns = &self.conns;
            self.open_q
                .retain(|&(k, seq)| conns.get(k).is_some_and(|c| c.seq == seq));
        }
    }

    /// The connection is ready for traffic.
    fn held(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        conn.state = State::Held;
        conn.pending_in = Vec::new();
        if self.transport == Transport::TcpPerQuery {
            // Its one query waits in `waiting`: send it now.
            self.after_progress(key);
            return;
        }
        if let Some(t) = self.traffic.as_mut() {
            conn.active_pos = t.active.len() as u32;
            t.active.push(key);
            let cap = t.cap.unwrap_or(u64::MAX);
            while conn.queries + (conn.waiting.len() as u64) < cap {
                // Queries that waited for a connection: this one's now.
                let Some(intended) = self.orphans.pop_front() else {
                    break;
                };
                conn.waiting.push_back(intended);
            }
            if let Some(started) = t.started {
                // Joining a run in progress (a replacement connection).
                let now = self.start.elapsed().as_nanos() as u64;
                let seq = conn.seq;
                match self.sc.traffic.as_ref().map(|t| &t.model) {
                    Some(Model::Interval { every_s }) => {
                        let due = now.max(started) + (every_s * 1e9) as u64;
                        t.interval_q.push_back((key, seq, due));
                    }
                    Some(Model::ClosedLoop { .. }) => {
                        for _ in 0..t.window.min(1 << 16) {
                            t.think_q.push_back((key, seq, now));
                        }
                    }
                    _ => {}
                }
            }
        }
        if !self.conns[key].waiting.is_empty() {
            self.after_progress(key);
        }
    }

    /// Reads what the socket holds. `closing`: the event said the peer
    /// closed or failed, so read until the end is seen.
    fn on_readable(&mut self, key: usize, closing: bool) {
        // Out of `self` while in use, so that framing can call back into
        // the worker; put back before returning (no allocation either way).
        let mut scratch = std::mem::take(&mut self.scratch);
        if matches!(self.conns[key].stream, Sock::Udp(_)) {
            self.read_udp(key, &mut scratch);
        } else {
            self.read_all(key, &mut scratch, closing);
        }
        self.scratch = scratch;
        self.read_at = None;
        // Queries the answers let go (closed loop, a full window) leave
        // now, before the next connection is read: the server works on
        // them while this loop reads on, instead of both taking turns.
        if let Some(c) = self.conns.get_mut(key).filter(|c| c.dirty && !c.blocked) {
            c.dirty = false;
            self.flush(key);
        }
    }

    /// Receives datagrams, a batch per call, until the socket is empty.
    fn read_udp(&mut self, key: usize, scratch: &mut [u8]) {
        let slot = self.udp_slot.min(scratch.len());
        let slots = (scratch.len() / slot).clamp(1, BATCH);
        let mut lens = [0usize; BATCH];
        loop {
            let Some(Sock::Udp(sock)) = self.conns.get(key).map(|c| &c.stream) else {
                return;
            };
            let got = match recv_datagrams(sock, &mut scratch[..slot * slots], slot, &mut lens) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // ICMP port unreachable, reported on the next call: the
                // datagrams are lost, their queries time out.
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => continue,
                Err(_) => return,
            };
            self.read_at = Some(self.ns(Instant::now()));
            for (i, &len) in lens.iter().enumerate().take(got) {
                bump(&self.q.bytes_in, len as u64);
                let data = &scratch[i * slot..i * slot + len];
                self.on_datagram(key, data);
                if !self.conns.contains(key) {
                    return;
                }
            }
            self.after_progress(key);
            if got < slots {
                return;
            }
        }
    }

    /// One datagram: one whole response (or garbage, counted).
    fn on_datagram(&mut self, key: usize, data: &[u8]) {
        self.conns[key].got_data = true;
        let Some(t) = self.traffic.as_mut() else {
            return;
        };
        match t.codec.decode_datagram(data) {
            Frame::Response { key: q, status, .. } => self.answered(key, q, status),
            Frame::Incomplete | Frame::Malformed => {
                bump(&self.q.errors[E_MALFORMED], 1);
                t.sec_report.errors += 1;
            }
        }
    }

    /// Ciphertext came in: feed the session, finish the handshake, frame
    /// the plaintext. False when the connection is gone.
    fn on_tls_bytes(&mut self, key: usize, mut data: &[u8]) -> bool {
        let mut plain = std::mem::take(&mut self.plain);
        if plain.len() < 16 * 1024 {
            plain.resize(16 * 1024, 0);
        }
        let alive = 'feed: loop {
            let Some(tls) = self.conns.get_mut(key).and_then(|c| c.tls.as_mut()) else {
                break false;
            };
            if data.is_empty() {
                if tls.wants_write() {
                    self.mark_dirty(key);
                }
                break true;
            }
            if let Err(e) = tls.read_tls(&mut data) {
                self.tls_failed(key, &e);
                break false;
            }
            if let Err(e) = tls.process_new_packets() {
                // Tell the server why (the alert), then give up.
                let conn = &mut self.conns[key];
                if let (Some(tls), Sock::Tcp(s)) = (conn.tls.as_mut(), &mut conn.stream) {
                    let mut alert = Vec::new();
                    let _ = tls.write_tls(&mut alert);
                    let _ = write_some(s, &alert);
                }
                self.tls_failed(key, &e);
                break false;
            }
            if self.conns[key].state == State::Handshaking
                && !self.conns[key]
                    .tls
                    .as_ref()
                    .is_some_and(|t| t.is_handshaking())
            {
                self.tls_ready(key);
            }
            loop {
                let Some(tls) = self.conns.get_mut(key).and_then(|c| c.tls.as_mut()) else {
                    break 'feed false;
                };
                match tls.reader().read(&mut plain) {
                    Ok(0) => {
                        // close_notify: the server closed cleanly.
                        self.lost(key, Bucket::ClosedByPeer);
                        break 'feed false;
                    }
                    Ok(n) => {
                        if !self.on_bytes(key, &plain[..n]) {
                            break 'feed false;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        self.lost(key, Bucket::Reset);
                        break 'feed false;
                    }
                }
            }
        };
        self.plain = plain;
        alive
    }

    fn read_all(&mut self, key: usize, scratch: &mut [u8], closing: bool) {
        loop {
            let conn = &mut self.conns[key];
            let Sock::Tcp(stream) = &mut conn.stream else {
                return;
            };
            let n = match stream.read(scratch) {
                Ok(0) => return self.lost(key, Bucket::ClosedByPeer),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    // A reset before any byte came back, after we sent the
                    // probe: the server never accepted this connection.
                    let half_open = self.sc.verify && !conn.got_data;
                    let bucket = if half_open {
                        Bucket::HalfOpen
                    } else {
                        Bucket::Reset
                    };
                    return self.lost(key, bucket);
                }
            };
            conn.got_data = true;
            bump(&self.q.bytes_in, n as u64);
            self.read_at = Some(self.ns(Instant::now()));
            let conn = &self.conns[key];
            let alive = if conn.tls.is_some() {
                self.on_tls_bytes(key, &scratch[..n])
            } else {
                self.on_bytes(key, &scratch[..n])
            };
            if !alive {
                return;
            }
            // A short read took all there was: more data makes a new edge,
            // so skip the read that would only say WouldBlock (unless the
            // peer's close is pending, which makes no new edge).
            if n < scratch.len() && !closing {
                return;
            }
        }
    }

    /// Frames bytes just read. False when the connection is gone.
    fn on_bytes(&mut self, key: usize, data: &[u8]) -> bool {
        let conn = &mut self.conns[key];
        let mut buf = std::mem::take(&mut conn.pending_in);
        let input: &[u8] = if buf.is_empty() {
            data
        } else {
            buf.extend_from_slice(data);
            &buf
        };
        let mut used = 0;
        let mut alive = true;
        while used < input.len() {
            let conn = &self.conns[key];
            let codec = match (&self.traffic, conn.state) {
                (Some(t), _) => &t.codec,
                (None, _) => &self.probe_codec,
            };
            match codec.decode(&input[used..]) {
                Frame::Incomplete => break,
                Frame::Response {
                    len,
                    key: qkey,
                    status,
                    close,
                } => {
                    if close {
                        self.peer_closes(key);
                    }
                    used += len;
                    let conn = &self.conns[key];
                    if conn.state == State::Probing {
                        if let Some(what) = refusal(status) {
                            self.probe_rejected(key, what);
                        }
                        self.verified(key);
                    } else if self.traffic.is_some() {
                        self.answered(key, qkey, status);
                    }
                }
                Frame::Malformed => {
                    if conn.state == State::Probing {
                        // The server answered, in its own language: it
                        // accepted the connection, not the probe.
                        let said = &input[used..input.len().min(used + 40)];
                        self.probe_rejected(
                            key,
                            format!(
                                "it answered \"{}\", not a {} reply",
                                wire::escape::escape(said),
                                self.sc.probe.as_ref().map_or("DNS", Query::name)
                            ),
                        );
                        self.verified(key);
                        used = input.len();
                    } else if self.traffic.is_some() {
                        bump(&self.q.errors[E_MALFORMED], 1);
                        self.lost_traffic(key);
                        alive = false;
                        break;
                    } else {
                        used = input.len();
                    }
                }
            }
            if !self.conns.contains(key) {
                alive = false;
                break;
            }
        }
        if alive {
            let rest = &input[used..];
            let conn = &mut self.conns[key];
            if !rest.is_empty() {
                if buf.is_empty() {
                    conn.pending_in.extend_from_slice(rest);
                } else {
                    buf.drain(..used);
                    conn.pending_in = buf;
                }
            }
            self.after_progress(key);
        }
        alive
    }

    /// The server said this response is its last on the connection: pick
    /// it no more (its close then counts as the server's right).
    fn peer_closes(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        conn.peer_closing = true;
        let pos = conn.active_pos;
        if let Some(t) = self.traffic.as_mut().filter(|_| pos != NOT_ACTIVE) {
            remove_active(t, &mut self.conns, pos);
        }
    }

    fn verified(&mut self, key: usize) {
        bump(&self.counters.verified, 1);
        let initial = self.conns[key].initial;
        self.held(key);
        self.resolved(initial);
    }

    /// The server answered the probe on `key` with a refusal: counted
    /// (the first in words) and remembered, so that the close which often
    /// follows is put down to it.
    fn probe_rejected(&mut self, key: usize, what: String) {
        self.conns[key].rejected = true;
        self.counters.rejected(|| what);
    }

    /// An established connection ended by the server's doing.
    fn lost(&mut self, key: usize, bucket: Bucket) {
        let c = &self.conns[key];
        if c.state == State::Probing && bucket == Bucket::ClosedByPeer && !c.pending_in.is_empty() {
            // It answered part of something that is not a reply to the
            // probe (an HTTP 400 to a DNS query), then closed: it accepted
            // the connection and refused the probe.
            let said = &c.pending_in[..c.pending_in.len().min(40)];
            let what = format!(
                "it answered \"{}\", not a {} reply, and closed",
                wire::escape::escape(said),
                self.sc.probe.as_ref().map_or("DNS", Query::name)
            );
            self.probe_rejected(key, what);
            bump(&self.counters.verified, 1);
        }
        let bucket = match bucket {
            Bucket::ClosedByPeer | Bucket::Reset if self.conns[key].rejected => Bucket::Rejected,
            b => b,
        };
        let c = &self.conns[key];
        if matches!(c.state, State::Probing | State::Handshaking) {
            let initial = c.initial;
            self.resolved(initial);
        }
        let c = &self.conns[key];
        // (After an announced close the server may also reset: queries
        // that crossed its last answer arrived at a closed socket.)
        let announced = c.peer_closing && matches!(bucket, Bucket::ClosedByPeer | Bucket::Reset)
            || bucket == Bucket::ClosedByPeer && c.done > 0 && c.live() == 0;
        if c.state == State::Held && announced {
            // It answered all it was sent, or said its last answer was its
            // last, then closed (a keep-alive limit, an idle timeout): the
            // server's right, not a failure.
            bump(&self.counters.peer_closed, 1);
        } else {
            self.counters.fail(bucket);
        }
        self.drop_conn(key);
        if self.sc.reconnect {
            self.reconnects_owed += 1;
        }
    }

    /// The traffic on a connection broke (bytes that cannot be framed).
    fn lost_traffic(&mut self, key: usize) {
        self.counters.fail(Bucket::Reset);
        self.drop_conn(key);
        if self.sc.reconnect {
            self.reconnects_owed += 1;
        }
    }

    /// Closes a connection by our own choice (lifetime, schedule, recycling).
    fn close(&mut self, key: usize) {
        bump(&self.counters.closed, 1);
        self.drop_conn(key);
    }

    fn drop_conn(&mut self, key: usize) {
        let mut c = self.conns.remove(key);
        if c.state != State::Connecting {
            self.shared.closed();
        }
        let live = c.live();
        let untaken = c.peer_closing && self.transport != Transport::TcpPerQuery;
        if live > 0 && !untaken {
            bump(&self.q.errors[E_CONN_LOST], live);
        }
        if let Some(t) = self.traffic.as_mut() {
            if live > 0 && untaken {
                // The server had said its last answer was its last (HTTP
                // `Connection: close`): queries that crossed that answer on
                // the wire never reached its work. They count as not sent;
                // in open loop they are due again on another connection
                // with their intended time (closed loop's replacement
                // connection starts its own).
                self.q.sent.store(self.q.sent.load(Relaxed) - live, Relaxed);
                t.sec_report.sent = t.sec_report.sent.saturating_sub(live);
                // Not sent: their --queries tickets come back.
                if let Some(q) = t.quota.as_mut() {
                    *q += live;
                }
                if !t.closed_loop {
                    let due = c.outstanding.iter().filter(|o| !o.timed_out);
                    self.orphans.extend(due.map(|o| o.intended));
                }
            }
            if c.active_pos != NOT_ACTIVE {
                remove_active(t, &mut self.conns, c.active_pos);
            }
            if let Some(id) = c.take_deadline() {
                t.deadlines.remove(id);
            }
        }
        if c.state != State::Connecting {
            // (Connect failures count their own query where they happen.)
            self.pq_lost(c.done + c.live());
        }
        // Due queries it never sent go to another connection (with
        // tcp-per-query the query failed with its connection: counted).
        if self.transport != Transport::TcpPerQuery {
            self.orphans.extend(c.waiting);
        }
    }

    /// Hands queries that waited for a connection to the open ones.
    fn drain_orphans(&mut self) {
        while !self.orphans.is_empty() {
            let Some(t) = self.traffic.as_mut().filter(|t| !t.active.is_empty()) else {
                return;
            };
            t.rr = (t.rr + 1) % t.active.len();
            let key = t.active[t.rr];
            let intended = self.orphans.pop_front().expect("not empty");
            self.query(key, intended);
        }
    }

    // ---- tcp-per-query ---------------------------------------------------

    /// A query is due: it gets a connection of its own now, or waits for a
    /// free slot keeping its intended time.
    fn per_query(&mut self, intended: u64) {
        self.pq_wait.push_back(intended);
        self.pq_fill();
    }

    /// Opens connections for waiting queries while slots are free.
    fn pq_fill(&mut self) {
        while self.draining.is_none()
            && !self.pq_wait.is_empty()
            && (self.conns.len() as u64) < self.pq_share
        {
            let intended = self.pq_wait.pop_front().expect("not empty");
            if !self
                .traffic
                .as_mut()
                .is_some_and(|t| take_ticket(&mut t.quota))
            {
                // --queries are all out: no connection for this one.
                self.pq_wait.clear();
                return;
            }
            let seq = self.sc.connections + self.reconnects_made * self.nworkers + self.id;
            self.reconnects_made += 1;
            match self.attempt(seq, false) {
                Some(key) => self.conns[key].waiting.push_back(intended),
                None => self.pq_lost(0),
            }
        }
    }

    /// Once its part of --queries is sent and none is in flight or waiting
    /// any more, says so to the main thread (which ends the run when every
    /// worker has). Looks at every connection, but only after the last
    /// query went out.
    fn check_quota_done(&mut self) {
        let Some(t) = self.traffic.as_mut() else {
            return;
        };
        if t.quota != Some(0) || t.quota_done {
            return;
        }
        let idle = self.pq_wait.is_empty()
            && self
                .conns
                .iter()
                .all(|(_, c)| c.live() == 0 && c.waiting.is_empty());
        if idle {
            t.quota_done = true;
            let _ = self.notify.send(Reason::QueriesDone);
        }
    }

    /// A tcp-per-query connection is gone; `sent`: queries it sent (0 when
    /// it failed before its query went out, which is then an error). In
    /// closed loop the next query starts after --think.
    fn pq_lost(&mut self, sent: u64) {
        if self.transport != Transport::TcpPerQuery {
            return;
        }
        let now = self.ns(Instant::now());
        let Some(t) = self.traffic.as_mut() else {
            return;
        };
        if sent == 0 {
            bump(&self.q.errors[E_CONNECT], 1);
            t.sec_report.errors += 1;
        }
        if let Some(Model::ClosedLoop { think_s }) = self.sc.traffic.as_ref().map(|t| &t.model) {
            t.think_q
                .push_back((NEW_CONNECTION, 0, now + (think_s * 1e9) as u64));
        }
    }

    // ---- timers --------------------------------------------------------

    /// Connect timeouts, probe timeouts, lifetimes, query timeouts. The
    /// connect and probe queues also drop, from the front, the entries of
    /// connections already past that step: they resolve in about the order
    /// they started, so the queues hold about what is in flight rather than
    /// an entry for every connection of the last timeout's worth of ramp.
    fn expire(&mut self, now: Instant) {
        while let Some(&(key, seq, at)) = self.connect_q.front() {
            let c = self
                .conns
                .get(key)
                .filter(|c| c.seq == seq && c.state == State::Connecting);
            if c.is_some() && at > now {
                break;
            }
            self.connect_q.pop_front();
            if let Some(c) = c {
                let initial = c.initial;
                self.conns.remove(key);
                self.inflight -= 1;
                self.counters.fail(Bucket::TimedOut);
                self.settled(initial);
                self.resolved(initial);
                self.pq_lost(0);
            }
        }
        while let Some(&(key, seq, at)) = self.probe_q.front() {
            let state = self
                .conns
                .get(key)
                .filter(|c| c.seq == seq)
                .map(|c| c.state)
                .filter(|s| matches!(s, State::Handshaking | State::Probing));
            if state.is_some() && at > now {
                break;
            }
            self.probe_q.pop_front();
            if state == Some(State::Handshaking) {
                let secs = self.sc.connect_timeout_s;
                self.tls_failed(
                    key,
                    &format!("the TLS handshake did not finish within --connect-timeout {secs}s"),
                );
                continue;
            }
            if state == Some(State::Probing) {
                // Established but unverified: kept, not failed.
                bump(&self.counters.unverified, 1);
                let initial = self.conns[key].initial;
                self.held(key);
                self.resolved(initial);
            }
        }
        while let Some(&(key, seq, at)) = self.life_q.front() {
            if at > now {
                break;
            }
            self.life_q.pop_front();
            if self.conns.get(key).is_some_and(|c| c.seq == seq) {
                self.close(key);
                if self.sc.reconnect {
                    self.reconnects_owed += 1;
                }
            }
        }
        let now_ns = self.ns(now);
        while let Some(t) = self.traffic.as_mut() {
            let Some(Entry { conn: key, seq }) = t.deadlines.pop_due(now_ns) else {
                break;
            };
            let Some(c) = self.conns.get_mut(key).filter(|c| c.seq == seq) else {
                continue;
            };
            c.deadline = NO_DEADLINE;
            self.time_out_overdue(key, now_ns);
            self.set_deadline(key);
        }
    }

    /// Times out the queries of `key` past their deadline, oldest first.
    fn time_out_overdue(&mut self, key: usize, now_ns: u64) {
        loop {
            let (Some(t), Some(c)) = (self.traffic.as_mut(), self.conns.get_mut(key)) else {
                return;
            };
            let timeout_ns = t.timeout_ns;
            let Some(o) = c
                .outstanding
                .iter_mut()
                .find(|o| !o.timed_out)
                .filter(|o| o.sent + timeout_ns <= now_ns)
            else {
                return;
            };
            o.timed_out = true;
            let o = *o;
            c.ghosts += 1;
            c.done += 1;
            bump(&self.q.timed_out, 1);
            let conn_seq = c.seq;
            log_line(t, conn_seq, &o, None, "timeout");
            t.sec_report.timed_out += 1;
            if self.sc.traffic.as_ref().is_some_and(|t| t.close_on_timeout) {
                self.close(key);
                if self.sc.reconnect {
                    self.reconnects_owed += 1;
                }
                return;
            }
            self.completed(key, now_ns);
            if self.conns.contains(key) {
                self.after_progress(key);
            }
        }
    }

    /// Sets the deadline of `key` at its oldest query in flight (none when
    /// nothing is in flight).
    fn set_deadline(&mut self, key: usize) {
        let (Some(t), Some(c)) = (self.traffic.as_mut(), self.conns.get_mut(key)) else {
            return;
        };
        if let Some(id) = c.take_deadline() {
            t.deadlines.remove(id);
        }
        if let Some(o) = c.outstanding.iter().find(|o| !o.timed_out) {
            let entry = Entry {
                conn: key,
                seq: c.seq,
            };
            c.deadline = t.deadlines.push(o.sent + t.timeout_ns, entry);
        }
    }

    /// Gives back the memory of deadline queues that have emptied (after a
    /// ramp they held an entry per connection).
    fn shrink_queues(&mut self) {
        for q in [&mut self.connect_q, &mut self.probe_q] {
            if q.is_empty() && q.capacity() > 1024 {
                *q = VecDeque::new();
            }
        }
    }

    /// The earliest instant something is due.
    fn next_wakeup(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut consider = |i: Instant| t = Some(t.map_or(i, |t| t.min(i)));
        if self.inflight < self.max_inflight {
            if self.next < self.initial_total {
                consider(self.start + self.sc.ramp.due(self.next * self.nworkers + self.id));
            } else if self.reconnects_owed > 0 {
                consider(Instant::now());
            }
        }
        for q in [&self.connect_q, &self.probe_q, &self.life_q] {
            if let Some(&(_, _, at)) = q.front() {
                consider(at);
            }
        }
        if self.sc.connections_schedule.is_some() || self.shared.conn_level.load(Relaxed) > 0 {
            // The level moves: look again every 10 ms.
            consider(Instant::now() + Duration::from_millis(10));
        }
        if let Some(tr) = &self.traffic {
            if let Some(started) = tr.started {
                if let Some(p) = &tr.pacer {
                    consider(self.at(started + (p.peek() * 1e9) as u64));
                }
                for q in [&tr.interval_q, &tr.think_q] {
                    if let Some(&(_, _, at)) = q.front() {
                        consider(self.at(at));
                    }
                }
                if let Some((at, _)) = tr.deadlines.first() {
                    consider(self.at(at));
                }
                // The per-second report.
                consider(self.at((tr.sec + 1) * 1_000_000_000));
            } else if self.shared.traffic_at.load(Relaxed) > 0 {
                consider(Instant::now());
            }
        }
        t
    }

    // ---- traffic -------------------------------------------------------

    /// Sends every query that is due.
    fn traffic_due(&mut self, now: Instant) {
        let Some(t) = self.traffic.as_mut() else {
            return;
        };
        let now_ns = now.saturating_duration_since(self.start).as_nanos() as u64;
        let started = match t.started {
            Some(s) => s,
            None => {
                let at = self.shared.traffic_at.load(Relaxed);
                if at == 0 {
                    return;
                }
                let s = at - 1;
                t.started = Some(s);
                t.sec = now_ns / 1_000_000_000;
                t.sec_report = SecondReport::new(t.sec);
                t.second_hist.reset();
                self.begin_traffic(s);
                s
            }
        };
        self.roll_second(now_ns);
        if self.draining.is_some() {
            // The traffic is over: answers only.
            return;
        }
        self.drain_orphans();
        let gen = self.shared.rate_gen.load(Relaxed);
        if let Some(t) = self.traffic.as_mut().filter(|t| t.rate_gen != gen) {
            t.rate_gen = gen;
            let rate = f64::from_bits(self.shared.rate_override.load(Relaxed));
            if let Some(p) = t.pacer.as_mut() {
                p.set_rate(rate);
            }
        }
        // Open loop: this worker's arrivals up to now.
        loop {
            let Some(t) = self.traffic.as_mut() else {
                return;
            };
            let Some(p) = t.pacer.as_mut() else {
                break;
            };
            let due = started + (p.peek() * 1e9) as u64;
            if due > now_ns {
                break;
            }
            let Some(at) = p.take() else {
                continue;
            };
            let intended = started + (at * 1e9) as u64;
            t.loop_lag
                .saturating_record(us(now_ns.saturating_sub(intended)));
            if self.transport == Transport::TcpPerQuery {
                self.per_query(intended);
                continue;
            }
            if t.active.is_empty() {
                let recycling = self
                    .sc
                    .traffic
                    .as_ref()
                    .is_some_and(|t| t.max_queries_per_conn.is_some());
                if self.inflight > 0
                    || self.reconnects_owed > 0
                    || (recycling && !self.conns.is_empty())
                {
                    self.orphans.push_back(intended);
                    continue;
                }
                bump(&self.q.errors[E_NO_CONNECTION], 1);
                t.sec_report.errors += 1;
                continue;
            }
            let pick = match t.spread {
                Spread::Random => t.rng.random_range(0..t.active.len()),
                Spread::RoundRobin => {
                    t.rr = (t.rr + 1) % t.active.len();
                    t.rr
                }
            };
            let key = t.active[pick];
            self.query(key, intended);
        }
        // Per-connection intervals and closed-loop think times.
        for think in [false, true] {
            loop {
                let Some(t) = self.traffic.as_mut() else {
                    return;
                };
                let q = if think {
                    &mut t.think_q
                } else {
                    &mut t.interval_q
                };
                let Some(&(key, seq, due)) = q.front() else {
                    break;
                };
                if due > now_ns {
                    break;
                }
                q.pop_front();
                if key == NEW_CONNECTION {
                    self.per_query(due);
                    continue;
                }
                if !self.conns.get(key).is_some_and(|c| c.seq == seq) {
                    continue;
                }
                if !think {
                    t.loop_lag.saturating_record(us(now_ns.saturating_sub(due)));
                    if let Some(Model::Interval { every_s }) =
                        self.sc.traffic.as_ref().map(|t| &t.model)
                    {
                        t.interval_q
                            .push_back((key, seq, due + (every_s * 1e9) as u64));
                    }
                }
                self.query(key, due);
            }
        }
    }

    /// Traffic starts now: interval connections get their staggered first
    /// sends, closed-loop connections their first window of queries.
    fn begin_traffic(&mut self, started: u64) {
        let Some(t) = self.traffic.as_mut() else {
            return;
        };
        let model = self.sc.traffic.as_ref().map(|t| t.model.clone());
        if self.transport == Transport::TcpPerQuery {
            if let Some(Model::ClosedLoop { .. }) = model {
                for _ in 0..self.pq_share {
                    t.think_q.push_back((NEW_CONNECTION, 0, started));
                }
            }
            return;
        }
        let n = t.active.len() as u64;
        for (i, &key) in t.active.iter().enumerate() {
            let seq = self.conns[key].seq;
            match &model {
                Some(Model::Interval { every_s }) => {
                    let every = (every_s * 1e9) as u64;
                    // Connection i of n starts i/n of the way into the first
                    // interval, so connections do not fire in lock-step.
                    t.interval_q
                        .push_back((key, seq, started + every * i as u64 / n.max(1)));
                }
                Some(Model::ClosedLoop { .. }) => {
                    for _ in 0..t.window.min(1 << 16) {
                        t.think_q.push_back((key, seq, started));
                    }
                }
                _ => {}
            }
        }
    }

    /// Sends one report per second that has ended.
    fn roll_second(&mut self, now_ns: u64) {
        let Some(t) = self.traffic.as_mut() else {
            return;
        };
        let sec = now_ns / 1_000_000_000;
        while t.sec < sec {
            let next = SecondReport::new(t.sec + 1);
            let mut done = std::mem::replace(&mut t.sec_report, next);
            t.fold_second(&mut done);
            let _ = t.reports.send(done);
            t.sec += 1;
        }
    }

    /// A query is due on `key` at `intended`: send it, or queue it behind the
    /// window or a busy socket, keeping its intended time.
    fn query(&mut self, key: usize, intended: u64) {
        let Some(t) = self.traffic.as_mut() else {
            return;
        };
        let conn = &mut self.conns[key];
        if t.cap
            .is_some_and(|c| conn.queries + conn.waiting.len() as u64 >= c)
        {
            return;
        }
        if conn.peer_closing {
            // Due on a connection the server is closing: lost with it.
            bump(&self.q.errors[E_CONN_LOST], 1);
            t.sec_report.errors += 1;
            return;
        }
        if conn.live() >= t.window || conn.blocked || !conn.waiting.is_empty() {
            conn.waiting.push_back(intended);
            return;
        }
        self.send_now(key, intended);
    }

    /// Now, in ns since the start: the time of the read being processed
    /// (every answer in one read arrived together; the queries they let go
    /// leave with it), or the clock.
    fn now_ns(&self) -> u64 {
        self.read_at.unwrap_or_else(|| self.ns(Instant::now()))
    }

    /// Encodes and writes one query.
    fn send_now(&mut self, key: usize, intended: u64) {
        let now = self.now_ns();
        let Some(t) = self.traffic.as_mut() else {
            return;
        };
        // (tcp-per-query took its ticket when it opened the connection.)
        if self.transport != Transport::TcpPerQuery && !take_ticket(&mut t.quota) {
            // --queries are all out: due ones are dropped, not sent.
            return;
        }
        let conn = &mut self.conns[key];
        let n = conn.queries;
        let target = conn.target as usize;
        let qkey = match (&mut conn.tls, &conn.stream) {
            (Some(tls), _) => {
                self.out.clear();
                let k = t.codec.encode(n, target, now, &mut t.rng, &mut self.out);
                let _ = tls.writer().write_all(&self.out);
                k
            }
            (None, Sock::Udp(_)) => {
                let at = begin_datagram(&mut conn.pending_out);
                let k = t
                    .codec
                    .encode_datagram(n, target, now, &mut t.rng, &mut conn.pending_out);
                end_datagram(&mut conn.pending_out, at);
                k
            }
            (None, Sock::Tcp(_)) => {
                t.codec
                    .encode(n, target, now, &mut t.rng, &mut conn.pending_out)
            }
        };
        conn.queries += 1;
        if !conn.dirty {
            conn.dirty = true;
            self.dirty.push(key);
        }
        // tcp-per-query: the query started with its connection.
        let now = if self.transport == Transport::TcpPerQuery {
            conn.since.saturating_duration_since(self.start).as_nanos() as u64
        } else {
            now
        };
        let lag = now.saturating_sub(intended);
        if lag == 0 {
            t.on_time += 1;
        } else {
            t.send_lag.saturating_record(us(lag));
            if lag > LATE_NS {
                bump(&self.q.sent_late, 1);
            }
        }
        if conn.deadline == NO_DEADLINE {
            // Nothing else in flight here: this query is the oldest.
            let entry = Entry {
                conn: key,
                seq: conn.seq,
            };
            conn.deadline = t.deadlines.push(now + t.timeout_ns, entry);
        }
        if conn.live() > 0 {
            bump(&self.q.pipelined, 1);
        }
        conn.outstanding.push_back(Outstanding {
            key: qkey,
            intended,
            sent: now,
            timed_out: false,
            qtype_slot: t.codec.qtype_slot(n),
        });
        t.sec_report.sent += 1;
        bump(&self.q.sent, 1);
        let retire = (t.cap.is_some_and(|c| conn.queries >= c) && conn.active_pos != NOT_ACTIVE)
            .then_some(conn.active_pos);
        if let Some(pos) = retire {
            // No more queries on this one: out of the open-loop choice.
            remove_active(t, &mut self.conns, pos);
        }
    }

    /// A response arrived for `qkey` (or the oldest query).
    fn answered(&mut self, key: usize, qkey: Option<u64>, status: Status) {
        let now = self.now_ns();
        let Some(t) = self.traffic.as_mut() else {
            return;
        };
        let conn = &mut self.conns[key];
        let idx = match qkey {
            Some(k) => conn.outstanding.iter().position(|o| o.key == k),
            None => (!conn.outstanding.is_empty()).then_some(0),
        };
        if conn.unproven {
            // Any answer proves the server accepted the connection.
            conn.unproven = false;
            bump(&self.counters.verified, 1);
        }
        // Answers mostly come in order: the oldest leaves from the front.
        let Some(o) = idx.and_then(|i| match i {
            0 => conn.outstanding.pop_front(),
            i => conn.outstanding.remove(i),
        }) else {
            bump(&self.q.errors[E_UNMATCHED], 1);
            t.sec_report.errors += 1;
            return;
        };
        if conn.live() == 0 {
            // Nothing left in flight: no deadline to keep (a connection that
            // queries now and then holds no entry between its queries).
            if let Some(id) = conn.take_deadline() {
                t.deadlines.remove(id);
            }
        }
        if conn.outstanding.is_empty() && self.sparse {
            // Nothing in flight on a connection that queries now and then:
            // hold no buffer until the next query.
            conn.outstanding = VecDeque::new();
        }
        if o.timed_out {
            // Its timeout was counted; the late answer is only absorbed.
            conn.ghosts -= 1;
            return;
        }
        conn.done += 1;
        let response = us(now.saturating_sub(o.intended));
        let service = us(now.saturating_sub(o.sent));
        t.second_hist.saturating_record(response);
        if !t.closed_loop {
            // (In closed loop each query is sent when due: the two are the
            // same, recorded once and copied at the end.)
            t.service_time.saturating_record(service);
        }
        t.sec_report.answered += 1;
        bump(&self.q.answered, 1);
        let label = match status {
            Status::Ok => {
                t.statuses.ok += 1;
                "ok"
            }
            Status::Rcode(r) => {
                t.statuses.rcodes[usize::from(r & 15)] += 1;
                if let Some((_, row)) = t.statuses.by_qtype.get_mut(usize::from(o.qtype_slot)) {
                    row[usize::from(r & 15)] += 1;
                }
                wire::dns::rcode_name(r)
            }
            Status::Echoed => {
                t.statuses.echoed += 1;
                "echoed"
            }
            Status::Http(code) => {
                t.statuses.http[usize::from(code).min(599)] += 1;
                "http"
            }
            Status::Mismatch => {
                t.statuses.mismatch += 1;
                bump(&self.q.errors[E_MISMATCH], 1);
                t.sec_report.errors += 1;
                "mismatch"
            }
        };
        let conn_seq = conn.seq;
        if t.log.is_some() {
            let code;
            let label = if let Status::Http(c) = status {
                code = c.to_string();
                code.as_str()
            } else {
                label
            };
            log_line(t, conn_seq, &o, Some(now), label);
        }
        self.completed(key, now);
    }

    /// One query of `key` is done (answered or timed out): closed loop
    /// sends the next; a finished connection closes.
    fn completed(&mut self, key: usize, now: u64) {
        let Some(tr) = self.sc.traffic.as_ref() else {
            return;
        };
        let Some(t) = self.traffic.as_mut() else {
            return;
        };
        if self.transport == Transport::TcpPerQuery {
            // Its one query is done: close (the client keeps TIME_WAIT).
            self.close(key);
            return;
        }
        let conn = &mut self.conns[key];
        if let Model::ClosedLoop { think_s } = tr.model {
            // Draining: an answer lets no new query go.
            if t.started.is_some()
                && self.draining.is_none()
                && !t.cap.is_some_and(|c| conn.queries >= c)
            {
                if think_s == 0.0 {
                    // Due now: sent with this turn's other writes, not a
                    // loop turn later.
                    conn.waiting.push_back(now);
                } else {
                    t.think_q
                        .push_back((key, conn.seq, now + (think_s * 1e9) as u64));
                }
            }
        }
        if let Some(n) = tr.max_queries_per_conn {
            if conn.done >= n && conn.live() == 0 {
                bump(&self.q.recycled, 1);
                self.close(key);
                self.reconnects_owed += 1;
                return;
            }
        }
        if let Some(n) = tr.messages {
            let hold = self.sc.end == crate::scenario::End::Hold;
            if conn.done >= n && conn.live() == 0 && !hold {
                self.close(key);
            }
        }
    }

    /// After a response or a flush: send what waited.
    fn after_progress(&mut self, key: usize) {
        while let Some(c) = self.conns.get_mut(key) {
            let Some(t) = self.traffic.as_ref() else {
                return;
            };
            if c.waiting.is_empty() || c.live() >= t.window || c.blocked || c.peer_closing {
                return;
            }
            let intended = c.waiting.pop_front().expect("not empty");
            self.send_now(key, intended);
        }
    }

    fn on_writable(&mut self, key: usize) {
        self.conns[key].blocked = false;
        if self.flush(key) {
            self.after_progress(key);
        }
    }

    /// Queues bytes for the end of this loop turn.
    fn write(&mut self, key: usize, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let conn = &mut self.conns[key];
        match (&mut conn.tls, &conn.stream) {
            (Some(tls), _) => {
                // Into the session's buffer; sealed into records at flush.
                let _ = tls.writer().write_all(data);
            }
            (None, Sock::Udp(_)) => {
                let at = begin_datagram(&mut conn.pending_out);
                conn.pending_out.extend_from_slice(data);
                end_datagram(&mut conn.pending_out, at);
            }
            (None, Sock::Tcp(_)) => conn.pending_out.extend_from_slice(data),
        }
        self.mark_dirty(key);
    }

    /// Puts the connection on the list flushed at the end of this turn.
    fn mark_dirty(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        if !conn.dirty {
            conn.dirty = true;
            self.dirty.push(key);
        }
    }

    /// Writes every connection's queued bytes: one syscall each.
    fn flush_dirty(&mut self) {
        let mut dirty = std::mem::take(&mut self.dirty);
        for &key in &dirty {
            let Some(c) = self.conns.get_mut(key) else {
                continue;
            };
            if !c.dirty {
                continue;
            }
            c.dirty = false;
            if !c.blocked {
                self.flush(key);
            }
        }
        dirty.clear();
        if self.dirty.is_empty() {
            self.dirty = dirty;
        }
    }

    /// Writes what the connection has queued; false when that failed and
    /// the connection is gone.
    fn flush(&mut self, key: usize) -> bool {
        let conn = &mut self.conns[key];
        if let Some(tls) = conn.tls.as_mut() {
            while tls.wants_write() {
                if tls.write_tls(&mut conn.pending_out).is_err() {
                    break;
                }
            }
        }
        let written = match &mut conn.stream {
            Sock::Tcp(s) => write_some(s, &conn.pending_out).map(|n| (n, n)),
            Sock::Udp(s) => send_datagrams(s, &conn.pending_out),
        };
        match written {
            Ok((n, payload)) => {
                bump(&self.q.bytes_out, payload as u64);
                if n == conn.pending_out.len() {
                    if !self.busy || conn.pending_out.capacity() > 16 * 1024 {
                        // Nothing kept while idle.
                        conn.pending_out = Vec::new();
                    } else {
                        // Never idle (closed loop): the next answer sends
                        // again; no realloc.
                        conn.pending_out.clear();
                    }
                } else {
                    conn.pending_out.drain(..n);
                    conn.blocked = true;
                }
                true
            }
            Err(_) => {
                self.lost(key, Bucket::Reset);
                false
            }
        }
    }
}

fn remove_active(t: &mut Traffic, conns: &mut Slab<Conn>, pos: u32) {
    let pos = pos as usize;
    let key = t.active.swap_remove(pos);
    if let Some(c) = conns.get_mut(key) {
        c.active_pos = NOT_ACTIVE;
    }
    if let Some(&moved) = t.active.get(pos) {
        conns[moved].active_pos = pos as u32;
    }
}

/// Writes until done or the socket is full; returns bytes written.
fn write_some(stream: &mut TcpStream, data: &[u8]) -> io::Result<usize> {
    let mut off = 0;
    while off < data.len() {
        match stream.write(&data[off..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(off)
}

/// Starts a datagram in a UDP connection's output: a 2-byte length, filled
/// in by [`end_datagram`]. Returns where it starts.
fn begin_datagram(out: &mut Vec<u8>) -> usize {
    out.extend_from_slice(&[0, 0]);
    out.len() - 2
}

fn end_datagram(out: &mut [u8], at: usize) {
    let len = (out.len() - at - 2) as u16;
    out[at..at + 2].copy_from_slice(&len.to_be_bytes());
}

/// Sends the length-prefixed datagrams in `data`, a batch per sendmmsg,
/// until done or the socket is full; returns the bytes of `data` consumed
/// and the payload bytes sent. A datagram the kernel refuses for good (too
/// big) is skipped: its query times out.
fn send_datagrams(sock: &UdpSocket, data: &[u8]) -> io::Result<(usize, usize)> {
    let mut off = 0;
    let mut payload = 0;
    while off < data.len() {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; BATCH];
        let mut ends = [0usize; BATCH];
        let mut n = 0;
        let mut at = off;
        while n < BATCH && at + 2 <= data.len() {
            let len = usize::from(u16::from_be_bytes([data[at], data[at + 1]]));
            iov[n] = libc::iovec {
                iov_base: data[at + 2..].as_ptr() as *mut libc::c_void,
                iov_len: len,
            };
            at += 2 + len;
            ends[n] = at;
            n += 1;
        }
        // SAFETY: mmsghdr is plain data; all-zero is a valid empty value.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (m, v) in msgs.iter_mut().zip(iov.iter_mut()).take(n) {
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `msgs[..n]` point at iovecs that point into `data`, all
        // alive for the call; the socket is connected, so no address.
        let rc = unsafe { libc::sendmmsg(sock.as_raw_fd(), msgs.as_mut_ptr(), n as u32, 0) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => break,
                Some(libc::EINTR) => continue,
                // A late ICMP error of an earlier datagram: reported once.
                Some(libc::ECONNREFUSED) => continue,
                Some(libc::EMSGSIZE) => {
                    off = ends[0];
                    continue;
                }
                _ => return Err(e),
            }
        }
        let sent = rc as usize;
        if sent == 0 {
            break;
        }
        payload += iov[..sent].iter().map(|v| v.iov_len).sum::<usize>();
        off = ends[sent - 1];
    }
    Ok((off, payload))
}

/// Receives up to `lens.len()` datagrams into `slot`-byte pieces of `buf`;
/// returns how many, their lengths in `lens`.
fn recv_datagrams(
    sock: &UdpSocket,
    buf: &mut [u8],
    slot: usize,
    lens: &mut [usize; BATCH],
) -> io::Result<usize> {
    let n = (buf.len() / slot).min(BATCH);
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; BATCH];
    for (i, v) in iov.iter_mut().enumerate().take(n) {
        v.iov_base = buf[i * slot..].as_mut_ptr().cast();
        v.iov_len = slot;
    }
    // SAFETY: mmsghdr is plain data; all-zero is a valid empty value.
    let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    for (m, v) in msgs.iter_mut().zip(iov.iter_mut()).take(n) {
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: each iovec points at its own `slot` bytes of `buf`, which
    // outlives the call; no timeout, no addresses asked for.
    let rc = unsafe {
        libc::recvmmsg(
            sock.as_raw_fd(),
            msgs.as_mut_ptr(),
            n as u32,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let got = rc as usize;
    for (l, m) in lens.iter_mut().zip(&msgs).take(got) {
        *l = (m.msg_len as usize).min(slot);
    }
    Ok(got)
}

/// Takes one query from what is left of --queries; false when none is.
fn take_ticket(quota: &mut Option<u64>) -> bool {
    match quota {
        None => true,
        Some(0) => false,
        Some(n) => {
            *n -= 1;
            true
        }
    }
}

fn proto_name(q: &Query) -> &'static str {
    match q {
        Query::Dns { .. } => "dns",
        Query::Echo { .. } => "echo",
        Query::Ping => "ping",
        Query::Http { .. } => "http",
        Query::Raw { .. } => "raw",
    }
}

/// Appends one RTT log line: type,timestamp,connection_id,query_id,
/// intended_us,sent_us,rtt_us,status (times since the traffic start;
/// timestamp is the Unix time of the send in µs; rtt from the send).
fn log_line(t: &mut Traffic, conn: u64, o: &Outstanding, done: Option<u64>, status: &str) {
    let started = t.started.unwrap_or(0);
    let Some(log) = t.log.as_mut() else {
        return;
    };
    let rtt = done.map(|d| (d.saturating_sub(o.sent) / 1000).to_string());
    let _ = writeln!(
        log.buf,
        "{},{},{},{},{},{},{},{}",
        log.proto,
        log.epoch_unix_us + o.sent / 1000,
        conn,
        o.key,
        o.intended.saturating_sub(started) / 1000,
        o.sent.saturating_sub(started) / 1000,
        rtt.as_deref().unwrap_or(""),
        status
    );
    if log.buf.len() >= LOG_CHUNK {
        let chunk = std::mem::replace(&mut log.buf, Vec::with_capacity(LOG_CHUNK + 256));
        let _ = log.tx.send(chunk);
    }
}

/// A probe's answer that refuses it, in words: an HTTP error status, a DNS
/// FORMERR, NOTIMP or REFUSED, or a reply that does not match.
fn refusal(status: Status) -> Option<String> {
    match status {
        Status::Http(code) if code >= 400 => Some(format!("HTTP {code}")),
        Status::Rcode(rc @ (1 | 4 | 5)) => Some(format!(
            "DNS {}",
            match rc {
                1 => "FORMERR",
                4 => "NOTIMP",
                _ => "REFUSED",
            }
        )),
        Status::Mismatch => Some("a reply that does not match the probe".into()),
        _ => None,
    }
}
