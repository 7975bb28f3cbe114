//! RedisInbox on a real Redis Cluster: a namespace spread over every
//! master; a master killed during the replica wait of an accept its
//! replicas never received; and a failover drill on three masters with two
//! replicas each that kills the master of a busy shard with SIGKILL while
//! its replicas lag and accepts and duplicates run; and an outbox write
//! whose master is lost during its replica wait. (The store suites in
//! `tests/dedup.rs` and `tests/sequence.rs` also run on a cluster.)

mod support;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hooklatch::dedup::{Acceptance, DedupError, Inbox, IncomingEvent, RedisInbox};
use support::RedisCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_namespace_spreads_over_every_master() {
    let cluster = RedisCluster::start();
    let store = RedisInbox::connect(&cluster.url()).await.unwrap();
    let namespace = support::unique("spread");
    for n in 0..200 {
        let id = format!("evt_{n}");
        let accepted = store
            .accept(&IncomingEvent::new(&namespace, &id, b"{}"))
            .await
            .unwrap();
        assert_eq!(accepted, Acceptance::Accepted);
    }
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3);
    for master in masters {
        assert!(
            cluster.keys_on(master) > 0,
            "master {master} holds none of the namespace's keys"
        );
    }
    let ids = support::drain(&store, &namespace).await;
    assert_eq!(ids.len(), 200);
}

