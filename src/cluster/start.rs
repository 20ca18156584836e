//! The controller's side of a `throng cluster` start, over the open ssh
//! sessions: every host's report gathered ([`HostReport`]: what it is,
//! its plan for its share), its clock offset measured (several round
//! trips, the one with the shortest round trip kept), then every host
//! released together (`go`). A host that cannot take its share, runs
//! another throng, or whose clock is off by more than --max-clock-offset
//! stops the run before anything connects, named with the fix.

use std::io::Write;
use std::time::{Duration, Instant};

use crate::child::{ChildLine, Children, HostReport};
use crate::sys::signals::{Reason, Stop};

use super::host::{unix_now, CLOCK, GO, STOP};
use super::ssh::ClusterConfig;

/// Clock readings per host; the one with the shortest round trip is kept.
const ROUNDS: usize = 5;

/// How the start went.
pub enum Start {
    /// Every host released; each one's measured clock offset.
    Go(Vec<Offset>),
    /// The run is refused before any load: why, host by host.
    Refused(String),
    /// A signal came first.
    Interrupted,
}

/// A host's clock against the controller's, from its best round trip.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Offset {
    /// The host's clock minus the controller's, seconds.
    pub offset_s: f64,
    /// The round trip it was measured over: the offset is known to half.
    pub rtt_s: f64,
}

/// The best of a host's readings `(sent, its clock, came back)` (the
/// controller's clock around the host's): the one of the shortest round
/// trip, the host's clock against the round trip's middle.
pub fn best_offset(readings: &[(f64, f64, f64)]) -> Option<Offset> {
    readings
        .iter()
        .map(|&(t0, remote, t1)| Offset {
            offset_s: remote - (t0 + t1) / 2.0,
            rtt_s: t1 - t0,
        })
        .min_by(|a, b| a.rtt_s.total_cmp(&b.rtt_s))
}

/// Gathers the hosts' reports, measures their clocks and releases them
/// together; on a refusal or a signal every host is told to stop.
pub fn start(a: &ClusterConfig, stop: &Stop, children: &mut Children) -> Start {
    let got = gather(a, stop, children).and_then(|()| clocks(a, stop, children));
    match got {
        Ok(offsets) => {
            for i in 0..a.hosts.len() {
                children.say(i, GO);
            }
            outln!("  released: {} hosts, together", a.hosts.len());
            Start::Go(offsets)
        }
        Err(e) => {
            for i in 0..a.hosts.len() {
                children.say(i, STOP);
                children.close_stdin(i);
            }
            e
        }
    }
}

/// Waits for every host's report (for --start-in at most); each one
/// shown, and refused when it cannot take its share or is another
/// throng.
fn gather(a: &ClusterConfig, stop: &Stop, children: &mut Children) -> Result<(), Start> {
    let n = a.hosts.len();
    let mut reports: Vec<Option<HostReport>> = vec![None; n];
    let mut ended = vec![false; n];
    let deadline = Instant::now() + a.start_in;
    while (0..n).any(|i| reports[i].is_none() && !ended[i]) {
        match stop.wait_reason(Some(deadline)) {
            Some(Reason::Signal) => return Err(Start::Interrupted),
            Some(Reason::ChildExit(i)) => ended[i] = true,
            Some(Reason::ChildLine(i, line)) => {
                if let Ok(ChildLine::HostReady(r)) = serde_json::from_str(&line) {
                    reports[i] = Some(*r);
                }
            }
            Some(_) => {}
            None => break,
        }
    }
    let mut out = crate::console::stdout();
    let mut refused = Vec::new();
    let here = crate::BUILD;
    for (i, r) in reports.iter().enumerate() {
        let host = a.hosts[i].name();
        let Some(r) = r else {
            let why = match ended[i] {
                true => format!("ended before it was ready: {}", children.last_error(i)),
                false => format!(
                    "was not ready within --start-in {:?} (ssh slow to connect, or the host \
                     loaded): give a longer --start-in",
                    a.start_in
                ),
            };
            refused.push(format!("host {host} {why}"));
            continue;
        };
        let _ = writeln!(
            out,
            "host {host}: {} {}, {}, throng {}, {} process{}",
            r.hostname,
            r.arch,
            r.libc,
            r.version,
            r.processes,
            if r.processes == 1 { "" } else { "es" }
        );
        for l in r.plan.iter().flat_map(|p| p.lines()) {
            let _ = writeln!(out, "    {}", l.trim_start());
        }
        if r.version != here {
            refused.push(format!(
                "host {host} runs throng {}, this is throng {here}: results of different \
                 builds do not merge; use --copy-binary, or install this build there",
                r.version
            ));
        }
        for p in &r.problems {
            refused.push(format!("host {host} cannot take its share: {p}"));
        }
    }
    let _ = out.flush();
    match refused.is_empty() {
        true => Ok(()),
        false => Err(Start::Refused(refused.join("\n  "))),
    }
}

