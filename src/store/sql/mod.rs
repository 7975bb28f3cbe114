//! SQL shared by every SQLite and Postgres store: the dialects, statement
//! text, table-prefix checks, connection pools, and one migration that is
//! versioned and safe to run from many processes at once.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{AssertSqlSafe, SqlSafeStr as _, SqlStr};

mod database;

pub use database::SqlDatabase;
pub(crate) use database::{On, Statement, sql, sql_built};

/// What differs between the two databases in the statements we write.
#[derive(Debug, Clone, Copy)]
pub struct Dialect {
    /// The integer column type.
    pub(crate) int: &'static str,
    /// The byte string column type.
    pub(crate) bytes: &'static str,
    /// The boolean column type and its false.
    pub(crate) boolean: &'static str,
    pub(crate) false_value: &'static str,
    /// An integer primary key the database numbers.
    pub(crate) serial_key: &'static str,
    /// Appended to a subquery that picks rows to work on.
    pub(crate) lock_rows: &'static str,
    /// The time now on the database's clock, in ms since the epoch, so that
    /// every client of a shared store decides expiry on one clock.
    pub(crate) now: &'static str,
    /// A row's physical id, and how a statement names "the rows whose id a
    /// subquery returns" so that the database fetches them by id (a TID
    /// scan on Postgres) instead of joining against the whole table.
    pub(crate) row_id: &'static str,
    pub(crate) row_ids_in: (&'static str, &'static str),
    /// Adds a column in an upgrade (the version table runs it once; where
    /// the database can, it is safe to repeat too).
    pub(crate) add_column: &'static str,
    /// A condition, always true, that makes the statement's transaction
    /// wait for its flush whatever the session's settings say: pasted into
    /// the `WHERE` of a write whose answer promises durability.
    #[cfg_attr(not(any(feature = "postgres", feature = "sender")), allow(dead_code))]
    pub(crate) flushed: &'static str,
    /// Storage settings for a table whose rows come and go fast (a queue),
    /// for `ALTER TABLE .. SET (..)`, where the database has them.
    pub(crate) busy_table: Option<&'static str>,
    /// Whether a subquery in `FROM` may read the rows before it
    /// (`LATERAL`), and lock the rows it limits itself to.
    #[cfg_attr(not(feature = "sender"), allow(dead_code))]
    pub(crate) lateral: bool,
    /// Around a parameter holding a JSON array of strings: the set of
    /// them, for `IN`.
    pub(crate) texts_of_json: (&'static str, &'static str),
}

impl Dialect {
    /// The condition "the row is one `select` picked", where `select`
    /// returns [`row_id`](Self::row_id)s.
    pub(crate) fn picked(&self, select: &str) -> String {
        let (open, close) = self.row_ids_in;
        format!("{} {open}{select}{close}", self.row_id)
    }
}

#[cfg(feature = "sqlite")]
pub(crate) const SQLITE: Dialect = Dialect {
    int: "INTEGER",
    bytes: "BLOB",
    boolean: "INTEGER",
    false_value: "0",
    serial_key: "INTEGER PRIMARY KEY AUTOINCREMENT",
    lock_rows: "",
    // The host's clock: one host uses a SQLite file.
    now: "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
    row_id: "rowid",
    row_ids_in: ("IN (", ")"),
    add_column: "ADD COLUMN",
    // `synchronous` is the connection's, not a transaction's: the stores
    // set it when they open the file and check it on a pool they are given.
    flushed: "TRUE",
    busy_table: None,
    lateral: false,
    texts_of_json: ("(SELECT value FROM json_each(", "))"),
};

/// Postgres' `flushed` condition (see [`Dialect::flushed`]): a role,
/// database or pool with `synchronous_commit = off` would answer before the
/// flush, so it is turned back on for this transaction only. Stricter
/// settings (`remote_write`, `remote_apply`) and `local` are kept. Outside
/// the dialect too, for statements built whichever databases are compiled.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) const POSTGRES_FLUSHED: &str = "(SELECT CASE current_setting('synchronous_commit') \
     WHEN 'off' THEN set_config('synchronous_commit', 'on', true) ELSE 'on' END) = 'on'";

