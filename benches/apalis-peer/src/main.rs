//! `apalis-peer`: a reference measurement of apalis 1.0 doing trivial work.
//!
//! One run against one storage (SQLite, Postgres or Redis):
//! 1. pushes N jobs, each a struct holding one 1 KiB `String`, with a single
//!    `push_bulk` call (apalis's batch API), and times it (`pushed_per_s`);
//! 2. starts one apalis worker on that storage with a no-op async handler that
//!    increments a shared `AtomicU64` and returns `Ok`;
//! 3. times from worker start until the counter reaches N or `--max-seconds`
//!    passes (`handled_per_s` = handled / seconds);
//! 4. stops the worker (apalis's graceful stop flushes pending acks), deletes
//!    this run's jobs, and prints exactly one JSON line on stdout.
//!
//! apalis's defaults are kept (batch size 10, locking and result persistence
//! on, 30 s heartbeat, unbounded in-worker concurrency, no pub/sub). Settings
//! that had to be chosen are marked `CHOICE:`. Any apalis error still yields
//! the JSON line, with `error` set, and exit code 0.

use apalis::prelude::*;
use apalis_postgres::{PgPool, PostgresStorage};
use apalis_redis::RedisStorage;
use apalis_sqlite::{SqliteConnectOptions, SqlitePool, SqliteStorage};
use clap::{Parser, ValueEnum};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Store {
    Sqlite,
    Postgres,
    Redis,
}

/// Measure apalis 1.0 pushing and handling N trivial jobs; prints one JSON line.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    /// Storage backend to measure.
    #[arg(long, value_enum)]
    store: Store,
    /// sqlite: a file path or sqlite: URL (created if missing; use a fresh one);
    /// '' makes a temporary file in $TMPDIR, deleted afterwards.
    /// postgres: e.g. postgres://user@127.0.0.1:5432/db (apalis migrations are run).
    /// redis: e.g. redis://127.0.0.1:6379.
    #[arg(long)]
    url: String,
    /// Number of jobs to push and then handle.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    jobs: u64,
    /// Give up handling after this many seconds (reported as an error).
    #[arg(long, default_value_t = 120)]
    max_seconds: u64,
}

/// The job: one 1024-byte string, serialised by apalis's default JSON codec.
#[derive(Serialize, Deserialize)]
struct Job {
    payload: String,
}

/// State shared with the handler through apalis's `Data` extractor.
struct Counter {
    handled: AtomicU64,
    target: u64,
    reached_at: OnceLock<Instant>,
    done: Notify,
}

/// The no-op handler: count the job, note when the target is reached.
async fn handle(_job: Job, c: Data<Arc<Counter>>) -> Result<(), BoxDynError> {
    if c.handled.fetch_add(1, Ordering::Relaxed) + 1 == c.target {
        let _ = c.reached_at.set(Instant::now());
        c.done.notify_one();
    }
    Ok(())
}

/// The JSON line printed on stdout.
#[derive(Serialize, Default)]
struct Report {
    store: &'static str,
    jobs: u64,
    pushed_per_s: f64,
    handled: u64,
    handled_per_s: f64,
    seconds: f64,
    error: Option<String>,
}

/// Push all jobs in one `push_bulk`, then run a worker until done, timed out
/// or failed. A macro because the three storages share no nameable type.
macro_rules! measure {
    ($backend:expr, $cli:expr, $worker_name:expr, $rep:expr) => {
        async {
            let (cli, rep): (&Cli, &mut Report) = ($cli, $rep);
            let mut backend = $backend;
            let jobs = (0..cli.jobs)
                .map(|_| Job {
                    payload: "x".repeat(1024),
                })
                .collect();
            let t = Instant::now();
            backend
                .push_bulk(jobs)
                .await
                .map_err(|e| format!("push: {e}"))?; // rate stays 0 on failure
            rep.pushed_per_s = cli.jobs as f64 / t.elapsed().as_secs_f64();

            let counter = Arc::new(Counter {
                handled: AtomicU64::new(0),
                target: cli.jobs,
                reached_at: OnceLock::new(),
                done: Notify::new(),
            });
            let worker = WorkerBuilder::new($worker_name)
                .backend(backend)
                .data(counter.clone())
                .build(handle);
            let (watch, limit) = (counter.clone(), Duration::from_secs(cli.max_seconds));
            let start = Instant::now();
            // The watcher stops the worker gracefully once the target is reached or
            // the time limit passes; a backend error ends `run_with_ctx` early.
            let run = worker
                .run_with_ctx(move |ctx| {
                    let watch = watch.clone();
                    async move {
                        tokio::select! {
                            _ = watch.done.notified() => {}
                            _ = tokio::time::sleep(limit) => {}
                        }
                        ctx.stop()
                    }
                })
                .await;
            let end = counter
                .reached_at
                .get()
                .copied()
                .unwrap_or_else(Instant::now);
            rep.seconds = (end - start).as_secs_f64();
            rep.handled = counter.handled.load(Ordering::Relaxed);
            rep.handled_per_s = rep.handled as f64 / rep.seconds;
            run.map_err(|e| format!("worker: {e}"))?;
            if rep.handled < cli.jobs {
                Err(format!(
                    "time limit {} s reached: handled {} of {}",
                    cli.max_seconds, rep.handled, cli.jobs
                ))?;
            }
            Ok::<(), BoxDynError>(())
        }
        .await
    };
}

