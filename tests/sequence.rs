//! Sequence tracking: one suite for every store (memory, SQLite, Postgres,
//! Redis) against real servers, property tests of the tracker and the
//! reorder buffer, and the buffer's memory bound.

mod support;

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hooklatch::sequence::{
    DEFAULT_MAX_HELD, FirstEvent, Held, MemorySequences, Observation, PostgresSequences,
    RedisSequences, ReorderBuffer, SequenceError, SequenceStore, SqliteSequences, Tracker,
};
use proptest::prelude::*;

struct Fixture<S> {
    tracker: Tracker<S>,
    resource: String,
    _guards: Vec<Box<dyn Any + Send>>,
}

trait Backend {
    type Store: SequenceStore + Clone + Send + Sync + 'static;
    async fn fixture() -> Fixture<Self::Store>;
}

struct Memory;
impl Backend for Memory {
    type Store = MemorySequences;
    async fn fixture() -> Fixture<MemorySequences> {
        Fixture {
            tracker: Tracker::new(MemorySequences::new()),
            resource: support::unique("order_"),
            _guards: Vec::new(),
        }
    }
}

struct Sqlite;
impl Backend for Sqlite {
    type Store = SqliteSequences;
    async fn fixture() -> Fixture<SqliteSequences> {
        let dir = support::TempDir::new("seq-sqlite");
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(dir.path().join("seq.db"))
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(10));
        let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
        let store = SqliteSequences::new(pool, "hooklatch").unwrap();
        store.migrate().await.unwrap();
        Fixture {
            tracker: Tracker::new(store),
            resource: support::unique("order_"),
            _guards: vec![Box::new(dir)],
        }
    }
}

struct Postgres;
impl Backend for Postgres {
    type Store = PostgresSequences;
    async fn fixture() -> Fixture<PostgresSequences> {
        let server = support::postgres();
        let pool = sqlx::PgPool::connect(&server.url()).await.unwrap();
        let store = PostgresSequences::new(pool, "hooklatch").unwrap();
        store.migrate().await.unwrap();
        Fixture {
            tracker: Tracker::new(store),
            resource: support::unique("order_"),
            _guards: vec![Box::new(server)],
        }
    }
}

/// Redis on one server, or (`CLUSTER`) on a cluster of three masters and
/// three replicas.
struct RedisOn<const CLUSTER: bool>;
type Redis = RedisOn<false>;
type RedisCluster = RedisOn<true>;

impl<const CLUSTER: bool> Backend for RedisOn<CLUSTER> {
    type Store = RedisSequences;
    async fn fixture() -> Fixture<RedisSequences> {
        let server = if CLUSTER {
            support::redis_cluster()
        } else {
            support::redis()
        };
        let store = RedisSequences::connect(&server.url()).await.unwrap();
        Fixture {
            tracker: Tracker::new(store),
            resource: support::unique("order_"),
            _guards: vec![Box::new(server)],
        }
    }
}

async fn gap_then_refetch_then_later_events_apply<B: Backend>() {
    let f = B::fixture().await;
    let (t, r) = (&f.tracker, f.resource.as_str());
    assert_eq!(t.observe(r, 1).await.unwrap(), Observation::Apply);
    assert!(t.commit(r, 1).await.unwrap());
    assert_eq!(t.observe(r, 2).await.unwrap(), Observation::Apply);
    assert!(t.commit(r, 2).await.unwrap());
    // 3 is lost: 4 reports the gap.
    assert_eq!(
        t.observe(r, 4).await.unwrap(),
        Observation::Gap {
            expected: 3,
            got: 4
        }
    );
    // The worker refetched the resource, which reflects event 4.
    assert!(t.commit(r, 4).await.unwrap());
    assert_eq!(
        t.observe(r, 3).await.unwrap(),
        Observation::Stale { last: 4 }
    );
    assert_eq!(
        t.observe(r, 4).await.unwrap(),
        Observation::Stale { last: 4 }
    );
    assert_eq!(t.observe(r, 5).await.unwrap(), Observation::Apply);
}

