//! --mode push: every subscriber (a TCP connection, or a UDP peer that sent
//! a datagram) is sent `burst` messages each period, unasked, each with its
//! own sequence number and the send times (`wire::push`).
//!
//! The period is cut into slots of about a millisecond. A subscriber is
//! given a slot when it subscribes, in turn, so that a storm of subscribers
//! spreads over the period instead of making a burst at each tick, and
//! keeps it: its messages are due at its slot's time in every period. One
//! timer per worker fires at each slot. A message sent more than
//! [`LATE_NS`] after its due time is late (counted, with how late); a slot
//! a whole period behind is skipped (its messages counted as skipped, their
//! sequence numbers spent: the client sees the gap), so a worker that
//! cannot keep up catches up instead of falling further behind; a
//! subscriber whose socket is full loses the message (counted): a slow
//! client never grows the server's memory.
//!
//! Over WebSocket (--push-over websocket) a message is a text frame,
//! `SEQ MONO_NS WALL_NS ` and the payload (`wire::ws::encode_push`): its
//! length follows the numbers, so it is built anew for each send, in the
//! same reused buffer.
//!
//! No socket here: the worker passes a function that sends one message to
//! one target and says how it went.

use std::collections::HashMap;
use std::net::SocketAddr;

use slab::Slab;

use super::stats::{bump, WorkerStats};
use crate::domain::PushOver;
use crate::server_config::PushConfig;

/// A message sent this long after its due time is late.
pub const LATE_NS: u64 = 1_000_000;
/// The slots' width, about: a period is cut into `period / SLOT_NS` slots
/// (at least 1, at most [`MAX_SLOTS`]).
const SLOT_NS: u64 = 1_000_000;
const MAX_SLOTS: u64 = 1000;

/// Whom a subscription sends to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A connection: its slab key in the worker.
    Tcp(usize),
    /// A UDP peer of the worker's socket `sock`.
    Udp { sock: usize, peer: SocketAddr },
}

/// How sending one message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Sent (or, over TCP, the rest of it queued behind what was written).
    Whole,
    /// The socket could not take it (a TCP client's, full because it
    /// reads too slowly; over UDP the server's own): dropped.
    Full,
    /// The socket failed (the peer is gone; its close is on its way).
    Gone,
}

#[derive(Debug)]
struct Sub {
    target: Target,
    seq: u64,
    slot: u32,
    /// Its place in its slot's list.
    at: u32,
    /// UDP: when the peer was last heard from (mono ns).
    heard_ns: u64,
}

pub struct Pusher {
    period_ns: u64,
    slot_ns: u64,
    burst: u32,
    udp_idle_ns: u64,
    slots: Vec<Vec<u32>>,
    subs: Slab<Sub>,
    udp: HashMap<(usize, SocketAddr), u32>,
    /// The next slot a new subscriber takes.
    turn: usize,
    /// The next slot to serve, and when it is due (mono ns).
    cursor: usize,
    cursor_ns: u64,
    /// One message, restamped (or, over WebSocket, rebuilt) for each send.
    msg: Vec<u8>,
    /// --push-over websocket: the payload bytes after the numbers.
    ws_filler: Option<usize>,
}

impl Pusher {
    pub fn new(cfg: &PushConfig, now_ns: u64) -> Pusher {
        let period_ns = cfg.every_ns.max(1);
        let n = (period_ns / SLOT_NS).clamp(1, MAX_SLOTS);
        let mut msg = Vec::new();
        wire::push::encode(
            &wire::push::Header {
                seq: 0,
                mono_ns: 0,
                wall_ns: 0,
            },
            cfg.size,
            &mut msg,
        );
        Pusher {
            period_ns,
            slot_ns: period_ns / n,
            burst: cfg.burst.max(1),
            udp_idle_ns: cfg.udp_idle_ns,
            slots: (0..n).map(|_| Vec::new()).collect(),
            subs: Slab::new(),
            udp: HashMap::new(),
            turn: 0,
            cursor: 0,
            cursor_ns: now_ns + period_ns / n,
            msg,
            ws_filler: (cfg.over == PushOver::Websocket).then_some(cfg.size),
        }
    }

