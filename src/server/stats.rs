//! Server counters: one block of relaxed atomics per worker, written only by
//! that worker (no contention, no lock), read once a second by the main
//! thread for the stats line and at the end for the summary.

use std::sync::atomic::AtomicU64;
#[cfg(test)]
use std::sync::atomic::Ordering::Relaxed;

use serde::Serialize;

use crate::metrics::counters::counter_block;
pub use crate::metrics::MAX_ERRNO;

counter_block! {
    /// Counters of one worker. Aligned so two workers never share a cache line.
    #[repr(align(128))]
    pub struct WorkerStats;
    /// A plain copy of the counters, summed over workers.
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
    pub struct Totals;
    counters {
        accepted: count,
        closed: count,
        /// Messages answered (echo, discard, fixed: chunks; pong: lines; http:
        /// requests; dns: queries), TCP and UDP.
        requests: count,
        bytes_in: count,
        bytes_out: count,
        /// Malformed input: an HTTP 400, a DNS frame that cannot be parsed, an
        /// overlong line.
        bad_input: count,
        /// Connections that ended with a read or write error (reset, ...).
        conn_errors: count,
        /// Connections refused because the process ran out of fds.
        accept_no_fds: count,
        /// UDP replies the socket could not take (send buffer full).
        udp_dropped: count,
        /// Connections left in a listener's queue when a full process closed
        /// it (reset, unless net.ipv4.tcp_migrate_req moved them).
        @[serde(default)]
        queued_at_close: count,
        /// Connections a full member of an elastic group accepted and
        /// passed to a sibling with room (not shed).
        @[serde(default)]
        passed: count,
        /// Connections a member took from the channel (the rest of those
        /// passed were closed for want of a process with room, or waited
        /// at the end).
        @[serde(default)]
        taken: count,
        /// Connections the kernel closed as a member took them from the
        /// channel: it had no fd left for them (counted in accept_no_fds).
        @[serde(default)]
        passage_lost: count,
        /// Other accept errors, by errno.
        @[serde(default)]
        accept_errno: errno_list,
    }
    live {
        /// --mode push's counters.
        push: PushStats = PushStats::default(),
        /// WebSocket's counters.
        ws: WsStats = WsStats::default(),
    }
    plain {
        /// --mode push (absent otherwise).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        push: Option<PushTotals>,
        /// WebSocket (absent when no connection spoke it; boxed: most
        /// servers have none, and a process's figures stay small).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ws: Option<Box<WsTotals>>,
    }
}

counter_block! {
    /// WebSocket's counters of one worker (--mode websocket, --push-over
    /// websocket).
    pub struct WsStats;
    /// WebSocket: upgrades accepted, pings answered, close handshakes a
    /// client began; and the errors, each of which closed its connection
    /// (and is counted in `bad_input` too): upgrade requests refused (400,
    /// 426), unmasked frames, reserved opcodes, RSV bits, control frames
    /// over 125 bytes or fragmented, messages over 1 MiB, close frames with
    /// a bad code or one byte, continuation frames out of place.
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
    pub struct WsTotals;
    counters {
        upgrades: count,
        pings: count,
        closes: count,
        refused: count,
        unmasked: count,
        bad_opcode: count,
        rsv_bits: count,
        bad_control: count,
        too_long: count,
        bad_close: count,
        bad_fragment: count,
    }
    live {}
    plain {}
}

counter_block! {
    /// --mode push's counters of one worker.
    pub struct PushStats;
    /// --mode push's counters: messages due, how they went, subscriptions.
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
    pub struct PushTotals;
    counters {
        /// Messages due, sent on time, sent late.
        due: count,
        on_time: count,
        late: count,
        /// The latest a message went (µs after its due time).
        late_max_us: max,
        /// Dropped because the subscriber's socket was full or the worker a
        /// period behind.
        skipped_full: count,
        skipped_behind: count,
        /// UDP: subscriptions started, and ended by silence (--udp-idle).
        subscribed: count,
        expired: count,
    }
    live {
        /// The latest send of the second (µs after its due time; the main
        /// thread takes it each second).
        late_max_us_second: AtomicU64 = AtomicU64::new(0),
        /// Subscribers now (a gauge).
        subscribers: AtomicU64 = AtomicU64::new(0),
    }
    plain {}
}

