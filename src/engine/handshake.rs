//! A connection's way from its attempt to held ([`Handshake`]): connected,
//! TLS, the probe, held; and tcp-per-query's connection for each query.
//! It owns the transport ([`ClientTransport`]) and the codec probes are built with;
//! the connections, the mode and the writes it acts on are arguments. Its
//! end is [`Conns::end`].

use std::sync::Arc;
use std::time::Instant;

use mio::Registry;
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

use super::conn::{ConnEnd, Flags, State};
use super::connections::{errno_of, Conns};
use super::dialer::CONNECTS_PER_TURN;
use super::outbox::Outbox;
use super::proto::ws::Upgrader;
use super::proto::Codec;
use super::transport::ClientTransport;
use super::workload::{TrafficState, Workload};
use crate::metrics::{bump, connect_bucket, ws_refused_slot, Bucket};
use crate::scenario::Scenario;
use crate::sys::timer::monotonic_ns;

pub(super) struct Handshake {
    /// TCP, TLS or UDP: decided once.
    pub(super) net: ClientTransport,
    /// The codec probes are built with, and answers framed with when there
    /// is no traffic.
    pub(super) probe: Codec,
    pub(super) sc: Arc<Scenario>,
    /// This worker and how many there are (its share of a level).
    id: u64,
    nworkers: u64,
    /// WebSocket: the upgrade every connection makes before it is held.
    pub(super) ws: Option<Upgrader>,
}

impl Handshake {
    /// `hosts`: the targets as given (the upgrade's `Host` headers);
    /// `(id, nworkers)`: this worker and how many there are.
    pub(super) fn new(
        net: ClientTransport,
        probe: Codec,
        sc: Arc<Scenario>,
        hosts: &[String],
        (id, nworkers): (u64, u64),
    ) -> Handshake {
        let ws = sc.websocket.as_ref().map(|u| Upgrader::new(u, hosts));
        Handshake {
            net,
            probe,
            sc,
            id,
            nworkers,
            ws,
        }
    }

    /// Opens connections (paced by the ramp's rate) while this worker holds
    /// fewer than its share of the level asked for, and closes its oldest
    /// while it holds more. (Once a loop turn: inlined.)
    #[inline]
    pub(super) fn follow_level(
        &self,
        now: Instant,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
        registry: &Registry,
    ) {
        conns.prune_level();
        let Some(total) = conns.level(now, &self.sc) else {
            return;
        };
        let mine = total / self.nworkers + u64::from(self.id < total % self.nworkers);
        conns.dial.refill(now, &self.sc);
        while conns.dial.counted(conns.len()) < mine {
            if !conns.dial.may_open(now) {
                break;
            }
            let Some(seq) = conns.dial.level_attempt() else {
                break;
            };
            self.attempt(seq, false, conns, mode, out, registry);
        }
        while conns.dial.counted(conns.len()) > mine {
            match conns.level_close() {
                None => break,
                Some(Some(key)) => conns.end(key, ConnEnd::Closed, mode.as_mut()),
                Some(None) => {}
            }
        }
    }

    /// Starts the attempts that are due, within the in-flight cap, at most
    /// [`CONNECTS_PER_TURN`] per loop turn. What is left is still due, and
    /// the next turn polls without waiting. (Once a loop turn: inlined.)
    #[inline]
    pub(super) fn start_due(
        &self,
        now: Instant,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
        registry: &Registry,
    ) {
        for _ in 0..CONNECTS_PER_TURN {
            let Some((seq, initial)) = conns.dial.due(now, conns.start, &self.sc) else {
                break;
            };
            self.attempt(seq, initial, conns, mode, out, registry);
        }
    }

    /// Starts connection attempt `seq` (see [`Conns::attempt`]); a UDP one
    /// goes on at once.
    fn attempt(
        &self,
        seq: u64,
        initial: bool,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
        registry: &Registry,
    ) {
        let Some(key) = conns.attempt(seq, initial, &self.sc, &self.net, registry) else {
            return;
        };
        if self.net.is_udp() {
            // Nothing to wait for: "connected" is only the peer address.
            self.on_connected(key, conns, mode, out);
        }
    }

