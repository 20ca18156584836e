//! Whose failure a step is, and why, from typed results: the step's
//! verdict (a fresh run's own; a held step's, made here from its seconds)
//! and what the machine said about the server. No decision reads a
//! sentence: causes are matched by code and side.

use super::*;
use crate::outcome::limit::HeldStep;
use crate::verdict::{Cause, Code, Level, Side, Verdict};

/// The failing step's cause from what the machine said about the server,
/// with its code and the figures it rests on; None when nothing seen
/// explains it.
pub(super) fn evidence(r: &StepResult, find: Find) -> (Option<(Code, String)>, Vec<String>) {
    let Some(seen) = r.server_seen() else {
        return (None, Vec::new());
    };
    let during = crate::evidence::During {
        wall_s: r.duration_s(),
        cores: r.cores().max(1.0),
        peer_closed: closes_tell(r, find),
        client_sharing_pct: r
            .client()
            .filter(|c| c.shares_cores_with_server)
            .map(|c| c.cpu_pct),
    };
    (seen.limit_named(&during), vec![seen.seen_line(&during)])
}

/// Whether the server's side explains a failing step: a cause in its
/// evidence, connections it closed once it had taken them (on a
/// connections step), or a cause of the step's verdict on the server's or
/// the network's side (connections it refused, reset or never answered,
/// answers that said failure: the server's acts, even where its process
/// was not seen).
pub(super) fn server_explains(r: &StepResult, find: Find) -> bool {
    evidence(r, find).0.is_some()
        || closes_tell(r, find) > 0
        || r.verdict().is_some_and(|v| {
            v.causes
                .iter()
                .any(|c| c.explains() && matches!(c.side, Side::Server | Side::Network))
        })
}

/// The connections the server closed once it had taken them, where they
/// tell of a cap: on a connections step. A rate search's opening showed
/// the server keeps every connection; closes during its steps are the
/// server recycling them (nginx's keepalive_requests, idle timeouts), and
/// the client opens others. (Queries they cost are failures of their own.)
fn closes_tell(r: &StepResult, find: Find) -> u64 {
    match find {
        Find::Connections => r.peer_closed(),
        Find::Rate => 0,
    }
}

/// A failing step the client's capacity explains and the server's side
/// does not: its verdict puts it on the client alone (its ports, fds,
/// CPU, lateness weighed against the latency), or it dropped datagrams at
/// its own sockets.
pub(super) fn client_explains(r: &StepResult, find: Find) -> bool {
    let mine = r
        .verdict()
        .is_some_and(|v| v.client_limited() || v.has(Code::ClientDrops) && v.side != Side::Server);
    mine && !server_explains(r, find)
}

/// The causes of a failing step that say why, as lines for the answer:
/// the checks that failed, then each cause that explains.
pub(super) fn why_lines(r: &StepResult) -> Vec<String> {
    let outcomes: Vec<_> = match r {
        StepResult::Run(x) => &x.checks,
        StepResult::Held(x) => &x.checks,
    }
    .iter()
    .filter(|c| !c.pass)
    .cloned()
    .collect();
    let checks: Vec<_> = outcomes
        .iter()
        .filter_map(|c| crate::report::check::parse(&c.expr).ok())
        .collect();
    let mut out: Vec<String> = crate::report::check::lines(&checks, &outcomes)
        .into_iter()
        .map(|l| l.trim().to_string())
        .collect();
    if let Some(v) = r.verdict() {
        out.extend(v.causes.iter().filter(|c| c.explains()).map(|c| {
            format!(
                "{} ({}): {}",
                c.code.as_str(),
                side_word(c.side),
                c.sentence
            )
        }));
    }
    out
}

fn side_word(s: Side) -> &'static str {
    match s {
        Side::None => "none",
        Side::Server => "server",
        Side::Client => "client",
        Side::Network => "network",
        Side::Both => "both",
    }
}

/// The client verifies its connections (a probe, or the first answer).
pub(super) fn verify_on(c: &super::ClientFlags) -> bool {
    c.verify
}

/// A failing held step that the client's lateness explains, weighed
/// against the failure's size: its loop noticed more than 1% of the due
/// queries over 1 ms late (10 at least), the step's shortfall (queries
/// not answered ok, or behind its pace) is no more than twice the late
/// ones, and the response time's tail is mostly the client's own delay
/// (its p99 more than twice the service time's: a service tail as long
/// as the response's is the server's queue, however many queries the
/// client sent a little late).
pub(super) fn late_cause(h: &HeldStep, pace: Option<Pace>) -> Option<Cause> {
    let q = h.queries.as_ref()?;
    let (due, loop_late) = (q.due as f64, q.loop_late as f64);
    let behind = pace.map_or(0.0, |p| p.short() as f64);
    let short = (due - q.ok as f64).max(behind).max(0.0);
    let p99 = |x: &Option<crate::outcome::limit::StepLatency>| x.as_ref().map(|l| l.p99);
    let (response, service) = h.latency.as_ref().map_or((None, None), |l| {
        (p99(&l.response_time_us), p99(&l.service_time_us))
    });
    let delay_is_the_tail = match (response, service) {
        (Some(r), Some(s)) => r > 2 * s,
        // No service times to weigh against: the count decides.
        _ => true,
    };
    // Its delay must be the tail (a server's queue makes the service
    // time as long as the response's, however late the client's loop
    // was), and as many late as went short.
    let explains = delay_is_the_tail && short <= 2.0 * loop_late;
    // (A few late of a few due say nothing: at least LATE_MIN.)
    (due > 0.0 && loop_late > 0.01 * due && loop_late >= LATE_MIN && explains).then(|| {
        Cause::new(
            Code::ClientLate,
            "client",
            format!(
                "the client's loop noticed {:.1}% of the due queries more than 1 ms late: it \
                 could not keep the rate",
                100.0 * loop_late / due
            ),
        )
        .with("loop_late", loop_late)
        .with("due", due)
    })
}

