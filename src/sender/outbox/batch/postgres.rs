//! The Postgres outbox's batches: each batch one statement over arrays
//! (`unnest`), its own transaction, and the statements it runs.

use sqlx::SqlStr;

use crate::sender::outbox::sql::tables;
use crate::store::sql::{POSTGRES_FLUSHED, statement};
#[cfg(feature = "postgres")]
use {
    super::{Enqueue, Enqueues, Finish, Finishes, HealthSoFar},
    crate::sender::outbox::HealthChange,
    crate::sender::outbox::codes::{HealthFields, failed_at},
    crate::store::group_commit::CommitBatch,
};

/// Enqueues many deliveries in one statement: $1 endpoints, $2 ids, $3
/// bodies, $4 due times, $5 enqueue times, $6 traces; returns the positions (from 1)
/// of those added. Of the same key twice the first is added; rows are
/// inserted in key order, so overlapping batches wait rather than
/// deadlock.
pub(super) fn enqueue_many(prefix: &str) -> SqlStr {
    let (deliveries, _, _) = tables(prefix);
    statement(format!(
        "WITH d AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[], \
         $5::bigint[], $6::text[]) WITH ORDINALITY \
         AS d (endpoint, event_id, body, due_at, created_at, trace, n)), \
         first AS (SELECT DISTINCT ON (endpoint, event_id) * FROM d ORDER BY endpoint, event_id, n), \
         added AS (INSERT INTO {deliveries} (endpoint, event_id, body, due_at, created_at, trace) \
         SELECT endpoint, event_id, body, due_at, created_at, trace FROM first \
         ORDER BY endpoint, event_id \
         ON CONFLICT (endpoint, event_id) DO NOTHING RETURNING endpoint, event_id) \
         SELECT n FROM first JOIN added USING (endpoint, event_id) WHERE {flushed}",
        flushed = POSTGRES_FLUSHED
    ))
}

/// The health a change leaves, merged into an endpoint's row `{endpoints}`
/// as it is when written: a success (`cleared`) sets `excluded`'s time (a
/// failure after it, or none); a failure keeps the earlier time.
fn merge_failing_since(endpoints: &str, cleared: &str) -> String {
    format!(
        "ON CONFLICT (endpoint) DO UPDATE SET failing_since = CASE \
         WHEN {cleared} OR {endpoints}.failing_since IS NULL \
         OR excluded.failing_since < {endpoints}.failing_since \
         THEN excluded.failing_since ELSE {endpoints}.failing_since END"
    )
}

/// Records one attempt in one statement, its own transaction: $1
/// endpoint, $2 id, $3 lease token, $4 state, $5 due, $6 waited, $7
/// reason, $8 finished at, the attempt's $9 to $17, its health change $18
/// (0 none, 1 success, 2 failure) and $19 the failure's time. One row, the
/// endpoint's health as saved before, if the lease held. The endpoint's
/// row is written, and locked, only when the change alters what the
/// statement read (most attempts are successes on a healthy endpoint).
pub(super) fn finish_one(prefix: &str) -> SqlStr {
    let (deliveries, attempts, endpoints) = tables(prefix);
    let merge = merge_failing_since(&endpoints, "$18 = 1");
    statement(format!(
        "WITH done AS (UPDATE {deliveries} SET tries = tries + 1, attempts = attempts + 1, \
         state = $4, due_at = $5, waited_ms = $6, reason = $7, finished_at = $8, \
         lease_token = NULL, lease_until = NULL \
         WHERE endpoint = $1 AND event_id = $2 AND lease_token = $3 RETURNING endpoint), \
         recorded AS (INSERT INTO {attempts} (endpoint, event_id, number, sent_at, waited_ms, \
         reason, held_ms, status, error, duration_us, excerpt) \
         SELECT $1, $2, $9, $10, $11, $12, $13, $14, $15, $16, $17 FROM done \
         ON CONFLICT (endpoint, event_id, number) DO NOTHING), \
         merged AS (INSERT INTO {endpoints} (endpoint, failing_since) \
         SELECT done.endpoint, $19 FROM done LEFT JOIN {endpoints} e USING (endpoint) \
         WHERE CASE $18 WHEN 1 THEN e.failing_since IS NOT NULL \
         WHEN 2 THEN e.failing_since IS NULL OR $19 < e.failing_since ELSE FALSE END \
         {merge}) \
         SELECT e.failing_since, e.disabled, e.disabled_after_ms \
         FROM done LEFT JOIN {endpoints} e USING (endpoint) WHERE {flushed}",
        flushed = POSTGRES_FLUSHED
    ))
}

