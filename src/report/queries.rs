//! The query part of the summary at the end of a client run: the rate
//! achieved and sent of the target and why either fell short, every
//! answer judged, the response and service times.

use super::*;

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
        "redis_OOM" => "Redis is at its maxmemory and its policy refuses writes",
        "redis_BUSY" => "Redis is running a script or function that blocks it",
        "redis_LOADING" => "Redis is loading its dataset and answers nothing else yet",
        "redis_NOAUTH" | "redis_WRONGPASS" | "redis_NOPERM" => {
            "Redis wants a password or denies this user the command (its ACL)"
        }
        "redis_MOVED" | "redis_ASK" | "redis_CROSSSLOT" | "redis_CLUSTERDOWN" => {
            "a Redis Cluster redirect or failure: throng does not follow redirects; target the \
             node that owns the keys"
        }
        "redis_WRONGTYPE" => "the key holds another type than the command works on",
        h if h.starts_with("redis_") => {
            "Redis answered the command with an error: run it in redis-cli to read the message"
        }
        _ => "not a success for this protocol (--ok-rcodes, --ok-status widen what is)",
    }
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
    q: &crate::outcome::QueryOutcome,
    h: &crate::metrics::Histograms,
    v: &Verdict,
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
        open_loop_rates(sc, q, v, out)?;
    }
    answer_lines(sc, q, out)?;
    latency_lines(sc, q, h, (closed, v), out)?;
    render(v, &["nagle"], "  ", out)?;
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
/// why either fell short (the verdict's `rate` causes).
fn open_loop_rates(
    sc: &Scenario,
    q: &crate::outcome::QueryOutcome,
    v: &Verdict,
    out: &mut dyn Write,
) -> io::Result<()> {
    let t = &q.totals;
    let secs = q.seconds.max(1e-9);
    let achieved = t.answered as f64 / secs;
    let sent = t.sent as f64 / secs;
    let target = q.target_queries / secs;
    let (pct, sent_pct, chance) = rate_shares(sc, q);
    writeln!(
        out,
        "    rate        {achieved:.0}/s achieved (answered) of {target:.0}/s asked ({pct:.1}%); \
         sent {sent:.0}/s ({sent_pct:.1}%)"
    )?;
    let expected = q.target_queries;
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
    }
    render(v, &["rate"], "    ", out)
}

/// An open loop's answered and sent rates as shares of its target (%),
/// and whether a sent shortfall is chance: Poisson arrivals vary about
/// the target by its square root, and within three of those the client
/// is not behind.
pub(super) fn rate_shares(sc: &Scenario, q: &crate::outcome::QueryOutcome) -> (f64, f64, bool) {
    use crate::scenario::Model;
    let t = &q.totals;
    let secs = q.seconds.max(1e-9);
    let target = q.target_queries / secs;
    let of = |r: f64| {
        if target > 0.0 {
            r / target * 100.0
        } else {
            100.0
        }
    };
    let poisson = matches!(
        sc.traffic.as_ref().map(|t| &t.model),
        Some(Model::OpenLoop {
            arrivals: crate::domain::Arrivals::Poisson,
            ..
        })
    );
    let expected = q.target_queries;
    let chance = poisson && (expected - t.sent as f64) <= 3.0 * expected.sqrt();
    (
        of(t.answered as f64 / secs),
        of(t.sent as f64 / secs),
        chance,
    )
}

