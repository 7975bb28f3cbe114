//! [`AnyOutbox`]: one type for every outbox, chosen at run time.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{
    Attempt, DeliveryCounts, DeliveryState, DeliveryStore, DisableReason, Due, DueAcross,
    EndpointHealth, EndpointRegistry, EndpointSummary, HealthChange, Keeping, Keyed, MemoryOutbox,
    NewDelivery, OutboxView, RecentAttempt, Retention, SavedEndpoints, SendKey, Step,
    StoredDelivery, Taken, Wanted,
};
use crate::dedup::any::{store_feature, store_left_out};
use crate::sender::OutboxError;

/// What an outbox method answers.
type Answer<T> = Result<T, OutboxError>;

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Answer<T>> + Send + 'a>>;

/// A [`DeliveryStore`] (with [`Keeping`] and [`OutboxView`]) whose store
/// is chosen at run time: from a URL ([`connect`](Self::connect)), or any
/// outbox of your own ([`new`](Self::new)). A [`Dispatcher`](crate::sender::Dispatcher)
/// over it sends as over the store it wraps.
///
/// Each call boxes its future (one allocation); code that knows its store
/// at compile time can use it directly.
///
/// ```no_run
/// use hooklatch::sender::{AddressPolicy, AnyOutbox, Dispatcher, HttpTransport};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let url = std::env::var("OUTBOX_URL").unwrap_or_else(|_| "sqlite:outbox.db".into());
/// let outbox = AnyOutbox::connect(&url).await?;
/// let dispatcher = Dispatcher::new(outbox, HttpTransport::new(AddressPolicy::strict())?);
/// # let _ = dispatcher;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct AnyOutbox {
    store: Arc<dyn ErasedOutbox>,
    kind: &'static str,
}

impl std::fmt::Debug for AnyOutbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnyOutbox")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl AnyOutbox {
    /// Wraps `store`: any outbox, this crate's or your own.
    pub fn new<S: OutboxView + Keeping>(store: S) -> Self {
        Self::of(store, "custom")
    }

    /// Opens the outbox `url` names, as that store's own `connect` does,
    /// with its checks and its default tables:
    ///
    /// | URL | store | feature |
    /// |---|---|---|
    /// | `sqlite:outbox.db` | `SqliteOutbox` | `sqlite` |
    /// | `postgres://…`, `postgresql://…` | `PostgresOutbox` | `postgres` |
    /// | `redis://…`, `redis+cluster://…`, `redis+unix:///path.sock` | `RedisOutbox` | `redis` |
    /// | `rediss://…`, `rediss+cluster://…` (TLS) | `RedisOutbox` | `redis-tls` |
    /// | `memory:` | [`MemoryOutbox`], in this process only (tests) | |
    ///
    /// A URL of another scheme, or of a store this build leaves out, is
    /// [`OutboxError::StoreUrl`], which names the scheme but never the rest
    /// of the URL (it may hold a password).
    pub async fn connect(url: &str) -> Result<Self, OutboxError> {
        match store_feature(url)? {
            "" => Ok(Self::of(MemoryOutbox::new(), "memory")),
            #[cfg(feature = "sqlite")]
            "sqlite" => super::SqliteOutbox::connect(url)
                .await
                .map(|store| Self::of(store, "sqlite")),
            #[cfg(feature = "postgres")]
            "postgres" => super::PostgresOutbox::connect(url)
                .await
                .map(|store| Self::of(store, "postgres")),
            #[cfg(feature = "redis")]
            "redis" => super::RedisOutbox::connect(url)
                .await
                .map(|store| Self::of(store, "redis")),
            missing => Err(store_left_out(url, missing).into()),
        }
    }

    fn of<S: OutboxView + Keeping>(store: S, kind: &'static str) -> Self {
        Self {
            store: Arc::new(store),
            kind,
        }
    }

    /// Which store this is: `"sqlite"`, `"postgres"`, `"redis"` or
    /// `"memory"` when [`connect`](Self::connect) chose it, `"custom"` for
    /// one given to [`new`](Self::new).
    pub fn kind(&self) -> &'static str {
        self.kind
    }
}

