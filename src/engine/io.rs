//! Bytes in and out of the worker's connections: reads through one
//! per-worker scratch buffer (a connection keeps only the start of a frame
//! not complete yet), TLS records opened into plaintext, frames cut by the
//! codec and handed on; writes gathered over a loop turn and flushed with
//! one call per connection.

use std::io::{self, Read};
use std::time::Instant;

use super::conn::{End, Flags, State};
use super::inflight::Answer;
use super::link::BATCH;
use super::mode::Mode;
use super::proto::{Frame, Status};
use super::spares::{give_back, lend};
use super::worker::Worker;
use crate::domain::Proto;
use crate::metrics::{bump, Bucket, E_CONN_LOST, E_MALFORMED, E_OVERSIZED};
use crate::metrics::{AFTER_HANDSHAKE, NOT_TLS, TLS_ALERT};
use crate::scenario::Query;
use crate::sys::timer::monotonic_ns;

impl Worker {
    /// Reads what the socket holds. `closing`: the event said the peer
    /// closed or failed, so read until the end is seen.
    pub(super) fn on_readable(&mut self, key: usize, closing: bool) {
        // Out of `self` while in use, so that framing can call back into
        // the worker; put back before returning (no allocation either way).
        let mut scratch = std::mem::take(&mut self.scratch);
        if self.conns.slab[key].link.is_udp() {
            self.read_udp(key, &mut scratch);
        } else {
            self.read_all(key, &mut scratch, closing);
        }
        self.scratch = scratch;
        self.read_at = None;
        // Queries the answers let go (closed loop, a full window) leave
        // now, before the next connection is read: the server works on
        // them while this loop reads on, instead of both taking turns.
        if let Some(c) = self
            .conns
            .slab
            .get_mut(key)
            .filter(|c| c.has(Flags::DIRTY) && !c.has(Flags::BLOCKED))
        {
            c.set(Flags::DIRTY, false);
            self.flush(key);
        }
    }

    /// Receives datagrams, a batch per call, until the socket is empty or
    /// [`READS`] batches are in (then the connection is read again next
    /// turn).
    fn read_udp(&mut self, key: usize, scratch: &mut [u8]) {
        let slot = self.net.slot().min(scratch.len());
        let slots = (scratch.len() / slot).clamp(1, BATCH);
        let mut lens = [0usize; BATCH];
        for _ in 0..READS {
            let Some(conn) = self.conns.slab.get(key) else {
                return;
            };
            let got = match conn
                .link
                .recv_datagrams(&mut scratch[..slot * slots], slot, &mut lens)
            {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // ICMP port unreachable, reported on the next call: the
                // datagrams are lost, their queries time out.
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => continue,
                Err(_) => return,
            };
            self.read_at = Some(self.ns(Instant::now()));
            for (i, &len) in lens.iter().enumerate().take(got) {
                bump(&self.q.bytes_in, len as u64);
                let data = &scratch[i * slot..i * slot + len];
                self.on_datagram(key, data);
                if !self.conns.slab.contains(key) {
                    return;
                }
            }
            self.after_progress(key);
            if got < slots {
                return;
            }
        }
        self.unread.push(key);
    }

    /// One datagram: one whole response (or garbage, counted).
    fn on_datagram(&mut self, key: usize, data: &[u8]) {
        self.conns.slab[key].set(Flags::GOT_DATA, true);
        match &mut self.mode {
            Mode::Traffic(t) => match t.codec.decode_datagram(data) {
                Frame::Response { key: q, status, .. } => self.answered(key, q, status),
                _ => t.rec.error(E_MALFORMED),
            },
            Mode::Push(p) => p.datagram(key, data, monotonic_ns(), &self.counters),
            Mode::Hold => {}
        }
    }

