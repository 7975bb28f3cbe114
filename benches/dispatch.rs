//! Deliveries per second through a `Dispatcher`, from the first `send` to
//! the last attempt recorded, next to the one-commit-each floor: the same
//! store operations (enqueue every delivery, then lease up to 10 due and
//! record each attempt until none is left) called directly, one after
//! another, so that each is its own commit.
//!
//! The dispatcher is measured twice: with the deliveries sent by 32 tasks
//! at once (a service sending from its request handlers), and by one task
//! sending one after another. The receiver is an in-process transport that
//! answers 204 at once, so the figure is the outbox's cost.
//!
//! Run with: cargo bench --bench dispatch --all-features
//!
//! Uses the servers in `HOOKLATCH_TEST_POSTGRES_URL` and
//! `HOOKLATCH_TEST_REDIS_URL`, or starts private ones (Redis with
//! `appendfsync always`). After criterion's report, prints a table.

#[path = "common/mod.rs"]
mod common;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use common::StoreBench;
use criterion::Criterion;
use futures_util::StreamExt;
use hooklatch::sender::outbox::DeliveryStore;
use hooklatch::sender::outbox::{DeliveryState, HealthChange};
use hooklatch::sender::rules::{Attempt, Final, Jitter, Schedule, Step};
use hooklatch::sender::transport::{Response, transport_fn};
use hooklatch::sender::{Dispatcher, Policy, PostgresOutbox, RedisOutbox, SqliteOutbox, Transport};
use hooklatch::verify::{Scheme, Signer};
use tokio::sync::Notify;

/// Deliveries per measured iteration.
const BATCH: usize = 200;
/// The tasks sending at once in the `dispatcher` run.
const SENDERS: usize = 32;
const BODY: &[u8] = &[b'x'; 512];
const CONCURRENCY: usize = 10;

/// A receiver in the process that answers 204 at once, and the signal it
/// gives once it has answered `BATCH` requests.
fn instant_204() -> (impl Transport, Arc<Notify>) {
    let answered = AtomicUsize::new(0);
    let done = Arc::new(Notify::new());
    let all_answered = Arc::clone(&done);
    let transport = transport_fn(move |_, _, _| {
        if answered.fetch_add(1, Ordering::SeqCst) + 1 == BATCH {
            all_answered.notify_one();
        }
        std::future::ready(Ok(Response::new(204)))
    });
    (transport, done)
}

fn ids(round: usize) -> Vec<String> {
    (0..BATCH).map(|n| format!("evt_{round}_{n}")).collect()
}

/// `BATCH` deliveries through a dispatcher, enqueue to last record, sent
/// by `senders` tasks at once.
async fn through_dispatcher<S: DeliveryStore + Clone>(
    store: &S,
    round: usize,
    senders: usize,
) -> Duration {
    let (transport, all_answered) = instant_204();
    let dispatcher = Dispatcher::new(store.clone(), transport);
    let policy = Policy::new(Schedule::Table {
        delays: vec![Duration::ZERO; 3],
        jitter: Jitter::None,
    })
    .with_concurrency(CONCURRENCY);
    let signer = Signer::new(
        Scheme::standard_webhooks(),
        ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
    )
    .unwrap();
    let endpoint = format!("bench{round}");
    dispatcher
        .add_endpoint(&endpoint, "https://receiver.example/hooks", signer, policy)
        .await
        .unwrap();
    let start = Instant::now();
    futures_util::stream::iter(ids(round))
        .for_each_concurrent(senders, |id| {
            let (dispatcher, endpoint) = (&dispatcher, &endpoint);
            async move {
                dispatcher.send(endpoint, &id, BODY).await.unwrap();
            }
        })
        .await;
    let running = dispatcher.start();
    all_answered.notified().await;
    // Stopping waits for the last attempts to be recorded.
    running.stop().await;
    let elapsed = start.elapsed();
    let delivered = store
        .list(&endpoint, DeliveryState::Delivered, BATCH + 1)
        .await
        .unwrap();
    assert_eq!(delivered.len(), BATCH, "every delivery recorded");
    elapsed
}

