//! The server's seconds: one second of one process's stats ([`Second`]),
//! the loop a serving process takes them in ([`each_second`]), the sum of
//! several processes' ([`combine`]), and where they go: the stats line on
//! stderr and --stats-json ([`StatsOut`]), with the kernel's listen queue
//! counters ([`ListenCounters`]).

use std::fs::{File, OpenOptions};
use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::stats::{PushTotals, Totals};
use super::{Running, ServerConfig};
use crate::sys::proc;
use crate::sys::signals::{Reason, Stop};
use crate::units::{human, human_bytes};
use crate::usage::UsageError;

/// One second of stats, as printed and as written to --stats-json.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Second {
    pub(super) t: u64,
    pub(super) unix_s: u64,
    pub(super) connections: i64,
    pub(super) peak_connections: i64,
    pub(super) accepted_per_s: u64,
    pub(super) closed_per_s: u64,
    pub(super) requests_per_s: u64,
    pub(super) bytes_in_per_s: u64,
    pub(super) bytes_out_per_s: u64,
    pub(super) errors: u64,
    pub(super) listen_overflows: u64,
    pub(super) listen_drops: u64,
    /// Server processes running (several share the port).
    #[serde(default)]
    pub(super) processes: u64,
    /// A child's counters since it started, for the parent's --metrics
    /// (not in --stats-json: only children's lines carry them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) totals: Option<Totals>,
    /// --mode push: the second's messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) push: Option<PushSecond>,
}

/// One second of --mode push: messages due, sent on time, sent late (and
/// the latest, µs after its due time), dropped because a subscriber's
/// socket was full or the worker a period behind; subscribers now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PushSecond {
    pub due: u64,
    pub on_time: u64,
    pub late: u64,
    pub late_max_us: u64,
    pub skipped_full: u64,
    pub skipped_behind: u64,
    pub subscribers: i64,
}

impl PushSecond {
    pub(super) fn of(p: &PushTotals, late_max_us: u64, subscribers: i64) -> PushSecond {
        PushSecond {
            due: p.due,
            on_time: p.on_time,
            late: p.late,
            late_max_us,
            skipped_full: p.skipped_full,
            skipped_behind: p.skipped_behind,
            subscribers,
        }
    }

    fn add(&mut self, o: &PushSecond) {
        self.due += o.due;
        self.on_time += o.on_time;
        self.late += o.late;
        self.late_max_us = self.late_max_us.max(o.late_max_us);
        self.skipped_full += o.skipped_full;
        self.skipped_behind += o.skipped_behind;
        self.subscribers += o.subscribers;
    }

    fn line(&self) -> String {
        let sent = self.on_time + self.late;
        let mut s = format!(
            "  push due {}/s sent {}/s",
            human(self.due as f64),
            human(sent as f64)
        );
        if self.late > 0 {
            s += &format!(
                " late {} (up to {:.1} ms)",
                self.late,
                self.late_max_us as f64 / 1000.0
            );
        }
        let skipped = self.skipped_full + self.skipped_behind;
        if skipped > 0 {
            s += &format!(
                " skipped {skipped} (socket full {}, behind {})",
                self.skipped_full, self.skipped_behind
            );
        }
        s
    }
}

impl Second {
    /// Adds another second's rates (counters per second, not the gauges).
    pub(super) fn add_rates(&mut self, o: &Second) {
        self.t = self.t.max(o.t);
        self.unix_s = self.unix_s.max(o.unix_s);
        self.accepted_per_s += o.accepted_per_s;
        self.closed_per_s += o.closed_per_s;
        self.requests_per_s += o.requests_per_s;
        self.bytes_in_per_s += o.bytes_in_per_s;
        self.bytes_out_per_s += o.bytes_out_per_s;
        self.errors += o.errors;
        if let Some(p) = &o.push {
            let mine = self.push.get_or_insert_with(PushSecond::default);
            let subscribers = mine.subscribers;
            mine.add(p);
            // (A gauge: merge adds it, rates do not.)
            mine.subscribers = subscribers;
        }
    }

    /// Adds another process's second: its gauges and its rates.
    pub(super) fn merge(&mut self, o: &Second) {
        self.add_rates(o);
        self.connections += o.connections;
        self.peak_connections += o.peak_connections;
        if let (Some(mine), Some(p)) = (self.push.as_mut(), &o.push) {
            mine.subscribers += p.subscribers;
        }
    }

    pub(super) fn line(&self) -> String {
        format!(
            "{:>4}s  conns {} (peak {})  accepted {}/s  closed {}/s  requests {}/s  in {}/s  out {}/s  errors {}  listen overflows +{} drops +{}",
            self.t,
            self.connections,
            self.peak_connections,
            human(self.accepted_per_s as f64),
            human(self.closed_per_s as f64),
            human(self.requests_per_s as f64),
            human_bytes(self.bytes_in_per_s as f64),
            human_bytes(self.bytes_out_per_s as f64),
            self.errors,
            self.listen_overflows,
            self.listen_drops,
        ) + &self.push.as_ref().map_or(String::new(), PushSecond::line)
            + &if self.processes > 0 {
            format!("  processes {}", self.processes)
        } else {
            String::new()
        }
    }
}

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What wakes a serving process's loop.
pub(super) enum Wake {
    /// A second's stats: gauges now, rates since the last second (the
    /// listen counters are left to the caller).
    Second(Box<Second>),
    /// Anything else that came first: a signal, a child's line, a worker's
    /// word that its process fills up.
    Other(Reason),
}

