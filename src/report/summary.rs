//! The summary at the end of a client run: its counts, times and rates.

use super::*;

/// The human summary of a run.
pub fn summary(sc: &Scenario, o: &Outcome, out: &mut dyn Write) -> io::Result<()> {
    connection_lines(sc, o, out)?;
    ramp_lines(sc, o, out)?;
    let t = &o.totals;
    time_row("connect time", &o.hists.connect_time, "", out)?;
    time_row(
        "in connect()",
        &o.hists.connect_syscall,
        "  (inside the client's kernel)",
        out,
    )?;
    let resumed = format!("  ({} resumed)", t.tls_resumed);
    time_row("tls handshake", &o.hists.tls_handshake, &resumed, out)?;
    writeln!(out, "  closed        {} by throng", t.closed)?;
    if t.peer_closed > 0 {
        writeln!(
            out,
            "  peer closed   {} with nothing in flight: after answering all they were sent, or idle \
             (not failures){}",
            t.peer_closed,
            peer_closed_fate(sc, o)
        )?;
    }
    if let Some(q) = &o.queries {
        let cpu = o.observed.client.as_ref();
        queries_summary(sc, q, &o.hists, (t.failed_total(), cpu), out)?;
        if sc.transport == Transport::TcpPerQuery && !o.hists.service_time.is_empty() {
            let service = o.hists.service_time.mean().max(1.0);
            writeln!(
                out,
                "    connect share  {:.0}% of the mean service time ({} of {}) is the TCP handshake",
                100.0 * o.hists.connect_time.mean() / service,
                human_us(o.hists.connect_time.mean() as u64),
                human_us(service as u64)
            )?;
        }
    }
    if let (Some(p), Some(listen)) = (&o.push, &sc.push) {
        push_summary(sc, listen, p, &o.hists, out)?;
    }
    if let Some(e) = &t.tls_error {
        writeln!(out, "  tls error     {e}")?;
    }
    // Connections the client closed because their bytes could not be
    failure_hints(sc, o, out)?;
    observed_lines(sc, o, out)?;
    unverified_hints(sc, o, out)
}

/// The connections: asked, attempted, established (verified or not), failed
/// by cause, the peak open.
fn connection_lines(sc: &Scenario, o: &Outcome, out: &mut dyn Write) -> io::Result<()> {
    let t = &o.totals;
    let status = if o.interrupted { " (interrupted)" } else { "" };
    writeln!(
        out,
        "throng client: {:.1}s{status}",
        o.elapsed.as_secs_f64()
    )?;
    for w in &o.overrun {
        writeln!(out, "  OVERRUN: {w}")?;
    }
    match sc.transport {
        Transport::TcpPerQuery => writeln!(
            out,
            "  target        a connection per query, {} at once at most",
            sc.connections
        )?,
        Transport::Udp => writeln!(out, "  target        {} UDP sockets", sc.connections)?,
        _ => writeln!(out, "  target        {} connections", sc.connections)?,
    }
    writeln!(out, "  attempted     {}", t.attempted)?;
    let unverified = if sc.verify {
        format!(" (verified {}, unverified {})", t.verified, t.unverified)
    } else {
        " (not verified: --no-verify)".into()
    };
    writeln!(out, "  established   {}{unverified}", t.established)?;
    if t.probe_rejected > 0 {
        writeln!(
            out,
            "  probe         the server rejected the probe on {} connection(s): {} (it accepted \
             them; give the protocol it speaks: --proto, --http-request, --qname, --message; or \
             --no-verify)",
            t.probe_rejected,
            t.probe_reply.as_deref().unwrap_or("?")
        )?;
    } else if sc.verify && sc.traffic.is_none() && sc.probe.is_none() && sc.push.is_none() {
        writeln!(
            out,
            "  probe         none: --proto raw without --marker cannot tell an answer from \
             other bytes, so connections are not verified"
        )?;
    }
    writeln!(out, "  failed        {}", t.failed_total())?;
    for b in Bucket::ALL {
        let n = t.failed[b as usize];
        if n > 0 {
            writeln!(out, "    {:<15}{n}", b.key())?;
        }
    }
    for (errno, n) in &t.other_errno {
        writeln!(
            out,
            "      errno {errno} ({}): {n}",
            io::Error::from_raw_os_error(*errno)
        )?;
    }
    writeln!(out, "  peak open     {}", o.peak)?;
    Ok(())
}