/// With replica acks, an accept whose master dies while `WAIT` blocks (its
/// replicas never got the write) must not be answered 2xx unless the event
/// is kept by the cluster that answers: the cluster client re-sends the
/// call to the replica promoted in the master's place, which never had the
/// claim or the event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_lost_during_the_replica_wait_never_answers_2xx_for_an_accept_it_took_along() {
    let mut cluster = RedisCluster::start_with_replicas(2);
    let namespace = support::unique("wait");
    let claim = format!("hooklatch:{{{namespace}}}:claim:evt");
    let master = cluster.master_of(&claim);
    let replicas = cluster.replicas_of(master);
    let hold = cluster.hold_replication_of(master).await;
    let store = RedisInbox::connect(&cluster.url())
        .await
        .unwrap()
        .with_shards(1)
        .unwrap()
        .with_replica_acks(1, Duration::from_secs(5));
    // The namespace's shard count is recorded while replication flows.
    assert_eq!(
        store
            .accept(&IncomingEvent::new(&namespace, "warm", b"{}"))
            .await
            .unwrap(),
        Acceptance::Accepted
    );

    hold.hold(true);
    let accepting = tokio::spawn({
        let (store, namespace) = (store.clone(), namespace.clone());
        async move {
            store
                .accept(&IncomingEvent::new(&namespace, "evt", b"{}"))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !accepting.is_finished(),
        "the accept waits for its replicas"
    );
    cluster.kill(master);
    cluster.take_over(replicas[0]);
    let answer = accepting.await.unwrap();
    println!("accept across the failover: {answer:?}");
    drop(hold);

    if answer.is_ok() {
        let client = redis::cluster::ClusterClient::new(
            cluster
                .url()
                .trim_start_matches("redis+cluster://")
                .split(',')
                .map(|node| format!("redis://{node}/"))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let mut connection = client.get_async_connection().await.unwrap();
        let kept: bool = redis::cmd("EXISTS")
            .arg(&claim)
            .query_async(&mut connection)
            .await
            .unwrap();
        assert!(kept, "answered {answer:?}, but no node holds the claim");
        let ids = support::drain(&store, &namespace).await;
        assert!(
            ids.iter().any(|id| id == "evt"),
            "answered {answer:?}, but the inbox lost the event: {ids:?}"
        );
    }
}

/// The outbox's shard of `endpoint`: FNV-1a over its name, 16 shards
/// (the layout `RedisOutbox` documents and keeps).
fn outbox_shard(endpoint: &str) -> u32 {
    let hash = endpoint.bytes().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    hash % 16
}

/// With replica acks, an attempt's record (a write to a delivery that
/// already exists, leased) whose master dies while `WAIT` blocks is
/// answered Ok only if the node that answers holds the record: the script
/// runs again on the promoted replica, which had the lease but never got
/// the record. Asking that node whether the key exists would say yes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_outbox_write_whose_master_is_lost_during_the_replica_wait_is_answered_for_the_new_master()
 {
    use hooklatch::sender::RedisOutbox;
    use hooklatch::sender::outbox::{DeliveryState, DeliveryStore};
    use hooklatch::sender::rules::{Attempt, Final, Step};

    let mut cluster = RedisCluster::start_with_replicas(2);
    let prefix = support::unique("obwait");
    let endpoint = "acme";
    let delivery = format!(
        "{prefix}:{{{prefix}/out/{}}}:{endpoint}/d:msg_1",
        outbox_shard(endpoint)
    );
    let master = cluster.master_of(&delivery);
    let replicas = cluster.replicas_of(master);
    let plain = RedisOutbox::connect(&cluster.url())
        .await
        .unwrap()
        .with_prefix(&prefix)
        .unwrap();
    let store = plain.clone().with_replica_acks(1, Duration::from_secs(5));
    // The delivery and its lease are on every replica before the hold.
    let now = std::time::SystemTime::now();
    assert!(store.enqueue(endpoint, "msg_1", b"{}", now).await.unwrap());
    let due = store
        .take_due(endpoint, now, 1, Duration::from_secs(60))
        .await
        .expect("a lease is confirmed");
    let taken = due.taken.into_iter().next().expect("msg_1 leased");
    let hold = cluster.hold_replication_of(master).await;

    hold.hold(true);
    let recording = tokio::spawn({
        let store = store.clone();
        async move {
            let attempt = Attempt::new(1, now, Ok(200));
            store
                .finish(&taken, &attempt, Step::Done(Final::Delivered), None)
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !recording.is_finished(),
        "the record waits for its replicas"
    );
    cluster.kill(master);
    cluster.take_over(replicas[0]);
    let answer = recording.await.unwrap();
    println!("record across the failover: {answer:?}");
    drop(hold);
    if answer.is_ok() {
        let kept = plain.delivery(endpoint, "msg_1").await.unwrap().unwrap();
        assert_eq!(
            kept.state,
            DeliveryState::Delivered,
            "answered {answer:?}, but the new master has no record of the attempt"
        );
    }
}

/// What the drill saw.
#[derive(Debug, Default)]
struct Drill {
    ids: usize,
    /// Ids the store answered `Accepted` or `Duplicate` for at least once:
    /// the sender was told 2xx.
    acknowledged: usize,
    /// Acknowledged ids missing from the inbox afterwards.
    lost: Vec<String>,
    /// Ids answered `Accepted` more than once.
    accepted_twice: Vec<String>,
    /// Ids in the inbox more than once.
    enqueued_twice: Vec<String>,
    /// Calls that failed (and were retried, as a sender retries a 5xx).
    failed_calls: usize,
    replicas_behind: usize,
}

/// On three masters with two replicas each, senders deliver `ids` events
/// to one namespace, each twice (a duplicate delivery), retrying every
/// failed call as a sender retries a 5xx. While they run, the replicas of
/// the master holding a busy shard stop receiving (their replication is
/// held back in a proxy) and, 800 ms later (past the 500 ms replica wait),
/// that master is killed with
/// SIGKILL; once a replica has taken over, the dead node is started again
/// (it comes back as a replica). Then the inbox is drained and compared
/// with what the senders were told.
async fn failover_drill(replica_acks: bool, ids: usize) -> Drill {
    let mut cluster = RedisCluster::start_with_replicas(2);
    let namespace = support::unique("drill");
    let busy_key = format!("hooklatch:{{{namespace}/0}}:inbox");
    let old_master = cluster.master_of(&busy_key);
    let hold = cluster.hold_replication_of(old_master).await;
    let mut store = RedisInbox::connect(&cluster.url()).await.unwrap();
    if replica_acks {
        store = store.with_replica_acks(1, Duration::from_millis(500));
    }
    let answers: Arc<Mutex<HashMap<String, Vec<Acceptance>>>> = Arc::default();
    let failures: Arc<Mutex<(usize, usize)>> = Arc::default();
    let senders: Vec<_> = (0..8)
        .map(|sender| {
            let (store, namespace) = (store.clone(), namespace.clone());
            let (answers, failures) = (Arc::clone(&answers), Arc::clone(&failures));
            tokio::spawn(async move {
                for n in (sender..ids).step_by(8) {
                    let id = format!("evt_{n}");
                    for _delivery in 0..2 {
                        let deadline = Instant::now() + Duration::from_secs(90);
                        loop {
                            let event = IncomingEvent::new(&namespace, &id, b"{}");
                            match store.accept(&event).await {
                                Ok(answer) => {
                                    answers
                                        .lock()
                                        .unwrap()
                                        .entry(id.clone())
                                        .or_default()
                                        .push(answer);
                                    break;
                                }
                                Err(error) => {
                                    {
                                        let mut failures = failures.lock().unwrap();
                                        failures.0 += 1;
                                        if matches!(error, DedupError::ReplicasBehind { .. }) {
                                            failures.1 += 1;
                                        }
                                    }
                                    assert!(
                                        Instant::now() < deadline,
                                        "{id} never accepted: {error}"
                                    );
                                    tokio::time::sleep(Duration::from_millis(100)).await;
                                }
                            }
                        }
                    }
                }
            })
        })
        .collect();
    // Let the run get going, then let the busy shard's replicas fall
    // behind and kill their master.
    while answers.lock().unwrap().len() < ids / 4 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    hold.hold(true);
    tokio::time::sleep(Duration::from_millis(800)).await;
    cluster.kill(old_master);
    drop(hold);
    let new_master = tokio::task::block_in_place(|| cluster.wait_for_failover(&busy_key));
    assert_ne!(new_master, old_master);
    cluster.restart(old_master);
    tokio::task::block_in_place(|| cluster.wait_until_ready());
    for sender in senders {
        sender.await.unwrap();
    }

    let in_inbox = support::drain(&store, &namespace).await;
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for id in &in_inbox {
        *counts.entry(id.as_str()).or_default() += 1;
    }
    let answers = answers.lock().unwrap();
    let (failed_calls, replicas_behind) = *failures.lock().unwrap();
    let sorted = |ids: Vec<String>| {
        ids.into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    };
    Drill {
        ids,
        acknowledged: answers.len(),
        lost: sorted(
            answers
                .keys()
                .filter(|id| !counts.contains_key(id.as_str()))
                .cloned()
                .collect(),
        ),
        accepted_twice: sorted(
            answers
                .iter()
                .filter(|(_, got)| got.iter().filter(|a| **a == Acceptance::Accepted).count() > 1)
                .map(|(id, _)| id.clone())
                .collect(),
        ),
        enqueued_twice: sorted(
            counts
                .iter()
                .filter(|(_, n)| **n > 1)
                .map(|(id, _)| (*id).to_owned())
                .collect(),
        ),
        failed_calls,
        replicas_behind,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_with_replica_acks_loses_nothing_and_accepts_nothing_twice() {
    let drill = failover_drill(true, 2000).await;
    println!("failover drill with replica acks: {drill:?}");
    assert_eq!(
        drill.acknowledged, drill.ids,
        "every event was acknowledged"
    );
    assert!(drill.lost.is_empty(), "lost: {:?}", drill.lost);
    assert!(
        drill.accepted_twice.is_empty(),
        "accepted twice: {:?}",
        drill.accepted_twice
    );
    assert!(
        drill.enqueued_twice.is_empty(),
        "enqueued twice: {:?}",
        drill.enqueued_twice
    );
    // That the failover happened is asserted inside the drill (a replica
    // took over); the cluster client may ride it out without one failed
    // call.
}

/// Without replica acks a failover may lose accepts the sender was already
/// told 2xx about (and then accept their retries as new). This reports what
/// happened; what it asserts holds either way: a claim and its event are
/// lost or kept together, so nothing is enqueued twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failover_without_replica_acks_reports_what_it_lost() {
    let drill = failover_drill(false, 2000).await;
    println!(
        "failover drill without replica acks: {} ids, {} acknowledged, {} lost after a 2xx, \
         {} accepted twice, {} enqueued twice, {} failed calls",
        drill.ids,
        drill.acknowledged,
        drill.lost.len(),
        drill.accepted_twice.len(),
        drill.enqueued_twice.len(),
        drill.failed_calls
    );
    assert_eq!(drill.acknowledged, drill.ids);
    assert!(
        drill.enqueued_twice.is_empty(),
        "enqueued twice: {:?}",
        drill.enqueued_twice
    );
    assert_eq!(drill.replicas_behind, 0);
}

/// A proxy in front of a cluster looks like one server but refuses a
/// script whose keys span slots (`CROSSSLOT`), as every cluster node does.
/// Reached through one master's plain address, a batch of accepts into two
/// namespaces is refused once, sent again a shard at a time (nothing of the
/// refused call ran), and every later batch keeps to one shard: each event
/// accepted once, each repeat a duplicate.
#[tokio::test(flavor = "current_thread")]
async fn batched_accepts_refused_across_slots_are_sent_again_a_shard_at_a_time() {
    let cluster = RedisCluster::start();
    let master = cluster.masters()[0];
    let prefix = support::unique("proxy");
    let namespaces: Vec<String> = (0..)
        .map(|n| format!("{prefix}{n}"))
        .filter(|namespace| cluster.master_of(&format!("{{{namespace}}}")) == master)
        .take(2)
        .collect();
    let store = RedisInbox::connect(&format!("redis://127.0.0.1:{master}"))
        .await
        .unwrap()
        .with_shards(1)
        .unwrap();
    for namespace in &namespaces {
        let first = IncomingEvent::new(namespace, "evt_0", b"{}");
        assert_eq!(store.accept(&first).await.unwrap(), Acceptance::Accepted);
    }
    for round in 0..2 {
        // On one thread every accept of the round queues before the batch
        // goes: one batch over both namespaces' slots.
        let outcomes = futures_util::future::join_all(namespaces.iter().flat_map(|namespace| {
            let store = &store;
            (1..=5).map(move |n| async move {
                let id = format!("evt_{n}");
                store
                    .accept(&IncomingEvent::new(namespace, &id, b"{}"))
                    .await
                    .unwrap()
            })
        }))
        .await;
        let expected = if round == 0 {
            Acceptance::Accepted
        } else {
            Acceptance::Duplicate
        };
        assert!(
            outcomes.iter().all(|outcome| *outcome == expected),
            "{outcomes:?}"
        );
    }
    for namespace in &namespaces {
        assert_eq!(support::drain(&store, namespace).await.len(), 6);
    }
}
