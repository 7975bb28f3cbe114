//! [`RedisSequences`]: positions as Redis strings, moved by a Lua script.

use std::sync::LazyLock;

use redis::AsyncCommands as _;
use redis::Script;

use super::{SequenceError, SequenceStore};
use crate::store::redis::RedisConnection;

/// Moves the position forwards only. Numbers are compared as decimal
/// strings (length, then digits), exactly, where Lua's doubles would round
/// above 2^53.
const ADVANCE: &str = r"
local current = redis.call('GET', KEYS[1])
local new = ARGV[1]
if current and (#current > #new or (#current == #new and current >= new)) then
  return 0
end
redis.call('SET', KEYS[1], new)
return 1
";

static ADVANCE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ADVANCE));

/// Positions in Redis, one string key per resource:
/// `hooklatch:seq:<resource>` (the prefix is configurable), on one server
/// or a Redis Cluster. Each call touches one key, so resources spread over
/// every master of a cluster.
#[derive(Clone)]
pub struct RedisSequences {
    connection: RedisConnection,
    prefix: String,
}

impl std::fmt::Debug for RedisSequences {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSequences")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisSequences {
    /// Connects to `address`: one server (`redis://127.0.0.1:6379`) or a
    /// cluster (`redis+cluster://h1:p1,h2:p2`; see
    /// [`RedisConnection::open`]). The connection reconnects by itself;
    /// while Redis is unreachable, every call fails (after at most a few
    /// seconds).
    ///
    /// Refuses a server, or any cluster node, whose `maxmemory-policy` is
    /// not `noeviction` ([`SequenceError::EvictionPolicy`]): an evicted
    /// position would let applied events apply again. Refuses one that
    /// keeps no append-only file ([`SequenceError::NoPersistence`]) unless
    /// the connection was opened
    /// [without that check](RedisConnection::insecure_allowing_no_persistence).
    pub async fn connect(address: &str) -> Result<Self, SequenceError> {
        Self::new(RedisConnection::open(address).await?).await
    }

    /// Positions on a connection you made, checked like
    /// [`connect`](Self::connect) checks.
    pub async fn new(mut connection: RedisConnection) -> Result<Self, SequenceError> {
        if let Some(policy) = connection.evicting_policy().await? {
            return Err(SequenceError::EvictionPolicy(policy));
        }
        if let Some(node) = connection.unpersisted_node().await? {
            return Err(SequenceError::NoPersistence(node));
        }
        Ok(Self {
            connection,
            prefix: "hooklatch".to_owned(),
        })
    }

    /// Uses `prefix` instead of `hooklatch` at the start of every key.
    #[must_use]
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        prefix.clone_into(&mut self.prefix);
        self
    }

    fn key(&self, resource: &str) -> String {
        format!("{}:seq:{resource}", self.prefix)
    }
}

impl SequenceStore for RedisSequences {
    async fn position(&self, resource: &str) -> Result<Option<u64>, SequenceError> {
        let mut connection = self.connection.clone();
        Ok(connection.get(self.key(resource)).await?)
    }

    async fn advance(&self, resource: &str, sequence: u64) -> Result<bool, SequenceError> {
        let mut connection = self.connection.clone();
        let moved: i64 = ADVANCE_SCRIPT
            .key(self.key(resource))
            .arg(sequence.to_string())
            .invoke_async(&mut connection)
            .await?;
        Ok(moved == 1)
    }
}
