//! What a client run does, as plain data: targets, connections, ramp, how
//! the run ends, source addresses. Built once by [`crate::cli`] from the
//! flags (after names are resolved and sources planned), checked, then
//! handed to the engine, sent to child processes, and written into the JSON
//! result as "the scenario as run".

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::domain::{Arrivals, ConnectMode, Proto, Segment, Spread, Transport};

/// Default --connect-rate.
pub const DEFAULT_CONNECT_RATE: f64 = 10_000.0;

/// How connection attempts are spread over time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Ramp {
    /// Evenly spaced: attempt i at i / per_second.
    Rate { per_second: f64 },
    /// `size` attempts at once every `delay_s`.
    Batch { size: u64, delay_s: f64 },
}

impl Ramp {
    /// When attempt `i` (0-based, over all workers) is due, from the start.
    pub fn due(&self, i: u64) -> Duration {
        let secs = match *self {
            Ramp::Rate { per_second } => i as f64 / per_second,
            Ramp::Batch { size, delay_s } => (i / size) as f64 * delay_s,
        };
        Duration::from_secs_f64(secs)
    }

    /// Connections per second this ramp aims at.
    pub fn rate(&self) -> f64 {
        match *self {
            Ramp::Rate { per_second } => per_second,
            Ramp::Batch { size, delay_s } => size as f64 / delay_s.max(1e-9),
        }
    }
}

/// How the hold phase ends.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum End {
    /// This long after the ramp ends.
    Duration { seconds: f64 },
    /// At SIGINT/SIGTERM.
    Hold,
    /// At Enter on stdin (or its end).
    Pause,
}

/// One phase of a schedule: over `seconds`, go linearly from `from` to `to`
/// (equal for a plateau).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    pub seconds: f64,
    pub from: f64,
    pub to: f64,
}

/// Parses `30s@10k,20s@10k..50k` (the same syntax for connection counts
/// and, later, query rates).
pub fn parse_phases(spec: &str) -> Result<Vec<Phase>, String> {
    let example = "e.g. 30s@10k,60s@10k..100k,30s@20k";
    let mut phases = Vec::new();
    for part in spec.split([',', ' ']).filter(|p| !p.is_empty()) {
        let (dur, level) = part.split_once('@').ok_or_else(|| {
            format!("phase '{part}' needs DURATION@N or DURATION@A..B; {example}")
        })?;
        let d = crate::units::parse_duration(dur).map_err(|e| format!("phase '{part}': {e}"))?;
        let count = |s: &str| {
            crate::units::parse_count(s)
                .map(|n| n as f64)
                .map_err(|e| format!("phase '{part}': {e}"))
        };
        let (from, to) = match level.split_once("..") {
            Some((a, b)) => (count(a)?, count(b)?),
            None => (count(level)?, count(level)?),
        };
        if d.is_zero() {
            return Err(format!("phase '{part}' lasts 0 s; {example}"));
        }
        phases.push(Phase {
            seconds: d.as_secs_f64(),
            from,
            to,
        });
    }
    if phases.is_empty() {
        return Err(format!("an empty schedule; {example}"));
    }
    Ok(phases)
}

/// The level a schedule asks for `t` seconds after its start (the last
/// phase's end level after it).
pub fn level_at(phases: &[Phase], t: f64) -> f64 {
    let mut start = 0.0;
    for p in phases {
        if t < start + p.seconds {
            return p.from + (p.to - p.from) * (t - start) / p.seconds;
        }
        start += p.seconds;
    }
    phases.last().map_or(0.0, |p| p.to)
}

impl Query {
    /// The protocol in a word ("a DNS reply", "DNS queries").
    pub fn name(&self) -> &'static str {
        match self {
            Query::Dns { .. } => "DNS",
            Query::Echo { .. } => "echo",
            Query::Ping => "ping",
            Query::Http { .. } => "HTTP",
            Query::Raw { .. } => "raw",
        }
    }
}

/// What one query is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Query {
    Dns {
        qtype: u16,
        names: Vec<String>,
        /// Each name's own type, from a query file (empty: all `qtype`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        qtypes: Vec<u16>,
        /// EDNS UDP payload size (None: no OPT record).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        edns: Option<u16>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        dnssec_ok: bool,
    },
    Echo {
        size: usize,
        validate: bool,
    },
    Ping,
    Http {
        request: String,
    },
    Raw {
        message: String,
        first_message: Option<String>,
        marker: Option<String>,
    },
}

