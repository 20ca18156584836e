//! `throng compare`: the same DNS workload over each transport (and each
//! recycling setting), one run after another, each a `throng client`
//! process with its own warm-up, then one table. The runs are ordinary
//! client runs: their JSON results are kept whole in --json.

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::cli::{CompareArgs, Mode, Transport};
use crate::metrics::human_us;
use crate::report::json::{write_atomic, RunResult};
use crate::server::{self, ServerConfig, ServerTls};
use crate::sys::signals::Stop;
use crate::UsageError;

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

/// One row: a transport, and for tcp and tls the recycling setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Case {
    pub transport: Transport,
    pub max_queries_per_conn: Option<u64>,
}

impl Case {
    pub fn label(&self) -> String {
        match self.max_queries_per_conn {
            Some(n) => format!("{} (recycle {n})", self.transport.name()),
            None => self.transport.name().to_string(),
        }
    }
}

/// What --json holds.
#[derive(Debug, Serialize, Deserialize)]
pub struct Comparison {
    pub target: String,
    pub runs: Vec<Run>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Run {
    #[serde(flatten)]
    pub case: Case,
    /// The client's exit code (0: no connection failures).
    pub exit_code: i32,
    pub result: RunResult,
}

/// The rows asked for, in order.
pub fn cases(a: &CompareArgs) -> Result<Vec<Case>> {
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

/// The client command line of one run.
fn client_args(
    a: &CompareArgs,
    target: &str,
    tls_target: &str,
    tls_ca: Option<&Path>,
    case: &Case,
    seconds: f64,
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
    if per_query {
        v.extend(["--concurrency".into(), a.concurrency.to_string()]);
    } else {
        v.extend(["-c".into(), a.connections.to_string()]);
    }
    v.extend(["-T".into(), format!("{seconds}s")]);
    match a.rate {
        Some(r) => v.extend(["-r".into(), r.to_string()]),
        None => v.push("--closed-loop".into()),
    }
    if let Some(w) = a.window {
        v.extend(["--window".into(), w.to_string()]);
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

pub fn run(a: &CompareArgs) -> Result<ExitCode> {
    let cases = cases(a)?;
    if a.queries.is_some() && a.rate.is_none() {
        return Err(usage(
            "--queries needs --rate (the run lasts QUERIES / RATE); with --closed-loop give -T",
        ));
    }
    let seconds = match (a.queries, a.rate) {
        (Some(n), Some(r)) => n as f64 / r,
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
    let stop = Stop::install()?;
    let (servers, target, tls_target, tls_ca) = match &a.target {
        Some(t) => {
            let host = t.rsplit_once(':').map_or(t.as_str(), |(h, _)| h);
            (
                None,
                t.clone(),
                format!("{host}:{}", a.tls_port),
                a.tls_ca.clone(),
            )
        }
        None => {
            let (plain, secure, tls) = embedded()?;
            let t = plain.addrs[0].to_string();
            let s = secure.addrs[0].to_string();
            println!(
                "no target given: started the embedded DNS server on {t} (udp, tcp) and {s} (tls)"
            );
            let ca = a.tls_ca.clone().unwrap_or(tls.cert_file.clone());
            (Some((plain, secure, tls)), t, s, Some(ca))
        }
    };
    let load = match a.rate {
        Some(r) => format!("{r} queries/s"),
        None => "closed loop".into(),
    };
    println!(
        "comparing {} transport runs against {target}: {load}, {seconds} s each after a {} s warm-up, \
         {} connections (tcp-per-query: {} at once)",
        cases.len(),
        a.warmup.as_secs_f64(),
        a.connections,
        a.concurrency
    );
    let dir = std::env::temp_dir().join(format!("throng-compare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let json_of = |i: usize| dir.join(format!("run-{i}.json"));
    let mut runs = Vec::new();
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        if stop.wait_until(Instant::now()) {
            break;
        }
        let path = json_of(i);
        if !a.warmup.is_zero() {
            let args = client_args(
                a,
                &target,
                &tls_target,
                tls_ca.as_deref(),
                case,
                a.warmup.as_secs_f64(),
                &path,
            );
            let (code, _, stderr) = run_client(&args, &path)?;
            if code == 2 {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(usage(format!("{}: {stderr}", case.label())));
            }
        }
        let args = client_args(
            a,
            &target,
            &tls_target,
            tls_ca.as_deref(),
            case,
            seconds,
            &path,
        );
        let (code, result, stderr) = run_client(&args, &path)?;
        match result {
            Some(result) => {
                print_row(runs.is_empty(), case, &result, &mut io::stdout())?;
                if !result.queries.as_ref().is_some_and(|q| q.answered > 0) {
                    failures.push(format!("{}: no query was answered", case.label()));
                }
                runs.push(Run {
                    case: case.clone(),
                    exit_code: code,
                    result,
                });
            }
            None => failures.push(format!(
                "{}: no result (exit {code}): {stderr}",
                case.label()
            )),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if let Some((plain, secure, tls)) = servers {
        tls.cleanup();
        plain.stop()?;
        secure.stop()?;
    }
    for f in &failures {
        eprintln!("throng compare: {f}");
    }
    if runs.is_empty() {
        anyhow::bail!("no run produced a result");
    }
    print_notes(&runs, &mut io::stdout())?;
    if let Some(p) = &a.json {
        write_atomic(
            p,
            &Comparison {
                target: target.clone(),
                runs,
            },
        )?;
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
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

/// What the table does not say: failures by cause.
fn print_notes(runs: &[Run], out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "(latency: response time from each query's intended send time; errors: timeouts and \
         errors; connections: established)"
    )?;
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

    fn args(extra: &[&str]) -> CompareArgs {
        let mut v = vec!["throng", "compare", "127.0.0.1:53"];
        v.extend(extra);
        match crate::cli::Cli::parse_from(v).command {
            crate::cli::Command::Compare(a) => a,
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
}
