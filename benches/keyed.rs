//! What an idempotency key costs a send, per outbox: `BATCH` enqueues one
//! after another (the baseline), the same under a new key each (the key
//! recorded in the enqueue's transaction or script), and the same key
//! sent again within its window (nothing enqueued, the first id read).
//!
//! Run with: cargo bench --bench keyed --all-features
//!
//! Uses the servers in `HOOKLATCH_TEST_POSTGRES_URL` and
//! `HOOKLATCH_TEST_REDIS_URL`, or starts private ones. After criterion's
//! report, prints a table of ratios to the baseline of the same run.

#[path = "common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use common::StoreBench;
use criterion::Criterion;
use hooklatch::sender::outbox::Keeping;
use hooklatch::sender::{PostgresOutbox, RedisOutbox, SendKey, SqliteOutbox};

/// Sends per measured iteration.
const BATCH: usize = 100;
const BODY: &[u8] = &[b'x'; 512];
const DAY: Duration = Duration::from_secs(24 * 3600);

#[derive(Clone, Copy)]
enum Kind {
    Plain,
    NewKey,
    SameKey,
}

/// `BATCH` sends of `kind` on a round's own endpoint.
async fn sends<S: Keeping>(store: &S, round: usize, kind: Kind) -> Duration {
    let endpoint = format!("bench{round}");
    let now = SystemTime::now();
    if let Kind::SameKey = kind {
        let key = SendKey {
            key: "key",
            now,
            window: DAY,
        };
        store
            .enqueue_keyed(&endpoint, key, "first", BODY, now)
            .await
            .unwrap();
    }
    let start = Instant::now();
    for n in 0..BATCH {
        let id = format!("evt_{n}");
        let name = match kind {
            Kind::SameKey => "key".to_owned(),
            _ => format!("key_{n}"),
        };
        let key = SendKey {
            key: &name,
            now,
            window: DAY,
        };
        match kind {
            Kind::Plain => assert!(store.enqueue(&endpoint, &id, BODY, now).await.unwrap()),
            Kind::NewKey => {
                let keyed = store.enqueue_keyed(&endpoint, key, &id, BODY, now);
                assert!(keyed.await.unwrap().enqueued);
            }
            Kind::SameKey => {
                let keyed = store.enqueue_keyed(&endpoint, key, &id, BODY, now);
                assert!(!keyed.await.unwrap().enqueued);
            }
        }
    }
    start.elapsed()
}

fn bench_store<S: Keeping>(
    criterion: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    name: &str,
    store: S,
) {
    let mut group = criterion.benchmark_group(format!("keyed_{name}"));
    group.sample_size(10);
    group.throughput(criterion::Throughput::Elements(BATCH as u64));
    let round = AtomicUsize::new(0);
    for (function, kind) in [
        ("send", Kind::Plain),
        ("new_key", Kind::NewKey),
        ("same_key", Kind::SameKey),
    ] {
        group.bench_function(function, |bench| {
            bench.iter_custom(|iters| {
                runtime.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let round = round.fetch_add(1, Ordering::Relaxed);
                        total += sends(&store, round, kind).await;
                    }
                    total
                })
            });
        });
    }
    group.finish();
}

fn main() {
    let mut bench = StoreBench::start("bench-keyed");
    let sqlite = bench.runtime.block_on(async {
        SqliteOutbox::open(bench.sqlite_dir.path().join("outbox.db"))
            .await
            .unwrap()
    });
    bench_store(&mut bench.criterion, &bench.runtime, "sqlite", sqlite);
    let postgres = bench.runtime.block_on(async {
        let store = PostgresOutbox::connect(&bench.postgres.url())
            .await
            .unwrap();
        let prefix = common::support::unique("bench");
        let store = PostgresOutbox::new(store.pool().clone(), &prefix).unwrap();
        store.migrate().await.unwrap();
        store
    });
    bench_store(&mut bench.criterion, &bench.runtime, "postgres", postgres);
    let redis = bench.runtime.block_on(async {
        RedisOutbox::connect(&bench.redis.url())
            .await
            .unwrap()
            .with_prefix(&common::support::unique("bench"))
            .unwrap()
    });
    bench_store(&mut bench.criterion, &bench.runtime, "redis", redis);
    bench.criterion.final_summary();

    println!("\n| outbox | send | new key / send | same key / send |");
    println!("|---|---|---|---|");
    for store in ["sqlite", "postgres", "redis"] {
        let median = |function: &str| common::median_ns(&format!("keyed_{store}/{function}"));
        let (Some(send), Some(new), Some(same)) =
            (median("send"), median("new_key"), median("same_key"))
        else {
            continue;
        };
        println!(
            "| {store} | {:.0} µs | {:.2}x | {:.2}x |",
            send / BATCH as f64 / 1e3,
            new / send,
            same / send
        );
    }
}
