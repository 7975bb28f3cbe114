//! SQL shared by [`SqliteOutbox`](super::SqliteOutbox) and
//! [`PostgresOutbox`](super::PostgresOutbox): the schema and the
//! statements, which differ only in column types and row locking.
//!
//! Times are milliseconds since the Unix epoch; states and wait reasons are
//! small integers ([`DeliveryState::code`](super::DeliveryState)).

use sqlx::SqlStr;

use crate::store::sql::{Dialect, Schema, statement};

/// The tables a prefix names: deliveries, attempts, endpoints.
pub(crate) fn tables(prefix: &str) -> (String, String, String) {
    (
        format!("{prefix}_deliveries"),
        format!("{prefix}_delivery_attempts"),
        format!("{prefix}_delivery_endpoints"),
    )
}

/// The outbox's tables and indexes (version 2).
pub(crate) fn schema(prefix: &str, dialect: &Dialect) -> Schema {
    let (deliveries, attempts, endpoints) = tables(prefix);
    let Dialect { int, bytes, .. } = dialect;
    let statements = vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {deliveries} (\
             endpoint TEXT NOT NULL, event_id TEXT NOT NULL, body {bytes} NOT NULL, \
             state {int} NOT NULL DEFAULT 0, tries {int} NOT NULL DEFAULT 0, \
             attempts {int} NOT NULL DEFAULT 0, due_at {int} NOT NULL, \
             waited_ms {int} NOT NULL DEFAULT 0, reason {int} NOT NULL DEFAULT 0, \
             lease_token TEXT, lease_until {int}, created_at {int} NOT NULL, \
             finished_at {int}, PRIMARY KEY (endpoint, event_id))"
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS {deliveries}_due ON {deliveries} (endpoint, state, due_at)"
        ),
        // Version 2: purges pick the oldest finished deliveries by it.
        format!("CREATE INDEX IF NOT EXISTS {deliveries}_finished ON {deliveries} (finished_at)"),
        format!(
            "CREATE TABLE IF NOT EXISTS {attempts} (\
             endpoint TEXT NOT NULL, event_id TEXT NOT NULL, number {int} NOT NULL, \
             sent_at {int} NOT NULL, waited_ms {int} NOT NULL, reason {int} NOT NULL, \
             held_ms {int} NOT NULL, status {int}, error TEXT, duration_us {int} NOT NULL, \
             excerpt {bytes} NOT NULL, PRIMARY KEY (endpoint, event_id, number))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {endpoints} (\
             endpoint TEXT PRIMARY KEY, failing_since {int}, disabled {int}, \
             disabled_after_ms {int})"
        ),
    ];
    Schema {
        component: format!("outbox:{prefix}"),
        version: 2,
        statements,
    }
}

/// Version 3 of the outbox: the trace each delivery was sent in (its
/// `traceparent`). A component of its own, so that stores made before it
/// upgrade in place.
pub(crate) fn trace_schema(prefix: &str, dialect: &Dialect) -> Schema {
    let (deliveries, _, _) = tables(prefix);
    Schema {
        component: format!("outbox-trace:{prefix}"),
        version: 1,
        statements: vec![format!(
            "ALTER TABLE {deliveries} {} trace TEXT",
            dialect.add_column
        )],
    }
}

/// A row of [`Statements::take`]: the delivery's
/// [`TakenRow`](super::codes::TakenRow), then the endpoint's failing time.
pub(crate) type TakeRow = (
    String,
    Vec<u8>,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    Option<String>,
    Option<i64>,
);

