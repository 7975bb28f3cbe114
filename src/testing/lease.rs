//! The lease checks, for a store that serves handlers running inline
//! ([`LeaseStore`]): each makes its own stores and namespaces, and panics
//! with what broke.

use std::time::Duration;

use super::{Fixture, StoreUnderTest, bad_keys};
use crate::dedup::{Claim, DedupError, Lease, LeaseStore, StoreOptions};

/// Claims `evt` in `namespace` for `lease_for`: the fresh lease, or a
/// panic saying `expected`.
async fn fresh<S: LeaseStore>(
    store: &S,
    namespace: &str,
    lease_for: Duration,
    expected: &str,
) -> Lease {
    match store.claim(namespace, "evt", lease_for).await.unwrap() {
        Claim::Fresh(lease) => lease,
        other => panic!("{expected}: {other:?}"),
    }
}

/// Runs every check of this module in turn, each on stores of its own.
/// Takes about 8 s (a heartbeat check waits out real terms on the store's
/// clock) and needs a multi-threaded tokio runtime.
pub async fn all<T: StoreUnderTest>(under: &T)
where
    T::Store: LeaseStore,
{
    lease_claims_refuse_invalid_keys(under).await;
    lease_is_exclusive_until_completed(under).await;
    released_lease_can_be_claimed_again(under).await;
    expired_lease_is_reclaimed_and_the_old_holder_loses_it(under).await;
    concurrent_claims_give_one_fresh_lease(under).await;
    a_heartbeat_after_the_lease_lapsed_is_refused(under).await;
    heartbeats_keep_a_lease_from_other_claims(under).await;
}

