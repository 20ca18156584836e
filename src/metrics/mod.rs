//! Counters and histograms of a client run.
//!
//! Each worker owns one [`ConnCounters`] (relaxed atomics only it writes,
//! read once a second for the live view) and its own HDR histogram (merged
//! after the workers join). Nothing here is shared on the hot path except
//! the open-connection gauge, touched once per open and close.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};

mod answers;
pub(crate) mod counters;
pub mod exported;
mod histograms;
mod ws_close;

use counters::counter_block;

use answers::named_rcodes;
pub use answers::{qtype_name, rcode_of, OkAnswers, OkMask, REDIS_FAILED};
pub use histograms::{
    clear_if_used, de_histogram_text, decode_histogram, encode_histogram, encode_histogram_plain,
    growing, new_histogram, Grow, Histograms, Latency, Percentiles,
};
pub use ws_close::{
    ws_close_map, ws_close_slot, ws_close_slots, ws_refused_map, ws_refused_slot, ws_refused_slots,
    WS_CLOSE_SLOTS, WS_REFUSED_SLOTS,
};

/// Sums two optional figures: the one there when only one is.
pub fn add_opt<T: std::ops::Add<Output = T>>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x + y),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Linux errno values are below this.
pub const MAX_ERRNO: usize = 134;

/// Adds to a counter that only the calling thread writes: a plain load and
/// store, no locked read-modify-write.
#[inline]
pub fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed) + n, Relaxed);
}

/// State shared by all workers of a side and the main thread.
#[derive(Default)]
pub struct Shared {
    pub stop: AtomicBool,
    /// Client: the traffic is over; wait for what is in flight (--drain).
    pub drain: AtomicBool,
    /// Client: when the query traffic starts, in ns since the run's start,
    /// plus one (0: not yet).
    pub traffic_at: AtomicU64,
    /// Client: a rate set on --control (f64 bits), and how many times one was.
    pub rate_override: AtomicU64,
    pub rate_gen: AtomicU64,
    /// Client: open connections asked on --control, plus one (0: none).
    pub conn_level: AtomicU64,
    /// Connections open now, over all workers.
    pub current: AtomicI64,
    /// The most ever open at once.
    pub peak: AtomicI64,
    /// Client: --stop-on held: attempts of the ramp not started are not.
    pub ramp_stop: AtomicBool,
}

impl Shared {
    pub fn opened(&self) {
        let now = self.current.fetch_add(1, Relaxed) + 1;
        self.peak.fetch_max(now, Relaxed);
    }

    pub fn closed(&self) {
        self.current.fetch_sub(1, Relaxed);
    }
}

/// Where a connection attempt ended, when it did not end well.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Bucket {
    /// ECONNREFUSED: nothing listening, or the server refused.
    Refused,
    /// No SYN-ACK within --connect-timeout (or ETIMEDOUT).
    TimedOut,
    /// EADDRNOTAVAIL / EADDRINUSE: no ephemeral port left.
    NoFreePort,
    /// EMFILE / ENFILE: this process is out of fds.
    OutOfFds,
    /// ENETUNREACH / EHOSTUNREACH.
    Unreachable,
    /// Any other errno while connecting.
    Other,
    /// Established, then the server closed it (EOF).
    ClosedByPeer,
    /// Established, then reset (ECONNRESET / EPIPE) after data flowed.
    Reset,
    /// Established as seen by the client, never accepted by the server: the
    /// first data got a reset.
    HalfOpen,
    /// The TLS handshake failed (certificate, protocol) or timed out.
    Tls,
    /// The server answered the verification probe with a refusal and
    /// closed: it accepted the connection but not what was sent on it.
    Rejected,
}

/// Failure buckets.
pub const BUCKETS: usize = 11;

impl Bucket {
    pub const ALL: [Bucket; BUCKETS] = [
        Bucket::Refused,
        Bucket::TimedOut,
        Bucket::NoFreePort,
        Bucket::OutOfFds,
        Bucket::Unreachable,
        Bucket::Other,
        Bucket::ClosedByPeer,
        Bucket::Reset,
        Bucket::HalfOpen,
        Bucket::Tls,
        Bucket::Rejected,
    ];

