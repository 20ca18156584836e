//! `throng server`'s flags, and the server configuration they make.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::thread;
use std::time::Duration;

use anyhow::Result;
use clap::Args;

use super::{domain, parse_listen, parse_metrics_addr, parse_processes, ModeArg, PushOverArg};
use crate::domain::{Mode, Processes, PushOver};
use crate::server_config::{ServerConfig, ServerTls};
use crate::units::{parse_burst, parse_duration, parse_positive_count, parse_size};
use crate::usage::UsageError;

/// Largest --body-size accepted (each reply is built once, in memory).
const MAX_BODY: u64 = 64 << 20;

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

    /// push mode: how often each client is sent a message (or --burst).
    #[arg(long, value_name = "DURATION", default_value = "20ms", value_parser = parse_duration)]
    pub every: Duration,

    /// push mode: payload bytes of each message, after its 32-byte header
    /// (sequence number, send times) [default: 160, a 20 ms G.711 frame].
    #[arg(long, value_name = "SIZE", default_value = "160", value_parser = parse_size)]
    pub size: u64,

    /// push mode: messages sent back to back at each --every.
    #[arg(long, value_name = "K", default_value = "1", value_parser = parse_burst)]
    pub burst: u64,

    /// push mode: what TCP clients get the messages over. websocket: each
    /// connection upgrades first (RFC 6455), then gets one text message per
    /// push, `SEQ MONO_NS WALL_NS ` and --size bytes of filler.
    #[arg(long, value_name = "OVER", value_parser = domain::<PushOverArg, PushOver>(), default_value = "tcp")]
    pub push_over: PushOver,

    /// push mode with --udp: a UDP subscriber silent this long is dropped
    /// (a datagram `subscribe` subscribes and keeps it subscribed; `bye`
    /// ends it). At least 20s.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub udp_idle: Duration,

    /// Print a stats line every second on stderr even when it is not a
    /// terminal (it is printed on a terminal anyway).
    #[arg(long)]
    pub stats: bool,

    /// Append the per-second stats as one JSON object per line to FILE.
    #[arg(long, value_name = "FILE")]
    pub stats_json: Option<PathBuf>,

    /// Serve the server's counters for Prometheus at
    /// http://ADDR:PORT/metrics (connections, requests, bytes, errors, the
    /// kernel's listen queue drops; every process's, and each one's with a
    /// `process` label when there are several). Binds that address only.
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_metrics_addr)]
    pub metrics: Option<SocketAddr>,

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

    /// Internal: run as a child of --processes: the configuration is the
    /// first line on stdin (JSON), JSON lines go out on stdout.
    #[arg(long, hide = true)]
    pub child: bool,
}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

impl ServerArgs {
    /// Checks the flags that depend on each other and turns them into a
    /// configuration. Errors are usage errors (exit code 2).
    pub fn config(&self) -> Result<ServerConfig> {
        let fixed = self.mode == Mode::Fixed;
        if !fixed && self.reply.is_some() {
            return Err(usage(
                "--reply only applies to --mode fixed; add --mode fixed",
            ));
        }
        if !fixed && self.on_prefix.is_some() {
            return Err(usage("--on only applies to --mode fixed; add --mode fixed"));
        }
        let reply = match &self.reply {
            Some(r) => wire::escape::unescape(r).map_err(|e| usage(format!("--reply: {e}")))?,
            None if fixed => {
                return Err(usage(
                    "--mode fixed needs --reply STRING, e.g. --reply 'OK\\n'",
                ))
            }
            None => Vec::new(),
        };
        let on_prefix = match &self.on_prefix {
            Some(p) => wire::escape::unescape(p).map_err(|e| usage(format!("--on: {e}")))?,
            None => Vec::new(),
        };
        if self.udp && matches!(self.mode, Mode::Http | Mode::Fixed) {
            return Err(usage(format!(
                "--udp works with --mode echo, pong, dns, discard or push, not {} \
                 (its replies can be larger than the request)",
                self.mode.name()
            )));
        }
        if self.udp && self.mode == Mode::Websocket {
            return Err(usage(
                "--udp does not work with --mode websocket (WebSocket runs over TCP); drop --udp",
            ));
        }
        let push = self.mode == Mode::Push;
        let defaults = crate::server_config::PushConfig::default();
        if !push
            && (self.every.as_nanos() as u64 != defaults.every_ns
                || self.size != defaults.size as u64
                || self.burst != 1
                || self.udp_idle.as_nanos() as u64 != defaults.udp_idle_ns
                || self.push_over != defaults.over)
        {
            return Err(usage(
                "--every, --size, --burst, --udp-idle and --push-over only apply to --mode push; add --mode push",
            ));
        }
        if push && self.udp && self.push_over == PushOver::Websocket {
            return Err(usage(
                "--push-over websocket is for TCP clients; drop --udp (UDP subscribers get throng's push messages)",
            ));
        }
        if push && self.udp_idle < std::time::Duration::from_secs(20) {
            return Err(usage(
                "--udp-idle is at least 20s: throng clients say they are still there every 10 s",
            ));
        }
        if push && self.every.is_zero() {
            return Err(usage("--every must be above 0, e.g. 20ms"));
        }
        if push && self.tls {
            return Err(usage(
                "--mode push does not work with --tls yet; push over tcp or --udp",
            ));
        }
        if self.size > wire::push::MAX_MESSAGE as u64 - wire::push::HEADER as u64 {
            return Err(usage(
                "--size is at most 1048544 (a message is at most 1 MiB with its header)",
            ));
        }
        if push && self.udp && self.size > 65_507 - wire::push::HEADER as u64 {
            return Err(usage(
                "--size is at most 65475 with --udp (a message is one datagram)",
            ));
        }
        if self.max_pending == 0 {
            return Err(usage("--max-pending must be at least 1 byte, e.g. 64KiB"));
        }
        if self.body_size > MAX_BODY {
            return Err(usage("--body-size is at most 64MiB"));
        }
        let workers = match self.workers {
            Some(n) => n as usize,
            None => thread::available_parallelism().map_or(1, |n| n.get()),
        };
        Ok(ServerConfig {
            listen: self.listen.clone(),
            mode: self.mode,
            udp: self.udp,
            workers,
            backlog: self.backlog.min(i32::MAX as u64) as u32,
            max_pending: self.max_pending as usize,
            body_size: self.body_size as usize,
            dns_answer: self.dns_answer,
            dns_ttl: self.dns_ttl.as_secs().min(u32::MAX as u64) as u32,
            reply,
            on_prefix,
            stats: self.stats,
            stats_json: self.stats_json.clone(),
            metrics: self.metrics,
            processes: self.processes,
            max_connections: self.max_connections,
            child: false,
            elastic: false,
            channel: None,
            push: crate::server_config::PushConfig {
                every_ns: self.every.as_nanos().min(u64::MAX as u128) as u64,
                size: self.size as usize,
                burst: self.burst.min(u32::MAX as u64) as u32,
                udp_idle_ns: self.udp_idle.as_nanos().min(u64::MAX as u128) as u64,
                over: self.push_over,
            },
            tls: if self.tls {
                Some(ServerTls::load(self.cert.as_deref(), self.key.as_deref())?)
            } else {
                None
            },
        })
    }
}