/// A lease's claim refuses a bad namespace or event id as an invalid key.
pub async fn lease_claims_refuse_invalid_keys<T: StoreUnderTest>(under: &T)
where
    T::Store: LeaseStore,
{
    let f = Fixture::new(under, StoreOptions::default()).await;
    for (namespace, id) in bad_keys(&f.namespace) {
        let error = f
            .store
            .claim(&namespace, &id, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(matches!(error, DedupError::InvalidKey { .. }), "{error}");
    }
}

/// A fresh lease is exclusive: a second claim is told the event is in
/// progress (and for how long), a completed one is done, and a second
/// completion is [`DedupError::LeaseLost`].
pub async fn lease_is_exclusive_until_completed<T: StoreUnderTest>(under: &T)
where
    T::Store: LeaseStore,
{
    let f = Fixture::new(under, StoreOptions::default()).await;
    let lease = fresh(
        &f.store,
        &f.namespace,
        Duration::from_secs(30),
        "first claim is fresh",
    )
    .await;
    assert_eq!(lease.id(), "evt");
    match f
        .store
        .claim(&f.namespace, "evt", Duration::from_secs(30))
        .await
        .unwrap()
    {
        Claim::InProgress { retry_after } => {
            assert!(retry_after > Duration::from_secs(25) && retry_after <= Duration::from_secs(30))
        }
        other => panic!("expected in progress, got {other:?}"),
    }
    f.store.complete(&lease).await.unwrap();
    assert_eq!(
        f.store
            .claim(&f.namespace, "evt", Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::Done
    );
    assert!(matches!(
        f.store.complete(&lease).await,
        Err(DedupError::LeaseLost)
    ));
}

/// A released lease can be claimed again at once; releasing it twice is
/// [`DedupError::LeaseLost`].
pub async fn released_lease_can_be_claimed_again<T: StoreUnderTest>(under: &T)
where
    T::Store: LeaseStore,
{
    let f = Fixture::new(under, StoreOptions::default()).await;
    let lease = fresh(&f.store, &f.namespace, Duration::from_secs(30), "fresh").await;
    f.store.release(&lease).await.unwrap();
    assert!(matches!(
        f.store
            .claim(&f.namespace, "evt", Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::Fresh(_)
    ));
    assert!(matches!(
        f.store.release(&lease).await,
        Err(DedupError::LeaseLost)
    ));
}

/// A lease that ran out is claimed afresh, and its first holder's late
/// completion is [`DedupError::LeaseLost`].
pub async fn expired_lease_is_reclaimed_and_the_old_holder_loses_it<T: StoreUnderTest>(under: &T)
where
    T::Store: LeaseStore,
{
    let f = Fixture::new(under, StoreOptions::default()).await;
    let crashed = fresh(&f.store, &f.namespace, Duration::from_millis(200), "fresh").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let retry = fresh(
        &f.store,
        &f.namespace,
        Duration::from_secs(30),
        "an expired lease is reclaimed",
    )
    .await;
    assert!(matches!(
        f.store.complete(&crashed).await,
        Err(DedupError::LeaseLost)
    ));
    f.store.complete(&retry).await.unwrap();
}

/// Thirty-two claims of one id at once: exactly one is fresh.
pub async fn concurrent_claims_give_one_fresh_lease<T: StoreUnderTest>(under: &T)
where
    T::Store: LeaseStore,
{
    let f = Fixture::new(under, StoreOptions::default()).await;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(32));
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (store, namespace, barrier) =
                (f.store.clone(), f.namespace.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store
                    .claim(&namespace, "evt", Duration::from_secs(30))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut fresh = 0;
    for task in tasks {
        match task.await.unwrap() {
            Claim::Fresh(_) => fresh += 1,
            Claim::InProgress { .. } => {}
            Claim::Done => panic!("nobody completed"),
        }
    }
    assert_eq!(fresh, 1);
}

/// A heartbeat that comes after the lease ran out is refused, on every
/// store alike, even before anyone else claimed the event.
pub async fn a_heartbeat_after_the_lease_lapsed_is_refused<T: StoreUnderTest>(under: &T)
where
    T::Store: LeaseStore,
{
    let f = Fixture::new(under, StoreOptions::default()).await;
    let lease = fresh(&f.store, &f.namespace, Duration::from_millis(300), "fresh").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(matches!(
        f.store.extend_lease(&lease, Duration::from_secs(5)).await,
        Err(DedupError::LeaseLost)
    ));
}

/// Heartbeats keep a lease from other claims past its first term, for its
/// holder only: once they stop, the id is claimed afresh, the first
/// holder's heartbeat is refused, and so is one after completion (about
/// 7 s of real time).
pub async fn heartbeats_keep_a_lease_from_other_claims<T: StoreUnderTest>(under: &T)
where
    T::Store: LeaseStore,
{
    // A term of 3 s and a heartbeat every 750 ms, as for taken events.
    const TERM: Duration = Duration::from_secs(3);
    let f = Fixture::new(under, StoreOptions::default()).await;
    let ns = &f.namespace;
    let lease = fresh(&f.store, ns, TERM, "fresh").await;
    for _ in 0..5 {
        tokio::time::sleep(TERM / 4).await;
        f.store
            .extend_lease(&lease, TERM)
            .await
            .expect("a heartbeat in time");
    }
    assert!(
        matches!(
            f.store
                .claim(ns, "evt", Duration::from_secs(1))
                .await
                .unwrap(),
            Claim::InProgress { .. }
        ),
        "3.75 s in, past the first term: still held"
    );
    tokio::time::sleep(TERM + Duration::from_millis(500)).await;
    let second = fresh(
        &f.store,
        ns,
        Duration::from_secs(5),
        "without heartbeats the lease lapses",
    )
    .await;
    assert!(matches!(
        f.store.extend_lease(&lease, Duration::from_secs(5)).await,
        Err(DedupError::LeaseLost)
    ));
    f.store.complete(&second).await.unwrap();
    assert!(matches!(
        f.store.extend_lease(&second, Duration::from_secs(5)).await,
        Err(DedupError::LeaseLost)
    ));
}
