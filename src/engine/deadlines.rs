//! When the queries in flight time out, earliest first: one entry per
//! connection with queries in flight, at or before the deadline of its
//! oldest one (answers leave it in place; when it comes due, the worker
//! times out what is overdue and sets it again at the oldest deadline
//! left). A doubly linked list over a slab, kept in order by inserting from
//! the back (deadlines added are nearly always the latest), so memory
//! follows the connections with queries in flight and an answer costs
//! nothing here. (A queue of every query's deadline, kept until the
//! deadline passes, would hold 180 MB at 2M answers/s and a 5 s timeout.)

use slab::Slab;

const NIL: u32 = u32::MAX;
/// Slabs with room for fewer (40 kB) are left as they are.
const COMPACT_ABOVE: usize = 1024;

/// Whose deadline: a connection (slab key and attempt number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub conn: usize,
    pub seq: u64,
}

#[derive(Debug)]
struct Node {
    prev: u32,
    next: u32,
    at: u64,
    entry: Entry,
}

#[derive(Debug)]
pub struct Deadlines {
    nodes: Slab<Node>,
    head: u32,
    tail: u32,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            nodes: Slab::new(),
            head: NIL,
            tail: NIL,
        }
    }
}

impl Deadlines {
    /// Adds a deadline; returns its id for [`Deadlines::remove`]. Kept in
    /// order when `at` is earlier than the last one added (a connection set
    /// again at its oldest query's deadline, a query of tcp-per-query that
    /// counts from its connect): the walk back from the end is short.
    pub fn push(&mut self, at: u64, entry: Entry) -> u32 {
        let mut after = self.tail;
        while after != NIL && self.nodes[after as usize].at > at {
            after = self.nodes[after as usize].prev;
        }
        let next = if after == NIL {
            self.head
        } else {
            self.nodes[after as usize].next
        };
        let id = self.nodes.insert(Node {
            prev: after,
            next,
            at,
            entry,
        }) as u32;
        assert!(id != NIL, "more deadlines than u32 can number");
        match after {
            NIL => self.head = id,
            a => self.nodes[a as usize].next = id,
        }
        match next {
            NIL => self.tail = id,
            n => self.nodes[n as usize].prev = id,
        }
        id
    }

    /// Takes a deadline out (its connection went away or is set again).
    pub fn remove(&mut self, id: u32) -> Entry {
        let node = self.nodes.remove(id as usize);
        match node.prev {
            NIL => self.head = node.next,
            p => self.nodes[p as usize].next = node.next,
        }
        match node.next {
            NIL => self.tail = node.prev,
            n => self.nodes[n as usize].prev = node.prev,
        }
        node.entry
    }

    /// Once a second: after a burst in flight (a server that stalls for
    /// 300 ms leaves 3,000 connections of a worker waiting), the slab
    /// holds room for the burst, most of it vacant, and would keep it for
    /// good (a stall's peak left in the client's memory). Far emptier than
    /// its room, it is made again in deadline order, the room twice what
    /// is held: every deadline gets a new id, told to `rekey` (its entry,
    /// its new id).
    pub fn compact(&mut self, mut rekey: impl FnMut(Entry, u32)) {
        let (len, room) = (self.nodes.len(), self.nodes.capacity());
        if room < COMPACT_ABOVE || len * 4 > room {
            return;
        }
        let mut nodes = Slab::with_capacity((len * 2).max(64));
        let mut prev = NIL;
        let mut at = self.head;
        while at != NIL {
            let node = &self.nodes[at as usize];
            let id = nodes.insert(Node {
                prev,
                next: NIL,
                at: node.at,
                entry: node.entry,
            }) as u32;
            if prev != NIL {
                nodes[prev as usize].next = id;
            }
            rekey(node.entry, id);
            prev = id;
            at = node.next;
        }
        self.head = if nodes.is_empty() { NIL } else { 0 };
        self.tail = prev;
        self.nodes = nodes;
    }

    /// The earliest deadline.
    pub fn first(&self) -> Option<(u64, Entry)> {
        (self.head != NIL).then(|| {
            let n = &self.nodes[self.head as usize];
            (n.at, n.entry)
        })
    }

