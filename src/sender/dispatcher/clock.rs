//! The dispatcher's clock when a policy brings none: the store's clock,
//! read now and then and carried forward on this host's monotonic clock,
//! so that every dispatcher on one store leases, schedules and disables on
//! the store's timeline whatever this host's wall clock does.

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::DispatchError;
use crate::sender::OutboxError;
use crate::sender::outbox::DeliveryStore;
use crate::store::StoreError;
use crate::verify::{Clock, SystemClock};

/// How long a reading is carried forward before the store is read again.
const RESYNC: Duration = Duration::from_secs(5);

/// How long the last good reading is trusted while new ones fail or come
/// too slowly: the store may have moved (a failover to a node whose clock
/// differs) or this host slept, so past this nothing is leased on it.
const STALEST_READING: Duration = Duration::from_secs(60);

/// A reading whose round trip took longer is discarded: the store's time
/// is taken for the middle of the trip, so a reading is off by up to half
/// its trip, and a server slow to answer (a stall, a failover) would move
/// the dispatcher's time by as much.
pub(super) const SLOWEST_READING: Duration = Duration::from_millis(500);

/// What a lease is lengthened by in the store, so that two dispatchers
/// whose readings are each off by up to half of [`SLOWEST_READING`], in
/// opposite directions, never both hold one delivery: the holder's attempt
/// ends (its timeout is shorter than the lease) before the other can see
/// the lease as ended.
pub(super) const LEASE_MARGIN: Duration = SLOWEST_READING;

/// The store's time at one instant of this host's monotonic clock.
#[derive(Clone, Copy, Debug)]
struct Reading {
    store: SystemTime,
    at: Instant,
    round_trip: Duration,
}

impl Reading {
    /// The store's time now, carried forward from this reading on the
    /// monotonic clock: a step of the host's wall clock does not move it.
    fn now(&self) -> SystemTime {
        self.store
            .checked_add(self.at.elapsed())
            .unwrap_or(self.store)
    }
}

/// The store's clock as this dispatcher knows it: the last good
/// [`store_time`](DeliveryStore::store_time) reading carried forward on
/// the monotonic clock, read again every [`RESYNC`].
pub(super) struct StoreClock {
    /// This host's clock, read only until the store's is known.
    local: RwLock<Arc<dyn Clock>>,
    /// The last reading kept, `None` until one succeeds.
    reading: Mutex<Option<Reading>>,
    /// When the store was last asked (whatever it answered), `None` until
    /// the first time.
    asked: Mutex<Option<Instant>>,
    /// One reading at a time.
    reading_turn: tokio::sync::Mutex<()>,
}

/// Why the store's clock is not known yet.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unsynced {
    /// The store could not tell its time.
    #[error(transparent)]
    Unreadable(OutboxError),
    /// Every reading so far took too long to be trusted.
    #[error("every reading took longer than {SLOWEST_READING:?} (the last, {0:?})")]
    TooSlow(Duration),
}

impl From<Unsynced> for DispatchError {
    fn from(unsynced: Unsynced) -> Self {
        DispatchError::StoreClock(match unsynced {
            Unsynced::Unreadable(error) => error,
            slow @ Unsynced::TooSlow(_) => OutboxError::Store(StoreError::other(slow)),
        })
    }
}

impl StoreClock {
    pub(super) fn new() -> Self {
        Self {
            local: RwLock::new(Arc::new(SystemClock)),
            reading: Mutex::new(None),
            asked: Mutex::new(None),
            reading_turn: tokio::sync::Mutex::new(()),
        }
    }

    /// Reads `local` as this host's clock until the store's is known.
    pub(super) fn set_local(&self, local: Arc<dyn Clock>) {
        *self.local.write().unwrap_or_else(PoisonError::into_inner) = local;
    }

