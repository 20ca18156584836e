//! One second of `throng server`: the stats line's figures, written to
//! --stats-json (one JSON object per line) and read back by `throng report
//! --server-stats`; also the body of a child process's stats line to its
//! parent.
//!
//! Every key has been written since --stats-json exists, except
//! `processes` and `push`: a line missing a key reads it as 0 (or absent),
//! so older and trimmed files still chart.

use serde::{Deserialize, Serialize};

/// One second of a server (one process, or several summed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct ServerSecond {
    pub t: u64,
    pub unix_s: u64,
    pub connections: i64,
    pub peak_connections: i64,
    pub accepted_per_s: u64,
    pub closed_per_s: u64,
    pub requests_per_s: u64,
    pub bytes_in_per_s: u64,
    pub bytes_out_per_s: u64,
    pub errors: u64,
    pub listen_overflows: u64,
    pub listen_drops: u64,
    /// Server processes running (several share the port).
    pub processes: u64,
    /// --mode push: the second's messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub push: Option<PushSecond>,
}

/// One second of --mode push: messages due, sent on time, sent late (and
/// the latest, µs after its due time), dropped because a subscriber's
/// socket was full or the worker a period behind; subscribers now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PushSecond {
    pub due: u64,
    pub on_time: u64,
    pub late: u64,
    pub late_max_us: u64,
    pub skipped_full: u64,
    pub skipped_behind: u64,
    pub subscribers: i64,
}

impl PushSecond {
    fn add(&mut self, o: &PushSecond) {
        self.due += o.due;
        self.on_time += o.on_time;
        self.late += o.late;
        self.late_max_us = self.late_max_us.max(o.late_max_us);
        self.skipped_full += o.skipped_full;
        self.skipped_behind += o.skipped_behind;
        self.subscribers += o.subscribers;
    }
}

impl ServerSecond {
    /// Adds another second's rates (counters per second, not the gauges).
    pub fn add_rates(&mut self, o: &ServerSecond) {
        self.t = self.t.max(o.t);
        self.unix_s = self.unix_s.max(o.unix_s);
        self.accepted_per_s += o.accepted_per_s;
        self.closed_per_s += o.closed_per_s;
        self.requests_per_s += o.requests_per_s;
        self.bytes_in_per_s += o.bytes_in_per_s;
        self.bytes_out_per_s += o.bytes_out_per_s;
        self.errors += o.errors;
        if let Some(p) = &o.push {
            let mine = self.push.get_or_insert_with(PushSecond::default);
            let subscribers = mine.subscribers;
            mine.add(p);
            // (A gauge: merge adds it, rates do not.)
            mine.subscribers = subscribers;
        }
    }

    /// Adds another process's second: its gauges and its rates.
    pub fn merge(&mut self, o: &ServerSecond) {
        self.add_rates(o);
        self.connections += o.connections;
        self.peak_connections += o.peak_connections;
        if let (Some(mine), Some(p)) = (self.push.as_mut(), &o.push) {
            mine.subscribers += p.subscribers;
        }
    }

    /// One second of several processes: their gauges and rates summed
    /// (the listen counters, the host's, are left to the caller).
    pub fn combine<'a>(parts: impl Iterator<Item = &'a ServerSecond>) -> ServerSecond {
        let mut s = ServerSecond::default();
        for p in parts {
            s.merge(p);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(t: u64, connections: i64, requests: u64) -> ServerSecond {
        ServerSecond {
            t,
            unix_s: 1000 + t,
            connections,
            peak_connections: connections + 1,
            accepted_per_s: 1,
            closed_per_s: 2,
            requests_per_s: requests,
            bytes_in_per_s: 10,
            bytes_out_per_s: 20,
            errors: 1,
            listen_overflows: 7,
            listen_drops: 7,
            processes: 7,
            push: None,
        }
    }

    #[test]
    fn processes_combine_gauges_and_rates() {
        let s = ServerSecond::combine([second(3, 5, 100), second(4, 6, 50)].iter());
        assert_eq!((s.t, s.unix_s), (4, 1004));
        assert_eq!((s.connections, s.peak_connections), (11, 13));
        assert_eq!((s.accepted_per_s, s.closed_per_s), (2, 4));
        assert_eq!(
            (s.requests_per_s, s.bytes_in_per_s, s.bytes_out_per_s),
            (150, 20, 40)
        );
        assert_eq!(s.errors, 2);
        // The listen counters are the host's, set by the caller.
        assert_eq!((s.listen_overflows, s.listen_drops, s.processes), (0, 0, 0));
    }

    #[test]
    fn rates_add_without_the_gauges() {
        let mut s = second(3, 5, 100);
        s.add_rates(&second(4, 6, 50));
        assert_eq!((s.connections, s.peak_connections), (5, 6));
        assert_eq!((s.t, s.requests_per_s, s.errors), (4, 150, 2));
    }

    #[test]
    fn a_line_is_read_back_as_written() {
        let mut s = second(3, 5, 100);
        s.push = Some(PushSecond {
            due: 4,
            subscribers: 2,
            ..PushSecond::default()
        });
        let line = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<ServerSecond>(&line).unwrap(), s);
        // Without push, no key for it.
        let plain = serde_json::to_value(second(1, 1, 1)).unwrap();
        assert!(plain.get("push").is_none());
        assert_eq!(plain["listen_drops"], 7);
    }
}
