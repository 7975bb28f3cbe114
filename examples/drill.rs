//! Run with: cargo run --example drill --all-features -- [--preset NAME] [--time-scale N] [--events N] [--fail-for 2s] [--slow-share 0.1]
//!
//! Both ends in one process. A dispatcher (its outbox in SQLite) delivers
//! N events to an axum receiver (hooklatch-tower with the SQLite inbox)
//! through the real HTTP stack. The receiver refuses everything (503) for
//! the first `--fail-for`, and the events are sent evenly over that
//! outage (all at once without one), as a product sends them while its
//! subscriber is down. A share of the events the receiver accepts answer
//! only after the sender has given up waiting, so the sender retries
//! events that were in fact accepted: real duplicates. A worker drains the
//! inbox.
//!
//! `--preset` takes one of the named policies (see `--help`) instead of
//! the demo's fast one, and `--time-scale N` runs both ends' clock N times
//! faster than the wall clock: the schedule and its jitter, the outage, the
//! disable timer, the breaker's cool-down. Timeouts stay in real time: they
//! are about the network, not the calendar. When the endpoint is disabled,
//! the drill enables it once the outage is over, as its owner would. The
//! machine has to keep up: at 86400x a millisecond late is 86 s of drill
//! time. The drill looks at the outbox every 100 ms, so that its own reads
//! do not slow the dispatcher's (the SQLite outbox has one connection).
//!
//! At the end it prints what was sent, delivered, abandoned, suppressed as
//! duplicates and acted on, and the peak number of concurrent deliveries;
//! it exits non-zero unless the outcome is the one the policy promises:
//!
//! - no event acted on twice, and every delivered event acted on;
//! - every event delivered, except one that ran out of attempts with all of
//!   them inside the outage (and that an enable did not replay);
//! - never more deliveries at once than the policy's concurrency limit;
//! - an outage longer than the policy's disable time disables the endpoint,
//!   which keeps every event until it is enabled again; a shorter one does
//!   not disable it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hooklatch::dedup::{InboxQueue, SqliteInbox};
use hooklatch::sender::outbox::{DeliveryState, DisableReason};
use hooklatch::sender::rules::{Breaker, Jitter, NoticeKind, Schedule};
use hooklatch::sender::{
    AddressPolicy, Dispatcher, HttpTransport, Policy, SqliteOutbox, Transport,
};
use hooklatch::verify::{Clock, Scheme, Signer, Verifier};
use hooklatch_tower::WebhookLayer;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// How long the demo's sender waits for an answer.
const DEMO_TIMEOUT: Duration = Duration::from_millis(300);
/// How often the drill looks at the outbox and the worker at the inbox,
/// in real time.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// One of the named policies (`src/sender/presets.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Preset {
    /// 7 attempts (0, 30 s, 2 min, 10 min, 1 h, 6 h, 24 h, each
    /// up to 10% later), disabled after 7 days with a notice, the backlog
    /// delivered after the enable.
    SevenOverADay,
    /// Svix's table with its jitter, disabled after 5 days.
    Svix,
    /// Svix's table without jitter, 410 retried, one probe after
    /// 5 failures, disabled after 5 days.
    SvixTableWithoutJitter,
    /// 1 + 5 attempts over 10.6 h, a 3-probe breaker.
    FiveRetriesOverTenHours,
    /// 9 attempts over 3 days (±10%), one failure pauses the
    /// URL, disabled after 3 days.
    NineOverThreeDays,
    /// 10 attempts doubling from 1 s to a 1 h cap (±25%), a
    /// breaker open 24 h after 20 failures.
    ExponentialToAnHour,
}

impl Preset {
    fn policy(self) -> Policy {
        match self {
            Self::SevenOverADay => Policy::seven_attempts_over_a_day(),
            Self::Svix => Policy::svix(),
            Self::SvixTableWithoutJitter => Policy::svix_table_without_jitter(),
            Self::FiveRetriesOverTenHours => Policy::five_retries_over_ten_hours(),
            Self::NineOverThreeDays => Policy::nine_attempts_over_three_days(),
            Self::ExponentialToAnHour => Policy::exponential_to_an_hour(10),
        }
    }
}

