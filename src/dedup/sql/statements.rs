//! The tables of the SQLite and Postgres inbox stores and the statements
//! both run.
//!
//! Times are milliseconds since the Unix epoch in `BIGINT` columns, read
//! from the database's own clock inside each statement (the dialect's
//! `now`), so that every client of a shared store decides expiry on one
//! clock whatever its own says. Statements take durations, never times.
//! A claim row whose `lease_token` is NULL is done; otherwise a lease holds
//! it until `lease_until`.

use sqlx::SqlStr;

use crate::dedup::LAST_ATTEMPT_TIMED_OUT;
pub(crate) use crate::store::sql::statement;
use crate::store::sql::{Dialect, Schema};

/// The claims and inbox tables and their indexes (version 1).
pub(crate) fn schema(claims: &str, inbox: &str, dialect: &Dialect) -> Schema {
    let Dialect {
        int,
        bytes,
        boolean,
        false_value,
        serial_key,
        ..
    } = dialect;
    Schema {
        component: format!("claims:{claims}"),
        version: 1,
        statements: vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {claims} (\
                 namespace TEXT NOT NULL, event_id TEXT NOT NULL, claimed_at {int} NOT NULL, \
                 lease_token TEXT, lease_until {int}, PRIMARY KEY (namespace, event_id))"
            ),
            format!("CREATE INDEX IF NOT EXISTS {claims}_claimed_at ON {claims} (claimed_at)"),
            format!(
                "CREATE TABLE IF NOT EXISTS {inbox} (\
                 entry {serial_key}, namespace TEXT NOT NULL, event_id TEXT NOT NULL, \
                 body {bytes} NOT NULL, signed_at {int}, received_at {int} NOT NULL, \
                 attempts {int} NOT NULL DEFAULT 0, available_at {int} NOT NULL, \
                 taken_token TEXT, taken_until {int}, dead {boolean} NOT NULL DEFAULT {false_value})"
            ),
            format!(
                "CREATE INDEX IF NOT EXISTS {inbox}_ready ON {inbox} (namespace, dead, available_at, entry)"
            ),
        ],
    }
}

/// Version 2 of the inbox: the provider's metadata with each event, a
/// JSON text (`EventMeta`). A component of its own, so that stores made
/// before it upgrade in place.
pub(crate) fn meta_schema(inbox: &str, dialect: &Dialect) -> Schema {
    Schema {
        component: format!("inbox-meta:{inbox}"),
        version: 1,
        statements: vec![format!(
            "ALTER TABLE {inbox} {} meta TEXT",
            dialect.add_column
        )],
    }
}

/// Version 3 of the inbox: a take served by an index in its own order, so
/// that its cost follows the batch, never the backlog. A taken row's
/// `available_at` moves to the end of its visibility (a nack's to its
/// retry), so "ready" is one range, `available_at <= now`, of a partial
/// index that leaves dead letters out; they get one of their own. On
/// Postgres, autovacuum visits the inbox after 1% of its rows (not 20%)
/// were acked, so that dead tuples do not pile up in the range a take
/// reads.
pub(crate) fn take_schema(inbox: &str, dialect: &Dialect) -> Schema {
    let mut statements = vec![
        format!(
            "CREATE INDEX IF NOT EXISTS {inbox}_due ON {inbox} (namespace, available_at, entry) \
             WHERE NOT dead"
        ),
        format!("CREATE INDEX IF NOT EXISTS {inbox}_dead ON {inbox} (namespace, entry) WHERE dead"),
        format!("DROP INDEX IF EXISTS {inbox}_ready"),
    ];
    if let Some(tuning) = dialect.busy_table {
        statements.push(format!("ALTER TABLE {inbox} SET ({tuning})"));
    }
    Schema {
        component: format!("inbox-take:{inbox}"),
        version: 1,
        statements,
    }
}

/// Version 4 of the inbox: why and when each dead letter died.
pub(crate) fn dead_reason_schema(inbox: &str, dialect: &Dialect) -> Schema {
    let Dialect {
        add_column, int, ..
    } = dialect;
    Schema {
        component: format!("inbox-dead-reason:{inbox}"),
        version: 1,
        statements: vec![
            format!("ALTER TABLE {inbox} {add_column} dead_reason TEXT"),
            format!("ALTER TABLE {inbox} {add_column} dead_at {int}"),
        ],
    }
}

