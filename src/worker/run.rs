//! The worker's loop: take while there is room, hold each event (its turn,
//! its handler, its heartbeats), ack in batches, and stop in order.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::Instrument as _;
use tracing::instrument::Instrumented;

use super::failure::Then;
use super::{Backoff, Event, Failure, Handler, HandlerFuture, OrderKey, Worker};
use crate::dedup::wake::Waiter;
use crate::dedup::{DedupError, GiveBack, InboxEntry, InboxQueue, NackOutcome};

/// Events per take interval that mark a stream rather than a trickle.
const STREAM_PER_INTERVAL: usize = 16;

/// The most take intervals between takes under a stream.
const MOST_INTERVALS: usize = 4;

/// How many take intervals follow a short take of `taken` events: one for
/// a trickle (fewer than 32), so an event waits at most one interval; up
/// to four for a stream, so each take brings several times more events.
/// Each take costs the store a round, and on Postgres and SQLite a commit,
/// whatever it brings: at 15,000 events a second a take every 5 ms cost
/// Postgres a quarter more CPU per event than one every 10-20 ms.
fn stretch(taken: usize) -> u32 {
    u32::try_from((taken / STREAM_PER_INTERVAL).clamp(1, MOST_INTERVALS)).unwrap_or(1)
}

/// How long takes must keep finding events before the worker counts as
/// busy, and stops asking for notice of accepts in other processes
/// ([`Waiter::set_busy`]). Any empty take makes it idle again at once; the
/// wait keeps a worker under a light load from switching many times a
/// second.
const BUSY_AFTER: Duration = Duration::from_millis(100);

/// The first wait after an empty take; it doubles up to the idle poll.
const FIRST_IDLE_WAIT: Duration = Duration::from_millis(10);

/// Records how long a first attempt waited from its accept to its
/// handler's start (`hooklatch_worker_lag_seconds`): the store's time of
/// the accept against this host's clock now, so a skew between the two
/// shows in it. Retries wait on purpose, and are left out.
#[cfg(feature = "metrics")]
fn record_lag(namespace: &str, entry: &InboxEntry) {
    let Some(received) = entry.received_at_millis.filter(|_| entry.attempt == 1) else {
        return;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        });
    #[allow(clippy::cast_precision_loss)]
    let lag = now.saturating_sub(received).max(0) as f64 / 1000.0;
    metrics::histogram!(
        "hooklatch_worker_lag_seconds",
        "namespace" => namespace.to_owned(),
        "type" => type_label(entry),
    )
    .record(lag);
}

/// Counts one answered ack: handled, or lost to another worker.
fn count_ack(counters: &Counters, entry: &InboxEntry, acked: bool) {
    if acked {
        counters.handled.fetch_add(1, Ordering::Relaxed);
        outcome_metric(entry, "handled");
    } else {
        counters.lost.fetch_add(1, Ordering::Relaxed);
        outcome_metric(entry, "lost");
        tracing::warn!(
            namespace = %entry.namespace,
            id = %entry.id,
            "worker: ack refused; the event went to another worker"
        );
    }
}

/// The most acks sent to the store in one `ack_many`.
const ACKS_AT_ONCE: usize = 512;

/// How long the acker waits, after the first finished event, for others
/// to join its batch. Handlers of one take finish within a moment of each
/// other; without the wait the acker, woken by the first, sends them in
/// many small `ack_many` calls (a store round trip and, on SQLite and
/// Postgres, a commit each). An ack only ends the event's hold, so this
/// delays nothing else.
const ACK_GATHER: Duration = Duration::from_millis(2);

/// How often a failed `ack_many` is tried again before its events are left
/// to come back after the visibility timeout.
const ACK_RETRIES: u32 = 3;

/// The reason kept should an event given back at shutdown have been on
/// its last attempt.
const STOPPED: &str = "the worker stopped before its handler finished";

