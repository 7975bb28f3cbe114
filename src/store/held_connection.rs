//! The pooled connection a group commit's writer keeps between its
//! batches, so that a busy writer is not charged sqlx's tests of a pooled
//! connection on every batch.

use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The smallest pool a [`HeldConnection`] keeps a connection of: a
/// smaller one (a pool of your own, say) gets each connection back after
/// every batch.
const HOLD_FROM_POOL_SIZE: u32 = 8;

/// How long a connection is kept before it goes back to the pool all the
/// same, so that the pool's own rules (its lifetime, your hooks) still
/// reach it under a load that never stops.
const KEEP_AT_MOST: Duration = Duration::from_secs(30);

/// The pooled connection one writer keeps between its batches. sqlx tests
/// a pooled connection with a round trip when it is acquired and another
/// when it is released: three round trips for a batch's one statement,
/// which cost Postgres accepts a third of their speed. Kept, a busy writer
/// pays for one.
///
/// A connection goes back to the pool (which tests it) after a batch that
/// failed, after a batch that left the pool no other connection to spare
/// or found it closed, after the first batch past [`KEEP_AT_MOST`], and
/// when its writer has had no job for a second (`CommitBatch::idle`), so
/// that a quiet store holds none. A connection the server closed while it was kept fails
/// the one batch that next runs on it.
///
/// Each writer has its own: a clone holds nothing. The writers run on
/// clones, so what they keep goes with their tasks.
pub(crate) struct HeldConnection<DB: sqlx::Database> {
    pool: sqlx::Pool<DB>,
    kept: Mutex<Option<(sqlx::pool::PoolConnection<DB>, Instant)>>,
}

impl<DB: sqlx::Database> Clone for HeldConnection<DB> {
    fn clone(&self) -> Self {
        Self::new(self.pool.clone())
    }
}

impl<DB: sqlx::Database> fmt::Debug for HeldConnection<DB> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("HeldConnection")
    }
}

impl<DB: sqlx::Database> HeldConnection<DB> {
    /// A writer's connection from `pool`, taken on first use.
    pub(crate) fn new(pool: sqlx::Pool<DB>) -> Self {
        Self {
            pool,
            kept: Mutex::new(None),
        }
    }

    /// Runs `work` on the kept connection (or one from the pool), and
    /// keeps the connection afterwards if `work` succeeded and the pool
    /// can spare it.
    pub(crate) async fn run<T>(
        &self,
        work: impl AsyncFnOnce(&mut DB::Connection) -> Result<T, sqlx::Error>,
    ) -> Result<T, sqlx::Error> {
        let kept = self
            .slot()
            .take()
            .filter(|(_, since)| since.elapsed() < KEEP_AT_MOST && !self.pool.is_closed());
        let (mut connection, since) = match kept {
            Some(kept) => kept,
            // What was kept too long goes back to the pool here, first.
            None => (self.pool.acquire().await?, Instant::now()),
        };
        let outcome = work(&mut connection).await;
        if outcome.is_ok() && self.can_spare() {
            *self.slot() = Some((connection, since));
        }
        // Otherwise dropped: back to the pool, tested on the way.
        outcome
    }

    /// Gives the kept connection back to the pool.
    pub(crate) fn release(&self) {
        let released = self.slot().take();
        drop(released);
    }

    /// Whether the pool is large enough, and has a connection left for
    /// others (idle, or room to open one).
    fn can_spare(&self) -> bool {
        let most = self.pool.options().get_max_connections();
        most >= HOLD_FROM_POOL_SIZE
            && !self.pool.is_closed()
            && (self.pool.num_idle() > 0 || self.pool.size() < most)
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<(sqlx::pool::PoolConnection<DB>, Instant)>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
