//! This host's connect() curve (`throng tune --measure`): the rate of
//! connect() from one source to one destination on loopback against how
//! many connections that pair already holds, and the knee past which it
//! crawls. Kept in `$XDG_CACHE_HOME/throng/connect-curve.json` (or
//! `~/.cache/throng/`) with the kernel and the port range it was measured
//! under; while both are unchanged the source plan keeps each pair under
//! the knee measured ([`crate::sys::sources::fast_per_pair`]) instead of
//! the default quarter of the range.
//!
//! The pair's connections are held on the connecting side only: each
//! accepted one is closed at once, so a pair of N connections costs N fds
//! (the client's sockets keep their ports, in CLOSE_WAIT, which is all
//! the port search sees).

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::sys::{limits, proc, sources};

/// Connections measured together, one point of the curve: a fiftieth of
/// the range, from 50 to 500.
pub fn bucket(ports: u64) -> u64 {
    (ports / 50).clamp(50, 500)
}

/// A bucket is slow when its median connect() takes this many times the
/// first buckets' median: past the knee the kernel walks a run of used
/// ports in every call (20 us become 600 us and more on 6.18); a hiccup
/// of the machine moves a few calls, not a bucket's median.
const SLOW: f64 = 5.0;

/// Slow buckets in a row that confirm the knee (then the measure stops).
const CONFIRM: usize = 3;

/// The longest a measure takes.
const BUDGET: Duration = Duration::from_secs(30);

/// One point: the pair held `connections` when the bucket ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub connections: u64,
    pub per_second: f64,
    pub median_us: f64,
    pub p99_us: f64,
}

/// A measured curve, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    /// `kernel.osrelease` when it was measured.
    pub kernel: String,
    /// `net.ipv4.ip_local_port_range` when it was measured.
    pub port_range: [u32; 2],
    pub measured_unix_s: u64,
    /// Connections of one pair before the first slow bucket; None when
    /// none was slow up to `measured_up_to`.
    pub knee: Option<u64>,
    pub measured_up_to: u64,
    /// Connections a point measures ([`bucket`]).
    #[serde(default)]
    pub bucket: u64,
    /// What stopped the measure before the knee, if anything: the fd
    /// limit, the share of the range measured, the time budget.
    pub stopped_by: Option<String>,
    pub points: Vec<Point>,
}

impl Curve {
    /// Connections a pair may hold with connect() still fast: the knee
    /// less a tenth, or every connection measured when none was slow;
    /// at most three quarters of the range (the rest is headroom for
    /// ports in TIME_WAIT and other sockets of the host).
    pub fn fast_per_pair(&self) -> u64 {
        let ports = u64::from(self.port_range[1].saturating_sub(self.port_range[0]) + 1);
        let fast = match self.knee {
            Some(k) => k - k / 10,
            None => self.measured_up_to,
        };
        fast.min(ports * 3 / 4).max(1)
    }

    /// Whether it was measured under this host's kernel and port range.
    pub fn applies_here(&self) -> bool {
        let (lo, hi) = sources::port_range();
        self.port_range == [lo, hi] && Some(self.kernel.as_str()) == kernel().as_deref()
    }

    /// The plan's reason in words.
    pub fn basis(&self) -> String {
        match self.knee {
            Some(k) => format!(
                "connect() measured on this host slows past {k} connections per pair \
                 (throng tune --measure)"
            ),
            None => format!(
                "connect() measured on this host stays fast up to {} connections per pair \
                 (throng tune --measure)",
                self.measured_up_to
            ),
        }
    }
}

fn kernel() -> Option<String> {
    proc::sysctl("kernel.osrelease")
}

/// Where the curve is kept.
pub fn path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("throng").join("connect-curve.json"))
}

/// The curve kept for this host, when it applies to its kernel and port
/// range.
pub fn stored() -> Option<Curve> {
    let text = std::fs::read_to_string(path()?).ok()?;
    serde_json::from_str::<Curve>(&text)
        .ok()
        .filter(Curve::applies_here)
}

