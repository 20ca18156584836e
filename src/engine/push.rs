//! --proto push: the client sends nothing (over UDP, a datagram that
//! subscribes, again every [`KEEPALIVE`]) and measures what the server
//! pushes, per connection and in total:
//!
//! - received: messages that arrived, each sequence number once;
//! - lost: sequence numbers skipped (a gap; one that arrives later is
//!   taken back and counted out of order), and at a connection's end the
//!   periods since its last message (or since it opened) that brought
//!   nothing, less one period for the message on its way. A connection
//!   the server ended (a close, a reset, bytes that are not messages) is
//!   counted so on to the run's end, or until a connection opened after
//!   it (a --reconnect replacement) takes its place: a server that dies
//!   owes the periods it would have sent;
//! - expected = received + lost: the sequence numbers from the first
//!   (0 for throng's format, the first seen for lines) to the last, and
//!   the periods after it that brought nothing; or, when more, the whole
//!   periods the connection lived less one (a server that falls behind
//!   without skipping numbers sends fewer than its period says: those it
//!   did not send count as lost);
//! - duplicates: a sequence number seen again (of the last 64);
//! - the arrival gap between consecutive messages of a connection, and the
//!   jitter: that gap minus the expected period times the sequence numbers
//!   it spans (its absolute value);
//! - the one-way delay, from the message's send stamp: the monotonic one
//!   when the server is on this host (a loopback target), the wall clock
//!   one with --clock-sync, none otherwise (clocks of two hosts differ by
//!   more than what is measured).
//!
//! Over TCP nothing is lost on the way: a gap is a message the server
//! skipped (its socket to us was full, or it fell a period behind).

/// --proto push's value, and its name in sentences.
pub const NAME: &str = "push";

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::domain::{PushFormat, Transport};
use crate::metrics::Grow;
use crate::metrics::{bump, connect_bucket, new_histogram, ConnCounters, PushCounters};
use crate::scenario::{DelayClock, PushListen, Scenario};
use crate::sys::timer::wall_ns;

/// A UDP subscriber says it is still there this often (the server drops
/// one silent for its --udp-idle, 30 s by default, at least 20 s).
pub const KEEPALIVE: Duration = Duration::from_secs(10);
/// A UDP subscriber that has had no message yet subscribes again this
/// often (its first datagram may have been lost).
const RESUBSCRIBE: Duration = Duration::from_secs(1);
/// What a UDP subscriber sends to subscribe (and to stay subscribed).
pub const SUBSCRIBE: &[u8] = b"subscribe\n";
/// What it sends when it leaves.
pub const BYE: &[u8] = b"bye\n";

/// What a push connection heard before it ended: its verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    /// Messages: verified at the first.
    Messages,
    /// None in more than two periods: unverified.
    Silent,
    /// None, and too young to have been owed one: idle.
    Nothing,
}

/// One connection's stream of messages.
#[derive(Debug, Clone, Copy, Default)]
struct Stream {
    opened_ns: u64,
    got_any: bool,
    /// The first sequence number expected, and the highest seen + 1.
    base: u64,
    next: u64,
    /// Bit i: sequence number `next - 1 - i` arrived.
    seen: u64,
    received: u64,
    lost: u64,
    /// The last in-order arrival (mono ns) and its sequence number.
    last_ns: u64,
    last_seq: u64,
    /// The first arrival (mono ns).
    first_ns: u64,
}

/// A stream the server ended: its periods count on from its last message
/// (or its opening) until another connection opens or the run ends.
#[derive(Debug, Clone, Copy)]
struct Vacancy {
    since_ns: u64,
    /// It had lost messages already (counted once among the connections
    /// with loss).
    lossy: bool,
}

pub(super) struct PushRx {
    format: PushFormat,
    period_ns: u64,
    /// Messages the server sends at each period (--burst).
    burst: u64,
    clock: DelayClock,
    streams: Vec<Stream>,
    pub gap: Histogram<u64>,
    pub jitter: Histogram<u64>,
    pub delay: Histogram<u64>,
    /// The streams the server ended that no connection took back yet.
    vacant: Vec<Vacancy>,
    /// Over UDP: it subscribes, and says so again now and then.
    udp: bool,
    /// UDP: when the subscriptions not answered yet are said again, and
    /// when all are.
    next_keepalive: Instant,
    next_refresh: Instant,
}

