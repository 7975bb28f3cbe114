//! Group commit for the SQL stores: writes that arrive while a commit is
//! on its way to the disk wait for it and then share the next one, so many
//! writes pay for one flush (and on Postgres one round trip) instead of one
//! each. The inbox's accepts and the outbox's enqueues and attempts go
//! through it.
//!
//! A writer task takes every waiting job (up to [`MAX_BATCH`]) and hands
//! them to the store's [`CommitBatch`], which runs them in one transaction,
//! in the order they came. Each caller gets its own outcome only after the
//! transaction committed, so no answer is given for a write that is not on
//! disk. When anything in the batch fails, the transaction rolls back and
//! every caller in it gets the error: nothing of the batch is kept; where
//! the store asks for it ([`CommitBatch::RETRY_ALONE`]) and the database
//! refused the batch for something one row can cause (a constraint or a
//! value it cannot take: [`one_row_fault`]), its jobs are first tried again
//! one at a time. A refusal that is every job's (a lock or statement
//! timeout, a deadlock, a busy database, too many connections) fails the
//! batch as one, rather than wait for it once per job. A caller that gave up meanwhile does
//! not disturb the batch; its write is kept.
//!
//! Nothing waits on purpose: the batch is what queued during the previous
//! commit, so one caller alone is answered as fast as before (a delay to
//! let batches grow was measured, and lost at 1 and at 32 callers). SQLite
//! has one writer, as the file has; Postgres two, so that one batch forms
//! and is sent while the other waits for its flush.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{mpsc, oneshot};

use super::StoreError;

/// The most jobs one transaction takes.
pub(crate) const MAX_BATCH: usize = 256;

/// The bytes of bodies after which a Postgres batch takes no more (see
/// [`CommitBatch::MAX_BATCH_BYTES`]): a sixteenth of the 1 GiB Postgres
/// takes in one message or one array.
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES_BATCH_BYTES: usize = 64 << 20;

/// What a batch is made of, said once for every dialect that commits it.
pub trait Batched {
    /// One write, owned, waiting for its batch.
    type Job: Send + Sync + 'static;
    /// What its caller is told once the batch committed.
    type Outcome: Send + 'static;
}

/// How a store commits a batch of jobs: all in one transaction, in the
/// batch's order, with one outcome for each job.
pub trait CommitBatch: Batched + Clone + Send + Sync + 'static {
    /// How many batches may be committing at once.
    const WRITERS: usize;
    /// Whether the jobs of a batch the database refused are tried again
    /// one at a time, so that one bad job fails only its own caller. For
    /// the outbox, where a record not kept sends a delivered event again;
    /// the inbox's accepts fail as a batch (each sender retries).
    const RETRY_ALONE: bool = false;
    /// The bytes of jobs ([`job_bytes`](Self::job_bytes)) after which a
    /// batch takes no more, so that what one statement carries stays far
    /// below what the database takes in one message or one array (1 GiB
    /// on Postgres): without it, 256 large bodies raised past the default
    /// limit could fail every batch of a burst. A batch stops growing
    /// once it holds this much, so it may pass it by its last job.
    const MAX_BATCH_BYTES: usize = usize::MAX;

    /// How many bytes `job` adds to its batch's statement.
    fn job_bytes(_job: &Self::Job) -> usize {
        0
    }

    /// Commits `batch` as one transaction, or nothing of it; the outcomes
    /// in the batch's order.
    fn commit(
        &self,
        batch: &[Self::Job],
    ) -> impl Future<Output = Result<Vec<Self::Outcome>, sqlx::Error>> + Send;

    /// Called when no job came for a while: gives back what the writer
    /// holds between batches (a `HeldConnection`).
    fn idle(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// A job and the way to its caller.
struct Waiting<C: CommitBatch> {
    job: C::Job,
    reply: oneshot::Sender<Result<C::Outcome, String>>,
}

/// The way to the writer task, started on first use (in an async context)
/// and again if the runtime it ran on has gone. Clones share the writer.
pub struct GroupCommit<C: CommitBatch> {
    committer: C,
    jobs: Arc<Mutex<Option<mpsc::Sender<Waiting<C>>>>>,
}

impl<C: CommitBatch> Clone for GroupCommit<C> {
    fn clone(&self) -> Self {
        Self {
            committer: self.committer.clone(),
            jobs: Arc::clone(&self.jobs),
        }
    }
}

impl<C: CommitBatch> fmt::Debug for GroupCommit<C> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("GroupCommit")
    }
}

