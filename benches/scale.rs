//! A dispatcher for 1,000 endpoints over HTTP on 127.0.0.1, on Postgres
//! and on Redis: deliveries per second and store calls per delivered
//! event with every endpoint answering 204; then, sending at a steady
//! rate, the healthy endpoints' p99 from `send` to the receiver with and
//! without one blackholed endpoint (a listener that accepts and never
//! answers), and the most requests that endpoint ever held open.
//!
//! Run with: cargo bench --all-features --bench scale
//!
//! Uses the servers in `HOOKLATCH_TEST_POSTGRES_URL` and
//! `HOOKLATCH_TEST_REDIS_URL`, or starts private ones. Prints a table.
//! `SCALE_ENDPOINTS` (default 1000) and `SCALE_EVENTS` (events per
//! endpoint in the throughput run, default 3) change the sizes. Below the
//! table, the script calls Redis ran per delivery at 200/s (a take across
//! endpoints is one store call but up to two script calls a shard).

#[path = "common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::http::HeaderMap;
use hooklatch::sender::OutboxError;
use hooklatch::sender::outbox::{
    DeliveryCounts, DeliveryStore, Due, DueAcross, EndpointRegistry, Keeping, NewDelivery,
    OutboxView, RecentAttempt, SavedEndpoints, StoredDelivery, Taken, Wanted,
};
use hooklatch::sender::outbox::{
    DeliveryState, DisableReason, EndpointHealth, HealthChange, Retention,
};
use hooklatch::sender::rules::{Attempt, Breaker, Jitter, Schedule, Step};
use hooklatch::sender::{
    AddressPolicy, Dispatcher, HttpTransport, Keyed, Policy, PostgresOutbox, RedisOutbox, SendKey,
};
use hooklatch::verify::{Scheme, Signer};
use tokio::net::TcpListener;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const BODY: &[u8] = &[b'x'; 512];
/// The blackholed endpoint's concurrency limit.
const DEAD_LIMIT: usize = 4;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A store that counts the calls the dispatcher makes, but not `enqueue`
/// (the sender's) or reads.
#[derive(Clone)]
struct Counting<S> {
    inner: S,
    calls: Arc<AtomicUsize>,
}

impl<S: DeliveryStore + Clone> EndpointRegistry for Counting<S> {
    async fn save_endpoint(&self, name: &str, config: &str) -> Result<u64, OutboxError> {
        self.inner.save_endpoint(name, config).await
    }
    async fn remove_endpoint(&self, name: &str) -> Result<bool, OutboxError> {
        self.inner.remove_endpoint(name).await
    }
    // The dispatcher's refresh: counted, as it runs on every dispatcher.
    async fn endpoints_version(&self) -> Result<u64, OutboxError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.endpoints_version().await
    }
    async fn saved_endpoints(&self) -> Result<SavedEndpoints, OutboxError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.saved_endpoints().await
    }
}

impl<S: OutboxView + Clone> OutboxView for Counting<S> {
    async fn endpoint_names(&self) -> Result<Vec<String>, OutboxError> {
        self.inner.endpoint_names().await
    }
    async fn recent_attempts(&self, e: &str, n: usize) -> Result<Vec<RecentAttempt>, OutboxError> {
        self.inner.recent_attempts(e, n).await
    }
}

impl<S: Keeping + Clone> Keeping for Counting<S> {
    async fn add_keyed_delivery(
        &self,
        key: SendKey<'_>,
        new: NewDelivery<'_>,
    ) -> Result<Keyed, OutboxError> {
        self.inner.add_keyed_delivery(key, new).await
    }
    async fn forget_keys(&self, e: &str, now: SystemTime) -> Result<u64, OutboxError> {
        self.inner.forget_keys(e, now).await
    }
    async fn purge_outcomes(
        &self,
        e: &str,
        retention: &Retention,
        now: SystemTime,
    ) -> Result<u64, OutboxError> {
        self.inner.purge_outcomes(e, retention, now).await
    }

    async fn purge(&self, before: SystemTime) -> Result<u64, OutboxError> {
        self.inner.purge(before).await
    }
}

