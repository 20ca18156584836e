//! A result from what a run measured ([`RunResult::new`]) and back
//! ([`RunResult::outcome`]): the one translation between the file's keys
//! and the measurement's counters, with the reading of results written
//! before a key existed.

use std::collections::BTreeMap;

use anyhow::Context;

use super::file::{
    Connections, Dns, Environment, LatencyResult, PushResult, Queries, RunResult, SCHEMA_VERSION,
};
use super::{Outcome, QueryOutcome};
use crate::metrics::{
    decode_histogram, rcode_of, Bucket, ConnTotals, Histograms, Latency, Percentiles, PushTotals,
    QueryTotals, StatusCounts, ERROR_CAUSES, WAIT_CAUSES,
};
use crate::scenario::Scenario;
use crate::sys::errno_name;

impl RunResult {
    /// `sc`: the scenario as recorded (the whole, with its segment);
    /// `ran`: the part this process ran.
    pub fn new(sc: &Scenario, ran: &Scenario, env: Environment, o: &Outcome) -> RunResult {
        let latency = o.queries.as_ref().map(|_| LatencyResult {
            response_time_us: Latency::from_histogram(&o.hists.response_time),
            service_time_us: Latency::from_histogram(&o.hists.service_time),
            send_lag_us: Latency::from_histogram(&o.hists.send_lag),
            loop_lag_us: Latency::from_histogram(&o.hists.loop_lag),
            late_response_time_us: (!o.hists.late_time.is_empty())
                .then(|| Latency::from_histogram(&o.hists.late_time)),
        });
        let dns = match (&o.queries, sc.traffic.as_ref().map(|t| t.proto)) {
            (Some(q), Some(crate::domain::Proto::Dns)) => Some(Dns {
                rcodes: q.statuses.rcode_map(),
                rcodes_by_qtype: q.statuses.rcodes_by_qtype_map(),
            }),
            _ => None,
        };
        RunResult {
            schema_version: SCHEMA_VERSION,
            interrupted: o.interrupted,
            scenario: sc.clone(),
            environment: env,
            connections: connections(sc, ran, o),
            queries: o.queries.as_ref().map(|q| queries(sc, ran, q)),
            latency,
            dns,
            push: push_result(sc, o),
            duration_s: o.elapsed.as_secs_f64(),
            per_second: o.per_second.clone(),
            slice: None,
            parts: Vec::new(),
            partial: false,
            missing: Vec::new(),
            notes: Vec::new(),
            overrun: o.overrun.clone(),
            checks: Vec::new(),
            verdict: None,
            client: o.observed.client.clone(),
            server_seen: o.observed.server.clone(),
        }
    }
}

/// The connections' keys: `ran` is the part this process ran.
fn connections(sc: &Scenario, ran: &Scenario, o: &Outcome) -> Connections {
    let t = &o.totals;
    let failed = Bucket::ALL
        .iter()
        .map(|b| (b.key().to_string(), t.failed[*b as usize]))
        .collect();
    let failed_other_errno = t
        .other_errno
        .iter()
        .map(|(e, n)| (errno_name(*e), *n))
        .collect();
    let failed_other_by_errno = t.other_errno.clone();
    let ramp_s = o.ramp_time.map(|r| r.as_secs_f64());
    Connections {
        target: ran.connections,
        attempted: t.attempted,
        established: t.established,
        verified: t.verified,
        unverified: t.unverified,
        failed_established: t.failed_established,
        unresolved: t.unresolved,
        replaced: t.established.saturating_sub(t.established_initial),
        idle: t.idle,
        peak: o.peak,
        closed: t.closed,
        failed,
        failed_other_errno,
        failed_other_by_errno,
        ramp_s,
        verify_s: o.verify_time.map(|d| d.as_secs_f64()),
        connect_rate: ramp_s.map(|r| ran.ramp_established(t) as f64 / r.max(1e-9)),
        connect_time_us: Percentiles::from_histogram(&o.hists.connect_time),
        connect_syscall_us: (!o.hists.connect_syscall.is_empty())
            .then(|| Percentiles::from_histogram(&o.hists.connect_syscall)),
        peer_closed: t.peer_closed,
        idle_closed: t.idle_closed,
        silent: t.silent,
        idle_closed_ms: t.idle_closed_ms,
        idle_closed_ms_sq: t.idle_closed_ms_sq,
        tls_handshake_us: (sc.transport == crate::domain::Transport::Tls)
            .then(|| Percentiles::from_histogram(&o.hists.tls_handshake)),
        tls_resumed: t.tls_resumed,
        tls_error: t.tls_error.clone(),
        probe_rejected: t.probe_rejected,
        probe_reply: t.probe_reply.clone(),
        sources_refused: t.sources_refused.clone(),
        ws_handshake_us: sc
            .websocket
            .is_some()
            .then(|| Percentiles::from_histogram(&o.hists.ws_handshake)),
        ws_close_codes: crate::metrics::ws_close_map(&t.ws_close),
        ws_refused: crate::metrics::ws_refused_map(&t.ws_refused),
        ws_pings: t.ws_pings,
        ramp_stopped: o.ramp_stopped.clone(),
    }
}

