//! Group commit for the SQL inboxes: accepts that arrive while a commit is
//! on its way to the disk wait for it and then share the next one, so many
//! accepts pay for one flush (and on Postgres one round trip) instead of
//! one each.
//!
//! A writer task takes every waiting accept (up to [`MAX_BATCH`]) and
//! hands them to the store's [`CommitBatch`], which runs them in one
//! transaction, in the order they came: a duplicate inside the batch is
//! answered duplicate, the first of its id accepted. Each caller gets its
//! own outcome only after the transaction committed, so an answer is never
//! given for an event that is not on disk. When anything in the batch
//! fails, the transaction rolls back and every caller in it gets the error
//! (answered 5xx): no claim of the batch is kept. A caller that gave up
//! meanwhile does not disturb the batch; its event is kept, and the
//! sender's retry is answered duplicate.
//!
//! Nothing waits on purpose: the batch is what queued during the previous
//! commit, so one caller alone is answered as fast as before (a delay to
//! let batches grow was measured, and lost at 1 and at 32 callers). SQLite
//! has one writer, as the file has; Postgres two, so that one batch forms
//! and is sent while the other waits for its flush.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{mpsc, oneshot};

use super::{Acceptance, DedupError, IncomingEvent, StoreError};

/// The most accepts one transaction takes.
pub(crate) const MAX_BATCH: usize = 256;

/// One accept, owned, waiting for its batch.
pub(crate) struct Job {
    pub(crate) namespace: String,
    pub(crate) id: String,
    pub(crate) body: Vec<u8>,
    pub(crate) signed_at: Option<i64>,
    pub(crate) meta: Option<String>,
    reply: oneshot::Sender<Result<Acceptance, String>>,
}

/// How a store commits a batch of accepts: all in one transaction, each
/// claiming and enqueueing together, the first of an id accepted and the
/// rest duplicate; the outcomes in the batch's order.
pub(crate) trait CommitBatch: Clone + Send + Sync + 'static {
    /// How many batches may be committing at once.
    const WRITERS: usize;

    /// Commits `batch` as one transaction, or nothing of it.
    fn commit(
        &self,
        batch: &[Job],
    ) -> impl Future<Output = Result<Vec<Acceptance>, sqlx::Error>> + Send;
}

/// What a SQL store's batches need: its pool, its accept statements (see
/// `Statements`) and its retention (one for the whole batch).
#[derive(Debug)]
pub(crate) struct Batch<DB: sqlx::Database> {
    pub(crate) pool: sqlx::Pool<DB>,
    pub(crate) accept: sqlx::SqlStr,
    pub(crate) accept_many: Option<sqlx::SqlStr>,
    pub(crate) retention_ms: i64,
}

impl<DB: sqlx::Database> Clone for Batch<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            accept: self.accept.clone(),
            accept_many: self.accept_many.clone(),
            retention_ms: self.retention_ms,
        }
    }
}

/// The way to the writer task, started on first use (in an async context)
/// and again if the runtime it ran on has gone. Clones share the writer.
#[derive(Debug, Clone)]
pub(crate) struct GroupCommit<C> {
    committer: C,
    jobs: Arc<Mutex<Option<mpsc::Sender<Job>>>>,
}

impl<C: CommitBatch> GroupCommit<C> {
    /// Batches committed by `committer`, with a writer of their own.
    pub(crate) fn new(committer: C) -> Self {
        Self {
            committer,
            jobs: Arc::new(Mutex::new(None)),
        }
    }

    /// Accepts `event` in the next batch.
    pub(crate) async fn accept(&self, event: &IncomingEvent<'_>) -> Result<Acceptance, DedupError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            namespace: event.namespace.to_owned(),
            id: event.id.to_owned(),
            body: event.body.to_vec(),
            signed_at: event.signed_at,
            meta: event.meta_text(),
            reply,
        };
        self.sender()
            .send(job)
            .await
            .map_err(|_| failed("the group-commit writer stopped"))?;
        match answer.await {
            Ok(Ok(acceptance)) => Ok(acceptance),
            Ok(Err(error)) => Err(failed(&error)),
            Err(_) => Err(failed("the group-commit writer stopped")),
        }
    }

    fn sender(&self) -> mpsc::Sender<Job> {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        match &*jobs {
            Some(sender) if !sender.is_closed() => sender.clone(),
            _ => {
                let (sender, receiver) = mpsc::channel(MAX_BATCH * 4);
                tokio::spawn(write(self.committer.clone(), receiver));
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

/// Starts the committer's writers on `jobs`.
async fn write<C: CommitBatch>(committer: C, jobs: mpsc::Receiver<Job>) {
    let jobs = Arc::new(tokio::sync::Mutex::new(jobs));
    for _ in 1..C::WRITERS {
        tokio::spawn(writer(committer.clone(), jobs.clone()));
    }
    writer(committer, jobs).await;
}

/// One writer: takes what is waiting, commits it as one transaction, and
/// answers each caller; until the store and its clones are gone.
async fn writer<C: CommitBatch>(committer: C, jobs: Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        {
            // The next writer waits here while this one takes its batch.
            let mut jobs = jobs.lock().await;
            let Some(first) = jobs.recv().await else {
                return;
            };
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match jobs.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
        }
        match committer.commit(&batch).await {
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