impl PushRx {
    pub fn new(sc: &Scenario, p: &PushListen) -> PushRx {
        let clock = DelayClock::new(sc, p);
        PushRx {
            format: p.format,
            period_ns: ((p.every_s * 1e9) as u64).max(1),
            burst: p.burst.max(1),
            clock,
            streams: Vec::new(),
            gap: new_histogram(),
            jitter: new_histogram(),
            delay: new_histogram(),
            vacant: Vec::new(),
            udp: sc.transport == Transport::Udp,
            next_keepalive: Instant::now() + RESUBSCRIBE,
            next_refresh: Instant::now() + KEEPALIVE,
        }
    }

    /// A connection opened at `now_ns`. Not one of the ramp's (`initial`),
    /// it takes the place of a stream the server ended, if any: the
    /// periods that stream owed up to `now_ns` count as lost.
    fn opened(&mut self, key: usize, now_ns: u64, initial: bool, c: &PushCounters) {
        if let Some(v) = self.vacant.pop_if(|_| !initial) {
            self.refilled(v, now_ns, c);
        }
        if self.streams.len() <= key {
            self.streams.resize(key + 1, Stream::default());
        }
        self.streams[key] = Stream {
            opened_ns: now_ns,
            ..Stream::default()
        };
    }

    /// One message of sequence number `seq` arrived at `now_ns`, with the
    /// server's send stamps (mono, wall) when the format has them.
    fn message(
        &mut self,
        key: usize,
        seq: u64,
        stamps: Option<(u64, u64)>,
        now_ns: u64,
        c: &PushCounters,
    ) -> Arrival {
        let (period, burst) = (self.period_ns, self.burst);
        let Some(s) = self.streams.get_mut(key) else {
            return Arrival::Other;
        };
        if seq == u64::MAX {
            return Arrival::Implausible;
        }
        let first = !s.got_any;
        if first {
            s.base = match self.format {
                PushFormat::Throng => 0,
                PushFormat::Line => seq,
            };
            s.next = s.base;
        }
        if seq >= s.next {
            let skipped = seq - s.next;
            // Numbers from the wire are checked before they count: a jump
            // past what the time since could bring (with room) is not a
            // gap but bytes that lie.
            let since = if s.got_any { s.last_ns } else { s.opened_ns };
            let could = (now_ns.saturating_sub(since) / period + 2)
                .saturating_mul(burst)
                .saturating_add(1024);
            if skipped > could {
                return Arrival::Implausible;
            }
            if skipped > 0 {
                s.lost += skipped;
                bump(&c.lost, skipped);
            }
            let shift = skipped + 1;
            s.seen = if shift >= 64 { 0 } else { s.seen << shift } | 1;
            s.next = seq + 1;
            if s.got_any {
                // Messages of one burst are due together; bursts a period
                // apart.
                let bursts = (seq - s.base) / burst - (s.last_seq - s.base) / burst;
                let gap = now_ns.saturating_sub(s.last_ns);
                let due = bursts.saturating_mul(period);
                let jitter_us = gap.abs_diff(due) / 1000;
                self.gap.put(gap / 1000);
                self.jitter.put(jitter_us);
                bump(&c.jitter_buckets[connect_bucket(jitter_us)], 1);
            } else {
                s.first_ns = now_ns;
            }
            s.last_ns = now_ns;
            s.last_seq = seq;
        } else {
            let back = s.next - 1 - seq;
            if back < 64 {
                if s.seen & (1 << back) != 0 {
                    bump(&c.duplicates, 1);
                    return Arrival::Other;
                }
                s.seen |= 1 << back;
            }
            // Counted lost when the numbers after it came: taken back.
            if s.lost > 0 {
                s.lost -= 1;
                c.lost.fetch_sub(1, Relaxed);
            }
            bump(&c.out_of_order, 1);
        }
        s.got_any = true;
        s.received += 1;
        bump(&c.received, 1);
        let delay_ns: Option<u64> = match (self.clock, stamps) {
            (DelayClock::Monotonic, Some((mono, _))) => now_ns.checked_sub(mono),
            (DelayClock::Wall, Some((_, wall))) => wall_ns().checked_sub(wall),
            _ => None,
        };
        match delay_ns {
            Some(d) => {
                self.delay.put(d / 1000);
                bump(&c.delay_buckets[connect_bucket(d / 1000)], 1);
            }
            // A stamp ahead of this host's clock: not the same clock (a
            // forwarded port) or clocks that disagree.
            None if stamps.is_some() && self.clock != DelayClock::None => {
                bump(&c.stamps_ahead, 1);
            }
            None => {}
        }
        if first {
            Arrival::First
        } else {
            Arrival::Other
        }
    }

