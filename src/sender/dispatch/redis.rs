//! [`RedisDeliveries`]: deliveries in Redis, one Lua script per step.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use redis::aio::ConnectionManager;
use redis::{AsyncCommands as _, Script};

use super::codes::{
    count, duration_ms, from_millis, health_fields, health_from_fields, reason_code,
    reason_from_code, to_millis,
};
use super::{
    DeliveryState, DeliveryStore, DisableReason, EndpointHealth, HealthChange, Step,
    StoredDelivery, Taken,
};
use crate::dedup::{DedupError, check_key, check_namespace};
use crate::sender::Attempt;
use crate::store::redis::connect as redis_connection;
use crate::store::{millis, new_token, now_millis};

/// Stores a new delivery unless the endpoint has one with this id.
const ENQUEUE: &str = r"
local base, id = KEYS[1], ARGV[1]
local d = base .. 'd:' .. id
if redis.call('EXISTS', d) == 1 then return 0 end
redis.call('HSET', d, 'body', ARGV[2], 'state', 0, 'tries', 0, 'attempts', 0,
  'due_at', ARGV[3], 'waited_ms', 0, 'reason', 0, 'created_at', ARGV[4])
redis.call('ZADD', base .. 'due', ARGV[3], id)
redis.call('ZADD', base .. 's:0', ARGV[4], id)
return 1
";

