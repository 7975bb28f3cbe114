//! The SQL outboxes' batched writes: enqueues and attempts' records that
//! arrive together share one transaction (group commit), and each caller
//! still gets its own outcome, only once it is durable.

#[path = "support/outbox_backends.rs"]
mod outbox_backends;
mod support;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hooklatch::sender::OutboxError;
use hooklatch::sender::PostgresOutbox;
use hooklatch::sender::outbox::{DeliveryState, EndpointHealth, HealthChange};
use hooklatch::sender::outbox::{DeliveryStore, Taken};
use hooklatch::sender::rules::{Attempt, Final, Step};
use hooklatch::trace::TraceParent;
use outbox_backends::{Backend, postgres, sqlite};
use sqlx::AssertSqlSafe;

const SMALL: &[u8] = b"{}";
const LARGE: &[u8] = &[b'x'; 200];
const LEASE: Duration = Duration::from_secs(60);

/// Leases every due delivery of `endpoint`.
async fn take_all<S: DeliveryStore>(store: &S, endpoint: &str) -> Vec<Taken> {
    store
        .take_due(endpoint, SystemTime::now(), 10_000, LEASE)
        .await
        .unwrap()
        .taken
}

fn delivered(number: u32, excerpt: &[u8]) -> Attempt {
    let mut attempt = Attempt::new(number, SystemTime::now(), Ok(200));
    attempt.excerpt = excerpt.to_vec();
    attempt
}

/// Records `taken` as delivered with `excerpt`; `None` if the lease was
/// lost.
async fn finish_delivered<S: DeliveryStore>(
    store: &S,
    taken: &Taken,
    excerpt: &[u8],
) -> Result<Option<EndpointHealth>, OutboxError> {
    let step = Step::Done(Final::Delivered);
    let change = Some(HealthChange::Succeeded);
    match store
        .finish(taken, &delivered(1, excerpt), step, change)
        .await
    {
        Ok(health) => Ok(Some(health)),
        Err(OutboxError::LeaseLost) => Ok(None),
        Err(error) => Err(error),
    }
}

/// 300 enqueues at once: 50 ids on each of 3 endpoints, each sent twice
/// with different bodies, every other one in a trace of its own. Of each
/// pair exactly one is added, and the body and the trace kept are those of
/// the caller told so.
async fn enqueues_sharing_a_batch_each_get_their_own_outcome<S>(store: &S)
where
    S: DeliveryStore + Clone + 'static,
{
    let tasks: Vec<_> = (0..300)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                let (endpoint, id) = (format!("e{}", n % 3), format!("evt_{}", n / 3 % 50));
                let body = format!("body {n}");
                let enqueue = store.enqueue(&endpoint, &id, body.as_bytes(), SystemTime::now());
                let added = match trace_of(n) {
                    Some(trace) => trace.scope(enqueue).await,
                    None => enqueue.await,
                }
                .unwrap();
                ((endpoint, id), body, added)
            })
        })
        .collect();
    let mut added: HashMap<(String, String), Vec<String>> = HashMap::new();
    for task in tasks {
        let (key, body, was_added) = task.await.unwrap();
        let bodies = added.entry(key).or_default();
        if was_added {
            bodies.push(body);
        }
    }
    assert_eq!(added.len(), 150);
    let mut taken = HashMap::new();
    for endpoint in ["e0", "e1", "e2"] {
        for delivery in take_all(store, endpoint).await {
            taken.insert((delivery.endpoint.clone(), delivery.id.clone()), delivery);
        }
    }
    for ((endpoint, id), bodies) in added {
        assert_eq!(bodies.len(), 1, "{endpoint}/{id} added once: {bodies:?}");
        let stored = store.delivery(&endpoint, &id).await.unwrap().unwrap();
        assert_eq!(stored.body, bodies[0].as_bytes(), "{endpoint}/{id}");
        let n: u64 = bodies[0]["body ".len()..].parse().unwrap();
        assert_eq!(taken[&(endpoint, id)].trace, trace_of(n));
    }
}

