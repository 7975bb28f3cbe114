//! What one attempt's result means for the delivery.

use std::time::{Duration, SystemTime};

use super::retry_after::parse_retry_after;

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx: delivered; stop.
    Delivered,
    /// 410 Gone: stop, and disable the endpoint.
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

/// Classifies an attempt. `status` is `None` for a timeout or connection
/// error. 3xx is not followed and counts as a failure, like other 4xx and
/// 5xx; statuses in `give_up_on` (none by default) end the delivery.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use hooklatch::sender::{Outcome, classify};
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
    match status {
        Some(200..=299) => Outcome::Delivered,
        Some(410) => Outcome::Gone,
        Some(code) if give_up_on.contains(&code) => Outcome::GiveUp,
        Some(429 | 503) => Outcome::Retry {
            not_before: retry_after.and_then(|value| parse_retry_after(value, now)),
        },
        _ => Outcome::Retry { not_before: None },
    }
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
