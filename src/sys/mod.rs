//! What the operating system allows: file-descriptor limits, sysctls, the
//! kernel's TCP counters. Reads and raises limits of this process only; it
//! never changes a host-wide setting (`throng tune --apply` will, when asked).

pub mod capacity;
pub mod connect_curve;
pub mod fd_handoff;
pub mod limits;
pub mod proc;
pub mod signals;
pub mod sources;
pub mod timer;
pub mod tune;

/// Makes the threads of this process share the one main heap, with
/// nothing kept spare at its top. A client's workers allocate little once
/// connected (about a hundred blocks a second), but a stall of the peer
/// makes them allocate in a burst; each in a heap of its own (glibc's
/// default), the burst's pages would stay resident for good: a thread's
/// heap gives back the top of its heap only above a threshold and never
/// in [`release_free_memory`]. In the main heap that once-a-second trim
/// gives them back (stalls of the server of 100 and 300 ms under the
/// soak's load leave the client +24 kB for good instead of +212 kB;
/// bench/RESULTS.md). Setting the pad also fixes the threshold above which
/// a block is mapped apart at glibc's 128 kB (otherwise it rises with the
/// blocks freed): such blocks go back to the system as they are freed.
/// To be called before the process starts a thread: glibc fixes the number
/// of heaps when a second thread first allocates.
pub fn one_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes no pointer; it sets the allocator's parameters.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_TOP_PAD, 0);
    }
}

/// Puts the calling thread below every other on its cores (SCHED_IDLE):
/// for a thread that watches rather than measures (the server's sampler).
/// A worker that wakes takes the core from it at once; otherwise its
/// sample of a server's fd table and the kernel's tables (milliseconds
/// with thousands of connections, every 250 ms) would hold the worker's
/// core, and a paced worker sharing it would send its queries
/// milliseconds late. On a
/// saturated host its samples come less often (the final one is taken by
/// the main thread). Best effort: an error leaves the thread as it was.
pub fn background() {
    #[cfg(target_os = "linux")]
    {
        let p = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; `p` outlives the call.
        let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &p) };
    }
}

/// Gives the memory the allocator holds free back to the system (glibc's
/// `malloc_trim`: the free pages inside every arena, not only at the top).
/// A long run's client calls it once a second: without it the pages its
/// per-second work and its connections' churn free stay resident, and
/// its memory creeps for minutes though what it holds is flat
/// (bench/soak.sh). It costs the page faults of pages used again.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer and only returns free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// "ECONNABORTED (103)" style names for the errnos throng reports.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::ENOBUFS => "ENOBUFS",
        libc::ENOMEM => "ENOMEM",
        libc::ECONNABORTED => "ECONNABORTED",
        libc::EPROTO => "EPROTO",
        libc::EINVAL => "EINVAL",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EIO => "EIO",
        _ => "",
    };
    if name.is_empty() {
        format!("errno {errno}")
    } else {
        format!("{name} ({errno})")
    }
}