/// The outboxes' methods with boxed futures, so that a store can stand
/// behind `dyn`.
trait ErasedOutbox: Send + Sync {
    fn save_endpoint<'a>(&'a self, name: &'a str, config: &'a str) -> Boxed<'a, u64>;
    fn remove_endpoint<'a>(&'a self, name: &'a str) -> Boxed<'a, bool>;
    fn endpoints_version<'a>(&'a self) -> Boxed<'a, u64>;
    fn saved_endpoints<'a>(&'a self) -> Boxed<'a, SavedEndpoints>;
    fn store_time<'a>(&'a self) -> Boxed<'a, SystemTime>;
    fn enqueue<'a>(
        &'a self,
        endpoint: &'a str,
        id: &'a str,
        body: &'a [u8],
        due: SystemTime,
    ) -> Boxed<'a, bool>;
    fn add_delivery<'a>(&'a self, delivery: NewDelivery<'a>) -> Boxed<'a, bool>;
    fn take_due<'a>(
        &'a self,
        endpoint: &'a str,
        now: SystemTime,
        limit: usize,
        lease: Duration,
    ) -> Boxed<'a, Due>;
    fn take_due_across<'a>(
        &'a self,
        wanted: &'a [Wanted],
        limit: usize,
        lease: Duration,
    ) -> Boxed<'a, DueAcross>;
    fn finish<'a>(
        &'a self,
        taken: &'a Taken,
        attempt: &'a Attempt,
        step: Step,
        change: Option<HealthChange>,
    ) -> Boxed<'a, EndpointHealth>;
    fn put_back<'a>(&'a self, taken: &'a Taken, due: SystemTime) -> Boxed<'a, ()>;
    fn delivery<'a>(&'a self, endpoint: &'a str, id: &'a str) -> Boxed<'a, Option<StoredDelivery>>;
    fn list<'a>(
        &'a self,
        endpoint: &'a str,
        state: DeliveryState,
        limit: usize,
    ) -> Boxed<'a, Vec<String>>;
    fn replay<'a>(&'a self, endpoint: &'a str, id: &'a str, now: SystemTime) -> Boxed<'a, bool>;
    fn replay_between<'a>(
        &'a self,
        endpoint: &'a str,
        since: SystemTime,
        until: SystemTime,
        now: SystemTime,
        limit: usize,
    ) -> Boxed<'a, Vec<String>>;
    fn enable_as_saved<'a>(&'a self, endpoint: &'a str, now: SystemTime) -> Boxed<'a, u64>;
    fn health<'a>(&'a self, endpoint: &'a str) -> Boxed<'a, EndpointHealth>;
    fn counts<'a>(&'a self, endpoint: &'a str, now: SystemTime) -> Boxed<'a, DeliveryCounts>;
    fn disable<'a>(
        &'a self,
        endpoint: &'a str,
        reason: DisableReason,
        now: SystemTime,
    ) -> Boxed<'a, bool>;
    fn enable<'a>(&'a self, endpoint: &'a str) -> Boxed<'a, ()>;
    fn enqueue_keyed<'a>(
        &'a self,
        endpoint: &'a str,
        key: SendKey<'a>,
        id: &'a str,
        body: &'a [u8],
        due: SystemTime,
    ) -> Boxed<'a, Keyed>;
    fn add_keyed_delivery<'a>(
        &'a self,
        key: SendKey<'a>,
        delivery: NewDelivery<'a>,
    ) -> Boxed<'a, Keyed>;
    fn forget_keys<'a>(&'a self, endpoint: &'a str, now: SystemTime) -> Boxed<'a, u64>;
    fn purge_outcomes<'a>(
        &'a self,
        endpoint: &'a str,
        retention: &'a Retention,
        now: SystemTime,
    ) -> Boxed<'a, u64>;
    fn purge<'a>(&'a self, finished_before: SystemTime) -> Boxed<'a, u64>;
    fn endpoint_names<'a>(&'a self) -> Boxed<'a, Vec<String>>;
    fn recent_attempts<'a>(
        &'a self,
        endpoint: &'a str,
        limit: usize,
    ) -> Boxed<'a, Vec<RecentAttempt>>;
    fn endpoint_page<'a>(
        &'a self,
        after: Option<&'a str>,
        limit: usize,
        now: SystemTime,
    ) -> Boxed<'a, Vec<EndpointSummary>>;
}

