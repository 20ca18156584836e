//! Merging results of slices of one run: each result read back as what it
//! measured ([`super::Outcome`]), merged with that type's one merge
//! (counters summed, HDR histograms added, never percentiles averaged),
//! written back as a result; per-second series aligned on wall-clock
//! seconds. Results of different scenarios are refused, with the first
//! difference named.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use serde_json::Value;

use super::file::{Part, Queries, RunResult, SliceOf};
use super::{Outcome, Sample};
use crate::domain::{RunIdFrom, Segment};
use crate::usage::UsageError;

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

/// Which slice of which run a result says it is: its run id (None in
/// results written before they said so) and its K/N (None: an older
/// whole run).
fn slice_of(r: &RunResult) -> (Option<&str>, Option<Segment>) {
    match &r.slice {
        Some(s) => (
            Some(&s.run_id),
            Some(Segment {
                index: s.index,
                count: s.count,
            }),
        ),
        None => (None, r.scenario.segment),
    }
}

/// Refuses a slice given twice, slices of different runs and slices of
/// different splits, naming the two files and what to do.
fn check_slices(results: &[RunResult], names: &[String]) -> Result<(), UsageError> {
    for (j, (b, nb)) in results.iter().zip(names).enumerate() {
        for (a, na) in results.iter().zip(names).take(j) {
            let ((ida, sa), (idb, sb)) = (slice_of(a), slice_of(b));
            if let (Some(ida), Some(idb)) = (ida, idb) {
                if ida != idb {
                    return Err(UsageError(format!(
                        "{na} is of run {ida} and {nb} of run {idb}: slices of different runs \
                         do not merge; merge the slices of one run (slices started by hand \
                         share a run when they are given the same --run-id, or the same \
                         --start-at)"
                    )));
                }
            }
            let (Some(sa), Some(sb)) = (sa, sb) else {
                continue;
            };
            let run = ida.map_or(String::new(), |id| format!(" of run {id}"));
            if sa.count != sb.count {
                return Err(UsageError(format!(
                    "{na} is slice {}/{} and {nb} slice {}/{}{run}: slices of different splits \
                     do not merge; merge the {} slices of one run",
                    sa.index, sa.count, sb.index, sb.count, sa.count
                )));
            }
            if sa.index == sb.index {
                return Err(UsageError(format!(
                    "{na} and {nb} are both slice {}/{}{run}: a slice given twice would be \
                     counted twice; give each slice's result once",
                    sa.index, sa.count
                )));
            }
        }
    }
    Ok(())
}

/// The slices of a split that no result is of, in words.
fn missing_slices(results: &[RunResult]) -> Vec<String> {
    let segments: Vec<Segment> = results.iter().filter_map(|r| slice_of(r).1).collect();
    let Some(count) = segments.first().map(|s| s.count) else {
        return Vec::new();
    };
    let run = results
        .iter()
        .find_map(|r| slice_of(r).0)
        .map_or(String::new(), |id| format!(" of run {id}"));
    // (A count of 2^53 in a file is not a list to walk.)
    let given: std::collections::BTreeSet<u64> = segments.iter().map(|s| s.index).collect();
    let absent = count.saturating_sub(given.len() as u64);
    let mut words: Vec<String> = (1..=count)
        .filter(|k| !given.contains(k))
        .take(20)
        .map(|k| format!("slice {k}/{count}{run}: no result given"))
        .collect();
    if absent > words.len() as u64 {
        words.push(format!(
            "and {} more slices of {count}: no result given",
            absent - words.len() as u64
        ));
    }
    words
}

