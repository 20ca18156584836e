//! The open-loop arrival process of one worker: absolute intended send times
//! for its share of the rate, constant or Poisson, following a schedule of
//! rates. Each worker has its own seeded generator, so the workers together
//! offer the scenario's rate without sharing anything, and a run repeats.

use rand::SeedableRng;
use rand_distr::{Distribution, Exp1};
use rand_pcg::Pcg64Mcg;

use crate::domain::Arrivals;
use crate::scenario::{area, level_at, Phase};

/// Gap used to step over a phase whose rate is zero.
const IDLE_STEP: f64 = 0.001;

pub struct Pacer {
    phases: Vec<Phase>,
    /// This worker's share of the rate.
    share: f64,
    kind: Arrivals,
    rng: Pcg64Mcg,
    /// Seconds since the traffic start of the next arrival.
    next: f64,
}

impl Pacer {
    pub fn new(phases: Vec<Phase>, share: f64, kind: Arrivals, seed: u64) -> Pacer {
        let mut p = Pacer {
            phases,
            share,
            kind,
            rng: Pcg64Mcg::seed_from_u64(seed),
            next: 0.0,
        };
        // The first arrival is one gap in, as the rest.
        p.next = p.gap(0.0);
        p
    }

    /// The rate asked of this worker at `t`.
    fn rate(&self, t: f64) -> f64 {
        level_at(&self.phases, t) * self.share
    }

    fn gap(&mut self, t: f64) -> f64 {
        let rate = self.rate(t);
        if rate <= 0.0 {
            return IDLE_STEP;
        }
        match self.kind {
            Arrivals::Constant => 1.0 / rate,
            Arrivals::Poisson => {
                let e: f64 = Exp1.sample(&mut self.rng);
                e / rate
            }
        }
    }

    /// Seconds (since the traffic start) of the next arrival.
    pub fn peek(&self) -> f64 {
        self.next
    }

    /// Takes the next arrival. Returns None when it only stepped over an
    /// idle stretch (rate zero) and there is nothing to send.
    pub fn take(&mut self) -> Option<f64> {
        let t = self.next;
        let idle = self.rate(t) <= 0.0;
        self.next = t + self.gap(t);
        (!idle).then_some(t)
    }

    /// Changes the rate from now on (`rate R` on --control): arrivals not
    /// taken yet follow the new rate (see [`Pacing::set_rate`], which
    /// takes those due before the change first).
    ///
    /// [`Pacing::set_rate`]: super::pacing::Pacing::set_rate
    /// The next arrival comes within one gap of the new rate from `t`
    /// (seconds since the traffic start): one due a gap of the old, slow
    /// rate away (2 s at 1/s over two workers) would hold a raised rate
    /// back that long.
    pub fn set_rate(&mut self, total_rate: f64, t: f64) {
        // Past its last phase a schedule stays at that phase's end level.
        self.phases = vec![Phase {
            seconds: 1e-9,
            from: total_rate,
            to: total_rate,
        }];
        let sooner = t + self.gap(t);
        self.next = self.next.min(sooner);
    }

    /// Steps over the arrivals due by `t` (seconds since the traffic
    /// start) without taking them one by one: how many there were (for
    /// Poisson arrivals, as many as the rate asks for then). A worker far
    /// behind a high rate has millions.
    pub fn skip_until(&mut self, t: f64) -> u64 {
        if self.next > t {
            return 0;
        }
        let asked = area(&self.phases, self.next, t) * self.share;
        let first = u64::from(self.rate(self.next) > 0.0);
        self.next = t + self.gap(t);
        asked as u64 + first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(rate: f64, secs: f64) -> Vec<Phase> {
        vec![Phase {
            seconds: secs,
            from: rate,
            to: rate,
        }]
    }

    #[test]
    fn constant_arrivals_are_even() {
        let mut p = Pacer::new(flat(1000.0, 1.0), 1.0, Arrivals::Constant, 1);
        let a = p.take().unwrap();
        let b = p.take().unwrap();
        assert!((b - a - 0.001).abs() < 1e-12);
    }

    #[test]
    fn shares_add_up() {
        let mut p = Pacer::new(flat(10_000.0, 1.0), 0.5, Arrivals::Poisson, 7);
        let mut n = 0;
        while p.peek() < 10.0 {
            n += p.take().is_some() as u32;
        }
        // 5,000/s for 10 s.
        assert!((48_500..51_500).contains(&n), "{n}");
    }

    /// Kolmogorov–Smirnov: the gaps at 10k/s follow the exponential law.
    #[test]
    fn poisson_gaps_pass_kolmogorov_smirnov() {
        let rate = 10_000.0;
        let mut p = Pacer::new(flat(rate, 100.0), 1.0, Arrivals::Poisson, 42);
        let mut last = 0.0;
        let mut gaps: Vec<f64> = (0..20_000)
            .map(|_| {
                let t = p.take().unwrap();
                let g = t - last;
                last = t;
                g
            })
            .collect();
        gaps.sort_by(f64::total_cmp);
        let n = gaps.len() as f64;
        let d = gaps
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let cdf = 1.0 - (-rate * g).exp();
                ((i as f64 + 1.0) / n - cdf)
                    .abs()
                    .max((cdf - i as f64 / n).abs())
            })
            .fold(0.0, f64::max);
        // Critical value at the 1% level: 1.63 / sqrt(n).
        assert!(d < 1.63 / n.sqrt(), "D = {d}");
    }

    #[test]
    fn ramp_reaches_its_end_rate() {
        let phases = vec![Phase {
            seconds: 2.0,
            from: 1000.0,
            to: 3000.0,
        }];
        let mut p = Pacer::new(phases, 1.0, Arrivals::Constant, 1);
        let mut last_second = 0;
        while p.peek() < 2.0 {
            if p.take().is_some_and(|t| t >= 1.9) {
                last_second += 1;
            }
        }
        // Between 1.9 and 2.0 s the rate is ~2,900/s: ~290 arrivals.
        assert!((280..=300).contains(&last_second), "{last_second}");
    }

    #[test]
    fn zero_rate_phase_sends_nothing() {
        let phases = vec![
            Phase {
                seconds: 1.0,
                from: 0.0,
                to: 0.0,
            },
            Phase {
                seconds: 1.0,
                from: 100.0,
                to: 100.0,
            },
        ];
        let mut p = Pacer::new(phases, 1.0, Arrivals::Constant, 1);
        let mut sent = Vec::new();
        while p.peek() < 2.0 {
            if let Some(t) = p.take() {
                sent.push(t);
            }
        }
        assert!(sent.iter().all(|&t| t >= 1.0));
        assert!((99..=101).contains(&sent.len()));
    }

    /// A rate raised by --control starts within a gap of its own, not at
    /// the arrival the old rate planned (2 s away at 1/s over two
    /// workers).
    #[test]
    fn a_raised_rate_starts_within_its_own_gap() {
        let mut p = Pacer::new(flat(1.0, 1.0), 0.5, Arrivals::Constant, 1);
        assert_eq!(p.peek(), 2.0);
        p.set_rate(5000.0, 0.1);
        assert!(
            (p.peek() - (0.1 + 1.0 / 2500.0)).abs() < 1e-12,
            "{}",
            p.peek()
        );
        // Lowered, the arrival already planned stays (it is sooner).
        let planned = p.peek();
        p.set_rate(1.0, 0.1);
        assert_eq!(p.peek(), planned);
    }
}