impl<S: OutboxView + Keeping> ErasedOutbox for S {
    fn save_endpoint<'a>(&'a self, name: &'a str, config: &'a str) -> Boxed<'a, u64> {
        Box::pin(EndpointRegistry::save_endpoint(self, name, config))
    }
    fn remove_endpoint<'a>(&'a self, name: &'a str) -> Boxed<'a, bool> {
        Box::pin(EndpointRegistry::remove_endpoint(self, name))
    }
    fn endpoints_version<'a>(&'a self) -> Boxed<'a, u64> {
        Box::pin(EndpointRegistry::endpoints_version(self))
    }
    fn saved_endpoints<'a>(&'a self) -> Boxed<'a, SavedEndpoints> {
        Box::pin(EndpointRegistry::saved_endpoints(self))
    }
    fn store_time<'a>(&'a self) -> Boxed<'a, SystemTime> {
        Box::pin(DeliveryStore::store_time(self))
    }
    fn enqueue<'a>(
        &'a self,
        endpoint: &'a str,
        id: &'a str,
        body: &'a [u8],
        due: SystemTime,
    ) -> Boxed<'a, bool> {
        Box::pin(DeliveryStore::enqueue(self, endpoint, id, body, due))
    }
    fn add_delivery<'a>(&'a self, delivery: NewDelivery<'a>) -> Boxed<'a, bool> {
        Box::pin(DeliveryStore::add_delivery(self, delivery))
    }
    fn take_due<'a>(
        &'a self,
        endpoint: &'a str,
        now: SystemTime,
        limit: usize,
        lease: Duration,
    ) -> Boxed<'a, Due> {
        Box::pin(DeliveryStore::take_due(self, endpoint, now, limit, lease))
    }
    fn take_due_across<'a>(
        &'a self,
        wanted: &'a [Wanted],
        limit: usize,
        lease: Duration,
    ) -> Boxed<'a, DueAcross> {
        Box::pin(DeliveryStore::take_due_across(self, wanted, limit, lease))
    }
    fn finish<'a>(
        &'a self,
        taken: &'a Taken,
        attempt: &'a Attempt,
        step: Step,
        change: Option<HealthChange>,
    ) -> Boxed<'a, EndpointHealth> {
        Box::pin(DeliveryStore::finish(self, taken, attempt, step, change))
    }
    fn put_back<'a>(&'a self, taken: &'a Taken, due: SystemTime) -> Boxed<'a, ()> {
        Box::pin(DeliveryStore::put_back(self, taken, due))
    }
    fn delivery<'a>(&'a self, endpoint: &'a str, id: &'a str) -> Boxed<'a, Option<StoredDelivery>> {
        Box::pin(DeliveryStore::delivery(self, endpoint, id))
    }
    fn list<'a>(
        &'a self,
        endpoint: &'a str,
        state: DeliveryState,
        limit: usize,
    ) -> Boxed<'a, Vec<String>> {
        Box::pin(DeliveryStore::list(self, endpoint, state, limit))
    }
    fn replay<'a>(&'a self, endpoint: &'a str, id: &'a str, now: SystemTime) -> Boxed<'a, bool> {
        Box::pin(DeliveryStore::replay(self, endpoint, id, now))
    }
    fn replay_between<'a>(
        &'a self,
        endpoint: &'a str,
        since: SystemTime,
        until: SystemTime,
        now: SystemTime,
        limit: usize,
    ) -> Boxed<'a, Vec<String>> {
        Box::pin(DeliveryStore::replay_between(
            self, endpoint, since, until, now, limit,
        ))
    }
    fn enable_as_saved<'a>(&'a self, endpoint: &'a str, now: SystemTime) -> Boxed<'a, u64> {
        Box::pin(DeliveryStore::enable_as_saved(self, endpoint, now))
    }
    fn health<'a>(&'a self, endpoint: &'a str) -> Boxed<'a, EndpointHealth> {
        Box::pin(DeliveryStore::health(self, endpoint))
    }
    fn counts<'a>(&'a self, endpoint: &'a str, now: SystemTime) -> Boxed<'a, DeliveryCounts> {
        Box::pin(DeliveryStore::counts(self, endpoint, now))
    }
    fn disable<'a>(
        &'a self,
        endpoint: &'a str,
        reason: DisableReason,
        now: SystemTime,
    ) -> Boxed<'a, bool> {
        Box::pin(DeliveryStore::disable(self, endpoint, reason, now))
    }
    fn enable<'a>(&'a self, endpoint: &'a str) -> Boxed<'a, ()> {
        Box::pin(DeliveryStore::enable(self, endpoint))
    }
    fn enqueue_keyed<'a>(
        &'a self,
        endpoint: &'a str,
        key: SendKey<'a>,
        id: &'a str,
        body: &'a [u8],
        due: SystemTime,
    ) -> Boxed<'a, Keyed> {
        Box::pin(Keeping::enqueue_keyed(self, endpoint, key, id, body, due))
    }
    fn add_keyed_delivery<'a>(
        &'a self,
        key: SendKey<'a>,
        delivery: NewDelivery<'a>,
    ) -> Boxed<'a, Keyed> {
        Box::pin(Keeping::add_keyed_delivery(self, key, delivery))
    }
    fn forget_keys<'a>(&'a self, endpoint: &'a str, now: SystemTime) -> Boxed<'a, u64> {
        Box::pin(Keeping::forget_keys(self, endpoint, now))
    }
    fn purge_outcomes<'a>(
        &'a self,
        endpoint: &'a str,
        retention: &'a Retention,
        now: SystemTime,
    ) -> Boxed<'a, u64> {
        Box::pin(Keeping::purge_outcomes(self, endpoint, retention, now))
    }
    fn purge<'a>(&'a self, finished_before: SystemTime) -> Boxed<'a, u64> {
        Box::pin(Keeping::purge(self, finished_before))
    }
    fn endpoint_names<'a>(&'a self) -> Boxed<'a, Vec<String>> {
        Box::pin(OutboxView::endpoint_names(self))
    }
    fn recent_attempts<'a>(
        &'a self,
        endpoint: &'a str,
        limit: usize,
    ) -> Boxed<'a, Vec<RecentAttempt>> {
        Box::pin(OutboxView::recent_attempts(self, endpoint, limit))
    }
    fn endpoint_page<'a>(
        &'a self,
        after: Option<&'a str>,
        limit: usize,
        now: SystemTime,
    ) -> Boxed<'a, Vec<EndpointSummary>> {
        Box::pin(OutboxView::endpoint_page(self, after, limit, now))
    }
}

