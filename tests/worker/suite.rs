//! The worker over every store: outcomes, heartbeats, order per key,
//! shutdown and a crash, each against the real store. Waits are for a
//! condition (with a generous bound that only catches a hang), never a
//! bound on how fast the machine is.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hooklatch::dedup::{EventMeta, Inbox, InboxQueue, IncomingEvent, StoreOptions};
use hooklatch::worker::{Backoff, Event, Failure, Router, Worker};

use super::Backend;

/// A backoff that retries at once, so retries do not wait in tests.
const NO_WAIT: Backoff = Backoff {
    base: Duration::from_millis(1),
    cap: Duration::from_millis(1),
};

/// Polls `done` until it holds; panics after two minutes (a hang, not a
/// slow machine).
async fn wait_until<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !done().await {
        assert!(
            std::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn accept<S: Inbox>(store: &S, namespace: &str, id: &str) {
    let event = IncomingEvent::new(namespace, id, br#"{"ok":true}"#);
    let _ = store.accept(&event).await.expect("accept");
}

/// A handler that always fails is retried with backoff until the store's
/// last attempt, then dead-lettered with its error's text as the reason,
/// and the time it died; a requeue clears both.
async fn failing_handlers_are_retried_then_dead_lettered_with_their_error<B: Backend>() {
    let f = B::fixture(StoreOptions::default().with_max_attempts(3)).await;
    accept(&f.store, &f.namespace, "evt_fails").await;
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let handler = move |event: Event| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            Err::<(), _>(std::io::Error::other(format!(
                "upstream said no on attempt {}",
                event.attempt()
            )))
        }
    };
    let running = Worker::new(f.store.clone(), &f.namespace, handler)
        .with_backoff(NO_WAIT)
        .start();
    wait_until("the event is dead-lettered", || async {
        f.store.stats(&f.namespace).await.unwrap().dead == 1
    })
    .await;
    let report = running.stop(Duration::from_secs(5)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 3, "one call per attempt");
    assert_eq!(
        (report.retried, report.dead_lettered, report.handled),
        (2, 1, 0)
    );
    let dead = f.store.dead_letters(&f.namespace, 10).await.unwrap();
    let letter = dead[0].dead.as_ref().expect("a dead letter says why");
    assert_eq!(letter.reason, "upstream said no on attempt 3");
    assert!(letter.at_millis.is_some_and(|at| at > 1_700_000_000_000));
    assert_eq!(f.store.requeue_dead(&f.namespace, None).await.unwrap(), 1);
    let again = f.store.take(&f.namespace, "w", 1).await.unwrap();
    assert_eq!(again[0].dead, None, "a requeued event carries no reason");
}

/// A panic in a handler is caught, whether in its future or in the
/// closure before it returns one: the worker keeps running, and the event
/// is retried, then dead-lettered with the panic's message.
async fn a_panicking_handler_is_dead_lettered_with_the_panic_message<B: Backend>() {
    let f = B::fixture(StoreOptions::default().with_max_attempts(2)).await;
    accept(&f.store, &f.namespace, "evt_panics").await;
    accept(&f.store, &f.namespace, "evt_fine").await;
    accept(&f.store, &f.namespace, "evt_panics_at_once").await;
    let handler = |event: Event| {
        assert!(
            event.id() != "evt_panics_at_once",
            "no future for {}",
            event.id()
        );
        async move {
            assert!(event.id() != "evt_panics", "bad data in {}", event.id());
            Ok::<(), Failure>(())
        }
    };
    let running = Worker::new(f.store.clone(), &f.namespace, handler)
        .with_backoff(NO_WAIT)
        .start();
    wait_until("the panicking events are dead-lettered", || async {
        let stats = f.store.stats(&f.namespace).await.unwrap();
        stats.dead == 2 && stats.waiting == 0 && stats.taken == 0
    })
    .await;
    let report = running.stop(Duration::from_secs(5)).await;
    assert_eq!(report.handled, 1, "{report:?}");
    let mut dead: Vec<(String, String)> = f
        .store
        .dead_letters(&f.namespace, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|letter| (letter.id.clone(), letter.dead.unwrap().reason))
        .collect();
    dead.sort();
    assert_eq!(dead[0].0, "evt_panics");
    assert!(
        dead[0]
            .1
            .starts_with("the handler panicked: bad data in evt_panics"),
        "{dead:?}"
    );
    assert_eq!(dead[1].0, "evt_panics_at_once");
    assert!(
        dead[1]
            .1
            .starts_with("the handler panicked: no future for evt_panics_at_once"),
        "{dead:?}"
    );
}

/// `Failure::dead_letter` dead-letters on the first attempt whatever
/// attempts are left; a router dead-letters a body that is not its type,
/// acks a type nothing handles, and hands a typed route its payload.
async fn handlers_choose_their_outcome_and_routes_get_typed_payloads<B: Backend>() {
    #[derive(serde::Deserialize)]
    struct Paid {
        amount: u64,
    }
    let f = B::fixture(StoreOptions::default()).await;
    let typed = |id: &str, event_type: &str, body: &'static [u8]| {
        (id.to_owned(), EventMeta::with_type(event_type), body)
    };
    for (id, meta, body) in [
        typed("evt_paid", "invoice.paid", br#"{"amount":42}"#),
        typed("evt_garbled", "invoice.paid", b"not json"),
        typed("evt_refund", "charge.refunded", b"{}"),
        typed("evt_unknown", "account.updated", b"{}"),
    ] {
        let event = IncomingEvent::new(&f.namespace, &id, body).with_meta(&meta);
        let _ = f.store.accept(&event).await.unwrap();
    }
    let paid = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&paid);
    let router = Router::new()
        .on("invoice.paid", move |_event: Event, invoice: Paid| {
            seen.lock().unwrap().push(invoice.amount);
            async { Ok::<(), Failure>(()) }
        })
        .on_event("charge.refunded", |_event: Event| async {
            Err::<(), _>(Failure::dead_letter("refunds are handled by hand"))
        });
    let running = Worker::new(f.store.clone(), &f.namespace, router).start();
    wait_until("every event settles", || async {
        let stats = f.store.stats(&f.namespace).await.unwrap();
        stats.dead == 2 && stats.waiting == 0 && stats.taken == 0
    })
    .await;
    let report = running.stop(Duration::from_secs(5)).await;
    assert_eq!((report.handled, report.dead_lettered), (2, 2), "{report:?}");
    assert_eq!(*paid.lock().unwrap(), [42]);
    let mut reasons: Vec<(String, String)> = f
        .store
        .dead_letters(&f.namespace, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|entry| (entry.id, entry.dead.unwrap().reason))
        .collect();
    reasons.sort();
    assert_eq!(reasons[0].0, "evt_garbled");
    assert!(
        reasons[0].1.starts_with("the body is not a "),
        "{reasons:?}"
    );
    assert_eq!(
        reasons[1],
        (
            "evt_refund".to_owned(),
            "refunds are handled by hand".to_owned()
        )
    );
}

