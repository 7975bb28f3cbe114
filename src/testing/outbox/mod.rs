//! The outbox checks, for a delivery store of your own
//! ([`DeliveryStore`], and [`Keeping`] for the purge): leases, health
//! merged in the store, takes across endpoints and what each step leaves
//! findable. Each check opens one empty outbox and panics with what broke.

use std::time::{Duration, SystemTime};

mod health;
mod keeping;

pub use health::{
    a_lost_lease_records_and_merges_nothing,
    a_take_reports_health_and_leases_nothing_while_disabled, health_merges_in_the_store,
};
pub use keeping::{
    a_key_enqueues_once_within_its_window, a_leased_delivery_is_kept_until_its_lease_ends,
    both_enqueues_refuse_bad_names_and_store_nothing, concurrent_sends_with_one_key_enqueue_once,
    each_outcome_is_purged_after_its_retention, expired_keys_are_forgotten,
    the_purge_takes_every_batch,
};

use super::OutboxUnderTest;
use crate::sender::OutboxError;
use crate::sender::outbox::{
    DeliveryState, DeliveryStore, DisableReason, EndpointHealth, HealthChange, Keeping,
    OUTBOX_PURGE_BATCH, Taken, Wanted,
};
use crate::sender::rules::{Attempt, Final, Step};

/// The endpoint the checks of one endpoint send to.
const ENDPOINT: &str = "orders";

/// Runs every check of this module in turn, each on an outbox of its
/// own. Needs a multi-threaded tokio runtime.
pub async fn all<T: OutboxUnderTest>(under: &T)
where
    T::Store: Keeping,
{
    health_merges_in_the_store(under).await;
    a_take_reports_health_and_leases_nothing_while_disabled(under).await;
    a_lost_lease_records_and_merges_nothing(under).await;
    take_across_is_fair_and_bounded(under).await;
    many_endpoints_each_before_a_busy_ones_second(under).await;
    every_step_keeps_a_delivery_findable_across_endpoints(under).await;
    purge_takes_every_batch(under).await;
    a_key_enqueues_once_within_its_window(under).await;
    concurrent_sends_with_one_key_enqueue_once(under).await;
    expired_keys_are_forgotten(under).await;
    each_outcome_is_purged_after_its_retention(under).await;
    a_leased_delivery_is_kept_until_its_lease_ends(under).await;
    both_enqueues_refuse_bad_names_and_store_nothing(under).await;
    the_purge_takes_every_batch(under).await;
}

/// The state of delivery `id` to [`ENDPOINT`].
async fn state_of(store: &impl DeliveryStore, id: &str) -> DeliveryState {
    store
        .delivery(ENDPOINT, id)
        .await
        .expect("read")
        .expect("stored")
        .state
}

