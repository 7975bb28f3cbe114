//! [`Inbox`] on Redis: per shard, a stream read by one consumer group,
//! with a delayed set for retries and a dead-letter stream.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::join_all;
use redis::AsyncCommands as _;

use super::RedisInbox;
use super::accept_batch::{Group, Job};
use super::scripts::{ACK_MANY_SCRIPT, ACK_SCRIPT, EXTEND_TAKEN_SCRIPT};
use super::scripts::{GROUP, NACK_SCRIPT, REQUEUE_DEAD_SCRIPT, STATS_SCRIPT, TAIL_SCRIPT};
use super::shards::parse_receipt_entry;
use crate::dedup::tail::{EventStatus, Position, Tail, TailedEvent};
use crate::dedup::{
    Acceptance, DeadLetter, DedupError, EventMeta, GiveBack, Inbox, InboxEntry, InboxQueue,
    InboxStats, IncomingEvent, NackOutcome, Receipt, check_key, check_namespace, millis,
};

impl Inbox for RedisInbox {
    async fn accept(&self, event: &IncomingEvent<'_>) -> Result<Acceptance, DedupError> {
        check_key(event.namespace, event.id)?;
        self.check_shards(event.namespace).await?;
        let shard = self.shards.of(event.id);
        let tag = self.shards.key(event.namespace, shard, "");
        let [tailing, tail_log] = self.shards.tail_keys(event.namespace, shard);
        let keys = [
            self.shards.claim_key(event.namespace, event.id),
            self.shards.key(event.namespace, shard, "inbox"),
            self.shards.idle_key(event.namespace, shard),
            tailing,
            tail_log,
        ];
        let values = [
            event.id.as_bytes().to_vec(),
            event.body.to_vec(),
            event
                .signed_at
                .map(|t| t.to_string())
                .unwrap_or_default()
                .into_bytes(),
            event.meta_text().unwrap_or_default().into_bytes(),
            self.shards.accepted_channel(event.namespace).into_bytes(),
        ];
        let group = Group {
            retention_ms: millis(self.options.retention()).to_string(),
            // With replica acks a duplicate rewrites its claim as it is, so
            // the `WAIT` after it covers the accept it repeats (which may
            // be the one whose wait fell short): from Redis 7.2 `WAIT`
            // waits only for the calling connection's own writes.
            rewrite: self.replica_acks.is_some(),
            replica_acks: self.replica_acks,
            // On a cluster one call reaches one slot: a shard's.
            slot: self.connection.is_cluster().then(|| tag.clone()),
        };
        let job = Job {
            group,
            tag,
            keys,
            values,
        };
        let accepted = self.accepts.accept(&self.connection, job).await?;
        Ok(if accepted {
            crate::dedup::wake_workers(event.namespace);
            Acceptance::Accepted
        } else {
            Acceptance::Duplicate
        })
    }
}

impl InboxQueue for RedisInbox {
    /// Asks the shards for a fair share each, all at once, starting at a
    /// different shard each call; then asks those that gave their whole
    /// share for a share of what is still missing, all at once again, until
    /// the batch is full or no shard has more. Fails only when nothing was
    /// taken and a shard failed: entries already taken are handed out, and
    /// the failing shard's are taken by a later call.
    ///
    /// A shard asked again in the same call gives only entries never
    /// delivered: were it to reclaim again, a round that came after the
    /// visibility timeout could hand out again what an earlier round of
    /// this call handed out (and count a take the worker never saw).
    async fn take(
        &self,
        namespace: &str,
        consumer: &str,
        max: usize,
    ) -> Result<Vec<InboxEntry>, DedupError> {
        check_namespace(namespace)?;
        if max == 0 {
            return Ok(Vec::new());
        }
        self.check_shards(namespace).await?;
        let start = self.next_shard.fetch_add(1, Ordering::Relaxed);
        let mut asking: Vec<u16> = self.shards.from(start).collect();
        let mut asked_before = vec![false; usize::from(self.shards.count)];
        let mut taken = Vec::with_capacity(max);
        let mut failure = None;
        while !asking.is_empty() && taken.len() < max {
            let missing = max - taken.len();
            let asked = asking.len().min(missing);
            let (share, extra) = (missing / asked, missing % asked);
            let round = join_all(asking[..asked].iter().enumerate().map(|(i, &shard)| {
                let want = share + usize::from(i < extra);
                let fresh_only = asked_before[usize::from(shard)];
                async move {
                    let result = self
                        .take_from(namespace, shard, consumer, want, fresh_only)
                        .await;
                    (shard, want, result)
                }
            }))
            .await;
            for &shard in &asking[..asked] {
                asked_before[usize::from(shard)] = true;
            }
            let mut more = Vec::new();
            for (shard, want, result) in round {
                match result {
                    Ok(entries) => {
                        if entries.len() == want {
                            more.push(shard);
                        }
                        taken.extend(entries);
                    }
                    Err(error) => failure = failure.or(Some(error)),
                }
            }
            // Shards not asked yet come first: each shard is asked once
            // before any is asked twice.
            more.splice(0..0, asking[asked..].iter().copied());
            asking = more;
        }
        match failure {
            Some(error) if taken.is_empty() => Err(error),
            _ => Ok(taken),
        }
    }

