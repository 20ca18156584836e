//! HTTP/1.x framing: where a request head ends, how long its body is, and
//! whether the connection stays open; a streaming decoder for chunked
//! bodies, and a resumable scan of them for callers that keep the bytes. Only what a load generator and a fixed-reply server need: header
//! values other than Content-Length, Transfer-Encoding and Connection are
//! checked for shape and skipped.

use thiserror::Error;

/// Longest request or response head accepted (nginx's large buffers are
/// 4 x 8 KiB; this is generous).
pub const MAX_HEAD: usize = 64 * 1024;

/// Why a head is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum HttpError {
    #[error("malformed request line")]
    RequestLine,
    #[error("malformed status line")]
    StatusLine,
    #[error("unsupported HTTP version")]
    Version,
    #[error("malformed header line")]
    Header,
    #[error("invalid or conflicting Content-Length")]
    ContentLength,
    #[error("unsupported Transfer-Encoding")]
    TransferEncoding,
    #[error("head longer than 64 KiB")]
    HeadTooLarge,
    #[error("malformed chunked body")]
    Chunked,
    #[error("chunk ends more than 4 GiB past the bytes kept")]
    ChunkTooLarge,
}

/// How the body that follows a head is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// Exactly this many bytes (0 for none).
    Length(u64),
    /// Chunked transfer coding: use [`ChunkedDecoder`] or [`ChunkedScan`].
    Chunked,
    /// Until the peer closes (responses without a length only).
    UntilClose,
}

/// A complete request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead {
    /// Bytes of the head, the empty line included.
    pub head_len: usize,
    pub body: Body,
    /// The client asked to close after this request (or speaks HTTP/1.0
    /// without keep-alive).
    pub close: bool,
    /// HTTP/1.0 with `Connection: keep-alive`: the reply must say so too.
    pub keep_alive_1_0: bool,
    /// A HEAD request: the reply has no body.
    pub head_method: bool,
}

/// A complete response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead {
    pub head_len: usize,
    pub status: u16,
    pub body: Body,
    pub close: bool,
}

/// Finds the end of the head: the offset just past the empty line.
/// Lines may end in CRLF or a bare LF (RFC 9112 2.2 allows accepting it).
pub(crate) fn head_end(buf: &[u8]) -> Result<Option<usize>, HttpError> {
    let limit = buf.len().min(MAX_HEAD);
    // The head ends at "\n\n" or "\n\r\n" that is not at its very start
    // (leading empty lines are allowed, RFC 9112 2.2). Scanned a word at a
    // time for "\n".
    let mut from = 0;
    let mut line_start = 0;
    while let Some(i) = find_lf(&buf[..limit], from) {
        let line = &buf[line_start..i];
        if (line.is_empty() || line == b"\r") && line_start != 0 {
            return Ok(Some(i + 1));
        }
        line_start = i + 1;
        from = i + 1;
    }
    if buf.len() >= MAX_HEAD {
        Err(HttpError::HeadTooLarge)
    } else {
        Ok(None)
    }
}

/// The first `\n` in `s` at or after `from`: eight bytes at a time (a
/// word has a zero byte where it equals `\n`), the rest one by one.
#[inline]
fn find_lf(s: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut i = from;
    while let Some(chunk) = s.get(i..i + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        let x = word ^ (ONES * u64::from(b'\n'));
        let zero = x.wrapping_sub(ONES) & !x & HIGHS;
        if zero != 0 {
            return Some(i + zero.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    while i < s.len() {
        if s[i] == b'\n' {
            return Some(i);
        }
        i += 1;
    }
    None
}

pub(crate) fn is_tchar(b: u8) -> bool {
    TCHAR[usize::from(b)]
}

/// RFC 9110 token characters, by byte.
static TCHAR: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (i as u8).is_ascii_alphanumeric();
        i += 1;
    }
    let extra = b"!#$%&'*+-.^_`|~";
    let mut j = 0;
    while j < extra.len() {
        t[extra[j] as usize] = true;
        j += 1;
    }
    t
};

pub(crate) fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Lines of a head (without line endings), skipping leading empty lines.
pub(crate) fn lines(head: &[u8]) -> Lines<'_> {
    Lines {
        head,
        pos: 0,
        started: false,
    }
}

