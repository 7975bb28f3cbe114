//! One attempt, in pure rules: what its answer means ([`classify`]), what
//! the delivery does next ([`Step`]), and the record kept of it
//! ([`Attempt`]). No I/O and no clock: the caller passes the time.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::answers::{Answers, Handling, Outcome};
use super::policy::Policy;
use super::states::Final;

/// Classifies an attempt under the default [`Answers`] with the statuses
/// in `give_up_on` ending the delivery. `status` is `None` for a timeout or
/// connection error. 3xx is not followed and counts as a failure, like
/// other 4xx and 5xx; 410 disables the endpoint. A policy classifies with
/// its own [`Answers`].
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use hooklatch::sender::rules::{Outcome, classify};
///
/// let now = SystemTime::now();
/// assert_eq!(classify(Some(204), None, now, &[]), Outcome::Delivered);
/// assert_eq!(classify(Some(410), None, now, &[]), Outcome::Gone);
/// assert_eq!(
///     classify(Some(429), Some("7"), now, &[]),
///     Outcome::Retry { not_before: Some(Duration::from_secs(7)) }
/// );
/// assert_eq!(classify(None, None, now, &[]), Outcome::Retry { not_before: None });
/// ```
pub fn classify(
    status: Option<u16>,
    retry_after: Option<&str>,
    now: SystemTime,
    give_up_on: &[u16],
) -> Outcome {
    give_up_on
        .iter()
        .fold(Answers::default(), |answers, code| {
            answers.with_status(*code, Handling::GiveUp)
        })
        .classify(status, retry_after, now)
}

/// The wait before the next attempt: the schedule's delay, or the
/// receiver's `Retry-After` if that is longer.
pub fn next_wait(scheduled: Duration, outcome: Outcome) -> Duration {
    match outcome {
        Outcome::Retry {
            not_before: Some(asked),
        } => scheduled.max(asked),
        _ => scheduled,
    }
}

/// Why a delivery waited before an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitReason {
    /// The schedule's delay.
    Schedule,
    /// The receiver's `Retry-After`, longer than the schedule's delay.
    RetryAfter,
}

/// One attempt of a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempt {
    /// 1 for the first attempt; a replay goes on counting.
    pub number: u32,
    /// When it was signed and sent.
    pub sent_at: SystemTime,
    /// How long the delivery waited before it (schedule or `Retry-After`),
    /// and why.
    pub waited: Duration,
    /// Why it waited that long.
    pub reason: WaitReason,
    /// How long it was held past that wait: by an open breaker, the
    /// endpoint's concurrency limit, or a dispatcher's polling.
    pub held: Duration,
    /// The status, or why there was none.
    pub result: Result<u16, AttemptError>,
    /// How long the attempt took.
    pub duration: Duration,
    /// The first [`EXCERPT_LEN`](crate::sender::transport::EXCERPT_LEN) bytes of the response body.
    pub excerpt: Vec<u8>,
}

impl Attempt {
    /// Attempt `number`, sent at `sent_at` with `result`, after no wait,
    /// taking no time and with an empty excerpt (for a store's tests and
    /// benchmarks; the sender fills in every field).
    pub fn new(number: u32, sent_at: SystemTime, result: Result<u16, AttemptError>) -> Self {
        Self {
            number,
            sent_at,
            waited: Duration::ZERO,
            reason: WaitReason::Schedule,
            held: Duration::ZERO,
            result,
            duration: Duration::ZERO,
            excerpt: Vec::new(),
        }
    }
}

