//! [`SqliteStore`]: claims and inbox in an embedded SQLite file.

use std::path::Path;
use std::str::FromStr as _;

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePool};

use super::group_commit::{Batch, Job};
use super::sql::{
    AcceptParts, BuildAccept, Statements, TAKE_ORDER, ready_condition, sql_store_common,
    take_assignments,
};
use super::{Acceptance, DedupError, StoreOptions};
use crate::store::group_commit::{CommitBatch, GroupCommit};
use crate::store::sql::{SQLITE, migrate_sqlite, sqlite_pool};

/// Claims and inbox in one SQLite file: the default store, for a single
/// receiver process (or several on one host sharing the file).
///
/// [`accept`](super::Inbox::accept) inserts the claim (`ON CONFLICT DO
/// NOTHING`) and, only if that inserted a row (`changes() = 1`), the inbox
/// row, in one transaction. The file uses WAL with `synchronous=FULL`, so an
/// accepted event has reached the disk before `accept` returns.
///
/// Accepts that arrive together share a transaction (group commit): while
/// one commit is on its way to the disk, the next accepts queue, and one
/// writer commits them all at once, up to 256, in the order they came. Each
/// caller is answered only after that commit; if anything in a batch fails,
/// none of its claims is kept and every caller in it gets the error. A
/// caller alone waits for nobody.
///
/// # Schema
///
/// [`migrate`](Self::migrate) creates, for the prefix `hooklatch` (the
/// default):
///
/// ```sql
/// CREATE TABLE hooklatch_claims (
///     namespace TEXT NOT NULL, event_id TEXT NOT NULL,
///     claimed_at INTEGER NOT NULL,            -- ms since the epoch
///     lease_token TEXT, lease_until INTEGER,  -- lease_token NULL once done
///     PRIMARY KEY (namespace, event_id)
/// );
/// CREATE TABLE hooklatch_inbox (
///     entry INTEGER PRIMARY KEY AUTOINCREMENT,
///     namespace TEXT NOT NULL, event_id TEXT NOT NULL, body BLOB NOT NULL,
///     signed_at INTEGER, received_at INTEGER NOT NULL,
///     attempts INTEGER NOT NULL DEFAULT 0, available_at INTEGER NOT NULL,
///     taken_token TEXT, taken_until INTEGER, dead INTEGER NOT NULL DEFAULT 0
/// );
/// ```
///
/// ```
/// use hooklatch::dedup::{Acceptance, Inbox, IncomingEvent, SqliteStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), hooklatch::dedup::DedupError> {
/// # let dir = std::env::temp_dir().join(format!("hooklatch-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// let store = SqliteStore::open(dir.join("webhooks.db")).await?;
/// let event = IncomingEvent::new("github", "72d3162e", b"{}");
/// assert_eq!(store.accept(&event).await?, Acceptance::Accepted);
/// assert_eq!(store.accept(&event).await?, Acceptance::Duplicate);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    options: StoreOptions,
    statements: Statements,
    group: GroupCommit<Batch<sqlx::Sqlite>>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file at `path` and runs
    /// [`migrate`](Self::migrate).
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, DedupError> {
        let options = SqliteConnectOptions::new().filename(path);
        Self::open_with(options).await
    }

    /// Opens the database at a `sqlite:` URL, such as `sqlite:webhooks.db`.
    pub async fn connect(url: &str) -> Result<Self, DedupError> {
        Self::open_with(SqliteConnectOptions::from_str(url)?).await
    }

    async fn open_with(options: SqliteConnectOptions) -> Result<Self, DedupError> {
        Self::migrated(sqlite_pool(options, 4).await?).await
    }
}

sql_store_common!(
    SqliteStore,
    SqliteConnection,
    sqlx::sqlite::SqliteRow,
    SQLITE,
    migrate_sqlite
);

/// The accept statement; a batch runs it once per event.
const ACCEPT: (BuildAccept, Option<BuildAccept>) = (accept_statement, None);

/// Claims as done and, only if that inserted a row (`changes()`), enqueues:
/// both in one call, saving a round trip to the worker.
fn accept_statement(
    &AcceptParts {
        claim_done, inbox, ..
    }: &AcceptParts<'_>,
) -> String {
    format!(
        "{claim_done}; INSERT INTO {inbox} (namespace, event_id, body, signed_at, received_at, available_at, meta) \
         SELECT $1, $2, $4, $5, {now}, {now}, $6 WHERE changes() = 1",
        now = SQLITE.now
    )
}

