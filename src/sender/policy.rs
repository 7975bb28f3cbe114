//! [`Policy`]: the rules of a delivery, and the presets real providers
//! publish.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::breaker::Breaker;
use super::schedule::Schedule;
use crate::verify::{Clock, SystemClock};

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
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct Policy {
    schedule: Schedule,
    give_up_on: Vec<u16>,
    // The clock is the process's own: a stored policy reads the system
    // clock.
    #[serde(skip, default = "system_clock")]
    clock: Arc<dyn Clock>,
    attempt_timeout: Duration,
    connect_timeout: Duration,
    breaker: Breaker,
    concurrency: usize,
    disable_after: Option<Duration>,
}

fn system_clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

const DAY: Duration = Duration::from_secs(24 * 3600);

impl Policy {
    /// Attempts on `schedule`; every non-2xx status except 410 is retried;
    /// the other settings are the defaults.
    pub fn new(schedule: Schedule) -> Self {
        Self {
            schedule,
            give_up_on: Vec::new(),
            clock: Arc::new(SystemClock),
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
        self.clock = Arc::new(clock);
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

    /// This policy with its limits applied as the `with_` methods apply
    /// them, for one read back from a store.
    pub(crate) fn normalized(self) -> Self {
        let (concurrency, breaker) = (self.concurrency, self.breaker.clone().normalized());
        self.with_concurrency(concurrency).with_breaker(breaker)
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
