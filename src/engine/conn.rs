//! One client connection: its link, where it is in its life, and its
//! queries in flight. Idle, it holds no buffer: the queues and vectors
//! allocate only while queries, partial frames or unsent bytes exist. Held
//! by the hundred thousand, so its size is guarded. How its end counts
//! (the server's right or a failure, verified or idle, replaced or not)
//! is decided here from its state alone, and tested without sockets.

use std::time::Instant;

use super::inflight::Flight;
use super::proto::Resume;
use super::transport::link::Link;
use crate::metrics::Bucket;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Connecting,
    /// TCP established; the TLS handshake is under way.
    Handshaking,
    /// Established; the probe was sent, its answer not seen yet.
    Probing,
    /// TCP (and TLS) up; the WebSocket upgrade was sent, its `101` not
    /// read yet.
    Upgrading,
    /// Established (and verified, or not verifiable in time).
    Held,
}

/// A connection's yes/no facts, packed in two bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags(u16);

impl Flags {
    /// The server said it closes after its last response (HTTP
    /// `Connection: close`): no more queries on this one.
    pub const PEER_CLOSING: u16 = 1;
    /// Some bytes came back from the server.
    pub const GOT_DATA: u16 = 1 << 1;
    /// One of the ramp's attempts (not a replacement).
    pub const INITIAL: u16 = 1 << 2;
    /// The server answered its probe with a refusal: a close that follows
    /// is that refusal's, not a failure of the server's accept.
    pub const REJECTED: u16 = 1 << 3;
    /// With traffic and --verify: still waiting for the first answer,
    /// which verifies the connection (no separate probe).
    pub const UNPROVEN: u16 = 1 << 4;
    /// In the worker's list of connections to flush.
    pub const DIRTY: u16 = 1 << 5;
    /// The socket refused bytes: wait for it to become writable.
    pub const BLOCKED: u16 = 1 << 6;
    /// Its --lifetime is over with queries in flight: it takes no new
    /// query and closes once the last is answered or timed out.
    pub const RETIRING: u16 = 1 << 7;
    /// Open for [`STEADY_AFTER`](super::dialer::STEADY_AFTER): counted in
    /// the worker's steady connections.
    pub const STEADY: u16 = 1 << 8;

    #[inline]
    pub fn has(self, f: u16) -> bool {
        self.0 & f != 0
    }

    #[inline]
    pub fn set(&mut self, f: u16, on: bool) {
        if on {
            self.0 |= f;
        } else {
            self.0 &= !f;
        }
    }
}

/// `Conn::active_pos` when it is not among the connections open-loop
/// queries pick from.
pub const NOT_ACTIVE: u32 = u32::MAX;

pub struct Conn {
    pub link: Link,
    pub state: State,
    pub flags: Flags,
    /// The attempt number (unique in the run).
    pub seq: u64,
    /// Connect start, then the instant it was established.
    pub since: Instant,
    pub target: u32,
    /// Its place among the worker's active connections (or NOT_ACTIVE).
    pub active_pos: u32,
    pub flight: Flight,
    /// The start of a frame not complete yet.
    pub pending_in: Vec<u8>,
    /// How far decoding got in `pending_in`.
    pub resume: Resume,
    /// Bytes to write: queries encoded this loop turn (written together at
    /// its end, one syscall for many queries), or what the socket did not
    /// take.
    pub pending_out: Vec<u8>,
}

/// What every held connection costs in the worker's slab (the link, the
/// flags and the empty queues included): it must not grow unnoticed.
/// (Debug builds of mio add a selector id to every socket.)
pub const CONN_BYTES: usize = if cfg!(debug_assertions) { 200 } else { 192 };
const _: () = assert!(std::mem::size_of::<Conn>() <= CONN_BYTES);

