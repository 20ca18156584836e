//! Binding: every worker's listeners (SO_REUSEPORT, port 0 resolved once),
//! the IPv4 fallback of the default address, bind errors in the user's
//! terms, and the classic BPF program that steers a port's new connections
//! to one process of a group.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use anyhow::{Context, Result};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::{ServerConfig, DEFAULT_PORT};
use crate::usage::UsageError;

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// The sockets of every worker, bound before any worker starts.
pub(super) struct Bound {
    /// Addresses actually bound (port 0 resolved), one per --listen.
    pub(super) addrs: Vec<SocketAddr>,
    /// For each worker: its TCP listeners and UDP sockets.
    pub(super) per_worker: Vec<(Vec<mio::net::TcpListener>, Vec<mio::net::UdpSocket>)>,
}

/// Explains a bind error in the user's terms.
fn bind_error(addr: SocketAddr, e: io::Error, udp: bool) -> anyhow::Error {
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

fn new_socket(addr: SocketAddr, ty: Type, proto: Protocol) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), ty, Some(proto))?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        // `[::]` takes IPv4 too (dual-stack), whatever net.ipv6.bindv6only says.
        s.set_only_v6(false)?;
    }
    s.set_reuse_address(true)?;
    Ok(s)
}

/// A TCP listener bound to `addr`, sharing the port with the other workers.
pub(super) fn tcp_listener(addr: SocketAddr, backlog: u32) -> io::Result<Socket> {
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
pub(super) fn steer_new_connections(
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

fn udp_socket(addr: SocketAddr) -> io::Result<Socket> {
    let s = new_socket(addr, Type::DGRAM, Protocol::UDP)?;
    s.set_reuse_port(true)?;
    s.set_nonblocking(true)?;
    s.bind(&SockAddr::from(addr))?;
    Ok(s)
}

/// SO_REUSEPORT lets any socket of the same user join a port. So that a
/// second server does not silently share (and split) a port that is in use,
/// first bind a plain socket: it fails if anything listens there.
fn check_port_free(addr: SocketAddr, udp: bool) -> io::Result<()> {
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

/// Calls `one` with each address to listen on: --listen's, or the default
/// `[::]:4242` (dual-stack), and `0.0.0.0:4242` instead where IPv6 is off.
fn each_address<T>(
    cfg: &ServerConfig,
    mut one: impl FnMut(SocketAddr) -> Result<T>,
) -> Result<Vec<T>> {
    if !cfg.listen.is_empty() {
        return cfg.listen.iter().map(|&addr| one(addr)).collect();
    }
    let v6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, DEFAULT_PORT));
    match one(v6) {
        Err(e) if ipv6_unavailable(&e) => {
            let v4 = SocketAddr::from((Ipv4Addr::UNSPECIFIED, DEFAULT_PORT));
            Ok(vec![one(v4)?])
        }
        other => Ok(vec![other?]),
    }
}

/// Refuses an address something listens on already (TCP, and UDP with
/// --udp), in the user's terms.
fn check_free(cfg: &ServerConfig, addr: SocketAddr) -> Result<()> {
    check_port_free(addr, false).map_err(|e| bind_error(addr, e, false))?;
    if cfg.udp {
        check_port_free(addr, true).map_err(|e| bind_error(addr, e, true))?;
    }
    Ok(())
}

/// One address's sockets, one of each per worker.
type AddrSockets = (
    SocketAddr,
    Vec<mio::net::TcpListener>,
    Vec<mio::net::UdpSocket>,
);

/// Binds one address for every worker: the first bind resolves port 0, the
/// others join that port.
fn bind_addr(cfg: &ServerConfig, addr: SocketAddr) -> Result<AddrSockets> {
    if !cfg.child {
        check_free(cfg, addr)?;
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
    let tcp = tcp
        .into_iter()
        .map(|s| mio::net::TcpListener::from_std(s.into()))
        .collect();
    let mut udp = Vec::new();
    if cfg.udp {
        for _ in 0..cfg.workers {
            let s = udp_socket(actual).map_err(|e| bind_error(actual, e, true))?;
            udp.push(mio::net::UdpSocket::from_std(s.into()));
        }
    }
    Ok((actual, tcp, udp))
}

/// Binds every address for every worker.
pub(super) fn bind(cfg: &ServerConfig) -> Result<Bound> {
    let mut bound = Bound {
        addrs: Vec::new(),
        per_worker: (0..cfg.workers).map(|_| (Vec::new(), Vec::new())).collect(),
    };
    for (actual, tcp, udp) in each_address(cfg, |addr| bind_addr(cfg, addr))? {
        bound.addrs.push(actual);
        for (w, l) in tcp.into_iter().enumerate() {
            bound.per_worker[w].0.push(l);
        }
        for (w, u) in udp.into_iter().enumerate() {
            bound.per_worker[w].1.push(u);
        }
    }
    Ok(bound)
}

/// For the parent of --processes N: checks each address is free and holds
/// its port (a bound, not listening socket: it takes no connections) so
/// that port 0 resolves once for all children.
pub(super) fn reserve(cfg: &ServerConfig) -> Result<(Vec<SocketAddr>, Vec<Socket>)> {
    let held = each_address(cfg, |addr| {
        check_free(cfg, addr)?;
        let s = new_socket(addr, Type::STREAM, Protocol::TCP)?;
        s.set_reuse_port(true)?;
        s.bind(&SockAddr::from(addr))
            .map_err(|e| bind_error(addr, e, false))?;
        let actual = s.local_addr()?.as_socket().unwrap_or(addr);
        Ok((actual, s))
    })?;
    Ok(held.into_iter().unzip())
}

/// IPv6 is off on this host (module not loaded, or disabled).
fn ipv6_unavailable(e: &anyhow::Error) -> bool {
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
