//! Server push messages: what `throng server --mode push` sends each client
//! every period, and what `throng client --proto push` reads back.
//!
//! Every message is one header and a payload; the same bytes go in a TCP
//! stream (framed by the length) and in a UDP datagram (one message each).
//! All integers are big-endian:
//!
//! ```text
//! offset  size  field
//!      0     4  magic "THRP"
//!      4     4  length of the whole message, header included (>= 32)
//!      8     8  sequence number: per client, from 0 at its subscription
//!     16     8  server's send time, monotonic clock (ns; CLOCK_MONOTONIC)
//!     24     8  server's send time, wall clock (ns since the Unix epoch)
//!     32     -  payload (length - 32 bytes; its content carries no meaning)
//! ```
//!
//! A client on the server's host compares the monotonic stamp with its own
//! clock (one-way delay without trusting the wall clock); elsewhere only
//! the wall stamp can serve, and only as well as the clocks agree.
//!
//! The line format (`--push-format line`) is for servers that are not
//! throng: one message per line, the sequence number in decimal at its
//! start (`17 anything\n`), no timestamps.

use thiserror::Error;

/// The first four bytes of every message.
pub const MAGIC: [u8; 4] = *b"THRP";
/// Bytes of the header: the smallest message.
pub const HEADER: usize = 32;
/// The longest message a reader accepts (a longer length is an error, not
/// a wait: a peer could otherwise make a reader buffer without bound).
pub const MAX_MESSAGE: usize = 1 << 20;
/// The longest line the line format accepts, its `\n` included.
pub const MAX_LINE: usize = 64 * 1024;

/// A message's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub seq: u64,
    pub mono_ns: u64,
    pub wall_ns: u64,
}

/// Bytes that are not push messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PushError {
    #[error("not a push message (no THRP magic)")]
    BadMagic,
    #[error("push message length {0} is below the 32-byte header")]
    TooShort(u32),
    #[error("push message length {0} is above the 1 MiB limit")]
    TooLong(u32),
    #[error("push line without a sequence number at its start")]
    NoSequence,
    #[error("push line longer than 64 KiB")]
    LineTooLong,
}

/// Appends one message of `HEADER + payload` bytes. The payload is filler
/// (its bytes are `b'p'`); `out` is the caller's, reused.
pub fn encode(h: &Header, payload: usize, out: &mut Vec<u8>) {
    let len = u32::try_from(HEADER + payload).unwrap_or(u32::MAX);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&h.seq.to_be_bytes());
    out.extend_from_slice(&h.mono_ns.to_be_bytes());
    out.extend_from_slice(&h.wall_ns.to_be_bytes());
    out.resize(out.len() + payload, b'p');
}