/// A handler that runs for three visibility timeouts keeps its event:
/// the worker's heartbeats hide it, a second worker polling the same
/// store never runs it, and the ack succeeds.
async fn a_handler_running_three_visibility_timeouts_keeps_its_event<B: Backend>() {
    // 4 s, beats every 2 s: a beat may come 2 s late (a loaded machine's
    // stalls) before the event lapses. The term runs on the store's clock,
    // which no test can pause.
    let visibility = Duration::from_secs(4);
    let f = B::fixture(StoreOptions::default().with_visibility_timeout(visibility)).await;
    accept(&f.store, &f.namespace, "evt_long").await;
    let (started, has_started) = tokio::sync::oneshot::channel();
    let started = Mutex::new(Some(started));
    let long = move |_event: Event| {
        if let Some(started) = started.lock().unwrap().take() {
            let _ = started.send(());
        }
        async move {
            tokio::time::sleep(visibility * 3).await;
            Ok::<(), Failure>(())
        }
    };
    let first = Worker::new(f.store.clone(), &f.namespace, long)
        .with_idle_poll(Duration::from_millis(20))
        .start();
    has_started.await.unwrap();
    let second_ran = Arc::new(AtomicBool::new(false));
    let ran = Arc::clone(&second_ran);
    let second = Worker::new(f.store.clone(), &f.namespace, move |_event: Event| {
        ran.store(true, Ordering::SeqCst);
        async { Ok::<(), Failure>(()) }
    })
    .with_idle_poll(Duration::from_millis(20))
    .start();
    wait_until("the long handler's event is acked", || async {
        first.report().handled == 1
    })
    .await;
    let (first, second) = (
        first.stop(Duration::from_secs(5)).await,
        second.stop(Duration::from_secs(5)).await,
    );
    assert!(!second_ran.load(Ordering::SeqCst), "a second worker ran it");
    assert_eq!((first.lost, second.handled), (0, 0));
    assert_eq!(f.store.stats(&f.namespace).await.unwrap().waiting, 0);
}

/// Eight handlers in flight, fifty keys, events of each key accepted
/// among the others' in a shuffled order: a key's handler calls never
/// overlap, and (where the store hands out a namespace in accept order)
/// come in the order its events were accepted.
async fn each_keys_events_run_one_at_a_time_in_accept_order<B: Backend>() {
    let f = B::fixture(StoreOptions::default()).await;
    let mut arrivals: Vec<(usize, usize)> = (0..50)
        .flat_map(|key| (0..4).map(move |n| (key, n)))
        .collect();
    fastrand::shuffle(&mut arrivals);
    // The accept order within each key is the shuffled one.
    let mut accepted: HashMap<usize, Vec<String>> = HashMap::new();
    for (key, n) in &arrivals {
        let id = format!("k{key}-e{n}");
        let body = format!(r#"{{"key":"k{key}"}}"#);
        let _ = f
            .store
            .accept(&IncomingEvent::new(&f.namespace, &id, body.as_bytes()))
            .await
            .unwrap();
        accepted.entry(*key).or_default().push(id);
    }
    let calls: Arc<Mutex<HashMap<String, Vec<String>>>> = Arc::default();
    let running_keys: Arc<Mutex<HashSet<String>>> = Arc::default();
    let overlaps = Arc::new(AtomicUsize::new(0));
    let (c, r, o) = (
        Arc::clone(&calls),
        Arc::clone(&running_keys),
        Arc::clone(&overlaps),
    );
    let handler = move |event: Event| {
        let (calls, running_keys, overlaps) = (Arc::clone(&c), Arc::clone(&r), Arc::clone(&o));
        async move {
            let key = event.json::<serde_json::Value>().unwrap()["key"]
                .as_str()
                .unwrap()
                .to_owned();
            if !running_keys.lock().unwrap().insert(key.clone()) {
                overlaps.fetch_add(1, Ordering::SeqCst);
            }
            calls
                .lock()
                .unwrap()
                .entry(key.clone())
                .or_default()
                .push(event.id().to_owned());
            tokio::time::sleep(Duration::from_millis(fastrand::u64(0..3))).await;
            running_keys.lock().unwrap().remove(&key);
            Ok::<(), Failure>(())
        }
    };
    let running = Worker::new(f.store.clone(), &f.namespace, handler)
        .with_concurrency(8)
        .ordered_by(|entry| {
            let body: serde_json::Value = entry.json().ok()?;
            Some(body["key"].as_str()?.to_owned())
        })
        .start();
    wait_until("all 200 events are handled", || async {
        running.report().handled == 200
    })
    .await;
    running.stop(Duration::from_secs(5)).await;
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "a key ran twice at once"
    );
    let calls = calls.lock().unwrap();
    assert_eq!(calls.values().map(Vec::len).sum::<usize>(), 200);
    if B::ORDERED_ACROSS_THE_NAMESPACE {
        for (key, ids) in &accepted {
            assert_eq!(&calls[&format!("k{key}")], ids, "key k{key}");
        }
    }
}

/// Stopped in the middle of a batch: what finished is acked, what did not
/// is given back ready, nothing is lost; a worker started afterwards runs
/// only what had not finished.
async fn a_stop_mid_batch_loses_nothing_and_reruns_only_the_unfinished<B: Backend>() {
    let f = B::fixture(StoreOptions::default()).await;
    for n in 0..10 {
        let id = if n < 3 {
            format!("slow-{n}")
        } else {
            format!("fast-{n}")
        };
        accept(&f.store, &f.namespace, &id).await;
    }
    let slow_started = Arc::new(AtomicUsize::new(0));
    let started = Arc::clone(&slow_started);
    let handler = move |event: Event| {
        let slow = event.id().starts_with("slow");
        if slow {
            started.fetch_add(1, Ordering::SeqCst);
        }
        async move {
            if slow {
                std::future::pending::<()>().await;
            }
            Ok::<(), Failure>(())
        }
    };
    let running = Worker::new(f.store.clone(), &f.namespace, handler).start();
    wait_until(
        "the fast events are acked and the slow ones run",
        || async { running.report().handled == 7 && slow_started.load(Ordering::SeqCst) == 3 },
    )
    .await;
    let report = running.stop(Duration::from_millis(100)).await;
    assert_eq!((report.handled, report.given_back), (7, 3), "{report:?}");
    let rerun = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&rerun);
    let restarted = Worker::new(f.store.clone(), &f.namespace, move |event: Event| {
        seen.lock().unwrap().push(event.id().to_owned());
        async { Ok::<(), Failure>(()) }
    })
    .start();
    wait_until("the restarted worker runs what was given back", || async {
        restarted.report().handled == 3
    })
    .await;
    restarted.stop(Duration::from_secs(5)).await;
    let mut rerun = rerun.lock().unwrap().clone();
    rerun.sort();
    assert_eq!(rerun, ["slow-0", "slow-1", "slow-2"]);
    let stats = f.store.stats(&f.namespace).await.unwrap();
    assert_eq!((stats.waiting, stats.taken, stats.dead), (0, 0, 0));
}

