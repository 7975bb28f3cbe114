//! [`SqliteInbox`]: claims and inbox in an embedded SQLite file.

use std::path::Path;
use std::str::FromStr as _;

use std::sync::Arc;

use sqlx::Sqlite;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePool, SqliteRow};

use super::sql::write::{Arg, Want, Write, Written, run_write, run_write_as};
use super::sql::{
    AcceptParts, BuildAccept, BuildOnInbox, InboxBackend, SqlInbox, Statements, TAKE_ORDER,
    ready_condition, take_assignments,
};
use super::{Acceptance, DedupError, IncomingEvent, StoreOptions};
use crate::store::group_commit::{Batched, CommitBatch, GroupCommit};
use crate::store::sql::{On, SQLITE, sql_built, sqlite_pool};

/// Claims and inbox in one SQLite file: the default store, for a single
/// receiver process (or several on one host sharing the file).
///
/// [`accept`](super::Inbox::accept) inserts the claim (or renews one past
/// its retention) and, only if it did, the inbox row, in one transaction.
/// The file uses WAL with `synchronous=FULL`, so an accepted event has
/// reached the disk before `accept` returns.
///
/// Every write (accepts, takes, acks, nacks, heartbeats, leases, purges)
/// goes through one queue to one connection of the store's own, first come
/// first served: SQLite lets one writer in at a time, and a queue decides
/// who writes next fairly and without sleeping, where connections racing
/// for the lock would back off and wait. What queued while a commit was on
/// its way to the disk is committed together in one transaction (up to
/// 256 writes, one flush), and each caller is answered only after that
/// commit. The transaction is begun and committed in the same round trip
/// to SQLite's connection thread as the statements next to it, so that a
/// batch of accepts alone costs two, and a worker's take or ack alone one.
/// When the database refuses one write of a batch for something that write
/// caused, the writes are tried again one at a time, so only that caller
/// gets the error. Reads (stats, dead letters) use the pool and run beside
/// the writer. A caller alone waits for nobody.
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
///     meta TEXT,                              -- the provider's metadata, JSON
///     dead_reason TEXT, dead_at INTEGER       -- why and when it was dead-lettered
/// );
/// CREATE INDEX hooklatch_claims_claimed_at ON hooklatch_claims (claimed_at);
/// CREATE INDEX hooklatch_inbox_due ON hooklatch_inbox (namespace, available_at, entry)
///     WHERE NOT dead;
/// CREATE INDEX hooklatch_inbox_dead ON hooklatch_inbox (namespace, entry) WHERE dead;
/// CREATE INDEX hooklatch_inbox_taken ON hooklatch_inbox (namespace, taken_until)
///     WHERE taken_token IS NOT NULL AND NOT dead;
/// CREATE TABLE hooklatch_inbox_counts (   -- rows in the inbox per namespace
///     namespace TEXT NOT NULL, shard INTEGER NOT NULL,
///     events INTEGER NOT NULL, dead INTEGER NOT NULL,  -- all, and dead letters
///     PRIMARY KEY (namespace, shard)
/// );
/// ```
///
/// Three triggers on the inbox (`hooklatch_inbox_added`, `_removed`,
/// `_changed`) keep `hooklatch_inbox_counts` (all rows and dead ones) on
/// every insert, delete and dead letter, so that
/// [`stats`](crate::dedup::InboxQueue::stats) costs the same at a backlog
/// of a million, waiting or dead, as of ten.
///
/// `migrate` also keeps `hooklatch_schema_versions (component TEXT
/// PRIMARY KEY, version INT)`, one table whatever the prefix, shared by
/// every hooklatch store in the file.
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

    // An accept's write carries the one-event statement; the writer runs
    // every run of accepts, even of one, as one multi-row claim and one
    // multi-row insert instead (`accept_run`).
    const ACCEPT: (BuildAccept, Option<BuildAccept>) = (accept_statement, None);
    const ON_INBOX: (BuildOnInbox, BuildOnInbox) = (take_statement, ack_many_statement);
    const COUNT_TRIGGERS: fn(&str) -> Vec<String> = count_triggers;

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
         RETURNING entry, event_id, body, signed_at, attempts, dead, meta, received_at",
        take_assignments("$3", "$4", &format!("{} + $5", SQLITE.now), SQLITE.now),
        ready_condition("$1", SQLITE.now),
        TAKE_ORDER,
        SQLITE.lock_rows,
    )
}

