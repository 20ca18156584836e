//! --proto echo: messages of --size bytes (a magic, the sequence number,
//! the send time, a pattern made from the sequence) that the server sends
//! back; an answer is matched by its sequence number and, with
//! --validate, checked byte by byte.

use super::{Frame, Status, INPUT_CAP};
use crate::scenario::ECHO_HEADER;

/// Its --proto value, and its name in the per-query log and in sentences.
pub const NAME: &str = "echo";

/// The queries in a few words, for a report's table.
pub fn describe(size: usize) -> String {
    format!("echo, {size} bytes")
}

/// Bytes per received datagram over UDP: a whole echoed message.
pub fn datagram_slot(size: usize) -> usize {
    size.max(super::DATAGRAM_SLOT)
}

const MAGIC: [u8; 4] = *b"THRG";

pub struct Echo {
    pub size: usize,
    pub validate: bool,
}

impl Echo {
    /// An echo message longer than [`INPUT_CAP`] is kept whole.
    pub fn input_cap(&self) -> usize {
        INPUT_CAP.max(self.size)
    }

    /// Appends message `n`, sent at `t_ns`; its key is `n`.
    #[inline]
    pub fn encode(&self, n: u64, t_ns: u64, out: &mut Vec<u8>) -> u64 {
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(&t_ns.to_be_bytes());
        // The pattern counts up by one from a start that depends on
        // the sequence: copied from a table, not made byte by byte.
        let mut i = ECHO_HEADER;
        while i < self.size {
            let start = usize::from(pattern(n, i));
            let take = (self.size - i).min(256);
            out.extend_from_slice(&RAMP[start..start + take]);
            i += take;
        }
        n
    }

    /// Frames the message at the front of `buf`.
    #[inline]
    pub fn decode(&self, buf: &[u8]) -> Frame {
        let size = self.size;
        if buf.len() < size {
            // Check the magic early: a stream that is not ours
            // should not wait for a whole message to be rejected.
            let n = buf.len().min(4);
            if buf[..n] != MAGIC[..n] {
                return Frame::Malformed;
            }
            return Frame::Incomplete;
        }
        if buf[..4] != MAGIC {
            return Frame::Malformed;
        }
        let seq = u64::from_be_bytes(buf[4..12].try_into().expect("8 bytes"));
        let intact = !self.validate
            || buf[ECHO_HEADER..size]
                .iter()
                .enumerate()
                .all(|(i, &b)| b == pattern(seq, i + ECHO_HEADER));
        Frame::Response {
            len: size,
            key: Some(seq),
            status: if intact { Status::Ok } else { Status::Mismatch },
            close: false,
        }
    }
}

/// The deterministic byte at offset `i` of echo message `seq`.
pub(super) fn pattern(seq: u64, i: usize) -> u8 {
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
    use super::super::tests::*;
    use super::super::*;
    use super::*;

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
}
