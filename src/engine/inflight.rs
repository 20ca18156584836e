//! A connection's queries between due and done: those sent and waiting
//! for their answers (in send order), those due but not sent yet (a full
//! window or a busy socket), and the connection's one entry in the
//! worker's deadlines. A query alone in flight allocates nothing: the
//! table keeps one in place and allocates from the second; open loop
//! frees that table when it empties, a closed loop keeps it for its next
//! window.

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
    /// Of a query already timed out: counted then, absorbed now (its
    /// latency still recorded, apart).
    Late(Outstanding),
    /// Of no query sent on this connection.
    Unmatched,
}

/// The queries sent and waiting for their answers, in send order. One
/// is kept in place: a query that is the only one in flight (the common
/// case of a connection among many) allocates nothing, so a burst of them
/// (a server that stalls for 100 ms holds thousands) does not scatter
/// blocks over the client's heap that outlive it. (Boxed beyond one, the
/// table stays 32 bytes, the size of a `VecDeque`.)
#[derive(Debug)]
enum Table {
    Empty,
    One(Outstanding),
    // Boxed so the table is 32 bytes, not 40 (every Conn holds one).
    #[allow(clippy::box_collection)]
    Many(Box<VecDeque<Outstanding>>),
}

impl Table {
    #[inline]
    fn slices(&self) -> (&[Outstanding], &[Outstanding]) {
        match self {
            Table::Empty => (&[], &[]),
            Table::One(o) => (std::slice::from_ref(o), &[]),
            Table::Many(q) => q.as_slices(),
        }
    }

    #[inline]
    fn iter(&self) -> impl Iterator<Item = &Outstanding> {
        let (a, b) = self.slices();
        a.iter().chain(b)
    }

    #[inline]
    fn push_back(&mut self, o: Outstanding) {
        match self {
            Table::Empty => *self = Table::One(o),
            Table::One(first) => {
                let mut q = VecDeque::with_capacity(4);
                q.push_back(*first);
                q.push_back(o);
                *self = Table::Many(Box::new(q));
            }
            Table::Many(q) => q.push_back(o),
        }
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        match self {
            Table::Many(q) => q.capacity(),
            _ => 0,
        }
    }
}

#[derive(Debug)]
pub struct Flight {
    /// Queries sent on this connection (their numbers; counted by
    /// [`Flight::sent`]).
    pub queries: u64,
    /// Queries answered or timed out (timed-out ones stay in the table
    /// until their late answer, which is then absorbed).
    pub done: u64,
    /// Its entry in the worker's deadlines (or NO_DEADLINE): set whenever
    /// a query is in flight, at or before the oldest one's deadline. (A
    /// plain u32: an Option would add 8 bytes to every connection.)
    pub deadline: u32,
    /// How many timed-out queries lead the table. Timeouts take the oldest
    /// live query and new ones join at the back, so the timed-out ones are
    /// always its first entries: a timeout, the oldest live query and an
    /// in-order answer are found at this index, not by a walk past them
    /// (a connection a server stalls on holds thousands; a walk per
    /// timeout would make their timing out quadratic).
    stale: u32,
    outstanding: Table,
    /// Intended times of due queries not sent yet (window full or socket
    /// busy): they keep their place and their intended time.
    pub waiting: VecDeque<u64>,
}

impl Default for Flight {
    fn default() -> Self {
        Flight {
            queries: 0,
            done: 0,
            deadline: NO_DEADLINE,
            stale: 0,
            outstanding: Table::Empty,
            waiting: VecDeque::new(),
        }
    }
}

