//! Merging results of slices of one run: counters summed, HDR histograms
//! added (never percentiles averaged), per-second series aligned on
//! wall-clock seconds. Results of different scenarios are refused, with the
//! first difference named.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde_json::Value;

use crate::engine::Sample;
use crate::metrics::{decode_histogram, Histograms, Latency, Percentiles};
use crate::report::json::{LatencyResult, Part, RunResult};
use crate::UsageError;

/// Reads one result file.
pub fn read(path: &Path) -> Result<RunResult> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        UsageError(format!(
            "{}: not a throng client result: {e}",
            path.display()
        ))
        .into()
    })
}

/// The first path at which two JSON values differ.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let (va, vb) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                first_difference(va, vb, &format!("{path}.{k}"))
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (va, vb))| first_difference(va, vb, &format!("{path}[{i}]"))),
        _ if a == b => None,
        _ => Some(format!("{path} ({a} vs {b})")),
    }
}

fn add_hdr(acc: &mut Histogram<u64>, hdr: &str) -> Result<()> {
    acc.add(&decode_histogram(hdr)?)
        .map_err(|e| anyhow::anyhow!("adding histograms: {e:?}"))
}

fn sum_maps(acc: &mut BTreeMap<String, u64>, m: &BTreeMap<String, u64>) {
    for (k, v) in m {
        *acc.entry(k.clone()).or_default() += v;
    }
}

