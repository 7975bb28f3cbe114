//! [`Dispatcher`]: deliveries run in the background from a store, so a
//! restart loses none of them.

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
pub(crate) mod codes;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;

use super::deliver::{
    Attempt, Endpoint, Final, Next, Policy, Transport, WaitReason, attempt_once, first_wait,
    plan_next,
};
use super::outcome::Outcome;
use crate::dedup::{DedupError, check_key};
use crate::verify::Signer;

pub use memory::MemoryDeliveries;
#[cfg(feature = "postgres")]
pub use postgres::PostgresDeliveries;
#[cfg(feature = "redis")]
pub use redis::RedisDeliveries;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteDeliveries;

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliveryState {
    /// Waiting for its next attempt, or in one.
    Pending,
    /// A 2xx answer.
    Delivered,
    /// The endpoint answered 410 Gone.
    Gone,
    /// Out of attempts, or answered with a give-up status; it can be
    /// replayed.
    Dead,
}

impl DeliveryState {
    /// The state a delivery that ended in `outcome` is in.
    pub fn ended(outcome: Final) -> Self {
        match outcome {
            Final::Delivered => Self::Delivered,
            Final::Gone => Self::Gone,
            Final::Dead => Self::Dead,
        }
    }
}

/// A delivery a dispatcher has leased for one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The endpoint's name.
    pub endpoint: String,
    /// The webhook id.
    pub id: String,
    /// The body.
    pub body: Vec<u8>,
    /// Attempts since it was enqueued or last replayed: the position in the
    /// schedule.
    pub tries: u32,
    /// Attempts in all.
    pub attempts: u32,
    /// When the attempt was due.
    pub due_at: SystemTime,
    /// The wait before this attempt and why.
    pub waited: Duration,
    /// Why it waited.
    pub reason: WaitReason,
    /// The lease's token: only its holder may record the attempt.
    pub token: String,
}

/// What a store records after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Try again at `due`, after waiting `wait` for `reason`.
    Retry {
        /// When the next attempt is due.
        due: SystemTime,
        /// How long that is after this attempt.
        wait: Duration,
        /// Why that long.
        reason: WaitReason,
    },
    /// The delivery ended.
    Done(Final),
}

/// A delivery as a store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDelivery {
    /// The endpoint's name.
    pub endpoint: String,
    /// The webhook id.
    pub id: String,
    /// The body.
    pub body: Vec<u8>,
    /// Where it stands.
    pub state: DeliveryState,
    /// When the next attempt is due, while pending.
    pub due_at: Option<SystemTime>,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
}

/// An endpoint's health, shared through the store by every dispatcher on
/// it, so that a restart neither forgets how long it has been failing nor
/// re-enables an endpoint that was disabled, and a disable or an
/// [enable](Dispatcher::enable) by one dispatcher reaches all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EndpointHealth {
    /// When its first failure since the last success was.
    pub failing_since: Option<SystemTime>,
    /// Why it is disabled, if it is.
    pub disabled: Option<DisableReason>,
}

/// What an attempt shows of an endpoint's health, for
/// [`DeliveryStore::merge_health`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthChange {
    /// A 2xx answer: the endpoint is no longer failing.
    Succeeded,
    /// A failed attempt sent at `at`.
    Failed {
        /// When the attempt was sent.
        at: SystemTime,
    },
}

