//! [`RedisConnection`]: one handle for a single Redis server or a Redis
//! Cluster, the check that every node keeps every key, and replica
//! acknowledgement with `WAIT`.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// How long a call may wait for an answer, and for a connection.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to Redis that every Redis store in hooklatch takes: a
/// single server (through redis' `ConnectionManager`, which reconnects by
/// itself) or a Redis Cluster (through redis' cluster client, which follows
/// `MOVED` and `ASK` and rides out a failover). It is cheap to clone; clones
/// share the connections.
///
/// [`open`](Self::open) takes either form of address:
///
/// - `redis://host:port/` or `rediss://host:port/` (TLS, feature
///   `redis-tls`): one server;
/// - `redis+cluster://host1:port1,host2:port2,...` (or `rediss+cluster://`):
///   a cluster, found from any of the seed nodes listed.
///
/// ```no_run
/// # async fn run() -> Result<(), redis::RedisError> {
/// use hooklatch::RedisConnection;
///
/// let single = RedisConnection::open("redis://127.0.0.1:6379/").await?;
/// let cluster =
///     RedisConnection::open("redis+cluster://10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7000").await?;
/// // Or bring your own, configured as you like:
/// let client = redis::cluster::ClusterClient::new(vec!["redis://10.0.0.1:7000/"])?;
/// let own = RedisConnection::from(client.get_async_connection().await?);
/// # let _ = (single, cluster, own);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisConnection {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.inner {
            Inner::Single(_) => "single server",
            Inner::Cluster(_) => "cluster",
        };
        f.debug_tuple("RedisConnection").field(&kind).finish()
    }
}

impl From<ConnectionManager> for RedisConnection {
    fn from(connection: ConnectionManager) -> Self {
        Self {
            inner: Inner::Single(connection),
        }
    }
}

impl From<ClusterConnection> for RedisConnection {
    fn from(connection: ClusterConnection) -> Self {
        Self {
            inner: Inner::Cluster(connection),
        }
    }
}

/// A single server's connection settings: calls fail after at most
/// [`TIMEOUT`] while the server is unreachable.
fn single_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(TIMEOUT))
        .set_response_timeout(Some(TIMEOUT))
        .set_number_of_retries(1)
}

/// The seed node URLs of a `redis+cluster://` or `rediss+cluster://`
/// address, as the cluster client takes them; `None` for any other.
pub(crate) fn cluster_seeds(address: &str) -> Option<Vec<String>> {
    let (scheme, nodes) = address
        .strip_prefix("redis+cluster://")
        .map(|nodes| ("redis", nodes))
        .or_else(|| {
            address
                .strip_prefix("rediss+cluster://")
                .map(|nodes| ("rediss", nodes))
        })?;
    // Credentials and options after the last node apply to every node:
    // `redis+cluster://user:pass@h1:1,h2:2/?protocol=resp3`.
    let (credentials, nodes) = match nodes.rsplit_once('@') {
        Some((credentials, nodes)) => (format!("{credentials}@"), nodes),
        None => (String::new(), nodes),
    };
    let (nodes, rest) = nodes.split_once('/').unwrap_or((nodes, ""));
    Some(
        nodes
            .split(',')
            .map(str::trim)
            .filter(|node| !node.is_empty())
            .map(|node| format!("{scheme}://{credentials}{node}/{rest}"))
            .collect(),
    )
}

impl RedisConnection {
    /// Connects to one server (`redis://`, `rediss://`) or a cluster
    /// (`redis+cluster://h1:p1,h2:p2`). Calls fail after at most 5 seconds
    /// while Redis is unreachable, instead of waiting for ever; on a
    /// cluster, a failover (a replica promoted within a few seconds) is
    /// retried through, so callers do not see it.
    pub async fn open(address: &str) -> RedisResult<Self> {
        match cluster_seeds(address) {
            Some(seeds) => Self::open_cluster(&seeds).await,
            None => {
                let client = redis::Client::open(address)?;
                Ok(ConnectionManager::new_with_config(client, single_config())
                    .await?
                    .into())
            }
        }
    }

    /// Connects to the cluster that any of `seeds` (`redis://host:port`
    /// URLs, all with the same credentials) belongs to.
    pub async fn open_cluster<S: AsRef<str>>(seeds: &[S]) -> RedisResult<Self> {
        Self::cluster(ClusterClientBuilder::new(
            seeds.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
        ))
        .await
    }