/// The queries' keys.
fn queries(sc: &Scenario, ran: &Scenario, q: &QueryOutcome) -> Queries {
    let closed = matches!(
        sc.traffic.as_ref().map(|t| &t.model),
        Some(crate::scenario::Model::ClosedLoop { .. })
    );
    let t = &q.totals;
    let secs = q.seconds.max(1e-9);
    let ok_answers = ok_answers(ran);
    Queries {
        due: t.due,
        sent: t.sent,
        answered: t.answered,
        ok: Some(q.statuses.successes(ok_answers)),
        failed_answers: q.statuses.failures(ok_answers),
        timed_out: t.timed_out,
        errors: ERROR_CAUSES
            .iter()
            .zip(t.errors)
            .map(|(c, n)| (c.to_string(), n))
            .collect(),
        rate_target: (!closed).then(|| q.target_queries / secs),
        rate_achieved: t.answered as f64 / secs,
        rate_sent: t.sent as f64 / secs,
        sent_late: t.sent_late,
        in_flight_at_end: q.in_flight,
        recycled_connections: t.recycled,
        pipelined: t.pipelined,
        truncated: t.truncated,
        answered_late: t.answered_late,
        waited: WAIT_CAUSES
            .iter()
            .zip(t.waited)
            .map(|(c, n)| (c.to_string(), n))
            .collect(),
        bytes_out: t.bytes_out,
        bytes_in: t.bytes_in,
        seconds: q.seconds,
        http_status: q.statuses.http_map(),
        redis_replies: q.statuses.redis_map(),
        control: q.controls.clone(),
    }
}

/// --proto push's keys.
fn push_result(sc: &Scenario, o: &Outcome) -> Option<PushResult> {
    o.push.as_ref().zip(sc.push.as_ref()).map(|(p, listen)| {
        let clock = crate::scenario::DelayClock::new(sc, listen).name();
        PushResult {
            received: p.received,
            lost: p.lost,
            out_of_order: p.out_of_order,
            duplicates: p.duplicates,
            expected: p.expected,
            malformed: p.malformed,
            connections_with_loss: p.connections_with_loss,
            every_us: (listen.every_s * 1e6).round() as u64,
            gap_us: Latency::from_histogram(&o.hists.push_gap),
            jitter_us: Latency::from_histogram(&o.hists.push_jitter),
            delay_us: clock.map(|_| Latency::from_histogram(&o.hists.push_delay)),
            delay_clock: clock.map(str::to_string),
            client_busy_pct: 100.0 * p.busy(),
            client_busy_ns: p.busy_ns,
            client_worker_ns: p.worker_ns,
            stamps_ahead: p.stamps_ahead,
        }
    })
}

/// The errnos of `failed_other_errno`'s names ([`errno_name`]'s "EIO (5)"
/// or "errno 97"), for results written before `failed_other_by_errno`; a
/// name without a number counts as errno 0.
fn errno_numbers(names: &BTreeMap<String, u64>) -> BTreeMap<i32, u64> {
    let mut by_errno = BTreeMap::new();
    for (name, n) in names {
        let errno = name
            .rsplit(['(', ' '])
            .next()
            .and_then(|e| e.trim_end_matches(')').parse().ok())
            .unwrap_or(0);
        *by_errno.entry(errno).or_default() += n;
    }
    by_errno
}

