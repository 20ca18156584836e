//! When queries are due, decided once from the scenario's model: open loop
//! (this worker's share of the arrivals, on any connection), intervals
//! (each connection every T, staggered), or closed loop (the next query
//! when one is done, after the think time). Times are ns since the run's
//! start; entries of connections that moved on are skipped by the worker
//! (they carry the attempt number).

use std::collections::VecDeque;

use rand::Rng;
use rand_pcg::Pcg64Mcg;

use super::pacer::Pacer;
use crate::domain::Spread;
use crate::scenario::Model;

/// tcp-per-query, closed loop: a think-queue entry that starts a query on
/// a new connection.
pub const NEW_CONNECTION: usize = usize::MAX;

/// A connection's queue entry: slab key, attempt number, due time.
type Slot = (usize, u64, u64);

pub enum Pacing {
    Open { pacer: Pacer, spread: Spread },
    Interval { every: u64, q: VecDeque<Slot> },
    Closed { think: u64, q: VecDeque<Slot> },
}

/// A query that came due.
#[derive(Debug, PartialEq, Eq)]
pub enum Due {
    /// Open loop: on a connection the worker picks.
    Arrival(u64),
    /// On this connection, its interval come round.
    Tick { key: usize, seq: u64, at: u64 },
    /// On this connection, its think time over.
    Think { key: usize, seq: u64, at: u64 },
    /// tcp-per-query: on a connection of its own.
    NewConnection(u64),
}

