//! Claim each event id once, in the same atomic step that enqueues it.
//!
//! Webhook senders deliver at least once, so the same event arrives twice,
//! sometimes at the same moment on two instances. A receiver may answer 2xx
//! only when the event is durably recorded, and must act on it once. This
//! module gives two ways to do that, each behind a small trait that every
//! store implements:
//!
//! - **[`Inbox`]** (the default): [`accept`](Inbox::accept) claims the id and
//!   enqueues the event in one atomic step. [`Acceptance::Accepted`] means
//!   both happened and are durable; [`Acceptance::Duplicate`] means the id
//!   was claimed before and nothing was enqueued; an error means nothing was
//!   kept and the sender must retry (answer 5xx). Workers then
//!   [`take`](InboxQueue::take) events, [`ack`](InboxQueue::ack) them when done, or
//!   [`nack`](InboxQueue::nack) them to retry later; an event whose worker died
//!   comes back after the visibility timeout, and one that failed
//!   `max_attempts` times is dead-lettered.
//! - **[`LeaseStore`]**, for handlers that run inline: [`claim`](LeaseStore::claim)
//!   answers [`Claim::Fresh`] with a [`Lease`], [`Claim::InProgress`] while
//!   another delivery holds it (never answer that with 2xx: the first may
//!   still fail) or [`Claim::Done`]. [`complete`](LeaseStore::complete) marks
//!   it done, [`release`](LeaseStore::release) gives it up after a failure,
//!   and a lease whose holder crashed expires so a retry can take it.
//!
//! | store | feature | atomic step | durability |
//! |---|---|---|---|
//! | [`MemoryInbox`] | always | a mutex | none: tests and single processes |
//! | `SqliteInbox` | `sqlite` (the adapters' default) | one transaction | WAL, `synchronous=FULL` |
//! | `PostgresInbox` | `postgres` | one statement (a data-modifying CTE) | the server's |
//! | `RedisInbox` | `redis` | one Lua script | the server's AOF / RDB settings |
//!
//! Claims are kept for the [retention](StoreOptions::with_retention) (default
//! 7 days), which must be longer than the sender's retry window, or a late
//! retry would be accepted again.
//!
//! ```
//! use hooklatch::dedup::{Acceptance, Inbox, InboxQueue, IncomingEvent, MemoryInbox};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), hooklatch::dedup::DedupError> {
//! let store = MemoryInbox::new();
//! let event = IncomingEvent::new("stripe", "evt_1", br#"{"id":"evt_1"}"#);
//! assert_eq!(store.accept(&event).await?, Acceptance::Accepted);
//! assert_eq!(store.accept(&event).await?, Acceptance::Duplicate);
//!
//! let taken = store.take("stripe", "worker-1", 10).await?;
//! assert_eq!(taken.len(), 1);
//! store.ack(&taken[0]).await?;
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::time::Duration;

use crate::store;
pub(crate) use crate::store::{millis, new_token};

#[cfg(feature = "postgres")]
pub(crate) mod accept_batch;
pub(crate) mod any;
mod error;
mod memory;
mod meta;
mod options;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
mod tail;
#[cfg(feature = "worker")]
pub(crate) mod wake;

/// A task that runs until dropped: see [`InboxQueue::watch_accepts`].
pub type AcceptWatch = std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Tells this process's workers on `namespace` that an event was accepted.
fn wake_workers(namespace: &str) {
    #[cfg(feature = "worker")]
    wake::accepted(namespace);
    #[cfg(not(feature = "worker"))]
    let _ = namespace;
}

pub use any::AnyInbox;
pub use error::{DedupError, StoreError};
pub use memory::MemoryInbox;
pub use meta::EventMeta;
pub use options::StoreOptions;
#[cfg(feature = "postgres")]
pub use postgres::PostgresInbox;
#[cfg(feature = "redis")]
pub use redis::{DEFAULT_SHARDS, MAX_SHARDS, RedisInbox};
#[cfg(all(feature = "redis", feature = "sender"))]
pub(crate) use redis::{check_eviction_policy, check_persistence};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use sql::SqlInbox;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteInbox;
pub use tail::{EventStatus, Tail, TailedEvent};