impl Flight {
    /// Queries sent and neither answered nor timed out (from the counts:
    /// asked for several times an answer, it reads no table).
    #[inline]
    pub fn live(&self) -> u64 {
        self.queries - self.done
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

    /// A query went out (the next number: `queries` before it).
    #[inline]
    pub fn sent(&mut self, o: Outstanding) {
        self.queries += 1;
        self.outstanding.push_back(o);
    }

    /// An answer came for `qkey` (None: for the oldest query). A matched
    /// query is done.
    #[inline]
    pub fn answer(&mut self, qkey: Option<u64>) -> Answer {
        let mine = |o: &Outstanding| qkey.is_none_or(|k| o.key == k);
        // (One look at the table's kind: this runs for every answer.)
        let found = match &mut self.outstanding {
            Table::Empty => None,
            Table::One(o) if mine(o) => {
                let o = *o;
                self.outstanding = Table::Empty;
                Some(o)
            }
            Table::One(_) => None,
            // Answers mostly come in order: the oldest leaves from the
            // front. Otherwise a key is looked for among the live ones
            // first, from the oldest (past those timed out), then among
            // those timed out: a timed-out query whose key came round
            // again (DNS's 16 bits) is not the one answered.
            // (With timed-out queries in front, a key is looked for among
            // the live ones first even when the front has it.)
            Table::Many(q) => match q.front().map(mine) {
                Some(true) if self.stale == 0 || qkey.is_none() => q.pop_front(),
                Some(_) => {
                    let stale = self.stale as usize;
                    let live = q.range(stale..).position(mine).map(|i| i + stale);
                    live.or_else(|| q.range(..stale).position(mine))
                        .and_then(|i| q.remove(i))
                }
                None => None,
            },
        };
        let Some(o) = found else {
            return Answer::Unmatched;
        };
        if o.timed_out {
            self.stale -= 1;
            return Answer::Late(o);
        }
        self.done += 1;
        Answer::Matched(o)
    }

    /// Frees an emptied table of many. Open loop calls it on every answer
    /// that empties one: more than one query in flight on a connection is
    /// a burst there (a server that stalled), and the tables a burst made
    /// go back together, as they came, so the allocator can give their
    /// pages back (kept until their connections close, they would be
    /// scattered among newer blocks and hold them). A closed loop keeps
    /// its tables: they fill again at once (freed and made again with
    /// every window's worth of answers, they would cost a quarter more
    /// work an answer).
    pub fn release(&mut self) {
        if matches!(&self.outstanding, Table::Many(q) if q.is_empty()) {
            self.outstanding = Table::Empty;
        }
    }

    /// Times out the oldest live query if it was sent `timeout_ns` or more
    /// before `now_ns`; it stays in the table, so a late answer is known.
    pub fn time_out_oldest(&mut self, now_ns: u64, timeout_ns: u64) -> Option<Outstanding> {
        let o = self
            .oldest_live_mut()
            .filter(|o| o.sent + timeout_ns <= now_ns)?;
        o.timed_out = true;
        let o = *o;
        self.stale += 1;
        self.done += 1;
        Some(o)
    }

    /// The oldest live query: the first past those timed out.
    #[inline]
    fn oldest_live_mut(&mut self) -> Option<&mut Outstanding> {
        match &mut self.outstanding {
            Table::Empty => None,
            Table::One(o) => (self.stale == 0).then_some(o),
            Table::Many(q) => q.get_mut(self.stale as usize),
        }
    }

    /// When the oldest live query was sent.
    pub fn oldest_sent(&self) -> Option<u64> {
        self.outstanding
            .iter()
            .nth(self.stale as usize)
            .map(|o| o.sent)
    }

    /// Intended times of the live queries (those whose answers a server's
    /// close cut off).
    pub fn live_intended(&self) -> impl Iterator<Item = u64> + '_ {
        self.outstanding
            .iter()
            .skip(self.stale as usize)
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
        assert!(matches!(f.answer(Some(0)), Answer::Late(_)));
        assert_eq!((f.live(), f.done), (1, 1));
        assert_eq!(f.answer(Some(1)), Answer::Matched(q(1, 50)));
        assert_eq!(f.oldest_sent(), None);
    }