/// The demo's policy: short waits and cool-down, so it runs in seconds.
fn demo_policy() -> Policy {
    Policy::new(Schedule::Exponential {
        base: Duration::from_millis(100),
        cap: Duration::from_secs(1),
        attempts: 30,
        jitter: Jitter::Full,
    })
    .with_attempt_timeout(DEMO_TIMEOUT)
    .with_breaker(Breaker::new().with_cool_down(Duration::from_millis(300)))
}

/// A clock that runs `factor` times faster than the wall clock from the
/// moment it is made.
#[derive(Debug, Clone, Copy)]
struct Scaled {
    wall: SystemTime,
    start: Instant,
    factor: u32,
}

impl Scaled {
    fn new(factor: u32) -> Self {
        Self {
            wall: SystemTime::now(),
            start: Instant::now(),
            factor,
        }
    }

    /// The time since the start on this clock.
    fn elapsed(&self) -> Duration {
        self.start.elapsed().saturating_mul(self.factor)
    }

    /// The real time `scaled` takes.
    fn real(&self, scaled: Duration) -> Duration {
        scaled / self.factor
    }
}

impl Clock for Scaled {
    fn now(&self) -> SystemTime {
        self.wall + self.elapsed()
    }
}

/// One run's settings.
#[derive(Debug, Clone)]
struct Drill {
    preset: Option<Preset>,
    time_scale: u32,
    events: usize,
    fail_for: Duration,
    slow_share: f64,
}

/// The endpoint's disable, as the drill saw it.
#[derive(Debug, PartialEq, Eq)]
struct Disable {
    /// How far into the run (drill time).
    at: Duration,
    reason: DisableReason,
    /// Whether the owner got a notice of it.
    told: bool,
    /// The events the outbox held when the outage ended: still pending and
    /// out of attempts.
    kept: (usize, usize),
    /// When the drill enabled the endpoint again (drill time).
    enabled_at: Duration,
}

/// What the drill measured.
#[derive(Debug, Default, PartialEq, Eq)]
struct Report {
    sent: usize,
    delivered: usize,
    abandoned: usize,
    /// Abandoned with an attempt after the outage: not what was promised.
    abandoned_after_outage: usize,
    duplicates_suppressed: usize,
    acted_on: usize,
    acted_on_twice: usize,
    /// Delivered, but never acted on.
    delivered_unseen: usize,
    peak_concurrency: usize,
    limit: usize,
    disable: Option<Disable>,
    /// The policy's disable time, when the outage was longer.
    outage_outlasts: Option<Duration>,
    elapsed: Duration,
    /// The run's length on its own clock.
    drill_time: Duration,
}

