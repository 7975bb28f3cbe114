//! [`SqlInbox`]: the SQLite and Postgres inbox and claim stores, written
//! once over [`SqlDatabase`]. What differs between the databases (how
//! writes commit, the accept, take and ack statements) is the
//! [`InboxBackend`] each implements, in `dedup/sqlite.rs` and
//! `dedup/postgres.rs`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::time::Duration;

use sqlx::{Database, Pool};

use super::write::{Want, Write, Written};
use super::{
    BuildAccept, BuildOnInbox, Statements, counts_schema, dead_reason_schema, meta_schema, schema,
    take_schema,
};
use crate::dedup::tail::{EventStatus, LATE_COMMIT_MILLIS, Position, Tail, TailedEvent};
use crate::dedup::{
    ACK_BATCH, Acceptance, Claim, DeadLetter, DedupError, EventMeta, GiveBack, Inbox, InboxEntry,
    InboxQueue, InboxStats, IncomingEvent, Lease, LeaseStore, NackOutcome, PURGE_BATCH, Receipt,
    StoreOptions, check_key, check_namespace, exactly_one, millis, new_token,
};
use crate::store::sql::{SqlDatabase, sql};

/// Claims and an inbox in SQL tables: on SQLite
/// ([`SqliteInbox`](crate::dedup::SqliteInbox)) or Postgres
/// ([`PostgresInbox`](crate::dedup::PostgresInbox)); their pages say how
/// each commits an accept and what tables [`migrate`](Self::migrate)
/// makes.
pub struct SqlInbox<DB: SqlDatabase> {
    pool: Pool<DB>,
    options: StoreOptions,
    statements: Statements,
    writes: DB::Writes,
}

impl<DB: SqlDatabase> Clone for SqlInbox<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            options: self.options.clone(),
            statements: self.statements.clone(),
            writes: self.writes.clone(),
        }
    }
}

impl<DB: SqlDatabase> std::fmt::Debug for SqlInbox<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlInbox")
            .field("pool", &self.pool)
            .field("options", &self.options)
            .field("statements", &self.statements)
            .finish_non_exhaustive()
    }
}

/// One database's side of [`SqlInbox`]: how its writes commit and the
/// statements that differ.
pub trait InboxBackend: Database {
    /// What runs the store's writes (SQLite's one writer, Postgres' accept
    /// batches).
    type Writes: Clone + Send + Sync;

    /// The accept statement, and the one for many events if there is one.
    const ACCEPT: (BuildAccept, Option<BuildAccept>);
    /// The take and the ack of many, given the inbox table.
    const ON_INBOX: (BuildOnInbox, BuildOnInbox);
    /// The triggers that keep `{inbox}_counts`, given the inbox table:
    /// see [`counts_schema`](super::counts_schema).
    const COUNT_TRIGGERS: fn(&str) -> Vec<String>;

    /// The writes of a store on `pool`, or `current` changed for new
    /// `options`.
    fn inbox_writes(
        pool: &Pool<Self>,
        statements: &Statements,
        options: &StoreOptions,
        current: Option<&Self::Writes>,
    ) -> Self::Writes;

    /// Runs one write: at once on the pool, or in the writer's next batch.
    fn write(
        pool: &Pool<Self>,
        writes: &Self::Writes,
        write: Write,
    ) -> impl Future<Output = Result<Written<Self::Row>, DedupError>> + Send;

    /// Accepts one event that passed the key checks.
    fn accept(
        writes: &Self::Writes,
        statements: &Statements,
        options: &StoreOptions,
        event: &IncomingEvent<'_>,
    ) -> impl Future<Output = Result<Acceptance, DedupError>> + Send;

    /// A task waking this process's workers of `namespace` on accepts
    /// other processes make into the inbox table `inbox`: see
    /// [`InboxQueue::watch_accepts`].
    fn watch_accepts(
        _pool: &Pool<Self>,
        _inbox: &str,
        _namespace: &str,
    ) -> Option<crate::dedup::AcceptWatch> {
        None
    }

    /// Acks `taken` (entries and tokens) in one statement; the entries
    /// acked, each with the token it was acked by.
    fn ack_many(
        pool: &Pool<Self>,
        writes: &Self::Writes,
        statements: &Statements,
        taken: &[(i64, &str)],
    ) -> impl Future<Output = Result<Vec<(i64, String)>, DedupError>> + Send;
}

/// A row a take returns: entry, event id, body, signed at, attempts,
/// dead, meta, received at.
type TakenRow = (
    i64,
    String,
    Vec<u8>,
    Option<i64>,
    i64,
    bool,
    Option<String>,
    i64,
);

