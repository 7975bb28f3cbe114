//! [`SqlOutbox`]: the SQLite and Postgres outboxes, written once over
//! [`SqlDatabase`]: on top of the statements (`sql.rs`), the batched
//! writes (`batch/`) and the take across endpoints (`take_across.rs`).
//! What differs (how a batch of writes commits) is each database's
//! [`OutboxBackend`](crate::sender::outbox::OutboxBackend), in `batch/`.

mod keep;
mod registry;
mod view;

use std::time::{Duration, SystemTime};

use sqlx::Pool;

use super::batch::{Enqueue, Finish, Writes};
use super::codes::{
    AttemptRow, attempt_from_fields, disable_fields, due, health_from_fields, stored,
};
use super::keep::sql::KeepStatements;
use super::registry::sql::RegistryStatements;
use super::sql::{Statements, TakeRow, schema, trace_schema};
use super::take_across::take_due_across;
use super::view::sql::ViewStatements;
use super::{
    DeliveryCounts, DeliveryStore, Due, DueAcross, NewDelivery, StoredDelivery, Taken, Wanted,
};
use crate::dedup::check_prefix;
use crate::sender::OutboxError;
use crate::sender::outbox::{DeliveryState, DisableReason, EndpointHealth, HealthChange};
use crate::sender::rules::{Attempt, Step};
use crate::store::sql::{SqlDatabase, sql};
use crate::store::{millis, new_token, unix_millis};

/// Deliveries, their attempts and each endpoint's health in SQL tables: on
/// SQLite ([`SqliteOutbox`](crate::sender::SqliteOutbox)) or Postgres
/// ([`PostgresOutbox`](crate::sender::PostgresOutbox)); their pages say
/// how each shares the work and what tables [`migrate`](Self::migrate)
/// makes.
pub struct SqlOutbox<DB: SqlDatabase> {
    pub(crate) pool: Pool<DB>,
    pub(crate) prefix: String,
    pub(crate) statements: Statements,
    pub(crate) registry: RegistryStatements,
    pub(crate) view: ViewStatements,
    pub(crate) keep: KeepStatements,
    writes: Writes<DB>,
}

impl<DB: SqlDatabase> Clone for SqlOutbox<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            prefix: self.prefix.clone(),
            statements: self.statements.clone(),
            registry: self.registry.clone(),
            view: self.view.clone(),
            keep: self.keep.clone(),
            writes: self.writes.clone(),
        }
    }
}

impl<DB: SqlDatabase> std::fmt::Debug for SqlOutbox<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlOutbox")
            .field("pool", &self.pool)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl<DB: SqlDatabase> SqlOutbox<DB> {
    /// A store on `pool` whose tables start with `prefix` (1 to 48 of
    /// `a-z 0-9 _`, starting with a letter). Call
    /// [`migrate`](Self::migrate) before use.
    ///
    /// The pool is used as you built it. On SQLite it must set
    /// `synchronous=FULL` (`migrate` refuses less), should use WAL and a
    /// busy timeout, and gets none of the retries `open` makes while
    /// another process switches a new file to WAL.
    pub fn new(pool: Pool<DB>, prefix: &str) -> Result<Self, OutboxError> {
        check_prefix(prefix)?;
        let statements = Statements::new(prefix, &DB::DIALECT);
        Ok(Self {
            writes: DB::outbox_writes(&pool, &statements, prefix),
            statements,
            registry: RegistryStatements::new(prefix),
            view: ViewStatements::new(prefix),
            keep: KeepStatements::new(prefix, &DB::DIALECT),
            prefix: prefix.to_owned(),
            pool,
        })
    }

    /// Creates or upgrades the tables and indexes. Safe to run from
    /// several processes at once: concurrent callers take turns (an
    /// advisory lock on Postgres, an immediate transaction on SQLite), and
    /// when the recorded version is current it only reads, so it is safe
    /// to run on every start.
    pub async fn migrate(&self) -> Result<(), OutboxError> {
        for schema in [
            schema(&self.prefix, &DB::DIALECT),
            trace_schema(&self.prefix, &DB::DIALECT),
            super::registry::sql::schema(&self.prefix, &DB::DIALECT),
            super::view::sql::schema(&self.prefix),
            super::keep::sql::schema(&self.prefix, &DB::DIALECT),
        ] {
            DB::migrate(&self.pool, &schema).await?;
        }
        Ok(())
    }

    /// The store with the default prefix `hooklatch` on `pool`, its tables
    /// migrated.
    pub(crate) async fn migrated(pool: Pool<DB>) -> Result<Self, OutboxError> {
        let store = Self::new(pool, "hooklatch")?;
        store.migrate().await?;
        Ok(store)
    }

    /// The connection pool.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }
}