/// Writes a new sequence number and send times into a message built by
/// [`encode`] (the server keeps one message and restamps it per client).
pub fn restamp(msg: &mut [u8], h: &Header) {
    if msg.len() >= HEADER {
        msg[8..16].copy_from_slice(&h.seq.to_be_bytes());
        msg[16..24].copy_from_slice(&h.mono_ns.to_be_bytes());
        msg[24..32].copy_from_slice(&h.wall_ns.to_be_bytes());
    }
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// The message at the front of `buf`: its header and length, `Ok(None)`
/// when it is not whole yet.
pub fn decode(buf: &[u8]) -> Result<Option<(Header, usize)>, PushError> {
    let have = buf.len().min(4);
    if buf[..have] != MAGIC[..have] {
        return Err(PushError::BadMagic);
    }
    if buf.len() < 8 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
    if (len as usize) < HEADER {
        return Err(PushError::TooShort(len));
    }
    if len as usize > MAX_MESSAGE {
        return Err(PushError::TooLong(len));
    }
    if buf.len() < len as usize {
        return Ok(None);
    }
    let h = Header {
        seq: be64(&buf[8..]),
        mono_ns: be64(&buf[16..]),
        wall_ns: be64(&buf[24..]),
    };
    Ok(Some((h, len as usize)))
}

/// One datagram: exactly one whole message (a datagram cut short, or with
/// bytes past its length, is not one).
pub fn decode_datagram(d: &[u8]) -> Result<Header, PushError> {
    match decode(d)? {
        Some((h, len)) if len == d.len() => Ok(h),
        Some((_, len)) => Err(PushError::TooShort(len as u32)),
        None => Err(PushError::TooShort(d.len() as u32)),
    }
}

/// The line at the front of `buf` in the line format: its sequence number
/// and length (`\n` included); `Ok(None)` when the line is not whole yet.
pub fn decode_line(buf: &[u8]) -> Result<Option<(u64, usize)>, PushError> {
    let Some(end) = buf.iter().take(MAX_LINE).position(|&b| b == b'\n') else {
        return if buf.len() >= MAX_LINE {
            Err(PushError::LineTooLong)
        } else {
            Ok(None)
        };
    };
    Ok(Some((leading_sequence(&buf[..end])?, end + 1)))
}

/// The decimal sequence number at the start of a message of the line
/// format (a line without its `\n`, or a whole WebSocket message).
pub fn leading_sequence(msg: &[u8]) -> Result<u64, PushError> {
    let digits = msg.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 20 {
        return Err(PushError::NoSequence);
    }
    msg[..digits]
        .iter()
        .try_fold(0u64, |acc, &d| {
            acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
        .ok_or(PushError::NoSequence)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header(seq: u64) -> Header {
        Header {
            seq,
            mono_ns: 1_000_000_007 * seq + 3,
            wall_ns: 1_790_000_000_000_000_000 + seq,
        }
    }

    #[test]
    fn round_trip_and_layout() {
        let mut out = Vec::new();
        encode(&header(7), 160, &mut out);
        assert_eq!(out.len(), HEADER + 160);
        assert_eq!(&out[..4], b"THRP");
        assert_eq!(&out[4..8], &192u32.to_be_bytes());
        assert_eq!(&out[8..16], &7u64.to_be_bytes());
        assert!(out[HEADER..].iter().all(|&b| b == b'p'));
        assert_eq!(decode(&out), Ok(Some((header(7), 192))));
        assert_eq!(decode_datagram(&out), Ok(header(7)));
    }

    #[test]
    fn restamp_changes_only_the_header() {
        let mut out = Vec::new();
        encode(&header(0), 10, &mut out);
        restamp(&mut out, &header(99));
        assert_eq!(decode(&out), Ok(Some((header(99), HEADER + 10))));
    }

    #[test]
    fn a_stream_splits_at_every_point() {
        let mut stream = Vec::new();
        for seq in 0..3 {
            encode(&header(seq), seq as usize * 5, &mut stream);
        }
        for split in 0..=stream.len() {
            let mut pending = Vec::new();
            let mut got = Vec::new();
            for part in [&stream[..split], &stream[split..]] {
                pending.extend_from_slice(part);
                while let Some((h, n)) = decode(&pending).unwrap() {
                    got.push(h.seq);
                    pending.drain(..n);
                }
            }
            assert_eq!(got, [0, 1, 2], "split at {split}");
            assert!(pending.is_empty());
        }
    }

    #[test]
    fn bad_input_is_named() {
        assert_eq!(decode(b"HTTP/1.1"), Err(PushError::BadMagic));
        assert_eq!(decode(b"TH"), Ok(None));
        assert_eq!(decode(b"THX"), Err(PushError::BadMagic));
        assert_eq!(decode(b"THRP\0\0\0\x10"), Err(PushError::TooShort(16)));
        assert_eq!(
            decode(b"THRP\xff\0\0\0"),
            Err(PushError::TooLong(0xff00_0000))
        );
        let mut d = Vec::new();
        encode(&header(1), 8, &mut d);
        assert!(decode_datagram(&d[..d.len() - 1]).is_err());
        d.push(0);
        assert!(decode_datagram(&d).is_err());
    }

    #[test]
    fn lines_carry_their_sequence_first() {
        assert_eq!(decode_line(b"17 tick\nrest"), Ok(Some((17, 8))));
        assert_eq!(decode_line(b"0\n"), Ok(Some((0, 2))));
        assert_eq!(decode_line(b"42\r\n"), Ok(Some((42, 4))));
        assert_eq!(decode_line(b"12"), Ok(None));
        assert_eq!(decode_line(b"tick 3\n"), Err(PushError::NoSequence));
        assert_eq!(
            decode_line(b"99999999999999999999999\n"),
            Err(PushError::NoSequence)
        );
        assert_eq!(decode_line(&[b'1'; MAX_LINE]), Err(PushError::LineTooLong));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&bytes);
            let _ = decode_datagram(&bytes);
            let _ = decode_line(&bytes);
            let mut framed = MAGIC.to_vec();
            framed.extend_from_slice(&bytes);
            if let Ok(Some((_, n))) = decode(&framed) {
                prop_assert!(n <= framed.len() && n >= HEADER);
            }
        }

        #[test]
        fn any_header_round_trips(seq: u64, mono: u64, wall: u64, payload in 0usize..512) {
            let h = Header { seq, mono_ns: mono, wall_ns: wall };
            let mut out = Vec::new();
            encode(&h, payload, &mut out);
            prop_assert_eq!(decode(&out), Ok(Some((h, HEADER + payload))));
        }
    }
}
