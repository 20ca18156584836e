//! A metrics endpoint for Prometheus, over plain HTTP, and the helpers
//! that encode families: what the client's and the server's exporters
//! (`report::prometheus`, `server::prometheus`) share, below both.
//!
//! [`Endpoint`] binds the address it is given, and only that, and serves
//! `GET /metrics` with std's listener (404 for any other path, 405 for any
//! other method; there is nothing else to ask). One thread accepts; each
//! scrape is answered on a thread of its own, at most [`MAX_SCRAPES`] at
//! once, within [`REQUEST_DEADLINE`] for the whole request (read, encode,
//! write): a peer that sends a byte a second, or reads none, holds only
//! its own thread, and only until the deadline.
//! The figures are encoded at each scrape by the `prometheus-client`
//! crate's text encoder, through the collectors of a [`Registry`]. That
//! encoder writes OpenMetrics; the response is Prometheus' text format
//! 0.0.4 unless the scraper's Accept header asks for OpenMetrics
//! ([`to_text_format`]): some tools (Debian's promtool 2.42, `check
//! metrics`) read only the older one.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Result;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use prometheus_client::registry::{Registry, Unit};

use crate::usage::UsageError;

/// The Prometheus text format's content type.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// OpenMetrics' content type.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// A request's head is read up to this size.
const MAX_HEAD: usize = 8 * 1024;
/// A request, from its accept to the last byte of the answer, ends within
/// this: Prometheus' own scrape timeout is 10 s by default, and an answer
/// is a few kB encoded in a millisecond.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Scrapes answered at once; one more is told 503 at once and closed.
pub const MAX_SCRAPES: usize = 16;

/// A bound metrics endpoint, not serving yet.
pub struct Endpoint {
    listener: TcpListener,
    /// The address bound (the port chosen, for port 0).
    pub addr: SocketAddr,
}

impl Endpoint {
    /// Binds `addr` for `--metrics`. A failure is a usage error (exit 2)
    /// that names the address and what to change.
    pub fn bind(addr: SocketAddr) -> Result<Endpoint> {
        let listener = TcpListener::bind(addr).map_err(|e| {
            let fix = match e.kind() {
                io::ErrorKind::AddrInUse => {
                    "something listens there already: give another port (or port 0 for a free \
                     one), or stop what holds it (`ss -ltnp` names it)"
                        .to_string()
                }
                io::ErrorKind::AddrNotAvailable => {
                    "that address is not one of this host's: give one it has (`ip -br addr`), \
                     e.g. 127.0.0.1:9464"
                        .to_string()
                }
                io::ErrorKind::PermissionDenied => format!(
                    "a port below 1024 needs root or CAP_NET_BIND_SERVICE: give a higher one, \
                     e.g. {}:9464",
                    addr.ip()
                ),
                _ => "give another ADDR:PORT, e.g. 127.0.0.1:9464".to_string(),
            };
            anyhow::Error::from(UsageError(format!(
                "--metrics {addr}: cannot listen there ({e}); {fix}"
            )))
        })?;
        let addr = listener.local_addr()?;
        Ok(Endpoint { listener, addr })
    }

    /// The line that tells people and scripts where to scrape.
    pub fn banner(&self) -> String {
        format!("metrics on http://{}/metrics (Prometheus)", self.addr)
    }

    /// Serves `registry` until the process ends: a thread that accepts,
    /// and a thread per scrape (at most [`MAX_SCRAPES`]).
    pub fn serve(self, registry: Registry) -> io::Result<()> {
        let registry = Arc::new(registry);
        let busy = Arc::new(AtomicUsize::new(0));
        thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                for conn in self.listener.incoming() {
                    match conn {
                        Ok(s) => scrape(s, &registry, &busy),
                        // Out of fds, say: the run's own work comes first.
                        Err(_) => thread::sleep(Duration::from_millis(100)),
                    }
                }
            })?;
        Ok(())
    }
}

