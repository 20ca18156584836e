//! WebSocket (RFC 6455): both sides of the opening handshake, frames, close
//! codes, and the reassembly of fragmented messages.
//!
//! - Handshake, client side: [`encode_request`] builds the `GET` with a
//!   [`Key`] made from 16 bytes the caller draws; [`parse_response`] checks
//!   the `101` and its `Sec-WebSocket-Accept`, or names the refusal by its
//!   status and first line.
//! - Handshake, server side: [`parse_upgrade`] checks a request and takes
//!   its key; [`encode_accept`] builds the `101`.
//! - Frames: [`parse_header`] reads a header (the length checked against
//!   [`MAX_WS_MESSAGE`] before anything is sized), [`decode_frame`] waits
//!   for the whole frame; [`encode_frame`] appends a frame, masked with the
//!   caller's 4 bytes (a client's) or not (a server's). Masking works in
//!   place, a word at a time, and never allocates.
//! - [`Fragments`] follows a message over continuation frames without
//!   holding its bytes; [`Reassembler`] also keeps them, and hands a
//!   message that fits one frame straight from the caller's bytes.
//!
//! Extensions are never negotiated (no permessage-deflate): a frame with an
//! RSV bit set is an error, and so is a `101` that names an extension.
//! Text payloads are not checked for UTF-8 here: that is the caller's
//! choice (an echo sends back what it got).

use std::ops::Range;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use thiserror::Error;

use crate::http::{self, HttpError};

/// The GUID RFC 6455 appends to the key before hashing it.
pub const GUID: &[u8; 36] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// The longest message a reader accepts, over all its fragments (a longer
/// length is an error, not a wait: a peer could otherwise make a reader
/// buffer without bound). Like [`crate::push::MAX_MESSAGE`].
pub const MAX_WS_MESSAGE: u64 = 1 << 20;
/// The longest control frame payload (ping, pong, close).
pub const MAX_CONTROL: usize = 125;
/// The longest frame header: 2 bytes, 8 of length, 4 of mask.
pub const MAX_HEADER: usize = 14;
/// Bytes of a `Sec-WebSocket-Key` (base64 of 16 bytes).
pub const KEY_LEN: usize = 24;
/// Bytes of a `Sec-WebSocket-Accept` (base64 of a SHA-1).
pub const ACCEPT_LEN: usize = 28;

/// Close codes a sender uses (RFC 6455 7.4.1).
pub mod close {
    pub const NORMAL: u16 = 1000;
    pub const GOING_AWAY: u16 = 1001;
    pub const PROTOCOL_ERROR: u16 = 1002;
    pub const TOO_BIG: u16 = 1009;
}

/// The server's answer to an upgrade request it cannot take.
pub const BAD_REQUEST: &[u8] =
    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
/// The server's answer to a request of another WebSocket version.
pub const UPGRADE_REQUIRED: &[u8] = b"HTTP/1.1 426 Upgrade Required\r\nSec-WebSocket-Version: 13\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Which side decodes: a client reads a server's frames (never masked), a
/// server a client's (always masked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// A frame's opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    Continuation = 0,
    Text = 1,
    Binary = 2,
    Close = 8,
    Ping = 9,
    Pong = 10,
}

impl Opcode {
    fn from_bits(b: u8) -> Option<Opcode> {
        Some(match b {
            0 => Opcode::Continuation,
            1 => Opcode::Text,
            2 => Opcode::Binary,
            8 => Opcode::Close,
            9 => Opcode::Ping,
            10 => Opcode::Pong,
            _ => return None,
        })
    }

    /// Close, ping and pong: at most 125 bytes, never fragmented, and
    /// allowed between the fragments of a message.
    pub fn is_control(self) -> bool {
        (self as u8) & 0x8 != 0
    }
}

