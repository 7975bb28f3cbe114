//! How stores other than memory keep states, wait reasons, times and
//! endpoint health: as integers.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{
    DeliveryState, DisableReason, Due, EndpointHealth, HealthChange, StoredDelivery, Taken,
};
use crate::sender::rules::{Attempt, AttemptError, Step, WaitReason};
use crate::store::{millis, unix_millis};
use crate::trace::TraceParent;

impl DeliveryState {
    /// The number stores keep for it.
    pub(crate) fn code(self) -> i64 {
        match self {
            Self::Pending => 0,
            Self::Delivered => 1,
            Self::Gone => 2,
            Self::Dead => 3,
        }
    }

    pub(crate) fn from_code(code: i64) -> Self {
        match code {
            1 => Self::Delivered,
            2 => Self::Gone,
            3 => Self::Dead,
            _ => Self::Pending,
        }
    }
}

/// The time `millis` after the Unix epoch.
pub(crate) fn from_millis(millis: i64) -> SystemTime {
    let offset = Duration::from_millis(millis.unsigned_abs());
    if millis >= 0 {
        UNIX_EPOCH.checked_add(offset)
    } else {
        UNIX_EPOCH.checked_sub(offset)
    }
    .unwrap_or(UNIX_EPOCH)
}

pub(crate) fn reason_code(reason: WaitReason) -> i64 {
    match reason {
        WaitReason::Schedule => 0,
        WaitReason::RetryAfter => 1,
    }
}

pub(crate) fn reason_from_code(code: i64) -> WaitReason {
    if code == 1 {
        WaitReason::RetryAfter
    } else {
        WaitReason::Schedule
    }
}

/// An endpoint's health as stored fields: failing since (ms), disabled
/// (NULL, 1 gone, 2 no success, 3 by an operator), and the no-success
/// limit (ms).
pub(crate) type HealthFields = (Option<i64>, Option<i64>, Option<i64>);

/// An endpoint's health as [`HealthFields`].
pub(crate) fn health_fields(health: EndpointHealth) -> HealthFields {
    let (disabled, after) = match health.disabled {
        None => (None, None),
        Some(DisableReason::Gone) => (Some(1), None),
        Some(DisableReason::NoSuccessFor(after)) => (Some(2), Some(millis(after))),
        Some(DisableReason::Manual) => (Some(3), None),
    };
    (health.failing_since.map(unix_millis), disabled, after)
}

/// The inverse of [`health_fields`].
pub(crate) fn health_from_fields((failing_since, disabled, after): HealthFields) -> EndpointHealth {
    EndpointHealth {
        failing_since: failing_since.map(from_millis),
        disabled: match disabled {
            None => None,
            Some(1) => Some(DisableReason::Gone),
            Some(3) => Some(DisableReason::Manual),
            Some(_) => Some(DisableReason::NoSuccessFor(Duration::from_millis(
                after.unwrap_or(0).unsigned_abs(),
            ))),
        },
    }
}

/// What a store writes for a health change: the failed attempt's time, or
/// none for a success.
pub(crate) fn failed_at(change: HealthChange) -> Option<i64> {
    match change {
        HealthChange::Succeeded => None,
        HealthChange::Failed { at } => Some(unix_millis(at)),
    }
}

/// A leased delivery as stored fields: id, body, tries, attempts, due at
/// (ms), waited (ms), the wait's reason code, enqueued at (ms) and the
/// trace it was sent in.
pub(crate) type TakenRow = (
    String,
    Vec<u8>,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    Option<String>,
);

/// A new delivery's trace as stored: its `traceparent`, or empty.
pub(crate) fn trace_text(delivery: &super::NewDelivery<'_>) -> String {
    delivery
        .trace()
        .map(|trace| trace.to_string())
        .unwrap_or_default()
}

/// What a take found: the endpoint's `health`, and the deliveries leased
/// under `token`, earliest due first.
pub(crate) fn due(
    endpoint: &str,
    token: &str,
    health: EndpointHealth,
    rows: impl IntoIterator<Item = TakenRow>,
) -> Due {
    let mut taken: Vec<Taken> = rows
        .into_iter()
        .map(
            |(id, body, tries, attempts, due_at, waited, reason, enqueued_at, trace)| Taken {
                endpoint: endpoint.to_owned(),
                id,
                body,
                tries: count(tries),
                attempts: count(attempts),
                due_at: from_millis(due_at),
                enqueued_at: from_millis(enqueued_at),
                waited: duration_ms(waited),
                reason: reason_from_code(reason),
                token: token.to_owned(),
                // Stored by this library; anything else is dropped.
                trace: trace.and_then(|text| TraceParent::parse(&text).ok()),
            },
        )
        .collect();
    taken.sort_by_key(|delivery| delivery.due_at);
    Due { health, taken }
}

