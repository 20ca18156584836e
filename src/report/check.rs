//! `--check EXPR`: pass/fail conditions on a result, for scripts and CI.
//!
//! A check names a key of the result JSON, a comparison and a value with
//! its unit: `queries.answered>=99.5%` (of sent), `latency.response_time_us
//! .p99<5ms`, `connections.connect_rate>=10k`, `connections.failed==0` (a
//! map of causes is their sum). Checks are parsed before the run (a bad one
//! is a usage error naming the keys that exist) and evaluated on the
//! result's JSON, so `merge` and `cluster` evaluate them on exact merged
//! figures. This module reads results; it never runs anything.

use serde_json::Value;

pub use crate::outcome::CheckOutcome;

/// One check as parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// As the user wrote it (spaces removed).
    pub expr: String,
    key: String,
    op: Op,
    /// In the key's own unit (µs for `_us` keys, s for `_s` keys), or a
    /// percentage when `of` is set.
    value: f64,
    /// A percentage of this key's value.
    of: Option<&'static str>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Ge,
    Le,
    Gt,
    Lt,
    Eq,
    Ne,
}

impl Op {
    fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Op::Ge => a >= b,
            Op::Le => a <= b,
            Op::Gt => a > b,
            Op::Lt => a < b,
            Op::Eq => a == b,
            Op::Ne => a != b,
        }
    }
}

/// Counts a percentage can be taken of, and of what.
const PERCENT_OF: &[(&str, &str)] = &[
    ("queries.answered", "queries.due"),
    ("queries.ok", "queries.due"),
    ("push.received", "push.expected"),
    ("push.lost", "push.expected"),
    ("push.out_of_order", "push.expected"),
    ("push.duplicates", "push.expected"),
    ("queries.timed_out", "queries.sent"),
    ("queries.errors", "queries.sent"),
    ("queries.sent_late", "queries.sent"),
    ("queries.truncated", "queries.sent"),
    ("queries.in_flight_at_end", "queries.sent"),
    ("queries.rate_achieved", "queries.rate_target"),
    ("queries.rate_sent", "queries.rate_target"),
    ("connections.attempted", "connections.target"),
    ("connections.established", "connections.target"),
    ("connections.verified", "connections.target"),
    ("connections.unverified", "connections.target"),
    ("connections.failed", "connections.target"),
    ("connections.peak", "connections.target"),
    ("connections.silent", "connections.target"),
];

const PERCENTILES: &[&str] = &["p50", "p90", "p99", "p999", "max", "mean"];
const LATENCY_EXTRA: &[&str] = &["p9999", "stdev"];

/// Every key a check may name (`failed` and `errors` also take a cause:
/// `connections.failed.refused`, `queries.errors.malformed`).
pub fn keys() -> Vec<String> {
    let mut k: Vec<String> = [
        "connections.target",
        "connections.attempted",
        "connections.established",
        "connections.verified",
        "connections.unverified",
        "connections.peak",
        "connections.closed",
        "connections.failed",
        "connections.ramp_s",
        "connections.verify_s",
        "connections.connect_rate",
        "connections.peer_closed",
        "connections.idle_closed",
        "connections.silent",
        "connections.probe_rejected",
        "connections.tls_resumed",
        "queries.due",
        "queries.sent",
        "queries.answered",
        "queries.ok",
        "queries.timed_out",
        "queries.errors",
        "queries.rate_target",
        "queries.rate_achieved",
        "queries.rate_sent",
        "queries.sent_late",
        "queries.in_flight_at_end",
        "queries.pipelined",
        "queries.truncated",
        "queries.recycled_connections",
        "queries.bytes_out",
        "queries.bytes_in",
        "queries.seconds",
        "push.received",
        "push.lost",
        "push.out_of_order",
        "push.duplicates",
        "push.expected",
        "push.malformed",
        "push.connections_with_loss",
        "duration_s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for h in ["connect_time_us", "connect_syscall_us", "tls_handshake_us"] {
        for p in PERCENTILES {
            k.push(format!("connections.{h}.{p}"));
        }
    }
    for h in [
        "response_time_us",
        "service_time_us",
        "send_lag_us",
        "loop_lag_us",
    ] {
        for p in PERCENTILES.iter().chain(LATENCY_EXTRA) {
            k.push(format!("latency.{h}.{p}"));
        }
    }
    for h in ["gap_us", "jitter_us", "delay_us"] {
        for p in PERCENTILES.iter().chain(LATENCY_EXTRA) {
            k.push(format!("push.{h}.{p}"));
        }
    }
    k
}

