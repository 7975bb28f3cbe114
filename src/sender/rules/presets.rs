//! The named [`Policy`] presets: complete configurations of delivery rules
//! real webhook senders publish, each described by what it does.
//! `tests/presets.rs` drives each through the cases its rules name.

use std::time::Duration;

use super::answers::{Answers, Handling};
use super::breaker::Breaker;
use super::notice::Notices;
use super::policy::{DAY, Policy};
use super::retention::Retention;
use super::schedule::{Jitter, Schedule};

const HOUR: Duration = Duration::from_secs(3600);

impl Policy {
    /// Svix's table ([`Schedule::svix`]) with the defaults.
    pub fn svix() -> Self {
        Self::new(Schedule::svix())
    }

    /// Svix's table without jitter (8 attempts,
    /// 0, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h); 10 deliveries at once
    /// per endpoint; after 5 consecutive failures nothing for 30 s, then
    /// one probe; 15 s per attempt, only a 2xx succeeds, **410 is retried
    /// as an ordinary failure**; the first 1,024 bytes of the answer kept;
    /// disabled after 5 days without success; the owner told after 1 h of
    /// failure, when a delivery runs out of attempts and on disable, at
    /// most once an hour per endpoint; an `Idempotency-Key` on send
    /// remembered for 24 h ([`Dispatcher::send_with_key`](crate::sender::Dispatcher::send_with_key)).
    ///
    /// Signing with both keys for 24 h after a rotation is the signer's
    /// part: [`Signer::with_windows`](crate::verify::Signer::with_windows).
    pub fn svix_table_without_jitter() -> Self {
        Self::new(Schedule::svix().with_jitter(Jitter::None))
            .with_breaker(Breaker::new().with_probes(1))
            .with_answers(Answers::default().with_status(410, Handling::Retry))
            .with_notices(Some(Notices::new(Some(HOUR), HOUR)))
            .with_idempotency_window(Some(DAY))
    }

    /// Nine attempts over three days: [`Schedule::nine_attempts_over_three_days`] (0, 1 min,
    /// 5 min, 30 min, 2 h, 6 h, 12 h, 24 h, 24 h, ±10%); success is a 2xx
    /// within 10 s; at most 4 KB of the answer read; 410 stops the
    /// delivery and disables the endpoint; 429 and 503 wait the longer of
    /// the schedule and `Retry-After` (at most 1 h); 3xx and other 4xx are
    /// retried; a private or internal address stops the delivery at once;
    /// one failure pauses the endpoint's other deliveries until its next
    /// attempt; disabled after 3 days without success, test deliveries
    /// (ids starting `test_`) not counted; enabling it again sends the
    /// stopped deliveries once more; the history (delivered, gone and dead
    /// deliveries) kept 30 days ([`Dispatcher::purge_by_policy`](crate::sender::Dispatcher::purge_by_policy)).
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
    pub fn nine_attempts_over_three_days() -> Self {
        Self::new(Schedule::nine_attempts_over_three_days())
            .with_attempt_timeout(Duration::from_secs(10))
            .with_excerpt_len(4096)
            .with_answers(Answers::default().with_refused(Handling::GiveUp))
            .with_pause_on_failure(true)
            .with_replay_on_enable(true)
            .with_test_prefix(Some("test_"))
            .with_disable_after(Some(3 * DAY))
            .with_retention(Retention::ended_kept_for(30 * DAY))
    }

    /// One attempt and five retries over ten hours: [`Schedule::five_retries_over_ten_hours`] (one attempt
    /// and 5 retries over 10.6 h, no jitter); 5 s to connect and 30 s to
    /// read (35 s per attempt); only a 2xx succeeds, 3xx is a failure; a
    /// breaker that lets up to 3 probes through after its cool-down,
    /// closes after 3 successes and opens again on any failure; dead
    /// letters kept 30 days, then deleted ([`Dispatcher::purge_by_policy`](crate::sender::Dispatcher::purge_by_policy)).
    pub fn five_retries_over_ten_hours() -> Self {
        Self::new(Schedule::five_retries_over_ten_hours())
            .with_connect_timeout(Duration::from_secs(5))
            .with_attempt_timeout(Duration::from_secs(35))
            .with_breaker(Breaker::new().with_probes(3))
            .with_retention(Retention::KEEP_ALL.with_dead(Some(30 * DAY)))
    }

    /// Seven attempts over a day: [`Schedule::seven_attempts_over_a_day`] (0, 30 s, 2 min,
    /// 10 min, 1 h, 6 h, 24 h, each up to 10% later, never earlier); 10 s
    /// per attempt; 302 is a failure; a 512-byte excerpt; disabled after 7
    /// days of failure with a notice; the backlog (pending deliveries and
    /// those that ran out of attempts) delivered after it is enabled
    /// again; every delivery, the backlog included, kept 14 days
    /// ([`Dispatcher::purge_by_policy`](crate::sender::Dispatcher::purge_by_policy)).
    ///
    /// Several `v1=` signatures during a 30-day overlap are the signer's
    /// part: [`Signer::with_windows`](crate::verify::Signer::with_windows).
    pub fn seven_attempts_over_a_day() -> Self {
        Self::new(Schedule::seven_attempts_over_a_day())
            .with_attempt_timeout(Duration::from_secs(10))
            .with_excerpt_len(512)
            .with_disable_after(Some(7 * DAY))
            .with_notices(Some(
                Notices::new(None, Duration::ZERO).with_exhausted(false),
            ))
            .with_replay_on_enable(true)
            .with_retention(Retention::ended_kept_for(14 * DAY).with_pending(Some(14 * DAY)))
    }

    /// Exponential to an hour: [`Schedule::exponential_to_an_hour`] (1 s
    /// doubling to a 1 h cap, ±25%, `attempts` attempts); only network errors,
    /// 5xx and 429 are retried (3xx and other 4xx, 410 included, end the
    /// delivery); 30 s per attempt; 1,024 bytes of the answer kept; a
    /// breaker that opens for 24 h after 20 consecutive failures; 10
    /// deliveries at once per endpoint; bodies up to 256 KB; every ended
    /// delivery kept (for a replay) 30 days ([`Dispatcher::purge_by_policy`](crate::sender::Dispatcher::purge_by_policy)).
    pub fn exponential_to_an_hour(attempts: u32) -> Self {
        Self::new(Schedule::exponential_to_an_hour(attempts))
            .with_breaker(
                Breaker::new()
                    .with_failure_threshold(20)
                    .with_cool_down(DAY),
            )
            .with_answers(
                Answers::default()
                    .with_redirects(Handling::GiveUp)
                    .with_client_errors(Handling::GiveUp)
                    .with_status(410, Handling::GiveUp),
            )
            .with_attempt_timeout(Duration::from_secs(30))
            .with_concurrency(10)
            .with_body_limit(Some(256 * 1024))
            .with_retention(Retention::ended_kept_for(30 * DAY))
    }
}
