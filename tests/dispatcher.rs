//! The [`Dispatcher`]'s own behaviour, on the memory outbox: the
//! concurrency limit, auto-disable, 410, the breaker, a transport that
//! panics, refused input, the lease check, the presets, a detached loop's
//! pace and the store calls an attempt costs (on Redis too).

#[path = "support/receiver.rs"]
mod receiver;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use hooklatch::sender::OutboxError;
use hooklatch::sender::outbox::{
    DeliveryCounts, DeliveryStore, EndpointRegistry, Keeping, NewDelivery, OutboxView,
    RecentAttempt, SavedEndpoints, Wanted,
};
use hooklatch::sender::outbox::{DeliveryState, DisableReason, HealthChange, Retention};
use hooklatch::sender::rules::Breaker;
use hooklatch::sender::transport::{Response, TransportError};
use hooklatch::sender::{
    Disabled, DispatchError, Dispatcher, Keyed, MemoryOutbox, Policy, SendKey, Transport,
};
use hooklatch::verify::{Scheme, Signer};
use receiver::*;

#[tokio::test]
async fn the_concurrency_limit_holds_per_endpoint() {
    let receiver = Receiver::answering(200);
    receiver.set_delay(Duration::from_millis(30));
    let dispatcher = dispatcher(MemoryOutbox::new(), &receiver);
    add(
        &dispatcher,
        every(Duration::from_millis(50), 3).with_concurrency(3),
    )
    .await;
    deliver_all(&dispatcher, &receiver, 30).await;
    assert_eq!(receiver.peak(), 3, "three at once, never more");
}

/// Sends `count` events, runs the loop until the receiver has had each,
/// and stops it.
async fn deliver_all<S: DeliveryStore>(
    dispatcher: &Dispatcher<S, Receiver>,
    receiver: &Receiver,
    count: usize,
) {
    for id in ids(count) {
        dispatcher.send(ENDPOINT, &id, b"{}").await.unwrap();
    }
    let running = dispatcher.start();
    wait_until("all delivered", || async {
        receiver.successes().len() == count
    })
    .await;
    running.stop().await;
}

#[tokio::test]
async fn an_endpoint_failing_past_its_limit_is_disabled_and_its_owner_told() {
    let receiver = Receiver::answering(500);
    let told: Arc<Mutex<Vec<Disabled>>> = Arc::default();
    let dispatcher = {
        let told = told.clone();
        dispatcher(MemoryOutbox::new(), &receiver)
            .on_disable(move |disabled| told.lock().unwrap().push(disabled.clone()))
    };
    let started = SystemTime::now();
    add(
        &dispatcher,
        every(Duration::from_millis(30), 1000).with_disable_after(Some(Duration::from_millis(200))),
    )
    .await;
    dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    let running = dispatcher.start();
    wait_until("the endpoint is disabled", || async {
        dispatcher.disabled(ENDPOINT).unwrap().is_some()
    })
    .await;
    let disabled_at = SystemTime::now();
    let attempts_when_disabled = receiver.answered().len();
    // How many attempts fit in 200 ms depends on the machine; what the rule
    // promises is that it waits out the limit and acts on a failure past it.
    assert!(
        attempts_when_disabled >= 2,
        "a first failure and one past the limit"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        receiver.answered().len(),
        attempts_when_disabled,
        "nothing sent once disabled"
    );

    let told = told.lock().unwrap().clone();
    assert_eq!(told.len(), 1, "told once");
    assert_eq!(told[0].endpoint, ENDPOINT);
    assert_eq!(
        told[0].reason,
        DisableReason::NoSuccessFor(Duration::from_millis(200))
    );
    let failing_since = told[0].failing_since.unwrap();
    assert!(failing_since >= started);
    assert!(
        disabled_at.duration_since(failing_since).unwrap() >= Duration::from_millis(200),
        "not disabled before failing for the whole limit"
    );

    // The delivery waited, pending, and goes out once enabled again.
    receiver.set_status(200);
    dispatcher.enable(ENDPOINT).await.unwrap();
    wait_until("delivered after enabling", || async {
        receiver.successes().len() == 1
    })
    .await;
    running.stop().await;
}