/// The keys in short, for an error message.
/// The known key nearest to `key` by edit distance, when near enough to
/// be a typo (at most a quarter of its letters, and 3, changed).
fn nearest_key(key: &str) -> Option<String> {
    let most = (key.len() / 4).clamp(1, 3);
    keys()
        .into_iter()
        .map(|k| (strsim::damerau_levenshtein(key, &k), k))
        .filter(|(d, _)| *d <= most)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn key_list() -> String {
    let plain: Vec<String> = keys().into_iter().filter(|k| !k.contains("_us.")).collect();
    format!(
        "{}, connections.failed.CAUSE, queries.errors.CAUSE, dns.rcodes.RCODE, \
         dns.rcodes_by_qtype.TYPE.RCODE, queries.http_status.CODE, queries.redis_replies.TYPE, \
         connections.{{connect_time_us,connect_syscall_us,tls_handshake_us}}.{{{}}}, \
         latency.{{response_time_us,service_time_us,send_lag_us,loop_lag_us}}.{{{},{}}}, \
         push.{{gap_us,jitter_us,delay_us}}.{{{},{}}}",
        plain.join(", "),
        PERCENTILES.join(","),
        PERCENTILES.join(","),
        LATENCY_EXTRA.join(","),
        PERCENTILES.join(","),
        LATENCY_EXTRA.join(",")
    )
}

fn known(key: &str) -> bool {
    if keys().iter().any(|k| k == key) {
        return true;
    }
    let cause =
        |prefix: &str, list: &[&str]| key.strip_prefix(prefix).is_some_and(|c| list.contains(&c));
    let buckets: Vec<&str> = crate::metrics::Bucket::ALL
        .iter()
        .map(|b| b.key())
        .collect();
    // Maps whose keys come from the wire: any name.
    let named = |prefix: &str| {
        key.strip_prefix(prefix).is_some_and(|n| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_')
        })
    };
    cause("connections.failed.", &buckets)
        || cause("queries.errors.", &crate::metrics::ERROR_CAUSES)
        || named("dns.rcodes.")
        || named("dns.rcodes_by_qtype.")
        || named("queries.http_status.")
        || cause("queries.redis_replies.", &wire::resp::VALUE_KINDS)
        || key == "queries.redis_replies.error"
        || named("queries.failed_answers.")
}

/// Parses one `--check`. The error says what is wrong and, for an unknown
/// key, which exist.
pub fn parse(expr: &str) -> Result<Check, String> {
    let e: String = expr.chars().filter(|c| !c.is_whitespace()).collect();
    let ops = [
        (">=", Op::Ge),
        ("<=", Op::Le),
        ("==", Op::Eq),
        ("!=", Op::Ne),
        (">", Op::Gt),
        ("<", Op::Lt),
    ];
    let Some((at, sym, op)) = ops
        .iter()
        .filter_map(|&(s, op)| e.find(s).map(|i| (i, s, op)))
        .min_by_key(|&(i, s, _)| (i, std::cmp::Reverse(s.len())))
    else {
        return Err(format!(
            "--check '{expr}': no comparison; write KEY OP VALUE with OP one of >= <= > < == !=, \
             e.g. queries.answered>=99.5% or latency.response_time_us.p99<5ms"
        ));
    };
    let key = &e[..at];
    let raw = &e[at + sym.len()..];
    if !known(key) {
        let hint =
            if keys().iter().any(|k| k.starts_with(&format!("{key}."))) && key.ends_with("_us") {
                format!(" (name a percentile: {key}.p99)")
            } else {
                String::new()
            };
        if let Some(near) = nearest_key(key).filter(|_| hint.is_empty()) {
            return Err(format!(
                "--check '{expr}': unknown key '{key}'; did you mean '{near}'? (every key is \
                 in docs/result.md)"
            ));
        }
        return Err(format!(
            "--check '{expr}': unknown key '{key}'{hint}; the keys are: {}",
            key_list()
        ));
    }
    let (value, of) = if let Some(pct) = raw.strip_suffix('%') {
        let Some(&(_, base)) = PERCENT_OF
            .iter()
            .find(|(k, _)| key == *k || key.starts_with(&format!("{k}.")))
        else {
            return Err(format!(
                "--check '{expr}': '{key}' has nothing to be a percentage of; give a number \
                 (percentages work for counts of queries, of sent, of connections, of the \
                 target, of push messages, of expected, and for rate_achieved, of rate_target)"
            ));
        };
        let v = pct
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("--check '{expr}': '{raw}' is not a percentage, e.g. 99.5%"))?;
        (v, Some(base))
    } else {
        (
            value_in_unit(key, raw).map_err(|e| format!("--check '{expr}': {e}"))?,
            None,
        )
    };
    Ok(Check {
        expr: e.clone(),
        key: key.to_string(),
        op,
        value,
        of,
    })
}