    /// Reads until the socket is empty, or [`READS`] reads (then the
    /// connection is read again next turn).
    fn read_all(&mut self, key: usize, scratch: &mut [u8], closing: bool) {
        for _ in 0..READS {
            let conn = &mut self.conns.slab[key];
            // A small unfinished frame goes in front of the read, in the
            // scratch buffer: framing sees one slice, and the connection's
            // own buffer never grows to a read's size (a reply streaming by
            // would leave every connection holding that much).
            let k = conn.pending_in.len();
            let front = k > 0 && k <= FRONT && conn.link.tls().is_none();
            let k = if front {
                scratch[..k].copy_from_slice(&conn.pending_in);
                // (Freed: an idle connection holds no buffer.)
                conn.pending_in = Vec::new();
                k
            } else {
                0
            };
            let got = conn.link.read(&mut scratch[k..]);
            if !matches!(got, Ok(1..)) {
                // Nothing read: the frame goes back (a close looks at it).
                conn.pending_in.extend_from_slice(&scratch[..k]);
            }
            let n = match got {
                Ok(0) => {
                    // (TLS: a close without close_notify, which would have
                    // ended the connection in the plaintext's read.)
                    let whole = conn.link.tls().is_none();
                    return self.peer_ended(key, Bucket::ClosedByPeer, whole);
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    // A reset before any byte came back, after we sent the
                    // probe: the server never accepted this connection.
                    let half_open = self.sc.verify && !conn.has(Flags::GOT_DATA);
                    let bucket = if half_open {
                        Bucket::HalfOpen
                    } else {
                        Bucket::Reset
                    };
                    return self.peer_ended(key, bucket, false);
                }
            };
            conn.set(Flags::GOT_DATA, true);
            bump(&self.q.bytes_in, n as u64);
            self.read_at = Some(self.ns(Instant::now()));
            let alive = if self.conns.slab[key].link.tls().is_some() {
                self.on_tls_bytes(key, &scratch[..n])
            } else {
                self.on_bytes(key, &scratch[..k + n])
            };
            if !alive {
                return;
            }
            // A short read took all there was: more data makes a new edge,
            // so skip the read that would only say WouldBlock (unless the
            // peer's close is pending, which makes no new edge).
            if k + n < scratch.len() && !closing {
                return;
            }
        }
        // A peer that sends as fast as it is read would hold the loop here:
        // the rest waits for the next turn, after the other connections and
        // the timers.
        self.unread.push(key);
    }

    /// A TLS error ends the connection; the first one's words are kept.
    fn tls_failed(&mut self, key: usize, e: &dyn std::fmt::Display) {
        self.counters.tls_failed(|| e.to_string());
        self.end(key, End::TlsFailed);
    }

    /// Ciphertext came in: feed the session, finish the handshake, frame
    /// the plaintext. False when the connection is gone.
    fn on_tls_bytes(&mut self, key: usize, mut data: &[u8]) -> bool {
        let mut plain = std::mem::take(&mut self.plain);
        if plain.len() < 16 * 1024 {
            plain.resize(16 * 1024, 0);
        }
        let alive = 'feed: loop {
            let Some(tls) = self.conns.slab.get_mut(key).and_then(|c| c.link.tls_mut()) else {
                break false;
            };
            if data.is_empty() {
                if tls.wants_write() {
                    self.mark_dirty(key);
                }
                break true;
            }
            if let Err(e) = tls.read_tls(&mut data) {
                self.tls_failed(key, &e);
                break false;
            }
            if let Err(e) = tls.process_new_packets() {
                // Tell the server why (the alert), then give up.
                let handshaking = self.conns.slab[key].state == State::Handshaking;
                self.conns.slab[key].link.send_alert();
                self.tls_failed(key, &tls_words(&e, handshaking));
                break false;
            }
            let conn = &self.conns.slab[key];
            if conn.state == State::Handshaking
                && !conn.link.tls().is_some_and(|t| t.is_handshaking())
            {
                self.tls_ready(key);
            }
            loop {
                let Some(tls) = self.conns.slab.get_mut(key).and_then(|c| c.link.tls_mut()) else {
                    break 'feed false;
                };
                match tls.reader().read(&mut plain) {
                    Ok(0) => {
                        // close_notify: the server closed cleanly.
                        self.peer_ended(key, Bucket::ClosedByPeer, true);
                        break 'feed false;
                    }
                    Ok(n) => {
                        if !self.on_bytes(key, &plain[..n]) {
                            break 'feed false;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        self.peer_ended(key, Bucket::Reset, false);
                        break 'feed false;
                    }
                }
            }
        };
        self.plain = plain;
        alive
    }

