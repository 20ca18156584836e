//! The typed harness of the integration tests: a `throng client` run
//! built from its flags ([`Client`]), run to its end with `-q --json` to a
//! file of its own (or started and signalled: [`Running`]), and what came
//! of it ([`Ran`]): the exit code, the output, the result as written and
//! as its typed [`RunResult`] (its books checked), the verdict and the RTT
//! log.
//!
//! ```ignore
//! let ran = Client::new("echo").arg(addr.to_string()).flags("-c 4 -r 200 -T 1s").run();
//! let r = ran.exits(0).result();
//! assert_eq!(r.q().answered, r.q().sent, "{}", ran.out);
//! // The same, for a run that must succeed, with the books checked:
//! let (r, out) = Client::new("echo").arg(addr.to_string()).flags("-c 4 -r 200 -T 1s").ok();
//! let answered = all_answered(&r, 150, &out);
//! ```
//!
//! The checks most tests make of a result's queries are here too:
//! [`all_answered`] and [`sent_balances`].

use std::io::{BufReader, Read};
use std::path::PathBuf;
use std::process::{ChildStderr, Command};
use std::time::Instant;

use serde_json::Value;
use throng::outcome::RunResult;
use throng::outcome::Verdict;

use super::{
    output, parse_result, spawn_piped, temp_dir, typed, wait_for_line, Daemon, Parts, BIN,
};

/// A `throng client` run to make: its arguments in order.
#[derive(Debug, Clone)]
pub struct Client {
    name: String,
    args: Vec<String>,
    rtt_log: bool,
}

impl Client {
    /// A run whose scratch directory is named after `name`.
    pub fn new(name: &str) -> Client {
        Client {
            name: name.to_string(),
            args: Vec::new(),
            rtt_log: false,
        }
    }

    /// Flags as written on a command line, split at whitespace (a value
    /// with a space in it goes through [`Client::arg`]).
    pub fn flags(mut self, line: &str) -> Client {
        self.args
            .extend(line.split_whitespace().map(str::to_string));
        self
    }

    /// One argument, as it is.
    pub fn arg(mut self, a: impl AsRef<str>) -> Client {
        self.args.push(a.as_ref().to_string());
        self
    }

    /// Arguments, each as it is.
    pub fn args<S: AsRef<str>>(mut self, all: impl IntoIterator<Item = S>) -> Client {
        self.args
            .extend(all.into_iter().map(|a| a.as_ref().to_string()));
        self
    }

    /// Also `--rtt-log`, its text in [`Ran::rtt_log`].
    pub fn rtt_log(mut self) -> Client {
        self.rtt_log = true;
        self
    }

    /// The command, its result and RTT log written in `dir`; `quiet`:
    /// without the live view.
    fn command(&self, dir: &std::path::Path, quiet: bool) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.arg("client")
            .args(&self.args)
            .args(["--json", dir.join("r.json").to_str().unwrap()]);
        if quiet {
            cmd.arg("-q");
        }
        if self.rtt_log {
            cmd.args(["--rtt-log", dir.join("rtt.csv").to_str().unwrap()]);
        }
        cmd
    }

    /// Runs it to its end.
    pub fn run(self) -> Ran {
        let dir = temp_dir(&self.name);
        let t = Instant::now();
        let (code, out, err) = output(&mut self.command(&dir, true));
        Ran::read(code, out, err, dir, t)
    }

    /// A run named `name` whose first argument is `target`.
    pub fn at(name: &str, target: impl std::fmt::Display) -> Client {
        Client::new(name).arg(target.to_string())
    }

    /// Runs it to its end; it must exit `code`. The typed result, and the
    /// output for assertion messages.
    #[track_caller]
    pub fn exits(self, code: i32) -> (RunResult, String) {
        let ran = self.run();
        let r = ran.exits(code).result();
        (r, ran.out)
    }

    /// [`Client::exits`] with 0.
    #[track_caller]
    pub fn ok(self) -> (RunResult, String) {
        self.exits(0)
    }

    /// Starts it with its live view, and returns once a line of its
    /// stderr holds `ready` (the live view prints plain lines when stderr
    /// is not a terminal).
    /// Killed if dropped before [`Running::wait`].
    pub fn start(self, ready: &str) -> Running {
        let dir = temp_dir(&self.name);
        let t = Instant::now();
        let (child, mut err) = spawn_piped(&mut self.command(&dir, false));
        let line = wait_for_line(&mut err, ready);
        Running {
            child,
            err,
            seen: line,
            dir,
            t,
        }
    }
}

