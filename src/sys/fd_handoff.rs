//! A channel for connections between the processes of a group: a pair of
//! connected Unix datagram sockets that every process inherits. A process
//! that cannot hold a connection sends its fd (SCM_RIGHTS) in on one end;
//! whichever process with room reads the other end first takes it. While
//! in the channel a connection is the kernel's: it costs no process an fd,
//! and its bytes wait in its socket.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The two ends, by fd number (the numbers a child is given in its plan).
#[derive(Debug)]
pub struct FdHandoff {
    send: RawFd,
    recv: RawFd,
}

/// The send buffer asked for (SO_SNDBUFFORCE, where allowed): each
/// connection in the channel holds about a kilobyte of it, so this lets
/// thousands wait while the processes with room catch up.
const SNDBUF: libc::c_int = 8 << 20;

impl FdHandoff {
    /// A new channel, its fds inherited by the children this process
    /// starts (not close-on-exec).
    pub fn new() -> io::Result<FdHandoff> {
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two fds into the array we own.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK,
                0,
                fds.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let p = FdHandoff {
            send: fds[0],
            recv: fds[1],
        };
        for opt in [libc::SO_SNDBUFFORCE, libc::SO_SNDBUF] {
            // SAFETY: an int option on a socket we own.
            let rc = unsafe {
                libc::setsockopt(
                    p.send,
                    libc::SOL_SOCKET,
                    opt,
                    (&SNDBUF as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if rc == 0 {
                break;
            }
        }
        Ok(p)
    }

    /// The channel a parent made, by the fd numbers in a child's plan;
    /// None unless both are Unix datagram sockets.
    pub fn inherited(fds: [RawFd; 2]) -> Option<FdHandoff> {
        let is_dgram = |fd: RawFd| {
            let mut ty: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: getsockopt writes an int into `ty`; a bad fd fails.
            let rc = unsafe {
                libc::getsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_TYPE,
                    (&mut ty as *mut libc::c_int).cast(),
                    &mut len,
                )
            };
            rc == 0 && ty == libc::SOCK_DGRAM
        };
        (is_dgram(fds[0]) && is_dgram(fds[1])).then_some(FdHandoff {
            send: fds[0],
            recv: fds[1],
        })
    }

    /// It holds thousands of connections: its send buffer is as large as
    /// asked (SO_SNDBUFFORCE needs CAP_NET_ADMIN; without it the buffer is
    /// net.core.wmem_max's, a few hundred connections).
    pub fn holds_thousands(&self) -> bool {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes an int into `v`.
        let rc = unsafe {
            libc::getsockopt(
                self.send,
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        rc == 0 && v >= SNDBUF
    }

    /// The fd numbers, for a child's plan.
    pub fn fds(&self) -> [RawFd; 2] {
        [self.send, self.recv]
    }

    /// The end to poll for connections to take.
    pub fn recv_fd(&self) -> RawFd {
        self.recv
    }

    /// Sends `conn` in; the caller then closes its own fd. An error (the
    /// channel full: EAGAIN; too many fds in flight) leaves the caller to
    /// deal with the connection as it would without a channel.
    pub fn send(&self, conn: &impl AsRawFd) -> io::Result<()> {
        let fd = conn.as_raw_fd();
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut space = [0u64; 4];
        // SAFETY: msghdr is plain data; the fields set point into buffers
        // that live through the call, and the control buffer holds one
        // SCM_RIGHTS header with one fd (CMSG_SPACE of an int, checked).
        let rc = unsafe {
            let cmsg_space = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as usize;
            debug_assert!(cmsg_space <= std::mem::size_of_val(&space));
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = space.as_mut_ptr().cast();
            msg.msg_controllen = cmsg_space as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
            libc::sendmsg(self.send, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Takes one connection out, if one waits (close-on-exec, as this
    /// process's own are).
    pub fn take(&self) -> Taken {
        loop {
            let mut byte = [0u8; 1];
            let mut iov = libc::iovec {
                iov_base: byte.as_mut_ptr().cast(),
                iov_len: 1,
            };
            let mut space = [0u64; 4];
            // SAFETY: as in `send`; recvmsg writes at most msg_controllen
            // bytes of control data into `space`, which we own.
            let (rc, fd, truncated) = unsafe {
                let mut msg: libc::msghdr = std::mem::zeroed();
                msg.msg_iov = &mut iov;
                msg.msg_iovlen = 1;
                msg.msg_control = space.as_mut_ptr().cast();
                msg.msg_controllen = std::mem::size_of_val(&space) as _;
                let rc = libc::recvmsg(
                    self.recv,
                    &mut msg,
                    libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
                );
                let mut fd = None;
                if rc >= 0 {
                    let cmsg = libc::CMSG_FIRSTHDR(&msg);
                    if !cmsg.is_null()
                        && (*cmsg).cmsg_level == libc::SOL_SOCKET
                        && (*cmsg).cmsg_type == libc::SCM_RIGHTS
                    {
                        // One fd a datagram is sent; any more (from
                        // another holder of the channel) are closed.
                        let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                        let head = libc::CMSG_LEN(0) as usize;
                        let n = ((*cmsg).cmsg_len as usize).saturating_sub(head)
                            / std::mem::size_of::<RawFd>();
                        for k in 1..n {
                            libc::close(std::ptr::read_unaligned(data.add(k)));
                        }
                        let f = std::ptr::read_unaligned(data);
                        fd = (n > 0).then(|| OwnedFd::from_raw_fd(f));
                    }
                }
                (rc, fd, msg.msg_flags & libc::MSG_CTRUNC != 0)
            };
            if rc < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Taken::Empty;
            }
            if let Some(fd) = fd {
                return Taken::Conn(fd);
            }
            if truncated {
                // The kernel could not give this process the fd (none
                // free): it closed the connection.
                return Taken::Lost;
            }
            // A datagram without an fd (none is sent): skip it.
        }
    }
}

/// What [`FdHandoff::take`] found.
#[derive(Debug)]
pub enum Taken {
    Conn(OwnedFd),
    /// A connection the kernel closed: this process had no fd for it.
    Lost,
    Empty,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn a_connection_goes_through_with_its_bytes() {
        let p = FdHandoff::new().unwrap();
        assert!(matches!(p.take(), Taken::Empty));
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        c.write_all(b"ping").unwrap();
        p.send(&s).unwrap();
        drop(s);
        let Taken::Conn(got) = p.take() else {
            panic!("no connection in the channel")
        };
        let mut s = TcpStream::from(got);
        let mut buf = [0; 4];
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
        s.write_all(b"pong").unwrap();
        c.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"pong");
        assert!(matches!(p.take(), Taken::Empty));
        // Root here (the tests run as root, with CAP_NET_ADMIN).
        assert!(p.holds_thousands());
        let q = FdHandoff::inherited(p.fds()).expect("its own fds");
        assert_eq!(q.fds(), p.fds());
        assert!(FdHandoff::inherited([s.as_raw_fd(), p.fds()[1]]).is_none());
    }
}