#[cfg(feature = "postgres")]
pub(crate) const POSTGRES: Dialect = Dialect {
    int: "BIGINT",
    bytes: "BYTEA",
    boolean: "BOOLEAN",
    false_value: "FALSE",
    serial_key: "BIGSERIAL PRIMARY KEY",
    // Concurrent workers each take different rows instead of waiting.
    lock_rows: " FOR UPDATE SKIP LOCKED",
    // `statement_timestamp()`, not `now()`: a transaction's start time would
    // make a long transaction decide expiry in the past. It is one value per
    // statement and stable, so the planner can bound an index with it
    // (`clock_timestamp()` is volatile and cannot).
    now: "(EXTRACT(EPOCH FROM statement_timestamp()) * 1000)::BIGINT",
    // `ctid IN (subquery)` may be planned as a join over the whole table;
    // an array of ids is fetched id by id.
    row_id: "ctid",
    row_ids_in: ("= ANY(ARRAY(", "))"),
    add_column: "ADD COLUMN IF NOT EXISTS",
    flushed: POSTGRES_FLUSHED,
    // Vacuum after 1% of the rows changed, at full speed: acked rows are
    // deleted at the rate events arrive.
    busy_table: Some(
        "autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, \
         autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01, \
         autovacuum_vacuum_cost_delay = 0",
    ),
    lateral: true,
    texts_of_json: ("(SELECT jsonb_array_elements_text(CAST(", " AS JSONB)))"),
};

/// A statement whose only dynamic parts are table names that passed
/// [`valid_prefix`]. Shared, so each query clones a reference count.
pub(crate) fn statement(text: String) -> SqlStr {
    AssertSqlSafe(Arc::<str>::from(text)).into_sql_str()
}

/// The longest table prefix accepted.
const MAX_PREFIX_LEN: usize = 48;

/// Whether a table prefix can be pasted into SQL: 1 to 48 of `a-z 0-9 _`,
/// starting with a letter.
pub(crate) fn valid_prefix(prefix: &str) -> bool {
    let mut bytes = prefix.bytes();
    prefix.len() <= MAX_PREFIX_LEN
        && bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// One store's tables: its name in the version table, its version, and the
/// statements that create it from nothing or from any earlier version
/// (`IF NOT EXISTS`, so a database made before versions were recorded is
/// brought up to date too).
pub struct Schema {
    pub(crate) component: String,
    pub(crate) version: i64,
    pub(crate) statements: Vec<String>,
}

/// Where each store's schema version is recorded.
const VERSIONS: &str = "hooklatch_schema_versions";

fn create_versions(dialect: &Dialect) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {VERSIONS} (component TEXT PRIMARY KEY, version {} NOT NULL)",
        dialect.int
    )
}

const READ_VERSION: &str = "SELECT version FROM hooklatch_schema_versions WHERE component = $1";
const WRITE_VERSION: &str = "INSERT INTO hooklatch_schema_versions (component, version) VALUES ($1, $2) \
     ON CONFLICT (component) DO UPDATE SET version = excluded.version";

/// Inside a migration's transaction `tx`: creates the version table if
/// missing, reads `schema`'s recorded version, and when it is behind runs
/// the schema's statements and records the new version; then commits.
async fn bring_up_to_date<DB: SqlDatabase>(
    mut tx: sqlx::Transaction<'_, DB>,
    schema: &Schema,
) -> Result<(), sqlx::Error> {
    sql_built::<DB>(AssertSqlSafe(create_versions(&DB::DIALECT)))
        .execute(&mut *tx)
        .await?;
    let version: Option<i64> = sql_built::<DB>(READ_VERSION)
        .bind(&schema.component)
        .fetch_optional_scalar(&mut *tx)
        .await?;
    if version.is_none_or(|v| v < schema.version) {
        for statement in &schema.statements {
            sql_built::<DB>(AssertSqlSafe(statement.clone()))
                .execute(&mut *tx)
                .await?;
        }
        sql_built::<DB>(WRITE_VERSION)
            .bind(&schema.component)
            .bind(schema.version)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await
}

/// A pool of up to 16 connections to `url`, waiting at most 5 seconds for
/// one. A server that refuses is tried again until then (it may be
/// starting); then one more try, bounded alike, says why ("connection
/// refused") where the pool says only that it timed out.
#[cfg(feature = "postgres")]
pub(crate) async fn postgres_pool(url: &str) -> Result<sqlx::PgPool, sqlx::Error> {
    use sqlx::Connection as _;
    let opened = sqlx::postgres::PgPoolOptions::new()
        .max_connections(16)
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await;
    match opened {
        Err(sqlx::Error::PoolTimedOut) => {
            // Bounded too: a host that drops packets would hold it for the
            // system's TCP timeout.
            let why =
                tokio::time::timeout(Duration::from_secs(5), sqlx::PgConnection::connect(url));
            Err(match why.await {
                Ok(Err(cause)) => cause,
                _ => sqlx::Error::PoolTimedOut,
            })
        }
        opened => opened,
    }
}

/// Brings `schema` up to date. When it is current this only reads (even
/// `CREATE INDEX IF NOT EXISTS` locks its table, which can deadlock with
/// live traffic); otherwise a transaction-scoped advisory lock serializes
/// the processes migrating at once, and the version is read again under it.
#[cfg(feature = "postgres")]
pub(crate) async fn migrate_postgres(
    pool: &sqlx::PgPool,
    schema: &Schema,
) -> Result<(), sqlx::Error> {
    let recorded: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(VERSIONS)
        .fetch_one(pool)
        .await?;
    if recorded {
        let version: Option<i64> = sqlx::query_scalar(READ_VERSION)
            .bind(&schema.component)
            .fetch_optional(pool)
            .await?;
        if version.is_some_and(|v| v >= schema.version) {
            return Ok(());
        }
    }
    let mut tx = pool.begin().await?;
    // Each statement sees what committed before it, whatever the server's
    // default: an upgrade that counts or copies rows after taking a lock
    // must see the rows written while it waited for the lock.
    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut *tx)
        .await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('hooklatch-migrate'))")
        .execute(&mut *tx)
        .await?;
    bring_up_to_date(tx, schema).await
}

