//! `throng cluster --copy-binary`: this throng, stripped of its debug
//! information, copied to every load host at once (a few at a time) into
//! a directory that can execute (the user's cache directory there, or
//! `--remote-dir`), its SHA-256 checked on arrival and the copy run once
//! (`--version`) before any load. A host that already holds the same
//! binary (same hash) is not sent it again.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use anyhow::{Context, Result};

use super::ssh::{shell_quote, ClusterConfig, Host, Mux};

/// Copies at the same time, at most.
const PARALLEL: usize = 8;

/// The binary to copy: a stripped copy of this one (or this one, when no
/// tool strips it), and its SHA-256 in hex.
pub struct Local {
    pub path: PathBuf,
    pub sha256: String,
    pub bytes: u64,
    /// A temporary stripped copy, removed on drop.
    temp: bool,
}

impl Drop for Local {
    fn drop(&mut self) {
        if self.temp {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Local {
    /// This throng, stripped with `strip` (or `objcopy --strip-debug`)
    /// into a temporary file; as it is, with a word why, when neither
    /// runs here.
    pub fn prepare() -> Result<Local> {
        let exe = std::env::current_exe().context("finding throng's own binary")?;
        let out = std::env::temp_dir().join(format!("throng-copy-{}", std::process::id()));
        let tools: [(&str, &[&str]); 2] = [("strip", &["-o"]), ("objcopy", &["--strip-debug"])];
        let mut stripped = false;
        for (tool, args) in tools {
            let mut c = Command::new(tool);
            c.args(args);
            if tool == "strip" {
                c.arg(&out).arg(&exe);
            } else {
                c.arg(&exe).arg(&out);
            }
            if c.stderr(Stdio::null()).status().is_ok_and(|s| s.success()) {
                stripped = true;
                break;
            }
        }
        let (path, temp) = match stripped {
            true => (out, true),
            false => {
                errln!(
                    "throng cluster: neither strip nor objcopy runs here (binutils): copying \
                     throng as it is, debug information and all"
                );
                (exe, false)
            }
        };
        let bytes = std::fs::metadata(&path)?.len();
        let sha256 = sha256_file(&path)?;
        Ok(Local {
            path,
            sha256,
            bytes,
            temp,
        })
    }
}

/// The SHA-256 of a file, in hex (ring, already throng's for TLS).
pub fn sha256_file(p: &Path) -> Result<String> {
    let data = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
    let d = ring::digest::digest(&ring::digest::SHA256, &data);
    Ok(d.as_ref().iter().map(|b| format!("{b:02x}")).collect())
}

/// The shell words that make and enter the directory on a host.
fn remote_dir_words(dir: Option<&str>) -> String {
    match dir {
        None => "d=\"${XDG_CACHE_HOME:-$HOME/.cache}/throng\"".to_string(),
        Some(d) => match d.strip_prefix("~/") {
            Some(rest) => format!("d=\"$HOME\"/{}", shell_quote(rest)),
            None => format!("d={}", shell_quote(d)),
        },
    }
}

/// Copies `local` to every host, a few at a time; the path of the binary
/// on each host, or every host's failure named with its fix.
pub fn copy_all(a: &ClusterConfig, local: &Local, mux: Option<&Mux>) -> Result<Vec<String>> {
    let next = Mutex::new(0usize);
    let done: Mutex<Vec<Option<Result<String, String>>>> = Mutex::new(vec![None; a.hosts.len()]);
    std::thread::scope(|s| {
        for _ in 0..PARALLEL.min(a.hosts.len()) {
            s.spawn(|| loop {
                let i = {
                    let mut n = next.lock().unwrap_or_else(|p| p.into_inner());
                    let i = *n;
                    *n += 1;
                    i
                };
                let Some(h) = a.hosts.get(i) else { break };
                let got = copy_one(a, h, local, mux);
                done.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(got);
            });
        }
    });
    let done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut paths = Vec::new();
    let mut failed = Vec::new();
    for (h, r) in a.hosts.iter().zip(done) {
        match r.unwrap_or_else(|| Err("not copied".into())) {
            Ok(p) => paths.push(p),
            Err(e) => failed.push(format!("host {}: {e}", h.name())),
        }
    }
    if !failed.is_empty() {
        return Err(crate::usage::UsageError(format!(
            "copying throng to the load hosts failed, nothing ran: {}",
            failed.join("; ")
        ))
        .into());
    }
    Ok(paths)
}

/// One host: its directory made, its arch checked, the binary sent unless
/// it holds it already, its hash checked there and the copy run once.
fn copy_one(
    a: &ClusterConfig,
    h: &Host,
    local: &Local,
    mux: Option<&Mux>,
) -> Result<String, String> {
    let name = format!("throng-{}", &local.sha256[..16]);
    // The directory, the arch, and the copy there if any: its hash, and
    // whether it runs (so that a copy found needs no second session).
    let look = format!(
        "{}; mkdir -p \"$d\" && cd \"$d\" && pwd && uname -m && \
         {{ sha256sum {name} 2>/dev/null && ./{name} --version >/dev/null 2>&1 && echo runs; \
         true; }}",
        remote_dir_words(a.remote_dir.as_deref())
    );
    let out = super::ssh::ssh(a, h, mux)
        .arg(look)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ssh: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let (Some(dir), Some(arch), true) = (lines.next(), lines.next(), out.status.success()) else {
        return Err(format!(
            "its directory could not be made ({}): {}; give --remote-dir DIR on a file system \
             it can write",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    };
    if arch.trim() != std::env::consts::ARCH {
        return Err(format!(
            "it is {}, this throng is built for {}: install a throng built for {} there and \
             give --binary PATH instead of --copy-binary",
            arch.trim(),
            std::env::consts::ARCH,
            arch.trim()
        ));
    }
    let path = format!("{}/{name}", dir.trim_end_matches('/'));
    let held = lines.next().is_some_and(|l| l.starts_with(&local.sha256));
    if held && lines.next() == Some("runs") {
        return Ok(path);
    }
    if !held {
        let q = shell_quote(&path);
        // (Its own part file: hosts that share a home directory copy side
        // by side; the rename makes whole files only.)
        let put = format!(
            "p={q}.part.$$; cat > \"$p\" && chmod +x \"$p\" && \
             [ \"$(sha256sum \"$p\" | cut -c1-64)\" = {} ] && mv \"$p\" {q} || \
             {{ rm -f \"$p\"; echo 'the copy did not arrive whole (a full disk, or another SHA-256 there)' >&2; exit 3; }}; \
             {q} --version",
            local.sha256
        );
        let file = std::fs::File::open(&local.path).map_err(|e| e.to_string())?;
        let out = super::ssh::ssh(a, h, mux)
            .arg(put)
            .stdin(file)
            .stdout(Stdio::null())
            .output()
            .map_err(|e| format!("ssh: {e}"))?;
        match out.status.code() {
            Some(3) | Some(255) | None => {
                return Err(format!(
                    "copying to {path} failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
            Some(0) => return Ok(path),
            Some(_) => {}
        }
    }
    // It must run there: a directory mounted noexec, a C library it
    // does not find, show here.
    let out = super::ssh::ssh(a, h, mux)
        .arg(format!("{} --version", shell_quote(&path)))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ssh: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "the copy at {path} does not run ({}): {}; {}",
            out.status,
            err.trim(),
            fix_for_a_copy_that_does_not_run(&err)
        ));
    }
    Ok(path)
}

/// What to do about a copy that the host would not run, from what the
/// host said: a C library older than this build's, or (most often) a
/// directory mounted noexec.
fn fix_for_a_copy_that_does_not_run(stderr: &str) -> &'static str {
    if stderr.contains("GLIBC_") {
        "the host's C library is older than this build's: run cluster from the build of \
         packaging/deb.sh (glibc 2.28 and newer), or give --binary PATH to a throng built there"
    } else {
        "give --remote-dir DIR on a file system mounted with exec"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_dir_is_the_cache_by_default() {
        assert_eq!(
            remote_dir_words(None),
            "d=\"${XDG_CACHE_HOME:-$HOME/.cache}/throng\""
        );
        assert_eq!(remote_dir_words(Some("~/bin")), "d=\"$HOME\"/bin");
        assert_eq!(remote_dir_words(Some("/opt/a b")), "d='/opt/a b'");
    }

    #[test]
    fn a_copy_that_needs_a_newer_glibc_is_told_which_build_runs() {
        // What the loader of Debian 11 says to a build that needs 2.35.
        let old = "/tmp/throng: /lib/x86_64-linux-gnu/libm.so.6: version `GLIBC_2.35' not \
                   found (required by /tmp/throng)";
        assert!(fix_for_a_copy_that_does_not_run(old).contains("packaging/deb.sh"));
        let noexec = "sh: 1: /mnt/throng: Permission denied";
        assert!(fix_for_a_copy_that_does_not_run(noexec).contains("--remote-dir"));
    }

    #[test]
    fn sha256_of_a_file() {
        let p = std::env::temp_dir().join(format!("throng-sha-{}", std::process::id()));
        std::fs::write(&p, b"abc").unwrap();
        assert_eq!(
            sha256_file(&p).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let _ = std::fs::remove_file(&p);
    }
}
