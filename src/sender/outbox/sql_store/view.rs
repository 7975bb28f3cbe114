//! [`OutboxView`] for [`SqlOutbox`]: what an operator reads of it.

use std::time::SystemTime;

use super::SqlOutbox;
use crate::sender::OutboxError;
use crate::sender::outbox::codes::health_from_fields;
use crate::sender::outbox::view::sql::RecentRow;
use crate::sender::outbox::{DeliveryCounts, EndpointSummary, OutboxView, RecentAttempt};
use crate::store::sql::{SqlDatabase, sql};
use crate::store::unix_millis;

/// What an operator reads of a SQL outbox.
impl<DB: SqlDatabase> OutboxView for SqlOutbox<DB> {
    async fn endpoint_page(
        &self,
        after: Option<&str>,
        limit: usize,
        now: SystemTime,
    ) -> Result<Vec<EndpointSummary>, OutboxError> {
        type Row = (
            String,
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<String>,
            i64,
            i64,
            i64,
            i64,
            i64,
        );
        let rows: Vec<Row> = sql::<DB>(&self.view.page)
            .bind(after.map(str::to_owned))
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(unix_millis(now))
            .fetch_all(&self.pool)
            .await?;
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(rows
            .into_iter()
            .map(
                |(name, failing, disabled, after, saved, pending, due, delivered, gone, dead)| {
                    EndpointSummary {
                        name,
                        health: health_from_fields((failing, disabled, after)),
                        counts: DeliveryCounts {
                            pending: count(pending),
                            due: count(due),
                            delivered: count(delivered),
                            gone: count(gone),
                            dead: count(dead),
                        },
                        saved,
                    }
                },
            )
            .collect())
    }

    async fn endpoint_names(&self) -> Result<Vec<String>, OutboxError> {
        Ok(sql::<DB>(&self.view.names)
            .fetch_all_scalar(&self.pool)
            .await?)
    }

    async fn recent_attempts(
        &self,
        endpoint: &str,
        limit: usize,
    ) -> Result<Vec<RecentAttempt>, OutboxError> {
        let rows: Vec<RecentRow> = sql::<DB>(&self.view.recent)
            .bind(endpoint)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.into_iter().map(RecentAttempt::from).collect())
    }
}
