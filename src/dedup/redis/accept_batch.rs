//! Accepts in batches on Redis: accepts that arrive while earlier ones are
//! on their way to the server go together, as one script call per batch
//! (per shard on a cluster, where one call reaches one slot), instead of
//! one call each. Most of an accept's server time is the call itself
//! (BENCHMARKS.md), not the claim and the append it makes.
//!
//! As with the SQL stores' group commit, nothing waits on purpose: a batch
//! is what queued while the batches before it were in flight, so one
//! caller alone is sent at once. Each caller is answered only once its
//! batch's script (and, with replica acks, its `WAIT`) returned; when the
//! call fails, every caller in it gets the error, and the claims of events
//! whose append had already run stay (as a caller that gave up does: the
//! sender's retry is answered duplicate, never lost).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::join_all;
use redis::Value;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::scripts::ACCEPT_MANY_SCRIPT;
use crate::dedup::DedupError;
use crate::store::redis::{RedisConnection, eval};

/// The most events one script call carries.
const MAX_BATCH: usize = 256;

/// The bytes of bodies after which a batch takes no more: one command
/// stays far below what a server reads at once.
const MAX_BATCH_BYTES: usize = 4 << 20;

/// How many batches may be in flight at once: one forms while another is
/// on its way.
const IN_FLIGHT: usize = 2;

/// What events of one batch share: the script's fixed arguments, the
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
    pub(super) keys: [String; 5],
    pub(super) values: [Vec<u8>; 5],
}

/// What a caller is told: accepted or a duplicate.
type Answer = Result<bool, DedupError>;

struct Waiting {
    job: Job,
    reply: oneshot::Sender<Answer>,
}

/// The way to the batching task of one connection, started on first use
/// (in an async context) and again if the runtime it ran on has gone.
#[derive(Clone)]
pub(super) struct AcceptBatches {
    jobs: Arc<Mutex<Option<mpsc::Sender<Waiting>>>>,
}

impl std::fmt::Debug for AcceptBatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AcceptBatches")
    }
}

impl AcceptBatches {
    pub(super) fn new() -> Self {
        Self {
            jobs: Arc::new(Mutex::new(None)),
        }
    }

    /// Accepts `job` in the next batch on `connection`: `true` when
    /// accepted, `false` for a duplicate.
    pub(super) async fn accept(&self, connection: &RedisConnection, job: Job) -> Answer {
        let (reply, answer) = oneshot::channel();
        let waiting = Waiting { job, reply };
        if let Err(mpsc::error::SendError(_)) = self.sender(connection).send(waiting).await {
            return Err(stopped());
        }
        answer.await.unwrap_or_else(|_| Err(stopped()))
    }

    fn sender(&self, connection: &RedisConnection) -> mpsc::Sender<Waiting> {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        match &*jobs {
            Some(sender) if !sender.is_closed() => sender.clone(),
            _ => {
                let (sender, receiver) = mpsc::channel(MAX_BATCH * 4);
                tokio::spawn(batch(connection.clone(), receiver));
                *jobs = Some(sender.clone());
                sender
            }
        }
    }
}

fn stopped() -> DedupError {
    DedupError::from(redis::RedisError::from((
        redis::ErrorKind::Io,
        "the accept batching task stopped",
    )))
}

/// Takes what waits (after the first, up to [`MAX_BATCH`] and
/// [`MAX_BATCH_BYTES`]) once a batch may go, and sends it.
async fn batch(connection: RedisConnection, mut jobs: mpsc::Receiver<Waiting>) {
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    while let Some(first) = jobs.recv().await {
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
            return;
        };
        let mut bytes = first.job.values[1].len();
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match jobs.try_recv() {
                Ok(waiting) => {
                    bytes += waiting.job.values[1].len();
                    batch.push(waiting);
                }
                Err(_) => break,
            }
        }
        let connection = connection.clone();
        tokio::spawn(async move {
            send(&connection, batch).await;
            drop(permit);
        });
    }
}

/// Sends each group of `batch` as one script call, all at once, and
/// answers every caller.
async fn send(connection: &RedisConnection, batch: Vec<Waiting>) {
    let mut groups: HashMap<Group, Vec<Waiting>> = HashMap::new();
    for waiting in batch {
        groups
            .entry(waiting.job.group.clone())
            .or_default()
            .push(waiting);
    }
    join_all(groups.into_iter().map(|(group, members)| async move {
        let answers = run(connection.clone(), &group, &members).await;
        for (waiting, answer) in members.into_iter().zip(answers) {
            // A caller that gave up is no longer there to answer.
            let _ = waiting.reply.send(answer);
        }
    }))
    .await;
}

/// One script call for `members`, which share `group`: an answer for each.
async fn run(mut connection: RedisConnection, group: &Group, members: &[Waiting]) -> Vec<Answer> {
    let keys: Vec<&str> = members
        .iter()
        .flat_map(|waiting| waiting.job.keys.iter().map(String::as_str))
        .collect();
    let rewrite: &[u8] = if group.rewrite { b"1" } else { b"" };
    let fixed = [group.retention_ms.as_bytes(), rewrite];
    let values = members
        .iter()
        .flat_map(|waiting| waiting.job.values.iter().map(Vec::as_slice));
    let replies: Result<Vec<Value>, DedupError> = match group.replica_acks {
        None => {
            let mut invocation = ACCEPT_MANY_SCRIPT.prepare_invoke();
            for key in &keys {
                invocation.key(*key);
            }
            for value in fixed.into_iter().chain(values) {
                invocation.arg(value);
            }
            invocation
                .invoke_async(&mut connection)
                .await
                .map_err(DedupError::from)
        }
        Some((wanted, timeout)) => {
            let mut command = eval(super::scripts::ACCEPT_MANY, &keys);
            for value in fixed.into_iter().chain(values) {
                command.arg(value);
            }
            match connection.eval_and_wait(command, wanted, timeout).await {
                Ok((_, acked)) if acked < wanted => {
                    return members
                        .iter()
                        .map(|_| Err(DedupError::ReplicasBehind { acked, wanted }))
                        .collect();
                }
                Ok((replies, _)) => Ok(replies),
                Err(error) => Err(DedupError::from(error)),
            }
        }
    };
    match replies {
        Ok(replies) if replies.len() == members.len() => replies.iter().map(answer_of).collect(),
        Ok(replies) => members
            .iter()
            .map(|_| Err(protocol_error(&format!("{} answers", replies.len()))))
            .collect(),
        // Each caller gets the error, made again with its kind and text.
        Err(error) => {
            let text = error.to_string();
            members.iter().map(|_| Err(protocol_error(&text))).collect()
        }
    }
}

/// One event's answer from `accept_many.lua`.
fn answer_of(reply: &Value) -> Answer {
    match reply {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        Value::BulkString(text) => Err(protocol_error(&String::from_utf8_lossy(text))),
        Value::SimpleString(text) => Err(protocol_error(text)),
        other => Err(protocol_error(&format!("{other:?}"))),
    }
}

fn protocol_error(text: &str) -> DedupError {
    DedupError::from(redis::RedisError::from((
        redis::ErrorKind::Client,
        "accepting a batch failed",
        text.to_owned(),
    )))
}
