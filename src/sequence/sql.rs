//! The SQL position stores, written once: [`SqliteSequences`](super::SqliteSequences)
//! and [`PostgresSequences`](super::PostgresSequences) differ only in their
//! pool, connection and dialect.

/// The table a position store keeps and the statements it runs on it.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    /// `{prefix}_sequences`.
    pub(crate) table: String,
    /// $1 resource. The position, if any.
    pub(crate) position: sqlx::SqlStr,
    /// $1 resource, $2 sequence. Moves the position forward only.
    pub(crate) advance: sqlx::SqlStr,
}

impl Statements {
    /// The statements on `{prefix}_sequences`.
    pub(crate) fn new(prefix: &str) -> Result<Self, crate::sequence::SequenceError> {
        use crate::store::sql::{statement, valid_prefix};
        if !valid_prefix(prefix) {
            return Err(crate::sequence::SequenceError::InvalidTableName(
                prefix.to_owned(),
            ));
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

/// The methods and the [`SequenceStore`](super::SequenceStore) impl of one
/// SQL position store. `$store` has the fields `pool` and `statements`.
macro_rules! sql_sequences {
    ($store:ident, $pool:ty, $connection:ty, $dialect:expr, $migrate:path) => {
        impl $store {
            /// Positions in `{prefix}_sequences` on `pool`. Call
            /// [`migrate`](Self::migrate) before use.
            ///
            /// The pool is used as you built it. On SQLite it must set
            /// `synchronous=FULL` (`migrate` refuses less), should use WAL
            /// and a busy timeout, and gets none of the retries `open`
            /// makes while another process switches a new file to WAL.
            pub fn new(pool: $pool, prefix: &str) -> Result<Self, $crate::sequence::SequenceError> {
                Ok(Self {
                    pool,
                    statements: super::sql::Statements::new(prefix)?,
                })
            }

            /// Creates or upgrades the table; safe from several processes at
            /// once.
            pub async fn migrate(&self) -> Result<(), $crate::sequence::SequenceError> {
                let schema = super::schema(&self.statements.table, &$dialect);
                Ok($migrate(&self.pool, &schema).await?)
            }

            /// [`advance`](super::SequenceStore::advance) inside the caller's
            /// transaction.
            pub async fn advance_in(
                &self,
                connection: &mut $connection,
                resource: &str,
                sequence: u64,
            ) -> Result<bool, $crate::sequence::SequenceError> {
                super::check(resource, sequence)?;
                let moved = sqlx::query(self.statements.advance.clone())
                    .bind(resource)
                    .bind(sequence.cast_signed())
                    .execute(connection)
                    .await?
                    .rows_affected();
                Ok(moved == 1)
            }
        }

        impl super::SequenceStore for $store {
            async fn position(
                &self,
                resource: &str,
            ) -> Result<Option<u64>, $crate::sequence::SequenceError> {
                let position: Option<i64> = sqlx::query_scalar(self.statements.position.clone())
                    .bind(resource)
                    .fetch_optional(&self.pool)
                    .await?;
                Ok(position.map(i64::cast_unsigned))
            }

            async fn advance(
                &self,
                resource: &str,
                sequence: u64,
            ) -> Result<bool, $crate::sequence::SequenceError> {
                let mut connection = self.pool.acquire().await?;
                self.advance_in(&mut connection, resource, sequence).await
            }
        }
    };
}

pub(crate) use sql_sequences;
