//! SQL shared by the SQLite and Postgres stores: table names and statements.
//!
//! Times are milliseconds since the Unix epoch in `BIGINT` columns, read
//! from the database's own clock inside each statement (the dialect's
//! `now`), so that every client of a shared store decides expiry on one
//! clock whatever its own says. Statements take durations, never times.
//! A claim row whose `lease_token` is NULL is done; otherwise a lease holds
//! it until `lease_until`.

use sqlx::SqlStr;

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

/// The statements a SQL store runs, for one table prefix: those both
/// dialects share, and each dialect's own atomic accept and take.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    /// `{prefix}_claims`.
    pub(crate) claims: String,
    /// `{prefix}_inbox`.
    pub(crate) inbox: String,
    /// $1 namespace, $2 id, $3 retention ms, $4 body, $5 signed at.
    /// Claims as done and enqueues, or does neither.
    pub(crate) accept: SqlStr,
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
    /// $1 entry, $2 token, $3 visibility ms.
    pub(crate) extend_taken: SqlStr,
    /// $1 entry, $2 token, $3 max attempts, $4 retry in ms. Returns dead.
    pub(crate) nack: SqlStr,
    /// $1 namespace, $2 limit.
    pub(crate) dead_letters: SqlStr,
    /// $1 older than ms, $2 batch size.
    pub(crate) purge_claims: SqlStr,
}

impl Statements {
    /// The statements on `{prefix}_claims` and `{prefix}_inbox` in
    /// `dialect`, with the dialect's `accept` (given the claim-as-done
    /// statement and the inbox table) and `take` (given the inbox table).
    pub(crate) fn new(
        prefix: &str,
        dialect: &Dialect,
        accept: fn(claim_done: &str, inbox: &str) -> String,
        take: fn(inbox: &str) -> String,
    ) -> Result<Self, super::DedupError> {
        super::check_prefix(prefix)?;
        let claims = format!("{prefix}_claims");
        let inbox = format!("{prefix}_inbox");
        let now = dialect.now;
        let claim_done = format!(
            "INSERT INTO {claims} (namespace, event_id, claimed_at) VALUES ($1, $2, {now}) \
             ON CONFLICT (namespace, event_id) DO UPDATE \
             SET claimed_at = excluded.claimed_at, lease_token = NULL, lease_until = NULL \
             WHERE {claims}.lease_token IS NULL AND {claims}.claimed_at < {now} - $3"
        );
        Ok(Self {
            accept: statement(accept(&claim_done, &inbox)),
            take: statement(take(&inbox)),
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
                "UPDATE {inbox} SET taken_until = {now} + $3 \
                 WHERE entry = $1 AND taken_token = $2 AND NOT dead"
            )),
            nack: statement(format!(
                "UPDATE {inbox} SET taken_token = NULL, taken_until = NULL, \
                 dead = (attempts >= $3), available_at = {now} + $4 \
                 WHERE entry = $1 AND taken_token = $2 AND NOT dead RETURNING dead"
            )),
            dead_letters: statement(format!(
                "SELECT entry, event_id, body, signed_at, attempts FROM {inbox} \
                 WHERE namespace = $1 AND dead ORDER BY entry LIMIT $2"
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
            claims,
            inbox,
        })
    }
}

/// The condition for an inbox row a worker may take at time `now`.
pub(crate) fn ready_condition(namespace: &str, now: &str) -> String {
    format!(
        "namespace = {namespace} AND NOT dead AND available_at <= {now} \
         AND (taken_until IS NULL OR taken_until <= {now})"
    )
}

/// The assignments that take a row (or dead-letter it when it has had
/// `$max` attempts): `$token` and `$until` mark the taking.
pub(crate) fn take_assignments(max: &str, token: &str, until: &str) -> String {
    format!(
        "dead = (attempts >= {max}), \
         attempts = CASE WHEN attempts >= {max} THEN attempts ELSE attempts + 1 END, \
         taken_token = CASE WHEN attempts >= {max} THEN NULL ELSE {token} END, \
         taken_until = CASE WHEN attempts >= {max} THEN NULL ELSE {until} END"
    )
}

