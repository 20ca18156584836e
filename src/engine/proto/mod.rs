//! The client side of each protocol: build a query into the worker's output
//! buffer, find a complete response at the front of the received bytes and
//! say which query it answers. Built on crates/wire; no I/O, no allocation
//! per message (DNS questions are encoded once at start and copied into
//! each query; `{rand}` labels are filled in place), and no byte of a
//! response read twice as it arrives (a [`Resume`] says where decoding
//! stopped).
//!
//! A protocol is one file here (dns.rs, echo.rs, ping.rs, http.rs,
//! raw.rs, redis.rs, ws.rs): its names (its --proto value, its word in sentences), what a
//! report's table says of its queries, its encoding, its matching, its
//! datagram size over UDP and its tests, with its codec in crates/wire;
//! [`Codec`] is the one enum that dispatches to them, chosen at start with
//! the transport (DNS over UDP has its own variant), and [`name`],
//! [`word`], [`words`] and [`datagram_slot`] the one place the others are
//! matched. Its flag value is `cli::ProtoArg`; the scenario's `Query`
//! carries its settings (`Query::proto` maps it).

use rand_pcg::Pcg64Mcg;

use crate::domain::Proto;
use crate::scenario::Query;

mod dns;
mod echo;
mod http;
mod ping;
mod raw;
mod redis;
pub(super) mod ws;

use dns::{dns_frame, DnsQueries};
use echo::Echo;
use http::Http;
use ping::Ping;
use raw::Raw;
use redis::Redis;
pub use redis::{DEFAULT_COMMAND as REDIS_DEFAULT_COMMAND, MOST_KEYS as REDIS_MOST_KEYS};
use ws::Ws;

/// A protocol's --proto value, and its name in the per-query log.
pub fn name(p: Proto) -> &'static str {
    match p {
        Proto::Dns => dns::NAME,
        Proto::Echo => echo::NAME,
        Proto::Ping => ping::NAME,
        Proto::Http => http::NAME,
        Proto::Raw => raw::NAME,
        Proto::Redis => redis::NAME,
        Proto::Push => super::push::NAME,
        Proto::Websocket => ws::NAME,
    }
}

/// A protocol in a word, for sentences ("a DNS reply", "DNS queries").
pub fn word(p: Proto) -> &'static str {
    match p {
        Proto::Dns => dns::WORD,
        Proto::Http => http::WORD,
        Proto::Websocket => ws::WORD,
        Proto::Redis => redis::WORD,
        p => name(p),
    }
}

/// What the queries are, in a few words ("DNS, example.com", "echo, 64
/// bytes"), for a report's table.
pub fn describe(q: &Query) -> String {
    match q {
        Query::Dns { names, qtypes, .. } => dns::describe(names, qtypes),
        Query::Echo { size, .. } => echo::describe(*size),
        Query::Ping => ping::DESCRIPTION.into(),
        Query::Http { .. } => http::DESCRIPTION.into(),
        Query::Raw { .. } => raw::DESCRIPTION.into(),
        Query::Redis { commands, .. } => redis::describe(commands),
        Query::WebSocket { message, binary } => ws::describe(message, *binary),
    }
}

/// Bytes per datagram slot in a receive batch over UDP, for the answers
/// to `q` (a pushed datagram, with no query, may be as large as UDP allows).
pub fn datagram_slot(q: Option<&Query>, push: bool) -> usize {
    match q {
        Some(Query::Echo { size, .. }) => echo::datagram_slot(*size),
        Some(Query::Raw { message, .. }) => raw::datagram_slot(message),
        // A pushed datagram may be as large as UDP allows (the server's
        // --size): a slot of that, and a scratch of eight.
        None if push => 64 * 1024,
        _ => DATAGRAM_SLOT,
    }
}

/// Bytes per datagram slot unless a protocol's answers are larger.
pub const DATAGRAM_SLOT: usize = 2048;