    /// Takes the earliest deadline if it is at or before `now`.
    pub fn pop_due(&mut self, now: u64) -> Option<Entry> {
        match self.first() {
            Some((at, _)) if at <= now => Some(self.remove(self.head)),
            _ => None,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.nodes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(conn: usize) -> Entry {
        Entry { conn, seq: 7 }
    }

    fn drain(d: &mut Deadlines) -> Vec<usize> {
        std::iter::from_fn(|| d.pop_due(u64::MAX).map(|e| e.conn)).collect()
    }

    #[test]
    fn earliest_first_and_removal_anywhere() {
        let mut d = Deadlines::default();
        let ids: Vec<u32> = (0..6).map(|c| d.push(100 + c as u64, e(c))).collect();
        assert_eq!(d.first(), Some((100, e(0))));
        // Middle, front and back leave in O(1); the order of the rest holds.
        assert_eq!(d.remove(ids[2]), e(2));
        assert_eq!(d.remove(ids[0]), e(0));
        assert_eq!(d.remove(ids[5]), e(5));
        assert_eq!(d.len(), 3);
        assert_eq!(d.pop_due(100), None, "nothing is due before 101");
        assert_eq!(d.pop_due(101), Some(e(1)));
        assert_eq!(drain(&mut d), vec![3, 4]);
        assert_eq!(d.len(), 0);
        assert_eq!(d.first(), None);
        // Emptied, it works again from scratch.
        d.push(5, e(9));
        assert_eq!(drain(&mut d), vec![9]);
    }

    #[test]
    fn an_earlier_deadline_added_late_takes_its_place() {
        let mut d = Deadlines::default();
        d.push(10, e(0));
        d.push(30, e(1));
        d.push(20, e(2));
        d.push(5, e(3));
        d.push(30, e(4));
        assert_eq!(drain(&mut d), vec![3, 0, 2, 1, 4]);
    }

    #[test]
    fn memory_follows_what_is_in_flight() {
        let mut d = Deadlines::default();
        // A million deadlines, at most 16 set at once.
        let mut live = std::collections::VecDeque::new();
        for q in 0..1_000_000u64 {
            live.push_back(d.push(q, e(q as usize)));
            if live.len() > 16 {
                d.remove(live.pop_front().unwrap());
            }
        }
        assert_eq!(d.len(), 16);
        assert!(d.nodes.capacity() < 64, "{}", d.nodes.capacity());
    }

    #[test]
    fn a_burst_gives_its_room_back_and_the_order_holds() {
        let mut d = Deadlines::default();
        // 5,000 set at once (out of order at the end), then all but 7 go.
        let mut ids: Vec<u32> = (0..5000).map(|c| d.push(1000 + c as u64, e(c))).collect();
        ids.push(d.push(10, e(5000)));
        ids.push(d.push(1500, e(5001)));
        for c in (0..5000).filter(|c| c % 1000 != 999) {
            d.remove(ids[c]);
        }
        assert_eq!(d.len(), 7);
        assert!(d.nodes.capacity() >= 5000);
        let mut moved = vec![];
        d.compact(|entry, id| moved.push((entry.conn, id)));
        assert!(d.nodes.capacity() < 100, "{}", d.nodes.capacity());
        // Every deadline was told its new id, in deadline order.
        let conns: Vec<usize> = moved.iter().map(|m| m.0).collect();
        assert_eq!(conns, [5000, 5001, 999, 1999, 2999, 3999, 4999]);
        // The new ids are the ones to remove by.
        assert_eq!(d.remove(moved[2].1), e(999));
        assert_eq!(d.remove(moved[0].1), e(5000));
        // (1999's deadline is 2999, 2999's 3999.)
        d.push(3000, e(1));
        assert_eq!(drain(&mut d), vec![5001, 1999, 1, 2999, 3999, 4999]);
        // Emptied, it compacts to nothing and works again.
        d.compact(|_, _| unreachable!("nothing to move"));
        d.push(5, e(3));
        assert_eq!(drain(&mut d), vec![3]);
    }

    #[test]
    fn a_slab_in_use_is_left_alone() {
        let mut d = Deadlines::default();
        let ids: Vec<u32> = (0..2048).map(|c| d.push(c as u64, e(c))).collect();
        for &id in &ids[..1000] {
            d.remove(id);
        }
        let room = d.nodes.capacity();
        d.compact(|_, _| panic!("not far emptier than its room"));
        assert_eq!(d.nodes.capacity(), room);
        assert_eq!(d.first(), Some((1000, e(1000))));
    }
}
