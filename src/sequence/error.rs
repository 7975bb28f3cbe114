//! [`SequenceError`]: why a position could not be read or moved.

/// Why a sequence operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SequenceError {
    /// The resource key cannot be stored.
    #[error("invalid resource key: {0}")]
    InvalidResource(&'static str),
    /// The sequence number is above [`MAX_SEQUENCE`](super::MAX_SEQUENCE).
    #[error("sequence number {0} is above the largest supported, 2^63 - 1")]
    OutOfRange(u64),
    /// A table prefix is not a plain identifier.
    #[error("invalid table name `{0}`: use 1 to 48 of a-z, 0-9 and _, starting with a letter")]
    InvalidTableName(String),
    /// The database failed or could not be reached.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The Redis server may evict keys (`maxmemory-policy` is not
    /// `noeviction`), which would drop positions.
    #[error(
        "redis maxmemory-policy is `{0}`: evicted positions let events apply twice; set `maxmemory-policy noeviction`"
    )]
    EvictionPolicy(String),
    /// A Redis node keeps no append-only file, so a restart would bring
    /// back older positions.
    #[error(
        "redis keeps no append-only file: {0}; a restart brings back older positions and \
         applied events apply again; set `appendonly yes`, or open the connection with \
         `RedisConnection::insecure_allowing_no_persistence`"
    )]
    NoPersistence(String),
}

crate::store::driver_errors_into_store!(SequenceError);
