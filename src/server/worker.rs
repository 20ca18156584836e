//! One server worker: a mio (epoll, edge-triggered) loop on its own thread,
//! with its own SO_REUSEPORT listeners (its [`Acceptor`]) and UDP sockets and
//! its connections in a slab. A connection lives on one worker for its whole
//! life; nothing here takes a lock or allocates per message.
//!
//! Memory discipline: reads go through one per-worker scratch buffer; a
//! connection keeps bytes only while a partial frame or an unsent reply
//! exists, and frees them as soon as they are gone. A peer that sends but
//! never reads is not read from once `max_pending` reply bytes wait for it.

use std::io::{self, Read, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use mio::net::{TcpListener, TcpStream, UdpSocket};
use mio::{Events, Interest, Poll, Token};
use slab::Slab;

use super::acceptor::{Accepted, Acceptor, Listening};
use super::handoff::Handoff;
use super::push::{Pusher, Sent, Target};
use super::responder::{Action, Processed, Responder, Session};
use super::stats::{bump, Shared, WorkerStats, MAX_ERRNO};
use super::websocket::WsNotes;
use crate::server_config::PushConfig;
use crate::sys::timer::{monotonic_ns, wall_ns, Timer};

/// Size of the per-worker read buffer.
const SCRATCH: usize = 64 * 1024;
/// The waker's token; listeners and UDP sockets count down from below it,
/// connections count up from 0 (their slab keys).
pub const WAKER: Token = Token(usize::MAX);
const MAX_SOCKETS: usize = 1 << 16;

fn listener_token(i: usize) -> Token {
    Token(usize::MAX - 1 - i)
}

fn udp_token(i: usize) -> Token {
    Token(usize::MAX - 1 - MAX_SOCKETS - i)
}

/// --mode push: the worker's timer.
const PUSH_TIMER: Token = Token(usize::MAX - 1 - 2 * MAX_SOCKETS);
/// A member of an elastic group: the group's channel.
const PASSAGE: Token = Token(usize::MAX - 2 - 2 * MAX_SOCKETS);

enum Source {
    Conn(usize),
    Listener(usize),
    Udp(usize),
    PushTimer,
    FdHandoff,
    Waker,
}

fn source(t: Token) -> Source {
    match usize::MAX - t.0 {
        0 => Source::Waker,
        d if d <= MAX_SOCKETS => Source::Listener(d - 1),
        d if d <= 2 * MAX_SOCKETS => Source::Udp(d - 1 - MAX_SOCKETS),
        d if d == 2 * MAX_SOCKETS + 1 => Source::PushTimer,
        d if d == 2 * MAX_SOCKETS + 2 => Source::FdHandoff,
        _ => Source::Conn(t.0),
    }
}

/// A push worker's schedule and the timer that wakes it at each slot.
struct Push {
    pusher: Pusher,
    timer: Timer,
    /// --push-over websocket: a connection subscribes once it upgraded.
    over_ws: bool,
}

/// One accepted connection: a few dozen bytes while idle.
struct Conn {
    stream: TcpStream,
    /// Partial frame from earlier reads (empty, unallocated when none).
    pending_in: Vec<u8>,
    /// Reply bytes the socket did not take yet.
    pending_out: Vec<u8>,
    session: Session,
    /// --tls: the session (boxed: several KiB, only for TLS connections).
    tls: Option<Box<rustls::ServerConnection>>,
    /// Reading stopped because `pending_out` reached `max_pending`.
    read_blocked: bool,
    /// Close once `pending_out` is flushed.
    closing: bool,
    /// --mode push: its subscription.
    sub: Option<u32>,
}

/// What a worker is given by the server at start.
pub struct Setup {
    pub poll: Poll,
    pub listeners: Vec<TcpListener>,
    pub udp: Vec<UdpSocket>,
    pub responder: Arc<Responder>,
    pub stats: Arc<WorkerStats>,
    pub shared: Arc<Shared>,
    pub max_pending: usize,
    /// Where the listeners are bound (to bind them again), and their backlog.
    pub listen: Vec<std::net::SocketAddr>,
    pub backlog: u32,
    /// Connections this process can hold (its fd limit); see [`Handoff`]
    /// for what a member of a group does near it.
    pub max_open: i64,
    /// One of a group of processes sharing the port: when a full process
    /// may close its listeners, and when to ask for the next process.
    pub handoff: Option<Arc<Handoff>>,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// --mode push: what to send, how often.
    pub push: Option<PushConfig>,
}

/// The per-worker buffers and counters a connection is served with.
struct Io {
    scratch: Vec<u8>,
    out: Vec<u8>,
    responder: Arc<Responder>,
    stats: Arc<WorkerStats>,
    max_pending: usize,
    tls: Option<Arc<rustls::ServerConfig>>,
    /// TLS: plaintext out of sessions, and records to send.
    plain: Vec<u8>,
    sealed: Vec<u8>,
}

pub struct Worker {
    poll: Poll,
    acceptor: Acceptor,
    udp: Vec<UdpSocket>,
    conns: Slab<Conn>,
    io: Io,
    shared: Arc<Shared>,
    push: Option<Push>,
}

enum Next {
    Keep,
    Close,
    /// A read or write failed; true when it was the peer's reset (or a
    /// write after its close).
    Failed(bool),
}

/// The peer reset the connection, or it is gone (a write after its close).
fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
    )
}

