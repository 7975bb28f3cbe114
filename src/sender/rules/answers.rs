//! [`Answers`]: what a policy does with each kind of answer, as plain data
//! (a status table, rules per class, the cap on `Retry-After`), so that a
//! policy can be stored and read back.

use std::time::{Duration, SystemTime};

use super::retry_after::{MAX_RETRY_AFTER, parse_retry_after};

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// 2xx: delivered; stop.
    Delivered,
    /// Stop, and disable the endpoint: 410 Gone by default, any answer
    /// the policy handles with [`Handling::Disable`].
    Gone,
    /// A status the sender was told not to retry: stop, the delivery is dead.
    GiveUp,
    /// Retry: on schedule, but not before `not_before` (from `Retry-After`
    /// on 429 or 503, capped at an hour).
    Retry {
        /// The wait the receiver asked for, if any.
        not_before: Option<Duration>,
    },
}

/// What a delivery does after an answer that is not a 2xx.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Handling {
    /// Retry on schedule (an ordinary failure).
    Retry,
    /// Stop: the delivery is dead and can be replayed.
    GiveUp,
    /// Stop and disable the endpoint ([`Outcome::Gone`]), as 410 does by
    /// default.
    Disable,
}

/// What a policy does with each answer: 2xx is always a success; an
/// exact status in the table wins over its class; 3xx, 4xx (other than
/// 429) and a refused address follow their class's rule; 5xx, 429, a
/// timeout and a connection error are retried. 429 and 503 wait at least
/// their `Retry-After`, capped.
///
/// The default retries everything but 410, which disables the endpoint,
/// and caps `Retry-After` at [`MAX_RETRY_AFTER`] (1 hour).
///
/// ```
/// use std::time::SystemTime;
/// use hooklatch::sender::rules::{Answers, Handling, Outcome};
///
/// let now = SystemTime::now();
/// // Retry only network errors, 5xx and 429.
/// let answers = Answers::default()
///     .with_redirects(Handling::GiveUp)
///     .with_client_errors(Handling::GiveUp)
///     .with_status(410, Handling::GiveUp);
/// assert_eq!(answers.classify(Some(404), None, now), Outcome::GiveUp);
/// assert_eq!(answers.classify(Some(302), None, now), Outcome::GiveUp);
/// assert_eq!(answers.classify(Some(410), None, now), Outcome::GiveUp);
/// assert_eq!(answers.classify(Some(429), None, now), Outcome::Retry { not_before: None });
/// assert_eq!(answers.classify(None, None, now), Outcome::Retry { not_before: None });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Answers {
    statuses: Vec<(u16, Handling)>,
    redirects: Handling,
    client_errors: Handling,
    refused: Handling,
    retry_after_cap: Duration,
}

impl Default for Answers {
    fn default() -> Self {
        Self {
            statuses: vec![(410, Handling::Disable)],
            redirects: Handling::Retry,
            client_errors: Handling::Retry,
            refused: Handling::Retry,
            retry_after_cap: MAX_RETRY_AFTER,
        }
    }
}

impl Answers {
    /// Handles `status` so, over its class's rule (replacing an earlier
    /// rule for it). `with_status(410, Handling::Retry)` makes 410 an
    /// ordinary failure. A 2xx is always a success.
    #[must_use]
    pub fn with_status(mut self, status: u16, handling: Handling) -> Self {
        self.statuses.retain(|(code, _)| *code != status);
        self.statuses.push((status, handling));
        self
    }

    /// Handles 3xx answers so (redirects are never followed). Defaults to
    /// [`Handling::Retry`].
    #[must_use]
    pub fn with_redirects(mut self, handling: Handling) -> Self {
        self.redirects = handling;
        self
    }

    /// Handles 4xx answers other than 429 (and statuses in the table) so.
    /// Defaults to [`Handling::Retry`].
    #[must_use]
    pub fn with_client_errors(mut self, handling: Handling) -> Self {
        self.client_errors = handling;
        self
    }

