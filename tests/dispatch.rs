//! The background [`Dispatcher`]: concurrency limit, auto-disable, 410,
//! replay, the breaker, and restarts (graceful and a crash) on every
//! delivery store, against real SQLite, Postgres and Redis (see
//! tests/support).

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use hooklatch::sender::{
    Breaker, DeliveryState, DeliveryStore, DisableReason, Disabled, DispatchError, Dispatcher,
    EndpointHealth, HealthChange, Jitter, MemoryDeliveries, Policy, PostgresDeliveries,
    RedisDeliveries, Response, Schedule, SqliteDeliveries, Transport, TransportError,
};
use hooklatch::verify::{Scheme, Signer, Verifier};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ENDPOINT: &str = "orders";

/// A receiver in the same process: it checks every signature, answers
/// what the test sets, and counts what it saw.
#[derive(Clone)]
struct Receiver {
    state: Arc<ReceiverState>,
}

struct ReceiverState {
    verifier: Verifier,
    status: Mutex<u16>,
    delay: Mutex<Duration>,
    /// Status and delay for particular ids, over the two above.
    per_id: Mutex<HashMap<String, (u16, Duration)>>,
    /// (id, status answered) for every answered attempt.
    answered: Mutex<Vec<(String, u16)>>,
    started: AtomicUsize,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
}

impl Receiver {
    fn answering(status: u16) -> Self {
        Self {
            state: Arc::new(ReceiverState {
                verifier: Verifier::builder(Scheme::standard_webhooks())
                    .with_secret(SECRET)
                    .expect("secret")
                    .build()
                    .expect("verifier"),
                status: Mutex::new(status),
                delay: Mutex::new(Duration::ZERO),
                per_id: Mutex::new(HashMap::new()),
                answered: Mutex::new(Vec::new()),
                started: AtomicUsize::new(0),
                in_flight: AtomicUsize::new(0),
                peak: AtomicUsize::new(0),
            }),
        }
    }

    fn set_status(&self, status: u16) {
        *self.state.status.lock().unwrap() = status;
    }

    fn set_delay(&self, delay: Duration) {
        *self.state.delay.lock().unwrap() = delay;
    }

    /// Answers `status` after `delay` to event `id`.
    fn answer_id(&self, id: &str, status: u16, delay: Duration) {
        self.state
            .per_id
            .lock()
            .unwrap()
            .insert(id.to_owned(), (status, delay));
    }

    fn answered(&self) -> Vec<(String, u16)> {
        self.state.answered.lock().unwrap().clone()
    }

    /// How many 2xx answers each id got.
    fn successes(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for (id, status) in self.answered() {
            if (200..300).contains(&status) {
                *counts.entry(id).or_default() += 1;
            }
        }
        counts
    }

    fn started(&self) -> usize {
        self.state.started.load(Ordering::SeqCst)
    }

    fn in_flight(&self) -> usize {
        self.state.in_flight.load(Ordering::SeqCst)
    }

    fn peak(&self) -> usize {
        self.state.peak.load(Ordering::SeqCst)
    }
}

/// Counts an attempt in flight until dropped, even when a crash drops it.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Transport for Receiver {
    async fn post(
        &self,
        _url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Response, TransportError> {
        let state = &self.state;
        let verified = state
            .verifier
            .verify(headers, body)
            .expect("every attempt is signed anew and verifies");
        let id = verified.id().expect("a webhook-id").to_owned();
        state.started.fetch_add(1, Ordering::SeqCst);
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let _in_flight = InFlight(&state.in_flight);
        state.peak.fetch_max(now, Ordering::SeqCst);
        let special = state.per_id.lock().unwrap().get(&id).copied();
        let delay = special.map_or_else(|| *state.delay.lock().unwrap(), |(_, delay)| delay);
        tokio::time::sleep(delay).await;
        let status = special.map_or_else(|| *state.status.lock().unwrap(), |(status, _)| status);
        state.answered.lock().unwrap().push((id, status));
        Ok(Response {
            status,
            retry_after: None,
            body: b"ok".to_vec(),
        })
    }
}

/// Attempts `every` apart, `attempts` in all, no jitter, and a breaker
/// that never opens (one test sets its own).
fn every(every: Duration, attempts: usize) -> Policy {
    let mut delays = vec![Duration::ZERO];
    delays.resize(attempts, every);
    Policy::new(Schedule::Table {
        delays,
        jitter: Jitter::None,
    })
    .with_breaker(Breaker::new().with_failure_threshold(u32::MAX))
    .with_attempt_timeout(Duration::from_millis(400))
}

fn dispatcher<S: DeliveryStore>(store: S, receiver: &Receiver) -> Dispatcher<S, Receiver> {
    Dispatcher::new(store, receiver.clone())
        .with_poll_interval(Duration::from_millis(20))
        .with_lease(Duration::from_secs(5))
        .expect("lease")
}

async fn add(dispatcher: &Dispatcher<impl DeliveryStore, Receiver>, policy: Policy) {
    dispatcher
        .add_endpoint(
            ENDPOINT,
            "https://receiver.example/hooks",
            Signer::new(Scheme::standard_webhooks(), [SECRET]).expect("secret"),
            policy,
        )
        .await
        .expect("endpoint");
}

/// Polls `done` until it holds, failing after 20 seconds.
async fn wait_until<F: Future<Output = bool>>(what: &str, mut done: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn state_of(store: &impl DeliveryStore, id: &str) -> DeliveryState {
    store
        .delivery(ENDPOINT, id)
        .await
        .expect("read")
        .expect("stored")
        .state
}

async fn all_in(store: &impl DeliveryStore, ids: &[String], state: DeliveryState) -> bool {
    for id in ids {
        if state_of(store, id).await != state {
            return false;
        }
    }
    true
}

fn ids(count: usize) -> Vec<String> {
    (0..count).map(|n| format!("msg_{n}")).collect()
}

/// Opens the same store again, as a restarted process would.
trait Backend: Send + Sync + 'static {
    type Store: DeliveryStore + Clone;
    async fn open(&self) -> Self::Store;
}

struct Memory(MemoryDeliveries);
impl Backend for Memory {
    type Store = MemoryDeliveries;
    async fn open(&self) -> MemoryDeliveries {
        self.0.clone()
    }
}

struct Sqlite(support::TempDir);
impl Backend for Sqlite {
    type Store = SqliteDeliveries;
    async fn open(&self) -> SqliteDeliveries {
        SqliteDeliveries::open(self.0.path().join("outbox.db"))
            .await
            .expect("open sqlite")
    }
}

