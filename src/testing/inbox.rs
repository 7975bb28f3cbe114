//! The inbox checks: each takes what makes the store under test, makes
//! its own stores and namespaces, and panics with what broke.

use std::collections::HashMap;
use std::time::Duration;

use super::{Fixture, StoreUnderTest, bad_keys, drain, event};

/// Asserts that a take in `namespace` finds nothing ready.
async fn assert_nothing_ready<S: InboxQueue>(store: &S, namespace: &str) {
    let taken = store.take(namespace, "check", 10).await.unwrap();
    assert!(taken.is_empty(), "nothing should be ready: {taken:?}");
}
use crate::dedup::{
    Acceptance, DedupError, EventMeta, Inbox, InboxQueue, InboxStats, IncomingEvent, NackOutcome,
    StoreOptions,
};

/// Runs every check of this module in turn, each on stores of its own:
/// what a store must do for the receiver and the worker to keep their
/// promises. Takes about 25 s (several checks wait out real delays,
/// visibility timeouts and retention on the store's clock) and needs a
/// multi-threaded tokio runtime.
///
/// ```no_run
/// # async fn run() {
/// use hooklatch::dedup::{MemoryInbox, StoreOptions};
/// use hooklatch::testing::{StoreUnderTest, inbox};
///
/// struct Memory;
///
/// impl StoreUnderTest for Memory {
///     type Store = MemoryInbox;
///
///     async fn store(&self, options: StoreOptions) -> MemoryInbox {
///         MemoryInbox::new().with_options(options)
///     }
/// }
///
/// inbox::all(&Memory).await;
/// # }
/// ```
pub async fn all<T: StoreUnderTest>(under: &T)
where
    T::Store: InboxQueue,
{
    accepts_once_then_reports_duplicate(under).await;
    a_retention_of_a_century_keeps_claims(under).await;
    rejects_invalid_keys(under).await;
    takes_in_order_and_ack_removes(under).await;
    nack_redelivers_after_the_delay(under).await;
    dead_letters_after_max_attempts(under).await;
    provider_metadata_stays_with_the_event_to_the_dead_letters(under).await;
    stats_count_each_state_and_requeue_brings_dead_letters_back(under).await;
    stats_stay_exact_under_concurrent_accepts_takes_acks_and_nacks(under).await;
    crashed_worker_event_comes_back_and_acked_never_does(under).await;
    sixty_four_concurrent_accepts_of_one_id_enqueue_once(under).await;
    sixteen_tasks_ten_thousand_ids_with_repeats_enqueue_each_once(under).await;
    ack_many_acks_what_it_holds_and_reports_the_rest_lost(under).await;
    a_take_never_hands_out_one_event_twice(under).await;
    a_heartbeat_after_the_visibility_lapsed_is_refused(under).await;
    heartbeats_keep_a_taken_event_from_other_workers(under).await;
    claims_expire_after_the_retention(under).await;
}

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

/// Takes hand each event to one worker, oldest first where the store
/// orders the whole namespace; an ack removes it, and a second ack of it
/// is [`DedupError::DeliveryLost`].
pub async fn takes_in_order_and_ack_removes<T: StoreUnderTest>(under: &T)
where
    T::Store: InboxQueue,
{
    let f = Fixture::new(under, StoreOptions::default()).await;
    for id in ["a", "b", "c"] {
        assert_eq!(
            f.store.accept(&event(&f.namespace, id)).await.unwrap(),
            Acceptance::Accepted
        );
    }
    let first = f.store.take(&f.namespace, "w1", 2).await.unwrap();
    let ids: Vec<_> = first.iter().map(|d| d.id.as_str()).collect();
    if under.ordered_across_the_namespace() {
        assert_eq!(ids, ["a", "b"]);
    }
    assert_eq!(ids.len(), 2);
    let second = f.store.take(&f.namespace, "w2", 10).await.unwrap();
    assert_eq!(second.len(), 1);
    let mut all: Vec<_> = first.iter().chain(&second).map(|d| d.id.as_str()).collect();
    all.sort_unstable();
    assert_eq!(
        all,
        ["a", "b", "c"],
        "each event is taken once, by one worker"
    );
    for delivery in first.iter().chain(&second) {
        f.store.ack(delivery).await.unwrap();
    }
    // Acked twice is an error, not a silent success.
    assert!(matches!(
        f.store.ack(&first[0]).await,
        Err(DedupError::DeliveryLost)
    ));
    assert_nothing_ready(&f.store, &f.namespace).await;
}