/// When queries are sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Model {
    /// A total rate (or a schedule of rates) over all connections.
    OpenLoop {
        phases: Vec<Phase>,
        arrivals: Arrivals,
        spread: Spread,
    },
    /// Each connection every `every_s`.
    Interval { every_s: f64 },
    /// Next query when one is answered, after `think_s`.
    ClosedLoop { think_s: f64 },
}

/// The query traffic of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Traffic {
    pub proto: Proto,
    pub query: Query,
    pub model: Model,
    /// Most outstanding per connection (None: unlimited).
    pub window: Option<u64>,
    pub messages: Option<u64>,
    /// Queries in all, over every connection: the run ends once they are
    /// done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queries: Option<u64>,
    pub max_queries_per_conn: Option<u64>,
    pub timeout_s: f64,
    pub close_on_timeout: bool,
    pub seed: u64,
    /// After the traffic: seconds to wait for the queries in flight (at
    /// most `timeout_s`; 0 stops at once).
    #[serde(default)]
    pub drain_s: f64,
}

impl Traffic {
    /// Seconds the traffic lasts by its own schedule, if it has one.
    pub fn schedule_seconds(&self) -> Option<f64> {
        match &self.model {
            Model::OpenLoop { phases, .. }
                if phases.len() > 1 || phases[0].from != phases[0].to =>
            {
                Some(phases.iter().map(|p| p.seconds).sum())
            }
            _ => None,
        }
    }

    /// The rate asked for `t` seconds into the traffic (open loop).
    pub fn rate_at(&self, t: f64, connections: u64) -> f64 {
        match &self.model {
            Model::OpenLoop { phases, .. } => level_at(phases, t),
            Model::Interval { every_s } => connections as f64 / every_s,
            Model::ClosedLoop { .. } => 0.0,
        }
    }
}

/// Turns the escaped form kept in a [`Query`] back into bytes.
pub fn unescaped(s: &str) -> Vec<u8> {
    wire::escape::unescape(s).unwrap_or_else(|_| s.as_bytes().to_vec())
}

/// A client run, validated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scenario {
    /// Resolved targets; connection i goes to `targets[i % len]`.
    pub targets: Vec<SocketAddr>,
    /// The targets as given (empty with the embedded server).
    pub target_names: Vec<String>,
    pub embedded_server: bool,
    pub connections: u64,
    pub ramp: Ramp,
    pub connect_mode: ConnectMode,
    pub max_inflight_connects: u64,
    pub connect_timeout_s: f64,
    /// Source addresses in use order; empty: the kernel chooses.
    pub sources: Vec<IpAddr>,
    pub end: End,
    pub lifetime_s: Option<f64>,
    pub reconnect: bool,
    pub preallocate: bool,
    /// --connections-schedule: open connections over time (then
    /// `connections` is its highest level and the run lasts its phases).
    pub connections_schedule: Option<Vec<Phase>>,
    /// Queries over the connections; None: connections only.
    pub traffic: Option<Traffic>,
    /// Commands come on stdin (--control -).
    #[serde(default)]
    pub control: bool,
    /// The slice of the whole this run is (None: all of it).
    #[serde(default)]
    pub segment: Option<Segment>,
    pub workers: usize,
    pub verify: bool,
    /// What verifies a new connection when there is no traffic: one query
    /// of --proto (None: raw without a marker cannot be verified).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<Query>,
    pub max_failures: u64,
    /// How queries travel. With tcp-per-query, `connections` is the
    /// --concurrency: connections open at once at most.
    #[serde(default)]
    pub transport: Transport,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsOptions>,
}

/// The client's TLS settings (--transport tls).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TlsOptions {
    /// PEM file of trusted certificates (None: the system's bundle).
    pub ca: Option<std::path::PathBuf>,
    pub insecure: bool,
    pub sni: Option<String>,
    pub alpn: Vec<String>,
    pub resume: bool,
}

/// The largest UDP payload.
pub const MAX_DATAGRAM: u64 = 65_507;

/// Bytes of the echo header: magic, sequence number, send timestamp (the
/// smallest echo query).
pub const ECHO_HEADER: usize = 20;

/// Letters a `{rand}` in a query name becomes (one label's worth).
pub const RAND_LABEL_LEN: usize = 10;

/// Record types a query file may mix: each gets its own row of RCODE
/// counts, a fixed table in every worker.
pub const MAX_QTYPES: usize = 64;

/// Checks that `name` encodes, with each `{rand}` as the label it becomes.
pub fn check_name(name: &str) -> Result<(), wire::dns::DnsError> {
    let probe = name.replace("{rand}", &"x".repeat(RAND_LABEL_LEN));
    wire::dns::encode_name(&probe, &mut Vec::new())
}