struct Postgres {
    server: support::Server,
    prefix: String,
}
impl Backend for Postgres {
    type Store = PostgresDeliveries;
    async fn open(&self) -> PostgresDeliveries {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(8)
            .connect(&self.server.url())
            .await
            .expect("connect to postgres");
        let store = PostgresDeliveries::new(pool, &self.prefix).expect("prefix");
        store.migrate().await.expect("migrate");
        store
    }
}

struct Redis {
    server: support::Server,
    prefix: String,
}
impl Backend for Redis {
    type Store = RedisDeliveries;
    async fn open(&self) -> RedisDeliveries {
        RedisDeliveries::connect(&self.server.url())
            .await
            .expect("connect to redis")
            .with_prefix(&self.prefix)
            .expect("prefix")
    }
}

fn memory() -> Memory {
    Memory(MemoryDeliveries::new())
}

fn sqlite() -> Sqlite {
    Sqlite(support::TempDir::new("deliveries"))
}

fn redis() -> Redis {
    Redis {
        server: support::redis(),
        prefix: support::unique("d"),
    }
}

fn postgres() -> Postgres {
    Postgres {
        server: support::postgres(),
        prefix: support::unique("d"),
    }
}

/// A dispatcher stopped while every delivery is failing; a new one on the
/// same store, once the receiver recovers, delivers each exactly once.
async fn graceful_restart(backend: impl Backend) {
    let receiver = Receiver::answering(500);
    let first = dispatcher(backend.open().await, &receiver);
    add(&first, every(Duration::from_millis(50), 1000)).await;
    let ids = ids(30);
    for id in &ids {
        assert!(first.send(ENDPOINT, id, id.as_bytes()).await.expect("send"));
    }
    let running = first.start();
    wait_until("every delivery has failed twice", || {
        let answered = receiver.answered();
        let ids = &ids;
        async move {
            ids.iter()
                .all(|id| answered.iter().filter(|(seen, _)| seen == id).count() >= 2)
        }
    })
    .await;
    running.stop().await;
    let after_stop = receiver.answered().len();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        receiver.answered().len(),
        after_stop,
        "a stopped dispatcher sends nothing"
    );
    drop(first);

    receiver.set_status(200);
    let store = backend.open().await;
    let second = dispatcher(store.clone(), &receiver);
    add(&second, every(Duration::from_millis(50), 1000)).await;
    let running = second.start();
    wait_until("every delivery is delivered", || {
        all_in(&store, &ids, DeliveryState::Delivered)
    })
    .await;
    running.stop().await;

    let successes = receiver.successes();
    for id in &ids {
        assert_eq!(successes.get(id), Some(&1), "{id} delivered once");
        let stored = store.delivery(ENDPOINT, id).await.unwrap().unwrap();
        let numbers: Vec<u32> = stored.attempts.iter().map(|a| a.number).collect();
        assert_eq!(
            numbers,
            (1..=numbers.len() as u32).collect::<Vec<_>>(),
            "{id}"
        );
        let (last, failures) = stored.attempts.split_last().unwrap();
        assert_eq!(last.result, Ok(200));
        assert!(failures.len() >= 2 && failures.iter().all(|a| a.result == Ok(500)));
        assert_eq!(last.excerpt, b"ok");
    }
}

const CRASH_LEASE: Duration = Duration::from_secs(2);

fn crash_policy() -> Policy {
    every(Duration::from_millis(50), 10)
        .with_concurrency(4)
        .with_attempt_timeout(Duration::from_millis(1500))
}

/// The process running a dispatcher dies with attempts in flight: a new
/// dispatcher takes those deliveries again once their leases end, and
/// every delivery ends delivered exactly once in the store.
fn crash_mid_attempt<B: Backend>(backend: B) {
    let backend = Arc::new(backend);
    let receiver = Receiver::answering(200);
    receiver.set_delay(Duration::from_secs(30));
    let ids = ids(12);

    let crashed = {
        let (backend, receiver, ids) = (backend.clone(), receiver.clone(), ids.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                // Attempts may run 1.5 s, so the crash surely cuts them off.
                let first = dispatcher(backend.open().await, &receiver)
                    .with_lease(CRASH_LEASE)
                    .expect("lease");
                add(&first, crash_policy()).await;
                for id in &ids {
                    first.send(ENDPOINT, id, id.as_bytes()).await.expect("send");
                }
                // Dropping the handle leaves the loop running on this runtime.
                drop(first.start());
                wait_until("four attempts hang", || {
                    let in_flight = receiver.in_flight();
                    async move { in_flight == 4 }
                })
                .await;
            });
            // The crash: every task on the runtime is dropped mid-attempt.
            runtime.shutdown_timeout(Duration::from_secs(5));
        })
    };
    crashed.join().expect("first dispatcher");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        assert_eq!(receiver.in_flight(), 0, "the crash ended the attempts");
        assert!(
            receiver.answered().is_empty(),
            "nothing was answered before the crash"
        );
        receiver.set_delay(Duration::ZERO);
        let store = backend.open().await;
        let second = dispatcher(store.clone(), &receiver)
            .with_lease(CRASH_LEASE)
            .expect("lease");
        add(&second, crash_policy()).await;
        let running = second.start();
        wait_until("every delivery is delivered", || {
            all_in(&store, &ids, DeliveryState::Delivered)
        })
        .await;
        running.stop().await;
        for id in &ids {
            let stored = store.delivery(ENDPOINT, id).await.unwrap().unwrap();
            assert_eq!(
                stored.attempts.len(),
                1,
                "{id}: the lost attempt is not recorded"
            );
            assert_eq!(stored.attempts[0].result, Ok(200));
        }
        assert_eq!(receiver.successes().len(), ids.len());
        assert!(receiver.successes().values().all(|&n| n == 1));
        // The four cut-off attempts reached the receiver and were sent again.
        assert_eq!(receiver.started(), ids.len() + 4);
    });
}

