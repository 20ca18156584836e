//! What a worker does with its connections, chosen once at start: hold
//! them ([`Workload::Hold`]), send queries on them ([`Workload::Traffic`]), or
//! listen to what the server pushes ([`Workload::Push`]). Each mode's state is
//! its own: the traffic's pacing, recorder, open-loop choice, deadlines
//! and the queries waiting for a connection; the push streams.

use std::collections::VecDeque;
use std::sync::Arc;

use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

use super::conn::Conn;
use super::deadlines::{Deadlines, Entry};
use super::pacing::{Pacing, Slack};
use super::proto::Codec;
use super::push::PushRx;
use super::recorder::{Recorder, RttLog};
use crate::metrics::{bump, QueryCounters, E_BEHIND, E_CONNECT, E_NOT_SENT};
use crate::scenario::{Model, Query};

// One per worker, reached on every query: not boxed (a box would be one
// more pointer to follow per event).
#[allow(clippy::large_enum_variant)]
pub(super) enum Workload {
    /// No traffic: connections are opened, verified and held.
    Hold,
    Traffic(TrafficState),
    /// --proto push: what arrives is measured.
    Push(PushRx),
}

impl Workload {
    #[inline]
    pub fn traffic(&self) -> Option<&TrafficState> {
        match self {
            Workload::Traffic(t) => Some(t),
            _ => None,
        }
    }

    #[inline]
    pub fn traffic_mut(&mut self) -> Option<&mut TrafficState> {
        match self {
            Workload::Traffic(t) => Some(t),
            _ => None,
        }
    }

    #[inline]
    pub fn push(&self) -> Option<&PushRx> {
        match self {
            Workload::Push(p) => Some(p),
            _ => None,
        }
    }

    #[inline]
    pub fn push_mut(&mut self) -> Option<&mut PushRx> {
        match self {
            Workload::Push(p) => Some(p),
            _ => None,
        }
    }

    #[inline]
    pub fn is_push(&self) -> bool {
        matches!(self, Workload::Push(_))
    }

    /// tcp-per-query: a connection per query.
    #[inline]
    pub fn per_query(&self) -> bool {
        matches!(self, Workload::Traffic(t) if t.per_query.is_some())
    }

    /// The mode's state, borrowed for one call (what a connection's end
    /// updates).
    #[inline]
    pub fn as_mut(&mut self) -> WorkloadMut<'_> {
        match self {
            Workload::Hold => WorkloadMut::Hold,
            Workload::Traffic(t) => WorkloadMut::Traffic(t),
            Workload::Push(p) => WorkloadMut::Push(p),
        }
    }

    #[inline]
    pub fn has_traffic(&self) -> bool {
        matches!(self, Workload::Traffic(_))
    }

    /// The codec answers are framed with: the traffic's, or else the
    /// probe's.
    #[inline]
    pub fn codec<'a>(&'a self, probe: &'a Codec) -> &'a Codec {
        match self {
            Workload::Traffic(t) => &t.codec,
            _ => probe,
        }
    }
}

/// A worker's [`Workload`] borrowed for one call: a handler that holds the
/// traffic's state (or the push streams') hands it on as this, so that a
/// connection's end updates it without reaching for the worker.
pub(super) enum WorkloadMut<'a> {
    Hold,
    Traffic(&'a mut TrafficState),
    Push(&'a mut PushRx),
}

/// The query side of a worker.
pub(super) struct TrafficState {
    pub codec: Codec,
    pub pacing: Pacing,
    /// --slack: due queries held to go out together.
    pub slack: Slack,
    pub rec: Recorder,
    pub window: u64,
    /// Queries a connection sends at most: the lower of --messages and
    /// --max-queries-per-conn (worked out once, not per query).
    pub cap: Option<u64>,
    pub timeout_ns: u64,
    /// When traffic started (ns), once it has.
    pub started: Option<u64>,
    /// The traffic has ended (--drain): no new query is due, answers let
    /// none go; what was due and waits for its connection's window still
    /// leaves.
    pub draining: bool,
    /// --close-on-timeout: a query that times out ends its connection.
    pub close_on_timeout: bool,
    /// The round robin's last pick.
    pub rr: usize,
    pub rng: Pcg64Mcg,
    /// Held connections open-loop queries pick from.
    pub active: Vec<usize>,
    pub deadlines: Deadlines,
    /// The --control rate generation applied.
    pub rate_gen: u64,
    /// This worker's part of --queries not sent yet (None: no such limit).
    pub quota: Option<u64>,
    /// It said it has done its part of --queries.
    pub quota_done: bool,
    /// Intended times of queries that came due while no connection could
    /// take them but one was on its way (recycling, reconnects): the next
    /// connection ready takes them.
    pub orphans: VecDeque<u64>,
    /// tcp-per-query: each query opens a connection of its own.
    pub per_query: Option<PerQuery>,
    /// Closed loop: a connection always has queries in flight, so it keeps
    /// its table of queries in flight when a window's answers empty it,
    /// and its output buffer between writes.
    pub busy: bool,
    /// --max-queries-per-conn: a connection that answered as many closes
    /// (and is replaced).
    pub recycle_after: Option<u64>,
    /// --messages: a connection that answered as many closes, unless the
    /// run holds its connections (`hold`).
    pub messages: Option<u64>,
    pub hold: bool,
    pub q: Arc<QueryCounters>,
}

/// tcp-per-query's pacing of the transport: a connection per query.
pub(super) struct PerQuery {
    /// Intended times of queries waiting for a free connection slot.
    pub wait: VecDeque<u64>,
    /// How many connections this worker may have open.
    pub share: u64,
}

/// What the traffic is built from.
pub(super) struct TrafficSetup<'a> {
    pub traffic: &'a crate::scenario::Traffic,
    pub hosts: &'a [String],
    pub queries: Arc<QueryCounters>,
    pub reports: super::seconds::ReportTx,
    pub rtt_log: Option<(std::sync::mpsc::Sender<Vec<u8>>, u64)>,
    pub service_seconds: bool,
    /// This worker and how many there are.
    pub id: u64,
    pub workers: u64,
    /// tcp-per-query: this worker's share of the connections.
    pub per_query: Option<u64>,
    /// The transport is UDP.
    pub datagrams: bool,
    /// The run holds its connections to the end (`-T hold`).
    pub hold: bool,
}