impl<S: DeliveryStore + Clone> DeliveryStore for Counting<S> {
    async fn add_delivery(&self, new: NewDelivery<'_>) -> Result<bool, OutboxError> {
        self.inner.add_delivery(new).await
    }
    async fn take_due(
        &self,
        e: &str,
        now: SystemTime,
        limit: usize,
        lease: Duration,
    ) -> Result<Due, OutboxError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.take_due(e, now, limit, lease).await
    }
    async fn take_due_across(
        &self,
        w: &[Wanted],
        n: usize,
        l: Duration,
    ) -> Result<DueAcross, OutboxError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.take_due_across(w, n, l).await
    }
    async fn finish(
        &self,
        t: &Taken,
        a: &Attempt,
        s: Step,
        c: Option<HealthChange>,
    ) -> Result<EndpointHealth, OutboxError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.finish(t, a, s, c).await
    }
    async fn put_back(&self, t: &Taken, due: SystemTime) -> Result<(), OutboxError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.put_back(t, due).await
    }
    async fn delivery(&self, e: &str, id: &str) -> Result<Option<StoredDelivery>, OutboxError> {
        self.inner.delivery(e, id).await
    }
    async fn list(
        &self,
        e: &str,
        s: DeliveryState,
        limit: usize,
    ) -> Result<Vec<String>, OutboxError> {
        self.inner.list(e, s, limit).await
    }
    async fn replay(&self, e: &str, id: &str, now: SystemTime) -> Result<bool, OutboxError> {
        self.inner.replay(e, id, now).await
    }
    async fn health(&self, e: &str) -> Result<EndpointHealth, OutboxError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.health(e).await
    }
    async fn disable(
        &self,
        e: &str,
        r: DisableReason,
        now: SystemTime,
    ) -> Result<bool, OutboxError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.inner.disable(e, r, now).await
    }
    async fn enable(&self, e: &str) -> Result<(), OutboxError> {
        self.inner.enable(e).await
    }

    async fn counts(&self, e: &str, now: SystemTime) -> Result<DeliveryCounts, OutboxError> {
        self.inner.counts(e, now).await
    }
}

/// When each event id reached a receiver.
type Arrivals = Arc<Mutex<HashMap<String, Instant>>>;

