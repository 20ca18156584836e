//! The result file's types and their merge: what a client run measured
//! ([`Outcome`], its seconds [`Sample`]), the file written from it
//! ([`RunResult`]) and read back, and the merge of the results of one
//! run's slices; the compare file; the server's stats line. One type per
//! format: the writer and every reader share it, so a renamed key cannot go
//! unseen. Below engine, server, report and cluster, which import it to
//! write, read or merge a file; it runs no traffic and prints nothing.

pub mod compared;
mod convert;
mod file;
pub mod limit;
mod measured;
mod merge;
mod sample;
pub mod schema;
pub mod server_second;

pub use crate::verdict::{Cause, Code, Level, Side, Verdict};
pub use convert::ok_answers;
pub use file::{
    parse, read, CheckOutcome, Connections, Dns, Environment, LatencyResult, Part, PushResult,
    Queries, RunResult, SliceOf, MAX_COUNT, SCHEMA_VERSION,
};
pub use measured::{ControlEvent, Outcome, QueryOutcome, Wall};
pub use merge::merge;
pub use sample::Sample;
