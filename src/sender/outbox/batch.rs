//! The SQL outboxes' writes in batches, through the stores' group commit
//! (`crate::store::group_commit`): the enqueues and the attempts' records
//! that arrive together share one transaction, and so one flush. With ten
//! attempts in flight, ten records used to wait for ten flushes one after
//! another; now the ones that finish during a flush share the next.
//!
//! Each caller's outcome is its own, as if alone: an enqueue of an id
//! already there (or earlier in the same batch) adds nothing, and a record
//! whose lease is gone changes nothing. The health an attempt changes is
//! merged in batch order, so each caller is told the health after its own
//! attempt. A batch that fails keeps nothing and fails each caller.
//!
//! On Postgres a batch of two or more goes as one statement over arrays
//! (`unnest`); a batch of one runs the one-delivery statements, which are
//! planned once, where the statement over arrays is planned on each call.

use std::collections::HashMap;

use sqlx::SqlStr;

use super::codes::{AttemptRow, HealthFields, attempt_fields, failed_at, health_from_fields};
use super::sql::{Statements, tables};
use crate::sender::{Attempt, DeliveryState, EndpointHealth, HealthChange, Step, Taken};
use crate::store::group_commit::{CommitBatch, GroupCommit};
use crate::store::sql::statement;
use crate::store::{now_millis, unix_millis};

/// One enqueue, owned, waiting for its batch.
pub(crate) struct Enqueue {
    endpoint: String,
    id: String,
    body: Vec<u8>,
    due: i64,
    created: i64,
}

impl Enqueue {
    pub(crate) fn new(endpoint: &str, id: &str, body: &[u8], due: std::time::SystemTime) -> Self {
        Self {
            endpoint: endpoint.to_owned(),
            id: id.to_owned(),
            body: body.to_vec(),
            due: unix_millis(due),
            created: now_millis(),
        }
    }
}

/// One attempt's record and the step after it, owned, waiting for its
/// batch.
pub(crate) struct Finish {
    endpoint: String,
    id: String,
    token: String,
    state: i64,
    due: i64,
    waited: i64,
    reason: i64,
    finished: Option<i64>,
    attempt: AttemptRow,
    change: Option<HealthChange>,
}

impl Finish {
    pub(crate) fn new(
        taken: &Taken,
        attempt: &Attempt,
        step: Step,
        change: Option<HealthChange>,
    ) -> Self {
        let (state, due, waited, reason) = super::codes::step_fields(step);
        Self {
            endpoint: taken.endpoint.clone(),
            id: taken.id.clone(),
            token: taken.token.clone(),
            state: state.code(),
            due: due.unwrap_or(unix_millis(taken.due_at)),
            waited,
            reason,
            finished: (state != DeliveryState::Pending).then(now_millis),
            attempt: attempt_fields(attempt),
            change,
        }
    }
}

/// A SQL outbox's batched writes: its enqueues and its attempts' records,
/// each with a writer of its own.
#[derive(Debug)]
pub(crate) struct Writes<DB: sqlx::Database>
where
    Enqueues<DB>: CommitBatch<Job = Enqueue, Outcome = bool>,
    Finishes<DB>: CommitBatch<Job = Finish, Outcome = Option<EndpointHealth>>,
{
    pub(crate) enqueues: GroupCommit<Enqueues<DB>>,
    pub(crate) finishes: GroupCommit<Finishes<DB>>,
}

impl<DB: sqlx::Database> Clone for Writes<DB>
where
    Enqueues<DB>: CommitBatch<Job = Enqueue, Outcome = bool>,
    Finishes<DB>: CommitBatch<Job = Finish, Outcome = Option<EndpointHealth>>,
{
    fn clone(&self) -> Self {
        Self {
            enqueues: self.enqueues.clone(),
            finishes: self.finishes.clone(),
        }
    }
}

impl<DB: sqlx::Database> Writes<DB>
where
    Enqueues<DB>: CommitBatch<Job = Enqueue, Outcome = bool>,
    Finishes<DB>: CommitBatch<Job = Finish, Outcome = Option<EndpointHealth>>,
{
    /// The writes on `pool` with the store's `statements`; `many` adds
    /// the statements over arrays (Postgres) for the tables of `prefix`.
    pub(crate) fn new(
        pool: &sqlx::Pool<DB>,
        statements: &Statements,
        prefix: &str,
        many: bool,
    ) -> Self {
        Self {
            enqueues: GroupCommit::new(Enqueues {
                pool: pool.clone(),
                one: statements.enqueue.clone(),
                many: many.then(|| enqueue_many(prefix)),
            }),
            finishes: GroupCommit::new(Finishes {
                pool: pool.clone(),
                statements: statements.clone(),
                many: many.then(|| finish_many(prefix)),
            }),
        }
    }
}

