//! [`RedisDeliveries`]: deliveries in Redis, one Lua script per step.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use redis::{AsyncCommands as _, Script};

use super::codes::{
    HealthFields, TakenRow, attempt_fields, attempt_from_fields, disable_fields, due, failed_at,
    health_from_fields, step_fields, stored,
};
use super::{
    DeliveryState, DeliveryStore, DisableReason, Due, EndpointHealth, HealthChange, Step,
    StoredDelivery, Taken,
};
use crate::dedup::{DedupError, check_key, check_namespace};
use crate::sender::Attempt;
use crate::store::redis::RedisConnection;
use crate::store::{millis, new_token, now_millis, unix_millis};

// One Lua script per step; each file says what it does.

static ENQUEUE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/enqueue.lua")));
static TAKE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/take.lua")));
static FINISH_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/finish.lua")));
static PUT_BACK_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/put_back.lua")));
static REPLAY_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/replay.lua")));
static PURGE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/purge.lua")));
static DISABLE_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/disable.lua")));

/// Deliveries and their attempts in Redis, shared by any number of
/// dispatchers: each step is one Lua script, so a delivery is leased by
/// one dispatcher at a time, and one whose dispatcher died is due again
/// when its lease ends.
///
/// # Keys
///
/// For the prefix `hooklatch` and endpoint `E`, every key starts with
/// `hooklatch:{E}:out:`, so one endpoint's keys share a Redis Cluster slot:
/// `d:ID` (a hash: body, state, due time, lease), `a:ID:N` (attempt N),
/// `due` (due times), `s:0` to `s:3` (ids by state), `finished` (end
/// times, for [`purge`](DeliveryStore::purge)) and `health`. The set
/// `hooklatch:out:endpoints` lists the endpoints. Every key a script
/// touches is named in its `KEYS`, and all of them share the endpoint's
/// hash tag, so each script runs on one Cluster node: a take first reads
/// the due ids, and its script leases those still due; a purge reads the
/// finished ids and their attempt counts, and its script deletes those
/// still finished, [`OUTBOX_PURGE_BATCH`](super::OUTBOX_PURGE_BATCH) at
/// a time.
///
/// ```no_run
/// use hooklatch::sender::RedisDeliveries;
///
/// # async fn run() -> Result<(), hooklatch::dedup::DedupError> {
/// let store = RedisDeliveries::connect("redis://127.0.0.1:6379").await?;
/// # let _ = store;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisDeliveries {
    pub(super) connection: RedisConnection,
    pub(super) prefix: String,
}