    /// The periods from `since_ns` to `until_ns` that brought nothing: one
    /// less for the message on its way (and, before the first, for the
    /// server's phase).
    fn missed_periods(&self, since_ns: u64, until_ns: u64) -> u64 {
        (until_ns.saturating_sub(since_ns) / self.period_ns)
            .saturating_sub(1)
            .saturating_mul(self.burst)
    }

    /// The connection ended at `now_ns`: the periods since its last message
    /// that brought nothing count as lost, and its expected count is in.
    /// `vacated`: the server ended it, so those periods count on until
    /// another connection opens or the run ends ([`PushRx::refilled`]).
    /// What it heard: messages, nothing in more than two periods
    /// (unverified: the server pushed nothing to it), or nothing yet.
    fn closed(&mut self, key: usize, now_ns: u64, vacated: bool, c: &PushCounters) -> Heard {
        let period = self.period_ns;
        let burst = self.burst;
        let Some(&s) = self.streams.get(key) else {
            return Heard::Nothing;
        };
        let heard = if s.got_any {
            Heard::Messages
        } else if now_ns.saturating_sub(s.opened_ns) > 2 * period {
            Heard::Silent
        } else {
            Heard::Nothing
        };
        let since = if s.got_any { s.last_ns } else { s.opened_ns };
        let tail = if vacated {
            0
        } else {
            self.missed_periods(since, now_ns)
        };
        let s = &mut self.streams[key];
        // A server that falls behind without skipping numbers sends fewer
        // than its period says: the time since the first message counts
        // them too (from the first arrival: the way there is not the
        // server's delay).
        let by_seq = (s.next - s.base).saturating_add(tail);
        let by_time = if s.got_any {
            (now_ns.saturating_sub(s.first_ns) / period).saturating_mul(burst)
        } else {
            0
        };
        let behind = by_time.saturating_sub(by_seq);
        s.lost += tail + behind;
        bump(&c.lost, tail + behind);
        bump(&c.expected, by_seq + behind);
        if vacated {
            self.vacant.push(Vacancy {
                since_ns: since,
                lossy: s.lost > 0,
            });
        } else if s.lost > 0 {
            bump(&c.connections_with_loss, 1);
        }
        *s = Stream::default();
        heard
    }

    /// A stream the server ended is over at `until_ns` (another connection
    /// took its place, or the run ended): the periods since its last
    /// message count as lost.
    fn refilled(&mut self, v: Vacancy, until_ns: u64, c: &PushCounters) {
        let tail = self.missed_periods(v.since_ns, until_ns);
        bump(&c.lost, tail);
        bump(&c.expected, tail);
        if v.lossy || tail > 0 {
            bump(&c.connections_with_loss, 1);
        }
    }

    /// The run ends at `end_ns`: the streams the server ended that no
    /// connection took back count to here.
    fn ended(&mut self, end_ns: u64, c: &PushCounters) {
        for v in std::mem::take(&mut self.vacant) {
            self.refilled(v, end_ns, c);
        }
    }

    /// A UDP connection that has not had a message yet (its subscription
    /// may have been lost).
    pub fn waiting(&self, key: usize) -> bool {
        self.streams.get(key).is_some_and(|s| !s.got_any)
    }

