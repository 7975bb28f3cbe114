//! Wake-ups for workers in the same process: a store that accepts an
//! event tells the workers waiting on its namespace at once, so a worker
//! needs no short poll to start within a millisecond of the 202.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, RwLock};

use tokio::sync::Notify;

/// Each namespace's wake-up and how many workers wait on it.
type Waiting = HashMap<String, (Arc<Notify>, usize)>;

/// Namespaces a worker of this process waits on.
static WAITING: LazyLock<RwLock<Waiting>> = LazyLock::new(RwLock::default);

/// How many workers wait at all: accepts skip the lock while none does.
static WORKERS: AtomicUsize = AtomicUsize::new(0);

/// Tells the workers waiting on `namespace` that an event was accepted.
pub(crate) fn accepted(namespace: &str) {
    if WORKERS.load(Ordering::Relaxed) == 0 {
        return;
    }
    let waiting = WAITING
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((notify, _)) = waiting.get(namespace) {
        notify.notify_waiters();
    }
}

/// A worker's registration: woken on each accept into its namespace until
/// dropped.
#[derive(Debug)]
pub(crate) struct Waiter {
    namespace: String,
    notify: Arc<Notify>,
}

impl Waiter {
    pub(crate) fn new(namespace: &str) -> Self {
        let mut waiting = WAITING
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (notify, count) = waiting
            .entry(namespace.to_owned())
            .or_insert_with(|| (Arc::new(Notify::new()), 0));
        *count += 1;
        WORKERS.fetch_add(1, Ordering::Relaxed);
        Self {
            namespace: namespace.to_owned(),
            notify: Arc::clone(notify),
        }
    }

    /// What an accept wakes; enable it before looking at the store, so an
    /// accept between the look and the wait is not missed.
    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut waiting = WAITING
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, count)) = waiting.get_mut(&self.namespace) {
            *count -= 1;
            if *count == 0 {
                waiting.remove(&self.namespace);
            }
        }
        WORKERS.fetch_sub(1, Ordering::Relaxed);
    }
}
