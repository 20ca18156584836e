//! `--start-barrier DIR`: the slices of one run agree on their start
//! without a time given. Each writes `DIR/.start-RUN/K` and waits until
//! all N are there; all then start `MARGIN` after the newest file's
//! modification time. Every slice reads the same times from the shared
//! directory (a Kubernetes Job's results volume), so they agree whatever
//! order they came in; their wall clocks must agree, as for --start-at.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use crate::domain::Segment;
use crate::sys::signals::Stop;

/// After the last slice arrived, time for every other to see its file (a
/// network file system caches attributes for seconds) before the start.
pub const MARGIN: Duration = Duration::from_secs(10);

/// How long a slice waits for the others (pods pulling images, nodes
/// scaling up) before it gives up.
pub const PATIENCE: Duration = Duration::from_secs(15 * 60);

/// How often the directory is read: a shared file system gives no
/// notification across hosts.
const POLL: Duration = Duration::from_millis(250);

/// Arrives at the barrier of run `run` in `dir` as slice `seg`, waits for
/// the others; the start, Unix seconds. None when a signal came first.
pub fn wait(dir: &Path, run: &str, seg: Segment, stop: &Stop) -> Result<Option<f64>> {
    let here = dir.join(format!(".start-{run}"));
    std::fs::create_dir_all(&here)
        .with_context(|| format!("--start-barrier: creating {}", here.display()))?;
    let mine = here.join(seg.index.to_string());
    std::fs::write(&mine, format!("{}/{}\n", seg.index, seg.count))
        .with_context(|| format!("--start-barrier: writing {}", mine.display()))?;
    let given_up = Instant::now() + PATIENCE;
    loop {
        let mut newest = 0f64;
        let mut missing = Vec::new();
        for k in 1..=seg.count {
            match std::fs::metadata(here.join(k.to_string())).and_then(|m| m.modified()) {
                Ok(t) => newest = newest.max(unix(t)),
                Err(_) => missing.push(k),
            }
        }
        if missing.is_empty() {
            return Ok(Some(newest + MARGIN.as_secs_f64()));
        }
        if Instant::now() >= given_up {
            anyhow::bail!(
                "--start-barrier: slices {} of {} did not arrive in {} s at {} (each slice \
                 writes its number there: are they all started, with the same --run-id and \
                 this directory shared?)",
                list(&missing),
                seg.count,
                PATIENCE.as_secs(),
                here.display()
            );
        }
        if stop.wait_until(Instant::now() + POLL) {
            return Ok(None);
        }
    }
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn list(ks: &[u64]) -> String {
    let shown: Vec<String> = ks.iter().take(10).map(u64::to_string).collect();
    let more = if ks.len() > 10 {
        format!(" and {} more", ks.len() - 10)
    } else {
        String::new()
    };
    format!("{}{more}", shown.join(", "))
}
