//! A worker at rest: what a take of one event and its ack cost on SQLite
//! when nothing else is written, next to the floor in the same run, two
//! one-row transactions on a file of the same settings (WAL,
//! `synchronous=FULL`), each its own durable commit as the take and the
//! ack are. Rounds of the two alternate, and the medians are compared.
//!
//! Run with: cargo bench --bench idle_take --features sqlite
//! (`IDLE_TAKE_ROUNDS` sets the rounds, default 10, of 200 cycles each.)

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use hooklatch::dedup::{Inbox, InboxQueue, IncomingEvent, SqliteInbox};
use sqlx::ConnectOptions as _;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};

const CYCLES: usize = 200;

fn main() {
    let rounds: usize = std::env::var("IDLE_TAKE_ROUNDS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(10);
    let dir = common::support::TempDir::new("idle-take");
    let runtime = common::runtime();
    let (store, take_ack, floor) = runtime.block_on(async {
        let store = SqliteInbox::open(dir.path().join("inbox.db"))
            .await
            .expect("the inbox");
        let mut floor = SqliteConnectOptions::new()
            .filename(dir.path().join("floor.db"))
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .connect()
            .await
            .expect("the floor's file");
        sqlx::query("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
            .execute(&mut floor)
            .await
            .expect("the floor's table");
        sqlx::query("INSERT INTO counter VALUES (1, 0)")
            .execute(&mut floor)
            .await
            .expect("the floor's row");
        let body = vec![b'x'; 1024];
        let (mut take_ack, mut floor_times) = (Vec::new(), Vec::new());
        let mut next_id = 0_u64;
        for _ in 0..rounds {
            for _ in 0..CYCLES {
                let id = format!("evt_{next_id}");
                next_id += 1;
                let _ = store
                    .accept(&IncomingEvent::new("bench", &id, &body))
                    .await
                    .expect("accept");
                let started = Instant::now();
                let taken = store.take("bench", "worker", 10).await.expect("take");
                let acked = store.ack_many(&taken).await.expect("ack");
                take_ack.push(started.elapsed());
                assert_eq!(acked, [true], "the one event taken is acked");
            }
            for _ in 0..CYCLES {
                let started = Instant::now();
                for _ in 0..2 {
                    sqlx::query("UPDATE counter SET n = n + 1 WHERE id = 1")
                        .execute(&mut floor)
                        .await
                        .expect("the floor's update");
                }
                floor_times.push(started.elapsed());
            }
        }
        (store, take_ack, floor_times)
    });
    drop(store);
    let (take_ack, floor) = (median(take_ack), median(floor));
    println!(
        "\nA take of one event and its ack on SQLite, nothing else written, medians of {rounds} x {CYCLES}:\n"
    );
    println!("| take + ack | floor: two one-row commits | take + ack / floor |");
    println!("|---|---|---|");
    println!(
        "| {:.0} µs | {:.0} µs | {:.2}x |",
        micros(take_ack),
        micros(floor),
        micros(take_ack) / micros(floor)
    );
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

fn micros(time: Duration) -> f64 {
    time.as_secs_f64() * 1e6
}
