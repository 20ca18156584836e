//! The worker's queries, as [`TrafficState`]'s methods: what is due (from
//! [`Pacing`](super::pacing::Pacing)), on which connection, sent or kept
//! waiting behind the window; answers matched in the in-flight table and
//! recorded; timeouts; what the next query is after one is done. Each
//! takes what it acts on as arguments: the connections ([`Conns`], whose
//! one end it calls) and the writes ([`Outbox`]). It opens no connection: a tcp-per-query
//! query that is due is handed back to the worker, which has
//! [`Handshake`](super::handshake::Handshake) open its connection.

use std::sync::atomic::Ordering::Relaxed;

use super::conn::{Conn, ConnEnd, Flags, Next, NOT_ACTIVE};
use super::connections::Conns;
use super::deadlines::Entry;
use super::inflight::{Answer, Outstanding, NO_DEADLINE};
use super::outbox::Outbox;
use super::pacing::Due;
use super::proto::Status;
use super::workload::{TrafficState, WorkloadMut};
use crate::metrics::{
    bump, Shared, E_CONN_LOST, E_NO_CONNECTION, E_UNMATCHED, W_SLOT, W_SOCKET, W_WINDOW,
};

impl TrafficState {
    /// A loop turn's start at `now_ns`: the traffic starts when the main
    /// thread says so, a second's report goes, queries that waited for a
    /// connection go to the open ones. The
    /// instant the traffic started, unless it has not or is over
    /// (draining: answers only); then [`TrafficState::due`] sends what is due.
    pub(super) fn turn(
        &mut self,
        now_ns: u64,
        shared: &Shared,
        conns: &mut Conns,
        out: &mut Outbox,
    ) -> Option<u64> {
        let started = match self.started {
            Some(s) => s,
            None => {
                let at = shared.traffic_at.load(Relaxed);
                if at == 0 {
                    return None;
                }
                let s = at - 1;
                self.start(s, now_ns, |k| conns[k].seq);
                s
            }
        };
        if self.second(now_ns, conns) {
            out.trim();
        }
        if self.draining {
            // The traffic is over: answers only, and the queries --slack
            // held (due before the end) go.
            return self.slack.end(now_ns).then_some(started);
        }
        self.drain_orphans(conns, out);
        if shared.rate_gen.load(Relaxed) != self.rate_gen {
            // A --control rate change at the end of this turn: what --slack
            // holds of the old rate goes now, not counted behind.
            self.slack.release(now_ns);
        }
        Some(started)
    }

    /// A loop turn's end, after [`TrafficState::due`] sent what it could: a
    /// --control rate is followed from `now_ns` on.
    pub(super) fn turn_end(&mut self, now_ns: u64, started: u64, shared: &Shared) {
        let gen = shared.rate_gen.load(Relaxed);
        self.follow_rate(gen, shared.rate_override.load(Relaxed), now_ns, started);
    }

    /// Sends the queries that are due by `now_ns` (traffic `started`), up
    /// to the first tcp-per-query one: Some(its intended time), for the
    /// worker to open its connection (then it calls again). At most
    /// `budget` of them (it counts down; None when it is spent, the worker
    /// then calls again or leaves the rest to the next turn).
    pub(super) fn due(
        &mut self,
        now_ns: u64,
        started: u64,
        conns: &mut Conns,
        out: &mut Outbox,
        budget: &mut u32,
    ) -> Option<u64> {
        let pacing = &self.pacing;
        if !self
            .slack
            .ready_to_send(now_ns, || pacing.next_due(started))
        {
            return None;
        }
        loop {
            *budget = budget.checked_sub(1)?;
            let due = self.pacing.pop(now_ns, started)?;
            match due {
                Due::Arrival(intended) => {
                    self.rec.loop_lag(now_ns.saturating_sub(intended));
                    if self.per_query.is_some() {
                        return Some(intended);
                    }
                    // An open-loop query: on a connection picked by the
                    // spread, or kept for the next one ready when one is on
                    // its way.
                    if let Some(key) = self.pick(intended, conns) {
                        self.query(key, intended, false, conns, out);
                    }
                }
                Due::NewConnection(at) => return Some(at),
                Due::Tick { key, seq, at } | Due::Think { key, seq, at } => {
                    if conns.get(key).is_none_or(|c| c.seq != seq) {
                        continue;
                    }
                    if matches!(due, Due::Tick { .. }) {
                        self.rec.loop_lag(now_ns.saturating_sub(at));
                        self.pacing.again(key, seq, at);
                    }
                    self.query(key, at, true, conns, out);
                }
            }
        }
    }

