//! One acceptance suite for every claim store, stamped out for memory,
//! SQLite, Postgres and Redis: the published inbox checks
//! (`hooklatch::testing::inbox`, which a user's own store runs too) and the
//! lease and clock checks here. The SQL and Redis tests run against real
//! servers (see tests/support).

#[path = "worker/own_store.rs"]
mod own_store;
#[path = "support/patient_redis.rs"]
mod patient_redis;
mod support;
#[path = "worker/suite.rs"]
mod worker;

use std::any::Any;
use std::time::Duration;

use hooklatch::dedup::{
    Acceptance, AnyInbox, Claim, DedupError, EventMeta, EventStatus, GiveBack, Inbox, InboxQueue,
    InboxStats, IncomingEvent, LeaseStore, MemoryInbox, NackOutcome, PostgresInbox, RedisInbox,
    SqliteInbox, StoreOptions, Tail,
};
use hooklatch::testing::{StoreUnderTest, drain};

/// A store for one test, a namespace no other test uses, and whatever must
/// live as long as the test (a temporary folder, a private server).
struct Fixture<S> {
    store: S,
    namespace: String,
    _guards: Vec<Box<dyn Any + Send>>,
}

trait Backend {
    type Store: InboxQueue + LeaseStore + Clone + Send + Sync + 'static;
    /// Whether `take` hands out a namespace's events oldest first across
    /// the whole namespace; a sharded Redis store does so per shard.
    const ORDERED_ACROSS_THE_NAMESPACE: bool = true;
    async fn fixture(options: StoreOptions) -> Fixture<Self::Store>;
    /// Two clients of one store, each with its own options (and clock).
    async fn two_clients(a: StoreOptions, b: StoreOptions) -> (Fixture<Self::Store>, Self::Store);
}

struct Memory;
impl Backend for Memory {
    type Store = MemoryInbox;
    async fn fixture(options: StoreOptions) -> Fixture<MemoryInbox> {
        Fixture {
            store: MemoryInbox::new().with_options(options),
            namespace: support::unique("ns"),
            _guards: Vec::new(),
        }
    }

    async fn two_clients(a: StoreOptions, b: StoreOptions) -> (Fixture<MemoryInbox>, MemoryInbox) {
        let f = Self::fixture(a).await;
        let other = f.store.clone().with_options(b);
        (f, other)
    }
}

struct Sqlite;
impl Backend for Sqlite {
    type Store = SqliteInbox;
    async fn fixture(options: StoreOptions) -> Fixture<SqliteInbox> {
        let dir = support::TempDir::new("sqlite");
        let store = SqliteInbox::open(dir.path().join("inbox.db"))
            .await
            .expect("open sqlite")
            .with_options(options);
        Fixture {
            store,
            namespace: support::unique("ns"),
            _guards: vec![Box::new(dir)],
        }
    }

    async fn two_clients(a: StoreOptions, b: StoreOptions) -> (Fixture<SqliteInbox>, SqliteInbox) {
        let dir = support::TempDir::new("sqlite");
        let path = dir.path().join("inbox.db");
        let first = SqliteInbox::open(&path)
            .await
            .expect("open")
            .with_options(a);
        let second = SqliteInbox::open(&path)
            .await
            .expect("open")
            .with_options(b);
        let f = Fixture {
            store: first,
            namespace: support::unique("ns"),
            _guards: vec![Box::new(dir)],
        };
        (f, second)
    }
}

struct Postgres;
impl Backend for Postgres {
    type Store = PostgresInbox;
    async fn fixture(options: StoreOptions) -> Fixture<PostgresInbox> {
        let server = support::postgres();
        let store = PostgresInbox::connect(&server.url())
            .await
            .expect("connect to postgres")
            .with_options(options);
        Fixture {
            store,
            namespace: support::unique("ns"),
            _guards: vec![Box::new(server)],
        }
    }

    async fn two_clients(
        a: StoreOptions,
        b: StoreOptions,
    ) -> (Fixture<PostgresInbox>, PostgresInbox) {
        // Both clients on one server (a second support::postgres() would be
        // a private server of its own when no shared one is configured).
        let server = support::postgres();
        let url = server.url();
        let connect = |options| async {
            PostgresInbox::connect(&url)
                .await
                .expect("connect to postgres")
                .with_options(options)
        };
        let (first, second) = (connect(a).await, connect(b).await);
        let f = Fixture {
            store: first,
            namespace: support::unique("ns"),
            _guards: vec![Box::new(server)],
        };
        (f, second)
    }
}

/// Redis on one server, or (`CLUSTER`) on a cluster of three masters and
/// three replicas.
struct RedisOn<const CLUSTER: bool>;
type Redis = RedisOn<false>;
type RedisCluster = RedisOn<true>;

fn redis_server(cluster: bool) -> support::Server {
    if cluster {
        support::redis_cluster()
    } else {
        support::redis()
    }
}