/// The length of the union of intervals (seconds): the time in which at
/// least one of them ran.
fn union_length(mut spans: Vec<(f64, f64)>) -> f64 {
    spans.retain(|(a, b)| b >= a);
    spans.sort_by(|x, y| x.0.total_cmp(&y.0));
    let mut total = 0.0;
    let mut current: Option<(f64, f64)> = None;
    for (a, b) in spans {
        current = match current {
            Some((ca, cb)) if a <= cb => Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                total += cb - ca;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    total + current.map_or(0.0, |(a, b)| b - a)
}

/// Merges results of one run. `names` say where each came from (for the
/// `parts` list). Errors when the results are of different scenarios or
/// runs, or when a slice is given twice; a merge that misses slices is
/// marked partial.
pub fn merge(results: &[RunResult], names: &[String]) -> Result<RunResult> {
    let first = results.first().context("nothing to merge")?;
    check_one_run(results, names)?;
    // One measurement: each result's, merged, written back as a result.
    let outcome = |r: &RunResult, name: &str| {
        r.outcome()
            .map_err(|e| UsageError(format!("{name}: not a throng client result: {e:#}")))
    };
    let mut o = outcome(first, &names[0])?;
    for (r, name) in results.iter().zip(names).skip(1) {
        o.merge(&outcome(r, name)?)
            .map_err(|e| UsageError(format!("{name} cannot be added: {e:#}")))?;
    }
    let mut whole = first.scenario.clone();
    whole.segment = None;
    let mut m = RunResult::new(&whole, &whole, first.environment.clone(), &o);
    file_fields(&mut m, results, names);
    say_which_run(&mut m, &o, results, names);
    longest_times(&mut m, results);
    if first.queries.is_none() {
        // A merge has traffic when its first slice has.
        (m.queries, m.latency, m.dns) = (None, None, None);
    }
    whole_rates(&mut m, results);
    m.per_second = merge_seconds(results);
    Ok(m)
}

/// Refuses results of different throng versions or scenarios, and slices
/// that do not make one run (see [`check_slices`]).
fn check_one_run(results: &[RunResult], names: &[String]) -> Result<()> {
    let first = &results[0];
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
    check_slices(results, names)?;
    Ok(())
}

/// What the measurement does not hold: where the parts came from, and the
/// file's own fields, as the first result has them; what is missing.
fn file_fields(m: &mut RunResult, results: &[RunResult], names: &[String]) {
    let first = &results[0];
    m.schema_version = first.schema_version;
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
            slice: r.slice.clone(),
        })
        .collect();
    m.checks = first.checks.clone();
    // Missing: what the parts say they missed, and the slices not given.
    m.missing = results.iter().flat_map(|r| r.missing.clone()).collect();
    m.missing.extend(missing_slices(results));
    m.partial = results.iter().any(|r| r.partial) || !m.missing.is_empty();
}

/// The whole's slice (1/1 of the parts' run, over their wall-clock hull),
/// or a note naming the results that do not say which run they are of.
fn say_which_run(m: &mut RunResult, o: &Outcome, results: &[RunResult], names: &[String]) {
    let unsaid: Vec<&str> = results
        .iter()
        .zip(names)
        .filter(|(r, _)| r.slice.is_none())
        .map(|(_, n)| n.as_str())
        .collect();
    match (&o.wall, results.iter().find_map(|r| r.slice.as_ref())) {
        (Some(wall), Some(s)) => {
            m.slice = Some(SliceOf {
                index: 1,
                count: 1,
                wall: *wall,
                ..s.clone()
            });
            if let Some(gap) = wall
                .held_together_s()
                .filter(|t| *t < 0.0 && results.len() > 1)
            {
                m.notes.push(format!(
                    "the parts never held their connections together ({:.3} s apart): the \
                     connections they count were not open at once",
                    -gap
                ));
            }
            if s.run_id_from == RunIdFrom::Scenario && results.len() > 1 {
                m.notes.push(format!(
                    "run {} is named after the scenario alone (--segment without --run-id or \
                     --start-at): slices of two runs of this scenario cannot be told apart",
                    s.run_id
                ));
            }
        }
        _ => m.notes.push(format!(
            "{} {} neither which run nor when (written by an older throng): \
             the run is not checked, and rates are each slice's own, summed",
            unsaid.join(", "),
            if unsaid.len() == 1 { "says" } else { "say" }
        )),
    }
}

/// Each slice's share of the connections summed; times are the longest
/// slice's, kept to the bit as written (not passed through a Duration's
/// nanoseconds).
fn longest_times(m: &mut RunResult, results: &[RunResult]) {
    let c = &mut m.connections;
    c.target = results.iter().map(|r| r.connections.target).sum();
    let longest = |f: fn(&RunResult) -> Option<f64>| {
        results
            .iter()
            .filter_map(f)
            .fold(None, |a: Option<f64>, b| Some(a.map_or(b, |a| a.max(b))))
    };
    c.ramp_s = longest(|r| r.connections.ramp_s);
    c.verify_s = longest(|r| r.connections.verify_s);
    // (The ramp's own connections: replacements made after it are not.)
    c.connect_rate = c.ramp_s.map(|r| {
        (c.established - c.replaced.min(c.established)).min(c.target) as f64 / r.max(1e-9)
    });
    m.duration_s = results.iter().map(|r| r.duration_s).fold(0.0, f64::max);
}