/// How the connections opened: the ramp (or the schedule), those
/// replaced after it, and why a ramp stopped.
fn ramp_lines(sc: &Scenario, o: &Outcome, out: &mut dyn Write) -> io::Result<()> {
    let t = &o.totals;
    match o.ramp_time {
        _ if sc.transport == Transport::TcpPerQuery => {}
        Some(r) => {
            let rate = sc.ramp_established(t) as f64 / r.as_secs_f64().max(1e-9);
            writeln!(
                out,
                "  ramp          {:.2} s, {:.0} connections/s established (asked {:.0}/s)",
                r.as_secs_f64(),
                rate,
                sc.ramp.rate()
            )?;
            if let Some(v) = o
                .verify_time
                .filter(|v| v.as_secs_f64() > r.as_secs_f64() + 0.05)
            {
                writeln!(
                    out,
                    "  verified by   {:.2} s (verification's own time: the ramp's figure above \
                     is establishment's)",
                    v.as_secs_f64()
                )?;
            }
        }
        None if sc.connections_schedule.is_some() => {
            writeln!(
                out,
                "  schedule      {:.1} s",
                sc.schedule_seconds().unwrap_or(0.0)
            )?;
            if (o.peak.max(0) as u64) < sc.connections {
                writeln!(
                    out,
                    "    warning: the schedule asked for {} open connections at its highest; at \
                     most {} were open (held back by the connect rate, {:.0}/s, or by failures \
                     above): the levels it asked were not all reached",
                    sc.connections,
                    o.peak,
                    sc.ramp.rate()
                )?;
            }
        }
        None => writeln!(out, "  ramp          not finished")?,
    }
    let replaced = t.established - t.established_initial.min(t.established);
    if replaced > 0 && sc.transport != Transport::TcpPerQuery && sc.connections_schedule.is_none() {
        writeln!(
            out,
            "  replaced      {replaced} connections established after the ramp's own (not in its \
             rate)"
        )?;
    }
    if let Some(why) = &o.ramp_stopped {
        writeln!(out, "  ramp stopped  {why}")?;
    }
    Ok(())
}

/// A hint for each cause of failed connections.
fn failure_hints(sc: &Scenario, o: &Outcome, out: &mut dyn Write) -> io::Result<()> {
    let t = &o.totals;
    // framed are counted with resets: say whose bytes they were.
    let garbled = o.push.as_ref().map_or(0, |p| p.malformed)
        + o.queries.as_ref().map_or(0, |q| {
            q.totals.errors[crate::metrics::E_MALFORMED]
                + q.totals.errors[crate::metrics::E_OVERSIZED]
        });
    for b in Bucket::ALL {
        if t.failed[b as usize] > 0 {
            let hint = match b {
                Bucket::Tls => tls_hint(t.tls_error.as_deref()),
                Bucket::Reset if garbled >= t.failed[b as usize] => {
                    "the client closed these connections: the server sent bytes that are not \
                     the protocol asked for (counted malformed or oversized): check --proto (and \
                     --push-format) against what the server speaks"
                }
                Bucket::TimedOut | Bucket::HalfOpen => {
                    &*unaccepted_hint(b, o).unwrap_or_else(|| b.hint().into())
                }
                _ => b.hint(),
            };
            writeln!(out, "  hint ({}): {hint}", b.key())?;
            if b == Bucket::NoFreePort && sc.transport == Transport::TcpPerQuery {
                writeln!(
                    out,
                    "  hint (tcp-per-query): each closed connection keeps its port in TIME_WAIT \
                     for 60 s, so the port range runs dry at (ports x sources) / 60 queries/s: \
                     set net.ipv4.tcp_tw_reuse=1 (sysctl -w) or add source addresses (--source-ip)"
                )?;
            }
        }
    }
    Ok(())
}

