//! A worker's acceptor: its SO_REUSEPORT listeners, what it does when the
//! process runs out of fds (shed through a reserved fd, or pause for
//! [`ACCEPT_PAUSE`]), and when a member of a group closes its listeners and
//! opens them again ([`Handoff`]). It hands each accepted connection to
//! its worker and serves none itself.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Interest, Poll, Registry, Token};

use super::handoff::Handoff;
use super::stats::{bump, Shared, WorkerStats, MAX_ERRNO};
use crate::sys::fd_handoff::Taken;

/// How long accepting pauses when the process is out of fds and no reserve
/// fd is left to shed a connection with, or on an error about the queue
/// rather than one connection (ENOBUFS), or a connection from the channel
/// lost for want of an fd.
pub(super) const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// What one accept gave.
pub(super) enum Accepted {
    /// A connection for the worker to serve.
    Stream(TcpStream),
    /// Nothing to serve, but the queue may hold more (a connection shed, an
    /// error about one connection).
    Again,
    /// Nothing to take now: the queue is empty, the listener closed, or
    /// accepting paused.
    Done,
}

pub(super) struct Acceptor {
    /// None while closed because the process is full.
    listeners: Vec<Option<TcpListener>>,
    listen: Vec<SocketAddr>,
    backlog: u32,
    max_open: i64,
    handoff: Option<Arc<Handoff>>,
    /// An fd held in reserve: when accept fails for lack of fds, closing it
    /// lets the worker accept and immediately close one connection, so the
    /// client learns at once instead of waiting in the accept queue.
    reserve: Option<File>,
    /// Accepting paused since then (see [`ACCEPT_PAUSE`]).
    paused: Option<Instant>,
    /// The channel may hold connections this worker left for lack of room.
    channel_left: bool,
    /// The channel is in this worker's epoll set (see [`Acceptor::watch_channel`]).
    watching: bool,
    channel_token: Token,
    stats: Arc<WorkerStats>,
    shared: Arc<Shared>,
}

/// What an acceptor starts with.
pub(super) struct Listening {
    pub listeners: Vec<TcpListener>,
    pub listen: Vec<SocketAddr>,
    pub backlog: u32,
    pub max_open: i64,
    pub handoff: Option<Arc<Handoff>>,
    /// The group's channel is watched under this token.
    pub channel_token: Token,
}

impl Acceptor {
    /// Registers listener `i` under `token(i)`.
    pub(super) fn new(
        l: Listening,
        poll: &Poll,
        token: fn(usize) -> Token,
        stats: Arc<WorkerStats>,
        shared: Arc<Shared>,
    ) -> io::Result<Acceptor> {
        let mut listeners = l.listeners;
        for (i, l) in listeners.iter_mut().enumerate() {
            poll.registry().register(l, token(i), Interest::READABLE)?;
        }
        let channel = l.handoff.as_ref().and_then(|h| h.channel_in());
        if let Some(p) = channel {
            poll.registry().register(
                &mut SourceFd(&p.recv_fd()),
                l.channel_token,
                Interest::READABLE,
            )?;
        }
        let watching = channel.is_some();
        Ok(Acceptor {
            listeners: listeners.into_iter().map(Some).collect(),
            listen: l.listen,
            backlog: l.backlog,
            max_open: l.max_open,
            handoff: l.handoff,
            reserve: File::open("/dev/null").ok(),
            paused: None,
            channel_left: false,
            watching,
            channel_token: l.channel_token,
            stats,
            shared,
        })
    }

    /// Listeners, open or closed.
    pub(super) fn len(&self) -> usize {
        self.listeners.len()
    }

    /// Accepting is paused (see [`ACCEPT_PAUSE`]).
    pub(super) fn paused(&self) -> bool {
        self.paused.is_some()
    }

    /// While paused, how long until accepting resumes (zero: due now).
    pub(super) fn pause_left(&self) -> Option<Duration> {
        self.paused
            .map(|at| ACCEPT_PAUSE.saturating_sub(at.elapsed()))
    }

    pub(super) fn resume(&mut self) {
        self.paused = None;
    }

    fn pause(&mut self) -> Accepted {
        // (A pause ends by the clock: the worker then accepts, and takes
        // from the channel, again.)
        self.paused = Some(Instant::now());
        Accepted::Done
    }