#[tokio::test]
async fn gone_disables_the_endpoint_and_holds_its_other_deliveries() {
    let receiver = Receiver::answering(410);
    let told: Arc<Mutex<Vec<Disabled>>> = Arc::default();
    let dispatcher = {
        let told = told.clone();
        dispatcher(MemoryOutbox::new(), &receiver)
            .on_disable(move |disabled| told.lock().unwrap().push(disabled.clone()))
    };
    add(
        &dispatcher,
        every(Duration::from_millis(20), 5).with_concurrency(1),
    )
    .await;
    let store_view = dispatcher.clone();
    dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    let running = dispatcher.start();
    wait_until("disabled", || async {
        dispatcher.disabled(ENDPOINT).unwrap() == Some(DisableReason::Gone)
    })
    .await;
    dispatcher.send(ENDPOINT, "msg_2", b"{}").await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    running.stop().await;
    assert_eq!(receiver.answered(), [("msg_1".to_owned(), 410)]);
    let first = store_view
        .delivery(ENDPOINT, "msg_1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.state, DeliveryState::Gone);
    let second = store_view
        .delivery(ENDPOINT, "msg_2")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        second.state,
        DeliveryState::Pending,
        "kept for when it is enabled"
    );
    assert_eq!(told.lock().unwrap()[0].reason, DisableReason::Gone);
}