/// The floor: the same store calls in the same order (enqueue all, then
/// lease up to 10 due and record each, until none is left), called
/// directly and one after another, each its own commit.
async fn one_commit_each<S: DeliveryStore>(store: &S, round: usize) -> Duration {
    let endpoint = format!("floor{round}");
    let start = Instant::now();
    for id in ids(round) {
        store
            .enqueue(&endpoint, &id, BODY, SystemTime::now())
            .await
            .unwrap();
    }
    loop {
        let taken = store
            .take_due(
                &endpoint,
                SystemTime::now(),
                CONCURRENCY,
                Duration::from_secs(60),
            )
            .await
            .unwrap()
            .taken;
        if taken.is_empty() {
            return start.elapsed();
        }
        for taken in &taken {
            let attempt = Attempt::new(1, SystemTime::now(), Ok(204));
            store
                .finish(
                    taken,
                    &attempt,
                    Step::Done(Final::Delivered),
                    Some(HealthChange::Succeeded),
                )
                .await
                .expect("the lease held");
        }
    }
}

/// The total time of `iters` runs of `run`, each on a round of its own.
async fn timed<F: Future<Output = Duration>>(
    iters: u64,
    round: &AtomicUsize,
    run: impl Fn(usize) -> F,
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        total += run(round.fetch_add(1, Ordering::Relaxed)).await;
    }
    total
}

fn bench_store<S: DeliveryStore + Clone>(
    criterion: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    name: &str,
    store: S,
) {
    let mut group = criterion.benchmark_group(format!("dispatch_{name}"));
    group.sample_size(10);
    group.throughput(criterion::Throughput::Elements(BATCH as u64));
    let round = AtomicUsize::new(0);
    group.bench_function("dispatcher", |bench| {
        bench.iter_custom(|iters| {
            runtime.block_on(timed(iters, &round, |round| {
                through_dispatcher(&store, round, SENDERS)
            }))
        });
    });
    group.bench_function("dispatcher_one_sender", |bench| {
        bench.iter_custom(|iters| {
            runtime.block_on(timed(iters, &round, |round| {
                through_dispatcher(&store, round, 1)
            }))
        });
    });
    group.bench_function("floor", |bench| {
        bench.iter_custom(|iters| {
            runtime.block_on(timed(iters, &round, |round| one_commit_each(&store, round)))
        });
    });
    group.finish();
}

fn main() {
    let mut bench = StoreBench::start("bench-dispatch");

    let sqlite = bench.runtime.block_on(async {
        SqliteOutbox::open(bench.sqlite_dir.path().join("outbox.db"))
            .await
            .unwrap()
    });
    bench_store(&mut bench.criterion, &bench.runtime, "sqlite", sqlite);

    let postgres_store = bench.runtime.block_on(async {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(16)
            .connect(&bench.postgres.url())
            .await
            .unwrap();
        let store = PostgresOutbox::new(pool, &common::support::unique("bench")).unwrap();
        store.migrate().await.unwrap();
        store
    });
    bench_store(
        &mut bench.criterion,
        &bench.runtime,
        "postgres",
        postgres_store,
    );

    let redis_store = bench.runtime.block_on(async {
        RedisOutbox::connect(&bench.redis.url())
            .await
            .unwrap()
            .with_prefix(&common::support::unique("bench"))
            .unwrap()
    });
    bench_store(&mut bench.criterion, &bench.runtime, "redis", redis_store);

    bench.criterion.final_summary();
    print_table();
}

fn print_table() {
    println!(
        "\n| outbox | dispatcher, {SENDERS} senders, deliveries/s | one sender | one commit each (floor) | {SENDERS} senders / floor | one sender / floor |"
    );
    println!("|---|---|---|---|---|---|");
    for store in ["sqlite", "postgres", "redis"] {
        let median = |run: &str| common::median_ns(&format!("dispatch_{store}/{run}"));
        let (Some(many), Some(one), Some(floor)) = (
            median("dispatcher"),
            median("dispatcher_one_sender"),
            median("floor"),
        ) else {
            continue;
        };
        let per_second = |ns: f64| BATCH as f64 * 1e9 / ns;
        println!(
            "| {store} | {:.0} | {:.0} | {:.0} | {:.2}x | {:.2}x |",
            per_second(many),
            per_second(one),
            per_second(floor),
            floor / many,
            floor / one
        );
    }
}
