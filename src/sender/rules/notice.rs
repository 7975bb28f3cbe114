//! Notices: what a [`Dispatcher`](crate::sender::Dispatcher) tells an endpoint's
//! owner ([`Notice`]), when a policy wants them ([`Notices`], plain data),
//! and the pure limiter that keeps them to one per interval ([`Limiter`]).

use std::time::{Duration, SystemTime};

use super::states::DisableReason;

/// When a policy tells the owner of an endpoint's trouble: after it has
/// failed for `failing_for` without a success (once per such stretch), when
/// a delivery runs out of attempts, when the endpoint is disabled and when
/// it is enabled again; never more than one notice per endpoint every
/// `at_most_every`. Notices over the limit are dropped.
///
/// ```
/// use std::time::Duration;
/// use hooklatch::sender::Policy;
/// use hooklatch::sender::rules::Notices;
///
/// let hour = Duration::from_secs(3600);
/// let policy = Policy::svix().with_notices(Some(Notices::new(Some(hour), hour)));
/// assert_eq!(policy.notices().unwrap().at_most_every(), hour);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Notices {
    failing_for: Option<Duration>,
    exhausted: bool,
    at_most_every: Duration,
}

impl Notices {
    /// Notices after `failing_for` of failure (`None`: not for that), on
    /// exhaustion, disable and enable, at most one every `at_most_every`.
    pub fn new(failing_for: Option<Duration>, at_most_every: Duration) -> Self {
        Self {
            failing_for,
            exhausted: true,
            at_most_every,
        }
    }

    /// Whether a delivery running out of attempts is told. Defaults to
    /// true.
    #[must_use]
    pub fn with_exhausted(mut self, tell: bool) -> Self {
        self.exhausted = tell;
        self
    }

    /// Whether a delivery running out of attempts is told.
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }

    /// How long an endpoint fails before the owner is told.
    pub fn failing_for(&self) -> Option<Duration> {
        self.failing_for
    }

    /// The shortest time between two notices for one endpoint.
    pub fn at_most_every(&self) -> Duration {
        self.at_most_every
    }
}

/// Something an endpoint's owner is told.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Notice {
    /// The endpoint's name.
    pub endpoint: String,
    /// When (by the policy's clock).
    pub at: SystemTime,
    /// What happened.
    pub kind: NoticeKind,
}

/// What a [`Notice`] is about.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoticeKind {
    /// The endpoint has failed for this long without a success.
    FailingFor(Duration),
    /// The delivery with this id ran out of attempts.
    Exhausted {
        /// The webhook id.
        id: String,
    },
    /// The endpoint was disabled.
    Disabled(DisableReason),
    /// The endpoint was enabled again.
    Enabled,
}

/// One endpoint's notice state: when the last notice went out, and
/// whether this stretch of failure has been told.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Limiter {
    last: Option<SystemTime>,
    failing_told: bool,
}

impl Limiter {
    /// Whether a notice may go out at `now` under `notices`; if so, it
    /// counts as sent.
    pub(crate) fn allow(&mut self, notices: &Notices, now: SystemTime) -> bool {
        let free = self.last.is_none_or(|last| {
            now.duration_since(last).unwrap_or_default() >= notices.at_most_every
        });
        if free {
            self.last = Some(now);
        }
        free
    }

    /// The notice a failure at `now` calls for, if it has failed since
    /// `since` for the policy's `failing_for` and that was not told yet.
    pub(crate) fn failing(
        &mut self,
        notices: &Notices,
        since: SystemTime,
        now: SystemTime,
    ) -> Option<NoticeKind> {
        let after = notices.failing_for?;
        let failed = now.duration_since(since).unwrap_or_default();
        if self.failing_told || failed < after || !self.allow(notices, now) {
            return None;
        }
        self.failing_told = true;
        Some(NoticeKind::FailingFor(failed))
    }

    /// A success or an enable ends the stretch of failure.
    pub(crate) fn recovered(&mut self) {
        self.failing_told = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_notice_per_interval_and_one_per_stretch_of_failure() {
        let hour = Duration::from_secs(3600);
        let notices = Notices::new(Some(hour), hour);
        let start = SystemTime::UNIX_EPOCH;
        let mut limiter = Limiter::default();
        assert_eq!(limiter.failing(&notices, start, start + hour / 2), None);
        assert_eq!(
            limiter.failing(&notices, start, start + hour),
            Some(NoticeKind::FailingFor(hour))
        );
        assert_eq!(
            limiter.failing(&notices, start, start + 3 * hour),
            None,
            "told once"
        );
        assert!(!limiter.allow(&notices, start + hour + hour / 2));
        assert!(limiter.allow(&notices, start + 2 * hour));
        limiter.recovered();
        assert_eq!(
            limiter.failing(&notices, start + 2 * hour, start + 4 * hour),
            Some(NoticeKind::FailingFor(2 * hour))
        );
    }
}