pub use crate::metrics::{bump, Shared};

impl WsStats {
    /// Counts what a WebSocket connection did in one chunk.
    pub fn count(&self, n: &super::websocket::WsNotes) {
        use wire::ws::WsError as E;
        bump(&self.upgrades, u64::from(n.upgraded));
        bump(&self.pings, n.pings);
        bump(&self.closes, u64::from(n.closed));
        let Some(e) = n.error else {
            return;
        };
        let counter = match e {
            E::MaskedFromServer | E::UnmaskedFromClient => &self.unmasked,
            E::BadOpcode(_) => &self.bad_opcode,
            E::ReservedBits => &self.rsv_bits,
            E::ControlTooLong(_) | E::FragmentedControl => &self.bad_control,
            E::TooLong(_) => &self.too_long,
            E::CloseOneByte | E::BadCloseCode(_) => &self.bad_close,
            E::UnexpectedContinuation | E::ExpectedContinuation => &self.bad_fragment,
            E::Http(_)
            | E::NotGet
            | E::NoHost
            | E::NotUpgrade
            | E::WrongVersion
            | E::BadKey
            | E::BadAccept
            | E::UnaskedExtension => &self.refused,
        };
        bump(counter, 1);
    }
}

impl WsTotals {
    /// The errors by name (those counted), for the summary.
    pub fn errors(&self) -> Vec<(&'static str, u64)> {
        [
            ("upgrade refused", self.refused),
            ("unmasked frame", self.unmasked),
            ("bad opcode", self.bad_opcode),
            ("RSV bits", self.rsv_bits),
            ("bad control frame", self.bad_control),
            ("over 1 MiB", self.too_long),
            ("bad close", self.bad_close),
            ("continuation out of place", self.bad_fragment),
        ]
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .collect()
    }
}

impl PushTotals {
    /// Messages sent (on time or late).
    pub fn sent(&self) -> u64 {
        self.on_time + self.late
    }

    /// The counters since `o` (a second's); the latest send is this one's.
    pub fn since(&self, o: &PushTotals) -> PushTotals {
        PushTotals {
            due: self.due - o.due,
            on_time: self.on_time - o.on_time,
            late: self.late - o.late,
            late_max_us: self.late_max_us,
            skipped_full: self.skipped_full - o.skipped_full,
            skipped_behind: self.skipped_behind - o.skipped_behind,
            subscribed: self.subscribed - o.subscribed,
            expired: self.expired - o.expired,
        }
    }
}