/// Commits enqueues.
#[derive(Debug)]
pub(crate) struct Enqueues<DB: sqlx::Database> {
    pool: sqlx::Pool<DB>,
    one: SqlStr,
    many: Option<SqlStr>,
}

impl<DB: sqlx::Database> Clone for Enqueues<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            one: self.one.clone(),
            many: self.many.clone(),
        }
    }
}

/// Commits attempts' records.
#[derive(Debug)]
pub(crate) struct Finishes<DB: sqlx::Database> {
    pool: sqlx::Pool<DB>,
    statements: Statements,
    many: Option<SqlStr>,
}

impl<DB: sqlx::Database> Clone for Finishes<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            statements: self.statements.clone(),
            many: self.many.clone(),
        }
    }
}

/// Enqueues many deliveries in one statement: $1 endpoints, $2 ids, $3
/// bodies, $4 due times, $5 enqueue times; returns the positions (from 1)
/// of those added. Of the same key twice the first is added; rows are
/// inserted in key order, so overlapping batches wait rather than
/// deadlock.
fn enqueue_many(prefix: &str) -> SqlStr {
    let (deliveries, _, _) = tables(prefix);
    statement(format!(
        "WITH d AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[], \
         $5::bigint[]) WITH ORDINALITY AS d (endpoint, event_id, body, due_at, created_at, n)), \
         first AS (SELECT DISTINCT ON (endpoint, event_id) * FROM d ORDER BY endpoint, event_id, n), \
         added AS (INSERT INTO {deliveries} (endpoint, event_id, body, due_at, created_at) \
         SELECT endpoint, event_id, body, due_at, created_at FROM first ORDER BY endpoint, event_id \
         ON CONFLICT (endpoint, event_id) DO NOTHING RETURNING endpoint, event_id) \
         SELECT n FROM first JOIN added USING (endpoint, event_id)"
    ))
}

/// Records many attempts in one statement: the delivery's columns as
/// arrays $1 to $8 (endpoint, id, lease token, state, due, waited,
/// reason, finished at), the attempt's $9 to $17. Returns, for each
/// delivery whose lease held, its position (from 1) and its endpoint's
/// saved health; of two records of one lease the first is kept. The
/// leased rows are locked in key order first, so overlapping batches wait
/// rather than deadlock.
fn finish_many(prefix: &str) -> SqlStr {
    let (deliveries, attempts, endpoints) = tables(prefix);
    statement(format!(
        "WITH f AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], \
         $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], \
         $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[], $15::text[], $16::bigint[], \
         $17::bytea[]) WITH ORDINALITY AS f (endpoint, event_id, token, state, due_at, waited_ms, \
         reason, finished_at, number, sent_at, a_waited, a_reason, held_ms, status, error, \
         duration_us, excerpt, n)), \
         held AS (SELECT f.* FROM {deliveries} d JOIN f ON d.endpoint = f.endpoint \
         AND d.event_id = f.event_id AND d.lease_token = f.token \
         ORDER BY d.endpoint, d.event_id FOR UPDATE OF d), \
         locked AS (SELECT DISTINCT ON (endpoint, event_id) * FROM held \
         ORDER BY endpoint, event_id, n), \
         done AS (UPDATE {deliveries} d SET tries = d.tries + 1, attempts = d.attempts + 1, \
         state = l.state, due_at = l.due_at, waited_ms = l.waited_ms, reason = l.reason, \
         finished_at = l.finished_at, lease_token = NULL, lease_until = NULL FROM locked l \
         WHERE d.endpoint = l.endpoint AND d.event_id = l.event_id RETURNING l.n), \
         recorded AS (INSERT INTO {attempts} (endpoint, event_id, number, sent_at, waited_ms, \
         reason, held_ms, status, error, duration_us, excerpt) \
         SELECT endpoint, event_id, number, sent_at, a_waited, a_reason, held_ms, status, error, \
         duration_us, excerpt FROM locked JOIN done USING (n) \
         ON CONFLICT (endpoint, event_id, number) DO NOTHING) \
         SELECT done.n, e.failing_since, e.disabled, e.disabled_after_ms FROM done \
         JOIN locked USING (n) LEFT JOIN {endpoints} e ON e.endpoint = locked.endpoint"
    ))
}

