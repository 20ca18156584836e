//! What the machine says about a run, read while it runs: the client's own
//! CPU (its process tree), and, when the target is on this host, the
//! server's listening socket and the process that owns it (its fds
//! against its limit, its CPU, the cores it may use) and the kernel's
//! accept-queue counters. The client's hints name a cause only from what
//! this module saw; it reads /proc and never changes anything.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::sys::proc;
use crate::verdict::Code;

mod diag;
mod procfs;
use procfs::*;
pub use procfs::{listener, owners, udp_socket_drops, Listener};

/// The client's CPU over its run (`client` in the result).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClientCpu {
    /// User + system time of the client's processes (its children of
    /// --processes included), seconds.
    pub cpu_s: f64,
    /// The cores it may run on (its CPU affinity).
    pub cores: u64,
    /// Wall time the CPU was measured over, seconds.
    pub wall_s: f64,
    /// cpu_s as a share of wall_s times cores: 100 is every core busy.
    pub cpu_pct: f64,
    /// CPU per answered query, µs (0 without answers).
    pub cpu_us_per_answer: f64,
    /// The server (a process of this host) may run on some of the same
    /// cores: the two competed for them.
    #[serde(default)]
    pub shares_cores_with_server: bool,
    /// When it does: the client's and the server's CPU together, as a
    /// share of those cores over the run.
    #[serde(default)]
    pub with_server_pct: f64,
}

impl ClientCpu {
    /// Sets the share and the cost per answer from the parts.
    pub fn derive(&mut self, answered: u64) {
        let room = self.wall_s * self.cores.max(1) as f64;
        self.cpu_pct = if room > 0.0 {
            100.0 * self.cpu_s / room
        } else {
            0.0
        };
        self.cpu_us_per_answer = if answered > 0 {
            self.cpu_s * 1e6 / answered as f64
        } else {
            0.0
        };
    }

    /// Adds another host's or process's (a merge): CPU and cores summed,
    /// the longest wall time.
    pub fn merge(&mut self, o: &ClientCpu) {
        self.cpu_s += o.cpu_s;
        self.cores += o.cores;
        self.wall_s = self.wall_s.max(o.wall_s);
        self.shares_cores_with_server |= o.shares_cores_with_server;
        self.with_server_pct = self.with_server_pct.max(o.with_server_pct);
    }
}

/// What was seen of a server on this host (`server_seen` in the result).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerSeen {
    /// The process that owns the listening socket (the one holding the
    /// most fds when several share it: nginx's workers).
    pub pid: i32,
    pub name: String,
    /// The most fds it held at once while it was watched, and its limit
    /// (RLIMIT_NOFILE, soft).
    pub fds_max: u64,
    pub fd_limit: u64,
    /// Its user + system time over the run, seconds.
    pub cpu_s: f64,
    /// The listening socket's accept queue (connections the kernel
    /// completed and the process has not taken): the longest it was seen.
    pub accept_queue_max: u64,
    /// The deepest the accept queue stayed over two looks in a row (a
    /// quarter second apart): connections left queued, not a ramp's
    /// passing ones.
    #[serde(default)]
    pub accept_queue_steady: u64,
    /// The kernel's TcpExt counters' growth over the run (this network
    /// namespace, every listener in it).
    pub listen_overflows: u64,
    pub listen_drops: u64,
    /// UDP datagrams the kernel dropped at a full receive buffer over the
    /// run (this network namespace, every UDP socket in it).
    #[serde(default)]
    pub udp_rcvbuf_errors: u64,
    /// Of those, the ones dropped at the server's own socket(s) (the
    /// rest were at other sockets of this namespace: the client's).
    #[serde(default)]
    pub udp_socket_drops: u64,
    /// The server's processes' resident memory, summed: the most seen.
    #[serde(default)]
    pub rss_max_bytes: u64,
    /// Their threads, summed: the most seen (the cores its CPU can fill).
    #[serde(default)]
    pub threads: u64,
    /// Times TCP entered memory pressure over the run (TcpExt
    /// TCPMemoryPressures, this network namespace): sockets' buffers
    /// passed net.ipv4.tcp_mem.
    #[serde(default)]
    pub tcp_memory_pressures: u64,
    /// Connections connection tracking dropped or could not insert over
    /// the run (its table full: net.netfilter.nf_conntrack_max); 0 where
    /// conntrack is not loaded.
    #[serde(default)]
    pub conntrack_drops: u64,
    /// Sockets listening on the port, the most seen at once: more than
    /// the watched process holds is a SO_REUSEPORT group of processes,
    /// each with its own.
    #[serde(default)]
    pub listeners: u64,
    /// Of those, the ones the watched process held when the watch began
    /// (a lone server's one per worker thread): more listening than these
    /// are other processes'.
    #[serde(default)]
    pub listeners_watched: u64,
}