    async fn ack(&self, delivery: &InboxEntry) -> Result<(), DedupError> {
        self.on_taken(&ACK_SCRIPT, delivery, None).await
    }

    /// One script per shard the deliveries came from, all at once.
    async fn ack_many(&self, deliveries: &[InboxEntry]) -> Result<Vec<bool>, DedupError> {
        let mut by_shard: std::collections::BTreeMap<(&str, u16), Vec<usize>> = Default::default();
        for (index, delivery) in deliveries.iter().enumerate() {
            if let Some((shard, _)) = parse_receipt_entry(&delivery.receipt.entry)
                && shard < self.shards.count
            {
                by_shard
                    .entry((delivery.namespace.as_str(), shard))
                    .or_default()
                    .push(index);
            }
        }
        let replies = join_all(by_shard.into_iter().map(|((namespace, shard), indexes)| {
            let [stream, attempts, ..] = self.shards.inbox_keys(namespace, shard);
            let mut connection = self.connection.clone();
            let mut script = ACK_MANY_SCRIPT.prepare_invoke();
            script.key(stream).key(attempts).arg(GROUP);
            for &index in &indexes {
                let delivery = &deliveries[index];
                let entry = parse_receipt_entry(&delivery.receipt.entry).map_or("", |(_, e)| e);
                script.arg(entry).arg(&delivery.receipt.token);
            }
            async move {
                let acked: Result<Vec<i64>, _> = script.invoke_async(&mut connection).await;
                (indexes, acked)
            }
        }))
        .await;
        // A delivery with no shard of this store (a receipt it never
        // issued) is answered lost, as `ack` would.
        let mut acked: Vec<Option<bool>> = deliveries
            .iter()
            .map(|delivery| {
                parse_receipt_entry(&delivery.receipt.entry)
                    .is_none_or(|(shard, _)| shard >= self.shards.count)
                    .then_some(false)
            })
            .collect();
        let mut failed = None;
        for (indexes, flags) in replies {
            match flags {
                Ok(flags) => {
                    for (index, flag) in indexes.into_iter().zip(flags) {
                        acked[index] = Some(flag == 1);
                    }
                }
                Err(error) => {
                    failed.get_or_insert(DedupError::from(error));
                }
            }
        }
        match failed {
            None => Ok(acked
                .into_iter()
                .map(|flag| flag.unwrap_or(false))
                .collect()),
            // Nothing was acked: a plain error, as a store of one shard gives.
            Some(error) if !acked.contains(&Some(true)) => Err(error),
            Some(error) => Err(DedupError::AckedInPart {
                acked,
                source: Box::new(error),
            }),
        }
    }

    async fn extend_visibility(&self, delivery: &InboxEntry) -> Result<(), DedupError> {
        let visibility = millis(self.options.visibility_timeout());
        self.on_taken(&EXTEND_TAKEN_SCRIPT, delivery, Some(visibility))
            .await
    }

    fn visibility_timeout(&self) -> Duration {
        self.options.visibility_timeout()
    }

    fn watch_accepts(&self, namespace: &str) -> Option<crate::dedup::AcceptWatch> {
        let nodes = self.connection.subscribe_at().to_vec();
        if nodes.is_empty() {
            return None;
        }
        let (channel, namespace) = (
            self.shards.accepted_channel(namespace),
            namespace.to_owned(),
        );
        Some(Box::pin(async move {
            subscribe_to_accepts(&nodes, &channel, &namespace).await
        }))
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
        let (keys, entry) = self.taken_from(delivery)?;
        let mut connection = self.connection.clone();
        let mut script = NACK_SCRIPT.prepare_invoke();
        for key in keys {
            script.key(key);
        }
        let shard = parse_receipt_entry(&delivery.receipt.entry).map_or(0, |(shard, _)| shard);
        for key in self.shards.tail_keys(&delivery.namespace, shard) {
            script.key(key);
        }
        let outcome: i64 = script
            .arg(GROUP)
            .arg(entry)
            .arg(&delivery.receipt.token)
            .arg(millis(retry_in))
            .arg(max_attempts)
            .arg(reason)
            .invoke_async(&mut connection)
            .await?;
        match outcome {
            0 => Ok(NackOutcome::WillRetry),
            1 => Ok(NackOutcome::DeadLettered),
            _ => Err(DedupError::DeliveryLost),
        }
    }

