//! The outbox suite, stamped over every delivery store (memory, SQLite,
//! Postgres, Redis on one server and as a cluster) against real servers
//! (see tests/support): restarts (graceful and a crash), two dispatchers
//! on one store, replay, purge, shared endpoint health and the
//! per-dispatcher concurrency limit.

#[path = "support/receiver.rs"]
mod receiver;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use hooklatch::sender::outbox::{DeliveryState, DisableReason, EndpointHealth};
use hooklatch::sender::outbox::{DeliveryStore, Wanted};
use hooklatch::sender::rules::{Attempt, Final, Step};
use hooklatch::sender::transport::{Response, TransportError};
use hooklatch::sender::{Disabled, Dispatcher, Policy, RedisOutbox, Transport};
use hooklatch::trace::TraceParent;
use hooklatch::verify::{Scheme, Signer};
use receiver::*;

#[path = "support/outbox_backends.rs"]
mod backends;
use backends::*;

/// A dispatcher stopped while every delivery is failing; a new one on the
/// same store, once the receiver recovers, delivers each exactly once.
async fn graceful_restart(backend: impl Backend) {
    let receiver = Receiver::answering(500);
    let first = dispatcher(backend.open().await, &receiver);
    add(&first, every(Duration::from_millis(50), 1000)).await;
    let ids = ids(30);
    for id in &ids {
        assert!(first.send(ENDPOINT, id, id.as_bytes()).await.expect("send"));
    }
    let running = first.start();
    wait_until("every delivery has failed twice", || {
        let answered = receiver.answered();
        let ids = &ids;
        async move {
            ids.iter()
                .all(|id| answered.iter().filter(|(seen, _)| seen == id).count() >= 2)
        }
    })
    .await;
    running.stop().await;
    let after_stop = receiver.answered().len();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        receiver.answered().len(),
        after_stop,
        "a stopped dispatcher sends nothing"
    );
    drop(first);

    receiver.set_status(200);
    let store = backend.open().await;
    let second = dispatcher(store.clone(), &receiver);
    add(&second, every(Duration::from_millis(50), 1000)).await;
    let running = second.start();
    wait_until("every delivery is delivered", || {
        all_in(&store, &ids, DeliveryState::Delivered)
    })
    .await;
    running.stop().await;

    let successes = receiver.successes();
    for id in &ids {
        assert_eq!(successes.get(id), Some(&1), "{id} delivered once");
        let stored = store.delivery(ENDPOINT, id).await.unwrap().unwrap();
        let numbers: Vec<u32> = stored.attempts.iter().map(|a| a.number).collect();
        assert_eq!(
            numbers,
            (1..=numbers.len() as u32).collect::<Vec<_>>(),
            "{id}"
        );
        let (last, failures) = stored.attempts.split_last().unwrap();
        assert_eq!(last.result, Ok(200));
        assert!(failures.len() >= 2 && failures.iter().all(|a| a.result == Ok(500)));
        assert_eq!(last.excerpt, b"ok");
    }
}

/// Attempts may run 4 s: seeing four of them under way never takes that
/// long, however slow the machine, so none times out before the crash.
const CRASH_LEASE: Duration = Duration::from_secs(6);

fn crash_policy() -> Policy {
    every(Duration::from_millis(50), 10)
        .with_concurrency(4)
        .with_attempt_timeout(Duration::from_secs(4))
}

/// The process running a dispatcher dies with attempts in flight: a new
/// dispatcher takes those deliveries again once their leases end, and
/// every delivery ends delivered exactly once in the store.
fn crash_mid_attempt<B: Backend>(backend: B) {
    let backend = Arc::new(backend);
    let receiver = Receiver::answering(200);
    receiver.set_delay(Duration::from_secs(30));
    let ids = ids(12);

    let crashed = {
        let (backend, receiver, ids) = (backend.clone(), receiver.clone(), ids.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                // Attempts may run 4 s, so the crash surely cuts them off.
                let first = dispatcher(backend.open().await, &receiver)
                    .with_lease(CRASH_LEASE)
                    .expect("lease");
                add(&first, crash_policy()).await;
                for id in &ids {
                    first.send(ENDPOINT, id, id.as_bytes()).await.expect("send");
                }
                // Dropping the handle leaves the loop running on this runtime.
                drop(first.start());
                wait_until("four attempts hang", || {
                    let in_flight = receiver.in_flight();
                    async move { in_flight == 4 }
                })
                .await;
            });
            // The crash: every task on the runtime is dropped mid-attempt.
            runtime.shutdown_timeout(Duration::from_secs(5));
        })
    };
    crashed.join().expect("first dispatcher");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        assert_eq!(receiver.in_flight(), 0, "the crash ended the attempts");
        assert!(
            receiver.answered().is_empty(),
            "nothing was answered before the crash"
        );
        receiver.set_delay(Duration::ZERO);
        let store = backend.open().await;
        let second = dispatcher(store.clone(), &receiver)
            .with_lease(CRASH_LEASE)
            .expect("lease");
        add(&second, crash_policy()).await;
        let running = second.start();
        wait_until("every delivery is delivered", || {
            all_in(&store, &ids, DeliveryState::Delivered)
        })
        .await;
        running.stop().await;
        for id in &ids {
            let stored = store.delivery(ENDPOINT, id).await.unwrap().unwrap();
            assert_eq!(
                stored.attempts.len(),
                1,
                "{id}: the lost attempt is not recorded"
            );
            assert_eq!(stored.attempts[0].result, Ok(200));
        }
        assert_eq!(receiver.successes().len(), ids.len());
        assert!(receiver.successes().values().all(|&n| n == 1));
        // The four cut-off attempts reached the receiver and were sent again.
        assert_eq!(receiver.started(), ids.len() + 4);
    });
}