/// Reads a query file in dnsperf's format: `NAME [TYPE]` per line, the
/// type a mnemonic (any case) or `TYPEnnn`, `default_qtype` when absent;
/// blank lines and lines starting with `#` or `;` are skipped. Returns the
/// names and their types, or the first bad line, numbered from 1.
pub fn parse_query_file(text: &str, default_qtype: u16) -> Result<(Vec<String>, Vec<u16>), String> {
    let mut names = Vec::new();
    let mut qtypes = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let at = format!("line {}: '{line}'", i + 1);
        let mut fields = line.split_whitespace();
        let name = fields.next().expect("a non-blank line has a field");
        let qtype = match fields.next() {
            None => default_qtype,
            Some(t) => wire::dns::rtype_from_name(t).ok_or_else(|| {
                format!(
                    "{at}: '{t}' is not a record type; give a mnemonic (A, AAAA, CNAME, MX, NS, \
                     PTR, SOA, SRV, TXT, CAA, DS, DNSKEY, HTTPS, SVCB, ANY) or TYPEnnn"
                )
            })?,
        };
        let extra = fields.count();
        if extra > 0 {
            return Err(format!(
                "{at}: {} fields; a line is `NAME [TYPE]` (dnsperf's format), a comment is a \
                 line of its own starting with # or ;",
                extra + 2
            ));
        }
        check_name(name)
            .map_err(|e| format!("{at}: the name is not valid: {e}; fix or remove the line"))?;
        names.push(name.to_string());
        qtypes.push(qtype);
    }
    Ok((names, qtypes))
}

