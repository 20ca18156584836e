//! The client side of each protocol: build a query into the worker's output
//! buffer, find a complete response at the front of the received bytes and
//! say which query it answers. Built on crates/wire; no I/O, no allocation
//! per message (DNS names with {rand} are filled in place).

use rand::Rng;
use rand_pcg::Pcg64Mcg;

use crate::scenario::{unescaped, Query};

/// Bytes of the echo header: magic, sequence number, send timestamp.
pub const ECHO_HEADER: usize = 20;
const ECHO_MAGIC: [u8; 4] = *b"THRG";

/// How a response went, for the status counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// DNS response code.
    Rcode(u8),
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
}

/// A protocol, ready to encode and decode.
pub enum Codec {
    Dns {
        qtype: u16,
        names: Vec<String>,
    },
    Echo {
        size: usize,
        validate: bool,
    },
    Ping,
    Http {
        /// One request per target (its Host header differs).
        requests: Vec<Vec<u8>>,
        head: bool,
    },
    Raw {
        message: Vec<u8>,
        first: Option<Vec<u8>>,
        marker: Option<Vec<u8>>,
    },
}

/// A DNS message of a `len`-byte frame: matched by its ID; a query that
/// came back (QR clear) is "echoed".
fn dns_frame(message: &[u8], len: usize) -> Frame {
    match wire::dns::response_info(message) {
        Ok(info) => Frame::Response {
            len,
            key: Some(u64::from(info.id)),
            status: if info.is_response {
                Status::Rcode(info.rcode)
            } else {
                Status::Echoed
            },
            close: false,
        },
        Err(_) => Frame::Malformed,
    }
}

impl Codec {
    /// `hosts` are the targets as given (for HTTP Host headers).
    pub fn new(q: &Query, hosts: &[String]) -> Codec {
        match q {
            Query::Dns { qtype, names } => Codec::Dns {
                qtype: *qtype,
                names: names.clone(),
            },
            Query::Echo { size, validate } => Codec::Echo {
                size: *size,
                validate: *validate,
            },
            Query::Ping => Codec::Ping,
            Query::Http { request } => {
                let requests: Vec<Vec<u8>> = hosts
                    .iter()
                    .map(|h| {
                        if request.is_empty() {
                            format!("GET / HTTP/1.1\r\nHost: {h}\r\nUser-Agent: throng\r\n\r\n")
                                .into_bytes()
                        } else {
                            unescaped(request)
                        }
                    })
                    .collect();
                let head = requests[0].starts_with(b"HEAD ");
                Codec::Http { requests, head }
            }
            Query::Raw {
                message,
                first_message,
                marker,
            } => Codec::Raw {
                message: unescaped(message),
                first: first_message.as_deref().map(unescaped),
                marker: marker.as_deref().map(unescaped),
            },
        }
    }

