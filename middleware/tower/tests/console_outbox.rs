//! The console's outbox pages over HTTP, on a memory outbox: the token and
//! CSRF checks, what the pages show (escaped), and that each change (replay
//! of one delivery or of a time range, disable, enable) reaches the store.
//! The browser test in cli/tests/console.rs drives the same pages on
//! Postgres.
#![cfg(feature = "console")]

use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use hooklatch::dedup::MemoryInbox;
use hooklatch::sender::MemoryOutbox;
use hooklatch::sender::outbox::DeliveryStore;
use hooklatch::sender::outbox::{DeliveryState, DisableReason};
use hooklatch_tower::console::Console;
use tower::ServiceExt as _;

#[path = "../../../tests/support/outbox_seed.rs"]
mod seed;
mod support;
use support::csrf;

const TOKEN: &str = "outbox-console-token-0123456789";

/// An outbox with endpoint `orders`, failing since an hour ago: two dead
/// deliveries (a 500, and an error whose text is a script) and a delivered
/// one.
async fn seeded() -> MemoryOutbox {
    let store = MemoryOutbox::new();
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let plan = [
        ("dead_1", an_hour_ago, Ok(500)),
        ("dead_2", an_hour_ago, Err("<script>alert(1)</script>")),
        ("fine", an_hour_ago, Ok(200)),
    ];
    seed::seed_endpoint(&store, "orders", &plan).await;
    store
}

/// The console nested under `/ops`, as an app mounts it: every link,
/// form and redirect must name its full path.
fn app(store: MemoryOutbox) -> axum::Router {
    let console = Console::new(MemoryInbox::new(), TOKEN, ["stripe"])
        .unwrap()
        .with_outbox(store);
    axum::Router::new().nest("/ops", console.router())
}

