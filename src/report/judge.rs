//! The verdict of a run, computed once from its figures and what was
//! seen: every cause the hints name, with its code, its side and the
//! figures it rests on. The summary renders its hint lines from it; limit,
//! cluster and report read it. It writes nothing.

use super::*;
use crate::domain::Proto;
use crate::engine::proto;
use crate::outcome::RunResult;
use crate::scenario::Query;

/// Evaluates `checks` on `result`, then judges it: both recorded in it.
pub fn conclude(
    sc: &Scenario,
    o: &Outcome,
    checks: &[check::Check],
    result: &mut RunResult,
    max_failures: u64,
) -> io::Result<()> {
    check::record(checks, result)?;
    result.verdict = Some(judge(sc, o, result, max_failures));
    Ok(())
}

/// The verdict of `result` (its checks already evaluated), whose run
/// measured `o`: `pass` as its exit code says (no check failed, no more
/// failed connections than --max-failures, whole, not overrun).
pub fn judge(sc: &Scenario, o: &Outcome, result: &RunResult, max_failures: u64) -> Verdict {
    let causes = causes(sc, o);
    if result.interrupted {
        return Verdict {
            pass: false,
            side: Side::None,
            causes,
        };
    }
    // What failed: the connections (more failed than --max-failures, or
    // a check on them), the queries, their latency; causes bear on what
    // failed (the client's lateness does not explain refused
    // connections). A failure of another kind weighs every cause.
    let failed: u64 = result.connections.failed.values().sum();
    let failing: Vec<&str> = result
        .checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| c.expr.split('.').next().unwrap_or(""))
        .collect();
    let (conns, queries, latency) = (
        failed > max_failures || failing.contains(&"connections"),
        failing.contains(&"queries"),
        failing.contains(&"latency"),
    );
    let other = result.partial
        || !result.overrun.is_empty()
        || failing
            .iter()
            .any(|k| !matches!(*k, "connections" | "queries" | "latency"));
    let bears = |c: &Cause| {
        other
            || match c.label.as_str() {
                "rate" | "answers" | "truncated" => queries,
                "lag" => queries || latency,
                "nagle" => latency,
                // A failed push check is a failure of another kind.
                "push" => false,
                // What the server's process showed bears on any failure.
                "server" => true,
                _ => conns,
            }
    };
    let pass = check::passed(result, max_failures);
    let mut causes = causes;
    if !pass {
        // What the server's process showed of its limits explains a
        // failure; beside a pass it is no cause (an elastic group's queue
        // while a process joins, a busy core that kept up).
        server_cause(o, &mut causes);
    }
    Verdict::weighed(pass, causes, bears)
}

/// Every cause the run's figures name, in the order the summary shows
/// them.
pub fn causes(sc: &Scenario, o: &Outcome) -> Vec<Cause> {
    let mut c = Vec::new();
    if let Some(q) = &o.queries {
        query_causes(sc, q, &o.hists, (o.totals.failed_total(), o), &mut c);
    }
    failure_causes(sc, o, &mut c);
    c.extend(idle_cause(o));
    if let Some(h) = retransmit_hint(o) {
        c.push(h);
    } else if let Some(h) = client_connect_hint(sc, o) {
        c.push(h);
    }
    unverified_causes(sc, o, &mut c);
    if let Some(p) = &o.push {
        super::push::push_causes(sc, p, &o.hists, &mut c);
    }
    c
}