/// A taken row without `dead`.
type EntryRow = (i64, String, Vec<u8>, Option<i64>, i64, Option<String>, i64);

/// A dead letter's row: an entry's, then its reason and time.
type DeadRow = (
    i64,
    String,
    Vec<u8>,
    Option<i64>,
    i64,
    Option<String>,
    Option<String>,
    Option<i64>,
    i64,
);

impl<DB: SqlDatabase> SqlInbox<DB> {
    /// A store on `pool` whose tables are `{prefix}_claims` and
    /// `{prefix}_inbox`. The prefix is 1 to 48 of `a-z 0-9 _`, starting
    /// with a letter. Call [`migrate`](Self::migrate) before use.
    ///
    /// The pool is used as you built it. On SQLite, `open` and `connect`
    /// also make the file durable (WAL, `synchronous=FULL`), wait up to
    /// 10 s for another connection's lock, and retry while another process
    /// switches a new file to WAL. A pool of your own must set
    /// `synchronous=FULL` (`migrate` refuses less), should use WAL and a
    /// busy timeout, and is best opened once the file exists.
    pub fn new(pool: Pool<DB>, prefix: &str) -> Result<Self, DedupError> {
        let statements = Statements::new(prefix, &DB::DIALECT, DB::ACCEPT, DB::ON_INBOX)?;
        let options = StoreOptions::default();
        Ok(Self {
            writes: DB::inbox_writes(&pool, &statements, &options, None),
            pool,
            options,
            statements,
        })
    }

    /// Uses `options` for retention, visibility timeout and attempts.
    #[must_use]
    pub fn with_options(mut self, options: StoreOptions) -> Self {
        self.writes = DB::inbox_writes(&self.pool, &self.statements, &options, Some(&self.writes));
        self.options = options;
        self
    }

    /// Creates or upgrades the tables and indexes. Safe to run from
    /// several processes at once, and while others serve traffic: when
    /// the recorded schema version is current it only reads; otherwise the
    /// migrators take turns (a transaction-scoped advisory lock on
    /// Postgres, an immediate transaction on SQLite).
    pub async fn migrate(&self) -> Result<(), DedupError> {
        let (claims, inbox) = (&self.statements.claims, &self.statements.inbox);
        for schema in [
            schema(claims, inbox, &DB::DIALECT),
            meta_schema(inbox, &DB::DIALECT),
            take_schema(inbox, &DB::DIALECT),
            dead_reason_schema(inbox, &DB::DIALECT),
            counts_schema(inbox, &DB::DIALECT, DB::COUNT_TRIGGERS),
        ] {
            DB::migrate(&self.pool, &schema).await?;
        }
        Ok(())
    }

    /// The store with the default prefix `hooklatch` on `pool`, its tables
    /// migrated.
    pub(crate) async fn migrated(pool: Pool<DB>) -> Result<Self, DedupError> {
        let store = Self::new(pool, "hooklatch")?;
        store.migrate().await?;
        Ok(store)
    }

    /// The connection pool.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Claims `id` in `namespace` inside the caller's transaction (or on a
    /// connection), without enqueueing: the caller enqueues into its own
    /// table in the same transaction, and both commit or neither does.
    pub async fn claim_in(
        &self,
        connection: &mut DB::Connection,
        namespace: &str,
        id: &str,
    ) -> Result<Acceptance, DedupError> {
        check_key(namespace, id)?;
        let inserted = sql::<DB>(&self.statements.claim_done)
            .bind(namespace)
            .bind(id)
            .bind(self.retention_ms())
            .execute(connection)
            .await?;
        Ok(if inserted == 1 {
            Acceptance::Accepted
        } else {
            Acceptance::Duplicate
        })
    }

    /// Deletes done claims older than `older_than`, and never one younger
    /// than the retention
    /// ([`StoreOptions::with_retention`](crate::dedup::StoreOptions::with_retention)):
    /// a claim inside the dedup window is what keeps a provider's retry
    /// out. Returns how many. It deletes in batches of
    /// [`PURGE_BATCH`](crate::dedup::PURGE_BATCH) rows, each its own short
    /// transaction, so a large purge holds no long locks and accepts go on
    /// meanwhile. A failure stops it; what was deleted stays deleted, and
    /// the next purge goes on from there.
    pub async fn purge(&self, older_than: Duration) -> Result<u64, DedupError> {
        let older_than = older_than.max(self.options.retention());
        let mut purged = 0;
        loop {
            let deleted = self
                .write(
                    Write::new(self.statements.purge_claims.clone(), Want::Affected)
                        .int(millis(older_than))
                        .int(i64::try_from(PURGE_BATCH).unwrap_or(i64::MAX)),
                )
                .await?
                .affected();
            purged += deleted;
            if deleted < PURGE_BATCH {
                return Ok(purged);
            }
        }
    }

