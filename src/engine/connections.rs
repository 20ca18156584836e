//! A connection's life in the worker: the attempt, connected, TLS,
//! the probe, held, and its one end (see [`End`]).

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use mio::{Interest, Token};
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

use super::conn::{Conn, End, Flags, State, Verification, NOT_ACTIVE};
use super::dialer::CONNECTS_PER_TURN;
use super::worker::Worker;
use crate::metrics::{bump, connect_bucket, Bucket, E_CONN_LOST};
use crate::sys::timer::monotonic_ns;

fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

impl Worker {
    /// The number of open connections asked for now: by
    /// --connections-schedule, or by `connections N` on --control once the
    /// ramp is done.
    fn level(&self, now: Instant) -> Option<u64> {
        let asked = self.shared.conn_level.load(Relaxed);
        if asked > 0 && self.dial.ramp_done() {
            return Some(asked - 1);
        }
        let phases = self.sc.connections_schedule.as_ref()?;
        let t = now.saturating_duration_since(self.start).as_secs_f64();
        Some(crate::scenario::level_at(phases, t).round() as u64)
    }

    /// Opens connections (paced by the ramp's rate) while this worker holds
    /// fewer than its share of the level asked for, and closes its oldest
    /// while it holds more.
    pub(super) fn follow_level(&mut self, now: Instant) {
        self.dial.prune(&self.conns);
        let Some(total) = self.level(now) else {
            return;
        };
        let mine = total / self.nworkers + u64::from(self.id < total % self.nworkers);
        self.dial.refill(now, &self.sc);
        while self.dial.counted(self.conns.len()) < mine {
            let Some(seq) = self.dial.level_attempt() else {
                break;
            };
            self.attempt(seq, false);
        }
        while self.dial.counted(self.conns.len()) > mine {
            match self.dial.level_close(&self.conns) {
                None => break,
                Some(Some(key)) => self.end(key, End::Closed),
                Some(None) => {}
            }
        }
    }

    /// Starts the attempts that are due, within the in-flight cap, at most
    /// [`CONNECTS_PER_TURN`] per loop turn. What is left is still due, and
    /// the next turn polls without waiting.
    pub(super) fn start_due(&mut self, now: Instant) {
        for _ in 0..CONNECTS_PER_TURN {
            let Some((seq, initial)) = self.dial.due(now, self.start, &self.sc) else {
                break;
            };
            self.attempt(seq, initial);
        }
    }

    /// Starts connection attempt `seq`; its slab key once it is under way.
    pub(super) fn attempt(&mut self, seq: u64, initial: bool) -> Option<usize> {
        bump(&self.counters.attempted, 1);
        let (target, source) = self.dial.endpoints(&self.sc, seq);
        // (A socket made before the start is the ramp's.)
        let made = self.dial.prealloc.pop_front().filter(|_| initial);
        let dialed = self.net.connect(target, source, made);
        let now = dialed.at;
        if let Some(call) = dialed.call {
            // The kernel's port search happens inside connect(): its time
            // tells the client's slowness from the server's.
            self.dial.connect_call(call);
        }
        let mut link = match dialed.link {
            Ok(link) => link,
            Err(errno) => {
                self.not_started(initial, errno);
                return None;
            }
        };
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        let registered = match link.source() {
            Some(s) => self.poll.registry().register(
                s,
                Token(key),
                Interest::READABLE | Interest::WRITABLE,
            ),
            None => Err(std::io::ErrorKind::NotConnected.into()),
        };
        if let Err(e) = registered {
            self.not_started(initial, errno_of(&e));
            return None;
        }
        let target = (seq % self.sc.targets.len() as u64) as u32;
        entry.insert(Conn::new(link, seq, now, target, initial));
        self.dial.inflight += 1;
        if self.net.is_udp() {
            // Nothing to wait for: "connected" is only the peer address.
            self.on_connected(key);
            return self.conns.contains(key).then_some(key);
        }
        self.dial
            .connect_q
            .push_back((key, seq, now + self.sc.connect_timeout()));
        Some(key)
    }

    /// An attempt failed before it had a connection to end.
    fn not_started(&mut self, initial: bool, errno: i32) {
        self.counters
            .fail_errno(Bucket::of_connect_errno(errno), errno);
        self.dial.settled(initial);
        self.dial.resolved(initial);
    }

