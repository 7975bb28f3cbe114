//! Endpoints kept in the store, stamped over every delivery store (memory,
//! SQLite, Postgres, Redis on one server and as a cluster): what one
//! dispatcher saves, changes or removes, every other dispatcher on the
//! store sees, each opening the store anew as another process would.

#[path = "support/receiver.rs"]
mod receiver;
mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hooklatch::sender::outbox::DeliveryState;
use hooklatch::sender::outbox::EndpointRegistry;
use hooklatch::sender::transport::{Response, TransportError};
use hooklatch::sender::{DispatchError, Dispatcher, EndpointConfig, Transport};
use receiver::*;

#[path = "support/outbox_backends.rs"]
mod backends;
use backends::*;

/// The receiver, and the URL of every attempt with its event id.
#[derive(Clone)]
struct Recording {
    receiver: Receiver,
    urls: Arc<Mutex<Vec<(String, String)>>>,
}

impl Recording {
    fn new() -> Self {
        Self {
            receiver: Receiver::answering(200),
            urls: Arc::default(),
        }
    }

    fn url_of(&self, id: &str) -> Option<String> {
        let urls = self.urls.lock().unwrap();
        urls.iter()
            .rev()
            .find(|(_, seen)| seen == id)
            .map(|(url, _)| url.clone())
    }
}

impl Transport for Recording {
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Response, TransportError> {
        let id = headers
            .iter()
            .find(|(name, _)| name == "webhook-id")
            .map(|(_, value)| value.clone())
            .unwrap_or_default();
        self.urls.lock().unwrap().push((url.to_owned(), id));
        self.receiver.post(url, headers, body).await
    }
}

async fn delivered(store: &impl hooklatch::sender::outbox::DeliveryStore, id: &str) -> bool {
    state_of(store, id).await == DeliveryState::Delivered
}

fn config(url: &str) -> EndpointConfig {
    EndpointConfig::new(url, "standard", [SECRET])
        .expect("config")
        .with_policy(every(Duration::from_millis(50), 100))
}

fn quick<S: hooklatch::sender::outbox::DeliveryStore>(
    store: S,
    transport: Recording,
) -> Dispatcher<S, Recording> {
    Dispatcher::new(store, transport)
        .with_poll_interval(Duration::from_millis(20))
        .with_endpoint_refresh(Duration::from_millis(50))
        .with_lease(Duration::from_secs(5))
        .expect("lease")
}

/// The version moves with every save and every removal that removed
/// something, and a read returns every saved endpoint with the version.
async fn version_moves_with_each_change(backend: impl Backend) {
    let store = backend.open().await;
    assert_eq!(store.endpoints_version().await.unwrap(), 0);
    let first = store.save_endpoint("orders", "one").await.unwrap();
    let second = store.save_endpoint("invoices", "two").await.unwrap();
    let third = store.save_endpoint("orders", "three").await.unwrap();
    assert!(0 < first && first < second && second < third);
    let saved = backend.open().await.saved_endpoints().await.unwrap();
    assert_eq!(saved.version, third);
    let names: Vec<(&str, &str)> = saved
        .endpoints
        .iter()
        .map(|(name, config)| (name.as_str(), config.as_str()))
        .collect();
    assert_eq!(names, [("invoices", "two"), ("orders", "three")]);

    assert!(store.remove_endpoint("orders").await.unwrap());
    let removed = store.endpoints_version().await.unwrap();
    assert!(removed > third);
    assert!(!store.remove_endpoint("orders").await.unwrap());
    assert_eq!(store.endpoints_version().await.unwrap(), removed);
    let saved = store.saved_endpoints().await.unwrap();
    assert_eq!(saved.endpoints.keys().collect::<Vec<_>>(), ["invoices"]);
    assert!(store.save_endpoint("no spaces", "x").await.is_err());
}

