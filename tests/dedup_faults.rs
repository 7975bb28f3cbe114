//! Real faults against the claim stores: a failing enqueue inside the
//! atomic step, a server stopped mid-run, a rolled-back caller transaction,
//! and migrations racing each other.

#[path = "support/flush.rs"]
mod flush;
#[path = "support/patient_redis.rs"]
mod patient_redis;
mod support;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hooklatch::dedup::{
    Acceptance, DedupError, Inbox, InboxQueue, IncomingEvent, PostgresInbox, RedisInbox,
    SqliteInbox,
};
use sqlx::AssertSqlSafe;

fn event<'a>(namespace: &'a str, id: &'a str, body: &'a [u8]) -> IncomingEvent<'a> {
    IncomingEvent::new(namespace, id, body)
}

const SMALL: &[u8] = b"{}";
const LARGE: &[u8] = &[b'x'; 200];

#[tokio::test]
async fn postgres_failed_enqueue_leaves_no_claim() {
    let server = support::postgres();
    let pool = sqlx::PgPool::connect(&server.url()).await.unwrap();
    let prefix = support::unique("f");
    let store = PostgresInbox::new(pool.clone(), &prefix).unwrap();
    store.migrate().await.unwrap();
    // Inject a failure into the inbox insert, inside the atomic step.
    sqlx::query(AssertSqlSafe(format!(
        "ALTER TABLE {prefix}_inbox ADD CONSTRAINT small_bodies CHECK (octet_length(body) < 100)"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let error = store.accept(&event("ns", "evt", LARGE)).await.unwrap_err();
    assert!(
        matches!(&error, DedupError::Store(e) if e.backend() == "sql"),
        "{error}"
    );
    let claims: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM {prefix}_claims"
    )))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(claims, 0, "no claim survives a failed enqueue");
    // The sender's retry succeeds.
    assert_eq!(
        store.accept(&event("ns", "evt", SMALL)).await.unwrap(),
        Acceptance::Accepted
    );
    assert_eq!(support::drain(&store, "ns").await, ["evt"]);
}

#[tokio::test]
async fn sqlite_failed_enqueue_leaves_no_claim() {
    let dir = support::TempDir::new("sqlite-fault");
    let store = SqliteInbox::open(dir.path().join("inbox.db"))
        .await
        .unwrap();
    sqlx::query(
        "CREATE TRIGGER small_bodies BEFORE INSERT ON hooklatch_inbox \
         WHEN length(NEW.body) >= 100 BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
    )
    .execute(store.pool())
    .await
    .unwrap();
    let error = store.accept(&event("ns", "evt", LARGE)).await.unwrap_err();
    assert!(error.to_string().contains("injected failure"), "{error}");
    let claims: i64 = sqlx::query_scalar("SELECT count(*) FROM hooklatch_claims")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(claims, 0, "no claim survives a failed enqueue");
    assert_eq!(
        store.accept(&event("ns", "evt", SMALL)).await.unwrap(),
        Acceptance::Accepted
    );
    assert_eq!(support::drain(&store, "ns").await, ["evt"]);
}

#[tokio::test]
async fn redis_failed_enqueue_leaves_no_claim() {
    let server = support::redis();
    // One shard: the keys below are the namespace's only stream and claim.
    let store = RedisInbox::connect(&server.url())
        .await
        .unwrap()
        .with_shards(1)
        .unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut raw = crate::patient_redis::patient_redis(&client).await;
    let namespace = support::unique("ns");
    let stream = format!("hooklatch:{{{namespace}}}:inbox");
    let claim = format!("hooklatch:{{{namespace}}}:claim:evt");
    // A key of the wrong type makes XADD fail inside the script.
    let _: () = redis::cmd("SET")
        .arg(&stream)
        .arg("not a stream")
        .query_async(&mut raw)
        .await
        .unwrap();
    let error = store
        .accept(&event(&namespace, "evt", SMALL))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, DedupError::Store(e) if e.backend() == "redis"),
        "{error}"
    );
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&claim)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(exists, 0, "no claim survives a failed enqueue");
    let _: () = redis::cmd("DEL")
        .arg(&stream)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        store
            .accept(&event(&namespace, "evt", SMALL))
            .await
            .unwrap(),
        Acceptance::Accepted
    );
    assert_eq!(support::drain(&store, &namespace).await, ["evt"]);
}

#[tokio::test]
async fn redis_shard_count_is_recorded_and_a_store_with_another_count_is_refused() {
    let server = support::redis();
    let namespace = support::unique("ns");
    let sixteen = RedisInbox::connect(&server.url()).await.unwrap();
    let four = sixteen.clone().with_shards(4).unwrap();
    assert_eq!(
        sixteen
            .accept(&event(&namespace, "evt", SMALL))
            .await
            .unwrap(),
        Acceptance::Accepted
    );
    for refused in [
        four.accept(&event(&namespace, "evt", SMALL))
            .await
            .unwrap_err(),
        four.take(&namespace, "w", 10).await.unwrap_err(),
    ] {
        assert!(
            matches!(
                &refused,
                DedupError::ShardCountMismatch {
                    recorded: 16,
                    configured: 4,
                    ..
                }
            ),
            "{refused}"
        );
    }
    // Another namespace is free to choose.
    let other = support::unique("ns");
    assert_eq!(
        four.accept(&event(&other, "evt", SMALL)).await.unwrap(),
        Acceptance::Accepted
    );
    assert!(matches!(
        RedisInbox::connect(&server.url())
            .await
            .unwrap()
            .with_shards(0),
        Err(DedupError::InvalidShardCount(0))
    ));
}

/// A server with no replicas cannot confirm a write to one: the call fails
/// with `ReplicasBehind` (a 5xx), yet what it wrote is kept, so the
/// sender's retry is a duplicate and a completed lease stays done.
#[tokio::test]
async fn redis_replica_acks_that_fall_short_fail_the_call_but_keep_the_write() {
    use hooklatch::dedup::{Claim, LeaseStore};
    let server = support::redis();
    let plain = RedisInbox::connect(&server.url()).await.unwrap();
    let waiting = plain
        .clone()
        .with_replica_acks(1, Duration::from_millis(50));
    let namespace = support::unique("ns");
    for _ in 0..2 {
        assert!(matches!(
            waiting.accept(&event(&namespace, "evt", SMALL)).await,
            Err(DedupError::ReplicasBehind {
                acked: 0,
                wanted: 1
            })
        ));
    }
    assert_eq!(
        plain
            .accept(&event(&namespace, "evt", SMALL))
            .await
            .unwrap(),
        Acceptance::Duplicate
    );
    assert_eq!(support::drain(&plain, &namespace).await, ["evt"]);

    let Claim::Fresh(lease) = waiting
        .claim(&namespace, "job", Duration::from_secs(30))
        .await
        .unwrap()
    else {
        panic!("a fresh lease");
    };
    assert!(matches!(
        waiting.complete(&lease).await,
        Err(DedupError::ReplicasBehind { .. })
    ));
    assert_eq!(
        plain
            .claim(&namespace, "job", Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::Done
    );
}

#[tokio::test]
async fn redis_namespace_from_before_shards_keeps_its_one_shard_layout() {
    let server = support::redis();
    let namespace = support::unique("ns");
    // What a store made before shards left: the unsharded stream and claim.
    let unsharded = RedisInbox::connect(&server.url())
        .await
        .unwrap()
        .with_shards(1)
        .unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut raw = crate::patient_redis::patient_redis(&client).await;
    let _: String = redis::cmd("XADD")
        .arg(format!("hooklatch:{{{namespace}}}:inbox"))
        .arg("*")
        .arg("id")
        .arg("old")
        .query_async(&mut raw)
        .await
        .unwrap();
    let default = RedisInbox::connect(&server.url()).await.unwrap();
    assert!(matches!(
        default.accept(&event(&namespace, "evt", SMALL)).await,
        Err(DedupError::ShardCountMismatch {
            recorded: 1,
            configured: 16,
            ..
        })
    ));
    assert_eq!(
        unsharded
            .accept(&event(&namespace, "evt", SMALL))
            .await
            .unwrap(),
        Acceptance::Accepted
    );
}

/// The first accepts into a new Redis namespace, many at once, scan the
/// keyspace for claims of the layout before shards once between them, not
/// once each: on a server of 20,000 keys a pass is about 20 `SCAN` calls,
/// and 64 callers each scanning made the server stall for seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_accepts_of_a_redis_namespace_scan_the_keyspace_once() {
    let server = support::Redis::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut raw = crate::patient_redis::patient_redis(&client).await;
    for chunk in 0..20 {
        let mut fill = redis::pipe();
        for n in 0..1000 {
            fill.set(format!("other:{chunk}:{n}"), 1).ignore();
        }
        let _: () = fill.query_async(&mut raw).await.unwrap();
    }
    let scans = || {
        support::info(&server.url(), "commandstats")
            .lines()
            .find(|line| line.starts_with("cmdstat_scan:"))
            .and_then(|line| line.split("calls=").nth(1)?.split(',').next()?.parse().ok())
            .unwrap_or(0_u64)
    };
    let store = RedisInbox::connect(&server.url()).await.unwrap();
    let namespace = support::unique("fresh");
    let before = scans();
    let accepts: Vec<_> = (0..64)
        .map(|n| {
            let (store, namespace) = (store.clone(), namespace.clone());
            tokio::spawn(async move {
                let id = format!("evt_{n}");
                store
                    .accept(&IncomingEvent::new(&namespace, &id, b"{}"))
                    .await
                    .unwrap()
            })
        })
        .collect();
    for accept in accepts {
        assert_eq!(accept.await.unwrap(), Acceptance::Accepted);
    }
    let calls = scans() - before;
    assert!(
        (1..=40).contains(&calls),
        "one pass over 20,000 keys is about 20 SCAN calls; 64 first accepts made {calls}"
    );
}

