//! Accepted events per second for each store, at 1 and 32 concurrent
//! callers, next to the raw floor on the same server and client count: a
//! bare `SET NX` round trip for Redis, a bare single-row `INSERT`
//! transaction for Postgres and SQLite.
//!
//! Run with: cargo bench --bench claim --all-features
//!
//! Uses the servers in `HOOKLATCH_TEST_POSTGRES_URL` and
//! `HOOKLATCH_TEST_REDIS_URL`, or starts private ones (Postgres and Redis
//! binaries must be installed). After criterion's report, prints a table.

#[path = "common/mod.rs"]
mod common;

use std::future::Future;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::StoreBench;
use criterion::{BenchmarkId, Criterion};
use hooklatch::dedup::{
    Acceptance, InboxQueue, IncomingEvent, PostgresInbox, RedisInbox, SqliteInbox,
};
use sqlx::AssertSqlSafe;

const CALLERS: [usize; 2] = [1, 32];
const BODY: &[u8] = &[b'x'; 512];

/// Ids never repeat across the whole run, so every call is a fresh accept.
fn next_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("evt_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Runs `iters` calls of `call` spread over `callers` tasks; returns the
/// wall time.
fn run_concurrently<F, Fut>(
    runtime: &tokio::runtime::Runtime,
    callers: usize,
    iters: u64,
    call: F,
) -> Duration
where
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    runtime.block_on(async {
        let start = Instant::now();
        let tasks: Vec<_> = (0..callers)
            .map(|caller| {
                let call = call.clone();
                let share =
                    iters / callers as u64 + u64::from((caller as u64) < iters % callers as u64);
                tokio::spawn(async move {
                    for _ in 0..share {
                        call(next_id()).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        start.elapsed()
    })
}

fn bench_pair<S, F, Fut>(
    c: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    store_name: &str,
    store: S,
    floor: F,
) where
    S: InboxQueue + Clone + 'static,
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let mut group = c.benchmark_group(format!("claim/{store_name}"));
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for callers in CALLERS {
        let accept = {
            let store = store.clone();
            move |id: String| {
                let store = store.clone();
                async move {
                    let event = IncomingEvent::new("bench", &id, BODY);
                    let outcome = store.accept(&event).await.expect("accept");
                    assert_eq!(outcome, Acceptance::Accepted);
                }
            }
        };
        group.bench_function(BenchmarkId::new("hooklatch_accept", callers), |b| {
            b.iter_custom(|iters| run_concurrently(runtime, callers, iters, accept.clone()))
        });
        group.bench_function(BenchmarkId::new("floor", callers), |b| {
            b.iter_custom(|iters| run_concurrently(runtime, callers, iters, floor.clone()))
        });
    }
    group.finish();
}

fn main() {
    let mut bench = StoreBench::start("bench-sqlite");

    // SQLite: the store, and a floor table in the same file and pool.
    let sqlite = bench.runtime.block_on(async {
        let store = SqliteInbox::open(bench.sqlite_dir.path().join("bench.db"))
            .await
            .unwrap();
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS floor (event_id TEXT PRIMARY KEY, body BLOB NOT NULL)",
        )
        .execute(store.pool())
        .await
        .unwrap();
        store
    });
    let pool = sqlite.pool().clone();
    bench_pair(
        &mut bench.criterion,
        &bench.runtime,
        "sqlite",
        sqlite,
        move |id: String| {
            let pool = pool.clone();
            async move {
                let mut tx = pool.begin().await.unwrap();
                sqlx::query("INSERT INTO floor (event_id, body) VALUES ($1, $2)")
                    .bind(black_box(id))
                    .bind(BODY)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
            }
        },
    );

    // Postgres: the store on a fresh prefix, and a floor table.
    let prefix = common::support::unique("bench");
    let postgres_store = bench.runtime.block_on(async {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(32)
            .connect(&bench.postgres.url())
            .await
            .unwrap();
        sqlx::query(AssertSqlSafe(format!(
            "CREATE TABLE {prefix}_floor (event_id TEXT PRIMARY KEY, body BYTEA NOT NULL)"
        )))
        .execute(&pool)
        .await
        .unwrap();
        let store = PostgresInbox::new(pool, &prefix).unwrap();
        store.migrate().await.unwrap();
        store
    });
    let pool = postgres_store.pool().clone();
    let insert = Arc::new(format!(
        "INSERT INTO {prefix}_floor (event_id, body) VALUES ($1, $2)"
    ));
    bench_pair(
        &mut bench.criterion,
        &bench.runtime,
        "postgres",
        postgres_store,
        move |id: String| {
            let (pool, insert) = (pool.clone(), insert.clone());
            async move {
                sqlx::query(AssertSqlSafe(insert.as_str()))
                    .bind(black_box(id))
                    .bind(BODY)
                    .execute(&pool)
                    .await
                    .unwrap();
            }
        },
    );

    // Redis: the store, and SET NX PX on the same kind of connection.
    let (redis_store, connection) = bench.runtime.block_on(async {
        let store = RedisInbox::connect(&bench.redis.url()).await.unwrap();
        let client = redis::Client::open(bench.redis.url()).unwrap();
        let connection = redis::aio::ConnectionManager::new(client).await.unwrap();
        (store, connection)
    });
    bench_pair(
        &mut bench.criterion,
        &bench.runtime,
        "redis",
        redis_store,
        move |id: String| {
            let mut connection = connection.clone();
            async move {
                let set: Option<String> = redis::cmd("SET")
                    .arg(format!("bench:{{floor}}:{id}"))
                    .arg("done")
                    .arg("NX")
                    .arg("PX")
                    .arg(604_800_000)
                    .query_async(&mut connection)
                    .await
                    .unwrap();
                assert!(set.is_some());
            }
        },
    );

    bench.criterion.final_summary();
    print_table();
}

fn print_table() {
    println!("\n| store | callers | hooklatch accept/s | floor/s | accept / floor |");
    println!("|---|---|---|---|---|");
    for store in ["sqlite", "postgres", "redis"] {
        for callers in CALLERS {
            let (Some(ours), Some(floor)) = (
                common::median_ns(&format!("claim_{store}/hooklatch_accept/{callers}")),
                common::median_ns(&format!("claim_{store}/floor/{callers}")),
            ) else {
                continue;
            };
            println!(
                "| {store} | {callers} | {:.0} | {:.0} | {:.2}x |",
                1e9 / ours,
                1e9 / floor,
                floor / ours
            );
        }
    }
}
