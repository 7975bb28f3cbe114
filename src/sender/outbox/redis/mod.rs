//! [`RedisOutbox`]: Redis deliveries, a Lua script per step, sharded
//! with a due index each (`take_across.rs`); older outboxes move (`migrate.rs`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use redis::{AsyncCommands as _, Script};
use tokio::sync::OnceCell;

use super::codes::{
    HealthFields, attempt_fields, attempt_from_fields, disable_fields, due, failed_at,
    health_from_fields, step_fields, stored, trace_text,
};
use super::{
    DeliveryCounts, DeliveryState, DeliveryStore, DisableReason, Due, DueAcross, EndpointHealth,
    HealthChange, Step, StoredDelivery, Taken, Wanted,
};
use crate::dedup::validate_namespace;
use crate::sender::OutboxError;
use crate::sender::outbox::NewDelivery;
use crate::sender::rules::Attempt;
use crate::store::redis::RedisConnection;
use crate::store::{millis, new_token, now_millis, unix_millis};

/// Every state a delivery can be in, each with its own sorted set.
pub(in crate::sender::outbox) const STATES: [DeliveryState; 4] = [
    DeliveryState::Pending,
    DeliveryState::Delivered,
    DeliveryState::Gone,
    DeliveryState::Dead,
];

/// A script changing a due set: `lua/head.lua` (ready set), then `lua/$file`.
macro_rules! with_head {
    ($file:literal) => {
        LazyLock::new(|| {
            $crate::sender::outbox::redis::Lua::new(concat!(
                include_str!("../lua/head.lua"),
                include_str!(concat!("../lua/", $file))
            ))
        })
    };
}

/// A Lua script that writes, and its text: with
/// [replica acks](RedisOutbox::with_replica_acks) the text goes by `EVAL`
/// in one pipeline with `WAIT` ([`RedisConnection::eval_and_wait`]).
pub(in crate::sender::outbox) struct Lua {
    script: Script,
    text: &'static str,
}

impl Lua {
    pub(in crate::sender::outbox) fn new(text: &'static str) -> Self {
        Self {
            script: Script::new(text),
            text,
        }
    }
}

/// One call of a [`Lua`] script: its keys, then its arguments.
#[derive(Default)]
pub(in crate::sender::outbox) struct Call {
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
}

impl Call {
    pub(in crate::sender::outbox) fn key(&mut self, key: impl Into<String>) -> &mut Self {
        self.keys.push(key.into());
        self
    }

    pub(in crate::sender::outbox) fn arg(&mut self, arg: impl redis::ToRedisArgs) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }
}

mod migrate;
mod purge;
mod take_across;

// One Lua script per step; each file says what it does.

static ENQUEUE_SCRIPT: LazyLock<Lua> = with_head!("enqueue.lua");
static TAKE_SCRIPT: LazyLock<Lua> = with_head!("take.lua");
static FINISH_SCRIPT: LazyLock<Lua> = with_head!("finish.lua");
static PUT_BACK_SCRIPT: LazyLock<Lua> = with_head!("put_back.lua");
static REPLAY_SCRIPT: LazyLock<Lua> = with_head!("replay.lua");
static PURGE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/purge.lua")));
static DISABLE_SCRIPT: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("../lua/disable.lua")));
static ENABLE_SCRIPT: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("../lua/enable.lua")));

/// How many shards the endpoints are spread over. It is part of the key
/// layout: changing it would hide every endpoint in another shard.
const SHARDS: u16 = 16;