impl Worker {
    pub fn new(setup: Setup) -> io::Result<Worker> {
        let Setup {
            poll,
            listeners,
            mut udp,
            responder,
            stats,
            shared,
            max_pending,
            listen,
            backlog,
            max_open,
            handoff,
            tls,
            push,
        } = setup;
        let push = match push {
            Some(cfg) => {
                let timer = Timer::new()?;
                poll.registry().register(
                    &mut mio::unix::SourceFd(&std::os::fd::AsRawFd::as_raw_fd(&timer)),
                    PUSH_TIMER,
                    Interest::READABLE,
                )?;
                let pusher = Pusher::new(&cfg, monotonic_ns());
                let over_ws = cfg.over == crate::domain::PushOver::Websocket;
                Some(Push {
                    pusher,
                    timer,
                    over_ws,
                })
            }
            None => None,
        };
        let listening = Listening {
            listeners,
            listen,
            backlog,
            max_open,
            handoff,
            channel_token: PASSAGE,
        };
        let acceptor = Acceptor::new(
            listening,
            &poll,
            listener_token,
            stats.clone(),
            shared.clone(),
        )?;
        for (i, u) in udp.iter_mut().enumerate() {
            poll.registry()
                .register(u, udp_token(i), Interest::READABLE)?;
        }
        Ok(Worker {
            poll,
            acceptor,
            udp,
            conns: Slab::new(),
            io: Io {
                scratch: vec![0; SCRATCH],
                out: Vec::new(),
                responder,
                stats,
                max_pending,
                plain: if tls.is_some() {
                    vec![0; 16 * 1024]
                } else {
                    Vec::new()
                },
                tls,
                sealed: Vec::new(),
            },
            shared,
            push,
        })
    }

    /// Serves until the shared stop flag is set (and the waker fires).
    pub fn run(mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        self.push_due()?;
        loop {
            let timeout = self.acceptor.pause_left();
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if self.shared.stop.load(Relaxed) {
                break;
            }
            // (By the clock: a worker whose connections keep it busy sees
            // events in every wait, and would never resume on an empty one.)
            if self.acceptor.pause_left() == Some(Duration::ZERO) {
                self.resume_accepting();
            }
            for ev in events.iter() {
                match source(ev.token()) {
                    Source::Waker => {}
                    Source::Listener(i) => self.accept(i),
                    Source::Udp(i) => self.serve_udp(i),
                    Source::PushTimer => self.push_due()?,
                    Source::FdHandoff => self.take_passed(),
                    Source::Conn(key) => {
                        let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
                        let closing = ev.is_read_closed() || ev.is_error();
                        self.serve_conn(key, readable, closing);
                    }
                }
            }
        }
        let open = self.conns.len() as u64;
        bump(&self.io.stats.closed, open);
        for _ in 0..open {
            self.shared.closed();
        }
        Ok(())
    }