/// What was seen of the machine: the client's CPU, the server's process,
/// and the handshake's or the client's own limits.
fn observed_lines(sc: &Scenario, o: &Outcome, out: &mut dyn Write) -> io::Result<()> {
    if let Some(c) = &o.observed.client {
        let embedded = if sc.embedded_server {
            " (with the embedded server's: it runs in this process)"
        } else {
            ""
        };
        writeln!(out, "  client cpu    {}{embedded}", cpu_words(c, o))?;
    }
    if let Some(seen) = &o.observed.server {
        writeln!(out, "  server seen   {}", seen.line())?;
    }
    if let Some(h) = retransmit_hint(o) {
        writeln!(out, "  hint (handshake): {h}")?;
    } else if let Some(h) = client_connect_hint(sc, o) {
        writeln!(out, "  hint (client): {h}")?;
    }
    Ok(())
}

/// Why connections went unverified, from what was seen.
fn unverified_hints(sc: &Scenario, o: &Outcome, out: &mut dyn Write) -> io::Result<()> {
    let t = &o.totals;
    let udp_silent = udp_silence_hint(sc, o);
    if let Some(h) = udp_silent {
        writeln!(out, "  hint (udp): {h}")?;
    }
    if udp_silent.is_some() {
        // Said above, with the causes UDP has.
    } else if t.unverified > 0 && sc.push.is_some() {
        writeln!(
            out,
            "  hint (unverified): {} connection(s) got no message in all their time (more than \
             two periods): the server accepted them and pushed nothing to them. Is it a push \
             server, with this --push-format? (throng server --mode push, or lines with a \
             sequence number first)",
            t.unverified
        )?;
    }
    if let Some(stall) = verification_stall(o) {
        writeln!(out, "  verified      {stall}")?;
    }
    if udp_silent.is_some() || (t.unverified > 0 && sc.push.is_some()) {
        // Said above.
    } else if let Some(cause) = o
        .observed
        .server
        .as_ref()
        .filter(|_| t.unverified > 0)
        .and_then(|s| s.cause(t.unverified))
    {
        writeln!(
            out,
            "  hint (unverified): {} connection(s) were established but never answered: {cause}",
            t.unverified
        )?;
    } else if t.unverified > 0 && t.verified == 0 && t.probe_rejected == 0 {
        // Not one answer: an accept queue drops some connections, not all.
        let what = sc
            .traffic
            .as_ref()
            .map(|t| t.query.name())
            .or(sc.probe.as_ref().map(|q| q.name()))
            .unwrap_or("DNS");
        writeln!(
            out,
            "  hint (unverified): no connection got an answer (to the probe within \
             --connect-timeout, or to any query): the server does not answer {what} queries, or \
             not in time. Give the protocol it speaks (--proto, --http-request, --qname, \
             --message) or --no-verify"
        )?;
    } else if t.unverified > 0 && sc.transport == Transport::Udp {
        // UDP has no accept queue: a socket without an answer is one whose
        // every datagram went unanswered.
        writeln!(
            out,
            "  hint (unverified): {} of the UDP sockets never got an answer to any of their \
             queries while others did: the server dropped what they sent (its rate limiting, \
             or datagrams lost on the way: see the queries' timeouts); --no-verify skips the \
             check",
            t.unverified
        )?;
    } else if let (true, Some(s)) = (t.unverified > 0, &o.observed.server) {
        // Seen, and its queue and fds show no cause: it took them.
        writeln!(
            out,
            "  hint (unverified): {} connection(s) never got an answer (to the probe within \
             --connect-timeout, or with queries to any of them): the server's \
             process ({}, pid {}) had fds to spare and its accept queue (up to {}) never \
             overflowed, so it accepted them and did not answer them (a limit of its own, or \
             it answers some connections only: see its log); --no-verify skips the check",
            t.unverified, s.name, s.pid, s.accept_queue_max
        )?;
    } else if t.unverified > 0 {
        writeln!(
            out,
            "  hint (unverified): some connections never got an answer (to the probe within \
             --connect-timeout, or with queries to any of them): the server may not have accepted \
             them (a full accept queue), or it does not answer this protocol; --no-verify skips \
             the check"
        )?;
    }
    Ok(())
}

