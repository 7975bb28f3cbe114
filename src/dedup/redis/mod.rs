//! [`RedisStore`]: claims and inbox in Redis, one Lua script per step, on
//! one server or a Redis Cluster, each namespace spread over shards.

mod shards;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures_util::future::join_all;
use redis::{AsyncCommands as _, Script};

use super::{
    Acceptance, Claim, DedupError, Inbox, InboxEntry, IncomingEvent, Lease, LeaseStore,
    NackOutcome, Receipt, StoreOptions, check_key, check_namespace, millis, new_token,
};
use crate::store::redis::RedisConnection;
pub use shards::{DEFAULT_SHARDS, MAX_SHARDS};
use shards::{Shards, parse_receipt_entry, receipt_entry};

/// Claims the id and appends the event to the inbox stream, or does
/// nothing if the id is claimed. If the append fails, the claim is deleted
/// again before the script ends, so nothing is kept.
const ACCEPT: &str = include_str!("lua/accept.lua");

/// Moves due retries back onto the stream, reclaims entries whose worker
/// died, reads new ones, and dead-letters any past its last attempt.
/// Returns `{entry, id, body, signed_at, attempt}` for each delivery.
const TAKE: &str = include_str!("lua/take.lua");

/// Acks an entry if this delivery still holds it (its token is the
/// entry's delivery count, which a reclaim by another worker increases).
const ACK: &str = include_str!("lua/ack.lua");

/// Gives an entry back: to the delayed set for `retry_in` ms on the
/// server's clock, or to the dead letters after its last attempt. -1: no
/// longer held; 0: will retry; 1: dead-lettered.
const NACK: &str = include_str!("lua/nack.lua");

/// 1: fresh lease; 2: done; 3: in progress, with the lease's remaining ms.
const CLAIM: &str = include_str!("lua/claim.lua");

const COMPLETE: &str = include_str!("lua/complete.lua");

/// A heartbeat for a taken entry this delivery still holds: its idle time,
/// which `XAUTOCLAIM` measures against the visibility timeout, starts
/// again from zero (`JUSTID` leaves the delivery count alone).
const EXTEND_TAKEN: &str = include_str!("lua/extend_taken.lua");

/// A heartbeat for a lease this delivery still holds.
const EXTEND_LEASE: &str = include_str!("lua/extend_lease.lua");

const RELEASE: &str = include_str!("lua/release.lua");

/// Records a namespace's shard count on first use; returns the count on
/// record.
const SHARDS: &str = include_str!("lua/shards.lua");

static ACCEPT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACCEPT));
static TAKE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(TAKE));
static ACK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACK));
static NACK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(NACK));
static CLAIM_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(CLAIM));
static COMPLETE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(COMPLETE));
static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE));
static EXTEND_TAKEN_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_TAKEN));
static EXTEND_LEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LEASE));
static SHARDS_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(SHARDS));

/// The consumer group every worker joins.
const GROUP: &str = "hooklatch";

/// Claims and inbox in Redis, for many receiver instances sharing one
/// server or a Redis Cluster.
///
/// Each step is one Lua script, so it is atomic, and every key a script
/// touches is passed in `KEYS[]`.
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
/// enqueueing stay one script on one node. [`take`](Inbox::take) asks every
/// shard, starting at a different one each call. With one shard the tag is
/// `{ns}`: the layout of stores made before shards.
///
/// The shard count is recorded per namespace (`hooklatch:{ns}:shards`) on
/// first use, and a store configured with another count refuses the
/// namespace ([`DedupError::ShardCountMismatch`]) rather than miss the
/// claims and events in the other layout. A namespace with events from
/// before shards is recorded as one shard.
///
/// # Durability
///
/// "Accepted" is as durable as the server's persistence. With AOF and
/// `appendfsync always`, an accepted event survives a crash. With
/// `appendfsync everysec` (the usual setting) up to a second of accepted
/// events can vanish in a crash or power loss, after the sender was told
/// 2xx: the sender will not retry them. With RDB snapshots only, or no
/// persistence, everything since the last snapshot can. Claims and events
/// are always lost or kept together, never one without the other.
///
/// Replication is asynchronous: a master that fails before its replicas
/// have an accept loses it when a replica is promoted, though the sender
/// was answered 2xx. [`with_replica_acks`](Self::with_replica_acks) closes
/// that window: an accept is answered only once enough replicas have it.
#[derive(Clone)]
pub struct RedisStore {
    connection: RedisConnection,
    options: StoreOptions,
    shards: Shards,
    replica_acks: Option<(u32, Duration)>,
    /// Where the next `take` starts asking shards.
    next_shard: Arc<AtomicUsize>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
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

impl RedisStore {
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
    pub async fn connect(address: &str) -> Result<Self, DedupError> {
        Self::new(RedisConnection::open(address).await?).await
    }