    /// A connection is established at `now_ns`: its stream starts. Returns
    /// what it sends (UDP: it subscribes).
    pub fn open(
        &mut self,
        key: usize,
        now_ns: u64,
        initial: bool,
        c: &ConnCounters,
    ) -> Option<&'static [u8]> {
        self.opened(key, now_ns, initial, &c.push);
        self.udp.then_some(SUBSCRIBE)
    }

    /// A connection ends at `now_ns`: its stream's tail is counted, and
    /// its verification (`vacated`: the server ended it, and the tail runs
    /// on until another connection opens or the run ends).
    pub fn close(&mut self, key: usize, now_ns: u64, vacated: bool, c: &ConnCounters) {
        match self.closed(key, now_ns, vacated, &c.push) {
            // (Verified at its first message.)
            Heard::Messages => {}
            Heard::Silent => bump(&c.unverified, 1),
            Heard::Nothing => bump(&c.idle, 1),
        }
    }

    /// The run ends at `end_ns` (every connection's tail counted): the
    /// streams the server ended count to here.
    pub fn end(&mut self, end_ns: u64, c: &ConnCounters) {
        self.ended(end_ns, &c.push);
    }

    /// Over UDP, whether the subscriptions are said again now: None when
    /// not; Some(all), all of them (every [`KEEPALIVE`]: the server forgets
    /// a silent subscriber) or only those that have had no message yet
    /// (every second).
    pub fn keepalive(&mut self, now: Instant) -> Option<bool> {
        if !self.udp || now < self.next_keepalive {
            return None;
        }
        self.next_keepalive = now + RESUBSCRIBE;
        let all = now >= self.next_refresh;
        if all {
            self.next_refresh = now + KEEPALIVE;
        }
        Some(all)
    }

    /// When the next keepalive is due (UDP).
    pub fn wakeup(&self) -> Option<Instant> {
        self.udp.then_some(self.next_keepalive)
    }

    /// Over UDP, the subscribers leave when the run ends (the server stops
    /// at once instead of after its --udp-idle).
    pub fn farewell(&self) -> Option<&'static [u8]> {
        self.udp.then_some(BYE)
    }

    /// Bytes of a push stream on `key` arrived at `now_ns`: whole messages
    /// counted; the rest kept in `pending` for the next read. False when
    /// they are not push messages (counted malformed): the connection
    /// ends.
    pub fn bytes(
        &mut self,
        key: usize,
        pending: &mut Vec<u8>,
        data: &[u8],
        now_ns: u64,
        c: &ConnCounters,
    ) -> bool {
        let mut buf = std::mem::take(pending);
        let input: &[u8] = if buf.is_empty() {
            data
        } else {
            buf.extend_from_slice(data);
            &buf
        };
        let mut used = 0;
        while used < input.len() {
            let framed = match self.format {
                PushFormat::Throng => wire::push::decode(&input[used..])
                    .map(|m| m.map(|(h, n)| (h.seq, Some((h.mono_ns, h.wall_ns)), n))),
                PushFormat::Line => wire::push::decode_line(&input[used..])
                    .map(|m| m.map(|(seq, n)| (seq, None, n))),
            };
            match framed {
                Ok(Some((seq, stamps, n))) => {
                    self.count(key, seq, stamps, now_ns, c);
                    used += n;
                }
                Ok(None) => break,
                Err(_) => {
                    bump(&c.push.malformed, 1);
                    return false;
                }
            }
        }
        let rest = &input[used..];
        if !rest.is_empty() {
            if buf.is_empty() {
                pending.extend_from_slice(rest);
            } else {
                buf.drain(..used);
                *pending = buf;
            }
        }
        true
    }

    /// One WebSocket message on `key` (its payload, or its first
    /// fragment's: the numbers are at its start) arrived at `now_ns`:
    /// throng's stamps (`wire::ws::push_stamps`) or, `--push-format line`,
    /// a decimal sequence number first. False when it is neither (counted
    /// malformed: the connection is of no further use).
    pub fn ws_message(&mut self, key: usize, msg: &[u8], now_ns: u64, c: &ConnCounters) -> bool {
        let framed = match self.format {
            PushFormat::Throng => {
                wire::ws::push_stamps(msg).map(|h| (h.seq, Some((h.mono_ns, h.wall_ns))))
            }
            PushFormat::Line => wire::push::leading_sequence(msg).map(|seq| (seq, None)),
        };
        match framed {
            Ok((seq, stamps)) => {
                self.count(key, seq, stamps, now_ns, c);
                true
            }
            Err(_) => {
                bump(&c.push.malformed, 1);
                false
            }
        }
    }

    /// One datagram on `key` arrived at `now_ns`: one message (anything
    /// else is counted malformed; the socket stays).
    pub fn datagram(&mut self, key: usize, d: &[u8], now_ns: u64, c: &ConnCounters) {
        let framed = match self.format {
            PushFormat::Throng => {
                wire::push::decode_datagram(d).map(|h| (h.seq, Some((h.mono_ns, h.wall_ns))))
            }
            PushFormat::Line => match wire::push::decode_line(d) {
                Ok(Some((seq, _))) => Ok((seq, None)),
                Ok(None) => Err(wire::push::PushError::NoSequence),
                Err(e) => Err(e),
            },
        };
        match framed {
            Ok((seq, stamps)) => self.count(key, seq, stamps, now_ns, c),
            Err(_) => bump(&c.push.malformed, 1),
        }
    }

    /// One message counted: the first of a connection verifies it.
    fn count(
        &mut self,
        key: usize,
        seq: u64,
        stamps: Option<(u64, u64)>,
        now_ns: u64,
        c: &ConnCounters,
    ) {
        match self.message(key, seq, stamps, now_ns, &c.push) {
            Arrival::First => bump(&c.verified, 1),
            Arrival::Other => {}
            Arrival::Implausible => bump(&c.push.malformed, 1),
        }
    }
}