    /// Reads every shard's log at once and returns the oldest `max`
    /// across them (by log entry, whose id starts with the accept's time).
    async fn tail(&self, tail: &mut Tail, max: usize) -> Result<Vec<TailedEvent>, DedupError> {
        check_namespace(&tail.namespace)?;
        self.check_shards_read_only(&tail.namespace).await?;
        let count = usize::from(self.shards.count);
        let cursors = match &tail.position {
            Position::Logged(cursors) if cursors.len() == count => cursors.clone(),
            _ => vec![String::new(); count],
        };
        let before = cursors.clone();
        let namespace = tail.namespace.as_str();
        let replies = join_all(self.shards.from(0).zip(cursors).map(|(shard, after)| {
            let mut connection = self.connection.clone();
            let [tailing, log] = self.shards.tail_keys(namespace, shard);
            let [stream, attempts, ..] = self.shards.inbox_keys(namespace, shard);
            async move {
                let reply: Result<Vec<String>, _> = TAIL_SCRIPT
                    .key(tailing)
                    .key(log)
                    .key(stream)
                    .key(attempts)
                    .arg(after)
                    .arg(max)
                    .invoke_async(&mut connection)
                    .await;
                reply
            }
        }))
        .await;
        let starting = !matches!(tail.position, Position::Logged(_));
        let mut cursors = Vec::with_capacity(count);
        let mut logged = Vec::new();
        for (shard, reply) in replies.into_iter().enumerate() {
            let reply = reply?;
            let mut fields = reply.into_iter();
            cursors.push(fields.next().unwrap_or_default());
            while let (Some(entry), Some(id), Some(meta), Some(status)) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            {
                let order = stream_id_order(&entry);
                logged.push((order, shard, entry, id, meta, status));
            }
        }
        logged.sort_unstable_by_key(|(order, ..)| *order);
        if logged.len() > max {
            // A shard some of whose accepts are left over goes on after the
            // last one returned (or from where it was).
            let left_over: HashSet<usize> = logged[max..].iter().map(|row| row.1).collect();
            logged.truncate(max);
            for shard in left_over {
                cursors[shard] = logged
                    .iter()
                    .rev()
                    .find(|row| row.1 == shard)
                    .map_or_else(|| before[shard].clone(), |row| row.2.clone());
            }
        }
        tail.position = Position::Logged(cursors);
        if starting {
            return Ok(Vec::new());
        }
        Ok(logged
            .into_iter()
            .map(|((millis, _), _, _, id, meta, status)| {
                let status = match status.as_str() {
                    "taken" => EventStatus::Taken,
                    "retrying" => EventStatus::Retrying,
                    "dead" => EventStatus::Dead,
                    "done" => EventStatus::Done,
                    _ => EventStatus::Waiting,
                };
                let mut event = TailedEvent::new(namespace, &id, status);
                event.event_type = EventMeta::from_text(Some(&meta)).event_type;
                event.accepted_at_millis = i64::try_from(millis).ok();
                event
            })
            .collect())
    }