/// A worker whose runtime dies mid-batch (no stop, no give-back: a crash)
/// loses nothing: its events come back after the visibility timeout and
/// another worker handles them.
async fn a_worker_that_dies_mid_batch_loses_nothing<B: Backend>() {
    let f =
        B::fixture(StoreOptions::default().with_visibility_timeout(Duration::from_secs(1))).await;
    for n in 0..5 {
        accept(&f.store, &f.namespace, &format!("evt_{n}")).await;
    }
    let held = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&held);
    let doomed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let store = f.store.clone();
    let namespace = f.namespace.clone();
    doomed.spawn(async move {
        let _running = Worker::new(store, &namespace, move |_event: Event| {
            counted.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<Result<(), Failure>>()
        })
        .start();
        std::future::pending::<()>().await;
    });
    wait_until("the doomed worker holds every event", || async {
        held.load(Ordering::SeqCst) == 5
    })
    .await;
    doomed.shutdown_background();
    let survivor = Worker::new(f.store.clone(), &f.namespace, |_event: Event| async {
        Ok::<(), Failure>(())
    })
    .with_idle_poll(Duration::from_millis(50))
    .start();
    wait_until("another worker handles all five", || async {
        survivor.report().handled == 5
    })
    .await;
    survivor.stop(Duration::from_secs(5)).await;
    let stats = f.store.stats(&f.namespace).await.unwrap();
    assert_eq!((stats.waiting, stats.taken, stats.dead), (0, 0, 0));
}

/// The resource and number a test event's body names.
fn resource_and_number(entry: &hooklatch::dedup::InboxEntry) -> Option<(String, u64)> {
    let body: serde_json::Value = entry.json().ok()?;
    Some((body["resource"].as_str()?.to_owned(), body["n"].as_u64()?))
}

/// With a sequence tracker, each resource's events (accepted shuffled,
/// two resources interleaved, one number sent twice under two ids) are
/// applied once per number, in number order: a number past the next waits
/// (given back and retried) until the ones before it were applied, the
/// repeat is acked without running the handler, and nothing is
/// dead-lettered.
async fn sequenced_events_apply_in_order_skip_repeats_and_wait_for_gaps<B: Backend>() {
    use hooklatch::sequence::{FirstEvent, MemorySequences, Tracker};
    let f = B::fixture(StoreOptions::default().with_max_attempts(1_000)).await;
    let arrivals = [
        ("a3", "r1", 3),
        ("b2", "r2", 2),
        ("a1", "r1", 1),
        ("a4", "r1", 4),
        ("a1-again", "r1", 1),
        ("b1", "r2", 1),
        ("a2", "r1", 2),
    ];
    for (id, resource, number) in arrivals {
        let body = format!(r#"{{"resource":"{resource}","n":{number}}}"#);
        let event = IncomingEvent::new(&f.namespace, id, body.as_bytes());
        let _ = f.store.accept(&event).await.expect("accept");
    }
    // Every resource's numbers start at 1: a first event numbered 3 waits.
    let tracker = Tracker::new(MemorySequences::new()).with_first_event(FirstEvent::StartAt(1));
    let applied = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&applied);
    let running = Worker::new(f.store.clone(), &f.namespace, move |event: Event| {
        let body: serde_json::Value = event.json().unwrap();
        seen.lock().unwrap().push((
            body["resource"].as_str().unwrap().to_owned(),
            body["n"].as_u64().unwrap(),
        ));
        async { Ok::<(), Failure>(()) }
    })
    .with_backoff(NO_WAIT)
    .sequenced(tracker, resource_and_number)
    .start();
    wait_until("every event acked", || async {
        running.report().handled == arrivals.len() as u64
    })
    .await;
    let report = running.stop(Duration::from_secs(5)).await;
    assert_eq!(report.dead_lettered, 0);
    let applied = applied.lock().unwrap().clone();
    for (resource, expected) in [("r1", vec![1, 2, 3, 4]), ("r2", vec![1, 2])] {
        let numbers: Vec<u64> = applied
            .iter()
            .filter(|(applied_to, _)| applied_to == resource)
            .map(|(_, number)| *number)
            .collect();
        assert_eq!(numbers, expected, "{resource}: {applied:?}");
    }
    let stats = f.store.stats(&f.namespace).await.unwrap();
    assert_eq!((stats.waiting, stats.taken, stats.dead), (0, 0, 0));
}

/// A gap that never fills: the event waiting for the number before it is
/// retried until its last attempt, then dead-lettered with a reason naming
/// the number it waited for; the handler never ran.
async fn a_sequence_gap_that_never_fills_is_dead_lettered_naming_what_it_waited_for<B: Backend>() {
    use hooklatch::sequence::{FirstEvent, MemorySequences, Tracker};
    let f = B::fixture(StoreOptions::default().with_max_attempts(3)).await;
    let event = IncomingEvent::new(&f.namespace, "a2", br#"{"resource":"r1","n":2}"#);
    let _ = f.store.accept(&event).await.expect("accept");
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ran);
    let tracker = Tracker::new(MemorySequences::new()).with_first_event(FirstEvent::StartAt(1));
    let running = Worker::new(f.store.clone(), &f.namespace, move |_event: Event| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok::<(), Failure>(()) }
    })
    .with_backoff(NO_WAIT)
    .sequenced(tracker, resource_and_number)
    .start();
    wait_until("the event is dead-lettered", || async {
        running.report().dead_lettered == 1
    })
    .await;
    running.stop(Duration::from_secs(5)).await;
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the handler never ran");
    let dead = f.store.dead_letters(&f.namespace, 10).await.unwrap();
    let reason = &dead[0].dead.as_ref().unwrap().reason;
    assert_eq!(reason, "waiting for 1 of r1 before 2");
}

