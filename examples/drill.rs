//! Run with: cargo run --example drill --features sender-http -- [--events N] [--fail-for 2s] [--slow-share 0.1]
//!
//! Both ends in one process. A dispatcher (its outbox in SQLite) delivers
//! N events to an axum receiver (hooklatch-tower with the SQLite inbox)
//! through the real HTTP stack. The receiver refuses everything (503) for the first SECS seconds,
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
    AddressPolicy, Breaker, DeliveryState, Dispatcher, HttpTransport, Jitter, Policy, Schedule,
    SqliteDeliveries, Transport,
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

/// The HTTP transport, counting the attempts in flight.
struct Counting {
    inner: HttpTransport,
    in_flight: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl Transport for Counting {
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<hooklatch::sender::Response, hooklatch::sender::TransportError> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let _done = Done(&self.in_flight);
        self.inner.post(url, headers, body).await
    }
}

/// Counts an attempt as ended when dropped, which covers a timeout
/// dropping it mid-flight.
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
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

    // The sender: a dispatcher with its outbox in SQLite, through the real
    // HTTP stack, at most CONCURRENCY deliveries at a time.
    let transport = Counting {
        inner: HttpTransport::with_timeouts(
            AddressPolicy::strict().insecure_allow_loopback(),
            Duration::from_secs(1),
            ATTEMPT_TIMEOUT,
        )
        .expect("transport"),
        in_flight: Arc::default(),
        peak: Arc::default(),
    };
    let peak = transport.peak.clone();
    let outbox = SqliteDeliveries::open(folder.join("outbox.db"))
        .await
        .expect("sqlite outbox");
    let dispatcher =
        Dispatcher::new(outbox, transport).with_poll_interval(Duration::from_millis(20));
    // Short waits and cool-down: the drill runs in seconds, not hours.
    let policy = Policy::new(Schedule::Exponential {
        base: Duration::from_millis(100),
        cap: Duration::from_secs(1),
        attempts: 30,
        jitter: Jitter::Full,
    })
    .with_attempt_timeout(ATTEMPT_TIMEOUT)
    .with_breaker(Breaker::new().with_cool_down(Duration::from_millis(300)))
    .with_concurrency(CONCURRENCY);
    let signer = Signer::new(Scheme::standard_webhooks(), [SECRET]).expect("signer");
    dispatcher
        .add_endpoint("drill", &url, signer, policy)
        .await
        .expect("endpoint");
    let ids: Vec<String> = (0..events).map(|n| format!("evt_{n}")).collect();
    for (n, id) in ids.iter().enumerate() {
        let body = format!("{{\"order\":{n}}}");
        dispatcher
            .send("drill", id, body.as_bytes())
            .await
            .expect("stored for delivery");
    }
    let running = dispatcher.start();
    let mut report = Report {
        sent: events,
        ..Report::default()
    };
    let mut pending = ids;
    while !pending.is_empty() {
        let mut still = Vec::new();
        for id in pending {
            let state = dispatcher
                .delivery("drill", &id)
                .await
                .expect("outbox")
                .map(|delivery| delivery.state);
            match state {
                Some(DeliveryState::Delivered) => report.delivered += 1,
                Some(DeliveryState::Pending) => still.push(id),
                // Gone, dead, or missing: it will not be delivered.
                _ => report.abandoned += 1,
            }
        }
        pending = still;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running.stop().await;
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

/// Both ends of a webhook, an outage and real duplicates, on loopback.
#[derive(Debug, clap::Parser)]
#[command(name = "drill")]
struct Args {
    /// How many events to send.
    #[arg(long, default_value_t = 200)]
    events: usize,
    /// How long the receiver answers 503 at the start: `2s`, `500ms`, `1m`,
    /// or a number of seconds.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    fail_for: Duration,
    /// The share of requests the receiver answers slowly, so that the
    /// sender times out and retries what was in fact handled (0 to 1).
    #[arg(long, default_value_t = 0.1, value_parser = parse_share)]
    slow_share: f64,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|error| format!("`{text}`: {error}"));
    }
    humantime::parse_duration(text)
        .map_err(|error| format!("`{text}` is not a duration such as 2s, 500ms or 1m: {error}"))
}

fn parse_share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("`{text}` is not a share from 0 to 1")),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let Args {
        events,
        fail_for,
        slow_share,
    } = <Args as clap::Parser>::parse();
    let report = app(events, fail_for, slow_share).await;
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
    use clap::Parser as _;

    #[test]
    fn flags_parse_durations_and_refuse_bad_input_with_a_usage_error() {
        let args = super::Args::try_parse_from(["drill", "--fail-for", "5s"]).unwrap();
        assert_eq!(args.fail_for, std::time::Duration::from_secs(5));
        let args = super::Args::try_parse_from(["drill", "--fail-for", "1.5"]).unwrap();
        assert_eq!(args.fail_for, std::time::Duration::from_millis(1500));
        for bad in [
            &["drill", "--fail-for", "soon"][..],
            &["drill", "--slow-share", "2"],
            &["drill", "--events", "-1"],
        ] {
            let error = super::Args::try_parse_from(bad).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{bad:?}");
        }
        let help = super::Args::try_parse_from(["drill", "--help"]).unwrap_err();
        assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
    }

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
