//! Inbox checks of accepts: one acceptance per id, under concurrency too,
//! bad keys refused, and claims kept for the retention.

use std::collections::HashMap;
use std::time::Duration;

use crate::dedup::{Acceptance, DedupError, Inbox, InboxQueue, StoreOptions};
use crate::testing::{Fixture, StoreUnderTest, bad_keys, drain, event};

/// An id is accepted once, then answered as a duplicate; the same id in
/// another namespace is another event, and a take returns what was
/// accepted (body, signed time, first attempt).
pub async fn accepts_once_then_reports_duplicate<T: StoreUnderTest>(under: &T)
where
    T::Store: InboxQueue,
{
    let f = Fixture::new(under, StoreOptions::default()).await;
    let e = event(&f.namespace, "evt_1");
    assert_eq!(f.store.accept(&e).await.unwrap(), Acceptance::Accepted);
    assert_eq!(f.store.accept(&e).await.unwrap(), Acceptance::Duplicate);
    // The same id in another namespace is another event.
    let other = format!("{}-other", f.namespace);
    assert_eq!(
        f.store.accept(&event(&other, "evt_1")).await.unwrap(),
        Acceptance::Accepted
    );
    let taken = f.store.take(&f.namespace, "w1", 10).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].id, "evt_1");
    assert_eq!(taken[0].body, b"evt_1");
    assert_eq!(taken[0].signed_at, Some(1_700_000_000));
    assert_eq!(taken[0].attempt, 1);
}

/// Schemes that sign no timestamp (GitHub, Shopify) are duplicates only
/// while the claim is kept: a retention of a century keeps them as good
/// as forever, on every store.
pub async fn a_retention_of_a_century_keeps_claims<T: StoreUnderTest>(under: &T)
where
    T::Store: InboxQueue,
{
    let century = Duration::from_secs(100 * 365 * 24 * 3600);
    let f = Fixture::new(under, StoreOptions::default().with_retention(century)).await;
    let e = event(&f.namespace, "kept");
    assert_eq!(f.store.accept(&e).await.unwrap(), Acceptance::Accepted);
    assert_eq!(f.store.accept(&e).await.unwrap(), Acceptance::Duplicate);
    let taken = f.store.take(&f.namespace, "w", 10).await.unwrap();
    assert_eq!(taken.len(), 1);
    f.store.ack(&taken[0]).await.unwrap();
    assert_eq!(f.store.accept(&e).await.unwrap(), Acceptance::Duplicate);
}

/// A bad namespace or event id is refused as a bad request, never stored.
pub async fn rejects_invalid_keys<T: StoreUnderTest>(under: &T)
where
    T::Store: InboxQueue,
{
    let f = Fixture::new(under, StoreOptions::default()).await;
    for (namespace, id) in bad_keys(&f.namespace) {
        let error = f.store.accept(&event(&namespace, &id)).await.unwrap_err();
        assert!(error.is_bad_request(), "{namespace:?} {id:?}: {error}");
        assert!(
            matches!(error, DedupError::InvalidKey { .. }),
            "{namespace:?} {id:?}: {error}"
        );
    }
}

/// Sixty-four accepts of one id at once: one is accepted, one event is
/// enqueued.
pub async fn sixty_four_concurrent_accepts_of_one_id_enqueue_once<T: StoreUnderTest>(under: &T)
where
    T::Store: InboxQueue,
{
    let f = Fixture::new(under, StoreOptions::default()).await;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(64));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (store, namespace, barrier) =
                (f.store.clone(), f.namespace.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store.accept(&event(&namespace, "same")).await.unwrap()
            })
        })
        .collect();
    let mut accepted = 0;
    for task in tasks {
        if task.await.unwrap() == Acceptance::Accepted {
            accepted += 1;
        }
    }
    assert_eq!(accepted, 1);
    assert_eq!(drain(&f.store, &f.namespace).await, ["same"]);
}

/// Sixteen tasks accept 10,000 ids of which 30% repeat across tasks:
/// each distinct id is accepted once and is in the inbox once.
pub async fn sixteen_tasks_ten_thousand_ids_with_repeats_enqueue_each_once<T: StoreUnderTest>(
    under: &T,
) where
    T::Store: InboxQueue,
{
    let f = Fixture::new(under, StoreOptions::default()).await;
    // 10,000 accepts over 7,000 distinct ids: 30% are repeats, spread
    // across tasks so that the same id races on two tasks.
    let distinct = 7_000;
    let tasks: Vec<_> = (0..16)
        .map(|task| {
            let (store, namespace) = (f.store.clone(), f.namespace.clone());
            tokio::spawn(async move {
                let mut accepted = Vec::new();
                for call in (task..10_000).step_by(16) {
                    let id = format!("evt_{}", (call * 7_919) % distinct);
                    if store.accept(&event(&namespace, &id)).await.unwrap() == Acceptance::Accepted
                    {
                        accepted.push(id);
                    }
                }
                accepted
            })
        })
        .collect();
    let mut accepted: HashMap<String, usize> = HashMap::new();
    for task in tasks {
        for id in task.await.unwrap() {
            *accepted.entry(id).or_default() += 1;
        }
    }
    assert_eq!(accepted.len(), distinct);
    assert!(accepted.values().all(|&n| n == 1), "an id accepted twice");
    let mut inbox = drain(&f.store, &f.namespace).await;
    inbox.sort();
    let mut expected: Vec<_> = accepted.into_keys().collect();
    expected.sort();
    assert_eq!(
        inbox, expected,
        "every distinct id in the inbox exactly once"
    );
}

/// A claim is forgotten after the retention: the same id is then accepted
/// again (2 s of retention, on the store's clock).
pub async fn claims_expire_after_the_retention<T: StoreUnderTest>(under: &T)
where
    T::Store: InboxQueue,
{
    // 2 s on the store's clock, which no test can pause: the two accepts
    // fit in it on a loaded machine (at 300 ms the second found the claim
    // gone once with both cores busy).
    const RETENTION: Duration = Duration::from_secs(2);
    let f = Fixture::new(under, StoreOptions::default().with_retention(RETENTION)).await;
    let e = event(&f.namespace, "old");
    assert_eq!(f.store.accept(&e).await.unwrap(), Acceptance::Accepted);
    assert_eq!(f.store.accept(&e).await.unwrap(), Acceptance::Duplicate);
    tokio::time::sleep(RETENTION + Duration::from_millis(200)).await;
    assert_eq!(f.store.accept(&e).await.unwrap(), Acceptance::Accepted);
}