    /// Bytes sent once when a connection opens, before any query.
    pub fn first_message(&self) -> Option<&[u8]> {
        match self {
            Codec::Raw { first, .. } => first.as_deref(),
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
            Codec::Dns { qtype, names } => {
                let id = n as u16;
                let name = &names[(n % names.len() as u64) as usize];
                if name.contains("{rand}") {
                    let mut label = [0u8; 10];
                    for b in &mut label {
                        *b = b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.random_range(0..36)];
                    }
                    let label = std::str::from_utf8(&label).unwrap_or("throng");
                    let filled = name.replace("{rand}", label);
                    let _ = wire::dns::build_tcp_query(id, &filled, *qtype, out);
                } else {
                    let _ = wire::dns::build_tcp_query(id, name, *qtype, out);
                }
                u64::from(id)
            }
            Codec::Echo { size, .. } => {
                out.extend_from_slice(&ECHO_MAGIC);
                out.extend_from_slice(&n.to_be_bytes());
                out.extend_from_slice(&t_ns.to_be_bytes());
                // The pattern counts up by one from a start that depends on
                // the sequence: copied from a table, not made byte by byte.
                let mut i = ECHO_HEADER;
                while i < *size {
                    let start = usize::from(pattern(n, i));
                    let take = (*size - i).min(256);
                    out.extend_from_slice(&RAMP[start..start + take]);
                    i += take;
                }
                n
            }
            Codec::Ping => {
                wire::line::build_ping(n, out);
                n
            }
            Codec::Http { requests, .. } => {
                out.extend_from_slice(&requests[target % requests.len()]);
                n
            }
            Codec::Raw { message, .. } => {
                out.extend_from_slice(message);
                n
            }
        }
    }

    /// Like [`Codec::encode`], for a datagram: DNS without the TCP length.
    pub fn encode_datagram(
        &self,
        n: u64,
        target: usize,
        t_ns: u64,
        rng: &mut Pcg64Mcg,
        out: &mut Vec<u8>,
    ) -> u64 {
        let at = out.len();
        let key = self.encode(n, target, t_ns, rng, out);
        if let Codec::Dns { .. } = self {
            // Drop the 2-byte length the stream form starts with.
            out.drain(at..at + 2);
        }
        key
    }

    /// A whole datagram as one response (anything else is malformed).
    pub fn decode_datagram(&self, d: &[u8]) -> Frame {
        match self {
            Codec::Dns { .. } => dns_frame(d, d.len()),
            _ => match self.decode(d) {
                f @ Frame::Response { len, .. } if len == d.len() => f,
                _ => Frame::Malformed,
            },
        }
    }

    /// Frames the response at the front of `buf`.
    pub fn decode(&self, buf: &[u8]) -> Frame {
        match self {
            Codec::Dns { .. } => {
                let Some(f) = wire::dns::tcp_frame(buf) else {
                    return Frame::Incomplete;
                };
                dns_frame(f.message(buf), f.frame_len)
            }
            Codec::Echo { size, validate } => {
                if buf.len() < *size {
                    // Check the magic early: a stream that is not ours
                    // should not wait for a whole message to be rejected.
                    let n = buf.len().min(4);
                    if buf[..n] != ECHO_MAGIC[..n] {
                        return Frame::Malformed;
                    }
                    return Frame::Incomplete;
                }
                if buf[..4] != ECHO_MAGIC {
                    return Frame::Malformed;
                }
                let seq = u64::from_be_bytes(buf[4..12].try_into().expect("8 bytes"));
                let intact = !validate
                    || buf[ECHO_HEADER..*size]
                        .iter()
                        .enumerate()
                        .all(|(i, &b)| b == pattern(seq, i + ECHO_HEADER));
                Frame::Response {
                    len: *size,
                    key: Some(seq),
                    status: if intact { Status::Ok } else { Status::Mismatch },
                    close: false,
                }
            }
            Codec::Ping => {
                let Some(len) = wire::line::find_line(buf) else {
                    return if buf.len() > 64 * 1024 {
                        Frame::Malformed
                    } else {
                        Frame::Incomplete
                    };
                };
                match wire::line::parse_pong(&buf[..len]) {
                    Some(seq) => Frame::Response {
                        len,
                        key: Some(seq),
                        status: Status::Ok,
                        close: false,
                    },
                    None => Frame::Response {
                        len,
                        key: None,
                        status: Status::Mismatch,
                        close: false,
                    },
                }
            }
            Codec::Http { head, .. } => match wire::http::parse_response_head(buf, *head) {
                Ok(None) => Frame::Incomplete,
                Err(_) => Frame::Malformed,
                Ok(Some(h)) => {
                    let body_len = match h.body {
                        wire::http::Body::Length(n) => n as usize,
                        wire::http::Body::Chunked => {
                            match wire::http::ChunkedDecoder::default().feed(&buf[h.head_len..]) {
                                Ok((n, true)) => n,
                                Ok((_, false)) => return Frame::Incomplete,
                                Err(_) => return Frame::Malformed,
                            }
                        }
                        // No length: cannot be told from the next response.
                        wire::http::Body::UntilClose => return Frame::Malformed,
                    };
                    if buf.len() < h.head_len + body_len {
                        return Frame::Incomplete;
                    }
                    Frame::Response {
                        len: h.head_len + body_len,
                        key: None,
                        status: Status::Http(h.status),
                        close: h.close,
                    }
                }
            },
            Codec::Raw { marker, .. } => match marker {
                Some(m) => match buf.windows(m.len()).position(|w| w == m.as_slice()) {
                    Some(at) => Frame::Response {
                        len: at + m.len(),
                        key: None,
                        status: Status::Ok,
                        close: false,
                    },
                    None => Frame::Incomplete,
                },
                // No marker: whatever arrives answers the oldest message.
                None if buf.is_empty() => Frame::Incomplete,
                None => Frame::Response {
                    len: buf.len(),
                    key: None,
                    status: Status::Ok,
                    close: false,
                },
            },
        }
    }
}