    /// Frames bytes just read. False when the connection is gone.
    fn on_bytes(&mut self, key: usize, data: &[u8]) -> bool {
        if let Some(p) = self.mode.push_mut() {
            let conn = &mut self.conns.slab[key];
            let now_ns = monotonic_ns();
            if !p.bytes(key, &mut conn.pending_in, data, now_ns, &self.counters) {
                self.end(key, End::Garbled);
                return false;
            }
            return true;
        }
        let conn = &mut self.conns.slab[key];
        // Nothing pending: the connection keeps its (empty) buffer, and
        // what is left of `data` goes into it with no new allocation.
        let mut buf = if conn.pending_in.is_empty() {
            Vec::new()
        } else {
            std::mem::take(&mut conn.pending_in)
        };
        let mut resume = std::mem::take(&mut conn.resume);
        let input: &[u8] = if buf.is_empty() {
            data
        } else {
            buf.extend_from_slice(data);
            &buf
        };
        let mut used = 0;
        // Read bytes of the unfinished response to drop: (from, len).
        let mut hole = (0, 0);
        let mut alive = true;
        while used < input.len() {
            let probing = self.conns.slab[key].state == State::Probing;
            let codec = self.mode.codec(&self.probe_codec);
            match codec.decode(&input[used..], &mut resume) {
                Frame::Incomplete => break,
                Frame::Partial { keep, skip } => {
                    hole = (used + keep, skip);
                    break;
                }
                Frame::UntilClose { keep, skip } => {
                    // No query more on this one: the server closes after
                    // this answer, and its close is what ends it.
                    if !self.conns.slab[key].has(Flags::PEER_CLOSING) {
                        self.peer_closes(key);
                    }
                    hole = (used + keep, skip);
                    break;
                }
                Frame::Response {
                    len,
                    key: qkey,
                    status,
                    close,
                } => {
                    if close {
                        self.peer_closes(key);
                    }
                    used += len;
                    self.on_response(key, probing, qkey, status);
                }
                f @ (Frame::Malformed | Frame::Oversized) => {
                    if probing {
                        // The server answered, in its own language: it
                        // accepted the connection, not the probe.
                        let said = &input[used..input.len().min(used + 40)];
                        self.conns.probe_rejected(
                            key,
                            format!(
                                "it answered \"{}\", not a {} reply",
                                wire::escape::escape(said),
                                super::proto::word(
                                    self.sc.probe.as_ref().map_or(Proto::Dns, Query::proto)
                                )
                            ),
                        );
                        self.verified(key);
                        used = input.len();
                    } else if self.mode.has_traffic() {
                        let cause = if f == Frame::Oversized {
                            E_OVERSIZED
                        } else {
                            E_MALFORMED
                        };
                        self.garbled(key, cause);
                        alive = false;
                        break;
                    } else {
                        used = input.len();
                    }
                }
            }
            if !self.conns.slab.contains(key) {
                alive = false;
                break;
            }
        }
        let cap = self.mode.codec(&self.probe_codec).input_cap();
        if alive && input.len() - used - hole.1 > cap {
            // A response that does not end (a length or a chunk size it
            // never fills, a marker that never comes): keeping more would
            // let the peer fill the client's memory.
            self.garbled(key, E_OVERSIZED);
            alive = false;
        }
        if alive {
            let conn = &mut self.conns.slab[key];
            let (at, skip) = hole;
            if used < input.len() {
                if buf.is_empty() {
                    if skip == 0 {
                        conn.pending_in.extend_from_slice(&input[used..]);
                    } else {
                        conn.pending_in.extend_from_slice(&input[used..at]);
                        conn.pending_in.extend_from_slice(&input[at + skip..]);
                    }
                } else {
                    buf.drain(at..at + skip);
                    buf.drain(..used);
                    if buf.capacity() > 16 * 1024 && buf.len() * 4 < buf.capacity() {
                        // Most of it was dropped (a body streaming by): keep
                        // what is left, not the room of the read it came in.
                        buf.shrink_to(buf.len().max(1024));
                    }
                    conn.pending_in = buf;
                }
            }
            // (The default whenever nothing is left.)
            conn.resume = resume;
            self.after_progress(key);
        }
        alive
    }