/// Keeps `c` for the plans of later runs; returns where.
pub fn store(c: &Curve) -> anyhow::Result<PathBuf> {
    let p = path().ok_or_else(|| anyhow::anyhow!("neither XDG_CACHE_HOME nor HOME is set"))?;
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Written beside it and renamed over it: a reader sees the old curve
    // or the new, never half of one.
    let tmp = p.with_extension(format!("json.{}", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(c)?)?;
    std::fs::rename(&tmp, &p)?;
    Ok(p)
}

/// Measures the curve: connect() from 127.0.0.1 to a listener of its own
/// on 127.0.0.1, bucket by bucket, until the knee is confirmed, 90% of the
/// port range or the fd limit is reached, or [`BUDGET`] is spent.
pub fn measure(mut progress: impl FnMut(&Point)) -> anyhow::Result<Curve> {
    let (lo, hi) = sources::port_range();
    let ports = u64::from(hi - lo + 1);
    let fds = limits::raise_nofile().map_or(1024, |f| f.soft);
    let by_fds = fds.saturating_sub(256);
    let by_range = ports * 9 / 10;
    let most = by_fds.min(by_range);
    let step = bucket(ports);
    // A backlog as deep as the host allows (std's is 128): an acceptor
    // that falls behind must not drop a SYN, whose retransmit would cost
    // its connect() a second.
    let listener = {
        use socket2::{Domain, Socket, Type};
        let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
        s.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())?;
        s.listen(65_535)?;
        TcpListener::from(s)
    };
    let to: SocketAddr = listener.local_addr()?;
    // Accepted connections are closed at once: only the connecting side
    // holds fds. A connection made once `done` is set ends the acceptor.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = done.clone();
    let acceptor = std::thread::spawn(move || {
        for s in listener.incoming() {
            if s.is_err() || stop.load(std::sync::atomic::Ordering::Relaxed) {
                return;
            }
        }
    });
    let started = Instant::now();
    let mut held: Vec<TcpStream> = Vec::with_capacity(most as usize);
    let mut points = Vec::new();
    let mut base: Option<f64> = None;
    let mut slow_run = 0;
    let mut knee = None;
    let mut stopped_by = None;
    let mut times = Vec::with_capacity(step as usize);
    while knee.is_none() || slow_run < CONFIRM {
        if held.len() as u64 + step > most {
            stopped_by = Some(if most == by_fds {
                format!("the fd limit ({fds})")
            } else {
                format!("90% of the {ports}-port range")
            });
            break;
        }
        if started.elapsed() > BUDGET {
            stopped_by = Some(format!("the time budget ({} s)", BUDGET.as_secs()));
            break;
        }
        times.clear();
        let t0 = Instant::now();
        for _ in 0..step {
            let t = Instant::now();
            held.push(TcpStream::connect(to)?);
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let secs = t0.elapsed().as_secs_f64();
        times.sort_by(f64::total_cmp);
        let p = Point {
            connections: held.len() as u64,
            per_second: step as f64 / secs.max(1e-9),
            median_us: times[times.len() / 2],
            p99_us: times[times.len() * 99 / 100],
        };
        progress(&p);
        // The first two buckets set the base (the lower of their medians).
        if points.len() < 2 {
            base = Some(base.map_or(p.median_us, |b: f64| b.min(p.median_us)));
        } else if p.median_us > SLOW * base.unwrap_or(p.median_us) {
            slow_run += 1;
            knee.get_or_insert(p.connections - step);
        } else if knee.is_some() {
            // A hiccup, not the knee: measure on.
            knee = None;
            slow_run = 0;
        }
        points.push(p);
    }
    let measured_up_to = held.len() as u64;
    drop(held);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    if TcpStream::connect(to).is_ok() {
        let _ = acceptor.join();
    }
    Ok(Curve {
        kernel: kernel().unwrap_or_default(),
        port_range: [lo, hi],
        measured_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        knee,
        measured_up_to,
        bucket: step,
        stopped_by: if knee.is_some() { None } else { stopped_by },
        points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(knee: Option<u64>, up_to: u64) -> Curve {
        Curve {
            kernel: kernel().unwrap_or_default(),
            port_range: {
                let (lo, hi) = sources::port_range();
                [lo, hi]
            },
            measured_unix_s: 0,
            knee,
            measured_up_to: up_to,
            bucket: 500,
            stopped_by: None,
            points: Vec::new(),
        }
    }

    #[test]
    fn a_pair_is_kept_under_the_knee_measured() {
        let mut k = curve(Some(14_000), 15_500);
        k.port_range = [32768, 60999];
        assert_eq!(k.fast_per_pair(), 12_600);
        // Never slow: every connection measured was fast, up to three
        // quarters of the range.
        let mut c = curve(None, 19_500);
        c.port_range = [32768, 60999];
        assert_eq!(c.fast_per_pair(), 19_500);
        c.measured_up_to = 25_000;
        assert_eq!(c.fast_per_pair(), 21_174);
        assert!(curve(None, 1).applies_here());
        let mut other = curve(Some(14_000), 15_500);
        other.port_range = [1, 2];
        assert!(!other.applies_here());
        other = curve(Some(14_000), 15_500);
        other.kernel = "2.6.32".into();
        assert!(!other.applies_here());
    }
}