    /// Subscribers now.
    pub fn len(&self) -> usize {
        self.subs.len()
    }

    /// When the next slot is due (mono ns).
    pub fn next_due_ns(&self) -> u64 {
        self.cursor_ns
    }

    /// A new subscriber; its id (to unsubscribe with).
    pub fn subscribe(&mut self, target: Target, now_ns: u64) -> u32 {
        let slot = self.turn;
        self.turn = (self.turn + 1) % self.slots.len();
        let id = self.subs.insert(Sub {
            target,
            seq: 0,
            slot: slot as u32,
            at: self.slots[slot].len() as u32,
            heard_ns: now_ns,
        }) as u32;
        self.slots[slot].push(id);
        id
    }

    pub fn unsubscribe(&mut self, id: u32) {
        let Some(sub) = self.subs.try_remove(id as usize) else {
            return;
        };
        let list = &mut self.slots[sub.slot as usize];
        list.swap_remove(sub.at as usize);
        if let Some(&moved) = list.get(sub.at as usize) {
            self.subs[moved as usize].at = sub.at;
        }
        if let Target::Udp { sock, peer } = sub.target {
            self.udp.remove(&(sock, peer));
        }
    }

    /// A datagram from `peer` on socket `sock`: it subscribes the peer (or
    /// keeps it subscribed); `bye` ends its subscription. True when it
    /// started a subscription.
    pub fn heard(&mut self, sock: usize, peer: SocketAddr, bye: bool, now_ns: u64) -> bool {
        match (self.udp.get(&(sock, peer)).copied(), bye) {
            (Some(id), true) => {
                self.unsubscribe(id);
                false
            }
            (Some(id), false) => {
                self.subs[id as usize].heard_ns = now_ns;
                false
            }
            (None, true) => false,
            (None, false) => {
                let id = self.subscribe(Target::Udp { sock, peer }, now_ns);
                self.udp.insert((sock, peer), id);
                true
            }
        }
    }

    /// Serves every slot due by `now()` at the call: each subscriber's
    /// `burst` messages through `send`. Counts in `stats`; returns the UDP
    /// subscriptions that expired (silent for --udp-idle). The slots that
    /// come due while it sends wait for the next call: a worker slower than
    /// its pushes still goes back to its loop between calls, to accept and
    /// to read (one that chased the clock would, once behind, never
    /// return, and new connections would wait unanswered).
    pub fn run(
        &mut self,
        mut now: impl FnMut() -> (u64, u64),
        stats: &WorkerStats,
        mut send: impl FnMut(Target, &[u8]) -> Sent,
    ) {
        let (mut now_ns, _) = now();
        let until = now_ns;
        while self.cursor_ns <= until {
            let due = self.cursor_ns;
            let slot = self.cursor;
            self.cursor = (self.cursor + 1) % self.slots.len();
            self.cursor_ns += self.slot_ns;
            if now_ns - due >= self.period_ns {
                // A whole period behind: this slot's messages are dropped
                // and their numbers spent, so the worker catches up.
                let n = self.slots[slot].len() as u64 * u64::from(self.burst);
                for &id in &self.slots[slot] {
                    self.subs[id as usize].seq += u64::from(self.burst);
                }
                bump(&stats.push.due, n);
                bump(&stats.push.skipped_behind, n);
                continue;
            }
            let mut expired = Vec::new();
            for i in 0..self.slots[slot].len() {
                let id = self.slots[slot][i];
                let sub = &mut self.subs[id as usize];
                if matches!(sub.target, Target::Udp { .. })
                    && now_ns.saturating_sub(sub.heard_ns) > self.udp_idle_ns
                {
                    expired.push(id);
                    continue;
                }
                for _ in 0..self.burst {
                    let (mono_ns, wall_ns) = now();
                    now_ns = mono_ns;
                    let h = wire::push::Header {
                        seq: sub.seq,
                        mono_ns,
                        wall_ns,
                    };
                    match self.ws_filler {
                        Some(filler) => {
                            self.msg.clear();
                            wire::ws::encode_push(&h, filler, &mut self.msg);
                        }
                        None => wire::push::restamp(&mut self.msg, &h),
                    }
                    sub.seq += 1;
                    let sent = send(sub.target, &self.msg);
                    if sent != Sent::Gone {
                        // (Due: to a subscriber still there.)
                        bump(&stats.push.due, 1);
                    }
                    match sent {
                        Sent::Whole => {
                            let late = mono_ns.saturating_sub(due);
                            if late > LATE_NS {
                                bump(&stats.push.late, 1);
                                stats.push.late_max_us.fetch_max(late / 1000, RELAXED);
                                stats
                                    .push
                                    .late_max_us_second
                                    .fetch_max(late / 1000, RELAXED);
                            } else {
                                bump(&stats.push.on_time, 1);
                            }
                        }
                        Sent::Full => bump(&stats.push.skipped_full, 1),
                        Sent::Gone => {}
                    }
                }
            }
            for id in expired {
                self.unsubscribe(id);
                bump(&stats.push.expired, 1);
            }
        }
    }
}

