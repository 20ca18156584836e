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