impl<C: CommitBatch> GroupCommit<C> {
    /// Batches committed by `committer`, with a writer of their own.
    pub(crate) fn new(committer: C) -> Self {
        Self {
            committer,
            jobs: Arc::new(Mutex::new(None)),
        }
    }

    /// Commits `job` in the next batch, and returns its outcome once the
    /// batch is durable.
    pub(crate) async fn submit(&self, job: C::Job) -> Result<C::Outcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.sender()
            .send(Waiting { job, reply })
            .await
            .map_err(|_| stopped())?;
        match answer.await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(error)) => Err(StoreError::message("sql", &error)),
            Err(_) => Err(stopped()),
        }
    }

    fn sender(&self) -> mpsc::Sender<Waiting<C>> {
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

fn stopped() -> StoreError {
    StoreError::message("sql", "the group-commit writer stopped")
}

/// Whether the database refused a statement for something one row can
/// cause: a constraint (SQLSTATE class 23 on Postgres, `SQLITE_CONSTRAINT`
/// and its extended codes, which include a trigger's `RAISE(ABORT)`), or a
/// value it cannot take (class 22; `SQLITE_TOOBIG`, `SQLITE_MISMATCH`).
/// Matched by code, never by message.
pub(crate) fn one_row_fault(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(error) = error else {
        return false;
    };
    if !matches!(error.kind(), sqlx::error::ErrorKind::Other) {
        return true;
    }
    let Some(code) = error.code() else {
        return false;
    };
    if code.len() == 5 {
        // Postgres' SQLSTATE: data exception (22), integrity constraint
        // violation (23).
        return code.starts_with("22") || code.starts_with("23");
    }
    // SQLite's extended result code in decimal; its low byte is the
    // primary code.
    const TOOBIG: u32 = 18;
    const CONSTRAINT: u32 = 19;
    const MISMATCH: u32 = 20;
    code.parse::<u32>()
        .is_ok_and(|extended| matches!(extended & 0xff, TOOBIG | CONSTRAINT | MISMATCH))
}

/// Starts the committer's writers on `jobs`.
async fn write<C: CommitBatch>(committer: C, jobs: mpsc::Receiver<Waiting<C>>) {
    let jobs = Arc::new(tokio::sync::Mutex::new(jobs));
    for _ in 1..C::WRITERS {
        tokio::spawn(writer(committer.clone(), jobs.clone()));
    }
    writer(committer, jobs).await;
}

/// One writer: takes what is waiting, commits it as one transaction, and
/// answers each caller; until the store and its clones are gone.
async fn writer<C: CommitBatch>(
    committer: C,
    jobs: Arc<tokio::sync::Mutex<mpsc::Receiver<Waiting<C>>>>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut replies = Vec::with_capacity(MAX_BATCH);
    loop {
        {
            // The next writer waits here while this one takes its batch.
            // Each quiet second on the way, the writer gives back what it
            // holds between batches.
            let mut jobs = loop {
                match tokio::time::timeout(HELD_IDLE, jobs.lock()).await {
                    Ok(jobs) => break jobs,
                    Err(_quiet) => committer.idle().await,
                }
            };
            let first = loop {
                match tokio::time::timeout(HELD_IDLE, jobs.recv()).await {
                    Ok(first) => break first,
                    Err(_quiet) => committer.idle().await,
                }
            };
            let Some(first) = first else {
                return;
            };
            let mut waiting = Some(first);
            let mut bytes = 0_usize;
            while let Some(Waiting { job, reply }) = waiting {
                bytes = bytes.saturating_add(C::job_bytes(&job));
                batch.push(job);
                replies.push(reply);
                waiting = (batch.len() < MAX_BATCH && bytes < C::MAX_BATCH_BYTES)
                    .then(|| jobs.try_recv().ok())
                    .flatten();
            }
        }
        match committer.commit(&batch).await {
            Ok(outcomes) => {
                for (reply, outcome) in replies.drain(..).zip(outcomes) {
                    // A caller that gave up is not waiting for its answer.
                    let _ = reply.send(Ok(outcome));
                }
            }
            // Refused for what one job may have caused: each job alone.
            Err(error) if C::RETRY_ALONE && batch.len() > 1 && one_row_fault(&error) => {
                tracing::warn!(%error, jobs = batch.len(), "a batch was refused; its jobs are tried one at a time");
                // Once the store cannot be reached, the rest fail at once.
                let mut unreachable: Option<String> = None;
                for (job, reply) in batch.iter().zip(replies.drain(..)) {
                    let outcome = match &unreachable {
                        Some(error) => Err(error.clone()),
                        None => match committer.commit(std::slice::from_ref(job)).await {
                            Ok(mut outcomes) => {
                                outcomes.pop().ok_or_else(|| "no outcome".to_owned())
                            }
                            Err(error) if one_row_fault(&error) => Err(error.to_string()),
                            Err(error) => Err(unreachable.insert(error.to_string()).clone()),
                        },
                    };
                    let _ = reply.send(outcome);
                }
            }
            Err(error) => {
                let error = error.to_string();
                tracing::warn!(%error, jobs = batch.len(), "a batch failed; each caller gets the error");
                for reply in replies.drain(..) {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
        batch.clear();
    }
}

/// How long a writer waits for a job before it gives back what it holds
/// (see [`CommitBatch::idle`]).
const HELD_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    /// Jobs of a given size in bytes; records each batch's jobs, and holds
    /// its first commit until told, so that what comes meanwhile queues.
    #[derive(Clone)]
    struct Recorder {
        batches: Arc<Mutex<Vec<Vec<usize>>>>,
        release_first: Arc<tokio::sync::Semaphore>,
    }

    impl Batched for Recorder {
        type Job = usize;
        type Outcome = ();
    }

    impl CommitBatch for Recorder {
        const WRITERS: usize = 1;
        const MAX_BATCH_BYTES: usize = 100;

        fn job_bytes(job: &usize) -> usize {
            *job
        }

        async fn commit(&self, batch: &[usize]) -> Result<Vec<()>, sqlx::Error> {
            let first = self.batches.lock().unwrap().is_empty();
            self.batches.lock().unwrap().push(batch.to_vec());
            if first {
                let _ = self.release_first.acquire().await;
            }
            Ok(vec![(); batch.len()])
        }
    }

    /// A batch takes jobs until it holds `MAX_BATCH_BYTES`, then leaves the
    /// rest to the next: it passes the limit by at most its last job, and
    /// a job over the limit that comes first is a batch of its own.
    #[tokio::test]
    async fn a_batch_stops_growing_at_its_byte_limit() {
        let recorder = Recorder {
            batches: Arc::default(),
            release_first: Arc::new(tokio::sync::Semaphore::new(0)),
        };
        let writes = GroupCommit::new(recorder.clone());
        let first = tokio::spawn({
            let writes = writes.clone();
            async move { writes.submit(1).await }
        });
        while recorder.batches.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Queued behind the held commit, in this order.
        let sizes = [40, 40, 40, 150, 10, 40, 250, 10];
        let mut queued = Vec::new();
        for size in sizes {
            let writes = writes.clone();
            queued.push(tokio::spawn(async move { writes.submit(size).await }));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        recorder.release_first.add_permits(1);
        first.await.unwrap().unwrap();
        for submitted in queued {
            submitted.await.unwrap().unwrap();
        }
        let batches = recorder.batches.lock().unwrap().clone();
        assert_eq!(
            batches,
            [
                vec![1],
                vec![40, 40, 40],
                vec![150],
                vec![10, 40, 250],
                vec![10]
            ]
        );
    }
}
