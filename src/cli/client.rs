//! `throng client`'s flags. What they make, a [`crate::scenario::Scenario`],
//! is built in [`super::scenario`].

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{domain, parse_metrics_addr, parse_processes, parse_run_id, parse_segment};
use super::{
    ArrivalsArg, ConnectModeArg, ProtoArg, PushFormatArg, PushOverArg, SpreadArg, TransportArg,
};
use crate::client::{ClientCommand, ClientConfig, ServerKind};
use crate::domain::{
    Arrivals, ConnectMode, Processes, Proto, PushFormat, PushOver, Segment, Spread, Transport,
};
use crate::units::{
    parse_burst, parse_count, parse_duration, parse_positive_count, parse_rate, parse_size,
    parse_start_at, parse_u64,
};
use crate::usage::UsageError;

#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// Servers to connect to, as HOST:PORT (names resolved once at start;
    /// IPv6 as [::1]:53) or as URLs: http://HOST[:PORT]/PATH, https://,
    /// ws://, wss:// (they set --proto, --transport, the port, the path),
    /// tcp://, udp://, tls:// (the transport). Connections are spread
    /// round-robin over them. With none, an embedded echo server is
    /// started on 127.0.0.1.
    #[arg(value_name = "HOST:PORT")]
    pub targets: Vec<String>,

    /// Connections to open and hold.
    #[arg(short, long, value_name = "N", default_value = "1000", value_parser = parse_count)]
    pub connections: u64,

    /// New connections per second, spread evenly over time [default: 10k/s].
    #[arg(long, value_name = "RATE", value_parser = parse_rate, conflicts_with_all = ["batch_size", "batch_delay"])]
    pub connect_rate: Option<f64>,

    /// Open connections in batches of N attempts at once (with --batch-delay).
    #[arg(long, value_name = "N", value_parser = parse_positive_count, requires = "batch_delay")]
    pub batch_size: Option<u64>,

    /// Pause between two batches.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "batch_size")]
    pub batch_delay: Option<Duration>,

    /// async: many non-blocking connects in flight; sync: one at a time.
    #[arg(long, value_parser = domain::<ConnectModeArg, ConnectMode>(), default_value = "async")]
    pub connect_mode: ConnectMode,

    /// Most connects in flight at once (async mode).
    #[arg(long, value_name = "N", default_value = "1024", value_parser = parse_positive_count)]
    pub max_inflight_connects: u64,

    /// Give up on a connect (and on the verification probe) after this long.
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// Source address(es) to connect from, IP or IP/prefix, repeatable
    /// [default: chosen so that no source carries more than half the
    /// ephemeral port range to one target].
    #[arg(long = "source-ip", value_name = "IP[/PREFIX]")]
    pub source_ip: Vec<String>,

    /// How long to hold the connections once the ramp has ended.
    #[arg(short = 'T', long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,

    /// Hold the connections until Ctrl-C or SIGTERM (instead of --duration).
    #[arg(long, conflicts_with_all = ["pause", "duration"])]
    pub hold: bool,

    /// After the ramp, wait for Enter on stdin before closing (multi-host
    /// max-connection tests).
    #[arg(long)]
    pub pause: bool,

    /// Close each connection this long after it opened.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub lifetime: Option<Duration>,

    /// Open a new connection in place of each one that ends: by --lifetime
    /// (connection churn), --close-on-timeout, or the server's doing (a
    /// reset, a failure too). Without it, a run that sends queries still
    /// replaces the connections the server closes with nothing in flight
    /// (a keep-alive limit, an idle timeout), as wrk does.
    #[arg(long, overrides_with = "no_reconnect")]
    pub reconnect: bool,

    /// End the ramp early when this holds (repeatable): verify-stall=T
    /// (no connection verified for T while attempts go on: the server
    /// stopped accepting) or failed=P% (failed attempts reached P% of
    /// those made, after 100). The run goes on with what it has, and the
    /// summary says where the ramp stopped.
    #[arg(long = "stop-on", value_name = "COND")]
    pub stop_on: Vec<String>,

    /// Do not replace connections that end, not even those the server
    /// closes: the run's concurrency falls with each (the summary says
    /// how many).
    #[arg(long = "no-reconnect", overrides_with = "reconnect")]
    pub no_reconnect: bool,

    /// The number of open connections over time, as comma-separated phases
    /// DURATION@N (hold N) or DURATION@A..B (go linearly from A to B), e.g.
    /// 30s@10k,60s@10k..100k,30s@20k. Rises are opened at --connect-rate;
    /// falls close the oldest connections. Replaces -c and -T.
    #[arg(long, value_name = "SPEC", conflicts_with_all = ["hold", "pause", "batch_size"])]
    pub connections_schedule: Option<String>,

    /// Create and bind every socket before the ramp, so the ramp makes only
    /// connect calls.
    #[arg(long)]
    pub preallocate: bool,

    /// Event-loop threads [default: all cores].
    #[arg(short, long, value_name = "N", value_parser = parse_positive_count)]
    pub workers: Option<u64>,

    /// Send one small probe (a DNS query, which echo and DNS servers both
    /// answer) on each new connection to verify the server accepted it.
    #[arg(long, overrides_with = "no_verify", default_value_t = true)]
    pub verify: bool,

    /// Do not send the probe (for servers that must not get data).
    #[arg(long = "no-verify")]
    pub no_verify: bool,

    /// Exit with code 1 when more connections than this failed.
    #[arg(long, value_name = "N", default_value = "0", value_parser = parse_count)]
    pub max_failures: u64,

    /// A condition on the result, by its JSON key, e.g. queries.ok>=99.5%,
    /// latency.response_time_us.p99<5ms, connections.failed==0 (repeatable;
    /// exit 1 when one fails). Added to the defaults: with queries
    /// queries.ok>=99% (of due), with verification connections.unverified==0;
    /// `none` drops the defaults.
    #[arg(long = "check", value_name = "EXPR")]
    pub check: Vec<String>,

    /// After the traffic, wait this long at most for the queries in flight
    /// (default: --timeout; 0 stops at once).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Traffic")]
    pub drain: Option<Duration>,

    /// Queries per second in total, spread over all connections (open loop:
    /// sent on schedule whether or not answers come back).
    #[arg(short, long, value_name = "RATE", value_parser = parse_rate, help_heading = "Traffic")]
    pub rate: Option<f64>,

    /// Each connection sends one query every DURATION (first sends staggered
    /// over one interval).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Traffic",
          conflicts_with_all = ["rate", "closed_loop"])]
    pub interval: Option<Duration>,

    /// Query rate over time as phases, e.g. 30s@10k,20s@10k..50k (replaces -r and -T).
    #[arg(long, value_name = "SPEC", help_heading = "Traffic", conflicts_with_all = ["rate", "interval", "closed_loop"])]
    pub schedule: Option<String>,

    /// Read --schedule phases from FILE ('-' for stdin), one or more per line.
    #[arg(long, value_name = "FILE", help_heading = "Traffic", conflicts_with_all = ["rate", "interval", "closed_loop", "schedule"])]
    pub schedule_file: Option<PathBuf>,

    /// Closed loop: each connection sends its next query as soon as one of
    /// its --window outstanding queries is answered or times out (after --think).
    #[arg(long, help_heading = "Traffic")]
    pub closed_loop: bool,

    /// Queries due within DURATION of the first go out together, in one
    /// write per connection (one sendmmsg per UDP socket), for less CPU per
    /// answer; response times still count from each query's due time, so
    /// the wait shows [default: 0, each query at its own due time].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Traffic")]
    pub slack: Option<Duration>,

    /// Closed loop: pause between an answer and the next query.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Traffic", requires = "closed_loop")]
    pub think: Option<Duration>,

    /// Most queries outstanding per connection [default: unlimited; 1 with --closed-loop].
    #[arg(long, value_name = "K", value_parser = parse_positive_count, help_heading = "Traffic")]
    pub window: Option<u64>,

    /// How open-loop queries are spread over connections.
    #[arg(long, value_parser = domain::<SpreadArg, Spread>(), default_value = "random", help_heading = "Traffic")]
    pub spread: Spread,

    /// Inter-arrival times of open-loop queries.
    #[arg(long, value_parser = domain::<ArrivalsArg, Arrivals>(), default_value = "poisson", help_heading = "Traffic")]
    pub arrivals: Arrivals,

    /// Seed of every random choice (arrivals, spread, {rand} names), so runs repeat.
    #[arg(long, value_name = "N", default_value = "42", value_parser = parse_u64, help_heading = "Traffic")]
    pub seed: u64,

    /// Each connection sends N queries, then stops (and closes, unless --hold).
    #[arg(long, value_name = "N", value_parser = parse_positive_count, help_heading = "Traffic")]
    pub messages: Option<u64>,

    /// End the run once N queries in all are done (answered or timed out),
    /// before -T if sooner; with --closed-loop -c 1 they go one after another.
    #[arg(long, value_name = "N", value_parser = parse_positive_count, help_heading = "Traffic")]
    pub queries: Option<u64>,

    /// Close a connection after N queries and open a fresh one in its place.
    #[arg(long, value_name = "N", value_parser = parse_positive_count, help_heading = "Traffic")]
    pub max_queries_per_conn: Option<u64>,

    /// An unanswered query counts as timed out after this long.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration, help_heading = "Traffic")]
    pub timeout: Duration,

    /// Close a connection whose query timed out (and replace it with --reconnect).
    #[arg(long, help_heading = "Traffic")]
    pub close_on_timeout: bool,

    /// Read commands from stdin while running: `rate R` (`rate 0` pauses),
    /// `connections N`, `stop`.
    #[arg(long, value_name = "-", help_heading = "Traffic")]
    pub control: Option<String>,

    /// One CSV line per query to FILE: type,timestamp,connection_id,query_id,
    /// intended_us,sent_us,rtt_us,status.
    #[arg(short = 'R', long, value_name = "FILE", help_heading = "Traffic")]
    pub rtt_log: Option<PathBuf>,

    /// What queries are made of.
    #[arg(long, value_parser = domain::<ProtoArg, Proto>(), default_value = "dns", help_heading = "Protocol")]
    pub proto: Proto,

    /// dns: the record type asked for (A, AAAA, MX, TYPE65, ...).
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "A",
        help_heading = "Protocol"
    )]
    pub qtype: String,

    /// dns: the name asked for; {rand} becomes random labels (to defeat caches).
    #[arg(
        long,
        value_name = "NAME",
        default_value = "example.com",
        help_heading = "Protocol"
    )]
    pub qname: String,

    /// dns: cycle through the queries in FILE, dnsperf's format: `NAME
    /// [TYPE]` per line (TYPE: A, AAAA, MX, ..., TYPEnnn; default --qtype),
    /// `#` or `;` comment lines.
    #[arg(long, value_name = "FILE", help_heading = "Protocol")]
    pub qnames: Option<PathBuf>,

    /// dns: add an EDNS OPT record offering this UDP payload size (1232
    /// when given without one), as dnsperf's -e.
    #[arg(long, value_name = "SIZE", num_args = 0..=1, default_missing_value = "1232", help_heading = "Protocol")]
    pub edns: Option<u16>,

    /// dns: set the DNSSEC OK bit (implies --edns), as dnsperf's -D.
    #[arg(long, help_heading = "Protocol")]
    pub dnssec_ok: bool,

    /// echo: message size in bytes (at least 20: magic, sequence, timestamp).
    #[arg(long, value_name = "SIZE", default_value = "64", value_parser = parse_size, help_heading = "Protocol")]
    pub size: u64,

    /// dns: more RCODEs that count as successful answers, by name or
    /// number, comma-separated (NOERROR and NXDOMAIN always do), e.g.
    /// --ok-rcodes REFUSED for a server meant to refuse.
    #[arg(
        long,
        value_name = "RCODES",
        value_delimiter = ',',
        help_heading = "Protocol"
    )]
    pub ok_rcodes: Vec<String>,

    /// http: more status codes that count as successful answers,
    /// comma-separated (2xx and 3xx always do), e.g. --ok-status 404.
    #[arg(
        long,
        value_name = "CODES",
        value_delimiter = ',',
        help_heading = "Protocol"
    )]
    pub ok_status: Vec<u16>,

    /// echo: check every echoed byte; a reply that differs is an answer
    /// that failed (`mismatch`).
    #[arg(long, help_heading = "Protocol")]
    pub validate: bool,

    /// http: the request, with escapes \r \n \t \xNN [default: GET / HTTP/1.1 with a Host header].
    #[arg(long, value_name = "STRING", help_heading = "Protocol")]
    pub http_request: Option<String>,

    /// raw: the message (escapes \r \n \t \xNN).
    #[arg(short = 'm', long, value_name = "STRING", help_heading = "Protocol")]
    pub message: Option<String>,

    /// raw: the message, read from FILE.
    #[arg(
        long,
        value_name = "FILE",
        help_heading = "Protocol",
        conflicts_with = "message"
    )]
    pub message_file: Option<PathBuf>,

    /// raw: sent once on each connection before its first message.
    #[arg(long, value_name = "STRING", help_heading = "Protocol")]
    pub first_message: Option<String>,

    /// raw: each occurrence in the incoming bytes completes the oldest outstanding message.
    #[arg(long, value_name = "STRING", help_heading = "Protocol")]
    pub marker: Option<String>,

    /// redis: a command, split as redis-cli does ('SET key:__rand_int__
    /// "a b"'); again for more, taken in turn [default: PING]. Each
    /// __rand_int__ is a number drawn in 0..--redis-keys, twelve digits,
    /// as redis-benchmark's.
    #[arg(long, value_name = "COMMAND", help_heading = "Protocol")]
    pub redis_command: Vec<String>,

    /// redis: how many numbers __rand_int__ is drawn from
    /// (redis-benchmark's -r), at most 10^12.
    #[arg(long, value_name = "N", default_value = "100000", value_parser = parse_positive_count, help_heading = "Protocol")]
    pub redis_keys: u64,

    /// push: the period the server sends at (what jitter and the messages
    /// due count from).
    #[arg(long, value_name = "DURATION", default_value = "20ms", value_parser = parse_duration, help_heading = "Protocol")]
    pub every: Duration,

    /// websocket: the request target of the upgrade (also with --push-over
    /// websocket).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/",
        help_heading = "Protocol"
    )]
    pub ws_path: String,

    /// websocket: one more header line in the upgrade request (repeatable),
    /// e.g. --ws-header 'Authorization:Bearer x'.
    #[arg(long, value_name = "NAME:VALUE", help_heading = "Protocol")]
    pub ws_header: Vec<String>,

    /// websocket: the subprotocol offered (Sec-WebSocket-Protocol).
    #[arg(long, value_name = "NAME", help_heading = "Protocol")]
    pub ws_subprotocol: Option<String>,

    /// websocket: send binary messages (default: text).
    #[arg(long, help_heading = "Protocol")]
    pub ws_binary: bool,

    /// push: what the messages come over: tcp (the bare stream) or
    /// websocket (the upgrade, then one message per push).
    #[arg(long, value_name = "OVER", value_parser = domain::<PushOverArg, PushOver>(), default_value = "tcp", help_heading = "Protocol")]
    pub push_over: PushOver,

    /// push: how messages are framed: throng (throng server --mode push:
    /// sequence number and send times) or line (a sequence number in
    /// decimal at the start of each line).
    #[arg(long, value_parser = domain::<PushFormatArg, PushFormat>(), default_value = "throng", help_heading = "Protocol")]
    pub push_format: PushFormat,

    /// push: messages the server sends back to back at each period (its
    /// --burst): they are due together.
    #[arg(long, value_name = "K", default_value = "1", value_parser = parse_burst, help_heading = "Protocol")]
    pub burst: u64,

    /// push: take the one-way delay from the wall-clock send stamp even when
    /// the server is on another host (trust that the clocks agree, e.g. by
    /// PTP). On this host the monotonic stamp is used without it.
    #[arg(long, help_heading = "Protocol")]
    pub clock_sync: bool,

    /// tcp (persistent), udp (connected sockets), tcp-per-query (a
    /// connection per query), tls (or dot: DNS over TLS).
    #[arg(long, value_parser = domain::<TransportArg, Transport>(), default_value = "tcp", help_heading = "Transport")]
    pub transport: Transport,

    /// tcp-per-query: connections open at once at most (queries beyond wait,
    /// keeping their intended send time).
    #[arg(long, value_name = "N", default_value = "100", value_parser = parse_positive_count, help_heading = "Transport")]
    pub concurrency: u64,

    /// tls: trust the certificates in this PEM file (e.g. the one `throng
    /// server --tls` wrote); default: the system's CA bundle.
    #[arg(long, value_name = "FILE", help_heading = "Transport")]
    pub tls_ca: Option<PathBuf>,

    /// tls: accept any server certificate (self-signed test servers).
    #[arg(long, conflicts_with = "tls_ca", help_heading = "Transport")]
    pub tls_insecure: bool,

    /// tls: the server name sent and checked (default: the target's host).
    #[arg(long, value_name = "NAME", help_heading = "Transport")]
    pub sni: Option<String>,

    /// tls: ALPN protocols offered, comma-separated (e.g. dot, h2,http/1.1).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        help_heading = "Transport"
    )]
    pub alpn: Vec<String>,

    /// tls: resume sessions when connections are recycled or replaced.
    #[arg(long, help_heading = "Transport")]
    pub tls_resume: bool,

    /// Write the whole result as JSON to FILE (atomically).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Serve the live run's figures for Prometheus at
    /// http://ADDR:PORT/metrics (queries, connections, response and service
    /// time histograms; see README, Metrics). Binds that address only.
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_metrics_addr)]
    pub metrics: Option<std::net::SocketAddr>,

    #[command(flatten)]
    pub views: super::ViewArgs,

    /// Run slice K of N of the scenario: its share of connections and rate,
    /// its own source addresses and seed. N slices offer exactly the whole.
    /// auto: the launcher's (THRONG_SEGMENT=K/N; a Kubernetes Indexed Job's
    /// JOB_COMPLETION_INDEX with THRONG_SEGMENTS; Slurm's SLURM_PROCID and
    /// SLURM_NTASKS). With --json DIR, the result is DIR/segment-K-of-N.json.
    #[arg(long, value_name = "K/N|auto", value_parser = parse_segment, help_heading = "Scale out")]
    pub segment: Option<Segment>,

    /// Wait until this wall-clock time (RFC 3339 or Unix seconds) before
    /// connecting, so that slices on many hosts start together.
    #[arg(long, value_name = "TIME", value_parser = parse_start_at, help_heading = "Scale out")]
    pub start_at: Option<f64>,

    /// Start together with the run's other slices without a time to agree
    /// on: each slice writes its number into DIR/.start-RUN_ID/ and waits
    /// for all N; all start 10 s after the last arrived. DIR is shared by
    /// every slice (a Kubernetes Job's results volume); needs --segment
    /// and --run-id.
    #[arg(long, value_name = "DIR", conflicts_with = "start_at", requires_all = ["segment", "run_id"], help_heading = "Scale out")]
    pub start_barrier: Option<PathBuf>,

    /// The run this slice is of, shared by every slice of the run (a
    /// Slurm job id, a Kubernetes Job's uid): `throng merge` refuses
    /// slices of different runs. Without it a --segment derives one from
    /// --start-at and the scenario (or from the scenario alone).
    #[arg(long, value_name = "ID", value_parser = parse_run_id, help_heading = "Scale out")]
    pub run_id: Option<String>,

    /// Processes to run the scenario in (each one segment with its own fd
    /// limit), merged into one result; auto: as many as the fd limit needs.
    #[arg(long, value_name = "N|auto", default_value = "auto", value_parser = parse_processes, help_heading = "Scale out")]
    pub processes: Processes,

    /// Internal: per-second JSON lines on stdout (a load host of `throng
    /// cluster`, a held step of `throng limit`).
    #[arg(long, hide = true)]
    pub child: bool,

    /// Internal, with --child: a load host of `throng cluster`: its report
    /// first, then it waits for `go` on stdin (`clock` and `stop` too).
    #[arg(long, hide = true, requires = "child")]
    pub session: bool,

    /// Internal: run as a child of --processes: the plan (the scenario, its
    /// slice, where the result goes) is the first line on stdin, JSON; per-
    /// second JSON lines go out on stdout.
    #[arg(long, hide = true)]
    pub child_plan: bool,

    /// No live view (the summary is still printed).
    #[arg(short, long)]
    pub quiet: bool,

    /// Run even when the preflight finds the plan impossible.
    #[arg(long)]
    pub force: bool,
}