/// Keeps `{inbox}_counts` row by row (SQLite has no statement triggers;
/// its one writer makes one shard enough). Dropped and made again, so
/// that a later release's definition replaces an earlier one's.
fn count_triggers(inbox: &str) -> Vec<String> {
    let trigger = |name: &str, when: &str, body: &str| {
        [
            format!("DROP TRIGGER IF EXISTS {inbox}_{name}"),
            format!("CREATE TRIGGER {inbox}_{name} AFTER {when} BEGIN {body} END"),
        ]
    };
    let mut statements = Vec::new();
    statements.extend(trigger(
        "added",
        &format!("INSERT ON {inbox}"),
        &format!(
            "INSERT INTO {inbox}_counts (namespace, shard, events, dead) \
             VALUES (new.namespace, 0, 1, new.dead) ON CONFLICT (namespace, shard) \
             DO UPDATE SET events = events + 1, dead = dead + excluded.dead;"
        ),
    ));
    statements.extend(trigger(
        "removed",
        &format!("DELETE ON {inbox}"),
        &format!(
            "UPDATE {inbox}_counts SET events = events - 1, dead = dead - old.dead \
             WHERE namespace = old.namespace AND shard = 0;"
        ),
    ));
    statements.extend(trigger(
        "changed",
        &format!("UPDATE OF dead ON {inbox} WHEN old.dead <> new.dead"),
        &format!(
            "UPDATE {inbox}_counts SET dead = dead + new.dead - old.dead \
             WHERE namespace = new.namespace AND shard = 0;"
        ),
    ));
    statements
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
    connection: Arc<tokio::sync::Mutex<Option<WriterConnection>>>,
    /// The claims and inbox tables, for accepts run together.
    tables: Arc<(String, String)>,
}

/// The writer's connection, and whether a batch's transaction may still be
/// open on it: the batch's future was dropped half way (its runtime
/// stopped), so whether its `COMMIT` ran is unknown. The next batch closes
/// such a connection, which rolls back whatever was left open; the dropped
/// batch is kept whole or not at all, and its callers, never answered,
/// send again.
struct WriterConnection {
    connection: SqliteConnection,
    in_transaction: bool,
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
        let mut slot = self.connection.lock().await;
        if slot.as_ref().is_some_and(|held| held.in_transaction) {
            // Closing the connection rolls back what the dropped batch left.
            *slot = None;
        }
        let held = match &mut *slot {
            Some(held) => held,
            empty => empty.insert(WriterConnection {
                connection: self.connect().await?,
                in_transaction: false,
            }),
        };
        held.in_transaction = true;
        let written = commit_on(&mut held.connection, batch, &self.tables).await;
        match &written {
            Ok(_) => held.in_transaction = false,
            Err(error) => {
                if matches!(error, sqlx::Error::Database(_))
                    && no_transaction_left(&mut held.connection).await
                {
                    held.in_transaction = false;
                } else {
                    // Broken, or its transaction's state unknown: a new
                    // connection for the next batch.
                    *slot = None;
                }
            }
        }
        written
    }
}