impl Scenario {
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.connect_timeout_s)
    }

    pub fn lifetime(&self) -> Option<Duration> {
        self.lifetime_s.map(Duration::from_secs_f64)
    }

    /// Target and source of connection `i`: targets round-robin, then
    /// sources round-robin within each target, so every (source, target)
    /// pair carries an equal share.
    pub fn endpoints(&self, i: u64) -> (SocketAddr, Option<IpAddr>) {
        let t = self.targets.len() as u64;
        let target = self.targets[(i % t) as usize];
        let source = (!self.sources.is_empty()).then(|| {
            let family: Vec<&IpAddr> = self
                .sources
                .iter()
                .filter(|s| s.is_ipv4() == target.is_ipv4())
                .collect();
            if family.is_empty() {
                None
            } else {
                Some(*family[((i / t) % family.len() as u64) as usize])
            }
        });
        (target, source.flatten())
    }

    /// Connections to the busiest target.
    pub fn per_target(&self) -> u64 {
        self.connections.div_ceil(self.targets.len() as u64)
    }

    /// The part of this (whole) scenario that segment `seg` runs: its share
    /// of connections, connect rate and query rate, its own source
    /// addresses and seed. The slices of 1..=N add up to the whole.
    pub fn slice(&self, seg: Segment) -> Scenario {
        let (k, n) = (seg.index - 1, seg.count);
        let share = |total: u64| total / n + u64::from(k < total % n);
        let part = |x: f64| x / n as f64;
        let mut s = self.clone();
        s.segment = Some(seg);
        s.connections = share(self.connections).max(1);
        s.ramp = match self.ramp {
            Ramp::Rate { per_second } => Ramp::Rate {
                per_second: part(per_second),
            },
            Ramp::Batch { size, delay_s } => Ramp::Batch {
                size: share(size).max(1),
                delay_s,
            },
        };
        s.max_inflight_connects = self.max_inflight_connects.div_ceil(n).max(1);
        s.connections_schedule = self.connections_schedule.as_ref().map(|ph| {
            ph.iter()
                .map(|p| Phase {
                    seconds: p.seconds,
                    from: part(p.from),
                    to: part(p.to),
                })
                .collect()
        });
        if !self.sources.is_empty() {
            let m = self.sources.len() as u64;
            s.sources = if m >= n {
                // Sources k, k+N, k+2N, ...: every slice its own.
                self.sources
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i as u64 % n == k)
                    .map(|(_, a)| *a)
                    .collect()
            } else {
                // Fewer sources than slices: share them round-robin (the
                // plan kept each source under half the port range in total).
                vec![self.sources[(k % m) as usize]]
            };
        }
        if let Some(t) = s.traffic.as_mut() {
            t.seed = t.seed.wrapping_add(k);
            t.queries = t.queries.map(share);
            if let Model::OpenLoop { phases, .. } = &mut t.model {
                for p in phases {
                    p.from = part(p.from);
                    p.to = part(p.to);
                }
            }
        }
        s.workers = s.workers.min(s.connections as usize).max(1);
        s
    }

    /// What must be equal for two results to be slices of one run: the
    /// scenario without its segment, workers and planned sources (hosts
    /// differ in cores and addresses). A JSON value, so a difference can be
    /// named by its path.
    pub fn identity(&self) -> serde_json::Value {
        let mut s = self.clone();
        s.segment = None;
        s.workers = 0;
        s.sources = Vec::new();
        s.target_names = Vec::new();
        serde_json::to_value(s).unwrap_or_default()
    }

    /// Total seconds of --connections-schedule.
    pub fn schedule_seconds(&self) -> Option<f64> {
        self.connections_schedule
            .as_ref()
            .map(|p| p.iter().map(|p| p.seconds).sum())
    }

    /// The time the ramp should take, from the schedule.
    pub fn ramp_time(&self) -> Duration {
        self.ramp.due(self.connections.saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_ramp_is_even() {
        let r = Ramp::Rate { per_second: 2000.0 };
        assert_eq!(r.due(0), Duration::ZERO);
        assert_eq!(r.due(1000), Duration::from_millis(500));
    }

    #[test]
    fn phases_parse_and_interpolate() {
        let p = parse_phases("30s@10k,60s@10k..100k,30s@20k").unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p[1].to, 100_000.0);
        assert_eq!(level_at(&p, 0.0), 10_000.0);
        assert_eq!(level_at(&p, 60.0), 55_000.0);
        assert_eq!(level_at(&p, 100.0), 20_000.0);
        assert_eq!(level_at(&p, 1000.0), 20_000.0);
        assert!(parse_phases("30s").unwrap_err().contains("DURATION@N"));
        assert!(parse_phases("0s@5").is_err());
        assert!(parse_phases("").is_err());
    }

    #[test]
    fn query_file_takes_names_types_and_comments() {
        let text = "# dnsperf data\n\nwww.example.com A\n; another comment\n  example.com\taaaa  \nmail.example.com\nx.example TYPE65\n_dns.example SVCB\n";
        let (names, types) = parse_query_file(text, wire::dns::rtype::MX).unwrap();
        assert_eq!(
            names,
            [
                "www.example.com",
                "example.com",
                "mail.example.com",
                "x.example",
                "_dns.example"
            ]
        );
        assert_eq!(types, [1, 28, 15, 65, 64]);
    }

    #[test]
    fn query_file_unknown_type_names_the_line() {
        let e = parse_query_file("a.example A\n\nb.example AAAAA\n", 1).unwrap_err();
        assert!(
            e.starts_with("line 3: 'b.example AAAAA': 'AAAAA' is not a record type"),
            "{e}"
        );
        assert!(e.contains("TYPEnnn"), "{e}");
        let e = parse_query_file("c.example TYPE70000\n", 1).unwrap_err();
        assert!(e.starts_with("line 1:"), "{e}");
    }

    #[test]
    fn query_file_extra_fields_are_refused() {
        let e = parse_query_file("ok.example\nwww.example.com A IN\n", 1).unwrap_err();
        assert!(
            e.starts_with("line 2: 'www.example.com A IN': 3 fields"),
            "{e}"
        );
        assert!(e.contains("NAME [TYPE]"), "{e}");
    }

    #[test]
    fn query_file_invalid_names_are_refused() {
        let long_label = format!("{}.example", "a".repeat(64));
        let long_name = vec!["a".repeat(63); 4].join(".");
        for (line, why) in [
            (long_label.as_str(), "label longer than 63"),
            (long_name.as_str(), "name longer than 255"),
            ("a..example", "empty label"),
            ("bad\\032name.example", "character '\\\\'"),
            (
                "{rand}{rand}{rand}{rand}{rand}{rand}{rand}.example",
                "label longer than 63",
            ),
        ] {
            let e = parse_query_file(&format!("# x\n{line} A\n"), 1).unwrap_err();
            assert!(e.starts_with("line 2: "), "{e}");
            assert!(e.contains(why), "{line}: {e}");
            assert!(e.contains("fix or remove the line"), "{e}");
        }
    }

    #[test]
    fn batch_ramp_steps() {
        let r = Ramp::Batch {
            size: 100,
            delay_s: 0.5,
        };
        assert_eq!(r.due(99), Duration::ZERO);
        assert_eq!(r.due(100), Duration::from_millis(500));
        assert_eq!(r.rate(), 200.0);
    }
}