impl Report {
    /// Where the outcome differs from what the policy promises.
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.acted_on_twice > 0 {
            problems.push(format!("{} events acted on twice", self.acted_on_twice));
        }
        if self.delivered_unseen > 0 {
            problems.push(format!(
                "{} delivered events never acted on",
                self.delivered_unseen
            ));
        }
        if self.abandoned_after_outage > 0 {
            problems.push(format!(
                "{} events abandoned with an attempt after the outage",
                self.abandoned_after_outage
            ));
        }
        if self.delivered + self.abandoned != self.sent {
            problems.push("events missing from the outbox".to_owned());
        }
        if self.peak_concurrency > self.limit {
            problems.push(format!(
                "{} deliveries at once, over the limit of {}",
                self.peak_concurrency, self.limit
            ));
        }
        match (&self.disable, self.outage_outlasts) {
            (None, Some(after)) => problems.push(format!(
                "the outage outlasted the disable time ({}) but the endpoint was never disabled (it is disabled at an attempt that long after the first failure; the events go out evenly over the outage: send more)",
                human(after)
            )),
            (Some(_), None) => {
                problems.push("disabled during an outage shorter than its disable time".to_owned())
            }
            (Some(disable), Some(_)) if disable.kept.0 + disable.kept.1 != self.sent => problems
                .push(format!(
                    "the disabled endpoint kept {} of {} events",
                    disable.kept.0 + disable.kept.1,
                    self.sent
                )),
            _ => {}
        }
        problems
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
    ) -> Result<hooklatch::sender::transport::Response, hooklatch::sender::transport::TransportError>
    {
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

/// The receiver: down (503) until `fail_for` has passed on `clock`, then
/// the inbox behind a verifier; every `slow_every`-th accepted event (the
/// first included)
/// answers after `slow`, when the sender has stopped waiting. Returns its
/// URL and the count of duplicates it suppressed.
async fn receiver(
    inbox: SqliteInbox,
    clock: Scaled,
    fail_for: Duration,
    (slow_every, slow): (Option<usize>, Duration),
) -> (String, Arc<AtomicUsize>) {
    let duplicates = Arc::new(AtomicUsize::new(0));
    let accepted = Arc::new(AtomicUsize::new(0));
    let faults = {
        let duplicates = duplicates.clone();
        move |request: Request, next: Next| {
            let (duplicates, accepted) = (duplicates.clone(), accepted.clone());
            async move {
                if clock.elapsed() < fail_for {
                    return (axum::http::StatusCode::SERVICE_UNAVAILABLE, "down").into_response();
                }
                let response: Response = next.run(request).await;
                match response.status().as_u16() {
                    200 => {
                        duplicates.fetch_add(1, Ordering::Relaxed);
                    }
                    202 if slow_every.is_some_and(|every| {
                        accepted.fetch_add(1, Ordering::Relaxed) % every == 0
                    }) =>
                    {
                        // Accepted and stored, but the sender stops waiting.
                        tokio::time::sleep(slow).await;
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
        .with_clock(clock)
        // Five real minutes: how late a request may arrive is about the
        // network, not the calendar.
        .with_tolerance(Duration::from_secs(300).saturating_mul(clock.factor))
        .build()
        .expect("verifier");
    let router = Router::new()
        .route("/hooks", post(|| async {}))
        .layer(
            WebhookLayer::new(verifier)
                .with_inbox(inbox, "drill")
                .expect("namespace"),
        )
        .layer(middleware::from_fn(faults));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/hooks", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, router).await });
    (url, duplicates)
}

/// The worker: acts on each event it takes, and counts.
fn worker(
    inbox: SqliteInbox,
) -> (
    Arc<Mutex<HashMap<String, usize>>>,
    tokio::task::JoinHandle<()>,
) {
    let acted: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let task = {
        let acted = acted.clone();
        tokio::spawn(async move {
            loop {
                let batch = inbox.take("drill", "worker", 50).await.unwrap_or_default();
                if batch.is_empty() {
                    tokio::time::sleep(LOOK_EVERY).await;
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
    (acted, task)
}

/// What the owner was told: the disable's time and reason, and whether a
/// notice of it went out.
#[derive(Default)]
struct Told {
    disabled: Option<(Duration, DisableReason)>,
    notice: bool,
}

/// Runs the drill and measures it.
async fn app(drill: &Drill) -> Report {
    let folder = std::env::temp_dir().join(format!(
        "hooklatch-drill-{}-{}",
        std::process::id(),
        fastrand::u64(..)
    ));
    std::fs::create_dir_all(&folder).expect("temp folder");
    let inbox = SqliteInbox::open(folder.join("drill.db"))
        .await
        .expect("sqlite");
    let clock = Scaled::new(drill.time_scale);
    let base = drill.preset.map_or_else(demo_policy, Preset::policy);
    let breaker = base.breaker().clone();
    let policy = base
        .clone()
        .with_clock(clock)
        .with_breaker(breaker.with_cool_down(clock.real(base.breaker().cool_down())));
    let slow_every =
        (drill.slow_share > 0.0).then(|| (1.0 / drill.slow_share).round().max(1.0) as usize);
    let slow = policy.attempt_timeout() + DEMO_TIMEOUT;
    let (url, duplicates) =
        receiver(inbox.clone(), clock, drill.fail_for, (slow_every, slow)).await;
    let (acted, worker) = worker(inbox);

    // The sender: a dispatcher with its outbox in SQLite, through the real
    // HTTP stack. It polls and leases on the drill's clock: its lease
    // outlasts an attempt in real time, and it polls often enough for the
    // schedule's shortest waits.
    let transport = Counting {
        inner: HttpTransport::for_policy(
            AddressPolicy::strict().insecure_allow_loopback(),
            &policy,
        )
        .expect("transport"),
        in_flight: Arc::default(),
        peak: Arc::default(),
    };
    let peak = transport.peak.clone();
    let outbox = SqliteOutbox::open(folder.join("outbox.db"))
        .await
        .expect("sqlite outbox");
    let told: Arc<Mutex<Told>> = Arc::default();
    let lease =
        (policy.attempt_timeout() + Duration::from_secs(5)).saturating_mul(drill.time_scale);
    let dispatcher = Dispatcher::new(outbox, transport)
        .with_poll_interval(
            (Duration::from_secs(1) / drill.time_scale).max(Duration::from_millis(5)),
        )
        .on_disable({
            let told = told.clone();
            move |disabled| {
                told.lock().expect("lock").disabled = Some((clock.elapsed(), disabled.reason));
            }
        })
        .on_notice({
            let told = told.clone();
            move |notice| {
                if matches!(notice.kind, NoticeKind::Disabled(_)) {
                    told.lock().expect("lock").notice = true;
                }
            }
        })
        .with_lease(lease)
        .expect("a lease longer than an attempt");
    let signer = Signer::new(Scheme::standard_webhooks(), [SECRET]).expect("signer");
    dispatcher
        .add_endpoint("drill", &url, signer, policy.clone())
        .await
        .expect("endpoint");
    let running = dispatcher.start();

    // The product: sends the events evenly over the outage.
    let ids: Vec<String> = (0..drill.events).map(|n| format!("evt_{n}")).collect();
    let sent = Arc::new(AtomicUsize::new(0));
    let producer = {
        let (dispatcher, ids, sent) = (dispatcher.clone(), ids.clone(), sent.clone());
        let every = drill.fail_for / u32::try_from(drill.events.max(1)).unwrap_or(u32::MAX);
        tokio::spawn(async move {
            for (n, id) in ids.iter().enumerate() {
                let at = clock.start + clock.real(every.saturating_mul(n as u32));
                tokio::time::sleep_until(at.into()).await;
                let body = format!("{{\"order\":{n}}}");
                dispatcher
                    .send("drill", id, body.as_bytes())
                    .await
                    .expect("stored for delivery");
                sent.fetch_add(1, Ordering::SeqCst);
            }
        })
    };

    // Watches the outbox until every event is delivered or out of
    // attempts, and enables the endpoint after the outage if it was
    // disabled.
    let mut delivered: HashSet<String> = HashSet::new();
    let mut disable = None;
    let mut quiet = 0;
    let ended = loop {
        tokio::time::sleep(LOOK_EVERY).await;
        let sent_now = sent.load(Ordering::SeqCst);
        let (mut pending, mut ended) = (0, Vec::new());
        for id in &ids[..sent_now] {
            if delivered.contains(id) {
                continue;
            }
            let stored = dispatcher.delivery("drill", id).await.expect("outbox");
            match stored.as_ref().map(|delivery| delivery.state) {
                Some(DeliveryState::Delivered) => {
                    delivered.insert(id.clone());
                }
                Some(DeliveryState::Pending) => pending += 1,
                // Dead, gone, or missing: out of attempts for now.
                _ => ended.push(stored),
            }
        }
        let waiting = disable.is_none() && told.lock().expect("lock").disabled.is_some();
        if waiting && clock.elapsed() >= drill.fail_for && sent_now == ids.len() {
            let (at, reason) = told.lock().expect("lock").disabled.expect("disabled");
            dispatcher.enable("drill").await.expect("enabled");
            disable = Some(Disable {
                at,
                reason,
                told: told.lock().expect("lock").notice,
                kept: (pending, ended.len()),
                enabled_at: clock.elapsed(),
            });
            continue;
        }
        // Done when nothing is pending for a few looks in a row: a disable
        // is saved after the attempt that calls for it.
        let done = sent_now == ids.len() && pending == 0 && !waiting;
        quiet = if done { quiet + 1 } else { 0 };
        if quiet >= 3 || delivered.len() == ids.len() {
            break ended;
        }
    };
    producer.await.expect("producer");
    running.stop().await;

    let mut report = Report {
        sent: drill.events,
        delivered: delivered.len(),
        abandoned: ended.len(),
        limit: policy.concurrency(),
        disable,
        outage_outlasts: policy
            .disable_after()
            .filter(|after| drill.fail_for > *after),
        ..Report::default()
    };
    let outage_end = clock.wall + drill.fail_for;
    report.abandoned_after_outage = ended
        .iter()
        .filter(|stored| {
            stored.as_ref().is_none_or(|stored| {
                stored
                    .attempts
                    .iter()
                    .any(|attempt| attempt.sent_at >= outage_end)
            })
        })
        .count();
    // Let the worker finish the inbox.
    let deadline = Instant::now() + Duration::from_secs(10);
    while acted.lock().expect("lock").len() < report.delivered && Instant::now() < deadline {
        tokio::time::sleep(LOOK_EVERY).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    worker.abort();
    let acted = acted.lock().expect("lock");
    report.acted_on = acted.len();
    report.acted_on_twice = acted.values().filter(|&&n| n > 1).count();
    report.delivered_unseen = delivered
        .iter()
        .filter(|id| !acted.contains_key(*id))
        .count();
    report.duplicates_suppressed = duplicates.load(Ordering::Relaxed);
    report.peak_concurrency = peak.load(Ordering::SeqCst);
    report.elapsed = clock.start.elapsed();
    report.drill_time = clock.elapsed();
    let _ = std::fs::remove_dir_all(&folder);
    report
}

/// Both ends of a webhook, an outage and real duplicates, on loopback.
///
/// Exits 0 when the outcome is the one the policy promises (every event
/// delivered and acted on once, except events whose attempts all fell
/// inside the outage; no more deliveries at once than the policy's limit;
/// an outage longer than the disable time disables the endpoint, which
/// keeps every event until the drill enables it after the outage), 1
/// otherwise, 2 on usage errors.
#[derive(Debug, clap::Parser)]
#[command(name = "drill")]
struct Args {
    /// How many events to send, evenly over the outage.
    #[arg(long, default_value_t = 200)]
    events: usize,
    /// How long the receiver answers 503 from the start: `2s`, `500ms`,
    /// `6h`, `8d`, or a number of seconds (drill time).
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    fail_for: Duration,
    /// The share of requests the receiver answers slowly, so that the
    /// sender times out and retries what was in fact handled (0 to 1)
    /// [default: 0.1, or 0 with a preset, whose timeouts are seconds long].
    #[arg(long, value_parser = parse_share)]
    slow_share: Option<f64>,
    /// A named policy instead of the demo's (100 ms doubling to
    /// 1 s, 30 attempts, 300 ms per attempt).
    #[arg(long, value_enum)]
    preset: Option<Preset>,
    /// Runs both ends' clock this many times faster than the wall clock:
    /// schedules, jitter, the outage, disable timers and the breaker's
    /// cool-down (timeouts stay real).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    time_scale: u32,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|error| format!("`{text}`: {error}"));
    }
    humantime::parse_duration(text)
        .map_err(|error| format!("`{text}` is not a duration such as 2s, 500ms, 6h or 8d: {error}"))
}

fn parse_share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("`{text}` is not a share from 0 to 1")),
    }
}

impl From<Args> for Drill {
    fn from(args: Args) -> Self {
        Self {
            slow_share: args
                .slow_share
                .unwrap_or(if args.preset.is_some() { 0.0 } else { 0.1 }),
            preset: args.preset,
            time_scale: args.time_scale,
            events: args.events,
            fail_for: args.fail_for,
        }
    }
}

/// A drill-time span: days, hours and minutes, or seconds under an hour.
fn human(span: Duration) -> String {
    let seconds = span.as_secs();
    let parts = [
        (seconds / 86_400, "d"),
        (seconds % 86_400 / 3600, "h"),
        (seconds % 3600 / 60, "min"),
        (if seconds < 3600 { seconds % 60 } else { 0 }, "s"),
    ];
    let text: Vec<String> = parts
        .iter()
        .filter(|(count, _)| *count > 0)
        .map(|(count, unit)| format!("{count} {unit}"))
        .collect();
    if text.is_empty() {
        format!("{} ms", span.as_millis())
    } else {
        text.join(" ")
    }
}

fn print(drill: &Drill, report: &Report) {
    let name = drill.preset.map_or("the demo's".to_owned(), |preset| {
        clap::ValueEnum::to_possible_value(&preset)
            .expect("named")
            .get_name()
            .to_owned()
    });
    println!(
        "policy:                       {name}, clock {}x",
        drill.time_scale
    );
    println!(
        "events sent:                  {} over the {} outage",
        report.sent,
        human(drill.fail_for)
    );
    if let Some(disable) = &report.disable {
        let why = match disable.reason {
            DisableReason::NoSuccessFor(after) => format!("no success for {}", human(after)),
            other => format!("{other:?}"),
        };
        let told = if disable.told { ", owner notified" } else { "" };
        println!(
            "endpoint disabled:            yes, {} in ({why}){told}",
            human(disable.at)
        );
        println!(
            "kept while disabled:          {} ({} pending, {} out of attempts)",
            disable.kept.0 + disable.kept.1,
            disable.kept.0,
            disable.kept.1
        );
        println!(
            "enabled again:                {} in, after the outage",
            human(disable.enabled_at)
        );
    } else if let Some(after) = report.outage_outlasts {
        println!(
            "endpoint disabled:            no (its disable time is {})",
            human(after)
        );
    }
    println!("delivered:                    {}", report.delivered);
    println!("abandoned:                    {}", report.abandoned);
    println!(
        "duplicates suppressed:        {}",
        report.duplicates_suppressed
    );
    println!("events acted on:              {}", report.acted_on);
    println!("events acted on twice:        {}", report.acted_on_twice);
    println!(
        "peak concurrent deliveries:   {} (limit {})",
        report.peak_concurrency, report.limit
    );
    println!(
        "took:                         {:.1} s ({} on the drill's clock)",
        report.elapsed.as_secs_f64(),
        human(report.drill_time)
    );
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let drill = Drill::from(<Args as clap::Parser>::parse());
    let report = app(&drill).await;
    print(&drill, &report);
    let problems = report.problems();
    if problems.is_empty() {
        if report.abandoned == 0 {
            println!("ok: every event delivered and acted on exactly once");
        } else {
            println!(
                "ok, as the policy promises: {} events ran out of attempts inside the outage, the rest were delivered and acted on once",
                report.abandoned
            );
        }
        std::process::ExitCode::SUCCESS
    } else {
        for problem in problems {
            println!("FAILED: {problem}");
        }
        std::process::ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser as _;

    use super::{Args, Disable, Drill, Preset, Report, app};

    const HOUR: Duration = Duration::from_secs(3600);
    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn flags_parse_durations_and_presets_and_refuse_bad_input_with_a_usage_error() {
        let args = Args::try_parse_from(["drill", "--fail-for", "5s"]).unwrap();
        assert_eq!(args.fail_for, Duration::from_secs(5));
        let args = Args::try_parse_from(["drill", "--fail-for", "1.5"]).unwrap();
        assert_eq!(args.fail_for, Duration::from_millis(1500));
        let args = Args::try_parse_from([
            "drill",
            "--preset",
            "seven-over-a-day",
            "--fail-for",
            "8d",
            "--time-scale",
            "86400",
        ])
        .unwrap();
        assert_eq!(args.fail_for, 8 * DAY);
        assert_eq!(args.time_scale, 86400);
        let drill = Drill::from(args);
        assert_eq!(drill.preset, Some(Preset::SevenOverADay));
        assert_eq!(drill.slow_share, 0.0, "no slow answers with a preset");
        for bad in [
            &["drill", "--fail-for", "soon"][..],
            &["drill", "--slow-share", "2"],
            &["drill", "--events", "-1"],
            &["drill", "--preset", "seven-over-a-week"],
            &["drill", "--time-scale", "0"],
        ] {
            let error = Args::try_parse_from(bad).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{bad:?}");
        }
        let help = Args::try_parse_from(["drill", "--help"]).unwrap_err();
        assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
        for name in [
            "seven-over-a-day",
            "svix",
            "svix-table-without-jitter",
            "five-retries-over-ten-hours",
            "nine-over-three-days",
            "exponential-to-an-hour",
        ] {
            assert!(help.to_string().contains(name), "{name} listed in --help");
        }
    }

    #[test]
    fn each_broken_promise_is_a_problem_and_the_promised_outcome_is_none() {
        let promised = Report {
            sent: 10,
            delivered: 7,
            abandoned: 3,
            acted_on: 7,
            limit: 10,
            peak_concurrency: 10,
            ..Report::default()
        };
        assert_eq!(promised.problems(), Vec::<String>::new());
        let broken = [
            Report {
                acted_on_twice: 1,
                ..Report::default()
            },
            Report {
                delivered: 1,
                delivered_unseen: 1,
                sent: 1,
                ..Report::default()
            },
            Report {
                abandoned: 1,
                abandoned_after_outage: 1,
                sent: 1,
                ..Report::default()
            },
            Report {
                sent: 1,
                ..Report::default()
            },
            Report {
                peak_concurrency: 11,
                limit: 10,
                ..Report::default()
            },
            Report {
                outage_outlasts: Some(7 * DAY),
                ..Report::default()
            },
            Report {
                disable: Some(disable((0, 0))),
                ..Report::default()
            },
            Report {
                sent: 2,
                delivered: 2,
                disable: Some(disable((1, 0))),
                outage_outlasts: Some(7 * DAY),
                ..Report::default()
            },
        ];
        for report in broken {
            assert_eq!(report.problems().len(), 1, "{report:?}");
        }
    }

    fn disable(kept: (usize, usize)) -> Disable {
        Disable {
            at: 7 * DAY,
            reason: hooklatch::sender::outbox::DisableReason::NoSuccessFor(7 * DAY),
            told: true,
            kept,
            enabled_at: 8 * DAY,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_short_drill_loses_nothing_and_acts_on_nothing_twice() {
        let report = app(&Drill {
            preset: None,
            time_scale: 1,
            events: 60,
            fail_for: Duration::from_millis(500),
            slow_share: 0.2,
        })
        .await;
        assert!(report.problems().is_empty(), "{report:?}");
        assert_eq!(report.acted_on, 60);
        assert!(
            report.duplicates_suppressed > 0,
            "the drill made real duplicates: {report:?}"
        );
    }

    /// The six-hour outage drill, 10 times faster than the README's command.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn seven_over_a_day_six_hour_outage_delivers_every_event_and_abandons_none() {
        let report = app(&Drill {
            preset: Some(Preset::SevenOverADay),
            time_scale: 36_000,
            events: 50,
            fail_for: 6 * HOUR,
            slow_share: 0.0,
        })
        .await;
        assert!(report.problems().is_empty(), "{report:?}");
        assert_eq!((report.delivered, report.abandoned), (50, 0));
        assert_eq!(report.acted_on, 50);
        assert!(report.disable.is_none());
        assert!(report.peak_concurrency <= 10, "{report:?}");
        // The last events wait for their 6 h retry after the outage.
        assert!(report.drill_time > 7 * HOUR, "{report:?}");
    }

    /// The eight-day outage drill, twice as fast as the README's command.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn seven_over_a_day_eight_day_outage_disables_keeps_every_event_and_delivers_them_after_enable()
     {
        let report = app(&Drill {
            preset: Some(Preset::SevenOverADay),
            time_scale: 2 * 86_400,
            events: 10,
            fail_for: 8 * DAY,
            slow_share: 0.0,
        })
        .await;
        assert!(report.problems().is_empty(), "{report:?}");
        let disable = report.disable.as_ref().expect("disabled");
        assert_eq!(
            disable.reason,
            hooklatch::sender::outbox::DisableReason::NoSuccessFor(7 * DAY)
        );
        assert!(disable.told, "the owner was told");
        assert!(disable.at >= 7 * DAY && disable.at < 8 * DAY, "{report:?}");
        assert_eq!(disable.kept.0 + disable.kept.1, 10);
        assert!(disable.kept.1 > 0, "some ran out of attempts: {report:?}");
        assert!(disable.enabled_at >= 8 * DAY);
        assert_eq!((report.delivered, report.abandoned), (10, 0));
        assert_eq!(report.acted_on, 10);
    }
}
