//! A load host's side of a `throng cluster` session (`throng client
//! --child`): the host says what it is and its plan for its share
//! ([`HostReport`]), answers the controller's clock readings at once, and
//! starts when the controller says `go`; `stop`, or the session's end
//! (the controller or its ssh gone), stops the run. Everything goes over
//! the ssh session's stdin and stdout: no port is opened.

use std::io::BufRead;

use anyhow::Result;

use crate::child::{ChildLine, HostReport};
use crate::sys::signals::{Reason, Stop};

/// The words the controller writes on a host's stdin, one a line.
pub const CLOCK: &str = "clock";
pub const GO: &str = "go";
pub const STOP: &str = "stop";

/// Says what this host is and its plan (its problems refuse the run).
pub fn report(r: HostReport) {
    ChildLine::HostReady(Box::new(r)).print();
}

/// Listens to the controller on stdin and waits for `go`: true then,
/// false when the run is stopped first. From here on `stop` or the end
/// of stdin stops the run as a signal would.
pub fn wait_go(stop: &Stop) -> Result<bool> {
    let tx = stop.sender();
    std::thread::Builder::new()
        .name("session".into())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { break };
                let sent = match line.trim() {
                    CLOCK => {
                        ChildLine::Clock(unix_now()).print();
                        Ok(())
                    }
                    GO => tx.send(Reason::Enter),
                    STOP => tx.send(Reason::Signal),
                    _ => Ok(()),
                };
                if sent.is_err() {
                    return;
                }
            }
            let _ = tx.send(Reason::Signal);
        })?;
    loop {
        match stop.wait_reason(None) {
            Some(Reason::Enter) => return Ok(true),
            Some(Reason::Signal) | None => return Ok(false),
            Some(_) => {}
        }
    }
}

/// This host's wall clock, Unix seconds.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
