//! Every seed system's rules, reproduced by its preset alone and driven on
//! tokio's paused clock against a scripted receiver: attempt times within
//! the jitter bounds, statuses, timeouts, excerpts, probes, pauses,
//! disable times, notices and the backlog after an enable.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hooklatch::sender::guard::check_url;
use hooklatch::sender::outbox::DeliveryStore;
use hooklatch::sender::outbox::{DeliveryState, DisableReason};
use hooklatch::sender::rules::{Attempt, Final, Notice, NoticeKind, Step, WaitReason};
use hooklatch::sender::transport::{Response, TransportError};
use hooklatch::sender::{
    AddressPolicy, DeliveryRecord, Disabled, DispatchError, Dispatcher, Endpoint, MemoryOutbox,
    Policy, Transport, deliver,
};
use hooklatch::verify::{Scheme, Signer, Validity};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const NEW_SECRET: &str = "whsec_dGhlIG5ldyBzZWNyZXQgZm9yIHRoZSB0ZXN0";
const ENDPOINT: &str = "orders";
const URL: &str = "https://receiver.example/hooks";
const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);
/// Where the policies' clock starts, so signed timestamps are plausible.
const EPOCH: Duration = Duration::from_secs(1_800_000_000);

/// The policies' clock: tokio's paused clock, as a wall-clock time.
fn clock() -> impl Fn() -> SystemTime + Send + Sync + 'static {
    let start = tokio::time::Instant::now();
    move || UNIX_EPOCH + EPOCH + start.elapsed()
}

/// A time from the policies' clock, as an offset from its start.
fn offset(at: SystemTime) -> Duration {
    at.duration_since(UNIX_EPOCH + EPOCH).unwrap()
}

/// One attempt as the receiver saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Call {
    id: String,
    /// 1 for the first attempt of this id the receiver saw.
    nth: usize,
    /// When it arrived, from the start.
    at: Duration,
}

/// How the receiver answers one attempt.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Status(u16),
    /// A status with a body of this many bytes.
    Body(u16, usize),
    RetryAfter(u16, &'static str),
    /// A status after a wait.
    After(Duration, u16),
    /// The SSRF guard refused the address.
    Refused,
    /// No connection.
    Unreachable,
}

type Script = dyn Fn(&Call) -> Answer + Send + Sync;