/// The longest namespace accepted, in bytes.
pub const MAX_NAMESPACE_LEN: usize = store::MAX_NAMESPACE_LEN;

/// An event to accept into the inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct IncomingEvent<'a> {
    /// Where the event comes from, such as `stripe` or a tenant id: ids are
    /// unique within a namespace. 1 to 64 characters of `A-Z a-z 0-9 _ - . :`.
    pub namespace: &'a str,
    /// The event id, 1 to 256 visible ASCII characters.
    pub id: &'a str,
    /// The body exactly as received.
    pub body: &'a [u8],
    /// The signed timestamp, if the scheme has one (seconds since the epoch).
    pub signed_at: Option<i64>,
    /// What the provider said about the event, kept with it.
    pub meta: Option<&'a EventMeta>,
}

impl<'a> IncomingEvent<'a> {
    /// An event without a signed timestamp.
    pub fn new(namespace: &'a str, id: &'a str, body: &'a [u8]) -> Self {
        Self {
            namespace,
            id,
            body,
            signed_at: None,
            meta: None,
        }
    }

    /// Keeps `meta` with the event: workers see it on the
    /// [`InboxEntry`].
    #[must_use]
    pub fn with_meta(mut self, meta: &'a EventMeta) -> Self {
        self.meta = Some(meta);
        self
    }

    /// The metadata as a store keeps it.
    #[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
    pub(crate) fn meta_text(&self) -> Option<String> {
        self.meta.and_then(EventMeta::to_text)
    }

    /// Records the signed timestamp with the event.
    #[must_use]
    pub fn with_signed_at(mut self, signed_at: Option<i64>) -> Self {
        self.signed_at = signed_at;
        self
    }
}

/// What [`Inbox::accept`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Acceptance {
    /// The id was claimed and the event enqueued, durably: answer 2xx.
    Accepted,
    /// The id was claimed before; nothing was enqueued: answer 2xx.
    Duplicate,
}

/// An event taken from the inbox by a worker. (A sender's outbox holds
/// deliveries; this is the receiving side's entry.)
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InboxEntry {
    /// The event's namespace.
    pub namespace: String,
    /// The event id.
    pub id: String,
    /// The body exactly as received.
    pub body: Vec<u8>,
    /// The signed timestamp, if any.
    pub signed_at: Option<i64>,
    /// 1 on the first delivery, 2 on the second, and so on.
    pub attempt: u32,
    /// What the provider said about the event (its type, delivery id,
    /// retry number, kept headers).
    pub meta: EventMeta,
    /// Why and when the event was dead-lettered: set on the entries
    /// [`dead_letters`](InboxQueue::dead_letters) returns, `None` on a
    /// taken event.
    pub dead: Option<DeadLetter>,
    /// When the store accepted the event, in milliseconds since the Unix
    /// epoch on the store's clock (the process's for SQLite and memory);
    /// `None` from a store of your own that does not say.
    pub received_at_millis: Option<i64>,
    pub(crate) receipt: Receipt,
}

/// Why and when an event was dead-lettered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// What the worker said (a handler's error), or what the store saw: a
    /// last attempt nacked, or one that ran past its visibility timeout.
    /// Empty for events dead-lettered before stores kept reasons.
    pub reason: String,
    /// When, in milliseconds since the Unix epoch on the store's clock;
    /// `None` for events dead-lettered before stores kept the time.
    pub at_millis: Option<i64>,
}

impl DeadLetter {
    /// Why an event was dead-lettered and when (milliseconds since the
    /// Unix epoch), as a store of your own reports it on the entries
    /// [`dead_letters`](InboxQueue::dead_letters) returns.
    pub fn new(reason: impl Into<String>, at_millis: Option<i64>) -> Self {
        Self {
            reason: reason.into(),
            at_millis,
        }
    }
}