impl<const CLUSTER: bool> Backend for RedisOn<CLUSTER> {
    type Store = RedisInbox;
    const ORDERED_ACROSS_THE_NAMESPACE: bool = false;
    async fn fixture(options: StoreOptions) -> Fixture<RedisInbox> {
        let server = redis_server(CLUSTER);
        let store = RedisInbox::connect(&server.url())
            .await
            .expect("connect to redis")
            .with_options(options);
        Fixture {
            store,
            namespace: support::unique("ns"),
            _guards: vec![Box::new(server)],
        }
    }

    async fn two_clients(a: StoreOptions, b: StoreOptions) -> (Fixture<RedisInbox>, RedisInbox) {
        let server = redis_server(CLUSTER);
        let url = server.url();
        let first = RedisInbox::connect(&url)
            .await
            .expect("connect")
            .with_options(a);
        let second = RedisInbox::connect(&url)
            .await
            .expect("connect")
            .with_options(b);
        let f = Fixture {
            store: first,
            namespace: support::unique("ns"),
            _guards: vec![Box::new(server)],
        };
        (f, second)
    }
}

/// SQLite opened by URL through [`AnyInbox`], so that the whole suite runs
/// through the type-erased store.
struct AnySqlite;
impl Backend for AnySqlite {
    type Store = AnyInbox;
    async fn fixture(options: StoreOptions) -> Fixture<AnyInbox> {
        let (f, _) = Self::two_clients(options, StoreOptions::default()).await;
        f
    }

    async fn two_clients(a: StoreOptions, b: StoreOptions) -> (Fixture<AnyInbox>, AnyInbox) {
        let dir = support::TempDir::new("sqlite");
        let url = format!("sqlite:{}", dir.path().join("inbox.db").display());
        let first = AnyInbox::connect_with(&url, a).await.expect("open");
        let second = AnyInbox::connect_with(&url, b).await.expect("open");
        assert_eq!((first.kind(), second.kind()), ("sqlite", "sqlite"));
        let f = Fixture {
            store: first,
            namespace: support::unique("ns"),
            _guards: vec![Box::new(dir)],
        };
        (f, second)
    }
}

fn event<'a>(namespace: &'a str, id: &'a str) -> IncomingEvent<'a> {
    IncomingEvent::new(namespace, id, id.as_bytes()).with_signed_at(Some(1_700_000_000))
}

/// `tail` returns each event accepted since its first call once, with its
/// type and the state it is in when read: waiting, taken, retrying after a
/// nack, dead, or done (acked); an event accepted before the first call
/// never comes back, and `max` bounds each call without losing the rest.
/// Lease-mode claims show too: taken while held, done once completed.
async fn a_tail_returns_each_accept_once_with_its_type_and_state_now<B: Backend>() {
    let f = B::fixture(StoreOptions::default()).await;
    let typed = |id: &'static str| (id, EventMeta::with_type(&format!("{id}.happened")));
    let mut tail = Tail::new(&f.namespace);
    let early = typed("early");
    let _ = f
        .store
        .accept(&event(&f.namespace, early.0).with_meta(&early.1))
        .await
        .unwrap();
    // The store's clock moves past the early accept before the tail starts.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        f.store.tail(&mut tail, 100).await.unwrap(),
        [],
        "a tail starts empty"
    );
    let _ = drain(&f.store, &f.namespace).await;

    let events = ["acked", "nacked", "buried", "held"].map(typed);
    for (id, meta) in &events {
        let accepted = f
            .store
            .accept(&event(&f.namespace, id).with_meta(meta))
            .await
            .unwrap();
        assert_eq!(accepted, Acceptance::Accepted);
    }
    let taken = f.store.take(&f.namespace, "w", 10).await.unwrap();
    assert_eq!(taken.len(), 4);
    let by_id = |id: &str| taken.iter().find(|entry| entry.id == id).unwrap();
    f.store.ack(by_id("acked")).await.unwrap();
    let _ = f
        .store
        .nack(by_id("nacked"), Duration::from_secs(3600))
        .await
        .unwrap();
    let _ = f
        .store
        .give_back(by_id("buried"), GiveBack::DeadLetter, "no such customer")
        .await
        .unwrap();
    let fresh = typed("fresh");
    let _ = f
        .store
        .accept(&event(&f.namespace, fresh.0).with_meta(&fresh.1))
        .await
        .unwrap();

    let mut seen = f.store.tail(&mut tail, 100).await.unwrap();
    // In the order of the accepts' times, to the millisecond.
    let order = ["acked", "nacked", "buried", "held", "fresh"];
    seen.sort_by_key(|event| order.iter().position(|id| *id == event.id));
    let states: Vec<(&str, EventStatus)> = seen
        .iter()
        .map(|event| (event.id.as_str(), event.status))
        .collect();
    assert_eq!(
        states,
        [
            ("acked", EventStatus::Done),
            ("nacked", EventStatus::Retrying),
            ("buried", EventStatus::Dead),
            ("held", EventStatus::Taken),
            ("fresh", EventStatus::Waiting),
        ]
    );
    for event in &seen {
        let expected = format!("{}.happened", event.id);
        match event.status {
            // A SQL store keeps only the claim of a handled event.
            EventStatus::Done => assert!(
                event.event_type.is_none() || event.event_type.as_deref() == Some(&expected)
            ),
            _ => assert_eq!(
                event.event_type.as_deref(),
                Some(expected.as_str()),
                "{event:?}"
            ),
        }
        assert!(
            event
                .accepted_at_millis
                .is_some_and(|at| at > 1_700_000_000_000),
            "{event:?}"
        );
        assert_eq!(event.namespace, f.namespace);
    }
    assert_eq!(
        f.store.tail(&mut tail, 100).await.unwrap(),
        [],
        "each accept once"
    );

    for id in ["m1", "m2", "m3"] {
        let _ = f.store.accept(&event(&f.namespace, id)).await.unwrap();
    }
    let first = f.store.tail(&mut tail, 2).await.unwrap();
    let rest = f.store.tail(&mut tail, 2).await.unwrap();
    assert_eq!((first.len(), rest.len()), (2, 1), "{first:?} {rest:?}");
    let mut ids: Vec<String> = first
        .into_iter()
        .chain(rest)
        .map(|event| event.id)
        .collect();
    ids.sort();
    assert_eq!(ids, ["m1", "m2", "m3"]);
    assert_eq!(f.store.tail(&mut tail, 2).await.unwrap(), []);
}