/// A receiver that answers each attempt as its script says, and records
/// every attempt and how many were in flight at once.
#[derive(Clone)]
struct Scripted {
    start: tokio::time::Instant,
    script: Arc<Script>,
    calls: Arc<Mutex<Vec<Call>>>,
    in_flight: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl Scripted {
    fn new(script: impl Fn(&Call) -> Answer + Send + Sync + 'static) -> Self {
        Self {
            start: tokio::time::Instant::now(),
            script: Arc::new(script),
            calls: Arc::default(),
            in_flight: Arc::default(),
            peak: Arc::default(),
        }
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn ids(&self) -> Vec<String> {
        self.calls().into_iter().map(|call| call.id).collect()
    }
}

impl Transport for Scripted {
    async fn post(
        &self,
        _url: &str,
        headers: &[(String, String)],
        _body: &[u8],
    ) -> Result<Response, TransportError> {
        let id = headers
            .iter()
            .find(|(name, _)| name == "webhook-id")
            .map(|(_, value)| value.clone())
            .unwrap_or_default();
        let call = {
            let mut calls = self.calls.lock().unwrap();
            let nth = calls.iter().filter(|call| call.id == id).count() + 1;
            let call = Call {
                id,
                nth,
                at: self.start.elapsed(),
            };
            calls.push(call.clone());
            call
        };
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let answer = (self.script)(&call);
        let answered = match answer {
            Answer::Status(status) => Ok(Response::new(status)),
            Answer::Body(status, len) => Ok(Response::new(status).with_body(vec![b'x'; len])),
            Answer::RetryAfter(status, value) => Ok(Response::new(status).with_retry_after(value)),
            Answer::After(wait, status) => {
                tokio::time::sleep(wait).await;
                Ok(Response::new(status))
            }
            Answer::Refused => Err(TransportError::Refused(
                check_url("http://10.0.0.1/hooks", &AddressPolicy::strict()).unwrap_err(),
            )),
            Answer::Unreachable => Err(TransportError::Connect("connection refused".into())),
        };
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        answered
    }
}

fn signer() -> Signer {
    Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap()
}

/// Delivers one event under `policy` (on the paused clock) to `receiver`,
/// drawing the jitter from `draw` every time.
async fn deliver_one(receiver: &Scripted, policy: &Policy, draw: f64) -> DeliveryRecord {
    let policy = policy.clone().with_clock(clock());
    let endpoint = Endpoint::new(URL, signer()).with_breaker(policy.breaker().clone());
    deliver(receiver, &endpoint, &policy, "msg_1", b"{}", move || draw).await
}

/// The waits between a delivery's attempts.
fn gaps(record: &DeliveryRecord) -> Vec<Duration> {
    record
        .attempts
        .windows(2)
        .map(|pair| pair[1].sent_at.duration_since(pair[0].sent_at).unwrap())
        .collect()
}

fn secs(seconds: &[u64]) -> Vec<Duration> {
    seconds.iter().copied().map(Duration::from_secs).collect()
}

/// Asserts each gap is `nominal` scaled by exactly `factor` (to a
/// millisecond).
fn assert_scaled(gaps: &[Duration], nominal: &[Duration], factor: f64) {
    assert_eq!(gaps.len(), nominal.len());
    for (gap, nominal) in gaps.iter().zip(nominal) {
        let want = nominal.mul_f64(factor);
        assert!(
            gap.abs_diff(want) < Duration::from_millis(1),
            "{gap:?} is not {factor} x {nominal:?}"
        );
    }
}

/// What a dispatcher under test told its owner.
#[derive(Clone, Default)]
struct Told {
    notices: Arc<Mutex<Vec<Notice>>>,
    /// When (from the start) and why the endpoint was disabled.
    disabled: Arc<Mutex<Vec<(Duration, Disabled)>>>,
}

impl Told {
    fn notices(&self) -> Vec<(Duration, NoticeKind)> {
        self.notices
            .lock()
            .unwrap()
            .iter()
            .map(|notice| (offset(notice.at), notice.kind.clone()))
            .collect()
    }
}

/// A dispatcher on the memory outbox polling every `poll`, with one
/// endpoint under `policy` on the paused clock.
async fn dispatcher(
    receiver: &Scripted,
    policy: Policy,
    poll: Duration,
) -> (Dispatcher<MemoryOutbox, Scripted>, Told) {
    let told = Told::default();
    let (notices, disabled) = (told.notices.clone(), told.disabled.clone());
    let now = clock();
    let dispatcher = Dispatcher::new(MemoryOutbox::new(), receiver.clone())
        .with_poll_interval(poll)
        .on_notice(move |notice| notices.lock().unwrap().push(notice.clone()))
        .on_disable(move |gone| disabled.lock().unwrap().push((offset(now()), gone.clone())));
    dispatcher
        .add_endpoint(ENDPOINT, URL, signer(), policy.with_clock(clock()))
        .await
        .unwrap();
    (dispatcher, told)
}

/// Sends `event_N` every `every` until the endpoint is disabled or
/// `limit` has passed, and returns how many it sent.
async fn send_until_disabled(
    dispatcher: &Dispatcher<MemoryOutbox, Scripted>,
    every: Duration,
    limit: Duration,
) -> usize {
    let start = tokio::time::Instant::now();
    let mut sent = 0;
    while start.elapsed() <= limit && dispatcher.disabled(ENDPOINT).unwrap().is_none() {
        dispatcher
            .send(ENDPOINT, &format!("event_{sent}"), b"{}")
            .await
            .unwrap();
        sent += 1;
        tokio::time::sleep(every).await;
    }
    sent
}

#[tokio::test(start_paused = true)]
async fn svix_table_without_jitter_retries_410_probes_once_and_notifies_hourly() {
    let policy = Policy::svix_table_without_jitter();

    // Svix's table exactly, whatever the draw: no jitter. 410 is an
    // ordinary failure; the first 1,024 bytes of each answer are kept.
    let table = secs(&[5, 300, 1800, 7200, 18000, 36000, 36000]);
    for draw in [0.0, 0.999] {
        let receiver = Scripted::new(|_| Answer::Body(410, 3000));
        let record = deliver_one(&receiver, &policy, draw).await;
        assert_eq!(
            record.outcome,
            Final::Dead,
            "410 is retried, never disables"
        );
        assert_eq!(record.attempts.len(), 8);
        assert_eq!(gaps(&record), table);
        for attempt in &record.attempts {
            assert_eq!(attempt.result, Ok(410));
            assert_eq!(attempt.excerpt.len(), 1024);
        }
    }

    // 15 s per attempt; only a 2xx succeeds.
    let slow = Scripted::new(|call| match call.nth {
        1 => Answer::After(Duration::from_secs(16), 200),
        2 => Answer::Status(302),
        _ => Answer::After(Duration::from_secs(14), 204),
    });
    let record = deliver_one(&slow, &policy, 0.5).await;
    assert_eq!(record.outcome, Final::Delivered);
    assert!(record.attempts[0].result.is_err(), "timed out");
    assert_eq!(record.attempts[0].duration, Duration::from_secs(15));
    assert_eq!(record.attempts[1].result, Ok(302));
    assert_eq!(record.attempts[2].result, Ok(204));

    // 5 consecutive failures: nothing for 30 s, then one probe.
    let mut breaker = policy.breaker().clone();
    let now = std::time::Instant::now();
    for _ in 0..5 {
        breaker.try_acquire(now).unwrap();
        breaker.on_failure(now);
    }
    assert_eq!(
        breaker.try_acquire(now + Duration::from_secs(1)),
        Err(Duration::from_secs(29))
    );
    let later = now + Duration::from_secs(30);
    breaker.try_acquire(later).expect("one probe");
    assert!(breaker.try_acquire(later).is_err(), "only one");
    assert_eq!(policy.concurrency(), 10);

    // Disabled after 5 days of failure; told after an hour of failure,
    // of every delivery out of attempts and of the disable, at most once
    // an hour.
    let receiver = Scripted::new(|_| Answer::Status(500));
    let (dispatcher, told) = dispatcher(&receiver, policy.clone(), 10 * SECOND).await;
    let running = dispatcher.start();
    send_until_disabled(&dispatcher, 6 * HOUR, 6 * DAY).await;
    let disabled = told.disabled.lock().unwrap().clone();
    assert_eq!(disabled.len(), 1, "told once");
    assert_eq!(disabled[0].0, 5 * DAY, "the first failure 5 days in");
    assert_eq!(disabled[0].1.reason, DisableReason::NoSuccessFor(5 * DAY));
    let notices = told.notices();
    for pair in notices.windows(2) {
        assert!(pair[1].0 - pair[0].0 >= HOUR, "{notices:?}");
    }
    let first_late_failure = receiver
        .calls()
        .iter()
        .map(|call| call.at)
        .find(|at| *at >= HOUR)
        .unwrap();
    assert_eq!(
        notices[0],
        (
            first_late_failure,
            NoticeKind::FailingFor(first_late_failure)
        )
    );
    let exhausted: Vec<_> = notices
        .iter()
        .filter(|(_, kind)| matches!(kind, NoticeKind::Exhausted { .. }))
        .collect();
    // event_N runs out of attempts 6N h + 27.6 h in: N = 0..=15 before 5 days.
    assert_eq!(exhausted.len(), 16);
    assert_eq!(
        notices.last().unwrap(),
        &(
            5 * DAY,
            NoticeKind::Disabled(DisableReason::NoSuccessFor(5 * DAY))
        )
    );
    let attempts = receiver.calls().len();
    tokio::time::sleep(DAY).await;
    assert_eq!(
        receiver.calls().len(),
        attempts,
        "nothing sent once disabled"
    );
    dispatcher.enable(ENDPOINT).await.unwrap();
    assert_eq!(told.notices().last().unwrap().1, NoticeKind::Enabled);
    running.stop().await;

    // After a key rotation, both keys sign for 24 h.
    let rotated = UNIX_EPOCH + EPOCH;
    let both = Signer::with_windows(
        Scheme::standard_webhooks(),
        [
            (SECRET, Validity::until(rotated + DAY)),
            (NEW_SECRET, Validity::from(rotated)),
        ],
    )
    .unwrap();
    let count = |at| {
        let signed = both.sign("msg_1", at, b"{}").unwrap();
        signed.get("webhook-signature").unwrap().split(' ').count()
    };
    assert_eq!(count(rotated + DAY - SECOND), 2);
    assert_eq!(count(rotated + DAY), 1);
}

#[tokio::test(start_paused = true)]
async fn nine_attempts_pause_the_url_and_stop_on_410_or_a_private_address() {
    let policy = Policy::nine_attempts_over_three_days();

    // 9 attempts: 0, 1 min, 5 min, 30 min, 2 h, 6 h, 12 h, 24 h, 24 h,
    // each ±10%: the lowest and highest draws land on the bounds. 3xx and
    // 4xx are failures like 5xx; at most 4 KB of the answer is kept.
    let table = secs(&[60, 300, 1800, 7200, 21600, 43200, 86400, 86400]);
    for (draw, factor) in [(0.0, 0.9), (1.0, 1.1)] {
        let receiver = Scripted::new(|call| match call.nth {
            1 => Answer::Status(302),
            2 => Answer::Status(404),
            3 => Answer::Status(400),
            4 => Answer::Status(408),
            _ => Answer::Body(500, 10_000),
        });
        let record = deliver_one(&receiver, &policy, draw).await;
        assert_eq!(record.outcome, Final::Dead);
        assert_eq!(record.attempts.len(), 9);
        assert_scaled(&gaps(&record), &table, factor);
        assert_eq!(record.attempts[8].excerpt.len(), 4096);
    }

    // Success is a 2xx within 10 s.
    let slow = Scripted::new(|call| match call.nth {
        1 => Answer::After(Duration::from_secs(11), 200),
        _ => Answer::After(Duration::from_secs(9), 200),
    });
    let record = deliver_one(&slow, &policy, 0.5).await;
    assert!(record.attempts[0].result.is_err());
    assert_eq!(record.attempts[0].duration, Duration::from_secs(10));
    assert_eq!(record.outcome, Final::Delivered);
    assert_eq!(record.attempts.len(), 2);

    // 410 stops at once; so does a private address.
    for answer in [Answer::Status(410), Answer::Refused] {
        let receiver = Scripted::new(move |_| answer);
        let record = deliver_one(&receiver, &policy, 0.5).await;
        assert_eq!(record.attempts.len(), 1, "{answer:?}");
        let ended = if matches!(answer, Answer::Refused) {
            Final::Dead
        } else {
            Final::Gone
        };
        assert_eq!(record.outcome, ended);
    }

    // 429 and 503 wait max(schedule, Retry-After), Retry-After at most 1 h.
    for (answer, wait, reason) in [
        (
            Answer::RetryAfter(429, "7200"),
            HOUR,
            WaitReason::RetryAfter,
        ),
        (
            Answer::RetryAfter(503, "600"),
            10 * MINUTE,
            WaitReason::RetryAfter,
        ),
        (Answer::RetryAfter(503, "30"), MINUTE, WaitReason::Schedule),
    ] {
        let receiver = Scripted::new(move |call| match call.nth {
            1 => answer,
            _ => Answer::Status(200),
        });
        let record = deliver_one(&receiver, &policy, 0.5).await;
        assert_eq!(gaps(&record), [wait], "{answer:?}");
        assert_eq!(record.attempts[1].reason, reason);
    }

    // One failure pauses the URL's other deliveries until that delivery's
    // next attempt; then one goes out, and its success resumes the rest.
    // The held deliveries use up no attempt.
    let receiver = Scripted::new(|call| match (call.id.as_str(), call.nth) {
        ("msg_1", 1) => Answer::Status(500),
        _ => Answer::Status(200),
    });
    let (dispatcher, _) = dispatcher(&receiver, policy.clone(), SECOND).await;
    let running = dispatcher.start();
    dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    tokio::time::sleep(SECOND).await;
    for id in ["msg_2", "msg_3"] {
        dispatcher.send(ENDPOINT, id, b"{}").await.unwrap();
    }
    tokio::time::sleep(54 * SECOND).await;
    assert_eq!(receiver.ids(), ["msg_1"], "paused for at least 0.9 min");
    tokio::time::sleep(2 * MINUTE).await;
    let calls = receiver.calls();
    assert_eq!(calls.len(), 4);
    let retry = dispatcher
        .delivery(ENDPOINT, "msg_1")
        .await
        .unwrap()
        .unwrap();
    let resumed = offset(retry.attempts[1].sent_at);
    assert!(
        resumed >= 54 * SECOND && resumed <= 67 * SECOND,
        "{resumed:?}"
    );
    assert_eq!(calls[1].id, "msg_2", "the earliest due goes first, alone");
    assert!(calls[1].at.abs_diff(resumed) <= SECOND);
    assert!(calls[2].at >= calls[1].at);
    for id in ["msg_2", "msg_3"] {
        let held = dispatcher.delivery(ENDPOINT, id).await.unwrap().unwrap();
        assert_eq!(held.state, DeliveryState::Delivered);
        assert_eq!(held.attempts.len(), 1, "held back, not attempted");
    }

    // A retry keeps the webhook id; a redelivery sends the same body under
    // a new one.
    let stopped = Scripted::new(|call| match call.id.as_str() {
        "msg_9" if call.nth == 1 => Answer::Refused,
        _ => Answer::Status(200),
    });
    let (dispatcher, _) = dispatcher_for(&stopped, policy.clone()).await;
    let running_too = dispatcher.start();
    dispatcher.send(ENDPOINT, "msg_9", b"{}").await.unwrap();
    tokio::time::sleep(5 * SECOND).await;
    let dead = dispatcher
        .delivery(ENDPOINT, "msg_9")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dead.state, DeliveryState::Dead);
    assert!(
        dispatcher
            .redeliver(ENDPOINT, "msg_9", "msg_9_again")
            .await
            .unwrap()
    );
    assert!(dispatcher.replay(ENDPOINT, "msg_9").await.unwrap());
    tokio::time::sleep(5 * MINUTE).await;
    let mut ids = stopped.ids();
    ids.sort();
    assert_eq!(ids, ["msg_9", "msg_9", "msg_9_again"]);
    running_too.stop().await;
    running.stop().await;

    // Test deliveries do not count towards disabling: four days of failing
    // ones, then a 410 to one, leave the endpoint enabled.
    let receiver = Scripted::new(|call| {
        if call.at < 4 * DAY {
            Answer::Status(500)
        } else {
            Answer::Status(410)
        }
    });
    let (dispatcher, told) = dispatcher_for(&receiver, policy.clone()).await;
    let running = dispatcher.start();
    for n in 0..=16 {
        let id = dispatcher
            .send_test(ENDPOINT, &format!("ping_{n}"), b"{}")
            .await
            .unwrap();
        assert_eq!(id, format!("test_ping_{n}"));
        tokio::time::sleep(6 * HOUR).await;
    }
    assert!(receiver.calls().len() > 17);
    assert!(receiver.calls().iter().any(|call| call.at >= 4 * DAY));
    assert_eq!(dispatcher.disabled(ENDPOINT).unwrap(), None);
    assert!(told.disabled.lock().unwrap().is_empty());
    running.stop().await;

    // Disabled after 3 days with no success; 410 disables at once.
    let receiver = Scripted::new(|_| Answer::Status(503));
    let (dispatcher, told) = dispatcher_for(&receiver, policy.clone()).await;
    let running = dispatcher.start();
    send_until_disabled(&dispatcher, 6 * HOUR, 5 * DAY).await;
    let disabled = told.disabled.lock().unwrap().clone();
    // At the first attempt 3 days in: the pause holds every delivery until
    // the last failed one's next attempt, at most 24 h + 10% later.
    let first_late = receiver.calls().into_iter().find(|call| call.at >= 3 * DAY);
    assert_eq!(Some(disabled[0].0), first_late.map(|call| call.at));
    assert!(disabled[0].0 <= 3 * DAY + DAY.mul_f64(1.1));
    assert_eq!(disabled[0].1.reason, DisableReason::NoSuccessFor(3 * DAY));
    running.stop().await;
    let receiver = Scripted::new(|_| Answer::Status(410));
    let (dispatcher, told) = dispatcher_for(&receiver, policy).await;
    let running = dispatcher.start();
    dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    tokio::time::sleep(SECOND).await;
    assert_eq!(
        told.disabled.lock().unwrap()[0].1.reason,
        DisableReason::Gone
    );
    running.stop().await;
}

/// [`dispatcher`] polling every second.
async fn dispatcher_for(
    receiver: &Scripted,
    policy: Policy,
) -> (Dispatcher<MemoryOutbox, Scripted>, Told) {
    dispatcher(receiver, policy, SECOND).await
}

#[tokio::test(start_paused = true)]
async fn seven_over_a_day_seven_attempts_late_jitter_disable_at_7_days_and_the_backlog_after_enable()
 {
    let policy = Policy::seven_attempts_over_a_day();

    // 0, 30 s, 2 min, 10 min, 1 h, 6 h, 24 h, each up to 10% later and
    // never earlier. 302 is a failure; 512 bytes of the answer are kept.
    let table = secs(&[30, 120, 600, 3600, 21600, 86400]);
    for (draw, factor) in [(0.0, 1.0), (1.0, 1.1)] {
        let receiver = Scripted::new(|_| Answer::Body(302, 2000));
        let record = deliver_one(&receiver, &policy, draw).await;
        assert_eq!(record.outcome, Final::Dead);
        assert_eq!(record.attempts.len(), 7);
        assert_scaled(&gaps(&record), &table, factor);
        assert_eq!(record.attempts[0].excerpt.len(), 512);
    }

    // 10 s per attempt.
    let slow = Scripted::new(|call| match call.nth {
        1 => Answer::After(Duration::from_secs(11), 200),
        _ => Answer::After(Duration::from_secs(9), 200),
    });
    let record = deliver_one(&slow, &policy, 0.0).await;
    assert_eq!(record.attempts[0].duration, Duration::from_secs(10));
    assert!(record.attempts[0].result.is_err());
    assert_eq!(record.outcome, Final::Delivered);

    // Several `v1=` signatures during a 30-day overlap.
    let rotated = UNIX_EPOCH + EPOCH;
    let both = Signer::with_windows(
        Scheme::stripe(),
        [
            (SECRET, Validity::until(rotated + 30 * DAY)),
            (NEW_SECRET, Validity::from(rotated)),
        ],
    )
    .unwrap();
    let v1s = |at| {
        let signed = both.sign("evt_1", at, br#"{"id":"evt_1"}"#).unwrap();
        signed
            .get("stripe-signature")
            .unwrap()
            .matches("v1=")
            .count()
    };
    assert_eq!(v1s(rotated + 30 * DAY - SECOND), 2);
    assert_eq!(v1s(rotated + 30 * DAY), 1);

    // Down for 8 days: 10 events run out of attempts, a daily event keeps
    // failing, the endpoint is disabled 7 days in with a notice; enabled
    // again after 8 days, the whole backlog is delivered.
    let receiver = Scripted::new(|call| {
        if call.at < 8 * DAY {
            Answer::Status(503)
        } else {
            Answer::Status(200)
        }
    });
    let (dispatcher, told) = dispatcher(&receiver, policy, 10 * SECOND).await;
    let running = dispatcher.start();
    for n in 0..10 {
        dispatcher
            .send(ENDPOINT, &format!("backlog_{n}"), b"{}")
            .await
            .unwrap();
    }
    let daily = send_until_disabled(&dispatcher, DAY, 9 * DAY).await;
    assert_eq!(daily, 8, "day 0 to day 7");
    let disabled = told.disabled.lock().unwrap().clone();
    assert_eq!(disabled[0].0, 7 * DAY);
    assert_eq!(disabled[0].1.reason, DisableReason::NoSuccessFor(7 * DAY));
    assert_eq!(
        told.notices(),
        [(
            7 * DAY,
            NoticeKind::Disabled(DisableReason::NoSuccessFor(7 * DAY))
        )]
    );
    let dead = dispatcher.dead(ENDPOINT, 100).await.unwrap();
    assert_eq!(
        dead.len(),
        10 + 6,
        "the backlog and the days' events before day 6"
    );
    tokio::time::sleep_until(tokio::time::Instant::now() + (8 * DAY - 7 * DAY)).await;
    dispatcher.enable(ENDPOINT).await.unwrap();
    tokio::time::sleep(MINUTE).await;
    for n in 0..10 {
        let id = format!("backlog_{n}");
        let stored = dispatcher.delivery(ENDPOINT, &id).await.unwrap().unwrap();
        assert_eq!(stored.state, DeliveryState::Delivered, "{id}");
    }
    for n in 0..daily {
        let id = format!("event_{n}");
        let stored = dispatcher.delivery(ENDPOINT, &id).await.unwrap().unwrap();
        assert_eq!(stored.state, DeliveryState::Delivered, "{id}");
    }
    assert_eq!(told.notices().last().unwrap().1, NoticeKind::Enabled);
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn five_retries_one_attempt_and_five_retries_over_10_6_hours_and_a_three_probe_breaker() {
    let policy = Policy::five_retries_over_ten_hours();

    // 1 + 5 attempts: 1 min, 5 min, 30 min, 2 h, 8 h apart, no jitter:
    // 10.6 h from the first to the last. 3xx is not followed: a failure.
    for draw in [0.0, 1.0] {
        let receiver = Scripted::new(|_| Answer::Status(302));
        let record = deliver_one(&receiver, &policy, draw).await;
        assert_eq!(record.outcome, Final::Dead);
        assert_eq!(gaps(&record), secs(&[60, 300, 1800, 7200, 28800]));
        let window = offset(record.attempts[5].sent_at) - offset(record.attempts[0].sent_at);
        assert_eq!(window, Duration::from_secs(38_160), "10.6 h");
    }

    // 5 s to connect, 30 s to read: 35 s for an attempt.
    assert_eq!(policy.connect_timeout(), Duration::from_secs(5));
    let slow = Scripted::new(|call| match call.nth {
        1 => Answer::After(Duration::from_secs(36), 200),
        _ => Answer::After(Duration::from_secs(34), 200),
    });
    let record = deliver_one(&slow, &policy, 0.0).await;
    assert_eq!(record.attempts[0].duration, Duration::from_secs(35));
    assert!(record.attempts[0].result.is_err());
    assert_eq!(record.outcome, Final::Delivered);

    // The breaker, through a dispatcher: after its cool-down up to 3
    // probes; a failed one opens it again for a whole cool-down; 3
    // successes close it and the held events go out.
    let receiver = Scripted::new(|call| {
        if call.at < 40 * SECOND || (call.at < 80 * SECOND && call.id == "probe_fails") {
            Answer::Status(500)
        } else {
            Answer::Status(200)
        }
    });
    let (dispatcher, _) = dispatcher_for(&receiver, policy.clone().with_concurrency(1)).await;
    let running = dispatcher.start();
    for n in 0..5 {
        dispatcher
            .send(ENDPOINT, &format!("fail_{n}"), b"{}")
            .await
            .unwrap();
        tokio::time::sleep(SECOND).await;
    }
    // Five failures at 0..4 s open it until 34 s.
    dispatcher
        .send(ENDPOINT, "probe_fails", b"{}")
        .await
        .unwrap();
    tokio::time::sleep(10 * SECOND).await;
    assert_eq!(receiver.calls().len(), 5, "open: nothing sent");
    tokio::time::sleep(25 * SECOND).await;
    let calls = receiver.calls();
    assert_eq!(calls.len(), 6, "one probe at the end of the cool-down");
    assert!(calls[5].at >= 34 * SECOND && calls[5].at <= 36 * SECOND);
    assert_eq!(calls[5].id, "probe_fails");
    // It failed: open again for 30 s, then three probes close it.
    tokio::time::sleep(20 * SECOND).await;
    assert_eq!(receiver.calls().len(), 6, "open again");
    tokio::time::sleep(10 * MINUTE).await;
    let calls = receiver.calls();
    let reopened = calls[5].at + 30 * SECOND;
    assert!(calls[6].at >= reopened && calls[6].at <= reopened + 2 * SECOND);
    let probes: Vec<&str> = calls[6..9].iter().map(|call| call.id.as_str()).collect();
    assert_eq!(
        probes,
        ["fail_0", "fail_1", "fail_2"],
        "the earliest due first"
    );
    for n in 0..5 {
        let id = format!("fail_{n}");
        let stored = dispatcher.delivery(ENDPOINT, &id).await.unwrap().unwrap();
        assert_eq!(stored.state, DeliveryState::Delivered, "{id}");
    }
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn exponential_to_an_hour_retries_only_network_errors_5xx_and_429() {
    let policy = Policy::exponential_to_an_hour(10);

    // 10 attempts, 1 s doubling (to a 1 h cap), ±25%.
    let doubling = secs(&[1, 2, 4, 8, 16, 32, 64, 128, 256]);
    for (draw, factor) in [(0.0, 0.75), (1.0, 1.25)] {
        let receiver = Scripted::new(|call| match call.nth % 3 {
            0 => Answer::Status(429),
            1 => Answer::Body(500, 5000),
            _ => Answer::Unreachable,
        });
        let record = deliver_one(&receiver, &policy, draw).await;
        assert_eq!(record.outcome, Final::Dead);
        assert_eq!(record.attempts.len(), 10);
        assert_scaled(&gaps(&record), &doubling, factor);
        assert_eq!(record.attempts[0].excerpt.len(), 1024);
    }
    let capped = Policy::exponential_to_an_hour(20);
    assert_eq!(
        capped.schedule().nominal_delay(13),
        Some(Duration::from_secs(2048))
    );
    assert_eq!(capped.schedule().nominal_delay(14), Some(HOUR));
    assert_eq!(capped.schedule().nominal_delay(20), Some(HOUR));

    // 3xx and 4xx other than 429 are not retried, 410 included.
    for status in [301, 302, 400, 401, 404, 408, 410, 422] {
        let receiver = Scripted::new(move |_| Answer::Status(status));
        let record = deliver_one(&receiver, &policy, 0.5).await;
        assert_eq!(record.outcome, Final::Dead, "{status}");
        assert_eq!(record.attempts.len(), 1, "{status}");
    }

    // 30 s per attempt.
    let slow = Scripted::new(|call| match call.nth {
        1 => Answer::After(Duration::from_secs(31), 200),
        _ => Answer::After(Duration::from_secs(29), 200),
    });
    let record = deliver_one(&slow, &policy, 0.5).await;
    assert_eq!(record.attempts[0].duration, Duration::from_secs(30));
    assert_eq!(record.outcome, Final::Delivered);

    // 20 consecutive failures open the breaker for 24 h.
    let mut breaker = policy.breaker().clone();
    let now = std::time::Instant::now();
    for n in 1..=20 {
        breaker
            .try_acquire(now)
            .unwrap_or_else(|_| panic!("closed before failure {n}"));
        breaker.on_failure(now);
    }
    assert_eq!(breaker.try_acquire(now), Err(DAY));
    assert!(breaker.try_acquire(now + DAY).is_ok());

    // At most 10 at once per endpoint, and a cap on the body.
    let receiver = Scripted::new(|_| Answer::After(5 * SECOND, 200));
    let (dispatcher, _) = dispatcher_for(&receiver, policy).await;
    let running = dispatcher.start();
    for n in 0..30 {
        dispatcher
            .send(ENDPOINT, &format!("msg_{n}"), b"{}")
            .await
            .unwrap();
    }
    tokio::time::sleep(MINUTE).await;
    assert_eq!(receiver.calls().len(), 30);
    assert_eq!(receiver.peak.load(Ordering::SeqCst), 10);
    let limit = 256 * 1024;
    assert!(matches!(
        dispatcher.send(ENDPOINT, "big", &vec![b' '; limit + 1]).await,
        Err(DispatchError::TooLarge { len, max }) if len == limit + 1 && max == limit
    ));
    assert!(
        dispatcher
            .send(ENDPOINT, "big", &vec![b' '; limit])
            .await
            .unwrap()
    );
    running.stop().await;
}

/// A loopback server answering every POST with `status` and a body of
/// `len` bytes; its URL.
async fn loopback_server(status: u16, len: usize) -> String {
    use axum::http::StatusCode;
    let app = axum::Router::new().route(
        "/hooks",
        axum::routing::post(move || async move {
            (StatusCode::from_u16(status).unwrap(), vec![b'x'; len])
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test]
async fn over_http_each_preset_reads_only_its_excerpt_and_nine_attempts_stops_at_a_private_address()
{
    use hooklatch::sender::HttpTransport;
    let url = loopback_server(500, 10_000).await;
    let loopback = AddressPolicy::strict().insecure_allow_loopback();
    for (policy, read) in [
        (Policy::nine_attempts_over_three_days(), 4096),
        (Policy::svix_table_without_jitter(), 1024),
        (Policy::seven_attempts_over_a_day(), 512),
    ] {
        let transport = HttpTransport::for_policy(loopback.clone(), &policy).unwrap();
        let answer = transport.post(&url, &[], b"{}").await.unwrap();
        assert_eq!(answer.status, 500);
        assert_eq!(answer.body.len(), read);
    }

    // Through the real guard: it refuses the loopback address, and seed
    // 002 stops at once.
    let strict = |policy: &Policy| HttpTransport::for_policy(AddressPolicy::strict(), policy);
    let policy = Policy::nine_attempts_over_three_days();
    let endpoint = Endpoint::new(&url, signer());
    let record = deliver(
        &strict(&policy).unwrap(),
        &endpoint,
        &policy,
        "msg_1",
        b"{}",
        || 0.5,
    )
    .await;
    assert_eq!(record.outcome, Final::Dead);
    assert_eq!(record.attempts.len(), 1);
    let error = record.attempts[0].result.as_ref().unwrap_err();
    assert!(
        matches!(error.transport_error(), Some(TransportError::Refused(_))),
        "{error}"
    );
}

#[tokio::test(start_paused = true)]
async fn redelivery_and_test_deliveries_refuse_what_they_cannot_do() {
    let receiver = Scripted::new(|_| Answer::Status(200));
    let (dispatcher, _) = dispatcher_for(&receiver, Policy::svix()).await;
    let running = dispatcher.start();
    dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    tokio::time::sleep(SECOND).await;
    assert!(
        !dispatcher
            .redeliver(ENDPOINT, "msg_1", "msg_2")
            .await
            .unwrap(),
        "a delivered delivery is not redelivered"
    );
    assert!(
        !dispatcher
            .redeliver(ENDPOINT, "nothing", "msg_3")
            .await
            .unwrap()
    );
    assert!(matches!(
        dispatcher.send_test(ENDPOINT, "ping", b"{}").await,
        Err(DispatchError::NoTestPrefix(endpoint)) if endpoint == ENDPOINT
    ));
    running.stop().await;
    assert_eq!(receiver.ids(), ["msg_1"]);
}

#[tokio::test(start_paused = true)]
async fn svix_table_an_idempotency_key_enqueues_once_for_24_hours_and_names_the_first_message() {
    let receiver = Scripted::new(|_| Answer::Status(200));
    let (dispatcher, _) = dispatcher(&receiver, Policy::svix_table_without_jitter(), SECOND).await;
    let running = dispatcher.start();
    let key = "invoice-2026-0927-001";
    let first = dispatcher
        .send_with_key(ENDPOINT, key, "msg_1", b"{}")
        .await
        .unwrap();
    assert_eq!((first.id.as_str(), first.enqueued), ("msg_1", true));
    tokio::time::sleep(DAY - SECOND).await;
    let again = dispatcher
        .send_with_key(ENDPOINT, key, "msg_2", b"{}")
        .await
        .unwrap();
    assert_eq!(
        (again.id.as_str(), again.enqueued),
        ("msg_1", false),
        "within 24 h the key returns the first message's id"
    );
    tokio::time::sleep(SECOND).await;
    let after = dispatcher
        .send_with_key(ENDPOINT, key, "msg_3", b"{}")
        .await
        .unwrap();
    assert_eq!((after.id.as_str(), after.enqueued), ("msg_3", true));
    tokio::time::sleep(MINUTE).await;
    running.stop().await;
    assert_eq!(receiver.ids(), ["msg_1", "msg_3"]);

    // A policy without a window refuses a keyed send.
    let (plain, _) = dispatcher_for(&receiver, Policy::svix()).await;
    assert!(matches!(
        plain.send_with_key(ENDPOINT, key, "msg_4", b"{}").await,
        Err(DispatchError::NoIdempotencyWindow(endpoint)) if endpoint == ENDPOINT
    ));
}

/// The wall clock moved on by what a test sets: the store records when a
/// delivery ended on the wall clock, and the policy's clock says how long
/// ago that was.
#[derive(Clone, Default)]
struct Shifted(Arc<Mutex<Duration>>);

impl Shifted {
    fn clock(&self) -> impl Fn() -> SystemTime + Send + Sync + 'static {
        let shift = self.0.clone();
        move || SystemTime::now() + *shift.lock().unwrap()
    }

    fn set(&self, to: Duration) {
        *self.0.lock().unwrap() = to;
    }
}

/// One delivery in each state, ended (or sent) now, through the store.
async fn one_of_each(store: &MemoryOutbox) {
    let now = SystemTime::now();
    for id in ["delivered", "gone", "dead"] {
        assert!(store.enqueue(ENDPOINT, id, b"{}", now).await.unwrap());
    }
    let later = now + 365 * DAY;
    assert!(
        store
            .enqueue(ENDPOINT, "pending", b"{}", later)
            .await
            .unwrap()
    );
    let due = store.take_due(ENDPOINT, now, 3, MINUTE).await.unwrap();
    for taken in &due.taken {
        let outcome = match taken.id.as_str() {
            "delivered" => Final::Delivered,
            "gone" => Final::Gone,
            _ => Final::Dead,
        };
        let attempt = Attempt::new(1, now, Ok(500));
        let step = Step::Done(outcome);
        store
            .finish(taken, &attempt, step, None)
            .await
            .expect("the lease held");
    }
}

#[tokio::test]
async fn every_preset_keeps_each_outcome_for_its_retention_then_purges_it() {
    // Days each state is kept: delivered, gone, dead, pending.
    let cases: [(&str, Policy, [Option<u64>; 4]); 5] = [
        ("000", Policy::svix_table_without_jitter(), [None; 4]),
        (
            "001 dead letters 30 days",
            Policy::five_retries_over_ten_hours(),
            [None, None, Some(30), None],
        ),
        (
            "002 history 30 days",
            Policy::nine_attempts_over_three_days(),
            [Some(30), Some(30), Some(30), None],
        ),
        (
            "003 replay for 30 days",
            Policy::exponential_to_an_hour(10),
            [Some(30), Some(30), Some(30), None],
        ),
        (
            "004 backlog kept 14 days",
            Policy::seven_attempts_over_a_day(),
            [Some(14); 4],
        ),
    ];
    let states = ["delivered", "gone", "dead", "pending"];
    for (seed, policy, days) in cases {
        let store = MemoryOutbox::new();
        let shift = Shifted::default();
        let receiver = Scripted::new(|_| Answer::Status(200));
        let dispatcher = Dispatcher::new(store.clone(), receiver);
        let policy = policy.with_clock(shift.clock());
        dispatcher
            .add_endpoint(ENDPOINT, URL, signer(), policy)
            .await
            .unwrap();
        one_of_each(&store).await;
        let hour = Duration::from_secs(3600);
        for day in [0, 14, 30, 3650] {
            for at in [(day * DAY).saturating_sub(hour), day * DAY + hour] {
                shift.set(at);
                dispatcher.purge_by_policy().await.unwrap();
                for (state, kept_for) in states.iter().zip(days) {
                    let kept =
                        kept_for.is_none_or(|days| at < Duration::from_secs(days * 24 * 3600));
                    let found = store.delivery(ENDPOINT, state).await.unwrap();
                    assert_eq!(found.is_some(), kept, "seed {seed}: {state} at {at:?}");
                }
            }
        }
    }
}
