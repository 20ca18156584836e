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
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::outcome::Sample;
use crate::sys::signals::{Reason, Stop};

/// A line a child prints on stdout.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChildLine {
    Sample(Box<Sample>),
    RampDone {
        seconds: f64,
        /// The child's connections at that moment (the parent's view sums
        /// them: its seconds may not have come yet).
        #[serde(default)]
        established: u64,
        #[serde(default)]
        failed: u64,
        /// Seconds from the child's start to its traffic's: with the
        /// moment the line came, when the child started.
        #[serde(default)]
        since_start_s: f64,
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
    /// Server children of --processes auto: full once, now below half:
    /// it may take new connections again.
    Room,
    /// Client children: the process id (so a remote one can be signalled).
    Pid(u32),
    /// Client children: the whole result (a `RunResult`), at the end.
    Result(Box<serde_json::Value>),
    /// Client children of a parent with --metrics: the figures so far,
    /// after each second's sample.
    Metrics(Box<crate::metrics::exported::RunCounters>),
    /// Hosts of `throng cluster`: what the host is and its plan for its
    /// share, before any connection; it then waits for `go` on stdin.
    HostReady(Box<HostReport>),
    /// Hosts of `throng cluster`: the host's wall clock (Unix seconds)
    /// when it read `clock` on stdin.
    Clock(f64),
}

/// What a load host of `throng cluster` says before the run: what it is
/// (the controller refuses a mix of versions) and its plan for its share.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostReport {
    /// `uname -m`'s words (x86_64, aarch64).
    pub arch: String,
    /// The C library throng runs on (glibc 2.36, musl).
    pub libc: String,
    /// throng's version there.
    pub version: String,
    pub hostname: String,
    /// Processes the host runs its share in.
    pub processes: u64,
    /// The plan's lines, as `throng client` prints them.
    pub plan: Vec<String>,
    /// Why the host cannot take its share, each with the fix (none: it can).
    pub problems: Vec<String>,
}

impl HostReport {
    /// This host, with its plan and its problems.
    pub fn here(processes: u64, plan: Vec<String>, problems: Vec<String>) -> HostReport {
        HostReport {
            arch: std::env::consts::ARCH.to_string(),
            libc: libc_name(),
            version: crate::BUILD.to_string(),
            hostname: crate::sys::proc::sysctl("kernel.hostname").unwrap_or_default(),
            processes,
            plan,
            problems,
        }
    }
}

/// The C library this process runs on, and its version where it says.
fn libc_name() -> String {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
        let v = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
        format!("glibc {}", v.to_string_lossy())
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        if cfg!(target_env = "musl") {
            "musl".to_string()
        } else {
            "unknown".to_string()
        }
    }
}

impl ChildLine {
    pub fn print(&self) {
        print_line(self);
    }

    /// A second's sample as [`ChildLine::Sample`] prints it, without a copy.
    pub fn print_sample(s: &Sample) {
        #[derive(Serialize, schemars::JsonSchema)]
        #[serde(rename_all = "snake_case")]
        enum Borrowed<'a> {
            Sample(&'a Sample),
        }
        print_line(&Borrowed::Sample(s));
    }
}

/// One JSON line on stdout, made in a buffer kept from one line to the next
/// (a child prints a line or two every second of a long run: lines made
/// anew each time would fragment its heap).
fn print_line(v: &impl Serialize) {
    use std::io::Write;
    thread_local! {
        static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    LINE.with_borrow_mut(|line| {
        line.clear();
        if serde_json::to_writer(&mut *line, v).is_ok() {
            line.push(b'\n');
            // As println! does: a parent that is gone (a closed pipe) ends
            // the child here rather than leave it running unheard.
            if let Err(e) = std::io::stdout().lock().write_all(line) {
                panic!("failed printing to stdout: {e}");
            }
        }
    });
}

/// A child of this binary: the arguments it runs with and its plan, the
/// one JSON line it reads first on stdin: its slice of the scenario or its
/// server configuration, as data, so that nothing is parsed twice and no
/// flag of the parent's has to be taken out of the user's.
pub struct Own {
    pub args: Vec<OsString>,
    pub plan: String,
}

impl Own {
    pub fn new(args: Vec<OsString>, plan: &impl Serialize) -> Result<Own> {
        Ok(Own {
            args,
            plan: serde_json::to_string(plan).context("writing a child's plan")?,
        })
    }
}

/// The plan the parent wrote on this child's stdin (see [`Own`]).
pub fn read_plan<T: DeserializeOwned>() -> Result<T> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .context("reading the plan of a child process on stdin")?;
    serde_json::from_str(&line).context(
        "a child process found no plan on stdin (the internal flags of --processes are for \
         throng's own children)",
    )
}

