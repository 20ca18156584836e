//! --proto raw: a given --message (after an optional --first-message when
//! a connection opens); each --marker found in the reply completes the
//! oldest query, or, with no marker, whatever arrives does.

use memchr::memmem::Finder;

use super::{partial, Frame, Status};
use crate::scenario::unescaped;

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