/// The trace enqueue `n` runs in: one of its own for every other one.
fn trace_of(n: u64) -> Option<TraceParent> {
    n.is_multiple_of(2)
        .then(|| TraceParent::parse(&format!("00-{:032x}-{:016x}-01", n + 1, n + 1)).unwrap())
}

/// 60 leased deliveries recorded at once, every third also by a holder of
/// a lease that is not the delivery's: the holders of the lease are told
/// it held, the others that it did not, and each delivery has exactly one
/// attempt.
async fn records_sharing_a_batch_each_get_their_own_outcome<S>(store: &S)
where
    S: DeliveryStore + Clone + 'static,
{
    for n in 0..60 {
        let id = format!("evt_{n}");
        store
            .enqueue("e", &id, SMALL, SystemTime::now())
            .await
            .unwrap();
    }
    let taken = take_all(store, "e").await;
    assert_eq!(taken.len(), 60);
    let mut tasks = Vec::new();
    for (n, taken) in taken.into_iter().enumerate() {
        let mut stale = taken.clone();
        stale.token = format!("not-{}", taken.token);
        let copies = if n % 3 == 0 {
            vec![(taken, true), (stale, false)]
        } else {
            vec![(taken, true)]
        };
        for (taken, holds) in copies {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let recorded = finish_delivered(&store, &taken, SMALL).await.unwrap();
                (taken.id, holds, recorded.is_some())
            }));
        }
    }
    for task in tasks {
        let (id, holds, recorded) = task.await.unwrap();
        assert_eq!(recorded, holds, "{id}: recorded only by the lease's holder");
    }
    for n in 0..60 {
        let stored = store
            .delivery("e", &format!("evt_{n}"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.state, DeliveryState::Delivered);
        assert_eq!(stored.attempts.len(), 1, "evt_{n}");
    }
}

