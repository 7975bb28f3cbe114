//! The outbox: where a [`Dispatcher`](super::Dispatcher) keeps deliveries,
//! their attempts and each endpoint's health. [`DeliveryStore`] is the
//! contract; [`MemoryOutbox`] is for tests, and `SqliteOutbox`,
//! `PostgresOutbox` and `RedisOutbox` keep deliveries across a
//! restart.

mod any;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod batch;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
pub(crate) mod codes;
mod error;
pub(crate) mod keep;
mod memory;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
mod registry;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod sql;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod sql_store;
#[cfg(feature = "sqlite")]
mod sqlite;
pub(crate) mod take_across;
pub(crate) mod view;

use std::future::Future;
use std::time::{Duration, SystemTime};

pub use super::rules::states::{DeliveryState, DisableReason, EndpointHealth, HealthChange};
use super::rules::{Attempt, Step, WaitReason};
use crate::trace::TraceParent;

pub use any::AnyOutbox;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use batch::OutboxBackend;
pub use error::OutboxError;
pub use keep::{Keeping, Keyed, Retention, SendKey};
pub use memory::MemoryOutbox;
#[cfg(feature = "postgres")]
pub use postgres::PostgresOutbox;
#[cfg(feature = "redis")]
pub use redis::RedisOutbox;
pub use registry::{EndpointRegistry, SavedEndpoints};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use sql_store::SqlOutbox;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteOutbox;
pub use take_across::{DueAcross, Wanted};
pub use view::{DeliveryCounts, EndpointSummary, OutboxView, RecentAttempt};

/// How many finished deliveries a SQL or Redis outbox purges in one
/// transaction or script, at most, so a large purge never holds locks (or
/// the Redis server) for long.
///
/// ```
/// assert!(hooklatch::sender::outbox::OUTBOX_PURGE_BATCH >= 100);
/// ```
pub const OUTBOX_PURGE_BATCH: u64 = 1_000;

/// Checks that `name` can name an endpoint in an outbox: 1 to 64
/// characters of `A-Z a-z 0-9 _ - . :`. Use it to refuse a bad
/// configuration at startup; every outbox method checks it too.
///
/// ```
/// use hooklatch::sender::outbox::validate_endpoint_name;
///
/// assert!(validate_endpoint_name("tenant-7.orders").is_ok());
/// let refused = validate_endpoint_name("two words").unwrap_err();
/// assert!(refused.to_string().starts_with("invalid endpoint name: "));
/// ```
pub fn validate_endpoint_name(name: &str) -> Result<(), OutboxError> {
    Ok(crate::dedup::validate_namespace(name)?)
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
    /// When the delivery was stored (sent): with the time it is delivered,
    /// the send-to-delivery time.
    pub enqueued_at: SystemTime,
    /// The wait before this attempt and why.
    pub waited: Duration,
    /// Why it waited.
    pub reason: WaitReason,
    /// The lease's token: only its holder may record the attempt.
    pub token: String,
    /// The trace the delivery was sent in, if any: each attempt sends it
    /// as `traceparent`, under a span id of its own.
    pub trace: Option<TraceParent>,
}

/// What [`DeliveryStore::take_due`] found: the endpoint's saved health and
/// the deliveries it leased, read and leased in one atomic step.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Due {
    /// The endpoint's health as saved when the deliveries were leased.
    pub health: EndpointHealth,
    /// The leased deliveries, earliest due first; none while the endpoint
    /// is disabled.
    pub taken: Vec<Taken>,
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

/// A delivery to enqueue, as [`DeliveryStore::add_delivery`] and
/// [`Keeping::add_keyed_delivery`] are handed it. Only
/// [`DeliveryStore::enqueue`] and [`Keeping::enqueue_keyed`] make one,
/// after checking the endpoint's name and the id, so a backend can put
/// them into keys and rows as they are.
#[derive(Debug, Clone, Copy)]
pub struct NewDelivery<'a> {
    endpoint: &'a str,
    id: &'a str,
    body: &'a [u8],
    due: SystemTime,
    trace: Option<TraceParent>,
}

impl<'a> NewDelivery<'a> {
    /// The delivery, once its endpoint's name and id pass the checks
    /// every store makes, in the trace the caller runs in.
    pub(crate) fn checked(
        endpoint: &'a str,
        id: &'a str,
        body: &'a [u8],
        due: SystemTime,
    ) -> Result<Self, OutboxError> {
        crate::dedup::check_key(endpoint, id)?;
        Ok(Self {
            endpoint,
            id,
            body,
            due,
            trace: TraceParent::current(),
        })
    }

