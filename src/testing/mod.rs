//! Conformance checks for a store of your own: the checks every built-in
//! store passes, to run in your tests against yours (feature `testing`).
//!
//! Implement [`StoreUnderTest`] to say how to make a client of your store,
//! then run [`inbox::all`] (an [`InboxQueue`]) and [`lease::all`] (a
//! [`LeaseStore`](crate::dedup::LeaseStore)), or each check as a test of
//! its own; for a delivery store, implement `OutboxUnderTest` and run
//! `outbox::all` (feature `sender` too). A check panics, as a test
//! assertion does, with what your store got wrong. The inbox and lease
//! checks use real time (delays, visibility timeouts and retention on the
//! store's clock, about 25 s for the inbox) and spawn tasks: run them on a
//! multi-threaded tokio runtime, `#[tokio::test(flavor = "multi_thread")]`.
//! The outbox checks pass their times to the store and take well under a
//! second.
//!
//! ```no_run
//! use hooklatch::dedup::{MemoryInbox, StoreOptions};
//! use hooklatch::testing::{StoreUnderTest, inbox};
//!
//! /// How the checks get a client of the store: here the memory store;
//! /// yours opens a client of your database with `options`.
//! struct MyStore;
//!
//! impl StoreUnderTest for MyStore {
//!     type Store = MemoryInbox;
//!
//!     async fn store(&self, options: StoreOptions) -> MemoryInbox {
//!         MemoryInbox::new().with_options(options)
//!     }
//! }
//!
//! #[tokio::test(flavor = "multi_thread")]
//! async fn my_store_keeps_every_inbox_promise() {
//!     inbox::all(&MyStore).await;
//! }
//!
//! #[tokio::test(flavor = "multi_thread")]
//! async fn my_store_accepts_one_id_once_under_concurrency() {
//!     inbox::sixty_four_concurrent_accepts_of_one_id_enqueue_once(&MyStore).await;
//! }
//! ```

pub mod inbox;
pub mod lease;
#[cfg(feature = "sender")]
pub mod outbox;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::dedup::{InboxQueue, IncomingEvent, StoreOptions};

/// How the checks make clients of the store under test.
pub trait StoreUnderTest: Sync {
    /// The store: the inbox checks need an [`InboxQueue`], the lease
    /// checks a [`LeaseStore`](crate::dedup::LeaseStore).
    type Store: Clone + Send + Sync + 'static;

    /// A client of the store that keeps `options`: its retention, its
    /// visibility timeout and its attempts before a dead letter. Each
    /// check calls it once and uses namespaces no other check uses, so
    /// one database may serve every call.
    fn store(&self, options: StoreOptions) -> impl Future<Output = Self::Store>;

    /// Whether a take hands out a namespace's events oldest first across
    /// the whole namespace (a store sharded by id may order each shard
    /// only). The order is checked only where this is true.
    fn ordered_across_the_namespace(&self) -> bool {
        true
    }
}

/// How the outbox checks open the outbox under test (feature `sender`).
#[cfg(feature = "sender")]
pub trait OutboxUnderTest: Sync {
    /// The outbox.
    type Store: crate::sender::outbox::DeliveryStore + Clone;

    /// A client of a new, empty outbox: each check calls it once and
    /// counts everything in it (a purge's count, every endpoint's
    /// deliveries), so each call needs its own database, schema or prefix.
    fn empty(&self) -> impl Future<Output = Self::Store>;

    /// Another client of the outbox `store` is a client of, as a second
    /// process or a restart opens it: what one client kept, the other
    /// must see. The default clones `store`, for clients that share memory.
    fn reopen(&self, store: &Self::Store) -> impl Future<Output = Self::Store> {
        let store = store.clone();
        async move { store }
    }
}

/// A store for one check and a namespace no other check uses.
struct Fixture<S> {
    store: S,
    namespace: String,
}

impl<S> Fixture<S> {
    async fn new<T: StoreUnderTest<Store = S>>(under: &T, options: StoreOptions) -> Self {
        Self {
            store: under.store(options).await,
            namespace: unique_namespace(),
        }
    }
}

/// A namespace unique to this process and call, and unlikely to be used
/// by another process on the same store.
fn unique_namespace() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
        % 1_000_000_000_000;
    format!(
        "check-{}-{started}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// An event whose body is its id, signed at a fixed time.
fn event<'a>(namespace: &'a str, id: &'a str) -> IncomingEvent<'a> {
    IncomingEvent::new(namespace, id, id.as_bytes()).with_signed_at(Some(1_700_000_000))
}

/// Namespaces and ids every store must refuse, next to `namespace`: an
/// empty, spaced or braced namespace, and an empty, spaced or too long id.
fn bad_keys(namespace: &str) -> [(String, String); 6] {
    [
        ("", "evt"),
        ("bad namespace", "evt"),
        ("ns{tag}", "evt"),
        (namespace, ""),
        (namespace, "has space"),
        (namespace, &"x".repeat(257)),
    ]
    .map(|(namespace, id)| (namespace.to_owned(), id.to_owned()))
}

/// Takes everything ready in `namespace` and acks each, in batches of
/// 500: the ids in the order taken.
pub async fn drain<S: InboxQueue>(store: &S, namespace: &str) -> Vec<String> {
    let mut ids = Vec::new();
    loop {
        let batch = store.take(namespace, "drain", 500).await.expect("take");
        if batch.is_empty() {
            return ids;
        }
        for delivery in batch {
            store.ack(&delivery).await.expect("ack");
            ids.push(delivery.id);
        }
    }
}