impl ServerSeen {
    /// It held (nearly) all the fds it may: it cannot accept more. "Nearly"
    /// leaves room for the few a server keeps back (a throng server stops
    /// taking connections with 6-8 fds left, for its own files; an
    /// accepting loop may close a spare fd to refuse one): 1/64 of the
    /// limit, at least 8.
    fn at_fd_limit(&self) -> bool {
        self.fd_limit > 0 && self.fds_max + (self.fd_limit / 64).max(8) >= self.fd_limit
    }

    /// Other processes listen on the port too (a SO_REUSEPORT group).
    fn in_group(&self) -> bool {
        self.listeners > self.listeners_watched.max(1)
    }

    /// It held (nearly) all the fds it may, and no other process listens
    /// on the port: the server cannot accept more.
    pub fn out_of_fds(&self) -> bool {
        self.at_fd_limit() && !self.in_group()
    }

    /// It held (nearly) all the fds it may, one of several processes
    /// listening on the port (SO_REUSEPORT): the others may have room (a
    /// throng server's group hands new connections to the next process
    /// when one fills), so that is a cause only when nothing else is.
    fn one_of_group_out_of_fds(&self) -> Option<String> {
        (self.at_fd_limit() && self.in_group()).then(|| {
            format!(
                "the server's process ({}, pid {}), one of {} sockets listening on the port \
                 (SO_REUSEPORT), held {} fds of its {}: it cannot accept more, though the \
                 group's other processes may (raise the fd limit, or run more processes)",
                self.name, self.pid, self.listeners, self.fds_max, self.fd_limit
            )
        })
    }

    /// Connections stayed in its accept queue, untaken, none overflowing:
    /// it serves a fixed number at once.
    pub fn slots_full(&self) -> bool {
        self.accept_queue_steady >= SLOTS_QUEUED && !self.queue_full()
    }

    /// The kernel counted accept-queue overflows.
    pub fn queue_full(&self) -> bool {
        self.listen_overflows > 0
    }

    /// The cause this evidence shows for `never` connections that were
    /// never accepted or answered, in words; None when it shows none.
    pub fn cause(&self, never: u64) -> Option<String> {
        self.named(never).map(|(_, words)| words)
    }

