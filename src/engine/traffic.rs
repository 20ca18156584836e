//! The worker's queries: what is due (from [`Pacing`](super::pacing::Pacing)),
//! on which connection, sent or kept waiting behind the window; answers
//! matched in the in-flight table and recorded; timeouts; what the next
//! query is after one is done; tcp-per-query's connection per query.
//! [`Traffic`]'s own decisions (a pick, a query's admission, an answer,
//! a query done) take the connection they act on and return what the
//! worker applies (a send, a wait, an end); the worker's methods here
//! route them to the connection, the writes and the connection's end.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use slab::Slab;

use super::conn::{Conn, End, Flags, NOT_ACTIVE};
use super::connections::Conns;
use super::deadlines::Entry;
use super::inflight::{Answer, Outstanding, NO_DEADLINE};
use super::mode::{Mode, Traffic};
use super::pacing::Due;
use super::proto::Status;
use super::spares::lend;
use super::worker::Worker;
use crate::metrics::{bump, E_NO_CONNECTION, E_UNMATCHED, W_SLOT, W_SOCKET, W_WINDOW};
use crate::sys::signals::Reason;

impl Worker {
    /// Sends every query that is due.
    pub(super) fn traffic_due(&mut self, now: Instant) {
        let now_ns = self.ns(now);
        let Some(t) = self.mode.traffic_mut() else {
            return;
        };
        let started = match t.started {
            Some(s) => s,
            None => {
                let at = self.shared.traffic_at.load(Relaxed);
                if at == 0 {
                    return;
                }
                let s = at - 1;
                t.start(s, now_ns, &self.conns.slab);
                s
            }
        };
        if t.second(now_ns, &mut self.conns.slab) {
            self.spare.trim();
        }
        if self.draining.is_some() {
            // The traffic is over: answers only.
            return;
        }
        self.drain_orphans();
        if let Some(t) = self.mode.traffic_mut() {
            let gen = self.shared.rate_gen.load(Relaxed);
            t.follow_rate(gen, self.shared.rate_override.load(Relaxed));
        }
        loop {
            let Some(t) = self.mode.traffic_mut() else {
                return;
            };
            let Some(due) = t.pacing.pop(now_ns, started) else {
                return;
            };
            match due {
                Due::Arrival(intended) => {
                    t.rec.loop_lag(now_ns.saturating_sub(intended));
                    if t.per_query.is_some() {
                        self.per_query(intended);
                    } else {
                        self.arrival(intended);
                    }
                }
                Due::NewConnection(at) => self.per_query(at),
                Due::Tick { key, seq, at } | Due::Think { key, seq, at } => {
                    if self.conns.slab.get(key).is_none_or(|c| c.seq != seq) {
                        continue;
                    }
                    if matches!(due, Due::Tick { .. }) {
                        t.rec.loop_lag(now_ns.saturating_sub(at));
                        t.pacing.again(key, seq, at);
                    }
                    self.query(key, at, true);
                }
            }
        }
    }

    /// An open-loop query is due: on a connection picked by the spread, or
    /// kept for the next one ready when one is on its way.
    fn arrival(&mut self, intended: u64) {
        let Some(t) = self.mode.traffic_mut() else {
            return;
        };
        if let Some(key) = t.pick(intended, &self.conns) {
            self.query(key, intended, false);
        }
    }

    /// Hands queries that waited for a connection to the open ones.
    fn drain_orphans(&mut self) {
        while let Some((key, intended)) = self.mode.traffic_mut().and_then(Traffic::next_orphan) {
            self.query(key, intended, false);
        }
    }

    /// A query is due on `key` at `intended`: send it, or queue it behind the
    /// window or a busy socket, keeping its intended time.
    /// `fresh`: made due here (a tick, a window's slot), not already
    /// counted due where it arrived (an arrival, a query handed on).
    fn query(&mut self, key: usize, intended: u64, fresh: bool) {
        let Some(t) = self.mode.traffic_mut() else {
            return;
        };
        match t.admit(&mut self.conns.slab, key, intended, fresh) {
            Admit::Now => self.send_now(key, intended),
            Admit::Wait => {
                let now = self.now_ns();
                if let Some(t) = self.mode.traffic_mut() {
                    t.wait(&mut self.conns.slab[key], intended, now);
                }
            }
            Admit::No => {}
        }
    }