/// Two dispatchers on one store at once: each delivery is attempted once.
async fn two_dispatchers_share_a_store(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    receiver.set_delay(Duration::from_millis(2));
    let ids = ids(300);
    // A lease far longer than any attempt: a second attempt would then
    // mean two dispatchers took the same row, not that a lease ran out on
    // a busy machine.
    let lease = Duration::from_secs(10);
    let (a, b) = (
        dispatcher(backend.open().await, &receiver)
            .with_lease(lease)
            .expect("lease"),
        dispatcher(backend.open().await, &receiver)
            .with_lease(lease)
            .expect("lease"),
    );
    for dispatcher in [&a, &b] {
        add(dispatcher, every(Duration::from_millis(50), 3)).await;
    }
    let (running_a, running_b) = (a.start(), b.start());
    let (first_half, second_half) = ids.split_at(150);
    let send_a = async {
        for id in first_half {
            a.send(ENDPOINT, id, id.as_bytes()).await.expect("send");
        }
    };
    let send_b = async {
        for id in second_half {
            b.send(ENDPOINT, id, id.as_bytes()).await.expect("send");
        }
    };
    tokio::join!(send_a, send_b);
    let store = backend.open().await;
    wait_until("every delivery is delivered", || {
        all_in(&store, &ids, DeliveryState::Delivered)
    })
    .await;
    running_a.stop().await;
    running_b.stop().await;
    assert_eq!(receiver.started(), ids.len(), "no delivery attempted twice");
    assert_eq!(receiver.successes().len(), ids.len());
}

/// A delivery out of attempts is dead, listed, and a replay sends it again
/// from the start of its schedule; the attempts before it are kept.
async fn dead_deliveries_replay(backend: impl Backend) {
    let receiver = Receiver::answering(503);
    let store = backend.open().await;
    let dispatcher = dispatcher(store.clone(), &receiver);
    add(&dispatcher, every(Duration::from_millis(20), 2)).await;
    dispatcher.send(ENDPOINT, "msg_dead", b"{}").await.unwrap();
    dispatcher.send(ENDPOINT, "msg_fine", b"{}").await.unwrap();
    let running = dispatcher.start();
    wait_until("both are dead", || async {
        dispatcher.dead(ENDPOINT, 10).await.unwrap().len() == 2
    })
    .await;
    assert_eq!(
        dispatcher.dead(ENDPOINT, 1).await.unwrap().len(),
        1,
        "limit"
    );
    assert!(
        !dispatcher.replay(ENDPOINT, "msg_unknown").await.unwrap(),
        "nothing to replay"
    );
    receiver.set_status(204);
    assert!(dispatcher.replay(ENDPOINT, "msg_dead").await.unwrap());
    wait_until("the replay is delivered", || async {
        state_of(&store, "msg_dead").await == DeliveryState::Delivered
    })
    .await;
    assert!(
        !dispatcher.replay(ENDPOINT, "msg_dead").await.unwrap(),
        "a delivered event is not replayed"
    );
    running.stop().await;
    let stored = store.delivery(ENDPOINT, "msg_dead").await.unwrap().unwrap();
    let results: Vec<_> = stored
        .attempts
        .iter()
        .map(|a| (a.number, a.result.clone()))
        .collect();
    assert_eq!(results, [(1, Ok(503)), (2, Ok(503)), (3, Ok(204))]);
    assert_eq!(stored.attempts[1].waited, Duration::from_millis(20));
    assert_eq!(
        stored.attempts[2].waited,
        Duration::ZERO,
        "the schedule starts over"
    );
    assert_eq!(dispatcher.dead(ENDPOINT, 10).await.unwrap(), ["msg_fine"]);
    assert_eq!(stored.due_at, None);
    assert_eq!(stored.body, b"{}");
}

/// An endpoint disabled by 410 stays disabled for a new dispatcher on the
/// same store, until it is enabled, which is saved too.
async fn disabled_stays_disabled_across_a_restart(backend: impl Backend) {
    let receiver = Receiver::answering(410);
    let first = dispatcher(backend.open().await, &receiver);
    add(&first, every(Duration::from_millis(20), 5)).await;
    first.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    let running = first.start();
    wait_until("disabled", || async {
        first.disabled(ENDPOINT).unwrap() == Some(DisableReason::Gone)
    })
    .await;
    running.stop().await;
    first.send(ENDPOINT, "msg_2", b"{}").await.unwrap();

    let second = dispatcher(backend.open().await, &receiver);
    add(&second, every(Duration::from_millis(20), 5)).await;
    assert_eq!(
        second.disabled(ENDPOINT).unwrap(),
        Some(DisableReason::Gone)
    );
    let running = second.start();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        receiver.answered().len(),
        1,
        "nothing sent to a disabled endpoint"
    );
    receiver.set_status(200);
    second.enable(ENDPOINT).await.unwrap();
    wait_until("msg_2 delivered", || async {
        receiver.successes().contains_key("msg_2")
    })
    .await;
    running.stop().await;

    let third = dispatcher(backend.open().await, &receiver);
    add(&third, every(Duration::from_millis(20), 5)).await;
    assert_eq!(
        third.disabled(ENDPOINT).unwrap(),
        None,
        "enabling was saved"
    );
}

/// How long an endpoint has failed carries over a restart: the new
/// dispatcher disables it counting from the first failure before it.
async fn failing_time_carries_over_a_restart(backend: impl Backend) {
    let receiver = Receiver::answering(500);
    let policy =
        || every(Duration::from_millis(30), 1000).with_disable_after(Some(Duration::from_secs(2)));
    let store = backend.open().await;
    let first = dispatcher(store.clone(), &receiver);
    add(&first, policy()).await;
    first.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    let running = first.start();
    wait_until("three failures", || {
        let failures = receiver.answered().len();
        async move { failures >= 3 }
    })
    .await;
    running.stop().await;
    let since = store.health(ENDPOINT).await.unwrap().failing_since;
    assert!(since.is_some(), "the failing time was saved");

    let told: Arc<Mutex<Vec<Disabled>>> = Arc::default();
    let second = {
        let told = told.clone();
        dispatcher(backend.open().await, &receiver)
            .on_disable(move |disabled| told.lock().unwrap().push(disabled.clone()))
    };
    add(&second, policy()).await;
    let running = second.start();
    wait_until("disabled", || async {
        second.disabled(ENDPOINT).unwrap().is_some()
    })
    .await;
    running.stop().await;
    let told = told.lock().unwrap().clone();
    assert_eq!(told.len(), 1);
    assert_eq!(
        told[0].failing_since, since,
        "counted from before the restart"
    );
    let saved = store.health(ENDPOINT).await.unwrap();
    assert_eq!(
        saved.disabled,
        Some(DisableReason::NoSuccessFor(Duration::from_secs(2)))
    );
}

