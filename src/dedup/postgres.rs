//! [`PostgresInbox`]: claims and inbox in Postgres.

use sqlx::Postgres;
use sqlx::postgres::{PgPool, PgRow};

use super::accept_batch::{Batch, Job};
use super::sql::write::{Write, Written, run_write};
use super::sql::{
    AcceptParts, BuildAccept, BuildOnInbox, InboxBackend, SqlInbox, Statements, TAKE_ORDER,
    ready_condition, take_assignments,
};
use super::{Acceptance, DedupError, IncomingEvent, StoreOptions};
use crate::store::group_commit::{Batched, CommitBatch, GroupCommit};
use crate::store::held_connection::HeldConnection;
use crate::store::sql::{POSTGRES, postgres_pool};

/// Claims and inbox in Postgres, for many receiver instances sharing one
/// database.
///
/// [`accept`](super::Inbox::accept) is one statement: a data-modifying CTE inserts
/// the claim (`ON CONFLICT DO NOTHING`) and, only if that inserted a row,
/// the inbox row. Workers take events with `FOR UPDATE SKIP LOCKED`.
///
/// Accepts that arrive together share that statement: the events go to
/// the server as arrays (`unnest`), up to 256 at once, and each caller
/// gets its own outcome once the statement committed. Of one id twice in
/// a batch the first is accepted and the rest are duplicates; if the
/// statement fails, none of its claims is kept and every caller in it gets
/// the error. Two batches may be in flight at once; a caller alone waits
/// for nobody. While accepts keep coming, each of the two writers keeps a
/// connection of the pool between its batches (on a pool of 8 or more
/// that has another to spare), and gives it back after a second without
/// accepts, after a failure, and at least every 30 seconds.
/// [`claim_in`](Self::claim_in) claims inside your own transaction instead.
///
/// # Schema
///
/// [`migrate`](Self::migrate) creates, for the prefix `hooklatch` (the
/// default):
///
/// ```sql
/// CREATE TABLE hooklatch_claims (
///     namespace   TEXT   NOT NULL,
///     event_id    TEXT   NOT NULL,
///     claimed_at  BIGINT NOT NULL,   -- ms since the epoch
///     lease_token TEXT,              -- NULL once done
///     lease_until BIGINT,
///     PRIMARY KEY (namespace, event_id)
/// );
/// CREATE TABLE hooklatch_inbox (
///     entry        BIGSERIAL PRIMARY KEY,
///     namespace    TEXT    NOT NULL,
///     event_id     TEXT    NOT NULL,
///     body         BYTEA   NOT NULL,
///     signed_at    BIGINT,
///     received_at  BIGINT  NOT NULL,
///     attempts     BIGINT  NOT NULL DEFAULT 0,
///     available_at BIGINT  NOT NULL,
///     taken_token  TEXT,
///     taken_until  BIGINT,
///     dead         BOOLEAN NOT NULL DEFAULT FALSE,
///     meta         TEXT,             -- the provider's metadata, JSON
///     dead_reason  TEXT,             -- why it was dead-lettered
///     dead_at      BIGINT            -- and when (ms since the epoch)
/// );
/// CREATE INDEX hooklatch_claims_claimed_at ON hooklatch_claims (claimed_at);
/// CREATE INDEX hooklatch_inbox_due ON hooklatch_inbox (namespace, available_at, entry)
///     WHERE NOT dead;
/// CREATE INDEX hooklatch_inbox_dead ON hooklatch_inbox (namespace, entry) WHERE dead;
/// CREATE INDEX hooklatch_inbox_taken ON hooklatch_inbox (namespace, taken_until)
///     WHERE taken_token IS NOT NULL AND NOT dead;
/// CREATE TABLE hooklatch_inbox_counts (  -- rows in the inbox per namespace
///     namespace TEXT   NOT NULL,
///     shard     BIGINT NOT NULL,         -- summed: a shard per connection
///     events    BIGINT NOT NULL,
///     dead      BIGINT NOT NULL,         -- of them dead letters
///     PRIMARY KEY (namespace, shard)
/// );
/// ```
///
/// Statement triggers on the inbox (`hooklatch_inbox_added`, `_removed`,
/// `_changed`, `_emptied`, with functions of the same names) keep
/// `hooklatch_inbox_counts` (all rows and dead ones) once per insert,
/// delete, update or truncate, so that
/// [`stats`](crate::dedup::InboxQueue::stats) costs the same at a backlog
/// of a million, waiting or dead, as of ten.
///
/// The inbox table is vacuumed after 1,000 rows plus 1% of them changed
/// (not Postgres's default 50 plus 20%), so that acked rows do not pile
/// up where a take reads. `migrate` also keeps
/// `hooklatch_schema_versions (component TEXT PRIMARY KEY, version INT)`,
/// one table whatever the prefix, shared by every hooklatch store in the
/// database.
///
/// # Claiming inside your own transaction
///
/// ```no_run
/// use hooklatch::dedup::{Acceptance, PostgresInbox};
///
/// # async fn example(store: PostgresInbox, pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let mut tx = pool.begin().await?;
/// if store.claim_in(&mut tx, "stripe", "evt_1").await? == Acceptance::Accepted {
///     sqlx::query("INSERT INTO jobs (kind, payload) VALUES ('invoice.paid', $1)")
///         .bind(&b"{}"[..])
///         .execute(&mut *tx)
///         .await?;
/// }
/// tx.commit().await?; // the claim and the job commit, or neither does
/// # Ok(())
/// # }
/// ```
pub type PostgresInbox = SqlInbox<Postgres>;