#[tokio::test]
async fn an_open_breaker_sends_nothing_until_its_cool_down_ends() {
    let receiver = Receiver::answering(500);
    let dispatcher = dispatcher(MemoryOutbox::new(), &receiver);
    add(
        &dispatcher,
        every(Duration::from_millis(10), 1000)
            .with_concurrency(1)
            .with_breaker(
                Breaker::new()
                    .with_failure_threshold(3)
                    // 3 s: the look at what was sent 250 ms in must come
                    // before the cool-down ends, however slow the machine.
                    .with_cool_down(Duration::from_secs(3))
                    .with_probes(1),
            ),
    )
    .await;
    dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    let running = dispatcher.start();
    wait_until("three failures", || async {
        receiver.answered().len() >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(receiver.answered().len(), 3, "open: nothing sent");
    receiver.set_status(200);
    wait_until("a probe after the cool-down succeeds", || async {
        receiver.successes().len() == 1
    })
    .await;
    running.stop().await;
    assert_eq!(receiver.answered().len(), 4);
}

/// A transport whose `panic_on`th request (counting from 1) panics; the
/// others go to the receiver.
struct PanicsOnce {
    receiver: Receiver,
    calls: AtomicUsize,
    panic_on: usize,
}

impl Transport for PanicsOnce {
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Response, TransportError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        assert_ne!(call, self.panic_on, "a transport bug, on purpose");
        self.receiver.post(url, headers, body).await
    }
}

/// The half-open breaker's one probe panics in the transport: the probe
/// counts as failed, and after another cool-down a new probe goes out.
/// (Before, the probe never came back and the breaker stayed half-open,
/// sending nothing, for good.)
#[tokio::test]
async fn a_probe_that_panics_does_not_hold_the_breaker_half_open() {
    let receiver = Receiver::answering(500);
    let transport = PanicsOnce {
        receiver: receiver.clone(),
        calls: AtomicUsize::new(0),
        panic_on: 2,
    };
    let dispatcher = Dispatcher::new(MemoryOutbox::new(), transport)
        .with_poll_interval(Duration::from_millis(20))
        .with_lease(Duration::from_secs(5))
        .unwrap();
    dispatcher
        .add_endpoint(
            ENDPOINT,
            "https://receiver.example/hooks",
            Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap(),
            every(Duration::from_millis(10), 1000)
                .with_concurrency(1)
                .with_breaker(
                    Breaker::new()
                        .with_failure_threshold(1)
                        .with_cool_down(Duration::from_millis(100))
                        .with_probes(1),
                ),
        )
        .await
        .unwrap();
    for id in ["msg_1", "msg_2"] {
        dispatcher.send(ENDPOINT, id, b"{}").await.unwrap();
    }
    let running = dispatcher.start();
    wait_until("the first failure", || async {
        receiver.answered().len() == 1
    })
    .await;
    receiver.set_status(200);
    // Call 2 is the probe after the cool-down, and panics; msg_2 goes out
    // with the next probe, while msg_1 waits for its lease to end.
    wait_until("a later probe is delivered", || async {
        !receiver.successes().is_empty()
    })
    .await;
    running.stop().await;
}

#[tokio::test]
async fn sending_an_event_twice_stores_one_delivery() {
    let receiver = Receiver::answering(200);
    let dispatcher = dispatcher(MemoryOutbox::new(), &receiver);
    add(&dispatcher, every(Duration::from_millis(10), 3)).await;
    assert!(dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap());
    assert!(!dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap());
    let running = dispatcher.start();
    wait_until("delivered", || async { receiver.successes().len() == 1 }).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    running.stop().await;
    assert_eq!(receiver.answered().len(), 1);
}

#[tokio::test]
async fn unknown_endpoints_and_bad_ids_are_refused() {
    let receiver = Receiver::answering(200);
    let dispatcher = dispatcher(MemoryOutbox::new(), &receiver);
    assert!(matches!(
        dispatcher.send("nowhere", "msg_1", b"{}").await,
        Err(DispatchError::UnknownEndpoint(name)) if name == "nowhere"
    ));
    add(&dispatcher, every(Duration::from_millis(10), 3)).await;
    let error = dispatcher
        .send(ENDPOINT, "two words", b"{}")
        .await
        .unwrap_err();
    assert!(
        error.to_string().starts_with("invalid delivery id: "),
        "{error}"
    );
    let error = dispatcher
        .add_endpoint(
            "a b",
            "https://x.example",
            Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap(),
            every(Duration::ZERO, 1),
        )
        .await
        .unwrap_err();
    assert!(
        error.to_string().starts_with("invalid endpoint name: "),
        "{error}"
    );
    // Tests lease for 5 s: a 15 s attempt could outlive its lease.
    let error = dispatcher
        .add_endpoint(
            "slow",
            "https://x.example",
            Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap(),
            every(Duration::ZERO, 1).with_attempt_timeout(Duration::from_secs(15)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, DispatchError::LeaseTooShort { .. }),
        "{error}"
    );
}

/// `with_lease` after `add_endpoint` checks the endpoints already added.
#[tokio::test]
async fn with_lease_after_add_endpoint_refuses_a_lease_too_short() {
    let receiver = Receiver::answering(200);
    let dispatcher = Dispatcher::new(MemoryOutbox::new(), receiver.clone());
    // 400 ms attempts, under the default 2 minute lease.
    add(&dispatcher, every(Duration::from_millis(10), 3)).await;
    let error = dispatcher
        .with_lease(Duration::from_millis(400))
        .unwrap_err();
    assert!(
        matches!(
            error,
            DispatchError::LeaseTooShort { lease, attempt_timeout }
                if lease == Duration::from_millis(400)
                    && attempt_timeout == Duration::from_millis(400)
        ),
        "{error}"
    );

    let dispatcher = Dispatcher::new(MemoryOutbox::new(), receiver);
    add(&dispatcher, every(Duration::from_millis(10), 3)).await;
    let dispatcher = dispatcher
        .with_lease(Duration::from_millis(401))
        .expect("longer than every attempt");
    assert!(format!("{dispatcher:?}").contains("401ms"));
}

#[test]
fn the_presets_are_complete_configurations() {
    const DAY: Duration = Duration::from_secs(24 * 3600);
    let nine = Policy::nine_attempts_over_three_days();
    assert_eq!(nine.schedule().attempts(), 9);
    assert_eq!(nine.attempt_timeout(), Duration::from_secs(10));
    assert_eq!(nine.disable_after(), Some(3 * DAY));

    let ten_hours = Policy::five_retries_over_ten_hours();
    assert_eq!(ten_hours.schedule().attempts(), 6);
    assert_eq!(ten_hours.connect_timeout(), Duration::from_secs(5));
    assert_eq!(ten_hours.attempt_timeout(), Duration::from_secs(35));

    let seven = Policy::seven_attempts_over_a_day();
    assert_eq!(seven.schedule().attempts(), 7);
    assert_eq!(seven.disable_after(), Some(7 * DAY));

    let svix = Policy::svix();
    assert_eq!(svix.schedule().attempts(), 8);
    assert_eq!(svix.attempt_timeout(), Duration::from_secs(15));
    assert_eq!(svix.connect_timeout(), Duration::from_secs(5));
    assert_eq!(svix.concurrency(), 10);
    assert_eq!(svix.disable_after(), Some(5 * DAY));

    // The breakers, shown by driving them: 20 failures open the
    // exponential preset's for 24 h; 3 probes close the 10.6 h preset's.
    let now = std::time::Instant::now();
    let mut breaker = Policy::exponential_to_an_hour(30).breaker().clone();
    for n in 1..=20 {
        breaker
            .try_acquire(now)
            .unwrap_or_else(|_| panic!("closed before failure {n}"));
        breaker.on_failure(now);
    }
    assert!(
        breaker
            .try_acquire(now + DAY - Duration::from_secs(1))
            .is_err()
    );
    assert!(breaker.try_acquire(now + DAY).is_ok());

    let mut breaker = ten_hours.breaker().clone();
    for _ in 0..5 {
        breaker.try_acquire(now).unwrap();
        breaker.on_failure(now);
    }
    let later = now + Duration::from_secs(30);
    for _ in 0..3 {
        breaker.try_acquire(later).expect("up to three probes");
    }
    assert!(breaker.try_acquire(later).is_err(), "a fourth waits");
    for _ in 0..3 {
        breaker.on_success(later);
    }
    assert_eq!(
        breaker.state(later),
        hooklatch::sender::rules::BreakerState::Closed
    );
}

/// A store (the memory one unless told) that counts how often the loop
/// looks for due deliveries, records an attempt, and reads an endpoint's
/// health on its own.
#[derive(Clone, Default)]
struct Counting<S = MemoryOutbox> {
    inner: S,
    takes: Arc<AtomicUsize>,
    finishes: Arc<AtomicUsize>,
    put_backs: Arc<AtomicUsize>,
    health_reads: Arc<AtomicUsize>,
    /// Endpoints whose part of every take fails: reported unanswered,
    /// without their health.
    unanswered: Arc<Mutex<Vec<String>>>,
}

impl<S: DeliveryStore> EndpointRegistry for Counting<S> {
    async fn save_endpoint(&self, name: &str, config: &str) -> Result<u64, OutboxError> {
        self.inner.save_endpoint(name, config).await
    }
    async fn remove_endpoint(&self, name: &str) -> Result<bool, OutboxError> {
        self.inner.remove_endpoint(name).await
    }
    async fn endpoints_version(&self) -> Result<u64, OutboxError> {
        self.inner.endpoints_version().await
    }
    async fn saved_endpoints(&self) -> Result<SavedEndpoints, OutboxError> {
        self.inner.saved_endpoints().await
    }
}

impl<S: OutboxView> OutboxView for Counting<S> {
    async fn endpoint_names(&self) -> Result<Vec<String>, OutboxError> {
        self.inner.endpoint_names().await
    }
    async fn recent_attempts(&self, e: &str, n: usize) -> Result<Vec<RecentAttempt>, OutboxError> {
        self.inner.recent_attempts(e, n).await
    }
}

impl<S: Keeping> Keeping for Counting<S> {
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

    async fn purge(&self, before: SystemTime) -> Result<u64, hooklatch::sender::OutboxError> {
        self.inner.purge(before).await
    }
}

impl<S> Counting<S> {
    fn over(inner: S) -> Self {
        Self {
            inner,
            takes: Arc::default(),
            finishes: Arc::default(),
            put_backs: Arc::default(),
            health_reads: Arc::default(),
            unanswered: Arc::default(),
        }
    }
}

impl<S: DeliveryStore> DeliveryStore for Counting<S> {
    async fn add_delivery(&self, new: NewDelivery<'_>) -> Result<bool, OutboxError> {
        self.inner.add_delivery(new).await
    }
    async fn take_due(
        &self,
        endpoint: &str,
        now: SystemTime,
        limit: usize,
        lease: Duration,
    ) -> Result<hooklatch::sender::outbox::Due, hooklatch::sender::OutboxError> {
        self.takes.fetch_add(1, Ordering::SeqCst);
        self.inner.take_due(endpoint, now, limit, lease).await
    }
    async fn take_due_across(
        &self,
        wanted: &[Wanted],
        limit: usize,
        lease: Duration,
    ) -> Result<hooklatch::sender::outbox::DueAcross, hooklatch::sender::OutboxError> {
        self.takes.fetch_add(1, Ordering::SeqCst);
        let mut due = self.inner.take_due_across(wanted, limit, lease).await?;
        for failed in self.unanswered.lock().unwrap().iter() {
            due.health.remove(failed);
            due.unanswered.push(failed.clone());
        }
        Ok(due)
    }
    async fn finish(
        &self,
        taken: &hooklatch::sender::outbox::Taken,
        attempt: &hooklatch::sender::rules::Attempt,
        step: hooklatch::sender::rules::Step,
        change: Option<HealthChange>,
    ) -> Result<hooklatch::sender::outbox::EndpointHealth, hooklatch::sender::OutboxError> {
        self.finishes.fetch_add(1, Ordering::SeqCst);
        self.inner.finish(taken, attempt, step, change).await
    }
    async fn put_back(
        &self,
        taken: &hooklatch::sender::outbox::Taken,
        due: SystemTime,
    ) -> Result<(), hooklatch::sender::OutboxError> {
        self.put_backs.fetch_add(1, Ordering::SeqCst);
        self.inner.put_back(taken, due).await
    }
    async fn delivery(
        &self,
        endpoint: &str,
        id: &str,
    ) -> Result<Option<hooklatch::sender::outbox::StoredDelivery>, hooklatch::sender::OutboxError>
    {
        self.inner.delivery(endpoint, id).await
    }
    async fn list(
        &self,
        endpoint: &str,
        state: DeliveryState,
        limit: usize,
    ) -> Result<Vec<String>, hooklatch::sender::OutboxError> {
        self.inner.list(endpoint, state, limit).await
    }
    async fn replay(
        &self,
        endpoint: &str,
        id: &str,
        now: SystemTime,
    ) -> Result<bool, hooklatch::sender::OutboxError> {
        self.inner.replay(endpoint, id, now).await
    }
    async fn health(
        &self,
        endpoint: &str,
    ) -> Result<hooklatch::sender::outbox::EndpointHealth, hooklatch::sender::OutboxError> {
        self.health_reads.fetch_add(1, Ordering::SeqCst);
        self.inner.health(endpoint).await
    }
    async fn disable(
        &self,
        endpoint: &str,
        reason: DisableReason,
        now: SystemTime,
    ) -> Result<bool, hooklatch::sender::OutboxError> {
        self.inner.disable(endpoint, reason, now).await
    }
    async fn enable(&self, endpoint: &str) -> Result<(), hooklatch::sender::OutboxError> {
        self.inner.enable(endpoint).await
    }

    async fn counts(&self, e: &str, now: SystemTime) -> Result<DeliveryCounts, OutboxError> {
        self.inner.counts(e, now).await
    }
}

/// The store calls a delivered event costs (its `finish` and its share of
/// the takes) do not grow with the number of endpoints: one take a poll
/// covers them all.
#[tokio::test]
async fn store_calls_per_delivered_event_stay_constant_as_endpoints_grow() {
    calls_per_event_as_endpoints_grow(async || MemoryOutbox::new()).await;
}

/// The same on Redis. These are calls to the store; what each costs the
/// server in script calls is counted by
/// `redis_script_calls_per_delivered_event_stay_constant_as_endpoints_grow`
/// in tests/outbox.rs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_calls_per_delivered_event_stay_constant_as_endpoints_grow() {
    let server = support::redis();
    calls_per_event_as_endpoints_grow(async || {
        hooklatch::sender::RedisOutbox::connect(&server.url())
            .await
            .unwrap()
            .with_prefix(&support::unique("calls"))
            .unwrap()
    })
    .await;
}

