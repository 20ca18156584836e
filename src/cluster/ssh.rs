//! `throng cluster`: the scenario sliced over load hosts through the
//! system's OpenSSH client (its keys, agent, jump hosts and known_hosts as
//! the user set them up). Each host runs `throng client ... --segment K/N
//! --start-at T` and streams JSON lines back over the ssh session; no port is
//! opened and no daemon runs.

use std::process::{Command, ExitCode};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::child::{sum_samples, ChildLine, Children, Silence};
use crate::cli::ClusterArgs;
use crate::engine::Live;
use crate::outcome::RunResult;
use crate::outcome::Sample;
use crate::report::LiveView;
use crate::sys::signals::{Reason, Stop};
use crate::usage::UsageError;
use anyhow::{Context, Result};

/// One load host: what ssh is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub dest: String,
    pub port: Option<u16>,
}

impl Host {
    pub fn name(&self) -> String {
        match self.port {
            Some(p) => format!("{}:{p}", self.dest),
            None => self.dest.clone(),
        }
    }
}

/// Reads `user@host[:port]` lines; `#` comments and blank lines skipped.
pub fn parse_hosts(text: &str) -> Result<Vec<Host>, String> {
    let mut hosts = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (dest, port) = match line.rsplit_once(':') {
            Some((d, p)) if !d.contains(':') || d.ends_with(']') => {
                let port = p
                    .parse()
                    .map_err(|_| format!("line {}: '{line}' has a bad port", n + 1))?;
                (
                    d.trim_start_matches('[').trim_end_matches(']').to_string(),
                    Some(port),
                )
            }
            _ => (line.to_string(), None),
        };
        if dest.is_empty() || dest.contains(char::is_whitespace) {
            return Err(format!("line {}: '{line}' is not user@host[:port]", n + 1));
        }
        hosts.push(Host { dest, port });
    }
    if hosts.is_empty() {
        return Err("no hosts in the file".into());
    }
    Ok(hosts)
}

/// Quotes one word for the remote shell.
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@,+%".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn ssh(a: &ClusterArgs, h: &Host) -> Command {
    let mut c = Command::new("ssh");
    c.arg("-o").arg("BatchMode=yes");
    for o in &a.ssh_option {
        c.arg("-o").arg(o);
    }
    if let Some(p) = h.port {
        c.arg("-p").arg(p.to_string());
    }
    c.arg(&h.dest).arg("--");
    c
}

