//! What an outbox keeps and for how long, stamped over every delivery
//! store (memory, SQLite, Postgres, Redis on one server and as a
//! cluster): sends under an idempotency key, remembered for a window and
//! claimed with the enqueue in one atomic step (real concurrent senders),
//! expired keys forgotten, and each outcome purged after its own
//! retention, with its attempts, in bounded batches.

#[path = "support/receiver.rs"]
mod receiver;
mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hooklatch::sender::OutboxError;

use hooklatch::sender::SendKey;
use hooklatch::sender::outbox::{DeliveryState, Retention};
use hooklatch::sender::outbox::{DeliveryStore, Keeping, OUTBOX_PURGE_BATCH, Taken};
use hooklatch::sender::rules::{Attempt, Final, Step};

#[path = "support/outbox_backends.rs"]
mod backends;
use backends::*;
use receiver::{Receiver, add, dispatcher, every, wait_until};

const ENDPOINT: &str = "orders";
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// The time now in whole milliseconds, as the stores keep times.
fn now_ms() -> SystemTime {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    UNIX_EPOCH + Duration::from_millis(u64::try_from(since.as_millis()).unwrap())
}

fn key(key: &str, now: SystemTime) -> SendKey<'_> {
    SendKey {
        key,
        now,
        window: DAY,
    }
}

async fn pending(store: &impl DeliveryStore, endpoint: &str) -> Vec<String> {
    store
        .list(endpoint, DeliveryState::Pending, 100)
        .await
        .unwrap()
}

/// Within its window a key enqueues once and names the first delivery;
/// at the window's end it is free again; keys are per endpoint.
async fn a_key_enqueues_once_within_its_window(backend: impl Backend) {
    let store = backend.open().await;
    let t0 = now_ms();
    let first = store
        .enqueue_keyed(ENDPOINT, key("k-1", t0), "msg_1", b"one", t0)
        .await
        .unwrap();
    assert!(first.enqueued);
    assert_eq!(first.id, "msg_1");
    let later = t0 + DAY - Duration::from_millis(1);
    let again = backend
        .open()
        .await
        .enqueue_keyed(ENDPOINT, key("k-1", later), "msg_2", b"two", later)
        .await
        .unwrap();
    assert!(!again.enqueued, "the same key within 24 h enqueues nothing");
    assert_eq!(again.id, "msg_1", "and reports the first delivery");
    assert_eq!(store.delivery(ENDPOINT, "msg_2").await.unwrap(), None);
    assert_eq!(pending(&store, ENDPOINT).await, ["msg_1"]);

    let other = store
        .enqueue_keyed("invoices", key("k-1", later), "msg_2", b"two", later)
        .await
        .unwrap();
    assert!(
        other.enqueued,
        "another endpoint's key of that name is its own"
    );

    let expired = t0 + DAY;
    let after = store
        .enqueue_keyed(ENDPOINT, key("k-1", expired), "msg_3", b"three", expired)
        .await
        .unwrap();
    assert!(after.enqueued, "after 24 h the key is free again");
    assert_eq!(after.id, "msg_3");
    let renewed = store
        .enqueue_keyed(ENDPOINT, key("k-1", expired), "msg_4", b"four", expired)
        .await
        .unwrap();
    assert_eq!((renewed.id.as_str(), renewed.enqueued), ("msg_3", false));

    assert!(
        store
            .enqueue_keyed(ENDPOINT, key("two words", t0), "msg_5", b"{}", t0)
            .await
            .is_err(),
        "a key is checked as an id is"
    );
    assert!(
        store
            .enqueue_keyed(ENDPOINT, key("", t0), "msg_5", b"{}", t0)
            .await
            .is_err()
    );
}

/// Concurrent senders with one key, each on its own connection: exactly
/// one enqueues, and every one is told the same id.
async fn concurrent_sends_with_one_key_enqueue_once(backend: impl Backend) {
    const SENDERS: usize = 16;
    let now = now_ms();
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(backend.open().await);
    }
    for round in 0..3 {
        let name = format!("k-{round}");
        let start = std::sync::Arc::new(tokio::sync::Barrier::new(SENDERS));
        let tasks: Vec<_> = (0..SENDERS)
            .map(|n| {
                let store = stores[n % stores.len()].clone();
                let (name, start) = (name.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    let id = format!("msg_{round}_{n}");
                    store
                        .enqueue_keyed(ENDPOINT, key(&name, now), &id, b"{}", now)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.unwrap());
        }
        let enqueued: Vec<_> = results.iter().filter(|keyed| keyed.enqueued).collect();
        assert_eq!(enqueued.len(), 1, "round {round}: {results:?}");
        assert!(
            results.iter().all(|keyed| keyed.id == enqueued[0].id),
            "{results:?}"
        );
    }
    assert_eq!(pending(&stores[0], ENDPOINT).await.len(), 3);
}