/// The lines of a head up to the empty line that ends it (a plain loop:
/// this runs for every request the server answers).
pub(crate) struct Lines<'a> {
    head: &'a [u8],
    pos: usize,
    started: bool,
}

impl<'a> Iterator for Lines<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let head = self.head;
        while self.pos < head.len() {
            let start = self.pos;
            let end = find_lf(head, start).unwrap_or(head.len());
            self.pos = end + 1;
            let mut line = &head[start..end];
            if let [rest @ .., b'\r'] = line {
                line = rest;
            }
            if !line.is_empty() {
                self.started = true;
                return Some(line);
            }
            if self.started {
                self.pos = head.len();
                return None;
            }
        }
        None
    }
}

/// What the framing headers say.
#[derive(Default)]
struct Framing {
    content_length: Option<u64>,
    chunked: bool,
    close: bool,
    keep_alive: bool,
}

fn framing<'a>(headers: impl Iterator<Item = &'a [u8]>) -> Result<Framing, HttpError> {
    let mut f = Framing::default();
    for line in headers {
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or(HttpError::Header)?;
        let (name, value) = (&line[..colon], trim(&line[colon + 1..]));
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return Err(HttpError::Header);
        }
        if value.iter().any(|&b| b < 0x20 && b != b'\t' || b == 0x7f) {
            return Err(HttpError::Header);
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_u64(value).ok_or(HttpError::ContentLength)?;
            if f.content_length.is_some_and(|old| old != n) {
                return Err(HttpError::ContentLength);
            }
            f.content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            let last = value.rsplit(|&b| b == b',').next().map(trim);
            if !last.is_some_and(|c| c.eq_ignore_ascii_case(b"chunked")) {
                return Err(HttpError::TransferEncoding);
            }
            f.chunked = true;
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(trim) {
                if token.eq_ignore_ascii_case(b"close") {
                    f.close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    f.keep_alive = true;
                }
            }
        }
    }
    if f.chunked && f.content_length.is_some() {
        // Both framings at once is how requests get smuggled: refuse.
        return Err(HttpError::ContentLength);
    }
    Ok(f)
}

/// Minor version of "HTTP/1.x".
fn version(v: &[u8]) -> Result<u8, HttpError> {
    match v {
        b"HTTP/1.1" => Ok(1),
        b"HTTP/1.0" => Ok(0),
        _ => Err(HttpError::Version),
    }
}

/// Parses the request head at the front of `buf`; `Ok(None)` until the
/// empty line that ends it has arrived.
pub fn parse_request_head(buf: &[u8]) -> Result<Option<RequestHead>, HttpError> {
    let Some(head_len) = head_end(buf)? else {
        return Ok(None);
    };
    let mut lines = lines(&buf[..head_len]);
    let request_line = lines.next().ok_or(HttpError::RequestLine)?;
    // method SP target SP version: a space more ends up in the version,
    // which then is not "HTTP/1.x".
    let space = |s: &[u8]| s.iter().position(|&b| b == b' ');
    let (method, rest) = match space(request_line) {
        Some(i) => (&request_line[..i], &request_line[i + 1..]),
        None => return Err(HttpError::RequestLine),
    };
    let (target, ver) = match space(rest) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => return Err(HttpError::RequestLine),
    };
    if method.is_empty()
        || !method.iter().all(|&b| is_tchar(b))
        || target.is_empty()
        || target.iter().any(|&b| b <= 0x20 || b == 0x7f)
    {
        return Err(HttpError::RequestLine);
    }
    let minor = version(ver).map_err(|e| {
        if ver.contains(&b' ') {
            HttpError::RequestLine
        } else {
            e
        }
    })?;
    let f = framing(lines)?;
    let body = if f.chunked {
        Body::Chunked
    } else {
        Body::Length(f.content_length.unwrap_or(0))
    };
    let keep_alive_1_0 = minor == 0 && f.keep_alive && !f.close;
    Ok(Some(RequestHead {
        head_len,
        body,
        close: f.close || (minor == 0 && !f.keep_alive),
        keep_alive_1_0,
        head_method: method == b"HEAD",
    }))
}