/// A nack with a delay hides the event until the delay ends, then it is
/// taken again as its second attempt (about 2.3 s of real time).
pub async fn nack_redelivers_after_the_delay<T: StoreUnderTest>(under: &T)
where
    T::Store: InboxQueue,
{
    let f = Fixture::new(under, StoreOptions::default()).await;
    let _ = f.store.accept(&event(&f.namespace, "evt")).await.unwrap();
    let taken = f.store.take(&f.namespace, "w1", 1).await.unwrap();
    assert_eq!(
        f.store
            .nack(&taken[0], Duration::from_secs(2))
            .await
            .unwrap(),
        NackOutcome::WillRetry
    );
    // 2 s, not less: the take must come before the delay ends, and one on a
    // loaded machine may wait for the store a second or more.
    assert_nothing_ready(&f.store, &f.namespace).await;
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let again = f.store.take(&f.namespace, "w2", 1).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].id, "evt");
    assert_eq!(again[0].attempt, 2);
    f.store.ack(&again[0]).await.unwrap();
}

/// The last allowed attempt's nack dead-letters the event; its claim
/// stays, so the sender's retry is a duplicate.
pub async fn dead_letters_after_max_attempts<T: StoreUnderTest>(under: &T)
where
    T::Store: InboxQueue,
{
    let f = Fixture::new(under, StoreOptions::default().with_max_attempts(2)).await;
    let _ = f
        .store
        .accept(&event(&f.namespace, "poison"))
        .await
        .unwrap();
    let first = f.store.take(&f.namespace, "w1", 1).await.unwrap();
    assert_eq!(
        f.store.nack(&first[0], Duration::ZERO).await.unwrap(),
        NackOutcome::WillRetry
    );
    let second = f.store.take(&f.namespace, "w1", 1).await.unwrap();
    assert_eq!(second[0].attempt, 2);
    assert_eq!(
        f.store.nack(&second[0], Duration::ZERO).await.unwrap(),
        NackOutcome::DeadLettered
    );
    assert_nothing_ready(&f.store, &f.namespace).await;
    let dead = f.store.dead_letters(&f.namespace, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id, "poison");
    assert_eq!(dead[0].body, b"poison");
    // Still claimed: a late retry from the sender is a duplicate.
    assert_eq!(
        f.store
            .accept(&event(&f.namespace, "poison"))
            .await
            .unwrap(),
        Acceptance::Duplicate
    );
}

/// What the provider said about an event stays with it: through a take,
/// a retry after a nack, and into the dead letters.
pub async fn provider_metadata_stays_with_the_event_to_the_dead_letters<T: StoreUnderTest>(
    under: &T,
) where
    T::Store: InboxQueue,
{
    let f = Fixture::new(under, StoreOptions::default().with_max_attempts(2)).await;
    let mut meta = EventMeta::with_type("invoice.paid");
    meta.delivery_id = Some("dlv_1".into());
    meta.retry = Some(3);
    meta.headers = vec![("x-account".into(), "acct_1".into())];
    let with_meta = IncomingEvent::new(&f.namespace, "evt_meta", b"{}").with_meta(&meta);
    assert_eq!(
        f.store.accept(&with_meta).await.unwrap(),
        Acceptance::Accepted
    );
    let plain = IncomingEvent::new(&f.namespace, "evt_plain", b"{}");
    assert_eq!(f.store.accept(&plain).await.unwrap(), Acceptance::Accepted);
    let mut taken = f.store.take(&f.namespace, "w1", 10).await.unwrap();
    taken.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!((taken[0].id.as_str(), &taken[0].meta), ("evt_meta", &meta));
    assert_eq!(taken[1].meta, EventMeta::default());
    f.store.ack(&taken[1]).await.unwrap();
    f.store.nack(&taken[0], Duration::ZERO).await.unwrap();
    let again = f.store.take(&f.namespace, "w1", 10).await.unwrap();
    assert_eq!(again[0].meta, meta, "kept through a retry");
    f.store.nack(&again[0], Duration::ZERO).await.unwrap();
    let dead = f.store.dead_letters(&f.namespace, 10).await.unwrap();
    assert_eq!(dead[0].meta, meta, "kept in the dead letters");
}

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