impl Pacing {
    /// Worker `id` of `workers`, with the traffic's `seed`.
    pub fn new(model: &Model, workers: u64, id: u64, seed: u64) -> Pacing {
        match model {
            Model::OpenLoop {
                phases,
                arrivals,
                spread,
            } => Pacing::Open {
                pacer: Pacer::new(
                    phases.clone(),
                    1.0 / workers as f64,
                    *arrivals,
                    seed.wrapping_add(id.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                ),
                spread: *spread,
            },
            Model::Interval { every_s } => Pacing::Interval {
                every: (every_s * 1e9) as u64,
                q: VecDeque::new(),
            },
            Model::ClosedLoop { think_s } => Pacing::Closed {
                think: (think_s * 1e9) as u64,
                q: VecDeque::new(),
            },
        }
    }

    pub fn closed_loop(&self) -> bool {
        matches!(self, Pacing::Closed { .. })
    }

    /// Open loop: the rate of every worker together is `rate` from `now`
    /// on (traffic `started`); the arrivals due before it and not taken
    /// (a worker behind its schedule) are dropped: how many, returned.
    pub fn set_rate(&mut self, rate: f64, now: u64, started: u64) -> u64 {
        match self {
            Pacing::Open { .. } => {
                let behind = self.skip(now, started);
                self.set_open_rate(rate, now.saturating_sub(started) as f64 / 1e9);
                behind
            }
            _ => 0,
        }
    }

    /// The traffic ends at `now` (started at `started`): the queries due by
    /// then and not taken (a worker behind its schedule) are dropped: how
    /// many, returned. `live`: whether an interval's connection (key, seq)
    /// is still there (a gone one's ticks were never due).
    pub fn end(&mut self, now: u64, started: u64, live: impl Fn(usize, u64) -> bool) -> u64 {
        match self {
            Pacing::Open { .. } => self.skip(now, started),
            Pacing::Interval { every, q } => {
                let every = (*every).max(1);
                let mut n = 0;
                q.retain(|&(key, seq, at)| {
                    if at > now {
                        return true;
                    }
                    if live(key, seq) {
                        n += (now - at) / every + 1;
                    }
                    false
                });
                n
            }
            // A closed loop's next query waits for an answer or a think
            // time, never for the schedule.
            Pacing::Closed { .. } => 0,
        }
    }

    /// Open loop: takes the arrivals due by `now` without sending them:
    /// how many.
    fn skip(&mut self, now: u64, started: u64) -> u64 {
        match self {
            Pacing::Open { pacer, .. } => {
                pacer.skip_until(now.saturating_sub(started) as f64 / 1e9)
            }
            _ => 0,
        }
    }

    fn set_open_rate(&mut self, rate: f64, t: f64) {
        if let Pacing::Open { pacer, .. } = self {
            pacer.set_rate(rate, t);
        }
    }

    /// TrafficState starts at `started` on the connections `held` (key, seq):
    /// interval connections get their staggered first sends (connection i
    /// of n starts i/n of the way into the first interval, so they do not
    /// fire in lock-step), closed-loop connections their first window. With
    /// tcp-per-query (`per_query`: its connections), closed loop starts
    /// that many queries on connections of their own.
    pub fn begin(
        &mut self,
        started: u64,
        held: &[(usize, u64)],
        window: u64,
        per_query: Option<u64>,
    ) {
        match self {
            Pacing::Closed { q, .. } => match per_query {
                Some(slots) => {
                    for _ in 0..slots {
                        q.push_back((NEW_CONNECTION, 0, started));
                    }
                }
                None => {
                    for &(key, seq) in held {
                        for _ in 0..window.min(1 << 16) {
                            q.push_back((key, seq, started));
                        }
                    }
                }
            },
            Pacing::Interval { every, q } if per_query.is_none() => {
                let n = held.len() as u64;
                for (i, &(key, seq)) in held.iter().enumerate() {
                    q.push_back((key, seq, started + *every * i as u64 / n.max(1)));
                }
            }
            _ => {}
        }
    }

    /// A connection joins traffic under way (a replacement) at `now`.
    pub fn join(&mut self, key: usize, seq: u64, now: u64, started: u64, window: u64) {
        match self {
            Pacing::Interval { every, q } => q.push_back((key, seq, now.max(started) + *every)),
            Pacing::Closed { q, .. } => {
                for _ in 0..window.min(1 << 16) {
                    q.push_back((key, seq, now));
                }
            }
            Pacing::Open { .. } => {}
        }
    }

    /// When the next query is due, if one is.
    pub fn next_due(&self, started: u64) -> Option<u64> {
        match self {
            Pacing::Open { pacer, .. } => Some(started + (pacer.peek() * 1e9) as u64),
            Pacing::Interval { q, .. } | Pacing::Closed { q, .. } => q.front().map(|e| e.2),
        }
    }

    /// The next query due by `now` (traffic started at `started`).
    #[inline]
    pub fn pop(&mut self, now: u64, started: u64) -> Option<Due> {
        match self {
            Pacing::Open { pacer, .. } => loop {
                if started + (pacer.peek() * 1e9) as u64 > now {
                    return None;
                }
                if let Some(at) = pacer.take() {
                    return Some(Due::Arrival(started + (at * 1e9) as u64));
                }
            },
            Pacing::Interval { q, .. } => {
                let &(key, seq, at) = q.front().filter(|e| e.2 <= now)?;
                q.pop_front();
                Some(Due::Tick { key, seq, at })
            }
            Pacing::Closed { q, .. } => {
                let &(key, seq, at) = q.front().filter(|e| e.2 <= now)?;
                q.pop_front();
                Some(if key == NEW_CONNECTION {
                    Due::NewConnection(at)
                } else {
                    Due::Think { key, seq, at }
                })
            }
        }
    }

    /// Interval: the connection's next query, one interval after `at`.
    pub fn again(&mut self, key: usize, seq: u64, at: u64) {
        if let Pacing::Interval { every, q } = self {
            q.push_back((key, seq, at + *every));
        }
    }

    /// Open loop: which of `n` connections takes an arrival (`rr`: the
    /// round robin's last pick, which queries that waited for a connection
    /// share).
    #[inline]
    pub fn pick(&self, n: usize, rng: &mut Pcg64Mcg, rr: &mut usize) -> usize {
        match self {
            Pacing::Open {
                spread: Spread::Random,
                ..
            } => rng.random_range(0..n),
            _ => {
                *rr = (*rr + 1) % n;
                *rr
            }
        }
    }

    /// Closed loop: a query of connection `key` is done at `now`. The next
    /// is due at once (the answer itself lets it go: Some(now), for the
    /// connection's waiting queue) or after the think time (queued here).
    pub fn next_after(&mut self, key: usize, seq: u64, now: u64) -> Option<u64> {
        match self {
            Pacing::Closed { think: 0, .. } => Some(now),
            Pacing::Closed { think, q } => {
                q.push_back((key, seq, now + *think));
                None
            }
            _ => None,
        }
    }

    /// tcp-per-query, closed loop: a query's connection is gone at `now`;
    /// the next starts on a new one after the think time.
    pub fn replace_connection(&mut self, now: u64) {
        if let Pacing::Closed { think, q } = self {
            q.push_back((NEW_CONNECTION, 0, now + *think));
        }
    }
}

/// --slack: the queries due within it of the first go out together. The
/// worker sleeps until the first due time plus the slack instead of each
/// due time, then sends every query due by then in one turn; each keeps its
/// own due time, so the wait shows in response time and send lag. The
/// open-loop arrivals of a batch go on one connection, [`PER_CONNECTION`]
/// at most, then on the next the spread picks: one write, one sendmmsg.
#[derive(Debug, Default)]
pub struct Slack {
    ns: u64,
    /// The turn (its `now`) that let a batch go: the worker asks again in
    /// the same turn after each tcp-per-query query.
    released: u64,
    /// The queries held at the end went.
    ended: bool,
    /// The connection this batch's arrivals go on, and how many it took.
    on: Option<(usize, usize)>,
}

/// A batch's open-loop arrivals one connection takes at most: one
/// sendmmsg's worth.
pub const PER_CONNECTION: usize = super::transport::link::BATCH;

impl Slack {
    pub fn new(slack_s: f64) -> Slack {
        Slack {
            ns: (slack_s * 1e9) as u64,
            released: u64::MAX,
            ended: false,
            on: None,
        }
    }

