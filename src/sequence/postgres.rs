//! [`PostgresSequences`]: positions in a Postgres table.

use sqlx::SqlStr;
use sqlx::postgres::{PgConnection, PgPool};

use super::{SequenceError, SequenceStore};
use crate::store::sql::{POSTGRES, migrate_postgres, statement, valid_prefix};

/// Positions in the Postgres table `{prefix}_sequences (resource TEXT
/// PRIMARY KEY, position BIGINT NOT NULL)`.
///
/// [`advance_in`](Self::advance_in) moves a position inside the caller's
/// transaction, so the effect of applying an event and the advance commit
/// together; a worker that lost the race rolls its effect back.
///
/// ```no_run
/// use hooklatch::sequence::PostgresSequences;
///
/// # async fn apply(sequences: PostgresSequences, pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let mut tx = pool.begin().await?;
/// sqlx::query("UPDATE orders SET status = 'shipped' WHERE id = 'order_1'")
///     .execute(&mut *tx)
///     .await?;
/// if sequences.advance_in(&mut tx, "order_1", 7).await? {
///     tx.commit().await?; // the effect and the position, together
/// } // else another worker applied event 7 first: dropping `tx` rolls back
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct PostgresSequences {
    pool: PgPool,
    table: String,
    position: SqlStr,
    advance: SqlStr,
}

impl PostgresSequences {
    /// Positions in `{prefix}_sequences` on `pool`. Call
    /// [`migrate`](Self::migrate) before use.
    pub fn new(pool: PgPool, prefix: &str) -> Result<Self, SequenceError> {
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

    /// Creates the table if it does not exist; safe from several processes
    /// at once.
    pub async fn migrate(&self) -> Result<(), SequenceError> {
        Ok(migrate_postgres(&self.pool, &super::schema(&self.table, &POSTGRES)).await?)
    }

    /// [`advance`](SequenceStore::advance) inside the caller's transaction.
    pub async fn advance_in(
        &self,
        connection: &mut PgConnection,
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

impl SequenceStore for PostgresSequences {
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