/// Where a [`Dispatcher`] keeps deliveries: [`MemoryDeliveries`] for tests;
/// `SqliteDeliveries`, `PostgresDeliveries` or `RedisDeliveries` (features
/// `sqlite`, `postgres`, `redis`) so that a restart loses nothing.
///
/// A delivery is keyed by endpoint name and webhook id. A dispatcher
/// leases a due delivery before an attempt; when the lease runs out (the
/// process stopped mid-attempt) another dispatcher takes it again, so a
/// receiver may see an attempt twice and must deduplicate, as it must
/// anyway.
pub trait DeliveryStore: Send + Sync + 'static {
    /// Adds a pending delivery due at `due`. Returns false, changing
    /// nothing, if the endpoint already has a delivery with this id.
    fn enqueue(
        &self,
        endpoint: &str,
        id: &str,
        body: &[u8],
        due: SystemTime,
    ) -> impl Future<Output = Result<bool, DedupError>> + Send;

    /// Leases up to `limit` of the endpoint's pending deliveries due by
    /// `now` (and not leased by another dispatcher) until `now + lease`,
    /// earliest due first.
    fn take_due(
        &self,
        endpoint: &str,
        now: SystemTime,
        limit: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<Vec<Taken>, DedupError>> + Send;

    /// Records `attempt` and the `step` after it and ends the lease, in one
    /// transaction. Returns false, recording nothing, if the lease was
    /// lost to another dispatcher.
    fn finish(
        &self,
        taken: &Taken,
        attempt: &Attempt,
        step: Step,
    ) -> impl Future<Output = Result<bool, DedupError>> + Send;

    /// Ends the lease without an attempt, due again at `due` (an open
    /// breaker held it back). Returns false if the lease was lost.
    fn put_back(
        &self,
        taken: &Taken,
        due: SystemTime,
    ) -> impl Future<Output = Result<bool, DedupError>> + Send;

    /// The delivery with its attempts, if there is one.
    fn delivery(
        &self,
        endpoint: &str,
        id: &str,
    ) -> impl Future<Output = Result<Option<StoredDelivery>, DedupError>> + Send;

    /// Up to `limit` ids of the endpoint's deliveries in `state`, oldest
    /// first.
    fn list(
        &self,
        endpoint: &str,
        state: DeliveryState,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<String>, DedupError>> + Send;

    /// Makes a dead or gone delivery pending again, due at `now`, with the
    /// schedule started over (its attempts are kept). Returns false if
    /// there is no such delivery or it is not dead or gone.
    fn replay(
        &self,
        endpoint: &str,
        id: &str,
        now: SystemTime,
    ) -> impl Future<Output = Result<bool, DedupError>> + Send;

    /// Deletes the delivered and gone deliveries that ended before
    /// `finished_before`, with their attempts, and returns how many.
    /// Pending and dead deliveries are kept (dead ones can be replayed).
    /// A purged id is forgotten: sending it again delivers it again.
    fn purge(
        &self,
        finished_before: SystemTime,
    ) -> impl Future<Output = Result<u64, DedupError>> + Send;

    /// The endpoint's health as saved; the default if never saved.
    fn health(
        &self,
        endpoint: &str,
    ) -> impl Future<Output = Result<EndpointHealth, DedupError>> + Send;

    /// Merges `change` into the endpoint's saved health in one atomic step
    /// and returns the health after it. A failure keeps the earlier of the
    /// saved `failing_since` and its own time; a success clears
    /// `failing_since`. Neither touches a disable: only
    /// [`enable`](Self::enable) ends one.
    fn merge_health(
        &self,
        endpoint: &str,
        change: HealthChange,
    ) -> impl Future<Output = Result<EndpointHealth, DedupError>> + Send;

    /// Disables the endpoint for `reason`, in one atomic step, unless it is
    /// disabled already (the first reason stays). For
    /// [`NoSuccessFor(after)`](DisableReason::NoSuccessFor) it disables
    /// only while the saved `failing_since` is at or before `now - after`,
    /// so a success or an enable saved in the meantime wins. Returns true
    /// if this call disabled it.
    fn disable(
        &self,
        endpoint: &str,
        reason: DisableReason,
        now: SystemTime,
    ) -> impl Future<Output = Result<bool, DedupError>> + Send;

    /// Enables the endpoint and forgets its failures: its saved health
    /// becomes the default.
    fn enable(&self, endpoint: &str) -> impl Future<Output = Result<(), DedupError>> + Send;
}

/// Why a dispatcher call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// No endpoint of that name was added.
    #[error("no endpoint named `{0}`: add it with Dispatcher::add_endpoint first")]
    UnknownEndpoint(String),
    /// The policy's attempt timeout is not shorter than the dispatcher's
    /// lease, so a slow attempt could be taken and sent again by another
    /// dispatcher while it is still running.
    #[error(
        "the attempt timeout ({attempt_timeout:?}) must be shorter than the dispatcher's lease ({lease:?}): shorten the policy's attempt timeout or lengthen the lease with Dispatcher::with_lease"
    )]
    LeaseTooShort {
        /// The dispatcher's lease.
        lease: Duration,
        /// The policy's attempt timeout.
        attempt_timeout: Duration,
    },
    /// The store failed, or the endpoint name or id cannot be stored.
    #[error(transparent)]
    Store(#[from] DedupError),
}