    /// When the batch whose first query is due at `first` goes.
    #[inline]
    pub fn wake(&self, first: u64) -> u64 {
        first.saturating_add(self.ns)
    }

    /// The traffic ends at `now`: true once, with slack, for the queries it
    /// holds (due before the end) to go.
    pub fn end(&mut self, now: u64) -> bool {
        if self.ns == 0 || self.ended {
            return false;
        }
        self.ended = true;
        self.released = now;
        self.on = None;
        true
    }

    /// The queries due by `now` go in this turn, however long they waited.
    pub fn release(&mut self, now: u64) {
        self.released = now;
        self.on = None;
    }

    /// Whether the queries due by `now` go now: always without slack;
    /// with it, once the first due (`first`, asked only then) has waited
    /// the slack.
    #[inline]
    pub fn ready_to_send(&mut self, now: u64, first: impl FnOnce() -> Option<u64>) -> bool {
        if self.ns == 0 || self.released == now {
            return true;
        }
        if first().is_some_and(|f| self.wake(f) <= now) {
            self.released = now;
            self.on = None;
            return true;
        }
        false
    }

    /// Batches are gathered (a slack is set).
    #[inline]
    pub fn gathers(&self) -> bool {
        self.ns > 0
    }

    /// The connection the batch's arrivals go on, while it takes more
    /// (`usable`: it is still in the open-loop choice).
    pub fn batch_connection(&mut self, usable: impl FnOnce(usize) -> bool) -> Option<usize> {
        match self.on {
            Some((key, n)) if n < PER_CONNECTION && usable(key) => {
                self.on = Some((key, n + 1));
                Some(key)
            }
            _ => None,
        }
    }