/// What a worker did, counted since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// Events handled and acked.
    pub handled: u64,
    /// Events whose handler failed, given back to run again.
    pub retried: u64,
    /// Events dead-lettered.
    pub dead_lettered: u64,
    /// Events another worker took while this one held them (a heartbeat or
    /// an ack found them gone): their results were dropped.
    pub lost: u64,
    /// Events given back unfinished at shutdown, ready now.
    pub given_back: u64,
    /// Store calls that failed (a take, an ack, a give-back); the events
    /// concerned come back after the visibility timeout.
    pub store_errors: u64,
}

#[derive(Debug, Default)]
struct Counters {
    handled: AtomicU64,
    retried: AtomicU64,
    dead_lettered: AtomicU64,
    lost: AtomicU64,
    given_back: AtomicU64,
    store_errors: AtomicU64,
}

impl Counters {
    fn report(&self) -> Report {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Report {
            handled: read(&self.handled),
            retried: read(&self.retried),
            dead_lettered: read(&self.dead_lettered),
            lost: read(&self.lost),
            given_back: read(&self.given_back),
            store_errors: read(&self.store_errors),
        }
    }
}

/// A started worker. Dropping it leaves the worker running; call
/// [`stop`](Self::stop) to end it in order.
#[derive(Debug)]
pub struct Running {
    stop: watch::Sender<Option<Duration>>,
    task: JoinHandle<()>,
    counters: Arc<Counters>,
}

impl Running {
    /// Stops the worker: it takes nothing more, lets handlers in flight
    /// finish for up to `grace`, acks what finished and gives back (ready
    /// now, for the next worker) what did not. Returns what it did since
    /// it started.
    pub async fn stop(self, grace: Duration) -> Report {
        let _ = self.stop.send(Some(grace));
        if let Err(error) = self.task.await
            && error.is_panic()
        {
            std::panic::resume_unwind(error.into_panic());
        }
        self.counters.report()
    }

    /// What the worker did so far.
    pub fn report(&self) -> Report {
        self.counters.report()
    }
}

/// What every event's task shares.
struct Shared<Q> {
    store: Arc<Q>,
    namespace: String,
    handler: Arc<dyn Handler>,
    backoff: Backoff,
    max_attempts: Option<u32>,
    /// Whether handlers run in their request's trace.
    request_traces: bool,
    /// Heartbeats come every half of this.
    visibility: Duration,
    counters: Arc<Counters>,
    acks: mpsc::UnboundedSender<InboxEntry>,
    /// True once the grace period of a stop ended.
    deadline: watch::Receiver<bool>,
    /// For each order key, the last event taken with it: its number and
    /// what it sends when done.
    turns: Mutex<HashMap<String, (u64, oneshot::Receiver<()>)>>,
}

/// An event's place in its key's line: what it waits for, and what it
/// tells the next one.
struct Turn {
    wait: Option<oneshot::Receiver<()>>,
    done: Option<(String, u64, oneshot::Sender<()>)>,
}

impl<Q: InboxQueue + 'static> Worker<Q> {
    /// Starts the worker on the current Tokio runtime.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime.
    pub fn start(self) -> Running {
        let (stop, stopping) = watch::channel(None);
        let counters = Arc::new(Counters::default());
        let (acks, acked) = mpsc::unbounded_channel();
        let (deadline_passed, deadline) = watch::channel(false);
        let store = Arc::new(self.store);
        // Accepts in other processes wake this one, where the store can tell.
        let watching = store.watch_accepts(&self.namespace).map(tokio::spawn);
        let shared = Arc::new(Shared {
            visibility: store.visibility_timeout(),
            store: Arc::clone(&store),
            namespace: self.namespace,
            handler: self.handler,
            backoff: self.backoff,
            max_attempts: self.max_attempts,
            request_traces: self.request_traces,
            counters: Arc::clone(&counters),
            acks,
            deadline,
            turns: Mutex::default(),
        });
        let acker = tokio::spawn(ack_in_batches(store, Arc::clone(&counters), acked));
        let taking = Taking {
            consumer: self.consumer,
            concurrency: self.concurrency,
            idle_poll: self.idle_poll,
            take_interval: self.take_interval,
            // Woken on every accept, an idle worker polls only for retries
            // coming due; else it backs off from a short poll.
            first_idle_wait: if watching.is_some() {
                self.idle_poll
            } else {
                FIRST_IDLE_WAIT.min(self.idle_poll)
            },
            order: self.order,
        };
        let task = tokio::spawn(async move {
            taking.run(shared, stopping, deadline_passed).await;
            if let Some(watching) = watching {
                watching.abort();
            }
            // Every sender of acks is gone now: the acker drains and ends.
            let _ = acker.await;
        });
        Running {
            stop,
            task,
            counters,
        }
    }
}

