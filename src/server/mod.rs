//! The reference server: one worker thread per core, each with its own
//! SO_REUSEPORT listener(s) and event loop, answering with the same codecs
//! (crates/wire) the client uses. This module binds the sockets, starts the
//! workers, prints the start-up banner, the per-second stats and the final
//! summary; the workers do the serving.

mod multi;
mod responder;
pub mod stats;
mod worker;

pub(crate) use worker::HandOver;

use std::fs::{File, OpenOptions};
use std::io::{self, IsTerminal, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use mio::{Poll, Waker};
use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::domain::{Mode, Processes};
use crate::sys::{limits, proc};
use crate::units::{human, human_bytes};
use crate::UsageError;
pub use responder::Responder;
use stats::{Shared, Totals, WorkerStats};

/// The port the server listens on when no --listen is given.
pub const DEFAULT_PORT: u16 = 4242;
/// Fds a worker needs besides connections: epoll, waker, reserve.
const FDS_PER_WORKER: u64 = 3;

/// A validated server configuration: plain data, no clap types.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
}

/// The server's certificate and key (PEM), and where they came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerTls {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    /// Made at start (not given with --cert/--key).
    pub self_signed: bool,
    pub fingerprint: String,
}

impl ServerTls {
    /// Reads --cert and --key, or makes a self-signed certificate and writes
    /// it (and its key, for the processes of --processes) to files.
    pub fn load(cert: Option<&Path>, key: Option<&Path>) -> Result<ServerTls> {
        let read = |flag: &str, p: &Path| {
            std::fs::read(p).map_err(|e| usage(format!("{flag} {}: {e}", p.display())))
        };
        let t = match (cert, key) {
            (Some(c), Some(k)) => {
                let cert_pem = read("--cert", c)?;
                ServerTls {
                    fingerprint: crate::tls::pem_fingerprint(&cert_pem).unwrap_or_default(),
                    cert_pem,
                    key_pem: read("--key", k)?,
                    cert_file: c.to_path_buf(),
                    key_file: k.to_path_buf(),
                    self_signed: false,
                }
            }
            _ => {
                let s = crate::tls::self_signed()?;
                let dir = std::env::temp_dir();
                let stem = format!("throng-server-{}", std::process::id());
                let cert_file = dir.join(format!("{stem}-cert.pem"));
                let key_file = dir.join(format!("{stem}-key.pem"));
                std::fs::write(&cert_file, &s.cert_pem)
                    .with_context(|| format!("writing {}", cert_file.display()))?;
                write_private(&key_file, s.key_pem.as_bytes())?;
                ServerTls {
                    cert_pem: s.cert_pem.into_bytes(),
                    key_pem: s.key_pem.into_bytes(),
                    cert_file,
                    key_file,
                    self_signed: true,
                    fingerprint: s.fingerprint,
                }
            }
        };
        // Refuse a bad pair now, with the file names, not at the first client.
        crate::tls::server_config(&t.cert_pem, &t.key_pem, &t.cert_file.display().to_string())?;
        Ok(t)
    }

    /// Removes the files of a certificate made at start.
    pub fn cleanup(&self) {
        if self.self_signed {
            let _ = std::fs::remove_file(&self.cert_file);
            let _ = std::fs::remove_file(&self.key_file);
        }
    }

    /// What the banner says about it, with the client flag that trusts it.
    pub fn banner(&self) -> String {
        if self.self_signed {
            format!(
                "tls: self-signed certificate for localhost, 127.0.0.1 and ::1, SHA-256 {}\n\
                 tls: clients trust it with --transport tls --tls-ca {} (or --tls-insecure)",
                self.fingerprint,
                self.cert_file.display()
            )
        } else {
            format!(
                "tls: certificate {} (SHA-256 {})",
                self.cert_file.display(),
                self.fingerprint
            )
        }
    }
}

/// The banner's lines for the bound addresses (and the certificate).
pub(crate) fn listening(
    cfg: &ServerConfig,
    addrs: &[SocketAddr],
    out: &mut dyn Write,
) -> io::Result<()> {
    let tls = if cfg.tls.is_some() { ", tls" } else { "" };
    for a in addrs {
        writeln!(out, "listening on {a} (tcp{tls})")?;
        if cfg.udp {
            writeln!(out, "listening on {a} (udp)")?;
        }
    }
    if let Some(t) = &cfg.tls {
        writeln!(out, "{}", t.banner())?;
    }
    Ok(())
}

