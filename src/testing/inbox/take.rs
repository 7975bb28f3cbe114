//! Inbox checks of takes: one worker per event, acks, nacks, dead
//! letters, redelivery after a crash, and heartbeats.

use std::time::Duration;

use super::assert_nothing_ready;
use crate::dedup::{
    Acceptance, DedupError, EventMeta, Inbox, InboxQueue, IncomingEvent, NackOutcome, StoreOptions,
};
use crate::testing::{Fixture, StoreUnderTest, event};

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