    async fn write(&self, write: Write) -> Result<Written<DB::Row>, DedupError> {
        DB::write(&self.pool, &self.writes, write).await
    }

    fn retention_ms(&self) -> i64 {
        millis(self.options.retention())
    }

    fn visibility_ms(&self) -> i64 {
        millis(self.options.visibility_timeout())
    }

    /// Runs a statement fenced by the lease's token (binds namespace, id,
    /// token, then `ms` where given) on the row it still holds.
    async fn on_lease(
        &self,
        statement: &sqlx::SqlStr,
        lease: &Lease,
        ms: Option<i64>,
    ) -> Result<(), DedupError> {
        let mut write = Write::new(statement.clone(), Want::Affected)
            .text(lease.namespace())
            .text(lease.id())
            .text(lease.token());
        if let Some(ms) = ms {
            write = write.int(ms);
        }
        let rows = self.write(write).await?.affected();
        exactly_one(rows, DedupError::LeaseLost)
    }
}

/// The entry a receipt names, parsed; a receipt this store never issued
/// is a lost delivery.
fn entry_of(delivery: &InboxEntry) -> Result<i64, DedupError> {
    delivery
        .receipt
        .entry
        .parse()
        .map_err(|_| DedupError::DeliveryLost)
}

/// The delivery a row describes, under the take's `token`.
fn delivery(
    namespace: &str,
    (entry, id, body, signed_at, attempts, meta, received_at): EntryRow,
    token: &str,
    dead: Option<DeadLetter>,
) -> InboxEntry {
    InboxEntry {
        dead,
        namespace: namespace.to_owned(),
        id,
        body,
        signed_at,
        attempt: u32::try_from(attempts).unwrap_or(u32::MAX),
        meta: EventMeta::from_text(meta.as_deref()),
        received_at_millis: Some(received_at),
        receipt: Receipt {
            entry: entry.to_string(),
            token: token.to_owned(),
        },
    }
}

impl<DB: SqlDatabase> Inbox for SqlInbox<DB> {
    async fn accept(&self, event: &IncomingEvent<'_>) -> Result<Acceptance, DedupError> {
        check_key(event.namespace, event.id)?;
        let acceptance = DB::accept(&self.writes, &self.statements, &self.options, event).await?;
        if acceptance == Acceptance::Accepted {
            crate::dedup::wake_workers(event.namespace);
        }
        Ok(acceptance)
    }
}

impl<DB: SqlDatabase> InboxQueue for SqlInbox<DB> {
    async fn take(
        &self,
        namespace: &str,
        _consumer: &str,
        max: usize,
    ) -> Result<Vec<InboxEntry>, DedupError> {
        check_namespace(namespace)?;
        let token = new_token();
        let rows = self
            .write(
                Write::new(self.statements.take.clone(), Want::Rows)
                    .text(namespace)
                    .int(i64::try_from(max).unwrap_or(i64::MAX))
                    .int(i64::from(self.options.max_attempts()))
                    .text(&token)
                    .int(self.visibility_ms()),
            )
            .await?
            .rows();
        // The rows dead-lettered by this take are not handed out.
        let mut taken = Vec::with_capacity(rows.len());
        for row in &rows {
            let (entry, id, body, signed_at, attempts, dead, meta, received_at) =
                DB::decode::<TakenRow>(row)?;
            if !dead {
                let row = (entry, id, body, signed_at, attempts, meta, received_at);
                taken.push(delivery(namespace, row, &token, None));
            }
        }
        taken.sort_by_key(|d| d.receipt.entry.parse::<i64>().unwrap_or(0));
        Ok(taken)
    }

    async fn ack(&self, delivery: &InboxEntry) -> Result<(), DedupError> {
        let write = Write::new(self.statements.ack.clone(), Want::Affected)
            .int(entry_of(delivery)?)
            .text(&delivery.receipt.token);
        let deleted = self.write(write).await?.affected();
        exactly_one(deleted, DedupError::DeliveryLost)
    }

