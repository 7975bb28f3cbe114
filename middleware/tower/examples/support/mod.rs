//! What the axum examples share: their settings from the environment, the
//! store those settings pick, the worker that drains the inbox, and the
//! check their tests make. hooklatch-actix's example has its own copy (each
//! package ships its examples whole); only the web framework differs.

// Each example uses its own part.
#![allow(dead_code)]

use std::time::Duration;

use hooklatch::RedisConnection;
use hooklatch::dedup::{InboxQueue, PostgresInbox, RedisInbox, SqliteInbox};
use hooklatch::verify::{Scheme, Verifier};
use hooklatch::worker::{Event, Failure, Running, Worker};

/// The inbox namespace both examples accept events into.
pub(crate) const NAMESPACE: &str = "example";

/// What an example needs to serve: the verifier and the address.
pub(crate) struct Settings {
    pub(crate) verifier: Verifier,
    pub(crate) address: String,
}

/// What serving ends with.
pub(crate) type Served = Result<(), Box<dyn std::error::Error>>;

/// Serves the receiver on a store, whichever the environment picked.
pub(crate) trait Serve {
    /// Serves until the server stops.
    async fn serve<S: InboxQueue + Clone + 'static>(self, store: S) -> Served;
}

/// The store the environment names.
#[derive(Debug, PartialEq)]
pub(crate) enum StoreChoice {
    Postgres(String),
    /// One Redis server (`REDIS_URL`) or the seed nodes of a cluster
    /// (`REDIS_CLUSTER_NODES`), and how many replicas must confirm each
    /// accept (`REDIS_WAIT_REPLICAS`).
    Redis {
        nodes: Vec<String>,
        cluster: bool,
        wait_replicas: u32,
    },
    Sqlite,
}

/// Picks the store from the environment (`var` reads a variable):
///
/// - `DATABASE_URL` (`postgres://...`);
/// - `REDIS_CLUSTER_NODES` (`redis://host:port,redis://host:port,...`) for
///   a Redis Cluster, or `REDIS_URL` (`redis://...`) for one server; with
///   either, `REDIS_WAIT_REPLICAS` (a number, default 0) replicas must
///   confirm each accept within a second, or the sender is answered 503;
/// - otherwise the SQLite file `hooklatch.db`.
pub(crate) fn store_choice(var: impl Fn(&str) -> Option<String>) -> Result<StoreChoice, String> {
    let wait_replicas = match var("REDIS_WAIT_REPLICAS") {
        Some(text) => text
            .trim()
            .parse()
            .map_err(|_| format!("REDIS_WAIT_REPLICAS is `{text}`, not a number of replicas"))?,
        None => 0,
    };
    if let Some(url) = var("DATABASE_URL") {
        return Ok(StoreChoice::Postgres(url));
    }
    let redis = |nodes: Vec<String>, cluster| StoreChoice::Redis {
        nodes,
        cluster,
        wait_replicas,
    };
    if let Some(nodes) = var("REDIS_CLUSTER_NODES") {
        let nodes = nodes
            .split(',')
            .map(|node| node.trim().to_owned())
            .collect();
        return Ok(redis(nodes, true));
    }
    if let Some(url) = var("REDIS_URL") {
        return Ok(redis(vec![url], false));
    }
    if wait_replicas > 0 {
        return Err("REDIS_WAIT_REPLICAS needs REDIS_URL or REDIS_CLUSTER_NODES".into());
    }
    Ok(StoreChoice::Sqlite)
}

/// The settings from the environment: `HOOKLATCH_SECRET` is the `whsec_`
/// signing secret (required) and `HOOKLATCH_ADDR` where to listen (default
/// `127.0.0.1:3000`).
pub(crate) fn settings_from_env() -> Result<Settings, Box<dyn std::error::Error>> {
    let secret = std::env::var("HOOKLATCH_SECRET")
        .map_err(|_| "set HOOKLATCH_SECRET to the whsec_ signing secret")?;
    Ok(Settings {
        verifier: Verifier::builder(Scheme::standard_webhooks())
            .with_secret(&secret)?
            .build()?,
        address: address_from_env(),
    })
}

/// `HOOKLATCH_ADDR`, or `127.0.0.1:3000`.
pub(crate) fn address_from_env() -> String {
    std::env::var("HOOKLATCH_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into())
}

/// Opens the store the environment names ([`store_choice`]) and serves on
/// it.
pub(crate) async fn with_store_from_env(server: impl Serve) -> Served {
    match store_choice(|name| std::env::var(name).ok())? {
        StoreChoice::Postgres(url) => server.serve(PostgresInbox::connect(&url).await?).await,
        StoreChoice::Redis {
            nodes,
            cluster,
            wait_replicas,
        } => {
            let connection = if cluster {
                RedisConnection::open_cluster(&nodes).await?
            } else {
                RedisConnection::open(&nodes[0]).await?
            };
            let store = RedisInbox::new(connection)
                .await?
                .with_replica_acks(wait_replicas, Duration::from_secs(1));
            server.serve(store).await
        }
        StoreChoice::Sqlite => server.serve(SqliteInbox::open("hooklatch.db").await?).await,
    }
}

/// The example's worker: the library's `Worker`, whose handler prints
/// each event and sends its id to `handled`. It holds up to 256 events at
/// once and acks them in batches; failures would be retried with backoff
/// and dead-lettered with their reason.
pub(crate) fn worker<S: InboxQueue + 'static>(
    store: S,
    handled: tokio::sync::mpsc::UnboundedSender<String>,
) -> Running {
    let handler = move |event: Event| {
        println!(
            "event {} (attempt {}): {}",
            event.id(),
            event.attempt(),
            String::from_utf8_lossy(event.body())
        );
        let _ = handled.send(event.id().to_owned());
        async { Ok::<(), Failure>(()) }
    };
    Worker::new(store, NAMESPACE, handler)
        .with_concurrency(256)
        .start()
}

