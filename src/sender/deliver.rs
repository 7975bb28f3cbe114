//! The delivery loop: sign, attempt, classify, back off, and record every
//! attempt, over any HTTP [`Transport`].

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use super::breaker::Breaker;
use super::outcome::{Outcome, classify, next_wait};
use super::schedule::Schedule;
use crate::verify::{Clock, Signer, SystemClock};

/// How much of a response body an attempt record keeps.
pub const EXCERPT_LEN: usize = 1024;

/// What a receiver answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// The `Retry-After` header, if any.
    pub retry_after: Option<String>,
    /// The start of the body (a transport may send more; it is cut to
    /// [`EXCERPT_LEN`]).
    pub body: Vec<u8>,
}

/// Sends one signed POST. Implemented over an HTTP client; redirects must
/// not be followed, and addresses must pass the SSRF guard at connect time.
pub trait Transport: Send + Sync {
    /// POSTs `body` with `headers` to `url`. `Err` holds why no answer came
    /// (timeout, refused connection, forbidden address).
    fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> impl Future<Output = Result<Response, String>> + Send;
}

/// Where a delivery goes: a URL, the signer for its secrets, and its
/// circuit breaker.
#[derive(Debug)]
pub struct Endpoint {
    url: String,
    signer: Signer,
    breaker: Mutex<Breaker>,
}

impl Endpoint {
    /// An endpoint with a default [`Breaker`].
    pub fn new(url: &str, signer: Signer) -> Self {
        Self {
            url: url.to_owned(),
            signer,
            breaker: Mutex::new(Breaker::new()),
        }
    }

    /// Uses `breaker` for this endpoint.
    #[must_use]
    pub fn with_breaker(mut self, breaker: Breaker) -> Self {
        self.breaker = Mutex::new(breaker);
        self
    }

    /// The URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A pass through the breaker for one attempt now, or how long until
    /// it might let one through.
    pub(crate) fn try_breaker(&self) -> Result<Pass<'_>, Duration> {
        self.breaker()
            .try_acquire(tokio::time::Instant::now().into_std())?;
        Ok(Pass {
            endpoint: self,
            resolved: false,
        })
    }

    /// Whether the breaker is open (sending nothing) now.
    pub(crate) fn breaker_open(&self) -> bool {
        self.breaker().state(tokio::time::Instant::now().into_std())
            == super::breaker::BreakerState::Open
    }

    fn breaker(&self) -> std::sync::MutexGuard<'_, Breaker> {
        self.breaker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One attempt's pass through its endpoint's breaker: the attempt gives
/// the breaker its verdict through it. A pass dropped without one (the
/// attempt panicked or was cancelled) counts as a failure, so a half-open
/// breaker's probe always comes back, whatever ends the attempt.
pub(crate) struct Pass<'a> {
    endpoint: &'a Endpoint,
    resolved: bool,
}

impl Pass<'_> {
    /// The attempt succeeded.
    fn succeeded(mut self) {
        self.resolved = true;
        self.endpoint
            .breaker()
            .on_success(tokio::time::Instant::now().into_std());
    }

    /// The attempt failed (an error status, a transport error, a timeout).
    fn failed(mut self) {
        self.resolved = true;
        self.endpoint
            .breaker()
            .on_failure(tokio::time::Instant::now().into_std());
    }

    /// Nothing was sent (the attempt could not be signed): no verdict.
    fn release(mut self) {
        self.resolved = true;
        self.endpoint.breaker().release();
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if !self.resolved {
            self.endpoint
                .breaker()
                .on_failure(tokio::time::Instant::now().into_std());
        }
    }
}

/// Why a delivery waited before an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    /// The schedule's delay.
    Schedule,
    /// The receiver's `Retry-After`, longer than the schedule's delay.
    RetryAfter,
}

/// One attempt of a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// 1 for the first attempt; a replay goes on counting.
    pub number: u32,
    /// When it was signed and sent.
    pub sent_at: SystemTime,
    /// How long the delivery waited before it (schedule or `Retry-After`),
    /// and why.
    pub waited: Duration,
    /// Why it waited that long.
    pub reason: WaitReason,
    /// How long it was held past that wait: by an open breaker, the
    /// endpoint's concurrency limit, or a dispatcher's polling.
    pub held: Duration,
    /// The status, or why there was none.
    pub result: Result<u16, String>,
    /// How long the attempt took.
    pub duration: Duration,
    /// The first [`EXCERPT_LEN`] bytes of the response body.
    pub excerpt: Vec<u8>,
}