/// A client clock `offset` away from the real one.
fn skewed(offset: Duration, ahead: bool) -> StoreOptions {
    StoreOptions::default()
        .with_visibility_timeout(Duration::from_secs(2))
        .with_clock(move || {
            let now = std::time::SystemTime::now();
            if ahead { now + offset } else { now - offset }
        })
}

/// Two clients whose clocks are two hours apart, far more than any lease:
/// they still agree when a lease or a visibility timeout ends, because
/// shared stores decide on the server's clock.
async fn clients_with_clocks_hours_apart_agree_when_leases_end<B: Backend>() {
    let hour = Duration::from_secs(3600);
    let (f, ahead) = B::two_clients(skewed(hour, false), skewed(hour, true)).await;
    let behind = &f.store;
    let ns = &f.namespace;
    let lease = match behind
        .claim(ns, "evt", Duration::from_secs(2))
        .await
        .unwrap()
    {
        Claim::Fresh(lease) => lease,
        other => panic!("{other:?}"),
    };
    match ahead
        .claim(ns, "evt", Duration::from_secs(2))
        .await
        .unwrap()
    {
        Claim::InProgress { retry_after } => assert!(retry_after <= Duration::from_secs(2)),
        other => panic!("the lease is still held: {other:?}"),
    }
    let taken_early = match behind
        .claim(ns, "other", Duration::from_secs(30))
        .await
        .unwrap()
    {
        Claim::Fresh(lease) => lease,
        other => panic!("{other:?}"),
    };
    assert!(matches!(
        ahead
            .claim(ns, "other", Duration::from_secs(30))
            .await
            .unwrap(),
        Claim::InProgress { .. }
    ));
    ahead
        .complete(&taken_early)
        .await
        .expect("a lease is the holder's, whoever completes");
    assert_eq!(
        behind
            .claim(ns, "other", Duration::from_secs(1))
            .await
            .unwrap(),
        Claim::Done
    );

    assert_eq!(
        behind.accept(&event(ns, "queued")).await.unwrap(),
        Acceptance::Accepted
    );
    assert_eq!(
        ahead.accept(&event(ns, "queued")).await.unwrap(),
        Acceptance::Duplicate
    );
    let taken = behind.take(ns, "w1", 10).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert!(
        ahead.take(ns, "w2", 10).await.unwrap().is_empty(),
        "still invisible"
    );

    tokio::time::sleep(Duration::from_millis(2600)).await;
    assert!(
        matches!(
            ahead
                .claim(ns, "evt", Duration::from_secs(5))
                .await
                .unwrap(),
            Claim::Fresh(_)
        ),
        "the lease ended on the store's clock"
    );
    assert_eq!(
        behind.complete(&lease).await.unwrap_err().to_string(),
        DedupError::LeaseLost.to_string()
    );
    let again = ahead.take(ns, "w2", 10).await.unwrap();
    assert_eq!(again.len(), 1, "visible again after the timeout");
    assert!(
        behind.ack(&taken[0]).await.is_err(),
        "the first taker lost it"
    );
    ahead.ack(&again[0]).await.unwrap();

    // A retry delay is counted on the store's clock too.
    assert_eq!(
        behind.accept(&event(ns, "retried")).await.unwrap(),
        Acceptance::Accepted
    );
    let taken = behind.take(ns, "w1", 10).await.unwrap();
    assert_eq!(
        behind
            .nack(&taken[0], Duration::from_secs(3))
            .await
            .unwrap(),
        NackOutcome::WillRetry
    );
    assert!(
        ahead.take(ns, "w2", 10).await.unwrap().is_empty(),
        "not due yet"
    );
    tokio::time::sleep(Duration::from_millis(3300)).await;
    assert_eq!(ahead.take(ns, "w2", 10).await.unwrap().len(), 1, "due now");
}

