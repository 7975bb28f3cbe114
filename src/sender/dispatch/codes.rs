//! How stores other than memory keep states, wait reasons, times and
//! endpoint health: as integers.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{DeliveryState, DisableReason, EndpointHealth};
use crate::sender::WaitReason;

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

/// Milliseconds since the Unix epoch, as stores keep times.
pub(crate) fn to_millis(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
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

/// An endpoint's health as stored fields: failing since (ms), disabled (NULL,
/// 1 gone, 2 no success), and the no-success limit (ms).
pub(crate) fn health_fields(health: EndpointHealth) -> (Option<i64>, Option<i64>, Option<i64>) {
    let (disabled, after) = match health.disabled {
        None => (None, None),
        Some(DisableReason::Gone) => (Some(1), None),
        Some(DisableReason::NoSuccessFor(after)) => (Some(2), Some(crate::store::millis(after))),
    };
    (health.failing_since.map(to_millis), disabled, after)
}

/// The inverse of [`health_fields`].
pub(crate) fn health_from_fields(
    failing_since: Option<i64>,
    disabled: Option<i64>,
    after: Option<i64>,
) -> EndpointHealth {
    EndpointHealth {
        failing_since: failing_since.map(from_millis),
        disabled: match disabled {
            None => None,
            Some(1) => Some(DisableReason::Gone),
            Some(_) => Some(DisableReason::NoSuccessFor(Duration::from_millis(
                after.unwrap_or(0).unsigned_abs(),
            ))),
        },
    }
}

/// A stored count as a `u32`.
pub(crate) fn count(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(0)
}

/// Stored milliseconds as a duration.
pub(crate) fn duration_ms(value: i64) -> Duration {
    Duration::from_millis(value.unsigned_abs())
}