/// The reason a store keeps for an event nacked on its last attempt
/// without one of its own.
pub const NACKED_ON_LAST_ATTEMPT: &str = "nacked on its last attempt";

/// The reason a store keeps for an event whose last attempt ran past its
/// visibility timeout: its worker died, or neither acked nor nacked it.
pub const LAST_ATTEMPT_TIMED_OUT: &str =
    "its last attempt ran past the visibility timeout with no ack or nack";

impl InboxEntry {
    /// The body deserialized into `T`: verify now, deserialize in the
    /// worker. A body that does not parse is the sender's mistake and will
    /// not parse on a retry either, so [`nack`](InboxQueue::nack) it towards the
    /// dead letters or ack and log it, rather than answer the sender 4xx.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use hooklatch::dedup::{Inbox, InboxQueue, IncomingEvent, MemoryInbox};
    ///
    /// #[derive(serde::Deserialize)]
    /// struct InvoicePaid { id: String }
    ///
    /// let store = MemoryInbox::new();
    /// store.accept(&IncomingEvent::new("stripe", "evt_1", br#"{"id":"evt_1"}"#)).await?;
    /// let entry = store.take("stripe", "worker", 1).await?.remove(0);
    /// let paid: InvoicePaid = entry.json()?;
    /// assert_eq!(paid.id, "evt_1");
    /// # Ok(())
    /// # }
    /// ```
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// An entry as a store of your own hands it out from
    /// [`take`](InboxQueue::take): its first attempt, no signed time, no
    /// metadata, not dead; the `with_*` methods set the rest.
    ///
    /// ```
    /// use hooklatch::dedup::{EventMeta, InboxEntry, Receipt};
    ///
    /// let entry = InboxEntry::new("stripe", "evt_1", b"{}".to_vec(), Receipt::new("row-7", "t-1"))
    ///     .with_attempt(2)
    ///     .with_meta(EventMeta::with_type("invoice.paid"))
    ///     .with_received_at_millis(Some(1_767_225_600_000));
    /// assert_eq!(entry.receipt().entry(), "row-7");
    /// assert_eq!(entry.attempt, 2);
    /// ```
    pub fn new(
        namespace: impl Into<String>,
        id: impl Into<String>,
        body: Vec<u8>,
        receipt: Receipt,
    ) -> Self {
        Self {
            namespace: namespace.into(),
            id: id.into(),
            body,
            signed_at: None,
            attempt: 1,
            meta: EventMeta::default(),
            dead: None,
            received_at_millis: None,
            receipt,
        }
    }

    /// Which attempt this taking is: 1 on the first.
    #[must_use]
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// The signed timestamp the receiver kept, if any.
    #[must_use]
    pub fn with_signed_at(mut self, signed_at: Option<i64>) -> Self {
        self.signed_at = signed_at;
        self
    }

    /// What the provider said about the event.
    #[must_use]
    pub fn with_meta(mut self, meta: EventMeta) -> Self {
        self.meta = meta;
        self
    }

    /// When the store accepted the event, in milliseconds since the Unix
    /// epoch.
    #[must_use]
    pub fn with_received_at_millis(mut self, at: Option<i64>) -> Self {
        self.received_at_millis = at;
        self
    }

    /// Why and when the event was dead-lettered, on the entries
    /// [`dead_letters`](InboxQueue::dead_letters) returns.
    #[must_use]
    pub fn with_dead(mut self, dead: DeadLetter) -> Self {
        self.dead = Some(dead);
        self
    }

    /// This taking's receipt: what an ack or nack of the entry is checked
    /// against.
    pub fn receipt(&self) -> &Receipt {
        &self.receipt
    }
}

/// Identifies one taking of an event, so only its taker can ack or nack
/// it: which entry of the store (a row, a stream entry), and a token that
/// changes every time the entry is taken. A store of your own makes one
/// for each entry it hands out and checks both on every ack, nack and
/// extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    pub(crate) entry: String,
    pub(crate) token: String,
}

