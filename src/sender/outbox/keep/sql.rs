//! [`Keeping`](super::Keeping) for the SQL outboxes: a table of
//! idempotency keys, claimed in the transaction of the enqueue, and the
//! purge of each outcome after its retention, a bounded batch a
//! transaction.

use sqlx::SqlStr;

use crate::sender::outbox::sql::tables;
use crate::store::sql::{Dialect, Schema, statement};

fn keys_table(prefix: &str) -> String {
    format!("{prefix}_send_keys")
}

/// The keys' table and the indexes the per-outcome purge reads by
/// (version 1), a schema component of its own.
pub(crate) fn schema(prefix: &str, dialect: &Dialect) -> Schema {
    let (deliveries, _, _) = tables(prefix);
    let keys = keys_table(prefix);
    let int = dialect.int;
    Schema {
        component: format!("outbox-keep:{prefix}"),
        version: 1,
        statements: vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {keys} (endpoint TEXT NOT NULL, \
                 send_key TEXT NOT NULL, event_id TEXT NOT NULL, expires_at {int} NOT NULL, \
                 PRIMARY KEY (endpoint, send_key))"
            ),
            format!("CREATE INDEX IF NOT EXISTS {keys}_expiry ON {keys} (endpoint, expires_at)"),
            format!(
                "CREATE INDEX IF NOT EXISTS {deliveries}_ended \
                 ON {deliveries} (endpoint, state, finished_at)"
            ),
            format!(
                "CREATE INDEX IF NOT EXISTS {deliveries}_sent \
                 ON {deliveries} (endpoint, state, created_at)"
            ),
        ],
    }
}

/// The statements of [`Keeping`](super::Keeping).
#[derive(Debug, Clone)]
pub(crate) struct KeepStatements {
    /// $1 endpoint, $2 key, $3 id, $4 expires, $5 now: the id, if this
    /// claimed the key (new, or expired by now).
    pub(crate) claim: SqlStr,
    /// $1 endpoint, $2 key: the id the key names.
    pub(crate) known: SqlStr,
    /// $1 endpoint, $2 now, $3 batch size.
    pub(crate) forget: SqlStr,
    /// $1 endpoint, $2 to $5 the cutoffs of delivered, gone, dead and
    /// pending, $6 now, $7 batch size: the deleted rows' endpoint and id.
    pub(crate) purge: SqlStr,
}

impl KeepStatements {
    pub(crate) fn new(prefix: &str, dialect: &Dialect) -> Self {
        let (deliveries, _, _) = tables(prefix);
        let keys = keys_table(prefix);
        let (lock, row_id) = (dialect.lock_rows, dialect.row_id);
        Self {
            // A concurrent claim of the same key waits for this one's
            // transaction, then sees a live key and claims nothing.
            claim: statement(format!(
                "INSERT INTO {keys} (endpoint, send_key, event_id, expires_at) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (endpoint, send_key) DO UPDATE \
                 SET event_id = excluded.event_id, expires_at = excluded.expires_at \
                 WHERE {keys}.expires_at <= $5 RETURNING event_id"
            )),
            known: statement(format!(
                "SELECT event_id FROM {keys} WHERE endpoint = $1 AND send_key = $2"
            )),
            forget: statement(format!(
                "DELETE FROM {keys} WHERE {}",
                dialect.picked(&format!(
                    "SELECT {row_id} FROM {keys} WHERE endpoint = $1 AND expires_at <= $2 \
                     LIMIT $3{lock}"
                ))
            )),
            purge: statement(format!(
                "DELETE FROM {deliveries} WHERE {} RETURNING endpoint, event_id",
                dialect.picked(&format!(
                    "SELECT {row_id} FROM {deliveries} WHERE endpoint = $1 AND (\
                     (state = 1 AND finished_at < $2) OR (state = 2 AND finished_at < $3) \
                     OR (state = 3 AND finished_at < $4) OR (state = 0 AND created_at < $5 \
                     AND (lease_until IS NULL OR lease_until <= $6))) LIMIT $7{lock}"
                ))
            )),
        }
    }
}

