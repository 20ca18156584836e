//! `--processes auto` (the default), [`run`]: this process serves, and
//! starts another (which waits, listening) once the one taking new
//! connections is 11/16 full (at once under a connect storm), up to what
//! --max-connections needs. When that one is nearly full, this parent
//! steers the port's new connections to the next with a classic BPF
//! program on the SO_REUSEPORT group; every member keeps its listeners, so
//! nothing queued at them is lost. Idle, it is one process. Under churn
//! (connections that end), a member that filled and has emptied below
//! half is steered to again before a new process is started, so a steady
//! number of connections keeps a steady number of processes.

use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::bind::steer_new_connections;
use super::multi::member;
use super::prometheus::Exported;
use super::running::{start_with, Running};
use super::seconds::{each_second, ChildSecond, ListenCounters, Second, StatsOut, Wake};
use super::stats::Totals;
use super::summary::{listening, print_summary, ChildTotals};
use super::{Handoff, ServerConfig};
use crate::child::{ChildLine, Children};
use crate::exposition::Endpoint;
use crate::sys::fd_handoff::{FdHandoff, Taken};
use crate::sys::signals::{Reason, Stop};
use crate::sys::{capacity, limits, proc};

/// A member of an elastic group that filled to 13/16 faster than this was
/// under a connect storm: the next but one starts as soon as the next takes
/// over (a process starts in ~0.1 s when both cores are busy, far more
/// under a storm of a hundred processes; 11/16 to 13/16 takes an eighth of
/// this).
const STORM_FILL: Duration = Duration::from_secs(1);

/// At most this many processes of an elastic group wait, started ahead of
/// the one taking new connections.
const MOST_AHEAD: usize = 4;

/// Connections to plan for: --max-connections, lowered to what the host
/// holds (the check the client and `throng tune` share: 80% of
/// MemAvailable, fs.file-max).
fn planned_connections(cfg: &ServerConfig) -> u64 {
    let host = capacity::Host::read(None);
    let files = host
        .file_max
        .map_or(u64::MAX, |m| m.saturating_sub(host.files_open + 65_536));
    cfg.max_connections
        .min(host.ends_for_memory().unwrap_or(u64::MAX))
        .min(files)
        .max(1)
}

/// One process of an elastic group, as the parent sees it.
struct Member {
    /// Since the group's start.
    started: Duration,
    /// Listening (the parent's own process from the start).
    ready: bool,
    /// Past 11/16 of its fds (open or queued).
    filling: bool,
    /// Past 13/16 of its fds: new connections should go to the next.
    full: bool,
    /// Full once, below half since (its connections ended): new
    /// connections may come back to it.
    room: bool,
    /// Its last stats second, and the rates of the seconds it reported
    /// since the parent's last line.
    last: Second,
    rates: Second,
    fin: Option<ChildTotals>,
    exit: Option<String>,
}

impl Member {
    fn new(started: Duration, ready: bool) -> Member {
        Member {
            started,
            ready,
            filling: false,
            full: false,
            room: false,
            last: Second::default(),
            rates: Second::default(),
            fin: None,
            exit: None,
        }
    }
}

