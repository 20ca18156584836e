//! The plan paragraph printed before a run: what it will do, in words.

use super::*;

/// The preflight paragraph: what is about to happen.
pub fn plan_paragraph(sc: &Scenario, ports_per_source: u64) -> String {
    let targets = if sc.embedded_server {
        let mode = if sc.push.is_some() { "push" } else { "echo" };
        format!("{} (embedded {mode} server)", sc.targets[0])
    } else {
        sc.targets
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let sources = if sc.sources.is_empty() {
        format!("one source address ({ports_per_source} ports)")
    } else {
        let list: Vec<String> = sc.sources.iter().take(4).map(ToString::to_string).collect();
        let more = if sc.sources.len() > 4 { ", ..." } else { "" };
        format!(
            "{} source addresses ({}{more}; {ports_per_source} ports each)",
            sc.sources.len(),
            list.join(", ")
        )
    };
    let ramp = match sc.ramp {
        crate::scenario::Ramp::Rate { per_second } => format!("{per_second}/s"),
        crate::scenario::Ramp::Batch { size, delay_s } => {
            format!("batches of {size} every {delay_s}s")
        }
    };
    let hold = match sc.end {
        End::Duration { seconds } => format!("then hold {seconds} s"),
        End::Hold => "then hold until Ctrl-C".into(),
        End::Pause => "then hold until Enter".into(),
    };
    let mode = match sc.connect_mode {
        crate::domain::ConnectMode::Async => {
            format!("async, up to {} in flight", sc.max_inflight_connects)
        }
        crate::domain::ConnectMode::Sync => "sync, one at a time".into(),
    };
    if let (Some(phases), Some(total)) = (&sc.connections_schedule, sc.schedule_seconds()) {
        return format!(
            "Up to {} connections to {targets} from {sources}, following {} for {total} s \
             (opening at up to {ramp}, closing the oldest first; {mode}, {} worker{}).",
            sc.connections,
            phase_steps(phases),
            sc.workers,
            if sc.workers == 1 { "" } else { "s" },
        );
    }
    let workers = format!(
        "{} worker{}",
        sc.workers,
        if sc.workers == 1 { "" } else { "s" }
    );
    match sc.transport {
        Transport::TcpPerQuery => {
            return format!(
                "A new TCP connection for every query to {targets} from {sources}, up to {} \
                 open at once ({workers}), {hold}.",
                sc.connections,
                hold = hold.trim_start_matches("then ")
            );
        }
        Transport::Udp => {
            return format!(
                "{} connected UDP sockets to {targets} from {sources} ({workers}), {}.",
                sc.connections,
                hold.replace("hold", "run")
            );
        }
        Transport::Tls | Transport::Tcp => {}
    }
    let tls = if sc.transport == Transport::Tls {
        " TLS"
    } else {
        ""
    };
    let mut p = format!(
        "{}{tls} connections to {targets} from {sources}, {ramp} ({mode}, {} worker{}): ramp ≈ {:.1} s, {hold}",
        sc.connections,
        sc.workers,
        if sc.workers == 1 { "" } else { "s" },
        sc.ramp_time().as_secs_f64()
    );
    if let Some(l) = sc.lifetime_s {
        p.push_str(&format!(
            "; each connection lives {l} s{}",
            if sc.reconnect { " and is replaced" } else { "" }
        ));
    }
    if !sc.verify {
        p.push_str("; no verification probe");
    }
    p.push('.');
    p
}

/// --connections-schedule's phases as given: `30s@10k,60s@10k..100k`.
pub(crate) fn phase_steps(phases: &[crate::scenario::Phase]) -> String {
    let steps: Vec<String> = phases
        .iter()
        .map(|p| {
            if p.from == p.to {
                format!("{}s@{}", p.seconds, p.from)
            } else {
                format!("{}s@{}..{}", p.seconds, p.from, p.to)
            }
        })
        .collect();
    steps.join(",")
}
