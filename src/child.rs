//! Parents and their child processes: `throng client --processes` and
//! `throng server --processes` start children of their own binary,
//! `throng cluster` runs clients over ssh. Children speak to the parent in
//! JSON lines on their stdout ([`ChildLine`]); the parent answers with
//! Enter on their stdin. The parent's side is [`Children`]: it starts them,
//! turns their lines and their end into [`Reason`]s to wait on, passes
//! signals on, and collects how each one exited.
//!
//! Below the client, the server and the report (which prints a child's
//! lines), so that none of them reaches into another for it.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::engine::Sample;
use crate::sys::signals::{Reason, Stop};

/// A line a child prints on stdout.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildLine {
    Sample(Sample),
    RampDone {
        seconds: f64,
    },
    /// Server children: one stats second.
    Stats(serde_json::Value),
    /// Server children: the final counters.
    Totals(serde_json::Value),
    /// Server children: listening (bound and accepting).
    Ready,
    /// Server children of --processes auto: half full.
    Filling,
    /// Server children of --processes auto: nearly full.
    Full,
    /// Client children: the process id (so a remote one can be signalled).
    Pid(u32),
    /// Client children: the whole result (a `RunResult`), at the end.
    Result(Box<serde_json::Value>),
}

impl ChildLine {
    pub fn print(&self) {
        if let Ok(s) = serde_json::to_string(self) {
            println!("{s}");
        }
    }
}

/// Flags a child gets from the parent, so the user's own are dropped.
const PARENT_FLAGS: [&str; 11] = [
    "-w",
    "--segment",
    "--processes",
    "--json",
    "--rtt-log",
    "-R",
    "--start-at",
    "--stats-json",
    "--listen",
    "-l",
    "--workers",
];
const PARENT_SWITCHES: [&str; 4] = ["--quiet", "-q", "--child", "--stats"];

/// The user's arguments (after the subcommand) without the flags the
/// parent sets for each child.
pub fn child_args(args: &[OsString], keep_listen: bool) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        let name = s.split('=').next().unwrap_or("");
        let parent_flag =
            PARENT_FLAGS.contains(&name) && !(keep_listen && (name == "--listen" || name == "-l"));
        if parent_flag {
            if !s.contains('=') {
                it.next();
            }
            continue;
        }
        if PARENT_SWITCHES.contains(&&*s) {
            continue;
        }
        out.push(a.clone());
    }
    out
}

/// Children running, with the channel their lines arrive on.
pub struct Children {
    pub children: Vec<Child>,
    pub names: Vec<String>,
    last_err: Vec<std::sync::Arc<std::sync::Mutex<String>>>,
}

impl Children {
    /// Starts one child per argument list; their stdout lines arrive on
    /// `stop` as [`Reason::ChildLine`], their end as [`Reason::ChildExit`].
    /// With `stdin`, each child's stdin is a pipe the parent writes Enter
    /// to (see [`Children::enter_all`]).
    pub fn spawn(arg_lists: Vec<Vec<OsString>>, stop: &Stop, stdin: bool) -> Result<Children> {
        let exe = std::env::current_exe().context("finding throng's own binary")?;
        let cmds = arg_lists
            .into_iter()
            .enumerate()
            .map(|(i, args)| {
                let mut c = Command::new(&exe);
                c.args(args);
                (format!("process {}", i + 1), c)
            })
            .collect();
        Children::spawn_commands_with(cmds, stop, false, stdin)
    }

    /// Starts the commands. With `prefix_stderr`, their stderr lines are
    /// shown with their name in front (and the last one kept, to say why
    /// one failed); otherwise stderr is shared.
    pub fn spawn_commands(
        cmds: Vec<(String, Command)>,
        stop: &Stop,
        prefix_stderr: bool,
    ) -> Result<Children> {
        Children::spawn_commands_with(cmds, stop, prefix_stderr, false)
    }

    fn spawn_commands_with(
        cmds: Vec<(String, Command)>,
        stop: &Stop,
        prefix_stderr: bool,
        stdin: bool,
    ) -> Result<Children> {
        let mut all = Children {
            children: Vec::new(),
            names: Vec::new(),
            last_err: Vec::new(),
        };
        for (name, cmd) in cmds {
            all.push(name, cmd, stop, prefix_stderr, stdin)?;
        }
        Ok(all)
    }

    /// Starts one more child of this binary (index: the count before),
    /// with its stdin a pipe (see [`Children::tell`]).
    pub fn add(&mut self, args: Vec<OsString>, stop: &Stop) -> Result<()> {
        let exe = std::env::current_exe().context("finding throng's own binary")?;
        let mut c = Command::new(&exe);
        c.args(args);
        let name = format!("process {}", self.children.len() + 1);
        self.push(name, c, stop, false, true)
    }