/// An axum receiver on 127.0.0.1 answering 204 and noting each arrival.
async fn receiver(arrivals: Arrivals) -> String {
    let app = axum::Router::new().fallback(move |headers: HeaderMap| {
        let arrivals = Arc::clone(&arrivals);
        async move {
            if let Some(id) = headers.get("webhook-id").and_then(|v| v.to_str().ok()) {
                arrivals
                    .lock()
                    .unwrap()
                    .insert(id.to_owned(), Instant::now());
            }
            axum::http::StatusCode::NO_CONTENT
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/hooks")
}

/// A listener that accepts and never answers, and the most connections
/// it ever held open at once.
async fn blackhole() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (open, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let most = Arc::clone(&peak);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let now = open.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            let open = Arc::clone(&open);
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt as _;
                let mut buffer = [0; 4096];
                while matches!(socket.read(&mut buffer).await, Ok(n) if n > 0) {}
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (format!("http://{address}/hooks"), peak)
}

fn policy(concurrency: usize) -> Policy {
    Policy::new(Schedule::Table {
        delays: vec![
            Duration::ZERO,
            Duration::from_secs(1),
            Duration::from_secs(2),
        ],
        jitter: Jitter::None,
    })
    .with_breaker(Breaker::new().with_failure_threshold(u32::MAX))
    .with_attempt_timeout(Duration::from_secs(2))
    .with_concurrency(concurrency)
}

/// A dispatcher over `store` with `endpoints` endpoints spread over four
/// receivers, and (if given) the endpoint `dead` at `dead_url`.
async fn dispatcher<S: DeliveryStore + Clone>(
    store: S,
    endpoints: usize,
    arrivals: &Arrivals,
    dead_url: Option<&str>,
) -> Dispatcher<S, HttpTransport> {
    let transport = HttpTransport::new(AddressPolicy::strict().insecure_allow_loopback()).unwrap();
    let dispatcher = Dispatcher::new(store, transport)
        .with_poll_interval(Duration::from_millis(100))
        .with_lease(Duration::from_secs(30))
        .unwrap();
    let mut urls = Vec::new();
    for _ in 0..4 {
        urls.push(receiver(Arc::clone(arrivals)).await);
    }
    for n in 0..endpoints {
        let signer = Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap();
        dispatcher
            .add_endpoint(&format!("e{n}"), &urls[n % 4], signer, policy(4))
            .await
            .unwrap();
    }
    if let Some(url) = dead_url {
        let signer = Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap();
        dispatcher
            .add_endpoint("dead", url, signer, policy(DEAD_LIMIT))
            .await
            .unwrap();
    }
    dispatcher
}

async fn wait_for(arrivals: &Arrivals, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(600);
    while arrivals.lock().unwrap().len() < count {
        assert!(Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Deliveries/s and store calls per delivered event, every endpoint
/// answering 204: `events` events to each endpoint, sent before the loop
/// starts.
impl<S> Counting<S> {
    /// `store`, counting its calls, and the count.
    fn wrap(store: S) -> (Self, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let counting = Self {
            inner: store,
            calls: Arc::clone(&calls),
        };
        (counting, calls)
    }
}

async fn throughput<S: DeliveryStore + Clone>(
    store: S,
    endpoints: usize,
    events: usize,
) -> (f64, f64) {
    let (store, calls) = Counting::wrap(store);
    let arrivals = Arrivals::default();
    let dispatcher = dispatcher(store, endpoints, &arrivals, None).await;
    for round in 0..events {
        for n in 0..endpoints {
            dispatcher
                .send(&format!("e{n}"), &format!("t{round}_{n}"), BODY)
                .await
                .unwrap();
        }
    }
    calls.store(0, Ordering::SeqCst);
    let start = Instant::now();
    let running = dispatcher.start();
    wait_for(&arrivals, endpoints * events).await;
    let elapsed = start.elapsed();
    running.stop().await;
    let delivered = (endpoints * events) as f64;
    (
        delivered / elapsed.as_secs_f64(),
        calls.load(Ordering::SeqCst) as f64 / delivered,
    )
}

/// Healthy endpoints' p99 from `send` to arrival, sending `rate` events a
/// second round-robin over the endpoints for `seconds`; with a blackholed
/// endpoint that gets every tenth event, and the most requests it held.
async fn latency<S: DeliveryStore + Clone>(
    store: S,
    endpoints: usize,
    rate: usize,
    seconds: u64,
    with_dead: bool,
) -> (Duration, f64, usize) {
    let (store, calls) = Counting::wrap(store);
    let arrivals = Arrivals::default();
    let (dead_url, peak) = blackhole().await;
    let url = with_dead.then_some(dead_url.as_str());
    let dispatcher = dispatcher(store, endpoints, &arrivals, url).await;
    let running = dispatcher.start();
    let mut sent = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1) / u32::try_from(rate).unwrap());
    let tag = if with_dead { "d" } else { "h" };
    let total = rate * usize::try_from(seconds).unwrap();
    for n in 0..total {
        tick.tick().await;
        let id = format!("{tag}{n}");
        if with_dead && n % 10 == 0 {
            dispatcher.send("dead", &id, BODY).await.unwrap();
            continue;
        }
        dispatcher
            .send(&format!("e{}", n % endpoints), &id, BODY)
            .await
            .unwrap();
        sent.insert(id, Instant::now());
    }
    wait_for(&arrivals, sent.len()).await;
    running.stop().await;
    let arrivals = arrivals.lock().unwrap();
    let mut waits: Vec<Duration> = sent
        .iter()
        .map(|(id, at)| arrivals[id].saturating_duration_since(*at))
        .collect();
    waits.sort();
    let p99 = waits[(waits.len() * 99 / 100).min(waits.len() - 1)];
    let calls = calls.load(Ordering::SeqCst) as f64 / sent.len() as f64;
    (p99, calls, peak.load(Ordering::SeqCst))
}

/// One row, and for a Redis store (the server's `redis_url`) the script
/// calls per delivery at 200/s, counted on the server: every script call
/// the run made, the sender's `enqueue` included.
async fn run<S: DeliveryStore + Clone>(
    name: &str,
    redis_url: Option<&str>,
    open: impl AsyncFn() -> S,
) -> (String, Option<f64>) {
    let endpoints = env("SCALE_ENDPOINTS", 1000);
    let events = env("SCALE_EVENTS", 3);
    let (per_second, calls) = throughput(open().await, endpoints, events).await;
    // A first paced run warms the receivers' connections and the
    // statements; it is not counted.
    let _ = latency(open().await, endpoints, 200, 2, false).await;
    let before = redis_url.map(common::support::script_calls);
    let (healthy, paced_calls, _) = latency(open().await, endpoints, 200, 5, false).await;
    let scripts = match (redis_url, before) {
        (Some(url), Some(before)) => {
            Some((common::support::script_calls(url) - before) as f64 / 1000.0)
        }
        _ => None,
    };
    let (with_dead, _, peak) = latency(open().await, endpoints, 200, 5, true).await;
    let rise = with_dead.as_secs_f64() / healthy.as_secs_f64() - 1.0;
    let row = format!(
        "| {name} | {endpoints} | {per_second:.0} | {calls:.2} | {paced_calls:.2} | {:.1} | {:.1} | {:+.0}% | {peak} (limit {DEAD_LIMIT}) |",
        healthy.as_secs_f64() * 1000.0,
        with_dead.as_secs_f64() * 1000.0,
        rise * 100.0,
    );
    (row, scripts)
}

fn main() {
    let postgres = common::support::postgres();
    let redis = common::support::redis();
    let runtime = common::runtime();
    let mut rows = Vec::new();
    runtime.block_on(async {
        let url = postgres.url();
        rows.push(
            run("postgres", None, async || {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(8)
                    .connect(&url)
                    .await
                    .unwrap();
                let store = PostgresOutbox::new(pool, &common::support::unique("scale")).unwrap();
                store.migrate().await.unwrap();
                store
            })
            .await,
        );
        let url = redis.url();
        rows.push(
            run("redis", Some(&url), async || {
                RedisOutbox::connect(&url)
                    .await
                    .unwrap()
                    .with_prefix(&common::support::unique("scale"))
                    .unwrap()
            })
            .await,
        );
    });
    println!();
    println!(
        "| outbox | endpoints | deliveries/s | store calls / delivery | at 200/s | healthy p99 ms | p99 ms with one blackholed | rise | blackholed endpoint's most in flight |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (row, _) in &rows {
        println!("{row}");
    }
    for (row, scripts) in &rows {
        if let Some(scripts) = scripts {
            let name = row.split('|').nth(1).unwrap_or_default().trim();
            println!("{name}: {scripts:.2} script calls a delivery at 200/s, enqueue included");
        }
    }
}