    /// The key in JSON (`connections.failed.<key>`).
    pub fn key(self) -> &'static str {
        match self {
            Bucket::Refused => "refused",
            Bucket::TimedOut => "timed_out",
            Bucket::NoFreePort => "no_free_port",
            Bucket::OutOfFds => "out_of_fds",
            Bucket::Unreachable => "unreachable",
            Bucket::Other => "other",
            Bucket::ClosedByPeer => "closed_by_peer",
            Bucket::Reset => "reset",
            Bucket::HalfOpen => "half_open",
            Bucket::Tls => "tls",
            Bucket::Rejected => "rejected",
        }
    }

    /// The bucket of a connect-phase errno.
    pub fn of_connect_errno(errno: i32) -> Bucket {
        match errno {
            libc::ECONNREFUSED => Bucket::Refused,
            libc::ETIMEDOUT => Bucket::TimedOut,
            libc::EADDRNOTAVAIL | libc::EADDRINUSE => Bucket::NoFreePort,
            libc::EMFILE | libc::ENFILE => Bucket::OutOfFds,
            libc::ENETUNREACH | libc::EHOSTUNREACH | libc::ENETDOWN | libc::EHOSTDOWN => {
                Bucket::Unreachable
            }
            _ => Bucket::Other,
        }
    }

    /// What it means and what to do, in plain words.
    pub fn hint(self) -> &'static str {
        match self {
            Bucket::Refused => {
                "the target refused: nothing listens on that address and port (check it with \
                 `ss -ltn` on the server)"
            }
            Bucket::TimedOut => {
                "SYNs went unanswered. throng cannot see the server from here: on the server \
                 look at its accept queue (`ss -ltn`: Recv-Q against Send-Q; `nstat -az \
                 TcpExtListenOverflows`), its process's open fds against its limit \
                 (/proc/PID/fd, /proc/PID/limits), its error log, and any firewall between"
            }
            Bucket::NoFreePort => {
                "ephemeral ports ran out: add source addresses (--source-ip 127.0.0.2/24 on \
                 loopback) or widen net.ipv4.ip_local_port_range (sysctl -w \
                 net.ipv4.ip_local_port_range=\"1024 65535\")"
            }
            Bucket::OutOfFds => {
                "this process ran out of file descriptors: raise `ulimit -n`; past the hard \
                 limit, run fewer connections per process"
            }
            Bucket::Unreachable => "no route to the target: check the address and `ip route get`",
            Bucket::Other => {
                "connect() failed with an errno none of the buckets above names (listed above by \
                 errno): EACCES or EPERM is this host's own firewall or a `prohibit` route \
                 (`ip route get` the target); others, see connect(2)"
            }
            Bucket::ClosedByPeer => {
                "the server closed established connections: an idle timeout or a connection \
                 limit on its side"
            }
            Bucket::Reset => {
                "the server reset established connections: a crash, a restart or a limit"
            }
            Bucket::HalfOpen => {
                "connect() succeeded but the server reset the connection before answering \
                 anything: on the wire that is what an accept queue that overflowed looks like. \
                 throng cannot see the server from here: on the server look at `nstat -az \
                 TcpExtListenOverflows`, `ss -ltn` (Recv-Q against Send-Q) and its process's \
                 open fds against its limit"
            }
            Bucket::Tls => {
                "the TLS handshake failed (the first error is shown above): for a self-signed \
                 test server pass --tls-ca with its certificate (throng server --tls prints \
                 the path) or --tls-insecure; check --sni against the certificate's names"
            }
            Bucket::Rejected => {
                "the server accepted these connections but rejected the probe sent on them \
                 (what it said is above) and closed: give the protocol it speaks (--proto, \
                 --http-request, --qname, --message) or --no-verify"
            }
        }
    }
}

/// How the words of a TLS error start when the session was up (the
/// handshake done) before it broke.
pub const AFTER_HANDSHAKE: &str = "after the handshake: ";
/// How the words of a TLS error start when the server's bytes were not TLS
/// records at all.
pub const NOT_TLS: &str = "the server's bytes are not TLS records";
/// How the words of a TLS error start when the server accepted the
/// connection but did not finish the handshake in time.
pub const TLS_TIMED_OUT: &str = "the TLS handshake did not finish within --connect-timeout";
/// How the words of a TLS error start when the server answered the
/// ClientHello with an alert.
pub const TLS_ALERT: &str = "the server refused the handshake with an alert";

