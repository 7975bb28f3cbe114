//! A store written outside the crate, with only the public API, that a
//! `Worker` drains: the constructors a store needs (`InboxEntry::new`,
//! `Receipt`, `DeadLetter::new`) are public, it passes the published inbox
//! checks (`hooklatch::testing::inbox`) every built-in store passes, and
//! the worker's retries, dead letters and lost acks work on it as on the
//! built-in stores.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hooklatch::dedup::{
    Acceptance, DeadLetter, DedupError, EventMeta, GiveBack, Inbox, InboxEntry, InboxQueue,
    InboxStats, IncomingEvent, NackOutcome, Receipt, StoreOptions, validate_key,
};
use hooklatch::testing::{StoreUnderTest, inbox};
use hooklatch::worker::{Event, Failure, Worker};
use tokio::time::Instant;

/// One event in [`ListInbox`].
struct Row {
    namespace: String,
    id: String,
    body: Vec<u8>,
    signed_at: Option<i64>,
    meta: EventMeta,
    /// How often it was taken.
    taken: u32,
    /// The current taking's token, while a worker holds it.
    token: Option<String>,
    /// When it is ready (again).
    ready_at: Instant,
    dead: Option<DeadLetter>,
    /// Acked: kept, so that its id stays a duplicate until the retention
    /// ends.
    done: bool,
    claimed_at: Instant,
}

/// The simplest inbox that keeps every promise a worker relies on: one
/// accept per id, a token per taking that acks and nacks must carry, a
/// visibility timeout, and dead letters after the last attempt.
#[derive(Clone, Default)]
struct ListInbox {
    rows: Arc<Mutex<Vec<Row>>>,
    options: StoreOptions,
}

const VISIBILITY: Duration = Duration::from_secs(30);

impl ListInbox {
    /// Runs `change` on the row `delivery` names, if its taking is current.
    fn with_taken<T>(
        &self,
        delivery: &InboxEntry,
        change: impl FnOnce(&mut Row) -> T,
    ) -> Result<T, DedupError> {
        let mut rows = self.rows.lock().unwrap();
        let index: usize = delivery
            .receipt()
            .entry()
            .parse()
            .map_err(|_| DedupError::DeliveryLost)?;
        match rows.get_mut(index) {
            Some(row) if row.token.as_deref() == Some(delivery.receipt().token()) => {
                Ok(change(row))
            }
            _ => Err(DedupError::DeliveryLost),
        }
    }
}

impl Inbox for ListInbox {
    async fn accept(&self, event: &IncomingEvent<'_>) -> Result<Acceptance, DedupError> {
        validate_key(event.namespace, event.id)?;
        let mut rows = self.rows.lock().unwrap();
        let retention = self.options.retention();
        if rows.iter().any(|row| {
            row.namespace == event.namespace
                && row.id == event.id
                && row.claimed_at.elapsed() < retention
        }) {
            return Ok(Acceptance::Duplicate);
        }
        rows.push(Row {
            namespace: event.namespace.to_owned(),
            id: event.id.to_owned(),
            body: event.body.to_vec(),
            signed_at: event.signed_at,
            meta: event.meta.cloned().unwrap_or_default(),
            taken: 0,
            token: None,
            ready_at: Instant::now(),
            dead: None,
            done: false,
            claimed_at: Instant::now(),
        });
        Ok(Acceptance::Accepted)
    }
}

impl InboxQueue for ListInbox {
    async fn take(
        &self,
        namespace: &str,
        _consumer: &str,
        max: usize,
    ) -> Result<Vec<InboxEntry>, DedupError> {
        let now = Instant::now();
        let mut rows = self.rows.lock().unwrap();
        let mut taken = Vec::new();
        for (index, row) in rows.iter_mut().enumerate() {
            if taken.len() == max {
                break;
            }
            if row.namespace != namespace || row.done || row.dead.is_some() || row.ready_at > now {
                continue;
            }
            row.taken += 1;
            // Unique across every taking, a requeued dead letter's too.
            static TAKINGS: AtomicU64 = AtomicU64::new(0);
            let token = format!("{index}:{}", TAKINGS.fetch_add(1, Ordering::Relaxed));
            row.token = Some(token.clone());
            row.ready_at = now + self.options.visibility_timeout();
            taken.push(
                InboxEntry::new(
                    namespace,
                    &row.id,
                    row.body.clone(),
                    Receipt::new(index.to_string(), token),
                )
                .with_attempt(row.taken)
                .with_signed_at(row.signed_at)
                .with_meta(row.meta.clone()),
            );
        }
        Ok(taken)
    }

    async fn ack(&self, delivery: &InboxEntry) -> Result<(), DedupError> {
        self.with_taken(delivery, |row| {
            row.token = None;
            row.done = true;
        })
    }

    async fn extend_visibility(&self, delivery: &InboxEntry) -> Result<(), DedupError> {
        let visibility = self.options.visibility_timeout();
        let lapsed = self.with_taken(delivery, |row| {
            let now = Instant::now();
            // A hold that lapsed may be taken by another worker any moment.
            let lapsed = row.ready_at <= now;
            if !lapsed {
                row.ready_at = now + visibility;
            }
            lapsed
        })?;
        if lapsed {
            return Err(DedupError::DeliveryLost);
        }
        Ok(())
    }

