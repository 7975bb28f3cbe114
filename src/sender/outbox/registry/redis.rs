//! The endpoint registry of [`RedisOutbox`]: a hash of configurations
//! and a version counter under one hash tag, changed together by one
//! script.

use std::sync::LazyLock;

use redis::Script;

use super::{EndpointRegistry, SavedEndpoints};
use crate::sender::OutboxError;
use crate::sender::RedisOutbox;
use crate::sender::outbox::validate_endpoint_name;

/// `KEYS[1]` configurations, `KEYS[2]` version; `ARGV[1]` name, `ARGV[2]` config.
static SAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) \
         return redis.call('INCR', KEYS[2])",
    )
});

/// `KEYS` as above; `ARGV[1]` name: 1 if it was there.
static REMOVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local removed = redis.call('HDEL', KEYS[1], ARGV[1]) \
         if removed == 1 then redis.call('INCR', KEYS[2]) end \
         return removed",
    )
});

/// KEYS as above: the version, then name and config pairs, read at once.
static ALL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local all = redis.call('HGETALL', KEYS[1]) \
         table.insert(all, 1, redis.call('GET', KEYS[2]) or '0') \
         return all",
    )
});

impl RedisOutbox {
    /// The registry's keys: `PREFIX:{PREFIX:endpoints}:configs` and
    /// `…:version`, one slot.
    fn registry_keys(&self) -> [String; 2] {
        let tag = format!("{}:{{{}:endpoints}}", self.prefix, self.prefix);
        [format!("{tag}:configs"), format!("{tag}:version")]
    }

    async fn run_registry_script<R: redis::FromRedisValue>(
        &self,
        script: &Script,
        args: &[&str],
    ) -> Result<R, OutboxError> {
        let mut invocation = script.prepare_invoke();
        for key in self.registry_keys() {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let mut connection = self.connection.clone();
        Ok(invocation.invoke_async(&mut connection).await?)
    }
}

impl RedisOutbox {
    /// The names of every saved endpoint, without their configurations.
    pub(in crate::sender::outbox) async fn saved_names(&self) -> Result<Vec<String>, OutboxError> {
        let mut connection = self.connection.clone();
        let [configs, _] = self.registry_keys();
        Ok(redis::AsyncCommands::hkeys(&mut connection, configs).await?)
    }

    /// The saved configuration of each of `names`, in order.
    pub(in crate::sender::outbox) async fn saved_configs(
        &self,
        names: &[&str],
    ) -> Result<Vec<Option<String>>, OutboxError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let mut connection = self.connection.clone();
        let [configs, _] = self.registry_keys();
        Ok(redis::cmd("HMGET")
            .arg(configs)
            .arg(names)
            .query_async(&mut connection)
            .await?)
    }
}

impl EndpointRegistry for RedisOutbox {
    async fn save_endpoint(&self, name: &str, config: &str) -> Result<u64, OutboxError> {
        validate_endpoint_name(name)?;
        self.run_registry_script(&SAVE, &[name, config]).await
    }

    async fn remove_endpoint(&self, name: &str) -> Result<bool, OutboxError> {
        let removed: u8 = self.run_registry_script(&REMOVE, &[name]).await?;
        Ok(removed == 1)
    }

    async fn endpoints_version(&self) -> Result<u64, OutboxError> {
        let mut connection = self.connection.clone();
        let [_, version] = self.registry_keys();
        let version: Option<u64> = redis::AsyncCommands::get(&mut connection, version).await?;
        Ok(version.unwrap_or(0))
    }

    async fn saved_endpoints(&self) -> Result<SavedEndpoints, OutboxError> {
        let all: Vec<String> = self.run_registry_script(&ALL, &[]).await?;
        let mut all = all.into_iter();
        let version = all.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        let mut endpoints = std::collections::BTreeMap::new();
        while let (Some(name), Some(config)) = (all.next(), all.next()) {
            endpoints.insert(name, config);
        }
        Ok(SavedEndpoints { version, endpoints })
    }
}
