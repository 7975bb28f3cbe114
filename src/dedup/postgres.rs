//! [`PostgresStore`]: claims and inbox in Postgres.

use sqlx::postgres::{PgConnection, PgPool};

use super::sql::{Statements, ready_condition, take_assignments};
use super::{Acceptance, DedupError, IncomingEvent, StoreOptions, check_key};
use crate::store::sql::{POSTGRES, migrate_postgres, postgres_pool};

/// Claims and inbox in Postgres, for many receiver instances sharing one
/// database.
///
/// [`accept`](super::Inbox::accept) is one statement: a data-modifying CTE inserts
/// the claim (`ON CONFLICT DO NOTHING`) and, only if that inserted a row,
/// the inbox row. Workers take events with `FOR UPDATE SKIP LOCKED`.
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
///     dead         BOOLEAN NOT NULL DEFAULT FALSE
/// );
/// ```
///
/// # Claiming inside your own transaction
///
/// ```no_run
/// use hooklatch::dedup::{Acceptance, PostgresStore};
///
/// # async fn example(store: PostgresStore, pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
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
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
    options: StoreOptions,
    statements: Statements,
}

impl PostgresStore {
    fn assemble(pool: PgPool, statements: Statements) -> Self {
        Self {
            pool,
            options: StoreOptions::default(),
            statements,
        }
    }

    /// Connects to `url` (such as `postgres://user@127.0.0.1:5432/db`) with
    /// a pool of up to 16 connections, and runs [`migrate`](Self::migrate).
    pub async fn connect(url: &str) -> Result<Self, DedupError> {
        Self::migrated(postgres_pool(url).await?).await
    }
}

super::sql::sql_store_common!(
    PostgresStore,
    PgConnection,
    sqlx::postgres::PgRow,
    POSTGRES,
    migrate_postgres
);

/// Claims as done and enqueues what the claim inserted, in one statement.
fn accept_statement(claim_done: &str, inbox: &str) -> String {
    format!(
        "WITH claim AS ({claim_done} RETURNING namespace, event_id, claimed_at) \
         INSERT INTO {inbox} (namespace, event_id, body, signed_at, received_at, available_at, meta) \
         SELECT namespace, event_id, $4, $5, claimed_at, claimed_at, $6 FROM claim"
    )
}

/// Takes the ready rows, earliest first, skipping rows another worker
/// has locked.
fn take_statement(inbox: &str) -> String {
    format!(
        "WITH ready AS (SELECT entry FROM {inbox} WHERE {} ORDER BY entry LIMIT $2{}) \
         UPDATE {inbox} SET {} FROM ready WHERE {inbox}.entry = ready.entry \
         RETURNING {inbox}.entry, event_id, body, signed_at, attempts, dead, meta",
        ready_condition("$1", POSTGRES.now),
        POSTGRES.lock_rows,
        take_assignments("$3", "$4", &format!("{} + $5", POSTGRES.now)),
    )
}

impl PostgresStore {
    /// The atomic claim-and-enqueue step of [`Inbox::accept`](super::Inbox::accept).
    async fn accept_event(&self, event: &IncomingEvent<'_>) -> Result<Acceptance, DedupError> {
        check_key(event.namespace, event.id)?;
        let inserted = sqlx::query(self.statements.accept.clone())
            .bind(event.namespace)
            .bind(event.id)
            .bind(self.retention_ms())
            .bind(event.body)
            .bind(event.signed_at)
            .bind(event.meta_text())
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(if inserted == 1 {
            Acceptance::Accepted
        } else {
            Acceptance::Duplicate
        })
    }
}