/// Bytes that break RFC 6455, each named: the peer's fault, to be answered
/// by a close of that connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WsError {
    #[error("masked frame from the server (a server never masks, RFC 6455 5.1)")]
    MaskedFromServer,
    #[error("unmasked frame from a client (a client masks every frame, RFC 6455 5.1)")]
    UnmaskedFromClient,
    #[error("reserved opcode {0:#x}")]
    BadOpcode(u8),
    #[error("RSV bits set without a negotiated extension")]
    ReservedBits,
    #[error("control frame of {0} bytes (at most 125)")]
    ControlTooLong(u64),
    #[error("fragmented control frame")]
    FragmentedControl,
    #[error("message of {0} bytes or more, over the 1 MiB limit")]
    TooLong(u64),
    #[error("close frame with a 1-byte payload")]
    CloseOneByte,
    #[error("close code {0} is not one a peer may send")]
    BadCloseCode(u16),
    #[error("continuation frame outside a fragmented message")]
    UnexpectedContinuation,
    #[error("new message inside a fragmented one (a continuation frame was due)")]
    ExpectedContinuation,
    #[error("malformed HTTP head in the handshake: {0}")]
    Http(HttpError),
    #[error("upgrade request is not a GET")]
    NotGet,
    #[error("upgrade request without Host")]
    NoHost,
    #[error("no `Upgrade: websocket` with `Connection: upgrade`")]
    NotUpgrade,
    #[error("Sec-WebSocket-Version is not 13")]
    WrongVersion,
    #[error("Sec-WebSocket-Key missing or not 16 bytes in base64")]
    BadKey,
    #[error("Sec-WebSocket-Accept does not match the key sent")]
    BadAccept,
    #[error("the server named an extension that was not offered")]
    UnaskedExtension,
}

impl WsError {
    /// The close code that answers this error.
    pub fn close_code(self) -> u16 {
        match self {
            WsError::TooLong(_) => close::TOO_BIG,
            _ => close::PROTOCOL_ERROR,
        }
    }
}

impl From<HttpError> for WsError {
    fn from(e: HttpError) -> Self {
        WsError::Http(e)
    }
}

/// A frame header: where its payload lies in the bytes it was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    pub fin: bool,
    pub opcode: Opcode,
    pub mask: Option<[u8; 4]>,
    /// Offset of the payload (the header's length).
    pub payload_at: usize,
    pub payload_len: usize,
}

impl Frame {
    /// Bytes of the whole frame.
    pub fn end(&self) -> usize {
        self.payload_at + self.payload_len
    }

    /// The payload (still masked, if it was) in the bytes the frame was
    /// read from; they must hold the whole frame.
    pub fn payload<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.payload_at..self.end()]
    }
}

/// The frame header at the front of `buf`; `Ok(None)` until the header is
/// whole (the payload may still be on its way). The length is checked
/// against [`MAX_WS_MESSAGE`] (and a control frame's against 125) as soon
/// as it is read.
pub fn parse_header(buf: &[u8], role: Role) -> Result<Option<Frame>, WsError> {
    let [b0, b1, ..] = *buf else {
        return Ok(None);
    };
    if b0 & 0x70 != 0 {
        return Err(WsError::ReservedBits);
    }
    let opcode = Opcode::from_bits(b0 & 0x0f).ok_or(WsError::BadOpcode(b0 & 0x0f))?;
    let fin = b0 & 0x80 != 0;
    let masked = b1 & 0x80 != 0;
    match (role, masked) {
        (Role::Client, true) => return Err(WsError::MaskedFromServer),
        (Role::Server, false) => return Err(WsError::UnmaskedFromClient),
        _ => {}
    }
    if opcode.is_control() && !fin {
        return Err(WsError::FragmentedControl);
    }
    let (len, mut at) = match b1 & 0x7f {
        126 => match buf.get(2..4) {
            Some(b) => (u64::from(u16::from_be_bytes([b[0], b[1]])), 4),
            None => return Ok(None),
        },
        127 => match buf.get(2..10) {
            Some(b) => (u64::from_be_bytes(b.try_into().expect("8 bytes")), 10),
            None => return Ok(None),
        },
        n => (u64::from(n), 2),
    };
    if opcode.is_control() && len > MAX_CONTROL as u64 {
        return Err(WsError::ControlTooLong(len));
    }
    if len > MAX_WS_MESSAGE {
        return Err(WsError::TooLong(len));
    }
    let mask = if masked {
        let Some(m) = buf.get(at..at + 4) else {
            return Ok(None);
        };
        at += 4;
        Some([m[0], m[1], m[2], m[3]])
    } else {
        None
    };
    Ok(Some(Frame {
        fin,
        opcode,
        mask,
        payload_at: at,
        payload_len: len as usize,
    }))
}