/// A time read back from a result: a file may hold any number, and
/// `Duration::from_secs_f64` panics on a negative or huge one.
fn duration(key: &str, secs: f64) -> anyhow::Result<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(secs)
        .map_err(|_| anyhow::anyhow!("{key} is {secs}: not a time in seconds"))
}

/// The scenario's widening of what counts as a successful answer.
pub fn ok_answers(sc: &Scenario) -> crate::metrics::OkAnswers<'_> {
    sc.traffic
        .as_ref()
        .map(|t| crate::metrics::OkAnswers {
            rcodes: &t.ok_rcodes,
            status: &t.ok_status,
        })
        .unwrap_or_default()
}

impl RunResult {
    /// What the result measured, in the form the summary prints (for
    /// `throng merge` and the parent of --processes).
    pub fn outcome(&self) -> anyhow::Result<Outcome> {
        let c = &self.connections;
        let mut hists = self.connection_histograms()?;
        let queries = match (&self.queries, &self.latency) {
            (Some(q), Some(l)) => Some(self.query_outcome(q, l, &mut hists)?),
            _ => None,
        };
        Ok(Outcome {
            totals: conn_totals(c),
            hists,
            peak: c.peak,
            per_second: self.per_second.clone(),
            interrupted: self.interrupted,
            ramp_time: c
                .ramp_s
                .map(|s| duration("connections.ramp_s", s))
                .transpose()?,
            verify_time: c
                .verify_s
                .map(|s| duration("connections.verify_s", s))
                .transpose()?,
            elapsed: duration("duration_s", self.duration_s)?,
            queries,
            overrun: self.overrun.clone(),
            observed: crate::evidence::Observed {
                client: self.client.clone(),
                server: self.server_seen.clone(),
            },
            ramp_stopped: c.ramp_stopped.clone(),
            wall: self.slice.as_ref().map(|s| s.wall),
            push: self.push.as_ref().map(push_totals),
        })
    }

    /// The histograms of the connections and of --proto push (the
    /// queries' are [`RunResult::query_outcome`]'s).
    fn connection_histograms(&self) -> anyhow::Result<Histograms> {
        let c = &self.connections;
        let mut hists = Histograms {
            connect_time: hdr(&c.connect_time_us.hdr, "connections.connect_time_us")?,
            ..Histograms::default()
        };
        if let Some(p) = &c.connect_syscall_us {
            hists.connect_syscall = hdr(&p.hdr, "connections.connect_syscall_us")?;
        }
        if let Some(p) = &self.push {
            hists.push_gap = hdr(&p.gap_us.hdr, "push.gap_us")?;
            hists.push_jitter = hdr(&p.jitter_us.hdr, "push.jitter_us")?;
            if let Some(d) = &p.delay_us {
                hists.push_delay = hdr(&d.hdr, "push.delay_us")?;
            }
        }
        if let Some(p) = &c.tls_handshake_us {
            hists.tls_handshake = hdr(&p.hdr, "connections.tls_handshake_us")?;
        }
        if let Some(p) = &c.ws_handshake_us {
            hists.ws_handshake = hdr(&p.hdr, "connections.ws_handshake_us")?;
        }
        Ok(hists)
    }

    /// What the query traffic measured; its histograms go into `hists`.
    fn query_outcome(
        &self,
        q: &Queries,
        l: &LatencyResult,
        hists: &mut Histograms,
    ) -> anyhow::Result<QueryOutcome> {
        let statuses = self.statuses(q);
        hists.response_time = hdr(&l.response_time_us.hdr, "latency.response_time_us")?;
        hists.service_time = hdr(&l.service_time_us.hdr, "latency.service_time_us")?;
        hists.send_lag = hdr(&l.send_lag_us.hdr, "latency.send_lag_us")?;
        hists.loop_lag = hdr(&l.loop_lag_us.hdr, "latency.loop_lag_us")?;
        if let Some(late) = &l.late_response_time_us {
            hists.late_time = hdr(&late.hdr, "latency.late_response_time_us")?;
        }
        Ok(QueryOutcome {
            totals: query_totals(q),
            statuses,
            in_flight: q.in_flight_at_end,
            seconds: q.seconds,
            target_queries: q.rate_target.unwrap_or(0.0) * q.seconds,
            controls: q.control.clone(),
        })
    }