impl Receipt {
    /// The receipt of `entry` taken under `token`.
    pub fn new(entry: impl Into<String>, token: impl Into<String>) -> Self {
        Self {
            entry: entry.into(),
            token: token.into(),
        }
    }

    /// Which entry of the store was taken.
    pub fn entry(&self) -> &str {
        &self.entry
    }

    /// This taking's token: an ack or nack that carries another is lost.
    pub fn token(&self) -> &str {
        &self.token
    }
}

/// How [`InboxQueue::give_back`] gives an event back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveBack {
    /// Ready again after the delay, or dead-lettered if this was its last
    /// allowed attempt.
    Retry(Duration),
    /// Dead-lettered now, whatever attempts it has left: retrying cannot
    /// help (a body that does not parse, a customer that does not exist).
    DeadLetter,
}

/// What [`InboxQueue::nack`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NackOutcome {
    /// The event will be delivered again after the delay.
    WillRetry,
    /// The event failed `max_attempts` times and was moved to the dead
    /// letters; see [`InboxQueue::dead_letters`].
    DeadLettered,
}

/// What [`LeaseStore::claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The id is yours until the lease expires: run the handler, then
    /// [`complete`](LeaseStore::complete) or [`release`](LeaseStore::release).
    Fresh(Lease),
    /// Another delivery holds the id. Do not answer 2xx: it may still fail.
    /// Ask the sender to come back after `retry_after`.
    InProgress {
        /// How long until the other holder's lease expires.
        retry_after: Duration,
    },
    /// The event was handled already: answer 2xx and do nothing.
    Done,
}

/// A claim held by one delivery of an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    namespace: String,
    id: String,
    token: String,
}

