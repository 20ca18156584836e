//! `throng client`: from flags to a finished, reported run. Resolves the
//! targets (or starts the embedded server), plans source addresses, runs the
//! preflight checks and prints the plan, runs the engine, prints the summary
//! and writes the JSON. An impossible plan stops here, before any connect.

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;

use std::ffi::OsString;

use crate::cli::ClientArgs;
use crate::domain::{Mode, Processes, Transport};
use crate::report::json::{write_atomic, Environment, RunResult};
use crate::report::{self, LiveView};
use crate::scenario::{self, Scenario};
use crate::server::{self, ServerConfig};
use crate::sys::limits::{self, FdLimit};
use crate::sys::signals::Stop;
use crate::sys::{capacity, proc, sources};
use crate::UsageError;

/// Fds a client process needs besides its connections (epoll, wakers,
/// stdio, the embedded server's listener...).
const FD_OVERHEAD: u64 = 64;
/// Most addresses one --source-ip prefix expands to.
const MAX_SOURCES: usize = 65_536;

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

fn embedded_config(transport: Transport) -> Result<ServerConfig> {
    let tls = match transport {
        Transport::Tls => Some(crate::server::ServerTls::load(None, None)?),
        _ => None,
    };
    Ok(ServerConfig::embedded(
        Mode::Echo,
        transport == Transport::Udp,
        tls,
    ))
}

/// What the preflight found wrong with a plan: each entry is the reason
/// and the fix.
/// `shortfall`: the source planner's advice for a target off this host (the
/// interface's missing addresses), the fix when the ports run out.
fn preflight(sc: &Scenario, fd: &FdLimit, shortfall: Option<&str>) -> Vec<String> {
    let mut problems = Vec::new();
    let per_conn = if sc.embedded_server { 2 } else { 1 };
    let need = sc.connections * per_conn + FD_OVERHEAD + limits::fds_in_use() as u64;
    if need > fd.soft {
        let fit = fd
            .soft
            .saturating_sub(FD_OVERHEAD + limits::fds_in_use() as u64)
            / per_conn;
        let cap = if fd.hard_is_cap {
            format!(
                "the hard limit ({}) is the cap here: this process cannot raise it \
                 (no CAP_SYS_RESOURCE), even as root",
                fd.hard
            )
        } else {
            format!("raise it with `ulimit -n {need}` (hard limit {})", fd.hard)
        };
        let embedded = if sc.embedded_server {
            " (the embedded server holds the other end of each connection in the same process)"
        } else {
            ""
        };
        problems.push(format!(
            "{} connections need about {need} file descriptors{embedded}, but this process may \
             hold {}: {cap}. Run at most -c {fit} per process.",
            sc.connections, fd.soft
        ));
    }
    let ports = sources::ports_per_source();
    let per_target = sc.per_target();
    let family_sources = |t: &SocketAddr| {
        sc.sources
            .iter()
            .filter(|s| s.is_ipv4() == t.is_ipv4())
            .count()
            .max(1) as u64
    };
    if let Some(t) = sc
        .targets
        .iter()
        .find(|t| per_target > ports * family_sources(t))
    {
        let fix = match shortfall {
            Some(s) => format!("{s}; or widen the range"),
            None => "Add source addresses (--source-ip 127.0.0.2/24 on loopback) or widen the \
                     range"
                .to_string(),
        };
        problems.push(format!(
            "{per_target} connections to {t} need {per_target} ephemeral ports, but {} source \
             address(es) give {} ({ports} each, net.ipv4.ip_local_port_range). {fix}: \
             sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\"",
            family_sources(t),
            ports * family_sources(t)
        ));
    }
    problems
}

/// What the plan should know but may run with. `shortfall`: the source
/// planner's advice when the interface has too few addresses (it says
/// what the per-pair warning would, with the `ip addr add` commands).
fn warnings(sc: &Scenario, shortfall: Option<String>) -> Vec<String> {
    let mut w = Vec::new();
    if let Some(msg) = time_wait_warning(sc) {
        w.push(msg);
    }
    if sc.reconnect && proc::sysctl_u64("net.ipv4.tcp_tw_reuse") == Some(0) {
        w.push(
            "connections will churn and each closed one keeps its port in TIME_WAIT for 60 s, \
             but net.ipv4.tcp_tw_reuse is 0; set it (sysctl -w net.ipv4.tcp_tw_reuse=1) or add \
             source addresses"
                .to_string(),
        );
    }
    if let Some(msg) = shortfall
        .or_else(|| per_pair_warning(sc, sources::fast_per_pair(), sources::ports_per_source()))
    {
        w.push(msg);
    }
    w
}