/// Writes a file only its owner can read (a private key).
fn write_private(path: &Path, data: &[u8]) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(data)?;
    Ok(())
}

fn one_process() -> Processes {
    Processes::Count(1)
}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
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
            processes: Processes::Count(1),
            max_connections: 1_000_000,
            child: false,
            elastic: false,
            tls,
        }
    }

    fn responder(&self) -> Responder {
        Responder::new(
            self.mode,
            wire::dns::Answerer {
                a: self.dns_answer.octets(),
                ttl: self.dns_ttl,
            },
            self.body_size,
            self.reply.clone(),
            self.on_prefix.clone(),
        )
    }
}

/// The sockets of every worker, bound before any worker starts.
struct Bound {
    /// Addresses actually bound (port 0 resolved), one per --listen.
    addrs: Vec<SocketAddr>,
    /// For each worker: its TCP listeners and UDP sockets.
    per_worker: Vec<(Vec<mio::net::TcpListener>, Vec<mio::net::UdpSocket>)>,
}

/// Explains a bind error in the user's terms.
pub(crate) fn bind_error(addr: SocketAddr, e: io::Error, udp: bool) -> anyhow::Error {
    let proto = if udp { "udp" } else { "tcp" };
    let port = addr.port();
    match e.raw_os_error() {
        Some(libc::EADDRINUSE) => {
            let ss = if udp { "ss -lunp" } else { "ss -ltnp" };
            usage(format!(
                "cannot listen on {addr} ({proto}): the port is already in use; \
                 see who holds it: {ss} 'sport = :{port}'"
            ))
        }
        Some(libc::EACCES) => usage(format!(
            "cannot listen on {addr}: port {port} is privileged (below \
             net.ipv4.ip_unprivileged_port_start); run as root or with \
             CAP_NET_BIND_SERVICE, or use a port from 1024 up"
        )),
        Some(libc::EADDRNOTAVAIL) => usage(format!(
            "cannot listen on {addr}: no interface has the address {} \
             (`ip -br addr` lists them)",
            addr.ip()
        )),
        _ => anyhow::Error::new(e).context(format!("cannot listen on {addr} ({proto})")),
    }
}

pub(crate) fn new_socket(addr: SocketAddr, ty: Type, proto: Protocol) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), ty, Some(proto))?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        // `[::]` takes IPv4 too (dual-stack), whatever net.ipv6.bindv6only says.
        s.set_only_v6(false)?;
    }
    s.set_reuse_address(true)?;
    Ok(s)
}

/// A TCP listener bound to `addr`, sharing the port with the other workers.
pub(crate) fn tcp_listener(addr: SocketAddr, backlog: u32) -> io::Result<Socket> {
    let s = new_socket(addr, Type::STREAM, Protocol::TCP)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&SockAddr::from(addr))?;
    s.listen(backlog as i32)?;
    Ok(s)
}

/// Makes the SO_REUSEPORT group of `listener` give each new connection to
/// one of the `n` sockets at `base..base + n` (the group numbers its sockets
/// in the order they joined, as long as none leaves), picked at random: a
/// four-instruction classic BPF program the kernel runs on each SYN
/// (SO_ATTACH_REUSEPORT_CBPF). It replaces the group's previous program.
pub(crate) fn steer_new_connections(
    listener: &impl std::os::fd::AsRawFd,
    base: u32,
    n: u32,
) -> io::Result<()> {
    // The opcodes of linux/filter.h (classic BPF) for "A = random;
    // A %= n; A += base; return A": BPF_LD|BPF_W|BPF_ABS, BPF_ALU|BPF_MOD|
    // BPF_K, BPF_ALU|BPF_ADD|BPF_K, BPF_RET|BPF_A.
    const LD_W_ABS: u16 = 0x20;
    const ALU_MOD_K: u16 = 0x94;
    const ALU_ADD_K: u16 = 0x04;
    const RET_A: u16 = 0x16;
    let op = |code, k| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let random = (libc::SKF_AD_OFF + libc::SKF_AD_RANDOM) as u32;
    let mut code = [
        op(LD_W_ABS, random),
        op(ALU_MOD_K, n.max(1)),
        op(ALU_ADD_K, base),
        op(RET_A, 0),
    ];
    let prog = libc::sock_fprog {
        len: code.len() as u16,
        filter: code.as_mut_ptr(),
    };
    // SAFETY: the kernel copies `prog` and the filter it points to, both
    // alive for the call.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&prog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub(crate) fn udp_socket(addr: SocketAddr) -> io::Result<Socket> {
    let s = new_socket(addr, Type::DGRAM, Protocol::UDP)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&SockAddr::from(addr))?;
    Ok(s)
}