/// Two dispatchers on one store at once: each delivery is attempted once.
async fn two_dispatchers_share_a_store(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    receiver.set_delay(Duration::from_millis(2));
    let ids = ids(300);
    // A lease far longer than any attempt: a second attempt would then
    // mean two dispatchers took the same row, not that a lease ran out on
    // a busy machine.
    let lease = Duration::from_secs(10);
    let (a, b) = (
        dispatcher(backend.open().await, &receiver)
            .with_lease(lease)
            .expect("lease"),
        dispatcher(backend.open().await, &receiver)
            .with_lease(lease)
            .expect("lease"),
    );
    for dispatcher in [&a, &b] {
        add(dispatcher, every(Duration::from_millis(50), 3)).await;
    }
    let (running_a, running_b) = (a.start(), b.start());
    let (first_half, second_half) = ids.split_at(150);
    let send_a = async {
        for id in first_half {
            a.send(ENDPOINT, id, id.as_bytes()).await.expect("send");
        }
    };
    let send_b = async {
        for id in second_half {
            b.send(ENDPOINT, id, id.as_bytes()).await.expect("send");
        }
    };
    tokio::join!(send_a, send_b);
    let store = backend.open().await;
    wait_until("every delivery is delivered", || {
        all_in(&store, &ids, DeliveryState::Delivered)
    })
    .await;
    running_a.stop().await;
    running_b.stop().await;
    assert_eq!(receiver.started(), ids.len(), "no delivery attempted twice");
    assert_eq!(receiver.successes().len(), ids.len());
}

/// A delivery out of attempts is dead, listed, and a replay sends it again
/// from the start of its schedule; the attempts before it are kept.
async fn dead_deliveries_replay(backend: impl Backend) {
    let receiver = Receiver::answering(503);
    let store = backend.open().await;
    let dispatcher = dispatcher(store.clone(), &receiver);
    add(&dispatcher, every(Duration::from_millis(20), 2)).await;
    dispatcher.send(ENDPOINT, "msg_dead", b"{}").await.unwrap();
    dispatcher.send(ENDPOINT, "msg_fine", b"{}").await.unwrap();
    let running = dispatcher.start();
    wait_until("both are dead", || async {
        dispatcher.dead(ENDPOINT, 10).await.unwrap().len() == 2
    })
    .await;
    assert_eq!(
        dispatcher.dead(ENDPOINT, 1).await.unwrap().len(),
        1,
        "limit"
    );
    assert!(
        !dispatcher.replay(ENDPOINT, "msg_unknown").await.unwrap(),
        "nothing to replay"
    );
    receiver.set_status(204);
    assert!(dispatcher.replay(ENDPOINT, "msg_dead").await.unwrap());
    wait_until("the replay is delivered", || async {
        state_of(&store, "msg_dead").await == DeliveryState::Delivered
    })
    .await;
    assert!(
        !dispatcher.replay(ENDPOINT, "msg_dead").await.unwrap(),
        "a delivered event is not replayed"
    );
    running.stop().await;
    let stored = store.delivery(ENDPOINT, "msg_dead").await.unwrap().unwrap();
    let results: Vec<_> = stored
        .attempts
        .iter()
        .map(|a| (a.number, a.result.clone()))
        .collect();
    assert_eq!(results, [(1, Ok(503)), (2, Ok(503)), (3, Ok(204))]);
    assert_eq!(stored.attempts[1].waited, Duration::from_millis(20));
    assert_eq!(
        stored.attempts[2].waited,
        Duration::ZERO,
        "the schedule starts over"
    );
    assert_eq!(dispatcher.dead(ENDPOINT, 10).await.unwrap(), ["msg_fine"]);
    assert_eq!(stored.due_at, None);
    assert_eq!(stored.body, b"{}");
}

/// An endpoint disabled by 410 stays disabled for a new dispatcher on the
/// same store, until it is enabled, which is saved too.
async fn disabled_stays_disabled_across_a_restart(backend: impl Backend) {
    let receiver = Receiver::answering(410);
    let first = dispatcher(backend.open().await, &receiver);
    add(&first, every(Duration::from_millis(20), 5)).await;
    first.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    let running = first.start();
    wait_until("disabled", || async {
        first.disabled(ENDPOINT).unwrap() == Some(DisableReason::Gone)
    })
    .await;
    running.stop().await;
    first.send(ENDPOINT, "msg_2", b"{}").await.unwrap();

    let second = dispatcher(backend.open().await, &receiver);
    add(&second, every(Duration::from_millis(20), 5)).await;
    assert_eq!(
        second.disabled(ENDPOINT).unwrap(),
        Some(DisableReason::Gone)
    );
    let running = second.start();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        receiver.answered().len(),
        1,
        "nothing sent to a disabled endpoint"
    );
    receiver.set_status(200);
    second.enable(ENDPOINT).await.unwrap();
    wait_until("msg_2 delivered", || async {
        receiver.successes().contains_key("msg_2")
    })
    .await;
    running.stop().await;

    let third = dispatcher(backend.open().await, &receiver);
    add(&third, every(Duration::from_millis(20), 5)).await;
    assert_eq!(
        third.disabled(ENDPOINT).unwrap(),
        None,
        "enabling was saved"
    );
}

/// How long an endpoint has failed carries over a restart: the new
/// dispatcher disables it counting from the first failure before it.
async fn failing_time_carries_over_a_restart(backend: impl Backend) {
    let receiver = Receiver::answering(500);
    let policy = || {
        every(Duration::from_millis(30), 1000).with_disable_after(Some(Duration::from_millis(600)))
    };
    let store = backend.open().await;
    let first = dispatcher(store.clone(), &receiver);
    add(&first, policy()).await;
    first.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    let running = first.start();
    wait_until("three failures", || {
        let failures = receiver.answered().len();
        async move { failures >= 3 }
    })
    .await;
    running.stop().await;
    let since = store.health(ENDPOINT).await.unwrap().failing_since;
    assert!(since.is_some(), "the failing time was saved");

    let told: Arc<Mutex<Vec<Disabled>>> = Arc::default();
    let second = {
        let told = told.clone();
        dispatcher(backend.open().await, &receiver)
            .on_disable(move |disabled| told.lock().unwrap().push(disabled.clone()))
    };
    add(&second, policy()).await;
    let running = second.start();
    wait_until("disabled", || async {
        second.disabled(ENDPOINT).unwrap().is_some()
    })
    .await;
    running.stop().await;
    let told = told.lock().unwrap().clone();
    assert_eq!(told.len(), 1);
    assert_eq!(
        told[0].failing_since, since,
        "counted from before the restart"
    );
    let saved = store.health(ENDPOINT).await.unwrap();
    assert_eq!(
        saved.disabled,
        Some(DisableReason::NoSuccessFor(Duration::from_millis(600)))
    );
}