impl EndpointRegistry for AnyOutbox {
    async fn save_endpoint(&self, name: &str, config: &str) -> Answer<u64> {
        self.store.save_endpoint(name, config).await
    }
    async fn remove_endpoint(&self, name: &str) -> Answer<bool> {
        self.store.remove_endpoint(name).await
    }
    async fn endpoints_version(&self) -> Answer<u64> {
        self.store.endpoints_version().await
    }
    async fn saved_endpoints(&self) -> Answer<SavedEndpoints> {
        self.store.saved_endpoints().await
    }
}

impl DeliveryStore for AnyOutbox {
    async fn store_time(&self) -> Answer<SystemTime> {
        self.store.store_time().await
    }
    async fn enqueue(
        &self,
        endpoint: &str,
        id: &str,
        body: &[u8],
        due: SystemTime,
    ) -> Answer<bool> {
        self.store.enqueue(endpoint, id, body, due).await
    }
    async fn add_delivery(&self, delivery: NewDelivery<'_>) -> Answer<bool> {
        self.store.add_delivery(delivery).await
    }
    async fn take_due(
        &self,
        endpoint: &str,
        now: SystemTime,
        limit: usize,
        lease: Duration,
    ) -> Answer<Due> {
        self.store.take_due(endpoint, now, limit, lease).await
    }
    async fn take_due_across(
        &self,
        wanted: &[Wanted],
        limit: usize,
        lease: Duration,
    ) -> Answer<DueAcross> {
        self.store.take_due_across(wanted, limit, lease).await
    }
    async fn finish(
        &self,
        taken: &Taken,
        attempt: &Attempt,
        step: Step,
        change: Option<HealthChange>,
    ) -> Answer<EndpointHealth> {
        self.store.finish(taken, attempt, step, change).await
    }
    async fn put_back(&self, taken: &Taken, due: SystemTime) -> Answer<()> {
        self.store.put_back(taken, due).await
    }
    async fn delivery(&self, endpoint: &str, id: &str) -> Answer<Option<StoredDelivery>> {
        self.store.delivery(endpoint, id).await
    }
    async fn list(
        &self,
        endpoint: &str,
        state: DeliveryState,
        limit: usize,
    ) -> Answer<Vec<String>> {
        self.store.list(endpoint, state, limit).await
    }
    async fn replay(&self, endpoint: &str, id: &str, now: SystemTime) -> Answer<bool> {
        self.store.replay(endpoint, id, now).await
    }
    async fn replay_between(
        &self,
        endpoint: &str,
        since: SystemTime,
        until: SystemTime,
        now: SystemTime,
        limit: usize,
    ) -> Answer<Vec<String>> {
        self.store
            .replay_between(endpoint, since, until, now, limit)
            .await
    }
    async fn enable_as_saved(&self, endpoint: &str, now: SystemTime) -> Answer<u64> {
        self.store.enable_as_saved(endpoint, now).await
    }
    async fn health(&self, endpoint: &str) -> Answer<EndpointHealth> {
        self.store.health(endpoint).await
    }
    async fn counts(&self, endpoint: &str, now: SystemTime) -> Answer<DeliveryCounts> {
        self.store.counts(endpoint, now).await
    }
    async fn disable(
        &self,
        endpoint: &str,
        reason: DisableReason,
        now: SystemTime,
    ) -> Answer<bool> {
        self.store.disable(endpoint, reason, now).await
    }
    async fn enable(&self, endpoint: &str) -> Answer<()> {
        self.store.enable(endpoint).await
    }
}