counter_block! {
    /// Live counters of one client worker.
    #[repr(align(128))]
    pub struct ConnCounters;
    /// A plain copy of client counters summed over workers.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct ConnTotals;
    counters {
        attempted: count,
        established: count,
        /// Of `established`, the ramp's own (initial attempts), not the
        /// replacements made after.
        established_initial: count,
        verified: count,
        /// Established, but the probe got no answer within --connect-timeout.
        unverified: count,
        /// Closed by us: at the end of the run, or at the end of --lifetime.
        closed: count,
        failed: [BUCKETS],
        /// Of `failed`: connections that were established first (a reset, a
        /// close before an answer, a TLS handshake that failed).
        failed_established: count,
        /// Attempts that never resolved: still connecting when the run ended
        /// (or when a schedule closed them).
        unresolved: count,
        /// Established connections nothing was asked on (no probe, no query):
        /// in neither `verified` nor `unverified`.
        idle: count,
        other_errno: errno_map,
        /// Closed by the server after answering all it was sent (HTTP
        /// keep-alive limits): not a failure.
        peer_closed: count,
        /// Of those, the ones that had carried no query (idle since they
        /// were established or verified), and how long each was open, ms:
        /// summed and squared-summed (a server's idle timeout closes them
        /// at one steady age).
        idle_closed: count,
        /// Established connections that were sent queries and never got a
        /// byte back (--no-verify or not): a server that ignores some.
        silent: count,
        idle_closed_ms: count,
        idle_closed_ms_sq: count,
        /// TLS handshakes that resumed a session.
        tls_resumed: count,
        /// The first TLS error, in words.
        tls_error: first_words,
        /// Probes answered with a refusal (HTTP 4xx/5xx, DNS FORMERR, REFUSED,
        /// NOTIMP, or a reply not in the protocol), and the first, in words.
        probe_rejected: count,
        probe_reply: first_words,
        /// Connections served (answered) and refused, by source address:
        /// the slot is the source's place in [`source_order`] (the first
        /// [`SOURCE_SLOTS`] sources; in the result as `sources_refused`).
        served_from: [SOURCE_SLOTS],
        refused_from: [SOURCE_SLOTS],
        /// WebSocket close frames received, by code ([`ws_close_slot`]).
        ws_close: [WS_CLOSE_SLOTS],
        /// WebSocket pings from the server, each answered with a pong.
        ws_pings: count,
        /// WebSocket upgrades refused, by the server's HTTP status
        /// ([`ws_refused_slot`]; also in `probe_rejected`).
        ws_refused: [WS_REFUSED_SLOTS],
    }
    live {
        /// Initial attempts not resolved yet (connecting).
        ramp_left: AtomicU64 = AtomicU64::new(0),
        /// Connections open now that have been open for
        /// [`STEADY_AFTER`](crate::engine::STEADY_AFTER) or more: those the
        /// server keeps, without the short lives of a churn.
        steady: AtomicU64 = AtomicU64::new(0),
        /// Connect times so far, in quarter-octave buckets ([`ConnectBuckets`]):
        /// the main thread takes each second's p99 from their growth.
        connect_buckets: [AtomicU64; CONNECT_BUCKETS] =
            std::array::from_fn(|_| AtomicU64::new(0)),
        /// --proto push: what arrived.
        push: PushCounters = PushCounters::default(),
    }
    plain {
        /// Source addresses from which the server refused every connection
        /// it answered (at least one refused, none served): an access rule
        /// (Redis's protected mode), not a cap.
        sources_refused: Vec<String>,
    }
}

/// The source addresses whose connections are tallied apart.
pub const SOURCE_SLOTS: usize = 32;

/// The order sources are used in, and tallied by: those of IPv4, then
/// those of IPv6, each in the order given.
pub fn source_order(sources: &[std::net::IpAddr]) -> Vec<std::net::IpAddr> {
    let v4 = sources.iter().filter(|a| a.is_ipv4());
    v4.chain(sources.iter().filter(|a| a.is_ipv6()))
        .copied()
        .collect()
}

counter_block! {
    /// --proto push's counts, one block per worker (see
    /// [`crate::engine`]'s push module for what each means).
    pub struct PushCounters;
    /// --proto push's counts summed (workers, processes, hosts).
    #[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    pub struct PushTotals;
    counters {
        received: count,
        lost: count,
        out_of_order: count,
        duplicates: count,
        malformed: count,
        /// Messages due by sequence and by time, summed as connections end.
        expected: count,
        connections_with_loss: count,
        /// The worker's time outside epoll_wait (reading, closing...), and
        /// its whole time, ns: a busy worker reads arrivals late.
        @[serde(default)]
        busy_ns: count,
        @[serde(default)]
        worker_ns: count,
        /// Send stamps ahead of this host's clock (no delay taken from them).
        @[serde(default)]
        stamps_ahead: count,
    }
    live {
        /// Jitter and one-way delay (µs) in quarter-octave buckets, as
        /// connect times: a second's p99 from their growth.
        jitter_buckets: [AtomicU64; CONNECT_BUCKETS] =
            std::array::from_fn(|_| AtomicU64::new(0)),
        delay_buckets: [AtomicU64; CONNECT_BUCKETS] =
            std::array::from_fn(|_| AtomicU64::new(0)),
    }
    plain {}
}