/// `--processes auto`: serves in this process and adds processes as the
/// open ones fill up (see the module header); the endpoint, when there is
/// one, shows them all.
pub fn run(
    cfg: &ServerConfig,
    stop: &Stop,
    mut out: StatsOut,
    endpoint: Option<Endpoint>,
) -> Result<()> {
    let fd = limits::raise_nofile()?;
    let planned = planned_connections(cfg);
    // This process serves until its fds run out, so it holds back what the
    // group's own work needs: two pipes per child it starts, a few fds for
    // each start and for reading /proc. Held before the workers start, so
    // that their cap on open connections leaves these out (a worker never
    // takes a connection past it, so what this frees stays free).
    let estimate = planned.div_ceil(fd.soft.saturating_sub(256).max(1));
    let spare = ReservedFds::new(2 * estimate + 16);
    // Every member inherits the channel: what a full one's queues bring
    // past its fds goes to one with room instead of being shed.
    let channel =
        FdHandoff::new().context("making the group's hand-off channel for connections")?;
    let cfg = &ServerConfig {
        channel: Some(channel.fds()),
        ..cfg.clone()
    };
    let handoff = Arc::new(Handoff::elastic(stop.sender(), Some(channel)));
    let server = start_with(cfg, Some(handoff.clone()))?;
    let capacity = server.max_open.max(1) as u64;
    // A member hands over at 13/16 of its fds, open or queued (the queues
    // counted from one listener's, so over rather than under), and then
    // takes what its queues still hold: it ends at 13/16 or more of them,
    // or a little under when the count ran over; a bound of planned / (5/8
    // of each) costs nothing until used, and one too low would shed.
    let most = planned.div_ceil(capacity * 5 / 8).max(1);
    if most == 1 {
        // Alone for good: never close, shed past the fd limit.
        handoff.no_siblings();
    }
    let plan = GroupCapacity {
        planned,
        capacity,
        most,
    };
    elastic_banner(cfg, &server, endpoint.as_ref(), &fd, &plan)?;

    let started = Instant::now();
    let mut listen = ListenCounters::read();
    let exported = match endpoint {
        Some(e) => {
            let x = Exported::new(listen.start());
            x.add_live(server.probe());
            e.serve(x.registry())?;
            Some(x)
        }
        None => None,
    };
    let migrate0 = migrations();
    let children = Children::spawn(Vec::new(), stop, true)?;
    let mut group = Group {
        cfg,
        addrs: &server.addrs,
        groups: &server.groups,
        stop,
        most,
        started,
        steered: 0,
        frontier: 0,
        steered_at: Instant::now(),
        ahead: 1,
        late: usize::MAX,
        told: 1,
        stopping: false,
        stuck: false,
        exported,
    };
    if most > 1 {
        // New connections to this process alone from the start: the next,
        // started ahead, waits with an empty queue until steered to.
        group.steer(0);
    }
    let mut g = Parent {
        group,
        members: vec![Member::new(Duration::ZERO, true)],
        children,
        spare,
        alive: 0,
        unplaced: 0,
        none_takes: false,
    };
    let last = each_second(&server, stop, started, |wake| {
        let own = match wake {
            Wake::Other(reason) => return Ok(g.on_wake(reason)),
            Wake::Second(own) => *own,
        };
        g.close_unplaced(&handoff);
        let mut sec = g.second(own);
        listen.second(g.spare.with(proc::listen_counters), &mut sec);
        out.emit(&sec);
        Ok(true)
    })?;
    // A signal, or a worker of this process ended on its own.
    g.stop();
    while g.alive > 0 {
        if let Some(reason) = stop.wait_reason(None) {
            g.on_wake(reason);
        }
    }
    let Parent {
        mut members,
        mut children,
        spare,
        unplaced,
        ..
    } = g;

    let own_peak = server.shared.peak.load(Relaxed);
    let result = server.stop();
    drop(spare);
    let statuses = children.wait();
    let own_totals = match &result {
        Ok(t) => t.clone(),
        Err(_) => last,
    };
    members[0].fin = Some(ChildTotals {
        totals: own_totals,
        peak: own_peak,
    });
    print_members(
        &members,
        &statuses,
        (most, unplaced),
        started,
        &listen,
        migrate0,
    )?;
    result.map(|_| ())
}

/// How many connections an elastic group plans for, per process, and in
/// how many processes at most.
struct GroupCapacity {
    planned: u64,
    capacity: u64,
    most: u64,
}