impl SqlInbox<Postgres> {
    /// Connects to `url` (such as `postgres://user@127.0.0.1:5432/db`) with
    /// a pool of up to 16 connections, and runs [`migrate`](Self::migrate).
    pub async fn connect(url: &str) -> Result<Self, DedupError> {
        Self::migrated(postgres_pool(url).await?).await
    }
}

/// Postgres' side of the inbox: accepts commit in batches, every other
/// write runs on the pool at once.
impl InboxBackend for Postgres {
    type Writes = GroupCommit<Batch<Postgres>>;

    const ACCEPT: (BuildAccept, Option<BuildAccept>) =
        (accept_statement, Some(accept_many_statement));
    const ON_INBOX: (BuildOnInbox, BuildOnInbox) = (take_statement, ack_many_statement);
    const COUNT_TRIGGERS: fn(&str) -> Vec<String> = count_triggers;

    fn inbox_writes(
        pool: &PgPool,
        statements: &Statements,
        options: &StoreOptions,
        _current: Option<&Self::Writes>,
    ) -> Self::Writes {
        // Batches commit with one retention: new options, a group of their
        // own.
        GroupCommit::new(Batch {
            connection: HeldConnection::new(pool.clone()),
            accept: statements.accept.clone(),
            accept_many: statements.accept_many.clone(),
            retention_ms: crate::dedup::millis(options.retention()),
        })
    }

    async fn write(
        pool: &PgPool,
        _group: &Self::Writes,
        write: Write,
    ) -> Result<Written<PgRow>, DedupError> {
        Ok(run_write::<Postgres>(&write, pool.into()).await?)
    }

    async fn accept(
        group: &Self::Writes,
        _statements: &Statements,
        _options: &StoreOptions,
        event: &IncomingEvent<'_>,
    ) -> Result<Acceptance, DedupError> {
        super::accept_batch::accept(group, event).await
    }

    fn watch_accepts(pool: &PgPool, inbox: &str, namespace: &str) -> Option<super::AcceptWatch> {
        let (pool, channel, namespace) = (pool.clone(), inbox.to_owned(), namespace.to_owned());
        Some(Box::pin(async move {
            listen_for_accepts(&pool, &channel, &namespace).await
        }))
    }

