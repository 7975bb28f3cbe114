//! Accept latency on Postgres while a retention purge runs, next to the
//! same accepts with no purge, in the same run: the purge deletes in
//! bounded batches (`PostgresInbox::purge`), and accepts' p99 may not
//! double. A one-statement `DELETE` of the same rows is measured too, for
//! comparison.
//!
//! Run with: cargo bench --bench purge --all-features
//! (`PURGE_ROWS` sets how many old claims each phase purges; default
//! 400,000.)
//!
//! Uses the server in `HOOKLATCH_TEST_POSTGRES_URL`, or starts a private
//! one (the Postgres binaries must be installed).

#[path = "common/mod.rs"]
mod common;

use common::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hooklatch::dedup::{Acceptance, Inbox, IncomingEvent, PostgresInbox};
use sqlx::AssertSqlSafe;

/// Concurrent accepting callers.
const CALLERS: usize = 16;
/// How long each phase accepts, at the least.
const PHASE: Duration = Duration::from_secs(6);
const BODY: &[u8] = &[b'x'; 512];

#[derive(Clone, Copy, PartialEq)]
enum Purge {
    None,
    Batched,
    OneStatement,
}

impl Purge {
    fn label(self) -> &'static str {
        match self {
            Self::None => "no purge",
            Self::Batched => "batched purge (store.purge)",
            Self::OneStatement => "one DELETE statement",
        }
    }
}

struct Phase {
    accepts: usize,
    p50: Duration,
    p99: Duration,
    purge_took: Option<Duration>,
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

async fn fill_old_claims(pool: &sqlx::PgPool, prefix: &str, rows: u64) {
    static BATCH: AtomicU64 = AtomicU64::new(0);
    let batch = BATCH.fetch_add(1, Ordering::Relaxed);
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {prefix}_claims (namespace, event_id, claimed_at) \
         SELECT 'old', 'b{batch}-' || x, 0 FROM generate_series(1, {rows}) AS x"
    )))
    .execute(pool)
    .await
    .expect("old claims inserted");
    sqlx::query(AssertSqlSafe(format!("ANALYZE {prefix}_claims")))
        .execute(pool)
        .await
        .expect("analyzed");
}

async fn phase(store: &PostgresInbox, prefix: &str, rows: u64, purge: Purge) -> Phase {
    let pool = store.pool().clone();
    if purge != Purge::None {
        fill_old_claims(&pool, prefix, rows).await;
    }
    let purging = Arc::new(AtomicBool::new(purge != Purge::None));
    let purger = {
        let (store, purging, prefix) = (store.clone(), Arc::clone(&purging), prefix.to_owned());
        tokio::spawn(async move {
            let start = Instant::now();
            match purge {
                Purge::None => return None,
                Purge::Batched => {
                    store.purge(Duration::from_secs(3600)).await.expect("purge");
                }
                Purge::OneStatement => {
                    sqlx::query(AssertSqlSafe(format!(
                        "DELETE FROM {prefix}_claims WHERE lease_token IS NULL AND claimed_at < 1000"
                    )))
                    .execute(store.pool())
                    .await
                    .expect("delete");
                }
            }
            purging.store(false, Ordering::SeqCst);
            Some(start.elapsed())
        })
    };
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let started = Instant::now();
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (store, purging) = (store.clone(), Arc::clone(&purging));
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while started.elapsed() < PHASE || purging.load(Ordering::SeqCst) {
                    let id = format!("evt_{}", NEXT.fetch_add(1, Ordering::Relaxed));
                    let call = Instant::now();
                    let accepted = store.accept(&IncomingEvent::new("bench", &id, BODY)).await;
                    assert_eq!(accepted.expect("accept"), Acceptance::Accepted);
                    latencies.push(call.elapsed());
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for caller in callers {
        latencies.extend(caller.await.expect("caller"));
    }
    let purge_took = purger.await.expect("purger");
    latencies.sort();
    Phase {
        accepts: latencies.len(),
        p50: percentile(&latencies, 0.50),
        p99: percentile(&latencies, 0.99),
        purge_took,
    }
}

fn main() {
    let rows: u64 = std::env::var("PURGE_ROWS")
        .ok()
        .and_then(|rows| rows.parse().ok())
        .unwrap_or(400_000);
    let server = support::postgres();
    let runtime = common::runtime();
    runtime.block_on(async {
        let prefix = support::unique("purge");
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(CALLERS as u32 + 2)
            .connect(&server.url())
            .await
            .expect("postgres");
        let store = PostgresInbox::new(pool, &prefix).expect("store");
        store.migrate().await.expect("migrate");
        // Warm the table and the pool.
        let _ = phase(&store, &prefix, rows, Purge::None).await;
        let mut results = Vec::new();
        for purge in [Purge::None, Purge::Batched, Purge::OneStatement] {
            results.push((purge, phase(&store, &prefix, rows, purge).await));
        }
        let baseline = results[0].1.p99;
        println!();
        println!(
            "Postgres accepts, {CALLERS} callers, while {rows} old claims are purged (same run):"
        );
        println!("| purge | accepts | p50 | p99 | p99 vs no purge | purge took |");
        println!("|---|---|---|---|---|---|");
        for (purge, result) in &results {
            println!(
                "| {} | {} | {:.2} ms | {:.2} ms | {:.2}x | {} |",
                purge.label(),
                result.accepts,
                result.p50.as_secs_f64() * 1e3,
                result.p99.as_secs_f64() * 1e3,
                result.p99.as_secs_f64() / baseline.as_secs_f64(),
                result
                    .purge_took
                    .map_or("-".into(), |took| format!("{:.2} s", took.as_secs_f64())),
            );
        }
    });
}