/// Why fewer queries were sent than due, as the end of the warning.
pub(super) fn shortfall_why(
    sc: &Scenario,
    t: &crate::metrics::QueryTotals,
    h: &crate::metrics::Histograms,
    conns_failed: u64,
) -> (Code, Side, String) {
    let not_sent = t.errors[crate::metrics::E_NOT_SENT];
    let window = sc.traffic.as_ref().and_then(|t| t.window);
    let waited = wait_text(sc, t, h).filter(|_| {
        conns_failed == 0 && loop_kept(h) && t.waited.iter().sum::<u64>() * 100 >= t.due
    });
    if let (Some(w), true) = (
        &waited,
        not_sent == 0 || sc.transport == Transport::TcpPerQuery,
    ) {
        (Code::ServerPace, Side::Server, format!(": {w}"))
    } else if not_sent > 0 && window.is_none() {
        (
            Code::ServerPace,
            Side::Server,
            format!(
                ": {not_sent} queries could not be sent within --timeout, their connections' \
             sockets full: the server is not reading what it is sent"
            ),
        )
    } else if let (true, Some(w)) = (not_sent > 0, window) {
        (
            Code::ServerPace,
            Side::Server,
            format!(
                ": {not_sent} queries could not be sent within --timeout, their connections' \
             --window {w} full (the server answering too slowly) or their sockets full \
             (the server not reading)"
            ),
        )
    } else if conns_failed > 0 {
        // Not the client's pace: the connections that would have
        // carried the queries were gone (their causes are their own).
        (
            Code::Unanswered,
            Side::None,
            ": connections failed (see above), and the queries due on them were not sent".into(),
        )
    } else if h.loop_lag.value_at_quantile(0.99) > 1000 {
        let behind = t.errors[crate::metrics::E_BEHIND];
        let never = if behind > 0 {
            format!(", and {behind} due were never sent (behind_schedule)")
        } else {
            String::new()
        };
        (
            Code::ClientLate,
            Side::Client,
            format!(
                " and the client's own loop fell behind its schedule (see loop lag){never}: \
                 the client could not keep up"
            ),
        )
    } else {
        (
            Code::ServerPace,
            Side::Server,
            ": queries waited for their connection (window full or socket busy)".into(),
        )
    }
}

/// The counts of the queries, their errors, and every answer judged:
/// what failed, rcodes, truncation, HTTP statuses.
fn answer_lines(
    sc: &Scenario,
    q: &crate::outcome::QueryOutcome,
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
    if t.answered_late > 0 {
        writeln!(
            out,
            "      answered late {} of the timed out: their answers came after --timeout \
             (answered, too late to count)",
            t.answered_late
        )?;
    }
    for (i, cause) in crate::metrics::ERROR_CAUSES.iter().enumerate() {
        if t.errors[i] > 0 {
            writeln!(out, "      {cause:<16}{}", t.errors[i])?;
        }
    }
    // Every answer judged: what failed, and what that says.
    let ok_answers = crate::outcome::ok_answers(sc);
    let failed = q.statuses.failures(ok_answers);
    if t.answered > 0 {
        let bad: u64 = failed.values().sum();
        writeln!(
            out,
            "    answers     {} ok, {bad} failed",
            q.statuses.successes(ok_answers)
        )?;
        for (what, n) in &failed {
            writeln!(out, "      {what:<15} {n}: {}", failed_answer_words(what))?;
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
    let redis = q.statuses.redis_map();
    if !redis.is_empty() {
        let list: Vec<String> = redis.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(out, "    replies     {}", list.join("  "))?;
    }
    Ok(())
}

/// Response, service time and send lag, with what a lag says.
fn latency_lines(
    sc: &Scenario,
    q: &crate::outcome::QueryOutcome,
    h: &crate::metrics::Histograms,
    (closed, v): (bool, &Verdict),
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
        let slack_us = sc.traffic.as_ref().map_or(0, |t| (t.slack_s * 1e6) as u64);
        if slack_us > 0 {
            writeln!(
                out,
                "    (--slack {}: queries due within it went together, so up to that late)",
                human_us(slack_us)
            )?;
        }
        render(v, &["lag"], "    ", out)?;
    }
    if !h.late_time.is_empty() {
        // Answers after their timeout: failures, kept out of the rows
        // above, their times here.
        latency_row("late answers", &h.late_time, out)?;
    }
    Ok(())
}