/// How a response went, for the status counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// DNS response code; `truncated`: the TC bit was set (the answer did
    /// not fit and was cut).
    Rcode {
        rcode: u8,
        truncated: bool,
    },
    /// A DNS query came back as it was sent (QR bit clear: an echo server).
    Echoed,
    /// HTTP status code.
    Http(u16),
    /// The reply is not the one expected (--validate, `error` for a ping).
    Mismatch,
    /// A Redis reply's type (an error's first word).
    Redis(wire::resp::Kind),
}

/// One step of framing the received bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// Not a whole response yet.
    Incomplete,
    /// Not a whole response yet, and of the bytes given, the `skip` after
    /// the first `keep` are read and needed no more (an HTTP body's bytes,
    /// a reply searched for its marker): the caller drops them and keeps
    /// the rest, and the [`Resume`] counts from there. A body of any
    /// length costs the client its head and one read.
    Partial { keep: usize, skip: usize },
    /// A response whose body ends when the connection does (HTTP with
    /// neither Content-Length nor chunked coding, RFC 9112 6.3): as
    /// [`Frame::Partial`], the body's `skip` bytes after the head's `keep`
    /// are dropped; the server closes after it, and its close frames it
    /// ([`Codec::decode_at_close`]).
    UntilClose { keep: usize, skip: usize },
    /// A response of `len` bytes answering the query with `key`, or the
    /// oldest outstanding one when `key` is None (in-order protocols).
    Response {
        len: usize,
        key: Option<u64>,
        status: Status,
        /// The server closes the connection after this one (HTTP
        /// `Connection: close`).
        close: bool,
    },
    /// WebSocket: a frame of `len` bytes that answers no query (a
    /// fragment, a ping, a pong, a close): the engine acts on it.
    Ws { len: usize, ev: ws::Event },
    /// Bytes that break the protocol, named by their error cause (`E_*`):
    /// the connection is of no further use.
    Broken(usize),
    /// The bytes cannot be framed: the connection is of no further use.
    Malformed,
    /// A response longer than the protocol allows (an HTTP head or a
    /// ping line past 64 KiB): the connection is of no further use.
    Oversized,
}

/// The most a connection keeps of a response still incomplete, unless its
/// protocol's frames are longer (see [`Codec::input_cap`]): a peer that
/// never ends its frame costs this much memory per connection, not more.
/// What is kept never reaches it in a well-formed stream: a DNS frame over
/// TCP is at most 65,537 bytes, an HTTP head or a ping line 64 KiB, and an
/// HTTP body's bytes and a --marker reply's are dropped as they are read
/// ([`Frame::Partial`]); what can reach it is an endless chunk-size line.
pub const INPUT_CAP: usize = 1024 * 1024;

/// Where [`Codec::decode`] stopped in the response at the front of the
/// bytes it was given, when it said [`Frame::Incomplete`]. The caller keeps
/// it beside those bytes and hands it back with them (and what arrived
/// since), so that a response in many reads costs its length, not its
/// length times the reads. `decode` resets it when it frames a response or
/// finds the bytes malformed; the caller resets it only when it drops
/// pending bytes undecoded. 5 bytes, aligned to 1: every connection holds
/// one, and it packs beside one-byte fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resume(Place);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Place {
    /// Nothing read yet.
    #[default]
    Start,
    /// Ping: no match starts before this offset (a u32 kept as bytes:
    /// aligned to 1, it shares the chunked scan's 5 bytes).
    Searched([u8; 4]),
    /// HTTP: the head is whole (it is parsed again: at most 64 KiB, most
    /// often a few hundred bytes); the chunked body's scan, counting from
    /// the bytes kept after the head.
    Chunked(wire::http::ChunkedScan),
    /// HTTP with a Content-Length: this many of the body's bytes were read
    /// and dropped.
    Body([u8; 4]),
    /// WebSocket: a fragmented message is under way (its last fragment
    /// is due before any new message).
    WsMessage,
}

const _: () = assert!(std::mem::size_of::<Resume>() == 5 && std::mem::align_of::<Resume>() == 1);

impl Resume {
    /// No match starts before `at`: search on from there next time (from
    /// the start when `at` does not fit: correct, only slower).
    pub(super) fn searched(&mut self, at: usize) {
        *self = match u32::try_from(at) {
            Ok(at) => Resume(Place::Searched(at.to_ne_bytes())),
            Err(_) => Resume::default(),
        };
    }

