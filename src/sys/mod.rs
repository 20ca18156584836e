//! What the operating system allows: file-descriptor limits, sysctls, the
//! kernel's TCP counters. Reads and raises limits of this process only; it
//! never changes a host-wide setting (`throng tune --apply` will, when asked).

pub mod capacity;
pub mod limits;
pub mod proc;
pub mod signals;
pub mod sources;
pub mod timer;
pub mod tune;

/// Gives the memory the allocator holds free back to the system (glibc's
/// `malloc_trim`: the free pages inside every arena, not only at the top).
/// A long run's client calls it once a second: without it the pages its
/// per-second work and its connections' churn freed stayed resident, and
/// its memory crept for minutes though what it held was flat
/// (bench/soak.sh). It costs the page faults of pages used again.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer and only returns free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}