/// Runs `throng cluster`.
pub fn run(a: &ClusterArgs) -> Result<ExitCode> {
    let text = std::fs::read_to_string(&a.hosts)
        .map_err(|e| UsageError(format!("--hosts {}: {e}", a.hosts.display())))?;
    let hosts = parse_hosts(&text)
        .map_err(|e| UsageError(format!("--hosts {}: {e}", a.hosts.display())))?;
    // The client arguments must parse here as they will there.
    let client = crate::cli::client_args(&a.client_args)
        .map_err(|e| UsageError(format!("the client arguments after --: {e}")))?;
    for (set, flag) in [
        (client.segment.is_some(), "--segment"),
        (client.start_at.is_some(), "--start-at"),
        (client.json.is_some(), "--json"),
        (client.views.html.is_some(), "--html"),
        (client.views.hgrm.is_some(), "--hgrm"),
        (client.views.server_stats.is_some(), "--server-stats"),
        (client.control.is_some(), "--control"),
        (client.pause, "--pause"),
    ] {
        if set {
            return Err(UsageError(format!(
                "{flag} is throng cluster's to set (each host gets its own); remove it from the client arguments"
            ))
            .into());
        }
    }
    if client.targets.is_empty() {
        return Err(UsageError(
            "the client arguments need a target HOST:PORT: the embedded server would be on each load host".into(),
        )
        .into());
    }
    let views = a.views.views();
    views.check().map_err(UsageError)?;
    // Checks run on the merged result: cluster's own, else the client's.
    let given = if a.check.is_empty() {
        &client.check
    } else {
        &a.check
    };
    let has_queries = client.traffic()?.is_some();
    let checks = crate::report::check::parse_all(
        given,
        has_queries,
        client.proto == crate::domain::Proto::Push,
        client.verify && !client.no_verify,
        client.connections_schedule.is_some(),
    )
    .map_err(UsageError)?;
    let stop = Stop::install()?;
    let n = hosts.len() as u64;
    let mut binary = a.binary.clone();
    if a.copy_binary {
        let exe = std::env::current_exe()?;
        binary = format!("/tmp/throng-{}", std::process::id());
        for h in &hosts {
            let status = ssh(a, h)
                .arg(format!("cat > {binary} && chmod +x {binary}"))
                .stdin(std::fs::File::open(&exe)?)
                .status()
                .with_context(|| format!("copying throng to {}", h.name()))?;
            if !status.success() {
                anyhow::bail!("copying throng to {} failed ({status})", h.name());
            }
        }
    }
    // After the copies, which can take a while: every host gets --start-in
    // to connect over ssh and be ready.
    let start_at =
        SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64() + a.start_in.as_secs_f64();
    // One run id for every host: the user's (--run-id in the client
    // arguments, passed on as it is), else a new one.
    let run_id = match &client.run_id {
        Some(_) => None,
        None => Some(crate::domain::RunId::generated().id),
    };
    let cmds: Vec<(String, Command)> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let mut words = vec![binary.clone(), "client".into()];
            words.extend(a.client_args.iter().cloned());
            words.extend([
                "--segment".into(),
                format!("{}/{n}", i + 1),
                "--start-at".into(),
                format!("{start_at:.6}"),
                "--processes".into(),
                "1".into(),
                "--child".into(),
            ]);
            if let Some(id) = &run_id {
                words.extend(["--run-id".into(), id.clone()]);
            }
            let remote: Vec<String> = words.iter().map(|w| shell_quote(w)).collect();
            let mut c = ssh(a, h);
            c.arg(remote.join(" "));
            (h.name(), c)
        })
        .collect();
    let mut children = Children::spawn_commands(cmds, &stop, true)?;
    // A host prints a second a second once its run starts; one silent
    // past its deadline's margin after that is frozen or cut off, and is
    // ended here (its ssh, which ends the remote run when the pipe closes).
    let drain = client.traffic()?.map_or(0.0, |t| t.drain_s);
    let share = client.connections.div_ceil(hosts.len() as u64);
    let mut silence = Silence::new(hosts.len(), Silence::limit(drain, share));
    let mut killed: Vec<Option<String>> = vec![None; hosts.len()];
    let mut live = LiveView::new(a.quiet, client.connections);
    let mut latest: Vec<Option<Sample>> = vec![None; hosts.len()];
    let mut pids: Vec<Option<u32>> = vec![None; hosts.len()];
    let mut results: Vec<Option<RunResult>> = vec![None; hosts.len()];
    let mut done = vec![false; hosts.len()];
    let mut shown = 0;
    let mut interrupted = false;
    while done.iter().any(|d| !d) {
        let reason = stop.wait_reason(silence.next());
        for (i, secs) in silence.overdue() {
            children.kill(i);
            killed[i] = Some(format!(
                "fell silent for {secs:.0} s (frozen, unreachable, or stuck past its deadline) \
                 and its ssh was killed: its share is missing"
            ));
        }
        if let Some(Reason::ChildLine(i, line)) = &reason {
            if line.starts_with("{\"sample\"") {
                silence.heard(*i);
            }
        }
        match reason {
            Some(Reason::Signal) => {
                interrupted = true;
                for (i, h) in hosts.iter().enumerate() {
                    if let (Some(pid), false) = (pids[i], done[i]) {
                        let _ = ssh(a, h).arg(format!("kill -INT {pid}")).status();
                    }
                }
            }
            Some(Reason::ChildExit(i)) => {
                done[i] = true;
                silence.gone(i);
            }
            Some(Reason::ChildLine(i, line)) => match serde_json::from_str::<ChildLine>(&line) {
                Ok(ChildLine::Pid(p)) => pids[i] = Some(p),
                Ok(ChildLine::Result(r)) => results[i] = serde_json::from_value(*r).ok(),
                Ok(ChildLine::Sample(s)) => {
                    let t = s.t;
                    latest[i] = Some(*s);
                    let ready = (0..hosts.len())
                        .all(|j| done[j] || latest[j].as_ref().is_some_and(|x| x.t >= t));
                    if t > shown && ready {
                        shown = t;
                        if !a.quiet {
                            for (j, h) in hosts.iter().enumerate() {
                                if let Some(x) = &latest[j] {
                                    live.note(&format!(
                                        "      {:<24} open {}  established {}  failed {}{}",
                                        h.name(),
                                        x.connections,
                                        x.established,
                                        x.failed,
                                        x.answered
                                            .map_or(String::new(), |q| format!("  answered {q}"))
                                    ));
                                }
                            }
                        }
                        live.second(&sum_samples(&latest, t), client.connections);
                        crate::sys::release_free_memory();
                    }
                }
                _ => {}
            },
            _ => {}
        }
    }
    live.finish();
    let statuses = children.wait();
    if a.copy_binary {
        for h in &hosts {
            let _ = ssh(a, h).arg(format!("rm -f {binary}")).status();
        }
    }
    let mut got = Vec::new();
    let mut names = Vec::new();
    let mut missing = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Some(r) => {
                got.push(r);
                names.push(hosts[i].name());
            }
            None => {
                let why = match &statuses[i] {
                    _ if killed[i].is_some() => killed[i].take().unwrap_or_default(),
                    Ok(255) => format!(
                        "ssh failed (unreachable or refused): {}",
                        children.last_error(i)
                    ),
                    Ok(code) => format!("exited with code {code}: {}", children.last_error(i)),
                    Err(e) => e.clone(),
                };
                missing.push(format!("host {}: {why}", hosts[i].name()));
            }
        }
    }
    super::merge::finish(
        super::merge::Slices {
            results: got,
            names,
            missing,
            interrupted,
            ended_as_planned: false,
            observed: None,
        },
        None,
        a.json.as_deref(),
        &views,
        "hosts",
        client.max_failures,
        &checks,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_file() {
        let h = parse_hosts(
            "# load hosts\nroot@198.18.0.2\nload@198.18.0.3:2222  # second\n\n[fd00::3]:22\n",
        )
        .unwrap();
        assert_eq!(h.len(), 3);
        assert_eq!(
            h[1],
            Host {
                dest: "load@198.18.0.3".into(),
                port: Some(2222)
            }
        );
        assert_eq!(h[2].dest, "fd00::3");
        assert!(parse_hosts("# nothing\n").is_err());
        assert!(parse_hosts("a b\n").unwrap_err().contains("line 1"));
        assert!(parse_hosts("h:notaport\n")
            .unwrap_err()
            .contains("bad port"));
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("127.0.0.1:53"), "127.0.0.1:53");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote("{rand}.x"), "'{rand}.x'");
    }
}