/// Children running, with the channel their lines arrive on.
pub struct Children {
    pub children: Vec<Child>,
    pub names: Vec<String>,
    last_err: Vec<std::sync::Arc<std::sync::Mutex<String>>>,
}

impl Children {
    /// Starts children of this binary, each given its plan on stdin; their
    /// stdout lines arrive on `stop` as [`Reason::ChildLine`], their end as
    /// [`Reason::ChildExit`]. With `keep_stdin`, each child's stdin stays a
    /// pipe the parent writes Enter to (see [`Children::enter_all`]);
    /// otherwise it closes after the plan.
    pub fn spawn(own: Vec<Own>, stop: &Stop, keep_stdin: bool) -> Result<Children> {
        let mut all = Children::none();
        for o in own {
            all.push_own(o, stop, keep_stdin)?;
        }
        Ok(all)
    }

    fn none() -> Children {
        Children {
            children: Vec::new(),
            names: Vec::new(),
            last_err: Vec::new(),
        }
    }

    /// Starts the commands. With `prefix_stderr`, their stderr lines are
    /// shown with their name in front (and the last one kept, to say why
    /// one failed); otherwise stderr is shared.
    /// With `keep_stdin`, each one's stdin is a pipe (see [`Children::say`]).
    pub fn spawn_commands(
        cmds: Vec<(String, Command)>,
        stop: &Stop,
        prefix_stderr: bool,
        keep_stdin: bool,
    ) -> Result<Children> {
        let mut all = Children::none();
        for (name, cmd) in cmds {
            all.push(name, cmd, stop, prefix_stderr, None, keep_stdin)?;
        }
        Ok(all)
    }

    /// Starts one more child of this binary (index: the count before),
    /// with its stdin a pipe after the plan (see [`Children::tell`]).
    pub fn add(&mut self, own: Own, stop: &Stop) -> Result<()> {
        self.push_own(own, stop, true)
    }

    fn push_own(&mut self, own: Own, stop: &Stop, keep_stdin: bool) -> Result<()> {
        let exe = std::env::current_exe().context("finding throng's own binary")?;
        let mut c = Command::new(&exe);
        c.args(own.args);
        let name = format!("process {}", self.children.len() + 1);
        self.push(name, c, stop, false, Some(own.plan), keep_stdin)
    }