/// A value in the key's unit: µs for `_us` keys (from 5ms, 250us, 1.5s or
/// a bare number of µs), seconds for `_s` keys, counts with k/m suffixes.
fn value_in_unit(key: &str, raw: &str) -> Result<f64, String> {
    let num = |s: &str| {
        s.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("'{raw}' is not a number with a unit"))
    };
    let last = key.rsplit('.').nth(1).unwrap_or(key);
    if last.ends_with("_us") {
        for (suffix, mult) in [("us", 1.0), ("µs", 1.0), ("ms", 1e3), ("s", 1e6)] {
            if let Some(n) = raw.strip_suffix(suffix) {
                return Ok(num(n)? * mult);
            }
        }
        return num(raw);
    }
    if key.ends_with("_s") {
        for (suffix, mult) in [("ms", 1e-3), ("s", 1.0), ("m", 60.0)] {
            if let Some(n) = raw.strip_suffix(suffix) {
                return Ok(num(n)? * mult);
            }
        }
        return num(raw);
    }
    for (suffix, mult) in [("k", 1e3), ("K", 1e3), ("m", 1e6), ("M", 1e6)] {
        if let Some(n) = raw.strip_suffix(suffix) {
            return Ok(num(n)? * mult);
        }
    }
    num(raw)
}

/// What a key reads in a result.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Read {
    Value(f64),
    /// A percentile of a histogram that holds nothing: it measures
    /// nothing, and reads as 0 in the JSON.
    NoSamples,
    Missing,
}

/// The number at `key` in a result's JSON; a map of numbers is their sum.
/// A key inside a histogram (`latency.response_time_us.p99`) whose
/// `count` is 0 has no samples.
fn lookup(result: &Value, key: &str) -> Read {
    let mut v = result;
    let mut parent = result;
    for part in key.split('.') {
        parent = v;
        match v.get(part) {
            Some(next) => v = next,
            None => return Read::Missing,
        }
    }
    let empty_histogram = key.contains("_us.")
        && parent.get("hdr").is_some()
        && parent.get("count").and_then(Value::as_u64) == Some(0);
    match v {
        _ if empty_histogram => Read::NoSamples,
        Value::Number(n) => n.as_f64().map_or(Read::Missing, Read::Value),
        Value::Object(m) => Read::Value(m.values().filter_map(Value::as_f64).sum()),
        _ => Read::Missing,
    }
}

impl Check {
    /// Keys about queries need a run that sends queries.
    pub fn needs_queries(&self) -> bool {
        self.key.starts_with("queries.") || self.key.starts_with("latency.")
    }

    /// Evaluates on a result's JSON. A missing key fails, and so does one
    /// with no samples (a percentile of nothing, a share of zero): a check
    /// passes on what was measured, never on a 0 that stands for nothing.
    pub fn evaluate(&self, result: &Value) -> CheckOutcome {
        let measured = match (lookup(result, &self.key), self.of) {
            (Read::Value(v), None) => Read::Value(v),
            (Read::Value(v), Some(base)) => match lookup(result, base) {
                Read::Value(b) if b > 0.0 => Read::Value(100.0 * v / b),
                Read::Value(_) | Read::NoSamples => Read::NoSamples,
                Read::Missing => Read::Missing,
            },
            (other, _) => other,
        };
        let (value, reason) = match measured {
            Read::Value(v) => (Some(v), None),
            Read::NoSamples => (None, Some("no samples".to_string())),
            Read::Missing => (None, Some("not in the result".to_string())),
        };
        CheckOutcome {
            expr: self.expr.clone(),
            value,
            pass: value.is_some_and(|m| self.op.holds(m, self.value)),
            reason,
        }
    }