/// The deterministic byte at offset `i` of echo message `seq`.
fn pattern(seq: u64, i: usize) -> u8 {
    (seq as u8).wrapping_mul(31).wrapping_add(i as u8)
}

/// 0, 1, ..., 255, 0, 1, ...: any 256 bytes from it count up by one.
static RAMP: [u8; 512] = {
    let mut t = [0u8; 512];
    let mut i = 0;
    while i < 512 {
        t[i] = i as u8;
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rng() -> Pcg64Mcg {
        Pcg64Mcg::seed_from_u64(1)
    }

    fn round_trip(c: &Codec, n: u64) -> Frame {
        let mut out = Vec::new();
        let key = c.encode(n, 0, 123, &mut rng(), &mut out);
        let f = c.decode(&out);
        if let Frame::Response { key: Some(k), .. } = f {
            assert_eq!(k, key);
        }
        f
    }

    #[test]
    fn echo_round_trip_and_validation() {
        let c = Codec::Echo {
            size: 64,
            validate: true,
        };
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
            c.decode(&out),
            Frame::Response {
                status: Status::Mismatch,
                ..
            }
        ));
        assert_eq!(c.decode(&out[..30]), Frame::Incomplete);
        assert_eq!(c.decode(b"HTTP/1.1"), Frame::Malformed);
    }

    #[test]
    fn echo_payload_is_the_pattern_at_every_size() {
        for size in [ECHO_HEADER, 21, 64, 275, 276, 277, 1000, 4096] {
            for n in [0, 1, 7, 255, 1 << 40] {
                let c = Codec::Echo {
                    size,
                    validate: true,
                };
                let mut out = vec![9];
                c.encode(n, 0, 0, &mut rng(), &mut out);
                assert_eq!(out.len(), 1 + size);
                let body = &out[1 + ECHO_HEADER..];
                let want: Vec<u8> = (ECHO_HEADER..size).map(|i| pattern(n, i)).collect();
                assert_eq!(body, &want[..], "size {size} n {n}");
                assert!(matches!(
                    c.decode(&out[1..]),
                    Frame::Response {
                        status: Status::Ok,
                        ..
                    }
                ));
            }
        }
    }

    #[test]
    fn dns_query_echoed_back_is_echoed() {
        let c = Codec::Dns {
            qtype: 1,
            names: vec!["{rand}.example.com".into()],
        };
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
        );
        let mut out = Vec::new();
        c.encode(0, 0, 0, &mut rng(), &mut out);
        assert!(out.starts_with(b"GET / HTTP/1.1\r\nHost: h:1\r\n"));
        let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nAAHTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n";
        let Frame::Response { len, status, .. } = c.decode(resp) else {
            panic!()
        };
        assert_eq!(status, Status::Http(200));
        assert!(matches!(
            c.decode(&resp[len..]),
            Frame::Response {
                status: Status::Http(404),
                ..
            }
        ));
        assert_eq!(c.decode(&resp[..len - 1]), Frame::Incomplete);
    }

    #[test]
    fn raw_marker_and_ping() {
        let c = Codec::Raw {
            message: b"hi".to_vec(),
            first: None,
            marker: Some(b"\r\n".to_vec()),
        };
        assert_eq!(
            c.decode(b"ok\r\nmore"),
            Frame::Response {
                len: 4,
                key: None,
                status: Status::Ok,
                close: false,
            }
        );
        assert_eq!(c.decode(b"ok\r"), Frame::Incomplete);
        assert_eq!(
            Codec::Ping.decode(b"pong 5\n"),
            Frame::Response {
                len: 7,
                key: Some(5),
                status: Status::Ok,
                close: false,
            }
        );
        assert!(matches!(
            Codec::Ping.decode(b"error\n"),
            Frame::Response {
                status: Status::Mismatch,
                ..
            }
        ));
    }
}
