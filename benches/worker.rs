//! The worker against the floor: how many events a second go through
//! `take` and `ack_many` of a store when a `Worker` runs a no-op handler,
//! next to a bare loop of `take(256)` + `ack_many` on the same backlog, in
//! the same run, on SQLite, Postgres and Redis. The ratio says what the
//! worker's own work (a task per event, heartbeats, batched acks, metrics)
//! costs beside the store's.
//!
//! Run with: cargo bench --bench worker --features sqlite,postgres,redis
//! (`WORKER_EVENTS` sets the backlog, 20,000 by default; `WORKER_STORES`
//! picks among `sqlite,postgres,redis`.)
//!
//! Uses the Postgres and Redis servers in `HOOKLATCH_TEST_POSTGRES_URL`
//! and `HOOKLATCH_TEST_REDIS_URL`, or private ones.

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::support;
use hooklatch::dedup::{InboxQueue, PostgresInbox, RedisInbox, SqliteInbox};
use hooklatch::worker::{Event, Failure, Worker};

/// Events a second through a bare loop of `take(256)` and `ack_many`.
async fn floor<S: InboxQueue>(store: &S, namespace: &str, count: u64) -> f64 {
    let started = Instant::now();
    let mut done = 0;
    while done < count {
        let batch = store.take(namespace, "floor", 256).await.expect("take");
        let acked = store.ack_many(&batch).await.expect("ack");
        done += acked.iter().filter(|acked| **acked).count() as u64;
        assert!(
            !batch.is_empty() || done == count,
            "the backlog ran out early"
        );
    }
    count as f64 / started.elapsed().as_secs_f64()
}

/// Events a second through a `Worker` with a no-op handler, 256 at once.
async fn worker<S: InboxQueue + Clone + 'static>(store: &S, namespace: &str, count: u64) -> f64 {
    let started = Instant::now();
    let running = Worker::new(store.clone(), namespace, |_event: Event| async {
        Ok::<(), Failure>(())
    })
    .with_concurrency(256)
    .start();
    while running.report().handled < count {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rate = count as f64 / started.elapsed().as_secs_f64();
    running.stop(Duration::from_secs(5)).await;
    rate
}

/// The floor and the worker on `store`, each on a backlog of `count`.
async fn measure<S: InboxQueue + Clone + 'static>(store: &S, count: u64) -> (f64, f64) {
    let namespace = support::unique("floor");
    common::accept_events(store, &namespace, count).await;
    let floor = floor(store, &namespace, count).await;
    let namespace = support::unique("worker");
    common::accept_events(store, &namespace, count).await;
    let worker = worker(store, &namespace, count).await;
    (floor, worker)
}

fn main() {
    let count: u64 = std::env::var("WORKER_EVENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let stores = std::env::var("WORKER_STORES").unwrap_or_else(|_| "sqlite,postgres,redis".into());
    let measured = |store: &str| stores.split(',').any(|name| name.trim() == store);
    let postgres = measured("postgres").then(support::postgres);
    let redis = measured("redis").then(support::redis);
    let runtime = common::runtime();
    let dir = support::TempDir::new("worker-bench");
    let mut rows = Vec::new();
    runtime.block_on(async {
        if measured("sqlite") {
            let store = SqliteInbox::open(dir.path().join("worker.db"))
                .await
                .expect("sqlite");
            rows.push(("SQLite", measure(&store, count).await));
        }
        if let Some(server) = &postgres {
            let store = PostgresInbox::connect(&server.url())
                .await
                .expect("postgres");
            rows.push(("Postgres", measure(&store, count).await));
        }
        if let Some(server) = &redis {
            let store = RedisInbox::connect(&server.url()).await.expect("redis");
            rows.push(("Redis", measure(&store, count).await));
        }
    });
    println!(
        "\n| store ({count} events, 1 KiB) | take + ack_many loop | Worker, no-op handler | worker / loop |"
    );
    println!("|---|---|---|---|");
    for (store, (floor, worker)) in rows {
        println!(
            "| {store} | {floor:.0}/s | {worker:.0}/s | {:.2}x |",
            worker / floor
        );
    }
}