impl PushTotals {
    /// The share of its time the client's workers were busy (0..1).
    pub fn busy(&self) -> f64 {
        self.busy_ns as f64 / self.worker_ns.max(1) as f64
    }

    pub fn sum<'a>(workers: impl IntoIterator<Item = &'a ConnCounters>) -> PushTotals {
        let mut t = PushTotals::default();
        for w in workers {
            t.merge(&PushTotals::snapshot(&w.push));
        }
        t
    }

    pub fn merge(&mut self, o: &PushTotals) {
        self.merge_counters(o);
    }
}

/// Push jitter (`delay` false) or delay buckets summed over workers (see
/// [`ConnectBuckets`]).
pub fn push_buckets(counters: &[std::sync::Arc<ConnCounters>], delay: bool) -> ConnectBuckets {
    let mut b = [0; CONNECT_BUCKETS];
    for c in counters {
        let of = if delay {
            &c.push.delay_buckets
        } else {
            &c.push.jitter_buckets
        };
        for (n, a) in b.iter_mut().zip(of) {
            *n += a.load(Relaxed);
        }
    }
    ConnectBuckets(b)
}

/// Quarter-octave buckets of connect times, 1 µs to ~134 s.
pub const CONNECT_BUCKETS: usize = 108;

/// The bucket of a connect time of `us` µs: four a doubling (each ~19%
/// wide), so a second's p99 from them is within a quarter of the truth.
pub fn connect_bucket(us: u64) -> usize {
    let us = us.max(1);
    let log2 = 63 - us.leading_zeros() as usize;
    let i = if log2 < 2 {
        us as usize - 1
    } else {
        log2 * 4 + ((us >> (log2 - 2)) & 3) as usize
    };
    i.min(CONNECT_BUCKETS - 1)
}

/// The largest time in bucket `i`, µs.
pub fn connect_bucket_top(i: usize) -> u64 {
    if i < 8 {
        // 1, 2 and 3 µs (3..7 are not used).
        return i as u64 + 1;
    }
    let (log2, f) = (i / 4, (i % 4) as u64);
    ((4 + f + 1) << (log2 - 2)) - 1
}

/// Counts of connect times per bucket, summed over workers: a second's
/// are the difference of two readings.
#[derive(Clone)]
pub struct ConnectBuckets(pub [u64; CONNECT_BUCKETS]);

impl ConnectBuckets {
    pub fn read(counters: &[std::sync::Arc<ConnCounters>]) -> ConnectBuckets {
        let mut b = [0; CONNECT_BUCKETS];
        for c in counters {
            for (n, a) in b.iter_mut().zip(&c.connect_buckets) {
                *n += a.load(Relaxed);
            }
        }
        ConnectBuckets(b)
    }

    /// The p99 of the connects between `before` and `self` (the top of its
    /// bucket), if any.
    pub fn p99_since(&self, before: &ConnectBuckets) -> Option<u64> {
        let d: Vec<u64> = self.0.iter().zip(&before.0).map(|(a, b)| a - b).collect();
        let n: u64 = d.iter().sum();
        if n == 0 {
            return None;
        }
        let rank = n - n / 100; // the (n - n/100)-th smallest
        let mut seen = 0;
        for (i, c) in d.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(connect_bucket_top(i));
            }
        }
        None
    }
}

impl ConnCounters {
    /// Keeps the first TLS error's words for the summary.
    pub fn tls_failed(&self, why: impl FnOnce() -> String) {
        self.fail(Bucket::Tls);
        if let Ok(mut e) = self.tls_error.lock() {
            if e.is_none() {
                *e = Some(why());
            }
        }
    }

    /// Counts a rejected probe; keeps the first one's words.
    pub fn rejected(&self, what: impl FnOnce() -> String) {
        bump(&self.probe_rejected, 1);
        if let Ok(mut e) = self.probe_reply.lock() {
            if e.is_none() {
                *e = Some(what());
            }
        }
    }

    pub fn fail(&self, b: Bucket) {
        bump(&self.failed[b as usize], 1);
    }

    pub fn fail_errno(&self, b: Bucket, errno: i32) {
        self.fail(b);
        if b == Bucket::Other {
            bump(
                &self.other_errno[(errno.max(0) as usize).min(MAX_ERRNO - 1)],
                1,
            );
        }
    }
}

