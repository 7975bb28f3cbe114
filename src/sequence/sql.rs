//! [`SqlSequences`]: positions in a SQL table, written once for both
//! databases.

use sqlx::Pool;

use super::{SequenceError, SequenceStore, check};
use crate::store::sql::{SqlDatabase, sql, statement, valid_prefix};

/// Positions in the table `{prefix}_sequences (resource TEXT PRIMARY KEY,
/// position INTEGER NOT NULL)` (`BIGINT` on Postgres), on SQLite
/// ([`SqliteSequences`](super::SqliteSequences)) or Postgres
/// ([`PostgresSequences`](super::PostgresSequences)).
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
#[derive(Debug)]
pub struct SqlSequences<DB: SqlDatabase> {
    pool: Pool<DB>,
    statements: Statements,
}

impl<DB: SqlDatabase> Clone for SqlSequences<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            statements: self.statements.clone(),
        }
    }
}

/// The table a position store keeps and the statements it runs on it.
#[derive(Debug, Clone)]
struct Statements {
    /// `{prefix}_sequences`.
    table: String,
    /// $1 resource. The position, if any.
    position: sqlx::SqlStr,
    /// $1 resource, $2 sequence. Moves the position forward only.
    advance: sqlx::SqlStr,
}

impl Statements {
    fn new(prefix: &str) -> Result<Self, SequenceError> {
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
            table,
        })
    }
}

impl<DB: SqlDatabase> SqlSequences<DB> {
    /// Positions in `{prefix}_sequences` on `pool`. Call
    /// [`migrate`](Self::migrate) before use.
    ///
    /// The pool is used as you built it. On SQLite it must set
    /// `synchronous=FULL` (`migrate` refuses less), should use WAL and a
    /// busy timeout, and gets none of the retries `open` makes while
    /// another process switches a new file to WAL.
    pub fn new(pool: Pool<DB>, prefix: &str) -> Result<Self, SequenceError> {
        Ok(Self {
            pool,
            statements: Statements::new(prefix)?,
        })
    }

    /// Creates or upgrades the table; safe from several processes at once.
    pub async fn migrate(&self) -> Result<(), SequenceError> {
        let schema = super::schema(&self.statements.table, &DB::DIALECT);
        Ok(DB::migrate(&self.pool, &schema).await?)
    }

    /// [`advance`](SequenceStore::advance) inside the caller's transaction.
    pub async fn advance_in(
        &self,
        connection: &mut DB::Connection,
        resource: &str,
        sequence: u64,
    ) -> Result<bool, SequenceError> {
        check(resource, sequence)?;
        let moved = sql::<DB>(&self.statements.advance)
            .bind(resource)
            .bind(sequence.cast_signed())
            .execute(connection)
            .await?;
        Ok(moved == 1)
    }
}

impl<DB: SqlDatabase> SequenceStore for SqlSequences<DB> {
    async fn position(&self, resource: &str) -> Result<Option<u64>, SequenceError> {
        let position: Option<i64> = sql::<DB>(&self.statements.position)
            .bind(resource)
            .fetch_optional_scalar(&self.pool)
            .await?;
        Ok(position.map(i64::cast_unsigned))
    }

    async fn advance(&self, resource: &str, sequence: u64) -> Result<bool, SequenceError> {
        let mut connection = self.pool.acquire().await?;
        self.advance_in(&mut connection, resource, sequence).await
    }
}