    /// Open connections at which a member of a group hands new ones to its
    /// siblings: below `max_open` by room for what its accept queues hold
    /// at that moment (a connect storm queues hundreds).
    fn close_at(&self) -> i64 {
        self.max_open - (self.max_open / 50).max(1)
    }

    /// Time to close the listeners: nearly full, in a group whose members
    /// close when full (see [`Handoff`]). Otherwise the process keeps
    /// accepting and sheds what its fds cannot hold, as a lone server does.
    pub(super) fn handoff_due(&self) -> bool {
        self.shared.current.load(Relaxed) >= self.close_at()
            && self.handoff.as_ref().is_some_and(|h| h.may_close)
    }

    /// Accepts one connection from listener `i`.
    pub(super) fn accept_one(&mut self, i: usize) -> Accepted {
        let Some(listener) = self.listeners[i].as_ref() else {
            return Accepted::Done;
        };
        // A member of a group at its cap: the fds past it are the group's
        // own (a child's pipes, /proc), so what it accepts goes to the
        // channel (or is shed) as if it were out of fds.
        let full = self.handoff.is_some() && self.shared.current.load(Relaxed) >= self.max_open;
        match listener.accept() {
            Ok((stream, _)) if full => {
                self.pass_or_shed(&stream);
                Accepted::Again
            }
            Ok((stream, _)) => Accepted::Stream(stream),
            // Its fds all taken: through the reserve fd, or pause (a queue
            // left as it is would wait for the next connection's wake-up,
            // which may never come).
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => self.shed(i),
            Err(e) => self.on_error(&e),
        }
    }

    /// An accept error other than running out of fds: what it leaves of
    /// the queue.
    fn on_error(&mut self, e: &io::Error) -> Accepted {
        match e.kind() {
            io::ErrorKind::WouldBlock => return Accepted::Done,
            io::ErrorKind::Interrupted => return Accepted::Again,
            _ => {}
        }
        let errno = e.raw_os_error().unwrap_or(0) as usize;
        bump(&self.stats.accept_errno[errno.min(MAX_ERRNO - 1)], 1);
        // Errors about one connection (aborted, protocol, a firewall's
        // EPERM) leave the queue usable; anything else (ENOBUFS, ENOMEM)
        // pauses instead of spinning.
        let per_connection = matches!(
            e.raw_os_error(),
            Some(libc::ECONNABORTED | libc::EPROTO | libc::EPERM | libc::ETIMEDOUT)
        );
        if per_connection {
            Accepted::Again
        } else {
            self.pause()
        }
    }

    /// After the worker took a connection from listener `i`: tells the
    /// group how full the process is.
    pub(super) fn opened(&self, i: usize) {
        if let Some(h) = &self.handoff {
            let open = self.shared.current.load(Relaxed);
            let listener = self.listeners[i].as_ref();
            h.opened(open, || listener.map_or(0, |l| accept_queue_len(l) as i64));
        }
    }

    /// After the worker closed a connection: tells the group.
    pub(super) fn closed(&self) {
        if let Some(h) = &self.handoff {
            h.closed(self.shared.current.load(Relaxed));
        }
    }

