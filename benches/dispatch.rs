//! Deliveries per second through a `Dispatcher`, next to the floor: the
//! same store operations in the same order (enqueue every delivery, then
//! lease up to 10 due and record each attempt until none is left), called
//! directly, with no scheduling, signing or transport.
//! The receiver is an in-process transport that answers 204 at once, so
//! the figure is the outbox's cost.
//!
//! Run with: cargo bench --bench dispatch --all-features
//!
//! Uses the servers in `HOOKLATCH_TEST_POSTGRES_URL` and
//! `HOOKLATCH_TEST_REDIS_URL`, or starts private ones (Redis with
//! `appendfsync always`). After criterion's report, prints a table.

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use criterion::Criterion;
use futures_util::future::join_all;
use hooklatch::sender::{
    Attempt, DeliveryState, DeliveryStore, Dispatcher, Final, HealthChange, Jitter, Policy,
    PostgresDeliveries, RedisDeliveries, Response, Schedule, SqliteDeliveries, Step, Transport,
    TransportError,
};
use hooklatch::verify::{Scheme, Signer};
use tokio::sync::Notify;

/// Deliveries per measured iteration.
const BATCH: usize = 200;
const BODY: &[u8] = &[b'x'; 512];
const CONCURRENCY: usize = 10;

/// Answers 204 at once and counts.
#[derive(Clone, Default)]
struct Instant204 {
    answered: Arc<AtomicUsize>,
    done: Arc<Notify>,
    target: Arc<AtomicUsize>,
}

impl Transport for Instant204 {
    async fn post(
        &self,
        _: &str,
        _: &[(String, String)],
        _: &[u8],
    ) -> Result<Response, TransportError> {
        let answered = self.answered.fetch_add(1, Ordering::SeqCst) + 1;
        if answered == self.target.load(Ordering::SeqCst) {
            self.done.notify_one();
        }
        Ok(Response::new(204))
    }
}

fn ids(round: usize) -> Vec<String> {
    (0..BATCH).map(|n| format!("evt_{round}_{n}")).collect()
}

/// `BATCH` deliveries through a dispatcher, enqueue to last record.
async fn through_dispatcher<S: DeliveryStore + Clone>(store: &S, round: usize) -> Duration {
    let transport = Instant204::default();
    transport.target.store(BATCH, Ordering::SeqCst);
    let dispatcher = Dispatcher::new(store.clone(), transport.clone());
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
    for id in ids(round) {
        dispatcher.send(&endpoint, &id, BODY).await.unwrap();
    }
    let running = dispatcher.start();
    transport.done.notified().await;
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
/// directly; `concurrent` records a leased batch at once rather than one
/// by one.
async fn direct<S: DeliveryStore>(store: &S, round: usize, concurrent: bool) -> Duration {
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
        let finish_all = taken.iter().map(|taken| {
            let attempt = Attempt::new(1, SystemTime::now(), Ok(204));
            async move {
                let recorded = store
                    .finish(
                        taken,
                        &attempt,
                        Step::Done(Final::Delivered),
                        Some(HealthChange::Succeeded),
                    )
                    .await
                    .unwrap();
                assert!(recorded.is_some());
            }
        });
        if concurrent {
            join_all(finish_all).await;
        } else {
            for finish in finish_all {
                finish.await;
            }
        }
    }
}

fn bench_store<S: DeliveryStore + Clone>(
    criterion: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    name: &str,
    store: S,
    concurrent: bool,
) {
    let mut group = criterion.benchmark_group(format!("dispatch_{name}"));
    group.sample_size(10);
    group.throughput(criterion::Throughput::Elements(BATCH as u64));
    let round = Arc::new(AtomicUsize::new(0));
    group.bench_function("dispatcher", |bench| {
        bench.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let round = round.fetch_add(1, Ordering::Relaxed);
                    total += through_dispatcher(&store, round).await;
                }
                total
            })
        });
    });
    group.bench_function("floor", |bench| {
        bench.iter_custom(|iters| {
            runtime.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let round = round.fetch_add(1, Ordering::Relaxed);
                    total += direct(&store, round, concurrent).await;
                }
                total
            })
        });
    });
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    let runtime = common::runtime();
    let postgres = support::postgres();
    let redis = support::redis();
    let sqlite_dir = support::TempDir::new("bench-dispatch");

    let sqlite = runtime.block_on(async {
        SqliteDeliveries::open(sqlite_dir.path().join("outbox.db"))
            .await
            .unwrap()
    });
    // SQLite has one writer: its floor records attempts one after another
    // (ten at once only adds lock waits).
    bench_store(&mut criterion, &runtime, "sqlite", sqlite, false);

    let postgres_store = runtime.block_on(async {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(16)
            .connect(&postgres.url())
            .await
            .unwrap();
        let store = PostgresDeliveries::new(pool, &support::unique("bench")).unwrap();
        store.migrate().await.unwrap();
        store
    });
    bench_store(&mut criterion, &runtime, "postgres", postgres_store, true);

    let redis_store = runtime.block_on(async {
        RedisDeliveries::connect(&redis.url())
            .await
            .unwrap()
            .with_prefix(&support::unique("bench"))
            .unwrap()
    });
    bench_store(&mut criterion, &runtime, "redis", redis_store, true);

    criterion.final_summary();
    print_table();
}

fn print_table() {
    println!("\n| outbox | dispatcher deliveries/s | floor/s | dispatcher / floor |");
    println!("|---|---|---|---|");
    for store in ["sqlite", "postgres", "redis"] {
        let (Some(ours), Some(floor)) = (
            common::median_ns(&format!("dispatch_{store}/dispatcher")),
            common::median_ns(&format!("dispatch_{store}/floor")),
        ) else {
            continue;
        };
        let per_second = |ns: f64| BATCH as f64 * 1e9 / ns;
        println!(
            "| {store} | {:.0} | {:.0} | {:.2}x |",
            per_second(ours),
            per_second(floor),
            floor / ours
        );
    }
}
