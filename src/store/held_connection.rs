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
/// which was up to a third of Postgres accepts' speed in the receiver
/// bench. Kept, a busy writer pays for one.
///
/// A connection goes back to the pool (which tests it) after a batch that
/// failed, after a batch that left the pool no other connection to spare
/// or found it closed, before a batch once the pool is closed or once it
/// was kept [`KEEP_AT_MOST`], and when its writer has had no job for a
/// second (`CommitBatch::idle`), so that a quiet store holds none. A
/// connection the server closed while it was kept fails the one batch that
/// next runs on it.
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

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;

    /// A folder of its own, removed when dropped (also when a test fails).
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new() -> Self {
            let dir =
                std::env::temp_dir().join(format!("hooklatch-held-{}", crate::store::new_token()));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A pool whose connections may live 1 ms, on a file of its own in
    /// `dir`; large enough that a writer keeps its connection.
    async fn short_lived_pool(dir: &Scratch) -> sqlx::SqlitePool {
        let dir = &dir.0;
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(dir.join("held.db"))
            .create_if_missing(true);
        sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(HOLD_FROM_POOL_SIZE)
            .max_lifetime(Duration::from_millis(1))
            .connect_with(options)
            .await
            .unwrap()
    }

    /// A writer's slot on [`short_lived_pool`], after a first batch that
    /// left a temporary table on its connection (and kept it).
    async fn marked(dir: &Scratch) -> HeldConnection<sqlx::Sqlite> {
        let held = HeldConnection::new(short_lived_pool(dir).await);
        held.run(async |connection| {
            sqlx::query("CREATE TEMP TABLE marker (x)")
                .execute(connection)
                .await
        })
        .await
        .unwrap();
        held
    }

    /// Whether the connection `held` runs on next has the temporary table
    /// [`marked`] made: only the same connection has.
    async fn same_connection(held: &HeldConnection<sqlx::Sqlite>) -> bool {
        held.run(async |connection| {
            sqlx::query("SELECT count(*) FROM marker")
                .fetch_one(connection)
                .await
        })
        .await
        .is_ok()
    }

    /// A kept connection is run on again until it has been kept for
    /// [`KEEP_AT_MOST`]; then it goes back to the pool, whose rules (here a
    /// lifetime long past) reach it, and the next batch runs on another.
    #[tokio::test]
    async fn a_connection_kept_past_its_time_goes_back_to_the_pool() {
        let dir = Scratch::new();
        let held = marked(&dir).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(
            same_connection(&held).await,
            "a connection kept for less than its time was not run on again"
        );
        {
            let mut slot = held.slot();
            let (_, since) = slot.as_mut().expect("the connection was kept");
            *since = Instant::now()
                .checked_sub(KEEP_AT_MOST)
                .expect("the clock has run for longer than KEEP_AT_MOST");
        }
        assert!(
            !same_connection(&held).await,
            "a connection kept past its time was run on again"
        );
    }

    /// A released connection goes back to the pool: the next batch runs on
    /// another once the pool's lifetime has closed it.
    #[tokio::test]
    async fn a_released_connection_is_not_run_on_again() {
        let dir = Scratch::new();
        let held = marked(&dir).await;
        held.release();
        assert!(held.slot().is_none(), "release kept the connection");
        // The pool closes it, past its lifetime, within a few of its 1 ms
        // rounds.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !same_connection(&held).await,
            "the released connection was run on again"
        );
    }
}
