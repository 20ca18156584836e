//! `throng server --metrics ADDR`: the server's counters for Prometheus,
//! one endpoint for the whole server however many processes serve.
//!
//! [`Exported`] holds each process of the server as the process that
//! serves the endpoint sees it: its own counters, read at each scrape
//! ([`Probe`]), and its children's as their last stats line said (each
//! second, with their counters since they started). The kernel's listen
//! queue counters are read at each scrape, since the server started, as
//! the summary counts them. The endpoint itself is
//! [`crate::report::prometheus`]'s.

use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

use super::running::Probe;
use super::seconds::ChildSecond;
use super::stats::{PushTotals, Totals};
use super::summary::ChildTotals;
use crate::exposition::{bytes_counter, bytes_counters_by, counter, counters_by, gauge, gauges_by};
use crate::sys::errno_name;
use crate::sys::proc;

/// One process of the server, as exported.
#[derive(Debug, Clone, Default)]
struct ProcessFigures {
    connections: i64,
    peak: i64,
    totals: Totals,
}

#[derive(Debug)]
enum Member {
    /// The process serving the endpoint: read at each scrape.
    Live(Probe),
    /// A child: what it last said.
    Reported(ProcessFigures),
}

#[derive(Debug)]
struct View {
    members: Vec<Member>,
    /// The listen counters at the start, and as last read.
    listen_start: (u64, u64),
    listen_last: (u64, u64),
}

/// The server's processes as its endpoint shows them.
#[derive(Debug)]
pub(super) struct Exported(Mutex<View>);

impl Exported {
    /// No process yet; the listen counters count from `listen_start`
    /// (the reading the summary counts from).
    pub(super) fn new(listen_start: (u64, u64)) -> Arc<Exported> {
        Arc::new(Exported(Mutex::new(View {
            members: Vec::new(),
            listen_start,
            listen_last: listen_start,
        })))
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The process serving the endpoint serves connections too.
    pub(super) fn add_live(&self, probe: Probe) {
        self.view().members.push(Member::Live(probe));
    }

    /// A child process started (the next member, in order).
    pub(super) fn add_reported(&self) {
        self.view()
            .members
            .push(Member::Reported(ProcessFigures::default()));
    }

    /// Member `i`'s stats line: its gauges, and its counters when the line
    /// carries them.
    pub(super) fn report(&self, i: usize, line: &ChildSecond) {
        if let Some(Member::Reported(f)) = self.view().members.get_mut(i) {
            f.connections = line.sec.connections;
            f.peak = line.sec.peak_connections;
            if let Some(t) = &line.totals {
                f.totals = t.clone();
            }
        }
    }

    /// Member `i`'s last line: its final counters, nothing open.
    pub(super) fn finish(&self, i: usize, t: &ChildTotals) {
        if let Some(Member::Reported(f)) = self.view().members.get_mut(i) {
            f.connections = 0;
            f.peak = t.peak;
            f.totals = t.totals.clone();
        }
    }

    /// Every member's figures now, and the listen counters since the start.
    fn read(&self) -> (Vec<ProcessFigures>, (u64, u64)) {
        let mut v = self.view();
        let members = v
            .members
            .iter()
            .map(|m| match m {
                Member::Live(p) => ProcessFigures {
                    connections: p.connections(),
                    peak: p.peak(),
                    totals: p.totals(),
                },
                Member::Reported(f) => f.clone(),
            })
            .collect();
        if let Some(now) = proc::listen_counters() {
            v.listen_last = now;
        }
        let listen = (
            v.listen_last.0.saturating_sub(v.listen_start.0),
            v.listen_last.1.saturating_sub(v.listen_start.1),
        );
        (members, listen)
    }

    /// The registry the endpoint serves.
    pub(super) fn registry(self: &Arc<Self>) -> Registry {
        let mut r = Registry::default();
        r.register_collector(Box::new(self.clone()));
        r
    }
}

/// A per-process counter family: name, help, and its value of a process.
/// A per-process family: name (without the unit), help, its value, and
/// whether it counts bytes (named `..._bytes_total`).
type PerProcess = (&'static str, &'static str, fn(&ProcessFigures) -> u64, bool);

/// Errors by kind, with the summary's words as label values: `malformed`
/// (input), `connection` (reset...), `out_of_fds` (refused), `udp_dropped`
/// (replies), `accept_<errno>`.
fn errors_by_kind(t: &Totals) -> Vec<(String, u64)> {
    let mut kinds = vec![
        ("malformed".to_string(), t.bad_input),
        ("connection".to_string(), t.conn_errors),
        ("out_of_fds".to_string(), t.accept_no_fds),
        ("udp_dropped".to_string(), t.udp_dropped),
    ];
    for &(errno, n) in &t.accept_errno {
        let name = errno_name(errno);
        let word = name.split(' ').next().unwrap_or("errno").to_lowercase();
        let word = if word == "errno" {
            format!("errno_{errno}")
        } else {
            word
        };
        kinds.push((format!("accept_{word}"), n));
    }
    kinds
}

impl Collector for Exported {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let (members, listen) = self.read();
        let mut all = ProcessFigures::default();
        for m in &members {
            all.connections += m.connections;
            all.peak += m.peak;
            all.totals.merge(&m.totals);
        }
        let e = &mut enc;
        encode_all(e, &all, members.len(), listen)?;
        if members.len() < 2 {
            return Ok(());
        }
        encode_per_process(e, &members)
    }
}