/// Purging forgets finished deliveries and their attempts, and keeps the
/// pending and dead ones.
async fn purge_keeps_pending_and_dead(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    let store = backend.open().await;
    let dispatcher = dispatcher(store.clone(), &receiver);
    add(&dispatcher, every(Duration::from_millis(20), 2)).await;
    for id in ["msg_1", "msg_2"] {
        dispatcher.send(ENDPOINT, id, b"{}").await.unwrap();
    }
    let running = dispatcher.start();
    wait_until("both delivered", || async {
        receiver.successes().len() == 2
    })
    .await;
    receiver.set_status(500);
    dispatcher.send(ENDPOINT, "msg_dead", b"{}").await.unwrap();
    wait_until("msg_dead is dead", || async {
        state_of(&store, "msg_dead").await == DeliveryState::Dead
    })
    .await;
    running.stop().await;
    dispatcher
        .send(ENDPOINT, "msg_pending", b"{}")
        .await
        .unwrap();

    assert_eq!(
        dispatcher.purge(Duration::from_secs(3600)).await.unwrap(),
        0,
        "nothing ended an hour ago"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(dispatcher.purge(Duration::ZERO).await.unwrap(), 2);
    for id in ["msg_1", "msg_2"] {
        assert_eq!(store.delivery(ENDPOINT, id).await.unwrap(), None, "{id}");
    }
    assert_eq!(state_of(&store, "msg_dead").await, DeliveryState::Dead);
    assert_eq!(
        state_of(&store, "msg_pending").await,
        DeliveryState::Pending
    );
    // A purged id is forgotten, attempts and all: it can be sent again.
    assert!(dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap());
    let again = store.delivery(ENDPOINT, "msg_1").await.unwrap().unwrap();
    assert!(again.attempts.is_empty());
}

/// One endpoint with 1,000 due deliveries does not hold back another's
/// single delivery: it goes out in the first poll, with the busy
/// endpoint's first attempts.
async fn a_busy_endpoint_does_not_starve_a_quiet_one(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    receiver.set_delay(Duration::from_millis(20));
    let store = backend.open().await;
    let dispatcher = dispatcher(store.clone(), &receiver);
    add(
        &dispatcher,
        every(Duration::from_millis(50), 3).with_concurrency(4),
    )
    .await;
    let signer = Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap();
    dispatcher
        .add_endpoint(
            "quiet",
            "https://quiet.example/",
            signer,
            every(Duration::from_millis(50), 3),
        )
        .await
        .unwrap();
    let now = SystemTime::now();
    for i in 0..1000 {
        assert!(
            store
                .enqueue(ENDPOINT, &format!("busy_{i}"), b"{}", now)
                .await
                .unwrap()
        );
    }
    assert!(store.enqueue("quiet", "quiet_1", b"{}", now).await.unwrap());
    let running = dispatcher.start();
    wait_until("quiet_1 is answered", || async {
        receiver.answered().iter().any(|(id, _)| id == "quiet_1")
    })
    .await;
    running.stop().await;
    let answered = receiver.answered();
    let at = answered.iter().position(|(id, _)| id == "quiet_1").unwrap();
    assert!(
        at < 5,
        "with the first poll's attempts, not after the busy ones: {at}"
    );
}

/// A take across more endpoints than one statement can name (three
/// parameters each: 12,000 is over SQLite's limit, 25,000 over
/// Postgres's) still leases each due delivery once.
async fn take_across_more_endpoints_than_one_statement_binds(backend: impl Backend, count: usize) {
    let store = backend.open().await;
    let now = SystemTime::now();
    let names: Vec<String> = (0..count).map(|n| format!("e{n}")).collect();
    for name in [&names[0], &names[count / 2], &names[count - 1]] {
        assert!(store.enqueue(name, "only", b"{}", now).await.unwrap());
    }
    let later = now + Duration::from_millis(1);
    let wanted: Vec<Wanted> = names.iter().map(|n| Wanted::new(n, 2, later)).collect();
    let found = store
        .take_due_across(&wanted, 100, Duration::from_secs(60))
        .await
        .unwrap();
    let mut taken: Vec<_> = found.taken.iter().map(|t| t.endpoint.clone()).collect();
    taken.sort();
    let mut expected = vec![
        names[0].clone(),
        names[count / 2].clone(),
        names[count - 1].clone(),
    ];
    expected.sort();
    assert_eq!(taken, expected);
}

#[tokio::test]
async fn sqlite_takes_across_more_endpoints_than_one_statement_binds() {
    take_across_more_endpoints_than_one_statement_binds(sqlite(), 12_000).await;
}

#[tokio::test]
async fn postgres_takes_across_more_endpoints_than_one_statement_binds() {
    take_across_more_endpoints_than_one_statement_binds(postgres(), 25_000).await;
}

/// The wanted endpoints of a partial-take test: `e0` to `e{count-2}`, then
/// `poison`, whose part of the take fails; `e0` and `poison` have a
/// delivery due.
async fn wanted_with_poison(store: &impl DeliveryStore, count: usize) -> Vec<Wanted> {
    let now = SystemTime::now();
    let mut names: Vec<String> = (0..count - 1).map(|n| format!("e{n}")).collect();
    names.push("poison".to_owned());
    for name in [&names[0], &names[count - 1]] {
        assert!(store.enqueue(name, "only", b"{}", now).await.unwrap());
    }
    let later = now + Duration::from_millis(1);
    names.iter().map(|n| Wanted::new(n, 2, later)).collect()
}

/// A take whose part for `poison` failed returns what the rest leased,
/// names `poison` unanswered, and leased nothing of it; a take once the
/// fault is gone leases `poison`'s delivery and not `e0`'s again.
async fn a_partial_take_keeps_what_it_leased(
    store: &impl DeliveryStore,
    wanted: &[Wanted],
    heal: impl Future<Output = ()>,
) {
    let lease = Duration::from_secs(60);
    let found = store
        .take_due_across(wanted, 100, lease)
        .await
        .expect("a take that leased something returns it");
    let taken: Vec<&str> = found.taken.iter().map(|t| t.endpoint.as_str()).collect();
    assert_eq!(taken, ["e0"], "what the other parts leased is returned");
    assert!(
        found.unanswered.iter().any(|name| name == "poison"),
        "{:?}",
        found.unanswered
    );
    assert!(!found.unanswered.iter().any(|name| name == "e0"));
    heal.await;
    let again = store.take_due_across(wanted, 100, lease).await.unwrap();
    let taken: Vec<&str> = again.taken.iter().map(|t| t.endpoint.as_str()).collect();
    assert_eq!(
        taken,
        ["poison"],
        "e0's delivery stays with its lease's holder"
    );
    assert!(again.unanswered.is_empty());
}

/// A take across more endpoints than one statement names (5,000) whose
/// second statement fails (a trigger refuses to lease `poison`'s delivery)
/// returns the first statement's leases rather than fail: they do not wait
/// out a lease no one holds.
#[tokio::test]
async fn sqlite_a_take_keeps_what_one_statement_leased_when_another_fails() {
    let dir = support::TempDir::new("partial");
    let store = hooklatch::sender::SqliteOutbox::open(dir.path().join("outbox.db"))
        .await
        .unwrap();
    let wanted = wanted_with_poison(&store, 6_000).await;
    sqlx::query(
        "CREATE TRIGGER refuse BEFORE UPDATE ON hooklatch_deliveries \
         WHEN NEW.endpoint = 'poison' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let heal = async {
        sqlx::query("DROP TRIGGER refuse")
            .execute(store.pool())
            .await
            .unwrap();
    };
    a_partial_take_keeps_what_it_leased(&store, &wanted, heal).await;
}

#[tokio::test]
async fn postgres_a_take_keeps_what_one_statement_leased_when_another_fails() {
    let backend = postgres();
    let store = backend.open().await;
    let wanted = wanted_with_poison(&store, 6_000).await;
    let prefix = &backend.prefix;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE FUNCTION {prefix}_refuse() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$; \
         CREATE TRIGGER refuse BEFORE UPDATE ON {prefix}_deliveries FOR EACH ROW \
         WHEN (NEW.endpoint = 'poison') EXECUTE FUNCTION {prefix}_refuse()"
    )))
    .execute(store.pool())
    .await
    .unwrap();
    let heal = async {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP TRIGGER refuse ON {prefix}_deliveries"
        )))
        .execute(store.pool())
        .await
        .unwrap();
    };
    a_partial_take_keeps_what_it_leased(&store, &wanted, heal).await;
}

