//! The result's arithmetic: identities every result file must satisfy,
//! read off its JSON (the public form, the one `merge` and scripts read).
//! A figure that does not balance is a counting bug, never a tolerance:
//! every integration test passes its results through [`imbalances`], and a
//! property test runs it over randomized runs against a server that
//! misbehaves at random.
//!
//! Queries: due (counted where queries come due) = sent + not_sent +
//! no_connection + connect + behind_schedule (the causes of a due query
//! never sent); sent = answered + timed_out +
//! conn_lost + in_flight_at_end (malformed and oversized end a connection,
//! whose queries are then conn_lost; unmatched answers belong to no
//! query); answered = ok + failed answers.
//! Connections: attempted = established + failed before established +
//! unresolved (attempts the run's end found connecting); established =
//! verified + unverified + idle (never asked), each connection counted in
//! one of the three where it was resolved or where it ended. Push: expected = received + lost. Per second: each
//! second's counts add up to at most the whole's (the drain after the last
//! second adds answers, never sends).

use serde_json::Value;

fn num(v: &Value, path: &str) -> Option<u64> {
    path.split('.').try_fold(v, |x, k| x.get(k))?.as_u64()
}

fn sum_map(v: &Value, path: &str) -> u64 {
    path.split('.')
        .try_fold(v, |x, k| x.get(k))
        .and_then(Value::as_object)
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

/// `what` (`left`) against the sum of `parts`, in words when they differ.
fn unequal(what: &str, left: u64, parts: &[(&str, u64)]) -> Option<String> {
    let right: u64 = parts.iter().map(|p| p.1).sum();
    (left != right).then(|| {
        let terms: Vec<String> = parts.iter().map(|(k, n)| format!("{k} {n}")).collect();
        format!("{what} {left} != {} = {right}", terms.join(" + "))
    })
}

/// Every identity the result `v` breaks, in words (empty: it balances).
pub fn imbalances(v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let c = |k: &str| num(v, &format!("connections.{k}")).unwrap_or(0);
    let failed = sum_map(v, "connections.failed");
    if v.get("connections").is_some() {
        // (Failures of established connections are in `failed` and in
        // `established` both.)
        let before = failed.saturating_sub(c("failed_established"));
        out.extend(unequal(
            "connections.attempted",
            c("attempted"),
            &[
                ("established", c("established")),
                ("failed before established", before),
                ("unresolved", c("unresolved")),
            ],
        ));
        if c("failed_established") > failed {
            out.push(format!(
                "connections.failed_established {} > failed {failed}",
                c("failed_established")
            ));
        }
        if v["connections"].get("idle").is_some() {
            out.extend(unequal(
                "connections.established",
                c("established"),
                &[
                    ("verified", c("verified")),
                    ("unverified", c("unverified")),
                    ("idle", c("idle")),
                ],
            ));
        } else if c("verified") + c("unverified") > c("established") {
            out.push(format!(
                "connections.verified {} + unverified {} > established {}",
                c("verified"),
                c("unverified"),
                c("established")
            ));
        }
    }
    if let Some(q) = v.get("queries").filter(|q| !q.is_null()) {
        let n = |k: &str| num(q, k).unwrap_or(0);
        let e = |k: &str| num(q, &format!("errors.{k}")).unwrap_or(0);
        out.extend(unequal(
            "queries.due",
            n("due"),
            &[
                ("sent", n("sent")),
                ("not_sent", e("not_sent")),
                ("no_connection", e("no_connection")),
                ("connect", e("connect")),
                ("behind_schedule", e("behind_schedule")),
            ],
        ));
        out.extend(unequal(
            "queries.sent",
            n("sent"),
            &[
                ("answered", n("answered")),
                ("timed_out", n("timed_out")),
                ("conn_lost", e("conn_lost")),
                ("in_flight_at_end", n("in_flight_at_end")),
            ],
        ));
        if let Some(ok) = num(q, "ok") {
            out.extend(unequal(
                "queries.answered",
                n("answered"),
                &[("ok", ok), ("failed answers", sum_map(q, "failed_answers"))],
            ));
        }
        if let Some(seconds) = v.get("per_second").and_then(Value::as_array) {
            for k in ["sent", "answered", "timed_out"] {
                let per: u64 = seconds.iter().filter_map(|s| num(s, k)).sum();
                if per > n(k) {
                    out.push(format!(
                        "the seconds' {k} add up to {per}, more than the whole's {}",
                        n(k)
                    ));
                }
            }
        }
    }
    if let Some(p) = v.get("push").filter(|p| !p.is_null()) {
        let n = |k: &str| num(p, k).unwrap_or(0);
        out.extend(unequal(
            "push.expected",
            n("expected"),
            &[("received", n("received")), ("lost", n("lost"))],
        ));
        if let Some(seconds) = v.get("per_second").and_then(Value::as_array) {
            for (k, whole) in [
                ("push_received", "received"),
                ("push_duplicates", "duplicates"),
                ("push_out_of_order", "out_of_order"),
            ] {
                let per: u64 = seconds.iter().filter_map(|s| num(s, k)).sum();
                if per > n(whole) {
                    out.push(format!(
                        "the seconds' {k} add up to {per}, more than the whole's {}",
                        n(whole)
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn balanced() -> Value {
        json!({
            "connections": {"attempted": 12, "established": 10, "verified": 8,
                            "unverified": 1, "idle": 1, "unresolved": 1,
                            "failed_established": 1,
                            "failed": {"refused": 1, "reset": 1}},
            "queries": {"due": 100, "sent": 95, "answered": 90, "ok": 88,
                        "failed_answers": {"REFUSED": 2}, "timed_out": 3,
                        "in_flight_at_end": 1,
                        "errors": {"conn_lost": 1, "not_sent": 3, "no_connection": 2,
                                   "connect": 0, "malformed": 7, "unmatched": 4}},
            "per_second": [{"sent": 50, "answered": 45}, {"sent": 45, "answered": 44}],
        })
    }

    #[test]
    fn a_balanced_result_has_no_imbalance() {
        assert_eq!(imbalances(&balanced()), Vec::<String>::new());
    }

    #[test]
    fn a_query_counted_twice_is_named() {
        let mut v = balanced();
        v["queries"]["errors"]["conn_lost"] = json!(2);
        let i = imbalances(&v);
        assert_eq!(i.len(), 1, "{i:?}");
        assert!(i[0].starts_with("queries.sent 95 != "), "{i:?}");
    }

    #[test]
    fn queries_that_vanish_are_named() {
        let mut v = balanced();
        v["queries"]["due"] = json!(580);
        assert!(imbalances(&v)[0].starts_with("queries.due 580"));
    }

    #[test]
    fn connections_counted_in_none_are_named() {
        let mut v = balanced();
        v["connections"]["idle"] = json!(0);
        assert!(imbalances(&v)[0].starts_with("connections.established 10"));
    }

    #[test]
    fn seconds_that_add_up_to_more_than_the_whole_are_named() {
        let mut v = balanced();
        v["per_second"][1]["sent"] = json!(46);
        assert!(imbalances(&v)[0].contains("seconds' sent add up to 96"));
    }
}
