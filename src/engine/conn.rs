//! One client connection: its link, where it is in its life, and its
//! queries in flight. Idle, it holds no buffer: the queues and vectors
//! allocate only while queries, partial frames or unsent bytes exist. Held
//! by the hundred thousand, so its size is guarded.

use std::time::Instant;

use super::inflight::Flight;
use super::link::Link;
use super::proto::Resume;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Connecting,
    /// TCP established; the TLS handshake is under way.
    Handshaking,
    /// Established; the probe was sent, its answer not seen yet.
    Probing,
    /// Established (and verified, or not verifiable in time).
    Held,
}

/// A connection's yes/no facts, packed in a byte.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Flags(u8);

impl Flags {
    /// The server said it closes after its last response (HTTP
    /// `Connection: close`): no more queries on this one.
    pub const PEER_CLOSING: u8 = 1;
    /// Some bytes came back from the server.
    pub const GOT_DATA: u8 = 1 << 1;
    /// One of the ramp's attempts (not a replacement).
    pub const INITIAL: u8 = 1 << 2;
    /// The server answered its probe with a refusal: a close that follows
    /// is that refusal's, not a failure of the server's accept.
    pub const REJECTED: u8 = 1 << 3;
    /// With traffic and --verify: still waiting for the first answer,
    /// which verifies the connection (no separate probe).
    pub const UNPROVEN: u8 = 1 << 4;
    /// In the worker's list of connections to flush.
    pub const DIRTY: u8 = 1 << 5;
    /// The socket refused bytes: wait for it to become writable.
    pub const BLOCKED: u8 = 1 << 6;
    /// Its --lifetime is over with queries in flight: it takes no new
    /// query and closes once the last is answered or timed out.
    pub const RETIRING: u8 = 1 << 7;

    #[inline]
    pub fn has(self, f: u8) -> bool {
        self.0 & f != 0
    }

    #[inline]
    pub fn set(&mut self, f: u8, on: bool) {
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
/// flags and the empty queues included): it must not grow unnoticed. (192
/// before the worker was split into parts; debug builds of mio add a
/// selector id to every socket.)
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
    pub fn has(&self, f: u8) -> bool {
        self.flags.has(f)
    }

    #[inline]
    pub fn set(&mut self, f: u8, on: bool) {
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

    /// It may send a query now: room in the window, the socket taking
    /// bytes and the server not closing.
    #[inline]
    pub fn room(&self, window: u64) -> bool {
        self.flight.live() < window && !self.has(Flags::BLOCKED | Flags::PEER_CLOSING)
    }
}

/// Why a connection ends: each way out counts in one place
/// (the worker's `end`), which also decides whether a replacement is owed.
/// (An attempt whose socket or connect() call failed at once never had a
/// connection: `not_started` counts it.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// connect() failed (errno) before the connection was up.
    ConnectFailed(i32),
    /// Not up within --connect-timeout.
    ConnectTimedOut,
    /// The server ended it (reset, close, ...): its bucket.
    Lost(crate::metrics::Bucket),
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
}
