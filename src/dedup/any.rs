//! [`AnyInbox`]: one type for every store, chosen at run time.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::{
    Acceptance, Answer, Claim, DedupError, GiveBack, Inbox, InboxEntry, InboxQueue, InboxStats,
    IncomingEvent, Lease, LeaseStore, MemoryInbox, NackOutcome, StoreOptions, Tail, TailedEvent,
};

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Answer<T>> + Send + 'a>>;

/// An [`Inbox`], [`InboxQueue`] and [`LeaseStore`] whose store is chosen at run time: from
/// a URL ([`connect`](Self::connect)), or any store of your own
/// ([`new`](Self::new)). For a service that reads its store from its
/// settings, and tools that open whichever store they are pointed at.
///
/// Each call boxes its future (one allocation); code that knows its store
/// at compile time can use it directly.
///
/// ```no_run
/// use hooklatch::dedup::{AnyInbox, InboxQueue};
///
/// # async fn run() -> Result<(), hooklatch::dedup::DedupError> {
/// let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| "sqlite:hooklatch.db".into());
/// let store = AnyInbox::connect(&url).await?;
/// println!("{} waiting", store.stats("stripe").await?.waiting);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct AnyInbox {
    store: Arc<dyn ErasedStore>,
    kind: &'static str,
}

impl std::fmt::Debug for AnyInbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnyInbox")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// The URL schemes [`AnyInbox::connect`] knows, and the feature each needs.
const SCHEMES: &[(&str, &str)] = &[
    ("sqlite:", "sqlite"),
    ("postgres://", "postgres"),
    ("postgresql://", "postgres"),
    ("redis://", "redis"),
    ("rediss://", "redis-tls"),
    ("redis+cluster://", "redis"),
    ("redis+unix://", "redis"),
    ("rediss+cluster://", "redis-tls"),
    ("memory:", ""),
];

impl AnyInbox {
    /// Wraps `store`: any store that is an [`InboxQueue`] (so an
    /// [`Inbox`] too) and a [`LeaseStore`], this crate's or your own. A
    /// store that only accepts goes to the receivers as it is.
    pub fn new<S: InboxQueue + LeaseStore + 'static>(store: S) -> Self {
        Self {
            store: Arc::new(store),
            kind: "custom",
        }
    }

    /// Opens the store `url` names, as that store's own `connect` does,
    /// with its checks:
    ///
    /// | URL | store | feature |
    /// |---|---|---|
    /// | `sqlite:webhooks.db` | `SqliteInbox` | `sqlite` |
    /// | `postgres://…`, `postgresql://…` | `PostgresInbox` | `postgres` |
    /// | `redis://…`, `redis+cluster://…`, `redis+unix:///path.sock` | `RedisInbox` | `redis` |
    /// | `rediss://…`, `rediss+cluster://…` (TLS) | `RedisInbox` | `redis-tls` |
    /// | `memory:` | [`MemoryInbox`], in this process only (tests) | |
    ///
    /// A URL of another scheme, or of a store this build leaves out, is
    /// [`DedupError::StoreUrl`], which names the scheme but never the rest
    /// of the URL (it may hold a password).
    pub async fn connect(url: &str) -> Result<Self, DedupError> {
        Self::connect_with(url, StoreOptions::default()).await
    }

    /// [`connect`](Self::connect), then the store's `with_options(options)`:
    /// its retention, visibility timeout and attempts.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use hooklatch::dedup::{AnyInbox, StoreOptions};
    ///
    /// # async fn run() -> Result<(), hooklatch::dedup::DedupError> {
    /// let options = StoreOptions::default().with_visibility_timeout(Duration::from_secs(120));
    /// let store = AnyInbox::connect_with("postgres://hooks@db/hooks", options).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_with(url: &str, options: StoreOptions) -> Result<Self, DedupError> {
        let feature = store_feature(url)?;
        match feature {
            "" => Ok(Self::of(MemoryInbox::new().with_options(options), "memory")),
            #[cfg(feature = "sqlite")]
            "sqlite" => super::SqliteInbox::connect(url)
                .await
                .map(|store| Self::of(store.with_options(options), "sqlite")),
            #[cfg(feature = "postgres")]
            "postgres" => super::PostgresInbox::connect(url)
                .await
                .map(|store| Self::of(store.with_options(options), "postgres")),
            #[cfg(feature = "redis")]
            "redis" => super::RedisInbox::connect(url)
                .await
                .map(|store| Self::of(store.with_options(options), "redis")),
            missing => Err(store_left_out(url, missing)),
        }
    }

    fn of<S: InboxQueue + LeaseStore + 'static>(store: S, kind: &'static str) -> Self {
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

/// The feature that builds the store `url` names: `""` for `memory:`, and
/// a TLS scheme's plain one once its TLS feature is built. A URL of no
/// store is [`DedupError::StoreUrl`], naming its scheme but never the rest
/// (it may hold a password).
pub(crate) fn store_feature(url: &str) -> Result<&'static str, DedupError> {
    let Some((_, feature)) = known_scheme(url) else {
        const USE: &str = "use sqlite:PATH, postgres://…, redis://…, redis+cluster://… or memory:";
        // Only a scheme's characters are shown: what follows may be a
        // password, and so may a value that has no scheme at all.
        let scheme = url
            .split_once(':')
            .map(|(scheme, _)| scheme)
            .filter(|scheme| {
                scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                    && scheme
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            });
        return Err(DedupError::StoreUrl(match scheme {
            Some(scheme) => format!("`{scheme}:` is no store's scheme; {USE}"),
            None => format!("a store URL starts with its scheme; {USE}"),
        }));
    };
    // A TLS scheme opens the same store, once its feature is built.
    Ok(match feature {
        "redis-tls" if cfg!(feature = "redis-tls") => "redis",
        other => other,
    })
}