/// Why an endpoint was disabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisableReason {
    /// It answered 410 Gone.
    Gone,
    /// It has not succeeded for this long (the policy's
    /// [`disable_after`](Policy::disable_after)).
    NoSuccessFor(Duration),
}

/// An endpoint the dispatcher stopped delivering to. Its pending
/// deliveries stay in the store and go out once it is
/// [enabled](Dispatcher::enable) again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disabled {
    /// The endpoint's name.
    pub endpoint: String,
    /// Why.
    pub reason: DisableReason,
    /// When its first failure since the last success was.
    pub failing_since: Option<SystemTime>,
}

type DisableHook = Arc<dyn Fn(&Disabled) + Send + Sync>;

/// Runs deliveries in the background: [`send`](Self::send) stores a
/// delivery, and a loop started with [`start`](Self::start) leases due
/// deliveries, attempts them, and records each attempt and the next due
/// time in the store, so that a new dispatcher on the same store carries
/// on where a stopped one left off.
///
/// Per endpoint it keeps a circuit breaker, a concurrency limit, and
/// auto-disable after the policy's time without success (or on 410), with
/// a callback so the owner is told.
///
/// Several dispatchers (in one process or many) may share a store. What
/// they share and what each keeps for itself:
///
/// - **Health is shared, in the store.** Each attempt's result is merged
///   into it atomically ([`DeliveryStore::merge_health`]): a disable
///   sticks until [`enable`](Self::enable), whichever dispatcher saves a
///   failure after it; the time an endpoint started failing is the
///   earliest any dispatcher saw. Every dispatcher reads the endpoint's
///   health from the store on each poll before it takes deliveries, so a
///   disable or an enable by one reaches the others within a poll
///   interval (an attempt already under way finishes). The owner is told
///   of a disable once, by the dispatcher that made it.
/// - **The breaker and the concurrency limit are per dispatcher.** Each
///   counts only its own attempts: two dispatchers with
///   [`with_concurrency(n)`](Policy::with_concurrency) may have up to
///   `2 * n` requests in flight to one endpoint, never more than `n` each.
///
/// ```
/// use std::time::Duration;
/// use hooklatch::sender::{Dispatcher, MemoryDeliveries, Policy, Response, Schedule, Transport};
/// use hooklatch::verify::{Scheme, Signer};
///
/// struct AlwaysOk;
/// impl Transport for AlwaysOk {
///     async fn post(&self, _: &str, _: &[(String, String)], _: &[u8]) -> Result<Response, String> {
///         Ok(Response { status: 204, retry_after: None, body: Vec::new() })
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dispatcher = Dispatcher::new(MemoryDeliveries::new(), AlwaysOk)
///     .with_poll_interval(Duration::from_millis(10));
/// let signer = Signer::new(Scheme::standard_webhooks(), ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])?;
/// dispatcher.add_endpoint("orders", "https://example.com/hooks", signer, Policy::svix()).await?;
/// dispatcher.send("orders", "msg_1", br#"{"paid":true}"#).await?;
///
/// let running = dispatcher.start();
/// while dispatcher.delivery("orders", "msg_1").await?.unwrap().attempts.is_empty() {
///     tokio::time::sleep(Duration::from_millis(5)).await;
/// }
/// running.stop().await;
/// # Ok(())
/// # }
/// ```
pub struct Dispatcher<S, T> {
    inner: Arc<Inner<S, T>>,
}

impl<S, T> Clone for Dispatcher<S, T> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

struct Inner<S, T> {
    store: S,
    transport: T,
    routes: RwLock<HashMap<String, Arc<Route>>>,
    poll_interval: Duration,
    lease: Duration,
    wake: Notify,
    on_disable: Option<DisableHook>,
    seed: AtomicU64,
}