impl std::fmt::Debug for RedisDeliveries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisDeliveries")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisDeliveries {
    /// Connects to `url` (such as `redis://127.0.0.1:6379`). The connection
    /// reconnects by itself; while the server is unreachable, every call
    /// fails (after at most 5 seconds).
    ///
    /// Refuses a server whose `maxmemory-policy` is not `noeviction`
    /// ([`DedupError::EvictionPolicy`]): an evicted delivery would be lost
    /// without a trace.
    pub async fn connect(url: &str) -> Result<Self, DedupError> {
        Self::new(RedisConnection::open(url).await?).await
    }

    /// Deliveries on a connection you made, checked like
    /// [`connect`](Self::connect) checks.
    pub async fn new(mut connection: RedisConnection) -> Result<Self, DedupError> {
        crate::dedup::check_eviction_policy(&mut connection).await?;
        Ok(Self {
            connection,
            prefix: "hooklatch".to_owned(),
        })
    }

    /// Uses `prefix` instead of `hooklatch` at the start of every key. Same
    /// rules as a namespace.
    pub fn with_prefix(mut self, prefix: &str) -> Result<Self, DedupError> {
        check_namespace(prefix)?;
        prefix.clone_into(&mut self.prefix);
        Ok(self)
    }

    /// The start of every key of `endpoint`.
    fn base(&self, endpoint: &str) -> String {
        format!("{}:{{{endpoint}}}:out:", self.prefix)
    }

    /// The key `name` of `endpoint` (such as `due` or `d:ID`).
    pub(super) fn key(&self, endpoint: &str, name: &str) -> String {
        format!("{}{name}", self.base(endpoint))
    }

    /// The hash holding the endpoint's health.
    fn health_key(&self, endpoint: &str) -> String {
        self.key(endpoint, "health")
    }

    /// The hash holding a delivery.
    fn delivery_key(&self, endpoint: &str, id: &str) -> String {
        self.key(endpoint, &format!("d:{id}"))
    }

    /// The hash holding a delivery's attempt `n` (from 1).
    fn attempt_key(&self, endpoint: &str, id: &str, n: i64) -> String {
        self.key(endpoint, &format!("a:{id}:{n}"))
    }

    /// The set of a state's ids.
    pub(super) fn state_key(&self, endpoint: &str, state: DeliveryState) -> String {
        self.key(endpoint, &format!("s:{}", state.code()))
    }

    pub(super) fn endpoints_key(&self) -> String {
        format!("{}:out:endpoints", self.prefix)
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

impl RedisDeliveries {
    /// Deletes the endpoint's deliveries that ended before
    /// `finished_before`, a bounded batch a script, and returns how many.
    async fn purge_endpoint(
        &self,
        endpoint: &str,
        finished_before: SystemTime,
    ) -> Result<u64, DedupError> {
        let mut connection = self.connection.clone();
        let finished = self.key(endpoint, "finished");
        let cutoff = unix_millis(finished_before);
        let batch = isize::try_from(super::OUTBOX_PURGE_BATCH).unwrap_or(isize::MAX);
        let mut purged = 0;
        loop {
            let ids: Vec<String> = connection
                .zrangebyscore_limit(&finished, "-inf", format!("({cutoff}"), 0, batch)
                .await?;
            if ids.is_empty() {
                return Ok(purged);
            }
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.hget(self.delivery_key(endpoint, id), "attempts");
            }
            let counts: Vec<Option<i64>> = pipe.query_async(&mut connection).await?;
            let mut script = PURGE_SCRIPT.prepare_invoke();
            script
                .key(&finished)
                .key(self.state_key(endpoint, DeliveryState::Delivered))
                .key(self.state_key(endpoint, DeliveryState::Gone))
                .arg(cutoff);
            for (id, count) in ids.iter().zip(counts) {
                let count = count.unwrap_or(0).max(0);
                script.key(self.delivery_key(endpoint, id));
                for n in 1..=count {
                    script.key(self.attempt_key(endpoint, id, n));
                }
                script.arg(id).arg(count);
            }
            let deleted: u64 = script.invoke_async(&mut connection).await?;
            purged += deleted;
            if ids.len() < usize::try_from(super::OUTBOX_PURGE_BATCH).unwrap_or(usize::MAX)
                || deleted == 0
            {
                return Ok(purged);
            }
        }
    }
}

impl DeliveryStore for RedisDeliveries {
    async fn enqueue(
        &self,
        endpoint: &str,
        id: &str,
        body: &[u8],
        due: SystemTime,
    ) -> Result<bool, DedupError> {
        check_key(endpoint, id)?;
        let mut connection = self.connection.clone();
        let added: i64 = ENQUEUE_SCRIPT
            .key(self.delivery_key(endpoint, id))
            .key(self.key(endpoint, "due"))
            .key(self.state_key(endpoint, DeliveryState::Pending))
            .arg(id)
            .arg(body)
            .arg(unix_millis(due))
            .arg(now_millis())
            .invoke_async(&mut connection)
            .await?;
        let () = connection.sadd(self.endpoints_key(), endpoint).await?;
        Ok(added == 1)
    }

    async fn take_due(
        &self,
        endpoint: &str,
        now: SystemTime,
        limit: usize,
        lease: Duration,
    ) -> Result<Due, DedupError> {
        let mut connection = self.connection.clone();
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
        let mut script = TAKE_SCRIPT.prepare_invoke();
        script
            .key(self.health_key(endpoint))
            .key(self.key(endpoint, "due"))
            .arg(now)
            .arg(&token)
            .arg(now.saturating_add(millis(lease)));
        for id in &ids {
            script.key(self.delivery_key(endpoint, id)).arg(id);
        }
        let (health, rows): (HealthFields, Vec<TakenRow>) =
            script.invoke_async(&mut connection).await?;
        Ok(due(endpoint, &token, health_from_fields(health), rows))
    }

