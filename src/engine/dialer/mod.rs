//! How a worker opens connections: its share of the ramp on an absolute
//! schedule (attempt i is due at `start + ramp.due(i)`, worker w of W owns
//! attempts w, w+W, ...) and the cap on connects in flight, composed of
//! the parts with a job each: the replacements it owes
//! ([`replacements`]), the level a schedule or --control asks for
//! ([`level`]), the deadlines of a connection's steps
//! ([`step_deadlines`]), which connections are steady ([`steady`]), where
//! each attempt goes ([`endpoints`]); and the sockets made before the
//! start (--preallocate) and the connect histograms.

mod endpoints;
mod level;
mod replacements;
mod steady;
mod step_deadlines;

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use slab::Slab;
use socket2::Socket;

use super::conn::{Conn, State};
use crate::metrics::Grow;
use crate::metrics::{bump, new_histogram, ConnCounters};
use crate::scenario::Scenario;
use crate::sys::signals::Reason;
use endpoints::Endpoints;
use level::Level;
use replacements::Replacements;
use steady::Steadiness;
pub use steady::STEADY_AFTER;
use step_deadlines::StepDeadlines;

/// Connection attempts one loop turn starts at most: an attempt's connect
/// time ends when the loop sees it established, so a turn that started a
/// thousand connects would add their whole cost to each of them.
pub const CONNECTS_PER_TURN: u32 = 64;

/// How long a worker's connections took to come up, step by step (µs).
pub struct ConnectTimes {
    pub connect_time: Histogram<u64>,
    /// Time inside connect() itself (the kernel's port search).
    pub connect_syscall: Histogram<u64>,
    pub tls_handshake: Histogram<u64>,
    /// WebSocket upgrades: request sent to 101 read.
    pub ws_handshake: Histogram<u64>,
}

pub struct Dialer {
    id: u64,
    nworkers: u64,
    /// The run's connection count: replacement attempts are numbered from
    /// there.
    connections: u64,
    /// Ramp attempts started.
    next: u64,
    /// This worker's ramp attempts (0: a schedule or tcp-per-query decides).
    initial_total: u64,
    /// Connects in flight, and the most allowed.
    inflight: u64,
    max_inflight: u64,
    /// Ramp attempts not yet resolved (verified, unverified or failed).
    ramp_left: u64,
    /// Ramp attempts not yet established or failed.
    est_left: u64,
    replacements: Replacements,
    level: Level,
    deadlines: StepDeadlines,
    steadiness: Steadiness,
    endpoints: Endpoints,
    /// --preallocate: sockets made and bound before the start.
    prealloc: VecDeque<Socket>,
    times: ConnectTimes,
    notify: mpsc::Sender<Reason>,
    counters: Arc<ConnCounters>,
}

impl Dialer {
    pub fn new(
        sc: &Scenario,
        id: u64,
        nworkers: u64,
        initial_total: u64,
        start: Instant,
        notify: mpsc::Sender<Reason>,
        counters: Arc<ConnCounters>,
    ) -> Dialer {
        counters.ramp_left.store(initial_total, Relaxed);
        Dialer {
            id,
            nworkers,
            connections: sc.connections,
            next: 0,
            initial_total,
            inflight: 0,
            max_inflight: sc.max_inflight_connects.div_ceil(nworkers).max(1),
            ramp_left: initial_total,
            est_left: initial_total,
            replacements: Replacements::default(),
            level: Level::new(start),
            deadlines: StepDeadlines::default(),
            steadiness: Steadiness::new(counters.clone()),
            endpoints: Endpoints::new(&sc.targets, &sc.sources),
            prealloc: VecDeque::new(),
            times: ConnectTimes {
                connect_time: new_histogram(),
                connect_syscall: new_histogram(),
                tls_handshake: new_histogram(),
                ws_handshake: new_histogram(),
            },
            notify,
            counters,
        }
    }

