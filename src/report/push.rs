//! The push part of the summary at the end of a client run (`--proto
//! push`): what arrived, whether the server kept its period, the times.

use super::*;

/// Above this share of the messages due received, and under this jitter
/// p99, the server kept its period.
pub(super) const PUSH_KEPT_SHARE: f64 = 0.999;

pub(super) const PUSH_KEPT_JITTER_US: u64 = 5_000;

/// A client whose workers were busy this share of their time read late.
pub(super) const PUSH_BUSY: f64 = 0.8;

/// --proto push in words: what arrived, the times, and whether the server
/// kept its period (the verdict's `push` causes).
pub(super) fn push_summary(
    sc: &Scenario,
    listen: &crate::scenario::PushListen,
    p: &crate::metrics::PushTotals,
    h: &crate::metrics::Histograms,
    v: &Verdict,
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
    if let Some(clock) = crate::scenario::DelayClock::new(sc, listen).name() {
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
    if p.expected == 0 {
        writeln!(
            out,
            "    no message was due: the connections did not last a period"
        )?;
    } else if !v.labelled("push").any(|c| c.explains()) {
        let jitter = (!h.push_jitter.is_empty()).then(|| h.push_jitter.value_at_quantile(0.99));
        writeln!(
            out,
            "    the server kept its period: {:.2}% arrived, jitter p99 {}",
            100.0 * share,
            jitter.map_or("-".into(), human_us)
        )?;
    }
    for c in v.labelled("push") {
        match c.level {
            Level::Warning => writeln!(out, "    warning: {}", c.sentence)?,
            _ => writeln!(out, "    {}", c.sentence)?,
        }
    }
    Ok(())
}

/// The verdict's causes of a push run: the server did not keep its period
/// (too few messages arrived, or their jitter was high), and the client's
/// workers too busy to read on time (then the jitter is partly its own).
pub(super) fn push_causes(
    sc: &Scenario,
    p: &crate::metrics::PushTotals,
    h: &crate::metrics::Histograms,
    c: &mut Vec<Cause>,
) {
    if p.expected == 0 {
        return;
    }
    let share = p.received as f64 / p.expected as f64;
    let jitter_p99 = (!h.push_jitter.is_empty()).then(|| h.push_jitter.value_at_quantile(0.99));
    let arrived = share >= PUSH_KEPT_SHARE;
    let kept = arrived && jitter_p99.is_none_or(|j| j <= PUSH_KEPT_JITTER_US);
    let busy = p.busy();
    let late_reads = busy >= PUSH_BUSY && !kept;
    let jitter = jitter_p99.map_or("-".into(), human_us);
    let figures = |cause: Cause| {
        let cause = cause
            .with("received_share", share)
            .with("client_busy_share", busy);
        match jitter_p99 {
            Some(j) => cause.with("jitter_p99_us", j as f64),
            None => cause,
        }
    };
    if late_reads && arrived {
        c.push(figures(Cause::new(
            Code::ClientCpu,
            "push",
            format!(
                "cannot tell whether the server kept its period: {:.2}% arrived, but the \
                 client's workers were busy {:.0}% of the time, so arrivals were read late and \
                 the jitter (p99 {jitter}) is partly the client's own. Give the client more \
                 cores (--processes, another host: throng cluster)",
                100.0 * share,
                100.0 * busy,
            ),
        )));
        return;
    }
    if kept {
        return;
    }
    let why = if !arrived {
        format!(
            "{:.2}% of the messages due arrived{}",
            100.0 * share,
            if sc.transport != Transport::Udp {
                " (over TCP nothing is lost on the way: the server skipped them, sent them \
                 late, fell silent or closed the connections; a throng server's summary says \
                 which)"
            } else {
                " (over UDP, lost on the way or not sent by the server: a throng server's \
                 summary says how many it sent)"
            }
        )
    } else {
        format!(
            "jitter p99 {jitter} is above {}",
            human_us(PUSH_KEPT_JITTER_US)
        )
    };
    c.push(figures(Cause::new(
        Code::PushPeriod,
        "push",
        format!("the server did not keep its period: {why}"),
    )));
    if late_reads {
        c.push(figures(
            Cause::new(
                Code::ClientCpu,
                "push",
                format!(
                    "the client's workers were busy {:.0}% of the time: it read late and its \
                     sockets may have filled (then the server skipped messages for it). \
                     Measure again with the client on more cores (--processes, another host) \
                     before blaming the server",
                    100.0 * busy
                ),
            )
            .level(Level::Warning),
        ));
    }
}
