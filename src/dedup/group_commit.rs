//! Group commit for the SQLite inbox: accepts that arrive while a commit is
//! on its way to the disk wait for it and then share the next one, so many
//! accepts pay for one `fsync` instead of one each.
//!
//! One writer task takes every waiting accept (up to [`MAX_BATCH`]) and
//! runs them in one transaction, in the order they came: a duplicate inside
//! the batch sees the claim made before it and is answered duplicate. Each
//! caller gets its own outcome only after the transaction committed, so an
//! answer is never given for an event that is not on disk. When anything in
//! the batch fails, the transaction rolls back and every caller in it gets
//! the error (answered 5xx): no claim of the batch is kept. A caller that
//! gave up meanwhile does not disturb the batch; its event is kept, and the
//! sender's retry is answered duplicate.
//!
//! Nothing waits on purpose: the batch is what queued during the previous
//! commit, so one caller alone is answered as fast as before.

use std::sync::{Arc, Mutex, PoisonError};

use sqlx::SqlStr;
use sqlx::sqlite::SqlitePool;
use tokio::sync::{mpsc, oneshot};

use super::{Acceptance, DedupError, IncomingEvent, StoreError};

/// The most accepts one transaction takes.
pub(crate) const MAX_BATCH: usize = 256;

/// One accept, owned, waiting for its batch.
struct Job {
    namespace: String,
    id: String,
    body: Vec<u8>,
    signed_at: Option<i64>,
    meta: Option<String>,
    retention_ms: i64,
    reply: oneshot::Sender<Result<Acceptance, String>>,
}

/// The way to the writer task, started on first use (in an async context)
/// and again if the runtime it ran on has gone.
#[derive(Debug, Clone, Default)]
pub(crate) struct GroupCommit {
    jobs: Arc<Mutex<Option<mpsc::Sender<Job>>>>,
}

impl GroupCommit {
    /// Accepts `event` in the next batch on `pool` with `statement` (the
    /// store's accept, which inserts the claim and then the inbox row only
    /// if the claim was new).
    pub(crate) async fn accept(
        &self,
        pool: &SqlitePool,
        statement: &SqlStr,
        event: &IncomingEvent<'_>,
        retention_ms: i64,
    ) -> Result<Acceptance, DedupError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            namespace: event.namespace.to_owned(),
            id: event.id.to_owned(),
            body: event.body.to_vec(),
            signed_at: event.signed_at,
            meta: event.meta_text(),
            retention_ms,
            reply,
        };
        self.sender(pool, statement)
            .send(job)
            .await
            .map_err(|_| failed("the group-commit writer stopped"))?;
        match answer.await {
            Ok(Ok(acceptance)) => Ok(acceptance),
            Ok(Err(error)) => Err(failed(&error)),
            Err(_) => Err(failed("the group-commit writer stopped")),
        }
    }

    fn sender(&self, pool: &SqlitePool, statement: &SqlStr) -> mpsc::Sender<Job> {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        match &*jobs {
            Some(sender) if !sender.is_closed() => sender.clone(),
            _ => {
                let (sender, receiver) = mpsc::channel(MAX_BATCH * 4);
                tokio::spawn(write(pool.clone(), statement.clone(), receiver));
                *jobs = Some(sender.clone());
                sender
            }
        }
    }
}

/// A store error with `message`, for each caller of a failed batch.
fn failed(message: &str) -> DedupError {
    DedupError::Store(StoreError::message("sql", message))
}

/// The writer: takes what is waiting, commits it as one transaction, and
/// answers each caller.
async fn write(pool: SqlitePool, statement: SqlStr, mut jobs: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = jobs.recv().await {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        match commit(&pool, &statement, &batch).await {
            Ok(outcomes) => {
                for (job, outcome) in batch.drain(..).zip(outcomes) {
                    // A caller that gave up is not waiting for its answer.
                    let _ = job.reply.send(Ok(outcome));
                }
            }
            Err(error) => {
                let error = error.to_string();
                tracing::warn!(%error, events = batch.len(), "an accept batch failed; each caller gets the error");
                for job in batch.drain(..) {
                    let _ = job.reply.send(Err(error.clone()));
                }
            }
        }
    }
}

/// Runs the batch in one transaction; the outcomes in its order.
async fn commit(
    pool: &SqlitePool,
    statement: &SqlStr,
    batch: &[Job],
) -> Result<Vec<Acceptance>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let mut outcomes = Vec::with_capacity(batch.len());
    for job in batch {
        let inserted = sqlx::query(statement.clone())
            .bind(&job.namespace)
            .bind(&job.id)
            .bind(job.retention_ms)
            .bind(&job.body)
            .bind(job.signed_at)
            .bind(&job.meta)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        outcomes.push(if inserted == 0 {
            Acceptance::Duplicate
        } else {
            Acceptance::Accepted
        });
    }
    tx.commit().await?;
    Ok(outcomes)
}
