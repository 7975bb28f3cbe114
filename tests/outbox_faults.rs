//! Outbox faults: the outbox's Postgres or Redis goes away while
//! deliveries run, and no delivery is lost.

#[path = "support/flush.rs"]
mod flush;
#[path = "support/receiver.rs"]
mod receiver;
mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use hooklatch::sender::outbox::DeliveryState;
use hooklatch::sender::outbox::DeliveryStore;
use hooklatch::sender::{PostgresOutbox, RedisOutbox};
use receiver::*;

/// The outbox's Postgres is stopped for two seconds while deliveries run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outbox_outage_loses_no_delivery() {
    let server = Arc::new(support::Postgres::start());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    let store = PostgresOutbox::new(pool, "hooklatch").unwrap();
    store.migrate().await.unwrap();
    let (stopper, restarter) = (server.clone(), server.clone());
    outage_loses_no_delivery(
        store,
        move || stopper.stop_immediately(),
        move || restarter.start_again(),
    )
    .await;
}

/// The outbox's Redis (AOF, `appendfsync always`) is killed for two
/// seconds while deliveries run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outbox_outage_loses_no_delivery() {
    let server = Arc::new(Mutex::new(support::Redis::start()));
    let url = server.lock().unwrap().url();
    let store = RedisOutbox::connect(&url).await.unwrap();
    let (stopper, restarter) = (server.clone(), server.clone());
    outage_loses_no_delivery(
        store,
        move || stopper.lock().unwrap().kill(),
        move || restarter.lock().unwrap().start_again(),
    )
    .await;
}

/// Stops the outbox's server for two seconds while deliveries run: the
/// dispatcher keeps going, and afterwards every delivery is recorded
/// delivered, with exactly one successful attempt each.
async fn outage_loses_no_delivery<S: DeliveryStore + Clone>(
    store: S,
    stop: impl FnOnce() + Send + 'static,
    restart: impl FnOnce() + Send + 'static,
) {
    let receiver = Receiver::answering(200);
    receiver.set_delay(Duration::from_millis(20));
    let dispatcher = dispatcher(store.clone(), &receiver)
        .with_lease(Duration::from_secs(1))
        .expect("lease");
    add(
        &dispatcher,
        every(Duration::from_millis(50), 1000).with_concurrency(4),
    )
    .await;
    let ids = ids(200);
    for id in &ids {
        dispatcher.send(ENDPOINT, id, id.as_bytes()).await.unwrap();
    }
    let running = dispatcher.start();
    wait_until("some deliveries are done", || {
        let done = receiver.successes().len();
        async move { done >= 20 }
    })
    .await;
    // Slowed down so that work is left for the outage however slowly the
    // server stops (180 deliveries, 4 at a time, at 200 ms each: 9 s).
    receiver.set_delay(Duration::from_millis(200));
    tokio::task::spawn_blocking(stop).await.unwrap();
    let during = receiver.successes().len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::spawn_blocking(restart).await.unwrap();
    receiver.set_delay(Duration::ZERO);
    assert!(during < ids.len(), "the outage came mid-run");
    wait_until("every delivery is delivered", || {
        all_in(&store, &ids, DeliveryState::Delivered)
    })
    .await;
    running.stop().await;
    for id in &ids {
        let stored = store.delivery(ENDPOINT, id).await.unwrap().unwrap();
        let successes = stored
            .attempts
            .iter()
            .filter(|a| a.result == Ok(200))
            .count();
        assert_eq!(successes, 1, "{id}: {:?}", stored.attempts);
    }
    // An attempt whose record was lost in the outage was sent again: the
    // receiver saw it twice, which is why receivers deduplicate.
    let answered = receiver.successes();
    assert_eq!(answered.len(), ids.len());
    assert!(
        answered.values().all(|&n| (1..=2).contains(&n)),
        "{answered:?}"
    );
}

