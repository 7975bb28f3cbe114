//! [`Policy`]: the rules of a delivery, and the presets real providers
//! publish.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::answers::{Answers, Handling};
use super::breaker::Breaker;
use super::notice::Notices;
use super::retention::Retention;
use super::schedule::Schedule;
use crate::verify::Clock;

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
    answers: Answers,
    // A clock set with `with_clock`; none reads the system clock, or in a
    // dispatcher the store's. The clock is the process's own: a stored
    // policy has none.
    #[serde(skip)]
    clock: Option<Arc<dyn Clock>>,
    attempt_timeout: Duration,
    connect_timeout: Duration,
    breaker: Breaker,
    concurrency: usize,
    disable_after: Option<Duration>,
    excerpt_len: usize,
    pause_on_failure: bool,
    notices: Option<Notices>,
    max_body: Option<usize>,
    replay_on_enable: bool,
    test_prefix: Option<String>,
    #[serde(default)]
    idempotency_window: Option<Duration>,
    #[serde(default)]
    retention: Retention,
}

/// How much of a response body an attempt record keeps.
pub const EXCERPT_LEN: usize = 1024;

/// The most of an answer's body a policy keeps: 64 KiB.
pub const MAX_EXCERPT_LEN: usize = 64 * 1024;

pub(super) const DAY: Duration = Duration::from_secs(24 * 3600);

impl Policy {
    /// Attempts on `schedule`; every non-2xx status except 410 is retried;
    /// the other settings are the defaults.
    pub fn new(schedule: Schedule) -> Self {
        Self {
            schedule,
            answers: Answers::default(),
            clock: None,
            attempt_timeout: Duration::from_secs(15),
            connect_timeout: Duration::from_secs(5),
            breaker: Breaker::new(),
            concurrency: 10,
            disable_after: Some(5 * DAY),
            excerpt_len: EXCERPT_LEN,
            pause_on_failure: false,
            notices: None,
            max_body: None,
            replay_on_enable: false,
            test_prefix: None,
            idempotency_window: None,
            retention: Retention::KEEP_ALL,
        }
    }

    /// Ends the delivery at once on these statuses (say 400 and 422): a
    /// shorthand for [`Answers::with_status`] with [`Handling::GiveUp`].
    #[must_use]
    pub fn with_give_up_on(mut self, statuses: &[u16]) -> Self {
        for status in statuses {
            self.answers = self.answers.with_status(*status, Handling::GiveUp);
        }
        self
    }

    /// Handles answers so: which statuses are retried, end the delivery or
    /// disable the endpoint, and the cap on `Retry-After`. Defaults to
    /// [`Answers::default`] (retry everything but 410, which disables).
    #[must_use]
    pub fn with_answers(mut self, answers: Answers) -> Self {
        self.answers = answers;
        self
    }

    /// Keeps the first `bytes` of each answer's body in the attempt's
    /// record, at most [`MAX_EXCERPT_LEN`] (64 KiB, so a receiver cannot
    /// make the sender hold much); `HttpTransport::for_policy` reads no
    /// more than that. Defaults to [`EXCERPT_LEN`] (1,024).
    ///
    /// ```
    /// use hooklatch::sender::Policy;
    /// use hooklatch::sender::rules::MAX_EXCERPT_LEN;
    ///
    /// assert_eq!(Policy::svix().with_excerpt_len(4096).excerpt_len(), 4096);
    /// assert_eq!(Policy::svix().with_excerpt_len(usize::MAX).excerpt_len(), MAX_EXCERPT_LEN);
    /// ```
    #[must_use]
    pub fn with_excerpt_len(mut self, bytes: usize) -> Self {
        self.excerpt_len = bytes.min(MAX_EXCERPT_LEN);
        self
    }

    /// When an attempt fails, a [`Dispatcher`](crate::sender::Dispatcher) sends
    /// nothing else to the endpoint until that delivery's next attempt is
    /// due; then one delivery (the earliest due) goes out, and its success
    /// resumes the endpoint while its failure pauses it again. The
    /// deliveries held back are not attempted, so their attempts are not
    /// used up. Per dispatcher, like the breaker. Defaults to off.
    #[must_use]
    pub fn with_pause_on_failure(mut self, pause: bool) -> Self {
        self.pause_on_failure = pause;
        self
    }

    /// Tells a [`Dispatcher`](crate::sender::Dispatcher)'s
    /// [`on_notice`](crate::sender::Dispatcher::on_notice) hook of the endpoint's
    /// trouble, at most as often as `notices` allows. Defaults to none.
    #[must_use]
    pub fn with_notices(mut self, notices: Option<Notices>) -> Self {
        self.notices = notices;
        self
    }

    /// Refuses to send a body longer than `bytes`
    /// ([`DispatchError::TooLarge`](crate::sender::DispatchError::TooLarge)).
    /// Defaults to no limit.
    #[must_use]
    pub fn with_body_limit(mut self, bytes: Option<usize>) -> Self {
        self.max_body = bytes;
        self
    }

    /// Uses `clock` for the signed timestamps, due times, leases, windows
    /// and disables, as it is: for tests and drills that run time faster.
    ///
    /// Without one a policy reads the system clock, and in a
    /// [`Dispatcher`](crate::sender::Dispatcher) the store's clock (its
    /// [`store_time`](crate::sender::outbox::DeliveryStore::store_time), read every few
    /// seconds), so that dispatchers on hosts whose clocks disagree still
    /// agree on when a lease ends and a delivery is due.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
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
    /// [`Dispatcher`](crate::sender::Dispatcher).
    #[must_use]
    pub fn with_breaker(mut self, breaker: Breaker) -> Self {
        self.breaker = breaker;
        self
    }