/// Version 5 of the inbox: how many rows each namespace holds, and how
/// many of them are dead letters, kept by the database's own triggers on
/// every insert, delete and dead letter (the dialect's
/// `triggers`, given the inbox table), so that `stats` reads a few rows
/// instead of counting the backlog; and an index of the taken rows, so
/// that counting them costs what workers hold. The count starts from the
/// rows there are, inside the migration's transaction and after the
/// triggers exist, so no write is counted twice or missed.
pub(crate) fn counts_schema(
    inbox: &str,
    dialect: &Dialect,
    triggers: fn(&str) -> Vec<String>,
) -> Schema {
    let int = dialect.int;
    let mut statements = vec![format!(
        "CREATE TABLE IF NOT EXISTS {inbox}_counts (\
         namespace TEXT NOT NULL, shard {int} NOT NULL, events {int} NOT NULL, \
         dead {int} NOT NULL, PRIMARY KEY (namespace, shard))"
    )];
    statements.extend(triggers(inbox));
    statements.extend([
        format!("DELETE FROM {inbox}_counts"),
        format!(
            "INSERT INTO {inbox}_counts (namespace, shard, events, dead) \
             SELECT namespace, 0, COUNT(*), SUM(CASE WHEN dead THEN 1 ELSE 0 END) \
             FROM {inbox} GROUP BY namespace"
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS {inbox}_taken ON {inbox} (namespace, taken_until) \
             WHERE taken_token IS NOT NULL AND NOT dead"
        ),
    ]);
    Schema {
        component: format!("inbox-counts:{inbox}"),
        version: 1,
        statements,
    }
}

/// The statements a SQL store runs, for one table prefix: those both
/// dialects share, and each dialect's own atomic accept and take.
#[derive(Debug, Clone)]
pub struct Statements {
    /// `{prefix}_claims`.
    pub(crate) claims: String,
    /// `{prefix}_inbox`.
    pub(crate) inbox: String,
    /// $1 namespace, $2 id, $3 retention ms, $4 body, $5 signed at, $6
    /// meta. Claims as done and enqueues, or does neither.
    pub(crate) accept: SqlStr,
    /// `accept` for many events in one statement, where the dialect has
    /// one: each parameter but the retention is an array. Returns the
    /// positions (from 1) of the events accepted.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) accept_many: Option<SqlStr>,
    /// $1 namespace, $2 limit, $3 max attempts, $4 token, $5 visibility
    /// ms. Returns the rows taken or dead-lettered.
    pub(crate) take: SqlStr,
    /// $1 namespace, $2 id, $3 retention ms. Claims as done.
    pub(crate) claim_done: SqlStr,
    /// $1 namespace, $2 id, $3 retention ms, $4 token, $5 lease ms.
    pub(crate) claim_lease: SqlStr,
    /// $1 namespace, $2 id. The token and the lease's ms left.
    pub(crate) read_claim: SqlStr,
    /// $1 namespace, $2 id, $3 token.
    pub(crate) complete: SqlStr,
    /// $1 namespace, $2 id, $3 token.
    pub(crate) release: SqlStr,
    /// $1 namespace, $2 id, $3 token, $4 lease ms.
    pub(crate) extend_lease: SqlStr,
    /// $1 entry, $2 token.
    pub(crate) ack: SqlStr,
    /// The dialect's ack of many taken rows in one statement (see its
    /// `ack_many_rows`); returns the entries acked and their tokens.
    pub(crate) ack_many: SqlStr,
    /// $1 entry, $2 token, $3 visibility ms.
    pub(crate) extend_taken: SqlStr,
    /// $1 entry, $2 token, $3 max attempts (0 to dead-letter now), $4
    /// retry in ms, $5 the reason kept if dead-lettered. Returns dead.
    pub(crate) nack: SqlStr,
    /// $1 namespace, $2 limit.
    pub(crate) dead_letters: SqlStr,
    /// $1 older than ms, $2 batch size.
    pub(crate) purge_claims: SqlStr,
    /// $1 namespace. Counts `total`, `dead` and `taken`, each in time that
    /// follows its own size, not the backlog's.
    pub(crate) stats: SqlStr,
    /// $1 namespace, $2 event id or NULL for all.
    pub(crate) requeue_dead: SqlStr,
    /// The store's clock now.
    pub(crate) now: SqlStr,
    /// $1 namespace, $2 claimed at or after, $3 limit. The claims in the
    /// order made: event id, claimed at, whether a lease holds it.
    pub(crate) tail_claims: SqlStr,
    /// $1 namespace, $2 a JSON array of event ids, $3 the earliest of
    /// their claims' times. Their inbox rows: event id, meta, attempts,
    /// and 2 dead, 1 taken, 0 neither. A row's `available_at` is never
    /// before its accept, so the range is the `_due` index's.
    pub(crate) tail_inbox: SqlStr,
}

/// Builds a dialect's statement on the inbox table (given its name).
pub(crate) type BuildOnInbox = fn(inbox: &str) -> String;

