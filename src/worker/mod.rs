//! The inbox's consuming half: a [`Worker`] takes accepted events, runs a
//! [`Handler`] for each, and acks, retries or dead-letters it.
//!
//! What it does for you, on every store:
//!
//! - **Outcomes.** `Ok` acks (in batches, `ack_many`). A [`Failure`] gives
//!   the event back with exponential backoff and full jitter, or after the
//!   delay the handler asked for; after the last attempt (the store's
//!   `max_attempts`, or the worker's [`with_max_attempts`](Worker::with_max_attempts))
//!   or on [`Failure::dead_letter`] it is dead-lettered **with the
//!   failure's text as its reason**. A panic is caught and is a failure
//!   whose reason is the panic's message. An ack the store reports lost
//!   (another worker took the event) is counted and logged.
//! - **Capacity.** At most [`with_concurrency`](Worker::with_concurrency)
//!   events are held at once; the worker takes more as they finish, in one
//!   `take` for as many as it has room for.
//! - **Wake-ups.** An accept in the same process wakes the worker at once,
//!   and on Postgres one in another process too (`LISTEN`/`NOTIFY`,
//!   [`watch_accepts`](crate::dedup::InboxQueue::watch_accepts)),
//!   where an idle worker then polls every
//!   [`with_idle_poll`](Worker::with_idle_poll) (250 ms by default) only
//!   for retries coming due. Elsewhere it polls, backing off while idle
//!   from 10 ms to that interval.
//! - **Heartbeats.** While a handler runs, the worker extends its event's
//!   visibility every half visibility timeout (on the store's clock). If
//!   the store says the event went to another worker, the handler is told
//!   ([`Event::lost`]) and its result is not acked.
//! - **Order per resource.** With [`ordered_by`](Worker::ordered_by), events
//!   with one key run one at a time, in the order they were taken, while
//!   other keys run in parallel. SQLite and Postgres hand events out in
//!   accept order; Redis in accept order within a shard (a shard is chosen
//!   by event id), so across shards order is not promised there. A failed
//!   event goes back with its backoff and does not hold up its key.
//! - **Shutdown.** [`Running::stop`] takes nothing more, lets handlers in
//!   flight finish until the grace period ends, acks what finished and
//!   gives back (ready now) what did not. Nothing is lost; what did not
//!   finish runs again: handlers run **at least once**.
//! - **Traces and metrics.** Each event runs in a `webhook.handle` span
//!   (`namespace`, `id`, `type`, `attempt`, and the `traceparent` the
//!   receiver kept, if any). With the `metrics` feature:
//!   `hooklatch_worker_events_total{namespace, type, outcome}` (`handled`,
//!   `retried`, `dead_lettered`, `lost`, `given_back`),
//!   `hooklatch_worker_handler_seconds{namespace, type}` and
//!   `hooklatch_worker_in_flight{namespace}`.
//!
//! ```no_run
//! use std::time::Duration;
//! use hooklatch::dedup::SqliteInbox;
//! use hooklatch::worker::{Event, Failure, Router, Worker};
//!
//! #[derive(serde::Deserialize)]
//! struct Invoice { id: String }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let inbox = SqliteInbox::open("webhooks.db").await?;
//! let router = Router::new().on("invoice.paid", |_event: Event, invoice: Invoice| async move {
//!     println!("paid: {}", invoice.id);
//!     Ok::<_, Failure>(())
//! });
//! let running = Worker::new(inbox, "stripe", router).start();
//! // ... on shutdown:
//! let report = running.stop(Duration::from_secs(10)).await;
//! println!("{} handled, {} given back", report.handled, report.given_back);
//! # Ok(())
//! # }
//! ```

mod failure;
mod handler;
mod run;
mod sequenced;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use failure::{Failure, MAX_REASON_LEN};
pub use handler::{Event, Handler, HandlerFuture, Router};
pub use run::{Report, Running};

use crate::dedup::{InboxEntry, InboxQueue};

/// The key events are ordered by (see [`Worker::ordered_by`]).
type OrderKey = Arc<dyn Fn(&InboxEntry) -> Option<String> + Send + Sync>;

