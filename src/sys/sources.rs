//! Source addresses: how many a run needs, and which.
//!
//! Linux picks an ephemeral port per (source, destination) pair from
//! net.ipv4.ip_local_port_range inside connect(). Current kernels search the
//! ports of one parity first (the other is left to bind()); once that
//! parity is used up for one pair (half the range on 6.18; bench/RESULTS.md,
//! "the connect() curve"), every connect() walks a long run of used ports
//! and the ramp slows from tens of thousands per second to a few hundred.
//! Kernels differ, so a plan keeps each pair under the knee measured on
//! the host (`throng tune --measure`, [`crate::sys::connect_curve`]), and
//! with none measured under a quarter of the range, safe on either side;
//! it takes more source addresses before the knee: on loopback any 127.0.0.0/8
//! address works without setup; elsewhere only addresses already configured
//! on the interface toward the target.

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use crate::sys::proc;

/// The ephemeral port range (low, high), inclusive.
pub fn port_range() -> (u32, u32) {
    proc::sysctl("net.ipv4.ip_local_port_range")
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|v| v.parse::<u32>().ok());
            Some((it.next()??, it.next()??))
        })
        .filter(|(lo, hi)| lo <= hi)
        .unwrap_or((32768, 60999))
}

/// Ports in the range.
pub fn ports_per_source() -> u64 {
    let (lo, hi) = port_range();
    u64::from(hi - lo + 1)
}

/// Connections one (source, destination) pair should carry at most for
/// connect() to stay fast, out of a range of `ports`: a quarter of it, half
/// of the parity connect() searches first (the measured knee).
pub fn fast_per_pair_of(ports: u64) -> u64 {
    (ports / 4).max(1)
}

/// Connections one pair carries at most on this host: under the knee of
/// the connect() curve measured here (`throng tune --measure`) when one
/// was, for this kernel and port range; otherwise [`fast_per_pair_of`]
/// its range.
pub fn fast_per_pair() -> u64 {
    match crate::sys::connect_curve::stored() {
        Some(c) => c.fast_per_pair(),
        None => fast_per_pair_of(ports_per_source()),
    }
}

/// What [`fast_per_pair`] rests on, in words ("connect() slows sharply
/// past a quarter of the port range").
pub fn per_pair_basis() -> String {
    match crate::sys::connect_curve::stored() {
        Some(c) => c.basis(),
        None => QUARTER.into(),
    }
}

/// The default's reason.
const QUARTER: &str = "connect() slows sharply past a quarter of the port range";

/// Why a pair is kept at `per_pair`, in words for the plan paragraph.
pub fn per_pair_reason(per_pair: u64, ports: u64) -> String {
    match crate::sys::connect_curve::stored() {
        Some(c) => format!(
            "at most {per_pair} connections per (source, destination) pair: {}",
            c.basis()
        ),
        None => format!(
            "at most {per_pair} connections per (source, destination) pair: connect() searches \
             one parity of the {ports}-port range first and slows sharply once about a quarter \
             of the range is in use (`throng tune --measure` measures where on this host)"
        ),
    }
}

/// Expands `IP` or `IP/prefix` into addresses (at most `limit`). For IPv4
/// prefixes up to /30 the network and broadcast addresses are left out.
pub fn expand(spec: &str, limit: usize) -> Result<Vec<IpAddr>, String> {
    let example = "examples: 127.0.0.2, 127.0.0.0/24, 198.18.0.10/31, fd00::10";
    let (ip, prefix) = match spec.split_once('/') {
        Some((ip, p)) => (ip, Some(p)),
        None => (spec, None),
    };
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| format!("'{spec}' is not an IP or IP/prefix; {example}"))?;
    let Some(prefix) = prefix else {
        return Ok(vec![ip]);
    };
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let prefix: u32 = prefix
        .parse()
        .ok()
        .filter(|&p| p <= max)
        .ok_or_else(|| format!("'{spec}': the prefix must be 0..={max}; {example}"))?;
    let host_bits = max - prefix;
    // The prefix's addresses less one (2^128 - 1 for ::/0), so that the
    // count of a /64 and the base of any prefix stay exact.
    let last: u128 = if host_bits == 0 {
        0
    } else {
        u128::MAX >> (128 - host_bits)
    };
    let (skip_ends, n) = match ip {
        IpAddr::V4(_) if host_bits >= 2 => (1, last - 1),
        _ => (0, last.saturating_add(1)),
    };
    let n = n.min(limit as u128);
    let base: u128 = match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)) & !last,
        IpAddr::V6(v6) => u128::from(v6) & !last,
    };
    Ok((0..n)
        .map(|i| match ip {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from((base + skip_ends + i) as u32)),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(base + skip_ends + i)),
        })
        .collect())
}