    fn push(
        &mut self,
        name: String,
        mut cmd: Command,
        stop: &Stop,
        prefix_stderr: bool,
        stdin: bool,
    ) -> Result<()> {
        let (children, names, last_err) = (&mut self.children, &mut self.names, &mut self.last_err);
        let i = children.len();
        {
            cmd.stdin(if stdin { Stdio::piped() } else { Stdio::null() })
                .stdout(Stdio::piped());
            cmd.stderr(if prefix_stderr {
                Stdio::piped()
            } else {
                Stdio::inherit()
            });
            let mut child = cmd.spawn().with_context(|| format!("starting {name}"))?;
            let out = child.stdout.take().expect("piped");
            let tx = stop.sender();
            thread::Builder::new()
                .name(format!("child-{i}"))
                .spawn(move || {
                    for line in BufReader::new(out).lines() {
                        let Ok(line) = line else { break };
                        if tx.send(Reason::ChildLine(i, line)).is_err() {
                            return;
                        }
                    }
                    let _ = tx.send(Reason::ChildExit(i));
                })?;
            let slot = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
            if let Some(err) = child.stderr.take() {
                let slot = slot.clone();
                let label = name.clone();
                thread::Builder::new()
                    .name(format!("child-err-{i}"))
                    .spawn(move || {
                        for line in BufReader::new(err).lines() {
                            let Ok(line) = line else { break };
                            eprintln!("[{label}] {line}");
                            if let Ok(mut s) = slot.lock() {
                                *s = line;
                            }
                        }
                    })?;
            }
            names.push(if prefix_stderr {
                name
            } else {
                format!("{name} (pid {})", child.id())
            });
            last_err.push(slot);
            children.push(child);
        }
        Ok(())
    }

    /// Sends Enter to every child (ending their --pause).
    pub fn enter_all(&mut self) {
        use std::io::Write;
        for c in &mut self.children {
            if let Some(input) = c.stdin.as_mut() {
                let _ = input.write_all(b"\n");
                let _ = input.flush();
            }
        }
    }

    /// Sends Enter to child `i` and closes its stdin (one word, once).
    pub fn tell(&mut self, i: usize) {
        use std::io::Write;
        if let Some(mut input) = self.children.get_mut(i).and_then(|c| c.stdin.take()) {
            let _ = input.write_all(b"\n");
        }
    }

    /// Closes child `i`'s stdin without a word: it reads the end.
    pub fn close_stdin(&mut self, i: usize) {
        if let Some(c) = self.children.get_mut(i) {
            drop(c.stdin.take());
        }
    }

    /// The last line a child wrote on stderr (with `prefix_stderr`).
    pub fn last_error(&self, i: usize) -> String {
        self.last_err[i]
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// Passes a signal on to every child still running.
    pub fn signal(&mut self, sig: i32) {
        for c in &mut self.children {
            if let Ok(None) = c.try_wait() {
                // SAFETY: kill() on the pid of our own child.
                unsafe { libc::kill(c.id() as i32, sig) };
            }
        }
    }

    /// Waits for every child; what each one's exit said.
    pub fn wait(&mut self) -> Vec<Result<i32, String>> {
        self.children
            .iter_mut()
            .map(|c| match c.wait() {
                Ok(st) => match st.code() {
                    Some(code) => Ok(code),
                    None => {
                        use std::os::unix::process::ExitStatusExt;
                        Err(format!("killed by signal {}", st.signal().unwrap_or(0)))
                    }
                },
                Err(e) => Err(e.to_string()),
            })
            .collect()
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.children {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// A directory for the children's result files, removed on drop.
pub struct PartsDir(pub PathBuf);

impl PartsDir {
    pub fn new() -> Result<PartsDir> {
        let d = std::env::temp_dir().join(format!("throng-parts-{}", std::process::id()));
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        Ok(PartsDir(d))
    }
}

impl Drop for PartsDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Sums the latest sample of every child into one line of the live view.
pub fn sum_samples(latest: &[Option<Sample>], t: u64) -> Sample {
    let mut s = Sample {
        t,
        ..Sample::default()
    };
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    for x in latest.iter().flatten() {
        s.unix_s = s.unix_s.max(x.unix_s);
        s.connections += x.connections;
        s.attempted += x.attempted;
        s.established += x.established;
        s.verified += x.verified;
        s.failed += x.failed;
        s.established_per_s += x.established_per_s;
        s.target = match (s.target, x.target) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        s.sent = add(s.sent, x.sent);
        s.answered = add(s.answered, x.answered);
        s.timed_out = add(s.timed_out, x.timed_out);
        s.errors = add(s.errors, x.errors);
        // The slowest child's percentiles: an upper bound, not a merge.
        s.p50_us = s.p50_us.max(x.p50_us);
        s.p99_us = s.p99_us.max(x.p99_us);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_flags_are_dropped() {
        let args: Vec<OsString> = [
            "127.0.0.1:1",
            "-c",
            "10k",
            "--json",
            "out.json",
            "--processes=4",
            "-q",
            "--segment",
            "1/2",
            "-r",
            "5k",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let kept: Vec<String> = child_args(&args, false)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(kept, ["127.0.0.1:1", "-c", "10k", "-r", "5k"]);
    }
}
