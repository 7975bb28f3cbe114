//! [`PostgresOutbox`]: deliveries in Postgres.

use sqlx::postgres::PgPool;

use super::batch::Writes;
use super::keep::sql::{KeepStatements, sql_keeping};
use super::registry::sql::{RegistryStatements, sql_endpoint_registry};
use super::sql::{Statements, schema};
use super::sql_store::sql_delivery_store;
use super::view::sql::{ViewStatements, sql_outbox_view};
use crate::dedup::check_prefix;
use crate::sender::OutboxError;
use crate::store::sql::POSTGRES;

/// Deliveries and their attempts in Postgres, shared by any number of
/// dispatchers: each leases different due rows (`FOR UPDATE SKIP LOCKED`),
/// and a delivery whose dispatcher stopped mid-attempt is taken again when
/// its lease ends.
///
/// The tables are those of [`SqliteOutbox`](super::SqliteOutbox),
/// with `BIGINT` and `BYTEA` columns.
///
/// ```no_run
/// use hooklatch::sender::PostgresOutbox;
///
/// # async fn run() -> Result<(), hooklatch::sender::OutboxError> {
/// let store = PostgresOutbox::connect("postgres://localhost/app").await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PostgresOutbox {
    pool: PgPool,
    prefix: String,
    statements: Statements,
    registry: RegistryStatements,
    view: ViewStatements,
    keep: KeepStatements,
    writes: Writes<sqlx::Postgres>,
}

impl PostgresOutbox {
    /// Connects to `url` (such as `postgres://user@127.0.0.1:5432/db`) with
    /// a pool of up to 16 connections, and runs [`migrate`](Self::migrate)
    /// for the prefix `hooklatch`.
    pub async fn connect(url: &str) -> Result<Self, OutboxError> {
        let pool = crate::store::sql::postgres_pool(url).await?;
        let store = Self::new(pool, "hooklatch")?;
        store.migrate().await?;
        Ok(store)
    }

    /// A store on `pool` whose tables start with `prefix` (1 to 48 of
    /// `a-z 0-9 _`, starting with a letter). Call
    /// [`migrate`](Self::migrate) before use.
    pub fn new(pool: PgPool, prefix: &str) -> Result<Self, OutboxError> {
        check_prefix(prefix)?;
        let statements = Statements::new(prefix, &POSTGRES);
        Ok(Self {
            writes: Writes::new(&pool, &statements, prefix, true),
            statements,
            registry: RegistryStatements::new(prefix),
            view: ViewStatements::new(prefix),
            keep: KeepStatements::new(prefix, &POSTGRES),
            prefix: prefix.to_owned(),
            pool,
        })
    }

    /// Creates or upgrades the tables and index. Concurrent callers take
    /// turns on an advisory lock; when the recorded version is current it
    /// only reads, so it is safe to run on every start.
    pub async fn migrate(&self) -> Result<(), OutboxError> {
        for schema in [
            schema(&self.prefix, &POSTGRES),
            super::registry::sql::schema(&self.prefix, &POSTGRES),
            super::view::sql::schema(&self.prefix),
            super::keep::sql::schema(&self.prefix, &POSTGRES),
        ] {
            crate::store::sql::migrate_postgres(&self.pool, &schema).await?;
        }
        Ok(())
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

sql_delivery_store!(PostgresOutbox, POSTGRES);
sql_endpoint_registry!(PostgresOutbox);
sql_outbox_view!(PostgresOutbox);
sql_keeping!(PostgresOutbox);