    /// The target and source address of attempt `i` ([`Endpoints`]).
    pub fn endpoints(&self, i: u64) -> (SocketAddr, Option<IpAddr>) {
        self.endpoints.for_attempt(i)
    }

    /// The schedule counts from `start`.
    pub fn set_start(&mut self, start: Instant) {
        self.level.set_start(start);
    }

    /// A worker with no ramp says at once that its ramp is done.
    pub fn begin(&self) {
        if self.ramp_left == 0 {
            let _ = self.notify.send(Reason::RampEstablished);
            let _ = self.notify.send(Reason::RampDone);
        }
    }

    pub fn ramp_done(&self) -> bool {
        self.ramp_left == 0
    }

    /// This worker's ramp attempts.
    pub fn ramp_attempts(&self) -> u64 {
        self.initial_total
    }

    /// The attempt number of this worker's `j`-th ramp attempt.
    pub fn ramp_seq(&self, j: u64) -> u64 {
        j * self.nworkers + self.id
    }

    /// The next attempt to start now, if one is due and the in-flight cap
    /// allows it: (attempt number, of the ramp).
    pub fn due(&mut self, now: Instant, start: Instant, sc: &Scenario) -> Option<(u64, bool)> {
        if self.inflight >= self.max_inflight {
            return None;
        }
        if self.next < self.initial_total {
            let seq = self.ramp_seq(self.next);
            if start + sc.ramp.due(seq) > now {
                return None;
            }
            self.next += 1;
            return Some((seq, true));
        }
        if self.replacements.take(now) {
            return Some((self.replacement(), false));
        }
        None
    }

    /// The server ended a connection before answering anything on it:
    /// replacements wait longer.
    pub fn refused(&mut self, now: Instant, seq: u64) {
        if let Some(slot) = self.endpoints.source_slot(seq) {
            bump(&self.counters.refused_from[slot], 1);
        }
        self.replacements.refused(now);
    }

    /// Whether a connection toward a level may open now: while the server
    /// refuses, one an interval (as replacements).
    pub fn may_open(&mut self, now: Instant) -> bool {
        self.replacements.may_open(now)
    }

    /// A connection was served (answered): replacements go at once again.
    pub fn served(&mut self, seq: u64) {
        if let Some(slot) = self.endpoints.source_slot(seq) {
            bump(&self.counters.served_from[slot], 1);
        }
        self.replacements.served();
    }

    /// A new attempt number for a connection that is not the ramp's.
    pub fn replacement(&mut self) -> u64 {
        self.connections + self.replacements.next() * self.nworkers + self.id
    }

    /// One more connection is owed (a reconnect, a recycled one).
    pub fn queue_reconnect(&mut self) {
        self.replacements.owe();
    }

    /// Connections owed.
    pub fn reconnects_pending(&self) -> u64 {
        self.replacements.owed()
    }

    /// Connections open or owed, of `open` open.
    pub fn counted(&self, open: usize) -> u64 {
        open as u64 + self.replacements.owed()
    }

    /// The level's token bucket fills at the ramp's rate, up to a burst
    /// of 10 ms.
    pub fn refill(&mut self, now: Instant, sc: &Scenario) {
        self.level
            .refill(now, sc.ramp.rate() / self.nworkers as f64);
    }

    /// Opens toward a level: the attempt number of a connection that may
    /// start now (a token, and room under the in-flight cap), if one may.
    pub fn level_attempt(&mut self) -> Option<u64> {
        if self.inflight >= self.max_inflight {
            return None;
        }
        let n = self.level.take()?;
        Some(self.connections + n * self.nworkers + self.id)
    }

    /// Closes toward a level: None when there is nothing left to close;
    /// else a debt forgiven or an entry already gone (Some(None)), or the
    /// oldest open connection to close (Some(Some(key))).
    pub fn level_close(&mut self, conns: &Slab<Conn>) -> Option<Option<usize>> {
        if self.replacements.forgive() {
            return Some(None);
        }
        self.level.oldest(conns)
    }

