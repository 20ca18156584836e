//! The WebSocket side of the reads: the server's answer to the upgrade,
//! its control frames, and push messages over WebSocket.

use super::super::conn::{ConnEnd, Next};
use super::super::connections::Conns;
use super::super::handshake::Handshake;
use super::super::outbox::Outbox;
use super::super::proto::ws;
use super::super::workload::Workload;
use super::Io;
use crate::metrics::{bump, ws_close_slot, Bucket};
use crate::sys::timer::monotonic_ns;

impl Io {
    /// The server's answer to the WebSocket upgrade, and what follows it.
    #[cold]
    pub(super) fn on_upgrade(
        &mut self,
        key: usize,
        data: &[u8],
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
        open: &Handshake,
    ) -> Next {
        let conn = &mut conns[key];
        let mut buf = std::mem::take(&mut conn.pending_in);
        buf.extend_from_slice(data);
        let ws = open.ws.as_ref().expect("upgrading: a WebSocket run");
        let (status, what) = match ws.response(&buf, conn.seq) {
            Ok(None) if buf.len() <= super::super::proto::INPUT_CAP => {
                conn.pending_in = buf;
                return Next::Open;
            }
            Ok(None) => (
                None,
                "an answer to the WebSocket upgrade over 1 MiB".to_string(),
            ),
            Ok(Some(wire::ws::Response::Upgraded { head_len, .. })) => {
                // (Upgraded, it is held: open.)
                open.upgraded(key, conns, mode, out);
                let rest = &buf[head_len..];
                if rest.is_empty() {
                    return Next::Open;
                }
                return self.on_frames(key, rest, conns, mode, out, open);
            }
            Ok(Some(wire::ws::Response::Refused { status, line, .. })) => (
                Some(status),
                format!(
                    "HTTP {status} to the WebSocket upgrade: \"{}\"",
                    wire::escape::escape(&buf[line])
                ),
            ),
            // (An answer that is not HTTP has no status; a 101 whose
            // headers are wrong has its own key.)
            Err(e @ wire::ws::WsError::Http(_)) => (None, format!("not a WebSocket upgrade: {e}")),
            Err(e) => (Some(101), format!("not a WebSocket upgrade: {e}")),
        };
        open.ws_refused(key, status, what, conns, mode);
        Next::Ended
    }

    /// A WebSocket frame that answers no query (`ev`, the frame `frame`):
    /// a ping is answered with a pong; a close is counted by its code,
    /// answered with a close, and ends the connection as the server's
    /// close.
    #[cold]
    pub(super) fn on_ws_event(
        &mut self,
        key: usize,
        ev: ws::Event,
        frame: &[u8],
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
    ) -> Next {
        use wire::ws::Opcode;
        match ev {
            ws::Event::Skip => Next::Open,
            ws::Event::Ping { payload_at } => {
                bump(&conns.counters.ws_pings, 1);
                let pong = out.message();
                let payload = &frame[usize::from(payload_at)..];
                let mask = Some(ws::mask(&mut self.rng));
                wire::ws::encode_frame(pong, true, Opcode::Pong, payload, mask);
                out.send_message(conns, key);
                Next::Open
            }
            ws::Event::Close(code) => {
                bump(&conns.counters.ws_close[ws_close_slot(code)], 1);
                if !self.closing {
                    // The answer (unless this close answers ours).
                    let close = out.message();
                    let mask = Some(ws::mask(&mut self.rng));
                    wire::ws::encode_close(close, code.or(Some(wire::ws::close::NORMAL)), mask);
                    out.send_message(conns, key);
                    conns.peer_closes(key, mode);
                }
                if out.flush_now(key, conns, mode).is_open() {
                    let why = if self.closing {
                        // The answer to the run's close.
                        ConnEnd::Closed
                    } else {
                        ConnEnd::Lost(Bucket::ClosedByPeer)
                    };
                    conns.end(key, why, mode.as_mut());
                }
                Next::Ended
            }
        }
    }

    /// Pushed messages over WebSocket: each message (its first frame) is
    /// one push message; pings and closes as with queries.
    pub(super) fn on_ws_push(
        &mut self,
        key: usize,
        data: &[u8],
        conns: &mut Conns,
        mode: &mut Workload,
        out: &mut Outbox,
    ) -> Next {
        use wire::ws::Opcode;
        let mut buf = std::mem::take(&mut conns[key].pending_in);
        buf.extend_from_slice(data);
        let mut used = 0;
        let now_ns = monotonic_ns();
        while used < buf.len() {
            let f = match wire::ws::decode_frame(&buf[used..], wire::ws::Role::Client) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(_) => {
                    bump(&conns.counters.push.malformed, 1);
                    conns.end(key, ConnEnd::Garbled, mode.as_mut());
                    return Next::Ended;
                }
            };
            let frame = &buf[used..used + f.end()];
            used += f.end();
            let alive = match f.opcode {
                // (A message's later fragments: its number was in its first.)
                Opcode::Continuation => true,
                Opcode::Text | Opcode::Binary => {
                    let p = mode.push_mut().expect("push");
                    p.ws_message(key, f.payload(frame), now_ns, &conns.counters)
                }
                _ => match ws::decode(frame, &mut Default::default()) {
                    super::super::proto::Frame::Ws { ev, .. } => {
                        if !self.on_ws_event(key, ev, frame, conns, mode, out).is_open() {
                            return Next::Ended;
                        }
                        true
                    }
                    // (A close without a valid status.)
                    _ => false,
                },
            };
            if !alive {
                conns.end(key, ConnEnd::Garbled, mode.as_mut());
                return Next::Ended;
            }
        }
        if used < buf.len() {
            // (Idle between messages, it keeps no buffer.)
            buf.drain(..used);
            conns[key].pending_in = buf;
        }
        Next::Open
    }
}
