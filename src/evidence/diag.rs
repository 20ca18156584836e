//! Listening TCP sockets from the kernel's socket diagnostics
//! (NETLINK_SOCK_DIAG, what `ss -l` reads): asked for listeners only, the
//! kernel walks its listening hash and nothing else. /proc/net/tcp has no
//! such filter: each read walks the established hash (262,144 buckets on a
//! 2-core machine, about 4 ms for the whole table here) to format the
//! lines after the listeners, which cost a client sampling four times a
//! second about 1% of its core. The file stays the fallback where the
//! diagnostics are not to be had (see `procfs::each_listener`).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::procfs::Listener;

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const TCP_LISTEN: u32 = 10;
/// nlmsghdr, then inet_diag_req_v2 (family, protocol, ext, pad, states,
/// then the 48-byte inet_diag_sockid).
const REQUEST_LEN: usize = 16 + 8 + 48;
/// inet_diag_msg: family, state, timer, retrans, the sockid, expires,
/// rqueue, wqueue, uid, inode.
const MSG_LEN: usize = 72;

/// Each listener of `family` (AF_INET or AF_INET6) on `port`, with its
/// local address, into `each`; `buf` receives the kernel's answer (kept by
/// the sampler, so that a sample allocates nothing once it has grown).
/// An error when the kernel's diagnostics cannot be asked (no inet_diag).
pub(super) fn listeners(
    family: i32,
    port: u16,
    buf: &mut Vec<u8>,
    mut each: impl FnMut(IpAddr, Listener),
) -> io::Result<()> {
    // SAFETY: socket() takes no pointers; its result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = [0u8; REQUEST_LEN];
    req[0..4].copy_from_slice(&(REQUEST_LEN as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    req[6..8].copy_from_slice(&flags.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    req[16] = family as u8;
    req[17] = libc::IPPROTO_TCP as u8;
    req[20..24].copy_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    // The kernel skips listeners on other ports itself.
    req[24..26].copy_from_slice(&port.to_be_bytes());
    // SAFETY: req is a live buffer of req.len() bytes; an unconnected
    // netlink socket sends to the kernel.
    let sent = unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    if sent != req.len() as isize {
        return Err(io::Error::other("a socket diagnostics request sent short"));
    }
    // A dump comes in datagrams of at most 32 kB (the kernel's largest
    // for a reader that asks for more).
    buf.clear();
    buf.resize(32 * 1024, 0);
    loop {
        // SAFETY: buf is a live buffer of buf.len() bytes; MSG_TRUNC makes
        // the result the datagram's whole length.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_TRUNC,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let n = n as usize;
        if n > buf.len() {
            return Err(io::Error::other("a socket diagnostics datagram was cut"));
        }
        let mut at = 0;
        while at + 16 <= n {
            let len = u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
            let kind = u16::from_ne_bytes(buf[at + 4..at + 6].try_into().unwrap());
            if len < 16 || at + len > n {
                return Err(io::Error::other("a malformed socket diagnostics message"));
            }
            // NLMSG_DONE and NLMSG_ERROR carry an int: 0, or -errno.
            let code = || {
                buf.get(at + 16..at + 20)
                    .map_or(0, |b| i32::from_ne_bytes(b.try_into().unwrap()))
            };
            match kind {
                NLMSG_DONE if code() < 0 => return Err(io::Error::from_raw_os_error(-code())),
                NLMSG_DONE => return Ok(()),
                NLMSG_ERROR => return Err(io::Error::from_raw_os_error(-code())),
                SOCK_DIAG_BY_FAMILY if len >= 16 + MSG_LEN => {
                    let m = &buf[at + 16..at + 16 + MSG_LEN];
                    if let Some((ip, l)) = listener_of(m, port) {
                        each(ip, l);
                    }
                }
                _ => {}
            }
            // Messages are aligned to 4 bytes.
            at += (len + 3) & !3;
        }
    }
}

/// One inet_diag_msg of a listener on `port`: its local address, and its
/// accept queue (rqueue, for a listener the connections waiting to be
/// accepted).
fn listener_of(m: &[u8], port: u16) -> Option<(IpAddr, Listener)> {
    let u32_at = |i: usize| u32::from_ne_bytes(m[i..i + 4].try_into().unwrap());
    // (The kernel filters by port already; checked all the same.)
    if u32::from(m[1]) != TCP_LISTEN || u16::from_be_bytes([m[4], m[5]]) != port {
        return None;
    }
    // The sockid's source address, from byte 8, in network order.
    let src: [u8; 16] = m[8..24].try_into().unwrap();
    let ip = match i32::from(m[0]) {
        libc::AF_INET => IpAddr::V4(Ipv4Addr::new(src[0], src[1], src[2], src[3])),
        libc::AF_INET6 => IpAddr::V6(Ipv6Addr::from(src)),
        _ => return None,
    };
    Some((
        ip,
        Listener {
            inode: u64::from(u32_at(68)),
            queued: u64::from(u32_at(56)),
            sockets: 1,
        },
    ))
}

/// Whether a listener bound to `bound` takes connections to `target`: the
/// same address, or the wildcard (an IPv4 address also as IPv4-mapped).
pub(super) fn reaches(bound: IpAddr, target: &SocketAddr) -> bool {
    if bound.is_unspecified() {
        return true;
    }
    let canonical = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    canonical(bound) == canonical(target.ip())
}