/// The error for a store `url` names that this build leaves out.
pub(crate) fn store_left_out(url: &str, feature: &str) -> DedupError {
    let scheme = known_scheme(url).map_or("this scheme", |(scheme, _)| scheme);
    DedupError::StoreUrl(format!(
        "`{scheme}` needs hooklatch's `{feature}` feature, which this build leaves out"
    ))
}

/// The scheme `url` starts with, and the feature that builds its store.
fn known_scheme(url: &str) -> Option<(&'static str, &'static str)> {
    SCHEMES
        .iter()
        .find(|(scheme, _)| url.starts_with(scheme))
        .copied()
}

/// The stores' methods with boxed futures, so that a store can stand
/// behind `dyn`.
trait ErasedStore: Send + Sync {
    fn accept<'a>(&'a self, event: &'a IncomingEvent<'a>) -> Boxed<'a, Acceptance>;
    fn take<'a>(
        &'a self,
        namespace: &'a str,
        consumer: &'a str,
        max: usize,
    ) -> Boxed<'a, Vec<InboxEntry>>;
    fn ack<'a>(&'a self, delivery: &'a InboxEntry) -> Boxed<'a, ()>;
    fn ack_many<'a>(&'a self, deliveries: &'a [InboxEntry]) -> Boxed<'a, Vec<bool>>;
    fn extend_visibility<'a>(&'a self, delivery: &'a InboxEntry) -> Boxed<'a, ()>;
    fn give_back<'a>(
        &'a self,
        delivery: &'a InboxEntry,
        how: GiveBack,
        reason: &'a str,
    ) -> Boxed<'a, NackOutcome>;
    fn visibility_timeout(&self) -> Duration;
    fn watch_accepts(&self, namespace: &str) -> Option<super::AcceptWatch>;
    fn dead_letters<'a>(&'a self, namespace: &'a str, max: usize) -> Boxed<'a, Vec<InboxEntry>>;
    fn stats<'a>(&'a self, namespace: &'a str) -> Boxed<'a, InboxStats>;
    fn requeue_dead<'a>(&'a self, namespace: &'a str, id: Option<&'a str>) -> Boxed<'a, u64>;
    fn tail<'a>(&'a self, tail: &'a mut Tail, max: usize) -> Boxed<'a, Vec<TailedEvent>>;
    fn claim<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
        lease_for: Duration,
    ) -> Boxed<'a, Claim>;
    fn complete<'a>(&'a self, lease: &'a Lease) -> Boxed<'a, ()>;
    fn release<'a>(&'a self, lease: &'a Lease) -> Boxed<'a, ()>;
    fn extend_lease<'a>(&'a self, lease: &'a Lease, lease_for: Duration) -> Boxed<'a, ()>;
}

