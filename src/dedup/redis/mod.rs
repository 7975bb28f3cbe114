//! [`RedisInbox`]: claims and inbox in Redis, one Lua script per step, on
//! one server or a Redis Cluster, each namespace spread over shards.

mod accept_batch;
mod inbox;
mod lease;
mod scripts;
mod shards;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use futures_util::future::join_all;
use redis::{AsyncCommands as _, FromRedisValue, Script};

use super::{
    DedupError, EventMeta, InboxEntry, Receipt, StoreOptions, check_namespace, millis, new_token,
    validate_namespace,
};
use crate::store::redis::{RedisConnection, eval};
use scripts::{GROUP, SHARDS_SCRIPT, TAKE_SCRIPT};
pub use shards::{DEFAULT_SHARDS, MAX_SHARDS};
use shards::{Shards, parse_receipt_entry, receipt_entry};

/// Claims and inbox in Redis, for many receiver instances sharing one
/// server or a Redis Cluster.
///
/// Each step is one Lua script, so it is atomic, and every key a script
/// touches is passed in `KEYS[]`. Accepts that wait while earlier ones are
/// in flight go to the server together, one script call for the batch (on
/// a cluster one per shard; behind a proxy that refuses a call across
/// slots, one per shard from its first refusal on); each caller is
/// answered with its own outcome once the call returned.
///
/// # Keys and shards
///
/// A namespace is spread over [shards](Self::with_shards) (16 by default),
/// so that on a cluster one busy namespace uses every master. Shard `s` of
/// namespace `ns` holds, under the hash tag `{ns/s}`:
/// `hooklatch:{ns/s}:claim:<id>` (a string that expires after the
/// retention), `hooklatch:{ns/s}:inbox` (a stream read by the consumer
/// group `hooklatch`; `XAUTOCLAIM` hands entries whose worker died to
/// another), `…:attempts`, `…:delayed` and `…:dead`. An event's claim and
/// its inbox entry are in the shard its id hashes to, so claiming and
/// enqueueing stay one script on one node. [`take`](super::InboxQueue::take) asks every
/// shard, starting at a different one each call. With one shard the tag is
/// `{ns}`: the layout of stores made before shards.
///
/// The shard count is recorded per namespace (`hooklatch:{ns}:shards`) on
/// first use, and a store configured with another count refuses the
/// namespace ([`DedupError::ShardCountMismatch`]) rather than miss the
/// claims and events in the other layout.
///
/// # Upgrading from a release before shards
///
/// A namespace that already has keys of the layout before shards (an inbox
/// stream, or lease-mode claims) is recorded as one shard, so its claims
/// and events are still found. The first use of a namespace with no record
/// looks for such claims with one `SCAN` of the node that holds the tag
/// `{ns}`. A namespace whose old claims have all expired has nothing to
/// find: while instances of the old release still run on it, give the new
/// ones [`with_shards(1)`](Self::with_shards) (or stop the old ones first),
/// or old and new instances will each accept the same event.
///
/// # Durability
///
/// "Accepted" is as durable as the server's persistence, so a store is
/// opened only on servers that keep an append-only file
/// ([`DedupError::NoPersistence`] otherwise). What a crash of the server
/// (or of its machine) can lose, after the sender was told 2xx and so will
/// not retry:
///
/// | setting | lost in a crash |
/// |---|---|
/// | `appendonly yes`, `appendfsync always` | nothing |
/// | `appendonly yes`, `appendfsync everysec` (Redis' default for AOF) | up to about a second of accepts, acks and done marks |
/// | `appendonly yes`, `appendfsync no` | what the kernel had not written yet: up to about 30 s |
/// | `appendonly no`, RDB snapshots (`save`) | everything since the last snapshot; refused unless opted out |
/// | `appendonly no`, no snapshots | everything; refused unless opted out |
///
/// A lost ack delivers its event again (at least once, as ever); a lost
/// accept is an event the sender will not send again. Claims and events
/// are always lost or kept together, never one without the other, and
/// fencing tokens carry a nonce, so a rolled-back count never lets a stale
/// worker ack.
///
/// Replication is asynchronous: a master that fails before its replicas
/// have an accept loses it when a replica is promoted, though the sender
/// was answered 2xx. [`with_replica_acks`](Self::with_replica_acks) closes
/// that window: an accept is answered only once enough replicas have it.
#[derive(Clone)]
pub struct RedisInbox {
    connection: RedisConnection,
    options: StoreOptions,
    shards: Shards,
    replica_acks: Option<(u32, Duration)>,
    /// Where the next `take` starts asking shards.
    next_shard: Arc<AtomicUsize>,
    /// Accepts sent to the server in batches.
    accepts: accept_batch::AcceptBatches,
}

