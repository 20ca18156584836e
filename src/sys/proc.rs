//! Readers for /proc: sysctls, TCP counters, process memory.

use std::fs;

/// A sysctl by its dotted name (`net.core.somaxconn`), as text.
pub fn sysctl(name: &str) -> Option<String> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// A numeric sysctl.
pub fn sysctl_u64(name: &str) -> Option<u64> {
    sysctl(name)?.split_whitespace().next()?.parse().ok()
}

/// Counters of one group (`TcpExt`, `IpExt`) of /proc/net/netstat: the file
/// has a line of names followed by a line of values for each group.
pub fn netstat(group: &str, names: &[&str]) -> Option<Vec<u64>> {
    counters("/proc/net/netstat", group, names)
}

/// Fields of one group of /proc/net/snmp (`Udp`), by name.
pub fn snmp(group: &str, names: &[&str]) -> Option<Vec<u64>> {
    counters("/proc/net/snmp", group, names)
}

/// Fields of one group of a header-line/value-line counter file.
fn counters(path: &str, group: &str, names: &[&str]) -> Option<Vec<u64>> {
    let text = fs::read_to_string(path).ok()?;
    let prefix = format!("{group}:");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    let header: Vec<&str> = lines.next()?.split_whitespace().skip(1).collect();
    let values: Vec<u64> = lines
        .next()?
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    names
        .iter()
        .map(|n| {
            header
                .iter()
                .position(|h| h == n)
                .and_then(|i| values.get(i).copied())
        })
        .collect()
}

/// Datagrams the kernel dropped at a socket's full receive buffer, over
/// UDP (this network namespace): a server reading too slowly.
pub fn udp_rcvbuf_errors() -> Option<u64> {
    snmp("Udp", &["RcvbufErrors"]).map(|v| v[0])
}

/// The kernel's accept-queue counters: (ListenOverflows, ListenDrops).
pub fn listen_counters() -> Option<(u64, u64)> {
    let v = netstat("TcpExt", &["ListenOverflows", "ListenDrops"])?;
    Some((v[0], v[1]))
}

/// TcpExt TCPMemoryPressures: times this namespace's TCP entered memory
/// pressure (net.ipv4.tcp_mem's middle figure passed).
pub fn tcp_memory_pressures() -> Option<u64> {
    Some(netstat("TcpExt", &["TCPMemoryPressures"])?[0])
}

/// Connections connection tracking refused: the `drop`, `early_drop` and
/// `insert_failed` columns of /proc/net/stat/nf_conntrack summed over the
/// CPUs (None when conntrack is not loaded here).
pub fn conntrack_drops() -> Option<u64> {
    conntrack_drops_of(&fs::read_to_string("/proc/net/stat/nf_conntrack").ok()?)
}

fn conntrack_drops_of(text: &str) -> Option<u64> {
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next()?.split_whitespace().collect();
    let cols: Vec<usize> = ["drop", "early_drop", "insert_failed"]
        .iter()
        .filter_map(|name| head.iter().position(|h| h == name))
        .collect();
    if cols.is_empty() {
        return None;
    }
    let mut sum = 0;
    for l in lines {
        let f: Vec<&str> = l.split_whitespace().collect();
        for &c in &cols {
            sum += f.get(c).and_then(|x| u64::from_str_radix(x, 16).ok())?;
        }
    }
    Some(sum)
}

/// A field of /proc/self/status in kB (`VmRSS`, `VmHWM`).
pub fn self_status_kb(field: &str) -> Option<u64> {
    let text = fs::read_to_string("/proc/self/status").ok()?;
    status_kb(&text, field)
}

/// A `kB` field of a /proc/PID/status text.
pub fn status_kb(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Whether this process has a capability in its effective set.
pub fn has_capability(bit: u32) -> bool {
    let Ok(text) = fs::read_to_string("/proc/self/status") else {
        return false;
    };
    text.lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1u64 << bit) != 0)
}

/// CAP_SYS_RESOURCE: needed to raise a hard rlimit.
pub const CAP_SYS_RESOURCE: u32 = 24;
/// CAP_NET_BIND_SERVICE: needed to bind ports below 1024.
pub const CAP_NET_BIND_SERVICE: u32 = 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conntrack_drops_sum_the_refusing_columns_of_every_cpu() {
        let text = "entries clashres found new invalid ignore delete delete_list insert \
                    insert_failed drop early_drop icmp_error\n\
                    00000010 0 0 0 0 0 0 0 0 00000002 00000003 00000001 0\n\
                    00000010 0 0 0 0 0 0 0 0 00000000 0000000a 00000000 0\n";
        assert_eq!(conntrack_drops_of(text), Some(16));
        assert_eq!(conntrack_drops_of("entries searched\n1 2\n"), None);
    }

    #[test]
    fn reads_somaxconn() {
        assert!(sysctl_u64("net.core.somaxconn").is_some_and(|v| v > 0));
    }

    #[test]
    fn reads_listen_counters() {
        assert!(listen_counters().is_some());
    }

    #[test]
    fn status_fields() {
        let text = "Name:\tx\nVmRSS:\t  1234 kB\nVmHWM:\t 99 kB\n";
        assert_eq!(status_kb(text, "VmRSS"), Some(1234));
        assert_eq!(status_kb(text, "VmHWM"), Some(99));
        assert_eq!(status_kb(text, "VmSwap"), None);
        assert!(self_status_kb("VmRSS").is_some());
    }
}
