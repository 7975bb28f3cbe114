//! Purging a Redis outbox: each endpoint's finished deliveries, a bounded
//! batch a script.

use std::time::SystemTime;

use redis::{AsyncCommands as _, ScriptInvocation};

use super::{PURGE_SCRIPT, RedisOutbox};
use crate::sender::OutboxError;
use crate::sender::outbox::DeliveryState;
use crate::store::redis::RedisConnection;
use crate::store::unix_millis;

impl RedisOutbox {
    /// Deletes the endpoint's deliveries that ended before
    /// `finished_before`, a bounded batch a script, and returns how many.
    pub(in crate::sender::outbox) async fn purge_endpoint(
        &self,
        endpoint: &str,
        finished_before: SystemTime,
    ) -> Result<u64, OutboxError> {
        let mut connection = self.connection().await?;
        let finished = self.key(endpoint, "finished");
        let cutoff = unix_millis(finished_before);
        let batch =
            isize::try_from(crate::sender::outbox::OUTBOX_PURGE_BATCH).unwrap_or(isize::MAX);
        let mut purged = 0;
        loop {
            let ids: Vec<String> = connection
                .zrangebyscore_limit(&finished, "-inf", format!("({cutoff}"), 0, batch)
                .await?;
            if ids.is_empty() {
                return Ok(purged);
            }
            let mut script = PURGE_SCRIPT.prepare_invoke();
            script
                .key(&finished)
                .key(self.state_key(endpoint, DeliveryState::Delivered))
                .key(self.state_key(endpoint, DeliveryState::Gone))
                .arg(cutoff);
            self.add_deliveries(&mut connection, &mut script, endpoint, &ids)
                .await?;
            let deleted: u64 = script.invoke_async(&mut connection).await?;
            purged += deleted;
            if ids.len()
                < usize::try_from(crate::sender::outbox::OUTBOX_PURGE_BATCH).unwrap_or(usize::MAX)
                || deleted == 0
            {
                return Ok(purged);
            }
        }
    }

    /// Adds to a purge script each of `ids`' delivery key and the keys of
    /// its attempts, and as arguments each id and its attempt count (read
    /// first, in one pipeline): the script deletes all of them at once.
    pub(in crate::sender::outbox) async fn add_deliveries(
        &self,
        connection: &mut RedisConnection,
        script: &mut ScriptInvocation<'_>,
        endpoint: &str,
        ids: &[String],
    ) -> Result<(), OutboxError> {
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.hget(self.delivery_key(endpoint, id), "attempts");
        }
        let counts: Vec<Option<i64>> = pipe.query_async(connection).await?;
        for (id, count) in ids.iter().zip(counts) {
            let count = count.unwrap_or(0).max(0);
            script.key(self.delivery_key(endpoint, id));
            for n in 1..=count {
                script.key(self.attempt_key(endpoint, id, n));
            }
            script.arg(id).arg(count);
        }
        Ok(())
    }
}
