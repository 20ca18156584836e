//! Bytes in from the worker's connections ([`Io`]): reads through one
//! per-worker scratch buffer (a connection keeps only the start of a frame
//! not complete yet), TLS records opened into plaintext, frames cut by the
//! codec and handed on: an answer to the traffic, a probe's answer or a
//! finished handshake to the opening, a pushed message to the push
//! streams; and a full socket's writable edge. The writes are the
//! [`Outbox`]'s. The connections, the mode, the writes and the opening it
//! hands frames to are arguments.

use std::io::{self, Read};
use std::sync::Arc;

use super::conn::{ConnEnd, Flags, Next, State};
use super::connections::Conns;
use super::handshake::Handshake;
use super::inflight::Answer;
use super::outbox::Outbox;
use super::proto::{ws, Frame, Status};
use super::transport::link::BATCH;
use super::transport::ClientTransport;
use super::workload::Workload;
use crate::domain::Proto;
use crate::metrics::{bump, Bucket, QueryCounters, E_CONN_LOST, E_MALFORMED, E_OVERSIZED};
use crate::metrics::{AFTER_HANDSHAKE, NOT_TLS, TLS_ALERT};
use crate::scenario::Query;
use crate::sys::timer::monotonic_ns;
use rand::SeedableRng;
use rand_pcg::Pcg64Mcg;

mod ws_frames;

pub(super) struct Io {
    /// The worker's one read buffer.
    scratch: Vec<u8>,
    /// Plaintext out of TLS sessions.
    plain: Vec<u8>,
    /// Connections whose read stopped at its budget with bytes left: read
    /// again next turn (their readiness will not be reported again).
    unread: Vec<usize>,
    q: Arc<QueryCounters>,
    /// Masks of the WebSocket control frames sent (pongs, closes).
    rng: Pcg64Mcg,
    /// WebSocket: the run's close handshake is under way (a close or the
    /// FIN from the server now ends a connection as ours).
    closing: bool,
}

impl Io {
    pub(super) fn new(net: &ClientTransport, q: Arc<QueryCounters>) -> Io {
        Io {
            scratch: vec![0; net.scratch_len()],
            plain: Vec::new(),
            unread: Vec::new(),
            q,
            rng: Pcg64Mcg::from_rng(&mut rand::rng()),
            closing: false,
        }
    }

    /// WebSocket, at the run's end: a close (1000) on every upgraded
    /// connection, written now. Then the server's close, or its FIN, ends
    /// each (see [`Io::goodbye_done`]). Once; false when it was done.
    pub(super) fn goodbye(
        &mut self,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
    ) -> bool {
        if std::mem::replace(&mut self.closing, true) {
            return false;
        }
        for key in conns.held_keys() {
            let close = out.message();
            let mask = Some(ws::mask(&mut self.rng));
            wire::ws::encode_close(close, Some(wire::ws::close::NORMAL), mask);
            out.send_message(conns, key);
            conns.peer_closes(key, mode);
        }
        out.flush_dirty(conns, mode);
        true
    }

    /// The run's close handshake is over: no upgraded connection is left.
    pub(super) fn goodbye_done(&self, conns: &Conns) -> bool {
        conns.iter().all(|(_, c)| c.state != State::Held)
    }

    /// Connections are left to read on: the next poll must not wait.
    #[inline]
    pub(super) fn unread(&self) -> bool {
        !self.unread.is_empty()
    }

    /// Reads what the socket holds. `closing`: the event said the peer
    /// closed or failed, so read until the end is seen.
    pub(super) fn on_readable(
        &mut self,
        key: usize,
        closing: bool,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
        open: &Handshake,
    ) {
        // Out of `self` while in use, so that framing can use the rest of
        // it; put back before returning (no allocation either way).
        let mut scratch = std::mem::take(&mut self.scratch);
        let next = if conns[key].link.is_udp() {
            self.read_udp(key, &mut scratch, conns, mode, out, open)
        } else {
            self.read_all(key, &mut scratch, closing, conns, mode, out, open)
        };
        self.scratch = scratch;
        conns.read_at = None;
        if next.is_open() {
            // Queries the answers let go (closed loop, a full window)
            // leave now, before the next connection is read: the server
            // works on them while this loop reads on, instead of both
            // taking turns.
            let _ = out.flush_now(key, conns, mode);
        }
    }