impl<DB: SqlDatabase> DeliveryStore for SqlOutbox<DB> {
    async fn take_due_across(
        &self,
        wanted: &[Wanted],
        limit: usize,
        lease: Duration,
    ) -> Result<DueAcross, OutboxError> {
        take_due_across(&self.pool, &self.prefix, wanted, limit, lease).await
    }

    async fn store_time(&self) -> Result<SystemTime, OutboxError> {
        let now: i64 = sql::<DB>(&self.statements.now)
            .fetch_one_scalar(&self.pool)
            .await?;
        Ok(crate::sender::outbox::codes::from_millis(now))
    }

    async fn add_delivery(&self, new: NewDelivery<'_>) -> Result<bool, OutboxError> {
        let job = Enqueue::new(&new);
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
            sql::<DB>(&self.statements.take)
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
            Some(row) => (row.9, None, None),
            None => sql::<DB>(&self.statements.read_health)
                .bind(endpoint)
                .fetch_optional(&self.pool)
                .await?
                .unwrap_or_default(),
        };
        let rows = rows.into_iter().map(
            |(id, body, tries, attempts, due_at, waited, reason, enqueued, trace, _)| {
                (
                    id, body, tries, attempts, due_at, waited, reason, enqueued, trace,
                )
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

    async fn put_back(&self, taken: &Taken, due: SystemTime) -> Result<(), OutboxError> {
        let updated = sql::<DB>(&self.statements.put_back)
            .bind(&taken.endpoint)
            .bind(&taken.id)
            .bind(&taken.token)
            .bind(unix_millis(due))
            .execute(&self.pool)
            .await?;
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
        let Some((body, state, due_at)) = sql::<DB>(&self.statements.read)
            .bind(endpoint)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
        else {
            return Ok(None);
        };
        let attempts: Vec<AttemptRow> = sql::<DB>(&self.statements.read_attempts)
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
        Ok(sql::<DB>(&self.statements.list)
            .bind(endpoint)
            .bind(state.code())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all_scalar(&self.pool)
            .await?)
    }

    async fn replay(&self, endpoint: &str, id: &str, now: SystemTime) -> Result<bool, OutboxError> {
        let updated = sql::<DB>(&self.statements.replay)
            .bind(endpoint)
            .bind(id)
            .bind(unix_millis(now))
            .execute(&self.pool)
            .await?;
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
            None => sql::<DB>(&self.statements.disable)
                .bind(endpoint)
                .bind(disabled),
            Some(latest) => sql::<DB>(&self.statements.disable_stale)
                .bind(endpoint)
                .bind(disabled)
                .bind(after)
                .bind(latest),
        };
        Ok(query.execute(&self.pool).await? == 1)
    }

    async fn enable(&self, endpoint: &str) -> Result<(), OutboxError> {
        sql::<DB>(&self.statements.enable)
            .bind(endpoint)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn counts(&self, endpoint: &str, now: SystemTime) -> Result<DeliveryCounts, OutboxError> {
        let rows: Vec<(i64, i64, Option<i64>)> = sql::<DB>(&self.view.counts)
            .bind(endpoint)
            .bind(unix_millis(now))
            .fetch_all(&self.pool)
            .await?;
        let mut counts = DeliveryCounts::default();
        for (state, count, due) in rows {
            let count = u64::try_from(count).unwrap_or(0);
            match DeliveryState::from_code(state) {
                DeliveryState::Pending => {
                    counts.pending = count;
                    counts.due = u64::try_from(due.unwrap_or(0)).unwrap_or(0);
                }
                DeliveryState::Delivered => counts.delivered = count,
                DeliveryState::Gone => counts.gone = count,
                DeliveryState::Dead => counts.dead = count,
            }
        }
        Ok(counts)
    }
}
