//! Command-line flags (clap derive) and their conversion into the plain
//! values the rest of throng takes: the client's flags become a
//! [`crate::scenario::Scenario`] (in `scenario`), the server's a
//! [`crate::server_config::ServerConfig`]. Flag value names are this
//! module's own (clap `ValueEnum`s converted at once into
//! [`crate::domain`] types); the units they take are [`crate::units`].
//!
//! `throng cluster`'s and `throng compare`'s flags become a
//! [`crate::cluster::ssh::ClusterConfig`] and a
//! [`crate::compare::CompareConfig`], the client's a
//! [`crate::client::ClientConfig`] (the flags checked, the targets
//! resolved, the whole scenario built), `throng limit`'s a
//! [`crate::limit::LimitConfig`]. Below cli nothing sees a flag.

mod client;
mod cluster;
pub mod docs;
mod help;
mod scenario;
mod server;
pub mod url;
pub use help::{command, examples_text, peer_flag, EXAMPLES};

pub use client::ClientArgs;
pub use server::ServerArgs;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::domain::{
    Arrivals, ConnectMode, Mode, Processes, Proto, PushFormat, PushOver, Role, Segment, Spread,
    Transport,
};
use crate::limit::{ClientFlags, Find, LimitConfig};
use crate::units::{parse_duration, parse_positive_count, parse_rate};

/// Find the limits of TCP servers under a huge number of clients.
#[derive(Debug, Parser)]
#[command(name = "throng", version = crate::VERSION_LINE, propagate_version = true)]
#[command(
    after_help = "Numbers take k/m/g suffixes (10k = 10,000), sizes B/KiB/MiB/GiB \
(64KiB), durations ns/us/ms/s/m/h (2.5s). Counts and sizes are whole (1.5k = 1500; \
1.5 bytes is refused), counts at most 2^53, durations at most 10 years; times are \
RFC 3339 (2026-11-22T10:00:00Z) or Unix seconds."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Open, hold and account for many TCP connections to a server (with no
    /// target: to an embedded echo server).
    #[command(allow_negative_numbers = true)]
    Client(Box<ClientArgs>),
    /// Run the reference server: echo, pong, http, dns, discard or fixed replies.
    #[command(allow_negative_numbers = true)]
    Server(ServerArgs),
    /// Run one client scenario sliced over many hosts through OpenSSH, with
    /// one live view and one merged result.
    #[command(allow_negative_numbers = true)]
    Cluster(ClusterArgs),
    /// Explain (and with --apply fix) the OS limits that cap connections.
    #[command(allow_negative_numbers = true)]
    Tune(TuneArgs),
    /// Merge the JSON results of a run's segments (or processes, or hosts)
    /// into one: counters summed, histograms added, seconds aligned.
    Merge(MergeArgs),
    /// The same DNS workload over UDP, TCP per query, persistent TCP and
    /// TLS, one after another, in one table.
    #[command(allow_negative_numbers = true)]
    Compare(CompareArgs),
    /// Print a shell's completion script (bash, zsh, fish, elvish, powershell).
    ///
    /// For example `throng completions bash >
    /// ~/.local/share/bash-completion/completions/throng`, `throng
    /// completions zsh > ~/.zfunc/_throng` (with ~/.zfunc in fpath),
    /// `throng completions fish > ~/.config/fish/completions/throng.fish`.
    Completions(CompletionsArgs),
    /// Print the manual page throng(1): every command in one page (roff).
    ///
    /// Read it with `throng man | man -l -`, or install it with `throng man >
    /// /usr/local/share/man/man1/throng.1`.
    Man,
    /// An HTML report (inline SVG charts, nothing fetched when opened) and
    /// HdrHistogram .hgrm spectra of results; several are overlaid.
    Report(ReportArgs),
    /// Find where a server stops keeping up: the most connections it holds
    /// or the highest rate it answers, by a search of client runs, and why.
    #[command(allow_negative_numbers = true)]
    Limit(Box<LimitArgs>),
}

