//! Put each resource's events back in order, and say what to do with gaps.
//!
//! Retries make events for one resource arrive out of order ("created,
//! deleted, updated"). When the sender numbers each resource's events, a
//! [`Tracker`] tells a worker what to do with each one:
//!
//! - [`Observation::Apply`]: exactly the next one: apply it, then
//!   [`commit`](Tracker::commit);
//! - [`Observation::Stale`]: already applied (or older): answer 2xx and skip;
//! - [`Observation::Gap`]: some are missing: do not wait, fetch the
//!   resource's current state from the provider's API, and commit the
//!   position that state reflects.
//!
//! The position advances only on `commit`, after the work succeeded, and
//! only forwards (compare-and-set): of two workers that raced on the same
//! step, one commit wins and the other learns it lost. With Postgres the
//! commit can run inside the transaction that applies the effect, so the
//! effect and the advance commit together.
//!
//! For events that arrive a little early, a bounded [`ReorderBuffer`] holds
//! them for a short window and hands them back in order once the missing
//! ones arrive.
//!
//! ```
//! use hooklatch::sequence::{MemorySequences, Observation, Tracker};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), hooklatch::sequence::SequenceError> {
//! let tracker = Tracker::new(MemorySequences::new());
//! assert_eq!(tracker.observe("order_1", 1).await?, Observation::Apply);
//! assert!(tracker.commit("order_1", 1).await?);
//! assert_eq!(tracker.observe("order_1", 1).await?, Observation::Stale { last: 1 });
//! assert_eq!(tracker.observe("order_1", 3).await?, Observation::Gap { expected: 2, got: 3 });
//! # Ok(())
//! # }
//! ```

use std::future::Future;

mod buffer;
mod error;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use crate::store::StoreError;
pub use buffer::{DEFAULT_MAX_AHEAD, DEFAULT_MAX_HELD, Held, Overdue, ReorderBuffer};
pub use error::SequenceError;
pub use memory::MemorySequences;
#[cfg(feature = "postgres")]
pub use postgres::PostgresSequences;
#[cfg(feature = "redis")]
pub use redis::RedisSequences;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use sql::SqlSequences;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteSequences;

/// The longest resource key accepted, in bytes.
pub const MAX_RESOURCE_LEN: usize = 256;

/// The largest sequence number accepted (SQL stores keep a signed 64-bit
/// integer).
pub const MAX_SEQUENCE: u64 = i64::MAX as u64;

/// What to do with an event, given the last committed position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observation {
    /// Exactly the next event: apply it, then commit its number.
    Apply,
    /// At or before the last applied event: answer 2xx and skip it.
    Stale {
        /// The last committed number.
        last: u64,
    },
    /// Events are missing between the last applied one and this one:
    /// refetch the resource and commit the position it reflects.
    Gap {
        /// The number that should have come next.
        expected: u64,
        /// The number that came.
        got: u64,
    },
}

/// What a tracker does with the first event of a resource it has never
/// seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FirstEvent {
    /// Apply it, whatever its number. The default.
    #[default]
    Apply,
    /// Apply it only if it is this number; otherwise report a gap (use
    /// when every resource's numbering starts at a known value).
    StartAt(u64),
}

/// Where positions are kept: one number per resource, moved only forwards.
pub trait SequenceStore: Send + Sync {
    /// The last committed number of `resource`, if any.
    fn position(
        &self,
        resource: &str,
    ) -> impl Future<Output = Result<Option<u64>, SequenceError>> + Send;

    /// Sets `resource`'s position to `sequence` if that is above the stored
    /// one (or none is stored); returns whether it moved.
    fn advance(
        &self,
        resource: &str,
        sequence: u64,
    ) -> impl Future<Output = Result<bool, SequenceError>> + Send;
}

/// Decides, per event, apply / skip / refetch, over a [`SequenceStore`].
#[derive(Debug, Clone)]
pub struct Tracker<S> {
    store: S,
    first: FirstEvent,
}