impl Conn {
    pub fn new(link: Link, seq: u64, since: Instant, target: u32, initial: bool) -> Conn {
        let mut flags = Flags::default();
        flags.set(Flags::INITIAL, initial);
        Conn {
            link,
            state: State::Connecting,
            flags,
            seq,
            since,
            target,
            active_pos: NOT_ACTIVE,
            flight: Flight::default(),
            pending_in: Vec::new(),
            resume: Resume::default(),
            pending_out: Vec::new(),
        }
    }

    #[inline]
    pub fn has(&self, f: u16) -> bool {
        self.flags.has(f)
    }

    #[inline]
    pub fn set(&mut self, f: u16, on: bool) {
        self.flags.set(f, on);
    }

    pub fn initial(&self) -> bool {
        self.has(Flags::INITIAL)
    }

    /// Queries sent and neither answered nor timed out.
    #[inline]
    pub fn live(&self) -> u64 {
        self.flight.live()
    }

    /// How the server's end of this connection (`bucket`) counts: None
    /// when it was the server's right, a failure's bucket otherwise. Held,
    /// it answered all it was sent, or said its last answer was its last,
    /// or had nothing to answer, then closed (a keep-alive limit, an idle
    /// timeout): the server's right. (After an announced close the server
    /// may also reset: queries that crossed its last answer arrived at a
    /// closed socket.) A close with nothing in flight is an idle close,
    /// whether or not the connection had carried a query yet: one thing,
    /// counted one way. A close or reset after a refused probe is that
    /// refusal's.
    pub fn closed_as(&self, bucket: Bucket) -> Option<Bucket> {
        let bucket = match bucket {
            Bucket::ClosedByPeer | Bucket::Reset if self.has(Flags::REJECTED) => Bucket::Rejected,
            b => b,
        };
        let announced = self.has(Flags::PEER_CLOSING)
            && matches!(bucket, Bucket::ClosedByPeer | Bucket::Reset)
            || bucket == Bucket::ClosedByPeer && self.live() == 0;
        if self.state == State::Held && announced {
            None
        } else {
            Some(bucket)
        }
    }

    /// How this connection's verification counts when it ends (None: it
    /// was counted already, or is not this connection's to count): unverified
    /// when something was asked on it and not answered (a probe, a query,
    /// a TLS ClientHello), idle when nothing was. `by_server`: the server
    /// ended it (a probe or handshake left unanswered is then its doing;
    /// one the client closed while within --connect-timeout says nothing).
    /// `counted_when_held`: the run verifies held connections (so a held
    /// one was counted where it was verified or found unverified).
    pub fn verification_at_end(
        &self,
        by_server: bool,
        counted_when_held: bool,
    ) -> Option<Verification> {
        let asked_unanswered = match self.state {
            State::Connecting => return None,
            State::Handshaking => by_server,
            // A refused upgrade was counted (verified: it was accepted).
            State::Upgrading if self.has(Flags::REJECTED) => return None,
            State::Upgrading => by_server,
            // A refused probe was counted (verified: it was accepted).
            State::Probing if self.has(Flags::REJECTED) => return None,
            State::Probing => by_server,
            // A refusal was counted (verified: it was accepted).
            _ if self.has(Flags::REJECTED) => return None,
            _ if self.has(Flags::UNPROVEN) => self.flight.queries > 0,
            _ if counted_when_held => return None,
            _ => false,
        };
        Some(if asked_unanswered {
            Verification::Unverified
        } else {
            Verification::Idle
        })
    }

    /// It may send a query now: room in the window, the socket taking
    /// bytes and the server not closing.
    #[inline]
    pub fn room(&self, window: u64) -> bool {
        self.flight.live() < window && !self.has(Flags::BLOCKED | Flags::PEER_CLOSING)
    }
}

/// What became of a connection an event was handled on: still open, or
/// ended (its one end counted by
/// [`Conns::end`](super::connections::Conns::end)), so that nothing more
/// is done on its key. Liveness is decided from this, not by looking the
/// key up again (which a replacement may have taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Next {
    Open,
    Ended,
}

