//! Listening TCP sockets from the kernel's socket diagnostics
//! (NETLINK_SOCK_DIAG, what `ss -l` reads): asked for listeners only, the
//! kernel walks its listening hash and nothing else. /proc/net/tcp has no
//! such filter: each read walks the established hash (262,144 buckets on a
//! 2-core machine, about 4 ms for the whole table here) to format the
//! lines after the listeners, which cost a client sampling four times a
//! second about 1% of its core. The file stays the fallback where the
//! diagnostics are not to be had (see `procfs::each_listener`).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use netlink_packet_core::{
    DoneBuffer, ErrorBuffer, NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload,
    Parseable, NLMSG_DONE, NLMSG_ERROR, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::inet::{
    ExtensionFlags, InetRequest, InetResponseHeader, SocketId, StateFlags,
};
use netlink_packet_sock_diag::{SockDiagMessage, SOCK_DIAG_BY_FAMILY};

use super::procfs::Listener;

const TCP_LISTEN: u8 = 10;

/// Each listener of `family` (AF_INET or AF_INET6) on `port`, with its
/// local address, into `each`; `buf` receives the kernel's answer (kept by
/// the sampler: it grows once).
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
    let req = request(family, port);
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
        while at < n {
            let msg = NetlinkBuffer::new_checked(&buf[at..n]).map_err(|e| {
                io::Error::other(format!("a malformed socket diagnostics message: {e}"))
            })?;
            let payload = msg.payload();
            match msg.message_type() {
                NLMSG_DONE => {
                    // An int: 0, or -errno (older kernels may send none).
                    let code = if payload.len() >= 4 {
                        DoneBuffer::new(payload).code()
                    } else {
                        0
                    };
                    return if code < 0 {
                        Err(io::Error::from_raw_os_error(-code))
                    } else {
                        Ok(())
                    };
                }
                NLMSG_ERROR => {
                    let code = ErrorBuffer::new_checked(payload)
                        .ok()
                        .and_then(|e| e.code());
                    return Err(code.map_or_else(
                        || {
                            io::Error::other(
                                "the socket diagnostics ended the dump with no error code",
                            )
                        },
                        |c| io::Error::from_raw_os_error(-c.get()),
                    ));
                }
                SOCK_DIAG_BY_FAMILY => {
                    // The fixed part alone: no attributes were asked for,
                    // and a reply that does not parse is skipped.
                    if let Some((ip, l)) = InetResponseHeader::parse(payload)
                        .ok()
                        .and_then(|h| listener_of(&h, port))
                    {
                        each(ip, l);
                    }
                }
                _ => {}
            }
            // Messages are aligned to 4 bytes (the length is at least a
            // header's: checked by new_checked).
            at += (msg.length() as usize + 3) & !3;
        }
    }
}

/// The dump of TCP listeners of `family` on `port` (the kernel skips
/// listeners on other ports itself).
fn request(family: i32, port: u16) -> Vec<u8> {
    let mut socket_id = if family == libc::AF_INET6 {
        SocketId::new_v6()
    } else {
        SocketId::new_v4()
    };
    socket_id.source_port = port;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    header.sequence_number = 1;
    let mut msg = NetlinkMessage::new(
        header,
        NetlinkPayload::InnerMessage(SockDiagMessage::InetRequest(InetRequest {
            family: family as u8,
            protocol: libc::IPPROTO_TCP as u8,
            extensions: ExtensionFlags::empty(),
            states: StateFlags::LISTEN,
            socket_id,
        })),
    );
    msg.finalize();
    let mut req = vec![0; msg.buffer_len()];
    msg.serialize(&mut req);
    req
}

/// A listener on `port`: its local address, and its accept queue
/// (recv_queue, for a listener the connections waiting to be accepted).
fn listener_of(h: &InetResponseHeader, port: u16) -> Option<(IpAddr, Listener)> {
    // (The kernel filters by port already; checked all the same.)
    if h.state != TCP_LISTEN || h.socket_id.source_port != port {
        return None;
    }
    Some((
        h.socket_id.source_address,
        Listener {
            inode: u64::from(h.inode),
            queued: u64::from(h.recv_queue),
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