/// An event a worker took and never acked comes back after the
/// visibility timeout, as its next attempt, and the first worker's late
/// ack is refused; an acked event never comes back.
pub async fn crashed_worker_event_comes_back_and_acked_never_does<T: StoreUnderTest>(under: &T)
where
    T::Store: InboxQueue,
{
    // 2 s of visibility on the store's clock, which no test can pause: the
    // take, ack and second take below fit in it on a loaded machine (at
    // 300 ms they did not, once in a run with both cores busy).
    const VISIBILITY: Duration = Duration::from_secs(2);
    let options = StoreOptions::default().with_visibility_timeout(VISIBILITY);
    let f = Fixture::new(under, options).await;
    for id in ["crash", "fine"] {
        let _ = f.store.accept(&event(&f.namespace, id)).await.unwrap();
    }
    let taken = f.store.take(&f.namespace, "dies", 2).await.unwrap();
    assert_eq!(taken.len(), 2);
    f.store.ack(&taken[1]).await.unwrap(); // "fine" is done; "crash" is abandoned
    assert_nothing_ready(&f.store, &f.namespace).await;
    tokio::time::sleep(VISIBILITY + Duration::from_millis(200)).await;
    let redelivered = f.store.take(&f.namespace, "other", 10).await.unwrap();
    assert_eq!(redelivered.len(), 1, "only the unacked event comes back");
    assert_eq!(redelivered[0].id, "crash");
    assert_eq!(redelivered[0].attempt, 2);
    // The first worker woke up late: its receipt is no longer valid.
    assert!(matches!(
        f.store.ack(&taken[0]).await,
        Err(DedupError::DeliveryLost)
    ));
    f.store.ack(&redelivered[0]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_nothing_ready(&f.store, &f.namespace).await;
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

/// `ack_many` acks, in one step, the deliveries its caller still holds,
/// and answers `false` in place for each one it lost (taken by another
/// worker after the visibility lapsed, or acked already).
pub async fn ack_many_acks_what_it_holds_and_reports_the_rest_lost<T: StoreUnderTest>(under: &T)
where
    T::Store: InboxQueue,
{
    let options = StoreOptions::default().with_visibility_timeout(Duration::from_millis(300));
    let f = Fixture::new(under, options).await;
    let ns = &f.namespace;
    for id in ["a", "b", "c", "d"] {
        let _ = f.store.accept(&event(ns, id)).await.unwrap();
    }
    let first = f.store.take(ns, "w1", 10).await.unwrap();
    assert_eq!(first.len(), 4);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut second = f.store.take(ns, "w2", 10).await.unwrap();
    assert_eq!(second.len(), 4, "w1's visibility lapsed");
    assert_eq!(
        f.store.ack_many(&first).await.unwrap(),
        [false; 4],
        "w1 lost them all"
    );
    second.sort_by(|x, y| x.id.cmp(&y.id));
    f.store.ack(&second[1]).await.unwrap();
    assert_eq!(
        f.store.ack_many(&second).await.unwrap(),
        [true, false, true, true],
        "b was acked already"
    );
    assert!(f.store.ack_many(&[]).await.unwrap().is_empty());
    let _ = f.store.accept(&event(ns, "e")).await.unwrap();
    let e = f.store.take(ns, "w3", 10).await.unwrap();
    assert_eq!(
        f.store
            .ack_many(&[e[0].clone(), e[0].clone()])
            .await
            .unwrap(),
        [true, false],
        "one delivery twice in a call is acked once"
    );
    assert_nothing_ready(&f.store, ns).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        f.store.take(ns, "w3", 10).await.unwrap().is_empty(),
        "acked events never come back"
    );
}

/// One take never hands out one event twice, even when it is slower than
/// the visibility timeout: a store that asks its shards in rounds could
/// otherwise reclaim, in a later round, what an earlier round of the same
/// take handed out, give the caller two deliveries of which only the later
/// holds, and count an attempt the worker never saw. A visibility timeout
/// of zero makes every take slower than it, on any machine: what a round
/// handed out may be reclaimed at once.
pub async fn a_take_never_hands_out_one_event_twice<T: StoreUnderTest>(under: &T)
where
    T::Store: InboxQueue,
{
    let options = StoreOptions::default().with_visibility_timeout(Duration::ZERO);
    let f = Fixture::new(under, options).await;
    let ids: Vec<String> = (0..64).map(|n| format!("evt_{n}")).collect();
    for id in &ids {
        let _ = f.store.accept(&event(&f.namespace, id)).await.unwrap();
    }
    let mut handed_out = 0;
    for round in 0..20 {
        let taken = f.store.take(&f.namespace, "w", 64).await.unwrap();
        handed_out += taken.len();
        if round == 0 {
            // No event was handed out before: each is on its first attempt,
            // however many times the take asked a shard.
            assert!(taken.iter().all(|entry| entry.attempt == 1), "{taken:?}");
        }
        let mut taken_ids: Vec<&str> = taken.iter().map(|entry| entry.id.as_str()).collect();
        taken_ids.sort_unstable();
        let before = taken_ids.len();
        taken_ids.dedup();
        assert_eq!(taken_ids.len(), before, "one take, one delivery an event");
        // No other take runs before the ack: each delivery handed out is
        // the one that holds its event.
        let acked = f.store.ack_many(&taken).await.unwrap();
        assert!(acked.iter().all(|&held| held), "{acked:?}");
        if taken.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(handed_out, 64, "each event handed out and acked once");
}

/// A heartbeat for a taken event that comes after its visibility timeout
/// ran out is refused, on every store alike, even before another worker
/// took the event: that worker may take it at any moment.
pub async fn a_heartbeat_after_the_visibility_lapsed_is_refused<T: StoreUnderTest>(under: &T)
where
    T::Store: InboxQueue,
{
    // 3 s: the second taker's heartbeat must come within it, however
    // slowly the store answers on a loaded machine.
    let options = StoreOptions::default().with_visibility_timeout(Duration::from_secs(3));
    let f = Fixture::new(under, options).await;
    let ns = &f.namespace;
    let _ = f.store.accept(&event(ns, "evt")).await.unwrap();
    let taken = f.store.take(ns, "w1", 10).await.unwrap();
    assert_eq!(taken.len(), 1);
    tokio::time::sleep(Duration::from_millis(3300)).await;
    assert!(matches!(
        f.store.extend_visibility(&taken[0]).await,
        Err(DedupError::DeliveryLost)
    ));
    // The event is free for the next worker, which may extend its own hold.
    let retaken = f.store.take(ns, "w2", 10).await.unwrap();
    assert_eq!(retaken.len(), 1);
    f.store
        .extend_visibility(&retaken[0])
        .await
        .expect("a heartbeat in time");
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

/// Heartbeats keep a taken event from other workers past its first
/// visibility timeout, for its holder only: once they stop, the event is
/// taken again and the first holder's heartbeat is refused (about 7 s of
/// real time).
pub async fn heartbeats_keep_a_taken_event_from_other_workers<T: StoreUnderTest>(under: &T)
where
    T::Store: InboxQueue,
{
    // A term of 3 s and a heartbeat every 750 ms: a beat may come 2.25 s
    // late (a loaded machine's stalls) before the term lapses. The term
    // runs on the store's clock, which no test can pause.
    const TERM: Duration = Duration::from_secs(3);
    let f = Fixture::new(under, StoreOptions::default().with_visibility_timeout(TERM)).await;
    let ns = &f.namespace;
    let _ = f.store.accept(&event(ns, "queued")).await.unwrap();
    let taken = f.store.take(ns, "w1", 10).await.unwrap();
    assert_eq!(taken.len(), 1);
    for _ in 0..5 {
        tokio::time::sleep(TERM / 4).await;
        f.store
            .extend_visibility(&taken[0])
            .await
            .expect("a heartbeat in time");
    }
    assert!(
        f.store.take(ns, "w2", 10).await.unwrap().is_empty(),
        "3.75 s in, past the first term: still held"
    );
    tokio::time::sleep(TERM + Duration::from_millis(500)).await;
    let retaken = f.store.take(ns, "w2", 10).await.unwrap();
    assert_eq!(retaken.len(), 1, "without heartbeats the hold lapses");
    assert!(matches!(
        f.store.extend_visibility(&taken[0]).await,
        Err(DedupError::DeliveryLost)
    ));
    f.store
        .extend_visibility(&retaken[0])
        .await
        .expect("the new taker's heartbeat");
}
