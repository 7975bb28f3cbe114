//! [`Validity`]: when a secret may be used, for rotations that overlap on
//! both ends.

use std::time::SystemTime;

use super::clock::unix_seconds;

/// When a secret may be used: from `not_before` (inclusive) until
/// `expires_at` (exclusive), either end open. A verifier only tries the
/// secrets valid at the time it checks against, and a [`Signer`](super::Signer)
/// signs with every secret valid at the signing time, so a rotation is two
/// overlapping windows and needs no restart at either end.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use hooklatch::verify::Validity;
///
/// let switch = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
/// let old = Validity::until(switch + Duration::from_secs(86_400)); // a day of overlap
/// let new = Validity::from(switch);
/// assert!(old.contains(switch) && new.contains(switch));
/// assert!(!old.contains(switch + Duration::from_secs(86_400)));
/// assert!(!new.contains(switch - Duration::from_secs(1)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Validity {
    not_before: Option<i64>,
    expires_at: Option<i64>,
}

impl Validity {
    /// Always valid.
    pub const ALWAYS: Self = Self {
        not_before: None,
        expires_at: None,
    };

    /// Valid from `not_before` on.
    pub fn from(not_before: SystemTime) -> Self {
        Self {
            not_before: Some(unix_seconds(not_before)),
            expires_at: None,
        }
    }

    /// Valid until `expires_at` (not at it).
    pub fn until(expires_at: SystemTime) -> Self {
        Self {
            not_before: None,
            expires_at: Some(unix_seconds(expires_at)),
        }
    }

    /// Valid from `not_before` until `expires_at`.
    pub fn between(not_before: SystemTime, expires_at: SystemTime) -> Self {
        Self {
            not_before: Some(unix_seconds(not_before)),
            expires_at: Some(unix_seconds(expires_at)),
        }
    }

    /// The same window in whole seconds since the Unix epoch, as
    /// configuration files write it.
    pub fn from_unix_seconds(not_before: Option<i64>, expires_at: Option<i64>) -> Self {
        Self {
            not_before,
            expires_at,
        }
    }

    /// The start, in seconds since the Unix epoch, if any.
    pub fn not_before(&self) -> Option<i64> {
        self.not_before
    }

    /// The end, in seconds since the Unix epoch, if any.
    pub fn expires_at(&self) -> Option<i64> {
        self.expires_at
    }

    /// Whether the window holds no time at all.
    pub fn is_empty(&self) -> bool {
        matches!((self.not_before, self.expires_at), (Some(start), Some(end)) if start >= end)
    }

    /// Whether a secret with this window may be used at `now`.
    pub fn contains(&self, now: SystemTime) -> bool {
        self.contains_unix(unix_seconds(now))
    }

    pub(crate) fn contains_unix(&self, now: i64) -> bool {
        self.not_before.is_none_or(|start| now >= start)
            && self.expires_at.is_none_or(|end| now < end)
    }
}