/// A [`Client`] run started and not yet ended.
pub struct Running {
    child: Daemon,
    err: BufReader<ChildStderr>,
    /// Its stderr read so far.
    seen: String,
    dir: PathBuf,
    t: Instant,
}

impl Running {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends it `sig`.
    pub fn signal(&self, sig: i32) {
        super::signal(self.pid(), sig);
    }

    /// Reads its stderr up to a line that holds `needle`; returns the line.
    pub fn wait_for_line(&mut self, needle: &str) -> String {
        let line = wait_for_line(&mut self.err, needle);
        self.seen.push_str(&line);
        line
    }

    /// Still running.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits for its end, then reads what it wrote.
    pub fn wait(mut self) -> Ran {
        let mut err = std::mem::take(&mut self.seen);
        let _ = self.err.read_to_string(&mut err);
        let mut out = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        let code = self.child.wait().unwrap().code().unwrap_or(-1);
        let dir = std::mem::take(&mut self.dir);
        Ran::read(code, out, err, dir, self.t)
    }
}

impl Ran {
    /// What a run started at `t` that ended with `code` wrote in `dir`
    /// (then removed).
    fn read(code: i32, out: String, err: String, dir: PathBuf, t: Instant) -> Ran {
        let secs = t.elapsed().as_secs_f64();
        let json = std::fs::read_to_string(dir.join("r.json"))
            .map(|t| parse_result(&t))
            .unwrap_or(Value::Null);
        let rtt_log = std::fs::read_to_string(dir.join("rtt.csv")).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        Ran {
            code,
            out: format!("{out}\n{err}"),
            stdout: out,
            stderr: err,
            json,
            rtt_log,
            secs,
        }
    }
}

/// What came of a [`Client`] run.
#[derive(Debug)]
pub struct Ran {
    pub code: i32,
    /// Its stdout, then its stderr.
    pub out: String,
    pub stdout: String,
    pub stderr: String,
    /// The result as written (Null when the run wrote none).
    pub json: Value,
    /// The RTT log's text (with [`Client::rtt_log`]).
    pub rtt_log: String,
    /// How long it ran, start to exit, in seconds.
    pub secs: f64,
}

impl Ran {
    /// Asserts the exit code (the output in the message).
    #[track_caller]
    pub fn exits(&self, code: i32) -> &Ran {
        assert_eq!(self.code, code, "exit code\n{}", self.out);
        self
    }

    /// Asserts it ran, start to exit, for less than `secs` seconds.
    #[track_caller]
    pub fn within(&self, secs: f64) -> &Ran {
        assert!(
            self.secs < secs,
            "ran {} s, not under {secs}\n{}",
            self.secs,
            self.out
        );
        self
    }

    /// The typed result; the run must have written one.
    #[track_caller]
    pub fn result(&self) -> RunResult {
        assert!(
            !self.json.is_null(),
            "the run wrote no result\n{}",
            self.out
        );
        typed(&self.json)
    }

    /// The result's verdict; the run must have written one.
    #[track_caller]
    pub fn verdict(&self) -> Verdict {
        self.result()
            .verdict
            .unwrap_or_else(|| panic!("a result without a verdict\n{}", self.out))
    }
}