    /// A store on a connection you made, checked like
    /// [`connect`](Self::connect) checks.
    pub async fn new(mut connection: RedisConnection) -> Result<Self, DedupError> {
        check_eviction_policy(&mut connection).await?;
        Ok(Self::on(connection))
    }

    /// Like [`connect`](Self::connect), without the eviction-policy check:
    /// for a server you know cannot run out of memory, or tests that show
    /// what eviction does. An evicted claim lets a retry in again.
    pub async fn insecure_connect_allowing_eviction(address: &str) -> Result<Self, DedupError> {
        Ok(Self::on(RedisConnection::open(address).await?))
    }

    fn on(connection: RedisConnection) -> Self {
        Self {
            connection,
            options: StoreOptions::default(),
            shards: Shards::new("hooklatch".to_owned(), DEFAULT_SHARDS),
            replica_acks: None,
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
        check_namespace(prefix)?;
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
    /// store's, recording it on first use.
    async fn check_shards(&self, namespace: &str) -> Result<(), DedupError> {
        if self.shards.is_checked(namespace) {
            return Ok(());
        }
        let [record, unsharded] = self.shards.record_keys(namespace);
        let mut connection = self.connection.clone();
        let recorded: u16 = SHARDS_SCRIPT
            .key(record)
            .key(unsharded)
            .arg(self.shards.count)
            .invoke_async(&mut connection)
            .await?;
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

    /// Waits for the replicas [`with_replica_acks`](Self::with_replica_acks)
    /// asks for, on the master that holds `key`.
    async fn wait_for_replicas(&self, key: &str) -> Result<(), DedupError> {
        let Some((wanted, timeout)) = self.replica_acks else {
            return Ok(());
        };
        let mut connection = self.connection.clone();
        let acked = connection.wait_for_replicas(key, wanted, timeout).await?;
        if acked < wanted {
            return Err(DedupError::ReplicasBehind { acked, wanted });
        }
        Ok(())
    }

    /// Takes up to `max` entries from one shard.
    async fn take_from(
        &self,
        namespace: &str,
        shard: u16,
        consumer: &str,
        max: usize,
    ) -> Result<Vec<InboxEntry>, DedupError> {
        let mut connection = self.connection.clone();
        let mut script = TAKE_SCRIPT.prepare_invoke();
        for key in self.shards.inbox_keys(namespace, shard) {
            script.key(key);
        }
        let rows: Vec<TakenRow> = script
            .arg(GROUP)
            .arg(consumer)
            .arg(max)
            .arg(millis(self.options.visibility_timeout()))
            .arg(self.options.max_attempts())
            .invoke_async(&mut connection)
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| Self::delivery(namespace, shard, row))
            .collect())
    }

    fn delivery(namespace: &str, shard: u16, row: TakenRow) -> InboxEntry {
        let (entry, id, body, signed_at, attempt, token) = row;
        InboxEntry {
            namespace: namespace.to_owned(),
            id,
            body,
            signed_at: signed_at.parse().ok(),
            attempt: attempt.parse().unwrap_or(u32::MAX),
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

type TakenRow = (String, String, Vec<u8>, String, String, String);

impl Inbox for RedisStore {
    async fn accept(&self, event: &IncomingEvent<'_>) -> Result<Acceptance, DedupError> {
        check_key(event.namespace, event.id)?;
        self.check_shards(event.namespace).await?;
        let shard = self.shards.of(event.id);
        let claim = self.shards.claim_key(event.namespace, event.id);
        let mut connection = self.connection.clone();
        let accepted: i64 = ACCEPT_SCRIPT
            .key(&claim)
            .key(self.shards.key(event.namespace, shard, "inbox"))
            .arg(millis(self.options.retention()))
            .arg(event.id)
            .arg(event.body)
            .arg(event.signed_at.map(|t| t.to_string()).unwrap_or_default())
            .invoke_async(&mut connection)
            .await?;
        // A duplicate waits too: the accept it repeats may be the one whose
        // wait fell short.
        self.wait_for_replicas(&claim).await?;
        Ok(if accepted == 1 {
            Acceptance::Accepted
        } else {
            Acceptance::Duplicate
        })
    }

    /// Asks the shards for a fair share each, all at once, starting at a
    /// different shard each call; then asks those that had more for the
    /// rest, one by one. Fails only when nothing was taken and a shard
    /// failed: entries already taken are handed out, and the failing
    /// shard's are taken by a later call.
    async fn take(
        &self,
        namespace: &str,
        consumer: &str,
        max: usize,
    ) -> Result<Vec<InboxEntry>, DedupError> {
        check_namespace(namespace)?;
        if max == 0 {
            return Ok(Vec::new());
        }
        self.check_shards(namespace).await?;
        let start = self.next_shard.fetch_add(1, Ordering::Relaxed);
        let order: Vec<u16> = self.shards.from(start).collect();
        let asked = order.len().min(max);
        let (share, extra) = (max / asked, max % asked);
        let first = join_all(order[..asked].iter().enumerate().map(|(i, &shard)| {
            let want = share + usize::from(i < extra);
            async move {
                (
                    shard,
                    want,
                    self.take_from(namespace, shard, consumer, want).await,
                )
            }
        }))
        .await;
        let mut taken = Vec::with_capacity(max);
        let mut failure = None;
        let mut more = Vec::new();
        for (shard, want, result) in first {
            match result {
                Ok(entries) => {
                    if entries.len() == want {
                        more.push(shard);
                    }
                    taken.extend(entries);
                }
                Err(error) => failure = failure.or(Some(error)),
            }
        }
        more.extend(&order[asked..]);
        for shard in more {
            if taken.len() >= max {
                break;
            }
            match self
                .take_from(namespace, shard, consumer, max - taken.len())
                .await
            {
                Ok(entries) => taken.extend(entries),
                Err(error) => failure = failure.or(Some(error)),
            }
        }
        match failure {
            Some(error) if taken.is_empty() => Err(error),
            _ => Ok(taken),
        }
    }

    async fn ack(&self, delivery: &InboxEntry) -> Result<(), DedupError> {
        self.on_taken(&ACK_SCRIPT, delivery).await
    }

    async fn extend_visibility(&self, delivery: &InboxEntry) -> Result<(), DedupError> {
        self.on_taken(&EXTEND_TAKEN_SCRIPT, delivery).await
    }

    async fn nack(
        &self,
        delivery: &InboxEntry,
        retry_in: Duration,
    ) -> Result<NackOutcome, DedupError> {
        let (keys, entry) = self.taken_from(delivery)?;
        let mut connection = self.connection.clone();
        let mut script = NACK_SCRIPT.prepare_invoke();
        for key in keys {
            script.key(key);
        }
        let outcome: i64 = script
            .arg(GROUP)
            .arg(entry)
            .arg(&delivery.receipt.token)
            .arg(millis(retry_in))
            .arg(self.options.max_attempts())
            .invoke_async(&mut connection)
            .await?;
        match outcome {
            0 => Ok(NackOutcome::WillRetry),
            1 => Ok(NackOutcome::DeadLettered),
            _ => Err(DedupError::DeliveryLost),
        }
    }

    /// The oldest `max` dead letters across the shards.
    async fn dead_letters(
        &self,
        namespace: &str,
        max: usize,
    ) -> Result<Vec<InboxEntry>, DedupError> {
        check_namespace(namespace)?;
        let replies = join_all(self.shards.from(0).map(|shard| {
            let mut connection = self.connection.clone();
            let dead = self.shards.key(namespace, shard, "dead");
            async move {
                let reply: Result<redis::streams::StreamRangeReply, _> =
                    connection.xrange_count(dead, "-", "+", max).await;
                reply
            }
        }))
        .await;
        let mut letters = Vec::new();
        for reply in replies {
            letters.extend(reply?.ids);
        }
        // Stream ids start with their time in ms: oldest first across shards.
        letters.sort_by_key(|entry| {
            let (ms, seq) = entry.id.split_once('-').unwrap_or((&entry.id, "0"));
            (
                ms.parse::<u64>().unwrap_or(u64::MAX),
                seq.parse::<u64>().unwrap_or(0),
            )
        });
        letters.truncate(max);
        Ok(letters
            .into_iter()
            .map(|entry| {
                let field = |name: &str| -> Vec<u8> {
                    entry
                        .map
                        .get(name)
                        .and_then(|value| redis::from_redis_value_ref(value).ok())
                        .unwrap_or_default()
                };
                let text = |name: &str| String::from_utf8(field(name)).unwrap_or_default();
                InboxEntry {
                    namespace: namespace.to_owned(),
                    id: text("id"),
                    body: field("body"),
                    signed_at: text("signed_at").parse().ok(),
                    attempt: text("attempts").parse().unwrap_or(0),
                    receipt: Receipt {
                        entry: entry.id.clone(),
                        token: String::new(),
                    },
                }
            })
            .collect())
    }
}

impl LeaseStore for RedisStore {
    async fn claim(
        &self,
        namespace: &str,
        id: &str,
        lease_for: Duration,
    ) -> Result<Claim, DedupError> {
        check_key(namespace, id)?;
        self.check_shards(namespace).await?;
        let mut connection = self.connection.clone();
        let token = new_token();
        let (state, left_ms): (i64, i64) = CLAIM_SCRIPT
            .key(self.shards.claim_key(namespace, id))
            .arg(&token)
            .arg(millis(lease_for).max(1))
            .invoke_async(&mut connection)
            .await?;
        Ok(match state {
            1 => Claim::Fresh(Lease::new(namespace, id, token)),
            2 => Claim::Done,
            _ => Claim::InProgress {
                retry_after: Duration::from_millis(left_ms.max(0).unsigned_abs()),
            },
        })
    }

    async fn complete(&self, lease: &Lease) -> Result<(), DedupError> {
        let retention = millis(self.options.retention());
        self.on_lease(&COMPLETE_SCRIPT, lease, Some(retention))
            .await
    }

    async fn extend_lease(&self, lease: &Lease, lease_for: Duration) -> Result<(), DedupError> {
        let lease_ms = millis(lease_for).max(1);
        self.on_lease(&EXTEND_LEASE_SCRIPT, lease, Some(lease_ms))
            .await
    }

    async fn release(&self, lease: &Lease) -> Result<(), DedupError> {
        self.on_lease(&RELEASE_SCRIPT, lease, None).await
    }
}

impl RedisStore {
    /// Runs a fenced script on a taken entry (`ack`, heartbeat): it answers
    /// 1 when this delivery still holds the entry.
    async fn on_taken(&self, script: &Script, delivery: &InboxEntry) -> Result<(), DedupError> {
        let ([stream, attempts, ..], entry) = self.taken_from(delivery)?;
        let mut connection = self.connection.clone();
        let held: i64 = script
            .key(stream)
            .key(attempts)
            .arg(GROUP)
            .arg(entry)
            .arg(&delivery.receipt.token)
            .invoke_async(&mut connection)
            .await?;
        if held == 1 {
            Ok(())
        } else {
            Err(DedupError::DeliveryLost)
        }
    }

    /// Runs a fenced script on a lease (complete, heartbeat, release), with
    /// an optional milliseconds argument: it answers 1 when the lease's token
    /// still holds the claim.
    async fn on_lease(
        &self,
        script: &Script,
        lease: &Lease,
        ms: Option<i64>,
    ) -> Result<(), DedupError> {
        let mut connection = self.connection.clone();
        let mut invocation = script.key(self.shards.claim_key(lease.namespace(), lease.id()));
        invocation.arg(lease.token());
        if let Some(ms) = ms {
            invocation.arg(ms);
        }
        let held: i64 = invocation.invoke_async(&mut connection).await?;
        if held == 1 {
            Ok(())
        } else {
            Err(DedupError::LeaseLost)
        }
    }
}