    /// Where to search on in `buf` (0 unless a search stopped there).
    fn search_from(self, buf: &[u8]) -> usize {
        match self.0 {
            Place::Searched(at) => (u32::from_ne_bytes(at) as usize).min(buf.len()),
            _ => 0,
        }
    }

    /// HTTP: the body's bytes dropped so far.
    fn body_gone(self) -> u64 {
        match self.0 {
            Place::Body(n) => u64::from(u32::from_ne_bytes(n)),
            _ => 0,
        }
    }

    /// WebSocket: a fragmented message is under way.
    pub(super) fn in_ws_message(self) -> bool {
        self.0 == Place::WsMessage
    }

    /// WebSocket: a fragmented message starts (true) or ends (false).
    pub(super) fn set_ws_message(&mut self, open: bool) {
        *self = if open {
            Resume(Place::WsMessage)
        } else {
            Resume::default()
        };
    }

    fn chunked(self) -> wire::http::ChunkedScan {
        match self.0 {
            Place::Chunked(scan) => scan,
            _ => wire::http::ChunkedScan::default(),
        }
    }
}

/// A protocol, ready to encode and decode: each is one file here (with
/// its codec in crates/wire), matched in this one place.
pub enum Codec {
    /// DNS over a stream: each message behind its 2-byte length.
    Dns(DnsQueries),
    /// DNS over UDP: a message is a datagram.
    DnsDatagram(DnsQueries),
    Echo(Echo),
    Ping(Ping),
    Http(Http),
    Raw(Raw),
    Redis(Redis),
    Ws(Ws),
}

impl Codec {
    /// `hosts` are the targets as given (for HTTP Host headers);
    /// `datagrams`: the transport is UDP (decided once: a message of a
    /// protocol framed apart over streams is then its datagram).
    pub fn new(q: &Query, hosts: &[String], datagrams: bool) -> Codec {
        match q {
            Query::Dns {
                qtype,
                names,
                qtypes,
                edns,
                dnssec_ok,
            } => {
                let d = DnsQueries::new(
                    *qtype,
                    names,
                    qtypes,
                    edns.map(|udp_size| wire::dns::Edns {
                        udp_size,
                        dnssec_ok: *dnssec_ok,
                    }),
                );
                if datagrams {
                    Codec::DnsDatagram(d)
                } else {
                    Codec::Dns(d)
                }
            }
            Query::Echo { size, validate } => Codec::Echo(Echo {
                size: *size,
                validate: *validate,
            }),
            Query::Ping => Codec::Ping(Ping),
            Query::Http { request } => Codec::Http(Http::new(request, hosts)),
            Query::Raw {
                message,
                first_message,
                marker,
            } => Codec::Raw(Raw::new(
                message,
                first_message.as_deref(),
                marker.as_deref(),
            )),
            Query::WebSocket { message, binary } => Codec::Ws(Ws::new(message, *binary)),
            Query::Redis { commands, keys } => Codec::Redis(Redis::new(commands, *keys)),
        }
    }

    /// The most bytes of one incomplete response a connection keeps:
    /// [`INPUT_CAP`], or an echo message when --size is larger. (The bytes
    /// of a read are framed before the cap is checked, so a connection may
    /// hold up to one read more.)
    pub fn input_cap(&self) -> usize {
        match self {
            Codec::Echo(e) => e.input_cap(),
            Codec::Ws(_) => ws::INPUT_CAP,
            _ => INPUT_CAP,
        }
    }

    /// Bytes sent once when a connection opens, before any query.
    pub fn first_message(&self) -> Option<&[u8]> {
        match self {
            Codec::Raw(r) => r.first_message(),
            _ => None,
        }
    }