    /// The answers by what they said: the DNS RCODEs (per query type too),
    /// the HTTP statuses, the Redis replies, and the plain successes and
    /// mismatches.
    fn statuses(&self, q: &Queries) -> StatusCounts {
        let mut statuses = StatusCounts::default();
        if let Some(d) = &self.dns {
            for (name, n) in &d.rcodes {
                match rcode_of(name) {
                    Some(code) => statuses.rcodes[code] += n,
                    None if name == "echoed" => statuses.echoed += n,
                    None => {}
                }
            }
            for (qtype, rcodes) in &d.rcodes_by_qtype {
                let Some(t) = wire::dns::rtype_from_name(qtype) else {
                    continue;
                };
                let mut row = [0; 16];
                for (name, n) in rcodes {
                    if let Some(code) = rcode_of(name) {
                        row[code] += n;
                    }
                }
                statuses.merge(&StatusCounts {
                    by_qtype: vec![(t, row)],
                    ..StatusCounts::default()
                });
            }
        }
        for (code, n) in &q.http_status {
            if let Ok(code) = code.parse::<usize>() {
                statuses.http[code.min(599)] += n;
            }
        }
        for (kind, n) in &q.redis_replies {
            if let Some(i) = wire::resp::VALUE_KINDS.iter().position(|k| k == kind) {
                statuses.redis[i] += n;
            }
        }
        for (name, n) in &q.failed_answers {
            let word = name.strip_prefix(crate::metrics::REDIS_FAILED);
            if let Some(w) = word.and_then(|w| wire::resp::ERROR_WORDS.iter().position(|e| *e == w))
            {
                statuses.redis[wire::resp::VALUE_KINDS.len() + w] += n;
            }
        }
        // The plain successes and mismatches (echo, ping) have no
        // map of their own: what the counts above do not explain.
        // (A result without `ok` counted every answer a success.)
        let ok_answers = ok_answers(&self.scenario);
        statuses.mismatch = q.failed_answers.get("mismatch").copied().unwrap_or(0);
        let ok = q.ok.unwrap_or(q.answered.saturating_sub(statuses.mismatch));
        statuses.ok = ok.saturating_sub(statuses.successes(ok_answers));
        statuses
    }
}

/// A histogram of the file, its key named when it does not decode.
fn hdr(s: &str, key: &str) -> anyhow::Result<hdrhistogram::Histogram<u64>> {
    decode_histogram(s).with_context(|| format!("{key}.hdr"))
}

/// The connections' counters.
fn conn_totals(c: &Connections) -> ConnTotals {
    let mut totals = ConnTotals {
        attempted: c.attempted,
        established: c.established,
        verified: c.verified,
        unverified: c.unverified,
        failed_established: c.failed_established,
        unresolved: c.unresolved,
        idle: c.idle,
        established_initial: c.established.saturating_sub(c.replaced),
        closed: c.closed,
        peer_closed: c.peer_closed,
        idle_closed: c.idle_closed,
        silent: c.silent,
        idle_closed_ms: c.idle_closed_ms,
        idle_closed_ms_sq: c.idle_closed_ms_sq,
        tls_resumed: c.tls_resumed,
        tls_error: c.tls_error.clone(),
        probe_rejected: c.probe_rejected,
        probe_reply: c.probe_reply.clone(),
        sources_refused: c.sources_refused.clone(),
        ws_close: crate::metrics::ws_close_slots(&c.ws_close_codes),
        ws_refused: crate::metrics::ws_refused_slots(&c.ws_refused),
        ws_pings: c.ws_pings,
        ..ConnTotals::default()
    };
    for b in Bucket::ALL {
        totals.failed[b as usize] = c.failed.get(b.key()).copied().unwrap_or(0);
    }
    if c.failed_other_by_errno.is_empty() {
        totals.other_errno = errno_numbers(&c.failed_other_errno);
    } else {
        totals.other_errno.clone_from(&c.failed_other_by_errno);
    }
    totals
}

