//! [`SqliteStore`]: claims and inbox in an embedded SQLite file.

use std::path::Path;
use std::str::FromStr as _;

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePool};

use super::group_commit::{Batch, Job};
use super::sql::{
    AcceptParts, BuildAccept, Statements, ready_condition, sql_store_common, take_assignments,
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
         (SELECT entry FROM {inbox} WHERE {} ORDER BY entry LIMIT $2{}) \
         RETURNING entry, event_id, body, signed_at, attempts, dead, meta",
        take_assignments("$3", "$4", &format!("{} + $5", SQLITE.now)),
        ready_condition("$1", SQLITE.now),
        SQLITE.lock_rows,
    )
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
