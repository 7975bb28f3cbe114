//! [`PostgresOutbox`]: deliveries in Postgres.

use sqlx::Postgres;

use super::sql_store::SqlOutbox;
use crate::sender::OutboxError;

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
pub type PostgresOutbox = SqlOutbox<Postgres>;

impl SqlOutbox<Postgres> {
    /// Connects to `url` (such as `postgres://user@127.0.0.1:5432/db`) with
    /// a pool of up to 16 connections, and runs [`migrate`](Self::migrate)
    /// for the prefix `hooklatch`.
    pub async fn connect(url: &str) -> Result<Self, OutboxError> {
        Self::migrated(crate::store::sql::postgres_pool(url).await?).await
    }
}
