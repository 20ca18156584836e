//! The client side of each protocol: build a query into the worker's output
//! buffer, find a complete response at the front of the received bytes and
//! say which query it answers. Built on crates/wire; no I/O, no allocation
//! per message (DNS questions are encoded once at start and copied into
//! each query; `{rand}` labels are filled in place), and no byte of a
//! response read twice as it arrives (a [`Resume`] says where decoding
//! stopped).

use rand_pcg::Pcg64Mcg;

use crate::scenario::Query;

mod dns;
mod echo;
mod http;
mod ping;
mod raw;

use dns::{dns_frame, DnsQueries};
use echo::Echo;
use http::Http;
use ping::Ping;
use raw::Raw;

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
        }
    }

    /// The most bytes of one incomplete response a connection keeps:
    /// [`INPUT_CAP`], or an echo message when --size is larger. (The bytes
    /// of a read are framed before the cap is checked, so a connection may
    /// hold up to one read more.)
    pub fn input_cap(&self) -> usize {
        match self {
            Codec::Echo(e) => e.input_cap(),
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
        if !matches!(
            frame,
            Frame::Incomplete | Frame::Partial { .. } | Frame::UntilClose { .. }
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
    use super::echo::pattern;
    use super::*;
    use crate::scenario::{ECHO_HEADER, RAND_LABEL_LEN};
    use memchr::memmem::Finder;
    use rand::SeedableRng;

    fn rng() -> Pcg64Mcg {
        Pcg64Mcg::seed_from_u64(1)
    }

    /// Decodes `buf` as the first read of its bytes.
    fn fresh(c: &Codec, buf: &[u8]) -> Frame {
        c.decode(buf, &mut Resume::default())
    }

    fn round_trip(c: &Codec, n: u64) -> Frame {
        let mut out = Vec::new();
        let key = c.encode(n, 0, 123, &mut rng(), &mut out);
        let f = fresh(c, &out);
        if let Frame::Response { key: Some(k), .. } = f {
            assert_eq!(k, key);
        }
        f
    }

    #[test]
    fn echo_round_trip_and_validation() {
        let c = Codec::Echo(Echo {
            size: 64,
            validate: true,
        });
        assert!(matches!(
            round_trip(&c, 7),
            Frame::Response {
                len: 64,
                status: Status::Ok,
                ..
            }
        ));
        let mut out = Vec::new();
        c.encode(7, 0, 0, &mut rng(), &mut out);
        out[40] ^= 1;
        assert!(matches!(
            fresh(&c, &out),
            Frame::Response {
                status: Status::Mismatch,
                ..
            }
        ));
        assert_eq!(fresh(&c, &out[..30]), Frame::Incomplete);
        assert_eq!(fresh(&c, b"HTTP/1.1"), Frame::Malformed);
    }

    #[test]
    fn echo_payload_is_the_pattern_at_every_size() {
        for size in [ECHO_HEADER, 21, 64, 275, 276, 277, 1000, 4096] {
            for n in [0, 1, 7, 255, 1 << 40] {
                let c = Codec::Echo(Echo {
                    size,
                    validate: true,
                });
                let mut out = vec![9];
                c.encode(n, 0, 0, &mut rng(), &mut out);
                assert_eq!(out.len(), 1 + size);
                let body = &out[1 + ECHO_HEADER..];
                let want: Vec<u8> = (ECHO_HEADER..size).map(|i| pattern(n, i)).collect();
                assert_eq!(body, &want[..], "size {size} n {n}");
                assert!(matches!(
                    fresh(&c, &out[1..]),
                    Frame::Response {
                        status: Status::Ok,
                        ..
                    }
                ));
            }
        }
    }

    fn dns(names: &[&str], qtypes: &[u16], edns: Option<u16>) -> Codec {
        Codec::new(
            &Query::Dns {
                qtype: 1,
                names: names.iter().map(|n| n.to_string()).collect(),
                qtypes: qtypes.to_vec(),
                edns,
                dnssec_ok: edns.is_some(),
            },
            &[],
            false,
        )
    }

    #[test]
    fn dns_queries_take_each_line_its_name_and_type() {
        use hickory_proto::op::Message;
        use hickory_proto::serialize::binary::BinDecodable;
        let c = dns(&["a.example", "b.example", "c.example"], &[1, 28, 1], None);
        assert_eq!(c.qtypes(), [1, 28]);
        let Codec::Dns(d) = &c else { panic!() };
        for n in 0..6u64 {
            let mut out = Vec::new();
            d.encode(n, &mut rng(), &mut out);
            let m = Message::from_bytes(&out).unwrap();
            let want = ["a.example.", "b.example.", "c.example."][n as usize % 3];
            assert_eq!(m.queries[0].name().to_ascii(), want);
            let t = u16::from(m.queries[0].query_type());
            assert_eq!(t, [1, 28, 1][n as usize % 3]);
            assert_eq!(c.qtypes()[usize::from(c.qtype_slot(n))], t);
            assert_eq!(m.id, n as u16);
            assert!(m.edns.is_none());
        }
    }

    #[test]
    fn dns_rand_labels_are_filled_in_place() {
        use hickory_proto::op::Message;
        use hickory_proto::serialize::binary::BinDecodable;
        let c = dns(&["x{rand}.{rand}.example"], &[], Some(4096));
        let mut r = rng();
        let mut seen = Vec::new();
        for n in 0..2 {
            let mut out = Vec::new();
            c.encode(n, 0, 0, &mut r, &mut out);
            let m = Message::from_bytes(&out[2..]).unwrap();
            let name = m.queries[0].name().to_ascii();
            let labels: Vec<&str> = name.split('.').collect();
            assert_eq!(labels.len(), 4, "{name}");
            assert_eq!(labels[0].len(), 1 + RAND_LABEL_LEN, "{name}");
            assert!(labels[0].starts_with('x'));
            assert_eq!(labels[1].len(), RAND_LABEL_LEN);
            assert!(!name.contains('{'));
            let e = m.edns.expect("OPT");
            assert_eq!(e.max_payload(), 4096);
            assert!(e.flags().dnssec_ok);
            seen.push(name);
        }
        assert_ne!(seen[0], seen[1], "fresh labels each query");
    }

    #[test]
    fn dns_names_with_several_rand_labels_stay_valid_and_random() {
        use hickory_proto::op::Message;
        use hickory_proto::serialize::binary::BinDecodable;
        let names = ["{rand}", "a{rand}b.{rand}.{rand}x.example", "plain.example"];
        let c = dns(&names, &[], None);
        let Codec::Dns(d) = &c else { panic!() };
        let template = d.bytes.clone();
        let mut r = rng();
        let mut seen = std::collections::HashSet::new();
        for n in 0..300u64 {
            let mut out = Vec::new();
            d.encode(n, &mut r, &mut out);
            let m = Message::from_bytes(&out).unwrap();
            let name = m.queries[0].name().to_ascii();
            let labels: Vec<&str> = name.trim_end_matches('.').split('.').collect();
            let rand = |l: &str| {
                l.len() == RAND_LABEL_LEN
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            };
            match n % 3 {
                0 => assert!(labels.len() == 1 && rand(labels[0]), "{name}"),
                1 => {
                    assert_eq!(labels.len(), 4, "{name}");
                    let l0 = labels[0];
                    assert!(l0.starts_with('a') && l0.ends_with('b'), "{name}");
                    assert!(rand(&l0[1..l0.len() - 1]), "{name}");
                    assert!(rand(labels[1]), "{name}");
                    assert!(labels[2].ends_with('x') && rand(&labels[2][..RAND_LABEL_LEN]));
                    assert_eq!(labels[3], "example");
                }
                _ => assert_eq!(name, "plain.example."),
            }
            if n % 3 != 2 {
                assert!(seen.insert(name), "a name came twice");
            }
        }
        // Filled in the query, not in the questions encoded at start.
        assert_eq!(d.bytes, template);
        assert!(template
            .windows(RAND_LABEL_LEN)
            .any(|w| w == [b'x'; RAND_LABEL_LEN]));
    }

    #[test]
    fn dns_query_echoed_back_is_echoed() {
        let c = dns(&["{rand}.example.com"], &[], None);
        assert!(matches!(
            round_trip(&c, 3),
            Frame::Response {
                key: Some(3),
                status: Status::Echoed,
                ..
            }
        ));
    }

    #[test]
    fn http_response_framing() {
        let c = Codec::new(
            &Query::Http {
                request: String::new(),
            },
            &["h:1".into()],
            false,
        );
        let mut out = Vec::new();
        c.encode(0, 0, 0, &mut rng(), &mut out);
        assert!(out.starts_with(b"GET / HTTP/1.1\r\nHost: h:1\r\n"));
        let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nAAHTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n";
        let Frame::Response { len, status, .. } = fresh(&c, resp) else {
            panic!()
        };
        assert_eq!(status, Status::Http(200));
        assert!(matches!(
            fresh(&c, &resp[len..]),
            Frame::Response {
                status: Status::Http(404),
                ..
            }
        ));
        // The body's bytes are dropped as they come; the head is kept.
        assert_eq!(
            fresh(&c, &resp[..len - 1]),
            Frame::Partial {
                keep: len - 2,
                skip: 1
            }
        );
        assert_eq!(fresh(&c, &resp[..len - 2]), Frame::Incomplete);
    }

    /// Frames `stream` as it arrives `step` bytes a read, as the worker
    /// does: the bytes not framed yet kept with their [`Resume`] between
    /// reads, those it says are read dropped, a response's bytes dropped
    /// from the front once framed. Returns each response's length and
    /// status, the bytes of the unfinished one, and the most bytes kept
    /// between reads.
    fn frames_kept(c: &Codec, stream: &[u8], step: usize) -> (Vec<(usize, Status)>, usize, usize) {
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
                    Frame::Partial { keep, skip } | Frame::UntilClose { keep, skip } => {
                        pending.drain(keep..keep + skip);
                        gone += skip;
                        break;
                    }
                    f @ (Frame::Malformed | Frame::Oversized) => panic!("{f:?} after {frames:?}"),
                }
            }
            most = most.max(pending.len());
        }
        (frames, gone + pending.len(), most)
    }

    fn frames_in_reads(c: &Codec, stream: &[u8], step: usize) -> (Vec<(usize, Status)>, usize) {
        let (frames, left, _) = frames_kept(c, stream, step);
        (frames, left)
    }

    /// Every read size frames `stream` as one read of all of it does.
    fn same_frames_at_every_read_size(c: &Codec, stream: &[u8], want: usize) {
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

    fn http() -> Codec {
        Codec::new(
            &Query::Http {
                request: String::new(),
            },
            &["h:1".into()],
            false,
        )
    }

    #[test]
    fn http_chunked_replies_resume_across_reads() {
        let mut stream = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc".to_vec();
        stream.extend_from_slice(
            b"HTTP/1.1 404 No\r\nTransfer-Encoding: chunked\r\n\r\n4;e=1\r\nWiki\r\n0\r\nT: y\r\n\r\n",
        );
        stream.extend_from_slice(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        for _ in 0..3 {
            stream.extend_from_slice(b"12c\r\n");
            stream.resize(stream.len() + 300, b'z');
            stream.extend_from_slice(b"\r\n");
        }
        stream.extend_from_slice(b"0\r\n\r\nHTTP/1.1 2");
        same_frames_at_every_read_size(&http(), &stream, 3);
        let (frames, left) = frames_in_reads(&http(), &stream, 1);
        assert_eq!(frames[1].1, Status::Http(404));
        assert_eq!(frames[2].0, 47 + 3 * 307 + 5);
        assert_eq!(left, 10);
    }

    #[test]
    fn http_chunked_body_is_dropped_as_it_is_read() {
        let c = http();
        let mut buf = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        let head = buf.len();
        let mut resume = Resume::default();
        assert_eq!(c.decode(&buf, &mut resume), Frame::Incomplete);
        buf.extend_from_slice(b"3e8\r\n");
        // The size line is read: dropped; the scan waits for the data.
        assert_eq!(
            c.decode(&buf, &mut resume),
            Frame::Partial {
                keep: head,
                skip: 5
            }
        );
        buf.truncate(head);
        buf.resize(head + 999, b'd');
        assert_eq!(
            c.decode(&buf, &mut resume),
            Frame::Partial {
                keep: head,
                skip: 999
            }
        );
        buf.truncate(head);
        buf.extend_from_slice(b"d\r\n0\r\n\r\n");
        assert!(matches!(
            c.decode(&buf, &mut resume),
            Frame::Response { len, status: Status::Http(200), .. } if len == buf.len()
        ));
        assert_eq!(resume, Resume::default());
    }

    #[test]
    fn an_http_body_of_any_length_keeps_its_head_and_a_read() {
        let mut stream = b"HTTP/1.1 200 OK\r\nContent-Length: 3000000\r\n\r\n".to_vec();
        let first = stream.len() + 3_000_000;
        stream.resize(first, b'x');
        stream.extend_from_slice(b"HTTP/1.1 201 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        for _ in 0..300 {
            stream.extend_from_slice(b"2710\r\n");
            stream.resize(stream.len() + 10_000, b'y');
            stream.extend_from_slice(b"\r\n");
        }
        stream.extend_from_slice(b"0\r\n\r\n");
        for step in [1000, 64 * 1024] {
            let (frames, left, most) = frames_kept(&http(), &stream, step);
            assert_eq!(frames.len(), 2);
            assert_eq!(frames[0], (first, Status::Http(200)));
            assert_eq!(frames[1].1, Status::Http(201));
            assert_eq!(frames[0].0 + frames[1].0, stream.len());
            assert_eq!(left, 0);
            assert!(most < 100 + step, "reads of {step}: kept {most}");
        }
    }

    /// Issue 26: an HTTP/1.0 reply with no length was malformed.
    #[test]
    fn http_body_without_a_length_ends_at_the_close() {
        let c = http();
        let stream = b"HTTP/1.0 200 OK\r\nServer: x\r\n\r\nhello, world";
        let head = stream.len() - 12;
        for step in 1..=stream.len() {
            let mut kept = Vec::new();
            let mut resume = Resume::default();
            for read in stream.chunks(step) {
                kept.extend_from_slice(read);
                match c.decode(&kept, &mut resume) {
                    Frame::Incomplete => assert!(kept.len() < head, "step {step}"),
                    Frame::UntilClose { keep, skip } => {
                        assert_eq!(keep, head, "step {step}");
                        kept.drain(keep..keep + skip);
                    }
                    f => panic!("step {step}: {f:?}"),
                }
            }
            assert_eq!(resume, Resume::default());
            assert_eq!(kept, &stream[..head], "only the head is kept");
            assert_eq!(
                c.decode_at_close(&kept),
                Frame::Response {
                    len: head,
                    key: None,
                    status: Status::Http(200),
                    close: true,
                }
            );
        }
        // A 503 without a length is an answer too (judged by its status).
        assert!(matches!(
            c.decode_at_close(b"HTTP/1.1 503 Busy\r\n\r\n"),
            Frame::Response {
                status: Status::Http(503),
                close: true,
                ..
            }
        ));
    }

    #[test]
    fn a_close_inside_a_framed_response_frames_nothing() {
        let c = http();
        // A body with a length the close cut short, a head not whole, a
        // chunked body not ended: no response.
        for cut in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n"[..],
            b"HTTP/1.0 200 OK\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            assert_eq!(c.decode_at_close(cut), Frame::Incomplete);
        }
        assert_eq!(
            Codec::Ping(Ping).decode_at_close(b"pong"),
            Frame::Incomplete
        );
        // `Connection: close` with a length is whole before the close.
        assert!(matches!(
            fresh(
                &c,
                b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
            ),
            Frame::Response {
                len: 59,
                close: true,
                status: Status::Http(200),
                ..
            }
        ));
    }

    #[test]
    fn http_head_past_64_kib_is_oversized() {
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        while head.len() <= 64 * 1024 {
            head.extend_from_slice(b"X-Filler: aaaaaaaa\r\n");
        }
        assert_eq!(fresh(&http(), &head), Frame::Oversized);
        assert_eq!(fresh(&http(), b"SSH-2.0-x\r\n\r\n"), Frame::Malformed);
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
        assert_eq!(http().input_cap(), INPUT_CAP);
    }

    fn raw(marker: &[u8]) -> Codec {
        Codec::Raw(Raw {
            message: b"hi".to_vec(),
            first: None,
            marker: Some(Box::new(Finder::new(marker).into_owned())),
        })
    }

    #[test]
    fn raw_marker_found_across_reads_at_every_split() {
        // Near misses across read boundaries: "\r\n.x", "\r\n\r\n.".
        let stream = b"one\r\n.x\r\n\r\n.\r\ntwo\r\n.\r\n\r\n.\r\n\r\n.\r\nrest\r\n.";
        same_frames_at_every_read_size(&raw(b"\r\n.\r\n"), stream, 4);
        let (frames, left) = frames_in_reads(&raw(b"\r\n.\r\n"), stream, 1);
        let lens: Vec<usize> = frames.iter().map(|f| f.0).collect();
        assert_eq!(lens, [14, 8, 5, 5]);
        assert_eq!(left, 7);
    }

    #[test]
    fn raw_marker_search_keeps_only_where_a_marker_may_start() {
        // A long reply arriving a byte at a time, full of near misses:
        // keeping it and starting over at each read would search ~5 * 10^9
        // bytes.
        let c = raw(b"END!");
        let mut buf = Vec::new();
        let mut resume = Resume::default();
        let mut searched = 0;
        for i in 0..100_000 {
            buf.push(b"END"[i % 3]);
            searched += buf.len();
            match c.decode(&buf, &mut resume) {
                Frame::Incomplete => {}
                Frame::Partial { keep: 0, skip } => drop(buf.drain(..skip)),
                f => panic!("{f:?}"),
            }
            assert!(buf.len() <= 3);
        }
        // Each read searches its byte and the three before it.
        assert!(searched <= 4 * 100_000, "searched {searched}");
        buf.extend_from_slice(b"ND!");
        assert!(matches!(
            c.decode(&buf, &mut resume),
            Frame::Response { len, .. } if len == buf.len()
        ));
    }

    #[test]
    fn ping_lines_across_reads() {
        let stream = b"pong 1\npong 22\r\nerror\npong 3\npong";
        same_frames_at_every_read_size(&Codec::Ping(Ping), stream, 4);
        // A line that never ends is searched once, then refused.
        let mut buf = Vec::new();
        let mut resume = Resume::default();
        let mut searched = 0;
        let f = loop {
            buf.push(b'p');
            searched += buf.len() - resume.search_from(&buf);
            match Codec::Ping(Ping).decode(&buf, &mut resume) {
                Frame::Incomplete => {}
                f => break f,
            }
        };
        assert_eq!(
            (f, buf.len(), searched),
            (Frame::Oversized, 64 * 1024 + 1, buf.len())
        );
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
