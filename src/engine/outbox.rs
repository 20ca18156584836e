//! A worker's writes ([`Outbox`]): messages queued on their connections
//! over a loop turn and flushed at its end with one call per connection;
//! output buffers lent to a connection only while it has bytes to write
//! (see [`BufferPool`]). It writes; it reads nothing and decides no query.

use std::sync::Arc;

use super::buffer_pool::{give_back, lend, BufferPool};
use super::conn::{Conn, ConnEnd, Flags, Next};
use super::connections::Conns;
use super::workload::Workload;
use crate::metrics::{bump, Bucket, QueryCounters};

pub(super) struct Outbox {
    /// The message being built (a first message, a probe; a query a TLS
    /// session seals).
    out: Vec<u8>,
    /// Output buffers given back by connections that went idle, lent to
    /// the next one that queues a message.
    spare: BufferPool,
    /// Connections with bytes to write at the end of this loop turn.
    dirty: Vec<usize>,
    q: Arc<QueryCounters>,
}

impl Outbox {
    pub(super) fn new(q: Arc<QueryCounters>) -> Outbox {
        Outbox {
            out: Vec::with_capacity(4096),
            spare: BufferPool::default(),
            dirty: Vec::new(),
            q,
        }
    }

    /// Once a second: the spare buffers nobody took go (see
    /// [`BufferPool::trim`]).
    pub(super) fn trim(&mut self) {
        self.spare.trim();
    }

    /// Queues bytes on `key` for the end of this loop turn.
    pub(super) fn write(&mut self, conns: &mut Conns, key: usize, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let conn = &mut conns[key];
        lend(&mut conn.pending_out, &mut self.spare);
        conn.link.queue(&mut conn.pending_out, data);
        self.mark_dirty(conns, key);
    }

    /// The buffer a message is built in, empty; [`Outbox::send_message`]
    /// queues it.
    pub(super) fn message(&mut self) -> &mut Vec<u8> {
        self.out.clear();
        &mut self.out
    }

    /// Queues the message built in [`Outbox::message`] on `key`.
    pub(super) fn send_message(&mut self, conns: &mut Conns, key: usize) {
        let out = std::mem::take(&mut self.out);
        self.write(conns, key, &out);
        self.out = out;
    }

    /// Queues on `conn` (`key`) what `encode` writes (through the message
    /// buffer when a TLS session seals it), and returns what it returns.
    #[inline]
    pub(super) fn queue_with<R>(
        &mut self,
        key: usize,
        conn: &mut Conn,
        encode: impl FnOnce(&mut Vec<u8>) -> R,
    ) -> R {
        lend(&mut conn.pending_out, &mut self.spare);
        let r = conn
            .link
            .queue_with(&mut conn.pending_out, &mut self.out, encode);
        if !conn.has(Flags::DIRTY) {
            conn.set(Flags::DIRTY, true);
            self.dirty.push(key);
        }
        r
    }

    /// Puts the connection on the list flushed at the end of this turn.
    #[inline]
    pub(super) fn mark_dirty(&mut self, conns: &mut Conns, key: usize) {
        let conn = &mut conns[key];
        if !conn.has(Flags::DIRTY) {
            conn.set(Flags::DIRTY, true);
            self.dirty.push(key);
        }
    }

    /// Writes every connection's queued bytes: one syscall each. (Twice a
    /// loop turn, often with none: inlined.)
    #[inline]
    pub(super) fn flush_dirty(&mut self, conns: &mut Conns, mode: &mut Workload) {
        if !self.dirty.is_empty() {
            self.flush_all(conns, mode);
        }
    }

    fn flush_all(&mut self, conns: &mut Conns, mode: &mut Workload) {
        let mut dirty = std::mem::take(&mut self.dirty);
        for &key in &dirty {
            let Some(c) = conns.get_mut(key) else {
                continue;
            };
            if !c.has(Flags::DIRTY) {
                continue;
            }
            c.set(Flags::DIRTY, false);
            if !c.has(Flags::BLOCKED) {
                // (An end is the connection's own: the others are written
                // all the same.)
                let _ = self.flush(key, conns, mode);
            }
        }
        dirty.clear();
        if self.dirty.is_empty() {
            self.dirty = dirty;
        }
    }

    /// Writes now what `key` has queued, unless its socket is full (then
    /// its writable edge does).
    #[inline]
    pub(super) fn flush_now(&mut self, key: usize, conns: &mut Conns, mode: &mut Workload) -> Next {
        let c = &mut conns[key];
        if !c.has(Flags::DIRTY) || c.has(Flags::BLOCKED) {
            return Next::Open;
        }
        c.set(Flags::DIRTY, false);
        self.flush(key, conns, mode)
    }

    /// Writes what the connection has queued; it ends when that failed.
    pub(super) fn flush(&mut self, key: usize, conns: &mut Conns, mode: &mut Workload) -> Next {
        let conn = &mut conns[key];
        match conn.link.flush(&mut conn.pending_out) {
            Ok((n, payload)) => {
                bump(&self.q.bytes_out, payload as u64);
                if n == conn.pending_out.len() {
                    let busy = matches!(mode, Workload::Traffic(t) if t.busy);
                    if !busy || conn.pending_out.capacity() > 16 * 1024 {
                        // Nothing kept while idle: the buffer goes back to
                        // the spares.
                        give_back(std::mem::take(&mut conn.pending_out), &mut self.spare);
                    } else {
                        // Never idle (closed loop): the next answer sends
                        // again; no realloc.
                        conn.pending_out.clear();
                    }
                } else {
                    conn.pending_out.drain(..n);
                    conn.set(Flags::BLOCKED, true);
                }
                Next::Open
            }
            Err(_) => {
                conns.end(key, ConnEnd::Lost(Bucket::Reset), mode.as_mut());
                Next::Ended
            }
        }
    }
}