/// Parses the response head at the front of `buf`. `head_request` says
/// whether it answers a HEAD request (then there is no body).
pub fn parse_response_head(
    buf: &[u8],
    head_request: bool,
) -> Result<Option<ResponseHead>, HttpError> {
    let Some(head_len) = head_end(buf)? else {
        return Ok(None);
    };
    let mut lines = lines(&buf[..head_len]);
    let status_line = lines.next().ok_or(HttpError::StatusLine)?;
    let mut parts = status_line.splitn(3, |&b| b == b' ');
    let (Some(ver), Some(code)) = (parts.next(), parts.next()) else {
        return Err(HttpError::StatusLine);
    };
    let minor = version(ver)?;
    let status = match code {
        [a, b, c] if code.iter().all(u8::is_ascii_digit) => {
            u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
        }
        _ => return Err(HttpError::StatusLine),
    };
    let f = framing(lines)?;
    let no_body = head_request || (100..200).contains(&status) || status == 204 || status == 304;
    let body = if no_body {
        Body::Length(0)
    } else if f.chunked {
        Body::Chunked
    } else if let Some(n) = f.content_length {
        Body::Length(n)
    } else {
        Body::UntilClose
    };
    Ok(Some(ResponseHead {
        head_len,
        status,
        body,
        close: f.close || (minor == 0 && !f.keep_alive) || body == Body::UntilClose,
    }))
}

/// Streaming decoder for a chunked body: feed bytes as they arrive, it says
/// how many belong to the body and when the body (trailers included) ends.
/// Keeps only a few bytes of state, so bodies of any size pass through
/// without being buffered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkedDecoder {
    state: ChunkState,
    /// Chunk size being read, or data bytes left in the current chunk.
    n: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum ChunkState {
    /// Reading hex digits of a chunk size.
    #[default]
    Size,
    /// Skipping a chunk extension up to the line end.
    Ext,
    /// Inside chunk data.
    Data,
    /// Expecting the CRLF after chunk data.
    DataEnd,
    /// At the start of a trailer line (an empty one ends the body).
    TrailerStart,
    /// Inside a trailer line.
    Trailer,
    Done,
}

impl ChunkedDecoder {
    /// Consumes body bytes from the front of `buf`. Returns how many were
    /// used and whether the body is complete; bytes after the end are left
    /// for the next message.
    pub fn feed(&mut self, buf: &[u8]) -> Result<(usize, bool), HttpError> {
        let mut i = 0;
        while i < buf.len() {
            let b = buf[i];
            match self.state {
                ChunkState::Size => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        let digit = (b as char).to_digit(16).unwrap_or(0) as u64;
                        self.n = self
                            .n
                            .checked_mul(16)
                            .and_then(|n| n.checked_add(digit))
                            .ok_or(HttpError::Chunked)?;
                    }
                    b';' | b' ' | b'\t' => self.state = ChunkState::Ext,
                    b'\r' => {}
                    b'\n' => self.end_size_line(),
                    _ => return Err(HttpError::Chunked),
                },
                ChunkState::Ext => {
                    if b == b'\n' {
                        self.end_size_line();
                    }
                }
                ChunkState::Data => {
                    let take = (self.n).min((buf.len() - i) as u64) as usize;
                    self.n -= take as u64;
                    i += take;
                    if self.n == 0 {
                        self.state = ChunkState::DataEnd;
                    }
                    continue;
                }
                ChunkState::DataEnd => match b {
                    b'\r' => {}
                    b'\n' => self.state = ChunkState::Size,
                    _ => return Err(HttpError::Chunked),
                },
                ChunkState::TrailerStart => match b {
                    b'\r' => {}
                    b'\n' => {
                        self.state = ChunkState::Done;
                        return Ok((i + 1, true));
                    }
                    _ => self.state = ChunkState::Trailer,
                },
                ChunkState::Trailer => {
                    if b == b'\n' {
                        self.state = ChunkState::TrailerStart;
                    }
                }
                ChunkState::Done => return Ok((i, true)),
            }
            i += 1;
        }
        Ok((i, self.state == ChunkState::Done))
    }

    fn end_size_line(&mut self) {
        self.state = if self.n == 0 {
            ChunkState::TrailerStart
        } else {
            ChunkState::Data
        };
    }
}