/// One scrape on a thread of its own, or a 503 when [`MAX_SCRAPES`] are
/// under way, answered on the accepting thread within [`REFUSE_WITHIN`].
fn scrape(mut s: TcpStream, registry: &Arc<Registry>, busy: &Arc<AtomicUsize>) {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    if busy.fetch_add(1, Ordering::AcqRel) >= MAX_SCRAPES {
        busy.fetch_sub(1, Ordering::AcqRel);
        refuse(&mut s);
        return;
    }
    let (registry, done) = (Arc::clone(registry), Arc::clone(busy));
    let spawned = thread::Builder::new()
        .name("metrics-scrape".into())
        .spawn(move || {
            // A scraper that goes away is no concern of the run's.
            let _ = answer(s, deadline, &registry);
            done.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long the accepting thread gives a scrape it refuses: enough to
/// read a request that is on its way (closing over unread bytes would
/// reset the connection, and the scraper would lose the 503).
const REFUSE_WITHIN: Duration = Duration::from_millis(100);

/// Reads what comes of the request within [`REFUSE_WITHIN`], then answers
/// 503 (a few bytes: a fresh socket's buffer takes them at once).
fn refuse(s: &mut TcpStream) {
    let deadline = Instant::now() + REFUSE_WITHIN;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while head.len() < MAX_HEAD && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = left(deadline).and_then(|t| {
            s.set_read_timeout(Some(t))?;
            s.read(&mut buf)
        });
        match read {
            Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    let _ = respond(
        s,
        Instant::now() + REFUSE_WITHIN,
        "503 Service Unavailable\r\nRetry-After: 1",
        TEXT_FORMAT,
        "too many scrapes at once\n",
    );
    let _ = s.shutdown(std::net::Shutdown::Write);
}

/// The time left before `deadline`, as a socket timeout; an error once it
/// has passed (a zero timeout would mean none).
fn left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the request's deadline passed",
        ));
    }
    Ok(left)
}

/// Reads one request and answers it, all before `deadline`; the
/// connection then closes.
fn answer(mut s: TcpStream, deadline: Instant, registry: &Registry) -> io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() >= MAX_HEAD {
            return respond(
                &mut s,
                deadline,
                "431 Request Header Fields Too Large",
                TEXT_FORMAT,
                "",
            );
        }
        s.set_read_timeout(Some(left(deadline)?))?;
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    let mut lines = head.split("\r\n");
    let mut request = lines.next().unwrap_or("").split(' ');
    let (method, target) = (request.next().unwrap_or(""), request.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if path != "/metrics" {
        return respond(
            &mut s,
            deadline,
            "404 Not Found",
            TEXT_FORMAT,
            "not found: the metrics are at /metrics\n",
        );
    }
    if method != "GET" {
        return respond(
            &mut s,
            deadline,
            "405 Method Not Allowed\r\nAllow: GET",
            TEXT_FORMAT,
            "only GET /metrics\n",
        );
    }
    let accept = lines
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.trim().eq_ignore_ascii_case("accept"))
        .map(|(_, v)| v.trim())
        .collect::<Vec<_>>()
        .join(",");
    let mut body = String::new();
    if prometheus_client::encoding::text::encode(&mut body, registry).is_err() {
        return respond(
            &mut s,
            deadline,
            "500 Internal Server Error",
            TEXT_FORMAT,
            "encoding failed\n",
        );
    }
    if wants_openmetrics(&accept) {
        respond(&mut s, deadline, "200 OK", OPENMETRICS, &body)
    } else {
        respond(
            &mut s,
            deadline,
            "200 OK",
            TEXT_FORMAT,
            &to_text_format(&body),
        )
    }
}

/// Writes a response before `deadline` (a peer that reads slowly is cut
/// there, whatever it has read).
fn respond(
    s: &mut TcpStream,
    deadline: Instant,
    status: &str,
    content_type: &str,
    body: &str,
) -> io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    let mut rest = &out[..];
    while !rest.is_empty() {
        s.set_write_timeout(Some(left(deadline)?))?;
        match s.write(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// True when an Accept header names OpenMetrics with a weight above 0.
fn wants_openmetrics(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let mut parts = range.split(';');
        let media = parts.next().unwrap_or("").trim();
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f64>().ok())
            .unwrap_or(1.0);
        media.eq_ignore_ascii_case("application/openmetrics-text") && q > 0.0
    })
}