impl<S: InboxQueue + LeaseStore> ErasedStore for S {
    fn accept<'a>(&'a self, event: &'a IncomingEvent<'a>) -> Boxed<'a, Acceptance> {
        Box::pin(Inbox::accept(self, event))
    }
    fn take<'a>(
        &'a self,
        namespace: &'a str,
        consumer: &'a str,
        max: usize,
    ) -> Boxed<'a, Vec<InboxEntry>> {
        Box::pin(InboxQueue::take(self, namespace, consumer, max))
    }
    fn ack<'a>(&'a self, delivery: &'a InboxEntry) -> Boxed<'a, ()> {
        Box::pin(InboxQueue::ack(self, delivery))
    }
    fn ack_many<'a>(&'a self, deliveries: &'a [InboxEntry]) -> Boxed<'a, Vec<bool>> {
        Box::pin(InboxQueue::ack_many(self, deliveries))
    }
    fn extend_visibility<'a>(&'a self, delivery: &'a InboxEntry) -> Boxed<'a, ()> {
        Box::pin(InboxQueue::extend_visibility(self, delivery))
    }
    fn give_back<'a>(
        &'a self,
        delivery: &'a InboxEntry,
        how: GiveBack,
        reason: &'a str,
    ) -> Boxed<'a, NackOutcome> {
        Box::pin(InboxQueue::give_back(self, delivery, how, reason))
    }
    fn visibility_timeout(&self) -> Duration {
        InboxQueue::visibility_timeout(self)
    }
    fn watch_accepts(&self, namespace: &str) -> Option<super::AcceptWatch> {
        InboxQueue::watch_accepts(self, namespace)
    }
    fn dead_letters<'a>(&'a self, namespace: &'a str, max: usize) -> Boxed<'a, Vec<InboxEntry>> {
        Box::pin(InboxQueue::dead_letters(self, namespace, max))
    }
    fn stats<'a>(&'a self, namespace: &'a str) -> Boxed<'a, InboxStats> {
        Box::pin(InboxQueue::stats(self, namespace))
    }
    fn requeue_dead<'a>(&'a self, namespace: &'a str, id: Option<&'a str>) -> Boxed<'a, u64> {
        Box::pin(InboxQueue::requeue_dead(self, namespace, id))
    }
    fn tail<'a>(&'a self, tail: &'a mut Tail, max: usize) -> Boxed<'a, Vec<TailedEvent>> {
        Box::pin(InboxQueue::tail(self, tail, max))
    }
    fn claim<'a>(
        &'a self,
        namespace: &'a str,
        id: &'a str,
        lease_for: Duration,
    ) -> Boxed<'a, Claim> {
        Box::pin(LeaseStore::claim(self, namespace, id, lease_for))
    }
    fn complete<'a>(&'a self, lease: &'a Lease) -> Boxed<'a, ()> {
        Box::pin(LeaseStore::complete(self, lease))
    }
    fn release<'a>(&'a self, lease: &'a Lease) -> Boxed<'a, ()> {
        Box::pin(LeaseStore::release(self, lease))
    }
    fn extend_lease<'a>(&'a self, lease: &'a Lease, lease_for: Duration) -> Boxed<'a, ()> {
        Box::pin(LeaseStore::extend_lease(self, lease, lease_for))
    }
}

impl Inbox for AnyInbox {
    async fn accept(&self, event: &IncomingEvent<'_>) -> Answer<Acceptance> {
        self.store.accept(event).await
    }
}

impl InboxQueue for AnyInbox {
    async fn take(&self, namespace: &str, consumer: &str, max: usize) -> Answer<Vec<InboxEntry>> {
        self.store.take(namespace, consumer, max).await
    }

    async fn ack(&self, delivery: &InboxEntry) -> Answer<()> {
        self.store.ack(delivery).await
    }

    async fn ack_many(&self, deliveries: &[InboxEntry]) -> Answer<Vec<bool>> {
        self.store.ack_many(deliveries).await
    }

    async fn extend_visibility(&self, delivery: &InboxEntry) -> Answer<()> {
        self.store.extend_visibility(delivery).await
    }

    async fn give_back(
        &self,
        delivery: &InboxEntry,
        how: GiveBack,
        reason: &str,
    ) -> Answer<NackOutcome> {
        self.store.give_back(delivery, how, reason).await
    }

    fn visibility_timeout(&self) -> Duration {
        self.store.visibility_timeout()
    }

    fn watch_accepts(&self, namespace: &str) -> Option<super::AcceptWatch> {
        self.store.watch_accepts(namespace)
    }

    async fn dead_letters(&self, namespace: &str, max: usize) -> Answer<Vec<InboxEntry>> {
        self.store.dead_letters(namespace, max).await
    }

    async fn stats(&self, namespace: &str) -> Answer<InboxStats> {
        self.store.stats(namespace).await
    }

    async fn requeue_dead(&self, namespace: &str, id: Option<&str>) -> Answer<u64> {
        self.store.requeue_dead(namespace, id).await
    }

    async fn tail(&self, tail: &mut Tail, max: usize) -> Answer<Vec<TailedEvent>> {
        self.store.tail(tail, max).await
    }
}

impl LeaseStore for AnyInbox {
    async fn claim(&self, namespace: &str, id: &str, lease_for: Duration) -> Answer<Claim> {
        self.store.claim(namespace, id, lease_for).await
    }