/// Why an attempt has no status, as its record keeps it: the text an
/// outbox stores, and the typed error while the attempt is fresh
/// ([`transport_error`](Self::transport_error); an attempt read back from
/// an outbox has the text only). Two are equal when their texts are.
#[derive(Debug, Clone)]
pub struct AttemptError {
    text: String,
    cause: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl AttemptError {
    /// An error known only by its text: read back from an outbox, or one
    /// that happened before anything was sent.
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            cause: None,
        }
    }

    /// An error with its text and the typed error it came from. The rules
    /// keep the cause without knowing its type; the transport, which made
    /// it, reads it back.
    pub(crate) fn with_cause(
        text: String,
        cause: Arc<dyn std::error::Error + Send + Sync>,
    ) -> Self {
        Self {
            text,
            cause: Some(cause),
        }
    }

    /// The text an outbox stores: the error's message and its sources'.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The typed error, while the attempt is fresh.
    pub(crate) fn cause(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.cause.as_deref()
    }
}

impl std::fmt::Display for AttemptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq for AttemptError {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for AttemptError {}

/// What a delivery does after an attempt: the one step a delivery takes,
/// in [`deliver`](crate::sender::deliver) and in a
/// [`Dispatcher`](crate::sender::Dispatcher), and what an outbox records
/// ([`DeliveryStore::finish`](crate::sender::outbox::DeliveryStore::finish)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// Try again at `due`, after waiting `wait` for `reason`.
    Retry {
        /// When the next attempt is due.
        due: SystemTime,
        /// How long that is after this attempt.
        wait: Duration,
        /// Why that long.
        reason: WaitReason,
    },
    /// The delivery ended.
    Done(Final),
}

/// What follows attempt `number` of a delivery whose answer was `outcome`,
/// at `now`; `random` is the jitter draw in `[0, 1)`.
pub(crate) fn plan(
    policy: &Policy,
    number: u32,
    outcome: Outcome,
    random: f64,
    now: SystemTime,
) -> Step {
    match outcome {
        Outcome::Delivered => Step::Done(Final::Delivered),
        Outcome::Gone => Step::Done(Final::Gone),
        Outcome::GiveUp => Step::Done(Final::Dead),
        Outcome::Retry { .. } => match policy.schedule().delay(number + 1, random) {
            None => Step::Done(Final::Dead),
            Some(scheduled) => {
                let wait = next_wait(scheduled, outcome);
                let reason = if wait > scheduled {
                    WaitReason::RetryAfter
                } else {
                    WaitReason::Schedule
                };
                Step::Retry {
                    due: later(now, wait),
                    wait,
                    reason,
                }
            }
        },
    }
}

/// The schedule's wait before the first attempt.
pub(crate) fn first_wait(policy: &Policy, random: f64) -> Duration {
    policy.schedule().delay(1, random).unwrap_or(Duration::ZERO)
}

/// `now + wait`, or `now` if that cannot be represented.
pub(crate) fn later(now: SystemTime, wait: Duration) -> SystemTime {
    now.checked_add(wait).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_every_kind_of_answer() {
        let now = SystemTime::now();
        for status in [200, 201, 202, 204, 299] {
            assert_eq!(classify(Some(status), None, now, &[]), Outcome::Delivered);
        }
        for status in [301, 302, 400, 401, 404, 418, 500, 502, 504] {
            assert_eq!(
                classify(Some(status), Some("60"), now, &[]),
                Outcome::Retry { not_before: None },
                "{status}: Retry-After only counts on 429 and 503"
            );
        }
        assert_eq!(classify(Some(400), None, now, &[400, 422]), Outcome::GiveUp);
        assert_eq!(
            classify(Some(503), Some("junk"), now, &[]),
            Outcome::Retry { not_before: None }
        );
        assert_eq!(
            classify(Some(503), Some("999999"), now, &[]),
            Outcome::Retry {
                not_before: Some(Duration::from_secs(3600))
            }
        );
    }

    #[test]
    fn waits_the_longer_of_schedule_and_retry_after() {
        let asked = Outcome::Retry {
            not_before: Some(Duration::from_secs(30)),
        };
        assert_eq!(
            next_wait(Duration::from_secs(5), asked),
            Duration::from_secs(30)
        );
        assert_eq!(
            next_wait(Duration::from_secs(300), asked),
            Duration::from_secs(300)
        );
    }
}