/// A backend as the published checks see it: each store they ask for is
/// one of the backend's fixtures, kept alive (its server or folder) until
/// the check ends.
struct Under<B> {
    guards: std::sync::Mutex<Vec<Box<dyn Any + Send>>>,
    backend: std::marker::PhantomData<fn() -> B>,
}

impl<B> Default for Under<B> {
    fn default() -> Self {
        Self {
            guards: std::sync::Mutex::default(),
            backend: std::marker::PhantomData,
        }
    }
}

impl<B: Backend> StoreUnderTest for Under<B> {
    type Store = B::Store;

    async fn store(&self, options: StoreOptions) -> B::Store {
        let f = B::fixture(options).await;
        self.guards.lock().unwrap().push(Box::new(f._guards));
        f.store
    }

    fn ordered_across_the_namespace(&self) -> bool {
        B::ORDERED_ACROSS_THE_NAMESPACE
    }
}

macro_rules! acceptance_suite {
    (
        $module:ident, $backend:ident:
        inbox [$($inbox:ident),* $(,)?] lease [$($lease:ident),* $(,)?] here [$($test:ident),* $(,)?]
    ) => {
        mod $module {
            /// The published checks stamped here, by module.
            #[allow(dead_code)]
            pub(crate) const CHECKS: [&[&str]; 2] =
                [&[$(stringify!($inbox)),*], &[$(stringify!($lease)),*]];

            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $inbox() {
                    let under = super::Under::<super::$backend>::default();
                    hooklatch::testing::inbox::$inbox(&under).await;
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $lease() {
                    let under = super::Under::<super::$backend>::default();
                    hooklatch::testing::lease::$lease(&under).await;
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $test() {
                    super::$test::<super::$backend>().await;
                }
            )*
        }
    };
}

macro_rules! for_every_store {
    ($($module:ident => $backend:ident),*) => {
        $(
            acceptance_suite!($module, $backend: inbox [
                accepts_once_then_reports_duplicate,
                a_retention_of_a_century_keeps_claims,
                rejects_invalid_keys,
                takes_in_order_and_ack_removes,
                nack_redelivers_after_the_delay,
                dead_letters_after_max_attempts,
                provider_metadata_stays_with_the_event_to_the_dead_letters,
                stats_count_each_state_and_requeue_brings_dead_letters_back,
                stats_stay_exact_under_concurrent_accepts_takes_acks_and_nacks,
                crashed_worker_event_comes_back_and_acked_never_does,
                sixty_four_concurrent_accepts_of_one_id_enqueue_once,
                sixteen_tasks_ten_thousand_ids_with_repeats_enqueue_each_once,
                ack_many_acks_what_it_holds_and_reports_the_rest_lost,
                a_take_never_hands_out_one_event_twice,
                a_heartbeat_after_the_visibility_lapsed_is_refused,
                heartbeats_keep_a_taken_event_from_other_workers,
                claims_expire_after_the_retention,
            ] lease [
                lease_claims_refuse_invalid_keys,
                lease_is_exclusive_until_completed,
                released_lease_can_be_claimed_again,
                expired_lease_is_reclaimed_and_the_old_holder_loses_it,
                concurrent_claims_give_one_fresh_lease,
                a_heartbeat_after_the_lease_lapsed_is_refused,
                heartbeats_keep_a_lease_from_other_claims,
            ] here [
                a_tail_returns_each_accept_once_with_its_type_and_state_now,
            ]
            );
        )*
    };
}

for_every_store!(
    memory => Memory,
    sqlite => Sqlite,
    postgres => Postgres,
    redis => Redis,
    redis_cluster => RedisCluster,
    any_sqlite => AnySqlite
);

/// `AnyInbox::connect` picks the store by the URL's scheme, with that
/// store's checks and behaviour: an event accepted through it is a
/// duplicate the second time, is taken from the same store opened
/// directly (the memory store, which lives in its `AnyInbox`, through it),
/// and acked through the `AnyInbox` is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_inbox_opens_the_store_its_url_names() {
    let postgres = support::postgres();
    let redis = support::redis();
    let cluster = support::redis_cluster();
    let dir = support::TempDir::new("sqlite");
    let sqlite = format!("sqlite:{}", dir.path().join("any.db").display());
    for (url, kind) in [
        (sqlite.clone(), "sqlite"),
        (postgres.url(), "postgres"),
        (redis.url(), "redis"),
        (cluster.url(), "redis"),
        ("memory:".to_owned(), "memory"),
    ] {
        let store = AnyInbox::connect(&url).await.expect("connect");
        assert_eq!(store.kind(), kind, "{url}");
        let namespace = support::unique("any");
        let e = event(&namespace, "evt_any");
        assert_eq!(store.accept(&e).await.unwrap(), Acceptance::Accepted);
        assert_eq!(store.accept(&e).await.unwrap(), Acceptance::Duplicate);
        let taken = match kind {
            "sqlite" => {
                SqliteInbox::connect(&url)
                    .await
                    .unwrap()
                    .take(&namespace, "w", 10)
                    .await
            }
            "postgres" => {
                PostgresInbox::connect(&url)
                    .await
                    .unwrap()
                    .take(&namespace, "w", 10)
                    .await
            }
            "redis" => {
                RedisInbox::connect(&url)
                    .await
                    .unwrap()
                    .take(&namespace, "w", 10)
                    .await
            }
            _ => store.take(&namespace, "w", 10).await,
        }
        .unwrap();
        assert_eq!(
            taken.len(),
            1,
            "{kind}: the event is in the store the URL names"
        );
        assert_eq!(taken[0].id, "evt_any");
        assert_eq!(store.ack_many(&taken).await.unwrap(), [true]);
        assert_eq!(
            store.stats(&namespace).await.unwrap(),
            InboxStats::default()
        );
    }
}