async fn run(cli: &Cli, rep: &mut Report) -> Result<(), BoxDynError> {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
    // CHOICE: a queue name unique to this run, so runs never see each other's jobs.
    let queue = format!("apalis-peer-{}-{nanos}", std::process::id());
    match cli.store {
        Store::Sqlite => {
            let temp = cli
                .url
                .is_empty()
                .then(|| std::env::temp_dir().join(format!("{queue}.db")));
            let url = temp
                .as_ref()
                .map_or(cli.url.clone(), |p| p.display().to_string());
            // CHOICE: create the database file if missing; pool options are sqlx defaults.
            let opts: SqliteConnectOptions = url.parse()?;
            let pool = SqlitePool::connect_with(opts.create_if_missing(true)).await?;
            SqliteStorage::setup(&pool).await?; // apalis's migrations and PRAGMAs (WAL etc.)
            let config = apalis_sqlite::Config::default().queue(&queue);
            let res = measure!(
                SqliteStorage::<Job>::new(&pool).with_config(config),
                cli,
                queue.as_str(),
                rep
            );
            pool.close().await;
            for suffix in ["", "-wal", "-shm"].iter().filter(|_| temp.is_some()) {
                let _ = std::fs::remove_file(format!("{url}{suffix}"));
            }
            res
        }
        Store::Postgres => {
            let pool = PgPool::connect(&cli.url).await?;
            PostgresStorage::setup(&pool).await?; // apalis's documented migrations
            let config = apalis_postgres::Config::default().queue(&queue);
            let res = measure!(
                PostgresStorage::<Job>::new(&pool).with_config(config),
                cli,
                queue.as_str(),
                rep
            );
            // Untimed cleanup, so later runs do not scan this run's rows.
            let _ = sqlx::query("DELETE FROM apalis.jobs WHERE job_type = $1")
                .bind(&queue)
                .execute(&pool)
                .await;
            let _ = sqlx::query("DELETE FROM apalis.workers WHERE id = $1")
                .bind(&queue)
                .execute(&pool)
                .await;
            res
        }
        Store::Redis => {
            let conn = apalis_redis::connect(cli.url.as_str()).await?;
            let config = apalis_redis::Config::default().queue(&queue);
            let res = measure!(
                RedisStorage::<Job>::new(conn.clone()).with_config(config),
                cli,
                queue.as_str(),
                rep
            );
            // Untimed cleanup: every key apalis-redis uses starts with "<queue>:".
            let _ = redis_cleanup(conn, &queue).await;
            res
        }
    }
}

/// Delete this run's Redis keys (job data, metadata, lists, sets).
async fn redis_cleanup(
    mut conn: apalis_redis::ConnectionManager,
    queue: &str,
) -> redis::RedisResult<()> {
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{queue}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        if !keys.is_empty() {
            redis::cmd("UNLINK")
                .arg(&keys)
                .query_async::<()>(&mut conn)
                .await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let mut rep = Report {
        store: match cli.store {
            Store::Sqlite => "sqlite",
            Store::Postgres => "postgres",
            Store::Redis => "redis",
        },
        jobs: cli.jobs,
        ..Report::default()
    };
    if let Err(e) = run(&cli, &mut rep).await {
        rep.error = Some(e.to_string());
    }
    println!(
        "{}",
        serde_json::to_string(&rep).expect("report serialises")
    );
}
