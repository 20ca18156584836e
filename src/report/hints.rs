//! The hints of a summary: what a figure means and what to do, named only
//! from what was seen (the server's process, the kernel's counters, the
//! client's own lateness).

use super::*;

/// The timed-out and half-open buckets from what was seen of the server:
/// the cause it showed, or, when it was seen and showed none, the causes
/// that are left. None when it was not seen (the bucket's own words say
/// what to look at).
pub(super) fn unaccepted_hint(b: Bucket, o: &Outcome) -> Option<(Code, String)> {
    let seen = o.observed.server.as_ref()?;
    let t = &o.totals;
    let never = t.failed[Bucket::TimedOut as usize] + t.failed[Bucket::HalfOpen as usize];
    if let Some(cause) = seen.named(never + t.unverified) {
        return Some(cause);
    }
    Some(match b {
        Bucket::TimedOut => (
            Code::SynDropped,
            format!(
                "SYNs went unanswered, though the server's process ({}, pid {}) had fds to spare \
             ({} of {}) and its accept queue never overflowed: the SYN backlog \
             (net.ipv4.tcp_max_syn_backlog, SYN cookies) or a firewall dropped them",
                seen.name, seen.pid, seen.fds_max, seen.fd_limit
            ),
        ),
        _ => (
            Code::Reset,
            format!(
                "the server reset connections before answering anything, though its process ({}, \
             pid {}) had fds to spare and its accept queue never overflowed: it closed them \
             itself (a limit of its own; see its log)",
                seen.name, seen.pid
            ),
        ),
    })
}

/// Where verification stopped growing while establishment went on: the
/// server's kernel completed handshakes its process never took (a full
/// accept queue that still answers SYNs, a process out of fds).
pub(super) fn verification_stall(o: &Outcome) -> Option<String> {
    let t = &o.totals;
    if t.unverified == 0 || t.verified == 0 {
        return None;
    }
    let last_growth = o
        .per_second
        .windows(2)
        .rev()
        .find(|w| w[1].verified > w[0].verified)
        .map(|w| &w[1])
        .or(o.per_second.first())?;
    // Grew no more for the seconds after (a ramp done within its first
    // second stalls there too) while more connections were established.
    // (A few unverified among many say nothing of where it stopped: at
    // least one in a hundred established.)
    let last = o.per_second.last()?;
    let many = t.unverified * 100 >= t.established;
    (many && t.established > last_growth.verified && last.t > last_growth.t).then(|| {
        format!(
            "stopped at {} ({} s into the run, none verified in the {} s after) while \
             established went on to {}",
            last_growth.verified,
            last_growth.t,
            last.t - last_growth.t,
            t.established
        )
    })
}

/// The kernel's first retransmission timeout for a SYN, in µs: a handshake
/// whose packet was dropped completes a second or more late.
pub(super) const SYN_RTO_US: u64 = 1_000_000;