/// `throng limit`: a search of client runs. Every `throng client` flag
/// means the same here; -c (connections) or -r (rate) is the first step's
/// load, and --json holds the search and every step's result.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// connections: the most the server holds; rate: the highest query
    /// rate it answers over -c connections.
    #[arg(long, value_parser = domain::<FindArg, Find>(), help_heading = "Search")]
    pub find: Find,

    /// The highest load to try (connections, or queries/s); a search that
    /// passes there ends: no limit below it.
    #[arg(long, value_name = "N|R", value_parser = parse_rate, help_heading = "Search")]
    pub max: Option<f64>,

    /// How long each step holds its load after its ramp [default: 5s for
    /// connections, 10s for rate].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = "Search")]
    pub step_time: Option<Duration>,

    /// The search ends when (fail - pass) / pass is within this share.
    #[arg(long, value_name = "SHARE", default_value = "5%", value_parser = parse_share, help_heading = "Search")]
    pub precision: f64,

    #[command(flatten)]
    pub client: ClientArgs,
}

impl LimitArgs {
    /// The search these flags ask for, as plain data (URL targets
    /// applied, as each step applies them).
    pub fn config(&self) -> anyhow::Result<LimitConfig> {
        let c = &self.client.with_urls()?;
        Ok(LimitConfig {
            find: self.find,
            max: self.max,
            // Holding connections needs less time than measuring a rate:
            // a search for a limit under 10k connections ends in 90 s.
            step_time: self.step_time.unwrap_or(match self.find {
                Find::Connections => Duration::from_secs(5),
                Find::Rate => Duration::from_secs(10),
            }),
            precision: self.precision,
            client: ClientFlags {
                targets: c.targets.clone(),
                connections: c.connections,
                rate: c.rate,
                connect_rate: c.connect_rate,
                connect_timeout: c.connect_timeout,
                timeout: c.timeout,
                workers: c.workers,
                source_ips: c.source_ip.len(),
                processes: c.processes,
                transport: c.transport,
                proto: c.proto,
                server: c.server_kind(),
                connections_schedule: c.connections_schedule.clone(),
                lifetime: c.lifetime,
                max_queries_per_conn: c.max_queries_per_conn,
                messages: c.messages,
                schedule: c.schedule.clone(),
                schedule_file: c.schedule_file.clone(),
                interval: c.interval,
                queries: c.queries,
                closed_loop: c.closed_loop,
                check: c.check.clone(),
                verify: c.verify && !c.no_verify,
                views: c.views.views(),
                json: c.json.clone(),
                segment: c.segment,
                child: c.child || c.child_plan,
                control: c.control.is_some(),
                pause: c.pause,
                hold: c.hold,
            },
        })
    }
}

