//! The result file's types and their merge: what a client run measured
//! ([`Outcome`], its seconds [`Sample`]), the file written from it
//! ([`RunResult`]) and read back, and the merge of the results of one
//! run's slices. Below engine, report and cluster, which import it to
//! write, read or merge a result; it runs no traffic and prints nothing.

pub mod compared;
mod convert;
mod file;
mod measured;
mod merge;
mod sample;

pub use file::{
    parse, read, Connections, Dns, Environment, LatencyResult, Part, PushResult, Queries,
    RunResult, SliceOf, Verdict, MAX_COUNT, SCHEMA_VERSION,
};
pub use measured::{ControlEvent, Outcome, QueryOutcome, Wall};
pub use merge::merge;
pub use sample::Sample;