/// Says when the connect-time tail is a retransmitted handshake: p99 at
/// the kernel's 1 s SYN timeout or beyond, far more than the client's own
/// connect() calls took. The client's work cannot add a second; a dropped
/// SYN or final ACK does: a full accept queue or SYN backlog at the server
/// (or a lossy path). Checked before [`client_connect_hint`], so such a
/// tail never reads as the client's.
pub fn retransmit_hint(o: &Outcome) -> Option<Cause> {
    let (sys, conn) = (&o.hists.connect_syscall, &o.hists.connect_time);
    if conn.is_empty() {
        return None;
    }
    let conn_p99 = conn.value_at_quantile(0.99);
    let sys_p99 = if sys.is_empty() {
        0
    } else {
        sys.value_at_quantile(0.99)
    };
    if conn_p99 < SYN_RTO_US * 9 / 10 || sys_p99 * 4 >= conn_p99 {
        return None;
    }
    let late = 1.0 - conn.quantile_below(SYN_RTO_US * 9 / 10);
    let t = &o.totals;
    let never = t.failed[Bucket::TimedOut as usize] + t.failed[Bucket::HalfOpen as usize];
    // Why the server side dropped it: what was seen of it, or where to
    // look (no fix for a cause not seen).
    let (code, why) = match &o.observed.server {
        Some(s) => s.named(never + t.unverified).unwrap_or_else(|| {
            (
                Code::SynDropped,
                format!(
                    "its process ({}, pid {}) had fds to spare and its accept queue did not \
                 overflow, so the SYN backlog (net.ipv4.tcp_max_syn_backlog) or the path \
                 dropped it",
                    s.name, s.pid
                ),
            )
        }),
        None => (
            Code::SynDropped,
            "a full accept queue or SYN backlog, or the path; throng cannot see the \
                 server from here: on it, look at `nstat -az TcpExtListenOverflows \
                 TcpExtListenDrops` and `ss -ltn` (Recv-Q against Send-Q)"
                .into(),
        ),
    };
    let words = format!(
        "{:.1}% of the connections took {} or more to establish (p99 {}), while the client's \
         connect() calls took p99 {}: their handshake was retransmitted after the kernel's 1 s \
         timeout. The server side dropped it: {why}",
        100.0 * late,
        human_us(SYN_RTO_US * 9 / 10),
        human_us(conn_p99),
        human_us(sys_p99),
    );
    Some(
        Cause::new(code, "handshake", words)
            .with("connect_p99_us", conn_p99 as f64)
            .with("connect_syscall_p99_us", sys_p99 as f64),
    )
}