/// Each host's clock offset, shown; refused past --max-clock-offset.
fn clocks(a: &ClusterConfig, stop: &Stop, children: &mut Children) -> Result<Vec<Offset>, Start> {
    let n = a.hosts.len();
    let mut readings: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); n];
    for _ in 0..ROUNDS {
        let mut sent = vec![None; n];
        for (i, s) in sent.iter_mut().enumerate() {
            let t0 = unix_now();
            if children.say(i, CLOCK) {
                *s = Some(t0);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while sent.iter().any(Option::is_some) {
            match stop.wait_reason(Some(deadline)) {
                Some(Reason::Signal) => return Err(Start::Interrupted),
                Some(Reason::ChildLine(i, line)) => {
                    let t1 = unix_now();
                    if let (Ok(ChildLine::Clock(remote)), Some(t0)) =
                        (serde_json::from_str(&line), sent[i].take())
                    {
                        readings[i].push((t0, remote, t1));
                    }
                }
                Some(_) => {}
                None => break,
            }
        }
    }
    let mut offsets = Vec::new();
    let mut refused = Vec::new();
    let mut shown = Vec::new();
    let bound = a.max_clock_offset.as_secs_f64();
    for (i, r) in readings.iter().enumerate() {
        let host = a.hosts[i].name();
        let Some(o) = best_offset(r) else {
            refused.push(format!(
                "host {host} did not answer a clock reading over its session within 5 s"
            ));
            continue;
        };
        shown.push(format!(
            "{host} {:+.1} ms (round trip {:.1} ms)",
            o.offset_s * 1e3,
            o.rtt_s * 1e3
        ));
        // What the round trip leaves unknown counts against the host.
        if o.offset_s.abs() - o.rtt_s / 2.0 > bound {
            refused.push(format!(
                "host {host}'s clock is {:.3} s {} this one's (more than --max-clock-offset \
                 {:?}): its per-second figures would not line up with the others'; synchronise \
                 its clock (chrony or systemd-timesyncd; `chronyc makestep` steps it now), or \
                 allow it with --max-clock-offset {:.0}ms",
                o.offset_s.abs(),
                if o.offset_s > 0.0 {
                    "ahead of"
                } else {
                    "behind"
                },
                a.max_clock_offset,
                (o.offset_s.abs() * 1e3 * 1.2).ceil()
            ));
        }
        offsets.push(o);
    }
    outln!(
        "  clock offsets (best of {ROUNDS} round trips over ssh): {}",
        shown.join(", ")
    );
    match refused.is_empty() {
        true => Ok(offsets),
        false => Err(Start::Refused(refused.join("\n  "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shortest_round_trip_gives_the_offset() {
        // The host is 2 s ahead; the second reading had the quickest trip.
        let r = [(10.0, 12.3, 10.4), (11.0, 13.01, 11.02), (12.0, 14.5, 12.6)];
        let o = best_offset(&r).unwrap();
        assert!((o.offset_s - 2.0).abs() < 1e-9, "{o:?}");
        assert!((o.rtt_s - 0.02).abs() < 1e-9);
        assert_eq!(best_offset(&[]), None);
    }
}
