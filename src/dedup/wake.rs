//! Wake-ups for workers in the same process: a store that accepts an
//! event tells the workers waiting on its namespace at once, so a worker
//! needs no short poll to start within a millisecond of the 202.
//!
//! Each worker also says whether it is busy (its takes have kept finding
//! events for a while): a store that listens for accepts in other
//! processes (Postgres's `LISTEN`) stops listening while every worker of
//! the namespace is busy, since a busy worker takes again without being
//! told, and each notice costs the server and this process a little.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, RwLock};

use tokio::sync::{Notify, watch};

/// A namespace's wake-up, how many workers wait on it, and how many of
/// those are idle.
struct Waiting {
    notify: Arc<Notify>,
    workers: usize,
    idle: watch::Sender<usize>,
}

impl Waiting {
    fn new() -> Self {
        Self {
            notify: Arc::new(Notify::new()),
            workers: 0,
            idle: watch::Sender::new(0),
        }
    }
}

/// Namespaces a worker of this process waits on, or a listener watches.
static WAITING: LazyLock<RwLock<HashMap<String, Waiting>>> = LazyLock::new(RwLock::default);

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
    if let Some(waiting) = waiting.get(namespace) {
        waiting.notify.notify_waiters();
    }
}

/// How many of this process's workers on `namespace` are idle, kept up to
/// date: a listener for accepts in other processes need only listen while
/// it is above zero. Postgres's listener is the one that asks.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn idle_workers(namespace: &str) -> watch::Receiver<usize> {
    let mut waiting = WAITING
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    waiting
        .entry(namespace.to_owned())
        .or_insert_with(Waiting::new)
        .idle
        .subscribe()
}

/// A worker's registration: woken on each accept into its namespace until
/// dropped. It starts idle.
#[derive(Debug)]
pub(crate) struct Waiter {
    namespace: String,
    notify: Arc<Notify>,
    busy: AtomicBool,
}

impl Waiter {
    pub(crate) fn new(namespace: &str) -> Self {
        let mut waiting = WAITING
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = waiting
            .entry(namespace.to_owned())
            .or_insert_with(Waiting::new);
        entry.workers += 1;
        entry.idle.send_modify(|idle| *idle += 1);
        WORKERS.fetch_add(1, Ordering::Relaxed);
        Self {
            namespace: namespace.to_owned(),
            notify: Arc::clone(&entry.notify),
            busy: AtomicBool::new(false),
        }
    }

    /// What an accept wakes; enable it before looking at the store, so an
    /// accept between the look and the wait is not missed.
    pub(crate) fn notify(&self) -> &Notify {
        &self.notify
    }

    /// Says whether the worker is busy: its takes keep finding events, so
    /// it needs no notice of accepts in other processes.
    pub(crate) fn set_busy(&self, busy: bool) {
        if self.busy.swap(busy, Ordering::Relaxed) == busy {
            return;
        }
        let waiting = WAITING
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(entry) = waiting.get(&self.namespace) {
            entry.idle.send_modify(|idle| {
                *idle = if busy {
                    idle.saturating_sub(1)
                } else {
                    *idle + 1
                };
            });
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut waiting = WAITING
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(entry) = waiting.get_mut(&self.namespace) {
            entry.workers -= 1;
            if !*self.busy.get_mut() {
                entry
                    .idle
                    .send_modify(|idle| *idle = idle.saturating_sub(1));
            }
            // A listener still reading the idle count is its worker's, and
            // is stopped with it: it finds the count's sender gone and
            // listens until then.
            if entry.workers == 0 {
                waiting.remove(&self.namespace);
            }
        }
        WORKERS.fetch_sub(1, Ordering::Relaxed);
    }
}