/// SO_REUSEPORT lets any socket of the same user join a port. So that a
/// second server does not silently share (and split) a port that is in use,
/// first bind a plain socket: it fails if anything listens there.
pub(crate) fn check_port_free(addr: SocketAddr, udp: bool) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let (ty, proto) = if udp {
        (Type::DGRAM, Protocol::UDP)
    } else {
        (Type::STREAM, Protocol::TCP)
    };
    let probe = new_socket(addr, ty, proto)?;
    probe.bind(&SockAddr::from(addr))
}

/// Binds one address for every worker: the first bind resolves port 0, the
/// others join that port.
fn bind_addr(cfg: &ServerConfig, addr: SocketAddr, bound: &mut Bound) -> Result<SocketAddr> {
    if !cfg.child {
        check_port_free(addr, false).map_err(|e| bind_error(addr, e, false))?;
        if cfg.udp {
            check_port_free(addr, true).map_err(|e| bind_error(addr, e, true))?;
        }
    }
    let first = tcp_listener(addr, cfg.backlog).map_err(|e| bind_error(addr, e, false))?;
    let actual = first
        .local_addr()?
        .as_socket()
        .context("listener has no socket address")?;
    let mut tcp = vec![first];
    for _ in 1..cfg.workers {
        tcp.push(tcp_listener(actual, cfg.backlog).map_err(|e| bind_error(actual, e, false))?);
    }
    for (w, s) in tcp.into_iter().enumerate() {
        let std: std::net::TcpListener = s.into();
        bound.per_worker[w]
            .0
            .push(mio::net::TcpListener::from_std(std));
    }
    if cfg.udp {
        for w in 0..cfg.workers {
            let s = udp_socket(actual).map_err(|e| bind_error(actual, e, true))?;
            let std: std::net::UdpSocket = s.into();
            bound.per_worker[w]
                .1
                .push(mio::net::UdpSocket::from_std(std));
        }
    }
    Ok(actual)
}

fn bind(cfg: &ServerConfig) -> Result<Bound> {
    let mut bound = Bound {
        addrs: Vec::new(),
        per_worker: (0..cfg.workers).map(|_| (Vec::new(), Vec::new())).collect(),
    };
    if cfg.listen.is_empty() {
        let v6 = SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, DEFAULT_PORT));
        let addr = match bind_addr(cfg, v6, &mut bound) {
            Ok(a) => a,
            Err(e) if ipv6_unavailable(&e) => {
                bound
                    .per_worker
                    .iter_mut()
                    .for_each(|w| *w = (Vec::new(), Vec::new()));
                let v4 = SocketAddr::from((Ipv4Addr::UNSPECIFIED, DEFAULT_PORT));
                bind_addr(cfg, v4, &mut bound)?
            }
            Err(e) => return Err(e),
        };
        bound.addrs.push(addr);
    } else {
        for &addr in &cfg.listen {
            let actual = bind_addr(cfg, addr, &mut bound)?;
            bound.addrs.push(actual);
        }
    }
    Ok(bound)
}

/// IPv6 is off on this host (module not loaded, or disabled).
pub(crate) fn ipv6_unavailable(e: &anyhow::Error) -> bool {
    let errno = e
        .chain()
        .find_map(|c| c.downcast_ref::<io::Error>())
        .and_then(io::Error::raw_os_error);
    matches!(
        errno,
        Some(libc::EAFNOSUPPORT | libc::EADDRNOTAVAIL | libc::EPROTONOSUPPORT)
    ) || e
        .downcast_ref::<UsageError>()
        .is_some_and(|u| u.0.contains("no interface has the address"))
}