    /// [`ServerSeen::cause`] with its code.
    pub fn named(&self, never: u64) -> Option<(Code, String)> {
        let who = format!("the server's process ({}, pid {})", self.name, self.pid);
        if self.out_of_fds() {
            return Some((
                Code::FdLimit,
                format!(
                    "{who} held {} fds of its {}: it cannot accept more (raise its fd limit: \
                 LimitNOFILE= for a systemd unit, worker_rlimit_nofile for nginx, ulimit -n)",
                    self.fds_max, self.fd_limit
                ),
            ));
        }
        if self.conntrack_drops > 0 {
            return Some((
                Code::ConntrackFull,
                format!(
                    "connection tracking on this host dropped {} connection(s): its table is full \
                 (raise net.netfilter.nf_conntrack_max, or exempt the test's traffic with a \
                 `notrack` rule)",
                    self.conntrack_drops
                ),
            ));
        }
        // (Connections waiting in the queue at the end of the ramp are
        // the ones it never took.)
        let held_back = self.accept_queue_max > 0 && self.accept_queue_max >= never;
        if self.queue_full() || held_back {
            let queue = format!(
                "{who} did not take the connections the kernel completed for it: its accept \
                 queue held up to {} connections and the kernel counted {} overflow(s) \
                 (ListenOverflows). It is too busy to accept, or stopped accepting (stopped, \
                 or at a connection limit of its own, such as nginx's worker_connections); a \
                 larger backlog only delays this",
                self.accept_queue_max, self.listen_overflows
            );
            // Fewer overflows than failures, from one of a group that
            // filled: the rest is the group's fds (its members close what
            // none of them has room for).
            let part = !held_back && self.listen_overflows < never;
            return Some(match self.one_of_group_out_of_fds().filter(|_| part) {
                Some(group) => (
                    Code::FdLimit,
                    format!(
                        "{group}. The accept queue's {} overflow(s) are only part of the {never}: \
                     {queue}",
                        self.listen_overflows
                    ),
                ),
                // Queued, none overflowed: it took a fixed number.
                None if !self.queue_full() => (Code::SlotsFull, queue),
                None => (Code::AcceptQueueFull, queue),
            });
        }
        self.one_of_group_out_of_fds().map(|w| (Code::FdLimit, w))
    }

    /// What it saw, in a line for the summary.
    pub fn line(&self) -> String {
        format!(
            "{} (pid {}): {} fds of its {} at most, accept queue up to {}, {} listen \
             overflow(s), CPU {:.2} s",
            self.name,
            self.pid,
            self.fds_max,
            self.fd_limit,
            self.accept_queue_max,
            self.listen_overflows,
            self.cpu_s
        )
    }
}

/// Connections left in a server's accept queue, never taken, past which
/// a failing step's server is named as serving a fixed number at once (a
/// ramp's passing queue is a few, and gone by the next look).
pub const SLOTS_QUEUED: u64 = 8;

/// The step a server was watched over, for [`ServerSeen::limit_cause`].
pub struct During {
    pub wall_s: f64,
    /// This host's cores.
    pub cores: f64,
    /// Connections the server closed in it.
    pub peer_closed: u64,
    /// When the client ran on some of the server's cores: its CPU over the
    /// step, as a share of its cores, %.
    pub client_sharing_pct: Option<f64>,
}

impl ServerSeen {
    /// Its CPU over `d` as a share of one core, %.
    fn cpu_pct(&self, d: &During) -> f64 {
        100.0 * self.cpu_s / d.wall_s.max(1e-3)
    }

    /// Why the server stopped keeping up in a step of `throng limit`, in
    /// one sentence, from what was seen (its fds, the kernel's tables and
    /// queues, its closes, its CPU); None when nothing seen explains it.
    pub fn limit_cause(&self, d: &During) -> Option<String> {
        self.limit_named(d).map(|(_, words)| words)
    }