/// Says when the connect times are the client's own: its connect() calls
/// (the kernel searching for a free ephemeral port) were slow, or kept its
/// workers so busy during the ramp that established connections waited for
/// the loop. None when the server side explains them (or nothing does).
pub fn client_connect_hint(sc: &Scenario, o: &Outcome) -> Option<Cause> {
    let (sys, conn) = (&o.hists.connect_syscall, &o.hists.connect_time);
    if sys.is_empty() || conn.is_empty() {
        return None;
    }
    let conn_p99 = conn.value_at_quantile(0.99);
    let sys_p99 = sys.value_at_quantile(0.99);
    // Under a few milliseconds nobody needs an explanation.
    if conn_p99 < 5_000 {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let threads = sc.workers.clamp(1, cores) as f64;
    // tcp-per-query connects through the whole run, not in a ramp.
    let (window, during) = match sc.transport {
        Transport::TcpPerQuery => (Some(o.elapsed), "the run"),
        _ => (o.ramp_time, "the ramp"),
    };
    let busy = window.map_or(0.0, |r| {
        sys.mean() * sys.len() as f64 / 1e6 / r.as_secs_f64().max(1e-3) / threads
    });
    let busy_pct = (busy * 100.0).min(100.0);
    let calls = format!(
        "its connect() calls took p99 {} (p50 {}) and kept its workers {busy_pct:.0}% busy \
         during {during}",
        human_us(sys_p99),
        human_us(sys.value_at_quantile(0.5)),
    );
    let cause = |code: Code, words: String| {
        Cause::new(code, "client", words)
            .with("connect_p99_us", conn_p99 as f64)
            .with("connect_syscall_p99_us", sys_p99 as f64)
            .with("busy_pct", busy_pct)
    };
    // The port search slows only once a pair holds much of the range: a
    // slow connect() with the pairs far from it is the kernel kept from
    // running it (other work on the client's cores; on loopback the
    // server's side of each handshake runs in the same calls).
    let ports = crate::sys::sources::ports_per_source();
    let pairs = (sc.sources.len().max(1) * sc.targets.len().max(1)) as u64;
    let per_pair = (o.peak.max(0) as u64).div_ceil(pairs);
    let pairs_full = per_pair >= crate::sys::sources::fast_per_pair();
    if sys_p99 >= 1_000 && (sys_p99 * 4 >= conn_p99 || busy >= 0.5) && !pairs_full {
        return Some(cause(
            Code::ClientCpu,
            format!(
                "the connect times are the client's, not the server's: {calls}, with at most \
                 {per_pair} connection(s) per (source, destination) pair, far from where the \
                 search for a free port slows (of {ports} ports): the client's kernel was kept \
                 from running them. Other work on its cores, or the host's, took their CPU (on \
                 loopback the server's side of each handshake runs in the same calls); for the \
                 server's own figure, run the client on cores of its own (taskset -c) or on \
                 another host"
            ),
        ));
    }
    if sys_p99 >= 1_000 && (sys_p99 * 4 >= conn_p99 || busy >= 0.5) {
        return Some(cause(
            Code::Ports,
            format!(
                "the connect times are the client's, not the server's: {calls}. That is the \
             client's kernel searching for a free ephemeral port: too many connections share a \
             (source, destination) pair. Add source addresses (--source-ip 127.0.0.0/24 on \
             loopback; `ip addr add` elsewhere) or widen the range (sysctl -w \
             net.ipv4.ip_local_port_range=\"1024 65535\")"
            ),
        ));
    }
    if busy >= 0.5 {
        return Some(cause(
            Code::ClientCpu,
            format!(
                "the connect times include the client's own work: {calls}, so established \
             connections waited for its loop. The client ran at its limit ({:.0}/s asked); for \
             the server's own figure, ramp slower (--connect-rate) or give the client more cores \
             (--workers, --processes, more hosts)",
                sc.ramp.rate()
            ),
        ));
    }
    None
}

/// What due queries waited for before they were sent, from the counts
/// of [`crate::metrics::WAIT_CAUSES`]: the server's pace, named with the
/// figures that show it. None when none waited.
pub fn wait_text(sc: &Scenario, t: &QueryTotals, h: &crate::metrics::Histograms) -> Option<String> {
    use crate::metrics::{W_SLOT, W_SOCKET, W_WINDOW};
    let total: u64 = t.waited.iter().sum();
    if total == 0 {
        return None;
    }
    let most = (0..t.waited.len())
        .max_by_key(|&i| t.waited[i])
        .unwrap_or(W_WINDOW);
    let n = t.waited[most];
    let mean_us = |h: &hdrhistogram::Histogram<u64>| if h.is_empty() { 0.0 } else { h.mean() };
    Some(match most {
        W_SLOT => {
            let slots = sc.connections.max(1);
            let per_query = mean_us(&h.service_time) + mean_us(&h.connect_time);
            let syscall = mean_us(&h.connect_syscall);
            if per_query > 0.0 && syscall * 2.0 > per_query {
                // Most of a query's time is the client's own connect()
                // (its kernel searching for a free port): not the server.
                return Some(format!(
                    "{n} queries waited for a free tcp-per-query slot (--concurrency {slots}), \
                     and most of a query's {} is the client's own connect() call ({}, its \
                     kernel searching for a free port): give it more source addresses \
                     (--source-ip) or a wider net.ipv4.ip_local_port_range",
                    human_us(per_query.round() as u64),
                    human_us(syscall.round() as u64)
                ));
            }
            let carry = if per_query > 0.0 {
                format!(
                    ": at {} a query (connect and answer, mean) {slots} slot{} carry at most \
                     {:.0}/s (Little's law)",
                    human_us(per_query.round() as u64),
                    if slots == 1 { "" } else { "s" },
                    slots as f64 * 1e6 / per_query
                )
            } else {
                String::new()
            };
            format!(
                "{n} queries waited for a free tcp-per-query slot (--concurrency {slots}){carry}: \
                 the server's time per query sets the pace, not the client. Raise --concurrency \
                 or ask for less"
            )
        }
        W_SOCKET => format!(
            "{n} queries waited behind sockets the server did not read (their send buffers \
             full): the server was not reading what it was sent"
        ),
        _ => {
            let window = match sc.traffic.as_ref().and_then(|t| t.window) {
                Some(w) => format!("--window {w}"),
                None => "window".into(),
            };
            format!(
                "{n} queries waited for room in their connection's {window} (answers still \
                 owed): the server answered slower than they came due"
            )
        }
    })
}

/// The client's loop kept its time while queries were late (its p99 lag
/// under 1 ms, or a quarter of theirs): what they waited for was not the
/// client's loop.
pub(super) fn loop_kept(h: &crate::metrics::Histograms) -> bool {
    let lag = h.send_lag.value_at_quantile(0.99);
    let loop_lag = h.loop_lag.value_at_quantile(0.99);
    loop_lag <= 1000 || loop_lag * 4 <= lag
}

/// Whether the client's own lateness explains the response times, from
/// the figures: its send lag (and its loop's) set against the service
/// time's tail, and its CPU (`cpu`: a client near its cores' limit, or
/// sharing them with the server, clears neither side). None when it sent
/// on time and was not busy. `not_sent`: queries given up behind full
/// sockets or windows; then the lag is theirs, not the client's.
/// `embedded`: the server ran in the client's process, on its cores.
pub fn lag_warning(
    h: &crate::metrics::Histograms,
    not_sent: u64,
    waited: Option<&str>,
    cpu: Option<&crate::evidence::ClientCpu>,
    embedded: bool,
) -> Option<Cause> {
    let lag = h.send_lag.value_at_quantile(0.99);
    let loop_lag = h.loop_lag.value_at_quantile(0.99);
    let busy = cpu.filter(|c| c.cpu_pct >= CLIENT_BUSY_PCT);
    let competing =
        cpu.filter(|c| c.shares_cores_with_server && c.with_server_pct >= CLIENT_BUSY_PCT);
    let contended = match (busy, competing) {
        (_, Some(c)) => Some(format!(
            "the client used {:.0}% of its {} core(s), which it shares with the server: the two \
             together kept them {:.0}% busy",
            c.cpu_pct, c.cores, c.with_server_pct
        )),
        (Some(c), None) => Some(format!(
            "the client used {:.0}% of its {} core(s)",
            c.cpu_pct, c.cores
        )),
        _ => None,
    };
    let service_p99 = if h.service_time.is_empty() {
        0
    } else {
        h.service_time.value_at_quantile(0.99)
    };
    let contention_code = if competing.is_some() {
        Code::SharedCores
    } else {
        Code::ClientCpu
    };
    let bottleneck = if busy.is_some() {
        Code::ClientCpu
    } else {
        Code::ClientLate
    };
    let mk = |code: Code, side: Side, level: Level, words: String| {
        Cause::new(code, "lag", words)
            .with("service_p99_us", service_p99 as f64)
            .on(side)
            .level(level)
            .with("send_lag_p99_us", lag as f64)
            .with("loop_lag_p99_us", loop_lag as f64)
    };
    if lag.max(loop_lag) <= 1000 {
        // On time: it informs, and explains no failure.
        return contended.map(|c| {
            mk(
                contention_code,
                Side::None,
                Level::Note,
                format!(
                    "{c}; it sent on time, but the times measured include waits for a core on \
                 both sides: run the client on other cores (taskset) or another host to tell \
                 the server's own figure"
                ),
            )
        });
    }
    let lags = format!(
        "send lag p99 {}, its loop's p99 {}",
        human_us(lag),
        human_us(loop_lag)
    );
    // The loop kept its time while queries were late: they waited on
    // their connections (a window, a socket, a slot), for the server.
    if let (true, None, Some(w)) = (loop_kept(h), &contended, waited) {
        let never = if not_sent > 0 {
            format!(", and {not_sent} were never sent")
        } else {
            String::new()
        };
        return Some(mk(
            Code::ServerPace,
            Side::Server,
            Level::Note,
            format!(
                "the queries' send lag ({lags}) is time they waited for the server, not the \
             client's: {w}{never}; the wait counts in their response time"
            ),
        ));
    }
    if not_sent > 0 {
        return Some(mk(
            Code::ServerPace,
            Side::Server,
            Level::Note,
            format!(
                "queries waited to be sent ({lags}) behind their connections' full sockets \
             or windows, and {not_sent} were never sent: the server did not take them; the \
             wait counts in their response time"
            ),
        ));
    }
    if h.service_time.is_empty() {
        return Some(mk(
            Code::ClientLate,
            // Late by this much says nothing of whether the server answers.
            Side::None,
            Level::Warning,
            format!(
                "the client sent late ({lags}); with no answer there is no service time \
             to set it against"
            ),
        ));
    }
    let service = h.service_time.value_at_quantile(0.99);
    let sharing = cpu.filter(|c| c.shares_cores_with_server);
    let own_delay = lag * 2 >= service || loop_lag * 4 > service;
    if embedded && own_delay {
        return Some(mk(
            Code::EmbeddedServer,
            Side::Both,
            Level::Note,
            format!(
                "the client sent late ({lags}) against a service time p99 of {}; the \
             embedded server runs in the client's process, on its cores, so each delays the \
             other and neither figure is a server's own. Point the client at a server on \
             other cores or another host (throng server, or yours)",
                human_us(service)
            ),
        ));
    }
    // Every thread of a client under half a core was idle most of the
    // time: late, it waited to be run, not for CPU of its own.
    let idle = cpu.filter(|c| c.cpu_s < 0.5 * c.wall_s).map(|c| {
        format!(
            "it used {:.0}% of its {} core(s), less than half of one: its threads waited to be \
             run (other work on these cores, or the host not running this machine), not for \
             CPU of their own. Run it where it has cores to itself (taskset -c, a quieter \
             host); more workers will not help",
            c.cpu_pct, c.cores
        )
    });
    if let (true, Some(c)) = (lag * 2 >= service, sharing) {
        Some(mk(
            Code::SharedCores,
            Side::Both,
            Level::Warning,
            format!(
                "the client sent late ({lags}) against a service time p99 of {}, and it \
             shares its {} core(s) with the server (the two kept them {:.0}% busy; the client \
             {:.0}%): each delays the other, so neither side's figure is its own. Run the \
             client on other cores (taskset -c) or another host",
                human_us(service),
                c.cores,
                c.with_server_pct,
                c.cpu_pct
            ),
        ))
    } else if let (true, Some(idle)) = (lag * 2 >= service, &idle) {
        Some(mk(
            Code::ClientLate,
            Side::Client,
            Level::Warning,
            format!(
                "the client sent late ({lags}) against a service time p99 of {}: much of \
             the response time is its own delay, yet {idle}",
                human_us(service)
            ),
        ))
    } else if lag * 2 >= service {
        Some(mk(
            bottleneck,
            Side::Client,
            Level::Warning,
            format!(
                "the client is the bottleneck: it sent late ({lags}) against a service \
             time p99 of {}: much of the response time is its own delay. Give it more cores \
             (--workers, --processes, more hosts) or ask for less",
                human_us(service)
            ),
        ))
    } else if let Some(c) = contended {
        Some(mk(
            contention_code,
            Side::Both,
            Level::Note,
            format!(
                "the client sent some queries late ({lags}) and {c}: the service time's tail \
             (p99 {}) cannot be put on the server alone; run the client on other cores \
             (taskset) or another host to tell",
                human_us(service)
            ),
        ))
    } else if let (true, Some(idle)) = (loop_lag * 4 > service, &idle) {
        Some(mk(
            Code::ClientLate,
            Side::Both,
            Level::Note,
            format!(
                "the client sent some queries late ({lags}); a loop that late reads the \
             answers late as well, so the service time's tail (p99 {}) holds the client's own \
             delay and cannot be put on the server alone. And {idle}",
                human_us(service)
            ),
        ))
    } else if loop_lag * 4 > service {
        // A loop that late reads the answers late too: the service time's
        // tail holds the client's own delay.
        Some(mk(
            Code::ClientLate,
            Side::Both,
            Level::Note,
            format!(
                "the client sent some queries late ({lags}); a loop that late reads the \
             answers late as well, so the service time's tail (p99 {}) holds the client's own \
             delay and cannot be put on the server alone. For the server's own figure, give \
             the client more cores (--workers, --processes, more hosts) or ask for less",
                human_us(service)
            ),
        ))
    } else {
        Some(mk(
            Code::ServerLatency,
            Side::Server,
            Level::Note,
            format!(
                "the client sent some queries late ({lags}), but the service time's tail \
             (p99 {}) is well above that: the tail is the server's or the network's, not the \
             client's",
                human_us(service)
            ),
        ))
    }
}

/// A service-time tail at the delayed-ACK timer (about 40 ms on Linux)
/// while queries were pipelined on connections: the server's replies wait
/// in Nagle's algorithm for the ACK of the previous one (a server that does
/// not set TCP_NODELAY). Says so with both fixes.
pub fn nagle_hint(
    sc: &Scenario,
    q: &crate::outcome::QueryOutcome,
    h: &crate::metrics::Histograms,
) -> Option<Cause> {
    if matches!(sc.transport, Transport::Udp) || h.service_time.is_empty() {
        return None;
    }
    let t = &q.totals;
    let (p50, p99, p999) = (
        h.service_time.value_at_quantile(0.5),
        h.service_time.value_at_quantile(0.99),
        h.service_time.value_at_quantile(0.999),
    );
    // The tail reaches the timer (p99 or p99.9 at 30..=60 ms: an answer
    // waits up to the timer, less when the client's next query carries the
    // ACK sooner), far above the median, and at least one query in a
    // thousand went out behind another.
    let (tail, q_tail) = if (30_000..=60_000).contains(&p99) {
        (p99, 0.99)
    } else {
        (p999, 0.999)
    };
    let near_timer = (30_000..=60_000).contains(&tail) && p50 * 10 < tail;
    // A client whose own loop ran that late read the answers late: the
    // tail is its wait for a core, not the server's Nagle. (The loop's lag
    // is read at the tail's own quantile: a loop late by 20 ms at p99 can
    // be late by 28 ms at p99.9, enough to explain a p99.9 tail of 41 ms.)
    let client_late = h.loop_lag.value_at_quantile(q_tail) * 2 >= tail;
    if !near_timer || client_late || t.pipelined * 1000 < t.sent {
        return None;
    }
    let words = format!(
        "the service time's tail (p99 {}, p99.9 {}) reaches the delayed-ACK timer (~40 ms), \
         far above its p50 ({}), and {:.1}% of the queries went out while another was in \
         flight on their \
         connection: the server's replies likely wait in Nagle's algorithm for the ACK of the \
         previous one. On the server set TCP_NODELAY on its sockets; on throng's side send one \
         query at a time per connection (--window 1, or --spread round-robin --arrivals \
         constant)",
        human_us(p99),
        human_us(p999),
        human_us(p50),
        100.0 * t.pipelined as f64 / t.sent.max(1) as f64
    );
    Some(
        Cause::new(Code::Nagle, "nagle", words)
            .with("service_p50_us", p50 as f64)
            .with("service_p99_us", p99 as f64)
            .with("service_p999_us", p999 as f64),
    )
}

/// DNS answers without TC=1 (whole).
pub(super) fn whole_answers(q: &crate::outcome::QueryOutcome) -> u64 {
    q.statuses
        .rcodes
        .iter()
        .sum::<u64>()
        .saturating_sub(q.totals.truncated)
}

/// Over UDP, `truncated` answers of the run's one question while `whole`
/// others of it came whole: the answer fits a datagram, so the server cut
/// them to slow this client (response rate limiting's slip).
pub(super) fn rate_limited(sc: &Scenario, truncated: u64, whole: u64) -> bool {
    let one_question = match sc.traffic.as_ref().map(|t| &t.query) {
        Some(crate::scenario::Query::Dns { names, qtypes, .. }) => {
            names.len() == 1 && qtypes.len() <= 1
        }
        _ => false,
    };
    sc.transport == Transport::Udp && truncated > 0 && whole > 0 && one_question
}

/// The summary's words for `n` DNS answers with the TC bit set: counted
/// as answered (the server did answer), but cut short, and why, from what
/// the server did: over UDP, answers to the same question that came whole
/// prove the answer fits a datagram, so the server cut the others to slow
/// this client (response rate limiting's "slip", nsd's and BIND's
/// rrl-slip), which no --edns changes; `whole`: DNS answers without TC,
/// `timed_out`: queries it dropped (rate limiting drops the rest).
pub(super) fn truncated_words(sc: &Scenario, n: u64, whole: u64, timed_out: u64) -> String {
    let cut = format!("{n} answers had TC=1 (counted as answered)");
    if sc.transport != Transport::Udp {
        return format!(
            "{cut}: the server cut them short even over TCP, which carries answers up to 64 KiB whole"
        );
    }
    let dropped = if timed_out > 0 {
        format!(", and {timed_out} queries got no answer at all (dropped)")
    } else {
        String::new()
    };
    if rate_limited(sc, n, whole) {
        format!(
            "{cut}: the same question came whole over UDP {whole} times, so the answer fits a \
             datagram{dropped}: the server truncates to slow this client down (response rate \
             limiting, \"slip\": nsd's rrl-ratelimit, BIND's rate-limit), and a larger --edns \
             changes nothing. Lower the rate, spread it over more source addresses, or exempt \
             this client in the server's rate limiting"
        )
    } else if whole > 0 {
        format!(
            "{cut}, {whole} came whole{dropped}: either some of the names' answers do not fit a \
             UDP datagram (--edns SIZE offers a larger one; over TCP they come whole), or, when \
             the same names also came whole, the server's response rate limiting truncates \
             (\"slip\") to slow this client down"
        )
    } else {
        format!(
            "{cut}, none came whole{dropped}: the answers do not fit a UDP datagram (--edns SIZE \
             offers a larger one; over TCP, --transport tcp, they come whole), or the server's \
             response rate limiting truncates every answer; one query over TCP tells which"
        )
    }
}

/// Over UDP, queries sent and not one datagram back: nothing serves
/// UDP there or a firewall drops the datagrams (the usual causes, first),
/// or the server answers from another address or port than it was asked
/// on, which a connected UDP socket never receives (the kernel drops it).
pub fn udp_silence_hint(sc: &Scenario, o: &Outcome) -> Option<&'static str> {
    let t = &o.queries.as_ref()?.totals;
    let silent = sc.transport == Transport::Udp && t.timed_out > 0 && t.bytes_in == 0;
    silent.then_some(
        "no answer came back over UDP (every query timed out): nothing serves UDP on that \
         address and port, a firewall drops the datagrams, or the server answers from another \
         address or port than it was asked on, which throng's connected UDP sockets never \
         receive (tcpdump on either side shows which)",
    )
}