/// A namespace used only in lease mode before shards has nothing but
/// `{ns}:claim:<id>` keys. Upgraded stores must still find its done marks
/// and leases (or refuse the namespace), never run a handler again.
#[tokio::test]
async fn redis_lease_namespace_from_before_shards_keeps_its_dedup_after_an_upgrade() {
    use hooklatch::dedup::{Claim, LeaseStore};
    let server = support::redis();
    let namespace = support::unique("ns");
    // What a release before shards left: a done mark and a lease in
    // progress, and no record of a shard count.
    let client = redis::Client::open(server.url()).unwrap();
    let mut raw = crate::patient_redis::patient_redis(&client).await;
    for (id, value) in [("done", "done"), ("running", "lease:old-token")] {
        let _: () = redis::cmd("SET")
            .arg(format!("hooklatch:{{{namespace}}}:claim:{id}"))
            .arg(value)
            .arg("PX")
            .arg(600_000)
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    let upgraded = RedisInbox::connect(&server.url()).await.unwrap();
    assert!(
        matches!(
            upgraded
                .claim(&namespace, "done", Duration::from_secs(30))
                .await,
            Err(DedupError::ShardCountMismatch {
                recorded: 1,
                configured: 16,
                ..
            })
        ),
        "a store with the default shards must not claim afresh what the old layout holds"
    );
    let one_shard = RedisInbox::connect(&server.url())
        .await
        .unwrap()
        .with_shards(1)
        .unwrap();
    assert_eq!(
        one_shard
            .claim(&namespace, "done", Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::Done
    );
    assert!(matches!(
        one_shard
            .claim(&namespace, "running", Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::InProgress { .. }
    ));
    // A namespace with no old keys gets the default count.
    let fresh = support::unique("ns");
    assert!(matches!(
        upgraded
            .claim(&fresh, "job", Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::Fresh(_)
    ));
}

/// A restart from an older snapshot rolls back how often an entry was
/// taken. The next take must still issue a token no earlier holder has: the
/// worker that held the entry before the restart cannot ack it, the one that
/// took it after can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fencing_tokens_stay_unique_across_a_restart_from_a_snapshot() {
    let mut server = support::Redis::start_with(&["--appendonly", "no", "--save", ""]);
    let connection = hooklatch::RedisConnection::open(&server.url())
        .await
        .unwrap()
        .insecure_allowing_no_persistence();
    let visibility = Duration::from_millis(300);
    let store = RedisInbox::new(connection)
        .await
        .unwrap()
        .with_shards(1)
        .unwrap()
        .with_options(
            hooklatch::dedup::StoreOptions::default().with_visibility_timeout(visibility),
        );
    let namespace = support::unique("ns");
    let _ = store
        .accept(&event(&namespace, "evt", SMALL))
        .await
        .unwrap();
    let first = store.take(&namespace, "w1", 1).await.unwrap();
    assert_eq!(first.len(), 1);
    let client = redis::Client::open(server.url()).unwrap();
    let mut raw = crate::patient_redis::patient_redis(&client).await;
    let _: () = redis::cmd("SAVE").query_async(&mut raw).await.unwrap();

    tokio::time::sleep(visibility * 2).await;
    let second = store.take(&namespace, "w2", 1).await.unwrap();
    assert_eq!(second.len(), 1, "w1's visibility lapsed: w2 reclaims");

    server.kill();
    server.start_again();
    tokio::time::sleep(visibility * 2).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let third = loop {
        match store.take(&namespace, "w3", 1).await {
            Ok(taken) if !taken.is_empty() => break taken,
            Ok(_) => {}
            Err(error) => assert!(
                Instant::now() < deadline,
                "no take after the restart: {error}"
            ),
        }
        assert!(Instant::now() < deadline, "the entry never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        matches!(store.ack(&second[0]).await, Err(DedupError::DeliveryLost)),
        "a token issued before the restart was issued again: the stale holder acked"
    );
    store.ack(&third[0]).await.expect("the real holder acks");
}

/// Group commit under load: 512 concurrent accepts of 128 ids, four
/// deliveries each, many sharing a batch. Each id is accepted exactly once,
/// every other delivery is answered duplicate, and the inbox holds each id
/// once.
async fn accepts_sharing_a_batch_each_get_their_own_outcome<S: InboxQueue + Clone + 'static>(
    store: &S,
) {
    let tasks: Vec<_> = (0..512)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                let id = format!("evt_{}", n % 128);
                (
                    id.clone(),
                    store.accept(&event("ns", &id, SMALL)).await.unwrap(),
                )
            })
        })
        .collect();
    let mut accepted: HashMap<String, usize> = HashMap::new();
    for task in tasks {
        let (id, outcome) = task.await.unwrap();
        *accepted.entry(id).or_default() += usize::from(outcome == Acceptance::Accepted);
    }
    assert_eq!(accepted.len(), 128);
    assert!(accepted.values().all(|&n| n == 1), "{accepted:?}");
    let mut ids = support::drain(store, "ns").await;
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 128);
    assert_eq!(
        support::drain(store, "ns").await.len(),
        0,
        "each id was enqueued once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_accepts_sharing_a_batch_each_get_their_own_outcome() {
    let dir = support::TempDir::new("sqlite-batch");
    let store = SqliteInbox::open(dir.path().join("inbox.db"))
        .await
        .unwrap();
    accepts_sharing_a_batch_each_get_their_own_outcome(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_accepts_sharing_a_batch_each_get_their_own_outcome() {
    let server = support::postgres();
    let pool = sqlx::PgPool::connect(&server.url()).await.unwrap();
    let store = PostgresInbox::new(pool, &support::unique("batch")).unwrap();
    store.migrate().await.unwrap();
    accepts_sharing_a_batch_each_get_their_own_outcome(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_accepts_sharing_a_batch_each_get_their_own_outcome() {
    let server = support::Redis::start();
    let store = RedisInbox::connect(&server.url()).await.unwrap();
    accepts_sharing_a_batch_each_get_their_own_outcome(&store).await;
}

/// How many times the server ran `command`, from `INFO commandstats`.
fn command_calls(url: &str, command: &str) -> u64 {
    support::info(url, "commandstats")
        .lines()
        .find(|line| line.starts_with(&format!("cmdstat_{command}:")))
        .and_then(|line| line.split("calls=").nth(1)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Accepts that wait together go to one Redis server as one script call,
/// not one each (a call may span the namespace's 16 shards there): 250
/// accepts of 200 ids, queued together, make one or two script calls (not
/// 250), append each id once and answer the 50 repeats duplicate.
#[tokio::test(flavor = "current_thread")]
async fn redis_accepts_waiting_together_go_to_the_server_as_one_script_call() {
    let server = support::Redis::start();
    let url = server.url();
    let store = RedisInbox::connect(&url).await.unwrap();
    // The namespace's first accept records its shard count.
    assert_eq!(
        store
            .accept(&event("ns", "evt_first", SMALL))
            .await
            .unwrap(),
        Acceptance::Accepted
    );
    let scripts = || command_calls(&url, "evalsha") + command_calls(&url, "eval");
    let (scripts_before, appends_before) = (scripts(), command_calls(&url, "xadd"));
    // On one thread, every accept queues before the batching task runs.
    let outcomes = futures_util::future::join_all((0..250).map(|n| {
        let store = &store;
        async move {
            let id = format!("evt_{}", n % 200);
            store.accept(&event("ns", &id, SMALL)).await.unwrap()
        }
    }))
    .await;
    let accepted = outcomes
        .iter()
        .filter(|outcome| **outcome == Acceptance::Accepted)
        .count();
    assert_eq!((accepted, outcomes.len() - accepted), (200, 50));
    assert_eq!(command_calls(&url, "xadd") - appends_before, 200);
    let calls = scripts() - scripts_before;
    // Two when tokio's cooperative budget (128 operations a poll) makes
    // the test task yield once while queueing.
    assert!(
        (1..=2).contains(&calls),
        "250 accepts queued together made {calls} script calls"
    );
}

/// One event of a Redis batch whose append the server refuses (its
/// shard's stream key holds a string) fails alone: its caller gets the
/// server's error and its claim is gone, so its retry is accepted, while
/// the events of the same call in other shards are accepted once.
#[tokio::test(flavor = "current_thread")]
async fn a_refused_append_in_a_redis_batch_fails_only_its_own_accept() {
    let server = support::Redis::start();
    let url = server.url();
    let store = RedisInbox::connect(&url).await.unwrap();
    assert_eq!(
        store.accept(&event("ns", "warm_up", SMALL)).await.unwrap(),
        Acceptance::Accepted
    );
    // `evt_1` hashes to shard 2 of 16 (FNV-1a, fixed for good).
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut raw = crate::patient_redis::patient_redis(&client).await;
    let _: () = redis::cmd("DEL")
        .arg("hooklatch:{ns/2}:inbox")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("hooklatch:{ns/2}:inbox")
        .arg("not a stream")
        .query_async(&mut raw)
        .await
        .unwrap();
    let ids: Vec<String> = (1..=64).map(|n| format!("evt_{n}")).collect();
    let accept_all = || {
        futures_util::future::join_all(ids.iter().map(|id| {
            let store = &store;
            async move { store.accept(&event("ns", id, SMALL)).await }
        }))
    };
    let first = accept_all().await;
    let failed: Vec<&String> = ids
        .iter()
        .zip(&first)
        .filter(|(_, outcome)| outcome.is_err())
        .map(|(id, _)| id)
        .collect();
    assert!(failed.contains(&&"evt_1".to_owned()), "{failed:?}");
    assert!(failed.len() < ids.len(), "only shard 2's accepts fail");
    assert!(first.iter().all(|outcome| matches!(
        outcome,
        Ok(Acceptance::Accepted) | Err(DedupError::Store(_))
    )));

    let _: () = redis::cmd("DEL")
        .arg("hooklatch:{ns/2}:inbox")
        .query_async(&mut raw)
        .await
        .unwrap();
    let again = accept_all().await;
    for ((id, before), after) in ids.iter().zip(&first).zip(&again) {
        let expected = if before.is_err() {
            Acceptance::Accepted
        } else {
            Acceptance::Duplicate
        };
        assert_eq!(after.as_ref().unwrap(), &expected, "{id}");
    }
    let mut drained = support::drain(&store, "ns").await;
    drained.sort();
    let mut expected: Vec<String> = ids.clone();
    expected.push("warm_up".to_owned());
    expected.sort();
    assert_eq!(drained, expected, "each event in the inbox once");
}

/// A batch whose transaction fails answers each of its callers with the
/// error and keeps none of its claims: every caller answered `Accepted` has
/// its event in the inbox, and every caller that got an error has no claim
/// (its retry is accepted). Callers that gave up do not break the batch.
/// The store refuses bodies of 100 bytes or more (`injected failure`).
async fn a_failed_batch_fails_each_caller_and_keeps_none_of_its_claims<
    S: InboxQueue + Clone + 'static,
>(
    store: &S,
) {
    let tasks: Vec<_> = (0..200)
        .map(|n| {
            let store = store.clone();
            tokio::spawn(async move {
                let id = format!("evt_{n}");
                let body = if n % 20 == 0 { LARGE } else { SMALL };
                if n % 25 == 1 {
                    // Gives up at once: dropped while queued or committing.
                    let _ =
                        tokio::time::timeout(Duration::ZERO, store.accept(&event("ns", &id, body)))
                            .await;
                    return (id, None);
                }
                (
                    id.clone(),
                    Some(store.accept(&event("ns", &id, body)).await),
                )
            })
        })
        .collect();
    let mut answered = Vec::new();
    for task in tasks {
        answered.push(task.await.unwrap());
    }
    let in_inbox: HashSet<String> = support::drain(store, "ns").await.into_iter().collect();
    let mut failed = 0;
    for (id, outcome) in answered {
        match outcome {
            Some(Ok(acceptance)) => {
                assert_eq!(acceptance, Acceptance::Accepted, "{id}");
                assert!(in_inbox.contains(&id), "{id} was answered accepted");
            }
            Some(Err(error)) => {
                failed += 1;
                assert!(
                    error.to_string().contains("injected failure"),
                    "{id}: {error}"
                );
                assert!(!in_inbox.contains(&id), "{id} failed but was enqueued");
                assert_eq!(
                    store.accept(&event("ns", &id, SMALL)).await.unwrap(),
                    Acceptance::Accepted,
                    "{id} failed, so its claim was not kept"
                );
            }
            None => {}
        }
    }
    assert!(failed >= 10, "the large bodies failed: {failed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_a_failed_batch_fails_each_caller_and_keeps_none_of_its_claims() {
    let dir = support::TempDir::new("sqlite-batch-fail");
    let store = SqliteInbox::open(dir.path().join("inbox.db"))
        .await
        .unwrap();
    sqlx::query(
        "CREATE TRIGGER small_bodies BEFORE INSERT ON hooklatch_inbox \
         WHEN length(NEW.body) >= 100 BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
    )
    .execute(store.pool())
    .await
    .unwrap();
    a_failed_batch_fails_each_caller_and_keeps_none_of_its_claims(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_failed_batch_fails_each_caller_and_keeps_none_of_its_claims() {
    let server = support::postgres();
    let pool = sqlx::PgPool::connect(&server.url()).await.unwrap();
    let prefix = support::unique("batchfail");
    let store = PostgresInbox::new(pool.clone(), &prefix).unwrap();
    store.migrate().await.unwrap();
    for statement in [
        "CREATE FUNCTION {prefix}_refuse() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN IF octet_length(NEW.body) >= 100 THEN RAISE EXCEPTION 'injected failure'; END IF; \
         RETURN NEW; END $$",
        "CREATE TRIGGER small_bodies BEFORE INSERT ON {prefix}_inbox \
         FOR EACH ROW EXECUTE FUNCTION {prefix}_refuse()",
    ] {
        sqlx::query(AssertSqlSafe(statement.replace("{prefix}", &prefix)))
            .execute(&pool)
            .await
            .unwrap();
    }
    a_failed_batch_fails_each_caller_and_keeps_none_of_its_claims(&store).await;
}

#[tokio::test]
async fn postgres_rolled_back_caller_transaction_keeps_no_claim() {
    let server = support::postgres();
    let pool = sqlx::PgPool::connect(&server.url()).await.unwrap();
    let prefix = support::unique("tx");
    let store = PostgresInbox::new(pool.clone(), &prefix).unwrap();
    store.migrate().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE {prefix}_jobs (event_id TEXT PRIMARY KEY)"
    )))
    .execute(&pool)
    .await
    .unwrap();

    let mut tx = pool.begin().await.unwrap();
    assert_eq!(
        store.claim_in(&mut tx, "ns", "evt").await.unwrap(),
        Acceptance::Accepted
    );
    tx.rollback().await.unwrap(); // the app's own enqueue failed

    let mut tx = pool.begin().await.unwrap();
    assert_eq!(
        store.claim_in(&mut tx, "ns", "evt").await.unwrap(),
        Acceptance::Accepted,
        "a rolled-back claim does not count"
    );
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {prefix}_jobs (event_id) VALUES ('evt')"
    )))
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let mut tx = pool.begin().await.unwrap();
    assert_eq!(
        store.claim_in(&mut tx, "ns", "evt").await.unwrap(),
        Acceptance::Duplicate
    );
}

#[tokio::test]
async fn sqlite_rolled_back_caller_transaction_keeps_no_claim() {
    let dir = support::TempDir::new("sqlite-tx");
    let store = SqliteInbox::open(dir.path().join("inbox.db"))
        .await
        .unwrap();
    let mut tx = store.pool().begin().await.unwrap();
    assert_eq!(
        store.claim_in(&mut tx, "ns", "evt").await.unwrap(),
        Acceptance::Accepted
    );
    tx.rollback().await.unwrap();
    let mut tx = store.pool().begin().await.unwrap();
    assert_eq!(
        store.claim_in(&mut tx, "ns", "evt").await.unwrap(),
        Acceptance::Accepted
    );
    tx.commit().await.unwrap();
    assert_eq!(
        store.accept(&event("ns", "evt", SMALL)).await.unwrap(),
        Acceptance::Duplicate
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_migrations_racing_each_other_both_succeed() {
    let server = support::postgres();
    let prefix = support::unique("race");
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (url, prefix) = (server.url(), prefix.clone());
            tokio::spawn(async move {
                let pool = sqlx::PgPool::connect(&url).await.unwrap();
                PostgresInbox::new(pool, &prefix).unwrap().migrate().await
            })
        })
        .collect();
    for task in tasks {
        task.await
            .unwrap()
            .expect("every concurrent migrate succeeds");
    }
}

/// Stores opening one new file at once all succeed: the first switches it
/// to WAL, which SQLite refuses the others at once (no busy wait), and
/// they try again instead of failing. Repeated, as one round rarely
/// meets the race.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_migrations_racing_each_other_both_succeed() {
    use hooklatch::sequence::SqliteSequences;
    for round in 0..20 {
        let dir = support::TempDir::new("sqlite-race");
        let path = dir.path().join("inbox.db");
        let tasks: Vec<_> = (0..8)
            .map(|opener| {
                let path = path.clone();
                tokio::spawn(async move {
                    if opener % 2 == 0 {
                        SqliteInbox::open(path)
                            .await
                            .map(drop)
                            .map_err(|e| e.to_string())
                    } else {
                        SqliteSequences::open(path)
                            .await
                            .map(drop)
                            .map_err(|e| e.to_string())
                    }
                })
            })
            .collect();
        for task in tasks {
            if let Err(error) = task.await.unwrap() {
                panic!("round {round}: every concurrent open succeeds: {error}");
            }
        }
    }
}

/// A purge asked to go below the retention still keeps every claim inside
/// it: a provider's retry within the dedup window stays a duplicate. Past
/// the retention, old claims go and recent ones stay.
#[tokio::test]
async fn purge_never_forgets_a_claim_inside_the_retention() {
    use hooklatch::dedup::{MemoryInbox, StoreOptions};
    let dir = support::TempDir::new("sqlite-purge");
    let sqlite = SqliteInbox::open(dir.path().join("inbox.db"))
        .await
        .unwrap();
    let memory = MemoryInbox::new();
    let _ = sqlite.accept(&event("ns", "evt", SMALL)).await.unwrap();
    let _ = memory.accept(&event("ns", "evt", SMALL)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(sqlite.purge(Duration::ZERO).await.unwrap(), 0);
    assert_eq!(memory.purge(Duration::ZERO), 0);
    for answer in [
        sqlite.accept(&event("ns", "evt", SMALL)).await.unwrap(),
        memory.accept(&event("ns", "evt", SMALL)).await.unwrap(),
    ] {
        assert_eq!(answer, Acceptance::Duplicate, "a retry inside the window");
    }

    // 2 s: "new" must still be kept when the purge runs, however slowly.
    let short = StoreOptions::default().with_retention(Duration::from_secs(2));
    let (sqlite, memory) = (
        sqlite.with_options(short.clone()),
        memory.with_options(short),
    );
    let _ = sqlite.accept(&event("ns", "old", SMALL)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let _ = sqlite.accept(&event("ns", "new", SMALL)).await.unwrap();
    assert_eq!(
        sqlite.purge(Duration::ZERO).await.unwrap(),
        2,
        "evt and old"
    );
    assert_eq!(
        sqlite.accept(&event("ns", "new", SMALL)).await.unwrap(),
        Acceptance::Duplicate
    );
    assert_eq!(
        sqlite.accept(&event("ns", "old", SMALL)).await.unwrap(),
        Acceptance::Accepted
    );
    assert_eq!(
        memory.purge(Duration::ZERO),
        1,
        "evt, past the short retention"
    );
}

/// A SQLite pool below `synchronous=FULL` would answer before the flush:
/// `migrate` refuses it and says how to open the pool; a FULL one passes.
#[tokio::test]
async fn sqlite_refuses_a_pool_that_would_answer_before_the_flush() {
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions, SqliteSynchronous};
    let dir = support::TempDir::new("sqlite-synchronous");
    let options = SqliteConnectOptions::new()
        .filename(dir.path().join("inbox.db"))
        .create_if_missing(true);
    let normal = SqlitePoolOptions::new()
        .connect_with(options.clone().synchronous(SqliteSynchronous::Normal))
        .await
        .unwrap();
    let error = SqliteInbox::new(normal, "hooklatch")
        .unwrap()
        .migrate()
        .await
        .unwrap_err();
    assert!(error.to_string().contains("synchronous"), "{error}");
    let full = SqlitePoolOptions::new()
        .connect_with(options.synchronous(SqliteSynchronous::Full))
        .await
        .unwrap();
    SqliteInbox::new(full, "hooklatch")
        .unwrap()
        .migrate()
        .await
        .expect("FULL is durable");
}

/// A pool (or role, or database) with `synchronous_commit = off` commits
/// without waiting for the flush. An accept, and a worker's take, are
/// answered only once written to disk all the same: with the WAL writer
/// slowed to 10 s, the WAL is flushed up to its end the moment each
/// returns. A take lost in a crash would hand its events to a second
/// worker inside the first one's visibility.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_accepts_and_takes_are_flushed_before_the_answer_even_with_synchronous_commit_off()
{
    let (_server, admin, unflushed) = flush::postgres_with_lazy_wal_writer().await;
    PostgresInbox::new(admin.clone(), "hooklatch")
        .unwrap()
        .migrate()
        .await
        .unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_with(unflushed)
        .await
        .unwrap();
    let store = PostgresInbox::new(pool, "hooklatch").unwrap();
    for n in 0..5 {
        let id = format!("evt_{n}");
        assert_eq!(
            store.accept(&event("ns", &id, SMALL)).await.unwrap(),
            Acceptance::Accepted
        );
        assert!(
            flush::wal_flushed(&admin).await,
            "{id} was answered before its WAL was flushed"
        );
    }
    let taken = store.take("ns", "worker", 5).await.unwrap();
    assert_eq!(taken.len(), 5);
    assert!(
        flush::wal_flushed(&admin).await,
        "a take was answered before its WAL was flushed"
    );
}

/// What one `accept` call did, and when.
struct Call {
    id: usize,
    started: Instant,
    finished: Instant,
    outcome: Result<Acceptance, String>,
}

/// How long the server stays down.
const OUTAGE: Duration = Duration::from_secs(3);

/// Turns a store's tables back into what a release before the inbox kept
/// metadata made: no `meta` column, no record of that upgrade.
fn before_metadata(prefix: &str) -> [AssertSqlSafe<String>; 2] {
    [
        AssertSqlSafe(format!("ALTER TABLE {prefix}_inbox DROP COLUMN meta")),
        AssertSqlSafe(format!(
            "DELETE FROM hooklatch_schema_versions WHERE component = 'inbox-meta:{prefix}_inbox'"
        )),
    ]
}

#[tokio::test]
async fn sqlite_inbox_from_before_metadata_upgrades_in_place_and_keeps_its_events() {
    let dir = support::TempDir::new("sqlite-upgrade");
    let path = dir.path().join("inbox.db");
    let old = SqliteInbox::open(&path).await.unwrap();
    let _ = old.accept(&event("ns", "old_evt", SMALL)).await.unwrap();
    drop(old);
    // A connection of its own: SQLite checks an `ALTER TABLE` against the
    // schema the connection last read, which a pooled one may hold from
    // before the migration.
    let mut connection = <sqlx::SqliteConnection as sqlx::Connection>::connect(&format!(
        "sqlite:{}",
        path.display()
    ))
    .await
    .unwrap();
    for statement in before_metadata("hooklatch") {
        sqlx::query(statement)
            .execute(&mut connection)
            .await
            .unwrap();
    }
    drop(connection);
    let upgraded = SqliteInbox::open(&path).await.unwrap();
    let meta = hooklatch::dedup::EventMeta::with_type("ping");
    let _ = upgraded
        .accept(&event("ns", "new_evt", SMALL).with_meta(&meta))
        .await
        .unwrap();
    let taken = upgraded.take("ns", "w", 10).await.unwrap();
    let found: Vec<_> = taken
        .iter()
        .map(|e| (e.id.as_str(), e.meta.event_type.as_deref()))
        .collect();
    assert_eq!(found, [("old_evt", None), ("new_evt", Some("ping"))]);
}

#[tokio::test]
async fn postgres_inbox_from_before_metadata_upgrades_in_place_and_keeps_its_events() {
    let server = support::postgres();
    let pool = sqlx::PgPool::connect(&server.url()).await.unwrap();
    let prefix = support::unique("upgrade");
    let old = PostgresInbox::new(pool.clone(), &prefix).unwrap();
    old.migrate().await.unwrap();
    let _ = old.accept(&event("ns", "old_evt", SMALL)).await.unwrap();
    for statement in before_metadata(&prefix) {
        sqlx::query(statement).execute(&pool).await.unwrap();
    }
    let upgraded = PostgresInbox::new(pool.clone(), &prefix).unwrap();
    upgraded.migrate().await.unwrap();
    let meta = hooklatch::dedup::EventMeta::with_type("ping");
    let _ = upgraded
        .accept(&event("ns", "new_evt", SMALL).with_meta(&meta))
        .await
        .unwrap();
    let taken = upgraded.take("ns", "w", 10).await.unwrap();
    let found: Vec<_> = taken
        .iter()
        .map(|e| (e.id.as_str(), e.meta.event_type.as_deref()))
        .collect();
    assert_eq!(found, [("old_evt", None), ("new_evt", Some("ping"))]);
}

/// Turns a store's tables back into what a release before the inbox kept
/// its counts made: no counts table, triggers, taken index or record of
/// that upgrade (on Postgres also no trigger functions).
fn before_counts(prefix: &str, postgres: bool) -> Vec<AssertSqlSafe<String>> {
    let inbox = format!("{prefix}_inbox");
    let mut statements = Vec::new();
    for name in ["added", "removed", "changed", "emptied"] {
        if postgres {
            statements.push(format!("DROP TRIGGER {inbox}_{name} ON {inbox}"));
            statements.push(format!("DROP FUNCTION {inbox}_{name}()"));
        } else if name != "emptied" {
            statements.push(format!("DROP TRIGGER {inbox}_{name}"));
        }
    }
    statements.extend([
        format!("DROP TABLE {inbox}_counts"),
        format!("DROP INDEX {inbox}_taken"),
        format!("DELETE FROM hooklatch_schema_versions WHERE component = 'inbox-counts:{inbox}'"),
    ]);
    statements.into_iter().map(AssertSqlSafe).collect()
}

/// What the upgrade to kept counts must show: the events accepted before
/// it (`a`..`d`, `a` taken) counted, and the counts kept from then on.
async fn counts_start_from_the_events_already_there<S: InboxQueue>(
    old: &S,
    make_old: impl AsyncFnOnce(),
    upgraded: impl AsyncFnOnce() -> S,
) {
    for id in ["a", "b", "c"] {
        let _ = old.accept(&event("ns", id, SMALL)).await.unwrap();
    }
    make_old().await;
    let _ = old.accept(&event("ns", "d", SMALL)).await.unwrap();
    let _ = old.accept(&event("other", "a", SMALL)).await.unwrap();
    let held = old.take("ns", "w", 1).await.unwrap();
    let store = upgraded().await;
    let stats = |waiting, taken| {
        let mut stats = hooklatch::dedup::InboxStats::default();
        (stats.waiting, stats.taken) = (waiting, taken);
        stats
    };
    assert_eq!(store.stats("ns").await.unwrap(), stats(3, 1));
    assert_eq!(store.stats("other").await.unwrap(), stats(1, 0));
    let _ = store.accept(&event("ns", "e", SMALL)).await.unwrap();
    store.ack(&held[0]).await.unwrap();
    assert_eq!(store.stats("ns").await.unwrap(), stats(4, 0));
}

#[tokio::test]
async fn sqlite_inbox_from_before_kept_counts_counts_the_events_already_there() {
    let dir = support::TempDir::new("sqlite-counts");
    let path = dir.path().join("inbox.db");
    let old = SqliteInbox::open(&path).await.unwrap();
    let url = format!("sqlite:{}", path.display());
    counts_start_from_the_events_already_there(
        &old,
        async || {
            let mut connection = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
                .await
                .unwrap();
            for statement in before_counts("hooklatch", false) {
                sqlx::query(statement)
                    .execute(&mut connection)
                    .await
                    .unwrap();
            }
        },
        async || SqliteInbox::open(&path).await.unwrap(),
    )
    .await;
}

#[tokio::test]
async fn postgres_inbox_from_before_kept_counts_counts_the_events_already_there() {
    let server = support::postgres();
    let pool = sqlx::PgPool::connect(&server.url()).await.unwrap();
    let prefix = support::unique("counts");
    let old = PostgresInbox::new(pool.clone(), &prefix).unwrap();
    old.migrate().await.unwrap();
    counts_start_from_the_events_already_there(
        &old,
        async || {
            for statement in before_counts(&prefix, true) {
                sqlx::query(statement).execute(&pool).await.unwrap();
            }
        },
        async || {
            let upgraded = PostgresInbox::new(pool.clone(), &prefix).unwrap();
            upgraded.migrate().await.unwrap();
            upgraded
        },
    )
    .await;
}

/// The counts follow rows written by hand too (an operator's `UPDATE`,
/// `DELETE`, `INSERT`), since the database's triggers keep them, not the
/// store's statements; `run` runs one statement on the store's database,
/// whose inbox table and byte string literal come with it.
async fn counts_follow_rows_written_by_hand<S: InboxQueue>(
    store: &S,
    (inbox, body): (&str, &str),
    run: impl AsyncFn(String),
) {
    let stats = |waiting, dead| {
        let mut stats = hooklatch::dedup::InboxStats::default();
        (stats.waiting, stats.dead) = (waiting, dead);
        stats
    };
    for id in ["a", "b", "c"] {
        let _ = store.accept(&event("ns", id, SMALL)).await.unwrap();
    }
    run(format!(
        "UPDATE {inbox} SET dead = TRUE WHERE event_id IN ('a', 'b')"
    ))
    .await;
    assert_eq!(store.stats("ns").await.unwrap(), stats(1, 2));
    run(format!(
        "UPDATE {inbox} SET dead = FALSE WHERE event_id = 'a'"
    ))
    .await;
    assert_eq!(store.stats("ns").await.unwrap(), stats(2, 1));
    run(format!("DELETE FROM {inbox} WHERE event_id IN ('b', 'c')")).await;
    assert_eq!(store.stats("ns").await.unwrap(), stats(1, 0));
    run(format!(
        "INSERT INTO {inbox} (namespace, event_id, body, received_at, available_at, dead) \
         VALUES ('ns', 'by_hand', {body}, 0, 0, TRUE)"
    ))
    .await;
    assert_eq!(store.stats("ns").await.unwrap(), stats(1, 1));
}

#[tokio::test]
async fn sqlite_counts_follow_rows_written_by_hand() {
    let dir = support::TempDir::new("sqlite-by-hand");
    let store = SqliteInbox::open(dir.path().join("inbox.db"))
        .await
        .unwrap();
    let pool = store.pool().clone();
    let table = ("hooklatch_inbox", "x'7b7d'");
    counts_follow_rows_written_by_hand(&store, table, async |statement| {
        sqlx::query(AssertSqlSafe(statement))
            .execute(&pool)
            .await
            .unwrap();
    })
    .await;
}

#[tokio::test]
async fn postgres_counts_follow_rows_written_by_hand_and_a_truncate() {
    let server = support::postgres();
    let pool = sqlx::PgPool::connect(&server.url()).await.unwrap();
    let prefix = support::unique("by_hand");
    let store = PostgresInbox::new(pool.clone(), &prefix).unwrap();
    store.migrate().await.unwrap();
    let inbox = format!("{prefix}_inbox");
    let run = async |statement: String| {
        sqlx::query(AssertSqlSafe(statement))
            .execute(&pool)
            .await
            .unwrap();
    };
    counts_follow_rows_written_by_hand(&store, (&inbox, "decode('7b7d', 'hex')"), run).await;
    run(format!("TRUNCATE {inbox}")).await;
    assert_eq!(
        store.stats("ns").await.unwrap(),
        hooklatch::dedup::InboxStats::default()
    );
    let _ = store.accept(&event("ns", "after", SMALL)).await.unwrap();
    assert_eq!(store.stats("ns").await.unwrap().waiting, 1);
}

/// Puts `count` claims made at the epoch (long past any retention) straight
/// into `{prefix}_claims`, in one statement both databases run.
fn old_claims(prefix: &str, count: u64) -> AssertSqlSafe<String> {
    AssertSqlSafe(format!(
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {count}) \
         INSERT INTO {prefix}_claims (namespace, event_id, claimed_at) \
         SELECT 'ns', 'old-' || x, 0 FROM n"
    ))
}

/// More old claims than one purge batch: every one is purged, over several
/// bounded batches, and a recent claim and a held lease survive.
async fn purge_takes_every_old_claim_in_batches<S>(store: &S, count: u64, purged: u64)
where
    S: InboxQueue + hooklatch::dedup::LeaseStore,
{
    assert_eq!(purged, count, "every old claim is purged");
    assert_eq!(
        store.accept(&event("ns", "old-1", SMALL)).await.unwrap(),
        Acceptance::Accepted,
        "a purged id is forgotten"
    );
    assert_eq!(
        store.accept(&event("ns", "recent", SMALL)).await.unwrap(),
        Acceptance::Duplicate,
        "a recent claim survives the purge"
    );
    assert!(matches!(
        store
            .claim("ns", "held", Duration::from_secs(60))
            .await
            .unwrap(),
        hooklatch::dedup::Claim::InProgress { .. }
    ));
}

#[tokio::test]
async fn sqlite_purge_deletes_in_bounded_batches_and_misses_no_old_claim() {
    use hooklatch::dedup::{LeaseStore, PURGE_BATCH};
    let dir = support::TempDir::new("sqlite-purge-batches");
    let store = SqliteInbox::open(dir.path().join("inbox.db"))
        .await
        .unwrap();
    let count = 2 * PURGE_BATCH + 7;
    sqlx::query(old_claims("hooklatch", count))
        .execute(store.pool())
        .await
        .unwrap();
    let _ = store.accept(&event("ns", "recent", SMALL)).await.unwrap();
    let _ = store
        .claim("ns", "held", Duration::from_secs(60))
        .await
        .unwrap();
    let purged = store.purge(Duration::from_secs(3600)).await.unwrap();
    purge_takes_every_old_claim_in_batches(&store, count, purged).await;
}

#[tokio::test]
async fn postgres_purge_deletes_in_bounded_batches_and_misses_no_old_claim() {
    use hooklatch::dedup::{LeaseStore, PURGE_BATCH};
    let server = support::postgres();
    let pool = sqlx::PgPool::connect(&server.url()).await.unwrap();
    let prefix = support::unique("purge");
    let store = PostgresInbox::new(pool.clone(), &prefix).unwrap();
    store.migrate().await.unwrap();
    let count = 2 * PURGE_BATCH + 7;
    sqlx::query(old_claims(&prefix, count))
        .execute(&pool)
        .await
        .unwrap();
    let _ = store.accept(&event("ns", "recent", SMALL)).await.unwrap();
    let _ = store
        .claim("ns", "held", Duration::from_secs(60))
        .await
        .unwrap();
    let purged = store.purge(Duration::from_secs(3600)).await.unwrap();
    purge_takes_every_old_claim_in_batches(&store, count, purged).await;
}

/// Runs `callers` tasks accepting `ids` ids; after `stop_after` acceptances calls
/// `stop` (which returns once the server is down), waits [`OUTAGE`], calls
/// `restart` (which returns once it is up), and lets the tasks finish.
/// Returns the calls and when the server went down and came back.
async fn accept_through_outage<S: InboxQueue + Clone + 'static>(
    store: &S,
    namespace: &str,
    (callers, ids): (usize, usize),
    stop_after: usize,
    stop: impl FnOnce() + Send + 'static,
    restart: impl FnOnce() + Send + 'static,
) -> (Vec<Call>, Instant, Instant) {
    let accepted = Arc::new(AtomicUsize::new(0));
    let stopped = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..callers)
        .map(|task| {
            let (store, namespace) = (store.clone(), namespace.to_owned());
            let (accepted, stopped) = (accepted.clone(), stopped.clone());
            tokio::spawn(async move {
                let mut calls = Vec::new();
                for id in (task..ids).step_by(callers) {
                    // Past the threshold, wait for the stop: however slowly
                    // the stop comes, work is left for the outage.
                    while accepted.load(Ordering::Relaxed) >= stop_after
                        && !stopped.load(Ordering::Relaxed)
                    {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    // Once the server is down, calls fail fast: pace them so
                    // the outage is spread over many calls.
                    if stopped.load(Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    let started = Instant::now();
                    let body = id.to_string();
                    let outcome = store
                        .accept(&event(&namespace, &format!("evt_{id}"), body.as_bytes()))
                        .await
                        .map_err(|error| error.to_string());
                    if outcome == Ok(Acceptance::Accepted) {
                        accepted.fetch_add(1, Ordering::Relaxed);
                    }
                    calls.push(Call {
                        id,
                        started,
                        finished: Instant::now(),
                        outcome,
                    });
                }
                calls
            })
        })
        .collect();
    while accepted.load(Ordering::Relaxed) < stop_after {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::task::spawn_blocking(stop).await.unwrap();
    let down_since = Instant::now();
    stopped.store(true, Ordering::Relaxed);
    tokio::time::sleep(OUTAGE).await;
    let restarting = Instant::now();
    tokio::task::spawn_blocking(restart).await.unwrap();
    let mut calls = Vec::new();
    for task in tasks {
        calls.extend(task.await.unwrap());
    }
    (calls, down_since, restarting)
}

/// Retries every id whose call failed, until the store answers, then checks
/// that each id is in the inbox exactly once and that nothing was accepted
/// twice or while the server was down.
async fn check_after_restart<S: InboxQueue>(
    store: &S,
    namespace: &str,
    ids: usize,
    calls: &[Call],
    down_since: Instant,
    up_again: Instant,
) {
    let during_outage: Vec<_> = calls
        .iter()
        .filter(|call| call.started >= down_since && call.finished <= up_again)
        .collect();
    assert!(
        during_outage.len() > 30,
        "the outage saw only {} calls",
        during_outage.len()
    );
    for call in &during_outage {
        assert!(
            call.outcome.is_err(),
            "evt_{} got {:?} while the server was down",
            call.id,
            call.outcome
        );
    }
    let mut accepted: HashMap<usize, usize> = HashMap::new();
    for call in calls {
        if call.outcome == Ok(Acceptance::Accepted) {
            *accepted.entry(call.id).or_default() += 1;
        }
    }
    let failed: HashSet<usize> = calls
        .iter()
        .filter(|call| call.outcome.is_err())
        .map(|call| call.id)
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in failed {
        let body = id.to_string();
        loop {
            match store
                .accept(&event(namespace, &format!("evt_{id}"), body.as_bytes()))
                .await
            {
                Ok(Acceptance::Accepted) => {
                    *accepted.entry(id).or_default() += 1;
                    break;
                }
                // The call failed on our side after the server committed.
                Ok(Acceptance::Duplicate) => break,
                Err(_) => {
                    assert!(Instant::now() < deadline, "the store never came back");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    assert!(
        accepted.values().all(|&n| n == 1),
        "an id was accepted twice"
    );
    let mut inbox: Vec<usize> = support::drain(store, namespace)
        .await
        .iter()
        .map(|id| id["evt_".len()..].parse().unwrap())
        .collect();
    inbox.sort_unstable();
    assert_eq!(
        inbox,
        (0..ids).collect::<Vec<_>>(),
        "every id enqueued exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_stopped_mid_run_loses_and_doubles_nothing() {
    postgres_stopped_mid_run(8).await;
}

/// 64 callers, so the server goes down under batches of many accepts:
/// each caller of the batch in flight gets an error, and none answered
/// accepted is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_stopped_mid_batch_loses_nothing_answered_accepted() {
    postgres_stopped_mid_run(64).await;
}

/// Accepts 3,000 ids from `callers` tasks while the server stops
/// (`-m immediate`, as a crash) and comes back; see [`check_after_restart`].
async fn postgres_stopped_mid_run(callers: usize) {
    let server = Arc::new(support::Postgres::start());
    // Fail fast while the server is down, as a receiver answering 503 would.
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_millis(300))
        .connect_lazy(&server.url())
        .unwrap();
    let store = PostgresInbox::new(pool, "hooklatch").unwrap();
    // The first connection may take longer than the pool's 300 ms on a
    // loaded machine: tried again, not failed.
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(error) = store.migrate().await {
        assert!(Instant::now() < deadline, "no connection: {error}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (stopper, restarter) = (server.clone(), server.clone());
    let (calls, down_since, up_again) = accept_through_outage(
        &store,
        "ns",
        (callers, 3_000),
        400,
        move || stopper.stop_immediately(),
        move || restarter.start_again(),
    )
    .await;
    check_after_restart(&store, "ns", 3_000, &calls, down_since, up_again).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_killed_mid_run_loses_and_doubles_nothing() {
    let server = Arc::new(std::sync::Mutex::new(support::Redis::start()));
    let url = server.lock().unwrap().url();
    let store = RedisInbox::connect(&url).await.unwrap();
    let (killer, restarter) = (server.clone(), server.clone());
    let (calls, down_since, up_again) = accept_through_outage(
        &store,
        "ns",
        (8, 3_000),
        400,
        move || killer.lock().unwrap().kill(),
        move || restarter.lock().unwrap().start_again(),
    )
    .await;
    check_after_restart(&store, "ns", 3_000, &calls, down_since, up_again).await;
}

/// `count` accepts at once, each of its own event; all
/// must be accepted.
async fn accept_many_at_once(store: &PostgresInbox, namespace: &str, count: usize) {
    let calls: Vec<_> = (0..count)
        .map(|n| {
            let (store, namespace) = (store.clone(), namespace.to_owned());
            tokio::spawn(async move {
                store
                    .accept(&event(&namespace, &format!("evt_{n}"), b"{}"))
                    .await
            })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), Acceptance::Accepted);
    }
}

/// A store of its own (table `name`) on a pool of at most
/// `max_connections` to `server`, migrated, and the pool. The caller keeps
/// `server`: a private one stops when dropped.
async fn postgres_store_on_pool(
    server: &support::Server,
    max_connections: u32,
    name: &str,
) -> (sqlx::PgPool, PostgresInbox) {
    postgres_store_with(max_connections, name, server.url().parse().unwrap()).await
}

/// [`postgres_store_on_pool`] with the connect options given.
async fn postgres_store_with(
    max_connections: u32,
    name: &str,
    options: sqlx::postgres::PgConnectOptions,
) -> (sqlx::PgPool, PostgresInbox) {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(max_connections)
        .connect_with(options)
        .await
        .unwrap();
    let store = PostgresInbox::new(pool.clone(), name).unwrap();
    store.migrate().await.unwrap();
    (pool, store)
}

/// The accept writers keep their connections between batches only while
/// accepts keep coming: once the store is quiet, every connection is idle
/// in the pool again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_accept_writers_give_their_connections_back_once_quiet() {
    let server = support::postgres();
    let (pool, store) = postgres_store_on_pool(&server, 16, &support::unique("quiet")).await;
    accept_many_at_once(&store, "ns", 64).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while pool.num_idle() < pool.size() as usize {
        assert!(
            Instant::now() < deadline,
            "{} of {} connections still out of the pool 5 s after the last accept",
            pool.size() as usize - pool.num_idle(),
            pool.size()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// On a small pool (a pool of your own, say) the accept writers hand each
/// connection back after its batch: right after a burst of accepts, the
/// pool's every connection can be had at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_accept_writers_never_hold_a_small_pool() {
    let server = support::postgres();
    let (pool, store) = postgres_store_on_pool(&server, 2, &support::unique("small")).await;
    accept_many_at_once(&store, "ns", 64).await;
    let both = async { (pool.acquire().await, pool.acquire().await) };
    let (first, second) = while_accepts_trickle(&store, both)
        .await
        .expect("the writers still hold the pool");
    first.unwrap();
    second.unwrap();
}

/// Runs `wanted` for up to 10 s while an accept comes every 20 ms: a
/// writer that kept its connection would never go quiet and hand it back,
/// so only one that hands it back after each batch lets `wanted` finish.
/// (A bound of a few hundred ms without the trickle would fail on a loaded
/// machine, and a longer one would prove nothing: a kept connection goes
/// back after a quiet second.)
async fn while_accepts_trickle<T>(
    store: &PostgresInbox,
    wanted: impl Future<Output = T>,
) -> Result<T, tokio::time::error::Elapsed> {
    let trickling = Arc::new(AtomicBool::new(true));
    let trickle = {
        let (store, trickling) = (store.clone(), trickling.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while trickling.load(Ordering::SeqCst) {
                n += 1;
                let _ = store
                    .accept(&event("trickle", &format!("evt_{n}"), b"{}"))
                    .await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let result = tokio::time::timeout(Duration::from_secs(10), wanted).await;
    trickling.store(false, Ordering::SeqCst);
    trickle.await.unwrap();
    result
}

/// On a pool large enough to keep connections, a writer keeps its
/// connection after a batch only if the pool has another to give: with
/// all but two of a pool of 8 held elsewhere, one can be had right after
/// a burst of accepts (two writers keeping both would leave none).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_accept_writers_keep_nothing_the_pool_cannot_spare() {
    let server = support::postgres();
    let (pool, store) = postgres_store_on_pool(&server, 8, &support::unique("spare")).await;
    let mut elsewhere = Vec::new();
    for _ in 0..6 {
        elsewhere.push(pool.acquire().await.unwrap());
    }
    accept_many_at_once(&store, "ns", 64).await;
    while_accepts_trickle(&store, pool.acquire())
        .await
        .expect("the writers kept what the pool could not spare")
        .unwrap();
}

/// Closing the pool ends even while accepts keep coming: a busy writer
/// hands its kept connection back at the next batch instead of running
/// on it until it has been kept 30 s. (The close is given 10 s; the
/// callers stop once it ended or was given up on.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_closing_the_pool_ends_while_accepts_keep_coming() {
    let server = support::postgres();
    let (pool, store) = postgres_store_on_pool(&server, 16, &support::unique("closing")).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let callers: Vec<_> = (0..8)
        .map(|caller| {
            let (store, stop) = (store.clone(), stop.clone());
            tokio::spawn(async move {
                let mut accepted = 0_u32;
                for n in 0.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    let id = format!("c{caller}_{n}");
                    // After the close, accepts fail; before it, each is new.
                    if let Ok(outcome) = store.accept(&event("ns", &id, b"{}")).await {
                        assert_eq!(outcome, Acceptance::Accepted, "{id}");
                        accepted += 1;
                    }
                }
                accepted
            })
        })
        .collect();
    // The writers are busy and keep their connections.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let closed = tokio::time::timeout(Duration::from_secs(10), pool.close()).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut accepted = 0;
    for caller in callers {
        accepted += caller.await.unwrap();
    }
    assert!(accepted > 0, "no accept ran before the close");
    closed.expect("the pool did not close within 10 s while accepts kept coming");
}

/// Once the pool is closed, no accept runs on a connection a writer kept
/// from before: right after a burst (the writers still keep theirs), two
/// accepts one after the other after `close` (one for each of the two
/// writers, which take turns) fail rather than being answered, and the
/// close ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_no_accept_runs_on_a_kept_connection_once_the_pool_is_closed() {
    let server = support::postgres();
    let (pool, store) = postgres_store_on_pool(&server, 16, &support::unique("closed")).await;
    accept_many_at_once(&store, "ns", 64).await;
    // `close` marks the pool closed when called, before it is awaited.
    let closing = pool.close();
    for id in ["after_close_1", "after_close_2"] {
        assert!(
            store.accept(&event("ns", id, b"{}")).await.is_err(),
            "{id}, accepted after the close, was answered"
        );
    }
    tokio::time::timeout(Duration::from_secs(30), closing)
        .await
        .expect("the pool did not close within 30 s");
}

/// The connections the accept writers keep are dropped by the server (as
/// in a failover or a restart): an accept on one fails, never answers
/// `Accepted` for what was not kept, and the store recovers within one
/// failed call per writer; every event that failed is accepted on retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_accepts_recover_when_the_server_drops_the_writers_connections() {
    let server = support::postgres();
    let name = support::unique("dropped");
    let options: sqlx::postgres::PgConnectOptions = server.url().parse().unwrap();
    let (_pool, store) = postgres_store_with(16, &name, options.application_name(&name)).await;
    let admin = sqlx::PgPool::connect(&server.url()).await.unwrap();
    accept_many_at_once(&store, "ns", 64).await;
    let dropped: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
    )
    .bind(&name)
    .fetch_all(&admin)
    .await
    .unwrap();
    assert!(!dropped.is_empty(), "no connection of the store was open");
    let mut failed = Vec::new();
    for n in 0..20 {
        let id = format!("after_{n}");
        match store.accept(&event("ns", &id, b"{}")).await {
            Ok(outcome) => assert_eq!(outcome, Acceptance::Accepted, "{id}"),
            Err(_) => failed.push(id),
        }
    }
    assert!(
        failed.len() <= 2,
        "{} accepts failed after the connections were dropped: {failed:?}",
        failed.len()
    );
    for id in &failed {
        assert_eq!(
            store.accept(&event("ns", id, b"{}")).await.unwrap(),
            Acceptance::Accepted,
            "{id} failed, yet was kept"
        );
    }
    assert_eq!(store.stats("ns").await.unwrap().waiting, 84);
}

/// A writer that has just committed keeps its connection out of the pool
/// for the next batch, rather than hand it back and test it again. Three
/// rounds, two of which must see it kept: a handed-back connection is idle
/// in the pool well within 200 ms, and a kept one goes back only after a
/// quiet second, so only a stall of most of a second twice could mislead.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_busy_accept_writer_keeps_its_connection() {
    let server = support::postgres();
    let (pool, store) = postgres_store_on_pool(&server, 16, &support::unique("busy")).await;
    let mut kept = 0;
    for round in 0..3 {
        accept_many_at_once(&store, &format!("ns{round}"), 8).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        if pool.num_idle() < pool.size() as usize {
            kept += 1;
        }
    }
    assert!(
        kept >= 2,
        "every connection was back in the pool 200 ms after a batch in {} rounds of 3",
        3 - kept
    );
}

/// The shard of event `id` in a Redis inbox of 16 shards: FNV-1a (64
/// bits) over the id, as the store's documented key layout has it.
fn redis_shard_of(id: &str) -> u64 {
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    hash % 16
}

/// On Redis, an `ack_many` over several shards of which one fails (its
/// attempts hash replaced by a string, so its script fails with
/// `WRONGTYPE`) says per delivery what was acked and what was not
/// (`AckedInPart`); acking the unanswered ones again, once the shard is
/// mended, acks them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_ack_many_with_a_failing_shard_says_which_deliveries_were_acked() {
    let server = support::redis();
    let store = RedisInbox::connect(&server.url()).await.unwrap();
    let namespace = support::unique("partack");
    for n in 0..64 {
        let id = format!("evt_{n}");
        let accepted = store
            .accept(&IncomingEvent::new(&namespace, &id, b"{}"))
            .await
            .unwrap();
        assert_eq!(accepted, Acceptance::Accepted);
    }
    let batch = store.take(&namespace, "worker", 64).await.unwrap();
    assert_eq!(batch.len(), 64);
    let broken = redis_shard_of("evt_0");
    let attempts = format!("hooklatch:{{{namespace}/{broken}}}:attempts");
    let aside = format!("{attempts}-aside");
    let client = redis::Client::open(server.url()).unwrap();
    let mut raw = crate::patient_redis::patient_redis(&client).await;
    let () = redis::pipe()
        .cmd("RENAME")
        .arg(&attempts)
        .arg(&aside)
        .ignore()
        .cmd("SET")
        .arg(&attempts)
        .arg("not a hash")
        .ignore()
        .query_async(&mut raw)
        .await
        .unwrap();

    let error = store.ack_many(&batch).await.unwrap_err();
    let DedupError::AckedInPart { acked, .. } = error else {
        panic!("{error}");
    };
    for (delivery, acked) in batch.iter().zip(&acked) {
        let expected = (redis_shard_of(&delivery.id) != broken).then_some(true);
        assert_eq!(*acked, expected, "{}", delivery.id);
    }

    let () = redis::pipe()
        .cmd("DEL")
        .arg(&attempts)
        .ignore()
        .cmd("RENAME")
        .arg(&aside)
        .arg(&attempts)
        .ignore()
        .query_async(&mut raw)
        .await
        .unwrap();
    let rest: Vec<_> = batch
        .iter()
        .zip(&acked)
        .filter(|(_, acked)| acked.is_none())
        .map(|(delivery, _)| delivery.clone())
        .collect();
    assert!(!rest.is_empty());
    assert_eq!(store.ack_many(&rest).await.unwrap(), vec![true; rest.len()]);
    assert!(support::drain(&store, &namespace).await.is_empty());
}
