//! [`OutboxView`](super::OutboxView) for the SQL outboxes.

use sqlx::SqlStr;

use crate::sender::outbox::sql::tables;
use crate::store::sql::{Schema, statement};

/// An index for the latest attempts of an endpoint (version 1).
pub(crate) fn schema(prefix: &str) -> Schema {
    let (_, attempts, _) = tables(prefix);
    Schema {
        component: format!("outbox-view:{prefix}"),
        version: 1,
        statements: vec![format!(
            "CREATE INDEX IF NOT EXISTS {attempts}_recent ON {attempts} (endpoint, sent_at)"
        )],
    }
}

/// The view's statements.
#[derive(Debug, Clone)]
pub(crate) struct ViewStatements {
    pub(crate) names: SqlStr,
    /// $1 endpoint, $2 now: state, count, due count.
    pub(crate) counts: SqlStr,
    /// $1 endpoint, $2 limit: the id, then an attempt's row.
    pub(crate) recent: SqlStr,
}

impl ViewStatements {
    pub(crate) fn new(prefix: &str) -> Self {
        let (deliveries, attempts, health) = tables(prefix);
        let configs = format!("{prefix}_endpoint_configs");
        Self {
            names: statement(format!(
                "SELECT endpoint FROM {deliveries} UNION SELECT endpoint FROM {health} \
                 UNION SELECT endpoint FROM {configs} ORDER BY endpoint"
            )),
            counts: statement(format!(
                "SELECT state, COUNT(*), SUM(CASE WHEN state = 0 AND due_at <= $2 \
                 AND (lease_until IS NULL OR lease_until <= $2) THEN 1 ELSE 0 END) \
                 FROM {deliveries} WHERE endpoint = $1 GROUP BY state"
            )),
            recent: statement(format!(
                "SELECT event_id, number, sent_at, waited_ms, reason, held_ms, status, error, \
                 duration_us, excerpt FROM {attempts} WHERE endpoint = $1 \
                 ORDER BY sent_at DESC, number DESC LIMIT $2"
            )),
        }
    }
}

/// Implements [`OutboxView`](crate::sender::OutboxView) for a SQL outbox
/// with `pool` and `view` ([`ViewStatements`]) fields.
macro_rules! sql_outbox_view {
    ($store:ty) => {
        impl $crate::sender::OutboxView for $store {
            async fn endpoint_names(&self) -> Result<Vec<String>, $crate::dedup::DedupError> {
                Ok(sqlx::query_scalar(self.view.names.clone())
                    .fetch_all(&self.pool)
                    .await?)
            }

            async fn counts(
                &self,
                endpoint: &str,
                now: std::time::SystemTime,
            ) -> Result<$crate::sender::DeliveryCounts, $crate::dedup::DedupError> {
                let rows: Vec<(i64, i64, Option<i64>)> = sqlx::query_as(self.view.counts.clone())
                    .bind(endpoint)
                    .bind($crate::store::unix_millis(now))
                    .fetch_all(&self.pool)
                    .await?;
                let mut counts = $crate::sender::DeliveryCounts::default();
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

            async fn recent_attempts(
                &self,
                endpoint: &str,
                limit: usize,
            ) -> Result<Vec<$crate::sender::RecentAttempt>, $crate::dedup::DedupError> {
                type Row = (
                    String,
                    i64,
                    i64,
                    i64,
                    i64,
                    i64,
                    Option<i64>,
                    Option<String>,
                    i64,
                    Vec<u8>,
                );
                let rows: Vec<Row> = sqlx::query_as(self.view.recent.clone())
                    .bind(endpoint)
                    .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                    .fetch_all(&self.pool)
                    .await?;
                Ok(rows
                    .into_iter()
                    .map(
                        |(id, n, sent, waited, reason, held, status, error, took, excerpt)| {
                            $crate::sender::RecentAttempt {
                                id,
                                attempt: $crate::sender::outbox::codes::attempt_from_fields((
                                    n, sent, waited, reason, held, status, error, took, excerpt,
                                )),
                            }
                        },
                    )
                    .collect())
            }
        }
    };
}

pub(crate) use sql_outbox_view;
