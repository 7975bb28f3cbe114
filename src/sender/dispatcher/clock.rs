//! The dispatcher's clock when a policy brings none: the local clock
//! moved by its offset from the store's clock, so that every dispatcher
//! on one store leases, schedules and disables on the store's timeline.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use crate::sender::outbox::DeliveryStore;
use crate::verify::{Clock, SystemClock};

/// How long a measured offset is used before it is measured again.
const RESYNC: Duration = Duration::from_secs(5);

/// The local clock plus the store's offset from it, measured every
/// [`RESYNC`] with one [`store_time`](DeliveryStore::store_time) read: the
/// store's time is taken for the local time half-way through the round
/// trip, so the offset is off by at most half of it.
pub(super) struct StoreClock {
    local: RwLock<Arc<dyn Clock>>,
    /// The store's time minus the local time, in nanoseconds (about 292
    /// years either way).
    offset: AtomicI64,
    /// When the offset was last measured (or a measurement failed); `None`
    /// until the first.
    measured: Mutex<Option<Instant>>,
    /// One measurement at a time.
    measuring: tokio::sync::Mutex<()>,
}

impl StoreClock {
    pub(super) fn new() -> Self {
        Self {
            local: RwLock::new(Arc::new(SystemClock)),
            offset: AtomicI64::new(0),
            measured: Mutex::new(None),
            measuring: tokio::sync::Mutex::new(()),
        }
    }

    /// Reads `local` as this host's clock from now on, and measures the
    /// offset again at the next [`sync`](Self::sync).
    pub(super) fn set_local(&self, local: Arc<dyn Clock>) {
        *self.local.write().unwrap_or_else(PoisonError::into_inner) = local;
        *self.measured() = None;
    }

    fn local_now(&self) -> SystemTime {
        self.local
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .now()
    }

    fn measured(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.measured.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Measures the offset from `store`'s clock if it is older than
    /// [`RESYNC`]. Before the first measurement callers wait for it; after
    /// it only one caller measures and the others go on with the last
    /// offset. A store that cannot answer keeps the last offset (none at
    /// first: the local clock) until the next try, [`RESYNC`] later.
    pub(super) async fn sync(&self, store: &impl DeliveryStore) {
        let fresh = |measured: Option<Instant>| measured.is_some_and(|at| at.elapsed() < RESYNC);
        let last = *self.measured();
        if fresh(last) {
            return;
        }
        let _turn = if last.is_some() {
            match self.measuring.try_lock() {
                Ok(turn) => turn,
                Err(_) => return,
            }
        } else {
            self.measuring.lock().await
        };
        if fresh(*self.measured()) {
            return;
        }
        let (started, local) = (Instant::now(), self.local_now());
        let answer = store.store_time().await;
        let half_trip = started.elapsed() / 2;
        match answer {
            Ok(store_now) => {
                let local_mid = local.checked_add(half_trip).unwrap_or(local);
                self.offset
                    .store(signed_nanos(store_now, local_mid), Ordering::Relaxed);
            }
            Err(error) => {
                tracing::warn!(%error, "cannot read the store's clock: going on with the last offset");
            }
        }
        *self.measured() = Some(Instant::now());
    }
}

impl Clock for StoreClock {
    fn now(&self) -> SystemTime {
        let local = self.local_now();
        let offset = self.offset.load(Ordering::Relaxed);
        let by = Duration::from_nanos(offset.unsigned_abs());
        if offset >= 0 {
            local.checked_add(by)
        } else {
            local.checked_sub(by)
        }
        .unwrap_or(local)
    }
}

/// `a - b` in nanoseconds, saturating.
fn signed_nanos(a: SystemTime, b: SystemTime) -> i64 {
    match a.duration_since(b) {
        Ok(ahead) => i64::try_from(ahead.as_nanos()).unwrap_or(i64::MAX),
        Err(behind) => i64::try_from(behind.duration().as_nanos()).map_or(i64::MIN, |n| -n),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::sender::MemoryOutbox;

    #[tokio::test]
    async fn a_skewed_local_clock_reads_the_stores_time_once_synced() {
        let clock = StoreClock::new();
        let ahead = Duration::from_secs(180);
        clock.set_local(Arc::new(move || SystemTime::now() + ahead));
        assert!(clock.now() > SystemTime::now() + Duration::from_secs(170));
        clock.sync(&MemoryOutbox::new()).await;
        let apart = match clock.now().duration_since(SystemTime::now()) {
            Ok(ahead) => ahead,
            Err(behind) => behind.duration(),
        };
        assert!(apart < Duration::from_secs(1), "{apart:?}");
    }

    #[test]
    fn offsets_saturate_instead_of_wrapping() {
        let early = SystemTime::UNIX_EPOCH;
        let late = early + Duration::from_secs(1 << 40);
        assert_eq!(signed_nanos(late, early), i64::MAX);
        assert_eq!(signed_nanos(early, late), i64::MIN);
        assert_eq!(signed_nanos(early, early), 0);
    }
}