/// A URL of a store that is not there fails as that store's `connect`
/// fails: a store error, never a usable inbox.
#[tokio::test]
async fn any_inbox_reports_a_store_it_cannot_reach() {
    let closed = support::free_port();
    let error = AnyInbox::connect(&format!("redis://127.0.0.1:{closed}"))
        .await
        .unwrap_err();
    assert!(matches!(error, DedupError::Store(_)), "{error}");
}

// The shared stores: MemoryInbox lives in one process and keeps time by its
// own (injectable) clock, so it is left out here.
acceptance_suite!(sqlite_clock, Sqlite: inbox [] lease [] here [clients_with_clocks_hours_apart_agree_when_leases_end]);
acceptance_suite!(postgres_clock, Postgres: inbox [] lease [] here [clients_with_clocks_hours_apart_agree_when_leases_end]);
acceptance_suite!(redis_clock, Redis: inbox [] lease [] here [clients_with_clocks_hours_apart_agree_when_leases_end]);
acceptance_suite!(
    redis_cluster_clock,
    RedisCluster: inbox [] lease [] here [clients_with_clocks_hours_apart_agree_when_leases_end]
);

/// Every published check runs on every built-in store: the lists stamped
/// above are the `pub async fn`s of `hooklatch::testing::inbox` and
/// `lease` (but `all`), so that a check added there cannot be skipped here.
#[test]
fn every_published_check_is_stamped_over_every_store() {
    fn published(sources: &[&str]) -> Vec<String> {
        let mut names: Vec<String> = sources
            .iter()
            .flat_map(|source| source.lines())
            .filter_map(|line| line.strip_prefix("pub async fn "))
            .filter_map(|rest| rest.split('<').next())
            .filter(|name| *name != "all")
            .map(str::to_owned)
            .collect();
        names.sort_unstable();
        names
    }
    let inbox = [
        include_str!("../src/testing/inbox/accept.rs"),
        include_str!("../src/testing/inbox/take.rs"),
        include_str!("../src/testing/inbox/stats.rs"),
    ];
    let lease = [include_str!("../src/testing/lease.rs")];
    for (stamped, sources) in memory::CHECKS.into_iter().zip([&inbox[..], &lease[..]]) {
        let mut stamped: Vec<String> = stamped.iter().map(|name| name.to_string()).collect();
        stamped.sort_unstable();
        assert_eq!(stamped, published(sources));
    }
}

/// MemoryInbox keeps time by the clock it is given: a lease ends when that
/// clock says so, with no waiting.
#[tokio::test]
async fn memory_store_keeps_time_by_its_clock() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let offset = Arc::new(AtomicU64::new(0));
    let clock_offset = Arc::clone(&offset);
    let store = MemoryInbox::new().with_options(StoreOptions::default().with_clock(move || {
        std::time::SystemTime::now() + Duration::from_secs(clock_offset.load(Ordering::SeqCst))
    }));
    assert!(matches!(
        store
            .claim("ns", "evt", Duration::from_secs(60))
            .await
            .unwrap(),
        Claim::Fresh(_)
    ));
    assert!(matches!(
        store
            .claim("ns", "evt", Duration::from_secs(60))
            .await
            .unwrap(),
        Claim::InProgress { .. }
    ));
    offset.store(61, Ordering::SeqCst);
    assert!(matches!(
        store
            .claim("ns", "evt", Duration::from_secs(60))
            .await
            .unwrap(),
        Claim::Fresh(_)
    ));
}