    /// A connection is open: the oldest close first when a level falls.
    pub fn opened(&mut self, key: usize, seq: u64) {
        self.level.opened(key, seq);
    }

    /// Drops the entries of connections already gone, so that churn
    /// cannot grow the list without bound.
    pub fn prune(&mut self, conns: &Slab<Conn>) {
        self.level.prune(conns);
    }

    /// --stop-on held: the ramp's attempts not started yet are dropped
    /// (those in flight still resolve).
    pub fn stop_ramp(&mut self) {
        let dropped = self.initial_total - self.next;
        if dropped == 0 {
            return;
        }
        self.initial_total = self.next;
        self.est_left -= dropped;
        self.ramp_left -= dropped;
        self.counters.ramp_left.store(self.ramp_left, Relaxed);
        if self.est_left == 0 {
            let _ = self.notify.send(Reason::RampEstablished);
        }
        if self.ramp_left == 0 {
            let _ = self.notify.send(Reason::RampDone);
        }
    }

    /// An attempt of the ramp is established or failed: the ramp's own
    /// figure ends with the last (verification, which may take longer, has
    /// its own: [`Dialer::resolved`]).
    pub fn settled(&mut self, initial: bool) {
        if !initial {
            return;
        }
        self.est_left -= 1;
        if self.est_left == 0 {
            let _ = self.notify.send(Reason::RampEstablished);
        }
    }

    /// An initial attempt ended: failed, or established (and, with the
    /// probe, verified or not in time). The ramp is one step closer to done.
    pub fn resolved(&mut self, initial: bool) {
        if !initial {
            return;
        }
        self.ramp_left -= 1;
        self.counters.ramp_left.store(self.ramp_left, Relaxed);
        if self.ramp_left == 0 {
            let _ = self.notify.send(Reason::RampDone);
        }
    }

    /// Attempt `seq`, connection `key`, has started its connect at `now`;
    /// `deadline`: when it must be up (None: a UDP socket, up at once).
    pub fn connect_started(&mut self, key: usize, seq: u64, deadline: Option<Instant>) {
        self.inflight += 1;
        if let Some(at) = deadline {
            self.deadlines.connect_by(key, seq, at);
        }
    }

    /// A connect in flight has ended: up, failed or timed out.
    pub fn connect_ended(&mut self) {
        self.inflight -= 1;
    }

    /// Connects in flight.
    pub fn connects_in_flight(&self) -> u64 {
        self.inflight
    }

    /// Connection `key` (attempt `seq`) must finish its TLS handshake,
    /// probe or upgrade by `at`.
    pub fn probe_by(&mut self, key: usize, seq: u64, at: Instant) {
        self.deadlines.probe_by(key, seq, at);
    }

    /// Connection `key` (attempt `seq`) ends its --lifetime at `at`.
    pub fn end_of_life(&mut self, key: usize, seq: u64, at: Instant) {
        self.deadlines.end_of_life(key, seq, at);
    }

    /// The next connect that ran out of time by `now`
    /// ([`StepDeadlines`]).
    pub fn connect_expired(&mut self, now: Instant, conns: &Slab<Conn>) -> Option<usize> {
        self.deadlines.connect_expired(now, conns)
    }

    /// The next TLS handshake or probe that ran out of time by `now`, and
    /// which of the two.
    pub fn probe_expired(&mut self, now: Instant, conns: &Slab<Conn>) -> Option<(usize, State)> {
        self.deadlines.probe_expired(now, conns)
    }

    /// The next connection whose --lifetime ended by `now`.
    pub fn life_expired(&mut self, now: Instant, conns: &Slab<Conn>) -> Option<usize> {
        self.deadlines.life_expired(now, conns)
    }

    /// Connection `key` (attempt `seq`) is established at `now`: it is
    /// steady [`STEADY_AFTER`] later if it is still open.
    pub fn established(&mut self, key: usize, seq: u64, now: Instant) {
        self.steadiness.established(key, seq, now);
    }