/// How a delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Final {
    /// A 2xx answer.
    Delivered,
    /// 410 Gone: the endpoint should be disabled.
    Gone,
    /// Every attempt failed, or the status was one not to retry: the
    /// delivery is dead and can be replayed.
    Dead,
}

/// A delivery and all its attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRecord {
    /// The webhook id, the same on every attempt.
    pub id: String,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
    /// How it ended.
    pub outcome: Final,
}

/// The rules of a delivery: the retry schedule, which statuses end it,
/// timeouts, the endpoint's breaker, concurrency limit and auto-disable.
///
/// The named constructors are complete configurations for the policies
/// real providers publish; [`Policy::new`] takes a schedule and the
/// defaults (15 s per attempt, 5 s to connect, [`Breaker::new`], 10
/// deliveries at once per endpoint, disable after 5 days without success).
///
/// ```
/// use std::time::Duration;
/// use hooklatch::sender::Policy;
///
/// let policy = Policy::nine_attempts_over_three_days();
/// assert_eq!(policy.schedule().attempts(), 9);
/// assert_eq!(policy.attempt_timeout(), Duration::from_secs(10));
/// assert_eq!(policy.disable_after(), Some(Duration::from_secs(3 * 24 * 3600)));
/// ```
#[derive(Clone)]
pub struct Policy {
    schedule: Schedule,
    give_up_on: Vec<u16>,
    clock: std::sync::Arc<dyn Clock>,
    attempt_timeout: Duration,
    connect_timeout: Duration,
    breaker: Breaker,
    concurrency: usize,
    disable_after: Option<Duration>,
}

const DAY: Duration = Duration::from_secs(24 * 3600);

impl Policy {
    /// Attempts on `schedule`; every non-2xx status except 410 is retried;
    /// the other settings are the defaults.
    pub fn new(schedule: Schedule) -> Self {
        Self {
            schedule,
            give_up_on: Vec::new(),
            clock: std::sync::Arc::new(SystemClock),
            attempt_timeout: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(5),
            breaker: Breaker::new(),
            concurrency: 10,
            disable_after: Some(5 * DAY),
        }
    }

    /// Svix's table ([`Schedule::svix`]) with the defaults.
    pub fn svix() -> Self {
        Self::new(Schedule::svix())
    }

    /// [`Schedule::nine_attempts_over_three_days`], a 10 s timeout per
    /// attempt, and auto-disable after 3 days without success.
    pub fn nine_attempts_over_three_days() -> Self {
        Self::new(Schedule::nine_attempts_over_three_days())
            .with_attempt_timeout(Duration::from_secs(10))
            .with_disable_after(Some(3 * DAY))
    }

    /// [`Schedule::five_retries_over_ten_hours`], 5 s to connect and 30 s
    /// to read (35 s per attempt), and a breaker that lets up to 3 probes
    /// through and closes after 3 successes.
    pub fn five_retries_over_ten_hours() -> Self {
        Self::new(Schedule::five_retries_over_ten_hours())
            .with_connect_timeout(Duration::from_secs(5))
            .with_attempt_timeout(Duration::from_secs(35))
            .with_breaker(Breaker::new().with_probes(3))
    }

    /// [`Schedule::seven_attempts_over_a_day`] and auto-disable after 7
    /// days without success.
    pub fn seven_attempts_over_a_day() -> Self {
        Self::new(Schedule::seven_attempts_over_a_day()).with_disable_after(Some(7 * DAY))
    }

    /// [`Schedule::exponential_to_an_hour`] and a breaker that opens for
    /// 24 h after 20 consecutive failures.
    pub fn exponential_to_an_hour(attempts: u32) -> Self {
        Self::new(Schedule::exponential_to_an_hour(attempts)).with_breaker(
            Breaker::new()
                .with_failure_threshold(20)
                .with_cool_down(DAY),
        )
    }

    /// Ends the delivery at once on these statuses (say 400 and 422).
    #[must_use]
    pub fn with_give_up_on(mut self, statuses: &[u16]) -> Self {
        self.give_up_on = statuses.to_vec();
        self
    }