const RELAXED: std::sync::atomic::Ordering = std::sync::atomic::Ordering::Relaxed;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    fn cfg(every_ms: u64, burst: u32) -> PushConfig {
        PushConfig {
            every_ns: every_ms * 1_000_000,
            size: 8,
            burst,
            udp_idle_ns: 30_000_000_000,
            over: PushOver::Tcp,
        }
    }

    /// Runs the pusher at `at` (ns), collecting (target key, seq).
    fn run_at(p: &mut Pusher, at: u64, stats: &WorkerStats, full: bool) -> Vec<(usize, u64)> {
        let mut got = Vec::new();
        p.run(
            || (at, 0),
            stats,
            |t, m| {
                let Target::Tcp(k) = t else { panic!() };
                let (h, _) = wire::push::decode(m).unwrap().unwrap();
                got.push((k, h.seq));
                if full {
                    Sent::Full
                } else {
                    Sent::Whole
                }
            },
        );
        got
    }

    #[test]
    fn subscribers_spread_over_the_period_and_keep_their_slot() {
        let stats = WorkerStats::default();
        let mut p = Pusher::new(&cfg(20, 1), 0);
        assert_eq!(p.slots.len(), 20);
        for k in 0..40 {
            p.subscribe(Target::Tcp(k), 0);
        }
        // Each slot holds two: a storm of 40 is spread over the period.
        assert!(p.slots.iter().all(|s| s.len() == 2));
        // One period: every subscriber once, numbered 0.
        let got = run_at(&mut p, 20_000_000, &stats, false);
        assert_eq!(got.len(), 40);
        assert!(got.iter().all(|&(_, seq)| seq == 0));
        let got = run_at(&mut p, 40_000_000, &stats, false);
        assert_eq!(got.len(), 40);
        assert!(got.iter().all(|&(_, seq)| seq == 1));
        assert_eq!(stats.push.due.load(Relaxed), 80);
    }

    /// A worker slower than its pushes (each send takes 5 ms of a clock
    /// whose slots are 1 ms) serves what was due when it was called, and
    /// returns to its loop.
    #[test]
    fn a_worker_behind_its_pushes_returns_to_its_loop() {
        let stats = WorkerStats::default();
        let mut p = Pusher::new(&cfg(20, 1), 0);
        for k in 0..40 {
            p.subscribe(Target::Tcp(k), 0);
        }
        let mut clock = 20_000_000;
        let mut sent = 0;
        p.run(
            || {
                clock += 5_000_000;
                assert!(clock < 10_000_000_000, "run never returned");
                (clock, 0)
            },
            &stats,
            |_, _| {
                sent += 1;
                Sent::Whole
            },
        );
        // The 26 slots due at its first reading of the clock, 25 ms (two
        // subscribers each: served late, or skipped once a period behind).
        assert!(sent <= 52, "{sent}");
        assert_eq!(p.cursor_ns, 26_000_000);
    }

    #[test]
    fn late_and_behind_and_full_are_counted() {
        let stats = WorkerStats::default();
        let mut p = Pusher::new(&cfg(20, 2), 0);
        p.subscribe(Target::Tcp(7), 0);
        // Its slot is due at 1 ms; served at 3 ms: 2 messages late.
        assert_eq!(run_at(&mut p, 3_000_000, &stats, false).len(), 2);
        assert_eq!(stats.push.late.load(Relaxed), 2);
        assert_eq!(stats.push.late_max_us.load(Relaxed), 2000);
        // Next due at 21 ms; served at 45 ms: a whole period behind, the
        // two are skipped, then the slot's next due (41 ms) is sent late
        // with the numbers after the skipped ones.
        let got = run_at(&mut p, 45_000_000, &stats, false);
        assert_eq!(got, vec![(7, 4), (7, 5)]);
        assert_eq!(stats.push.skipped_behind.load(Relaxed), 2);
        // A full socket drops the messages (their numbers spent).
        assert_eq!(run_at(&mut p, 61_000_000, &stats, true).len(), 2);
        assert_eq!(stats.push.skipped_full.load(Relaxed), 2);
        assert_eq!(
            run_at(&mut p, 81_000_000, &stats, false),
            vec![(7, 8), (7, 9)]
        );
    }

    #[test]
    fn over_websocket_each_message_is_a_text_frame_numbered_first() {
        let stats = WorkerStats::default();
        let mut c = cfg(10, 1);
        c.over = PushOver::Websocket;
        let mut p = Pusher::new(&c, 0);
        p.subscribe(Target::Tcp(3), 0);
        let mut got = Vec::new();
        for at in [10_000_000, 20_000_000] {
            p.run(
                || (at, 7),
                &stats,
                |_, m| {
                    let f = wire::ws::decode_frame(m, wire::ws::Role::Client)
                        .unwrap()
                        .unwrap();
                    assert_eq!((f.end(), f.opcode), (m.len(), wire::ws::Opcode::Text));
                    got.push(f.payload(m).to_vec());
                    Sent::Whole
                },
            );
        }
        assert_eq!(
            got,
            [
                b"0 10000000 7 pppppppp".to_vec(),
                b"1 20000000 7 pppppppp".to_vec()
            ]
        );
    }

    #[test]
    fn unsubscribing_keeps_the_slots_consistent() {
        let stats = WorkerStats::default();
        let mut p = Pusher::new(&cfg(1, 1), 0);
        let ids: Vec<u32> = (0..5).map(|k| p.subscribe(Target::Tcp(k), 0)).collect();
        p.unsubscribe(ids[1]);
        p.unsubscribe(ids[3]);
        let mut got: Vec<usize> = run_at(&mut p, 1_000_000, &stats, false)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        got.sort();
        assert_eq!(got, vec![0, 2, 4]);
        assert_eq!(p.len(), 3);
    }

    #[test]
    fn udp_peers_subscribe_refresh_leave_and_expire() {
        let stats = WorkerStats::default();
        let mut c = cfg(10, 1);
        c.udp_idle_ns = 50_000_000;
        let mut p = Pusher::new(&c, 0);
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2000".parse().unwrap();
        assert!(p.heard(0, a, false, 0));
        assert!(!p.heard(0, a, false, 0));
        assert!(p.heard(0, b, false, 0));
        assert!(!p.heard(0, b, true, 0));
        assert_eq!(p.len(), 1);
        // Silent past --udp-idle: expired when its slot comes.
        let mut sent = 0;
        p.run(
            || (100_000_000, 0),
            &stats,
            |_, _| {
                sent += 1;
                Sent::Whole
            },
        );
        assert_eq!(p.len(), 0);
        assert_eq!(stats.push.expired.load(Relaxed), 1);
    }
}