impl Lease {
    /// The event's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The event id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// A store call's answer: what the store's implementations write, so that
/// their signatures read on one line.
pub(crate) type Answer<T> = Result<T, DedupError>;

/// Where a receiver accepts events: each event id claimed once, the event
/// kept durably with its claim. This is all the tower layer and the
/// actix extractor call, so a store of your own that hands events to
/// something else (a broker, say) implements this alone; a store a worker
/// drains implements [`InboxQueue`] too.
///
/// Implementations make [`accept`](Self::accept) one atomic step: after an
/// error, neither the claim nor the event is kept.
///
/// ```
/// use std::collections::HashSet;
/// use std::sync::Mutex;
/// use hooklatch::dedup::{Acceptance, DedupError, Inbox, IncomingEvent};
///
/// /// Remembers ids in memory and hands each new event on (to a channel,
/// /// say): a sketch, as a real store keeps both durably, in one step.
/// #[derive(Default)]
/// struct Remember(Mutex<HashSet<(String, String)>>);
///
/// impl Inbox for Remember {
///     async fn accept(&self, event: &IncomingEvent<'_>) -> Result<Acceptance, DedupError> {
///         let key = (event.namespace.to_owned(), event.id.to_owned());
///         Ok(match self.0.lock().unwrap().insert(key) {
///             true => Acceptance::Accepted,
///             false => Acceptance::Duplicate,
///         })
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), DedupError> {
/// let store = Remember::default();
/// let event = IncomingEvent::new("github", "72d3162e", b"{}");
/// assert_eq!(store.accept(&event).await?, Acceptance::Accepted);
/// assert_eq!(store.accept(&event).await?, Acceptance::Duplicate);
/// # Ok(())
/// # }
/// ```
pub trait Inbox: Send + Sync {
    /// Claims `event.id` in `event.namespace` and enqueues the event, in one
    /// atomic step.
    fn accept(
        &self,
        event: &IncomingEvent<'_>,
    ) -> impl Future<Output = Result<Acceptance, DedupError>> + Send;
}

/// The worker's and the operator's side of an [`Inbox`]: a durable queue
/// of the accepted events, taken, acked, retried and dead-lettered.
///
/// ```no_run
/// use hooklatch::dedup::{InboxQueue, SqliteInbox};
///
/// # async fn run(store: SqliteInbox) -> Result<(), hooklatch::dedup::DedupError> {
/// let batch = store.take("stripe", "worker-1", 256).await?;
/// // handle each event, then:
/// store.ack_many(&batch).await?;
/// # Ok(())
/// # }
/// ```
pub trait InboxQueue: Inbox {
    /// Takes up to `max` events of `namespace` that are ready, oldest first,
    /// hiding them from other workers for the visibility timeout. A Redis
    /// store spread over shards hands out each shard's events oldest first
    /// and visits the shards in turn; order per resource is the
    /// [`sequence`](crate::sequence) module's job.
    fn take(
        &self,
        namespace: &str,
        consumer: &str,
        max: usize,
    ) -> impl Future<Output = Result<Vec<InboxEntry>, DedupError>> + Send;

    /// Marks a taken event done; it is never delivered again.
    ///
    /// Fails with [`DedupError::DeliveryLost`] if the visibility timeout
    /// passed and the event was taken by another worker.
    fn ack(&self, delivery: &InboxEntry) -> impl Future<Output = Result<(), DedupError>> + Send;

    /// Marks taken events done, as [`ack`](Self::ack) does for each, in as
    /// few steps as the store allows: one statement (and one commit) per
    /// [`ACK_BATCH`] on SQLite and Postgres, one script per shard on Redis.
    /// A worker that handles a batch pays for one commit, not one per
    /// event.
    ///
    /// Returns one flag per delivery, in order: `false` where the delivery
    /// was lost (where [`ack`](Self::ack) would fail with
    /// [`DedupError::DeliveryLost`]). An error means the store failed and
    /// nothing was acked, except [`DedupError::AckedInPart`] (Redis, when
    /// some shards answered and others failed), which says per delivery
    /// what was acked and what is worth acking again.
    ///
    /// ```no_run
    /// # async fn run(store: hooklatch::dedup::SqliteInbox) -> Result<(), hooklatch::dedup::DedupError> {
    /// use hooklatch::dedup::InboxQueue;
    ///
    /// let batch = store.take("stripe", "worker-1", 256).await?;
    /// for delivery in &batch {
    ///     println!("handling {}", delivery.id);
    /// }
    /// let acked = store.ack_many(&batch).await?;
    /// for (delivery, acked) in batch.iter().zip(acked) {
    ///     if !acked {
    ///         eprintln!("{} took too long and went to another worker", delivery.id);
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    fn ack_many(
        &self,
        deliveries: &[InboxEntry],
    ) -> impl Future<Output = Result<Vec<bool>, DedupError>> + Send {
        async move {
            let mut acked = Vec::with_capacity(deliveries.len());
            for delivery in deliveries {
                acked.push(match self.ack(delivery).await {
                    Ok(()) => true,
                    Err(DedupError::DeliveryLost) => false,
                    Err(error) => return Err(error),
                });
            }
            Ok(acked)
        }
    }

    /// A heartbeat for a worker that needs longer: hides the taken event
    /// for another visibility timeout from now, on the store's clock.
    ///
    /// Fails with [`DedupError::DeliveryLost`] if the event was taken by
    /// another worker meanwhile (the token no longer matches), or if its
    /// visibility timeout already ran out (another worker may take it at
    /// any moment), or it was acked or nacked.
    fn extend_visibility(
        &self,
        delivery: &InboxEntry,
    ) -> impl Future<Output = Result<(), DedupError>> + Send;

    /// Gives a taken event back, to be delivered again after `retry_in`,
    /// or dead-lettered if this was its last allowed attempt (with
    /// [`NACKED_ON_LAST_ATTEMPT`] as its reason).
    fn nack(
        &self,
        delivery: &InboxEntry,
        retry_in: Duration,
    ) -> impl Future<Output = Result<NackOutcome, DedupError>> + Send {
        self.give_back(delivery, GiveBack::Retry(retry_in), NACKED_ON_LAST_ATTEMPT)
    }

    /// Gives a taken event back as [`nack`](Self::nack) does, or
    /// dead-letters it at once ([`GiveBack::DeadLetter`]), keeping `reason`
    /// (a handler's error, say) with it should it be dead-lettered: the
    /// [`DeadLetter`] that [`dead_letters`](Self::dead_letters) shows.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), hooklatch::dedup::DedupError> {
    /// use hooklatch::dedup::{GiveBack, Inbox, InboxQueue, IncomingEvent, MemoryInbox, NackOutcome};
    ///
    /// let store = MemoryInbox::new();
    /// let _ = store.accept(&IncomingEvent::new("stripe", "evt_1", b"{}")).await?;
    /// let taken = store.take("stripe", "worker-1", 1).await?;
    /// let outcome = store.give_back(&taken[0], GiveBack::DeadLetter, "no such customer").await?;
    /// assert_eq!(outcome, NackOutcome::DeadLettered);
    /// let dead = store.dead_letters("stripe", 10).await?;
    /// assert_eq!(dead[0].dead.as_ref().unwrap().reason, "no such customer");
    /// # Ok(())
    /// # }
    /// ```
    fn give_back(
        &self,
        delivery: &InboxEntry,
        how: GiveBack,
        reason: &str,
    ) -> impl Future<Output = Result<NackOutcome, DedupError>> + Send;

    /// The visibility timeout this store hides a taken event for: a worker
    /// extends a long handler's event before half of it has passed.
    fn visibility_timeout(&self) -> Duration {
        StoreOptions::default().visibility_timeout()
    }

    /// A task that wakes this process's workers of `namespace` when
    /// another process accepts an event into it, for as long as it runs;
    /// `None` where the store cannot tell, and workers find such events by
    /// polling. A `Worker` (feature `worker`) runs it while it runs.
    ///
    /// Postgres `LISTEN`s, fed by a `NOTIFY` in each accept's transaction.
    /// Redis subscribes to the namespace's channel, on which an accept
    /// publishes when it is the first into a shard a take found empty (so a
    /// busy inbox publishes next to nothing); a store on a connection
    /// handed over with `RedisConnection::from` cannot subscribe and gives
    /// `None`. Each time the task (re)connects, it wakes the workers once,
    /// so nothing accepted while it was away waits for a poll.
    fn watch_accepts(&self, namespace: &str) -> Option<AcceptWatch> {
        let _ = namespace;
        None
    }

    /// Up to `max` dead-lettered events of `namespace`, oldest first.
    fn dead_letters(
        &self,
        namespace: &str,
        max: usize,
    ) -> impl Future<Output = Result<Vec<InboxEntry>, DedupError>> + Send;

    /// How many events of `namespace` wait (ready, or due later after a
    /// nack), are taken by a worker, and are dead-lettered.
    fn stats(&self, namespace: &str)
    -> impl Future<Output = Result<InboxStats, DedupError>> + Send;

    /// The events accepted into `tail`'s namespace since its last call
    /// (up to `max`, in about the order they were accepted), each with
    /// the state it is in now: what `hooklatch tail` prints. The first
    /// call on a new [`Tail`] returns nothing and starts it where the
    /// store is.
    ///
    /// Lease-mode claims show too: taken while held, done once completed.
    /// SQLite and Postgres read the claims (an event's type is gone once
    /// it is done; a released lease leaves no row); an accept whose commit
    /// came over 2 s after its statement began is missed (a `claim_in`
    /// inside a long transaction of yours, say). Redis keeps a log of
    /// accepts, leases and what became of them only while a tail reads it:
    /// each shard's log ends 30 s after the last read, and keeps its last
    /// 10,000 or so entries.
    /// A store of your own answers [`DedupError::Unsupported`] unless it
    /// implements this.
    fn tail(
        &self,
        tail: &mut Tail,
        max: usize,
    ) -> impl Future<Output = Result<Vec<TailedEvent>, DedupError>> + Send {
        let _ = (tail, max);
        async {
            Err(DedupError::Unsupported(
                "follow its accepts (`InboxQueue::tail`)",
            ))
        }
    }

    /// Puts dead letters of `namespace` back in the inbox, ready now, with
    /// their attempts counted from zero: the one with event id `id`, or
    /// every one when `id` is `None`. Returns how many. Their claims never
    /// went away, so a retry from the sender is still a duplicate.
    fn requeue_dead(
        &self,
        namespace: &str,
        id: Option<&str>,
    ) -> impl Future<Output = Result<u64, DedupError>> + Send;
}

/// What [`InboxQueue::stats`] counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InboxStats {
    /// Events ready for a worker, or due later after a nack.
    pub waiting: u64,
    /// Events a worker holds now.
    pub taken: u64,
    /// Dead-lettered events.
    pub dead: u64,
}

