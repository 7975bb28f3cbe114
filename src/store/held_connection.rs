//! The pooled connections a group commit's writers keep between their
//! batches, so that a busy writer is not charged sqlx's tests of a pooled
//! connection on every batch.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

/// The smallest pool a [`HeldConnection`] keeps a connection of: a
/// smaller one (a pool of your own, say) gets each connection back after
/// every batch, so that two writers never hold all of it.
const HOLD_FROM_POOL_SIZE: u32 = 8;

/// The pooled connections a group's writers keep between their batches.
/// sqlx tests a pooled connection with a round trip when it is acquired
/// and another when it is released: three round trips for a batch's one
/// statement, which cost Postgres accepts a third of their speed. Kept, a
/// busy writer pays for one. A connection that failed goes back to the
/// pool (which tests it), and all go back once the writers have had no
/// job for [`HELD_IDLE`](super::group_commit::HELD_IDLE), so that a quiet
/// store holds none.
///
/// Clones share the connections: the group's writers each run on a clone.
pub(crate) struct HeldConnection<DB: sqlx::Database> {
    pool: sqlx::Pool<DB>,
    held: Arc<Mutex<Vec<sqlx::pool::PoolConnection<DB>>>>,
}

impl<DB: sqlx::Database> Clone for HeldConnection<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            held: Arc::clone(&self.held),
        }
    }
}

impl<DB: sqlx::Database> fmt::Debug for HeldConnection<DB> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("HeldConnection")
    }
}

impl<DB: sqlx::Database> HeldConnection<DB> {
    /// Connections from `pool`, taken on first use.
    pub(crate) fn new(pool: sqlx::Pool<DB>) -> Self {
        Self {
            pool,
            held: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Runs `work` on a kept connection (or one from the pool), and keeps
    /// the connection afterwards only if `work` succeeded and the pool is
    /// large enough to spare it.
    pub(crate) async fn run<T>(
        &self,
        work: impl AsyncFnOnce(&mut DB::Connection) -> Result<T, sqlx::Error>,
    ) -> Result<T, sqlx::Error> {
        let kept = self.kept().pop();
        let mut connection = match kept {
            Some(connection) => connection,
            None => self.pool.acquire().await?,
        };
        let outcome = work(&mut connection).await;
        if outcome.is_ok() && self.pool.options().get_max_connections() >= HOLD_FROM_POOL_SIZE {
            self.kept().push(connection);
        }
        // Otherwise dropped: back to the pool, tested on the way.
        outcome
    }

    /// Gives every kept connection back to the pool.
    pub(crate) fn release(&self) {
        let released = std::mem::take(&mut *self.kept());
        drop(released);
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Vec<sqlx::pool::PoolConnection<DB>>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