async fn commits_only_move_forward<B: Backend>() {
    let f = B::fixture().await;
    let (t, r) = (&f.tracker, f.resource.as_str());
    assert!(t.commit(r, 5).await.unwrap());
    assert!(!t.commit(r, 5).await.unwrap(), "a second commit of 5 loses");
    assert!(!t.commit(r, 3).await.unwrap(), "going back is refused");
    assert_eq!(t.store().position(r).await.unwrap(), Some(5));
    assert!(t.commit(r, 10).await.unwrap());
    // Numbers up to 2^63 - 1 compare exactly, even in Redis's Lua.
    assert!(t.commit(r, (1 << 62) + 1).await.unwrap());
    assert!(!t.commit(r, 1 << 62).await.unwrap());
    assert!(matches!(
        t.commit(r, u64::MAX).await,
        Err(SequenceError::OutOfRange(_))
    ));
    assert!(matches!(
        t.observe("bad resource", 1).await,
        Err(SequenceError::InvalidResource(_))
    ));
}

async fn first_event_may_require_a_start<B: Backend>() {
    let f = B::fixture().await;
    let strict = Tracker::new(f.tracker.store().clone()).with_first_event(FirstEvent::StartAt(1));
    let r = f.resource.as_str();
    assert_eq!(
        strict.observe(r, 2).await.unwrap(),
        Observation::Gap {
            expected: 1,
            got: 2
        }
    );
    assert_eq!(strict.observe(r, 1).await.unwrap(), Observation::Apply);
}

