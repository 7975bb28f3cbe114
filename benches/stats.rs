//! `InboxQueue::stats` on the SQL stores at a backlog of a million waiting
//! events and half a million dead letters, next to the count a user writes by hand over the same table in
//! the same run (one `COUNT(*)` with the states summed): the store reads
//! the counts its triggers keep and the small taken and dead indexes, so
//! its time should not follow the backlog. Goal: at most 10 ms.
//!
//! Run with: cargo bench --bench stats --all-features
//! (`STATS_WAITING` sets the backlog, default 1,000,000; `STATS_DEAD` the
//! dead letters, default 500,000.)
//!
//! Uses the server in `HOOKLATCH_TEST_POSTGRES_URL`, or starts a private
//! one (the Postgres binaries must be installed).

#[path = "common/mod.rs"]
mod common;

use common::support;

use std::time::{Duration, Instant};

use hooklatch::SqlDatabase;
use hooklatch::dedup::{InboxQueue, InboxStats, PostgresInbox, SqlInbox, SqliteInbox};
use sqlx::AssertSqlSafe;

/// Events taken from the backlog and left held.
const HELD: usize = 100;
/// Calls measured per way of counting.
const CALLS: usize = 30;

/// The count a user writes by hand: the whole namespace, states summed.
fn by_hand(inbox: &str, now: &str) -> String {
    format!(
        "SELECT COUNT(*), \
         COALESCE(SUM(CASE WHEN dead THEN 1 ELSE 0 END), 0), \
         COALESCE(SUM(CASE WHEN NOT dead AND taken_until > {now} THEN 1 ELSE 0 END), 0) \
         FROM {inbox} WHERE namespace = 'bench'"
    )
}

struct Timings {
    median: Duration,
    max: Duration,
}

fn timings(mut calls: Vec<Duration>) -> Timings {
    calls.sort();
    Timings {
        median: calls[calls.len() / 2],
        max: calls[calls.len() - 1],
    }
}

/// Fills `bench` by `fill` (the backlog, then the dead letters, each one
/// statement), then takes `HELD` of the backlog through the store.
async fn fill<DB: SqlDatabase>(store: &SqlInbox<DB>, fill: Vec<String>)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    let start = Instant::now();
    for statement in fill {
        sqlx::raw_sql(AssertSqlSafe(statement))
            .execute(store.pool())
            .await
            .expect("backlog inserted");
    }
    let taken = store.take("bench", "bench", HELD).await.expect("take");
    assert_eq!(taken.len(), HELD);
    eprintln!("filled in {:.1} s", start.elapsed().as_secs_f64());
}

async fn measure<DB: SqlDatabase>(
    name: &str,
    store: &SqlInbox<DB>,
    hand: String,
    (waiting, dead): (u64, u64),
) -> (Timings, Timings)
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    let stats = store.stats("bench").await.expect("stats");
    let mut expected = InboxStats::default();
    (expected.waiting, expected.taken, expected.dead) = (waiting - HELD as u64, HELD as u64, dead);
    assert_eq!(stats, expected, "{name}: stats counts every event");
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..CALLS {
        let call = Instant::now();
        let _ = store.stats("bench").await.expect("stats");
        ours.push(call.elapsed());
        let call = Instant::now();
        let _ = sqlx::raw_sql(AssertSqlSafe(hand.clone()))
            .execute(store.pool())
            .await
            .expect("count by hand");
        theirs.push(call.elapsed());
    }
    (timings(ours), timings(theirs))
}

fn main() {
    let waiting: u64 = std::env::var("STATS_WAITING")
        .ok()
        .and_then(|rows| rows.parse().ok())
        .unwrap_or(1_000_000);
    let dead: u64 = std::env::var("STATS_DEAD")
        .ok()
        .and_then(|rows| rows.parse().ok())
        .unwrap_or(500_000);
    let server = support::postgres();
    let dir = support::TempDir::new("stats-bench");
    let runtime = common::runtime();
    let results = runtime.block_on(async {
        let mut results = Vec::new();

        let sqlite = SqliteInbox::open(dir.path().join("inbox.db"))
            .await
            .expect("sqlite");
        fill(
            &sqlite,
            ["", "dead-"]
                .into_iter()
                .zip([(waiting, "0"), (dead, "1")])
                .map(|(name, (rows, dead))| {
                    format!(
                        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {rows}) \
                         INSERT INTO hooklatch_inbox \
                         (namespace, event_id, body, received_at, available_at, dead) \
                         SELECT 'bench', '{name}evt-' || x, randomblob(256), 0, 0, {dead} FROM n"
                    )
                })
                .chain(["ANALYZE".to_owned()])
                .collect(),
        )
        .await;
        let hand = by_hand("hooklatch_inbox", "CAST(unixepoch('subsec') * 1000 AS INTEGER)");
        results.push(("SQLite", measure("SQLite", &sqlite, hand, (waiting, dead)).await));

        let pool = sqlx::PgPool::connect(&server.url()).await.expect("postgres");
        let prefix = support::unique("stats");
        let postgres = PostgresInbox::new(pool, &prefix).expect("store");
        postgres.migrate().await.expect("migrate");
        fill(
            &postgres,
            ["", "dead-"]
                .into_iter()
                .zip([(waiting, "FALSE"), (dead, "TRUE")])
                .map(|(name, (rows, dead))| {
                    format!(
                        "INSERT INTO {prefix}_inbox \
                         (namespace, event_id, body, received_at, available_at, dead) \
                         SELECT 'bench', '{name}evt-' || x, convert_to(repeat('x', 256), 'UTF8'), \
                         0, 0, {dead} FROM generate_series(1, {rows}) AS x"
                    )
                })
                .chain([format!("VACUUM ANALYZE {prefix}_inbox")])
                .collect(),
        )
        .await;
        let hand = by_hand(
            &format!("{prefix}_inbox"),
            "(extract(epoch from clock_timestamp()) * 1000)::bigint",
        );
        results.push(("Postgres", measure("Postgres", &postgres, hand, (waiting, dead)).await));
        results
    });
    println!();
    println!(
        "`stats` at {waiting} events, {HELD} of them taken, and {dead} dead ({CALLS} calls each, same run):"
    );
    println!("| store | stats median | stats max | by hand median | by hand / stats |");
    println!("|---|---|---|---|---|");
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for (store, (ours, theirs)) in results {
        println!(
            "| {store} | {:.2} ms | {:.2} ms | {:.1} ms | {:.0}x |",
            ms(ours.median),
            ms(ours.max),
            ms(theirs.median),
            theirs.median.as_secs_f64() / ours.median.as_secs_f64(),
        );
    }
}