/// A write the database refuses fails only its own caller and keeps
/// nothing, for enqueues and for records alike: its batch rolls back and
/// the other writes in it are tried again one at a time. The store refuses
/// (`injected failure`) bodies and excerpts of 100 bytes or more; some
/// callers give up at once, which breaks no batch.
async fn a_refused_write_fails_only_its_caller_and_keeps_nothing<S>(store: &S)
where
    S: DeliveryStore + Clone + 'static,
{
    let tasks: Vec<_> = (0..200)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                let id = format!("evt_{n}");
                let body = if n % 20 == 0 { LARGE } else { SMALL };
                let enqueue = store.enqueue("e", &id, body, SystemTime::now());
                if n % 25 == 1 {
                    let _ = tokio::time::timeout(Duration::ZERO, enqueue).await;
                    return (id, None);
                }
                let answer = enqueue.await;
                (id, Some(answer))
            })
        })
        .collect();
    let mut failed = 0;
    for task in tasks {
        let (id, answer) = task.await.unwrap();
        let stored = store.delivery("e", &id).await.unwrap();
        match answer {
            Some(Ok(added)) => {
                assert!(added, "{id}");
                assert!(stored.is_some(), "{id} was answered added");
            }
            Some(Err(error)) => {
                failed += 1;
                let n: usize = id.trim_start_matches("evt_").parse().unwrap();
                assert_eq!(n % 20, 0, "{id} was not refused: {error}");
                assert!(error.to_string().contains("injected failure"), "{error}");
                assert!(stored.is_none(), "{id} failed but was stored");
            }
            None => {}
        }
    }
    assert_eq!(failed, 10, "exactly the large bodies failed");

    for n in 0..100 {
        let id = format!("evt_{n}");
        assert!(
            store
                .enqueue("r", &id, SMALL, SystemTime::now())
                .await
                .unwrap()
        );
    }
    let taken = take_all(store, "r").await;
    let tasks: Vec<_> = taken
        .into_iter()
        .enumerate()
        .map(|(n, taken)| {
            let store = store.clone();
            tokio::spawn(async move {
                let excerpt = if n % 10 == 0 { LARGE } else { SMALL };
                let answer = finish_delivered(&store, &taken, excerpt).await;
                (taken, excerpt.len(), answer)
            })
        })
        .collect();
    let mut failed = 0;
    for task in tasks {
        let (taken, excerpt, answer) = task.await.unwrap();
        let stored = store.delivery("r", &taken.id).await.unwrap().unwrap();
        match answer {
            Ok(recorded) => {
                assert!(recorded.is_some(), "{}", taken.id);
                assert_eq!(stored.state, DeliveryState::Delivered, "{}", taken.id);
                assert_eq!(stored.attempts.len(), 1, "{}", taken.id);
            }
            Err(error) => {
                failed += 1;
                assert_eq!(
                    excerpt,
                    LARGE.len(),
                    "{} was not refused: {error}",
                    taken.id
                );
                assert!(error.to_string().contains("injected failure"), "{error}");
                assert_eq!(stored.state, DeliveryState::Pending, "{}", taken.id);
                assert!(stored.attempts.is_empty(), "{}: no record kept", taken.id);
                // The lease is untouched: its holder records the attempt.
                let again = finish_delivered(store, &taken, SMALL).await.unwrap();
                assert!(again.is_some(), "{}", taken.id);
            }
        }
    }
    assert_eq!(failed, 10, "exactly the large excerpts failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_enqueues_sharing_a_batch_each_get_their_own_outcome() {
    let backend = sqlite();
    let store = backend.open().await;
    enqueues_sharing_a_batch_each_get_their_own_outcome(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_enqueues_sharing_a_batch_each_get_their_own_outcome() {
    let store = postgres().open().await;
    enqueues_sharing_a_batch_each_get_their_own_outcome(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_records_sharing_a_batch_each_get_their_own_outcome() {
    let backend = sqlite();
    let store = backend.open().await;
    records_sharing_a_batch_each_get_their_own_outcome(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_records_sharing_a_batch_each_get_their_own_outcome() {
    let store = postgres().open().await;
    records_sharing_a_batch_each_get_their_own_outcome(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_a_refused_outbox_write_fails_only_its_caller_and_keeps_nothing() {
    let backend = sqlite();
    let store = backend.open().await;
    for statement in [
        "CREATE TRIGGER small_bodies BEFORE INSERT ON hooklatch_deliveries \
         WHEN length(NEW.body) >= 100 BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
        "CREATE TRIGGER small_excerpts BEFORE INSERT ON hooklatch_delivery_attempts \
         WHEN length(NEW.excerpt) >= 100 BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
    ] {
        sqlx::query(statement).execute(store.pool()).await.unwrap();
    }
    a_refused_write_fails_only_its_caller_and_keeps_nothing(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_refused_outbox_write_fails_only_its_caller_and_keeps_nothing() {
    let backend = postgres();
    let (store, prefix) = (backend.open().await, &backend.prefix);
    let pool = store.pool().clone();
    for statement in [
        "CREATE FUNCTION {prefix}_refuse_body() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN IF octet_length(NEW.body) >= 100 THEN \
         RAISE EXCEPTION 'injected failure' USING ERRCODE = 'check_violation'; END IF; \
         RETURN NEW; END $$",
        "CREATE TRIGGER small_bodies BEFORE INSERT ON {prefix}_deliveries \
         FOR EACH ROW EXECUTE FUNCTION {prefix}_refuse_body()",
        "CREATE FUNCTION {prefix}_refuse_excerpt() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN IF octet_length(NEW.excerpt) >= 100 THEN \
         RAISE EXCEPTION 'injected failure' USING ERRCODE = 'check_violation'; \
         END IF; RETURN NEW; END $$",
        "CREATE TRIGGER small_excerpts BEFORE INSERT ON {prefix}_delivery_attempts \
         FOR EACH ROW EXECUTE FUNCTION {prefix}_refuse_excerpt()",
    ] {
        sqlx::query(AssertSqlSafe(statement.replace("{prefix}", prefix)))
            .execute(&pool)
            .await
            .unwrap();
    }
    a_refused_write_fails_only_its_caller_and_keeps_nothing(&store).await;
}

/// A refusal that is not one row's fault (here a lock timeout: another
/// transaction holds the table) fails a batch as one. Trying each job
/// alone would wait for the lock once per job: 24 enqueues would hold the
/// outbox's writers for about 24 lock timeouts instead of one or two. The
/// bound is counted in the server's own lock timeouts, half of what job by
/// job would take, so only a machine that adds tens of seconds to a few
/// statements could fail it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_batch_refused_by_a_lock_timeout_fails_as_one_not_job_by_job() {
    let server = support::postgres();
    let prefix = support::unique("lock");
    let options: sqlx::postgres::PgConnectOptions = server.url().parse().unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_with(options.options([("lock_timeout", "2s")]))
        .await
        .unwrap();
    let store = PostgresOutbox::new(pool.clone(), &prefix).unwrap();
    store.migrate().await.unwrap();
    let mut holder = pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "LOCK TABLE {prefix}_deliveries IN ACCESS EXCLUSIVE MODE"
    )))
    .execute(&mut *holder)
    .await
    .unwrap();

    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..24)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .enqueue("e", &format!("evt_{n}"), SMALL, SystemTime::now())
                    .await
            })
        })
        .collect();
    for task in tasks {
        let answer = task.await.unwrap();
        assert!(answer.is_err(), "the table is locked: {answer:?}");
    }
    let took = started.elapsed();
    holder.rollback().await.unwrap();
    let lock_timeout = Duration::from_secs(2);
    assert!(
        took < 12 * lock_timeout,
        "24 enqueues refused by one lock took {took:?}: each waited for the lock alone"
    );
    assert!(
        store
            .enqueue("e", "after", SMALL, SystemTime::now())
            .await
            .unwrap()
    );
}

fn at_millis(millis: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(millis)
}

/// A health change an attempt reports: `Some(at)` a failure at `at`,
/// `None` a success.
type Change = Option<SystemTime>;

/// A batch's changes, the failing time each caller is told, and the one
/// the store keeps.
type Round<'a> = (&'a [Change], &'a [Option<SystemTime>], Option<SystemTime>);

/// Records one attempt of each of `changes` (on endpoint `endpoint`, ids
/// from `round`) in one batch, and returns what each caller was told of
/// the endpoint's failing time. The batch is made by holding both writers
/// on rows locked elsewhere while the records queue in order; that it was
/// one transaction is checked by the rows' `xmin`.
async fn in_one_batch(
    store: &PostgresOutbox,
    pool: &sqlx::PgPool,
    prefix: &str,
    (endpoint, round): (&str, usize),
    changes: &[Change],
) -> Vec<Option<SystemTime>> {
    let held_endpoint = format!("held_{round}");
    for id in ["hold_a", "hold_b"] {
        store
            .enqueue(&held_endpoint, id, SMALL, SystemTime::now())
            .await
            .unwrap();
    }
    let ids: Vec<String> = (0..changes.len())
        .map(|n| format!("r{round}_{n}"))
        .collect();
    for id in &ids {
        store
            .enqueue(endpoint, id, SMALL, SystemTime::now())
            .await
            .unwrap();
    }
    let holds = take_all(store, &held_endpoint).await;
    let taken: HashMap<String, Taken> = take_all(store, endpoint)
        .await
        .into_iter()
        .map(|taken| (taken.id.clone(), taken))
        .collect();

    let mut blocker = pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT 1 FROM {prefix}_deliveries WHERE endpoint = '{held_endpoint}' FOR UPDATE"
    )))
    .execute(&mut *blocker)
    .await
    .unwrap();
    // This test's records waiting for the rows the blocker holds.
    let waiting_for_locks = || {
        let pool = pool.clone();
        let query = format!(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND query LIKE '%{prefix}_deliveries%'"
        );
        async move {
            sqlx::query_scalar::<_, i64>(AssertSqlSafe(query))
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let mut held = Vec::new();
    for (n, hold) in holds.into_iter().enumerate() {
        let store = store.clone();
        held.push(tokio::spawn(async move {
            finish_delivered(&store, &hold, SMALL).await.unwrap()
        }));
        wait_for(|| async { waiting_for_locks().await > n as i64 }).await;
    }

    let mut answers = Vec::new();
    for (id, failed_at) in ids.iter().zip(changes) {
        let (store, taken, failed_at) = (store.clone(), taken[id].clone(), *failed_at);
        answers.push(async move {
            let (attempt, change, step) = match failed_at {
                Some(at) => (
                    Attempt::new(1, at, Ok(500)),
                    HealthChange::Failed { at },
                    Step::Done(Final::Dead),
                ),
                None => (
                    delivered(1, SMALL),
                    HealthChange::Succeeded,
                    Step::Done(Final::Delivered),
                ),
            };
            store.finish(&taken, &attempt, step, Some(change)).await
        });
    }
    // One poll queues them in this order: each `finish` queues its record
    // on its first poll, and `join_all` polls them first in turn.
    let mut answers = std::pin::pin!(futures_util::future::join_all(answers));
    assert!(futures_util::poll!(answers.as_mut()).is_pending());
    blocker.commit().await.unwrap();
    for hold in held {
        assert!(hold.await.unwrap().is_some());
    }
    let told: Vec<_> = answers
        .await
        .into_iter()
        .map(|answer| answer.unwrap().failing_since)
        .collect();
    let transactions: HashSet<String> = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT xmin::text FROM {prefix}_deliveries WHERE event_id LIKE 'r{round}\\_%'"
    )))
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    assert_eq!(transactions.len(), 1, "round {round} shared one batch");
    told
}

