//! [`RedisConnection`]: one handle for a single Redis server or a Redis
//! Cluster, the checks that every node keeps every key, and replica
//! acknowledgement with `WAIT` in one pipeline with the write it waits for.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Value};

use crate::store::StoreError;

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
///   a cluster, found from any of the nodes listed.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
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
    allow_no_persistence: bool,
    /// Where a dedicated subscriber connects (the server, or each seed of
    /// a cluster in turn): known only for connections this type opened.
    subscribe_at: Vec<redis::Client>,
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
            allow_no_persistence: false,
            subscribe_at: Vec::new(),
        }
    }
}

impl From<ClusterConnection> for RedisConnection {
    fn from(connection: ClusterConnection) -> Self {
        Self {
            inner: Inner::Cluster(connection),
            allow_no_persistence: false,
            subscribe_at: Vec::new(),
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

/// The node URLs of a `redis+cluster://` or `rediss+cluster://`
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
    ///
    /// # Errors
    ///
    /// A [`StoreError`] (backend `redis`) when the address is not a Redis
    /// URL or no server answers there.
    pub async fn open(address: &str) -> Result<Self, StoreError> {
        Ok(match cluster_seeds(address) {
            Some(seeds) => Self::open_cluster(&seeds).await?,
            None => Self::single(redis::Client::open(address)?).await?,
        })
    }

    /// A single server's connection through `client`, which also serves
    /// subscriptions.
    async fn single(client: redis::Client) -> RedisResult<Self> {
        let mut connection: Self =
            ConnectionManager::new_with_config(client.clone(), single_config())
                .await?
                .into();
        connection.subscribe_at = vec![client];
        Ok(connection)
    }

    /// Connects to the cluster that any of `nodes` (`redis://host:port`
    /// URLs, all with the same credentials) belongs to.
    ///
    /// # Errors
    ///
    /// A [`StoreError`] (backend `redis`) when a seed is not a Redis URL or
    /// no node answers.
    pub async fn open_cluster<S: AsRef<str>>(seeds: &[S]) -> Result<Self, StoreError> {
        let seeds: Vec<&str> = seeds.iter().map(AsRef::as_ref).collect();
        let mut connection = Self::cluster(ClusterClientBuilder::new(seeds.clone())).await?;
        connection.subscribe_at = seeds
            .into_iter()
            .map(redis::Client::open)
            .collect::<RedisResult<_>>()?;
        Ok(connection)
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
    ) -> Result<Self, StoreError> {
        let certificates = || redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(root_certificate.to_vec()),
        };
        match cluster_seeds(address) {
            Some(seeds) => {
                let mut connection =
                    Self::cluster(ClusterClientBuilder::new(seeds.clone()).certs(certificates()))
                        .await?;
                connection.subscribe_at = seeds
                    .into_iter()
                    .map(|seed| redis::Client::build_with_tls(seed, certificates()))
                    .collect::<RedisResult<_>>()?;
                Ok(connection)
            }
            None => {
                Ok(Self::single(redis::Client::build_with_tls(address, certificates())?).await?)
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

    /// Where a subscriber connects, to try in turn: empty for a connection
    /// made elsewhere and handed over (`From`), which cannot subscribe.
    pub(crate) fn subscribe_at(&self) -> &[redis::Client] {
        &self.subscribe_at
    }

    /// Whether this is a cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(self.inner, Inner::Cluster(_))
    }

    /// `INFO section` of every node: the server, or on a cluster every
    /// node the client knows, replicas included (a replica can be
    /// promoted), as `(node, text)`. `INFO` is answered by servers that
    /// rename or disable `CONFIG`.
    async fn info_of_every_node(&mut self, section: &str) -> RedisResult<Vec<(String, String)>> {
        let mut info = redis::cmd("INFO");
        info.arg(section);
        match &mut self.inner {
            Inner::Single(connection) => {
                let text: String = info.query_async(connection).await?;
                Ok(vec![("server".to_owned(), text)])
            }
            Inner::Cluster(connection) => {
                let every_node = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllNodes, None));
                let replies: Vec<(String, Value)> =
                    redis::from_redis_value(connection.route_command(info, every_node).await?)?;
                let mut texts = Vec::with_capacity(replies.len());
                for (node, reply) in replies {
                    texts.push((node, redis::from_redis_value(reply.extract_error()?)?));
                }
                Ok(texts)
            }
        }
    }

    /// The `maxmemory-policy` of each node that may evict keys, as
    /// `(node, policy)`; empty when every node answers `noeviction`.
    pub(crate) async fn evicting_policies(&mut self) -> RedisResult<Vec<(String, String)>> {
        Ok(self
            .info_of_every_node("memory")
            .await?
            .into_iter()
            .map(|(node, text)| (node, info_field(&text, "maxmemory_policy", "noeviction")))
            .filter(|(_, policy)| policy != "noeviction")
            .collect())
    }

    /// The first evicting policy found, described with its node.
    pub(crate) async fn evicting_policy(&mut self) -> RedisResult<Option<String>> {
        let found = self.evicting_policies().await?.into_iter().next();
        Ok(found.map(|(node, policy)| self.on_node(policy, &node)))
    }

    /// The first node that keeps no append-only file, described, unless
    /// this connection was opened
    /// [without that check](Self::insecure_allowing_no_persistence).
    ///
    /// Without AOF a restart (a crash, a deploy, an out-of-memory kill)
    /// brings back the last RDB snapshot, or nothing: every write since
    /// then is gone though it was answered. A replica is checked too, since
    /// it can be promoted and restart in turn.
    pub(crate) async fn unpersisted_node(&mut self) -> RedisResult<Option<String>> {
        if self.allow_no_persistence {
            return Ok(None);
        }
        let found = self
            .info_of_every_node("persistence")
            .await?
            .into_iter()
            .find(|(_, text)| info_field(text, "aof_enabled", "0") != "1");
        Ok(found.map(|(node, _)| self.on_node("appendonly no".to_owned(), &node)))
    }

    /// This connection, without the check that every node keeps an
    /// append-only file (`appendonly yes`) that the Redis stores make when
    /// they are opened on it. Without one, a restart loses every claim,
    /// accepted event, ack, position and delivery written since the last
    /// snapshot, each already answered as kept: for caches of state you
    /// can rebuild, or tests.
    #[must_use]
    pub fn insecure_allowing_no_persistence(mut self) -> Self {
        self.allow_no_persistence = true;
        self
    }

    fn on_node(&self, what: String, node: &str) -> String {
        if self.is_cluster() {
            format!("{what} (on {node})")
        } else {
            what
        }
    }

    /// Whether any key matches `pattern`, on the node that holds
    /// `slot_key`'s slot (every key `pattern` can match must be in that
    /// slot). A `SCAN` of that node, stopping at the first match: it reads
    /// the whole keyspace of the node when nothing matches, so it is for
    /// one-off checks, never a hot path.
    pub(crate) async fn any_key_matching(
        &mut self,
        pattern: &str,
        slot_key: &str,
    ) -> RedisResult<bool> {
        let mut cursor: u64 = 0;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000);
            let (next, keys): (u64, Vec<String>) = match &mut self.inner {
                Inner::Single(connection) => scan.query_async(connection).await?,
                Inner::Cluster(connection) => {
                    let node = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                        Route::with_key(slot_key, SlotAddr::Master),
                    ));
                    redis::from_redis_value(connection.route_command(scan, node).await?)?
                }
            };
            if !keys.is_empty() {
                return Ok(true);
            }
            if next == 0 {
                return Ok(false);
            }
            cursor = next;
        }
    }

    /// Runs `eval` (a script call made by [`eval`]) and then `WAIT
    /// replicas timeout` in one pipeline, on the node that holds the
    /// script's first key; returns the script's reply and how many replicas
    /// have every write so far.
    ///
    /// The two go together so that the answer is about the node that holds
    /// the write. When a master dies during the `WAIT`, the cluster client
    /// sends the whole pipeline again to the replica promoted in its place:
    /// the script runs there too (by its text, since that node may never
    /// have loaded it) and the `WAIT` counts that node's replicas, so a
    /// write the promoted replica never had is made again or refused, never
    /// answered for.
    pub(crate) async fn eval_and_wait<T: FromRedisValue>(
        &mut self,
        eval: Cmd,
        replicas: u32,
        timeout: Duration,
    ) -> RedisResult<(T, u32)> {
        let timeout_ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        redis::pipe()
            .add_command(eval)
            .cmd("WAIT")
            .arg(replicas)
            .arg(timeout_ms)
            .query_async(self)
            .await
    }
}

/// The value of `field` in an `INFO` reply, or `default` when absent.
fn info_field(info: &str, field: &str, default: &str) -> String {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map_or(default, str::trim)
        .to_owned()
}

/// `EVAL script numkeys keys...`, for [`RedisConnection::eval_and_wait`];
/// the caller adds the script's arguments.
pub(crate) fn eval(script: &str, keys: &[&str]) -> Cmd {
    let mut command = redis::cmd("EVAL");
    command.arg(script).arg(keys.len()).arg(keys);
    command
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