    async fn ack_many(&self, deliveries: &[InboxEntry]) -> Result<Vec<bool>, DedupError> {
        // A receipt this store never issued is lost, not an error.
        let taken: Vec<(i64, &str)> = deliveries
            .iter()
            .filter_map(|d| Some((entry_of(d).ok()?, d.receipt.token.as_str())))
            .collect();
        // Each row is deleted once, so it comes back once, with the one
        // token it held.
        let mut acked = HashMap::with_capacity(taken.len());
        for chunk in taken.chunks(ACK_BATCH) {
            acked.extend(DB::ack_many(&self.pool, &self.writes, &self.statements, chunk).await?);
        }
        // The same delivery twice in a call is acked for its first.
        Ok(deliveries
            .iter()
            .map(|delivery| {
                entry_of(delivery).is_ok_and(|entry| {
                    let held = acked
                        .get(&entry)
                        .is_some_and(|token: &String| *token == delivery.receipt.token);
                    if held {
                        acked.remove(&entry);
                    }
                    held
                })
            })
            .collect())
    }

    async fn extend_visibility(&self, delivery: &InboxEntry) -> Result<(), DedupError> {
        let write = Write::new(self.statements.extend_taken.clone(), Want::Affected)
            .int(entry_of(delivery)?)
            .text(&delivery.receipt.token)
            .int(self.visibility_ms());
        let updated = self.write(write).await?.affected();
        exactly_one(updated, DedupError::DeliveryLost)
    }

    async fn give_back(
        &self,
        delivery: &InboxEntry,
        how: GiveBack,
        reason: &str,
    ) -> Result<NackOutcome, DedupError> {
        let (max_attempts, retry_in) = match how {
            GiveBack::Retry(retry_in) => (self.options.max_attempts(), retry_in),
            GiveBack::DeadLetter => (0, Duration::ZERO),
        };
        let rows = self
            .write(
                Write::new(self.statements.nack.clone(), Want::Rows)
                    .int(entry_of(delivery)?)
                    .text(&delivery.receipt.token)
                    .int(i64::from(max_attempts))
                    .int(millis(retry_in))
                    .text(reason),
            )
            .await?
            .rows();
        match rows.first().map(DB::decode::<(bool,)>).transpose()? {
            None => Err(DedupError::DeliveryLost),
            Some((true,)) => Ok(NackOutcome::DeadLettered),
            Some((false,)) => Ok(NackOutcome::WillRetry),
        }
    }

    fn visibility_timeout(&self) -> Duration {
        self.options.visibility_timeout()
    }

    fn watch_accepts(&self, namespace: &str) -> Option<crate::dedup::AcceptWatch> {
        DB::watch_accepts(&self.pool, &self.statements.inbox, namespace)
    }

    async fn dead_letters(
        &self,
        namespace: &str,
        max: usize,
    ) -> Result<Vec<InboxEntry>, DedupError> {
        check_namespace(namespace)?;
        let rows: Vec<DeadRow> = sql::<DB>(&self.statements.dead_letters)
            .bind(namespace)
            .bind(i64::try_from(max).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(
                |(entry, id, body, signed_at, attempts, meta, reason, at, received_at)| {
                    let row = (entry, id, body, signed_at, attempts, meta, received_at);
                    delivery(
                        namespace,
                        row,
                        "",
                        Some(DeadLetter::new(reason.unwrap_or_default(), at)),
                    )
                },
            )
            .collect())
    }

    async fn stats(&self, namespace: &str) -> Result<InboxStats, DedupError> {
        check_namespace(namespace)?;
        let (total, dead, taken): (i64, i64, i64) = sql::<DB>(&self.statements.stats)
            .bind(namespace)
            .fetch_one(&self.pool)
            .await?;
        let count = |n: i64| n.max(0).unsigned_abs();
        let (total, dead, taken) = (count(total), count(dead), count(taken));
        Ok(InboxStats {
            // Never below zero, even if someone edited the counts by hand.
            waiting: total.saturating_sub(dead).saturating_sub(taken),
            taken,
            dead,
        })
    }

