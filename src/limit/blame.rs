//! Whose failure a step is, and why: the client's own words and figures
//! (its lateness, its cores, its drops), and the server's evidence.

use super::*;

/// The failing step's cause from what the machine said about the server,
/// in one sentence, with the figures it rests on; None when nothing seen
/// explains it.
pub(super) fn evidence(v: &Value, find: Find) -> (Option<String>, Vec<String>) {
    let Some(seen) = v
        .get("server_seen")
        .filter(|s| !s.is_null())
        .and_then(|s| serde_json::from_value::<crate::evidence::ServerSeen>(s.clone()).ok())
    else {
        return (None, Vec::new());
    };
    let during = crate::evidence::During {
        wall_s: num(v, "duration_s").unwrap_or(0.0),
        cores: num(v, "environment.cores").unwrap_or(1.0),
        peer_closed: closes_tell(v, find),
        client_sharing_pct: v
            .get("client")
            .filter(|c| c["shares_cores_with_server"].as_bool() == Some(true))
            .and_then(|c| num(c, "cpu_pct")),
    };
    (seen.limit_cause(&during), vec![seen.figures(&during)])
}

/// Whether the server's own doing explains a failing step: a cause in its
/// evidence, or connections it closed, reset or refused the probe on once
/// it had taken them (the server's acts, even where its process was not
/// seen: a remote server, another user's).
pub(super) fn server_explains(v: &Value, find: Find) -> bool {
    let acts = ["closed_by_peer", "reset", "half_open", "rejected"]
        .iter()
        .any(|k| num(v, &format!("connections.failed.{k}")).unwrap_or(0.0) > 0.0);
    evidence(v, find).0.is_some() || acts || closes_tell(v, find) > 0
}

/// The connections the server closed once it had taken them, where they
/// tell of a cap: on a connections step. A rate search's opening showed
/// the server keeps every connection; closes during its steps are the
/// server recycling them (nginx's keepalive_requests, idle timeouts), and
/// the client opens others. (Queries they cost are failures of their own.)
fn closes_tell(v: &Value, find: Find) -> u64 {
    match find {
        Find::Connections => num(v, "connections.peer_closed").unwrap_or(0.0) as u64,
        Find::Rate => 0,
    }
}

/// Whether the client, not the server, explains a failing step: its own
/// plan refused (exit 2), or its summary put the lateness on itself or on
/// the cores it shares with the server (the client's own judgement, the
/// same words its hints use).
pub(super) fn client_explains(code: i32, summary: &str) -> bool {
    code == 2
        || summary.contains("the client is the bottleneck")
        || summary.contains("the client could not keep up")
        || summary.contains("hint (client)")
        || (summary.contains("shares its") && summary.contains("each delays the other"))
}

/// The lines of a step's summary that say why it failed.
pub(super) fn why_lines(summary: &str) -> Vec<String> {
    summary
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            t.starts_with("hint")
                || t.starts_with("warning")
                || t.starts_with("check         FAIL")
                || t.starts_with("throng:")
        })
        .map(|l| l.trim().to_string())
        .collect()
}

/// The client verifies its connections (a probe, or the first answer).
pub(super) fn verify_on(c: &super::ClientFlags) -> bool {
    c.verify
}

/// A failing held step that the client's lateness explains: its loop
/// noticed more than 1% of the due queries over 1 ms late, and the step's
/// failure is not much larger than that (at most twice as many queries
/// unanswered or not ok, or behind its pace (`pace`, beside its figures),
/// as were late: a server that left most of them
/// unanswered failed the step whatever the client's lateness; a check on
/// latency alone, nothing unanswered, is the client's to explain).
pub(super) fn late_words(v: &Value) -> Option<String> {
    let q = v.get("queries")?;
    let due = num(q, "due").unwrap_or(0.0);
    let loop_late = num(q, "loop_late").unwrap_or(0.0);
    // (Short: not answered ok, or, all answered, late: the judged
    // seconds' answers behind their due queries.)
    let behind = num(v, "pace.due").unwrap_or(0.0) - num(v, "pace.answered").unwrap_or(0.0);
    let short = (due - num(q, "ok").unwrap_or(0.0)).max(behind).max(0.0);
    (due > 0.0 && loop_late > 0.01 * due && short <= 2.0 * loop_late).then(|| {
        format!(
            "the client's loop noticed {:.1}% of the due queries more than 1 ms late: it could \
             not keep the rate",
            100.0 * loop_late / due
        )
    })
}

/// Datagrams the kernel dropped at this namespace's full receive buffers
/// but not at the server's socket: at the client's, which read its
/// answers too slowly (its failure, not the server's).
pub(super) fn client_dropped(v: &Value) -> Option<String> {
    // (A TCP run's namespace may drop datagrams of others: not its own.)
    let udp = v["scenario"]["transport"].as_str() == Some("udp");
    if !udp {
        return None;
    }
    let s = v.get("server_seen").filter(|s| !s.is_null())?;
    let all = num(s, "udp_rcvbuf_errors").unwrap_or(0.0);
    let at_server = num(s, "udp_socket_drops").unwrap_or(0.0);
    (all > at_server).then(|| {
        format!(
            "the kernel dropped {:.0} datagrams at the client's own full receive buffers \
             (UdpRcvbufErrors {all:.0}, {at_server:.0} of them at the server's socket): the \
             client read its answers too slowly",
            all - at_server
        )
    })
}

/// Whether a failing held step's client explains it, from what was seen
/// of it during the step: its CPU against its worker cores, or the cores
/// it shared with the server kept full by the two. (A fresh step has the
/// client's own judgement: [`client_explains`].)
pub(super) fn held_client_explains(v: &Value, workers: f64) -> Option<String> {
    let cl = v.get("client").filter(|c| !c.is_null())?;
    let wall = num(cl, "wall_s").unwrap_or(0.0).max(1e-3);
    let busy = 100.0 * num(cl, "cpu_s").unwrap_or(0.0) / wall / workers.max(1.0);
    if busy >= 85.0 {
        return Some(format!(
            "the client kept its {workers:.0} worker core(s) {busy:.0}% busy during the step: \
             it could not keep up"
        ));
    }
    let shared = cl["shares_cores_with_server"].as_bool().unwrap_or(false);
    let both = num(cl, "with_server_pct").unwrap_or(0.0);
    if shared && both >= 90.0 {
        return Some(format!(
            "the client shares its cores with the server, and the two kept them {both:.0}% \
             busy: each delays the other, so the failure is not the server's alone"
        ));
    }
    None
}