/// A cause for each bucket of failed connections.
fn failure_causes(sc: &Scenario, o: &Outcome, c: &mut Vec<Cause>) {
    let t = &o.totals;
    // framed are counted with resets: say whose bytes they were.
    let garbled = o.push.as_ref().map_or(0, |p| p.malformed)
        + o.queries.as_ref().map_or(0, |q| {
            q.totals.errors[crate::metrics::E_MALFORMED]
                + q.totals.errors[crate::metrics::E_OVERSIZED]
        });
    for b in Bucket::ALL {
        let n = t.failed[b as usize];
        if n == 0 {
            continue;
        }
        let (code, side, words): (Code, Option<Side>, String) = match b {
            Bucket::Tls => {
                let (side, w) = tls_hint(t.tls_error.as_deref());
                (Code::Tls, Some(side), w.into())
            }
            Bucket::Reset if garbled >= n => (
                Code::ProtocolMismatch,
                None,
                "the client closed these connections: the server sent bytes that are not the \
                 protocol asked for (counted malformed or oversized): check --proto (and \
                 --push-format) against what the server speaks"
                    .into(),
            ),
            Bucket::TimedOut | Bucket::HalfOpen => {
                let fallback = match b {
                    Bucket::TimedOut => Code::SynDropped,
                    _ => Code::HalfOpen,
                };
                let (code, w) = unaccepted_hint(b, o).unwrap_or((fallback, b.hint().into()));
                (code, None, w)
            }
            Bucket::Refused => (Code::Refused, None, b.hint().into()),
            Bucket::NoFreePort => (Code::Ports, None, b.hint().into()),
            Bucket::OutOfFds => (Code::ClientFds, None, b.hint().into()),
            Bucket::Unreachable => (Code::Unreachable, None, b.hint().into()),
            Bucket::Other => (Code::ConnectError, None, b.hint().into()),
            Bucket::ClosedByPeer => (Code::ClosedByServer, None, b.hint().into()),
            Bucket::Reset => (Code::Reset, None, b.hint().into()),
            // Refused every time from some sources while others were
            // served: a rule about sources, not a cap.
            Bucket::Rejected if t.verified > t.probe_rejected && !t.sources_refused.is_empty() => (
                Code::SourceRefused,
                Some(Side::Server),
                format!(
                    "the server refused every connection from {} \
                     and served {} from the other source addresses: it refuses by source \
                     address (Redis's protected mode, an allow list), not at a cap. Let those \
                     addresses in there (Redis: a password or protected-mode no), or give \
                     --source-ip addresses it takes",
                    t.sources_refused.join(", "),
                    t.verified - t.probe_rejected
                ),
            ),
            // Refused after others were served: the server's refusal
            // (a cap of its own); refused every time: another protocol.
            Bucket::Rejected if t.verified > t.probe_rejected => (
                Code::Refused,
                Some(Side::Server),
                format!(
                    "the server accepted these connections and refused them ({}) while it \
                     served {} others: it refuses connections past a cap of its own (Redis's \
                     maxclients, memcached's -c, a server's connection limit); raise it there, \
                     or ask for fewer (-c)",
                    t.probe_reply
                        .as_deref()
                        .unwrap_or("its words were not kept"),
                    t.verified - t.probe_rejected
                ),
            ),
            Bucket::Rejected => (Code::ProtocolMismatch, None, b.hint().into()),
        };
        let mut cause = Cause::new(code, b.key(), words).with(b.key(), n as f64);
        if let Some(s) = side {
            cause = cause.on(s);
        }
        c.push(cause);
        if b == Bucket::NoFreePort && sc.transport == Transport::TcpPerQuery {
            c.push(Cause::new(
                Code::Ports,
                "tcp-per-query",
                "each closed connection keeps its port in TIME_WAIT for 60 s, so the port range \
                 runs dry at (ports x sources) / 60 queries/s: set net.ipv4.tcp_tw_reuse=1 \
                 (sysctl -w) or add source addresses (--source-ip)",
            ));
        }
    }
}

/// The server's idle timeout, where its closes say it: connections that
/// had carried no query, closed by the server at one steady age (at least
/// [`IDLE_CLOSES`] of them, their ages' spread within a quarter of their
/// mean).
fn idle_cause(o: &Outcome) -> Option<Cause> {
    let t = &o.totals;
    let n = t.idle_closed;
    if n < IDLE_CLOSES {
        return None;
    }
    let mean = t.idle_closed_ms as f64 / n as f64;
    let var = (t.idle_closed_ms_sq as f64 / n as f64 - mean * mean).max(0.0);
    let sd = var.sqrt();
    (mean >= 1.0 && sd <= 0.25 * mean).then(|| {
        let after = crate::units::human_us((mean * 1000.0) as u64);
        Cause::new(
            Code::IdleTimeout,
            "idle",
            format!(
                "the server closed {n} idle connection(s) (nothing asked on them) {after} after \
                 they opened (± {}): an idle timeout of its own (one a server may shorten as it \
                 fills: unbound past half its incoming-num-tcp). It does not keep them idle; to \
                 hold them, send on each more often than that (--interval under {after}), or \
                 raise the server's timeout",
                crate::units::human_us((sd * 1000.0) as u64)
            ),
        )
        .with("idle_closed", n as f64)
        .with("idle_timeout_ms", mean)
        .with("idle_timeout_sd_ms", sd)
    })
}

