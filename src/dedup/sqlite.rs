//! [`SqliteInbox`]: claims and inbox in an embedded SQLite file.

use std::path::Path;
use std::str::FromStr as _;

use std::sync::Arc;

use sqlx::Sqlite;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePool, SqliteRow};

use super::sql::write::{Arg, Want, Write, Written, run_write};
use super::sql::{
    AcceptParts, BuildAccept, BuildOnInbox, InboxBackend, SqlInbox, Statements, TAKE_ORDER,
    ready_condition, take_assignments,
};
use super::{Acceptance, DedupError, IncomingEvent, StoreOptions};
use crate::store::group_commit::{Batched, CommitBatch, GroupCommit};
use crate::store::sql::{On, SQLITE, sqlite_pool};

/// Claims and inbox in one SQLite file: the default store, for a single
/// receiver process (or several on one host sharing the file).
///
/// [`accept`](super::Inbox::accept) inserts the claim (`ON CONFLICT DO
/// NOTHING`) and, only if that inserted a row (`changes() = 1`), the inbox
/// row, in one transaction. The file uses WAL with `synchronous=FULL`, so an
/// accepted event has reached the disk before `accept` returns.
///
/// Every write (accepts, takes, acks, nacks, heartbeats, leases, purges)
/// goes through one queue to one connection of the store's own, first come
/// first served: SQLite lets one writer in at a time, and a queue decides
/// who writes next fairly and without sleeping, where connections racing
/// for the lock would back off and wait. What queued while a commit was on
/// its way to the disk is committed together in one transaction (up to
/// 256 writes, one flush), and each caller is answered only after that
/// commit. When the database refuses one write of a batch for something
/// that write caused, the writes are tried again one at a time, so only
/// that caller gets the error. Reads (stats, dead letters) use the pool and
/// run beside the writer. A caller alone waits for nobody.
///
/// # Schema
///
/// [`migrate`](Self::migrate) creates, for the prefix `hooklatch` (the
/// default):
///
/// ```sql
/// CREATE TABLE hooklatch_claims (
///     namespace TEXT NOT NULL, event_id TEXT NOT NULL,
///     claimed_at INTEGER NOT NULL,            -- ms since the epoch
///     lease_token TEXT, lease_until INTEGER,  -- lease_token NULL once done
///     PRIMARY KEY (namespace, event_id)
/// );
/// CREATE TABLE hooklatch_inbox (
///     entry INTEGER PRIMARY KEY AUTOINCREMENT,
///     namespace TEXT NOT NULL, event_id TEXT NOT NULL, body BLOB NOT NULL,
///     signed_at INTEGER, received_at INTEGER NOT NULL,
///     attempts INTEGER NOT NULL DEFAULT 0, available_at INTEGER NOT NULL,
///     taken_token TEXT, taken_until INTEGER, dead INTEGER NOT NULL DEFAULT 0,
///     meta TEXT                               -- the provider's metadata, JSON
/// );
/// CREATE INDEX hooklatch_claims_claimed_at ON hooklatch_claims (claimed_at);
/// CREATE INDEX hooklatch_inbox_due ON hooklatch_inbox (namespace, available_at, entry)
///     WHERE NOT dead;
/// CREATE INDEX hooklatch_inbox_dead ON hooklatch_inbox (namespace, entry) WHERE dead;
/// ```
///
/// `migrate` also keeps `hooklatch_schema_versions (component TEXT PRIMARY
/// KEY, version INT)`, one table whatever the prefix, shared by every
/// hooklatch store in the file.
///
/// ```
/// use hooklatch::dedup::{Acceptance, Inbox, IncomingEvent, SqliteInbox};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), hooklatch::dedup::DedupError> {
/// # let dir = std::env::temp_dir().join(format!("hooklatch-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// let store = SqliteInbox::open(dir.join("webhooks.db")).await?;
/// let event = IncomingEvent::new("github", "72d3162e", b"{}");
/// assert_eq!(store.accept(&event).await?, Acceptance::Accepted);
/// assert_eq!(store.accept(&event).await?, Acceptance::Duplicate);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok(())
/// # }
/// ```
pub type SqliteInbox = SqlInbox<Sqlite>;

impl SqlInbox<Sqlite> {
    /// Opens (creating if needed) the database file at `path` and runs
    /// [`migrate`](Self::migrate).
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, DedupError> {
        let options = SqliteConnectOptions::new().filename(path);
        Self::open_with(options).await
    }