    /// Now, in ns since the start: the time of the read being processed
    /// (every answer in one read arrived together; the queries they let go
    /// leave with it), or the clock.
    fn now_ns(&self) -> u64 {
        self.read_at.unwrap_or_else(|| self.ns(Instant::now()))
    }

    /// Encodes and writes one query.
    fn send_now(&mut self, key: usize, intended: u64) {
        let now = self.now_ns();
        let Some(t) = self.mode.traffic_mut() else {
            return;
        };
        // (tcp-per-query took its ticket when it opened the connection.)
        let per_query = t.per_query.is_some();
        if !per_query && !t.take_ticket() {
            // --queries are all out: the schedule ran past them; not due.
            self.q.due.fetch_sub(1, Relaxed);
            return;
        }
        let conn = &mut self.conns.slab[key];
        let n = conn.flight.queries;
        let target = conn.target as usize;
        let (codec, rng) = (&t.codec, &mut t.rng);
        lend(&mut conn.pending_out, &mut self.spare);
        let qkey = conn
            .link
            .queue_with(&mut conn.pending_out, &mut self.out, |out| {
                codec.encode(n, target, now, rng, out)
            });
        if !conn.has(Flags::DIRTY) {
            conn.set(Flags::DIRTY, true);
            self.dirty.push(key);
        }
        // tcp-per-query: the query started with its connection.
        let now = if per_query {
            conn.since.saturating_duration_since(self.start).as_nanos() as u64
        } else {
            now
        };
        if conn.flight.deadline == NO_DEADLINE {
            // Nothing else in flight here: this query is the oldest.
            let entry = Entry {
                conn: key,
                seq: conn.seq,
            };
            conn.flight.deadline = t.deadlines.push(now + t.timeout_ns, entry);
        }
        t.rec
            .sent(now.saturating_sub(intended), conn.flight.live() > 0);
        conn.flight.sent(Outstanding {
            key: qkey,
            intended,
            sent: now,
            timed_out: false,
            qtype_slot: t.codec.qtype_slot(n),
        });
        let retire = (t.cap.is_some_and(|c| conn.flight.queries >= c)
            && conn.active_pos != NOT_ACTIVE)
            .then_some(conn.active_pos);
        if let Some(pos) = retire {
            // No more queries on this one: out of the open-loop choice.
            t.leave(&mut self.conns.slab, pos);
        }
    }

    /// `key`'s --lifetime is over. With nothing in flight it closes now;
    /// otherwise it takes no new query and closes when its last one is
    /// answered or timed out: a close with an answer on its way would lose
    /// that query, and reset the server's end. (Queries still waiting to
    /// be sent go to other connections when it closes.) Its replacement
    /// (--reconnect) is owed now, so the open count does not dip.
    pub(super) fn lifetime_over(&mut self, key: usize) {
        let conn = &mut self.conns.slab[key];
        let busy = conn.live() > 0;
        let Some(t) = self.mode.traffic_mut().filter(|_| busy) else {
            self.end(key, End::Lifetime);
            return;
        };
        conn.set(Flags::RETIRING, true);
        if self.sc.reconnect {
            self.conns.dial.owe();
        }
        let pos = conn.active_pos;
        if pos != NOT_ACTIVE {
            t.leave(&mut self.conns.slab, pos);
        }
    }

    /// A response arrived for `qkey` (or the oldest query) on `key`.
    pub(super) fn answered(&mut self, key: usize, qkey: Option<u64>, status: Status) {
        let now = self.now_ns();
        let Some(t) = self.mode.traffic_mut() else {
            return;
        };
        let conn = &mut self.conns.slab[key];
        if conn.has(Flags::UNPROVEN) {
            // Any answer proves the server accepted the connection.
            conn.set(Flags::UNPROVEN, false);
            bump(&self.counters.verified, 1);
        }
        let draining = self.draining.is_some();
        if let Some(why) = t.answered(key, conn, qkey, status, now, draining) {
            self.end(key, why);
        }
    }