/// The whole frame at the front of `buf`; `Ok(None)` until all of it has
/// arrived.
pub fn decode_frame(buf: &[u8], role: Role) -> Result<Option<Frame>, WsError> {
    Ok(parse_header(buf, role)?.filter(|f| buf.len() >= f.end()))
}

/// XORs `data` with `mask`, `data` starting `offset` bytes into the
/// payload (so a payload can be unmasked in pieces). In place: masking and
/// unmasking are the same operation.
pub fn apply_mask(data: &mut [u8], mask: [u8; 4], offset: usize) {
    let mut m = mask;
    m.rotate_left(offset % 4);
    let word = u64::from_ne_bytes([m[0], m[1], m[2], m[3], m[0], m[1], m[2], m[3]]);
    let mut chunks = data.chunks_exact_mut(8);
    for c in &mut chunks {
        let v = u64::from_ne_bytes((&*c).try_into().expect("8 bytes")) ^ word;
        c.copy_from_slice(&v.to_ne_bytes());
    }
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= m[i % 4];
    }
}

/// Appends a frame header for a payload of `len` bytes.
pub fn encode_header(
    out: &mut Vec<u8>,
    fin: bool,
    opcode: Opcode,
    len: usize,
    mask: Option<[u8; 4]>,
) {
    out.push(u8::from(fin) << 7 | opcode as u8);
    let m = if mask.is_some() { 0x80 } else { 0 };
    if len < 126 {
        out.push(m | len as u8);
    } else if len <= usize::from(u16::MAX) {
        out.push(m | 126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(m | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    if let Some(k) = mask {
        out.extend_from_slice(&k);
    }
}

/// Appends a whole frame: its header, then `payload`, masked with `mask`
/// when one is given (a client's frames: a fresh mask per frame, from the
/// caller's RNG). `out` is the caller's, reused.
pub fn encode_frame(
    out: &mut Vec<u8>,
    fin: bool,
    opcode: Opcode,
    payload: &[u8],
    mask: Option<[u8; 4]>,
) {
    encode_header(out, fin, opcode, payload.len(), mask);
    let at = out.len();
    out.extend_from_slice(payload);
    if let Some(k) = mask {
        apply_mask(&mut out[at..], k, 0);
    }
}

/// Appends a close frame with `code` (none: an empty close).
pub fn encode_close(out: &mut Vec<u8>, code: Option<u16>, mask: Option<[u8; 4]>) {
    match code {
        Some(c) => encode_frame(out, true, Opcode::Close, &c.to_be_bytes(), mask),
        None => encode_frame(out, true, Opcode::Close, &[], mask),
    }
}

/// Whether a peer may send `code` in a close frame: 1000-1003, 1007-1014
/// (the IANA registry's), 3000-4999 (libraries' and applications'). 1005,
/// 1006 and 1015 are for reports, never on the wire.
pub fn valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// The code of a close frame's (unmasked) payload: `None` for an empty
/// one (RFC 6455's 1005, no status received).
pub fn close_code(payload: &[u8]) -> Result<Option<u16>, WsError> {
    match payload {
        [] => Ok(None),
        [_] => Err(WsError::CloseOneByte),
        [a, b, ..] => {
            let code = u16::from_be_bytes([*a, *b]);
            if valid_close_code(code) {
                Ok(Some(code))
            } else {
                Err(WsError::BadCloseCode(code))
            }
        }
    }
}

/// Where a data frame stands in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// A whole message in one frame.
    Whole(Opcode),
    /// The first fragment of a message of this type.
    First(Opcode),
    Middle,
    /// The last fragment of a message of this type.
    Last(Opcode),
}

/// A message followed over its fragments: its type and the bytes so far.
/// A few bytes of state; it holds none of the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fragments {
    open: Option<Opcode>,
    /// Bytes so far (at most the cap, 1 MiB: a `u32` keeps this 8 bytes).
    len: u32,
}

impl Fragments {
    /// A data frame (text, binary or continuation): where it stands in its
    /// message. Control frames do not come here (they may sit between
    /// fragments).
    pub fn data(&mut self, f: &Frame) -> Result<Piece, WsError> {
        match (self.open, f.opcode) {
            (None, Opcode::Continuation) => Err(WsError::UnexpectedContinuation),
            (Some(_), Opcode::Text | Opcode::Binary) => Err(WsError::ExpectedContinuation),
            (None, op) if f.fin => Ok(Piece::Whole(op)),
            (None, op) => {
                self.open = Some(op);
                self.len = u32::try_from(f.payload_len).unwrap_or(u32::MAX);
                Ok(Piece::First(op))
            }
            (Some(op), _) => {
                let len = u64::from(self.len) + f.payload_len as u64;
                if len > MAX_WS_MESSAGE {
                    return Err(WsError::TooLong(len));
                }
                self.len = len as u32;
                if f.fin {
                    self.open = None;
                    Ok(Piece::Last(op))
                } else {
                    Ok(Piece::Middle)
                }
            }
        }
    }

    /// A fragmented message is under way.
    pub fn in_message(&self) -> bool {
        self.open.is_some()
    }
}

/// Messages out of data frames: one that fits a frame is handed back from
/// the caller's bytes as it is; fragments are kept (in a buffer that lives
/// only while a fragmented message is under way, after [`Self::release`]).
#[derive(Debug, Clone, Default)]
pub struct Reassembler {
    frags: Fragments,
    buf: Vec<u8>,
}

impl Reassembler {
    /// A data frame and its unmasked payload: the message once it is whole.
    pub fn push<'a>(
        &'a mut self,
        f: &Frame,
        payload: &'a [u8],
    ) -> Result<Option<(Opcode, &'a [u8])>, WsError> {
        match self.frags.data(f)? {
            Piece::Whole(op) => Ok(Some((op, payload))),
            Piece::First(_) => {
                self.buf.clear();
                self.buf.extend_from_slice(payload);
                Ok(None)
            }
            Piece::Middle => {
                self.buf.extend_from_slice(payload);
                Ok(None)
            }
            Piece::Last(op) => {
                self.buf.extend_from_slice(payload);
                Ok(Some((op, &self.buf)))
            }
        }
    }

    /// Frees the fragment buffer (between messages, when idle).
    pub fn release(&mut self) {
        if !self.frags.in_message() {
            self.buf = Vec::new();
        }
    }
}