/// Each endpoint's health as a batch of records goes, so that each caller
/// is told the health after its own attempt.
#[derive(Default)]
struct HealthSoFar<'a>(HashMap<&'a str, EndpointHealth>);

impl<'a> HealthSoFar<'a> {
    /// The health of `job`'s endpoint before its attempt (`saved`, what
    /// the batch read, as changed by the batch so far), and the change to
    /// write: none when merging it changes nothing (a success on a healthy
    /// endpoint), so most records neither write nor lock the endpoint.
    fn before(
        &mut self,
        job: &'a Finish,
        saved: HealthFields,
    ) -> (&mut EndpointHealth, Option<HealthChange>) {
        let health = self
            .0
            .entry(&job.endpoint)
            .or_insert_with(|| health_from_fields(saved));
        let change = job
            .change
            .filter(|change| health.merged(*change) != *health);
        (health, change)
    }
}

/// The parts of the commits that differ only in the database type.
macro_rules! sql_outbox_commits {
    ($db:ty, writers: $writers:expr, record: $record:ident) => {
        impl Finishes<$db> {
            /// Records each of `batch` in `tx` with the one-delivery
            /// statements; the saved health for each whose lease held.
            async fn finish_each(
                &self,
                tx: &mut sqlx::Transaction<'static, $db>,
                batch: &[Finish],
            ) -> Result<Vec<Option<HealthFields>>, sqlx::Error> {
                let mut saved = Vec::with_capacity(batch.len());
                for job in batch {
                    let health: Option<HealthFields> =
                        sqlx::query_as(self.statements.finish.clone())
                            .bind(&job.endpoint)
                            .bind(&job.id)
                            .bind(&job.token)
                            .bind(job.state)
                            .bind(job.due)
                            .bind(job.waited)
                            .bind(job.reason)
                            .bind(job.finished)
                            .fetch_optional(&mut **tx)
                            .await?;
                    if health.is_some() {
                        let (
                            number,
                            sent_at,
                            waited,
                            reason,
                            held,
                            status,
                            error,
                            duration,
                            excerpt,
                        ) = &job.attempt;
                        sqlx::query(self.statements.record_attempt.clone())
                            .bind(&job.endpoint)
                            .bind(&job.id)
                            .bind(number)
                            .bind(sent_at)
                            .bind(waited)
                            .bind(reason)
                            .bind(held)
                            .bind(status)
                            .bind(error)
                            .bind(duration)
                            .bind(excerpt)
                            .execute(&mut **tx)
                            .await?;
                    }
                    saved.push(health);
                }
                Ok(saved)
            }

            /// Records `batch` in one transaction and merges each health
            /// change in order.
            async fn finish_all(
                &self,
                batch: &[Finish],
            ) -> Result<Vec<Option<EndpointHealth>>, sqlx::Error> {
                let mut tx = self.pool.begin().await?;
                let saved = self.$record(&mut tx, batch).await?;
                let mut so_far = HealthSoFar::default();
                let mut outcomes = Vec::with_capacity(batch.len());
                for (job, saved) in batch.iter().zip(saved) {
                    let Some(saved) = saved else {
                        outcomes.push(None);
                        continue;
                    };
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
                    outcomes.push(Some(*health));
                }
                tx.commit().await?;
                Ok(outcomes)
            }
        }

        impl CommitBatch for Finishes<$db> {
            type Job = Finish;
            type Outcome = Option<EndpointHealth>;
            const WRITERS: usize = $writers;

            async fn commit(&self, batch: &[Finish]) -> Result<Vec<Self::Outcome>, sqlx::Error> {
                self.finish_all(batch).await
            }
        }
    };
}

#[cfg(feature = "sqlite")]
sql_outbox_commits!(sqlx::Sqlite, writers: 1, record: finish_each);
#[cfg(feature = "postgres")]
sql_outbox_commits!(sqlx::Postgres, writers: 2, record: finish_some);

#[cfg(feature = "sqlite")]
/// Enqueues a batch on SQLite: the one-delivery statement for each, in
/// order, in one transaction (the file has one writer).
impl CommitBatch for Enqueues<sqlx::Sqlite> {
    type Job = Enqueue;
    type Outcome = bool;
    const WRITERS: usize = 1;

