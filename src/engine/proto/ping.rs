//! --proto ping: `ping <seq>` lines answered `pong <seq>` (throng server
//! --mode pong); an answer is matched by its sequence number, and any
//! other line (`error`) answers the oldest query as a mismatch.

use super::{Frame, Resume, Status};

/// Its --proto value, and its name in the per-query log and in sentences.
pub const NAME: &str = "ping";
/// The queries in a few words, for a report's table.
pub const DESCRIPTION: &str = "ping lines";

pub struct Ping;

impl Ping {
    /// Appends line `n`; its key is `n`.
    #[inline]
    pub fn encode(&self, n: u64, out: &mut Vec<u8>) -> u64 {
        wire::line::build_ping(n, out);
        n
    }

    /// Frames the line at the front of `buf`, searching on from where
    /// `resume` says the last search stopped.
    #[inline]
    pub fn decode(&self, buf: &[u8], resume: &mut Resume) -> Frame {
        let from = resume.search_from(buf);
        let Some(len) = wire::line::find_line(&buf[from..]).map(|n| from + n) else {
            resume.searched(buf.len());
            return if buf.len() > 64 * 1024 {
                Frame::Oversized
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
}

#[cfg(test)]
mod tests {
    use super::super::tests::*;
    use super::super::*;
    use super::*;

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
}