    fn resume_accepting(&mut self) {
        self.acceptor.resume();
        for i in 0..self.acceptor.len() {
            self.accept(i);
        }
        // What the channel brought while paused (its wake-up is spent).
        if self.acceptor.room_again() {
            self.take_passed();
        }
    }

    /// The process is nearly full: takes what already waits in this
    /// worker's accept queues (the room kept below `max_open` holds them),
    /// then closes the listeners so the kernel sends new connections to the
    /// siblings. Closing resets whatever is still queued unless the kernel
    /// migrates it (net.ipv4.tcp_migrate_req = 1), so the queues are
    /// emptied first.
    fn close_listeners(&mut self) {
        for i in 0..self.acceptor.len() {
            while self.accept_one(i) {}
            self.acceptor.close(i);
        }
    }

    /// Binds the listeners again once the process has room.
    fn reopen_listeners(&mut self) {
        for i in 0..self.acceptor.len() {
            if self
                .acceptor
                .reopen(i, self.poll.registry(), listener_token(i))
            {
                self.accept(i);
            }
        }
    }

    /// Accepts until the queue is empty (edge-triggered).
    fn accept(&mut self, i: usize) {
        if self.acceptor.paused() {
            return;
        }
        loop {
            if self.acceptor.handoff_due() {
                self.close_listeners();
                return;
            }
            if !self.accept_one(i) {
                return;
            }
        }
    }

    /// Takes connections a full sibling passed, while this process has
    /// room. What is left waits for a member with room (the channel wakes
    /// every worker watching it at each new one; this one watches only
    /// while it has room, and takes again when it has: see `serve_conn`).
    fn take_passed(&mut self) {
        while let Some(stream) = self.acceptor.take_passed() {
            self.add(stream);
            self.acceptor.opened(0);
        }
        self.acceptor.watch_channel(self.poll.registry());
    }

    /// Accepts one connection from listener `i`; false when there is none
    /// to take now (queue empty, listener closed, or accepting paused).
    fn accept_one(&mut self, i: usize) -> bool {
        match self.acceptor.accept_one(i) {
            Accepted::Stream(stream) => {
                self.add(stream);
                self.acceptor.opened(i);
                true
            }
            Accepted::Again => true,
            Accepted::Done => false,
        }
    }

    fn add(&mut self, mut stream: TcpStream) {
        // Replies are written whole; Nagle would only delay them.
        let _ = stream.set_nodelay(true);
        let tls = match &self.io.tls {
            Some(cfg) => match rustls::ServerConnection::new(cfg.clone()) {
                Ok(mut c) => {
                    // Replies are sealed as soon as they are made; what waits
                    // is bounded by --max-pending, not by rustls.
                    c.set_buffer_limit(None);
                    Some(Box::new(c))
                }
                Err(_) => {
                    bump(&self.io.stats.conn_errors, 1);
                    return;
                }
            },
            None => None,
        };
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        if let Err(e) = self.poll.registry().register(
            &mut stream,
            Token(key),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            let errno = e.raw_os_error().unwrap_or(0) as usize;
            bump(&self.io.stats.accept_errno[errno.min(MAX_ERRNO - 1)], 1);
            return;
        }
        // Over WebSocket a client subscribes once it has upgraded.
        let sub = self
            .push
            .as_mut()
            .filter(|p| !p.over_ws)
            .map(|p| p.pusher.subscribe(Target::Tcp(key), monotonic_ns()));
        entry.insert(Conn {
            stream,
            pending_in: Vec::new(),
            pending_out: Vec::new(),
            session: Session::default(),
            tls,
            read_blocked: false,
            closing: false,
            sub,
        });
        bump(&self.io.stats.accepted, 1);
        self.shared.opened();
    }