/// Deliveries and their attempts in Redis, shared by any number of
/// dispatchers: each step is one Lua script, so a delivery is leased by
/// one dispatcher at a time, and one whose dispatcher died is due again
/// when its lease ends.
///
/// # Keys
///
/// Endpoints are spread over 16 shards by a hash of their name; shard `S`
/// of the prefix `hooklatch` has the hash tag `{hooklatch/out/S}`, so a
/// busy outbox uses every master of a Redis Cluster. For endpoint `E`
/// every key starts with `hooklatch:{hooklatch/out/S}:E/`: `d:ID` (a
/// hash: body, state, due time, lease), `a:ID:N` (attempt N), `due` (due
/// times), `s:0` to `s:3` (ids by state), `finished` (end times, for
/// [`purge`](crate::sender::outbox::Keeping::purge)), `health`, and `keys` and
/// `key_expiry` (idempotency keys: the id each names, and when it
/// expires). Each shard has a due
/// index, `hooklatch:{hooklatch/out/S}:ready` (each endpoint with due
/// deliveries, scored by its earliest), and the sets `off` (disabled
/// endpoints) and `endpoints`. Every key a script touches is named in its
/// `KEYS`, all in one shard, so each script runs on one Cluster node.
///
/// A take across endpoints makes at most two script calls a shard,
/// whatever the number of endpoints: one reads the shard's due index and
/// each wanted endpoint's earliest due ids, the other leases those still
/// due (a delivery leased or finished in between is skipped).
///
/// An outbox written by an earlier release (every key of an endpoint under
/// the hash tag `{E}`) is moved into this layout on each store's first
/// call; stop dispatchers of the earlier release first, since what they
/// write after the move is moved only by the next store made on it.
///
/// ```no_run
/// use hooklatch::sender::RedisOutbox;
///
/// # async fn run() -> Result<(), hooklatch::sender::OutboxError> {
/// let store = RedisOutbox::connect("redis://127.0.0.1:6379").await?;
/// # let _ = store;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisOutbox {
    pub(super) connection: RedisConnection,
    pub(super) prefix: String,
    /// Set once an outbox in the earlier layout has been moved.
    moved: Arc<OnceCell<()>>,
    replica_acks: Option<(u32, Duration)>,
}

impl std::fmt::Debug for RedisOutbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisOutbox")
            .field("prefix", &self.prefix)
            .field("replica_acks", &self.replica_acks)
            .finish_non_exhaustive()
    }
}

impl RedisOutbox {
    /// Connects to `url` (such as `redis://127.0.0.1:6379`). The connection
    /// reconnects by itself; while the server is unreachable, every call
    /// fails (after at most 5 seconds).
    ///
    /// Refuses a server whose `maxmemory-policy` is not `noeviction`
    /// ([`OutboxError::EvictionPolicy`]): an evicted delivery would be lost
    /// without a trace. Refuses one that keeps no append-only file
    /// ([`OutboxError::NoPersistence`]): a restart would bring back sent
    /// deliveries, lift disables and forget endpoints and idempotency keys
    /// (see [`RedisConnection::insecure_allowing_no_persistence`]).
    pub async fn connect(url: &str) -> Result<Self, OutboxError> {
        Self::new(RedisConnection::open(url).await?).await
    }

    /// Deliveries on a connection you made, checked like
    /// [`connect`](Self::connect) checks.
    pub async fn new(mut connection: RedisConnection) -> Result<Self, OutboxError> {
        crate::dedup::check_eviction_policy(&mut connection).await?;
        crate::dedup::check_persistence(&mut connection).await?;
        Ok(Self {
            connection,
            prefix: "hooklatch".to_owned(),
            moved: Arc::default(),
            replica_acks: None,
        })
    }