    /// The measured value in the check's terms, for the summary.
    pub fn show(&self, v: &CheckOutcome) -> String {
        let Some(m) = v.value else {
            return v
                .reason
                .clone()
                .unwrap_or_else(|| "not in the result".into());
        };
        if self.of.is_some() {
            let k = self.key.rsplit('.').next().unwrap_or(&self.key);
            let base = self.of.unwrap_or_default();
            return format!(
                "{k} {} of {}",
                trim(m, "%"),
                base.rsplit('.').next().unwrap_or(base)
            );
        }
        if self.key.ends_with("_us")
            || self
                .key
                .rsplit('.')
                .nth(1)
                .is_some_and(|h| h.ends_with("_us"))
        {
            return crate::units::human_us(m.round() as u64);
        }
        trim(m, "")
    }
}

fn trim(v: f64, unit: &str) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}{unit}")
    } else {
        format!("{v:.2}{unit}")
    }
}

/// The checks a run makes unless `--check none`: with queries,
/// `queries.ok>=99%` (successful answers, of the queries that were due,
/// sent or not);
/// with --proto push, `push.received>=99%` (of expected); a run that only
/// holds connections, `connections.peer_closed==0` (the server closed
/// some it was to hold); with verification, `connections.unverified==0`
/// (an established connection the server never answered may never have
/// been accepted); with --connections-schedule, `connections.peak>=100%`
/// (the schedule's highest level was reached).
pub fn defaults(has_queries: bool, push: bool, verify: bool, schedule: bool) -> Vec<&'static str> {
    let mut d = Vec::new();
    if has_queries {
        d.push("queries.ok>=99%");
        d.push("connections.silent==0");
    } else if push {
        d.push("push.received>=99%");
    } else {
        d.push("connections.peer_closed==0");
    }
    if verify {
        d.push("connections.unverified==0");
    }
    if schedule {
        d.push("connections.peak>=100%");
    }
    d
}

/// The checks of a run: the defaults ([`defaults`]) and those given,
/// which add to them (a given check on the same key and operator replaces
/// the default's bound: `queries.answered>=99.9%`). `none` drops the
/// defaults.
pub fn parse_all(
    given: &[String],
    has_queries: bool,
    push: bool,
    verify: bool,
    schedule: bool,
) -> Result<Vec<Check>, String> {
    let none = given.iter().any(|g| g.trim() == "none");
    let checks = given
        .iter()
        .filter(|g| g.trim() != "none")
        .map(|g| parse(g))
        .collect::<Result<Vec<_>, _>>()?;
    if !has_queries {
        if let Some(c) = checks.iter().find(|c| c.needs_queries()) {
            return Err(format!(
                "--check '{}': this run sends no queries (give -r RATE, --closed-loop, or \
                 --interval), so there is nothing to check there",
                c.expr
            ));
        }
    }
    let mut all = Vec::new();
    if !none {
        for d in defaults(has_queries, push, verify, schedule) {
            let d = parse(d)?;
            if !checks
                .iter()
                .any(|c| c.key == d.key && c.op == d.op && c.of == d.of)
            {
                all.push(d);
            }
        }
    }
    all.extend(checks);
    Ok(all)
}

/// Evaluates every check on `result` (its JSON).
pub fn evaluate(checks: &[Check], result: &Value) -> Vec<CheckOutcome> {
    checks.iter().map(|c| c.evaluate(result)).collect()
}

/// Evaluates `checks` on `result` and records them in it.
pub fn record(checks: &[Check], result: &mut crate::outcome::RunResult) -> std::io::Result<()> {
    let json = serde_json::to_value(&*result).map_err(std::io::Error::other)?;
    result.checks = evaluate(checks, &json);
    Ok(())
}

/// The end of the summary: a line per check, then the verdict's.
pub fn print(
    checks: &[Check],
    result: &crate::outcome::RunResult,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    for l in lines(checks, &result.checks) {
        writeln!(out, "{l}")?;
    }
    if let Some(v) = &result.verdict {
        writeln!(out, "{}", verdict_line(v))?;
    }
    Ok(())
}

/// The verdict in a line: PASS, or FAIL with its side and the codes of
/// the causes that explain it.
pub fn verdict_line(v: &crate::verdict::Verdict) -> String {
    use crate::verdict::Side;
    if v.pass {
        return "  verdict       PASS".into();
    }
    let mut codes: Vec<&str> = Vec::new();
    for c in v.causes.iter().filter(|c| c.explains()) {
        if !codes.contains(&c.code.as_str()) {
            codes.push(c.code.as_str());
        }
    }
    let side = match v.side {
        Side::None => "interrupted",
        Side::Server => "the server's side",
        Side::Client => "the client's side",
        Side::Network => "the network's side",
        Side::Both => "both sides",
    };
    if codes.is_empty() {
        format!("  verdict       FAIL, {side}: nothing seen names a cause")
    } else {
        format!("  verdict       FAIL, {side}: {}", codes.join(", "))
    }
}