/// Most addresses one --source-ip prefix expands to.
const MAX_SOURCES: usize = 65_536;

impl ClientArgs {
    /// The run these flags ask for: the flags checked (in this order: the
    /// directories of the files to write, --source-ip, --control), the
    /// targets resolved, the whole scenario built and its checks parsed.
    pub fn config(&self) -> anyhow::Result<ClientCommand> {
        if self.child_plan {
            return Ok(ClientCommand::ChildPlan);
        }
        let urls = self.with_urls()?;
        let a = &urls;
        let (views, sources_given) = a.check_flags()?;
        let targets = if a.targets.is_empty() {
            Vec::new()
        } else {
            crate::client::resolve(&a.targets)?
        };
        // The whole scenario decides the plan; a segment runs its slice of it.
        let probe_targets = if targets.is_empty() {
            vec![SocketAddr::from((Ipv4Addr::LOCALHOST, 0))]
        } else {
            targets
        };
        let whole = a.scenario(probe_targets, a.targets.is_empty(), Vec::new())?;
        let checks = crate::report::check::parse_all(
            &a.check,
            whole.traffic.is_some(),
            whole.push.is_some(),
            whole.verify,
            whole.connections_schedule.is_some(),
        )
        .map_err(UsageError)?;
        if let (Some(o), false) = (&whole.tls, a.targets.is_empty() || a.child) {
            // Trust that cannot be built (no CA roots) fails every handshake:
            // say so once, before any process, server or connection starts.
            crate::tls::client_config(o)?;
        }
        Ok(ClientCommand::Run(Box::new(ClientConfig {
            whole,
            checks,
            views,
            sources_given,
            no_target: a.targets.is_empty(),
            server: a.server_kind(),
            segment: a.segment,
            child: a.child,
            session: a.session,
            json: a.json_file(),
            force: a.force,
            control: a.control.is_some(),
            pause: a.pause,
            start_at: a.start_at,
            start_barrier: a.start_barrier.clone(),
            rtt_log: a.rtt_log.clone(),
            quiet: a.quiet,
            processes: a.processes,
            workers: a.workers,
            run_id: a.run_id.clone(),
            metrics: a.metrics,
        })))
    }

