//! Outbox checks of an endpoint's health as the store keeps it: merged
//! by each finished attempt, read with each take, never by a lost lease.

use std::time::{Duration, SystemTime};

use super::{ENDPOINT, lease, now_in_millis, record};
use crate::sender::OutboxError;
use crate::sender::outbox::{
    DeliveryState, DeliveryStore, DisableReason, EndpointHealth, HealthChange,
};
use crate::testing::OutboxUnderTest;

/// Recording an attempt merges it into the endpoint's health and returns
/// the merged health: a failure keeps the earliest failing time, a
/// disable sticks through failures and successes until enabled, the first
/// reason stays, and a no-success disable needs a failing time old
/// enough.
pub async fn health_merges_in_the_store<T: OutboxUnderTest>(under: &T)
where
    T::Store: DeliveryStore,
{
    let store = under.empty().await;
    let at = |secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs);
    let failed = |secs| Some(HealthChange::Failed { at: at(secs) });
    let day = Duration::from_secs(24 * 3600);
    assert_eq!(
        store.health(ENDPOINT).await.unwrap(),
        EndpointHealth::default()
    );
    // Leased before the disable below, as a dispatcher's attempts under
    // way are.
    let taken = lease(&store, ENDPOINT, 6).await;

    let merged = record(&store, &taken[0], failed(20)).await.unwrap();
    assert_eq!(merged.failing_since, Some(at(20)));
    let merged = record(&store, &taken[1], failed(10)).await.unwrap();
    assert_eq!(merged.failing_since, Some(at(10)), "the earlier failure");
    let merged = record(&store, &taken[2], failed(30)).await.unwrap();
    assert_eq!(merged.failing_since, Some(at(10)), "still the earliest");
    assert_eq!(merged.disabled, None);

    let no_success = DisableReason::NoSuccessFor(day);
    assert!(
        !store
            .disable(ENDPOINT, no_success, at(10) + day - Duration::from_secs(1))
            .await
            .unwrap(),
        "not failing for a day yet"
    );
    assert!(
        store
            .disable(ENDPOINT, no_success, at(10) + day)
            .await
            .unwrap()
    );
    assert!(
        !store
            .disable(ENDPOINT, DisableReason::Gone, at(40))
            .await
            .unwrap(),
        "already disabled: the first reason stays"
    );

    let merged = record(&store, &taken[3], failed(5)).await.unwrap();
    assert_eq!(
        merged.disabled,
        Some(no_success),
        "a failure keeps a disable"
    );
    assert_eq!(merged.failing_since, Some(at(5)));
    let merged = record(&store, &taken[4], Some(HealthChange::Succeeded))
        .await
        .unwrap();
    assert_eq!(
        merged,
        EndpointHealth {
            failing_since: None,
            disabled: Some(no_success)
        },
        "a success clears the failing time, not the disable"
    );
    assert_eq!(store.health(ENDPOINT).await.unwrap(), merged);
    assert_eq!(
        record(&store, &taken[5], None).await,
        Some(merged),
        "no change: the saved health"
    );

    store.enable(ENDPOINT).await.unwrap();
    assert_eq!(
        store.health(ENDPOINT).await.unwrap(),
        EndpointHealth::default()
    );
    assert!(
        !store
            .disable(ENDPOINT, no_success, at(100) + day)
            .await
            .unwrap(),
        "never failed since enabled"
    );
    assert!(
        store
            .disable("other", DisableReason::Gone, at(1))
            .await
            .unwrap()
    );
    assert_eq!(
        store.health("other").await.unwrap().disabled,
        Some(DisableReason::Gone)
    );
    assert_eq!(store.health(ENDPOINT).await.unwrap().disabled, None);
}

/// A take reads the endpoint's health with its leases: while the endpoint
/// is disabled it leases nothing and reports the disable; once enabled it
/// leases as before and reports the failing time; a take of 0 only reads.
pub async fn a_take_reports_health_and_leases_nothing_while_disabled<T: OutboxUnderTest>(under: &T)
where
    T::Store: DeliveryStore,
{
    let store = under.empty().await;
    let now = now_in_millis();
    let lease = Duration::from_secs(60);
    assert!(store.enqueue(ENDPOINT, "msg_1", b"{}", now).await.unwrap());
    assert!(
        store
            .disable(ENDPOINT, DisableReason::Gone, now)
            .await
            .unwrap()
    );
    let due = store.take_due(ENDPOINT, now, 10, lease).await.unwrap();
    assert!(due.taken.is_empty(), "disabled: nothing leased");
    assert_eq!(due.health.disabled, Some(DisableReason::Gone));

    store.enable(ENDPOINT).await.unwrap();
    let due = store.take_due(ENDPOINT, now, 0, lease).await.unwrap();
    assert!(due.taken.is_empty(), "a take of 0 leases nothing");
    assert_eq!(due.health, EndpointHealth::default());
    let due = store.take_due(ENDPOINT, now, 10, lease).await.unwrap();
    let ids: Vec<&str> = due.taken.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["msg_1"], "enabled: the held delivery is leased");
    assert_eq!(due.health, EndpointHealth::default());

    let failed_at = now - Duration::from_secs(5);
    let merged = record(
        &store,
        &due.taken[0],
        Some(HealthChange::Failed { at: failed_at }),
    )
    .await;
    assert_eq!(merged.and_then(|h| h.failing_since), Some(failed_at));
    assert!(store.enqueue(ENDPOINT, "msg_2", b"{}", now).await.unwrap());
    let due = store.take_due(ENDPOINT, now, 10, lease).await.unwrap();
    assert_eq!(due.taken.len(), 1);
    assert_eq!(
        due.health,
        EndpointHealth {
            failing_since: Some(failed_at),
            disabled: None
        },
        "the health read with the leases"
    );
}

/// A dispatcher whose lease ran out, and whose delivery another took,
/// records nothing and merges nothing into the endpoint's health (its
/// `finish` and `put_back` fail with `LeaseLost`): the attempt that counts
/// is the new holder's.
pub async fn a_lost_lease_records_and_merges_nothing<T: OutboxUnderTest>(under: &T)
where
    T::Store: DeliveryStore,
{
    let store = under.empty().await;
    let now = now_in_millis();
    assert!(store.enqueue(ENDPOINT, "msg_1", b"{}", now).await.unwrap());
    let first = store
        .take_due(ENDPOINT, now, 1, Duration::from_secs(1))
        .await
        .unwrap()
        .taken;
    let later = now + Duration::from_secs(2);
    let second = store
        .take_due(ENDPOINT, later, 1, Duration::from_secs(60))
        .await
        .unwrap()
        .taken;
    assert_eq!((first.len(), second.len()), (1, 1), "taken again");

    let failed = Some(HealthChange::Failed { at: now });
    assert_eq!(record(&store, &first[0], failed).await, None, "lease lost");
    assert_eq!(
        store.health(ENDPOINT).await.unwrap(),
        EndpointHealth::default(),
        "nothing merged"
    );
    let stored = store.delivery(ENDPOINT, "msg_1").await.unwrap().unwrap();
    assert!(stored.attempts.is_empty(), "nothing recorded");
    // Nor can the old holder put it back: the same error, the same rule.
    assert!(matches!(
        store.put_back(&first[0], later).await,
        Err(OutboxError::LeaseLost)
    ));

    let merged = record(&store, &second[0], failed).await.unwrap();
    assert_eq!(merged.failing_since, Some(now));
    let stored = store.delivery(ENDPOINT, "msg_1").await.unwrap().unwrap();
    assert_eq!(stored.state, DeliveryState::Dead);
    assert_eq!(stored.attempts.len(), 1);
}