/// One endpoint under a dispatcher.
struct Route {
    name: String,
    endpoint: Endpoint,
    policy: Policy,
    limit: Arc<Semaphore>,
    /// The endpoint's health as this dispatcher last saw it in the store.
    health: Mutex<Seen>,
}

/// A copy of an endpoint's saved health, and how many times an attempt or
/// an enable has set it: a poll's read that started before such a write
/// does not overwrite it with an older value.
#[derive(Default)]
struct Seen {
    health: EndpointHealth,
    writes: u64,
}

impl Route {
    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.health.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `health`, just read from or written to the store.
    fn set_health(&self, health: EndpointHealth) {
        let mut seen = self.seen();
        seen.health = health;
        seen.writes += 1;
    }
}

impl<S, T> std::fmt::Debug for Dispatcher<S, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let routes = self
            .inner
            .routes
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("Dispatcher")
            .field("endpoints", &routes.keys().collect::<Vec<_>>())
            .field("poll_interval", &self.inner.poll_interval)
            .field("lease", &self.inner.lease)
            .finish_non_exhaustive()
    }
}

impl<S: DeliveryStore, T: Transport + 'static> Dispatcher<S, T> {
    /// A dispatcher over `store`, sending with `transport`. It polls the
    /// store every second for due deliveries (at once after a
    /// [`send`](Self::send)) and leases each for 2 minutes.
    pub fn new(store: S, transport: T) -> Self {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64 | 1);
        Self {
            inner: Arc::new(Inner {
                store,
                transport,
                routes: RwLock::new(HashMap::new()),
                poll_interval: Duration::from_secs(1),
                lease: Duration::from_secs(120),
                wake: Notify::new(),
                on_disable: None,
                seed: AtomicU64::new(seed),
            }),
        }
    }

    fn configure(mut self, change: impl FnOnce(&mut Inner<S, T>)) -> Self {
        let inner = Arc::get_mut(&mut self.inner)
            .expect("configure the dispatcher before cloning or starting it");
        change(inner);
        self
    }

    /// How often the loop looks for due deliveries, such as retries coming
    /// due. Defaults to 1 second.
    ///
    /// # Panics
    ///
    /// If the dispatcher has been cloned or started.
    #[must_use]
    pub fn with_poll_interval(self, every: Duration) -> Self {
        self.configure(|inner| inner.poll_interval = every)
    }

    /// How long an attempt holds its delivery before another dispatcher
    /// may take it (after a crash). Defaults to 2 minutes.
    ///
    /// It must be longer than the attempt timeout of every endpoint's
    /// policy, or a slow attempt could be taken and sent again by another
    /// dispatcher while it is still running: [`add_endpoint`](Self::add_endpoint)
    /// refuses an endpoint that breaks this, and so does this method for
    /// the endpoints added before it, with
    /// [`DispatchError::LeaseTooShort`].
    ///
    /// # Panics
    ///
    /// If the dispatcher has been cloned or started.
    pub fn with_lease(self, lease: Duration) -> Result<Self, DispatchError> {
        let slowest = self
            .inner
            .routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|route| route.policy.attempt_timeout())
            .max();
        if let Some(attempt_timeout) = slowest.filter(|timeout| *timeout >= lease) {
            return Err(DispatchError::LeaseTooShort {
                lease,
                attempt_timeout,
            });
        }
        Ok(self.configure(|inner| inner.lease = lease))
    }

    /// Calls `hook` when an endpoint is disabled (410, or no success for
    /// the policy's `disable_after`).
    ///
    /// # Panics
    ///
    /// If the dispatcher has been cloned or started.
    #[must_use]
    pub fn on_disable(self, hook: impl Fn(&Disabled) + Send + Sync + 'static) -> Self {
        self.configure(|inner| inner.on_disable = Some(Arc::new(hook)))
    }

    /// Adds (or replaces) the endpoint `name`: where to POST, the secrets
    /// to sign with, and its policy. The name keys its deliveries and its
    /// saved health in the store (1 to 64 of `A-Z a-z 0-9 _ - . :`): an
    /// endpoint disabled before a restart stays disabled. The policy's
    /// attempt timeout must be shorter than the dispatcher's lease.
    pub async fn add_endpoint(
        &self,
        name: &str,
        url: &str,
        signer: Signer,
        policy: Policy,
    ) -> Result<(), DispatchError> {
        crate::dedup::validate_namespace(name)?;
        if policy.attempt_timeout() >= self.inner.lease {
            return Err(DispatchError::LeaseTooShort {
                lease: self.inner.lease,
                attempt_timeout: policy.attempt_timeout(),
            });
        }
        let health = self.inner.store.health(name).await?;
        let route = Route {
            name: name.to_owned(),
            endpoint: Endpoint::new(url, signer).with_breaker(policy.breaker().clone()),
            limit: Arc::new(Semaphore::new(policy.concurrency())),
            policy,
            health: Mutex::new(Seen { health, writes: 0 }),
        };
        self.inner
            .routes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), Arc::new(route));
        Ok(())
    }

    fn route(&self, name: &str) -> Result<Arc<Route>, DispatchError> {
        self.inner
            .routes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
            .ok_or_else(|| DispatchError::UnknownEndpoint(name.to_owned()))
    }

    /// Stores a delivery of `body` as event `id` to the endpoint, due after
    /// the schedule's first delay, and wakes the loop. Returns false,
    /// storing nothing, if that endpoint already has a delivery with this
    /// id: sending the same event twice is safe.
    pub async fn send(&self, endpoint: &str, id: &str, body: &[u8]) -> Result<bool, DispatchError> {
        let route = self.route(endpoint)?;
        check_key(endpoint, id)?;
        let due = later(
            route.policy.now(),
            first_wait(&route.policy, self.inner.random()),
        );
        let added = self.inner.store.enqueue(endpoint, id, body, due).await?;
        self.inner.wake.notify_one();
        Ok(added)
    }

    /// The delivery with its attempts, if there is one.
    pub async fn delivery(
        &self,
        endpoint: &str,
        id: &str,
    ) -> Result<Option<StoredDelivery>, DispatchError> {
        Ok(self.inner.store.delivery(endpoint, id).await?)
    }

    /// Up to `limit` ids of the endpoint's dead deliveries, oldest first.
    pub async fn dead(&self, endpoint: &str, limit: usize) -> Result<Vec<String>, DispatchError> {
        Ok(self
            .inner
            .store
            .list(endpoint, DeliveryState::Dead, limit)
            .await?)
    }

    /// Sends a dead (or gone) delivery again from the start of its
    /// schedule. Returns false if there is no such delivery or it is not
    /// dead or gone.
    pub async fn replay(&self, endpoint: &str, id: &str) -> Result<bool, DispatchError> {
        let route = self.route(endpoint)?;
        let replayed = self
            .inner
            .store
            .replay(endpoint, id, route.policy.now())
            .await?;
        self.inner.wake.notify_one();
        Ok(replayed)
    }

    /// Deletes delivered and gone deliveries that ended more than
    /// `older_than` ago, with their attempts; see
    /// [`DeliveryStore::purge`]. Run it now and then: the outbox keeps every
    /// delivery until purged.
    pub async fn purge(&self, older_than: Duration) -> Result<u64, DispatchError> {
        let now = SystemTime::now();
        let before = now.checked_sub(older_than).unwrap_or(UNIX_EPOCH);
        Ok(self.inner.store.purge(before).await?)
    }

    /// Why the endpoint is disabled, if it is, as this dispatcher last saw
    /// in the store (when it was added, after each of its attempts, and on
    /// each poll while it has a free slot for the endpoint).
    pub fn disabled(&self, endpoint: &str) -> Result<Option<DisableReason>, DispatchError> {
        Ok(self.route(endpoint)?.seen().health.disabled)
    }

    /// Enables a disabled endpoint and forgets its failures, in the store:
    /// every dispatcher on the store sees it on its next poll, and the
    /// endpoint's pending deliveries go out again.
    pub async fn enable(&self, endpoint: &str) -> Result<(), DispatchError> {
        let route = self.route(endpoint)?;
        self.inner.store.enable(endpoint).await?;
        route.set_health(EndpointHealth::default());
        self.inner.wake.notify_one();
        Ok(())
    }

    /// Starts the delivery loop on the current tokio runtime.
    pub fn start(&self) -> Running {
        let (stop, stopped) = watch::channel(false);
        let inner = Arc::clone(&self.inner);
        let task = tokio::spawn(async move { inner.run(stopped).await });
        Running { stop, task }
    }
}