/// The address the kernel would use as source toward `target`.
pub fn route_source(target: SocketAddr) -> Option<IpAddr> {
    let bind: SocketAddr = match target {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = UdpSocket::bind(bind).ok()?;
    s.connect(target).ok()?;
    Some(s.local_addr().ok()?.ip())
}

/// Every address configured on this host: (interface, address).
pub fn host_addresses() -> Vec<(String, IpAddr)> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: ifa_addr is non-null and points to a sockaddr whose family
        // field says which concrete type it is.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let ip = match family {
            libc::AF_INET => {
                // SAFETY: family AF_INET means a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                // SAFETY: family AF_INET6 means a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
            }
            _ => continue,
        };
        out.push((name, ip));
    }
    // SAFETY: frees the list getifaddrs allocated; no reference outlives it.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// Source addresses chosen for a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePlan {
    /// Addresses to bind, in use order; empty: let the kernel choose.
    pub sources: Vec<IpAddr>,
    /// Why, in a few words, for the preflight paragraph.
    pub why: String,
    /// When the plan falls short: what is missing and the commands that fix it.
    pub shortfall: Option<String>,
}

/// Picks source addresses so that no (source, destination) pair carries
/// more than `per_source` of the `per_target` connections to each target.
/// `slices`: how many segments will share the plan; on loopback, when more
/// than one source is needed, each slice gets its own (a slice takes every
/// N-th source, so fewer sources than slices would stack slices on some).
/// `basis`: why `per_source`, in words ([`per_pair_basis`]).
pub fn plan(
    targets: &[SocketAddr],
    per_target: u64,
    (per_source, basis): (u64, &str),
    slices: u64,
) -> SourcePlan {
    let mut needed = per_target.div_ceil(per_source.max(1)).max(1);
    if needed <= 1 {
        return SourcePlan {
            sources: Vec::new(),
            why: "one source address is enough".into(),
            shortfall: None,
        };
    }
    let all_v4_loopback = targets
        .iter()
        .all(|t| matches!(t.ip(), IpAddr::V4(v4) if v4.is_loopback()));
    if all_v4_loopback {
        // Every slice takes every N-th source: a multiple of the slices
        // gives each the same number, so no slice's pairs go past the knee.
        needed = needed.max(slices).div_ceil(slices.max(1)) * slices.max(1);
        let each = per_target.div_ceil(needed);
        // 127.0.0.1, 127.0.0.2, ...: routed to lo with no setup.
        let sources = (1..=needed)
            .map(|i| {
                IpAddr::V4(Ipv4Addr::from(
                    u32::from(Ipv4Addr::new(127, 0, 0, 0)) + i as u32,
                ))
            })
            .collect();
        return SourcePlan {
            sources,
            why: format!(
                "{needed} loopback addresses, {each} connections each to every target \
                 (under {per_source} per pair: {basis})"
            ),
            shortfall: None,
        };
    }
    // Other targets: the addresses of the interface the route uses.
    let addrs = host_addresses();
    let first = targets[0];
    let route = route_source(first);
    let iface = route.and_then(|r| addrs.iter().find(|(_, a)| *a == r).map(|(n, _)| n.clone()));
    let sources: Vec<IpAddr> = match &iface {
        Some(name) => addrs
            .iter()
            .filter(|(n, a)| n == name && a.is_ipv4() == first.is_ipv4() && !is_link_local(*a))
            .map(|(_, a)| *a)
            .collect(),
        None => Vec::new(),
    };
    let have = sources.len() as u64;
    let each = per_target.div_ceil(have.max(1));
    let shortfall = (have < needed).then(|| {
        let dev = iface.clone().unwrap_or_else(|| "IFACE".into());
        let missing = needed - have;
        let (example, plen) = if first.is_ipv4() {
            ("198.18.0.10", 32)
        } else {
            ("fd00::10", 128)
        };
        format!(
            "{needed} source addresses are needed toward {first} (at most {per_source} \
             connections each: {basis}), but interface {dev} has {have}. Add {missing} more address(es) from the target's \
             network, e.g.: ip addr add {example}/{plen} dev {dev} (one per address), \
             then pass them with --source-ip"
        )
    });
    SourcePlan {
        sources,
        why: format!(
            "addresses of {}, {each} connections each to every target (at most {per_source} \
             per pair: {basis})",
            iface.unwrap_or_else(|| "the route".into())
        ),
        shortfall,
    }
}

fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v6_slash_64_stays_in_its_prefix() {
        // A /64 starts at its own base, not at ::, and counts its own
        // addresses, not 2^128 - 1.
        let got = expand("fd00:1:2:3::10/64", 3).unwrap();
        let want: Vec<IpAddr> = ["fd00:1:2:3::", "fd00:1:2:3::1", "fd00:1:2:3::2"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        assert_eq!(got, want);
        assert_eq!(
            expand("::5/0", 1).unwrap(),
            vec!["::".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(expand("10.1.2.3/32", 9).unwrap().len(), 1);
        assert_eq!(expand("10.1.2.3/31", 9).unwrap().len(), 2);
        assert_eq!(expand("10.1.2.3/30", 9).unwrap().len(), 2);
    }

    #[test]
    fn expands_prefixes() {
        assert_eq!(
            expand("127.0.0.2", 10).unwrap(),
            vec!["127.0.0.2".parse::<IpAddr>().unwrap()]
        );
        let v = expand("127.0.0.0/24", 1000).unwrap();
        assert_eq!(v.len(), 254);
        assert_eq!(v[0], "127.0.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(v[253], "127.0.0.254".parse::<IpAddr>().unwrap());
        assert_eq!(expand("198.18.0.10/31", 10).unwrap().len(), 2);
        assert_eq!(expand("127.0.0.0/8", 5).unwrap().len(), 5);
        assert_eq!(expand("fd00::/120", 1000).unwrap().len(), 256);
        assert!(expand("127.0.0.1/33", 10).unwrap_err().contains("0..=32"));
        assert!(expand("nope", 10).unwrap_err().contains("127.0.0.0/24"));
    }

    #[test]
    fn loopback_plan_adds_addresses() {
        let t = ["127.0.0.1:4242".parse().unwrap()];
        assert!(plan(&t, 1000, (7000, QUARTER), 1).sources.is_empty());
        assert!(plan(&t, 1000, (7000, QUARTER), 8).sources.is_empty());
        let p = plan(&t, 30_000, (7_000, QUARTER), 1);
        assert_eq!(p.sources.len(), 5);
        assert_eq!(p.sources[2], "127.0.0.3".parse::<IpAddr>().unwrap());
        assert!(p.shortfall.is_none());
        assert!(p.why.contains("6000 connections each"), "{}", p.why);
    }

    #[test]
    fn a_pair_stays_under_a_quarter_of_the_range() {
        // connect() searches one parity first: half of it is a quarter.
        assert_eq!(fast_per_pair_of(28_232), 7_058);
        assert_eq!(fast_per_pair_of(64_512), 16_128);
        assert_eq!(fast_per_pair_of(3), 1);
        // 100,000 connections at the stock range: 15 pairs of 6,667.
        let t = ["127.0.0.1:4242".parse().unwrap()];
        let p = plan(&t, 100_000, (fast_per_pair_of(28_232), QUARTER), 1);
        assert_eq!(p.sources.len(), 15);
        assert!(100_000u64.div_ceil(15) <= 7_058);
    }

    #[test]
    fn every_slice_gets_the_same_number_of_sources() {
        let t = ["127.0.0.1:4242".parse().unwrap()];
        // 15 needed, 6 processes: 18, three each, none past the knee.
        let p = plan(&t, 100_000, (7_058, QUARTER), 6);
        assert_eq!(p.sources.len(), 18);
        assert_eq!(
            plan(&t, 1_000_000, (16_128, QUARTER), 51).sources.len(),
            102
        );
        assert_eq!(plan(&t, 20_000, (7_058, QUARTER), 8).sources.len(), 8);
    }

    #[test]
    fn reads_port_range_and_host_addresses() {
        let (lo, hi) = port_range();
        assert!(lo <= hi);
        assert!(host_addresses()
            .iter()
            .any(|(_, a)| *a == IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert_eq!(
            route_source("127.0.0.1:9".parse().unwrap()),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
    }
}