/// Each store says when it accepted an event, on its clock (this host's
/// here, where the servers run): a first take carries it, for the
/// worker's lag from the accept to the handler.
async fn a_first_take_says_when_the_store_accepted_the_event<B: Backend>() {
    let f = B::fixture(StoreOptions::default()).await;
    let (store, namespace) = (&f.store, &f.namespace);
    let millis = || {
        i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap()
    };
    let before = millis();
    accept(store, namespace, "evt_1").await;
    let after = millis();
    let taken = store.take(namespace, "worker", 1).await.unwrap();
    let received = taken[0].received_at_millis.expect("the store says");
    // A store's clock reads in whole milliseconds (seconds for none).
    assert!(
        (before - 1..=after + 1).contains(&received),
        "{before} <= {received} <= {after}"
    );
}

macro_rules! worker_suite {
    ($($module:ident => $backend:ident),* $(,)?) => {
        $(
            mod $module {
                use super::super::$backend;
                worker_suite!(@tests $backend:
                    failing_handlers_are_retried_then_dead_lettered_with_their_error,
                    a_panicking_handler_is_dead_lettered_with_the_panic_message,
                    handlers_choose_their_outcome_and_routes_get_typed_payloads,
                    a_handler_running_three_visibility_timeouts_keeps_its_event,
                    each_keys_events_run_one_at_a_time_in_accept_order,
                    a_stop_mid_batch_loses_nothing_and_reruns_only_the_unfinished,
                    a_worker_that_dies_mid_batch_loses_nothing,
                    a_first_take_says_when_the_store_accepted_the_event,
                    sequenced_events_apply_in_order_skip_repeats_and_wait_for_gaps,
                    a_sequence_gap_that_never_fills_is_dead_lettered_naming_what_it_waited_for,
                );
            }
        )*
    };
    (@tests $backend:ident: $($test:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $test() {
                super::$test::<$backend>().await;
            }
        )*
    };
}

worker_suite!(
    memory => Memory,
    sqlite => Sqlite,
    postgres => Postgres,
    redis => Redis,
);

/// An accept in the same process wakes an idle worker at once: with the
/// idle poll an hour, on a paused clock, the handler starts with no time
/// passed (without the wake-up the worker would sleep the hour).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_accept_in_the_same_process_wakes_an_idle_worker_at_once() {
    let store = hooklatch::dedup::MemoryInbox::new();
    let namespace = super::support::unique("wake");
    let (handled, mut handled_rx) = tokio::sync::mpsc::unbounded_channel();
    let running = Worker::new(store.clone(), &namespace, move |event: Event| {
        let _ = handled.send((event.id().to_owned(), tokio::time::Instant::now()));
        async { Ok::<(), Failure>(()) }
    })
    .with_idle_poll(Duration::from_secs(3600))
    .start();
    // Long enough for the worker to be idle at its longest wait.
    tokio::time::sleep(Duration::from_secs(7200)).await;
    let accepted_at = tokio::time::Instant::now();
    accept(&store, &namespace, "evt_wake").await;
    let (id, started_at) = handled_rx.recv().await.unwrap();
    assert_eq!(id, "evt_wake");
    assert_eq!(started_at, accepted_at, "the worker waited for its poll");
    running.stop(Duration::from_secs(1)).await;
}

/// Under a steady load a worker takes at most once per take interval, so
/// each take brings what arrived meanwhile: on a paused clock, after a
/// take that came back short (one event of the 32 it could hold), an event
/// accepted 1 ms later starts at the 5 ms interval, not at once; an event
/// after a quiet spell starts at once; with the interval zero, every
/// wake-up takes.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_worker_under_load_takes_at_most_once_per_take_interval() {
    for (interval, second_waits) in [
        (
            hooklatch::worker::DEFAULT_TAKE_INTERVAL,
            Duration::from_millis(4),
        ),
        (Duration::ZERO, Duration::ZERO),
    ] {
        let store = hooklatch::dedup::MemoryInbox::new();
        let namespace = super::support::unique("paced");
        let (handled, mut handled_rx) = tokio::sync::mpsc::unbounded_channel();
        let running = Worker::new(store.clone(), &namespace, move |event: Event| {
            let _ = handled.send((event.id().to_owned(), tokio::time::Instant::now()));
            async { Ok::<(), Failure>(()) }
        })
        .with_idle_poll(Duration::from_secs(3600))
        .with_take_interval(interval)
        .start();
        tokio::time::sleep(Duration::from_secs(7200)).await;
        // After a quiet spell: at once.
        let first_accepted = tokio::time::Instant::now();
        accept(&store, &namespace, "evt_first").await;
        let (id, first_started) = handled_rx.recv().await.unwrap();
        assert_eq!((id.as_str(), first_started), ("evt_first", first_accepted));
        // 1 ms after that short take: at the interval's end.
        tokio::time::sleep(Duration::from_millis(1)).await;
        let second_accepted = tokio::time::Instant::now();
        accept(&store, &namespace, "evt_second").await;
        let (id, second_started) = handled_rx.recv().await.unwrap();
        assert_eq!(id, "evt_second");
        assert_eq!(
            second_started - second_accepted,
            second_waits,
            "with a take interval of {interval:?}"
        );
        running.stop(Duration::from_secs(1)).await;
    }
}

/// Under a stream the wait after a short take grows with what it brought:
/// on a paused clock, a take of 40 events (of 256 it could hold) is
/// followed 10 ms later (two intervals), one of 100 after 20 ms (four, the
/// most), where a take of one is followed after 5 ms.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_stream_is_taken_at_up_to_four_take_intervals() {
    for (first_take, next_after) in [(1, 5), (40, 10), (100, 20)] {
        let store = hooklatch::dedup::MemoryInbox::new();
        let namespace = super::support::unique("stream");
        let (handled, mut handled_rx) = tokio::sync::mpsc::unbounded_channel();
        let running = Worker::new(store.clone(), &namespace, move |event: Event| {
            let _ = handled.send((event.id().to_owned(), tokio::time::Instant::now()));
            async { Ok::<(), Failure>(()) }
        })
        .with_concurrency(256)
        .with_idle_poll(Duration::from_secs(3600))
        .start();
        tokio::time::sleep(Duration::from_secs(7200)).await;
        // Accepted in one go: the first take brings them all.
        let accepts = (0..first_take).map(|n| {
            let (store, namespace) = (store.clone(), namespace.clone());
            async move { accept(&store, &namespace, &format!("evt_{n}")).await }
        });
        futures_util::future::join_all(accepts).await;
        let taken_at = tokio::time::Instant::now();
        for _ in 0..first_take {
            let (_, started) = handled_rx.recv().await.unwrap();
            assert_eq!(started, taken_at);
        }
        accept(&store, &namespace, "evt_next").await;
        let (id, started) = handled_rx.recv().await.unwrap();
        assert_eq!(id, "evt_next");
        assert_eq!(
            started - taken_at,
            Duration::from_millis(next_after),
            "after a take of {first_take}"
        );
        running.stop(Duration::from_secs(1)).await;
    }
}

