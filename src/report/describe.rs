//! A run's scenario in words, as the HTML report's tables and legends say
//! it: a row per aspect (targets, transport, connections, protocol, rate
//! model, duration, where it was measured), each from one function, so
//! that a protocol's or a transport's words live in one place. It reads a
//! result and writes text; it draws nothing.

use std::fmt::Write as _;

use crate::domain::{Arrivals, Spread, Transport};
use crate::engine::proto;
use crate::outcome::RunResult;
use crate::scenario::{End, Model, Ramp, Scenario, Traffic};
use crate::units::{human, human_us, utc};

/// A run in a few words, for a report of one run made at its end:
/// "tcp, 1000 connections, 10k queries/s".
pub fn label_of(r: &RunResult) -> String {
    let sc = &r.scenario;
    let mut label = format!("{}, {} connections", sc.transport.name(), sc.connections);
    match sc.traffic.as_ref().map(|t| &t.model) {
        Some(Model::OpenLoop { phases, .. }) if phases.len() == 1 => {
            let _ = write!(label, ", {} queries/s", human(phases[0].to));
        }
        Some(Model::OpenLoop { .. }) => label.push_str(", a rate schedule"),
        Some(Model::Interval { every_s }) => {
            let _ = write!(label, ", a query every {every_s} s each");
        }
        Some(Model::ClosedLoop { .. }) => label.push_str(", closed loop"),
        None => {}
    }
    label
}

/// The scenario in words: what ran, against what, how.
pub fn scenario_rows(r: &RunResult) -> Vec<(&'static str, String)> {
    let sc: &Scenario = &r.scenario;
    let mut rows = vec![
        ("targets", targets(sc)),
        ("transport", transport(sc)),
        ("connections", connections(sc)),
    ];
    match &sc.traffic {
        Some(t) => {
            rows.push(("protocol", proto::describe(&t.query)));
            rows.push(("rate model", rate_model(t)));
        }
        None => match &sc.push {
            Some(p) => rows.push(("protocol", push(p))),
            None => rows.push(("queries", "none: connections only".into())),
        },
    }
    rows.push(("duration", duration(r)));
    if !r.parts.is_empty() {
        rows.push(("merged", merged(r)));
    }
    if r.partial {
        rows.push(("PARTIAL", r.missing.join("; ")));
    }
    rows.push(("measured on", measured_on(r)));
    if r.interrupted {
        rows.push((
            "interrupted",
            "yes: the figures are those up to Ctrl-C".into(),
        ));
    }
    rows
}

/// --proto push: what the server is expected to send, and how it is read.
fn push(p: &crate::scenario::PushListen) -> String {
    let every = human_us((p.every_s * 1e6).round() as u64);
    let what = if p.burst > 1 {
        format!("{} messages every {every}", p.burst)
    } else {
        format!("a message every {every}")
    };
    let format = match p.format {
        crate::domain::PushFormat::Throng => "throng server's header",
        crate::domain::PushFormat::Line => "lines, a decimal sequence number first",
    };
    format!("push: {what} on each connection, read as {format}")
}

/// The servers it ran against: the embedded one, the names given, or
/// the addresses.
fn targets(sc: &Scenario) -> String {
    if sc.embedded_server {
        format!(
            "{} (the embedded {} server)",
            sc.targets.first().map_or("?".into(), ToString::to_string),
            if sc.push.is_some() { "push" } else { "echo" }
        )
    } else if sc.target_names.is_empty() {
        sc.targets
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        sc.target_names.join(", ")
    }
}

/// The transport and how it uses its connections.
fn transport(sc: &Scenario) -> String {
    match sc.transport {
        Transport::Tcp => "TCP, persistent connections".to_string(),
        Transport::Udp => "UDP, a connected socket per connection".into(),
        Transport::TcpPerQuery => "TCP, a new connection for every query".into(),
        Transport::Tls => format!(
            "TLS over persistent TCP connections{}",
            if sc.tls.as_ref().is_some_and(|t| t.resume) {
                ", sessions resumed"
            } else {
                ""
            }
        ),
    }
}

/// How many connections, opened how, living how long.
fn connections(sc: &Scenario) -> String {
    let ramp = match sc.ramp {
        Ramp::Rate { per_second } => format!("opened at {}/s", human(per_second)),
        Ramp::Batch { size, delay_s } => format!("opened in batches of {size} every {delay_s} s"),
    };
    match (&sc.connections_schedule, sc.transport) {
        (Some(phases), _) => format!(
            "up to {}, following {} ({ramp})",
            sc.connections,
            super::phase_steps(phases)
        ),
        (None, Transport::TcpPerQuery) => format!("up to {} open at once", sc.connections),
        (None, _) => format!(
            "{}, {ramp}{}{}",
            sc.connections,
            sc.lifetime_s
                .map_or(String::new(), |l| format!(", each living {l} s")),
            if sc.reconnect { ", replaced" } else { "" }
        ),
    }
}

/// When queries are sent: the pacing model, the window, the timeout.
fn rate_model(t: &Traffic) -> String {
    let model = match &t.model {
        Model::OpenLoop {
            phases,
            arrivals,
            spread,
        } => {
            let rate = if phases.len() == 1 && phases[0].from == phases[0].to {
                format!("{} queries/s", human(phases[0].from))
            } else {
                let steps: Vec<String> = phases
                    .iter()
                    .map(|p| format!("{}s@{}..{}", p.seconds, p.from, p.to))
                    .collect();
                format!("schedule {}", steps.join(","))
            };
            format!(
                "open loop, {rate} over all connections, {} arrivals, {} spread",
                match arrivals {
                    Arrivals::Poisson => "Poisson",
                    Arrivals::Constant => "evenly spaced",
                },
                match spread {
                    Spread::Random => "random",
                    Spread::RoundRobin => "round-robin",
                }
            )
        }
        Model::Interval { every_s } => format!("each connection every {every_s} s"),
        Model::ClosedLoop { think_s } => format!(
            "closed loop: the next query when one is answered{}",
            if *think_s > 0.0 {
                format!(", after {think_s} s")
            } else {
                String::new()
            }
        ),
    };
    let window = t.window.map_or(String::new(), |w| {
        format!("; at most {w} outstanding per connection")
    });
    format!("{model}{window}; timeout {} s", t.timeout_s)
}

/// How long it measured, and how it was told to end.
fn duration(r: &RunResult) -> String {
    let hold = match r.scenario.end {
        End::Duration { seconds } => format!("held {seconds} s after the ramp"),
        End::Hold => "held until Ctrl-C".into(),
        End::Pause => "held until Enter".into(),
    };
    format!("{:.1} s measured; {hold}", r.duration_s)
}

/// The results a merged one was made of, and their hosts.
fn merged(r: &RunResult) -> String {
    let mut hosts: Vec<&str> = r.parts.iter().map(|p| p.hostname.as_str()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let mut from: Vec<&str> = r.parts.iter().take(8).map(|p| p.from.as_str()).collect();
    if r.parts.len() > 8 {
        from.push("...");
    }
    format!(
        "{} ({}) measured on {} ({})",
        plural(r.parts.len() as u64, "result", "results"),
        from.join(", "),
        plural(hosts.len() as u64, "host", "hosts"),
        hosts.join(", ")
    )
}

/// The host, the start, the workers and the version that measured it.
fn measured_on(r: &RunResult) -> String {
    format!(
        "{}, started {}, {} workers, throng {}",
        if r.environment.hostname.is_empty() {
            "?"
        } else {
            &r.environment.hostname
        },
        utc(r.environment.started_unix_s),
        r.scenario.workers,
        r.environment.throng_version
    )
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