    /// Out of fds: frees the reserve fd to accept one connection and pass
    /// or close it at once. With no fd to free (a reserve lost to another
    /// thread is taken again once one is free), accepting pauses; a queue
    /// left waiting, or an empty one (accept fails for want of an fd
    /// before it looks), is nothing refused.
    fn shed(&mut self, i: usize) -> Accepted {
        let Some(listener) = self.listeners[i].as_ref() else {
            return Accepted::Done;
        };
        if self
            .reserve
            .take()
            .or_else(|| File::open("/dev/null").ok())
            .is_none()
        {
            return self.pause();
        }
        let next = match listener.accept() {
            Ok((stream, _)) => {
                self.pass_or_shed(&stream);
                Accepted::Again
            }
            // Another thread took the freed fd: the clock retries, and
            // nothing was refused yet.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                self.reserve = File::open("/dev/null").ok();
                return self.pause();
            }
            Err(e) => self.on_error(&e),
        };
        self.reserve = File::open("/dev/null").ok();
        if self.reserve.is_none() {
            return self.pause();
        }
        next
    }

    /// A connection this process cannot hold: through the group's channel
    /// to a member with room, or else closed (shed). The caller drops its
    /// own fd.
    fn pass_or_shed(&self, stream: &TcpStream) {
        let passed = self
            .handoff
            .as_ref()
            .and_then(|h| h.channel_out())
            .is_some_and(|p| p.send(stream).is_ok());
        if passed {
            bump(&self.stats.passed, 1);
        } else {
            bump(&self.stats.accept_no_fds, 1);
        }
    }

    /// A connection from the group's channel, while this process has room
    /// for it (see [`Handoff::has_room`]).
    pub(super) fn take_passed(&mut self) -> Option<TcpStream> {
        let h = self.handoff.as_ref()?;
        let channel = h.channel_in()?;
        if !h.has_room(self.shared.current.load(Relaxed)) || self.paused() {
            self.channel_left = true;
            return None;
        }
        match channel.take() {
            Taken::Conn(fd) => {
                bump(&self.stats.taken, 1);
                Some(TcpStream::from_std(std::net::TcpStream::from(fd)))
            }
            Taken::Lost => {
                // Out of fds: the clock retries (see `pause`).
                bump(&self.stats.accept_no_fds, 1);
                bump(&self.stats.passage_lost, 1);
                self.channel_left = true;
                self.pause();
                None
            }
            Taken::Empty => {
                self.channel_left = false;
                None
            }
        }
    }

    /// After taking from the channel: watches it while this worker may take
    /// from it, and not while it has no room (or is paused), when each
    /// connection a full sibling passes would wake it for nothing. Room
    /// again is seen on this worker's own closes and at the pause's end
    /// ([`Acceptor::room_again`]); watching again reports what already
    /// waits.
    pub(super) fn watch_channel(&mut self, registry: &Registry) {
        let Some(fd) = self
            .handoff
            .as_ref()
            .and_then(|h| h.channel_in())
            .map(|p| p.recv_fd())
        else {
            return;
        };
        let want = !self.channel_left;
        if want == self.watching {
            return;
        }
        let mut source = SourceFd(&fd);
        let done = if want {
            registry.register(&mut source, self.channel_token, Interest::READABLE)
        } else {
            registry.deregister(&mut source)
        };
        if done.is_ok() {
            self.watching = want;
        }
    }

    /// The channel woke this worker while it had no room, and now it has.
    pub(super) fn room_again(&self) -> bool {
        self.channel_left
            && self
                .handoff
                .as_ref()
                .is_some_and(|h| h.has_room(self.shared.current.load(Relaxed)))
    }

    /// Closes listener `i` (its queue taken first by the worker): the
    /// kernel sends new connections to the siblings.
    pub(super) fn close(&mut self, i: usize) {
        if let Some(l) = self.listeners[i].take() {
            // What arrived between the last accept and now is reset
            // with the listener (unless the kernel migrates it).
            bump(&self.stats.queued_at_close, accept_queue_len(&l));
        }
    }

    /// A listener is closed and the process has room again.
    pub(super) fn reopen_due(&self) -> bool {
        let margin = (self.max_open / 100).max(16);
        self.listeners.iter().any(Option::is_none)
            && self.shared.current.load(Relaxed) < self.close_at() - margin
    }

    /// Binds listener `i` again if it is closed, registered as `token`;
    /// true when it was reopened (the worker then accepts from it).
    pub(super) fn reopen(&mut self, i: usize, registry: &Registry, token: Token) -> bool {
        if self.listeners[i].is_some() {
            return false;
        }
        let Ok(sock) = super::bind::tcp_listener(self.listen[i], self.backlog) else {
            return false;
        };
        let std: std::net::TcpListener = sock.into();
        let mut l = TcpListener::from_std(std);
        if registry.register(&mut l, token, Interest::READABLE).is_ok() {
            self.listeners[i] = Some(l);
            return true;
        }
        false
    }
}

/// Connections waiting in a listener's accept queue (TCP_INFO reports the
/// queue's length as `tcpi_unacked` for a listening socket).
fn accept_queue_len(l: &TcpListener) -> u64 {
    use std::os::fd::AsRawFd;
    // SAFETY: tcp_info is plain old data; zeroes are a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`, which we own.
    let rc = unsafe {
        libc::getsockopt(
            l.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        u64::from(info.tcpi_unacked)
    } else {
        0
    }
}