/// The taking loop's own settings.
struct Taking {
    consumer: String,
    concurrency: usize,
    idle_poll: Duration,
    take_interval: Duration,
    /// The first wait after an empty take.
    first_idle_wait: Duration,
    order: Option<OrderKey>,
}

impl Taking {
    async fn run<Q: InboxQueue + 'static>(
        self,
        shared: Arc<Shared<Q>>,
        mut stopping: watch::Receiver<Option<Duration>>,
        deadline_passed: watch::Sender<bool>,
    ) {
        let waiter = Waiter::new(&shared.namespace);
        // Since when every take found events.
        let mut busy_since: Option<Instant> = None;
        let room = Arc::new(Semaphore::new(self.concurrency));
        let mut holds = JoinSet::new();
        let mut idle_wait = self.first_idle_wait;
        let mut taken: u64 = 0;
        // After a take that came back short, when the next may start.
        let mut next_take_at: Option<Instant> = None;
        loop {
            while holds.try_join_next().is_some() {}
            if let Some(at) = next_take_at.take().filter(|at| *at > Instant::now()) {
                tokio::select! {
                    biased;
                    () = stop_asked(&mut stopping) => break,
                    () = tokio::time::sleep_until(at) => {}
                }
            }
            let first = tokio::select! {
                biased;
                () = stop_asked(&mut stopping) => break,
                permit = Arc::clone(&room).acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => break,
                },
            };
            let mut permits = vec![first];
            while permits.len() < self.concurrency {
                match Arc::clone(&room).try_acquire_owned() {
                    Ok(permit) => permits.push(permit),
                    Err(_) => break,
                }
            }
            // Enabled before the take, so an accept during it still wakes.
            let accepted = waiter.notify().notified();
            tokio::pin!(accepted);
            accepted.as_mut().enable();
            let take_started = Instant::now();
            let asked = permits.len();
            let batch = shared
                .store
                .take(&shared.namespace, &self.consumer, permits.len())
                .await;
            let wait = match batch {
                Ok(batch) if !batch.is_empty() => {
                    idle_wait = self.first_idle_wait;
                    let since = *busy_since.get_or_insert(take_started);
                    waiter.set_busy(take_started.duration_since(since) >= BUSY_AFTER);
                    if batch.len() < asked {
                        next_take_at =
                            Some(take_started + self.take_interval * stretch(batch.len()));
                    }
                    let mut together = Vec::with_capacity(HOLDS_PER_TASK);
                    for (entry, permit) in batch.into_iter().zip(permits.drain(..)) {
                        taken += 1;
                        let turn = self.turn_of(&shared, &entry, taken);
                        together.push(Box::pin(hold(Arc::clone(&shared), entry, turn, permit)));
                        if together.len() == HOLDS_PER_TASK {
                            holds.spawn(hold_together(std::mem::take(&mut together)));
                        }
                    }
                    if !together.is_empty() {
                        holds.spawn(hold_together(together));
                    }
                    continue;
                }
                Ok(_) => {
                    busy_since = None;
                    waiter.set_busy(false);
                    let wait = idle_wait;
                    idle_wait = (idle_wait * 2).min(self.idle_poll);
                    wait
                }
                Err(error) => {
                    busy_since = None;
                    waiter.set_busy(false);
                    shared.counters.store_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(namespace = %shared.namespace, %error, "worker: take failed");
                    self.idle_poll
                }
            };
            drop(permits);
            tokio::select! {
                biased;
                () = stop_asked(&mut stopping) => break,
                () = &mut accepted => idle_wait = self.first_idle_wait,
                () = tokio::time::sleep(wait) => {}
            }
        }
        let grace = stopping.borrow().unwrap_or_default();
        let end = Instant::now() + grace;
        loop {
            match tokio::time::timeout_at(end, holds.join_next()).await {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => {
                    // Past the grace period: what still runs is given back.
                    let _ = deadline_passed.send(true);
                    while holds.join_next().await.is_some() {}
                    break;
                }
            }
        }
    }

    /// The event's place in its key's line, if the worker orders events.
    fn turn_of<Q>(&self, shared: &Shared<Q>, entry: &InboxEntry, number: u64) -> Turn {
        let Some(key) = self.order.as_ref().and_then(|key_of| key_of(entry)) else {
            return Turn {
                wait: None,
                done: None,
            };
        };
        let (done, after_me) = oneshot::channel();
        let mut turns = shared
            .turns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let wait = turns
            .insert(key.clone(), (number, after_me))
            .map(|(_, previous)| previous);
        Turn {
            wait,
            done: Some((key, number, done)),
        }
    }
}