    /// The oldest `max` dead letters across the shards.
    async fn dead_letters(
        &self,
        namespace: &str,
        max: usize,
    ) -> Result<Vec<InboxEntry>, DedupError> {
        check_namespace(namespace)?;
        let replies = join_all(self.shards.from(0).map(|shard| {
            let mut connection = self.connection.clone();
            let dead = self.shards.key(namespace, shard, "dead");
            async move {
                let reply: Result<redis::streams::StreamRangeReply, _> =
                    connection.xrange_count(dead, "-", "+", max).await;
                reply
            }
        }))
        .await;
        let mut letters = Vec::new();
        for reply in replies {
            letters.extend(reply?.ids);
        }
        letters.sort_by_key(|entry| stream_id_order(&entry.id));
        letters.truncate(max);
        Ok(letters
            .into_iter()
            .map(|entry| {
                let field = |name: &str| -> Vec<u8> {
                    entry
                        .map
                        .get(name)
                        .and_then(|value| redis::from_redis_value_ref(value).ok())
                        .unwrap_or_default()
                };
                let text = |name: &str| String::from_utf8(field(name)).unwrap_or_default();
                InboxEntry {
                    namespace: namespace.to_owned(),
                    id: text("id"),
                    body: field("body"),
                    signed_at: text("signed_at").parse().ok(),
                    attempt: text("attempts").parse().unwrap_or(0),
                    meta: EventMeta::from_text(Some(&text("meta"))),
                    // A stream id starts with its time in ms on the server.
                    dead: Some(DeadLetter::new(
                        text("reason"),
                        super::stream_id_millis(&entry.id),
                    )),
                    // The dead stream's id is the time of death.
                    received_at_millis: None,
                    receipt: Receipt {
                        entry: entry.id.clone(),
                        token: String::new(),
                    },
                }
            })
            .collect())
    }

    async fn stats(&self, namespace: &str) -> Result<InboxStats, DedupError> {
        check_namespace(namespace)?;
        let shards = join_all(self.shards.from(0).map(|shard| {
            let [stream, _, delayed, dead] = self.shards.inbox_keys(namespace, shard);
            let mut connection = self.connection.clone();
            async move {
                let counts: Result<(u64, u64, u64), _> = STATS_SCRIPT
                    .key(stream)
                    .key(delayed)
                    .key(dead)
                    .arg(GROUP)
                    .invoke_async(&mut connection)
                    .await;
                counts
            }
        }))
        .await;
        let mut stats = InboxStats::default();
        for counts in shards {
            let (waiting, taken, dead) = counts?;
            stats.waiting += waiting;
            stats.taken += taken;
            stats.dead += dead;
        }
        Ok(stats)
    }

    async fn requeue_dead(&self, namespace: &str, id: Option<&str>) -> Result<u64, DedupError> {
        check_namespace(namespace)?;
        let shards: Vec<u16> = match id {
            Some(id) => vec![self.shards.of(id)],
            None => self.shards.from(0).collect(),
        };
        let moved = join_all(shards.into_iter().map(|shard| {
            let [stream, _, _, dead] = self.shards.inbox_keys(namespace, shard);
            let idle = self.shards.idle_key(namespace, shard);
            let channel = self.shards.accepted_channel(namespace);
            let mut connection = self.connection.clone();
            async move {
                let moved: Result<u64, _> = REQUEUE_DEAD_SCRIPT
                    .key(stream)
                    .key(dead)
                    .key(idle)
                    .arg(id.unwrap_or_default())
                    .arg(channel)
                    .invoke_async(&mut connection)
                    .await;
                moved
            }
        }))
        .await;
        let mut total = 0;
        for moved in moved {
            total += moved?;
        }
        if total > 0 {
            crate::dedup::wake_workers(namespace);
        }
        Ok(total)
    }
}

/// Wakes this process's workers of `namespace` on each message on
/// `channel`, until dropped, subscribed at the first of `nodes` that
/// answers (on a cluster a `PUBLISH` reaches every node). Each time it has
/// subscribed it wakes the workers once: what was accepted before, or
/// while a lost connection was made again, is taken at once.
async fn subscribe_to_accepts(nodes: &[redis::Client], channel: &str, namespace: &str) {
    use futures_util::StreamExt as _;
    let mut pause = Duration::from_millis(100);
    for node in nodes.iter().cycle() {
        let subscribed = async {
            let mut subscriber = node.get_async_pubsub().await?;
            subscriber.subscribe(channel).await?;
            Ok::<_, redis::RedisError>(subscriber)
        };
        match subscribed.await {
            Ok(subscriber) => {
                pause = Duration::from_millis(100);
                crate::dedup::wake::accepted(namespace);
                let mut messages = subscriber.into_on_message();
                while messages.next().await.is_some() {
                    crate::dedup::wake::accepted(namespace);
                }
                tracing::warn!(
                    channel,
                    "lost the subscription to accepts; workers poll meanwhile"
                );
            }
            Err(error) => {
                tracing::warn!(%error, channel, "cannot subscribe to accepts; workers poll meanwhile");
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// A stream entry id (`<ms>-<seq>`) as numbers, to sort entries of
/// several streams oldest first (ids start with their time in ms).
fn stream_id_order(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    (
        ms.parse::<u64>().unwrap_or(u64::MAX),
        seq.parse::<u64>().unwrap_or(0),
    )
}