    /// Answers a send (and the record of an attempt, a disable, an enable)
    /// only once `replicas` replicas of the master holding it have it,
    /// waiting at most `timeout` (Redis `WAIT`). When fewer confirm in time,
    /// or the master that answers no longer holds the write (a failover
    /// promoted a replica that never had it), the call fails with
    /// [`OutboxError::ReplicasBehind`]: the write is kept where it was made,
    /// so a retry finds it once the replicas catch up. Without it, a
    /// failover can lose sends already answered as kept.
    #[must_use]
    pub fn with_replica_acks(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_acks = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// Runs `lua` with `call`'s keys and arguments on the master that
    /// holds its first key. With [replica acks](Self::with_replica_acks),
    /// the script and `WAIT` go in one pipeline, so that after a failover
    /// during the `WAIT` the script runs again on the promoted replica and
    /// the answer is about the node that holds the write; fewer replicas
    /// than asked for fail the call with [`OutboxError::ReplicasBehind`]
    /// after `check` has looked at the reply (a lost lease is reported as
    /// such, whatever the replicas).
    pub(in crate::sender::outbox) async fn run<T: redis::FromRedisValue>(
        &self,
        lua: &Lua,
        call: &Call,
        check: impl FnOnce(&T) -> Result<(), OutboxError>,
    ) -> Result<T, OutboxError> {
        let mut connection = self.connection().await?;
        let Some((wanted, timeout)) = self.replica_acks else {
            let mut invocation = lua.script.prepare_invoke();
            for key in &call.keys {
                invocation.key(key);
            }
            for arg in &call.args {
                invocation.arg(arg);
            }
            let reply = invocation.invoke_async(&mut connection).await?;
            check(&reply)?;
            return Ok(reply);
        };
        let keys: Vec<&str> = call.keys.iter().map(String::as_str).collect();
        let mut command = crate::store::redis::eval(lua.text, &keys);
        for arg in &call.args {
            command.arg(arg);
        }
        let (reply, acked) = connection.eval_and_wait(command, wanted, timeout).await?;
        check(&reply)?;
        if acked < wanted {
            return Err(OutboxError::ReplicasBehind { acked, wanted });
        }
        Ok(reply)
    }

    /// Uses `prefix` instead of `hooklatch` at the start of every key. Same
    /// rules as a namespace.
    pub fn with_prefix(mut self, prefix: &str) -> Result<Self, OutboxError> {
        validate_namespace(prefix)?;
        prefix.clone_into(&mut self.prefix);
        self.moved = Arc::default();
        Ok(self)
    }

    /// The connection, once an outbox in the earlier layout is moved.
    pub(super) async fn connection(&self) -> Result<RedisConnection, OutboxError> {
        self.moved.get_or_try_init(|| self.move_earlier()).await?;
        Ok(self.connection.clone())
    }

    /// The shard of `endpoint`: FNV-1a (32 bits) over its name, so every
    /// process and release agrees.
    pub(super) fn shard(endpoint: &str) -> u16 {
        let hash = endpoint.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
            (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
        });
        (hash % u32::from(SHARDS)) as u16
    }

    /// The shard-wide key `name` (`ready`, `off` or `endpoints`) of `shard`.
    pub(super) fn shard_key(&self, shard: u16, name: &str) -> String {
        format!("{0}:{{{0}/out/{shard}}}:{name}", self.prefix)
    }

    /// The key `name` of `endpoint` (such as `due` or `d:ID`). An endpoint
    /// name holds no `/`, so no two endpoints' keys meet.
    pub(super) fn key(&self, endpoint: &str, name: &str) -> String {
        format!(
            "{0}:{{{0}/out/{1}}}:{endpoint}/{name}",
            self.prefix,
            Self::shard(endpoint)
        )
    }

    /// The hash holding the endpoint's health.
    pub(in crate::sender::outbox) fn health_key(&self, endpoint: &str) -> String {
        self.key(endpoint, "health")
    }

    /// The hash holding a delivery.
    pub(super) fn delivery_key(&self, endpoint: &str, id: &str) -> String {
        self.key(endpoint, &format!("d:{id}"))
    }

    /// The hash holding a delivery's attempt `n` (from 1).
    pub(super) fn attempt_key(&self, endpoint: &str, id: &str, n: i64) -> String {
        self.key(endpoint, &format!("a:{id}:{n}"))
    }

    /// The set of a state's ids.
    pub(super) fn state_key(&self, endpoint: &str, state: DeliveryState) -> String {
        self.key(endpoint, &format!("s:{}", state.code()))
    }

    /// Every endpoint that has had a delivery, shard by shard.
    pub(super) async fn endpoints_with_deliveries(&self) -> Result<Vec<String>, OutboxError> {
        self.members_of_every_shard("endpoints").await
    }