fn add_opt<T: std::ops::Add<Output = T> + Copy>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x + y),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Merges results of one run. `names` say where each came from (for the
/// `parts` list). Errors when the results are of different scenarios.
pub fn merge(results: &[RunResult], names: &[String]) -> Result<RunResult> {
    let first = results.first().context("nothing to merge")?;
    let identity = first.scenario.identity();
    for (r, name) in results.iter().zip(names).skip(1) {
        if r.schema_version != first.schema_version {
            return Err(UsageError(format!(
                "{name} has schema version {}, {} has {}: results of different throng versions",
                r.schema_version, names[0], first.schema_version
            ))
            .into());
        }
        if let Some(diff) = first_difference(&identity, &r.scenario.identity(), "scenario") {
            return Err(UsageError(format!(
                "{name} and {} are not slices of one run: {diff}",
                names[0]
            ))
            .into());
        }
    }
    let mut m = first.clone();
    m.scenario.segment = None;
    m.parts = results
        .iter()
        .zip(names)
        .map(|(r, n)| Part {
            from: n.clone(),
            segment: r.scenario.segment,
            hostname: r.environment.hostname.clone(),
            started_unix_s: r.environment.started_unix_s,
            clock_offset_s: r.environment.clock_offset_s,
            interrupted: r.interrupted,
        })
        .collect();
    let mut h = Histograms::default();
    let c = &mut m.connections;
    *c = first.connections.clone();
    c.failed.values_mut().for_each(|v| *v = 0);
    c.failed_other_errno.clear();
    (
        c.target,
        c.attempted,
        c.established,
        c.verified,
        c.unverified,
        c.peak,
        c.closed,
    ) = (0, 0, 0, 0, 0, 0, 0);
    (c.peer_closed, c.tls_resumed, c.probe_rejected) = (0, 0, 0);
    c.probe_reply = None;
    c.ramp_s = None;
    c.verify_s = None;
    for r in results {
        let rc = &r.connections;
        c.target += rc.target;
        c.attempted += rc.attempted;
        c.established += rc.established;
        c.verified += rc.verified;
        c.unverified += rc.unverified;
        // Slices hold their connections at the same time: their peaks add.
        c.peak += rc.peak;
        c.closed += rc.closed;
        sum_maps(&mut c.failed, &rc.failed);
        sum_maps(&mut c.failed_other_errno, &rc.failed_other_errno);
        c.verify_s = match (c.verify_s, rc.verify_s) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        c.ramp_s = match (c.ramp_s, rc.ramp_s) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        add_hdr(&mut h.connect_time, &rc.connect_time_us.hdr)?;
        if let Some(p) = &rc.connect_syscall_us {
            add_hdr(&mut h.connect_syscall, &p.hdr)?;
        }
        c.peer_closed += rc.peer_closed;
        c.tls_resumed += rc.tls_resumed;
        c.probe_rejected += rc.probe_rejected;
        if c.probe_reply.is_none() {
            c.probe_reply.clone_from(&rc.probe_reply);
        }
        if c.tls_error.is_none() {
            c.tls_error.clone_from(&rc.tls_error);
        }
        if let Some(p) = &rc.tls_handshake_us {
            add_hdr(&mut h.tls_handshake, &p.hdr)?;
        }
    }
    if c.tls_handshake_us.is_some() {
        c.tls_handshake_us = Some(Percentiles::of(&h.tls_handshake));
    }
    c.connect_rate = c.ramp_s.map(|r| c.established as f64 / r.max(1e-9));
    c.connect_time_us = Percentiles::of(&h.connect_time);
    c.connect_syscall_us =
        (!h.connect_syscall.is_empty()).then(|| Percentiles::of(&h.connect_syscall));
    m.interrupted = results.iter().any(|r| r.interrupted);
    m.duration_s = results.iter().map(|r| r.duration_s).fold(0.0, f64::max);

    if let Some(q) = m.queries.as_mut() {
        q.errors.values_mut().for_each(|v| *v = 0);
        q.http_status.clear();
        q.control.clear();
        let mut pipelined = 0;
        let (mut sent, mut answered, mut timed_out, mut late, mut inflight, mut recycled) =
            (0, 0, 0, 0, 0, 0);
        let (mut out, mut inn, mut target, mut achieved, mut secs) = (0, 0, None, 0.0, 0.0f64);
        let mut sent_rate = 0.0;
        for r in results {
            let (Some(rq), Some(rl)) = (&r.queries, &r.latency) else {
                continue;
            };
            sent += rq.sent;
            answered += rq.answered;
            timed_out += rq.timed_out;
            late += rq.sent_late;
            inflight += rq.in_flight_at_end;
            recycled += rq.recycled_connections;
            pipelined += rq.pipelined;
            out += rq.bytes_out;
            inn += rq.bytes_in;
            target = add_opt(target, rq.rate_target);
            achieved += rq.rate_achieved;
            sent_rate += rq.rate_sent;
            secs = secs.max(rq.seconds);
            sum_maps(&mut q.errors, &rq.errors);
            sum_maps(&mut q.http_status, &rq.http_status);
            q.control.extend(rq.control.iter().cloned());
            add_hdr(&mut h.response_time, &rl.response_time_us.hdr)?;
            add_hdr(&mut h.service_time, &rl.service_time_us.hdr)?;
            add_hdr(&mut h.send_lag, &rl.send_lag_us.hdr)?;
            add_hdr(&mut h.loop_lag, &rl.loop_lag_us.hdr)?;
        }
        (q.sent, q.answered, q.timed_out, q.sent_late) = (sent, answered, timed_out, late);
        (q.in_flight_at_end, q.recycled_connections) = (inflight, recycled);
        q.pipelined = pipelined;
        (
            q.bytes_out,
            q.bytes_in,
            q.rate_target,
            q.rate_achieved,
            q.seconds,
        ) = (out, inn, target, achieved, secs);
        q.rate_sent = sent_rate;
        m.latency = Some(LatencyResult {
            response_time_us: Latency::of(&h.response_time),
            service_time_us: Latency::of(&h.service_time),
            send_lag_us: Latency::of(&h.send_lag),
            loop_lag_us: Latency::of(&h.loop_lag),
        });
    }
    if let Some(d) = m.dns.as_mut() {
        d.rcodes.clear();
        d.rcodes_by_qtype.clear();
        for r in results {
            if let Some(rd) = &r.dns {
                sum_maps(&mut d.rcodes, &rd.rcodes);
                for (qtype, rcodes) in &rd.rcodes_by_qtype {
                    sum_maps(d.rcodes_by_qtype.entry(qtype.clone()).or_default(), rcodes);
                }
            }
        }
    }
    m.per_second = merge_seconds(results);
    Ok(m)
}

/// Aligns the per-second series on wall-clock seconds and merges them
/// (their histograms added: exact percentiles of every slice together).
fn merge_seconds(results: &[RunResult]) -> Vec<Sample> {
    let mut by_second: BTreeMap<u64, Vec<&Sample>> = BTreeMap::new();
    for r in results {
        for s in &r.per_second {
            by_second.entry(s.unix_s).or_default().push(s);
        }
    }
    let first = by_second.keys().next().copied().unwrap_or(0);
    by_second
        .into_values()
        .map(|parts| {
            let mut s = Sample::merged(parts);
            s.t = s.unix_s - first + 1;
            s
        })
        .collect()
}

/// What came back from the slices of one run (child processes or hosts).
pub struct Slices {
    pub results: Vec<RunResult>,
    /// Where each result came from.
    pub names: Vec<String>,
    /// The slices that gave no result, each with why.
    pub missing: Vec<String>,
    pub interrupted: bool,
    /// The run ended as planned, whatever the slices say (--hold ended by
    /// Ctrl-C: the children, run with --pause, saw the terminal's signal).
    pub ended_as_planned: bool,
}

/// The end of a sliced run: merges what arrived (marked partial when some
/// slice is missing), writes --json, prints the summary with one line per
/// missing slice. Exit code 1 for a partial merge or more failed
/// connections than `max_failures`.
pub fn finish(
    s: Slices,
    scenario: Option<&crate::scenario::Scenario>,
    json: Option<&Path>,
    label: &str,
    max_failures: u64,
    checks: &[crate::report::check::Check],
) -> Result<std::process::ExitCode> {
    use std::io::Write;
    if s.results.is_empty() {
        anyhow::bail!("no {label} produced a result: {}", s.missing.join("; "));
    }
    let mut merged = merge(&s.results, &s.names)?;
    if let Some(sc) = scenario {
        merged.scenario = sc.clone();
    }
    merged.interrupted |= s.interrupted;
    if s.ended_as_planned && !s.interrupted {
        merged.interrupted = false;
    }
    merged.partial = !s.missing.is_empty();
    merged.missing = s.missing.clone();
    let outcome = merged.outcome()?;
    let mut out = std::io::stdout().lock();
    crate::report::summary(&merged.scenario, &outcome, &mut out)?;
    writeln!(
        out,
        "  {label:<13} {}, merged: {} result(s)",
        s.results.len() + s.missing.len(),
        s.results.len()
    )?;
    for m in &s.missing {
        writeln!(out, "  PARTIAL: {m}")?;
    }
    crate::report::check::apply(checks, &mut merged, &mut out)?;
    out.flush()?;
    drop(out);
    if let Some(p) = json {
        crate::report::json::write_atomic(p, &merged)?;
    }
    Ok(crate::report::check::exit_code(
        &merged,
        max_failures,
        merged.interrupted,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{encode_histogram, new_histogram};
    use proptest::prelude::*;

    proptest! {
        /// Histograms recorded in slices and merged through their V2
        /// encoding equal the histogram of every sample recorded in one place.
        #[test]
        fn merged_histograms_equal_one_place(
            values in proptest::collection::vec(1u64..10_000_000, 1..2000),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let mut whole = new_histogram();
            for &v in &values {
                whole.record(v).unwrap();
            }
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(values.len() + 1)).collect();
            at.push(0);
            at.push(values.len());
            at.sort();
            let mut merged = new_histogram();
            for w in at.windows(2) {
                let mut part = new_histogram();
                for &v in &values[w[0]..w[1]] {
                    part.record(v).unwrap();
                }
                add_hdr(&mut merged, &encode_histogram(&part)).unwrap();
            }
            prop_assert_eq!(merged.len(), whole.len());
            for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
                prop_assert_eq!(merged.value_at_quantile(q), whole.value_at_quantile(q));
            }
            prop_assert_eq!(encode_histogram(&merged), encode_histogram(&whole));
        }
    }

    #[test]
    fn differences_are_named() {
        let a = serde_json::json!({"connections": 10, "ramp": {"kind": "rate", "per_second": 5.0}});
        let b = serde_json::json!({"connections": 10, "ramp": {"kind": "rate", "per_second": 6.0}});
        assert_eq!(
            first_difference(&a, &b, "scenario").as_deref(),
            Some("scenario.ramp.per_second (5.0 vs 6.0)")
        );
        assert_eq!(first_difference(&a, &a, "scenario"), None);
    }
}