/// One second of stats, as printed and as written to --stats-json.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Second {
    t: u64,
    unix_s: u64,
    connections: i64,
    peak_connections: i64,
    accepted_per_s: u64,
    closed_per_s: u64,
    requests_per_s: u64,
    bytes_in_per_s: u64,
    bytes_out_per_s: u64,
    errors: u64,
    listen_overflows: u64,
    listen_drops: u64,
    /// Server processes running (several share the port).
    #[serde(default)]
    pub(crate) processes: u64,
}

impl Second {
    /// Adds another second's rates (counters per second, not the gauges).
    pub(crate) fn add_rates(&mut self, o: &Second) {
        self.t = self.t.max(o.t);
        self.unix_s = self.unix_s.max(o.unix_s);
        self.accepted_per_s += o.accepted_per_s;
        self.closed_per_s += o.closed_per_s;
        self.requests_per_s += o.requests_per_s;
        self.bytes_in_per_s += o.bytes_in_per_s;
        self.bytes_out_per_s += o.bytes_out_per_s;
        self.errors += o.errors;
    }

    pub(crate) fn line(&self) -> String {
        format!(
            "{:>4}s  conns {} (peak {})  accepted {}/s  closed {}/s  requests {}/s  in {}/s  out {}/s  errors {}  listen overflows +{} drops +{}",
            self.t,
            self.connections,
            self.peak_connections,
            human(self.accepted_per_s as f64),
            human(self.closed_per_s as f64),
            human(self.requests_per_s as f64),
            human_bytes(self.bytes_in_per_s as f64),
            human_bytes(self.bytes_out_per_s as f64),
            self.errors,
            self.listen_overflows,
            self.listen_drops,
        ) + &if self.processes > 0 {
            format!("  processes {}", self.processes)
        } else {
            String::new()
        }
    }
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The configuration of a member of an elastic group: its accept queues
/// together hold at most half of what its fds do. A member hands new
/// connections over at 13/16 of its fds, open or queued (the queues are asked
/// every 32 accepts), and then accepts what its queues still hold; deeper
/// queues (a tuned somaxconn of 65535) let a member whose workers fall
/// behind a connect storm queue more than it can hold between two looks,
/// and shed the rest. (A million connections on two cores with the load on
/// the same cores: queues of all its fds shed 16,011; of half, 1,990.)
fn elastic_member(cfg: &ServerConfig, fd: &limits::FdLimit) -> ServerConfig {
    let reserved = limits::fds_in_use() as u64 + FDS_PER_WORKER * cfg.workers as u64 + 8;
    let room = fd.soft.saturating_sub(reserved) / 2;
    let per_listener = (room / cfg.workers.max(1) as u64).max(128);
    let mut c = cfg.clone();
    c.backlog = c.backlog.min(per_listener.min(u32::MAX as u64) as u32);
    c
}

/// Prints the lines of the start-up banner that are about limits.
fn limits_banner(cfg: &ServerConfig, fd: &limits::FdLimit) -> Vec<String> {
    let reserved = limits::fds_in_use() as u64 + FDS_PER_WORKER * cfg.workers as u64;
    let max_conns = fd.soft.saturating_sub(reserved);
    let mut lines = Vec::new();
    let mut l = format!(
        "{}: at most {max_conns} connections in this process",
        fd.describe()
    );
    if fd.hard_is_cap {
        l.push_str(" (hard limit is the cap here; more connections need more server processes)");
    }
    lines.push(l);
    let somaxconn = proc::sysctl_u64("net.core.somaxconn");
    let effective = somaxconn.map_or(cfg.backlog as u64, |m| m.min(cfg.backlog as u64));
    let mut l = format!("listen backlog {effective}");
    if let Some(m) = somaxconn.filter(|&m| m < cfg.backlog as u64) {
        l.push_str(&format!(
            " (asked {}; the kernel clamps it to net.core.somaxconn = {m}; \
             raise it: sysctl -w net.core.somaxconn={})",
            cfg.backlog, cfg.backlog
        ));
    }
    lines.push(l);
    lines
}

/// A server whose workers are running.
pub struct Running {
    /// Addresses actually bound, one per --listen.
    pub addrs: Vec<SocketAddr>,
    /// Connections this process holds before it hands over to a sibling.
    pub max_open: i64,
    /// Start-up lines about limits (fds, backlog).
    pub limits: Vec<String>,
    /// The parent of an elastic group: each port's SO_REUSEPORT group.
    pub groups: Vec<std::os::fd::OwnedFd>,
    pub shared: Arc<Shared>,
    worker_stats: Vec<Arc<WorkerStats>>,
    wakers: Vec<Waker>,
    workers: Vec<thread::JoinHandle<io::Result<()>>>,
}

impl Running {
    /// Counters summed over workers, now.
    pub fn totals(&self) -> Totals {
        Totals::sum(self.worker_stats.iter().map(|s| &**s))
    }

