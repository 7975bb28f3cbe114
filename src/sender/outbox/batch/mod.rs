//! The SQL outboxes' writes in batches, through the stores' group commit
//! (`crate::store::group_commit`): the enqueues and the attempts' records
//! that arrive together share one transaction, and so one flush. With ten
//! attempts in flight, ten records used to wait for ten flushes one after
//! another; now the ones that finish during a flush share the next.
//!
//! Each caller's outcome is its own, as if alone: an enqueue of an id
//! already there (or earlier in the same batch) adds nothing, and a record
//! whose lease is gone changes nothing. The health an attempt changes is
//! merged in batch order, so each caller is told the health after its own
//! attempt. A batch that fails keeps nothing; when the database refused it,
//! its jobs are tried again one at a time, so that a refused write fails
//! only its own caller (a record not kept would send a delivered event
//! again).
//!
//! On Postgres a batch of records goes as one statement over arrays
//! (`unnest`), which also merges the health changes, so that a batch is one
//! round trip. A batch of enqueues does too, but a batch of one runs the
//! one-delivery insert, a lighter statement for the one caller alone.

/// Binds a record's delivery columns to `$query`, in the order of the
/// one-delivery statements: endpoint, id, lease token, state, due, waited,
/// reason, finished at.
macro_rules! bind_step {
    ($query:expr, $job:expr) => {
        $query
            .bind(&$job.endpoint)
            .bind(&$job.id)
            .bind(&$job.token)
            .bind($job.state)
            .bind($job.due)
            .bind($job.waited)
            .bind($job.reason)
            .bind($job.finished)
    };
}

/// Binds an enqueue to the one-delivery statement: endpoint, id, body,
/// due, created, trace.
macro_rules! bind_enqueue {
    ($query:expr, $job:expr) => {
        $query
            .bind(&$job.endpoint)
            .bind(&$job.id)
            .bind(&$job.body)
            .bind($job.due)
            .bind($job.created)
            .bind(&$job.trace)
    };
}

/// Binds a record's attempt columns to `$query`, in `AttemptRow`'s order.
macro_rules! bind_attempt {
    ($query:expr, $job:expr) => {{
        let (number, sent_at, waited, reason, held, status, error, duration, excerpt) =
            &$job.attempt;
        $query
            .bind(number)
            .bind(sent_at)
            .bind(waited)
            .bind(reason)
            .bind(held)
            .bind(status)
            .bind(error)
            .bind(duration)
            .bind(excerpt)
    }};
}

mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::collections::HashMap;

use postgres::{enqueue_many, finish_many, finish_one};

use sqlx::SqlStr;

use super::codes::{AttemptRow, HealthFields, attempt_fields, health_from_fields};
use super::sql::Statements;
use crate::sender::outbox::Taken;
use crate::sender::outbox::{DeliveryState, EndpointHealth, HealthChange};
use crate::sender::rules::{Attempt, Step};
use crate::store::group_commit::{Batched, CommitBatch, GroupCommit};
use crate::store::held_connection::HeldConnection;
use crate::store::{now_millis, unix_millis};

/// One enqueue, owned, waiting for its batch.
pub struct Enqueue {
    endpoint: String,
    id: String,
    body: Vec<u8>,
    due: i64,
    created: i64,
    trace: Option<String>,
}

impl Enqueue {
    pub(crate) fn new(new: &crate::sender::outbox::NewDelivery<'_>) -> Self {
        Self {
            endpoint: new.endpoint().to_owned(),
            id: new.id().to_owned(),
            body: new.body().to_vec(),
            due: unix_millis(new.due()),
            created: now_millis(),
            trace: new.trace().map(|trace| trace.to_string()),
        }
    }
}

/// One attempt's record and the step after it, owned, waiting for its
/// batch.
pub struct Finish {
    endpoint: String,
    id: String,
    token: String,
    state: i64,
    due: i64,
    waited: i64,
    reason: i64,
    finished: Option<i64>,
    attempt: AttemptRow,
    change: Option<HealthChange>,
}

impl Finish {
    pub(crate) fn new(
        taken: &Taken,
        attempt: &Attempt,
        step: Step,
        change: Option<HealthChange>,
    ) -> Self {
        let (state, due, waited, reason) = super::codes::step_fields(step);
        Self {
            endpoint: taken.endpoint.clone(),
            id: taken.id.clone(),
            token: taken.token.clone(),
            state: state.code(),
            due: due.unwrap_or(unix_millis(taken.due_at)),
            waited,
            reason,
            finished: (state != DeliveryState::Pending).then(now_millis),
            attempt: attempt_fields(attempt),
            change,
        }
    }
}

