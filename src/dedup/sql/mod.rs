//! The SQLite and Postgres inbox stores, written once: the tables and
//! statements ([`statements`]), and the methods and trait impls that differ
//! only in the database type (the `sql_store_common!` macro).

mod statements;
pub(crate) mod write;

pub(crate) use statements::{
    AcceptParts, BuildAccept, Statements, TAKE_ORDER, meta_schema, ready_condition, schema,
    take_assignments, take_schema,
};

/// The parts of the SQLite and Postgres stores that differ only in the
/// database type: claiming in the caller's transaction, purging, the whole
/// [`InboxQueue`](super::InboxQueue) and [`Inbox`](super::Inbox) but how
/// accepts commit, and the whole
/// [`LeaseStore`](super::LeaseStore).
///
/// `$store` must have the fields `pool`, `options` and `statements`, and
/// the methods `write` (runs a [`write::Write`]: on the pool for Postgres,
/// through the one writer for SQLite) and `accept_event`;
/// `$dialect` and `$migrate` are the database's `Dialect` and versioned
/// migration, and the module must have the dialect's `ACCEPT` (its
/// accept statement, and its accept of many events if it has one),
/// `take_statement`, `ack_many_statement` and `ack_many_rows`.
macro_rules! sql_store_common {
    ($store:ty, $connection:ty, $row:ty, $dialect:expr, $migrate:path) => {
        impl $store {
            /// A store on `pool` whose tables are `{prefix}_claims` and
            /// `{prefix}_inbox`. The prefix is 1 to 48 of `a-z 0-9 _`,
            /// starting with a letter. Call [`migrate`](Self::migrate) before
            /// use.
            ///
            /// The pool is used as you built it. On SQLite, `open` and
            /// `connect` also make the file durable (WAL,
            /// `synchronous=FULL`), wait up to 10 s for another
            /// connection's lock, and retry while another process switches
            /// a new file to WAL. A pool of your own must set
            /// `synchronous=FULL` (`migrate` refuses less), should use WAL
            /// and a busy timeout, and is best opened once the file exists.
            pub fn new(
                pool: sqlx::Pool<<$connection as sqlx::Connection>::Database>,
                prefix: &str,
            ) -> Result<Self, $crate::dedup::DedupError> {
                let statements = $crate::dedup::sql::Statements::new(
                    prefix,
                    &$dialect,
                    ACCEPT,
                    (take_statement, ack_many_statement),
                )?;
                Ok(Self::assemble(pool, statements))
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
                $migrate(&self.pool, &schema).await?;
                let meta = $crate::dedup::sql::meta_schema(&statements.inbox, &$dialect);
                $migrate(&self.pool, &meta).await?;
                let take = $crate::dedup::sql::take_schema(&statements.inbox, &$dialect);
                Ok($migrate(&self.pool, &take).await?)
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

            /// Deletes done claims older than `older_than`, and never one
            /// younger than the retention ([`StoreOptions::with_retention`](crate::dedup::StoreOptions::with_retention)):
            /// a claim inside the dedup window is what keeps a provider's
            /// retry out. Returns how many. It deletes in batches of
            /// [`PURGE_BATCH`](crate::dedup::PURGE_BATCH) rows, each its own
            /// short transaction, so a large purge holds no long locks and
            /// accepts go on meanwhile. A failure stops it; what was deleted
            /// stays deleted, and the next purge goes on from there.
            pub async fn purge(
                &self,
                older_than: std::time::Duration,
            ) -> Result<u64, $crate::dedup::DedupError> {
                let batch = $crate::dedup::PURGE_BATCH;
                let older_than = older_than.max(self.options.retention());
                let mut purged = 0;
                loop {
                    let deleted = self
                        .write(
                            $crate::dedup::sql::write::Write::new(
                                self.statements.purge_claims.clone(),
                                $crate::dedup::sql::write::Want::Affected,
                            )
                            .int($crate::dedup::millis(older_than))
                            .int(i64::try_from(batch).unwrap_or(i64::MAX)),
                        )
                        .await?
                        .affected();
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
                let updated = self
                    .write(
                        $crate::dedup::sql::write::Write::new(
                            self.statements.extend_taken.clone(),
                            $crate::dedup::sql::write::Want::Affected,
                        )
                        .int(Self::entry_of(delivery)?)
                        .text(&delivery.receipt.token)
                        .int(self.visibility_ms()),
                    )
                    .await?
                    .affected();
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
                    meta: $crate::dedup::EventMeta::from_text(
                        row.try_get::<Option<String>, _>("meta")?.as_deref(),
                    ),
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
                let deleted = self
                    .write(
                        $crate::dedup::sql::write::Write::new(
                            self.statements.ack.clone(),
                            $crate::dedup::sql::write::Want::Affected,
                        )
                        .int(Self::entry_of(delivery)?)
                        .text(&delivery.receipt.token),
                    )
                    .await?
                    .affected();
                $crate::dedup::exactly_one(deleted, $crate::dedup::DedupError::DeliveryLost)
            }

            async fn nack_row(
                &self,
                delivery: &$crate::dedup::InboxEntry,
                retry_in: std::time::Duration,
            ) -> Result<$crate::dedup::NackOutcome, $crate::dedup::DedupError> {
                use sqlx::Row as _;
                let rows = self
                    .write(
                        $crate::dedup::sql::write::Write::new(
                            self.statements.nack.clone(),
                            $crate::dedup::sql::write::Want::Rows,
                        )
                        .int(Self::entry_of(delivery)?)
                        .text(&delivery.receipt.token)
                        .int(i64::from(self.options.max_attempts()))
                        .int($crate::dedup::millis(retry_in)),
                    )
                    .await?
                    .rows();
                let dead: Option<bool> = match rows.first() {
                    Some(row) => Some(row.try_get(0)?),
                    None => None,
                };
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
                $crate::dedup::check_key(event.namespace, event.id)?;
                self.accept_event(event).await
            }
        }

        impl $crate::dedup::InboxQueue for $store {
            async fn take(
                &self,
                namespace: &str,
                _consumer: &str,
                max: usize,
            ) -> Result<Vec<$crate::dedup::InboxEntry>, $crate::dedup::DedupError> {
                $crate::dedup::check_namespace(namespace)?;
                let token = $crate::store::new_token();
                let rows = self
                    .write(
                        $crate::dedup::sql::write::Write::new(
                            self.statements.take.clone(),
                            $crate::dedup::sql::write::Want::Rows,
                        )
                        .text(namespace)
                        .int(i64::try_from(max).unwrap_or(i64::MAX))
                        .int(i64::from(self.options.max_attempts()))
                        .text(&token)
                        .int(self.visibility_ms()),
                    )
                    .await?
                    .rows();
                Self::taken(namespace, &rows, &token)
            }

            async fn ack(
                &self,
                delivery: &$crate::dedup::InboxEntry,
            ) -> Result<(), $crate::dedup::DedupError> {
                self.ack_row(delivery).await
            }

            async fn ack_many(
                &self,
                deliveries: &[$crate::dedup::InboxEntry],
            ) -> Result<Vec<bool>, $crate::dedup::DedupError> {
                let mut taken = Vec::with_capacity(deliveries.len());
                for delivery in deliveries {
                    // A receipt this store never issued is lost, not an error.
                    if let Ok(entry) = Self::entry_of(delivery) {
                        taken.push((entry, delivery.receipt.token.as_str()));
                    }
                }
                // Each row is deleted once, so it comes back once, with
                // the one token it held.
                let mut acked = std::collections::HashMap::with_capacity(taken.len());
                for chunk in taken.chunks($crate::dedup::ACK_BATCH) {
                    acked.extend(ack_many_rows(self, chunk).await?);
                }
                // The same delivery twice in a call is acked for its first.
                Ok(deliveries
                    .iter()
                    .map(|delivery| {
                        Self::entry_of(delivery).is_ok_and(|entry| {
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

            async fn stats(
                &self,
                namespace: &str,
            ) -> Result<$crate::dedup::InboxStats, $crate::dedup::DedupError> {
                use sqlx::Row as _;
                $crate::dedup::check_namespace(namespace)?;
                let row = sqlx::query(self.statements.stats.clone())
                    .bind(namespace)
                    .fetch_one(&self.pool)
                    .await?;
                let count = |name: &str| -> Result<u64, $crate::dedup::DedupError> {
                    Ok(row.try_get::<i64, _>(name)?.max(0).unsigned_abs())
                };
                let (total, dead, taken) = (count("total")?, count("dead")?, count("taken")?);
                Ok($crate::dedup::InboxStats {
                    waiting: total - dead - taken,
                    taken,
                    dead,
                })
            }

            async fn requeue_dead(
                &self,
                namespace: &str,
                id: Option<&str>,
            ) -> Result<u64, $crate::dedup::DedupError> {
                $crate::dedup::check_namespace(namespace)?;
                let requeued = self
                    .write(
                        $crate::dedup::sql::write::Write::new(
                            self.statements.requeue_dead.clone(),
                            $crate::dedup::sql::write::Want::Affected,
                        )
                        .text(namespace)
                        .opt_text(id),
                    )
                    .await?;
                Ok(requeued.affected())
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
                // A claim released between the insert and the read is gone:
                // try again, a few times.
                for _ in 0..3 {
                    let token = new_token();
                    let inserted = self
                        .write(
                            $crate::dedup::sql::write::Write::new(
                                self.statements.claim_lease.clone(),
                                $crate::dedup::sql::write::Want::Affected,
                            )
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
                        sqlx::query_as(self.statements.read_claim.clone())
                            .bind(namespace)
                            .bind(id)
                            .fetch_optional(&self.pool)
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
                let mut write = $crate::dedup::sql::write::Write::new(
                    statement,
                    $crate::dedup::sql::write::Want::Affected,
                )
                .text(lease.namespace())
                .text(lease.id())
                .text(lease.token());
                if let Some(ms) = ms {
                    write = write.int(ms);
                }
                let rows = self.write(write).await?.affected();
                $crate::dedup::exactly_one(rows, $crate::dedup::DedupError::LeaseLost)
            }
        }
    };
}

pub(crate) use sql_store_common;