/// Records many attempts in one statement, its own transaction: the
/// columns of [`finish_one`] as arrays. Returns, for each delivery whose
/// lease held, its position (from 1) and its endpoint's health as saved
/// before; of two records of one lease one is kept.
///
/// The health changes merge as one after another would, in batch order:
/// after an endpoint's last success in the batch it is failing since the
/// earliest failure after that success (or not at all); with no success,
/// the earlier of its saved time and the batch's earliest failure. The
/// endpoint's row is written, and locked, only when that changes what the
/// statement read, in endpoint order.
pub(super) fn finish_many(prefix: &str) -> SqlStr {
    let (deliveries, attempts, endpoints) = tables(prefix);
    let merge = merge_failing_since(
        &endpoints,
        "(SELECT cleared FROM net WHERE net.endpoint = excluded.endpoint)",
    );
    statement(format!(
        "WITH f AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], \
         $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], \
         $11::bigint[], $12::bigint[], $13::bigint[], $14::bigint[], $15::text[], $16::bigint[], \
         $17::bytea[], $18::bigint[], $19::bigint[]) WITH ORDINALITY AS f (endpoint, event_id, \
         token, state, due_at, waited_ms, reason, finished_at, number, sent_at, a_waited, \
         a_reason, held_ms, status, error, duration_us, excerpt, change, failed_at, n)), \
         done AS (UPDATE {deliveries} d SET tries = d.tries + 1, attempts = d.attempts + 1, \
         state = f.state, due_at = f.due_at, waited_ms = f.waited_ms, reason = f.reason, \
         finished_at = f.finished_at, lease_token = NULL, lease_until = NULL FROM f \
         WHERE d.endpoint = f.endpoint AND d.event_id = f.event_id AND d.lease_token = f.token \
         RETURNING f.*), \
         recorded AS (INSERT INTO {attempts} (endpoint, event_id, number, sent_at, waited_ms, \
         reason, held_ms, status, error, duration_us, excerpt) \
         SELECT endpoint, event_id, number, sent_at, a_waited, a_reason, held_ms, status, error, \
         duration_us, excerpt FROM done ON CONFLICT (endpoint, event_id, number) DO NOTHING), \
         last_success AS (SELECT endpoint, max(n) AS n FROM done WHERE change = 1 \
         GROUP BY endpoint), \
         net AS (SELECT c.endpoint, bool_or(c.change = 1) AS cleared, \
         min(c.failed_at) FILTER (WHERE c.change = 2 AND c.n > coalesce(s.n, 0)) AS failed \
         FROM done c LEFT JOIN last_success s USING (endpoint) WHERE c.change > 0 \
         GROUP BY c.endpoint), \
         merged AS (INSERT INTO {endpoints} (endpoint, failing_since) \
         SELECT net.endpoint, net.failed FROM net LEFT JOIN {endpoints} e USING (endpoint) \
         WHERE CASE WHEN net.cleared THEN e.failing_since IS DISTINCT FROM net.failed \
         ELSE e.failing_since IS NULL OR net.failed < e.failing_since END \
         ORDER BY net.endpoint {merge}) \
         SELECT done.n, e.failing_since, e.disabled, e.disabled_after_ms \
         FROM done LEFT JOIN {endpoints} e USING (endpoint) WHERE {flushed}",
        flushed = POSTGRES_FLUSHED
    ))
}

/// Postgres' batches: each one statement over arrays.
#[cfg(feature = "postgres")]
impl crate::sender::outbox::OutboxBackend for sqlx::Postgres {
    type Enqueues = Enqueues<sqlx::Postgres>;
    type Finishes = Finishes<sqlx::Postgres>;

    fn outbox_writes(
        pool: &sqlx::PgPool,
        statements: &crate::sender::outbox::sql::Statements,
        prefix: &str,
    ) -> super::Writes<Self> {
        let (enqueues, finishes) = super::writers(pool, statements, prefix, true);
        super::Writes {
            enqueues: crate::store::group_commit::GroupCommit::new(enqueues),
            finishes: crate::store::group_commit::GroupCommit::new(finishes),
        }
    }
}

/// Enqueues a batch on Postgres: one statement over arrays, its own
/// transaction; a batch of one with the one-delivery statement.
#[cfg(feature = "postgres")]
impl CommitBatch for Enqueues<sqlx::Postgres> {
    const WRITERS: usize = 2;
    const RETRY_ALONE: bool = true;
    const MAX_BATCH_BYTES: usize = crate::store::group_commit::POSTGRES_BATCH_BYTES;

    fn job_bytes(job: &Enqueue) -> usize {
        job.body.len()
    }