/// The parts of the SQLite and Postgres stores that differ only in the
/// database type: claiming in the caller's transaction, purging, the whole
/// [`Inbox`](super::Inbox) but its atomic accept step (each store's
/// `accept_event`), and the whole [`LeaseStore`](super::LeaseStore).
///
/// `$store` must have the fields `pool`, `options` and `statements`;
/// `$dialect` and `$migrate` are the database's `Dialect` and versioned
/// migration, and the module must have the dialect's `accept_statement`
/// and `take_statement`.
macro_rules! sql_store_common {
    ($store:ty, $connection:ty, $row:ty, $dialect:expr, $migrate:path) => {
        impl $store {
            /// A store on `pool` whose tables are `{prefix}_claims` and
            /// `{prefix}_inbox`. The prefix is 1 to 48 of `a-z 0-9 _`,
            /// starting with a letter. Call [`migrate`](Self::migrate) before
            /// use.
            pub fn new(
                pool: sqlx::Pool<<$connection as sqlx::Connection>::Database>,
                prefix: &str,
            ) -> Result<Self, $crate::dedup::DedupError> {
                let statements = $crate::dedup::sql::Statements::new(
                    prefix,
                    &$dialect,
                    accept_statement,
                    take_statement,
                )?;
                Ok(Self {
                    pool,
                    options: $crate::dedup::StoreOptions::default(),
                    statements,
                })
            }

            /// Creates or upgrades the tables and indexes. Safe to run from
            /// several processes at once, and while others serve traffic:
            /// when the recorded schema version is current it only reads;
            /// otherwise the migrators take turns (a transaction-scoped
            /// advisory lock on Postgres, an immediate transaction on
            /// SQLite).
            pub async fn migrate(&self) -> Result<(), $crate::dedup::DedupError> {
                let statements = &self.statements;
                let schema =
                    $crate::dedup::sql::schema(&statements.claims, &statements.inbox, &$dialect);
                Ok($migrate(&self.pool, &schema).await?)
            }

            /// The store with the default prefix `hooklatch` on `pool`, its
            /// tables migrated.
            async fn migrated(
                pool: sqlx::Pool<<$connection as sqlx::Connection>::Database>,
            ) -> Result<Self, $crate::dedup::DedupError> {
                let store = Self::new(pool, "hooklatch")?;
                store.migrate().await?;
                Ok(store)
            }

            /// Uses `options` for retention, visibility timeout and attempts.
            #[must_use]
            pub fn with_options(mut self, options: $crate::dedup::StoreOptions) -> Self {
                self.options = options;
                self
            }

            /// The connection pool.
            pub fn pool(&self) -> &sqlx::Pool<<$connection as sqlx::Connection>::Database> {
                &self.pool
            }

            /// Claims `id` in `namespace` inside the caller's transaction (or
            /// on a connection), without enqueueing: the caller enqueues into
            /// its own table in the same transaction, and both commit or
            /// neither does.
            pub async fn claim_in(
                &self,
                connection: &mut $connection,
                namespace: &str,
                id: &str,
            ) -> Result<$crate::dedup::Acceptance, $crate::dedup::DedupError> {
                $crate::dedup::check_key(namespace, id)?;
                let inserted = sqlx::query(self.statements.claim_done.clone())
                    .bind(namespace)
                    .bind(id)
                    .bind(self.retention_ms())
                    .execute(connection)
                    .await?
                    .rows_affected();
                Ok(if inserted == 1 {
                    $crate::dedup::Acceptance::Accepted
                } else {
                    $crate::dedup::Acceptance::Duplicate
                })
            }

            /// Deletes done claims older than `older_than` (use the
            /// retention); returns how many. It deletes in batches of
            /// [`PURGE_BATCH`](crate::dedup::PURGE_BATCH) rows, each its own
            /// short transaction, so a large purge holds no long locks and
            /// accepts go on meanwhile. A failure stops it; what was deleted
            /// stays deleted, and the next purge goes on from there.
            pub async fn purge(
                &self,
                older_than: std::time::Duration,
            ) -> Result<u64, $crate::dedup::DedupError> {
                let batch = $crate::dedup::PURGE_BATCH;
                let mut purged = 0;
                loop {
                    let deleted = sqlx::query(self.statements.purge_claims.clone())
                        .bind($crate::dedup::millis(older_than))
                        .bind(i64::try_from(batch).unwrap_or(i64::MAX))
                        .execute(&self.pool)
                        .await?
                        .rows_affected();
                    purged += deleted;
                    if deleted < batch {
                        return Ok(purged);
                    }
                }
            }

            fn retention_ms(&self) -> i64 {
                $crate::dedup::millis(self.options.retention())
            }

            fn visibility_ms(&self) -> i64 {
                $crate::dedup::millis(self.options.visibility_timeout())
            }

            async fn extend_row(
                &self,
                delivery: &$crate::dedup::InboxEntry,
            ) -> Result<(), $crate::dedup::DedupError> {
                let updated = sqlx::query(self.statements.extend_taken.clone())
                    .bind(Self::entry_of(delivery)?)
                    .bind(&delivery.receipt.token)
                    .bind(self.visibility_ms())
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                $crate::dedup::exactly_one(updated, $crate::dedup::DedupError::DeliveryLost)
            }

            fn delivery(
                namespace: &str,
                row: &$row,
                token: &str,
            ) -> Result<$crate::dedup::InboxEntry, $crate::dedup::DedupError> {
                use sqlx::Row as _;
                let entry: i64 = row.try_get("entry")?;
                let attempts: i64 = row.try_get("attempts")?;
                Ok($crate::dedup::InboxEntry {
                    namespace: namespace.to_owned(),
                    id: row.try_get("event_id")?,
                    body: row.try_get("body")?,
                    signed_at: row.try_get("signed_at")?,
                    attempt: u32::try_from(attempts).unwrap_or(u32::MAX),
                    receipt: $crate::dedup::Receipt {
                        entry: entry.to_string(),
                        token: token.to_owned(),
                    },
                })
            }

            /// Keeps the rows a take returned that were not dead-lettered,
            /// oldest first.
            fn taken(
                namespace: &str,
                rows: &[$row],
                token: &str,
            ) -> Result<Vec<$crate::dedup::InboxEntry>, $crate::dedup::DedupError> {
                use sqlx::Row as _;
                let mut deliveries = Vec::with_capacity(rows.len());
                for row in rows {
                    if !row.try_get::<bool, _>("dead")? {
                        deliveries.push(Self::delivery(namespace, row, token)?);
                    }
                }
                deliveries.sort_by_key(|d| d.receipt.entry.parse::<i64>().unwrap_or(0));
                Ok(deliveries)
            }

            fn entry_of(
                delivery: &$crate::dedup::InboxEntry,
            ) -> Result<i64, $crate::dedup::DedupError> {
                delivery
                    .receipt
                    .entry
                    .parse()
                    .map_err(|_| $crate::dedup::DedupError::DeliveryLost)
            }

            async fn ack_row(
                &self,
                delivery: &$crate::dedup::InboxEntry,
            ) -> Result<(), $crate::dedup::DedupError> {
                let deleted = sqlx::query(self.statements.ack.clone())
                    .bind(Self::entry_of(delivery)?)
                    .bind(&delivery.receipt.token)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
                $crate::dedup::exactly_one(deleted, $crate::dedup::DedupError::DeliveryLost)
            }

            async fn nack_row(
                &self,
                delivery: &$crate::dedup::InboxEntry,
                retry_in: std::time::Duration,
            ) -> Result<$crate::dedup::NackOutcome, $crate::dedup::DedupError> {
                let dead: Option<bool> = sqlx::query_scalar(self.statements.nack.clone())
                    .bind(Self::entry_of(delivery)?)
                    .bind(&delivery.receipt.token)
                    .bind(i64::from(self.options.max_attempts()))
                    .bind($crate::dedup::millis(retry_in))
                    .fetch_optional(&self.pool)
                    .await?;
                match dead {
                    None => Err($crate::dedup::DedupError::DeliveryLost),
                    Some(true) => Ok($crate::dedup::NackOutcome::DeadLettered),
                    Some(false) => Ok($crate::dedup::NackOutcome::WillRetry),
                }
            }

            async fn dead_rows(
                &self,
                namespace: &str,
                max: usize,
            ) -> Result<Vec<$crate::dedup::InboxEntry>, $crate::dedup::DedupError> {
                $crate::dedup::check_namespace(namespace)?;
                let rows = sqlx::query(self.statements.dead_letters.clone())
                    .bind(namespace)
                    .bind(i64::try_from(max).unwrap_or(i64::MAX))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter()
                    .map(|row| Self::delivery(namespace, row, ""))
                    .collect()
            }
        }

        impl $crate::dedup::Inbox for $store {
            async fn accept(
                &self,
                event: &$crate::dedup::IncomingEvent<'_>,
            ) -> Result<$crate::dedup::Acceptance, $crate::dedup::DedupError> {
                self.accept_event(event).await
            }

            async fn take(
                &self,
                namespace: &str,
                _consumer: &str,
                max: usize,
            ) -> Result<Vec<$crate::dedup::InboxEntry>, $crate::dedup::DedupError> {
                $crate::dedup::check_namespace(namespace)?;
                let token = $crate::store::new_token();
                let rows = sqlx::query(self.statements.take.clone())
                    .bind(namespace)
                    .bind(i64::try_from(max).unwrap_or(i64::MAX))
                    .bind(i64::from(self.options.max_attempts()))
                    .bind(&token)
                    .bind(self.visibility_ms())
                    .fetch_all(&self.pool)
                    .await?;
                Self::taken(namespace, &rows, &token)
            }

            async fn ack(
                &self,
                delivery: &$crate::dedup::InboxEntry,
            ) -> Result<(), $crate::dedup::DedupError> {
                self.ack_row(delivery).await
            }

            async fn extend_visibility(
                &self,
                delivery: &$crate::dedup::InboxEntry,
            ) -> Result<(), $crate::dedup::DedupError> {
                self.extend_row(delivery).await
            }

            async fn nack(
                &self,
                delivery: &$crate::dedup::InboxEntry,
                retry_in: std::time::Duration,
            ) -> Result<$crate::dedup::NackOutcome, $crate::dedup::DedupError> {
                self.nack_row(delivery, retry_in).await
            }

            async fn dead_letters(
                &self,
                namespace: &str,
                max: usize,
            ) -> Result<Vec<$crate::dedup::InboxEntry>, $crate::dedup::DedupError> {
                self.dead_rows(namespace, max).await
            }
        }

        impl $crate::dedup::LeaseStore for $store {
            async fn claim(
                &self,
                namespace: &str,
                id: &str,
                lease_for: std::time::Duration,
            ) -> Result<$crate::dedup::Claim, $crate::dedup::DedupError> {
                use $crate::dedup::{Claim, Lease, millis, new_token};
                $crate::dedup::check_key(namespace, id)?;
                let mut connection = self.pool.acquire().await?;
                // A claim released between the insert and the read is gone:
                // try again, a few times.
                for _ in 0..3 {
                    let token = new_token();
                    let inserted = sqlx::query(self.statements.claim_lease.clone())
                        .bind(namespace)
                        .bind(id)
                        .bind(self.retention_ms())
                        .bind(&token)
                        .bind(millis(lease_for))
                        .execute(&mut *connection)
                        .await?
                        .rows_affected();
                    if inserted == 1 {
                        return Ok(Claim::Fresh(Lease::new(namespace, id, token)));
                    }
                    let existing: Option<(Option<String>, Option<i64>)> =
                        sqlx::query_as(self.statements.read_claim.clone())
                            .bind(namespace)
                            .bind(id)
                            .fetch_optional(&mut *connection)
                            .await?;
                    match existing {
                        Some((None, _)) => return Ok(Claim::Done),
                        Some((Some(_), left)) => {
                            let left = left.unwrap_or(0).max(0);
                            return Ok(Claim::InProgress {
                                retry_after: std::time::Duration::from_millis(left.unsigned_abs()),
                            });
                        }
                        None => continue,
                    }
                }
                Ok(Claim::InProgress {
                    retry_after: std::time::Duration::from_secs(1),
                })
            }

            async fn complete(
                &self,
                lease: &$crate::dedup::Lease,
            ) -> Result<(), $crate::dedup::DedupError> {
                self.on_lease(self.statements.complete.clone(), lease, None)
                    .await
            }

            async fn extend_lease(
                &self,
                lease: &$crate::dedup::Lease,
                lease_for: std::time::Duration,
            ) -> Result<(), $crate::dedup::DedupError> {
                let lease_ms = Some($crate::dedup::millis(lease_for));
                self.on_lease(self.statements.extend_lease.clone(), lease, lease_ms)
                    .await
            }

            async fn release(
                &self,
                lease: &$crate::dedup::Lease,
            ) -> Result<(), $crate::dedup::DedupError> {
                self.on_lease(self.statements.release.clone(), lease, None)
                    .await
            }
        }

        impl $store {
            /// Runs a statement fenced by the lease's token (binds namespace,
            /// id, token, then `ms` where given) on the row it still holds.
            async fn on_lease(
                &self,
                statement: sqlx::SqlStr,
                lease: &$crate::dedup::Lease,
                ms: Option<i64>,
            ) -> Result<(), $crate::dedup::DedupError> {
                let mut query = sqlx::query(statement)
                    .bind(lease.namespace())
                    .bind(lease.id())
                    .bind(lease.token());
                if let Some(ms) = ms {
                    query = query.bind(ms);
                }
                let rows = query.execute(&self.pool).await?.rows_affected();
                $crate::dedup::exactly_one(rows, $crate::dedup::DedupError::LeaseLost)
            }
        }
    };
}

pub(crate) use sql_store_common;
