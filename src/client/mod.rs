//! `throng client`: from its configuration (`config`: the whole scenario
//! and the run's options, built by [`crate::cli`]) to a finished, reported
//! run. Starts the embedded server when there is no target, plans source
//! addresses, runs the preflight checks and prints the plan, runs the
//! engine, prints the summary and writes the JSON. An impossible plan stops
//! here, before any connect. The checks are in `preflight`; a run in
//! several processes is in `processes`.

mod barrier;
mod config;
mod preflight;
mod processes;

use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use crate::child::{ChildLine, HostReport};
use crate::domain::{Mode, RunId, RunIdFrom, Transport};
use crate::exposition::Endpoint;
use crate::metrics::exported::RunCounters;
use crate::outcome::Outcome;
use crate::outcome::{Environment, RunResult, SliceOf};
use crate::report::json::write_atomic;
use crate::report::prometheus::client_registry;
use crate::report::{self, LiveView};
use crate::scenario::{self, Scenario};
use crate::server::{self, ServerConfig};
use crate::sys::limits::{self, FdLimit};
use crate::sys::signals::Stop;
use crate::sys::{capacity, sources};
use crate::usage::UsageError;
pub use config::{ClientCommand, ClientConfig, ServerKind};
pub use preflight::on_this_host;
use preflight::{check_problems, check_source_families, preflight, processes_needed, warnings};

/// Fds a client process needs besides its connections (epoll, wakers,
/// stdio, the embedded server's listener...).
const FD_OVERHEAD: u64 = 64;

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// The embedded server in processes of its own: `throng server` (elastic:
/// it grows with the connections it holds), for a client of several
/// processes or a `throng limit` with no target. Ended (SIGTERM) when
/// dropped.
pub struct ServerProcess {
    child: std::process::Child,
    pub addr: String,
}