/// The banner of --processes auto: the server is up.
fn elastic_banner(
    cfg: &ServerConfig,
    server: &Running,
    endpoint: Option<&Endpoint>,
    fd: &limits::FdLimit,
    plan: &GroupCapacity,
) -> Result<()> {
    let GroupCapacity {
        planned,
        capacity,
        most,
    } = *plan;
    let mut banner = crate::console::stdout();
    writeln!(
        banner,
        "throng server: {} mode, 1 process x {} worker{}{}",
        cfg.mode.name(),
        cfg.workers,
        if cfg.workers == 1 { "" } else { "s" },
        if most > 1 {
            format!(
                "; the next joins the port (SO_REUSEPORT) and takes the new connections each \
                 time the one taking them nears its fd limit, up to {most} processes"
            )
        } else {
            String::new()
        }
    )?;
    listening(cfg, &server.addrs, &mut banner)?;
    if let Some(e) = endpoint {
        writeln!(banner, "{}", e.banner())?;
    }
    writeln!(
        banner,
        "{}: {capacity} connections per process, {} in {most} process{} (planned for {planned}; \
         --max-connections {})",
        fd.describe(),
        capacity * most,
        if most == 1 { "" } else { "es" },
        cfg.max_connections
    )?;
    for l in server.limits.iter().skip(1) {
        writeln!(banner, "{l}")?;
    }
    banner.flush()?;
    Ok(())
}

/// The summary of --processes auto: the members' counters summed, each
/// member's start and end, and what the kernel did with connections
/// queued at a full member's listeners.
fn print_members(
    members: &[Member],
    statuses: &[std::result::Result<i32, String>],
    (most, unplaced): (u64, u64),
    started: Instant,
    listen: &ListenCounters,
    migrate0: Option<(u64, u64)>,
) -> Result<()> {
    let mut total = Totals::default();
    let mut peak = 0;
    let mut rows = Vec::new();
    for (k, m) in members.iter().enumerate() {
        let what = match (&m.fin, k.checked_sub(1).map(|i| &statuses[i])) {
            (Some(f), _) => {
                total.merge(&f.totals);
                peak += f.peak;
                format!("accepted {}", f.totals.accepted)
            }
            (None, Some(Ok(code))) => format!("died (exit {code})"),
            (None, Some(Err(why))) => format!("died ({why})"),
            (None, None) => "no counters".into(),
        };
        rows.push(format!(
            "#{} at {:.1}s {what}",
            k + 1,
            m.started.as_secs_f64()
        ));
    }
    // Closed from the channel for want of room: shed, as a lone server's.
    total.accept_no_fds += unplaced;
    print_summary(&total, peak, started.elapsed(), listen.since_start())?;
    outln!(
        "  processes    {} (up to {most}): {}{}",
        members.len(),
        rows.join(", "),
        if members.len() > 1 {
            "; peak is the sum of the processes' peaks"
        } else {
            ""
        }
    );
    let (moved, lost) = migrations()
        .zip(migrate0)
        .map_or((0, 0), |(a, b)| (a.0 - b.0, a.1 - b.1));
    if total.passed > 0 {
        let left = total
            .passed
            .saturating_sub(total.taken + total.passage_lost + unplaced);
        outln!(
            "  hand-over    {} connection(s) past a full process's fds went through the group's hand-off \
             channel: {} taken by a process with room{}{}",
            total.passed,
            total.taken,
            if unplaced + total.passage_lost > 0 {
                format!(
                    ", {} closed with no process able to hold them",
                    unplaced + total.passage_lost
                )
            } else {
                String::new()
            },
            if left > 0 {
                format!(", {left} waiting at the end")
            } else {
                String::new()
            }
        );
    }
    if unplaced > 0 && members.len() as u64 >= most {
        // The shed above is the group's, not one process's: its last
        // process was full too.
        outln!(
            "  hint: the group was at its most processes ({most}, planned from \
             --max-connections and the fd limit), each full: to hold more, raise \
             --max-connections (the group grows to hold it) or the fd limit (ulimit -n)"
        );
    }
    if total.queued_at_close > 0 || moved > 0 || lost > 0 {
        outln!(
            "  hand-over    {} connection(s) queued at a full process's listeners when they \
             closed; the kernel moved {moved} to a sibling and failed {lost} \
             (net.ipv4.tcp_migrate_req)",
            total.queued_at_close
        );
    }
    Ok(())
}