    /// The spread picked `key` for the batch's next arrivals.
    pub fn picked(&mut self, key: usize) {
        self.on = Some((key, 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Arrivals;
    use crate::scenario::Phase;
    use rand::SeedableRng;

    fn open(rate: f64, spread: Spread) -> Pacing {
        let phases = vec![Phase {
            from: rate,
            to: rate,
            seconds: 100.0,
        }];
        Pacing::new(
            &Model::OpenLoop {
                phases,
                arrivals: Arrivals::Constant,
                spread,
            },
            1,
            0,
            1,
        )
    }

    fn drain(p: &mut Pacing, now: u64, started: u64) -> Vec<Due> {
        std::iter::from_fn(|| p.pop(now, started)).collect()
    }

    #[test]
    fn open_loop_arrivals_come_due_at_the_rate() {
        let mut p = open(1000.0, Spread::RoundRobin);
        let started = 5_000_000_000;
        assert!(drain(&mut p, started - 1, started).is_empty());
        let due = drain(&mut p, started + 10_000_000, started);
        // 1000/s for 10 ms: about 10 (the first may be at 0).
        assert!((10..=11).contains(&due.len()), "{}", due.len());
        for d in &due {
            let Due::Arrival(at) = d else { panic!("{d:?}") };
            assert!((started..=started + 10_000_000).contains(at));
        }
        assert!(p.next_due(started).unwrap() > started + 10_000_000);
        let mut rng = Pcg64Mcg::seed_from_u64(1);
        let mut rr = 0;
        let picks = [(); 3].map(|()| p.pick(3, &mut rng, &mut rr));
        assert_eq!(picks, [1, 2, 0]);
    }

    #[test]
    fn random_spread_picks_every_connection() {
        let p = open(1000.0, Spread::Random);
        let mut rng = Pcg64Mcg::seed_from_u64(1);
        let mut seen = [0; 4];
        for _ in 0..400 {
            seen[p.pick(4, &mut rng, &mut 0)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
    }

    /// A worker behind its schedule: what it did not take of the old rate
    /// is counted when the rate changes, and the new rate runs from the
    /// change on; what is left at the traffic's end is counted too.
    #[test]
    fn what_a_worker_behind_did_not_take_is_counted() {
        let mut p = open(1000.0, Spread::RoundRobin);
        let s = 0;
        // 1 s of 1000/s due, 100 taken.
        for _ in 0..100 {
            p.pop(1_000_000_000, s).expect("due");
        }
        let behind = p.set_rate(10.0, 1_000_000_000, s);
        assert!((899..=901).contains(&behind), "{behind}");
        assert!(p.pop(1_000_000_000, s).is_none(), "the backlog is gone");
        // 10/s from 1 s on: 10 due in the next second; 4 taken.
        for _ in 0..4 {
            p.pop(2_000_000_000, s).expect("due");
        }
        let left = p.end(2_000_000_000, s, |_, _| true);
        assert!((5..=7).contains(&left), "{left}");
        assert!(p.pop(2_000_000_000, s).is_none());
        // Interval: each connection's ticks due by the end; a gone one's
        // are none.
        let mut p = Pacing::new(&Model::Interval { every_s: 1.0 }, 1, 0, 1);
        p.begin(0, &[(1, 1), (2, 2)], 1, None);
        let n = p.end(2_500_000_000, 0, |key, _| key == 1);
        assert_eq!(n, 3, "ticks at 0, 1 and 2 s");
        // A keeping-up rate change drops nothing.
        let mut p = open(1000.0, Spread::RoundRobin);
        drain(&mut p, 500_000_000, 0);
        assert_eq!(p.set_rate(2000.0, 500_000_000, 0), 0);
    }

    #[test]
    fn intervals_are_staggered_and_come_round() {
        let mut p = Pacing::new(&Model::Interval { every_s: 1.0 }, 1, 0, 1);
        let held = [(10, 100), (11, 101), (12, 102), (13, 103)];
        p.begin(0, &held, 1, None);
        let due = drain(&mut p, 600_000_000, 0);
        assert_eq!(
            due,
            [
                Due::Tick {
                    key: 10,
                    seq: 100,
                    at: 0
                },
                Due::Tick {
                    key: 11,
                    seq: 101,
                    at: 250_000_000
                },
                Due::Tick {
                    key: 12,
                    seq: 102,
                    at: 500_000_000
                },
            ]
        );
        p.again(10, 100, 0);
        assert_eq!(p.next_due(0), Some(750_000_000));
        assert_eq!(
            drain(&mut p, 1_000_000_000, 0),
            [
                Due::Tick {
                    key: 13,
                    seq: 103,
                    at: 750_000_000
                },
                Due::Tick {
                    key: 10,
                    seq: 100,
                    at: 1_000_000_000
                },
            ]
        );
        // A replacement joins one interval from now.
        p.join(20, 200, 3_000_000_000, 0, 1);
        assert_eq!(p.next_due(0), Some(4_000_000_000));
    }

    #[test]
    fn closed_loop_keeps_the_window_full() {
        let mut p = Pacing::new(&Model::ClosedLoop { think_s: 0.0 }, 1, 0, 1);
        p.begin(7, &[(1, 1), (2, 2)], 3, None);
        let due = drain(&mut p, 7, 7);
        assert_eq!(due.len(), 6);
        assert_eq!(
            due[0],
            Due::Think {
                key: 1,
                seq: 1,
                at: 7
            }
        );
        assert_eq!(
            due[5],
            Due::Think {
                key: 2,
                seq: 2,
                at: 7
            }
        );
        // No think time: the next goes at once, with the answer.
        assert_eq!(p.next_after(1, 1, 50), Some(50));
        assert_eq!(p.next_due(7), None);

        let mut p = Pacing::new(&Model::ClosedLoop { think_s: 0.001 }, 1, 0, 1);
        assert_eq!(p.next_after(1, 1, 50), None);
        assert_eq!(drain(&mut p, 1_000_049, 0), []);
        assert_eq!(
            drain(&mut p, 1_000_050, 0),
            [Due::Think {
                key: 1,
                seq: 1,
                at: 1_000_050
            }]
        );
    }

    #[test]
    fn per_query_closed_loop_opens_a_connection_per_query() {
        let mut p = Pacing::new(&Model::ClosedLoop { think_s: 0.5 }, 1, 0, 1);
        p.begin(0, &[], 1, Some(2));
        assert_eq!(
            drain(&mut p, 0, 0),
            [Due::NewConnection(0), Due::NewConnection(0)]
        );
        p.replace_connection(100);
        assert_eq!(
            drain(&mut p, 500_000_100, 0),
            [Due::NewConnection(500_000_100)]
        );
    }

    #[test]
    fn no_slack_lets_every_turn_go() {
        let mut s = Slack::new(0.0);
        assert!(s.ready_to_send(5, || Some(10)));
    }

    #[test]
    fn slack_holds_queries_until_the_first_has_waited_it() {
        let mut s = Slack::new(0.001);
        assert_eq!(s.wake(1_000), 1_001_000);
        assert!(!s.ready_to_send(1_000_999, || Some(1_000)));
        assert!(s.ready_to_send(1_001_000, || Some(1_000)));
        // The same turn asks again (after a tcp-per-query query): the
        // batch is still let go, whatever is first now.
        assert!(s.ready_to_send(1_001_000, || Some(1_000_500)));
        assert!(!s.ready_to_send(1_001_001, || Some(1_000_500)));
        assert!(!s.ready_to_send(2_000_000, || None));
    }

    #[test]
    fn a_batch_stays_on_one_connection_up_to_a_sendmmsg() {
        let mut s = Slack::new(0.001);
        assert!(s.ready_to_send(1_000_000, || Some(0)));
        assert_eq!(s.batch_connection(|_| true), None);
        s.picked(7);
        for _ in 1..PER_CONNECTION {
            assert_eq!(s.batch_connection(|_| true), Some(7));
        }
        assert_eq!(s.batch_connection(|_| true), None);
        s.picked(8);
        assert_eq!(s.batch_connection(|k| k != 8), None);
        s.picked(9);
        // The next batch starts on the spread's pick.
        assert!(s.ready_to_send(2_000_000, || Some(1_000_000)));
        assert_eq!(s.batch_connection(|_| true), None);
    }

    #[test]
    fn the_end_lets_the_held_queries_go_once() {
        let mut s = Slack::new(0.001);
        assert!(s.end(5));
        assert!(s.ready_to_send(5, || Some(4)));
        assert!(!s.end(6));
        assert!(!Slack::new(0.0).end(5));
    }
}
