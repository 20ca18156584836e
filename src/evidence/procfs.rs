//! What the watch of a run reads of the kernel and of the server's
//! processes: listeners and their queues, a socket's owners, fds, limits,
//! CPU time, and the buffers the sampler reads into.

use std::collections::BTreeSet;
use std::fs;
use std::net::SocketAddr;

/// A listening TCP socket from /proc/net/tcp{,6}.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listener {
    pub inode: u64,
    /// Connections in its accept queue (the file's rx_queue of a
    /// listener; its room, the backlog, is not in the file).
    pub queued: u64,
    /// Sockets listening on the port (a SO_REUSEPORT group has one per
    /// process or thread): counted by the sampler, 1 elsewhere.
    pub sockets: u64,
}

/// Parses one /proc/net/tcp line of a listener on `port` whose address is
/// `addr` or the wildcard. Addresses are hex in the kernel's byte order.
pub(super) fn listener_of(line: &str, port: u16, addr_hex: &[String]) -> Option<Listener> {
    // (Fields by position, nothing collected: the sampler allocates
    // nothing, see [`Bufs`].)
    let mut f = line.split_whitespace();
    let local = f.nth(1)?;
    if f.nth(1)? != "0A" {
        return None;
    }
    let rx_field = f.next()?;
    let inode = f.nth(4)?;
    let (ip, p) = local.split_once(':')?;
    if u16::from_str_radix(p, 16).ok()? != port {
        return None;
    }
    let wildcard = ip.bytes().all(|b| b == b'0');
    if !wildcard && !addr_hex.iter().any(|a| a.eq_ignore_ascii_case(ip)) {
        return None;
    }
    let (_, rx) = rx_field.split_once(':')?;
    Some(Listener {
        inode: inode.parse().ok()?,
        queued: u64::from_str_radix(rx, 16).ok()?,
        sockets: 1,
    })
}

/// The buffers the server's sampler reads into, kept from one sample to
/// the next. The sampler runs at SCHED_IDLE, and every thread shares one
/// heap (one lock: `sys::one_heap`): a sampler preempted while it holds
/// the allocator's lock stalls any worker that allocates until a busy
/// core lets the sampler run again, for as long as hundreds of ms. Its
/// periodic reads allocate nothing once these have grown to the files'
/// size.
pub(super) struct Bufs {
    path: String,
    pub(super) text: String,
    /// The kernel's socket diagnostics' answer (`diag::listeners`).
    pub(super) net: Vec<u8>,
}

impl Bufs {
    pub(super) fn new() -> Bufs {
        Bufs {
            path: String::with_capacity(64),
            text: String::with_capacity(64 * 1024),
            net: Vec::new(),
        }
    }

    /// Sets the path (no allocation within its capacity).
    pub(super) fn path(&mut self, args: std::fmt::Arguments) -> &str {
        use std::fmt::Write;
        self.path.clear();
        let _ = self.path.write_fmt(args);
        &self.path
    }

    /// Reads the file at `self.path` into `self.text`: at most `most`
    /// bytes, `chunk` at a time, and (`until`) no further than the first
    /// complete line that says to stop. False when it cannot be read.
    ///
    /// A read of /proc/net/tcp makes the kernel format lines until the
    /// read is full, walking the established hash (262,144 buckets on a
    /// small machine) to find them: asked for 64 kB over a few
    /// connections, it walks every bucket. Small chunks stop the walk
    /// soon after the lines wanted (after the listeners, still as far as
    /// the first established socket: the whole table when there is none).
    pub(super) fn read(&mut self, most: usize, chunk: usize, until: impl Fn(&str) -> bool) -> bool {
        use std::io::Read;
        self.text.clear();
        let Ok(mut f) = fs::File::open(&self.path) else {
            return false;
        };
        // SAFETY: only bytes read from the file are appended, and the
        // text is checked to be UTF-8 before it is used as a str.
        let buf = unsafe { self.text.as_mut_vec() };
        let mut scanned = 0;
        while buf.len() < most {
            let room = (most - buf.len())
                .min(buf.capacity() - buf.len())
                .min(chunk);
            if room == 0 {
                break;
            }
            let at = buf.len();
            buf.resize(at + room, 0);
            let n = f.read(&mut buf[at..]).unwrap_or(0);
            buf.truncate(at + n);
            if n == 0 {
                break;
            }
            // Lines completed by this read.
            let done = buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let stop =
                std::str::from_utf8(&buf[scanned..done]).map_or(true, |t| t.lines().any(&until));
            scanned = done;
            if stop {
                break;
            }
        }
        if std::str::from_utf8(buf).is_err() {
            buf.clear();
            return false;
        }
        true
    }
}

