//! [`PostgresSequences`]: positions in a Postgres table.

use super::{SequenceError, SqlSequences};

/// Positions in the Postgres table `{prefix}_sequences (resource TEXT
/// PRIMARY KEY, position BIGINT NOT NULL)`; see [`SqlSequences`].
pub type PostgresSequences = SqlSequences<sqlx::Postgres>;

impl SqlSequences<sqlx::Postgres> {
    /// Connects to `url` (`postgres://user:password@host/database`), with
    /// the table `hooklatch_sequences`, and runs [`migrate`](Self::migrate).
    pub async fn connect(url: &str) -> Result<Self, SequenceError> {
        let pool = crate::store::sql::postgres_pool(url).await?;
        let sequences = Self::new(pool, "hooklatch")?;
        sequences.migrate().await?;
        Ok(sequences)
    }
}