impl Writer {
    /// The writer's own connection, with the pool's options but
    /// `synchronous=FULL` whatever they say: `migrate` checks a pool
    /// connection, on which a pool's `after_connect` may have set what its
    /// options do not, and the writer makes every write. Checked once open.
    async fn connect(&self) -> Result<SqliteConnection, sqlx::Error> {
        use sqlx::ConnectOptions as _;
        use sqlx::sqlite::SqliteSynchronous;
        let mut connection = self
            .pool
            .connect_options()
            .as_ref()
            .clone()
            .synchronous(SqliteSynchronous::Full)
            // A take of many rows reaches its caller without the
            // connection's thread waiting for room.
            .row_buffer_size(ROW_BUFFER)
            // A run of n accepts has statements of its own for each n,
            // with and without the transaction's ends: more than the
            // default 100, which would prepare them again and again (see
            // `KEPT_RUN`).
            .statement_cache_capacity(STATEMENT_CACHE)
            .connect()
            .await?;
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut connection)
            .await?;
        if synchronous < 2 {
            return Err(sqlx::Error::Configuration(
                format!("the writer's `synchronous` is {synchronous} after setting FULL").into(),
            ));
        }
        Ok(connection)
    }
}

/// Ends whatever a failed batch left open on `connection`: its transaction
/// is rolled back, or none was open (its `BEGIN` was refused, the file
/// busy, or SQLite rolled back by itself). A deferred `BEGIN`, which takes
/// no lock, tells these apart: it fails only inside a transaction. False
/// when the connection may still be in one.
async fn no_transaction_left(connection: &mut SqliteConnection) -> bool {
    if sqlx::query("ROLLBACK")
        .execute(&mut *connection)
        .await
        .is_ok()
    {
        return true;
    }
    sqlx::query("BEGIN").execute(&mut *connection).await.is_ok()
        && sqlx::query("ROLLBACK")
            .execute(&mut *connection)
            .await
            .is_ok()
}

/// Rows the writer's connection holds for its caller before its thread
/// waits: more than a take or a batch of accepts returns.
const ROW_BUFFER: usize = 1024;

/// Prepared statements the writer's connection keeps: the claim and the
/// insert of every run up to [`KEPT_RUN`] accepts, each with and without
/// the transaction's ends, and the other writes.
const STATEMENT_CACHE: usize = 4 * KEPT_RUN + 64;

/// The longest run of accepts whose statements stay prepared. Longer runs
/// come only in bursts, where preparing their statements again costs little
/// beside committing that many events.
const KEPT_RUN: usize = 64;

/// Runs `batch` as one immediate transaction on `connection`, in order: a
/// run of accepts next to each other as one multi-row claim and one
/// multi-row insert. The transaction is begun and committed by hand, in the
/// same round trip to the connection's thread as the statements next to
/// them: under load a round trip costs more than their own work (a
/// `BEGIN IMMEDIATE` of its own took 0.19 ms a batch). sqlx runs the
/// statements of one SQLite query in order and stops at the first that
/// fails, so a failed insert never reaches its `COMMIT` (sqlx calls several
/// statements in one prepared query deprecated: the tests below hold it to
/// this). On an error the transaction is left open for the caller to roll
/// back.
async fn commit_on(
    connection: &mut SqliteConnection,
    batch: &[Write],
    tables: &(String, String),
) -> Result<Vec<Written<SqliteRow>>, sqlx::Error> {
    let mut written = Vec::with_capacity(batch.len());
    let mut begun = false;
    let mut rest = batch;
    while let Some(first) = rest.first() {
        let run = rest
            .iter()
            .take_while(|write| write.accept && same_retention(write, first))
            .count();
        if run > 0 {
            let last = run == rest.len();
            let framing = Framing {
                begin: !begun,
                commit: last,
            };
            written.extend(accept_run(connection, &rest[..run], tables, framing).await?);
            if last {
                return Ok(written);
            }
            begun = true;
            rest = &rest[run..];
        } else {
            let last = rest.len() == 1;
            let framing = Framing {
                begin: !begun,
                commit: last,
            };
            if matches!(first.want, Want::Rows) && (framing.begin || framing.commit) {
                written.push(framed_write(connection, first, framing).await?);
                if last {
                    return Ok(written);
                }
            } else {
                if framing.begin {
                    sqlx::query(BEGIN).execute(&mut *connection).await?;
                }
                written.push(run_write::<Sqlite>(first, On::Connection(&mut *connection)).await?);
            }
            begun = true;
            rest = &rest[1..];
        }
    }
    sqlx::query("COMMIT").execute(&mut *connection).await?;
    Ok(written)
}