/// A stored count as a `u32`.
pub(crate) fn count(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

/// Stored milliseconds as a duration.
pub(crate) fn duration_ms(value: i64) -> Duration {
    Duration::from_millis(value.unsigned_abs())
}

/// What a store writes for the step after an attempt: the state, the next
/// due time (none once the delivery ended), the wait and its reason code.
pub(crate) fn step_fields(step: Step) -> (DeliveryState, Option<i64>, i64, i64) {
    match step {
        Step::Retry { due, wait, reason } => (
            DeliveryState::Pending,
            Some(unix_millis(due)),
            millis(wait),
            reason_code(reason),
        ),
        Step::Done(outcome) => (DeliveryState::ended(outcome), None, 0, 0),
    }
}

/// An attempt as stored fields: number, sent at (ms), waited (ms), the
/// wait's reason code, held (ms), the status or the error's text, duration
/// (µs) and the excerpt.
pub(crate) type AttemptRow = (
    i64,
    i64,
    i64,
    i64,
    i64,
    Option<i64>,
    Option<String>,
    i64,
    Vec<u8>,
);

/// An attempt as [`AttemptRow`] fields.
pub(crate) fn attempt_fields(attempt: &Attempt) -> AttemptRow {
    let (status, error) = match &attempt.result {
        Ok(status) => (Some(i64::from(*status)), None),
        Err(error) => (None, Some(error.as_str().to_owned())),
    };
    (
        i64::from(attempt.number),
        unix_millis(attempt.sent_at),
        millis(attempt.waited),
        reason_code(attempt.reason),
        millis(attempt.held),
        status,
        error,
        micros(attempt.duration),
        attempt.excerpt.clone(),
    )
}

/// The inverse of [`attempt_fields`].
pub(crate) fn attempt_from_fields(
    (number, sent_at, waited, reason, held, status, error, duration, excerpt): AttemptRow,
) -> Attempt {
    Attempt {
        number: count(number),
        sent_at: from_millis(sent_at),
        waited: duration_ms(waited),
        reason: reason_from_code(reason),
        held: duration_ms(held),
        result: match status {
            Some(status) => Ok(u16::try_from(status).unwrap_or(0)),
            None => Err(AttemptError::new(error.unwrap_or_default())),
        },
        duration: Duration::from_micros(duration.unsigned_abs()),
        excerpt,
    }
}

/// A delivery from its stored body, state code and due time (which counts
/// only while it is pending), with its attempts.
pub(crate) fn stored(
    endpoint: &str,
    id: &str,
    body: Vec<u8>,
    (state, due_at): (i64, i64),
    attempts: Vec<Attempt>,
) -> StoredDelivery {
    let state = DeliveryState::from_code(state);
    StoredDelivery {
        endpoint: endpoint.to_owned(),
        id: id.to_owned(),
        body,
        due_at: (state == DeliveryState::Pending).then(|| from_millis(due_at)),
        state,
        attempts,
    }
}

/// What a store writes to disable an endpoint for `reason` at `now`: the
/// disabled code, the no-success limit (ms), and for a no-success disable
/// the latest failing time (ms) that has failed long enough. `None` when no
/// failing time can have (`now` is less than the limit after the epoch).
pub(crate) fn disable_fields(
    reason: DisableReason,
    now: SystemTime,
) -> Option<(i64, Option<i64>, Option<i64>)> {
    let (_, disabled, after) = health_fields(EndpointHealth {
        failing_since: None,
        disabled: Some(reason),
    });
    let latest = match reason {
        DisableReason::Gone | DisableReason::Manual => None,
        DisableReason::NoSuccessFor(wait) => Some(unix_millis(now.checked_sub(wait)?)),
    };
    Some((disabled?, after, latest))
}

/// A duration in whole microseconds, saturating, as attempts keep theirs.
pub(crate) fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}