    async fn give_back(
        &self,
        delivery: &InboxEntry,
        how: GiveBack,
        reason: &str,
    ) -> Result<NackOutcome, DedupError> {
        self.with_taken(delivery, |row| {
            row.token = None;
            match how {
                GiveBack::Retry(delay) if row.taken < self.options.max_attempts() => {
                    row.ready_at = Instant::now() + delay;
                    NackOutcome::WillRetry
                }
                _ => {
                    row.dead = Some(DeadLetter::new(reason, None));
                    NackOutcome::DeadLettered
                }
            }
        })
    }

    fn visibility_timeout(&self) -> Duration {
        self.options.visibility_timeout()
    }

    async fn dead_letters(
        &self,
        namespace: &str,
        max: usize,
    ) -> Result<Vec<InboxEntry>, DedupError> {
        let rows = self.rows.lock().unwrap();
        Ok(rows
            .iter()
            .enumerate()
            .filter_map(|(index, row)| {
                let dead = row.dead.clone().filter(|_| row.namespace == namespace)?;
                let receipt = Receipt::new(index.to_string(), "");
                Some(
                    InboxEntry::new(namespace, &row.id, row.body.clone(), receipt)
                        .with_attempt(row.taken)
                        .with_signed_at(row.signed_at)
                        .with_meta(row.meta.clone())
                        .with_dead(dead),
                )
            })
            .take(max)
            .collect())
    }

    async fn stats(&self, namespace: &str) -> Result<InboxStats, DedupError> {
        let rows = self.rows.lock().unwrap();
        let mut stats = InboxStats::default();
        let now = Instant::now();
        for row in rows
            .iter()
            .filter(|row| row.namespace == namespace && !row.done)
        {
            if row.dead.is_some() {
                stats.dead += 1;
            } else if row.token.is_some() && row.ready_at > now {
                stats.taken += 1;
            } else {
                stats.waiting += 1;
            }
        }
        Ok(stats)
    }

    async fn requeue_dead(&self, namespace: &str, id: Option<&str>) -> Result<u64, DedupError> {
        let mut rows = self.rows.lock().unwrap();
        let mut moved = 0;
        for row in rows.iter_mut() {
            if row.namespace == namespace && row.dead.is_some() && id.is_none_or(|id| id == row.id)
            {
                row.dead = None;
                row.taken = 0;
                row.ready_at = Instant::now();
                moved += 1;
            }
        }
        Ok(moved)
    }
}

/// A worker drains a store written with the public API alone: a handler
/// that fails once is retried and handled, one that gives up is
/// dead-lettered with its reason, and an ack with a stale receipt is
/// refused as lost.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_store_written_outside_the_crate_is_drained_by_a_worker() {
    let store = ListInbox::default();
    for id in ["evt_ok", "evt_flaky", "evt_bad"] {
        let event = IncomingEvent::new("own", id, b"{}");
        assert_eq!(store.accept(&event).await.unwrap(), Acceptance::Accepted);
    }
    let handled = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&handled);
    let running = Worker::new(store.clone(), "own", move |event: Event| {
        let outcome = match (event.id(), event.attempt()) {
            ("evt_flaky", 1) => Err(Failure::retry_after(
                Duration::from_secs(1),
                "upstream busy",
            )),
            ("evt_bad", _) => Err(Failure::dead_letter("no such customer")),
            _ => {
                seen.lock().unwrap().push(event.id().to_owned());
                Ok(())
            }
        };
        async move { outcome }
    })
    .start();
    while handled.lock().unwrap().len() < 2
        || store.dead_letters("own", 10).await.unwrap().is_empty()
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = running.stop(Duration::from_secs(1)).await;
    let mut handled = handled.lock().unwrap().clone();
    handled.sort();
    assert_eq!(handled, ["evt_flaky", "evt_ok"]);
    assert_eq!(
        (report.handled, report.retried, report.dead_lettered),
        (2, 1, 1)
    );
    let dead = store.dead_letters("own", 10).await.unwrap();
    assert_eq!(dead[0].id, "evt_bad");
    assert_eq!(dead[0].dead.as_ref().unwrap().reason, "no such customer");

    // A taking's receipt is what an ack is checked against.
    assert_eq!(store.requeue_dead("own", None).await.unwrap(), 1);
    let first = store.take("own", "w", 1).await.unwrap().remove(0);
    tokio::time::advance(VISIBILITY).await;
    let second = store.take("own", "w", 1).await.unwrap().remove(0);
    assert_eq!(first.receipt().entry(), second.receipt().entry());
    assert!(matches!(
        store.ack(&first).await,
        Err(DedupError::DeliveryLost)
    ));
    store.ack(&second).await.unwrap();
}

impl StoreUnderTest for ListInbox {
    type Store = ListInbox;

    async fn store(&self, options: StoreOptions) -> ListInbox {
        ListInbox {
            rows: Arc::clone(&self.rows),
            options,
        }
    }
}

/// The store passes every published inbox check, as the built-in stores
/// do (tests/dedup.rs stamps the same checks for each of them).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_written_outside_the_crate_passes_the_published_inbox_checks() {
    inbox::all(&ListInbox::default()).await;
}