    /// These flags with their URL targets applied (`http://HOST/PATH`
    /// sets --proto, --transport, the port, the request; see
    /// [`super::url`]): the targets become HOST:PORT.
    pub fn with_urls(&self) -> anyhow::Result<ClientArgs> {
        let applied = super::url::apply(&super::url::Given {
            targets: &self.targets,
            proto: self.proto,
            transport: self.transport,
            http_request: self.http_request.as_deref(),
            ws_path: &self.ws_path,
            sni: self.sni.as_deref(),
        })
        .map_err(UsageError)?;
        let mut a = self.clone();
        a.targets = applied.targets;
        a.proto = applied.proto;
        a.transport = applied.transport;
        a.http_request = applied.http_request;
        a.ws_path = applied.ws_path;
        a.sni = applied.sni;
        Ok(a)
    }

    /// --json's file: a directory given holds the result as
    /// `segment-K-of-N.json` (`result.json` for a run that is no slice),
    /// where `throng merge DIR` finds every slice's.
    pub fn json_file(&self) -> Option<PathBuf> {
        let p = self.json.as_ref()?;
        if !p.is_dir() {
            return Some(p.clone());
        }
        Some(p.join(match self.segment {
            Some(s) => format!("segment-{}-of-{}.json", s.index, s.count),
            None => "result.json".to_string(),
        }))
    }