    /// Opens the database at a `sqlite:` URL, such as `sqlite:webhooks.db`.
    pub async fn connect(url: &str) -> Result<Self, DedupError> {
        Self::open_with(SqliteConnectOptions::from_str(url)?).await
    }

    async fn open_with(options: SqliteConnectOptions) -> Result<Self, DedupError> {
        Self::migrated(sqlite_pool(options, 4).await?).await
    }
}

/// SQLite's side of the inbox: every write goes through the one writer.
impl InboxBackend for Sqlite {
    type Writes = GroupCommit<Writer>;

    // A batch runs the one-event accept once per event.
    const ACCEPT: (BuildAccept, Option<BuildAccept>) = (accept_statement, None);
    const ON_INBOX: (BuildOnInbox, BuildOnInbox) = (take_statement, ack_many_statement);

    fn inbox_writes(
        pool: &SqlitePool,
        statements: &Statements,
        _options: &StoreOptions,
        current: Option<&Self::Writes>,
    ) -> Self::Writes {
        // The writer binds each accept's retention itself: one writer per
        // file whatever the options.
        current.cloned().unwrap_or_else(|| {
            GroupCommit::new(Writer {
                pool: pool.clone(),
                connection: Arc::default(),
                tables: Arc::new((statements.claims.clone(), statements.inbox.clone())),
            })
        })
    }

    async fn write(
        _pool: &SqlitePool,
        writer: &Self::Writes,
        write: Write,
    ) -> Result<Written<SqliteRow>, DedupError> {
        Ok(writer.submit(write).await?)
    }

    async fn accept(
        writer: &Self::Writes,
        statements: &Statements,
        options: &StoreOptions,
        event: &IncomingEvent<'_>,
    ) -> Result<Acceptance, DedupError> {
        let accept = Write::accept(statements.accept.clone())
            .text(event.namespace)
            .text(event.id)
            .int(crate::dedup::millis(options.retention()))
            .bytes(event.body)
            .opt_int(event.signed_at)
            .opt_text(event.meta_text().as_deref());
        let inserted = writer.submit(accept).await?.affected();
        Ok(if inserted == 0 {
            Acceptance::Duplicate
        } else {
            Acceptance::Accepted
        })
    }

    async fn ack_many(
        _pool: &SqlitePool,
        writer: &Self::Writes,
        statements: &Statements,
        taken: &[(i64, &str)],
    ) -> Result<Vec<(i64, String)>, DedupError> {
        let pairs = serde_json::to_string(taken).map_err(|error| {
            crate::store::StoreError::message("sql", &format!("cannot encode the acks: {error}"))
        })?;
        let ack = Write::new(statements.ack_many.clone(), Want::Rows).text(&pairs);
        let rows = writer.submit(ack).await?.rows();
        let mut acked = Vec::with_capacity(rows.len());
        for row in rows {
            acked.push((sqlx::Row::try_get(&row, 0)?, sqlx::Row::try_get(&row, 1)?));
        }
        Ok(acked)
    }
}

/// Claims as done and, only if that inserted a row (`changes()`), enqueues:
/// both in one call, saving a round trip to the worker.
fn accept_statement(parts: &AcceptParts<'_>) -> String {
    let (claim_done, inbox) = (parts.claim_done, parts.inbox);
    format!(
        "{claim_done}; INSERT INTO {inbox} (namespace, event_id, body, signed_at, received_at, available_at, meta) \
         SELECT $1, $2, $4, $5, {now}, {now}, $6 WHERE changes() = 1",
        now = SQLITE.now
    )
}

/// Takes the ready rows, earliest first.
fn take_statement(inbox: &str) -> String {
    format!(
        "UPDATE {inbox} SET {} WHERE entry IN \
         (SELECT entry FROM {inbox} WHERE {} {} LIMIT $2{}) \
         RETURNING entry, event_id, body, signed_at, attempts, dead, meta",
        take_assignments("$3", "$4", &format!("{} + $5", SQLITE.now)),
        ready_condition("$1", SQLITE.now),
        TAKE_ORDER,
        SQLITE.lock_rows,
    )
}

