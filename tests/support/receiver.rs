//! The fake receiver every dispatcher test sends to, and the helpers
//! around it: a policy without jitter, a quick dispatcher, polling.
//! Included with `#[path]` by tests/outbox.rs, tests/outbox_faults.rs and
//! tests/dispatcher.rs.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hooklatch::sender::outbox::DeliveryState;
use hooklatch::sender::outbox::DeliveryStore;
use hooklatch::sender::rules::{Breaker, Jitter, Schedule};
use hooklatch::sender::transport::{Response, TransportError};
use hooklatch::sender::{Dispatcher, Policy, Transport};
use hooklatch::verify::{Scheme, Signer, Verifier};

pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
pub const ENDPOINT: &str = "orders";

/// A receiver in the same process: it checks every signature, answers
/// what the test sets, and counts what it saw.
#[derive(Clone)]
pub struct Receiver {
    state: Arc<ReceiverState>,
}

struct ReceiverState {
    verifier: Verifier,
    status: Mutex<u16>,
    delay: Mutex<Duration>,
    /// Status and delay for particular ids, over the two above.
    per_id: Mutex<HashMap<String, (u16, Duration)>>,
    /// (id, status answered) for every answered attempt.
    answered: Mutex<Vec<(String, u16)>>,
    /// (id, `traceparent` header) for every attempt, in arrival order.
    traces: Mutex<Vec<(String, Option<String>)>>,
    started: AtomicUsize,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
}

impl Receiver {
    pub fn answering(status: u16) -> Self {
        Self {
            state: Arc::new(ReceiverState {
                verifier: Verifier::builder(Scheme::standard_webhooks())
                    .with_secret(SECRET)
                    .expect("secret")
                    .build()
                    .expect("verifier"),
                status: Mutex::new(status),
                delay: Mutex::new(Duration::ZERO),
                per_id: Mutex::new(HashMap::new()),
                answered: Mutex::new(Vec::new()),
                traces: Mutex::new(Vec::new()),
                started: AtomicUsize::new(0),
                in_flight: AtomicUsize::new(0),
                peak: AtomicUsize::new(0),
            }),
        }
    }

    pub fn set_status(&self, status: u16) {
        *self.state.status.lock().unwrap() = status;
    }

    pub fn set_delay(&self, delay: Duration) {
        *self.state.delay.lock().unwrap() = delay;
    }

    /// Answers `status` after `delay` to event `id`.
    pub fn answer_id(&self, id: &str, status: u16, delay: Duration) {
        self.state
            .per_id
            .lock()
            .unwrap()
            .insert(id.to_owned(), (status, delay));
    }

    /// (id, `traceparent` header) for every attempt, in arrival order.
    pub fn traces(&self) -> Vec<(String, Option<String>)> {
        self.state.traces.lock().unwrap().clone()
    }

    pub fn answered(&self) -> Vec<(String, u16)> {
        self.state.answered.lock().unwrap().clone()
    }

    /// How many 2xx answers each id got.
    pub fn successes(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for (id, status) in self.answered() {
            if (200..300).contains(&status) {
                *counts.entry(id).or_default() += 1;
            }
        }
        counts
    }

    pub fn started(&self) -> usize {
        self.state.started.load(Ordering::SeqCst)
    }

    pub fn in_flight(&self) -> usize {
        self.state.in_flight.load(Ordering::SeqCst)
    }

    pub fn peak(&self) -> usize {
        self.state.peak.load(Ordering::SeqCst)
    }
}

/// Counts an attempt in flight until dropped, even when a crash drops it.
pub struct InFlight<'a>(pub &'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Transport for Receiver {
    async fn post(
        &self,
        _url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Response, TransportError> {
        let state = &self.state;
        let verified = state
            .verifier
            .verify(headers, body)
            .expect("every attempt is signed anew and verifies");
        let id = verified.id().expect("a webhook-id").to_owned();
        let trace = headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("traceparent"))
            .map(|(_, value)| value.clone());
        state.traces.lock().unwrap().push((id.clone(), trace));
        state.started.fetch_add(1, Ordering::SeqCst);
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let _in_flight = InFlight(&state.in_flight);
        state.peak.fetch_max(now, Ordering::SeqCst);
        let special = state.per_id.lock().unwrap().get(&id).copied();
        let delay = special.map_or_else(|| *state.delay.lock().unwrap(), |(_, delay)| delay);
        tokio::time::sleep(delay).await;
        let status = special.map_or_else(|| *state.status.lock().unwrap(), |(status, _)| status);
        state.answered.lock().unwrap().push((id, status));
        Ok(Response::new(status).with_body(b"ok".to_vec()))
    }
}

/// Attempts `every` apart, `attempts` in all, no jitter, and a breaker
/// that never opens (one test sets its own).
pub fn every(every: Duration, attempts: usize) -> Policy {
    let mut delays = vec![Duration::ZERO];
    delays.resize(attempts, every);
    Policy::new(Schedule::Table {
        delays,
        jitter: Jitter::None,
    })
    .with_breaker(Breaker::new().with_failure_threshold(u32::MAX))
    .with_attempt_timeout(Duration::from_millis(400))
}

pub fn dispatcher<S: DeliveryStore>(store: S, receiver: &Receiver) -> Dispatcher<S, Receiver> {
    Dispatcher::new(store, receiver.clone())
        .with_poll_interval(Duration::from_millis(20))
        .with_lease(Duration::from_secs(5))
        .expect("lease")
}

pub async fn add(dispatcher: &Dispatcher<impl DeliveryStore, Receiver>, policy: Policy) {
    dispatcher
        .add_endpoint(
            ENDPOINT,
            "https://receiver.example/hooks",
            Signer::new(Scheme::standard_webhooks(), [SECRET]).expect("secret"),
            policy,
        )
        .await
        .expect("endpoint");
}

/// Polls `done` until it holds, failing after 20 seconds.
pub async fn wait_until<F: Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub async fn state_of(store: &impl DeliveryStore, id: &str) -> DeliveryState {
    store
        .delivery(ENDPOINT, id)
        .await
        .expect("read")
        .expect("stored")
        .state
}

pub async fn all_in(store: &impl DeliveryStore, ids: &[String], state: DeliveryState) -> bool {
    for id in ids {
        if state_of(store, id).await != state {
            return false;
        }
    }
    true
}

pub fn ids(count: usize) -> Vec<String> {
    (0..count).map(|n| format!("msg_{n}")).collect()
}