/// Purging forgets finished deliveries and their attempts, and keeps the
/// pending and dead ones.
async fn purge_keeps_pending_and_dead(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    let store = backend.open().await;
    let dispatcher = dispatcher(store.clone(), &receiver);
    add(&dispatcher, every(Duration::from_millis(20), 2)).await;
    for id in ["msg_1", "msg_2"] {
        dispatcher.send(ENDPOINT, id, b"{}").await.unwrap();
    }
    let running = dispatcher.start();
    wait_until("both delivered", || async {
        receiver.successes().len() == 2
    })
    .await;
    receiver.set_status(500);
    dispatcher.send(ENDPOINT, "msg_dead", b"{}").await.unwrap();
    wait_until("msg_dead is dead", || async {
        state_of(&store, "msg_dead").await == DeliveryState::Dead
    })
    .await;
    running.stop().await;
    dispatcher
        .send(ENDPOINT, "msg_pending", b"{}")
        .await
        .unwrap();

    assert_eq!(
        dispatcher.purge(Duration::from_secs(3600)).await.unwrap(),
        0,
        "nothing ended an hour ago"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(dispatcher.purge(Duration::ZERO).await.unwrap(), 2);
    for id in ["msg_1", "msg_2"] {
        assert_eq!(store.delivery(ENDPOINT, id).await.unwrap(), None, "{id}");
    }
    assert_eq!(state_of(&store, "msg_dead").await, DeliveryState::Dead);
    assert_eq!(
        state_of(&store, "msg_pending").await,
        DeliveryState::Pending
    );
    // A purged id is forgotten, attempts and all: it can be sent again.
    assert!(dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap());
    let again = store.delivery(ENDPOINT, "msg_1").await.unwrap().unwrap();
    assert!(again.attempts.is_empty());
}

/// The store merges health changes: a failure keeps the earliest
/// failing time, a disable sticks through failures and successes until
/// enabled, the first reason stays, and a no-success disable needs a
/// failing time old enough.
async fn health_merges_in_the_store(backend: impl Backend) {
    let store = backend.open().await;
    let at = |secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs);
    let failed = |secs| HealthChange::Failed { at: at(secs) };
    let day = Duration::from_secs(24 * 3600);
    assert_eq!(
        store.health(ENDPOINT).await.unwrap(),
        EndpointHealth::default()
    );

    let merged = store.merge_health(ENDPOINT, failed(20)).await.unwrap();
    assert_eq!(merged.failing_since, Some(at(20)));
    let merged = store.merge_health(ENDPOINT, failed(10)).await.unwrap();
    assert_eq!(merged.failing_since, Some(at(10)), "the earlier failure");
    let merged = store.merge_health(ENDPOINT, failed(30)).await.unwrap();
    assert_eq!(merged.failing_since, Some(at(10)), "still the earliest");
    assert_eq!(merged.disabled, None);

    let no_success = DisableReason::NoSuccessFor(day);
    assert!(
        !store
            .disable(ENDPOINT, no_success, at(10) + day - Duration::from_secs(1))
            .await
            .unwrap(),
        "not failing for a day yet"
    );
    assert!(
        store
            .disable(ENDPOINT, no_success, at(10) + day)
            .await
            .unwrap()
    );
    assert!(
        !store
            .disable(ENDPOINT, DisableReason::Gone, at(40))
            .await
            .unwrap(),
        "already disabled: the first reason stays"
    );

    let merged = store.merge_health(ENDPOINT, failed(5)).await.unwrap();
    assert_eq!(
        merged.disabled,
        Some(no_success),
        "a failure keeps a disable"
    );
    assert_eq!(merged.failing_since, Some(at(5)));
    let merged = store
        .merge_health(ENDPOINT, HealthChange::Succeeded)
        .await
        .unwrap();
    assert_eq!(
        merged,
        EndpointHealth {
            failing_since: None,
            disabled: Some(no_success)
        },
        "a success clears the failing time, not the disable"
    );
    assert_eq!(store.health(ENDPOINT).await.unwrap(), merged);

    store.enable(ENDPOINT).await.unwrap();
    assert_eq!(
        store.health(ENDPOINT).await.unwrap(),
        EndpointHealth::default()
    );
    assert!(
        !store
            .disable(ENDPOINT, no_success, at(100) + day)
            .await
            .unwrap(),
        "never failed since enabled"
    );
    assert!(
        store
            .disable("other", DisableReason::Gone, at(1))
            .await
            .unwrap()
    );
    assert_eq!(
        store.health("other").await.unwrap().disabled,
        Some(DisableReason::Gone)
    );
    assert_eq!(store.health(ENDPOINT).await.unwrap().disabled, None);
}

/// Dispatcher B's attempt fails after dispatcher A disabled the endpoint
/// on a 410: the disable stays, in the store and for a new dispatcher.
async fn a_late_failure_keeps_a_disable(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    receiver.answer_id("msg_slow", 500, Duration::from_millis(600));
    receiver.answer_id("msg_gone", 410, Duration::ZERO);
    let policy = || {
        every(Duration::from_secs(60), 5)
            .with_concurrency(1)
            .with_attempt_timeout(Duration::from_secs(2))
    };
    let (a, b) = (
        dispatcher(backend.open().await, &receiver),
        dispatcher(backend.open().await, &receiver),
    );
    add(&a, policy()).await;
    add(&b, policy()).await;
    b.send(ENDPOINT, "msg_slow", b"{}").await.unwrap();
    let running_b = b.start();
    wait_until("B's attempt is under way", || {
        let in_flight = receiver.in_flight();
        async move { in_flight == 1 }
    })
    .await;
    // B is busy with its one slot: A takes msg_gone.
    a.send(ENDPOINT, "msg_gone", b"{}").await.unwrap();
    let running_a = a.start();
    wait_until("A disabled the endpoint", || async {
        a.disabled(ENDPOINT).unwrap() == Some(DisableReason::Gone)
    })
    .await;
    wait_until("B's attempt failed", || async {
        receiver.answered().iter().any(|(id, _)| id == "msg_slow")
    })
    .await;
    running_a.stop().await;
    running_b.stop().await;

    let store = backend.open().await;
    let saved = store.health(ENDPOINT).await.unwrap();
    assert_eq!(saved.disabled, Some(DisableReason::Gone), "{saved:?}");
    assert!(saved.failing_since.is_some(), "B's failure was merged");
    assert_eq!(b.disabled(ENDPOINT).unwrap(), Some(DisableReason::Gone));
    let c = dispatcher(store, &receiver);
    add(&c, policy()).await;
    assert_eq!(c.disabled(ENDPOINT).unwrap(), Some(DisableReason::Gone));
}