/// Implements [`Keeping`](crate::sender::outbox::Keeping) for a SQL outbox with
/// `pool`, `prefix`, `statements` ([`Statements`](crate::sender::outbox::sql::Statements))
/// and `keep` ([`KeepStatements`]) fields.
macro_rules! sql_keeping {
    ($store:ty) => {
        const _: () = {
            use std::time::SystemTime;

            use $crate::sender::DeliveryState;
            use $crate::sender::OutboxError;
            use $crate::sender::outbox::OUTBOX_PURGE_BATCH;
            use $crate::sender::outbox::keep::{Keeping, Keyed, Retention, SendKey, cutoff_millis};
            use $crate::sender::outbox::sql::purge_attempts;
            use $crate::store::{now_millis, unix_millis};

            impl Keeping for $store {
                async fn add_keyed_delivery(
                    &self,
                    key: SendKey<'_>,
                    new: $crate::sender::outbox::NewDelivery<'_>,
                ) -> Result<Keyed, OutboxError> {
                    let SendKey { key, now, window } = key;
                    let (endpoint, id, body, due) =
                        (new.endpoint(), new.id(), new.body(), new.due());
                    let now = unix_millis(now);
                    let expires = now.saturating_add($crate::store::millis(window));
                    // A key deleted between the failed claim and the read
                    // (it expired and was forgotten) is claimed on the
                    // next round.
                    loop {
                        let mut tx = self.pool.begin().await?;
                        let claimed: Option<String> = sqlx::query_scalar(self.keep.claim.clone())
                            .bind(endpoint)
                            .bind(key)
                            .bind(id)
                            .bind(expires)
                            .bind(now)
                            .fetch_optional(&mut *tx)
                            .await?;
                        if claimed.is_some() {
                            let added = sqlx::query(self.statements.enqueue.clone())
                                .bind(endpoint)
                                .bind(id)
                                .bind(body)
                                .bind(unix_millis(due))
                                .bind(now_millis())
                                .execute(&mut *tx)
                                .await?
                                .rows_affected();
                            tx.commit().await?;
                            let id = id.to_owned();
                            return Ok(Keyed {
                                id,
                                enqueued: added == 1,
                            });
                        }
                        let known: Option<String> = sqlx::query_scalar(self.keep.known.clone())
                            .bind(endpoint)
                            .bind(key)
                            .fetch_optional(&mut *tx)
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

                async fn forget_keys(
                    &self,
                    endpoint: &str,
                    now: SystemTime,
                ) -> Result<u64, OutboxError> {
                    $crate::sender::outbox::keep::in_batches(|| async move {
                        Ok(sqlx::query(self.keep.forget.clone())
                            .bind(endpoint)
                            .bind(unix_millis(now))
                            .bind(i64::try_from(OUTBOX_PURGE_BATCH).unwrap_or(i64::MAX))
                            .execute(&self.pool)
                            .await?
                            .rows_affected())
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
                    $crate::sender::outbox::keep::in_batches(|| async move {
                        let mut tx = self.pool.begin().await?;
                        let deleted: Vec<(String, String)> =
                            sqlx::query_as(self.keep.purge.clone())
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
                            let mut query =
                                sqlx::query(purge_attempts(&self.prefix, deleted.len()));
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
                        let deleted: Vec<(String, String)> =
                            sqlx::query_as(self.statements.purge_deliveries.clone())
                                .bind(before)
                                .bind(i64::try_from(batch).unwrap_or(i64::MAX))
                                .fetch_all(&mut *tx)
                                .await?;
                        if !deleted.is_empty() {
                            let sql = purge_attempts(&self.prefix, deleted.len());
                            let mut query = sqlx::query(sql);
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
        };
    };
}

pub(crate) use sql_keeping;
