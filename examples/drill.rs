//! Run with: cargo run --example drill --features sender-http -- [--events N] [--fail-for SECS] [--slow-share F]
//!
//! Both ends in one process. A sender delivers N events to an axum
//! receiver (hooklatch-tower with the SQLite inbox) through the real HTTP
//! stack. The receiver refuses everything (503) for the first SECS seconds,
//! and a share F of the events it accepts answer only after the sender has
//! given up waiting, so the sender retries events that were in fact
//! accepted: real duplicates. A worker drains the inbox.
//!
//! At the end it prints what was sent, delivered, abandoned, suppressed as
//! duplicates and acted on, and the peak number of concurrent deliveries.
//! It exits non-zero if any event was lost or acted on twice.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hooklatch::dedup::{Inbox, SqliteStore};
use hooklatch::sender::{
    AddressPolicy, Breaker, Endpoint, Final, HttpTransport, Jitter, Policy, Schedule, deliver,
};
use hooklatch::verify::{Scheme, Signer, Verifier};
use hooklatch_tower::WebhookLayer;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// How long the sender waits for an answer.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(300);
/// Per-endpoint concurrency limit.
const CONCURRENCY: usize = 10;

/// What the drill measured.
#[derive(Debug, Default, PartialEq, Eq)]
struct Report {
    sent: usize,
    delivered: usize,
    abandoned: usize,
    duplicates_suppressed: usize,
    acted_on: usize,
    acted_on_twice: usize,
    peak_concurrency: usize,
    elapsed: Duration,
}

impl Report {
    fn ok(&self) -> bool {
        self.acted_on == self.sent && self.acted_on_twice == 0 && self.abandoned == 0
    }
}