    /// The stats of second `t`: gauges now, rates since `last` (listen
    /// counters are left to the caller).
    pub(crate) fn second(&self, t: u64, totals: &Totals, last: &Totals) -> Second {
        Second {
            t,
            unix_s: unix_now(),
            connections: self.shared.current.load(Relaxed),
            peak_connections: self.shared.peak.load(Relaxed),
            accepted_per_s: totals.accepted - last.accepted,
            closed_per_s: totals.closed - last.closed,
            requests_per_s: totals.requests - last.requests,
            bytes_in_per_s: totals.bytes_in - last.bytes_in,
            bytes_out_per_s: totals.bytes_out - last.bytes_out,
            errors: totals.errors() - last.errors(),
            listen_overflows: 0,
            listen_drops: 0,
            processes: 0,
        }
    }

    /// True when a worker stopped on its own (an error).
    pub fn worker_exited(&self) -> bool {
        self.workers.iter().any(|w| w.is_finished())
    }

    /// Stops the workers, closes every connection, returns the totals.
    pub fn stop(self) -> Result<Totals> {
        self.shared.stop.store(true, Relaxed);
        for w in &self.wakers {
            w.wake()?;
        }
        let mut failure = None;
        for w in self.workers {
            match w.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failure = Some(anyhow::Error::new(e).context("worker failed")),
                Err(_) => failure = Some(anyhow::anyhow!("a worker thread panicked")),
            }
        }
        let totals = Totals::sum(self.worker_stats.iter().map(|s| &**s));
        match failure {
            Some(e) => Err(e),
            None => Ok(totals),
        }
    }
}

/// Raises the fd limit, binds every socket, starts the workers.
pub fn start(cfg: &ServerConfig) -> Result<Running> {
    let hand_over = cfg.child.then(|| Arc::new(HandOver::ready()));
    start_with(cfg, hand_over)
}

/// [`start`] as a member of a group of processes: `hand_over` says how it
/// hands new connections to its siblings when full.
pub(crate) fn start_with(cfg: &ServerConfig, hand_over: Option<Arc<HandOver>>) -> Result<Running> {
    let fd = limits::raise_nofile().context("reading RLIMIT_NOFILE")?;
    let elastic_backlog;
    let cfg = match hand_over.as_ref().filter(|h| h.is_elastic()) {
        Some(_) => {
            elastic_backlog = elastic_member(cfg, &fd);
            &elastic_backlog
        }
        None => cfg,
    };
    let bound = bind(cfg)?;
    // A handle on each port's SO_REUSEPORT group (a second fd of the first
    // worker's listener, not a socket of its own): the parent of an
    // elastic group steers new connections through it.
    let mut groups = Vec::new();
    if hand_over.is_some() && !cfg.child {
        if let Some((tcp, _)) = bound.per_worker.first() {
            for l in tcp {
                groups.push(std::os::fd::AsFd::as_fd(l).try_clone_to_owned()?);
            }
        }
    }
    let shared = Arc::new(Shared::default());
    let responder = Arc::new(cfg.responder());
    let tls = match &cfg.tls {
        Some(t) => Some(crate::tls::server_config(
            &t.cert_pem,
            &t.key_pem,
            &t.cert_file.display().to_string(),
        )?),
        None => None,
    };
    let limits = limits_banner(cfg, &fd);
    // One of several processes on a port closes its listeners when full so
    // its siblings get the new connections; alone, a server keeps
    // accepting and sheds what it cannot hold (counted refusals).
    let max_open = if hand_over.is_some() {
        fd.soft
            .saturating_sub(limits::fds_in_use() as u64 + FDS_PER_WORKER * cfg.workers as u64 + 8)
            as i64
    } else {
        i64::MAX
    };
    if let Some(h) = &hand_over {
        h.arm(max_open, cfg.workers);
    }
    let mut workers = Vec::new();
    let mut wakers = Vec::new();
    let mut worker_stats = Vec::new();
    for (i, (listeners, udp)) in bound.per_worker.into_iter().enumerate() {
        let poll = Poll::new()?;
        wakers.push(Waker::new(poll.registry(), worker::WAKER)?);
        let stats = Arc::new(WorkerStats::default());
        worker_stats.push(stats.clone());
        let w = worker::Worker::new(worker::Setup {
            poll,
            listeners,
            udp,
            responder: responder.clone(),
            stats,
            shared: shared.clone(),
            max_pending: cfg.max_pending,
            listen: bound.addrs.clone(),
            backlog: cfg.backlog,
            max_open,
            hand_over: hand_over.clone(),
            tls: tls.clone(),
        })?;
        workers.push(
            thread::Builder::new()
                .name(format!("server-{i}"))
                .spawn(move || w.run())?,
        );
    }
    Ok(Running {
        addrs: bound.addrs,
        max_open,
        limits,
        groups,
        shared,
        worker_stats,
        wakers,
        workers,
    })
}