    pub(super) fn on_connected(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        let result = match conn.link.take_error() {
            Ok(Some(e)) | Err(e) => Err(errno_of(&e)),
            Ok(None) => match conn.link.peer_addr() {
                Ok(_) => Ok(()),
                // Not connected yet: a spurious wake-up; wait for the next.
                Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => return,
                Err(e) => Err(errno_of(&e)),
            },
        };
        match result {
            Ok(()) => {
                self.dial.inflight -= 1;
                self.established(key);
            }
            Err(errno) => self.end(key, End::ConnectFailed(errno)),
        }
    }

    fn established(&mut self, key: usize) {
        let initial = self.conns[key].initial();
        self.dial.settled(initial);
        let now = Instant::now();
        let conn = &mut self.conns[key];
        let us = now.duration_since(conn.since).as_micros() as u64;
        self.dial.connect_time.saturating_record(us.max(1));
        bump(&self.counters.connect_buckets[connect_bucket(us)], 1);
        bump(&self.counters.established, 1);
        if initial {
            bump(&self.counters.established_initial, 1);
        }
        self.shared.opened();
        if !self.mode.per_query() {
            // (tcp-per-query keeps the connect start: its query counts
            // from there, connect included.)
            conn.since = now;
        }
        if self.sc.connections_schedule.is_some() || self.sc.control {
            self.dial.opened(key, conn.seq);
        }
        if let Some(life) = self.sc.lifetime() {
            self.dial.life_q.push_back((key, conn.seq, now + life));
        }
        if let Some(p) = self.mode.push_mut() {
            // Its stream starts (UDP: it subscribes).
            let initial = self.conns[key].initial();
            let first = p.open(key, monotonic_ns(), initial, &self.counters);
            if let Some(first) = first {
                self.write(key, first);
            }
        }
        if self.net.is_tls() {
            self.start_tls(key, now);
            return;
        }
        self.ready(key, false);
    }

    /// TCP is up: start the TLS handshake (its ClientHello goes out at the
    /// end of this loop turn; --connect-timeout bounds it).
    fn start_tls(&mut self, key: usize, now: Instant) {
        let conn = &mut self.conns[key];
        match self.net.secure(&mut conn.link, conn.target) {
            Some(Ok(())) | None => {}
            Some(Err(e)) => {
                // Established (counted so): it ends as a TLS failure of an
                // established connection, not as an attempt unresolved.
                conn.state = State::Handshaking;
                self.counters.tls_failed(|| e.to_string());
                return self.end(key, End::TlsFailed);
            }
        }
        conn.state = State::Handshaking;
        self.dial
            .probe_q
            .push_back((key, conn.seq, now + self.sc.connect_timeout()));
        self.mark_dirty(key);
    }

    /// The TLS handshake is done: the server accepted, and it is verified.
    pub(super) fn tls_ready(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        let took = conn.since.elapsed().as_micros() as u64;
        self.dial.tls_handshake.saturating_record(took.max(1));
        let resumed = conn.link.tls().and_then(|t| t.handshake_kind())
            == Some(rustls::HandshakeKind::Resumed);
        if resumed {
            bump(&self.counters.tls_resumed, 1);
        }
        conn.since = Instant::now();
        self.ready(key, true);
    }

    /// The connection can carry queries: send the first message, then
    /// verify it (a probe, or the first query's answer) unless that is done.
    fn ready(&mut self, key: usize, verified: bool) {
        let now = Instant::now();
        let conn = &mut self.conns[key];
        let codec = self.mode.codec(&self.probe_codec);
        self.out.clear();
        if let Some(first) = codec.first_message() {
            self.out.extend_from_slice(first);
        }
        let first_query_verifies = self.sc.verify && self.mode.has_traffic() && !verified;
        // UDP has no acceptance to verify; without traffic nothing is sent
        // (nor without a probe: raw with no marker).
        let probe = self.sc.verify && !verified && !self.net.is_udp() && self.sc.probe.is_some();
        if verified && !self.mode.is_push() {
            // (A push connection is verified by its first message, over
            // TLS too: counted there, once.)
            bump(&self.counters.verified, 1);
        } else if first_query_verifies {
            // The run's own first query on this connection will verify it:
            // no separate probe, so the ramp costs one round trip less.
            conn.set(Flags::UNPROVEN, true);
        } else if probe {
            // The probe: one query of the run's protocol (a DNS query when
            // there is no traffic, which echo and DNS servers both answer).
            let mut rng = Pcg64Mcg::seed_from_u64(conn.seq);
            codec.encode(u64::MAX, conn.target as usize, 0, &mut rng, &mut self.out);
            conn.state = State::Probing;
            self.dial
                .probe_q
                .push_back((key, conn.seq, now + self.sc.connect_timeout()));
        }
        let out = std::mem::take(&mut self.out);
        self.write(key, &out);
        self.out = out;
        if self.conns[key].state != State::Probing {
            let initial = self.conns[key].initial();
            self.held(key);
            self.dial.resolved(initial);
        }
    }

