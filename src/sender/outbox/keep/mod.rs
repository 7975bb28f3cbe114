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
use std::time::{Duration, SystemTime};

use super::{DeliveryStore, NewDelivery};
use crate::sender::OutboxError;
pub use crate::sender::rules::retention::Retention;

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

impl Keyed {
    /// What a store of your own answers from
    /// [`Keeping::add_keyed_delivery`]: the delivery `id` the key names,
    /// and whether this call enqueued it.
    pub fn new(id: impl Into<String>, enqueued: bool) -> Self {
        Self {
            id: id.into(),
            enqueued,
        }
    }
}

/// What an outbox keeps and for how long: idempotency keys for a window,
/// and deliveries for each outcome's retention. Every outbox here
/// implements it.
pub trait Keeping: DeliveryStore {
    /// Enqueues, as [`DeliveryStore::enqueue`](super::DeliveryStore::enqueue)
    /// does, the delivery `id` under the idempotency key `key.key`, unless
    /// the endpoint has a live key of that name (recorded before and
    /// expiring after `key.now`): then it enqueues nothing and returns the
    /// id the key names. Otherwise the key is recorded with `id` until
    /// `key.now + key.window`.
    /// The record and the enqueue are one atomic step: of any number of
    /// concurrent calls with one key, one enqueues.
    /// Checks the endpoint's name, the id and the key, then calls
    /// [`add_keyed_delivery`](Self::add_keyed_delivery).
    fn enqueue_keyed(
        &self,
        endpoint: &str,
        key: SendKey<'_>,
        id: &str,
        body: &[u8],
        due: SystemTime,
    ) -> impl Future<Output = Result<Keyed, OutboxError>> + Send {
        async move {
            let delivery = NewDelivery::checked(endpoint, id, body, due)?;
            check_send_key(endpoint, key.key)?;
            self.add_keyed_delivery(key, delivery).await
        }
    }

    /// What [`enqueue_keyed`](Self::enqueue_keyed) does once it has
    /// checked the endpoint's name, the id and the key: the part a backend
    /// implements. Call `enqueue_keyed`, which checks them.
    fn add_keyed_delivery(
        &self,
        key: SendKey<'_>,
        delivery: NewDelivery<'_>,
    ) -> impl Future<Output = Result<Keyed, OutboxError>> + Send;

    /// Forgets the endpoint's idempotency keys that expired by `now`,
    /// [`OUTBOX_PURGE_BATCH`](super::OUTBOX_PURGE_BATCH) at a time, and
    /// returns how many.
    fn forget_keys(
        &self,
        endpoint: &str,
        now: SystemTime,
    ) -> impl Future<Output = Result<u64, OutboxError>> + Send;

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
    ) -> impl Future<Output = Result<u64, OutboxError>> + Send;

    /// Deletes the delivered and gone deliveries that ended before
    /// `finished_before`, with their attempts, and returns how many.
    /// Pending and dead deliveries are kept (dead ones can be replayed).
    /// A purged id is forgotten: sending it again delivers it again. The
    /// SQL and Redis stores delete [`OUTBOX_PURGE_BATCH`](crate::sender::outbox::OUTBOX_PURGE_BATCH) deliveries at a
    /// time, each batch in its own short transaction or script; a failure
    /// stops the purge, and what was deleted stays deleted.
    fn purge(
        &self,
        finished_before: SystemTime,
    ) -> impl Future<Output = Result<u64, OutboxError>> + Send;
}

/// A cutoff in ms since the epoch for a store; `i64::MIN` (nothing is
/// before it) while the state is kept.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
pub(crate) fn cutoff_millis(
    retention: &Retention,
    state: crate::sender::outbox::DeliveryState,
    now: SystemTime,
) -> i64 {
    retention
        .cutoff(state, now)
        .map_or(i64::MIN, crate::store::unix_millis)
}

/// Checks an idempotency key as an event id is checked.
pub(crate) fn check_send_key(endpoint: &str, key: &str) -> Result<(), OutboxError> {
    crate::dedup::validate_namespace(endpoint)?;
    match crate::store::key_problem(key) {
        None => Ok(()),
        Some(reason) => Err(OutboxError::InvalidKey {
            what: "idempotency key",
            reason,
        }),
    }
}

/// Runs `batch` until one deletes fewer than [`OUTBOX_PURGE_BATCH`](crate::sender::outbox::OUTBOX_PURGE_BATCH): what
/// they deleted in all. Each batch is its own statement or script, so no
/// purge holds locks, or the Redis server, for long.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
pub(crate) async fn in_batches<F, Fut>(mut batch: F) -> Result<u64, OutboxError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64, OutboxError>>,
{
    let mut deleted = 0;
    loop {
        let this_batch = batch().await?;
        deleted += this_batch;
        if this_batch < crate::sender::outbox::OUTBOX_PURGE_BATCH {
            return Ok(deleted);
        }
    }
}