    /// Hands queries that waited for a connection to the open ones.
    fn drain_orphans(&mut self, conns: &mut Conns, out: &mut Outbox) {
        while let Some((key, intended)) = self.next_orphan() {
            self.query(key, intended, false, conns, out);
        }
    }

    /// A query is due on `key` at `intended`: send it, or queue it behind the
    /// window or a busy socket, keeping its intended time.
    /// `fresh`: made due here (a tick, a window's slot), not already
    /// counted due where it arrived (an arrival, a query handed on).
    fn query(
        &mut self,
        key: usize,
        intended: u64,
        fresh: bool,
        conns: &mut Conns,
        out: &mut Outbox,
    ) {
        match self.admit(conns, key, intended, fresh) {
            Admit::Now => self.send_now(key, intended, conns, out),
            Admit::Wait => {
                let now = conns.stamp_ns();
                self.wait(&mut conns[key], intended, now);
            }
            Admit::No => {}
        }
    }

    /// Encodes and writes one query on `key`, stamped with the read being
    /// processed (see [`Conns::stamp_ns`]).
    fn send_now(&mut self, key: usize, intended: u64, conns: &mut Conns, out: &mut Outbox) {
        let now = conns.stamp_ns();
        // (tcp-per-query took its ticket when it opened the connection.)
        let per_query = self.per_query.is_some();
        if !per_query && !self.take_ticket() {
            // --queries are all out: the schedule ran past them; not due.
            self.q.due.fetch_sub(1, Relaxed);
            return;
        }
        let start = conns.start;
        let conn = &mut conns[key];
        let n = conn.flight.queries;
        let target = conn.target as usize;
        let (codec, rng) = (&self.codec, &mut self.rng);
        let qkey = out.queue_with(key, conn, |out| codec.encode(n, target, now, rng, out));
        // tcp-per-query: the query started with its connection.
        let now = if per_query {
            conn.since.saturating_duration_since(start).as_nanos() as u64
        } else {
            now
        };
        if conn.flight.deadline == NO_DEADLINE {
            // Nothing else in flight here: this query is the oldest.
            let entry = Entry {
                conn: key,
                seq: conn.seq,
            };
            conn.flight.deadline = self.deadlines.push(now + self.timeout_ns, entry);
        }
        self.rec
            .sent(now.saturating_sub(intended), conn.flight.live() > 0);
        conn.flight.sent(Outstanding {
            key: qkey,
            intended,
            sent: now,
            timed_out: false,
            qtype_slot: self.codec.qtype_slot(n),
        });
        let retire = (self.cap.is_some_and(|c| conn.flight.queries >= c)
            && conn.active_pos != NOT_ACTIVE)
            .then_some(conn.active_pos);
        if let Some(pos) = retire {
            // No more queries on this one: out of the open-loop choice.
            self.leave(conns, pos);
        }
    }

    /// `key`'s --lifetime is over. With nothing in flight it closes now
    /// (Some: the worker ends it); otherwise it takes no new query and
    /// closes when its last one is answered or timed out: a close with an
    /// answer on its way would lose that query, and reset the server's end.
    /// (Queries still waiting to be sent go to other connections when it
    /// closes.) Its replacement (--reconnect) is owed now, so the open count
    /// does not dip.
    pub(super) fn lifetime_over(&mut self, key: usize, conns: &mut Conns) -> Option<ConnEnd> {
        let conn = &mut conns[key];
        if conn.live() == 0 {
            return Some(ConnEnd::Lifetime);
        }
        conn.set(Flags::RETIRING, true);
        let pos = conn.active_pos;
        if conns.reconnects() {
            conns.dial.queue_reconnect();
        }
        if pos != NOT_ACTIVE {
            self.leave(conns, pos);
        }
        None
    }