/// Claims for handlers that run inline, while the sender waits.
pub trait LeaseStore: Send + Sync {
    /// Claims `id` in `namespace` for `lease_for`.
    fn claim(
        &self,
        namespace: &str,
        id: &str,
        lease_for: Duration,
    ) -> impl Future<Output = Result<Claim, DedupError>> + Send;

    /// Marks the event handled: later claims answer [`Claim::Done`].
    ///
    /// Fails with [`DedupError::LeaseLost`] if the lease expired and another
    /// delivery took the id.
    fn complete(&self, lease: &Lease) -> impl Future<Output = Result<(), DedupError>> + Send;

    /// Gives the claim up so that a retry can take it at once.
    fn release(&self, lease: &Lease) -> impl Future<Output = Result<(), DedupError>> + Send;

    /// A heartbeat for a handler that needs longer: the lease now ends
    /// `lease_for` from now, on the store's clock.
    ///
    /// Fails with [`DedupError::LeaseLost`] if another delivery took the id
    /// meanwhile (the token no longer matches), if the lease already ran
    /// out (another delivery may claim it at any moment), or it was
    /// completed or released.
    fn extend_lease(
        &self,
        lease: &Lease,
        lease_for: Duration,
    ) -> impl Future<Output = Result<(), DedupError>> + Send;
}

