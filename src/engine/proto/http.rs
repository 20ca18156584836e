//! --proto http: HTTP/1.1 requests (--http-request, or a GET / with each
//! target's Host header); responses, in order, framed by Content-Length,
//! chunked coding, or the server's close, their bodies dropped as they are
//! read; `Connection: close` said by the server ends the connection's
//! queries.

use super::{partial, Frame, Place, Resume, Status};
use crate::scenario::unescaped;

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