    /// [`ServerSeen::limit_cause`] with its code.
    pub fn limit_named(&self, d: &During) -> Option<(Code, String)> {
        let (name, pid) = (&self.name, self.pid);
        let (fds, limit) = (self.fds_max, self.fd_limit);
        let pct = self.cpu_pct(d);
        let cores = d.cores.max(1.0);
        Some(if self.out_of_fds() {
            (
                Code::FdLimit,
                format!("{name} (pid {pid}) held {fds} fds of its {limit}: its fd limit"),
            )
        } else if self.conntrack_drops > 0 {
            (
                Code::ConntrackFull,
                format!(
                    "connection tracking dropped {} connection(s): its table is full \
                 (net.netfilter.nf_conntrack_max), on this host, not in {name}",
                    self.conntrack_drops
                ),
            )
        } else if self.tcp_memory_pressures > 0 {
            (
                Code::TcpMemory,
                format!(
                    "TCP entered memory pressure {} time(s): the sockets' buffers passed \
                 net.ipv4.tcp_mem on this host, which then shrinks them and drops data",
                    self.tcp_memory_pressures
                ),
            )
        } else if self.queue_full() {
            (
                Code::AcceptQueueFull,
                format!(
                    "ListenOverflows +{}: the accept queue overflowed, {name} accepts too slowly",
                    self.listen_overflows
                ),
            )
        } else if self.slots_full() {
            (
                Code::SlotsFull,
                format!(
                    "{name} left up to {} connections in its accept queue, never taken (none \
                     overflowed) while it held {fds} fds of its {limit} and {pct:.0}% of a \
                     core: it serves a fixed number of connections at once (its slots, workers \
                     or threads) and queues the rest, unserved",
                    self.accept_queue_max
                ),
            )
        } else if self.udp_socket_drops > 0 {
            // Not busy on a core, yet behind its socket: it waited for one,
            // the client's among them.
            let waited = d
                .client_sharing_pct
                .filter(|_| pct < 90.0)
                .map(|c| {
                    format!(
                        ", with {pct:.0}% of a core: it shares this host's {cores:.0} cores with \
                         the client (which kept them {c:.0}% busy), so its reads waited for a \
                         core, and alone on its cores it may take more (run the client on other \
                         cores, taskset, or another host)"
                    )
                })
                .unwrap_or_default();
            (
                Code::UdpDrops,
                format!(
                "the kernel dropped {} datagrams at {name}'s full receive buffer (its socket's \
                 drops): {name} reads too slowly{waited}",
                self.udp_socket_drops
            ),
            )
        } else if d.peer_closed > 0 {
            (
                Code::ClosedByServer,
                format!(
                    "{name} closed {} connection(s) it had taken while it held {fds} fds of its \
                 {limit} and {pct:.0}% of a core: a connection cap of its own (nginx's \
                 worker_connections, a server's max clients), not its fds or CPU",
                    d.peer_closed
                ),
            )
        } else if self.threads == 1 && pct >= 90.0 {
            (
                Code::ServerCpu,
                format!("{name} used {pct:.0}% of a core (of {cores:.0}): CPU-bound on one thread"),
            )
        } else if pct >= 90.0 * cores.min(self.threads.max(1) as f64) {
            (
                Code::ServerCpu,
                format!(
                "{name} used {pct:.0}% CPU, all that its {} thread(s) on {cores:.0} cores can: \
                 CPU-bound",
                self.threads
            ),
            )
        } else {
            (Code::FdLimit, self.one_of_group_out_of_fds()?)
        })
    }

    /// What was seen over `d`, in a line.
    pub fn seen_line(&self, d: &During) -> String {
        format!(
            "{} (pid {}): {} fds of its {} at most, CPU {:.0}% of a core ({:.0} cores here), \
             RSS up to {}, accept queue up to {}, ListenOverflows +{}, ListenDrops +{}, UDP \
             RcvbufErrors +{} ({} at its socket), TCP memory pressure +{}, conntrack drops +{}",
            self.name,
            self.pid,
            self.fds_max,
            self.fd_limit,
            self.cpu_pct(d),
            d.cores.max(1.0),
            crate::units::human_bytes(self.rss_max_bytes as f64),
            self.accept_queue_max,
            self.listen_overflows,
            self.listen_drops,
            self.udp_rcvbuf_errors,
            self.udp_socket_drops,
            self.tcp_memory_pressures,
            self.conntrack_drops
        )
    }
}

/// What the run was watched for, as the result keeps it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    pub client: Option<ClientCpu>,
    pub server: Option<ServerSeen>,
}

impl Observed {
    /// Adds another part's (a process's, a host's): CPU summed; of the
    /// server, the view that saw the most fds held.
    pub fn merge(&mut self, o: &Observed, answered: u64) {
        match (self.client.as_mut(), &o.client) {
            (Some(c), Some(oc)) => {
                c.merge(oc);
                c.derive(answered);
            }
            (None, Some(oc)) => self.client = Some(oc.clone()),
            _ => {}
        }
        if let Some(s) = &o.server {
            if self.server.as_ref().is_none_or(|m| s.fds_max > m.fds_max) {
                self.server = Some(s.clone());
            }
        }
    }
}

