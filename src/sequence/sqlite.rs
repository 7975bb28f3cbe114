//! [`SqliteSequences`]: positions in a SQLite table.

use sqlx::sqlite::{SqliteConnection, SqlitePool};

/// Positions in the SQLite table `{prefix}_sequences (resource TEXT
/// PRIMARY KEY, position INTEGER NOT NULL)`.
///
/// [`advance_in`](Self::advance_in) moves a position inside the caller's
/// transaction, so the effect of applying an event and the advance commit
/// together.
#[derive(Debug, Clone)]
pub struct SqliteSequences {
    pool: SqlitePool,
    statements: super::sql::Statements,
}

super::sql::sql_sequences!(
    SqliteSequences,
    SqlitePool,
    SqliteConnection,
    crate::store::sql::SQLITE,
    crate::store::sql::migrate_sqlite
);
