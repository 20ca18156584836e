//! --proto raw: a given --message (after an optional --first-message when
//! a connection opens); each --marker found in the reply completes the
//! oldest query, or, with no marker, whatever arrives does.

use memchr::memmem::Finder;

use super::{partial, Frame, Status};
use crate::scenario::unescaped;

/// Its --proto value, and its name in the per-query log and in sentences.
pub const NAME: &str = "raw";
/// The queries in a few words, for a report's table.
pub const DESCRIPTION: &str = "raw messages";

/// Bytes per received datagram over UDP: room for a reply twice the
/// message.
pub fn datagram_slot(message: &str) -> usize {
    (message.len() * 2).max(super::DATAGRAM_SLOT)
}

pub struct Raw {
    pub(super) message: Vec<u8>,
    pub(super) first: Option<Vec<u8>>,
    /// Built once: a search's tables are made for its needle (boxed: they
    /// are large).
    pub(super) marker: Option<Box<Finder<'static>>>,
}

impl Raw {
    pub fn new(message: &str, first_message: Option<&str>, marker: Option<&str>) -> Raw {
        Raw {
            message: unescaped(message),
            first: first_message.map(unescaped),
            marker: marker.map(|m| Box::new(Finder::new(&unescaped(m)).into_owned())),
        }
    }

    /// Bytes sent once when a connection opens, before any query.
    pub fn first_message(&self) -> Option<&[u8]> {
        self.first.as_deref()
    }

    /// Appends the message; its key is `n`.
    #[inline]
    pub fn encode(&self, n: u64, out: &mut Vec<u8>) -> u64 {
        out.extend_from_slice(&self.message);
        n
    }

    /// Frames the reply at the front of `buf`: up to and with its marker.
    #[inline]
    pub fn decode(&self, buf: &[u8]) -> Frame {
        match &self.marker {
            Some(m) => {
                let n = m.needle().len();
                match m.find(buf) {
                    Some(at) => Frame::Response {
                        len: at + n,
                        key: None,
                        status: Status::Ok,
                        close: false,
                    },
                    // A marker may start in the last n - 1 bytes: the
                    // ones before them are searched and dropped.
                    None => partial(0, buf.len().saturating_sub(n.saturating_sub(1))),
                }
            }
            // No marker: whatever arrives answers the oldest message.
            None if buf.is_empty() => Frame::Incomplete,
            None => Frame::Response {
                len: buf.len(),
                key: None,
                status: Status::Ok,
                close: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;
    use super::*;

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
}