async fn sixteen_racing_workers_apply_each_step_once<B: Backend>() {
    let f = B::fixture().await;
    let tracker = Arc::new(f.tracker.clone());
    let applied: Arc<Mutex<HashMap<u64, usize>>> = Arc::default();
    const STEPS: u64 = 150;
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (tracker, applied, resource) =
                (tracker.clone(), applied.clone(), f.resource.clone());
            tokio::spawn(async move {
                for sequence in 1..=STEPS {
                    loop {
                        match tracker.observe(&resource, sequence).await.unwrap() {
                            Observation::Apply => {
                                if tracker.commit(&resource, sequence).await.unwrap() {
                                    *applied.lock().unwrap().entry(sequence).or_default() += 1;
                                }
                                break;
                            }
                            Observation::Stale { .. } => break,
                            // Another worker is behind on an earlier step.
                            Observation::Gap { .. } => tokio::task::yield_now().await,
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let applied = applied.lock().unwrap().clone();
    assert_eq!(applied.len() as u64, STEPS);
    assert!(applied.values().all(|&n| n == 1), "a step applied twice");
    assert_eq!(
        tracker.store().position(&f.resource).await.unwrap(),
        Some(STEPS)
    );
}

macro_rules! sequence_suite {
    ($($module:ident => $backend:ident),*) => {
        $(
            mod $module {
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn gap_then_refetch_then_later_events_apply() {
                    super::gap_then_refetch_then_later_events_apply::<super::$backend>().await;
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn commits_only_move_forward() {
                    super::commits_only_move_forward::<super::$backend>().await;
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn first_event_may_require_a_start() {
                    super::first_event_may_require_a_start::<super::$backend>().await;
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn sixteen_racing_workers_apply_each_step_once() {
                    super::sixteen_racing_workers_apply_each_step_once::<super::$backend>().await;
                }
            }
        )*
    };
}

sequence_suite!(
    memory => Memory,
    sqlite => Sqlite,
    postgres => Postgres,
    redis => Redis,
    redis_cluster => RedisCluster
);

#[tokio::test]
async fn postgres_advance_in_a_rolled_back_transaction_does_not_count() {
    let server = support::postgres();
    let pool = sqlx::PgPool::connect(&server.url()).await.unwrap();
    let store = PostgresSequences::new(pool.clone(), "hooklatch").unwrap();
    store.migrate().await.unwrap();
    let resource = support::unique("order_");
    let mut tx = pool.begin().await.unwrap();
    assert!(store.advance_in(&mut tx, &resource, 1).await.unwrap());
    tx.rollback().await.unwrap();
    assert_eq!(store.position(&resource).await.unwrap(), None);
    let mut tx = pool.begin().await.unwrap();
    assert!(store.advance_in(&mut tx, &resource, 1).await.unwrap());
    tx.commit().await.unwrap();
    assert_eq!(store.position(&resource).await.unwrap(), Some(1));
}

/// 1..=n, shuffled by `order`, with `repeats` extra copies of some.
fn shuffled_with_duplicates(n: u64, order: &[usize], repeats: &[usize]) -> Vec<u64> {
    let mut events: Vec<u64> = (1..=n).collect();
    for &index in repeats {
        events.push(1 + (index as u64 % n));
    }
    let mut shuffled = Vec::with_capacity(events.len());
    for &pick in order.iter().cycle().take(events.len()) {
        let taken = events.remove(pick % events.len());
        shuffled.push(taken);
    }
    shuffled
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(future)
}

proptest! {
    #[test]
    fn tracker_applies_each_number_at_most_once_in_increasing_order(
        n in 1u64..60,
        order in proptest::collection::vec(any::<usize>(), 1..80),
        repeats in proptest::collection::vec(any::<usize>(), 0..40),
    ) {
        let events = shuffled_with_duplicates(n, &order, &repeats);
        let applied = block_on(async {
            let tracker = Tracker::new(MemorySequences::new());
            let mut applied = Vec::new();
            for sequence in events {
                if tracker.observe("r", sequence).await.unwrap() == Observation::Apply {
                    assert!(tracker.commit("r", sequence).await.unwrap());
                    applied.push(sequence);
                }
            }
            applied
        });
        prop_assert!(applied.windows(2).all(|pair| pair[0] < pair[1]), "{applied:?}");
    }

    #[test]
    fn with_the_buffer_every_number_is_applied_once_in_order(
        n in 1u64..60,
        order in proptest::collection::vec(any::<usize>(), 1..80),
        repeats in proptest::collection::vec(any::<usize>(), 0..40),
    ) {
        let events = shuffled_with_duplicates(n, &order, &repeats);
        let applied = block_on(async {
            let tracker = Tracker::new(MemorySequences::new()).with_first_event(FirstEvent::StartAt(1));
            let mut buffer = ReorderBuffer::new(Duration::from_secs(3600));
            let now = Instant::now();
            let mut applied = Vec::new();
            for sequence in events {
                match tracker.observe("r", sequence).await.unwrap() {
                    Observation::Apply => {
                        assert!(tracker.commit("r", sequence).await.unwrap());
                        applied.push(sequence);
                        // The held events that now follow, in order.
                        for (next, ()) in buffer.release("r", sequence) {
                            assert!(tracker.commit("r", next).await.unwrap());
                            applied.push(next);
                        }
                    }
                    Observation::Stale { .. } => {}
                    Observation::Gap { expected, got } => {
                        let held = buffer.hold("r", expected, got, (), now);
                        assert!(matches!(held, Held::Held | Held::Duplicate));
                    }
                }
            }
            applied
        });
        prop_assert_eq!(applied, (1..=n).collect::<Vec<_>>());
    }
}

#[test]
fn a_million_far_future_numbers_keep_the_buffer_bounded() {
    let mut buffer = ReorderBuffer::new(Duration::from_secs(60));
    let now = Instant::now();
    let mut refused = 0u64;
    for sequence in 0..1_000_000u64 {
        // Numbers spread far ahead and within reach, across 1,000 resources.
        let resource = format!("r{}", sequence % 1_000);
        let ahead = if sequence % 2 == 0 {
            u64::MAX / 2
        } else {
            2 + (sequence / 1_000) % 1_000
        };
        if let Held::Refused(_) = buffer.hold(&resource, 2, ahead, [0u8; 16], now) {
            refused += 1;
        }
        assert!(buffer.len() <= DEFAULT_MAX_HELD);
    }
    assert_eq!(buffer.len(), DEFAULT_MAX_HELD);
    assert!(refused >= 1_000_000 - DEFAULT_MAX_HELD as u64);
}

/// Every SQL position store opens by path or URL with the default table,
/// and a second opening finds what the first kept.
#[tokio::test]
async fn sql_sequence_stores_open_by_path_or_url_and_keep_their_positions() {
    let dir = support::TempDir::new("sequences");
    let path = dir.path().join("sequences.db");
    let resource = support::unique("order");
    let by_path = SqliteSequences::open(&path).await.unwrap();
    assert!(by_path.advance(&resource, 3).await.unwrap());
    let by_url = SqliteSequences::connect(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    assert_eq!(by_url.position(&resource).await.unwrap(), Some(3));
    assert!(!by_url.advance(&resource, 3).await.unwrap());

    let server = support::postgres();
    let first = PostgresSequences::connect(&server.url()).await.unwrap();
    assert!(first.advance(&resource, 5).await.unwrap());
    let second = PostgresSequences::connect(&server.url()).await.unwrap();
    assert_eq!(second.position(&resource).await.unwrap(), Some(5));
}