    /// Uses `clock` for the signed timestamps and due times. Defaults to
    /// the system clock.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = std::sync::Arc::new(clock);
        self
    }

    /// Ends an attempt that has not been answered within `timeout`. Defaults
    /// to 15 seconds. A transport may have a shorter timeout of its own.
    #[must_use]
    pub fn with_attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// The connect timeout a transport built for this policy uses
    /// (`HttpTransport::for_policy`). Defaults to 5 seconds.
    #[must_use]
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The breaker each endpoint under this policy starts with in a
    /// [`Dispatcher`](super::Dispatcher).
    #[must_use]
    pub fn with_breaker(mut self, breaker: Breaker) -> Self {
        self.breaker = breaker;
        self
    }

    /// How many deliveries a [`Dispatcher`](super::Dispatcher) runs at once
    /// per endpoint. Defaults to 10; at least 1.
    ///
    /// The limit is per dispatcher (per process), not per store: each of
    /// `k` dispatchers sharing a store runs up to this many, so an
    /// endpoint may see up to `k` times as many requests at once. Divide
    /// the endpoint's budget by the number of dispatchers.
    #[must_use]
    pub fn with_concurrency(mut self, deliveries: usize) -> Self {
        self.concurrency = deliveries.max(1);
        self
    }

    /// Disables an endpoint in a [`Dispatcher`](super::Dispatcher) once it
    /// has failed for this long without a success; `None` never does.
    /// Defaults to 5 days.
    #[must_use]
    pub fn with_disable_after(mut self, after: Option<Duration>) -> Self {
        self.disable_after = after;
        self
    }

    /// The retry schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The statuses that end a delivery at once.
    pub fn give_up_on(&self) -> &[u16] {
        &self.give_up_on
    }

    /// The time allowed for one attempt.
    pub fn attempt_timeout(&self) -> Duration {
        self.attempt_timeout
    }

    /// The time allowed to connect.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The breaker each endpoint starts with.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// Deliveries at once per endpoint.
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// How long an endpoint may fail before it is disabled.
    pub fn disable_after(&self) -> Option<Duration> {
        self.disable_after
    }

    pub(crate) fn now(&self) -> SystemTime {
        self.clock.now()
    }
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("schedule", &self.schedule)
            .field("give_up_on", &self.give_up_on)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("breaker", &self.breaker)
            .field("concurrency", &self.concurrency)
            .field("disable_after", &self.disable_after)
            .finish_non_exhaustive()
    }
}

/// What a delivery does after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Another attempt after `wait`.
    Retry {
        /// How long to wait.
        wait: Duration,
        /// Why that long.
        reason: WaitReason,
    },
    /// The delivery is over.
    Done(Final),
}

/// What follows attempt `number` of a delivery that ended in `outcome`.
pub(crate) fn plan_next(policy: &Policy, number: u32, outcome: Outcome, random: f64) -> Next {
    match outcome {
        Outcome::Delivered => Next::Done(Final::Delivered),
        Outcome::Gone => Next::Done(Final::Gone),
        Outcome::GiveUp => Next::Done(Final::Dead),
        Outcome::Retry { .. } => match policy.schedule.delay(number + 1, random) {
            None => Next::Done(Final::Dead),
            Some(scheduled) => {
                let wait = next_wait(scheduled, outcome);
                let reason = if wait > scheduled {
                    WaitReason::RetryAfter
                } else {
                    WaitReason::Schedule
                };
                Next::Retry { wait, reason }
            }
        },
    }
}

/// The schedule's wait before the first attempt.
pub(crate) fn first_wait(policy: &Policy, random: f64) -> Duration {
    policy.schedule.delay(1, random).unwrap_or(Duration::ZERO)
}

/// How an attempt went: its record and what its answer means.
pub(crate) struct Tried {
    pub(crate) attempt: Attempt,
    pub(crate) outcome: Outcome,
}