/// Says when a (source, destination) pair will carry more connections than
/// connect() handles fast, and how many source addresses would fix it.
fn per_pair_warning(sc: &Scenario, fast: u64, ports: u64) -> Option<String> {
    if sc.targets.is_empty() || sc.transport == Transport::Udp {
        return None;
    }
    let per_target = sc.per_target();
    let have = sc
        .targets
        .iter()
        .map(|t| {
            sc.sources
                .iter()
                .filter(|s| s.is_ipv4() == t.is_ipv4())
                .count()
                .max(1) as u64
        })
        .min()
        .unwrap_or(1);
    let per_pair = per_target.div_ceil(have);
    if per_pair <= fast {
        return None;
    }
    let needed = per_target.div_ceil(fast);
    let from = if sc.sources.is_empty() {
        "one source address".to_string()
    } else {
        format!("{have} source address(es)")
    };
    Some(format!(
        "{per_target} connections to each destination from {from} put {per_pair} on each \
         (source, destination) pair; {}. The ramp will crawl past that point: give {needed} \
         source addresses (--source-ip, e.g. 127.0.0.0/{} on loopback) or widen the range \
         (sysctl -w net.ipv4.ip_local_port_range=\"1024 65535\")",
        sources::per_pair_reason(fast, ports),
        32 - (needed + 2).next_power_of_two().trailing_zeros()
    ))
}

/// tcp-per-query leaves a port in TIME_WAIT per query for 60 s: says so
/// when the planned rate would use up the port range that way.
fn time_wait_warning(sc: &Scenario) -> Option<String> {
    let t = sc.traffic.as_ref()?;
    if sc.transport != Transport::TcpPerQuery {
        return None;
    }
    let peak = match &t.model {
        scenario::Model::OpenLoop { phases, .. } => {
            phases.iter().map(|p| p.from.max(p.to)).fold(0.0, f64::max)
        }
        _ => return None,
    };
    let reuse = proc::sysctl_u64("net.ipv4.tcp_tw_reuse").unwrap_or(0);
    let loopback = sc.targets.iter().all(|a| a.ip().is_loopback());
    if reuse == 1 || (reuse == 2 && loopback) {
        return None;
    }
    let ports = sources::ports_per_source() * sc.sources.len().max(1) as u64;
    let in_time_wait = peak * 60.0;
    (in_time_wait > ports as f64).then(|| {
        format!(
            "tcp-per-query at {peak:.0} queries/s leaves ~{in_time_wait:.0} ports in TIME_WAIT \
             (60 s each) but only {ports} are available: connects will fail with \
             no_free_port; set net.ipv4.tcp_tw_reuse=1 (sysctl -w) or add source addresses \
             (--source-ip)"
        )
    })
}

/// Processes the plan needs: one unless the fd limit says more.
fn processes_needed(a: &ClientArgs, sc: &Scenario, fd: &FdLimit) -> u64 {
    match a.processes {
        Processes::Count(n) => n,
        Processes::Auto => {
            // The same math as `throng tune`.
            let per_conn = if sc.embedded_server { 2 } else { 1 };
            crate::sys::tune::processes_for(sc.connections * per_conn, fd.soft.saturating_sub(64))
        }
    }
}

/// Resolves each HOST:PORT once.
fn resolve(targets: &[String]) -> Result<Vec<SocketAddr>> {
    targets
        .iter()
        .map(|t| {
            let mut addrs = t.to_socket_addrs().map_err(|e| {
                usage(format!(
                    "cannot resolve target '{t}': {e}; give HOST:PORT, e.g. 127.0.0.1:4242 or [::1]:53"
                ))
            })?;
            addrs
                .next()
                .ok_or_else(|| usage(format!("target '{t}' resolved to no address")))
        })
        .collect()
}

