//! `throng cluster`: the scenario sliced over load hosts through the
//! system's OpenSSH client (its keys, agent, jump hosts and known_hosts as
//! the user set them up). Each host runs `throng client ... --segment K/N
//! --child` over one ssh session that carries everything: the host's
//! report and clock ([`super::start`]), `go` and `stop` on its stdin
//! ([`super::host`]), its seconds and result as JSON lines on its stdout.
//! No port is opened and no daemon runs.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use crate::child::{sum_samples, ChildLine, Children, Silence};
use crate::engine::Live;
use crate::outcome::{RunResult, Sample};
use crate::report::check::Check;
use crate::report::{LiveView, Views};
use crate::sys::signals::{Reason, Stop};
use anyhow::Result;

use crate::usage::UsageError;

/// One load host: what ssh is given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub dest: String,
    pub port: Option<u16>,
}

impl Host {
    /// As a hosts file names it: `user@host[:port]`, an IPv6 address in
    /// brackets when a port follows.
    pub fn name(&self) -> String {
        match self.port {
            Some(p) if self.dest.contains(':') => match self.dest.rsplit_once('@') {
                Some((user, addr)) => format!("{user}@[{addr}]:{p}"),
                None => format!("[{}]:{p}", self.dest),
            },
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
                (d.replace(['[', ']'], ""), Some(port))
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
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@,+%".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// ssh to host `h` with the run's options (and its shared connection, if
/// any), the remote command to follow.
pub fn ssh(a: &ClusterConfig, h: &Host, mux: Option<&Mux>) -> Command {
    let mut c = Command::new("ssh");
    c.arg("-o").arg("BatchMode=yes");
    // (The user's options first: ssh takes an option's first value.)
    for o in &a.ssh_options {
        c.arg("-o").arg(o);
    }
    if let Some(m) = mux {
        c.args(["-o", "ControlMaster=auto", "-o", "ControlPersist=120", "-o"]);
        c.arg(m.path());
    }
    if let Some(p) = h.port {
        c.arg("-p").arg(p.to_string());
    }
    c.arg(&h.dest).arg("--");
    c
}

/// One ssh connection per host shared by the sessions of one run (the
/// copy's, then the run's: one handshake, not two), its socket in a
/// directory of this process; the connections are ended and the
/// directory removed on drop.
pub struct Mux {
    dir: PathBuf,
    hosts: Vec<Host>,
    ssh_options: Vec<String>,
}

impl Mux {
    fn new(a: &ClusterConfig) -> Result<Mux> {
        let dir = std::env::temp_dir().join(format!("throng-ssh-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        Ok(Mux {
            dir,
            hosts: a.hosts.clone(),
            ssh_options: a.ssh_options.clone(),
        })
    }

    /// The ControlPath option (`%C`: a hash of the host, port and user).
    fn path(&self) -> String {
        format!("ControlPath={}/%C", self.dir.display())
    }
}

impl Drop for Mux {
    fn drop(&mut self) {
        for h in &self.hosts {
            let mut c = Command::new("ssh");
            c.args(["-O", "exit", "-o"]).arg(self.path());
            for o in &self.ssh_options {
                c.arg("-o").arg(o);
            }
            if let Some(p) = h.port {
                c.arg("-p").arg(p.to_string());
            }
            let _ = c
                .arg(&h.dest)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A cluster run: plain data, built from the flags by cli (which reads the
/// hosts file and checks the client arguments).
#[derive(Debug)]
pub struct ClusterConfig {
    pub hosts: Vec<Host>,
    /// Passed to ssh as `-o OPTION` each.
    pub ssh_options: Vec<String>,
    /// throng on the load hosts.
    pub binary: String,
    /// Copy this throng binary to each host first.
    pub copy_binary: bool,
    /// Where the copy goes on each host (None: its user's cache directory).
    pub remote_dir: Option<String>,
    /// How long the hosts have to connect and report ready.
    pub start_in: Duration,
    /// The largest clock offset of a host against this one accepted.
    pub max_clock_offset: Duration,
    /// Where the merged result goes.
    pub json: Option<PathBuf>,
    pub views: Views,
    /// No live view.
    pub quiet: bool,
    /// The checks the merged result is judged by.
    pub checks: Vec<Check>,
    /// The `throng client` arguments every host runs, as given.
    pub client_args: Vec<String>,
    /// The client arguments' connections (all hosts together).
    pub connections: u64,
    /// The client arguments' drain after the last query (0: no queries).
    pub drain_s: f64,
    /// The client arguments' --max-failures.
    pub max_failures: u64,
    /// The client arguments give --run-id (passed on as it is).
    pub run_id_given: bool,
}

/// Runs `throng cluster`: the binary copied (--copy-binary), every host's
/// session opened, the hosts' reports and clocks gathered, all released
/// together, followed, stopped together, and merged.
pub fn run(a: &ClusterConfig) -> Result<ExitCode> {
    let stop = Stop::install()?;
    // The copy's connection to each host serves its run too.
    let mux = a.copy_binary.then(|| Mux::new(a)).transpose()?;
    let binaries = match a.copy_binary {
        true => {
            let local = super::copy::Local::prepare()?;
            outln!(
                "copying throng ({:.1} MB, sha256 {}) to {} hosts",
                local.bytes as f64 / 1e6,
                &local.sha256[..16],
                a.hosts.len()
            );
            super::copy::copy_all(a, &local, mux.as_ref())?
        }
        false => vec![a.binary.clone(); a.hosts.len()],
    };
    let mut children =
        Children::spawn_commands(commands(a, &binaries, mux.as_ref()), &stop, true, true)?;
    let mut offsets = Vec::new();
    let refused = match super::start::start(a, &stop, &mut children) {
        super::start::Start::Go(o) => {
            offsets = o;
            None
        }
        super::start::Start::Refused(why) => Some(Some(why)),
        super::start::Start::Interrupted => Some(None),
    };
    if let Some(why) = refused {
        // Nothing has started: an ssh still connecting (an unreachable
        // host) is not waited for, and a host whose session ends stops.
        for i in 0..a.hosts.len() {
            children.kill(i);
        }
        children.wait();
        return match why {
            Some(why) => {
                Err(UsageError(format!("the run is refused before any load:\n  {why}")).into())
            }
            None => Ok(ExitCode::from(130)),
        };
    }
    let mut w = Watch::new(a);
    w.watch(a, &stop, &mut children);
    let statuses = children.wait();
    super::merge::finish(
        w.slices(a, &statuses, &children, &offsets),
        None,
        a.json.as_deref(),
        &a.views,
        "hosts",
        a.max_failures,
        &a.checks,
    )
}

/// Each host's ssh command, by the host's name: `throng client` with the
/// client arguments, its segment and the run id; it starts on `go`.
fn commands(a: &ClusterConfig, binaries: &[String], mux: Option<&Mux>) -> Vec<(String, Command)> {
    let n = a.hosts.len() as u64;
    // One run id for every host: the user's (--run-id in the client
    // arguments, passed on as it is), else a new one.
    let run_id = match a.run_id_given {
        true => None,
        false => Some(crate::domain::RunId::generated().id),
    };
    a.hosts
        .iter()
        .zip(binaries)
        .enumerate()
        .map(|(i, (h, binary))| {
            let mut words = vec![binary.to_string(), "client".into()];
            words.extend(a.client_args.iter().cloned());
            words.extend([
                "--segment".into(),
                format!("{}/{n}", i + 1),
                "--child".into(),
                "--session".into(),
            ]);
            if let Some(id) = &run_id {
                words.extend(["--run-id".into(), id.clone()]);
            }
            let remote: Vec<String> = words.iter().map(|w| shell_quote(w)).collect();
            let mut c = ssh(a, h, mux);
            c.arg(remote.join(" "));
            // Its own process group: a Ctrl-C at the terminal reaches the
            // controller only, which stops every host over its session.
            std::os::unix::process::CommandExt::process_group(&mut c, 0);
            (h.name(), c)
        })
        .collect()
}

/// What the hosts have said so far, each by its index.
struct Watch {
    /// A host prints a second a second once its run starts; one silent
    /// past its deadline's margin after that is frozen or cut off, and is
    /// ended here (its ssh, which ends the remote run when the pipe closes).
    silence: Silence,
    killed: Vec<Option<String>>,
    live: LiveView,
    latest: Vec<Option<Sample>>,
    results: Vec<Option<RunResult>>,
    done: Vec<bool>,
    /// The last second shown.
    shown: u64,
    interrupted: bool,
    /// How long a host may take to end its run once told to stop.
    silence_limit: Duration,
    /// When the hosts told to stop and still running are ended.
    stop_by: Option<Instant>,
}

impl Watch {
    fn new(a: &ClusterConfig) -> Watch {
        let n = a.hosts.len();
        let share = a.connections.div_ceil(n as u64);
        let limit = Silence::limit(a.drain_s, share);
        Watch {
            silence: Silence::new(n, limit),
            silence_limit: limit,
            stop_by: None,
            killed: vec![None; n],
            live: LiveView::new(a.quiet, a.connections),
            latest: vec![None; n],
            results: vec![None; n],
            done: vec![false; n],
            shown: 0,
            interrupted: false,
        }
    }

    /// Reads the hosts' lines until every ssh has ended.
    fn watch(&mut self, a: &ClusterConfig, stop: &Stop, children: &mut Children) {
        while self.done.iter().any(|d| !d) {
            let wake = match (self.stop_by, self.silence.next()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let reason = stop.wait_reason(wake);
            if self.stop_by.is_some_and(|t| Instant::now() >= t) {
                self.stop_by = None;
                for i in 0..a.hosts.len() {
                    if !self.done[i] {
                        children.kill(i);
                        self.killed[i] = Some(format!(
                            "did not answer the stop within {:.0} s and its ssh was killed: \
                             its share is missing",
                            self.silence_limit.as_secs_f64()
                        ));
                    }
                }
            }
            for (i, secs) in self.silence.overdue() {
                children.kill(i);
                self.killed[i] = Some(format!(
                    "fell silent for {secs:.0} s (frozen, unreachable, or stuck past its deadline) \
                     and its ssh was killed: its share is missing"
                ));
            }
            if let Some(Reason::ChildLine(i, line)) = &reason {
                if line.starts_with("{\"sample\"") {
                    self.silence.heard(*i);
                }
            }
            match reason {
                Some(Reason::Signal) if !self.interrupted => {
                    // Every host at once, over its open session.
                    self.interrupted = true;
                    for i in 0..a.hosts.len() {
                        if !self.done[i] {
                            children.say(i, super::host::STOP);
                        }
                    }
                    self.stop_by = Some(Instant::now() + self.silence_limit);
                }
                Some(Reason::ChildExit(i)) => {
                    self.done[i] = true;
                    self.silence.gone(i);
                }
                Some(Reason::ChildLine(i, line)) => self.line(a, i, &line),
                _ => {}
            }
        }
        self.live.finish();
    }

    /// One line of host `i`: its pid, its result, or a second.
    fn line(&mut self, a: &ClusterConfig, i: usize, line: &str) {
        match serde_json::from_str::<ChildLine>(line) {
            Ok(ChildLine::Result(r)) => self.results[i] = serde_json::from_value(*r).ok(),
            Ok(ChildLine::Sample(s)) => {
                let t = s.t;
                self.latest[i] = Some(*s);
                let ready = (0..a.hosts.len())
                    .all(|j| self.done[j] || self.latest[j].as_ref().is_some_and(|x| x.t >= t));
                if t > self.shown && ready {
                    self.shown = t;
                    self.second(a, t);
                }
            }
            _ => {}
        }
    }

    /// Second `t`, every host's part of it in: each host's line (unless
    /// quiet) and the sum.
    fn second(&mut self, a: &ClusterConfig, t: u64) {
        if !a.quiet {
            for (j, h) in a.hosts.iter().enumerate() {
                if let Some(x) = &self.latest[j] {
                    self.live.note(&format!(
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
        self.live
            .second(&sum_samples(&self.latest, t), a.connections);
        crate::sys::release_free_memory();
    }

    /// The results to merge, each on the controller's clock (its host's
    /// measured offset taken off), and why each missing host's is missing.
    fn slices(
        self,
        a: &ClusterConfig,
        statuses: &[Result<i32, String>],
        children: &Children,
        offsets: &[super::start::Offset],
    ) -> super::merge::Slices {
        let mut killed = self.killed;
        let mut got = Vec::new();
        let mut names = Vec::new();
        let mut missing = Vec::new();
        for (i, r) in self.results.into_iter().enumerate() {
            match r {
                Some(mut r) => {
                    if let Some(o) = offsets.get(i) {
                        r.on_clock(o.offset_s);
                    }
                    got.push(r);
                    names.push(a.hosts[i].name());
                }
                None => {
                    let why = match &statuses[i] {
                        _ if killed[i].is_some() => killed[i].take().unwrap_or_default(),
                        Ok(255) => format!(
                            "ssh failed (unreachable or refused): {}",
                            children.last_error(i)
                        ),
                        Ok(code) => {
                            format!("exited with code {code}: {}", children.last_error(i))
                        }
                        Err(e) => e.clone(),
                    };
                    missing.push(format!("host {}: {why}", a.hosts[i].name()));
                }
            }
        }
        super::merge::Slices {
            results: got,
            names,
            missing,
            interrupted: self.interrupted,
            ended_as_planned: false,
            observed: None,
            of: None,
        }
    }
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
        // An IPv6 host with a port is named in brackets, and reads back.
        for line in [
            "[fd00::3]:22",
            "load@[fd00::3]:2222",
            "fd00::3",
            "load@fd00::3",
        ] {
            let h = parse_hosts(line).unwrap();
            assert_eq!(h[0].name(), line);
            assert_eq!(parse_hosts(&h[0].name()).unwrap(), h);
        }
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