async fn calls_per_event_as_endpoints_grow<S: DeliveryStore + Clone>(open: impl AsyncFn() -> S) {
    let mut per_event = Vec::new();
    for endpoints in [1, 300] {
        let receiver = Receiver::answering(200);
        let store = Counting::over(open().await);
        let dispatcher = dispatcher(store.clone(), &receiver);
        add(&dispatcher, every(Duration::from_millis(10), 3)).await;
        for n in 1..endpoints {
            let signer = Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap();
            let policy = every(Duration::from_millis(10), 3);
            dispatcher
                .add_endpoint(
                    &format!("idle_{n}"),
                    "https://idle.example/",
                    signer,
                    policy,
                )
                .await
                .unwrap();
        }
        deliver_all(&dispatcher, &receiver, 40).await;
        let calls = store.takes.load(Ordering::SeqCst)
            + store.finishes.load(Ordering::SeqCst)
            + store.put_backs.load(Ordering::SeqCst);
        per_event.push(calls as f64 / 40.0);
    }
    let (one, many) = (per_event[0], per_event[1]);
    assert!(
        many <= 3.0,
        "at most a finish and two takes an event: {many}"
    );
    assert!(
        many <= one * 1.5 + 0.5,
        "300 endpoints cost what one does: {one} and {many} calls an event"
    );
}