    /// Starts `cmd`; with a `plan`, writes it as the first line of its
    /// stdin, which stays open with `keep_stdin`.
    fn push(
        &mut self,
        name: String,
        mut cmd: Command,
        stop: &Stop,
        prefix_stderr: bool,
        plan: Option<String>,
        keep_stdin: bool,
    ) -> Result<()> {
        let (children, names, last_err) = (&mut self.children, &mut self.names, &mut self.last_err);
        let i = children.len();
        {
            let piped = plan.is_some() || keep_stdin;
            cmd.stdin(if piped { Stdio::piped() } else { Stdio::null() })
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
                            errln!("[{label}] {line}");
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
            if let (Some(plan), Some(input)) = (plan, child.stdin.as_mut()) {
                // A child that died at once is found by its exit, not here.
                use std::io::Write;
                let _ = input.write_all(plan.as_bytes());
                let _ = input.write_all(b"\n");
                let _ = input.flush();
            }
            if !keep_stdin {
                drop(child.stdin.take());
            }
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

    /// Writes `line` and a newline on child `i`'s stdin; false when it
    /// cannot be written (the child or its stdin gone).
    pub fn say(&mut self, i: usize, line: &str) -> bool {
        use std::io::Write;
        let Some(input) = self.children.get_mut(i).and_then(|c| c.stdin.as_mut()) else {
            return false;
        };
        input
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| input.flush())
            .is_ok()
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

    /// Ends child `i` with SIGKILL (one that stopped answering).
    pub fn kill(&mut self, i: usize) {
        if let Some(c) = self.children.get_mut(i) {
            let _ = c.kill();
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

/// Sums the latest sample of every child into one line of the live view
/// (their histograms added: the percentiles of all of them).
pub fn sum_samples(latest: &[Option<Sample>], t: u64) -> Sample {
    let mut s = Sample::merged(latest.iter().flatten());
    s.t = t;
    s.unix_s = latest.iter().flatten().map(|x| x.unix_s).max().unwrap_or(0);
    s
}

/// Children (processes, load hosts) that fell silent. A child that has
/// started its run prints a line every second; one silent for longer than
/// its own deadline allows (`--drain` + [`crate::engine::grace`] + a
/// margin) is frozen or stuck, and its parent ends it rather than wait for
/// ever. A child is watched from its first second on: before it (a wait
/// for --start-at, --preallocate) it may be quiet.
pub struct Silence {
    last: Vec<Option<Instant>>,
    gone: Vec<bool>,
    limit: Duration,
}

impl Silence {
    /// `n` children, none watched yet; silent past `limit` is overdue.
    pub fn new(n: usize, limit: Duration) -> Silence {
        Silence {
            last: vec![None; n],
            gone: vec![false; n],
            limit,
        }
    }

    /// The margin a child running `connections` gets past `--drain` and
    /// its grace (a loaded host's seconds and a result's writing).
    pub fn limit(drain_s: f64, connections: u64) -> Duration {
        Duration::from_secs_f64(drain_s)
            + crate::engine::grace(connections)
            + Duration::from_secs(10)
    }

    /// Child `i` printed a second of its run: watched from now.
    pub fn heard(&mut self, i: usize) {
        if !self.gone.get(i).copied().unwrap_or(true) {
            self.last[i] = Some(Instant::now());
        }
    }

    /// Child `i` ended: no longer watched.
    pub fn gone(&mut self, i: usize) {
        if let Some(g) = self.gone.get_mut(i) {
            *g = true;
            self.last[i] = None;
        }
    }

    /// When the next child becomes overdue, if it stays silent.
    pub fn next(&self) -> Option<Instant> {
        self.last.iter().flatten().min().map(|l| *l + self.limit)
    }

    /// The children silent past the limit now, each named once: (index,
    /// seconds silent).
    pub fn overdue(&mut self) -> Vec<(usize, f64)> {
        let now = Instant::now();
        let mut out = Vec::new();
        for i in 0..self.last.len() {
            if let Some(t) = self.last[i].filter(|t| now >= *t + self.limit) {
                out.push((i, (now - t).as_secs_f64()));
                self.gone(i);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan is one line whatever it holds, so Enter can follow it.
    #[test]
    fn a_plan_is_one_line() {
        let own = Own::new(Vec::new(), &serde_json::json!({"reply": "a\nb", "n": 1})).unwrap();
        assert!(!own.plan.contains('\n'), "{}", own.plan);
        let back: serde_json::Value = serde_json::from_str(&own.plan).unwrap();
        assert_eq!(back["reply"], "a\nb");
    }

    /// The live view of several children shows the percentiles of all
    /// their answers together, not the slowest child's.
    #[test]
    fn summed_seconds_have_the_percentiles_of_every_child() {
        let second = |values: &[u64]| {
            let mut h = crate::metrics::new_histogram();
            let mut s = Sample {
                answered: Some(values.len() as u64),
                ..Sample::default()
            };
            for &v in values {
                h.record(v).unwrap();
            }
            s.set_latency(&h, true);
            s
        };
        // 99 fast answers in one child, one slow in the other.
        let fast = second(&[100; 99]);
        let slow = second(&[50_000]);
        assert_eq!(slow.p50_us, Some(50_015));
        let sum = sum_samples(&[Some(fast), None, Some(slow)], 7);
        assert_eq!((sum.t, sum.answered), (7, Some(100)));
        assert_eq!(sum.p50_us, Some(100));
        assert_eq!(
            sum.p99_us,
            Some(100),
            "the 99th of 100 answers is a fast one"
        );
        let all = crate::metrics::decode_histogram(sum.hdr.as_deref().unwrap()).unwrap();
        assert_eq!(all.len(), 100);
        // A sample of an older result (percentiles, no histogram) makes
        // the sum's percentiles unknown rather than wrong.
        let mut old = second(&[100]);
        old.hdr = None;
        let sum = sum_samples(&[Some(old), Some(second(&[200]))], 1);
        assert_eq!((sum.p50_us, sum.hdr), (None, None));
        assert_eq!(sum.answered, Some(2));
    }
}
