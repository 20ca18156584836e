//! stdout and stderr for everything throng prints: a reader that went
//! away (`throng client | head -1`, a closed terminal) ends the printing,
//! never the run. Writes to a closed pipe are dropped (EPIPE), so the run
//! goes on, writes its results and exits with its own code; `println!`
//! would panic there.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// A writer that takes a closed pipe as the end of its output.
pub struct Quiet<W>(W);

impl<W: Write> Write for Quiet<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.0.write(buf) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(buf.len()),
            r => r,
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.0.flush() {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            r => r,
        }
    }
}

/// stdout carries data (`--json -`): what is said for people goes to
/// stderr.
static DATA_ON_STDOUT: AtomicBool = AtomicBool::new(false);

/// From now on stdout carries only data ([`data`]); the words printed for
/// people go to stderr.
pub fn stdout_for_data() {
    DATA_ON_STDOUT.store(true, Relaxed);
}

/// Where words for people go: stdout, or stderr while stdout carries data.
pub enum HumanOutput {
    Out(io::StdoutLock<'static>),
    Err(io::StderrLock<'static>),
}

impl Write for HumanOutput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            HumanOutput::Out(w) => w.write(buf),
            HumanOutput::Err(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            HumanOutput::Out(w) => w.flush(),
            HumanOutput::Err(w) => w.flush(),
        }
    }
}

/// The stream for words to people, locked: stdout (stderr while stdout
/// carries data).
pub fn stdout() -> Quiet<HumanOutput> {
    Quiet(match DATA_ON_STDOUT.load(Relaxed) {
        false => HumanOutput::Out(io::stdout().lock()),
        true => HumanOutput::Err(io::stderr().lock()),
    })
}

/// The process's stdout itself, locked, for data (`--json -`).
pub fn data() -> Quiet<io::StdoutLock<'static>> {
    Quiet(io::stdout().lock())
}

/// The process's stderr, locked.
pub fn stderr() -> Quiet<io::StderrLock<'static>> {
    Quiet(io::stderr().lock())
}

/// `print!` to [`stdout`]; other errors of the write are dropped too (as
/// a summary line that cannot be written has nowhere to say so).
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => {{
        use ::std::io::Write as _;
        let _ = write!($crate::console::stdout(), $($t)*);
    }};
}

/// `println!` to [`stdout`].
#[macro_export]
macro_rules! outln {
    ($($t:tt)*) => {{
        use ::std::io::Write as _;
        let _ = writeln!($crate::console::stdout(), $($t)*);
    }};
}

/// `eprintln!` to [`stderr`].
#[macro_export]
macro_rules! errln {
    ($($t:tt)*) => {{
        use ::std::io::Write as _;
        let _ = writeln!($crate::console::stderr(), $($t)*);
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipe whose reader is gone takes every write whole, as if read.
    #[test]
    fn a_closed_pipe_takes_writes_quietly() {
        let (r, w) = std::io::pipe().unwrap();
        drop(r);
        let mut q = Quiet(w);
        assert_eq!(q.write(b"lost").unwrap(), 4);
        q.flush().unwrap();
    }
}
