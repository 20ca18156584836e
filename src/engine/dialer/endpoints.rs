//! Where each connection attempt goes and from where: the targets in
//! turn, and for each target the source addresses of its family in turn
//! (none: the kernel chooses), so every (source, target) pair carries an
//! equal share.

use std::net::{IpAddr, SocketAddr};

use crate::metrics::SOURCE_SLOTS;

pub(super) struct Endpoints {
    /// The source addresses of each family, in use order.
    v4: Vec<IpAddr>,
    v6: Vec<IpAddr>,
    targets: Vec<SocketAddr>,
}

impl Endpoints {
    pub(super) fn new(targets: &[SocketAddr], sources: &[IpAddr]) -> Endpoints {
        Endpoints {
            v4: sources.iter().filter(|a| a.is_ipv4()).copied().collect(),
            v6: sources.iter().filter(|a| a.is_ipv6()).copied().collect(),
            targets: targets.to_vec(),
        }
    }

    /// The tally slot of attempt `i`'s source ([`crate::metrics::source_order`]),
    /// when it has one of the first [`SOURCE_SLOTS`].
    pub(super) fn source_slot(&self, i: u64) -> Option<usize> {
        let t = self.targets.len() as u64;
        let v4 = self.targets[(i % t) as usize].is_ipv4();
        let family = if v4 { self.v4.len() } else { self.v6.len() };
        if family == 0 {
            return None;
        }
        let idx = ((i / t) % family as u64) as usize;
        let slot = if v4 { idx } else { self.v4.len() + idx };
        (slot < SOURCE_SLOTS).then_some(slot)
    }

    /// The target and source address of attempt `i`.
    pub(super) fn for_attempt(&self, i: u64) -> (SocketAddr, Option<IpAddr>) {
        let t = self.targets.len() as u64;
        let target = self.targets[(i % t) as usize];
        let family = if target.is_ipv4() { &self.v4 } else { &self.v6 };
        let source = (!family.is_empty()).then(|| family[((i / t) % family.len() as u64) as usize]);
        (target, source)
    }
}