    /// After a response or a flush: send what waited.
    pub(super) fn after_progress(&mut self, key: usize) {
        while let Some(c) = self.conns.slab.get_mut(key) {
            let Some(t) = self.mode.traffic() else {
                return;
            };
            if c.flight.waiting.is_empty() || !c.room(t.window) {
                return;
            }
            let intended = c.flight.waiting.pop_front().expect("not empty");
            self.send_now(key, intended);
        }
    }

    /// Query timeouts: each connection whose deadline came times out what
    /// is overdue and sets its deadline again at the oldest left.
    pub(super) fn expire_queries(&mut self, now_ns: u64) {
        while let Some(t) = self.mode.traffic_mut() {
            let Some(Entry { conn: key, seq }) = t.deadlines.pop_due(now_ns) else {
                break;
            };
            let Some(c) = self.conns.slab.get_mut(key).filter(|c| c.seq == seq) else {
                continue;
            };
            c.flight.deadline = NO_DEADLINE;
            self.time_out_overdue(key, now_ns);
            self.set_deadline(key);
        }
    }

    /// Times out the queries of `key` past their deadline, oldest first.
    fn time_out_overdue(&mut self, key: usize, now_ns: u64) {
        loop {
            let (Some(t), Some(c)) = (self.mode.traffic_mut(), self.conns.slab.get_mut(key)) else {
                return;
            };
            let Some(o) = c.flight.time_out_oldest(now_ns, t.timeout_ns) else {
                return;
            };
            t.rec.timed_out(c.seq, &o);
            if self.sc.traffic.as_ref().is_some_and(|t| t.close_on_timeout) {
                self.end(key, End::QueryTimedOut);
                return;
            }
            let draining = self.draining.is_some();
            if let Some(why) = t.completed(key, c, now_ns, draining) {
                self.end(key, why);
            }
            if self.conns.slab.contains(key) {
                self.after_progress(key);
            }
        }
    }

    /// Sets the deadline of `key` at its oldest query in flight.
    fn set_deadline(&mut self, key: usize) {
        if let (Some(t), Some(c)) = (self.mode.traffic_mut(), self.conns.slab.get_mut(key)) {
            t.set_deadline(key, c);
        }
    }

    // ---- tcp-per-query ---------------------------------------------------

    /// A query is due: it gets a connection of its own now, or waits for a
    /// free slot keeping its intended time. Those that waited for --timeout
    /// are given up first (`not_sent`), as behind a full window: a slot's
    /// wait is bounded as an answer's is.
    fn per_query(&mut self, intended: u64) {
        bump(&self.q.due, 1);
        let now = self.now_ns();
        let open = self.conns.slab.len() as u64;
        let Some(t) = self.mode.traffic_mut() else {
            return;
        };
        let Some(pq) = t.per_query.as_ref() else {
            return;
        };
        if !pq.wait.is_empty() || open >= pq.share {
            bump(&self.q.waited[W_SLOT], 1);
        }
        t.wait_for_slot(intended, now);
        self.pq_fill();
    }

    /// tcp-per-query: opens connections for waiting queries while slots
    /// are free. (Twice a loop turn: what it asks of other runs is one
    /// look, inlined.)
    #[inline]
    pub(super) fn pq_fill(&mut self) {
        let waiting = match &self.mode {
            Mode::Traffic(t) => t.per_query.as_ref().is_some_and(|pq| !pq.wait.is_empty()),
            _ => false,
        };
        if waiting {
            self.pq_open();
        }
    }