    /// The embedded server these flags want when it runs apart.
    pub fn server_kind(&self) -> ServerKind {
        ServerKind {
            push_every: (self.proto == Proto::Push).then_some(self.every),
            transport: self.transport,
        }
    }

    /// The flags checked before anything starts: the views to make at the
    /// end, and the addresses of --source-ip.
    fn check_flags(&self) -> anyhow::Result<(crate::report::Views, Vec<IpAddr>)> {
        let a = self;
        if let Some(p) = &a.json {
            let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
            if dir.is_some_and(|d| !d.is_dir()) {
                return Err(UsageError(format!(
                    "--json {}: the directory does not exist",
                    p.display()
                ))
                .into());
            }
        }
        let views = a.views.views();
        if !a.child {
            views.check().map_err(UsageError)?;
        }
        let mut sources_given = Vec::new();
        for spec in &a.source_ip {
            sources_given.extend(
                crate::sys::sources::expand(spec, MAX_SOURCES)
                    .map_err(|e| UsageError(format!("--source-ip {e}")))?,
            );
        }
        if a.control.as_deref().is_some_and(|c| c != "-") {
            return Err(UsageError("--control takes '-' (commands on stdin)".into()).into());
        }
        if a.control.is_some() && a.pause {
            return Err(UsageError("--control and --pause both read stdin; use one".into()).into());
        }
        Ok((views, sources_given))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> anyhow::Result<ClientCommand> {
        super::super::client_args(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .expect("client flags")
            .config()
    }

    fn run(args: &[&str]) -> ClientConfig {
        match config(args).unwrap() {
            ClientCommand::Run(c) => *c,
            ClientCommand::ChildPlan => panic!("a child's plan"),
        }
    }

    #[test]
    fn no_target_probes_loopback_and_wants_the_embedded_server() {
        let c = run(&["-c", "10", "--proto", "push", "--every", "5ms"]);
        assert!(c.no_target);
        assert!(c.whole.embedded_server);
        assert_eq!(c.whole.targets, vec!["127.0.0.1:0".parse().unwrap()]);
        assert_eq!(
            c.server,
            ServerKind {
                push_every: Some(Duration::from_millis(5)),
                transport: crate::domain::Transport::Tcp,
            }
        );
    }

    #[test]
    fn targets_are_resolved_and_options_carried() {
        let c = run(&[
            "127.0.0.1:4242",
            "--source-ip",
            "127.0.0.2/31",
            "--control",
            "-",
            "--run-id",
            "job-7",
            "--workers",
            "3",
        ]);
        assert!(!c.no_target);
        assert_eq!(c.whole.targets, vec!["127.0.0.1:4242".parse().unwrap()]);
        assert_eq!(c.sources_given.len(), 2);
        assert!(c.control);
        assert_eq!(c.run_id.as_deref(), Some("job-7"));
        assert_eq!(c.workers, Some(3));
        assert_eq!(c.server.push_every, None);
    }

    #[test]
    fn a_target_on_port_0_is_refused() {
        let e = config(&["127.0.0.1:0"])
            .err()
            .expect("an error")
            .to_string();
        assert!(e.contains("port 0, which no server listens on"), "{e}");
    }

    /// The flags alone are checked before a name is resolved, and the
    /// scenario after.
    #[test]
    fn checks_keep_their_order() {
        let err = |args: &[&str]| config(args).err().expect("an error").to_string();
        // (No port: refused without a lookup.)
        let bad_target = "127.0.0.1";
        assert!(err(&[bad_target, "--control", "x"]).contains("--control takes '-'"));
        assert!(err(&[bad_target, "--source-ip", "nonsense"]).starts_with("--source-ip"));
        assert!(err(&[bad_target, "--connect-timeout", "0s"]).contains("cannot resolve target"));
        assert!(err(&["127.0.0.1:1", "--connect-timeout", "0s"]).contains("--connect-timeout"));
    }

    #[test]
    fn a_child_plan_is_read_from_stdin() {
        assert!(matches!(
            config(&["--child-plan"]).unwrap(),
            ClientCommand::ChildPlan
        ));
    }
}