/// The queries' counters.
fn query_totals(q: &Queries) -> QueryTotals {
    let mut qt = QueryTotals {
        sent: q.sent,
        answered: q.answered,
        timed_out: q.timed_out,
        bytes_out: q.bytes_out,
        bytes_in: q.bytes_in,
        sent_late: q.sent_late,
        recycled: q.recycled_connections,
        pipelined: q.pipelined,
        truncated: q.truncated,
        answered_late: q.answered_late,
        ..QueryTotals::default()
    };
    for (i, cause) in ERROR_CAUSES.iter().enumerate() {
        qt.errors[i] = q.errors.get(*cause).copied().unwrap_or(0);
    }
    // (A result without `due`: sent and the causes of queries not sent.)
    qt.due = if q.due > 0 || q.sent == 0 {
        q.due
    } else {
        q.sent
            + ["not_sent", "no_connection", "connect", "behind_schedule"]
                .iter()
                .map(|c| q.errors.get(*c).copied().unwrap_or(0))
                .sum::<u64>()
    };
    for (i, cause) in WAIT_CAUSES.iter().enumerate() {
        qt.waited[i] = q.waited.get(*cause).copied().unwrap_or(0);
    }
    qt
}

/// What arrived of --proto push.
fn push_totals(p: &PushResult) -> PushTotals {
    PushTotals {
        received: p.received,
        lost: p.lost,
        out_of_order: p.out_of_order,
        duplicates: p.duplicates,
        malformed: p.malformed,
        expected: p.expected,
        connections_with_loss: p.connections_with_loss,
        busy_ns: p.client_busy_ns,
        worker_ns: p.client_worker_ns,
        stamps_ahead: p.stamps_ahead,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{outcome, slice};

    #[test]
    fn errnos_round_trip_by_number() {
        let mut o = outcome(1, 2.0);
        // 200 has no name (errno_name: "errno 200"); 0 is what an
        // unparseable name would give.
        o.totals.other_errno = BTreeMap::from([(libc::EIO, 2), (200, 3), (0, 1)]);
        let r = slice(1, &o);
        assert_eq!(r.connections.failed_other_by_errno, o.totals.other_errno);
        assert_eq!(
            r.outcome().unwrap().totals.other_errno,
            o.totals.other_errno
        );
        // Through the file too.
        let back: RunResult = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(
            back.outcome().unwrap().totals.other_errno,
            o.totals.other_errno
        );
    }

    #[test]
    fn errno_numbers_are_read_before_names() {
        let mut r = slice(1, &outcome(1, 2.0));
        r.connections.failed_other_errno = BTreeMap::from([("a name that says nothing".into(), 4)]);
        r.connections.failed_other_by_errno = BTreeMap::from([(libc::ENOBUFS, 4)]);
        assert_eq!(
            r.outcome().unwrap().totals.other_errno,
            BTreeMap::from([(libc::ENOBUFS, 4)])
        );
    }

    #[test]
    fn results_without_errno_numbers_have_their_names_parsed() {
        let r = slice(1, &outcome(1, 2.0));
        let mut v = serde_json::to_value(&r).unwrap();
        let c = v["connections"].as_object_mut().unwrap();
        assert!(c.remove("failed_other_by_errno").is_some());
        c["failed_other_errno"] = serde_json::json!({
            "EPERM (1)": 1, "errno 97": 2, "ECONNABORTED (103)": 3, "unknown": 4
        });
        let old: RunResult = serde_json::from_value(v).unwrap();
        assert!(old.connections.failed_other_by_errno.is_empty());
        assert_eq!(
            old.outcome().unwrap().totals.other_errno,
            BTreeMap::from([(libc::EPERM, 1), (97, 2), (libc::ECONNABORTED, 3), (0, 4)])
        );
    }

    #[test]
    fn a_run_without_other_errnos_writes_no_numbers() {
        let mut o = outcome(1, 2.0);
        o.totals.other_errno.clear();
        let v = serde_json::to_value(slice(1, &o)).unwrap();
        assert!(v["connections"].get("failed_other_by_errno").is_none());
        assert_eq!(
            v["connections"]["failed_other_errno"],
            serde_json::json!({})
        );
    }

    #[test]
    fn a_result_read_back_as_a_measurement_gives_the_same_result() {
        let r = slice(2, &outcome(3, 2.5));
        let again = RunResult::new(
            &r.scenario,
            &r.scenario.clone(),
            r.environment.clone(),
            &r.outcome().unwrap(),
        );
        let mut want = r.clone();
        // `target` is the part's share; new() takes it from the scenario it
        // ran, and the ramp's rate counts at most that many.
        want.connections.target = again.connections.target;
        want.connections.connect_rate = again.connections.connect_rate;
        assert_eq!(again, want);
    }
}