/// The child process of the wake-up tests: accepts one event into the
/// store and namespace its parent names, and ends.
const ACCEPT_INTO: &str = "HOOKLATCH_TEST_ACCEPT_INTO";

/// Whether this is the child of a wake-up test; if so it accepts and
/// returns true. `connect` opens the parent's store at a URL.
async fn accept_as_child<S, F, Fut>(connect: F) -> bool
where
    S: Inbox,
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = S>,
{
    let Ok(target) = std::env::var(ACCEPT_INTO) else {
        return false;
    };
    let (url, namespace) = target.split_once(' ').unwrap();
    let store = connect(url.to_owned()).await;
    accept(&store, namespace, "evt_remote").await;
    true
}

/// Runs `test` of this binary again as another process that accepts one
/// event into `namespace` of the store at `url`, and waits for it.
async fn accept_in_another_process(test: &str, url: &str, namespace: &str) {
    let test = format!(
        "{}::{test}",
        module_path!().split_once("::").map_or("", |(_, path)| path)
    );
    let target = format!("{url} {namespace}");
    let child = tokio::task::spawn_blocking(move || {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([test.as_str(), "--exact", "--nocapture"])
            .env(ACCEPT_INTO, target)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        child.status.success(),
        "the other process accepted: {}",
        String::from_utf8_lossy(&child.stdout)
    );
}

/// A worker with a poll interval of an hour, sending each id it handles.
fn worker_sending_ids<S: InboxQueue + Clone + 'static>(
    store: S,
    namespace: &str,
) -> (
    hooklatch::worker::Running,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let (handled, handled_rx) = tokio::sync::mpsc::unbounded_channel();
    let running = Worker::new(store, namespace, move |event: Event| {
        let _ = handled.send(event.id().to_owned());
        async { Ok::<(), Failure>(()) }
    })
    .with_idle_poll(Duration::from_secs(3600))
    .start();
    (running, handled_rx)
}

/// Waits for the event the other process accepted: without a wake-up the
/// worker sleeps its hour and this fails at its two-minute guard.
async fn remote_event_is_handled(
    running: hooklatch::worker::Running,
    mut handled: tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let handled = tokio::time::timeout(Duration::from_secs(120), handled.recv())
        .await
        .expect("the worker slept through an accept in another process");
    assert_eq!(handled.as_deref(), Some("evt_remote"));
    running.stop(Duration::from_secs(5)).await;
}

/// In the child of a Postgres wake-up test, accepts its event and says
/// so (see [`accept_as_child`]).
async fn accept_as_postgres_child() -> bool {
    accept_as_child(|url| async move {
        hooklatch::dedup::PostgresInbox::connect(&url)
            .await
            .unwrap()
    })
    .await
}

/// A Postgres inbox whose connections carry an application name of their
/// own, to tell this test's connections from others on a shared server.
struct NamedPostgres {
    _server: super::support::Server,
    /// The URL with the application name.
    url: String,
    app: String,
    admin: sqlx::PgPool,
    store: hooklatch::dedup::PostgresInbox,
}

impl NamedPostgres {
    async fn new() -> Self {
        let server = super::support::postgres();
        let app = super::support::unique("wake");
        let base = server.url();
        let separator = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{separator}application_name={app}");
        let store = hooklatch::dedup::PostgresInbox::connect(&url)
            .await
            .unwrap();
        let admin = sqlx::PgPool::connect(&base).await.unwrap();
        Self {
            _server: server,
            url,
            app,
            admin,
            store,
        }
    }

    /// The last statement of each of this inbox's idle connections (the
    /// listener's is its `LISTEN` or `UNLISTEN`, a worker's its take).
    async fn last_queries(&self) -> Vec<String> {
        sqlx::query_scalar::<_, String>(
            "SELECT query FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle'",
        )
        .bind(&self.app)
        .fetch_all(&self.admin)
        .await
        .unwrap()
    }
}

/// An accept in another process wakes an idle worker on Postgres
/// (`LISTEN`/`NOTIFY`): with the idle poll an hour, the worker has listened
/// and found the inbox empty before another process accepts, and the
/// handler runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accept_in_another_process_wakes_an_idle_postgres_worker() {
    if accept_as_postgres_child().await {
        return;
    }
    let postgres = NamedPostgres::new().await;
    let namespace = super::support::unique("remote");
    let (running, handled) = worker_sending_ids(postgres.store.clone(), &namespace);
    wait_until(
        "the worker listens and has found the inbox empty",
        || async {
            let queries = postgres.last_queries().await;
            queries.iter().any(|query| query.starts_with("LISTEN"))
                && queries
                    .iter()
                    .any(|query| query.starts_with("WITH ready AS"))
        },
    )
    .await;
    accept_in_another_process(
        "an_accept_in_another_process_wakes_an_idle_postgres_worker",
        &postgres.url,
        &namespace,
    )
    .await;
    remote_event_is_handled(running, handled).await;
}

/// A Postgres worker whose takes keep finding events stops listening for
/// accepts in other processes (each notice costs the server and this
/// process), and listens again once a take finds the inbox empty: an
/// accept in another process after a busy spell still wakes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_postgres_worker_stops_listening_and_listens_again_once_idle() {
    if accept_as_postgres_child().await {
        return;
    }
    let postgres = NamedPostgres::new().await;
    let store = postgres.store.clone();
    let namespace = super::support::unique("busy");
    for id in ["evt_1", "evt_2", "evt_3"] {
        accept(&store, &namespace, id).await;
    }
    // One event at a time, each held 150 ms: the second take comes more
    // than 100 ms after the first, and both found events, so the worker
    // is busy from then on.
    let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
    let (handled, mut handled_rx) = tokio::sync::mpsc::unbounded_channel();
    let running = Worker::new(store.clone(), &namespace, move |event: Event| {
        let (started, handled) = (started.clone(), handled.clone());
        async move {
            let _ = started.send(());
            tokio::time::sleep(Duration::from_millis(150)).await;
            let _ = handled.send(event.id().to_owned());
            Ok::<(), Failure>(())
        }
    })
    .with_concurrency(1)
    .with_idle_poll(Duration::from_secs(3600))
    .start();

    for _ in 0..2 {
        started_rx.recv().await.unwrap();
    }
    // Its notice reaches the listener while the worker is busy.
    accept(&store, &namespace, "evt_4").await;
    wait_until("the busy worker stops listening", || async {
        postgres
            .last_queries()
            .await
            .iter()
            .any(|query| query.starts_with("UNLISTEN"))
    })
    .await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(handled_rx.recv().await.unwrap());
    }
    ids.sort();
    assert_eq!(ids, ["evt_1", "evt_2", "evt_3", "evt_4"]);
    wait_until(
        "the idle worker listens again and has found the inbox empty",
        || async {
            let queries = postgres.last_queries().await;
            queries.iter().any(|query| query.starts_with("LISTEN"))
                && !queries.iter().any(|query| query.starts_with("UNLISTEN"))
        },
    )
    .await;
    accept_in_another_process(
        "a_busy_postgres_worker_stops_listening_and_listens_again_once_idle",
        &postgres.url,
        &namespace,
    )
    .await;
    remote_event_is_handled(running, handled_rx).await;
}

