//! One client worker: a mio loop that opens its share of the connections on
//! an absolute schedule, verifies each with a probe, holds them, and puts
//! every attempt in exactly one bucket.
//!
//! Worker `w` of `W` owns attempts w, w+W, w+2W, ... Attempt i is due at
//! `start + ramp.due(i)`, so the workers together follow the scenario's ramp
//! without talking to each other. Timeouts (connect, probe, lifetime) are
//! constant per run, so each kind is a FIFO of deadlines in start order:
//! O(1) per connection, no timer wheel. Entries of connections that moved on
//! are skipped lazily (they carry the attempt number).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use socket2::Socket;

use super::connector;
use crate::metrics::{bump, new_histogram, Bucket, ConnCounters, Shared};
use crate::scenario::Scenario;
use crate::sys::signals::Reason;

pub const WAKER: Token = Token(usize::MAX);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Connecting,
    /// Established; the probe was sent, its answer not seen yet.
    Probing,
    /// Established (and verified, or not verifiable in time).
    Held,
}

/// One connection: a few dozen bytes, no buffer.
struct Conn {
    stream: TcpStream,
    state: State,
    /// The attempt number (unique in the run).
    seq: u64,
    /// Connect start, then the instant it was established.
    since: Instant,
    /// Some bytes came back from the server.
    got_data: bool,
    /// One of the ramp's attempts (not a --reconnect replacement).
    initial: bool,
}

/// What a worker gets at start.
pub struct Setup {
    pub id: usize,
    pub scenario: Arc<Scenario>,
    pub poll: Poll,
    pub counters: Arc<ConnCounters>,
    pub shared: Arc<Shared>,
    pub start: Instant,
    pub notify: mpsc::Sender<Reason>,
}

pub struct Worker {
    id: u64,
    nworkers: u64,
    sc: Arc<Scenario>,
    poll: Poll,
    conns: Slab<Conn>,
    counters: Arc<ConnCounters>,
    shared: Arc<Shared>,
    start: Instant,
    notify: mpsc::Sender<Reason>,
    connect_time: Histogram<u64>,
    /// Local index of the next initial attempt.
    next: u64,
    /// Initial attempts this worker owns.
    initial_total: u64,
    /// Replacements owed by --reconnect.
    reconnects_owed: u64,
    /// Replacements made so far (for their attempt numbers).
    reconnects_made: u64,
    inflight: u64,
    max_inflight: u64,
    ramp_left: u64,
    connect_q: VecDeque<(usize, u64, Instant)>,
    probe_q: VecDeque<(usize, u64, Instant)>,
    life_q: VecDeque<(usize, u64, Instant)>,
    /// --connections-schedule: established connections, oldest first.
    open_q: VecDeque<(usize, u64)>,
    /// --connections-schedule: attempts made, and the pacing bucket.
    sched_made: u64,
    tokens: f64,
    refilled: Instant,
    /// Sockets created and bound ahead (--preallocate), in attempt order.
    prealloc: VecDeque<Socket>,
    scratch: Vec<u8>,
    out: Vec<u8>,
}

/// What a worker hands back when it stops.
pub struct Finished {
    pub connect_time: Histogram<u64>,
}

fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

impl Worker {
    pub fn new(s: Setup) -> Worker {
        let w = s.scenario.workers as u64;
        let id = s.id as u64;
        let n = s.scenario.connections;
        let initial_total = if s.scenario.connections_schedule.is_some() {
            // The schedule decides; there is no ramp of fixed attempts.
            0
        } else {
            n / w + u64::from(id < n % w)
        };
        let max_inflight = s.scenario.max_inflight_connects.div_ceil(w).max(1);
        s.counters.ramp_left.store(initial_total, Relaxed);
        Worker {
            id,
            nworkers: w,
            poll: s.poll,
            conns: Slab::new(),
            counters: s.counters,
            shared: s.shared,
            start: s.start,
            notify: s.notify,
            connect_time: new_histogram(),
            next: 0,
            initial_total,
            reconnects_owed: 0,
            reconnects_made: 0,
            inflight: 0,
            max_inflight,
            ramp_left: initial_total,
            connect_q: VecDeque::new(),
            probe_q: VecDeque::new(),
            life_q: VecDeque::new(),
            open_q: VecDeque::new(),
            sched_made: 0,
            tokens: 1.0,
            refilled: s.start,
            prealloc: VecDeque::new(),
            scratch: vec![0; 16 * 1024],
            out: Vec::with_capacity(64),
            sc: s.scenario,
        }
    }

