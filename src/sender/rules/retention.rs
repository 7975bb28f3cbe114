//! [`Retention`]: how long an outbox keeps a delivery in each state.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::states::DeliveryState;

/// How long an outbox keeps a delivery in each state before
/// [`Dispatcher::purge_by_policy`](crate::sender::Dispatcher::purge_by_policy)
/// deletes it with its attempts; `None` keeps it until deleted otherwise.
/// Delivered, gone and dead deliveries are counted from when they ended,
/// pending ones from when they were sent. Plain data, stored with a policy.
///
/// ```
/// use std::time::Duration;
/// use hooklatch::sender::outbox::Retention;
///
/// const DAY: Duration = Duration::from_secs(24 * 3600);
/// let dead_letters = Retention::KEEP_ALL.with_dead(Some(30 * DAY));
/// assert_eq!(dead_letters.dead, Some(30 * DAY));
/// assert_eq!(dead_letters.delivered, None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Retention {
    /// Delivered deliveries, from when they were delivered.
    pub delivered: Option<Duration>,
    /// Gone deliveries (the endpoint answered 410), from when they ended.
    pub gone: Option<Duration>,
    /// Dead deliveries (out of attempts), from when they ended: how long
    /// they can be replayed.
    pub dead: Option<Duration>,
    /// Pending deliveries, from when they were sent: how long the backlog
    /// of an endpoint that is failing or disabled is kept.
    pub pending: Option<Duration>,
}

impl Retention {
    /// Keeps every delivery. The default.
    pub const KEEP_ALL: Self = Self {
        delivered: None,
        gone: None,
        dead: None,
        pending: None,
    };

    /// Delivered, gone and dead deliveries each kept for `age` after they
    /// ended: a history of that length.
    pub const fn ended_kept_for(age: Duration) -> Self {
        Self {
            delivered: Some(age),
            gone: Some(age),
            dead: Some(age),
            pending: None,
        }
    }

    /// With delivered deliveries kept for `age`.
    #[must_use]
    pub const fn with_delivered(mut self, age: Option<Duration>) -> Self {
        self.delivered = age;
        self
    }

    /// With gone deliveries kept for `age`.
    #[must_use]
    pub const fn with_gone(mut self, age: Option<Duration>) -> Self {
        self.gone = age;
        self
    }

    /// With dead deliveries kept for `age`.
    #[must_use]
    pub const fn with_dead(mut self, age: Option<Duration>) -> Self {
        self.dead = age;
        self
    }

    /// With pending deliveries kept for `age` after they were sent.
    #[must_use]
    pub const fn with_pending(mut self, age: Option<Duration>) -> Self {
        self.pending = age;
        self
    }

    /// How long deliveries in `state` are kept.
    pub fn of(&self, state: DeliveryState) -> Option<Duration> {
        match state {
            DeliveryState::Pending => self.pending,
            DeliveryState::Delivered => self.delivered,
            DeliveryState::Gone => self.gone,
            DeliveryState::Dead => self.dead,
        }
    }

    /// As of `now`, the time before which a delivery in `state` is due for
    /// deletion (ended before it, or sent before it while pending); `None`
    /// while that state is kept.
    pub fn cutoff(&self, state: DeliveryState, now: SystemTime) -> Option<SystemTime> {
        self.of(state)
            .map(|age| now.checked_sub(age).unwrap_or(UNIX_EPOCH))
    }
}