/// What one message was to its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arrival {
    /// Its first: the connection is verified.
    First,
    Other,
    /// A sequence number no period could explain (or u64::MAX): counted
    /// malformed, not as a gap of billions.
    Implausible,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A push receiver of a 10 ms period over TCP (`flags` added), and
    /// the counters it counts into.
    fn rx(flags: &[&str]) -> (PushRx, ConnCounters) {
        let mut argv: Vec<String> = ["127.0.0.1:1", "--proto", "push", "--every", "10ms"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        argv.extend(flags.iter().map(|a| a.to_string()));
        let args = crate::cli::client_args(&argv).expect("client flags");
        let sc = args
            .scenario(vec!["127.0.0.1:1".parse().unwrap()], false, Vec::new())
            .expect("scenario");
        let rx = PushRx::new(&sc, sc.push.as_ref().expect("push"));
        (rx, ConnCounters::default())
    }

    fn get(a: &std::sync::atomic::AtomicU64) -> u64 {
        a.load(Relaxed)
    }

    /// Sequence numbers `seqs` on connection 0, one a period from 10 ms.
    fn arrive(p: &mut PushRx, c: &ConnCounters, seqs: &[u64]) {
        for (i, &seq) in seqs.iter().enumerate() {
            p.count(0, seq, None, (i as u64 + 1) * 10 * MS, c);
        }
    }

    #[test]
    fn a_skipped_number_is_lost_until_it_arrives_late() {
        let (mut p, c) = rx(&[]);
        p.open(0, 0, true, &c);
        arrive(&mut p, &c, &[0, 1, 3]);
        assert_eq!((get(&c.push.received), get(&c.push.lost)), (3, 1));
        // The verification is the first message's.
        assert_eq!(get(&c.verified), 1);
        p.count(0, 2, None, 45 * MS, &c);
        assert_eq!(get(&c.push.lost), 0, "taken back");
        assert_eq!(get(&c.push.out_of_order), 1);
        assert_eq!(get(&c.push.received), 4);
        assert_eq!(get(&c.push.duplicates), 0);
    }

    #[test]
    fn a_number_seen_again_is_a_duplicate_not_a_message() {
        let (mut p, c) = rx(&[]);
        p.open(0, 0, true, &c);
        arrive(&mut p, &c, &[0, 1, 2, 1, 2]);
        assert_eq!(get(&c.push.duplicates), 2);
        assert_eq!(get(&c.push.received), 3);
        assert_eq!((get(&c.push.lost), get(&c.push.out_of_order)), (0, 0));
    }

    #[test]
    fn a_jump_no_period_explains_is_malformed_not_a_gap() {
        let (mut p, c) = rx(&[]);
        p.open(0, 0, true, &c);
        arrive(&mut p, &c, &[0, 1_000_000_000]);
        assert_eq!(get(&c.push.malformed), 1);
        assert_eq!((get(&c.push.lost), get(&c.push.received)), (0, 1));
    }

    #[test]
    fn the_periods_after_the_last_message_count_lost_at_the_close() {
        let (mut p, c) = rx(&[]);
        p.open(0, 0, true, &c);
        arrive(&mut p, &c, &[0]);
        // Five periods after it, one of them the message on its way.
        p.close(0, 60 * MS, false, &c);
        assert_eq!(get(&c.push.lost), 4);
        assert_eq!(get(&c.push.expected), 5);
        assert_eq!(get(&c.push.connections_with_loss), 1);
    }

    #[test]
    fn a_connection_closed_before_any_message_is_idle_or_unverified() {
        let (mut p, c) = rx(&[]);
        p.open(0, 0, true, &c);
        p.close(0, 15 * MS, false, &c);
        assert_eq!((get(&c.idle), get(&c.unverified)), (1, 0), "too young");
        p.open(1, 0, true, &c);
        p.close(1, 50 * MS, false, &c);
        assert_eq!(get(&c.unverified), 1, "silent for more than two periods");
    }

    #[test]
    fn a_stream_the_server_ended_owes_its_periods_until_a_replacement_opens() {
        let (mut p, c) = rx(&[]);
        p.open(0, 0, true, &c);
        arrive(&mut p, &c, &[0]);
        p.close(0, 20 * MS, true, &c);
        assert_eq!(get(&c.push.lost), 0, "counted on, not yet");
        // A ramp's connection takes no place; a replacement does.
        p.open(1, 30 * MS, true, &c);
        assert_eq!(get(&c.push.lost), 0);
        p.open(2, 70 * MS, false, &c);
        assert_eq!(get(&c.push.lost), 5, "six periods since its last, less one");
        assert_eq!(get(&c.push.connections_with_loss), 1);
        // Counted once: the run's end finds nothing vacant.
        p.end(200 * MS, &c);
        assert_eq!(get(&c.push.lost), 5);
    }

    #[test]
    fn a_vacant_stream_counts_to_the_runs_end() {
        let (mut p, c) = rx(&[]);
        p.open(0, 0, true, &c);
        arrive(&mut p, &c, &[0]);
        p.close(0, 20 * MS, true, &c);
        p.end(110 * MS, &c);
        assert_eq!(get(&c.push.lost), 9);
    }

    #[test]
    fn messages_split_across_reads_are_kept_until_whole() {
        let (mut p, c) = rx(&[]);
        p.open(0, 0, true, &c);
        let mut stream = Vec::new();
        for seq in 0..3 {
            let h = wire::push::Header {
                seq,
                mono_ns: 0,
                wall_ns: 0,
            };
            wire::push::encode(&h, 8, &mut stream);
        }
        let mut pending = Vec::new();
        for (i, piece) in stream.chunks(7).enumerate() {
            assert!(p.bytes(0, &mut pending, piece, (i as u64 + 1) * MS, &c));
        }
        assert!(pending.is_empty());
        assert_eq!(get(&c.push.received), 3);
        assert_eq!(get(&c.push.lost), 0);
        // Bytes that are not messages end the connection, counted.
        assert!(!p.bytes(
            0,
            &mut pending,
            b"HTTP/1.1 400 Bad Request\r\n\r\n",
            9 * MS,
            &c
        ));
        assert_eq!(get(&c.push.malformed), 1);
    }

    #[test]
    fn over_udp_a_subscriber_subscribes_and_says_so_again() {
        let (mut p, c) = rx(&["--transport", "udp"]);
        assert_eq!(p.open(0, 0, true, &c), Some(SUBSCRIBE));
        assert_eq!(p.farewell(), Some(BYE));
        let at = p.wakeup().expect("a keepalive is due");
        assert_eq!(p.keepalive(at - Duration::from_millis(1)), None);
        assert_eq!(p.keepalive(at), Some(false), "those with no message yet");
        assert_eq!(p.keepalive(at + KEEPALIVE), Some(true), "all of them");
        let (mut p, c) = rx(&[]);
        assert_eq!(p.open(0, 0, true, &c), None, "TCP sends nothing");
        assert_eq!((p.wakeup(), p.farewell()), (None, None));
    }
}