    /// The endpoint's name.
    pub fn endpoint(&self) -> &'a str {
        self.endpoint
    }

    /// The webhook id, unique per endpoint.
    pub fn id(&self) -> &'a str {
        self.id
    }

    /// The body, as it is sent.
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// When its first attempt is due.
    pub fn due(&self) -> SystemTime {
        self.due
    }

    /// The trace it was sent in ([`TraceParent::current`] where it was
    /// enqueued): a store keeps it and hands it back in [`Taken::trace`].
    pub fn trace(&self) -> Option<TraceParent> {
        self.trace
    }
}

/// Where a [`Dispatcher`](super::Dispatcher) keeps deliveries: [`MemoryOutbox`] for tests;
/// `SqliteOutbox`, `PostgresOutbox` or `RedisOutbox` (features
/// `sqlite`, `postgres`, `redis`) so that a restart loses nothing.
///
/// A delivery is keyed by endpoint name and webhook id. A dispatcher
/// leases a due delivery before an attempt; when the lease runs out (the
/// process stopped mid-attempt) another dispatcher takes it again, so a
/// receiver may see an attempt twice and must deduplicate, as it must
/// anyway.
///
/// Every delivery store is an [`EndpointRegistry`] too: the endpoints the
/// dispatchers on it send to are kept next to their deliveries. That is
/// all a [`Dispatcher`](super::Dispatcher) needs to send; two extensions
/// add what some of its callers need, bound only where used:
/// [`Keeping`] (idempotency keys and retention: `send_with_key`, `purge`,
/// `purge_by_policy`) and [`OutboxView`] (what an operator reads: the
/// console and the CLI). Every store here implements all three.
pub trait DeliveryStore: EndpointRegistry + Send + Sync + 'static {
    /// The time now on the store's own clock: Postgres's
    /// `statement_timestamp()`, SQLite's `julianday('now')` (the host's
    /// clock), Redis's `TIME` (on a cluster, from the master of the
    /// outbox's first shard, so every dispatcher reads one server), in
    /// milliseconds. The default, for a store without a clock of its own
    /// (such as [`MemoryOutbox`]), is this process's clock; a store
    /// that wraps another should pass the inner store's on.
    ///
    /// A [`Dispatcher`](super::Dispatcher) reads it every few seconds and
    /// keeps its offset from its own clock, so that the dispatchers on one
    /// store decide leases, due times, windows and disables on one
    /// timeline, however far their hosts' clocks are apart (unless a
    /// policy brings a clock of its own, see
    /// [`Policy::with_clock`](super::Policy::with_clock)).
    ///
    /// ```
    /// use std::time::{Duration, SystemTime};
    /// use hooklatch::sender::MemoryOutbox;
    /// use hooklatch::sender::outbox::DeliveryStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), hooklatch::sender::OutboxError> {
    /// let now = MemoryOutbox::new().store_time().await?;
    /// let apart = now.duration_since(SystemTime::now()).unwrap_or_default();
    /// assert!(apart < Duration::from_secs(1));
    /// # Ok(())
    /// # }
    /// ```
    fn store_time(&self) -> impl Future<Output = Result<SystemTime, OutboxError>> + Send {
        async { Ok(SystemTime::now()) }
    }

    /// Adds a pending delivery due at `due`. Returns false, changing
    /// nothing, if the endpoint already has a delivery with this id.
    /// Checks the endpoint's name and the id, then calls
    /// [`add_delivery`](Self::add_delivery).
    fn enqueue(
        &self,
        endpoint: &str,
        id: &str,
        body: &[u8],
        due: SystemTime,
    ) -> impl Future<Output = Result<bool, OutboxError>> + Send {
        async move {
            let delivery = NewDelivery::checked(endpoint, id, body, due)?;
            self.add_delivery(delivery).await
        }
    }

    /// What [`enqueue`](Self::enqueue) does once it has checked the
    /// endpoint's name and the id: the part a backend implements. Call
    /// `enqueue`, which checks them.
    fn add_delivery(
        &self,
        delivery: NewDelivery<'_>,
    ) -> impl Future<Output = Result<bool, OutboxError>> + Send;

    /// Reads the endpoint's saved health and, unless it is disabled,
    /// leases up to `limit` of its pending deliveries due by `now` (and not
    /// leased by another dispatcher) until `now + lease`, earliest due
    /// first, in one atomic step. A disabled endpoint's deliveries are left
    /// as they are: a disable saved by any dispatcher stops every other one
    /// at its next take. With a `limit` of 0 it only reads the health.
    fn take_due(
        &self,
        endpoint: &str,
        now: SystemTime,
        limit: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<Due, OutboxError>> + Send;

    /// Leases due deliveries of the `wanted` endpoints, at most `limit` in
    /// all and each endpoint's own limit, skipping disabled endpoints,
    /// round-robin: every endpoint's earliest due delivery before any
    /// endpoint's second, so one busy endpoint cannot starve the rest. It
    /// reports the health of every wanted endpoint that is disabled or had
    /// deliveries leased; one not reported is enabled.
    ///
    /// The SQL stores do this in one statement (and one read of the
    /// disabled endpoints) whatever the number of endpoints, and the Redis
    /// store in at most two script calls per shard.
    ///
    /// When part of a take fails (one of several statements, one shard,
    /// one endpoint), it returns what the other parts leased, naming the
    /// failed parts' endpoints in [`DueAcross::unanswered`]; it fails only
    /// when it leased nothing. The default, for a
    /// store without its own, is one [`take_due`](Self::take_due) per
    /// wanted endpoint, each with an even share of `limit`.
    fn take_due_across(
        &self,
        wanted: &[Wanted],
        limit: usize,
        lease: Duration,
    ) -> impl Future<Output = Result<DueAcross, OutboxError>> + Send {
        async move {
            let mut found = DueAcross::default();
            let mut taken: Vec<Taken> = Vec::new();
            // An even share of the limit each first, so the first endpoints
            // cannot take it all; then what is left to those that filled
            // their share.
            let share = limit.div_ceil(wanted.len().max(1)).max(1);
            let mut full = Vec::new();
            // A failed take of one endpoint leaves it unanswered; what the
            // others leased is returned all the same.
            let (mut error, mut unanswered) = (None, Vec::new());
            for want in wanted {
                let ask = limit.saturating_sub(taken.len()).min(want.limit).min(share);
                let due = match self.take_due(&want.endpoint, want.now, ask, lease).await {
                    Ok(due) => due,
                    Err(failed) => {
                        error.get_or_insert(failed);
                        unanswered.push(want.endpoint.clone());
                        continue;
                    }
                };
                found.health.insert(want.endpoint.clone(), due.health);
                if ask > 0 && due.taken.len() == ask && ask < want.limit {
                    full.push((want, want.limit - ask));
                }
                taken.extend(due.taken);
            }
            for (want, more) in full {
                let ask = limit.saturating_sub(taken.len()).min(more);
                if ask > 0 {
                    match self.take_due(&want.endpoint, want.now, ask, lease).await {
                        Ok(due) => taken.extend(due.taken),
                        // Its first take answered: its health is known.
                        Err(failed) => {
                            error.get_or_insert(failed);
                        }
                    }
                }
            }
            found.taken = take_across::round_robin(taken);
            found.or_failed(error, unanswered)
        }
    }

    /// Records `attempt` and the `step` after it, ends the lease and merges
    /// `change` (none for an attempt that shows nothing of the endpoint's
    /// health) into the endpoint's saved health, in one transaction, and
    /// returns the health after it. A failure keeps the earlier of the
    /// saved `failing_since` and its own time; a success clears
    /// `failing_since`. Neither touches a disable: only
    /// [`enable`](Self::enable) ends one.
    ///
    /// Fails with [`OutboxError::LeaseLost`], recording and merging nothing,
    /// if the lease was lost to another dispatcher: the attempt that counts
    /// is that dispatcher's.
    fn finish(
        &self,
        taken: &Taken,
        attempt: &Attempt,
        step: Step,
        change: Option<HealthChange>,
    ) -> impl Future<Output = Result<EndpointHealth, OutboxError>> + Send;

    /// Ends the lease without an attempt, due again at `due` (an open
    /// breaker held it back). Fails with [`OutboxError::LeaseLost`] if the
    /// lease was lost.
    fn put_back(
        &self,
        taken: &Taken,
        due: SystemTime,
    ) -> impl Future<Output = Result<(), OutboxError>> + Send;

    /// The delivery with its attempts, if there is one.
    fn delivery(
        &self,
        endpoint: &str,
        id: &str,
    ) -> impl Future<Output = Result<Option<StoredDelivery>, OutboxError>> + Send;

    /// Up to `limit` ids of the endpoint's deliveries in `state`, oldest
    /// first.
    fn list(
        &self,
        endpoint: &str,
        state: DeliveryState,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<String>, OutboxError>> + Send;

    /// Makes a dead or gone delivery pending again, due at `now`, with the
    /// schedule started over (its attempts are kept). Returns false if
    /// there is no such delivery or it is not dead or gone.
    fn replay(
        &self,
        endpoint: &str,
        id: &str,
        now: SystemTime,
    ) -> impl Future<Output = Result<bool, OutboxError>> + Send;

    /// Replays, as [`replay`](Self::replay) does, the endpoint's dead and
    /// gone deliveries whose last attempt was sent at or after `since` and
    /// before `until`, up to `limit` of them, oldest first, and returns
    /// their ids: "send again what failed yesterday".
    ///
    /// It reads each dead or gone delivery of the endpoint: meant for an
    /// operator's replay, not a hot path.
    fn replay_between(
        &self,
        endpoint: &str,
        since: SystemTime,
        until: SystemTime,
        now: SystemTime,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<String>, OutboxError>> + Send {
        async move {
            let mut replayed = Vec::new();
            for state in [DeliveryState::Dead, DeliveryState::Gone] {
                for id in self.list(endpoint, state, usize::MAX).await? {
                    if replayed.len() == limit {
                        return Ok(replayed);
                    }
                    let Some(delivery) = self.delivery(endpoint, &id).await? else {
                        continue;
                    };
                    let last = delivery.attempts.last().map(|attempt| attempt.sent_at);
                    let in_range = last.is_some_and(|sent| since <= sent && sent < until);
                    if in_range && self.replay(endpoint, &id, now).await? {
                        replayed.push(id);
                    }
                }
            }
            Ok(replayed)
        }
    }

    /// Enables the endpoint as [`enable`](Self::enable) does and, when its
    /// saved configuration's policy
    /// [replays on enable](crate::sender::Policy::with_replay_on_enable),
    /// sends its dead and gone deliveries again; returns how many. For
    /// operators' tools without a dispatcher (the console, the CLI); a
    /// [`Dispatcher::enable`](crate::sender::Dispatcher::enable) does the
    /// same with the policy it sends with, and tells its owner.
    fn enable_as_saved(
        &self,
        endpoint: &str,
        now: SystemTime,
    ) -> impl Future<Output = Result<u64, OutboxError>> + Send {
        async move {
            self.enable(endpoint).await?;
            let saved = self.saved_endpoints().await?;
            let replays = saved
                .endpoints
                .get(endpoint)
                .and_then(|json| crate::sender::EndpointConfig::from_json(json).ok())
                .is_some_and(|config| config.policy().replay_on_enable());
            if !replays {
                return Ok(0);
            }
            let (since, until) = (SystemTime::UNIX_EPOCH, now + Duration::from_secs(1));
            let replayed = self.replay_between(endpoint, since, until, now, usize::MAX);
            Ok(u64::try_from(replayed.await?.len()).unwrap_or(u64::MAX))
        }
    }

    /// The endpoint's health as saved; the default if never saved. It is
    /// what [`take_due`](Self::take_due) reports when it leases nothing.
    fn health(
        &self,
        endpoint: &str,
    ) -> impl Future<Output = Result<EndpointHealth, OutboxError>> + Send {
        async move {
            let due = self
                .take_due(endpoint, SystemTime::now(), 0, Duration::ZERO)
                .await?;
            Ok(due.health)
        }
    }

    /// How many of the endpoint's deliveries are in each state, `due` as
    /// of `now`.
    fn counts(
        &self,
        endpoint: &str,
        now: SystemTime,
    ) -> impl Future<Output = Result<DeliveryCounts, OutboxError>> + Send;

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
    ) -> impl Future<Output = Result<bool, OutboxError>> + Send;

    /// Enables the endpoint and forgets its failures: its saved health
    /// becomes the default.
    fn enable(&self, endpoint: &str) -> impl Future<Output = Result<(), OutboxError>> + Send;
}