/// `5%` or `0.05`.
fn parse_share(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (v, pct) = match t.strip_suffix('%') {
        Some(v) => (v, true),
        None => (t, false),
    };
    let x = v
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .map(|x| if pct { x / 100.0 } else { x })
        .ok_or_else(|| format!("'{s}' is not a share: give 5% or 0.05"))?;
    if x <= 0.0 || x >= 1.0 {
        return Err(format!(
            "'{s}' is not a share above 0 and below 100%: give 5% or 0.05"
        ));
    }
    Ok(x)
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell the script is for.
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// The files a person looks at, beside the JSON result.
#[derive(Debug, Clone, Default, Args)]
pub struct ViewArgs {
    /// Write a report to FILE: one HTML page that needs nothing else (inline
    /// SVG charts; no script, no font, nothing fetched when opened).
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub html: Option<PathBuf>,

    /// Write the percentile spectra of response and service time in
    /// HdrHistogram's .hgrm text format, in ms: PREFIX.response.hgrm and
    /// PREFIX.service.hgrm (several runs: PREFIX.RUN.response.hgrm ...);
    /// of --proto push, PREFIX.push_gap.hgrm, .push_jitter and .push_delay.
    #[arg(long, value_name = "PREFIX", help_heading = "Reports")]
    pub hgrm: Option<PathBuf>,

    /// A `throng server --stats-json` file of the same run: the report's
    /// connections chart shows the server's accepted/s, ListenOverflows
    /// and ListenDrops.
    #[arg(long, value_name = "FILE", requires = "html", help_heading = "Reports")]
    pub server_stats: Option<PathBuf>,
}

impl ViewArgs {
    pub fn views(&self) -> crate::report::Views {
        crate::report::Views {
            html: self.html.clone(),
            hgrm: self.hgrm.clone(),
            server_stats: self.server_stats.clone(),
        }
    }
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Result files (of `throng client`, `merge` or `cluster --json`), or
    /// the `--json` of `throng compare` (each of its runs). Several are
    /// drawn over each other, a legend entry each. A `throng limit --json`
    /// file, alone: its curve (--html), or its steps by load as text.
    #[arg(value_name = "RESULT.json", required = true)]
    pub results: Vec<PathBuf>,

    #[command(flatten)]
    pub views: ViewArgs,
}

/// A flag's value names and their help (the clap side of a domain type):
/// `$arg` is what clap parses and shows, converted at once into `$domain`
/// by a match that the compiler checks covers every value.
macro_rules! flag_values {
    ($(#[$meta:meta])* $arg:ident => $domain:ident {
        $($(#[$vmeta:meta])* $value:ident,)*
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
        enum $arg {
            $($(#[$vmeta])* $value,)*
        }

        impl From<$arg> for $domain {
            fn from(v: $arg) -> $domain {
                match v {
                    $($arg::$value => $domain::$value,)*
                }
            }
        }
    };
}

/// Parses a flag by the value names of `A` into the domain type `D`.
fn domain<A, D>() -> impl TypedValueParser<Value = D>
where
    A: ValueEnum + Clone + Send + Sync + 'static,
    D: From<A> + Clone + Send + Sync + 'static,
{
    clap::builder::EnumValueParser::<A>::new().map(D::from)
}

flag_values! {
    /// What the reference server answers.
    ModeArg => Mode {
        /// Every byte received is sent back.
        Echo,
        /// Line protocol: `ping<rest>` is answered `pong<rest>`, other lines `error`.
        Pong,
        /// HTTP/1.1: a fixed keep-alive `200 OK` for every request.
        Http,
        /// DNS over TCP (and UDP with --udp): one A record for A queries.
        Dns,
        /// Reads and drops everything.
        Discard,
        /// Sends --reply for every received chunk that starts with --on.
        Fixed,
        /// Sends every client a message each --every (TCP: every connection;
        /// UDP: every peer that sent a datagram), and reads nothing.
        Push,
        /// WebSocket: the upgrade, then every message sent back as the same
        /// type; pings answered, the close handshake done.
        #[value(alias = "ws")]
        Websocket,
    }
}

flag_values! {
    /// What a push server's TCP clients get its messages over.
    PushOverArg => PushOver {
        /// The bare stream: throng's push messages back to back.
        Tcp,
        /// WebSocket: the upgrade, then one text message per push, its
        /// sequence number in decimal first.
        #[value(alias = "ws")]
        Websocket,
    }
}

flag_values! {
    /// How connections are opened.
    ConnectModeArg => ConnectMode {
        /// Up to --max-inflight-connects non-blocking connects at once.
        Async,
        /// One connection at a time, each completed before the next starts.
        Sync,
    }
}

flag_values! {
    /// How queries travel.
    TransportArg => Transport {
        /// Persistent TCP connections.
        Tcp,
        /// One connected UDP socket per "connection"; a lost datagram times out.
        Udp,
        /// A new TCP connection for every query (up to --concurrency at once).
        TcpPerQuery,
        /// TLS over persistent TCP connections (rustls).
        #[value(alias = "dot")]
        Tls,
    }
}

flag_values! {
    /// What queries are made of.
    ProtoArg => Proto {
        /// DNS over TCP: a query for --qname/--qtype, matched by ID.
        Dns,
        /// --size byte messages (magic, sequence, timestamp, pattern), echoed back.
        Echo,
        /// `ping <seq>` lines answered `pong <seq>` (throng server --mode pong).
        Ping,
        /// HTTP/1.1 requests (--http-request), responses framed by length or chunks.
        Http,
        /// --message bytes; each --marker in the reply completes the oldest query.
        Raw,
        /// Sends nothing (UDP: subscribes) and measures what the server
        /// pushes every --every (throng server --mode push, or lines).
        Push,
        /// WebSocket: the upgrade (--ws-path), then one message per query
        /// (-m, --message-file or --size bytes), echoed back.
        #[value(alias = "ws")]
        Websocket,
        /// Redis (RESP2): --redis-command in turn (default PING), replies
        /// framed by type; an error reply is a failed answer.
        Redis,
    }
}

flag_values! {
    /// How --proto push reads the server's messages.
    PushFormatArg => PushFormat {
        /// throng server --mode push's: sequence number and send times.
        Throng,
        /// One message per line, its sequence number in decimal first.
        Line,
    }
}

flag_values! {
    /// How queries are spread over connections (open loop).
    SpreadArg => Spread {
        Random,
        RoundRobin,
    }
}

flag_values! {
    /// Inter-arrival times of the open-loop query stream.
    ArrivalsArg => Arrivals {
        /// Exponential gaps (a Poisson process), seeded by --seed.
        Poisson,
        /// Equal gaps.
        Constant,
    }
}

flag_values! {
    /// What `throng limit` searches for.
    FindArg => Find {
        /// The most connections the server holds (established, verified,
        /// none failed).
        Connections,
        /// The highest query rate it answers over -c connections.
        Rate,
    }
}

flag_values! {
    /// Which side of a test this host plays.
    RoleArg => Role {
        Client,
        Server,
        Both,
    }
}

#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Load hosts, one `user@host[:port]` per line (`#` starts a comment).
    #[arg(long, value_name = "FILE")]
    pub hosts: PathBuf,

    /// Passed to ssh as `-o OPTION` (repeatable), e.g. IdentityFile=~/.ssh/load.
    #[arg(long = "ssh-option", value_name = "OPTION")]
    pub ssh_option: Vec<String>,

    /// throng on the load hosts.
    #[arg(long, value_name = "PATH", default_value = "throng")]
    pub binary: String,

    /// Copy this throng, stripped, to every host first (a few at a time;
    /// its SHA-256 checked there; kept for the next run) into the user's
    /// cache directory there (~/.cache/throng) or --remote-dir.
    #[arg(long)]
    pub copy_binary: bool,

    /// Where --copy-binary puts throng on each host: a directory on a file
    /// system mounted with exec (not /tmp where it is noexec).
    #[arg(long, value_name = "DIR", requires = "copy_binary")]
    pub remote_dir: Option<String>,

    /// How long the hosts have to connect over ssh and report ready with
    /// their plans; all then start together.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub start_in: Duration,

    /// The largest clock offset of a host against this one (measured over
    /// its ssh session before the start) the run accepts.
    #[arg(long, value_name = "DURATION", default_value = "50ms", value_parser = parse_duration)]
    pub max_clock_offset: Duration,

    /// Write the merged result as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    #[command(flatten)]
    pub views: ViewArgs,

    /// No live view (the summary is still printed).
    #[arg(short, long)]
    pub quiet: bool,

    /// A condition on the merged result (as `throng client --check`);
    /// repeatable; the client arguments' own --check when none is given.
    #[arg(long = "check", value_name = "EXPR")]
    pub check: Vec<String>,

    /// The `throng client` arguments every host runs (after `--`).
    #[arg(last = true, required = true, value_name = "CLIENT ARGS")]
    pub client_args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct TuneArgs {
    /// Connections to plan for.
    #[arg(short, long, value_name = "N", default_value = "100k", value_parser = parse_positive_count)]
    pub connections: u64,

    /// The side of the test this host plays.
    #[arg(long, value_parser = domain::<RoleArg, Role>(), default_value = "both")]
    pub role: Role,

    /// Apply the sysctl changes listed (root only), printing each old -> new.
    #[arg(long)]
    pub apply: bool,

    /// Print the plan as JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Measure this host's connect() curve (up to 30 s): the rate of
    /// connect() against the connections one (source, destination) pair
    /// holds, on loopback. Its knee is kept (~/.cache/throng) and source
    /// plans follow it while the kernel and port range stay the same.
    #[arg(long, conflicts_with = "apply")]
    pub measure: bool,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The DNS server, HOST:PORT (TLS goes to --tls-port on the same host).
    /// With none, an embedded DNS server (UDP, TCP and TLS) is started.
    #[arg(value_name = "HOST:PORT")]
    pub target: Option<String>,

    /// Transports to run, in order.
    #[arg(
        long,
        value_parser = domain::<TransportArg, Transport>(),
        value_delimiter = ',',
        default_value = "udp,tcp-per-query,tcp,tls"
    )]
    pub transports: Vec<Transport>,

    /// Queries per run: with --rate the run lasts QUERIES / RATE; without,
    /// they go one after another on one connection per transport.
    #[arg(long, value_name = "N", value_parser = parse_positive_count, conflicts_with = "duration")]
    pub queries: Option<u64>,

    /// Length of each run.
    #[arg(short = 'T', long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,

    /// Queries per second, the same for every transport.
    #[arg(short, long, value_name = "RATE", value_parser = parse_rate, conflicts_with = "closed_loop")]
    pub rate: Option<f64>,

    /// As fast as answers come: each connection (or, per query, each of
    /// --concurrency slots) sends its next query when one is answered.
    #[arg(long)]
    pub closed_loop: bool,

    /// Connections (UDP sockets) for udp, tcp and tls.
    #[arg(short, long, value_name = "N", default_value = "10", value_parser = parse_positive_count)]
    pub connections: u64,

    /// tcp-per-query: connections open at once at most.
    #[arg(long, value_name = "N", default_value = "100", value_parser = parse_positive_count)]
    pub concurrency: u64,

    /// tcp and tls: run once per value, recycling connections after that
    /// many queries ("none": never), e.g. none,100,10.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "none"
    )]
    pub max_queries_per_conn: Vec<String>,

    /// Outstanding queries per connection (closed loop: 1).
    #[arg(long, value_name = "K", value_parser = parse_positive_count)]
    pub window: Option<u64>,

    /// Query name and type.
    #[arg(long, default_value = "example.com")]
    pub qname: String,
    #[arg(long, default_value = "A")]
    pub qtype: String,

    /// Per-query timeout.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// A run of this length before each measured one, not counted (0 to skip).
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub warmup: Duration,

    /// tls: port of the DNS-over-TLS service on the target's host.
    #[arg(long, value_name = "PORT", default_value = "853")]
    pub tls_port: u16,

    /// tls: trust these certificates (PEM).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,

    /// tls: accept any certificate.
    #[arg(long, conflicts_with = "tls_ca")]
    pub tls_insecure: bool,

    /// tls: server name to send and check.
    #[arg(long, value_name = "NAME")]
    pub sni: Option<String>,

    /// Write every run's full result as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    #[command(flatten)]
    pub views: ViewArgs,
}

impl CompareArgs {
    /// The comparison these flags ask for, as plain data.
    pub fn config(&self) -> crate::compare::CompareConfig {
        crate::compare::CompareConfig {
            target: self.target.clone(),
            transports: self.transports.clone(),
            queries: self.queries,
            duration: self.duration,
            rate: self.rate,
            closed_loop: self.closed_loop,
            connections: self.connections,
            concurrency: self.concurrency,
            max_queries_per_conn: self.max_queries_per_conn.clone(),
            window: self.window,
            qname: self.qname.clone(),
            qtype: self.qtype.clone(),
            timeout: self.timeout,
            warmup: self.warmup,
            tls_port: self.tls_port,
            tls_ca: self.tls_ca.clone(),
            tls_insecure: self.tls_insecure,
            sni: self.sni.clone(),
            json: self.json.clone(),
            views: self.views.views(),
        }
    }
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Result files written by `throng client --json`; a directory stands
    /// for the *.json files in it (each slice's `--json DIR`).
    #[arg(value_name = "RESULT.json|DIR", required = true)]
    pub results: Vec<PathBuf>,

    /// Write the merged result as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    #[command(flatten)]
    pub views: ViewArgs,

    /// A condition on the merged result (as `throng client --check`);
    /// repeatable; added to the defaults (with queries: queries.ok>=99%).
    #[arg(long = "check", value_name = "EXPR")]
    pub check: Vec<String>,
}

/// Parses the words after `throng client`, as a host of `throng cluster`
/// will; the error is clap's message.
pub fn client_args(args: &[String]) -> Result<ClientArgs, String> {
    let argv = ["throng", "client"]
        .into_iter()
        .map(String::from)
        .chain(args.iter().cloned());
    match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: Command::Client(a),
        }) => Ok(*a),
        Ok(_) => unreachable!("parsed as client"),
        Err(e) => Err(e.to_string().trim().to_string()),
    }
}

