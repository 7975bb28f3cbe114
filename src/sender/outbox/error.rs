//! [`OutboxError`]: why an outbox could not answer.

use crate::dedup::DedupError;
use crate::store::StoreError;

/// Why an outbox operation failed. After an error from
/// [`DeliveryStore::enqueue`](super::DeliveryStore::enqueue) nothing was
/// kept, except after [`ReplicasBehind`](Self::ReplicasBehind) (kept, but
/// not yet on enough replicas); after one from a step under a lease, the
/// delivery is as the store last recorded it, and comes back to a
/// dispatcher when its lease ends.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// An endpoint name or delivery id cannot be stored: a retry would fail
    /// the same way.
    #[error("invalid {what}: {reason}")]
    InvalidKey {
        /// `endpoint name`, `delivery id` or `idempotency key`.
        what: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A table name given to a SQL outbox is not a plain identifier.
    #[error("invalid table name `{0}`: use 1 to 48 of a-z, 0-9 and _, starting with a letter")]
    InvalidTableName(String),
    /// The delivery's lease expired and another dispatcher took it, so
    /// this one cannot record an attempt or put it back. The same rule as
    /// a lost claim lease ([`DedupError::LeaseLost`]).
    #[error("lease lost: it expired and another dispatcher took the delivery")]
    LeaseLost,
    /// [`AnyOutbox::connect`](super::AnyOutbox::connect) was given a URL of
    /// no outbox, or of one this build leaves out.
    #[error("cannot open an outbox from this URL: {0}")]
    StoreUrl(String),
    /// The database failed or could not be reached.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The Redis server may evict keys (`maxmemory-policy` is not
    /// `noeviction`), which would drop deliveries.
    #[error(
        "redis maxmemory-policy is `{0}`: evicted deliveries are lost; set `maxmemory-policy \
         noeviction`"
    )]
    EvictionPolicy(String),
    /// A Redis node keeps no append-only file, so a restart would bring
    /// back an older snapshot (or nothing) and lose deliveries already
    /// answered as kept.
    #[error(
        "redis keeps no append-only file: {0}; a restart loses every delivery and attempt since \
         the last snapshot; set `appendonly yes`, or open the connection with \
         `RedisConnection::insecure_allowing_no_persistence`"
    )]
    NoPersistence(String),
    /// The write was kept, but fewer replicas than asked for confirmed it
    /// in time: a failover now could lose it.
    #[error("only {acked} of {wanted} replicas confirmed the write in time")]
    ReplicasBehind {
        /// Replicas that confirmed.
        acked: u32,
        /// Replicas asked for.
        wanted: u32,
    },
}

impl OutboxError {
    /// Whether the call itself is at fault (a bad name or id), so that
    /// retrying cannot help; every other error is the store's (or, for a
    /// bad table name, the configuration's), as for
    /// [`DedupError::is_bad_request`].
    pub fn is_bad_request(&self) -> bool {
        matches!(self, Self::InvalidKey { .. })
    }
}

/// The checks and connections the outbox shares with the claim stores
/// (names, prefixes, URLs, a Redis server's settings) answer in their
/// terms; each has its outbox counterpart, named as the outbox names it
/// (an endpoint where the claim stores have a namespace, a delivery where
/// they have an event). What only a claim store can answer becomes a
/// [`Store`](Self::Store) error that keeps it as its source.
impl From<DedupError> for OutboxError {
    fn from(error: DedupError) -> Self {
        match error {
            DedupError::InvalidKey { what, reason } => Self::InvalidKey {
                what: match what {
                    "namespace" => "endpoint name",
                    "event id" => "delivery id",
                    other => other,
                },
                reason,
            },
            DedupError::InvalidTableName(name) => Self::InvalidTableName(name),
            DedupError::LeaseLost => Self::LeaseLost,
            DedupError::StoreUrl(reason) => Self::StoreUrl(reason),
            DedupError::Store(error) => Self::Store(error),
            DedupError::EvictionPolicy(policy) => Self::EvictionPolicy(policy),
            DedupError::NoPersistence(reason) => Self::NoPersistence(reason),
            DedupError::ReplicasBehind { acked, wanted } => Self::ReplicasBehind { acked, wanted },
            error @ (DedupError::DeliveryLost
            | DedupError::InvalidShardCount(_)
            | DedupError::ShardCountMismatch { .. }
            | DedupError::AckedInPart { .. }
            | DedupError::Unsupported(_)) => Self::Store(StoreError::other(error)),
        }
    }
}

crate::store::driver_errors_into_store!(OutboxError);

#[cfg(test)]
mod tests {
    use super::*;

    /// The checks the outbox shares with the claim stores answer in the
    /// outbox's terms, each variant to its counterpart.
    #[test]
    fn a_shared_check_fails_with_its_outbox_counterpart() {
        let endpoint = OutboxError::from(crate::dedup::check_key("", "id").unwrap_err());
        assert!(
            endpoint.to_string().starts_with("invalid endpoint name: "),
            "{endpoint}"
        );
        let id = OutboxError::from(crate::dedup::check_key("hooks", "").unwrap_err());
        assert!(id.to_string().starts_with("invalid delivery id: "), "{id}");
        let cases = [
            (DedupError::LeaseLost, "lease lost"),
            (DedupError::DeliveryLost, "store store: delivery lost"),
            (
                DedupError::InvalidTableName("x y".into()),
                "invalid table name `x y`",
            ),
            (
                DedupError::StoreUrl("no".into()),
                "cannot open an outbox from this URL: no",
            ),
            (
                DedupError::EvictionPolicy("allkeys-lru".into()),
                "redis maxmemory-policy is `allkeys-lru`: evicted deliveries are lost",
            ),
            (
                DedupError::NoPersistence("appendonly is no".into()),
                "redis keeps no append-only file: appendonly is no; a restart loses every delivery",
            ),
            (
                DedupError::ReplicasBehind {
                    acked: 1,
                    wanted: 2,
                },
                "only 1 of 2 replicas confirmed the write in time",
            ),
            (
                DedupError::InvalidShardCount(0),
                "store store: invalid shard count 0",
            ),
        ];
        for (shared, text) in cases {
            let outbox = OutboxError::from(shared);
            assert!(outbox.to_string().starts_with(text), "{outbox}");
        }
        assert!(OutboxError::from(crate::dedup::check_key("", "id").unwrap_err()).is_bad_request());
        assert!(!OutboxError::LeaseLost.is_bad_request());
    }
}