/// Builds a dialect's accept statement from its parts.
pub(crate) type BuildAccept = fn(&AcceptParts<'_>) -> String;

/// What a dialect's accept statement is built from (SQLite's needs only
/// some of it).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub struct AcceptParts<'a> {
    /// `{prefix}_claims`.
    pub(crate) claims: &'a str,
    /// `{prefix}_inbox`.
    pub(crate) inbox: &'a str,
    /// Claims $1 namespace, $2 id as done (see [`Statements::claim_done`]).
    pub(crate) claim_done: &'a str,
    /// The `ON CONFLICT` clause of `claim_done`, for an insert of many
    /// claims: a done claim older than the retention ($3) is claimed
    /// again, any other is kept.
    pub(crate) on_conflict: &'a str,
}

impl Statements {
    /// The statements on `{prefix}_claims` and `{prefix}_inbox` in
    /// `dialect`, with the dialect's `accept`, `accept_many` (if it has
    /// one), `take` and `ack_many` (given the inbox table).
    pub(crate) fn new(
        prefix: &str,
        dialect: &Dialect,
        (accept, accept_many): (BuildAccept, Option<BuildAccept>),
        (take, ack_many): (BuildOnInbox, BuildOnInbox),
    ) -> Result<Self, crate::dedup::DedupError> {
        crate::dedup::check_prefix(prefix)?;
        let claims = format!("{prefix}_claims");
        let inbox = format!("{prefix}_inbox");
        let now = dialect.now;
        let on_conflict = format!(
            "ON CONFLICT (namespace, event_id) DO UPDATE \
             SET claimed_at = excluded.claimed_at, lease_token = NULL, lease_until = NULL \
             WHERE {claims}.lease_token IS NULL AND {claims}.claimed_at < {now} - $3"
        );
        let claim_done = format!(
            "INSERT INTO {claims} (namespace, event_id, claimed_at) VALUES ($1, $2, {now}) {on_conflict}"
        );
        let parts = AcceptParts {
            claims: &claims,
            inbox: &inbox,
            claim_done: &claim_done,
            on_conflict: &on_conflict,
        };
        Ok(Self {
            accept: statement(accept(&parts)),
            accept_many: accept_many.map(|many| statement(many(&parts))),
            take: statement(take(&inbox)),
            ack_many: statement(ack_many(&inbox)),
            claim_done: statement(claim_done),
            claim_lease: statement(format!(
                "INSERT INTO {claims} (namespace, event_id, claimed_at, lease_token, lease_until) \
                 VALUES ($1, $2, {now}, $4, {now} + $5) \
                 ON CONFLICT (namespace, event_id) DO UPDATE \
                 SET claimed_at = excluded.claimed_at, lease_token = excluded.lease_token, \
                     lease_until = excluded.lease_until \
                 WHERE ({claims}.lease_token IS NOT NULL AND {claims}.lease_until <= {now}) \
                    OR ({claims}.lease_token IS NULL AND {claims}.claimed_at < {now} - $3)"
            )),
            read_claim: statement(format!(
                "SELECT lease_token, lease_until - {now} AS left_ms FROM {claims} \
                 WHERE namespace = $1 AND event_id = $2"
            )),
            complete: statement(format!(
                "UPDATE {claims} SET lease_token = NULL, lease_until = NULL, claimed_at = {now} \
                 WHERE namespace = $1 AND event_id = $2 AND lease_token = $3"
            )),
            release: statement(format!(
                "DELETE FROM {claims} WHERE namespace = $1 AND event_id = $2 AND lease_token = $3"
            )),
            extend_lease: statement(format!(
                "UPDATE {claims} SET lease_until = {now} + $4 \
                 WHERE namespace = $1 AND event_id = $2 AND lease_token = $3 \
                 AND lease_until > {now}"
            )),
            ack: statement(format!(
                "DELETE FROM {inbox} WHERE entry = $1 AND taken_token = $2 AND NOT dead"
            )),
            extend_taken: statement(format!(
                "UPDATE {inbox} SET taken_until = {now} + $3, available_at = {now} + $3 \
                 WHERE entry = $1 AND taken_token = $2 AND NOT dead AND taken_until > {now}"
            )),
            nack: statement(format!(
                "UPDATE {inbox} SET taken_token = NULL, taken_until = NULL, \
                 dead = (attempts >= $3), available_at = {now} + $4, \
                 dead_reason = CASE WHEN attempts >= $3 THEN CAST($5 AS TEXT) END, \
                 dead_at = CASE WHEN attempts >= $3 THEN {now} END \
                 WHERE entry = $1 AND taken_token = $2 AND NOT dead RETURNING dead"
            )),
            dead_letters: statement(format!(
                "SELECT entry, event_id, body, signed_at, attempts, meta, dead_reason, dead_at, \
                 received_at \
                 FROM {inbox} WHERE namespace = $1 AND dead ORDER BY entry LIMIT $2"
            )),
            // One bounded batch, oldest first, by the `claimed_at` index;
            // on Postgres rows another client holds are skipped, not waited
            // for.
            purge_claims: statement(format!(
                "DELETE FROM {claims} WHERE {}",
                dialect.picked(&format!(
                    "SELECT {row_id} FROM {claims} \
                     WHERE claimed_at < {now} - $1 AND lease_token IS NULL \
                     ORDER BY claimed_at LIMIT $2{lock_rows}",
                    row_id = dialect.row_id,
                    lock_rows = dialect.lock_rows
                ))
            )),
            // The total and the dead from the counts the triggers keep;
            // the taken from their partial index, whose size is what the
            // workers hold.
            stats: statement(format!(
                "SELECT CAST(COALESCE(SUM(events), 0) AS {int}) AS total, \
                 CAST(COALESCE(SUM(dead), 0) AS {int}) AS dead, \
                 (SELECT COUNT(*) FROM {inbox} WHERE namespace = $1 \
                 AND taken_token IS NOT NULL AND NOT dead AND taken_until > {now}) AS taken \
                 FROM {inbox}_counts WHERE namespace = $1",
                int = dialect.int
            )),
            requeue_dead: statement(format!(
                "UPDATE {inbox} SET dead = {false_value}, attempts = 0, available_at = {now}, \
                 taken_token = NULL, taken_until = NULL, dead_reason = NULL, dead_at = NULL \
                 WHERE namespace = $1 AND dead AND ($2 IS NULL OR event_id = $2)",
                false_value = dialect.false_value
            )),
            now: statement(format!("SELECT CAST({now} AS {int})", int = dialect.int)),
            tail_claims: statement(format!(
                "SELECT event_id, claimed_at, \
                 CAST(CASE WHEN lease_token IS NOT NULL AND lease_until > {now} THEN 1 ELSE 0 END \
                 AS {int}) FROM {claims} WHERE namespace = $1 AND claimed_at >= $2 \
                 ORDER BY claimed_at, event_id LIMIT $3",
                int = dialect.int
            )),
            // Two halves, each served by its partial index (`_due`, `_dead`):
            // one condition with an `OR` across them is served by neither.
            tail_inbox: statement(format!(
                "SELECT event_id, meta, attempts, \
                 CAST(CASE WHEN taken_until > {now} THEN 1 ELSE 0 END AS {int}) \
                 FROM {inbox} WHERE namespace = $1 AND NOT dead AND available_at >= $3 \
                 AND event_id IN {open}$2{close} \
                 UNION ALL SELECT event_id, meta, attempts, CAST(2 AS {int}) \
                 FROM {inbox} WHERE namespace = $1 AND dead AND event_id IN {open}$2{close}",
                int = dialect.int,
                open = dialect.texts_of_json.0,
                close = dialect.texts_of_json.1,
            )),
            claims,
            inbox,
        })
    }
}