/// Serves until `on` answers false or a worker ends on its own: calls `on`
/// with each second's stats, counted from `started`, and with every other
/// wake-up in between. Returns the counters of the last second (what a
/// failed stop leaves to report).
pub(super) fn each_second(
    server: &Running,
    stop: &Stop,
    started: Instant,
    mut on: impl FnMut(Wake) -> Result<bool>,
) -> Result<Totals> {
    let mut last = Totals::default();
    let mut tick = 1;
    loop {
        let due = started + Duration::from_secs(tick);
        if let Some(reason) = stop.wait_reason(Some(due)) {
            if on(Wake::Other(reason))? {
                continue;
            }
            break;
        }
        if server.worker_exited() {
            break;
        }
        let totals = server.totals();
        let sec = server.second(tick, &totals, &last);
        last = totals;
        tick += 1;
        if !on(Wake::Second(Box::new(sec)))? {
            break;
        }
    }
    Ok(last)
}

/// One second of several processes: their gauges and rates summed.
pub(super) fn combine<'a>(parts: impl Iterator<Item = &'a Second>) -> Second {
    let mut s = Second::default();
    for p in parts {
        s.merge(p);
    }
    s
}

/// The kernel's listen queue overflows and drops (TcpExt, this network
/// namespace, every listener): read at the start and once a second.
pub(super) struct ListenCounters {
    start: (u64, u64),
    last: (u64, u64),
}

impl ListenCounters {
    pub(super) fn read() -> ListenCounters {
        let now = proc::listen_counters().unwrap_or_default();
        ListenCounters {
            start: now,
            last: now,
        }
    }

    /// Sets the second's overflows and drops: since the last reading, up to
    /// `now` (no change when it could not be read).
    pub(super) fn second(&mut self, now: Option<(u64, u64)>, sec: &mut Second) {
        let now = now.unwrap_or(self.last);
        sec.listen_overflows = now.0.saturating_sub(self.last.0);
        sec.listen_drops = now.1.saturating_sub(self.last.1);
        self.last = now;
    }

    /// The reading the start counts from.
    pub(super) fn start(&self) -> (u64, u64) {
        self.start
    }

    /// Overflows and drops since the start, for the summary.
    pub(super) fn since_start(&self) -> (u64, u64) {
        let now = proc::listen_counters().unwrap_or(self.start);
        (now.0 - self.start.0, now.1 - self.start.1)
    }
}

/// Where the seconds go: a line on stderr (with --stats, or on a terminal)
/// and one JSON object per line in --stats-json.
pub(super) struct StatsOut {
    json: Option<File>,
    show: bool,
}

impl StatsOut {
    /// Opens --stats-json (appending).
    pub(super) fn open(cfg: &ServerConfig) -> Result<StatsOut> {
        let json = match &cfg.stats_json {
            Some(p) => Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| {
                        anyhow::Error::from(UsageError(format!(
                            "--stats-json {}: {e}",
                            p.display()
                        )))
                    })?,
            ),
            None => None,
        };
        Ok(StatsOut {
            json,
            show: cfg.stats || io::stderr().is_terminal(),
        })
    }

    pub(super) fn emit(&mut self, sec: &Second) {
        // JSON first: a reader that sees the line on stderr finds the file
        // already written.
        if let Some(f) = self.json.as_mut() {
            if let Err(e) = write_json_line(f, sec) {
                // Keep serving and keep the summary: only the file is lost.
                eprintln!("throng: {e:#}; no more --stats-json lines");
                self.json = None;
            }
        }
        if self.show {
            eprintln!("{}", sec.line());
        }
    }
}

fn write_json_line(f: &mut File, sec: &Second) -> Result<()> {
    let mut line = serde_json::to_vec(sec)?;
    line.push(b'\n');
    f.write_all(&line).context("writing --stats-json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(t: u64, connections: i64, requests: u64) -> Second {
        Second {
            t,
            unix_s: 1000 + t,
            connections,
            peak_connections: connections + 1,
            accepted_per_s: 1,
            closed_per_s: 2,
            requests_per_s: requests,
            bytes_in_per_s: 10,
            bytes_out_per_s: 20,
            errors: 1,
            listen_overflows: 7,
            listen_drops: 7,
            processes: 7,
            totals: None,
            push: None,
        }
    }

    #[test]
    fn processes_combine_gauges_and_rates() {
        let s = combine([second(3, 5, 100), second(4, 6, 50)].iter());
        assert_eq!((s.t, s.unix_s), (4, 1004));
        assert_eq!((s.connections, s.peak_connections), (11, 13));
        assert_eq!((s.accepted_per_s, s.closed_per_s), (2, 4));
        assert_eq!(
            (s.requests_per_s, s.bytes_in_per_s, s.bytes_out_per_s),
            (150, 20, 40)
        );
        assert_eq!(s.errors, 2);
        // The listen counters are the host's, set by the caller.
        assert_eq!((s.listen_overflows, s.listen_drops, s.processes), (0, 0, 0));
    }

    #[test]
    fn rates_add_without_the_gauges() {
        let mut s = second(3, 5, 100);
        s.add_rates(&second(4, 6, 50));
        assert_eq!((s.connections, s.peak_connections), (5, 6));
        assert_eq!((s.t, s.requests_per_s, s.errors), (4, 150, 2));
    }
}
