//! Outbox faults: the outbox's Postgres or Redis goes away while
//! deliveries run, and no delivery is lost.

#[path = "support/receiver.rs"]
mod receiver;
mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hooklatch::sender::{DeliveryState, DeliveryStore, PostgresDeliveries, RedisDeliveries};
use receiver::*;

/// The outbox's Postgres is stopped for two seconds while deliveries run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outbox_outage_loses_no_delivery() {
    let server = Arc::new(support::Postgres::start());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    let store = PostgresDeliveries::new(pool, "hooklatch").unwrap();
    store.migrate().await.unwrap();
    let (stopper, restarter) = (server.clone(), server.clone());
    outage_loses_no_delivery(
        store,
        move || stopper.stop_immediately(),
        move || restarter.start_again(),
    )
    .await;
}

/// The outbox's Redis (AOF, `appendfsync always`) is killed for two
/// seconds while deliveries run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outbox_outage_loses_no_delivery() {
    let server = Arc::new(Mutex::new(support::Redis::start()));
    let url = server.lock().unwrap().url();
    let store = RedisDeliveries::connect(&url).await.unwrap();
    let (stopper, restarter) = (server.clone(), server.clone());
    outage_loses_no_delivery(
        store,
        move || stopper.lock().unwrap().kill(),
        move || restarter.lock().unwrap().start_again(),
    )
    .await;
}

/// Stops the outbox's server for two seconds while deliveries run: the
/// dispatcher keeps going, and afterwards every delivery is recorded
/// delivered, with exactly one successful attempt each.
async fn outage_loses_no_delivery<S: DeliveryStore + Clone>(
    store: S,
    stop: impl FnOnce() + Send + 'static,
    restart: impl FnOnce() + Send + 'static,
) {
    let receiver = Receiver::answering(200);
    receiver.set_delay(Duration::from_millis(20));
    let dispatcher = dispatcher(store.clone(), &receiver)
        .with_lease(Duration::from_secs(1))
        .expect("lease");
    add(
        &dispatcher,
        every(Duration::from_millis(50), 1000).with_concurrency(4),
    )
    .await;
    let ids = ids(200);
    for id in &ids {
        dispatcher.send(ENDPOINT, id, id.as_bytes()).await.unwrap();
    }
    let running = dispatcher.start();
    wait_until("some deliveries are done", || {
        let done = receiver.successes().len();
        async move { done >= 20 }
    })
    .await;
    tokio::task::spawn_blocking(stop).await.unwrap();
    let during = receiver.successes().len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::spawn_blocking(restart).await.unwrap();
    assert!(during < ids.len(), "the outage came mid-run");
    wait_until("every delivery is delivered", || {
        all_in(&store, &ids, DeliveryState::Delivered)
    })
    .await;
    running.stop().await;
    for id in &ids {
        let stored = store.delivery(ENDPOINT, id).await.unwrap().unwrap();
        let successes = stored
            .attempts
            .iter()
            .filter(|a| a.result == Ok(200))
            .count();
        assert_eq!(successes, 1, "{id}: {:?}", stored.attempts);
    }
    // An attempt whose record was lost in the outage was sent again: the
    // receiver saw it twice, which is why receivers deduplicate.
    let answered = receiver.successes();
    assert_eq!(answered.len(), ids.len());
    assert!(
        answered.values().all(|&n| (1..=2).contains(&n)),
        "{answered:?}"
    );
}