/// With replica acks, a send (and a disable) that fewer replicas confirmed
/// than asked for fails, so the caller retries, but is kept where it was
/// made: the retry finds it rather than sending twice.
#[tokio::test]
async fn redis_outbox_replica_acks_that_fall_short_fail_the_call_but_keep_the_write() {
    use hooklatch::sender::OutboxError;
    use hooklatch::sender::outbox::DisableReason;
    let server = support::redis();
    let prefix = support::unique("acks");
    let plain = RedisOutbox::connect(&server.url())
        .await
        .unwrap()
        .with_prefix(&prefix)
        .unwrap();
    let waiting = plain
        .clone()
        .with_replica_acks(1, Duration::from_millis(50));
    let now = SystemTime::now();
    for _ in 0..2 {
        assert!(matches!(
            waiting.enqueue("e", "msg_1", b"{}", now).await,
            Err(OutboxError::ReplicasBehind {
                acked: 0,
                wanted: 1
            })
        ));
    }
    assert!(
        !plain.enqueue("e", "msg_1", b"{}", now).await.unwrap(),
        "the send was kept: its retry is a repeat"
    );
    let kept = plain.delivery("e", "msg_1").await.unwrap().unwrap();
    assert_eq!(kept.state, DeliveryState::Pending);
    assert!(matches!(
        waiting.disable("e", DisableReason::Manual, now).await,
        Err(OutboxError::ReplicasBehind { .. })
    ));
    assert!(plain.health("e").await.unwrap().disabled.is_some());
}

/// With a replica attached and replica acks asked for, every outbox
/// write is confirmed and reported as done: a send, a keyed send, a lease,
/// a put back, a record, a replay, a disable and an enable (which asked
/// `EXISTS` of the key it had just deleted, and so always failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outbox_replica_acks_confirm_every_write_with_a_replica_attached() {
    use hooklatch::sender::outbox::{DisableReason, Keeping, SendKey};
    use hooklatch::sender::rules::{Attempt, Final, Step};
    let master = support::Redis::start();
    let port = master
        .url()
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    let _replica = support::Redis::start_with(&["--replicaof", "127.0.0.1", &port]);
    // Writes start once the replica is in sync, not during its first sync.
    wait_until("the replica is online", || async {
        support::info(&master.url(), "replication")
            .lines()
            .any(|line| line.starts_with("slave0:") && line.contains("state=online"))
    })
    .await;
    let store = RedisOutbox::connect(&master.url())
        .await
        .unwrap()
        .with_replica_acks(1, Duration::from_secs(20));
    let now = SystemTime::now();
    assert!(store.enqueue("e", "msg_1", b"{}", now).await.unwrap());
    let key = SendKey {
        key: "order-7",
        now,
        window: Duration::from_secs(3600),
    };
    let keyed = store
        .enqueue_keyed("e", key, "msg_2", b"{}", now)
        .await
        .unwrap();
    assert!(keyed.enqueued);
    let due = store
        .take_due("e", now, 10, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(due.taken.len(), 2);
    store.put_back(&due.taken[0], now).await.unwrap();
    let attempt = Attempt::new(1, now, Ok(200));
    store
        .finish(&due.taken[1], &attempt, Step::Done(Final::Dead), None)
        .await
        .unwrap();
    assert!(store.replay("e", &due.taken[1].id, now).await.unwrap());
    assert!(
        store
            .disable("e", DisableReason::Manual, now)
            .await
            .unwrap()
    );
    store.enable("e").await.expect("an enable is confirmed");
    assert!(store.health("e").await.unwrap().disabled.is_none());
}