/// The client's CPU in words: its share of the cores it may use, per
/// answer, and whether it shared them with the server.
pub(super) fn cpu_words(c: &crate::evidence::ClientCpu, o: &Outcome) -> String {
    let per_answer = if c.cpu_us_per_answer > 0.0 {
        format!(", {:.1} µs per answer", c.cpu_us_per_answer)
    } else {
        String::new()
    };
    let shared = match &o.observed.server {
        Some(s) if c.shares_cores_with_server => format!(
            "; it shares its cores with the server ({}, {:.2} s of CPU)",
            s.name, s.cpu_s
        ),
        _ => String::new(),
    };
    format!(
        "{:.0}% of {} core(s) ({:.2} s){per_answer}{shared}",
        c.cpu_pct, c.cores, c.cpu_s
    )
}

/// A client this busy (% of its cores) may be why queries were late.
pub const CLIENT_BUSY_PCT: f64 = 80.0;

/// What an answer that failed says about the server, for the summary.
pub(super) fn failed_answer_words(what: &str) -> &'static str {
    match what {
        "REFUSED" => {
            "the server refuses this client: its access control (unbound's access-control, \
             BIND's allow-query), or its rate limiting"
        }
        "SERVFAIL" => {
            "the server failed to answer: an upstream it could not reach, or its own error"
        }
        "FORMERR" => "the server could not parse the query: check --qname, --qtype, --edns",
        "NOTIMP" => "the server does not implement this query (its type or opcode)",
        "mismatch" => "the reply was not the one expected (--validate, a line that is not a pong)",
        h if h.starts_with("http_5") => {
            "the server failed the request or is overloaded (a 5xx: its error log says which)"
        }
        h if h.starts_with("http_4") => {
            "the server rejected the request: check --http-request (path, Host, method)"
        }
        _ => "not a success for this protocol (--ok-rcodes, --ok-status widen what is)",
    }
}

/// What the server's closes did to a run with queries: replaced, or (with
/// --no-reconnect) the connections and rate they took away.
pub(super) fn peer_closed_fate(sc: &Scenario, o: &Outcome) -> String {
    if sc.traffic.is_none() || sc.transport == Transport::TcpPerQuery {
        return String::new();
    }
    if sc.reconnect || sc.replace_closed {
        return ", each replaced".into();
    }
    let open_at_end = o.per_second.last().map_or(0, |s| s.connections.max(0));
    let first = o.per_second.first().and_then(|s| s.answered).unwrap_or(0);
    let last = o
        .per_second
        .iter()
        .rev()
        .find_map(|s| s.answered)
        .unwrap_or(0);
    format!(
        "; not replaced (--no-reconnect): {open_at_end} of {} open at the end, answered \
         {first}/s in the first second and {last}/s in the last",
        sc.connections
    )
}

/// Above this share of the messages due received, and under this jitter
/// p99, the server kept its period.
pub(super) const PUSH_KEPT_SHARE: f64 = 0.999;

pub(super) const PUSH_KEPT_JITTER_US: u64 = 5_000;

/// A client whose workers were busy this share of their time read late.
pub(super) const PUSH_BUSY: f64 = 0.8;