/// Expired keys are forgotten (a live one is kept), and a forgotten key is
/// free.
async fn expired_keys_are_forgotten(backend: impl Backend) {
    let store = backend.open().await;
    let t0 = now_ms();
    for (name, at) in [("old-1", t0), ("old-2", t0), ("new", t0 + HOUR)] {
        let id = format!("msg_{name}");
        let keyed = store
            .enqueue_keyed(ENDPOINT, key(name, at), &id, b"{}", at)
            .await
            .unwrap();
        assert!(keyed.enqueued);
    }
    assert_eq!(store.forget_keys(ENDPOINT, t0 + HOUR).await.unwrap(), 0);
    assert_eq!(store.forget_keys(ENDPOINT, t0 + DAY).await.unwrap(), 2);
    assert_eq!(store.forget_keys(ENDPOINT, t0 + DAY).await.unwrap(), 0);
    let still = store
        .enqueue_keyed(ENDPOINT, key("new", t0 + DAY), "msg_x", b"{}", t0)
        .await
        .unwrap();
    assert_eq!((still.id.as_str(), still.enqueued), ("msg_new", false));
    // The forgotten key is free; its delivery, still stored, is not sent
    // twice under its id.
    let freed = store
        .enqueue_keyed(ENDPOINT, key("old-1", t0 + DAY), "msg_y", b"{}", t0)
        .await
        .unwrap();
    assert_eq!((freed.id.as_str(), freed.enqueued), ("msg_y", true));
}

/// Leases `ids` on the endpoint and ends each as `outcome` (one attempt
/// each, so the purge has attempts to delete).
async fn end_as(store: &impl DeliveryStore, ids: &[String], outcome: Final) {
    let now = SystemTime::now();
    for id in ids {
        assert!(store.enqueue(ENDPOINT, id, b"{}", now).await.unwrap());
    }
    let due = store
        .take_due(ENDPOINT, now, ids.len(), Duration::from_secs(60))
        .await
        .unwrap();
    let wanted: Vec<&Taken> = due.taken.iter().filter(|t| ids.contains(&t.id)).collect();
    assert_eq!(wanted.len(), ids.len());
    for taken in wanted {
        let attempt = Attempt::new(taken.attempts + 1, now, Ok(500));
        let step = Step::Done(outcome);
        store
            .finish(taken, &attempt, step, None)
            .await
            .expect("the lease held");
    }
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}_{i}")).collect()
}

/// Each outcome is kept for its own time: delivered for a day, dead for
/// 30 days, pending for 14 days, gone for ever; a purged delivery goes with
/// its attempts and its id is free again; another endpoint is untouched.
async fn each_outcome_is_purged_after_its_retention(backend: impl Backend) {
    let store = backend.open().await;
    end_as(&store, &ids("delivered", 2), Final::Delivered).await;
    end_as(&store, &ids("gone", 2), Final::Gone).await;
    end_as(&store, &ids("dead", 2), Final::Dead).await;
    let now = SystemTime::now();
    for id in ids("pending", 2) {
        assert!(store.enqueue(ENDPOINT, &id, b"{}", now).await.unwrap());
    }
    assert!(
        store
            .enqueue("invoices", "other", b"{}", now)
            .await
            .unwrap()
    );
    let retention = Retention::KEEP_ALL
        .with_delivered(Some(DAY))
        .with_dead(Some(30 * DAY))
        .with_pending(Some(14 * DAY));
    let purge = |after: Duration| {
        let store = store.clone();
        async move {
            store
                .purge_outcomes(ENDPOINT, &retention, SystemTime::now() + after)
                .await
                .unwrap()
        }
    };
    assert_eq!(purge(Duration::ZERO).await, 0, "nothing is a day old");
    assert_eq!(purge(DAY + HOUR).await, 2, "the delivered ones");
    assert_eq!(store.delivery(ENDPOINT, "delivered_0").await.unwrap(), None);
    assert_eq!(purge(13 * DAY).await, 0);
    assert_eq!(purge(14 * DAY + HOUR).await, 2, "the backlog after 14 days");
    assert_eq!(purge(29 * DAY).await, 0);
    assert_eq!(purge(30 * DAY + HOUR).await, 2, "the dead after 30 days");
    assert_eq!(purge(3650 * DAY).await, 0, "gone ones are kept");
    for state in [
        DeliveryState::Delivered,
        DeliveryState::Dead,
        DeliveryState::Pending,
    ] {
        let left = store.list(ENDPOINT, state, 10).await.unwrap();
        assert!(left.is_empty(), "{state:?}: {left:?}");
    }
    assert_eq!(
        store
            .list(ENDPOINT, DeliveryState::Gone, 10)
            .await
            .unwrap()
            .len(),
        2
    );
    assert!(store.delivery("invoices", "other").await.unwrap().is_some());
    // A purged id is forgotten, attempts and all.
    assert!(store.enqueue(ENDPOINT, "dead_1", b"{}", now).await.unwrap());
    let again = store.delivery(ENDPOINT, "dead_1").await.unwrap().unwrap();
    assert!(again.attempts.is_empty());
}