/// The condition for an inbox row a worker may take at time `now`. The
/// range on `available_at` is what the `_due` index serves; a taken row's
/// `available_at` is the end of its visibility, and the check of
/// `taken_until` covers rows taken before that was so.
pub(crate) fn ready_condition(namespace: &str, now: &str) -> String {
    format!(
        "namespace = {namespace} AND NOT dead AND available_at <= {now} \
         AND (taken_until IS NULL OR taken_until <= {now})"
    )
}

/// The order a take reads ready rows in, the `_due` index's.
pub(crate) const TAKE_ORDER: &str = "ORDER BY available_at, entry";

/// The assignments that take a row (or dead-letter it when it has had
/// `$max` attempts): `$token` and `$until` mark the taking, and the row is
/// next available when its visibility ends.
pub(crate) fn take_assignments(max: &str, token: &str, until: &str, now: &str) -> String {
    format!(
        "dead = (attempts >= {max}), \
         dead_reason = CASE WHEN attempts >= {max} THEN '{LAST_ATTEMPT_TIMED_OUT}' END, \
         dead_at = CASE WHEN attempts >= {max} THEN {now} END, \
         attempts = CASE WHEN attempts >= {max} THEN attempts ELSE attempts + 1 END, \
         taken_token = CASE WHEN attempts >= {max} THEN NULL ELSE {token} END, \
         taken_until = CASE WHEN attempts >= {max} THEN NULL ELSE {until} END, \
         available_at = CASE WHEN attempts >= {max} THEN available_at ELSE {until} END"
    )
}