/// --proto push in words: what arrived, whether the server kept its
/// period, and the times.
pub(super) fn push_summary(
    sc: &Scenario,
    listen: &crate::scenario::PushListen,
    p: &crate::metrics::PushTotals,
    h: &crate::metrics::Histograms,
    out: &mut dyn Write,
) -> io::Result<()> {
    let share = p.received as f64 / p.expected.max(1) as f64;
    writeln!(
        out,
        "  push          received {} of {} expected ({:.2}%), one every {} a connection",
        p.received,
        p.expected,
        100.0 * share,
        human_us((listen.every_s * 1e6).round() as u64)
    )?;
    let mut odd = Vec::new();
    if p.lost > 0 {
        odd.push(format!(
            "lost {} ({:.2}%) on {} connection(s)",
            p.lost,
            100.0 * p.lost as f64 / p.expected.max(1) as f64,
            p.connections_with_loss
        ));
    }
    for (n, what) in [
        (p.out_of_order, "out of order"),
        (p.duplicates, "duplicates"),
        (p.malformed, "malformed (connection ended)"),
    ] {
        if n > 0 {
            odd.push(format!("{what} {n}"));
        }
    }
    if !odd.is_empty() {
        writeln!(out, "    {}", odd.join(", "))?;
    }
    time_row(
        "  jitter",
        &h.push_jitter,
        "  (arrival gap minus the period)",
        out,
    )?;
    time_row(
        "  gap",
        &h.push_gap,
        "  (between arrivals on a connection)",
        out,
    )?;
    if let Some(clock) = crate::engine::delay_clock(sc, listen) {
        if p.stamps_ahead > 0 {
            writeln!(
                out,
                "    delay       not measured: {} send stamps were ahead of this host's {} \
                 clock: {}",
                p.stamps_ahead,
                clock,
                if clock == "wall" {
                    "the hosts' clocks disagree (--clock-sync trusts that they agree)"
                } else {
                    "the server is not on this host (a forwarded port?)"
                }
            )?;
        } else {
            let from = match clock {
                "wall" => "  (from the send stamp, wall clocks: --clock-sync)",
                _ => "  (from the send stamp; the server is on this host)",
            };
            time_row("  delay", &h.push_delay, from, out)?;
        }
    }
    let jitter_p99 = (!h.push_jitter.is_empty()).then(|| h.push_jitter.value_at_quantile(0.99));
    let kept = share >= PUSH_KEPT_SHARE && jitter_p99.is_none_or(|j| j <= PUSH_KEPT_JITTER_US);
    // A client whose workers never waited read what arrived late: its
    // jitter and delay are its own as much as the server's.
    let busy = p.busy();
    let late_reads = busy >= PUSH_BUSY && !(kept && share >= PUSH_KEPT_SHARE);
    let verdict = if p.expected == 0 {
        "no message was due: the connections did not last a period".to_string()
    } else if late_reads && share >= PUSH_KEPT_SHARE {
        format!(
            "cannot tell whether the server kept its period: {:.2}% arrived, but the client's \
             workers were busy {:.0}% of the time, so arrivals were read late and the jitter \
             (p99 {}) is partly the client's own. Give the client more cores (--processes, \
             another host: throng cluster)",
            100.0 * share,
            100.0 * busy,
            jitter_p99.map_or("-".into(), human_us)
        )
    } else if kept {
        format!(
            "the server kept its period: {:.2}% arrived, jitter p99 {}",
            100.0 * share,
            jitter_p99.map_or("-".into(), human_us)
        )
    } else {
        let why = if share < PUSH_KEPT_SHARE {
            let tcp = sc.transport != Transport::Udp;
            format!(
                "{:.2}% of the messages due arrived{}",
                100.0 * share,
                if tcp {
                    " (over TCP nothing is lost on the way: the server skipped them, sent \
                     them late, fell silent or closed the connections; a throng server's \
                     summary says which)"
                } else {
                    " (over UDP, lost on the way or not sent by the server: a throng \
                     server's summary says how many it sent)"
                }
            )
        } else {
            format!(
                "jitter p99 {} is above {}",
                jitter_p99.map_or("-".into(), human_us),
                human_us(PUSH_KEPT_JITTER_US)
            )
        };
        format!("the server did not keep its period: {why}")
    };
    writeln!(out, "    {verdict}")?;
    if late_reads && share < PUSH_KEPT_SHARE {
        writeln!(
            out,
            "    warning: the client's workers were busy {:.0}% of the time: it read late and \
             its sockets may have filled (then the server skipped messages for it). Measure \
             again with the client on more cores (--processes, another host) before blaming \
             the server",
            100.0 * busy
        )?;
    }
    Ok(())
}