    /// How many deliveries a [`Dispatcher`](crate::sender::Dispatcher) runs at once
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

    /// Disables an endpoint in a [`Dispatcher`](crate::sender::Dispatcher) once it
    /// has failed for this long without a success; `None` never does.
    /// Defaults to 5 days.
    #[must_use]
    pub fn with_disable_after(mut self, after: Option<Duration>) -> Self {
        self.disable_after = after;
        self
    }

    /// Makes [`Dispatcher::enable`](crate::sender::Dispatcher::enable) replay the
    /// endpoint's dead and gone deliveries too, oldest first, so an owner
    /// who fixed the endpoint gets the backlog its outage used up, not
    /// only the deliveries still pending. Defaults to off.
    #[must_use]
    pub fn with_replay_on_enable(mut self, replay: bool) -> Self {
        self.replay_on_enable = replay;
        self
    }

    /// Marks deliveries whose id starts with `prefix` as test deliveries
    /// (sent with [`Dispatcher::send_test`](crate::sender::Dispatcher::send_test)):
    /// they are retried like any other, but neither their failures nor
    /// their successes count towards disabling the endpoint, a 410 to one
    /// does not disable it, and they raise no notices. The mark is in the
    /// id, so every dispatcher on the store and every restart sees it.
    /// Defaults to none.
    #[must_use]
    pub fn with_test_prefix(mut self, prefix: Option<&str>) -> Self {
        self.test_prefix = prefix.map(str::to_owned);
        self
    }

    /// Remembers the idempotency key of a
    /// [`Dispatcher::send_with_key`](crate::sender::Dispatcher::send_with_key) for
    /// `window`: within it, a send with the same key to the endpoint
    /// enqueues nothing and reports the first delivery's id; after it, the
    /// key is free again. `None` refuses keyed sends. Defaults to none.
    #[must_use]
    pub fn with_idempotency_window(mut self, window: Option<Duration>) -> Self {
        self.idempotency_window = window;
        self
    }

    /// How long the endpoint's deliveries are kept in each state, for
    /// [`Dispatcher::purge_by_policy`](crate::sender::Dispatcher::purge_by_policy).
    /// Defaults to [`Retention::KEEP_ALL`].
    #[must_use]
    pub fn with_retention(mut self, retention: Retention) -> Self {
        self.retention = retention;
        self
    }

    /// How long an idempotency key is remembered.
    pub fn idempotency_window(&self) -> Option<Duration> {
        self.idempotency_window
    }

    /// How long deliveries are kept in each state.
    pub fn retention(&self) -> &Retention {
        &self.retention
    }

    /// The id prefix that marks a test delivery.
    pub fn test_prefix(&self) -> Option<&str> {
        self.test_prefix.as_deref()
    }

    /// Whether the delivery `id` is a test delivery.
    pub(crate) fn is_test(&self, id: &str) -> bool {
        self.test_prefix()
            .is_some_and(|prefix| id.starts_with(prefix))
    }

    /// Whether enabling the endpoint replays its dead and gone deliveries.
    pub fn replay_on_enable(&self) -> bool {
        self.replay_on_enable
    }

    /// The retry schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// What each answer means.
    pub fn answers(&self) -> &Answers {
        &self.answers
    }

    /// How many bytes of an answer's body are kept.
    pub fn excerpt_len(&self) -> usize {
        self.excerpt_len
    }

    /// Whether a failure pauses the endpoint until that delivery's next
    /// attempt.
    pub fn pause_on_failure(&self) -> bool {
        self.pause_on_failure
    }

    /// When the owner is told of the endpoint's trouble.
    pub fn notices(&self) -> Option<&Notices> {
        self.notices.as_ref()
    }

    /// The longest body sent.
    pub fn body_limit(&self) -> Option<usize> {
        self.max_body
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
        let excerpt_len = self.excerpt_len;
        self.with_concurrency(concurrency)
            .with_breaker(breaker)
            .with_excerpt_len(excerpt_len)
    }

    pub(crate) fn now(&self) -> SystemTime {
        self.clock
            .as_ref()
            .map_or_else(SystemTime::now, |clock| clock.now())
    }

    /// Whether the policy has a clock of its own.
    pub(crate) fn has_clock(&self) -> bool {
        self.clock.is_some()
    }

    /// This policy reading `clock`, unless it has a clock of its own.
    pub(crate) fn or_clock(mut self, clock: &Arc<dyn Clock>) -> Self {
        self.clock.get_or_insert_with(|| Arc::clone(clock));
        self
    }
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("schedule", &self.schedule)
            .field("answers", &self.answers)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("breaker", &self.breaker)
            .field("concurrency", &self.concurrency)
            .field("disable_after", &self.disable_after)
            .field("excerpt_len", &self.excerpt_len)
            .field("pause_on_failure", &self.pause_on_failure)
            .field("notices", &self.notices)
            .field("max_body", &self.max_body)
            .field("replay_on_enable", &self.replay_on_enable)
            .field("test_prefix", &self.test_prefix)
            .field("idempotency_window", &self.idempotency_window)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}
