//! [`Dispatcher`]: deliveries run in the background from an
//! [outbox](super::outbox::DeliveryStore), so a restart loses none of them. This
//! file is the API; [`run`] is the delivery loop and [`health`] the
//! shared endpoint health.

mod clock;
mod health;
mod keep;
mod registry;
mod resend;
mod run;
mod state;
mod trouble;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, watch};

use super::endpoint::Endpoint;
use super::outbox::{DeliveryState, DeliveryStore, DisableReason, EndpointHealth, StoredDelivery};
use super::rules::Policy;
use super::rules::{Notice, NoticeKind};
use super::rules::{first_wait, later};
use super::transport::Transport;
use crate::dedup::check_key;
use crate::sender::OutboxError;
use crate::verify::{Clock, Signer};
use clock::StoreClock;
use state::{Inner, Origin, Route};

/// Why a dispatcher call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// No endpoint of that name was added to this dispatcher or saved in
    /// the store.
    #[error(
        "no endpoint named `{0}`: save it with Dispatcher::save_endpoint or add it with Dispatcher::add_endpoint first"
    )]
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
    /// The endpoint's policy has no test prefix to mark a test delivery.
    #[error(
        "the policy of endpoint `{0}` has no test prefix: set one with Policy::with_test_prefix"
    )]
    NoTestPrefix(String),
    /// The endpoint's policy has no idempotency window for a keyed send.
    #[error(
        "the policy of endpoint `{0}` has no idempotency window: set one with Policy::with_idempotency_window"
    )]
    NoIdempotencyWindow(String),
    /// The body is longer than the policy's
    /// [`body_limit`](Policy::body_limit).
    #[error("the body is {len} bytes, over the endpoint's limit of {max}")]
    TooLarge {
        /// The body's length.
        len: usize,
        /// The policy's limit.
        max: usize,
    },
    /// The store failed, or the endpoint name or id cannot be stored.
    #[error(transparent)]
    Store(#[from] OutboxError),
    /// The store's clock has not been read yet (the store failed, or
    /// answered too slowly to be trusted), so nothing is scheduled or
    /// leased on it: a guess could lease a delivery another dispatcher is
    /// sending. Give the endpoint's policy a clock of its own
    /// ([`Policy::with_clock`]) to go on without the store's.
    #[error("cannot read the store's clock, so nothing is scheduled or leased on it yet: {0}")]
    StoreClock(#[source] OutboxError),
    /// The id cannot be signed in the endpoint's scheme (a Standard
    /// Webhooks id with a `.`, say): refused before it is stored, where it
    /// could only die at its first attempt.
    #[error("the id cannot be signed for endpoint `{endpoint}`: {reason}")]
    UnsignableId {
        /// The endpoint.
        endpoint: String,
        /// What the signer says of the id.
        reason: crate::verify::VerifyError,
    },
    /// An endpoint's configuration cannot be used (its scheme, a secret,
    /// or its stored form).
    #[error(transparent)]
    InvalidEndpoint(#[from] crate::sender::EndpointConfigError),
}

/// An endpoint the dispatcher stopped delivering to. Its pending
/// deliveries stay in the store and go out once it is
/// [enabled](Dispatcher::enable) again.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Disabled {
    /// The endpoint's name.
    pub endpoint: String,
    /// Why.
    pub reason: DisableReason,
    /// When its first failure since the last success was.
    pub failing_since: Option<SystemTime>,
}

type DisableHook = Arc<dyn Fn(&Disabled) + Send + Sync>;
type NoticeHook = Arc<dyn Fn(&Notice) + Send + Sync>;

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
///   into it atomically, in the transaction that records the attempt
///   ([`DeliveryStore::finish`]): a disable sticks until
///   [`enable`](Self::enable), whichever dispatcher saves a failure after
///   it; the time an endpoint started failing is the earliest any
///   dispatcher saw. Every dispatcher reads its endpoints' health on each
///   poll in the one store call that leases due deliveries across all of
///   them ([`DeliveryStore::take_due_across`]), round-robin so one busy
///   endpoint cannot starve the rest, and leasing nothing of a disabled
///   endpoint, so a disable or an enable by one reaches the others within
///   a poll interval (an attempt already under way finishes). The owner is
///   told of a disable once, by the dispatcher that made it.
/// - **The breaker and the concurrency limit are per dispatcher.** Each
///   counts only its own attempts: two dispatchers with
///   [`with_concurrency(n)`](Policy::with_concurrency) may have up to
///   `2 * n` requests in flight to one endpoint, never more than `n` each.
///
/// ```
/// use std::time::Duration;
/// use hooklatch::sender::{Dispatcher, MemoryOutbox, Policy, Transport};
/// use hooklatch::sender::rules::Schedule;
/// use hooklatch::sender::transport::{Response, TransportError};
/// use hooklatch::verify::{Scheme, Signer};
///
/// struct AlwaysOk;
/// impl Transport for AlwaysOk {
///     async fn post(
///         &self,
///         _: &str,
///         _: &[(String, String)],
///         _: &[u8],
///     ) -> Result<Response, TransportError> {
///         Ok(Response::new(204))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dispatcher = Dispatcher::new(MemoryOutbox::new(), AlwaysOk)
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
        Self {
            inner: Arc::new(Inner {
                store,
                transport,
                routes: RwLock::new(HashMap::new()),
                poll_interval: Duration::from_secs(1),
                lease: Duration::from_secs(120),
                wake: Notify::new(),
                on_disable: None,
                endpoint_refresh: Duration::from_secs(1),
                depth_every: None,
                registry_version: Mutex::new(None),
                on_notice: None,
                clock: Arc::new(StoreClock::new()),
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

    /// How often the loop checks the store for endpoints saved, changed or
    /// removed by any dispatcher ([`save_endpoint`](Self::save_endpoint)):
    /// one read of a version number, and of the endpoints only when it
    /// moved. Defaults to 1 second.
    ///
    /// # Panics
    ///
    /// If the dispatcher has been cloned or started.
    #[must_use]
    pub fn with_endpoint_refresh(self, every: Duration) -> Self {
        self.configure(|inner| inner.endpoint_refresh = every)
    }

    /// Sets the `hooklatch_outbox_deliveries` gauges (pending, due and dead
    /// deliveries per endpoint; feature `metrics`) every `every` while the
    /// loop runs. Off by default: it costs one count per endpoint each time,
    /// so with many endpoints or dispatchers enable it on one of them,
    /// every minute or so.
    ///
    /// # Panics
    ///
    /// If the dispatcher has been cloned or started.
    #[must_use]
    pub fn with_depth_metrics(self, every: Duration) -> Self {
        self.configure(|inner| inner.depth_every = Some(every))
    }

    /// Reads `clock` as this host's clock until the store's is known. For
    /// every endpoint whose policy has no clock of its own
    /// ([`Policy::with_clock`]), the dispatcher's time is the store's
    /// ([`DeliveryStore::store_time`], read every few seconds and carried
    /// forward on the monotonic clock, so a step of this clock does not move
    /// it); until a reading has succeeded within half a second, the
    /// dispatcher leases nothing for those endpoints and `send` fails.
    /// Defaults to the system clock; a test sets a clock that is off to show
    /// that the dispatcher's leases, due times, windows and disables still
    /// follow the store's.
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use hooklatch::sender::{Dispatcher, MemoryOutbox};
    /// use hooklatch::sender::transport::{Response, transport_fn};
    ///
    /// let ok = transport_fn(|_, _, _| async { Ok(Response::new(200)) });
    /// let three_minutes_fast = || SystemTime::now() + Duration::from_secs(180);
    /// let dispatcher =
    ///     Dispatcher::new(MemoryOutbox::new(), ok).with_local_clock(three_minutes_fast);
    /// # let _ = dispatcher;
    /// ```
    #[must_use]
    pub fn with_local_clock(self, clock: impl Clock) -> Self {
        self.inner.clock.set_local(Arc::new(clock));
        self
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

    /// Calls `hook` with each [`Notice`] an endpoint's policy asks for
    /// ([`Policy::with_notices`]): failing for a while, a delivery out of
    /// attempts, disabled, enabled again; at most one per endpoint per the
    /// policy's interval. The limit is kept per dispatcher, like the
    /// breaker: each dispatcher on a store tells of what it saw.
    ///
    /// # Panics
    ///
    /// If the dispatcher has been cloned or started.
    #[must_use]
    pub fn on_notice(self, hook: impl Fn(&Notice) + Send + Sync + 'static) -> Self {
        self.configure(|inner| inner.on_notice = Some(Arc::new(hook)))
    }

    /// Adds (or replaces) the endpoint `name` in this dispatcher only:
    /// where to POST, the secrets to sign with, and its policy. The name
    /// keys its deliveries and its saved health in the store (1 to 64 of
    /// `A-Z a-z 0-9 _ - . :`): an endpoint disabled before a restart stays
    /// disabled. The policy's attempt timeout must be shorter than the
    /// dispatcher's lease.
    ///
    /// Every process must add it again. To have every dispatcher on the
    /// store see an endpoint, its changes and its removal, save it in the
    /// store with [`save_endpoint`](Self::save_endpoint) instead; an
    /// endpoint added here is left alone by what other dispatchers save
    /// under its name (a `save_endpoint` on this dispatcher replaces it).
    /// Adding takes any [`Signer`] and keeps the policy's clock, which a
    /// saved endpoint cannot.
    pub async fn add_endpoint(
        &self,
        name: &str,
        url: &str,
        signer: Signer,
        policy: Policy,
    ) -> Result<(), DispatchError> {
        crate::sender::outbox::validate_endpoint_name(name)?;
        self.check_lease(&policy)?;
        let health = self.inner.store.health(name).await?;
        let endpoint = Endpoint::new(url, signer);
        let route =
            Route::new(name, endpoint, policy, health, Origin::Added).on_clock(&self.inner.clock);
        self.inner
            .routes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), Arc::new(route));
        Ok(())
    }

    /// The route of endpoint `name`, from the store's saved endpoints if
    /// this dispatcher has not seen it yet, after bringing the
    /// dispatcher's clock in line with the store's (at most every few
    /// seconds: see `clock::StoreClock::sync`).
    /// Fails when the route reads the store's clock and it cannot be read.
    async fn find_route(&self, name: &str) -> Result<Arc<Route>, DispatchError> {
        let synced = self.inner.clock.sync(&self.inner.store).await;
        let route = match self.route(name) {
            Err(DispatchError::UnknownEndpoint(_)) => {
                self.inner.refresh_endpoints().await?;
                self.route(name)
            }
            found => found,
        }?;
        match synced {
            Err(unsynced) if route.on_store_clock => Err(unsynced.into()),
            _ => Ok(route),
        }
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
    /// id: sending the same event twice is safe. A body over the policy's
    /// [`body_limit`](Policy::body_limit) is refused.
    pub async fn send(&self, endpoint: &str, id: &str, body: &[u8]) -> Result<bool, DispatchError> {
        let route = self.find_route(endpoint).await?;
        check_key(endpoint, id).map_err(OutboxError::from)?;
        self.check_id(&route, id)?;
        self.check_body(&route, body)?;
        let due = later(
            route.policy.now(),
            first_wait(&route.policy, fastrand::f64()),
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
        let route = self.find_route(endpoint).await?;
        let replayed = self
            .inner
            .store
            .replay(endpoint, id, route.policy.now())
            .await?;
        self.inner.wake.notify_one();
        Ok(replayed)
    }

    /// Why the endpoint is disabled, if it is, as this dispatcher last saw
    /// in the store (when it was added, after each of its attempts, and on
    /// each poll while it has a free slot for the endpoint).
    pub fn disabled(&self, endpoint: &str) -> Result<Option<DisableReason>, DispatchError> {
        Ok(self.route(endpoint)?.seen().health.disabled)
    }

    /// Enables a disabled endpoint and forgets its failures, in the store:
    /// every dispatcher on the store sees it on its next poll, and the
    /// endpoint's pending deliveries go out again. Under a policy
    /// [`with_replay_on_enable`](Policy::with_replay_on_enable) its dead
    /// and gone deliveries are replayed as well.
    pub async fn enable(&self, endpoint: &str) -> Result<(), DispatchError> {
        let route = self.find_route(endpoint).await?;
        self.inner.store.enable(endpoint).await?;
        route.set_health(EndpointHealth::default());
        if route.policy.replay_on_enable() {
            for state in [DeliveryState::Dead, DeliveryState::Gone] {
                self.replay_all(&route, state).await?;
            }
        }
        self.inner.notify(&route, NoticeKind::Enabled);
        self.inner.wake.notify_one();
        Ok(())
    }

    /// Disables the endpoint by hand ([`DisableReason::Manual`]), in the
    /// store: every dispatcher stops delivering to it at its next poll, and
    /// its deliveries wait, pending, until [`enable`](Self::enable).
    /// Returns false if it was disabled already.
    pub async fn disable(&self, endpoint: &str) -> Result<bool, DispatchError> {
        let route = self.find_route(endpoint).await?;
        let now = route.policy.now();
        let disabled = self
            .inner
            .store
            .disable(endpoint, DisableReason::Manual, now)
            .await?;
        route.set_health(self.inner.store.health(endpoint).await?);
        if disabled {
            crate::sender::metrics::disabled(DisableReason::Manual);
        }
        Ok(disabled)
    }

    /// Starts the delivery loop on the current tokio runtime.
    pub fn start(&self) -> Running {
        let (stop, stopped) = watch::channel(false);
        let inner = Arc::clone(&self.inner);
        let task = tokio::spawn(async move { inner.run(stopped).await });
        Running { stop, task }
    }

    /// Refuses an id the endpoint's signer could never sign.
    fn check_id(&self, route: &Route, id: &str) -> Result<(), DispatchError> {
        route
            .endpoint
            .signer()
            .check_id(id)
            .map_err(|reason| DispatchError::UnsignableId {
                endpoint: route.name.clone(),
                reason,
            })
    }

    /// Refuses a body over the policy's [`body_limit`](crate::sender::Policy::body_limit).
    fn check_body(&self, route: &Route, body: &[u8]) -> Result<(), DispatchError> {
        match route.policy.body_limit().filter(|max| body.len() > *max) {
            Some(max) => Err(DispatchError::TooLarge {
                len: body.len(),
                max,
            }),
            None => Ok(()),
        }
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