/// The parent of an elastic group at work: the group, its members, their
/// processes, and what it hears from them.
struct Parent<'a> {
    group: Group<'a>,
    members: Vec<Member>,
    children: Children,
    spare: ReservedFds,
    /// Child processes running.
    alive: u64,
    /// Connections closed from the channel: no member could take them.
    unplaced: u64,
    /// At the last second no member could take from the channel.
    none_takes: bool,
}

impl Parent<'_> {
    /// Once a second: when no member can take what waits in the channel
    /// (every one listening is full, and none will be started: the group
    /// at its most, or stuck), closes it, as a lone server sheds what it
    /// cannot hold, rather than leave the client waiting on it.
    fn close_unplaced(&mut self, handoff: &Handoff) {
        let Some(channel) = handoff.channel_in() else {
            return;
        };
        let grows = !self.group.stuck && (self.members.len() as u64) < self.group.most;
        let takes = self
            .members
            .iter()
            .any(|m| m.exit.is_none() && (!m.ready || !m.full));
        // Two seconds in a row: a member's word that it has room again may
        // still be on its way.
        let due = !(grows || takes);
        let was = std::mem::replace(&mut self.none_takes, due);
        if !(due && was) {
            return;
        }
        // (At most a second's worth of a storm's: the parent's own second
        // goes on.)
        for _ in 0..1 << 16 {
            match channel.take() {
                Taken::Conn(c) => drop(c),
                Taken::Lost => {}
                Taken::Empty => break,
            }
            self.unplaced += 1;
        }
    }

    /// The group's second: this process's own, and the others' gauges
    /// from their last line with the rates they reported since the last
    /// second (the listen counters are left to the caller).
    fn second(&mut self, own: Second) -> Second {
        self.members[0].last = own.clone();
        let others: Vec<Second> = self.members[1..]
            .iter()
            .map(|m| {
                let mut s = m.rates.clone();
                s.connections = m.last.connections;
                s.peak_connections = m.last.peak_connections;
                s
            })
            .collect();
        let mut sec = Second::combine(std::iter::once(&own).chain(others.iter()));
        sec.processes = self.members.len() as u64;
        for m in &mut self.members[1..] {
            m.rates = Second::default();
        }
        sec
    }

    /// Hears a wake-up other than a second's: a member filling up, a
    /// child's line, a child's end. False for a request to stop (a signal).
    fn on_wake(&mut self, reason: Reason) -> bool {
        let group = &mut self.group;
        let (members, children, spare) = (&mut self.members, &mut self.children, &mut self.spare);
        match reason {
            Reason::Signal => return false,
            Reason::Grow => {
                (members[0].filling, members[0].room) = (true, false);
                if group.steered == 0 {
                    self.alive += group.standby(members, children, spare);
                }
            }
            Reason::Full => {
                (members[0].full, members[0].room) = (true, false);
                self.alive += group.handoff(members, children, spare);
            }
            Reason::Room => self.room(0),
            Reason::ChildLine(i, line) => {
                let m = &mut members[i + 1];
                match serde_json::from_str::<ChildLine>(&line) {
                    Ok(ChildLine::Stats(v)) => {
                        if let Ok(line) = serde_json::from_value::<ChildSecond>(v) {
                            if let Some(x) = &group.exported {
                                x.report(i + 1, &line);
                            }
                            m.rates.add_rates(&line.sec);
                            m.last = line.sec;
                        }
                    }
                    Ok(ChildLine::Totals(v)) => {
                        m.fin = serde_json::from_value(v).ok();
                        if let (Some(x), Some(t)) = (&group.exported, &m.fin) {
                            x.finish(i + 1, t);
                        }
                    }
                    Ok(ChildLine::Ready) => {
                        m.ready = true;
                        group.tell_next(members, children);
                        self.alive += group.handoff(members, children, spare);
                    }
                    Ok(ChildLine::Filling) => {
                        (m.filling, m.room) = (true, false);
                        if group.steered == i + 1 {
                            self.alive += group.standby(members, children, spare);
                        }
                    }
                    Ok(ChildLine::Full) => {
                        (m.full, m.room) = (true, false);
                        self.alive += group.handoff(members, children, spare);
                    }
                    Ok(ChildLine::Room) => self.room(i + 1),
                    _ => {}
                }
            }
            Reason::ChildExit(i) => {
                self.alive -= 1;
                if members[i + 1].fin.is_none() {
                    members[i + 1].exit = Some("ended".into());
                }
                if !group.stopping && !members[i + 1].ready && !group.stuck {
                    errln!(
                        "throng: server process #{} ended before it listened; serving on with {}",
                        i + 2,
                        i + 1
                    );
                    group.stuck = true;
                }
                group.tell_next(members, children);
            }
            _ => {}
        }
        true
    }

    /// Member `k` re-armed (full once, now below half): it may be steered
    /// to again, unless it is the one steered to now.
    fn room(&mut self, k: usize) {
        let m = &mut self.members[k];
        (m.full, m.filling) = (false, false);
        m.room = self.group.steered != k;
    }

    /// Stops the group: the members not told to listen yet are let go, the
    /// others get SIGTERM.
    fn stop(&mut self) {
        self.group.stopping = true;
        self.group.tell_next(&self.members, &mut self.children);
        self.children.signal(libc::SIGTERM);
    }
}

