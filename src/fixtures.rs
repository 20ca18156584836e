//! What unit tests of results build on (test builds only): a slice's
//! measurement and its result file, made from flags as a run would make
//! them. At the top, so that it may use every layer.

use hdrhistogram::Histogram;

use crate::metrics::new_histogram;
use crate::outcome::RunResult;

pub(crate) fn scenario(flags: &[&str]) -> crate::scenario::Scenario {
    let mut argv = vec!["127.0.0.1:1".to_string()];
    argv.extend(flags.iter().map(|a| a.to_string()));
    crate::cli::client_args(&argv)
        .expect("client flags")
        .scenario(vec!["127.0.0.1:1".parse().unwrap()], false, Vec::new())
        .unwrap()
}

pub(crate) fn environment(host: &str) -> crate::outcome::Environment {
    crate::outcome::Environment {
        throng_version: "test".into(),
        hostname: host.into(),
        kernel: String::new(),
        cores: 1,
        fd_limit_soft: 0,
        fd_limit_hard: 0,
        ip_local_port_range: [0, 0],
        somaxconn: None,
        tcp_tw_reuse: None,
        started_unix_s: 0,
        clock_offset_s: None,
    }
}

pub(crate) fn histogram(values: &[u64]) -> Histogram<u64> {
    let mut h = new_histogram();
    for &v in values {
        h.record(v).unwrap();
    }
    h
}

/// What one slice measured: `n` scales its counts, `secs` its times.
pub(crate) fn outcome(n: u64, secs: f64) -> crate::outcome::Outcome {
    use crate::metrics::{ConnTotals, QueryTotals, StatusCounts, E_CONN_LOST};
    use std::time::Duration;
    let mut totals = ConnTotals {
        attempted: 10 * n,
        established: 9 * n,
        established_initial: 5 * n,
        verified: 9 * n,
        closed: n,
        ..ConnTotals::default()
    };
    totals.failed[crate::metrics::Bucket::Other as usize] = n;
    totals.other_errno.insert(libc::EPERM, n);
    let mut qt = QueryTotals {
        due: 100 * n,
        sent: 100 * n,
        answered: 90 * n,
        timed_out: n,
        bytes_out: 1000 * n,
        bytes_in: 900 * n,
        truncated: 2 * n,
        ..QueryTotals::default()
    };
    qt.errors[E_CONN_LOST] = n;
    let mut statuses = StatusCounts::default();
    statuses.rcodes[0] = 90 * n;
    statuses.by_qtype.push((1, statuses.rcodes));
    crate::outcome::Outcome {
        totals,
        hists: crate::metrics::Histograms {
            connect_time: histogram(&[100 * n, 200]),
            connect_syscall: histogram(&[5]),
            tls_handshake: new_histogram(),
            response_time: histogram(&[1000 * n, 10]),
            service_time: histogram(&[900 * n]),
            send_lag: histogram(&[1]),
            loop_lag: histogram(&[2]),
            ..crate::metrics::Histograms::default()
        },
        peak: 9 * n as i64,
        per_second: Vec::new(),
        interrupted: false,
        verify_time: Some(Duration::from_secs_f64(secs / 2.0)),
        ramp_time: Some(Duration::from_secs_f64(secs / 4.0)),
        elapsed: Duration::from_secs_f64(secs),
        overrun: Vec::new(),
        push: None,
        observed: Default::default(),
        ramp_stopped: None,
        wall: None,
        queries: Some(crate::outcome::QueryOutcome {
            totals: qt,
            statuses,
            in_flight: n,
            seconds: secs,
            target_queries: 100.0 * n as f64,
            controls: vec![crate::outcome::ControlEvent {
                t: n as f64,
                command: format!("rate {n}"),
                applied: true,
            }],
        }),
    }
}

/// Slice `k` of two of a DNS run, from what it measured.
pub(crate) fn slice(k: u64, o: &crate::outcome::Outcome) -> RunResult {
    slice_of(k, 2, o)
}

/// Slice `k` of `n` of a DNS run, from what it measured.
pub(crate) fn slice_of(k: u64, n: u64, o: &crate::outcome::Outcome) -> RunResult {
    let whole = scenario(&["-c", "11", "-r", "100", "--proto", "dns"]);
    let seg = crate::domain::Segment { index: k, count: n };
    let mut recorded = whole.clone();
    recorded.segment = Some(seg);
    RunResult::new(
        &recorded,
        &whole.slice(seg),
        environment(&format!("h{k}")),
        o,
    )
}

/// Slice `k` of `n` of run `id`, whose traffic (and hold) ran from `from`
/// for `secs` seconds (wall clock).
pub(crate) fn timed(k: u64, n: u64, id: &str, from: f64, secs: f64) -> RunResult {
    let mut r = slice_of(k, n, &outcome(1, secs));
    let wall = crate::outcome::Wall {
        start_unix_s: from - 0.5,
        end_unix_s: from + secs + 0.5,
        traffic_start_unix_s: Some(from),
        traffic_end_unix_s: Some(from + secs),
        held_start_unix_s: Some(from),
        held_end_unix_s: Some(from + secs),
        established_unix_s: Some(from),
    };
    let run = crate::domain::RunId {
        id: id.into(),
        from: crate::domain::RunIdFrom::Flag,
    };
    r.slice = Some(crate::outcome::SliceOf::new(&run, &r.scenario, wall));
    r
}

/// A `--proto push` run of 2 connections at 10 ms over 2 s: 390 messages
/// received of 400 expected, its jitter, gap and (with `delay`) one-way
/// delay, and its two seconds.
pub(crate) fn push_result(delay: bool) -> RunResult {
    let flags = ["--proto", "push", "--every", "10ms", "-c", "2", "-T", "2s"];
    let mut sc = scenario(&flags);
    if !delay {
        // A server on another host, without --clock-sync.
        sc.targets = vec!["192.0.2.1:1".parse().unwrap()];
    }
    let mut o = outcome(1, 2.0);
    o.queries = None;
    o.push = Some(crate::metrics::PushTotals {
        received: 390,
        lost: 10,
        expected: 400,
        connections_with_loss: 1,
        ..Default::default()
    });
    o.hists.push_gap = histogram(&[10_000; 388]);
    o.hists.push_jitter = histogram(&(0..388).map(|i| i % 50).collect::<Vec<_>>());
    o.hists.push_delay = histogram(&[30; 390]);
    o.per_second = (1..=2)
        .map(|t| crate::outcome::Sample {
            t,
            unix_s: 1_700_000_000 + t,
            connections: 2,
            push_received: Some(195),
            push_lost: Some(5 * (t - 1)),
            push_jitter_p99_us: Some(48),
            push_delay_p99_us: delay.then_some(30),
            ..Default::default()
        })
        .collect();
    RunResult::new(&sc, &sc, environment("h1"), &o)
}
