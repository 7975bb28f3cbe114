//! [`SqliteSequences`]: positions in a SQLite table.

use sqlx::SqlStr;
use sqlx::sqlite::{SqliteConnection, SqlitePool};

use super::{SequenceError, SequenceStore};
use crate::store::sql::{SQLITE, migrate_sqlite, statement, valid_prefix};

/// Positions in the SQLite table `{prefix}_sequences (resource TEXT
/// PRIMARY KEY, position INTEGER NOT NULL)`.
///
/// [`advance_in`](Self::advance_in) moves a position inside the caller's
/// transaction, so the effect of applying an event and the advance commit
/// together.
#[derive(Debug, Clone)]
pub struct SqliteSequences {
    pool: SqlitePool,
    table: String,
    position: SqlStr,
    advance: SqlStr,
}

impl SqliteSequences {
    /// Positions in `{prefix}_sequences` on `pool`. Call
    /// [`migrate`](Self::migrate) before use.
    pub fn new(pool: SqlitePool, prefix: &str) -> Result<Self, SequenceError> {
        if !valid_prefix(prefix) {
            return Err(SequenceError::InvalidTableName(prefix.to_owned()));
        }
        let table = format!("{prefix}_sequences");
        Ok(Self {
            position: statement(format!("SELECT position FROM {table} WHERE resource = $1")),
            advance: statement(format!(
                "INSERT INTO {table} (resource, position) VALUES ($1, $2) \
                 ON CONFLICT (resource) DO UPDATE SET position = excluded.position \
                 WHERE {table}.position < excluded.position"
            )),
            pool,
            table,
        })
    }

    /// Creates or upgrades the table, in one immediate transaction.
    pub async fn migrate(&self) -> Result<(), SequenceError> {
        Ok(migrate_sqlite(&self.pool, &super::schema(&self.table, &SQLITE)).await?)
    }

    /// [`advance`](SequenceStore::advance) inside the caller's transaction.
    pub async fn advance_in(
        &self,
        connection: &mut SqliteConnection,
        resource: &str,
        sequence: u64,
    ) -> Result<bool, SequenceError> {
        super::check(resource, sequence)?;
        let moved = sqlx::query(self.advance.clone())
            .bind(resource)
            .bind(sequence.cast_signed())
            .execute(connection)
            .await?
            .rows_affected();
        Ok(moved == 1)
    }
}

impl SequenceStore for SqliteSequences {
    async fn position(&self, resource: &str) -> Result<Option<u64>, SequenceError> {
        let position: Option<i64> = sqlx::query_scalar(self.position.clone())
            .bind(resource)
            .fetch_optional(&self.pool)
            .await?;
        Ok(position.map(i64::cast_unsigned))
    }

    async fn advance(&self, resource: &str, sequence: u64) -> Result<bool, SequenceError> {
        let mut connection = self.pool.acquire().await?;
        self.advance_in(&mut connection, resource, sequence).await
    }
}