/// Every query sent was answered, and at least `min` were: the number
/// answered.
#[track_caller]
pub fn all_answered(r: &RunResult, min: u64, out: &str) -> u64 {
    let q = r.q();
    assert!(q.answered >= min, "answered {} < {min}\n{out}", q.answered);
    assert_eq!(q.sent, q.answered, "sent against answered\n{out}");
    q.answered
}

/// At least `min` queries were sent, and each was answered or still in
/// flight at the end: the number sent.
#[track_caller]
pub fn sent_balances(r: &RunResult, min: u64, out: &str) -> u64 {
    let q = r.q();
    assert!(q.sent >= min, "sent {} < {min}\n{out}", q.sent);
    assert_eq!(
        q.answered + q.in_flight_at_end,
        q.sent,
        "answered + in flight against sent\n{out}"
    );
    q.sent
}

/// `throng client TARGET FLAGS` run to its end, which must exit `code`:
/// its typed result, and its output behind `name` (a table's case is
/// named in every message).
#[track_caller]
pub fn exits(
    name: &str,
    target: impl std::fmt::Display,
    flags: &str,
    code: i32,
) -> (RunResult, String) {
    named(Client::at(name, target).flags(flags).run(), name, code)
}

/// [`exits`] within `secs` seconds, start to exit.
#[track_caller]
pub fn ends(
    name: &str,
    target: impl std::fmt::Display,
    flags: &str,
    code: i32,
    secs: f64,
) -> (RunResult, String) {
    let ran = Client::at(name, target).flags(flags).run();
    assert!(
        ran.secs < secs,
        "{name}: ran {} s, not under {secs}\n{}",
        ran.secs,
        ran.out
    );
    named(ran, name, code)
}

/// `ran`'s exit code asserted and its result read, its output behind
/// `name`.
#[track_caller]
fn named(ran: Ran, name: &str, code: i32) -> (RunResult, String) {
    let out = format!("{name}: {}", ran.out);
    assert_eq!(ran.code, code, "exit code\n{out}");
    assert!(!ran.json.is_null(), "the run wrote no result\n{out}");
    (typed(&ran.json), out)
}

/// The output says each of `said` and none of `not`.
#[track_caller]
pub fn says(out: &str, said: &[&str], not: &[&str]) {
    let unsaid: Vec<_> = said.iter().filter(|s| !out.contains(**s)).collect();
    let wrong: Vec<_> = not.iter().filter(|n| out.contains(**n)).collect();
    assert!(
        unsaid.is_empty() && wrong.is_empty(),
        "not said: {unsaid:?}; said: {wrong:?}\n{out}"
    );
}

/// Each of `conns` connections had one answer, then failed into `bucket`
/// with the query in flight on it (`conn_lost`): nothing malformed, nothing
/// timed out, the rest found no connection, nothing left in flight.
#[track_caller]
pub fn lost_with_its_connection(r: &RunResult, conns: u64, bucket: &str, out: &str) {
    let q = r.q();
    assert_eq!(q.answered, conns, "answered\n{out}");
    assert_eq!(
        r.connections.failed[bucket], conns,
        "failed {bucket}\n{out}"
    );
    assert_eq!(r.failed_total(), conns, "failed in all\n{out}");
    assert_eq!(q.errors["conn_lost"], conns, "conn_lost\n{out}");
    assert_eq!(q.errors["malformed"], 0, "malformed\n{out}");
    assert_eq!(q.timed_out, 0, "timed out\n{out}");
    assert_eq!(
        r.errors(),
        conns + q.errors["no_connection"],
        "errors: conn_lost and no_connection only\n{out}"
    );
    assert_eq!(q.in_flight_at_end, 0, "in flight at the end\n{out}");
}

/// `throng client TARGET FLAGS` started, once a line of its live view
/// holds `ready`.
pub fn start(name: &str, target: impl std::fmt::Display, flags: &str, ready: &str) -> Running {
    Client::at(name, target).flags(flags).start(ready)
}