    async fn tail(&self, tail: &mut Tail, max: usize) -> Result<Vec<TailedEvent>, DedupError> {
        check_namespace(&tail.namespace)?;
        let Position::Timed {
            started,
            after,
            returned,
            returned_ids,
        } = &mut tail.position
        else {
            let (now,): (i64,) = sql::<DB>(&self.statements.now)
                .fetch_one(&self.pool)
                .await?;
            tail.position = Position::Timed {
                started: now,
                after: now,
                returned: VecDeque::new(),
                returned_ids: HashSet::new(),
            };
            return Ok(Vec::new());
        };
        // Reading from the late-commit window on, those returned already
        // come first or among the first: `returned.len() + max` rows hold
        // at least `max` new ones, if there are that many.
        let from = after.saturating_sub(LATE_COMMIT_MILLIS).max(*started);
        let limit = returned.len().saturating_add(max);
        let claims: Vec<(String, i64, i64)> = sql::<DB>(&self.statements.tail_claims)
            .bind(&tail.namespace)
            .bind(from)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        let mut fresh = Vec::new();
        for (id, claimed_at, leased) in claims {
            if fresh.len() == max {
                break;
            }
            *after = (*after).max(claimed_at);
            if returned_ids.insert(id.clone()) {
                returned.push_back((claimed_at, id.clone()));
                fresh.push((id, claimed_at, leased == 1));
            }
        }
        while let Some((claimed_at, _)) = returned.front()
            && *claimed_at < after.saturating_sub(LATE_COMMIT_MILLIS)
        {
            if let Some((_, id)) = returned.pop_front() {
                returned_ids.remove(&id);
            }
        }
        let Some(earliest) = fresh.iter().map(|(_, claimed_at, _)| *claimed_at).min() else {
            return Ok(Vec::new());
        };
        let ids: Vec<&str> = fresh.iter().map(|(id, _, _)| id.as_str()).collect();
        let rows: Vec<(String, Option<String>, i64, i64)> = sql::<DB>(&self.statements.tail_inbox)
            .bind(&tail.namespace)
            .bind(serde_json::to_string(&ids).unwrap_or_default())
            .bind(earliest)
            .fetch_all(&self.pool)
            .await?;
        let mut rows: HashMap<String, (Option<String>, i64, i64)> = rows
            .into_iter()
            .map(|(id, meta, attempts, state)| (id, (meta, attempts, state)))
            .collect();
        Ok(fresh
            .into_iter()
            .map(|(id, claimed_at, leased)| {
                let row = rows.remove(&id);
                let status = match &row {
                    Some((_, _, 2)) => EventStatus::Dead,
                    Some((_, _, 1)) => EventStatus::Taken,
                    Some((_, attempts, _)) if *attempts > 0 => EventStatus::Retrying,
                    Some(_) => EventStatus::Waiting,
                    None if leased => EventStatus::Taken,
                    None => EventStatus::Done,
                };
                let mut event = TailedEvent::new(&tail.namespace, &id, status);
                event.event_type =
                    row.and_then(|(meta, _, _)| EventMeta::from_text(meta.as_deref()).event_type);
                event.accepted_at_millis = Some(claimed_at);
                event
            })
            .collect())
    }

    async fn requeue_dead(&self, namespace: &str, id: Option<&str>) -> Result<u64, DedupError> {
        check_namespace(namespace)?;
        let requeued = self
            .write(
                Write::new(self.statements.requeue_dead.clone(), Want::Affected)
                    .text(namespace)
                    .opt_text(id),
            )
            .await?
            .affected();
        if requeued > 0 {
            crate::dedup::wake_workers(namespace);
        }
        Ok(requeued)
    }
}

impl<DB: SqlDatabase> LeaseStore for SqlInbox<DB> {
    async fn claim(
        &self,
        namespace: &str,
        id: &str,
        lease_for: Duration,
    ) -> Result<Claim, DedupError> {
        check_key(namespace, id)?;
        // A claim released between the insert and the read is gone: try
        // again, a few times.
        for _ in 0..3 {
            let token = new_token();
            let inserted = self
                .write(
                    Write::new(self.statements.claim_lease.clone(), Want::Affected)
                        .text(namespace)
                        .text(id)
                        .int(self.retention_ms())
                        .text(&token)
                        .int(millis(lease_for)),
                )
                .await?
                .affected();
            if inserted == 1 {
                return Ok(Claim::Fresh(Lease::new(namespace, id, token)));
            }
            let existing: Option<(Option<String>, Option<i64>)> =
                sql::<DB>(&self.statements.read_claim)
                    .bind(namespace)
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?;
            match existing {
                Some((None, _)) => return Ok(Claim::Done),
                Some((Some(_), left)) => {
                    let left = left.unwrap_or(0).max(0);
                    return Ok(Claim::InProgress {
                        retry_after: Duration::from_millis(left.unsigned_abs()),
                    });
                }
                None => continue,
            }
        }
        Ok(Claim::InProgress {
            retry_after: Duration::from_secs(1),
        })
    }

    async fn complete(&self, lease: &Lease) -> Result<(), DedupError> {
        self.on_lease(&self.statements.complete, lease, None).await
    }

    async fn extend_lease(&self, lease: &Lease, lease_for: Duration) -> Result<(), DedupError> {
        let lease_ms = Some(millis(lease_for));
        self.on_lease(&self.statements.extend_lease, lease, lease_ms)
            .await
    }

    async fn release(&self, lease: &Lease) -> Result<(), DedupError> {
        self.on_lease(&self.statements.release, lease, None).await
    }
}