    async fn complete(&self, lease: &Lease) -> Answer<()> {
        self.store.complete(lease).await
    }

    async fn release(&self, lease: &Lease) -> Answer<()> {
        self.store.release(lease).await
    }

    async fn extend_lease(&self, lease: &Lease, lease_for: Duration) -> Answer<()> {
        self.store.extend_lease(lease, lease_for).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_url_of_no_store_names_its_scheme_and_not_the_rest() {
        let error = AnyInbox::connect("mysql://user:hunter2@db/webhooks")
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(matches!(error, DedupError::StoreUrl(_)), "{text}");
        assert!(text.contains("`mysql:`"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        for no_scheme in ["webhooks.db", "memory", "password=hunter2 host=db:5432"] {
            let error = AnyInbox::connect(no_scheme).await.unwrap_err();
            let text = error.to_string();
            assert!(matches!(error, DedupError::StoreUrl(_)), "{text}");
            assert!(text.contains("starts with its scheme"), "{text}");
            assert!(!text.contains("hunter2"), "{text}");
        }
    }

    /// A Redis socket URL reaches Redis (which finds no socket here): it
    /// is a store's scheme, not a usage error.
    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn a_redis_socket_url_is_opened_as_redis() {
        let missing =
            std::env::temp_dir().join(format!("hooklatch-none-{}.sock", std::process::id()));
        let url = format!("redis+unix://{}", missing.display());
        let error = AnyInbox::connect(&url).await.unwrap_err();
        assert!(!matches!(error, DedupError::StoreUrl(_)), "{error}");
    }

    /// A store whose batched ack differs from acking one by one, so that a
    /// wrapper that fell back to the trait's default would show.
    struct BatchesOnly;

    impl Inbox for BatchesOnly {
        async fn accept(&self, _: &IncomingEvent<'_>) -> Answer<Acceptance> {
            unreachable!()
        }
    }

    impl InboxQueue for BatchesOnly {
        async fn take(&self, _: &str, _: &str, _: usize) -> Answer<Vec<InboxEntry>> {
            unreachable!()
        }
        async fn ack(&self, _: &InboxEntry) -> Answer<()> {
            Err(DedupError::DeliveryLost)
        }
        async fn ack_many(&self, deliveries: &[InboxEntry]) -> Answer<Vec<bool>> {
            Ok(vec![true; deliveries.len()])
        }
        async fn extend_visibility(&self, _: &InboxEntry) -> Answer<()> {
            unreachable!()
        }
        async fn give_back(&self, _: &InboxEntry, _: GiveBack, _: &str) -> Answer<NackOutcome> {
            unreachable!()
        }
        async fn dead_letters(&self, _: &str, _: usize) -> Answer<Vec<InboxEntry>> {
            unreachable!()
        }
        async fn stats(&self, _: &str) -> Answer<InboxStats> {
            unreachable!()
        }
        async fn requeue_dead(&self, _: &str, _: Option<&str>) -> Answer<u64> {
            unreachable!()
        }
    }

    impl LeaseStore for BatchesOnly {
        async fn claim(&self, _: &str, _: &str, _: Duration) -> Answer<Claim> {
            unreachable!()
        }
        async fn complete(&self, _: &Lease) -> Answer<()> {
            unreachable!()
        }
        async fn release(&self, _: &Lease) -> Answer<()> {
            unreachable!()
        }
        async fn extend_lease(&self, _: &Lease, _: Duration) -> Answer<()> {
            unreachable!()
        }
    }

    #[tokio::test]
    async fn the_stores_own_batched_ack_is_the_one_called() {
        let memory = MemoryInbox::new();
        let event = IncomingEvent::new("ns", "evt_1", b"{}");
        let accepted = Inbox::accept(&memory, &event).await.unwrap();
        assert_eq!(accepted, Acceptance::Accepted);
        let taken = InboxQueue::take(&memory, "ns", "w", 1).await.unwrap();
        let store = AnyInbox::new(BatchesOnly);
        assert_eq!(store.kind(), "custom");
        assert_eq!(InboxQueue::ack_many(&store, &taken).await.unwrap(), [true]);
        assert!(matches!(
            InboxQueue::ack(&store, &taken[0]).await,
            Err(DedupError::DeliveryLost)
        ));
    }

    #[tokio::test]
    async fn memory_is_chosen_by_its_scheme() {
        let store = AnyInbox::connect("memory:").await.unwrap();
        assert_eq!(store.kind(), "memory");
        assert_eq!(
            InboxQueue::stats(&store, "ns").await.unwrap(),
            InboxStats::default()
        );
    }
}