    /// A response arrived for `qkey` (or the oldest query) on `key`; the
    /// connection ends here when that was its last.
    #[inline]
    pub(super) fn on_answer(
        &mut self,
        key: usize,
        qkey: Option<u64>,
        status: Status,
        conns: &mut Conns,
    ) -> Next {
        let now = conns.stamp_ns();
        let mut conn = &mut conns[key];
        if conn.has(Flags::UNPROVEN) {
            conns.proven(key);
            conn = &mut conns[key];
        }
        let draining = self.draining;
        match self.answered(key, conn, qkey, status, now, draining) {
            Some(why) => {
                conns.end(key, why, WorkloadMut::Traffic(self));
                Next::Ended
            }
            None => Next::Open,
        }
    }

    /// A second ended by `now_ns`: its report is sent and the deadline list
    /// compacted (each connection told its entry's new place). True when
    /// it did.
    pub fn second(&mut self, now_ns: u64, conns: &mut Conns) -> bool {
        if !self.rec.roll(now_ns) {
            return false;
        }
        self.deadlines.compact(|entry, id| {
            // (As when deadlines expire: an entry is its connection's only
            // while the attempt is the same.)
            if let Some(c) = conns.get_mut(entry.conn).filter(|c| c.seq == entry.seq) {
                c.flight.deadline = id;
            }
        });
        true
    }

    /// Takes the connection at `pos` out of the open-loop choice (the last
    /// one takes its place).
    pub fn leave(&mut self, conns: &mut Conns, pos: u32) {
        remove_active(&mut self.active, conns, pos);
    }

    /// `key`, held now, joins the traffic: the open-loop choice, the
    /// queries that waited for a connection (up to its cap), and a run in
    /// progress (`now_ns`) as a replacement does. True when it has queries
    /// waiting to be sent (tcp-per-query's one query waits there).
    pub(super) fn join(&mut self, key: usize, conn: &mut Conn, now_ns: u64) -> bool {
        if self.per_query.is_some() {
            return true;
        }
        conn.active_pos = self.active.len() as u32;
        self.active.push(key);
        let cap = self.cap.unwrap_or(u64::MAX);
        while conn.flight.queries + (conn.flight.waiting.len() as u64) < cap {
            // Queries that waited for a connection: this one's now.
            let Some(intended) = self.orphans.pop_front() else {
                break;
            };
            conn.flight.waiting.push_back(intended);
        }
        if let Some(started) = self.started {
            // Joining a run in progress (a replacement connection).
            self.pacing
                .join(key, conn.seq, now_ns, started, self.window);
        }
        !conn.flight.waiting.is_empty()
    }

    /// Connection `c` ended (`connecting`: before it was established),
    /// taken out of `conns`: its queries in flight are lost with it, or
    /// not sent where the server had said its last answer was its last;
    /// its due queries go to another connection.
    pub(super) fn conn_ended(&mut self, mut c: Conn, connecting: bool, conns: &mut Conns) {
        let live = c.live();
        let per_query = self.per_query.is_some();
        let untaken = c.has(Flags::PEER_CLOSING) && !per_query;
        if live > 0 && !untaken {
            bump(&self.q.errors[E_CONN_LOST], live);
        }
        if live > 0 && untaken {
            // The server had said its last answer was its last (HTTP
            // `Connection: close`): queries that crossed that answer on
            // the wire never reached its work. They count as not sent;
            // in open loop they are due again on another connection
            // with their intended time (closed loop's replacement
            // connection starts its own).
            self.rec.unsent(live);
            // Not sent: their --queries tickets come back.
            if let Some(q) = self.quota.as_mut() {
                *q += live;
            }
            if !self.pacing.closed_loop() {
                self.orphans.extend(c.flight.live_intended());
            }
        }
        if c.active_pos != NOT_ACTIVE {
            self.leave(conns, c.active_pos);
        }
        if let Some(id) = c.flight.take_deadline() {
            self.deadlines.remove(id);
        }
        if !connecting {
            // (Connect failures count their own query where they happen.)
            self.pq_lost(c.flight.done + c.live(), || conns.now_ns());
        }
        // Due queries it never sent go to another connection (with
        // tcp-per-query the query failed with its connection: counted). A
        // closed loop's waiting queries are its window's slots, not a
        // schedule's: the replacement connection opens its own window,
        // from when it can send; handed to another connection with their
        // old times they would stack onto its window and count the wait
        // for this one's replacement as response time.
        if !per_query && !self.pacing.closed_loop() {
            self.orphans.extend(c.flight.waiting);
        }
    }