/// Takes the ready rows, earliest first.
fn take_statement(inbox: &str) -> String {
    format!(
        "UPDATE {inbox} SET {} WHERE entry IN \
         (SELECT entry FROM {inbox} WHERE {} {} LIMIT $2{}) \
         RETURNING entry, event_id, body, signed_at, attempts, dead, meta",
        take_assignments("$3", "$4", &format!("{} + $5", SQLITE.now)),
        ready_condition("$1", SQLITE.now),
        TAKE_ORDER,
        SQLITE.lock_rows,
    )
}

/// Acks many taken rows in one statement: $1 is a JSON array of
/// `[entry, token]` pairs (one parameter, whatever the count).
fn ack_many_statement(inbox: &str) -> String {
    format!(
        "DELETE FROM {inbox} WHERE entry IN (SELECT i.entry FROM json_each($1) AS a \
         JOIN {inbox} AS i ON i.entry = (a.value ->> 0) AND i.taken_token = (a.value ->> 1) \
         WHERE NOT i.dead) RETURNING entry"
    )
}

/// Runs `ack_many` on `taken` (entries and tokens); the entries acked.
async fn ack_many_rows(store: &SqliteStore, taken: &[(i64, &str)]) -> Result<Vec<i64>, DedupError> {
    let pairs = serde_json::to_string(taken).map_err(|error| {
        crate::store::StoreError::message("sql", &format!("cannot encode the acks: {error}"))
    })?;
    Ok(sqlx::query_scalar(store.statements.ack_many.clone())
        .bind(pairs)
        .fetch_all(&store.pool)
        .await?)
}

/// Commits a batch of accepts: the store's accept statement once per event,
/// in order, all in one transaction.
impl CommitBatch for Batch<sqlx::Sqlite> {
    // The file has one writer at a time.
    type Job = Job;
    type Outcome = Acceptance;
    const WRITERS: usize = 1;

    async fn commit(&self, batch: &[Job]) -> Result<Vec<Acceptance>, sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        let mut outcomes = Vec::with_capacity(batch.len());
        for job in batch {
            let inserted = sqlx::query(self.accept.clone())
                .bind(&job.namespace)
                .bind(&job.id)
                .bind(self.retention_ms)
                .bind(&job.body)
                .bind(job.signed_at)
                .bind(&job.meta)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            outcomes.push(if inserted == 0 {
                Acceptance::Duplicate
            } else {
                Acceptance::Accepted
            });
        }
        tx.commit().await?;
        Ok(outcomes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dedup::{Inbox as _, IncomingEvent};

    /// The take reads the `_due` index in its own order, whatever the
    /// backlog: no scan of the namespace, no sort of what is ready. (Its
    /// latency at 1k, 100k and 1M waiting events is in `benches/take.rs`.)
    #[tokio::test]
    async fn a_take_reads_the_due_index_in_order_and_never_sorts_the_backlog() {
        let dir =
            std::env::temp_dir().join(format!("hooklatch-plan-{}", crate::store::new_token()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = SqliteStore::open(dir.join("inbox.db")).await.unwrap();
        let _ = store
            .accept(&IncomingEvent::new("ns", "first", b"{}"))
            .await
            .unwrap();
        sqlx::query(
            "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 100000) \
             INSERT INTO hooklatch_inbox (namespace, event_id, body, received_at, available_at) \
             SELECT 'ns', 'e' || x, x'00', x, x FROM n",
        )
        .execute(store.pool())
        .await
        .unwrap();
        sqlx::query("ANALYZE").execute(store.pool()).await.unwrap();
        let explain = format!("EXPLAIN QUERY PLAN {}", take_statement("hooklatch_inbox"));
        let plan: Vec<(i64, i64, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(explain))
            .bind("ns")
            .bind(256_i64)
            .bind(10_i64)
            .bind("token")
            .bind(30_000_i64)
            .fetch_all(store.pool())
            .await
            .unwrap();
        let plan: Vec<String> = plan.into_iter().map(|(.., detail)| detail).collect();
        let plan = plan.join("\n");
        assert!(plan.contains("hooklatch_inbox_due"), "{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "the take sorts: {plan}");
        assert_eq!(store.take("ns", "w", 1).await.unwrap()[0].id, "e1");
        std::fs::remove_dir_all(&dir).ok();
    }
}
