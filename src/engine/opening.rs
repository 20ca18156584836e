//! A connection's way in the worker from its attempt to held: connected,
//! TLS, the probe, held; each step where the transport, the poller or
//! the mode is needed. Its end is [`Conns::end`](super::connections::Conns::end).

use std::time::Instant;

use mio::{Interest, Token};
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

use super::conn::{Conn, End, Flags, State};
use super::connections::errno_of;
use super::dialer::CONNECTS_PER_TURN;
use super::worker::Worker;
use crate::metrics::{bump, connect_bucket};
use crate::sys::timer::monotonic_ns;

impl Worker {
    /// Opens connections (paced by the ramp's rate) while this worker holds
    /// fewer than its share of the level asked for, and closes its oldest
    /// while it holds more.
    pub(super) fn follow_level(&mut self, now: Instant) {
        self.conns.dial.prune(&self.conns.slab);
        let Some(total) = self.conns.level(now, &self.sc) else {
            return;
        };
        let mine = total / self.nworkers + u64::from(self.id < total % self.nworkers);
        self.conns.dial.refill(now, &self.sc);
        while self.conns.dial.counted(self.conns.slab.len()) < mine {
            let Some(seq) = self.conns.dial.level_attempt() else {
                break;
            };
            self.attempt(seq, false);
        }
        while self.conns.dial.counted(self.conns.slab.len()) > mine {
            match self.conns.dial.level_close(&self.conns.slab) {
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
            let Some((seq, initial)) = self.conns.dial.due(now, self.start, &self.sc) else {
                break;
            };
            self.attempt(seq, initial);
        }
    }

    /// Starts connection attempt `seq`; its slab key once it is under way.
    pub(super) fn attempt(&mut self, seq: u64, initial: bool) -> Option<usize> {
        bump(&self.counters.attempted, 1);
        let (target, source) = self.conns.dial.endpoints(&self.sc, seq);
        // (A socket made before the start is the ramp's.)
        let made = self.conns.dial.prealloc.pop_front().filter(|_| initial);
        let dialed = self.net.connect(target, source, made);
        let now = dialed.at;
        if let Some(call) = dialed.call {
            // The kernel's port search happens inside connect(): its time
            // tells the client's slowness from the server's.
            self.conns.dial.connect_call(call);
        }
        let mut link = match dialed.link {
            Ok(link) => link,
            Err(errno) => {
                self.conns.not_started(initial, errno);
                return None;
            }
        };
        let entry = self.conns.slab.vacant_entry();
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
            self.conns.not_started(initial, errno_of(&e));
            return None;
        }
        let target = (seq % self.sc.targets.len() as u64) as u32;
        entry.insert(Conn::new(link, seq, now, target, initial));
        self.conns.dial.inflight += 1;
        if self.net.is_udp() {
            // Nothing to wait for: "connected" is only the peer address.
            self.on_connected(key);
            return self.conns.slab.contains(key).then_some(key);
        }
        self.conns
            .dial
            .connect_q
            .push_back((key, seq, now + self.sc.connect_timeout()));
        Some(key)
    }

    pub(super) fn on_connected(&mut self, key: usize) {
        let conn = &mut self.conns.slab[key];
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
                self.conns.dial.inflight -= 1;
                self.established(key);
            }
            Err(errno) => self.end(key, End::ConnectFailed(errno)),
        }
    }

    fn established(&mut self, key: usize) {
        let initial = self.conns.slab[key].initial();
        self.conns.dial.settled(initial);
        let now = Instant::now();
        let conn = &mut self.conns.slab[key];
        let us = now.duration_since(conn.since).as_micros() as u64;
        self.conns.dial.connect_time.saturating_record(us.max(1));
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
            self.conns.dial.opened(key, conn.seq);
        }
        if let Some(life) = self.sc.lifetime() {
            self.conns
                .dial
                .life_q
                .push_back((key, conn.seq, now + life));
        }
        if let Some(p) = self.mode.push_mut() {
            // Its stream starts (UDP: it subscribes).
            let initial = self.conns.slab[key].initial();
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
        let conn = &mut self.conns.slab[key];
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
        self.conns
            .dial
            .probe_q
            .push_back((key, conn.seq, now + self.sc.connect_timeout()));
        self.mark_dirty(key);
    }

    /// The TLS handshake is done: the server accepted, and it is verified.
    pub(super) fn tls_ready(&mut self, key: usize) {
        let conn = &mut self.conns.slab[key];
        let took = conn.since.elapsed().as_micros() as u64;
        self.conns.dial.tls_handshake.saturating_record(took.max(1));
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
        let conn = &mut self.conns.slab[key];
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
            self.conns
                .dial
                .probe_q
                .push_back((key, conn.seq, now + self.sc.connect_timeout()));
        }
        let out = std::mem::take(&mut self.out);
        self.write(key, &out);
        self.out = out;
        if self.conns.slab[key].state != State::Probing {
            let initial = self.conns.slab[key].initial();
            self.held(key);
            self.conns.dial.resolved(initial);
        }
    }

    /// The connection is ready for traffic.
    pub(super) fn held(&mut self, key: usize) {
        let conn = &mut self.conns.slab[key];
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
        if !self.conns.slab[key].flight.waiting.is_empty() {
            self.after_progress(key);
        }
    }

    /// The server answered the probe: the connection is verified.
    pub(super) fn verified(&mut self, key: usize) {
        bump(&self.counters.verified, 1);
        let initial = self.conns.slab[key].initial();
        self.held(key);
        self.conns.dial.resolved(initial);
    }

    /// Ends connection `key` (see [`Conns::end`]).
    #[inline]
    pub(super) fn end(&mut self, key: usize, why: End) {
        self.conns.end(key, why, &mut self.mode, &self.q);
    }

    /// The server said this response is its last on the connection (see
    /// [`Conns::peer_closes`]).
    #[inline]
    pub(super) fn peer_closes(&mut self, key: usize) {
        self.conns.peer_closes(key, &mut self.mode);
    }
}