/// Runs the server until SIGINT or SIGTERM, then prints the summary.
pub fn run(cfg: &ServerConfig) -> Result<()> {
    let mut stats_json = match &cfg.stats_json {
        Some(p) => Some(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| usage(format!("--stats-json {}: {e}", p.display())))?,
        ),
        None => None,
    };
    // Signals first, so a SIGTERM that arrives while workers start is kept.
    let signals = if cfg.child {
        crate::sys::signals::Stop::install_child()?
    } else {
        crate::sys::signals::Stop::install()?
    };
    if !cfg.child {
        match cfg.processes {
            Processes::Auto => return multi::elastic(cfg, &signals, stats_json),
            Processes::Count(n) if n > 1 => return multi::run(cfg, n, &signals, stats_json),
            Processes::Count(_) => {}
        }
    }
    if cfg.child {
        if cfg.elastic {
            // Listen only when the parent says: the group numbers its
            // sockets in the order they listen, and the parent steers by
            // that number, so members listen one after the other.
            let mut line = String::new();
            if io::stdin().read_line(&mut line)? == 0 {
                return Ok(()); // the parent is gone
            }
        }
        let hand_over = Arc::new(if cfg.elastic {
            HandOver::elastic(signals.sender())
        } else {
            HandOver::ready()
        });
        let server = start_with(cfg, Some(hand_over.clone()))?;
        return run_child(server, &signals);
    }
    let server = start(cfg)?;

    let mut out = io::stdout().lock();
    writeln!(
        out,
        "throng server: {} mode, {} worker{}",
        cfg.mode.name(),
        cfg.workers,
        if cfg.workers == 1 { "" } else { "s" }
    )?;
    listening(cfg, &server.addrs, &mut out)?;
    for l in &server.limits {
        writeln!(out, "{l}")?;
    }
    out.flush()?;
    drop(out);

    let started = Instant::now();
    let show = cfg.stats || io::stderr().is_terminal();
    let listen0 = proc::listen_counters().unwrap_or_default();
    let mut last = (Totals::default(), listen0);
    let mut tick = 1;
    loop {
        let due = started + Duration::from_secs(tick);
        if signals.wait_until(due) || server.worker_exited() {
            break;
        }
        let totals = server.totals();
        let listen = proc::listen_counters().unwrap_or(last.1);
        let mut sec = server.second(tick, &totals, &last.0);
        sec.listen_overflows = listen.0.saturating_sub(last.1 .0);
        sec.listen_drops = listen.1.saturating_sub(last.1 .1);
        // JSON first: a reader that sees the line on stderr finds the file
        // already written.
        if let Some(f) = stats_json.as_mut() {
            if let Err(e) = write_json_line(f, &sec) {
                // Keep serving and keep the summary: only the file is lost.
                eprintln!("throng: {e:#}; no more --stats-json lines");
                stats_json = None;
            }
        }
        if show {
            eprintln!("{}", sec.line());
        }
        last = (totals, listen);
        tick += 1;
    }

    let peak = server.shared.peak.load(Relaxed);
    let result = server.stop();
    let totals = match &result {
        Ok(t) => t.clone(),
        Err(_) => last.0.clone(),
    };
    let listen = proc::listen_counters().unwrap_or(listen0);
    print_summary(
        &totals,
        peak,
        started.elapsed(),
        (listen.0 - listen0.0, listen.1 - listen0.1),
    )?;
    result.map(|_| ())
}

