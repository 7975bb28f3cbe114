//! Outbox checks of what a [`Keeping`] store keeps: idempotency keys for
//! their window, once under concurrent sends too, and each outcome for its
//! retention; bad names refused by both enqueues.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::sender::OutboxError;
use crate::sender::outbox::{
    DeliveryState, DeliveryStore, Keeping, OUTBOX_PURGE_BATCH, Retention, SendKey, Taken,
};
use crate::sender::rules::{Attempt, Final, Step};
use crate::testing::OutboxUnderTest;

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

/// Within its window a key enqueues once and names the first delivery;
/// at the window's end it is free again; keys are per endpoint.
pub async fn a_key_enqueues_once_within_its_window<T: OutboxUnderTest>(under: &T)
where
    T::Store: Keeping,
{
    let store = under.empty().await;
    let t0 = now_ms();
    let first = store
        .enqueue_keyed(ENDPOINT, key("k-1", t0), "msg_1", b"one", t0)
        .await
        .unwrap();
    assert!(first.enqueued);
    assert_eq!(first.id, "msg_1");
    let later = t0 + DAY - Duration::from_millis(1);
    let again = under
        .reopen(&store)
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
pub async fn concurrent_sends_with_one_key_enqueue_once<T: OutboxUnderTest>(under: &T)
where
    T::Store: Keeping,
{
    const SENDERS: usize = 16;
    let now = now_ms();
    let mut stores = vec![under.empty().await];
    for _ in 1..4 {
        stores.push(under.reopen(&stores[0]).await);
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
pub async fn expired_keys_are_forgotten<T: OutboxUnderTest>(under: &T)
where
    T::Store: Keeping,
{
    let store = under.empty().await;
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

/// Each outcome is kept for its own time: delivered for a day, dead for
/// 30 days, pending for 14 days, gone for ever; a purged delivery goes with
/// its attempts and its id is free again; another endpoint is untouched.
pub async fn each_outcome_is_purged_after_its_retention<T: OutboxUnderTest>(under: &T)
where
    T::Store: Keeping,
{
    let store = under.empty().await;
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
pub async fn a_leased_delivery_is_kept_until_its_lease_ends<T: OutboxUnderTest>(under: &T)
where
    T::Store: Keeping,
{
    let store = under.empty().await;
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

/// Both enqueues check the endpoint's name, the id and the key before a
/// backend sees them (the trait does, so no backend can skip it): an
/// empty or overlong one is `InvalidKey`, and nothing is stored.
pub async fn both_enqueues_refuse_bad_names_and_store_nothing<T: OutboxUnderTest>(under: &T)
where
    T::Store: Keeping,
{
    let store = under.empty().await;
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

/// More deliveries than two batches are purged; and a full batch of dead
/// deliveries sent long ago that ended only recently does not stop the
/// purge of those behind it.
pub async fn the_purge_takes_every_batch<T: OutboxUnderTest>(under: &T)
where
    T::Store: Keeping,
{
    let store = under.empty().await;
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
    // The store stamps each end by its own clock: the cutoff comes from it.
    let cutoff = store.store_time().await.unwrap();
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