    async fn ack_many(
        pool: &PgPool,
        _group: &Self::Writes,
        statements: &Statements,
        taken: &[(i64, &str)],
    ) -> Result<Vec<(i64, String)>, DedupError> {
        let (entries, tokens): (Vec<i64>, Vec<&str>) = taken.iter().copied().unzip();
        Ok(sqlx::query_as(statements.ack_many.clone())
            .bind(entries)
            .bind(tokens)
            .fetch_all(pool)
            .await?)
    }
}

/// Wakes this process's workers on each namespace another process accepts
/// into the inbox table `channel` (each accept's transaction sends its
/// namespaces there), until dropped. Each time it starts listening it
/// wakes the workers of `namespace` once, so what was accepted before (or
/// while a lost connection was opened again) is taken at once.
async fn listen_for_accepts(pool: &PgPool, channel: &str, namespace: &str) {
    const FIRST_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);
    let mut pause = FIRST_PAUSE;
    loop {
        let started = tokio::time::Instant::now();
        let Err(error) = listen_once(pool, channel, namespace).await;
        tracing::warn!(%error, channel, "cannot listen for accepts; workers poll meanwhile");
        // A listener that held for a while starts its pauses over.
        if started.elapsed() > std::time::Duration::from_secs(30) {
            pause = FIRST_PAUSE;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_secs(5));
    }
}

/// Listens on `channel` and wakes the workers of each namespace named,
/// while one of this process's workers on `namespace` is idle. While all
/// are busy it does not listen: at thousands of accepts a second the
/// notices cost the server and this process several microseconds an event,
/// and a busy worker takes again without them.
async fn listen_once(
    pool: &PgPool,
    channel: &str,
    namespace: &str,
) -> Result<std::convert::Infallible, sqlx::Error> {
    let mut idle = super::wake::idle_workers(namespace);
    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
    let mut listening = false;
    loop {
        if !listening {
            // No notice comes while not listening, so nothing is read. The
            // count ends only as its worker stops (and this with it):
            // listening meanwhile costs nothing.
            let _ = idle.wait_for(|idle| *idle > 0).await;
            listener.listen(channel).await?;
            listening = true;
            // What was accepted before the `LISTEN` took effect.
            super::wake::accepted(namespace);
        }
        match listener.try_recv().await? {
            Some(notification) => super::wake::accepted(notification.payload()),
            // The connection was lost and opened again (listening again):
            // what was accepted meanwhile sent no notice.
            None => super::wake::accepted(namespace),
        }
        if *idle.borrow_and_update() == 0 && idle.has_changed().is_ok() {
            listener.unlisten(channel).await?;
            listening = false;
        }
    }
}

/// Sends the namespaces of what `claim` inserted to the inbox table's
/// channel, for workers in other processes (`LISTEN`); Postgres delivers
/// them at commit, once per namespace and transaction. A CTE of a `SELECT`
/// runs only when referenced: the statement counts its rows.
fn notify_accepts(inbox: &str) -> String {
    format!(
        "notified AS (SELECT pg_notify('{inbox}', namespace) FROM (SELECT DISTINCT namespace FROM claim) AS c)"
    )
}

/// Claims as done and enqueues what the claim inserted, in one statement.
/// A batch of one event runs this: planned once, where the statement for
/// many is planned again for each call (its plan depends on the arrays'
/// lengths), which cost a caller alone a third of its speed.
fn accept_statement(parts: &AcceptParts<'_>) -> String {
    let (claim_done, inbox) = (parts.claim_done, parts.inbox);
    format!(
        "WITH claim AS ({claim_done} RETURNING namespace, event_id, claimed_at), {notified} \
         INSERT INTO {inbox} (namespace, event_id, body, signed_at, received_at, available_at, meta) \
         SELECT namespace, event_id, $4, $5, claimed_at, claimed_at, $6 FROM claim \
         WHERE {flushed} AND (SELECT count(*) FROM notified) >= 0",
        flushed = POSTGRES.flushed,
        notified = notify_accepts(inbox),
    )
}

