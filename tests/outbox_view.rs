//! What an operator reads of an outbox and the replay of a time range,
//! stamped over every delivery store (memory, SQLite, Postgres, Redis on
//! one server and as a cluster).

mod support;

use std::time::{Duration, SystemTime};

use hooklatch::sender::outbox::{DeliveryCounts, DeliveryStore, EndpointRegistry, OutboxView};
use hooklatch::sender::outbox::{DeliveryState, DisableReason};
use hooklatch::sender::rules::WaitReason;
use hooklatch::sender::{EndpointConfig, Policy};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

#[path = "support/outbox_backends.rs"]
mod backends;
#[path = "support/outbox_seed.rs"]
mod seed;
use backends::*;
use seed::{end, leased};

const HOUR: Duration = Duration::from_secs(3600);

/// Counts by state (the backlog apart from what is leased), every endpoint
/// by name, and the latest attempts newest first.
async fn counts_names_and_recent_attempts(backend: impl Backend) {
    let store = backend.open().await;
    let now = SystemTime::now();
    let taken = leased(&store, "orders", &["ok_1", "ok_2", "dead", "gone", "held"]).await;
    for (offset, (taken, status)) in taken.iter().zip([200, 201, 500, 410]).enumerate() {
        let sent_at = now - HOUR + Duration::from_secs(60 * offset as u64);
        end(&store, taken, sent_at, Ok(status)).await;
    }
    // "held" stays leased; one more due now and one due tomorrow.
    assert!(store.enqueue("orders", "due", b"{}", now).await.unwrap());
    assert!(
        store
            .enqueue("orders", "later", b"{}", now + 24 * HOUR)
            .await
            .unwrap()
    );
    store.save_endpoint("configured", "{}").await.unwrap();
    // Disabled by hand before it ever had a delivery.
    let disabled = store.disable("idle", DisableReason::Manual, now).await;
    assert!(disabled.unwrap());

    let counts = store
        .counts("orders", now + Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(
        counts,
        DeliveryCounts {
            pending: 3,
            due: 1,
            delivered: 2,
            gone: 1,
            dead: 1,
        }
    );
    assert_eq!(
        store.counts("nobody", now).await.unwrap(),
        DeliveryCounts::default()
    );
    assert_eq!(
        store.endpoint_names().await.unwrap(),
        ["configured", "idle", "orders"]
    );

    let recent = store.recent_attempts("orders", 3).await.unwrap();
    let seen: Vec<(&str, Result<u16, _>)> = recent
        .iter()
        .map(|recent| {
            (
                recent.id.as_str(),
                recent.attempt.result.clone().map_err(|_| ()),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("gone", Ok(410)), ("dead", Ok(500)), ("ok_2", Ok(201))]
    );
    assert_eq!(recent[0].attempt.excerpt, b"answer 410");
    assert_eq!(recent[0].attempt.reason, WaitReason::Schedule);
    assert_eq!(store.recent_attempts("orders", 0).await.unwrap(), []);
}

/// A page of endpoints holds, in name order and each once across the
/// pages, what each endpoint's own reads say: its health, its counts and
/// its saved configuration. Endpoints spread over the stores' shards, with
/// deliveries in every state, failing, disabled, or only configured.
async fn endpoint_pages(backend: impl Backend) {
    let store = backend.open().await;
    let now = SystemTime::now();
    let mut names = Vec::new();
    for n in 0..23 {
        let name = format!("endpoint-{n:02}");
        let plan: Vec<(String, Result<u16, &str>)> = (0..n % 4)
            .map(|i| {
                (
                    format!("{name}-{i}"),
                    [Ok(200), Ok(500), Ok(410)][(n + i) % 3],
                )
            })
            .collect();
        let plan: Vec<(&str, SystemTime, Result<u16, &str>)> = plan
            .iter()
            .map(|(id, answer)| (id.as_str(), now - HOUR, *answer))
            .collect();
        seed::seed_endpoint(&store, &name, &plan).await;
        if n % 5 == 0 {
            let later = now + Duration::from_secs(60 * n as u64);
            assert!(store.enqueue(&name, "waiting", b"{}", later).await.unwrap());
            assert!(store.enqueue(&name, "due", b"{}", now).await.unwrap());
        }
        if n % 7 == 0 {
            store
                .disable(&name, DisableReason::Manual, now)
                .await
                .unwrap();
        }
        names.push(name);
    }
    // Disabled by hand before it ever had a delivery or a configuration,
    // and one with deliveries only.
    store
        .disable("a-idle", DisableReason::Manual, now)
        .await
        .unwrap();
    assert!(store.enqueue("z-unsaved", "one", b"{}", now).await.unwrap());
    names.insert(0, "a-idle".to_owned());
    names.push("z-unsaved".to_owned());

    let saved = store.saved_endpoints().await.unwrap().endpoints;
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.endpoint_page(after.as_deref(), 4, now).await.unwrap();
        assert!(page.len() <= 4, "{} on a page of 4", page.len());
        for summary in &page {
            let name = summary.name.as_str();
            assert_eq!(summary.health, store.health(name).await.unwrap(), "{name}");
            assert_eq!(
                summary.counts,
                store.counts(name, now).await.unwrap(),
                "{name}"
            );
            assert_eq!(summary.saved.as_ref(), saved.get(name), "{name}");
            seen.push(summary.name.clone());
        }
        match page.last() {
            Some(last) if page.len() == 4 => after = Some(last.name.clone()),
            _ => break,
        }
    }
    assert_eq!(seen, names, "every endpoint once, in name order");
    let failing = store
        .endpoint_page(Some("endpoint-00"), 1, now)
        .await
        .unwrap();
    assert!(failing[0].health.failing_since.is_some(), "{failing:?}");
    assert_eq!(
        store
            .endpoint_page(Some("z-unsaved"), 4, now)
            .await
            .unwrap(),
        [],
        "nothing after the last"
    );
    assert_eq!(store.endpoint_page(None, 0, now).await.unwrap(), []);
}

/// Dead and gone deliveries whose last attempt falls in the range are
/// replayed, those outside it and delivered ones are not, and the limit
/// holds.
async fn replay_of_a_time_range(backend: impl Backend) {
    let store = backend.open().await;
    let now = SystemTime::now();
    let ids = [
        "before",
        "inside_1",
        "inside_2",
        "inside_gone",
        "after",
        "fine",
    ];
    let taken = leased(&store, "orders", &ids).await;
    let yesterday = now - 24 * HOUR;
    let plan = [
        (yesterday - 2 * HOUR, 500),
        (yesterday + HOUR, 500),
        (yesterday + 2 * HOUR, 503),
        (yesterday + 3 * HOUR, 410),
        (now - HOUR, 500),
        (yesterday + HOUR, 200),
    ];
    for (taken, (sent_at, status)) in taken.iter().zip(plan) {
        end(&store, taken, sent_at, Ok(status)).await;
    }
    let (since, until) = (yesterday, yesterday + 12 * HOUR);

    let first = store
        .replay_between("orders", since, until, now, 2)
        .await
        .unwrap();
    assert_eq!(first.len(), 2, "{first:?}");
    let rest = store
        .replay_between("orders", since, until, now, 100)
        .await
        .unwrap();
    let mut replayed: Vec<String> = first.into_iter().chain(rest).collect();
    replayed.sort();
    assert_eq!(replayed, ["inside_1", "inside_2", "inside_gone"]);
    for id in ids {
        let state = store.delivery("orders", id).await.unwrap().unwrap().state;
        let expected = match id {
            "before" | "after" => DeliveryState::Dead,
            "fine" => DeliveryState::Delivered,
            _ => DeliveryState::Pending,
        };
        assert_eq!(state, expected, "{id}");
    }
}

/// An operator's enable (console, CLI) follows the saved policy: an
/// endpoint whose policy replays on enable gets its dead deliveries back,
/// one whose policy does not keeps them dead; both are enabled.
async fn enable_as_saved_follows_the_saved_policy(backend: impl Backend) {
    let store = backend.open().await;
    let now = SystemTime::now();
    for (endpoint, replays) in [("replays", true), ("keeps", false)] {
        let policy = Policy::svix().with_replay_on_enable(replays);
        let config = EndpointConfig::new("https://e.example/", "standard", [SECRET])
            .unwrap()
            .with_policy(policy);
        store
            .save_endpoint(endpoint, &config.to_json())
            .await
            .unwrap();
        for taken in leased(&store, endpoint, &["dead_1", "dead_2"]).await {
            end(&store, &taken, now - HOUR, Ok(500)).await;
        }
        assert!(
            store
                .disable(endpoint, DisableReason::Manual, now)
                .await
                .unwrap()
        );
    }
    assert_eq!(store.enable_as_saved("replays", now).await.unwrap(), 2);
    assert_eq!(store.enable_as_saved("keeps", now).await.unwrap(), 0);
    for (endpoint, state) in [
        ("replays", DeliveryState::Pending),
        ("keeps", DeliveryState::Dead),
    ] {
        assert_eq!(store.health(endpoint).await.unwrap().disabled, None);
        for id in ["dead_1", "dead_2"] {
            let delivery = store.delivery(endpoint, id).await.unwrap().unwrap();
            assert_eq!(delivery.state, state, "{endpoint} {id}");
        }
    }
}

macro_rules! suite {
    ($module:ident, $backend:expr) => {
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn counts_by_state_endpoint_names_and_latest_attempts_newest_first() {
                counts_names_and_recent_attempts($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_operators_enable_replays_dead_deliveries_only_when_the_saved_policy_says_so() {
                enable_as_saved_follows_the_saved_policy($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_page_of_endpoints_holds_each_ones_health_counts_and_configuration_in_name_order() {
                endpoint_pages($backend).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_time_range_replays_only_the_failed_deliveries_last_tried_in_it() {
                replay_of_a_time_range($backend).await;
            }
        }
    };
}

suite!(on_memory, memory());
suite!(on_sqlite, sqlite());
suite!(on_any_sqlite, any_sqlite());
suite!(on_postgres, postgres());
suite!(on_redis, redis());
suite!(on_redis_cluster, redis_cluster());
