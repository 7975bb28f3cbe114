//! Inbox checks of `stats`: each state counted, exactly, under
//! concurrent writes too.

use std::time::Duration;

use crate::dedup::{Acceptance, Inbox, InboxQueue, InboxStats, NackOutcome, StoreOptions};
use crate::testing::{Fixture, StoreUnderTest, drain, event};

/// The counts follow events from waiting to taken to dead, and a requeue
/// brings one dead letter, or all, back with their attempts from zero;
/// their claims stay, so the sender's retry is still a duplicate.
pub async fn stats_count_each_state_and_requeue_brings_dead_letters_back<T: StoreUnderTest>(
    under: &T,
) where
    T::Store: InboxQueue,
{
    let f = Fixture::new(under, StoreOptions::default().with_max_attempts(1)).await;
    for id in ["a", "b", "c"] {
        let _ = f.store.accept(&event(&f.namespace, id)).await.unwrap();
    }
    let stats = |waiting, taken, dead| {
        let mut stats = InboxStats::default();
        (stats.waiting, stats.taken, stats.dead) = (waiting, taken, dead);
        stats
    };
    assert_eq!(f.store.stats(&f.namespace).await.unwrap(), stats(3, 0, 0));
    let taken = f.store.take(&f.namespace, "w", 2).await.unwrap();
    assert_eq!(f.store.stats(&f.namespace).await.unwrap(), stats(1, 2, 0));
    for entry in &taken {
        assert_eq!(
            f.store.nack(entry, Duration::ZERO).await.unwrap(),
            NackOutcome::DeadLettered
        );
    }
    assert_eq!(f.store.stats(&f.namespace).await.unwrap(), stats(1, 0, 2));
    let first = taken[0].id.clone();
    assert_eq!(
        f.store
            .requeue_dead(&f.namespace, Some(&first))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        f.store
            .requeue_dead(&f.namespace, Some("nope"))
            .await
            .unwrap(),
        0
    );
    assert_eq!(f.store.stats(&f.namespace).await.unwrap(), stats(2, 0, 1));
    assert_eq!(f.store.requeue_dead(&f.namespace, None).await.unwrap(), 1);
    assert_eq!(f.store.stats(&f.namespace).await.unwrap(), stats(3, 0, 0));
    let mut again = drain(&f.store, &f.namespace).await;
    again.sort();
    assert_eq!(again, ["a", "b", "c"]);
    assert_eq!(
        f.store.accept(&event(&f.namespace, "a")).await.unwrap(),
        Acceptance::Duplicate
    );
}

/// `stats` stays exact while accepts, takes, acks and nacks run at once on
/// many connections: eight tasks accept 2,000 ids with repeats while two
/// workers take, ack half and nack the rest back, and the counts after
/// each phase match what the callers were told (on the SQL stores the
/// total is kept by triggers, per connection, not counted).
pub async fn stats_stay_exact_under_concurrent_accepts_takes_acks_and_nacks<T: StoreUnderTest>(
    under: &T,
) where
    T::Store: InboxQueue,
{
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let f = Fixture::new(under, StoreOptions::default().with_max_attempts(1_000)).await;
    let (accepted, acked) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let accepting = Arc::new(AtomicBool::new(true));
    let accepts: Vec<_> = (0..8)
        .map(|task| {
            let (store, namespace, accepted) =
                (f.store.clone(), f.namespace.clone(), accepted.clone());
            tokio::spawn(async move {
                for call in (task..2_000).step_by(8) {
                    let id = format!("evt_{}", (call * 7_919) % 1_500);
                    if store.accept(&event(&namespace, &id)).await.unwrap() == Acceptance::Accepted
                    {
                        accepted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let workers: Vec<_> = (0..2)
        .map(|worker| {
            let (store, namespace, acked, accepting) = (
                f.store.clone(),
                f.namespace.clone(),
                acked.clone(),
                accepting.clone(),
            );
            tokio::spawn(async move {
                let mut turn = 0_u64;
                while accepting.load(Ordering::Relaxed) {
                    let batch = store
                        .take(&namespace, &format!("w{worker}"), 16)
                        .await
                        .unwrap();
                    for entry in batch {
                        turn += 1;
                        if turn.is_multiple_of(2) {
                            store.ack(&entry).await.unwrap();
                            acked.fetch_add(1, Ordering::Relaxed);
                        } else {
                            store.nack(&entry, Duration::ZERO).await.unwrap();
                        }
                    }
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for task in accepts {
        task.await.unwrap();
    }
    accepting.store(false, Ordering::Relaxed);
    for worker in workers {
        worker.await.unwrap();
    }
    let (accepted, acked) = (
        accepted.load(Ordering::Relaxed),
        acked.load(Ordering::Relaxed),
    );
    assert_eq!(accepted, 1_500, "each distinct id accepted once");
    let mut expected = InboxStats {
        waiting: accepted - acked,
        ..InboxStats::default()
    };
    assert_eq!(
        f.store.stats(&f.namespace).await.unwrap(),
        expected,
        "after {acked} acks, every other accepted event waits"
    );
    for late in 0..150 {
        let id = format!("late_{late}");
        let _ = f.store.accept(&event(&f.namespace, &id)).await.unwrap();
    }
    expected.waiting += 150;
    assert_eq!(f.store.stats(&f.namespace).await.unwrap(), expected);
    let held = f.store.take(&f.namespace, "w", 100).await.unwrap();
    assert_eq!(held.len(), 100);
    expected.waiting -= 100;
    expected.taken = 100;
    assert_eq!(f.store.stats(&f.namespace).await.unwrap(), expected);
    let other = format!("{}-other", f.namespace);
    let _ = f.store.accept(&event(&other, "evt_0")).await.unwrap();
    assert_eq!(
        f.store.stats(&f.namespace).await.unwrap(),
        expected,
        "another namespace's accept is not counted here"
    );
    for entry in &held {
        f.store.ack(entry).await.unwrap();
    }
    expected.taken = 0;
    assert_eq!(f.store.stats(&f.namespace).await.unwrap(), expected);
    let drained = drain(&f.store, &f.namespace).await;
    assert_eq!(drained.len() as u64, expected.waiting);
    assert_eq!(
        f.store.stats(&f.namespace).await.unwrap(),
        InboxStats::default()
    );
}
