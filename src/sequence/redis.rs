//! [`RedisSequences`]: positions as Redis strings, moved by a Lua script.

use std::sync::LazyLock;

use redis::AsyncCommands as _;
use redis::Script;
use redis::aio::ConnectionManager;

use super::{SequenceError, SequenceStore};

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
/// `hooklatch:seq:<resource>` (the prefix is configurable).
#[derive(Clone)]
pub struct RedisSequences {
    connection: ConnectionManager,
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
    /// Connects to `url`, such as `redis://127.0.0.1:6379`. The connection
    /// reconnects by itself; while the server is unreachable, every call
    /// fails (after at most 5 seconds).
    ///
    /// Refuses a server whose `maxmemory-policy` is not `noeviction`
    /// ([`SequenceError::EvictionPolicy`]): an evicted position would let
    /// applied events apply again.
    pub async fn connect(url: &str) -> Result<Self, SequenceError> {
        let mut connection = crate::store::redis::connect(url).await?;
        if let Some(policy) = crate::store::redis::evicting_policy(&mut connection).await? {
            return Err(SequenceError::EvictionPolicy(policy));
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