/// Takes everything in `namespace`, acking each; the ids in the order
/// taken.
#[cfg(test)]
pub(crate) async fn drain_ids<S: InboxQueue>(store: &S, namespace: &str) -> Vec<String> {
    let mut ids = Vec::new();
    loop {
        let batch = store.take(namespace, "drain", 100).await.expect("take");
        if batch.is_empty() {
            return ids;
        }
        for entry in batch {
            store.ack(&entry).await.expect("ack");
            ids.push(entry.id);
        }
    }
}

/// The examples' tests: a secret, a verifier for it, and the check that
/// each event sent several times is handled once.
#[cfg(test)]
pub(crate) mod check {
    use std::time::{Duration, SystemTime};

    use hooklatch::verify::{Scheme, Signer, Verifier};

    /// The test secret.
    pub(crate) const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    /// A verifier for [`SECRET`].
    pub(crate) fn verifier() -> Verifier {
        Verifier::builder(Scheme::standard_webhooks())
            .with_secret(SECRET)
            .unwrap()
            .build()
            .unwrap()
    }

    #[test]
    fn the_environment_picks_the_store() {
        use super::{StoreChoice, store_choice};
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| (*value).to_owned())
            }
        };
        assert_eq!(store_choice(env(&[])), Ok(StoreChoice::Sqlite));
        assert_eq!(
            store_choice(env(&[
                (
                    "REDIS_CLUSTER_NODES",
                    "redis://10.0.0.1:7000, redis://10.0.0.2:7000"
                ),
                ("REDIS_WAIT_REPLICAS", "1"),
            ])),
            Ok(StoreChoice::Redis {
                nodes: vec![
                    "redis://10.0.0.1:7000".into(),
                    "redis://10.0.0.2:7000".into()
                ],
                cluster: true,
                wait_replicas: 1,
            })
        );
        assert_eq!(
            store_choice(env(&[("REDIS_URL", "redis://127.0.0.1:6379")])),
            Ok(StoreChoice::Redis {
                nodes: vec!["redis://127.0.0.1:6379".into()],
                cluster: false,
                wait_replicas: 0,
            })
        );
        assert!(store_choice(env(&[("REDIS_WAIT_REPLICAS", "two")])).is_err());
        assert!(store_choice(env(&[("REDIS_WAIT_REPLICAS", "1")])).is_err());
    }

    /// Sends one event `id` signed with `secret`; the status.
    pub(crate) async fn send(url: &str, id: &str, secret: &str, body: &[u8]) -> u16 {
        let signer = Signer::new(Scheme::standard_webhooks(), [secret]).unwrap();
        let mut request = reqwest::Client::new().post(url).body(body.to_vec());
        for (name, value) in signer.sign(id, SystemTime::now(), body).unwrap().iter() {
            request = request.header(name, value);
        }
        request.send().await.unwrap().status().as_u16()
    }

    /// Sends three events to `url`, 3, 1 and 2 times, each answered 2xx,
    /// then asserts the worker handled each exactly once.
    pub(crate) async fn each_event_is_handled_once(
        url: &str,
        handled_ids: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    ) {
        let signer = Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap();
        let client = reqwest::Client::new();
        for (id, times) in [("evt_a", 3), ("evt_b", 1), ("evt_c", 2)] {
            for _ in 0..times {
                let body = format!("{{\"id\":\"{id}\"}}");
                let mut request = client.post(url).body(body.clone());
                let headers = signer.sign(id, SystemTime::now(), body.as_bytes()).unwrap();
                for (name, value) in headers.iter() {
                    request = request.header(name, value);
                }
                assert!(request.send().await.unwrap().status().is_success());
            }
        }
        let mut seen = Vec::new();
        while seen.len() < 3 {
            let id = tokio::time::timeout(Duration::from_secs(5), handled_ids.recv())
                .await
                .expect("the worker handles every event")
                .unwrap();
            seen.push(id);
        }
        seen.sort();
        assert_eq!(seen, ["evt_a", "evt_b", "evt_c"]);
        assert!(
            tokio::time::timeout(Duration::from_millis(600), handled_ids.recv())
                .await
                .is_err(),
            "each event was handled exactly once"
        );
    }
}
