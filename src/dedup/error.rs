//! [`DedupError`]: why a store could not answer.

pub use crate::store::StoreError;

/// Why a store operation failed. After an error from
/// [`Inbox::accept`](super::Inbox::accept) nothing was kept: answer 5xx so
/// the sender retries.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DedupError {
    /// A namespace or event id cannot be stored (answer 400: a retry would
    /// fail the same way).
    #[error("invalid {what}: {reason}")]
    InvalidKey {
        /// `namespace` or `event id`.
        what: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A table name given to a SQL store is not a plain identifier.
    #[error("invalid table name `{0}`: use 1 to 48 of a-z, 0-9 and _, starting with a letter")]
    InvalidTableName(String),
    /// The lease expired and another holder took it, so this one cannot
    /// act under it: a claim another delivery of the event took (it cannot
    /// complete, release or extend it). A taken inbox event has its own
    /// [`DeliveryLost`](Self::DeliveryLost); an outbox delivery another
    /// dispatcher took is `sender::OutboxError::LeaseLost`.
    #[error("lease lost: it expired and another holder took it")]
    LeaseLost,
    /// The visibility timeout passed and another worker took the event, so
    /// this delivery cannot ack or nack it.
    #[error("delivery lost: its visibility timeout passed and another worker took the event")]
    DeliveryLost,
    /// [`AnyInbox::connect`](super::AnyInbox::connect) was given a URL of
    /// no store, or of one this build leaves out.
    #[error("cannot open a store from this URL: {0}")]
    StoreUrl(String),
    /// The database failed or could not be reached; nothing was kept.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The Redis server may evict keys (`maxmemory-policy` is not
    /// `noeviction`), which would drop claims or accepted events.
    #[error(
        "redis maxmemory-policy is `{0}`: evicted claims let retries in again and evicted \
         events are lost; set `maxmemory-policy noeviction` (an inbox can opt out with \
         `RedisInbox::insecure_connect_allowing_eviction`)"
    )]
    EvictionPolicy(String),
    /// A Redis node keeps no append-only file, so a restart would bring
    /// back an older snapshot (or nothing) and lose claims, accepted events
    /// and acks already answered as kept.
    #[error(
        "redis keeps no append-only file: {0}; a restart loses every accept, ack and delivery \
         since the last snapshot, though each was answered as kept; set `appendonly yes` (with \
         `appendfsync always` to lose nothing in a crash), or open the connection with \
         `RedisConnection::insecure_allowing_no_persistence`"
    )]
    NoPersistence(String),
    /// A Redis store was given a shard count outside 1 to `MAX_SHARDS`
    /// (1,024).
    #[error("invalid shard count {0}: use 1 to 1024")]
    InvalidShardCount(u16),
    /// The namespace's keys are spread over another number of shards than
    /// this store's: its claims and events would be looked for in the wrong
    /// places.
    #[error(
        "namespace `{namespace}` is recorded with {recorded} shards, but this store uses \
         {configured}: configure `with_shards({recorded})`"
    )]
    ShardCountMismatch {
        /// The namespace.
        namespace: String,
        /// The count on record.
        recorded: u16,
        /// This store's count.
        configured: u16,
    },
    /// The event was kept, but fewer replicas than asked for confirmed it
    /// in time (`RedisInbox::with_replica_acks`):
    /// a failover now could lose it. Answer 5xx; the sender's retry is a
    /// duplicate once the replicas have it.
    #[error("only {acked} of {wanted} replicas confirmed the write in time")]
    ReplicasBehind {
        /// Replicas that confirmed.
        acked: u32,
        /// Replicas asked for.
        wanted: u32,
    },
    /// A store of your own does not implement an optional method (named).
    #[error("this store cannot {0}")]
    Unsupported(&'static str),
    /// An [`ack_many`](super::InboxQueue::ack_many) whose deliveries span
    /// several Redis shards, some of which answered while the others
    /// failed: `acked[i]` is what the store answered for delivery `i`
    /// (`Some(true)` acked, `Some(false)` lost), or `None` where its shard
    /// failed and it is worth acking again.
    #[error("{} of {} acks went unanswered: {source}", unanswered(acked), acked.len())]
    AckedInPart {
        /// Per delivery, in order: the store's answer, or `None`.
        acked: Vec<Option<bool>>,
        /// Why the rest went unanswered (the first failed shard's error).
        #[source]
        source: Box<DedupError>,
    },
}

/// How many of `acked` have no answer.
fn unanswered(acked: &[Option<bool>]) -> usize {
    acked.iter().filter(|answer| answer.is_none()).count()
}

crate::store::driver_errors_into_store!(DedupError);

impl DedupError {
    /// Whether the request itself is at fault (a bad key), so that retrying
    /// cannot help; every other error is the store's and worth a retry.
    pub fn is_bad_request(&self) -> bool {
        matches!(self, Self::InvalidKey { .. })
    }
}
