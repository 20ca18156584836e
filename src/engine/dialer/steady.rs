//! Which of a worker's connections are steady: open for [`STEADY_AFTER`]
//! (one the server keeps; a server that closes what it cannot keep has
//! the client replace the same few over and over, each open for a
//! moment). The count is the workers' shared `steady` counter.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use slab::Slab;

use crate::engine::conn::{Conn, Flags, State};
use crate::metrics::ConnCounters;

/// How long a connection stays open before it counts as steady.
pub const STEADY_AFTER: Duration = Duration::from_secs(1);

/// How late a held worker may count its steady connections: it wakes for
/// them at most about ten times a second.
pub(super) const STEADY_SLACK: Duration = Duration::from_millis(100);

pub(super) struct Steadiness {
    /// Connections established, with when each becomes steady.
    due: VecDeque<(usize, u64, Instant)>,
    steady: u64,
    counters: Arc<ConnCounters>,
}

impl Steadiness {
    pub(super) fn new(counters: Arc<ConnCounters>) -> Steadiness {
        Steadiness {
            due: VecDeque::new(),
            steady: 0,
            counters,
        }
    }

    /// Connection `key` (attempt `seq`) is established at `now`: it is
    /// steady [`STEADY_AFTER`] later if it is still open.
    pub(super) fn established(&mut self, key: usize, seq: u64, now: Instant) {
        self.due.push_back((key, seq, now + STEADY_AFTER));
    }

    /// Counts the connections open for [`STEADY_AFTER`] by `now` as
    /// steady (each marked, so that its end uncounts it).
    pub(super) fn age(&mut self, now: Instant, conns: &mut Slab<Conn>) {
        let before = self.steady;
        while let Some(&(key, seq, at)) = self.due.front() {
            if at > now {
                break;
            }
            self.due.pop_front();
            // (An attempt number may come twice, a replacement's and a
            // level's: a key taken since by the other is skipped.)
            let found = conns
                .get_mut(key)
                .filter(|c| c.seq == seq && c.state != State::Connecting && !c.has(Flags::STEADY));
            if let Some(c) = found {
                c.set(Flags::STEADY, true);
                self.steady += 1;
            }
        }
        if self.steady != before {
            self.counters.steady.store(self.steady, Relaxed);
        }
    }

    /// Connection `c` ends: if it was steady it is no more.
    pub(super) fn ends(&mut self, c: &Conn) {
        if c.has(Flags::STEADY) {
            self.steady -= 1;
            self.counters.steady.store(self.steady, Relaxed);
        }
    }

    /// Every connection has ended (the run's end).
    pub(super) fn all_ended(&mut self) {
        self.steady = 0;
        self.counters.steady.store(0, Relaxed);
    }

    /// Connections waiting to become steady.
    #[cfg(test)]
    pub(super) fn waiting(&self) -> usize {
        self.due.len()
    }

    /// Gives back the queue's memory once it has emptied.
    pub(super) fn shrink(&mut self) {
        if self.due.is_empty() && self.due.capacity() > 1024 {
            self.due = VecDeque::new();
        }
    }

    /// When to wake to count the next, a little after it is due.
    pub(super) fn wake_at(&self) -> Option<Instant> {
        self.due.front().map(|&(_, _, at)| at + STEADY_SLACK)
    }
}