    /// After a response or a flush on `key`: send what waited.
    #[inline]
    pub(super) fn after_progress(&mut self, key: usize, conns: &mut Conns, out: &mut Outbox) {
        while let Some(c) = conns.get_mut(key) {
            if c.flight.waiting.is_empty() || !c.room(self.window) {
                return;
            }
            let intended = c.flight.waiting.pop_front().expect("not empty");
            self.send_now(key, intended, conns, out);
        }
    }

    /// Query timeouts at `now_ns`: each connection whose deadline came
    /// times out what is overdue and sets its deadline again at the oldest
    /// left.
    pub(super) fn expire_queries(&mut self, now_ns: u64, conns: &mut Conns, out: &mut Outbox) {
        while let Some(Entry { conn: key, seq }) = self.deadlines.pop_due(now_ns) {
            let Some(c) = conns.get_mut(key).filter(|c| c.seq == seq) else {
                continue;
            };
            c.flight.deadline = NO_DEADLINE;
            self.time_out_overdue(key, now_ns, conns, out);
            if let Some(c) = conns.get_mut(key) {
                self.set_deadline(key, c);
            }
        }
    }

    /// Times out the queries of `key` past their deadline, oldest first.
    fn time_out_overdue(&mut self, key: usize, now_ns: u64, conns: &mut Conns, out: &mut Outbox) {
        while let Some(c) = conns.get_mut(key) {
            let Some(o) = c.flight.time_out_oldest(now_ns, self.timeout_ns) else {
                return;
            };
            self.rec.timed_out(c.seq, &o);
            if self.close_on_timeout {
                conns.end(key, ConnEnd::QueryTimedOut, WorkloadMut::Traffic(self));
                return;
            }
            let draining = self.draining;
            if let Some(why) = self.completed(key, c, now_ns, draining) {
                conns.end(key, why, WorkloadMut::Traffic(self));
                return;
            }
            self.after_progress(key, conns, out);
        }
    }

    /// tcp-per-query: a query is due at `intended` (`now_ns`; `open`: the
    /// connections open). It waits for a free slot keeping its intended
    /// time, for the worker to open its connection now or when a slot is
    /// free. Those that waited for --timeout are given up first
    /// (`not_sent`), as behind a full window: a slot's wait is bounded as
    /// an answer's is.
    pub(super) fn per_query_due(&mut self, intended: u64, now_ns: u64, open: u64) {
        bump(&self.q.due, 1);
        let Some(pq) = self.per_query.as_ref() else {
            return;
        };
        if !pq.wait.is_empty() || open >= pq.share {
            bump(&self.q.waited[W_SLOT], 1);
        }
        self.wait_for_slot(intended, now_ns);
    }

    /// tcp-per-query: a query waits for a connection slot.
    #[inline]
    pub(super) fn slot_wanted(&self) -> bool {
        self.per_query
            .as_ref()
            .is_some_and(|pq| !pq.wait.is_empty())
    }

    /// tcp-per-query, `open` connections open: the intended time of the
    /// next query waiting for a slot, when one is free and the traffic
    /// goes on, its ticket taken. (--queries all out: the schedule ran past
    /// them; this one and those waiting are not due.)
    pub(super) fn next_for_slot(&mut self, open: u64) -> Option<u64> {
        if self.draining {
            return None;
        }
        let pq = self.per_query.as_mut().filter(|pq| open < pq.share)?;
        let intended = pq.wait.pop_front()?;
        if !self.take_ticket() {
            let pq = self.per_query.as_mut().expect("per query");
            self.q.due.fetch_sub(1 + pq.wait.len() as u64, Relaxed);
            pq.wait.clear();
            return None;
        }
        Some(intended)
    }

    /// Once its part of --queries is sent and none is in flight or waiting
    /// any more: true, once (the worker tells the main thread, which ends
    /// the run when every worker has). Looks at every connection, but only
    /// after the last query went out.
    pub(super) fn quota_done(&mut self, conns: &Conns) -> bool {
        if self.quota != Some(0) || self.quota_done {
            return false;
        }
        let idle = !self.slot_wanted() && conns.iter().all(|(_, c)| c.flight.idle());
        if idle {
            self.quota_done = true;
        }
        idle
    }
}