/// One dispatcher disables the endpoint on a 410: the other stops sending
/// to it within a poll, both see it disabled, and the owner is told once.
async fn a_disable_stops_every_dispatcher(backend: impl Backend) {
    let receiver = Receiver::answering(410);
    let told: Arc<Mutex<Vec<Disabled>>> = Arc::default();
    let make = async || {
        let told = told.clone();
        dispatcher(backend.open().await, &receiver)
            .on_disable(move |disabled| told.lock().unwrap().push(disabled.clone()))
    };
    let (a, b) = (make().await, make().await);
    add(&a, every(Duration::from_millis(20), 5)).await;
    add(&b, every(Duration::from_millis(20), 5)).await;
    let (running_a, running_b) = (a.start(), b.start());
    a.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    let store = backend.open().await;
    wait_until("disabled in the store", || async {
        store.health(ENDPOINT).await.unwrap().disabled.is_some()
    })
    .await;
    wait_until("both dispatchers see it", || async {
        a.disabled(ENDPOINT).unwrap().is_some() && b.disabled(ENDPOINT).unwrap().is_some()
    })
    .await;
    for id in ["msg_2", "msg_3", "msg_4"] {
        a.send(ENDPOINT, id, b"{}").await.unwrap();
        b.send(ENDPOINT, id, b"{}").await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    running_a.stop().await;
    running_b.stop().await;
    assert_eq!(receiver.answered(), [("msg_1".to_owned(), 410)]);
    let told = told.lock().unwrap();
    assert_eq!(told.len(), 1, "told once: {told:?}");
    assert_eq!(told[0].reason, DisableReason::Gone);
}

/// An enable through one dispatcher reaches another on the same store
/// within a poll: it sends the deliveries it held back.
async fn an_enable_reaches_every_dispatcher(backend: impl Backend) {
    let receiver = Receiver::answering(200);
    let store = backend.open().await;
    assert!(
        store
            .disable(ENDPOINT, DisableReason::Gone, SystemTime::now())
            .await
            .unwrap()
    );
    let (admin, worker) = (
        dispatcher(backend.open().await, &receiver),
        dispatcher(backend.open().await, &receiver),
    );
    add(&admin, every(Duration::from_millis(20), 5)).await;
    add(&worker, every(Duration::from_millis(20), 5)).await;
    worker.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    let running = worker.start();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(receiver.answered().is_empty(), "disabled: nothing sent");
    admin.enable(ENDPOINT).await.unwrap();
    wait_until("the worker delivers", || async {
        receiver.successes().len() == 1
    })
    .await;
    running.stop().await;
    assert_eq!(worker.disabled(ENDPOINT).unwrap(), None);
    assert_eq!(
        store.health(ENDPOINT).await.unwrap(),
        EndpointHealth::default()
    );
}

/// A transport that counts one dispatcher's requests in flight and passes
/// them on to the shared receiver.
#[derive(Clone)]
struct Counted {
    receiver: Receiver,
    in_flight: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
}

impl Counted {
    fn new(receiver: &Receiver) -> Self {
        Self {
            receiver: receiver.clone(),
            in_flight: Arc::default(),
            peak: Arc::default(),
        }
    }
}

impl Transport for Counted {
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Response, TransportError> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let _in_flight = InFlight(&self.in_flight);
        self.peak.fetch_max(now, Ordering::SeqCst);
        self.receiver.post(url, headers, body).await
    }
}

/// The concurrency limit is per dispatcher: two on one store with a limit
/// of 3 each have up to 6 requests in flight at the receiver, and never
/// more than 3 each.
async fn the_concurrency_limit_is_per_dispatcher(backend: impl Backend) {
    const LIMIT: usize = 3;
    let receiver = Receiver::answering(200);
    receiver.set_delay(Duration::from_millis(100));
    let (to_a, to_b) = (Counted::new(&receiver), Counted::new(&receiver));
    let make = |store, transport| {
        Dispatcher::new(store, transport).with_poll_interval(Duration::from_millis(20))
    };
    let (a, b) = (
        make(backend.open().await, to_a.clone()),
        make(backend.open().await, to_b.clone()),
    );
    let policy = || every(Duration::from_millis(50), 3).with_concurrency(LIMIT);
    for dispatcher in [&a, &b] {
        dispatcher
            .add_endpoint(
                ENDPOINT,
                "https://receiver.example/hooks",
                Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap(),
                policy(),
            )
            .await
            .unwrap();
    }
    let ids = ids(36);
    for id in &ids {
        a.send(ENDPOINT, id, b"{}").await.unwrap();
    }
    let (running_a, running_b) = (a.start(), b.start());
    let store = backend.open().await;
    wait_until("all delivered", || {
        all_in(&store, &ids, DeliveryState::Delivered)
    })
    .await;
    running_a.stop().await;
    running_b.stop().await;
    let (peak_a, peak_b) = (
        to_a.peak.load(Ordering::SeqCst),
        to_b.peak.load(Ordering::SeqCst),
    );
    assert!(peak_a <= LIMIT && peak_b <= LIMIT, "{peak_a} and {peak_b}");
    assert!(
        receiver.peak() > LIMIT && receiver.peak() <= 2 * LIMIT,
        "both dispatchers at once: {}",
        receiver.peak()
    );
}