impl TrafficState {
    pub fn new(s: TrafficSetup) -> TrafficState {
        let t = s.traffic;
        let (w, id) = (s.workers, s.id);
        let highest = ((t.timeout_s * 2e6) as u64).max(1000);
        let codec = Codec::new(&t.query, s.hosts, s.datagrams);
        let log = s
            .rtt_log
            .map(|(tx, epoch)| RttLog::new(tx, epoch, super::proto::name(t.query.proto())));
        let closed_loop = matches!(t.model, Model::ClosedLoop { .. });
        let rec = Recorder::new(
            s.queries.clone(),
            highest,
            codec.qtypes(),
            s.reports,
            log,
            (closed_loop, s.service_seconds),
        )
        .with_ok(crate::metrics::OkMask::new(crate::metrics::OkAnswers {
            rcodes: &t.ok_rcodes,
            status: &t.ok_status,
        }));
        TrafficState {
            codec,
            pacing: Pacing::new(&t.model, w, id, t.seed),
            slack: Slack::new(t.slack_s),
            rec,
            window: t.window.unwrap_or(u64::MAX),
            cap: [t.messages, t.max_queries_per_conn]
                .into_iter()
                .flatten()
                .min(),
            timeout_ns: (t.timeout_s * 1e9) as u64,
            started: None,
            draining: false,
            close_on_timeout: t.close_on_timeout,
            rr: 0,
            rng: Pcg64Mcg::seed_from_u64(t.seed ^ (id + 1)),
            active: Vec::new(),
            deadlines: Deadlines::default(),
            rate_gen: 0,
            // --queries is split like the pacer's rate: evenly over workers.
            quota: t.queries.map(|q| q / w + u64::from(id < q % w)),
            quota_done: false,
            orphans: VecDeque::new(),
            per_query: s.per_query.map(|share| PerQuery {
                wait: VecDeque::new(),
                share,
            }),
            busy: closed_loop,
            recycle_after: t.max_queries_per_conn,
            messages: t.messages,
            hold: s.hold,
            q: s.queries,
        }
    }

    /// TrafficState starts at `started` (seen at `now_ns`): interval
    /// connections get their staggered first sends, closed-loop connections
    /// their first window of queries.
    /// `seq_of`: a held connection's attempt, by its key.
    pub fn start(&mut self, started: u64, now_ns: u64, seq_of: impl Fn(usize) -> u64) {
        self.started = Some(started);
        self.rec.start(started, now_ns);
        let held: Vec<(usize, u64)> = self.active.iter().map(|&k| (k, seq_of(k))).collect();
        let per_query = self.per_query.as_ref().map(|pq| pq.share);
        self.pacing.begin(started, &held, self.window, per_query);
    }

    /// Follows a --control rate of generation `gen` (`rate`: f64 bits)
    /// from `now_ns` on (traffic `started`), after the turn sent what was
    /// due: what a worker behind its schedule did not send of the old rate
    /// is due and never sent (`behind_schedule`).
    pub fn follow_rate(&mut self, gen: u64, rate: u64, now_ns: u64, started: u64) {
        if self.rate_gen != gen {
            self.rate_gen = gen;
            let behind = self.pacing.set_rate(f64::from_bits(rate), now_ns, started);
            self.behind(behind);
        }
    }

    /// The traffic ends at `now_ns`: what a worker behind its schedule had
    /// not sent of what was due by then is due and never sent
    /// (`behind_schedule`); `live`: whether connection (key, seq) is there.
    pub fn end_schedule(&mut self, now_ns: u64, live: impl Fn(usize, u64) -> bool) {
        if let Some(started) = self.started {
            let behind = self.pacing.end(now_ns, started, live);
            self.behind(behind);
        }
    }