    async fn idle(&self) {
        self.connection.release();
    }

    async fn commit(&self, batch: &[Enqueue]) -> Result<Vec<bool>, sqlx::Error> {
        let (Some(many), [_, _, ..]) = (&self.many, batch) else {
            let mut added = Vec::with_capacity(1);
            for job in batch {
                let statement = bind_enqueue!(sqlx::query(self.one.clone()), job);
                let rows = self
                    .connection
                    .run(async |connection| statement.execute(connection).await)
                    .await?
                    .rows_affected();
                added.push(rows == 1);
            }
            return Ok(added);
        };
        let statement = sqlx::query_scalar(many.clone())
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
            .bind(
                batch
                    .iter()
                    .map(|job| job.trace.as_deref())
                    .collect::<Vec<_>>(),
            );
        let positions: Vec<i64> = self
            .connection
            .run(async |connection| statement.fetch_all(connection).await)
            .await?;
        Ok(flags(batch.len(), positions))
    }
}

/// A row of [`finish_many`]: a position, then `HealthFields`.
#[cfg(feature = "postgres")]
type NumberedHealth = (i64, Option<i64>, Option<i64>, Option<i64>);

/// `len` flags, set at each of `positions` (from 1).
#[cfg(feature = "postgres")]
fn flags(len: usize, positions: Vec<i64>) -> Vec<bool> {
    let mut flags = vec![false; len];
    for n in positions {
        if let Some(flag) = usize::try_from(n - 1).ok().and_then(|at| flags.get_mut(at)) {
            *flag = true;
        }
    }
    flags
}

/// Records a batch on Postgres with one statement over arrays, its own
/// transaction, whatever its size: the statement is prepared once, and
/// one round trip replaces the four of a transaction around the
/// one-delivery statements.
#[cfg(feature = "postgres")]
impl CommitBatch for Finishes<sqlx::Postgres> {
    // One batch forms and is sent while the other waits for its flush.
    const WRITERS: usize = 2;
    const RETRY_ALONE: bool = true;

    async fn idle(&self) {
        self.connection.release();
    }

    async fn commit(&self, batch: &[Finish]) -> Result<Vec<Self::Outcome>, sqlx::Error> {
        let sql = self
            .in_one_statement
            .as_ref()
            .ok_or_else(|| sqlx::Error::Protocol("no batch statement".to_owned()))?;
        let change_code = |job: &Finish| match job.change {
            None => 0_i64,
            Some(HealthChange::Succeeded) => 1,
            Some(HealthChange::Failed { .. }) => 2,
        };
        if let [job] = batch {
            let query = bind_step!(sqlx::query_as(sql.one.clone()), job);
            let statement = bind_attempt!(query, job)
                .bind(change_code(job))
                .bind(job.change.and_then(failed_at));
            let saved: Option<HealthFields> = self
                .connection
                .run(async |connection| statement.fetch_optional(connection).await)
                .await?;
            return Ok(HealthSoFar::told(batch, vec![saved]));
        }
        let column = |f: fn(&Finish) -> &str| batch.iter().map(f).collect::<Vec<_>>();
        let number = |f: fn(&Finish) -> i64| batch.iter().map(f).collect::<Vec<_>>();
        let optional = |f: fn(&Finish) -> Option<i64>| batch.iter().map(f).collect::<Vec<_>>();
        let statement = sqlx::query_as(sql.many.clone())
            .bind(column(|job| &job.endpoint))
            .bind(column(|job| &job.id))
            .bind(column(|job| &job.token))
            .bind(number(|job| job.state))
            .bind(number(|job| job.due))
            .bind(number(|job| job.waited))
            .bind(number(|job| job.reason))
            .bind(optional(|job| job.finished))
            .bind(number(|job| job.attempt.0))
            .bind(number(|job| job.attempt.1))
            .bind(number(|job| job.attempt.2))
            .bind(number(|job| job.attempt.3))
            .bind(number(|job| job.attempt.4))
            .bind(optional(|job| job.attempt.5))
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
            .bind(batch.iter().map(change_code).collect::<Vec<_>>())
            .bind(optional(|job| job.change.and_then(failed_at)));
        let rows: Vec<NumberedHealth> = self
            .connection
            .run(async |connection| statement.fetch_all(connection).await)
            .await?;
        let mut saved = vec![None; batch.len()];
        for (n, failing_since, disabled, after) in rows {
            if let Some(slot) = usize::try_from(n - 1).ok().and_then(|at| saved.get_mut(at)) {
                *slot = Some((failing_since, disabled, after));
            }
        }
        Ok(HealthSoFar::told(batch, saved))
    }
}
