//! [`RedisStore`]: claims and inbox in Redis, one Lua script per step.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionManager;

use crate::store::redis::connect as redis_connection;
use redis::{AsyncCommands as _, Script};

use super::{
    Acceptance, Claim, DedupError, Inbox, InboxEntry, IncomingEvent, Lease, LeaseStore,
    NackOutcome, Receipt, StoreOptions, check_key, check_namespace, millis, new_token,
};

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

static ACCEPT_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACCEPT));
static TAKE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(TAKE));
static ACK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ACK));
static NACK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(NACK));
static CLAIM_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(CLAIM));
static COMPLETE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(COMPLETE));
static RELEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE));
static EXTEND_TAKEN_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_TAKEN));
static EXTEND_LEASE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LEASE));

/// The consumer group every worker joins.
const GROUP: &str = "hooklatch";

/// Claims and inbox in Redis, for many receiver instances sharing one
/// server or cluster.
///
/// Each step is one Lua script, so it is atomic. For namespace `ns` the
/// keys are `hooklatch:{ns}:claim:<id>` (a string that expires after the
/// retention), `hooklatch:{ns}:inbox` (a stream read by the consumer group
/// `hooklatch`; `XAUTOCLAIM` hands entries whose worker died to another),
/// `hooklatch:{ns}:attempts`, `hooklatch:{ns}:delayed` and
/// `hooklatch:{ns}:dead`. The `{ns}` hash tag keeps one namespace's keys in
/// one Redis Cluster slot.
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
#[derive(Clone)]
pub struct RedisStore {
    connection: ConnectionManager,
    options: StoreOptions,
    prefix: String,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Fails unless the server's `maxmemory-policy` is `noeviction`.
pub(crate) async fn check_eviction_policy(
    connection: &mut ConnectionManager,
) -> Result<(), DedupError> {
    match crate::store::redis::evicting_policy(connection).await? {
        None => Ok(()),
        Some(policy) => Err(DedupError::EvictionPolicy(policy)),
    }
}

impl RedisStore {
    /// Connects to `url` (such as `redis://127.0.0.1:6379`). The connection
    /// reconnects by itself; while the server is unreachable, every call
    /// fails (after at most 5 seconds) instead of guessing.
    ///
    /// Refuses a server whose `maxmemory-policy` is anything but
    /// `noeviction` ([`DedupError::EvictionPolicy`]): under a `volatile-*`
    /// policy the claims, the only keys with a time to live, are evicted
    /// first and a retry is accepted again; under `allkeys-*` an accepted
    /// event can vanish from the inbox.
    pub async fn connect(url: &str) -> Result<Self, DedupError> {
        let mut connection = redis_connection(url).await?;
        check_eviction_policy(&mut connection).await?;
        Ok(Self::on(connection))
    }

    /// Like [`connect`](Self::connect), without the eviction-policy check:
    /// for a server you know cannot run out of memory, or tests that show
    /// what eviction does. An evicted claim lets a retry in again.
    pub async fn insecure_connect_allowing_eviction(url: &str) -> Result<Self, DedupError> {
        Ok(Self::on(redis_connection(url).await?))
    }

    fn on(connection: ConnectionManager) -> Self {
        Self {
            connection,
            options: StoreOptions::default(),
            prefix: "hooklatch".to_owned(),
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
        prefix.clone_into(&mut self.prefix);
        Ok(self)
    }

    fn key(&self, namespace: &str, suffix: &str) -> String {
        format!("{}:{{{namespace}}}:{suffix}", self.prefix)
    }

    fn claim_key(&self, namespace: &str, id: &str) -> String {
        format!("{}:{{{namespace}}}:claim:{id}", self.prefix)
    }

    /// The inbox keys: stream, attempts, delayed, dead.
    fn inbox_keys(&self, namespace: &str) -> [String; 4] {
        ["inbox", "attempts", "delayed", "dead"].map(|suffix| self.key(namespace, suffix))
    }

    /// How many events of `namespace` are in the inbox stream (taken or
    /// not), for tests and monitoring.
    pub async fn inbox_len(&self, namespace: &str) -> Result<u64, DedupError> {
        check_namespace(namespace)?;
        let mut connection = self.connection.clone();
        Ok(connection.xlen(self.key(namespace, "inbox")).await?)
    }

    fn delivery(namespace: &str, row: TakenRow) -> InboxEntry {
        let (entry, id, body, signed_at, attempt, token) = row;
        InboxEntry {
            namespace: namespace.to_owned(),
            id,
            body,
            signed_at: signed_at.parse().ok(),
            attempt: attempt.parse().unwrap_or(u32::MAX),
            receipt: Receipt { entry, token },
        }
    }
}

type TakenRow = (String, String, Vec<u8>, String, String, String);

impl Inbox for RedisStore {
    async fn accept(&self, event: &IncomingEvent<'_>) -> Result<Acceptance, DedupError> {
        check_key(event.namespace, event.id)?;
        let mut connection = self.connection.clone();
        let accepted: i64 = ACCEPT_SCRIPT
            .key(self.claim_key(event.namespace, event.id))
            .key(self.key(event.namespace, "inbox"))
            .arg(millis(self.options.retention()))
            .arg(event.id)
            .arg(event.body)
            .arg(event.signed_at.map(|t| t.to_string()).unwrap_or_default())
            .invoke_async(&mut connection)
            .await?;
        Ok(if accepted == 1 {
            Acceptance::Accepted
        } else {
            Acceptance::Duplicate
        })
    }

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
        let mut connection = self.connection.clone();
        let mut script = TAKE_SCRIPT.prepare_invoke();
        for key in self.inbox_keys(namespace) {
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
            .map(|row| Self::delivery(namespace, row))
            .collect())
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
        let mut connection = self.connection.clone();
        let mut script = NACK_SCRIPT.prepare_invoke();
        for key in self.inbox_keys(&delivery.namespace) {
            script.key(key);
        }
        let outcome: i64 = script
            .arg(GROUP)
            .arg(&delivery.receipt.entry)
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

    async fn dead_letters(
        &self,
        namespace: &str,
        max: usize,
    ) -> Result<Vec<InboxEntry>, DedupError> {
        check_namespace(namespace)?;
        let mut connection = self.connection.clone();
        let reply: redis::streams::StreamRangeReply = connection
            .xrange_count(self.key(namespace, "dead"), "-", "+", max)
            .await?;
        Ok(reply
            .ids
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
        let mut connection = self.connection.clone();
        let token = new_token();
        let (state, left_ms): (i64, i64) = CLAIM_SCRIPT
            .key(self.claim_key(namespace, id))
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
        let mut connection = self.connection.clone();
        let [stream, attempts, ..] = self.inbox_keys(&delivery.namespace);
        let held: i64 = script
            .key(stream)
            .key(attempts)
            .arg(GROUP)
            .arg(&delivery.receipt.entry)
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
        let mut invocation = script.key(self.claim_key(lease.namespace(), lease.id()));
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