    /// Every endpoint with a delivery or disabled (those with no delivery
    /// too), one pipeline per shard.
    pub(in crate::sender::outbox) async fn endpoints_used_or_disabled(
        &self,
    ) -> Result<Vec<String>, OutboxError> {
        let mut connection = self.connection().await?;
        let mut members = Vec::new();
        for shard in 0..SHARDS {
            let (used, disabled): (Vec<String>, Vec<String>) = redis::pipe()
                .smembers(self.shard_key(shard, "endpoints"))
                .smembers(self.shard_key(shard, "off"))
                .query_async(&mut connection)
                .await?;
            members.extend(used.into_iter().chain(disabled));
        }
        Ok(members)
    }

    async fn members_of_every_shard(&self, set: &str) -> Result<Vec<String>, OutboxError> {
        let mut connection = self.connection().await?;
        let mut members = Vec::new();
        for shard in 0..SHARDS {
            let some: Vec<String> = connection.smembers(self.shard_key(shard, set)).await?;
            members.extend(some);
        }
        Ok(members)
    }

    /// The shard's ready set: the due index.
    pub(super) fn ready_key(&self, endpoint: &str) -> String {
        self.shard_key(Self::shard(endpoint), "ready")
    }
}

/// A number from a Redis hash field.
fn number(fields: &HashMap<String, Vec<u8>>, name: &str) -> i64 {
    fields
        .get(name)
        .and_then(|value| std::str::from_utf8(value).ok())
        .and_then(|text| text.parse().ok())
        .unwrap_or(0)
}

impl DeliveryStore for RedisOutbox {
    /// `TIME`, on a cluster from the master of shard 0's slot: the
    /// command goes in one pipeline after one on a key of that shard, so
    /// every dispatcher on the outbox reads the same server's clock.
    async fn store_time(&self) -> Result<SystemTime, OutboxError> {
        let mut connection = self.connection().await?;
        let ((seconds, micros),): ((u64, u64),) = redis::pipe()
            .cmd("EXISTS")
            .arg(self.shard_key(0, "ready"))
            .ignore()
            .cmd("TIME")
            .query_async(&mut connection)
            .await?;
        let since_epoch =
            Duration::from_secs(seconds).saturating_add(Duration::from_micros(micros));
        Ok(SystemTime::UNIX_EPOCH
            .checked_add(since_epoch)
            .unwrap_or(SystemTime::UNIX_EPOCH))
    }

    async fn add_delivery(&self, new: NewDelivery<'_>) -> Result<bool, OutboxError> {
        let (endpoint, id, body, due) = (new.endpoint(), new.id(), new.body(), new.due());
        let shard = Self::shard(endpoint);
        let mut call = Call::default();
        call.key(self.delivery_key(endpoint, id))
            .key(self.key(endpoint, "due"))
            .key(self.state_key(endpoint, DeliveryState::Pending))
            .key(self.shard_key(shard, "ready"))
            .key(self.shard_key(shard, "endpoints"))
            .arg(id)
            .arg(body)
            .arg(unix_millis(due))
            .arg(now_millis())
            .arg(endpoint)
            .arg(trace_text(&new));
        // A repeat waits too: the send it repeats may be the one whose wait
        // fell short.
        let added: i64 = self.run(&ENQUEUE_SCRIPT, &call, |_| Ok(())).await?;
        Ok(added == 1)
    }

    async fn take_due(
        &self,
        endpoint: &str,
        now: SystemTime,
        limit: usize,
        lease: Duration,
    ) -> Result<Due, OutboxError> {
        validate_namespace(endpoint)?;
        let mut connection = self.connection().await?;
        let token = new_token();
        let now = unix_millis(now);
        let ids: Vec<String> = if limit == 0 {
            Vec::new()
        } else {
            let count = isize::try_from(limit).unwrap_or(isize::MAX);
            connection
                .zrangebyscore_limit(self.key(endpoint, "due"), "-inf", now, 0, count)
                .await?
        };
        let group = take_across::Group {
            endpoint,
            now,
            until: now.saturating_add(millis(lease)),
            ids,
        };
        let mut found = self
            .lease(Self::shard(endpoint), &token, &[group])
            .await?
            .into_iter();
        let (health, rows) = found
            .next()
            .map(|(_, health, rows)| (health, rows))
            .unwrap_or_default();
        Ok(due(endpoint, &token, health_from_fields(health), rows))
    }