/// Takes events from an inbox and runs a handler for each: see the
/// [module](self) for what it guarantees.
pub struct Worker<Q> {
    store: Q,
    namespace: String,
    consumer: String,
    handler: Arc<dyn Handler>,
    concurrency: usize,
    backoff: Backoff,
    max_attempts: Option<u32>,
    idle_poll: Duration,
    take_interval: Duration,
    order: Option<OrderKey>,
    request_traces: bool,
}

impl<Q> fmt::Debug for Worker<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("namespace", &self.namespace)
            .field("consumer", &self.consumer)
            .field("concurrency", &self.concurrency)
            .field("backoff", &self.backoff)
            .field("max_attempts", &self.max_attempts)
            .field("idle_poll", &self.idle_poll)
            .field("take_interval", &self.take_interval)
            .field("ordered", &self.order.is_some())
            .finish_non_exhaustive()
    }
}

/// Exponential backoff with full jitter: the delay before retry `n` is
/// drawn from `0..=min(cap, base × 2^(n-1))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first retry's ceiling.
    pub base: Duration,
    /// No delay is longer.
    pub cap: Duration,
}

impl Default for Backoff {
    /// 1 s, doubling, up to 10 minutes.
    fn default() -> Self {
        Self {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(600),
        }
    }
}

impl Backoff {
    /// The delay after attempt `attempt` (1 for the first) failed.
    pub fn delay(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(32);
        let ceiling = self
            .base
            .saturating_mul(1_u32 << doublings.min(31))
            .min(self.cap);
        let millis = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(fastrand::u64(0..=millis))
    }
}

/// How many events a worker holds at once unless told.
pub const DEFAULT_CONCURRENCY: usize = 32;

/// The longest a worker waits between polls while idle, unless told.
pub const DEFAULT_IDLE_POLL: Duration = Duration::from_millis(250);

/// The least time between two takes after one that came back short,
/// unless told.
pub const DEFAULT_TAKE_INTERVAL: Duration = Duration::from_millis(5);

