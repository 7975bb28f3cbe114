//! Accepts in batches on Redis: accepts that arrive while earlier ones are
//! on their way to the server go together, as one script call per batch,
//! instead of one call each. Most of an accept's server time is the call
//! itself (BENCHMARKS.md), not the claim and the append it makes. Each
//! group of accepts that may share a call (on a cluster, a shard's: one
//! call reaches one slot) has its own queue and task, so a slow node holds
//! up only the accepts bound for it; a task idle for a while ends, and the
//! next accept of its group starts another.
//!
//! As with the SQL stores' group commit, nothing waits on purpose: a batch
//! is what queued while the batches before it were in flight, so one
//! caller alone is sent at once. Each caller is answered only once its
//! batch's script (and, with replica acks, its `WAIT`) returned; when the
//! call fails, every caller in it gets the error, and the claims of events
//! whose append had already run stay (as a caller that gave up does: the
//! sender's retry is answered duplicate, never lost).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::{RedisError, Value};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::scripts::ACCEPT_MANY_SCRIPT;
use crate::dedup::DedupError;
use crate::store::redis::{RedisConnection, eval};

/// The most events one script call carries.
const MAX_BATCH: usize = 256;

/// The bytes of bodies after which a batch takes no more: one command
/// stays far below what a server reads at once.
const MAX_BATCH_BYTES: usize = 4 << 20;

/// How many batches of one group may be in flight at once: one forms
/// while another is on its way.
const IN_FLIGHT: usize = 2;

/// How long a group's task waits for an accept before it ends.
const IDLE: Duration = Duration::from_secs(30);

/// What the accepts of one call share: the script's fixed arguments, the
/// replica acks waited for, and on a cluster the shard's hash tag (its
/// keys' slot).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Group {
    pub(super) retention_ms: String,
    pub(super) rewrite: bool,
    pub(super) replica_acks: Option<(u32, Duration)>,
    pub(super) slot: Option<String>,
}

/// One accept, owned, waiting for its batch: its five keys and five
/// values, in `accept_many.lua`'s order.
pub(super) struct Job {
    pub(super) group: Group,
    /// The hash tag of the job's shard, all its keys' slot.
    pub(super) tag: String,
    pub(super) keys: [String; 5],
    pub(super) values: [Vec<u8>; 5],
}

/// What a caller is told: accepted or a duplicate.
type Answer = Result<bool, DedupError>;

struct Waiting {
    job: Job,
    reply: oneshot::Sender<Answer>,
}

/// The queues of one store's accepts, one per group, each drained by a
/// task started on first use (in an async context) and again once it
/// ended or the runtime it ran on has gone.
#[derive(Clone)]
pub(super) struct AcceptBatches {
    queues: Arc<Mutex<HashMap<Group, mpsc::Sender<Waiting>>>>,
    /// Set once a server refused a call across slots (a proxy in front of
    /// a cluster, seen as one server): from then on every call keeps to
    /// one shard.
    per_slot: Arc<AtomicBool>,
}

impl std::fmt::Debug for AcceptBatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AcceptBatches")
    }
}

impl AcceptBatches {
    pub(super) fn new() -> Self {
        Self {
            queues: Arc::default(),
            per_slot: Arc::default(),
        }
    }

    /// Accepts `job` in the next batch of its group on `connection`:
    /// `true` when accepted, `false` for a duplicate.
    pub(super) async fn accept(&self, connection: &RedisConnection, job: Job) -> Answer {
        let mut job = job;
        if job.group.slot.is_none() && self.per_slot.load(Ordering::Relaxed) {
            job.group.slot = Some(job.tag.clone());
        }
        let (reply, answer) = oneshot::channel();
        let mut waiting = Waiting { job, reply };
        // A queue whose task just ended refuses; the second try starts one.
        for _ in 0..2 {
            match self
                .queue(connection, &waiting.job.group)
                .send(waiting)
                .await
            {
                Ok(()) => return answer.await.unwrap_or_else(|_| Err(stopped())),
                Err(mpsc::error::SendError(refused)) => waiting = refused,
            }
        }
        Err(stopped())
    }

    fn queue(&self, connection: &RedisConnection, group: &Group) -> mpsc::Sender<Waiting> {
        let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(queue) = queues.get(group).filter(|queue| !queue.is_closed()) {
            return queue.clone();
        }
        // Only when a task starts: the queues of tasks that ended go.
        queues.retain(|_, queue| !queue.is_closed());
        let (queue, jobs) = mpsc::channel(MAX_BATCH * 4);
        tokio::spawn(batch(
            connection.clone(),
            group.clone(),
            Arc::clone(&self.per_slot),
            jobs,
        ));
        queues.insert(group.clone(), queue.clone());
        queue
    }
}

fn stopped() -> DedupError {
    DedupError::from(RedisError::from((
        redis::ErrorKind::Io,
        "the accept batching task stopped",
    )))
}

