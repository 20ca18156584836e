//! Scale out: one scenario run as slices (processes on this host, or
//! hosts), and the exact merge of their results.

pub mod copy;
pub mod files;
pub mod host;
pub mod launcher;
pub mod merge;
pub mod ssh;
pub mod start;