    /// Opens connections for the queries waiting for a slot.
    fn pq_open(&mut self) {
        while self.draining.is_none() {
            let open = self.conns.slab.len() as u64;
            let Some(t) = self.mode.traffic_mut() else {
                return;
            };
            let Some(pq) = t.per_query.as_mut().filter(|pq| open < pq.share) else {
                return;
            };
            let Some(intended) = pq.wait.pop_front() else {
                return;
            };
            if !t.take_ticket() {
                // --queries are all out: the schedule ran past them; not
                // due (this one and those waiting).
                let pq = t.per_query.as_mut().expect("per query");
                self.q.due.fetch_sub(1 + pq.wait.len() as u64, Relaxed);
                pq.wait.clear();
                return;
            }
            let seq = self.conns.dial.replacement();
            match self.attempt(seq, false) {
                Some(key) => self.conns.slab[key].flight.waiting.push_back(intended),
                None => {
                    // (tcp-per-query: its connection failed to start.)
                    let now = self.ns(Instant::now());
                    self.mode.pq_lost(0, || now);
                }
            }
        }
    }

    /// Once its part of --queries is sent and none is in flight or waiting
    /// any more, says so to the main thread (which ends the run when every
    /// worker has). Looks at every connection, but only after the last
    /// query went out.
    pub(super) fn check_quota_done(&mut self) {
        let Some(t) = self.mode.traffic_mut() else {
            return;
        };
        if t.quota != Some(0) || t.quota_done {
            return;
        }
        let waiting = t.per_query.as_ref().is_some_and(|pq| !pq.wait.is_empty());
        let idle = !waiting && self.conns.slab.iter().all(|(_, c)| c.flight.idle());
        if idle {
            t.quota_done = true;
            self.say(Reason::QueriesDone);
        }
    }
}

/// Where a due query goes on the connection it came due on.
enum Admit {
    Now,
    Wait,
    No,
}

impl Traffic {
    /// An open-loop query is due at `intended`: the connection the spread
    /// picks for it, or None: kept for the next one ready when one is on
    /// its way (dialed, owed, or recycling), else lost.
    fn pick(&mut self, intended: u64, conns: &Conns) -> Option<usize> {
        bump(&self.q.due, 1);
        if self.active.is_empty() {
            let recycling = self.recycle_after.is_some();
            if conns.dial.inflight > 0
                || conns.dial.owed() > 0
                || (recycling && !conns.slab.is_empty())
            {
                self.orphans.push_back(intended);
            } else {
                self.rec.error(E_NO_CONNECTION);
            }
            return None;
        }
        let pick = self
            .pacing
            .pick(self.active.len(), &mut self.rng, &mut self.rr);
        Some(self.active[pick])
    }

    /// A query that waited for a connection and the open one it goes to
    /// (round robin), while there are both.
    fn next_orphan(&mut self) -> Option<(usize, u64)> {
        if self.active.is_empty() {
            return None;
        }
        let intended = self.orphans.pop_front()?;
        self.rr = (self.rr + 1) % self.active.len();
        Some((self.active[self.rr], intended))
    }

    /// A query is due on `key` at `intended`: whether it is sent now, or
    /// queued behind the window or a busy socket keeping its intended
    /// time, or not here (another connection takes it, or it is not due).
    /// `fresh`: made due here (a tick, a window's slot), not already
    /// counted due where it arrived (an arrival, a query handed on).
    fn admit(&mut self, conns: &mut Slab<Conn>, key: usize, intended: u64, fresh: bool) -> Admit {
        let conn = &mut conns[key];
        let f = &mut conn.flight;
        let capped = self
            .cap
            .is_some_and(|c| f.queries + f.waiting.len() as u64 >= c);
        if capped || conn.has(Flags::RETIRING) {
            // It takes no more. A tick of its own (--messages, an interval
            // on a connection whose lifetime is over) is not due; a query
            // already due (an arrival, one handed on) goes to another
            // connection, and this one leaves the open-loop choice (it
            // was lost here: picked while its sent and waiting queries
            // filled --max-queries-per-conn).
            if !fresh {
                let pos = conn.active_pos;
                if pos != NOT_ACTIVE {
                    self.leave(conns, pos);
                }
                self.orphans.push_back(intended);
            }
            return Admit::No;
        }
        if conn.has(Flags::PEER_CLOSING) {
            // Due on a connection the server is closing: never sent. (A
            // closed loop's slot is not a query yet: the replacement
            // connection starts its own.)
            if !self.pacing.closed_loop() {
                if fresh {
                    bump(&self.q.due, 1);
                }
                self.rec.error(E_NO_CONNECTION);
            }
            return Admit::No;
        }
        if fresh {
            bump(&self.q.due, 1);
        }
        if !conn.room(self.window) || !conn.flight.waiting.is_empty() {
            return Admit::Wait;
        }
        Admit::Now
    }

