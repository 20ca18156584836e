//! `throng compare`: the same DNS workload over each transport (and each
//! recycling setting), one run after another, each a `throng client`
//! process with its own warm-up, then one table. The runs are ordinary
//! client runs: their JSON results are kept whole in --json.
//!
//! With `--queries N` and no `--rate` it is a keep-alive benchmark: per
//! transport, N queries one after another on one client (closed loop,
//! window 1, one connection), and the table gives queries per second and
//! the mean time per query of that sequence.

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::domain::{Mode, Transport};
pub use crate::outcome::compared::{Case, Comparison, Run};
use crate::outcome::RunResult;
use crate::report::json::write_atomic;
use crate::report::Views;
use crate::server::{self, ServerConfig, ServerTls};
use crate::sys::signals::Stop;
use crate::units::human_us;
use crate::usage::UsageError;

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// A comparison: plain data, built from `throng compare`'s flags by cli.
#[derive(Debug, Clone)]
pub struct CompareConfig {
    /// HOST:PORT; None: the embedded DNS server.
    pub target: Option<String>,
    pub transports: Vec<Transport>,
    /// Queries per run (without a rate: one after another).
    pub queries: Option<u64>,
    pub duration: Duration,
    pub rate: Option<f64>,
    pub closed_loop: bool,
    pub connections: u64,
    /// tcp-per-query's connections at once.
    pub concurrency: u64,
    /// The recycling settings of tcp and tls, as given (counts or none).
    pub max_queries_per_conn: Vec<String>,
    pub window: Option<u64>,
    pub qname: String,
    pub qtype: String,
    pub timeout: Duration,
    pub warmup: Duration,
    pub tls_port: u16,
    pub tls_ca: Option<PathBuf>,
    pub tls_insecure: bool,
    pub sni: Option<String>,
    pub json: Option<PathBuf>,
    pub views: Views,
}

/// The rows asked for, in order.
pub fn cases(a: &CompareConfig) -> Result<Vec<Case>> {
    let mut recycle = Vec::new();
    for v in &a.max_queries_per_conn {
        match v.trim() {
            "none" | "0" => recycle.push(None),
            n => recycle.push(Some(n.parse::<u64>().map_err(|_| {
                usage(format!(
                    "--max-queries-per-conn: '{n}' is not a count; give numbers or none, e.g. none,100,10"
                ))
            })?)),
        }
    }
    let mut out = Vec::new();
    for &t in &a.transports {
        match t {
            Transport::Tcp | Transport::Tls => out.extend(recycle.iter().map(|&m| Case {
                transport: t,
                max_queries_per_conn: m,
            })),
            _ => out.push(Case {
                transport: t,
                max_queries_per_conn: None,
            }),
        }
    }
    if out.is_empty() {
        return Err(usage(
            "--transports is empty; e.g. udp,tcp-per-query,tcp,tls",
        ));
    }
    Ok(out)
}

/// The embedded DNS server of a compare without a target: UDP and TCP on
/// one port, TLS on another, a self-signed certificate.
fn embedded() -> Result<(server::Running, server::Running, ServerTls)> {
    let cfg = |tls, udp| ServerConfig::embedded(Mode::Dns, udp, tls);
    let tls = ServerTls::load(None, None)?;
    let plain = server::start(&cfg(None, true))?;
    let secure = server::start(&cfg(Some(tls.clone()), false))?;
    Ok((plain, secure, tls))
}

/// N queries one after another (`--queries` without `--rate`), if asked.
fn sequential(a: &CompareConfig) -> Option<u64> {
    a.queries.filter(|_| a.rate.is_none())
}

