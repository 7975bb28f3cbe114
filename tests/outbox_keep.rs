//! What an outbox keeps and for how long, stamped over every delivery
//! store (memory, SQLite, Postgres, Redis on one server and as a
//! cluster): the published checks of `hooklatch::testing::outbox` (sends
//! under an idempotency key, remembered for a window and claimed with the
//! enqueue in one atomic step, expired keys forgotten, each outcome purged
//! after its own retention, with its attempts, in bounded batches), and
//! two dispatchers sending with one key.

#[path = "support/receiver.rs"]
mod receiver;
mod support;

use std::time::Duration;

use hooklatch::sender::outbox::{DeliveryStore, Retention};

#[path = "support/outbox_backends.rs"]
mod backends;
use backends::*;
use receiver::{Receiver, add, dispatcher, every, wait_until};

const ENDPOINT: &str = "orders";
const DAY: Duration = Duration::from_secs(24 * 3600);

/// Two dispatchers on one store, each opened as another process would,
/// send with one key at once: one delivery is enqueued and delivered, and
/// every sender is told its id. The policy's retention purges it once
/// delivered, while the key, remembered for its window, still names it.
async fn two_dispatchers_with_one_key_deliver_once(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    let policy = every(Duration::from_millis(20), 3)
        .with_idempotency_window(Some(DAY))
        .with_retention(Retention::KEEP_ALL.with_delivered(Some(Duration::ZERO)));
    let mut dispatchers = Vec::new();
    for _ in 0..2 {
        let one = dispatcher(backend.open().await, &receiver);
        add(&one, policy.clone()).await;
        dispatchers.push(one);
    }
    let running: Vec<_> = dispatchers.iter().map(|one| one.start()).collect();
    let sends: Vec<_> = (0..8)
        .map(|n| {
            let one = dispatchers[n % 2].clone();
            tokio::spawn(async move {
                let id = format!("msg_{n}");
                one.send_with_key(ENDPOINT, "order-7", &id, b"{}")
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut results = Vec::new();
    for send in sends {
        results.push(send.await.unwrap());
    }
    let first: Vec<_> = results.iter().filter(|keyed| keyed.enqueued).collect();
    assert_eq!(first.len(), 1, "{results:?}");
    let id = first[0].id.clone();
    assert!(results.iter().all(|keyed| keyed.id == id), "{results:?}");
    wait_until("the one delivery is answered", || async {
        !receiver.answered().is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    for one in running {
        one.stop().await;
    }
    let answered: Vec<String> = receiver.answered().into_iter().map(|(id, _)| id).collect();
    assert_eq!(answered, std::slice::from_ref(&id));

    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(dispatchers[0].purge_by_policy().await.unwrap(), 1);
    let store = backend.open().await;
    assert_eq!(store.delivery(ENDPOINT, &id).await.unwrap(), None);
    let again = dispatchers[1]
        .send_with_key(ENDPOINT, "order-7", "msg_9", b"{}")
        .await
        .unwrap();
    assert_eq!((again.id, again.enqueued), (id, false));
}

macro_rules! suite {
    ($module:ident, $backend:expr) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_idempotency_key_enqueues_once_within_its_window_and_is_free_after() {
                hooklatch::testing::outbox::a_key_enqueues_once_within_its_window(&Fresh($backend))
                    .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_sends_with_one_key_enqueue_exactly_once() {
                hooklatch::testing::outbox::concurrent_sends_with_one_key_enqueue_once(&Fresh(
                    $backend,
                ))
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn two_dispatchers_sending_with_one_key_at_once_deliver_one_event() {
                two_dispatchers_with_one_key_deliver_once($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn both_enqueues_refuse_an_empty_or_overlong_name_and_store_nothing() {
                hooklatch::testing::outbox::both_enqueues_refuse_bad_names_and_store_nothing(
                    &Fresh($backend),
                )
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn expired_idempotency_keys_are_forgotten_and_live_ones_kept() {
                hooklatch::testing::outbox::expired_keys_are_forgotten(&Fresh($backend)).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn each_outcome_is_purged_after_its_own_retention_with_its_attempts() {
                hooklatch::testing::outbox::each_outcome_is_purged_after_its_retention(&Fresh(
                    $backend,
                ))
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_pending_delivery_in_an_attempt_outlives_the_backlog_retention() {
                hooklatch::testing::outbox::a_leased_delivery_is_kept_until_its_lease_ends(&Fresh(
                    $backend,
                ))
                .await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_retention_purge_takes_every_batch_and_reads_past_recent_ends() {
                hooklatch::testing::outbox::the_purge_takes_every_batch(&Fresh($backend)).await;
            }
        }
    };
}

suite!(on_memory, memory());
suite!(on_sqlite, sqlite());
suite!(on_any_sqlite, any_sqlite());
suite!(on_postgres, postgres());
suite!(on_redis, redis());
suite!(on_redis_cluster, redis_cluster());