    /// The connection is ready for traffic.
    pub(super) fn held(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        conn.state = State::Held;
        conn.pending_in = Vec::new();
        conn.resume = Default::default();
        if self.mode.per_query() {
            // Its one query waits in `waiting`: send it now.
            self.after_progress(key);
            return;
        }
        if let Some(t) = self.mode.traffic_mut() {
            conn.active_pos = t.active.len() as u32;
            t.active.push(key);
            let cap = t.cap.unwrap_or(u64::MAX);
            while conn.flight.queries + (conn.flight.waiting.len() as u64) < cap {
                // Queries that waited for a connection: this one's now.
                let Some(intended) = t.orphans.pop_front() else {
                    break;
                };
                conn.flight.waiting.push_back(intended);
            }
            if let Some(started) = t.started {
                // Joining a run in progress (a replacement connection).
                let now = self.start.elapsed().as_nanos() as u64;
                t.pacing.join(key, conn.seq, now, started, t.window);
            }
        }
        if !self.conns[key].flight.waiting.is_empty() {
            self.after_progress(key);
        }
    }

    /// The server answered the probe: the connection is verified.
    pub(super) fn verified(&mut self, key: usize) {
        bump(&self.counters.verified, 1);
        let initial = self.conns[key].initial();
        self.held(key);
        self.dial.resolved(initial);
    }

    /// The server answered the probe on `key` with a refusal: counted
    /// (the first in words) and remembered, so that the close which often
    /// follows is put down to it.
    pub(super) fn probe_rejected(&mut self, key: usize, what: String) {
        self.conns[key].set(Flags::REJECTED, true);
        self.counters.rejected(|| what);
    }

    /// The server said this response is its last on the connection: pick
    /// it no more (its close then counts as the server's right).
    pub(super) fn peer_closes(&mut self, key: usize) {
        let conn = &mut self.conns[key];
        conn.set(Flags::PEER_CLOSING, true);
        let pos = conn.active_pos;
        if let Some(t) = self.mode.traffic_mut().filter(|_| pos != NOT_ACTIVE) {
            t.leave(&mut self.conns, pos);
        }
    }

    /// Ends connection `key`: counts it in its one bucket, lets its
    /// queries go (lost, or due again elsewhere), and owes a replacement
    /// where the run asks for one.
    pub(super) fn end(&mut self, key: usize, why: End) {
        let c = &self.conns[key];
        // A retiring one's replacement was owed when its lifetime ended.
        let replaced = c.has(Flags::RETIRING);
        let initial = c.initial();
        let pending = matches!(c.state, State::Handshaking | State::Probing);
        let mut closed_clean = false;
        match why {
            End::ConnectFailed(errno) => {
                self.dial.inflight -= 1;
                self.counters
                    .fail_errno(Bucket::of_connect_errno(errno), errno);
            }
            End::ConnectTimedOut => {
                self.dial.inflight -= 1;
                self.counters.fail(Bucket::TimedOut);
            }
            End::Lost(bucket) => {
                closed_clean = self.count_lost(key, bucket);
                if !closed_clean {
                    bump(&self.counters.failed_established, 1);
                }
            }
            End::Garbled => {
                self.counters.fail(Bucket::Reset);
                bump(&self.counters.failed_established, 1);
            }
            // (Counted in `failed` where the handshake failed.)
            End::TlsFailed => bump(&self.counters.failed_established, 1),
            End::Lifetime | End::QueryTimedOut | End::Recycled | End::Closed => {
                bump(&self.counters.closed, 1);
            }
        }
        if matches!(why, End::ConnectFailed(_) | End::ConnectTimedOut) {
            self.conns.remove(key);
            self.dial.settled(initial);
            self.dial.resolved(initial);
            self.pq_lost(0);
            return;
        }
        self.drop_conn(key, why.by_server());
        // Counted and closed before the ramp hears of it: the main thread
        // reads the counters when the ramp is done.
        if pending && matches!(why, End::Lost(_) | End::TlsFailed) {
            self.dial.resolved(initial);
        }
        let replace = why.replaced(closed_clean, self.sc.reconnect, self.sc.replace_closed);
        if replace && !replaced {
            self.dial.owe();
        }
    }

