//! The receiving side's metrics, counted exactly: one request of each
//! outcome through the axum layer, read back from a recording recorder.
//! One test, so that no other test in this binary records into it.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::routing::post;
use hooklatch::dedup::{Acceptance, DedupError, Inbox, IncomingEvent, MemoryInbox};
use hooklatch::verify::{Scheme, Signer, Verifier};
use hooklatch_tower::WebhookLayer;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// An inbox whose store is down: every accept fails.
#[derive(Clone)]
struct Down;

impl Inbox for Down {
    async fn accept(&self, _: &IncomingEvent<'_>) -> Result<Acceptance, DedupError> {
        Err(DedupError::LeaseLost)
    }
}

fn layer<S: Inbox + Clone + 'static>(store: S, namespace: &str) -> Router {
    let verifier = Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .unwrap()
        .build()
        .unwrap();
    Router::new().route("/webhooks", post(|| async {})).layer(
        WebhookLayer::new(verifier)
            .with_body_limit(1024)
            .with_inbox(store, namespace)
            .unwrap(),
    )
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhooks", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

async fn send(url: &str, id: &str, at: SystemTime, secret: &str, body: &[u8]) -> u16 {
    let headers = Signer::new(Scheme::standard_webhooks(), [secret])
        .unwrap()
        .sign(id, at, body)
        .unwrap();
    let mut request = reqwest::Client::new().post(url).body(body.to_vec());
    for (name, value) in headers.iter() {
        request = request.header(name, value);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_outcome_is_counted_once_with_bounded_labels() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder in this process");

    let inbox = MemoryInbox::new();
    let up = serve(layer(inbox.clone(), "orders")).await;
    let down = serve(layer(Down, "orders")).await;
    let now = SystemTime::now();
    let body = br#"{"type":"ping"}"#;
    assert_eq!(send(&up, "msg_1", now, SECRET, body).await, 202);
    assert_eq!(send(&up, "msg_1", now, SECRET, body).await, 200);
    let forged = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    assert_eq!(send(&up, "msg_2", now, forged, body).await, 400);
    let stale = now - Duration::from_secs(3600);
    assert_eq!(send(&up, "msg_3", stale, SECRET, body).await, 400);
    assert_eq!(send(&up, "msg_4", now, SECRET, &[b'x'; 2048]).await, 413);
    assert_eq!(send(&down, "msg_5", now, SECRET, body).await, 503);

    // The worker drains what was accepted: it counts the event handled,
    // and times its handler and the wait from the accept to it.
    let (handled, mut handled_rx) = tokio::sync::mpsc::unbounded_channel();
    let worker =
        hooklatch::worker::Worker::new(inbox, "orders", move |event: hooklatch::worker::Event| {
            let _ = handled.send(event.id().to_owned());
            async { Ok::<(), hooklatch::worker::Failure>(()) }
        })
        .start();
    assert_eq!(handled_rx.recv().await.as_deref(), Some("msg_1"));
    let report = worker.stop(Duration::from_secs(5)).await;
    assert_eq!(report.handled, 1);

    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut samples: HashMap<String, usize> = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let labels: Vec<String> = key
            .labels()
            .map(|label| format!("{}={}", label.key(), label.value()))
            .collect();
        let name = format!("{} {}", key.name(), labels.join(","));
        match value {
            DebugValue::Counter(n) => {
                counts.insert(name, n);
            }
            DebugValue::Histogram(values) => {
                *samples.entry(key.name().to_owned()).or_default() += values.len();
            }
            DebugValue::Gauge(_) => {}
        }
    }
    let count = |outcome: &str, reason: &str, namespace: &str| {
        let name = format!(
            "hooklatch_requests_total outcome={outcome},reason={reason},scheme=standard,namespace={namespace}"
        );
        counts.get(&name).copied().unwrap_or(0)
    };
    assert_eq!(count("accepted", "", "orders"), 1, "{counts:#?}");
    assert_eq!(count("duplicate", "", "orders"), 1);
    assert_eq!(count("rejected", "signature", ""), 1);
    assert_eq!(count("rejected", "timestamp", ""), 1);
    assert_eq!(count("too_large", "body_too_large", ""), 1);
    assert_eq!(count("store_error", "store_unavailable", "orders"), 1);
    assert_eq!(
        counts
            .iter()
            .filter(|(name, _)| name.starts_with("hooklatch_requests_total"))
            .map(|(_, count)| count)
            .sum::<u64>(),
        6,
        "nothing else counted: {counts:#?}"
    );
    assert_eq!(
        counts.get("hooklatch_worker_events_total namespace=orders,type=ping,outcome=handled"),
        Some(&1),
        "{counts:#?}"
    );
    assert_eq!(samples["hooklatch_worker_handler_seconds"], 1);
    assert_eq!(
        samples["hooklatch_worker_lag_seconds"], 1,
        "the wait from the accept to the handler, for its first attempt"
    );
    assert!(
        counts.keys().all(|name| !name.contains("msg_")),
        "no event id in a label"
    );
    assert_eq!(
        samples["hooklatch_verify_duration_seconds"], 5,
        "every verify timed"
    );
    assert_eq!(
        samples["hooklatch_store_duration_seconds"], 3,
        "every accept timed"
    );
}