    fn serve_conn(&mut self, key: usize, readable: bool, closing: bool) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        let next = serve(conn, &mut self.io, readable, closing);
        if let Some(p) = self.push.as_mut() {
            if conn.sub.is_none() && conn.session.upgraded() && matches!(next, Next::Keep) {
                conn.sub = Some(p.pusher.subscribe(Target::Tcp(key), monotonic_ns()));
            }
        }
        match next {
            Next::Keep => return,
            Next::Close => {}
            // A push client leaves by closing with messages unread, which
            // its kernel answers with a reset: its way out, not an error.
            Next::Failed(true) if self.push.is_some() => {}
            Next::Failed(_) => bump(&self.io.stats.conn_errors, 1),
        }
        // Dropping the stream closes it, which also removes it from epoll.
        let conn = self.conns.remove(key);
        if let (Some(p), Some(id)) = (self.push.as_mut(), conn.sub) {
            p.pusher.unsubscribe(id);
        }
        drop(conn);
        bump(&self.io.stats.closed, 1);
        self.shared.closed();
        self.acceptor.closed();
        if self.acceptor.paused() {
            self.resume_accepting();
        }
        if self.acceptor.reopen_due() {
            self.reopen_listeners();
        }
        if self.acceptor.room_again() {
            self.take_passed();
        }
    }

    /// --mode push: sends what is due, then sets the timer for the next
    /// slot.
    fn push_due(&mut self) -> io::Result<()> {
        let Some(push) = self.push.as_mut() else {
            return Ok(());
        };
        push.timer.clear();
        let conns = &mut self.conns;
        let udp = &self.udp;
        let stats = &self.io.stats;
        push.pusher.run(
            || (monotonic_ns(), wall_ns()),
            stats,
            |target, msg| match target {
                Target::Tcp(key) => match conns.get_mut(key) {
                    Some(c) if c.pending_out.is_empty() && c.tls.is_none() => {
                        match write_some(&mut c.stream, msg, stats) {
                            Ok(n) if n == msg.len() => Sent::Whole,
                            // Its rest goes when the socket takes it; until
                            // then, the messages due are dropped.
                            Ok(n) if n > 0 => {
                                c.pending_out.extend_from_slice(&msg[n..]);
                                Sent::Whole
                            }
                            Ok(_) => Sent::Full,
                            // (Its next event closes it.)
                            Err(_) => Sent::Gone,
                        }
                    }
                    _ => Sent::Full,
                },
                Target::Udp { sock, peer } => match udp[sock].send_to(msg, peer) {
                    Ok(n) => {
                        bump(&stats.bytes_out, n as u64);
                        Sent::Whole
                    }
                    Err(_) => Sent::Full,
                },
            },
        );
        stats
            .push
            .subscribers
            .store(push.pusher.len() as u64, Relaxed);
        let wait = push.pusher.next_due_ns().saturating_sub(monotonic_ns());
        push.timer.arm(Duration::from_nanos(wait))
    }

    fn serve_udp(&mut self, i: usize) {
        if self.push.is_some() {
            return self.subscribe_udp(i);
        }
        let Io {
            scratch,
            out,
            responder,
            stats,
            ..
        } = &mut self.io;
        let sock = &self.udp[i];
        loop {
            let (n, peer) = match sock.recv_from(scratch) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    bump(&stats.conn_errors, 1);
                    return;
                }
            };
            bump(&stats.bytes_in, n as u64);
            out.clear();
            let (answered, bad) = responder.udp(&scratch[..n], out);
            bump(&stats.requests, answered);
            bump(&stats.bad_input, bad);
            if out.is_empty() {
                continue;
            }
            match sock.send_to(out, peer) {
                Ok(m) => bump(&stats.bytes_out, m as u64),
                Err(_) => bump(&stats.udp_dropped, 1),
            }
        }
    }
}