    /// Receives datagrams, a batch per call, until the socket is empty or
    /// [`READS`] batches are in (then the connection is read again next
    /// turn).
    fn read_udp(
        &mut self,
        key: usize,
        scratch: &mut [u8],
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
        open: &Handshake,
    ) -> Next {
        let slot = open.net.slot().min(scratch.len());
        let slots = (scratch.len() / slot).clamp(1, BATCH);
        let mut lens = [0usize; BATCH];
        for _ in 0..READS {
            let got =
                match conns[key]
                    .link
                    .recv_datagrams(&mut scratch[..slot * slots], slot, &mut lens)
                {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // ICMP port unreachable, reported on the next call: the
                    // datagrams are lost, their queries time out.
                    Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => continue,
                    Err(_) => return Next::Open,
                };
            conns.read_at = Some(conns.now_ns());
            for (i, &len) in lens.iter().enumerate().take(got) {
                bump(&self.q.bytes_in, len as u64);
                let data = &scratch[i * slot..i * slot + len];
                if !self.on_datagram(key, data, conns, mode).is_open() {
                    return Next::Ended;
                }
            }
            if let Some(t) = mode.traffic_mut() {
                t.after_progress(key, conns, out);
            }
            if got < slots {
                return Next::Open;
            }
        }
        self.unread.push(key);
        Next::Open
    }

    /// One datagram: one whole response (or garbage, counted).
    fn on_datagram(
        &mut self,
        key: usize,
        data: &[u8],
        conns: &mut Conns,
        mode: &mut Workload,
    ) -> Next {
        conns[key].set(Flags::GOT_DATA, true);
        match mode {
            Workload::Traffic(t) => match t.codec.decode_datagram(data) {
                Frame::Response { key: q, status, .. } => {
                    return t.on_answer(key, q, status, conns)
                }
                _ => t.error(E_MALFORMED),
            },
            Workload::Push(p) => p.datagram(key, data, monotonic_ns(), &conns.counters),
            Workload::Hold => {}
        }
        Next::Open
    }