/// The fewest late queries that can put a step on the client.
const LATE_MIN: f64 = 10.0;

/// Datagrams the kernel dropped at this namespace's full receive buffers
/// but not at the server's socket: at the client's, which read its
/// answers too slowly (its failure, not the server's).
pub(super) fn client_dropped(r: &StepResult, udp: bool) -> Option<Cause> {
    // (A TCP run's namespace may drop datagrams of others: not its own.)
    if !udp {
        return None;
    }
    let s = r.server_seen()?;
    let (all, at_server) = (s.udp_rcvbuf_errors, s.udp_socket_drops);
    (all > at_server).then(|| {
        Cause::new(
            Code::ClientDrops,
            "client",
            format!(
                "the kernel dropped {} datagrams at the client's own full receive buffers \
                 (UdpRcvbufErrors {all}, {at_server} of them at the server's socket): the \
                 client read its answers too slowly",
                all - at_server
            ),
        )
        .with("udp_rcvbuf_errors", all as f64)
        .with("udp_socket_drops", at_server as f64)
    })
}

/// Whether a failing held step's client explains it, from what was seen
/// of it during the step: its CPU against its worker cores, or the cores
/// it shared with the server kept full by the two.
pub(super) fn held_client_cause(h: &HeldStep, workers: f64) -> Option<Cause> {
    let cl = h.client.as_ref()?;
    let wall = cl.wall_s.max(1e-3);
    let busy = 100.0 * cl.cpu_s / wall / workers.max(1.0);
    if busy >= 85.0 {
        return Some(
            Cause::new(
                Code::ClientCpu,
                "client",
                format!(
                    "the client kept its {workers:.0} worker core(s) {busy:.0}% busy during the \
                     step: it could not keep up"
                ),
            )
            .with("busy_pct", busy),
        );
    }
    let both = cl.with_server_pct;
    (cl.shares_cores_with_server && both >= 90.0).then(|| {
        Cause::new(
            Code::SharedCores,
            "client",
            format!(
                "the client shares its cores with the server, and the two kept them {both:.0}% \
                 busy: each delays the other, so the failure is not the server's alone"
            ),
        )
        .with("with_server_pct", both)
    })
}

/// A held step's verdict: the causes its figures name (the client's own
/// drops; the server's evidence, its closes, answers that said failure;
/// then the client's lateness or busy cores, weighed: a client a little
/// late beside a saturated server did not make it fail).
pub(super) fn held_verdict(
    h: &HeldStep,
    pass: bool,
    pace: Option<Pace>,
    (find, udp, workers): (Find, bool, f64),
) -> Verdict {
    let r = StepResult::Held(Box::new(h.clone()));
    let mut causes: Vec<Cause> = Vec::new();
    if let (Some((code, words)), _) = evidence(&r, find) {
        causes.push(Cause::new(code, "server", words));
    }
    let closed = closes_tell(&r, find);
    if closed > 0 && !causes.iter().any(|c| c.code == Code::ClosedByServer) {
        causes.push(
            Cause::new(
                Code::ClosedByServer,
                "closed_by_peer",
                format!(
                    "the server closed {closed} connection(s) it had taken during the step: a \
                     connection cap of its own (nginx's worker_connections, a server's max \
                     clients) or an idle timeout"
                ),
            )
            .with("peer_closed", closed as f64),
        );
    }
    if let Some(c) = h.queries.as_ref().and_then(error_answers) {
        causes.push(c);
    }
    if !pass {
        if let Some(c) = client_dropped(&r, udp) {
            causes.insert(0, c);
        } else if causes.is_empty() {
            causes.extend(late_cause(h, pace).or_else(|| held_client_cause(h, workers)));
        }
    }
    Verdict::new(pass, causes)
}

/// A held step's answers that said failure (HTTP 5xx and 4xx, DNS
/// SERVFAIL and REFUSED, mismatches), from its seconds.
fn error_answers(q: &crate::outcome::limit::HeldQueries) -> Option<Cause> {
    let failed = q.failed_answers?;
    (failed > 0).then(|| {
        Cause::new(
            Code::ErrorAnswers,
            "answers",
            format!(
                "{failed} of the {} answers said failure (an error status, a refusal, a \
                 mismatch): the server answered without serving",
                q.answered
            ),
        )
        .level(Level::Hint)
        .with("answered", q.answered as f64)
        .with("failed", failed as f64)
    })
}