    async fn commit(&self, batch: &[Enqueue]) -> Result<Vec<bool>, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let mut added = Vec::with_capacity(batch.len());
        for job in batch {
            let rows = sqlx::query(self.one.clone())
                .bind(&job.endpoint)
                .bind(&job.id)
                .bind(&job.body)
                .bind(job.due)
                .bind(job.created)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            added.push(rows == 1);
        }
        tx.commit().await?;
        Ok(added)
    }
}

#[cfg(feature = "postgres")]
/// Enqueues a batch on Postgres: one statement over arrays, its own
/// transaction; a batch of one with the one-delivery statement.
impl CommitBatch for Enqueues<sqlx::Postgres> {
    type Job = Enqueue;
    type Outcome = bool;
    const WRITERS: usize = 2;

    async fn commit(&self, batch: &[Enqueue]) -> Result<Vec<bool>, sqlx::Error> {
        let (Some(many), [_, _, ..]) = (&self.many, batch) else {
            let mut added = Vec::with_capacity(1);
            for job in batch {
                let rows = sqlx::query(self.one.clone())
                    .bind(&job.endpoint)
                    .bind(&job.id)
                    .bind(&job.body)
                    .bind(job.due)
                    .bind(job.created)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                added.push(rows == 1);
            }
            return Ok(added);
        };
        let positions: Vec<i64> = sqlx::query_scalar(many.clone())
            .bind(
                batch
                    .iter()
                    .map(|job| job.endpoint.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(batch.iter().map(|job| job.id.as_str()).collect::<Vec<_>>())
            .bind(batch.iter().map(|job| &job.body[..]).collect::<Vec<_>>())
            .bind(batch.iter().map(|job| job.due).collect::<Vec<_>>())
            .bind(batch.iter().map(|job| job.created).collect::<Vec<_>>())
            .fetch_all(&self.pool)
            .await?;
        Ok(flags(batch.len(), positions))
    }
}

#[cfg(feature = "postgres")]
/// `len` flags, set at each of `positions` (from 1).
fn flags(len: usize, positions: Vec<i64>) -> Vec<bool> {
    let mut flags = vec![false; len];
    for n in positions {
        if let Some(flag) = usize::try_from(n - 1).ok().and_then(|at| flags.get_mut(at)) {
            *flag = true;
        }
    }
    flags
}

#[cfg(feature = "postgres")]
impl Finishes<sqlx::Postgres> {
    /// Records `batch` in `tx`: two or more with one statement over
    /// arrays, one with the one-delivery statements.
    async fn finish_some(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
        batch: &[Finish],
    ) -> Result<Vec<Option<HealthFields>>, sqlx::Error> {
        let (Some(many), [_, _, ..]) = (&self.many, batch) else {
            return self.finish_each(tx, batch).await;
        };
        let column = |f: fn(&Finish) -> &str| batch.iter().map(f).collect::<Vec<_>>();
        let number = |f: fn(&Finish) -> i64| batch.iter().map(f).collect::<Vec<_>>();
        let rows: Vec<(i64, Option<i64>, Option<i64>, Option<i64>)> = sqlx::query_as(many.clone())
            .bind(column(|job| &job.endpoint))
            .bind(column(|job| &job.id))
            .bind(column(|job| &job.token))
            .bind(number(|job| job.state))
            .bind(number(|job| job.due))
            .bind(number(|job| job.waited))
            .bind(number(|job| job.reason))
            .bind(batch.iter().map(|job| job.finished).collect::<Vec<_>>())
            .bind(number(|job| job.attempt.0))
            .bind(number(|job| job.attempt.1))
            .bind(number(|job| job.attempt.2))
            .bind(number(|job| job.attempt.3))
            .bind(number(|job| job.attempt.4))
            .bind(batch.iter().map(|job| job.attempt.5).collect::<Vec<_>>())
            .bind(
                batch
                    .iter()
                    .map(|job| job.attempt.6.as_deref())
                    .collect::<Vec<_>>(),
            )
            .bind(number(|job| job.attempt.7))
            .bind(
                batch
                    .iter()
                    .map(|job| &job.attempt.8[..])
                    .collect::<Vec<_>>(),
            )
            .fetch_all(&mut **tx)
            .await?;
        let mut saved = vec![None; batch.len()];
        for (n, failing_since, disabled, after) in rows {
            if let Some(slot) = usize::try_from(n - 1).ok().and_then(|at| saved.get_mut(at)) {
                *slot = Some((failing_since, disabled, after));
            }
        }
        Ok(saved)
    }
}
