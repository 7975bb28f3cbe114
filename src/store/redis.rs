//! One way to connect to Redis, and the check that it keeps every key.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// A connection to `url` that reconnects by itself and fails a call after
/// at most 5 seconds while the server is unreachable.
pub(crate) async fn connect(url: &str) -> redis::RedisResult<ConnectionManager> {
    let client = redis::Client::open(url)?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(5)))
        .set_number_of_retries(1);
    ConnectionManager::new_with_config(client, config).await
}

/// The server's `maxmemory-policy` when it may evict keys; `None` for
/// `noeviction`. Read from `INFO memory`, which servers that rename or
/// disable `CONFIG` still answer.
pub(crate) async fn evicting_policy(
    connection: &mut ConnectionManager,
) -> redis::RedisResult<Option<String>> {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(connection)
        .await?;
    let policy = info
        .lines()
        .find_map(|line| line.strip_prefix("maxmemory_policy:"))
        .map(str::trim)
        .unwrap_or("noeviction");
    Ok((policy != "noeviction").then(|| policy.to_owned()))
}