/// A loop whose `Running` handle was dropped keeps delivering, and polls at
/// its interval rather than spinning.
#[tokio::test]
async fn a_detached_loop_keeps_its_pace() {
    let receiver = Receiver::answering(200);
    let store: Counting = Counting::default();
    let dispatcher = Dispatcher::new(store.clone(), receiver.clone())
        .with_poll_interval(Duration::from_millis(100));
    add(&dispatcher, every(Duration::from_millis(10), 3)).await;
    drop(dispatcher.start());
    dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    wait_until("delivered", || async { receiver.successes().len() == 1 }).await;
    let before = store.takes.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_takes = store.takes.load(Ordering::SeqCst) - before;
    assert!(
        idle_takes <= 7,
        "about one look per 100 ms, not a spin: {idle_takes}"
    );
}

/// An attempt costs the store one call, `finish`, which records it and
/// merges the endpoint's health; the loop reads the health only with its
/// takes, never in a call of its own (adding the endpoint reads it once).
#[tokio::test]
async fn each_attempt_costs_one_finish_and_no_health_read() {
    let receiver = Receiver::answering(200);
    let store: Counting = Counting::default();
    let dispatcher = dispatcher(store.clone(), &receiver);
    add(&dispatcher, every(Duration::from_millis(10), 3)).await;
    deliver_all(&dispatcher, &receiver, 20).await;
    assert_eq!(store.finishes.load(Ordering::SeqCst), 20);
    assert_eq!(
        store.health_reads.load(Ordering::SeqCst),
        1,
        "once, when the endpoint was added"
    );
    assert!(store.takes.load(Ordering::SeqCst) >= 2);
}

