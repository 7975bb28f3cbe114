//! The layer and extractors under a real axum server on 127.0.0.1:0 with a
//! real HTTP client, for every store; and the layer alone, driven with
//! `ServiceBuilder` + `oneshot`.

#[path = "../../../tests/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::routing::post;
use axum::{Extension, Router};
use hooklatch::dedup::{
    Inbox, InboxQueue, LeaseStore, MemoryInbox, PostgresInbox, RedisInbox, SqliteInbox,
};
use hooklatch::verify::{Scheme, SignedHeaders, Signer, Verifier};
use hooklatch_tower::{EventKey, RawWebhook, Rejection, VerifiedEvent, Webhook, WebhookLayer};
use http::{Request, StatusCode};
use tower::{ServiceBuilder, ServiceExt as _};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const LIMIT: usize = 4096;

fn verifier() -> Verifier {
    Verifier::builder(Scheme::standard_webhooks())
        .with_secret(SECRET)
        .unwrap()
        .build()
        .unwrap()
}

fn sign_with(secret: &str, id: &str, at: SystemTime, body: &[u8]) -> SignedHeaders {
    Signer::new(Scheme::standard_webhooks(), [secret])
        .unwrap()
        .sign(id, at, body)
        .unwrap()
}

fn sign(id: &str, body: &[u8]) -> SignedHeaders {
    sign_with(SECRET, id, SystemTime::now(), body)
}

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{address}/webhooks")
}

async fn post_signed(
    client: &reqwest::Client,
    url: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
) -> (StatusCode, String) {
    let mut request = client.post(url).body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    match request.send().await {
        Ok(response) => {
            let status = StatusCode::from_u16(response.status().as_u16()).unwrap();
            (status, response.text().await.unwrap_or_default())
        }
        Err(error) => panic!("request failed: {error}"),
    }
}

type HeaderPairs = Vec<(String, String)>;

fn pairs(headers: &SignedHeaders) -> HeaderPairs {
    headers
        .iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

fn inbox_app<S: Inbox + Clone + 'static>(store: S, namespace: &str) -> Router {
    Router::new()
        .route("/webhooks", post(|| async { "never called" }))
        .layer(
            WebhookLayer::new(verifier())
                .with_body_limit(LIMIT)
                .with_inbox(store, namespace)
                .unwrap(),
        )
}