impl ConnTotals {
    /// The workers' counters together: each one's snapshot, merged.
    pub fn sum<'a>(workers: impl IntoIterator<Item = &'a ConnCounters>) -> ConnTotals {
        let mut t = ConnTotals::default();
        for w in workers {
            t.merge(&ConnTotals::snapshot(w));
        }
        t
    }

    /// Adds another part's counters (a worker's, a process's, a host's):
    /// counts summed, the first error's and refusal's words kept.
    pub fn merge(&mut self, o: &ConnTotals) {
        self.merge_counters(o);
        for a in &o.sources_refused {
            if !self.sources_refused.contains(a) {
                self.sources_refused.push(a.clone());
            }
        }
    }

    /// Fills `sources_refused` from the tallies by source of a run over
    /// `sources`: those refused every time. (Whether others were served,
    /// which makes it a rule about sources, is the verdict's to weigh over
    /// every part of a run.)
    pub fn judge_sources(&mut self, sources: &[std::net::IpAddr]) {
        let order = source_order(sources);
        let slots = order
            .iter()
            .zip(self.served_from.iter().zip(&self.refused_from));
        self.sources_refused = slots
            .filter(|(_, (&served, &refused))| refused > 0 && served == 0)
            .map(|(a, _)| a.to_string())
            .collect();
    }

    pub fn failed_total(&self) -> u64 {
        self.failed.iter().sum()
    }
}

/// Why a query ended in error (`queries.errors.<cause>`).
/// New causes go at the end, so that the others' indices (`E_*`) keep
/// their meaning.
pub const ERROR_CAUSES: [&str; 16] = [
    "malformed",
    "unmatched",
    "mismatch",
    "conn_lost",
    "no_connection",
    "connect",
    "oversized",
    "not_sent",
    "ws_masked",
    "ws_opcode",
    "ws_control_size",
    "ws_close_status",
    "ws_too_long",
    "ws_reserved_bits",
    "ws_fragments",
    "behind_schedule",
];
pub const E_MALFORMED: usize = 0;
pub const E_UNMATCHED: usize = 1;
pub const E_MISMATCH: usize = 2;
pub const E_CONN_LOST: usize = 3;
pub const E_NO_CONNECTION: usize = 4;
/// tcp-per-query: the query's own connection failed (see the buckets).
pub const E_CONNECT: usize = 5;
/// A response longer than the connection's input cap (see
/// `Codec::input_cap`): its connection ends, as with malformed bytes.
pub const E_OVERSIZED: usize = 6;
/// Due on a connection that could not take it (its socket full: the
/// server not reading; or its --window full) for --timeout, or until the
/// end of the run: given up, never sent.
pub const E_NOT_SENT: usize = 7;
/// WebSocket protocol errors from the server, each ending its connection:
/// a masked frame, a reserved opcode, a control frame over 125 bytes, a
/// close frame without a valid status, a length over
/// `wire::ws::MAX_WS_MESSAGE`, RSV bits set, fragments out of order.
pub const E_WS_MASKED: usize = 8;
pub const E_WS_OPCODE: usize = 9;
pub const E_WS_CONTROL_SIZE: usize = 10;
pub const E_WS_CLOSE_STATUS: usize = 11;
pub const E_WS_TOO_LONG: usize = 12;
pub const E_WS_RESERVED_BITS: usize = 13;
pub const E_WS_FRAGMENTS: usize = 14;
/// Open loop or --interval: due by the traffic's end or a --control rate
/// change and never sent, the worker behind its schedule (each loop turn
/// sends for at most 50 ms: one behind sends the rest late, and what is
/// left at the end is this).
pub const E_BEHIND: usize = 15;

/// What a due query waited for before it could be sent
/// (`queries.waited.<cause>`): room in its connection's window, a socket
/// the server was not reading (its send buffer full), a free
/// tcp-per-query slot (--concurrency). The evidence that a send lag was
/// the server's pace, not the client's loop.
pub const WAIT_CAUSES: [&str; 3] = ["window", "socket", "slot"];
pub const W_WINDOW: usize = 0;
pub const W_SOCKET: usize = 1;
pub const W_SLOT: usize = 2;

counter_block! {
    /// Live query counters of one client worker.
    #[repr(align(128))]
    pub struct QueryCounters;
    /// Query counters summed over workers.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct QueryTotals;
    counters {
        sent: count,
        answered: count,
        timed_out: count,
        errors: [ERROR_CAUSES.len()],
        bytes_out: count,
        bytes_in: count,
        /// Queries sent more than 1 ms after their intended time.
        sent_late: count,
        /// Connections closed after --max-queries-per-conn queries.
        recycled: count,
        /// Queries sent while another was in flight on their connection: what
        /// Nagle's algorithm holds back against a delayed ACK.
        pipelined: count,
        /// DNS answers with the TC bit set (counted as answered too): the
        /// answer did not fit and was cut.
        truncated: count,
        /// Answers that came after their query had timed out (a subset of
        /// `timed_out`: the server did answer, later than --timeout).
        answered_late: count,
        /// Queries that waited to be sent, by what for ([`WAIT_CAUSES`]).
        waited: [WAIT_CAUSES.len()],
        /// Queries that came due (counted where the schedule or a window made
        /// them, apart from what became of them: the books' check on `sent`
        /// and the unsent causes).
        due: count,
    }
    live {}
    plain {}
}