impl ServerProcess {
    /// Starts it as `c` says (echo, or push at --every; UDP with
    /// --transport udp) and waits for its banner's address.
    pub fn start(exe: &std::path::Path, c: &ServerKind) -> Result<ServerProcess> {
        use std::io::BufRead;
        let mut cmd = std::process::Command::new(exe);
        cmd.args(["server", "--listen", "127.0.0.1:0"]);
        if let Some(every) = c.push_every {
            cmd.args(["--mode", "push", "--every"]);
            cmd.arg(format!("{}us", every.as_micros().max(1)));
        } else {
            cmd.args(["--mode", "echo"]);
        }
        match c.transport {
            Transport::Udp => {
                cmd.arg("--udp");
            }
            Transport::Tls => {
                return Err(usage(
                    "--transport tls with no target and more than one process: the embedded \
                     server's certificate is not shared across processes; start `throng server \
                     --tls` and give its address (with --tls-ca or --tls-insecure)",
                ))
            }
            _ => {}
        }
        // It ends with this process, however this one ends.
        // SAFETY: prctl in the child between fork and exec, async-signal
        // safe; it asks for SIGTERM when this process ends.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let mut child = cmd
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("starting the embedded server's process")?;
        let out = child
            .stdout
            .take()
            .context("the embedded server's output")?;
        let mut lines = io::BufReader::new(out).lines();
        let addr = loop {
            let Some(Ok(l)) = lines.next() else {
                let _ = child.kill();
                let _ = child.wait();
                anyhow::bail!("the embedded server ended before it listened");
            };
            if let Some(rest) = l.strip_prefix("listening on ") {
                break rest.split(' ').next().unwrap_or_default().to_string();
            }
        };
        // Its further lines are read and dropped: it never blocks on a
        // full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Ok(ServerProcess { child, addr })
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // SAFETY: a signal to our own child, by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// The embedded server: echo (WebSocket's for --proto websocket), or push
/// at the period --proto push expects (over WebSocket with --push-over).
fn embedded_config(sc: &crate::scenario::Scenario) -> Result<ServerConfig> {
    let tls = match sc.transport {
        Transport::Tls => Some(crate::server::ServerTls::load(None, None)?),
        _ => None,
    };
    let mode = match (&sc.push, &sc.websocket) {
        (Some(_), _) => Mode::Push,
        (None, Some(_)) => Mode::Websocket,
        (None, None) => Mode::Echo,
    };
    let mut cfg = ServerConfig::embedded(mode, sc.transport == Transport::Udp, tls);
    if let Some(p) = &sc.push {
        cfg.push.every_ns = ((p.every_s * 1e9) as u64).max(1);
        if sc.websocket.is_some() {
            cfg.push.over = crate::domain::PushOver::Websocket;
        }
    }
    Ok(cfg)
}

/// Refuses a target that is an IPv6 address without brackets (`::1:53`:
/// where the address ends and the port begins is a guess, and its Host
/// header would be wrong), with the bracketed form as the fix.
pub fn check_target_form(t: &str) -> Result<()> {
    if !t.starts_with('[') && t.matches(':').count() > 1 {
        let fix = match t.rsplit_once(':') {
            Some((host, port)) if port.parse::<u16>().is_ok() => format!("[{host}]:{port}"),
            _ => format!("[{t}]:PORT"),
        };
        return Err(usage(format!(
            "target '{t}' is an IPv6 address without brackets; give it as {fix} (the port after \
             the brackets)"
        )));
    }
    Ok(())
}

/// Resolves each HOST:PORT once.
pub fn resolve(targets: &[String]) -> Result<Vec<SocketAddr>> {
    targets
        .iter()
        .map(|t| {
            check_target_form(t)?;
            let mut addrs = t.to_socket_addrs().map_err(|e| {
                usage(format!(
                    "cannot resolve target '{t}': {e}; give HOST:PORT, e.g. 127.0.0.1:4242 or [::1]:53"
                ))
            })?;
            let a = addrs
                .next()
                .ok_or_else(|| usage(format!("target '{t}' resolved to no address")))?;
            if a.port() == 0 {
                // No server listens on port 0 (a bind to it picks a free
                // port): every connect would be refused.
                return Err(usage(format!(
                    "target '{t}' has port 0, which no server listens on; give the port the \
                     server printed when it bound (throng server -l ADDR:0 prints it)"
                )));
            }
            Ok(a)
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
pub fn run(cmd: ClientCommand) -> Result<ExitCode> {
    // Before any thread starts, in the parent and in every child.
    crate::sys::one_heap();
    let mut a = match cmd {
        ClientCommand::ChildPlan => return processes::run_child(crate::child::read_plan()?),
        ClientCommand::Run(a) => *a,
    };
    let stop = if a.child {
        Stop::install_child()?
    } else {
        Stop::install()?
    };
    if a.child {
        ChildLine::Pid(std::process::id()).print();
    }
    let fd = limits::raise_nofile()?;
    let env = Environment::read(unix_now());
    let probe_targets = a.whole.targets.clone();
    let mut whole = a.whole.clone();
    // Bound now: a busy address stops the run before any connection.
    let endpoint = a.metrics.map(Endpoint::bind).transpose()?;
    // A slice (a load host's share) runs in as many processes as its own
    // share needs, like a whole run.
    let share = a.segment.map_or_else(|| whole.clone(), |s| whole.slice(s));
    let nproc = processes_needed(a.processes, &share, &fd);
    // (A held step of `throng limit` is planned by the search.)
    let refusals = match a.child && !a.session {
        true => Vec::new(),
        false => capacity_problems(&a, &whole, &probe_targets, nproc),
    };
    if a.session && !a.force && !refusals.is_empty() {
        crate::cluster::host::report(HostReport::here(nproc, Vec::new(), refusals.clone()));
    }
    check_problems(a.force, refusals)?;
    let run = run_id(&a, &whole);
    // The slices meet at the barrier once each knows it can run; its
    // start is then this slice's --start-at (and its processes').
    if let (Some(dir), Some(seg), false) = (&a.start_barrier, a.segment, a.child) {
        match barrier::wait(dir, &run.id, seg, &stop)? {
            Some(at) => a.start_at = Some(at),
            None => return Ok(ExitCode::from(crate::exit::INTERRUPTED)),
        }
    }
    // A slice in several processes: they share out the slice as they
    // would a whole, and their merge is the slice's result.
    let mut of = None;
    if let (Some(seg), true) = (a.segment, nproc > 1) {
        let mut s = share;
        s.segment = None;
        of = Some((std::mem::replace(&mut whole, s), seg));
    }
    // More than one process and no target: the embedded server runs in
    // processes of its own (elastic, as `throng server`), and the client's
    // processes hold one end of each connection only.
    let mut nproc = nproc;
    let server_process = if nproc > 1 && a.no_target {
        let srv = server_apart(&a, &mut whole)?;
        nproc = processes_needed(a.processes, &whole, &fd).max(1);
        Some(srv)
    } else {
        None
    };
    let slices = match (of.is_some(), a.segment) {
        (false, Some(s)) => s.count,
        _ => nproc,
    };
    let (chosen, shortfall, why) = plan_sources(&a, &probe_targets, &whole, slices);
    check_source_families(&probe_targets, &chosen)?;
    whole.sources = chosen;
    let exported = serve_metrics(endpoint, a.child)?;
    if nproc > 1 {
        return processes::run_processes(
            &a,
            processes::Whole {
                whole: &whole,
                run: &run,
                of: of.as_ref().map(|(w, s)| (w, *s)),
            },
            nproc,
            &fd,
            &stop,
            (shortfall, &why),
            exported,
        );
    }
    let planned = Planned {
        whole,
        server_apart: server_process.is_some(),
        shortfall,
        why,
        run,
        exported,
        fd,
        env,
    };
    run_one(&a, planned, &stop)
}

/// The source addresses (--source-ip's, or as many as the connections per
/// target need in `slices` slices), the planner's advice on a shortfall,
/// and why, in words.
fn plan_sources(
    a: &ClientConfig,
    probe_targets: &[SocketAddr],
    whole: &Scenario,
    slices: u64,
) -> (Vec<IpAddr>, Option<String>, String) {
    if a.sources_given.is_empty() {
        let basis = sources::per_pair_basis();
        let p = sources::plan(
            probe_targets,
            whole.per_target(),
            (sources::fast_per_pair(), &basis),
            slices,
        );
        (p.sources, p.shortfall, p.why)
    } else {
        (a.sources_given.clone(), None, "--source-ip".into())
    }
}

/// Why this host cannot hold the run in `nproc` processes: what this
/// host holds is its slice of a segmented run, or the whole.
fn capacity_problems(
    a: &ClientConfig,
    whole: &Scenario,
    probe_targets: &[SocketAddr],
    nproc: u64,
) -> Vec<String> {
    let here = a
        .segment
        .map_or(whole.connections, |s| whole.slice(s).connections);
    let ends_here = if a.no_target || probe_targets.iter().all(on_this_host) {
        2
    } else {
        1
    };
    let need = capacity::Need {
        connections: here,
        ends_here,
        processes: nproc,
        ends_per_process: if a.no_target { 2 } else { 1 },
    };
    let host = capacity::Host::read(capacity::measure_if_needed(here * ends_here));
    capacity::refusals(&need, &host)
}

/// Starts the embedded server in processes of its own and makes it
/// `whole`'s target.
fn server_apart(a: &ClientConfig, whole: &mut Scenario) -> Result<ServerProcess> {
    let exe = std::env::current_exe().context("finding the throng executable")?;
    let srv = ServerProcess::start(&exe, &a.server)?;
    let addr: SocketAddr = srv.addr.parse().context("the embedded server's address")?;
    outln!(
        "no target given: started the embedded {} server on {addr} in processes of its own \
         (`throng server`: it grows with the connections)",
        if whole.push.is_some() { "push" } else { "echo" }
    );
    whole.targets = vec![addr];
    // (Its ends of the connections are its processes' fds, not these.)
    whole.embedded_server = false;
    Ok(srv)
}

/// Serves --metrics at `endpoint` (a child says where on stderr); the
/// figures the engine keeps up to date.
fn serve_metrics(
    endpoint: Option<Endpoint>,
    child: bool,
) -> Result<Option<Arc<Mutex<RunCounters>>>> {
    let Some(e) = endpoint else {
        return Ok(None);
    };
    let figures = Arc::new(Mutex::new(RunCounters::default()));
    let banner = e.banner();
    e.serve(client_registry(figures.clone()))?;
    if child {
        errln!("{banner}");
    } else {
        outln!("{banner}");
    }
    Ok(Some(figures))
}

/// A run in this one process, as planned.
struct Planned {
    whole: Scenario,
    /// The embedded server runs in processes of its own.
    server_apart: bool,
    /// The source planner's advice, and its reasons.
    shortfall: Option<String>,
    why: String,
    run: RunId,
    exported: Option<Arc<Mutex<RunCounters>>>,
    fd: FdLimit,
    env: Environment,
}

/// Runs the scenario in this process: the embedded server if there is no
/// target, the plan's paragraph, the run, then the summary, the checks,
/// the JSON and the views (a child gives its result to its parent
/// instead).
fn run_one(a: &ClientConfig, p: Planned, stop: &Stop) -> Result<ExitCode> {
    let mut whole = p.whole;
    let embedded = if a.no_target && !p.server_apart {
        Some(start_embedded(&mut whole, a.child)?)
    } else {
        None
    };
    let ran = match a.segment {
        Some(seg) => whole.slice(seg),
        None => whole.clone(),
    };
    let problems = preflight(&ran, &p.fd, p.shortfall.as_deref());
    let plan = plan_lines(&ran, &whole, &p.why, p.shortfall);
    if a.session {
        crate::cluster::host::report(HostReport::here(1, plan, problems.clone()));
    } else if !a.child {
        print_lines(&plan)?;
    }
    check_problems(a.force, problems)?;
    let here = Here {
        run: p.run,
        rtt_log: a.rtt_log.clone(),
        start_at: a.start_at,
        control: a.control,
        child: a.child,
        session: a.session,
        quiet: a.quiet,
        exported: p.exported,
    };
    // A child's parent watches; the embedded server is this process.
    let observer = (!a.child).then(|| {
        crate::evidence::Observer::start(watched_target(&whole).filter(|_| embedded.is_none()))
    });
    let Some((sc, mut outcome, mut result)) = run_here(&whole, ran, here, stop, p.env)? else {
        return Ok(ExitCode::from(130));
    };
    if let Some(o) = observer {
        let answered = result.queries.as_ref().map_or(0, |q| q.answered);
        outcome.observed = o.finish(answered);
        result.client = outcome.observed.client.clone();
        result.server_seen = outcome.observed.server.clone();
    }
    if let Some((srv, tls)) = embedded {
        if let Some(t) = tls {
            t.cleanup();
        }
        srv.stop()?;
    }
    if a.child {
        return child_end(&result, a.json.as_deref());
    }
    report::conclude(&sc, &outcome, &a.checks, &mut result, sc.max_failures)?;
    let verdict = result.verdict.clone().expect("concluded");
    let mut out = crate::console::stdout();
    report::summary(&sc, &outcome, &verdict, &mut out)?;
    report::check::print(&a.checks, &result, &mut out)?;
    out.flush()?;
    drop(out);
    if let Some(path) = &a.json {
        write_atomic(path, &result)?;
    }
    let code = report::check::exit_code(&result, sc.max_failures, result.interrupted);
    let run = report::html::Run {
        label: report::html::label_of(&result),
        result: &result,
    };
    Ok(a.views.finish(&[run], code))
}

/// Starts the embedded server in this process and makes it `whole`'s
/// target (and, with TLS, the certificate to trust).
fn start_embedded(
    whole: &mut Scenario,
    child: bool,
) -> Result<(server::Running, Option<server::ServerTls>)> {
    let cfg = embedded_config(whole)?;
    let srv = server::start(&cfg)?;
    if !child {
        let mode = cfg.mode.name();
        outln!(
            "no target given: started the embedded {mode} server on {} (the code of `throng server --mode {mode}`)",
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
    Ok((srv, cfg.tls))
}

/// The plan's paragraph: what runs here (`ran`, a slice of `whole` or the
/// whole), from which sources, and the warnings.
fn plan_lines(
    ran: &Scenario,
    whole: &Scenario,
    why: &str,
    shortfall: Option<String>,
) -> Vec<String> {
    let mut out = vec![report::plan_paragraph(ran, sources::ports_per_source())];
    if let Some(seg) = ran.segment {
        out.push(format!(
            "  segment {}/{} of {} connections",
            seg.index, seg.count, whole.connections
        ));
    }
    if !ran.sources.is_empty() {
        out.push(format!("  sources: {why}"));
    }
    for w in warnings(ran, shortfall) {
        out.push(format!("  warning: {w}"));
    }
    out
}

/// Prints lines on stdout.
fn print_lines(lines: &[String]) -> Result<()> {
    let mut out = crate::console::stdout();
    for l in lines {
        writeln!(out, "{l}")?;
    }
    out.flush()?;
    Ok(())
}

/// The target whose server the client watches when it is on this host
/// (the first: one process seen is enough to name a cause).
fn watched_target(sc: &Scenario) -> Option<SocketAddr> {
    sc.targets
        .first()
        .copied()
        .filter(|t| t.port() != 0 && on_this_host(t))
}

/// The run this command's result is of: --run-id's; for a slice started
/// by hand, one every slice of the command line derives alike; else a new
/// one (one process, or the parent of --processes, which gives it to its
/// children).
fn run_id(a: &ClientConfig, whole: &Scenario) -> RunId {
    match (&a.run_id, a.segment) {
        (Some(id), _) => RunId {
            id: id.clone(),
            from: RunIdFrom::Flag,
        },
        (None, Some(_)) => whole.derived_run_id(a.start_at),
        (None, None) => RunId::generated(),
    }
}

/// How this process runs its slice.
struct Here {
    /// The run it is a slice of.
    run: RunId,
    /// --rtt-log: the per-query CSV file.
    rtt_log: Option<PathBuf>,
    /// --start-at: when to start (Unix seconds).
    start_at: Option<f64>,
    /// --control: commands on stdin.
    control: bool,
    /// A child of --processes or of `throng cluster`: JSON lines for the
    /// parent instead of a live view.
    child: bool,
    /// A load host of `throng cluster`: it starts on the controller's `go`.
    session: bool,
    quiet: bool,
    /// The figures of a --metrics endpoint (this process's, or its
    /// parent's), kept up to date by the engine.
    exported: Option<Arc<Mutex<RunCounters>>>,
}

/// Runs `ran`, the part of `whole` this process runs: opens the RTT log,
/// waits for the start, runs the engine. The scenario as run, its outcome
/// and its result; None when a signal came before the start.
fn run_here(
    whole: &Scenario,
    ran: Scenario,
    here: Here,
    stop: &Stop,
    env: Environment,
) -> Result<Option<(Arc<Scenario>, Outcome, RunResult)>> {
    let rtt_log = match &here.rtt_log {
        Some(p) => Some(
            std::fs::File::create(p)
                .map_err(|e| usage(format!("--rtt-log {}: {e}", p.display())))?,
        ),
        None => None,
    };
    let started = match here.session {
        true => crate::cluster::host::wait_go(stop)?,
        false => wait_start_at(here.start_at, stop)?,
    };
    if !started {
        return Ok(None);
    }
    let sc = Arc::new(ran);
    if sc.end == scenario::End::Pause {
        stop.on_enter()?;
    }
    if here.control {
        stop.on_control()?;
    }
    let mut live = if here.child {
        LiveView::Child(here.exported.clone())
    } else {
        LiveView::new(here.quiet, sc.connections)
    };
    let outcome = crate::engine::run(
        sc.clone(),
        stop,
        &mut live,
        rtt_log,
        here.exported.as_deref(),
    )?;
    let mut result = RunResult::new(whole, &sc, env, &outcome);
    result.slice = outcome.wall.map(|w| SliceOf::new(&here.run, &sc, w));
    Ok(Some((sc, outcome, result)))
}

/// The end of a child's run: its result to `json` and as its last line.
/// The parent checks the merged result and gives the verdict.
fn child_end(result: &RunResult, json: Option<&Path>) -> Result<ExitCode> {
    if let Some(p) = json {
        write_atomic(p, result)?;
    }
    ChildLine::Result(Box::new(serde_json::to_value(result)?)).print();
    Ok(ExitCode::from(if result.interrupted { 130 } else { 0 }))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
