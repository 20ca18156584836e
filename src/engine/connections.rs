//! A worker's connections ([`Conns`]): the slab indexed by their mio
//! token, the dialer that opens them and keeps their deadlines, and their
//! one end (see [`ConnEnd`]) with its bookkeeping: counters, verification,
//! the queries it lets go, the replacement it owes; and an attempt's
//! start (its socket made, connecting, registered). The way from there to
//! a held connection is [`Handshake`](super::handshake::Handshake)'s.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use mio::{Interest, Registry, Token};
use slab::Slab;

use super::conn::{Conn, ConnEnd, Flags, State, Verification, NOT_ACTIVE};
use super::dialer::Dialer;
use super::transport::ClientTransport;
use super::workload::{Workload, WorkloadMut};
use crate::domain::Proto;
use crate::metrics::{bump, Bucket, ConnCounters, Shared};
use crate::scenario::{Query, Scenario};
use crate::sys::timer::monotonic_ns;

pub(super) fn errno_of(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// What a run decides once about how its connections end.
pub(super) struct EndRules {
    /// Push: a connection counts its verification by its messages.
    push: bool,
    /// A held connection's verification is counted where it was verified
    /// (a TLS handshake, a probe's answer, its first answer) or found
    /// unverified (a probe that timed out), unless this run verifies
    /// nothing on it.
    counted_when_held: bool,
    /// The protocol the probe speaks, in words.
    probe: &'static str,
    reconnect: bool,
    replace_closed: bool,
}

impl EndRules {
    pub(super) fn new(sc: &Scenario, net: &ClientTransport, mode: &Workload) -> EndRules {
        EndRules {
            push: mode.is_push(),
            counted_when_held: sc.verify
                && (net.is_tls() || mode.has_traffic() || (!net.is_udp() && sc.probe.is_some())),
            probe: super::proto::word(
                sc.traffic
                    .as_ref()
                    .map(|t| &t.query)
                    .or(sc.probe.as_ref())
                    .map_or(Proto::Dns, Query::proto),
            ),
            reconnect: sc.reconnect,
            replace_closed: sc.replace_closed,
        }
    }
}

/// A worker's connections: the slab, the dialer that opens them and keeps
/// their deadlines, and their one way out ([`Conns::end`]).
pub(super) struct Conns {
    slab: Slab<Conn>,
    pub(super) dial: Dialer,
    rules: EndRules,
    pub(super) counters: Arc<ConnCounters>,
    pub(super) shared: Arc<Shared>,
    /// The instant the schedule counts from (set with
    /// [`Conns::set_start`]).
    pub(super) start: Instant,
    /// While a read's bytes are processed: when it returned (ns since the
    /// start). Every answer in one read arrived together, and the queries
    /// they let go leave with it: both are stamped with it.
    pub(super) read_at: Option<u64>,
    /// The first bytes (up to [`REFUSAL_SHOWN`]) of connections that got
    /// bytes before any answer, by key, while they wait for one: what a
    /// server that refuses says before it closes (a codec keeps only the
    /// tail it may still match). Gone once answered or ended.
    pub(super) first_bytes: std::collections::HashMap<usize, Vec<u8>>,
}

/// The most of a refusal's bytes kept to show (escaped, printable).
const REFUSAL_SHOWN: usize = 120;

impl Conns {
    pub(super) fn new(
        slab: Slab<Conn>,
        dial: Dialer,
        rules: EndRules,
        counters: Arc<ConnCounters>,
        shared: Arc<Shared>,
        start: Instant,
    ) -> Conns {
        Conns {
            slab,
            dial,
            rules,
            counters,
            shared,
            start,
            read_at: None,
            first_bytes: std::collections::HashMap::new(),
        }
    }

    /// The connection under `key`, if it is still there.
    #[inline]
    pub(super) fn get(&self, key: usize) -> Option<&Conn> {
        self.slab.get(key)
    }

    /// [`Conns::get`], to change it.
    #[inline]
    pub(super) fn get_mut(&mut self, key: usize) -> Option<&mut Conn> {
        self.slab.get_mut(key)
    }

    #[inline]
    pub(super) fn contains(&self, key: usize) -> bool {
        self.slab.contains(key)
    }

    /// The connections open or opening.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.slab.len()
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    /// Every connection with its key.
    pub(super) fn iter(&self) -> impl Iterator<Item = (usize, &Conn)> {
        self.slab.iter()
    }

    /// Every connection, taken out at the run's end (each is then counted
    /// by the worker's end-of-run bookkeeping).
    pub(super) fn take_all(&mut self) -> Vec<Conn> {
        self.slab.drain().collect()
    }

    /// The level's bookkeeping drops the connections that are gone.
    pub(super) fn prune_level(&mut self) {
        self.dial.prune(&self.slab);
    }

    /// The connection a lower --connections level closes next (see
    /// [`Dialer::level_close`]).
    pub(super) fn level_close(&mut self) -> Option<Option<usize>> {
        self.dial.level_close(&self.slab)
    }

    /// A connection whose connect deadline passed by `now`.
    pub(super) fn connect_expired(&mut self, now: Instant) -> Option<usize> {
        self.dial.connect_expired(now, &self.slab)
    }

    /// A connection whose probe or handshake deadline passed by `now`,
    /// with the state it was in.
    pub(super) fn probe_expired(&mut self, now: Instant) -> Option<(usize, State)> {
        self.dial.probe_expired(now, &self.slab)
    }

    /// A connection whose --lifetime ended by `now`.
    pub(super) fn life_expired(&mut self, now: Instant) -> Option<usize> {
        self.dial.life_expired(now, &self.slab)
    }

    /// The steady state's connections age by `now` (see [`Dialer::age`]).
    pub(super) fn age(&mut self, now: Instant) {
        self.dial.age(now, &mut self.slab);
    }

    /// Keeps the first bytes a connection got before any answer.
    #[inline]
    pub(super) fn got_unanswered(&mut self, key: usize, data: &[u8]) {
        let c = &self.slab[key];
        if (c.has(Flags::UNPROVEN) || c.state == State::Probing)
            && !self.first_bytes.contains_key(&key)
        {
            let n = data.len().min(REFUSAL_SHOWN);
            self.first_bytes.insert(key, data[..n].to_vec());
        }
    }

    /// An answer on `key`, which waited for one to be verified: it proves
    /// the server accepted the connection.
    pub(super) fn proven(&mut self, key: usize) {
        self.slab[key].set(Flags::UNPROVEN, false);
        self.verified(key);
    }

    /// The server answered on `key` (its probe, or its first query): it
    /// is verified, and what it said before is no refusal to keep.
    pub(super) fn verified(&mut self, key: usize) {
        bump(&self.counters.verified, 1);
        self.dial.served(self.slab[key].seq);
        if !self.first_bytes.is_empty() {
            self.first_bytes.remove(&key);
        }
    }

    /// The instant the schedule counts from.
    pub(super) fn set_start(&mut self, start: Instant) {
        self.start = start;
        self.dial.set_start(start);
    }

    /// The keys of the established connections (a list: the caller may
    /// end some while it goes through them).
    pub(super) fn held_keys(&self) -> Vec<usize> {
        self.slab
            .iter()
            .filter(|(_, c)| c.state == State::Held)
            .map(|(k, _)| k)
            .collect()
    }

    /// `t` in ns since the start.
    #[inline]
    pub(super) fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.start).as_nanos() as u64
    }

    /// Now, in ns since the start.
    #[inline]
    pub(super) fn now_ns(&self) -> u64 {
        self.ns(Instant::now())
    }

    /// The time answers and sends are stamped with: the read's being
    /// processed, else the clock's.
    #[inline]
    pub(super) fn stamp_ns(&self) -> u64 {
        self.read_at.unwrap_or_else(|| self.now_ns())
    }

    /// A --lifetime that ends owes a replacement (--reconnect).
    pub(super) fn reconnects(&self) -> bool {
        self.rules.reconnect
    }

    /// Starts connection attempt `seq` over `net` (`initial`: one of the
    /// ramp's), its socket registered with `registry`; its slab key once
    /// it is under way. A UDP one is connected at once ("connected" is only
    /// the peer address): the caller goes on with
    /// [`Handshake::on_connected`](super::handshake::Handshake::on_connected).
    pub(super) fn attempt(
        &mut self,
        seq: u64,
        initial: bool,
        sc: &Scenario,
        net: &ClientTransport,
        registry: &Registry,
    ) -> Option<usize> {
        bump(&self.counters.attempted, 1);
        let (target, source) = self.dial.endpoints(seq);
        // (A socket made before the start is the ramp's.)
        let made = self.dial.take_preallocated(initial);
        let dialed = net.connect(target, source, made);
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
        let entry = self.slab.vacant_entry();
        let key = entry.key();
        let registered = match link.source() {
            Some(s) => registry.register(s, Token(key), Interest::READABLE | Interest::WRITABLE),
            None => Err(std::io::ErrorKind::NotConnected.into()),
        };
        if let Err(e) = registered {
            self.not_started(initial, errno_of(&e));
            return None;
        }
        let target = (seq % sc.targets.len() as u64) as u32;
        entry.insert(Conn::new(link, seq, now, target, initial));
        let deadline = (!net.is_udp()).then(|| now + sc.connect_timeout());
        self.dial.connect_started(key, seq, deadline);
        Some(key)
    }

    /// The number of open connections asked for now: by
    /// --connections-schedule, or by `connections N` on --control once the
    /// ramp is done.
    pub(super) fn level(&self, now: Instant, sc: &Scenario) -> Option<u64> {
        let asked = self.shared.conn_level.load(Relaxed);
        if asked > 0 && self.dial.ramp_done() {
            return Some(asked - 1);
        }
        let phases = sc.connections_schedule.as_ref()?;
        let t = now.saturating_duration_since(self.start).as_secs_f64();
        Some(crate::scenario::level_at(phases, t).round() as u64)
    }

    /// An attempt failed before it had a connection to end.
    pub(super) fn not_started(&mut self, initial: bool, errno: i32) {
        self.counters
            .fail_errno(Bucket::of_connect_errno(errno), errno);
        self.dial.settled(initial);
        self.dial.resolved(initial);
    }

    /// The server answered the probe on `key` with a refusal: counted
    /// (the first in words) and remembered, so that the close which often
    /// follows is put down to it.
    pub(super) fn probe_rejected(&mut self, key: usize, what: String) {
        self.slab[key].set(Flags::REJECTED, true);
        self.counters.rejected(|| what);
    }

    /// The server said this response is its last on the connection: pick
    /// it no more (its close then counts as the server's right).
    pub(super) fn peer_closes(&mut self, key: usize, mode: &mut Workload) {
        let conn = &mut self.slab[key];
        conn.set(Flags::PEER_CLOSING, true);
        let pos = conn.active_pos;
        if let Some(t) = mode.traffic_mut().filter(|_| pos != NOT_ACTIVE) {
            t.leave(self, pos);
        }
    }

    /// Ends connection `key`: counts it in its one bucket, lets its
    /// queries go (lost, or due again elsewhere), and owes a replacement
    /// where the run asks for one.
    pub(super) fn end(&mut self, key: usize, why: ConnEnd, mode: WorkloadMut<'_>) {
        let first = match self.first_bytes.is_empty() {
            true => None,
            false => self.first_bytes.remove(&key),
        };
        let c = &self.slab[key];
        // A retiring one's replacement was owed when its lifetime ended.
        let replaced = c.has(Flags::RETIRING);
        let initial = c.initial();
        let pending = matches!(
            c.state,
            State::Handshaking | State::Probing | State::Upgrading
        );
        let mut closed_clean = false;
        match why {
            ConnEnd::ConnectFailed(errno) => {
                self.dial.connect_ended();
                self.counters
                    .fail_errno(Bucket::of_connect_errno(errno), errno);
            }
            ConnEnd::ConnectTimedOut => {
                self.dial.connect_ended();
                self.counters.fail(Bucket::TimedOut);
            }
            ConnEnd::Lost(bucket) => {
                closed_clean = self.count_lost(key, bucket, first);
                if !closed_clean {
                    bump(&self.counters.failed_established, 1);
                }
            }
            ConnEnd::Garbled => {
                self.counters.fail(Bucket::Reset);
                bump(&self.counters.failed_established, 1);
            }
            // (Counted in `failed` where the handshake failed.)
            ConnEnd::TlsFailed => bump(&self.counters.failed_established, 1),
            ConnEnd::Lifetime | ConnEnd::QueryTimedOut | ConnEnd::Recycled | ConnEnd::Closed => {
                bump(&self.counters.closed, 1);
            }
        }
        if matches!(why, ConnEnd::ConnectFailed(_) | ConnEnd::ConnectTimedOut) {
            self.slab.remove(key);
            self.dial.settled(initial);
            self.dial.resolved(initial);
            if let WorkloadMut::Traffic(t) = mode {
                t.pq_lost(0, || self.now_ns());
            }
            return;
        }
        self.drop_conn(key, why.by_server(), mode);
        // Counted and closed before the ramp hears of it: the main thread
        // reads the counters when the ramp is done.
        if pending && matches!(why, ConnEnd::Lost(_) | ConnEnd::TlsFailed) {
            self.dial.resolved(initial);
        }
        let replace = why.replaced(
            closed_clean,
            self.rules.reconnect,
            self.rules.replace_closed,
        );
        if replace && !replaced {
            self.dial.queue_reconnect();
        }
    }

    /// Counts an established connection the server ended; true when it
    /// was the server's right (a peer close), not a failure.
    fn count_lost(&mut self, key: usize, bucket: Bucket, first: Option<Vec<u8>>) -> bool {
        let c = &self.slab[key];
        let unanswered = c.state == State::Probing || c.has(Flags::UNPROVEN);
        let by_server = matches!(bucket, Bucket::ClosedByPeer | Bucket::Reset);
        if unanswered && by_server && !c.pending_in.is_empty() && !c.has(Flags::REJECTED) {
            // It sent something that is not a reply (an HTTP 400 to a DNS
            // query, Redis's "-ERR max number of clients reached", an
            // error line), then closed or reset before answering anything:
            // it accepted the connection and refused what came on it.
            let said = match &first {
                Some(b) => &b[..],
                None => &c.pending_in[..c.pending_in.len().min(REFUSAL_SHOWN)],
            };
            // (Redis's refusal is a reply of its protocol: not "not one".)
            let what = if said.starts_with(wire::resp::MAX_CLIENTS) {
                format!("it answered \"{}\" and closed", wire::escape::escape(said))
            } else {
                format!(
                    "it answered \"{}\", not a {} reply, and closed",
                    wire::escape::escape(said),
                    self.rules.probe
                )
            };
            self.probe_rejected(key, what);
            bump(&self.counters.verified, 1);
        }
        if unanswered && by_server {
            // Ended by the server before it answered anything: its
            // replacement waits (a full server is not stormed).
            let seq = self.slab[key].seq;
            self.dial.refused(std::time::Instant::now(), seq);
        }
        match self.slab[key].closed_as(bucket) {
            None => {
                bump(&self.counters.peer_closed, 1);
                let c = &self.slab[key];
                if c.flight.queries == 0 && bucket == Bucket::ClosedByPeer {
                    let ms = c.since.elapsed().as_millis() as u64;
                    bump(&self.counters.idle_closed, 1);
                    bump(&self.counters.idle_closed_ms, ms);
                    bump(&self.counters.idle_closed_ms_sq, ms.saturating_mul(ms));
                }
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
    pub(super) fn count_verification_at_end(&self, c: &Conn, by_server: bool) {
        if self.rules.push {
            return;
        }
        if c.flight.queries > 0 && !c.has(Flags::GOT_DATA) {
            bump(&self.counters.silent, 1);
        }
        match c.verification_at_end(by_server, self.rules.counted_when_held) {
            Some(Verification::Unverified) => bump(&self.counters.unverified, 1),
            Some(Verification::Idle) => bump(&self.counters.idle, 1),
            None => {}
        }
    }

    /// Takes `key` out (`by_server`: the server ended it, or its bytes or
    /// handshake did).
    fn drop_conn(&mut self, key: usize, by_server: bool, mut mode: WorkloadMut<'_>) {
        let connecting = self.slab[key].state == State::Connecting;
        if let WorkloadMut::Push(p) = &mut mode {
            if !connecting {
                p.close(key, monotonic_ns(), by_server, &self.counters);
            }
        }
        let c = self.slab.remove(key);
        self.dial.ends(&c);
        if !connecting {
            self.shared.closed();
        } else {
            bump(&self.counters.unresolved, 1);
        }
        self.count_verification_at_end(&c, by_server);
        // (Queries are in flight or waiting only where there is traffic.)
        if let WorkloadMut::Traffic(t) = mode {
            t.conn_ended(c, connecting, self);
        }
    }
}

impl std::ops::Index<usize> for Conns {
    type Output = Conn;

    #[inline]
    fn index(&self, key: usize) -> &Conn {
        &self.slab[key]
    }
}

impl std::ops::IndexMut<usize> for Conns {
    #[inline]
    fn index_mut(&mut self, key: usize) -> &mut Conn {
        &mut self.slab[key]
    }
}