/// The Redis shard of `endpoint`, as the key layout spreads endpoints:
/// FNV-1a (32 bits) over the name, modulo 16.
fn redis_shard(endpoint: &str) -> u32 {
    let hash = endpoint.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    hash % 16
}

/// A Redis take across endpoints in several shards, one of whose lease
/// scripts fails (`poison`'s health key holds a string, so the script's
/// `HMGET` is refused with `WRONGTYPE` before it writes), returns what the
/// other shards leased rather than fail.
async fn a_failed_shard_keeps_what_the_others_leased(backend: Redis) {
    let store = backend.open().await;
    assert_ne!(redis_shard("e0"), redis_shard("poison"));
    let wanted = wanted_with_poison(&store, 2).await;
    let prefix = &backend.prefix;
    let health = format!(
        "{prefix}:{{{prefix}/out/{}}}:poison/health",
        redis_shard("poison")
    );
    let mut raw = hooklatch::RedisConnection::open(&backend.server.url())
        .await
        .unwrap();
    let () = ::redis::cmd("SET")
        .arg(&health)
        .arg("not a hash")
        .query_async(&mut raw)
        .await
        .unwrap();
    let heal = async {
        let _: i64 = ::redis::cmd("DEL")
            .arg(&health)
            .query_async(&mut raw)
            .await
            .unwrap();
    };
    a_partial_take_keeps_what_it_leased(&store, &wanted, heal).await;
}

#[tokio::test]
async fn redis_a_take_keeps_what_one_shard_leased_when_another_fails() {
    a_failed_shard_keeps_what_the_others_leased(redis()).await;
}

#[tokio::test]
async fn redis_cluster_a_take_keeps_what_one_shard_leased_when_another_fails() {
    a_failed_shard_keeps_what_the_others_leased(redis_cluster()).await;
}

