//! Command-line flags (clap derive); the units they take are [`crate::units`].
//!
//! This module only parses: it turns flags into plain values and leaves
//! checks that need more than one flag, and every syscall, to the code that
//! builds a scenario or a server configuration from them.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::domain::{
    Arrivals, ConnectMode, Mode, Processes, Proto, Role, Segment, Spread, Transport,
};

use crate::units::{
    parse_count, parse_duration, parse_positive_count, parse_rate, parse_size, parse_start_at,
};

/// Find the limits of TCP servers under a huge number of clients.
#[derive(Debug, Parser)]
#[command(name = "throng", version, propagate_version = true)]
#[command(
    after_help = "Numbers take k/m/g suffixes (10k = 10,000), sizes B/KiB/MiB/GiB \
(64KiB), durations us/ms/s/m/h (2.5s)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Open, hold and account for many TCP connections to a server (with no
    /// target: to an embedded echo server).
    Client(Box<ClientArgs>),
    /// Run the reference server: echo, pong, http, dns, discard or fixed replies.
    Server(ServerArgs),
    /// Run one client scenario sliced over many hosts through OpenSSH, with
    /// one live view and one merged result.
    Cluster(ClusterArgs),
    /// Explain (and with --apply fix) the OS limits that cap connections.
    Tune(TuneArgs),
    /// Merge the JSON results of a run's segments (or processes, or hosts)
    /// into one: counters summed, histograms added, seconds aligned.
    Merge(MergeArgs),
    /// The same DNS workload over UDP, TCP per query, persistent TCP and
    /// TLS, one after another, in one table.
    Compare(CompareArgs),
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
    /// Which side of a test this host plays.
    RoleArg => Role {
        Client,
        Server,
        Both,
    }
}

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Address to listen on, repeatable. Port 0 picks a free port; the bound
    /// addresses are printed at start.
    /// [default: [::]:4242 (dual-stack), or 0.0.0.0:4242 where IPv6 is off]
    #[arg(short, long, value_name = "ADDR:PORT", value_parser = parse_listen)]
    pub listen: Vec<SocketAddr>,

    /// What to answer.
    #[arg(short, long, value_parser = domain::<ModeArg, Mode>(), default_value = "echo")]
    pub mode: Mode,

    /// Also serve the mode over UDP on the same port(s) (echo, pong, dns, discard).
    #[arg(long)]
    pub udp: bool,

    /// Terminate TLS on the TCP listeners (every mode). Without --cert and
    /// --key, a self-signed certificate is made at start.
    #[arg(long)]
    pub tls: bool,

    /// --tls: the certificate chain, PEM.
    #[arg(long, value_name = "FILE", requires_all = ["tls", "key"])]
    pub cert: Option<PathBuf>,

    /// --tls: the private key, PEM.
    #[arg(long, value_name = "FILE", requires_all = ["tls", "cert"])]
    pub key: Option<PathBuf>,

    /// Event-loop threads, each with its own SO_REUSEPORT listener
    /// [default: all cores].
    #[arg(short, long, value_name = "N", value_parser = parse_positive_count)]
    pub workers: Option<u64>,

    /// Listen backlog (accept queue length) asked of the kernel, which clamps
    /// it to net.core.somaxconn.
    #[arg(long, value_name = "N", default_value = "65535", value_parser = parse_positive_count)]
    pub backlog: u64,

    /// Unsent reply bytes one connection may hold before the server stops
    /// reading from it until its output drains.
    #[arg(long, value_name = "SIZE", default_value = "64KiB", value_parser = parse_size)]
    pub max_pending: u64,

    /// http mode: body size of the 200 reply, in bytes of 'A'.
    #[arg(long, value_name = "SIZE", default_value = "2", value_parser = parse_size)]
    pub body_size: u64,

    /// dns mode: the address given in every A answer.
    #[arg(long, value_name = "IPV4", default_value = "192.0.2.1")]
    pub dns_answer: Ipv4Addr,

    /// dns mode: TTL of the A answer.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub dns_ttl: Duration,

    /// fixed mode: the reply, with escapes \r \n \t \0 \\ \xNN.
    #[arg(long, value_name = "STRING")]
    pub reply: Option<String>,

    /// fixed mode: answer only chunks starting with this prefix (same escapes)
    /// [default: every chunk].
    #[arg(long = "on", value_name = "PREFIX")]
    pub on_prefix: Option<String>,

    /// Print a stats line every second on stderr even when it is not a
    /// terminal (it is printed on a terminal anyway).
    #[arg(long)]
    pub stats: bool,

    /// Append the per-second stats as one JSON object per line to FILE.
    #[arg(long, value_name = "FILE")]
    pub stats_json: Option<PathBuf>,

    /// Processes sharing the port (SO_REUSEPORT), each with its own fd
    /// limit. auto: one process, and one more each time the open ones near
    /// their fd limit, up to what --max-connections needs; N: N from the
    /// start.
    #[arg(long, value_name = "N|auto", default_value = "auto", value_parser = parse_processes)]
    pub processes: Processes,

    /// Connections to be able to hold, for --processes auto (lowered to what
    /// 80% of MemAvailable and fs.file-max allow).
    #[arg(long, value_name = "N", default_value = "1m", value_parser = parse_positive_count)]
    pub max_connections: u64,

    /// Internal: run as a child of --processes (JSON lines on stdout).
    #[arg(long, hide = true)]
    pub child: bool,

    /// Internal: a child of --processes auto: says when it is half full
    /// and nearly full (the parent steers new connections to it and away).
    #[arg(long, hide = true, requires = "child")]
    pub elastic: bool,
}