impl Keeping for AnyOutbox {
    async fn enqueue_keyed(
        &self,
        endpoint: &str,
        key: SendKey<'_>,
        id: &str,
        body: &[u8],
        due: SystemTime,
    ) -> Answer<Keyed> {
        self.store.enqueue_keyed(endpoint, key, id, body, due).await
    }
    async fn add_keyed_delivery(
        &self,
        key: SendKey<'_>,
        delivery: NewDelivery<'_>,
    ) -> Answer<Keyed> {
        self.store.add_keyed_delivery(key, delivery).await
    }
    async fn forget_keys(&self, endpoint: &str, now: SystemTime) -> Answer<u64> {
        self.store.forget_keys(endpoint, now).await
    }
    async fn purge_outcomes(
        &self,
        endpoint: &str,
        retention: &Retention,
        now: SystemTime,
    ) -> Answer<u64> {
        self.store.purge_outcomes(endpoint, retention, now).await
    }
    async fn purge(&self, finished_before: SystemTime) -> Answer<u64> {
        self.store.purge(finished_before).await
    }
}

impl OutboxView for AnyOutbox {
    async fn endpoint_names(&self) -> Answer<Vec<String>> {
        self.store.endpoint_names().await
    }
    async fn recent_attempts(&self, endpoint: &str, limit: usize) -> Answer<Vec<RecentAttempt>> {
        self.store.recent_attempts(endpoint, limit).await
    }
    async fn endpoint_page(
        &self,
        after: Option<&str>,
        limit: usize,
        now: SystemTime,
    ) -> Answer<Vec<EndpointSummary>> {
        self.store.endpoint_page(after, limit, now).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    // Not `super::*`: the erased trait's methods would shadow the stores'.
    use super::{
        Answer, AnyOutbox, Attempt, DeliveryCounts, DeliveryState, DeliveryStore, DisableReason,
        Due, DueAcross, EndpointHealth, EndpointRegistry, EndpointSummary, HealthChange, Keeping,
        Keyed, MemoryOutbox, NewDelivery, OutboxView, RecentAttempt, Retention, SavedEndpoints,
        SendKey, Step, StoredDelivery, Taken, Wanted,
    };

    /// An outbox whose own versions of the provided methods differ from
    /// the traits' defaults, so that a wrapper that fell back to a default
    /// would show.
    struct Marked(MemoryOutbox);

    const MARKED_TIME: Duration = Duration::from_secs(86_400);

    impl EndpointRegistry for Marked {
        async fn save_endpoint(&self, name: &str, config: &str) -> Answer<u64> {
            self.0.save_endpoint(name, config).await
        }
        async fn remove_endpoint(&self, name: &str) -> Answer<bool> {
            self.0.remove_endpoint(name).await
        }
        async fn endpoints_version(&self) -> Answer<u64> {
            self.0.endpoints_version().await
        }
        async fn saved_endpoints(&self) -> Answer<SavedEndpoints> {
            self.0.saved_endpoints().await
        }
    }

    impl DeliveryStore for Marked {
        async fn store_time(&self) -> Answer<SystemTime> {
            Ok(UNIX_EPOCH + MARKED_TIME)
        }
        async fn take_due_across(&self, _: &[Wanted], _: usize, _: Duration) -> Answer<DueAcross> {
            let mut due = DueAcross::default();
            due.unanswered.push("marked".to_owned());
            Ok(due)
        }
        async fn enqueue(&self, _: &str, _: &str, _: &[u8], _: SystemTime) -> Answer<bool> {
            Ok(false)
        }
        async fn replay_between(
            &self,
            _: &str,
            _: SystemTime,
            _: SystemTime,
            _: SystemTime,
            _: usize,
        ) -> Answer<Vec<String>> {
            Ok(vec!["marked".to_owned()])
        }
        async fn enable_as_saved(&self, _: &str, _: SystemTime) -> Answer<u64> {
            Ok(7)
        }
        async fn health(&self, _: &str) -> Answer<EndpointHealth> {
            Ok(EndpointHealth {
                failing_since: Some(UNIX_EPOCH + MARKED_TIME),
                disabled: None,
            })
        }
        async fn add_delivery(&self, delivery: NewDelivery<'_>) -> Answer<bool> {
            self.0.add_delivery(delivery).await
        }
        async fn take_due(
            &self,
            e: &str,
            now: SystemTime,
            n: usize,
            lease: Duration,
        ) -> Answer<Due> {
            self.0.take_due(e, now, n, lease).await
        }
        async fn finish(
            &self,
            taken: &Taken,
            attempt: &Attempt,
            step: Step,
            change: Option<HealthChange>,
        ) -> Answer<EndpointHealth> {
            self.0.finish(taken, attempt, step, change).await
        }
        async fn put_back(&self, taken: &Taken, due: SystemTime) -> Answer<()> {
            self.0.put_back(taken, due).await
        }
        async fn delivery(&self, e: &str, id: &str) -> Answer<Option<StoredDelivery>> {
            self.0.delivery(e, id).await
        }
        async fn list(&self, e: &str, state: DeliveryState, n: usize) -> Answer<Vec<String>> {
            self.0.list(e, state, n).await
        }
        async fn replay(&self, e: &str, id: &str, now: SystemTime) -> Answer<bool> {
            self.0.replay(e, id, now).await
        }
        async fn counts(&self, e: &str, now: SystemTime) -> Answer<DeliveryCounts> {
            self.0.counts(e, now).await
        }
        async fn disable(&self, e: &str, reason: DisableReason, now: SystemTime) -> Answer<bool> {
            self.0.disable(e, reason, now).await
        }
        async fn enable(&self, e: &str) -> Answer<()> {
            self.0.enable(e).await
        }
    }

    impl Keeping for Marked {
        async fn enqueue_keyed(
            &self,
            _: &str,
            _: SendKey<'_>,
            _: &str,
            _: &[u8],
            _: SystemTime,
        ) -> Answer<Keyed> {
            Ok(Keyed {
                id: "marked".to_owned(),
                enqueued: false,
            })
        }
        async fn add_keyed_delivery(&self, key: SendKey<'_>, d: NewDelivery<'_>) -> Answer<Keyed> {
            self.0.add_keyed_delivery(key, d).await
        }
        async fn forget_keys(&self, e: &str, now: SystemTime) -> Answer<u64> {
            self.0.forget_keys(e, now).await
        }
        async fn purge_outcomes(&self, e: &str, r: &Retention, now: SystemTime) -> Answer<u64> {
            self.0.purge_outcomes(e, r, now).await
        }
        async fn purge(&self, before: SystemTime) -> Answer<u64> {
            self.0.purge(before).await
        }
    }

    impl OutboxView for Marked {
        async fn endpoint_names(&self) -> Answer<Vec<String>> {
            Ok(vec!["listed".to_owned()])
        }
        async fn recent_attempts(&self, e: &str, n: usize) -> Answer<Vec<RecentAttempt>> {
            self.0.recent_attempts(e, n).await
        }
        async fn endpoint_page(
            &self,
            _: Option<&str>,
            _: usize,
            _: SystemTime,
        ) -> Answer<Vec<EndpointSummary>> {
            Ok(Vec::new())
        }
    }

    #[tokio::test]
    async fn the_stores_own_methods_are_the_ones_called() {
        let store = AnyOutbox::new(Marked(MemoryOutbox::new()));
        assert_eq!(store.kind(), "custom");
        assert_eq!(store.store_time().await.unwrap(), UNIX_EPOCH + MARKED_TIME);
        let due = store
            .take_due_across(&[], 10, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(due.unanswered, ["marked"]);
        // The default page would read the one listed name.
        let page = store.endpoint_page(None, 10, SystemTime::now()).await;
        assert!(page.unwrap().is_empty());
        let health = store.health("unknown").await.unwrap();
        assert_eq!(health.failing_since, Some(UNIX_EPOCH + MARKED_TIME));
        let (now, epoch) = (SystemTime::now(), UNIX_EPOCH);
        let replayed = store.replay_between("unknown", epoch, now, now, 10).await;
        assert_eq!(replayed.unwrap(), ["marked"]);
        assert_eq!(store.enable_as_saved("unknown", now).await.unwrap(), 7);
        // The defaults would add these deliveries to the memory outbox.
        assert!(!store.enqueue("unknown", "id", b"{}", now).await.unwrap());
        let key = SendKey {
            key: "k",
            now,
            window: Duration::from_secs(60),
        };
        let keyed = store.enqueue_keyed("unknown", key, "id", b"{}", now).await;
        assert_eq!(keyed.unwrap().id, "marked");
    }

    #[tokio::test]
    async fn memory_is_chosen_by_its_scheme_and_unknown_schemes_are_refused() {
        let store = AnyOutbox::connect("memory:").await.unwrap();
        assert_eq!(store.kind(), "memory");
        assert!(store.endpoint_names().await.unwrap().is_empty());
        let refused = AnyOutbox::connect("mysql://user:secret@db/outbox").await;
        let error = refused.unwrap_err();
        assert!(
            matches!(error, crate::sender::OutboxError::StoreUrl(_)),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(
            message
                .starts_with("cannot open an outbox from this URL: `mysql:` is no store's scheme"),
            "{message}"
        );
        assert!(!message.contains("secret"), "{message}");
    }
}
