//! A mistake in how throng was called: the error every command raises for
//! a bad flag value, a busy port, an impossible plan. Below every module
//! that raises it (it uses none of them); `main` turns it into exit code 2.

/// A mistake in how throng was called: a bad flag value, a busy port, an
/// impossible plan. Exits with code 2; the message says what to change.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);