/// Events held by one task: a task (a spawn and a wake-up) per event held
/// the worker bench to 0.68x a bare take-and-ack loop on SQLite, 16 a task
/// to 1.04x. The events get tasks of their own, never the taking loop's:
/// a handler that blocks its thread holds up its task's other events,
/// never the taking or the stop.
const HOLDS_PER_TASK: usize = 16;

/// Drives a few holds in one task, polling each whenever one is woken
/// (a few more polls, against a spawn each).
async fn hold_together<F: Future<Output = ()>>(mut holds: Vec<Pin<Box<F>>>) {
    std::future::poll_fn(|context| {
        holds.retain_mut(|held| held.as_mut().poll(context).is_pending());
        if holds.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

/// Completes once a stop is asked for; never if the handle was dropped.
async fn stop_asked(stopping: &mut watch::Receiver<Option<Duration>>) {
    if stopping.wait_for(Option::is_some).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Completes once the grace period of a stop ended.
async fn deadline_passed(deadline: &mut watch::Receiver<bool>) {
    if deadline.wait_for(|passed| *passed).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// How an event's hold ended.
enum Ending {
    /// The handler's result, or what it panicked with.
    Finished(Result<Result<(), Failure>, Box<dyn Any + Send>>),
    Unfinished,
}

/// Polls a handler, catching a panic in any of its polls; after one it is
/// not polled again.
fn run_caught(
    handler: &mut Instrumented<HandlerFuture>,
) -> impl Future<Output = Result<Result<(), Failure>, Box<dyn Any + Send>>> + '_ {
    std::future::poll_fn(move |context| {
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(&mut *handler).poll(context))) {
            Ok(Poll::Ready(result)) => Poll::Ready(Ok(result)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(panic) => Poll::Ready(Err(panic)),
        }
    })
}

/// Holds one taken event: waits for its turn, runs its handler (a panic
/// is caught and counts as a failure), extends its visibility every half
/// timeout, and settles it. The handler runs in this future, not a task
/// of its own; up to [`HOLDS_PER_TASK`] such futures share a task (a
/// handler must not block its thread, which would hold up its heartbeats
/// and its task's other events).
async fn hold<Q: InboxQueue + 'static>(
    shared: Arc<Shared<Q>>,
    entry: InboxEntry,
    mut turn: Turn,
    permit: OwnedSemaphorePermit,
) {
    let entry = Arc::new(entry);
    #[cfg(feature = "metrics")]
    let in_flight =
        metrics::gauge!("hooklatch_worker_in_flight", "namespace" => shared.namespace.clone());
    #[cfg(feature = "metrics")]
    in_flight.increment(1.0);
    let (lost_tx, lost_rx) = watch::channel(false);
    let mut deadline = shared.deadline.clone();
    let half = (shared.visibility / 2).max(Duration::from_millis(1));
    // Made when first polled: a handler that finishes in its first poll
    // (most do) never reads the clock for it.
    let mut heartbeat: Option<tokio::time::Interval> = None;
    let mut handler: Option<Instrumented<HandlerFuture>> = None;
    #[cfg(feature = "metrics")]
    let mut started = None;
    let ending = loop {
        if handler.is_none() && turn.wait.is_none() {
            if *deadline.borrow() {
                break Ending::Unfinished;
            }
            #[cfg(feature = "metrics")]
            {
                started = Some(Instant::now());
                record_lag(&shared.namespace, &entry);
            }
            let event = Event::new(Arc::clone(&entry), lost_rx.clone());
            let span = event_span(&entry);
            // In the request's trace, deliveries the handler sends carry
            // it on to their endpoints.
            let trace = kept_header(&entry, "traceparent")
                .filter(|_| shared.request_traces)
                .and_then(|text| crate::trace::TraceParent::parse(text).ok());
            let handle = || match trace {
                Some(trace) => {
                    let future = trace.sync_scope(|| shared.handler.handle(event));
                    Box::pin(trace.scope(future)) as HandlerFuture
                }
                None => shared.handler.handle(event),
            };
            // A closure handler runs up to its first await here: a panic
            // there is caught too.
            match std::panic::catch_unwind(AssertUnwindSafe(handle)) {
                Ok(future) => handler = Some(future.instrument(span)),
                Err(panic) => break Ending::Finished(Err(panic)),
            }
        }
        tokio::select! {
            biased;
            () = deadline_passed(&mut deadline) => break Ending::Unfinished,
            _ = async { turn.wait.as_mut().expect("checked by the branch's condition").await },
                if turn.wait.is_some() => turn.wait = None,
            // In an async block: a disabled branch's expression is still
            // evaluated.
            result = async { run_caught(handler.as_mut().expect("checked by the branch's condition")).await },
                if handler.is_some() => break Ending::Finished(result),
            _ = async {
                heartbeat
                    .get_or_insert_with(|| {
                        let mut beats = tokio::time::interval_at(Instant::now() + half, half);
                        beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                        beats
                    })
                    .tick()
                    .await
            } => {
                if !*lost_tx.borrow() {
                    extend(&shared, &entry, &lost_tx).await;
                }
            }
        }
    };
    // An unfinished handler is dropped here: it stops at its next await.
    drop(handler);
    let lost = *lost_tx.borrow();
    #[cfg(feature = "metrics")]
    if let Some(started) = started {
        metrics::histogram!(
            "hooklatch_worker_handler_seconds",
            "namespace" => shared.namespace.clone(),
            "type" => type_label(&entry),
        )
        .record(started.elapsed().as_secs_f64());
    }
    match ending {
        _ if lost => count(&shared, &entry, &shared.counters.lost, "lost"),
        Ending::Unfinished => {
            give_back(
                &shared,
                &entry,
                GiveBack::Retry(Duration::ZERO),
                STOPPED,
                true,
            )
            .await;
        }
        Ending::Finished(Ok(Ok(()))) => {
            // Counted as handled once the store took the ack. The handler
            // and its event are gone, so the entry is this hold's alone
            // (unless the handler kept its event): sent without a copy.
            let _ = shared.acks.send(Arc::unwrap_or_clone(entry));
        }
        Ending::Finished(Ok(Err(failure))) => settle_failure(&shared, &entry, &failure).await,
        Ending::Finished(Err(panic)) => {
            let failure = Failure::retry(panic_reason(panic.as_ref()));
            settle_failure(&shared, &entry, &failure).await;
        }
    }
    drop(permit);
    #[cfg(feature = "metrics")]
    in_flight.decrement(1.0);
    if let Some((key, number, done)) = turn.done.take() {
        let _ = done.send(());
        let mut turns = shared
            .turns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if turns.get(&key).is_some_and(|(last, _)| *last == number) {
            turns.remove(&key);
        }
    }
}

/// A heartbeat: the event hidden for another visibility timeout, or the
/// handler told it was lost.
async fn extend<Q: InboxQueue>(shared: &Shared<Q>, entry: &InboxEntry, lost: &watch::Sender<bool>) {
    match shared.store.extend_visibility(entry).await {
        Ok(()) => {}
        Err(DedupError::DeliveryLost) => {
            tracing::warn!(
                namespace = %shared.namespace,
                id = %entry.id,
                "worker: the event went to another worker while its handler ran"
            );
            let _ = lost.send(true);
        }
        Err(error) => {
            // The next heartbeat tries again; if the visibility lapses
            // meanwhile, that one finds the event lost.
            shared.counters.store_errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(namespace = %shared.namespace, id = %entry.id, %error, "worker: heartbeat failed");
        }
    }
}

/// Gives a failed event back: after its backoff or the delay it asked
/// for, or to the dead letters with its reason.
async fn settle_failure<Q: InboxQueue>(shared: &Shared<Q>, entry: &InboxEntry, failure: &Failure) {
    let last = shared.max_attempts.is_some_and(|max| entry.attempt >= max);
    let how = match failure.then() {
        Then::DeadLetter => GiveBack::DeadLetter,
        _ if last => GiveBack::DeadLetter,
        Then::After(delay) => GiveBack::Retry(delay),
        Then::Backoff => GiveBack::Retry(shared.backoff.delay(entry.attempt)),
    };
    give_back(shared, entry, how, failure.reason(), false).await;
}

async fn give_back<Q: InboxQueue>(
    shared: &Shared<Q>,
    entry: &InboxEntry,
    how: GiveBack,
    reason: &str,
    unfinished: bool,
) {
    let counters = &shared.counters;
    match shared.store.give_back(entry, how, reason).await {
        Ok(NackOutcome::DeadLettered) => {
            tracing::warn!(
                namespace = %shared.namespace,
                id = %entry.id,
                attempt = entry.attempt,
                reason,
                "worker: event dead-lettered"
            );
            count(shared, entry, &counters.dead_lettered, "dead_lettered");
        }
        Ok(_) if unfinished => count(shared, entry, &counters.given_back, "given_back"),
        Ok(_) => {
            tracing::info!(
                namespace = %shared.namespace,
                id = %entry.id,
                attempt = entry.attempt,
                reason,
                "worker: handler failed; the event will be retried"
            );
            count(shared, entry, &counters.retried, "retried");
        }
        Err(DedupError::DeliveryLost) => count(shared, entry, &counters.lost, "lost"),
        Err(error) => {
            counters.store_errors.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                namespace = %shared.namespace,
                id = %entry.id,
                %error,
                "worker: could not give the event back; it returns after the visibility timeout"
            );
        }
    }
}

/// Acks what the handlers finished, as many at once as are waiting, in
/// one buffer kept from batch to batch (a batch of a few hundred entries
/// is tens of KB, whose allocation and release each time cost more than
/// the batch's own bookkeeping).
async fn ack_in_batches<Q: InboxQueue>(
    store: Arc<Q>,
    counters: Arc<Counters>,
    mut finished: mpsc::UnboundedReceiver<InboxEntry>,
) {
    let mut waiting = Vec::with_capacity(ACKS_AT_ONCE);
    while finished.recv_many(&mut waiting, ACKS_AT_ONCE).await > 0 {
        if waiting.len() < ACKS_AT_ONCE {
            tokio::time::sleep(ACK_GATHER).await;
            while waiting.len() < ACKS_AT_ONCE {
                match finished.try_recv() {
                    Ok(entry) => waiting.push(entry),
                    Err(_) => break,
                }
            }
        }
        ack(&*store, &counters, &mut waiting).await;
    }
}

/// Acks `batch`, trying what the store did not answer again; leaves it
/// empty.
async fn ack<Q: InboxQueue>(store: &Q, counters: &Counters, batch: &mut Vec<InboxEntry>) {
    let mut tries = 0;
    loop {
        match store.ack_many(batch).await {
            Ok(acked) => {
                for (entry, acked) in batch.iter().zip(acked) {
                    count_ack(counters, entry, acked);
                }
                break;
            }
            // Some shards answered: count those, and try the rest again.
            Err(DedupError::AckedInPart { acked, source }) if tries < ACK_RETRIES => {
                tries += 1;
                let mut answers = acked.into_iter();
                batch.retain(|entry| match answers.next().flatten() {
                    Some(acked) => {
                        count_ack(counters, entry, acked);
                        false
                    }
                    None => true,
                });
                tracing::warn!(error = %source, events = batch.len(), "worker: ack failed in part; trying the rest again");
                tokio::time::sleep(Duration::from_millis(50 << tries)).await;
            }
            Err(error) if tries < ACK_RETRIES => {
                tries += 1;
                tracing::warn!(%error, events = batch.len(), "worker: ack failed; trying again");
                tokio::time::sleep(Duration::from_millis(50 << tries)).await;
            }
            Err(error) => {
                counters.store_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    %error,
                    events = batch.len(),
                    "worker: ack failed; these events run again after the visibility timeout"
                );
                break;
            }
        }
    }
    batch.clear();
}

