//! [`SqliteStore`]: claims and inbox in an embedded SQLite file.

use std::path::Path;
use std::str::FromStr as _;

use sqlx::SqlStr;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePool};

use super::sql::{
    Statements, ready_condition, schema, sql_store_common, statement, take_assignments,
};
use super::{Acceptance, DedupError, IncomingEvent, StoreOptions, check_key, check_prefix};
use crate::store::sql::{SQLITE, migrate_sqlite, sqlite_pool};

/// Claims and inbox in one SQLite file: the default store, for a single
/// receiver process (or several on one host sharing the file).
///
/// [`accept`](super::Inbox::accept) is one transaction that inserts the claim
/// (`ON CONFLICT DO NOTHING`) and, only if that inserted a row
/// (`changes() = 1`), the inbox row. The file uses WAL with `synchronous=FULL`, so an accepted event has
/// reached the disk before `accept` returns.
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
    claims: String,
    inbox: String,
    statements: Statements,
    accept: SqlStr,
    take: SqlStr,
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

    /// A store on `pool` whose tables are `{prefix}_claims` and
    /// `{prefix}_inbox`. The prefix is 1 to 48 of `a-z 0-9 _`, starting with
    /// a letter. Call [`migrate`](Self::migrate) before use.
    pub fn new(pool: SqlitePool, prefix: &str) -> Result<Self, DedupError> {
        check_prefix(prefix)?;
        let claims = format!("{prefix}_claims");
        let inbox = format!("{prefix}_inbox");
        let take = statement(format!(
            "UPDATE {inbox} SET {} WHERE entry IN \
             (SELECT entry FROM {inbox} WHERE {} ORDER BY entry LIMIT $2{}) \
             RETURNING entry, event_id, body, signed_at, attempts, dead",
            take_assignments("$3", "$4", &format!("{} + $5", SQLITE.now)),
            ready_condition("$1", SQLITE.now),
            SQLITE.lock_rows,
        ));
        let statements = Statements::new(&claims, &inbox, SQLITE.now);
        let accept = statement(format!(
            "{}; INSERT INTO {inbox} (namespace, event_id, body, signed_at, received_at, available_at) \
             SELECT $1, $2, $4, $5, {now}, {now} WHERE changes() = 1",
            statements.claim_done.as_str(),
            now = SQLITE.now
        ));
        Ok(Self {
            statements,
            accept,
            pool,
            options: StoreOptions::default(),
            claims,
            inbox,
            take,
        })
    }

    /// Creates or upgrades the tables and indexes, in one immediate
    /// transaction: a second process running it at once waits for the
    /// first, then finds the schema current.
    pub async fn migrate(&self) -> Result<(), DedupError> {
        Ok(migrate_sqlite(&self.pool, &schema(&self.claims, &self.inbox, &SQLITE)).await?)
    }
}

sql_store_common!(SqliteStore, SqliteConnection, sqlx::sqlite::SqliteRow);

impl SqliteStore {
    /// The atomic claim-and-enqueue step of [`Inbox::accept`](super::Inbox::accept).
    async fn accept_event(&self, event: &IncomingEvent<'_>) -> Result<Acceptance, DedupError> {
        check_key(event.namespace, event.id)?;
        let mut tx = self.pool.begin().await?;
        // Both inserts in one call: the second runs only if the first
        // inserted a row (`changes()`), saving a round trip to the worker.
        let inserted = sqlx::query(self.accept.clone())
            .bind(event.namespace)
            .bind(event.id)
            .bind(self.retention_ms())
            .bind(event.body)
            .bind(event.signed_at)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if inserted == 0 {
            tx.rollback().await?;
            return Ok(Acceptance::Duplicate);
        }
        tx.commit().await?;
        Ok(Acceptance::Accepted)
    }
}