/// Datagrams the kernel dropped at the receive buffers of the UDP sockets
/// bound to `target` (the server's; several with SO_REUSEPORT), from the
/// `drops` column of /proc/net/udp{,6}; None when none is bound here.
pub fn udp_socket_drops(target: &SocketAddr) -> Option<u64> {
    let hex = proc_hex(target);
    let mut found = None;
    for f in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(text) = fs::read_to_string(f) else {
            continue;
        };
        for l in text.lines().skip(1) {
            if let Some(d) = udp_drops_of(l, target.port(), &hex) {
                *found.get_or_insert(0) += d;
            }
        }
    }
    found
}

/// The drops of one /proc/net/udp line when its socket is bound to `port`
/// on one of `addr_hex` (or the wildcard) and connected to nothing.
pub(super) fn udp_drops_of(line: &str, port: u16, addr_hex: &[String]) -> Option<u64> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 13 {
        return None;
    }
    let (ip, p) = f[1].split_once(':')?;
    if u16::from_str_radix(p, 16).ok()? != port || !f[2].ends_with(":0000") {
        return None;
    }
    let wildcard = ip.bytes().all(|b| b == b'0');
    if !wildcard && !addr_hex.iter().any(|a| a.eq_ignore_ascii_case(ip)) {
        return None;
    }
    f[12].parse().ok()
}

/// An address as /proc/net/tcp{,6} writes it.
pub(super) fn proc_hex(addr: &SocketAddr) -> Vec<String> {
    match addr {
        SocketAddr::V4(a) => {
            let o = a.ip().octets();
            vec![format!("{:02X}{:02X}{:02X}{:02X}", o[3], o[2], o[1], o[0])]
        }
        SocketAddr::V6(a) => {
            let o = a.ip().octets();
            let words: String = o
                .chunks(4)
                .map(|w| format!("{:02X}{:02X}{:02X}{:02X}", w[3], w[2], w[1], w[0]))
                .collect();
            let mut v = vec![words];
            if let Some(v4) = a.ip().to_ipv4_mapped() {
                v.extend(proc_hex(&SocketAddr::new(v4.into(), a.port())));
            }
            v
        }
    }
}

/// The listeners on `target`'s port, of the first address family that
/// has any (IPv4, then IPv6: the file the sampler counts in), each into
/// `each`; `hex` the target's address as [`proc_hex`] gives it. Asked of
/// the kernel's socket diagnostics, or where they cannot be had read from
/// /proc/net/tcp{,6}. False when there is none.
pub(super) fn each_listener(
    b: &mut Bufs,
    target: &SocketAddr,
    hex: &[String],
    mut each: impl FnMut(Listener),
) -> bool {
    for family in [libc::AF_INET, libc::AF_INET6] {
        let mut any = false;
        let r = super::diag::listeners(family, target.port(), &mut b.net, |ip, l| {
            if super::diag::reaches(ip, target) {
                any = true;
                each(l);
            }
        });
        // (A dump that failed half-way keeps what it gave: the files would
        // give the same listeners twice.)
        if any {
            return true;
        }
        if r.is_err() {
            return each_listener_in_files(b, target, hex, each);
        }
    }
    false
}

/// [`each_listener`] from /proc/net/tcp{,6}.
pub(super) fn each_listener_in_files(
    b: &mut Bufs,
    target: &SocketAddr,
    hex: &[String],
    mut each: impl FnMut(Listener),
) -> bool {
    // Listeners come first: read no further than the first socket that is
    // not one (a run's own connections would make the file long).
    let not_listening = |l: &str| {
        let st = l.split_whitespace().nth(3);
        st.is_some() && st != Some("0A") && st != Some("st")
    };
    for f in ["/proc/net/tcp", "/proc/net/tcp6"] {
        b.path(format_args!("{f}"));
        if !b.read(1 << 20, 512, not_listening) {
            continue;
        }
        let mut any = false;
        for l in b
            .text
            .lines()
            .skip(1)
            .take_while(|l| l.split_whitespace().nth(3) == Some("0A"))
            .filter_map(|l| listener_of(l, target.port(), hex))
        {
            any = true;
            each(l);
        }
        if any {
            return true;
        }
    }
    false
}