/// OpenMetrics text as Prometheus' text format 0.0.4: a counter's family
/// is named with its `_total` (`# TYPE x_total counter` where OpenMetrics
/// says `# TYPE x counter`), and the lines 0.0.4 has no word for (`# UNIT`,
/// `# EOF`, `_created` samples) go. The samples are the same.
pub fn to_text_format(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<&str> = None;
    let mut counter: Option<String> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (base, kind) = rest.rsplit_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" => (format!("{base}_total"), "counter"),
                "info" => (format!("{base}_info"), "gauge"),
                "unknown" => (base.to_string(), "untyped"),
                k => (base.to_string(), k),
            };
            counter = (kind == "counter").then(|| format!("{base}_created"));
            if let Some(h) = help.take() {
                let text = h.split_once(' ').map_or("", |(_, t)| t);
                let _ = writeln!(out, "# HELP {name} {text}");
            }
            let _ = writeln!(out, "# TYPE {name} {kind}");
            continue;
        }
        if let Some(created) = &counter {
            if line.starts_with(created.as_str()) {
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// One counter family without labels.
pub(crate) fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: impl EncodeCounterValue,
) -> std::fmt::Result {
    ConstCounter::new(value).encode(enc.encode_descriptor(name, help, None, MetricType::Counter)?)
}

/// One counter family of bytes without labels: `name` without the unit,
/// which the encoder adds (`throng_server_sent` is
/// `throng_server_sent_bytes_total`, Prometheus' naming).
pub(crate) fn bytes_counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: impl EncodeCounterValue,
) -> std::fmt::Result {
    let unit = Unit::Bytes;
    ConstCounter::new(value).encode(enc.encode_descriptor(
        name,
        help,
        Some(&unit),
        MetricType::Counter,
    )?)
}

/// One gauge family without labels.
pub(crate) fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: impl EncodeGaugeValue,
) -> std::fmt::Result {
    ConstGauge::new(value).encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// A counter family with one label: a series per (label value, count).
pub(crate) fn counters_by<V: EncodeCounterValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    series: impl IntoIterator<Item = (String, V)>,
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (value, n) in series {
        let labels = [(label, value.as_str())];
        ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A counter family of bytes with one label (`name` without the unit).
pub(crate) fn bytes_counters_by<V: EncodeCounterValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    series: impl IntoIterator<Item = (String, V)>,
) -> std::fmt::Result {
    let unit = Unit::Bytes;
    let mut m = enc.encode_descriptor(name, help, Some(&unit), MetricType::Counter)?;
    for (value, n) in series {
        let labels = [(label, value.as_str())];
        ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A gauge family with one label.
pub(crate) fn gauges_by<V: EncodeGaugeValue>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    label: &str,
    series: impl IntoIterator<Item = (String, V)>,
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (value, n) in series {
        let labels = [(label, value.as_str())];
        ConstGauge::new(n).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_take_their_total_in_the_text_format() {
        let om = "# HELP a_requests Requests.\n# TYPE a_requests counter\na_requests_total 3\n\
                  a_requests_created 1.5\n# HELP a_open Open.\n# TYPE a_open gauge\na_open 2\n\
                  # HELP a_t_seconds Time.\n# TYPE a_t_seconds histogram\n# UNIT a_t_seconds seconds\n\
                  a_t_seconds_sum 1.0\n# EOF\n";
        assert_eq!(
            to_text_format(om),
            "# HELP a_requests_total Requests.\n# TYPE a_requests_total counter\n\
             a_requests_total 3\n# HELP a_open Open.\n# TYPE a_open gauge\na_open 2\n\
             # HELP a_t_seconds Time.\n# TYPE a_t_seconds histogram\na_t_seconds_sum 1.0\n"
        );
    }

    #[test]
    fn openmetrics_only_when_asked() {
        assert!(!wants_openmetrics(""));
        assert!(!wants_openmetrics("text/plain;version=0.0.4"));
        assert!(!wants_openmetrics("*/*"));
        assert!(wants_openmetrics(
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
        ));
        assert!(!wants_openmetrics("application/openmetrics-text; q=0"));
    }
}