impl Totals {
    /// The workers' counters together: each one's snapshot, merged (the
    /// errnos in their order).
    pub fn sum<'a>(workers: impl IntoIterator<Item = &'a WorkerStats>, push: bool) -> Totals {
        let mut t = Totals::default();
        for w in workers {
            let mut one = Totals::snapshot(w);
            if push {
                one.push = Some(PushTotals::snapshot(&w.push));
            }
            let ws = WsTotals::snapshot(&w.ws);
            if ws != WsTotals::default() {
                one.ws = Some(Box::new(ws));
            }
            t.merge(&one);
        }
        t.accept_errno.sort_unstable();
        t
    }

    /// Adds another part's counters (a worker's, a process's): every one
    /// summed; errnos not seen yet go last.
    pub fn merge(&mut self, o: &Totals) {
        self.merge_counters(o);
        if let Some(p) = &o.push {
            self.push
                .get_or_insert_with(PushTotals::default)
                .merge_counters(p);
        }
        if let Some(w) = &o.ws {
            self.ws.get_or_insert_default().merge_counters(w);
        }
    }

    /// Every error counted, whatever its kind.
    pub fn errors(&self) -> u64 {
        self.bad_input
            + self.conn_errors
            + self.accept_no_fds
            + self.udp_dropped
            + self.accept_errno.iter().map(|(_, n)| n).sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_workers() {
        let a = WorkerStats::default();
        let b = WorkerStats::default();
        bump(&a.requests, 3);
        bump(&b.requests, 4);
        bump(&b.accept_errno[libc::ECONNABORTED as usize], 2);
        let t = Totals::sum([&a, &b], false);
        assert_eq!(t.requests, 7);
        assert_eq!(t.accept_errno, vec![(libc::ECONNABORTED, 2)]);
        assert_eq!(t.errors(), 2);
    }

    #[test]
    fn sums_are_merges_of_each_worker_with_errnos_in_order() {
        let a = WorkerStats::default();
        let b = WorkerStats::default();
        bump(&a.accepted, 2);
        bump(&b.accepted, 5);
        bump(&a.bytes_in, 10);
        bump(&b.queued_at_close, 1);
        bump(&a.accept_errno[libc::ECONNABORTED as usize], 1);
        bump(&b.accept_errno[libc::EPERM as usize], 3);
        bump(&b.accept_errno[libc::ECONNABORTED as usize], 2);
        let t = Totals::sum([&a, &b], false);
        assert_eq!((t.accepted, t.bytes_in, t.queued_at_close), (7, 10, 1));
        assert_eq!(
            t.accept_errno,
            vec![(libc::EPERM, 3), (libc::ECONNABORTED, 3)]
        );
        assert_eq!(t.errors(), 6);
    }

    #[test]
    fn processes_merge_with_new_errnos_last() {
        let mut a = Totals {
            requests: 4,
            udp_dropped: 1,
            accept_errno: vec![(libc::ECONNABORTED, 1)],
            ..Totals::default()
        };
        let b = Totals {
            requests: 6,
            conn_errors: 2,
            accept_errno: vec![(libc::EPERM, 2), (libc::ECONNABORTED, 1)],
            ..Totals::default()
        };
        a.merge(&b);
        assert_eq!((a.requests, a.udp_dropped, a.conn_errors), (10, 1, 2));
        assert_eq!(
            a.accept_errno,
            vec![(libc::ECONNABORTED, 2), (libc::EPERM, 2)]
        );
    }

    #[test]
    fn push_counters_sum_and_keep_the_latest_send() {
        let a = WorkerStats::default();
        let b = WorkerStats::default();
        bump(&a.push.due, 3);
        bump(&b.push.due, 4);
        a.push.late_max_us.fetch_max(900, Relaxed);
        b.push.late_max_us.fetch_max(300, Relaxed);
        let t = Totals::sum([&a, &b], true);
        let p = t.push.unwrap();
        assert_eq!((p.due, p.late_max_us), (7, 900));
        assert!(Totals::sum([&a, &b], false).push.is_none());
    }

    #[test]
    fn websocket_counters_sum_by_name_and_stay_absent_unused() {
        use crate::server::websocket::WsNotes;
        let a = WorkerStats::default();
        let b = WorkerStats::default();
        assert!(Totals::sum([&a, &b], false).ws.is_none());
        a.ws.count(&WsNotes {
            upgraded: true,
            pings: 2,
            closed: true,
            error: None,
        });
        b.ws.count(&WsNotes {
            error: Some(wire::ws::WsError::UnmaskedFromClient),
            ..WsNotes::default()
        });
        b.ws.count(&WsNotes {
            error: Some(wire::ws::WsError::NotUpgrade),
            ..WsNotes::default()
        });
        let mut t = Totals::sum([&a, &b], false);
        let w = t.ws.as_deref().unwrap();
        assert_eq!((w.upgrades, w.pings, w.closes), (1, 2, 1));
        assert_eq!(
            w.errors(),
            vec![("upgrade refused", 1), ("unmasked frame", 1)]
        );
        // A process's totals merge into the group's.
        let other = t.clone();
        t.merge(&other);
        assert_eq!(t.ws.unwrap().upgrades, 2);
    }

    #[test]
    fn peak_follows_current() {
        let s = Shared::default();
        s.opened();
        s.opened();
        s.closed();
        s.opened();
        assert_eq!(s.current.load(Relaxed), 2);
        assert_eq!(s.peak.load(Relaxed), 2);
    }
}