    /// The socket of `key` said it is connected, or failed.
    pub(super) fn on_connected(
        &self,
        key: usize,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
    ) {
        let conn = &mut conns[key];
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
                conns.dial.connect_ended();
                self.established(key, conns, mode, out);
            }
            Err(errno) => conns.end(key, ConnEnd::ConnectFailed(errno), mode.as_mut()),
        }
    }

    fn established(&self, key: usize, conns: &mut Conns, mode: &mut Workload, out: &mut Outbox) {
        let initial = conns[key].initial();
        conns.dial.settled(initial);
        let now = Instant::now();
        let (since, seq) = (conns[key].since, conns[key].seq);
        let us = now.duration_since(since).as_micros() as u64;
        conns.dial.connected_in(us);
        let counters = &conns.counters;
        bump(&counters.connect_buckets[connect_bucket(us)], 1);
        bump(&counters.established, 1);
        if initial {
            bump(&counters.established_initial, 1);
        }
        conns.shared.opened();
        if !mode.per_query() {
            // (tcp-per-query keeps the connect start: its query counts
            // from there, connect included.)
            conns[key].since = now;
            conns.dial.established(key, seq, now);
        }
        let sc = &self.sc;
        if sc.connections_schedule.is_some() || sc.control {
            conns.dial.opened(key, seq);
        }
        if let Some(life) = sc.lifetime() {
            conns.dial.end_of_life(key, seq, now + life);
        }
        if let Some(p) = mode.push_mut() {
            // Its stream starts (UDP: it subscribes).
            let first = p.open(key, monotonic_ns(), initial, &conns.counters);
            if let Some(first) = first {
                out.write(conns, key, first);
            }
        }
        if self.net.is_tls() {
            self.start_tls(key, now, conns, mode, out);
            return;
        }
        self.ready(key, false, conns, mode, out);
    }

    /// TCP is up: start the TLS handshake (its ClientHello goes out at the
    /// end of this loop turn; --connect-timeout bounds it).
    fn start_tls(
        &self,
        key: usize,
        now: Instant,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
    ) {
        let conn = &mut conns[key];
        match self.net.secure(&mut conn.link, conn.target) {
            Some(Ok(())) | None => {}
            Some(Err(e)) => {
                // Established (counted so): it ends as a TLS failure of an
                // established connection, not as an attempt unresolved.
                conn.state = State::Handshaking;
                conns.counters.tls_failed(|| e.to_string());
                return conns.end(key, ConnEnd::TlsFailed, mode.as_mut());
            }
        }
        conn.state = State::Handshaking;
        let seq = conn.seq;
        conns
            .dial
            .probe_by(key, seq, now + self.sc.connect_timeout());
        out.mark_dirty(conns, key);
    }

    /// The TLS handshake is done: the server accepted, and it is verified.
    pub(super) fn tls_ready(
        &self,
        key: usize,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
    ) {
        let conn = &mut conns[key];
        let took = conn.since.elapsed().as_micros() as u64;
        let resumed = conn.link.tls().and_then(|t| t.handshake_kind())
            == Some(rustls::HandshakeKind::Resumed);
        conn.since = Instant::now();
        conns.dial.tls_handshake_in(took);
        if resumed {
            bump(&conns.counters.tls_resumed, 1);
        }
        self.ready(key, true, conns, mode, out);
    }

    /// TCP (and TLS) is up: a WebSocket connection sends its upgrade
    /// (--connect-timeout bounds the wait for its `101`); any other is
    /// ready.
    fn ready(
        &self,
        key: usize,
        verified: bool,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
    ) {
        let Some(ws) = &self.ws else {
            return self.on_ready(key, verified, conns, mode, out);
        };
        let now = Instant::now();
        let conn = &mut conns[key];
        ws.request(conn.target as usize, conn.seq, out.message());
        conn.state = State::Upgrading;
        conn.since = now;
        let seq = conn.seq;
        conns
            .dial
            .probe_by(key, seq, now + self.sc.connect_timeout());
        out.send_message(conns, key);
    }

    /// The server answered the upgrade with a valid `101`: the connection
    /// is verified, and carries messages from now on.
    pub(super) fn upgraded(
        &self,
        key: usize,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
    ) {
        let conn = &mut conns[key];
        let took = conn.since.elapsed().as_micros() as u64;
        conn.since = Instant::now();
        conns.dial.ws_upgrade_in(took);
        self.on_ready(key, true, conns, mode, out);
    }

    /// The server refused the upgrade (`status`: its HTTP status, None
    /// when it gave no HTTP answer; `what`: its status and first line, or
    /// what is wrong with its answer), or left it unanswered: counted by
    /// status and as a refused probe (the connection was accepted, so
    /// verified), and the connection ends a failure (`rejected`).
    pub(super) fn ws_refused(
        &self,
        key: usize,
        status: Option<u16>,
        what: String,
        conns: &mut Conns,
        mode: &mut Workload,
    ) {
        bump(&conns.counters.ws_refused[ws_refused_slot(status)], 1);
        if !mode.is_push() {
            // (A push connection counts its verification by its messages:
            // with none, idle.)
            bump(&conns.counters.verified, 1);
        }
        conns.probe_rejected(key, what);
        conns.end(key, ConnEnd::Lost(Bucket::ClosedByPeer), mode.as_mut());
    }

    /// The connection can carry queries: send the first message, then
    /// verify it (a probe, or the first query's answer) unless that is done.
    fn on_ready(
        &self,
        key: usize,
        verified: bool,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
    ) {
        let now = Instant::now();
        let sc = &self.sc;
        let conn = &mut conns[key];
        let codec = mode.codec(&self.probe);
        let msg = out.message();
        if let Some(first) = codec.first_message() {
            msg.extend_from_slice(first);
        }
        let first_query_verifies = sc.verify && mode.has_traffic() && !verified;
        // UDP has no acceptance to verify; without traffic nothing is sent
        // (nor without a probe: raw with no marker).
        let probe = sc.verify && !verified && !self.net.is_udp() && sc.probe.is_some();
        if verified && !mode.is_push() {
            // (A push connection is verified by its first message, over
            // TLS too: counted there, once.)
            bump(&conns.counters.verified, 1);
        } else if first_query_verifies {
            // The run's own first query on this connection will verify it:
            // no separate probe, so the ramp costs one round trip less.
            conn.set(Flags::UNPROVEN, true);
        } else if probe {
            // The probe: one query of the run's protocol (a DNS query when
            // there is no traffic, which echo and DNS servers both answer).
            let mut rng = Pcg64Mcg::seed_from_u64(conn.seq);
            codec.encode(u64::MAX, conn.target as usize, 0, &mut rng, msg);
            conn.state = State::Probing;
            let seq = conn.seq;
            conns.dial.probe_by(key, seq, now + sc.connect_timeout());
        }
        out.send_message(conns, key);
        if conns[key].state != State::Probing {
            let initial = conns[key].initial();
            self.held(key, conns, mode, out);
            conns.dial.resolved(initial);
        }
    }

    /// The connection is ready for traffic.
    pub(super) fn held(
        &self,
        key: usize,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
    ) {
        let now = conns.now_ns();
        let conn = &mut conns[key];
        conn.state = State::Held;
        conn.pending_in = Vec::new();
        conn.resume = Default::default();
        let Some(t) = mode.traffic_mut() else {
            return;
        };
        if t.join(key, conn, now) {
            t.after_progress(key, conns, out);
        }
    }

    /// The server answered the probe: the connection is verified.
    pub(super) fn verified(
        &self,
        key: usize,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
    ) {
        conns.verified(key);
        let initial = conns[key].initial();
        self.held(key, conns, mode, out);
        conns.dial.resolved(initial);
    }

    // ---- tcp-per-query ---------------------------------------------------

    /// A query is due at `intended`: it gets a connection of its own now,
    /// or waits for a free slot (see [`TrafficState::per_query_due`]).
    pub(super) fn per_query(
        &self,
        intended: u64,
        conns: &mut Conns,
        t: &mut TrafficState,
        registry: &Registry,
    ) {
        let now = conns.stamp_ns();
        t.per_query_due(intended, now, conns.len() as u64);
        self.pq_fill(conns, t, registry);
    }

    /// tcp-per-query: opens connections for waiting queries while slots
    /// are free. (Twice a loop turn: what it asks of other runs is one
    /// look, inlined.)
    #[inline]
    pub(super) fn pq_fill(&self, conns: &mut Conns, t: &mut TrafficState, registry: &Registry) {
        if t.slot_wanted() {
            self.pq_open(conns, t, registry);
        }
    }

    /// Opens connections for the queries waiting for a slot. (Its
    /// transport is TCP: an attempt goes no further than its connect.)
    fn pq_open(&self, conns: &mut Conns, t: &mut TrafficState, registry: &Registry) {
        debug_assert!(!self.net.is_udp());
        while let Some(intended) = t.next_for_slot(conns.len() as u64) {
            let seq = conns.dial.replacement();
            match conns.attempt(seq, false, &self.sc, &self.net, registry) {
                Some(key) => conns[key].flight.waiting.push_back(intended),
                None => {
                    // (tcp-per-query: its connection failed to start.)
                    let now = conns.now_ns();
                    t.pq_lost(0, || now);
                }
            }
        }
    }
}
