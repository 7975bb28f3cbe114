//! The time a verifier checks timestamps against.

use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time, injectable for tests.
///
/// Implemented for [`SystemClock`] and for any `Fn() -> SystemTime`.
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use hooklatch::verify::Clock;
///
/// let fixed = || UNIX_EPOCH + Duration::from_secs(1_614_265_330);
/// assert_eq!(fixed.now(), UNIX_EPOCH + Duration::from_secs(1_614_265_330));
/// ```
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The operating system's clock. The default.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

impl<F: Fn() -> SystemTime + Send + Sync + 'static> Clock for F {
    fn now(&self) -> SystemTime {
        self()
    }
}

/// Whole seconds since the Unix epoch, negative before it, saturating.
pub(crate) fn unix_seconds(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => i64::try_from(before.duration().as_secs()).map_or(i64::MIN, |s| -s),
    }
}