/// `throng limit`'s arguments from a list (`throng cluster -- limit ...`:
/// the words after `limit`).
pub fn limit_args(args: &[String]) -> Result<LimitArgs, String> {
    let argv = ["throng", "limit"]
        .into_iter()
        .map(String::from)
        .chain(args.iter().cloned());
    match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: Command::Limit(a),
        }) => Ok(*a),
        Ok(_) => unreachable!("parsed as limit"),
        Err(e) => Err(e.to_string().trim().to_string()),
    }
}

fn parse_processes(s: &str) -> Result<Processes, String> {
    if s == "auto" {
        return Ok(Processes::Auto);
    }
    match parse_positive_count(s) {
        Ok(n) if n <= 1024 => Ok(Processes::Count(n)),
        _ => Err(format!(
            "'{s}' is not a process count; use auto or 1..=1024"
        )),
    }
}

/// A run id: what a launcher has at hand (a job id, a uid, a name), in
/// words that stay one word in a file name and a shell.
fn parse_run_id(s: &str) -> Result<String, String> {
    let fits = |c: char| c.is_ascii_alphanumeric() || "-_.:@+".contains(c);
    if s.is_empty() || s.len() > 128 || !s.chars().all(fits) {
        return Err(format!(
            "'{s}' is not a run id: 1 to 128 of letters, digits and - _ . : @ +"
        ));
    }
    Ok(s.to_string())
}

