//! The SQLite outbox's batches: the one-delivery statements for each job,
//! in order, in one transaction.

use super::{Enqueue, Enqueues, Finish, Finishes, HealthSoFar, Writes, writers};
use crate::sender::outbox::OutboxBackend;
use crate::sender::outbox::codes::{HealthFields, failed_at, health_from_fields};
use crate::sender::outbox::sql::Statements;
use crate::store::group_commit::{CommitBatch, GroupCommit};
use sqlx::Connection as _;

/// SQLite's batches: each job's one-delivery statements, in order, in one
/// transaction.
impl OutboxBackend for sqlx::Sqlite {
    type Enqueues = Enqueues<sqlx::Sqlite>;
    type Finishes = Finishes<sqlx::Sqlite>;

    fn outbox_writes(
        pool: &sqlx::SqlitePool,
        statements: &Statements,
        prefix: &str,
    ) -> Writes<Self> {
        let (enqueues, finishes) = writers(pool, statements, prefix, false);
        Writes {
            enqueues: GroupCommit::new(enqueues),
            finishes: GroupCommit::new(finishes),
        }
    }
}

/// Records a batch on SQLite, in one transaction: the one-delivery
/// statements for each, in order, and each health change that alters the
/// health so far merged as it comes (the file has one writer).
impl CommitBatch for Finishes<sqlx::Sqlite> {
    const WRITERS: usize = 1;
    const RETRY_ALONE: bool = true;

    async fn commit(&self, batch: &[Finish]) -> Result<Vec<Self::Outcome>, sqlx::Error> {
        self.connection
            .run(async |connection| {
                let mut tx = connection.begin().await?;
                let mut so_far = HealthSoFar::default();
                let mut told = Vec::with_capacity(batch.len());
                for job in batch {
                    let saved: Option<HealthFields> =
                        bind_step!(sqlx::query_as(self.statements.finish.clone()), job)
                            .fetch_optional(&mut *tx)
                            .await?;
                    let Some(saved) = saved else {
                        told.push(None);
                        continue;
                    };
                    let record = sqlx::query(self.statements.record_attempt.clone())
                        .bind(&job.endpoint)
                        .bind(&job.id);
                    bind_attempt!(record, job).execute(&mut *tx).await?;
                    let (health, change) = so_far.before(job, saved);
                    if let Some(change) = change {
                        // The write merges atomically: a change another
                        // dispatcher made since the read is kept.
                        let merged: HealthFields =
                            sqlx::query_as(self.statements.merge_health.clone())
                                .bind(&job.endpoint)
                                .bind(failed_at(change))
                                .fetch_one(&mut *tx)
                                .await?;
                        *health = health_from_fields(merged);
                    }
                    told.push(Some(*health));
                }
                tx.commit().await?;
                Ok(told)
            })
            .await
    }

    async fn idle(&self) {
        self.connection.release();
    }
}

/// Enqueues a batch on SQLite: the one-delivery statement for each, in
/// order, in one transaction (the file has one writer).
impl CommitBatch for Enqueues<sqlx::Sqlite> {
    const WRITERS: usize = 1;
    const RETRY_ALONE: bool = true;

    async fn commit(&self, batch: &[Enqueue]) -> Result<Vec<bool>, sqlx::Error> {
        self.connection
            .run(async |connection| {
                let mut tx = connection.begin().await?;
                let mut added = Vec::with_capacity(batch.len());
                for job in batch {
                    let rows = bind_enqueue!(sqlx::query(self.one.clone()), job)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected();
                    added.push(rows == 1);
                }
                tx.commit().await?;
                Ok(added)
            })
            .await
    }

    async fn idle(&self) {
        self.connection.release();
    }
}