impl QueryTotals {
    /// The workers' counters together: each one's snapshot, merged.
    pub fn sum<'a>(workers: impl IntoIterator<Item = &'a QueryCounters>) -> QueryTotals {
        let mut t = QueryTotals::default();
        for w in workers {
            t.merge(&QueryTotals::snapshot(w));
        }
        t
    }

    /// Adds another part's counters: every one summed.
    pub fn merge(&mut self, o: &QueryTotals) {
        self.merge_counters(o);
    }

    pub fn errors_total(&self) -> u64 {
        self.errors.iter().sum()
    }

    /// Due queries never sent.
    pub fn unsent(&self) -> u64 {
        self.errors[E_NOT_SENT]
            + self.errors[E_NO_CONNECTION]
            + self.errors[E_CONNECT]
            + self.errors[E_BEHIND]
    }
}

/// Response statuses counted by a worker (fixed arrays: no allocation
/// while running).
#[derive(Debug, Clone)]
pub struct StatusCounts {
    pub rcodes: [u64; 16],
    /// DNS: the same counts per query type, one row per type a run asks
    /// (set up at start; a worker indexes it by the query's type slot).
    pub by_qtype: Vec<(u16, [u64; 16])>,
    pub echoed: u64,
    pub http: Vec<u64>,
    pub ok: u64,
    pub mismatch: u64,
    /// Redis replies by [`redis_slot`]: the value types, then the errors
    /// by first word.
    pub redis: [u64; REDIS_SLOTS],
}

/// Redis reply counts: one per value type, one per error word.
pub const REDIS_SLOTS: usize = wire::resp::VALUE_KINDS.len() + wire::resp::ERROR_WORDS.len();

/// Where a Redis reply of `kind` is counted in [`StatusCounts::redis`].
#[inline]
pub fn redis_slot(kind: wire::resp::Kind) -> usize {
    use wire::resp::Kind;
    match kind {
        Kind::Simple => 0,
        Kind::Integer => 1,
        Kind::Bulk => 2,
        Kind::Nil => 3,
        Kind::Array => 4,
        Kind::Error(w) => wire::resp::VALUE_KINDS.len() + usize::from(w),
    }
}

impl Default for StatusCounts {
    fn default() -> Self {
        StatusCounts {
            rcodes: [0; 16],
            by_qtype: Vec::new(),
            echoed: 0,
            http: vec![0; 600],
            ok: 0,
            mismatch: 0,
            redis: [0; REDIS_SLOTS],
        }
    }
}

impl StatusCounts {
    /// Adds another part's statuses (a worker's, a process's, a host's).
    pub fn merge(&mut self, o: &StatusCounts) {
        for (a, b) in self.rcodes.iter_mut().zip(&o.rcodes) {
            *a += b;
        }
        for (qtype, counts) in &o.by_qtype {
            let row = match self.by_qtype.iter().position(|(t, _)| t == qtype) {
                Some(i) => &mut self.by_qtype[i].1,
                None => {
                    self.by_qtype.push((*qtype, [0; 16]));
                    &mut self.by_qtype.last_mut().expect("just pushed").1
                }
            };
            for (a, b) in row.iter_mut().zip(counts) {
                *a += b;
            }
        }
        for (a, b) in self.http.iter_mut().zip(&o.http) {
            *a += b;
        }
        self.echoed += o.echoed;
        self.ok += o.ok;
        self.mismatch += o.mismatch;
        for (a, b) in self.redis.iter_mut().zip(&o.redis) {
            *a += b;
        }
    }

    /// DNS RCODE counts by name (`dns.rcodes.<NAME>`), echoed included.
    pub fn rcode_map(&self) -> BTreeMap<String, u64> {
        let mut m = named_rcodes(&self.rcodes);
        if self.echoed > 0 {
            m.insert("echoed".into(), self.echoed);
        }
        m
    }

