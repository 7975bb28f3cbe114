//! [`SqliteOutbox`]: deliveries in a SQLite file.

use std::path::Path;

use sqlx::Sqlite;
use sqlx::sqlite::SqliteConnectOptions;

use super::sql_store::SqlOutbox;
use crate::sender::OutboxError;

/// Deliveries and their attempts in a SQLite file, for a sender in one
/// process: a restarted dispatcher picks up every pending delivery.
///
/// # Schema
///
/// [`migrate`](Self::migrate) creates `{prefix}_deliveries` (one row per
/// endpoint and webhook id: body, state, the next due time and the
/// lease), `{prefix}_delivery_attempts` (one row per attempt: time, wait,
/// status or error, duration and excerpt), `{prefix}_delivery_endpoints`
/// (each endpoint's saved health: failing since, disabled and why) and
/// `{prefix}_send_keys` (idempotency keys: the id each names, and when it
/// expires).
///
/// ```
/// use hooklatch::sender::SqliteOutbox;
/// use hooklatch::sender::outbox::DeliveryStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), hooklatch::sender::OutboxError> {
/// # let dir = std::env::temp_dir().join(format!("hooklatch-doc-deliveries-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// let store = SqliteOutbox::open(dir.join("outbox.db")).await?;
/// assert!(store.enqueue("orders", "msg_1", b"{}", std::time::SystemTime::now()).await?);
/// assert!(!store.enqueue("orders", "msg_1", b"{}", std::time::SystemTime::now()).await?);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(())
/// # }
/// ```
pub type SqliteOutbox = SqlOutbox<Sqlite>;

impl SqlOutbox<Sqlite> {
    /// Opens (creating if needed) the database file at `path`, in WAL mode
    /// with `synchronous=FULL`, and runs [`migrate`](Self::migrate).
    ///
    /// The pool has one connection. SQLite has one writer and nearly every
    /// outbox step writes, so the steps take turns in the process rather
    /// than in SQLite's busy handler, which sleeps between tries (1 ms at
    /// first, up to 100 ms): with several connections, the dispatcher's
    /// concurrent attempts spent more time asleep there than writing.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, OutboxError> {
        Self::open_with(SqliteConnectOptions::new().filename(path)).await
    }

    /// Opens the database at a `sqlite:` URL, such as `sqlite:outbox.db`,
    /// as [`open`](Self::open) does.
    pub async fn connect(url: &str) -> Result<Self, OutboxError> {
        Self::open_with(<SqliteConnectOptions as std::str::FromStr>::from_str(url)?).await
    }

    async fn open_with(options: SqliteConnectOptions) -> Result<Self, OutboxError> {
        Self::migrated(crate::store::sql::sqlite_pool(options, 1).await?).await
    }
}