/// An elastic group as its parent runs it: members in the order their
/// listeners joined each port's SO_REUSEPORT group (one per worker), one of
/// them steered to, and one or more started ahead, waiting (see `ahead`).
struct Group<'a> {
    cfg: &'a ServerConfig,
    addrs: &'a [SocketAddr],
    /// Each port's group, to steer through.
    groups: &'a [std::os::fd::OwnedFd],
    stop: &'a Stop,
    most: u64,
    started: Instant,
    /// The member new connections go to, since when.
    steered: usize,
    /// The last member ever steered to: those after it wait, started
    /// ahead.
    frontier: usize,
    steered_at: Instant,
    /// Processes kept started ahead of the steered one: 1, and one more
    /// each time a member filled before the next was listening (a connect
    /// storm faster than a process starts), up to [`MOST_AHEAD`].
    ahead: usize,
    /// The member that last filled before its successor listened.
    late: usize,
    /// Members told to listen (this process from the start): the next is
    /// told once every one before it listens, so that the port's group
    /// numbers their sockets in member order, which [`Group::steer`] needs.
    told: usize,
    /// A start or a steer failed: the group serves on as it is.
    stuck: bool,
    /// The group is stopping.
    stopping: bool,
    /// --metrics: every member, in order.
    exported: Option<Arc<Exported>>,
}