/// Claims many events as done and enqueues each whose claim it inserted,
/// in one statement: the events come as arrays ($1 namespaces, $2 ids, $4
/// bodies, $5 signed ats, $6 metas; $3 is the retention), and it returns
/// the positions (from 1) of those accepted. Of the same id twice the
/// first is claimed; the claims are inserted in key order, so two batches
/// of overlapping ids wait for each other rather than deadlock.
fn accept_many_statement(
    &AcceptParts {
        claims,
        inbox,
        on_conflict,
        ..
    }: &AcceptParts<'_>,
) -> String {
    format!(
        "WITH event AS (SELECT * FROM unnest($1::text[], $2::text[], $4::bytea[], $5::bigint[], $6::text[]) \
         WITH ORDINALITY AS e (namespace, event_id, body, signed_at, meta, n)), \
         first AS (SELECT DISTINCT ON (namespace, event_id) * FROM event ORDER BY namespace, event_id, n), \
         claim AS (INSERT INTO {claims} (namespace, event_id, claimed_at) \
         SELECT namespace, event_id, {now} FROM first ORDER BY namespace, event_id {on_conflict} \
         RETURNING namespace, event_id, claimed_at), \
         enqueue AS (INSERT INTO {inbox} (namespace, event_id, body, signed_at, received_at, available_at, meta) \
         SELECT namespace, event_id, body, signed_at, claimed_at, claimed_at, meta \
         FROM first JOIN claim USING (namespace, event_id) ORDER BY n), {notified} \
         SELECT n FROM first JOIN claim USING (namespace, event_id) \
         WHERE {flushed} AND (SELECT count(*) FROM notified) >= 0",
        now = POSTGRES.now,
        flushed = POSTGRES.flushed,
        notified = notify_accepts(inbox),
    )
}

/// Takes the ready rows, earliest first, skipping rows another worker
/// has locked. The take waits for its flush whatever the session's
/// `synchronous_commit`: a take lost in a crash would hand the event to a
/// second worker inside the first one's visibility.
fn take_statement(inbox: &str) -> String {
    format!(
        "WITH ready AS (SELECT entry FROM {inbox} WHERE {} {} LIMIT $2{}) \
         UPDATE {inbox} SET {} FROM ready WHERE {inbox}.entry = ready.entry AND {} \
         RETURNING {inbox}.entry, event_id, body, signed_at, attempts, dead, meta, received_at",
        ready_condition("$1", POSTGRES.now),
        TAKE_ORDER,
        POSTGRES.lock_rows,
        take_assignments("$3", "$4", &format!("{} + $5", POSTGRES.now), POSTGRES.now),
        POSTGRES.flushed,
    )
}