/// Signs and sends one attempt and tells the breaker how it went through
/// `pass`. The caller has already waited and passed the breaker.
pub(crate) async fn attempt_once<T: Transport + ?Sized>(
    transport: &T,
    endpoint: &Endpoint,
    pass: Pass<'_>,
    policy: &Policy,
    delivery: (&str, &[u8]),
    number: u32,
    (waited, reason, held): (Duration, WaitReason, Duration),
) -> Tried {
    let (id, body) = delivery;
    let sent_at = policy.now();
    let started = tokio::time::Instant::now();
    let answer = match endpoint.signer.sign(id, sent_at, body) {
        Ok(signed) => {
            let headers: Vec<(String, String)> = signed
                .iter()
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect();
            let post = transport.post(&endpoint.url, &headers, body);
            match tokio::time::timeout(policy.attempt_timeout, post).await {
                Ok(answer) => answer,
                Err(_) => Err(format!(
                    "timed out after {} ms",
                    policy.attempt_timeout.as_millis()
                )),
            }
        }
        // An id the scheme cannot carry will never be deliverable; it says
        // nothing about the endpoint.
        Err(error) => {
            pass.release();
            return Tried {
                attempt: Attempt {
                    number,
                    sent_at,
                    waited,
                    reason,
                    held,
                    result: Err(format!("cannot sign: {error}")),
                    duration: Duration::ZERO,
                    excerpt: Vec::new(),
                },
                outcome: Outcome::GiveUp,
            };
        }
    };
    let duration = started.elapsed();
    let outcome = match &answer {
        Ok(response) => classify(
            Some(response.status),
            response.retry_after.as_deref(),
            sent_at,
            &policy.give_up_on,
        ),
        Err(_) => classify(None, None, sent_at, &policy.give_up_on),
    };
    if outcome == Outcome::Delivered {
        pass.succeeded();
    } else {
        pass.failed();
    }
    Tried {
        attempt: Attempt {
            number,
            sent_at,
            waited,
            reason,
            held,
            result: answer.as_ref().map(|r| r.status).map_err(Clone::clone),
            duration,
            excerpt: answer
                .map(|r| r.body.into_iter().take(EXCERPT_LEN).collect())
                .unwrap_or_default(),
        },
        outcome,
    }
}

/// Delivers `body` as event `id` to `endpoint` in this task: signs each
/// attempt anew (same id, fresh timestamp and signature), waits as the
/// schedule, `Retry-After` and the breaker say, and stops on 2xx, 410, a
/// give-up status, or when the attempts run out. `random` draws the jitter
/// from `[0, 1)`. Waiting uses tokio's clock, so tests can pause it.
///
/// This keeps nothing if the process stops; a
/// [`Dispatcher`](super::Dispatcher) on a durable store does.
pub async fn deliver<T: Transport>(
    transport: &T,
    endpoint: &Endpoint,
    policy: &Policy,
    id: &str,
    body: &[u8],
    random: impl FnMut() -> f64,
) -> DeliveryRecord {
    deliver_observed(transport, endpoint, policy, (id, body), random, |_| {}).await
}

/// [`deliver`], calling `on_attempt` with each attempt as soon as it is
/// answered (to print progress, say).
pub async fn deliver_observed<T: Transport>(
    transport: &T,
    endpoint: &Endpoint,
    policy: &Policy,
    (id, body): (&str, &[u8]),
    mut random: impl FnMut() -> f64,
    mut on_attempt: impl FnMut(&Attempt),
) -> DeliveryRecord {
    let mut attempts = Vec::new();
    let (mut waited, mut reason) = (first_wait(policy, random()), WaitReason::Schedule);
    let mut number = 1;
    loop {
        tokio::time::sleep(waited).await;
        let (pass, held) = wait_for_breaker(endpoint).await;
        let tried = attempt_once(
            transport,
            endpoint,
            pass,
            policy,
            (id, body),
            number,
            (waited, reason, held),
        )
        .await;
        on_attempt(&tried.attempt);
        attempts.push(tried.attempt);
        match plan_next(policy, number, tried.outcome, random()) {
            Next::Done(outcome) => {
                return DeliveryRecord {
                    id: id.to_owned(),
                    attempts,
                    outcome,
                };
            }
            Next::Retry { wait, reason: why } => (waited, reason) = (wait, why),
        }
        number += 1;
    }
}