    /// Reads until the socket is empty, or [`READS`] reads (then the
    /// connection is read again next turn).
    #[allow(clippy::too_many_arguments)]
    fn read_all(
        &mut self,
        key: usize,
        scratch: &mut [u8],
        closing: bool,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
        open: &Handshake,
    ) -> Next {
        for _ in 0..READS {
            let conn = &mut conns[key];
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
                    let ended = (Bucket::ClosedByPeer, whole);
                    return self.peer_ended(key, ended, conns, mode, out, open);
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Next::Open,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    // A reset before any byte came back, after we sent the
                    // probe: the server never accepted this connection.
                    let half_open = open.sc.verify && !conn.has(Flags::GOT_DATA);
                    let bucket = if half_open {
                        Bucket::HalfOpen
                    } else {
                        Bucket::Reset
                    };
                    return self.peer_ended(key, (bucket, false), conns, mode, out, open);
                }
            };
            conn.set(Flags::GOT_DATA, true);
            bump(&self.q.bytes_in, n as u64);
            conns.read_at = Some(conns.now_ns());
            let next = if conns[key].link.tls().is_some() {
                self.on_tls_bytes(key, &scratch[..n], conns, mode, out, open)
            } else {
                self.on_bytes(key, &scratch[..k + n], conns, mode, out, open)
            };
            // A short read took all there was: more data makes a new edge,
            // so skip the read that would only say WouldBlock (unless the
            // peer's close is pending, which makes no new edge).
            if !next.is_open() || (k + n < scratch.len() && !closing) {
                return next;
            }
        }
        // A peer that sends as fast as it is read would hold the loop here:
        // the rest waits for the next turn, after the other connections and
        // the timers.
        self.unread.push(key);
        Next::Open
    }

    /// Ciphertext came in: feed the session, finish the handshake, frame
    /// the plaintext.
    fn on_tls_bytes(
        &mut self,
        key: usize,
        mut data: &[u8],
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
        open: &Handshake,
    ) -> Next {
        let mut plain = std::mem::take(&mut self.plain);
        if plain.len() < 16 * 1024 {
            plain.resize(16 * 1024, 0);
        }
        let next = 'feed: loop {
            let Some(tls) = conns[key].link.tls_mut() else {
                break Next::Open;
            };
            if data.is_empty() {
                if tls.wants_write() {
                    out.mark_dirty(conns, key);
                }
                break Next::Open;
            }
            if let Err(e) = tls.read_tls(&mut data) {
                tls_failed(key, &e, conns, mode);
                break Next::Ended;
            }
            if let Err(e) = tls.process_new_packets() {
                // Tell the server why (the alert), then give up.
                let handshaking = conns[key].state == State::Handshaking;
                conns[key].link.send_alert();
                tls_failed(key, &tls_error_text(&e, handshaking), conns, mode);
                break Next::Ended;
            }
            let conn = &conns[key];
            if conn.state == State::Handshaking
                && !conn.link.tls().is_some_and(|t| t.is_handshaking())
            {
                open.tls_ready(key, conns, mode, out);
            }
            loop {
                let Some(tls) = conns[key].link.tls_mut() else {
                    break 'feed Next::Open;
                };
                match tls.reader().read(&mut plain) {
                    Ok(0) => {
                        // close_notify: the server closed cleanly.
                        let ended = (Bucket::ClosedByPeer, true);
                        break 'feed self.peer_ended(key, ended, conns, mode, out, open);
                    }
                    Ok(n) => {
                        let next = self.on_bytes(key, &plain[..n], conns, mode, out, open);
                        if !next.is_open() {
                            break 'feed next;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        let ended = (Bucket::Reset, false);
                        break 'feed self.peer_ended(key, ended, conns, mode, out, open);
                    }
                }
            }
        };
        self.plain = plain;
        next
    }

    /// Frames bytes just read.
    fn on_bytes(
        &mut self,
        key: usize,
        data: &[u8],
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
        open: &Handshake,
    ) -> Next {
        if conns[key].state == State::Upgrading {
            return self.on_upgrade(key, data, conns, mode, out, open);
        }
        self.on_frames(key, data, conns, mode, out, open)
    }

    /// Pushed messages, on the bare stream or over WebSocket.
    fn on_push(
        &mut self,
        key: usize,
        data: &[u8],
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
        open: &Handshake,
    ) -> Next {
        if open.ws.is_some() {
            return self.on_ws_push(key, data, conns, mode, out);
        }
        let p = mode.push_mut().expect("push");
        let now_ns = monotonic_ns();
        let mut pending = std::mem::take(&mut conns[key].pending_in);
        let framed = p.bytes(key, &mut pending, data, now_ns, &conns.counters);
        conns[key].pending_in = pending;
        if !framed {
            conns.end(key, ConnEnd::Garbled, mode.as_mut());
            return Next::Ended;
        }
        Next::Open
    }

    /// Frames bytes read on an established connection.
    fn on_frames(
        &mut self,
        key: usize,
        data: &[u8],
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
        open: &Handshake,
    ) -> Next {
        if mode.is_push() {
            return self.on_push(key, data, conns, mode, out, open);
        }
        let conn = &mut conns[key];
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
        let mut next = Next::Open;
        while used < input.len() {
            let probing = conns[key].state == State::Probing;
            let codec = mode.codec(&open.probe);
            match codec.decode(&input[used..], &mut resume) {
                Frame::Incomplete => break,
                Frame::Partial { keep, skip } => {
                    hole = (used + keep, skip);
                    break;
                }
                Frame::UntilClose { keep, skip } => {
                    // No query more on this one: the server closes after
                    // this answer, and its close is what ends it.
                    if !conns[key].has(Flags::PEER_CLOSING) {
                        conns.peer_closes(key, mode);
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
                        conns.peer_closes(key, mode);
                    }
                    used += len;
                    if probing {
                        probe_answered(key, status, conns, mode, out, open);
                    } else if let Some(t) = mode.traffic_mut() {
                        next = t.on_answer(key, qkey, status, conns);
                    }
                }
                Frame::Ws { len, ev } => {
                    let frame = &input[used..used + len];
                    used += len;
                    next = self.on_ws_event(key, ev, frame, conns, mode, out);
                }
                f @ (Frame::Malformed | Frame::Oversized | Frame::Broken(_)) => {
                    if probing {
                        // The server answered, in its own language: it
                        // accepted the connection, not the probe.
                        let said = &input[used..input.len().min(used + 40)];
                        conns.probe_rejected(
                            key,
                            format!(
                                "it answered \"{}\", not a {} reply",
                                wire::escape::escape(said),
                                super::proto::word(
                                    open.sc.probe.as_ref().map_or(Proto::Dns, Query::proto)
                                )
                            ),
                        );
                        open.verified(key, conns, mode, out);
                        used = input.len();
                    } else if mode.has_traffic() {
                        let cause = match f {
                            Frame::Oversized => E_OVERSIZED,
                            Frame::Broken(named) => named,
                            _ => E_MALFORMED,
                        };
                        next = garbled(key, cause, conns, mode);
                    } else {
                        used = input.len();
                    }
                }
            }
            if !next.is_open() {
                return next;
            }
        }
        let cap = mode.codec(&open.probe).input_cap();
        if input.len() - used - hole.1 > cap {
            // A response that does not end (a length or a chunk size it
            // never fills, a marker that never comes): keeping more would
            // let the peer fill the client's memory.
            return garbled(key, E_OVERSIZED, conns, mode);
        }
        // Bytes and still no answer: kept to show should the server close
        // now (a refusal's words); answered, nothing is kept.
        conns.got_unanswered(key, data);
        let conn = &mut conns[key];
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
        if let Some(t) = mode.traffic_mut() {
            t.after_progress(key, conns, out);
        }
        Next::Open
    }

    /// The server ended `key`, by a close or a reset (`bucket`). A response
    /// whose body its close ends (HTTP with no length) is an answer when
    /// the end is `whole`: a clean close. A reset, or a TLS connection
    /// closed without close_notify, may have cut it (RFC 9112 8 and 9.8:
    /// incomplete), so its query is lost with the connection. Then the
    /// connection ends.
    fn peer_ended(
        &mut self,
        key: usize,
        (bucket, whole): (Bucket, bool),
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
        open: &Handshake,
    ) -> Next {
        let conn = &conns[key];
        if !mode.is_push() && !conn.pending_in.is_empty() {
            let codec = mode.codec(&open.probe);
            if let Frame::Response {
                key: qkey, status, ..
            } = codec.decode_at_close(&conn.pending_in)
            {
                let probing = conn.state == State::Probing;
                let conn = &mut conns[key];
                conn.pending_in = Vec::new();
                conn.resume = Default::default();
                if whole {
                    if probing {
                        probe_answered(key, status, conns, mode, out, open);
                    } else if let Some(t) = mode.traffic_mut() {
                        if !t.on_answer(key, qkey, status, conns).is_open() {
                            // (Its one query done, tcp-per-query's
                            // connection ended with it.)
                            return Next::Ended;
                        }
                    }
                } else if let Some(t) = mode.traffic_mut().filter(|_| !probing) {
                    if let Answer::Matched(_) = conns[key].flight.answer(qkey) {
                        t.error(E_CONN_LOST);
                    }
                }
            }
        }
        let why = if self.closing && conns[key].state == State::Held {
            // The FIN that ends the run's close handshake.
            ConnEnd::Closed
        } else {
            ConnEnd::Lost(bucket)
        };
        conns.end(key, why, mode.as_mut());
        Next::Ended
    }

    /// `key`'s socket has room again: what it queued goes, then what
    /// waited for it.
    pub(super) fn on_writable(
        &mut self,
        key: usize,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
    ) -> Next {
        conns[key].set(Flags::BLOCKED, false);
        let next = out.flush(key, conns, mode);
        if next.is_open() {
            if let Some(t) = mode.traffic_mut() {
                t.after_progress(key, conns, out);
            }
        }
        next
    }

    /// Reads on the connections whose last read stopped at its budget.
    /// (Once a loop turn, mostly with none: inlined.)
    #[inline]
    pub(super) fn read_on(
        &mut self,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
        open: &Handshake,
    ) {
        if !self.unread.is_empty() {
            self.read_unread(conns, mode, out, open);
        }
    }

    fn read_unread(
        &mut self,
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
        open: &Handshake,
    ) {
        let mut unread = std::mem::take(&mut self.unread);
        for &key in &unread {
            let open_conn = conns.get(key).is_some_and(|c| c.state != State::Connecting);
            if open_conn {
                self.on_readable(key, false, conns, mode, out, open);
            }
        }
        unread.clear();
        if self.unread.is_empty() {
            self.unread = unread;
        }
    }
}