/// Leases the earliest due deliveries: the lease token goes on the
/// delivery and its score in the due set becomes the lease's end, so a
/// delivery whose dispatcher died is due again when the lease ends.
const TAKE: &str = r"
local base = KEYS[1]
local ids = redis.call('ZRANGEBYSCORE', base .. 'due', '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  local d = base .. 'd:' .. id
  redis.call('HSET', d, 'lease', ARGV[3])
  redis.call('ZADD', base .. 'due', ARGV[4], id)
  local f = redis.call('HMGET', d, 'body', 'tries', 'attempts', 'due_at', 'waited_ms', 'reason')
  out[#out + 1] = {id, f[1], f[2], f[3], f[4], f[5], f[6]}
end
return out
";

/// Records an attempt and what follows it, if the lease still holds.
const FINISH: &str = r"
local base, id = KEYS[1], ARGV[1]
local d = base .. 'd:' .. id
if redis.call('HGET', d, 'lease') ~= ARGV[2] then return 0 end
local state = tonumber(ARGV[3])
redis.call('HDEL', d, 'lease')
redis.call('HINCRBY', d, 'tries', 1)
redis.call('HINCRBY', d, 'attempts', 1)
if state == 0 then
  redis.call('HSET', d, 'due_at', ARGV[4], 'waited_ms', ARGV[5], 'reason', ARGV[6])
  redis.call('ZADD', base .. 'due', ARGV[4], id)
else
  local created = redis.call('HGET', d, 'created_at')
  redis.call('HSET', d, 'state', state, 'finished_at', ARGV[7])
  redis.call('ZREM', base .. 'due', id)
  redis.call('ZREM', base .. 's:0', id)
  redis.call('ZADD', base .. 's:' .. state, created, id)
  if state == 1 or state == 2 then redis.call('ZADD', base .. 'finished', ARGV[7], id) end
end
redis.call('HSET', base .. 'a:' .. id .. ':' .. ARGV[8], 'sent_at', ARGV[9],
  'waited_ms', ARGV[10], 'reason', ARGV[11], 'held_ms', ARGV[12], 'status', ARGV[13],
  'error', ARGV[14], 'duration_us', ARGV[15], 'excerpt', ARGV[16])
return 1
";

/// Ends a lease without an attempt, due again at ARGV[3].
const PUT_BACK: &str = r"
local base, id = KEYS[1], ARGV[1]
local d = base .. 'd:' .. id
if redis.call('HGET', d, 'lease') ~= ARGV[2] then return 0 end
redis.call('HDEL', d, 'lease')
redis.call('HSET', d, 'due_at', ARGV[3])
redis.call('ZADD', base .. 'due', ARGV[3], id)
return 1
";

/// Makes a dead or gone delivery pending again from the schedule's start.
const REPLAY: &str = r"
local base, id = KEYS[1], ARGV[1]
local d = base .. 'd:' .. id
local state = tonumber(redis.call('HGET', d, 'state') or '')
if state ~= 2 and state ~= 3 then return 0 end
redis.call('HSET', d, 'state', 0, 'tries', 0, 'due_at', ARGV[2], 'waited_ms', 0, 'reason', 0)
redis.call('HDEL', d, 'finished_at', 'lease')
redis.call('ZREM', base .. 's:' .. state, id)
redis.call('ZADD', base .. 's:0', redis.call('HGET', d, 'created_at'), id)
redis.call('ZREM', base .. 'finished', id)
redis.call('ZADD', base .. 'due', ARGV[2], id)
return 1
";

/// Deletes the endpoint's deliveries that ended (delivered or gone)
/// before ARGV[1], with their attempts.
const PURGE: &str = r"
local base = KEYS[1]
local ids = redis.call('ZRANGEBYSCORE', base .. 'finished', '-inf', '(' .. ARGV[1])
for _, id in ipairs(ids) do
  local d = base .. 'd:' .. id
  local n = tonumber(redis.call('HGET', d, 'attempts') or '0') or 0
  for i = 1, n do redis.call('DEL', base .. 'a:' .. id .. ':' .. i) end
  local state = redis.call('HGET', d, 'state')
  if state then redis.call('ZREM', base .. 's:' .. state, id) end
  redis.call('DEL', d)
  redis.call('ZREM', base .. 'finished', id)
end
return #ids
";

/// Merges an attempt into the endpoint's health (KEYS[1]): ARGV[1] is the
/// failed attempt's time, or empty for a success, which clears
/// failing_since. A failure keeps the earlier time. Returns the health.
const MERGE_HEALTH: &str = r"
local h = KEYS[1]
if ARGV[1] == '' then
  redis.call('HDEL', h, 'failing_since')
else
  local since = tonumber(redis.call('HGET', h, 'failing_since') or '')
  if since == nil or tonumber(ARGV[1]) < since then
    redis.call('HSET', h, 'failing_since', ARGV[1])
  end
end
return redis.call('HMGET', h, 'failing_since', 'disabled', 'disabled_after_ms')
";

/// Disables the endpoint (KEYS[1]) with code ARGV[1] and limit ARGV[2]
/// unless it is disabled already; with ARGV[3] (the latest failing_since
/// that qualifies) only while it has failed that long.
const DISABLE: &str = r"
local h = KEYS[1]
if redis.call('HEXISTS', h, 'disabled') == 1 then return 0 end
if ARGV[3] ~= '' then
  local since = tonumber(redis.call('HGET', h, 'failing_since') or '')
  if since == nil or since > tonumber(ARGV[3]) then return 0 end
end
redis.call('HSET', h, 'disabled', ARGV[1])
if ARGV[2] == '' then
  redis.call('HDEL', h, 'disabled_after_ms')
else
  redis.call('HSET', h, 'disabled_after_ms', ARGV[2])
end
return 1
";

static ENQUEUE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(ENQUEUE));
static TAKE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(TAKE));
static FINISH_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(FINISH));
static PUT_BACK_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(PUT_BACK));
static REPLAY_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(REPLAY));
static PURGE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(PURGE));
static MERGE_HEALTH_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(MERGE_HEALTH));
static DISABLE_SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(DISABLE));

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
/// `hooklatch:out:endpoints` lists the endpoints. The scripts build the
/// per-delivery key names from the endpoint's base key.
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
    connection: ConnectionManager,
    prefix: String,
}

impl std::fmt::Debug for RedisDeliveries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisDeliveries")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// What [`TAKE`] returns for each delivery.
type TakenRow = (String, Vec<u8>, i64, i64, i64, i64, i64);