/// A `Sec-WebSocket-Key`: base64 of 16 random bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key([u8; KEY_LEN]);

impl Key {
    /// The key of 16 bytes the caller drew (fresh for each connection).
    pub fn new(random: [u8; 16]) -> Key {
        let mut k = [0u8; KEY_LEN];
        let n = STANDARD
            .encode_slice(random, &mut k)
            .expect("16 bytes are 24 in base64");
        debug_assert_eq!(n, KEY_LEN);
        Key(k)
    }

    /// A key as a request carries it: 24 bytes of base64 of 16 bytes.
    pub fn parse(text: &[u8]) -> Option<Key> {
        let mut raw = [0u8; 18];
        match STANDARD.decode_slice(text, &mut raw) {
            Ok(16) if text.len() == KEY_LEN => Some(Key(text.try_into().ok()?)),
            _ => None,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The `Sec-WebSocket-Accept` that answers this key.
    pub fn accept(&self) -> [u8; ACCEPT_LEN] {
        accept_for(&self.0)
    }
}

/// base64(SHA-1(key + GUID)): the `Sec-WebSocket-Accept` for `key`.
pub fn accept_for(key: &[u8]) -> [u8; ACCEPT_LEN] {
    let mut h = sha1_smol::Sha1::new();
    h.update(key);
    h.update(GUID);
    let mut out = [0u8; ACCEPT_LEN];
    let n = STANDARD
        .encode_slice(h.digest().bytes(), &mut out)
        .expect("20 bytes are 28 in base64");
    debug_assert_eq!(n, ACCEPT_LEN);
    out
}

/// What a client asks for in its opening handshake.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The `Host` header (`host:port`).
    pub host: &'a str,
    /// The request target, e.g. `/` or `/chat?room=1`.
    pub path: &'a str,
    pub subprotocol: Option<&'a str>,
    /// More header lines, as given (`NAME`, `VALUE`).
    pub headers: &'a [(&'a str, &'a str)],
}

/// Appends the opening handshake's `GET`. Returns where the key lies in
/// `out`, so a caller that keeps the request can put a fresh key there
/// for its next connection.
pub fn encode_request(req: &Request, key: &Key, out: &mut Vec<u8>) -> Range<usize> {
    for part in [
        "GET ",
        req.path,
        " HTTP/1.1\r\nHost: ",
        req.host,
        "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ",
    ] {
        out.extend_from_slice(part.as_bytes());
    }
    let at = out.len();
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\r\n");
    if let Some(p) = req.subprotocol {
        out.extend_from_slice(b"Sec-WebSocket-Protocol: ");
        out.extend_from_slice(p.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in req.headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    at..at + KEY_LEN
}

/// The server's answer to the opening handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// `101`, checked: frames start at `head_len`. `subprotocol`: where the
    /// one the server chose lies in the bytes, if it chose one.
    Upgraded {
        head_len: usize,
        subprotocol: Option<Range<usize>>,
    },
    /// Any other status: the upgrade was refused. `line`: where the
    /// status line lies in the bytes (without its line end).
    Refused {
        status: u16,
        line: Range<usize>,
        head_len: usize,
    },
}

/// Splits a header line into its name and trimmed value.
fn header(line: &[u8]) -> Result<(&[u8], &[u8]), WsError> {
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(WsError::Http(HttpError::Header))?;
    Ok((&line[..colon], http::trim(&line[colon + 1..])))
}

/// Whether a comma-separated header value holds `token` (any case).
fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| http::trim(t).eq_ignore_ascii_case(token))
}

