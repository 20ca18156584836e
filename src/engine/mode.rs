//! What a worker does with its connections, chosen once at start: hold
//! them ([`Mode::Hold`]), send queries on them ([`Mode::Traffic`]), or
//! listen to what the server pushes ([`Mode::Push`]). Each mode's state is
//! its own: the traffic's pacing, recorder, open-loop choice, deadlines
//! and the queries waiting for a connection; the push streams.

use std::collections::VecDeque;
use std::sync::Arc;

use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;
use slab::Slab;

use super::conn::{Conn, NOT_ACTIVE};
use super::deadlines::Deadlines;
use super::pacing::Pacing;
use super::proto::Codec;
use super::push::PushRx;
use super::recorder::{Recorder, RttLog};
use crate::metrics::QueryCounters;
use crate::scenario::{Model, Query};

// One per worker, reached on every query: not boxed (a box would be one
// more pointer to follow per event).
#[allow(clippy::large_enum_variant)]
pub(super) enum Mode {
    /// No traffic: connections are opened, verified and held.
    Hold,
    Traffic(Traffic),
    /// --proto push: what arrives is measured.
    Push(PushRx),
}

impl Mode {
    #[inline]
    pub fn traffic(&self) -> Option<&Traffic> {
        match self {
            Mode::Traffic(t) => Some(t),
            _ => None,
        }
    }

    #[inline]
    pub fn traffic_mut(&mut self) -> Option<&mut Traffic> {
        match self {
            Mode::Traffic(t) => Some(t),
            _ => None,
        }
    }

    #[inline]
    pub fn push(&self) -> Option<&PushRx> {
        match self {
            Mode::Push(p) => Some(p),
            _ => None,
        }
    }

    #[inline]
    pub fn push_mut(&mut self) -> Option<&mut PushRx> {
        match self {
            Mode::Push(p) => Some(p),
            _ => None,
        }
    }

    #[inline]
    pub fn is_push(&self) -> bool {
        matches!(self, Mode::Push(_))
    }

    /// tcp-per-query: a connection per query.
    #[inline]
    pub fn per_query(&self) -> bool {
        matches!(self, Mode::Traffic(t) if t.per_query.is_some())
    }

    #[inline]
    pub fn has_traffic(&self) -> bool {
        matches!(self, Mode::Traffic(_))
    }

    /// The codec answers are framed with: the traffic's, or else the
    /// probe's.
    #[inline]
    pub fn codec<'a>(&'a self, probe: &'a Codec) -> &'a Codec {
        match self {
            Mode::Traffic(t) => &t.codec,
            _ => probe,
        }
    }
}

/// The query side of a worker.
pub(super) struct Traffic {
    pub codec: Codec,
    pub pacing: Pacing,
    pub rec: Recorder,
    pub window: u64,
    /// Queries a connection sends at most: the lower of --messages and
    /// --max-queries-per-conn (worked out once, not per query).
    pub cap: Option<u64>,
    pub timeout_ns: u64,
    /// When traffic started (ns), once it has.
    pub started: Option<u64>,
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
    pub reports: super::ReportTx,
    pub rtt_log: Option<(std::sync::mpsc::Sender<Vec<u8>>, u64)>,
    pub service_seconds: bool,
    /// This worker and how many there are.
    pub id: u64,
    pub workers: u64,
    /// tcp-per-query: this worker's share of the connections.
    pub per_query: Option<u64>,
}

impl Traffic {
    pub fn new(s: TrafficSetup) -> Traffic {
        let t = s.traffic;
        let (w, id) = (s.workers, s.id);
        let highest = ((t.timeout_s * 2e6) as u64).max(1000);
        let codec = Codec::new(&t.query, s.hosts);
        let log = s
            .rtt_log
            .map(|(tx, epoch)| RttLog::new(tx, epoch, t.query.proto().name()));
        let closed_loop = matches!(t.model, Model::ClosedLoop { .. });
        let rec = Recorder::new(
            s.queries,
            highest,
            codec.qtypes(),
            s.reports,
            log,
            (closed_loop, s.service_seconds),
        );
        Traffic {
            codec,
            pacing: Pacing::new(&t.model, w, id, t.seed),
            rec,
            window: t.window.unwrap_or(u64::MAX),
            cap: [t.messages, t.max_queries_per_conn]
                .into_iter()
                .flatten()
                .min(),
            timeout_ns: (t.timeout_s * 1e9) as u64,
            started: None,
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
        }
    }

    /// Takes the connection at `pos` out of the open-loop choice (the last
    /// one takes its place).
    pub fn leave(&mut self, conns: &mut Slab<Conn>, pos: u32) {
        remove_active(&mut self.active, conns, pos);
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

/// Takes the connection at `pos` out of the active list (the last one
/// takes its place).
fn remove_active(active: &mut Vec<usize>, conns: &mut Slab<Conn>, pos: u32) {
    let pos = pos as usize;
    let key = active.swap_remove(pos);
    if let Some(c) = conns.get_mut(key) {
        c.active_pos = NOT_ACTIVE;
    }
    if let Some(&moved) = active.get(pos) {
        conns[moved].active_pos = pos as u32;
    }
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
