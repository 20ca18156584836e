//! A worker's spare output buffers: a connection holds an output buffer
//! only while it has bytes to write; an emptied one goes back here and is
//! lent to the next connection that queues a message, so a message costs
//! no allocation and an idle connection holds no buffer.

/// The most spare output buffers a worker keeps, and the largest it
/// keeps: enough for the connections that write in one loop turn of an
/// open-loop run, at most 4 MiB a worker.
const SPARES: usize = 1024;
const SPARE_BYTES: usize = 4 * 1024;

/// A worker's spare output buffers: given back by connections that went
/// idle, lent to the next one that queues a message, so a message costs
/// no allocation and an idle connection holds no buffer.
#[derive(Default)]
pub(super) struct BufferPool {
    bufs: Vec<Vec<u8>>,
    /// The fewest the pool held since the last [`BufferPool::trim`].
    low: usize,
}

impl BufferPool {
    /// Once a second: half the spares that no connection took in that
    /// second go. Without it the pool drifts up to its bound under churn
    /// (more given back than taken in one second, fewer in the next), and
    /// the client's memory creeps for minutes; with it the pool follows
    /// what the traffic takes. (The list itself keeps its room, at most
    /// 24 KiB: shrunk to another size every second, its old blocks would
    /// fill the allocator's per-thread cache size by size, see
    /// `metrics::text_capacity`.)
    pub(super) fn trim(&mut self) {
        let unused = self.low.min(self.bufs.len());
        self.bufs.truncate(self.bufs.len() - unused / 2);
        self.low = self.bufs.len();
    }
}

/// Gives a connection about to queue a message a spare output buffer if
/// it has none.
#[inline]
pub(super) fn lend(out: &mut Vec<u8>, spare: &mut BufferPool) {
    if out.capacity() == 0 {
        *out = spare.bufs.pop().unwrap_or_else(|| Vec::with_capacity(512));
        spare.low = spare.low.min(spare.bufs.len());
    }
}

/// Keeps an emptied output buffer for the next connection that writes,
/// unless there are enough spares already or it grew large.
pub(super) fn give_back(mut buf: Vec<u8>, spare: &mut BufferPool) {
    if spare.bufs.len() < SPARES && buf.capacity() <= SPARE_BYTES {
        buf.clear();
        spare.bufs.push(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_connections_buffer_is_lent_to_the_next_writer() {
        let mut spare = BufferPool::default();
        let mut a = Vec::new();
        lend(&mut a, &mut spare);
        a.extend_from_slice(b"query");
        let at = a.as_ptr();
        give_back(std::mem::take(&mut a), &mut spare);
        assert_eq!(a.capacity(), 0, "the idle connection holds nothing");
        let mut b = Vec::new();
        lend(&mut b, &mut spare);
        assert_eq!((b.as_ptr(), b.len()), (at, 0), "the same buffer, empty");
        assert!(spare.bufs.is_empty());
        // A connection that has a buffer keeps it.
        let mut c = Vec::with_capacity(8);
        let kept = c.as_ptr();
        lend(&mut c, &mut spare);
        assert_eq!(c.as_ptr(), kept);
    }

    #[test]
    fn spares_are_bounded_in_number_and_size() {
        let mut spare = BufferPool::default();
        give_back(Vec::with_capacity(SPARE_BYTES + 1), &mut spare);
        assert!(spare.bufs.is_empty(), "a buffer that grew large is freed");
        for _ in 0..SPARES + 10 {
            give_back(Vec::with_capacity(64), &mut spare);
        }
        assert_eq!(spare.bufs.len(), SPARES);
    }

    #[test]
    fn spares_nobody_takes_are_let_go() {
        let mut spare = BufferPool::default();
        for _ in 0..100 {
            give_back(Vec::with_capacity(64), &mut spare);
        }
        spare.trim();
        // A second in which 30 are taken: 70 were not, half of them go.
        let mut taken: Vec<Vec<u8>> = (0..30)
            .map(|_| {
                let mut b = Vec::new();
                lend(&mut b, &mut spare);
                b
            })
            .collect();
        for b in taken.drain(..) {
            give_back(b, &mut spare);
        }
        spare.trim();
        assert_eq!(spare.bufs.len(), 100 - 35);
        // Seconds without a taker empty it.
        for _ in 0..20 {
            spare.trim();
        }
        assert!(spare.bufs.len() <= 1, "{}", spare.bufs.len());
    }
}