/// The figures of every process together (`members` of them), and the
/// kernel's listen counters since the start.
fn encode_all(
    e: &mut DescriptorEncoder,
    all: &ProcessFigures,
    members: usize,
    listen: (u64, u64),
) -> std::fmt::Result {
    let t = &all.totals;
    gauge(
        e,
        "throng_server_processes",
        "Server processes sharing the port(s).",
        members as i64,
    )?;
    gauge(
        e,
        "throng_server_connections",
        "Connections open now.",
        all.connections,
    )?;
    gauge(
        e,
        "throng_server_connections_peak",
        "The most connections open at once (with several processes, the sum of each one's \
             peak).",
        all.peak,
    )?;
    counter(
        e,
        "throng_server_accepted",
        "Connections accepted.",
        t.accepted,
    )?;
    counter(e, "throng_server_closed", "Connections closed.", t.closed)?;
    counter(
        e,
        "throng_server_requests",
        "Messages answered (echo, discard, fixed: chunks; pong: lines; http: requests; dns: \
             queries), TCP and UDP.",
        t.requests,
    )?;
    bytes_counter(
        e,
        "throng_server_received",
        "Bytes read from clients.",
        t.bytes_in,
    )?;
    bytes_counter(
        e,
        "throng_server_sent",
        "Bytes written to clients.",
        t.bytes_out,
    )?;
    counters_by(
        e,
        "throng_server_errors",
        "Errors by kind: malformed input, connection errors (reset...), connections refused \
             out of fds, UDP replies dropped, accept() errors by errno.",
        "kind",
        errors_by_kind(t),
    )?;
    counter(
        e,
        "throng_server_listen_overflows",
        "The kernel's ListenOverflows since the server started (this network namespace, \
             every listener): connections an accept queue had no room for.",
        listen.0,
    )?;
    counter(
        e,
        "throng_server_listen_drops",
        "The kernel's ListenDrops since the server started (this network namespace, every \
             listener).",
        listen.1,
    )?;
    match &t.push {
        Some(p) => encode_push(e, p),
        None => Ok(()),
    }
}

