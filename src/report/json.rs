//! Writing the client's result (and the other files a run writes)
//! atomically: a reader never sees half a file. The result's types are
//! [`crate::outcome`]'s.

use std::fs;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

/// Writes `value` as pretty JSON to `path` atomically: a temporary file in
/// the same directory, then a rename, so a reader never sees half a file.
pub fn write_atomic<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value)?;
    bytes.push(b'\n');
    write_bytes_atomic(path, &bytes, "--json")
}

/// Writes `bytes` to `path` atomically (a temporary file beside it, then a
/// rename); `flag` names the file in an error ("--json", "--html").
pub fn write_bytes_atomic(path: &Path, bytes: &[u8], flag: &str) -> Result<()> {
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
