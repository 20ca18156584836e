//! A connection's queries between due and done: those sent and waiting
//! for their answers (in send order), those due but not sent yet (a full
//! window or a busy socket), and the connection's one entry in the
//! worker's deadlines. Idle, it holds no buffer.

use std::collections::VecDeque;

/// A query waiting for its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outstanding {
    pub key: u64,
    pub intended: u64,
    pub sent: u64,
    pub timed_out: bool,
    /// DNS: the slot of the query's type, where its RCODE is counted
    /// (fits in the padding: the entry stays 32 bytes).
    pub qtype_slot: u8,
}

/// `Flight::deadline` when it has none.
pub const NO_DEADLINE: u32 = u32::MAX;

/// What an answer was to the connection's queries.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// The answer of this query (which has left the table).
    Matched(Outstanding),
    /// Of a query already timed out: counted then, absorbed now.
    Late,
    /// Of no query sent on this connection.
    Unmatched,
}

#[derive(Debug)]
pub struct Flight {
    /// Queries encoded on this connection (their numbers).
    pub queries: u64,
    /// Queries answered or timed out.
    pub done: u64,
    /// Timed-out queries still in `outstanding` (a late answer is absorbed).
    ghosts: u32,
    /// Its entry in the worker's deadlines (or NO_DEADLINE): set whenever
    /// a query is in flight, at or before the oldest one's deadline. (A
    /// plain u32: an Option would add 8 bytes to every connection.)
    pub deadline: u32,
    outstanding: VecDeque<Outstanding>,
    /// Intended times of due queries not sent yet (window full or socket
    /// busy): they keep their place and their intended time.
    pub waiting: VecDeque<u64>,
}

impl Default for Flight {
    fn default() -> Self {
        Flight {
            queries: 0,
            done: 0,
            ghosts: 0,
            deadline: NO_DEADLINE,
            outstanding: VecDeque::new(),
            waiting: VecDeque::new(),
        }
    }
}

impl Flight {
    /// Queries sent and neither answered nor timed out.
    #[inline]
    pub fn live(&self) -> u64 {
        self.outstanding.len() as u64 - u64::from(self.ghosts)
    }

    /// Nothing in flight and nothing waiting to be sent.
    pub fn idle(&self) -> bool {
        self.live() == 0 && self.waiting.is_empty()
    }

    /// Takes its deadline entry's id, leaving none.
    pub fn take_deadline(&mut self) -> Option<u32> {
        let id = std::mem::replace(&mut self.deadline, NO_DEADLINE);
        (id != NO_DEADLINE).then_some(id)
    }

    /// A query went out.
    #[inline]
    pub fn sent(&mut self, o: Outstanding) {
        self.outstanding.push_back(o);
    }

    /// An answer came for `qkey` (None: for the oldest query). A matched
    /// query is done.
    #[inline]
    pub fn answer(&mut self, qkey: Option<u64>) -> Answer {
        let idx = match qkey {
            Some(k) => self.outstanding.iter().position(|o| o.key == k),
            None => (!self.outstanding.is_empty()).then_some(0),
        };
        // Answers mostly come in order: the oldest leaves from the front.
        let Some(o) = idx.and_then(|i| match i {
            0 => self.outstanding.pop_front(),
            i => self.outstanding.remove(i),
        }) else {
            return Answer::Unmatched;
        };
        if o.timed_out {
            self.ghosts -= 1;
            return Answer::Late;
        }
        self.done += 1;
        Answer::Matched(o)
    }

    /// Frees the table's memory once nothing is in it (connections that
    /// query now and then hold no buffer between their queries).
    pub fn release(&mut self) {
        if self.outstanding.is_empty() {
            self.outstanding = VecDeque::new();
        }
    }

    /// Times out the oldest live query if it was sent `timeout_ns` or more
    /// before `now_ns`; it stays in the table, so a late answer is known.
    pub fn time_out_oldest(&mut self, now_ns: u64, timeout_ns: u64) -> Option<Outstanding> {
        let o = self
            .outstanding
            .iter_mut()
            .find(|o| !o.timed_out)
            .filter(|o| o.sent + timeout_ns <= now_ns)?;
        o.timed_out = true;
        self.ghosts += 1;
        self.done += 1;
        Some(*o)
    }

    /// When the oldest live query was sent.
    pub fn oldest_sent(&self) -> Option<u64> {
        self.outstanding
            .iter()
            .find(|o| !o.timed_out)
            .map(|o| o.sent)
    }

    /// Intended times of the live queries (those whose answers a server's
    /// close cut off).
    pub fn live_intended(&self) -> impl Iterator<Item = u64> + '_ {
        self.outstanding
            .iter()
            .filter(|o| !o.timed_out)
            .map(|o| o.intended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(key: u64, sent: u64) -> Outstanding {
        Outstanding {
            key,
            intended: sent,
            sent,
            timed_out: false,
            qtype_slot: 0,
        }
    }

    #[test]
    fn answers_match_by_key_or_oldest() {
        let mut f = Flight::default();
        for k in 0..3 {
            f.sent(q(k, k * 10));
        }
        assert_eq!(f.live(), 3);
        assert_eq!(f.answer(Some(1)), Answer::Matched(q(1, 10)));
        assert_eq!(f.answer(None), Answer::Matched(q(0, 0)));
        assert_eq!(f.answer(Some(7)), Answer::Unmatched);
        assert_eq!((f.live(), f.done), (1, 2));
        assert_eq!(f.answer(None), Answer::Matched(q(2, 20)));
        assert_eq!(f.answer(None), Answer::Unmatched);
        assert!(f.idle());
    }

    #[test]
    fn timed_out_queries_stay_until_their_late_answer() {
        let mut f = Flight::default();
        f.sent(q(0, 0));
        f.sent(q(1, 50));
        assert_eq!(f.time_out_oldest(99, 100), None);
        let gone = f.time_out_oldest(100, 100).expect("overdue");
        assert!(gone.timed_out && gone.key == 0);
        assert_eq!(f.time_out_oldest(100, 100), None, "the next is not due");
        assert_eq!((f.live(), f.done), (1, 1));
        assert_eq!(f.oldest_sent(), Some(50));
        assert_eq!(f.live_intended().collect::<Vec<_>>(), [50]);
        // The late answer is absorbed, not counted twice.
        assert_eq!(f.answer(Some(0)), Answer::Late);
        assert_eq!((f.live(), f.done), (1, 1));
        assert_eq!(f.answer(Some(1)), Answer::Matched(q(1, 50)));
        assert_eq!(f.oldest_sent(), None);
    }

    #[test]
    fn deadline_is_taken_once() {
        let mut f = Flight::default();
        assert_eq!(f.take_deadline(), None);
        f.deadline = 4;
        assert_eq!(f.take_deadline(), Some(4));
        assert_eq!(f.take_deadline(), None);
    }

    #[test]
    fn release_frees_only_an_empty_table() {
        let mut f = Flight::default();
        for k in 0..64 {
            f.sent(q(k, 0));
        }
        f.release();
        assert_eq!(f.live(), 64);
        while f.answer(None) != Answer::Unmatched {}
        assert!(f.outstanding.capacity() > 0);
        f.release();
        assert_eq!(f.outstanding.capacity(), 0);
    }
}