fn count<Q>(shared: &Shared<Q>, entry: &InboxEntry, counter: &AtomicU64, outcome: &'static str) {
    let _ = shared;
    counter.fetch_add(1, Ordering::Relaxed);
    outcome_metric(entry, outcome);
}

#[cfg(feature = "metrics")]
fn outcome_metric(entry: &InboxEntry, outcome: &'static str) {
    metrics::counter!(
        "hooklatch_worker_events_total",
        "namespace" => entry.namespace.clone(),
        "type" => type_label(entry),
        "outcome" => outcome,
    )
    .increment(1);
}

#[cfg(not(feature = "metrics"))]
fn outcome_metric(_: &InboxEntry, _: &'static str) {}

#[cfg(feature = "metrics")]
fn type_label(entry: &InboxEntry) -> String {
    entry.meta.event_type.clone().unwrap_or_default()
}

/// The span an event's handler runs in; it names the trace the request
/// came with, where the receiver kept its `traceparent`.
fn event_span(entry: &InboxEntry) -> tracing::Span {
    let header = |name| kept_header(entry, name);
    tracing::info_span!(
        "webhook.handle",
        namespace = %entry.namespace,
        id = %entry.id,
        r#type = entry.meta.event_type.as_deref().unwrap_or(""),
        attempt = entry.attempt,
        traceparent = header("traceparent").unwrap_or(""),
        tracestate = header("tracestate").unwrap_or(""),
    )
}

/// A header the receiver kept with the event.
fn kept_header<'e>(entry: &'e InboxEntry, name: &str) -> Option<&'e str> {
    entry
        .meta
        .headers
        .iter()
        .find(|(kept, _)| kept == name)
        .map(|(_, value)| value.as_str())
}

/// A panicked handler's failure reason: its message, where it had one.
fn panic_reason(payload: &(dyn Any + Send)) -> String {
    let message = payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".to_owned());
    format!("the handler panicked: {message}")
}