impl Worker {
    /// --mode push: datagrams subscribe their sender (`bye` unsubscribes).
    fn subscribe_udp(&mut self, i: usize) {
        let Some(push) = self.push.as_mut() else {
            return;
        };
        let stats = &self.io.stats;
        loop {
            let (n, peer) = match self.udp[i].recv_from(&mut self.io.scratch) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            bump(&stats.bytes_in, n as u64);
            // Only the words subscribe: a stray or spoofed datagram of
            // anything else does not make the server send to its source.
            let bye = match self.io.scratch[..n].trim_ascii() {
                b"subscribe" => false,
                b"bye" => true,
                _ => {
                    bump(&stats.bad_input, 1);
                    continue;
                }
            };
            if push.pusher.heard(i, peer, bye, monotonic_ns()) {
                bump(&stats.push.subscribed, 1);
            }
        }
    }
}

/// Serves one readiness event of a connection. `closing`: the peer closed
/// or failed, so reads go on until that is seen.
fn serve(conn: &mut Conn, io: &mut Io, mut readable: bool, mut closing: bool) -> Next {
    if !conn.pending_out.is_empty() {
        if let Err(e) = flush(conn, &io.stats) {
            return Next::Failed(is_reset(&e));
        }
    }
    if conn.read_blocked && conn.pending_out.is_empty() {
        // Output drained: read again what the peer sent meanwhile (no new
        // edge will announce it), all of it.
        conn.read_blocked = false;
        readable = true;
        closing = true;
    }
    if readable && !conn.read_blocked && !conn.closing {
        match read(conn, io, closing) {
            Ok(Action::Continue) => {}
            Ok(Action::CloseAfterReply) => conn.closing = true,
            Ok(Action::Abort) => return Next::Close,
            Err(e) => return Next::Failed(is_reset(&e)),
        }
    }
    if conn.closing && conn.pending_out.is_empty() {
        return Next::Close;
    }
    Next::Keep
}

