//! What a search asks of the command line, once: its first load, how far
//! its steps can be held, the client's workers beside a server on this
//! host, and the plan paragraph it prints before its first step.

use super::{Find, LimitConfig};
use crate::domain::Transport;

/// What a search asks of the command line, once.
pub(super) struct SearchPlan {
    pub(super) axis: &'static str,
    pub(super) start: f64,
    /// For the rate axis: the connections the rate is spread over.
    pub(super) connections: u64,
    /// The held runs' reach: the most connections one client process
    /// holds here (its fds, the fast ports of its sources); None: no held
    /// steps (a transport, --processes or scenario they do not fit).
    pub(super) hold_up_to: Option<u64>,
    /// The client's own worker cores (a held step's client is busy when
    /// it uses most of them).
    pub(super) workers: f64,
    /// This host's cores.
    pub(super) cores: f64,
    /// The target is on this host: the client's workers, fewer than its
    /// cores, so that the server keeps one (the search finds the server's
    /// limit, not what is left of it beside the client). For steps in one
    /// process; a step split over several shares the cores as `client`
    /// does.
    pub(super) left_to_server: Option<u64>,
    /// The most connections one client process holds here.
    pub(super) reach: u64,
}

impl SearchPlan {
    /// `--workers` for a step of `connections` (none: the client's own
    /// choice).
    pub(super) fn workers_args(&self, connections: u64) -> Vec<String> {
        match self.left_to_server {
            Some(w) if connections <= self.reach => vec!["--workers".into(), w.to_string()],
            _ => Vec::new(),
        }
    }
}

/// The client's workers when a search's target shares this host: one per
/// core but one, unless --workers says. On two cores, two busy workers
/// leave a one-threaded server (unbound) waiting for a core: its socket
/// overflows at half the rate it takes beside one worker (bench/RESULTS.md).
pub(super) fn yield_cores(workers: Option<u64>, cores: f64) -> Option<u64> {
    match workers {
        Some(_) => None,
        None if cores >= 2.0 => Some(cores as u64 - 1),
        None => None,
    }
}

/// The search's first paragraph: what it looks for, from where, how a
/// step runs and when it keeps up.
pub(super) fn announce(a: &LimitConfig, plan: &SearchPlan, target: &str, cluster: bool) {
    let unit = |x: f64| unit(a.find, x);
    let keeping_up = match a.find {
        Find::Connections => "every attempt established and verified, none failed (the \
                              client's default checks)"
            .to_string(),
        Find::Rate => format!(
            "the client's default checks hold and, unless --check says otherwise on those \
             keys, every query is answered ok and none timed out (queries.ok>=99.9%, \
             queries.timed_out==0), and the answers keep pace: those that come in the judged \
             seconds are at least {}% of the queries due in them (a server answering late \
             from a growing queue does not keep up, though every answer comes in the drain)",
            super::PACE * 100.0
        ),
    };
    let user_checks = if a.client.check.is_empty() {
        String::new()
    } else {
        format!(" and {}", a.client.check.join(", "))
    };
    let max = a
        .max
        .map_or("no bound".to_string(), |m| format!("at most {}", unit(m)));
    let how = match (a.find, plan.hold_up_to) {
        (Find::Connections, Some(cap)) => format!(
            "The connections are held and grown: each step adds to those held and holds them \
             {} s (a server that drops some fails it), up to {} in one client process; the \
             narrowing, and steps past that, are fresh `throng client` runs (all closed, the \
             kernel's sockets let go, then opened again).",
            a.step_time.as_secs_f64(),
            unit(cap as f64)
        ),
        (Find::Rate, Some(_)) => format!(
            "Over {} connections opened once, each step offers its rate for a warm-up second, \
             then {} s judged, then a drain at rate 0 until its answers are in (a step whose \
             queries outlast the drain has the connections opened again for the next); the \
             best pass is offered again to confirm it.",
            plan.connections,
            a.step_time.as_secs_f64()
        ),
        (_, None) if cluster => format!(
            "Each step is a `throng cluster` run of {} s over the load hosts (each a share of \
             the step's load, merged exactly){}.",
            a.step_time.as_secs_f64(),
            if a.find == Find::Rate {
                format!(", over {} connections in all", plan.connections)
            } else {
                String::new()
            }
        ),
        (_, None) => format!(
            "Each step is a fresh `throng client` run of {} s{}.",
            a.step_time.as_secs_f64(),
            if a.find == Find::Rate {
                format!(" over {} connections", plan.connections)
            } else {
                String::new()
            }
        ),
    };
    let cores = match plan.left_to_server {
        Some(w) => format!(
            " The target is on this host: a step in one client process runs at most {w} \
             worker{} of this host's {:.0} cores, leaving the server one (--workers to \
             choose).",
            if w == 1 { "" } else { "s" },
            plan.cores
        ),
        None => String::new(),
    };
    let again = match a.find {
        Find::Rate => format!(
            " A rate that fails narrowly (at least {:.0}% of its due queries answered ok, and \
             in their seconds) is offered once more, and its second run decides.",
            super::NARROW * 100.0
        ),
        Find::Connections => String::new(),
    };
    outln!(
        "Searching the {} {target} keeps up with, from {}, doubling until a step fails, \
         then halving the interval until it is within {:.1}%; {max}. {how} A step keeps up \
         when {keeping_up}{user_checks}.{again}{cores}",
        plan.axis,
        unit(plan.start),
        a.precision * 100.0,
    );
}