/// A chunked body's decoder for a caller that keeps the body's bytes in a
/// buffer between reads (the client's pending input), where
/// [`ChunkedDecoder`] suits one that sees each byte once (the server's).
/// It keeps no count, only where to read next and its state there: 5
/// bytes, small enough to sit beside each connection's pending bytes.
/// Between calls it can stop anywhere and resume without reading a byte
/// twice, except those of an unfinished chunk-size line (its digits are
/// read again: a line of a few bytes); [`ChunkedScan::forget`] says which
/// of the bytes read it needs no more, so that the caller keeps only an
/// unfinished size line, not the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C, packed)]
pub struct ChunkedScan {
    /// Offset in the body of the next byte to read. Inside chunk data it
    /// is where the data ends, past the bytes that have arrived.
    at: u32,
    /// The state at `at`: Size (a size line's start), DataEnd,
    /// TrailerStart or Trailer.
    state: ChunkState,
}

impl ChunkedScan {
    /// Reads on through `body`: the body from its first byte, the bytes of
    /// the previous call and maybe more. Returns the body's length
    /// (trailers included) once it is complete; bytes after it are left
    /// for the next message. Ready for the next body after it returns a
    /// length (or an error).
    pub fn scan(&mut self, body: &[u8]) -> Result<Option<usize>, HttpError> {
        let at = self.at as usize;
        if at > body.len() {
            // Inside chunk data that has not all arrived: nothing to read.
            return Ok(None);
        }
        let mut d = ChunkedDecoder {
            state: self.state,
            n: 0,
        };
        let (used, done) = match d.feed(&body[at..]) {
            Ok(r) => r,
            Err(e) => {
                *self = ChunkedScan::default();
                return Err(e);
            }
        };
        if done {
            *self = ChunkedScan::default();
            return Ok(Some(at + used));
        }
        // Not done: it read all it was given.
        let end = body.len() as u64;
        let (next, state) = match d.state {
            // The data ends `n` bytes past what has arrived; its CRLF follows.
            ChunkState::Data => (end.saturating_add(d.n), ChunkState::DataEnd),
            // The count is not kept: read the unfinished size line again
            // from its start (just past the last line end).
            ChunkState::Size | ChunkState::Ext => {
                let line = body[at..]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(at, |i| at + i + 1);
                (line as u64, ChunkState::Size)
            }
            s => (end, s),
        };
        *self = match u32::try_from(next) {
            Ok(at) => ChunkedScan { at, state },
            // Where to read on does not fit: a chunk of 4 GiB or more.
            Err(_) => {
                *self = ChunkedScan::default();
                return Err(HttpError::ChunkTooLarge);
            }
        };
        Ok(None)
    }