impl<S: SequenceStore> Tracker<S> {
    /// A tracker that applies the first event of an unknown resource.
    pub fn new(store: S) -> Self {
        Self {
            store,
            first: FirstEvent::Apply,
        }
    }

    /// Sets what happens to the first event of an unknown resource.
    #[must_use]
    pub fn with_first_event(mut self, first: FirstEvent) -> Self {
        self.first = first;
        self
    }

    /// The store underneath.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// What to do with event `sequence` of `resource`.
    pub async fn observe(
        &self,
        resource: &str,
        sequence: u64,
    ) -> Result<Observation, SequenceError> {
        check(resource, sequence)?;
        let last = self.store.position(resource).await?;
        Ok(decide(last, sequence, self.first))
    }

    /// Records that event `sequence` of `resource` was applied, or that a
    /// refetch brought the resource up to `sequence`. Returns `false` if
    /// the position was already there or beyond: another worker got there
    /// first, and this worker's effect must be undone or was a duplicate.
    pub async fn commit(&self, resource: &str, sequence: u64) -> Result<bool, SequenceError> {
        check(resource, sequence)?;
        self.store.advance(resource, sequence).await
    }
}

/// The decision itself, shared by every store.
pub fn decide(last: Option<u64>, sequence: u64, first: FirstEvent) -> Observation {
    match (last, first) {
        (Some(last), _) if sequence <= last => Observation::Stale { last },
        (Some(last), _) if sequence == last + 1 => Observation::Apply,
        (Some(last), _) => Observation::Gap {
            expected: last + 1,
            got: sequence,
        },
        (None, FirstEvent::Apply) => Observation::Apply,
        (None, FirstEvent::StartAt(start)) if sequence == start => Observation::Apply,
        (None, FirstEvent::StartAt(start)) if sequence < start => Observation::Stale {
            last: start.saturating_sub(1),
        },
        (None, FirstEvent::StartAt(start)) => Observation::Gap {
            expected: start,
            got: sequence,
        },
    }
}

pub(crate) fn check(resource: &str, sequence: u64) -> Result<(), SequenceError> {
    if sequence > MAX_SEQUENCE {
        return Err(SequenceError::OutOfRange(sequence));
    }
    match crate::store::key_problem(resource) {
        None => Ok(()),
        Some(reason) => Err(SequenceError::InvalidResource(reason)),
    }
}

/// The positions table (version 1).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn schema(
    table: &str,
    dialect: &crate::store::sql::Dialect,
) -> crate::store::sql::Schema {
    crate::store::sql::Schema {
        component: format!("sequences:{table}"),
        version: 1,
        statements: vec![format!(
            "CREATE TABLE IF NOT EXISTS {table} (resource TEXT PRIMARY KEY, position {} NOT NULL)",
            dialect.int
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decides_apply_stale_and_gap() {
        assert_eq!(decide(None, 7, FirstEvent::Apply), Observation::Apply);
        assert_eq!(decide(Some(3), 4, FirstEvent::Apply), Observation::Apply);
        assert_eq!(
            decide(Some(3), 3, FirstEvent::Apply),
            Observation::Stale { last: 3 }
        );
        assert_eq!(
            decide(Some(3), 1, FirstEvent::Apply),
            Observation::Stale { last: 3 }
        );
        assert_eq!(
            decide(Some(3), 9, FirstEvent::Apply),
            Observation::Gap {
                expected: 4,
                got: 9
            }
        );
        assert_eq!(decide(None, 1, FirstEvent::StartAt(1)), Observation::Apply);
        assert_eq!(
            decide(None, 2, FirstEvent::StartAt(1)),
            Observation::Gap {
                expected: 1,
                got: 2
            }
        );
    }

    #[test]
    fn rejects_bad_resources_and_huge_numbers() {
        assert!(check("order_1", 1).is_ok());
        assert!(check("", 1).is_err());
        assert!(check("a b", 1).is_err());
        assert!(check("x", u64::MAX).is_err());
    }
}