/// One line of connection-time percentiles (nothing when empty).
pub(super) fn time_row(
    name: &str,
    h: &hdrhistogram::Histogram<u64>,
    tail: &str,
    out: &mut dyn Write,
) -> io::Result<()> {
    if h.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  {name:<14}p50 {}  p90 {}  p99 {}  p99.9 {}  max {}{tail}",
        human_us(h.value_at_quantile(0.5)),
        human_us(h.value_at_quantile(0.9)),
        human_us(h.value_at_quantile(0.99)),
        human_us(h.value_at_quantile(0.999)),
        human_us(h.max())
    )
}

pub(super) fn latency_row(
    name: &str,
    h: &hdrhistogram::Histogram<u64>,
    out: &mut dyn Write,
) -> io::Result<()> {
    if h.is_empty() {
        return writeln!(out, "    {name:<15}no answers");
    }
    writeln!(
        out,
        "    {name:<15}p50 {}  p90 {}  p99 {}  p99.9 {}  p99.99 {}  max {}  mean {}  stdev {}",
        human_us(h.value_at_quantile(0.5)),
        human_us(h.value_at_quantile(0.9)),
        human_us(h.value_at_quantile(0.99)),
        human_us(h.value_at_quantile(0.999)),
        human_us(h.value_at_quantile(0.9999)),
        human_us(h.max()),
        human_us(h.mean() as u64),
        human_us(h.stdev() as u64),
    )
}

pub(super) fn mbps(bytes: u64, secs: f64) -> String {
    format!("{:.2} Mbps", bytes as f64 * 8.0 / secs.max(1e-9) / 1e6)
}

/// The query part of the summary (`conns_failed`: connections that
/// failed, whose queries may never have been sent).
pub(super) fn queries_summary(
    sc: &Scenario,
    q: &crate::engine::QueryOutcome,
    h: &crate::metrics::Histograms,
    (conns_failed, cpu): (u64, Option<&crate::evidence::ClientCpu>),
    out: &mut dyn Write,
) -> io::Result<()> {
    use crate::scenario::Model;
    let t = &q.totals;
    let closed = matches!(
        sc.traffic.as_ref().map(|t| &t.model),
        Some(Model::ClosedLoop { .. })
    );
    let secs = q.seconds.max(1e-9);
    // Achieved is what the server answered; what was sent is beside it.
    let achieved = t.answered as f64 / secs;
    let sent = t.sent as f64 / secs;
    writeln!(out, "  queries       over {secs:.2} s")?;
    if closed {
        writeln!(
            out,
            "    rate        {achieved:.0}/s achieved (answered; closed loop: set by the server), \
             {sent:.0}/s sent"
        )?;
    } else {
        open_loop_rates(sc, q, h, conns_failed, out)?;
    }
    answer_lines(sc, q, out)?;
    latency_lines(sc, q, h, (closed, conns_failed, cpu), out)?;
    if let Some(h) = nagle_hint(sc, q, h) {
        writeln!(out, "  hint (nagle): {h}")?;
    }
    writeln!(
        out,
        "  bytes         out {} ({}), in {} ({})",
        human_bytes(t.bytes_out as f64),
        mbps(t.bytes_out, secs),
        human_bytes(t.bytes_in as f64),
        mbps(t.bytes_in, secs),
    )?;
    Ok(())
}