/// The hint for TLS failures, by the first error's words: a session that
/// broke after its handshake, a server that does not speak TLS, one that
/// refused the handshake or never finished it is not a question of the
/// client's trust.
pub(super) fn tls_hint(first_error: Option<&str>) -> (Side, &'static str) {
    use crate::metrics::{AFTER_HANDSHAKE, NOT_TLS, TLS_ALERT, TLS_TIMED_OUT};
    match first_error {
        Some(e) if e.starts_with(AFTER_HANDSHAKE) => (
            Side::Network,
            "TLS sessions broke after their handshake succeeded (the first error is shown \
             above): the server, or something on the path, sent bytes that are not records of \
             the session; certificates and --sni are not the cause",
        ),
        Some(e) if e.starts_with(NOT_TLS) => (
            Side::Server,
            "the server did not answer the ClientHello with TLS (the first error is shown \
             above): what listens on that port does not speak TLS (a plain TCP port? DNS over \
             TLS is port 853)",
        ),
        Some(e) if e.starts_with(TLS_ALERT) => (
            Side::Server,
            "the server refused the handshake (its alert is shown above): it accepts none of \
             the TLS versions or ciphers offered, or not the name (--sni) or protocol (--alpn) \
             asked, or it wants a client certificate",
        ),
        Some(e) if e.starts_with(TLS_TIMED_OUT) => (
            Side::Server,
            "the server accepted the connections but did not answer the ClientHello in time \
             (nothing, or not all of it, came back within --connect-timeout): what listens on \
             that port may not speak TLS and waits for bytes of its own protocol (a plain TCP \
             port? DNS over TLS is port 853), or it is too busy to finish handshakes (a longer \
             --connect-timeout tells the two apart); certificates and --sni are not the cause",
        ),
        _ => (Side::Client, Bucket::Tls.hint()),
    }
}