impl std::fmt::Debug for RedisInbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisInbox")
            .field("connection", &self.connection)
            .field("prefix", &self.shards.prefix)
            .field("shards", &self.shards.count)
            .field("replica_acks", &self.replica_acks)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Fails unless every node's `maxmemory-policy` is `noeviction`.
pub(crate) async fn check_eviction_policy(
    connection: &mut RedisConnection,
) -> Result<(), DedupError> {
    match connection.evicting_policy().await? {
        None => Ok(()),
        Some(policy) => Err(DedupError::EvictionPolicy(policy)),
    }
}

/// Fails when a node keeps no append-only file, unless the connection was
/// opened without that check.
pub(crate) async fn check_persistence(connection: &mut RedisConnection) -> Result<(), DedupError> {
    match connection.unpersisted_node().await? {
        None => Ok(()),
        Some(node) => Err(DedupError::NoPersistence(node)),
    }
}

impl RedisInbox {
    /// Connects to `address`: one server (`redis://127.0.0.1:6379`,
    /// `rediss://` for TLS) or a cluster
    /// (`redis+cluster://10.0.0.1:7000,10.0.0.2:7000`; see
    /// [`RedisConnection::open`]). The connection reconnects by itself;
    /// while Redis is unreachable, every call fails (after at most a few
    /// seconds) instead of guessing.
    ///
    /// Refuses a server, or any cluster node, whose `maxmemory-policy` is
    /// anything but `noeviction` ([`DedupError::EvictionPolicy`]): under a
    /// `volatile-*` policy the claims, the only keys with a time to live,
    /// are evicted first and a retry is accepted again; under `allkeys-*`
    /// an accepted event can vanish from the inbox.
    ///
    /// Refuses one that keeps no append-only file
    /// ([`DedupError::NoPersistence`]): see [Durability](#durability) for
    /// what each persistence setting can lose, and
    /// [`RedisConnection::insecure_allowing_no_persistence`] to opt out.
    pub async fn connect(address: &str) -> Result<Self, DedupError> {
        Self::new(RedisConnection::open(address).await?).await
    }

    /// A store on a connection you made, checked like
    /// [`connect`](Self::connect) checks.
    pub async fn new(mut connection: RedisConnection) -> Result<Self, DedupError> {
        check_eviction_policy(&mut connection).await?;
        check_persistence(&mut connection).await?;
        Ok(Self::on(connection))
    }

    /// Like [`connect`](Self::connect), without the eviction-policy check
    /// (the persistence check stays):
    /// for a server you know cannot run out of memory, or tests that show
    /// what eviction does. An evicted claim lets a retry in again.
    pub async fn insecure_connect_allowing_eviction(address: &str) -> Result<Self, DedupError> {
        let mut connection = RedisConnection::open(address).await?;
        check_persistence(&mut connection).await?;
        Ok(Self::on(connection))
    }

    fn on(connection: RedisConnection) -> Self {
        Self {
            connection,
            options: StoreOptions::default(),
            shards: Shards::new("hooklatch".to_owned(), DEFAULT_SHARDS),
            replica_acks: None,
            accepts: accept_batch::AcceptBatches::new(),
            next_shard: Arc::default(),
        }
    }

    /// Uses `options` for retention, visibility timeout and attempts.
    #[must_use]
    pub fn with_options(mut self, options: StoreOptions) -> Self {
        self.options = options;
        self
    }

    /// Uses `prefix` instead of `hooklatch` at the start of every key. Same
    /// rules as a namespace.
    pub fn with_prefix(mut self, prefix: &str) -> Result<Self, DedupError> {
        validate_namespace(prefix)?;
        self.shards = Shards::new(prefix.to_owned(), self.shards.count);
        Ok(self)
    }

    /// Spreads each namespace over `shards` shards (1 to
    /// [`MAX_SHARDS`]; default [`DEFAULT_SHARDS`]). Every store on a
    /// namespace must use the same count: the first use records it, and a
    /// store with another count is refused the namespace
    /// ([`DedupError::ShardCountMismatch`]). One shard puts a namespace in
    /// one slot, the layout before shards.
    pub fn with_shards(mut self, shards: u16) -> Result<Self, DedupError> {
        if !(1..=MAX_SHARDS).contains(&shards) {
            return Err(DedupError::InvalidShardCount(shards));
        }
        self.shards = Shards::new(self.shards.prefix.clone(), shards);
        Ok(self)
    }