    /// Appends query number `n` of a connection (to target `target`) and
    /// returns the key its response will carry.
    pub fn encode(
        &self,
        n: u64,
        target: usize,
        t_ns: u64,
        rng: &mut Pcg64Mcg,
        out: &mut Vec<u8>,
    ) -> u64 {
        match self {
            Codec::Dns(d) => d.encode_frame(n, rng, out),
            Codec::DnsDatagram(d) => d.encode(n, rng, out),
            Codec::Echo(e) => e.encode(n, t_ns, out),
            Codec::Ping(p) => p.encode(n, out),
            Codec::Http(h) => h.encode(n, target, out),
            Codec::Raw(r) => r.encode(n, out),
            Codec::Redis(r) => r.encode(n, rng, out),
            Codec::Ws(w) => w.encode(n, rng, out),
        }
    }

    /// The slot of query `n`'s type in [`DnsQueries::qtypes`] (0 for
    /// other protocols): where its RCODE is counted.
    pub fn qtype_slot(&self, n: u64) -> u8 {
        match self {
            Codec::Dns(d) | Codec::DnsDatagram(d) => d.question(n).slot,
            _ => 0,
        }
    }

    /// The distinct DNS query types, in slot order (empty for other
    /// protocols).
    pub fn qtypes(&self) -> &[u16] {
        match self {
            Codec::Dns(d) | Codec::DnsDatagram(d) => &d.qtypes,
            _ => &[],
        }
    }

    /// A whole datagram as one response (anything else is malformed).
    pub fn decode_datagram(&self, d: &[u8]) -> Frame {
        match self {
            Codec::Dns(_) | Codec::DnsDatagram(_) => dns_frame(d, d.len()),
            _ => match self.decode(d, &mut Resume::default()) {
                f @ Frame::Response { len, .. } if len == d.len() => f,
                _ => Frame::Malformed,
            },
        }
    }

    /// Frames the response at the front of `buf`, going on from `resume`
    /// (kept from the last call on the same front bytes, or the default).
    pub fn decode(&self, buf: &[u8], resume: &mut Resume) -> Frame {
        let frame = self.decode_on(buf, resume);
        // (A WebSocket frame that answers no query may be a fragment of
        // a message under way: its place is kept.)
        if !matches!(
            frame,
            Frame::Incomplete | Frame::Partial { .. } | Frame::UntilClose { .. } | Frame::Ws { .. }
        ) {
            *resume = Resume::default();
        }
        frame
    }

    /// The connection closed with `buf` not framed yet (the bytes kept:
    /// an HTTP body's were dropped as they came): the response the close
    /// ends, when the one at the front ends so ([`Frame::UntilClose`]);
    /// otherwise [`Frame::Incomplete`] (the close cut a response short).
    pub fn decode_at_close(&self, buf: &[u8]) -> Frame {
        match self {
            Codec::Http(h) => h.decode_at_close(buf),
            _ => Frame::Incomplete,
        }
    }

    #[inline]
    fn decode_on(&self, buf: &[u8], resume: &mut Resume) -> Frame {
        match self {
            Codec::Dns(d) => d.decode(buf),
            // (Datagrams are framed whole by `decode_datagram`.)
            Codec::DnsDatagram(_) if buf.is_empty() => Frame::Incomplete,
            Codec::DnsDatagram(_) => dns_frame(buf, buf.len()),
            Codec::Echo(e) => e.decode(buf),
            Codec::Ping(p) => p.decode(buf, resume),
            Codec::Http(h) => h.decode(buf, resume),
            Codec::Raw(r) => r.decode(buf),
            Codec::Redis(r) => r.decode(buf),
            Codec::Ws(_) => ws::decode(buf, resume),
        }
    }
}