/// An accept in another process wakes an idle worker on Redis (the
/// namespace's channel, published on by the first accept into a shard a
/// take found empty): with the idle poll an hour, the worker has
/// subscribed and every shard is marked idle before another process
/// accepts, and the handler runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accept_in_another_process_wakes_an_idle_redis_worker() {
    if accept_as_child(
        |url| async move { hooklatch::dedup::RedisInbox::connect(&url).await.unwrap() },
    )
    .await
    {
        return;
    }
    let server = super::support::redis();
    let url = server.url();
    let namespace = super::support::unique("remote");
    let store = hooklatch::dedup::RedisInbox::connect(&url).await.unwrap();
    let (running, handled) = worker_sending_ids(store, &namespace);
    wait_until_subscribed_and_idle(&url, &namespace).await;
    accept_in_another_process(
        "an_accept_in_another_process_wakes_an_idle_redis_worker",
        &url,
        &namespace,
    )
    .await;
    remote_event_is_handled(running, handled).await;
}

/// The child process of the requeue wake-up test: requeues the dead
/// letters of the store and namespace its parent names, and ends.
const REQUEUE_IN: &str = "HOOKLATCH_TEST_REQUEUE_IN";

/// A requeue of dead letters in another process (the CLI's `inbox
/// requeue`, say) wakes an idle Redis worker: the requeue into a shard a
/// take found empty publishes on the namespace's channel, as an accept
/// does. With the idle poll an hour, the worker has subscribed and found
/// every shard empty (the event is dead) before the other process
/// requeues, and the handler runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeue_in_another_process_wakes_an_idle_redis_worker() {
    if let Ok(target) = std::env::var(REQUEUE_IN) {
        let (url, namespace) = target.split_once(' ').unwrap();
        let store = hooklatch::dedup::RedisInbox::connect(url).await.unwrap();
        let requeued = store.requeue_dead(namespace, None).await.unwrap();
        assert_eq!(requeued, 1, "the dead letter was requeued");
        return;
    }
    let server = super::support::redis();
    let url = server.url();
    let namespace = super::support::unique("requeue");
    let store = hooklatch::dedup::RedisInbox::connect(&url).await.unwrap();
    accept(&store, &namespace, "evt_remote").await;
    let taken = store.take(&namespace, "before", 1).await.unwrap();
    assert_eq!(taken.len(), 1);
    store
        .give_back(
            &taken[0],
            hooklatch::dedup::GiveBack::DeadLetter,
            "for the test",
        )
        .await
        .unwrap();
    let (running, handled) = worker_sending_ids(store, &namespace);
    wait_until_subscribed_and_idle(&url, &namespace).await;

    let test = format!(
        "{}::a_requeue_in_another_process_wakes_an_idle_redis_worker",
        module_path!().split_once("::").map_or("", |(_, path)| path)
    );
    let target = format!("{url} {namespace}");
    let child = tokio::task::spawn_blocking(move || {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([test.as_str(), "--exact", "--nocapture"])
            .env(REQUEUE_IN, target)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        child.status.success(),
        "the other process requeued: {}",
        String::from_utf8_lossy(&child.stdout)
    );
    remote_event_is_handled(running, handled).await;
}

/// Waits until a worker on the Redis server at `url` has subscribed to
/// `namespace`'s channel and marked each of its shards idle.
async fn wait_until_subscribed_and_idle(url: &str, namespace: &str) {
    let admin = crate::patient_redis::patient_redis(&::redis::Client::open(url).unwrap()).await;
    wait_until(
        "the worker subscribes and finds every shard empty",
        || async {
            let mut admin = admin.clone();
            // A reply slower than the client's timeout (both cores busy)
            // is asked again.
            let channels: Vec<String> = ::redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .arg(format!("*{{{namespace}}}*"))
                .query_async(&mut admin)
                .await
                .unwrap_or_default();
            // Each shard's idle mark, in the store's key layout.
            let marks: Vec<String> = (0..hooklatch::dedup::DEFAULT_SHARDS)
                .map(|shard| format!("hooklatch:{{{namespace}/{shard}}}:idle"))
                .collect();
            let idle: usize = ::redis::cmd("EXISTS")
                .arg(&marks)
                .query_async(&mut admin)
                .await
                .unwrap_or_default();
            channels.len() == 1 && idle == marks.len()
        },
    )
    .await;
}