/// `K/N`, or `auto`: the launcher's (see [`crate::cluster::launcher`]).
fn parse_segment(s: &str) -> Result<Segment, String> {
    if s == "auto" {
        return crate::cluster::launcher::segment_from(&|name| std::env::var(name).ok());
    }
    let err = || format!("'{s}' is not a segment K/N with 1 <= K <= N, e.g. 2/4");
    let (k, n) = s.split_once('/').ok_or_else(err)?;
    let (index, count): (u64, u64) = (k.parse().map_err(|_| err())?, n.parse().map_err(|_| err())?);
    if index == 0 || index > count {
        return Err(err());
    }
    Ok(Segment { index, count })
}

/// `[::]:53`, `127.0.0.1:0`; a bare port means all addresses.
/// `--metrics ADDR:PORT`: an address and a port, both given (a bare port
/// would mean every interface, which nobody should get by accident).
fn parse_metrics_addr(s: &str) -> Result<SocketAddr, String> {
    s.parse().map_err(|_| {
        format!(
            "'{s}' is not ADDR:PORT; examples: 127.0.0.1:9464, [::1]:9464, 0.0.0.0:9464 (every \
             interface), 127.0.0.1:0 (a free port, printed at start)"
        )
    })
}

fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)));
    }
    s.parse().map_err(|_| {
        format!("'{s}' is not ADDR:PORT; examples: 127.0.0.1:4242, [::1]:0, 0.0.0.0:53")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_and_processes() {
        assert_eq!(parse_segment("2/4"), Ok(Segment { index: 2, count: 4 }));
        assert!(parse_segment("0/4").is_err());
        assert!(parse_segment("5/4").unwrap_err().contains("2/4"));
        assert_eq!(parse_processes("auto"), Ok(Processes::Auto));
        assert_eq!(parse_processes("8"), Ok(Processes::Count(8)));
        assert!(parse_processes("0").is_err());
    }

    #[test]
    fn listen_forms() {
        assert_eq!(
            parse_listen("127.0.0.1:0"),
            Ok("127.0.0.1:0".parse().unwrap())
        );
        assert_eq!(parse_listen("[::1]:53"), Ok("[::1]:53".parse().unwrap()));
        assert_eq!(parse_listen("53"), Ok("[::]:53".parse().unwrap()));
        assert!(parse_listen("localhost")
            .unwrap_err()
            .contains("127.0.0.1:4242"));
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