/// A pool with `synchronous_commit = off` commits without waiting for the
/// flush. A send, a lease (one endpoint's take and a take across
/// endpoints) and an attempt's record are answered only once flushed all
/// the same: with the WAL writer slowed to 10 s, the WAL is flushed up to
/// its end the moment each returns. A lease lost in a crash would let a
/// second dispatcher send the delivery while the first still sends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_sends_leases_and_records_are_flushed_before_the_answer_even_with_synchronous_commit_off()
 {
    use hooklatch::sender::rules::{Attempt, Final, Step};
    let (_server, admin, unflushed) = flush::postgres_with_lazy_wal_writer().await;
    PostgresOutbox::new(admin.clone(), "hooklatch")
        .unwrap()
        .migrate()
        .await
        .unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_with(unflushed)
        .await
        .unwrap();
    let store = PostgresOutbox::new(pool, "hooklatch").unwrap();
    let flushed = || flush::wal_flushed(&admin);
    for n in 0..3 {
        let id = format!("msg_{n}");
        assert!(
            store
                .enqueue("e", &id, b"{}", SystemTime::now())
                .await
                .unwrap()
        );
        assert!(flushed().await, "{id} was answered sent before its flush");
    }
    let due = store
        .take_due("e", SystemTime::now(), 10, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(due.taken.len(), 3);
    assert!(flushed().await, "a lease was answered before its flush");
    assert!(
        store
            .enqueue("e", "msg_across", b"{}", SystemTime::now())
            .await
            .unwrap()
    );
    let across = store
        .take_due_across(
            &[hooklatch::sender::outbox::Wanted::new(
                "e",
                10,
                SystemTime::now(),
            )],
            10,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert_eq!(across.taken.len(), 1);
    assert!(
        flushed().await,
        "a lease across endpoints was answered before its flush"
    );
    for taken in &due.taken {
        let attempt = Attempt::new(1, SystemTime::now(), Ok(200));
        store
            .finish(taken, &attempt, Step::Done(Final::Delivered), None)
            .await
            .expect("the lease held");
        assert!(
            flushed().await,
            "{} was answered recorded before its flush",
            taken.id
        );
    }
}

/// A Redis that cannot tell its time (`TIME` renamed away): a dispatcher
/// whose own clock is 3 minutes ahead leases nothing on a guess while
/// another holds a delivery, and its `send` fails, naming the store's
/// clock, instead of scheduling on its own clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_that_cannot_read_the_stores_clock_leases_nothing() {
    let server = support::Redis::start_with(&["--rename-command", "TIME", "time-renamed-away"]);
    let receiver = Receiver::answering(200);
    let hold = Duration::from_millis(2_500);
    receiver.answer_id("msg_1", 200, hold);
    let policy =
        || every(Duration::from_millis(50), 3).with_attempt_timeout(Duration::from_secs(4));
    // The holder brings its own clock, so it needs no reading of the store's.
    let holder = dispatcher(
        RedisOutbox::connect(&server.url()).await.unwrap(),
        &receiver,
    );
    add(&holder, policy().with_clock(SystemTime::now)).await;
    let ahead = || SystemTime::now() + Duration::from_secs(180);
    let guesser = dispatcher(
        RedisOutbox::connect(&server.url()).await.unwrap(),
        &receiver,
    )
    .with_local_clock(ahead);
    add(&guesser, policy()).await;

    assert!(holder.send(ENDPOINT, "msg_1", b"{}").await.unwrap());
    let running_holder = holder.start();
    wait_until("the holder is attempting msg_1", || async {
        receiver.started() == 1
    })
    .await;
    let refused = guesser.send(ENDPOINT, "msg_2", b"{}").await.unwrap_err();
    assert!(refused.to_string().contains("clock"), "{refused}");

    let errors_before = support::error_replies(&server.url());
    let running_guesser = guesser.start();
    wait_until("the guesser has polled a few times", || async {
        support::error_replies(&server.url()) >= errors_before + 5
    })
    .await;
    running_guesser.stop().await;
    assert_eq!(
        receiver.started(),
        1,
        "a dispatcher on its own clock leased a delivery another holds"
    );
    let store = RedisOutbox::connect(&server.url()).await.unwrap();
    wait_until("the holder records msg_1", || async {
        state_of(&store, "msg_1").await == DeliveryState::Delivered
    })
    .await;
    running_holder.stop().await;
    let delivery = store.delivery(ENDPOINT, "msg_1").await.unwrap().unwrap();
    assert_eq!(delivery.attempts.len(), 1);
}
