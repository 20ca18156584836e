//! The connections a worker owes (reconnects, recycled ones) and how soon
//! it may replace them: at once while the server serves what it opens;
//! one an interval, the interval doubling, while it refuses them.

use std::time::{Duration, Instant};

/// The first wait before replacing a connection the server refused, and
/// the longest (it doubles at each refusal in a row): a server at its cap
/// sees a replacement a second per worker, not a connection storm.
pub(super) const BACKOFF_FIRST: Duration = Duration::from_millis(10);
pub(super) const BACKOFF_MOST: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub(super) struct Replacements {
    owed: u64,
    made: u64,
    /// The wait before the next replacement while the server refuses
    /// (ends connections before answering anything): doubled at each
    /// refusal from [`BACKOFF_FIRST`] up to [`BACKOFF_MOST`], nothing once
    /// a connection is served.
    backoff: Duration,
    /// No replacement starts before this.
    replace_at: Option<Instant>,
}

impl Replacements {
    /// Whether a replacement may start now; if so it is no longer owed.
    pub(super) fn take(&mut self, now: Instant) -> bool {
        if self.owed == 0 || self.replace_at.is_some_and(|at| now < at) {
            return false;
        }
        if !self.backoff.is_zero() {
            // One replacement an interval while refused.
            self.replace_at = Some(now + self.backoff);
        }
        self.owed -= 1;
        true
    }

    /// The server ended a connection before answering anything on it:
    /// replacements wait longer.
    pub(super) fn refused(&mut self, now: Instant) {
        self.backoff = (self.backoff * 2).clamp(BACKOFF_FIRST, BACKOFF_MOST);
        self.replace_at = Some(now + self.backoff);
    }

    /// Whether a connection toward a level may open now: while the server
    /// refuses, one an interval (as replacements).
    pub(super) fn may_open(&mut self, now: Instant) -> bool {
        if self.replace_at.is_some_and(|at| now < at) {
            return false;
        }
        if !self.backoff.is_zero() {
            self.replace_at = Some(now + self.backoff);
        }
        true
    }

    /// A connection was served (answered): replacements go at once again.
    pub(super) fn served(&mut self) {
        if !self.backoff.is_zero() {
            self.backoff = Duration::ZERO;
            self.replace_at = None;
        }
    }

    /// The number of the next replacement made, counting from 0.
    pub(super) fn next(&mut self) -> u64 {
        self.made += 1;
        self.made - 1
    }

    /// One more connection is owed.
    pub(super) fn owe(&mut self) {
        self.owed += 1;
    }

    /// A debt forgiven (a level that falls), if one was owed.
    pub(super) fn forgive(&mut self) -> bool {
        let had = self.owed > 0;
        self.owed = self.owed.saturating_sub(1);
        had
    }

    pub(super) fn owed(&self) -> u64 {
        self.owed
    }

    /// When the next owed replacement may start, if one is owed.
    pub(super) fn wake_at(&self) -> Option<Instant> {
        (self.owed > 0).then(|| self.replace_at.unwrap_or_else(Instant::now))
    }
}