/// The final counters of a child of --processes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ChildTotals {
    pub totals: Totals,
    pub peak: i64,
}

/// A child of --processes: JSON lines on stdout, no banner, no summary.
/// An elastic one also says when it fills up.
fn run_child(server: Running, signals: &crate::sys::signals::Stop) -> Result<()> {
    use crate::child::ChildLine;
    use crate::sys::signals::Reason;
    ChildLine::Ready.print();
    let started = Instant::now();
    let mut last = Totals::default();
    let mut tick = 1;
    loop {
        let due = started + Duration::from_secs(tick);
        match signals.wait_reason(Some(due)) {
            None => {}
            Some(Reason::Grow) => {
                ChildLine::Filling.print();
                continue;
            }
            Some(Reason::Full) => {
                ChildLine::Full.print();
                continue;
            }
            Some(_) => break,
        }
        if server.worker_exited() {
            break;
        }
        let totals = server.totals();
        // The parent reads the kernel's listen counters (one netns for all).
        let sec = server.second(tick, &totals, &last);
        ChildLine::Stats(serde_json::to_value(&sec)?).print();
        last = totals;
        tick += 1;
    }
    let peak = server.shared.peak.load(Relaxed);
    let totals = server.stop()?;
    ChildLine::Totals(serde_json::to_value(ChildTotals { totals, peak })?).print();
    Ok(())
}

pub(crate) fn write_json_line(f: &mut File, sec: &Second) -> Result<()> {
    let mut line = serde_json::to_vec(sec)?;
    line.push(b'\n');
    f.write_all(&line).context("writing --stats-json")
}

pub(crate) fn print_summary(
    t: &Totals,
    peak: i64,
    uptime: Duration,
    listen: (u64, u64),
) -> Result<()> {
    let secs = uptime.as_secs_f64().max(1e-9);
    let mut out = io::stdout().lock();
    writeln!(
        out,
        "throng server: stopped after {:.1}s",
        uptime.as_secs_f64()
    )?;
    writeln!(
        out,
        "  connections  accepted {}, closed {}, peak {}",
        t.accepted, t.closed, peak
    )?;
    writeln!(
        out,
        "  requests     {} ({}/s)",
        t.requests,
        human(t.requests as f64 / secs)
    )?;
    writeln!(
        out,
        "  bytes        in {}, out {}",
        human_bytes(t.bytes_in as f64),
        human_bytes(t.bytes_out as f64)
    )?;
    let mut errors = Vec::new();
    for (n, what) in [
        (t.bad_input, "malformed input"),
        (t.conn_errors, "connection errors (reset, ...)"),
        (t.accept_no_fds, "refused: out of fds"),
        (t.udp_dropped, "UDP replies dropped"),
    ] {
        if n > 0 {
            errors.push(format!("{what} {n}"));
        }
    }
    for &(errno, n) in &t.accept_errno {
        errors.push(format!(
            "accept: {} {n}",
            io::Error::from_raw_os_error(errno)
        ));
    }
    if errors.is_empty() {
        errors.push("none".into());
    }
    writeln!(out, "  errors       {}", errors.join(", "))?;
    writeln!(
        out,
        "  listen queue overflows +{}, drops +{} (this network namespace, all listeners)",
        listen.0, listen.1
    )?;
    if t.accept_no_fds > 0 {
        writeln!(
            out,
            "  hint: connections were refused because this process ran out of file \
             descriptors; raise the limit (ulimit -n) or run more server processes"
        )?;
    }
    if listen.0 > 0 {
        writeln!(
            out,
            "  hint: the accept queue overflowed; raise --backlog and net.core.somaxconn \
             (sysctl -w net.core.somaxconn=65535)"
        )?;
    }
    out.flush()?;
    Ok(())
}
