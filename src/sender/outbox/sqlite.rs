//! [`SqliteOutbox`]: deliveries in a SQLite file.

use std::path::Path;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};

use super::batch::Writes;
use super::keep::sql::{KeepStatements, sql_keeping};
use super::registry::sql::{RegistryStatements, sql_endpoint_registry};
use super::sql::{Statements, schema};
use super::sql_store::sql_delivery_store;
use super::view::sql::{ViewStatements, sql_outbox_view};
use crate::dedup::check_prefix;
use crate::sender::OutboxError;
use crate::store::sql::SQLITE;

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
#[derive(Debug, Clone)]
pub struct SqliteOutbox {
    pool: SqlitePool,
    prefix: String,
    statements: Statements,
    registry: RegistryStatements,
    view: ViewStatements,
    keep: KeepStatements,
    writes: Writes<sqlx::Sqlite>,
}

impl SqliteOutbox {
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
        let pool = crate::store::sql::sqlite_pool(options, 1).await?;
        let store = Self::new(pool, "hooklatch")?;
        store.migrate().await?;
        Ok(store)
    }

    /// A store on `pool` whose tables start with `prefix` (1 to 48 of
    /// `a-z 0-9 _`, starting with a letter). Call
    /// [`migrate`](Self::migrate) before use.
    ///
    /// The pool is used as you built it: it must set `synchronous=FULL`
    /// (`migrate` refuses less), should use WAL and a busy timeout, and
    /// gets none of the retries `open` makes while another process
    /// switches a new file to WAL.
    pub fn new(pool: SqlitePool, prefix: &str) -> Result<Self, OutboxError> {
        check_prefix(prefix)?;
        let statements = Statements::new(prefix, &SQLITE);
        Ok(Self {
            writes: Writes::new(&pool, &statements, prefix, false),
            statements,
            registry: RegistryStatements::new(prefix),
            view: ViewStatements::new(prefix),
            keep: KeepStatements::new(prefix, &SQLITE),
            prefix: prefix.to_owned(),
            pool,
        })
    }

    /// Creates or upgrades the tables and index, in one immediate
    /// transaction.
    pub async fn migrate(&self) -> Result<(), OutboxError> {
        for schema in [
            schema(&self.prefix, &SQLITE),
            super::registry::sql::schema(&self.prefix, &SQLITE),
            super::view::sql::schema(&self.prefix),
            super::keep::sql::schema(&self.prefix, &SQLITE),
        ] {
            crate::store::sql::migrate_sqlite(&self.pool, &schema).await?;
        }
        Ok(())
    }

    /// The connection pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

sql_delivery_store!(SqliteOutbox, SQLITE);
sql_endpoint_registry!(SqliteOutbox);
sql_outbox_view!(SqliteOutbox);
sql_keeping!(SqliteOutbox);