#[derive(Debug, Args)]
pub struct ClientArgs {
    /// Servers to connect to, as HOST:PORT (names resolved once at start;
    /// IPv6 as [::1]:53). Connections are spread round-robin over them.
    /// With none, an embedded echo server is started on 127.0.0.1.
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
    #[arg(long, conflicts_with = "pause")]
    pub hold: bool,

    /// After the ramp, wait for Enter on stdin before closing (multi-host
    /// max-connection tests).
    #[arg(long)]
    pub pause: bool,

    /// Close each connection this long after it opened.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub lifetime: Option<Duration>,

    /// Open a new connection in place of each one that ends: by --lifetime
    /// (connection churn), --close-on-timeout, or the server's doing.
    #[arg(long)]
    pub reconnect: bool,

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

    /// A condition on the result, by its JSON key, e.g. queries.answered>=99.5%,
    /// latency.response_time_us.p99<5ms, connections.failed==0 (repeatable;
    /// exit 1 when one fails). Default with queries: queries.answered>=99%;
    /// `none` for no check.
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
    #[arg(long, value_name = "N", default_value = "42", value_parser = parse_count, help_heading = "Traffic")]
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

    /// Read commands from stdin while running: `rate R`, `connections N`, `stop`.
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

    /// echo: check every echoed byte; mismatches count as errors.
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

    /// Run slice K of N of the scenario: its share of connections and rate,
    /// its own source addresses and seed. N slices offer exactly the whole.
    #[arg(long, value_name = "K/N", value_parser = parse_segment, help_heading = "Scale out")]
    pub segment: Option<Segment>,

    /// Wait until this wall-clock time (RFC 3339 or Unix seconds) before
    /// connecting, so that slices on many hosts start together.
    #[arg(long, value_name = "TIME", value_parser = parse_start_at, help_heading = "Scale out")]
    pub start_at: Option<f64>,

    /// Processes to run the scenario in (each one segment with its own fd
    /// limit), merged into one result; auto: as many as the fd limit needs.
    #[arg(long, value_name = "N|auto", default_value = "auto", value_parser = parse_processes, help_heading = "Scale out")]
    pub processes: Processes,

    /// Internal: run as a child of --processes (per-second JSON lines on stdout).
    #[arg(long, hide = true)]
    pub child: bool,

    /// No live view (the summary is still printed).
    #[arg(short, long)]
    pub quiet: bool,

    /// Run even when the preflight finds the plan impossible.
    #[arg(long)]
    pub force: bool,
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

    /// Copy this throng binary to each host first (to /tmp over ssh).
    #[arg(long)]
    pub copy_binary: bool,

    /// How long after now all hosts start together (time for ssh to connect).
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = parse_duration)]
    pub start_in: Duration,

    /// Write the merged result as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

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
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Result files written by `throng client --json`.
    #[arg(value_name = "RESULT.json", required = true)]
    pub results: Vec<PathBuf>,

    /// Write the merged result as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// A condition on the merged result (as `throng client --check`);
    /// repeatable. Default with queries: queries.answered>=99%.
    #[arg(long = "check", value_name = "EXPR")]
    pub check: Vec<String>,
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

fn parse_segment(s: &str) -> Result<Segment, String> {
    let err = || format!("'{s}' is not a segment K/N with 1 <= K <= N, e.g. 2/4");
    let (k, n) = s.split_once('/').ok_or_else(err)?;
    let (index, count): (u64, u64) = (k.parse().map_err(|_| err())?, n.parse().map_err(|_| err())?);
    if index == 0 || index > count {
        return Err(err());
    }
    Ok(Segment { index, count })
}

/// `[::]:53`, `127.0.0.1:0`; a bare port means all addresses.
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