    async fn take_due_across(
        &self,
        wanted: &[Wanted],
        limit: usize,
        lease: Duration,
    ) -> Result<DueAcross, OutboxError> {
        self.take_across(wanted, limit, lease).await
    }

    async fn finish(
        &self,
        taken: &Taken,
        attempt: &Attempt,
        step: Step,
        change: Option<HealthChange>,
    ) -> Result<EndpointHealth, OutboxError> {
        let (state, due, waited, reason) = step_fields(step);
        let (
            number,
            sent_at,
            attempt_waited,
            attempt_reason,
            held,
            status,
            error,
            duration,
            excerpt,
        ) = attempt_fields(attempt);
        let change = match change.map(failed_at) {
            None => String::new(),
            Some(None) => "success".to_owned(),
            Some(Some(at)) => at.to_string(),
        };
        let endpoint = &taken.endpoint;
        let mut call = Call::default();
        call.key(self.delivery_key(endpoint, &taken.id))
            .key(self.key(endpoint, "due"))
            .key(self.state_key(endpoint, DeliveryState::Pending))
            .key(self.state_key(endpoint, state))
            .key(self.key(endpoint, "finished"))
            .key(self.attempt_key(endpoint, &taken.id, number))
            .key(self.health_key(endpoint))
            .key(self.ready_key(endpoint))
            .arg(&taken.id)
            .arg(&taken.token)
            .arg(state.code())
            .arg(due.unwrap_or(0))
            .arg(waited)
            .arg(reason)
            .arg(now_millis())
            .arg(number)
            .arg(sent_at)
            .arg(attempt_waited)
            .arg(attempt_reason)
            .arg(held)
            .arg(status.map(|status| status.to_string()).unwrap_or_default())
            .arg(error.unwrap_or_default())
            .arg(duration)
            .arg(excerpt)
            .arg(change)
            .arg(endpoint);
        let health: Option<HealthFields> = self
            .run(&FINISH_SCRIPT, &call, |health: &Option<HealthFields>| {
                health.as_ref().map(|_| ()).ok_or(OutboxError::LeaseLost)
            })
            .await?;
        Ok(health_from_fields(health.ok_or(OutboxError::LeaseLost)?))
    }

    async fn put_back(&self, taken: &Taken, due: SystemTime) -> Result<(), OutboxError> {
        let mut call = Call::default();
        call.key(self.delivery_key(&taken.endpoint, &taken.id))
            .key(self.key(&taken.endpoint, "due"))
            .key(self.ready_key(&taken.endpoint))
            .arg(&taken.id)
            .arg(&taken.token)
            .arg(unix_millis(due))
            .arg(&taken.endpoint);
        let lease_held = |put: &i64| match put {
            1 => Ok(()),
            _ => Err(OutboxError::LeaseLost),
        };
        let _: i64 = self.run(&PUT_BACK_SCRIPT, &call, lease_held).await?;
        Ok(())
    }