/// How long a SQLite connection waits for another's lock.
#[cfg(feature = "sqlite")]
const SQLITE_BUSY_WAIT: Duration = Duration::from_secs(10);

/// A pool of up to `connections` connections on a file made durable: WAL,
/// `synchronous=FULL`, created if missing, waiting up to 10 s for a lock.
///
/// Opening a new file races other processes (or stores) opening it too:
/// switching it to WAL upgrades a read lock to a write lock, where SQLite
/// answers `SQLITE_BUSY` at once instead of waiting (waiting could
/// deadlock). Only the first opener switches the file, so the others try
/// again, backing off from 5 to 100 ms, within the same 10 s: each try
/// gets only the time left, so opening gives up after 10 s however the
/// tries fall.
#[cfg(feature = "sqlite")]
pub(crate) async fn sqlite_pool(
    options: sqlx::sqlite::SqliteConnectOptions,
    connections: u32,
) -> Result<sqlx::SqlitePool, sqlx::Error> {
    use sqlx::sqlite::{SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
    let options = options
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(SQLITE_BUSY_WAIT);
    let deadline = tokio::time::Instant::now() + SQLITE_BUSY_WAIT;
    let mut pause = Duration::from_millis(5);
    loop {
        let opening = SqlitePoolOptions::new()
            .max_connections(connections)
            .connect_with(options.clone());
        let opened = tokio::time::timeout_at(deadline, opening)
            .await
            .unwrap_or_else(|_| {
                Err(sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the SQLite file is still locked by another connection after 10 s",
                )))
            });
        match opened {
            Err(error) if sqlite_busy(&error) && tokio::time::Instant::now() + pause < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            opened => return opened,
        }
    }
}

/// Whether SQLite refused `error` because another connection holds a lock
/// (`SQLITE_BUSY` or one of its extended codes).
#[cfg(feature = "sqlite")]
fn sqlite_busy(error: &sqlx::Error) -> bool {
    const SQLITE_BUSY: i32 = 5;
    let sqlx::Error::Database(error) = error else {
        return false;
    };
    error
        .code()
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| code & 0xff == SQLITE_BUSY)
}

/// Brings `schema` up to date in one immediate transaction: a second
/// process migrating at once waits for the first, then finds it current.
#[cfg(feature = "sqlite")]
pub(crate) async fn migrate_sqlite(
    pool: &sqlx::SqlitePool,
    schema: &Schema,
) -> Result<(), sqlx::Error> {
    // Every store's answers promise that a write is on disk: a pool made
    // with `synchronous` below FULL (NORMAL loses the last commits in a
    // power cut, in WAL mode too) would break that silently.
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(pool)
        .await?;
    if synchronous < 2 {
        return Err(sqlx::Error::Configuration(
            format!(
                "sqlite `synchronous` is {synchronous} (below FULL): a power cut loses writes \
                 already answered as kept; open the pool with \
                 `SqliteConnectOptions::synchronous(SqliteSynchronous::Full)`"
            )
            .into(),
        ));
    }
    let tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    bring_up_to_date(tx, schema).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_must_be_plain_identifiers() {
        for good in ["hooklatch", "a", "tenant_7_inbox"] {
            assert!(valid_prefix(good), "{good}");
        }
        for bad in [
            "",
            "7up",
            "Hooklatch",
            "x; DROP TABLE users",
            "a-b",
            "\"quoted\"",
            &"a".repeat(49),
        ] {
            assert!(!valid_prefix(bad), "{bad}");
        }
    }
}