    /// A whole response on `key` (`probing`: the answer to its probe).
    fn on_response(&mut self, key: usize, probing: bool, qkey: Option<u64>, status: Status) {
        if probing {
            if let Some(what) = refusal(status) {
                self.conns.probe_rejected(key, what);
            }
            self.verified(key);
        } else if self.mode.has_traffic() {
            self.answered(key, qkey, status);
        }
    }

    /// The server ended `key`, by a close or a reset (`bucket`). A response
    /// whose body its close ends (HTTP with no length) is an answer when
    /// the end is `whole`: a clean close. A reset, or a TLS connection
    /// closed without close_notify, may have cut it (RFC 9112 8 and 9.8:
    /// incomplete), so its query is lost with the connection. Then the
    /// connection ends.
    fn peer_ended(&mut self, key: usize, bucket: Bucket, whole: bool) {
        let conn = &self.conns.slab[key];
        if !self.mode.is_push() && !conn.pending_in.is_empty() {
            let codec = self.mode.codec(&self.probe_codec);
            if let Frame::Response {
                key: qkey, status, ..
            } = codec.decode_at_close(&conn.pending_in)
            {
                let probing = conn.state == State::Probing;
                let conn = &mut self.conns.slab[key];
                conn.pending_in = Vec::new();
                conn.resume = Default::default();
                if whole {
                    self.on_response(key, probing, qkey, status);
                    if !self.conns.slab.contains(key) {
                        // (Its one query done, tcp-per-query's connection
                        // ended with it.)
                        return;
                    }
                } else if let Some(t) = self.mode.traffic_mut().filter(|_| !probing) {
                    if let Answer::Matched(_) = self.conns.slab[key].flight.answer(qkey) {
                        t.rec.error(E_CONN_LOST);
                    }
                }
            }
        }
        self.end(key, End::Lost(bucket));
    }

    /// Bytes that cannot be answers (`cause`: malformed or oversized) end
    /// the connection: what follows them cannot be framed either.
    fn garbled(&mut self, key: usize, cause: usize) {
        if let Some(t) = self.mode.traffic_mut() {
            t.rec.error(cause);
        }
        self.end(key, End::Garbled);
    }

    pub(super) fn on_writable(&mut self, key: usize) {
        self.conns.slab[key].set(Flags::BLOCKED, false);
        if self.flush(key) {
            self.after_progress(key);
        }
    }

    /// Queues bytes for the end of this loop turn.
    pub(super) fn write(&mut self, key: usize, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let conn = &mut self.conns.slab[key];
        lend(&mut conn.pending_out, &mut self.spare);
        conn.link.queue(&mut conn.pending_out, data);
        self.mark_dirty(key);
    }

    /// Reads on the connections whose last read stopped at its budget.
    pub(super) fn read_on(&mut self) {
        let mut unread = std::mem::take(&mut self.unread);
        for &key in &unread {
            let open = self
                .conns
                .slab
                .get(key)
                .is_some_and(|c| c.state != State::Connecting);
            if open {
                self.on_readable(key, false);
            }
        }
        unread.clear();
        if self.unread.is_empty() {
            self.unread = unread;
        }
    }

    /// Puts the connection on the list flushed at the end of this turn.
    #[inline]
    pub(super) fn mark_dirty(&mut self, key: usize) {
        let conn = &mut self.conns.slab[key];
        if !conn.has(Flags::DIRTY) {
            conn.set(Flags::DIRTY, true);
            self.dirty.push(key);
        }
    }