/// The fewest idle closes that name an idle timeout.
const IDLE_CLOSES: u64 = 5;

/// Why connections went unverified, from what was seen.
fn unverified_causes(sc: &Scenario, o: &Outcome, c: &mut Vec<Cause>) {
    let t = &o.totals;
    let n = t.unverified as f64;
    let unanswered =
        |words: String| Cause::new(Code::Unanswered, "unverified", words).with("unverified", n);
    if let Some(h) = udp_silence_hint(sc, o) {
        c.push(Cause::new(Code::UdpSilent, "udp", h));
        return;
    }
    if t.unverified > 0 && sc.push.is_some() {
        c.push(unanswered(format!(
            "{} connection(s) got no message in all their time (more than two periods): the \
             server accepted them and pushed nothing to them. Is it a push server, with this \
             --push-format? (throng server --mode push, or lines with a sequence number first)",
            t.unverified
        )));
        return;
    }
    if t.unverified == 0 && t.silent > 0 {
        // (Not verified: --no-verify, or UDP.) Sent queries, never a byte.
        c.push(
            Cause::new(
                Code::Unanswered,
                "silent",
                format!(
                    "{} connection(s) were sent queries and never got a byte back, while others \
                     were answered: the server took them and ignores them (a limit of its own, \
                     or it answers some connections only: see its log)",
                    t.silent
                ),
            )
            .with("silent", t.silent as f64),
        );
    }
    if t.unverified == 0 {
        return;
    }
    if let Some((seen, (code, cause))) = o
        .observed
        .server
        .as_ref()
        .and_then(|s| Some((s, s.named(t.unverified)?)))
    {
        c.push(
            Cause::new(
                code,
                "unverified",
                format!(
                    "{} connection(s) were established but never answered: {cause}",
                    t.unverified
                ),
            )
            .with("unverified", n)
            .with("accept_queue_max", seen.accept_queue_max as f64)
            .with("listen_overflows", seen.listen_overflows as f64)
            .with("server_fds_max", seen.fds_max as f64),
        );
    } else if t.verified == 0 && t.probe_rejected == 0 {
        // Not one answer: an accept queue drops some connections, not all.
        let what = sc
            .traffic
            .as_ref()
            .map(|t| &t.query)
            .or(sc.probe.as_ref())
            .map_or(Proto::Dns, Query::proto);
        let what = proto::word(what);
        c.push(unanswered(format!(
            "no connection got an answer (to the probe within --connect-timeout, or to any \
             query): the server does not answer {what} queries, or not in time. Give the \
             protocol it speaks (--proto, --http-request, --qname, --message) or --no-verify"
        )));
    } else if sc.transport == Transport::Udp {
        // UDP has no accept queue: a socket without an answer is one whose
        // every datagram went unanswered.
        c.push(unanswered(format!(
            "{} of the UDP sockets never got an answer to any of their queries while others \
             did: the server dropped what they sent (its rate limiting, or datagrams lost on \
             the way: see the queries' timeouts); --no-verify skips the check",
            t.unverified
        )));
    } else if let Some(s) = &o.observed.server {
        // Seen, and its queue and fds show no cause: it took them.
        c.push(unanswered(format!(
            "{} connection(s) never got an answer (to the probe within --connect-timeout, or \
             with queries to any of them): the server's process ({}, pid {}) had fds to spare \
             and its accept queue (up to {}) never overflowed, so it accepted them and did not \
             answer them (a limit of its own, or it answers some connections only: see its \
             log); --no-verify skips the check",
            t.unverified, s.name, s.pid, s.accept_queue_max
        )));
    } else {
        c.push(unanswered(
            "some connections never got an answer (to the probe within --connect-timeout, or \
             with queries to any of them): the server may not have accepted them (a full \
             accept queue), or it does not answer this protocol; --no-verify skips the check"
                .into(),
        ));
    }
}

