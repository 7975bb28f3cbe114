//! [`Keeping`]: what an outbox keeps and for how long. Sends under an
//! idempotency key (the key remembered for a window, recorded with the
//! enqueue in one atomic step) and the purge of each outcome after its own
//! retention.

mod memory;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod sql;

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::dedup::DedupError;
use crate::sender::DeliveryState;

/// How long an outbox keeps a delivery in each state before
/// [`Dispatcher::purge_by_policy`](crate::sender::Dispatcher::purge_by_policy)
/// deletes it with its attempts; `None` keeps it until deleted otherwise.
/// Delivered, gone and dead deliveries are counted from when they ended,
/// pending ones from when they were sent. Plain data, stored with a policy.
///
/// ```
/// use std::time::Duration;
/// use hooklatch::sender::Retention;
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

/// An idempotency key for [`Keeping::enqueue_keyed`]: the key, the time
/// now, and how long the key is remembered from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendKey<'a> {
    /// The key, such as a client's `Idempotency-Key` header (1 to 256
    /// visible ASCII characters, as an event id).
    pub key: &'a str,
    /// The time now.
    pub now: SystemTime,
    /// How long the key is remembered from `now`.
    pub window: Duration,
}

/// What [`Keeping::enqueue_keyed`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Keyed {
    /// The delivery the key names: the one just enqueued, or the first
    /// delivery sent under the key within its window.
    pub id: String,
    /// Whether this call enqueued a delivery.
    pub enqueued: bool,
}

/// What an outbox keeps and for how long: idempotency keys for a window,
/// and deliveries for each outcome's retention. Every
/// [`DeliveryStore`](super::DeliveryStore) is one.
pub trait Keeping: Send + Sync + 'static {
    /// Enqueues, as [`DeliveryStore::enqueue`](super::DeliveryStore::enqueue)
    /// does, the delivery `id` under the idempotency key `key.key`, unless
    /// the endpoint has a live key of that name (recorded before and
    /// expiring after `key.now`): then it enqueues nothing and returns the
    /// id the key names. Otherwise the key is recorded with `id` until
    /// `key.now + key.window`.
    /// The record and the enqueue are one atomic step: of any number of
    /// concurrent calls with one key, one enqueues.
    fn enqueue_keyed(
        &self,
        endpoint: &str,
        key: SendKey<'_>,
        id: &str,
        body: &[u8],
        due: SystemTime,
    ) -> impl Future<Output = Result<Keyed, DedupError>> + Send;

    /// Forgets the endpoint's idempotency keys that expired by `now`,
    /// [`OUTBOX_PURGE_BATCH`](super::OUTBOX_PURGE_BATCH) at a time, and
    /// returns how many.
    fn forget_keys(
        &self,
        endpoint: &str,
        now: SystemTime,
    ) -> impl Future<Output = Result<u64, DedupError>> + Send;

    /// Deletes the endpoint's deliveries that `retention` no longer keeps
    /// as of `now`, with their attempts, and returns how many: delivered,
    /// gone and dead ones that ended before their state's cutoff, and
    /// pending ones sent before theirs (except one leased for an attempt
    /// right now). The SQL and Redis stores delete
    /// [`OUTBOX_PURGE_BATCH`](super::OUTBOX_PURGE_BATCH) at a time, each
    /// batch in its own short transaction or script; a failure stops the
    /// purge, and what was deleted stays deleted. A purged id is forgotten.
    fn purge_outcomes(
        &self,
        endpoint: &str,
        retention: &Retention,
        now: SystemTime,
    ) -> impl Future<Output = Result<u64, DedupError>> + Send;
}

/// A cutoff in ms since the epoch for a store; `i64::MIN` (nothing is
/// before it) while the state is kept.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
pub(crate) fn cutoff_millis(retention: &Retention, state: DeliveryState, now: SystemTime) -> i64 {
    retention
        .cutoff(state, now)
        .map_or(i64::MIN, crate::store::unix_millis)
}

/// Checks an idempotency key as an event id is checked.
pub(crate) fn check_send_key(endpoint: &str, key: &str) -> Result<(), DedupError> {
    crate::dedup::check_namespace(endpoint)?;
    match crate::store::key_problem(key) {
        None => Ok(()),
        Some(reason) => Err(DedupError::InvalidKey {
            what: "idempotency key",
            reason,
        }),
    }
}