/// Without an append-only file a restart brings back an old snapshot (or
/// nothing) and loses accepts already answered 2xx: every Redis store
/// refuses such a server, naming the setting, until the connection opts
/// out; a server that turns AOF on is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_refuses_a_server_that_keeps_no_append_only_file() {
    let server = support::Redis::start_with(&["--appendonly", "no", "--save", "60 1"]);
    let url = server.url();
    let error = RedisInbox::connect(&url).await.unwrap_err();
    assert!(matches!(&error, DedupError::NoPersistence(_)), "{error}");
    assert!(error.to_string().contains("appendonly yes"), "{error}");
    assert!(matches!(
        RedisInbox::insecure_connect_allowing_eviction(&url).await,
        Err(DedupError::NoPersistence(_))
    ));
    assert!(matches!(
        hooklatch::sender::RedisOutbox::connect(&url).await,
        Err(hooklatch::sender::OutboxError::NoPersistence(_))
    ));
    assert!(matches!(
        hooklatch::sequence::RedisSequences::connect(&url).await,
        Err(hooklatch::sequence::SequenceError::NoPersistence(_))
    ));
    let unchecked = || async {
        hooklatch::RedisConnection::open(&url)
            .await
            .unwrap()
            .insecure_allowing_no_persistence()
    };
    RedisInbox::new(unchecked().await).await.expect("opted out");
    hooklatch::sender::RedisOutbox::new(unchecked().await)
        .await
        .expect("opted out");
    hooklatch::sequence::RedisSequences::new(unchecked().await)
        .await
        .expect("opted out");

    let client = ::redis::Client::open(url.as_str()).unwrap();
    let mut connection = crate::patient_redis::patient_redis(&client).await;
    let _: () = ::redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query_async(&mut connection)
        .await
        .unwrap();
    RedisInbox::connect(&url).await.expect("AOF is on now");
}

/// Under an evicting `maxmemory-policy`, claims (the only keys with a time
/// to live) go first and a retry is accepted again: `connect` refuses such
/// a server and names the fix; the insecure constructor connects anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_refuses_a_server_that_may_evict_keys() {
    let server = support::Redis::start();
    let url = server.url();
    RedisInbox::connect(&url)
        .await
        .expect("noeviction is accepted");
    let client = ::redis::Client::open(url.as_str()).unwrap();
    let mut connection = crate::patient_redis::patient_redis(&client).await;
    for policy in ["volatile-lru", "allkeys-lfu"] {
        let _: () = ::redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg(policy)
            .query_async(&mut connection)
            .await
            .unwrap();
        let error = RedisInbox::connect(&url).await.unwrap_err();
        assert!(
            matches!(&error, DedupError::EvictionPolicy(p) if p == policy),
            "{error}"
        );
        assert!(
            error.to_string().contains("maxmemory-policy noeviction"),
            "{error}"
        );
        RedisInbox::insecure_connect_allowing_eviction(&url)
            .await
            .expect("opted out");
        // The outbox and the sequence positions are refused the same way.
        assert!(matches!(
            hooklatch::sender::RedisOutbox::connect(&url).await,
            Err(hooklatch::sender::OutboxError::EvictionPolicy(_))
        ));
        assert!(matches!(
            hooklatch::sequence::RedisSequences::connect(&url).await,
            Err(hooklatch::sequence::SequenceError::EvictionPolicy(_))
        ));
    }
}

/// `migrate` records each store's schema version: eight processes' worth
/// of concurrent migrations of a new prefix all succeed and record it once,
/// and a database whose tables were made before versions were recorded is
/// brought up to date without losing its rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_migrations_are_versioned_and_run_once_at_a_time() {
    let server = support::postgres();
    let pool = sqlx::PgPool::connect(&server.url()).await.unwrap();
    let prefix = format!(
        "mig_{}",
        support::unique("p")
            .replace(['-', ':', '.'], "_")
            .to_lowercase()
    );
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (pool, prefix) = (pool.clone(), prefix.clone());
            tokio::spawn(async move { PostgresInbox::new(pool, &prefix).unwrap().migrate().await })
        })
        .collect();
    for task in tasks {
        task.await
            .unwrap()
            .expect("every concurrent migration succeeds");
    }
    let version: i64 =
        sqlx::query_scalar("SELECT version FROM hooklatch_schema_versions WHERE component = $1")
            .bind(format!("claims:{prefix}_claims"))
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(version, 1);

    // Tables made by an earlier release, with a row, and no version.
    let old = format!("{prefix}_old");
    let store = PostgresInbox::new(pool.clone(), &old).unwrap();
    store.migrate().await.unwrap();
    assert_eq!(
        store.accept(&event("ns", "kept")).await.unwrap(),
        Acceptance::Accepted
    );
    sqlx::query("DELETE FROM hooklatch_schema_versions WHERE component = $1")
        .bind(format!("claims:{old}_claims"))
        .execute(&pool)
        .await
        .unwrap();
    store
        .migrate()
        .await
        .expect("an unversioned schema is brought up to date");
    assert_eq!(
        store.accept(&event("ns", "kept")).await.unwrap(),
        Acceptance::Duplicate,
        "its rows are kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_migrations_are_versioned_and_run_once_at_a_time() {
    let dir = support::TempDir::new("sqlite-migrate");
    let url = format!("sqlite:{}?mode=rwc", dir.path().join("inbox.db").display());
    // Four stores on a new file, none migrated yet, migrating at once.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        let store = SqliteInbox::new(pool, "hooklatch").unwrap();
        tasks.push(tokio::spawn(async move { store.migrate().await }));
    }
    for task in tasks {
        task.await
            .unwrap()
            .expect("every concurrent migration succeeds");
    }
    let store = SqliteInbox::open(dir.path().join("inbox.db"))
        .await
        .unwrap();
    let version: i64 = sqlx::query_scalar(
        "SELECT version FROM hooklatch_schema_versions WHERE component = 'claims:hooklatch_claims'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(version, 1);
    assert_eq!(
        store.accept(&event("ns", "evt")).await.unwrap(),
        Acceptance::Accepted
    );
}

