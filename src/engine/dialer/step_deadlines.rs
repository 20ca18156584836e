//! The deadlines of a connection's steps: its connect, its TLS handshake,
//! probe or upgrade, and its --lifetime. Each is constant per run, so each
//! kind is a FIFO in start order; entries of connections that moved on are
//! skipped (they carry the attempt number).

use std::collections::VecDeque;
use std::time::Instant;

use slab::Slab;

use crate::engine::conn::{Conn, State};

/// A deadline of a connection's step: slab key, attempt number, when.
type Deadline = (usize, u64, Instant);

#[derive(Debug, Default)]
pub(super) struct StepDeadlines {
    connect: VecDeque<Deadline>,
    probe: VecDeque<Deadline>,
    life: VecDeque<Deadline>,
}

impl StepDeadlines {
    pub(super) fn connect_by(&mut self, key: usize, seq: u64, at: Instant) {
        self.connect.push_back((key, seq, at));
    }

    pub(super) fn probe_by(&mut self, key: usize, seq: u64, at: Instant) {
        self.probe.push_back((key, seq, at));
    }

    pub(super) fn end_of_life(&mut self, key: usize, seq: u64, at: Instant) {
        self.life.push_back((key, seq, at));
    }

    /// The next connect that ran out of time by `now`. The queue also
    /// drops, from the front, the entries of connections past connecting:
    /// they resolve in about the order they started, so it holds about
    /// what is in flight.
    pub(super) fn connect_expired(&mut self, now: Instant, conns: &Slab<Conn>) -> Option<usize> {
        while let Some(&(key, seq, at)) = self.connect.front() {
            let c = conns
                .get(key)
                .filter(|c| c.seq == seq && c.state == State::Connecting);
            if c.is_some() && at > now {
                return None;
            }
            self.connect.pop_front();
            if c.is_some() {
                return Some(key);
            }
        }
        None
    }

    /// The next TLS handshake or probe that ran out of time by `now`, and
    /// which of the two.
    pub(super) fn probe_expired(
        &mut self,
        now: Instant,
        conns: &Slab<Conn>,
    ) -> Option<(usize, State)> {
        while let Some(&(key, seq, at)) = self.probe.front() {
            let state = conns
                .get(key)
                .filter(|c| c.seq == seq)
                .map(|c| c.state)
                .filter(|s| matches!(s, State::Handshaking | State::Probing | State::Upgrading));
            if state.is_some() && at > now {
                return None;
            }
            self.probe.pop_front();
            if let Some(s) = state {
                return Some((key, s));
            }
        }
        None
    }

    /// The next connection whose --lifetime ended by `now`.
    pub(super) fn life_expired(&mut self, now: Instant, conns: &Slab<Conn>) -> Option<usize> {
        while let Some(&(key, seq, at)) = self.life.front() {
            if at > now {
                return None;
            }
            self.life.pop_front();
            if conns.get(key).is_some_and(|c| c.seq == seq) {
                return Some(key);
            }
        }
        None
    }

    /// Connect deadlines waiting (expired or not).
    #[cfg(test)]
    pub(super) fn connects_waiting(&self) -> usize {
        self.connect.len()
    }

    /// Gives back the memory of the ramp's queues once they have emptied
    /// (after a ramp they held an entry per connection).
    pub(super) fn shrink(&mut self) {
        for q in [&mut self.connect, &mut self.probe] {
            if q.is_empty() && q.capacity() > 1024 {
                *q = VecDeque::new();
            }
        }
    }

    /// Each queue's earliest deadline.
    pub(super) fn earliest(&self, consider: &mut impl FnMut(Instant)) {
        for q in [&self.connect, &self.probe, &self.life] {
            if let Some(&(_, _, at)) = q.front() {
                consider(at);
            }
        }
    }
}