/// One dispatcher saves an endpoint; another, on the store opened anew and
/// never told of it, delivers to it with the saved secret and URL, follows
/// a change of URL, and stops once it is removed.
async fn saved_endpoints_reach_every_dispatcher(backend: impl Backend) {
    let admin = quick(backend.open().await, Recording::new());
    admin
        .save_endpoint(ENDPOINT, &config("https://one.example/hooks"))
        .await
        .expect("save");

    let transport = Recording::new();
    let worker = quick(backend.open().await, transport.clone());
    let running = worker.start();
    assert!(admin.send(ENDPOINT, "msg_a", b"{}").await.unwrap());
    let store = backend.open().await;
    wait_until("the first event is delivered", || {
        delivered(&store, "msg_a")
    })
    .await;
    assert_eq!(
        transport.url_of("msg_a").as_deref(),
        Some("https://one.example/hooks")
    );

    admin
        .save_endpoint(ENDPOINT, &config("https://two.example/hooks"))
        .await
        .expect("update");
    // The worker's refresh runs every 50 ms; what it sends after that
    // goes to the new URL. 2 s leave a loaded machine's stalls room.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(admin.send(ENDPOINT, "msg_b", b"{}").await.unwrap());
    wait_until("the second event is delivered", || {
        delivered(&store, "msg_b")
    })
    .await;
    assert_eq!(
        transport.url_of("msg_b").as_deref(),
        Some("https://two.example/hooks")
    );

    assert!(admin.remove_endpoint(ENDPOINT).await.unwrap());
    assert!(matches!(
        admin.send(ENDPOINT, "msg_c", b"{}").await,
        Err(DispatchError::UnknownEndpoint(_))
    ));
    wait_until("the worker's refresh drops the endpoint", || async {
        worker.endpoints().is_empty()
    })
    .await;
    assert!(matches!(
        worker.send(ENDPOINT, "msg_c", b"{}").await,
        Err(DispatchError::UnknownEndpoint(_))
    ));
    running.stop().await;
    assert_eq!(transport.receiver.successes().len(), 2);
}

/// A dispatcher started after events were sent, with no endpoint added to
/// it, finds the saved endpoint in the store and delivers the backlog.
async fn a_new_dispatcher_delivers_the_backlog(backend: impl Backend) {
    let sender = quick(backend.open().await, Recording::new());
    sender
        .save_endpoint(ENDPOINT, &config("https://one.example/hooks"))
        .await
        .expect("save");
    let ids = ids(8);
    for id in &ids {
        assert!(sender.send(ENDPOINT, id, id.as_bytes()).await.unwrap());
    }
    drop(sender);

    let transport = Recording::new();
    let store = backend.open().await;
    let running = quick(store.clone(), transport.clone()).start();
    wait_until("the backlog is delivered", || {
        all_in(&store, &ids, DeliveryState::Delivered)
    })
    .await;
    running.stop().await;
    let successes = transport.receiver.successes();
    assert!(ids.iter().all(|id| successes.get(id) == Some(&1)));
}

/// A saved configuration that cannot be read (written by hand, or by
/// another version) leaves that endpoint out, and the others deliver.
async fn an_unreadable_endpoint_is_left_out(backend: impl Backend) {
    let store = backend.open().await;
    store
        .save_endpoint("broken", "{\"url\": 7}")
        .await
        .expect("save");
    store
        .save_endpoint(ENDPOINT, &config("https://one.example/hooks").to_json())
        .await
        .expect("save");
    let transport = Recording::new();
    let dispatcher = quick(backend.open().await, transport.clone());
    assert!(matches!(
        dispatcher.send("broken", "msg_x", b"{}").await,
        Err(DispatchError::UnknownEndpoint(_))
    ));
    assert!(dispatcher.send(ENDPOINT, "msg_a", b"{}").await.unwrap());
    let running = dispatcher.start();
    wait_until("the good endpoint's event is delivered", || {
        delivered(&store, "msg_a")
    })
    .await;
    running.stop().await;
    assert_eq!(dispatcher.endpoints(), [ENDPOINT]);
}

macro_rules! suite {
    ($module:ident, $backend:expr) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_registry_version_moves_with_every_save_and_removal() {
                version_moves_with_each_change($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_endpoint_saved_changed_or_removed_by_one_dispatcher_reaches_another() {
                saved_endpoints_reach_every_dispatcher($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_dispatcher_with_no_endpoints_added_delivers_the_saved_endpoints_backlog() {
                a_new_dispatcher_delivers_the_backlog($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_unreadable_saved_endpoint_is_left_out_and_the_others_deliver() {
                an_unreadable_endpoint_is_left_out($backend).await;
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