/// The server's count of error replies (`total_error_replies`), which
/// operators alert on.
async fn redis_error_replies(connection: &mut ::redis::aio::MultiplexedConnection) -> u64 {
    let info: String = ::redis::cmd("INFO")
        .arg("stats")
        .query_async(connection)
        .await
        .unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("total_error_replies:"))
        .expect("INFO stats has total_error_replies")
        .trim()
        .parse()
        .unwrap()
}

/// One event's whole life in `ns`: accepted, taken, nacked, taken again
/// and acked, with the counts and dead letters read on the way.
async fn redis_event_life(store: &RedisInbox, ns: &str, id: &str) {
    assert_eq!(
        store.accept(&event(ns, id)).await.unwrap(),
        Acceptance::Accepted
    );
    let taken = store.take(ns, "w", 100).await.unwrap();
    assert_eq!(taken.len(), 1);
    store.nack(&taken[0], Duration::ZERO).await.unwrap();
    let again = store.take(ns, "w", 100).await.unwrap();
    assert_eq!(again.len(), 1, "the nacked event comes back");
    store.ack(&again[0]).await.unwrap();
    let stats = store.stats(ns).await.unwrap();
    assert_eq!((stats.waiting, stats.taken, stats.dead), (0, 0, 0));
    assert!(store.dead_letters(ns, 10).await.unwrap().is_empty());
}

/// Takes what waits in `ns` (`waiting` events) and acks it all at once.
async fn redis_take_and_ack_all(store: &RedisInbox, ns: &str, waiting: usize) {
    let taken = store.take(ns, "w", 100).await.unwrap();
    assert_eq!(taken.len(), waiting);
    let acked = store.ack_many(&taken).await.unwrap();
    assert!(acked.iter().all(|&acked| acked), "{acked:?}");
}

async fn redis_reset_statistics(connection: &mut ::redis::aio::MultiplexedConnection) {
    let () = ::redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(connection)
        .await
        .unwrap();
}

/// Operators watch Redis' error count (`INFO errorstats`): the inbox's
/// steps add nothing to it. Counting an inbox before any accept, and
/// before any take, is no error; nor is any step of an event's life after
/// a shard's first take (which makes the shard's consumer group, and may
/// count one `NOGROUP` doing so): accepts, takes, nacks, acks one by one
/// and many at once, counts and dead letters. (The first use of each
/// script on a server counts one `NOSCRIPT` before it is loaded, and the
/// client library's greeting on each new connection may count some on
/// servers before 7.2: a warm-up round comes first.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_inbox_steps_add_no_errors_to_the_servers_statistics() {
    // A server of its own: the count is the whole server's.
    let server = support::Redis::start();
    let url = server.url();
    let store = RedisInbox::connect(&url)
        .await
        .unwrap()
        .with_shards(4)
        .unwrap();
    let client = ::redis::Client::open(url.as_str()).unwrap();
    let mut admin = crate::patient_redis::patient_redis(&client).await;
    redis_event_life(&store, &support::unique("warm"), "warm-up").await;
    let ns = support::unique("ns");

    redis_reset_statistics(&mut admin).await;
    assert_eq!(store.stats(&ns).await.unwrap().waiting, 0);
    for n in 0..8 {
        let id = format!("first-{n}");
        assert_eq!(
            store.accept(&event(&ns, &id)).await.unwrap(),
            Acceptance::Accepted
        );
    }
    assert_eq!(store.stats(&ns).await.unwrap().waiting, 8);
    assert_eq!(
        redis_error_replies(&mut admin).await,
        0,
        "errors from accepting and counting before any take"
    );
    // Each shard's first take makes its group.
    redis_take_and_ack_all(&store, &ns, 8).await;

    redis_reset_statistics(&mut admin).await;
    for round in 0..5 {
        for n in 0..8 {
            let id = format!("later-{round}-{n}");
            assert_eq!(
                store.accept(&event(&ns, &id)).await.unwrap(),
                Acceptance::Accepted
            );
        }
        redis_take_and_ack_all(&store, &ns, 8).await;
        redis_event_life(&store, &ns, &format!("life-{round}")).await;
    }
    assert_eq!(
        redis_error_replies(&mut admin).await,
        0,
        "errors the inbox's steps left in the server's statistics"
    );
}