/// A take across more endpoints than one statement names, whose limit the
/// first statement's endpoints use up, still reports a disabled endpoint
/// named only in the last.
async fn a_take_past_its_limit_still_reports_every_disabled_endpoint(
    backend: impl Backend,
    count: usize,
) {
    let store = backend.open().await;
    let now = SystemTime::now();
    let names: Vec<String> = (0..count).map(|n| format!("e{n}")).collect();
    assert!(store.enqueue(&names[0], "only", b"{}", now).await.unwrap());
    let last = &names[count - 1];
    assert!(store.disable(last, DisableReason::Gone, now).await.unwrap());
    let later = now + Duration::from_millis(1);
    let wanted: Vec<Wanted> = names.iter().map(|n| Wanted::new(n, 2, later)).collect();
    let found = store
        .take_due_across(&wanted, 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(found.taken.len(), 1);
    assert_eq!(
        found.health.get(last).and_then(|h| h.disabled),
        Some(DisableReason::Gone),
        "a wanted endpoint missing from the health is taken for enabled"
    );
}

#[tokio::test]
async fn sqlite_a_take_past_its_limit_still_reports_every_disabled_endpoint() {
    a_take_past_its_limit_still_reports_every_disabled_endpoint(sqlite(), 12_000).await;
}

#[tokio::test]
async fn postgres_a_take_past_its_limit_still_reports_every_disabled_endpoint() {
    a_take_past_its_limit_still_reports_every_disabled_endpoint(postgres(), 12_000).await;
}

/// An outbox written before the Redis due index (each endpoint's keys
/// under its own hash tag `{E}`, listed in `PREFIX:out:endpoints`) is
/// moved on a store's first call: its due deliveries (one leased by a
/// dispatcher whose lease has ended) are taken, its dead one keeps its
/// attempt and is replayed, a disabled endpoint stays disabled, and the
/// earlier keys are gone. A second store moves nothing again.
async fn an_outbox_from_before_the_due_index_still_delivers(backend: Redis) {
    let mut raw = hooklatch::RedisConnection::open(&backend.server.url())
        .await
        .unwrap();
    let prefix = &backend.prefix;
    let key = |endpoint: &str, name: &str| format!("{prefix}:{{{endpoint}}}:out:{name}");
    let now = now_in_millis();
    let ms = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    // What the earlier release's scripts wrote.
    let write = |endpoint: &'static str, id: &'static str, state: i64, lease: Option<&str>| {
        let mut pipe = ::redis::pipe();
        pipe.hset_multiple(
            key(endpoint, &format!("d:{id}")),
            &[
                ("body", "{}"),
                ("state", &state.to_string()),
                ("tries", if state == 0 { "0" } else { "1" }),
                ("attempts", if state == 0 { "0" } else { "1" }),
                ("due_at", &ms.to_string()),
                ("waited_ms", "0"),
                ("reason", "0"),
                ("created_at", &ms.to_string()),
            ],
        )
        .ignore();
        if let Some(token) = lease {
            pipe.hset(key(endpoint, &format!("d:{id}")), "lease", token)
                .ignore();
        }
        pipe.zadd(key(endpoint, &format!("s:{state}")), id, ms)
            .ignore();
        if state == 0 {
            // A leased one's score is its lease's end, here just past.
            let score = if lease.is_some() { ms - 1 } else { ms };
            pipe.zadd(key(endpoint, "due"), id, score).ignore();
        } else {
            pipe.hset_multiple(
                key(endpoint, &format!("a:{id}:1")),
                &[
                    ("sent_at", ms.to_string()),
                    ("waited_ms", "0".into()),
                    ("reason", "0".into()),
                    ("held_ms", "0".into()),
                    ("status", "500".into()),
                    ("error", String::new()),
                    ("duration_us", "1000".into()),
                    ("excerpt", String::new()),
                ],
            )
            .ignore();
        }
        pipe
    };
    for (endpoint, id, state, lease) in [
        ("legacy", "p1", 0, None),
        ("legacy", "p2", 0, None),
        ("legacy", "l1", 0, Some("an earlier dispatcher's")),
        ("legacy", "x1", 3, None),
        ("legacy_off", "o1", 0, None),
    ] {
        let () = write(endpoint, id, state, lease)
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    let () = ::redis::cmd("HSET")
        .arg(key("legacy_off", "health"))
        .arg("disabled")
        .arg(1)
        .query_async(&mut raw)
        .await
        .unwrap();
    let listed = format!("{prefix}:out:endpoints");
    let () = ::redis::cmd("SADD")
        .arg(&listed)
        .arg("legacy")
        .arg("legacy_off")
        .query_async(&mut raw)
        .await
        .unwrap();

    let store = backend.open().await;
    let later = now + Duration::from_millis(1);
    let wanted = [
        Wanted::new("legacy", 10, later),
        Wanted::new("legacy_off", 10, later),
    ];
    let lease = Duration::from_secs(60);
    let found = store.take_due_across(&wanted, 100, lease).await.unwrap();
    let mut taken: Vec<_> = found.taken.iter().map(|t| t.id.as_str()).collect();
    taken.sort();
    assert_eq!(taken, ["l1", "p1", "p2"]);
    assert_eq!(
        found.health["legacy_off"].disabled,
        Some(DisableReason::Gone)
    );
    let dead = store.delivery("legacy", "x1").await.unwrap().unwrap();
    assert_eq!(dead.state, DeliveryState::Dead);
    assert_eq!(dead.attempts.len(), 1);
    assert_eq!(dead.attempts[0].result, Ok(500));
    assert_eq!(
        store.list("legacy", DeliveryState::Dead, 10).await.unwrap(),
        ["x1"]
    );
    for t in &found.taken {
        let attempt = Attempt::new(1, SystemTime::now(), Ok(200));
        let step = Step::Done(Final::Delivered);
        store
            .finish(t, &attempt, step, None)
            .await
            .expect("the lease held");
    }
    assert!(store.replay("legacy", "x1", later).await.unwrap());
    let again = RedisOutbox::connect(&backend.server.url())
        .await
        .unwrap()
        .with_prefix(prefix)
        .unwrap();
    let found = again.take_due_across(&wanted, 100, lease).await.unwrap();
    let taken: Vec<_> = found.taken.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(taken, ["x1"], "replayed, and nothing moved twice");
    store.enable("legacy_off").await.unwrap();
    let found = again.take_due_across(&wanted, 100, lease).await.unwrap();
    let taken: Vec<_> = found.taken.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(taken, ["o1"], "enabled, its delivery goes out");
    for (endpoint, name) in [("legacy", "d:p1"), ("legacy", "a:x1:1"), ("legacy", "due")] {
        let exists: i64 = ::redis::cmd("EXISTS")
            .arg(key(endpoint, name))
            .query_async(&mut raw)
            .await
            .unwrap();
        assert_eq!(exists, 0, "{name} is moved");
    }
    let left: i64 = ::redis::cmd("EXISTS")
        .arg(&listed)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn redis_moves_an_outbox_from_before_the_due_index_and_delivers_it() {
    an_outbox_from_before_the_due_index_still_delivers(redis()).await;
}

#[tokio::test]
async fn redis_cluster_moves_an_outbox_from_before_the_due_index_and_delivers_it() {
    an_outbox_from_before_the_due_index_still_delivers(redis_cluster()).await;
}

#[tokio::test]
async fn redis_takes_across_thousands_of_endpoints_in_one_call() {
    take_across_more_endpoints_than_one_statement_binds(redis(), 12_000).await;
}

/// A Redis take across 1,000 endpoints, each with a due delivery, leases
/// all of them in at most two script calls a shard (16 shards), not one a
/// endpoint. Counted on a server of the test's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_take_across_endpoints_makes_at_most_two_script_calls_a_shard() {
    let server = support::Redis::start();
    let url = server.url();
    let open = async || {
        RedisOutbox::connect(&url)
            .await
            .unwrap()
            .with_prefix(&support::unique("take"))
            .unwrap()
    };
    let now = SystemTime::now();
    let later = now + Duration::from_millis(1);
    // The server learns the scripts first (a script's first call is two).
    let warm = open().await;
    assert!(warm.enqueue("warm", "w", b"{}", now).await.unwrap());
    let wanted = [Wanted::new("warm", 1, later)];
    let lease = Duration::from_secs(60);
    assert_eq!(
        warm.take_due_across(&wanted, 1, lease)
            .await
            .unwrap()
            .taken
            .len(),
        1
    );
    let store = open().await;
    let names: Vec<String> = (0..1000).map(|n| format!("e{n}")).collect();
    for name in &names {
        assert!(store.enqueue(name, "only", b"{}", now).await.unwrap());
    }
    let wanted: Vec<Wanted> = names.iter().map(|n| Wanted::new(n, 4, later)).collect();
    let before = support::script_calls(&url);
    let found = store.take_due_across(&wanted, 4000, lease).await.unwrap();
    let calls = support::script_calls(&url) - before;
    assert_eq!(found.taken.len(), 1000);
    assert!(calls <= 32, "{calls} script calls");
}

/// The Redis script calls a delivered event costs (its `send`, its
/// `finish` and its share of the takes) do not grow with the number of
/// endpoints: a take makes at most two script calls a shard, so from 100
/// endpoints (every shard has some) to 1,000 the cost stays. Counted on a
/// server of the test's own, so no other test's calls are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_script_calls_per_delivered_event_stay_constant_as_endpoints_grow() {
    let server = support::Redis::start();
    let url = server.url();
    let mut per_event = Vec::new();
    for endpoints in [100, 1000] {
        let receiver = Receiver::answering(200);
        let store = RedisOutbox::connect(&url)
            .await
            .unwrap()
            .with_prefix(&support::unique("calls"))
            .unwrap();
        let dispatcher = dispatcher(store, &receiver);
        add(&dispatcher, every(Duration::from_millis(10), 3)).await;
        for n in 1..endpoints {
            let signer = Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap();
            let policy = every(Duration::from_millis(10), 3);
            let name = format!("idle_{n}");
            let url = "https://idle.example/";
            dispatcher
                .add_endpoint(&name, url, signer, policy)
                .await
                .unwrap();
        }
        let before = support::script_calls(&url);
        for id in ids(40) {
            assert!(dispatcher.send(ENDPOINT, &id, b"{}").await.unwrap());
        }
        let running = dispatcher.start();
        wait_until("all delivered", || async {
            receiver.successes().len() == 40
        })
        .await;
        running.stop().await;
        per_event.push((support::script_calls(&url) - before) as f64 / 40.0);
    }
    let (hundred, thousand) = (per_event[0], per_event[1]);
    assert!(
        thousand <= hundred * 1.5 + 1.0,
        "1,000 endpoints cost what 100 do: {hundred} and {thousand} script calls an event"
    );
}

/// The time now in whole milliseconds, as the stores keep times.
fn now_in_millis() -> SystemTime {
    let since_epoch = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap();
    SystemTime::UNIX_EPOCH + Duration::from_millis(since_epoch.as_millis() as u64)
}

/// Dispatcher B's attempt fails after dispatcher A disabled the endpoint
/// on a 410: the disable stays, in the store and for a new dispatcher.
async fn a_late_failure_keeps_a_disable(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    // B's answer comes 4 s in: A's take, 410 and disable fit in that
    // however slow the machine.
    receiver.answer_id("msg_slow", 500, Duration::from_secs(4));
    receiver.answer_id("msg_gone", 410, Duration::ZERO);
    let policy = || {
        every(Duration::from_secs(60), 5)
            .with_concurrency(1)
            .with_attempt_timeout(Duration::from_secs(8))
    };
    let leasing = |store| {
        dispatcher(store, &receiver)
            .with_lease(Duration::from_secs(20))
            .expect("lease")
    };
    let (a, b) = (leasing(backend.open().await), leasing(backend.open().await));
    add(&a, policy()).await;
    add(&b, policy()).await;
    b.send(ENDPOINT, "msg_slow", b"{}").await.unwrap();
    let running_b = b.start();
    wait_until("B's attempt is under way", || {
        let in_flight = receiver.in_flight();
        async move { in_flight == 1 }
    })
    .await;
    // B is busy with its one slot: A takes msg_gone.
    a.send(ENDPOINT, "msg_gone", b"{}").await.unwrap();
    let running_a = a.start();
    wait_until("A disabled the endpoint", || async {
        a.disabled(ENDPOINT).unwrap() == Some(DisableReason::Gone)
    })
    .await;
    wait_until("B's attempt failed", || async {
        receiver.answered().iter().any(|(id, _)| id == "msg_slow")
    })
    .await;
    running_a.stop().await;
    running_b.stop().await;

    let store = backend.open().await;
    let saved = store.health(ENDPOINT).await.unwrap();
    assert_eq!(saved.disabled, Some(DisableReason::Gone), "{saved:?}");
    assert!(saved.failing_since.is_some(), "B's failure was merged");
    assert_eq!(b.disabled(ENDPOINT).unwrap(), Some(DisableReason::Gone));
    let c = leasing(store);
    add(&c, policy()).await;
    assert_eq!(c.disabled(ENDPOINT).unwrap(), Some(DisableReason::Gone));
}

/// One dispatcher disables the endpoint on a 410: the other stops sending
/// to it within a poll, both see it disabled, and the owner is told once.
async fn a_disable_stops_every_dispatcher(backend: impl Backend) {
    let receiver = Receiver::answering(410);
    let told: Arc<Mutex<Vec<Disabled>>> = Arc::default();
    let make = async || {
        let told = told.clone();
        dispatcher(backend.open().await, &receiver)
            .on_disable(move |disabled| told.lock().unwrap().push(disabled.clone()))
    };
    let (a, b) = (make().await, make().await);
    add(&a, every(Duration::from_millis(20), 5)).await;
    add(&b, every(Duration::from_millis(20), 5)).await;
    let (running_a, running_b) = (a.start(), b.start());
    a.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    let store = backend.open().await;
    wait_until("disabled in the store", || async {
        store.health(ENDPOINT).await.unwrap().disabled.is_some()
    })
    .await;
    wait_until("both dispatchers see it", || async {
        a.disabled(ENDPOINT).unwrap().is_some() && b.disabled(ENDPOINT).unwrap().is_some()
    })
    .await;
    for id in ["msg_2", "msg_3", "msg_4"] {
        a.send(ENDPOINT, id, b"{}").await.unwrap();
        b.send(ENDPOINT, id, b"{}").await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    running_a.stop().await;
    running_b.stop().await;
    assert_eq!(receiver.answered(), [("msg_1".to_owned(), 410)]);
    let told = told.lock().unwrap();
    assert_eq!(told.len(), 1, "told once: {told:?}");
    assert_eq!(told[0].reason, DisableReason::Gone);
}

/// An enable through one dispatcher reaches another on the same store
/// within a poll: it sends the deliveries it held back.
async fn an_enable_reaches_every_dispatcher(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    let store = backend.open().await;
    assert!(
        store
            .disable(ENDPOINT, DisableReason::Gone, SystemTime::now())
            .await
            .unwrap()
    );
    let (admin, worker) = (
        dispatcher(backend.open().await, &receiver),
        dispatcher(backend.open().await, &receiver),
    );
    add(&admin, every(Duration::from_millis(20), 5)).await;
    add(&worker, every(Duration::from_millis(20), 5)).await;
    worker.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    let running = worker.start();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(receiver.answered().is_empty(), "disabled: nothing sent");
    admin.enable(ENDPOINT).await.unwrap();
    wait_until("the worker delivers", || async {
        receiver.successes().len() == 1
    })
    .await;
    running.stop().await;
    assert_eq!(worker.disabled(ENDPOINT).unwrap(), None);
    assert_eq!(
        store.health(ENDPOINT).await.unwrap(),
        EndpointHealth::default()
    );
}

/// A transport that counts one dispatcher's requests in flight and passes
/// them on to the shared receiver.
#[derive(Clone)]
struct Counted {
    receiver: Receiver,
    in_flight: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl Counted {
    fn new(receiver: &Receiver) -> Self {
        Self {
            receiver: receiver.clone(),
            in_flight: Arc::default(),
            peak: Arc::default(),
        }
    }
}

impl Transport for Counted {
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Response, TransportError> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let _in_flight = InFlight(&self.in_flight);
        self.peak.fetch_max(now, Ordering::SeqCst);
        self.receiver.post(url, headers, body).await
    }
}

/// The concurrency limit is per dispatcher: two on one store with a limit
/// of 3 each have up to 6 requests in flight at the receiver, and never
/// more than 3 each.
async fn the_concurrency_limit_is_per_dispatcher(backend: impl Backend) {
    const LIMIT: usize = 3;
    let receiver = Receiver::answering(200);
    receiver.set_delay(Duration::from_millis(100));
    let (to_a, to_b) = (Counted::new(&receiver), Counted::new(&receiver));
    let make = |store, transport| {
        Dispatcher::new(store, transport).with_poll_interval(Duration::from_millis(20))
    };
    let (a, b) = (
        make(backend.open().await, to_a.clone()),
        make(backend.open().await, to_b.clone()),
    );
    let policy = || every(Duration::from_millis(50), 3).with_concurrency(LIMIT);
    for dispatcher in [&a, &b] {
        dispatcher
            .add_endpoint(
                ENDPOINT,
                "https://receiver.example/hooks",
                Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap(),
                policy(),
            )
            .await
            .unwrap();
    }
    let ids = ids(36);
    for id in &ids {
        a.send(ENDPOINT, id, b"{}").await.unwrap();
    }
    let (running_a, running_b) = (a.start(), b.start());
    let store = backend.open().await;
    wait_until("all delivered", || {
        all_in(&store, &ids, DeliveryState::Delivered)
    })
    .await;
    running_a.stop().await;
    running_b.stop().await;
    let (peak_a, peak_b) = (
        to_a.peak.load(Ordering::SeqCst),
        to_b.peak.load(Ordering::SeqCst),
    );
    assert!(peak_a <= LIMIT && peak_b <= LIMIT, "{peak_a} and {peak_b}");
    assert!(
        receiver.peak() > LIMIT && receiver.peak() <= 2 * LIMIT,
        "both dispatchers at once: {}",
        receiver.peak()
    );
}

/// A delivery sent in a trace carries it to every attempt, each under a
/// span id of its own, across a restart of the dispatcher (the trace is
/// read back from the store); one sent outside a trace carries none.
async fn each_attempt_carries_the_trace_the_delivery_was_sent_in(backend: impl Backend) {
    const SENT_IN: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let sent_in = TraceParent::parse(SENT_IN).unwrap();
    let ids = ["traced".to_owned(), "untraced".to_owned()];
    let receiver = Receiver::answering(500);
    let first = dispatcher(backend.open().await, &receiver);
    add(&first, every(Duration::from_millis(50), 10)).await;
    sent_in
        .scope(async { assert!(first.send(ENDPOINT, &ids[0], b"{}").await.unwrap()) })
        .await;
    assert!(first.send(ENDPOINT, &ids[1], b"{}").await.unwrap());
    let running = first.start();
    wait_until("each delivery failed twice", || {
        let traces = receiver.traces();
        let ids = &ids;
        async move {
            ids.iter()
                .all(|id| traces.iter().filter(|(seen, _)| seen == id).count() >= 2)
        }
    })
    .await;
    running.stop().await;
    drop(first);
    // A new dispatcher reads the trace back from the store.
    receiver.set_status(200);
    let store = backend.open().await;
    let second = dispatcher(store.clone(), &receiver);
    add(&second, every(Duration::from_millis(50), 10)).await;
    let running = second.start();
    wait_until("both are delivered", || {
        all_in(&store, &ids, DeliveryState::Delivered)
    })
    .await;
    running.stop().await;

    let traces = receiver.traces();
    let of = |id: &str| -> Vec<Option<String>> {
        traces
            .iter()
            .filter(|(seen, _)| seen == id)
            .map(|(_, trace)| trace.clone())
            .collect()
    };
    let traced: Vec<TraceParent> = of("traced")
        .into_iter()
        .map(|trace| TraceParent::parse(&trace.expect("a traceparent on every attempt")).unwrap())
        .collect();
    assert!(traced.len() >= 3, "{traced:?}");
    for attempt in &traced {
        assert_eq!(attempt.trace_id(), sent_in.trace_id());
        assert!(attempt.sampled());
        assert_ne!(attempt.parent_id(), sent_in.parent_id());
    }
    let spans: std::collections::HashSet<String> =
        traced.iter().map(TraceParent::parent_id).collect();
    assert_eq!(spans.len(), traced.len(), "a span id per attempt");
    assert!(of("untraced").iter().all(Option::is_none));
}

macro_rules! suite {
    ($module:ident, $backend:expr) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_graceful_restart_delivers_each_event_once() {
                graceful_restart($backend).await;
            }

            #[test]
            fn a_crash_mid_attempt_loses_nothing_and_delivers_each_event_once() {
                crash_mid_attempt($backend);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn two_dispatchers_on_one_store_attempt_each_delivery_once() {
                two_dispatchers_share_a_store($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn dead_deliveries_are_listed_and_replayed() {
                dead_deliveries_replay($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn purge_forgets_finished_deliveries_only() {
                purge_keeps_pending_and_dead($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn purge_deletes_in_bounded_batches_and_misses_no_finished_delivery() {
                hooklatch::testing::outbox::purge_takes_every_batch(&Fresh($backend)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_take_across_endpoints_is_round_robin_within_limits_and_skips_disabled() {
                hooklatch::testing::outbox::take_across_is_fair_and_bounded(&Fresh($backend)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_take_across_many_endpoints_serves_each_before_a_busy_ones_second() {
                hooklatch::testing::outbox::many_endpoints_each_before_a_busy_ones_second(&Fresh($backend)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn every_step_keeps_a_delivery_findable_by_a_take_across_endpoints() {
                hooklatch::testing::outbox::every_step_keeps_a_delivery_findable_across_endpoints(&Fresh($backend)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_busy_endpoint_does_not_delay_another_beyond_one_poll() {
                a_busy_endpoint_does_not_starve_a_quiet_one($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_disabled_endpoint_stays_disabled_across_a_restart() {
                disabled_stays_disabled_across_a_restart($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn failing_time_carries_over_a_restart_to_auto_disable() {
                failing_time_carries_over_a_restart($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn health_merges_keep_a_disable_and_the_earliest_failure() {
                hooklatch::testing::outbox::health_merges_in_the_store(&Fresh($backend)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn health_a_take_leases_nothing_while_disabled_and_reports_it() {
                hooklatch::testing::outbox::a_take_reports_health_and_leases_nothing_while_disabled(&Fresh($backend)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn health_a_lost_lease_records_and_merges_nothing() {
                hooklatch::testing::outbox::a_lost_lease_records_and_merges_nothing(&Fresh($backend)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn health_a_failure_saved_after_a_disable_keeps_it() {
                a_late_failure_keeps_a_disable($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn health_a_disable_stops_every_dispatcher_and_is_told_once() {
                a_disable_stops_every_dispatcher($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn health_an_enable_reaches_every_dispatcher() {
                an_enable_reaches_every_dispatcher($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn each_attempt_carries_the_trace_the_delivery_was_sent_in_across_a_restart() {
                each_attempt_carries_the_trace_the_delivery_was_sent_in($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_concurrency_limit_is_per_dispatcher_not_per_store() {
                the_concurrency_limit_is_per_dispatcher($backend).await;
            }
        }
    };
}

suite!(memory_store, memory());
suite!(sqlite_store, sqlite());
suite!(any_sqlite_store, any_sqlite());
suite!(postgres_store, postgres());
suite!(redis_store, redis());
suite!(redis_cluster_store, redis_cluster());

/// Every published outbox check runs on every built-in outbox: the suites
/// here and in tests/outbox_keep.rs call each `pub async fn` of
/// `hooklatch::testing::outbox` (but `all`), so that a check added there
/// cannot be skipped.
#[test]
fn every_published_outbox_check_is_stamped_over_every_outbox() {
    let published = [
        include_str!("../src/testing/outbox/mod.rs"),
        include_str!("../src/testing/outbox/health.rs"),
        include_str!("../src/testing/outbox/keeping.rs"),
    ];
    let mut published: Vec<&str> = published
        .iter()
        .flat_map(|source| source.lines())
        .filter_map(|line| line.strip_prefix("pub async fn "))
        .filter_map(|rest| rest.split('<').next())
        .filter(|name| *name != "all")
        .collect();
    published.sort_unstable();
    let call = "hooklatch::testing::outbox::";
    let suites = [include_str!("outbox.rs"), include_str!("outbox_keep.rs")];
    let mut stamped: Vec<&str> = suites
        .iter()
        .flat_map(|suite| suite.split(call))
        .skip(1)
        .filter_map(|rest| rest.split('(').next())
        .filter(|name| name.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect();
    stamped.sort_unstable();
    stamped.dedup();
    assert_eq!(stamped, published);
}

/// `SqliteOutbox` opens by path or by `sqlite:` URL onto the same tables:
/// a delivery enqueued through one is found through the other.
#[tokio::test]
async fn sqlite_outbox_opens_by_path_or_url_onto_the_same_deliveries() {
    let dir = support::TempDir::new("outbox-url");
    let path = dir.path().join("outbox.db");
    let by_path = hooklatch::sender::SqliteOutbox::open(&path).await.unwrap();
    assert!(
        by_path
            .enqueue("ep", "msg_1", b"{}", SystemTime::now())
            .await
            .unwrap()
    );
    let by_url = hooklatch::sender::SqliteOutbox::connect(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    assert!(by_url.delivery("ep", "msg_1").await.unwrap().is_some());
    assert!(
        !by_url
            .enqueue("ep", "msg_1", b"{}", SystemTime::now())
            .await
            .unwrap(),
        "the id is already there"
    );
}
