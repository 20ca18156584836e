//! Opening one client socket: create, optionally bind a source address
//! (with IP_BIND_ADDRESS_NO_PORT, so the kernel picks the port per 4-tuple
//! at connect time instead of reserving one per source address at bind
//! time), start a non-blocking connect. Returns the errno on failure so the
//! caller can put the attempt in its bucket.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// Creates a non-blocking TCP socket, bound to `source` (port chosen at
/// connect time) when given.
pub fn prepare(target: SocketAddr, source: Option<IpAddr>) -> Result<Socket, i32> {
    let ty = Type::STREAM.nonblocking().cloexec();
    let s =
        Socket::new(Domain::for_address(target), ty, Some(Protocol::TCP)).map_err(|e| errno(&e))?;
    if let Some(ip) = source {
        set_bind_address_no_port(&s).map_err(|e| errno(&e))?;
        s.bind(&SockAddr::from(SocketAddr::new(ip, 0)))
            .map_err(|e| errno(&e))?;
    }
    // Probes and later queries are written whole; Nagle would only delay them.
    s.set_tcp_nodelay(true).map_err(|e| errno(&e))?;
    Ok(s)
}

/// A non-blocking UDP socket, bound to `source` when given, connected to
/// `target` (which only sets its peer: nothing is sent).
pub fn udp(target: SocketAddr, source: Option<IpAddr>) -> Result<Socket, i32> {
    let ty = Type::DGRAM.nonblocking().cloexec();
    let s =
        Socket::new(Domain::for_address(target), ty, Some(Protocol::UDP)).map_err(|e| errno(&e))?;
    if let Some(ip) = source {
        s.bind(&SockAddr::from(SocketAddr::new(ip, 0)))
            .map_err(|e| errno(&e))?;
    }
    s.connect(&SockAddr::from(target)).map_err(|e| errno(&e))?;
    Ok(s)
}

/// Starts connecting `s` to `target`. Ok once the connect is under way (or
/// done, on loopback it can be immediate).
pub fn start(s: &Socket, target: SocketAddr) -> Result<(), i32> {
    match s.connect(&SockAddr::from(target)) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(()),
        Err(e) => Err(errno(&e)),
    }
}

fn set_bind_address_no_port(s: &Socket) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads an int from a pointer valid for its size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_port_gives_econnrefused() {
        // Bind then drop a listener: its port is closed now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let target: SocketAddr = ([127, 0, 0, 1], port).into();
        let s = prepare(target, Some("127.0.0.1".parse().unwrap())).unwrap();
        let r = start(&s, target);
        // Loopback may refuse at once or report it later as SO_ERROR.
        let err = match r {
            Err(e) => e,
            Ok(()) => {
                let mut pfd = libc::pollfd {
                    fd: s.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: poll on one pollfd we own.
                unsafe { libc::poll(&mut pfd, 1, 5000) };
                s.take_error().unwrap().unwrap().raw_os_error().unwrap()
            }
        };
        assert_eq!(err, libc::ECONNREFUSED);
    }

    #[test]
    fn binds_other_loopback_sources() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let target = l.local_addr().unwrap();
        let s = prepare(target, Some("127.0.0.7".parse().unwrap())).unwrap();
        start(&s, target).unwrap();
        let (peer, from) = l.accept().unwrap();
        drop(peer);
        assert_eq!(from.ip(), "127.0.0.7".parse::<IpAddr>().unwrap());
    }
}
