//! [`StoreOptions`]: the settings every claim store takes (the clock only
//! the memory store keeps time by).

use std::time::Duration;

use crate::verify::{Clock, SystemClock};

/// A claim and inbox store's settings: retention, visibility timeout and
/// attempts, which every store takes, and a clock, which only
/// [`MemoryInbox`](super::MemoryInbox) keeps time by (see
/// [`with_clock`](Self::with_clock)).
#[derive(Clone)]
pub struct StoreOptions {
    retention: Duration,
    visibility_timeout: Duration,
    max_attempts: u32,
    clock: std::sync::Arc<dyn Clock>,
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("retention", &self.retention)
            .field("visibility_timeout", &self.visibility_timeout)
            .field("max_attempts", &self.max_attempts)
            .finish_non_exhaustive()
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(7 * 24 * 60 * 60),
            visibility_timeout: Duration::from_secs(30),
            max_attempts: 10,
            clock: std::sync::Arc::new(SystemClock),
        }
    }
}

impl StoreOptions {
    /// How long a claim is kept. Must exceed the sender's whole retry window
    /// (Svix retries for about 28 hours, Stripe for 3 days). Defaults to 7 days.
    #[must_use]
    pub fn with_retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// How long a taken event stays invisible to other workers before it is
    /// delivered again (its worker is presumed dead). Defaults to 30 seconds.
    #[must_use]
    pub fn with_visibility_timeout(mut self, timeout: Duration) -> Self {
        self.visibility_timeout = timeout;
        self
    }

    /// After how many deliveries an event that keeps failing is
    /// dead-lettered. Defaults to 10. At least 1.
    #[must_use]
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts.max(1);
        self
    }

    /// The clock [`MemoryInbox`](super::MemoryInbox) keeps time by. Defaults to the system
    /// clock.
    ///
    /// Shared stores never decide on the client's clock: SQLite reads the
    /// host's clock in SQL, Postgres its `statement_timestamp()` and Redis its
    /// `TIME`, so two clients whose clocks disagree by more than a lease
    /// still agree when it ends. They ignore this setting.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = std::sync::Arc::new(clock);
        self
    }

    /// Now, in ms since the epoch, on the configured clock.
    pub(crate) fn now_millis(&self) -> i64 {
        crate::store::unix_millis(self.clock.now())
    }

    /// The retention.
    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// The visibility timeout.
    pub fn visibility_timeout(&self) -> Duration {
        self.visibility_timeout
    }

    /// The most deliveries before dead-lettering.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }
}
