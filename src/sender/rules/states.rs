//! What the rules decide about, as plain data: how a delivery ended,
//! where it stands, an endpoint's health, and why an endpoint was
//! disabled.

use std::time::{Duration, SystemTime};

/// How a delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Final {
    /// A 2xx answer.
    Delivered,
    /// An answer the policy disables the endpoint on (410 Gone by
    /// default): the endpoint should be disabled.
    Gone,
    /// Every attempt failed, or the status was one not to retry: the
    /// delivery is dead and can be replayed.
    Dead,
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeliveryState {
    /// Waiting for its next attempt, or in one.
    Pending,
    /// A 2xx answer.
    Delivered,
    /// The endpoint answered 410 Gone (or another answer its policy
    /// disables on).
    Gone,
    /// Out of attempts, or answered with a give-up status; it can be
    /// replayed.
    Dead,
}

impl DeliveryState {
    /// The state a delivery that ended in `outcome` is in.
    pub fn ended(outcome: Final) -> Self {
        match outcome {
            Final::Delivered => Self::Delivered,
            Final::Gone => Self::Gone,
            Final::Dead => Self::Dead,
        }
    }
}

/// An endpoint's health, shared through the store by every dispatcher on
/// it, so that a restart neither forgets how long it has been failing nor
/// re-enables an endpoint that was disabled, and a disable or an
/// [enable](crate::sender::Dispatcher::enable) by one dispatcher reaches all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EndpointHealth {
    /// When its first failure since the last success was.
    pub failing_since: Option<SystemTime>,
    /// Why it is disabled, if it is.
    pub disabled: Option<DisableReason>,
}

impl EndpointHealth {
    /// This health with `change` merged in: a failure keeps the earlier of
    /// `failing_since` and its own time, a success clears it, and neither
    /// touches a disable. What [`DeliveryStore::finish`](crate::sender::outbox::DeliveryStore::finish)
    /// saves; a store of your own calls it rather than merging by hand.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use hooklatch::sender::outbox::{EndpointHealth, HealthChange};
    ///
    /// let (early, late) = (SystemTime::UNIX_EPOCH, SystemTime::now());
    /// let failing = EndpointHealth::default().merged(HealthChange::Failed { at: late });
    /// let failing = failing.merged(HealthChange::Failed { at: early });
    /// assert_eq!(failing.failing_since, Some(early));
    /// assert_eq!(failing.merged(HealthChange::Succeeded).failing_since, None);
    /// ```
    #[must_use]
    pub fn merged(self, change: HealthChange) -> Self {
        let failing_since = match change {
            HealthChange::Succeeded => None,
            HealthChange::Failed { at } => {
                Some(self.failing_since.map_or(at, |since| since.min(at)))
            }
        };
        Self {
            failing_since,
            ..self
        }
    }
}

/// What an attempt shows of an endpoint's health, merged into its saved
/// health by [`DeliveryStore::finish`](crate::sender::outbox::DeliveryStore::finish).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HealthChange {
    /// A 2xx answer: the endpoint is no longer failing.
    Succeeded,
    /// A failed attempt sent at `at`.
    Failed {
        /// When the attempt was sent.
        at: SystemTime,
    },
}
/// Why an endpoint was disabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DisableReason {
    /// It answered 410 Gone, or another answer its policy disables on
    /// ([`Handling::Disable`](crate::sender::rules::Handling::Disable)).
    Gone,
    /// It has not succeeded for this long (the policy's
    /// [`disable_after`](crate::sender::Policy::disable_after)).
    NoSuccessFor(Duration),
    /// An operator disabled it ([`Dispatcher::disable`](crate::sender::Dispatcher::disable),
    /// the console, `hooklatch outbox disable`).
    Manual,
}
