//! Dispatchers on one outbox whose hosts' clocks disagree, stamped over
//! every delivery store (memory, SQLite, Postgres, Redis on one server
//! and as a cluster) against real servers (see tests/support): leases and
//! due times follow the store's clock, not each dispatcher's, unless a
//! policy brings a clock of its own.

#[path = "support/receiver.rs"]
mod receiver;
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use hooklatch::sender::outbox::DeliveryState;
use hooklatch::sender::outbox::DeliveryStore;
use receiver::*;

#[path = "support/outbox_backends.rs"]
mod backends;
use backends::*;

const MINUTE: Duration = Duration::from_secs(60);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// This host's clock moved by `by`, ahead (or behind with `ahead` false).
fn skewed(by: Duration, ahead: bool) -> impl Fn() -> SystemTime + Send + Sync + 'static {
    move || {
        if ahead {
            SystemTime::now() + by
        } else {
            SystemTime::now() - by
        }
    }
}

/// How far `time` is from now on this host, either way.
fn apart_from_now(time: SystemTime) -> Duration {
    match time.duration_since(SystemTime::now()) {
        Ok(ahead) => ahead,
        Err(behind) => behind.duration(),
    }
}

/// Dispatcher A leases a delivery and holds it in a slow attempt;
/// dispatcher B, its clock 3 minutes ahead (past A's 5 s lease), polls the
/// same store meanwhile and leases nothing: the delivery is attempted
/// once, and A records it.
async fn skewed_clocks_never_lease_one_delivery_twice(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    let hold = Duration::from_millis(2_500);
    receiver.answer_id("msg_1", 200, hold);
    let policy =
        || every(Duration::from_millis(50), 3).with_attempt_timeout(Duration::from_secs(4));
    let a = dispatcher(backend.open().await, &receiver);
    let b = dispatcher(backend.open().await, &receiver).with_local_clock(skewed(3 * MINUTE, true));
    for dispatcher in [&a, &b] {
        add(dispatcher, policy()).await;
    }
    assert!(a.send(ENDPOINT, "msg_1", b"{}").await.unwrap());
    let running_a = a.start();
    wait_until("A is attempting msg_1", || async {
        receiver.started() == 1
    })
    .await;
    let running_b = b.start();
    tokio::time::sleep(hold / 2).await;
    running_b.stop().await;
    assert_eq!(
        receiver.started(),
        1,
        "a dispatcher whose clock is ahead leased a delivery another holds"
    );
    let store = backend.open().await;
    wait_until("A records msg_1", || async {
        state_of(&store, "msg_1").await == DeliveryState::Delivered
    })
    .await;
    running_a.stop().await;
    assert_eq!(receiver.successes().get("msg_1"), Some(&1));
    let delivery = store.delivery(ENDPOINT, "msg_1").await.unwrap().unwrap();
    assert_eq!(
        delivery.attempts.len(),
        1,
        "A's lease held: its attempt counts"
    );
}

/// Dispatcher B reads the store's clock, then its host's clock steps 3
/// minutes ahead (past A's 5 s lease) while A holds a delivery in a slow
/// attempt: B carries the store's time forward on its monotonic clock and
/// leases nothing of A's.
async fn a_host_clock_step_never_leases_a_held_delivery(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    let hold = Duration::from_millis(2_500);
    receiver.answer_id("msg_1", 200, hold);
    let policy =
        || every(Duration::from_millis(50), 3).with_attempt_timeout(Duration::from_secs(4));
    let step = Arc::new(AtomicBool::new(false));
    let stepped = Arc::clone(&step);
    let a = dispatcher(backend.open().await, &receiver);
    let b = dispatcher(backend.open().await, &receiver).with_local_clock(move || {
        if stepped.load(Ordering::SeqCst) {
            SystemTime::now() + 3 * MINUTE
        } else {
            SystemTime::now()
        }
    });
    for dispatcher in [&a, &b] {
        add(dispatcher, policy()).await;
    }
    // B's send reads the store's clock while its host's clock is right.
    assert!(b.send(ENDPOINT, "msg_0", b"{}").await.unwrap());
    step.store(true, Ordering::SeqCst);
    assert!(a.send(ENDPOINT, "msg_1", b"{}").await.unwrap());
    let running_a = a.start();
    wait_until("A has sent msg_0 and is attempting msg_1", || async {
        receiver.started() == 2 && receiver.successes().get("msg_0") == Some(&1)
    })
    .await;
    let running_b = b.start();
    tokio::time::sleep(hold / 2).await;
    running_b.stop().await;
    assert_eq!(
        receiver.started(),
        2,
        "a dispatcher whose host clock stepped leased a delivery another holds"
    );
    let store = backend.open().await;
    wait_until("A records msg_1", || async {
        state_of(&store, "msg_1").await == DeliveryState::Delivered
    })
    .await;
    running_a.stop().await;
    let delivery = store.delivery(ENDPOINT, "msg_1").await.unwrap().unwrap();
    assert_eq!(delivery.attempts.len(), 1, "A's lease held");
}