/// The rate of an open-loop run: achieved and sent of the target, and
/// why either fell short.
fn open_loop_rates(
    sc: &Scenario,
    q: &crate::engine::QueryOutcome,
    h: &crate::metrics::Histograms,
    conns_failed: u64,
    out: &mut dyn Write,
) -> io::Result<()> {
    use crate::scenario::Model;
    let t = &q.totals;
    let secs = q.seconds.max(1e-9);
    let achieved = t.answered as f64 / secs;
    let sent = t.sent as f64 / secs;
    let target = q.target_queries / secs;
    let of = |r: f64| {
        if target > 0.0 {
            r / target * 100.0
        } else {
            100.0
        }
    };
    let (pct, sent_pct) = (of(achieved), of(sent));
    writeln!(
        out,
        "    rate        {achieved:.0}/s achieved (answered) of {target:.0}/s asked ({pct:.1}%); \
         sent {sent:.0}/s ({sent_pct:.1}%)"
    )?;
    // Poisson arrivals: the count over the run varies by about its
    // square root around the target; a shortfall within 3 of those is
    // chance, not the client.
    let poisson = matches!(
        sc.traffic.as_ref().map(|t| &t.model),
        Some(Model::OpenLoop {
            arrivals: crate::domain::Arrivals::Poisson,
            ..
        })
    );
    let expected = q.target_queries;
    let chance = poisson && (expected - t.sent as f64) <= 3.0 * expected.sqrt();
    if sent_pct < 99.0 && chance {
        writeln!(
            out,
            "    (Poisson arrivals: over {secs:.1} s the count varies around the {:.0} asked \
             with a standard deviation of {:.0}; this shortfall is within three of them, \
             ±{:.0})",
            expected,
            expected.sqrt(),
            3.0 * expected.sqrt()
        )?;
    } else if sent_pct < 99.0 {
        let why = shortfall_why(sc, t, h, conns_failed);
        writeln!(
            out,
            "    warning: the sent rate is below 99% of the target{why}"
        )?;
    }
    if pct < 99.0 && t.sent > 0 && (t.answered as f64) < 0.99 * t.sent as f64 {
        // Truncated and dropped over UDP, while the same question also
        // came whole: rate limiting (the truncated line says why).
        let limited = t.timed_out > 0 && rate_limited(sc, t.truncated, whole_answers(q));
        let why = if limited {
            "its response rate limiting dropped them (see truncated below)"
        } else {
            "it did not keep up, or does not answer this protocol"
        };
        writeln!(
            out,
            "    warning: the server answered {:.1}% of the queries sent ({} timed out, {} \
             errors): {why}",
            100.0 * t.answered as f64 / t.sent as f64,
            t.timed_out,
            t.errors_total() - t.errors[crate::metrics::E_NOT_SENT]
        )?;
    }
    Ok(())
}

/// Why fewer queries were sent than due, as the end of the warning.
fn shortfall_why(
    sc: &Scenario,
    t: &crate::metrics::QueryTotals,
    h: &crate::metrics::Histograms,
    conns_failed: u64,
) -> String {
    let not_sent = t.errors[crate::metrics::E_NOT_SENT];
    let window = sc.traffic.as_ref().and_then(|t| t.window);
    let waited = wait_words(sc, t, h).filter(|_| {
        conns_failed == 0 && loop_kept(h) && t.waited.iter().sum::<u64>() * 100 >= t.due
    });
    if let (Some(w), true) = (
        &waited,
        not_sent == 0 || sc.transport == Transport::TcpPerQuery,
    ) {
        format!(": {w}")
    } else if not_sent > 0 && window.is_none() {
        format!(
            ": {not_sent} queries could not be sent within --timeout, their connections' \
             sockets full: the server is not reading what it is sent"
        )
    } else if let (true, Some(w)) = (not_sent > 0, window) {
        format!(
            ": {not_sent} queries could not be sent within --timeout, their connections' \
             --window {w} full (the server answering too slowly) or their sockets full \
             (the server not reading)"
        )
    } else if conns_failed > 0 {
        // Not the client's pace: the connections that would have
        // carried the queries were gone.
        ": connections failed (see above), and the queries due on them were not sent".into()
    } else if h.loop_lag.value_at_quantile(0.99) > 1000 {
        " and the client's own loop fell behind its schedule (see loop lag): the client \
         could not keep up"
            .into()
    } else {
        ": queries waited for their connection (window full or socket busy)".into()
    }
}

