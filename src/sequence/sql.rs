//! The SQL position stores, written once: [`SqliteSequences`](super::SqliteSequences)
//! and [`PostgresSequences`](super::PostgresSequences) differ only in their
//! pool, connection and dialect.

/// The statements a position store runs on `{prefix}_sequences`.
pub(crate) fn statements(table: &str) -> (sqlx::SqlStr, sqlx::SqlStr) {
    use crate::store::sql::statement;
    (
        statement(format!("SELECT position FROM {table} WHERE resource = $1")),
        statement(format!(
            "INSERT INTO {table} (resource, position) VALUES ($1, $2) \
             ON CONFLICT (resource) DO UPDATE SET position = excluded.position \
             WHERE {table}.position < excluded.position"
        )),
    )
}

/// The methods and the [`SequenceStore`](super::SequenceStore) impl of one
/// SQL position store. `$store` has the fields `pool`, `table`, `position`
/// and `advance`.
macro_rules! sql_sequences {
    ($store:ident, $pool:ty, $connection:ty, $dialect:expr, $migrate:path) => {
        impl $store {
            /// Positions in `{prefix}_sequences` on `pool`. Call
            /// [`migrate`](Self::migrate) before use.
            pub fn new(pool: $pool, prefix: &str) -> Result<Self, $crate::sequence::SequenceError> {
                if !$crate::store::sql::valid_prefix(prefix) {
                    return Err($crate::sequence::SequenceError::InvalidTableName(
                        prefix.to_owned(),
                    ));
                }
                let table = format!("{prefix}_sequences");
                let (position, advance) = super::sql::statements(&table);
                Ok(Self {
                    pool,
                    table,
                    position,
                    advance,
                })
            }

            /// Creates or upgrades the table; safe from several processes at
            /// once.
            pub async fn migrate(&self) -> Result<(), $crate::sequence::SequenceError> {
                let schema = super::schema(&self.table, &$dialect);
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
                let moved = sqlx::query(self.advance.clone())
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
                let position: Option<i64> = sqlx::query_scalar(self.position.clone())
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
