//! The receiver end to end: unique signed 1 KiB Standard Webhooks over 32
//! keep-alive connections, to the axum layer in inbox mode on each store
//! and to a bare axum handler answering 202, in the same run. Prints
//! requests per second, p50 and p99, and each ratio to bare axum.
//!
//! Run with: cargo bench --bench receiver --all-features
//! (`RECEIVER_SECONDS` sets how long each target is loaded; default 5.)
//!
//! Uses the servers in `HOOKLATCH_TEST_POSTGRES_URL` and
//! `HOOKLATCH_TEST_REDIS_URL`, or starts private ones. Client and servers
//! share the machine's cores.

#[path = "common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use common::support;
use hooklatch::dedup::{Inbox, PostgresStore, RedisStore, SqliteStore};
use hooklatch::verify::{Scheme, Signer, Verifier};
use hooklatch_tower::WebhookLayer;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const CONNECTIONS: usize = 32;

fn receiver<S: Inbox + Clone + 'static>(store: S) -> Router {
    let verifier = Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .expect("secret")
        .build()
        .expect("verifier");
    let endpoint = WebhookLayer::new(verifier)
        .with_inbox(store, "bench")
        .expect("namespace")
        .into_endpoint();
    Router::new().route("/webhooks", axum::routing::post_service(endpoint))
}

fn bare() -> Router {
    Router::new().route(
        "/webhooks",
        post(|| async { (StatusCode::ACCEPTED, "accepted") }),
    )
}

struct Load {
    per_second: f64,
    p50: Duration,
    p99: Duration,
}

/// Loads `app` for `seconds` over [`CONNECTIONS`] keep-alive connections,
/// each request a new event.
async fn load(app: Router, seconds: u64) -> Load {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!(
        "http://{}/webhooks",
        listener.local_addr().expect("address")
    );
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let signer = Arc::new(Signer::new(Scheme::standard_webhooks(), [SECRET]).expect("signer"));
    let body: Arc<[u8]> = vec![b'x'; 1024].into();
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let callers: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            let (url, signer, body) = (url.clone(), Arc::clone(&signer), Arc::clone(&body));
            tokio::spawn(async move {
                let client = reqwest::Client::builder()
                    .pool_max_idle_per_host(1)
                    .build()
                    .expect("client");
                let mut latencies = Vec::new();
                while Instant::now() < until {
                    let id = format!("msg_{}", NEXT.fetch_add(1, Ordering::Relaxed));
                    let headers = signer.sign(&id, SystemTime::now(), &body).expect("sign");
                    let mut request = client.post(&url).body(body.to_vec());
                    for (name, value) in headers.iter() {
                        request = request.header(name, value);
                    }
                    let sent = Instant::now();
                    let status = request.send().await.expect("answer").status();
                    latencies.push(sent.elapsed());
                    assert_eq!(status.as_u16(), 202, "every event is new");
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for caller in callers {
        latencies.extend(caller.await.expect("caller"));
    }
    let elapsed = started.elapsed();
    server.abort();
    latencies.sort();
    let at = |fraction: f64| latencies[((latencies.len() - 1) as f64 * fraction) as usize];
    Load {
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
    }
}

fn main() {
    let seconds: u64 = std::env::var("RECEIVER_SECONDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(5);
    let postgres = support::postgres();
    let redis = support::redis();
    let runtime = common::runtime();
    runtime.block_on(async {
        let dir = support::TempDir::new("receiver-bench");
        let mut rows = vec![("bare axum (202)", load(bare(), seconds).await)];
        let sqlite = SqliteStore::open(dir.path().join("inbox.db")).await.expect("sqlite");
        rows.push(("SQLite", load(receiver(sqlite), seconds).await));
        let pg = PostgresStore::connect(&postgres.url()).await.expect("postgres");
        rows.push(("Postgres", load(receiver(pg), seconds).await));
        let store = RedisStore::connect(&redis.url()).await.expect("redis");
        rows.push(("Redis", load(receiver(store), seconds).await));
        let bare = rows[0].1.per_second;
        println!();
        println!("Receiver, {CONNECTIONS} keep-alive connections, unique signed 1 KiB webhooks, {seconds} s each (same run):");
        println!("| target | req/s | p50 | p99 | ratio to bare axum |");
        println!("|---|---|---|---|---|");
        for (name, load) in rows {
            println!(
                "| {name} | {:.0} | {:.2} ms | {:.2} ms | {:.2}x |",
                load.per_second,
                load.p50.as_secs_f64() * 1e3,
                load.p99.as_secs_f64() * 1e3,
                load.per_second / bare
            );
        }
    });
}