impl Next {
    #[inline]
    pub fn is_open(self) -> bool {
        self == Next::Open
    }
}

/// A connection's verification, counted when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    Unverified,
    Idle,
}

/// Why a connection ends: each way out counts in one place
/// ([`Conns::end`](super::connections::Conns::end)), which also decides whether a replacement is owed.
/// (An attempt whose socket or connect() call failed at once never had a
/// connection: `not_started` counts it.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnEnd {
    /// connect() failed (errno) before the connection was up.
    ConnectFailed(i32),
    /// Not up within --connect-timeout.
    ConnectTimedOut,
    /// The server ended it (reset, close, ...): its bucket.
    Lost(Bucket),
    /// Bytes that cannot be framed as answers.
    Garbled,
    /// TLS failed (counted with its words where it happened).
    TlsFailed,
    /// Our choice: its --lifetime ended.
    Lifetime,
    /// Our choice: a query timed out and --close-on-timeout.
    QueryTimedOut,
    /// Our choice: --max-queries-per-conn reached; always replaced.
    Recycled,
    /// Our choice: its work is done, or a level asks for fewer.
    Closed,
}

impl ConnEnd {
    /// The server ended it, or its bytes or handshake did.
    pub fn by_server(self) -> bool {
        matches!(
            self,
            ConnEnd::Lost(_) | ConnEnd::Garbled | ConnEnd::TlsFailed
        )
    }

