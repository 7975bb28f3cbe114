//! What a worker's take costs as the backlog grows: `take(256)` and
//! `ack_many` of what it took, on SQLite, Postgres and Redis, with 1k,
//! 100k and 1M events waiting, in the same run. A take served by its index costs
//! the batch, not the backlog, so the three medians stay within a small
//! factor of each other; the ratio to the 1k case is printed.
//!
//! Run with: cargo bench --bench take --features sqlite,postgres,redis
//! (`TAKE_SIZES` overrides the backlogs, comma-separated; `TAKE_STORES`
//! picks among `sqlite,postgres,redis`.)
//!
//! Uses the Postgres and Redis servers in `HOOKLATCH_TEST_POSTGRES_URL`
//! and `HOOKLATCH_TEST_REDIS_URL`, or private ones. The SQL backlogs are
//! written straight into the inbox table; the Redis one goes through
//! `accept`, 64 at a time, since its streams and claims are the store's
//! own format (1M events take a few minutes and about 1.2 GB of memory).

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::support;
use hooklatch::dedup::{InboxQueue, PostgresInbox, RedisInbox, SqliteInbox};
use sqlx::AssertSqlSafe;

const BATCH: usize = 256;
const ROUNDS: usize = 40;
/// What the rounds take: filled on top of each backlog, so that at least
/// the backlog's size waits throughout.
const TAKEN: u64 = (BATCH * ROUNDS) as u64;

/// Times `ROUNDS` takes of `BATCH` from `namespace` and their `ack_many`;
/// the median.
async fn median_take<S: InboxQueue>(store: &S, namespace: &str) -> Duration {
    let mut took = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let batch = store.take(namespace, "worker", BATCH).await.expect("take");
        assert_eq!(batch.len(), BATCH, "the backlog ran out");
        store.ack_many(&batch).await.expect("ack");
        took.push(started.elapsed());
    }
    took.sort();
    took[ROUNDS / 2]
}

/// Waiting 1 KiB events in `inbox`, one per row of `series` (`x`), as a
/// burst leaves them.
fn fill(inbox: &str, series: &str) -> AssertSqlSafe<String> {
    AssertSqlSafe(format!(
        "INSERT INTO {inbox} (namespace, event_id, body, received_at, available_at) \
         SELECT 'bench', 'evt_' || x, zeroblob(1024), x, x FROM {series}"
    ))
}

/// Removes `namespace`'s streams and claims, which a shared server would
/// otherwise keep (1M events are about 1.2 GB).
async fn forget_redis(url: &str, namespace: &str) {
    let client = redis::Client::open(url).expect("redis url");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    // SCAN in steps, where one KEYS over a million keys would outlast the
    // client's response timeout.
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("*{{{namespace}*"))
            .arg("COUNT")
            .arg(10_000)
            .query_async(&mut connection)
            .await
            .expect("scan");
        if !keys.is_empty() {
            redis::cmd("UNLINK")
                .arg(&keys)
                .query_async::<()>(&mut connection)
                .await
                .expect("unlink");
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
}

fn main() {
    let sizes: Vec<u64> = std::env::var("TAKE_SIZES")
        .ok()
        .map(|text| {
            text.split(',')
                .filter_map(|n| n.trim().parse().ok())
                .collect()
        })
        .unwrap_or_else(|| vec![1_000, 100_000, 1_000_000]);
    let stores = std::env::var("TAKE_STORES").unwrap_or_else(|_| "sqlite,postgres,redis".into());
    let measured = |store: &str| stores.split(',').any(|name| name.trim() == store);
    let postgres = measured("postgres").then(support::postgres);
    let redis = measured("redis").then(support::redis);
    let runtime = common::runtime();
    let dir = support::TempDir::new("take-bench");
    let mut rows = Vec::new();
    runtime.block_on(async {
        for &size in sizes.iter().filter(|_| measured("sqlite")) {
            let store = SqliteInbox::open(dir.path().join(format!("take-{size}.db")))
                .await
                .expect("sqlite");
            let series = format!(
                "(WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {}) \
                 SELECT x FROM n)",
                size + TAKEN
            );
            sqlx::query(fill("hooklatch_inbox", &series))
                .execute(store.pool())
                .await
                .expect("fill");
            sqlx::query("ANALYZE")
                .execute(store.pool())
                .await
                .expect("analyze");
            rows.push(("SQLite", size, median_take(&store, "bench").await));
        }
        if let Some(postgres) = &postgres {
            measure_postgres(&postgres.url(), &sizes, &mut rows).await;
        }
        if let Some(redis) = &redis {
            let store = RedisInbox::connect(&redis.url()).await.expect("redis");
            for &size in &sizes {
                let namespace = format!("take-{size}-{}", std::process::id());
                common::accept_events(&store, &namespace, size + TAKEN).await;
                rows.push(("Redis", size, median_take(&store, &namespace).await));
                forget_redis(&redis.url(), &namespace).await;
            }
        }
    });
    print_rows(&rows);
}

/// The Postgres rows: a backlog of each size written into a fresh inbox.
async fn measure_postgres(url: &str, sizes: &[u64], rows: &mut Vec<(&str, u64, Duration)>) {
    let pool = sqlx::PgPool::connect(url).await.expect("postgres");
    for &size in sizes {
        let prefix = format!("take_{size}_{}", std::process::id());
        let store = PostgresInbox::new(pool.clone(), &prefix).expect("prefix");
        store.migrate().await.expect("migrate");
        let inbox = format!("{prefix}_inbox");
        let series = format!("generate_series(1, {}) AS x", size + TAKEN);
        let fill = fill(&inbox, &series)
            .0
            .replace("zeroblob(1024)", "repeat('x', 1024)::bytea");
        sqlx::query(AssertSqlSafe(fill))
            .execute(&pool)
            .await
            .expect("fill");
        sqlx::query(AssertSqlSafe(format!("VACUUM ANALYZE {inbox}")))
            .execute(&pool)
            .await
            .expect("analyze");
        rows.push(("Postgres", size, median_take(&store, "bench").await));
        for table in [inbox, format!("{prefix}_claims")] {
            let _ = sqlx::query(AssertSqlSafe(format!("DROP TABLE {table}")))
                .execute(&pool)
                .await;
        }
    }
}

fn print_rows(rows: &[(&str, u64, Duration)]) {
    println!("\ntake({BATCH}) + ack_many, median of {ROUNDS}, by events waiting (same run):");
    println!("| store | waiting | median | ratio to the smallest backlog |");
    println!("|---|---|---|---|");
    for (store, size, median) in rows {
        let smallest = rows
            .iter()
            .find(|(other, ..)| other == store)
            .map_or(*median, |(.., first)| *first);
        println!(
            "| {store} | {size} | {:.2} ms | {:.2}x |",
            median.as_secs_f64() * 1e3,
            median.as_secs_f64() / smallest.as_secs_f64()
        );
    }
}