/// Waits until the endpoint's breaker lets an attempt through; returns the
/// pass and how long that took.
async fn wait_for_breaker(endpoint: &Endpoint) -> (Pass<'_>, Duration) {
    let started = tokio::time::Instant::now();
    loop {
        // tokio's clock, so that a paused test clock drives the breaker too.
        let verdict = endpoint.try_breaker();
        match verdict {
            Ok(pass) => return (pass, started.elapsed()),
            Err(wait) => tokio::time::sleep(wait).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::sender::Jitter;
    use crate::verify::Scheme;

    /// How a test transport ends an attempt.
    #[derive(Clone, Copy)]
    enum Ending {
        Answer(u16),
        TransportError,
        Hang,
        Panic,
    }

    struct Ends(Ending);

    impl Transport for Ends {
        async fn post(
            &self,
            _: &str,
            _: &[(String, String)],
            _: &[u8],
        ) -> Result<Response, String> {
            match self.0 {
                Ending::Answer(status) => Ok(Response {
                    status,
                    retry_after: None,
                    body: Vec::new(),
                }),
                Ending::TransportError => Err("connection refused".to_owned()),
                Ending::Hang => {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Err("unreachable".to_owned())
                }
                Ending::Panic => panic!("a transport bug"),
            }
        }
    }

    fn policy() -> Policy {
        Policy::new(Schedule::Table {
            delays: vec![Duration::ZERO],
            jitter: Jitter::None,
        })
        .with_attempt_timeout(Duration::from_millis(20))
    }

    /// An endpoint whose breaker is half-open with one probe: it opened
    /// after one failure and its cool-down is over at once.
    fn half_open() -> Endpoint {
        let signer = Signer::new(
            Scheme::standard_webhooks(),
            ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        )
        .unwrap();
        let endpoint = Endpoint::new("https://receiver.example", signer).with_breaker(
            Breaker::new()
                .with_failure_threshold(1)
                .with_cool_down(Duration::ZERO)
                .with_probes(1),
        );
        endpoint.try_breaker().unwrap().failed();
        endpoint
    }

    /// Sends the half-open breaker's one probe as event `id` over
    /// `transport` (in its own task, which may panic), and says whether a
    /// probe is free again afterwards.
    async fn probe_comes_back(ending: Ending, id: &str) -> bool {
        let endpoint = Arc::new(half_open());
        let pass = endpoint.try_breaker().expect("the probe");
        assert!(endpoint.try_breaker().is_err(), "one probe at a time");
        pass.release();
        let probing = Arc::clone(&endpoint);
        let id = id.to_owned();
        let ended = tokio::spawn(async move {
            let pass = probing.try_breaker().expect("the probe");
            let policy = policy();
            attempt_once(
                &Ends(ending),
                &probing,
                pass,
                &policy,
                (&id, b"{}"),
                1,
                (Duration::ZERO, WaitReason::Schedule, Duration::ZERO),
            )
            .await
        })
        .await;
        assert_eq!(ended.is_err(), matches!(ending, Ending::Panic));
        endpoint.try_breaker().is_ok()
    }

    #[tokio::test]
    async fn a_probe_that_cannot_be_signed_is_given_back() {
        assert!(probe_comes_back(Ending::Answer(200), "two words").await);
    }

    #[tokio::test]
    async fn a_probe_whose_transport_panics_counts_as_failed() {
        assert!(probe_comes_back(Ending::Panic, "msg_1").await);
    }

    #[tokio::test]
    async fn a_probe_that_times_out_counts_as_failed() {
        assert!(probe_comes_back(Ending::Hang, "msg_1").await);
    }

    #[tokio::test]
    async fn a_probe_without_an_answer_counts_as_failed() {
        assert!(probe_comes_back(Ending::TransportError, "msg_1").await);
    }

    #[tokio::test]
    async fn a_probe_answered_with_an_error_status_counts_as_failed() {
        assert!(probe_comes_back(Ending::Answer(500), "msg_1").await);
    }

    #[tokio::test]
    async fn a_successful_probe_closes_the_breaker() {
        let endpoint = half_open();
        let pass = endpoint.try_breaker().unwrap();
        let policy = policy();
        attempt_once(
            &Ends(Ending::Answer(204)),
            &endpoint,
            pass,
            &policy,
            ("msg_1", b"{}"),
            1,
            (Duration::ZERO, WaitReason::Schedule, Duration::ZERO),
        )
        .await;
        assert!(!endpoint.breaker_open());
        assert_eq!(
            endpoint
                .breaker()
                .state(tokio::time::Instant::now().into_std()),
            super::super::breaker::BreakerState::Closed
        );
    }
}