/// Takes what waits (after the first, up to [`MAX_BATCH`] and
/// [`MAX_BATCH_BYTES`]) once a batch may go, and sends it; ends after
/// [`IDLE`] without an accept, answering what came meanwhile first.
async fn batch(
    connection: RedisConnection,
    group: Group,
    per_slot: Arc<AtomicBool>,
    mut jobs: mpsc::Receiver<Waiting>,
) {
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    loop {
        let first = match tokio::time::timeout(IDLE, jobs.recv()).await {
            Ok(Some(first)) => first,
            Ok(None) => return,
            Err(_) => {
                // Refuse new accepts (their callers start another task);
                // those already queued are still received, then `None`.
                jobs.close();
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
            return;
        };
        let mut bytes = first.job.values[1].len();
        let mut members = vec![first];
        while members.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match jobs.try_recv() {
                Ok(waiting) => {
                    bytes += waiting.job.values[1].len();
                    members.push(waiting);
                }
                Err(_) => break,
            }
        }
        let (connection, group, per_slot) =
            (connection.clone(), group.clone(), Arc::clone(&per_slot));
        tokio::spawn(async move {
            let jobs: Vec<&Job> = members.iter().map(|waiting| &waiting.job).collect();
            let (mut answers, across_slots) = run(connection.clone(), &group, &jobs).await;
            if group.slot.is_none() && across_slots {
                // Nothing of a call refused across slots ran: send it again
                // a shard at a time, and every later call too.
                per_slot.store(true, Ordering::Relaxed);
                answers = run_per_slot(&connection, &group, &jobs).await;
            }
            for (waiting, answer) in members.into_iter().zip(answers) {
                // A caller that gave up is no longer there to answer.
                let _ = waiting.reply.send(answer);
            }
            drop(permit);
        });
    }
}

/// One script call for `members`, which share `group`: an answer for
/// each, and whether the server refused the call for spanning slots.
async fn run(
    mut connection: RedisConnection,
    group: &Group,
    members: &[&Job],
) -> (Vec<Answer>, bool) {
    let keys: Vec<&str> = members
        .iter()
        .flat_map(|job| job.keys.iter().map(String::as_str))
        .collect();
    let rewrite: &[u8] = if group.rewrite { b"1" } else { b"" };
    let fixed = [group.retention_ms.as_bytes(), rewrite];
    let values = members
        .iter()
        .flat_map(|job| job.values.iter().map(Vec::as_slice));
    let replies: Result<Vec<Value>, RedisError> = match group.replica_acks {
        None => {
            let mut invocation = ACCEPT_MANY_SCRIPT.prepare_invoke();
            for key in &keys {
                invocation.key(*key);
            }
            for value in fixed.into_iter().chain(values) {
                invocation.arg(value);
            }
            invocation.invoke_async(&mut connection).await
        }
        Some((wanted, timeout)) => {
            let mut command = eval(super::scripts::ACCEPT_MANY, &keys);
            for value in fixed.into_iter().chain(values) {
                command.arg(value);
            }
            match connection.eval_and_wait(command, wanted, timeout).await {
                Ok((_, acked)) if acked < wanted => {
                    let behind = members
                        .iter()
                        .map(|_| Err(DedupError::ReplicasBehind { acked, wanted }))
                        .collect();
                    return (behind, false);
                }
                Ok((replies, _)) => Ok(replies),
                Err(error) => Err(error),
            }
        }
    };
    let across_slots = matches!(&replies, Err(error)
        if error.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::CrossSlot));
    let answers = match replies {
        Ok(replies) if replies.len() == members.len() => replies.iter().map(answer_of).collect(),
        Ok(replies) => members
            .iter()
            .map(|_| {
                Err(script_error(&format!(
                    "{} answers for {} accepts",
                    replies.len(),
                    members.len()
                )))
            })
            .collect(),
        // Each caller gets the error as the driver gave it: its kind says
        // whether the connection dropped, timed out or the server refused.
        Err(error) => members
            .iter()
            .map(|_| Err(DedupError::from(error.clone())))
            .collect(),
    };
    (answers, across_slots)
}

/// [`run`] once per shard among `members`; the answers in their order.
async fn run_per_slot(
    connection: &RedisConnection,
    group: &Group,
    members: &[&Job],
) -> Vec<Answer> {
    let mut answers: Vec<Option<Answer>> = members.iter().map(|_| None).collect();
    let mut tags: Vec<&str> = members.iter().map(|job| job.tag.as_str()).collect();
    tags.sort_unstable();
    tags.dedup();
    for tag in tags {
        let (at, subset): (Vec<usize>, Vec<&Job>) = members
            .iter()
            .enumerate()
            .filter(|(_, job)| job.tag == tag)
            .map(|(index, job)| (index, *job))
            .unzip();
        let one_slot = Group {
            slot: Some(tag.to_owned()),
            ..group.clone()
        };
        let (subset_answers, _) = run(connection.clone(), &one_slot, &subset).await;
        for (index, answer) in at.into_iter().zip(subset_answers) {
            answers[index] = Some(answer);
        }
    }
    answers
        .into_iter()
        .map(|answer| answer.unwrap_or_else(|| Err(stopped())))
        .collect()
}

/// One event's answer from `accept_many.lua`.
fn answer_of(reply: &Value) -> Answer {
    match reply {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        Value::BulkString(text) => Err(script_error(&String::from_utf8_lossy(text))),
        Value::SimpleString(text) => Err(script_error(text)),
        other => Err(script_error(&format!("{other:?}"))),
    }
}

/// An append the server refused inside the script (its error text), as a
/// server's response error.
fn script_error(text: &str) -> DedupError {
    DedupError::from(RedisError::from((
        redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
        "the server refused an accept",
        text.to_owned(),
    )))
}