    /// Counts the connections open for [`STEADY_AFTER`] by `now` as
    /// steady (each marked, so that its end uncounts it).
    pub fn age(&mut self, now: Instant, conns: &mut Slab<Conn>) {
        self.steadiness.age(now, conns);
    }

    /// Connection `c` ends: if it was steady it is no more.
    pub fn ends(&mut self, c: &Conn) {
        self.steadiness.ends(c);
    }

    /// Every connection has ended (the run's end).
    pub fn all_ended(&mut self) {
        self.steadiness.all_ended();
    }

    /// Gives back the memory of deadline queues that have emptied (after a
    /// ramp they held an entry per connection).
    pub fn shrink(&mut self) {
        self.deadlines.shrink();
        self.steadiness.shrink();
    }

    /// The earliest instant something of the dialer's is due.
    pub fn wakeup(&self, start: Instant, sc: &Scenario, consider: &mut impl FnMut(Instant)) {
        if self.inflight < self.max_inflight {
            if self.next < self.initial_total {
                consider(start + sc.ramp.due(self.ramp_seq(self.next)));
            } else if let Some(at) = self.replacements.wake_at() {
                consider(at);
            }
        }
        self.deadlines.earliest(consider);
        if let Some(at) = self.steadiness.wake_at() {
            consider(at);
        }
    }

    /// A socket made and bound before the start, for the ramp.
    pub fn preallocated(&mut self, s: Socket) {
        self.prealloc.push_back(s);
    }

    /// The next socket made before the start, for a ramp attempt.
    pub fn take_preallocated(&mut self, initial: bool) -> Option<Socket> {
        self.prealloc.pop_front().filter(|_| initial)
    }

    /// Records how long connect() itself took.
    pub fn connect_call(&mut self, took: Duration) {
        self.times
            .connect_syscall
            .put((took.as_micros() as u64).max(1));
    }

    /// Records how long a connection took to be up (µs).
    pub fn connected_in(&mut self, us: u64) {
        self.times.connect_time.put(us.max(1));
    }

    /// Records how long a TLS handshake took (µs).
    pub fn tls_handshake_in(&mut self, us: u64) {
        self.times.tls_handshake.put(us.max(1));
    }

    /// Records how long a WebSocket upgrade took (µs).
    pub fn ws_upgrade_in(&mut self, us: u64) {
        self.times.ws_handshake.put(us.max(1));
    }

    /// The connect histograms, at the end.
    pub fn into_times(self) -> ConnectTimes {
        self.times
    }
}

#[cfg(test)]
mod tests {
    use super::steady::STEADY_SLACK;
    use super::*;
    use crate::engine::transport::link::Link;

    fn args(args: &[&str]) -> crate::cli::ClientArgs {
        let mut argv = vec!["127.0.0.1:1".to_string()];
        argv.extend(args.iter().map(|a| a.to_string()));
        crate::cli::client_args(&argv).expect("client flags")
    }

    fn scenario(flags: &[&str]) -> Scenario {
        let targets = vec!["127.0.0.1:1".parse().unwrap()];
        args(flags).scenario(targets, false, Vec::new()).unwrap()
    }

    fn dialer(
        sc: &Scenario,
        id: u64,
        initial: u64,
        start: Instant,
    ) -> (Dialer, mpsc::Receiver<Reason>) {
        let (tx, rx) = mpsc::channel();
        let counters = Arc::new(ConnCounters::default());
        (
            Dialer::new(sc, id, sc.workers as u64, initial, start, tx, counters),
            rx,
        )
    }

