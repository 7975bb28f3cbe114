//! The sending side's metrics, counted exactly: attempts by endpoint and
//! outcome, read back from a recording recorder. One test, so that no other
//! test in this binary records into it.

#[path = "support/receiver.rs"]
mod receiver;

use std::time::Duration;

use hooklatch::sender::{DeliveryState, MemoryDeliveries};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use receiver::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_are_counted_by_endpoint_and_outcome() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder in this process");

    let store = MemoryDeliveries::new();
    let receiver = Receiver::answering(200);
    // The first delivery fails once (503), then succeeds; the second is
    // delivered at once.
    receiver.answer_id("msg_flaky", 503, Duration::ZERO);
    let dispatcher = dispatcher(store.clone(), &receiver);
    add(&dispatcher, every(Duration::from_millis(50), 3)).await;
    let running = dispatcher.start();
    dispatcher.send(ENDPOINT, "msg_flaky", b"{}").await.unwrap();
    dispatcher.send(ENDPOINT, "msg_ok", b"{}").await.unwrap();
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
    running.stop().await;

    let mut attempts = std::collections::BTreeMap::new();
    let mut timed = 0;
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
        ]),
        "every attempt counted once, by outcome"
    );
    assert_eq!(timed as u64, 2 + failed, "every attempt timed");
}