/// The client command line of one run; `queries`: the run ends after that
/// many (the measured run of a sequential comparison).
#[allow(clippy::too_many_arguments)]
fn client_args(
    a: &CompareConfig,
    target: &str,
    tls_target: &str,
    tls_ca: Option<&Path>,
    case: &Case,
    seconds: f64,
    queries: Option<u64>,
    json: &Path,
) -> Vec<OsString> {
    let mut v: Vec<String> = vec!["client".into()];
    let per_query = case.transport == Transport::TcpPerQuery;
    v.push(if case.transport == Transport::Tls {
        tls_target.into()
    } else {
        target.into()
    });
    v.extend(["--proto".into(), "dns".into()]);
    v.extend(["--qname".into(), a.qname.clone()]);
    v.extend(["--qtype".into(), a.qtype.clone()]);
    v.extend(["--transport".into(), case.transport.name().into()]);
    // One after another: one client, one query at a time.
    let one = sequential(a).is_some();
    let (connections, concurrency) = if one {
        (1, 1)
    } else {
        (a.connections, a.concurrency)
    };
    if per_query {
        v.extend(["--concurrency".into(), concurrency.to_string()]);
    } else {
        v.extend(["-c".into(), connections.to_string()]);
    }
    v.extend(["-T".into(), format!("{seconds}s")]);
    match a.rate {
        Some(r) => v.extend(["-r".into(), r.to_string()]),
        None => v.push("--closed-loop".into()),
    }
    if one {
        v.extend(["--window".into(), "1".into()]);
    } else if let Some(w) = a.window {
        v.extend(["--window".into(), w.to_string()]);
    }
    if let Some(n) = queries {
        v.extend(["--queries".into(), n.to_string()]);
    }
    v.extend(["--timeout".into(), format!("{}s", a.timeout.as_secs_f64())]);
    if let Some(m) = case.max_queries_per_conn {
        v.extend(["--max-queries-per-conn".into(), m.to_string()]);
    }
    if case.transport == Transport::Tls {
        if let Some(ca) = tls_ca {
            v.extend(["--tls-ca".into(), ca.display().to_string()]);
        }
        if a.tls_insecure {
            v.push("--tls-insecure".into());
        }
        if let Some(s) = &a.sni {
            v.extend(["--sni".into(), s.clone()]);
        }
    }
    v.extend(["--processes".into(), "1".into(), "-q".into()]);
    let mut v: Vec<OsString> = v.into_iter().map(OsString::from).collect();
    v.push("--json".into());
    v.push(json.into());
    v
}

/// Runs one client process; its result and exit code.
fn run_client(args: &[OsString], json: &Path) -> Result<(i32, Option<RunResult>, String)> {
    let _ = std::fs::remove_file(json);
    let exe = std::env::current_exe().context("finding the throng executable")?;
    let out = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("starting a throng client run")?;
    let code = out.status.code().unwrap_or(130);
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let result = std::fs::read(json)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    Ok((code, result, stderr))
}

