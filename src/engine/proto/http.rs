//! --proto http: HTTP/1.1 requests (--http-request, or a GET / with each
//! target's Host header); responses, in order, framed by Content-Length,
//! chunked coding, or the server's close, their bodies dropped as they are
//! read; `Connection: close` said by the server ends the connection's
//! queries.

use super::{partial, Frame, Place, Resume, Status};
use crate::scenario::unescaped;

/// Its --proto value, and its name in the per-query log.
pub const NAME: &str = "http";
/// The protocol in a word ("an HTTP reply").
pub const WORD: &str = "HTTP";
/// The queries in a few words, for a report's table.
pub const DESCRIPTION: &str = "HTTP/1.1 requests";

pub struct Http {
    /// One request per target (its Host header differs).
    requests: Vec<Vec<u8>>,
    /// The requests are HEAD: a response has no body whatever its head
    /// says.
    head: bool,
}

impl Http {
    /// `request`: as given (empty: a GET / to each of `hosts`).
    pub fn new(request: &str, hosts: &[String]) -> Http {
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
        Http { requests, head }
    }

    /// Appends the request to target `target`; its key is `n`.
    #[inline]
    pub fn encode(&self, n: u64, target: usize, out: &mut Vec<u8>) -> u64 {
        out.extend_from_slice(&self.requests[target % self.requests.len()]);
        n
    }

    /// The connection closed with `buf` not framed yet: the response its
    /// close ends, if the one at the front is of that kind.
    pub fn decode_at_close(&self, buf: &[u8]) -> Frame {
        match wire::http::parse_response_head(buf, self.head) {
            Ok(Some(h)) if h.body == wire::http::Body::UntilClose => Frame::Response {
                len: buf.len(),
                key: None,
                status: Status::Http(h.status),
                close: true,
            },
            _ => Frame::Incomplete,
        }
    }

    /// Frames the response at the front of `buf`, going on from `resume`.
    #[inline]
    pub fn decode(&self, buf: &[u8], resume: &mut Resume) -> Frame {
        match wire::http::parse_response_head(buf, self.head) {
            Ok(None) => Frame::Incomplete,
            Err(wire::http::HttpError::HeadTooLarge) => Frame::Oversized,
            Err(_) => Frame::Malformed,
            Ok(Some(h)) => {
                let body = &buf[h.head_len..];
                let body_len = match h.body {
                    wire::http::Body::Length(n) => {
                        // What is left of it after the bytes dropped.
                        let left = n.saturating_sub(resume.body_gone());
                        if (body.len() as u64) < left {
                            let gone = resume.body_gone() + body.len() as u64;
                            let Ok(gone) = u32::try_from(gone) else {
                                // A body past 4 GiB: not counted here.
                                return Frame::Oversized;
                            };
                            *resume = Resume(Place::Body(gone.to_ne_bytes()));
                            return partial(h.head_len, body.len());
                        }
                        left as usize
                    }
                    wire::http::Body::Chunked => {
                        let mut scan = resume.chunked();
                        match scan.scan(body) {
                            Ok(Some(n)) => n,
                            Ok(None) => {
                                let skip = scan.forget(body.len());
                                *resume = Resume(Place::Chunked(scan));
                                return partial(h.head_len, skip);
                            }
                            Err(wire::http::HttpError::ChunkTooLarge) => return Frame::Oversized,
                            Err(_) => return Frame::Malformed,
                        }
                    }
                    // No length: the server's close ends it. (The head
                    // is parsed again at each read, as a chunked one.)
                    wire::http::Body::UntilClose => {
                        return Frame::UntilClose {
                            keep: h.head_len,
                            skip: body.len(),
                        }
                    }
                };
                Frame::Response {
                    len: h.head_len + body_len,
                    key: None,
                    status: Status::Http(h.status),
                    close: h.close,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;

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

    /// An HTTP/1.0 reply with no length ends at the server's close: an
    /// answer, not malformed bytes.
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
}