/// Records of one endpoint committed together in one transaction: each
/// caller is told the health after its own attempt, as if they had been
/// recorded one after another, and the store keeps the last. Four
/// batches, from a healthy endpoint: failure, success, failure; then two
/// failures, the second earlier than the saved time; then success,
/// failure, success; then failures only, all later than the saved time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_records_in_one_batch_each_see_the_health_after_their_own_attempt() {
    let backend = postgres();
    let (store, prefix) = (backend.open().await, &backend.prefix);
    let pool = store.pool().clone();
    let t = at_millis;
    let rounds: [Round; 4] = [
        (
            &[Some(t(3_000)), None, Some(t(5_000))],
            &[Some(t(3_000)), None, Some(t(5_000))],
            Some(t(5_000)),
        ),
        (
            &[Some(t(6_000)), Some(t(2_000))],
            &[Some(t(5_000)), Some(t(2_000))],
            Some(t(2_000)),
        ),
        (
            &[None, Some(t(7_000)), None],
            &[None, Some(t(7_000)), None],
            None,
        ),
        (
            &[Some(t(8_000)), Some(t(9_000))],
            &[Some(t(8_000)), Some(t(8_000))],
            Some(t(8_000)),
        ),
    ];
    for (round, (changes, told, kept)) in rounds.into_iter().enumerate() {
        let answers = in_one_batch(&store, &pool, prefix, ("e", round), changes).await;
        assert_eq!(answers, told, "round {round}: each caller's health");
        let saved = store.health("e").await.unwrap();
        assert_eq!(saved.failing_since, kept, "round {round}: the health kept");
    }
}