impl RedisDeliveries {
    /// Connects to `url` (such as `redis://127.0.0.1:6379`). The connection
    /// reconnects by itself; while the server is unreachable, every call
    /// fails (after at most 5 seconds).
    ///
    /// Refuses a server whose `maxmemory-policy` is not `noeviction`
    /// ([`DedupError::EvictionPolicy`]): an evicted delivery would be lost
    /// without a trace.
    pub async fn connect(url: &str) -> Result<Self, DedupError> {
        let mut connection = redis_connection(url).await?;
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

    /// The hash holding the endpoint's health.
    fn health_key(&self, endpoint: &str) -> String {
        format!("{}health", self.base(endpoint))
    }

    fn endpoints_key(&self) -> String {
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
            .key(self.base(endpoint))
            .arg(id)
            .arg(body)
            .arg(to_millis(due))
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
    ) -> Result<Vec<Taken>, DedupError> {
        let mut connection = self.connection.clone();
        let token = new_token();
        let now = to_millis(now);
        let rows: Vec<TakenRow> = TAKE_SCRIPT
            .key(self.base(endpoint))
            .arg(now)
            .arg(limit)
            .arg(&token)
            .arg(now.saturating_add(millis(lease)))
            .invoke_async(&mut connection)
            .await?;
        Ok(rows
            .into_iter()
            .map(
                |(id, body, tries, attempts, due_at, waited, reason)| Taken {
                    endpoint: endpoint.to_owned(),
                    id,
                    body,
                    tries: count(tries),
                    attempts: count(attempts),
                    due_at: from_millis(due_at),
                    waited: duration_ms(waited),
                    reason: reason_from_code(reason),
                    token: token.clone(),
                },
            )
            .collect())
    }

    async fn finish(
        &self,
        taken: &Taken,
        attempt: &Attempt,
        step: Step,
    ) -> Result<bool, DedupError> {
        let (state, due, waited, reason) = match step {
            Step::Retry { due, wait, reason } => (
                DeliveryState::Pending,
                to_millis(due),
                millis(wait),
                reason_code(reason),
            ),
            Step::Done(outcome) => (DeliveryState::ended(outcome), 0, 0, 0),
        };
        let (status, error) = match &attempt.result {
            Ok(status) => (status.to_string(), String::new()),
            Err(error) => (String::new(), error.clone()),
        };
        let mut connection = self.connection.clone();
        let recorded: i64 = FINISH_SCRIPT
            .key(self.base(&taken.endpoint))
            .arg(&taken.id)
            .arg(&taken.token)
            .arg(state.code())
            .arg(due)
            .arg(waited)
            .arg(reason)
            .arg(now_millis())
            .arg(attempt.number)
            .arg(to_millis(attempt.sent_at))
            .arg(millis(attempt.waited))
            .arg(reason_code(attempt.reason))
            .arg(millis(attempt.held))
            .arg(status)
            .arg(error)
            .arg(i64::try_from(attempt.duration.as_micros()).unwrap_or(i64::MAX))
            .arg(&attempt.excerpt)
            .invoke_async(&mut connection)
            .await?;
        Ok(recorded == 1)
    }

    async fn put_back(&self, taken: &Taken, due: SystemTime) -> Result<bool, DedupError> {
        let mut connection = self.connection.clone();
        let put: i64 = PUT_BACK_SCRIPT
            .key(self.base(&taken.endpoint))
            .arg(&taken.id)
            .arg(&taken.token)
            .arg(to_millis(due))
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
        let base = self.base(endpoint);
        let fields: HashMap<String, Vec<u8>> = connection.hgetall(format!("{base}d:{id}")).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        let state = DeliveryState::from_code(number(&fields, "state"));
        let recorded = number(&fields, "attempts");
        let rows: Vec<HashMap<String, Vec<u8>>> = if recorded > 0 {
            let mut pipe = redis::pipe();
            for n in 1..=recorded {
                pipe.hgetall(format!("{base}a:{id}:{n}"));
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
                let error = row
                    .get("error")
                    .map(|e| String::from_utf8_lossy(e).into_owned());
                Attempt {
                    number: n,
                    sent_at: from_millis(number(row, "sent_at")),
                    waited: duration_ms(number(row, "waited_ms")),
                    reason: reason_from_code(number(row, "reason")),
                    held: duration_ms(number(row, "held_ms")),
                    result: match status {
                        Some(_) => Ok(u16::try_from(number(row, "status")).unwrap_or(0)),
                        None => Err(error.unwrap_or_default()),
                    },
                    duration: Duration::from_micros(number(row, "duration_us").unsigned_abs()),
                    excerpt: row.get("excerpt").cloned().unwrap_or_default(),
                }
            })
            .collect();
        Ok(Some(StoredDelivery {
            endpoint: endpoint.to_owned(),
            id: id.to_owned(),
            body: fields.get("body").cloned().unwrap_or_default(),
            due_at: (state == DeliveryState::Pending)
                .then(|| from_millis(number(&fields, "due_at"))),
            state,
            attempts,
        }))
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
        let key = format!("{}s:{}", self.base(endpoint), state.code());
        let last = isize::try_from(limit - 1).unwrap_or(isize::MAX);
        Ok(connection.zrange(key, 0, last).await?)
    }

    async fn replay(&self, endpoint: &str, id: &str, now: SystemTime) -> Result<bool, DedupError> {
        let mut connection = self.connection.clone();
        let replayed: i64 = REPLAY_SCRIPT
            .key(self.base(endpoint))
            .arg(id)
            .arg(to_millis(now))
            .invoke_async(&mut connection)
            .await?;
        Ok(replayed == 1)
    }

    async fn purge(&self, finished_before: SystemTime) -> Result<u64, DedupError> {
        let mut connection = self.connection.clone();
        let endpoints: Vec<String> = connection.smembers(self.endpoints_key()).await?;
        let mut purged = 0;
        for endpoint in endpoints {
            let count: u64 = PURGE_SCRIPT
                .key(self.base(&endpoint))
                .arg(to_millis(finished_before))
                .invoke_async(&mut connection)
                .await?;
            purged += count;
        }
        Ok(purged)
    }

    async fn health(&self, endpoint: &str) -> Result<EndpointHealth, DedupError> {
        let mut connection = self.connection.clone();
        let fields: HashMap<String, i64> = connection.hgetall(self.health_key(endpoint)).await?;
        Ok(health_from_fields(
            fields.get("failing_since").copied(),
            fields.get("disabled").copied(),
            fields.get("disabled_after_ms").copied(),
        ))
    }

    async fn merge_health(
        &self,
        endpoint: &str,
        change: HealthChange,
    ) -> Result<EndpointHealth, DedupError> {
        let failed_at = match change {
            HealthChange::Succeeded => String::new(),
            HealthChange::Failed { at } => to_millis(at).to_string(),
        };
        let mut connection = self.connection.clone();
        let (failing_since, disabled, after): (Option<i64>, Option<i64>, Option<i64>) =
            MERGE_HEALTH_SCRIPT
                .key(self.health_key(endpoint))
                .arg(failed_at)
                .invoke_async(&mut connection)
                .await?;
        Ok(health_from_fields(failing_since, disabled, after))
    }

    async fn disable(
        &self,
        endpoint: &str,
        reason: DisableReason,
        now: SystemTime,
    ) -> Result<bool, DedupError> {
        let (_, disabled, after) = health_fields(EndpointHealth {
            failing_since: None,
            disabled: Some(reason),
        });
        let latest = match reason {
            DisableReason::Gone => String::new(),
            DisableReason::NoSuccessFor(wait) => match now.checked_sub(wait) {
                Some(latest) => to_millis(latest).to_string(),
                None => return Ok(false),
            },
        };
        let mut connection = self.connection.clone();
        let disabled_now: i64 = DISABLE_SCRIPT
            .key(self.health_key(endpoint))
            .arg(disabled.unwrap_or_default())
            .arg(after.map(|after| after.to_string()).unwrap_or_default())
            .arg(latest)
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