macro_rules! suite {
    ($module:ident, $backend:expr) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_graceful_restart_delivers_each_event_once() {
                graceful_restart($backend).await;
            }

            #[test]
            fn a_crash_mid_attempt_loses_nothing_and_delivers_each_event_once() {
                crash_mid_attempt($backend);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn two_dispatchers_on_one_store_attempt_each_delivery_once() {
                two_dispatchers_share_a_store($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn dead_deliveries_are_listed_and_replayed() {
                dead_deliveries_replay($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn purge_forgets_finished_deliveries_only() {
                purge_keeps_pending_and_dead($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_disabled_endpoint_stays_disabled_across_a_restart() {
                disabled_stays_disabled_across_a_restart($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn failing_time_carries_over_a_restart_to_auto_disable() {
                failing_time_carries_over_a_restart($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn health_merges_keep_a_disable_and_the_earliest_failure() {
                health_merges_in_the_store($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn health_a_failure_saved_after_a_disable_keeps_it() {
                a_late_failure_keeps_a_disable($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn health_a_disable_stops_every_dispatcher_and_is_told_once() {
                a_disable_stops_every_dispatcher($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn health_an_enable_reaches_every_dispatcher() {
                an_enable_reaches_every_dispatcher($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_concurrency_limit_is_per_dispatcher_not_per_store() {
                the_concurrency_limit_is_per_dispatcher($backend).await;
            }
        }
    };
}

suite!(memory_store, memory());
suite!(sqlite_store, sqlite());
suite!(postgres_store, postgres());
suite!(redis_store, redis());

#[tokio::test]
async fn the_concurrency_limit_holds_per_endpoint() {
    let receiver = Receiver::answering(200);
    receiver.set_delay(Duration::from_millis(30));
    let dispatcher = dispatcher(MemoryDeliveries::new(), &receiver);
    add(
        &dispatcher,
        every(Duration::from_millis(50), 3).with_concurrency(3),
    )
    .await;
    let ids = ids(30);
    for id in &ids {
        dispatcher.send(ENDPOINT, id, b"{}").await.unwrap();
    }
    let running = dispatcher.start();
    wait_until("all delivered", || async {
        receiver.successes().len() == ids.len()
    })
    .await;
    running.stop().await;
    assert_eq!(receiver.peak(), 3, "three at once, never more");
}

#[tokio::test]
async fn an_endpoint_failing_past_its_limit_is_disabled_and_its_owner_told() {
    let receiver = Receiver::answering(500);
    let told: Arc<Mutex<Vec<Disabled>>> = Arc::default();
    let dispatcher = {
        let told = told.clone();
        dispatcher(MemoryDeliveries::new(), &receiver)
            .on_disable(move |disabled| told.lock().unwrap().push(disabled.clone()))
    };
    let started = SystemTime::now();
    add(
        &dispatcher,
        every(Duration::from_millis(30), 1000).with_disable_after(Some(Duration::from_millis(200))),
    )
    .await;
    dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    let running = dispatcher.start();
    wait_until("the endpoint is disabled", || async {
        dispatcher.disabled(ENDPOINT).unwrap().is_some()
    })
    .await;
    let attempts_when_disabled = receiver.answered().len();
    assert!(
        attempts_when_disabled >= 6,
        "failed for 200 ms at 30 ms apart"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        receiver.answered().len(),
        attempts_when_disabled,
        "nothing sent once disabled"
    );

    let told = told.lock().unwrap().clone();
    assert_eq!(told.len(), 1, "told once");
    assert_eq!(told[0].endpoint, ENDPOINT);
    assert_eq!(
        told[0].reason,
        DisableReason::NoSuccessFor(Duration::from_millis(200))
    );
    assert!(told[0].failing_since.unwrap() >= started);

    // The delivery waited, pending, and goes out once enabled again.
    receiver.set_status(200);
    dispatcher.enable(ENDPOINT).await.unwrap();
    wait_until("delivered after enabling", || async {
        receiver.successes().len() == 1
    })
    .await;
    running.stop().await;
}

#[tokio::test]
async fn gone_disables_the_endpoint_and_holds_its_other_deliveries() {
    let receiver = Receiver::answering(410);
    let told: Arc<Mutex<Vec<Disabled>>> = Arc::default();
    let dispatcher = {
        let told = told.clone();
        dispatcher(MemoryDeliveries::new(), &receiver)
            .on_disable(move |disabled| told.lock().unwrap().push(disabled.clone()))
    };
    add(
        &dispatcher,
        every(Duration::from_millis(20), 5).with_concurrency(1),
    )
    .await;
    let store_view = dispatcher.clone();
    dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    let running = dispatcher.start();
    wait_until("disabled", || async {
        dispatcher.disabled(ENDPOINT).unwrap() == Some(DisableReason::Gone)
    })
    .await;
    dispatcher.send(ENDPOINT, "msg_2", b"{}").await.unwrap();
    tokio::time::sleep(Duration::from_millis(150)).await;
    running.stop().await;
    assert_eq!(receiver.answered(), [("msg_1".to_owned(), 410)]);
    let first = store_view
        .delivery(ENDPOINT, "msg_1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.state, DeliveryState::Gone);
    let second = store_view
        .delivery(ENDPOINT, "msg_2")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        second.state,
        DeliveryState::Pending,
        "kept for when it is enabled"
    );
    assert_eq!(told.lock().unwrap()[0].reason, DisableReason::Gone);
}

#[tokio::test]
async fn an_open_breaker_sends_nothing_until_its_cool_down_ends() {
    let receiver = Receiver::answering(500);
    let dispatcher = dispatcher(MemoryDeliveries::new(), &receiver);
    add(
        &dispatcher,
        every(Duration::from_millis(10), 1000)
            .with_concurrency(1)
            .with_breaker(
                Breaker::new()
                    .with_failure_threshold(3)
                    .with_cool_down(Duration::from_millis(400))
                    .with_probes(1),
            ),
    )
    .await;
    dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    let running = dispatcher.start();
    wait_until("three failures", || async {
        receiver.answered().len() >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(receiver.answered().len(), 3, "open: nothing sent");
    receiver.set_status(200);
    wait_until("a probe after the cool-down succeeds", || async {
        receiver.successes().len() == 1
    })
    .await;
    running.stop().await;
    assert_eq!(receiver.answered().len(), 4);
}

/// A transport whose `panic_on`th request (counting from 1) panics; the
/// others go to the receiver.
struct PanicsOnce {
    receiver: Receiver,
    calls: AtomicUsize,
    panic_on: usize,
}

impl Transport for PanicsOnce {
    async fn post(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Response, TransportError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        assert_ne!(call, self.panic_on, "a transport bug, on purpose");
        self.receiver.post(url, headers, body).await
    }
}

/// The half-open breaker's one probe panics in the transport: the probe
/// counts as failed, and after another cool-down a new probe goes out.
/// (Before, the probe never came back and the breaker stayed half-open,
/// sending nothing, for good.)
#[tokio::test]
async fn a_probe_that_panics_does_not_hold_the_breaker_half_open() {
    let receiver = Receiver::answering(500);
    let transport = PanicsOnce {
        receiver: receiver.clone(),
        calls: AtomicUsize::new(0),
        panic_on: 2,
    };
    let dispatcher = Dispatcher::new(MemoryDeliveries::new(), transport)
        .with_poll_interval(Duration::from_millis(20))
        .with_lease(Duration::from_secs(5))
        .unwrap();
    dispatcher
        .add_endpoint(
            ENDPOINT,
            "https://receiver.example/hooks",
            Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap(),
            every(Duration::from_millis(10), 1000)
                .with_concurrency(1)
                .with_breaker(
                    Breaker::new()
                        .with_failure_threshold(1)
                        .with_cool_down(Duration::from_millis(100))
                        .with_probes(1),
                ),
        )
        .await
        .unwrap();
    for id in ["msg_1", "msg_2"] {
        dispatcher.send(ENDPOINT, id, b"{}").await.unwrap();
    }
    let running = dispatcher.start();
    wait_until("the first failure", || async {
        receiver.answered().len() == 1
    })
    .await;
    receiver.set_status(200);
    // Call 2 is the probe after the cool-down, and panics; msg_2 goes out
    // with the next probe, while msg_1 waits for its lease to end.
    wait_until("a later probe is delivered", || async {
        !receiver.successes().is_empty()
    })
    .await;
    running.stop().await;
}

#[tokio::test]
async fn sending_an_event_twice_stores_one_delivery() {
    let receiver = Receiver::answering(200);
    let dispatcher = dispatcher(MemoryDeliveries::new(), &receiver);
    add(&dispatcher, every(Duration::from_millis(10), 3)).await;
    assert!(dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap());
    assert!(!dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap());
    let running = dispatcher.start();
    wait_until("delivered", || async { receiver.successes().len() == 1 }).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    running.stop().await;
    assert_eq!(receiver.answered().len(), 1);
}

#[tokio::test]
async fn unknown_endpoints_and_bad_ids_are_refused() {
    let receiver = Receiver::answering(200);
    let dispatcher = dispatcher(MemoryDeliveries::new(), &receiver);
    assert!(matches!(
        dispatcher.send("nowhere", "msg_1", b"{}").await,
        Err(DispatchError::UnknownEndpoint(name)) if name == "nowhere"
    ));
    add(&dispatcher, every(Duration::from_millis(10), 3)).await;
    let error = dispatcher
        .send(ENDPOINT, "two words", b"{}")
        .await
        .unwrap_err();
    assert!(error.to_string().contains("event id"), "{error}");
    let error = dispatcher
        .add_endpoint(
            "a b",
            "https://x.example",
            Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap(),
            every(Duration::ZERO, 1),
        )
        .await
        .unwrap_err();
    assert!(error.to_string().contains("namespace"), "{error}");
    // Tests lease for 5 s: a 15 s attempt could outlive its lease.
    let error = dispatcher
        .add_endpoint(
            "slow",
            "https://x.example",
            Signer::new(Scheme::standard_webhooks(), [SECRET]).unwrap(),
            every(Duration::ZERO, 1).with_attempt_timeout(Duration::from_secs(15)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, DispatchError::LeaseTooShort { .. }),
        "{error}"
    );
}

/// `with_lease` after `add_endpoint` checks the endpoints already added.
#[tokio::test]
async fn with_lease_after_add_endpoint_refuses_a_lease_too_short() {
    let receiver = Receiver::answering(200);
    let dispatcher = Dispatcher::new(MemoryDeliveries::new(), receiver.clone());
    // 400 ms attempts, under the default 2 minute lease.
    add(&dispatcher, every(Duration::from_millis(10), 3)).await;
    let error = dispatcher
        .with_lease(Duration::from_millis(400))
        .unwrap_err();
    assert!(
        matches!(
            error,
            DispatchError::LeaseTooShort { lease, attempt_timeout }
                if lease == Duration::from_millis(400)
                    && attempt_timeout == Duration::from_millis(400)
        ),
        "{error}"
    );

    let dispatcher = Dispatcher::new(MemoryDeliveries::new(), receiver);
    add(&dispatcher, every(Duration::from_millis(10), 3)).await;
    let dispatcher = dispatcher
        .with_lease(Duration::from_millis(401))
        .expect("longer than every attempt");
    assert!(format!("{dispatcher:?}").contains("401ms"));
}

#[test]
fn the_presets_are_complete_configurations() {
    const DAY: Duration = Duration::from_secs(24 * 3600);
    let nine = Policy::nine_attempts_over_three_days();
    assert_eq!(nine.schedule().attempts(), 9);
    assert_eq!(nine.attempt_timeout(), Duration::from_secs(10));
    assert_eq!(nine.disable_after(), Some(3 * DAY));

    let ten_hours = Policy::five_retries_over_ten_hours();
    assert_eq!(ten_hours.schedule().attempts(), 6);
    assert_eq!(ten_hours.connect_timeout(), Duration::from_secs(5));
    assert_eq!(ten_hours.attempt_timeout(), Duration::from_secs(35));

    let seven = Policy::seven_attempts_over_a_day();
    assert_eq!(seven.schedule().attempts(), 7);
    assert_eq!(seven.disable_after(), Some(7 * DAY));

    let svix = Policy::svix();
    assert_eq!(svix.schedule().attempts(), 8);
    assert_eq!(svix.attempt_timeout(), Duration::from_secs(15));
    assert_eq!(svix.connect_timeout(), Duration::from_secs(5));
    assert_eq!(svix.concurrency(), 10);
    assert_eq!(svix.disable_after(), Some(5 * DAY));

    // The breakers, shown by driving them: 20 failures open the
    // exponential preset's for 24 h; 3 probes close the 10.6 h preset's.
    let now = std::time::Instant::now();
    let mut breaker = Policy::exponential_to_an_hour(30).breaker().clone();
    for n in 1..=20 {
        breaker
            .try_acquire(now)
            .unwrap_or_else(|_| panic!("closed before failure {n}"));
        breaker.on_failure(now);
    }
    assert!(
        breaker
            .try_acquire(now + DAY - Duration::from_secs(1))
            .is_err()
    );
    assert!(breaker.try_acquire(now + DAY).is_ok());

    let mut breaker = ten_hours.breaker().clone();
    for _ in 0..5 {
        breaker.try_acquire(now).unwrap();
        breaker.on_failure(now);
    }
    let later = now + Duration::from_secs(30);
    for _ in 0..3 {
        breaker.try_acquire(later).expect("up to three probes");
    }
    assert!(breaker.try_acquire(later).is_err(), "a fourth waits");
    for _ in 0..3 {
        breaker.on_success(later);
    }
    assert_eq!(
        breaker.state(later),
        hooklatch::sender::BreakerState::Closed
    );
}

/// The outbox's Postgres is stopped for two seconds while deliveries run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outbox_outage_loses_no_delivery() {
    let server = Arc::new(support::Postgres::start());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_millis(300))
        .connect(&server.url())
        .await
        .unwrap();
    let store = PostgresDeliveries::new(pool, "hooklatch").unwrap();
    store.migrate().await.unwrap();
    let (stopper, restarter) = (server.clone(), server.clone());
    outage_loses_no_delivery(
        store,
        move || stopper.stop_immediately(),
        move || restarter.start_again(),
    )
    .await;
}

/// The outbox's Redis (AOF, `appendfsync always`) is killed for two
/// seconds while deliveries run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outbox_outage_loses_no_delivery() {
    let server = Arc::new(Mutex::new(support::Redis::start()));
    let url = server.lock().unwrap().url();
    let store = RedisDeliveries::connect(&url).await.unwrap();
    let (stopper, restarter) = (server.clone(), server.clone());
    outage_loses_no_delivery(
        store,
        move || stopper.lock().unwrap().kill(),
        move || restarter.lock().unwrap().start_again(),
    )
    .await;
}

/// Stops the outbox's server for two seconds while deliveries run: the
/// dispatcher keeps going, and afterwards every delivery is recorded
/// delivered, with exactly one successful attempt each.
async fn outage_loses_no_delivery<S: DeliveryStore + Clone>(
    store: S,
    stop: impl FnOnce() + Send + 'static,
    restart: impl FnOnce() + Send + 'static,
) {
    let receiver = Receiver::answering(200);
    receiver.set_delay(Duration::from_millis(20));
    let dispatcher = dispatcher(store.clone(), &receiver)
        .with_lease(Duration::from_secs(1))
        .expect("lease");
    add(
        &dispatcher,
        every(Duration::from_millis(50), 1000).with_concurrency(4),
    )
    .await;
    let ids = ids(200);
    for id in &ids {
        dispatcher.send(ENDPOINT, id, id.as_bytes()).await.unwrap();
    }
    let running = dispatcher.start();
    wait_until("some deliveries are done", || {
        let done = receiver.successes().len();
        async move { done >= 20 }
    })
    .await;
    tokio::task::spawn_blocking(stop).await.unwrap();
    let during = receiver.successes().len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    tokio::task::spawn_blocking(restart).await.unwrap();
    assert!(during < ids.len(), "the outage came mid-run");
    wait_until("every delivery is delivered", || {
        all_in(&store, &ids, DeliveryState::Delivered)
    })
    .await;
    running.stop().await;
    for id in &ids {
        let stored = store.delivery(ENDPOINT, id).await.unwrap().unwrap();
        let successes = stored
            .attempts
            .iter()
            .filter(|a| a.result == Ok(200))
            .count();
        assert_eq!(successes, 1, "{id}: {:?}", stored.attempts);
    }
    // An attempt whose record was lost in the outage was sent again: the
    // receiver saw it twice, which is why receivers deduplicate.
    let answered = receiver.successes();
    assert_eq!(answered.len(), ids.len());
    assert!(
        answered.values().all(|&n| (1..=2).contains(&n)),
        "{answered:?}"
    );
}

/// A store that counts how often the loop looks for due deliveries.
#[derive(Clone, Default)]
struct CountingTakes {
    inner: MemoryDeliveries,
    takes: Arc<AtomicUsize>,
}

impl DeliveryStore for CountingTakes {
    async fn enqueue(
        &self,
        endpoint: &str,
        id: &str,
        body: &[u8],
        due: SystemTime,
    ) -> Result<bool, hooklatch::dedup::DedupError> {
        self.inner.enqueue(endpoint, id, body, due).await
    }
    async fn take_due(
        &self,
        endpoint: &str,
        now: SystemTime,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<hooklatch::sender::Taken>, hooklatch::dedup::DedupError> {
        self.takes.fetch_add(1, Ordering::SeqCst);
        self.inner.take_due(endpoint, now, limit, lease).await
    }
    async fn finish(
        &self,
        taken: &hooklatch::sender::Taken,
        attempt: &hooklatch::sender::Attempt,
        step: hooklatch::sender::Step,
    ) -> Result<bool, hooklatch::dedup::DedupError> {
        self.inner.finish(taken, attempt, step).await
    }
    async fn put_back(
        &self,
        taken: &hooklatch::sender::Taken,
        due: SystemTime,
    ) -> Result<bool, hooklatch::dedup::DedupError> {
        self.inner.put_back(taken, due).await
    }
    async fn delivery(
        &self,
        endpoint: &str,
        id: &str,
    ) -> Result<Option<hooklatch::sender::StoredDelivery>, hooklatch::dedup::DedupError> {
        self.inner.delivery(endpoint, id).await
    }
    async fn list(
        &self,
        endpoint: &str,
        state: DeliveryState,
        limit: usize,
    ) -> Result<Vec<String>, hooklatch::dedup::DedupError> {
        self.inner.list(endpoint, state, limit).await
    }
    async fn replay(
        &self,
        endpoint: &str,
        id: &str,
        now: SystemTime,
    ) -> Result<bool, hooklatch::dedup::DedupError> {
        self.inner.replay(endpoint, id, now).await
    }
    async fn purge(&self, before: SystemTime) -> Result<u64, hooklatch::dedup::DedupError> {
        self.inner.purge(before).await
    }
    async fn health(
        &self,
        endpoint: &str,
    ) -> Result<hooklatch::sender::EndpointHealth, hooklatch::dedup::DedupError> {
        self.inner.health(endpoint).await
    }
    async fn merge_health(
        &self,
        endpoint: &str,
        change: HealthChange,
    ) -> Result<hooklatch::sender::EndpointHealth, hooklatch::dedup::DedupError> {
        self.inner.merge_health(endpoint, change).await
    }
    async fn disable(
        &self,
        endpoint: &str,
        reason: DisableReason,
        now: SystemTime,
    ) -> Result<bool, hooklatch::dedup::DedupError> {
        self.inner.disable(endpoint, reason, now).await
    }
    async fn enable(&self, endpoint: &str) -> Result<(), hooklatch::dedup::DedupError> {
        self.inner.enable(endpoint).await
    }
}

/// A loop whose `Running` handle was dropped keeps delivering, and polls at
/// its interval rather than spinning.
#[tokio::test]
async fn a_detached_loop_keeps_its_pace() {
    let receiver = Receiver::answering(200);
    let store = CountingTakes::default();
    let dispatcher = Dispatcher::new(store.clone(), receiver.clone())
        .with_poll_interval(Duration::from_millis(100));
    add(&dispatcher, every(Duration::from_millis(10), 3)).await;
    drop(dispatcher.start());
    dispatcher.send(ENDPOINT, "msg_1", b"{}").await.unwrap();
    wait_until("delivered", || async { receiver.successes().len() == 1 }).await;
    let before = store.takes.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_takes = store.takes.load(Ordering::SeqCst) - before;
    assert!(
        idle_takes <= 7,
        "about one look per 100 ms, not a spin: {idle_takes}"
    );
}
