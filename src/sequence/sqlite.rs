//! [`SqliteSequences`]: positions in a SQLite table.

use std::path::Path;
use std::str::FromStr;

use sqlx::sqlite::SqliteConnectOptions;

use super::{SequenceError, SqlSequences};

/// Positions in the SQLite table `{prefix}_sequences (resource TEXT
/// PRIMARY KEY, position INTEGER NOT NULL)`; see [`SqlSequences`].
pub type SqliteSequences = SqlSequences<sqlx::Sqlite>;

impl SqlSequences<sqlx::Sqlite> {
    /// Opens (creating if needed) the database file at `path`, in WAL mode
    /// with `synchronous=FULL`, with the table `hooklatch_sequences`, and
    /// runs [`migrate`](Self::migrate).
    ///
    /// ```no_run
    /// use hooklatch::sequence::{SequenceStore, SqliteSequences};
    ///
    /// # async fn run() -> Result<(), hooklatch::sequence::SequenceError> {
    /// let sequences = SqliteSequences::open("webhooks.db").await?;
    /// assert!(sequences.advance("order_1", 1).await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, SequenceError> {
        Self::open_with(SqliteConnectOptions::new().filename(path)).await
    }

    /// Opens the database at a `sqlite:` URL, such as `sqlite:webhooks.db`,
    /// as [`open`](Self::open) does.
    pub async fn connect(url: &str) -> Result<Self, SequenceError> {
        Self::open_with(SqliteConnectOptions::from_str(url)?).await
    }

    async fn open_with(options: SqliteConnectOptions) -> Result<Self, SequenceError> {
        let pool = crate::store::sql::sqlite_pool(options, 4).await?;
        let sequences = Self::new(pool, "hooklatch")?;
        sequences.migrate().await?;
        Ok(sequences)
    }
}