/// Waits for --start-at; refuses a time in the past.
fn wait_start_at(at: Option<f64>, stop: &Stop) -> Result<bool> {
    let Some(at) = at else {
        return Ok(true);
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    if at < now {
        return Err(usage(format!(
            "--start-at {at:.3} is {:.3} s in the past (now {now:.3}); give a later time",
            now - at
        )));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(at - now);
    Ok(!stop.wait_until(deadline))
}

/// Runs `throng client`.
pub fn run(a: &ClientArgs) -> Result<ExitCode> {
    if let Some(p) = &a.json {
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
        if dir.is_some_and(|d| !d.is_dir()) {
            return Err(usage(format!(
                "--json {}: the directory does not exist",
                p.display()
            )));
        }
    }
    let mut sources_given = Vec::new();
    for spec in &a.source_ip {
        sources_given.extend(
            sources::expand(spec, MAX_SOURCES).map_err(|e| usage(format!("--source-ip {e}")))?,
        );
    }
    if a.control.as_deref().is_some_and(|c| c != "-") {
        return Err(usage("--control takes '-' (commands on stdin)"));
    }
    if a.control.is_some() && a.pause {
        return Err(usage("--control and --pause both read stdin; use one"));
    }
    let stop = if a.child {
        Stop::install_child()?
    } else {
        Stop::install()?
    };
    if a.child {
        crate::child::ChildLine::Pid(std::process::id()).print();
    }
    let fd = limits::raise_nofile()?;
    let started_unix_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let env = Environment::read(started_unix_s);

    let targets = if a.targets.is_empty() {
        Vec::new()
    } else {
        resolve(&a.targets)?
    };
    // The whole scenario decides the plan; a segment runs its slice of it.
    let probe_targets = if targets.is_empty() {
        vec![SocketAddr::from((Ipv4Addr::LOCALHOST, 0))]
    } else {
        targets.clone()
    };
    let mut whole = a.scenario(probe_targets.clone(), a.targets.is_empty(), Vec::new())?;
    let checks = report::check::parse_all(&a.check, whole.traffic.is_some()).map_err(usage)?;
    let nproc = if a.segment.is_some() || a.child {
        1
    } else {
        processes_needed(a, &whole, &fd)
    };
    if !a.child {
        // What this host holds: its slice of a segmented run, or the whole.
        let here = a
            .segment
            .map_or(whole.connections, |s| whole.slice(s).connections);
        let ends_here = if a.targets.is_empty() || probe_targets.iter().all(on_this_host) {
            2
        } else {
            1
        };
        let need = capacity::Need {
            connections: here,
            ends_here,
            processes: nproc,
            ends_per_process: if a.targets.is_empty() { 2 } else { 1 },
        };
        let host = capacity::Host::read(capacity::measure_if_needed(here * ends_here));
        check_problems(a.force, capacity::refusals(&need, &host))?;
    }
    if nproc > 1 && a.targets.is_empty() {
        return Err(usage(format!(
            "{} connections need {nproc} processes here, and the embedded server cannot \
             follow them: start `throng server --processes auto --listen 127.0.0.1:4242` and \
             give its address as the target",
            whole.connections
        )));
    }
    let (chosen, shortfall, why) = if sources_given.is_empty() {
        let slices = a.segment.map_or(nproc, |s| s.count);
        let p = sources::plan(
            &probe_targets,
            whole.per_target(),
            sources::fast_per_pair(),
            slices,
        );
        (p.sources, p.shortfall, p.why)
    } else {
        (sources_given, None, "--source-ip".into())
    };
    check_source_families(&probe_targets, &chosen)?;
    whole.sources = chosen;
    if nproc > 1 {
        return run_processes(a, &whole, nproc, &fd, &stop, (shortfall, &why), &checks);
    }

    let embedded = if a.targets.is_empty() {
        let cfg = embedded_config(whole.transport)?;
        let srv = server::start(&cfg)?;
        if !a.child {
            println!(
                "no target given: started the embedded echo server on {} (the code of `throng server --mode echo`)",
                srv.addrs[0]
            );
        }
        if let (Some(t), Some(o)) = (&cfg.tls, whole.tls.as_mut()) {
            if o.ca.is_none() && !o.insecure {
                // Trust the certificate the embedded server just made.
                o.ca = Some(t.cert_file.clone());
            }
        }
        whole.targets = srv.addrs.clone();
        Some((srv, cfg.tls))
    } else {
        None
    };
    let ran = match a.segment {
        Some(seg) => whole.slice(seg),
        None => whole.clone(),
    };
    let problems = preflight(&ran, &fd, shortfall.as_deref());
    if !a.child {
        let mut out = io::stdout().lock();
        writeln!(
            out,
            "{}",
            report::plan_paragraph(&ran, sources::ports_per_source())
        )?;
        if let Some(seg) = ran.segment {
            writeln!(
                out,
                "  segment {}/{} of {} connections",
                seg.index, seg.count, whole.connections
            )?;
        }
        if !ran.sources.is_empty() {
            writeln!(out, "  sources: {why}")?;
        }
        for w in warnings(&ran, shortfall) {
            writeln!(out, "  warning: {w}")?;
        }
        out.flush()?;
    }
    check_problems(a.force, problems)?;
    let rtt_log = match &a.rtt_log {
        Some(p) => Some(
            std::fs::File::create(p)
                .map_err(|e| usage(format!("--rtt-log {}: {e}", p.display())))?,
        ),
        None => None,
    };
    if !wait_start_at(a.start_at, &stop)? {
        return Ok(ExitCode::from(130));
    }

    let sc = Arc::new(ran);
    if sc.end == scenario::End::Pause {
        stop.on_enter()?;
    }
    if a.control.is_some() {
        stop.on_control()?;
    }
    let mut live = if a.child {
        LiveView::Child
    } else {
        LiveView::new(a.quiet, sc.connections)
    };
    let outcome = crate::engine::run(sc.clone(), &stop, &mut live, rtt_log)?;
    if let Some((srv, tls)) = embedded {
        if let Some(t) = tls {
            t.cleanup();
        }
        srv.stop()?;
    }
    let mut result = RunResult::new(&whole, &sc, env, &outcome);
    let mut out: Box<dyn Write> = if a.child {
        Box::new(io::sink())
    } else {
        Box::new(io::stdout().lock())
    };
    report::summary(&sc, &outcome, &mut out)?;
    out.flush()?;
    drop(out);
    if a.child {
        // The parent checks the merged result and gives the verdict.
        if let Some(p) = &a.json {
            write_atomic(p, &result)?;
        }
        crate::child::ChildLine::Result(Box::new(serde_json::to_value(&result)?)).print();
        return Ok(ExitCode::from(if result.interrupted { 130 } else { 0 }));
    }
    let mut out = io::stdout().lock();
    report::check::apply(&checks, &mut result, &mut out)?;
    out.flush()?;
    drop(out);
    if let Some(p) = &a.json {
        write_atomic(p, &result)?;
    }
    Ok(report::check::exit_code(
        &result,
        sc.max_failures,
        result.interrupted,
    ))
}

fn check_problems(force: bool, problems: Vec<String>) -> Result<()> {
    if problems.is_empty() {
        return Ok(());
    }
    if force {
        for p in &problems {
            eprintln!("throng: --force: running anyway: {p}");
        }
        return Ok(());
    }
    Err(usage(format!(
        "impossible plan: {} (--force runs it anyway)",
        problems.join(" Also: ")
    )))
}

/// Runs the scenario as `n` child processes, one segment each, and merges
/// their results as if one process had done it.
fn run_processes(
    a: &ClientArgs,
    whole: &Scenario,
    n: u64,
    fd: &FdLimit,
    stop: &Stop,
    // The source planner's advice and its reasons, for the plan paragraph.
    (shortfall, why): (Option<String>, &str),
    checks: &[report::check::Check],
) -> Result<ExitCode> {
    use crate::child::{child_args, sum_samples, ChildLine, Children, PartsDir};
    use crate::engine::Live;
    use crate::sys::signals::Reason;
    // Each process checks its own share; the ports are the whole's.
    let mut problems = preflight(
        &whole.slice(crate::domain::Segment { index: 1, count: n }),
        fd,
        shortfall.as_deref(),
    );
    problems.retain(|p| !p.contains("file descriptors"));
    {
        let mut out = io::stdout().lock();
        writeln!(
            out,
            "{}",
            report::plan_paragraph(whole, sources::ports_per_source())
        )?;
        writeln!(
            out,
            "  in {n} processes: {} connections need more fds than one process may hold ({}{})",
            whole.connections,
            fd.soft,
            if fd.hard_is_cap {
                ", the hard limit here"
            } else {
                ""
            }
        )?;
        if !whole.sources.is_empty() {
            writeln!(out, "  sources: {why}")?;
        }
        for w in warnings(whole, shortfall) {
            writeln!(out, "  warning: {w}")?;
        }
        out.flush()?;
    }
    check_problems(a.force, problems)?;
    if a.control.is_some() || a.pause {
        return Err(usage(
            "--control and --pause work with one process; add --processes 1",
        ));
    }
    let parts = PartsDir::new()?;
    let raw: Vec<OsString> = std::env::args_os().skip(2).collect();
    let base = child_args(&raw, false);
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get()) as u64;
    let workers = a.workers.unwrap_or((cores / n).max(1));
    let mut lists = Vec::new();
    for k in 1..=n {
        let mut args: Vec<OsString> = vec!["client".into()];
        args.extend(base.iter().cloned());
        for extra in [
            "--segment".to_string(),
            format!("{k}/{n}"),
            "--processes".into(),
            "1".into(),
            "--child".into(),
            "--workers".into(),
            workers.to_string(),
            "--json".into(),
            parts.0.join(format!("part-{k}.json")).display().to_string(),
        ] {
            args.push(extra.into());
        }
        if let Some(t) = a.start_at {
            args.push("--start-at".into());
            args.push(format!("{t}").into());
        }
        if let Some(p) = &a.rtt_log {
            args.push("--rtt-log".into());
            args.push(format!("{}.{k}", p.display()).into());
        }
        lists.push(args);
    }
    // The children hold until the parent says (Enter on their stdin), so
    // that every slice holds its connections at the same time: the whole
    // run's end counts from the last slice's ramp, as in one process.
    let common_end = whole.connections_schedule.is_none()
        && whole
            .traffic
            .as_ref()
            .and_then(|t| t.schedule_seconds())
            .is_none()
        && matches!(
            whole.end,
            scenario::End::Duration { .. } | scenario::End::Hold
        );
    if common_end {
        for args in &mut lists {
            args.retain(|a| a != "--hold");
            args.push("--pause".into());
        }
    }
    let mut children = Children::spawn(lists, stop, common_end)?;
    let mut live = LiveView::new(a.quiet, whole.connections);
    let mut latest: Vec<Option<crate::engine::Sample>> = vec![None; n as usize];
    let mut ramps = 0;
    let mut shown = 0;
    let mut alive = n;
    let mut interrupted = false;
    let mut end_at: Option<std::time::Instant> = None;
    while alive > 0 {
        let reason = stop.wait_reason(end_at);
        if reason.is_none() && end_at.is_some_and(|e| std::time::Instant::now() >= e) {
            end_at = None;
            children.enter_all();
            continue;
        }
        match reason {
            Some(Reason::Signal) if common_end && whole.end == scenario::End::Hold => {
                // --hold ends with a signal by design: a normal end.
                children.enter_all();
            }
            Some(Reason::Signal) => {
                interrupted = true;
                children.signal(libc::SIGINT);
            }
            Some(Reason::ChildExit(_)) => alive -= 1,
            Some(Reason::ChildLine(i, line)) => match serde_json::from_str::<ChildLine>(&line) {
                Ok(ChildLine::Sample(s)) => {
                    let t = s.t;
                    latest[i] = Some(s);
                    // One line per second once every live child reported it.
                    if t > shown && latest.iter().all(|x| x.as_ref().is_some_and(|x| x.t >= t)) {
                        shown = t;
                        live.second(&sum_samples(&latest, t), whole.connections);
                    }
                }
                Ok(ChildLine::RampDone { seconds }) => {
                    ramps += 1;
                    if ramps == n {
                        if let (true, scenario::End::Duration { seconds }) = (common_end, whole.end)
                        {
                            end_at = Some(
                                std::time::Instant::now()
                                    + std::time::Duration::from_secs_f64(seconds),
                            );
                        }
                        let sum = sum_samples(&latest, shown);
                        let totals = crate::metrics::ConnTotals {
                            established: sum.established,
                            failed: std::array::from_fn(|i| if i == 0 { sum.failed } else { 0 }),
                            ..Default::default()
                        };
                        live.ramp_done(
                            std::time::Duration::from_secs_f64(seconds),
                            &totals,
                            &whole.end,
                        );
                    }
                }
                _ => {}
            },
            _ => {}
        }
    }
    crate::engine::Live::finish(&mut live);
    let statuses = children.wait();
    let mut results = Vec::new();
    let mut names = Vec::new();
    let mut missing = Vec::new();
    for (k, status) in statuses.iter().enumerate() {
        let path = parts.0.join(format!("part-{}.json", k + 1));
        let name = children.names[k].clone();
        match (status, crate::cluster::merge::read(&path)) {
            (_, Ok(r)) => {
                results.push(r);
                names.push(name);
            }
            (Ok(code), Err(_)) => {
                missing.push(format!("{name} exited with code {code} and no result"))
            }
            (Err(why), Err(_)) => missing.push(format!("{name} {why}")),
        }
    }
    crate::cluster::merge::finish(
        crate::cluster::merge::Slices {
            results,
            names,
            missing,
            interrupted,
            ended_as_planned: common_end && whole.end == scenario::End::Hold,
        },
        Some(whole),
        a.json.as_deref(),
        "processes",
        whole.max_failures,
        checks,
    )
}

/// The target's address is one of this host's (loopback or an interface's):
/// both ends of its connections take this host's memory and fds.
fn on_this_host(t: &SocketAddr) -> bool {
    t.ip().is_loopback()
        || t.ip().is_unspecified()
        || sources::host_addresses().iter().any(|(_, a)| *a == t.ip())
}

/// Every target needs a source of its own family when sources are given.
fn check_source_families(targets: &[SocketAddr], chosen: &[IpAddr]) -> Result<()> {
    if chosen.is_empty() {
        return Ok(());
    }
    for t in targets {
        if !chosen.iter().any(|s| s.is_ipv4() == t.is_ipv4()) {
            return Err(usage(format!(
                "target {t} is {} but no --source-ip is; give one of its family",
                if t.is_ipv4() { "IPv4" } else { "IPv6" }
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn scenario(args: &[&str], sources: Vec<IpAddr>) -> Scenario {
        let mut argv = vec!["throng", "client"];
        argv.extend_from_slice(args);
        let crate::cli::Command::Client(a) = crate::cli::Cli::parse_from(argv).command else {
            panic!("not a client command")
        };
        let targets = resolve(&a.targets).unwrap();
        a.scenario(targets, false, sources).unwrap()
    }

    #[test]
    fn too_few_given_sources_warn_with_the_number_needed() {
        let two = vec!["127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap()];
        let sc = scenario(&["127.0.0.1:4242", "-c", "30000"], two);
        let w = per_pair_warning(&sc, 7_058, 28_232).expect("a warning");
        assert!(w.contains("15000 on each"), "{w}");
        assert!(w.contains("give 5 source addresses"), "{w}");
        // Five are enough.
        let five = (2..=6).map(|i| IpAddr::from([127, 0, 0, i])).collect();
        let sc = scenario(&["127.0.0.1:4242", "-c", "30000"], five);
        assert_eq!(per_pair_warning(&sc, 7_058, 28_232), None);
    }

    #[test]
    fn one_source_warns_past_the_knee_only() {
        let sc = scenario(&["127.0.0.1:4242", "-c", "7000"], Vec::new());
        assert_eq!(per_pair_warning(&sc, 7_058, 28_232), None);
        let sc = scenario(&["127.0.0.1:4242", "-c", "8000"], Vec::new());
        let w = per_pair_warning(&sc, 7_058, 28_232).expect("a warning");
        assert!(w.contains("from one source address"), "{w}");
        // Two destinations: each pair carries half.
        let sc = scenario(
            &["127.0.0.1:4242", "127.0.0.1:4243", "-c", "8000"],
            Vec::new(),
        );
        assert_eq!(per_pair_warning(&sc, 7_058, 28_232), None);
    }
}