    /// Writes every connection's queued bytes: one syscall each.
    pub(super) fn flush_dirty(&mut self) {
        let mut dirty = std::mem::take(&mut self.dirty);
        for &key in &dirty {
            let Some(c) = self.conns.slab.get_mut(key) else {
                continue;
            };
            if !c.has(Flags::DIRTY) {
                continue;
            }
            c.set(Flags::DIRTY, false);
            if !c.has(Flags::BLOCKED) {
                self.flush(key);
            }
        }
        dirty.clear();
        if self.dirty.is_empty() {
            self.dirty = dirty;
        }
    }

    /// Writes what the connection has queued; false when that failed and
    /// the connection is gone.
    fn flush(&mut self, key: usize) -> bool {
        let conn = &mut self.conns.slab[key];
        match conn.link.flush(&mut conn.pending_out) {
            Ok((n, payload)) => {
                bump(&self.q.bytes_out, payload as u64);
                if n == conn.pending_out.len() {
                    if !self.busy || conn.pending_out.capacity() > 16 * 1024 {
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
                true
            }
            Err(_) => {
                self.end(key, End::Lost(Bucket::Reset));
                false
            }
        }
    }
}

/// Reads (TCP) or batches (UDP) of one connection in one loop turn: 1 MiB
/// through the 64 KiB scratch buffer.
const READS: usize = 16;

/// The longest unfinished frame a read is put behind in the scratch buffer
/// (longer ones take the read into the connection's own buffer).
const FRONT: usize = 4 * 1024;

/// A TLS error in words that say whose bytes were wrong: bytes that are
/// not TLS at all, an alert, a record that fails its check; after the
/// handshake, said so (the session was up: not a question of
/// certificates).
fn tls_words(e: &rustls::Error, handshaking: bool) -> String {
    use rustls::{Error, InvalidMessage};
    let what = match e {
        Error::InvalidMessage(
            InvalidMessage::InvalidContentType | InvalidMessage::UnknownProtocolVersion,
        ) => format!("{NOT_TLS} ({e})"),
        Error::AlertReceived(_) if handshaking => {
            format!("{TLS_ALERT} ({e})")
        }
        Error::DecryptError => format!(
            "a record from the server failed its integrity check ({e}): corrupted on the way, \
             or not sealed by this session"
        ),
        _ => e.to_string(),
    };
    if handshaking {
        what
    } else {
        format!("{AFTER_HANDSHAKE}{what}")
    }
}

/// A probe's answer that refuses it, in words: an HTTP error status, a DNS
/// FORMERR, NOTIMP or REFUSED, or a reply that does not match.
fn refusal(status: Status) -> Option<String> {
    match status {
        Status::Http(code) if code >= 400 => Some(format!("HTTP {code}")),
        Status::Rcode {
            rcode: rc @ (1 | 4 | 5),
            ..
        } => Some(format!(
            "DNS {}",
            match rc {
                1 => "FORMERR",
                4 => "NOTIMP",
                _ => "REFUSED",
            }
        )),
        Status::Mismatch => Some("a reply that does not match the probe".into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_errors_say_whose_bytes_were_wrong() {
        use rustls::{AlertDescription, Error, InvalidMessage};
        let not_tls = Error::InvalidMessage(InvalidMessage::InvalidContentType);
        assert!(tls_words(&not_tls, true).starts_with(NOT_TLS));
        let alert = Error::AlertReceived(AlertDescription::HandshakeFailure);
        let words = tls_words(&alert, true);
        assert!(words.starts_with(TLS_ALERT), "{words}");
        assert!(words.contains("HandshakeFailure"), "{words}");
        let words = tls_words(&Error::DecryptError, false);
        assert!(words.starts_with(AFTER_HANDSHAKE), "{words}");
        assert!(words.contains("integrity check"), "{words}");
        assert_eq!(
            tls_words(&not_tls, false),
            format!("{AFTER_HANDSHAKE}{}", tls_words(&not_tls, true))
        );
    }
}
