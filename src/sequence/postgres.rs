//! [`PostgresSequences`]: positions in a Postgres table.

use sqlx::postgres::{PgConnection, PgPool};

use super::SequenceError;

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
    statements: super::sql::Statements,
}

super::sql::sql_sequences!(
    PostgresSequences,
    PgPool,
    PgConnection,
    crate::store::sql::POSTGRES,
    crate::store::sql::migrate_postgres
);

impl PostgresSequences {
    /// Connects to `url` (`postgres://user:password@host/database`), with
    /// the table `hooklatch_sequences`, and runs [`migrate`](Self::migrate).
    pub async fn connect(url: &str) -> Result<Self, SequenceError> {
        let pool = crate::store::sql::postgres_pool(url).await?;
        let sequences = Self::new(pool, "hooklatch")?;
        sequences.migrate().await?;
        Ok(sequences)
    }
}
