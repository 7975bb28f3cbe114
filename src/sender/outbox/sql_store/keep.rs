//! [`Keeping`] for [`SqlOutbox`]: idempotency keys claimed in the
//! transaction of the enqueue, and the purge of each outcome after its
//! retention, a bounded batch a transaction.

use std::time::SystemTime;

use super::SqlOutbox;
use crate::sender::OutboxError;
use crate::sender::outbox::DeliveryState;
use crate::sender::outbox::keep::{Keyed, Retention, SendKey, cutoff_millis, in_batches};
use crate::sender::outbox::sql::purge_attempts;
use crate::sender::outbox::{Keeping, NewDelivery, OUTBOX_PURGE_BATCH};
use crate::store::sql::{SqlDatabase, sql, sql_built};
use crate::store::{now_millis, unix_millis};

/// Idempotency keys and retention of a SQL outbox.
impl<DB: SqlDatabase> Keeping for SqlOutbox<DB> {
    async fn add_keyed_delivery(
        &self,
        key: SendKey<'_>,
        new: NewDelivery<'_>,
    ) -> Result<Keyed, OutboxError> {
        let SendKey { key, now, window } = key;
        let (endpoint, id, body, due) = (new.endpoint(), new.id(), new.body(), new.due());
        let now = unix_millis(now);
        let expires = now.saturating_add(crate::store::millis(window));
        // A key deleted between the failed claim and the read
        // (it expired and was forgotten) is claimed on the
        // next round.
        loop {
            let mut tx = self.pool.begin().await?;
            let claimed: Option<String> = sql::<DB>(&self.keep.claim)
                .bind(endpoint)
                .bind(key)
                .bind(id)
                .bind(expires)
                .bind(now)
                .fetch_optional_scalar(&mut *tx)
                .await?;
            if claimed.is_some() {
                let added = sql::<DB>(&self.statements.enqueue)
                    .bind(endpoint)
                    .bind(id)
                    .bind(body)
                    .bind(unix_millis(due))
                    .bind(now_millis())
                    .bind(new.trace().map(|trace| trace.to_string()))
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                let id = id.to_owned();
                return Ok(Keyed {
                    id,
                    enqueued: added == 1,
                });
            }
            let known: Option<String> = sql::<DB>(&self.keep.known)
                .bind(endpoint)
                .bind(key)
                .fetch_optional_scalar(&mut *tx)
                .await?;
            tx.commit().await?;
            if let Some(id) = known {
                return Ok(Keyed {
                    id,
                    enqueued: false,
                });
            }
        }
    }

    async fn forget_keys(&self, endpoint: &str, now: SystemTime) -> Result<u64, OutboxError> {
        in_batches(|| async move {
            Ok(sql::<DB>(&self.keep.forget)
                .bind(endpoint)
                .bind(unix_millis(now))
                .bind(i64::try_from(OUTBOX_PURGE_BATCH).unwrap_or(i64::MAX))
                .execute(&self.pool)
                .await?)
        })
        .await
    }

    async fn purge_outcomes(
        &self,
        endpoint: &str,
        retention: &Retention,
        now: SystemTime,
    ) -> Result<u64, OutboxError> {
        let cutoff = |state| cutoff_millis(retention, state, now);
        in_batches(|| async move {
            let mut tx = self.pool.begin().await?;
            let deleted: Vec<(String, String)> = sql::<DB>(&self.keep.purge)
                .bind(endpoint)
                .bind(cutoff(DeliveryState::Delivered))
                .bind(cutoff(DeliveryState::Gone))
                .bind(cutoff(DeliveryState::Dead))
                .bind(cutoff(DeliveryState::Pending))
                .bind(unix_millis(now))
                .bind(i64::try_from(OUTBOX_PURGE_BATCH).unwrap_or(i64::MAX))
                .fetch_all(&mut *tx)
                .await?;
            if !deleted.is_empty() {
                let mut query = sql_built::<DB>(purge_attempts(&self.prefix, deleted.len()));
                for (endpoint, id) in &deleted {
                    query = query.bind(endpoint).bind(id);
                }
                query.execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok(u64::try_from(deleted.len()).unwrap_or(u64::MAX))
        })
        .await
    }

    async fn purge(&self, finished_before: SystemTime) -> Result<u64, OutboxError> {
        let before = unix_millis(finished_before);
        let batch = OUTBOX_PURGE_BATCH;
        let mut purged = 0;
        loop {
            let mut tx = self.pool.begin().await?;
            let deleted: Vec<(String, String)> = sql::<DB>(&self.statements.purge_deliveries)
                .bind(before)
                .bind(i64::try_from(batch).unwrap_or(i64::MAX))
                .fetch_all(&mut *tx)
                .await?;
            if !deleted.is_empty() {
                let sql = purge_attempts(&self.prefix, deleted.len());
                let mut query = sql_built::<DB>(sql);
                for (endpoint, id) in &deleted {
                    query = query.bind(endpoint).bind(id);
                }
                query.execute(&mut *tx).await?;
            }
            tx.commit().await?;
            purged += u64::try_from(deleted.len()).unwrap_or(u64::MAX);
            if u64::try_from(deleted.len()).unwrap_or(u64::MAX) < batch {
                return Ok(purged);
            }
        }
    }
}