    /// After a [`ChunkedScan::scan`] of `body` that found no end: how many
    /// bytes at its front the scan needs no more (chunk data, whole lines),
    /// now counted as gone: the next call's body starts after them. A
    /// caller that drops them keeps at most an unfinished size line.
    pub fn forget(&mut self, body: usize) -> usize {
        let gone = (self.at as usize).min(body);
        self.at -= gone as u32;
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn req(s: &str) -> Result<Option<RequestHead>, HttpError> {
        parse_request_head(s.as_bytes())
    }

    #[test]
    fn simple_get() {
        let h = req("GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.head_len, 27);
        assert_eq!(h.body, Body::Length(0));
        assert!(!h.close);
    }

    #[test]
    fn incomplete_head_is_none() {
        let full = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        for cut in 0..full.len() {
            assert_eq!(req(&full[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn connection_close_and_http10() {
        assert!(
            req("GET / HTTP/1.1\r\nConnection: close\r\n\r\n")
                .unwrap()
                .unwrap()
                .close
        );
        assert!(req("GET / HTTP/1.0\r\n\r\n").unwrap().unwrap().close);
        let ka = req("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!ka.close && ka.keep_alive_1_0);
    }

    #[test]
    fn content_length_body() {
        let h = req("POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
            .unwrap()
            .unwrap();
        assert_eq!(h.body, Body::Length(5));
    }

    #[test]
    fn malformed_requests() {
        assert_eq!(req("GARBAGE\r\n\r\n"), Err(HttpError::RequestLine));
        assert_eq!(req("GET / HTTP/2.0\r\n\r\n"), Err(HttpError::Version));
        assert_eq!(req("GET /\r\n\r\n"), Err(HttpError::RequestLine));
        assert_eq!(req("GET / HTTP/1.1 x\r\n\r\n"), Err(HttpError::RequestLine));
        assert_eq!(req("GET  / HTTP/1.1\r\n\r\n"), Err(HttpError::RequestLine));
        // A leading empty line, bare LF endings, a head split anywhere.
        let full = "\r\nGET / HTTP/1.1\nHost: a\r\n\n";
        assert_eq!(req(full).unwrap().unwrap().head_len, full.len());
        for cut in 0..full.len() {
            assert_eq!(req(&full[..cut]), Ok(None), "cut at {cut}");
        }
        assert_eq!(
            req("GET / HTTP/1.1\r\nNoColon\r\n\r\n"),
            Err(HttpError::Header)
        );
        assert_eq!(
            req("GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            Err(HttpError::ContentLength)
        );
        assert_eq!(
            req("GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            Err(HttpError::ContentLength)
        );
        assert_eq!(
            req("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n"),
            Err(HttpError::ContentLength)
        );
        assert_eq!(
            req("GET / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"),
            Err(HttpError::TransferEncoding)
        );
    }

    #[test]
    fn head_too_large() {
        let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
        big.resize(MAX_HEAD + 10, b'a');
        assert_eq!(parse_request_head(&big), Err(HttpError::HeadTooLarge));
    }

    #[test]
    fn response_heads() {
        let r = parse_response_head(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nAA", false)
            .unwrap()
            .unwrap();
        assert_eq!((r.status, r.body, r.close), (200, Body::Length(2), false));
        let r = parse_response_head(b"HTTP/1.1 204 No Content\r\n\r\n", false)
            .unwrap()
            .unwrap();
        assert_eq!(r.body, Body::Length(0));
        let r = parse_response_head(b"HTTP/1.0 200 OK\r\n\r\n", false)
            .unwrap()
            .unwrap();
        assert_eq!(r.body, Body::UntilClose);
        assert!(r.close);
        let r = parse_response_head(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true)
            .unwrap()
            .unwrap();
        assert_eq!(r.body, Body::Length(0));
    }

    const CHUNKED: &[u8] = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nX-Trailer: y\r\n\r\nNEXT";

    #[test]
    fn chunked_split_at_every_point() {
        let body_len = CHUNKED.len() - 4;
        for split in 0..=CHUNKED.len() {
            let mut d = ChunkedDecoder::default();
            let (a, done_a) = d.feed(&CHUNKED[..split]).unwrap();
            let total = if done_a {
                a
            } else {
                assert_eq!(a, split);
                let (b, done_b) = d.feed(&CHUNKED[split..]).unwrap();
                assert!(done_b, "split at {split}");
                a + b
            };
            assert_eq!(total, body_len, "split at {split}");
        }
    }

    /// Scans `stream` as it grows by `piece` bytes a call: the body's
    /// length, the error, and the bytes handed to the decoder in all.
    fn scan_growing(stream: &[u8], piece: usize) -> (Result<Option<usize>, HttpError>, usize) {
        let mut s = ChunkedScan::default();
        let mut fed = 0;
        let mut end = 0;
        loop {
            end = (end + piece).min(stream.len());
            fed += end.saturating_sub(s.at as usize);
            match s.scan(&stream[..end]) {
                Ok(None) if end < stream.len() => {}
                r => return (r, fed),
            }
        }
    }

    #[test]
    fn chunked_scan_split_at_every_point() {
        let body_len = CHUNKED.len() - 4;
        for split in 0..=CHUNKED.len() {
            let mut s = ChunkedScan::default();
            let first = s.scan(&CHUNKED[..split]).unwrap();
            let len = first.or_else(|| s.scan(CHUNKED).unwrap());
            assert_eq!(len, Some(body_len), "split at {split}");
        }
    }

    /// Feeds `stream` in `piece`-byte reads to a scan whose caller drops
    /// what it forgets: the body's length (counted over all the reads)
    /// and the most bytes kept between reads.
    fn scan_forgetting(stream: &[u8], piece: usize) -> (Result<Option<usize>, HttpError>, usize) {
        let mut s = ChunkedScan::default();
        let (mut kept, mut gone, mut most) = (Vec::new(), 0, 0);
        for read in stream.chunks(piece) {
            kept.extend_from_slice(read);
            match s.scan(&kept) {
                Ok(None) => {}
                Ok(Some(len)) => return (Ok(Some(gone + len)), most),
                e => return (e, most),
            }
            let n = s.forget(kept.len());
            kept.drain(..n);
            gone += n;
            most = most.max(kept.len());
        }
        (Ok(None), most)
    }

    #[test]
    fn chunked_scan_forgets_all_but_an_unfinished_size_line() {
        let mut body = Vec::new();
        for _ in 0..50 {
            body.extend_from_slice(b"64;ext=1\r\n");
            body.extend_from_slice(&[b'a'; 100]);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"0\r\nTrailer: x\r\n\r\n");
        for piece in [1, 2, 3, 7, 64, 1000, body.len()] {
            let (len, most) = scan_forgetting(&body, piece);
            assert_eq!(len, Ok(Some(body.len())), "reads of {piece}");
            // A size line of 10 bytes plus one read at most.
            assert!(most < 10 + piece, "reads of {piece}: kept {most}");
        }
        // Whatever it was given split anywhere, the same length.
        for split in 0..=CHUNKED.len() {
            let mut s = ChunkedScan::default();
            let mut kept = CHUNKED[..split].to_vec();
            let len = match s.scan(&kept).unwrap() {
                Some(len) => len,
                None => {
                    let gone = s.forget(kept.len());
                    kept.drain(..gone);
                    kept.extend_from_slice(&CHUNKED[split..]);
                    gone + s.scan(&kept).unwrap().expect("whole")
                }
            };
            assert_eq!(len, CHUNKED.len() - 4, "split at {split}");
        }
    }

    #[test]
    fn chunked_scan_one_byte_per_call() {
        let body_len = CHUNKED.len() - 4;
        let mut s = ChunkedScan::default();
        for end in 0..=CHUNKED.len() {
            let got = s.scan(&CHUNKED[..end]).unwrap();
            if end < body_len {
                assert_eq!(got, None, "{end} bytes");
            } else {
                assert_eq!(got, Some(body_len), "{end} bytes");
                break;
            }
        }
        // Ready for the next body.
        assert_eq!(s, ChunkedScan::default());
        assert_eq!(scan_growing(b"0\r\n\r\n", 1).0, Ok(Some(5)));
    }

    #[test]
    fn chunked_scan_of_a_long_body_reads_each_byte_about_once() {
        // 2,000 chunks of 100 bytes, then one of a million, fed one byte per
        // call: starting over at each call would hand the decoder ~7 * 10^11
        // bytes.
        let mut body = Vec::new();
        for _ in 0..2000 {
            body.extend_from_slice(b"64;x=y\r\n");
            body.extend_from_slice(&[b'a'; 100]);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"f4240\r\n");
        body.resize(body.len() + 1_000_000, b'b');
        body.extend_from_slice(b"\r\n0\r\nT: 1\r\n\r\n");
        let (len, fed) = scan_growing(&body, 1);
        assert_eq!(len, Ok(Some(body.len())));
        // Chunk data is skipped once its size is known. What is read: each
        // size line again at each of its bytes (1 + 2 + ... + 8 = 36) and
        // the CRLF after the data, per chunk; then the last lines.
        assert!(fed <= 2000 * (36 + 2) + 100, "fed {fed}");
        // In 64 KiB reads: each byte that has arrived at most once.
        let (len, fed) = scan_growing(&body, 64 * 1024);
        assert_eq!(len, Ok(Some(body.len())));
        assert!(fed <= 2000 * 110 + 64 * 1024, "fed {fed}");
    }

    #[test]
    fn chunked_scan_of_a_huge_chunk_waits_without_reading() {
        let mut s = ChunkedScan::default();
        // Its end does not fit the 4-byte offset.
        assert_eq!(s.scan(b"ffffffff\r\nab"), Err(HttpError::ChunkTooLarge));
        assert_eq!(s, ChunkedScan::default());
        let mut s = ChunkedScan::default();
        assert_eq!(s.scan(b"fffffff\r\nab"), Ok(None));
        assert_eq!({ s.at }, 9 + 0xfff_ffff);
        assert_eq!(s.scan(b"fffffff\r\nabc"), Ok(None));
        assert_eq!(
            ChunkedScan::default().scan(b"ffffffffffffffffff\r\n"),
            Err(HttpError::Chunked)
        );
    }

    #[test]
    fn chunked_rejects_garbage() {
        let mut d = ChunkedDecoder::default();
        assert_eq!(d.feed(b"zz\r\n"), Err(HttpError::Chunked));
        let mut d = ChunkedDecoder::default();
        assert_eq!(d.feed(b"ffffffffffffffffff\r\n"), Err(HttpError::Chunked));
    }

    /// httparse as an independent oracle: whenever it finds a complete
    /// request, we find the same head length.
    fn agree_with_httparse(bytes: &[u8]) {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut theirs = httparse::Request::new(&mut headers);
        let ours = parse_request_head(bytes);
        if let Ok(httparse::Status::Complete(n)) = theirs.parse(bytes) {
            if let Ok(Some(h)) = ours {
                assert_eq!(h.head_len, n);
            }
        }
        if let Ok(Some(h)) = ours {
            // A head we accept, httparse accepts too, with the same length.
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut theirs = httparse::Request::new(&mut headers);
            assert_eq!(
                theirs.parse(bytes).ok(),
                Some(httparse::Status::Complete(h.head_len)),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn httparse_agrees_on_examples() {
        for r in [
            "GET / HTTP/1.1\r\nHost: example.com\r\nUser-Agent: throng\r\n\r\n",
            "POST /submit?a=b HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc",
            "GET / HTTP/1.1\nHost: x\n\n",
            "\r\nGET / HTTP/1.1\r\n\r\n",
        ] {
            agree_with_httparse(r.as_bytes());
            assert!(parse_request_head(r.as_bytes()).unwrap().is_some());
        }
    }

    fn request_strategy() -> impl Strategy<Value = Vec<u8>> {
        (
            prop_oneof![Just("GET"), Just("POST"), Just("HEAD"), Just("PUT")],
            "/[a-z0-9/?=&]{0,20}",
            prop_oneof![Just("HTTP/1.1"), Just("HTTP/1.0")],
            proptest::collection::vec(("[A-Za-z-]{1,12}", "[ -~]{0,20}"), 0..5),
            proptest::option::of(0u64..50),
        )
            .prop_map(|(m, target, v, headers, cl)| {
                let mut s = format!("{m} {target} {v}\r\n");
                for (n, val) in headers {
                    if !n.eq_ignore_ascii_case("content-length")
                        && !n.eq_ignore_ascii_case("transfer-encoding")
                    {
                        s.push_str(&format!("{n}: {}\r\n", val.trim()));
                    }
                }
                let body = cl.unwrap_or(0) as usize;
                if let Some(cl) = cl {
                    s.push_str(&format!("Content-Length: {cl}\r\n"));
                }
                s.push_str("\r\n");
                s.push_str(&"b".repeat(body));
                s.into_bytes()
            })
    }

    /// Splits a pipelined stream of requests (all with Content-Length bodies)
    /// the way the server does, feeding it in two parts.
    fn frame_pipeline(stream: &[u8], split: usize) -> Vec<usize> {
        let mut pending = Vec::new();
        let mut lens = Vec::new();
        for part in [&stream[..split], &stream[split..]] {
            pending.extend_from_slice(part);
            while let Some(h) = parse_request_head(&pending).unwrap() {
                let Body::Length(n) = h.body else {
                    panic!("chunked in test stream")
                };
                let total = h.head_len + n as usize;
                if pending.len() < total {
                    break;
                }
                lens.push(total);
                pending.drain(..total);
            }
        }
        assert!(pending.is_empty());
        lens
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_request_head(&bytes);
            let _ = parse_response_head(&bytes, false);
            let _ = ChunkedDecoder::default().feed(&bytes);
            agree_with_httparse(&bytes);
        }

        /// The scan over growing bytes frames what the streaming decoder
        /// fed the same pieces frames, and fails where it fails.
        #[test]
        fn chunked_scan_agrees_with_the_decoder(
            chunks in proptest::collection::vec((1usize..40, "[ -~]{0,6}"), 0..6),
            trailers in proptest::collection::vec("[!-~]{1,10}", 0..3),
            noise in proptest::collection::vec(any::<u8>(), 0..8),
            piece in 1usize..20,
        ) {
            let mut stream = Vec::new();
            for (n, ext) in &chunks {
                stream.extend_from_slice(format!("{n:x};{ext}\r\n").as_bytes());
                stream.resize(stream.len() + n, b'd');
                stream.extend_from_slice(b"\r\n");
            }
            stream.extend_from_slice(b"0\r\n");
            for t in &trailers {
                stream.extend_from_slice(format!("{t}\r\n").as_bytes());
            }
            stream.extend_from_slice(b"\r\n");
            let body_len = stream.len();
            stream.extend_from_slice(&noise);
            prop_assert_eq!(scan_growing(&stream, piece).0, Ok(Some(body_len)));
        }

        /// On any bytes (mostly those a chunked body is made of), the scan
        /// over growing bytes, and over bytes it has made its caller
        /// forget, answers what the streaming decoder fed the same pieces
        /// answers, and at the same piece.
        #[test]
        fn chunked_scan_agrees_with_the_decoder_on_any_bytes(
            bytes in proptest::collection::vec(
                prop_oneof![
                    4 => proptest::sample::select(b"0123456789abcdefAF;\r\n \tx".to_vec()),
                    1 => any::<u8>(),
                ],
                0..80,
            ),
            piece in 1usize..20,
        ) {
            let mut d = ChunkedDecoder::default();
            let mut total = 0;
            let mut theirs = Ok(None);
            for part in bytes.chunks(piece) {
                match d.feed(part) {
                    Ok((used, true)) => {
                        theirs = Ok(Some(total + used));
                        break;
                    }
                    Ok((used, false)) => total += used,
                    Err(e) => {
                        theirs = Err(e);
                        break;
                    }
                }
            }
            // The scan refuses a chunk that ends 4 GiB or more past the
            // bytes kept, where the decoder (keeping nothing) reads on.
            for ours in [scan_growing(&bytes, piece).0, scan_forgetting(&bytes, piece).0] {
                if ours != Err(HttpError::ChunkTooLarge) {
                    prop_assert_eq!(ours, theirs);
                }
            }
        }

        #[test]
        fn generated_requests_agree_with_httparse(r in request_strategy()) {
            prop_assert!(parse_request_head(&r).unwrap().is_some());
            agree_with_httparse(&r);
        }

        #[test]
        fn any_split_of_a_pipeline_frames_the_same(
            reqs in proptest::collection::vec(request_strategy(), 1..4),
            split in any::<prop::sample::Index>(),
        ) {
            let stream: Vec<u8> = reqs.concat();
            let expected: Vec<usize> = reqs.iter().map(Vec::len).collect();
            prop_assert_eq!(frame_pipeline(&stream, split.index(stream.len() + 1)), expected);
        }
    }
}