    /// Creates and binds every socket this worker will connect (--preallocate).
    /// Failures are kept as `None` and counted when their turn comes.
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
    }

    pub fn run(mut self) -> io::Result<Finished> {
        let mut events = Events::with_capacity(1024);
        if self.ramp_left == 0 {
            let _ = self.notify.send(Reason::RampDone);
        }
        loop {
            let now = Instant::now();
            if self.sc.connections_schedule.is_some() {
                self.follow_schedule(now);
            }
            self.start_due(now);
            self.expire(now);
            let timeout = self
                .next_wakeup()
                .map(|t| t.saturating_duration_since(Instant::now()));
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
                    State::Probing | State::Held => {
                        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                            self.on_readable(key);
                        }
                    }
                }
            }
        }
        // The end of the run: close everything we hold, cleanly (FIN).
        let mut held = 0;
        for c in self.conns.drain() {
            if c.state != State::Connecting {
                held += 1;
                self.shared.closed();
            }
        }
        bump(&self.counters.closed, held);
        Ok(Finished {
            connect_time: self.connect_time,
        })
    }

    /// --connections-schedule: opens connections (paced by the ramp's rate)
    /// while this worker holds fewer than its share of the level the
    /// schedule asks for now, and closes its oldest while it holds more.
    fn follow_schedule(&mut self, now: Instant) {
        let Some(phases) = self.sc.connections_schedule.as_ref() else {
            return;
        };
        let t = now.saturating_duration_since(self.start).as_secs_f64();
        let total = crate::scenario::level_at(phases, t).round() as u64;
        let mine = total / self.nworkers + u64::from(self.id < total % self.nworkers);
        let rate = self.sc.ramp.rate() / self.nworkers as f64;
        let burst = (rate * 0.01).max(1.0);
        let dt = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + dt * rate).min(burst);
        self.refilled = now;
        while (self.conns.len() as u64) < mine
            && self.tokens >= 1.0
            && self.inflight < self.max_inflight
        {
            self.tokens -= 1.0;
            let seq = self.sched_made * self.nworkers + self.id;
            self.sched_made += 1;
            self.attempt(seq, false);
        }
        while (self.conns.len() as u64) > mine {
            let Some((key, seq)) = self.open_q.pop_front() else {
                break;
            };
            if self.conns.get(key).is_some_and(|c| c.seq == seq) {
                self.conns.remove(key);
                self.shared.closed();
                bump(&self.counters.closed, 1);
            }
        }
    }

    /// Starts every attempt that is due, within the in-flight cap.
    fn start_due(&mut self, now: Instant) {
        while self.inflight < self.max_inflight {
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

    fn attempt(&mut self, seq: u64, initial: bool) {
        bump(&self.counters.attempted, 1);
        let (target, source) = self.sc.endpoints(seq);
        let sock = match self.prealloc.pop_front() {
            Some(s) if initial => Ok(s),
            _ => connector::prepare(target, source),
        };
        // Connect time counts from just before connect(), not from when
        // the attempt was due (the schedule's lag is the ramp's business).
        let now = Instant::now();
        let started = sock.and_then(|s| connector::start(&s, target).map(|()| s));
        let sock = match started {
            Ok(s) => s,
            Err(errno) => {
                self.counters
                    .fail_errno(Bucket::of_connect_errno(errno), errno);
                self.resolved(initial);
                return;
            }
        };
        let mut stream = TcpStream::from_std(std::net::TcpStream::from(sock));
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        if let Err(e) = self.poll.registry().register(
            &mut stream,
            Token(key),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            let errno = errno_of(&e);
            self.counters
                .fail_errno(Bucket::of_connect_errno(errno), errno);
            self.resolved(initial);
            return;
        }
        entry.insert(Conn {
            stream,
            state: State::Connecting,
            seq,
            since: now,
            got_data: false,
            initial,
        });
        self.inflight += 1;
        self.connect_q
            .push_back((key, seq, now + self.sc.connect_timeout()));
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
        match result {
            Err(errno) => {
                self.counters
                    .fail_errno(Bucket::of_connect_errno(errno), errno);
                self.conns.remove(key);
                self.resolved(initial);
            }
            Ok(()) => {
                let now = Instant::now();
                let us = now.duration_since(conn.since).as_micros() as u64;
                self.connect_time.saturating_record(us.max(1));
                bump(&self.counters.established, 1);
                self.shared.opened();
                conn.since = now;
                if self.sc.connections_schedule.is_some() {
                    self.open_q.push_back((key, conn.seq));
                }
                if let Some(life) = self.sc.lifetime() {
                    self.life_q.push_back((key, conn.seq, now + life));
                }
                if self.sc.verify {
                    self.out.clear();
                    let id = conn.seq as u16;
                    wire::dns::build_tcp_query(
                        id,
                        "throng.probe",
                        wire::dns::rtype::A,
                        &mut self.out,
                    )
                    .expect("a valid probe name");
                    conn.state = State::Probing;
                    self.probe_q
                        .push_back((key, conn.seq, now + self.sc.connect_timeout()));
                    // A few dozen bytes into an empty socket buffer: written
                    // whole or failed; a failure shows up at the next read.
                    // The attempt is resolved when the probe is answered or
                    // times out.
                    let _ = conn.stream.write(&self.out);
                } else {
                    conn.state = State::Held;
                    self.resolved(initial);
                }
            }
        }
    }

    fn on_readable(&mut self, key: usize) {
        loop {
            let conn = &mut self.conns[key];
            match conn.stream.read(&mut self.scratch) {
                Ok(0) => return self.lost(key, Bucket::ClosedByPeer),
                Ok(_) => {
                    conn.got_data = true;
                    if conn.state == State::Probing {
                        // Only a server that accepted the connection can
                        // answer: any byte verifies it (a DNS server's
                        // response, the probe echoed back, anything else).
                        bump(&self.counters.verified, 1);
                        conn.state = State::Held;
                        let initial = conn.initial;
                        self.resolved(initial);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
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
            }
        }
    }

    /// An established connection ended by the server's doing.
    fn lost(&mut self, key: usize, bucket: Bucket) {
        let c = self.conns.remove(key);
        if c.state == State::Probing {
            self.resolved(c.initial);
        }
        self.shared.closed();
        self.counters.fail(bucket);
        if self.sc.reconnect {
            self.reconnects_owed += 1;
        }
    }

    /// Connect timeouts, probe timeouts, lifetimes.
    fn expire(&mut self, now: Instant) {
        while let Some(&(key, seq, at)) = self.connect_q.front() {
            if at > now {
                break;
            }
            self.connect_q.pop_front();
            if let Some(c) = self.conns.get(key) {
                if c.seq == seq && c.state == State::Connecting {
                    let initial = c.initial;
                    self.conns.remove(key);
                    self.inflight -= 1;
                    self.counters.fail(Bucket::TimedOut);
                    self.resolved(initial);
                }
            }
        }
        while let Some(&(key, seq, at)) = self.probe_q.front() {
            if at > now {
                break;
            }
            self.probe_q.pop_front();
            if let Some(c) = self.conns.get_mut(key) {
                if c.seq == seq && c.state == State::Probing {
                    // Established but unverified: kept, not failed.
                    c.state = State::Held;
                    bump(&self.counters.unverified, 1);
                    let initial = c.initial;
                    self.resolved(initial);
                }
            }
        }
        while let Some(&(key, seq, at)) = self.life_q.front() {
            if at > now {
                break;
            }
            self.life_q.pop_front();
            if self.conns.get(key).is_some_and(|c| c.seq == seq) {
                self.conns.remove(key);
                self.shared.closed();
                bump(&self.counters.closed, 1);
                if self.sc.reconnect {
                    self.reconnects_owed += 1;
                }
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
        if self.sc.connections_schedule.is_some() {
            // The level moves continuously: look again every 10 ms.
            consider(Instant::now() + Duration::from_millis(10));
        }
        // Round up so a wake-up never comes a hair early and spins.
        t.map(|t| t + Duration::from_micros(50))
    }
}