/// Checks a namespace and an event id before they reach a store.
pub(crate) fn check_key(namespace: &str, id: &str) -> Result<(), DedupError> {
    check_namespace(namespace)?;
    match store::key_problem(id) {
        None => Ok(()),
        Some(reason) => Err(DedupError::InvalidKey {
            what: "event id",
            reason,
        }),
    }
}

/// Checks a namespace as the stores keep it and an event id, as every
/// built-in store does before it stores anything: a store of your own
/// calls it first in `accept` and `claim`, so that a bad key is refused as
/// [`DedupError::InvalidKey`] (a 400 to the sender) on every store alike.
///
/// ```
/// use hooklatch::dedup::validate_key;
///
/// assert!(validate_key("hooks", "evt_1").is_ok());
/// assert!(validate_key("hooks", "has space").is_err());
/// assert!(validate_key("two words", "evt_1").is_err());
/// ```
pub fn validate_key(namespace: &str, id: &str) -> Result<(), DedupError> {
    check_key(namespace, id)
}

/// How many claims a SQL store's `purge` deletes per statement (and
/// transaction): small enough that each batch is quick and holds its locks
/// briefly, large enough that a purge of millions of rows does not take
/// millions of round trips.
pub const PURGE_BATCH: u64 = 5_000;

/// How many deliveries one statement of [`InboxQueue::ack_many`] acks on the SQL
/// stores; more are acked in several.
pub const ACK_BATCH: usize = 1_000;

/// Checks that `namespace` can be configured: 1 to 64 characters of
/// `A-Z a-z 0-9 _ - . :`. Use it to refuse a bad configuration at startup.
///
/// ```
/// assert!(hooklatch::dedup::validate_namespace("tenant-7:stripe").is_ok());
/// assert!(hooklatch::dedup::validate_namespace("two words").is_err());
/// ```
pub fn validate_namespace(namespace: &str) -> Result<(), DedupError> {
    match store::namespace_problem(namespace) {
        None => Ok(()),
        Some(reason) => Err(DedupError::InvalidKey {
            what: NAMESPACE,
            reason,
        }),
    }
}