/// A running delivery loop. Dropping it leaves the loop running; call
/// [`stop`](Self::stop) to end it.
#[derive(Debug)]
pub struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops taking deliveries, waits for the attempts in flight to finish
    /// and be recorded, and returns. Pending deliveries stay in the store
    /// for the next dispatcher.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

impl<S: DeliveryStore, T: Transport + 'static> Inner<S, T> {
    /// A jitter draw in `[0, 1)` (splitmix64; jitter needs spread, not
    /// secrecy).
    fn random(&self) -> f64 {
        let mut z = self
            .seed
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    async fn run(self: Arc<Self>, mut stopped: watch::Receiver<bool>) {
        let mut in_flight = JoinSet::new();
        // Once the `Running` handle is dropped nothing can stop the loop,
        // and `changed` would return at once on every turn.
        let mut detached = false;
        while !*stopped.borrow() {
            let routes: Vec<Arc<Route>> = self
                .routes
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .values()
                .cloned()
                .collect();
            for route in routes {
                self.take_for(&route, &mut in_flight).await;
            }
            while in_flight.try_join_next().is_some() {}
            tokio::select! {
                () = tokio::time::sleep(self.poll_interval) => {}
                () = self.wake.notified() => {}
                changed = stopped.changed(), if !detached => detached = changed.is_err(),
            }
        }
        while in_flight.join_next().await.is_some() {}
    }

    /// Reads the route's health from the store (another dispatcher may
    /// have disabled or enabled it), then leases as many of its due
    /// deliveries as it has free slots, and starts an attempt for each.
    async fn take_for(self: &Arc<Self>, route: &Arc<Route>, in_flight: &mut JoinSet<()>) {
        let free = route.limit.available_permits();
        if free == 0 || route.endpoint.breaker_open() {
            return;
        }
        if !self.refresh_health(route).await {
            return;
        }
        let now = route.policy.now();
        let taken = match self
            .store
            .take_due(&route.name, now, free, self.lease)
            .await
        {
            Ok(taken) => taken,
            Err(error) => {
                tracing::warn!(endpoint = %route.name, %error, "cannot take due deliveries");
                return;
            }
        };
        for delivery in taken {
            let Ok(permit) = Arc::clone(&route.limit).try_acquire_owned() else {
                // Only this loop acquires, so a slot counted free is free.
                break;
            };
            let (inner, route) = (Arc::clone(self), Arc::clone(route));
            in_flight.spawn(async move { inner.attempt(&route, delivery, permit).await });
        }
    }

    /// Reads the route's health from the store into the route, and says
    /// whether the endpoint is enabled. If the store cannot be read, the
    /// health last seen stands.
    async fn refresh_health(&self, route: &Route) -> bool {
        let writes = route.seen().writes;
        match self.store.health(&route.name).await {
            Ok(health) => {
                let mut seen = route.seen();
                // An attempt or an enable wrote a newer value meanwhile.
                if seen.writes == writes {
                    seen.health = health;
                }
                seen.health.disabled.is_none()
            }
            Err(error) => {
                tracing::warn!(endpoint = %route.name, %error, "cannot read the endpoint's health");
                route.seen().health.disabled.is_none()
            }
        }
    }

    async fn attempt(&self, route: &Route, taken: Taken, _permit: OwnedSemaphorePermit) {
        let pass = match route.endpoint.try_breaker() {
            Ok(pass) => pass,
            Err(wait) => {
                let due = later(route.policy.now(), wait);
                if let Err(error) = self.store.put_back(&taken, due).await {
                    tracing::warn!(endpoint = %route.name, id = %taken.id, %error, "cannot put a delivery back");
                }
                return;
            }
        };
        let now = route.policy.now();
        let held = now.duration_since(taken.due_at).unwrap_or_default();
        let tried = attempt_once(
            &self.transport,
            &route.endpoint,
            pass,
            &route.policy,
            (&taken.id, &taken.body),
            taken.attempts + 1,
            (taken.waited, taken.reason, held),
        )
        .await;
        let step = match plan_next(&route.policy, taken.tries + 1, tried.outcome, self.random()) {
            Next::Retry { wait, reason } => Step::Retry {
                due: later(route.policy.now(), wait),
                wait,
                reason,
            },
            Next::Done(outcome) => Step::Done(outcome),
        };
        match self.store.finish(&taken, &tried.attempt, step).await {
            Ok(true) => {}
            Ok(false) => tracing::warn!(
                endpoint = %route.name, id = %taken.id,
                "lease lost during an attempt: another dispatcher took the delivery"
            ),
            // The lease runs out and the delivery is attempted again.
            Err(error) => tracing::warn!(
                endpoint = %route.name, id = %taken.id, %error,
                "cannot record an attempt; it will be retried when its lease ends"
            ),
        }
        self.track_health(route, tried.attempt.sent_at, tried.outcome)
            .await;
        // A slot is free: look for more due deliveries now.
        self.wake.notify_one();
    }

    /// Merges what the attempt showed into the endpoint's health in the
    /// store, disables the endpoint when the attempt calls for it, and
    /// tells the owner if this dispatcher is the one that disabled it.
    async fn track_health(&self, route: &Route, sent_at: SystemTime, outcome: Outcome) {
        let reason = match outcome {
            Outcome::Delivered => {
                self.merge_health(route, HealthChange::Succeeded).await;
                None
            }
            Outcome::Gone => Some(DisableReason::Gone),
            Outcome::GiveUp | Outcome::Retry { .. } => {
                let merged = self
                    .merge_health(route, HealthChange::Failed { at: sent_at })
                    .await;
                merged
                    .filter(|health| health.disabled.is_none())
                    .and_then(|health| health.failing_since)
                    .zip(route.policy.disable_after())
                    .filter(|(since, after)| {
                        sent_at.duration_since(*since).unwrap_or_default() >= *after
                    })
                    .map(|(_, after)| DisableReason::NoSuccessFor(after))
            }
        };
        let Some(reason) = reason else {
            return;
        };
        let disabled_now = match self.store.disable(&route.name, reason, sent_at).await {
            Ok(disabled_now) => disabled_now,
            Err(error) => {
                tracing::warn!(endpoint = %route.name, %error, "cannot save the endpoint's disable");
                return;
            }
        };
        let health = match self.store.health(&route.name).await {
            Ok(health) => health,
            Err(error) => {
                tracing::warn!(endpoint = %route.name, %error, "cannot read the endpoint's health");
                EndpointHealth {
                    disabled: disabled_now.then_some(reason),
                    ..route.seen().health
                }
            }
        };
        route.set_health(health);
        if !disabled_now {
            // Disabled already (whoever did it told the owner), or a
            // success or an enable came first.
            return;
        }
        let disabled = Disabled {
            endpoint: route.name.clone(),
            reason,
            failing_since: health.failing_since,
        };
        tracing::warn!(endpoint = %disabled.endpoint, reason = ?disabled.reason, "endpoint disabled");
        if let Some(hook) = &self.on_disable {
            hook(&disabled);
        }
    }

    /// Merges `change` into the endpoint's saved health and keeps the
    /// result; `None` if the store failed.
    async fn merge_health(&self, route: &Route, change: HealthChange) -> Option<EndpointHealth> {
        match self.store.merge_health(&route.name, change).await {
            Ok(health) => {
                route.set_health(health);
                Some(health)
            }
            Err(error) => {
                tracing::warn!(endpoint = %route.name, %error, "cannot save the endpoint's health");
                None
            }
        }
    }
}

/// `now + wait`, or `now` if that cannot be represented.
fn later(now: SystemTime, wait: Duration) -> SystemTime {
    now.checked_add(wait).unwrap_or(now)
}