/// A take makes the shard's consumer group when it is not there: on the
/// first take, and again after it was destroyed (by an operator, or a
/// restore from a backup without it). Nothing waiting is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_take_makes_the_consumer_group_again_when_it_is_gone() {
    let server = support::redis();
    let url = server.url();
    let store = RedisInbox::connect(&url)
        .await
        .unwrap()
        .with_shards(1)
        .unwrap();
    let client = ::redis::Client::open(url.as_str()).unwrap();
    let mut admin = crate::patient_redis::patient_redis(&client).await;
    let ns = support::unique("ns");
    assert_eq!(
        store.accept(&event(&ns, "before")).await.unwrap(),
        Acceptance::Accepted
    );
    let first = store.take(&ns, "w", 10).await.unwrap();
    assert_eq!(first.len(), 1);
    store.ack(&first[0]).await.unwrap();

    let destroyed: i64 = ::redis::cmd("XGROUP")
        .arg("DESTROY")
        .arg(format!("hooklatch:{{{ns}}}:inbox"))
        .arg("hooklatch")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(destroyed, 1, "the group the first take made");
    assert_eq!(
        store.accept(&event(&ns, "after")).await.unwrap(),
        Acceptance::Accepted
    );
    let taken = store.take(&ns, "w", 10).await.unwrap();
    let ids: Vec<&str> = taken.iter().map(|entry| entry.id.as_str()).collect();
    assert_eq!(ids, ["after"]);
    store.ack(&taken[0]).await.unwrap();
    assert_eq!(store.stats(&ns).await.unwrap().taken, 0);
}

/// The take script's path for a shard asked again within one take (only
/// entries never delivered) makes a missing group too, as its first path
/// does: were the group destroyed between two rounds of one take, the
/// second round still hands out what waits. Run on the script itself,
/// since no store call can destroy the group between its rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_take_asking_a_shard_again_makes_a_missing_group() {
    let server = support::redis();
    let client = ::redis::Client::open(server.url().as_str()).unwrap();
    let mut connection = crate::patient_redis::patient_redis(&client).await;
    let tag = support::unique("ns");
    let [stream, attempts, delayed, dead] =
        ["inbox", "attempts", "delayed", "dead"].map(|suffix| format!("t:{{{tag}}}:{suffix}"));
    for id in ["e1", "e2"] {
        let _: String = ::redis::cmd("XADD")
            .arg(&stream)
            .arg("*")
            .arg(&[
                "id",
                id,
                "body",
                "{}",
                "signed_at",
                "",
                "attempts",
                "0",
                "meta",
                "",
            ])
            .query_async(&mut connection)
            .await
            .unwrap();
    }
    type Row = (String, String, Vec<u8>, String, String, String, String);
    let taken: Vec<Row> = ::redis::Script::new(include_str!("../src/dedup/redis/lua/take.lua"))
        .key(&stream)
        .key(&attempts)
        .key(&delayed)
        .key(&dead)
        .key(format!("t:{{{tag}}}:idle"))
        .arg("hooklatch")
        .arg("w")
        .arg(10)
        .arg(30_000)
        .arg(5)
        .arg("nonce")
        .arg("1")
        .invoke_async(&mut connection)
        .await
        .unwrap();
    let ids: Vec<&str> = taken.iter().map(|row| row.1.as_str()).collect();
    assert_eq!(ids, ["e1", "e2"]);
    assert!(
        taken.iter().all(|row| row.4 == "1"),
        "first attempts: {taken:?}"
    );
    // XPENDING's summary: the count, then the lowest and highest ids and
    // the consumers.
    let (pending, ..): (u64, ::redis::Value, ::redis::Value, ::redis::Value) =
        ::redis::cmd("XPENDING")
            .arg(&stream)
            .arg("hooklatch")
            .query_async(&mut connection)
            .await
            .unwrap();
    assert_eq!(pending, 2, "both taken in the group the script made");
}

/// A take and an ack of more entries than one Redis command is sent at a
/// time (the scripts split their `HMGET`, `HSET`, `XACK`, `XDEL` and
/// `HDEL` into chunks of 1,000 under Lua's unpack limit): every entry is
/// handed out once, acked once, and a token from the first take no longer
/// acks after a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_takes_and_acks_batches_larger_than_one_command() {
    let server = support::redis();
    let store = RedisInbox::connect(&server.url())
        .await
        .unwrap()
        .with_options(StoreOptions::default().with_visibility_timeout(Duration::from_millis(500)))
        .with_shards(1)
        .unwrap();
    let ns = support::unique("ns");
    let ids: Vec<String> = (0..5_000).map(|i| format!("evt-{i}")).collect();
    for id in &ids {
        let _ = store.accept(&event(&ns, id)).await.unwrap();
    }
    let first = store.take(&ns, "w1", 6_000).await.unwrap();
    assert_eq!(first.len(), 5_000);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let second = store.take(&ns, "w2", 6_000).await.unwrap();
    assert_eq!(second.len(), 5_000, "the first take's visibility lapsed");
    assert!(second.iter().all(|entry| entry.attempt == 2));
    assert_eq!(store.ack_many(&first).await.unwrap(), vec![false; 5_000]);
    assert_eq!(store.ack_many(&second).await.unwrap(), vec![true; 5_000]);
    let mut taken: Vec<String> = second.into_iter().map(|entry| entry.id).collect();
    taken.sort();
    let mut sent = ids.clone();
    sent.sort();
    assert_eq!(taken, sent, "each event once");
    let stats = store.stats(&ns).await.unwrap();
    assert_eq!((stats.waiting, stats.taken, stats.dead), (0, 0, 0));
}