/// Whether a finished run passed: what [`exit_code`] returns 0 for
/// (`interrupted` aside).
pub fn passed(result: &crate::outcome::RunResult, max_failures: u64) -> bool {
    let failed: u64 = result.connections.failed.values().sum();
    failed <= max_failures
        && result.checks.iter().all(|v| v.pass)
        && !result.partial
        && result.overrun.is_empty()
}

/// The exit code of a finished run, in one place: 130 interrupted (its
/// results were written), 3 when slices are missing or a worker overran
/// (the figures are not whole), 1 when a check failed or more connections
/// than --max-failures failed, else 0. Says why on stderr.
/// (`throng merge` passes `interrupted` false: merging finished.)
pub fn exit_code(
    result: &crate::outcome::RunResult,
    max_failures: u64,
    interrupted: bool,
) -> std::process::ExitCode {
    if interrupted {
        errln!("throng: interrupted; the results so far are written and marked interrupted");
        return std::process::ExitCode::from(130);
    }
    let mut code = 0;
    let failed: u64 = result.connections.failed.values().sum();
    if failed > max_failures {
        errln!("throng: {failed} connection(s) failed, more than --max-failures {max_failures}");
        code = 1;
    }
    for v in result.checks.iter().filter(|v| !v.pass) {
        errln!("throng: check failed: {}", v.expr);
        code = 1;
    }
    // Figures not whole: a part missing, a worker that never stopped.
    if result.partial {
        code = crate::exit::UNMEASURED;
    }
    if !result.overrun.is_empty() {
        for w in &result.overrun {
            errln!("throng: overran: {w}");
        }
        code = crate::exit::UNMEASURED;
    }
    std::process::ExitCode::from(code)
}