/// --mode push's figures.
fn encode_push(e: &mut DescriptorEncoder, p: &PushTotals) -> std::fmt::Result {
    counter(
        e,
        "throng_server_push_due",
        "--mode push: messages due to subscribers.",
        p.due,
    )?;
    counters_by(
        e,
        "throng_server_push_messages",
        "--mode push: messages due, by outcome: sent on time (within 1 ms), sent late, \
                 dropped on a full socket, dropped a period behind.",
        "outcome",
        [
            ("on_time".to_string(), p.on_time),
            ("late".to_string(), p.late),
            ("skipped_full".to_string(), p.skipped_full),
            ("skipped_behind".to_string(), p.skipped_behind),
        ],
    )?;
    gauge(
        e,
        "throng_server_push_late_max_seconds",
        "--mode push: the latest a message went after its due time, this run.",
        p.late_max_us as f64 / 1e6,
    )
}

/// Each process's figures, labelled by its number.
fn encode_per_process(e: &mut DescriptorEncoder, members: &[ProcessFigures]) -> std::fmt::Result {
    gauges_by(
        e,
        "throng_server_process_connections",
        "Connections open now in each process.",
        "process",
        members
            .iter()
            .enumerate()
            .map(|(i, m)| ((i + 1).to_string(), m.connections)),
    )?;
    let per_process: [PerProcess; 6] = [
        (
            "throng_server_process_accepted",
            "Connections accepted by each process.",
            |m| m.totals.accepted,
            false,
        ),
        (
            "throng_server_process_closed",
            "Connections closed by each process.",
            |m| m.totals.closed,
            false,
        ),
        (
            "throng_server_process_requests",
            "Messages answered by each process.",
            |m| m.totals.requests,
            false,
        ),
        (
            "throng_server_process_received",
            "Bytes read by each process.",
            |m| m.totals.bytes_in,
            true,
        ),
        (
            "throng_server_process_sent",
            "Bytes written by each process.",
            |m| m.totals.bytes_out,
            true,
        ),
        (
            "throng_server_process_errors",
            "Errors of every kind in each process.",
            |m| m.totals.errors(),
            false,
        ),
    ];
    for (name, help, value, bytes) in per_process {
        let series = members
            .iter()
            .enumerate()
            .map(|(i, m)| ((i + 1).to_string(), value(m)));
        if bytes {
            bytes_counters_by(e, name, help, "process", series)?;
        } else {
            counters_by(e, name, help, "process", series)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::seconds::Second;

    #[test]
    fn accept_errors_are_kinds_of_their_own() {
        let t = Totals {
            bad_input: 2,
            accept_errno: vec![(libc::ECONNABORTED, 3), (200, 1)],
            ..Totals::default()
        };
        let kinds = errors_by_kind(&t);
        assert_eq!(kinds[0], ("malformed".into(), 2));
        assert_eq!(kinds[4], ("accept_econnaborted".into(), 3));
        assert_eq!(kinds[5], ("accept_errno_200".into(), 1));
    }

    #[test]
    fn processes_show_apart_only_when_several() {
        let e = Exported::new((0, 0));
        e.add_reported();
        let text = |e: &Arc<Exported>| {
            let mut s = String::new();
            prometheus_client::encoding::text::encode(&mut s, &e.registry()).unwrap();
            s
        };
        let one = text(&e);
        assert!(one.contains("throng_server_processes 1\n"), "{one}");
        assert!(!one.contains("process=\""), "{one}");
        let sec = ChildSecond {
            sec: Second {
                connections: 3,
                peak_connections: 4,
                ..Second::default()
            },
            totals: Some(Totals {
                accepted: 5,
                ..Totals::default()
            }),
        };
        e.report(0, &sec);
        e.add_reported();
        e.report(1, &sec);
        let two = text(&e);
        assert!(two.contains("throng_server_connections 6\n"), "{two}");
        assert!(two.contains("throng_server_accepted_total 10\n"), "{two}");
        assert!(
            two.contains("throng_server_process_accepted_total{process=\"2\"} 5\n"),
            "{two}"
        );
        e.finish(
            1,
            &ChildTotals {
                totals: Totals {
                    accepted: 7,
                    ..Totals::default()
                },
                peak: 4,
            },
        );
        let end = text(&e);
        assert!(end.contains("throng_server_connections 3\n"), "{end}");
        assert!(end.contains("throng_server_accepted_total 12\n"), "{end}");
    }
}