async fn wait_for<F, Fut>(condition: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..500 {
        if condition().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting");
}

/// 64 callers enqueue new deliveries and record leased ones while the
/// server stops (`-m immediate`, as a crash) and comes back: every enqueue
/// answered added is stored, and every record answered is kept, with its
/// attempt. Callers answered with an error are free to try again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_stopped_mid_batch_loses_no_enqueue_or_record_it_answered() {
    let server = Arc::new(support::Postgres::start());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_millis(300))
        .connect_lazy(&server.url())
        .unwrap();
    let store = PostgresOutbox::new(pool, "hooklatch").unwrap();
    // The first connection may take longer than the pool's 300 ms on a
    // loaded machine: tried again, not failed.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while let Err(error) = store.migrate().await {
        assert!(
            std::time::Instant::now() < deadline,
            "no connection: {error}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for n in 0..2_000 {
        let id = format!("leased_{n}");
        store
            .enqueue("e", &id, SMALL, SystemTime::now())
            .await
            .unwrap();
    }
    let leased = Arc::new(std::sync::Mutex::new(take_all(&store, "e").await));
    assert_eq!(leased.lock().unwrap().len(), 2_000);

    let answered = Arc::new(AtomicUsize::new(0));
    let next_new = Arc::new(AtomicUsize::new(0));
    let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let callers: Vec<_> = (0..64)
        .map(|caller| {
            let (store, leased) = (store.clone(), leased.clone());
            let (answered, next_new) = (answered.clone(), next_new.clone());
            let stopped = stopped.clone();
            tokio::spawn(async move {
                let (mut added, mut recorded, mut errors) = (Vec::new(), Vec::new(), 0);
                loop {
                    // Past 600 answers, wait for the stop: however slowly
                    // it comes, work is left for the outage.
                    while answered.load(Ordering::SeqCst) >= 600 && !stopped.load(Ordering::SeqCst)
                    {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    if caller % 2 == 0 {
                        let n = next_new.fetch_add(1, Ordering::SeqCst);
                        if n >= 2_000 {
                            break;
                        }
                        let id = format!("new_{n}");
                        match store.enqueue("e", &id, SMALL, SystemTime::now()).await {
                            Ok(true) => added.push(id),
                            Ok(false) => panic!("{id} is new"),
                            Err(_) => errors += 1,
                        }
                    } else {
                        let Some(taken) = leased.lock().unwrap().pop() else {
                            break;
                        };
                        match finish_delivered(&store, &taken, SMALL).await {
                            Ok(Some(_)) => recorded.push(taken.id),
                            Ok(None) => panic!("{}: the lease holds", taken.id),
                            Err(_) => errors += 1,
                        }
                    }
                    answered.fetch_add(1, Ordering::SeqCst);
                }
                (added, recorded, errors)
            })
        })
        .collect();
    wait_for(|| async { answered.load(Ordering::SeqCst) >= 600 }).await;
    let stopper = server.clone();
    tokio::task::spawn_blocking(move || stopper.stop_immediately())
        .await
        .unwrap();
    stopped.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let restarter = server.clone();
    tokio::task::spawn_blocking(move || restarter.start_again())
        .await
        .unwrap();

    let (mut added, mut recorded, mut errors) = (Vec::new(), Vec::new(), 0);
    for caller in callers {
        let (a, r, e) = caller.await.unwrap();
        added.extend(a);
        recorded.extend(r);
        errors += e;
    }
    assert!(
        errors > 0,
        "the server went down while callers were waiting"
    );
    for id in &added {
        let stored = store.delivery("e", id).await.unwrap();
        assert!(stored.is_some(), "{id} was answered added");
    }
    for id in &recorded {
        let stored = store.delivery("e", id).await.unwrap().unwrap();
        assert_eq!(
            stored.state,
            DeliveryState::Delivered,
            "{id} was answered recorded"
        );
        assert_eq!(stored.attempts.len(), 1, "{id}");
    }
}