/// A take whose part for an endpoint failed tells nothing of its health:
/// the dispatcher keeps the health it last saw (here a disable) rather than
/// take the endpoint for enabled.
#[tokio::test]
async fn an_unanswered_endpoint_keeps_the_health_last_seen() {
    let receiver = Receiver::answering(200);
    let store: Counting = Counting::default();
    let dispatcher = dispatcher(store.clone(), &receiver);
    add(&dispatcher, every(Duration::from_millis(10), 3)).await;
    assert!(
        store
            .disable(ENDPOINT, DisableReason::Manual, SystemTime::now())
            .await
            .unwrap()
    );
    let running = dispatcher.start();
    wait_until("the loop sees the disable", || async {
        dispatcher.disabled(ENDPOINT).unwrap() == Some(DisableReason::Manual)
    })
    .await;
    store.unanswered.lock().unwrap().push(ENDPOINT.to_owned());
    let takes = store.takes.load(Ordering::SeqCst);
    wait_until("a few takes", || async {
        store.takes.load(Ordering::SeqCst) >= takes + 3
    })
    .await;
    running.stop().await;
    assert_eq!(
        dispatcher.disabled(ENDPOINT).unwrap(),
        Some(DisableReason::Manual)
    );
}

/// An id the endpoint's scheme cannot sign (a Standard Webhooks id with a
/// `.`) is refused when sent, not stored to die at its first attempt.
#[tokio::test]
async fn an_id_the_endpoint_cannot_sign_is_refused_when_sent() {
    let receiver = Receiver::answering(200);
    let store = MemoryOutbox::new();
    let dispatcher = Dispatcher::new(store.clone(), receiver.clone());
    dispatcher
        .add_endpoint(
            ENDPOINT,
            "https://receiver.example/hooks",
            Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap(),
            every(Duration::from_millis(10), 3),
        )
        .await
        .unwrap();
    let refused = dispatcher.send(ENDPOINT, "order.created.42", b"{}").await;
    assert!(
        matches!(refused, Err(DispatchError::UnsignableId { .. })),
        "{refused:?}"
    );
    assert!(
        store
            .delivery(ENDPOINT, "order.created.42")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        dispatcher
            .send(ENDPOINT, "order_created_42", b"{}")
            .await
            .unwrap()
    );
}