/// Reads until the socket is drained, the peer closes, or output backs up.
/// Without `drain_all`, a short read ends it: it took all there was, and
/// more data makes a new edge.
fn read(conn: &mut Conn, io: &mut Io, drain_all: bool) -> io::Result<Action> {
    loop {
        let room = io.max_pending.saturating_sub(conn.pending_out.len());
        if room == 0 {
            conn.read_blocked = true;
            return Ok(Action::Continue);
        }
        let want = room.min(io.scratch.len());
        let n = match conn.stream.read(&mut io.scratch[..want]) {
            Ok(0) => {
                // Peer closed its side: finish sending, then close.
                conn.closing = true;
                conn.pending_in = Vec::new();
                return Ok(Action::Continue);
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Action::Continue),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        bump(&io.stats.bytes_in, n as u64);
        if conn.tls.is_some() {
            let action = serve_tls(conn, io, n)?;
            if action != Action::Continue {
                return Ok(action);
            }
            if n < want && !drain_all {
                return Ok(Action::Continue);
            }
            continue;
        }
        io.out.clear();
        let p = io.responder.tcp(
            &mut conn.session,
            &mut conn.pending_in,
            &io.scratch[..n],
            &mut io.out,
        );
        count(&io.stats, &p);
        if p.action == Action::Abort {
            return Ok(Action::Abort);
        }
        send(conn, &io.out, &io.stats)?;
        if p.action == Action::CloseAfterReply {
            conn.pending_in = Vec::new();
            return Ok(Action::CloseAfterReply);
        }
        if n < want && !drain_all {
            return Ok(Action::Continue);
        }
    }
}

/// Ciphertext of a TLS connection, `io.scratch[..n]`: through the session,
/// the responder on the plaintext, replies sealed and sent.
fn serve_tls(conn: &mut Conn, io: &mut Io, n: usize) -> io::Result<Action> {
    let Some(tls) = conn.tls.as_mut() else {
        return Ok(Action::Continue);
    };
    let mut data = &io.scratch[..n];
    let mut action = Action::Continue;
    io.out.clear();
    while !data.is_empty() && action == Action::Continue {
        tls.read_tls(&mut data)?;
        if let Err(e) = tls.process_new_packets() {
            // The alert goes out; the connection ends as a failure.
            bump(&io.stats.bad_input, 1);
            io.sealed.clear();
            let _ = tls.write_tls(&mut io.sealed);
            let _ = write_some(&mut conn.stream, &io.sealed, &io.stats);
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        loop {
            match tls.reader().read(&mut io.plain) {
                Ok(0) => {
                    // close_notify: answer what came, then close.
                    action = Action::CloseAfterReply;
                    break;
                }
                Ok(m) => {
                    let p = io.responder.tcp(
                        &mut conn.session,
                        &mut conn.pending_in,
                        &io.plain[..m],
                        &mut io.out,
                    );
                    count(&io.stats, &p);
                    if p.action != Action::Continue {
                        action = p.action;
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
    }
    if action == Action::Abort {
        return Ok(action);
    }
    if !io.out.is_empty() {
        tls.writer().write_all(&io.out)?;
    }
    if action == Action::CloseAfterReply {
        tls.send_close_notify();
        conn.pending_in = Vec::new();
    }
    io.sealed.clear();
    while tls.wants_write() {
        tls.write_tls(&mut io.sealed)?;
    }
    let sealed = std::mem::take(&mut io.sealed);
    let sent = send(conn, &sealed, &io.stats);
    io.sealed = sealed;
    sent?;
    Ok(action)
}

/// Counts what the responder did with a chunk.
fn count(stats: &WorkerStats, p: &Processed) {
    bump(&stats.requests, p.requests);
    bump(&stats.bad_input, p.bad);
    if p.ws != WsNotes::default() {
        stats.ws.count(&p.ws);
    }
}

/// Writes `data` after whatever is already pending; keeps what the socket
/// does not take.
fn send(conn: &mut Conn, data: &[u8], stats: &WorkerStats) -> io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    if !conn.pending_out.is_empty() {
        conn.pending_out.extend_from_slice(data);
        return Ok(());
    }
    let written = write_some(&mut conn.stream, data, stats)?;
    if written < data.len() {
        conn.pending_out.extend_from_slice(&data[written..]);
    }
    Ok(())
}

/// Writes pending output; frees the buffer once it is all sent.
fn flush(conn: &mut Conn, stats: &WorkerStats) -> io::Result<()> {
    let written = write_some(&mut conn.stream, &conn.pending_out, stats)?;
    if written == conn.pending_out.len() {
        conn.pending_out = Vec::new();
    } else {
        conn.pending_out.drain(..written);
    }
    Ok(())
}

/// Writes until done or the socket is full; returns bytes written.
fn write_some(stream: &mut TcpStream, data: &[u8], stats: &WorkerStats) -> io::Result<usize> {
    let mut off = 0;
    while off < data.len() {
        match stream.write(&data[off..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                off += n;
                bump(&stats.bytes_out, n as u64);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(off)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        assert!(matches!(source(WAKER), Source::Waker));
        assert!(matches!(source(listener_token(0)), Source::Listener(0)));
        assert!(matches!(source(listener_token(7)), Source::Listener(7)));
        assert!(matches!(source(udp_token(0)), Source::Udp(0)));
        assert!(matches!(source(udp_token(3)), Source::Udp(3)));
        assert!(matches!(source(PUSH_TIMER), Source::PushTimer));
        assert!(matches!(source(PASSAGE), Source::FdHandoff));
        assert!(matches!(source(Token(0)), Source::Conn(0)));
        assert!(matches!(source(Token(1_000_000)), Source::Conn(1_000_000)));
    }
}