pub fn run(a: &CompareConfig) -> Result<ExitCode> {
    let cases = cases(a)?;
    let one_by_one = sequential(a);
    let seconds = seconds(a, one_by_one)?;
    let views = &a.views;
    views.check().map_err(usage)?;
    let stop = Stop::install()?;
    let mut t = Targets::new(a)?;
    announce(a, &cases, one_by_one, seconds, &t.target);
    let dir = std::env::temp_dir().join(format!("throng-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let json_of = |i: usize| dir.join(format!("run-{i}.json"));
    let mut runs = Vec::new();
    let mut failures = Vec::new();
    let (mut missing, mut unmeasured, mut interrupted) = (0, false, false);
    for (i, case) in cases.iter().enumerate() {
        if interrupted || stop.wait_until(Instant::now()) {
            interrupted = true;
            break;
        }
        let path = json_of(i);
        if !a.warmup.is_zero() {
            let args = t.client_args(a, case, a.warmup.as_secs_f64(), None, &path);
            let (code, _, stderr) = run_client(&args, &path)?;
            if code == 2 {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(usage(format!("{}: {stderr}", case.label())));
            }
        }
        let args = t.client_args(a, case, seconds, a.queries, &path);
        let (code, result, stderr) = run_client(&args, &path)?;
        // The Ctrl-C that reached the client reached this process too.
        interrupted |= code == crate::exit::INTERRUPTED as i32;
        match result {
            Some(result) => {
                let header = runs.is_empty();
                match one_by_one {
                    Some(n) => print_sequential_row(
                        header,
                        case,
                        n,
                        &result,
                        &mut crate::console::stdout(),
                    )?,
                    None => print_row(header, case, &result, &mut crate::console::stdout())?,
                }
                let run = Run {
                    case: case.clone(),
                    exit_code: code,
                    result,
                };
                failures.extend(failure(&run));
                unmeasured |= code == crate::exit::UNMEASURED as i32;
                runs.push(run);
            }
            None => {
                missing += 1;
                failures.push(format!(
                    "{}: no result (exit {code}): {stderr}",
                    case.label()
                ))
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    t.stop()?;
    for f in &failures {
        errln!("throng compare: {f}");
    }
    if runs.is_empty() && interrupted {
        errln!("throng compare: interrupted before a run had a result");
        return Ok(ExitCode::from(crate::exit::INTERRUPTED));
    }
    if runs.is_empty() {
        anyhow::bail!("no run produced a result");
    }
    print_notes(&runs, one_by_one, &mut crate::console::stdout())?;
    // Cases not run (interrupted) are missing too.
    missing += cases.len() - runs.len() - missing;
    let verdict = Comparison::judge(&runs, missing);
    let comparison = Comparison {
        target: t.target.clone(),
        runs,
        verdict: Some(verdict.clone()),
    };
    if let Some(p) = &a.json {
        write_atomic(p, &comparison)?;
    }
    // 130 when interrupted (what was measured is written and shown); 3
    // when a case could not be measured (no result, or its client said
    // so); 1 when a measured case failed.
    let code = if interrupted {
        ExitCode::from(crate::exit::INTERRUPTED)
    } else if verdict.pass {
        ExitCode::SUCCESS
    } else if missing > 0 || unmeasured {
        ExitCode::from(crate::exit::UNMEASURED)
    } else {
        ExitCode::from(crate::exit::FAILED)
    };
    // The transports side by side in one report.
    let drawn: Vec<crate::report::html::Run> = comparison
        .runs
        .iter()
        .map(|r| crate::report::html::Run {
            label: r.case.label(),
            result: &r.result,
        })
        .collect();
    Ok(views.finish(&drawn, code))
}

/// How long each measured run lasts at most; a usage error for flags that
/// do not go together or a --json whose directory is missing.
fn seconds(a: &CompareConfig, one_by_one: Option<u64>) -> Result<f64> {
    if one_by_one.is_some() && a.window.is_some() {
        return Err(usage(
            "--window does not apply to --queries without --rate: its queries go one after \
             another (window 1); give --rate R to run them at a rate over -c connections",
        ));
    }
    let seconds = match (a.queries, a.rate) {
        (Some(n), Some(r)) => n as f64 / r,
        // The run ends with its last answer; this only bounds a run whose
        // every query times out.
        (Some(n), None) => n as f64 * a.timeout.as_secs_f64(),
        _ => a.duration.as_secs_f64(),
    };
    if seconds <= 0.0 {
        return Err(usage("-T must be above 0, e.g. 10s"));
    }
    if let Some(p) = &a.json {
        if p.parent()
            .filter(|d| !d.as_os_str().is_empty())
            .is_some_and(|d| !d.is_dir())
        {
            return Err(usage(format!(
                "--json {}: the directory does not exist",
                p.display()
            )));
        }
    }
    Ok(seconds)
}

/// Where the runs go: the target given, or the embedded DNS server
/// started here (stopped by [`Targets::stop`]).
struct Targets {
    servers: Option<(server::Running, server::Running, ServerTls)>,
    target: String,
    tls_target: String,
    tls_ca: Option<PathBuf>,
}

impl Targets {
    fn new(a: &CompareConfig) -> Result<Targets> {
        Ok(match &a.target {
            Some(t) => {
                let host = t.rsplit_once(':').map_or(t.as_str(), |(h, _)| h);
                Targets {
                    servers: None,
                    target: t.clone(),
                    tls_target: format!("{host}:{}", a.tls_port),
                    tls_ca: a.tls_ca.clone(),
                }
            }
            None => {
                let (plain, secure, tls) = embedded()?;
                let t = plain.addrs[0].to_string();
                let s = secure.addrs[0].to_string();
                outln!(
                    "no target given: started the embedded DNS server on {t} (udp, tcp) and {s} (tls)"
                );
                let ca = a.tls_ca.clone().unwrap_or(tls.cert_file.clone());
                Targets {
                    servers: Some((plain, secure, tls)),
                    target: t,
                    tls_target: s,
                    tls_ca: Some(ca),
                }
            }
        })
    }

    /// The client command line of one run against these targets.
    fn client_args(
        &self,
        a: &CompareConfig,
        case: &Case,
        seconds: f64,
        queries: Option<u64>,
        json: &Path,
    ) -> Vec<OsString> {
        client_args(
            a,
            &self.target,
            &self.tls_target,
            self.tls_ca.as_deref(),
            case,
            seconds,
            queries,
            json,
        )
    }

    /// Stops the embedded server, if one was started.
    fn stop(&mut self) -> Result<()> {
        if let Some((plain, secure, tls)) = self.servers.take() {
            tls.cleanup();
            plain.stop()?;
            secure.stop()?;
        }
        Ok(())
    }
}

/// The first line: what runs, against what.
fn announce(
    a: &CompareConfig,
    cases: &[Case],
    one_by_one: Option<u64>,
    seconds: f64,
    target: &str,
) {
    match one_by_one {
        Some(n) => outln!(
            "comparing {} transport runs against {target}: {n} queries one after another on one \
             connection (tcp-per-query: a connection per query), each after a {} s warm-up",
            cases.len(),
            a.warmup.as_secs_f64(),
        ),
        None => {
            let load = match a.rate {
                Some(r) => format!("{r} queries/s"),
                None => "closed loop".into(),
            };
            outln!(
                "comparing {} transport runs against {target}: {load}, {seconds} s each after a {} s \
                 warm-up, {} connections (tcp-per-query: {} at once)",
                cases.len(),
                a.warmup.as_secs_f64(),
                a.connections,
                a.concurrency
            );
        }
    }
}

/// Why a run with a result does not pass the comparison, if it does not:
/// read from its verdict (whose side, the causes' codes) and its checks.
fn failure(run: &Run) -> Option<String> {
    let (case, code, result) = (&run.case, run.exit_code, &run.result);
    if result.queries.as_ref().is_none_or(|q| q.answered == 0) {
        return Some(format!("{}: no query was answered", case.label()));
    }
    if run.passed() {
        return None;
    }
    let mut why = vec![format!("exit {code}")];
    if let Some(v) = &result.verdict {
        let codes: Vec<&str> = v
            .causes
            .iter()
            .filter(|c| c.explains())
            .map(|c| c.code.as_str())
            .collect();
        why.push(format!("side: {}", v.side.as_str()));
        if !codes.is_empty() {
            why.push(format!("causes: {}", codes.join(", ")));
        }
    }
    let failed: Vec<&str> = result
        .checks
        .iter()
        .filter(|v| !v.pass)
        .map(|v| v.expr.as_str())
        .collect();
    if !failed.is_empty() {
        why.push(format!("check failed: {}", failed.join(", ")));
    }
    Some(format!(
        "{}: the run failed ({})",
        case.label(),
        why.join("; ")
    ))
}

const HEADER: &str = "transport                 queries/s      mean       p50       p99     p99.9    errors  connections";

/// One line of the table (the header first).
pub fn print_row(header: bool, case: &Case, r: &RunResult, out: &mut dyn Write) -> io::Result<()> {
    if header {
        writeln!(out, "{HEADER}")?;
    }
    let (qps, errors) = match &r.queries {
        Some(q) => (
            q.answered as f64 / q.seconds.max(1e-9),
            q.timed_out + q.errors.values().sum::<u64>(),
        ),
        None => (0.0, 0),
    };
    let lat = r.latency.as_ref().map(|l| &l.response_time_us);
    let cell = |v: Option<u64>| v.map_or("-".to_string(), human_us);
    writeln!(
        out,
        "{:<24}{:>10.0}{:>10}{:>10}{:>10}{:>10}{:>10}{:>13}",
        case.label(),
        qps,
        cell(lat.filter(|l| l.count > 0).map(|l| l.mean as u64)),
        cell(lat.filter(|l| l.count > 0).map(|l| l.p50)),
        cell(lat.filter(|l| l.count > 0).map(|l| l.p99)),
        cell(lat.filter(|l| l.count > 0).map(|l| l.p999)),
        errors,
        r.connections.established
    )?;
    out.flush()
}

/// One line of the table of N queries one after another (the header
/// first): answered of N, then queries/s and the mean time per query of
/// the whole sequence, as a keep-alive benchmark gives iterations/s and
/// the average time per iteration.
pub fn print_sequential_row(
    header: bool,
    case: &Case,
    n: u64,
    r: &RunResult,
    out: &mut dyn Write,
) -> io::Result<()> {
    // The header and the rows share their widths.
    let line = |cells: [&str; 9]| {
        format!(
            "{:<22}{:>11}{:>12}{:>12}{:>10}{:>10}{:>10}{:>10}{:>13}",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            cells[5],
            cells[6],
            cells[7],
            cells[8]
        )
    };
    if header {
        let h = [
            "transport",
            "queries",
            "queries/s",
            "mean",
            "p50",
            "p99",
            "p99.9",
            "errors",
            "connections",
        ];
        writeln!(out, "{}", line(h))?;
    }
    let (answered, seconds, errors) = match &r.queries {
        Some(q) => (
            q.answered,
            q.seconds,
            q.timed_out + q.errors.values().sum::<u64>(),
        ),
        None => (0, 0.0, 0),
    };
    let (qps, mean) = if answered > 0 && seconds > 0.0 {
        (
            format!("{:.0}", answered as f64 / seconds),
            human_seconds(seconds / answered as f64),
        )
    } else {
        ("-".to_string(), "-".to_string())
    };
    let lat = r
        .latency
        .as_ref()
        .map(|l| &l.response_time_us)
        .filter(|l| l.count > 0);
    let cell = |v: Option<u64>| v.map_or("-".to_string(), human_us);
    let row = [
        case.label(),
        format!("{answered}/{n}"),
        qps,
        mean,
        cell(lat.map(|l| l.p50)),
        cell(lat.map(|l| l.p99)),
        cell(lat.map(|l| l.p999)),
        errors.to_string(),
        r.connections.established.to_string(),
    ];
    writeln!(out, "{}", line(row.each_ref().map(String::as_str)))?;
    out.flush()
}

/// A short time with three significant figures: "48.7 µs", "1.25 ms".
fn human_seconds(s: f64) -> String {
    let (v, unit) = if s >= 1.0 {
        (s, "s")
    } else if s >= 1e-3 {
        (s * 1e3, "ms")
    } else {
        (s * 1e6, "µs")
    };
    let decimals = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.decimals$} {unit}")
}

/// What the table does not say: how to read it, failures by cause.
fn print_notes(runs: &[Run], one_by_one: Option<u64>, out: &mut dyn Write) -> io::Result<()> {
    match one_by_one {
        Some(n) => writeln!(
            out,
            "({n} queries one after another per transport: queries/s is answered / the run's \
             time, mean the run's time / answered; p50..p99.9: each query's response time; \
             errors: timeouts and errors; connections: established)"
        )?,
        None => writeln!(
            out,
            "(latency: response time from each query's intended send time; errors: timeouts and \
             errors; connections: established)"
        )?,
    }
    for r in runs {
        let failed: Vec<String> = r
            .result
            .connections
            .failed
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        if !failed.is_empty() {
            writeln!(
                out,
                "{}: connections failed: {}",
                r.case.label(),
                failed.join(", ")
            )?;
        }
        if let Some(e) = &r.result.connections.tls_error {
            writeln!(out, "{}: tls error: {e}", r.case.label())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> CompareConfig {
        let mut v = vec!["throng", "compare", "127.0.0.1:53"];
        v.extend(extra);
        match crate::cli::Cli::parse_from(v).command {
            crate::cli::Command::Compare(a) => a.config(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn recycling_multiplies_the_persistent_rows() {
        let a = args(&["--max-queries-per-conn", "none,100,10"]);
        let labels: Vec<String> = cases(&a).unwrap().iter().map(Case::label).collect();
        assert_eq!(
            labels,
            [
                "udp",
                "tcp-per-query",
                "tcp",
                "tcp (recycle 100)",
                "tcp (recycle 10)",
                "tls",
                "tls (recycle 100)",
                "tls (recycle 10)"
            ]
        );
        let e = cases(&args(&["--max-queries-per-conn", "ten"])).unwrap_err();
        assert!(e.to_string().contains("'ten' is not a count"), "{e}");
    }

    #[test]
    fn client_lines_carry_the_workload() {
        let a = args(&[
            "--transports",
            "tcp-per-query,tls",
            "-r",
            "500",
            "--tls-insecure",
        ]);
        let c = cases(&a).unwrap();
        let line = |c: &Case| {
            client_args(
                &a,
                "127.0.0.1:53",
                "127.0.0.1:853",
                None,
                c,
                2.0,
                None,
                Path::new("x.json"),
            )
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect::<Vec<_>>()
            .join(" ")
        };
        let pq = line(&c[0]);
        assert!(pq.contains("127.0.0.1:53 --proto dns"), "{pq}");
        assert!(
            pq.contains("--concurrency 100") && pq.contains("-r 500"),
            "{pq}"
        );
        let tls = line(&c[1]);
        assert!(
            tls.contains("127.0.0.1:853") && tls.contains("--tls-insecure"),
            "{tls}"
        );
        assert!(
            tls.contains("-c 10") && tls.ends_with("--json x.json"),
            "{tls}"
        );
    }

    #[test]
    fn queries_without_rate_go_one_after_another_on_one_connection() {
        let a = args(&["--queries", "5000", "--transports", "tcp-per-query,udp"]);
        let c = cases(&a).unwrap();
        let line = |c: &Case, q| {
            client_args(&a, "127.0.0.1:53", "", None, c, 9.0, q, Path::new("x.json"))
                .into_iter()
                .map(|s| s.into_string().unwrap())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let pq = line(&c[0], Some(5000));
        assert!(pq.contains("--concurrency 1 "), "{pq}");
        assert!(
            pq.contains("--closed-loop --window 1 --queries 5000"),
            "{pq}"
        );
        let udp = line(&c[1], Some(5000));
        assert!(
            udp.contains("-c 1 ") && udp.contains("--queries 5000"),
            "{udp}"
        );
        // The warm-up has the same shape and lasts its -T.
        let warm = line(&c[1], None);
        assert!(
            warm.contains("-c 1 ") && !warm.contains("--queries"),
            "{warm}"
        );
        // With a rate, --queries sets the run's length (QUERIES / RATE):
        // no run of queries one after another.
        let a = args(&["--queries", "500", "-r", "100"]);
        assert_eq!(sequential(&a), None);
    }

    #[test]
    fn human_seconds_keeps_three_figures() {
        assert_eq!(human_seconds(48.72e-6), "48.7 µs");
        assert_eq!(human_seconds(1.254e-3), "1.25 ms");
        assert_eq!(human_seconds(0.2), "200 ms");
        assert_eq!(human_seconds(2.0), "2.00 s");
    }
}