/// Where a due query goes on the connection it came due on.
enum Admit {
    Now,
    Wait,
    No,
}

impl TrafficState {
    /// An open-loop query is due at `intended`: the connection the spread
    /// picks for it, or None: kept for the next one ready when one is on
    /// its way (dialed, owed, or recycling), else lost.
    fn pick(&mut self, intended: u64, conns: &Conns) -> Option<usize> {
        bump(&self.q.due, 1);
        if self.active.is_empty() {
            let recycling = self.recycle_after.is_some();
            if conns.dial.connects_in_flight() > 0
                || conns.dial.reconnects_pending() > 0
                || (recycling && !conns.is_empty())
            {
                self.orphans.push_back(intended);
            } else {
                self.rec.error(E_NO_CONNECTION);
            }
            return None;
        }
        if self.slack.gathers() {
            let usable = |k| conns.get(k).is_some_and(|c| c.active_pos != NOT_ACTIVE);
            if let Some(key) = self.slack.batch_connection(usable) {
                return Some(key);
            }
        }
        let pick = self
            .pacing
            .pick(self.active.len(), &mut self.rng, &mut self.rr);
        let key = self.active[pick];
        if self.slack.gathers() {
            self.slack.picked(key);
        }
        Some(key)
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
    fn admit(&mut self, conns: &mut Conns, key: usize, intended: u64, fresh: bool) -> Admit {
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
    /// verification, an answer's first, is [`TrafficState::on_answer`]'s).
    /// Some: how the connection ends.
    pub(super) fn answered(
        &mut self,
        key: usize,
        conn: &mut Conn,
        qkey: Option<u64>,
        status: Status,
        now: u64,
        draining: bool,
    ) -> Option<ConnEnd> {
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
        let o = match answer {
            Answer::Matched(o) => o,
            // Its timeout was counted; the late answer is counted apart.
            Answer::Late(o) => {
                self.rec.answered_late(&o, now);
                return None;
            }
            Answer::Unmatched => return None,
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
    ) -> Option<ConnEnd> {
        if self.per_query.is_some() {
            // Its one query is done: close (the client keeps TIME_WAIT).
            return Some(ConnEnd::Closed);
        }
        let retiring = conn.has(Flags::RETIRING);
        if retiring && conn.live() == 0 {
            return Some(ConnEnd::Lifetime);
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
                return Some(ConnEnd::Recycled);
            }
        }
        if let Some(n) = self.messages {
            if idle && conn.flight.done >= n && !self.hold {
                return Some(ConnEnd::Closed);
            }
        }
        None
    }
}

/// Takes the connection at `pos` out of the active list (the last one
/// takes its place).
fn remove_active(active: &mut Vec<usize>, conns: &mut Conns, pos: u32) {
    let pos = pos as usize;
    let key = active.swap_remove(pos);
    if let Some(c) = conns.get_mut(key) {
        c.active_pos = NOT_ACTIVE;
    }
    if let Some(&moved) = active.get(pos) {
        conns[moved].active_pos = pos as u32;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::{mpsc, Arc};
    use std::time::Instant;

    use super::super::conn::State;
    use super::super::seconds::ReportTx;
    use super::super::transport::link::Link;
    use super::super::workload::TrafficSetup;
    use super::*;
    use crate::domain::Proto;
    use crate::metrics::QueryCounters;
    use crate::scenario::{Model, Query};

    /// Closed-loop echo, window 1, no think time; `messages`: --messages;
    /// `per_query`: tcp-per-query's share of connections.
    fn traffic(messages: Option<u64>, per_query: Option<u64>) -> TrafficState {
        let t = crate::scenario::Traffic {
            proto: Proto::Echo,
            query: Query::Echo {
                size: 64,
                validate: false,
            },
            model: Model::ClosedLoop { think_s: 0.0 },
            window: Some(1),
            messages,
            queries: None,
            max_queries_per_conn: None,
            timeout_s: 1.0,
            close_on_timeout: false,
            seed: 1,
            drain_s: 0.0,
            slack_s: 0.0,
            ok_rcodes: Vec::new(),
            ok_status: Vec::new(),
        };
        let (tx, rx) = mpsc::channel();
        std::mem::forget(rx);
        let mut t = TrafficState::new(TrafficSetup {
            traffic: &t,
            hosts: &[],
            queries: Arc::new(QueryCounters::default()),
            reports: ReportTx::from(tx),
            rtt_log: None,
            service_seconds: false,
            id: 0,
            workers: 1,
            per_query,
            datagrams: false,
            hold: false,
        });
        t.start(0, 0, |_| 0);
        t
    }

    /// A held connection with no socket.
    fn held() -> Conn {
        let mut c = Conn::new(Link::Detached, 1, Instant::now(), 0, true);
        c.state = State::Held;
        c
    }

    /// One query sent on `c` at `at`: its key.
    fn send(c: &mut Conn, at: u64) -> Option<u64> {
        let key = c.flight.queries;
        c.flight.sent(Outstanding {
            key,
            intended: at,
            sent: at,
            timed_out: false,
            qtype_slot: 0,
        });
        Some(key)
    }

    #[test]
    fn a_closed_loop_answer_lets_the_next_query_go_now() {
        let mut t = traffic(None, None);
        let mut c = held();
        let q = send(&mut c, 10);
        assert_eq!(t.answered(0, &mut c, q, Status::Ok, 25, false), None);
        assert_eq!(c.flight.waiting, [25]);
        assert_eq!(t.q.due.load(Relaxed), 1);
    }

    #[test]
    fn draining_an_answer_lets_no_query_go() {
        let mut t = traffic(None, None);
        let mut c = held();
        let q = send(&mut c, 10);
        assert_eq!(t.answered(0, &mut c, q, Status::Ok, 25, true), None);
        assert!(c.flight.waiting.is_empty());
    }

    #[test]
    fn an_unmatched_answer_is_counted_and_ends_nothing() {
        let mut t = traffic(None, None);
        let mut c = held();
        send(&mut c, 10);
        assert_eq!(t.answered(0, &mut c, Some(99), Status::Ok, 25, false), None);
        assert_eq!(t.q.errors[E_UNMATCHED].load(Relaxed), 1);
        assert_eq!(c.live(), 1, "the query is still in flight");
    }

    #[test]
    fn a_retiring_connection_ends_with_its_last_answer() {
        let mut t = traffic(None, None);
        let mut c = held();
        let (a, b) = (send(&mut c, 10), send(&mut c, 11));
        c.set(Flags::RETIRING, true);
        assert_eq!(t.answered(0, &mut c, a, Status::Ok, 20, false), None);
        assert!(c.flight.waiting.is_empty(), "it takes no new query");
        let end = t.answered(0, &mut c, b, Status::Ok, 21, false);
        assert_eq!(end, Some(ConnEnd::Lifetime));
    }

    #[test]
    fn messages_close_the_connection_after_its_last_answer() {
        let mut t = traffic(Some(1), None);
        let mut c = held();
        let q = send(&mut c, 10);
        let end = t.answered(0, &mut c, q, Status::Ok, 20, false);
        assert_eq!(end, Some(ConnEnd::Closed));
        assert!(c.flight.waiting.is_empty());
    }

    #[test]
    fn a_tcp_per_query_connection_closes_after_its_query() {
        let mut t = traffic(None, Some(1));
        let mut c = held();
        let q = send(&mut c, 10);
        let end = t.answered(0, &mut c, q, Status::Ok, 20, false);
        assert_eq!(end, Some(ConnEnd::Closed));
    }

    #[test]
    fn a_tcp_per_query_query_waits_for_a_free_slot() {
        let mut t = traffic(None, Some(1));
        // One connection open of one: it waits, counted so.
        t.per_query_due(5, 5, 1);
        assert_eq!(t.q.waited[W_SLOT].load(Relaxed), 1);
        assert!(t.slot_wanted());
        assert_eq!(t.next_for_slot(1), None);
        // The slot is free: its connection opens for it.
        assert_eq!(t.next_for_slot(0), Some(5));
        assert!(!t.slot_wanted());
        // Draining, none opens.
        t.per_query_due(6, 6, 0);
        t.draining = true;
        assert_eq!(t.next_for_slot(0), None);
    }
}