/// Runs the drill: `events` events, the receiver down for `fail_for`, and
/// every `1 / slow_share`-th accepted event answered too late.
async fn app(events: usize, fail_for: Duration, slow_share: f64) -> Report {
    let folder = std::env::temp_dir().join(format!("hooklatch-drill-{}", std::process::id()));
    std::fs::create_dir_all(&folder).expect("temp folder");
    let inbox = SqliteStore::open(folder.join("drill.db"))
        .await
        .expect("sqlite");

    // The receiver.
    let started = Instant::now();
    let duplicates = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let slow_every = if slow_share > 0.0 {
        (1.0 / slow_share).round().max(1.0) as usize
    } else {
        usize::MAX
    };
    let faults = {
        let (duplicates, accepted) = (duplicates.clone(), accepted.clone());
        move |request: Request, next: Next| {
            let (duplicates, accepted) = (duplicates.clone(), accepted.clone());
            async move {
                if started.elapsed() < fail_for {
                    return (axum::http::StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
                }
                let response: Response = next.run(request).await;
                match response.status().as_u16() {
                    200 => {
                        duplicates.fetch_add(1, Ordering::Relaxed);
                    }
                    202 if accepted.fetch_add(1, Ordering::Relaxed) % slow_every == 0 => {
                        // Accepted and stored, but the sender stops waiting.
                        tokio::time::sleep(ATTEMPT_TIMEOUT * 2).await;
                    }
                    _ => {}
                }
                response
            }
        }
    };
    let verifier = Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .expect("valid secret")
        .build()
        .expect("verifier");
    let receiver = Router::new()
        .route("/hooks", post(|| async {}))
        .layer(
            WebhookLayer::new(verifier)
                .with_inbox(inbox.clone(), "drill")
                .expect("namespace"),
        )
        .layer(middleware::from_fn(faults));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/hooks", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, receiver).await });

    // The worker: acts on each event it takes, and counts.
    let acted: Arc<std::sync::Mutex<HashMap<String, usize>>> = Arc::default();
    let worker = {
        let (inbox, acted) = (inbox.clone(), acted.clone());
        tokio::spawn(async move {
            loop {
                let batch = inbox.take("drill", "worker", 50).await.unwrap_or_default();
                if batch.is_empty() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                for delivery in batch {
                    *acted
                        .lock()
                        .expect("lock")
                        .entry(delivery.id.clone())
                        .or_default() += 1;
                    let _ = inbox.ack(&delivery).await;
                }
            }
        })
    };

    // The sender: every event through the real HTTP stack, at most
    // CONCURRENCY at a time.
    let transport = Arc::new(
        HttpTransport::with_timeouts(
            AddressPolicy::strict().insecure_allow_loopback(),
            Duration::from_secs(1),
            ATTEMPT_TIMEOUT,
        )
        .expect("transport"),
    );
    // A short cool-down: the drill runs in seconds, not hours.
    let endpoint = Arc::new(
        Endpoint::new(
            &url,
            Signer::new(Scheme::standard_webhooks(), [SECRET]).expect("signer"),
        )
        .with_breaker(Breaker::new().with_cool_down(Duration::from_millis(300))),
    );
    let policy = Arc::new(Policy::new(Schedule::Exponential {
        base: Duration::from_millis(100),
        cap: Duration::from_secs(1),
        attempts: 30,
        jitter: Jitter::Full,
    }));
    let limit = Arc::new(tokio::sync::Semaphore::new(CONCURRENCY));
    let (in_flight, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let deliveries: Vec<_> = (0..events)
        .map(|n| {
            let (transport, endpoint, policy) =
                (transport.clone(), endpoint.clone(), policy.clone());
            let (limit, in_flight, peak) = (limit.clone(), in_flight.clone(), peak.clone());
            tokio::spawn(async move {
                let _permit = limit.acquire().await.expect("semaphore");
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                let mut seed = (n as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let random = move || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed >> 11) as f64 / (1u64 << 53) as f64
                };
                let body = format!("{{\"order\":{n}}}");
                let record = deliver(
                    &*transport,
                    &endpoint,
                    &policy,
                    &format!("evt_{n}"),
                    body.as_bytes(),
                    random,
                )
                .await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                record.outcome
            })
        })
        .collect();
    let mut report = Report {
        sent: events,
        ..Report::default()
    };
    for delivery in deliveries {
        match delivery.await.expect("delivery task") {
            Final::Delivered => report.delivered += 1,
            Final::Gone | Final::Dead => report.abandoned += 1,
        }
    }
    // Let the worker finish the inbox.
    let deadline = Instant::now() + Duration::from_secs(10);
    while acted.lock().expect("lock").len() < report.delivered && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    worker.abort();
    let acted = acted.lock().expect("lock");
    report.acted_on = acted.len();
    report.acted_on_twice = acted.values().filter(|&&n| n > 1).count();
    report.duplicates_suppressed = duplicates.load(Ordering::Relaxed);
    report.peak_concurrency = peak.load(Ordering::SeqCst);
    report.elapsed = started.elapsed();
    let _ = std::fs::remove_dir_all(&folder);
    report
}

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|arg| arg == name)
        .and_then(|at| args.get(at + 1).cloned())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let events = flag(&args, "--events").map_or(200, |v| v.parse().expect("--events N"));
    let fail_for = flag(&args, "--fail-for").map_or(2.0, |v| v.parse().expect("--fail-for SECS"));
    let slow_share =
        flag(&args, "--slow-share").map_or(0.1, |v| v.parse().expect("--slow-share F"));
    let report = app(events, Duration::from_secs_f64(fail_for), slow_share).await;
    println!("events sent:                  {}", report.sent);
    println!("delivered:                    {}", report.delivered);
    println!("abandoned:                    {}", report.abandoned);
    println!(
        "duplicates suppressed:        {}",
        report.duplicates_suppressed
    );
    println!("events acted on:              {}", report.acted_on);
    println!("events acted on twice:        {}", report.acted_on_twice);
    println!(
        "peak concurrent deliveries:   {} (limit {CONCURRENCY})",
        report.peak_concurrency
    );
    println!(
        "took:                         {:.1} s",
        report.elapsed.as_secs_f64()
    );
    if report.ok() {
        println!("ok: every event acted on exactly once");
        std::process::ExitCode::SUCCESS
    } else {
        println!("FAILED: events were lost or acted on twice");
        std::process::ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_short_drill_loses_nothing_and_acts_on_nothing_twice() {
        let report = super::app(60, std::time::Duration::from_millis(500), 0.2).await;
        assert!(report.ok(), "{report:?}");
        assert!(
            report.duplicates_suppressed > 0,
            "the drill made real duplicates: {report:?}"
        );
        assert!(report.peak_concurrency <= super::CONCURRENCY);
    }
}