    async fn finish(
        &self,
        taken: &Taken,
        attempt: &Attempt,
        step: Step,
        change: Option<HealthChange>,
    ) -> Result<Option<EndpointHealth>, DedupError> {
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
        let mut connection = self.connection.clone();
        let endpoint = &taken.endpoint;
        let health: Option<HealthFields> = FINISH_SCRIPT
            .key(self.delivery_key(endpoint, &taken.id))
            .key(self.key(endpoint, "due"))
            .key(self.state_key(endpoint, DeliveryState::Pending))
            .key(self.state_key(endpoint, state))
            .key(self.key(endpoint, "finished"))
            .key(self.attempt_key(endpoint, &taken.id, number))
            .key(self.health_key(endpoint))
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
            .invoke_async(&mut connection)
            .await?;
        Ok(health.map(health_from_fields))
    }

    async fn put_back(&self, taken: &Taken, due: SystemTime) -> Result<bool, DedupError> {
        let mut connection = self.connection.clone();
        let put: i64 = PUT_BACK_SCRIPT
            .key(self.delivery_key(&taken.endpoint, &taken.id))
            .key(self.key(&taken.endpoint, "due"))
            .arg(&taken.id)
            .arg(&taken.token)
            .arg(unix_millis(due))
            .invoke_async(&mut connection)
            .await?;
        Ok(put == 1)
    }

    async fn delivery(
        &self,
        endpoint: &str,
        id: &str,
    ) -> Result<Option<StoredDelivery>, DedupError> {
        let mut connection = self.connection.clone();
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
    ) -> Result<Vec<String>, DedupError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut connection = self.connection.clone();
        let key = self.state_key(endpoint, state);
        let last = isize::try_from(limit - 1).unwrap_or(isize::MAX);
        Ok(connection.zrange(key, 0, last).await?)
    }

    async fn replay(&self, endpoint: &str, id: &str, now: SystemTime) -> Result<bool, DedupError> {
        let mut connection = self.connection.clone();
        let replayed: i64 = REPLAY_SCRIPT
            .key(self.delivery_key(endpoint, id))
            .key(self.key(endpoint, "due"))
            .key(self.key(endpoint, "finished"))
            .key(self.state_key(endpoint, DeliveryState::Pending))
            .key(self.state_key(endpoint, DeliveryState::Gone))
            .key(self.state_key(endpoint, DeliveryState::Dead))
            .arg(id)
            .arg(unix_millis(now))
            .invoke_async(&mut connection)
            .await?;
        Ok(replayed == 1)
    }

    async fn purge(&self, finished_before: SystemTime) -> Result<u64, DedupError> {
        let mut connection = self.connection.clone();
        let endpoints: Vec<String> = connection.smembers(self.endpoints_key()).await?;
        let mut purged = 0;
        for endpoint in endpoints {
            purged += self.purge_endpoint(&endpoint, finished_before).await?;
        }
        Ok(purged)
    }

    async fn disable(
        &self,
        endpoint: &str,
        reason: DisableReason,
        now: SystemTime,
    ) -> Result<bool, DedupError> {
        let Some((disabled, after, latest)) = disable_fields(reason, now) else {
            return Ok(false);
        };
        let mut connection = self.connection.clone();
        let disabled_now: i64 = DISABLE_SCRIPT
            .key(self.health_key(endpoint))
            .arg(disabled)
            .arg(after.map(|after| after.to_string()).unwrap_or_default())
            .arg(latest.map(|latest| latest.to_string()).unwrap_or_default())
            .invoke_async(&mut connection)
            .await?;
        Ok(disabled_now == 1)
    }

    async fn enable(&self, endpoint: &str) -> Result<(), DedupError> {
        let mut connection = self.connection.clone();
        let () = connection.del(self.health_key(endpoint)).await?;
        Ok(())
    }
}