/// Acks many taken rows in one statement: $1 is a JSON array of
/// `[entry, token]` pairs (one parameter, whatever the count).
fn ack_many_statement(inbox: &str) -> String {
    format!(
        "DELETE FROM {inbox} WHERE entry IN (SELECT i.entry FROM json_each($1) AS a \
         JOIN {inbox} AS i ON i.entry = (a.value ->> 0) AND i.taken_token = (a.value ->> 1) \
         WHERE NOT i.dead) RETURNING entry, taken_token"
    )
}

/// The store's one writer: a connection of its own, opened on first use
/// with the pool's options (and again after it broke), on which every
/// batch of writes is one immediate transaction.
#[derive(Clone)]
pub struct Writer {
    pool: SqlitePool,
    connection: Arc<tokio::sync::Mutex<Option<SqliteConnection>>>,
    /// The claims and inbox tables, for accepts run together.
    tables: Arc<(String, String)>,
}

impl Batched for Writer {
    type Job = Write;
    type Outcome = Written<SqliteRow>;
}

impl CommitBatch for Writer {
    // The file has one writer at a time.
    const WRITERS: usize = 1;
    const RETRY_ALONE: bool = true;

    async fn commit(&self, batch: &[Write]) -> Result<Vec<Written<SqliteRow>>, sqlx::Error> {
        use sqlx::ConnectOptions as _;
        let mut slot = self.connection.lock().await;
        let connection = match &mut *slot {
            Some(connection) => connection,
            empty => empty.insert(self.pool.connect_options().connect().await?),
        };
        let written = commit_on(connection, batch, &self.tables).await;
        if let Err(error) = &written
            && !matches!(error, sqlx::Error::Database(_))
        {
            // Not refused but broken: a new connection for the next batch.
            *slot = None;
        }
        written
    }
}

/// Runs `batch` in one immediate transaction on `connection`, in order;
/// accepts next to each other (with one retention) as one run.
async fn commit_on(
    connection: &mut SqliteConnection,
    batch: &[Write],
    tables: &(String, String),
) -> Result<Vec<Written<SqliteRow>>, sqlx::Error> {
    let mut transaction = sqlx::Connection::begin_with(connection, "BEGIN IMMEDIATE").await?;
    let mut written = Vec::with_capacity(batch.len());
    let mut rest = batch;
    while let Some(first) = rest.first() {
        let run = rest
            .iter()
            .take_while(|write| write.accept && same_retention(write, first))
            .count();
        if run > 1 {
            written.extend(accept_run(&mut transaction, &rest[..run], tables).await?);
            rest = &rest[run..];
        } else {
            written.push(run_write::<Sqlite>(first, On::Connection(&mut *transaction)).await?);
            rest = &rest[1..];
        }
    }
    transaction.commit().await?;
    Ok(written)
}

/// An accept's arguments: namespace, id, retention, body, signed at, meta.
type AcceptArgs<'a> = (
    &'a str,
    &'a str,
    i64,
    &'a [u8],
    Option<i64>,
    Option<&'a str>,
);

/// The arguments of an accept (see SQLite's `InboxBackend::accept`).
fn accept_args(write: &Write) -> Option<AcceptArgs<'_>> {
    match &write.args[..] {
        [
            Arg::Text(namespace),
            Arg::Text(id),
            Arg::Int(retention),
            Arg::Bytes(body),
            Arg::OptInt(signed_at),
            Arg::OptText(meta),
        ] => Some((namespace, id, *retention, body, *signed_at, meta.as_deref())),
        _ => None,
    }
}

fn same_retention(write: &Write, first: &Write) -> bool {
    match (accept_args(write), accept_args(first)) {
        (Some(a), Some(b)) => a.2 == b.2,
        _ => false,
    }
}

