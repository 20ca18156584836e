//! Opening and closing toward a level that a schedule or --control asks
//! for: a token bucket at the ramp's rate for the opens, and the open
//! connections oldest first for the closes.

use std::collections::VecDeque;
use std::time::Instant;

use slab::Slab;

use crate::engine::conn::Conn;

pub(super) struct Level {
    tokens: f64,
    refilled: Instant,
    /// Connections opened toward a level, each its own attempt number.
    made: u64,
    /// Open connections oldest first (key, attempt number).
    open: VecDeque<(usize, u64)>,
}

impl Level {
    pub(super) fn new(start: Instant) -> Level {
        Level {
            tokens: 1.0,
            refilled: start,
            made: 0,
            open: VecDeque::new(),
        }
    }

    /// The bucket counts from `start`.
    pub(super) fn set_start(&mut self, start: Instant) {
        self.refilled = start;
    }

    /// The bucket fills at `rate` a second, up to a burst of 10 ms.
    pub(super) fn refill(&mut self, now: Instant, rate: f64) {
        let burst = (rate * 0.01).max(1.0);
        let dt = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + dt * rate).min(burst);
        self.refilled = now;
    }

    /// A token taken, if there is one: the number of the open it allows,
    /// counting from 0.
    pub(super) fn take(&mut self) -> Option<u64> {
        if self.tokens < 1.0 {
            return None;
        }
        self.tokens -= 1.0;
        self.made += 1;
        Some(self.made - 1)
    }

    /// A connection is open: the oldest close first when a level falls.
    pub(super) fn opened(&mut self, key: usize, seq: u64) {
        self.open.push_back((key, seq));
    }

    /// The oldest open connection to close: None when none is left, else
    /// its key, or None inside when its entry has moved on.
    pub(super) fn oldest(&mut self, conns: &Slab<Conn>) -> Option<Option<usize>> {
        let (key, seq) = self.open.pop_front()?;
        Some(conns.get(key).filter(|c| c.seq == seq).map(|_| key))
    }

    /// Drops the entries of connections already gone, so that churn
    /// cannot grow the list without bound.
    pub(super) fn prune(&mut self, conns: &Slab<Conn>) {
        if self.open.len() > 2 * conns.len() + 1024 {
            self.open
                .retain(|&(k, seq)| conns.get(k).is_some_and(|c| c.seq == seq));
        }
    }
}