    /// DNS RCODE counts by query type, then by name
    /// (`dns.rcodes_by_qtype.<TYPE>.<RCODE>`); types with no answer are left out.
    pub fn rcodes_by_qtype_map(&self) -> BTreeMap<String, BTreeMap<String, u64>> {
        self.by_qtype
            .iter()
            .map(|(t, counts)| (qtype_name(*t), named_rcodes(counts)))
            .filter(|(_, m)| !m.is_empty())
            .collect()
    }

    /// Redis replies by type (`queries.redis_replies.<type>`), the errors
    /// in one (`error`; by first word in `failed_answers`).
    pub fn redis_map(&self) -> BTreeMap<String, u64> {
        let values = wire::resp::VALUE_KINDS.len();
        let mut m: BTreeMap<String, u64> = wire::resp::VALUE_KINDS
            .iter()
            .zip(&self.redis)
            .filter(|(_, &n)| n > 0)
            .map(|(k, &n)| (k.to_string(), n))
            .collect();
        let errors: u64 = self.redis[values..].iter().sum();
        if errors > 0 {
            m.insert("error".into(), errors);
        }
        m
    }

    /// HTTP status counts by code.
    pub fn http_map(&self) -> BTreeMap<String, u64> {
        self.http
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(c, &n)| (c.to_string(), n))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_buckets_hold_their_values_within_a_quarter() {
        for us in 1..200_000u64 {
            let i = connect_bucket(us);
            let top = connect_bucket_top(i);
            assert!(
                top >= us && top <= us + us / 4,
                "{us}: bucket {i} tops at {top}"
            );
            if i > 0 {
                assert!(connect_bucket_top(i - 1) < us || i <= 8, "{us}");
            }
        }
        let before = ConnectBuckets([0; CONNECT_BUCKETS]);
        let mut now = before.clone();
        for us in 1..=1000u64 {
            now.0[connect_bucket(us * 10)] += 1;
        }
        // 1,000 connects of 10 µs .. 10 ms: the p99 is 9.9 ms, to its bucket.
        let p99 = now.p99_since(&before).unwrap();
        assert!((9_900..=12_400).contains(&p99), "{p99}");
        assert_eq!(before.p99_since(&before), None);
    }

    #[test]
    fn buckets_by_errno() {
        assert_eq!(
            Bucket::of_connect_errno(libc::ECONNREFUSED),
            Bucket::Refused
        );
        assert_eq!(
            Bucket::of_connect_errno(libc::EADDRNOTAVAIL),
            Bucket::NoFreePort
        );
        assert_eq!(Bucket::of_connect_errno(libc::EMFILE), Bucket::OutOfFds);
        assert_eq!(
            Bucket::of_connect_errno(libc::EHOSTUNREACH),
            Bucket::Unreachable
        );
        assert_eq!(Bucket::of_connect_errno(libc::EPERM), Bucket::Other);
        for (i, b) in Bucket::ALL.iter().enumerate() {
            assert_eq!(*b as usize, i);
        }
    }

    #[test]
    fn sums_and_other_errnos() {
        let a = ConnCounters::default();
        let b = ConnCounters::default();
        a.fail_errno(Bucket::Other, libc::EPERM);
        b.fail(Bucket::HalfOpen);
        let t = ConnTotals::sum([&a, &b]);
        assert_eq!(t.failed_total(), 2);
        assert_eq!(t.other_errno.get(&libc::EPERM), Some(&1));
    }

    #[test]
    fn conn_totals_merge_sums_and_keeps_the_first_words() {
        let mut a = ConnTotals {
            attempted: 3,
            established: 2,
            verified: 1,
            unverified: 1,
            closed: 2,
            peer_closed: 1,
            tls_resumed: 1,
            probe_rejected: 0,
            probe_reply: None,
            tls_error: Some("first".into()),
            ..ConnTotals::default()
        };
        a.failed[Bucket::Refused as usize] = 1;
        a.other_errno.insert(libc::EPERM, 2);
        let mut b = ConnTotals {
            attempted: 5,
            established: 4,
            verified: 4,
            closed: 1,
            peer_closed: 2,
            tls_resumed: 3,
            probe_rejected: 2,
            probe_reply: Some("REFUSED".into()),
            tls_error: Some("second".into()),
            ..ConnTotals::default()
        };
        b.failed[Bucket::Refused as usize] = 2;
        b.failed[Bucket::Rejected as usize] = 2;
        b.other_errno.insert(libc::EPERM, 1);
        b.other_errno.insert(libc::EIO, 4);
        a.merge(&b);
        assert_eq!(
            (
                a.attempted,
                a.established,
                a.verified,
                a.unverified,
                a.closed
            ),
            (8, 6, 5, 1, 3)
        );
        assert_eq!((a.peer_closed, a.tls_resumed, a.probe_rejected), (3, 4, 2));
        assert_eq!(a.failed[Bucket::Refused as usize], 3);
        assert_eq!(a.failed[Bucket::Rejected as usize], 2);
        assert_eq!(a.failed_total(), 5);
        assert_eq!(
            a.other_errno,
            BTreeMap::from([(libc::EPERM, 3), (libc::EIO, 4)])
        );
        // The first words seen, wherever they come from.
        assert_eq!(a.tls_error.as_deref(), Some("first"));
        assert_eq!(a.probe_reply.as_deref(), Some("REFUSED"));
    }

