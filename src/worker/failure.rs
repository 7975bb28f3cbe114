//! [`Failure`]: what a handler says went wrong, and what to do next.

use std::fmt;
use std::time::Duration;

/// Why a handler failed, and what the worker does next: retry after its
/// backoff (the default, and what `?` on any error gives), retry after a
/// delay the handler chose, or dead-letter the event now. The text is the
/// reason a dead letter keeps.
///
/// ```
/// use std::time::Duration;
/// use hooklatch::worker::Failure;
///
/// // Any error converts, so `?` works in a handler.
/// let parse: Result<u32, _> = "x".parse::<u32>();
/// let failure = Failure::from(parse.unwrap_err());
/// assert_eq!(failure.reason(), "invalid digit found in string");
///
/// // The provider is rate limiting us: come back in 30 s.
/// let later = Failure::retry_after(Duration::from_secs(30), "rate limited");
/// // Retrying cannot help: dead-letter it now, with the reason.
/// let never = Failure::dead_letter("customer cus_1 does not exist");
/// # let _ = (later, never);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    reason: String,
    then: Then,
}

/// What the worker does with a failed event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    /// Retry after the worker's backoff.
    Backoff,
    /// Retry after this delay.
    After(Duration),
    /// Dead-letter now.
    DeadLetter,
}

impl Failure {
    /// Retry after the worker's backoff; dead-lettered with `reason` after
    /// the last attempt.
    pub fn retry(reason: impl fmt::Display) -> Self {
        Self::new(reason, Then::Backoff)
    }

    /// Retry after `delay` (a `Retry-After` the handler was given, say)
    /// instead of the worker's backoff.
    pub fn retry_after(delay: Duration, reason: impl fmt::Display) -> Self {
        Self::new(reason, Then::After(delay))
    }

    /// Dead-letter the event now with `reason`, whatever attempts it has
    /// left: a retry cannot help.
    pub fn dead_letter(reason: impl fmt::Display) -> Self {
        Self::new(reason, Then::DeadLetter)
    }

    /// The reason, as a dead letter keeps it.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    pub(crate) fn then(&self) -> Then {
        self.then
    }

    fn new(reason: impl fmt::Display, then: Then) -> Self {
        let mut reason = reason.to_string();
        if reason.len() > MAX_REASON_LEN {
            let mut end = MAX_REASON_LEN;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
        }
        Self { reason, then }
    }
}

/// The longest reason kept, in bytes: a dead letter's reason is for a
/// person to read, and a store row should not grow with an error's dump.
pub const MAX_REASON_LEN: usize = 2048;

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// Any error is a failure to retry, its text (and its sources', joined by
/// `: `) the reason.
impl<E: std::error::Error + Send + Sync + 'static> From<E> for Failure {
    fn from(error: E) -> Self {
        let mut reason = error.to_string();
        let mut source = error.source();
        while let Some(cause) = source {
            reason.push_str(": ");
            reason.push_str(&cause.to_string());
            source = cause.source();
        }
        Self::retry(reason)
    }
}
