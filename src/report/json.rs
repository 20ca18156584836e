//! Writing the client's result (and the other files a run writes)
//! atomically: a reader never sees half a file. The result's types are
//! [`crate::outcome`]'s.

use std::fs;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

/// `--json -`: the result goes to stdout (and the summary to stderr).
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Writes `value` as pretty JSON to `path` atomically: a temporary file in
/// the same directory, then a rename, so a reader never sees half a file.
pub fn write_atomic<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    write_bytes_atomic(path, &bytes, "--json")
}

/// Writes `bytes` to `path` atomically (a temporary file beside it, then a
/// rename); `flag` names the file in an error ("--json", "--html"). `-` is
/// stdout; a path that is there and is not a regular file (a device, a
/// FIFO, `/dev/stdout`, a symlink to one) is written in place, never
/// renamed over.
pub fn write_bytes_atomic(path: &Path, bytes: &[u8], flag: &str) -> Result<()> {
    if is_stdout(path) {
        let mut out = crate::console::data();
        return out
            .write_all(bytes)
            .and_then(|()| out.flush())
            .with_context(|| format!("writing {flag} to stdout"));
    }
    if fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        // (A pipe whose reader left takes nothing more, as stdout.)
        return fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|mut f| f.write_all(bytes))
            .or_else(|e| match e.kind() {
                std::io::ErrorKind::BrokenPipe => Ok(()),
                _ => Err(e),
            })
            .with_context(|| format!("writing {flag} {}", path.display()));
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .with_context(|| format!("{flag} {}: not a file name", path.display()))?;
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.with_context(|| format!("writing {flag} {}", path.display()))
}