    /// Answers an accept (and a duplicate) only once `replicas` replicas of
    /// the master holding the event have it, waiting at most `timeout`
    /// (Redis `WAIT`). When fewer confirm in time the call fails with
    /// [`DedupError::ReplicasBehind`] (answer 5xx): the event is kept, so
    /// the sender's retry is answered as a duplicate once the replicas have
    /// caught up. Without it, a failover can lose accepts that were already
    /// answered 2xx.
    #[must_use]
    pub fn with_replica_acks(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_acks = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// The connection, for your own commands.
    pub fn connection(&self) -> &RedisConnection {
        &self.connection
    }

    /// How many events of `namespace` are in the inbox streams of all its
    /// shards (taken or not), for tests and monitoring.
    pub async fn inbox_len(&self, namespace: &str) -> Result<u64, DedupError> {
        check_namespace(namespace)?;
        let lengths = join_all(self.shards.from(0).map(|shard| {
            let mut connection = self.connection.clone();
            let stream = self.shards.key(namespace, shard, "inbox");
            async move { connection.xlen::<_, u64>(stream).await }
        }))
        .await;
        let mut total = 0;
        for length in lengths {
            total += length?;
        }
        Ok(total)
    }

    /// Checks, once per namespace, that the shard count on record is this
    /// store's, recording it on first use. A namespace with no record costs
    /// one `SCAN` of the keyspace (for claims of the layout before shards):
    /// callers that arrive meanwhile wait for it rather than scan too.
    async fn check_shards(&self, namespace: &str) -> Result<(), DedupError> {
        if self.shards.is_checked(namespace) {
            return Ok(());
        }
        let lock = self.shards.check_lock(namespace);
        let _checking = lock.lock().await;
        if self.shards.is_checked(namespace) {
            return Ok(());
        }
        let [record, unsharded] = self.shards.record_keys(namespace);
        let mut connection = self.connection.clone();
        let mut recorded: Option<u16> = connection.get(&record).await?;
        if recorded.is_none() {
            // First use, as far as the record says: look for keys of the
            // layout before shards (lease-mode claims have no stream), so an
            // upgrade keeps the dedup they hold.
            let before_shards = connection
                .any_key_matching(&self.shards.unsharded_claims(namespace), &record)
                .await?;
            recorded = Some(
                SHARDS_SCRIPT
                    .key(&record)
                    .key(unsharded)
                    .arg(self.shards.count)
                    .arg(if before_shards { "1" } else { "" })
                    .invoke_async(&mut connection)
                    .await?,
            );
        }
        let recorded = recorded.unwrap_or(self.shards.count);
        if recorded != self.shards.count {
            return Err(DedupError::ShardCountMismatch {
                namespace: namespace.to_owned(),
                recorded,
                configured: self.shards.count,
            });
        }
        self.shards.mark_checked(namespace);
        Ok(())
    }

    /// Checks that the shard count on record, if any, is this store's,
    /// recording nothing: a reader must not fix the count for the
    /// namespace's writers.
    pub(super) async fn check_shards_read_only(&self, namespace: &str) -> Result<(), DedupError> {
        if self.shards.is_checked(namespace) {
            return Ok(());
        }
        let [record, _] = self.shards.record_keys(namespace);
        let recorded: Option<u16> = self.connection.clone().get(&record).await?;
        match recorded {
            Some(recorded) if recorded != self.shards.count => {
                Err(DedupError::ShardCountMismatch {
                    namespace: namespace.to_owned(),
                    recorded,
                    configured: self.shards.count,
                })
            }
            Some(_) => {
                self.shards.mark_checked(namespace);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Runs `script` (whose text is `text`) on `keys` with `args`, on the
    /// master that holds the first key. With
    /// [replica acks](Self::with_replica_acks) the script and `WAIT` go in
    /// one pipeline ([`RedisConnection::eval_and_wait`]), and fewer
    /// replicas than asked for fail the call with
    /// [`DedupError::ReplicasBehind`].
    async fn run_script<T: FromRedisValue>(
        &self,
        (script, text): (&Script, &str),
        keys: &[&str],
        args: &[&[u8]],
    ) -> Result<T, DedupError> {
        let mut connection = self.connection.clone();
        let Some((wanted, timeout)) = self.replica_acks else {
            let mut invocation = script.prepare_invoke();
            for key in keys {
                invocation.key(*key);
            }
            for arg in args {
                invocation.arg(*arg);
            }
            return Ok(invocation.invoke_async(&mut connection).await?);
        };
        let mut command = eval(text, keys);
        for arg in args {
            command.arg(*arg);
        }
        let (reply, acked) = connection.eval_and_wait(command, wanted, timeout).await?;
        if acked < wanted {
            return Err(DedupError::ReplicasBehind { acked, wanted });
        }
        Ok(reply)
    }

    /// Takes up to `max` entries from one shard: due retries, entries
    /// whose worker died and new ones, or with `fresh_only` new ones alone.
    async fn take_from(
        &self,
        namespace: &str,
        shard: u16,
        consumer: &str,
        max: usize,
        fresh_only: bool,
    ) -> Result<Vec<InboxEntry>, DedupError> {
        let mut connection = self.connection.clone();
        let mut script = TAKE_SCRIPT.prepare_invoke();
        for key in self.shards.inbox_keys(namespace, shard) {
            script.key(key);
        }
        script.key(self.shards.idle_key(namespace, shard));
        for key in self.shards.tail_keys(namespace, shard) {
            script.key(key);
        }
        let rows: Vec<TakenRow> = script
            .arg(GROUP)
            .arg(consumer)
            .arg(max)
            .arg(millis(self.options.visibility_timeout()))
            .arg(self.options.max_attempts())
            .arg(new_token())
            .arg(if fresh_only { "1" } else { "" })
            .arg(crate::dedup::LAST_ATTEMPT_TIMED_OUT)
            .invoke_async(&mut connection)
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| Self::delivery(namespace, shard, row))
            .collect())
    }

    fn delivery(namespace: &str, shard: u16, row: TakenRow) -> InboxEntry {
        let (entry, id, body, signed_at, attempt, token, meta) = row;
        let attempt: u32 = attempt.parse().unwrap_or(u32::MAX);
        InboxEntry {
            namespace: namespace.to_owned(),
            id,
            body,
            signed_at: signed_at.parse().ok(),
            attempt,
            meta: EventMeta::from_text(Some(&meta)),
            dead: None,
            // A retry is appended to the stream again when due: only a
            // first attempt's stream id is its accept's time.
            received_at_millis: (attempt == 1).then(|| stream_id_millis(&entry)).flatten(),
            receipt: Receipt {
                entry: receipt_entry(shard, &entry),
                token,
            },
        }
    }

    /// The inbox keys of the shard a taken entry came from, and its stream
    /// entry id.
    fn taken_from<'a>(
        &self,
        delivery: &'a InboxEntry,
    ) -> Result<([String; 4], &'a str), DedupError> {
        let (shard, entry) =
            parse_receipt_entry(&delivery.receipt.entry).ok_or(DedupError::DeliveryLost)?;
        if shard >= self.shards.count {
            return Err(DedupError::DeliveryLost);
        }
        Ok((self.shards.inbox_keys(&delivery.namespace, shard), entry))
    }
}

type TakenRow = (String, String, Vec<u8>, String, String, String, String);

impl RedisInbox {
    /// Runs a fenced script on a taken entry (`ack`, heartbeat), with an
    /// optional milliseconds argument: it answers 1 when this delivery
    /// still holds the entry.
    async fn on_taken(
        &self,
        script: &Script,
        delivery: &InboxEntry,
        ms: Option<i64>,
    ) -> Result<(), DedupError> {
        let ([stream, attempts, ..], entry) = self.taken_from(delivery)?;
        let mut invocation = script.key(stream);
        invocation
            .key(attempts)
            .arg(GROUP)
            .arg(entry)
            .arg(&delivery.receipt.token);
        self.run_fenced(invocation, ms, DedupError::DeliveryLost)
            .await
    }

    /// Runs a fenced script (a lease's or a taken entry's), with `ms` as
    /// its last argument when given: `Ok` when it answers 1, the caller
    /// still holding what it names, else `lost`.
    pub(super) async fn run_fenced(
        &self,
        mut invocation: redis::ScriptInvocation<'_>,
        ms: Option<i64>,
        lost: DedupError,
    ) -> Result<(), DedupError> {
        if let Some(ms) = ms {
            invocation.arg(ms);
        }
        let mut connection = self.connection.clone();
        let held: i64 = invocation.invoke_async(&mut connection).await?;
        if held == 1 { Ok(()) } else { Err(lost) }
    }
}

/// The time a stream entry id starts with: when the server appended it, in
/// ms since the epoch on its clock.
pub(super) fn stream_id_millis(entry: &str) -> Option<i64> {
    entry.split('-').next()?.parse().ok()
}