/// Store down -> 503 and nothing claimed; back up -> the retry gets 202.
async fn store_outage_answers_503_then_the_retry_is_accepted<S: InboxQueue + Clone + 'static>(
    store: S,
    stop: impl FnOnce(),
    start: impl FnOnce(),
) {
    let url = serve(inbox_app(store.clone(), "outage")).await;
    let client = reqwest::Client::new();
    let body = b"{}".to_vec();
    let headers = pairs(&sign("msg_during_outage", &body));
    stop();
    let (status, _) = post_signed(&client, &url, &headers, body.clone()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    start();
    // The sender retries until the store is reachable again.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        let (status, _) = post_signed(&client, &url, &headers, body.clone()).await;
        if status != StatusCode::SERVICE_UNAVAILABLE || std::time::Instant::now() > deadline {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "nothing was claimed during the outage"
    );
    assert_eq!(
        support::drain(&store, "outage").await,
        ["msg_during_outage"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_outage_answers_503_then_the_retry_is_accepted() {
    let server = Arc::new(support::Postgres::start());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect(&server.url())
        .await
        .unwrap();
    let store = PostgresInbox::new(pool, "hooklatch").unwrap();
    store.migrate().await.unwrap();
    let (stopper, starter) = (server.clone(), server.clone());
    store_outage_answers_503_then_the_retry_is_accepted(
        store,
        move || stopper.stop_immediately(),
        move || starter.start_again(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_outage_answers_503_then_the_retry_is_accepted() {
    let server = Arc::new(std::sync::Mutex::new(support::Redis::start()));
    let url = server.lock().unwrap().url();
    let store = RedisInbox::connect(&url).await.unwrap();
    let (killer, starter) = (server.clone(), server.clone());
    store_outage_answers_503_then_the_retry_is_accepted(
        store,
        move || killer.lock().unwrap().kill(),
        move || starter.lock().unwrap().start_again(),
    )
    .await;
}

/// The lease is the handler's deadline: a handler still running when it
/// ends is stopped and answered 503 with `Retry-After`, and its lease is
/// released so the sender's retry runs at once. A client that hangs up
/// mid-handler does not cancel it: its lease is still completed.
async fn lease_mode_keeps_its_deadline_and_settles_whatever_the_client_does<
    S: LeaseStore + Clone + 'static,
>(
    store: S,
) {
    let namespace = support::unique("deadline");
    let runs = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let (handler_runs, handler_finished) = (runs.clone(), finished.clone());
    let handler = move |body: String| {
        let (runs, finished) = (handler_runs.clone(), handler_finished.clone());
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            // The first run of "slow" outlives its lease; "hangup" takes a
            // while, during which its client gives up.
            let wait = match (body.as_str(), runs.load(Ordering::SeqCst)) {
                ("\"slow\"", 1) => Duration::from_secs(5),
                ("\"hangup\"", _) => Duration::from_millis(300),
                _ => Duration::ZERO,
            };
            tokio::time::sleep(wait).await;
            finished.fetch_add(1, Ordering::SeqCst);
            (StatusCode::OK, "handled")
        }
    };
    let app = Router::new().route("/webhooks", post(handler)).layer(
        WebhookLayer::new(verifier())
            .with_lease(store.clone(), &namespace, Duration::from_secs(2))
            .unwrap(),
    );
    let url = serve(app).await;
    let client = reqwest::Client::new();

    let slow = br#""slow""#.to_vec();
    let headers = pairs(&sign("msg_slow", &slow));
    let response = {
        let mut request = client.post(&url).body(slow.clone());
        for (name, value) in &headers {
            request = request.header(name, value);
        }
        request.send().await.unwrap()
    };
    assert_eq!(response.status().as_u16(), 503);
    assert_eq!(response.headers()["retry-after"], "5");
    assert_eq!(
        finished.load(Ordering::SeqCst),
        0,
        "answered at the lease's deadline, not after the handler's 5 s"
    );
    assert_eq!(
        post_signed(&client, &url, &headers, slow.clone()).await.0,
        StatusCode::OK,
        "the lease was released: the retry runs"
    );
    assert_eq!(
        finished.load(Ordering::SeqCst),
        1,
        "the stopped run never finished"
    );

    let hangup = br#""hangup""#.to_vec();
    let headers = pairs(&sign("msg_hangup", &hangup));
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(150))
        .build()
        .unwrap();
    let mut request = impatient.post(&url).body(hangup.clone());
    for (name, value) in &headers {
        request = request.header(name, value);
    }
    assert!(request.send().await.is_err(), "the client hung up");
    // The handler goes on for its 300 ms; however long that takes on this
    // machine, it ends in a completed claim, not a released or lapsed one.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let settled = loop {
        match store
            .claim(&namespace, "msg_hangup", Duration::from_secs(1))
            .await
            .unwrap()
        {
            hooklatch::dedup::Claim::InProgress { .. } if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => break other,
        }
    };
    assert_eq!(
        settled,
        hooklatch::dedup::Claim::Done,
        "completed though its client was gone"
    );
    assert_eq!(finished.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_lease_mode_keeps_its_deadline_and_settles_whatever_the_client_does() {
    lease_mode_keeps_its_deadline_and_settles_whatever_the_client_does(MemoryInbox::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_lease_mode_keeps_its_deadline_and_settles_whatever_the_client_does() {
    let dir = support::TempDir::new("tower-deadline");
    let store = SqliteInbox::open(dir.path().join("lease.db"))
        .await
        .unwrap();
    lease_mode_keeps_its_deadline_and_settles_whatever_the_client_does(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_lease_mode_keeps_its_deadline_and_settles_whatever_the_client_does() {
    let server = support::postgres();
    let store = PostgresInbox::connect(&server.url()).await.unwrap();
    lease_mode_keeps_its_deadline_and_settles_whatever_the_client_does(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_lease_mode_keeps_its_deadline_and_settles_whatever_the_client_does() {
    let server = support::redis();
    let store = RedisInbox::connect(&server.url()).await.unwrap();
    lease_mode_keeps_its_deadline_and_settles_whatever_the_client_does(store).await;
}

/// `complete` is tried again when the store fails: the Postgres server is
/// stopped while the handler runs and started again within the retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lease_mode_completes_after_the_store_comes_back() {
    let server = support::Postgres::start();
    let store = PostgresInbox::connect(&server.url()).await.unwrap();
    let namespace = support::unique("comeback");
    let stop = Arc::new(tokio::sync::Notify::new());
    let stopped = Arc::new(tokio::sync::Notify::new());
    let (handler_stop, handler_stopped) = (stop.clone(), stopped.clone());
    let handler = move || {
        let (stop, stopped) = (handler_stop.clone(), handler_stopped.clone());
        async move {
            stop.notify_one();
            stopped.notified().await;
            (StatusCode::OK, "handled")
        }
    };
    let app = Router::new().route("/webhooks", post(handler)).layer(
        WebhookLayer::new(verifier())
            .with_lease(store.clone(), &namespace, Duration::from_secs(30))
            .unwrap(),
    );
    let url = serve(app).await;
    let body = b"{}".to_vec();
    let headers = pairs(&sign("msg_comeback", &body));
    let client = reqwest::Client::new();
    let request = tokio::spawn({
        let (client, url, headers) = (client.clone(), url.clone(), headers.clone());
        async move { post_signed(&client, &url, &headers, body).await.0 }
    });
    stop.notified().await;
    server.stop_immediately();
    let restart = tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_millis(150));
        server.start_again();
        server
    });
    stopped.notify_one();
    assert_eq!(request.await.unwrap(), StatusCode::OK);
    let server = restart.await.unwrap();
    let store = PostgresInbox::connect(&server.url()).await.unwrap();
    assert_eq!(
        store
            .claim(&namespace, "msg_comeback", Duration::from_secs(1))
            .await
            .unwrap(),
        hooklatch::dedup::Claim::Done,
        "completed on a later try"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_delivery_gets_409_while_the_first_runs() {
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let entered = Arc::new(std::sync::Mutex::new(Some(entered_tx)));
    let release = Arc::new(tokio::sync::Notify::new());
    let handler_release = release.clone();
    let handler = move || {
        let (entered, release) = (entered.clone(), handler_release.clone());
        async move {
            if let Some(tx) = entered.lock().unwrap().take() {
                let _ = tx.send(());
            }
            release.notified().await;
            "handled"
        }
    };
    let app = Router::new().route("/webhooks", post(handler)).layer(
        WebhookLayer::new(verifier())
            .with_lease(MemoryInbox::new(), "lease", Duration::from_secs(30))
            .unwrap(),
    );
    let url = serve(app).await;
    let client = reqwest::Client::new();
    let body = b"{}".to_vec();
    let headers = pairs(&sign("msg_slow", &body));
    let first = {
        let (client, url, headers, body) =
            (client.clone(), url.clone(), headers.clone(), body.clone());
        tokio::spawn(async move { post_signed(&client, &url, &headers, body).await })
    };
    entered_rx.await.unwrap();
    let response = client
        .post(&url)
        .headers(
            headers
                .iter()
                .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
                .collect(),
        )
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 409);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=30).contains(&retry_after));
    release.notify_one();
    assert_eq!(first.await.unwrap().0, StatusCode::OK);
}

#[tokio::test]
async fn verify_only_passes_the_body_on_intact_with_the_event() {
    let service = ServiceBuilder::new()
        .layer(WebhookLayer::new(verifier()))
        .service_fn(|request: Request<Body>| async move {
            let event = request
                .extensions()
                .get::<VerifiedEvent>()
                .cloned()
                .unwrap();
            let body = axum::body::to_bytes(request.into_body(), usize::MAX)
                .await
                .unwrap();
            assert_eq!(body, event.body);
            assert_eq!(event.key(), Ok("msg_pass"));
            assert_eq!(event.scheme, "standard");
            Ok::<_, std::convert::Infallible>(http::Response::new(Body::from("inner")))
        });
    let body = b"{\"a\":1}";
    let mut request = Request::post("/").body(Body::from(&body[..])).unwrap();
    *request.headers_mut() = sign("msg_pass", body).to_header_map();
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn declared_length_over_the_limit_is_refused_before_reading() {
    let service = ServiceBuilder::new()
        .layer(WebhookLayer::new(verifier()).with_body_limit(16))
        .service_fn(|_: Request<Body>| async {
            panic!("the inner service must not run");
            #[allow(unreachable_code)]
            Ok::<_, std::convert::Infallible>(http::Response::new(Body::empty()))
        });
    // The body stream panics if polled: the layer must not read it.
    let request = Request::post("/")
        .header("content-length", "17")
        .body(Body::from_stream(Unreadable))
        .unwrap();
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        response.extensions().get::<Rejection>(),
        Some(&Rejection::BodyTooLarge { limit: 16 })
    );
}

/// A body stream that panics if anyone reads it.
struct Unreadable;

impl futures_core::Stream for Unreadable {
    type Item = Result<axum::body::Bytes, std::io::Error>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        panic!("the body was read");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chunked_body_over_the_limit_is_refused_after_reading_at_most_one_frame_more() {
    let store = MemoryInbox::new();
    // Count, on the server, every body byte the layer pulls.
    let read = Arc::new(AtomicUsize::new(0));
    let counter = read.clone();
    let app = inbox_app(store.clone(), "chunked").layer(axum::middleware::map_request(
        move |request: Request<Body>| {
            let counter = counter.clone();
            async move {
                let (parts, body) = request.into_parts();
                let counted =
                    futures_util::StreamExt::inspect(body.into_data_stream(), move |chunk| {
                        if let Ok(bytes) = chunk {
                            counter.fetch_add(bytes.len(), Ordering::SeqCst);
                        }
                    });
                Request::from_parts(parts, Body::from_stream(counted))
            }
        },
    ));
    let url = serve(app).await;
    // 4 MiB in 1 KiB chunks, no Content-Length.
    let chunks =
        futures_util::stream::iter((0..4096).map(|_| Ok::<_, std::io::Error>(vec![b'x'; 1024])));
    let headers = sign("msg_chunked", b"irrelevant");
    let mut request = reqwest::Client::new()
        .post(&url)
        .body(reqwest::Body::wrap_stream(chunks));
    for (name, value) in headers.iter() {
        request = request.header(name, value);
    }
    // The server answers 413, or closes the connection while we send.
    if let Ok(response) = request.send().await {
        assert_eq!(response.status().as_u16(), 413);
    }
    let read = read.load(Ordering::SeqCst);
    // hyper hands the body over in frames of what one socket read got
    // (at most its 64 KiB read buffer here): the layer stops in the frame
    // that crosses the limit.
    assert!(
        read <= LIMIT + 64 * 1024,
        "the server read {read} bytes of a body limited to {LIMIT}"
    );
    assert!(support::drain(&store, "chunked").await.is_empty());
}

/// `Webhook<T>` and `RawWebhook` read the event the layer verified; on a
/// route with no layer they refuse with a 500 that names the fix, and never
/// hand an unverified body to the handler (a `Verifier` in an `Extension`,
/// which they once verified with, is not enough).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_typed_extractors_take_only_what_a_layer_verified() {
    #[derive(serde::Deserialize)]
    struct Paid {
        invoice: String,
    }
    let layer = || {
        WebhookLayer::new(verifier())
            .with_lease(MemoryInbox::new(), "typed", Duration::from_secs(30))
            .unwrap()
    };
    let typed = post(|Webhook(paid): Webhook<Paid>| async move { paid.invoice });
    let raw = post(|RawWebhook(event): RawWebhook| async move { event.key().unwrap().to_owned() });
    let app = Router::new()
        .route("/webhooks", typed.clone().layer(layer()))
        .route("/raw", raw.clone().layer(layer()))
        .route("/bare/webhooks", typed)
        .route("/bare/raw", raw)
        .layer(Extension(verifier()));
    let url = serve(app).await;
    let client = reqwest::Client::new();
    let body = br#"{"invoice":"in_42"}"#.to_vec();
    let headers = pairs(&sign("msg_x", &body));
    let raw_url = url.replace("/webhooks", "/raw");
    assert_eq!(
        post_signed(&client, &url, &headers, body.clone()).await,
        (StatusCode::OK, "in_42".into())
    );
    assert_eq!(
        post_signed(
            &client,
            &raw_url,
            &pairs(&sign("msg_r", &body)),
            body.clone()
        )
        .await,
        (StatusCode::OK, "msg_r".into())
    );
    let mut forged = body.clone();
    forged[3] ^= 1;
    assert_eq!(
        post_signed(&client, &url, &pairs(&sign("msg_f", &body)), forged)
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    let not_json = b"plain".to_vec();
    let headers = pairs(&sign("msg_y", &not_json));
    assert_eq!(
        post_signed(&client, &url, &headers, not_json).await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    for bare in [
        url.replace("/webhooks", "/bare/webhooks"),
        url.replace("/webhooks", "/bare/raw"),
    ] {
        let headers = pairs(&sign("msg_bare", &body));
        assert_eq!(
            post_signed(&client, &bare, &headers, body.clone()).await.0,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{bare}"
        );
    }
    assert!(
        Rejection::NotConfigured
            .reason()
            .contains("put a WebhookLayer on the route, or verify with VerifiedJson"),
        "{}",
        Rejection::NotConfigured.reason()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stripe_events_are_claimed_by_the_body_id_by_default() {
    let store = MemoryInbox::new();
    let stripe = Verifier::builder(Scheme::stripe())
        .with_secret("whsec_stripe")
        .unwrap()
        .build()
        .unwrap();
    let app = Router::new().route("/webhooks", post(|| async {})).layer(
        WebhookLayer::new(stripe)
            .with_inbox(store.clone(), "stripe")
            .unwrap(),
    );
    let url = serve(app).await;
    let client = reqwest::Client::new();
    let body = br#"{"id":"evt_1","type":"invoice.paid"}"#.to_vec();
    let signer = Signer::new(Scheme::stripe(), ["whsec_stripe"]).unwrap();
    for expected in [StatusCode::ACCEPTED, StatusCode::OK] {
        // Each retry is signed anew, as Stripe does.
        let headers = pairs(&signer.sign("ignored", SystemTime::now(), &body).unwrap());
        assert_eq!(
            post_signed(&client, &url, &headers, body.clone()).await.0,
            expected
        );
    }
    assert_eq!(support::drain(&store, "stripe").await, ["evt_1"]);
}

/// GitHub signs the body only. A captured request resent under a fresh
/// `X-GitHub-Delivery`, or with none, is a duplicate; a new body without a
/// delivery id is a new event; a forged one is refused. Choosing
/// `EventKey::UnsignedHeader` brings the replay hole back, by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn github_replays_under_a_fresh_delivery_id_are_duplicates() {
    let secret = "It's a Secret to Everybody";
    let github = || {
        Verifier::builder(Scheme::github())
            .with_secret(secret)
            .unwrap()
            .build()
            .unwrap()
    };
    let signer = Signer::new(Scheme::github(), [secret]).unwrap();
    let store = MemoryInbox::new();
    let app = |key: EventKey, namespace: &str| {
        Router::new().route("/webhooks", post(|| async {})).layer(
            WebhookLayer::new(github())
                .with_event_key(key)
                .with_inbox(store.clone(), namespace)
                .unwrap(),
        )
    };
    let url = serve(app(EventKey::default(), "github")).await;
    let client = reqwest::Client::new();
    let body = br#"{"action":"opened","number":7}"#.to_vec();
    let signed = pairs(&signer.sign("d-1", SystemTime::now(), &body).unwrap());
    let with_delivery = |delivery: Option<&str>| -> HeaderPairs {
        let mut headers: HeaderPairs = signed
            .iter()
            .filter(|(name, _)| !name.eq_ignore_ascii_case("x-github-delivery"))
            .cloned()
            .collect();
        if let Some(delivery) = delivery {
            headers.push(("X-GitHub-Delivery".into(), delivery.into()));
        }
        headers
    };
    let post = |headers: HeaderPairs, body: Vec<u8>| {
        let (client, url) = (client.clone(), url.clone());
        async move { post_signed(&client, &url, &headers, body).await.0 }
    };
    assert_eq!(
        post(with_delivery(Some("d-1")), body.clone()).await,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        post(with_delivery(Some("d-2")), body.clone()).await,
        StatusCode::OK
    );
    assert_eq!(
        post(with_delivery(None), body.clone()).await,
        StatusCode::OK
    );
    let other = br#"{"action":"closed","number":7}"#.to_vec();
    let other_signed = pairs(&signer.sign("unused", SystemTime::now(), &other).unwrap());
    let other_headers: HeaderPairs = other_signed
        .into_iter()
        .filter(|(name, _)| !name.eq_ignore_ascii_case("x-github-delivery"))
        .collect();
    assert_eq!(
        post(other_headers.clone(), other.clone()).await,
        StatusCode::ACCEPTED
    );
    let mut forged = other.clone();
    forged.push(b' ');
    assert_eq!(post(other_headers, forged).await, StatusCode::BAD_REQUEST);
    assert_eq!(support::drain(&store, "github").await.len(), 2);

    let by_header = serve(app(EventKey::UnsignedHeader, "github-by-header")).await;
    for (delivery, expected) in [("d-1", StatusCode::ACCEPTED), ("d-2", StatusCode::ACCEPTED)] {
        let headers = with_delivery(Some(delivery));
        assert_eq!(
            post_signed(&client, &by_header, &headers, body.clone())
                .await
                .0,
            expected,
            "the unsigned id, chosen by name, lets the replay in"
        );
    }
    let headers = with_delivery(None);
    assert_eq!(
        post_signed(&client, &by_header, &headers, body.clone())
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_loris_body_is_cut_off_at_the_timeout() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let app = Router::new().route("/webhooks", post(|| async {})).layer(
        WebhookLayer::new(verifier())
            .with_body_timeout(Duration::from_secs(1))
            .with_inbox(MemoryInbox::new(), "slow")
            .unwrap(),
    );
    let url = serve(app).await;
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/webhooks");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let body = vec![b'x'; 100];
    let mut head = String::from("POST /webhooks HTTP/1.1\r\nhost: test\r\ncontent-length: 100\r\n");
    for (name, value) in sign("msg_slow", &body).iter() {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let started = std::time::Instant::now();
    // Trickle the body a byte at a time; the server must answer anyway.
    let (mut reader, mut writer) = stream.into_split();
    let trickle = tokio::spawn(async move {
        for byte in body {
            if writer.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut response = vec![0u8; 1024];
    let read = reader.read(&mut response).await.unwrap();
    let elapsed = started.elapsed();
    let text = String::from_utf8_lossy(&response[..read]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    // What happened, not how fast: the answer came while the client still
    // had most of its body to send, and not before the deadline.
    assert!(
        !trickle.is_finished(),
        "the server answered before the client finished"
    );
    assert!(elapsed >= Duration::from_millis(900), "{elapsed:?}");
    trickle.abort();
}

/// `with_rejection_response` answers rejections the application's way (a
/// JSON document here) wherever the hook returns a response, and keeps the
/// plain-text default where it returns `None`; the rejection is in the
/// extensions either way.
#[tokio::test]
async fn rejections_are_answered_by_the_applications_hook_where_it_gives_one() {
    let layer = WebhookLayer::new(verifier())
        .with_body_limit(64)
        .with_rejection_response(|rejection| {
            if matches!(rejection, Rejection::BodyTooLarge { .. }) {
                return None;
            }
            http::Response::builder()
                .status(rejection.status())
                .header("content-type", "application/problem+json")
                .body(format!(r#"{{"title":"{}"}}"#, rejection.body_text()))
                .ok()
        });
    let service = ServiceBuilder::new()
        .layer(layer)
        .service_fn(|_: Request<Body>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Body::from("handled")))
        });
    let body = b"{}".to_vec();
    let mut request = Request::post("/");
    for (name, value) in pairs(&sign("msg_hook", &body)) {
        let value = if name == "webhook-signature" {
            "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".to_owned()
        } else {
            value
        };
        request = request.header(name, value);
    }
    let response = service
        .clone()
        .oneshot(request.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    assert!(matches!(
        response.extensions().get::<Rejection>(),
        Some(Rejection::Unverified(_))
    ));
    let text = axum::body::to_bytes(response.into_body(), 1024)
        .await
        .unwrap();
    assert_eq!(text, r#"{"title":"webhook verification failed"}"#);

    let too_large = Request::post("/")
        .header("content-length", "65")
        .body(Body::from(vec![b'x'; 65]))
        .unwrap();
    let response = service.oneshot(too_large).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; charset=utf-8"
    );
}

/// A custom answer to a 409 still tells the sender when to come back.
#[tokio::test]
async fn a_custom_answer_keeps_retry_after() {
    let store = MemoryInbox::new();
    let body = b"{}".to_vec();
    let headers = pairs(&sign("msg_busy", &body));
    let held = store
        .claim("busy", "msg_busy", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(matches!(held, hooklatch::dedup::Claim::Fresh(_)));
    let layer = WebhookLayer::new(verifier())
        .with_rejection_response(|rejection| {
            http::Response::builder()
                .status(rejection.status())
                .body(format!(r#"{{"title":"{}"}}"#, rejection.body_text()))
                .ok()
        })
        .with_lease(store, "busy", Duration::from_secs(30))
        .unwrap();
    let service = ServiceBuilder::new()
        .layer(layer)
        .service_fn(|_: Request<Body>| async {
            Ok::<_, std::convert::Infallible>(http::Response::new(Body::from("handled")))
        });
    let mut request = Request::post("/");
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let response = service
        .oneshot(request.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let retry_after: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=30).contains(&retry_after), "{retry_after}");
}

/// With replica acks on a Redis that has no replica, both modes answer 503
/// after doing their work, so the sender retries; the work is kept, so a
/// delivery without the wait finds it: a duplicate for the inbox, done for
/// a lease (the handler does not run again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_acks_that_fall_short_answer_503_and_the_retry_finds_the_work_kept() {
    let server = support::redis();
    let plain = RedisInbox::connect(&server.url()).await.unwrap();
    let waiting = plain
        .clone()
        .with_replica_acks(1, Duration::from_millis(50));
    let namespace = support::unique("acks");
    let client = reqwest::Client::new();
    let body = br#"{"type":"ping"}"#.to_vec();
    let headers = pairs(&sign("msg_acks", &body));

    let inbox_short = serve(inbox_app(waiting.clone(), &namespace)).await;
    let inbox_plain = serve(inbox_app(plain.clone(), &namespace)).await;
    let (status, _) = post_signed(&client, &inbox_short, &headers, body.clone()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let (status, text) = post_signed(&client, &inbox_plain, &headers, body.clone()).await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "duplicate"));

    let runs = Arc::new(AtomicUsize::new(0));
    let lease_app = |store: RedisInbox| {
        let runs = Arc::clone(&runs);
        Router::new()
            .route(
                "/webhooks",
                post(move || async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    "handled"
                }),
            )
            .layer(
                WebhookLayer::new(verifier())
                    .with_lease(
                        store,
                        &format!("{namespace}-lease"),
                        Duration::from_secs(30),
                    )
                    .unwrap(),
            )
    };
    let lease_short = serve(lease_app(waiting)).await;
    let lease_plain = serve(lease_app(plain)).await;
    let (status, _) = post_signed(&client, &lease_short, &headers, body.clone()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let (status, text) = post_signed(&client, &lease_plain, &headers, body).await;
    assert_eq!((status, text.as_str()), (StatusCode::OK, "duplicate"));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
}

/// A handler behind the layer sees what the provider said about the
/// delivery: GitHub's event type and delivery id, and a header it asked to
/// keep; a Stripe event's type comes from its body.
#[tokio::test]
async fn handlers_see_the_event_type_delivery_id_and_kept_headers() {
    let secret = "It's a Secret to Everybody";
    let verifier = Verifier::builder(Scheme::github())
        .with_secret(secret)
        .unwrap()
        .build()
        .unwrap();
    let handler = |Extension(event): Extension<VerifiedEvent>| async move {
        format!(
            "{}|{}|{:?}",
            event.event_type().unwrap_or("-"),
            event.delivery_id().unwrap_or("-"),
            event.kept_headers()
        )
    };
    let layer = WebhookLayer::new(verifier)
        .with_receiver(|receiver| {
            receiver.with_kept_headers(["x-github-hook-installation-target-id"])
        })
        .unwrap();
    let url = serve(Router::new().route("/webhooks", post(handler)).layer(layer)).await;
    let body = br#"{"ref":"refs/heads/main"}"#.to_vec();
    let mut headers = pairs(
        &Signer::new(Scheme::github(), [secret])
            .unwrap()
            .sign("d-1", SystemTime::now(), &body)
            .unwrap(),
    );
    headers.push(("X-GitHub-Event".into(), "push".into()));
    headers.push((
        "X-GitHub-Hook-Installation-Target-ID".into(),
        "79929171".into(),
    ));
    let (status, text) = post_signed(&reqwest::Client::new(), &url, &headers, body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        text,
        r#"push|d-1|[("x-github-hook-installation-target-id", "79929171")]"#
    );

    let stripe = Verifier::builder(Scheme::stripe())
        .with_secret("whsec_test_secret")
        .unwrap()
        .build()
        .unwrap();
    let url = serve(
        Router::new()
            .route("/webhooks", post(handler))
            .layer(WebhookLayer::new(stripe)),
    )
    .await;
    let body = br#"{"id":"evt_1","type":"invoice.paid"}"#.to_vec();
    let headers = pairs(
        &Signer::new(Scheme::stripe(), ["whsec_test_secret"])
            .unwrap()
            .sign("unused", SystemTime::now(), &body)
            .unwrap(),
    );
    let (_, text) = post_signed(&reqwest::Client::new(), &url, &headers, body).await;
    assert_eq!(text, "invoice.paid|-|[]");
}

/// The inbox as a route's own service: no dummy handler, the same answers.
#[tokio::test]
async fn the_inbox_endpoint_needs_no_handler() {
    let store = MemoryInbox::new();
    let inbox = WebhookLayer::new(verifier())
        .with_inbox(store.clone(), "endpoint")
        .unwrap();
    let app = Router::new().route(
        "/webhooks",
        axum::routing::post_service(inbox.into_endpoint()),
    );
    let url = serve(app).await;
    let client = reqwest::Client::new();
    let body = br#"{"type":"ping"}"#.to_vec();
    let headers = pairs(&sign("msg_endpoint", &body));
    assert_eq!(
        post_signed(&client, &url, &headers, body.clone()).await,
        (StatusCode::ACCEPTED, "accepted".into())
    );
    assert_eq!(
        post_signed(&client, &url, &headers, body.clone()).await,
        (StatusCode::OK, "duplicate".into())
    );
    let forged = pairs(&sign_with(
        "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
        "msg_x",
        SystemTime::now(),
        &body,
    ));
    assert_eq!(
        post_signed(&client, &url, &forged, body).await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(support::drain(&store, "endpoint").await, ["msg_endpoint"]);
}

/// `VerifiedJson` takes its receiver from the router's state: a good body
/// is deserialized, a bad one is 422, a forged one 400.
#[tokio::test]
async fn verified_json_takes_its_receiver_from_the_state() {
    use hooklatch::receive::Receiver;
    use hooklatch_tower::VerifiedJson;

    #[derive(serde::Deserialize)]
    struct Paid {
        invoice: String,
    }
    let app = Router::new()
        .route(
            "/webhooks",
            post(|VerifiedJson(paid): VerifiedJson<Paid>| async move { paid.invoice }),
        )
        .with_state(Receiver::new(verifier()).with_body_limit(LIMIT));
    let url = serve(app).await;
    let client = reqwest::Client::new();
    let good = br#"{"invoice":"in_1"}"#.to_vec();
    let answer = post_signed(&client, &url, &pairs(&sign("msg_good", &good)), good).await;
    assert_eq!(answer, (StatusCode::OK, "in_1".into()));
    let bad = br#"{"invoice":7}"#.to_vec();
    let answer = post_signed(&client, &url, &pairs(&sign("msg_bad", &bad)), bad.clone()).await;
    assert_eq!(answer.0, StatusCode::UNPROCESSABLE_ENTITY);
    let forged = pairs(&sign_with(
        "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
        "msg_forged",
        SystemTime::now(),
        &bad,
    ));
    assert_eq!(
        post_signed(&client, &url, &forged, bad).await.0,
        StatusCode::BAD_REQUEST
    );
}

/// A second secret, so a leak of how many there are or which matched
/// would have something to leak.
const OTHER_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

/// Three refused requests, as `(what, headers, body)`: signed an hour
/// ago, tampered with after signing, and without a signature header.
fn refused_requests() -> Vec<(&'static str, HeaderPairs, Vec<u8>)> {
    let body = br#"{"invoice":"in_1"}"#.to_vec();
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let stale = pairs(&sign_with(SECRET, "msg_stale", an_hour_ago, &body));
    let tampered = pairs(&sign("msg_tampered", &body));
    let unsigned: HeaderPairs = pairs(&sign("msg_unsigned", &body))
        .into_iter()
        .filter(|(name, _)| name != "webhook-signature")
        .collect();
    vec![
        ("timestamp_too_old", stale, body.clone()),
        (
            "signature_mismatch",
            tampered,
            br#"{"invoice":"in_2"}"#.to_vec(),
        ),
        ("missing_header", unsigned, body),
    ]
}

/// What a refused answer must never hold: either secret (whole or
/// without its prefix) and the base64 of any signature sent or expected.
fn secrets_and_signatures(headers: &HeaderPairs, body: &[u8]) -> Vec<String> {
    let mut never = Vec::new();
    for secret in [SECRET, OTHER_SECRET] {
        never.push(secret.to_owned());
        never.push(secret.trim_start_matches("whsec_").to_owned());
    }
    let value = |headers: &HeaderPairs, name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let signatures = |value: String| {
        value
            .split(' ')
            .filter_map(|s| s.split_once(',').map(|(_, b64)| b64.to_owned()))
            .collect::<Vec<_>>()
    };
    never.extend(
        value(headers, "webhook-signature")
            .map(signatures)
            .unwrap_or_default(),
    );
    // What each secret would have signed this body with, at the sent time.
    if let (Some(id), Some(at)) = (
        value(headers, "webhook-id"),
        value(headers, "webhook-timestamp"),
    ) {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(at.parse().unwrap());
        for secret in [SECRET, OTHER_SECRET] {
            let expected = pairs(&sign_with(secret, &id, at, body));
            never.extend(
                value(&expected, "webhook-signature")
                    .map(signatures)
                    .unwrap_or_default(),
            );
        }
    }
    never
}

/// Opted in with `with_reason_in_body(true)`, a refused request's 400 says
/// the reason's kind (a stale timestamp, a bad signature, a missing
/// header) after the generic text; by default it says the generic text
/// alone. Neither ever holds a secret, a signature, or how many secrets
/// there are.
#[tokio::test]
async fn reason_in_body_names_the_kind_only_when_opted_in() {
    let two_secrets = || {
        Verifier::builder(Scheme::standard_webhooks())
            .with_secret(SECRET)
            .unwrap()
            .with_secret(OTHER_SECRET)
            .unwrap()
            .build()
            .unwrap()
    };
    let app = |layer: WebhookLayer| {
        Router::new()
            .route("/webhooks", post(|| async { "handled" }))
            .layer(layer)
    };
    let opted_in = serve(app(
        WebhookLayer::new(two_secrets()).with_reason_in_body(true)
    ))
    .await;
    let by_default = serve(app(WebhookLayer::new(two_secrets()))).await;
    let client = reqwest::Client::new();
    for (kind, headers, body) in refused_requests() {
        let (status, text) = post_signed(&client, &opted_in, &headers, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{kind}");
        let prefix = format!("webhook verification failed: {kind} (");
        assert!(text.starts_with(&prefix), "{kind}: {text}");
        assert!(text.ends_with(')'), "{kind}: {text}");
        let (status, generic) = post_signed(&client, &by_default, &headers, body.clone()).await;
        assert_eq!(
            (status, generic.as_str()),
            (StatusCode::BAD_REQUEST, "webhook verification failed"),
            "{kind}"
        );
        for never in secrets_and_signatures(&headers, &body) {
            assert!(!text.contains(&never), "{kind}: {text} holds {never}");
        }
        assert!(
            !text.chars().any(|c| c.is_ascii_digit()),
            "{kind}: {text} holds a number"
        );
    }
}

/// Twilio's published request (a voice webhook's form, signed over the
/// URL configured in Twilio, not the one this server listens on) through
/// the layer: accepted once; resent with its parameters reordered, the
/// same event; a changed parameter or a body that is not a form, refused.
#[tokio::test]
async fn twilio_forms_through_the_layer_are_accepted_once_however_reordered() {
    let vectors: serde_json::Value =
        serde_json::from_str(include_str!("../../../tests/provider_vectors.json")).unwrap();
    let vector = &vectors["twilio"][0];
    let text = |key: &str| vector[key].as_str().unwrap().to_owned();
    let verifier = Verifier::builder(Scheme::twilio(&text("url")).unwrap())
        .with_secret(&text("secret"))
        .unwrap()
        .build()
        .unwrap();
    let store = MemoryInbox::new();
    let app = Router::new().route("/webhooks", post(|| async {})).layer(
        WebhookLayer::new(verifier)
            .with_inbox(store.clone(), "twilio")
            .unwrap(),
    );
    let url = serve(app).await;
    let client = reqwest::Client::new();
    let headers: HeaderPairs = vec![
        ("X-Twilio-Signature".into(), text("header")),
        (
            "Content-Type".into(),
            "application/x-www-form-urlencoded".into(),
        ),
    ];
    let send = |body: &str| post_signed(&client, &url, &headers, body.as_bytes().to_vec());
    assert_eq!(send(&text("body")).await.0, StatusCode::ACCEPTED);
    let reordered = "To=%2B18005551212&From=%2B14158675309&Digits=1234&Caller=%2B14158675309\
                     &CallSid=CA1234567890ABCDE";
    assert_eq!(send(reordered).await.0, StatusCode::OK, "the same event");
    let changed = text("body").replace("Digits=1234", "Digits=1235");
    assert_eq!(send(&changed).await.0, StatusCode::BAD_REQUEST);
    assert_eq!(send("Digits=%zz").await.0, StatusCode::BAD_REQUEST);
    let taken = store.take("twilio", "test", 10).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].body, text("body").as_bytes());
}

/// A store of the user's own that implements only `Inbox::accept` (here:
/// ids kept in memory, each event handed to a list) is all the layer
/// needs: a new event is 202, its retry 200, and the store saw it once.
#[tokio::test]
async fn a_store_that_only_accepts_serves_the_layer() {
    let store = support::AcceptOnly::default();
    let url = serve(inbox_app(store.clone(), "own")).await;
    let client = reqwest::Client::new();
    let body = br#"{"n":1}"#.to_vec();
    let headers = pairs(&sign("msg_own_store", &body));
    let (first, _) = post_signed(&client, &url, &headers, body.clone()).await;
    let (retry, _) = post_signed(&client, &url, &headers, body.clone()).await;
    assert_eq!((first, retry), (StatusCode::ACCEPTED, StatusCode::OK));
    let handed = store.handed();
    assert_eq!(
        handed.seen,
        std::collections::HashSet::from(["own/msg_own_store".to_owned()])
    );
    assert_eq!(handed.bodies, [body]);
}
