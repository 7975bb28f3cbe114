//! The sending side's metrics, counted exactly: attempts by endpoint and
//! outcome, the breaker's state and the outbox's depth, read back from a
//! recording recorder. One test, so that no other
//! test in this binary records into it.

#[path = "support/receiver.rs"]
mod receiver;

use std::time::Duration;

use hooklatch::sender::MemoryOutbox;
use hooklatch::sender::outbox::DeliveryState;
use hooklatch::sender::outbox::DeliveryStore;
use hooklatch::sender::rules::Breaker;
use hooklatch::verify::{Scheme, Signer};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use receiver::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_breaker_state_and_outbox_depth_are_recorded_by_endpoint() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder in this process");

    let store = MemoryOutbox::new();
    let receiver = Receiver::answering(200);
    // The first delivery fails once (503), then succeeds; the second is
    // delivered at once.
    receiver.answer_id("msg_flaky", 503, Duration::ZERO);
    let dispatcher =
        dispatcher(store.clone(), &receiver).with_depth_metrics(Duration::from_millis(20));
    add(&dispatcher, every(Duration::from_millis(50), 3)).await;
    // One attempt, answered 500: dead at once, and the breaker (one
    // failure) opens for an hour.
    let fragile = every(Duration::from_millis(50), 1).with_breaker(
        Breaker::new()
            .with_failure_threshold(1)
            .with_cool_down(Duration::from_secs(3600)),
    );
    let signer = Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap();
    dispatcher
        .add_endpoint("fragile", "https://fragile.example/", signer, fragile)
        .await
        .unwrap();
    receiver.answer_id("msg_doomed", 500, Duration::ZERO);
    let running = dispatcher.start();
    dispatcher.send(ENDPOINT, "msg_flaky", b"{}").await.unwrap();
    dispatcher.send(ENDPOINT, "msg_ok", b"{}").await.unwrap();
    dispatcher
        .send("fragile", "msg_doomed", b"{}")
        .await
        .unwrap();
    wait_until("msg_ok is delivered", || async {
        state_of(&store, "msg_ok").await == DeliveryState::Delivered
    })
    .await;
    wait_until("msg_flaky was tried", || async {
        receiver.answered().iter().any(|(id, _)| id == "msg_flaky")
    })
    .await;
    receiver.answer_id("msg_flaky", 200, Duration::ZERO);
    wait_until("msg_flaky is delivered", || async {
        state_of(&store, "msg_flaky").await == DeliveryState::Delivered
    })
    .await;
    wait_until("msg_doomed is dead", || async {
        let doomed = store.delivery("fragile", "msg_doomed").await.unwrap();
        doomed.is_some_and(|delivery| delivery.state == DeliveryState::Dead)
    })
    .await;

    let mut attempts = std::collections::BTreeMap::new();
    let mut timed = 0;
    let mut latencies = std::collections::BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let labels: Vec<String> = key
            .labels()
            .map(|label| format!("{}={}", label.key(), label.value()))
            .collect();
        match (key.name(), value) {
            ("hooklatch_delivery_attempts_total", DebugValue::Counter(n)) => {
                attempts.insert(labels.join(","), n);
            }
            ("hooklatch_delivery_attempt_duration_seconds", DebugValue::Histogram(values)) => {
                timed += values.len();
            }
            ("hooklatch_delivery_latency_seconds", DebugValue::Histogram(values)) => {
                let seconds: Vec<f64> = values.iter().map(|value| value.0).collect();
                latencies.insert(labels.join(","), seconds);
            }
            _ => {}
        }
    }
    let failed = receiver
        .answered()
        .iter()
        .filter(|(id, status)| id == "msg_flaky" && *status == 503)
        .count() as u64;
    assert!(failed >= 1);
    assert_eq!(
        attempts,
        std::collections::BTreeMap::from([
            ("endpoint=orders,outcome=delivered".to_owned(), 2),
            ("endpoint=orders,outcome=retry".to_owned(), failed),
            ("endpoint=fragile,outcome=retry".to_owned(), 1),
        ]),
        "every attempt counted once, by outcome"
    );
    assert_eq!(timed as u64, 3 + failed, "every attempt timed");
    // Two delivered events, each timed once from send to its 2xx: the
    // flaky one waited at least one retry (50 ms) longer than the other.
    let delivered = &latencies["endpoint=orders"];
    assert_eq!(delivered.len(), 2, "{latencies:?}");
    assert!(
        delivered
            .iter()
            .all(|seconds| (0.0..20.0).contains(seconds))
    );
    let (fastest, slowest) = (
        delivered[0].min(delivered[1]),
        delivered[0].max(delivered[1]),
    );
    assert!(slowest - fastest >= 0.04, "{delivered:?}");
    assert!(
        !latencies.contains_key("endpoint=fragile"),
        "nothing was delivered there"
    );

    // The gauges: read until the depth task has counted since every
    // delivery ended.
    let gauges = || {
        let mut gauges = std::collections::BTreeMap::new();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            if let DebugValue::Gauge(value) = value {
                let labels: Vec<String> = key
                    .labels()
                    .map(|label| format!("{}={}", label.key(), label.value()))
                    .collect();
                gauges.insert(format!("{}{{{}}}", key.name(), labels.join(",")), value.0);
            }
        }
        gauges
    };
    let dead_gauge = "hooklatch_outbox_deliveries{endpoint=fragile,state=dead}";
    let pending_gauge = "hooklatch_outbox_deliveries{endpoint=orders,state=pending}";
    wait_until("the depth gauges are set", || {
        let gauges = gauges();
        let seen = (gauges.get(dead_gauge), gauges.get(pending_gauge));
        let done = seen == (Some(&1.0), Some(&0.0));
        async move { done }
    })
    .await;
    running.stop().await;
    let gauges = gauges();
    for (name, value) in [
        ("hooklatch_breaker_state{endpoint=fragile}", 2.0),
        ("hooklatch_breaker_state{endpoint=orders}", 0.0),
        (
            "hooklatch_outbox_deliveries{endpoint=fragile,state=pending}",
            0.0,
        ),
        (
            "hooklatch_outbox_deliveries{endpoint=orders,state=pending}",
            0.0,
        ),
        (
            "hooklatch_outbox_deliveries{endpoint=orders,state=dead}",
            0.0,
        ),
    ] {
        assert_eq!(gauges.get(name), Some(&value), "{name} in {gauges:?}");
    }
}