/// What the server's process showed of its limits over the run (its CPU,
/// its socket's drops, the host's tables), where no cause above names the
/// server's side already.
fn server_cause(o: &Outcome, c: &mut Vec<Cause>) {
    let Some(seen) = &o.observed.server else {
        return;
    };
    if c.iter()
        .any(|x| x.side == Side::Server && x.level != Level::Note)
    {
        return;
    }
    let d = crate::evidence::During {
        wall_s: o.elapsed.as_secs_f64(),
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()) as f64,
        peer_closed: 0,
        client_sharing_pct: o
            .observed
            .client
            .as_ref()
            .filter(|c| c.shares_cores_with_server)
            .map(|c| c.cpu_pct),
    };
    if let Some((code, words)) = seen.limit_named(&d) {
        c.push(
            Cause::new(code, "server", words)
                .with("server_fds_max", seen.fds_max as f64)
                .with("server_fd_limit", seen.fd_limit as f64)
                .with("server_cpu_s", seen.cpu_s)
                .with("accept_queue_max", seen.accept_queue_max as f64)
                .with("listen_overflows", seen.listen_overflows as f64),
        );
    }
}

/// The queries' causes: their rate's shortfalls, the answers that failed,
/// the client's lateness, Nagle's tail.
fn query_causes(
    sc: &Scenario,
    q: &crate::outcome::QueryOutcome,
    h: &crate::metrics::Histograms,
    (conns_failed, o): (u64, &Outcome),
    c: &mut Vec<Cause>,
) {
    use crate::scenario::Model;
    let t = &q.totals;
    let closed = matches!(
        sc.traffic.as_ref().map(|t| &t.model),
        Some(Model::ClosedLoop { .. })
    );
    if !closed {
        rate_causes(sc, q, h, conns_failed, c);
    }
    error_answers(sc, q, c);
    if t.truncated > 0 && t.timed_out == 0 && rate_limited(sc, t.truncated, whole_answers(q)) {
        c.push(
            Cause::new(
                Code::RateLimited,
                "truncated",
                truncated_words(sc, t.truncated, whole_answers(q), t.timed_out),
            )
            .with("truncated", t.truncated as f64),
        );
    }
    if !closed {
        let slack_us = sc.traffic.as_ref().map_or(0, |t| (t.slack_s * 1e6) as u64);
        let waited = wait_text(sc, t, h).filter(|_| conns_failed == 0);
        // Late by the slack asked for: not the client's lag.
        let beyond_slack = h.send_lag.value_at_quantile(0.99) > slack_us + 1000;
        if slack_us == 0 || beyond_slack {
            c.extend(lag_warning(
                h,
                t.errors[crate::metrics::E_NOT_SENT],
                waited.as_deref(),
                o.observed.client.as_ref(),
                sc.embedded_server,
            ));
        }
    }
    c.extend(nagle_hint(sc, q, h));
}

/// Why an open loop's sent or answered rate fell short of the target.
fn rate_causes(
    sc: &Scenario,
    q: &crate::outcome::QueryOutcome,
    h: &crate::metrics::Histograms,
    conns_failed: u64,
    c: &mut Vec<Cause>,
) {
    let t = &q.totals;
    let (pct, sent_pct, chance) = rate_shares(sc, q);
    if sent_pct < 99.0 && !chance {
        let (code, side, why) = shortfall_why(sc, t, h, conns_failed);
        c.push(
            Cause::new(
                code,
                "rate",
                format!("the sent rate is below 99% of the target{why}"),
            )
            .on(side)
            .level(Level::Warning)
            .with("sent_pct", sent_pct),
        );
    }
    if pct < 99.0 && t.sent > 0 && (t.answered as f64) < 0.99 * t.sent as f64 {
        // Truncated and dropped over UDP, while the same question also
        // came whole: rate limiting (the truncated line says why).
        let limited = t.timed_out > 0 && rate_limited(sc, t.truncated, whole_answers(q));
        let (code, why) = if limited {
            (
                Code::RateLimited,
                "its response rate limiting dropped them (see truncated below)",
            )
        } else {
            (
                Code::NotKeepingUp,
                "it did not keep up, or does not answer this protocol",
            )
        };
        let errors = t.errors_total() - t.errors[crate::metrics::E_NOT_SENT];
        let answered_pct = 100.0 * t.answered as f64 / t.sent as f64;
        let late = match t.answered_late {
            0 => String::new(),
            n => format!(", {n} of them answered after --timeout"),
        };
        c.push(
            Cause::new(
                code,
                "rate",
                format!(
                    "the server answered {answered_pct:.1}% of the queries sent in time ({} \
                     timed out{late}, {errors} errors): {why}",
                    t.timed_out,
                ),
            )
            .with("answered_late", t.answered_late as f64)
            .level(Level::Warning)
            .with("answered_pct", answered_pct)
            .with("timed_out", t.timed_out as f64)
            .with("errors", errors as f64),
        );
    }
}

