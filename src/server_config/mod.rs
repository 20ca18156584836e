//! The server's configuration: plain data, serde, no clap types (the
//! flags that make it are [`crate::cli`]'s), beside the scenario in the
//! bottom layers: the commands that start a server and the server itself
//! both read it. A child of --processes is given it whole, as JSON.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

mod certs;

use crate::domain::{Mode, Processes, PushOver};
pub use certs::ServerTls;

/// The port the server listens on when no --listen is given.
pub const DEFAULT_PORT: u16 = 4242;

/// A validated server configuration: plain data, no clap types.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerConfig {
    /// Addresses to listen on; empty means the default (dual-stack
    /// `[::]:4242`, or `0.0.0.0:4242` where IPv6 is off).
    pub listen: Vec<SocketAddr>,
    pub mode: Mode,
    pub udp: bool,
    pub workers: usize,
    pub backlog: u32,
    pub max_pending: usize,
    pub body_size: usize,
    pub dns_answer: Ipv4Addr,
    pub dns_ttl: u32,
    pub reply: Vec<u8>,
    pub on_prefix: Vec<u8>,
    pub stats: bool,
    pub stats_json: Option<PathBuf>,
    /// --metrics: where the Prometheus endpoint listens (the parent's
    /// alone in a group of processes).
    #[serde(default)]
    pub metrics: Option<SocketAddr>,
    #[serde(default = "one_process")]
    pub processes: Processes,
    #[serde(default)]
    pub max_connections: u64,
    /// --tls: the certificate and key every TCP listener serves with.
    #[serde(default)]
    pub tls: Option<ServerTls>,
    /// A child of --processes: the parent checked the ports and reads
    /// JSON lines.
    #[serde(default)]
    pub child: bool,
    /// A child of an elastic group (--processes auto).
    #[serde(default)]
    pub elastic: bool,
    /// A child of an elastic group: the fds of the group's channel for
    /// connections a full member cannot hold (see `sys::fd_handoff`).
    #[serde(default)]
    pub channel: Option<[i32; 2]>,
    /// --mode push: what is sent, how often.
    #[serde(default)]
    pub push: PushConfig,
}

/// --mode push: every subscriber gets `burst` messages of `size` payload
/// bytes (after the 32-byte header) every `every_ns`; a UDP subscriber
/// silent for `udp_idle_ns` is dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PushConfig {
    pub every_ns: u64,
    pub size: usize,
    pub burst: u32,
    pub udp_idle_ns: u64,
    /// What TCP subscribers get the messages over.
    #[serde(default)]
    pub over: PushOver,
}

impl Default for PushConfig {
    /// A 20 ms G.711 voice frame (160 bytes) to each client.
    fn default() -> Self {
        PushConfig {
            every_ns: 20_000_000,
            size: 160,
            burst: 1,
            udp_idle_ns: 30_000_000_000,
            over: PushOver::Tcp,
        }
    }
}

fn one_process() -> Processes {
    Processes::Count(1)
}

impl ServerConfig {
    /// A server started inside another command (client, compare): one
    /// worker on 127.0.0.1, a free port, defaults otherwise.
    pub fn embedded(mode: Mode, udp: bool, tls: Option<ServerTls>) -> ServerConfig {
        ServerConfig {
            listen: vec![SocketAddr::from((Ipv4Addr::LOCALHOST, 0))],
            mode,
            udp,
            workers: 1,
            backlog: 65_535,
            max_pending: 64 * 1024,
            body_size: 2,
            dns_answer: Ipv4Addr::new(192, 0, 2, 1),
            dns_ttl: 60,
            reply: Vec::new(),
            on_prefix: Vec::new(),
            stats: false,
            stats_json: None,
            metrics: None,
            processes: Processes::Count(1),
            max_connections: 1_000_000,
            child: false,
            elastic: false,
            channel: None,
            tls,
            push: PushConfig::default(),
        }
    }
}
