//! `Retry-After`: seconds or an HTTP date, capped.

use std::time::{Duration, SystemTime};

/// The longest wait a `Retry-After` can impose: 1 hour. A receiver asking
/// for more is waited on for an hour, then retried on schedule.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60 * 60);

/// How long a `Retry-After` header value asks to wait at `now`: delay
/// seconds (`120`) or an HTTP date (`Wed, 21 Oct 2015 07:28:00 GMT`),
/// capped at [`MAX_RETRY_AFTER`]. A date in the past means no wait. `None`
/// for anything else, which the sender ignores (its schedule applies).
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use hooklatch::sender::rules::parse_retry_after;
///
/// let now = UNIX_EPOCH + Duration::from_secs(1_445_412_400); // 07:26:40
/// assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
/// assert_eq!(
///     parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now),
///     Some(Duration::from_secs(80))
/// );
/// assert_eq!(parse_retry_after("soon", now), None);
/// assert_eq!(parse_retry_after("999999999999", now), Some(Duration::from_secs(3600)));
/// ```
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if value.is_empty() || value.len() > 64 {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        // Overlong digit strings are just "very long": cap them.
        let seconds = value.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(
        date.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(MAX_RETRY_AFTER),
    )
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    #[test]
    fn reads_seconds_dates_and_refuses_the_rest() {
        let now = UNIX_EPOCH + Duration::from_secs(1_445_412_400);
        assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("Wednesday, 21-Oct-15 07:28:00 GMT", now),
            Some(Duration::from_secs(80))
        );
        assert_eq!(
            parse_retry_after("Wed Oct 21 07:28:00 2015", now),
            Some(Duration::from_secs(80))
        );
        assert_eq!(
            parse_retry_after("Tue, 20 Oct 2015 07:28:00 GMT", now),
            Some(Duration::ZERO),
            "a date in the past: no wait"
        );
        for bad in ["", "-1", "1.5", "1e3", "+5", "12 seconds", &"9".repeat(65)] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
        assert_eq!(
            parse_retry_after(&"9".repeat(40), now),
            Some(MAX_RETRY_AFTER)
        );
    }
}