pub(super) fn unit(find: Find, x: f64) -> String {
    match find {
        Find::Connections => format!("{x:.0} connections"),
        Find::Rate => format!("{x:.0}/s"),
    }
}

/// The first load, and whether (and how far) steps can be held.
pub(super) fn plan(a: &LimitConfig, axis: &'static str) -> SearchPlan {
    let c = &a.client;
    let start = match a.find {
        Find::Connections => c.connections as f64,
        Find::Rate => c.rate.unwrap_or(1000.0),
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let workers = c.workers.map_or(cores, |w| (w as f64).min(cores));
    // One client process: its fds (the held run raises its limit as
    // `client` does), and the fast ports of the pairs it would use.
    let fds = crate::sys::limits::raise_nofile().map_or(1024, |f| f.soft);
    let sources = c.source_ips.max(1) as u64;
    let targets = c.targets.len().max(1) as u64;
    let cap = fds
        .saturating_sub(64)
        .min(crate::sys::sources::fast_per_pair() * sources * targets);
    let one_process = matches!(
        c.processes,
        crate::domain::Processes::Auto | crate::domain::Processes::Count(1)
    );
    let fits = match a.find {
        // HeldRun connections are plain ones that stay: not a connection a
        // query, not datagrams, not a schedule of their own.
        Find::Connections => {
            matches!(c.transport, Transport::Tcp | Transport::Tls)
                && c.connections_schedule.is_none()
                && c.lifetime.is_none()
                && c.proto != crate::domain::Proto::Push
                && c.connections < cap
        }
        Find::Rate => {
            // (Nor connections the client closes itself: their closes
            // would read as the server's.)
            c.transport != Transport::TcpPerQuery
                && c.lifetime.is_none()
                && c.max_queries_per_conn.is_none()
                && c.messages.is_none()
                && c.schedule.is_none()
                && c.schedule_file.is_none()
                && c.interval.is_none()
                && c.queries.is_none()
                && c.connections_schedule.is_none()
                && c.connections <= cap
        }
    };
    SearchPlan {
        axis,
        start,
        connections: c.connections,
        hold_up_to: (one_process && fits).then_some(cap),
        workers,
        cores,
        left_to_server: None,
        reach: cap,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_on_this_host_keeps_a_core_unless_workers_say() {
        assert_eq!(yield_cores(None, 2.0), Some(1));
        assert_eq!(yield_cores(None, 8.0), Some(7));
        assert_eq!(yield_cores(None, 1.0), None);
        assert_eq!(yield_cores(Some(2), 2.0), None);
    }
}