async fn get(app: &axum::Router, path: &str, token: Option<&str>) -> (StatusCode, String) {
    let mut request = Request::get(path);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

async fn post(app: &axum::Router, path: &str, form: &str) -> StatusCode {
    let request = Request::post(path)
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(form.to_owned()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    if response.status() == StatusCode::SEE_OTHER {
        let back = response.headers()[header::LOCATION].to_str().unwrap();
        assert_eq!(back, "/ops/outbox/endpoint?name=orders", "back to the page");
    }
    response.status()
}

#[tokio::test]
async fn outbox_pages_need_the_token() {
    let app = app(seeded().await);
    for path in ["/ops/outbox", "/ops/outbox/endpoint?name=orders"] {
        assert_eq!(get(&app, path, None).await.0, StatusCode::UNAUTHORIZED);
        let wrong = "outbox-console-token-0123456788";
        assert_eq!(
            get(&app, path, Some(wrong)).await.0,
            StatusCode::UNAUTHORIZED
        );
    }
    let request = Request::post("/ops/outbox/disable")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from("csrf=00&name=orders"))
        .unwrap();
    let status = app.clone().oneshot(request).await.unwrap().status();
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_endpoint_list_shows_health_and_counts_and_the_page_its_attempts_escaped_with_full_paths_when_nested()
 {
    let app = app(seeded().await);
    let (status, list) = get(&app, "/ops/outbox", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(list.contains("data-endpoint=\"orders\""), "{list}");
    assert!(list.contains("failing since"), "{list}");
    assert!(list.contains("<td>2</td>"), "two dead: {list}");

    assert!(
        list.contains("href=\"/ops/outbox/endpoint?name=orders\""),
        "{list}"
    );
    assert!(list.contains("href=\"/ops\""), "back to the inbox: {list}");
    let (status, page) = get(&app, "/ops/outbox/endpoint?name=orders", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    for action in ["/ops/outbox/disable", "/ops/outbox/replay"] {
        assert!(
            page.contains(&format!("action=\"{action}\"")),
            "{action} in {page}"
        );
    }
    assert!(page.contains("href=\"/ops/outbox\""), "{page}");
    let (status, inbox) = get(&app, "/ops", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(inbox.contains("href=\"/ops/outbox\""), "{inbox}");
    let (status, login) = get(&app, "/ops", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(login.contains("action=\"/ops/login\""), "{login}");
    assert!(page.contains("data-replay=\"dead_1\"") && page.contains("data-replay=\"dead_2\""));
    assert!(
        page.contains("dead 2") && page.contains("delivered 1"),
        "{page}"
    );
    assert!(!page.contains("<script>"), "the excerpt is escaped");
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(page.contains("<td>500</td>") && page.contains("<td>200</td>"));
    // Only the scheme and host of the seeded URL: its path may be a token.
    assert!(list.contains("https://hooks.example/***"), "{list}");
    assert!(!list.contains(seed::SEEDED_URL), "{list}");
}

#[tokio::test]
async fn replay_disable_and_enable_reach_the_store_and_need_the_csrf_token() {
    let store = seeded().await;
    let app = app(store.clone());
    let (_, page) = get(&app, "/ops/outbox/endpoint?name=orders", Some(TOKEN)).await;
    let csrf = csrf(&page);
    assert_eq!(csrf.len(), 64);

    let forged = "csrf=0000&name=orders";
    assert_eq!(
        post(&app, "/ops/outbox/disable", forged).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(store.health("orders").await.unwrap().disabled, None);

    let form = format!("csrf={csrf}&name=orders");
    assert_eq!(
        post(&app, "/ops/outbox/disable", &form).await,
        StatusCode::SEE_OTHER
    );
    let health = store.health("orders").await.unwrap();
    assert_eq!(health.disabled, Some(DisableReason::Manual));
    let (_, page) = get(&app, "/ops/outbox/endpoint?name=orders", Some(TOKEN)).await;
    assert!(page.contains("disabled by an operator") && page.contains("id=enable"));
    assert_eq!(
        post(&app, "/ops/outbox/enable", &form).await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(store.health("orders").await.unwrap().disabled, None);

    let one = format!("{form}&id=dead_1");
    assert_eq!(
        post(&app, "/ops/outbox/replay", &one).await,
        StatusCode::SEE_OTHER
    );
    let state = |id: &'static str| {
        let store = store.clone();
        async move { store.delivery("orders", id).await.unwrap().unwrap().state }
    };
    assert_eq!(state("dead_1").await, DeliveryState::Pending);
    assert_eq!(state("dead_2").await, DeliveryState::Dead);

    // dead_2 was last tried an hour ago: a range from two hours ago to now
    // replays it; a range that ended before it does nothing.
    let text = |ago: u64| {
        let at = SystemTime::now() - Duration::from_secs(ago);
        let seconds = at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        utc(seconds)
    };
    let early = format!("{form}&since={}&until={}", text(3 * 3600), text(2 * 3600));
    assert_eq!(
        post(&app, "/ops/outbox/replay", &early).await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(state("dead_2").await, DeliveryState::Dead);
    let range = format!("{form}&since={}&until={}", text(2 * 3600), text(0));
    assert_eq!(
        post(&app, "/ops/outbox/replay", &range).await,
        StatusCode::SEE_OTHER
    );
    assert_eq!(state("dead_2").await, DeliveryState::Pending);
    assert_eq!(state("fine").await, DeliveryState::Delivered);

    let nameless = format!("csrf={csrf}&name=no%20spaces");
    assert_eq!(
        post(&app, "/ops/outbox/disable", &nameless).await,
        StatusCode::BAD_REQUEST
    );
    let (status, _) = get(&app, "/ops/outbox/endpoint?name=%3Cb%3E", Some(TOKEN)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let bad = format!("{form}&since=yesterday&until=now");
    assert_eq!(
        post(&app, "/ops/outbox/replay", &bad).await,
        StatusCode::BAD_REQUEST
    );
}

/// `seconds` since the epoch as a `datetime-local` field sends it, in UTC.
fn utc(seconds: u64) -> String {
    let days = seconds / 86_400;
    let (mut year, mut day_of_year) = (1970, days);
    loop {
        let length = if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 {
            366
        } else {
            365
        };
        if day_of_year < length {
            break;
        }
        day_of_year -= length;
        year += 1;
    }
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let mut month = 0;
    for (index, length) in [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ]
    .into_iter()
    .enumerate()
    {
        if day_of_year < length {
            month = index + 1;
            break;
        }
        day_of_year -= length;
    }
    let in_day = seconds % 86_400;
    format!(
        "{year:04}-{month:02}-{:02}T{:02}%3A{:02}%3A{:02}",
        day_of_year + 1,
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60
    )
}

/// With many endpoints the list comes a page of 100 at a time, in name
/// order, each page linking to the next (the store reads a page at once:
/// `OutboxView::endpoint_page`, stamped over every store in
/// tests/outbox_view.rs).
#[tokio::test]
async fn the_endpoint_list_comes_a_page_of_100_at_a_time() {
    use hooklatch::sender::EndpointConfig;
    use hooklatch::sender::outbox::EndpointRegistry as _;
    let store = MemoryOutbox::new();
    let config = EndpointConfig::new(
        "https://hooks.example/in",
        "standard",
        ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
    )
    .unwrap();
    for n in 0..250 {
        store
            .save_endpoint(&format!("endpoint-{n:03}"), &config.to_json())
            .await
            .unwrap();
    }
    let app = app(store);
    let mut path = "/ops/outbox".to_owned();
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let (status, page) = get(&app, &path, Some(TOKEN)).await;
        assert_eq!(status, StatusCode::OK);
        pages += 1;
        let rows: Vec<String> = page
            .split("data-endpoint=\"")
            .skip(1)
            .map(|rest| rest.split('"').next().unwrap().to_owned())
            .collect();
        assert!(rows.len() <= 100, "{} rows on one page", rows.len());
        seen.extend(rows);
        let Some(next) = page.split("id=next href=\"").nth(1) else {
            break;
        };
        path = next.split('"').next().unwrap().replace("&amp;", "&");
    }
    assert_eq!(pages, 3);
    let expected: Vec<String> = (0..250).map(|n| format!("endpoint-{n:03}")).collect();
    assert_eq!(seen, expected, "every endpoint once, in order");
}