/// Offset of `part` within `whole` (a subslice of it).
fn offset_in(whole: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - whole.as_ptr() as usize
}

/// The server's answer at the front of `buf`, for the handshake sent with
/// `key`; `Ok(None)` until its head is whole.
pub fn parse_response(buf: &[u8], key: &Key) -> Result<Option<Response>, WsError> {
    let Some(head) = http::parse_response_head(buf, false)? else {
        return Ok(None);
    };
    let mut lines = http::lines(&buf[..head.head_len]);
    let status_line = lines.next().ok_or(WsError::Http(HttpError::StatusLine))?;
    if head.status != 101 {
        let at = offset_in(buf, status_line);
        return Ok(Some(Response::Refused {
            status: head.status,
            line: at..at + status_line.len(),
            head_len: head.head_len,
        }));
    }
    let (mut upgrade, mut connection, mut accepted) = (false, false, false);
    let mut subprotocol = None;
    for line in lines {
        let (name, value) = header(line)?;
        if name.eq_ignore_ascii_case(b"upgrade") {
            upgrade |= has_token(value, b"websocket");
        } else if name.eq_ignore_ascii_case(b"connection") {
            connection |= has_token(value, b"upgrade");
        } else if name.eq_ignore_ascii_case(b"sec-websocket-accept") {
            if value != key.accept() {
                return Err(WsError::BadAccept);
            }
            accepted = true;
        } else if name.eq_ignore_ascii_case(b"sec-websocket-extensions") {
            return Err(WsError::UnaskedExtension);
        } else if name.eq_ignore_ascii_case(b"sec-websocket-protocol") {
            let at = offset_in(buf, value);
            subprotocol = Some(at..at + value.len());
        }
    }
    if !(upgrade && connection) {
        return Err(WsError::NotUpgrade);
    }
    if !accepted {
        return Err(WsError::BadAccept);
    }
    Ok(Some(Response::Upgraded {
        head_len: head.head_len,
        subprotocol,
    }))
}

/// A client's upgrade request, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upgrade {
    /// Bytes of the request head; frames follow.
    pub head_len: usize,
    pub key: Key,
    /// Where the `Sec-WebSocket-Protocol` value (the subprotocols offered)
    /// lies in the bytes, if there is one.
    pub subprotocols: Option<Range<usize>>,
}