impl Group<'_> {
    /// Starts the next process unless one waits already, up to `most`; 1
    /// when it started one. A process that cannot start is said on stderr
    /// and the group serves on as it is.
    fn standby(
        &mut self,
        members: &mut Vec<Member>,
        children: &mut Children,
        spare: &mut ReservedFds,
    ) -> u64 {
        let mut started = 0;
        while !self.stuck
            && (members.len() as u64) < self.most
            && members.len() <= self.frontier + self.ahead
        {
            let added = member(self.cfg, self.addrs, self.cfg.workers as u64, true)
                .and_then(|m| spare.with(|| children.add(m, self.stop)));
            match added {
                Ok(()) => {
                    members.push(Member::new(self.started.elapsed(), false));
                    if let Some(x) = &self.exported {
                        x.add_reported();
                    }
                    started += 1;
                    self.tell_next(members, children);
                }
                Err(e) => {
                    errln!("throng: {e:#}; serving on with {} processes", members.len());
                    self.stuck = true;
                    self.tell_next(members, children);
                }
            }
        }
        started
    }

    /// Tells the next member to listen once every member before it does.
    /// Stuck or stopping, the members not told yet are let go instead
    /// (their stdin closes: they end without listening), so none waits for
    /// a word that will not come.
    fn tell_next(&mut self, members: &[Member], children: &mut Children) {
        if self.stuck || self.stopping {
            while self.told < members.len() {
                children.close_stdin(self.told - 1);
                self.told += 1;
            }
            return;
        }
        if self.told < members.len() && members[self.told - 1].ready {
            children.tell(self.told - 1);
            self.told += 1;
        }
    }

    /// Once the steered member is nearly full and the next listens, steers
    /// new connections to the next; what it returns is what
    /// [`Group::standby`] does.
    fn handoff(
        &mut self,
        members: &mut Vec<Member>,
        children: &mut Children,
        spare: &mut ReservedFds,
    ) -> u64 {
        if self.stuck || !members[self.steered].full {
            return 0;
        }
        // A member that has emptied since it was full comes first (the
        // emptiest): churn then cycles through the processes it has.
        let back = members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.room && !m.full && m.ready && m.exit.is_none())
            .min_by_key(|(_, m)| m.last.connections)
            .map(|(k, _)| k);
        if let Some(k) = back {
            if self.steer(k) {
                members[k].room = false;
                self.steered_at = Instant::now();
            }
            return 0;
        }
        // (A member started ahead may have filled already, from the
        // channel: it is passed over.)
        let mut next = self.frontier + 1;
        while members
            .get(next)
            .is_some_and(|m| m.ready && m.full && m.exit.is_none())
        {
            next += 1;
        }
        self.frontier = next - 1;
        let ready = members
            .get(next)
            .is_some_and(|m| m.ready && m.exit.is_none());
        if !ready {
            // Full before the next listens: what arrives meanwhile is shed.
            // Start further ahead from now on.
            if self.late != self.steered {
                self.late = self.steered;
                self.ahead = (self.ahead + 1).min(MOST_AHEAD);
            }
            return self.standby(members, children, spare);
        }
        if !self.steer(next) {
            return 0;
        }
        self.frontier = next;
        // Under a connect storm (the last one filled in under a second) the
        // next one would fill from 11/16 to 13/16 faster than a process
        // starts: the one after it starts now. So does it when the next is
        // 11/16 full already.
        let storm = self.steered_at.elapsed() < STORM_FILL;
        self.steered_at = Instant::now();
        if storm || members[next].filling {
            return self.standby(members, children, spare);
        }
        0
    }

    /// Steers the ports' new connections to member `m`; false (and the
    /// group stuck as it is) when the kernel refuses.
    fn steer(&mut self, m: usize) -> bool {
        let workers = self.cfg.workers as u32;
        for (g, addr) in self.groups.iter().zip(self.addrs) {
            if let Err(e) = steer_new_connections(g, m as u32 * workers, workers) {
                errln!(
                    "throng: cannot steer new connections to {addr} to server process #{} \
                     ({e}); the processes share them as the kernel spreads them",
                    m + 1
                );
                self.stuck = true;
                return false;
            }
        }
        self.steered = m;
        true
    }
}

/// Fds held back (open on /dev/null) so that a process whose connections
/// took every other fd can still start a child or read /proc.
struct ReservedFds(Vec<File>);

impl ReservedFds {
    fn new(n: u64) -> ReservedFds {
        ReservedFds(
            (0..n)
                .filter_map(|_| File::open("/dev/null").ok())
                .collect(),
        )
    }

    /// Runs `f` with a few of the fds free, then takes back what it can
    /// (what `f` kept open, such as a child's pipes, is gone for good).
    fn with<T>(&mut self, f: impl FnOnce() -> T) -> T {
        const TAKE: usize = 8;
        let n = self.0.len().saturating_sub(TAKE);
        self.0.truncate(n);
        let r = f();
        for _ in 0..TAKE {
            match File::open("/dev/null") {
                Ok(f) => self.0.push(f),
                Err(_) => break,
            }
        }
        r
    }
}

/// The kernel's TcpExt TCPMigrateReqSuccess and TCPMigrateReqFailure.
fn migrations() -> Option<(u64, u64)> {
    let v = proc::netstat("TcpExt", &["TCPMigrateReqSuccess", "TCPMigrateReqFailure"])?;
    Some((v[0], v[1]))
}