/// A backend of one's own needs the 14 required methods of `DeliveryStore`
/// and `EndpointRegistry` and nothing more to send: this one forwards
/// exactly those (no `Keeping`, no `OutboxView`, no provided method) and
/// a dispatcher on it delivers, refuses a second send of an id and reads
/// the delivery back.
#[tokio::test]
async fn a_backend_with_only_the_required_methods_delivers() {
    struct Plain(MemoryOutbox);

    impl EndpointRegistry for Plain {
        async fn save_endpoint(&self, name: &str, config: &str) -> Result<u64, OutboxError> {
            self.0.save_endpoint(name, config).await
        }
        async fn remove_endpoint(&self, name: &str) -> Result<bool, OutboxError> {
            self.0.remove_endpoint(name).await
        }
        async fn endpoints_version(&self) -> Result<u64, OutboxError> {
            self.0.endpoints_version().await
        }
        async fn saved_endpoints(&self) -> Result<SavedEndpoints, OutboxError> {
            self.0.saved_endpoints().await
        }
    }

    impl DeliveryStore for Plain {
        async fn add_delivery(&self, new: NewDelivery<'_>) -> Result<bool, OutboxError> {
            self.0.add_delivery(new).await
        }
        async fn take_due(
            &self,
            endpoint: &str,
            now: SystemTime,
            limit: usize,
            lease: Duration,
        ) -> Result<hooklatch::sender::outbox::Due, OutboxError> {
            self.0.take_due(endpoint, now, limit, lease).await
        }
        async fn finish(
            &self,
            taken: &hooklatch::sender::outbox::Taken,
            attempt: &hooklatch::sender::rules::Attempt,
            step: hooklatch::sender::rules::Step,
            change: Option<HealthChange>,
        ) -> Result<hooklatch::sender::outbox::EndpointHealth, OutboxError> {
            self.0.finish(taken, attempt, step, change).await
        }
        async fn put_back(
            &self,
            taken: &hooklatch::sender::outbox::Taken,
            due: SystemTime,
        ) -> Result<(), OutboxError> {
            self.0.put_back(taken, due).await
        }
        async fn delivery(
            &self,
            endpoint: &str,
            id: &str,
        ) -> Result<Option<hooklatch::sender::outbox::StoredDelivery>, OutboxError> {
            self.0.delivery(endpoint, id).await
        }
        async fn list(
            &self,
            endpoint: &str,
            state: DeliveryState,
            limit: usize,
        ) -> Result<Vec<String>, OutboxError> {
            self.0.list(endpoint, state, limit).await
        }
        async fn replay(
            &self,
            endpoint: &str,
            id: &str,
            now: SystemTime,
        ) -> Result<bool, OutboxError> {
            self.0.replay(endpoint, id, now).await
        }
        async fn counts(
            &self,
            endpoint: &str,
            now: SystemTime,
        ) -> Result<DeliveryCounts, OutboxError> {
            self.0.counts(endpoint, now).await
        }
        async fn disable(
            &self,
            endpoint: &str,
            reason: DisableReason,
            now: SystemTime,
        ) -> Result<bool, OutboxError> {
            self.0.disable(endpoint, reason, now).await
        }
        async fn enable(&self, endpoint: &str) -> Result<(), OutboxError> {
            self.0.enable(endpoint).await
        }
    }

    let receiver = Receiver::answering(200);
    let dispatcher = dispatcher(Plain(MemoryOutbox::new()), &receiver);
    add(&dispatcher, every(Duration::from_millis(10), 3)).await;
    assert!(dispatcher.send(ENDPOINT, "msg_plain", b"{}").await.unwrap());
    assert!(!dispatcher.send(ENDPOINT, "msg_plain", b"{}").await.unwrap());
    let running = dispatcher.start();
    wait_until("delivered", || async { receiver.successes().len() == 1 }).await;
    running.stop().await;
    let stored = dispatcher.delivery(ENDPOINT, "msg_plain").await.unwrap();
    assert_eq!(
        stored.map(|delivery| delivery.state),
        Some(DeliveryState::Delivered)
    );
}
