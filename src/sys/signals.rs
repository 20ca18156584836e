//! SIGINT and SIGTERM as a value to wait on: the main thread waits for "a
//! signal came, or this instant passed" without sleeping in a loop and
//! without a signal handler of our own (signal-hook runs it on a thread).

use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use anyhow::{Context, Result};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// A request to stop: SIGINT, SIGTERM, or anything else sent on its channel
/// (Enter on stdin for `--pause`).
pub struct Stop {
    /// A child process's (see [`Stop::install_child`]).
    child: bool,
    rx: mpsc::Receiver<Reason>,
    tx: mpsc::Sender<Reason>,
    handle: signal_hook::iterator::Handle,
}

/// Why the wait ended early.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    Signal,
    Enter,
    /// A client worker has resolved every attempt of its ramp (verified,
    /// unverified or failed).
    RampDone,
    /// A client worker's ramp attempts are all established or failed
    /// (verification may go on).
    RampEstablished,
    /// A client worker has sent its share of --queries and has none in
    /// flight any more.
    QueriesDone,
    /// A line read on --control.
    Control(String),
    /// A line a child process printed on stdout (--processes).
    ChildLine(usize, String),
    /// A child process closed its stdout (it ended).
    ChildExit(usize),
    /// A server process of an elastic group is half full: time to start
    /// the next one, which waits ready.
    Grow,
    /// A server process of an elastic group is nearly full: time for the
    /// next one to take the new connections.
    Full,
    /// A server process of an elastic group that was full has emptied
    /// below half: it may take new connections again.
    Room,
}

impl Stop {
    /// Installs the handlers; from now on SIGINT/SIGTERM no longer kill the
    /// process but end the next wait. A second one ends the process at once
    /// with exit code 130 (what a first one started, closing connections or
    /// waiting for answers, is left behind).
    pub fn install() -> Result<Stop> {
        Stop::install_with(true)
    }

    /// As [`Stop::install`] for a child process (--processes, an elastic
    /// server's member): a Ctrl-C at the terminal reaches it and its parent
    /// passes one on too, so a second is not a request to stop at once.
    pub fn install_child() -> Result<Stop> {
        Stop::install_with(false)
    }

    fn install_with(exit_on_second: bool) -> Result<Stop> {
        let (tx, rx) = mpsc::channel();
        let mut signals = Signals::new([SIGINT, SIGTERM]).context("installing signal handlers")?;
        let handle = signals.handle();
        let sig_tx = tx.clone();
        thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                let mut seen = 0;
                for _ in signals.forever() {
                    seen += 1;
                    if seen > 1 && exit_on_second {
                        errln!("throng: a second interrupt: stopping at once");
                        std::process::exit(130);
                    }
                    if sig_tx.send(Reason::Signal).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Stop {
            child: !exit_on_second,
            rx,
            tx,
            handle,
        })
    }

    /// Installed for a child process.
    pub fn is_child(&self) -> bool {
        self.child
    }

    /// Waits until `deadline`; true when a stop request came first.
    pub fn wait_until(&self, deadline: Instant) -> bool {
        self.wait_reason(Some(deadline)).is_some()
    }

    /// Waits until `deadline` (forever with None); the reason when a stop
    /// request came first.
    pub fn wait_reason(&self, deadline: Option<Instant>) -> Option<Reason> {
        let got = match deadline {
            Some(d) => self
                .rx
                .recv_timeout(d.saturating_duration_since(Instant::now())),
            None => self
                .rx
                .recv()
                .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match got {
            Ok(r) => Some(r),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => Some(Reason::Signal),
        }
    }

    /// A sender for other threads' events (client workers' RampDone).
    pub fn sender(&self) -> mpsc::Sender<Reason> {
        self.tx.clone()
    }

    /// Passes every line of stdin on as a control command (`--control -`).
    pub fn on_control(&self) -> Result<()> {
        let tx = self.tx.clone();
        thread::Builder::new()
            .name("control".into())
            .spawn(move || {
                for line in std::io::stdin().lines() {
                    let Ok(line) = line else { break };
                    if !line.trim().is_empty()
                        && tx.send(Reason::Control(line.trim().to_string())).is_err()
                    {
                        break;
                    }
                }
            })?;
        Ok(())
    }

    /// Ends waits on Enter too (for `--pause`).
    pub fn on_enter(&self) -> Result<()> {
        let tx = self.tx.clone();
        thread::Builder::new().name("stdin".into()).spawn(move || {
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            let _ = tx.send(Reason::Enter);
        })?;
        Ok(())
    }
}

impl Drop for Stop {
    fn drop(&mut self) {
        self.handle.close();
    }
}