/// Accepts a run of events in two statements, where one each would take
/// two round trips to SQLite's worker per event: one insert of every
/// claim that returns those it inserted (or took over from an expired
/// claim), and one insert of their events. Of one id twice in the run the
/// first is accepted, as one at a time would.
async fn accept_run(
    transaction: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    run: &[Write],
    (claims, inbox): &(String, String),
) -> Result<Vec<Written<SqliteRow>>, sqlx::Error> {
    use sqlx::Row as _;
    let events: Vec<_> = run.iter().filter_map(accept_args).collect();
    let now = SQLITE.now;
    let retention = events.first().map_or(0, |event| event.2);
    let mut claim = format!("INSERT INTO {claims} (namespace, event_id, claimed_at) VALUES ");
    for n in 0..events.len() {
        let sep = if n == 0 { "" } else { ", " };
        claim.push_str(&format!("{sep}(${}, ${}, {now})", 2 * n + 1, 2 * n + 2));
    }
    claim.push_str(&format!(
        " ON CONFLICT (namespace, event_id) DO UPDATE \
         SET claimed_at = excluded.claimed_at, lease_token = NULL, lease_until = NULL \
         WHERE {claims}.lease_token IS NULL AND {claims}.claimed_at < {now} - ${} \
         RETURNING namespace, event_id",
        2 * events.len() + 1
    ));
    let mut query = sqlx::query(sqlx::AssertSqlSafe(claim));
    for (namespace, id, ..) in &events {
        query = query.bind(*namespace).bind(*id);
    }
    let claimed = query.bind(retention).fetch_all(&mut **transaction).await?;
    let mut new: std::collections::HashSet<(String, String)> = claimed
        .iter()
        .map(|row| Ok((row.try_get(0)?, row.try_get(1)?)))
        .collect::<Result<_, sqlx::Error>>()?;
    let accepted: Vec<bool> = events
        .iter()
        .map(|(namespace, id, ..)| new.remove(&((*namespace).to_owned(), (*id).to_owned())))
        .collect();
    let enqueued: Vec<_> = events
        .iter()
        .zip(&accepted)
        .filter(|(_, accepted)| **accepted)
        .map(|(event, _)| event)
        .collect();
    if !enqueued.is_empty() {
        let mut insert = format!(
            "INSERT INTO {inbox} (namespace, event_id, body, signed_at, received_at, \
             available_at, meta) VALUES "
        );
        for n in 0..enqueued.len() {
            let sep = if n == 0 { "" } else { ", " };
            let at = 5 * n;
            insert.push_str(&format!(
                "{sep}(${}, ${}, ${}, ${}, {now}, {now}, ${})",
                at + 1,
                at + 2,
                at + 3,
                at + 4,
                at + 5
            ));
        }
        let mut query = sqlx::query(sqlx::AssertSqlSafe(insert));
        for (namespace, id, _, body, signed_at, meta) in enqueued {
            query = query
                .bind(*namespace)
                .bind(*id)
                .bind(*body)
                .bind(*signed_at)
                .bind(*meta);
        }
        query.execute(&mut **transaction).await?;
    }
    Ok(accepted
        .into_iter()
        .map(|accepted| Written::Affected(u64::from(accepted)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dedup::{Inbox as _, InboxQueue as _, IncomingEvent};

    /// The take reads the `_due` index in its own order, whatever the
    /// backlog: no scan of the namespace, no sort of what is ready. (Its
    /// latency at 1k, 100k and 1M waiting events is in `benches/take.rs`.)
    #[tokio::test]
    async fn a_take_reads_the_due_index_in_order_and_never_sorts_the_backlog() {
        let dir =
            std::env::temp_dir().join(format!("hooklatch-plan-{}", crate::store::new_token()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = SqliteInbox::open(dir.join("inbox.db")).await.unwrap();
        let _ = store
            .accept(&IncomingEvent::new("ns", "first", b"{}"))
            .await
            .unwrap();
        sqlx::query(
            "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 100000) \
             INSERT INTO hooklatch_inbox (namespace, event_id, body, received_at, available_at) \
             SELECT 'ns', 'e' || x, x'00', x, x FROM n",
        )
        .execute(store.pool())
        .await
        .unwrap();
        sqlx::query("ANALYZE").execute(store.pool()).await.unwrap();
        let explain = format!("EXPLAIN QUERY PLAN {}", take_statement("hooklatch_inbox"));
        let plan: Vec<(i64, i64, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(explain))
            .bind("ns")
            .bind(256_i64)
            .bind(10_i64)
            .bind("token")
            .bind(30_000_i64)
            .fetch_all(store.pool())
            .await
            .unwrap();
        let plan: Vec<String> = plan.into_iter().map(|(.., detail)| detail).collect();
        let plan = plan.join("\n");
        assert!(plan.contains("hooklatch_inbox_due"), "{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "the take sorts: {plan}");
        assert_eq!(store.take("ns", "w", 1).await.unwrap()[0].id, "e1");
        std::fs::remove_dir_all(&dir).ok();
    }
}