/// Runs a write that returns rows (a take, an ack) with the transaction's
/// `BEGIN` and `COMMIT` as `framing` says, in the same round trip: a take
/// or an ack alone is one round trip, not three. Only writes that return
/// rows: a count would come out wrong, since sqlx adds up what SQLite
/// reports after each statement, and after a `BEGIN` or a `COMMIT` that
/// is the last write's count again.
async fn framed_write(
    connection: &mut SqliteConnection,
    write: &Write,
    framing: Framing,
) -> Result<Written<SqliteRow>, sqlx::Error> {
    let mut framed = String::new();
    if framing.begin {
        framed.push_str(BEGIN);
        framed.push_str("; ");
    }
    framed.push_str(write.statement.as_str());
    if framing.commit {
        framed.push_str("; COMMIT");
    }
    let statement = sql_built::<Sqlite>(sqlx::AssertSqlSafe(framed));
    run_write_as(write, statement, On::Connection(connection)).await
}

/// Every batch's transaction: immediate, so that it takes the file's write
/// lock before it reads.
const BEGIN: &str = "BEGIN IMMEDIATE";

/// Whether a run of accepts begins its batch's transaction, and whether it
/// ends it.
#[derive(Clone, Copy)]
struct Framing {
    begin: bool,
    commit: bool,
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
    connection: &mut SqliteConnection,
    run: &[Write],
    (claims, inbox): &(String, String),
    framing: Framing,
) -> Result<Vec<Written<SqliteRow>>, sqlx::Error> {
    use sqlx::Row as _;
    let events: Vec<_> = run.iter().filter_map(accept_args).collect();
    let now = SQLITE.now;
    let retention = events.first().map_or(0, |event| event.2);
    let mut claim = String::new();
    if framing.begin {
        claim.push_str(BEGIN);
        claim.push_str("; ");
    }
    claim.push_str(&format!(
        "INSERT INTO {claims} (namespace, event_id, claimed_at) VALUES "
    ));
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
    let kept = events.len() <= KEPT_RUN;
    let mut query = sqlx::query(sqlx::AssertSqlSafe(claim)).persistent(kept);
    for (namespace, id, ..) in &events {
        query = query.bind(*namespace).bind(*id);
    }
    let claimed = query.bind(retention).fetch_all(&mut *connection).await?;
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
        if framing.commit {
            insert.push_str("; COMMIT");
        }
        let mut query = sqlx::query(sqlx::AssertSqlSafe(insert)).persistent(kept);
        for (namespace, id, _, body, signed_at, meta) in enqueued {
            query = query
                .bind(*namespace)
                .bind(*id)
                .bind(*body)
                .bind(*signed_at)
                .bind(*meta);
        }
        query.execute(&mut *connection).await?;
    } else if framing.commit {
        sqlx::query("COMMIT").execute(&mut *connection).await?;
    }
    Ok(accepted
        .into_iter()
        .map(|accepted| Written::Affected(u64::from(accepted)))
        .collect())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::dedup::{Inbox as _, InboxQueue as _, IncomingEvent};

    /// A writer on a fresh store's file, and the pool the store opened.
    async fn writer_on_fresh_store(name: &str) -> (Writer, SqlitePool, std::path::PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("hooklatch-{name}-{}", crate::store::new_token()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = SqliteInbox::open(dir.join("inbox.db")).await.unwrap();
        let pool = store.pool().clone();
        let writer = Writer {
            pool: pool.clone(),
            connection: Arc::default(),
            tables: Arc::new(("hooklatch_claims".into(), "hooklatch_inbox".into())),
        };
        (writer, pool, dir)
    }

    /// A pool whose options say `synchronous=NORMAL` and whose
    /// `after_connect` sets FULL passes `migrate`'s check on a pool
    /// connection; the writer, which opens its own, writes at FULL all the
    /// same.
    #[tokio::test]
    async fn the_writer_commits_at_synchronous_full_whatever_the_pools_options_say() {
        use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteSynchronous};
        let dir =
            std::env::temp_dir().join(format!("hooklatch-sync-{}", crate::store::new_token()));
        std::fs::create_dir_all(&dir).unwrap();
        let options = SqliteConnectOptions::new()
            .filename(dir.join("inbox.db"))
            .create_if_missing(true)
            .synchronous(SqliteSynchronous::Normal);
        let pool = SqlitePoolOptions::new()
            .after_connect(|connection, _| {
                Box::pin(async move {
                    sqlx::query("PRAGMA synchronous = FULL")
                        .execute(connection)
                        .await
                        .map(|_| ())
                })
            })
            .connect_with(options)
            .await
            .unwrap();
        let store = SqliteInbox::new(pool.clone(), "hooklatch").unwrap();
        store
            .migrate()
            .await
            .expect("the pool's connections are at FULL");
        let writer = Writer {
            pool,
            connection: Arc::default(),
            tables: Arc::new(("hooklatch_claims".into(), "hooklatch_inbox".into())),
        };
        writer.commit(&[accept("evt_1")]).await.unwrap();
        let mut slot = writer.connection.lock().await;
        let held = slot.as_mut().expect("the writer's connection");
        let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&mut held.connection)
            .await
            .unwrap();
        assert_eq!(synchronous, 2, "the writer's connection is below FULL");
        drop(slot);
        std::fs::remove_dir_all(dir).ok();
    }

    fn accept(id: &str) -> Write {
        Write::accept(crate::store::sql::statement(String::new()))
            .text("ns")
            .text(id)
            .int(60_000)
            .bytes(id.as_bytes())
            .opt_int(None)
            .opt_text(None)
    }

    fn take(limit: i64) -> Write {
        Write::new(
            crate::store::sql::statement(take_statement("hooklatch_inbox")),
            Want::Rows,
        )
        .text("ns")
        .int(limit)
        .int(10)
        .text("token")
        .int(60_000)
    }

    /// What each write of a batch gave: 1 or 0 for an accept, the ids a
    /// take returned.
    fn outcomes(written: Vec<Written<SqliteRow>>) -> Vec<String> {
        written
            .into_iter()
            .map(|written| match written {
                Written::Affected(count) => count.to_string(),
                Written::Rows(rows) => rows
                    .iter()
                    .map(|row| sqlx::Row::get::<String, _>(row, "event_id"))
                    .collect::<Vec<_>>()
                    .join(" "),
            })
            .collect()
    }

    /// Whether another connection can take the file's write lock at once:
    /// no transaction of the writer is left open.
    async fn write_lock_is_free(pool: &SqlitePool) -> bool {
        let mut other = pool.acquire().await.unwrap();
        sqlx::query("PRAGMA busy_timeout = 0")
            .execute(&mut *other)
            .await
            .unwrap();
        let free = sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *other)
            .await
            .is_ok();
        if free {
            sqlx::query("ROLLBACK").execute(&mut *other).await.unwrap();
        }
        sqlx::query("PRAGMA busy_timeout = 10000")
            .execute(&mut *other)
            .await
            .unwrap();
        free
    }

    /// Whether the writer holds a connection, and whether a batch's
    /// transaction may be open on it.
    async fn held_connection(writer: &Writer) -> Option<bool> {
        let slot = writer.connection.lock().await;
        slot.as_ref().map(|held| held.in_transaction)
    }

    /// Commits one accept of `id` and says it was accepted.
    async fn assert_accepted(writer: &Writer, id: &str) {
        let written = writer.commit(&[accept(id)]).await.unwrap();
        assert_eq!(outcomes(written), ["1"], "{id}");
    }

    /// Commits `batch`, which the database refuses, and says no
    /// transaction stayed open.
    async fn assert_refused(writer: &Writer, pool: &SqlitePool, batch: &[Write]) {
        let failed = writer.commit(batch).await;
        assert!(
            matches!(failed, Err(sqlx::Error::Database(_))),
            "{failed:?}"
        );
        assert!(write_lock_is_free(pool).await, "a transaction stayed open");
    }

    /// Makes the database refuse to `change` (`INSERT`, `UPDATE`) an inbox
    /// row of the event `bad`.
    async fn refuse_event_bad(pool: &SqlitePool, change: &str) {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE TRIGGER refuse_bad BEFORE {change} ON hooklatch_inbox \
             WHEN NEW.event_id = 'bad' BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )))
        .execute(pool)
        .await
        .unwrap();
    }

    /// Commits `batch`, which the database refuses: nothing of it is kept
    /// in the claims or the inbox, and no transaction stays open.
    async fn assert_batch_refused_whole(writer: &Writer, pool: &SqlitePool, batch: &[Write]) {
        assert_refused(writer, pool, batch).await;
        assert!(claimed(pool).await.is_empty());
        let waiting: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM hooklatch_inbox")
            .fetch_one(pool)
            .await
            .unwrap();
        assert_eq!(waiting, 0);
    }

    async fn claimed(pool: &SqlitePool) -> Vec<String> {
        sqlx::query_scalar("SELECT event_id FROM hooklatch_claims ORDER BY event_id")
            .fetch_all(pool)
            .await
            .unwrap()
    }

    /// The writer begins and commits each batch's transaction by hand, in
    /// the round trips of the statements next to it: whatever the order of
    /// accepts and other writes, each batch is committed whole, each write
    /// gets its own outcome, and no transaction stays open.
    #[tokio::test]
    async fn the_writer_commits_each_batch_whole_whatever_its_order_of_writes() {
        let (writer, pool, dir) = writer_on_fresh_store("order").await;
        let batches = [
            // Accepts only: one run that begins and commits.
            (vec![accept("a"), accept("b")], vec!["1", "1"], "a b"),
            // A duplicate of an earlier batch, and one within the batch.
            (
                vec![accept("a"), accept("c"), accept("c")],
                vec!["0", "1", "0"],
                "a b c",
            ),
            // A take alone: begun and committed in its own round trip.
            (vec![take(1)], vec!["a"], "a b c"),
            // Two takes: the first begins, the second commits.
            (vec![take(1), take(0)], vec!["b", ""], "a b c"),
            // A run before a take and one after it, which commits.
            (
                vec![accept("d"), take(1), accept("e")],
                vec!["1", "c", "1"],
                "a b c d e",
            ),
            // A run after a take, which began the transaction.
            (
                vec![take(1), accept("f"), accept("g")],
                vec!["d", "1", "1"],
                "a b c d e f g",
            ),
            // Only duplicates: nothing to enqueue, the commit alone.
            (
                vec![accept("a"), accept("b")],
                vec!["0", "0"],
                "a b c d e f g",
            ),
            // A run that does not end the batch.
            (
                vec![accept("h"), take(9)],
                vec!["1", "e f g h"],
                "a b c d e f g h",
            ),
        ];
        for (batch, expected, claims) in batches {
            let written = writer.commit(&batch).await.unwrap();
            assert_eq!(outcomes(written), expected);
            assert_eq!(claimed(&pool).await.join(" "), claims);
            assert!(write_lock_is_free(&pool).await, "a transaction stayed open");
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A batch one of whose writes fails keeps nothing, not even the
    /// accepts before it, and the writer's next batch commits.
    #[tokio::test]
    async fn a_failed_write_rolls_back_its_whole_batch_and_the_next_one_commits() {
        let (writer, pool, dir) = writer_on_fresh_store("rollback").await;
        let refused = Write::new(
            crate::store::sql::statement(
                "INSERT INTO hooklatch_inbox (namespace) VALUES ($1)".into(),
            ),
            Want::Affected,
        )
        .text("ns");
        assert_batch_refused_whole(&writer, &pool, &[accept("a"), refused]).await;
        assert_accepted(&writer, "a").await;
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A statement that fails inside one of the writer's multi-statement
    /// queries (here the insert before its `COMMIT`) stops the query there:
    /// nothing of its batch is kept, before or after a take, and the next
    /// batch commits.
    #[tokio::test]
    async fn a_refused_insert_never_reaches_its_commit() {
        let (writer, pool, dir) = writer_on_fresh_store("refused").await;
        refuse_event_bad(&pool, "INSERT").await;
        for batch in [
            vec![accept("a"), accept("bad")],
            vec![take(1), accept("a"), accept("bad")],
        ] {
            assert_batch_refused_whole(&writer, &pool, &batch).await;
        }
        assert_accepted(&writer, "a").await;
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A take that fails carries its batch's `COMMIT` no further: whether
    /// the take began the transaction or came after accepts, nothing of
    /// the batch is kept, no event is left taken, and the next batch
    /// commits.
    #[tokio::test]
    async fn a_refused_take_never_reaches_its_commit() {
        let (writer, pool, dir) = writer_on_fresh_store("refused-take").await;
        assert_accepted(&writer, "bad").await;
        refuse_event_bad(&pool, "UPDATE").await;
        for batch in [vec![take(9)], vec![take(0), take(9)]] {
            assert_refused(&writer, &pool, &batch).await;
        }
        // After accepts: the accepts are not kept either.
        assert_refused(&writer, &pool, &[accept("a"), take(9)]).await;
        assert_eq!(claimed(&pool).await, ["bad"]);
        let taken: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM hooklatch_inbox WHERE taken_token IS NOT NULL OR attempts > 0",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(taken, 0, "a refused take left an event taken");
        assert_accepted(&writer, "a").await;
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A batch whose `BEGIN` is refused (another process holds the file's
    /// write lock past the busy timeout) fails, and the writer keeps its
    /// connection: no transaction was open on it.
    #[tokio::test]
    async fn a_refused_begin_fails_its_batch_and_keeps_the_connection() {
        let (store_writer, pool, dir) = writer_on_fresh_store("busy").await;
        let impatient = SqliteConnectOptions::new()
            .filename(dir.join("inbox.db"))
            .busy_timeout(Duration::from_millis(50));
        let writer = Writer {
            pool: SqlitePool::connect_lazy_with(impatient),
            ..store_writer
        };
        let mut other = pool.acquire().await.unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *other)
            .await
            .unwrap();
        for batch in [vec![accept("a")], vec![take(1), accept("a")]] {
            let failed = writer.commit(&batch).await;
            assert!(
                matches!(failed, Err(sqlx::Error::Database(_))),
                "{failed:?}"
            );
            assert_eq!(
                held_connection(&writer).await,
                Some(false),
                "the writer dropped a connection with no transaction open"
            );
        }
        sqlx::query("ROLLBACK").execute(&mut *other).await.unwrap();
        drop(other);
        assert_accepted(&writer, "a").await;
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A batch dropped after its first statement went to the connection
    /// (its runtime stopping), before its `COMMIT` did, leaves its
    /// transaction open there: the next batch runs on a new connection, and
    /// the dropped one keeps nothing.
    #[tokio::test]
    async fn a_batch_dropped_half_way_keeps_nothing_and_the_next_one_commits() {
        use futures_util::FutureExt as _;
        let (writer, pool, dir) = writer_on_fresh_store("dropped").await;
        assert_accepted(&writer, "warm").await;
        // Another connection holds the write lock, so the batch's first
        // statement waits on the connection's thread whatever the
        // machine's speed: one poll sends it and cannot see it finish.
        let mut other = pool.acquire().await.unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut *other)
            .await
            .unwrap();
        let batch = [accept("a"), take(1), accept("b")];
        let dropped = writer.commit(&batch).now_or_never();
        assert!(dropped.is_none(), "the batch finished under another's lock");
        sqlx::query("ROLLBACK").execute(&mut *other).await.unwrap();
        drop(other);
        assert_eq!(
            held_connection(&writer).await,
            Some(true),
            "the dropped batch was not under way"
        );
        let written = writer.commit(&[accept("a"), accept("b")]).await.unwrap();
        assert_eq!(outcomes(written), ["1", "1"]);
        assert_eq!(claimed(&pool).await.join(" "), "a b warm");
        assert!(write_lock_is_free(&pool).await);
        std::fs::remove_dir_all(&dir).ok();
    }

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