/// Keeps `{inbox}_counts` once per statement, not per row: an accept
/// batch, an ack batch or a take adds or takes away its rows' counts (all
/// rows, and dead ones) per namespace in one upsert. Each connection
/// writes its own shard of a namespace's counts (its backend pid modulo
/// 16), so that one transaction never holds two shards (no deadlock
/// between two); connections that share a shard wait for each other's
/// commit, as writers of one row do. `stats` sums the shards.
fn count_triggers(inbox: &str) -> Vec<String> {
    let upsert = |select: &str| {
        format!(
            "CREATE OR REPLACE FUNCTION {select} \
             ON CONFLICT (namespace, shard) DO UPDATE \
             SET events = c.events + excluded.events, dead = c.dead + excluded.dead; \
             RETURN NULL; \
             END $$"
        )
    };
    let counted = |name: &str, rows: &str, sign: &str| {
        upsert(&format!(
            "{inbox}_{name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             INSERT INTO {inbox}_counts AS c (namespace, shard, events, dead) \
             SELECT namespace, pg_backend_pid() % 16, {sign}COUNT(*), \
             {sign}COUNT(*) FILTER (WHERE dead) FROM {rows} \
             GROUP BY namespace ORDER BY namespace"
        ))
    };
    // Only a change of `dead` counts; the join pairs each row's versions
    // (a statement updates a row once).
    let changed = upsert(&format!(
        "{inbox}_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         INSERT INTO {inbox}_counts AS c (namespace, shard, events, dead) \
         SELECT a.namespace, pg_backend_pid() % 16, 0, \
         SUM(CASE WHEN a.dead THEN 1 ELSE -1 END) \
         FROM changed_after AS a JOIN changed_before AS b ON a.entry = b.entry \
         WHERE a.dead <> b.dead GROUP BY a.namespace ORDER BY a.namespace"
    ));
    let trigger = |name: &str, change: &str, rows: &str| {
        [
            format!("DROP TRIGGER IF EXISTS {inbox}_{name} ON {inbox}"),
            format!(
                "CREATE TRIGGER {inbox}_{name} AFTER {change} ON {inbox} {rows} \
                 FOR EACH STATEMENT EXECUTE FUNCTION {inbox}_{name}()"
            ),
        ]
    };
    let mut statements = vec![
        counted("added", "added", ""),
        counted("removed", "removed", "-"),
        changed,
        format!(
            "CREATE OR REPLACE FUNCTION {inbox}_emptied() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN DELETE FROM {inbox}_counts; RETURN NULL; END $$"
        ),
    ];
    statements.extend(trigger("added", "INSERT", "REFERENCING NEW TABLE AS added"));
    statements.extend(trigger(
        "removed",
        "DELETE",
        "REFERENCING OLD TABLE AS removed",
    ));
    statements.extend(trigger(
        "changed",
        "UPDATE",
        "REFERENCING OLD TABLE AS changed_before NEW TABLE AS changed_after",
    ));
    statements.extend(trigger("emptied", "TRUNCATE", ""));
    statements
}

/// Acks many taken rows in one statement: $1 entries, $2 their tokens.
fn ack_many_statement(inbox: &str) -> String {
    format!(
        "DELETE FROM {inbox} USING unnest($1::bigint[], $2::text[]) AS a (entry, token) \
         WHERE {inbox}.entry = a.entry AND {inbox}.taken_token = a.token AND NOT {inbox}.dead \
         RETURNING {inbox}.entry, a.token"
    )
}

impl Batched for Batch<sqlx::Postgres> {
    type Job = Job;
    type Outcome = Acceptance;
}

/// Commits a batch of accepts as one statement (its own transaction).
impl CommitBatch for Batch<sqlx::Postgres> {
    // One batch forms and is sent while the other waits for its flush.
    const WRITERS: usize = 2;
    const MAX_BATCH_BYTES: usize = crate::store::group_commit::POSTGRES_BATCH_BYTES;

    fn job_bytes(job: &Job) -> usize {
        job.body.len() + job.meta.as_ref().map_or(0, String::len)
    }

    async fn idle(&self) {
        self.connection.release();
    }

    async fn commit(&self, batch: &[Job]) -> Result<Vec<Acceptance>, sqlx::Error> {
        let (Some(many), [_, _, ..]) = (&self.accept_many, batch) else {
            return self.commit_one(batch).await;
        };
        let column = |f: fn(&Job) -> &str| batch.iter().map(f).collect::<Vec<_>>();
        let statement = sqlx::query_scalar(many.clone())
            .bind(column(|job| &job.namespace))
            .bind(column(|job| &job.id))
            .bind(self.retention_ms)
            .bind(batch.iter().map(|job| &job.body[..]).collect::<Vec<_>>())
            .bind(batch.iter().map(|job| job.signed_at).collect::<Vec<_>>())
            .bind(
                batch
                    .iter()
                    .map(|job| job.meta.as_deref())
                    .collect::<Vec<_>>(),
            );
        let accepted: Vec<i64> = self
            .connection
            .run(async |connection| statement.fetch_all(connection).await)
            .await?;
        let mut outcomes = vec![Acceptance::Duplicate; batch.len()];
        for n in accepted {
            let at = usize::try_from(n - 1)
                .ok()
                .and_then(|at| outcomes.get_mut(at));
            if let Some(outcome) = at {
                *outcome = Acceptance::Accepted;
            }
        }
        Ok(outcomes)
    }
}

