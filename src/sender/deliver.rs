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

    fn breaker(&self) -> std::sync::MutexGuard<'_, Breaker> {
        self.breaker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Why the loop waited before an attempt.
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
    /// 1 for the first attempt.
    pub number: u32,
    /// When it was signed and sent.
    pub sent_at: SystemTime,
    /// How long the loop waited before it (schedule or `Retry-After`),
    /// and why; time spent waiting for an open breaker comes on top.
    pub waited: Duration,
    /// Why it waited that long.
    pub reason: WaitReason,
    /// How long the breaker held it back.
    pub held_by_breaker: Duration,
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

/// The rules of a delivery.
#[derive(Clone)]
pub struct Policy {
    schedule: Schedule,
    give_up_on: Vec<u16>,
    clock: std::sync::Arc<dyn Clock>,
}

impl Policy {
    /// Attempts on `schedule`; every non-2xx status except 410 is retried.
    pub fn new(schedule: Schedule) -> Self {
        Self {
            schedule,
            give_up_on: Vec::new(),
            clock: std::sync::Arc::new(SystemClock),
        }
    }

    /// Ends the delivery at once on these statuses (say 400 and 422).
    #[must_use]
    pub fn with_give_up_on(mut self, statuses: &[u16]) -> Self {
        self.give_up_on = statuses.to_vec();
        self
    }

    /// Uses `clock` for the signed timestamps. Defaults to the system clock.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = std::sync::Arc::new(clock);
        self
    }
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("schedule", &self.schedule)
            .field("give_up_on", &self.give_up_on)
            .finish_non_exhaustive()
    }
}

/// Delivers `body` as event `id` to `endpoint`: signs each attempt anew
/// (same id, fresh timestamp and signature), waits as the schedule,
/// `Retry-After` and the breaker say, and stops on 2xx, 410, a give-up
/// status, or when the attempts run out. `random` draws the jitter from
/// `[0, 1)`. Waiting uses tokio's clock, so tests can pause it.
pub async fn deliver<T: Transport>(
    transport: &T,
    endpoint: &Endpoint,
    policy: &Policy,
    id: &str,
    body: &[u8],
    mut random: impl FnMut() -> f64,
) -> DeliveryRecord {
    let mut attempts = Vec::new();
    let mut last = None;
    for number in 1..=policy.schedule.attempts() {
        let scheduled = policy
            .schedule
            .delay(number, random())
            .unwrap_or(Duration::ZERO);
        let waited = last.map_or(scheduled, |outcome| next_wait(scheduled, outcome));
        let reason = if waited > scheduled {
            WaitReason::RetryAfter
        } else {
            WaitReason::Schedule
        };
        tokio::time::sleep(waited).await;
        let held_by_breaker = wait_for_breaker(endpoint).await;

        let sent_at = policy.clock.now();
        let started = tokio::time::Instant::now();
        let headers: Vec<(String, String)> = match endpoint.signer.sign(id, sent_at, body) {
            Ok(signed) => signed
                .iter()
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect(),
            Err(error) => {
                // An id the scheme cannot carry will never be deliverable.
                attempts.push(Attempt {
                    number,
                    sent_at,
                    waited,
                    reason,
                    held_by_breaker,
                    result: Err(format!("cannot sign: {error}")),
                    duration: Duration::ZERO,
                    excerpt: Vec::new(),
                });
                return DeliveryRecord {
                    id: id.to_owned(),
                    attempts,
                    outcome: Final::Dead,
                };
            }
        };
        let answer = transport.post(&endpoint.url, &headers, body).await;
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
        {
            let now = tokio::time::Instant::now().into_std();
            let mut breaker = endpoint.breaker();
            if outcome == Outcome::Delivered {
                breaker.on_success(now);
            } else {
                breaker.on_failure(now);
            }
        }
        attempts.push(Attempt {
            number,
            sent_at,
            waited,
            reason,
            held_by_breaker,
            result: answer.as_ref().map(|r| r.status).map_err(Clone::clone),
            duration,
            excerpt: answer
                .map(|r| r.body.into_iter().take(EXCERPT_LEN).collect())
                .unwrap_or_default(),
        });
        let finished = match outcome {
            Outcome::Delivered => Some(Final::Delivered),
            Outcome::Gone => Some(Final::Gone),
            Outcome::GiveUp => Some(Final::Dead),
            Outcome::Retry { .. } => None,
        };
        if let Some(outcome) = finished {
            return DeliveryRecord {
                id: id.to_owned(),
                attempts,
                outcome,
            };
        }
        last = Some(outcome);
    }
    DeliveryRecord {
        id: id.to_owned(),
        attempts,
        outcome: Final::Dead,
    }
}

/// Waits until the endpoint's breaker lets an attempt through; returns how
/// long that took.
async fn wait_for_breaker(endpoint: &Endpoint) -> Duration {
    let started = tokio::time::Instant::now();
    loop {
        // tokio's clock, so that a paused test clock drives the breaker too.
        let verdict = endpoint
            .breaker()
            .try_acquire(tokio::time::Instant::now().into_std());
        match verdict {
            Ok(()) => return started.elapsed(),
            Err(wait) => tokio::time::sleep(wait).await,
        }
    }
}