/// [`listener`] for the sampler, into its buffers: every listener on the
/// port (one each of a SO_REUSEPORT group's processes): the first's
/// inode, the longest queue, how many.
pub(super) fn listener_into(b: &mut Bufs, target: &SocketAddr, hex: &[String]) -> Option<Listener> {
    let mut found: Option<Listener> = None;
    each_listener(b, target, hex, |l| match found.as_mut() {
        None => found = Some(l),
        Some(f) => {
            f.queued = f.queued.max(l.queued);
            f.sockets += 1;
        }
    });
    found
}

/// The listening socket a connection to `target` reaches, if this host
/// (this network namespace) has it (with a SO_REUSEPORT group's: the
/// first's inode, the longest queue).
pub fn listener(target: &SocketAddr) -> Option<Listener> {
    listener_into(&mut Bufs::new(), target, &proc_hex(target))
}

/// The sockets listening on `target`'s port (one each of a SO_REUSEPORT
/// group's processes or threads).
pub(super) fn listener_inodes(target: &SocketAddr) -> Vec<u64> {
    let mut inodes = Vec::new();
    each_listener(&mut Bufs::new(), target, &proc_hex(target), |l| {
        inodes.push(l.inode)
    });
    inodes
}

/// How many of `inodes` the processes `pids` hold.
pub(super) fn sockets_held(pids: &[i32], inodes: &[u64]) -> u64 {
    let mut held = std::collections::BTreeSet::new();
    for pid in pids {
        let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(link) = fs::read_link(fd.path()) else {
                continue;
            };
            let inode = link
                .to_str()
                .and_then(|l| l.strip_prefix("socket:["))
                .and_then(|l| l.strip_suffix(']'))
                .and_then(|n| n.parse::<u64>().ok());
            if let Some(i) = inode.filter(|i| inodes.contains(i)) {
                held.insert(i);
            }
        }
    }
    held.len() as u64
}

/// The processes holding socket `inode` (several when a listener is
/// shared by fork, as nginx's workers).
pub fn owners(inode: u64) -> Vec<i32> {
    let want = format!("socket:[{inode}]");
    let me = std::process::id() as i32;
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let holds = fds
            .flatten()
            .any(|fd| fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == want.as_str()));
        if holds {
            pids.push(pid);
        }
    }
    pids
}

/// Open fds of a process.
pub(super) fn fd_count(b: &mut Bufs, pid: i32) -> Option<u64> {
    let dir = b.path(format_args!("/proc/{pid}/fd"));
    // Linux 6.2 and later give the count as the directory's size, counted
    // in the kernel; listing the directory makes an entry per fd (about
    // 1 µs each: milliseconds a sample at thousands of connections).
    match fs::metadata(dir) {
        Ok(m) if m.len() > 0 => Some(m.len()),
        _ => Some(fs::read_dir(dir).ok()?.count() as u64),
    }
}

/// A process's soft RLIMIT_NOFILE, from /proc/PID/limits.
pub(super) fn fd_limit(pid: i32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A process's user + system time, seconds.
pub(super) fn cpu_s(pid: i32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) in parentheses.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / clock_ticks())
}

pub(super) fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// The cores a process may run on (Cpus_allowed_list of its status).
pub(super) fn allowed_cores(pid: &str) -> BTreeSet<u32> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let Some(list) = text
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
    else {
        return BTreeSet::new();
    };
    let mut cores = BTreeSet::new();
    for part in list.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
            cores.extend(a..=b);
        }
    }
    cores
}

/// A plain count of a /proc/PID/status text (`Threads`).
pub(super) fn status_count(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .trim()
        .parse()
        .ok()
}

pub(super) fn process_name(pid: i32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The client's user + system time, seconds: process `pid`'s, or (None)
/// this process's and its reaped children's.
pub(super) fn client_cpu_s(pid: Option<i32>) -> f64 {
    match pid {
        Some(p) => cpu_s(p).unwrap_or(0.0),
        None => own_cpu_s(),
    }
}

/// This process and its reaped children's user + system time, seconds.
pub(super) fn own_cpu_s() -> f64 {
    let of = |who| {
        // SAFETY: rusage is plain data; all zeroes is a valid value.
        let mut r: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes only the struct it is given.
        if unsafe { libc::getrusage(who, &mut r) } != 0 {
            return 0.0;
        }
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(r.ru_utime) + tv(r.ru_stime)
    };
    of(libc::RUSAGE_SELF) + of(libc::RUSAGE_CHILDREN)
}
