//! Server counters: one block of relaxed atomics per worker, written only by
//! that worker (no contention, no lock), read once a second by the main
//! thread for the stats line and at the end for the summary.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;

pub use crate::metrics::MAX_ERRNO;

/// Counters of one worker. Aligned so two workers never share a cache line.
#[repr(align(128))]
pub struct WorkerStats {
    pub accepted: AtomicU64,
    pub closed: AtomicU64,
    /// Messages answered (echo, discard, fixed: chunks; pong: lines; http:
    /// requests; dns: queries), TCP and UDP.
    pub requests: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Malformed input: an HTTP 400, a DNS frame that cannot be parsed, an
    /// overlong line.
    pub bad_input: AtomicU64,
    /// Connections that ended with a read or write error (reset, ...).
    pub conn_errors: AtomicU64,
    /// Connections refused because the process ran out of fds.
    pub accept_no_fds: AtomicU64,
    /// UDP replies the socket could not take (send buffer full).
    pub udp_dropped: AtomicU64,
    /// Connections left in a listener's queue when a full process closed
    /// it (reset, unless net.ipv4.tcp_migrate_req moved them).
    pub queued_at_close: AtomicU64,
    /// Other accept errors, by errno.
    pub accept_errno: [AtomicU64; MAX_ERRNO],
    /// --mode push: messages due, sent on time, sent late, dropped because
    /// the subscriber's socket was full or the worker a period behind;
    /// UDP subscriptions started and expired; the latest send (µs after
    /// its due time) of the run, and of the second (the main thread takes
    /// it each second).
    pub push_due: AtomicU64,
    pub push_on_time: AtomicU64,
    pub push_late: AtomicU64,
    pub push_skipped_full: AtomicU64,
    pub push_skipped_behind: AtomicU64,
    pub push_subscribed: AtomicU64,
    pub push_expired: AtomicU64,
    pub push_late_max_us: AtomicU64,
    pub push_late_max_us_second: AtomicU64,
    /// Subscribers now (a gauge).
    pub push_subscribers: AtomicU64,
}

impl Default for WorkerStats {
    fn default() -> Self {
        WorkerStats {
            accepted: AtomicU64::new(0),
            closed: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            bad_input: AtomicU64::new(0),
            conn_errors: AtomicU64::new(0),
            accept_no_fds: AtomicU64::new(0),
            udp_dropped: AtomicU64::new(0),
            queued_at_close: AtomicU64::new(0),
            accept_errno: std::array::from_fn(|_| AtomicU64::new(0)),
            push_due: AtomicU64::new(0),
            push_on_time: AtomicU64::new(0),
            push_late: AtomicU64::new(0),
            push_skipped_full: AtomicU64::new(0),
            push_skipped_behind: AtomicU64::new(0),
            push_subscribed: AtomicU64::new(0),
            push_expired: AtomicU64::new(0),
            push_late_max_us: AtomicU64::new(0),
            push_late_max_us_second: AtomicU64::new(0),
            push_subscribers: AtomicU64::new(0),
        }
    }
}

pub use crate::metrics::{bump, Shared};

/// A plain copy of the counters, summed over workers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Totals {
    pub accepted: u64,
    pub closed: u64,
    pub requests: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub bad_input: u64,
    pub conn_errors: u64,
    pub accept_no_fds: u64,
    pub udp_dropped: u64,
    #[serde(default)]
    pub queued_at_close: u64,
    #[serde(default)]
    pub accept_errno: Vec<(i32, u64)>,
    /// --mode push (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<PushTotals>,
}

/// --mode push's counters: messages due, how they went, subscriptions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PushTotals {
    pub due: u64,
    pub on_time: u64,
    pub late: u64,
    /// The latest a message went (µs after its due time).
    pub late_max_us: u64,
    pub skipped_full: u64,
    pub skipped_behind: u64,
    /// UDP: subscriptions started, and ended by silence (--udp-idle).
    pub subscribed: u64,
    pub expired: u64,
}

impl PushTotals {
    fn merge(&mut self, o: &PushTotals) {
        self.due += o.due;
        self.on_time += o.on_time;
        self.late += o.late;
        self.late_max_us = self.late_max_us.max(o.late_max_us);
        self.skipped_full += o.skipped_full;
        self.skipped_behind += o.skipped_behind;
        self.subscribed += o.subscribed;
        self.expired += o.expired;
    }

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
    /// One worker's counters as they are now.
    fn of(w: &WorkerStats) -> Totals {
        Totals {
            accepted: w.accepted.load(Relaxed),
            closed: w.closed.load(Relaxed),
            requests: w.requests.load(Relaxed),
            bytes_in: w.bytes_in.load(Relaxed),
            bytes_out: w.bytes_out.load(Relaxed),
            bad_input: w.bad_input.load(Relaxed),
            conn_errors: w.conn_errors.load(Relaxed),
            accept_no_fds: w.accept_no_fds.load(Relaxed),
            udp_dropped: w.udp_dropped.load(Relaxed),
            queued_at_close: w.queued_at_close.load(Relaxed),
            accept_errno: w
                .accept_errno
                .iter()
                .enumerate()
                .map(|(e, c)| (e as i32, c.load(Relaxed)))
                .filter(|&(_, n)| n > 0)
                .collect(),
            push: None,
        }
    }

    /// One worker's push counters.
    fn push_of(w: &WorkerStats) -> PushTotals {
        PushTotals {
            due: w.push_due.load(Relaxed),
            on_time: w.push_on_time.load(Relaxed),
            late: w.push_late.load(Relaxed),
            late_max_us: w.push_late_max_us.load(Relaxed),
            skipped_full: w.push_skipped_full.load(Relaxed),
            skipped_behind: w.push_skipped_behind.load(Relaxed),
            subscribed: w.push_subscribed.load(Relaxed),
            expired: w.push_expired.load(Relaxed),
        }
    }

    /// The workers' counters together: each one's snapshot, merged (the
    /// errnos in their order).
    pub fn sum<'a>(workers: impl IntoIterator<Item = &'a WorkerStats>, push: bool) -> Totals {
        let mut t = Totals::default();
        for w in workers {
            let mut one = Totals::of(w);
            if push {
                one.push = Some(Totals::push_of(w));
            }
            t.merge(&one);
        }
        t.accept_errno.sort_unstable();
        t
    }

    /// Adds another part's counters (a worker's, a process's): every one
    /// summed; errnos not seen yet go last.
    pub fn merge(&mut self, o: &Totals) {
        self.accepted += o.accepted;
        self.closed += o.closed;
        self.requests += o.requests;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
        self.bad_input += o.bad_input;
        self.conn_errors += o.conn_errors;
        self.accept_no_fds += o.accept_no_fds;
        self.udp_dropped += o.udp_dropped;
        self.queued_at_close += o.queued_at_close;
        if let Some(p) = &o.push {
            self.push.get_or_insert_with(PushTotals::default).merge(p);
        }
        for &(e, n) in &o.accept_errno {
            match self.accept_errno.iter_mut().find(|(x, _)| *x == e) {
                Some((_, m)) => *m += n,
                None => self.accept_errno.push((e, n)),
            }
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