/// A dispatcher whose clock is a day ahead stores a new delivery due now
/// on the store's clock, and a dispatcher with a right clock delivers it
/// at once.
async fn a_clock_far_ahead_does_not_park_a_new_delivery(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    let ahead = dispatcher(backend.open().await, &receiver).with_local_clock(skewed(DAY, true));
    let right = dispatcher(backend.open().await, &receiver);
    for dispatcher in [&ahead, &right] {
        add(dispatcher, every(Duration::from_millis(50), 3)).await;
    }
    assert!(ahead.send(ENDPOINT, "msg_1", b"{}").await.unwrap());
    let store = backend.open().await;
    let stored = store.delivery(ENDPOINT, "msg_1").await.unwrap().unwrap();
    let due = stored.due_at.expect("pending");
    // A day of skew would put it a day out; a slow machine, seconds.
    assert!(
        apart_from_now(due) < 10 * MINUTE,
        "due {:?} from now",
        apart_from_now(due)
    );
    let running = right.start();
    wait_until("msg_1 is delivered", || async {
        state_of(&store, "msg_1").await == DeliveryState::Delivered
    })
    .await;
    running.stop().await;
    // Not held back by the 3 minutes of skew: wait_until gives up long
    // before those would pass.
}

/// A dispatcher whose clock is 3 minutes behind delivers at once what
/// another sent due now, and signs it with the store's time.
async fn a_clock_behind_delivers_what_is_due_at_once(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    let right = dispatcher(backend.open().await, &receiver);
    let behind =
        dispatcher(backend.open().await, &receiver).with_local_clock(skewed(3 * MINUTE, false));
    for dispatcher in [&right, &behind] {
        add(dispatcher, every(Duration::from_millis(50), 3)).await;
    }
    assert!(right.send(ENDPOINT, "msg_1", b"{}").await.unwrap());
    let running = behind.start();
    let store = backend.open().await;
    wait_until("msg_1 is delivered", || async {
        state_of(&store, "msg_1").await == DeliveryState::Delivered
    })
    .await;
    running.stop().await;
    // Not held back by the 3 minutes of skew: wait_until gives up long
    // before those would pass.
    let delivery = store.delivery(ENDPOINT, "msg_1").await.unwrap().unwrap();
    let sent_at = delivery.attempts[0].sent_at;
    // Signed with the store's time, not the clock 3 minutes behind.
    assert!(apart_from_now(sent_at) < MINUTE, "{sent_at:?}");
}

/// An idempotency key sent by a dispatcher whose clock is two hours
/// behind holds for its one-hour window on the store's clock: a dispatcher
/// with a right clock sending under the same key at once enqueues nothing.
async fn a_window_holds_across_skewed_clocks(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    let behind =
        dispatcher(backend.open().await, &receiver).with_local_clock(skewed(120 * MINUTE, false));
    let right = dispatcher(backend.open().await, &receiver);
    let policy = || every(Duration::from_millis(50), 3).with_idempotency_window(Some(60 * MINUTE));
    for dispatcher in [&behind, &right] {
        add(dispatcher, policy()).await;
    }
    let first = behind
        .send_with_key(ENDPOINT, "key-7", "msg_1", b"{}")
        .await
        .unwrap();
    let again = right
        .send_with_key(ENDPOINT, "key-7", "msg_2", b"{}")
        .await
        .unwrap();
    assert!(first.enqueued);
    assert!(
        !again.enqueued,
        "the key's window ended early on a slow clock"
    );
    assert_eq!(again.id, "msg_1");
}

/// A policy with a clock of its own (a test's, a drill's) keeps it: the
/// store's clock does not correct it.
async fn a_policy_clock_is_kept_as_it_is(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    let dispatcher = dispatcher(backend.open().await, &receiver);
    let policy = every(Duration::from_millis(50), 3).with_clock(skewed(DAY, true));
    add(&dispatcher, policy).await;
    assert!(dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap());
    let store = backend.open().await;
    let stored = store.delivery(ENDPOINT, "msg_1").await.unwrap().unwrap();
    let due = stored.due_at.expect("pending");
    assert!(due > SystemTime::now() + DAY - MINUTE, "{due:?}");
}

/// The store's clock, as every store reads it, is this host's here (one
/// host runs the tests and the servers): within the time a read can take
/// on a busy machine, far from any skew the tests above inject.
async fn the_store_time_is_the_servers(backend: impl Backend) {
    let store = backend.open().await;
    let now = store.store_time().await.unwrap();
    assert!(apart_from_now(now) < Duration::from_secs(30), "{now:?}");
}

macro_rules! suite {
    ($module:ident, $backend:expr) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn dispatchers_with_skewed_clocks_never_lease_one_delivery_twice() {
                skewed_clocks_never_lease_one_delivery_twice($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_step_of_one_hosts_clock_never_leases_a_delivery_another_holds() {
                a_host_clock_step_never_leases_a_held_delivery($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_dispatcher_whose_clock_is_far_ahead_does_not_park_a_new_delivery() {
                a_clock_far_ahead_does_not_park_a_new_delivery($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_dispatcher_whose_clock_is_behind_delivers_what_is_due_at_once() {
                a_clock_behind_delivers_what_is_due_at_once($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_idempotency_window_holds_across_dispatchers_whose_clocks_disagree() {
                a_window_holds_across_skewed_clocks($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_policy_with_its_own_clock_keeps_it() {
                a_policy_clock_is_kept_as_it_is($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_store_time_is_read_from_the_store() {
                the_store_time_is_the_servers($backend).await;
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
