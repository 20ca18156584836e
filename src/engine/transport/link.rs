//! A connection's transport, picked once when it is made: plain TCP, TLS
//! over TCP, or a connected UDP socket. It owns the socket calls: reading,
//! queueing a message for the end of the loop turn, and writing what is
//! queued (one write for many TCP messages; a sendmmsg batch for UDP, whose
//! datagrams wait in the output buffer each behind a 2-byte length).

use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;

use mio::net::{TcpStream, UdpSocket};

/// Datagrams per sendmmsg/recvmmsg call.
pub const BATCH: usize = 32;

pub enum Link {
    Tcp(TcpStream),
    /// TCP carrying a TLS session (boxed with its stream: the session is
    /// several KiB, and a plain connection's link stays 16 bytes in
    /// release builds).
    Tls(Box<TlsLink>),
    /// Connected: a "connection" of --transport udp.
    Udp(UdpSocket),
    /// No socket: only while a link changes its kind.
    Detached,
}

pub struct TlsLink {
    stream: TcpStream,
    session: rustls::ClientConnection,
}

impl Link {
    /// The socket, for registering with the poll (a detached link has
    /// none: never registered).
    pub fn source(&mut self) -> Option<&mut dyn mio::event::Source> {
        match self {
            Link::Tcp(s) => Some(s),
            Link::Tls(t) => Some(&mut t.stream),
            Link::Udp(s) => Some(s),
            Link::Detached => None,
        }
    }

    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        match self {
            Link::Tcp(s) => s.take_error(),
            Link::Tls(t) => t.stream.take_error(),
            Link::Udp(s) => s.take_error(),
            Link::Detached => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    pub fn peer_addr(&self) -> io::Result<std::net::SocketAddr> {
        match self {
            Link::Tcp(s) => s.peer_addr(),
            Link::Tls(t) => t.stream.peer_addr(),
            Link::Udp(s) => s.peer_addr(),
            Link::Detached => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    pub fn is_udp(&self) -> bool {
        matches!(self, Link::Udp(_))
    }

    pub fn tls(&self) -> Option<&rustls::ClientConnection> {
        match self {
            Link::Tls(t) => Some(&t.session),
            _ => None,
        }
    }

    pub fn tls_mut(&mut self) -> Option<&mut rustls::ClientConnection> {
        match self {
            Link::Tls(t) => Some(&mut t.session),
            _ => None,
        }
    }

    /// TCP is up: from now on it carries `session`.
    pub fn start_tls(&mut self, session: rustls::ClientConnection) {
        *self = match std::mem::replace(self, Link::Detached) {
            Link::Tcp(stream) => Link::Tls(Box::new(TlsLink { stream, session })),
            other => other,
        };
    }

    /// Reads from a TCP stream (ciphertext under TLS).
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Link::Tcp(s) => s.read(buf),
            Link::Tls(t) => t.stream.read(buf),
            Link::Udp(_) | Link::Detached => Err(io::ErrorKind::Unsupported.into()),
        }
    }

    /// Queues one message for the next [`Link::flush`]: into `out`, or
    /// into the TLS session (sealed into records at the flush).
    pub fn queue(&mut self, out: &mut Vec<u8>, data: &[u8]) {
        match self {
            Link::Tls(t) => {
                let _ = t.session.writer().write_all(data);
            }
            Link::Udp(_) => {
                let at = begin_datagram(out);
                out.extend_from_slice(data);
                end_datagram(out, at);
            }
            Link::Tcp(_) => out.extend_from_slice(data),
            Link::Detached => debug_assert!(false, "a detached link queues nothing"),
        }
    }

    /// Queues the message `encode` writes; `scratch` holds it first under
    /// TLS (the session copies it). Returns what `encode` returns.
    #[inline]
    pub fn queue_with<R>(
        &mut self,
        out: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
        encode: impl FnOnce(&mut Vec<u8>) -> R,
    ) -> R {
        match self {
            Link::Tcp(_) => encode(out),
            Link::Detached => {
                debug_assert!(false, "a detached link queues nothing");
                encode(out)
            }
            Link::Tls(t) => {
                scratch.clear();
                let r = encode(scratch);
                let _ = t.session.writer().write_all(scratch);
                r
            }
            Link::Udp(_) => {
                let at = begin_datagram(out);
                let r = encode(out);
                end_datagram(out, at);
                r
            }
        }
    }

    /// Writes what is queued in `out` until done or the socket is full;
    /// returns the bytes of `out` consumed and the payload bytes sent.
    #[inline]
    pub fn flush(&mut self, out: &mut Vec<u8>) -> io::Result<(usize, usize)> {
        match self {
            Link::Tcp(s) => write_some(s, out).map(|n| (n, n)),
            Link::Tls(t) => {
                while t.session.wants_write() {
                    if t.session.write_tls(out).is_err() {
                        break;
                    }
                }
                write_some(&mut t.stream, out).map(|n| (n, n))
            }
            Link::Udp(s) => send_datagrams(s, out),
            Link::Detached => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    /// TLS: sends the session's alert, if any, as a last word before
    /// giving up on the connection.
    pub fn send_alert(&mut self) {
        if let Link::Tls(t) = self {
            let mut alert = Vec::new();
            let _ = t.session.write_tls(&mut alert);
            let _ = write_some(&mut t.stream, &alert);
        }
    }

    /// UDP: receives up to `lens.len()` datagrams into `slot`-byte pieces
    /// of `buf`; returns how many, their lengths in `lens`.
    pub fn recv_datagrams(
        &self,
        buf: &mut [u8],
        slot: usize,
        lens: &mut [usize; BATCH],
    ) -> io::Result<usize> {
        match self {
            Link::Udp(s) => recv_datagrams(s, buf, slot, lens),
            _ => Err(io::ErrorKind::Unsupported.into()),
        }
    }
}

/// Writes until done or the socket is full; returns bytes written.
fn write_some(stream: &mut TcpStream, data: &[u8]) -> io::Result<usize> {
    let mut off = 0;
    while off < data.len() {
        match stream.write(&data[off..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(off)
}

/// Starts a datagram in a UDP connection's output: a 2-byte length, filled
/// in by [`end_datagram`]. Returns where it starts.
fn begin_datagram(out: &mut Vec<u8>) -> usize {
    out.extend_from_slice(&[0, 0]);
    out.len() - 2
}

fn end_datagram(out: &mut [u8], at: usize) {
    let len = (out.len() - at - 2) as u16;
    out[at..at + 2].copy_from_slice(&len.to_be_bytes());
}

/// The next batch of the length-prefixed datagrams of `data` from `off`:
/// fills `iov` and `ends` (where each datagram ends in `data`); returns how
/// many.
fn next_batch(
    data: &[u8],
    off: usize,
    iov: &mut [libc::iovec; BATCH],
    ends: &mut [usize; BATCH],
) -> usize {
    let mut n = 0;
    let mut at = off;
    while n < BATCH && at + 2 <= data.len() {
        let len = usize::from(u16::from_be_bytes([data[at], data[at + 1]]));
        iov[n] = libc::iovec {
            iov_base: data[at + 2..].as_ptr() as *mut libc::c_void,
            iov_len: len,
        };
        at += 2 + len;
        ends[n] = at;
        n += 1;
    }
    n
}

/// Sends the length-prefixed datagrams in `data`, a batch per sendmmsg,
/// until done or the socket is full; returns the bytes of `data` consumed
/// and the payload bytes sent. A datagram the kernel refuses for good (too
/// big) is skipped: its query times out.
fn send_datagrams(sock: &UdpSocket, data: &[u8]) -> io::Result<(usize, usize)> {
    let mut off = 0;
    let mut payload = 0;
    while off < data.len() {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; BATCH];
        let mut ends = [0usize; BATCH];
        let n = next_batch(data, off, &mut iov, &mut ends);
        let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH];
        headers(&mut msgs, &mut iov[..n]);
        // SAFETY: `msgs[..n]` are written and point at iovecs that point
        // into `data`, all alive for the call; the socket is connected, so
        // no address.
        let rc = unsafe { libc::sendmmsg(sock.as_raw_fd(), msgs[0].as_mut_ptr(), n as u32, 0) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) => break,
                Some(libc::EINTR) => continue,
                // A late ICMP error of an earlier datagram: reported once.
                Some(libc::ECONNREFUSED) => continue,
                Some(libc::EMSGSIZE) => {
                    off = ends[0];
                    continue;
                }
                _ => return Err(e),
            }
        }
        let sent = rc as usize;
        if sent == 0 {
            break;
        }
        payload += iov[..sent].iter().map(|v| v.iov_len).sum::<usize>();
        off = ends[sent - 1];
    }
    Ok((off, payload))
}

/// Writes a header for each of `iov` (one buffer each) into the front of
/// `msgs`: only the headers a call uses are written (zeroing all 2 KiB of
/// the batch on every call would cost 4% of the instructions of a DNS
/// answer over UDP).
fn headers(msgs: &mut [MaybeUninit<libc::mmsghdr>; BATCH], iov: &mut [libc::iovec]) {
    for (m, v) in msgs.iter_mut().zip(iov) {
        // SAFETY: mmsghdr is plain data; all-zero is a valid empty value.
        let mut h: libc::mmsghdr = unsafe { std::mem::zeroed() };
        h.msg_hdr.msg_iov = v;
        h.msg_hdr.msg_iovlen = 1;
        m.write(h);
    }
}

fn recv_datagrams(
    sock: &UdpSocket,
    buf: &mut [u8],
    slot: usize,
    lens: &mut [usize; BATCH],
) -> io::Result<usize> {
    let n = (buf.len() / slot).min(BATCH);
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; BATCH];
    for (i, v) in iov.iter_mut().enumerate().take(n) {
        v.iov_base = buf[i * slot..].as_mut_ptr().cast();
        v.iov_len = slot;
    }
    let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH];
    headers(&mut msgs, &mut iov[..n]);
    // SAFETY: `msgs[..n]` are written; each points at an iovec for its own
    // `slot` bytes of `buf`, which outlives the call; no timeout, no
    // addresses asked for.
    let rc = unsafe {
        libc::recvmmsg(
            sock.as_raw_fd(),
            msgs[0].as_mut_ptr(),
            n as u32,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let got = rc as usize;
    for (l, m) in lens.iter_mut().zip(&msgs).take(got.min(n)) {
        // SAFETY: one of the `n` headers written above.
        *l = (unsafe { m.assume_init_ref() }.msg_len as usize).min(slot);
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(messages: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in messages {
            let at = begin_datagram(&mut out);
            out.extend_from_slice(m);
            end_datagram(&mut out, at);
        }
        out
    }

    #[test]
    fn datagrams_are_framed_behind_their_length() {
        let out = framed(&[b"abc", b"", &[7; 300]]);
        assert_eq!(&out[..5], b"\x00\x03abc");
        assert_eq!(&out[5..7], b"\x00\x00");
        assert_eq!(&out[7..9], &300u16.to_be_bytes());
        assert_eq!(out.len(), 9 + 300);
    }

    #[test]
    fn batches_take_at_most_batch_datagrams_and_say_where_each_ends() {
        let msgs: Vec<Vec<u8>> = (0..BATCH + 3).map(|i| vec![i as u8; i]).collect();
        let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        let out = framed(&refs);
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; BATCH];
        let mut ends = [0; BATCH];
        let n = next_batch(&out, 0, &mut iov, &mut ends);
        assert_eq!(n, BATCH);
        for (i, v) in iov.iter().enumerate() {
            assert_eq!(v.iov_len, i);
        }
        let n2 = next_batch(&out, ends[BATCH - 1], &mut iov, &mut ends);
        assert_eq!(n2, 3);
        assert_eq!(ends[2], out.len());
        assert_eq!(iov[0].iov_len, BATCH);
    }
}