    /// Counts an established connection the server ended; true when it
    /// was the server's right (a peer close), not a failure.
    fn count_lost(&mut self, key: usize, bucket: Bucket) -> bool {
        let c = &self.conns[key];
        if c.state == State::Probing && bucket == Bucket::ClosedByPeer && !c.pending_in.is_empty() {
            // It answered part of something that is not a reply to the
            // probe (an HTTP 400 to a DNS query), then closed: it accepted
            // the connection and refused the probe.
            let said = &c.pending_in[..c.pending_in.len().min(40)];
            let what = format!(
                "it answered \"{}\", not a {} reply, and closed",
                wire::escape::escape(said),
                self.sc
                    .probe
                    .as_ref()
                    .map_or("DNS", crate::scenario::Query::name)
            );
            self.probe_rejected(key, what);
            bump(&self.counters.verified, 1);
        }
        match self.conns[key].closed_as(bucket) {
            None => {
                bump(&self.counters.peer_closed, 1);
                true
            }
            Some(bucket) => {
                self.counters.fail(bucket);
                false
            }
        }
    }

    /// An established connection ends (here, or at the run's end): if its
    /// verification was not counted yet, it is now, once: unverified when
    /// something was asked on it and not answered (a probe, a query, a
    /// TLS ClientHello), idle when nothing was (no query yet, or no
    /// verification in this run). Push connections count theirs by their
    /// messages.
    /// `by_server`: the server ended it (a probe or handshake it left
    /// unanswered is then its doing); one the client closed (its lifetime,
    /// the run's end) while its probe or handshake was still within
    /// --connect-timeout says nothing, and is idle.
    pub(super) fn count_verification_at_end(&self, c: &super::conn::Conn, by_server: bool) {
        if self.mode.is_push() {
            return;
        }
        // Held: counted where it was verified (a TLS handshake, a probe's
        // answer, its first answer) or found unverified (a probe that timed
        // out), unless this run verifies nothing on it.
        let counted_when_held = self.sc.verify
            && (self.net.is_tls()
                || self.mode.has_traffic()
                || (!self.net.is_udp() && self.sc.probe.is_some()));
        match c.verification_at_end(by_server, counted_when_held) {
            Some(Verification::Unverified) => bump(&self.counters.unverified, 1),
            Some(Verification::Idle) => bump(&self.counters.idle, 1),
            None => {}
        }
    }

    /// Takes `key` out (`by_server`: the server ended it, or its bytes or
    /// handshake did).
    fn drop_conn(&mut self, key: usize, by_server: bool) {
        if self.conns[key].state != State::Connecting {
            if let Some(p) = self.mode.push_mut() {
                p.close(key, monotonic_ns(), by_server, &self.counters);
            }
        }
        let mut c = self.conns.remove(key);
        if c.state != State::Connecting {
            self.shared.closed();
        } else {
            bump(&self.counters.unresolved, 1);
        }
        self.count_verification_at_end(&c, by_server);
        let live = c.live();
        let per_query = self.mode.per_query();
        let untaken = c.has(Flags::PEER_CLOSING) && !per_query;
        if live > 0 && !untaken {
            bump(&self.q.errors[E_CONN_LOST], live);
        }
        if let Some(t) = self.mode.traffic_mut() {
            if live > 0 && untaken {
                // The server had said its last answer was its last (HTTP
                // `Connection: close`): queries that crossed that answer on
                // the wire never reached its work. They count as not sent;
                // in open loop they are due again on another connection
                // with their intended time (closed loop's replacement
                // connection starts its own).
                t.rec.unsent(live);
                // Not sent: their --queries tickets come back.
                if let Some(q) = t.quota.as_mut() {
                    *q += live;
                }
                if !t.pacing.closed_loop() {
                    t.orphans.extend(c.flight.live_intended());
                }
            }
            if c.active_pos != NOT_ACTIVE {
                t.leave(&mut self.conns, c.active_pos);
            }
            if let Some(id) = c.flight.take_deadline() {
                t.deadlines.remove(id);
            }
        }
        if c.state != State::Connecting {
            // (Connect failures count their own query where they happen.)
            self.pq_lost(c.flight.done + c.live());
        }
        // Due queries it never sent go to another connection (with
        // tcp-per-query the query failed with its connection: counted). A
        // closed loop's waiting queries are its window's slots, not a
        // schedule's: the replacement connection opens its own window,
        // from when it can send; handed to another connection with their
        // old times they would stack onto its window and count the wait
        // for this one's replacement as response time.
        if let Some(t) = self.mode.traffic_mut() {
            if !per_query && !t.pacing.closed_loop() {
                t.orphans.extend(c.flight.waiting);
            }
        }
    }
}