    fn reading(&self) -> Option<Reading> {
        *self.reading.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn asked(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.asked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the store's clock is known: until it is, nothing may be
    /// leased or scheduled on it.
    pub(super) fn is_synced(&self) -> bool {
        self.reading().is_some()
    }

    /// Whether the last good reading is older than [`STALEST_READING`].
    fn reading_is_stale(&self) -> bool {
        self.reading()
            .is_some_and(|reading| reading.at.elapsed() > STALEST_READING)
    }

    /// Reads `store`'s clock again if the last reading is older than
    /// [`RESYNC`]. Until a reading succeeds every call tries, and fails if
    /// it cannot; after one, only one caller reads at a time and the others
    /// go on with the last reading, and a failed or slow reading keeps it.
    pub(super) async fn sync(&self, store: &impl DeliveryStore) -> Result<(), Unsynced> {
        self.sync_with(|| store.store_time()).await
    }

    /// [`sync`](Self::sync) with `read` asking the store for its time.
    async fn sync_with<F: Future<Output = Result<SystemTime, OutboxError>>>(
        &self,
        read: impl FnOnce() -> F,
    ) -> Result<(), Unsynced> {
        let fresh = |asked: Option<Instant>| asked.is_some_and(|at| at.elapsed() < RESYNC);
        // A reading is used while it is younger than `STALEST_READING`.
        let usable = || self.is_synced() && !self.reading_is_stale();
        if usable() && fresh(*self.asked()) {
            return Ok(());
        }
        let _turn = if usable() {
            match self.reading_turn.try_lock() {
                Ok(turn) => turn,
                Err(_) => return Ok(()),
            }
        } else {
            self.reading_turn.lock().await
        };
        if usable() && fresh(*self.asked()) {
            return Ok(());
        }
        let outcome = self.read(read()).await;
        *self.asked() = Some(Instant::now());
        match outcome {
            Ok(()) => Ok(()),
            Err(unsynced) if usable() => {
                tracing::warn!(error = %unsynced, "going on with the store's clock as last read");
                Ok(())
            }
            Err(unsynced) => Err(unsynced),
        }
    }

    /// Takes `answer`, the store's time, as the new reading unless it
    /// failed or its round trip was slower than [`SLOWEST_READING`].
    async fn read(
        &self,
        answer: impl Future<Output = Result<SystemTime, OutboxError>>,
    ) -> Result<(), Unsynced> {
        let started = Instant::now();
        let store_now = answer.await.map_err(Unsynced::Unreadable)?;
        let round_trip = started.elapsed();
        if round_trip > SLOWEST_READING {
            return Err(Unsynced::TooSlow(round_trip));
        }
        let reading = Reading {
            store: store_now,
            at: started + round_trip / 2,
            round_trip,
        };
        *self.reading.lock().unwrap_or_else(PoisonError::into_inner) = Some(reading);
        Ok(())
    }
}

impl Clock for StoreClock {
    /// The store's time, carried forward from the last reading; this
    /// host's clock until the first.
    fn now(&self) -> SystemTime {
        match self.reading() {
            Some(reading) => reading.now(),
            None => self
                .local
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .now(),
        }
    }
}

impl std::fmt::Debug for StoreClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreClock")
            .field("reading", &self.reading().map(|r| r.round_trip))
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::sender::MemoryOutbox;

    /// How far apart two times are, either way.
    fn apart(a: SystemTime, b: SystemTime) -> Duration {
        match a.duration_since(b) {
            Ok(ahead) => ahead,
            Err(behind) => behind.duration(),
        }
    }

    /// A host clock the test steps: the system clock plus `ahead` seconds.
    fn steppable() -> (Arc<AtomicU64>, Arc<dyn Clock>) {
        let ahead = Arc::new(AtomicU64::new(0));
        let read = Arc::clone(&ahead);
        let clock = move || SystemTime::now() + Duration::from_secs(read.load(Ordering::Relaxed));
        (ahead, Arc::new(clock))
    }

    #[tokio::test]
    async fn a_skewed_local_clock_reads_the_stores_time_once_synced() {
        let clock = StoreClock::new();
        let (ahead, local) = steppable();
        ahead.store(180, Ordering::Relaxed);
        clock.set_local(local);
        assert!(clock.now() > SystemTime::now() + Duration::from_secs(170));
        clock.sync(&MemoryOutbox::new()).await.unwrap();
        assert!(apart(clock.now(), SystemTime::now()) < Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_step_of_the_hosts_clock_does_not_move_the_dispatchers_time() {
        let clock = StoreClock::new();
        let (ahead, local) = steppable();
        clock.set_local(local);
        clock.sync(&MemoryOutbox::new()).await.unwrap();
        ahead.store(180, Ordering::Relaxed);
        assert!(
            apart(clock.now(), SystemTime::now()) < Duration::from_secs(1),
            "the host's 3-minute step moved the dispatcher's time"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_synced_until_the_store_tells_its_time() {
        let clock = StoreClock::new();
        let refused = clock
            .read(async {
                let unknown = std::io::Error::other("unknown command `TIME`");
                Err(OutboxError::Store(StoreError::other(unknown)))
            })
            .await
            .unwrap_err();
        assert!(matches!(refused, Unsynced::Unreadable(_)), "{refused}");
        assert!(!clock.is_synced());
        assert!(refused.to_string().contains("unknown command `TIME`"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reading_is_discarded_and_the_last_good_one_kept() {
        let clock = StoreClock::new();
        let store_time = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        clock.read(async { Ok(store_time) }).await.unwrap();
        tokio::time::advance(Duration::from_secs(10)).await;
        // A server that stalls 2.2 s before answering: taken at face value
        // its time would be read as 1.1 s early or late.
        let slow = clock
            .read(async {
                tokio::time::sleep(Duration::from_millis(2_200)).await;
                Ok(store_time + Duration::from_secs(60))
            })
            .await
            .unwrap_err();
        assert!(matches!(slow, Unsynced::TooSlow(_)), "{slow}");
        assert_eq!(
            clock.now(),
            store_time + Duration::from_millis(12_200),
            "the first reading, carried forward"
        );
    }

    /// Readings that keep failing leave the last good one in use for a
    /// minute at most: then nothing is leased on it (the store may have
    /// failed over to a node with another clock).
    #[tokio::test(start_paused = true)]
    async fn a_reading_is_not_carried_forward_past_a_minute_of_failures() {
        let clock = StoreClock::new();
        clock
            .sync_with(|| async { Ok(SystemTime::now()) })
            .await
            .unwrap();
        let failing = || async {
            let down = std::io::Error::other("connection refused");
            Err(OutboxError::Store(StoreError::other(down)))
        };
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(
            clock.sync_with(failing).await.is_ok(),
            "30 s old: still used"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(
            clock.sync_with(failing).await.is_ok(),
            "asked 2 s ago: no new try"
        );
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(clock.sync_with(failing).await.is_err(), "62 s old: refused");
        assert!(
            clock.sync_with(failing).await.is_err(),
            "and every call tries again"
        );
        clock
            .sync_with(|| async { Ok(SystemTime::now()) })
            .await
            .expect("a good reading is used again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_reading_too_slow_leaves_the_clock_unsynced() {
        let clock = StoreClock::new();
        let slow = clock
            .read(async {
                tokio::time::sleep(SLOWEST_READING + Duration::from_millis(1)).await;
                Ok(SystemTime::now())
            })
            .await
            .unwrap_err();
        assert!(matches!(slow, Unsynced::TooSlow(_)), "{slow}");
        assert!(!clock.is_synced());
    }
}