/// The statements both SQL delivery stores run.
#[derive(Debug, Clone)]
pub struct Statements {
    /// $1 endpoint, $2 id, $3 body, $4 due, $5 now, $6 trace (or NULL).
    pub(crate) enqueue: SqlStr,
    /// $1 endpoint, $2 now, $3 limit, $4 token, $5 lease until: nothing
    /// while the endpoint is disabled; each row carries the endpoint's
    /// `failing_since`.
    pub(crate) take: SqlStr,
    /// $1 endpoint, $2 id, $3 token, $4 state, $5 due, $6 waited, $7 reason,
    /// $8 finished at (NULL while pending): one row, the endpoint's saved
    /// health, if the lease held.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) finish: SqlStr,
    /// $1 endpoint, $2 id, then the attempt's columns $3 to $11.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) record_attempt: SqlStr,
    /// $1 endpoint, $2 id, $3 token, $4 due.
    pub(crate) put_back: SqlStr,
    /// $1 endpoint, $2 id.
    pub(crate) read: SqlStr,
    /// $1 endpoint, $2 id.
    pub(crate) read_attempts: SqlStr,
    /// $1 endpoint, $2 state, $3 limit.
    pub(crate) list: SqlStr,
    /// $1 endpoint, $2 id, $3 now.
    pub(crate) replay: SqlStr,
    /// $1 finished before, $2 batch size: the deleted rows' endpoint and
    /// id.
    pub(crate) purge_deliveries: SqlStr,
    /// $1 endpoint.
    pub(crate) read_health: SqlStr,
    /// $1 endpoint, $2 failed at (NULL for a success): the health after it.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) merge_health: SqlStr,
    /// $1 endpoint, $2 disabled code: unless disabled already.
    pub(crate) disable: SqlStr,
    /// $1 endpoint, $2 disabled code, $3 disabled after, $4 latest failing
    /// since: unless disabled already, and only while failing that long.
    pub(crate) disable_stale: SqlStr,
    /// $1 endpoint.
    pub(crate) enable: SqlStr,
    /// The time now on the database's clock, in ms since the epoch.
    pub(crate) now: SqlStr,
}