    async fn delivery(
        &self,
        endpoint: &str,
        id: &str,
    ) -> Result<Option<StoredDelivery>, OutboxError> {
        validate_namespace(endpoint)?;
        let mut connection = self.connection().await?;
        let fields: HashMap<String, Vec<u8>> =
            connection.hgetall(self.delivery_key(endpoint, id)).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        let recorded = number(&fields, "attempts");
        let rows: Vec<HashMap<String, Vec<u8>>> = if recorded > 0 {
            let mut pipe = redis::pipe();
            for n in 1..=recorded {
                pipe.hgetall(self.attempt_key(endpoint, id, n));
            }
            pipe.query_async(&mut connection).await?
        } else {
            Vec::new()
        };
        let attempts = rows
            .iter()
            .zip(1..)
            .filter(|(row, _)| !row.is_empty())
            .map(|(row, n)| {
                let status = row.get("status").filter(|s| !s.is_empty());
                attempt_from_fields((
                    n,
                    number(row, "sent_at"),
                    number(row, "waited_ms"),
                    number(row, "reason"),
                    number(row, "held_ms"),
                    status.map(|_| number(row, "status")),
                    row.get("error")
                        .map(|e| String::from_utf8_lossy(e).into_owned()),
                    number(row, "duration_us"),
                    row.get("excerpt").cloned().unwrap_or_default(),
                ))
            })
            .collect();
        let body = fields.get("body").cloned().unwrap_or_default();
        let state = (number(&fields, "state"), number(&fields, "due_at"));
        Ok(Some(stored(endpoint, id, body, state, attempts)))
    }

    async fn list(
        &self,
        endpoint: &str,
        state: DeliveryState,
        limit: usize,
    ) -> Result<Vec<String>, OutboxError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        validate_namespace(endpoint)?;
        let mut connection = self.connection().await?;
        let key = self.state_key(endpoint, state);
        let last = isize::try_from(limit - 1).unwrap_or(isize::MAX);
        Ok(connection.zrange(key, 0, last).await?)
    }

    async fn replay(&self, endpoint: &str, id: &str, now: SystemTime) -> Result<bool, OutboxError> {
        validate_namespace(endpoint)?;
        let mut call = Call::default();
        call.key(self.delivery_key(endpoint, id))
            .key(self.key(endpoint, "due"))
            .key(self.key(endpoint, "finished"))
            .key(self.state_key(endpoint, DeliveryState::Pending))
            .key(self.state_key(endpoint, DeliveryState::Gone))
            .key(self.state_key(endpoint, DeliveryState::Dead))
            .key(self.ready_key(endpoint))
            .arg(id)
            .arg(unix_millis(now))
            .arg(endpoint);
        let replayed: i64 = self.run(&REPLAY_SCRIPT, &call, |_| Ok(())).await?;
        Ok(replayed == 1)
    }

    async fn disable(
        &self,
        endpoint: &str,
        reason: DisableReason,
        now: SystemTime,
    ) -> Result<bool, OutboxError> {
        let Some((disabled, after, latest)) = disable_fields(reason, now) else {
            return Ok(false);
        };
        validate_namespace(endpoint)?;
        let mut call = Call::default();
        call.key(self.health_key(endpoint))
            .key(self.shard_key(Self::shard(endpoint), "off"))
            .arg(disabled)
            .arg(after.map(|after| after.to_string()).unwrap_or_default())
            .arg(latest.map(|latest| latest.to_string()).unwrap_or_default())
            .arg(endpoint);
        let disabled_now: i64 = self.run(&DISABLE_SCRIPT, &call, |_| Ok(())).await?;
        Ok(disabled_now == 1)
    }

    async fn enable(&self, endpoint: &str) -> Result<(), OutboxError> {
        validate_namespace(endpoint)?;
        let mut call = Call::default();
        call.key(self.health_key(endpoint))
            .key(self.shard_key(Self::shard(endpoint), "off"))
            .arg(endpoint);
        let _: i64 = self.run(&ENABLE_SCRIPT, &call, |_| Ok(())).await?;
        Ok(())
    }

    async fn counts(&self, endpoint: &str, now: SystemTime) -> Result<DeliveryCounts, OutboxError> {
        let mut connection = self.connection().await?;
        let mut pipe = redis::pipe();
        for state in STATES {
            pipe.zcard(self.state_key(endpoint, state));
        }
        // A leased delivery's score in the due set is its lease's end.
        pipe.zcount(self.key(endpoint, "due"), "-inf", unix_millis(now));
        let (pending, delivered, gone, dead, due): (u64, u64, u64, u64, u64) =
            pipe.query_async(&mut connection).await?;
        Ok(DeliveryCounts {
            pending,
            due,
            delivered,
            gone,
            dead,
        })
    }
}