    /// A replacement is owed: always for a recycled one; with --reconnect
    /// for one lost or closed by a limit of ours; with --replace-closed too
    /// for one the server closed by right (`closed_clean`).
    pub fn replaced(self, closed_clean: bool, reconnect: bool, replace_closed: bool) -> bool {
        match self {
            ConnEnd::Recycled => true,
            ConnEnd::Lost(_) if closed_clean => reconnect || replace_closed,
            ConnEnd::Lost(_)
            | ConnEnd::Garbled
            | ConnEnd::TlsFailed
            | ConnEnd::Lifetime
            | ConnEnd::QueryTimedOut => reconnect,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_independent_bits() {
        let all = [
            Flags::PEER_CLOSING,
            Flags::GOT_DATA,
            Flags::INITIAL,
            Flags::REJECTED,
            Flags::UNPROVEN,
            Flags::DIRTY,
            Flags::BLOCKED,
        ];
        let mut f = Flags::default();
        for (i, &a) in all.iter().enumerate() {
            assert!(!f.has(a));
            f.set(a, true);
            for &b in &all[..=i] {
                assert!(f.has(b));
            }
            for &b in &all[i + 1..] {
                assert!(!f.has(b));
            }
        }
        f.set(Flags::DIRTY, false);
        assert!(!f.has(Flags::DIRTY) && f.has(Flags::BLOCKED) && f.has(Flags::INITIAL));
        // `has` of several: any of them.
        assert!(f.has(Flags::DIRTY | Flags::BLOCKED));
    }

    /// A connection with no socket, in `state`, with `flags` set and
    /// `live` queries in flight.
    fn conn(state: State, flags: &[u16], live: u64) -> Conn {
        let mut c = Conn::new(Link::Detached, 7, Instant::now(), 0, true);
        c.state = state;
        for &f in flags {
            c.set(f, true);
        }
        for n in 0..live {
            c.flight.sent(super::super::inflight::Outstanding {
                key: n,
                intended: 0,
                sent: 0,
                timed_out: false,
                qtype_slot: 0,
            });
        }
        c
    }

    #[test]
    fn an_idle_close_of_a_held_connection_is_the_servers_right() {
        let c = conn(State::Held, &[], 0);
        assert_eq!(c.closed_as(Bucket::ClosedByPeer), None);
        // A reset is not a close, idle or not.
        assert_eq!(c.closed_as(Bucket::Reset), Some(Bucket::Reset));
    }

    #[test]
    fn a_close_with_queries_in_flight_fails_unless_announced() {
        let c = conn(State::Held, &[], 2);
        assert_eq!(
            c.closed_as(Bucket::ClosedByPeer),
            Some(Bucket::ClosedByPeer)
        );
        let c = conn(State::Held, &[Flags::PEER_CLOSING], 2);
        assert_eq!(c.closed_as(Bucket::ClosedByPeer), None);
        assert_eq!(
            c.closed_as(Bucket::Reset),
            None,
            "queries crossed its close"
        );
    }

    #[test]
    fn a_close_before_the_connection_is_held_is_a_failure() {
        for state in [State::Handshaking, State::Probing] {
            let c = conn(state, &[], 0);
            assert_eq!(
                c.closed_as(Bucket::ClosedByPeer),
                Some(Bucket::ClosedByPeer)
            );
        }
    }

    #[test]
    fn a_close_after_a_refused_probe_is_the_refusal() {
        let c = conn(State::Probing, &[Flags::REJECTED], 0);
        assert_eq!(c.closed_as(Bucket::ClosedByPeer), Some(Bucket::Rejected));
        assert_eq!(c.closed_as(Bucket::Reset), Some(Bucket::Rejected));
        assert_eq!(c.closed_as(Bucket::HalfOpen), Some(Bucket::HalfOpen));
    }

    #[test]
    fn an_unanswered_probe_or_handshake_is_unverified_when_the_server_ended_it() {
        for state in [State::Handshaking, State::Probing] {
            let c = conn(state, &[], 0);
            assert_eq!(
                c.verification_at_end(true, true),
                Some(Verification::Unverified)
            );
            // Closed by us within --connect-timeout: it says nothing.
            assert_eq!(c.verification_at_end(false, true), Some(Verification::Idle));
        }
        let c = conn(State::Probing, &[Flags::REJECTED], 0);
        assert_eq!(c.verification_at_end(true, true), None, "counted verified");
        let c = conn(State::Connecting, &[], 0);
        assert_eq!(c.verification_at_end(true, true), None, "never established");
    }

    #[test]
    fn a_held_connection_waiting_for_its_first_answer_is_unverified_once_asked() {
        let c = conn(State::Held, &[Flags::UNPROVEN], 1);
        assert_eq!(
            c.verification_at_end(false, true),
            Some(Verification::Unverified)
        );
        let c = conn(State::Held, &[Flags::UNPROVEN], 0);
        assert_eq!(c.verification_at_end(false, true), Some(Verification::Idle));
    }

    #[test]
    fn a_held_connection_is_counted_where_it_was_verified_if_the_run_verifies() {
        let c = conn(State::Held, &[], 0);
        assert_eq!(c.verification_at_end(true, true), None);
        assert_eq!(c.verification_at_end(true, false), Some(Verification::Idle));
    }

    #[test]
    fn replacements_are_owed_by_the_way_out() {
        let lost = ConnEnd::Lost(Bucket::Reset);
        // (closed_clean, reconnect, replace_closed)
        assert!(ConnEnd::Recycled.replaced(false, false, false));
        assert!(
            !lost.replaced(false, false, true),
            "a failure: --reconnect only"
        );
        assert!(lost.replaced(false, true, false));
        assert!(
            lost.replaced(true, false, true),
            "a clean close: --replace-closed"
        );
        for end in [
            ConnEnd::Garbled,
            ConnEnd::TlsFailed,
            ConnEnd::Lifetime,
            ConnEnd::QueryTimedOut,
        ] {
            assert!(end.replaced(false, true, false));
            assert!(!end.replaced(false, false, true));
        }
        for end in [
            ConnEnd::Closed,
            ConnEnd::ConnectFailed(111),
            ConnEnd::ConnectTimedOut,
        ] {
            assert!(!end.replaced(true, true, true));
        }
        assert!(lost.by_server() && ConnEnd::Garbled.by_server() && ConnEnd::TlsFailed.by_server());
        assert!(!ConnEnd::Lifetime.by_server() && !ConnEnd::Closed.by_server());
    }
}
