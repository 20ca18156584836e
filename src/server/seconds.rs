//! The server's seconds: the loop a serving process takes them in
//! ([`each_second`]), a child's line to its parent ([`ChildSecond`]), and
//! where they go: the stats line on stderr and --stats-json ([`StatsOut`]),
//! with the kernel's listen queue counters ([`ListenCounters`]). A second's
//! figures are [`Second`], the type the --stats-json line is written and
//! read as.

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

pub(crate) use crate::outcome::server_second::{PushSecond, ServerSecond as Second};

/// A child process's stats line to its parent: its second, and its
/// counters since it started (for the parent's --metrics).
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub(super) struct ChildSecond {
    #[serde(flatten)]
    pub(super) sec: Second,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) totals: Option<Totals>,
}

/// The --mode push part of a second: the counters since the last second,
/// the latest send of the second, the subscribers now.
pub(super) fn push_second(p: &PushTotals, late_max_us: u64, subscribers: i64) -> PushSecond {
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

fn push_line(p: &PushSecond) -> String {
    let sent = p.on_time + p.late;
    let mut s = format!(
        "  push due {}/s sent {}/s",
        human(p.due as f64),
        human(sent as f64)
    );
    if p.late > 0 {
        s += &format!(
            " late {} (up to {:.1} ms)",
            p.late,
            p.late_max_us as f64 / 1000.0
        );
    }
    let skipped = p.skipped_full + p.skipped_behind;
    if skipped > 0 {
        s += &format!(
            " skipped {skipped} (socket full {}, behind {})",
            p.skipped_full, p.skipped_behind
        );
    }
    s
}

/// The stats line on stderr.
pub(super) fn line(sec: &Second) -> String {
    format!(
        "{:>4}s  conns {} (peak {})  accepted {}/s  closed {}/s  requests {}/s  in {}/s  out {}/s  errors {}  listen overflows +{} drops +{}",
        sec.t,
        sec.connections,
        sec.peak_connections,
        human(sec.accepted_per_s as f64),
        human(sec.closed_per_s as f64),
        human(sec.requests_per_s as f64),
        human_bytes(sec.bytes_in_per_s as f64),
        human_bytes(sec.bytes_out_per_s as f64),
        sec.errors,
        sec.listen_overflows,
        sec.listen_drops,
    ) + &sec.push.as_ref().map_or(String::new(), push_line)
        + &if sec.processes > 0 {
        format!("  processes {}", sec.processes)
    } else {
        String::new()
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
                errln!("throng: {e:#}; no more --stats-json lines");
                self.json = None;
            }
        }
        if self.show {
            errln!("{}", line(sec));
        }
    }
}

fn write_json_line(f: &mut File, sec: &Second) -> Result<()> {
    let mut line = serde_json::to_vec(sec)?;
    line.push(b'\n');
    f.write_all(&line).context("writing --stats-json")
}