/// The answer to the probe on `key` (`status`): it is verified, and
/// counted refused when the answer refuses it. (It stays open: held.)
#[cold]
fn probe_answered(
    key: usize,
    status: Status,
    conns: &mut Conns,
    mode: &mut Workload,
    out: &mut Outbox,
    open: &Handshake,
) {
    if let Some(what) = refusal(status) {
        conns.probe_rejected(key, what);
    }
    open.verified(key, conns, mode, out);
}

/// A TLS error ends the connection; the first one's words are kept.
fn tls_failed(key: usize, e: &dyn std::fmt::Display, conns: &mut Conns, mode: &mut Workload) {
    conns.counters.tls_failed(|| e.to_string());
    conns.end(key, ConnEnd::TlsFailed, mode.as_mut());
}

/// Bytes that cannot be answers (`cause`: malformed or oversized) end
/// the connection: what follows them cannot be framed either.
fn garbled(key: usize, cause: usize, conns: &mut Conns, mode: &mut Workload) -> Next {
    if let Some(t) = mode.traffic_mut() {
        t.error(cause);
    }
    conns.end(key, ConnEnd::Garbled, mode.as_mut());
    Next::Ended
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
fn tls_error_text(e: &rustls::Error, handshaking: bool) -> String {
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
/// FORMERR, NOTIMP or REFUSED, a Redis error, or a reply that does not
/// match.
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
        Status::Redis(wire::resp::Kind::Error(w)) => Some(format!(
            "Redis -{}",
            wire::resp::ERROR_WORDS[usize::from(w)]
        )),
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
        assert!(tls_error_text(&not_tls, true).starts_with(NOT_TLS));
        let alert = Error::AlertReceived(AlertDescription::HandshakeFailure);
        let words = tls_error_text(&alert, true);
        assert!(words.starts_with(TLS_ALERT), "{words}");
        assert!(words.contains("HandshakeFailure"), "{words}");
        let words = tls_error_text(&Error::DecryptError, false);
        assert!(words.starts_with(AFTER_HANDSHAKE), "{words}");
        assert!(words.contains("integrity check"), "{words}");
        assert_eq!(
            tls_error_text(&not_tls, false),
            format!("{AFTER_HANDSHAKE}{}", tls_error_text(&not_tls, true))
        );
    }
}