    #[test]
    fn a_worker_takes_its_attempts_on_the_ramp_then_what_it_owes() {
        let sc = scenario(&["-c", "5", "-w", "2", "--connect-rate", "1000"]);
        let start = Instant::now();
        let ms = |n| start + Duration::from_millis(n);
        // Worker 1 of 2 owns attempts 1 and 3, due at 1 ms and 3 ms.
        let (mut d, _rx) = dialer(&sc, 1, 2, start);
        assert_eq!(d.due(start, start, &sc), None);
        assert_eq!(d.due(ms(1), start, &sc), Some((1, true)));
        assert_eq!(d.due(ms(2), start, &sc), None);
        assert_eq!(d.due(ms(3), start, &sc), Some((3, true)));
        assert_eq!(d.due(ms(9), start, &sc), None);
        d.queue_reconnect();
        d.queue_reconnect();
        assert_eq!(d.counted(4), 6);
        // Replacements are numbered after the run's connections.
        assert_eq!(d.due(ms(9), start, &sc), Some((6, false)));
        assert_eq!(d.due(ms(9), start, &sc), Some((8, false)));
        assert_eq!(d.due(ms(9), start, &sc), None);
    }

    #[test]
    fn sources_of_the_targets_family_take_turns() {
        let a = args(&["-c", "8"]);
        let targets = vec!["127.0.0.1:1".parse().unwrap(), "[::1]:2".parse().unwrap()];
        let sources = ["127.0.0.2", "::2", "127.0.0.3"]
            .map(|s| s.parse().unwrap())
            .to_vec();
        let sc = a.scenario(targets, false, sources).unwrap();
        let (d, _rx) = dialer(&sc, 0, 8, Instant::now());
        let got: Vec<String> = (0..6)
            .map(|i| {
                let (t, s) = d.endpoints(i);
                format!("{}<{}", t.port(), s.unwrap())
            })
            .collect();
        assert_eq!(
            got,
            [
                "1<127.0.0.2",
                "2<::2",
                "1<127.0.0.3",
                "2<::2",
                "1<127.0.0.2",
                "2<::2"
            ]
        );
    }

    #[test]
    fn connects_in_flight_are_capped() {
        let sc = scenario(&["-c", "5", "-w", "1", "--max-inflight-connects", "1"]);
        let start = Instant::now();
        let (mut d, _rx) = dialer(&sc, 0, 5, start);
        let later = start + Duration::from_secs(1);
        assert_eq!(d.due(later, start, &sc), Some((0, true)));
        d.connect_started(0, 0, None);
        assert_eq!(d.due(later, start, &sc), None);
        d.connect_ended();
        assert_eq!(d.due(later, start, &sc), Some((1, true)));
    }

    #[test]
    fn the_ramp_is_established_then_done() {
        let sc = scenario(&["-c", "2", "-w", "1"]);
        let (mut d, rx) = dialer(&sc, 0, 2, Instant::now());
        d.settled(true);
        d.settled(false);
        assert!(rx.try_recv().is_err());
        d.settled(true);
        assert_eq!(rx.try_recv(), Ok(Reason::RampEstablished));
        d.resolved(true);
        assert!(!d.ramp_done() && rx.try_recv().is_err());
        assert_eq!(d.counters.ramp_left.load(Relaxed), 1);
        d.resolved(true);
        assert!(d.ramp_done());
        assert_eq!(rx.try_recv(), Ok(Reason::RampDone));
    }

    #[test]
    fn expired_steps_skip_connections_that_moved_on() {
        let sc = scenario(&["-c", "3", "-w", "1"]);
        let now = Instant::now();
        let (mut d, _rx) = dialer(&sc, 0, 3, now);
        let mut conns = Slab::new();
        let a = conns.insert(Conn::new(Link::Detached, 0, now, 0, true));
        let b = conns.insert(Conn::new(Link::Detached, 1, now, 0, true));
        let c = conns.insert(Conn::new(Link::Detached, 2, now, 0, true));
        let at = now + Duration::from_secs(3);
        for (key, seq) in [(a, 0), (b, 1), (c, 2)] {
            d.connect_started(key, seq, Some(at));
            d.end_of_life(key, seq, at);
        }
        // `a` is established, `b`'s key now holds another attempt.
        conns[a].state = State::Held;
        conns[b].seq = 9;
        assert_eq!(d.connect_expired(now, &conns), None);
        assert_eq!(
            d.deadlines.connects_waiting(),
            1,
            "entries of a and b are dropped"
        );
        assert_eq!(d.connect_expired(at, &conns), Some(c));
        assert_eq!(d.life_expired(at, &conns), Some(a));
        assert_eq!(d.life_expired(at, &conns), Some(c));
        assert_eq!(d.life_expired(at, &conns), None);
        conns[a].state = State::Probing;
        d.probe_by(a, 0, at);
        assert_eq!(d.probe_expired(now, &conns), None);
        assert_eq!(d.probe_expired(at, &conns), Some((a, State::Probing)));
    }

