//! The push part of the summary at the end of a client run (`--proto
//! push`): what arrived, whether the server kept its period, the times.

use super::*;

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
    if let Some(clock) = crate::scenario::DelayClock::of(sc, listen).name() {
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