impl Statements {
    pub(crate) fn new(prefix: &str, dialect: &Dialect) -> Self {
        let (deliveries, attempts, endpoints) = tables(prefix);
        let lock = dialect.lock_rows;
        let leased = "endpoint = $1 AND event_id = $2 AND lease_token = $3";
        // The endpoint's saved health, as of the statement that reads it.
        let saved_health = format!(
            "(SELECT failing_since FROM {endpoints} WHERE endpoint = $1) AS failing_since, \
             (SELECT disabled FROM {endpoints} WHERE endpoint = $1) AS disabled, \
             (SELECT disabled_after_ms FROM {endpoints} WHERE endpoint = $1) \
             AS disabled_after_ms"
        );
        Self {
            enqueue: statement(format!(
                "INSERT INTO {deliveries} (endpoint, event_id, body, due_at, created_at, trace) \
                 SELECT $1, $2, $3, $4, $5, $6 WHERE {flushed} \
                 ON CONFLICT (endpoint, event_id) DO NOTHING",
                flushed = dialect.flushed
            )),
            // The disable check and the failing time returned read the
            // statement's one view of the endpoint's row: the rows it
            // returns were leased while the endpoint was enabled, which
            // had that failing time.
            take: statement(format!(
                "UPDATE {deliveries} SET lease_token = $4, lease_until = $5 \
                 WHERE endpoint = $1 AND event_id IN (\
                 SELECT event_id FROM {deliveries} WHERE endpoint = $1 AND state = 0 \
                 AND due_at <= $2 AND (lease_until IS NULL OR lease_until <= $2) \
                 ORDER BY due_at LIMIT $3{lock}) \
                 AND NOT EXISTS (SELECT 1 FROM {endpoints} \
                 WHERE endpoint = $1 AND disabled IS NOT NULL) AND {flushed} \
                 RETURNING event_id, body, tries, attempts, due_at, waited_ms, reason, created_at, \
                 trace, (SELECT failing_since FROM {endpoints} WHERE endpoint = $1) AS failing_since",
                flushed = dialect.flushed,
            )),
            finish: statement(format!(
                "UPDATE {deliveries} SET tries = tries + 1, attempts = attempts + 1, state = $4, \
                 due_at = $5, waited_ms = $6, reason = $7, finished_at = $8, \
                 lease_token = NULL, lease_until = NULL WHERE {leased} \
                 RETURNING {saved_health}"
            )),
            record_attempt: statement(format!(
                "INSERT INTO {attempts} (endpoint, event_id, number, sent_at, waited_ms, reason, \
                 held_ms, status, error, duration_us, excerpt) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 ON CONFLICT (endpoint, event_id, number) DO NOTHING"
            )),
            put_back: statement(format!(
                "UPDATE {deliveries} SET due_at = $4, lease_token = NULL, lease_until = NULL \
                 WHERE {leased}"
            )),
            read: statement(format!(
                "SELECT body, state, due_at FROM {deliveries} WHERE endpoint = $1 AND event_id = $2"
            )),
            read_attempts: statement(format!(
                "SELECT number, sent_at, waited_ms, reason, held_ms, status, error, duration_us, \
                 excerpt FROM {attempts} WHERE endpoint = $1 AND event_id = $2 ORDER BY number"
            )),
            list: statement(format!(
                "SELECT event_id FROM {deliveries} WHERE endpoint = $1 AND state = $2 \
                 ORDER BY created_at, event_id LIMIT $3"
            )),
            replay: statement(format!(
                "UPDATE {deliveries} SET state = 0, tries = 0, due_at = $3, waited_ms = 0, \
                 reason = 0, finished_at = NULL, lease_token = NULL, lease_until = NULL \
                 WHERE endpoint = $1 AND event_id = $2 AND state IN (2, 3)"
            )),
            // One bounded batch (deleted with its attempts in one short
            // transaction, so a large purge holds no long locks), oldest
            // first by the `finished_at` index, rows picked by physical id;
            // on Postgres rows another client holds are skipped.
            purge_deliveries: statement(format!(
                "DELETE FROM {deliveries} WHERE {} RETURNING endpoint, event_id",
                dialect.picked(&format!(
                    "SELECT {row_id} FROM {deliveries} \
                     WHERE state IN (1, 2) AND finished_at < $1 \
                     ORDER BY finished_at LIMIT $2{lock}",
                    row_id = dialect.row_id,
                ))
            )),
            read_health: statement(format!(
                "SELECT failing_since, disabled, disabled_after_ms FROM {endpoints} \
                 WHERE endpoint = $1"
            )),
            // A success clears failing_since; a failure keeps the earlier
            // time. The disable columns are left as they are.
            merge_health: statement(format!(
                "INSERT INTO {endpoints} (endpoint, failing_since) VALUES ($1, $2) \
                 ON CONFLICT (endpoint) DO UPDATE SET failing_since = CASE \
                 WHEN excluded.failing_since IS NULL OR {endpoints}.failing_since IS NULL \
                 OR excluded.failing_since < {endpoints}.failing_since \
                 THEN excluded.failing_since ELSE {endpoints}.failing_since END \
                 RETURNING failing_since, disabled, disabled_after_ms"
            )),
            disable: statement(format!(
                "INSERT INTO {endpoints} (endpoint, disabled) VALUES ($1, $2) \
                 ON CONFLICT (endpoint) DO UPDATE SET disabled = excluded.disabled, \
                 disabled_after_ms = NULL WHERE {endpoints}.disabled IS NULL"
            )),
            disable_stale: statement(format!(
                "UPDATE {endpoints} SET disabled = $2, disabled_after_ms = $3 \
                 WHERE endpoint = $1 AND disabled IS NULL AND failing_since <= $4"
            )),
            enable: statement(format!(
                "UPDATE {endpoints} SET failing_since = NULL, disabled = NULL, \
                 disabled_after_ms = NULL WHERE endpoint = $1"
            )),
            now: statement(format!("SELECT {}", dialect.now)),
        }
    }
}

/// Deletes the attempts of `count` deliveries, given as (endpoint, id) pairs.
pub(crate) fn purge_attempts(prefix: &str, count: usize) -> sqlx::AssertSqlSafe<String> {
    let pairs: Vec<_> = (1..=count)
        .map(|i| format!("(${}, ${})", 2 * i - 1, 2 * i))
        .collect();
    sqlx::AssertSqlSafe(format!(
        "DELETE FROM {} WHERE (endpoint, event_id) IN (VALUES {})",
        tables(prefix).1,
        pairs.join(", ")
    ))
}
