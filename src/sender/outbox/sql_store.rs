//! The one implementation of [`DeliveryStore`](super::DeliveryStore) both
//! SQL outboxes share, as a macro over the store type and its dialect: on
//! top of the statements (`sql.rs`), the batched writes (`batch/`) and the
//! take across endpoints (`take_across.rs`).

/// Implements [`DeliveryStore`](super::DeliveryStore) for a SQL store with
/// the fields `pool` and `statements`: the code is the same for SQLite and
/// Postgres, only the row and pool types differ.
macro_rules! sql_delivery_store {
    ($store:ty, $dialect:expr) => {
        const _: () = {
            use std::time::{Duration, SystemTime};

            use $crate::sender::OutboxError;
            use $crate::sender::outbox::batch::{Enqueue, Finish};
            use $crate::sender::outbox::codes::{
                AttemptRow, attempt_from_fields, disable_fields, due, health_from_fields, stored,
            };
            use $crate::sender::outbox::sql::TakeRow;
            use $crate::sender::outbox::{DeliveryStore, Due, StoredDelivery, Taken};
            use $crate::sender::{
                Attempt, DeliveryState, DisableReason, EndpointHealth, HealthChange, Step,
            };
            use $crate::store::{millis, new_token, unix_millis};

            impl DeliveryStore for $store {
                $crate::sender::outbox::take_across::sql_take_due_across!($dialect);

                async fn store_time(&self) -> Result<SystemTime, OutboxError> {
                    let now: i64 = sqlx::query_scalar(self.statements.now.clone())
                        .fetch_one(&self.pool)
                        .await?;
                    Ok($crate::sender::outbox::codes::from_millis(now))
                }

                async fn add_delivery(
                    &self,
                    new: $crate::sender::outbox::NewDelivery<'_>,
                ) -> Result<bool, OutboxError> {
                    let job = Enqueue::new(new.endpoint(), new.id(), new.body(), new.due());
                    Ok(self.writes.enqueues.submit(job).await?)
                }

                async fn take_due(
                    &self,
                    endpoint: &str,
                    now: SystemTime,
                    limit: usize,
                    lease: Duration,
                ) -> Result<Due, OutboxError> {
                    let token = new_token();
                    let now_ms = unix_millis(now);
                    let rows: Vec<TakeRow> = if limit == 0 {
                        Vec::new()
                    } else {
                        sqlx::query_as(self.statements.take.clone())
                            .bind(endpoint)
                            .bind(now_ms)
                            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                            .bind(&token)
                            .bind(now_ms.saturating_add(millis(lease)))
                            .fetch_all(&self.pool)
                            .await?
                    };
                    // Rows were leased only while the endpoint was enabled;
                    // leasing nothing, the take read no health: read it.
                    let health = match rows.first() {
                        Some(row) => (row.8, None, None),
                        None => sqlx::query_as(self.statements.read_health.clone())
                            .bind(endpoint)
                            .fetch_optional(&self.pool)
                            .await?
                            .unwrap_or_default(),
                    };
                    let rows = rows.into_iter().map(
                        |(id, body, tries, attempts, due_at, waited, reason, enqueued, _)| {
                            (id, body, tries, attempts, due_at, waited, reason, enqueued)
                        },
                    );
                    Ok(due(endpoint, &token, health_from_fields(health), rows))
                }

                async fn finish(
                    &self,
                    taken: &Taken,
                    attempt: &Attempt,
                    step: Step,
                    change: Option<HealthChange>,
                ) -> Result<EndpointHealth, OutboxError> {
                    let job = Finish::new(taken, attempt, step, change);
                    self.writes
                        .finishes
                        .submit(job)
                        .await?
                        .ok_or(OutboxError::LeaseLost)
                }

                async fn put_back(
                    &self,
                    taken: &Taken,
                    due: SystemTime,
                ) -> Result<(), OutboxError> {
                    let updated = sqlx::query(self.statements.put_back.clone())
                        .bind(&taken.endpoint)
                        .bind(&taken.id)
                        .bind(&taken.token)
                        .bind(unix_millis(due))
                        .execute(&self.pool)
                        .await?
                        .rows_affected();
                    match updated {
                        1 => Ok(()),
                        _ => Err(OutboxError::LeaseLost),
                    }
                }

                async fn delivery(
                    &self,
                    endpoint: &str,
                    id: &str,
                ) -> Result<Option<StoredDelivery>, OutboxError> {
                    let Some((body, state, due_at)) = sqlx::query_as(self.statements.read.clone())
                        .bind(endpoint)
                        .bind(id)
                        .fetch_optional(&self.pool)
                        .await?
                    else {
                        return Ok(None);
                    };
                    let attempts: Vec<AttemptRow> =
                        sqlx::query_as(self.statements.read_attempts.clone())
                            .bind(endpoint)
                            .bind(id)
                            .fetch_all(&self.pool)
                            .await?;
                    let attempts = attempts.into_iter().map(attempt_from_fields).collect();
                    Ok(Some(stored(endpoint, id, body, (state, due_at), attempts)))
                }

                async fn list(
                    &self,
                    endpoint: &str,
                    state: DeliveryState,
                    limit: usize,
                ) -> Result<Vec<String>, OutboxError> {
                    Ok(sqlx::query_scalar(self.statements.list.clone())
                        .bind(endpoint)
                        .bind(state.code())
                        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                        .fetch_all(&self.pool)
                        .await?)
                }

                async fn replay(
                    &self,
                    endpoint: &str,
                    id: &str,
                    now: SystemTime,
                ) -> Result<bool, OutboxError> {
                    let updated = sqlx::query(self.statements.replay.clone())
                        .bind(endpoint)
                        .bind(id)
                        .bind(unix_millis(now))
                        .execute(&self.pool)
                        .await?
                        .rows_affected();
                    Ok(updated == 1)
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
                    let query = match latest {
                        None => sqlx::query(self.statements.disable.clone())
                            .bind(endpoint)
                            .bind(disabled),
                        Some(latest) => sqlx::query(self.statements.disable_stale.clone())
                            .bind(endpoint)
                            .bind(disabled)
                            .bind(after)
                            .bind(latest),
                    };
                    Ok(query.execute(&self.pool).await?.rows_affected() == 1)
                }

                async fn enable(&self, endpoint: &str) -> Result<(), OutboxError> {
                    sqlx::query(self.statements.enable.clone())
                        .bind(endpoint)
                        .execute(&self.pool)
                        .await?;
                    Ok(())
                }

                async fn counts(
                    &self,
                    endpoint: &str,
                    now: std::time::SystemTime,
                ) -> Result<$crate::sender::outbox::DeliveryCounts, $crate::sender::OutboxError>
                {
                    let rows: Vec<(i64, i64, Option<i64>)> =
                        sqlx::query_as(self.view.counts.clone())
                            .bind(endpoint)
                            .bind($crate::store::unix_millis(now))
                            .fetch_all(&self.pool)
                            .await?;
                    let mut counts = $crate::sender::outbox::DeliveryCounts::default();
                    for (state, count, due) in rows {
                        let count = u64::try_from(count).unwrap_or(0);
                        match $crate::sender::DeliveryState::from_code(state) {
                            $crate::sender::DeliveryState::Pending => {
                                counts.pending = count;
                                counts.due = u64::try_from(due.unwrap_or(0)).unwrap_or(0);
                            }
                            $crate::sender::DeliveryState::Delivered => counts.delivered = count,
                            $crate::sender::DeliveryState::Gone => counts.gone = count,
                            $crate::sender::DeliveryState::Dead => counts.dead = count,
                        }
                    }
                    Ok(counts)
                }
            }
        };
    };
}

pub(crate) use sql_delivery_store;