/// The server's process being watched.
struct Watched {
    pids: Vec<i32>,
    target: SocketAddr,
    /// The target's address as /proc/net/tcp writes it.
    hex: Vec<String>,
    bufs: Bufs,
    seen: ServerSeen,
    cpu_at_start: f64,
    counters_at_start: (u64, u64),
    udp_drops_at_start: u64,
    pressures_at_start: u64,
    conntrack_at_start: u64,
    socket_drops_at_start: u64,
    /// The accept queue at the last look.
    last_queued: u64,
}

impl Watched {
    /// One sample (see [`Bufs`]: nothing allocated but the name and
    /// limit of a new busiest owner).
    fn sample(&mut self) {
        let b = &mut self.bufs;
        if let Some(l) = listener_into(b, &self.target, &self.hex) {
            self.seen.accept_queue_max = self.seen.accept_queue_max.max(l.queued);
            let steady = l.queued.min(self.last_queued);
            self.seen.accept_queue_steady = self.seen.accept_queue_steady.max(steady);
            self.last_queued = l.queued;
            self.seen.listeners = self.seen.listeners.max(l.sockets);
        }
        // The owner with the most fds is the one that runs short first.
        let mut best: Option<(u64, i32)> = None;
        for &pid in &self.pids {
            if let Some(n) = fd_count(b, pid) {
                if best.is_none_or(|(m, _)| n > m) {
                    best = Some((n, pid));
                }
            }
        }
        let (mut rss, mut threads) = (0, 0);
        for &p in &self.pids {
            b.path(format_args!("/proc/{p}/status"));
            if b.read(64 * 1024, 64 * 1024, |_| false) {
                rss += proc::status_kb(&b.text, "VmRSS").unwrap_or(0) * 1024;
                threads += status_count(&b.text, "Threads").unwrap_or(0);
            }
        }
        self.seen.rss_max_bytes = self.seen.rss_max_bytes.max(rss);
        self.seen.threads = self.seen.threads.max(threads);
        if let Some((n, pid)) = best {
            if n > self.seen.fds_max {
                self.seen.fds_max = n;
                if pid != self.seen.pid || self.seen.name.is_empty() {
                    self.seen.pid = pid;
                    self.seen.name = process_name(pid);
                    self.seen.fd_limit = fd_limit(pid).unwrap_or(0);
                }
            }
        }
    }

    fn cpu_now(&self) -> f64 {
        self.pids.iter().filter_map(|&p| cpu_s(p)).sum()
    }
}

impl Drop for Observer {
    /// An observer let go unfinished stops its thread.
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }
}