/// A pending delivery in an attempt now (leased) is kept by the purge of
/// the backlog; once its lease has run out it is purged.
async fn a_leased_delivery_is_kept_until_its_lease_ends(backend: impl Backend) {
    let store = backend.open().await;
    let now = SystemTime::now();
    assert!(store.enqueue(ENDPOINT, "busy", b"{}", now).await.unwrap());
    let lease = 30 * DAY;
    let due = store.take_due(ENDPOINT, now, 1, lease).await.unwrap();
    assert_eq!(due.taken.len(), 1);
    let retention = Retention::KEEP_ALL.with_pending(Some(14 * DAY));
    let purged = store
        .purge_outcomes(ENDPOINT, &retention, now + 15 * DAY)
        .await
        .unwrap();
    assert_eq!(purged, 0, "leased until day 30");
    let purged = store
        .purge_outcomes(ENDPOINT, &retention, now + 31 * DAY)
        .await
        .unwrap();
    assert_eq!(purged, 1);
}

/// More deliveries than two batches are purged; and a full batch of dead
/// deliveries sent long ago that ended only recently does not stop the
/// purge of those behind it.
async fn the_purge_takes_every_batch(backend: impl Backend) {
    let store = backend.open().await;
    let batch = usize::try_from(OUTBOX_PURGE_BATCH).unwrap();
    let late = ids("late", batch + 1);
    let now = SystemTime::now();
    // Due only in an hour, so the deliveries ended below are taken first.
    for id in &late {
        assert!(
            store
                .enqueue(ENDPOINT, id, b"{}", now + HOUR)
                .await
                .unwrap()
        );
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let early = ids("early", 3);
    end_as(&store, &early, Final::Dead).await;
    end_as(&store, &ids("done", 2 * batch + 3), Final::Delivered).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let cutoff = now_ms();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let due = store
        .take_due(ENDPOINT, now + HOUR, batch + 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(due.taken.len(), batch + 1);
    for taken in &due.taken {
        let attempt = Attempt::new(1, SystemTime::now(), Ok(500));
        let step = Step::Done(Final::Dead);
        store
            .finish(taken, &attempt, step, None)
            .await
            .expect("the lease held");
    }
    let retention = Retention::ended_kept_for(Duration::ZERO);
    let purged = store
        .purge_outcomes(ENDPOINT, &retention, cutoff)
        .await
        .unwrap();
    assert_eq!(purged, u64::try_from(3 + 2 * batch + 3).unwrap());
    let dead = store
        .list(ENDPOINT, DeliveryState::Dead, 2 * batch)
        .await
        .unwrap();
    assert_eq!(dead.len(), batch + 1, "those that ended after the cutoff");
    assert!(dead.iter().all(|id| id.starts_with("late")));
}

/// Two dispatchers on one store, each opened as another process would,
/// send with one key at once: one delivery is enqueued and delivered, and
/// every sender is told its id. The policy's retention purges it once
/// delivered, while the key, remembered for its window, still names it.
async fn two_dispatchers_with_one_key_deliver_once(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    let policy = every(Duration::from_millis(20), 3)
        .with_idempotency_window(Some(DAY))
        .with_retention(Retention::KEEP_ALL.with_delivered(Some(Duration::ZERO)));
    let mut dispatchers = Vec::new();
    for _ in 0..2 {
        let one = dispatcher(backend.open().await, &receiver);
        add(&one, policy.clone()).await;
        dispatchers.push(one);
    }
    let running: Vec<_> = dispatchers.iter().map(|one| one.start()).collect();
    let sends: Vec<_> = (0..8)
        .map(|n| {
            let one = dispatchers[n % 2].clone();
            tokio::spawn(async move {
                let id = format!("msg_{n}");
                one.send_with_key(ENDPOINT, "order-7", &id, b"{}")
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut results = Vec::new();
    for send in sends {
        results.push(send.await.unwrap());
    }
    let first: Vec<_> = results.iter().filter(|keyed| keyed.enqueued).collect();
    assert_eq!(first.len(), 1, "{results:?}");
    let id = first[0].id.clone();
    assert!(results.iter().all(|keyed| keyed.id == id), "{results:?}");
    wait_until("the one delivery is answered", || async {
        !receiver.answered().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    for one in running {
        one.stop().await;
    }
    let answered: Vec<String> = receiver.answered().into_iter().map(|(id, _)| id).collect();
    assert_eq!(answered, std::slice::from_ref(&id));

    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(dispatchers[0].purge_by_policy().await.unwrap(), 1);
    let store = backend.open().await;
    assert_eq!(store.delivery(ENDPOINT, &id).await.unwrap(), None);
    let again = dispatchers[1]
        .send_with_key(ENDPOINT, "order-7", "msg_9", b"{}")
        .await
        .unwrap();
    assert_eq!((again.id, again.enqueued), (id, false));
}

/// Both enqueues check the endpoint's name, the id and the key before a
/// backend sees them (the trait does, so no backend can skip it): an
/// empty or overlong one is `InvalidKey`, and nothing is stored.
async fn both_enqueues_refuse_bad_names_and_store_nothing(backend: impl Backend) {
    let store = backend.open().await;
    let t0 = now_ms();
    let long = "x".repeat(10_000);
    for (endpoint, id) in [(ENDPOINT, ""), (ENDPOINT, long.as_str()), ("", "msg_1")] {
        let plain = store.enqueue(endpoint, id, b"{}", t0).await;
        assert!(
            matches!(plain, Err(OutboxError::InvalidKey { .. })),
            "{endpoint:?} {}: {plain:?}",
            id.len()
        );
        let keyed = store
            .enqueue_keyed(endpoint, key("k-1", t0), id, b"{}", t0)
            .await;
        assert!(
            matches!(keyed, Err(OutboxError::InvalidKey { .. })),
            "{endpoint:?} {}: {keyed:?}",
            id.len()
        );
    }
    for bad_key in ["", long.as_str()] {
        let keyed = store
            .enqueue_keyed(ENDPOINT, key(bad_key, t0), "msg_1", b"{}", t0)
            .await;
        assert!(
            matches!(keyed, Err(OutboxError::InvalidKey { .. })),
            "key of {}: {keyed:?}",
            bad_key.len()
        );
    }
    assert!(pending(&store, ENDPOINT).await.is_empty());
    let fine = store
        .enqueue_keyed(ENDPOINT, key("k-1", t0), "msg_1", b"{}", t0)
        .await
        .unwrap();
    assert!(fine.enqueued, "no bad call recorded the key");
}

macro_rules! suite {
    ($module:ident, $backend:expr) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_idempotency_key_enqueues_once_within_its_window_and_is_free_after() {
                a_key_enqueues_once_within_its_window($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_sends_with_one_key_enqueue_exactly_once() {
                concurrent_sends_with_one_key_enqueue_once($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn two_dispatchers_sending_with_one_key_at_once_deliver_one_event() {
                two_dispatchers_with_one_key_deliver_once($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn both_enqueues_refuse_an_empty_or_overlong_name_and_store_nothing() {
                both_enqueues_refuse_bad_names_and_store_nothing($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn expired_idempotency_keys_are_forgotten_and_live_ones_kept() {
                expired_keys_are_forgotten($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn each_outcome_is_purged_after_its_own_retention_with_its_attempts() {
                each_outcome_is_purged_after_its_retention($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_pending_delivery_in_an_attempt_outlives_the_backlog_retention() {
                a_leased_delivery_is_kept_until_its_lease_ends($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_retention_purge_takes_every_batch_and_reads_past_recent_ends() {
                the_purge_takes_every_batch($backend).await;
            }
        }
    };
}

suite!(on_memory, memory());
suite!(on_sqlite, sqlite());
suite!(on_any_sqlite, any_sqlite());
suite!(on_postgres, postgres());
suite!(on_redis, redis());
suite!(on_redis_cluster, redis_cluster());