    /// Handles an address the SSRF guard refused (a private or internal
    /// address) so. Defaults to [`Handling::Retry`]: DNS may change.
    #[must_use]
    pub fn with_refused(mut self, handling: Handling) -> Self {
        self.refused = handling;
        self
    }

    /// Waits at most `cap` for a `Retry-After` on 429 or 503 (never more
    /// than [`MAX_RETRY_AFTER`]). Defaults to 1 hour; zero ignores the
    /// header.
    #[must_use]
    pub fn with_retry_after_cap(mut self, cap: Duration) -> Self {
        self.retry_after_cap = cap.min(MAX_RETRY_AFTER);
        self
    }

    /// The rule for `status`: from the table, else its class's.
    pub fn handling(&self, status: u16) -> Handling {
        if let Some((_, handling)) = self.statuses.iter().find(|(code, _)| *code == status) {
            return *handling;
        }
        match status {
            300..=399 => self.redirects,
            429 => Handling::Retry,
            400..=499 => self.client_errors,
            _ => Handling::Retry,
        }
    }

    /// The rule for a refused address.
    pub fn refused(&self) -> Handling {
        self.refused
    }

    /// The longest `Retry-After` waited for.
    pub fn retry_after_cap(&self) -> Duration {
        self.retry_after_cap
    }

    /// What an answer with `status` (`None` for a timeout or a connection
    /// error) and `retry_after` at `now` means.
    pub fn classify(
        &self,
        status: Option<u16>,
        retry_after: Option<&str>,
        now: SystemTime,
    ) -> Outcome {
        let Some(status) = status else {
            return Outcome::Retry { not_before: None };
        };
        if (200..=299).contains(&status) {
            return Outcome::Delivered;
        }
        match self.handling(status) {
            Handling::Disable => Outcome::Gone,
            Handling::GiveUp => Outcome::GiveUp,
            Handling::Retry => Outcome::Retry {
                not_before: matches!(status, 429 | 503)
                    .then(|| retry_after.and_then(|value| parse_retry_after(value, now)))
                    .flatten()
                    .filter(|_| !self.retry_after_cap.is_zero())
                    .map(|asked| asked.min(self.retry_after_cap)),
            },
        }
    }

    /// What a refused address means.
    pub(crate) fn classify_refused(&self) -> Outcome {
        match self.refused {
            Handling::Retry => Outcome::Retry { not_before: None },
            Handling::GiveUp => Outcome::GiveUp,
            Handling::Disable => Outcome::Gone,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_wins_over_the_class() {
        let now = SystemTime::now();
        let answers = Answers::default()
            .with_client_errors(Handling::GiveUp)
            .with_status(408, Handling::Retry)
            .with_status(410, Handling::Retry);
        assert_eq!(
            answers.classify(Some(408), None, now),
            Outcome::Retry { not_before: None }
        );
        assert_eq!(
            answers.classify(Some(410), None, now),
            Outcome::Retry { not_before: None }
        );
        assert_eq!(answers.classify(Some(400), None, now), Outcome::GiveUp);
        assert_eq!(
            answers.classify(Some(500), None, now),
            Outcome::Retry { not_before: None }
        );
        assert_eq!(
            Answers::default().classify(Some(410), None, now),
            Outcome::Gone
        );
    }

    #[test]
    fn retry_after_is_capped_by_the_policy() {
        let now = SystemTime::now();
        let capped = Answers::default().with_retry_after_cap(Duration::from_secs(60));
        assert_eq!(
            capped.classify(Some(503), Some("600"), now),
            Outcome::Retry {
                not_before: Some(Duration::from_secs(60))
            }
        );
        let ignored = Answers::default().with_retry_after_cap(Duration::ZERO);
        assert_eq!(
            ignored.classify(Some(429), Some("600"), now),
            Outcome::Retry { not_before: None }
        );
        assert_eq!(
            Answers::default()
                .with_retry_after_cap(Duration::from_secs(99_999))
                .retry_after_cap(),
            MAX_RETRY_AFTER
        );
    }
}
