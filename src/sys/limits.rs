//! RLIMIT_NOFILE: how many fds this process may hold, and raising it.

use std::io;

use super::proc::{self, CAP_SYS_RESOURCE};

/// The fd limit before and after [`raise_nofile`], and what stood in the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdLimit {
    pub soft_before: u64,
    pub hard_before: u64,
    pub soft: u64,
    pub hard: u64,
    /// fs.nr_open: the most any process may be allowed.
    pub nr_open: Option<u64>,
    /// The hard limit could not be raised toward fs.nr_open (no
    /// CAP_SYS_RESOURCE, as in most containers).
    pub hard_is_cap: bool,
}

impl FdLimit {
    /// One sentence for the start-up banner.
    pub fn describe(&self) -> String {
        let mut s = format!("fd limit {} (hard {})", self.soft, self.hard);
        if self.soft != self.soft_before {
            s.push_str(&format!(", raised from {}", self.soft_before));
        }
        if self.hard != self.hard_before {
            s.push_str(&format!(", hard raised from {}", self.hard_before));
        }
        if self.hard_is_cap {
            let why = if proc::has_capability(CAP_SYS_RESOURCE) {
                "the kernel refused more".to_string()
            } else {
                "no CAP_SYS_RESOURCE to raise the hard limit".to_string()
            };
            s.push_str(&format!("; {why}"));
        }
        s
    }
}

fn get() -> io::Result<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the rlimit we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((r.rlim_cur, r.rlim_max))
}

fn set(soft: u64, hard: u64) -> io::Result<()> {
    let r = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit only reads the rlimit we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The current (soft, hard) fd limit.
pub fn nofile() -> io::Result<(u64, u64)> {
    get()
}

/// Raises the soft fd limit to the hard one, and both as far as fs.nr_open
/// allows when the process may (root with CAP_SYS_RESOURCE).
pub fn raise_nofile() -> io::Result<FdLimit> {
    let (soft_before, hard_before) = get()?;
    let nr_open = proc::sysctl_u64("fs.nr_open");
    let mut hard_is_cap = false;
    if let Some(max) = nr_open.filter(|&m| m > hard_before) {
        if set(max, max).is_err() {
            hard_is_cap = true;
        }
    }
    let (soft, hard) = get()?;
    if soft < hard {
        set(hard, hard)?;
    }
    let (soft, hard) = get()?;
    Ok(FdLimit {
        soft_before,
        hard_before,
        soft,
        hard,
        nr_open,
        hard_is_cap,
    })
}

/// Number of fds this process holds now.
pub fn fds_in_use() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count().saturating_sub(1)) // the directory's own fd
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raise_reaches_hard_limit() {
        let l = raise_nofile().unwrap();
        assert_eq!(l.soft, l.hard);
        assert!(l.soft >= l.soft_before);
        assert!(l.describe().starts_with("fd limit"));
    }

    #[test]
    fn counts_open_fds() {
        let files: Vec<_> = (0..5)
            .map(|_| std::fs::File::open("/proc/self/status").unwrap())
            .collect();
        // stdin, stdout, stderr and ours at least; other tests run beside.
        assert!(fds_in_use() >= 3 + files.len());
    }
}