/// The whole's query rates: over the time in which some slice sent when
/// every slice says when it did, else each slice's own rate, summed.
fn whole_rates(m: &mut RunResult, results: &[RunResult]) {
    let with_traffic: Vec<&RunResult> = results
        .iter()
        .filter(|r| r.latency.is_some() && r.queries.is_some())
        .collect();
    let spans: Option<Vec<(f64, f64)>> = with_traffic
        .iter()
        .map(|r| r.slice.as_ref().and_then(|s| s.wall.traffic()))
        .collect();
    let Some(q) = m.queries.as_mut() else {
        return;
    };
    let queries = || with_traffic.iter().filter_map(|r| r.queries.as_ref());
    let asked = |q: &Queries| q.rate_target.map(|r| r * q.seconds);
    match spans {
        Some(spans) => {
            // The whole's rates are over the time in which some slice
            // sent: slices run together give about the sum of theirs,
            // slices run one after the other do not add their rates.
            let longest = queries().map(|q| q.seconds).fold(0.0, f64::max);
            let secs = union_length(spans);
            q.seconds = secs;
            let per = secs.max(1e-9);
            q.rate_target = queries()
                .map(asked)
                .fold(None, crate::metrics::add_opt)
                .map(|n| n / per);
            q.rate_achieved = q.answered as f64 / per;
            q.rate_sent = q.sent as f64 / per;
            if secs > longest * 1.05 + 0.05 {
                m.notes.push(format!(
                    "the slices did not send at the same time: together they sent over \
                     {secs:.2} s, the longest of them over {longest:.2} s; rates are over \
                     the {secs:.2} s"
                ));
            }
        }
        None => {
            // Each slice's rate over its own traffic time, summed: the
            // best figure when the slices do not say when they ran.
            q.rate_target = queries()
                .map(|q| q.rate_target)
                .fold(None, crate::metrics::add_opt);
            q.rate_achieved = queries().map(|q| q.rate_achieved).sum();
            q.rate_sent = queries().map(|q| q.rate_sent).sum();
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{histogram, outcome, slice, slice_of, timed};
    use crate::metrics::{decode_histogram, encode_histogram, new_histogram, Grow};
    use crate::outcome::{parse, MAX_COUNT};
    use hdrhistogram::Histogram;
    use proptest::prelude::*;

    fn add_hdr(acc: &mut Histogram<u64>, hdr: &str) -> Result<()> {
        acc.take_in(&decode_histogram(hdr)?)
            .map_err(|e| anyhow::anyhow!("adding histograms: {e:?}"))
    }

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

    fn names() -> Vec<String> {
        vec!["a.json".into(), "b.json".into()]
    }

    #[test]
    fn merge_sums_counters_and_adds_histograms() {
        let (a, b) = (slice(1, &outcome(1, 2.0)), slice(2, &outcome(2, 3.0)));
        let m = merge(&[a.clone(), b.clone()], &names()).unwrap();
        let c = &m.connections;
        assert_eq!(c.target, 11);
        assert_eq!((c.attempted, c.established, c.verified), (30, 27, 27));
        assert_eq!(c.closed, 3);
        assert_eq!(c.failed["other"], 3);
        assert_eq!(c.failed_other_by_errno, BTreeMap::from([(libc::EPERM, 3)]));
        assert_eq!(c.failed_other_errno.values().sum::<u64>(), 3);
        // Slices hold their connections at once: their peaks add.
        assert_eq!(c.peak, 27);
        assert_eq!(c.connect_time_us.count, 4);
        assert_eq!(
            encode_histogram(&decode_histogram(&c.connect_time_us.hdr).unwrap()),
            encode_histogram(&histogram(&[100, 200, 200, 200]))
        );
        let q = m.queries.as_ref().unwrap();
        assert_eq!((q.sent, q.answered, q.timed_out), (300, 270, 3));
        assert_eq!(
            (q.bytes_out, q.bytes_in, q.in_flight_at_end),
            (3000, 2700, 3)
        );
        assert_eq!(q.errors["conn_lost"], 3);
        assert_eq!(q.truncated, 6);
        let l = m.latency.as_ref().unwrap();
        assert_eq!(l.response_time_us.count, 4);
        assert_eq!(l.response_time_us.max, 2000);
        let d = m.dns.as_ref().unwrap();
        assert_eq!(d.rcodes["NOERROR"], 270);
        assert_eq!(d.rcodes_by_qtype["A"]["NOERROR"], 270);
        assert_eq!(m.scenario.segment, None);
    }

    #[test]
    fn merge_takes_the_longest_times_and_sums_rates_per_slice() {
        let (a, b) = (slice(1, &outcome(1, 2.0)), slice(2, &outcome(2, 3.0)));
        let m = merge(&[a.clone(), b.clone()], &names()).unwrap();
        let c = &m.connections;
        assert_eq!(c.ramp_s, Some(0.75));
        assert_eq!(c.verify_s, Some(1.5));
        // 27 established, 15 by the ramps, of a target of 11: the rate
        // counts at most the target.
        assert_eq!(c.connect_rate, Some(11.0 / 0.75));
        assert_eq!(m.duration_s, 3.0);
        let q = m.queries.as_ref().unwrap();
        assert_eq!(q.seconds, 3.0);
        // Each slice's rate over its own time, summed (not the sum of
        // queries over the longest time).
        let (qa, qb) = (a.queries.unwrap(), b.queries.unwrap());
        assert_eq!(
            q.rate_target,
            Some(qa.rate_target.unwrap() + qb.rate_target.unwrap())
        );
        assert_eq!(q.rate_achieved, qa.rate_achieved + qb.rate_achieved);
        assert_eq!(q.rate_sent, qa.rate_sent + qb.rate_sent);
        assert_eq!(q.rate_achieved, 90.0 / 2.0 + 180.0 / 3.0);
    }

    #[test]
    fn merge_keeps_the_first_words_and_every_control_command() {
        let mut oa = outcome(1, 2.0);
        oa.totals.probe_reply = Some("REFUSED".into());
        let mut ob = outcome(2, 3.0);
        ob.totals.tls_error = Some("bad certificate".into());
        ob.totals.probe_reply = Some("FORMERR".into());
        let mut oc = outcome(3, 1.0);
        oc.totals.tls_error = Some("expired".into());
        let (a, b, c) = (
            slice_of(1, 3, &oa),
            slice_of(2, 3, &ob),
            slice_of(3, 3, &oc),
        );
        let names = vec!["a".to_string(), "b".into(), "c".into()];
        let m = merge(&[a, b, c], &names).unwrap();
        assert_eq!(m.connections.tls_error.as_deref(), Some("bad certificate"));
        assert_eq!(m.connections.probe_reply.as_deref(), Some("REFUSED"));
        let commands: Vec<&str> = m
            .queries
            .as_ref()
            .unwrap()
            .control
            .iter()
            .map(|e| e.command.as_str())
            .collect();
        assert_eq!(commands, ["rate 1", "rate 2", "rate 3"]);
        let from: Vec<&str> = m.parts.iter().map(|p| p.from.as_str()).collect();
        assert_eq!(from, ["a", "b", "c"]);
        assert_eq!(m.parts[1].hostname, "h2");
        assert_eq!(m.parts[1].segment.map(|s| s.index), Some(2));
    }

    #[test]
    fn merge_keeps_the_first_results_file_fields() {
        let mut a = slice(1, &outcome(1, 2.0));
        a.partial = true;
        a.missing = vec!["slice 3: died".into()];
        a.schema_version = 0;
        let mut b = slice(2, &outcome(2, 3.0));
        b.schema_version = 0;
        b.interrupted = true;
        let m = merge(&[a, b], &names()).unwrap();
        assert!(m.partial);
        assert_eq!(m.missing, ["slice 3: died"]);
        assert_eq!(m.schema_version, 0);
        assert!(m.interrupted);
    }

    #[test]
    fn a_merge_has_traffic_when_its_first_slice_has() {
        let mut quiet = outcome(1, 2.0);
        quiet.queries = None;
        let (a, b) = (slice(1, &quiet), slice(2, &outcome(2, 3.0)));
        let m = merge(&[a.clone(), b.clone()], &names()).unwrap();
        assert!(m.queries.is_none() && m.latency.is_none() && m.dns.is_none());
        let m = merge(&[b, a], &names()).unwrap();
        let q = m.queries.as_ref().unwrap();
        assert_eq!((q.sent, q.rate_achieved), (200, 180.0 / 3.0));
        assert_eq!(m.connections.established, 27);
    }

    #[test]
    fn a_merge_reads_results_written_before_errno_numbers() {
        let mut a = slice(1, &outcome(1, 2.0));
        a.connections.failed_other_by_errno.clear();
        a.connections.failed_other_errno =
            BTreeMap::from([("EPERM (1)".to_string(), 1), ("errno 97".to_string(), 2)]);
        let b = slice(2, &outcome(2, 3.0));
        let m = merge(&[a, b], &names()).unwrap();
        assert_eq!(
            m.connections.failed_other_by_errno,
            BTreeMap::from([(libc::EPERM, 3), (97, 2)])
        );
    }

    /// A slice's result as its file holds it, one key of it replaced.
    fn file_with(path: &[&str], value: serde_json::Value) -> String {
        let mut v = serde_json::to_value(slice(1, &outcome(1, 2.0))).unwrap();
        let (last, up) = path.split_last().unwrap();
        let at = up.iter().fold(&mut v, |v, k| &mut v[*k]);
        at[*last] = value;
        v.to_string()
    }

    #[test]
    fn a_result_file_reads_back_as_written() {
        let a = slice(1, &outcome(1, 2.0));
        assert_eq!(parse(&serde_json::to_string(&a).unwrap()).unwrap(), a);
    }

    /// A negative or huge time in a result file is an error when merged,
    /// not a panic in `Duration::from_secs_f64`.
    #[test]
    fn a_time_that_is_no_duration_is_an_error_not_a_panic() {
        for (path, secs) in [
            (&["connections", "ramp_s"][..], -1.0),
            (&["connections", "verify_s"][..], -0.5),
            (&["duration_s"][..], 1e300),
        ] {
            let r = parse(&file_with(path, secs.into())).unwrap();
            let Err(e) = r.outcome() else {
                panic!("{path:?} = {secs} read as a time");
            };
            let e = e.to_string();
            assert!(e.contains(path[path.len() - 1]), "{e}");
            assert!(merge(&[r.clone(), r], &names()).is_err());
        }
    }

    /// A histogram whose header promises a 4 GiB payload is an error that
    /// names the file and the key, not an allocation that runs `throng
    /// merge` out of memory.
    #[test]
    fn a_histogram_header_past_its_end_is_named_not_allocated() {
        use base64::Engine;
        let mut bytes = 0x1c84_9313u32.to_be_bytes().to_vec();
        bytes.extend(u32::MAX.to_be_bytes());
        bytes.extend([0; 4]);
        bytes.extend(3u32.to_be_bytes());
        bytes.extend(1u64.to_be_bytes());
        bytes.extend(3_600_000_000u64.to_be_bytes());
        bytes.extend(1f64.to_be_bytes());
        bytes.extend([2, 0]);
        let hdr = base64::engine::general_purpose::STANDARD.encode(bytes);
        let r = parse(&file_with(
            &["connections", "connect_time_us", "hdr"],
            hdr.into(),
        ))
        .unwrap();
        let good = slice(2, &outcome(1, 2.0));
        let e = merge(&[good, r], &names()).unwrap_err().to_string();
        assert!(
            e.starts_with("b.json: not a throng client result: connections.connect_time_us.hdr:"),
            "{e}"
        );
        assert!(
            e.contains("payload length 4294967295 runs past its end"),
            "{e}"
        );
    }

    /// Counts past 2^53 are refused on reading: near u64::MAX they would
    /// overflow the sums of a merge (the ConnTotals, QueryTotals and
    /// StatusCounts merges, the HTTP status table), a panic in a debug
    /// build, a wrapped count in a release one.
    #[test]
    fn counts_past_2_pow_53_are_refused_on_reading() {
        for path in [
            &["connections", "attempted"][..],
            &["queries", "sent"],
            &["queries", "http_status", "200"],
            &["dns", "rcodes", "NOERROR"],
        ] {
            let e = parse(&file_with(path, u64::MAX.into())).unwrap_err();
            assert!(e.contains(&path.join(".")), "{e}");
            assert!(e.contains("2^53"), "{e}");
        }
        let max = file_with(&["queries", "sent"], MAX_COUNT.into());
        let r = parse(&max).unwrap();
        assert_eq!(r.queries.as_ref().unwrap().sent, MAX_COUNT);
        let mut other = r.clone();
        other.scenario.segment = Some(Segment { index: 2, count: 2 });
        merge(&[r, other], &names()).unwrap();
    }

    /// A histogram is held to a result's bound on reading, and its sums to
    /// what V2 writes: one counting 2^62 values, added to itself, would
    /// saturate at 2^64, which HdrHistogram V2 cannot write (a panic
    /// writing the merge).
    #[test]
    fn histogram_counts_past_2_pow_53_are_refused_on_reading() {
        let hdr = |n: u64| {
            let mut h = new_histogram();
            h.put_n(250, n);
            encode_histogram(&h)
        };
        let path = ["latency", "response_time_us", "hdr"];
        let r = parse(&file_with(&path, hdr(1 << 62).into())).unwrap();
        let e = merge(&[r], &names()[..1]).unwrap_err().to_string();
        assert!(
            e.starts_with("a.json: not a throng client result: latency.response_time_us.hdr:"),
            "{e}"
        );
        assert!(e.contains("more than a run counts (at most 2^53)"), "{e}");
        // At the bound it reads, and two of it add.
        let r = parse(&file_with(&path, hdr(MAX_COUNT).into())).unwrap();
        let mut other = r.clone();
        other.scenario.segment = Some(Segment { index: 2, count: 2 });
        let m = merge(&[r, other], &names()).unwrap();
        assert_eq!(m.latency.unwrap().response_time_us.count, 2 * MAX_COUNT);
    }

    /// Sums past what V2 writes (2^63) are refused, not saturated.
    #[test]
    fn histogram_sums_past_2_pow_63_are_refused() {
        let mut a = crate::metrics::Histograms::default();
        let mut b = crate::metrics::Histograms::default();
        a.send_lag.put_n(10, 1 << 62);
        b.send_lag.put_n(10, 1 << 62);
        let e = a.merge(&b).unwrap_err().to_string();
        assert!(
            e.contains("more than one histogram can write (2^63)"),
            "{e}"
        );
        b.send_lag.reset();
        b.send_lag.put_n(10, (1 << 62) - 1);
        a.merge(&b).unwrap();
        assert_eq!(a.send_lag.len(), i64::MAX as u64);
        encode_histogram(&a.send_lag);
    }

    #[test]
    fn merging_one_result_gives_it_back() {
        let mut a = slice(1, &outcome(3, 2.5));
        a.scenario.segment = Some(Segment { index: 1, count: 1 });
        let mut m = merge(std::slice::from_ref(&a), &names()[..1]).unwrap();
        m.parts.clear();
        // (It says neither which run nor when: the note says so.)
        assert!(m.notes.remove(0).contains("a.json says neither"));
        let mut want = a.clone();
        want.scenario.segment = None;
        assert_eq!(m, want);
    }

    fn merge_error(results: &[RunResult]) -> String {
        merge(results, &names()).unwrap_err().to_string()
    }

    #[test]
    fn a_slice_given_twice_is_refused_naming_both_files() {
        let a = timed(1, 2, "r1", 1000.0, 2.0);
        let e = merge_error(&[a.clone(), a]);
        assert!(
            e.starts_with("a.json and b.json are both slice 1/2 of run r1"),
            "{e}"
        );
        assert!(e.contains("give each slice's result once"), "{e}");
        // Results that do not say their run: by their segment.
        let old = slice(2, &outcome(1, 2.0));
        let e = merge_error(&[old.clone(), old]);
        assert!(
            e.starts_with("a.json and b.json are both slice 2/2:"),
            "{e}"
        );
    }

    #[test]
    fn slices_of_different_runs_are_refused() {
        let e = merge_error(&[
            timed(1, 2, "r1", 1000.0, 2.0),
            timed(2, 2, "r2", 1000.0, 2.0),
        ]);
        assert!(
            e.starts_with("a.json is of run r1 and b.json of run r2: slices of different runs"),
            "{e}"
        );
        assert!(e.contains("the same --run-id"), "{e}");
        let e = merge_error(&[
            timed(1, 2, "r1", 1000.0, 2.0),
            timed(2, 3, "r1", 1000.0, 2.0),
        ]);
        assert!(e.contains("slices of different splits"), "{e}");
    }

    #[test]
    fn a_merge_missing_slices_is_partial_and_says_which() {
        let m = merge(&[timed(2, 3, "r1", 1000.0, 2.0)], &names()[..1]).unwrap();
        assert!(m.partial);
        assert_eq!(
            m.missing,
            [
                "slice 1/3 of run r1: no result given",
                "slice 3/3 of run r1: no result given"
            ]
        );
        let m = merge(
            &[
                timed(2, 2, "r1", 1000.0, 2.0),
                timed(1, 2, "r1", 1000.0, 2.0),
            ],
            &names(),
        )
        .unwrap();
        assert!(!m.partial && m.missing.is_empty(), "{:?}", m.missing);
        assert!(m.notes.is_empty(), "{:?}", m.notes);
        let s = m.slice.unwrap();
        assert_eq!((s.run_id.as_str(), s.index, s.count), ("r1", 1, 1));
        assert_eq!(m.parts[0].slice.as_ref().unwrap().index, 2);
    }

    #[test]
    fn rates_are_over_the_union_of_the_slices_traffic() {
        // Together: over the common 2 s, the sum of their rates.
        let (a, b) = (timed(1, 2, "r", 1000.0, 2.0), timed(2, 2, "r", 1000.0, 2.0));
        let m = merge(&[a.clone(), b], &names()).unwrap();
        let q = m.queries.as_ref().unwrap();
        assert_eq!(q.seconds, 2.0);
        assert_eq!(q.rate_achieved, 180.0 / 2.0);
        assert_eq!(
            q.rate_achieved,
            2.0 * a.queries.as_ref().unwrap().rate_achieved
        );
        let target = a.queries.as_ref().unwrap().rate_target.unwrap();
        assert_eq!(q.rate_target, Some(2.0 * target));
        assert!(m.notes.is_empty(), "{:?}", m.notes);
        // One after the other: over 4 s, half the sum, and a note says so.
        let (a, b) = (timed(1, 2, "r", 1000.0, 2.0), timed(2, 2, "r", 1002.0, 2.0));
        let m = merge(&[a, b], &names()).unwrap();
        let q = m.queries.as_ref().unwrap();
        assert_eq!(q.seconds, 4.0);
        assert_eq!(q.rate_achieved, 180.0 / 4.0);
        assert_eq!(q.rate_sent, 200.0 / 4.0);
        assert_eq!(q.rate_target, Some(target));
        assert!(
            m.notes[0].contains("did not send at the same time"),
            "{:?}",
            m.notes
        );
        let w = m.slice.unwrap().wall;
        assert_eq!(w.traffic(), Some((1000.0, 1004.0)));
    }

    #[test]
    fn parts_that_never_held_together_say_so() {
        let (a, b) = (timed(1, 2, "r", 1000.0, 2.0), timed(2, 2, "r", 1002.5, 2.0));
        let m = merge(&[a.clone(), b], &names()).unwrap();
        let w = m.slice.unwrap().wall;
        assert_eq!(w.held_together_s(), Some(-0.5));
        let said = m
            .notes
            .iter()
            .any(|n| n.contains("never held their connections together (0.500 s apart)"));
        assert!(said, "{:?}", m.notes);
        // Overlapping: what both held.
        let b = timed(2, 2, "r", 1001.5, 2.0);
        let m = merge(&[a, b], &names()).unwrap();
        assert_eq!(m.slice.unwrap().wall.held_together_s(), Some(0.5));
        assert!(!m.notes.iter().any(|n| n.contains("never held")));
    }

    #[test]
    fn union_lengths() {
        assert_eq!(union_length(vec![]), 0.0);
        assert_eq!(union_length(vec![(0.0, 2.0), (1.0, 3.0)]), 3.0);
        assert_eq!(union_length(vec![(4.0, 5.0), (0.0, 2.0), (1.0, 1.5)]), 3.0);
        assert_eq!(union_length(vec![(0.0, 1.0), (1.0, 2.0)]), 2.0);
        // An interval that ends before it starts is none.
        assert_eq!(union_length(vec![(3.0, 1.0)]), 0.0);
    }

    #[test]
    fn results_that_do_not_say_their_run_merge_as_before_with_a_note() {
        let (a, b) = (slice(1, &outcome(1, 2.0)), timed(2, 2, "r", 1000.0, 3.0));
        let m = merge(&[a, b], &names()).unwrap();
        let q = m.queries.as_ref().unwrap();
        assert_eq!(q.rate_achieved, 90.0 / 2.0 + 90.0 / 3.0);
        assert_eq!(m.notes.len(), 1);
        assert!(
            m.notes[0].starts_with("a.json says neither which run nor when"),
            "{:?}",
            m.notes
        );
        assert!(m.slice.is_none());
    }
}