impl<Q: InboxQueue + 'static> Worker<Q> {
    /// A worker taking events of `namespace` from `store` and running
    /// `handler` for each: a closure, or a [`Router`].
    pub fn new(store: Q, namespace: &str, handler: impl Handler) -> Self {
        Self {
            store,
            namespace: namespace.to_owned(),
            consumer: format!("worker-{}", crate::store::new_token()),
            handler: Arc::new(handler),
            concurrency: DEFAULT_CONCURRENCY,
            backoff: Backoff::default(),
            max_attempts: None,
            idle_poll: DEFAULT_IDLE_POLL,
            take_interval: DEFAULT_TAKE_INTERVAL,
            order: None,
            request_traces: false,
        }
    }

    /// Holds at most `limit` events at once (at least 1; default 32).
    #[must_use]
    pub fn with_concurrency(mut self, limit: usize) -> Self {
        self.concurrency = limit.max(1);
        self
    }

    /// The backoff between retries of a failed event.
    #[must_use]
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Dead-letters an event whose attempt `max` failed, if that comes
    /// before the store's own `max_attempts`.
    #[must_use]
    pub fn with_max_attempts(mut self, max: u32) -> Self {
        self.max_attempts = Some(max.max(1));
        self
    }

    /// The longest wait between polls while idle (default 250 ms). An
    /// accept in this process, or on Postgres in any, wakes the worker at
    /// once whatever this is.
    #[must_use]
    pub fn with_idle_poll(mut self, interval: Duration) -> Self {
        self.idle_poll = interval.max(Duration::from_millis(1));
        self
    }

    /// The least time between the starts of two takes when the first came
    /// back with events but short of what it asked (default 5 ms): under a
    /// steady load each take then brings what arrived meanwhile, since a
    /// take costs the store a round whatever it returns (on Redis a script
    /// per shard, on SQLite and Postgres a commit). After a take of 32
    /// events or more (a stream, not a trickle) the wait grows with the
    /// take, to at most four intervals (20 ms by default), so takes stay few
    /// and full. An event that follows a quiet spell is taken at once; under
    /// a trickle an event waits at most one interval longer. A take that
    /// comes back full is followed at once. `Duration::ZERO` takes on every
    /// wake-up.
    #[must_use]
    pub fn with_take_interval(mut self, interval: Duration) -> Self {
        self.take_interval = interval;
        self
    }

    /// The name the worker takes events under (a random one by default).
    #[must_use]
    pub fn with_consumer(mut self, consumer: &str) -> Self {
        consumer.clone_into(&mut self.consumer);
        self
    }

    /// Runs each handler in the trace the provider's request came with
    /// (its kept `traceparent`, see [`crate::trace`]), so that deliveries
    /// the handler sends carry that trace on to their endpoints. Off by
    /// default: the header is not signed by most schemes, so whoever sends
    /// or resends a request chooses the trace id and the sampled flag
    /// your endpoints then see. Turn it on where your providers are your
    /// own services, or sign their trace context.
    #[must_use]
    pub fn with_request_traces(mut self) -> Self {
        self.request_traces = true;
        self
    }

    /// Runs events with one key one at a time, in the order they were
    /// taken; events whose key is `None`, and different keys, run in
    /// parallel.
    ///
    /// ```
    /// # use hooklatch::dedup::MemoryInbox;
    /// # use hooklatch::worker::{Event, Failure, Worker};
    /// # async fn handle(_: Event) -> Result<(), Failure> { Ok(()) }
    /// // One customer's events in order: the key is the body's customer.
    /// let worker = Worker::new(MemoryInbox::new(), "stripe", handle).ordered_by(|entry| {
    ///     let body: serde_json::Value = entry.json().ok()?;
    ///     Some(body["data"]["object"]["customer"].as_str()?.to_owned())
    /// });
    /// # let _ = worker;
    /// ```
    #[must_use]
    pub fn ordered_by(
        mut self,
        key: impl Fn(&InboxEntry) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.order = Some(Arc::new(key));
        self
    }

    /// Puts each resource's events in order by their sequence numbers, with
    /// `tracker` (the [`sequence`](crate::sequence) module's) deciding for
    /// each event what `sequence_of` names (its resource and number;
    /// `None` for an event outside any sequence):
    ///
    /// - the next number runs the handler; once it succeeds the number is
    ///   committed, then the event acked;
    /// - a number at or before the last committed is stale: acked without
    ///   running the handler;
    /// - a number past the next waits: it is given back and retried with
    ///   the worker's backoff until the events before it were applied, and
    ///   dead-lettered after its last attempt, the reason naming the number
    ///   it waited for.
    ///
    /// One resource's events run one at a time, in the order they were
    /// taken (as [`ordered_by`](Self::ordered_by) the resource), and
    /// different resources in parallel. The handler runs at least once per
    /// number: a crash between the handler and the commit runs it again.
    ///
    /// ```
    /// # use hooklatch::dedup::MemoryInbox;
    /// # use hooklatch::worker::{Event, Failure, Worker};
    /// use hooklatch::sequence::{MemorySequences, Tracker};
    /// # async fn handle(_: Event) -> Result<(), Failure> { Ok(()) }
    /// // Each order's events by its `version`.
    /// let worker = Worker::new(MemoryInbox::new(), "shop", handle).sequenced(
    ///     Tracker::new(MemorySequences::new()),
    ///     |entry| {
    ///         let body: serde_json::Value = entry.json().ok()?;
    ///         Some((body["order"].as_str()?.to_owned(), body["version"].as_u64()?))
    ///     },
    /// );
    /// # let _ = worker;
    /// ```
    #[must_use]
    pub fn sequenced<S: crate::sequence::SequenceStore + 'static>(
        mut self,
        tracker: crate::sequence::Tracker<S>,
        sequence_of: impl Fn(&InboxEntry) -> Option<(String, u64)> + Send + Sync + 'static,
    ) -> Self {
        let sequence_of: sequenced::SequenceOf = Arc::new(sequence_of);
        let resource_of = Arc::clone(&sequence_of);
        self.order = Some(Arc::new(move |entry: &InboxEntry| {
            resource_of(entry).map(|(resource, _)| resource)
        }));
        self.handler = Arc::new(sequenced::Sequenced {
            tracker: Arc::new(tracker),
            sequence_of,
            inner: self.handler,
        });
        self
    }
}

/// The guide's examples (`docs/worker.md`), compiled with the doctests.
#[cfg(all(doctest, feature = "sqlite"))]
#[doc = include_str!("../../docs/worker.md")]
struct Guide;