/// Answers that said failure: the server's (HTTP 5xx and 4xx, DNS
/// SERVFAIL and REFUSED, a mismatch), with how many of each.
fn error_answers(sc: &Scenario, q: &crate::outcome::QueryOutcome, c: &mut Vec<Cause>) {
    let failed = q.statuses.failures(crate::outcome::ok_answers(sc));
    let bad: u64 = failed.values().sum();
    if q.totals.answered == 0 || bad == 0 {
        return;
    }
    let (most, n) = failed
        .iter()
        .max_by_key(|(_, n)| **n)
        .map(|(w, n)| (w.clone(), *n))
        .unwrap_or_default();
    let list: Vec<String> = failed.iter().map(|(w, n)| format!("{w} {n}")).collect();
    let mut cause = Cause::new(
        Code::ErrorAnswers,
        "answers",
        format!(
            "{bad} of {} answers said failure ({}); the most, {most} ({n}): {}",
            q.totals.answered,
            list.join(", "),
            failed_answer_words(&most)
        ),
    )
    .with("answered", q.totals.answered as f64)
    .with("failed", bad as f64);
    for (w, n) in &failed {
        cause = cause.with(w, *n as f64);
    }
    c.push(cause);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{outcome, scenario};

    /// An outcome of 100 connections, all verified, no failure, no
    /// queries: what each test changes.
    fn clean() -> Outcome {
        let mut o = outcome(10, 2.0);
        o.totals.failed = [0; crate::metrics::BUCKETS];
        o.totals.other_errno.clear();
        o.totals.established = 100;
        o.totals.verified = 100;
        o.queries = None;
        o
    }

    fn codes(sc: &Scenario, o: &Outcome) -> Vec<(Code, Side)> {
        causes(sc, o).iter().map(|c| (c.code, c.side)).collect()
    }

    /// Each bucket of failed connections has its code and side; a refusal
    /// after others were served is the server's cap, refused every time a
    /// protocol the client chose.
    #[test]
    fn every_failed_connection_has_its_cause() {
        let sc = scenario(&["--proto", "echo"]);
        for (b, want) in [
            (Bucket::Refused, (Code::Refused, Side::Server)),
            (Bucket::TimedOut, (Code::SynDropped, Side::Server)),
            (Bucket::NoFreePort, (Code::Ports, Side::Client)),
            (Bucket::OutOfFds, (Code::ClientFds, Side::Client)),
            (Bucket::Unreachable, (Code::Unreachable, Side::Network)),
            (Bucket::Other, (Code::ConnectError, Side::Client)),
            (Bucket::ClosedByPeer, (Code::ClosedByServer, Side::Server)),
            (Bucket::Reset, (Code::Reset, Side::Server)),
            (Bucket::HalfOpen, (Code::HalfOpen, Side::Server)),
            (Bucket::Tls, (Code::Tls, Side::Client)),
        ] {
            let mut o = clean();
            o.totals.failed[b as usize] = 5;
            assert_eq!(codes(&sc, &o).first(), Some(&want), "{b:?}");
        }
        let mut o = clean();
        o.totals.failed[Bucket::Rejected as usize] = 50;
        o.totals.probe_rejected = 50;
        assert_eq!(codes(&sc, &o), [(Code::Refused, Side::Server)]);
        o.totals.verified = 50;
        assert_eq!(codes(&sc, &o), [(Code::ProtocolMismatch, Side::Client)]);
    }

    /// Slow connect() calls are the port search only when a (source,
    /// destination) pair held much of the range; with 200 connections on
    /// one pair they are the client's kernel kept from running them.
    #[test]
    fn slow_connects_blame_ports_only_when_a_pair_is_full() {
        use crate::fixtures::histogram;
        let sc = scenario(&["--proto", "echo"]);
        let slow = |peak: i64| {
            let mut o = clean();
            o.peak = peak;
            o.hists.connect_syscall = histogram(&[3_900; 200]);
            o.hists.connect_time = histogram(&[6_000; 200]);
            o
        };
        let ports = crate::sys::sources::ports_per_source() as i64;
        assert_eq!(codes(&sc, &slow(200)), [(Code::ClientCpu, Side::Client)]);
        let words = causes(&sc, &slow(200))[0].sentence.clone();
        assert!(words.contains("at most 200 connection(s) per"), "{words}");
        assert_eq!(
            codes(&sc, &slow(ports * 3 / 4)),
            [(Code::Ports, Side::Client)]
        );
    }

    /// Refusals of every connection from one source while another's were
    /// served are a rule about sources, not a cap; from every source,
    /// with none served, another protocol.
    #[test]
    fn refusals_of_one_source_are_an_access_rule() {
        let sc = scenario(&["--proto", "echo"]);
        let mut o = clean();
        o.totals.failed[Bucket::Rejected as usize] = 50;
        o.totals.probe_rejected = 50;
        o.totals.verified = 100;
        o.totals.sources_refused = vec!["127.0.0.2".into()];
        let c = causes(&sc, &o);
        let rule = c.iter().find(|c| c.code == Code::SourceRefused).unwrap();
        assert_eq!(rule.side, Side::Server);
        assert!(!c.iter().any(|c| c.code == Code::Refused), "{c:?}");
        o.totals.verified = 50;
        assert_eq!(codes(&sc, &o), [(Code::ProtocolMismatch, Side::Client)]);
    }

    /// Closes of idle connections at one age are an idle timeout; at ages
    /// all over the place, nothing is said.
    #[test]
    fn idle_closes_at_one_age_are_an_idle_timeout() {
        let sc = scenario(&["--proto", "echo"]);
        let mut o = clean();
        o.totals.peer_closed = 10;
        o.totals.idle_closed = 10;
        o.totals.idle_closed_ms = 10 * 200;
        o.totals.idle_closed_ms_sq = 10 * 200 * 200 + 10 * 100;
        let c = causes(&sc, &o);
        let idle = c.iter().find(|c| c.code == Code::IdleTimeout).unwrap();
        assert_eq!(idle.side, Side::Server);
        assert!((idle.figures["idle_timeout_ms"] - 200.0).abs() < 1e-9);
        // Half at 50 ms, half at 350 ms: spread 150 ms around 200.
        o.totals.idle_closed_ms_sq = 5 * 50 * 50 + 5 * 350 * 350;
        assert!(causes(&sc, &o).iter().all(|c| c.code != Code::IdleTimeout));
    }

    /// Answers that said failure are the server's, with how many of each;
    /// queries answered after their timeout are counted in its words.
    #[test]
    fn error_answers_and_late_ones_are_the_servers() {
        let sc = scenario(&["--proto", "http", "-r", "100"]);
        let mut o = outcome(10, 2.0);
        let q = o.queries.as_mut().unwrap();
        q.statuses = Default::default();
        q.statuses.http[503] = 90;
        let c = causes(&sc, &o);
        let e = c.iter().find(|c| c.code == Code::ErrorAnswers).unwrap();
        assert_eq!((e.side, e.figures["http_503"]), (Side::Server, 90.0));
        let q = o.queries.as_mut().unwrap();
        q.totals.answered = 10;
        q.totals.timed_out = 990;
        q.totals.answered_late = 400;
        let c = causes(&sc, &o);
        let late = c.iter().find(|c| c.code == Code::NotKeepingUp).unwrap();
        assert_eq!(late.figures["answered_late"], 400.0);
        assert!(late
            .sentence
            .contains("400 of them answered after --timeout"));
    }

    /// A failed run's side is weighed by what failed: a client late on
    /// cores it shares does not make refused connections both sides'.
    #[test]
    fn the_side_is_weighed_by_what_failed() {
        let sc = scenario(&["--proto", "echo"]);
        let mut o = clean();
        o.totals.failed[Bucket::Refused as usize] = 5;
        let mut r = crate::fixtures::slice(1, &o);
        r.connections.failed.insert("refused".into(), 5);
        let mut causes = causes(&sc, &o);
        causes.push(Cause::new(Code::SharedCores, "lag", "late").on(Side::Both));
        let v = Verdict::weighed(false, causes, |c| c.label != "lag");
        assert_eq!(v.side, Side::Server);
        let v = judge(&sc, &o, &r, 0);
        assert!(!v.pass);
        assert_eq!(v.side, Side::Server);
    }
}