/// The upgrade request at the front of `buf`; `Ok(None)` until its head
/// is whole. Errors name what is missing; [`WsError::WrongVersion`] is
/// answered with [`UPGRADE_REQUIRED`], the others with [`BAD_REQUEST`].
pub fn parse_upgrade(buf: &[u8]) -> Result<Option<Upgrade>, WsError> {
    let Some(head) = http::parse_request_head(buf)? else {
        return Ok(None);
    };
    let mut lines = http::lines(&buf[..head.head_len]);
    let request_line = lines.next().ok_or(WsError::Http(HttpError::RequestLine))?;
    if !request_line.starts_with(b"GET ") {
        return Err(WsError::NotGet);
    }
    if !request_line.ends_with(b" HTTP/1.1") {
        return Err(WsError::Http(HttpError::Version));
    }
    let (mut host, mut upgrade, mut connection) = (false, false, false);
    let mut version = None;
    let mut key = None;
    let mut subprotocols = None;
    for line in lines {
        let (name, value) = header(line)?;
        if name.eq_ignore_ascii_case(b"host") {
            host = !value.is_empty();
        } else if name.eq_ignore_ascii_case(b"upgrade") {
            upgrade |= has_token(value, b"websocket");
        } else if name.eq_ignore_ascii_case(b"connection") {
            connection |= has_token(value, b"upgrade");
        } else if name.eq_ignore_ascii_case(b"sec-websocket-version") {
            version = Some(value == b"13");
        } else if name.eq_ignore_ascii_case(b"sec-websocket-key") {
            key = Some(Key::parse(value).ok_or(WsError::BadKey)?);
        } else if name.eq_ignore_ascii_case(b"sec-websocket-protocol") {
            let at = offset_in(buf, value);
            subprotocols = Some(at..at + value.len());
        }
    }
    if !host {
        return Err(WsError::NoHost);
    }
    if !(upgrade && connection) {
        return Err(WsError::NotUpgrade);
    }
    if version != Some(true) {
        return Err(WsError::WrongVersion);
    }
    Ok(Some(Upgrade {
        head_len: head.head_len,
        key: key.ok_or(WsError::BadKey)?,
        subprotocols,
    }))
}

/// Appends the server's `101` for `key`, with the subprotocol it chose.
pub fn encode_accept(key: &Key, subprotocol: Option<&[u8]>, out: &mut Vec<u8>) {
    out.extend_from_slice(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ",
    );
    out.extend_from_slice(&key.accept());
    out.extend_from_slice(b"\r\n");
    if let Some(p) = subprotocol {
        out.extend_from_slice(b"Sec-WebSocket-Protocol: ");
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Decimal digits of `n`.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Appends `n` in decimal.
fn put_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut d = [0u8; 20];
    let mut i = d.len();
    loop {
        i -= 1;
        d[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&d[i..]);
}

/// Appends a push message as a server's (unmasked) text frame: the
/// sequence number, the monotonic and wall-clock send times (ns) in
/// decimal, each followed by a space, then `filler` bytes of `p`. A reader
/// of the line format takes the number at its start
/// ([`crate::push::leading_sequence`]); [`push_stamps`] reads the times.
pub fn encode_push(h: &crate::push::Header, filler: usize, out: &mut Vec<u8>) {
    let len = digits(h.seq) + digits(h.mono_ns) + digits(h.wall_ns) + 3 + filler;
    encode_header(out, true, Opcode::Text, len, None);
    for n in [h.seq, h.mono_ns, h.wall_ns] {
        put_decimal(out, n);
        out.push(b' ');
    }
    out.resize(out.len() + filler, b'p');
}

/// The header of a push message made by [`encode_push`] (its payload):
/// the sequence number and both send times.
pub fn push_stamps(msg: &[u8]) -> Result<crate::push::Header, crate::push::PushError> {
    let mut fields = msg.split(|&b| b == b' ');
    let mut next = || crate::push::leading_sequence(fields.next().unwrap_or_default());
    Ok(crate::push::Header {
        seq: next()?,
        mono_ns: next()?,
        wall_ns: next()?,
    })
}

#[cfg(test)]
mod tests;