/// One database's side of `SqlOutbox`: how its batches of enqueues and
/// of attempts' records commit.
pub trait OutboxBackend: sqlx::Database {
    /// Commits enqueues.
    type Enqueues: CommitBatch<Job = Enqueue, Outcome = bool>;
    /// Commits attempts' records and the health they change.
    type Finishes: CommitBatch<Job = Finish, Outcome = Option<EndpointHealth>>;

    /// The writers of a store on `pool` for the tables of `prefix`.
    fn outbox_writes(
        pool: &sqlx::Pool<Self>,
        statements: &Statements,
        prefix: &str,
    ) -> Writes<Self>;
}

/// A SQL outbox's batched writes: its enqueues and its attempts' records,
/// each with a writer of its own.
pub struct Writes<DB: OutboxBackend> {
    pub(crate) enqueues: GroupCommit<DB::Enqueues>,
    pub(crate) finishes: GroupCommit<DB::Finishes>,
}

impl<DB: OutboxBackend> Clone for Writes<DB> {
    fn clone(&self) -> Self {
        Self {
            enqueues: self.enqueues.clone(),
            finishes: self.finishes.clone(),
        }
    }
}

/// The writers of a store on `pool` with the store's `statements`; `many`
/// adds the statements over arrays (Postgres) for the tables of `prefix`.
pub(crate) fn writers<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    statements: &Statements,
    prefix: &str,
    many: bool,
) -> (Enqueues<DB>, Finishes<DB>) {
    (
        Enqueues {
            connection: HeldConnection::new(pool.clone()),
            one: statements.enqueue.clone(),
            many: many.then(|| enqueue_many(prefix)),
        },
        Finishes {
            connection: HeldConnection::new(pool.clone()),
            statements: statements.clone(),
            in_one_statement: many.then(|| InOneStatement {
                one: finish_one(prefix),
                many: finish_many(prefix),
            }),
        },
    )
}

/// Commits enqueues.
#[derive(Debug)]
pub struct Enqueues<DB: sqlx::Database> {
    connection: HeldConnection<DB>,
    one: SqlStr,
    many: Option<SqlStr>,
}

impl<DB: sqlx::Database> Clone for Enqueues<DB> {
    fn clone(&self) -> Self {
        Self {
            connection: self.connection.clone(),
            one: self.one.clone(),
            many: self.many.clone(),
        }
    }
}

impl<DB: sqlx::Database> Batched for Enqueues<DB> {
    type Job = Enqueue;
    type Outcome = bool;
}

/// Commits attempts' records.
#[derive(Debug)]
pub struct Finishes<DB: sqlx::Database> {
    connection: HeldConnection<DB>,
    statements: Statements,
    in_one_statement: Option<InOneStatement>,
}

/// The statements that record a batch, health changes and all, in one
/// statement (Postgres): one for a batch of one, one over arrays.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
struct InOneStatement {
    one: SqlStr,
    many: SqlStr,
}

impl<DB: sqlx::Database> Clone for Finishes<DB> {
    fn clone(&self) -> Self {
        Self {
            connection: self.connection.clone(),
            statements: self.statements.clone(),
            in_one_statement: self.in_one_statement.clone(),
        }
    }
}

impl<DB: sqlx::Database> Batched for Finishes<DB> {
    type Job = Finish;
    type Outcome = Option<EndpointHealth>;
}

/// Each endpoint's health as a batch of records goes, so that each caller
/// is told the health after its own attempt.
#[derive(Default)]
struct HealthSoFar<'a>(HashMap<&'a str, EndpointHealth>);

impl<'a> HealthSoFar<'a> {
    /// The health of `job`'s endpoint before its attempt (`saved`, what
    /// the batch read, as changed by the batch so far), and the change to
    /// write: none when merging it changes nothing (a success on a healthy
    /// endpoint), so most records neither write nor lock the endpoint.
    fn before(
        &mut self,
        job: &'a Finish,
        saved: HealthFields,
    ) -> (&mut EndpointHealth, Option<HealthChange>) {
        let health = self
            .0
            .entry(&job.endpoint)
            .or_insert_with(|| health_from_fields(saved));
        let change = job
            .change
            .filter(|change| health.merged(*change) != *health);
        (health, change)
    }
}

impl HealthSoFar<'_> {
    /// What each caller is told: the health after its own attempt, from
    /// `saved` (what the batch read of each record's endpoint, `None`
    /// where the lease was gone) and the changes before it in the batch.
    #[cfg(feature = "postgres")]
    fn told(batch: &[Finish], saved: Vec<Option<HealthFields>>) -> Vec<Option<EndpointHealth>> {
        let mut so_far = HealthSoFar::default();
        let mut told = Vec::with_capacity(batch.len());
        for (job, saved) in batch.iter().zip(saved) {
            told.push(saved.map(|saved| {
                let (health, change) = so_far.before(job, saved);
                if let Some(change) = change {
                    *health = health.merged(change);
                }
                *health
            }));
        }
        told
    }
}