/// Watches a run: started before the first connection, finished after
/// the last answer. Samples the server once every [`Observer::EVERY`]
/// on a thread of its own (reading a process's fd table of tens of
/// thousands of entries costs milliseconds: never on a worker).
pub struct Observer {
    started: Instant,
    cpu_at_start: f64,
    cores: BTreeSet<u32>,
    /// The client's process when it is not this one.
    client: Option<i32>,
    watched: Option<Arc<Mutex<Watched>>>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Observer {
    const EVERY: Duration = Duration::from_millis(250);

    /// Starts watching. `target`: the first target when it is on this
    /// host and not this process's own (embedded) server.
    pub fn start(target: Option<SocketAddr>) -> Observer {
        Observer::start_for(None, target)
    }

    /// As [`Observer::start`], with the client another process (`client`,
    /// its pid: a `throng limit` step's) instead of this one.
    pub fn start_for(client: Option<i32>, target: Option<SocketAddr>) -> Observer {
        let watched = target.and_then(|t| {
            let l = listener(&t)?;
            let pids = owners(l.inode);
            if pids.is_empty() {
                return None;
            }
            let held = sockets_held(&pids, &listener_inodes(&t));
            let mut w = Watched {
                pids,
                target: t,
                hex: proc_hex(&t),
                bufs: Bufs::new(),
                seen: ServerSeen {
                    listeners_watched: held,
                    ..ServerSeen::default()
                },
                cpu_at_start: 0.0,
                counters_at_start: proc::listen_counters().unwrap_or((0, 0)),
                udp_drops_at_start: proc::udp_rcvbuf_errors().unwrap_or(0),
                pressures_at_start: proc::tcp_memory_pressures().unwrap_or(0),
                conntrack_at_start: proc::conntrack_drops().unwrap_or(0),
                socket_drops_at_start: udp_socket_drops(&t).unwrap_or(0),
                last_queued: 0,
            };
            w.cpu_at_start = w.cpu_now();
            w.sample();
            Some(Arc::new(Mutex::new(w)))
        });
        let stop = Arc::new(AtomicBool::new(false));
        let thread = watched.clone().map(|w| {
            let stop = stop.clone();
            thread::spawn(move || {
                crate::sys::background();
                loop {
                    // (Woken early by `finish`, which samples once more.)
                    thread::park_timeout(Self::EVERY);
                    if stop.load(Relaxed) {
                        break;
                    }
                    w.lock().unwrap_or_else(|p| p.into_inner()).sample();
                }
            })
        });
        Observer {
            started: Instant::now(),
            cpu_at_start: client_cpu_s(client),
            cores: allowed_cores(&client.map_or("self".to_string(), |p| p.to_string())),
            client,
            watched,
            stop,
            thread,
        }
    }

    /// Ends the watch: what it saw. `answered`: the run's answered
    /// queries (for the CPU per answer).
    pub fn finish(mut self, answered: u64) -> Observed {
        self.stop.store(true, Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
        let mut client = ClientCpu {
            cpu_s: (client_cpu_s(self.client) - self.cpu_at_start).max(0.0),
            cores: self.cores.len().max(1) as u64,
            wall_s: self.started.elapsed().as_secs_f64(),
            ..ClientCpu::default()
        };
        client.derive(answered);
        let server = self.watched.take().map(|w| {
            let mut w = w.lock().unwrap_or_else(|p| p.into_inner());
            w.sample();
            let (o, d) = proc::listen_counters().unwrap_or((0, 0));
            w.seen.listen_overflows = o.saturating_sub(w.counters_at_start.0);
            w.seen.listen_drops = d.saturating_sub(w.counters_at_start.1);
            w.seen.udp_rcvbuf_errors = proc::udp_rcvbuf_errors()
                .unwrap_or(0)
                .saturating_sub(w.udp_drops_at_start);
            w.seen.tcp_memory_pressures = proc::tcp_memory_pressures()
                .unwrap_or(0)
                .saturating_sub(w.pressures_at_start);
            w.seen.udp_socket_drops = udp_socket_drops(&w.target)
                .unwrap_or(0)
                .saturating_sub(w.socket_drops_at_start);
            w.seen.conntrack_drops = proc::conntrack_drops()
                .unwrap_or(0)
                .saturating_sub(w.conntrack_at_start);
            w.seen.cpu_s = (w.cpu_now() - w.cpu_at_start).max(0.0);
            let theirs: BTreeSet<u32> = w
                .pids
                .iter()
                .flat_map(|p| allowed_cores(&p.to_string()))
                .collect();
            client.shares_cores_with_server = !theirs.is_disjoint(&self.cores);
            if client.shares_cores_with_server {
                let room = client.wall_s * self.cores.union(&theirs).count().max(1) as f64;
                client.with_server_pct = 100.0 * (client.cpu_s + w.seen.cpu_s) / room.max(1e-9);
            }
            w.seen.clone()
        });
        Observed {
            client: Some(client),
            server,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_listener_line_of_proc_net_tcp() {
        // 127.0.0.1:8089 listening, 3 in its accept queue.
        let line = "   1: 0100007F:1F99 00000000:0000 0A 000001FF:00000003 00:00000000 \
                    00000000     0        0 123456 1 0000000000000000 100 0 0 10 0";
        let hex = proc_hex(&"127.0.0.1:8089".parse().unwrap());
        assert_eq!(hex, ["0100007F"]);
        assert_eq!(
            listener_of(line, 8089, &hex),
            Some(Listener {
                inode: 123456,
                queued: 3,
                sockets: 1,
            })
        );
        assert_eq!(listener_of(line, 8090, &hex), None);
        let other = proc_hex(&"127.0.0.2:8089".parse().unwrap());
        assert_eq!(listener_of(line, 8089, &other), None);
        // A wildcard listener takes any address; an established socket
        // (state 01) is no listener.
        let any = line.replace("0100007F:1F99", "00000000:1F99");
        assert!(listener_of(&any, 8089, &other).is_some());
        assert_eq!(listener_of(&line.replace(" 0A ", " 01 "), 8089, &hex), None);
    }

    /// Drops at a server's socket while it was far from busy: when the
    /// client ran on its cores, the cause says its reads waited for one.
    #[test]
    fn drops_of_a_server_sharing_its_cores_say_so() {
        let seen = ServerSeen {
            name: "unbound".into(),
            pid: 7,
            cpu_s: 1.5,
            threads: 1,
            udp_socket_drops: 40,
            ..ServerSeen::default()
        };
        let mut d = During {
            wall_s: 3.0,
            cores: 2.0,
            peer_closed: 0,
            client_sharing_pct: None,
        };
        let alone = seen.limit_cause(&d).unwrap();
        assert!(alone.ends_with("unbound reads too slowly"), "{alone}");
        d.client_sharing_pct = Some(48.0);
        let shared = seen.limit_cause(&d).unwrap();
        assert!(shared.contains("with 50% of a core"), "{shared}");
        assert!(shared.contains("kept them 48% busy"), "{shared}");
        // Busy on its core: its own limit, whoever shares.
        let busy = ServerSeen { cpu_s: 2.9, ..seen };
        assert!(busy.limit_cause(&d).unwrap().ends_with("reads too slowly"));
    }

    #[test]
    fn reads_a_bound_udp_sockets_drops() {
        // 127.0.0.1:5300, not connected, 17 dropped; a client's socket
        // connected to it is not the server's.
        let line = " 1234: 0100007F:14B4 00000000:0000 07 00000000:00000000 00:00000000 \
                    00000000   101        0 55555 2 0000000000000000 17";
        let hex = proc_hex(&"127.0.0.1:5300".parse().unwrap());
        assert_eq!(udp_drops_of(line, 5300, &hex), Some(17));
        assert_eq!(udp_drops_of(line, 5301, &hex), None);
        let client = line.replace("00000000:0000 07", "0100007F:14B4 01");
        assert_eq!(udp_drops_of(&client, 5300, &hex), None);
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(udp_socket_drops(&s.local_addr().unwrap()), Some(0));
    }

    #[test]
    fn finds_its_own_listener_and_its_owner() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let found = listener(&addr).expect("the listener in /proc/net/tcp");
        // This process skips itself when it looks for owners.
        assert!(owners(found.inode).is_empty());
        let c = std::net::TcpStream::connect(addr).unwrap();
        assert_eq!(listener(&addr).unwrap().queued, 1);
        drop(c);
    }

    #[test]
    fn the_kernels_diagnostics_and_proc_net_tcp_see_the_same_listeners() {
        // A listener with one connection queued, and one on another port.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let _c = std::net::TcpStream::connect(addr).unwrap();
        // Queued once the listener is readable.
        use std::os::fd::AsRawFd;
        let mut p = libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll reads and writes one pollfd we own.
        let ready = unsafe { libc::poll(&mut p, 1, 10_000) };
        assert_eq!(ready, 1, "the connection queued");
        let (mut b, hex) = (Bufs::new(), proc_hex(&addr));
        let (mut asked, mut read) = (Vec::new(), Vec::new());
        assert!(each_listener(&mut b, &addr, &hex, |l| asked.push(l)));
        assert!(each_listener_in_files(&mut b, &addr, &hex, |l| read.push(l)));
        assert_eq!(asked, read);
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].queued, 1);
        // The diagnostics answered (not the fallback): they name the
        // listener by address.
        let mut seen = Vec::new();
        diag::listeners(libc::AF_INET, addr.port(), &mut b.net, |ip, l| {
            seen.push((ip, l))
        })
        .expect("NETLINK_SOCK_DIAG");
        assert_eq!(seen, [(addr.ip(), asked[0])]);
        // Nothing listens on a port just closed, by either reading.
        let gone = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        assert!(!each_listener(&mut b, &gone, &proc_hex(&gone), |_| {}));
        assert!(!each_listener_in_files(
            &mut b,
            &gone,
            &proc_hex(&gone),
            |_| {}
        ));
        // A wildcard listener takes a connection to the loopback address.
        let w = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let to = SocketAddr::new([127, 0, 0, 1].into(), w.local_addr().unwrap().port());
        assert!(each_listener(&mut b, &to, &proc_hex(&to), |_| {}));
        assert!(!diag::reaches("127.0.0.2".parse().unwrap(), &to));
        assert!(diag::reaches("::ffff:127.0.0.1".parse().unwrap(), &to));
        // An IPv6 listener, asked of the AF_INET6 dump, by address.
        if let Ok(l6) = std::net::TcpListener::bind("[::1]:0") {
            let a6 = l6.local_addr().unwrap();
            let mut seen = Vec::new();
            diag::listeners(libc::AF_INET6, a6.port(), &mut b.net, |ip, l| {
                seen.push((ip, l.queued))
            })
            .expect("NETLINK_SOCK_DIAG, AF_INET6");
            assert_eq!(seen, [(a6.ip(), 0)]);
            assert!(each_listener(&mut b, &a6, &proc_hex(&a6), |_| {}));
        } else {
            errln!("no IPv6 loopback here: its listener is not asked");
        }
    }

    #[test]
    fn names_the_cause_it_saw() {
        let mut s = ServerSeen {
            pid: 42,
            name: "nginx".into(),
            fds_max: 1024,
            fd_limit: 1024,
            ..ServerSeen::default()
        };
        let c = s.cause(10).unwrap();
        assert!(
            c.contains("(nginx, pid 42) held 1024 fds of its 1024"),
            "{c}"
        );
        // A lone server's listeners, one per worker: still its fds.
        (s.listeners, s.listeners_watched) = (2, 2);
        assert!(s
            .cause(10)
            .unwrap()
            .contains("it cannot accept more (raise"));
        // One of a SO_REUSEPORT group's processes full: the others may have
        // room, so a cause only when nothing else is.
        s.listeners = 3;
        let c = s.cause(10).unwrap();
        assert!(c.contains("one of 3 sockets listening"), "{c}");
        s.listen_overflows = 2;
        let c = s.cause(10).unwrap();
        assert!(
            c.starts_with("the server's process (nginx, pid 42), one of 3"),
            "{c}"
        );
        assert!(c.contains("2 overflow(s) are only part of the 10"), "{c}");
        // As many overflows as failures: the queue explains them.
        assert!(s
            .cause(2)
            .unwrap()
            .starts_with("the server's process (nginx, pid 42) did not"));
        // A throng server's member at its cap keeps a few fds back: one
        // of a group that filled.
        (s.listeners, s.listen_overflows, s.fds_max, s.fd_limit) = (3, 0, 394, 400);
        assert!(s.cause(10).unwrap().contains("held 394 fds of its 400"));
        s.fds_max = 390;
        assert_eq!(s.cause(10), None);
        (s.listeners, s.fd_limit) = (1, 1024);
        s.fds_max = 100;
        assert_eq!(s.cause(10), None);
        // A listener that never accepts: its queue holds them all.
        s.accept_queue_max = 10;
        assert!(s.cause(10).unwrap().contains("accept queue held up to 10"));
        assert_eq!(s.cause(20), None);
        // Overflows counted by the kernel: the queue was full.
        s.listen_overflows = 3;
        assert!(s.cause(5000).unwrap().contains("3 overflow(s)"));
    }

    #[test]
    fn cpu_share_and_cost_per_answer() {
        let mut c = ClientCpu {
            cpu_s: 1.0,
            cores: 2,
            wall_s: 2.0,
            ..ClientCpu::default()
        };
        c.derive(100_000);
        assert_eq!(c.cpu_pct, 25.0);
        assert_eq!(c.cpu_us_per_answer, 10.0);
    }
}