/// Checks a namespace as the stores keep it: one that
/// [`validate_namespace`] accepts, or a tenant's, two such joined by `~`
/// ([`tenant_namespace`]). For tools that take a stored namespace from a
/// user, as `hooklatch inbox --namespace hooks~acme` does.
///
/// ```
/// use hooklatch::dedup::validate_stored_namespace;
///
/// assert!(validate_stored_namespace("hooks").is_ok());
/// assert!(validate_stored_namespace("hooks~acme").is_ok());
/// assert!(validate_stored_namespace("hooks~").is_err());
/// assert!(validate_stored_namespace("hooks~acme~more").is_err());
/// ```
pub fn validate_stored_namespace(namespace: &str) -> Result<(), DedupError> {
    check_namespace(namespace)
}

/// The namespace a receiver configured with `namespace` claims a tenant's
/// events in: the two joined by `~`, which neither may hold, so no tenant
/// name can reach another receiver's namespace or another tenant's.
///
/// ```
/// use hooklatch::dedup::tenant_namespace;
///
/// assert_eq!(tenant_namespace("hooks", "acme"), "hooks~acme");
/// // A tenant called `stripe` never lands in a receiver's `hooks:stripe`.
/// assert_ne!(tenant_namespace("hooks", "stripe"), "hooks:stripe");
/// ```
pub fn tenant_namespace(namespace: &str, tenant: &str) -> String {
    let mut joined = String::with_capacity(namespace.len() + 1 + tenant.len());
    joined.push_str(namespace);
    joined.push(store::TENANT_SEPARATOR);
    joined.push_str(tenant);
    joined
}

/// `Ok` when a fenced statement changed exactly one row; `lost` when the
/// token no longer matched (another holder took it over).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn exactly_one(rows: u64, lost: DedupError) -> Result<(), DedupError> {
    if rows == 1 { Ok(()) } else { Err(lost) }
}

/// Checks a table prefix: it is pasted into SQL, so only a plain lowercase
/// identifier is allowed.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn check_prefix(prefix: &str) -> Result<(), DedupError> {
    if store::sql::valid_prefix(prefix) {
        Ok(())
    } else {
        Err(DedupError::InvalidTableName(prefix.to_owned()))
    }
}

/// What [`DedupError::InvalidKey`] names for a namespace at fault.
pub(crate) const NAMESPACE: &str = "namespace";

/// Checks a namespace as a claim store or inbox keeps it: one namespace,
/// or a receiver's and its tenant's joined by [`tenant_namespace`].
pub(crate) fn check_namespace(namespace: &str) -> Result<(), DedupError> {
    match store::stored_namespace_problem(namespace) {
        None => Ok(()),
        Some(reason) => Err(DedupError::InvalidKey {
            what: NAMESPACE,
            reason,
        }),
    }
}

impl Lease {
    /// The lease a store of your own hands out from
    /// [`claim`](LeaseStore::claim): `token` is unique to this claim, so a
    /// completion or release by a holder whose lease ran out and was
    /// claimed again is refused.
    pub fn new(namespace: &str, id: &str, token: impl Into<String>) -> Self {
        Self {
            namespace: namespace.to_owned(),
            id: id.to_owned(),
            token: token.into(),
        }
    }

    /// This claim's token.
    pub fn token(&self) -> &str {
        &self.token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_validated() {
        assert!(check_key("stripe", "evt_1").is_ok());
        assert!(check_key("tenant-7:github", "72d3162e-cc78").is_ok());
        for (namespace, id) in [
            ("", "a"),
            ("a b", "a"),
            ("ns", ""),
            ("ns", "a b"),
            ("ns", "é"),
            (&"n".repeat(65) as &str, "a"),
            ("ns", &"i".repeat(257) as &str),
        ] {
            assert!(check_key(namespace, id).is_err(), "{namespace:?} {id:?}");
        }
    }
}