    #[test]
    fn a_level_opens_at_the_ramps_rate() {
        let sc = scenario(&["-c", "10", "-w", "1", "--connect-rate", "1000"]);
        let start = Instant::now();
        let (mut d, _rx) = dialer(&sc, 0, 0, start);
        // One token to begin with, then 1000/s up to a 10 ms burst.
        d.refill(start, &sc);
        assert_eq!(d.level_attempt(), Some(10));
        assert_eq!(d.level_attempt(), None);
        d.refill(start + Duration::from_secs(1), &sc);
        let opened = std::iter::from_fn(|| d.level_attempt()).count();
        assert_eq!(opened, 10);
        // Closing toward a lower level forgives debts first.
        d.queue_reconnect();
        let conns = Slab::new();
        assert_eq!(d.level_close(&conns), Some(None));
        assert_eq!(d.level_close(&conns), None);
    }

    #[test]
    fn a_connection_is_steady_once_open_a_second_and_uncounted_when_it_ends() {
        let sc = scenario(&["-c", "3"]);
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let (mut d, _rx) = dialer(&sc, 0, 0, t0);
        let mut conns = Slab::new();
        let held = |seq, at| {
            let mut c = Conn::new(Link::Detached, seq, at, 0, seq < 3);
            c.state = State::Held;
            c
        };
        let a = conns.insert(held(0, t0));
        let b = conns.insert(held(1, t0));
        d.established(a, 0, t0);
        d.established(b, 1, at(500));
        // One the server closes at once, its key taken by a replacement.
        let gone = conns.insert(held(2, t0));
        d.established(gone, 2, at(600));
        d.ends(&conns.remove(gone));
        let again = conns.insert(held(5, at(700)));
        assert_eq!(again, gone);
        d.established(again, 5, at(700));
        let steady = |d: &Dialer| d.counters.steady.load(Relaxed);
        d.age(at(999), &mut conns);
        assert_eq!(steady(&d), 0);
        d.age(at(1000), &mut conns);
        assert_eq!(steady(&d), 1);
        // The closed one's entry finds its key holding another attempt.
        d.age(at(1650), &mut conns);
        assert_eq!(steady(&d), 2);
        d.ends(&conns.remove(a));
        assert_eq!(steady(&d), 1);
        // Ended before it was steady: nothing to uncount.
        d.ends(&conns.remove(again));
        d.age(at(5000), &mut conns);
        assert_eq!(steady(&d), 1);
        assert_eq!(d.steadiness.waiting(), 0);
        // Woken a little after the next is due, not for each.
        let c = conns.insert(held(6, at(5000)));
        d.established(c, 6, at(5000));
        let mut next = None;
        d.wakeup(t0, &sc, &mut |i| {
            next = Some(next.map_or(i, |n: Instant| n.min(i)))
        });
        assert_eq!(next, Some(at(6000) + STEADY_SLACK));
        // An entry met twice (an attempt number a replacement and a level
        // share) counts once; one on a key still connecting, not at all.
        d.established(b, 1, at(5000));
        let connecting = conns.insert(Conn::new(Link::Detached, 9, at(5000), 0, false));
        d.established(connecting, 9, at(5000));
        d.age(at(6000), &mut conns);
        assert_eq!(steady(&d), 2);
    }
}