/// A worker process killed with SIGKILL mid-batch loses nothing: its
/// events, held by handlers that never end, come back after the
/// visibility timeout (its heartbeats stopped with it) and a worker in
/// this process handles each once. The worker that dies is this test
/// binary run again as another process (`test`, with the store at the
/// URL `server` gives, opened by `open`).
async fn a_worker_process_killed_mid_batch_loses_nothing<S, G, F, Fut>(
    test: &str,
    server: impl FnOnce() -> (G, String),
    open: F,
) where
    S: InboxQueue + Clone + 'static,
    F: Fn(String, StoreOptions) -> Fut,
    Fut: Future<Output = S>,
{
    use std::io::BufRead as _;
    const CHILD: &str = "HOOKLATCH_TEST_DOOMED_WORKER";
    let options = StoreOptions::default().with_visibility_timeout(Duration::from_secs(1));
    if let Ok(target) = std::env::var(CHILD) {
        // The process that dies: hold every event, say so, wait for the kill.
        let (url, namespace) = target.rsplit_once(' ').unwrap();
        let store = open(url.to_owned(), options.clone()).await;
        let _running = Worker::new(store, namespace, |event: Event| {
            println!("holding {}", event.id());
            std::future::pending::<Result<(), Failure>>()
        })
        .start();
        std::future::pending::<()>().await;
    }
    let (_server, url) = server();
    let namespace = super::support::unique("killed");
    let store = open(url.clone(), options).await;
    for n in 0..5 {
        accept(&store, &namespace, &format!("evt_{n}")).await;
    }
    let test = format!(
        "{}::{test}",
        module_path!().split_once("::").map_or("", |(_, path)| path)
    );
    let mut doomed = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test.as_str(), "--exact", "--nocapture"])
        .env(CHILD, format!("{url} {namespace}"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = doomed.stdout.take().unwrap();
    let held = tokio::task::spawn_blocking(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .filter(|line| line.starts_with("holding "))
            .take(5)
            .count()
    })
    .await
    .unwrap();
    assert_eq!(held, 5, "the other process holds every event");
    doomed.kill().unwrap();
    let _ = doomed.wait();

    let survivor = Worker::new(store.clone(), &namespace, |_event: Event| async {
        Ok::<(), Failure>(())
    })
    .with_idle_poll(Duration::from_millis(50))
    .start();
    wait_until("this process handles all five", || async {
        survivor.report().handled == 5
    })
    .await;
    survivor.stop(Duration::from_secs(5)).await;
    let stats = store.stats(&namespace).await.unwrap();
    assert_eq!((stats.waiting, stats.taken, stats.dead), (0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_killed_mid_batch_loses_nothing_on_postgres() {
    a_worker_process_killed_mid_batch_loses_nothing(
        "a_worker_process_killed_mid_batch_loses_nothing_on_postgres",
        || {
            let server = super::support::postgres();
            let url = server.url();
            (server, url)
        },
        |url, options| async move {
            hooklatch::dedup::PostgresInbox::connect(&url)
                .await
                .unwrap()
                .with_options(options)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_killed_mid_batch_loses_nothing_on_redis() {
    a_worker_process_killed_mid_batch_loses_nothing(
        "a_worker_process_killed_mid_batch_loses_nothing_on_redis",
        || {
            let server = super::support::redis();
            let url = server.url();
            (server, url)
        },
        |url, options| async move {
            hooklatch::dedup::RedisInbox::connect(&url)
                .await
                .unwrap()
                .with_options(options)
        },
    )
    .await;
}

/// On SQLite the two processes share the database file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_process_killed_mid_batch_loses_nothing_on_sqlite() {
    a_worker_process_killed_mid_batch_loses_nothing(
        "a_worker_process_killed_mid_batch_loses_nothing_on_sqlite",
        || {
            let dir = super::support::TempDir::new("killed");
            let path = dir.path().join("inbox.db").display().to_string();
            (dir, path)
        },
        |path, options| async move {
            hooklatch::dedup::SqliteInbox::open(&path)
                .await
                .unwrap()
                .with_options(options)
        },
    )
    .await;
}

/// A handler runs in a `webhook.handle` span that carries the trace
/// context the receiver kept from the provider's request, so a tracing
/// layer (OpenTelemetry's, say) continues that trace.
#[tokio::test(flavor = "current_thread")]
async fn a_requests_traceparent_reaches_the_handlers_span() {
    use tracing_subscriber::layer::SubscriberExt as _;

    /// Records the `traceparent` of each `webhook.handle` span.
    #[derive(Clone, Default)]
    struct Spans(Arc<Mutex<Vec<String>>>);
    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Spans {
        fn on_new_span(
            &self,
            attrs: &tracing::span::Attributes<'_>,
            _: &tracing::span::Id,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            struct Parent<'a>(&'a mut Option<String>);
            impl tracing::field::Visit for Parent<'_> {
                fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                    if field.name() == "traceparent" {
                        *self.0 = Some(value.to_owned());
                    }
                }
                fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
            }
            if attrs.metadata().name() == "webhook.handle" {
                let mut parent = None;
                attrs.record(&mut Parent(&mut parent));
                self.0.lock().unwrap().push(parent.unwrap_or_default());
            }
        }
    }

    let spans = Spans::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let store = hooklatch::dedup::MemoryInbox::new();
    let namespace = super::support::unique("trace");
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut meta = EventMeta::with_type("invoice.paid");
    meta.headers = vec![("traceparent".to_owned(), parent.to_owned())];
    let event = IncomingEvent::new(&namespace, "evt_traced", b"{}").with_meta(&meta);
    let _ = store.accept(&event).await.unwrap();
    let (seen, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let running = Worker::new(store, &namespace, move |event: Event| {
        let _ = seen.send(event.id().to_owned());
        async { Ok::<(), Failure>(()) }
    })
    .start();
    let _ = seen_rx.recv().await;
    running.stop(Duration::from_secs(1)).await;
    assert_eq!(*spans.0.lock().unwrap(), [parent]);
}

/// With `with_request_traces`, a handler runs in the request's trace: a
/// delivery it sends is stored with that trace, so each of its attempts
/// carries it on. Without it (the default) the request's unsigned header
/// reaches no endpoint.
#[tokio::test(flavor = "current_thread")]
async fn a_delivery_sent_from_a_handler_keeps_the_requests_trace_when_asked() {
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let parent = hooklatch::trace::TraceParent::parse(parent).unwrap();
    assert_eq!(
        sent_from_a_handler(true).await,
        [("evt_plain", None), ("evt_traced", Some(parent))]
    );
    assert_eq!(
        sent_from_a_handler(false).await,
        [("evt_plain", None), ("evt_traced", None)]
    );
}

/// The trace two handlers ran in, and the one their deliveries were
/// stored with (they must agree), for an event accepted with a
/// `traceparent` and one without, by id.
async fn sent_from_a_handler(
    request_traces: bool,
) -> Vec<(&'static str, Option<hooklatch::trace::TraceParent>)> {
    use hooklatch::sender::MemoryOutbox;
    use hooklatch::sender::outbox::DeliveryStore as _;
    use hooklatch::trace::TraceParent;

    let store = hooklatch::dedup::MemoryInbox::new();
    let outbox = MemoryOutbox::new();
    let namespace = super::support::unique("trace-on");
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut meta = EventMeta::with_type("invoice.paid");
    meta.headers = vec![("traceparent".to_owned(), parent.to_owned())];
    let traced = IncomingEvent::new(&namespace, "evt_traced", b"{}").with_meta(&meta);
    let _ = store.accept(&traced).await.unwrap();
    let untraced = IncomingEvent::new(&namespace, "evt_plain", b"{}");
    let _ = store.accept(&untraced).await.unwrap();
    let (seen, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let sending = outbox.clone();
    let worker = Worker::new(store, &namespace, move |event: Event| {
        let (seen, outbox) = (seen.clone(), sending.clone());
        async move {
            let id = event.id().to_owned();
            outbox
                .enqueue("acme", &id, b"{}", std::time::SystemTime::now())
                .await
                .map_err(Failure::retry)?;
            let _ = seen.send((id, TraceParent::current()));
            Ok::<(), Failure>(())
        }
    });
    let running = if request_traces {
        worker.with_request_traces()
    } else {
        worker
    }
    .start();
    let mut current = HashMap::new();
    while current.len() < 2 {
        let (id, trace) = seen_rx.recv().await.unwrap();
        current.insert(id, trace);
    }
    running.stop(Duration::from_secs(1)).await;
    let due = outbox
        .take_due(
            "acme",
            std::time::SystemTime::now(),
            10,
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    let stored: HashMap<String, Option<TraceParent>> = due
        .taken
        .into_iter()
        .map(|taken| (taken.id, taken.trace))
        .collect();
    assert_eq!(stored, current);
    ["evt_plain", "evt_traced"]
        .map(|id| (id, stored[id]))
        .to_vec()
}

/// An inbox whose `ack_many` answers its first call for half the batch
/// only (as a Redis Cluster does when one shard is down) and fails its
/// second outright; it records each call's length.
#[derive(Clone, Default)]
struct AcksFailFirst {
    inner: hooklatch::dedup::MemoryInbox,
    calls: Arc<Mutex<Vec<usize>>>,
}

impl Inbox for AcksFailFirst {
    fn accept(
        &self,
        event: &IncomingEvent<'_>,
    ) -> impl Future<Output = Result<hooklatch::dedup::Acceptance, hooklatch::dedup::DedupError>> + Send
    {
        self.inner.accept(event)
    }
}

impl InboxQueue for AcksFailFirst {
    fn take(
        &self,
        namespace: &str,
        consumer: &str,
        max: usize,
    ) -> impl Future<
        Output = Result<Vec<hooklatch::dedup::InboxEntry>, hooklatch::dedup::DedupError>,
    > + Send {
        self.inner.take(namespace, consumer, max)
    }

    async fn ack(
        &self,
        delivery: &hooklatch::dedup::InboxEntry,
    ) -> Result<(), hooklatch::dedup::DedupError> {
        self.inner.ack(delivery).await
    }

    async fn ack_many(
        &self,
        deliveries: &[hooklatch::dedup::InboxEntry],
    ) -> Result<Vec<bool>, hooklatch::dedup::DedupError> {
        use hooklatch::dedup::DedupError;
        let call = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(deliveries.len());
            calls.len()
        };
        match call {
            1 => {
                let half = deliveries.len() / 2;
                let answered = self.inner.ack_many(&deliveries[..half]).await?;
                let mut acked: Vec<Option<bool>> = answered.into_iter().map(Some).collect();
                acked.resize(deliveries.len(), None);
                Err(DedupError::AckedInPart {
                    acked,
                    source: Box::new(DedupError::StoreUrl("a shard is down".into())),
                })
            }
            2 => Err(DedupError::StoreUrl("still down".into())),
            _ => self.inner.ack_many(deliveries).await,
        }
    }

    fn extend_visibility(
        &self,
        delivery: &hooklatch::dedup::InboxEntry,
    ) -> impl Future<Output = Result<(), hooklatch::dedup::DedupError>> + Send {
        self.inner.extend_visibility(delivery)
    }

    fn give_back(
        &self,
        delivery: &hooklatch::dedup::InboxEntry,
        how: hooklatch::dedup::GiveBack,
        reason: &str,
    ) -> impl Future<Output = Result<hooklatch::dedup::NackOutcome, hooklatch::dedup::DedupError>> + Send
    {
        self.inner.give_back(delivery, how, reason)
    }

    fn dead_letters(
        &self,
        namespace: &str,
        max: usize,
    ) -> impl Future<
        Output = Result<Vec<hooklatch::dedup::InboxEntry>, hooklatch::dedup::DedupError>,
    > + Send {
        self.inner.dead_letters(namespace, max)
    }

    fn stats(
        &self,
        namespace: &str,
    ) -> impl Future<Output = Result<hooklatch::dedup::InboxStats, hooklatch::dedup::DedupError>> + Send
    {
        self.inner.stats(namespace)
    }

    fn requeue_dead(
        &self,
        namespace: &str,
        id: Option<&str>,
    ) -> impl Future<Output = Result<u64, hooklatch::dedup::DedupError>> + Send {
        self.inner.requeue_dead(namespace, id)
    }
}

/// An ack answered in part is counted for what was answered and tried
/// again for the rest only; a failed try is tried again: each event is
/// acked and counted handled once, and none is left taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_answered_in_part_is_tried_again_for_the_rest_only() {
    let store = AcksFailFirst::default();
    let namespace = super::support::unique("acks");
    for n in 0..10 {
        accept(&store, &namespace, &format!("evt_{n}")).await;
    }
    let running = Worker::new(store.clone(), &namespace, |_: Event| async {
        Ok::<(), Failure>(())
    })
    .with_concurrency(10)
    .start();
    wait_until("every event is acked", || async {
        running.report().handled == 10
    })
    .await;
    let report = running.stop(Duration::from_secs(1)).await;
    assert_eq!(
        (report.handled, report.lost, report.store_errors),
        (10, 0, 0)
    );
    assert_eq!(
        *store.calls.lock().unwrap(),
        [10, 5, 5],
        "the rest alone is tried again"
    );
    let stats = store.stats(&namespace).await.unwrap();
    assert_eq!((stats.waiting, stats.taken, stats.dead), (0, 0, 0));
}

/// A handler that blocks its thread before its first await (sync I/O, a
/// lock) holds up neither the taking nor the stop: events taken after it
/// are handled while it blocks, and the worker stops in order once it is
/// let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handler_that_blocks_its_thread_holds_up_neither_taking_nor_stop() {
    let store = hooklatch::dedup::MemoryInbox::new();
    let namespace = super::support::unique("blocking");
    let (release, released) = std::sync::mpsc::channel::<()>();
    let released = Arc::new(Mutex::new(released));
    let blocking = Arc::new(AtomicBool::new(false));
    let handler = {
        let blocking = Arc::clone(&blocking);
        move |event: Event| {
            if event.id() == "evt_block" {
                blocking.store(true, Ordering::SeqCst);
                // Blocks this runtime thread until the test lets go.
                let _ = released.lock().unwrap().recv();
            }
            async { Ok::<(), Failure>(()) }
        }
    };
    accept(&store, &namespace, "evt_block").await;
    let running = Worker::new(store.clone(), &namespace, handler)
        .with_concurrency(8)
        .start();
    wait_until("the blocking handler runs", || async {
        blocking.load(Ordering::SeqCst)
    })
    .await;
    for n in 0..5 {
        accept(&store, &namespace, &format!("evt_{n}")).await;
    }
    wait_until("the other five are handled meanwhile", || async {
        running.report().handled == 5
    })
    .await;
    release.send(()).unwrap();
    wait_until("the blocked one too, once let go", || async {
        running.report().handled == 6
    })
    .await;
    running.stop(Duration::from_secs(1)).await;
}
