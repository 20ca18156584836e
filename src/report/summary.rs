//! The summary at the end of a client run: its counts, times and rates.

use super::*;

/// The human summary of a run.
pub fn summary(sc: &Scenario, o: &Outcome, v: &Verdict, out: &mut dyn Write) -> io::Result<()> {
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
    time_row("ws handshake", &o.hists.ws_handshake, "", out)?;
    ws_lines(t, out)?;
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
        queries_summary(sc, q, &o.hists, v, out)?;
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
        push_summary(sc, listen, p, &o.hists, v, out)?;
    }
    if let Some(e) = &t.tls_error {
        writeln!(out, "  tls error     {e}")?;
    }
    let mut labels: Vec<&str> = Bucket::ALL.iter().map(|b| b.key()).collect();
    labels.extend(["tcp-per-query", "idle"]);
    render(v, &labels, "  ", out)?;
    observed_lines(sc, o, v, out)?;
    render(v, &["udp", "unverified", "silent"], "  ", out)?;
    if let Some(stall) = verification_stall(o) {
        writeln!(out, "  verified      {stall}")?;
    }
    render(v, &["server"], "  ", out)
}

/// The causes of `v` with these labels, in the verdict's order, as the
/// summary's lines: `hint (label): ...`, `warning: ...`, `note: ...`.
pub(super) fn render(
    v: &Verdict,
    labels: &[&str],
    indent: &str,
    out: &mut dyn Write,
) -> io::Result<()> {
    for c in v
        .causes
        .iter()
        .filter(|c| labels.contains(&c.label.as_str()))
    {
        writeln!(out, "{indent}{}", line(c))?;
    }
    Ok(())
}

/// A cause as one line of the summary.
pub fn line(c: &Cause) -> String {
    match c.level {
        Level::Hint => format!("hint ({}): {}", c.label, c.sentence),
        Level::Warning => format!("warning: {}", c.sentence),
        Level::Note => format!("note: {}", c.sentence),
    }
}

/// WebSocket: the pings answered and the closes received, by code.
fn ws_lines(t: &crate::metrics::ConnTotals, out: &mut dyn Write) -> io::Result<()> {
    if t.ws_pings > 0 {
        writeln!(out, "  ws pings      {} answered with a pong", t.ws_pings)?;
    }
    let codes = crate::metrics::ws_close_map(&t.ws_close);
    if !codes.is_empty() {
        let list: Vec<String> = codes.iter().map(|(c, n)| format!("{c}: {n}")).collect();
        writeln!(
            out,
            "  ws closes     from the server, by code: {}",
            list.join(", ")
        )?;
    }
    Ok(())
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
    if t.silent > 0 {
        writeln!(
            out,
            "  silent        {} sent queries and got no byte back",
            t.silent
        )?;
    }
    if t.probe_rejected > 0 && sc.websocket.is_some() {
        let by: Vec<String> = crate::metrics::ws_refused_map(&t.ws_refused)
            .iter()
            .map(|(c, n)| format!("{c}: {n}"))
            .collect();
        writeln!(
            out,
            "  upgrade       the server refused the WebSocket upgrade on {} connection(s), by \
             HTTP status {}; the first: {} (check the target's path and what it asks for: \
             --ws-path, --ws-header, --ws-subprotocol)",
            t.probe_rejected,
            by.join(", "),
            t.probe_reply.as_deref().unwrap_or("?")
        )?;
    } else if t.probe_rejected > 0 && t.verified > t.probe_rejected {
        // Whose refusal: a rule about sources, or a cap.
        let why = match t.sources_refused.is_empty() {
            true => "a cap of its own: Redis's maxclients, memcached's -c, a server's connection \
                     limit"
                .to_string(),
            false => format!(
                "every one from {}: a rule about source addresses",
                t.sources_refused.join(", ")
            ),
        };
        writeln!(
            out,
            "  refused       the server refused {} connection(s) while it served {}: {} ({why})",
            t.probe_rejected,
            t.verified - t.probe_rejected,
            t.probe_reply.as_deref().unwrap_or("?")
        )?;
    } else if t.probe_rejected > 0 {
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

/// What was seen of the machine: the client's CPU, the server's process,
/// and the handshake's or the client's own limits.
fn observed_lines(sc: &Scenario, o: &Outcome, v: &Verdict, out: &mut dyn Write) -> io::Result<()> {
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
    render(v, &["handshake", "client"], "  ", out)
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