/// One line per check for the end of the summary.
pub fn lines(checks: &[Check], verdicts: &[CheckOutcome]) -> Vec<String> {
    checks
        .iter()
        .zip(verdicts)
        .map(|(c, v)| {
            format!(
                "  check         {}  {}  (measured {})",
                if v.pass { "PASS" } else { "FAIL" },
                c.expr,
                c.show(v)
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result() -> Value {
        json!({
            "connections": {"target": 100, "established": 100, "connect_rate": 12000.0,
                            "failed": {"refused": 2, "reset": 1},
                            "connect_time_us": {"p99": 800}},
            "queries": {"due": 1000, "sent": 1000, "answered": 996, "timed_out": 4,
                        "errors": {"malformed": 0}, "rate_target": 100.0, "rate_achieved": 99.6},
            "latency": {"response_time_us": {"p99": 4200, "p999": 9000}}
        })
    }

    #[test]
    fn percent_of_sent() {
        let c = parse("queries.answered>=99.5%").unwrap();
        let v = c.evaluate(&result());
        assert!(v.pass);
        assert_eq!(v.value, Some(99.6));
        assert!(
            !parse("queries.answered>=99.7%")
                .unwrap()
                .evaluate(&result())
                .pass
        );
        assert!(
            parse("queries.timed_out<=0.5%")
                .unwrap()
                .evaluate(&result())
                .pass
        );
    }

    #[test]
    fn latency_units() {
        assert!(
            parse("latency.response_time_us.p99<5ms")
                .unwrap()
                .evaluate(&result())
                .pass
        );
        assert!(
            !parse("latency.response_time_us.p99<4ms")
                .unwrap()
                .evaluate(&result())
                .pass
        );
        assert!(
            parse("latency.response_time_us.p999 < 9001")
                .unwrap()
                .evaluate(&result())
                .pass
        );
        assert!(
            parse("connections.connect_time_us.p99<=1ms")
                .unwrap()
                .evaluate(&result())
                .pass
        );
    }

    #[test]
    fn counts_and_maps() {
        assert!(
            parse("connections.connect_rate>=10k")
                .unwrap()
                .evaluate(&result())
                .pass
        );
        let failed = parse("connections.failed==0").unwrap().evaluate(&result());
        assert!(!failed.pass);
        assert_eq!(failed.value, Some(3.0));
        assert!(
            parse("connections.failed.refused==2")
                .unwrap()
                .evaluate(&result())
                .pass
        );
        assert!(
            parse("queries.rate_achieved>=99%")
                .unwrap()
                .evaluate(&result())
                .pass
        );
    }

    #[test]
    fn rejects_bad_checks_naming_the_keys() {
        let e = parse("queries.answerd>=99%").unwrap_err();
        assert!(e.contains("unknown key 'queries.answerd'"), "{e}");
        assert!(e.contains("queries.answered"), "{e}");
        let e = parse("latency.response_time_us<5ms").unwrap_err();
        assert!(e.contains(".p99"), "{e}");
        assert!(parse("queries.answered")
            .unwrap_err()
            .contains("no comparison"));
        assert!(parse("queries.answered>=lots")
            .unwrap_err()
            .contains("not a number"));
        assert!(parse("connections.connect_rate>=5%")
            .unwrap_err()
            .contains("percentage"));
        assert!(parse("latency.response_time_us.p99<5parsecs").is_err());
    }

    #[test]
    fn a_missing_key_fails() {
        let v = parse("connections.connect_syscall_us.p99<1ms")
            .unwrap()
            .evaluate(&result());
        assert!(!v.pass);
        assert_eq!(v.value, None);
    }

    fn exprs(c: &[Check]) -> Vec<&str> {
        c.iter().map(|c| c.expr.as_str()).collect()
    }

    #[test]
    fn default_and_none() {
        let d = parse_all(&[], true, false, false, false).unwrap();
        assert_eq!(exprs(&d), ["queries.ok>=99%", "connections.silent==0"]);
        let hold = parse_all(&[], false, false, false, false).unwrap();
        assert_eq!(exprs(&hold), ["connections.peer_closed==0"]);
        assert!(parse_all(&["none".into()], true, false, true, false)
            .unwrap()
            .is_empty());
        let only = parse_all(
            &["none".into(), "connections.failed==0".into()],
            true,
            false,
            true,
            false,
        )
        .unwrap();
        assert_eq!(exprs(&only), ["connections.failed==0"]);
        let e = parse_all(&["queries.sent>=1".into()], false, false, false, false).unwrap_err();
        assert!(e.contains("sends no queries"), "{e}");
    }

    /// A user's check adds to the defaults rather than replacing them: a
    /// discard server's run with a latency check alone would pass on 0
    /// answers.
    #[test]
    fn given_checks_add_to_the_defaults() {
        let c = parse_all(
            &["latency.response_time_us.p99<5ms".into()],
            true,
            false,
            true,
            false,
        )
        .unwrap();
        assert_eq!(
            exprs(&c),
            [
                "queries.ok>=99%",
                "connections.silent==0",
                "connections.unverified==0",
                "latency.response_time_us.p99<5ms"
            ]
        );
        // The same key and operator: the user's bound.
        let c = parse_all(&["queries.ok>=99.9%".into()], true, false, false, false).unwrap();
        assert_eq!(exprs(&c), ["connections.silent==0", "queries.ok>=99.9%"]);
        // Another base (a count, not a share) adds to the default.
        let c = parse_all(&["queries.ok>=1".into()], true, false, false, false).unwrap();
        assert_eq!(
            exprs(&c),
            ["queries.ok>=99%", "connections.silent==0", "queries.ok>=1"]
        );
        let c = parse_all(&[], false, true, true, false).unwrap();
        assert_eq!(
            exprs(&c),
            ["push.received>=99%", "connections.unverified==0"]
        );
        let s = parse_all(&[], true, false, false, true).unwrap();
        assert_eq!(
            exprs(&s),
            [
                "queries.ok>=99%",
                "connections.silent==0",
                "connections.peak>=100%"
            ]
        );
    }

    /// A percentile of no samples has no value: `p99<5ms` fails on it
    /// rather than passing on a 0.
    #[test]
    fn a_measure_with_no_samples_fails() {
        let r = json!({
            "queries": {"due": 392, "sent": 392, "answered": 0, "timed_out": 0},
            "latency": {"response_time_us": {"count": 0, "p99": 0, "hdr": ""}}
        });
        let v = parse("latency.response_time_us.p99<5ms")
            .unwrap()
            .evaluate(&r);
        assert!(!v.pass);
        assert_eq!(v.value, None);
        assert_eq!(v.reason.as_deref(), Some("no samples"));
        let none = json!({"queries": {"due": 0, "sent": 0, "timed_out": 0}});
        let v = parse("queries.timed_out<=1%").unwrap().evaluate(&none);
        assert!(!v.pass);
        assert_eq!(v.reason.as_deref(), Some("no samples"));
    }
}