    /// Like [`open`](Self::open) for a `rediss://` (or `rediss+cluster://`)
    /// address whose server certificate is signed by your own certificate
    /// authority: `root_certificate` is that authority's certificate in
    /// PEM. (Certificates signed by a public authority need no more than
    /// `open`, which trusts the system's roots.)
    #[cfg(feature = "redis-tls")]
    pub async fn open_with_root_certificate(
        address: &str,
        root_certificate: &[u8],
    ) -> RedisResult<Self> {
        let certificates = || redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(root_certificate.to_vec()),
        };
        match cluster_seeds(address) {
            Some(seeds) => {
                Self::cluster(ClusterClientBuilder::new(seeds).certs(certificates())).await
            }
            None => {
                let client = redis::Client::build_with_tls(address, certificates())?;
                Ok(ConnectionManager::new_with_config(client, single_config())
                    .await?
                    .into())
            }
        }
    }

    async fn cluster(builder: ClusterClientBuilder) -> RedisResult<Self> {
        let client = builder
            .connection_timeout(TIMEOUT)
            .response_timeout(TIMEOUT)
            // A failover takes the cluster about node-timeout plus a
            // second or two; these retries span it.
            .overall_response_timeout(Some(Duration::from_secs(15)))
            .retries(30)
            .min_retry_wait(100)
            .max_retry_wait(1000)
            .build()?;
        Ok(client.get_async_connection().await?.into())
    }

    /// Whether this is a cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner, Inner::Cluster(_))
    }

    /// The `maxmemory-policy` of each node that may evict keys, as
    /// `(node, policy)`; empty when every node answers `noeviction`. Read
    /// from `INFO memory`, which servers that rename or disable `CONFIG`
    /// still answer. On a cluster every node the client knows is asked,
    /// replicas included, since a replica can be promoted.
    pub(crate) async fn evicting_policies(&mut self) -> RedisResult<Vec<(String, String)>> {
        fn policy(info: &str) -> String {
            info.lines()
                .find_map(|line| line.strip_prefix("maxmemory_policy:"))
                .map_or("noeviction", str::trim)
                .to_owned()
        }
        let mut info = redis::cmd("INFO");
        info.arg("memory");
        let policies = match &mut self.inner {
            Inner::Single(connection) => {
                let text: String = info.query_async(connection).await?;
                vec![("server".to_owned(), policy(&text))]
            }
            Inner::Cluster(connection) => {
                let every_node = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllNodes, None));
                let replies: Vec<(String, Value)> =
                    redis::from_redis_value(connection.route_command(info, every_node).await?)?;
                let mut policies = Vec::with_capacity(replies.len());
                for (node, reply) in replies {
                    let text: String = redis::from_redis_value(reply.extract_error()?)?;
                    policies.push((node, policy(&text)));
                }
                policies
            }
        };
        Ok(policies
            .into_iter()
            .filter(|(_, policy)| policy != "noeviction")
            .collect())
    }

    /// The first evicting policy found, described with its node.
    pub(crate) async fn evicting_policy(&mut self) -> RedisResult<Option<String>> {
        Ok(self
            .evicting_policies()
            .await?
            .into_iter()
            .next()
            .map(|(node, policy)| {
                if self.is_cluster() {
                    format!("{policy} (on {node})")
                } else {
                    policy
                }
            }))
    }

    /// Waits until `replicas` replicas have every write made so far on the
    /// connection to the master that holds `key`, or `timeout` passes;
    /// returns how many have. On a cluster `WAIT` goes in one pipeline
    /// after a command on `key`, so a stale slot map is corrected by a
    /// redirect of the whole pipeline to the right master rather than
    /// answered by another node.
    pub(crate) async fn wait_for_replicas(
        &mut self,
        key: &str,
        replicas: u32,
        timeout: Duration,
    ) -> RedisResult<u32> {
        let timeout_ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let (acked,): (u32,) = redis::pipe()
            .cmd("EXISTS")
            .arg(key)
            .ignore()
            .cmd("WAIT")
            .arg(replicas)
            .arg(timeout_ms)
            .query_async(self)
            .await?;
        Ok(acked)
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.inner {
            Inner::Single(connection) => connection.req_packed_command(cmd),
            Inner::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.inner {
            Inner::Single(connection) => connection.req_packed_commands(pipeline, offset, count),
            Inner::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.inner {
            Inner::Single(connection) => connection.get_db(),
            Inner::Cluster(connection) => connection.get_db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::cluster_seeds;

    #[test]
    fn a_cluster_address_names_every_seed_with_shared_credentials_and_options() {
        assert_eq!(
            cluster_seeds("redis+cluster://u:p@10.0.0.1:7000,10.0.0.2:7001/?protocol=resp3"),
            Some(vec![
                "redis://u:p@10.0.0.1:7000/?protocol=resp3".to_owned(),
                "redis://u:p@10.0.0.2:7001/?protocol=resp3".to_owned(),
            ])
        );
        assert_eq!(
            cluster_seeds("rediss+cluster://h:1"),
            Some(vec!["rediss://h:1/".to_owned()])
        );
        assert_eq!(cluster_seeds("redis://127.0.0.1:6379"), None);
    }
}
