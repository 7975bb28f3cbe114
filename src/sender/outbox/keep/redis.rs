//! [`Keeping`] for [`RedisOutbox`]: each endpoint's idempotency keys in
//! a hash (key to id) and a sorted set (key by expiry) under the
//! endpoint's hash tag, claimed by the enqueue's own script; the purge of
//! each outcome reads a state's set by send time and deletes a bounded
//! batch a script.

use std::sync::LazyLock;
use std::time::SystemTime;

use redis::{AsyncCommands as _, Script, Value};

use super::{Keeping, Keyed, Retention, SendKey, cutoff_millis};
use crate::dedup::validate_namespace;
use crate::sender::OutboxError;
use crate::sender::RedisOutbox;
use crate::sender::outbox::DeliveryState;
use crate::sender::outbox::redis::{Call, Lua};
use crate::sender::outbox::{NewDelivery, OUTBOX_PURGE_BATCH};
use crate::store::{millis, now_millis, unix_millis};

static KEYED_SCRIPT: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("../lua/head.lua"),
        include_str!("../lua/keyed.lua"),
        include_str!("../lua/enqueue.lua")
    ))
});
static FORGET_SCRIPT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/forget_keys.lua")));
static PURGE_STATE_SCRIPT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/head.lua"),
        include_str!("../lua/purge_state.lua")
    ))
});

const STATES: [DeliveryState; 4] = [
    DeliveryState::Delivered,
    DeliveryState::Gone,
    DeliveryState::Dead,
    DeliveryState::Pending,
];

impl RedisOutbox {
    /// The endpoint's hash of keys and ids and its keys by expiry.
    fn send_keys(&self, endpoint: &str) -> [String; 2] {
        [self.key(endpoint, "keys"), self.key(endpoint, "key_expiry")]
    }

    /// Deletes the endpoint's deliveries in `state` that ended (or were
    /// sent, while pending) before `cutoff`, a bounded batch a script.
    /// The candidates are read from the state's set, scored by send time,
    /// which is never after the end; those ended since are skipped.
    async fn purge_state(
        &self,
        endpoint: &str,
        state: DeliveryState,
        cutoff: i64,
        now: i64,
    ) -> Result<u64, OutboxError> {
        let mut connection = self.connection().await?;
        let set = self.state_key(endpoint, state);
        let batch = usize::try_from(OUTBOX_PURGE_BATCH).unwrap_or(usize::MAX);
        let (mut skipped, mut purged) = (0, 0);
        loop {
            let ids: Vec<String> = connection
                .zrangebyscore_limit(
                    &set,
                    "-inf",
                    format!("({cutoff}"),
                    isize::try_from(skipped).unwrap_or(isize::MAX),
                    isize::try_from(batch).unwrap_or(isize::MAX),
                )
                .await?;
            if ids.is_empty() {
                return Ok(purged);
            }
            let mut script = PURGE_STATE_SCRIPT.prepare_invoke();
            script
                .key(&set)
                .key(self.key(endpoint, "finished"))
                .key(self.key(endpoint, "due"))
                .key(self.ready_key(endpoint))
                .arg(state.code())
                .arg(cutoff)
                .arg(now)
                .arg(endpoint);
            self.add_deliveries(&mut connection, &mut script, endpoint, &ids)
                .await?;
            let deleted: u64 = script.invoke_async(&mut connection).await?;
            purged += deleted;
            skipped += ids
                .len()
                .saturating_sub(usize::try_from(deleted).unwrap_or(0));
            if ids.len() < batch {
                return Ok(purged);
            }
        }
    }
}

impl Keeping for RedisOutbox {
    async fn add_keyed_delivery(
        &self,
        key: SendKey<'_>,
        new: NewDelivery<'_>,
    ) -> Result<Keyed, OutboxError> {
        let SendKey { key, now, window } = key;
        let (endpoint, id, body, due) = (new.endpoint(), new.id(), new.body(), new.due());
        let shard = Self::shard(endpoint);
        let [send_keys, key_expiry] = self.send_keys(endpoint);
        let now = unix_millis(now);
        let mut call = Call::default();
        call.key(self.delivery_key(endpoint, id))
            .key(self.key(endpoint, "due"))
            .key(self.state_key(endpoint, DeliveryState::Pending))
            .key(self.shard_key(shard, "ready"))
            .key(self.shard_key(shard, "endpoints"))
            .key(send_keys)
            .key(key_expiry)
            .arg(id)
            .arg(body)
            .arg(unix_millis(due))
            .arg(now_millis())
            .arg(endpoint)
            .arg(key)
            .arg(now)
            .arg(now.saturating_add(millis(window)))
            .arg(crate::sender::outbox::codes::trace_text(&new));
        // A send under a key already used waits too: the first send may be
        // the one whose wait fell short.
        let found: Value = self.run(&KEYED_SCRIPT, &call, |_| Ok(())).await?;
        let keyed = match found {
            Value::BulkString(first) => Keyed {
                id: String::from_utf8_lossy(&first).into_owned(),
                enqueued: false,
            },
            added => Keyed {
                id: id.to_owned(),
                enqueued: added == Value::Int(1),
            },
        };
        Ok(keyed)
    }

    async fn forget_keys(&self, endpoint: &str, now: SystemTime) -> Result<u64, OutboxError> {
        validate_namespace(endpoint)?;
        let connection = &self.connection().await?;
        let [send_keys, key_expiry] = &self.send_keys(endpoint);
        super::in_batches(|| async move {
            let deleted: u64 = FORGET_SCRIPT
                .key(send_keys)
                .key(key_expiry)
                .arg(unix_millis(now))
                .arg(OUTBOX_PURGE_BATCH)
                .invoke_async(&mut connection.clone())
                .await?;
            Ok(deleted)
        })
        .await
    }

    async fn purge_outcomes(
        &self,
        endpoint: &str,
        retention: &Retention,
        now: SystemTime,
    ) -> Result<u64, OutboxError> {
        validate_namespace(endpoint)?;
        let mut purged = 0;
        for state in STATES {
            let cutoff = cutoff_millis(retention, state, now);
            if cutoff != i64::MIN {
                purged += self
                    .purge_state(endpoint, state, cutoff, unix_millis(now))
                    .await?;
            }
        }
        Ok(purged)
    }

    async fn purge(&self, finished_before: SystemTime) -> Result<u64, OutboxError> {
        let mut purged = 0;
        for endpoint in self.endpoints_with_deliveries().await? {
            purged += self.purge_endpoint(&endpoint, finished_before).await?;
        }
        Ok(purged)
    }
}