    #[test]
    fn conn_totals_sum_is_the_merge_of_each_worker() {
        let a = ConnCounters::default();
        let b = ConnCounters::default();
        bump(&a.attempted, 2);
        bump(&b.attempted, 3);
        bump(&b.established, 3);
        a.fail_errno(Bucket::Other, libc::EPERM);
        b.fail_errno(Bucket::Other, libc::EPERM);
        b.tls_failed(|| "bad certificate".into());
        a.rejected(|| "HTTP 400".into());
        b.rejected(|| "HTTP 500".into());
        let mut merged = ConnTotals::snapshot(&a);
        merged.merge(&ConnTotals::snapshot(&b));
        let t = ConnTotals::sum([&a, &b]);
        assert_eq!(t, merged);
        assert_eq!((t.attempted, t.established, t.probe_rejected), (5, 3, 2));
        assert_eq!(t.other_errno, BTreeMap::from([(libc::EPERM, 2)]));
        assert_eq!(t.tls_error.as_deref(), Some("bad certificate"));
        assert_eq!(t.probe_reply.as_deref(), Some("HTTP 400"));
    }

    #[test]
    fn query_totals_merge_sums_every_counter() {
        let a = QueryCounters::default();
        let b = QueryCounters::default();
        for (i, c) in [&a, &b].into_iter().enumerate() {
            let n = i as u64 + 1;
            bump(&c.sent, 10 * n);
            bump(&c.answered, 9 * n);
            bump(&c.timed_out, n);
            bump(&c.errors[E_CONN_LOST], n);
            bump(&c.errors[E_CONNECT], 2 * n);
            bump(&c.bytes_out, 100 * n);
            bump(&c.bytes_in, 90 * n);
            bump(&c.sent_late, n);
            bump(&c.recycled, n);
            bump(&c.pipelined, 3 * n);
            bump(&c.truncated, 4 * n);
            bump(&c.answered_late, n);
            bump(&c.waited[W_SOCKET], 5 * n);
        }
        let t = QueryTotals::sum([&a, &b]);
        let mut errors = [0; ERROR_CAUSES.len()];
        errors[E_CONN_LOST] = 3;
        errors[E_CONNECT] = 6;
        assert_eq!(
            t,
            QueryTotals {
                sent: 30,
                answered: 27,
                timed_out: 3,
                errors,
                bytes_out: 300,
                bytes_in: 270,
                sent_late: 3,
                recycled: 3,
                pipelined: 9,
                truncated: 12,
                answered_late: 3,
                waited: [0, 15, 0],
                due: 0,
            }
        );
        let mut m = QueryTotals::snapshot(&a);
        m.merge(&QueryTotals::snapshot(&b));
        assert_eq!(m, t);
        assert_eq!(t.errors_total(), 9);
    }

    #[test]
    fn status_counts_merge_rows_by_query_type() {
        let mut a = StatusCounts::default();
        a.rcodes[0] = 2;
        a.by_qtype.push((1, [0; 16]));
        a.by_qtype[0].1[0] = 2;
        a.http[200] = 1;
        a.echoed = 1;
        let mut b = StatusCounts::default();
        b.rcodes[3] = 1;
        let mut aaaa = [0; 16];
        aaaa[3] = 1;
        let mut a_row = [0; 16];
        a_row[0] = 5;
        b.by_qtype = vec![(28, aaaa), (1, a_row)];
        b.http[200] = 2;
        b.http[503] = 1;
        (b.ok, b.mismatch) = (4, 1);
        a.merge(&b);
        assert_eq!((a.rcodes[0], a.rcodes[3]), (2, 1));
        assert_eq!(a.by_qtype.len(), 2);
        assert_eq!(a.by_qtype[0].0, 1);
        assert_eq!(a.by_qtype[0].1[0], 7);
        assert_eq!(a.by_qtype[1], (28, aaaa));
        assert_eq!((a.http[200], a.http[503]), (3, 1));
        assert_eq!((a.echoed, a.ok, a.mismatch), (1, 4, 1));
    }
}
