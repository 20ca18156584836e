//! How a process of a group hands new connections to its siblings
//! ([`Handoff`]): when a full member of --processes N closes its
//! listeners, when an elastic member asks for the next process and says it
//! is full. Its acceptor asks it after each accept and close; it only
//! counts and sends words to the main thread.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};
use std::sync::mpsc;

use crate::sys::fd_handoff::FdHandoff;
use crate::sys::signals::Reason;

/// How a process of a group hands new connections to its siblings. Of
/// `--processes N`, a full process closes its listeners so that the kernel
/// sends new connections to the others. In an elastic group the parent
/// steers the port's new connections to one member at a time; a member
/// says when it is 11/16 full (start the next, to wait ready) and 13/16
/// full (steer to the next). It keeps its listeners (closing would
/// renumber the group); what its queues still bring past its fds it sends
/// through the group's [`FdHandoff`] to a member with room, and sheds, as a
/// lone server does, only what the channel cannot take.
pub struct Handoff {
    /// A full process closes its listeners.
    pub may_close: bool,
    /// Open connections at which the group should start another process.
    pub grow_at: AtomicI64,
    grow_sent: AtomicBool,
    /// Open and queued connections at which the next process should take
    /// over.
    full_at: AtomicI64,
    full_sent: AtomicBool,
    /// Open connections under which a member that said it was full may
    /// take new connections again (see [`Handoff::rearm`]).
    rearm_at: AtomicI64,
    /// Listeners of this process on a port (one per worker): what one
    /// accept queue holds, times this, is about what all of them hold.
    queues: AtomicI64,
    /// Where "this process is filling" goes (the main thread's wait).
    notify: Option<mpsc::Sender<Reason>>,
    /// An elastic group's channel, while another member may read it.
    channel: Option<FdHandoff>,
    pass: AtomicBool,
}

impl Handoff {
    /// A member whose siblings are all listening already (--processes N).
    pub fn ready() -> Handoff {
        Handoff {
            may_close: true,
            grow_at: AtomicI64::new(i64::MAX),
            grow_sent: AtomicBool::new(false),
            full_at: AtomicI64::new(i64::MAX),
            full_sent: AtomicBool::new(false),
            rearm_at: AtomicI64::new(0),
            queues: AtomicI64::new(1),
            notify: None,
            channel: None,
            pass: AtomicBool::new(false),
        }
    }

    /// A member of an elastic group: it says when it fills up, and passes
    /// what it cannot hold through `channel`.
    pub fn elastic(notify: mpsc::Sender<Reason>, channel: Option<FdHandoff>) -> Handoff {
        Handoff {
            may_close: false,
            notify: Some(notify),
            pass: AtomicBool::new(channel.is_some()),
            channel,
            ..Handoff::ready()
        }
    }

    /// The group is this process alone for good: nothing would read what
    /// it passes, so it sheds instead.
    pub fn no_siblings(&self) {
        self.grow_at.store(i64::MAX, Relaxed);
        self.pass.store(false, Relaxed);
    }

    /// The channel to send a connection this process cannot hold through.
    pub(super) fn channel_out(&self) -> Option<&FdHandoff> {
        self.channel.as_ref().filter(|_| self.pass.load(Relaxed))
    }

    /// The channel to watch for connections to take.
    pub(super) fn channel_in(&self) -> Option<&FdHandoff> {
        self.channel.as_ref()
    }

    /// This process may take a connection from the channel with `open`
    /// connections: not yet full (13/16; the rest is room for its own
    /// queues).
    pub(super) fn has_room(&self, open: i64) -> bool {
        !self.full_sent.load(Relaxed) && open < self.full_at.load(Relaxed)
    }

    /// Sets when an elastic member asks for the next process (11/16 full,
    /// open or waiting in its accept queues; under a connect storm the
    /// parent starts it sooner) and when it hands over (13/16: room for
    /// what the hand-over still brings, tens of milliseconds when a storm
    /// of processes starves the parent of CPU: some 2,500 connections at
    /// 35k/s).
    pub fn arm(&self, max_open: i64, queues: usize) {
        if self.notify.is_some() {
            self.grow_at.store(max_open / 16 * 11, Relaxed);
            self.full_at.store(max_open / 16 * 13, Relaxed);
            self.rearm_at.store(max_open / 2, Relaxed);
            self.queues.store(queues.max(1) as i64, Relaxed);
        }
    }

    /// After a close, `open` connections now. A member that said it was
    /// full and has emptied below half its cap (connections that end:
    /// churn) may be steered to again: it says so (the parent steers back
    /// only once it hears it), and says again when it fills.
    pub(super) fn closed(&self, open: i64) {
        let Some(tx) = &self.notify else {
            return;
        };
        if open < self.rearm_at.load(Relaxed)
            && self.full_sent.load(Relaxed)
            && self
                .full_sent
                .compare_exchange(true, false, Relaxed, Relaxed)
                .is_ok()
        {
            self.grow_sent.store(false, Relaxed);
            let _ = tx.send(Reason::Room);
        }
    }

    /// A member of an elastic group (not one of --processes N).
    pub fn is_elastic(&self) -> bool {
        self.notify.is_some()
    }

    /// After an accept: `open` connections now, `queued` what one accept
    /// queue holds (asked every 32 accepts from the first: under a connect
    /// storm the queues hold thousands that count as taken, before the
    /// workers have accepted many).
    pub(super) fn opened(&self, open: i64, queued: impl FnOnce() -> i64) {
        let Some(tx) = &self.notify else {
            return;
        };
        let grow_at = self.grow_at.load(Relaxed);
        if self.full_sent.load(Relaxed) {
            return;
        }
        let taken = if open % 32 == 0 {
            open + queued() * self.queues.load(Relaxed)
        } else {
            open
        };
        if taken >= grow_at && !self.grow_sent.swap(true, Relaxed) {
            let _ = tx.send(Reason::Grow);
        }
        if taken >= self.full_at.load(Relaxed) && !self.full_sent.swap(true, Relaxed) {
            let _ = tx.send(Reason::Full);
        }
    }
}