impl Batch<sqlx::Postgres> {
    /// Commits a batch of one event (or none) with the one-event statement.
    async fn commit_one(&self, batch: &[Job]) -> Result<Vec<Acceptance>, sqlx::Error> {
        let mut outcomes = Vec::with_capacity(1);
        for job in batch {
            let statement = sqlx::query(self.accept.clone())
                .bind(&job.namespace)
                .bind(&job.id)
                .bind(self.retention_ms)
                .bind(&job.body)
                .bind(job.signed_at)
                .bind(&job.meta);
            let inserted = self
                .connection
                .run(async |connection| statement.execute(connection).await)
                .await?
                .rows_affected();
            outcomes.push(if inserted == 1 {
                Acceptance::Accepted
            } else {
                Acceptance::Duplicate
            });
        }
        Ok(outcomes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dedup::{Inbox as _, InboxQueue as _, IncomingEvent};

    /// The take reads the `_due` index in its own order, whatever the
    /// backlog: no scan of the namespace, no sort of what is ready. (Its
    /// latency at 1k, 100k and 1M waiting events is in `benches/take.rs`.)
    /// Runs on the server `scripts/test` starts; in CI its absence fails.
    #[tokio::test]
    async fn a_take_reads_the_due_index_in_order_and_never_sorts_the_backlog() {
        let Ok(url) = std::env::var("HOOKLATCH_TEST_POSTGRES_URL") else {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "CI=true but HOOKLATCH_TEST_POSTGRES_URL is unset: run scripts/test"
            );
            eprintln!("HOOKLATCH_TEST_POSTGRES_URL is unset: run scripts/test to check the plan");
            return;
        };
        let pool = PgPool::connect(&url).await.unwrap();
        let prefix = format!("plan_{}", crate::store::new_token().replace('-', "_"));
        let store = PostgresInbox::new(pool.clone(), &prefix).unwrap();
        store.migrate().await.unwrap();
        let inbox = format!("{prefix}_inbox");
        let _ = store
            .accept(&IncomingEvent::new("ns", "first", b"{}"))
            .await
            .unwrap();
        for statement in [
            format!(
                "INSERT INTO {inbox} (namespace, event_id, body, received_at, available_at) \
                 SELECT 'ns', 'e' || x, '\\x00', x, x FROM generate_series(1, 100000) AS x"
            ),
            format!("ANALYZE {inbox}"),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(statement))
                .execute(&pool)
                .await
                .unwrap();
        }
        let explain = format!("EXPLAIN {}", take_statement(&inbox));
        let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
            .bind("ns")
            .bind(256_i64)
            .bind(10_i64)
            .bind("token")
            .bind(30_000_i64)
            .fetch_all(&pool)
            .await
            .unwrap();
        let plan = plan.join("\n");
        assert!(plan.contains(&format!("{inbox}_due")), "{plan}");
        assert!(!plan.contains("Sort"), "the take sorts: {plan}");
        assert!(!plan.contains("Seq Scan"), "the take scans: {plan}");
        assert_eq!(store.take("ns", "w", 1).await.unwrap()[0].id, "e1");
        for table in [inbox, format!("{prefix}_claims")] {
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
                .execute(&pool)
                .await
                .unwrap();
        }
    }
}