/// The counts of the queries, their errors, and every answer judged:
/// what failed, rcodes, truncation, HTTP statuses.
fn answer_lines(
    sc: &Scenario,
    q: &crate::engine::QueryOutcome,
    out: &mut dyn Write,
) -> io::Result<()> {
    let t = &q.totals;
    writeln!(
        out,
        "    sent {}  answered {}  timed out {}  errors {}  in flight at the end {}",
        t.sent,
        t.answered,
        t.timed_out,
        t.errors_total(),
        q.in_flight
    )?;
    for (i, cause) in crate::metrics::ERROR_CAUSES.iter().enumerate() {
        if t.errors[i] > 0 {
            writeln!(out, "      {cause:<15}{}", t.errors[i])?;
        }
    }
    // Every answer judged: what failed, and what that says.
    let ok_answers = sc
        .traffic
        .as_ref()
        .map(|t| crate::metrics::OkAnswers {
            rcodes: &t.ok_rcodes,
            status: &t.ok_status,
        })
        .unwrap_or_default();
    let failed = q.statuses.failures(ok_answers);
    if t.answered > 0 {
        let bad: u64 = failed.values().sum();
        writeln!(
            out,
            "    answers     {} ok, {bad} failed",
            q.statuses.successes(ok_answers)
        )?;
        for (what, n) in &failed {
            writeln!(out, "      {what:<15}{n}: {}", failed_answer_words(what))?;
        }
    }
    if t.recycled > 0 {
        writeln!(
            out,
            "    recycled    {} connections (--max-queries-per-conn)",
            t.recycled
        )?;
    }
    let rcodes = q.statuses.rcode_map();
    if !rcodes.is_empty() {
        let list: Vec<String> = rcodes.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(out, "    rcodes      {}", list.join("  "))?;
    }
    if t.truncated > 0 {
        let whole = whole_answers(q);
        writeln!(
            out,
            "    truncated   {}",
            truncated_words(sc, t.truncated, whole, t.timed_out)
        )?;
    }
    let by_qtype = q.statuses.rcodes_by_qtype_map();
    if by_qtype.len() > 1 {
        // Only a query file mixes types; one type would repeat the line above.
        for (qtype, rcodes) in &by_qtype {
            let list: Vec<String> = rcodes.iter().map(|(k, v)| format!("{k} {v}")).collect();
            writeln!(out, "      {qtype:<10}{}", list.join("  "))?;
        }
    }
    let http = q.statuses.http_map();
    if !http.is_empty() {
        let list: Vec<String> = http.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(out, "    status      {}", list.join("  "))?;
    }
    Ok(())
}

/// Response, service time and send lag, with what a lag says.
fn latency_lines(
    sc: &Scenario,
    q: &crate::engine::QueryOutcome,
    h: &crate::metrics::Histograms,
    (closed, conns_failed, cpu): (bool, u64, Option<&crate::evidence::ClientCpu>),
    out: &mut dyn Write,
) -> io::Result<()> {
    let t = &q.totals;
    writeln!(out, "  latency")?;
    if closed {
        latency_row("response", &h.response_time, out)?;
    } else {
        latency_row("response", &h.response_time, out)?;
        latency_row("service", &h.service_time, out)?;
        writeln!(
            out,
            "    (response time counts from when each query should have been sent; service time from when it was)"
        )?;
        latency_row("send lag", &h.send_lag, out)?;
        if t.sent_late > 0 {
            writeln!(
                out,
                "    sent late   {} queries more than 1 ms after their time",
                t.sent_late
            )?;
        }
        let waited = wait_words(sc, t, h).filter(|_| conns_failed == 0);
        if let Some(w) = lag_warning(
            h,
            t.errors[crate::metrics::E_NOT_SENT],
            waited.as_deref(),
            cpu,
        ) {
            writeln!(out, "    {w}")?;
        }
    }
    Ok(())
}