/// Not whole yet: drop the `skip` bytes after the first `keep`, if any.
fn partial(keep: usize, skip: usize) -> Frame {
    if skip == 0 {
        Frame::Incomplete
    } else {
        Frame::Partial { keep, skip }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memchr::memmem::Finder;
    use rand::SeedableRng;

    pub(super) fn rng() -> Pcg64Mcg {
        Pcg64Mcg::seed_from_u64(1)
    }

    /// Decodes `buf` as the first read of its bytes.
    pub(super) fn fresh(c: &Codec, buf: &[u8]) -> Frame {
        c.decode(buf, &mut Resume::default())
    }

    pub(super) fn round_trip(c: &Codec, n: u64) -> Frame {
        let mut out = Vec::new();
        let key = c.encode(n, 0, 123, &mut rng(), &mut out);
        let f = fresh(c, &out);
        if let Frame::Response { key: Some(k), .. } = f {
            assert_eq!(k, key);
        }
        f
    }

    pub(super) fn frames_kept(
        c: &Codec,
        stream: &[u8],
        step: usize,
    ) -> (Vec<(usize, Status)>, usize, usize) {
        let mut pending = Vec::new();
        let mut resume = Resume::default();
        let mut frames = Vec::new();
        // Bytes of the unfinished response dropped.
        let mut gone = 0;
        let mut most = 0;
        for read in stream.chunks(step) {
            pending.extend_from_slice(read);
            while !pending.is_empty() {
                match c.decode(&pending, &mut resume) {
                    Frame::Response { len, status, .. } => {
                        assert_eq!(resume, Resume::default(), "reset for the next");
                        frames.push((gone + len, status));
                        gone = 0;
                        pending.drain(..len);
                    }
                    Frame::Incomplete => break,
                    Frame::Ws { len, .. } => {
                        pending.drain(..len);
                    }
                    Frame::Partial { keep, skip } | Frame::UntilClose { keep, skip } => {
                        pending.drain(keep..keep + skip);
                        gone += skip;
                        break;
                    }
                    f @ (Frame::Malformed | Frame::Oversized | Frame::Broken(_)) => {
                        panic!("{f:?} after {frames:?}")
                    }
                }
            }
            most = most.max(pending.len());
        }
        (frames, gone + pending.len(), most)
    }

    pub(super) fn frames_in_reads(
        c: &Codec,
        stream: &[u8],
        step: usize,
    ) -> (Vec<(usize, Status)>, usize) {
        let (frames, left, _) = frames_kept(c, stream, step);
        (frames, left)
    }

    /// Every read size frames `stream` as one read of all of it does.
    pub(super) fn same_frames_at_every_read_size(c: &Codec, stream: &[u8], want: usize) {
        let (whole, left) = frames_in_reads(c, stream, stream.len());
        assert_eq!(whole.len(), want, "{whole:?}");
        for step in 1..stream.len() {
            assert_eq!(
                frames_in_reads(c, stream, step),
                (whole.clone(), left),
                "step {step}"
            );
        }
    }

    #[test]
    fn input_cap_holds_the_longest_echo() {
        let echo = |size| {
            Codec::Echo(Echo {
                size,
                validate: false,
            })
        };
        assert_eq!(echo(64).input_cap(), INPUT_CAP);
        assert_eq!(echo(4 * INPUT_CAP).input_cap(), 4 * INPUT_CAP);
        let http = Codec::new(
            &Query::Http {
                request: String::new(),
            },
            &["h:1".into()],
            false,
        );
        assert_eq!(http.input_cap(), INPUT_CAP);
    }

    #[test]
    fn raw_marker_and_ping() {
        let c = Codec::Raw(Raw {
            message: b"hi".to_vec(),
            first: None,
            marker: Some(Box::new(Finder::new(b"\r\n").into_owned())),
        });
        assert_eq!(
            fresh(&c, b"ok\r\nmore"),
            Frame::Response {
                len: 4,
                key: None,
                status: Status::Ok,
                close: false,
            }
        );
        // "ok" is read; a marker may start at "\r".
        assert_eq!(fresh(&c, b"ok\r"), Frame::Partial { keep: 0, skip: 2 });
        assert_eq!(fresh(&c, b"\r"), Frame::Incomplete);
        assert_eq!(
            fresh(&Codec::Ping(Ping), b"pong 5\n"),
            Frame::Response {
                len: 7,
                key: Some(5),
                status: Status::Ok,
                close: false,
            }
        );
        assert!(matches!(
            fresh(&Codec::Ping(Ping), b"error\n"),
            Frame::Response {
                status: Status::Mismatch,
                ..
            }
        ));
    }
}