/// The time now, in whole milliseconds (what every store keeps).
fn now_in_millis() -> SystemTime {
    let since_epoch = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    SystemTime::UNIX_EPOCH
        + Duration::from_millis(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
}

/// Leases `n` new deliveries to the endpoint, as a dispatcher does before
/// its attempts.
async fn lease(store: &impl DeliveryStore, endpoint: &str, n: usize) -> Vec<Taken> {
    let now = now_in_millis();
    for i in 0..n {
        let id = format!("msg_{i}");
        let added = store.enqueue(endpoint, &id, b"{}", now).await.unwrap();
        assert!(added, "a new id is enqueued");
    }
    // A take may lease fewer than asked: take until every one is leased.
    let mut taken = Vec::new();
    while taken.len() < n {
        let due = store
            .take_due(
                endpoint,
                now + Duration::from_millis(1),
                n - taken.len(),
                Duration::from_secs(60),
            )
            .await
            .unwrap();
        assert!(
            !due.taken.is_empty(),
            "{} of {n} due deliveries leased",
            taken.len()
        );
        taken.extend(due.taken);
    }
    taken
}

/// Records a last attempt on `taken` that shows `change` of the
/// endpoint's health: the health after it, or `None` if the lease was lost.
async fn record(
    store: &impl DeliveryStore,
    taken: &Taken,
    change: Option<HealthChange>,
) -> Option<EndpointHealth> {
    let attempt = Attempt::new(taken.attempts + 1, SystemTime::now(), Ok(500));
    match store
        .finish(taken, &attempt, Step::Done(Final::Dead), change)
        .await
    {
        Ok(health) => Some(health),
        Err(OutboxError::LeaseLost) => None,
        Err(error) => panic!("cannot record: {error}"),
    }
}

/// A take across endpoints leases round-robin (every endpoint's first
/// before any endpoint's second), within each endpoint's limit and the
/// limit in all, nothing of a disabled endpoint (whose health it reports)
/// and nothing leased already.
pub async fn take_across_is_fair_and_bounded<T: OutboxUnderTest>(under: &T)
where
    T::Store: DeliveryStore,
{
    let store = under.empty().await;
    let now = SystemTime::now();
    for i in 0..50 {
        assert!(
            store
                .enqueue("busy", &format!("b{i:02}"), b"{}", now)
                .await
                .unwrap()
        );
    }
    assert!(store.enqueue("quiet", "q", b"{}", now).await.unwrap());
    for id in ["o1", "o2"] {
        assert!(store.enqueue("off", id, b"{}", now).await.unwrap());
    }
    assert!(
        store
            .disable("off", DisableReason::Gone, now)
            .await
            .unwrap()
    );
    let later = now + Duration::from_millis(1);
    let wanted = [
        Wanted::new("busy", 100, later),
        Wanted::new("quiet", 5, later),
        Wanted::new("off", 5, later),
    ];
    let lease = Duration::from_secs(60);
    let found = store.take_due_across(&wanted, 3, lease).await.unwrap();
    let taken: Vec<_> = found.taken.iter().map(|t| t.id.as_str()).collect();
    assert!(taken.len() <= 3 && taken.contains(&"q"), "{taken:?}");
    assert!(taken.iter().all(|id| !id.starts_with('o')), "{taken:?}");
    assert_eq!(found.health["off"].disabled, Some(DisableReason::Gone));
    assert_eq!(found.health.get("busy").and_then(|h| h.disabled), None);

    let again = store.take_due_across(&wanted, 100, lease).await.unwrap();
    let busy = again.taken.iter().filter(|t| t.endpoint == "busy").count();
    let quiet = again.taken.iter().filter(|t| t.endpoint == "quiet").count();
    assert_eq!(quiet, 0, "q is leased already");
    assert_eq!(busy + found.taken.len() - 1, 50, "the rest of busy");
    let capped = [Wanted::new("busy", 4, later)];
    for id in ["b94", "b95", "b96", "b97", "b98", "b99"] {
        assert!(store.enqueue("busy", id, b"{}", now).await.unwrap());
    }
    let found = store.take_due_across(&capped, 100, lease).await.unwrap();
    assert_eq!(found.taken.len(), 4, "the endpoint's own limit, of 6 due");
}

/// Many endpoints, many in one Redis shard or SQL statement, each with
/// one due delivery, and one with 500: a take with room for all of them
/// leases every endpoint's delivery, and only then the busy one's rest.
pub async fn many_endpoints_each_before_a_busy_ones_second<T: OutboxUnderTest>(under: &T)
where
    T::Store: DeliveryStore,
{
    let store = under.empty().await;
    let now = SystemTime::now();
    for i in 0..500 {
        let id = format!("b{i:03}");
        assert!(store.enqueue("busy", &id, b"{}", now).await.unwrap());
    }
    let names: Vec<String> = (0..200).map(|n| format!("e{n}")).collect();
    for name in &names {
        assert!(store.enqueue(name, "only", b"{}", now).await.unwrap());
    }
    let later = now + Duration::from_millis(1);
    let mut wanted = vec![Wanted::new("busy", 500, later)];
    wanted.extend(names.iter().map(|name| Wanted::new(name, 4, later)));
    let found = store
        .take_due_across(&wanted, 250, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(found.taken.len(), 250);
    let (busy, rest): (Vec<_>, Vec<_>) = found.taken.iter().partition(|t| t.endpoint == "busy");
    assert_eq!(rest.len(), 200, "every quiet endpoint's delivery");
    assert_eq!(busy.len(), 50, "the busy one's with what is left");
    let first: Vec<_> = found.taken[..201].iter().map(|t| &t.endpoint).collect();
    assert_eq!(
        first.iter().filter(|e| e.as_str() == "busy").count(),
        1,
        "round-robin: the busy endpoint's second comes after every first"
    );
}

/// Every step keeps a delivery where a take across endpoints finds it
/// (in Redis, its shard's due index): leased, it is not found until its
/// lease ends or it is put back; retried, it is found when due again;
/// dead, not at all until replayed; delivered and purged, never again.
pub async fn every_step_keeps_a_delivery_findable_across_endpoints<T: OutboxUnderTest>(under: &T)
where
    T::Store: Keeping,
{
    let store = under.empty().await;
    let now = now_in_millis();
    let at = |ms: u64| now + Duration::from_millis(ms);
    assert!(store.enqueue("steps", "s1", b"{}", now).await.unwrap());
    let take = |when: SystemTime, lease: Duration| {
        let store = store.clone();
        async move {
            let wanted = [Wanted::new("steps", 5, when)];
            let found = store.take_due_across(&wanted, 5, lease).await.unwrap();
            found.taken
        }
    };
    let long = Duration::from_secs(60);
    let short = Duration::from_millis(100);
    let taken = take(at(1), short).await;
    assert_eq!(taken.len(), 1, "due");
    assert!(take(at(2), long).await.is_empty(), "leased");
    assert_eq!(take(at(200), long).await.len(), 1, "its lease ended");
    let taken = take(at(60_300), long)
        .await
        .pop()
        .expect("lease ended again");
    store.put_back(&taken, at(60_400)).await.unwrap();
    assert!(
        take(at(60_350), long).await.is_empty(),
        "put back for later"
    );
    let taken = take(at(60_400), long).await.pop().expect("put back, due");
    let attempt = Attempt::new(taken.attempts + 1, at(60_400), Ok(500));
    let retry = Step::Retry {
        due: at(70_000),
        wait: Duration::from_secs(10),
        reason: crate::sender::rules::WaitReason::Schedule,
    };
    store
        .finish(&taken, &attempt, retry, None)
        .await
        .expect("the lease held");
    assert!(take(at(69_999), long).await.is_empty(), "retried later");
    let taken = take(at(70_000), long).await.pop().expect("retry due");
    let attempt = Attempt::new(taken.attempts + 1, at(70_000), Ok(500));
    let dead = Step::Done(Final::Dead);
    store
        .finish(&taken, &attempt, dead, None)
        .await
        .expect("the lease held");
    assert!(take(at(999_000), long).await.is_empty(), "dead");
    assert!(store.replay("steps", "s1", at(80_000)).await.unwrap());
    let taken = take(at(80_000), long).await.pop().expect("replayed");
    let attempt = Attempt::new(taken.attempts + 1, at(80_000), Ok(200));
    let done = Step::Done(Final::Delivered);
    store
        .finish(&taken, &attempt, done, None)
        .await
        .expect("the lease held");
    assert!(take(at(999_000), long).await.is_empty(), "delivered");
    let purged = store.purge(SystemTime::now() + long).await.unwrap();
    assert_eq!(purged, 1);
    assert!(take(at(999_000), long).await.is_empty(), "purged");
    assert!(store.enqueue("steps", "s1", b"{}", now).await.unwrap());
    assert_eq!(take(at(1), long).await.len(), 1, "sent again after a purge");
}

/// More finished deliveries than two purge batches are all purged, with
/// their attempts, and a pending and a dead one are kept.
pub async fn purge_takes_every_batch<T: OutboxUnderTest>(under: &T)
where
    T::Store: Keeping,
{
    use futures_util::StreamExt as _;
    let store = under.empty().await;
    let count = usize::try_from(2 * OUTBOX_PURGE_BATCH + 7).unwrap();
    let taken = lease(&store, ENDPOINT, count + 1).await;
    let (dead, delivered) = taken.split_last().unwrap();
    futures_util::stream::iter(delivered)
        .for_each_concurrent(16, |taken| {
            let store = &store;
            async move {
                let attempt = Attempt::new(taken.attempts + 1, SystemTime::now(), Ok(200));
                let step = Step::Done(Final::Delivered);
                store
                    .finish(taken, &attempt, step, None)
                    .await
                    .expect("the lease held");
            }
        })
        .await;
    let _ = record(&store, dead, None).await.unwrap();
    assert!(
        store
            .enqueue(ENDPOINT, "pending", b"{}", SystemTime::now())
            .await
            .unwrap()
    );
    // Ended by any clock's now: a minute past the store's own.
    let after_all = store.store_time().await.unwrap() + Duration::from_secs(60);
    let purged = store.purge(after_all).await.unwrap();
    assert_eq!(
        purged,
        u64::try_from(count).unwrap(),
        "every batch is purged"
    );
    assert_eq!(
        store.purge(after_all).await.unwrap(),
        0,
        "nothing left to purge"
    );
    let delivered = store
        .list(ENDPOINT, DeliveryState::Delivered, 10)
        .await
        .unwrap();
    assert!(delivered.is_empty(), "{delivered:?}");
    assert_eq!(state_of(&store, &dead.id).await, DeliveryState::Dead);
    assert_eq!(state_of(&store, "pending").await, DeliveryState::Pending);
    // The last id of the last batch is forgotten with its attempts.
    let last = &taken[count - 1].id;
    assert!(
        store
            .enqueue(ENDPOINT, last, b"{}", SystemTime::now())
            .await
            .unwrap()
    );
    let again = store.delivery(ENDPOINT, last).await.unwrap().unwrap();
    assert!(again.attempts.is_empty());
}