    /// Timed-out queries lead the table: thousands of them (a server that
    /// stalled) cost each timeout and each in-order answer one look, a
    /// late answer leaves wherever it is, and a key that came round again
    /// is the live query's.
    #[test]
    fn timed_out_queries_are_a_prefix_counted_not_walked() {
        let mut f = Flight::default();
        let n = 10_000;
        for k in 0..n {
            f.sent(q(k, k));
        }
        for k in 0..n - 2 {
            let o = f.time_out_oldest(k + 100, 100).expect("overdue");
            assert_eq!(o.key, k);
        }
        assert_eq!(f.stale, (n - 2) as u32);
        assert_eq!(f.oldest_sent(), Some(n - 2));
        assert_eq!(f.live_intended().collect::<Vec<_>>(), [n - 2, n - 1]);
        // A late answer from the middle of those timed out.
        assert!(matches!(f.answer(Some(500)), Answer::Late(_)));
        assert_eq!(f.stale, (n - 3) as u32);
        // The live ones, by key and in order.
        assert_eq!(f.answer(Some(n - 1)), Answer::Matched(q(n - 1, n - 1)));
        assert_eq!(f.answer(Some(n - 2)), Answer::Matched(q(n - 2, n - 2)));
        assert_eq!(f.live(), 0);
        // Key 7 again, live, while the old 7 is still timed out in the
        // table: the answer is the live one's.
        f.sent(q(7, 20_000));
        assert_eq!(f.answer(Some(7)), Answer::Matched(q(7, 20_000)));
        assert!(matches!(f.answer(Some(7)), Answer::Late(_)));
        assert_eq!(f.stale, (n - 4) as u32);
        // The same at the front: key 0, timed out there, live again.
        f.sent(q(0, 30_000));
        assert_eq!(f.answer(Some(0)), Answer::Matched(q(0, 30_000)));
        assert_eq!(f.stale, (n - 4) as u32);
        // In-order protocols: the oldest entry, timed out, absorbs the
        // next answer.
        assert!(matches!(f.answer(None), Answer::Late(_)));
        assert_eq!(f.stale, (n - 5) as u32);
        assert_eq!(f.oldest_sent(), None);
    }

    #[test]
    fn one_query_in_flight_allocates_nothing() {
        let mut f = Flight::default();
        f.sent(q(0, 0));
        assert_eq!(f.outstanding.capacity(), 0, "one is kept in place");
        assert_eq!(f.oldest_sent(), Some(0));
        assert_eq!(f.answer(Some(0)), Answer::Matched(q(0, 0)));
        assert!(f.idle());
        // A second makes a table of many, in send order, answers matched
        // out of order too.
        for k in 1..4 {
            f.sent(q(k, k));
        }
        assert!(f.outstanding.capacity() >= 3);
        assert_eq!(f.answer(Some(2)), Answer::Matched(q(2, 2)));
        assert_eq!(f.live_intended().collect::<Vec<_>>(), [1, 3]);
        assert_eq!(f.answer(None), Answer::Matched(q(1, 1)));
        assert_eq!(f.answer(Some(3)), Answer::Matched(q(3, 3)));
        assert_eq!(f.answer(None), Answer::Unmatched);
        assert!(f.idle());
    }

    #[test]
    fn a_lone_query_times_out_and_absorbs_its_late_answer() {
        let mut f = Flight::default();
        f.sent(q(5, 0));
        assert_eq!(
            f.answer(Some(6)),
            Answer::Unmatched,
            "another key is not it"
        );
        assert!(f.time_out_oldest(100, 100).is_some());
        assert_eq!((f.live(), f.done), (0, 1));
        assert_eq!(f.oldest_sent(), None);
        assert!(matches!(f.answer(Some(5)), Answer::Late(_)));
        assert_eq!(f.answer(None), Answer::Unmatched);
    }

    #[test]
    fn the_table_is_the_size_of_a_deque() {
        assert_eq!(
            std::mem::size_of::<Table>(),
            std::mem::size_of::<VecDeque<Outstanding>>()
        );
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
    fn an_emptied_table_holds_no_buffer() {
        let mut f = Flight::default();
        for k in 0..64 {
            f.sent(q(k, 0));
        }
        while f.live() > 1 {
            f.answer(None);
        }
        f.release();
        assert!(f.outstanding.capacity() > 0, "kept while queries are in it");
        f.answer(None);
        assert!(f.outstanding.capacity() > 0, "kept until released");
        f.release();
        assert_eq!(f.outstanding.capacity(), 0);
        assert!(matches!(f.outstanding, Table::Empty));
    }
}