    /// `n` queries came due that the worker, behind its schedule, never
    /// sent (those --queries still had tickets for).
    fn behind(&mut self, n: u64) {
        let n = self.quota.map_or(n, |left| n.min(left));
        if n == 0 {
            return;
        }
        if let Some(left) = self.quota.as_mut() {
            *left -= n;
        }
        bump(&self.q.due, n);
        self.rec.errors(E_BEHIND, n);
    }

    /// Keeps a due query of `intended` in `waiting` (behind a full window,
    /// a full socket, or for a connection slot) at `now_ns`. Those that
    /// have waited there for --timeout are given up first (`not_sent`): a
    /// server that never reads holds at most the rate times --timeout of
    /// them, not the whole run's.
    pub fn keep_waiting(&mut self, waiting: &mut VecDeque<u64>, intended: u64, now_ns: u64) {
        keep(waiting, intended, now_ns, self.timeout_ns, &mut self.rec);
    }

    /// tcp-per-query: keeps a due query for a free connection slot, as
    /// [`TrafficState::keep_waiting`].
    pub fn wait_for_slot(&mut self, intended: u64, now_ns: u64) {
        if let Some(pq) = self.per_query.as_mut() {
            keep(
                &mut pq.wait,
                intended,
                now_ns,
                self.timeout_ns,
                &mut self.rec,
            );
        }
    }

    /// Sets the deadline of connection `key` at its oldest query in flight
    /// (none when nothing is in flight).
    pub fn set_deadline(&mut self, key: usize, c: &mut Conn) {
        if let Some(id) = c.flight.take_deadline() {
            self.deadlines.remove(id);
        }
        if let Some(sent) = c.flight.oldest_sent() {
            let entry = Entry {
                conn: key,
                seq: c.seq,
            };
            c.flight.deadline = self.deadlines.push(sent + self.timeout_ns, entry);
        }
    }

    /// What is due next (ns): the next query, the first deadline, the end
    /// of the second. None before the traffic starts.
    pub fn wakeup(&self, mut consider: impl FnMut(u64)) -> bool {
        let Some(started) = self.started else {
            return false;
        };
        // (Draining sends nothing: a due time passed then wakes nobody.)
        if let Some(at) = self.pacing.next_due(started).filter(|_| !self.draining) {
            consider(self.slack.wake(at));
        }
        if let Some((at, _)) = self.deadlines.first() {
            consider(at);
        }
        // The per-second report.
        consider(self.rec.second_ends());
        true
    }

    /// A tcp-per-query connection is gone; `sent`: queries it sent (0 when
    /// it failed before its query went out, which is then an error). In
    /// closed loop the next query starts after --think. `now_ns`: the
    /// time since the run's start.
    pub fn pq_lost(&mut self, sent: u64, now_ns: impl FnOnce() -> u64) {
        if self.per_query.is_none() {
            return;
        }
        let now = now_ns();
        if sent == 0 {
            self.rec.error(E_CONNECT);
        }
        self.pacing.replace_connection(now);
    }

    /// Queries due that wait for a connection to take them.
    pub fn has_orphans(&self) -> bool {
        !self.orphans.is_empty()
    }

    /// Queries due that no connection came for: those waiting for one,
    /// and tcp-per-query's waiting for a free slot.
    pub fn never_connected(&self) -> usize {
        self.orphans.len() + self.per_query.as_ref().map_or(0, |pq| pq.wait.len())
    }

    /// The traffic's last turn is at `now_ns`: --slack sends what it holds
    /// in it, not later.
    pub fn last_turn(&mut self, now_ns: u64) {
        self.slack.end(now_ns);
    }

    /// From now on, answers only: the drain.
    pub fn drain(&mut self) {
        self.draining = true;
    }

    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// A query failed by `cause` (an error of [`crate::metrics`]).
    #[inline]
    pub fn error(&mut self, cause: usize) {
        self.rec.error(cause);
    }

    /// What the worker measured, at the run's end.
    pub fn finish(self) -> super::recorder::Measured {
        self.rec.finish()
    }

    /// Takes one query from what is left of --queries; false when none is.
    #[inline]
    pub fn take_ticket(&mut self) -> bool {
        match &mut self.quota {
            None => true,
            Some(0) => false,
            Some(n) => {
                *n -= 1;
                true
            }
        }
    }
}

/// Keeps `intended` at the back of `waiting`, after giving up (counted
/// not sent) those that waited there since before `now_ns - timeout_ns`.
fn keep(
    waiting: &mut VecDeque<u64>,
    intended: u64,
    now_ns: u64,
    timeout_ns: u64,
    rec: &mut Recorder,
) {
    let stale = now_ns.saturating_sub(timeout_ns);
    while waiting.front().is_some_and(|&at| at < stale) {
        waiting.pop_front();
        rec.error(E_NOT_SENT);
    }
    waiting.push_back(intended);
}

/// The probe's query when the scenario names none: a DNS query, which
/// echo and DNS servers both answer.
pub(super) fn default_probe() -> Query {
    Query::Dns {
        qtype: wire::dns::rtype::A,
        names: vec!["throng.probe".into()],
        qtypes: Vec::new(),
        edns: None,
        dnssec_ok: false,
    }
}