    /// Queues a due query behind its connection's full window or socket.
    /// Those that have waited there for --timeout are given up first
    /// (`not_sent`): a server that never reads holds at most the rate times
    /// --timeout of them, not the whole run's.
    fn wait(&mut self, conn: &mut Conn, intended: u64, now: u64) {
        let cause = if conn.has(Flags::BLOCKED) {
            W_SOCKET
        } else {
            W_WINDOW
        };
        bump(&self.q.waited[cause], 1);
        self.keep_waiting(&mut conn.flight.waiting, intended, now);
    }

    /// A response arrived for `qkey` (or the oldest query) on `conn`
    /// (`key`) at `now`: matched, recorded, and the next query queued (its
    /// verification, an answer's first, is the worker's).
    /// Some: how the connection ends.
    pub(super) fn answered(
        &mut self,
        key: usize,
        conn: &mut Conn,
        qkey: Option<u64>,
        status: Status,
        now: u64,
        draining: bool,
    ) -> Option<End> {
        let answer = conn.flight.answer(qkey);
        if answer == Answer::Unmatched {
            self.rec.error(E_UNMATCHED);
            return None;
        }
        if conn.live() == 0 {
            // Nothing left in flight: no deadline to keep (a connection that
            // queries now and then holds no entry between its queries).
            if let Some(id) = conn.flight.take_deadline() {
                self.deadlines.remove(id);
            }
            if !self.busy {
                conn.flight.release();
            }
        }
        let Answer::Matched(o) = answer else {
            // Its timeout was counted; the late answer is only absorbed.
            return None;
        };
        self.rec.answered(conn.seq, &o, now, status);
        self.completed(key, conn, now, draining)
    }

    /// One query of `conn` (`key`) is done (answered or timed out): closed
    /// loop queues the next (`draining`: none). Some: how the connection
    /// ends, a finished one.
    pub(super) fn completed(
        &mut self,
        key: usize,
        conn: &mut Conn,
        now: u64,
        draining: bool,
    ) -> Option<End> {
        if self.per_query.is_some() {
            // Its one query is done: close (the client keeps TIME_WAIT).
            return Some(End::Closed);
        }
        let retiring = conn.has(Flags::RETIRING);
        if retiring && conn.live() == 0 {
            return Some(End::Lifetime);
        }
        // Draining: an answer lets no new query go.
        // Nor one the server said it is closing: the next query would
        // cross its close (a closed loop's replacement takes the slot).
        let more = self.started.is_some()
            && !draining
            && !retiring
            && !conn.has(Flags::PEER_CLOSING)
            && self.cap.is_none_or(|c| conn.flight.queries < c);
        if more {
            if let Some(at) = self.pacing.next_after(key, conn.seq, now) {
                // Due now: sent with this turn's other writes, not a loop
                // turn later.
                conn.flight.waiting.push_back(at);
                bump(&self.q.due, 1);
            }
        }
        let idle = conn.live() == 0;
        if let Some(n) = self.recycle_after {
            if idle && conn.flight.done >= n {
                bump(&self.q.recycled, 1);
                return Some(End::Recycled);
            }
        }
        if let Some(n) = self.messages {
            if idle && conn.flight.done >= n && !self.hold {
                return Some(End::Closed);
            }
        }
        None
    }
}
